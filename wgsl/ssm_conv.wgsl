// ssm_conv — causal depthwise conv1d over time, then SiLU, with the rolling conv state
//
// Math (model-spec.md §5.4.2), per sequence s (state slot σ = seqs.seq[s].slot, rows from
// r_s = seqs.seq[s].start), token t < len = seqs.seq[s].len and channel c < conv_dim, K taps per
// channel (tap 0 multiplies the oldest input):
//   y[r_s + t][c] = silu( Σ_{j<K} w[c·K + j] · x(t − K + 1 + j) )
//   x(τ) = m[r_s + τ][c] for τ ≥ 0, else state[σ][K − 1 + τ][c]  (the K−1 raw rows before the
//          sequence, oldest first; zeros at a sequence start, where the host zeroed the slot)
// and afterwards state[σ][i][c] = x(len − K + 1 + i) for i < K−1: the last K−1 raw rows.
// Where sequence s takes a mid-step snapshot (sequences.wgsl: seq[s].save_rows > 0, prefill
// only), also state[seq[s].save_slot][i][c] = x(save_rows − K + 1 + i): the conv state after
// save_rows rows.
//
// m is read through a view (view.wgsl): row r is at params.m.offset + r·params.m.token_stride, so
// the projection may sit in a wider row (qwen35 stacks the qkv, z, β and α projections).
//
// bindings: 0 m (array<f32>, read: raw qkv projection, n_tokens rows of conv_dim through a view)
//           · 1 w (array<f32>, read: GGUF ssm_conv1d, F32, ne = [K, conv_dim])
//           · 2 seqs (Sequences, read) · 3 state (array<f32>, read_write: [slots][K−1][conv_dim])
//           · 4 y (array<f32>, read_write: [n_tokens][conv_dim]) · 5 params (uniform Params)
// dispatch: (ceil(conv_dim / WG), ceil(longest len / TILE), count) workgroups of WG invocations; an
//           invocation is one channel of TILE consecutive tokens of one sequence, so adjacent
//           invocations read adjacent channels (coalesced) and each raw value is read
//           (TILE + K − 1) / TILE times instead of K.
// state: only tile 0 of a sequence reads the old state (TILE ≥ K − 1), and the same invocation
//        writes the new state after its reads, so prefill and decode are one dispatch with no
//        race between invocations. The rows are rewritten in ascending order: new row i reads
//        old row len + i > i, which is not yet overwritten. The snapshot slot is written before them.
// variants: one (no reduction). K ∈ 2..=4 (override), TILE ≥ K − 1.
// requires: sequences.wgsl, view.wgsl, gdn_math.wgsl.

struct Params {
    conv_dim: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    m: View,
}

@group(0) @binding(0) var<storage, read> m: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> seqs: Sequences;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

override WG: u32 = 64u;
override K: u32 = 4u;
override TILE: u32 = 8u;
const MAX_K: u32 = 4u;

// Raw input τ of the sequence whose rows start at `row0` (τ < 0: the conv state).
fn raw(row0: u32, tau: i32, c: u32, state_base: u32) -> f32 {
    if tau >= 0 {
        return m[view_index(params.m, row0 + u32(tau), 0u, c)];
    }
    return state[state_base + u32(i32(K) - 1 + tau) * params.conv_dim];
}

@compute @workgroup_size(WG)
fn conv_silu(@builtin(global_invocation_id) id: vec3<u32>) {
    let c = id.x;
    let s = id.z;
    let t0 = id.y * TILE;
    if c >= params.conv_dim || s >= seqs.count {
        return;
    }
    let len = seqs.seq[s].len;
    if t0 >= len {
        return;
    }
    let row0 = seqs.seq[s].start;
    let state_base = seqs.seq[s].slot * (K - 1u) * params.conv_dim + c;
    var taps: array<f32, MAX_K>;
    for (var j = 0u; j < K; j++) {
        taps[j] = w[c * K + j];
    }
    // window[j] = x(t − K + 1 + j); the newest entry is loaded at the top of each step.
    var window: array<f32, MAX_K>;
    for (var j = 0u; j + 1u < K; j++) {
        window[j] = raw(row0, i32(t0) - i32(K) + 1 + i32(j), c, state_base);
    }
    let t_end = min(t0 + TILE, len);
    for (var t = t0; t < t_end; t++) {
        window[K - 1u] = m[view_index(params.m, row0 + t, 0u, c)];
        var acc = 0.0;
        for (var j = 0u; j < K; j++) {
            acc = fma(taps[j], window[j], acc);
        }
        y[(row0 + t) * params.conv_dim + c] = silu(acc);
        for (var j = 0u; j + 1u < K; j++) {
            window[j] = window[j + 1u];
        }
    }
    if id.y == 0u {
        // The mid-step snapshot first: it may read the old state, which the next loop replaces.
        let e = seqs.seq[s];
        if saves_midway(e) {
            let save_base = e.save_slot * (K - 1u) * params.conv_dim + c;
            for (var i = 0u; i + 1u < K; i++) {
                state[save_base + i * params.conv_dim] =
                    raw(row0, i32(e.save_rows) - i32(K) + 1 + i32(i), c, state_base);
            }
        }
        for (var i = 0u; i + 1u < K; i++) {
            state[state_base + i * params.conv_dim] =
                raw(row0, i32(len) - i32(K) + 1 + i32(i), c, state_base);
        }
    }
}
