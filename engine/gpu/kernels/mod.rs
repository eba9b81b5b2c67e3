//! One typed wrapper per WGSL kernel (the pattern is described in `gpu/mod.rs`).

pub mod argmax;
pub mod attn_decode;
pub mod attn_prefill;
pub mod delta_prep;
pub mod delta_state;
pub mod dequant;
pub mod elementwise;
pub mod embed;
pub mod gated_delta;
pub mod gated_delta_chunk;
pub mod gated_norm;
pub mod gdn_decode;
pub mod kv_cache;
pub mod matmul;
pub mod matvec;
pub mod quantize_q8;
pub mod read_probe;
pub mod rms_norm;
pub mod rope;
pub mod rope_kv;
pub mod ssm_conv;
pub mod support;
mod tensors;

use crate::gpu::kernel::KernelVariant;
use crate::quant::GgmlType;

/// Every variant of every kernel: what the portability test translates and `harness selftest`
/// runs. A new kernel adds its line here.
pub fn registry() -> Vec<KernelVariant> {
    let mut all = Vec::new();
    all.extend(KernelVariant::all_of::<dequant::Dequant>());
    all.extend(KernelVariant::all_of::<matmul::Matmul>());
    all.extend(KernelVariant::all_of::<matvec::MatVec>());
    all.extend(KernelVariant::all_of::<quantize_q8::QuantizeQ8>());
    all.extend(KernelVariant::all_of::<embed::Embed>());
    all.extend(KernelVariant::all_of::<ssm_conv::SsmConv>());
    all.extend(KernelVariant::all_of::<delta_prep::DeltaPrep>());
    all.extend(KernelVariant::all_of::<gated_delta::GatedDeltaDecode>());
    all.extend(KernelVariant::all_of::<gated_delta_chunk::GatedDeltaChunked>());
    all.extend(KernelVariant::all_of::<gated_norm::GatedNorm>());
    all.extend(KernelVariant::all_of::<gdn_decode::GdnDecode>());
    all.extend(gdn_decode::GdnDecode::wide_variants());
    all.extend(KernelVariant::all_of::<rms_norm::RmsNorm>());
    all.extend(KernelVariant::all_of::<elementwise::Elementwise>());
    all.extend(KernelVariant::all_of::<argmax::Argmax>());
    all.extend(KernelVariant::all_of::<rope_kv::RopeKv>());
    all.extend(KernelVariant::all_of::<attn_decode::AttnDecode>());
    all.extend(KernelVariant::all_of::<attn_decode::AttnDecodeRope>());
    all.extend(KernelVariant::all_of::<attn_prefill::AttnPrefill>());
    all.extend(KernelVariant::all_of::<read_probe::ReadProbe>());
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
