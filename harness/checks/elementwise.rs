//! The elementwise kernel (wgsl/elementwise.wgsl) against `fak::reference::ops` (silu, sigmoid,
//! add_into): the GPU test (tests/gpu_elementwise.rs) asserts its cases, `harness selftest`
//! reports them (`report`).

use super::compare::{Bound, Output, Tolerance};
use super::inputs::{step_buffer, uniform_f32, upload_f32};
use super::{poisoned_f32, rng};
use fak::gpu::kernels::elementwise::{Elementwise, ElementwiseOp, ElementwiseShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::reference::ops::{add_into, sigmoid, silu};
use rand_chacha::ChaCha8Rng;

/// Sums and products are single f32 roundings, as on the CPU. The GPU's exp may be off by
/// (3 + 2|z|) ulp (Vulkan's bound), ≤ 2e-5 relative for |z| ≤ 100, and silu/σ pass at most that
/// relative error on (a ratio e^−z/(1 + e^−z) ≤ 1 scales it): 3e-5 relative, and a floor for the
/// underflowing tail.
pub const TOL: Tolerance = Tolerance {
    rel: 3e-5,
    abs: 1e-30,
};

/// Random values in [-8, 8] with the occasional extreme (±100, ±30, tiny).
fn inputs(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    let mut v = uniform_f32(rng, n, -8.0, 8.0);
    for (i, x) in v.iter_mut().enumerate().filter(|(i, _)| i % 97 == 3) {
        *x = [100.0, -100.0, 30.0, -30.0, 1e-3, -1e-3][i % 6];
    }
    v
}

fn run(
    ctx: &GpuContext,
    kernel: &Elementwise,
    shape: ElementwiseShape,
    op: ElementwiseOp<'_>,
    n_tokens: u32,
) {
    let step = step_buffer(ctx, Step::new(3, n_tokens, 0));
    let binding = kernel.bind(ctx, shape, op, &step).unwrap();
    ctx.run_pass("elementwise", |pass| {
        kernel.encode(pass, &binding, n_tokens)
    })
    .unwrap();
}

/// SwiGLU of rows of width `n`, gate and up the halves of one fused projection's [gate | up]
/// rows: 3 of 4 tokens, the fourth's output required to stay poisoned.
pub fn swiglu(ctx: &GpuContext, kernel: &Elementwise, n: u32, seed: u64) -> Output {
    let mut rng = rng(seed);
    let (max_tokens, n_tokens) = (4u32, 3u32);
    let fused = inputs(&mut rng, (2 * n * max_tokens) as usize);
    let fused_buf = upload_f32(ctx, "gate|up", &fused);
    let out = poisoned_f32(ctx, "out", u64::from(n * max_tokens));
    let gate = View::rows(&fused_buf, n).strided(2 * n, 0);
    let up = gate.at(n);
    let shape = ElementwiseShape {
        heads: 1,
        width: n,
        max_tokens,
    };
    let op = ElementwiseOp::SwiGlu {
        gate,
        up,
        out: View::rows(&out, n),
    };
    run(ctx, kernel, shape, op, n_tokens);
    let mut got = read_back_f32(ctx, &out, 0..u64::from(4 * n * max_tokens)).unwrap();
    let want: Vec<f32> = (0..n_tokens * n)
        .map(|e| {
            let (t, i) = ((e / n) as usize, (e % n) as usize);
            let row = &fused[t * 2 * n as usize..];
            silu(row[i]) * row[n as usize + i]
        })
        .collect();
    let past = got.split_off(want.len());
    Output {
        part: "",
        what: format!("swiglu n={n}"),
        got,
        want,
        bound: Bound::Within(TOL),
        wrote_outside: past.iter().any(|v| !v.is_nan()),
    }
}

/// The residual add x += y on rows of width `n`, 2 of 3 tokens: the sum is one f32 rounding on
/// both sides, so exact, and the last token is untouched.
pub fn add(ctx: &GpuContext, kernel: &Elementwise, n: u32, seed: u64) -> Output {
    let mut rng = rng(seed);
    let (max_tokens, n_tokens) = (3u32, 2u32);
    let len = (n * max_tokens) as usize;
    let x = inputs(&mut rng, len);
    let y = inputs(&mut rng, len);
    let x_buf = upload_f32(ctx, "x", &x);
    let y_buf = upload_f32(ctx, "y", &y);
    let shape = ElementwiseShape {
        heads: 1,
        width: n,
        max_tokens,
    };
    let op = ElementwiseOp::Add {
        x: View::rows(&x_buf, n),
        y: View::rows(&y_buf, n),
    };
    run(ctx, kernel, shape, op, n_tokens);
    let got = read_back_f32(ctx, &x_buf, 0..4 * len as u64).unwrap();
    let mut want = x;
    let split = (n_tokens * n) as usize;
    add_into(&mut want[..split], &y[..split]);
    Output {
        part: "",
        what: format!("add n={n}"),
        got,
        want,
        bound: Bound::Within(Tolerance::EXACT),
        wrote_outside: false,
    }
}

/// qwen35's sigmoid gate o *= σ(gate) on `heads` heads of `hd`, the gate read at hd within each
/// head's 2·hd slice of the [q | gate] projection.
pub fn sigmoid_gate(
    ctx: &GpuContext,
    kernel: &Elementwise,
    heads: u32,
    hd: u32,
    seed: u64,
) -> Output {
    let mut rng = rng(seed);
    let n_tokens = 3u32;
    let o = inputs(&mut rng, (n_tokens * heads * hd) as usize);
    let qg = inputs(&mut rng, (n_tokens * heads * 2 * hd) as usize);
    let o_buf = upload_f32(ctx, "o", &o);
    let qg_buf = upload_f32(ctx, "q|gate", &qg);
    let gate = View::heads(&qg_buf, heads, 2 * hd).at(hd);
    let shape = ElementwiseShape {
        heads,
        width: hd,
        max_tokens: n_tokens,
    };
    let op = ElementwiseOp::SigmoidGate {
        o: View::heads(&o_buf, heads, hd),
        gate,
    };
    run(ctx, kernel, shape, op, n_tokens);
    let got = read_back_f32(ctx, &o_buf, 0..4 * o.len() as u64).unwrap();
    let want: Vec<f32> = o
        .iter()
        .enumerate()
        .map(|(e, &v)| {
            let (th, d) = (e / hd as usize, e % hd as usize);
            v * sigmoid(qg[th * 2 * hd as usize + hd as usize + d])
        })
        .collect();
    Output {
        part: "",
        what: format!("sigmoid gate {heads}×{hd}"),
        got,
        want,
        bound: Bound::Within(TOL),
        wrote_outside: false,
    }
}
