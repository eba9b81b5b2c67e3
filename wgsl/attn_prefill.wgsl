// attn_prefill — causal attention of a step's tokens against the paged KV cache (flash
// attention: tiled, online softmax, nothing of size n_tokens × kv_len is ever stored)
//
// Token t < step.n_tokens sits at p_t = token_pos(t) (ascending; one sequence, page-table row
// token_page_row of the tile's first token) and attends to cache positions 0..=p_t, so a prefill
// that continues a non-empty cache (p_0 > 0) sees the earlier tokens too. Query head
// h = g·GROUP + r reads kv head g:
//   s_j = q_h · k_{g,j} / sqrt(head_dim) for j ≤ p_t,  o_h = Σ_j softmax(s)_j v_{g,j}   (f32)
// Layout: the rows of a tile are BM consecutive (token, query head) pairs of one kv head, row
// ρ = t·GROUP + r, so a tile's key and value rows serve all GROUP heads of its tokens (GQA read
// sharing) and the tile's causal limit is its last token's position. A workgroup walks one key
// split of its tile (attn_prefill_rows.wgsl: all the keys when S = 1). Each of the WG = 4·BM
// invocations owns one row and a quarter of the keys (scores) or of the dims (outputs):
//   for each key tile of BN keys of the split:
//     S = Q·Kᵀ in head-dim chunks of DC staged in workgroup memory (row strides padded by one
//         against bank conflicts), 8 scores per invocation in registers;
//     mask j > p_t; row max from the four quarters; weights exp2(s − m) (scores carry log2 e);
//     rescale the accumulators; O += P·V in the same chunks, HEAD_DIM/4 accumulators per
//     invocation in registers.
// bindings: see attn_prefill_rows.wgsl (0 q · 1 k_cache · 2 v_cache · 3 page_table
//           · 4 token_slots · 5 o · 6 params · 7 step
//           · 8 partials).
// dispatch: (ceil(n_tokens·GROUP / BM), n_kv, S) workgroups of WG = 4·BM; with S > 1, combine
//           after it (attn_prefill_rows.wgsl).
// pipelines: specialised per model shape by the module consts HEAD_DIM (≤ 256, a multiple of 4)
//            and GROUP; the override TOKEN_TABLE.
// variants: f32 | f16 cache (KvScalar).
// requires: kv_f32|kv_f16.wgsl, kv_paged.wgsl, step.wgsl, view.wgsl, positions.wgsl,
//           attn_combine.wgsl, attn_prefill_rows.wgsl.

// Rows per tile, keys per tile, head dims per chunk, invocations (4 per row).
const BM: u32 = 32u;
const BN: u32 = 32u;
const DC: u32 = 32u;
const WG: u32 = 128u;
// Keys per invocation in the score pass (BN / 4) and output accumulators (HEAD_DIM ≤ 256).
const KEYS: u32 = 8u;
const MAX_ACC: u32 = 64u;
// Padded row strides of the staged tiles.
const Q_STRIDE: u32 = 33u;
const KV_STRIDE: u32 = 33u;
const P_STRIDE: u32 = 33u;
// Splits hold whole key tiles, so keys past a split's end are past the causal limit too.
const_assert SPLIT_KEYS % BN == 0u;
// Each row's keys are summed in runs of RUN_KEYS from key 0, folded in key order, split or not
// (attn_prefill_rows.wgsl, attn_combine.wgsl: issue 21). 512: a fold (a max, two exp2 and
// 2 + HEAD_DIM/4 multiply-adds an invocation) per 16 key tiles of ~HEAD_DIM·BN/2 each.
const RUN_KEYS: u32 = 512u;
const_assert RUN_KEYS % SPLIT_KEYS == 0u;

var<workgroup> q_tile: array<f32, 1056>;   // BM × Q_STRIDE
var<workgroup> kv_tile: array<f32, 1056>;  // BN × KV_STRIDE
var<workgroup> p_tile: array<f32, 1056>;   // BM × P_STRIDE
var<workgroup> quarter_max: array<f32, 128>;
var<workgroup> key_base: array<u32, BN>;

// Stages dims c0..c0+DC of the tile's query rows (scaled) into q_tile.
fn stage_q(row0: u32, g: u32, c0: u32, local: u32, qscale: f32) {
    for (var e = local; e < BM * DC; e += WG) {
        let i = e / DC;
        q_tile[i * Q_STRIDE + e % DC] = query_element(row0 + i, g, c0 + e % DC, qscale);
    }
}

// Stages dims c0..c0+DC of the tile's n_keys key (or value) rows into kv_tile.
fn stage_kv(values: bool, n_keys: u32, c0: u32, local: u32) {
    for (var e = local; e < BN * DC; e += WG) {
        let jj = e / DC;
        let d = c0 + e % DC;
        var v = 0.0;
        if jj < n_keys && d < HEAD_DIM {
            v = cache_element(values, key_base[jj], d);
        }
        kv_tile[jj * KV_STRIDE + e % DC] = v;
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let tile = tile_and_head(wg, groups);
    let row0 = tile.x * BM;
    let g = tile.y;
    let n_rows = step_tokens() * GROUP;
    if row0 >= n_rows {
        return;
    }
    let i = local / 4u;
    let quarter = local % 4u;
    let me = row_token_head(row0 + i, g);
    let valid = me.x != 0xffffffffu;
    var my_pos = 0u;
    if valid {
        my_pos = token_pos(me.x);
    }
    let split = key_split(tile_key_limit(row0, BM), wg.z, groups.z);
    if split.index >= split.count {
        return;
    }
    let page_row = token_page_row(row0 / GROUP);
    let qscale = params.scale * LOG2_E;

    // The current run's state (m, l, acc) and the fold of the runs before it (run_m, run_l,
    // run_acc): a run starts from (NEG, 0, 0) and is folded in at its end.
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, MAX_ACC>;
    var run_m = NEG;
    var run_l = 0.0;
    var run_acc: array<f32, MAX_ACC>;
    for (var a = 0u; a < MAX_ACC; a++) {
        acc[a] = 0.0;
        run_acc[a] = 0.0;
    }

    for (var k0 = split.begin; k0 < split.end; k0 += BN) {
        if k0 % RUN_KEYS == 0u && k0 != split.begin {
            let w = fold_weights(run_m, m);
            run_m = w.m;
            run_l = fold_into(w, run_l, l);
            for (var a = 0u; a < MAX_ACC; a++) {
                run_acc[a] = fold_into(w, run_acc[a], acc[a]);
                acc[a] = 0.0;
            }
            m = NEG;
            l = 0.0;
        }
        let n_keys = min(BN, split.end - k0);
        if local < n_keys {
            key_base[local] = kv_base(params.kv, page_row, k0 + local, g);
        }
        // Scores: 8 keys per invocation, jj = quarter + 4u.
        var s: array<f32, KEYS>;
        for (var u = 0u; u < KEYS; u++) {
            s[u] = 0.0;
        }
        for (var c0 = 0u; c0 < HEAD_DIM; c0 += DC) {
            workgroupBarrier();
            stage_q(row0, g, c0, local, qscale);
            stage_kv(false, n_keys, c0, local);
            workgroupBarrier();
            for (var dd = 0u; dd < DC; dd++) {
                let qv = q_tile[i * Q_STRIDE + dd];
                for (var u = 0u; u < KEYS; u++) {
                    s[u] += qv * kv_tile[(quarter + 4u * u) * KV_STRIDE + dd];
                }
            }
        }
        var tile_max = NEG;
        for (var u = 0u; u < KEYS; u++) {
            let j = k0 + quarter + 4u * u;
            if !valid || j > my_pos {
                s[u] = NEG;
            }
            tile_max = max(tile_max, s[u]);
        }
        quarter_max[local] = tile_max;
        workgroupBarrier();
        let base = i * 4u;
        let m_new = max(m, max(max(quarter_max[base], quarter_max[base + 1u]),
                               max(quarter_max[base + 2u], quarter_max[base + 3u])));
        let alpha = exp2(m - m_new);
        m = m_new;
        for (var u = 0u; u < KEYS; u++) {
            var p = 0.0;
            if s[u] != NEG {
                p = exp2(s[u] - m_new);
            }
            p_tile[i * P_STRIDE + quarter + 4u * u] = p;
        }
        workgroupBarrier();
        var tile_sum = 0.0;
        for (var jj = 0u; jj < BN; jj++) {
            tile_sum += p_tile[i * P_STRIDE + jj];
        }
        l = l * alpha + tile_sum;
        for (var a = 0u; a < MAX_ACC; a++) {
            acc[a] *= alpha;
        }
        // O += P·V, dims d = c0 + quarter + 4w: each weight is read once per chunk and used for
        // the invocation's DC / 4 dims (one shared-memory read per FMA, not two). All BN keys:
        // past n_keys the weights are 0 and the staged rows zeros, and a constant trip count
        // lets the loop unroll.
        for (var c0 = 0u; c0 < HEAD_DIM; c0 += DC) {
            workgroupBarrier();
            stage_kv(true, n_keys, c0, local);
            workgroupBarrier();
            var sums: array<f32, DC / 4u>;
            for (var w = 0u; w < DC / 4u; w++) {
                sums[w] = 0.0;
            }
            for (var jj = 0u; jj < BN; jj++) {
                let p = p_tile[i * P_STRIDE + jj];
                let v_row = jj * KV_STRIDE + quarter;
                for (var w = 0u; w < DC / 4u; w++) {
                    sums[w] += p * kv_tile[v_row + 4u * w];
                }
            }
            for (var w = 0u; w < DC / 4u; w++) {
                acc[c0 / 4u + w] += sums[w];
            }
        }
        // The next tile rewrites key_base, quarter_max and p_tile.
        workgroupBarrier();
    }

    if !valid {
        return;
    }
    // The last run folded in (a split of one run: the run itself, exactly).
    let w = fold_weights(run_m, m);
    let folded_l = fold_into(w, run_l, l);
    for (var c0 = 0u; c0 < HEAD_DIM; c0 += DC) {
        for (var u = 0u; u < DC / 4u; u++) {
            let d = c0 + quarter + 4u * u;
            if d < HEAD_DIM {
                let a = c0 / 4u + u;
                store_output(split, me, d, fold_into(w, run_acc[a], acc[a]), folded_l);
            }
        }
    }
    if quarter == 0u {
        store_stats(split, me, w.m, folded_l);
    }
}
