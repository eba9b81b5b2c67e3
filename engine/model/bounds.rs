//! Bounds on a model's settings and on the tensors they account for, checked before anything is
//! sized from them.
//!
//! A GGUF file's hyperparameters are hostile input. A forged `block_count` of 2^32 − 1 once sized
//! a per-layer vector of 34 GB (an allocation abort), a `vocab_size` of 2^62 wrapped a byte count
//! to 0 and divided by it, and a `block_count` of 3 on a 4-layer file ran three layers and ignored
//! the fourth. So every architecture
//!
//! 1. reads `block_count` through [`block_count`], which refuses a count outside 1..=512 before
//!    anything per layer is read;
//! 2. passes every other size it reads to [`check_settings`], which refuses a value outside its
//!    [`Size`]'s range, naming the key, the value and the range;
//! 3. after binding its tensors, calls [`refuse_unused_tensors`]: a tensor the settings do not
//!    account for (a layer past `block_count`, a stray name) is refused by name, as llama.cpp
//!    refuses a file with the wrong number of tensors.
//!
//! The ranges hold every released model with room to spare (the largest: 126 layers, width
//! 16 384, 128 heads, head size 256, FFN 53 248, vocabulary 262 144, context 10 M) and keep every
//! size the engine derives far inside `u64`: the largest product it forms, layers × context ×
//! 2 × KV width × 4 bytes, is below 2^9 · 2^24 · 2^1 · 2^20 · 2^2 = 2^56. Whether such a model
//! fits the adapter is then an honest comparison of byte counts (`DevicePlan::total_bytes`).

use super::ModelError;
use crate::gguf::{Gguf, MAX_LAYERS, Metadata};
use std::ops::{Range, RangeInclusive};

/// What a setting counts; each kind has one range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Transformer blocks (llama.cpp's `LLAMA_MAX_LAYERS`).
    Layers,
    /// A model or FFN width (elements per token).
    Width,
    /// Attention heads, KV heads, DeltaNet key and value heads.
    Heads,
    /// Elements per head (q/k, v, the DeltaNet state size).
    HeadDim,
    /// Tokens in the vocabulary.
    Vocab,
    /// Tokens of context.
    Context,
    /// Taps of a short convolution.
    Taps,
}

impl Size {
    /// The values a setting of this kind may take.
    pub fn range(self) -> RangeInclusive<usize> {
        match self {
            Size::Layers => 1..=MAX_LAYERS,
            Size::Width => 1..=1 << 18,
            Size::Heads => 1..=1 << 10,
            Size::HeadDim => 1..=1 << 10,
            Size::Vocab => 1..=1 << 22,
            Size::Context => 1..=1 << 24,
            Size::Taps => 1..=64,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Size::Layers => "layers",
            Size::Width => "elements of width",
            Size::Heads => "heads",
            Size::HeadDim => "elements per head",
            Size::Vocab => "tokens of vocabulary",
            Size::Context => "tokens of context",
            Size::Taps => "convolution taps",
        }
    }
}

/// `value` of `key` if it lies in `size`'s range, else an error naming the key, the value and
/// the range.
pub fn check(m: &Metadata, key: &str, value: usize, size: Size) -> Result<usize, ModelError> {
    let range = size.range();
    if range.contains(&value) {
        return Ok(value);
    }
    Err(m
        .error(
            key,
            format!(
                "{value} is outside the supported {}..={} {}",
                range.start(),
                range.end(),
                size.noun()
            ),
        )
        .into())
}

/// The block count under `key` (`{arch}.block_count`), read and bounded before anything per
/// layer is read or sized.
pub fn block_count(m: &Metadata, key: &str) -> Result<usize, ModelError> {
    check(m, key, m.usize(key)?, Size::Layers)
}

/// Checks every `(key suffix, value, kind)` of an architecture's settings (keys under
/// `{prefix}.`); the first outside its range is the error.
pub fn check_settings(
    m: &Metadata,
    prefix: &str,
    settings: &[(&str, usize, Size)],
) -> Result<(), ModelError> {
    for &(key, value, size) in settings {
        check(m, &format!("{prefix}.{key}"), value, size)?;
    }
    Ok(())
}

/// Refuses a file holding a tensor its model did not bind: called after the architecture has
/// looked up every tensor its settings call for. Tensors of `skipped_blocks` (blocks the file
/// declares but the engine does not run, such as multi-token-prediction heads) are allowed.
pub fn refuse_unused_tensors(
    gguf: &Gguf,
    block_count_key: &str,
    n_layer: usize,
    skipped_blocks: Range<usize>,
) -> Result<(), ModelError> {
    let skipped = |name: &str| block_of(name).is_some_and(|b| skipped_blocks.contains(&b));
    let Some(t) = gguf.unused_tensors().find(|t| !skipped(&t.name)) else {
        return Ok(());
    };
    let why = match block_of(&t.name) {
        Some(b) if b >= n_layer => format!(
            "belongs to block {b}, but {block_count_key} is {n_layer}: the file's tensors and \
             its settings disagree"
        ),
        _ => format!(
            "is not a tensor of this architecture with these settings ({block_count_key} \
             {n_layer}): the file's tensors and its settings disagree"
        ),
    };
    Err(gguf.tensor_error(t, why).into())
}

/// The block index of a `blk.N.…` tensor name.
fn block_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_keeps_the_largest_product_inside_u64() {
        let max = |s: Size| *s.range().end() as u128;
        // layers × context × (K and V) × KV width (heads × head size) × 4 bytes.
        let kv =
            max(Size::Layers) * max(Size::Context) * 2 * max(Size::Heads) * max(Size::HeadDim) * 4;
        assert!(kv < 1 << 57, "{kv}");
        // Logits of a whole context: context × vocabulary × 4 bytes.
        assert!(max(Size::Context) * max(Size::Vocab) * 4 < 1 << 63);
    }

    #[test]
    fn block_names_parse_only_with_a_number() {
        assert_eq!(block_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(block_of("blk.x.attn_q.weight"), None);
        assert_eq!(block_of("token_embd.weight"), None);
    }
}
