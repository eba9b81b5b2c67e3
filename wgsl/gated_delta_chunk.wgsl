// gated_delta_chunk — the gated delta rule in its chunked form, for prefill (chunk C = 64)
//
// Math (model-spec.md §5.6), per sequence s (slot σ, its rows as sequences.wgsl says), value head h reading key head
// κ(h) = (h / group_div) mod nk, over chunks of C rows t of the sequence (the last chunk padded
// with q = k = v = 0, β = g = 0, which changes neither outputs nor state; so is the first when
// the table asks for `lead` zero rows before row 0, which puts the chunks on the absolute chunk
// grid of positions, where every mid-step snapshot lies: sequences.wgsl), S the state at the
// chunk's start (dk×dv, stored
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
//   U as T·R over column tiles of R. Writes W, U, P, γ to the scratch buffer. With PREP_KEY_HEADS
//   (gated_delta_chunk_io.wgsl) one workgroup per (chunk, key head, sequence) instead, which
//   computes the Gram matrices once and the rest for each value head that reads the key head, in
//   turn (the same values in the same order: bit for bit the same scratch).
// - chunk_scan: the part that is sequential over chunks, parallel over heads and state rows:
//   state columns evolve independently given W, K, γ (V'_{:,j} = U_{:,j} − W S_{:,j}), so one
//   workgroup of 128 owns ROWS = 16 state rows of one head in workgroup memory and walks the
//   chunks: V' and Q S over dk tiles (8 outputs per invocation), O from P V', then the state
//   update; it writes O and, at the end, the state (and, after the chunk that ends at the
//   sequence's save_rows, that state into its snapshot slot).
// The dispatch count is fixed; only the chunk_prepare grid grows with the token count.
//
// bindings: those of gated_delta_chunk_io.wgsl (0 mixed, 1 gates, 2 seqs, 4 state, 5 o,
//           6 params) and 3 scratch (array<f32>, read_write: W [blocks][C][dk] at w_at, U
//           [blocks][C][dv] at u_at, P [blocks][C][C] at p_at, γ [blocks][C] at gamma_at; block =
//           (chunk0_s + c)·nv + h)
// dispatch: chunk_prepare (n_chunks, nv, count) × 256 (nk for nv with PREP_KEY_HEADS), n_chunks
//           those of the longest sequence, counted with room for C − 1 lead rows (chunks past a
//           sequence's return at once); chunk_scan (ceil(dv / 16), nv, count) × 128.
// workgroup memory: prepare 25.8 KB; scan 4·(16·(dk + 1) + 64·16 + 2·64·17 + 64) bytes (21.3 KB
//           at dk = 128, 29.5 KB at dk = 256): within the 32 KB of Metal and lavapipe.
// variants: the fallback (gated_delta_chunk_coop.wgsl is the cooperative-matrix one).
// overrides: DK (multiple of 16); gated_delta_chunk_io.wgsl's INVERSE and PREP_KEY_HEADS.
// requires: sequences.wgsl, gated_delta_chunk_io.wgsl (C is its CHUNK).

@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;

override DK: u32 = 128u;

// Columns of a staged tile, and its padded row stride (odd, so column reads hit distinct banks).
const TI: u32 = 16u;
const TP: u32 = 17u;
// Padded row stride of A / T.
const AP: u32 = 65u;
// chunk_scan: the row stride of state_sh (padded by one float).
override STATE_STRIDE: u32 = DK + 1u;
override STATE_FLOATS: u32 = ROWS * STATE_STRIDE;

var<workgroup> tile_x: array<f32, 1088>; // C × TP
var<workgroup> tile_y: array<f32, 1088>;
var<workgroup> a_sh: array<f32, 4160>; // C × AP
var<workgroup> delta_sh: array<f32, 1024>; // C × ROWS: V' of the chunk

@compute @workgroup_size(256)
fn chunk_prepare(@builtin(workgroup_id) wg: vec3<u32>,
                 @builtin(local_invocation_index) tid: u32) {
    // The host counts the longest sequence's chunks with room for its lead rows
    // (gated_delta_chunk.rs).
    if wg.x >= chunks(wg.z) {
        return;
    }
    // The key head's columns are those of every value head this workgroup finishes.
    let keys = chunk_of(wg.x, prep_head(wg.y, 0u), wg.z);
    if PREP_KEY_HEADS == 0u {
        start_head(keys, wg.y, tid);
    }

    // Gram matrices: this invocation owns rows t = ty + 16a and columns s = tx + 16b (a, b < 4).
    let ty = tid / 16u;
    let tx = tid % 16u;
    var kk: array<f32, 16>;
    var qk: array<f32, 16>;
    for (var i0 = 0u; i0 < DK; i0 += TI) {
        for (var e = tid; e < CHUNK * TI; e += 256u) {
            let t = e / TI;
            let ii = e % TI;
            var kv = 0.0;
            var qv = 0.0;
            if live(keys, t) {
                let at = (keys.row0 + t) * params.conv_dim + i0 + ii;
                kv = mixed[at + keys.k_col];
                qv = mixed[at + keys.q_col];
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

    for (var m = 0u; m < prep_heads(); m++) {
        let h = prep_head(wg.y, m);
        let ch = chunk_of(wg.x, h, wg.z);
        if PREP_KEY_HEADS == 1u {
            start_head(ch, h, tid);
        }
        finish_head(ch, h, tid, kk, qk);
    }
}

// γ and β of value head h's chunk into workgroup memory, and γ to the scratch.
fn start_head(ch: Chunk, h: u32, tid: u32) {
    load_gates(ch, h, tid);
    if tid < CHUNK {
        scratch[params.gamma_at + ch.block * CHUNK + tid] = gamma_sh[tid];
    }
}

// What chunk_prepare computes for value head h from the Gram matrices (this invocation's kk and
// qk, chunk_prepare's layout) once its γ and β are loaded: A, T, P, W and U.
fn finish_head(ch: Chunk, h: u32, tid: u32, kk: array<f32, 16>, qk: array<f32, 16>) {
    // A (strictly lower) into workgroup memory, P (lower with the diagonal) to the scratch.
    let ty = tid / 16u;
    let tx = tid % 16u;
    for (var a = 0u; a < 4u; a++) {
        let t = ty + 16u * a;
        for (var b = 0u; b < 4u; b++) {
            let s = tx + 16u * b;
            var decay = 0.0;
            if s <= t {
                decay = exp(gamma_sh[t] - gamma_sh[s]);
            }
            a_sh[t * AP + s] = select(0.0, beta_sh[t] * kk[a * 4u + b] * decay, s < t);
            scratch[params.p_at + (ch.block * CHUNK + t) * CHUNK + s] = qk[a * 4u + b] * decay;
        }
    }
    workgroupBarrier();

    invert_unit_lower(ch.n, tid);

    // W = T diag(β e^γ) K and U = T diag(β) V, one column tile of R at a time.
    let t_out = tid % CHUNK;
    let sub = tid / CHUNK;
    for (var i0 = 0u; i0 < DK; i0 += TI) {
        stage_scaled(ch, tid, ch.k_col + i0, DK - i0, true);
        solve_tile(ch, t_out, sub, params.w_at, DK, i0);
    }
    for (var j0 = 0u; j0 < params.dv; j0 += TI) {
        stage_scaled(ch, tid, v_col(h) + j0, params.dv - j0, false);
        solve_tile(ch, t_out, sub, params.u_at, params.dv, j0);
    }
}

// tile_x[t][ii] = β_t (e^{γ_t} when `decayed`) · mixed[row t][col + ii], zero past the chunk's
// valid rows or past `width` columns.
fn stage_scaled(ch: Chunk, tid: u32, col: u32, width: u32, decayed: bool) {
    for (var e = tid; e < CHUNK * TI; e += 256u) {
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
            scratch[at + (ch.block * CHUNK + t) * width + col0 + ii] = acc;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(SCAN_WG)
fn chunk_scan(@builtin(workgroup_id) wg: vec3<u32>,
              @builtin(local_invocation_index) tid: u32) {
    let h = wg.y;
    let s = wg.z;
    let sp = STATE_STRIDE;
    let at = state_at(seqs.seq[s].slot, h);
    load_state(at, wg.x, tid);
    // This invocation's state row, and its output rows t = tq + 8m (m < 8).
    let jr = tid % ROWS;
    let tq = tid / ROWS;
    let j = wg.x * ROWS + jr;
    let n_chunks = chunks(s);
    let save = save_after(s);
    for (var c = 0u; c < n_chunks; c++) {
        let ch = chunk_of(c, h, s);
        if tid < CHUNK {
            gamma_sh[tid] = scratch[params.gamma_at + ch.block * CHUNK + tid];
        }
        // V' = U − W S and Q S over dk tiles.
        var ws: array<f32, 8>;
        var qs: array<f32, 8>;
        for (var i0 = 0u; i0 < DK; i0 += TI) {
            for (var e = tid; e < CHUNK * TI; e += SCAN_WG) {
                let t = e / TI;
                let ii = e % TI;
                tile_x[t * TP + ii] = scratch[params.w_at + (ch.block * CHUNK + t) * DK + i0 + ii];
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
                u = scratch[params.u_at + (ch.block * CHUNK + t) * params.dv + j];
            }
            delta_sh[t * ROWS + jr] = u - ws[m];
        }
        workgroupBarrier();
        // O = e^γ Q S + P V'.
        for (var m = 0u; m < 8u; m++) {
            let t = tq + 8u * m;
            if live(ch, t) && j < params.dv {
                var acc = exp(gamma_sh[t]) * qs[m];
                let p_row = params.p_at + (ch.block * CHUNK + t) * CHUNK;
                for (var r = 0u; r <= t; r++) {
                    acc = fma(scratch[p_row + r], delta_sh[r * ROWS + jr], acc);
                }
                o[(ch.row0 + t) * params.nv * params.dv + h * params.dv + j] = acc;
            }
        }
        // S ← e^{γ_C} S + (diag(e^{γ_C − γ}) K)ᵀ V', over dk tiles.
        let gamma_last = gamma_sh[CHUNK - 1u];
        let decay_last = exp(gamma_last);
        for (var i0 = 0u; i0 < DK; i0 += TI) {
            for (var e = tid; e < CHUNK * TI; e += SCAN_WG) {
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
                for (var t = 0u; t < CHUNK; t++) {
                    acc = fma(tile_x[t * TP + ii], delta_sh[t * ROWS + jr], acc);
                }
                let at = jr * sp + i0 + ii;
                state_sh[at] = fma(decay_last, state_sh[at], acc);
            }
            workgroupBarrier();
        }
        if c == save {
            store_state(snapshot_at(s, h), wg.x, tid);
        }
    }
    store_state(at, wg.x, tid);
}
