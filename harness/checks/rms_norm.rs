//! One RMSNorm case (wgsl/rms_norm.wgsl) against `fak::reference::ops::rms_norm`: the GPU test
//! (tests/gpu_rms_norm.rs) asserts it, `harness selftest` reports it (`report`).

use super::compare::Tolerance;
use super::inputs::{step_buffer, uniform_f32, upload_f32};
use super::{poisoned_f32, rng};
use fak::gpu::kernels::rms_norm::{NormIo, RmsNorm, RmsNormShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::reference::ops::rms_norm;

/// The family's eps.
pub const EPS: f32 = 1e-6;

/// Each output is (x·scale)·w with scale from an f32 sum of squares: a thread's strided partial
/// of ≤ 20 terms and a ≤ 256-way tree err by ≤ 28·2^-24 ≈ 1.7e-6 of the sum, sqrt halves that, and
/// two roundings follow; every element carries the same relative error, so 1e-5 relative holds
/// for small and large outputs alike.
pub const TOL: Tolerance = Tolerance {
    rel: 1e-5,
    abs: 1e-30,
};

/// Where a case's rows sit: `heads` rows of `n` values per token at `head_stride`, tokens at
/// `token_stride`, starting at `offset`.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub n: u32,
    pub heads: u32,
    pub offset: u32,
    pub token_stride: u32,
    pub head_stride: u32,
}

impl Layout {
    pub fn rows(n: u32) -> Layout {
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

pub struct Case {
    pub layout: Layout,
    pub max_tokens: u32,
    pub n_tokens: u32,
    pub weighted: bool,
    pub in_place: bool,
}

/// What a case ran, the kernel's rows and the reference's, and whether the kernel wrote anywhere
/// but its rows.
pub struct Run {
    pub what: String,
    pub got: Vec<f32>,
    pub want: Vec<f32>,
    pub wrote_outside: bool,
}

/// Runs `case` on seeded random rows (a separate output poisoned first; in place, the whole
/// buffer compared).
pub fn run_case(ctx: &GpuContext, kernel: &RmsNorm, case: &Case, seed: u64) -> Run {
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
        let want = expected(&x, &x, layout, n_tokens, w);
        Run {
            what,
            got,
            want,
            wrote_outside: false,
        }
    } else {
        let got = read_back_f32(ctx, &y_buf, 0..4 * len as u64).unwrap();
        let before = vec![f32::NAN; len];
        let want = expected(&before, &x, layout, n_tokens, w);
        // Poison stays where no row is: compare the rows, then check the rest was not written.
        let rows: Vec<usize> = (0..len).filter(|&i| !want[i].is_nan()).collect();
        let pick = |v: &[f32]| rows.iter().map(|&i| v[i]).collect::<Vec<f32>>();
        let wrote_outside = (0..len)
            .filter(|&i| want[i].is_nan())
            .any(|i| !got[i].is_nan());
        Run {
            what,
            got: pick(&got),
            want: pick(&want),
            wrote_outside,
        }
    }
}
