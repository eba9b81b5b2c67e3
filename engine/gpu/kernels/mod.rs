//! One typed wrapper per WGSL kernel (the pattern is described in `gpu/mod.rs`).

pub mod dequant;
pub mod matmul;

use crate::gpu::kernel::KernelVariant;
use crate::quant::GgmlType;

/// Every variant of every kernel: what the portability test translates and `harness selftest`
/// runs. A new kernel adds its line here.
pub fn registry() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    all.extend(KernelVariant::all_of::<dequant::Dequant>());
    all.extend(KernelVariant::all_of::<matmul::Matmul>());
    all
}

/// The override constants of wgsl/dequant_type.wgsl that specialise a pipeline for `ty`.
pub fn type_constants(ty: GgmlType) -> Vec<(&'static str, f64)> {
    let (elems, bytes) = ty.block_geometry();
    vec![
        ("GGML_TYPE", f64::from(ty.id())),
        ("BLOCK_ELEMS", elems as f64),
        ("BLOCK_BYTES", bytes as f64),
    ]
}
