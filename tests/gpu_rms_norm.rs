//! The RMSNorm kernel (wgsl/rms_norm.wgsl) against `fak::reference::ops::rms_norm` on every
//! variant: per-token rows of ragged widths, per-head rows at qwen35's [q | gate] stride in place,
//! the weightless norm, and tokens past the step's count left alone.

use fak::gpu::kernels::rms_norm::{NormIo, RmsNorm, RmsNormShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step};
use fak_tests::inputs::{step_buffer, upload_f32};
use fak_tests::rms_norm::{self, Case, EPS, Layout, TOL};
use fak_tests::{assert_close, gpu, variants};

/// Runs `case`; its rows must match the reference under [`TOL`] and nothing else be written.
fn run_case(ctx: &GpuContext, kernel: &RmsNorm, case: &Case, seed: u64) {
    let run = rms_norm::run_case(ctx, kernel, case, seed);
    assert_close(&run.what, &run.got, &run.want, TOL);
    assert!(!run.wrote_outside, "{}: wrote outside its rows", run.what);
}

#[test]
fn per_token_rows_of_ragged_widths_match_the_reference() {
    let ctx = gpu();
    for paths in variants::<RmsNorm>(ctx) {
        let kernel = RmsNorm::new(ctx, paths).unwrap();
        for (i, n) in [1u32, 7, 64, 513, 1000, 2560].into_iter().enumerate() {
            for (max_tokens, n_tokens) in [(1, 1), (6, 5)] {
                let case = Case {
                    layout: Layout::rows(n),
                    max_tokens,
                    n_tokens,
                    weighted: true,
                    in_place: false,
                };
                run_case(ctx, &kernel, &case, 100 + i as u64);
            }
        }
    }
}

#[test]
fn per_head_rows_at_the_qwen35_q_gate_stride_normalise_in_place_and_leave_the_gates() {
    let ctx = gpu();
    for paths in variants::<RmsNorm>(ctx) {
        let kernel = RmsNorm::new(ctx, paths).unwrap();
        for (hd, heads) in [(256u32, 3u32), (40, 5), (64, 1)] {
            // q of head h at 2·hd·h within a token's 2·hd·heads values, its gate right after.
            let layout = Layout {
                n: hd,
                heads,
                offset: 0,
                token_stride: 2 * hd * heads,
                head_stride: 2 * hd,
            };
            for in_place in [true, false] {
                let case = Case {
                    layout,
                    max_tokens: 4,
                    n_tokens: 3,
                    weighted: true,
                    in_place,
                };
                run_case(ctx, &kernel, &case, u64::from(hd) + u64::from(in_place));
            }
        }
    }
}

#[test]
fn the_weightless_norm_at_an_offset_matches_the_reference() {
    let ctx = gpu();
    for paths in variants::<RmsNorm>(ctx) {
        let kernel = RmsNorm::new(ctx, paths).unwrap();
        let layout = Layout {
            n: 128,
            heads: 6,
            offset: 37,
            token_stride: 6 * 128 + 3,
            head_stride: 128,
        };
        for in_place in [false, true] {
            let case = Case {
                layout,
                max_tokens: 3,
                n_tokens: 3,
                weighted: false,
                in_place,
            };
            run_case(ctx, &kernel, &case, 7);
        }
    }
}

#[test]
fn overlapping_rows_and_short_buffers_are_refused() {
    let ctx = gpu();
    let kernel = RmsNorm::new(ctx, ctx.paths()).unwrap();
    let x = upload_f32(ctx, "x", &[0.0; 64]);
    let y = upload_f32(ctx, "y", &[0.0; 64]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let shape = |n, rows_per_token, max_tokens| RmsNormShape {
        n,
        rows_per_token,
        eps: EPS,
        max_tokens,
    };
    let out = |x, y| NormIo::Out { x, y };
    // Heads of 32 at stride 16 overlap.
    let overlapping = View::rows(&x, 32).strided(64, 16);
    assert!(
        kernel
            .bind(
                ctx,
                shape(32, 2, 1),
                out(overlapping, View::rows(&y, 64)),
                None,
                &step
            )
            .is_err()
    );
    // 3 tokens of 32 do not fit 64 values.
    assert!(
        kernel
            .bind(
                ctx,
                shape(32, 1, 3),
                out(View::rows(&x, 32), View::rows(&y, 32)),
                None,
                &step
            )
            .is_err()
    );
    // A weight shorter than a row.
    assert!(
        kernel
            .bind(
                ctx,
                shape(64, 1, 1),
                NormIo::InPlace(View::rows(&x, 64)),
                Some(&y),
                &step
            )
            .is_ok()
    );
    let short = upload_f32(ctx, "w", &[1.0; 8]);
    assert!(
        kernel
            .bind(
                ctx,
                shape(64, 1, 1),
                NormIo::InPlace(View::rows(&x, 64)),
                Some(&short),
                &step
            )
            .is_err()
    );
    // x and y in one buffer must go through InPlace.
    assert!(
        kernel
            .bind(
                ctx,
                shape(32, 1, 1),
                out(View::rows(&x, 32), View::rows(&x, 32).at(32)),
                None,
                &step
            )
            .is_err()
    );
}
