//! GGML block formats: the type table every other module dispatches on.
//!
//! Every tensor in a GGUF file carries its own `ggml_type`; a Q4_K_M file mixes F32 norms, Q4_K,
//! Q6_K and (for rows not a multiple of 256) Q5_0/Q8_0 fallbacks, so nothing here assumes one type
//! per model. Geometry follows gguf-py's `GGML_QUANT_SIZES` (model-spec.md §1.3).
//!
//! The CPU codecs live one family per module: [`float`] (F32, F16, BF16), [`legacy`] (the
//! 32-element Q4_0…Q8_0) and [`kquant`] (Q4_K, Q5_K, Q6_K). This module dispatches on the type:
//! [`dequantize_into`], [`quantize`] (rows in parallel) and [`fill_random_rows`] (random blocks
//! for synthetic models). Other known types return [`QuantError::Unsupported`].

pub mod float;
pub mod kquant;
pub mod legacy;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rayon::prelude::*;
use std::fmt;

/// A ggml tensor type id as stored in GGUF tensor infos.
///
/// Types the engine can only *measure* (size a tensor, skip it) are listed too, so a file that
/// contains e.g. an IQ4_XS tensor parses and the error comes later, naming the tensor and type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

impl GgmlType {
    /// Every type id this table knows, in id order.
    pub const ALL: [GgmlType; 32] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// The type for a raw id from a file, or `None` for ids ggml never assigned (or retired).
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u32 == id)
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// (elements per block, bytes per block), as gguf-py's `GGML_QUANT_SIZES`.
    pub const fn block_geometry(self) -> (u64, u64) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q8_1 => (32, 36),
            Self::Q2_K => (256, 84),
            Self::Q3_K => (256, 110),
            Self::Q4_K => (256, 144),
            Self::Q5_K => (256, 176),
            Self::Q6_K => (256, 210),
            Self::Q8_K => (256, 292),
            Self::IQ2_XXS => (256, 66),
            Self::IQ2_XS => (256, 74),
            Self::IQ3_XXS => (256, 98),
            Self::IQ1_S => (256, 50),
            Self::IQ4_NL => (32, 18),
            Self::IQ3_S => (256, 110),
            Self::IQ2_S => (256, 82),
            Self::IQ4_XS => (256, 136),
            Self::I8 => (1, 1),
            Self::I16 => (1, 2),
            Self::I32 => (1, 4),
            Self::I64 => (1, 8),
            Self::F64 => (1, 8),
            Self::IQ1_M => (256, 56),
            Self::BF16 => (1, 2),
            Self::TQ1_0 => (256, 54),
            Self::TQ2_0 => (256, 66),
            Self::MXFP4 => (32, 17),
        }
    }

    pub const fn block_elems(self) -> u64 {
        self.block_geometry().0
    }

    pub const fn block_bytes(self) -> u64 {
        self.block_geometry().1
    }

    /// Bytes of one row of `ne0` elements, or `None` when `ne0` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, ne0: u64) -> Option<u64> {
        let (elems, bytes) = self.block_geometry();
        if !ne0.is_multiple_of(elems) {
            return None;
        }
        (ne0 / elems).checked_mul(bytes)
    }

    /// The name ggml and gguf-py print (`Q4_K`, `BF16`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::Q8_K => "Q8_K",
            Self::IQ2_XXS => "IQ2_XXS",
            Self::IQ2_XS => "IQ2_XS",
            Self::IQ3_XXS => "IQ3_XXS",
            Self::IQ1_S => "IQ1_S",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ3_S => "IQ3_S",
            Self::IQ2_S => "IQ2_S",
            Self::IQ4_XS => "IQ4_XS",
            Self::I8 => "I8",
            Self::I16 => "I16",
            Self::I32 => "I32",
            Self::I64 => "I64",
            Self::F64 => "F64",
            Self::IQ1_M => "IQ1_M",
            Self::BF16 => "BF16",
            Self::TQ1_0 => "TQ1_0",
            Self::TQ2_0 => "TQ2_0",
            Self::MXFP4 => "MXFP4",
        }
    }

    /// Parses a type name as printed by [`GgmlType::name`], case-insensitively.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An operation on block data, named in [`QuantError::Unsupported`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum QuantOp {
    Dequantize,
    Quantize,
    FillRandom,
}

impl fmt::Display for QuantOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Dequantize => "dequantization",
            Self::Quantize => "quantization",
            Self::FillRandom => "random block generation",
        })
    }
}

/// A request the block codecs cannot serve; every message names the type and the sizes.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("{op} of {ty} tensors is not supported")]
    Unsupported { ty: GgmlType, op: QuantOp },
    #[error("{ty}: {n_elements} elements are not a whole number of {block_elems}-element blocks")]
    PartialBlock {
        ty: GgmlType,
        n_elements: usize,
        block_elems: usize,
    },
    #[error("{ty}: {n_elements} elements take {expected} bytes, got {actual}")]
    Length {
        ty: GgmlType,
        n_elements: usize,
        expected: usize,
        actual: usize,
    },
    #[error(
        "{ty}: row length {row_len} is not a positive multiple of the {block_elems}-element block"
    )]
    RowLength {
        ty: GgmlType,
        row_len: usize,
        block_elems: usize,
    },
    #[error("{ty}: {len} source values are not a whole number of {row_len}-element rows")]
    SourceLength {
        ty: GgmlType,
        len: usize,
        row_len: usize,
    },
    #[error("{ty}: {n_rows} rows of {row_len} elements do not fit in memory")]
    TooLarge {
        ty: GgmlType,
        row_len: usize,
        n_rows: usize,
    },
    #[error("{ty}: cannot quantize the non-finite value {value} at row {row}, column {col}")]
    NonFinite {
        ty: GgmlType,
        row: usize,
        col: usize,
        value: f32,
    },
    #[error(
        "{ty}: random blocks need a finite standard deviation >= 0 whose scales fit the format, got {std}"
    )]
    BadStd { ty: GgmlType, std: f32 },
}

/// RMS of a set of equally likely values: how the random generator sizes its scales.
fn rms(values: impl Iterator<Item = f64>) -> f32 {
    let (n, sum) = values.fold((0.0, 0.0), |(n, s), v| (n + 1.0, s + v * v));
    (sum / n).sqrt() as f32
}

/// What the random-block generator needs to know about a format.
struct RandomFill {
    /// RMS of the decoded values when the format's scale parameter `d` is 1.
    unit_rms: fn() -> f32,
    /// The largest `d` whose derived fields (f16 scales and mins) all stay finite.
    max_scale: f32,
    /// Rewrites a row of random bytes in place so it decodes with scale `d`: the scale fields
    /// become sane values, the codes stay random.
    fill: fn(f32, &mut [u8]),
}

/// The three operations on one block format; each works on any run of whole blocks.
struct Codec {
    dequantize: fn(&[u8], &mut [f32]),
    quantize: fn(&[f32], &mut [u8]),
    /// Block formats cannot store NaN or ±Inf; F32/F16/BF16 convert them like any value.
    needs_finite: bool,
    random: RandomFill,
}

const F16_MAX: f32 = 65504.0;

fn codec(ty: GgmlType) -> Option<&'static Codec> {
    use GgmlType as T;
    const fn one() -> f32 {
        1.0
    }
    const fn float(
        dequantize: fn(&[u8], &mut [f32]),
        quantize: fn(&[f32], &mut [u8]),
        max_value: f32,
        fill: fn(f32, &mut [u8]),
    ) -> Codec {
        Codec {
            dequantize,
            quantize,
            needs_finite: false,
            // uniform values reach √3·std
            random: RandomFill {
                unit_rms: one,
                max_scale: max_value / 1.75,
                fill,
            },
        }
    }
    const fn block(
        dequantize: fn(&[u8], &mut [f32]),
        quantize: fn(&[f32], &mut [u8]),
        unit_rms: fn() -> f32,
        min_ratio: f32,
        fill: fn(f32, &mut [u8]),
    ) -> Codec {
        Codec {
            dequantize,
            quantize,
            needs_finite: true,
            random: RandomFill {
                unit_rms,
                max_scale: F16_MAX / min_ratio,
                fill,
            },
        }
    }
    static F32: Codec = float(
        float::dequantize_f32,
        float::quantize_f32,
        f32::MAX,
        float::fill_random_f32,
    );
    static F16: Codec = float(
        float::dequantize_f16,
        float::quantize_f16,
        F16_MAX,
        float::fill_random_f16,
    );
    // bf16's largest finite value is just under f32::MAX; stay clear of rounding up to Inf.
    static BF16: Codec = float(
        float::dequantize_bf16,
        float::quantize_bf16,
        3.0e38,
        float::fill_random_bf16,
    );
    static Q4_0: Codec = block(
        legacy::dequantize_q4_0,
        legacy::quantize_q4_0,
        legacy::q4_0_unit_rms,
        1.0,
        legacy::fill_random_q4_0,
    );
    // The min field of the offset formats holds −centre·d.
    static Q4_1: Codec = block(
        legacy::dequantize_q4_1,
        legacy::quantize_q4_1,
        legacy::q4_1_unit_rms,
        7.5,
        legacy::fill_random_q4_1,
    );
    static Q5_0: Codec = block(
        legacy::dequantize_q5_0,
        legacy::quantize_q5_0,
        legacy::q5_0_unit_rms,
        1.0,
        legacy::fill_random_q5_0,
    );
    static Q5_1: Codec = block(
        legacy::dequantize_q5_1,
        legacy::quantize_q5_1,
        legacy::q5_1_unit_rms,
        15.5,
        legacy::fill_random_q5_1,
    );
    static Q8_0: Codec = block(
        legacy::dequantize_q8_0,
        legacy::quantize_q8_0,
        legacy::q8_0_unit_rms,
        1.0,
        legacy::fill_random_q8_0,
    );
    static Q4_K: Codec = block(
        kquant::dequantize_q4_k,
        kquant::quantize_q4_k,
        kquant::q4_k_unit_rms,
        kquant::Q4_K_MIN_RATIO as f32,
        kquant::fill_random_q4_k,
    );
    static Q5_K: Codec = block(
        kquant::dequantize_q5_k,
        kquant::quantize_q5_k,
        kquant::q5_k_unit_rms,
        kquant::Q5_K_MIN_RATIO as f32,
        kquant::fill_random_q5_k,
    );
    static Q6_K: Codec = block(
        kquant::dequantize_q6_k,
        kquant::quantize_q6_k,
        kquant::q6_k_unit_rms,
        1.0,
        kquant::fill_random_q6_k,
    );
    Some(match ty {
        T::F32 => &F32,
        T::F16 => &F16,
        T::BF16 => &BF16,
        T::Q4_0 => &Q4_0,
        T::Q4_1 => &Q4_1,
        T::Q5_0 => &Q5_0,
        T::Q5_1 => &Q5_1,
        T::Q8_0 => &Q8_0,
        T::Q4_K => &Q4_K,
        T::Q5_K => &Q5_K,
        T::Q6_K => &Q6_K,
        _ => return None,
    })
}

fn supported(ty: GgmlType, op: QuantOp) -> Result<&'static Codec, QuantError> {
    codec(ty).ok_or(QuantError::Unsupported { ty, op })
}

/// (elements, bytes) per block as `usize`.
fn geometry(ty: GgmlType) -> (usize, usize) {
    let (elems, bytes) = ty.block_geometry();
    (elems as usize, bytes as usize)
}

/// Bytes of one row, or the error for a row length that is zero or not whole blocks.
fn row_bytes(ty: GgmlType, row_len: usize) -> Result<usize, QuantError> {
    let (elems, bytes) = geometry(ty);
    if row_len == 0 || !row_len.is_multiple_of(elems) {
        return Err(QuantError::RowLength {
            ty,
            row_len,
            block_elems: elems,
        });
    }
    Ok(row_len / elems * bytes)
}

pub fn can_dequantize(ty: GgmlType) -> bool {
    codec(ty).is_some()
}

pub fn can_quantize(ty: GgmlType) -> bool {
    codec(ty).is_some()
}

/// Checks that `n_bytes` is exactly the size of `n_elements` elements of `ty`.
fn check_size(ty: GgmlType, n_elements: usize, n_bytes: usize) -> Result<(), QuantError> {
    let (elems, block_bytes) = geometry(ty);
    if !n_elements.is_multiple_of(elems) {
        return Err(QuantError::PartialBlock {
            ty,
            n_elements,
            block_elems: elems,
        });
    }
    match (n_elements / elems).checked_mul(block_bytes) {
        Some(expected) if expected == n_bytes => Ok(()),
        expected => Err(QuantError::Length {
            ty,
            n_elements,
            expected: expected.unwrap_or(usize::MAX),
            actual: n_bytes,
        }),
    }
}

/// Dequantizes out.len() elements; bytes.len() must be exactly their size in `ty`.
///
/// Bit-identical to gguf-py's `gguf.quants.dequantize` (and ggml's reference dequantizers)
/// for every input, NaN and Inf scale fields included.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let codec = supported(ty, QuantOp::Dequantize)?;
    check_size(ty, out.len(), bytes.len())?;
    let (elems, block_bytes) = geometry(ty);
    // Chunks of whole blocks, large enough that rayon's overhead is noise.
    let chunk_blocks = (PARALLEL_CHUNK_ELEMS / elems).max(1);
    out.par_chunks_mut(chunk_blocks * elems)
        .zip(bytes.par_chunks(chunk_blocks * block_bytes))
        .for_each(|(out, bytes)| (codec.dequantize)(bytes, out));
    Ok(())
}

/// Elements per parallel dequantization task.
const PARALLEL_CHUNK_ELEMS: usize = 1 << 16;

pub fn dequantize(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>, QuantError> {
    // Checked before allocating: a hostile element count must not abort on allocation.
    supported(ty, QuantOp::Dequantize)?;
    check_size(ty, n_elements, bytes.len())?;
    let mut out = vec![0.0; n_elements];
    dequantize_into(ty, bytes, &mut out)?;
    Ok(out)
}

/// The first non-finite value, as an error naming its row and column. Rows are scanned in
/// parallel, each as one task (an element-wise parallel search costs more than quantizing).
fn check_finite(ty: GgmlType, src: &[f32], row_len: usize) -> Result<(), QuantError> {
    let bad = |v: &f32| !v.is_finite();
    let Some(row) = src
        .par_chunks(row_len)
        .position_first(|r| r.iter().any(bad))
    else {
        return Ok(());
    };
    let col = src[row * row_len..]
        .iter()
        .position(bad)
        .unwrap_or_default();
    Err(QuantError::NonFinite {
        ty,
        row,
        col,
        value: src[row * row_len + col],
    })
}

/// Quantizes rows of `row_len` elements (src.len() a multiple of it); rows in parallel.
///
/// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 and F16/BF16/F32 are bit-identical to gguf-py's
/// `gguf.quants.quantize` (ggml's reference quantizers); Q4_K/Q5_K/Q6_K run ggml's reference
/// scale search (what `llama-quantize` does without an importance matrix).
///
/// Block formats cannot represent NaN or ±Inf: such input is refused with
/// [`QuantError::NonFinite`] naming the first offending element, rather than silently
/// poisoning or zeroing its block. F32/F16/BF16 convert non-finite values as gguf-py does
/// (NaN stays NaN; BF16 forces it quiet).
pub fn quantize(ty: GgmlType, src: &[f32], row_len: usize) -> Result<Vec<u8>, QuantError> {
    let codec = supported(ty, QuantOp::Quantize)?;
    let row_bytes = row_bytes(ty, row_len)?;
    if !src.len().is_multiple_of(row_len) {
        return Err(QuantError::SourceLength {
            ty,
            len: src.len(),
            row_len,
        });
    }
    if codec.needs_finite {
        check_finite(ty, src, row_len)?;
    }
    let mut out = vec![0u8; src.len() / row_len * row_bytes];
    out.par_chunks_mut(row_bytes)
        .zip(src.par_chunks(row_len))
        .for_each(|(out, row)| (codec.quantize)(row, out));
    Ok(out)
}

/// Random blocks for `n_rows` rows of `row_len` elements, written into `out` (exactly their byte size).
///
/// No float weights and no search: random codes, with scale fields chosen so the decoded
/// values have about standard deviation `std` and mean 0 (F32/F16/BF16: uniform values).
/// Deterministic for a seed: row r comes from ChaCha8 keyed by `seed`, stream r, so the
/// result does not depend on thread count. Rows are filled in parallel.
pub fn fill_random_rows(
    ty: GgmlType,
    row_len: usize,
    n_rows: usize,
    std: f32,
    seed: u64,
    out: &mut [u8],
) -> Result<(), QuantError> {
    fill_random_rows_from(ty, row_len, 0, n_rows, std, seed, out)
}

/// [`fill_random_rows`] for rows `first_row..first_row + n_rows` of a larger tensor: a tensor
/// written in chunks this way is identical to one written in a single call.
pub fn fill_random_rows_from(
    ty: GgmlType,
    row_len: usize,
    first_row: u64,
    n_rows: usize,
    std: f32,
    seed: u64,
    out: &mut [u8],
) -> Result<(), QuantError> {
    let codec = supported(ty, QuantOp::FillRandom)?;
    let row_bytes = row_bytes(ty, row_len)?;
    let too_large = QuantError::TooLarge {
        ty,
        row_len,
        n_rows,
    };
    let expected = row_bytes.checked_mul(n_rows).ok_or(too_large)?;
    if out.len() != expected {
        return Err(QuantError::Length {
            ty,
            n_elements: row_len.saturating_mul(n_rows),
            expected,
            actual: out.len(),
        });
    }
    let random = &codec.random;
    let scale = std / (random.unit_rms)();
    // `!(a <= b)` also refuses NaN.
    if !(std >= 0.0 && scale <= random.max_scale) {
        return Err(QuantError::BadStd { ty, std });
    }
    out.par_chunks_mut(row_bytes)
        .enumerate()
        .for_each(|(r, row)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(first_row.wrapping_add(r as u64));
            rng.fill_bytes(row);
            (random.fill)(scale, row);
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_are_rejected() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        for retired in [4u32, 5, 31, 32, 33, 36, 40, u32::MAX] {
            assert_eq!(GgmlType::from_id(retired), None);
        }
    }

    #[test]
    fn row_bytes_requires_whole_blocks() {
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q4_K.row_bytes(500), None);
        assert_eq!(GgmlType::Q6_K.row_bytes(256), Some(210));
        assert_eq!(GgmlType::F32.row_bytes(3), Some(12));
        assert_eq!(GgmlType::F32.row_bytes(u64::MAX), None);
    }

    /// Every type with CPU codecs.
    const SUPPORTED: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    #[test]
    fn exactly_the_supported_types_have_codecs() {
        for ty in GgmlType::ALL {
            let want = SUPPORTED.contains(&ty);
            assert_eq!(can_dequantize(ty), want, "{ty}");
            assert_eq!(can_quantize(ty), want, "{ty}");
        }
    }

    #[test]
    fn zero_rows_quantize_and_dequantize_to_nothing() {
        for ty in SUPPORTED {
            assert!(quantize(ty, &[], 256).unwrap().is_empty(), "{ty}");
            assert!(dequantize(ty, &[], 0).unwrap().is_empty(), "{ty}");
            fill_random_rows(ty, 256, 0, 1.0, 7, &mut []).unwrap();
        }
    }

    #[test]
    fn all_zero_rows_round_trip_to_exact_zeros() {
        for ty in SUPPORTED {
            let bytes = quantize(ty, &[0.0; 512], 256).unwrap();
            let back = dequantize(ty, &bytes, 512).unwrap();
            assert!(back.iter().all(|&v| v == 0.0), "{ty}: {back:?}");
        }
    }

    #[test]
    fn constant_rows_round_trip_to_f16_precision() {
        for ty in SUPPORTED {
            // A constant lands on a code exactly; what is left is the f16 rounding of the stored
            // scale (2^-11 relative) plus f32 rounding: 2^-10 covers both. BF16 keeps 8
            // mantissa bits (2^-9 rounding): 2^-8.
            let tolerance = if ty == GgmlType::BF16 { 256.0 } else { 1024.0 };
            // Constants large enough that every scale field is a normal f16 (the K-quants divide
            // by up to 32·128): subnormal scales are coarser, in ggml as here.
            for c in [1.0f32, -0.37, 0.5, 1234.5] {
                let bytes = quantize(ty, &[c; 512], 256).unwrap();
                for v in dequantize(ty, &bytes, 512).unwrap() {
                    assert!(
                        (v - c).abs() <= c.abs() / tolerance,
                        "{ty}: {c} came back as {v}"
                    );
                }
            }
        }
    }

    #[test]
    fn float_formats_carry_nan_and_inf_through() {
        let src = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5];
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let back = dequantize(ty, &quantize(ty, &src, 4).unwrap(), 4).unwrap();
            assert!(back[0].is_nan(), "{ty}");
            assert_eq!(&back[1..], &src[1..], "{ty}");
        }
    }

    #[test]
    fn size_mismatches_are_errors_naming_type_and_sizes() {
        let mut out = [0.0f32; 256];
        let msg = dequantize_into(GgmlType::Q4_K, &[0; 143], &mut out)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("Q4_K") && msg.contains("144") && msg.contains("143"),
            "{msg}"
        );
        let msg = dequantize(GgmlType::Q8_0, &[0; 34], 33)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("Q8_0") && msg.contains("33") && msg.contains("32"),
            "{msg}"
        );
        let msg = quantize(GgmlType::Q6_K, &[0.0; 512], 100)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("Q6_K") && msg.contains("100"), "{msg}");
        let msg = quantize(GgmlType::Q6_K, &[0.0; 300], 256)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("300") && msg.contains("256"), "{msg}");
        assert!(quantize(GgmlType::F32, &[], 0).is_err());
        let msg = fill_random_rows(GgmlType::Q5_K, 256, 2, 1.0, 0, &mut [0; 176])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("Q5_K") && msg.contains("352") && msg.contains("176"),
            "{msg}"
        );
        // A hostile element count is refused before anything is allocated.
        assert!(dequantize(GgmlType::F32, &[0; 4], usize::MAX / 2).is_err());
    }

    fn mean_and_std(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        (mean, var.sqrt())
    }

    fn random_rows(ty: GgmlType, n_rows: usize, std: f32, seed: u64) -> Vec<u8> {
        let mut out = vec![0u8; ty.row_bytes(1024).unwrap() as usize * n_rows];
        fill_random_rows(ty, 1024, n_rows, std, seed, &mut out).unwrap();
        out
    }

    #[test]
    fn random_rows_decode_to_the_requested_std_with_zero_mean() {
        for ty in SUPPORTED {
            for std in [0.02f32, 1.0] {
                let values = dequantize(ty, &random_rows(ty, 64, std, 11), 64 * 1024).unwrap();
                assert!(
                    values.iter().all(|v| v.is_finite()),
                    "{ty}: non-finite value"
                );
                let (mean, got) = mean_and_std(&values);
                // 65536 samples: sampling error of the std is ~1% even with per-block scales;
                // 3% allows that and the f16 rounding of the scales.
                assert!(
                    (got / f64::from(std) - 1.0).abs() < 0.03,
                    "{ty}: std {got}, want {std}"
                );
                assert!(mean.abs() < 0.03 * f64::from(std), "{ty}: mean {mean}");
            }
        }
    }

    #[test]
    fn random_rows_depend_only_on_seed_and_row() {
        for ty in SUPPORTED {
            let a = random_rows(ty, 8, 0.1, 5);
            assert_eq!(a, random_rows(ty, 8, 0.1, 5), "{ty}: not deterministic");
            assert_ne!(a, random_rows(ty, 8, 0.1, 6), "{ty}: seed ignored");
            // Rows 3..8 written as a separate chunk equal the same rows of the one-shot fill.
            let row = a.len() / 8;
            let mut tail = vec![0u8; 5 * row];
            fill_random_rows_from(ty, 1024, 3, 5, 0.1, 5, &mut tail).unwrap();
            assert_eq!(tail, a[3 * row..], "{ty}: chunked fill differs");
        }
    }

    #[test]
    fn random_rows_with_zero_std_decode_to_zeros() {
        for ty in SUPPORTED {
            let values = dequantize(ty, &random_rows(ty, 2, 0.0, 1), 2048).unwrap();
            assert!(values.iter().all(|&v| v == 0.0), "{ty}");
        }
    }

    #[test]
    fn random_rows_refuse_a_std_the_format_cannot_hold() {
        for ty in SUPPORTED {
            let mut out = vec![0u8; ty.row_bytes(256).unwrap() as usize];
            for std in [f32::NAN, -1.0, f32::INFINITY] {
                let msg = fill_random_rows(ty, 256, 1, std, 0, &mut out)
                    .unwrap_err()
                    .to_string();
                assert!(msg.contains(ty.name()), "{msg}");
            }
        }
        let mut out = vec![0u8; 34];
        assert!(fill_random_rows(GgmlType::Q8_0, 32, 1, 1e7, 0, &mut out).is_err());
    }
}
