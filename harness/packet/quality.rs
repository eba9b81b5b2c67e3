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

/// What the arm's logits are compared with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
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
}

impl QualityRule {
    /// `strict-token-parity v1` with its fixed thresholds.
    pub fn parity_v1() -> Self {
        QualityRule::StrictTokenParityV1 {
            min_cosine: PARITY_V1_MIN_COSINE,
            near_tie_margin: PARITY_V1_NEAR_TIE_MARGIN,
        }
    }
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
        }
    }
}

/// The summary of receipts under a rule. An empty receipt list summarises to zero positions and
/// (under a pass/fail rule) a failure: nothing compared proves nothing.
pub fn summarize(rule: &QualityRule, receipts: &[PositionReceipt]) -> QualitySummary {
    let near_tie = match rule {
        QualityRule::StrictTokenParityV1 {
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
    let mismatches = n - agreeing - near_tie_mismatches;
    let passed = match rule {
        QualityRule::StrictTokenParityV1 { min_cosine: m, .. } => {
            Some(n > 0 && min_cosine >= *m && mismatches == 0)
        }
        QualityRule::QuantizationCost => None,
    };
    QualitySummary {
        positions: n,
        min_cosine: if n == 0 { 0.0 } else { min_cosine },
        mean_cosine,
        greedy_agreement: agreeing as f64 / n.max(1) as f64,
        mismatches,
        near_tie_mismatches,
        passed,
    }
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
        }
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
