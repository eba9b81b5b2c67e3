//! The 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (model-spec.md §2).
//!
//! Quantization is ggml's reference (`quantize_row_*_ref`), which gguf-py reproduces bit for bit:
//! the symmetric formats scale by the signed value of largest magnitude (so it lands exactly on
//! the most negative code), the offset formats map [min, max] onto the full code range.
//!
//! Dequantization evaluates `d·q` and `d·q + m` in f32 as single operations in that order, which
//! is what makes the result bit-identical to gguf-py and ggml.

use super::float::{f16_bytes, load_f16, round_to_f16, store_f16};
use super::rms;

pub const QK: usize = 32;

/// The 32 four-bit codes of a block: element j < 16 in the low nibble of `qs[j]`, element
/// j + 16 in its high nibble.
fn nibbles(qs: &[u8]) -> [u8; QK] {
    let mut q = [0; QK];
    for (j, &b) in qs[..QK / 2].iter().enumerate() {
        q[j] = b & 15;
        q[j + QK / 2] = b >> 4;
    }
    q
}

/// Adds the fifth bit of every code: bit j of the little-endian `qh` belongs to element j.
fn with_fifth_bits(mut q: [u8; QK], qh: &[u8]) -> [u8; QK] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) as u8) << 4;
    }
    q
}

fn pack_nibbles(q: &[u8; QK], qs: &mut [u8]) {
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 15) | ((q[j + QK / 2] & 15) << 4);
    }
}

fn pack_fifth_bits(q: &[u8; QK], qh: &mut [u8]) {
    let bits = q
        .iter()
        .enumerate()
        .fold(0u32, |acc, (j, &v)| acc | (u32::from(v >> 4) << j));
    qh[..4].copy_from_slice(&bits.to_le_bytes());
}

/// `x = d·(q − offset)` for every code of a block.
fn scale_codes(q: &[u8; QK], offset: i32, d: f32, y: &mut [f32]) {
    for (y, &q) in y.iter_mut().zip(q) {
        *y = (i32::from(q) - offset) as f32 * d;
    }
}

/// `x = d·q + m` for every code of a block.
fn scale_codes_with_min(q: &[u8; QK], d: f32, m: f32, y: &mut [f32]) {
    for (y, &q) in y.iter_mut().zip(q) {
        *y = d * f32::from(q) + m;
    }
}

pub fn dequantize_q4_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
        scale_codes(&nibbles(&b[2..]), 8, load_f16(b), y);
    }
}

pub fn dequantize_q4_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(20).zip(out.chunks_exact_mut(QK)) {
        scale_codes_with_min(&nibbles(&b[4..]), load_f16(b), load_f16(&b[2..]), y);
    }
}

pub fn dequantize_q5_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(22).zip(out.chunks_exact_mut(QK)) {
        let q = with_fifth_bits(nibbles(&b[6..]), &b[2..6]);
        scale_codes(&q, 16, load_f16(b), y);
    }
}

pub fn dequantize_q5_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(24).zip(out.chunks_exact_mut(QK)) {
        let q = with_fifth_bits(nibbles(&b[8..]), &b[4..8]);
        scale_codes_with_min(&q, load_f16(b), load_f16(&b[2..]), y);
    }
}

pub fn dequantize_q8_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
        let d = load_f16(b);
        for (y, &q) in y.iter_mut().zip(&b[2..]) {
            *y = f32::from(q as i8) * d;
        }
    }
}

/// `1/d`, or 0 where that is not a usable multiplier: d = 0 (an all-zero block), or d so small
/// (a block whose largest magnitude is below ~1e-37) that 1/d overflows. ggml then converts an
/// infinite product to an integer, which C leaves undefined; here such a block gets the
/// zero code, and it decodes to ±0 either way because its f16 scale is 0.
fn inverse_scale(d: f32) -> f32 {
    let id = 1.0 / d;
    if d == 0.0 || !id.is_finite() { 0.0 } else { id }
}

/// The signed value of largest magnitude (the first, on ties), or 0 for an all-zero block.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Symmetric codes in [0, 2·half): `d = max / −half`, code = ⌊x/d + half + ½⌋ capped.
fn symmetric_codes(x: &[f32], half: f32) -> (f32, [u8; QK]) {
    let d = signed_absmax(x) / -half;
    let id = inverse_scale(d);
    let top = (2.0 * half - 1.0) as u8;
    let mut q = [0; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = ((v * id + (half + 0.5)) as u8).min(top);
    }
    (d, q)
}

/// Offset codes in [0, levels): `d = (max − min)/(levels − 1)`, code = ⌊(x − min)/d + ½⌋.
fn offset_codes(x: &[f32], levels: u8) -> (f32, f32, [u8; QK]) {
    let (min, max) = x
        .iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let d = (max - min) / f32::from(levels - 1);
    let id = inverse_scale(d);
    let mut q = [0; QK];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (((v - min) * id + 0.5) as u8).min(levels - 1);
    }
    (d, min, q)
}

pub fn quantize_q4_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(18)) {
        let (d, q) = symmetric_codes(x, 8.0);
        store_f16(b, d);
        pack_nibbles(&q, &mut b[2..]);
    }
}

pub fn quantize_q4_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(20)) {
        let (d, min, q) = offset_codes(x, 16);
        store_f16(b, d);
        store_f16(&mut b[2..], min);
        pack_nibbles(&q, &mut b[4..]);
    }
}

pub fn quantize_q5_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(22)) {
        let (d, q) = symmetric_codes(x, 16.0);
        store_f16(b, d);
        pack_fifth_bits(&q, &mut b[2..6]);
        pack_nibbles(&q, &mut b[6..]);
    }
}

pub fn quantize_q5_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(24)) {
        let (d, min, q) = offset_codes(x, 32);
        store_f16(b, d);
        store_f16(&mut b[2..], min);
        pack_fifth_bits(&q, &mut b[4..8]);
        pack_nibbles(&q, &mut b[8..]);
    }
}

pub fn quantize_q8_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(34)) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse_scale(d);
        store_f16(b, d);
        for (q, &v) in b[2..].iter_mut().zip(x) {
            // f32::round is C's roundf: half away from zero.
            *q = (v * id).round() as i8 as u8;
        }
    }
}

// Random blocks. The caller fills the row with random bytes first; these functions overwrite
// the scale fields. Codes stay uniformly random, so each format's decoded values have a known
// RMS when its f16 scale is 1 (`*_unit_rms`), and the caller picks `d = std / unit_rms`.

/// Codes −8..7.
pub fn q4_0_unit_rms() -> f32 {
    rms((-8..8).map(f64::from))
}

/// Codes −16..15.
pub fn q5_0_unit_rms() -> f32 {
    rms((-16..16).map(f64::from))
}

/// Codes −128..127: every random byte.
pub fn q8_0_unit_rms() -> f32 {
    rms((-128..128).map(f64::from))
}

/// Codes 0..15 centred by m = −7.5·d.
pub fn q4_1_unit_rms() -> f32 {
    rms((0..16).map(|q| f64::from(q) - 7.5))
}

/// Codes 0..31 centred by m = −15.5·d.
pub fn q5_1_unit_rms() -> f32 {
    rms((0..32).map(|q| f64::from(q) - 15.5))
}

/// Symmetric formats decode codes that lean half a step negative; a random sign on each
/// block's scale makes the values zero-mean.
fn fill_signed_scales(d: f32, block_bytes: usize, out: &mut [u8]) {
    let (plus, minus) = (f16_bytes(d), f16_bytes(-d));
    for b in out.chunks_exact_mut(block_bytes) {
        let negative = b[1] & 0x80 != 0;
        b[..2].copy_from_slice(if negative { &minus } else { &plus });
    }
}

fn fill_centred_scales(d: f32, centre: f32, block_bytes: usize, out: &mut [u8]) {
    let d16 = round_to_f16(d);
    let header = [f16_bytes(d16), f16_bytes(-centre * d16)].concat();
    for b in out.chunks_exact_mut(block_bytes) {
        b[..4].copy_from_slice(&header);
    }
}

pub fn fill_random_q4_0(d: f32, out: &mut [u8]) {
    fill_signed_scales(d, 18, out);
}

pub fn fill_random_q5_0(d: f32, out: &mut [u8]) {
    fill_signed_scales(d, 22, out);
}

pub fn fill_random_q8_0(d: f32, out: &mut [u8]) {
    fill_signed_scales(d, 34, out);
}

pub fn fill_random_q4_1(d: f32, out: &mut [u8]) {
    fill_centred_scales(d, 7.5, 20, out);
}

pub fn fill_random_q5_1(d: f32, out: &mut [u8]) {
    fill_centred_scales(d, 15.5, 24, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_and_fifth_bits_round_trip() {
        let q: [u8; QK] = std::array::from_fn(|j| (j * 7 % 32) as u8);
        let (mut qs, mut qh) = ([0u8; 16], [0u8; 4]);
        pack_nibbles(&q, &mut qs);
        pack_fifth_bits(&q, &mut qh);
        assert_eq!(with_fifth_bits(nibbles(&qs), &qh), q);
    }

    #[test]
    fn symmetric_scale_lands_the_extreme_on_the_most_negative_code() {
        let mut x = [0.25f32; QK];
        x[5] = -3.0;
        x[9] = 3.0; // same magnitude later: the first one wins, as in ggml
        let (d, q) = symmetric_codes(&x, 8.0);
        assert_eq!(d, 3.0 / 8.0); // max / −8 with max = −3
        assert_eq!(q[5], 0); // −3 / d + 8.5 = 0.5: code 0 decodes to −8·d = −3 exactly
        assert_eq!(q[9], 15); // 3 / d + 8.5 = 16.5, capped at 15
    }

    #[test]
    fn tiny_blocks_get_a_zero_multiplier_not_an_infinite_one() {
        let x = [1e-39f32; QK];
        let (d, q) = symmetric_codes(&x, 8.0);
        assert!(d != 0.0 && (1.0 / d).is_infinite());
        assert!(q.iter().all(|&q| q == 8));
    }
}
