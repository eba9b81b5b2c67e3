//! The dequantize kernel (wgsl/dequant.wgsl) against the CPU dequantizer `fak::quant::dequantize`
//! on every type: random blocks, extreme f16 scales, ragged shapes, and a tensor larger than one
//! binding, on every variant the device has.

use fak::gpu::kernels::dequant::{Dequant, DequantShape};
use fak::gpu::{GpuContext, GpuError, KernelPaths, read_back_f32, upload};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use fak_tests::dequant::{Scales, run_case};
use fak_tests::{assert_dequantized, gpu, poisoned_f32, rng, variants};

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
                let shape = DequantShape { ty, rows, row_len };
                run_case(ctx, &kernel, shape, scales, &mut rng).assert();
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
    let mut recorded = None;
    ctx.run_pass("split", |pass| {
        recorded = Some(kernel.encode(pass, &binding).unwrap());
    })
    .unwrap();
    // What the encode says it did: one dispatch per range, the tensor read, its values written.
    let recorded = recorded.unwrap();
    assert_eq!(recorded.dispatches, grids.len());
    assert_eq!(recorded.bytes.weights, bytes.len() as u64);
    assert_eq!(recorded.bytes.activations, 4 * n as u64);
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
