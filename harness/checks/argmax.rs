//! The argmax kernel (wgsl/argmax.wgsl) against `fak::reference::ops::argmax`: the GPU test
//! (tests/gpu_argmax.rs) asserts its cases, `harness selftest` reports them (`report`).

use super::compare::{Bound, Output, Tolerance};
use super::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak::gpu::kernels::argmax::{Argmax, ArgmaxRows, ArgmaxShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step, read_back};
use fak::reference::ops::argmax;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Slots of the token-history ring.
pub const HISTORY: u32 = 8;
/// What next_token and history hold before the run.
pub const POISON: u32 = 0xdead_beef;

/// The reference's argmax over the numbers of `row` (NaN never competes), 0 when there are none.
pub fn expected(row: &[f32]) -> u32 {
    let numbers: Vec<usize> = (0..row.len()).filter(|&i| !row[i].is_nan()).collect();
    if numbers.is_empty() {
        return 0;
    }
    let values: Vec<f32> = numbers.iter().map(|&i| row[i]).collect();
    numbers[argmax(&values) as usize] as u32
}

/// A row of `vocab` logits in one of several styles that stress the ordering.
pub fn row(rng: &mut ChaCha8Rng, vocab: usize, style: usize) -> Vec<f32> {
    let mut v = uniform_f32(rng, vocab, -30.0, 30.0);
    match style {
        // Plain random.
        0 => {}
        // Several copies of the maximum: the lowest index must win.
        1 => {
            let top = 40.0;
            for _ in 0..4 {
                v[rng.random_range(0..vocab)] = top;
            }
        }
        // NaN everywhere around a maximum, including at index 0.
        2 => {
            v[0] = f32::NAN;
            for x in v.iter_mut().step_by(3) {
                *x = f32::NAN;
            }
            let at = rng.random_range(0..vocab);
            v[at] = 1e30;
            if vocab > 1 {
                v[(at + 1) % vocab] = f32::NAN;
            }
        }
        // Only ±0 and negatives: −0 and +0 tie, so the first zero wins.
        3 => {
            for x in v.iter_mut() {
                *x = -x.abs() - 1.0;
            }
            v[vocab / 2] = -0.0;
            v[vocab - 1] = 0.0;
        }
        // Infinities: +inf wins over everything; a row of −inf gives its first index.
        4 => {
            if rng.random() {
                v[vocab / 3] = f32::INFINITY;
            } else {
                v.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            }
        }
        // No number at all.
        _ => v.iter_mut().for_each(|x| *x = f32::NAN),
    }
    v
}

/// next_token (4 slots) and the history ring after a run.
pub struct Outputs {
    pub next: Vec<u32>,
    pub history: Vec<u32>,
}

/// Runs the kernel on `n_tokens` rows of `logits` (at a stride wider than the vocabulary) writing
/// token `out_index` of the ring.
pub fn run(
    ctx: &GpuContext,
    kernel: &Argmax,
    logits: &[f32],
    vocab: u32,
    rows: ArgmaxRows,
    n_tokens: u32,
    out_index: u32,
) -> Outputs {
    // Rows sit at a stride wider than the vocabulary.
    let stride = vocab + 3;
    let mut padded = vec![f32::NAN; (stride * n_tokens) as usize];
    for (t, r) in logits.chunks(vocab as usize).enumerate() {
        padded[t * stride as usize..][..vocab as usize].copy_from_slice(r);
    }
    let logits_buf = upload_f32(ctx, "logits", &padded);
    let next = upload_u32(ctx, "next", &[POISON; 4]);
    let history = upload_u32(ctx, "history", &[POISON; HISTORY as usize]);
    let step = step_buffer(ctx, Step::new(11, n_tokens, out_index));
    let shape = ArgmaxShape {
        vocab,
        rows,
        max_tokens: n_tokens,
    };
    let view = View::rows(&logits_buf, vocab).strided(stride, 0);
    let binding = kernel
        .bind(ctx, shape, view, &next, &history, &step)
        .unwrap();
    ctx.run_pass("argmax", |pass| kernel.encode(pass, &binding, n_tokens))
        .unwrap();
    let words = |b: &wgpu::Buffer, n: u32| {
        bytemuck::pod_collect_to_vec(&read_back(ctx, b, 0..4 * u64::from(n)).unwrap())
    };
    Outputs {
        next: words(&next, 4),
        history: words(&history, HISTORY),
    }
}

/// A step of `n_tokens` rows of `vocab` logits, row t in style `styles[t % len]`, its tokens
/// written to ring slot `out_index` on: next_token and the whole history ring against the
/// reference's tokens (indices below 2^24, so exact as f32), every slot the step must not write
/// still poisoned.
pub fn run_case(
    ctx: &GpuContext,
    kernel: &Argmax,
    rng: &mut ChaCha8Rng,
    vocab: u32,
    rows: ArgmaxRows,
    styles: &[usize],
    out_index: u32,
) -> Output {
    let n_tokens = 3;
    let logits: Vec<f32> = (0..n_tokens as usize)
        .flat_map(|t| row(rng, vocab as usize, styles[t % styles.len()]))
        .collect();
    let out = run(ctx, kernel, &logits, vocab, rows, n_tokens, out_index);
    let tokens: Vec<u32> = match rows {
        ArgmaxRows::Last => vec![expected(&logits[2 * vocab as usize..])],
        ArgmaxRows::All => logits.chunks(vocab as usize).map(expected).collect(),
    };
    let mut next = vec![POISON; 4];
    next[..tokens.len()].copy_from_slice(&tokens);
    let mut history = vec![POISON; HISTORY as usize];
    for (i, &token) in tokens.iter().enumerate() {
        history[(out_index as usize + i) % HISTORY as usize] = token;
    }
    let as_f32 = |words: Vec<u32>| words.into_iter().map(|w| w as f32).collect::<Vec<_>>();
    Output {
        part: "",
        what: format!(
            "{} vocab {vocab} {rows:?} styles {styles:?}: next_token then history",
            kernel.variant()
        ),
        got: as_f32([out.next, out.history].concat()),
        want: as_f32([next, history].concat()),
        bound: Bound::Within(Tolerance::EXACT),
        wrote_outside: false,
    }
}
