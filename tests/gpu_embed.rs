//! The embedding lookup (wgsl/embed.wgsl) against the CPU dequantizer `fak::quant::dequantize` on
//! every type: ids read at an offset, repeated ids, ids past the table (zero rows), strided
//! outputs, tables split into row ranges (one larger than a 128 MiB binding); bad input refused.

use fak::gpu::kernels::embed::{Embed, EmbedIo, EmbedShape};
use fak::gpu::{
    Activations, GpuContext, GpuError, KernelPaths, Step, StepBuffer, read_back_f32, upload,
};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use fak_tests::{Tolerance, assert_close, assert_dequantized, gpu, poisoned_f32, rng};
use rand::Rng;

/// The table starts this far into its buffer (GGUF's tensor-data alignment).
const TABLE_OFFSET: u64 = 32;
/// Token 0's id sits this many words into the ids buffer.
const IDS_OFFSET: u64 = 3;
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

fn random_table(ty: GgmlType, rows: u64, cols: u64, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; (ty.row_bytes(cols).unwrap() * rows) as usize];
    fill_random_rows(ty, cols as usize, rows as usize, 1.0, seed, &mut bytes).unwrap();
    bytes
}

/// Looks `ids` up in the table `bytes` (rows × cols of `ty`) with bindings of at most
/// `max_binding` bytes; returns the rows as written, `n` rows of `cols` taken out of an output
/// with padded rows, and the number of row ranges the table was split into. Elements of the
/// output outside those rows are checked to stay poisoned.
fn look_up(
    ctx: &GpuContext,
    kernel: &Embed,
    shape: EmbedShape,
    bytes: &[u8],
    ids: &[u32],
    max_binding: u64,
) -> (Vec<f32>, usize) {
    let EmbedShape { cols, .. } = shape;
    let n = ids.len() as u32;
    let mut table = vec![0u8; TABLE_OFFSET as usize];
    table.extend_from_slice(bytes);
    let table = upload(ctx, "table", &table).unwrap();
    let mut id_words = vec![u32::MAX; IDS_OFFSET as usize];
    id_words.extend_from_slice(ids);
    let ids_buffer = upload(ctx, "ids", bytemuck::cast_slice(&id_words)).unwrap();
    let (offset, stride) = (1, cols + 2);
    let out_len = offset + u64::from(n) * stride;
    let out = poisoned_f32(ctx, "out", out_len);
    let step = StepBuffer::new(ctx);
    step.set(ctx, Step::new(0, n, 0));
    let io = EmbedIo {
        table: &table,
        table_offset: TABLE_OFFSET,
        ids: &ids_buffer,
        ids_offset: IDS_OFFSET,
        out: Activations {
            buffer: &out,
            offset,
            stride,
        },
        step: &step,
        max_tokens: n,
    };
    let binding = kernel.bind_within(ctx, shape, &io, max_binding).unwrap();
    ctx.run_pass("embed", |pass| kernel.encode(pass, &binding, n).unwrap())
        .unwrap();
    let got = read_back_f32(ctx, &out, 0..4 * out_len).unwrap();
    let mut rows = Vec::new();
    for (i, &v) in got.iter().enumerate() {
        let i = i as u64;
        let inside = i >= offset && (i - offset) % stride < cols;
        if inside {
            rows.push(v);
        } else {
            assert!(
                v.is_nan(),
                "{shape:?}: element {i} outside the rows was written"
            );
        }
    }
    (rows, binding.range_count())
}

/// Each token's row against the CPU dequantizer's row of its id (zeros for ids ≥ rows).
fn check(what: &str, shape: EmbedShape, bytes: &[u8], ids: &[u32], got: &[f32]) {
    let EmbedShape { ty, rows, cols } = shape;
    let row_bytes = ty.row_bytes(cols).unwrap() as usize;
    for (t, (&id, got)) in ids.iter().zip(got.chunks(cols as usize)).enumerate() {
        let what = format!("{what}, token {t} id {id}");
        if u64::from(id) < rows {
            let at = id as usize * row_bytes;
            let want = dequantize(ty, &bytes[at..at + row_bytes], cols as usize).unwrap();
            assert_dequantized(&what, ty, got, &want);
        } else {
            assert_close(&what, got, &vec![0.0; cols as usize], Tolerance::EXACT);
        }
    }
}

/// `n` random ids below `rows`, with a repeat, the first and last rows, and two ids past the
/// table (`rows` itself and u32::MAX) where there is room.
fn random_ids(rng: &mut impl Rng, rows: u64, n: u32) -> Vec<u32> {
    let last = rows as u32 - 1;
    let mut ids: Vec<u32> = (0..n).map(|_| rng.random_range(0..=last)).collect();
    let special = [0, last, rows as u32, u32::MAX, ids[0]];
    for (slot, id) in ids.iter_mut().skip(1).zip(special) {
        *slot = id;
    }
    ids
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
                let (got, _) = look_up(ctx, &kernel, shape, &bytes, &ids, ctx.max_binding_size());
                check(
                    &format!("{ty} {rows}x{cols}, {n} tokens"),
                    shape,
                    &bytes,
                    &ids,
                    &got,
                );
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
    let (got, ranges) = look_up(ctx, &kernel, shape, &bytes, &ids, 4 << 10);
    assert!(ranges >= 5, "expected a split into ranges, got {ranges}");
    check("F16 257x37 split", shape, &bytes, &ids, &got);
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
    let (got, ranges) = look_up(ctx, &kernel, shape, &bytes, &ids, max_binding);
    assert!(
        ranges >= 2,
        "expected a split into row ranges, got {ranges}"
    );
    check("Q8_0 300000x448 split", shape, &bytes, &ids, &got);
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
