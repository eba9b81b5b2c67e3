//! How a mat-vec's input vector is rounded before its dot products.
//!
//! fak's reference multiplies dequantized weights by f32 activations. ggml's CPU backend (what
//! the llama.cpp peer runs) does not: before a mat-mul it converts the activations to the
//! weight type's `vec_dot_type` (ggml-cpu.c `type_traits_cpu`) and takes integer or f16 dot
//! products against that. [`Activations::GgmlCpu`] rounds the input the same way, so the
//! reference can say whether a difference from llama.cpp is this rounding or something else:
//!
//! - F32 weights: the input as is.
//! - F16 weights: the input rounded to f16.
//! - Q4_0, Q5_0, Q8_0 weights: Q8_0 blocks of 32 as x86's `quantize_row_q8_0` (AVX2) writes
//!   them: `d = amax / 127` stored as f16, codes `round_ties_even(x · (127 / amax))`.
//! - Q2_K … Q6_K weights: Q8_K blocks of 256 as `quantize_row_q8_K_ref` writes them (x86 calls
//!   it directly): `iscale = −127 / max` where `max` is the signed element of largest
//!   magnitude, codes `min(127, round_ties_even(iscale · x))`, `d = 1 / iscale` kept in f32.
//!
//! [`Activations::Q8Blocks`] rounds the input as fak's own integer mat-vec path does
//! (`KernelPaths::int_dot`, wgsl/quantize_q8.wgsl; llama.cpp's CUDA `quantize_q8_1` rounds the
//! same way): for Q8_0, Q4_K, Q5_K and Q6_K weights, blocks of 32 with `d = amax / 127` in f32 and
//! codes `round_ties_even(x / d)` ([`q8_blocks`]); other types' inputs stay f32.
//!
//! [`Activations::F16Tiles`] rounds as the cooperative-matrix prefill mat-mul does
//! (wgsl/matmul_coop.wgsl): the input and the dequantized weight row both to f16 (round to
//! nearest even), products summed in more precision. It is the only mode that rounds the
//! weights too ([`Activations::rounds_weights`]).
//!
//! The dot product itself stays an f64 sum of `w · (code · d)`: ggml sums the integer products
//! exactly and scales them once per block, which differs from this only in the last bits.
//!
//! Attention rounds too, apart from the mat-vecs ([`AttentionRounding`]): fak's f16 path and
//! llama.cpp's default cache keep keys and values in f16 ([`AttentionRounding::F16Cache`]), and
//! ggml's CPU flash attention, for micro-batches under 64 rows, also rounds the query to f16 and
//! sums the weighted values in an f16 vector ([`AttentionRounding::GgmlFlashF16`]).

use crate::quant::GgmlType;
use half::f16;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// How the reference's attention rounds what it caches and how it sums (module docs;
/// serialized by [`AttentionRounding::NAMES`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionRounding {
    /// Keys and values cached in f32; scores, softmax and the weighted sum in f64.
    #[default]
    F32,
    /// Keys and values rounded to f16 as they are cached, the rest as [`AttentionRounding::F32`]:
    /// fak's f16 path (its f16 KV cache), and llama.cpp's f16 cache as ggml's CPU flash
    /// attention reads it for micro-batches of 64 rows or more (the tiled kernel: f32 query,
    /// f32 sums).
    F16Cache,
    /// The f16 cache, read as ggml's CPU flash attention does for micro-batches under 64 rows
    /// (the one-chunk kernel, `ggml_compute_forward_flash_attn_ext_f16_one_chunk`): the query
    /// rounded to f16 (the cache's `vec_dot_type`), an online softmax in f32, and the weighted
    /// sum of values kept in an f16 vector, rounded after every key (rescaled when the running
    /// maximum moves), divided by the sum of weights at the end ([`attend_ggml_flash_f16`]).
    GgmlFlashF16,
}

impl AttentionRounding {
    /// The names the harness accepts, in the order of the variants.
    pub const NAMES: [&'static str; 3] = ["f32", "f16-cache", "ggml-flash-f16"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f32" => Some(Self::F32),
            "f16-cache" => Some(Self::F16Cache),
            "ggml-flash-f16" => Some(Self::GgmlFlashF16),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => Self::NAMES[0],
            Self::F16Cache => Self::NAMES[1],
            Self::GgmlFlashF16 => Self::NAMES[2],
        }
    }

    /// `v` as the cache keeps it.
    pub fn cached(self, v: Vec<f32>) -> Vec<f32> {
        match self {
            Self::F32 => v,
            Self::F16Cache | Self::GgmlFlashF16 => {
                v.into_iter().map(|x| f16::from_f32(x).to_f32()).collect()
            }
        }
    }
}

/// One query head against its cached keys and values as ggml-cpu's one-chunk flash attention
/// computes it ([`AttentionRounding::GgmlFlashF16`]); `keys` and `values` hold f16 values.
pub fn attend_ggml_flash_f16(
    q: &[f32],
    keys: &[&[f32]],
    values: &[&[f32]],
    scale: f32,
) -> Vec<f32> {
    let q: Vec<f32> = q.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
    let dv = values.first().map_or(0, |v| v.len());
    let mut acc = vec![f16::ZERO; dv];
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    for (k, v) in keys.iter().zip(values) {
        let score = super::ops::dot(&q, k) as f32 * scale;
        let (mut rescale, mut weight) = (1f32, 1f32);
        if score > max {
            rescale = (max - score).exp();
            max = score;
            acc.iter_mut()
                .for_each(|a| *a = f16::from_f32(a.to_f32() * rescale));
        } else {
            weight = (score - max).exp();
        }
        acc.iter_mut()
            .zip(v.iter())
            .for_each(|(a, &x)| *a = f16::from_f32(x.mul_add(weight, a.to_f32())));
        sum = sum * rescale + weight;
    }
    let inverse = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    acc.iter().map(|a| a.to_f32() * inverse).collect()
}

/// Elements per Q8_0 block.
const Q8_0_BLOCK: usize = 32;
/// Elements per Q8_K block.
const Q8_K_BLOCK: usize = 256;

/// How the reference's mat-vecs see their input (serialized by [`Activations::NAMES`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activations {
    /// f32 as computed: fak's own numerics (the GPU engine's too).
    #[default]
    F32,
    /// Rounded to the weight type's `vec_dot_type` as ggml's CPU backend does (module docs).
    GgmlCpu,
    /// Rounded to 8-bit blocks of 32 as fak's integer mat-vec path does (module docs).
    Q8Blocks,
    /// Input and weights rounded to f16 as the cooperative-matrix mat-mul does (module docs).
    F16Tiles,
}

/// What ggml's CPU backend turns a mat-mul input into for weights of one type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DotInput {
    F32,
    F16,
    Q8_0,
    Q8K,
    Q8Blocks,
}

impl Activations {
    /// The names the harness accepts, in the order of the variants.
    pub const NAMES: [&'static str; 4] = ["f32", "ggml-cpu", "q8-blocks", "f16-tiles"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f32" => Some(Self::F32),
            "ggml-cpu" => Some(Self::GgmlCpu),
            "q8-blocks" => Some(Self::Q8Blocks),
            "f16-tiles" => Some(Self::F16Tiles),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => Self::NAMES[0],
            Self::GgmlCpu => Self::NAMES[1],
            Self::Q8Blocks => Self::NAMES[2],
            Self::F16Tiles => Self::NAMES[3],
        }
    }

    /// Whether the weights are rounded too (to f16, after dequantization).
    pub fn rounds_weights(self) -> bool {
        self == Self::F16Tiles
    }

    /// Whether inputs to weights of type `ty` can be rounded this way (`Err` says why not).
    pub fn check(self, ty: GgmlType) -> Result<(), String> {
        self.dot_input(ty).map(|_| ())
    }

    /// `x` as the dot products against weights of type `ty` see it. `ty` was [`check`]ed at load.
    ///
    /// [`check`]: Activations::check
    pub fn round<'x>(self, ty: GgmlType, x: &'x [f32]) -> Cow<'x, [f32]> {
        match self.dot_input(ty).expect("weight type checked at load") {
            DotInput::F32 => Cow::Borrowed(x),
            DotInput::F16 => Cow::Owned(x.iter().map(|&v| f16::from_f32(v).to_f32()).collect()),
            DotInput::Q8_0 => Cow::Owned(x.chunks(Q8_0_BLOCK).flat_map(q8_0_block).collect()),
            DotInput::Q8K => Cow::Owned(x.chunks(Q8_K_BLOCK).flat_map(q8_k_block).collect()),
            DotInput::Q8Blocks => {
                let (codes, scales) = q8_blocks(x);
                Cow::Owned(
                    codes
                        .iter()
                        .enumerate()
                        .map(|(i, &q)| f32::from(q) * scales[i / Q8_0_BLOCK])
                        .collect(),
                )
            }
        }
    }

    fn dot_input(self, ty: GgmlType) -> Result<DotInput, String> {
        use GgmlType as T;
        match (self, ty) {
            (Self::F32, _) | (Self::GgmlCpu, T::F32) => Ok(DotInput::F32),
            (Self::GgmlCpu, T::F16) => Ok(DotInput::F16),
            (Self::GgmlCpu, T::Q4_0 | T::Q5_0 | T::Q8_0) => Ok(DotInput::Q8_0),
            (Self::GgmlCpu, T::Q2_K | T::Q3_K | T::Q4_K | T::Q5_K | T::Q6_K) => Ok(DotInput::Q8K),
            (Self::GgmlCpu, _) => Err(format!(
                "ggml's CPU input rounding for {ty} weights is not emulated"
            )),
            (Self::Q8Blocks, T::Q8_0 | T::Q4_K | T::Q5_K | T::Q6_K) => Ok(DotInput::Q8Blocks),
            (Self::Q8Blocks, _) => Ok(DotInput::F32),
            (Self::F16Tiles, _) => Ok(DotInput::F16),
        }
    }
}

/// `x` (a whole number of blocks of 32) as fak's integer path quantizes it: per block,
/// `d = amax / 127` (f32) and codes `clamp(round_ties_even(x / d), −127, 127)`, all 0 where
/// `amax = 0`. Returns the codes and one scale per block. (The GPU's `x / d` may differ from
/// this correctly rounded division in the last bit, so a code can differ by one where `x / d`
/// lies within an ulp of a half.)
pub fn q8_blocks(x: &[f32]) -> (Vec<i8>, Vec<f32>) {
    let mut codes = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / Q8_0_BLOCK);
    for block in x.chunks(Q8_0_BLOCK) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        scales.push(d);
        codes.extend(block.iter().map(|&v| match d > 0.0 {
            true => (v / d).round_ties_even().clamp(-127.0, 127.0) as i8,
            false => 0,
        }));
    }
    (codes, scales)
}

/// One Q8_0 block as x86 `quantize_row_q8_0` (AVX2) writes it, decoded again.
fn q8_0_block(block: &[f32]) -> Vec<f32> {
    let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = f16::from_f32(amax / 127.0).to_f32();
    let inverse = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    block
        .iter()
        .map(|&v| (v * inverse).round_ties_even() * d)
        .collect()
}

/// One Q8_K block as `quantize_row_q8_K_ref` writes it, decoded again.
fn q8_k_block(block: &[f32]) -> Vec<f32> {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in block {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return vec![0.0; block.len()];
    }
    let iscale = -127.0 / max;
    let d = 1.0 / iscale;
    block
        .iter()
        .map(|&v| (iscale * v).round_ties_even().min(127.0) * d)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_tiles_round_every_types_input_to_nearest_f16_and_the_weights_too() {
        // 1 + 2^-12 is a quarter of an f16 step above 1, 0.1 is not an f16, 2^-20 is subnormal.
        let x = [1.0 + 1.0 / 4096.0, 0.1, -0.000_000_953_674_3, 1000.5];
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q4_K, GgmlType::Q8_0] {
            let y = Activations::F16Tiles.round(ty, &x);
            for (&a, &b) in x.iter().zip(y.iter()) {
                assert_eq!(b, f16::from_f32(a).to_f32(), "{ty}: {a}");
            }
            assert_eq!(y[0], 1.0, "{ty}: rounded to nearest");
        }
        assert!(Activations::F16Tiles.rounds_weights());
        assert!(!Activations::Q8Blocks.rounds_weights() && !Activations::F32.rounds_weights());
        assert_eq!(
            Activations::from_name("f16-tiles"),
            Some(Activations::F16Tiles)
        );
    }

    #[test]
    fn q8_0_codes_span_127_steps_of_the_f16_scale() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.5) * 0.37).collect();
        let y = Activations::GgmlCpu.round(GgmlType::Q8_0, &x);
        for (xb, yb) in x.chunks(32).zip(y.chunks(32)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = f16::from_f32(amax / 127.0).to_f32();
            for (&a, &b) in xb.iter().zip(yb) {
                let code = b / d;
                assert_eq!(code, code.round(), "{b} is a whole number of steps {d}");
                assert!(code.abs() <= 127.0);
                assert!((a - b).abs() <= 0.5 * d * 1.01, "{a} → {b}, step {d}");
            }
        }
    }

    #[test]
    fn q8_k_gives_the_largest_magnitude_127_codes() {
        let mut x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
            .collect();
        x[17] = -3.0;
        let y = Activations::GgmlCpu.round(GgmlType::Q4_K, &x);
        let d = 1.0 / (-127.0f32 / -3.0);
        assert_eq!(y[17], -127.0 * d, "the largest magnitude is code −127");
        for (&a, &b) in x.iter().zip(y.iter()) {
            assert!((a - b).abs() <= 0.5 * d.abs() * 1.01, "{a} → {b}");
        }
        assert_eq!(
            Activations::GgmlCpu
                .round(GgmlType::Q6_K, &[0.0; 256])
                .as_ref(),
            &[0.0; 256]
        );
    }

    #[test]
    fn q8_blocks_round_each_block_to_steps_of_its_largest_magnitude_over_127() {
        let mut x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.5) * 0.37).collect();
        x[32..].fill(0.0);
        let (codes, scales) = q8_blocks(&x);
        assert_eq!(scales[0], 20.5 * 0.37 / 127.0);
        assert_eq!(codes[0], -127, "the largest magnitude is code ±127");
        for (i, (&v, &q)) in x.iter().zip(&codes).enumerate() {
            let d = scales[i / 32];
            assert!(
                (v - f32::from(q) * d).abs() <= 0.5 * d * 1.0001,
                "{v} → {q}·{d}"
            );
        }
        // A block of zeros has scale 0 and codes 0; the rounding applies to the four K-quant
        // types and Q8_0 only.
        assert_eq!(scales[1], 0.0);
        assert!(codes[32..].iter().all(|&q| q == 0));
        let y = Activations::Q8Blocks.round(GgmlType::Q6_K, &x);
        assert_eq!(y[1], f32::from(codes[1]) * scales[0]);
        assert!(matches!(
            Activations::Q8Blocks.round(GgmlType::Q5_0, &x),
            Cow::Borrowed(_)
        ));
    }

    /// The one-chunk kernel keeps its running sum of values in f16: adding half an f16 step
    /// to 1 leaves 1 (ties to even), where the exact sum keeps it; an f16 cache rounds what it
    /// keeps and nothing else.
    #[test]
    fn ggml_flash_f16_accumulates_in_f16_and_the_cache_rounds_to_f16() {
        let half_step = 1.0 / 2048.0;
        let (k, v0, v1) = ([0f32], [1f32], [half_step]);
        let keys: [&[f32]; 2] = [&k, &k];
        let values: [&[f32]; 2] = [&v0, &v1];
        let flash = attend_ggml_flash_f16(&[1.0], &keys, &values, 1.0);
        assert_eq!(flash, [0.5], "(1 + 2^-11 rounded to 1) / 2");
        let exact = super::super::ops::attend(&[1.0], &keys, &values, 1.0);
        assert_eq!(exact, [(1.0 + half_step) / 2.0]);
        // A new running maximum rescales the sum first: weights 1 and e for scores 0 and 1.
        let (k1, v2) = ([1f32], [2f32]);
        let rising: [&[f32]; 2] = [&k, &k1];
        let flash = attend_ggml_flash_f16(&[1.0], &rising, &[&v0, &v2], 1.0)[0];
        let e = std::f32::consts::E;
        assert!(
            (flash - (1.0 + 2.0 * e) / (1.0 + e)).abs() < 2e-3,
            "{flash}"
        );
        let third = 1.0f32 / 3.0;
        assert_eq!(
            AttentionRounding::F16Cache.cached(vec![third]),
            [f16::from_f32(third).to_f32()]
        );
        assert_eq!(AttentionRounding::F32.cached(vec![third]), [third]);
        for name in AttentionRounding::NAMES {
            let rounding = AttentionRounding::from_name(name).unwrap();
            assert_eq!(rounding.name(), name);
            assert_eq!(serde_json::to_value(rounding).unwrap(), name);
        }
        for name in Activations::NAMES {
            let activations = Activations::from_name(name).unwrap();
            assert_eq!(serde_json::to_value(activations).unwrap(), name);
        }
    }

    #[test]
    fn f32_weights_and_f32_activations_leave_the_input_alone() {
        let x = [1.0f32 / 3.0; 32];
        assert!(matches!(
            Activations::GgmlCpu.round(GgmlType::F32, &x),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            Activations::F32.round(GgmlType::Q8_0, &x),
            Cow::Borrowed(_)
        ));
        let h = Activations::GgmlCpu.round(GgmlType::F16, &x);
        assert_eq!(h[0], f16::from_f32(1.0 / 3.0).to_f32());
        assert!(Activations::GgmlCpu.check(GgmlType::Q4_1).is_err());
    }
}
