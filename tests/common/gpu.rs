//! The one shared device per test binary. The variants a kernel has on it, seeded inputs and
//! poisoned outputs are the kernel checks' (`fak_harness::checks`).

use fak::gpu::GpuContext;
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
