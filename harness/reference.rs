//! `harness reference`: fak's CPU reference forward pass (f32, one token at a time) on a GGUF,
//! writing logits in `harness run --logits-out`'s format, so every oracle that checks the GPU
//! engine's logits can check the reference's too (e.g. experiments/qwen35-oracle against
//! Hugging Face `transformers`).

use crate::flag_values::parse_token_ids;
use crate::logits_file::write_logits_file;
use anyhow::{Context, Result};
use fak::gguf::Gguf;
use fak::model::Arch;
use fak::reference::Activations;
use fak::reference::AttentionRounding;
use fak::reference::ops::argmax;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model.
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt as token ids, comma- or space-separated.
    #[arg(long)]
    pub tokens: String,
    /// Greedy tokens to generate after the prompt (their logits are written too).
    #[arg(short = 'n', long = "n-out", default_value_t = 0, value_parser = crate::flag_values::tokens(0))]
    pub n_out: usize,
    /// Where to write every position's logits: raw little-endian f32 [rows, n_vocab] and the
    /// sidecar `<file>.json` (`{"n_vocab", "rows", "token_ids"}`).
    #[arg(long)]
    pub logits_out: PathBuf,
    /// How each mat-vec's input is rounded: `f32` (fak's numerics) or `ggml-cpu` (to the weight
    /// type's `vec_dot_type` as ggml's CPU backend does: Q8_0 blocks for Q8_0 weights, Q8_K for
    /// the k-quants, f16 for F16), to tell that rounding apart from other llama.cpp differences.
    #[arg(long, default_value = "f32", value_parser = parse_activations)]
    pub activations: Activations,
    /// How attention rounds: `f32`, `f16-cache` (keys and values cached in f16: fak's f16 path,
    /// llama.cpp's default cache) or `ggml-flash-f16` (the f16 cache read as ggml's CPU flash
    /// attention does for micro-batches under 64 rows: f16 query, f16 accumulator).
    #[arg(long, default_value = "f32", value_parser = parse_attention)]
    pub attention: AttentionRounding,
}

fn parse_attention(name: &str) -> Result<AttentionRounding, String> {
    AttentionRounding::from_name(name)
        .ok_or_else(|| format!("expected one of {}", AttentionRounding::NAMES.join(", ")))
}

fn parse_activations(name: &str) -> Result<Activations, String> {
    Activations::from_name(name)
        .ok_or_else(|| format!("expected one of {}", Activations::NAMES.join(", ")))
}

pub fn run(args: Args) -> Result<()> {
    let prompt = parse_token_ids(&args.tokens)?;
    anyhow::ensure!(!prompt.is_empty(), "--tokens: no token ids");
    let gguf = Gguf::open(&args.model)?;
    let arch = Arch::of(&gguf)?;
    // The reference keeps every position's K and V: a generation past the model's context would
    // only grow until memory runs out.
    let context = gguf
        .metadata()
        .usize(&format!("{}.context_length", arch.key_prefix()))?;
    if prompt.len().saturating_add(args.n_out) > context {
        anyhow::bail!(
            "--n-out {}: the prompt's {} tokens plus {} generated exceed the model's context of \
             {context} tokens",
            args.n_out,
            prompt.len(),
            args.n_out
        );
    }
    let mut model = fak::reference::for_model(&gguf, args.activations)?;
    model.set_attention(args.attention);
    // Row i holds the logits after ids[i]; each greedy token continues the same sequence, so
    // the rows are the teacher-forced logits of prompt + generated.
    let mut ids = prompt.clone();
    let mut logits = model.forward_all(&prompt)?;
    for _ in 0..args.n_out {
        let next = argmax(logits.last().expect("a non-empty prompt"));
        ids.push(next);
        logits.push(model.forward(next)?);
    }
    write_logits_file(&logits, &ids, &args.logits_out)
        .with_context(|| format!("writing {}", args.logits_out.display()))?;
    println!(
        "{}: {} rows of {} logits after {} prompt and {} generated tokens",
        args.logits_out.display(),
        logits.len(),
        logits.first().map_or(0, Vec::len),
        prompt.len(),
        args.n_out
    );
    Ok(())
}
