//! The kernel checks: for each kernel family, seeded random cases, the CPU-reference answer and
//! the tolerance the output is held to. The GPU tests (tests/gpu_*.rs) assert every case on the
//! test adapter; `harness selftest` runs them on a user's adapter and reports them ([`report`])
//! instead of panicking. One set of cases and tolerances for both, so the selftest's verdict
//! means what the tests mean. The selftest's model checks are here too ([`model`]).

pub mod argmax;
pub mod attn_decode;
pub mod attn_prefill;
pub mod compare;
pub mod dequant;
pub mod elementwise;
pub mod embed;
pub mod gdn;
pub mod inputs;
pub mod kv;
pub mod matmul;
pub mod matvec;
pub mod model;
pub mod report;
pub mod rms_norm;
pub mod rope_kv;

pub use compare::{
    Bound, Measured, Output, Tolerance, assert_close, assert_dequantized, assert_within, measure,
};

use fak::gpu::kernels::quantize_q8::{CodesAndScales, Q8Vectors, QuantizeQ8};
use fak::gpu::{Activations, GpuContext, Kernel, KernelPaths, Step, storage_buffer, upload};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The distinct variants of kernel `K` the device can run, fallback first: every fast path the
/// adapter has, each also forced off. A check runs its kernel once per entry.
pub fn variants<K: Kernel>(ctx: &GpuContext) -> Vec<KernelPaths> {
    let mut out: Vec<KernelPaths> = Vec::new();
    for paths in ctx.runnable_paths() {
        let variant = K::select(paths);
        if !out.contains(&variant) {
            out.push(variant);
        }
    }
    out
}

/// A seeded generator: every random input of a check is reproducible from its seed.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A storage buffer of `n` f32 filled with NaN, so an element a kernel fails to write cannot pass
/// for a right answer.
pub fn poisoned_f32(ctx: &GpuContext, label: &str, n: u64) -> wgpu::Buffer {
    let buffer = storage_buffer(ctx, label, n * 4).expect("poisoned buffer");
    let nan = f32::NAN.to_bits().to_le_bytes();
    let words = (buffer.size() / 4) as usize;
    let fill: Vec<u8> = nan.iter().copied().cycle().take(words * 4).collect();
    fak::gpu::buffers::write(ctx, &buffer, 0, &fill).expect("poisoning");
    buffer
}

/// Room for `n` q8 vectors of `cols` columns, codes and scales filled with NaN's bytes (codes
/// 0x7fc00000 words, scales NaN), so a block a kernel fails to write cannot pass.
pub fn poisoned_q8(ctx: &GpuContext, label: &str, cols: u64, n: u32) -> Q8Vectors {
    let q8 = Q8Vectors::new(ctx, label, cols, n).expect("q8 vectors");
    for buffer in [&q8.codes, &q8.scales] {
        gdn::poison(ctx, buffer);
    }
    q8
}

/// What quantize_q8 makes of `n` rows of `cols` values (on the GPU, so a fused writer's blocks
/// can be held to it bit for bit: the same f32 values must give the same codes and scales).
pub fn quantize_q8_of(ctx: &GpuContext, values: &[f32], cols: u64, n: u32) -> Vec<CodesAndScales> {
    assert_eq!(values.len() as u64, cols * u64::from(n), "rows of {cols}");
    let quantize = QuantizeQ8::new(ctx, KernelPaths::FALLBACK).expect("quantize_q8");
    let x = upload(ctx, "values to quantize", bytemuck::cast_slice(values)).expect("upload");
    let out = poisoned_q8(ctx, "requantized", cols, n);
    let step = inputs::step_buffer(ctx, Step::new(0, n, 0));
    let x = Activations::contiguous(&x, cols);
    let binding = quantize
        .bind(ctx, x, cols, None, &out, &step, n)
        .expect("bind quantize_q8");
    ctx.run_pass("quantize_q8 of the f32 output", |pass| {
        quantize
            .encode(pass, &binding, n)
            .expect("encode quantize_q8");
    })
    .expect("quantize_q8");
    out.read_back(ctx, cols, n).expect("read back q8")
}

/// The cosine f32-weight logits must reach against the CPU reference on `paths`: 0.99999 (the
/// GPU sums in f32 in another order, the f16 path keeps the KV cache in f16), or
/// [`COOP_MIN_COSINE`] where the prefill mat-mul runs on cooperative matrices.
pub fn min_cosine(paths: KernelPaths) -> f64 {
    if paths.coop_matrix.is_some() {
        COOP_MIN_COSINE
    } else {
        0.99999
    }
}

/// The cooperative-matrix prefill mat-mul multiplies X and W rounded to f16 (≈ 5e-4 relative per
/// element, as llama.cpp's and MLX's GPU prefills do or coarser): measured on an H200 against
/// the f32 reference, the tiny Qwen3 reaches 0.9999986. The tiny Qwen3.5's gates and decays go
/// through exponentials, which stretch the rounding (0.99948 against f32 on one prompt,
/// 2026-12-04), so its tests hold it to a reference that rounds as the mat-mul does
/// (`Activations::F16Tiles`). A wrong kernel lands far below either.
pub const COOP_MIN_COSINE: f64 = 0.9999;
