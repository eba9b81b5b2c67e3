//! F32, F16 and BF16: one element per "block", converted bit for bit as gguf-py does.
//!
//! gguf-py (numpy) keeps NaN payloads when widening f16 → f32 (a signalling NaN stays
//! signalling), and when narrowing f32 → f16 it keeps the top payload bits, setting the lowest
//! one if nothing else would be left. Hardware conversions (F16C, and `half`'s software path)
//! quiet NaNs instead, so the NaN cases are done here by hand; every finite value and ±Inf goes
//! through the ordinary round-to-nearest-even conversion.

/// An IEEE binary16 bit pattern widened to f32, exactly (NaN payload and sign kept).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from(h >> 10) & 0x1f;
    let man = u32::from(h & 0x3ff);
    let magnitude = match exp {
        // Zero and subnormals: man · 2⁻²⁴ is exact in f32.
        0 => (man as f32 * f32::from_bits(0x3380_0000)).to_bits(),
        31 => 0x7f80_0000 | (man << 13),
        _ => ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// f32 → binary16 bits, rounding to nearest even; NaN keeps its sign and top payload bits.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    if x.is_nan() {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let payload = ((bits & 0x007f_ffff) >> 13) as u16;
        return sign | 0x7c00 | payload.max(1);
    }
    half::f16::from_f32(x).to_bits()
}

/// The f16 stored little-endian in the first two bytes of `b`, widened.
pub fn load_f16(b: &[u8]) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// `x` as the two little-endian bytes of an f16.
pub fn f16_bytes(x: f32) -> [u8; 2] {
    f32_to_f16_bits(x).to_le_bytes()
}

/// Stores `x` as a little-endian f16 in the first two bytes of `b`.
pub fn store_f16(b: &mut [u8], x: f32) {
    b[..2].copy_from_slice(&f16_bytes(x));
}

/// `x` rounded to the nearest f16 value, as f32.
pub fn round_to_f16(x: f32) -> f32 {
    f16_bits_to_f32(f32_to_f16_bits(x))
}

/// A bfloat16 bit pattern widened to f32 (exact: the bits become the top half).
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// f32 → bfloat16 bits, as ggml's `ggml_compute_fp32_to_bf16` and gguf-py: NaN is forced quiet
/// (keeping its sign and top payload bits), everything else rounds to nearest even.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let mut bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        bits = (bits & 0xffff_0000) | 0x0040_0000;
    }
    let rounded = u64::from(bits) + 0x7fff + u64::from((bits >> 16) & 1);
    (rounded >> 16) as u16
}

pub fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn dequantize_f16(bytes: &[u8], out: &mut [f32]) {
    // A chunk at a time through `half`'s vector conversion (F16C where the CPU has it), which
    // may quiet signalling NaNs: NaNs are then redone exactly. Several times faster than
    // converting one value at a time.
    use half::slice::HalfFloatSliceExt;
    let mut halves = [half::f16::ZERO; 256];
    for (out, bytes) in out.chunks_mut(256).zip(bytes.chunks(512)) {
        let halves = &mut halves[..out.len()];
        for (h, b) in halves.iter_mut().zip(bytes.chunks_exact(2)) {
            *h = half::f16::from_le_bytes([b[0], b[1]]);
        }
        halves.convert_to_f32_slice(out);
        for (o, h) in out.iter_mut().zip(halves.iter()) {
            if o.is_nan() {
                *o = f16_bits_to_f32(h.to_bits());
            }
        }
    }
}

pub fn dequantize_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub fn quantize_f32(src: &[f32], out: &mut [u8]) {
    for (x, o) in src.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&x.to_le_bytes());
    }
}

pub fn quantize_f16(src: &[f32], out: &mut [u8]) {
    for (x, o) in src.iter().zip(out.chunks_exact_mut(2)) {
        store_f16(o, *x);
    }
}

pub fn quantize_bf16(src: &[f32], out: &mut [u8]) {
    for (x, o) in src.iter().zip(out.chunks_exact_mut(2)) {
        o.copy_from_slice(&f32_to_bf16_bits(*x).to_le_bytes());
    }
}

// Random values: the caller has filled the row with random bytes; each element's own bytes
// become a uniform value in [-√3·std, √3·std) (standard deviation `std`), in place.

/// Maps `bits` random bits to a uniform value with standard deviation `std`.
fn uniform_with_std(random: u32, bits: u32, std: f32) -> f32 {
    let unit = random as f32 * (2.0 / (1u64 << bits) as f32) - 1.0; // [-1, 1), exact
    unit * std * 3f32.sqrt()
}

pub fn fill_random_f32(std: f32, out: &mut [u8]) {
    for o in out.chunks_exact_mut(4) {
        let random = u32::from_le_bytes([o[0], o[1], o[2], o[3]]) >> 8;
        o.copy_from_slice(&uniform_with_std(random, 24, std).to_le_bytes());
    }
}

pub fn fill_random_f16(std: f32, out: &mut [u8]) {
    // Converted a chunk at a time: `half`'s slice conversion uses the CPU's vector f16
    // instructions, several times faster than one value at a time (no NaN arises here).
    use half::slice::HalfFloatSliceExt;
    const CHUNK: usize = 256;
    let (mut values, mut halves) = ([0f32; CHUNK], [half::f16::ZERO; CHUNK]);
    for o in out.chunks_mut(2 * CHUNK) {
        let n = o.len() / 2;
        for (v, b) in values.iter_mut().zip(o.chunks_exact(2)) {
            *v = uniform_with_std(u32::from(u16::from_le_bytes([b[0], b[1]])), 16, std);
        }
        halves[..n].convert_from_f32_slice(&values[..n]);
        for (b, h) in o.chunks_exact_mut(2).zip(&halves) {
            b.copy_from_slice(&h.to_le_bytes());
        }
    }
}

pub fn fill_random_bf16(std: f32, out: &mut [u8]) {
    for o in out.chunks_exact_mut(2) {
        let random = u32::from(u16::from_le_bytes([o[0], o[1]]));
        let bits = f32_to_bf16_bits(uniform_with_std(random, 16, std));
        o.copy_from_slice(&bits.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_widening_agrees_with_half_on_every_non_nan_pattern() {
        for h in 0..=u16::MAX {
            let reference = half::f16::from_bits(h);
            if reference.is_nan() {
                continue;
            }
            assert_eq!(
                f16_bits_to_f32(h).to_bits(),
                reference.to_f32().to_bits(),
                "f16 bits {h:#06x}"
            );
        }
    }

    #[test]
    fn f16_widening_keeps_nan_payload_and_sign() {
        // Signalling NaN 0x7c01 stays signalling (payload bit 13 only), as numpy does.
        assert_eq!(f16_bits_to_f32(0x7c01).to_bits(), 0x7f80_2000);
        assert_eq!(f16_bits_to_f32(0xfe00).to_bits(), 0xffc0_0000);
        assert_eq!(f16_bits_to_f32(0x7d55).to_bits(), 0x7faa_a000);
    }

    #[test]
    fn f16_narrowing_round_trips_every_pattern() {
        for h in 0..=u16::MAX {
            assert_eq!(f32_to_f16_bits(f16_bits_to_f32(h)), h, "f16 bits {h:#06x}");
        }
    }

    #[test]
    fn f16_narrowing_keeps_a_nan_whose_payload_is_below_f16_precision() {
        // 0x7f800001's payload lives only in the 13 dropped bits; it must stay NaN, not Inf.
        assert_eq!(f32_to_f16_bits(f32::from_bits(0x7f80_0001)), 0x7c01);
        assert_eq!(f32_to_f16_bits(f32::from_bits(0xffa0_0000)), 0xfd00);
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nan() {
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80); // tie, even stays
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82); // tie, odd rounds up
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0xff81_2345)), 0xffc1);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80); // rounds up to +Inf
    }
}
