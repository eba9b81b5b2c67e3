//! The embedding lookup (wgsl/embed.wgsl) against the CPU dequantizer `fak::quant::dequantize`:
//! the GPU test (tests/gpu_embed.rs) asserts its cases, `harness selftest` reports them
//! (`report`).

use super::compare::{Bound, Output};
use super::poisoned_f32;
use fak::gpu::kernels::embed::{Embed, EmbedIo, EmbedShape};
use fak::gpu::{Activations, GpuContext, Step, StepBuffer, read_back_f32, upload};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use rand::Rng;

/// The table starts this far into its buffer (GGUF's tensor-data alignment).
const TABLE_OFFSET: u64 = 32;
/// Token 0's id sits this many words into the ids buffer.
const IDS_OFFSET: u64 = 3;

/// A random table of `rows` × `cols` of `ty`, as GGUF stores it.
pub fn random_table(ty: GgmlType, rows: u64, cols: u64, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; (ty.row_bytes(cols).unwrap() * rows) as usize];
    fill_random_rows(ty, cols as usize, rows as usize, 1.0, seed, &mut bytes).unwrap();
    bytes
}

/// `n` random ids below `rows`, with a repeat, the first and last rows, and two ids past the
/// table (`rows` itself and u32::MAX) where there is room.
pub fn random_ids(rng: &mut impl Rng, rows: u64, n: u32) -> Vec<u32> {
    let last = rows as u32 - 1;
    let mut ids: Vec<u32> = (0..n).map(|_| rng.random_range(0..=last)).collect();
    let special = [0, last, rows as u32, u32::MAX, ids[0]];
    for (slot, id) in ids.iter_mut().skip(1).zip(special) {
        *slot = id;
    }
    ids
}

/// What a lookup gave.
pub struct Lookup {
    /// The rows against the CPU dequantizer's (zeros for ids ≥ rows).
    pub output: Output,
    /// How many row ranges (dispatches) the table was split into.
    pub ranges: usize,
}

/// Looks `ids` up in the table `bytes` (of `shape`) with bindings of at most `max_binding`
/// bytes, into an output with padded rows (poisoned first; everything outside the rows must stay
/// poisoned).
pub fn look_up(
    ctx: &GpuContext,
    kernel: &Embed,
    shape: EmbedShape,
    bytes: &[u8],
    ids: &[u32],
    max_binding: u64,
) -> Lookup {
    let EmbedShape { ty, rows, cols } = shape;
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
    let inside = |i: u64| i >= offset && (i - offset) % stride < cols;
    let (mut rows_got, mut wrote_outside) = (Vec::new(), false);
    for (i, &v) in got.iter().enumerate() {
        if inside(i as u64) {
            rows_got.push(v);
        } else {
            wrote_outside |= !v.is_nan();
        }
    }
    let row_bytes = ty.row_bytes(cols).unwrap() as usize;
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&id| {
            if u64::from(id) < rows {
                let at = id as usize * row_bytes;
                dequantize(ty, &bytes[at..at + row_bytes], cols as usize).unwrap()
            } else {
                vec![0.0; cols as usize]
            }
        })
        .collect();
    Lookup {
        output: Output {
            part: "",
            what: format!("{ty} {rows}x{cols}, {n} tokens"),
            got: rows_got,
            want,
            bound: Bound::Dequantized(ty),
            wrote_outside,
        },
        ranges: binding.range_count(),
    }
}
