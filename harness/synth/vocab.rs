//! The tokenizer a synthetic model carries: a real byte-level BPE vocabulary, embedded in the
//! binary, with the added tokens, special ids and chat template of the model family.
//!
//! The base vocabulary and merges are llama.cpp's `ggml-vocab-qwen2.gguf` test vocabulary
//! (`tests/fixtures/vocab/`): the 151 643 BPE tokens and 151 387 merges every Qwen2/2.5/3 model
//! shares. That file predates Qwen3, so its ids from 151 646 up are `[PAD…]` placeholders; a
//! family's [`AddedToken`] table replaces them with the tokens the real tokenizer adds, and the
//! ids past the table become `[PAD<id>]` UNUSED entries, exactly as llama.cpp's converter pads a
//! tokenizer smaller than the embedding matrix.

use anyhow::{Context, Result, bail, ensure};
use fak::gguf::{Array, Value};

/// `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`, gguf-py `TokenType`).
pub const NORMAL: i32 = 1;
pub const CONTROL: i32 = 3;
pub const USER_DEFINED: i32 = 4;
pub const UNUSED: i32 = 5;

static QWEN2_VOCAB_GGUF: &[u8] = include_bytes!("../../tests/fixtures/vocab/ggml-vocab-qwen2.gguf");
/// The Qwen vocabulary cut to 4 096 tokens (experiments/trained-tiny/cut_vocab.py): the byte
/// tokens, the tokens the trained models' text uses and the most common of Qwen's merges, closed
/// under merges, then Qwen3's 26 added tokens.
static QWEN_CUT_VOCAB_GGUF: &[u8] =
    include_bytes!("../../tests/fixtures/vocab/ggml-vocab-qwen-cut4k.gguf");
static QWEN3_CHAT_TEMPLATE: &str =
    include_str!("../../tests/fixtures/templates/Qwen-Qwen3-0.6B.jinja");
static QWEN35_CHAT_TEMPLATE: &str = include_str!("../../tests/fixtures/templates/Qwen3.5-4B.jinja");

/// Hugging Face's pre-tokenizer split for the Qwen2 vocabulary (its `tokenizer.json`); llama.cpp
/// spells the same pattern out for `tokenizer.ggml.pre = "qwen2"` (model-spec.md §3.2).
pub const QWEN2_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The same split for `tokenizer.ggml.pre = "qwen35"`: letter runs absorb combining marks.
pub const QWEN35_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Which model family's pre-tokenizer and chat template a vocabulary is written with.
#[derive(Clone, Copy, Debug)]
pub enum Family {
    Qwen3,
    Qwen35,
}

/// A token the Hugging Face tokenizer adds on top of the BPE vocabulary.
#[derive(Clone, Debug)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    /// Hugging Face's `special` flag. llama.cpp's converter stores an added token as CONTROL
    /// when it is special *or looks special* (`<|…|>`), otherwise as USER_DEFINED.
    pub special: bool,
}

/// The added tokens of Qwen3 (ids 151 643..) and Qwen3.5 (ids 248 044..), in order, with
/// Hugging Face's `special` flags (their `tokenizer_config.json`).
const QWEN_ADDED: [(&str, bool); 26] = [
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<|object_ref_start|>", true),
    ("<|object_ref_end|>", true),
    ("<|box_start|>", true),
    ("<|box_end|>", true),
    ("<|quad_start|>", true),
    ("<|quad_end|>", true),
    ("<|vision_start|>", true),
    ("<|vision_end|>", true),
    ("<|vision_pad|>", true),
    ("<|image_pad|>", true),
    ("<|video_pad|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
    ("<|fim_prefix|>", false),
    ("<|fim_middle|>", false),
    ("<|fim_suffix|>", false),
    ("<|fim_pad|>", false),
    ("<|repo_name|>", false),
    ("<|file_sep|>", false),
    ("<tool_response>", false),
    ("</tool_response>", false),
    ("<think>", false),
    ("</think>", false),
];
/// Qwen2's BPE tokens: ids below this are NORMAL in the embedded vocabulary.
const QWEN2_N_BPE: usize = 151_643;
const QWEN3_FIRST_ADDED_ID: u32 = 151_643;
const QWEN3_N_VOCAB: usize = 151_936;
const QWEN35_FIRST_ADDED_ID: u32 = 248_044;
const QWEN35_N_VOCAB: usize = 248_320;
/// Offsets of `<|endoftext|>` and `<|im_end|>` in [`QWEN_ADDED`].
const QWEN_ENDOFTEXT: u32 = 0;
const QWEN_IM_END: u32 = 2;

/// Everything `tokenizer.*` in a GGUF and `tokenizer*.json` in a Hugging Face directory say.
pub struct Tokenizer {
    /// `tokenizer.ggml.pre`.
    pub pre: &'static str,
    /// The Hugging Face pre-tokenizer's split pattern for the same `pre`.
    pub split_regex: &'static str,
    /// Token text by id (GPT-2 byte-to-unicode form), the whole embedding-sized table.
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
    pub added: Vec<AddedToken>,
    pub bos: u32,
    pub eos: u32,
    pub pad: u32,
    pub chat_template: &'static str,
}

/// Which vocabulary a synthetic model carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Vocab {
    /// The family's real table: ids, size, added tokens and merges (≈150k or ≈250k entries).
    Full,
    /// Only the 256 byte tokens (the first 256 of Qwen2's table, one per byte) and the added
    /// tokens after them, no merges: a real byte-level BPE of 282 entries, so a tiny model
    /// is kilobytes, not tens of MB (crafted-file tests and fuzz seeds make many copies).
    Bytes,
    /// The Qwen vocabulary cut to 4 096 tokens that the trained presets carry ([`Tokenizer::cut`]):
    /// real BPE text and Qwen's special tokens with an embedding and head of 4 096 rows. The model
    /// suites use it: on lavapipe a 150k-row head is most of a tiny model's step (a 64-wide
    /// f32 head of 248 320 rows takes ~1.2 s per decode token, 2026-12-05), and what they check
    /// does not depend on the table's size.
    Cut,
}

/// Qwen2's first 256 tokens are its 256 single-byte tokens.
const N_BYTE_TOKENS: usize = 256;

impl Tokenizer {
    /// The Qwen3 tokenizer: Qwen2's BPE vocabulary, Qwen3's added tokens, `<|im_end|>` as eos
    /// and `<|endoftext|>` as bos and pad (as Qwen3's GGUF files carry them), 151 936 entries;
    /// with [`Vocab::Bytes`], the byte tokens and the added tokens only.
    pub fn qwen3(vocab: Vocab) -> Result<Self> {
        let pre = fak::model::Arch::Qwen3.spec().tokenizer_pre;
        match vocab {
            Vocab::Full => Self::qwen(
                pre,
                QWEN2_SPLIT_REGEX,
                QWEN3_FIRST_ADDED_ID,
                QWEN3_N_VOCAB,
                QWEN3_CHAT_TEMPLATE,
            ),
            Vocab::Bytes => Self::bytes(pre, QWEN2_SPLIT_REGEX, QWEN3_CHAT_TEMPLATE),
            Vocab::Cut => Self::cut(Family::Qwen3),
        }
    }

    /// The Qwen3.5 tokenizer as far as a synthetic model can carry it: the real one has a
    /// larger BPE vocabulary (≈248k tokens) that no fixture holds, so this keeps Qwen2's BPE
    /// tokens and merges with Qwen3.5's pre-tokenizer (`qwen35`), puts the added tokens at
    /// Qwen3.5's ids (`<|endoftext|>` 248 044, `<|im_end|>` 248 046, `<think>` 248 068) and pads
    /// the ids between as the converter pads a vocabulary smaller than the embedding matrix,
    /// 248 320 entries in all. Ids, table size, special tokens and chat template are Qwen3.5's.
    pub fn qwen35(vocab: Vocab) -> Result<Self> {
        let pre = fak::model::Arch::Qwen35.spec().tokenizer_pre;
        match vocab {
            Vocab::Full => Self::qwen(
                pre,
                QWEN35_SPLIT_REGEX,
                QWEN35_FIRST_ADDED_ID,
                QWEN35_N_VOCAB,
                QWEN35_CHAT_TEMPLATE,
            ),
            Vocab::Bytes => Self::bytes(pre, QWEN35_SPLIT_REGEX, QWEN35_CHAT_TEMPLATE),
            Vocab::Cut => Self::cut(Family::Qwen35),
        }
    }

    /// The tokenizer of a preset: the cut vocabulary for a preset whose weights were trained on
    /// it (`cut_vocab`; [`Vocab::Full`] and [`Vocab::Cut`] both mean it there), otherwise
    /// `family`'s `vocab`.
    pub fn for_preset(family: Family, cut_vocab: bool, vocab: Vocab) -> Result<Self> {
        match (cut_vocab, vocab, family) {
            (true, Vocab::Full | Vocab::Cut, _) => Self::cut(family),
            (true, Vocab::Bytes, _) => {
                bail!(
                    "--vocab bytes: this preset carries the cut vocabulary its weights were trained on"
                )
            }
            (false, _, Family::Qwen3) => Self::qwen3(vocab),
            (false, _, Family::Qwen35) => Self::qwen35(vocab),
        }
    }

    /// The byte tokens, then the Qwen added tokens, no merges (see [`Vocab::Bytes`]).
    fn bytes(
        pre: &'static str,
        split_regex: &'static str,
        chat_template: &'static str,
    ) -> Result<Self> {
        let n_vocab = N_BYTE_TOKENS + QWEN_ADDED.len();
        let mut t = Self::from_base(
            pre,
            split_regex,
            N_BYTE_TOKENS,
            N_BYTE_TOKENS as u32,
            n_vocab,
            chat_template,
        )?;
        ensure!(
            t.tokens[..N_BYTE_TOKENS]
                .iter()
                .all(|b| b.chars().count() == 1),
            "the first {N_BYTE_TOKENS} tokens of the embedded vocabulary are not single bytes"
        );
        // A merge always makes a token of two or more bytes, none of which is kept.
        t.merges.clear();
        Ok(t)
    }

    /// The cut Qwen vocabulary of the trained tiny models, with `pre`'s split and the family's
    /// chat template: every entry, id, type and special id as the cut file has them (its added
    /// tokens are Qwen3's, in Qwen3's order, right after the BPE tokens).
    pub fn cut(family: Family) -> Result<Self> {
        let (pre, split_regex, chat_template) = match family {
            Family::Qwen3 => ("qwen2", QWEN2_SPLIT_REGEX, QWEN3_CHAT_TEMPLATE),
            Family::Qwen35 => ("qwen35", QWEN35_SPLIT_REGEX, QWEN35_CHAT_TEMPLATE),
        };
        let parsed = fak::gguf::parse(QWEN_CUT_VOCAB_GGUF)
            .context("embedded vocabulary ggml-vocab-qwen-cut4k.gguf")?;
        let vocab =
            fak::gguf::Metadata::new("ggml-vocab-qwen-cut4k.gguf".into(), parsed.metadata.clone());
        let tokens = vocab.str_array("tokenizer.ggml.tokens")?.to_vec();
        let Array::I32(types) = vocab.array("tokenizer.ggml.token_type")? else {
            bail!("ggml-vocab-qwen-cut4k.gguf: tokenizer.ggml.token_type is not an i32 array");
        };
        let first_added = types
            .iter()
            .position(|&t| t != NORMAL)
            .context("ggml-vocab-qwen-cut4k.gguf has no added tokens")?;
        let added: Vec<AddedToken> = tokens[first_added..]
            .iter()
            .zip(first_added as u32..)
            .map(|(content, id)| {
                let &(_, special) = QWEN_ADDED
                    .iter()
                    .find(|(c, _)| c == content)
                    .with_context(|| format!("added token {content:?} is not one of Qwen3's"))?;
                Ok(AddedToken {
                    id,
                    content: content.clone(),
                    special,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            pre,
            split_regex,
            types: types.clone(),
            merges: vocab.str_array("tokenizer.ggml.merges")?.to_vec(),
            added,
            bos: vocab.u32("tokenizer.ggml.bos_token_id")?,
            eos: vocab.u32("tokenizer.ggml.eos_token_id")?,
            pad: vocab.u32("tokenizer.ggml.padding_token_id")?,
            chat_template,
            tokens,
        })
    }

    /// Qwen2's BPE vocabulary, the Qwen added tokens from `first_added` on, `<|im_end|>` as eos
    /// and `<|endoftext|>` as bos and pad, `n_vocab` entries.
    fn qwen(
        pre: &'static str,
        split_regex: &'static str,
        first_added: u32,
        n_vocab: usize,
        chat_template: &'static str,
    ) -> Result<Self> {
        Self::from_base(
            pre,
            split_regex,
            QWEN2_N_BPE,
            first_added,
            n_vocab,
            chat_template,
        )
    }

    /// The first `n_base` of Qwen2's BPE tokens, the Qwen added tokens from `first_added` on,
    /// padded to `n_vocab` entries; `<|im_end|>` as eos and `<|endoftext|>` as bos and pad.
    fn from_base(
        pre: &'static str,
        split_regex: &'static str,
        n_base: usize,
        first_added: u32,
        n_vocab: usize,
        chat_template: &'static str,
    ) -> Result<Self> {
        let added: Vec<AddedToken> = QWEN_ADDED
            .iter()
            .zip(first_added..)
            .map(|(&(content, special), id)| AddedToken {
                id,
                content: content.into(),
                special,
            })
            .collect();
        let (tokens, types, merges) = base_vocab(QWEN2_VOCAB_GGUF, n_base, &added, n_vocab)
            .context("embedded vocabulary ggml-vocab-qwen2.gguf")?;
        Ok(Self {
            pre,
            split_regex,
            tokens,
            types,
            merges,
            added,
            bos: first_added + QWEN_ENDOFTEXT,
            eos: first_added + QWEN_IM_END,
            pad: first_added + QWEN_ENDOFTEXT,
            chat_template,
        })
    }

    pub fn n_vocab(&self) -> u64 {
        self.tokens.len() as u64
    }

    /// The `tokenizer.*` keys in the order llama.cpp's converter writes them.
    pub fn gguf_metadata(&self) -> Vec<(String, Value)> {
        let s = |v: &str| Value::String(v.into());
        vec![
            ("tokenizer.ggml.model".into(), s("gpt2")),
            ("tokenizer.ggml.pre".into(), s(self.pre)),
            (
                "tokenizer.ggml.tokens".into(),
                Value::Array(Array::String(self.tokens.clone())),
            ),
            (
                "tokenizer.ggml.token_type".into(),
                Value::Array(Array::I32(self.types.clone())),
            ),
            (
                "tokenizer.ggml.merges".into(),
                Value::Array(Array::String(self.merges.clone())),
            ),
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(self.eos)),
            (
                "tokenizer.ggml.padding_token_id".into(),
                Value::U32(self.pad),
            ),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(self.bos)),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
            ("tokenizer.chat_template".into(), s(self.chat_template)),
        ]
    }
}

/// llama.cpp's converter test for added tokens that are CONTROL although not flagged special.
fn looks_special(content: &str) -> bool {
    content.starts_with("<|") && content.ends_with("|>")
}

/// Reads the BPE vocabulary of `gguf` (its first `n_base` tokens, which must all be NORMAL),
/// places `added` at their ids and pads every other id below `n_vocab` with an UNUSED
/// `[PAD<id>]` entry, as llama.cpp's converter does.
fn base_vocab(
    gguf: &[u8],
    n_base: usize,
    added: &[AddedToken],
    n_vocab: usize,
) -> Result<(Vec<String>, Vec<i32>, Vec<String>)> {
    let parsed = fak::gguf::parse(gguf)?;
    let get = |key: &str| {
        parsed
            .metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .with_context(|| format!("key {key} missing"))
    };
    let (Value::Array(Array::String(tokens)), Value::Array(Array::I32(types))) = (
        get("tokenizer.ggml.tokens")?,
        get("tokenizer.ggml.token_type")?,
    ) else {
        bail!("tokenizer.ggml.tokens/token_type: expected string and i32 arrays");
    };
    let Value::Array(Array::String(merges)) = get("tokenizer.ggml.merges")? else {
        bail!("tokenizer.ggml.merges: expected a string array");
    };
    ensure!(
        n_base <= tokens.len() && types.len() == tokens.len(),
        "{} tokens hold no {n_base} base tokens",
        tokens.len()
    );
    if let Some(i) = types[..n_base].iter().position(|&t| t != NORMAL) {
        bail!(
            "token {i} ({:?}) is type {}, expected NORMAL",
            tokens[i],
            types[i]
        );
    }

    let mut out_tokens = tokens[..n_base].to_vec();
    let mut out_types = vec![NORMAL; n_base];
    let pad_to = |tokens: &mut Vec<String>, types: &mut Vec<i32>, end: usize| {
        for id in tokens.len()..end {
            tokens.push(format!("[PAD{id}]"));
            types.push(UNUSED);
        }
    };
    for t in added {
        ensure!(
            t.id as usize >= out_tokens.len() && (t.id as usize) < n_vocab,
            "added token {} out of order or past {n_vocab}",
            t.id
        );
        pad_to(&mut out_tokens, &mut out_types, t.id as usize);
        out_tokens.push(t.content.clone());
        out_types.push(if t.special || looks_special(&t.content) {
            CONTROL
        } else {
            USER_DEFINED
        });
    }
    pad_to(&mut out_tokens, &mut out_types, n_vocab);
    Ok((out_tokens, out_types, merges.clone()))
}
