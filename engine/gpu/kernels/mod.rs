//! One typed wrapper per WGSL kernel (the pattern is described in `gpu/mod.rs`).

pub mod argmax;
pub mod attn_decode;
pub mod attn_prefill;
pub mod dequant;
pub mod elementwise;
pub mod kv_cache;
pub mod rms_norm;
pub mod rope;
pub mod support;

use crate::gpu::kernel::KernelVariant;

/// Every variant of every kernel: what the portability test translates and `harness selftest`
/// runs. A new kernel adds its line here.
pub fn registry() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    all.extend(KernelVariant::all_of::<dequant::Dequant>());
    all.extend(KernelVariant::all_of::<rms_norm::RmsNorm>());
    all.extend(KernelVariant::all_of::<rope::Rope>());
    all.extend(KernelVariant::all_of::<elementwise::Elementwise>());
    all.extend(KernelVariant::all_of::<argmax::Argmax>());
    all.extend(KernelVariant::all_of::<kv_cache::KvWrite>());
    all.extend(KernelVariant::all_of::<attn_decode::AttnDecode>());
    all.extend(KernelVariant::all_of::<attn_prefill::AttnPrefill>());
    all
}
