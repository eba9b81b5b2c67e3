//! Byte-level BPE: GPT-2's byte alphabet and the merge loop (llama.cpp `llm_tokenizer_bpe_session`).
//!
//! A word's UTF-8 bytes are each mapped to one printable character (GPT-2's `bytes_to_unicode`),
//! so a word starts as one symbol per byte. The merge loop then repeatedly joins the adjacent
//! pair with the lowest merge rank, the leftmost first among equal ranks, until no adjacent pair
//! is in the merge table; each final symbol is looked up in the vocabulary.
//!
//! Symbols are interned as *piece ids* so that the loop hashes two integers per candidate pair
//! instead of building strings: a token's piece id is its token id, and merge operands or
//! results that are not tokens (possible only in a malformed vocabulary) get ids past the
//! vocabulary. Such a final symbol falls back, as in llama.cpp, to the single-byte tokens of
//! its mapped text (which exist only for the printable ASCII bytes).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// GPT-2's byte → character map: printable Latin-1 bytes map to themselves, the other 68 bytes,
/// in increasing order, to U+0100, U+0101, …
pub(super) fn byte_char(b: u8) -> char {
    BYTE_CHARS[b as usize]
}

/// The byte a mapped character stands for, if it is one of the 256.
pub(super) fn char_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if is_printable_byte(cp) {
        return Some(cp as u8);
    }
    let offset = cp.checked_sub(0x100)?;
    NON_PRINTABLE.get(offset as usize).copied()
}

const fn is_printable_byte(cp: u32) -> bool {
    matches!(cp, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The 68 bytes GPT-2 moves to U+0100.., in order.
static NON_PRINTABLE: [u8; 68] = {
    let mut table = [0u8; 68];
    let (mut b, mut n) = (0u32, 0);
    while b < 256 {
        if !is_printable_byte(b) {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

static BYTE_CHARS: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut n = 0;
    let mut b = 0u32;
    while b < 256 {
        let cp = if is_printable_byte(b) {
            b
        } else {
            n += 1;
            0x100 + n - 1
        };
        table[b as usize] = match char::from_u32(cp) {
            Some(c) => c,
            None => panic!("GPT-2 byte map stays below U+0144"),
        };
        b += 1;
    }
    table
};

/// The merge table and what the loop needs to turn symbols back into tokens.
pub(super) struct Bpe {
    /// (left piece, right piece) → (rank, merged piece).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The piece of each byte's mapped character.
    byte_piece: [u32; 256],
    /// The token of each byte's mapped text where that text is one byte (printable ASCII).
    ascii_token: [Option<u32>; 256],
    n_tokens: u32,
}

impl Bpe {
    /// Whether `n_tokens` tokens and `n_merges` merges leave every piece id (tokens, merge
    /// operands and results, the 256 byte characters) inside u32.
    pub(super) fn fits(n_tokens: usize, n_merges: usize) -> bool {
        (n_tokens as u64) + 3 * (n_merges as u64) + 256 <= u64::from(u32::MAX)
    }

    /// Builds the table from token texts (index = id) and `"left right"` merge strings
    /// (index = rank); the sizes must pass [`fits`](Self::fits). A merge is split at the first
    /// space after its first byte, as llama.cpp does; the first occurrence of a pair sets its
    /// rank.
    pub(super) fn new(
        tokens: &[String],
        by_text: &HashMap<String, u32>,
        merges: &[String],
    ) -> Self {
        debug_assert!(Self::fits(tokens.len(), merges.len()));
        let n_tokens = tokens.len() as u32;
        let mut extra: HashMap<String, u32> = HashMap::new();
        let mut intern = |text: &str| -> u32 {
            if let Some(&id) = by_text.get(text) {
                return id;
            }
            let next = n_tokens + extra.len() as u32;
            *extra.entry(text.to_owned()).or_insert(next)
        };
        let mut table = HashMap::with_capacity(merges.len());
        for (index, merge) in merges.iter().enumerate() {
            let Some(split) = merge_split(merge) else {
                // llama.cpp files such an entry under ("", ""), which no symbol ever matches.
                continue;
            };
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            let rank = index as u32;
            let pair = (intern(left), intern(right));
            let merged = intern(&format!("{left}{right}"));
            table.entry(pair).or_insert((rank, merged));
        }
        let byte_piece =
            std::array::from_fn(|b| intern(byte_char(b as u8).encode_utf8(&mut [0; 4])));
        let ascii_token = std::array::from_fn(|b| {
            let c = byte_char(b as u8);
            if c.is_ascii() {
                by_text.get(c.encode_utf8(&mut [0; 4]) as &str).copied()
            } else {
                None
            }
        });
        Self {
            merges: table,
            byte_piece,
            ascii_token,
            n_tokens,
        }
    }

    /// Appends the tokens of one pre-tokenized word (raw UTF-8 bytes, not yet byte-mapped).
    pub(super) fn encode_word(&self, word: &[u8], out: &mut Vec<u32>) {
        let n = word.len() as u32;
        let mut syms: Vec<Symbol> = (0..n)
            .map(|i| Symbol {
                piece: self.byte_piece[word[i as usize] as usize],
                start: i,
                len: 1,
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();
        let mut heap = BinaryHeap::new();
        for right in 1..n {
            self.queue_pair(&syms, right - 1, right, &mut heap);
        }
        while let Some(Reverse(pair)) = heap.pop() {
            let (l, r) = (pair.left as usize, pair.right as usize);
            // Stale: one side has been merged away or has grown since the pair was queued.
            if syms[l].len == 0
                || syms[r].len == 0
                || syms[l].piece != pair.lp
                || syms[r].piece != pair.rp
            {
                continue;
            }
            let right = syms[r];
            syms[r].len = 0;
            let left = &mut syms[l];
            left.piece = pair.merged;
            left.len += right.len;
            left.next = right.next;
            let (before, after) = (left.prev, left.next);
            if let Some(after) = after {
                syms[after as usize].prev = Some(pair.left);
                self.queue_pair(&syms, pair.left, after, &mut heap);
            }
            if let Some(before) = before {
                self.queue_pair(&syms, before, pair.left, &mut heap);
            }
        }
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let sym = &syms[i as usize];
            if sym.piece < self.n_tokens {
                out.push(sym.piece);
            } else {
                let bytes = &word[sym.start as usize..(sym.start + sym.len) as usize];
                out.extend(bytes.iter().filter_map(|&b| self.ascii_token[b as usize]));
            }
            at = sym.next;
        }
    }

    fn queue_pair(
        &self,
        syms: &[Symbol],
        left: u32,
        right: u32,
        heap: &mut BinaryHeap<Reverse<Pair>>,
    ) {
        let (lp, rp) = (syms[left as usize].piece, syms[right as usize].piece);
        if let Some(&(rank, merged)) = self.merges.get(&(lp, rp)) {
            heap.push(Reverse(Pair {
                rank,
                left,
                right,
                lp,
                rp,
                merged,
            }));
        }
    }
}

/// Byte index of the space that separates a merge's two halves: the first one after byte 0.
fn merge_split(merge: &str) -> Option<usize> {
    let bytes = merge.as_bytes();
    (1..bytes.len()).find(|&i| bytes[i] == b' ')
}

/// One symbol of a word being merged; `len == 0` marks a symbol merged into its left neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    piece: u32,
    start: u32,
    len: u32,
    prev: Option<u32>,
    next: Option<u32>,
}

/// A queued adjacent pair; ordered by rank, then by position (leftmost first), as llama.cpp's
/// priority queue orders them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    rank: u32,
    left: u32,
    right: u32,
    lp: u32,
    rp: u32,
    merged: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_gpt2s() {
        // GPT-2's bytes_to_unicode: space → U+0120 'Ġ', newline → U+010A 'Ċ', 'A' stays.
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(b'A'), 'A');
        assert_eq!(byte_char(0xAD), '\u{0143}'); // the last of the 68 moved bytes
        for b in 0..=255u8 {
            assert_eq!(char_byte(byte_char(b)), Some(b), "byte {b:#04x}");
        }
        assert_eq!(char_byte('\u{0144}'), None);
        assert_eq!(char_byte('\u{4E00}'), None);
    }

    fn toy() -> (Vec<String>, HashMap<String, u32>) {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc", "aa", "aaa"]
            .map(String::from)
            .to_vec();
        let by_text = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        (tokens, by_text)
    }

    fn encode(merges: &[&str], word: &str) -> Vec<u32> {
        let (tokens, by_text) = toy();
        let merges: Vec<String> = merges.iter().map(|m| m.to_string()).collect();
        let bpe = Bpe::new(&tokens, &by_text, &merges);
        let mut out = Vec::new();
        bpe.encode_word(word.as_bytes(), &mut out);
        out
    }

    #[test]
    fn lowest_rank_merges_first() {
        // "b c" outranks "a b", so "abc" becomes a + bc, and no "a bc" merge exists.
        assert_eq!(encode(&["b c", "a b", "ab c"], "abc"), [0, 4]);
        assert_eq!(encode(&["a b", "b c", "ab c"], "abc"), [5]);
    }

    #[test]
    fn equal_pairs_merge_leftmost_first() {
        // "aaa" with only "a a": the left pair merges, the right a stays alone.
        assert_eq!(encode(&["a a"], "aaa"), [6, 0]);
        assert_eq!(encode(&["a a", "aa a"], "aaa"), [7]);
    }

    #[test]
    fn duplicate_merge_keeps_its_first_rank() {
        // With the later rank, "a b" would merge first and give ab + c.
        assert_eq!(encode(&["b c", "a b", "b c"], "abc"), [0, 4]);
    }

    #[test]
    fn symbol_without_token_falls_back_to_ascii_bytes() {
        // "c a" makes the piece "ca", which is no token: it falls back to c, a.
        assert_eq!(encode(&["c a"], "bca"), [1, 2, 0]);
    }
}
