//! The 256-element "K" super-block formats: Q4_K, Q5_K, Q6_K (model-spec.md §2).
//!
//! Dequantization follows ggml's reference dequantizers operation for operation (`d·sc` first,
//! then `·q`, then `− dmin·m`), which is what gguf-py does too, so results are bit-identical.
//!
//! Quantization is ggml's reference search without an importance matrix, as `llama-quantize`
//! runs it (`quantize_row_q{4,5,6}_K_ref` in ggml-quants.c):
//! - Q4_K/Q5_K fit each 32-element sub-block with `x ≈ scale·q − min` by weighted least squares
//!   over a sweep of candidate scales (ggml's `make_qkx2_quants`), then quantize the eight
//!   scales and mins to 6 bits against the block's largest, and requantize every element with
//!   the scales as stored.
//! - Q6_K fits each 16-element sub-block symmetrically (`make_qx_quants`: 19 candidate scales,
//!   x²-weighted), stores the scales as signed 8-bit multiples of one f16, and requantizes.
//!
//! The sums run in the same order and precision as ggml's C, and nothing is fused into FMAs,
//! so a build of ggml without FMA contraction produces the same bytes.

use super::float::{
    f16_bits_to_f32, f16_bytes, f32_to_f16_bits, load_f16, round_to_f16, store_f16,
};
use super::rms;

pub const QK_K: usize = 256;
/// Below this largest magnitude a sub-block counts as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even by adding 1.5·2²³ and reading the mantissa. Exact
/// for |x| < 2²²; outside that (never reached for finite input) it wraps, as in C.
fn nearest_int(x: f32) -> i32 {
    let shifted = x + 12_582_912.0;
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The 6-bit scale and min of sub-block `j` from the 12 packed bytes of Q4_K/Q5_K.
fn scale_min(packed: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (packed[j] & 63, packed[j + 4] & 63)
    } else {
        (
            (packed[j + 4] & 15) | ((packed[j - 4] >> 6) << 4),
            (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins: the low 6 bits of sub-blocks 0–3 in bytes 0–7, the low
/// nibbles of 4–7 in bytes 8–11, and their top two bits in the spare top bits of bytes 0–7.
fn pack_scale_min(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    packed[..4].copy_from_slice(&scales[..4]);
    packed[4..8].copy_from_slice(&mins[..4]);
    for j in 4..8 {
        packed[j + 4] = (scales[j] & 15) | ((mins[j] & 15) << 4);
        packed[j - 4] |= (scales[j] >> 4) << 6;
        packed[j] |= (mins[j] >> 4) << 6;
    }
    packed
}

/// Decodes a Q4_K/Q5_K block given each element's code: `x = (d·sc)·q − dmin·m`.
fn dequantize_affine_block(b: &[u8], code: impl Fn(usize, usize) -> u8, y: &mut [f32]) {
    let d = load_f16(b);
    let dmin = load_f16(&b[2..]);
    for j in 0..8 {
        let (sc, m) = scale_min(&b[4..16], j);
        let scale = d * f32::from(sc);
        let min = dmin * f32::from(m);
        for l in 0..32 {
            y[32 * j + l] = scale * f32::from(code(j, l)) - min;
        }
    }
}

/// Low 4 bits of element `32j + l`: a nibble of `qs[32·(j/2) + l]`, low for even j.
fn low_nibble(qs: &[u8], j: usize, l: usize) -> u8 {
    (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15
}

pub fn dequantize_q4_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
        let qs = &b[16..];
        dequantize_affine_block(b, |j, l| low_nibble(qs, j, l), y);
    }
}

pub fn dequantize_q5_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(176).zip(out.chunks_exact_mut(QK_K)) {
        let (qh, qs) = (&b[16..48], &b[48..]);
        let code = |j, l| low_nibble(qs, j, l) | (((qh[l] >> j) & 1) << 4);
        dequantize_affine_block(b, code, y);
    }
}

/// The 6-bit codes (0..63) of a Q6_K block. In half h (128 elements), quarter k (32 each),
/// lane l: the low 4 bits are a nibble of `ql[64h + 32·(k%2) + l]` (the high one for k ≥ 2),
/// the top 2 bits are bits 2k..2k+1 of `qh[32h + l]`.
fn unpack_q6(ql: &[u8], qh: &[u8]) -> [u8; QK_K] {
    let mut codes = [0u8; QK_K];
    for (h, half) in codes.chunks_exact_mut(128).enumerate() {
        let (ql, qh) = (&ql[64 * h..64 * (h + 1)], &qh[32 * h..32 * (h + 1)]);
        for (k, quarter) in half.chunks_exact_mut(32).enumerate() {
            let low = &ql[32 * (k % 2)..];
            for (l, code) in quarter.iter_mut().enumerate() {
                *code = ((low[l] >> (4 * (k / 2))) & 15) | (((qh[l] >> (2 * k)) & 3) << 4);
            }
        }
    }
    codes
}

pub fn dequantize_q6_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
        let d = load_f16(&b[208..]);
        let codes = unpack_q6(&b[..128], &b[128..192]);
        for ((y, codes), &sc) in y
            .chunks_exact_mut(16)
            .zip(codes.chunks_exact(16))
            .zip(&b[192..208])
        {
            let scale = d * f32::from(sc as i8);
            for (y, &q) in y.iter_mut().zip(codes) {
                *y = scale * f32::from(q as i8 - 32);
            }
        }
    }
}

/// The candidate scales `make_qkx2_quants` sweeps: `(nmax + rmin + rdelta·i) / range`, i ∈ 0..=steps.
#[derive(Clone, Copy)]
struct ScaleSweep {
    rmin: f32,
    rdelta: f32,
    steps: i32,
}

/// Codes in 0..=nmax for `x ≈ scale·q − min` (min ≥ 0 returned as a positive number), by
/// weighted least squares over the candidate scales of `sweep` (ggml's `make_qkx2_quants`).
/// Returns (scale, min) and writes the codes.
fn fit_affine_codes(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    sweep: ScaleSweep,
    codes: &mut [u8],
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let code_at = |iscale: f32, min: f32, v: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let weighted_error = |scale: f32, min: f32, codes: &[u8]| {
        let mut error = 0.0f32;
        for ((&v, &w), &q) in x.iter().zip(weights).zip(codes.iter()) {
            let diff = scale * f32::from(q) + min - v;
            error += w * (diff * diff);
        }
        error
    };

    let nmax_f = nmax as f32;
    let iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    for (q, &v) in codes.iter_mut().zip(x) {
        *q = code_at(iscale, min, v) as u8;
    }
    let mut best_error = weighted_error(scale, min, codes);

    let mut candidate = [0u8; 32];
    let candidate = &mut candidate[..x.len()];
    for step in 0..=sweep.steps {
        let iscale = (sweep.rmin + sweep.rdelta * step as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((q, &v), &w) in candidate.iter_mut().zip(x).zip(weights) {
            let l = code_at(iscale, min, v);
            *q = l as u8;
            let l = l as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let error = weighted_error(this_scale, this_min, candidate);
            if error < best_error {
                codes.copy_from_slice(candidate);
                best_error = error;
                scale = this_scale;
                // The sweep continues around the improved min, as ggml's does.
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Symmetric codes `l + nmax` with l in −nmax..nmax for `x ≈ scale·l`, choosing among 19
/// scales around `−nmax / max` the one that maximises the x²-weighted fit (ggml's
/// `make_qx_quants` with rmse_type 1 and no importance weights). Returns the scale.
fn fit_symmetric_codes(x: &[f32], nmax: i32, codes: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let fit = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let store = |iscale: f32, codes: &mut [u8]| {
        for (q, &v) in codes.iter_mut().zip(x) {
            *q = (level(iscale, v) + nmax) as u8;
        }
    };

    let nmax_f = nmax as f32;
    let iscale = -nmax_f / max;
    store(iscale, codes);
    let (sumlx, suml2) = fit(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for step in (-9..=9).filter(|&s| s != 0) {
        let iscale = -(nmax_f + 0.1 * step as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            store(iscale, codes);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// One quantized Q4_K/Q5_K block before bit packing.
struct AffineBlock {
    d: u16,
    dmin: u16,
    scales: [u8; 12],
    codes: [u8; QK_K],
}

fn quantize_affine_block(x: &[f32], nmax: i32, sweep: ScaleSweep) -> AffineBlock {
    let mut codes = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut weights = [0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * (j + 1)];
        let sum_x2 = xs.iter().fold(0.0f32, |acc, v| acc + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let sub_codes = &mut codes[32 * j..32 * (j + 1)];
        (scales[j], mins[j]) = fit_affine_codes(xs, &weights, nmax, sweep, sub_codes);
    }
    let max_scale = scales
        .iter()
        .fold(0.0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0.0f32, |m, &s| if s > m { s } else { m });

    // 6-bit multiples of the largest; ggml converts to u8 before capping, so wrap the same way.
    let six_bit = |v: f32, max: f32| {
        let inv = if max > 0.0 { 63.0 / max } else { 0.0 };
        (nearest_int(inv * v) as u8).min(63)
    };
    let ls: [u8; 8] = std::array::from_fn(|j| six_bit(scales[j], max_scale));
    let lm: [u8; 8] = std::array::from_fn(|j| six_bit(mins[j], max_min));
    let d = f32_to_f16_bits(max_scale / 63.0);
    let dmin = f32_to_f16_bits(max_min / 63.0);

    // Requantize against the scales as stored; a sub-block whose scale rounds to 0 keeps its
    // codes from the fit (they decode to −min either way).
    for j in 0..8 {
        let scale = f16_bits_to_f32(d) * f32::from(ls[j]);
        if scale == 0.0 {
            continue;
        }
        let min = f16_bits_to_f32(dmin) * f32::from(lm[j]);
        for (q, &v) in codes[32 * j..32 * (j + 1)].iter_mut().zip(&x[32 * j..]) {
            *q = nearest_int((v + min) / scale).clamp(0, nmax) as u8;
        }
    }
    AffineBlock {
        d,
        dmin,
        scales: pack_scale_min(&ls, &lm),
        codes,
    }
}

fn store_affine_header(block: &AffineBlock, b: &mut [u8]) {
    b[0..2].copy_from_slice(&block.d.to_le_bytes());
    b[2..4].copy_from_slice(&block.dmin.to_le_bytes());
    b[4..16].copy_from_slice(&block.scales);
}

/// Packs 4-bit codes: pair p of sub-blocks (2p, 2p+1) shares bytes `qs[32p..32p+32]`.
fn pack_low_nibbles(codes: &[u8; QK_K], qs: &mut [u8]) {
    for p in 0..4 {
        for l in 0..32 {
            qs[32 * p + l] = (codes[64 * p + l] & 15) | ((codes[64 * p + 32 + l] & 15) << 4);
        }
    }
}

const Q4_K_SWEEP: ScaleSweep = ScaleSweep {
    rmin: -1.0,
    rdelta: 0.1,
    steps: 20,
};
const Q5_K_SWEEP: ScaleSweep = ScaleSweep {
    rmin: -0.5,
    rdelta: 0.1,
    steps: 15,
};

pub fn quantize_q4_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(144)) {
        let block = quantize_affine_block(x, 15, Q4_K_SWEEP);
        store_affine_header(&block, b);
        pack_low_nibbles(&block.codes, &mut b[16..]);
    }
}

pub fn quantize_q5_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(176)) {
        let block = quantize_affine_block(x, 31, Q5_K_SWEEP);
        store_affine_header(&block, b);
        let qh = &mut b[16..48];
        qh.fill(0);
        for (e, &q) in block.codes.iter().enumerate() {
            qh[e % 32] |= (q >> 4) << (e / 32);
        }
        pack_low_nibbles(&block.codes, &mut b[48..]);
    }
}

fn pack_q6_codes(codes: &[u8; QK_K], ql: &mut [u8], qh: &mut [u8]) {
    ql.fill(0);
    qh.fill(0);
    for (e, &q) in codes.iter().enumerate() {
        let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
        ql[64 * h + l + 32 * (k % 2)] |= (q & 15) << (4 * (k / 2));
        qh[32 * h + l] |= (q >> 4) << (2 * k);
    }
}

pub fn quantize_q6_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(210)) {
        let mut codes = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
        for (ib, scale) in scales.iter_mut().enumerate() {
            let range = 16 * ib..16 * (ib + 1);
            *scale = fit_symmetric_codes(&x[range.clone()], 32, &mut codes[range]);
            if scale.abs() > max_abs {
                max_abs = scale.abs();
                max_scale = *scale;
            }
        }
        if max_abs < GROUP_MAX_EPS {
            b.fill(0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d = round_to_f16(1.0 / iscale);
        store_f16(&mut b[208..], 1.0 / iscale);
        for (j, &scale) in scales.iter().enumerate() {
            let sc = nearest_int(iscale * scale).min(127) as i8;
            b[192 + j] = sc as u8;
            let step = d * f32::from(sc);
            if step == 0.0 {
                continue;
            }
            for (q, &v) in codes[16 * j..16 * (j + 1)].iter_mut().zip(&x[16 * j..]) {
                *q = (nearest_int(v / step).clamp(-32, 31) + 32) as u8;
            }
        }
        let (ql, qh) = b[..192].split_at_mut(128);
        pack_q6_codes(&codes, ql, qh);
    }
}

// Random blocks: the caller fills the row with random bytes; these functions turn each block's
// random scale bytes into sane 6- or 8-bit scales (and mins that centre the codes), and set
// the f16 super-block scale to `d`. Codes stay uniformly random.

/// Sub-block scales 32..63 from the low 5 bits of a random byte: within 2× of each other.
fn random_scale(byte: u8) -> u8 {
    32 + (byte & 31)
}

/// For Q4_K/Q5_K with `dmin = ratio·d`: the 6-bit min that centres codes 0..=nmax under scale
/// `sc`, i.e. `dmin·m ≈ d·sc·nmax/2`.
fn centring_min(sc: u8, nmax: u8, ratio: u8) -> u8 {
    (f32::from(sc) * f32::from(nmax) / (2.0 * f32::from(ratio))).round() as u8
}

/// RMS of the decoded value at d = 1 over the random scales and codes.
fn affine_unit_rms(nmax: u8, ratio: u8) -> f32 {
    rms((0..32u8).flat_map(|byte| {
        let sc = random_scale(byte);
        let centre = f64::from(ratio) * f64::from(centring_min(sc, nmax, ratio));
        (0..=nmax).map(move |q| f64::from(sc) * f64::from(q) - centre)
    }))
}

/// `dmin = Q4_K_MIN_RATIO·d` keeps the centring min within 6 bits for scales up to 63.
pub const Q4_K_MIN_RATIO: u8 = 8;
pub const Q5_K_MIN_RATIO: u8 = 16;

pub fn q4_k_unit_rms() -> f32 {
    affine_unit_rms(15, Q4_K_MIN_RATIO)
}

pub fn q5_k_unit_rms() -> f32 {
    affine_unit_rms(31, Q5_K_MIN_RATIO)
}

/// Q6_K sub-block scales ±(64..127), sign and size from one random byte.
fn random_q6_scale(byte: u8) -> i8 {
    let magnitude = 64 + (byte & 63) as i8;
    if byte & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

pub fn q6_k_unit_rms() -> f32 {
    rms((0..=255u8).flat_map(|byte| {
        let sc = f64::from(random_q6_scale(byte));
        (-32..32).map(move |q| sc * f64::from(q))
    }))
}

fn fill_random_affine(d: f32, nmax: u8, ratio: u8, block_bytes: usize, out: &mut [u8]) {
    let header = [f16_bytes(d), f16_bytes(d * f32::from(ratio))].concat();
    // (scale, min) for each value of the 5 random bits `random_scale` uses
    let pairs: [(u8, u8); 32] = std::array::from_fn(|r| {
        let sc = random_scale(r as u8);
        (sc, centring_min(sc, nmax, ratio))
    });
    for b in out.chunks_exact_mut(block_bytes) {
        let pair = |j: usize| pairs[usize::from(b[4 + j] & 31)];
        let ls: [u8; 8] = std::array::from_fn(|j| pair(j).0);
        let lm: [u8; 8] = std::array::from_fn(|j| pair(j).1);
        b[..4].copy_from_slice(&header);
        b[4..16].copy_from_slice(&pack_scale_min(&ls, &lm));
    }
}

pub fn fill_random_q4_k(d: f32, out: &mut [u8]) {
    fill_random_affine(d, 15, Q4_K_MIN_RATIO, 144, out);
}

pub fn fill_random_q5_k(d: f32, out: &mut [u8]) {
    fill_random_affine(d, 31, Q5_K_MIN_RATIO, 176, out);
}

pub fn fill_random_q6_k(d: f32, out: &mut [u8]) {
    let d = f16_bytes(d);
    for b in out.chunks_exact_mut(210) {
        for s in &mut b[192..208] {
            *s = random_q6_scale(*s) as u8;
        }
        b[208..].copy_from_slice(&d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (0.49999997, 0),
            (-7.3, -7),
            (63.0, 63),
            (-128.0, -128),
            (4_194_303.0, 4_194_303),
        ];
        for (x, want) in cases {
            assert_eq!(nearest_int(x), want, "nearest_int({x})");
            assert_eq!(nearest_int(x), x.round_ties_even() as i32);
        }
    }

    #[test]
    fn packed_scales_and_mins_unpack_to_themselves() {
        let scales: [u8; 8] = [0, 63, 1, 62, 32, 31, 17, 63];
        let mins: [u8; 8] = [63, 0, 45, 2, 63, 16, 0, 33];
        let packed = pack_scale_min(&scales, &mins);
        for j in 0..8 {
            assert_eq!(scale_min(&packed, j), (scales[j], mins[j]), "sub-block {j}");
        }
    }

    #[test]
    fn q6_codes_pack_and_unpack_to_themselves() {
        let codes: [u8; QK_K] = std::array::from_fn(|e| ((e * 37 + 11) % 64) as u8);
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        pack_q6_codes(&codes, &mut ql, &mut qh);
        assert_eq!(unpack_q6(&ql, &qh), codes);
    }

    #[test]
    fn centring_mins_fit_in_six_bits() {
        for byte in 0..=255u8 {
            let sc = random_scale(byte);
            assert!(sc <= 63);
            assert!(centring_min(sc, 15, Q4_K_MIN_RATIO) <= 63);
            assert!(centring_min(sc, 31, Q5_K_MIN_RATIO) <= 63);
        }
    }

    #[test]
    fn affine_fit_reproduces_codes_that_are_already_on_a_grid() {
        // x = 0.5·q − 1 for codes 0..=15 is representable exactly: the fit must find it.
        let q: Vec<u8> = (0..32).map(|i| (i % 16) as u8).collect();
        let x: Vec<f32> = q.iter().map(|&q| 0.5 * f32::from(q) - 1.0).collect();
        let weights: Vec<f32> = x.iter().map(|v| 1.0 + v.abs()).collect();
        let mut codes = [0u8; 32];
        let (scale, min) = fit_affine_codes(&x, &weights, 15, Q4_K_SWEEP, &mut codes);
        for (i, &c) in codes.iter().enumerate() {
            // least squares in f32 over 32 points: error within a few ulps of 1
            assert!(
                (scale * f32::from(c) - min - x[i]).abs() < 1e-5,
                "element {i}"
            );
        }
    }
}
