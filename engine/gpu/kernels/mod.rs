//! One typed wrapper per WGSL kernel (the pattern is described in `gpu/mod.rs`).

pub mod dequant;
pub mod embed;
pub mod matvec;
mod tensors;

use crate::gpu::kernel::KernelVariant;

/// Every variant of every kernel: what the portability test translates and `harness selftest`
/// runs. A new kernel adds its line here.
pub fn registry() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    all.extend(KernelVariant::all_of::<dequant::Dequant>());
    all.extend(KernelVariant::all_of::<matvec::MatVec>());
    all.extend(KernelVariant::all_of::<embed::Embed>());
    all
}
