//! GPU test utilities: one shared device per test binary, the variants a kernel has on it, seeded
//! inputs and poisoned outputs.

use fak::gpu::{GpuContext, Kernel, KernelPaths, storage_buffer};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::OnceLock;

/// The device every test of this binary shares, opened once from the environment
/// (`FAK_ADAPTER`, `WGPU_BACKEND`; CI points `VK_DRIVER_FILES` at lavapipe). `FAK_FORCE` is not
/// needed: tests iterate every runnable path themselves ([`variants`]).
pub fn gpu() -> &'static GpuContext {
    static GPU: OnceLock<GpuContext> = OnceLock::new();
    GPU.get_or_init(|| {
        let ctx = GpuContext::from_env().unwrap_or_else(|e| panic!("opening the test GPU: {e}"));
        let facts = ctx.facts();
        eprintln!(
            "test GPU: {} ({}, {}), subgroups {}..{}, runnable paths: {}",
            facts.name,
            facts.backend,
            facts.driver_info,
            facts.subgroup_min_size,
            facts.subgroup_max_size,
            ctx.runnable_paths()
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        ctx
    })
}

/// The distinct variants of kernel `K` the device can run, fallback first: every fast path the
/// adapter has, each also forced off. A test runs its kernel once per entry.
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

/// A seeded generator: every random input of a test is reproducible from its seed.
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
