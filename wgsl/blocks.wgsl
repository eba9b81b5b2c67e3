// blocks — decoders for GGUF weight blocks read straight from the u32 words of a tensor binding
//
// Math (model-spec.md §2; d, dmin, m are f16 fields, q the stored integers):
//   F32/F16/BF16  x = value                       (BF16: bits << 16)
//   Q8_0  (34 B / 32)   x = d·q,  q i8
//   Q4_0  (18 B / 32)   x = d·(q − 8),  q = nibble (low nibbles: elements 0..15, high: 16..31)
//   Q4_1  (20 B / 32)   x = d·q + m
//   Q5_0  (22 B / 32)   x = d·(q − 16), q = nibble | bit e of qh << 4
//   Q5_1  (24 B / 32)   x = d·q + m,    q as Q5_0
//   Q4_K  (144 B / 256) x = (d·sc_j)·q − dmin·m_j, eight sub-blocks j of 32, 6-bit sc_j/m_j packed in 12 B
//   Q5_K  (176 B / 256) as Q4_K with a fifth bit per element from qh
//   Q6_K  (210 B / 256) x = (d·sc)·(q − 32), q 6-bit, sc i8 per 16 elements, d last
// Products are evaluated in the order of ggml's reference dequantizers, so the only difference
// from the CPU is a possible fused multiply-add in `a·q − b` / `a·q + b`.
//
// Interface: `dequant4_<type>(block, e)` returns elements e..e+3 (e a multiple of 4) of the block
// that starts at byte `block`; `dequant1_<type>(base, i)` returns element i of an unblocked row
// starting at byte `base`. Block offsets may be any even byte offset (f16 fields stay 2-aligned).
// Field helpers (k_scale_min, low_nibbles4, high_bits4) are shared with the mat-vec kernels.
//
// f16 fields are widened with unpack2x16float, which needs no SHADER_F16: naga 30 cannot
// express `bitcast<vec2<f16>>(u32)` (it silently types the result as f32, gfx-rs/wgpu#8896), so
// there is no faster native-f16 decode to offer.
//
// requires: bytes.wgsl (and the kernel's `src_word`).

// An f16 at an even byte offset, widened to f32.
fn load_f16_at(byte: u32) -> f32 {
    return unpack2x16float(src_word(byte >> 2u))[(byte >> 1u) & 1u];
}

// The two consecutive f16 at an even byte offset (the first in .x).
fn load_f16x2_at(byte: u32) -> vec2<f32> {
    return unpack2x16float(load_u32_at(byte));
}

// The four byte lanes of a word as floats (lane 0 = lowest byte = lowest element).
fn lanes4(word: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xU8(word));
}

// Four nibbles of the 4 bytes at `byte`: the low nibbles, or the high ones when `high`.
fn low_nibbles4(byte: u32, high: bool) -> u32 {
    return (load_u32_at(byte) >> select(0u, 4u, high)) & 0x0f0f0f0fu;
}

// Bits 0..3 of `bits` moved to bit 4 of byte lanes 0..3 (the fifth bit of Q5 quants).
fn high_bits4(bits: u32) -> u32 {
    return ((bits & 1u) | ((bits & 2u) << 7u) | ((bits & 4u) << 14u) | ((bits & 8u) << 21u)) << 4u;
}

// The 6-bit (scale, min) of sub-block j (0..7) from the 12 packed bytes at `at` (Q4_K, Q5_K).
fn k_scale_min(at: u32, j: u32) -> vec2<f32> {
    if j < 4u {
        return vec2<f32>(f32(load_u8_at(at + j) & 63u), f32(load_u8_at(at + j + 4u) & 63u));
    }
    let packed = load_u8_at(at + j + 4u);
    let scale = (packed & 15u) | ((load_u8_at(at + j - 4u) >> 6u) << 4u);
    let offset = (packed >> 4u) | ((load_u8_at(at + j) >> 6u) << 4u);
    return vec2<f32>(f32(scale), f32(offset));
}

fn dequant1_f32(base: u32, i: u32) -> f32 {
    return bitcast<f32>(load_u32_at(base + 4u * i));
}

fn dequant1_f16(base: u32, i: u32) -> f32 {
    return load_f16_at(base + 2u * i);
}

fn dequant1_bf16(base: u32, i: u32) -> f32 {
    return bitcast<f32>(load_u16_at(base + 2u * i) << 16u);
}

fn dequant4_q8_0(block: u32, e: u32) -> vec4<f32> {
    let d = load_f16_at(block);
    return d * vec4<f32>(unpack4xI8(load_u32_at(block + 2u + e)));
}

fn dequant4_q4_0(block: u32, e: u32) -> vec4<f32> {
    let d = load_f16_at(block);
    let q = low_nibbles4(block + 2u + (e & 15u), e >= 16u);
    return d * (lanes4(q) - 8.0);
}

fn dequant4_q4_1(block: u32, e: u32) -> vec4<f32> {
    let dm = load_f16x2_at(block);
    let q = low_nibbles4(block + 4u + (e & 15u), e >= 16u);
    return dm.x * lanes4(q) + dm.y;
}

fn dequant4_q5_0(block: u32, e: u32) -> vec4<f32> {
    let d = load_f16_at(block);
    let qh = load_u32_at(block + 2u);
    let q = low_nibbles4(block + 6u + (e & 15u), e >= 16u) | high_bits4(qh >> e);
    return d * (lanes4(q) - 16.0);
}

fn dequant4_q5_1(block: u32, e: u32) -> vec4<f32> {
    let dm = load_f16x2_at(block);
    let qh = load_u32_at(block + 4u);
    let q = low_nibbles4(block + 8u + (e & 15u), e >= 16u) | high_bits4(qh >> e);
    return dm.x * lanes4(q) + dm.y;
}

fn dequant4_q4_k(block: u32, e: u32) -> vec4<f32> {
    let dm = load_f16x2_at(block);
    let j = e / 32u;
    let sm = k_scale_min(block + 4u, j);
    let q = low_nibbles4(block + 16u + 32u * (j / 2u) + e % 32u, (j & 1u) == 1u);
    return dm.x * sm.x * lanes4(q) - dm.y * sm.y;
}

fn dequant4_q5_k(block: u32, e: u32) -> vec4<f32> {
    let dm = load_f16x2_at(block);
    let j = e / 32u;
    let l = e % 32u;
    let sm = k_scale_min(block + 4u, j);
    let low = low_nibbles4(block + 48u + 32u * (j / 2u) + l, (j & 1u) == 1u);
    let high = ((load_u32_at(block + 16u + l) >> j) & 0x01010101u) << 4u;
    return dm.x * sm.x * lanes4(low | high) - dm.y * sm.y;
}

fn dequant4_q6_k(block: u32, e: u32) -> vec4<f32> {
    let d = load_f16_at(block + 208u);
    let side = e / 128u;
    let quarter = (e % 128u) / 32u;
    let l = e % 32u;
    let low = low_nibbles4(block + 64u * side + 32u * (quarter & 1u) + l, quarter >= 2u);
    let high = ((load_u32_at(block + 128u + 32u * side + l) >> (2u * quarter)) & 0x03030303u) << 4u;
    let scale = f32(load_i8_at(block + 192u + e / 16u));
    return d * scale * (lanes4(low | high) - 32.0);
}
