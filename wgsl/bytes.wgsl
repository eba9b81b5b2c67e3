// bytes — byte-addressed reads from a buffer of u32 words (GGUF blocks bound as array<u32>)
//
// GGUF blocks of 18, 22, 34 or 210 bytes do not start on 4-byte boundaries, so every field is read
// by byte offset: a u32 at byte b is the low bytes of word b/4 shifted right, OR the high part of
// the next word shifted left. The next word is read only when b is unaligned, so a read of the last
// field of a buffer never touches the word past its end.
//
// requires: `fn src_word(index: u32) -> u32`, provided by the including kernel (it reads the
// kernel's own binding; helpers cannot take storage pointers portably).
// provides: load_u8_at, load_u16_at, load_u32_at (any byte offset); load_i8_at (sign-extended).

fn load_u32_at(byte: u32) -> u32 {
    let word = byte >> 2u;
    let shift = (byte & 3u) * 8u;
    let low = src_word(word);
    if shift == 0u {
        return low;
    }
    // WGSL takes shift amounts modulo 32, so the aligned case must not fall through here.
    return (low >> shift) | (src_word(word + 1u) << (32u - shift));
}

// A u16 at an even byte offset: the low or high half of its word.
fn load_u16_at(byte: u32) -> u32 {
    return (src_word(byte >> 2u) >> ((byte & 2u) * 8u)) & 0xffffu;
}

fn load_u8_at(byte: u32) -> u32 {
    return (src_word(byte >> 2u) >> ((byte & 3u) * 8u)) & 0xffu;
}

fn load_i8_at(byte: u32) -> i32 {
    return (bitcast<i32>(load_u8_at(byte) << 24u)) >> 24u;
}
