//! The dequantize kernel (wgsl/dequant.wgsl) against the CPU dequantizer `fak::quant::dequantize`
//! on every type: random blocks, extreme f16 scales, ragged shapes, and a tensor larger than one
//! binding, on every variant the device has.

use fak::gpu::kernels::dequant::{Dequant, DequantShape};
use fak::gpu::{GpuContext, GpuError, KernelPaths, read_back_f32, upload};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use fak_tests::{assert_dequantized, gpu, poisoned_f32, rng, variants};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// How the f16 scale fields of random blocks are drawn.
#[derive(Clone, Copy, Debug)]
enum Scales {
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

/// Shapes (rows, row_len) per type: ragged row counts; one block, several and an odd number of
/// blocks per row; for unblocked types row lengths that are not multiples of 4.
fn shapes(ty: GgmlType) -> Vec<(u64, u64)> {
    let block = ty.block_elems();
    if block == 1 {
        vec![(1, 1), (1, 3), (5, 37), (3, 1001)]
    } else {
        vec![(1, block), (3, 5 * block), (17, 2 * block)]
    }
}

fn check_every_type(ctx: &GpuContext, scales: Scales, seed: u64) {
    let mut rng = rng(seed);
    for paths in variants::<Dequant>(ctx) {
        let kernel = Dequant::new(ctx, paths).unwrap();
        for ty in Dequant::TYPES {
            for (rows, row_len) in shapes(ty) {
                let n = (rows * row_len) as usize;
                let bytes = random_tensor(ty, n, scales, &mut rng);
                let want = dequantize(ty, &bytes, n).unwrap();
                let shape = DequantShape { ty, rows, row_len };
                let got = run(ctx, &kernel, shape, &bytes, ctx.max_binding_size()).unwrap();
                let what = format!("{ty} {rows}x{row_len} {scales:?} ({})", kernel.variant());
                assert_dequantized(&what, ty, &got, &want);
            }
        }
    }
}

#[test]
fn every_type_matches_the_cpu_dequantizer_on_random_blocks_and_ragged_shapes() {
    check_every_type(gpu(), Scales::AnyFinite, 0xdec0_0001);
}

#[test]
fn subnormal_zero_and_largest_f16_scales_decode_like_the_cpu() {
    check_every_type(gpu(), Scales::Extreme, 0xdec0_0002);
}

/// 128 MiB: lavapipe's binding limit, and the cap used on devices with larger bindings so the test
/// splits (and stays affordable) everywhere.
const SPLIT_BINDING: u64 = 128 << 20;

#[test]
fn a_tensor_larger_than_one_binding_is_split_into_row_ranges() {
    let ctx = gpu();
    let max_binding = ctx.max_binding_size().min(SPLIT_BINDING);
    // Q8_0 rows of 4192 elements are 4454 bytes, not a multiple of any binding alignment, so the
    // later ranges start mid-window; the f32 output is 1.3 bindings.
    let ty = GgmlType::Q8_0;
    let row_len = 4192u64;
    let rows = (max_binding / 4 * 13 / 10).div_ceil(row_len);
    let n = (rows * row_len) as usize;
    let mut bytes = vec![0u8; ty.row_bytes(row_len).unwrap() as usize * rows as usize];
    fill_random_rows(
        ty,
        row_len as usize,
        rows as usize,
        1.0,
        0xdec0_0003,
        &mut bytes,
    )
    .unwrap();
    let want = dequantize(ty, &bytes, n).unwrap();
    let kernel = Dequant::new(ctx, KernelPaths::FALLBACK).unwrap();
    let shape = DequantShape { ty, rows, row_len };

    let src = upload(ctx, "split src", &bytes).unwrap();
    let dst = poisoned_f32(ctx, "split dst", n as u64);
    let binding = kernel
        .bind_within(ctx, shape, &src, &dst, max_binding)
        .unwrap();
    let grids: Vec<_> = binding.grids().collect();
    assert!(
        grids.len() >= 2,
        "expected a split into row ranges, got {grids:?}"
    );
    assert!(
        grids.iter().any(|g| g.y > 1),
        "expected a 2-D grid past 65535 workgroups, got {grids:?}"
    );
    ctx.run_pass("split", |pass| kernel.encode(pass, &binding))
        .unwrap();
    let got = read_back_f32(ctx, &dst, 0..4 * n as u64).unwrap();
    assert_dequantized(
        &format!("{ty} {rows}x{row_len} split {} ways", grids.len()),
        ty,
        &got,
        &want,
    );
}

#[test]
fn bad_shapes_and_types_are_refused_before_any_gpu_work() {
    let ctx = gpu();
    let kernel = Dequant::new(ctx, KernelPaths::FALLBACK).unwrap();
    let src = upload(ctx, "bad src", &[0u8; 1024]).unwrap();
    let dst = poisoned_f32(ctx, "bad dst", 256);
    let bind = |ty, rows, row_len| kernel.bind(ctx, DequantShape { ty, rows, row_len }, &src, &dst);
    assert!(matches!(
        bind(GgmlType::Q4_K, 1, 100),
        Err(GpuError::Shape { .. })
    ));
    // 2 Q4_0 rows of 256 fit the 1024 source bytes, but their 2048 output bytes do not fit dst.
    assert!(matches!(
        bind(GgmlType::Q4_0, 2, 256),
        Err(GpuError::Shape { .. })
    ));
    assert!(matches!(
        bind(GgmlType::Q8_0, 100, 32),
        Err(GpuError::Shape { .. })
    ));
    assert!(matches!(
        bind(GgmlType::Q2_K, 1, 256),
        Err(GpuError::UnsupportedType { .. })
    ));
    assert!(bind(GgmlType::Q4_0, 1, 256).is_ok());
}
