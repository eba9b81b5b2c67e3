//! The Hugging Face form of a synthetic model: `config.json`, `model.safetensors` (the float
//! weights before any quantization, F32), `tokenizer.json` (byte-level BPE built from the same
//! vocabulary the GGUF carries) and `tokenizer_config.json` — what `transformers` and `mlx_lm`
//! load, and what llama.cpp's converter would turn back into the GGUF.
//!
//! Where the converter transforms a tensor (qwen35: zero-centred norm gains get +1, `A_log`
//! becomes −exp(A_log), value heads go from grouped to tiled order; model-spec.md §1.7), the
//! export holds the inverse of that transform applied to the GGUF's values.

use super::vocab::Tokenizer;
use super::{ModelPlan, Source, TensorPlan};
use anyhow::{Context, Result};
use fak::quant::GgmlType;
use indicatif::ProgressBar;
use safetensors::{Dtype, View};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// Writes the Hugging Face directory of `plan`'s float weights (as `source` gives them).
pub fn write(dir: &Path, plan: &ModelPlan, source: Source, bar: &ProgressBar) -> Result<()> {
    write_metadata(dir, plan, &plan.hf_config)?;
    let path = dir.join("model.safetensors");
    let views = plan.tensors.iter().map(|t| {
        let view = LazyTensor {
            plan: t,
            source,
            shape: t.hf_shape.iter().map(|&d| d as usize).collect(),
            bar,
        };
        (t.hf_name.clone(), view)
    });
    // transformers refuses safetensors without a format tag.
    let info = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(info), &path)
        .with_context(|| format!("writing {}", path.display()))?;
    match_permissions(dir, &path)
}

/// `config.json` (as given), `tokenizer.json` and `tokenizer_config.json` in `dir`: what every
/// Hugging Face-style directory of this model holds beside its weights.
pub fn write_metadata(dir: &Path, plan: &ModelPlan, config: &Value) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_json(&dir.join("config.json"), config)?;
    write_json(
        &dir.join("tokenizer.json"),
        &tokenizer_json(&plan.tokenizer),
    )?;
    // A composite config (qwen3_5) keeps the text model's keys under `text_config`.
    let text_config = plan.hf_config.get("text_config").unwrap_or(&plan.hf_config);
    let max_len = &text_config["max_position_embeddings"];
    write_json(
        &dir.join("tokenizer_config.json"),
        &tokenizer_config(&plan.tokenizer, max_len),
    )
}

/// The safetensors crate writes through a private temporary file (mode 0600); give the weights
/// the permissions of the files beside them.
pub fn match_permissions(dir: &Path, path: &Path) -> Result<()> {
    let permissions = std::fs::metadata(dir.join("config.json"))?.permissions();
    std::fs::set_permissions(path, permissions)
        .with_context(|| format!("setting permissions of {}", path.display()))
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// A tensor whose F32 bytes are generated only when the safetensors writer asks for them, so
/// one tensor at a time is in memory.
struct LazyTensor<'a> {
    plan: &'a TensorPlan,
    source: Source,
    shape: Vec<usize>,
    bar: &'a ProgressBar,
}

impl View for LazyTensor<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let t = self.plan;
        let row_len = t.row_len() as usize;
        let mut floats = vec![0f32; t.n_elements() as usize];
        let rows_per_chunk = (1usize << 20).div_ceil(row_len);
        for (i, chunk) in floats.chunks_mut(rows_per_chunk * row_len).enumerate() {
            let first = (i * rows_per_chunk) as u64;
            // F32 is the float stream itself: no random blocks stand in for it.
            self.source
                .fill_rows(t, GgmlType::F32, first, chunk)
                .unwrap_or_else(|e| panic!("{}: {e}", t.name));
            self.bar.inc(4 * chunk.len() as u64);
        }
        let floats = to_hf_values(t, floats);
        Cow::Owned(bytemuck::cast_slice(&floats).to_vec())
    }

    fn data_len(&self) -> usize {
        4 * self.plan.n_elements() as usize
    }
}

/// How the converter computes a GGUF value from the checkpoint's, element by element; the
/// export applies the inverse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToHf {
    /// Stored as is.
    Same,
    /// A zero-centred RMSNorm gain: the checkpoint stores w, the GGUF 1 + w.
    NormOffset,
    /// The GDN decay rate: the checkpoint stores A_log, the GGUF `ssm_a` = −exp(A_log).
    NegExpALog,
}

impl ToHf {
    fn apply(self, gguf: f32) -> f32 {
        match self {
            ToHf::Same => gguf,
            ToHf::NormOffset => gguf - 1.0,
            ToHf::NegExpALog => (-gguf).ln(),
        }
    }

    /// The converter's transform itself: the GGUF value of a checkpoint value.
    fn to_gguf(self, hf: f32) -> f32 {
        match self {
            ToHf::Same => hf,
            ToHf::NormOffset => hf + 1.0,
            ToHf::NegExpALog => -hf.exp(),
        }
    }
}

/// A value-head axis the qwen35 converter reordered from grouped (v-head h belongs to k-head
/// ⌊h/r⌋) to tiled (GGUF head p = i·nk + j is checkpoint head j·r + i), so that in the GGUF
/// v-head p reads k-head p mod nk (model-spec.md §1.7.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VHeads {
    /// Key heads (nk).
    pub n_k_heads: u64,
    /// Value heads per key head (r = nv / nk).
    pub per_k_head: u64,
    /// Consecutive elements one head spans along the axis (dv, or 1).
    pub head_len: u64,
    pub axis: HeadAxis,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadAxis {
    /// The heads are GGUF rows (checkpoint output features) from this row on.
    Rows { first: u64 },
    /// The heads are the elements of every GGUF row (checkpoint input features; a 1-D
    /// tensor is one row).
    Columns,
}

impl VHeads {
    /// The GGUF (tiled) head holding checkpoint (grouped) head `h`.
    fn gguf_head(self, h: u64) -> u64 {
        (h % self.per_k_head) * self.n_k_heads + h / self.per_k_head
    }

    /// Reorders `gguf` (a whole tensor in GGUF order, rows of `row_len`) into grouped order.
    fn to_grouped(self, gguf: &[f32], row_len: usize) -> Vec<f32> {
        self.reorder(gguf, row_len, true)
    }

    /// Reorders `src` (a whole tensor, rows of `row_len`) from tiled (GGUF) into grouped
    /// (checkpoint) order, or back when `grouped` is false.
    fn reorder(self, src: &[f32], row_len: usize, grouped: bool) -> Vec<f32> {
        let mut out = src.to_vec();
        let n_heads = self.n_k_heads * self.per_k_head;
        let span = self.head_len as usize;
        let move_heads = |dst: &mut [f32], src: &[f32]| {
            for h in 0..n_heads {
                let (mut from, mut to) = (self.gguf_head(h) as usize * span, h as usize * span);
                if !grouped {
                    (from, to) = (to, from);
                }
                dst[to..to + span].copy_from_slice(&src[from..from + span]);
            }
        };
        match self.axis {
            HeadAxis::Rows { first } => {
                let start = first as usize * row_len;
                let len = (n_heads * self.head_len) as usize * row_len;
                // A head of `head_len` rows is `head_len · row_len` contiguous values.
                let rows = VHeads {
                    head_len: self.head_len * row_len as u64,
                    axis: HeadAxis::Columns,
                    ..self
                };
                let region = rows.reorder(&src[start..start + len], len, grouped);
                out[start..start + len].copy_from_slice(&region);
            }
            HeadAxis::Columns => {
                assert_eq!(n_heads as usize * span, row_len, "heads fill the row");
                for (dst, row) in out.chunks_mut(row_len).zip(src.chunks(row_len)) {
                    move_heads(dst, row);
                }
            }
        }
        out
    }
}

/// The checkpoint values of tensor `t` from its GGUF values (a whole tensor, GGUF order).
fn to_hf_values(t: &TensorPlan, gguf: Vec<f32>) -> Vec<f32> {
    checkpoint_values(t, gguf, t.to_hf)
}

/// What `mlx_lm` holds of tensor `t` after its `sanitize` (what `mlx_lm.convert` saves), from
/// its GGUF values: the checkpoint's, except that a zero-centred norm gain keeps the +1, which
/// mlx_lm adds when it loads a checkpoint as the converter does. The whole tensor, GGUF order.
pub fn to_mlx_values(t: &TensorPlan, gguf: Vec<f32>) -> Vec<f32> {
    let to_mlx = match t.to_hf {
        ToHf::NormOffset => ToHf::Same,
        other => other,
    };
    checkpoint_values(t, gguf, to_mlx)
}

/// Whether [`to_mlx_values`] changes `t`'s values (its heads move or its values are mapped).
pub fn mlx_transforms(t: &TensorPlan) -> bool {
    t.v_heads.is_some() || !matches!(t.to_hf, ToHf::Same | ToHf::NormOffset)
}

fn checkpoint_values(t: &TensorPlan, gguf: Vec<f32>, to_hf: ToHf) -> Vec<f32> {
    let mut values = match &t.v_heads {
        Some(v) => v.to_grouped(&gguf, t.row_len() as usize),
        None => gguf,
    };
    if to_hf != ToHf::Same {
        values.iter_mut().for_each(|x| *x = to_hf.apply(*x));
    }
    values
}

/// The GGUF values of tensor `t` from its checkpoint values (a whole tensor, checkpoint order):
/// what the converter writes.
pub fn to_gguf_values(t: &TensorPlan, hf: Vec<f32>) -> Vec<f32> {
    let mut values = match &t.v_heads {
        Some(v) => v.reorder(&hf, t.row_len() as usize, false),
        None => hf,
    };
    if t.to_hf != ToHf::Same {
        values.iter_mut().for_each(|x| *x = t.to_hf.to_gguf(*x));
    }
    values
}

/// `tokenizer.json`: the BPE model over the tokens below the first added one, the added tokens
/// beside it, and the pre-tokenizer/decoder of a byte-level BPE (split regex, then GPT-2's
/// byte map).
///
/// Tokenizer classes of `transformers` rebuild the added tokens right after the BPE vocabulary
/// whatever ids the file gives them, so the vocabulary must reach the first added id: where the
/// GGUF pads a hole below it (Qwen3.5's added tokens start at 248 044, the embedded BPE
/// vocabulary ends at 151 643) the `[PAD<id>]` placeholders join the vocabulary. No merge
/// produces them, so no text encodes to them.
fn tokenizer_json(tok: &Tokenizer) -> Value {
    let first_added = tok
        .added
        .first()
        .map_or(tok.tokens.len(), |t| t.id as usize);
    let vocab: Map<String, Value> = tok.tokens[..first_added]
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), json!(id)))
        .collect();
    let added: Vec<Value> = tok
        .added
        .iter()
        .map(|t| {
            json!({
                "id": t.id, "content": t.content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": t.special,
            })
        })
        .collect();
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false,
    });
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": tok.split_regex},
                    "behavior": "Isolated",
                    "invert": false,
                },
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab,
            "merges": tok.merges,
        },
    })
}

/// `tokenizer_config.json`: special tokens by content, the chat template, no BOS.
fn tokenizer_config(tok: &Tokenizer, model_max_length: &Value) -> Value {
    let decoder: Map<String, Value> = tok
        .added
        .iter()
        .map(|t| {
            let entry = json!({
                "content": t.content, "lstrip": false, "normalized": false, "rstrip": false,
                "single_word": false, "special": t.special,
            });
            (t.id.to_string(), entry)
        })
        .collect();
    let pad = &tok.tokens[tok.pad as usize];
    let additional: Vec<&str> = tok
        .added
        .iter()
        .filter(|t| t.special && &t.content != pad)
        .map(|t| t.content.as_str())
        .collect();
    json!({
        "add_bos_token": false,
        "add_prefix_space": false,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": additional,
        "bos_token": null,
        "chat_template": tok.chat_template,
        "clean_up_tokenization_spaces": false,
        "eos_token": tok.tokens[tok.eos as usize],
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": pad,
        "split_special_tokens": false,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": null,
    })
}
