//! The elementwise kernel (wgsl/elementwise.wgsl) against `fak::reference::ops` (silu, sigmoid,
//! add_into): SwiGLU reading gate and up as the halves of one fused projection, the residual add
//! on ragged widths, a bias every token adds, the qwen35 sigmoid gate read at a stride from [q | gate] rows, inputs out to
//! ±100 (where e^−z overflows), and tokens past the step's count left alone.

use fak::gpu::Step;
use fak::gpu::kernels::elementwise::{Elementwise, ElementwiseOp, ElementwiseShape};
use fak::gpu::kernels::support::View;
use fak_tests::elementwise;
use fak_tests::inputs::{step_buffer, upload_f32};
use fak_tests::{gpu, variants};

#[test]
fn swiglu_of_a_fused_gate_up_projection_matches_the_reference() {
    let ctx = gpu();
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for (i, n) in [1u32, 7, 1000, 3072].into_iter().enumerate() {
            elementwise::swiglu(ctx, &kernel, n, 10 + i as u64).assert();
        }
    }
}

#[test]
fn the_residual_add_matches_the_reference_on_ragged_widths() {
    let ctx = gpu();
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for (i, n) in [1u32, 37, 5120].into_iter().enumerate() {
            elementwise::add(ctx, &kernel, n, 20 + i as u64).assert();
        }
    }
}

/// Qwen2's q/k/v bias: one row every token of the step adds.
#[test]
fn a_bias_read_by_every_token_is_added_to_each() {
    let ctx = gpu();
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for (i, n) in [1u32, 37, 896].into_iter().enumerate() {
            elementwise::add_bias(ctx, &kernel, n, 40 + i as u64).assert();
        }
    }
}

#[test]
fn the_sigmoid_gate_read_at_the_qwen35_stride_matches_the_reference() {
    let ctx = gpu();
    for paths in variants::<Elementwise>(ctx) {
        let kernel = Elementwise::new(ctx, paths).unwrap();
        for (i, (heads, hd)) in [(3u32, 256u32), (5, 40), (1, 64)].into_iter().enumerate() {
            elementwise::sigmoid_gate(ctx, &kernel, heads, hd, 30 + i as u64).assert();
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
