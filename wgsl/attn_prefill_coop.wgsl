// attn_prefill_coop — the prefill attention of attn_prefill.wgsl on cooperative matrices: the same
// causal flash attention (online softmax, GQA rows, a prefill continuing a paged cache), with
// S = Q·Kᵀ and P·V on the matrix units (f16 inputs, f32 accumulation)
//
// Math (per kv head g, rows ρ = t·GROUP + r as in attn_prefill_rows.wgsl):
//   s_j = (q_ρ · scale · log2 e) · k_j for j ≤ p_t;  m, l, o: the running row max, weight sum and
//   weighted value sum; per key step of BN keys: m' = max(m, max_j s_j), α = exp2(m − m'),
//   p_j = f16(exp2(s_j − m')), l = α·l + Σ_j p_j, o = α·o + Σ_j p_j v_j; at the end o / l.
// Q, K and V are rounded to f16 once, in the staged tiles (an f32 cache too), and P when it
// becomes an A operand; l sums the rounded p, so the weights still sum to exactly one.
//
// Workgroup: ROW_BLOCKS × KEY_BLOCKS (= 2) subgroups of 32 lanes, BM = ROW_BLOCKS·COOP rows,
// key steps of BN = KEY_BLOCKS·COOP keys. Q (scaled) is staged once as f16 (BM × D_PAD: the head
// padded with zeros to HEAD_TILES·COOP, HEAD_TILES even). Per key step:
//   1. all invocations stage the step's K rows as f16 (zeros past the causal limit, so the NaN or
//      garbage of unwritten cache slots never reaches an MMA);
//   2. subgroup (mi, ni) computes the S tile of row block mi and key block ni over HEAD_TILES
//      MMAs and stores it (f32) to the stage;
//   3. all invocations stage V over K, and WG / BM lanes per row mask, take the row max through
//      workgroup memory, and write P (f16), α and the rounded weights' sum;
//   4. subgroup (mi, ni) adds P's row block mi times V's dim tiles ni, ni + 2, … (two MMAs each)
//      to O. A cooperative matrix cannot be scaled per row in WGSL, so O lives in workgroup
//      memory: o_tile (f32, BM × O_STRIDE) is scaled by α in step 3 by the row's lanes and is
//      the accumulator the MMAs load and store back (no barrier inside step 4). O in registers
//      fed through staging slots was measured too and gave wrong results on the H200
//      (experiments/NOTES.md, attn-prefill-coop).
// Every coop value is a single named value per loop iteration (no arrays of cooperative
// matrices: experiments/NOTES.md, H200 call 3), and indices and strides go through `let`s
// (naga 30's coopStore panic, wgpu-notes.md §7).
// bindings: see attn_prefill_rows.wgsl (as attn_prefill.wgsl; one bind-group layout for both).
// dispatch: (ceil(n_tokens·GROUP / BM), n_kv, S) workgroups of WG = ROW_BLOCKS·KEY_BLOCKS·32,
//           each over one key split of its tile (attn_prefill_rows.wgsl; combine after it when
//           S > 1).
// pipelines: module consts HEAD_DIM, GROUP and the override TOKEN_TABLE as attn_prefill.wgsl;
//            the module consts ROW_BLOCKS and HEAD_TILES (= 2·ceil(head_dim / 2·COOP)) from the
//            host, which also checks the workgroup memory of main below against the device.
// variants: the shape file before it: matmul_coop16.wgsl (Vulkan) | matmul_coop8.wgsl (Metal);
//           `enable f16; enable wgpu_cooperative_matrix;` from the variant, which requires
//           SUBGROUP (subgroup_id) and, on the host, subgroups exactly 32 wide.
// requires: kv_f32|kv_f16.wgsl, kv_paged.wgsl, step.wgsl, view.wgsl, positions.wgsl,
//           attn_combine.wgsl, attn_prefill_rows.wgsl, a shape file; the consts ROW_BLOCKS,
//           HEAD_TILES.

const SUBGROUP_WIDTH: u32 = 32u;
const KEY_BLOCKS: u32 = 2u;
const SUBGROUPS: u32 = ROW_BLOCKS * KEY_BLOCKS;
const WG: u32 = SUBGROUPS * SUBGROUP_WIDTH;
const BM: u32 = ROW_BLOCKS * COOP;
const BN: u32 = KEY_BLOCKS * COOP;
const D_PAD: u32 = HEAD_TILES * COOP;
// Row strides of the f16 tiles, in halves: 8 more than the row so the 16-byte row segments of
// one fragment load fall in different banks (as matmul_coop.wgsl); o_tile's, in f32, 4 more.
const Q_STRIDE: u32 = D_PAD + 8u;
const KV_STRIDE: u32 = D_PAD + 8u;
const P_STRIDE: u32 = BN + 8u;
const O_STRIDE: u32 = D_PAD + 4u;
// Softmax lanes per row, and the keys each of them scores.
const ROW_LANES: u32 = WG / BM;
const LANE_KEYS: u32 = BN / ROW_LANES;
// Dim tiles per subgroup in step 4.
const OWN_TILES: u32 = HEAD_TILES / KEY_BLOCKS;
const_assert HEAD_TILES % KEY_BLOCKS == 0u;
// Splits hold whole key steps, so keys past a split's end are past the causal limit too.
const_assert SPLIT_KEYS % BN == 0u;

var<workgroup> q_tile: array<f16, BM * Q_STRIDE>;
var<workgroup> kv_tile: array<f16, BN * KV_STRIDE>;
var<workgroup> p_tile: array<f16, BM * P_STRIDE>;
// The S tile (BM × BN, row-major).
var<workgroup> stage: array<f32, BM * BN>;
var<workgroup> o_tile: array<f32, BM * O_STRIDE>;
var<workgroup> key_base: array<u32, BN>;
var<workgroup> lane_max: array<f32, WG>;
var<workgroup> lane_sum: array<f32, WG>;
// l of each row after the last step.
var<workgroup> row_sum: array<f32, BM>;

// Stages the step's n_keys key (or value) rows as f16, zeros past n_keys and head_dim.
fn stage_kv(values: bool, n_keys: u32, local: u32) {
    for (var e = local; e < BN * D_PAD; e += WG) {
        let jj = e / D_PAD;
        let d = e % D_PAD;
        var v = 0.0;
        if jj < n_keys && d < HEAD_DIM {
            v = cache_element(values, key_base[jj], d);
        }
        kv_tile[jj * KV_STRIDE + d] = f16(v);
    }
}

// Step 2: the S tile of row block mi and key block ni (scores in log2 units) into the stage.
fn score_tile(mi: u32, ni: u32) {
    let q_stride = Q_STRIDE;
    let kv_stride = KV_STRIDE;
    var s = CoopC();
    for (var dt = 0u; dt < HEAD_TILES; dt++) {
        let q_at = mi * COOP * Q_STRIDE + dt * COOP;
        let a = coopLoadT<CoopA>(&q_tile[q_at], q_stride);
        let k_at = ni * COOP * KV_STRIDE + dt * COOP;
        let b = coopLoad<CoopB>(&kv_tile[k_at], kv_stride);
        s = coopMultiplyAdd(a, b, s);
    }
    let s_at = mi * COOP * BN + ni * COOP;
    let s_stride = BN;
    coopStoreT(s, &stage[s_at], s_stride);
}

// Step 4: o_tile's tile (mi, dt) += P · V.
fn accumulate(p0: CoopA, p1: CoopA, mi: u32, dt: u32) {
    let kv_stride = KV_STRIDE;
    let o_stride = O_STRIDE;
    let v_at = dt * COOP;
    let v0 = coopLoadT<CoopB>(&kv_tile[v_at], kv_stride);
    let v_at1 = v_at + COOP * KV_STRIDE;
    let v1 = coopLoadT<CoopB>(&kv_tile[v_at1], kv_stride);
    let o_at = mi * COOP * O_STRIDE + dt * COOP;
    var o_acc = coopLoadT<CoopC>(&o_tile[o_at], o_stride);
    o_acc = coopMultiplyAdd(p0, v0, o_acc);
    o_acc = coopMultiplyAdd(p1, v1, o_acc);
    coopStoreT(o_acc, &o_tile[o_at], o_stride);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_id) subgroup: u32,
) {
    let row0 = wg.x * BM;
    let g = wg.y;
    if row0 >= step_tokens() * GROUP {
        return;
    }
    // A split without keys runs no key step and stores nothing (no early return: the limit comes
    // from storage, which the cooperative-matrix operations' uniformity rules out).
    let split = key_split(tile_key_limit(row0, BM), wg.z, groups.z);
    let page_row = token_page_row(row0 / GROUP);
    let qscale = params.scale * LOG2_E;
    // This subgroup's row block and key block (step 2) / first dim tile (step 4).
    let mi = subgroup / KEY_BLOCKS;
    let ni = subgroup % KEY_BLOCKS;
    // This lane's softmax row and part of it (step 3).
    let i = local / ROW_LANES;
    let part = local % ROW_LANES;
    let me = row_token_head(row0 + i, g);
    let valid = me.x != 0xffffffffu;
    var my_pos = 0u;
    if valid {
        my_pos = token_pos(me.x);
    }

    for (var e = local; e < BM * D_PAD; e += WG) {
        q_tile[(e / D_PAD) * Q_STRIDE + e % D_PAD] =
            f16(query_element(row0 + e / D_PAD, g, e % D_PAD, qscale));
    }
    for (var e = local; e < BM * O_STRIDE; e += WG) {
        o_tile[e] = 0.0;
    }
    var m = NEG;
    var l = 0.0;
    let p_stride = P_STRIDE;

    for (var k0 = split.begin; k0 < split.end; k0 += BN) {
        let n_keys = min(BN, split.end - k0);
        if local < n_keys {
            key_base[local] = kv_base(params.kv, page_row, k0 + local, g);
        }
        workgroupBarrier();
        stage_kv(false, n_keys, local);
        workgroupBarrier();
        score_tile(mi, ni);
        workgroupBarrier();

        // Step 3: V over K; the row's max, weights and sum.
        stage_kv(true, n_keys, local);
        var s: array<f32, LANE_KEYS>;
        var part_max = NEG;
        for (var u = 0u; u < LANE_KEYS; u++) {
            let jj = part + ROW_LANES * u;
            s[u] = stage[i * BN + jj];
            if !valid || k0 + jj > my_pos {
                s[u] = NEG;
            }
            part_max = max(part_max, s[u]);
        }
        lane_max[local] = part_max;
        workgroupBarrier();
        var m_new = m;
        for (var r = 0u; r < ROW_LANES; r++) {
            m_new = max(m_new, lane_max[i * ROW_LANES + r]);
        }
        let alpha = exp2(m - m_new);
        m = m_new;
        var part_sum = 0.0;
        for (var u = 0u; u < LANE_KEYS; u++) {
            var p = f16(0.0);
            if s[u] != NEG {
                p = f16(exp2(s[u] - m_new));
            }
            p_tile[i * P_STRIDE + part + ROW_LANES * u] = p;
            part_sum += f32(p);
        }
        lane_sum[local] = part_sum;
        for (var d = part; d < D_PAD; d += ROW_LANES) {
            o_tile[i * O_STRIDE + d] *= alpha;
        }
        workgroupBarrier();
        var tile_sum = 0.0;
        for (var r = 0u; r < ROW_LANES; r++) {
            tile_sum += lane_sum[i * ROW_LANES + r];
        }
        l = l * alpha + tile_sum;

        // Step 4: O += P·V (O scaled by α above); the next step's first barrier orders these
        // stores before its scaling.
        let p_at = mi * COOP * P_STRIDE;
        let p0 = coopLoadT<CoopA>(&p_tile[p_at], p_stride);
        let p_at1 = p_at + COOP;
        let p1 = coopLoadT<CoopA>(&p_tile[p_at1], p_stride);
        for (var t = 0u; t < OWN_TILES; t++) {
            accumulate(p0, p1, mi, ni + KEY_BLOCKS * t);
        }
    }

    // Every o_tile tile has been written before it is read.
    workgroupBarrier();
    if part == 0u {
        row_sum[i] = l;
        if valid {
            store_stats(split, me, m, l);
        }
    }
    workgroupBarrier();
    for (var e = local; e < BM * D_PAD; e += WG) {
        let row = e / D_PAD;
        let d = e % D_PAD;
        let th = row_token_head(row0 + row, g);
        if th.x != 0xffffffffu && d < HEAD_DIM {
            store_output(split, th, d, o_tile[row * O_STRIDE + d], row_sum[row]);
        }
    }
}
