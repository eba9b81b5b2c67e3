//! The untimed quality pass: teacher-forced logits of each arm against a reference run on the
//! unquantized source weights, and strict token parity between arms on the very same weights.
//!
//! Each quality prompt is the envelope prompt followed by the reference's first `tail` greedy
//! tokens; one row of logits is compared after every id (all prompt positions plus the first
//! `tail` output positions). Rows are reduced to numbers here: no logits leave this module.

use crate::arms::{Arm, Logits};
use anyhow::{Context, Result, bail};
use fak::gguf::Gguf;
use fak::reference::{DenseReference, Reference as _, ops::argmax};
use serde::Serialize;
use std::path::Path;

/// Entries of the reference's top-k over which top-k-only engines are compared.
pub const TOP_K: usize = 16;
/// What llama-server is asked for per position: wide enough that the reference's top-k almost
/// always lies inside it.
pub const N_PROBS: usize = 64;

/// `strict-token-parity v1` thresholds.
pub const PARITY_MIN_COSINE: f64 = 0.9999;

/// The reference's rows for one quality prompt.
pub struct ReferenceRows {
    /// The prompt plus the reference's greedy continuation.
    pub ids: Vec<u32>,
    pub logits: Vec<Vec<f32>>,
}

/// Which reference ran, on which weights.
#[derive(Clone, Debug, Serialize)]
pub struct ReferenceInfo {
    /// `cpu-reference` (fak::reference, f32 math, f64 sums) or `fak-f32-gpu` (fak's engine on the
    /// unquantized file, itself checked against the CPU reference by selftest).
    pub kind: String,
    pub weights: String,
    pub weights_sha256: String,
    pub why: String,
}

/// Runs the CPU reference on `gguf` for each prompt: greedy `tail` tokens, then every row.
pub fn cpu_reference(path: &Path, prompts: &[Vec<u32>], tail: usize) -> Result<Vec<ReferenceRows>> {
    let gguf = Gguf::open(path)?;
    let mut model = DenseReference::new(&gguf)
        .with_context(|| format!("the CPU reference on {}", path.display()))?;
    prompts
        .iter()
        .map(|prompt| {
            model.reset();
            let mut ids = prompt.clone();
            let mut logits = model.forward_all(prompt)?;
            for _ in 0..tail {
                let next = argmax(logits.last().expect("a non-empty prompt"));
                ids.push(next);
                logits.push(model.forward(next)?);
            }
            Ok(ReferenceRows { ids, logits })
        })
        .collect()
}

/// The same through an engine process (fak's f32 GPU path): greedy tail, then the rows.
pub fn arm_reference(
    arm: &mut dyn Arm,
    prompts: &[Vec<u32>],
    tail: usize,
) -> Result<Vec<ReferenceRows>> {
    prompts
        .iter()
        .map(|prompt| {
            let continuation = arm.generate(prompt, tail)?.tokens;
            let mut ids = prompt.clone();
            ids.extend(continuation);
            match arm.logits(&ids)? {
                Logits::Full(logits) => Ok(ReferenceRows { ids, logits }),
                Logits::TopK(_) => bail!("the reference gave top-k rows, not logits"),
            }
        })
        .collect()
}

/// One compared row.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Index of the id after which these logits come (0-based; `n_ctx − 1` predicts output 1).
    pub position: usize,
    /// The arm's greedy token.
    pub token: u32,
    pub reference_token: u32,
    /// Reference top-1 minus top-2 logit.
    pub reference_margin: f32,
    /// Cosine of the full logit vectors (None for top-k-only engines).
    pub cosine: Option<f64>,
    /// Cosine over the reference's top-k ids, both sides mean-centred (shift-invariant, so
    /// log-probabilities and logits compare alike); None when the arm lacks one of those ids.
    pub topk_cosine: Option<f64>,
    /// Reference top-k ids missing from the arm's answer (top-k-only engines).
    pub topk_missing: usize,
    /// The arm's values at the reference's top-k ids (NaN where missing), kept for parity.
    #[serde(skip)]
    pub topk_values: Vec<f32>,
}

/// An arm's rows against the reference, per quality prompt.
#[derive(Clone, Debug, Serialize)]
pub struct ArmQuality {
    /// `full-logits` or `top-k` (the engine exposes only top-k log-probabilities).
    pub compared_over: String,
    pub prompts: Vec<Vec<Row>>,
    pub summary: Summary,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub rows: usize,
    pub greedy_agreement: f64,
    pub cosine_min: Option<f64>,
    pub cosine_mean: Option<f64>,
    pub topk_cosine_min: Option<f64>,
    pub topk_cosine_mean: Option<f64>,
    pub topk_rows_missing_ids: usize,
}

/// Compares an arm's logits for one prompt with the reference's.
pub fn compare(reference: &ReferenceRows, arm: &Logits) -> Result<Vec<Row>> {
    let n = reference.logits.len();
    let arm_rows = match arm {
        Logits::Full(rows) => rows.len(),
        Logits::TopK(rows) => rows.len(),
    };
    if arm_rows != n {
        bail!("the arm gave {arm_rows} rows of logits for {n} ids");
    }
    (0..n)
        .map(|i| {
            let want = &reference.logits[i];
            let top = top_k(want, TOP_K);
            let want_top: Vec<f32> = top.iter().map(|&id| want[id as usize]).collect();
            let (token, cosine, values) = match arm {
                Logits::Full(rows) => {
                    let got = &rows[i];
                    if got.len() != want.len() {
                        bail!(
                            "row {i}: {} logits, the reference has {}",
                            got.len(),
                            want.len()
                        );
                    }
                    let values: Vec<f32> = top.iter().map(|&id| got[id as usize]).collect();
                    (argmax(got), Some(cosine(got, want)), values)
                }
                Logits::TopK(rows) => {
                    let entries = &rows[i];
                    let token = entries
                        .iter()
                        .max_by(|x, y| x.1.total_cmp(&y.1))
                        .map_or(u32::MAX, |e| e.0);
                    let values: Vec<f32> = top
                        .iter()
                        .map(|id| {
                            entries
                                .iter()
                                .find(|e| e.0 == *id)
                                .map_or(f32::NAN, |e| e.1)
                        })
                        .collect();
                    (token, None, values)
                }
            };
            let topk_missing = values.iter().filter(|v: &&f32| v.is_nan()).count();
            let topk_cosine = (topk_missing == 0).then(|| centred_cosine(&values, &want_top));
            Ok(Row {
                position: i,
                token,
                reference_token: argmax(want),
                reference_margin: margin(want),
                cosine,
                topk_cosine,
                topk_missing,
                topk_values: values,
            })
        })
        .collect()
}

pub fn summarize(compared_over: &str, prompts: Vec<Vec<Row>>) -> ArmQuality {
    let rows: Vec<&Row> = prompts.iter().flatten().collect();
    let agree = rows.iter().filter(|r| r.token == r.reference_token).count();
    let stats = |values: Vec<f64>| {
        let min = values.iter().copied().reduce(f64::min);
        let mean = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
        (min, mean)
    };
    let (cosine_min, cosine_mean) = stats(rows.iter().filter_map(|r| r.cosine).collect());
    let (topk_cosine_min, topk_cosine_mean) =
        stats(rows.iter().filter_map(|r| r.topk_cosine).collect());
    let summary = Summary {
        rows: rows.len(),
        greedy_agreement: agree as f64 / rows.len().max(1) as f64,
        cosine_min,
        cosine_mean,
        topk_cosine_min,
        topk_cosine_mean,
        topk_rows_missing_ids: rows.iter().filter(|r| r.topk_missing > 0).count(),
    };
    ArmQuality {
        compared_over: compared_over.into(),
        prompts,
        summary,
    }
}

/// One row of strict-token-parity v1 between two arms on the same weights.
#[derive(Clone, Debug, Serialize)]
pub struct ParityRow {
    pub prompt: usize,
    pub position: usize,
    pub token_a: u32,
    pub token_b: u32,
    pub reference_margin: f32,
    pub topk_cosine: Option<f64>,
    /// The tokens differ but the reference's top-2 margin is below the tie threshold.
    pub near_tie: bool,
    pub pass: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Parity {
    pub rule: &'static str,
    pub arms: [String; 2],
    pub min_cosine: f64,
    pub tie_margin: f32,
    pub compared_over: String,
    pub rows: usize,
    pub pass: bool,
    /// Every row that differs in token, misses the cosine, or is a near-tie.
    pub exceptions: Vec<ParityRow>,
    pub cosine_min: Option<f64>,
}

pub const PARITY_RULE: &str = "strict-token-parity v1: on every compared row, the cosine of the two arms' values over the reference's top-16 ids (mean-centred) is at least 0.9999, and the greedy tokens are identical except where the reference's top-2 logit margin is below the tie threshold (those rows are listed as near-ties)";

/// strict-token-parity v1 between two arms' rows (both compared to the same reference).
pub fn parity(a: (&str, &ArmQuality), b: (&str, &ArmQuality), tie_margin: f32) -> Parity {
    let mut exceptions = Vec::new();
    let mut cosines = Vec::new();
    let mut rows = 0;
    for (p, (ra, rb)) in a.1.prompts.iter().zip(&b.1.prompts).enumerate() {
        for (x, y) in ra.iter().zip(rb) {
            rows += 1;
            let complete = !x
                .topk_values
                .iter()
                .chain(&y.topk_values)
                .any(|v| v.is_nan());
            let cos = complete.then(|| centred_cosine(&x.topk_values, &y.topk_values));
            cosines.extend(cos);
            let same = x.token == y.token;
            let near_tie = !same && x.reference_margin < tie_margin;
            let cos_ok = cos.is_some_and(|c| c >= PARITY_MIN_COSINE);
            let pass = cos_ok && (same || near_tie);
            if !pass || near_tie {
                exceptions.push(ParityRow {
                    prompt: p,
                    position: x.position,
                    token_a: x.token,
                    token_b: y.token,
                    reference_margin: x.reference_margin,
                    topk_cosine: cos,
                    near_tie,
                    pass,
                });
            }
        }
    }
    Parity {
        rule: PARITY_RULE,
        arms: [a.0.to_string(), b.0.to_string()],
        min_cosine: PARITY_MIN_COSINE,
        tie_margin,
        compared_over: format!("the reference's top-{TOP_K} ids, mean-centred"),
        rows,
        pass: rows > 0 && exceptions.iter().all(|e| e.pass),
        exceptions,
        cosine_min: cosines.into_iter().reduce(f64::min),
    }
}

fn top_k(logits: &[f32], k: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(ids.len());
    ids.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| {
        logits[b as usize].total_cmp(&logits[a as usize])
    });
    ids.truncate(k);
    ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    ids
}

fn margin(logits: &[f32]) -> f32 {
    let top = top_k(logits, 2);
    match top.as_slice() {
        [a, b] => logits[*a as usize] - logits[*b as usize],
        _ => f32::INFINITY,
    }
}

/// Cosine in f64; NaN anywhere gives NaN, which fails every threshold.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

fn centred_cosine(a: &[f32], b: &[f32]) -> f64 {
    let centre = |v: &[f32]| {
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64;
        v.iter()
            .map(|&x| (f64::from(x) - mean) as f32)
            .collect::<Vec<f32>>()
    };
    cosine(&centre(a), &centre(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log-probabilities are logits shifted by a constant: the centred top-k cosine must not
    /// see the shift, while a real change of one logit must show.
    #[test]
    fn centred_topk_cosine_ignores_a_shift_and_sees_a_change() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 101) as f32 * 0.1).collect();
        let reference = ReferenceRows {
            ids: vec![0],
            logits: vec![logits.clone()],
        };
        let top = top_k(&logits, N_PROBS);
        let logprobs = |shift: f32, bump: f32| {
            Logits::TopK(vec![
                top.iter()
                    .enumerate()
                    .map(|(i, &id)| {
                        (
                            id,
                            logits[id as usize] - shift + if i == 3 { bump } else { 0.0 },
                        )
                    })
                    .collect(),
            ])
        };
        let same = compare(&reference, &logprobs(7.5, 0.0)).unwrap();
        assert!(same[0].topk_cosine.unwrap() > 1.0 - 1e-12);
        assert_eq!(same[0].token, same[0].reference_token);
        let changed = compare(&reference, &logprobs(7.5, 0.5)).unwrap();
        assert!(changed[0].topk_cosine.unwrap() < PARITY_MIN_COSINE);
    }

    /// A token flip passes parity only where the reference margin is below the tie threshold,
    /// and is listed either way.
    #[test]
    fn parity_excuses_only_recorded_near_ties() {
        let row = |token: u32, margin: f32| Row {
            position: 0,
            token,
            reference_token: 1,
            reference_margin: margin,
            cosine: None,
            topk_cosine: None,
            topk_missing: 0,
            topk_values: vec![1.0, 0.5, 0.25],
        };
        let arm = |token, margin| summarize("top-k", vec![vec![row(token, margin)]]);
        let tie = parity(("a", &arm(1, 0.001)), ("b", &arm(2, 0.001)), 0.01);
        assert!(tie.pass && tie.exceptions.len() == 1 && tie.exceptions[0].near_tie);
        let flip = parity(("a", &arm(1, 0.5)), ("b", &arm(2, 0.5)), 0.01);
        assert!(!flip.pass);
        let same = parity(("a", &arm(1, 0.5)), ("b", &arm(1, 0.5)), 0.01);
        assert!(same.pass && same.exceptions.is_empty());
    }
}
