//! The untimed quality pass: teacher-forced logits of each arm against a reference run on the
//! unquantized source weights, and strict token parity between arms on the very same weights.
//!
//! Each quality prompt is the envelope prompt followed by the reference's first `tail` greedy
//! tokens; one row of logits is compared after every id (all prompt positions plus the first
//! `tail` output positions). Rows are reduced to numbers here: no logits leave this module.

use crate::arms::{Arm, Logits};
use anyhow::{Context, Result, bail};
use fak::gguf::Gguf;
use fak::reference::{Activations, ops::argmax};
use fak_harness::packet::metrics::cosine;
use fak_harness::packet::rounding::OwnRoundingPlan;
use fak_harness::packet::{Against, PositionReceipt, RoundingBudget, WithheldPosition};
use std::path::Path;

/// Entries of the reference's top-k over which top-k-only engines are compared.
pub const TOP_K: usize = 16;
/// What llama-server is asked for per position: wide enough that the reference's top-k almost
/// always lies inside it.
pub const N_PROBS: usize = 64;

/// The reference's rows for one quality prompt.
pub struct ReferenceRows {
    /// The prompt plus the reference's greedy continuation.
    pub ids: Vec<u32>,
    pub logits: Vec<Vec<f32>>,
}

/// Which reference ran, on which weights, and why that one.
pub struct ReferenceInfo {
    pub against: Against,
    pub why: String,
}

/// Runs the CPU reference of the model's architecture on `gguf` for each prompt (a fresh model
/// each, so no state carries over): greedy `tail` tokens, then every row.
pub fn cpu_reference(path: &Path, prompts: &[Vec<u32>], tail: usize) -> Result<Vec<ReferenceRows>> {
    let gguf = Gguf::open(path)?;
    prompts
        .iter()
        .map(|prompt| {
            let mut model = fak::reference::for_model(&gguf, Activations::F32)?;
            let mut ids = prompt.clone();
            let mut logits = model
                .forward_all(prompt)
                .with_context(|| format!("the CPU reference on {}", path.display()))?;
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
    /// Cosine over the reference's top-k ids the arm returned, both sides mean-centred
    /// (shift-invariant, so log-probabilities and logits compare alike).
    pub topk_cosine: f64,
    /// The arm's values at the reference's top-k ids (NaN where missing), kept for parity.
    pub topk_values: Vec<f32>,
    /// False where the engine withheld the position (an empty top-k row): no receipt.
    pub reported: bool,
}

/// Receipts of a comparison, and the positions without one because an engine withheld them.
pub struct Receipts {
    pub receipts: Vec<PositionReceipt>,
    pub withheld: Vec<WithheldPosition>,
}

/// An arm's rows against the reference, per quality prompt.
pub struct ArmRows {
    /// The engine exposed only top-k log-probabilities (compared over the reference's top-k).
    pub top_k: bool,
    pub prompts: Vec<Vec<Row>>,
    /// The same logits against the arm's own-rounding reference; `Err` says why there is none,
    /// `None` where the quality pass had no CPU reference to run one with.
    pub own: Option<Result<OwnRows, String>>,
}

/// An arm's rows against its own-rounding reference.
pub struct OwnRows {
    pub plan: OwnRoundingPlan,
    /// The arm against its own-rounding reference, per quality prompt.
    pub prompts: Vec<Vec<Row>>,
    /// Per prompt and position, the own-rounding reference at the (unrounded) reference's top-k
    /// ids: the entries the cross-engine receipts compare.
    pub reference: Vec<Vec<AtTopK>>,
}

/// An own-rounding reference's row seen where the cross-engine receipts look.
pub struct AtTopK {
    /// Its greedy token.
    pub token: u32,
    /// Its logits at the unrounded reference's top-k ids.
    pub values: Vec<f32>,
}

/// The own-rounding reference's rows for one quality prompt, and its greedy token and values
/// at `reference`'s top-k ids per position.
pub fn own_reference(
    plan: &OwnRoundingPlan,
    gguf: &Gguf,
    reference: &ReferenceRows,
) -> Result<(ReferenceRows, Vec<AtTopK>)> {
    let logits = plan
        .logits(gguf, &reference.ids)
        .context("the own-rounding reference")?;
    let at_top = reference
        .logits
        .iter()
        .zip(&logits)
        .map(|(want, own)| {
            let values = top_k(want, TOP_K)
                .iter()
                .map(|&id| own[id as usize])
                .collect();
            AtTopK {
                token: argmax(own),
                values,
            }
        })
        .collect();
    let rows = ReferenceRows {
        ids: reference.ids.clone(),
        logits,
    };
    Ok((rows, at_top))
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
            let reported = !matches!(arm, Logits::TopK(rows) if rows[i].is_empty());
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
            Ok(Row {
                position: i,
                token,
                reference_token: argmax(want),
                reference_margin: margin(want),
                cosine,
                topk_cosine: centred_cosine_present(&values, &want_top),
                topk_values: values,
                reported,
            })
        })
        .collect()
}

/// The receipts of an arm against the reference: full-logit cosines, or (top-k engines) the
/// centred cosine over the reference's top-k.
pub fn reference_receipts(prompts: &[Vec<Row>]) -> Receipts {
    row_receipts(prompts, |r| r.cosine.unwrap_or(r.topk_cosine))
}

/// The receipts of an arm against its own-rounding reference: the centred cosine over that
/// reference's top-k for every engine (full logits too), the measure own-rounding parity's
/// thresholds were set on — over the whole vocabulary the bulk of small logits hides a rounding
/// left unmirrored (fak against ggml's rounding: median 1 − cosine 6e-6 there, 2e-5–7e-5 over
/// the top-16).
pub fn own_receipts(prompts: &[Vec<Row>]) -> Receipts {
    row_receipts(prompts, |r| r.topk_cosine)
}

fn row_receipts(prompts: &[Vec<Row>], cosine: impl Fn(&Row) -> f64) -> Receipts {
    receipts(
        prompts.iter().map(|rows| rows.iter().map(|r| (r, r))),
        |r, _| PositionReceipt {
            prompt_index: 0,
            position: r.position,
            cosine: cosine(r),
            greedy_reference: r.reference_token,
            greedy_arm: r.token,
            reference_top2_margin: f64::from(r.reference_margin),
            rounding_budget: None,
        },
    )
}

/// strict-token-parity receipts of arm `b` against arm `a` (same weights): the centred cosine of
/// their values over the reference's top-k ids, `a`'s greedy token in the reference column, the
/// reference's top-2 margin.
pub fn parity_receipts(a: &ArmRows, b: &ArmRows) -> Receipts {
    let pairs = a
        .prompts
        .iter()
        .zip(&b.prompts)
        .map(|(ra, rb)| ra.iter().zip(rb));
    receipts(pairs, |x, y| PositionReceipt {
        prompt_index: 0,
        position: x.position,
        cosine: centred_cosine_present(&x.topk_values, &y.topk_values),
        greedy_reference: x.token,
        greedy_arm: y.token,
        reference_top2_margin: f64::from(x.reference_margin),
        rounding_budget: None,
    })
}

/// Cross-engine receipts of arm `b` against arm `a` ([`parity_receipts`]), each with its
/// rounding budget: the two arms' own-rounding references compared over the same entries.
pub fn budgeted_parity_receipts(
    a: &ArmRows,
    b: &ArmRows,
    own_a: &OwnRows,
    own_b: &OwnRows,
) -> Receipts {
    let mut r = parity_receipts(a, b);
    for receipt in &mut r.receipts {
        let (p, i) = (receipt.prompt_index, receipt.position);
        let (ra, rb) = (&own_a.reference[p][i], &own_b.reference[p][i]);
        receipt.rounding_budget = Some(RoundingBudget {
            cosine: centred_cosine_present(&ra.values, &rb.values),
            greedy: [ra.token, rb.token],
        });
    }
    r
}

/// One receipt per position both rows report (prompt index filled in), the rest withheld.
fn receipts<'r, P, R>(prompts: P, receipt: impl Fn(&Row, &Row) -> PositionReceipt) -> Receipts
where
    P: Iterator<Item = R>,
    R: Iterator<Item = (&'r Row, &'r Row)>,
{
    let mut out = Receipts {
        receipts: Vec::new(),
        withheld: Vec::new(),
    };
    for (p, rows) in prompts.enumerate() {
        for (x, y) in rows {
            if x.reported && y.reported {
                out.receipts.push(PositionReceipt {
                    prompt_index: p,
                    ..receipt(x, y)
                });
            } else {
                out.withheld.push(WithheldPosition {
                    prompt_index: p,
                    position: x.position,
                });
            }
        }
    }
    out
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

/// The centred cosine over the entries both sides have (NaN marks a missing one); 0 when fewer
/// than two remain, which fails any threshold.
fn centred_cosine_present(a: &[f32], b: &[f32]) -> f64 {
    let (a, b): (Vec<f32>, Vec<f32>) = a
        .iter()
        .zip(b)
        .filter(|(x, y)| !x.is_nan() && !y.is_nan())
        .map(|(&x, &y)| (x, y))
        .unzip();
    if a.len() < 2 {
        return 0.0;
    }
    centred_cosine(&a, &b)
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
            let row = top
                .iter()
                .enumerate()
                .map(|(i, &id)| {
                    let extra = if i == 3 { bump } else { 0.0 };
                    (id, logits[id as usize] - shift + extra)
                })
                .collect();
            Logits::TopK(vec![row])
        };
        let same = compare(&reference, &logprobs(7.5, 0.0)).unwrap();
        assert!(same[0].topk_cosine > 1.0 - 1e-12);
        assert_eq!(same[0].token, same[0].reference_token);
        let changed = compare(&reference, &logprobs(7.5, 0.5)).unwrap();
        assert!(changed[0].topk_cosine < 0.9999);
    }

    /// A reference top-k id the engine did not return is counted and left out of the cosine.
    #[test]
    fn missing_topk_ids_are_counted_not_invented() {
        let logits: Vec<f32> = (0..40).map(|i| i as f32 * 0.25).collect();
        let reference = ReferenceRows {
            ids: vec![0],
            logits: vec![logits.clone()],
        };
        let top = top_k(&logits, 10);
        let row = top.iter().map(|&id| (id, logits[id as usize])).collect();
        let rows = compare(&reference, &Logits::TopK(vec![row])).unwrap();
        let missing = rows[0].topk_values.iter().filter(|v| v.is_nan()).count();
        assert_eq!(missing, TOP_K - 10);
        assert!(rows[0].topk_cosine > 1.0 - 1e-12);
    }
}
