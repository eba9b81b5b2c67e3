//! The argmax kernel (wgsl/argmax.wgsl) against `fak::reference::ops::argmax`: vocabularies
//! around the chunk size and at Qwen's 151 936, ties (lowest index wins), NaN (never wins), −0
//! against +0, infinities, the last row of a prefill and every row of a batched decode, and the
//! history ring wrapping.

use fak::gpu::kernels::argmax::{Argmax, ArgmaxRows, ArgmaxShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step, read_back};
use fak::reference::ops::argmax;
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32, upload_u32};
use fak_tests::{gpu, rng, variants};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

const HISTORY: u32 = 8;
const POISON: u32 = 0xdead_beef;

/// The reference's argmax over the numbers of `row` (NaN never competes), 0 when there are none.
fn expected(row: &[f32]) -> u32 {
    let numbers: Vec<usize> = (0..row.len()).filter(|&i| !row[i].is_nan()).collect();
    if numbers.is_empty() {
        return 0;
    }
    let values: Vec<f32> = numbers.iter().map(|&i| row[i]).collect();
    numbers[argmax(&values) as usize] as u32
}

/// A row of `vocab` logits in one of several styles that stress the ordering.
fn row(rng: &mut ChaCha8Rng, vocab: usize, style: usize) -> Vec<f32> {
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

struct Outputs {
    next: Vec<u32>,
    history: Vec<u32>,
}

fn run(
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

#[test]
fn the_last_row_wins_ties_low_skips_nan_and_lands_in_next_token_and_history() {
    let ctx = gpu();
    let mut rng = rng(5);
    for paths in variants::<Argmax>(ctx) {
        let kernel = Argmax::new(ctx, paths).unwrap();
        for vocab in [1u32, 5, 4096, 4097, 12_289, 151_936] {
            for style in 0..6 {
                let n_tokens = 3;
                let logits: Vec<f32> = (0..n_tokens)
                    .flat_map(|_| row(&mut rng, vocab as usize, style))
                    .collect();
                let out = run(ctx, &kernel, &logits, vocab, ArgmaxRows::Last, n_tokens, 5);
                let want = expected(&logits[2 * vocab as usize..]);
                let what = format!("{} vocab {vocab} style {style}", kernel.variant());
                assert_eq!(
                    out.next,
                    vec![want, POISON, POISON, POISON],
                    "{what}: next_token"
                );
                let mut history = vec![POISON; HISTORY as usize];
                history[5] = want;
                assert_eq!(out.history, history, "{what}: history");
            }
        }
    }
}

#[test]
fn every_row_of_a_batched_decode_gets_its_token_and_the_history_wraps() {
    let ctx = gpu();
    let mut rng = rng(6);
    for paths in variants::<Argmax>(ctx) {
        let kernel = Argmax::new(ctx, paths).unwrap();
        for vocab in [7u32, 9000] {
            let n_tokens = 3;
            let logits: Vec<f32> = (0..n_tokens as usize)
                .flat_map(|s| row(&mut rng, vocab as usize, s))
                .collect();
            let out = run(
                ctx,
                &kernel,
                &logits,
                vocab,
                ArgmaxRows::All,
                n_tokens,
                HISTORY - 1,
            );
            let want: Vec<u32> = logits.chunks(vocab as usize).map(expected).collect();
            let what = format!("{} vocab {vocab}", kernel.variant());
            assert_eq!(out.next[..3], want[..], "{what}: next_token");
            assert_eq!(out.next[3], POISON, "{what}: wrote past the rows");
            let mut history = vec![POISON; HISTORY as usize];
            history[HISTORY as usize - 1] = want[0];
            history[0] = want[1];
            history[1] = want[2];
            assert_eq!(out.history, history, "{what}: history");
        }
    }
}

#[test]
fn short_outputs_are_refused() {
    let ctx = gpu();
    let kernel = Argmax::new(ctx, ctx.paths()).unwrap();
    let logits = upload_f32(ctx, "logits", &[0.0; 64]);
    let next = upload_u32(ctx, "next", &[0; 2]);
    let history = upload_u32(ctx, "history", &[0; 4]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let shape = |rows, max_tokens| ArgmaxShape {
        vocab: 16,
        rows,
        max_tokens,
    };
    let view = View::rows(&logits, 16);
    assert!(
        kernel
            .bind(ctx, shape(ArgmaxRows::All, 2), view, &next, &history, &step)
            .is_ok()
    );
    // Three rows need three next_token slots.
    assert!(
        kernel
            .bind(ctx, shape(ArgmaxRows::All, 3), view, &next, &history, &step)
            .is_err()
    );
    // Five rows of 16 do not fit 64 logits.
    assert!(
        kernel
            .bind(
                ctx,
                shape(ArgmaxRows::Last, 5),
                view,
                &next,
                &history,
                &step
            )
            .is_err()
    );
}
