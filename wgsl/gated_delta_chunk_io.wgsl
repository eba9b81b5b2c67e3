// gated_delta_chunk_io — what the two kernels of the chunked delta rule share: the f32 kernel
// (gated_delta_chunk.wgsl) and its cooperative-matrix variant (gated_delta_chunk_coop.wgsl)
//
// Everything that says where a chunk's rows, gates, state and outputs are lives here, so that a
// change of the batch layout (sequences.wgsl: per-sequence rows and slots, lead rows, the
// mid-step snapshot of one sequence) applies to both kernels: the bindings but the scratch
// (whose element types differ), Params, the chunk grid of a sequence (`chunks`, `chunk_of`,
// `live`), the gates and γ, the chunk after which the snapshot is taken, the state rows of a
// chunk_scan workgroup, and the in-place inverse T = (I + A)⁻¹ of chunk_prepare.
//
// bindings: 0 mixed (array<f32>, read: [n_tokens][conv_dim] after delta_prep: q̂, k̂, v heads)
//           · 1 gates (array<f32>, read: [n_tokens][2·nv], β then g) · 2 seqs (Sequences, read)
//           · 4 state (array<f32>, read_write: [slots][nv][dv][dk]) · 5 o (array<f32>,
//           read_write: [n_tokens][nv·dv]) · 6 params (uniform Params). Binding 3 (and 7) are
//           the kernel's.
// requires: sequences.wgsl; from the kernel: `override DK`, `STATE_STRIDE` (the row stride of
//           state_sh), `override STATE_FLOATS`, `AP` (the row stride of a_sh) and
//           `var<workgroup> a_sh` (CHUNK × AP floats).

struct Params {
    conv_dim: u32,
    nk: u32,
    nv: u32,
    dv: u32,
    group_div: u32,
    // Offsets of the scratch regions, in elements of the buffer each lives in (the kernels'
    // headers say which).
    w_at: u32,
    u_at: u32,
    p_at: u32,
    gamma_at: u32,
    q_at: u32,
    k_at: u32,
    pad0: u32,
}

@group(0) @binding(0) var<storage, read> mixed: array<f32>;
@group(0) @binding(1) var<storage, read> gates: array<f32>;
@group(0) @binding(2) var<storage, read> seqs: Sequences;
@group(0) @binding(4) var<storage, read_write> state: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

// Chunk rows. (Not `C`: that name is a cooperative-matrix role.)
const CHUNK: u32 = 64u;
// chunk_scan: state rows per workgroup and invocations.
const ROWS: u32 = 16u;
const SCAN_WG: u32 = 128u;

var<workgroup> gamma_sh: array<f32, CHUNK>;
var<workgroup> beta_sh: array<f32, CHUNK>;
var<workgroup> state_sh: array<f32, STATE_FLOATS>;

// Where one chunk of one head sits: its activation rows and its scratch block.
struct Chunk {
    // Activation row of chunk row 0 (wrapping u32 arithmetic: for the first chunk with lead
    // rows it may lie before the sequence; only rows from `first` on are read).
    row0: u32,
    // Valid rows are first ≤ t < n (the rest is padding).
    first: u32,
    n: u32,
    block: u32,
    // Column of the key head's q̂ and k̂ in a mixed row.
    q_col: u32,
    k_col: u32,
}

// Chunks of sequence s (its lead rows included).
fn chunks(s: u32) -> u32 {
    return (seqs.seq[s].len + seqs.seq[s].lead + CHUNK - 1u) / CHUNK;
}

fn chunk_of(c: u32, h: u32, s: u32) -> Chunk {
    let e = seqs.seq[s];
    let lead = e.lead;
    let kh = (h / params.group_div) % params.nk;
    return Chunk(e.start + c * CHUNK - lead, select(0u, lead, c == 0u),
                 min(CHUNK, e.len + lead - c * CHUNK), (e.chunk0 + c) * params.nv + h, kh * DK,
                 (params.nk + kh) * DK);
}

// How chunk_prepare's workgroups map to heads (override; `FAK_GDN_CHUNK=…+keyheads+…`): 0, one
// per value head (grid y = nv); 1, one per key head (grid y = nk), which computes the chunk's Gram
// matrices K·Kᵀ and Q·Kᵀ once — they read the key head alone; β and γ, the value head's, enter
// after — and then finishes A, T, W, U, P for each of the nv / nk value heads that read it, in
// turn.
override PREP_KEY_HEADS: u32 = 0u;

// Value heads a chunk_prepare workgroup finishes.
fn prep_heads() -> u32 {
    return select(1u, params.nv / params.nk, PREP_KEY_HEADS == 1u);
}

// The m-th value head of chunk_prepare workgroup row y (its grid's y): y itself, or with
// PREP_KEY_HEADS the m-th of those that read key head y — κ(h) = (h / group_div) mod nk = y for
// h = ((m / group_div)·nk + y)·group_div + m mod group_div, m < nv / nk (tiled heads, group_div 1:
// y, y + nk, …; grouped, group_div = nv / nk: y·group_div + m).
fn prep_head(y: u32, m: u32) -> u32 {
    let d = params.group_div;
    return select(y, ((m / d) * params.nk + y) * d + m % d, PREP_KEY_HEADS == 1u);
}

// Whether chunk row t is a row of the sequence (not padding).
fn live(ch: Chunk, t: u32) -> bool {
    return ch.first <= t && t < ch.n;
}

// Column of value head h's v in a mixed row.
fn v_col(h: u32) -> u32 {
    return 2u * params.nk * DK + h * params.dv;
}

fn gate(row: u32, h: u32, which: u32) -> f32 {
    return gates[row * 2u * params.nv + which * params.nv + h];
}

// Loads γ (and β) of the chunk into workgroup memory: the cumulative sum runs on one invocation,
// 64 adds. Needs at least CHUNK invocations.
fn load_gates(ch: Chunk, h: u32, tid: u32) {
    if tid < CHUNK {
        var beta = 0.0;
        var g = 0.0;
        if live(ch, tid) {
            beta = gate(ch.row0 + tid, h, 0u);
            g = gate(ch.row0 + tid, h, 1u);
        }
        beta_sh[tid] = beta;
        gamma_sh[tid] = g;
    }
    workgroupBarrier();
    if tid == 0u {
        var acc = 0.0;
        for (var t = 0u; t < CHUNK; t++) {
            acc += gamma_sh[t];
            gamma_sh[t] = acc;
        }
    }
    workgroupBarrier();
}

// How invert_unit_lower goes (override; `FAK_GDN_CHUNK=…+columns`, `…+blocks`): 0, row by row,
// two workgroup barriers a row (126 in a full chunk); 1, each column on its own invocation; 2, by
// block rows of INV_BLOCK rows, two steps each (17 barriers in all).
override INVERSE: u32 = 0u;

// Rows of a block row of invert_by_blocks (divides CHUNK).
const INV_BLOCK: u32 = 8u;

// T = (I + A)⁻¹ in place of the strictly lower A in a_sh: T_tj = −(A_tj + Σ_{j<s<t} A_ts T_sj)
// for j < t, the unit diagonal implicit. Row t needs only rows < t; rows at or past the chunk's
// `n` are zero in A and stay zero in T, so the loop stops there (`n` is the workgroup's). Every
// form computes every T_tj with the same fmas in the same order (bit for bit the same T); a_sh's
// upper triangle (zero before, since A is strictly lower) is zero after. Needs 256 invocations.
fn invert_unit_lower(n: u32, tid: u32) {
    if INVERSE == 2u {
        invert_by_blocks(n, tid);
    } else if INVERSE == 1u {
        invert_by_columns(n, tid);
    } else {
        invert_by_rows(n, tid);
    }
}

// Column j of T on invocation j: T_tj for t = j + 1, … in turn from column j's earlier values,
// written transposed into the upper triangle at (j, t), where no other invocation reads or
// writes and A (the lower triangle) stays whole for every column; no invocation waits for
// another until T moves to the lower triangle. Column 0 is a chain of 1953 fmas on one
// invocation while the rest of the workgroup waits.
fn invert_by_columns(n: u32, tid: u32) {
    let j = tid;
    if j < n {
        for (var t = j + 1u; t < n; t++) {
            var acc = a_sh[t * AP + j];
            for (var s = j + 1u; s < t; s++) {
                acc = fma(a_sh[t * AP + s], a_sh[j * AP + s], acc);
            }
            a_sh[j * AP + t] = -acc;
        }
    }
    workgroupBarrier();
    move_to_lower(n, tid);
}

// The columns form with the serial part cut: T stays transposed at (j, t) until the end, and the
// block rows [r0, r0 + INV_BLOCK) go in turn, each in two steps —
// 1. every pair (t, j), j < t, of the block row on its own invocation (256 at a time): the part
//    of the sum over the earlier block rows, Y_tj = A_tj + Σ_{j<s<r0} A_ts T_sj (final values),
//    stored exactly (f32) at (j, t);
// 2. each column j < r0 + INV_BLOCK on its own invocation finishes the block's rows in turn:
//    T_tj = −(Y_tj + Σ_{max(r0, j+1) ≤ s < t} A_ts T_sj), the T_sj of the block its own.
// Each T_tj is A_tj plus the fmas of s = j + 1, …, t − 1 in that order, as in the other forms:
// bit for bit their T. The longest chain on one invocation is 479 fmas (1953 by columns), for 15
// barriers more.
fn invert_by_blocks(n: u32, tid: u32) {
    for (var r0 = 0u; r0 < CHUNK; r0 += INV_BLOCK) {
        let width = r0 + INV_BLOCK;
        // Pair e = j·INV_BLOCK + (t − r0): an invocation's pairs have columns 32 apart, so the
        // long sums (small j) spread over the workgroup.
        for (var e = tid; e < width * INV_BLOCK; e += 256u) {
            let t = r0 + e % INV_BLOCK;
            let j = e / INV_BLOCK;
            if j < t && t < n {
                var acc = a_sh[t * AP + j];
                for (var s = j + 1u; s < r0; s++) {
                    acc = fma(a_sh[t * AP + s], a_sh[j * AP + s], acc);
                }
                a_sh[j * AP + t] = acc;
            }
        }
        workgroupBarrier();
        let j = tid;
        if j < width {
            let s0 = max(r0, j + 1u);
            for (var t = s0; t < min(width, n); t++) {
                var acc = a_sh[j * AP + t];
                for (var s = s0; s < t; s++) {
                    acc = fma(a_sh[t * AP + s], a_sh[j * AP + s], acc);
                }
                a_sh[j * AP + t] = -acc;
            }
        }
        workgroupBarrier();
    }
    move_to_lower(n, tid);
}

// T from its transposed place (j, t) in the upper triangle to (t, j), the upper triangle zeroed.
fn move_to_lower(n: u32, tid: u32) {
    for (var e = tid; e < CHUNK * CHUNK; e += 256u) {
        let t = e / CHUNK;
        let jj = e % CHUNK;
        if jj < t && t < n {
            a_sh[t * AP + jj] = a_sh[jj * AP + t];
            a_sh[jj * AP + t] = 0.0;
        }
    }
    workgroupBarrier();
}

fn invert_by_rows(n: u32, tid: u32) {
    for (var t = 1u; t < n; t++) {
        var acc = 0.0;
        if tid < t {
            acc = a_sh[t * AP + tid];
            for (var s = tid + 1u; s < t; s++) {
                acc = fma(a_sh[t * AP + s], a_sh[s * AP + tid], acc);
            }
        }
        workgroupBarrier();
        if tid < t {
            a_sh[t * AP + tid] = -acc;
        }
        workgroupBarrier();
    }
}

// First float of value head h's state in a slot.
fn state_at(slot: u32, h: u32) -> u32 {
    return (slot * params.nv + h) * params.dv * DK;
}

// The chunk of sequence s after which its state is also its mid-step snapshot's (none: past
// its last chunk).
fn save_after(s: u32) -> u32 {
    let e = seqs.seq[s];
    return select(chunks(s), (e.lead + e.save_rows) / CHUNK - 1u, saves_midway(e));
}

// First float of value head h's state in sequence s's snapshot slot.
fn snapshot_at(s: u32, h: u32) -> u32 {
    return state_at(seqs.seq[s].save_slot, h);
}

// This workgroup's ROWS state rows (of value columns rows_tile·ROWS + r) from the slot at `at`
// into state_sh (zero past dv).
fn load_state(at: u32, rows_tile: u32, tid: u32) {
    for (var e = tid; e < ROWS * DK; e += SCAN_WG) {
        let j = rows_tile * ROWS + e / DK;
        var x = 0.0;
        if j < params.dv {
            x = state[at + j * DK + e % DK];
        }
        state_sh[(e / DK) * STATE_STRIDE + e % DK] = x;
    }
}

// This workgroup's ROWS state rows from workgroup memory to the slot at `at`.
fn store_state(at: u32, rows_tile: u32, tid: u32) {
    for (var e = tid; e < ROWS * DK; e += SCAN_WG) {
        let j = rows_tile * ROWS + e / DK;
        if j < params.dv {
            state[at + j * DK + e % DK] = state_sh[(e / DK) * STATE_STRIDE + e % DK];
        }
    }
}
