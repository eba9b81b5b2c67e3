//! Seeded weights. Every row of every tensor draws from its own ChaCha stream, keyed by
//! (seed, tensor name, row), so a value depends on nothing else: not the thread count, not the
//! chunking, not whether the GGUF writer or the Hugging Face export asked for it.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use rayon::prelude::*;

/// Standard deviation of the noise on RMSNorm gains around 1: trained gains are far from
/// constant, and a gain applied to the wrong channel must change the output measurably.
pub const NORM_GAIN_NOISE: f32 = 0.1;

/// How a tensor's initial float values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// An RMSNorm gain: 1 + N(0, NORM_GAIN_NOISE²).
    NormGain,
    /// N(0, std²): projections use std = 1/√fan_in (unit-variance outputs for unit inputs).
    Normal { std: f32 },
    /// A Gated DeltaNet decay rate as the GGUF stores it, `ssm_a` = −exp(A_log), with
    /// A_log ~ N(DECAY_LOG_MEAN, DECAY_LOG_STD²).
    NegExp,
}

/// A_log's distribution: rates exp(A_log) from about 0.03 to 2 (±2σ), so that with
/// softplus(α + dt_bias) ≈ 1 some heads forget within a token and others remember for dozens —
/// both the decay and the carried state are exercised.
pub const DECAY_LOG_MEAN: f32 = -1.5;
pub const DECAY_LOG_STD: f32 = 1.0;

impl Init {
    /// The projection scale for a linear map reading `fan_in` inputs.
    pub fn projection(fan_in: u64) -> Self {
        Init::Normal {
            std: (fan_in as f32).sqrt().recip(),
        }
    }
}

/// Separates the float stream from the fast-random block stream of the same tensor.
#[derive(Clone, Copy)]
#[repr(u64)]
enum Stream {
    Floats = 0x666c_6f61_7473, // "floats"
    Blocks = 0x626c_6f63_6b73, // "blocks"
}

fn rng(stream: Stream, seed: u64, tensor: &str, index: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&fnv1a64(tensor.as_bytes()).to_le_bytes());
    key[16..24].copy_from_slice(&index.to_le_bytes());
    key[24..].copy_from_slice(&(stream as u64).to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

/// FNV-1a: a stable (toolchain-independent) hash of the tensor name for the stream key.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Fills `out` (whole rows of `row_len`) with rows `first_row..` of `tensor`'s values.
pub fn fill_rows(
    init: Init,
    seed: u64,
    tensor: &str,
    first_row: u64,
    row_len: usize,
    out: &mut [f32],
) {
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(i, row)| {
            let mut rng = rng(Stream::Floats, seed, tensor, first_row + i as u64);
            let (mean, std) = match init {
                Init::NormGain => (1.0, NORM_GAIN_NOISE),
                Init::Normal { std } => (0.0, std),
                Init::NegExp => (DECAY_LOG_MEAN, DECAY_LOG_STD),
            };
            for x in row {
                *x = mean + std * rng.sample::<f32, _>(StandardNormal);
                if init == Init::NegExp {
                    *x = -x.exp();
                }
            }
        });
}

/// The seed `fak::quant::fill_random_rows_from` gets for `tensor`'s random blocks.
pub fn block_seed(seed: u64, tensor: &str) -> u64 {
    rng(Stream::Blocks, seed, tensor, 0).random()
}
