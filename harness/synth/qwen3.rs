//! Dense Qwen3 (GGUF arch `qwen3`, Hugging Face `Qwen3ForCausalLM`): presets, hyperparameter
//! keys and tensors as llama.cpp's converter writes them (model-spec.md §1.5, §1.6, §4).
//!
//! Qwen3 needs no converter transform: its RMSNorm gains are plain (no +1), Q/K are not
//! permuted (NeoX RoPE), so the GGUF and Hugging Face tensors hold the same values.

use super::vocab::{Family, Tokenizer, Vocab};
use super::weights::Init;
use super::{ModelPlan, TensorPlan};
use anyhow::{Result, bail};
use fak::gguf::Value;
use serde_json::json;

/// The shape of one Qwen3 model.
struct Shape {
    d_model: u64,
    n_layer: u64,
    n_head: u64,
    n_kv_head: u64,
    head_dim: u64,
    d_ff: u64,
    tied_embeddings: bool,
    context_length: u64,
    rope_theta: f64,
    rms_eps: f64,
    /// The cut 4 096-token vocabulary instead of Qwen's full one.
    cut_vocab: bool,
}

/// `tiny` keeps d small because the real 151 936-token vocabulary makes the embedding and LM
/// head dominate (each 151 936 × 64 f32 = 37 MiB, under lavapipe's 128 MiB binding). Its rows of
/// 64 force llama-quantize's shape fallbacks (Q5_0, Q8_0) on every d-row tensor, while
/// attn_output and ffn_down (rows of n_head·head_dim = d_ff = 256) take Q4_K and Q6_K; 4 layers
/// give use_more_bits both answers. q_dim = 256 ≠ d = 64, as in the real models (0.6B: 2048 vs
/// 1024), and it is untied so token_embd and output are distinct tensors.
const PRESETS: [(&str, Shape); 4] = [
    (
        "tiny",
        Shape {
            d_model: 64,
            n_layer: 4,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 64,
            d_ff: 256,
            tied_embeddings: false,
            context_length: 40_960,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: false,
        },
    ),
    // The trained tiny model (experiments/trained-tiny): d = 256 so every projection's rows are
    // whole Q4_K/Q6_K blocks, the cut vocabulary's 4 096 × 256 embedding tied to the head (2 MiB
    // in f16), two layers, so that the f16 GGUF stays under 4 MiB.
    (
        "trained",
        Shape {
            d_model: 256,
            n_layer: 2,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 64,
            d_ff: 256,
            tied_embeddings: true,
            context_length: 40_960,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: true,
        },
    ),
    // Qwen/Qwen3-0.6B config.json.
    (
        "qwen3-0.6b",
        Shape {
            d_model: 1024,
            n_layer: 28,
            n_head: 16,
            n_kv_head: 8,
            head_dim: 128,
            d_ff: 3072,
            tied_embeddings: true,
            context_length: 40_960,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: false,
        },
    ),
    // Qwen/Qwen3-8B config.json.
    (
        "qwen3-8b",
        Shape {
            d_model: 4096,
            n_layer: 36,
            n_head: 32,
            n_kv_head: 8,
            head_dim: 128,
            d_ff: 12288,
            tied_embeddings: false,
            context_length: 40_960,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            cut_vocab: false,
        },
    ),
];

pub fn plan(preset: &str, vocab: Vocab) -> Result<ModelPlan> {
    let Some((_, shape)) = PRESETS.iter().find(|(name, _)| *name == preset) else {
        let names: Vec<&str> = PRESETS.iter().map(|(name, _)| *name).collect();
        bail!(
            "unknown qwen3 preset {preset:?}; expected one of {}",
            names.join(", ")
        );
    };
    let tokenizer = Tokenizer::for_preset(Family::Qwen3, shape.cut_vocab, vocab)?;
    let hparams = hparams(shape);
    Ok(ModelPlan {
        arch: "qwen3",
        name: format!("fak synthetic qwen3 {preset}"),
        file_type_at: hparams.len(),
        hparams,
        tensors: tensors(shape, tokenizer.n_vocab()),
        hf_config: hf_config(shape, &tokenizer),
        tokenizer,
    })
}

/// The `qwen3.*` keys in the order the converter writes them.
fn hparams(s: &Shape) -> Vec<(String, Value)> {
    let u32_key = |k: &str, v: u64| (format!("qwen3.{k}"), Value::U32(v as u32));
    vec![
        u32_key("block_count", s.n_layer),
        u32_key("context_length", s.context_length),
        u32_key("embedding_length", s.d_model),
        u32_key("feed_forward_length", s.d_ff),
        u32_key("attention.head_count", s.n_head),
        u32_key("attention.head_count_kv", s.n_kv_head),
        (
            "qwen3.rope.freq_base".into(),
            Value::F32(s.rope_theta as f32),
        ),
        (
            "qwen3.attention.layer_norm_rms_epsilon".into(),
            Value::F32(s.rms_eps as f32),
        ),
        u32_key("attention.key_length", s.head_dim),
        u32_key("attention.value_length", s.head_dim),
    ]
}

fn tensors(s: &Shape, n_vocab: u64) -> Vec<TensorPlan> {
    let d = s.d_model;
    let q_dim = s.n_head * s.head_dim;
    let kv_dim = s.n_kv_head * s.head_dim;
    // Embedding rows of RMS 1/√d: through a tied head that gives unit-variance logits too.
    let embedding = Init::projection(d);
    let mut t = vec![
        TensorPlan::new(
            "token_embd.weight",
            "model.embed_tokens.weight",
            &[d, n_vocab],
            embedding,
        ),
        TensorPlan::new(
            "output_norm.weight",
            "model.norm.weight",
            &[d],
            Init::NormGain,
        ),
    ];
    if !s.tied_embeddings {
        t.push(TensorPlan::new(
            "output.weight",
            "lm_head.weight",
            &[d, n_vocab],
            Init::projection(d),
        ));
    }
    for l in 0..s.n_layer {
        let blk = |gguf: &str| format!("blk.{l}.{gguf}.weight");
        let hf = |part: &str| format!("model.layers.{l}.{part}.weight");
        let mut add = |gguf: &str, part: &str, shape: &[u64], init: Init| {
            t.push(TensorPlan::new(&blk(gguf), &hf(part), shape, init));
        };
        add("attn_norm", "input_layernorm", &[d], Init::NormGain);
        add(
            "attn_q",
            "self_attn.q_proj",
            &[d, q_dim],
            Init::projection(d),
        );
        add(
            "attn_k",
            "self_attn.k_proj",
            &[d, kv_dim],
            Init::projection(d),
        );
        add(
            "attn_v",
            "self_attn.v_proj",
            &[d, kv_dim],
            Init::projection(d),
        );
        add(
            "attn_q_norm",
            "self_attn.q_norm",
            &[s.head_dim],
            Init::NormGain,
        );
        add(
            "attn_k_norm",
            "self_attn.k_norm",
            &[s.head_dim],
            Init::NormGain,
        );
        add(
            "attn_output",
            "self_attn.o_proj",
            &[q_dim, d],
            Init::projection(q_dim),
        );
        add("ffn_norm", "post_attention_layernorm", &[d], Init::NormGain);
        add(
            "ffn_gate",
            "mlp.gate_proj",
            &[d, s.d_ff],
            Init::projection(d),
        );
        add("ffn_up", "mlp.up_proj", &[d, s.d_ff], Init::projection(d));
        add(
            "ffn_down",
            "mlp.down_proj",
            &[s.d_ff, d],
            Init::projection(s.d_ff),
        );
    }
    t
}

/// `config.json` of a Qwen3ForCausalLM checkpoint with this shape.
fn hf_config(s: &Shape, tok: &Tokenizer) -> serde_json::Value {
    json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": false,
        "attention_dropout": 0.0,
        "bos_token_id": tok.bos,
        "eos_token_id": tok.eos,
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "hidden_size": s.d_model,
        "initializer_range": 0.02,
        "intermediate_size": s.d_ff,
        "max_position_embeddings": s.context_length,
        "max_window_layers": s.n_layer,
        "num_attention_heads": s.n_head,
        "num_hidden_layers": s.n_layer,
        "num_key_value_heads": s.n_kv_head,
        "rms_norm_eps": s.rms_eps,
        "rope_scaling": null,
        "rope_theta": s.rope_theta,
        "sliding_window": null,
        "tie_word_embeddings": s.tied_embeddings,
        "torch_dtype": "float32",
        "use_cache": true,
        "use_sliding_window": false,
        "vocab_size": tok.n_vocab(),
    })
}
