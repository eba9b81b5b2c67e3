//! Dense Qwen3 (GGUF arch `qwen3`, Hugging Face `Qwen3ForCausalLM`): presets, hyperparameter
//! keys and tensors as llama.cpp's converter writes them; and the same recipe for the other
//! members of the dense family ([`Member`]: `super::qwen2`).
//!
//! Qwen3 needs no converter transform: its RMSNorm gains are plain (no +1), Q/K are not
//! permuted (NeoX RoPE), so the GGUF and Hugging Face tensors hold the same values.

use super::vocab::{Family, Tokenizer, Vocab};
use super::weights::Init;
use super::{ModelPlan, TensorPlan};
use anyhow::{Result, bail};
use fak::gguf::Value;
use serde_json::json;

/// What sets a member of the dense family apart in the files its converter writes.
pub(super) struct Member {
    /// `general.architecture`, the prefix of its keys and the Hugging Face `model_type`.
    pub arch: &'static str,
    /// The Hugging Face class (`config.json` `architectures`).
    pub hf_class: &'static str,
    /// Per-head q/k RMSNorm gains (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// Biases on the q, k and v projections (`attn_{q,k,v}.bias`).
    pub qkv_bias: bool,
    /// Whether the converter writes `attention.key_length`/`value_length` (Qwen3 does; Qwen2's
    /// head width is d / heads, and its presets keep to that).
    pub head_dim_keys: bool,
}

const QWEN3: Member = Member {
    arch: "qwen3",
    hf_class: "Qwen3ForCausalLM",
    qk_norm: true,
    qkv_bias: false,
    head_dim_keys: true,
};

/// The shape of one dense model.
pub(super) struct Shape {
    pub d_model: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_kv_head: u64,
    pub head_dim: u64,
    pub d_ff: u64,
    pub tied_embeddings: bool,
    pub context_length: u64,
    pub rope_theta: f64,
    pub rms_eps: f64,
    /// The cut 4 096-token vocabulary instead of Qwen's full one.
    pub cut_vocab: bool,
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
    dense_plan(&QWEN3, &PRESETS, preset, vocab)
}

/// The model of `member` in shape `preset` of `presets` with `vocab`. Both tokenizers are
/// Qwen's BPE vocabulary with Qwen3's added tokens and chat template (the full one, or the cut
/// 4 096-token one), the pre-tokenizer the one `member`'s registry line names.
pub(super) fn dense_plan(
    member: &Member,
    presets: &[(&str, Shape)],
    preset: &str,
    vocab: Vocab,
) -> Result<ModelPlan> {
    let Some((_, shape)) = presets.iter().find(|(name, _)| *name == preset) else {
        let names: Vec<&str> = presets.iter().map(|(name, _)| *name).collect();
        bail!(
            "unknown {} preset {preset:?}; expected one of {}",
            member.arch,
            names.join(", ")
        );
    };
    if !member.head_dim_keys && shape.n_head * shape.head_dim != shape.d_model {
        bail!("a {} head is d / heads wide", member.arch);
    }
    let tokenizer = Tokenizer::for_preset(Family::Qwen3, shape.cut_vocab, vocab)?;
    let hparams = hparams(member, shape);
    Ok(ModelPlan {
        arch: member.arch,
        name: format!("fak synthetic {} {preset}", member.arch),
        file_type_at: hparams.len(),
        hparams,
        tensors: tensors(member, shape, tokenizer.n_vocab()),
        hf_config: hf_config(member, shape, &tokenizer),
        tokenizer,
    })
}

/// The `{arch}.*` keys in the order the converter writes them.
fn hparams(m: &Member, s: &Shape) -> Vec<(String, Value)> {
    let u32_key = |k: &str, v: u64| (format!("{}.{k}", m.arch), Value::U32(v as u32));
    let mut keys = vec![
        u32_key("block_count", s.n_layer),
        u32_key("context_length", s.context_length),
        u32_key("embedding_length", s.d_model),
        u32_key("feed_forward_length", s.d_ff),
        u32_key("attention.head_count", s.n_head),
        u32_key("attention.head_count_kv", s.n_kv_head),
        (
            format!("{}.rope.freq_base", m.arch),
            Value::F32(s.rope_theta as f32),
        ),
        (
            format!("{}.attention.layer_norm_rms_epsilon", m.arch),
            Value::F32(s.rms_eps as f32),
        ),
    ];
    if m.head_dim_keys {
        keys.push(u32_key("attention.key_length", s.head_dim));
        keys.push(u32_key("attention.value_length", s.head_dim));
    }
    keys
}

fn tensors(m: &Member, s: &Shape, n_vocab: u64) -> Vec<TensorPlan> {
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
        if m.qk_norm {
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
        }
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
        if m.qkv_bias {
            // Biases as large as the products' outputs, so that a dropped one shows.
            let bias = Init::Normal { std: 0.5 };
            for (x, width) in [("q", q_dim), ("k", kv_dim), ("v", kv_dim)] {
                t.push(TensorPlan::new(
                    &format!("blk.{l}.attn_{x}.bias"),
                    &format!("model.layers.{l}.self_attn.{x}_proj.bias"),
                    &[width],
                    bias,
                ));
            }
        }
    }
    t
}

/// `config.json` of a checkpoint of `m`'s Hugging Face class with this shape.
fn hf_config(m: &Member, s: &Shape, tok: &Tokenizer) -> serde_json::Value {
    json!({
        "architectures": [m.hf_class],
        "model_type": m.arch,
        "attention_bias": m.qkv_bias,
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
