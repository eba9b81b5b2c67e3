//! The RMSNorm kernel (wgsl/rms_norm.wgsl) against `fak::reference::ops::rms_norm` on every
//! variant: per-token rows of ragged widths, per-head rows at qwen35's [q | gate] stride in place,
//! the weightless norm, and tokens past the step's count left alone.

use fak::gpu::kernels::rms_norm::{NormIo, RmsNorm, RmsNormShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::reference::ops::rms_norm;
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};

const EPS: f32 = 1e-6;

/// Each output is (x·scale)·w with scale from an f32 sum of squares: a thread's strided partial
/// of ≤ 20 terms and a ≤ 256-way tree err by ≤ 28·2^-24 ≈ 1.7e-6 of the sum, sqrt halves that, and
/// two roundings follow; every element carries the same relative error, so 1e-5 relative holds
/// for small and large outputs alike.
const TOL: Tolerance = Tolerance {
    rel: 1e-5,
    abs: 1e-30,
};

/// Where a case's rows sit: `heads` rows of `n` values per token at `head_stride`, tokens at
/// `token_stride`, starting at `offset`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    n: u32,
    heads: u32,
    offset: u32,
    token_stride: u32,
    head_stride: u32,
}

impl Layout {
    fn rows(n: u32) -> Layout {
        Layout {
            n,
            heads: 1,
            offset: 0,
            token_stride: n,
            head_stride: 0,
        }
    }

    fn index(&self, t: u32, h: u32, i: u32) -> usize {
        (self.offset + t * self.token_stride + h * self.head_stride + i) as usize
    }

    fn len(&self, tokens: u32) -> usize {
        self.index(tokens - 1, self.heads - 1, self.n)
    }

    fn view<'a>(&self, buffer: &'a wgpu::Buffer) -> View<'a> {
        View::rows(buffer, self.n)
            .at(self.offset)
            .strided(self.token_stride, self.head_stride)
    }
}

/// `before` with each row (t < n_tokens) replaced by its CPU norm.
fn expected(
    before: &[f32],
    src: &[f32],
    layout: Layout,
    n_tokens: u32,
    w: Option<&[f32]>,
) -> Vec<f32> {
    let mut out = before.to_vec();
    for t in 0..n_tokens {
        for h in 0..layout.heads {
            let at = layout.index(t, h, 0);
            let row = rms_norm(&src[at..at + layout.n as usize], w, EPS);
            out[at..at + layout.n as usize].copy_from_slice(&row);
        }
    }
    out
}

struct Case {
    layout: Layout,
    max_tokens: u32,
    n_tokens: u32,
    weighted: bool,
    in_place: bool,
}

fn run_case(ctx: &GpuContext, kernel: &RmsNorm, case: &Case, seed: u64) {
    let Case {
        layout,
        max_tokens,
        n_tokens,
        weighted,
        in_place,
    } = *case;
    let mut rng = rng(seed);
    let len = layout.len(max_tokens);
    let x = uniform_f32(&mut rng, len, -3.0, 3.0);
    let w = uniform_f32(&mut rng, layout.n as usize, -2.0, 2.0);
    let x_buf = upload_f32(ctx, "x", &x);
    let w_buf = upload_f32(ctx, "w", &w);
    let y_buf = poisoned_f32(ctx, "y", len as u64);
    let step = step_buffer(ctx, Step::new(0, n_tokens, 0));
    let shape = RmsNormShape {
        n: layout.n,
        rows_per_token: layout.heads,
        eps: EPS,
        max_tokens,
    };
    let io = if in_place {
        NormIo::InPlace(layout.view(&x_buf))
    } else {
        NormIo::Out {
            x: layout.view(&x_buf),
            y: layout.view(&y_buf),
        }
    };
    let weight = weighted.then_some(&w_buf);
    let binding = kernel.bind(ctx, shape, io, weight, &step).unwrap();
    ctx.run_pass("rms_norm", |pass| kernel.encode(pass, &binding, n_tokens))
        .unwrap();
    let w = weighted.then_some(&w[..]);
    let what = format!(
        "{} {layout:?} tokens {n_tokens}/{max_tokens} weighted {weighted} in place {in_place}",
        kernel.variant()
    );
    if in_place {
        // Everything outside the rows (the gates, the gaps) must be exactly as it was.
        let got = read_back_f32(ctx, &x_buf, 0..4 * len as u64).unwrap();
        assert_close(&what, &got, &expected(&x, &x, layout, n_tokens, w), TOL);
    } else {
        let got = read_back_f32(ctx, &y_buf, 0..4 * len as u64).unwrap();
        let before = vec![f32::NAN; len];
        let want = expected(&before, &x, layout, n_tokens, w);
        // Poison stays where no row is: compare the rows, then check the rest was not written.
        let rows: Vec<usize> = (0..len).filter(|&i| !want[i].is_nan()).collect();
        let pick = |v: &[f32]| rows.iter().map(|&i| v[i]).collect::<Vec<f32>>();
        assert_close(&what, &pick(&got), &pick(&want), TOL);
        let untouched = (0..len)
            .filter(|&i| want[i].is_nan())
            .all(|i| got[i].is_nan());
        assert!(untouched, "{what}: wrote outside its rows");
    }
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
