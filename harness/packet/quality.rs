//! `<arm>-quality.json`: the untimed, teacher-forced quality receipts of one arm, and the rules
//! they are judged by.
//!
//! Each comparison sets the arm's logits beside a reference's at every sampled position (prompt
//! positions and the first output positions, the reference's greedy tokens fed back). A receipt
//! keeps the cosine of the two logit vectors, both greedy ids and the reference's top-2 margin;
//! never the logits themselves.

use serde::{Deserialize, Serialize};

/// `strict-token-parity v1`: the least logits cosine at every position.
pub const PARITY_V1_MIN_COSINE: f64 = 0.9999;
/// `strict-token-parity v1`: a greedy mismatch where the reference's top-2 logit margin is below
/// this (in logits) is a recorded near-tie, not a failure. At cosine 0.9999 over a vocabulary the
/// logits differ by about 1.4 % of their norm, a few hundredths of a logit per entry, so two
/// candidates closer than 0.1 can swap order without either engine being wrong.
pub const PARITY_V1_NEAR_TIE_MARGIN: f64 = 0.1;

/// `own-rounding-parity v1`: the most the median position's logits may move from the reference
/// rounding as the engine does (1 − cosine). Where the rounding is mirrored most positions match
/// to f32 precision (1 − cosine ~1e-14 measured on the trained tiny models); one rounding left
/// unmirrored (ggml's f16 attention, its Q8_K activations) moves the median to 2e-5–5e-5.
pub const OWN_ROUNDING_V1_MAX_MEDIAN_GAP: f64 = 1e-5;
/// `own-rounding-parity v1`: the least cosine at any position. An engine that rounds its
/// activations to 8-bit codes turns a last-bit difference upstream (another summation order)
/// into a whole code step now and then, which moves that position alone: 1 − cosine up to
/// 2.2e-4 measured (llama.cpp's CPU build on the trained tiny models), so the floor sits at 5e-4.
pub const OWN_ROUNDING_V1_MIN_COSINE: f64 = 0.9995;

/// What the arm's logits are compared with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[allow(clippy::large_enum_variant)]
pub enum Against {
    /// A reference run on the unquantized source weights.
    Reference {
        engine: ReferenceEngine,
        /// The reference's weights, lowercase: `f32`, `f16`, `bf16`, or `q8_0` where disk
        /// forbids more (the schema allows only these).
        weights: String,
        /// sha256 of those weights.
        weights_sha256: String,
        /// What those weights are, in words (seeded random, trained, the quantized blocks
        /// dequantized), so a quantization cost is read for what it measures.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// Another arm of the same packet (same GGUF: token parity).
    Arm { arm: String },
    /// The reference run on the envelope's own (quantized) weights with its mat-vec inputs and
    /// attention rounded as the arm's engine rounds them (judged by own-rounding parity v1: the
    /// same model, computed alike), rather than the one that rounds nothing.
    OwnRounding {
        engine: ReferenceEngine,
        /// sha256 of the weights the reference ran: the envelope's GGUF.
        weights_sha256: String,
        /// The arm whose rounding the reference mirrors (always the arm judged).
        rounds_as: String,
        /// The rounding, rule by rule: which rows it covers and how.
        rounding: Vec<RoundingRule>,
        /// Why this rounding is the engine's, in words (its kernel paths, its backend).
        why: String,
    },
}

/// How the reference rounded one set of rows (names of `fak::reference::Activations` and
/// `fak::reference::AttentionRounding`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundingRule {
    /// Which rows, in words (e.g. "steps of more than 8 ids (mat-mul)").
    pub rows: String,
    /// The projections' inputs: `f32`, `ggml-cpu`, `q8-blocks`, `f16-tiles`, or `not emulated`.
    pub activations: String,
    /// Attention: `f32`, `f16-cache`, `ggml-flash-f16`.
    pub attention: String,
}

/// Which reference produced the logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReferenceEngine {
    /// fak's CPU reference forward pass (f32 math, f64 accumulation).
    CpuReference,
    /// fak's own f32 GPU path (itself checked against the CPU reference by `selftest`).
    FakF32Gpu,
}

impl ReferenceEngine {
    /// `cpu-reference` or `fak-f32-gpu`, as the packet writes it.
    pub fn label(self) -> &'static str {
        match self {
            ReferenceEngine::CpuReference => "cpu-reference",
            ReferenceEngine::FakF32Gpu => "fak-f32-gpu",
        }
    }
}

/// The rule a comparison is judged by.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name")]
pub enum QualityRule {
    /// Same weights, two engines: every position's cosine ≥ `min_cosine` and identical greedy
    /// tokens except where the reference's top-2 margin is below `near_tie_margin`.
    #[serde(rename = "strict-token-parity-v1")]
    StrictTokenParityV1 {
        min_cosine: f64,
        near_tie_margin: f64,
    },
    /// What quantization costs against unquantized weights: reported, with no pass or fail.
    #[serde(rename = "quantization-cost")]
    QuantizationCost,
    /// One engine against the reference rounding as that engine does (its own-rounding
    /// reference, same weights): the median position's 1 − cosine at most `max_median_gap`,
    /// every position's cosine at least `min_cosine`, greedy tokens identical except where the
    /// reference's top-2 margin is below `near_tie_margin`.
    #[serde(rename = "own-rounding-parity-v1")]
    OwnRoundingParityV1 {
        max_median_gap: f64,
        min_cosine: f64,
        near_tie_margin: f64,
    },
    /// Two engines on the same weights, each rounding its own way: at every position the angle
    /// between their logits is at most the angle between the two own-rounding references (the
    /// rounding budget, [`PositionReceipt::rounding_budget`]) plus twice the angle strict
    /// parity v1 allows engines that compute alike (`min_cosine`), once for each engine: a gap
    /// beyond it is not the two roundings. A greedy mismatch fails unless the reference's top-2 margin is below
    /// `near_tie_margin` or the two references' own greedy tokens differ there (the rounding
    /// itself flips it).
    #[serde(rename = "cross-engine-within-rounding-v1")]
    CrossEngineWithinRoundingV1 {
        min_cosine: f64,
        near_tie_margin: f64,
    },
}

impl QualityRule {
    /// `strict-token-parity v1` with its fixed thresholds.
    pub fn parity_v1() -> Self {
        QualityRule::StrictTokenParityV1 {
            min_cosine: PARITY_V1_MIN_COSINE,
            near_tie_margin: PARITY_V1_NEAR_TIE_MARGIN,
        }
    }

    /// `own-rounding-parity v1` with its thresholds.
    pub fn own_rounding_v1() -> Self {
        QualityRule::OwnRoundingParityV1 {
            max_median_gap: OWN_ROUNDING_V1_MAX_MEDIAN_GAP,
            min_cosine: OWN_ROUNDING_V1_MIN_COSINE,
            near_tie_margin: PARITY_V1_NEAR_TIE_MARGIN,
        }
    }

    /// `cross-engine-within-rounding v1`, with strict parity v1's thresholds.
    pub fn cross_engine_v1() -> Self {
        QualityRule::CrossEngineWithinRoundingV1 {
            min_cosine: PARITY_V1_MIN_COSINE,
            near_tie_margin: PARITY_V1_NEAR_TIE_MARGIN,
        }
    }
}

/// Whether two engines' logits at cosine `cosine` stay within the rounding budget: their angle
/// at most the two own-rounding references' angle (`budget_cosine`) plus twice the angle
/// `min_cosine` allows (angles obey the triangle inequality: two engines each within that angle
/// of its own reference on these entries cannot be further apart).
pub fn within_rounding_budget(cosine: f64, budget_cosine: f64, min_cosine: f64) -> bool {
    let angle = |c: f64| c.clamp(-1.0, 1.0).acos();
    cosine.is_finite()
        && budget_cosine.is_finite()
        && angle(cosine) <= angle(budget_cosine) + 2.0 * angle(min_cosine) + 1e-12
}

/// A teacher-forced position the engine gave no probabilities for (llama-server withholds a
/// token's while its text is an incomplete UTF-8 sequence): it has no receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithheldPosition {
    pub prompt_index: usize,
    pub position: usize,
}

/// One teacher-forced position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PositionReceipt {
    /// Which envelope prompt.
    pub prompt_index: usize,
    /// Position in the teacher-forced sequence (prompt positions first, then output positions).
    pub position: usize,
    /// Cosine of the two logit vectors (over the reference's top-k ids when `top_k` is set).
    pub cosine: f64,
    pub greedy_reference: u32,
    pub greedy_arm: u32,
    /// The reference's top-1 minus top-2 logit.
    pub reference_top2_margin: f64,
    /// Cross-engine receipts: the two own-rounding references at this position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounding_budget: Option<RoundingBudget>,
}

/// The two engines' own-rounding references compared with each other on the same entries as
/// the engines: what rounding alone moves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundingBudget {
    /// Their cosine.
    pub cosine: f64,
    /// Their greedy tokens (the first engine's reference, then the second's).
    pub greedy: [u32; 2],
}

impl PositionReceipt {
    pub fn agrees(&self) -> bool {
        self.greedy_reference == self.greedy_arm
    }
}

/// What the receipts of one comparison add up to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualitySummary {
    pub positions: usize,
    pub min_cosine: f64,
    pub mean_cosine: f64,
    /// Fraction of positions whose greedy ids agree.
    pub greedy_agreement: f64,
    /// Greedy mismatches at positions whose reference margin is at least the near-tie threshold
    /// (all mismatches under a rule without one).
    pub mismatches: usize,
    /// Greedy mismatches at recorded near-ties.
    pub near_tie_mismatches: usize,
    /// Own-rounding parity: the upper median over positions of 1 − cosine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_gap: Option<f64>,
    /// Cross-engine: the least cosine between the two own-rounding references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_budget_cosine: Option<f64>,
    /// Cross-engine: positions whose gap exceeds the rounding budget (or that have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_budget: Option<usize>,
    /// Cross-engine: greedy mismatches where the two references' own greedy tokens differ too
    /// (not counted in `mismatches`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounding_flips: Option<usize>,
    /// The rule's verdict; `None` for a rule that reports only.
    pub passed: Option<bool>,
}

/// One comparison of an arm's logits with a reference's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityComparison {
    pub against: Against,
    pub rule: QualityRule,
    /// `Some(k)` when the engine exposes only its top-k (llama-server `n_probs`): cosines are over
    /// the reference's top-k ids only.
    pub top_k: Option<u32>,
    pub receipts: Vec<PositionReceipt>,
    /// Positions the engine withheld (no receipt, not in the summary).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<WithheldPosition>,
    pub summary: QualitySummary,
}

impl QualityComparison {
    /// A comparison with its summary computed from the receipts under the rule.
    pub fn new(
        against: Against,
        rule: QualityRule,
        top_k: Option<u32>,
        receipts: Vec<PositionReceipt>,
    ) -> Self {
        let summary = summarize(&rule, &receipts);
        QualityComparison {
            against,
            rule,
            top_k,
            receipts,
            withheld: Vec::new(),
            summary,
        }
    }

    /// The same, noting positions the engine withheld.
    pub fn with_withheld(self, withheld: Vec<WithheldPosition>) -> Self {
        QualityComparison { withheld, ..self }
    }
}

/// Whether an arm's quality pass ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum QualityStatus {
    Ran,
    Skipped { reason: String },
}

/// `<arm>-quality.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmQuality {
    /// [`super::QUALITY_SCHEMA`]; [`ArmQuality::new`] and the writer fill it in.
    pub schema: String,
    pub arm: String,
    pub status: QualityStatus,
    /// The prompts sampled (envelope prompt indices) and the output positions fed back per prompt.
    pub prompt_indices: Vec<usize>,
    pub output_positions: usize,
    pub comparisons: Vec<QualityComparison>,
    /// Why the arm has no own-rounding reference (no own-rounding parity judged for it), where it
    /// ran on the envelope's weights yet has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_rounding_skipped: Option<String>,
}

impl ArmQuality {
    pub fn new(
        arm: &str,
        status: QualityStatus,
        prompt_indices: Vec<usize>,
        output_positions: usize,
        comparisons: Vec<QualityComparison>,
    ) -> Self {
        ArmQuality {
            schema: super::QUALITY_SCHEMA.to_owned(),
            arm: arm.to_owned(),
            status,
            prompt_indices,
            output_positions,
            comparisons,
            own_rounding_skipped: None,
        }
    }
}

/// The summary of receipts under a rule. An empty receipt list summarises to zero positions and
/// (under a pass/fail rule) a failure: nothing compared proves nothing.
pub fn summarize(rule: &QualityRule, receipts: &[PositionReceipt]) -> QualitySummary {
    let near_tie = match rule {
        QualityRule::StrictTokenParityV1 {
            near_tie_margin, ..
        }
        | QualityRule::CrossEngineWithinRoundingV1 {
            near_tie_margin, ..
        }
        | QualityRule::OwnRoundingParityV1 {
            near_tie_margin, ..
        } => *near_tie_margin,
        QualityRule::QuantizationCost => f64::NEG_INFINITY,
    };
    let n = receipts.len();
    let min_cosine = receipts
        .iter()
        .map(|r| r.cosine)
        .fold(f64::INFINITY, f64::min);
    let mean_cosine = receipts.iter().map(|r| r.cosine).sum::<f64>() / n.max(1) as f64;
    let agreeing = receipts.iter().filter(|r| r.agrees()).count();
    let near_tie_mismatches = receipts
        .iter()
        .filter(|r| !r.agrees() && r.reference_top2_margin < near_tie)
        .count();
    let mut summary = QualitySummary {
        positions: n,
        min_cosine: if n == 0 { 0.0 } else { min_cosine },
        mean_cosine,
        greedy_agreement: agreeing as f64 / n.max(1) as f64,
        mismatches: n - agreeing - near_tie_mismatches,
        near_tie_mismatches,
        median_gap: None,
        min_budget_cosine: None,
        beyond_budget: None,
        rounding_flips: None,
        passed: None,
    };
    summary.passed = match rule {
        QualityRule::StrictTokenParityV1 { min_cosine: m, .. } => {
            Some(n > 0 && min_cosine >= *m && summary.mismatches == 0)
        }
        QualityRule::QuantizationCost => None,
        QualityRule::OwnRoundingParityV1 {
            max_median_gap,
            min_cosine: m,
            ..
        } => {
            let mut gaps: Vec<f64> = receipts.iter().map(|r| 1.0 - r.cosine).collect();
            gaps.sort_by(f64::total_cmp);
            let median = gaps.get(n / 2).copied().unwrap_or(f64::INFINITY);
            summary.median_gap = Some(if n == 0 { 1.0 } else { median });
            Some(n > 0 && median <= *max_median_gap && min_cosine >= *m && summary.mismatches == 0)
        }
        QualityRule::CrossEngineWithinRoundingV1 { min_cosine: m, .. } => {
            let budget = |r: &PositionReceipt| r.rounding_budget.clone();
            let flips = receipts
                .iter()
                .filter(|r| {
                    !r.agrees()
                        && r.reference_top2_margin >= near_tie
                        && budget(r).is_some_and(|b| b.greedy[0] != b.greedy[1])
                })
                .count();
            let beyond = receipts
                .iter()
                .filter(|r| {
                    budget(r).is_none_or(|b| !within_rounding_budget(r.cosine, b.cosine, *m))
                })
                .count();
            let min_budget = receipts
                .iter()
                .filter_map(|r| budget(r).map(|b| b.cosine))
                .fold(f64::INFINITY, f64::min);
            summary.mismatches -= flips;
            summary.rounding_flips = Some(flips);
            summary.beyond_budget = Some(beyond);
            summary.min_budget_cosine = Some(if min_budget.is_finite() {
                min_budget
            } else {
                0.0
            });
            Some(n > 0 && beyond == 0 && summary.mismatches == 0)
        }
    };
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(cosine: f64, r: u32, a: u32, margin: f64) -> PositionReceipt {
        PositionReceipt {
            prompt_index: 0,
            position: 0,
            cosine,
            greedy_reference: r,
            greedy_arm: a,
            reference_top2_margin: margin,
            rounding_budget: None,
        }
    }

    fn budgeted(cosine: f64, greedy: [u32; 2], budget: f64, refs: [u32; 2]) -> PositionReceipt {
        PositionReceipt {
            rounding_budget: Some(RoundingBudget {
                cosine: budget,
                greedy: refs,
            }),
            ..receipt(cosine, greedy[0], greedy[1], 3.0)
        }
    }

    /// The gap may reach the references' own angle plus strict parity's slack for each engine,
    /// not more; a greedy flip is forgiven only where the references flip too.
    #[test]
    fn cross_engine_gap_is_judged_against_the_rounding_budget() {
        let rule = QualityRule::cross_engine_v1();
        let slack = 2.0 * 0.9999f64.acos();
        // Budget cosine 0.9995: the allowed angle is acos(0.9995) + 2·acos(0.9999).
        let limit = (0.9995f64.acos() + slack).cos();
        let inside = [budgeted(limit + 1e-9, [5, 5], 0.9995, [5, 5])];
        let s = summarize(&rule, &inside);
        assert_eq!((s.passed, s.beyond_budget), (Some(true), Some(0)));
        assert_eq!(s.min_budget_cosine, Some(0.9995));
        let outside = [budgeted(limit - 1e-6, [5, 5], 0.9995, [5, 5])];
        assert_eq!(summarize(&rule, &outside).beyond_budget, Some(1));
        assert_eq!(summarize(&rule, &outside).passed, Some(false));
        // Identical references leave only the slack, 2·acos(0.9999) (cosine 0.99960): 0.9995
        // is beyond it, 0.9997 within.
        assert!(!within_rounding_budget(0.9995, 1.0, 0.9999));
        assert!(within_rounding_budget(0.9997, 1.0, 0.9999));
        // A flip where the references flip too is rounding; where they agree it fails.
        let flip = [budgeted(0.9999, [5, 6], 0.9999, [5, 6])];
        let s = summarize(&rule, &flip);
        assert_eq!(
            (s.mismatches, s.rounding_flips, s.passed),
            (0, Some(1), Some(true))
        );
        let real = [budgeted(0.9999, [5, 6], 0.9999, [5, 5])];
        assert_eq!(summarize(&rule, &real).passed, Some(false));
        // A receipt without a budget is beyond it; nothing compared passes nothing.
        assert_eq!(
            summarize(&rule, &[receipt(1.0, 1, 1, 3.0)]).passed,
            Some(false)
        );
        assert_eq!(summarize(&rule, &[]).passed, Some(false));
        // Older rules leave the cross-engine fields out of the JSON.
        let v1 = serde_json::to_value(summarize(&QualityRule::parity_v1(), &inside)).unwrap();
        assert!(v1.get("beyond_budget").is_none() && v1.get("min_budget_cosine").is_none());
    }

    /// Most positions must match; a few code-step outliers above the floor pass, a rounding
    /// left unmirrored (every position off by 3e-5) or one position below the floor does not.
    #[test]
    fn own_rounding_parity_needs_a_matched_median_and_the_floor() {
        let rule = QualityRule::own_rounding_v1();
        let mut rows: Vec<PositionReceipt> =
            (0..10).map(|_| receipt(1.0 - 1e-13, 5, 5, 3.0)).collect();
        rows[2].cosine = 0.99978;
        rows[7].cosine = 0.9998;
        let s = summarize(&rule, &rows);
        assert_eq!(s.passed, Some(true), "{s:?}");
        assert!(s.median_gap.unwrap() < 1e-12);
        let unmirrored: Vec<PositionReceipt> =
            (0..10).map(|_| receipt(1.0 - 3e-5, 5, 5, 3.0)).collect();
        let s = summarize(&rule, &unmirrored);
        assert_eq!(s.passed, Some(false));
        assert!((s.median_gap.unwrap() - 3e-5).abs() < 1e-9);
        rows[4].cosine = 0.9994;
        assert_eq!(summarize(&rule, &rows).passed, Some(false));
        rows[4].cosine = 1.0;
        rows[5].greedy_arm = 6;
        assert_eq!(summarize(&rule, &rows).passed, Some(false));
        assert_eq!(summarize(&rule, &[]).passed, Some(false));
    }

    #[test]
    fn parity_v1_forgives_only_near_tie_mismatches() {
        let rule = QualityRule::parity_v1();
        // One agreement, one flip at a 0.05 margin (near-tie), cosines 1.0 and 0.99995.
        let ok = [receipt(1.0, 5, 5, 3.0), receipt(0.99995, 7, 8, 0.05)];
        let s = summarize(&rule, &ok);
        assert_eq!(
            (s.positions, s.mismatches, s.near_tie_mismatches),
            (2, 0, 1)
        );
        assert_eq!(s.passed, Some(true));
        assert_eq!(s.greedy_agreement, 0.5);
        assert_eq!(s.min_cosine, 0.99995);
        assert!((s.mean_cosine - 0.999975).abs() < 1e-15);
        // The same flip at a 0.5 margin is a real mismatch.
        let bad = [receipt(1.0, 5, 5, 3.0), receipt(0.99995, 7, 8, 0.5)];
        assert_eq!(summarize(&rule, &bad).passed, Some(false));
        // Cosine below 0.9999 fails even with every token equal.
        let low = [receipt(0.9998, 1, 1, 3.0)];
        assert_eq!(summarize(&rule, &low).passed, Some(false));
        // Nothing compared passes nothing.
        assert_eq!(summarize(&rule, &[]).passed, Some(false));
    }

    #[test]
    fn quantization_cost_reports_without_verdict() {
        let s = summarize(
            &QualityRule::QuantizationCost,
            &[receipt(0.98, 1, 2, 0.01), receipt(0.99, 3, 3, 1.0)],
        );
        assert_eq!(s.passed, None);
        assert_eq!((s.mismatches, s.near_tie_mismatches), (1, 0));
    }
}
