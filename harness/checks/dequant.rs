//! The dequantize kernel (wgsl/dequant.wgsl) against the CPU dequantizer
//! `fak::quant::dequantize`: the GPU test (tests/gpu_dequant.rs) asserts its cases, `harness
//! selftest` reports them (`report`).

use super::compare::{Bound, Output};
use super::poisoned_f32;
use fak::gpu::kernels::dequant::{Dequant, DequantShape};
use fak::gpu::{GpuContext, GpuError, read_back_f32, upload};
use fak::quant::{GgmlType, dequantize};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// How the f16 scale fields of random blocks are drawn.
#[derive(Clone, Copy, Debug)]
pub enum Scales {
    /// Any finite f16 bit pattern: normals of every exponent, subnormals, zeros.
    AnyFinite,
    /// Only the edges: the smallest subnormals, random subnormals, ±0 and ±65504.
    Extreme,
}

fn f16_scale(rng: &mut ChaCha8Rng, scales: Scales) -> u16 {
    match scales {
        Scales::AnyFinite => loop {
            let bits: u16 = rng.random();
            if bits & 0x7c00 != 0x7c00 {
                return bits;
            }
        },
        Scales::Extreme => {
            let sign = if rng.random() { 0x8000 } else { 0 };
            sign | match rng.random_range(0..4) {
                0 => 0x0001,
                1 => rng.random_range(0x0001..0x0400),
                2 => 0x0000,
                _ => 0x7bff,
            }
        }
    }
}

/// Byte offsets of the f16 scale fields inside one block (model-spec.md §2).
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// `n` elements of `ty` as random GGUF bytes: every code bit random, scale fields (and plain
/// elements) finite, drawn per `scales`.
fn random_tensor(ty: GgmlType, n: usize, scales: Scales, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let (elems, block_bytes) = ty.block_geometry();
    let mut bytes = vec![0u8; n / elems as usize * block_bytes as usize];
    rng.fill(&mut bytes[..]);
    match ty {
        GgmlType::F32 => {
            for v in bytes.chunks_exact_mut(4) {
                let bits = u32::from_le_bytes(v.try_into().unwrap());
                // An all-ones exponent is Inf/NaN: clear one exponent bit. Subnormals stay.
                let bits = if bits & 0x7f80_0000 == 0x7f80_0000 {
                    bits & !0x0080_0000
                } else {
                    bits
                };
                v.copy_from_slice(&bits.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for v in bytes.chunks_exact_mut(2) {
                v.copy_from_slice(&f16_scale(rng, scales).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for v in bytes.chunks_exact_mut(2) {
                let bits = u16::from_le_bytes([v[0], v[1]]);
                let bits = if bits & 0x7f80 == 0x7f80 {
                    bits & !0x0080
                } else {
                    bits
                };
                v.copy_from_slice(&bits.to_le_bytes());
            }
        }
        _ => {
            for block in bytes.chunks_exact_mut(block_bytes as usize) {
                for &at in scale_fields(ty) {
                    block[at..at + 2].copy_from_slice(&f16_scale(rng, scales).to_le_bytes());
                }
            }
        }
    }
    bytes
}

/// Dequantizes `bytes` (rows × row_len of `ty`) on the GPU into a NaN-poisoned buffer.
fn run(
    ctx: &GpuContext,
    kernel: &Dequant,
    shape: DequantShape,
    bytes: &[u8],
    max_binding: u64,
) -> Result<Vec<f32>, GpuError> {
    let n = shape.rows * shape.row_len;
    let src = upload(ctx, "dequant src", bytes)?;
    let dst = poisoned_f32(ctx, "dequant dst", n);
    let binding = kernel.bind_within(ctx, shape, &src, &dst, max_binding)?;
    ctx.run_pass("dequant", |pass| kernel.encode(pass, &binding))?;
    read_back_f32(ctx, &dst, 0..4 * n)
}

/// A random tensor of `shape` (scales drawn per `scales`) dequantized on the GPU against the
/// CPU dequantizer.
pub fn run_case(
    ctx: &GpuContext,
    kernel: &Dequant,
    shape: DequantShape,
    scales: Scales,
    rng: &mut ChaCha8Rng,
) -> Output {
    let DequantShape { ty, rows, row_len } = shape;
    let n = (rows * row_len) as usize;
    let bytes = random_tensor(ty, n, scales, rng);
    Output {
        part: "",
        what: format!("{ty} {rows}x{row_len} {scales:?} ({})", kernel.variant()),
        got: run(ctx, kernel, shape, &bytes, ctx.max_binding_size()).unwrap(),
        want: dequantize(ty, &bytes, n).unwrap(),
        bound: Bound::Dequantized(ty),
        wrote_outside: false,
    }
}
