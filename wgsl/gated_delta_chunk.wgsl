// gated_delta_chunk — the gated delta rule in its chunked form, for prefill (chunk C = 64)
//
// Math (model-spec.md §5.6), per sequence s (slot σ, its rows as sequences.wgsl says), value head h reading key head
// κ(h) = (h / group_div) mod nk, over chunks of C rows t of the sequence (the last chunk padded
// with q = k = v = 0, β = g = 0, which changes neither outputs nor state; so is the first when
// the table asks for `lead` zero rows before row 0, which puts a chunk boundary where a
// mid-step snapshot is taken: sequences.wgsl), S the state at the chunk's start (dk×dv, stored
// as dv rows of dk floats as gated_delta.wgsl keeps it):
//   γ_t = Σ_{r≤t} g_r;  Γ_ts = e^{γ_t − γ_s} for s ≤ t, else 0 (masked before exp: no overflow)
//   A_ts = β_t (k_t·k_s) Γ_ts for s < t;  T = (I + A)⁻¹ (unit lower triangular)
//   W = T diag(β e^γ) K,  U = T diag(β) V,  P = (Q Kᵀ) ⊙ Γ  (diagonal included)
//   V' = U − W S;  O = diag(e^γ) Q S + P V';  S ← e^{γ_C} S + (diag(e^{γ_C − γ}) K)ᵀ V'
//
// Two entry points, two dispatches per prefill whatever its length:
// - chunk_prepare: everything that depends on one chunk only (γ, A, T, W, U, P), for all chunks
//   and heads at once. One workgroup of 256 per (chunk, head, sequence): Gram matrices of K and
//   Q against K from 64×16 tiles in workgroup memory (4×4 outputs per invocation), A in
//   workgroup memory, T by forward substitution in place (row t needs only rows < t), then W and
//   U as T·R over column tiles of R. Writes W, U, P, γ to the scratch buffer.
// - chunk_scan: the part that is sequential over chunks, parallel over heads and state rows:
//   state columns evolve independently given W, K, γ (V'_{:,j} = U_{:,j} − W S_{:,j}), so one
//   workgroup of 128 owns ROWS = 16 state rows of one head in workgroup memory and walks the
//   chunks: V' and Q S over dk tiles (8 outputs per invocation), O from P V', then the state
//   update; it writes O and, at the end, the state (and, after the chunk that ends at the
//   table's save_rows, that state into the snapshot slot).
// The dispatch count is fixed; only the chunk_prepare grid grows with the token count.
//
// bindings: 0 mixed (array<f32>, read: [n_tokens][conv_dim] after delta_prep: q̂, k̂, v heads)
//           · 1 gates (array<f32>, read: [n_tokens][2·nv], β then g) · 2 seqs (Sequences, read)
//           · 3 scratch (array<f32>, read_write: W [blocks][C][dk] at w_at, U [blocks][C][dv] at
//           u_at, P [blocks][C][C] at p_at, γ [blocks][C] at gamma_at; block = (chunk0_s + c)·nv
//           + h) · 4 state (array<f32>, read_write: [slots][nv][dv][dk]) · 5 o (array<f32>,
//           read_write: [n_tokens][nv·dv]) · 6 params (uniform Params)
// dispatch: chunk_prepare (n_chunks, nv, count) × 256, n_chunks those of the longest sequence,
//           counted with room for C − 1 lead rows when count = 1 (chunks past a sequence's
//           return at once); chunk_scan
//           (ceil(dv / 16), nv, count) × 128.
// workgroup memory: prepare 25.8 KB; scan 4·(16·(dk + 1) + 64·16 + 2·64·17 + 64) bytes (21.3 KB
//           at dk = 128, 29.5 KB at dk = 256): within the 32 KB of Metal and lavapipe.
// variants: one (no subgroup use). overrides: DK (multiple of 16).
// requires: sequences.wgsl.

struct Params {
    conv_dim: u32,
    nk: u32,
    nv: u32,
    dv: u32,
    group_div: u32,
    w_at: u32,
    u_at: u32,
    p_at: u32,
    gamma_at: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> mixed: array<f32>;
@group(0) @binding(1) var<storage, read> gates: array<f32>;
@group(0) @binding(2) var<storage, read> seqs: Sequences;
@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(4) var<storage, read_write> state: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

override DK: u32 = 128u;

// Chunk rows.
const C: u32 = 64u;
// Columns of a staged tile, and its padded row stride (odd, so column reads hit distinct banks).
const TI: u32 = 16u;
const TP: u32 = 17u;
// Padded row stride of A / T.
const AP: u32 = 65u;
// chunk_scan: state rows per workgroup and invocations.
const ROWS: u32 = 16u;
const SCAN_WG: u32 = 128u;
override STATE_FLOATS: u32 = ROWS * (DK + 1u);

var<workgroup> gamma_sh: array<f32, C>;
var<workgroup> beta_sh: array<f32, C>;
var<workgroup> tile_x: array<f32, 1088>; // C × TP
var<workgroup> tile_y: array<f32, 1088>;
var<workgroup> a_sh: array<f32, 4160>; // C × AP
var<workgroup> state_sh: array<f32, STATE_FLOATS>;
var<workgroup> delta_sh: array<f32, 1024>; // C × ROWS: V' of the chunk

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
    return (seqs.seq[s].len + seqs.lead + C - 1u) / C;
}

fn chunk_of(c: u32, h: u32, s: u32) -> Chunk {
    let e = seqs.seq[s];
    let lead = seqs.lead;
    let kh = (h / params.group_div) % params.nk;
    return Chunk(e.start + c * C - lead, select(0u, lead, c == 0u), min(C, e.len + lead - c * C),
                 (e.chunk0 + c) * params.nv + h, kh * DK, (params.nk + kh) * DK);
}

// Whether chunk row t is a row of the sequence (not padding).
fn live(ch: Chunk, t: u32) -> bool {
    return ch.first <= t && t < ch.n;
}

fn gate(row: u32, h: u32, which: u32) -> f32 {
    return gates[row * 2u * params.nv + which * params.nv + h];
}

// Loads γ (and β) of the chunk into workgroup memory: the cumulative sum runs on one invocation,
// 64 adds.
fn load_gates(ch: Chunk, h: u32, tid: u32) {
    if tid < C {
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
        for (var t = 0u; t < C; t++) {
            acc += gamma_sh[t];
            gamma_sh[t] = acc;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn chunk_prepare(@builtin(workgroup_id) wg: vec3<u32>,
                 @builtin(local_invocation_index) tid: u32) {
    // The host leaves room for lead rows in every one-sequence step, and counts the longest
    // sequence's chunks in a batch (gated_delta_chunk.rs).
    if wg.x >= chunks(wg.z) {
        return;
    }
    let h = wg.y;
    let ch = chunk_of(wg.x, h, wg.z);
    load_gates(ch, h, tid);
    if tid < C {
        scratch[params.gamma_at + ch.block * C + tid] = gamma_sh[tid];
    }

    // Gram matrices: this invocation owns rows t = ty + 16a and columns s = tx + 16b (a, b < 4).
    let ty = tid / 16u;
    let tx = tid % 16u;
    var kk: array<f32, 16>;
    var qk: array<f32, 16>;
    for (var i0 = 0u; i0 < DK; i0 += TI) {
        for (var e = tid; e < C * TI; e += 256u) {
            let t = e / TI;
            let ii = e % TI;
            var kv = 0.0;
            var qv = 0.0;
            if live(ch, t) {
                let at = (ch.row0 + t) * params.conv_dim + i0 + ii;
                kv = mixed[at + ch.k_col];
                qv = mixed[at + ch.q_col];
            }
            tile_x[t * TP + ii] = kv;
            tile_y[t * TP + ii] = qv;
        }
        workgroupBarrier();
        for (var ii = 0u; ii < TI; ii++) {
            var ks: array<f32, 4>;
            for (var b = 0u; b < 4u; b++) {
                ks[b] = tile_x[(tx + 16u * b) * TP + ii];
            }
            for (var a = 0u; a < 4u; a++) {
                let kt = tile_x[(ty + 16u * a) * TP + ii];
                let qt = tile_y[(ty + 16u * a) * TP + ii];
                for (var b = 0u; b < 4u; b++) {
                    kk[a * 4u + b] = fma(kt, ks[b], kk[a * 4u + b]);
                    qk[a * 4u + b] = fma(qt, ks[b], qk[a * 4u + b]);
                }
            }
        }
        workgroupBarrier();
    }

    // A (strictly lower) into workgroup memory, P (lower with the diagonal) to the scratch.
    for (var a = 0u; a < 4u; a++) {
        let t = ty + 16u * a;
        for (var b = 0u; b < 4u; b++) {
            let s = tx + 16u * b;
            var decay = 0.0;
            if s <= t {
                decay = exp(gamma_sh[t] - gamma_sh[s]);
            }
            a_sh[t * AP + s] = select(0.0, beta_sh[t] * kk[a * 4u + b] * decay, s < t);
            scratch[params.p_at + (ch.block * C + t) * C + s] = qk[a * 4u + b] * decay;
        }
    }
    workgroupBarrier();

    // T = (I + A)⁻¹ in place of A: T_tj = −(A_tj + Σ_{j<s<t} A_ts T_sj) for j < t, the unit
    // diagonal implicit. Rows at or past n are zero in A and stay zero in T.
    for (var t = 1u; t < ch.n; t++) {
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

    // W = T diag(β e^γ) K and U = T diag(β) V, one column tile of R at a time.
    let t_out = tid % C;
    let sub = tid / C;
    for (var i0 = 0u; i0 < DK; i0 += TI) {
        stage_scaled(ch, tid, ch.k_col + i0, DK - i0, true);
        solve_tile(ch, t_out, sub, params.w_at, DK, i0);
    }
    let v_col = 2u * params.nk * DK + h * params.dv;
    for (var j0 = 0u; j0 < params.dv; j0 += TI) {
        stage_scaled(ch, tid, v_col + j0, params.dv - j0, false);
        solve_tile(ch, t_out, sub, params.u_at, params.dv, j0);
    }
}

// tile_x[t][ii] = β_t (e^{γ_t} when `decayed`) · mixed[row t][col + ii], zero past the chunk's
// valid rows or past `width` columns.
fn stage_scaled(ch: Chunk, tid: u32, col: u32, width: u32, decayed: bool) {
    for (var e = tid; e < C * TI; e += 256u) {
        let t = e / TI;
        let ii = e % TI;
        var x = 0.0;
        if live(ch, t) && ii < width {
            var scale = beta_sh[t];
            if decayed {
                scale *= exp(gamma_sh[t]);
            }
            x = scale * mixed[(ch.row0 + t) * params.conv_dim + col + ii];
        }
        tile_x[t * TP + ii] = x;
    }
    workgroupBarrier();
}

// out[t][col0 + ii] = R_t + Σ_{s<t} T_ts R_s for the staged tile R, ii = sub + 4m.
fn solve_tile(ch: Chunk, t: u32, sub: u32, at: u32, width: u32, col0: u32) {
    for (var ii = sub; ii < TI; ii += 4u) {
        var acc = tile_x[t * TP + ii];
        for (var s = 0u; s < t; s++) {
            acc = fma(a_sh[t * AP + s], tile_x[s * TP + ii], acc);
        }
        if col0 + ii < width {
            scratch[at + (ch.block * C + t) * width + col0 + ii] = acc;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(SCAN_WG)
fn chunk_scan(@builtin(workgroup_id) wg: vec3<u32>,
              @builtin(local_invocation_index) tid: u32) {
    let h = wg.y;
    let s = wg.z;
    let sp = DK + 1u;
    let state_at = (seqs.seq[s].slot * params.nv + h) * params.dv * DK;
    for (var e = tid; e < ROWS * DK; e += SCAN_WG) {
        let j = wg.x * ROWS + e / DK;
        var x = 0.0;
        if j < params.dv {
            x = state[state_at + j * DK + e % DK];
        }
        state_sh[(e / DK) * sp + e % DK] = x;
    }
    // This invocation's state row, and its output rows t = tq + 8m (m < 8).
    let jr = tid % ROWS;
    let tq = tid / ROWS;
    let j = wg.x * ROWS + jr;
    let n_chunks = chunks(s);
    // The chunk after which the state is also the mid-step snapshot's (none: past the end).
    let saves = seqs.save_rows > 0u && s == seqs.save_seq;
    let save_after = select(n_chunks, (seqs.lead + seqs.save_rows) / C - 1u, saves);
    for (var c = 0u; c < n_chunks; c++) {
        let ch = chunk_of(c, h, s);
        if tid < C {
            gamma_sh[tid] = scratch[params.gamma_at + ch.block * C + tid];
        }
        // V' = U − W S and Q S over dk tiles.
        var ws: array<f32, 8>;
        var qs: array<f32, 8>;
        for (var i0 = 0u; i0 < DK; i0 += TI) {
            for (var e = tid; e < C * TI; e += SCAN_WG) {
                let t = e / TI;
                let ii = e % TI;
                tile_x[t * TP + ii] = scratch[params.w_at + (ch.block * C + t) * DK + i0 + ii];
                var qv = 0.0;
                if live(ch, t) {
                    qv = mixed[(ch.row0 + t) * params.conv_dim + ch.q_col + i0 + ii];
                }
                tile_y[t * TP + ii] = qv;
            }
            workgroupBarrier();
            for (var ii = 0u; ii < TI; ii++) {
                let sv = state_sh[jr * sp + i0 + ii];
                for (var m = 0u; m < 8u; m++) {
                    let t = tq + 8u * m;
                    ws[m] = fma(tile_x[t * TP + ii], sv, ws[m]);
                    qs[m] = fma(tile_y[t * TP + ii], sv, qs[m]);
                }
            }
            workgroupBarrier();
        }
        for (var m = 0u; m < 8u; m++) {
            let t = tq + 8u * m;
            var u = 0.0;
            if j < params.dv {
                u = scratch[params.u_at + (ch.block * C + t) * params.dv + j];
            }
            delta_sh[t * ROWS + jr] = u - ws[m];
        }
        workgroupBarrier();
        // O = e^γ Q S + P V'.
        for (var m = 0u; m < 8u; m++) {
            let t = tq + 8u * m;
            if live(ch, t) && j < params.dv {
                var acc = exp(gamma_sh[t]) * qs[m];
                let p_row = params.p_at + (ch.block * C + t) * C;
                for (var r = 0u; r <= t; r++) {
                    acc = fma(scratch[p_row + r], delta_sh[r * ROWS + jr], acc);
                }
                o[(ch.row0 + t) * params.nv * params.dv + h * params.dv + j] = acc;
            }
        }
        // S ← e^{γ_C} S + (diag(e^{γ_C − γ}) K)ᵀ V', over dk tiles.
        let gamma_last = gamma_sh[C - 1u];
        let decay_last = exp(gamma_last);
        for (var i0 = 0u; i0 < DK; i0 += TI) {
            for (var e = tid; e < C * TI; e += SCAN_WG) {
                let t = e / TI;
                let ii = e % TI;
                var kv = 0.0;
                if live(ch, t) {
                    kv = exp(gamma_last - gamma_sh[t])
                        * mixed[(ch.row0 + t) * params.conv_dim + ch.k_col + i0 + ii];
                }
                tile_x[t * TP + ii] = kv;
            }
            workgroupBarrier();
            for (var ii = tq; ii < TI; ii += SCAN_WG / ROWS) {
                var acc = 0.0;
                for (var t = 0u; t < C; t++) {
                    acc = fma(tile_x[t * TP + ii], delta_sh[t * ROWS + jr], acc);
                }
                let at = jr * sp + i0 + ii;
                state_sh[at] = fma(decay_last, state_sh[at], acc);
            }
            workgroupBarrier();
        }
        if c == save_after {
            store_state((seqs.save_slot * params.nv + h) * params.dv * DK, wg.x, tid);
        }
    }
    store_state(state_at, wg.x, tid);
}

// This workgroup's ROWS state rows from workgroup memory to the slot at `at`.
fn store_state(at: u32, rows_tile: u32, tid: u32) {
    let sp = DK + 1u;
    for (var e = tid; e < ROWS * DK; e += SCAN_WG) {
        let j = rows_tile * ROWS + e / DK;
        if j < params.dv {
            state[at + j * DK + e % DK] = state_sh[(e / DK) * sp + e % DK];
        }
    }
}
