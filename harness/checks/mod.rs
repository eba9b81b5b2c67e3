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

use fak::gpu::{GpuContext, Kernel, KernelPaths, storage_buffer};
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
