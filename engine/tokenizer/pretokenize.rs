//! Pre-tokenizers: split a text fragment into the words BPE runs on, exactly as llama.cpp does.
//!
//! The three supported `tokenizer.ggml.pre` values all use one regex family
//! (model-spec.md §3.2):
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! `llama-bpe` takes digits three at a time (`\p{N}{1,3}`), `qwen2` one at a time, and `qwen35`
//! lets letter runs absorb combining marks (`[\p{L}\p{M}]+`, and `\p{M}` joins the excluded set
//! of the punctuation branch). llama.cpp does not run a regex engine for these: it has one
//! hand-written scanner per pattern (`unicode_regex_split_custom_{llama3,qwen2,qwen35}` in
//! src/unicode.cpp), and [`split`] is that scanner, branch for branch, so that its corner cases
//! are llama.cpp's and not a regex engine's. Two of them matter:
//!
//! - `\s+(?!\S)` inside a whitespace run followed by a non-space takes all but the last
//!   whitespace character (which then starts the next word, e.g. `"  Hello"` → `" "`, `" Hello"`);
//!   at the end of a fragment it takes the whole run.
//! - character classes are Unicode general categories (Unicode 15.1, the version of the peer's
//!   tables, see `unicode_classes.rs`), with White_Space taking precedence; unassigned code
//!   points count as punctuation.
//!
//! No normalisation happens before the split (llama.cpp does none; Hugging Face applies NFC).
//! Text that is not in NFC can therefore tokenize differently from `transformers`, and
//! identically to llama.cpp.

use super::unicode_classes::RANGES;
use std::ops::Range;

/// What the pre-tokenizers need to know about a character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CharClass {
    /// Unicode White_Space (`\s`); never also a letter, mark or number.
    Whitespace,
    /// General category L* (`\p{L}`).
    Letter,
    /// General category M* (`\p{M}`).
    Mark,
    /// General category N* (`\p{N}`).
    Number,
    /// Everything else: punctuation, symbols, controls, separators that are not White_Space,
    /// private use, surrogates and unassigned code points.
    Other,
}

/// The class of `c`: a table for ASCII, a binary search of the range table otherwise.
pub(super) fn class_of(c: char) -> CharClass {
    let cp = c as u32;
    match ASCII_CLASSES.get(cp as usize) {
        Some(&class) => class,
        None => range_class(cp),
    }
}

/// The class of `cp` from the range table (which starts at 0, so some entry always applies).
const fn range_class(cp: u32) -> CharClass {
    // A const fn cannot call partition_point; a hand-written binary search it is.
    let (mut lo, mut hi) = (0, RANGES.len());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if RANGES[mid].0 <= cp {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    RANGES[lo].1
}

static ASCII_CLASSES: [CharClass; 128] = {
    let mut table = [CharClass::Other; 128];
    let mut cp = 0;
    while cp < 128 {
        table[cp] = range_class(cp as u32);
        cp += 1;
    }
    table
};

/// The pre-tokenizer a GGUF names in `tokenizer.ggml.pre`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// Llama 3 (`llama-bpe` and its aliases): digits in groups of up to three.
    Llama3,
    /// Qwen2, Qwen2.5, Qwen3: single digits.
    Qwen2,
    /// Qwen3.5 / 3.6: single digits, letter runs absorb combining marks.
    Qwen35,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value: the names llama.cpp maps to the same
    /// pre-type *and* the same vocabulary flags (llama-vocab.cpp, `load`), nothing else.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => Some(Self::Llama3),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => Some(Self::Qwen2),
            "qwen35" => Some(Self::Qwen35),
            _ => None,
        }
    }

    /// The accepted `tokenizer.ggml.pre` values, for error messages.
    pub const SUPPORTED: &'static str = "qwen2 (and deepseek-r1-qwen, kormo, f2llmv2), qwen35, \
        llama-bpe (and llama3, llama-v3, falcon3, falcon-h1, pixtral, midm-2.0, lfm2, jina-v5-nano)";

    /// Longest digit run one word may hold.
    fn max_digits(self) -> usize {
        match self {
            Self::Llama3 => 3,
            Self::Qwen2 | Self::Qwen35 => 1,
        }
    }

    /// Whether letter runs take combining marks along (`[\p{L}\p{M}]+`).
    fn letters_take_marks(self) -> bool {
        self == Self::Qwen35
    }

    /// Whether llama.cpp emits a word that is itself a vocabulary entry whole, before BPE
    /// (`ignore_merges`, set for the Llama 3 family).
    pub(super) fn ignores_merges(self) -> bool {
        self == Self::Llama3
    }

    /// llama.cpp's `add_bos` for the family when the file has no `add_bos_token` key.
    pub(super) fn adds_bos_by_default(self) -> bool {
        self == Self::Llama3
    }
}

/// One character of the fragment with its class.
#[derive(Clone, Copy)]
struct Cp {
    c: char,
    class: CharClass,
    byte: usize,
}

/// Splits `text` into words; returns their byte ranges, which cover `text` exactly, in order.
pub(super) fn split(text: &str, pre: PreTokenizer) -> Vec<Range<usize>> {
    let cps: Vec<Cp> = text
        .char_indices()
        .map(|(byte, c)| Cp {
            c,
            class: class_of(c),
            byte,
        })
        .collect();
    let byte_at = |i: usize| cps.get(i).map_or(text.len(), |cp| cp.byte);
    let mut words = Vec::new();
    let mut pos = 0;
    while pos < cps.len() {
        let end = word_end(&cps, pos, pre);
        words.push(byte_at(pos)..byte_at(end));
        pos = end;
    }
    words
}

/// Where the word starting at `pos` ends (exclusive), trying the pattern's branches in order.
fn word_end(cps: &[Cp], pos: usize, pre: PreTokenizer) -> usize {
    let n = cps.len();
    let class = |i: usize| cps.get(i).map(|cp| cp.class);
    let is = |i: usize, f: fn(CharClass) -> bool| class(i).is_some_and(f);
    let marks = pre.letters_take_marks();
    let wordlike = move |c: CharClass| c == CharClass::Letter || (marks && c == CharClass::Mark);
    let c = cps[pos].c;
    let cls = cps[pos].class;

    // (?i:'s|'t|'re|'ve|'m|'ll|'d). Only ASCII letters can lower-case to these, so ASCII
    // case folding is llama.cpp's unicode_tolower here.
    if c == '\'' && pos + 1 < n {
        let next = cps[pos + 1].c.to_ascii_lowercase();
        if matches!(next, 's' | 't' | 'm' | 'd') {
            return pos + 2;
        }
        if pos + 2 < n {
            let pair = (next, cps[pos + 2].c.to_ascii_lowercase());
            if matches!(pair, ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                return pos + 3;
            }
        }
    }

    // [^\r\n\p{L}\p{N}]?\p{L}+  (qwen35: [\p{L}\p{M}]+)
    if !(c == '\r' || c == '\n' || cls == CharClass::Number)
        && (wordlike(cls) || class(pos + 1).is_some_and(wordlike))
    {
        let mut end = pos + 1;
        while class(end).is_some_and(wordlike) {
            end += 1;
        }
        return end;
    }

    // \p{N} (llama-bpe: \p{N}{1,3})
    if cls == CharClass::Number {
        let mut end = pos + 1;
        while end - pos < pre.max_digits() && is(end, |c| c == CharClass::Number) {
            end += 1;
        }
        return end;
    }

    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'  (qwen35: [^\s\p{L}\p{M}\p{N}]). Past the fragment's end
    // counts as "not excluded", so a lone trailing space is a word of its own here.
    let punct = move |c: Option<CharClass>| {
        !c.is_some_and(|c| c == CharClass::Whitespace || c == CharClass::Number || wordlike(c))
    };
    let first = if c == ' ' { class(pos + 1) } else { Some(cls) };
    if punct(first) {
        let mut end = pos + usize::from(c == ' ');
        while end < n && punct(class(end)) {
            end += 1;
        }
        while end < n && matches!(cps[end].c, '\r' | '\n') {
            end += 1;
        }
        return end;
    }

    // The whitespace branches look at the whole run starting here.
    let mut run = 0;
    let mut last_newline_end = None;
    while is(pos + run, |c| c == CharClass::Whitespace) {
        if matches!(cps[pos + run].c, '\r' | '\n') {
            last_newline_end = Some(pos + run + 1);
        }
        run += 1;
    }
    // \s*[\r\n]+
    if let Some(end) = last_newline_end {
        return end;
    }
    // \s+(?!\S): all but the last whitespace when a non-space follows.
    if run > 1 && pos + run < n {
        return pos + run - 1;
    }
    // \s+
    if run > 0 {
        return pos + run;
    }
    // No branch matched (not reachable with these classes); llama.cpp takes one character.
    pos + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, pre: PreTokenizer) -> Vec<&str> {
        split(text, pre).into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn classes_follow_unicode_with_white_space_first() {
        // Expected values from the Unicode 15.1 UCD (UnicodeData.txt, PropList.txt).
        assert_eq!(class_of('a'), CharClass::Letter);
        assert_eq!(class_of('\u{0301}'), CharClass::Mark); // combining acute
        assert_eq!(class_of('\u{0E31}'), CharClass::Mark); // Thai mai han-akat
        assert_eq!(class_of('\u{0663}'), CharClass::Number); // Arabic-Indic three
        assert_eq!(class_of('\u{00A0}'), CharClass::Whitespace); // NBSP (Zs)
        assert_eq!(class_of('\u{0085}'), CharClass::Whitespace); // NEL (Cc, White_Space)
        assert_eq!(class_of('\u{200B}'), CharClass::Other); // ZWSP is Cf, not White_Space
        assert_eq!(class_of('\u{2FFC}'), CharClass::Other); // So, new in 15.1
        assert_eq!(class_of('\u{1C89}'), CharClass::Other); // assigned only in 16.0
        assert_eq!(class_of('\u{10FFFF}'), CharClass::Other);
    }

    #[test]
    fn whitespace_before_a_word_is_split_off_all_but_one() {
        let pre = PreTokenizer::Qwen2;
        assert_eq!(words("   Hello", pre), ["  ", " Hello"]);
        assert_eq!(words("a   ", pre), ["a", "   "]);
        assert_eq!(words("\n\n \n  x", pre), ["\n\n \n", " ", " x"]);
    }

    #[test]
    fn digits_split_by_pretokenizer() {
        assert_eq!(words("1234567", PreTokenizer::Llama3), ["123", "456", "7"]);
        assert_eq!(words("123", PreTokenizer::Qwen2), ["1", "2", "3"]);
    }

    #[test]
    fn contractions_are_case_insensitive() {
        assert_eq!(
            words("I'LL we'Re", PreTokenizer::Qwen2),
            ["I", "'LL", " we", "'Re"]
        );
    }

    #[test]
    fn qwen35_letter_runs_absorb_marks() {
        let text = "e\u{0301}x !\u{0301}";
        assert_eq!(
            words(text, PreTokenizer::Qwen2),
            ["e", "\u{0301}x", " !\u{0301}"]
        );
        assert_eq!(
            words(text, PreTokenizer::Qwen35),
            ["e\u{0301}x", " !", "\u{0301}"]
        );
    }
}
