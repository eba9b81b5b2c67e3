//! Byte-level BPE tokenizer from GGUF metadata, token for token what llama.cpp produces.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use fak::tokenizer::{ChatMessage, Tokenizer};
//! let model = fak::gguf::Gguf::open("qwen3.gguf")?;
//! let tok = Tokenizer::from_gguf(&model)?;
//! let prompt = tok.apply_chat_template(&[ChatMessage::new("user", "Hi")], true, false)?;
//! let ids = tok.encode(&prompt, true); // chat markup: parse special tokens
//! let mut stream = tok.stream_decoder(false);
//! for &id in &ids {
//!     if let Some(text) = stream.push(id)? {
//!         print!("{text}");
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # What is supported
//! `tokenizer.ggml.model = gpt2` with `tokenizer.ggml.pre` one of `qwen2`, `qwen35`,
//! `llama-bpe` (and the aliases llama.cpp treats identically, see [`PreTokenizer`]). Anything
//! else is an error naming the key and the value.
//!
//! # Encoding (llama.cpp `llama_tokenize`)
//! 1. **Special tokens** are cut out of the raw text first (`tokenizer_st_partition`): for each
//!    control, user-defined and unknown token, longest first, every occurrence in the text that
//!    is still unclaimed becomes that token. Control and unknown tokens take part only when
//!    `parse_special` is true (chat markup such as `<|im_start|>`); user-defined tokens (Qwen's
//!    `<think>`, `[PAD151646]`, …) always do.
//! 2. **Pre-tokenizer** ([`pretokenize`]): each remaining fragment splits into words.
//! 3. **BPE** ([`bpe`]): each word's bytes are byte-mapped and merged by rank. Llama 3
//!    vocabularies emit a word that is a vocabulary entry whole, without merging.
//! 4. BOS goes first iff `tokenizer.ggml.add_bos_token` (default: true for Llama 3, false
//!    otherwise), EOS last iff `tokenizer.ggml.add_eos_token` — [`Tokenizer::encode`] does this,
//!    [`Tokenizer::encode_plain`] never adds either.
//!
//! No Unicode normalisation is applied (llama.cpp applies none; Hugging Face applies NFC, so
//! non-NFC text can differ from `transformers`).
//!
//! # Decoding
//! Each token's bytes (inverse byte map) concatenated; control and unknown tokens only with
//! `render_special`. llama.cpp's `llama_detokenize` also "cleans up" spaces before punctuation
//! for Llama 3 vocabularies (`clean_spaces`); fak does not, so decoding round-trips the text, as
//! llama.cpp's token-by-token printing during generation does. [`StreamDecoder`] holds a
//! character split across tokens until it is complete.
//!
//! # End of generation
//! [`Tokenizer::is_eog`]: EOS, EOT, EOM (keys or, failing those, names llama.cpp recognises such
//! as `<|im_end|>`, `<|eot_id|>`), the FIM pad/repo/separator tokens, and every token named like
//! an end of turn (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<|end|>`, `<end_of_turn>`, …),
//! exactly llama.cpp's `special_eog_ids`.

mod bpe;
mod chat;
mod decode;
mod pretokenize;
mod unicode_classes;
mod vocab;

pub use chat::{CHATML_TEMPLATE, ChatMessage, ChatTemplate, TemplateBudget};
pub use decode::StreamDecoder;
pub use pretokenize::PreTokenizer;

use crate::gguf::{Gguf, GgufError, Metadata};
use bpe::Bpe;
use std::collections::HashMap;
use vocab::{Attr, KEY_MERGES, KEY_MODEL, KEY_PRE, Vocab};

const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A tokenizer key is missing, of the wrong type or holds a value fak does not support; the
    /// error names the file and the key.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("token id {id} is outside the vocabulary ({vocab_size} tokens)")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    #[error("chat template: {why}")]
    ChatTemplate { why: String },
}

/// A GGUF's tokenizer; see the module documentation for what each operation does.
pub struct Tokenizer {
    vocab: Vocab,
    pre: PreTokenizer,
    bpe: Bpe,
    /// Each token's decoded bytes (control tokens included).
    pieces: Vec<Vec<u8>>,
    chat_template: ChatTemplate,
    has_chat_template: bool,
}

impl Tokenizer {
    /// The tokenizer described by the model's metadata.
    pub fn from_gguf(model: &Gguf) -> Result<Self, TokenizerError> {
        Self::from_metadata(model.metadata())
    }

    /// The same from metadata alone (what [`from_gguf`](Self::from_gguf) reads).
    pub fn from_metadata(md: &Metadata) -> Result<Self, TokenizerError> {
        let model = md.str(KEY_MODEL)?;
        if model != "gpt2" {
            return Err(md
                .error(
                    KEY_MODEL,
                    format!(
                        "tokenizer {model:?} is not supported (fak supports gpt2, byte-level BPE)"
                    ),
                )
                .into());
        }
        let pre_name = md.opt_str(KEY_PRE)?.ok_or_else(|| {
            md.error(
                KEY_PRE,
                format!("missing; fak needs one of: {}", PreTokenizer::SUPPORTED),
            )
        })?;
        let pre = PreTokenizer::from_gguf_name(pre_name).ok_or_else(|| {
            md.error(
                KEY_PRE,
                format!(
                    "pre-tokenizer {pre_name:?} is not supported (supported: {})",
                    PreTokenizer::SUPPORTED
                ),
            )
        })?;
        let vocab = Vocab::load(md, pre)?;
        let merges = md.str_array(KEY_MERGES)?;
        if !Bpe::fits(vocab.texts.len(), merges.len()) {
            let why = format!(
                "{} merges for {} tokens is more than fak can index",
                merges.len(),
                vocab.texts.len()
            );
            return Err(md.error(KEY_MERGES, why).into());
        }
        let bpe = Bpe::new(&vocab.texts, &vocab.by_text, merges);
        let pieces = vocab
            .texts
            .iter()
            .zip(&vocab.attrs)
            .map(|(text, &attr)| decode::piece_bytes(text, attr))
            .collect();
        let template_source = md.opt_str(KEY_CHAT_TEMPLATE)?;
        let token_text = |id: Option<u32>| id.map(|id| vocab.texts[id as usize].as_str());
        let chat_template = ChatTemplate::new(
            template_source.unwrap_or(CHATML_TEMPLATE),
            token_text(vocab.bos),
            token_text(vocab.eos),
        );
        Ok(Self {
            pre,
            bpe,
            pieces,
            chat_template,
            has_chat_template: template_source.is_some(),
            vocab,
        })
    }

    /// Token ids of `text`, with BOS/EOS where the file asks for them (llama.cpp's
    /// `add_special = true`). `parse_special` lets control tokens written in the text (chat
    /// markup) become their ids; user-defined tokens always do.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut ids = Vec::new();
        if self.vocab.add_bos {
            ids.extend(self.vocab.bos);
        }
        self.encode_into(text, parse_special, &mut ids);
        if self.vocab.add_eos {
            ids.extend(self.vocab.eos);
        }
        ids
    }

    /// Token ids of `text` without BOS or EOS (llama.cpp's `add_special = false`).
    pub fn encode_plain(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut ids = Vec::new();
        self.encode_into(text, parse_special, &mut ids);
        ids
    }

    fn encode_into(&self, text: &str, parse_special: bool, out: &mut Vec<u32>) {
        // Words repeat a lot in real text; BPE each distinct word once per call.
        let mut cache: HashMap<&str, Vec<u32>> = HashMap::new();
        for fragment in self.partition(text, parse_special) {
            let range = match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    continue;
                }
                Fragment::Text(range) => range,
            };
            let fragment_text = &text[range];
            for word in pretokenize::split(fragment_text, self.pre) {
                let word = &fragment_text[word];
                let ids = cache.entry(word).or_insert_with(|| self.encode_word(word));
                out.extend_from_slice(ids);
            }
        }
    }

    fn encode_word(&self, word: &str) -> Vec<u32> {
        if self.pre.ignores_merges() {
            let mapped: String = word.bytes().map(bpe::byte_char).collect();
            if let Some(&id) = self.vocab.by_text.get(&mapped) {
                return vec![id];
            }
        }
        let mut ids = Vec::new();
        self.bpe.encode_word(word.as_bytes(), &mut ids);
        ids
    }

    /// Cuts special tokens out of `text` (llama.cpp `tokenizer_st_partition`).
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut fragments = Vec::new();
        if !text.is_empty() {
            fragments.push(Fragment::Text(0..text.len()));
        }
        for &id in &self.vocab.specials {
            if !parse_special && self.vocab.attrs[id as usize].any(Attr::SPECIAL_ONLY) {
                continue;
            }
            let needle = self.vocab.texts[id as usize].as_str();
            let occurs =
                |f: &Fragment| matches!(f, Fragment::Text(r) if text[r.clone()].contains(needle));
            if !fragments.iter().any(occurs) {
                continue;
            }
            fragments = fragments
                .into_iter()
                .flat_map(|f| match f {
                    Fragment::Text(r) => split_on(text, r, needle, id),
                    token => vec![token],
                })
                .collect();
        }
        fragments
    }

    /// Text for `ids`; control and unknown tokens only with `render_special`. Bytes that do not
    /// form UTF-8 (a character cut off at the end) become U+FFFD.
    pub fn decode(&self, ids: &[u32], render_special: bool) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.piece(id, render_special)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A decoder for tokens arriving one at a time.
    pub fn stream_decoder(&self, render_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, render_special)
    }

    /// The bytes `id` decodes to (empty for a control token unless `render_special`): what
    /// llama.cpp's `token_to_piece` gives, and so what llama-server streams for it.
    pub fn piece(&self, id: u32, render_special: bool) -> Result<&[u8], TokenizerError> {
        let piece = self
            .pieces
            .get(id as usize)
            .ok_or(TokenizerError::TokenOutOfRange {
                id,
                vocab_size: self.pieces.len(),
            })?;
        let hidden = !render_special && self.vocab.attrs[id as usize].any(Attr::SPECIAL_ONLY);
        Ok(if hidden { &[] } else { piece })
    }

    /// Whether generating `id` ends the generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.texts.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// Whether [`encode`](Self::encode) puts BOS first.
    pub fn adds_bos(&self) -> bool {
        self.vocab.add_bos
    }

    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// A token's vocabulary text (byte-mapped for normal tokens), if `id` is in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The file's chat template, or [`CHATML_TEMPLATE`] when it has none.
    pub fn chat_template(&self) -> &ChatTemplate {
        &self.chat_template
    }

    /// Whether the file carries `tokenizer.chat_template` (otherwise ChatML stands in).
    pub fn has_chat_template(&self) -> bool {
        self.has_chat_template
    }

    /// Renders a conversation with [`chat_template`](Self::chat_template); encode the result
    /// with `parse_special = true`.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        self.chat_template
            .render(messages, add_generation_prompt, enable_thinking)
    }
}

/// A piece of the text being encoded: raw text (a byte range) or a special token found in it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fragment {
    Text(std::ops::Range<usize>),
    Token(u32),
}

/// `range` of `text` with every occurrence of `needle` (left to right, not overlapping) turned
/// into `Token(id)`.
fn split_on(text: &str, range: std::ops::Range<usize>, needle: &str, id: u32) -> Vec<Fragment> {
    let mut out = Vec::new();
    let mut start = range.start;
    while let Some(at) = text[start..range.end].find(needle) {
        let at = start + at;
        if at > start {
            out.push(Fragment::Text(start..at));
        }
        out.push(Fragment::Token(id));
        start = at + needle.len();
    }
    if start < range.end {
        out.push(Fragment::Text(start..range.end));
    }
    out
}
