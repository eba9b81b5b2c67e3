// embed — out[t, :] = dequant(E[ids[ids_index + t], :]) for t < step.n_tokens (get_rows)
//
// Math: E is the embedding table, `vocab` rows of `cols` elements of one ggml type; each token's
// row is dequantized exactly as the dequant kernel does it (dequant_type.wgsl). An id ≥ vocab
// gives a row of zeros: nothing is read out of bounds (the host validates prompt ids; the argmax
// writes ids < vocab).
// bindings: 0 e (array<u32>, read: the GGUF blocks) · 1 ids (array<u32>, read) · 2 out
//           (array<f32>, read_write) · 3 params (uniform Params) · 4 step (uniform Step)
// dispatch: (ceil(cols / (4·WG)), n_tokens) workgroups; one invocation per 4 consecutive elements
//           of one token's row. A table larger than one binding is split into row ranges on the
//           host, one dispatch each: a dispatch writes the tokens whose id falls in its range, and
//           the first one also the zero rows of invalid ids.
// pipelines: one per ggml type: GGML_TYPE, BLOCK_ELEMS, BLOCK_BYTES (and WG).
// variants: one (no reduction, no subgroup or f16 use).
// requires: bytes.wgsl, blocks.wgsl, dequant_type.wgsl, step.wgsl.

struct Params {
    // Rows of the table in this range, the whole table's row count, and the range's first row.
    rows: u32,
    vocab: u32,
    first_row: u32,
    cols: u32,
    row_bytes: u32,
    // Byte offset of the range's first row inside the e binding.
    e_byte: u32,
    // Element index of token 0's id inside the ids binding.
    ids_index: u32,
    // Element index of out[0, 0] inside the out binding, and of out[1, 0] − out[0, 0].
    out_index: u32,
    out_stride: u32,
    // 1: this dispatch writes the zero rows of ids ≥ vocab.
    zero_invalid: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> e: array<u32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;

override WG: u32 = 64u;
override GGML_TYPE: u32;
override BLOCK_ELEMS: u32 = 1u;
override BLOCK_BYTES: u32;

fn src_word(index: u32) -> u32 {
    return e[index];
}

@compute @workgroup_size(WG)
fn embed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let t = wg.y;
    let c = (wg.x * WG + local) * 4u;
    if t >= step.n_tokens || c >= params.cols {
        return;
    }
    let id = ids[params.ids_index + t];
    let at = params.out_index + t * params.out_stride + c;
    // Block types have whole blocks of ≥ 32 elements per row, so only unblocked rows end inside
    // a group of four.
    let count = min(4u, params.cols - c);
    if id >= params.vocab {
        if params.zero_invalid != 0u {
            for (var i = 0u; i < count; i++) {
                out[at + i] = 0.0;
            }
        }
        return;
    }
    // Wraps to a huge value below the range, so one comparison tests both ends.
    let row = id - params.first_row;
    if row >= params.rows {
        return;
    }
    let base = params.e_byte + row * params.row_bytes;
    if BLOCK_ELEMS == 1u {
        for (var i = 0u; i < count; i++) {
            out[at + i] = dequant1(base, c + i);
        }
    } else {
        let v = dequant4(base + (c / BLOCK_ELEMS) * BLOCK_BYTES, c % BLOCK_ELEMS);
        out[at] = v.x;
        out[at + 1u] = v.y;
        out[at + 2u] = v.z;
        out[at + 3u] = v.w;
    }
}
