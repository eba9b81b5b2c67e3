//! The elementwise kernel (wgsl/elementwise.wgsl) against `fak::reference::ops` (silu, sigmoid,
//! add_into): SwiGLU reading gate and up as the halves of one fused projection, the residual add
//! on ragged widths, the qwen35 sigmoid gate read at a stride from [q | gate] rows, inputs out to
//! ±100 (where e^−z overflows), and tokens past the step's count left alone.

use fak::gpu::kernels::elementwise::{Elementwise, ElementwiseOp, ElementwiseShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{GpuContext, Step, read_back_f32};
use fak::reference::ops::{sigmoid, silu};
use fak_tests::inputs::{step_buffer, uniform_f32, upload_f32};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};
use rand_chacha::ChaCha8Rng;

/// Sums and products are single f32 roundings, as on the CPU. The GPU's exp may be off by
/// (3 + 2|z|) ulp (Vulkan's bound), ≤ 2e-5 relative for |z| ≤ 100, and silu/σ pass at most that
/// relative error on (a ratio e^−z/(1 + e^−z) ≤ 1 scales it): 3e-5 relative, and a floor for the
/// underflowing tail.
const TOL: Tolerance = Tolerance {
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

#[test]
fn swiglu_of_a_fused_gate_up_projection_matches_the_reference() {
    let ctx = gpu();
    let mut rng = rng(1);
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for n in [1u32, 7, 1000, 3072] {
            let (max_tokens, n_tokens) = (4u32, 3u32);
            // One buffer of [gate | up] rows, as a fused gate+up mat-vec writes them.
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
            run(
                ctx,
                &kernel,
                shape,
                ElementwiseOp::SwiGlu {
                    gate,
                    up,
                    out: View::rows(&out, n),
                },
                n_tokens,
            );
            let got = read_back_f32(ctx, &out, 0..u64::from(4 * n * max_tokens)).unwrap();
            let want: Vec<f32> = (0..n_tokens * n)
                .map(|e| {
                    let (t, i) = ((e / n) as usize, (e % n) as usize);
                    let row = &fused[t * 2 * n as usize..];
                    silu(row[i]) * row[n as usize + i]
                })
                .collect();
            let split = (n_tokens * n) as usize;
            assert_close(&format!("swiglu n={n}"), &got[..split], &want, TOL);
            assert!(
                got[split..].iter().all(|v| v.is_nan()),
                "swiglu n={n}: wrote past the step's tokens"
            );
        }
    }
}

#[test]
fn the_residual_add_matches_the_reference_on_ragged_widths() {
    let ctx = gpu();
    let mut rng = rng(2);
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for n in [1u32, 37, 5120] {
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
            run(ctx, &kernel, shape, op, n_tokens);
            let got = read_back_f32(ctx, &x_buf, 0..4 * len as u64).unwrap();
            let mut want = x.clone();
            let split = (n_tokens * n) as usize;
            fak::reference::ops::add_into(&mut want[..split], &y[..split]);
            // The sum is one f32 rounding on both sides: exact. The last token is untouched.
            assert_close(&format!("add n={n}"), &got, &want, Tolerance::EXACT);
        }
    }
}

#[test]
fn the_sigmoid_gate_read_at_the_qwen35_stride_matches_the_reference() {
    let ctx = gpu();
    let mut rng = rng(3);
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for (heads, hd) in [(3u32, 256u32), (5, 40), (1, 64)] {
            let n_tokens = 3u32;
            let o = inputs(&mut rng, (n_tokens * heads * hd) as usize);
            // Per token and head, the q projection holds [q | gate]: the gate is at hd within
            // each 2·hd slice.
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
            run(ctx, &kernel, shape, op, n_tokens);
            let got = read_back_f32(ctx, &o_buf, 0..4 * o.len() as u64).unwrap();
            let want: Vec<f32> = o
                .iter()
                .enumerate()
                .map(|(e, &v)| {
                    let (th, d) = (e / hd as usize, e % hd as usize);
                    v * sigmoid(qg[th * 2 * hd as usize + hd as usize + d])
                })
                .collect();
            assert_close(&format!("sigmoid gate {heads}×{hd}"), &got, &want, TOL);
        }
    }
}

#[test]
fn writing_a_buffer_that_is_also_read_is_refused() {
    let ctx = gpu();
    let kernel = Elementwise::new(ctx, ctx.paths()).unwrap();
    let a = upload_f32(ctx, "a", &[0.0; 64]);
    let b = upload_f32(ctx, "b", &[0.0; 64]);
    let step = step_buffer(ctx, Step::new(0, 1, 0));
    let shape = ElementwiseShape {
        heads: 1,
        width: 32,
        max_tokens: 1,
    };
    let add = ElementwiseOp::Add {
        x: View::rows(&a, 32),
        y: View::rows(&a, 32).at(32),
    };
    assert!(kernel.bind(ctx, shape, add, &step).is_err());
    let swiglu = ElementwiseOp::SwiGlu {
        gate: View::rows(&a, 32),
        up: View::rows(&a, 32).at(32),
        out: View::rows(&b, 32),
    };
    assert!(kernel.bind(ctx, shape, swiglu, &step).is_ok());
    let too_long = ElementwiseShape {
        width: 33,
        max_tokens: 2,
        ..shape
    };
    let add = ElementwiseOp::Add {
        x: View::rows(&a, 33),
        y: View::rows(&b, 33),
    };
    assert!(kernel.bind(ctx, too_long, add, &step).is_err());
}
