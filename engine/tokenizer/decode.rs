//! Token ids back to text: each token's bytes (llama.cpp `token_to_piece`), concatenated, and a
//! streaming decoder that holds an incomplete UTF-8 sequence until its last byte arrives.

use super::bpe::char_byte;
use super::vocab::Attr;
use super::{Tokenizer, TokenizerError};
use std::fmt::Write;

/// The bytes a token stands for, as llama.cpp's `token_to_piece` with `special = true` gives
/// them for a byte-level BPE vocabulary:
/// - control, unknown and user-defined tokens: their text as it is;
/// - normal tokens: their text through the inverse byte map; a character outside the byte
///   alphabet (a malformed vocabulary) becomes `[UNK_BYTE_0x<its UTF-8 in hex><token text>]`,
///   llama.cpp's marker;
/// - byte tokens (`<0xHH>`): that byte;
/// - unused and undefined tokens: nothing.
pub(super) fn piece_bytes(text: &str, attr: Attr) -> Vec<u8> {
    if attr.any(Attr::SPECIAL) {
        return text.as_bytes().to_vec();
    }
    if attr.any(Attr::NORMAL) {
        return unmap_bytes(text);
    }
    if attr.any(Attr::BYTE) {
        return text
            .get(3..5)
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .into_iter()
            .collect();
    }
    Vec::new()
}

fn unmap_bytes(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut marker = String::from("[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(marker, "{b:02x}");
                }
                marker.push_str(text);
                marker.push(']');
                out.extend_from_slice(marker.as_bytes());
            }
        }
    }
    out
}

/// Decodes generated tokens one at a time. [`push`](Self::push) returns the text that is
/// complete so far; bytes of a character that is still being spelled out across tokens wait
/// for the rest. Bytes that can never become valid UTF-8 come out as U+FFFD.
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    render_special: bool,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub(super) fn new(tokenizer: &'a Tokenizer, render_special: bool) -> Self {
        Self {
            tokenizer,
            render_special,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text it completes, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>, TokenizerError> {
        self.pending
            .extend_from_slice(self.tokenizer.piece(id, self.render_special)?);
        let text = take_complete_utf8(&mut self.pending);
        Ok((!text.is_empty()).then_some(text))
    }

    /// Ends the stream: whatever is still held, with an incomplete character as U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

/// Removes and returns the longest prefix of `bytes` that decodes, keeping a trailing sequence
/// that could still become a character; invalid bytes become U+FFFD.
fn take_complete_utf8(bytes: &mut Vec<u8>) -> String {
    let mut out = String::new();
    let mut start = 0;
    loop {
        match std::str::from_utf8(&bytes[start..]) {
            Ok(s) => {
                out.push_str(s);
                bytes.clear();
                return out;
            }
            Err(e) => {
                let valid = start + e.valid_up_to();
                // `valid_up_to` marks a prefix from_utf8 accepted: the default is never taken.
                out.push_str(std::str::from_utf8(&bytes[start..valid]).unwrap_or_default());
                match e.error_len() {
                    Some(bad) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        start = valid + bad;
                    }
                    None => {
                        bytes.drain(..valid);
                        return out;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_sequence_is_held_and_invalid_bytes_replaced() {
        // "é" is C3 A9; "🦙" is F0 9F A6 99.
        let mut bytes = vec![b'a', 0xC3];
        assert_eq!(take_complete_utf8(&mut bytes), "a");
        assert_eq!(bytes, [0xC3]);
        bytes.extend([0xA9, 0xF0, 0x9F]);
        assert_eq!(take_complete_utf8(&mut bytes), "é");
        assert_eq!(bytes, [0xF0, 0x9F]);
        bytes.extend([0xA6, 0x99]);
        assert_eq!(take_complete_utf8(&mut bytes), "🦙");
        assert!(bytes.is_empty());
        let mut bad = vec![0xFF, b'x', 0xC3, b'y'];
        assert_eq!(take_complete_utf8(&mut bad), "\u{FFFD}x\u{FFFD}y");
        assert!(bad.is_empty());
    }

    #[test]
    fn pieces_follow_the_token_attribute() {
        assert_eq!(piece_bytes("ĠHi", Attr::NORMAL), b" Hi");
        assert_eq!(piece_bytes("<|im_end|>", Attr::CONTROL), b"<|im_end|>");
        assert_eq!(piece_bytes("Ġ<x>", Attr::USER_DEFINED), "Ġ<x>".as_bytes());
        assert_eq!(piece_bytes("<0x0A>", Attr::BYTE), b"\n");
        assert_eq!(piece_bytes("[PAD1]", Attr::UNUSED), b"");
        assert_eq!(
            piece_bytes("a一", Attr::NORMAL),
            b"a[UNK_BYTE_0xe4b880a\xe4\xb8\x80]"
        );
    }
}
