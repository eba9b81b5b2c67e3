//! Qwen2 and Qwen2.5 (GGUF arch `qwen2`, Hugging Face `Qwen2ForCausalLM`): the dense recipe of
//! [`super::qwen3`] with q/k/v biases, no q/k norms and heads d / heads wide, as llama.cpp's
//! converter writes them (no `attention.key_length`). No converter transform either.

use super::ModelPlan;
use super::qwen3::{Member, Shape, dense_plan};
use super::vocab::Vocab;
use anyhow::Result;

const QWEN2: Member = Member {
    arch: "qwen2",
    hf_class: "Qwen2ForCausalLM",
    qk_norm: false,
    qkv_bias: true,
    head_dim_keys: false,
};

/// `tiny` is CI-sized: the cut 4 096-token vocabulary tied to the head (the small Qwen2.5
/// models tie theirs), heads of 64 (d = 128 over 2 query heads sharing 1 KV head) so the
/// attention kernels see a real head width, 4 layers as the tiny Qwen3 has.
const PRESETS: [(&str, Shape); 3] = [
    (
        "tiny",
        Shape {
            d_model: 128,
            n_layer: 4,
            n_head: 2,
            n_kv_head: 1,
            head_dim: 64,
            d_ff: 256,
            tied_embeddings: true,
            context_length: 32_768,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: true,
        },
    ),
    // Qwen/Qwen2.5-0.5B config.json.
    (
        "qwen2.5-0.5b",
        Shape {
            d_model: 896,
            n_layer: 24,
            n_head: 14,
            n_kv_head: 2,
            head_dim: 64,
            d_ff: 4864,
            tied_embeddings: true,
            context_length: 32_768,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: false,
        },
    ),
    // Qwen/Qwen2.5-7B config.json.
    (
        "qwen2.5-7b",
        Shape {
            d_model: 3584,
            n_layer: 28,
            n_head: 28,
            n_kv_head: 4,
            head_dim: 128,
            d_ff: 18944,
            tied_embeddings: false,
            context_length: 131_072,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: false,
        },
    ),
];

pub fn plan(preset: &str, vocab: Vocab) -> Result<ModelPlan> {
    dense_plan(&QWEN2, &PRESETS, preset, vocab)
}
