// attn_decode — attention of one query token per sequence against its paged KV cache
//
// Query row b < step.n_tokens (one per sequence; token_pos(b) = p, page-table row r =
// token_page_row(b)) attends to the p + 1 cached positions 0..=p of its sequence. Query head
// h = g·GROUP + r' reads kv head g (GQA, contiguous grouping):
//   s_j = q_h · k_{g,j} / sqrt(head_dim),  o_h = Σ_j softmax(s)_j v_{g,j}     (f32, online softmax)
// Layout choices (flash-decoding): a workgroup owns one (sequence, kv head, key split), so each
// key and value row is read once for all GROUP query heads that share it; the keys of a sequence
// are split across n_split workgroups (contiguous chunks, whole key tiles) so a single long
// sequence still fills the GPU, and a second pass combines the splits' partial (max, sum, Σ p·v).
// Within a workgroup, keys go in tiles of KEY_TILE: (1) scores of the tile (attn_scores_*.wgsl:
// one subgroup per key with lanes over d, or one invocation per key), (2) one invocation per
// query head updates its running max and sum and turns scores into weights, (3) every
// invocation owns dims d = i, i + WG, … of every query head and accumulates Σ p·v in registers,
// reading value rows with consecutive invocations on consecutive elements. Scores carry
// log2(e) so weights are exp2(s − m).
// bindings: 0 q (read) · 1 k_cache (read) · 2 v_cache (read) · 3 page_table (read)
//           · 4 token_slots (read) · 5 partials (read_write) · 6 o (read_write)
//           · 7 params (uniform) · 8 step (uniform)
// entry points / dispatch:
//   decode  — (n_split, n_kv, n_tokens) workgroups of WG. With n_split = 1 it writes o directly;
//             otherwise partials[((b·n_head + h)·n_split + s)·(HEAD_DIM + 2) + …] =
//             (Σ p·v [HEAD_DIM], m, l), m in log2 units.
//   combine — (n_head, n_tokens) workgroups (only when n_split > 1): o = Σ_s e^(m_s − M) acc_s /
//             Σ_s e^(m_s − M) l_s.
// pipelines: specialised per model shape by HEAD_DIM, GROUP, WG (GROUP·ceil(HEAD_DIM/WG) ≤
//            MAX_ACC accumulators per invocation), Q_LEN = GROUP·HEAD_DIM, S_LEN =
//            GROUP·KEY_TILE; TOKEN_TABLE.
// variants: subgroup | fallback (the score pass) × f32 | f16 cache (KvScalar).
// requires: reduce_*.wgsl (Lanes), attn_scores_*.wgsl, kv_f32|kv_f16.wgsl, kv_paged.wgsl,
//           step.wgsl, view.wgsl, positions.wgsl.

struct Params {
    kv: KvGeometry,
    q: View,
    o: View,
    n_head: u32,
    n_split: u32,
    // 1/sqrt(head_dim)
    scale: f32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<KvScalar>;
@group(0) @binding(2) var<storage, read> v_cache: array<KvScalar>;
@group(0) @binding(3) var<storage, read> page_table: array<u32>;
@group(0) @binding(4) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;
@group(0) @binding(7) var<uniform> params: Params;
@group(0) @binding(8) var<uniform> step: Step;

override WG: u32 = 64u;
override HEAD_DIM: u32 = 128u;
override GROUP: u32 = 2u;
override Q_LEN: u32 = 256u;
override S_LEN: u32 = 64u;
override KEY_TILE: u32 = 32u;
override TOKEN_TABLE: bool = false;

// Bounds of the per-invocation arrays (the host checks GROUP ≤ MAX_GROUP and
// GROUP·ceil(HEAD_DIM/WG) ≤ MAX_ACC).
const MAX_GROUP: u32 = 32u;
const MAX_ACC: u32 = 64u;
// Finite stand-in for −∞: exp2(NEG − m) is 0 for any real m, and NEG − NEG is no NaN.
const NEG: f32 = -3.0e38;
const LOG2_E: f32 = 1.4426950408889634;

var<workgroup> q_tile: array<f32, Q_LEN>;
// Scores, then weights, of the current key tile: [GROUP][KEY_TILE].
var<workgroup> scores: array<f32, S_LEN>;
var<workgroup> key_base: array<u32, KEY_TILE>;
// Per query head: the rescale factor of the tile, then the final sum.
var<workgroup> head_scalar: array<f32, MAX_GROUP>;

fn dims_per_invocation() -> u32 {
    return (HEAD_DIM + WG - 1u) / WG;
}

fn partial_index(b: u32, h: u32, s: u32) -> u32 {
    return ((b * params.n_head + h) * params.n_split + s) * (HEAD_DIM + 2u);
}

@compute @workgroup_size(WG)
fn decode(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let s = wg.x;
    let g = wg.y;
    let b = wg.z;
    if b >= step.n_tokens {
        return;
    }
    let kv_len = token_pos(b) + 1u;
    let page_row = token_page_row(b);
    let per_split = (kv_len + params.n_split - 1u) / params.n_split;
    let chunk = (per_split + KEY_TILE - 1u) / KEY_TILE * KEY_TILE;
    let start = min(s * chunk, kv_len);
    let end = min(start + chunk, kv_len);

    let qscale = params.scale * LOG2_E;
    for (var i = lanes.index; i < Q_LEN; i += WG) {
        let r = i / HEAD_DIM;
        q_tile[i] = q[view_index(params.q, b, g * GROUP + r, i % HEAD_DIM)] * qscale;
    }
    // The running max and sum of query head `lanes.index` (invocations < GROUP).
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, MAX_ACC>;
    for (var i = 0u; i < MAX_ACC; i++) {
        acc[i] = 0.0;
    }
    let dpi = dims_per_invocation();
    workgroupBarrier();

    for (var k0 = start; k0 < end; k0 += KEY_TILE) {
        let n_valid = min(KEY_TILE, end - k0);
        tile_scores(page_row, g, k0, n_valid, lanes);
        workgroupBarrier();
        if lanes.index < GROUP {
            let row = lanes.index * KEY_TILE;
            var m_new = m;
            for (var jj = 0u; jj < n_valid; jj++) {
                m_new = max(m_new, scores[row + jj]);
            }
            let alpha = exp2(m - m_new);
            var sum = 0.0;
            for (var jj = 0u; jj < n_valid; jj++) {
                let p = exp2(scores[row + jj] - m_new);
                scores[row + jj] = p;
                sum += p;
            }
            l = l * alpha + sum;
            m = m_new;
            head_scalar[lanes.index] = alpha;
        }
        workgroupBarrier();
        for (var k = 0u; k < dpi; k++) {
            let d = lanes.index + k * WG;
            if d < HEAD_DIM {
                for (var r = 0u; r < GROUP; r++) {
                    acc[r * dpi + k] *= head_scalar[r];
                }
                for (var jj = 0u; jj < n_valid; jj++) {
                    let vd = f32(v_cache[key_base[jj] + d]);
                    for (var r = 0u; r < GROUP; r++) {
                        acc[r * dpi + k] += scores[r * KEY_TILE + jj] * vd;
                    }
                }
            }
        }
        // The next tile overwrites scores, key_base and head_scalar.
        workgroupBarrier();
    }

    if params.n_split == 1u {
        if lanes.index < GROUP {
            head_scalar[lanes.index] = l;
        }
        workgroupBarrier();
        for (var k = 0u; k < dpi; k++) {
            let d = lanes.index + k * WG;
            if d < HEAD_DIM {
                for (var r = 0u; r < GROUP; r++) {
                    o[view_index(params.o, b, g * GROUP + r, d)] = acc[r * dpi + k] / head_scalar[r];
                }
            }
        }
        return;
    }
    for (var k = 0u; k < dpi; k++) {
        let d = lanes.index + k * WG;
        if d < HEAD_DIM {
            for (var r = 0u; r < GROUP; r++) {
                partials[partial_index(b, g * GROUP + r, s) + d] = acc[r * dpi + k];
            }
        }
    }
    if lanes.index < GROUP {
        let at = partial_index(b, g * GROUP + lanes.index, s) + HEAD_DIM;
        partials[at] = m;
        partials[at + 1u] = l;
    }
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let h = wg.x;
    let b = wg.y;
    if b >= step.n_tokens {
        return;
    }
    var big_m = NEG;
    for (var s = 0u; s < params.n_split; s++) {
        big_m = max(big_m, partials[partial_index(b, h, s) + HEAD_DIM]);
    }
    var total = 0.0;
    for (var s = 0u; s < params.n_split; s++) {
        let at = partial_index(b, h, s) + HEAD_DIM;
        total += partials[at + 1u] * exp2(partials[at] - big_m);
    }
    for (var d = local; d < HEAD_DIM; d += WG) {
        var sum = 0.0;
        for (var s = 0u; s < params.n_split; s++) {
            let at = partial_index(b, h, s);
            sum += partials[at + d] * exp2(partials[at + HEAD_DIM] - big_m);
        }
        o[view_index(params.o, b, h, d)] = sum / total;
    }
}
