//! The argmax kernel (wgsl/argmax.wgsl) against `fak::reference::ops::argmax`: vocabularies
//! around the chunk size and at Qwen's 151 936, ties (lowest index wins), NaN (never wins), −0
//! against +0, infinities, the last row of a prefill and every row of a batched decode, and the
//! history ring wrapping.

use fak::gpu::Step;
use fak::gpu::kernels::argmax::{Argmax, ArgmaxRows, ArgmaxShape};
use fak::gpu::kernels::support::View;
use fak_tests::argmax::{HISTORY, run_case};
use fak_tests::inputs::{step_buffer, upload_f32, upload_u32};
use fak_tests::{gpu, rng, variants};

#[test]
fn the_last_row_wins_ties_low_skips_nan_and_lands_in_next_token_and_history() {
    let ctx = gpu();
    let mut rng = rng(5);
    for paths in variants::<Argmax>(ctx) {
        let kernel = Argmax::new(ctx, paths).unwrap();
        for vocab in [1u32, 5, 4096, 4097, 12_289, 151_936] {
            for style in 0..6 {
                run_case(ctx, &kernel, &mut rng, vocab, ArgmaxRows::Last, &[style], 5).assert();
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
            let styles = [0, 1, 2];
            run_case(
                ctx,
                &kernel,
                &mut rng,
                vocab,
                ArgmaxRows::All,
                &styles,
                HISTORY - 1,
            )
            .assert();
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
