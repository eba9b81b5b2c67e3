//! Qwen3.5 (GGUF arch `qwen35`, Hugging Face `Qwen3_5ForConditionalGeneration` /
//! `qwen3_5_text`): presets, hyperparameter keys and tensors as llama.cpp's converter writes
//! them (model-spec.md §1.5–1.7, §5).
//!
//! Unlike Qwen3 the converter transforms this checkpoint, so the GGUF and Hugging Face values
//! differ: zero-centred norm gains get +1 (`ssm_norm` excepted), `A_log` becomes
//! `ssm_a` = −exp(A_log), `dt_bias` is renamed `ssm_dt.bias`, conv1d's [C, 1, K] is squeezed
//! to [C, K], and every per-value-head axis goes from grouped to tiled order. The plan records
//! each transform so the export can undo it ([`super::hf`]).

use super::hf::{HeadAxis, ToHf, VHeads};
use super::vocab::{Family, Tokenizer, Vocab};
use super::weights::Init;
use super::{ModelPlan, TensorPlan};
use anyhow::{Result, bail};
use fak::gguf::{Array, Value};
use serde_json::json;

/// The shape of one Qwen3.5 model (text part).
struct Shape {
    d_model: u64,
    n_layer: u64,
    /// Every `full_attention_interval`-th layer is gated attention, the others Gated DeltaNet.
    full_attention_interval: u64,
    d_ff: u64,
    // Gated attention.
    n_head: u64,
    n_kv_head: u64,
    head_dim: u64,
    /// Interleaved M-RoPE sections (t, h, w); they sum to the rotary half-width.
    mrope_section: [u64; 3],
    // Gated DeltaNet.
    n_k_heads: u64,
    n_v_heads: u64,
    /// Key and value head size (llama.cpp's qwen35 takes both from `ssm.state_size`).
    ssm_head_dim: u64,
    conv_kernel: u64,
    tied_embeddings: bool,
    /// The cut 4 096-token vocabulary instead of Qwen's full one.
    cut_vocab: bool,
}

/// Rotary share of the attention head (Qwen3.5: 64 of 256).
const PARTIAL_ROTARY: f64 = 0.25;
const ROPE_THETA: f64 = 1e7;
const RMS_EPS: f64 = 1e-6;
const CONTEXT_LENGTH: u64 = 262_144;

/// `tiny` keeps Qwen3.5's ratios at CI size: 2 key heads and 6 value heads (r = 3, so a
/// grouped/tiled mix-up changes the output), GQA 2:1, a quarter of the head rotary, 8 layers
/// of which 3 and 7 are attention (6 DeltaNet layers, state carried through attention layers).
/// d = 64 because the 248 320-token table dominates (64 wide: 61 MiB f32, under lavapipe's
/// 128 MiB binding); q = 4·64 = 256, d_ff = 256 and ssm_out's 192 give llama-quantize rows of
/// 256 (Q4_K, Q6_K) and not (the Q5_0/Q8_0 fallbacks).
const PRESETS: [(&str, Shape); 5] = [
    (
        "tiny",
        Shape {
            d_model: 64,
            n_layer: 8,
            full_attention_interval: 4,
            d_ff: 256,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 64,
            mrope_section: [3, 3, 2],
            n_k_heads: 2,
            n_v_heads: 6,
            ssm_head_dim: 32,
            conv_kernel: 4,
            tied_embeddings: false,
            cut_vocab: false,
        },
    ),
    // The trained tiny model (experiments/trained-tiny): one Gated DeltaNet layer then one gated
    // attention layer, d = 256 (every projection's rows whole Q4_K/Q6_K blocks), 2 key and 4
    // value heads of 64 (r = 2), the cut vocabulary's 4 096 × 256 embedding tied to the head, so
    // that the f16 GGUF stays under 4 MiB.
    (
        "trained",
        Shape {
            d_model: 256,
            n_layer: 2,
            full_attention_interval: 2,
            d_ff: 256,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 64,
            mrope_section: [3, 3, 2],
            n_k_heads: 2,
            n_v_heads: 4,
            ssm_head_dim: 64,
            conv_kernel: 4,
            tied_embeddings: true,
            cut_vocab: true,
        },
    ),
    // The 27B's mixers at d = 1024 over 8 layers (~0.7B parameters, most in the vocabulary):
    // real head sizes and counts (24 query heads of 256 with their gates, 4 KV heads, 64 rotary
    // dims, sections [11, 11, 10]; 16 key and 48 value heads of 128) in a model small enough
    // for f32 oracles (`transformers`, the CPU reference) on one machine.
    (
        "mid",
        Shape {
            d_model: 1024,
            n_layer: 8,
            full_attention_interval: 4,
            d_ff: 3072,
            n_head: 24,
            n_kv_head: 4,
            head_dim: 256,
            mrope_section: [11, 11, 10],
            n_k_heads: 16,
            n_v_heads: 48,
            ssm_head_dim: 128,
            conv_kernel: 4,
            tied_embeddings: false,
            cut_vocab: false,
        },
    ),
    // Qwen/Qwen3.5-9B text_config: 32 layers, 8 of them attention.
    (
        "qwen35-9b",
        Shape {
            d_model: 4096,
            n_layer: 32,
            full_attention_interval: 4,
            d_ff: 12288,
            n_head: 16,
            n_kv_head: 4,
            head_dim: 256,
            mrope_section: [11, 11, 10],
            n_k_heads: 16,
            n_v_heads: 32,
            ssm_head_dim: 128,
            conv_kernel: 4,
            tied_embeddings: false,
            cut_vocab: false,
        },
    ),
    // Qwen/Qwen3.5-27B text_config: 64 layers = 48 Gated DeltaNet + 16 gated attention.
    (
        "qwen35-27b",
        Shape {
            d_model: 5120,
            n_layer: 64,
            full_attention_interval: 4,
            d_ff: 17408,
            n_head: 24,
            n_kv_head: 4,
            head_dim: 256,
            mrope_section: [11, 11, 10],
            n_k_heads: 16,
            n_v_heads: 48,
            ssm_head_dim: 128,
            conv_kernel: 4,
            tied_embeddings: false,
            cut_vocab: false,
        },
    ),
];

impl Shape {
    fn is_attention(&self, layer: u64) -> bool {
        (layer + 1).is_multiple_of(self.full_attention_interval)
    }

    fn n_rot(&self) -> u64 {
        (self.head_dim as f64 * PARTIAL_ROTARY) as u64
    }

    fn key_dim(&self) -> u64 {
        self.n_k_heads * self.ssm_head_dim
    }

    fn value_dim(&self) -> u64 {
        self.n_v_heads * self.ssm_head_dim
    }

    fn conv_dim(&self) -> u64 {
        2 * self.key_dim() + self.value_dim()
    }

    /// A per-value-head axis the converter tiles.
    fn v_heads(&self, head_len: u64, axis: HeadAxis) -> VHeads {
        VHeads {
            n_k_heads: self.n_k_heads,
            per_k_head: self.n_v_heads / self.n_k_heads,
            head_len,
            axis,
        }
    }
}

pub fn plan(preset: &str, vocab: Vocab) -> Result<ModelPlan> {
    let Some((_, shape)) = PRESETS.iter().find(|(name, _)| *name == preset) else {
        let names: Vec<&str> = PRESETS.iter().map(|(name, _)| *name).collect();
        bail!(
            "unknown qwen35 preset {preset:?}; expected one of {}",
            names.join(", ")
        );
    };
    let tokenizer = Tokenizer::for_preset(Family::Qwen35, shape.cut_vocab, vocab)?;
    Ok(ModelPlan {
        arch: "qwen35",
        name: format!("fak synthetic qwen35 {preset}"),
        hparams: hparams(shape),
        file_type_at: GENERIC_KEYS,
        tensors: tensors(shape, tokenizer.n_vocab()),
        hf_config: hf_config(shape, &tokenizer),
        tokenizer,
    })
}

/// How many of [`hparams`] the converter's generic text-model part writes (before
/// `general.file_type`).
const GENERIC_KEYS: usize = 11;

/// The `qwen35.*` keys in the order llama.cpp's converter (0c1e570, `Qwen3_5TextModel`)
/// writes them: the generic text-model keys (M-RoPE sections before the rope base), then
/// Qwen3-Next's Gated DeltaNet keys, the layer schedule and the rotary width. The schedule is
/// `full_attention_interval` alone, as in files converted from a config without `layer_types`
/// (the converter adds `attention.recurrent_layers` only when the config lists them), so the
/// Hugging Face config below leaves `layer_types` out too.
fn hparams(s: &Shape) -> Vec<(String, Value)> {
    let u32_key = |k: &str, v: u64| (format!("qwen35.{k}"), Value::U32(v as u32));
    let f32_key = |k: &str, v: f64| (format!("qwen35.{k}"), Value::F32(v as f32));
    let [t, h, w] = s.mrope_section;
    vec![
        u32_key("block_count", s.n_layer),
        u32_key("context_length", CONTEXT_LENGTH),
        u32_key("embedding_length", s.d_model),
        u32_key("feed_forward_length", s.d_ff),
        u32_key("attention.head_count", s.n_head),
        u32_key("attention.head_count_kv", s.n_kv_head),
        (
            "qwen35.rope.dimension_sections".into(),
            Value::Array(Array::I32([t, h, w, 0].iter().map(|&x| x as i32).collect())),
        ),
        f32_key("rope.freq_base", ROPE_THETA),
        f32_key("attention.layer_norm_rms_epsilon", RMS_EPS),
        u32_key("attention.key_length", s.head_dim),
        u32_key("attention.value_length", s.head_dim),
        u32_key("ssm.conv_kernel", s.conv_kernel),
        u32_key("ssm.state_size", s.ssm_head_dim),
        u32_key("ssm.group_count", s.n_k_heads),
        u32_key("ssm.time_step_rank", s.n_v_heads),
        u32_key("ssm.inner_size", s.value_dim()),
        u32_key("full_attention_interval", s.full_attention_interval),
        u32_key("rope.dimension_count", s.n_rot()),
    ]
}

fn tensors(s: &Shape, n_vocab: u64) -> Vec<TensorPlan> {
    let d = s.d_model;
    let hf_top = |part: &str| format!("model.language_model.{part}.weight");
    let mut t = vec![
        TensorPlan::new(
            "token_embd.weight",
            &hf_top("embed_tokens"),
            &[d, n_vocab],
            Init::projection(d),
        ),
        TensorPlan::new("output_norm.weight", &hf_top("norm"), &[d], Init::NormGain)
            .with_to_hf(ToHf::NormOffset),
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
        let layer = Layer { s, l };
        t.push(layer.norm("attn_norm", "input_layernorm"));
        if s.is_attention(l) {
            t.extend(layer.gated_attention());
        } else {
            t.extend(layer.delta_net());
        }
        t.push(layer.norm("post_attention_norm", "post_attention_layernorm"));
        t.push(layer.weight("ffn_gate", "mlp.gate_proj", &[d, s.d_ff]));
        t.push(layer.weight("ffn_up", "mlp.up_proj", &[d, s.d_ff]));
        t.push(layer.weight("ffn_down", "mlp.down_proj", &[s.d_ff, d]));
    }
    t
}

/// Tensor plans of one block.
struct Layer<'a> {
    s: &'a Shape,
    l: u64,
}

impl Layer<'_> {
    fn hf(&self, part: &str) -> String {
        format!("model.language_model.layers.{}.{part}", self.l)
    }

    /// A projection `blk.N.<gguf>.weight` of GGUF shape [fan_in, out].
    fn weight(&self, gguf: &str, hf: &str, shape: &[u64]) -> TensorPlan {
        TensorPlan::new(
            &format!("blk.{}.{gguf}.weight", self.l),
            &self.hf(&format!("{hf}.weight")),
            shape,
            Init::projection(shape[0]),
        )
    }

    /// A zero-centred RMSNorm gain (the GGUF holds 1 + w).
    fn norm(&self, gguf: &str, hf: &str) -> TensorPlan {
        self.gain(gguf, hf, self.s.d_model)
            .with_to_hf(ToHf::NormOffset)
    }

    fn gain(&self, gguf: &str, hf: &str, len: u64) -> TensorPlan {
        TensorPlan::new(
            &format!("blk.{}.{gguf}.weight", self.l),
            &self.hf(&format!("{hf}.weight")),
            &[len],
            Init::NormGain,
        )
    }

    /// Query (with its output gate interleaved per head), key, value, per-head q/k norms and
    /// the output projection.
    fn gated_attention(&self) -> Vec<TensorPlan> {
        let s = self.s;
        let (d, q_dim, kv_dim) = (s.d_model, s.n_head * s.head_dim, s.n_kv_head * s.head_dim);
        let head_norm = |gguf, hf| self.gain(gguf, hf, s.head_dim).with_to_hf(ToHf::NormOffset);
        vec![
            self.weight("attn_q", "self_attn.q_proj", &[d, 2 * q_dim]),
            self.weight("attn_k", "self_attn.k_proj", &[d, kv_dim]),
            self.weight("attn_v", "self_attn.v_proj", &[d, kv_dim]),
            head_norm("attn_q_norm", "self_attn.q_norm"),
            head_norm("attn_k_norm", "self_attn.k_norm"),
            self.weight("attn_output", "self_attn.o_proj", &[q_dim, d]),
        ]
    }

    /// The Gated DeltaNet mixer, each per-value-head axis tiled as the converter leaves it.
    fn delta_net(&self) -> Vec<TensorPlan> {
        let s = self.s;
        let (d, nv, dv) = (s.d_model, s.n_v_heads, s.ssm_head_dim);
        let (k, conv_dim) = (s.conv_kernel, s.conv_dim());
        let v_rows = HeadAxis::Rows {
            first: 2 * s.key_dim(),
        };
        let first_rows = HeadAxis::Rows { first: 0 };
        let per_head_scalar = |gguf: &str, hf: &str, init: Init, to_hf: ToHf| {
            TensorPlan::new(
                &format!("blk.{}.{gguf}", self.l),
                &self.hf(&format!("linear_attn.{hf}")),
                &[nv],
                init,
            )
            .with_to_hf(to_hf)
            .with_v_heads(s.v_heads(1, HeadAxis::Columns))
        };
        vec![
            self.weight("attn_qkv", "linear_attn.in_proj_qkv", &[d, conv_dim])
                .with_v_heads(s.v_heads(dv, v_rows)),
            self.weight("attn_gate", "linear_attn.in_proj_z", &[d, s.value_dim()])
                .with_v_heads(s.v_heads(dv, first_rows)),
            self.weight("ssm_beta", "linear_attn.in_proj_b", &[d, nv])
                .with_v_heads(s.v_heads(1, first_rows)),
            self.weight("ssm_alpha", "linear_attn.in_proj_a", &[d, nv])
                .with_v_heads(s.v_heads(1, first_rows)),
            // Depthwise: each channel reads K taps, so unit-variance inputs stay unit-variance.
            TensorPlan::new(
                &format!("blk.{}.ssm_conv1d.weight", self.l),
                &self.hf("linear_attn.conv1d.weight"),
                &[k, conv_dim],
                Init::projection(k),
            )
            .with_hf_shape(&[conv_dim, 1, k])
            .with_v_heads(s.v_heads(dv, v_rows)),
            per_head_scalar(
                "ssm_dt.bias",
                "dt_bias",
                Init::Normal { std: 1.0 },
                ToHf::Same,
            ),
            per_head_scalar("ssm_a", "A_log", Init::NegExp, ToHf::NegExpALog),
            // The gated norm's gain is plain (no +1 anywhere) and shared by all heads.
            self.gain("ssm_norm", "linear_attn.norm", dv),
            self.weight("ssm_out", "linear_attn.out_proj", &[s.value_dim(), d])
                .with_v_heads(s.v_heads(dv, HeadAxis::Columns)),
        ]
    }
}

/// `config.json` of a Qwen3.5 checkpoint with this shape, as published: the text model's
/// keys under `text_config` (no vision tower: the synthetic model has none), which both
/// `transformers` (`Qwen3_5ForCausalLM` reads `text_config` and drops the `language_model`
/// prefix) and `mlx_lm` (`qwen3_5`) load.
fn hf_config(s: &Shape, tok: &Tokenizer) -> serde_json::Value {
    json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": s.tied_embeddings,
        "text_config": {
            "model_type": "qwen3_5_text",
            "attention_bias": false,
            "attention_dropout": 0.0,
            "attn_output_gate": true,
            "bos_token_id": tok.bos,
            "eos_token_id": tok.eos,
            "dtype": "float32",
            "full_attention_interval": s.full_attention_interval,
            "head_dim": s.head_dim,
            "hidden_act": "silu",
            "hidden_size": s.d_model,
            "initializer_range": 0.02,
            "intermediate_size": s.d_ff,
            "linear_conv_kernel_dim": s.conv_kernel,
            "linear_key_head_dim": s.ssm_head_dim,
            "linear_num_key_heads": s.n_k_heads,
            "linear_num_value_heads": s.n_v_heads,
            "linear_value_head_dim": s.ssm_head_dim,
            "mamba_ssm_dtype": "float32",
            "max_position_embeddings": CONTEXT_LENGTH,
            "mtp_num_hidden_layers": 0,
            "num_attention_heads": s.n_head,
            "num_hidden_layers": s.n_layer,
            "num_key_value_heads": s.n_kv_head,
            "rms_norm_eps": RMS_EPS,
            "rope_parameters": {
                "mrope_interleaved": true,
                "mrope_section": s.mrope_section,
                "partial_rotary_factor": PARTIAL_ROTARY,
                "rope_theta": ROPE_THETA,
                "rope_type": "default",
            },
            "tie_word_embeddings": s.tied_embeddings,
            "use_cache": true,
            "vocab_size": tok.n_vocab(),
        },
    })
}
