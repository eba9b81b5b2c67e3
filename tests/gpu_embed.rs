//! The embedding lookup (wgsl/embed.wgsl) against the CPU dequantizer `fak::quant::dequantize` on
//! every type: ids read at an offset, repeated ids, ids past the table (zero rows), strided
//! outputs, tables split into row ranges (one larger than a 128 MiB binding); bad input refused.

use fak::gpu::kernels::embed::{Embed, EmbedIo, EmbedShape};
use fak::gpu::{Activations, GpuError, KernelPaths, StepBuffer, upload};
use fak::quant::GgmlType;
use fak_tests::embed::{look_up, random_ids, random_table};
use fak_tests::{gpu, poisoned_f32, rng};
use rand::Rng;

/// Steps of one token (decode), a few, and more than one workgroup row of a 64-element row.
const TOKEN_COUNTS: [u32; 3] = [1, 5, 64];

/// Row lengths per type: one block and a few; for F32/F16/BF16 odd lengths, whose rows start
/// mid-word and end inside a group of four.
fn col_counts(ty: GgmlType) -> [u64; 3] {
    let block = ty.block_elems();
    if block == 1 {
        [1, 37, 261]
    } else {
        [block, 3 * block, 5 * block]
    }
}

#[test]
fn every_type_looks_up_rows_like_the_cpu_dequantizer() {
    let ctx = gpu();
    let kernel = Embed::new(ctx, KernelPaths::FALLBACK).unwrap();
    let mut rng = rng(0xe4b0_0001);
    let rows = 300;
    for ty in Embed::TYPES {
        for cols in col_counts(ty) {
            let bytes = random_table(ty, rows, cols, rng.random());
            let shape = EmbedShape { ty, rows, cols };
            for n in TOKEN_COUNTS {
                let ids = random_ids(&mut rng, rows, n);
                look_up(ctx, &kernel, shape, &bytes, &ids, ctx.max_binding_size())
                    .output
                    .assert();
            }
        }
    }
}

#[test]
fn a_table_split_into_small_ranges_finds_rows_in_every_range() {
    let ctx = gpu();
    let kernel = Embed::new(ctx, KernelPaths::FALLBACK).unwrap();
    // F16 rows of 37 elements are 74 bytes: rows start at every even offset within a word, and a
    // 4 KiB binding holds 51 of them, so 257 rows make 6 ranges. (The 25 output rows must fit
    // such a binding too.)
    let shape = EmbedShape {
        ty: GgmlType::F16,
        rows: 257,
        cols: 37,
    };
    let bytes = random_table(shape.ty, shape.rows, shape.cols, 0xe4b0_0002);
    let ids: Vec<u32> = (0..shape.rows as u32)
        .rev()
        .step_by(13)
        .chain([300, u32::MAX, 50, 51, 52])
        .collect();
    let lookup = look_up(ctx, &kernel, shape, &bytes, &ids, 4 << 10);
    let ranges = lookup.ranges;
    assert!(ranges >= 5, "expected a split into ranges, got {ranges}");
    lookup.output.assert();
}

/// 128 MiB: lavapipe's binding limit, and the cap used on devices with larger bindings.
const SPLIT_BINDING: u64 = 128 << 20;

#[test]
fn a_table_larger_than_one_binding_is_split_into_row_ranges() {
    let ctx = gpu();
    let kernel = Embed::new(ctx, KernelPaths::FALLBACK).unwrap();
    let max_binding = ctx.max_binding_size().min(SPLIT_BINDING);
    // 300 000 Q8_0 rows of 448 elements (476 bytes) are 143 MB: two ranges.
    let shape = EmbedShape {
        ty: GgmlType::Q8_0,
        rows: 300_000,
        cols: 448,
    };
    let bytes = random_table(shape.ty, shape.rows, shape.cols, 0xe4b0_0003);
    let mut rng = rng(0xe4b0_0004);
    let mut ids = random_ids(&mut rng, shape.rows, 24);
    // Around the boundary of the first range, wherever it falls.
    let per_range = (max_binding / shape.ty.row_bytes(shape.cols).unwrap()) as u32;
    ids.extend([
        per_range - 2,
        per_range - 1,
        per_range,
        per_range + 1,
        299_999,
    ]);
    let lookup = look_up(ctx, &kernel, shape, &bytes, &ids, max_binding);
    let ranges = lookup.ranges;
    assert!(
        ranges >= 2,
        "expected a split into row ranges, got {ranges}"
    );
    lookup.output.assert();
}

#[test]
fn bad_shapes_and_token_counts_are_refused_before_any_gpu_work() {
    let ctx = gpu();
    let kernel = Embed::new(ctx, KernelPaths::FALLBACK).unwrap();
    let table = upload(ctx, "table", &[0u8; 4096]).unwrap();
    let ids = upload(ctx, "ids", &[0u8; 16]).unwrap();
    let out = poisoned_f32(ctx, "out", 1024);
    let step = StepBuffer::new(ctx);
    let io = |max_tokens, table_offset, ids_offset| EmbedIo {
        table: &table,
        table_offset,
        ids: &ids,
        ids_offset,
        out: Activations::contiguous(&out, 256),
        step: &step,
        max_tokens,
    };
    let bind =
        |ty, rows, cols, io: EmbedIo<'_>| kernel.bind(ctx, EmbedShape { ty, rows, cols }, &io);
    let shape_error = |r: Result<_, GpuError>| matches!(r, Err(GpuError::Shape { .. }));
    assert!(shape_error(bind(GgmlType::Q4_K, 4, 100, io(1, 0, 0))));
    // 16 rows of 256 Q8_0 are 4352 bytes, more than the table's 4096.
    assert!(shape_error(bind(GgmlType::Q8_0, 16, 256, io(1, 0, 0))));
    // ids hold 4 words: 5 tokens, or 4 from word 1, overrun them; out holds 4 rows of 256.
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(5, 0, 0))));
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(4, 0, 1))));
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(0, 0, 0))));
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(1, 2, 0))));
    assert!(shape_error(bind(GgmlType::Q8_0, 0, 256, io(1, 0, 0))));
    assert!(matches!(
        bind(GgmlType::Q2_K, 8, 256, io(1, 0, 0)),
        Err(GpuError::UnsupportedType { .. })
    ));
    let binding = bind(GgmlType::Q8_0, 8, 256, io(4, 32, 0)).unwrap();
    let mut refused = false;
    ctx.run_pass("refused", |pass| {
        refused = matches!(
            kernel.encode(pass, &binding, 5),
            Err(GpuError::Shape { .. })
        );
    })
    .unwrap();
    assert!(
        refused,
        "encode accepted more tokens than the binding was checked for"
    );
}
