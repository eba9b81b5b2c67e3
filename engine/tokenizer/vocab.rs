//! The vocabulary from GGUF metadata: token texts and attributes, special ids, the
//! end-of-generation set and the special-token list, resolved the way llama.cpp's
//! `llama_vocab::impl::load` resolves them.
//!
//! Where llama.cpp walks its `unordered_map` of token texts (auto-detecting EOT/FIM tokens by
//! name), the first match in hash order wins; here the lowest id wins. The two differ only for a
//! vocabulary holding two candidate names for one role (e.g. both `<|fim_repo|>` and
//! `<|repo_name|>`), which no Qwen or Llama 3 vocabulary does. The per-model LSTRIP/RSTRIP
//! attributes llama.cpp sets for phi-3, jina and modern-bert vocabularies are not modelled:
//! those vocabularies use pre-tokenizers fak does not accept.

use super::pretokenize::PreTokenizer;
use crate::gguf::{GgufError, Metadata};
use std::collections::HashMap;

pub(super) const KEY_MODEL: &str = "tokenizer.ggml.model";
pub(super) const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub(super) const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

/// llama.cpp's token attributes (`llama_token_attr`), the bits fak uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Attr(u8);

impl Attr {
    pub const UNDEFINED: Attr = Attr(0);
    pub const UNKNOWN: Attr = Attr(1 << 0);
    pub const UNUSED: Attr = Attr(1 << 1);
    pub const NORMAL: Attr = Attr(1 << 2);
    pub const CONTROL: Attr = Attr(1 << 3);
    pub const USER_DEFINED: Attr = Attr(1 << 4);
    pub const BYTE: Attr = Attr(1 << 5);
    /// Control and unknown tokens: parsed from text only with `parse_special`, printed only
    /// with `render_special` (llama.cpp's `tokenizer_st_partition` and `token_to_piece`).
    pub const SPECIAL_ONLY: Attr = Attr::CONTROL.union(Attr::UNKNOWN);
    /// Those and user-defined tokens: cut out of the text before BPE, decoded as their raw text.
    pub const SPECIAL: Attr = Attr::SPECIAL_ONLY.union(Attr::USER_DEFINED);

    /// From `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 5 unused, 6 byte; anything else undefined).
    fn from_token_type(t: i64) -> Self {
        match t {
            1 => Self::NORMAL,
            2 => Self::UNKNOWN,
            3 => Self::CONTROL,
            4 => Self::USER_DEFINED,
            5 => Self::UNUSED,
            6 => Self::BYTE,
            _ => Self::UNDEFINED,
        }
    }

    /// Whether any bit of `other` is set.
    pub fn any(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn union(self, other: Attr) -> Self {
        Attr(self.0 | other.0)
    }
}

/// Roles whose token llama.cpp reads from a key or detects by name; each matters here through
/// the end-of-generation set or through the CONTROL attribute detection gives a token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Bos,
    Eos,
    Eot,
    Eom,
    FimPre,
    FimSuf,
    FimMid,
    FimPad,
    FimRep,
    FimSep,
}

const ROLES: usize = 10;

/// Keys in llama.cpp's order; the deprecated prefix/suffix/middle keys come last and win.
const ROLE_KEYS: [(&str, Role); 13] = [
    ("tokenizer.ggml.bos_token_id", Role::Bos),
    ("tokenizer.ggml.eos_token_id", Role::Eos),
    ("tokenizer.ggml.eot_token_id", Role::Eot),
    ("tokenizer.ggml.eom_token_id", Role::Eom),
    ("tokenizer.ggml.fim_pre_token_id", Role::FimPre),
    ("tokenizer.ggml.fim_suf_token_id", Role::FimSuf),
    ("tokenizer.ggml.fim_mid_token_id", Role::FimMid),
    ("tokenizer.ggml.fim_pad_token_id", Role::FimPad),
    ("tokenizer.ggml.fim_rep_token_id", Role::FimRep),
    ("tokenizer.ggml.fim_sep_token_id", Role::FimSep),
    ("tokenizer.ggml.prefix_token_id", Role::FimPre),
    ("tokenizer.ggml.suffix_token_id", Role::FimSuf),
    ("tokenizer.ggml.middle_token_id", Role::FimMid),
];

/// Names llama.cpp recognises for a role whose id no key gave.
const ROLE_NAMES: [(Role, &[&str]); 8] = [
    (
        Role::Eot,
        &[
            "<|eot_id|>",
            "<|im_end|>",
            "<|end|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "<|end_of_text|>",
            "<EOT>",
            "_<EOT>",
            "[EOT]",
            "<｜end▁of▁sentence｜>",
            "<end_of_utterance>",
        ],
    ),
    (Role::Eom, &["<|eom_id|>"]),
    (
        Role::FimPre,
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
    ),
    (
        Role::FimSuf,
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
    ),
    (
        Role::FimMid,
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
    ),
    (
        Role::FimPad,
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    ),
    (
        Role::FimRep,
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
    ),
    (Role::FimSep, &["<|file_sep|>"]),
];

/// Token texts that end generation wherever they occur (llama.cpp's EOG name list).
const EOG_NAMES: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Tokens llama.cpp always renders (a gpt-oss workaround it applies to every vocabulary).
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// llama.cpp's default BOS and EOS for a `gpt2` vocabulary whose file names none.
const GPT2_DEFAULT_BOS_EOS: u32 = 11;

pub(super) struct Vocab {
    pub texts: Vec<String>,
    pub attrs: Vec<Attr>,
    pub by_text: HashMap<String, u32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End-of-generation ids, sorted.
    pub eog: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first (ties by id): the order in
    /// which the special-token partition looks for them.
    pub specials: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
}

impl Vocab {
    pub(super) fn load(md: &Metadata, pre: PreTokenizer) -> Result<Self, GgufError> {
        let texts = token_texts(md)?;
        let n = texts.len();
        let mut attrs = token_attrs(md, n)?;
        let by_text = index_texts(md, &texts)?;

        let mut roles = [None; ROLES];
        let in_range = |id: u32| (id as usize) < n;
        roles[Role::Bos as usize] = Some(GPT2_DEFAULT_BOS_EOS).filter(|&id| in_range(id));
        roles[Role::Eos as usize] = roles[Role::Bos as usize];
        for (key, role) in ROLE_KEYS {
            // An out-of-range id keeps the default, as llama.cpp does (with a warning).
            if let Some(id) = md.opt_u32(key)?.filter(|&id| in_range(id)) {
                roles[role as usize] = Some(id);
            }
        }
        for (id, text) in texts.iter().enumerate() {
            for (role, names) in ROLE_NAMES {
                if roles[role as usize].is_none() && names.contains(&text.as_str()) {
                    roles[role as usize] = Some(id as u32);
                    attrs[id] = attrs[id].union(Attr::CONTROL);
                }
            }
        }
        let eog = eog_set(&texts, &mut attrs, &roles);
        for name in ALWAYS_RENDERED {
            if let Some(&id) = by_text.get(*name) {
                attrs[id as usize] = Attr::USER_DEFINED;
            }
        }

        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&id| attrs[id as usize].any(Attr::SPECIAL))
            .collect();
        specials.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));

        let bos = roles[Role::Bos as usize];
        let eos = roles[Role::Eos as usize];
        let add_bos = md
            .opt_bool(KEY_ADD_BOS)?
            .unwrap_or(pre.adds_bos_by_default());
        let add_eos = md.opt_bool(KEY_ADD_EOS)?.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(md.error(KEY_ADD_BOS, "is true, but the file has no BOS token"));
        }
        if add_eos && eos.is_none() {
            return Err(md.error(KEY_ADD_EOS, "is true, but the file has no EOS token"));
        }
        Ok(Self {
            texts,
            attrs,
            by_text,
            bos,
            eos,
            eog,
            specials,
            add_bos,
            add_eos,
        })
    }
}

/// Token texts; an empty one becomes `[EMPTY_<id>]`, as in llama.cpp.
fn token_texts(md: &Metadata) -> Result<Vec<String>, GgufError> {
    let texts = md.str_array(KEY_TOKENS)?;
    if texts.is_empty() || u32::try_from(texts.len()).is_err() {
        return Err(md.error(
            KEY_TOKENS,
            format!("{} tokens; expected 1 to 2^32-1", texts.len()),
        ));
    }
    Ok(texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            }
        })
        .collect())
}

/// Attributes from `tokenizer.ggml.token_type`; all NORMAL when the key is absent.
fn token_attrs(md: &Metadata, n: usize) -> Result<Vec<Attr>, GgufError> {
    if !md.contains(KEY_TOKEN_TYPE) {
        return Ok(vec![Attr::NORMAL; n]);
    }
    let types = md.int_array(KEY_TOKEN_TYPE)?;
    if types.len() < n {
        return Err(md.error(
            KEY_TOKEN_TYPE,
            format!("{} entries for {n} tokens", types.len()),
        ));
    }
    Ok(types[..n]
        .iter()
        .map(|&t| Attr::from_token_type(t))
        .collect())
}

/// Text → id. llama.cpp refuses a vocabulary with two tokens of one text (an assertion), and so
/// does fak, with the two ids.
fn index_texts(md: &Metadata, texts: &[String]) -> Result<HashMap<String, u32>, GgufError> {
    let mut by_text = HashMap::with_capacity(texts.len());
    for (id, text) in texts.iter().enumerate() {
        if let Some(first) = by_text.insert(text.clone(), id as u32) {
            return Err(md.error(
                KEY_TOKENS,
                format!("tokens {first} and {id} are both {text:?}"),
            ));
        }
    }
    Ok(by_text)
}

/// The end-of-generation set, and the attribute changes llama.cpp makes while building it.
fn eog_set(texts: &[String], attrs: &mut [Attr], roles: &[Option<u32>; ROLES]) -> Vec<u32> {
    let mut eog: Vec<u32> = [Role::FimPad, Role::FimRep, Role::FimSep]
        .iter()
        .filter_map(|&r| roles[r as usize])
        .collect();
    for (id, text) in texts.iter().enumerate() {
        if EOG_NAMES.contains(&text.as_str()) {
            eog.push(id as u32);
            attrs[id] = attrs[id].union(Attr::CONTROL);
        }
    }
    eog.extend(
        [Role::Eos, Role::Eot, Role::Eom]
            .iter()
            .filter_map(|&r| roles[r as usize]),
    );
    eog.sort_unstable();
    eog.dedup();

    let find = |eog: &[u32], name: &str| eog.iter().copied().find(|&id| texts[id as usize] == name);
    // gpt-oss and solar-open: <|end|> ends a message, not the generation.
    let has = |eog: &[u32], name: &str| find(eog, name).is_some();
    let ends_messages = (has(&eog, "<|return|>") && has(&eog, "<|call|>"))
        || (has(&eog, "<|calls|>") && has(&eog, "<|flush|>"));
    if let (true, Some(end)) = (ends_messages, find(&eog, "<|end|>")) {
        eog.retain(|&id| id != end);
        attrs[end as usize] = Attr::USER_DEFINED;
    }
    // gemma4 and plamo: </s> is an ordinary token.
    let normal_s = has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>");
    if let (true, Some(s)) = (normal_s, find(&eog, "</s>")) {
        eog.retain(|&id| id != s);
        attrs[s as usize] = Attr::NORMAL;
    }
    eog
}
