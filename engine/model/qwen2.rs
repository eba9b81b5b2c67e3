//! Qwen2 (and Qwen2.5, which GGUF also calls `qwen2`): a member of the dense family of
//! [`super::qwen3`] that differs by what [`QWEN2`] says.
//!
//! Per layer: `h = RMSNorm(x)`, `q = W_q h + b_q`, `k = W_k h + b_k`, `v = W_v h + b_v` (the
//! biases are what sets it apart: `blk.N.attn_{q,k,v}.bias`, required), RoPE on q and k with
//! NEOX pairing (dimension i with i + n_rot/2) and no per-head q/k norm, causal GQA attention,
//! `x += W_o o`; then the SwiGLU MLP, `x += W_down(silu(W_gate h2) ⊙ W_up h2)` with
//! `h2 = RMSNorm(x)`. Logits `= W_out RMSNorm(x)`, `W_out` tied to the embedding when the file
//! has no `output.weight` (the small Qwen2.5 models). On the GPU each layer is an attention block
//! with biases and an MLP block; nothing here is new to the blocks.

use super::ModelError;
use super::decoder::Blueprint;
use super::qwen3::{Dense, dense_blueprint};
use crate::gguf::Gguf;
use crate::gpu::kernels::rope::RopePairing;

/// Biases on q, k and v; no q/k norms; NEOX pairing.
pub const QWEN2: Dense = Dense {
    rope_pairing: RopePairing::Neox,
    qk_norm: false,
    qkv_bias: true,
};

/// The Qwen2 decoder of `gguf` as the GPU model, the memory plan and the CPU reference read it.
pub fn blueprint(gguf: &Gguf) -> Result<Blueprint<'_>, ModelError> {
    dense_blueprint(gguf, QWEN2)
}
