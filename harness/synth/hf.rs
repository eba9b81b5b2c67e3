//! The Hugging Face form of a synthetic model: `config.json`, `model.safetensors` (the float
//! weights before any quantization, F32), `tokenizer.json` (byte-level BPE built from the same
//! vocabulary the GGUF carries) and `tokenizer_config.json` — what `transformers` and `mlx_lm`
//! load, and what llama.cpp's converter would turn back into the GGUF.

use super::vocab::{NORMAL, Tokenizer};
use super::{ModelPlan, TensorPlan, weights};
use anyhow::{Context, Result};
use indicatif::ProgressBar;
use safetensors::{Dtype, View};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

pub fn write(dir: &Path, plan: &ModelPlan, seed: u64, bar: &ProgressBar) -> Result<()> {
    write_metadata(dir, plan, &plan.hf_config)?;
    let path = dir.join("model.safetensors");
    let views = plan.tensors.iter().map(|t| {
        let view = LazyTensor {
            plan: t,
            seed,
            shape: t.shape.iter().rev().map(|&d| d as usize).collect(),
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
    let max_len = &plan.hf_config["max_position_embeddings"];
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
    seed: u64,
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
        let mut bytes = Vec::with_capacity(self.data_len());
        let rows_per_chunk = (1usize << 20).div_ceil(row_len);
        let mut floats = vec![0f32; rows_per_chunk * row_len];
        for first in (0..t.n_rows()).step_by(rows_per_chunk) {
            let rows = (rows_per_chunk as u64).min(t.n_rows() - first) as usize;
            let chunk = &mut floats[..rows * row_len];
            weights::fill_rows(t.init, self.seed, &t.name, first, row_len, chunk);
            bytes.extend_from_slice(bytemuck::cast_slice(chunk));
            self.bar.inc(4 * chunk.len() as u64);
        }
        Cow::Owned(bytes)
    }

    fn data_len(&self) -> usize {
        4 * self.plan.n_elements() as usize
    }
}

/// `tokenizer.json`: the BPE model over the NORMAL tokens, the added tokens beside it, and
/// the pre-tokenizer/decoder of a byte-level BPE (split regex, then GPT-2's byte map).
fn tokenizer_json(tok: &Tokenizer) -> Value {
    let vocab: Map<String, Value> = tok
        .tokens
        .iter()
        .zip(&tok.types)
        .enumerate()
        .filter(|&(_, (_, &ty))| ty == NORMAL)
        .map(|(id, (token, _))| (token.clone(), json!(id)))
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
