// attn_prefill_coop — the prefill attention of attn_prefill.wgsl on cooperative matrices: the same
// causal flash attention (online softmax, GQA rows, a prefill continuing a paged cache), with
// S = Q·Kᵀ and P·V on the matrix units (f16 inputs, f32 accumulation) and O kept in them
//
// Math (per kv head g, rows ρ = t·GROUP + r as in attn_prefill_rows.wgsl):
//   s_j = (q_ρ · scale · log2 e) · k_j for j ≤ p_t; per row a reference max m, the weight sum l
//   and o = Σ_j 2^(s_j − m) v_j; at the end o / l (or the split's partial o, m, l).
// The reference max moves lazily: a key step whose row max m' exceeds m by more than SLACK (log2
// units) sets m = m' and scales the row's l and o by α = 2^(m − m'); otherwise m stays and the
// step's weights p_j = 2^(s_j − m) are at most 2^SLACK (256 at 8: f16 and f32 hold them with the
// same relative rounding). Every choice of m gives the same o / l (l and o carry the same 2^−m),
// so this is exact in meaning; it only makes the rescale rare (after a row's first step, only
// when its max grows by more than SLACK). A cooperative matrix cannot be scaled per row in WGSL,
// so a rescale is a round trip of O through workgroup memory, taken by the whole workgroup when
// any row needs it (SLACK 0 takes it whenever a max grows: the tests' variant for this path).
// Q, K and V are rounded to f16 once, in the staged tiles (an f32 cache too), and P when it
// becomes an A operand; l sums the rounded p, so the weights still sum to exactly one.
//
// Workgroup: SUBGROUPS = ROW_BLOCKS × DIM_SPLIT subgroups of 32 lanes, BM = ROW_BLOCKS·COOP rows,
// key steps of BN = KEY_STEP keys (32 or 64; KEY_BLOCKS = BN / COOP blocks). Subgroup (mi, ni) owns row block mi:
// its S tiles over key blocks ni·KEY_TILES.., and its O tiles over dim tiles ni·DIM_TILES..
// (DIM_SPLIT = 1 up to 8 dim tiles: the whole head; 2 or more where the head is wider, so no
// subgroup holds more than 8 accumulators). Q (scaled) is staged once as f16. Per key step:
//   A. the step's K rows (fetched into registers during the previous step's P·V) go to kv_tile;
//   B. the V rows are fetched into registers (in flight through the S MMAs); each subgroup
//      computes its S tiles (HEAD_TILES MMAs each) and stores them to s_tile (f32);
//   C. the V rows go to kv_tile (every subgroup is done with K); each subgroup's lanes read their
//      row's scores (ROW_LANES lanes a row, reduced with subgroup shuffles: no workgroup round
//      trip), mask j > p_t, move m where needed (marking the step for a rescale) and write P
//      (f16) and l; the next step's key addresses are computed;
//   D. after workgroupUniformLoad of the mark (the barrier that publishes P and V): the next
//      step's K rows are fetched into registers; on a marked step every O tile goes through
//      o_stage and back scaled by its rows' α; then O += P·V (KEY_BLOCKS × DIM_TILES MMAs).
// Four barriers per step: A's, B's, D's and the one after the MMAs before the next K store.
// RUN_KEYS ≠ 0 (key runs, issue 21; attn_prefill_rows.wgsl): at each key step starting on a
// multiple of RUN_KEYS past the split's first, every O tile goes through o_stage once (as a
// rescale's round trip, without the load back) and its lanes fold their rows into the finished
// runs' sum in memory; then O = 0, m = NEG, l = 0: the run starts as a split starting there would.
// The lazy max restarts with it, so a run's rescales depend on its keys alone. The final store
// folds the last run (a tile whose keys fit one run stores as before).
// Q_REGS = 1 (one subgroup a row block, BM ≤ BN): Q is staged once through kv_tile and kept in
// each subgroup's HEAD_TILES fragments (q0..q7), so no Q tile takes workgroup memory (room for
// 64 × 64 tiles at head 128). S_INTERLEAVE = 1 (with Q_REGS): step B runs the key blocks' MMA
// chains interleaved, each Q fragment meeting every key block before the next dim tile, instead
// of one chain of HEAD_TILES MMAs after another (the same products in the same order per tile).
// K/V staging moves quads (16-byte f32 / 8-byte f16 loads, 8-byte vec4<f16> stores), and the
// tiles are vec4<f16> arrays whose fragment strides count vec4s (as matmul_x16.wgsl).
// Every coop value is a single named value (no arrays of cooperative matrices: experiments/
// NOTES.md, H200 call 3), and indices and strides go through `let`s (naga 30's coopStore panic,
// wgpu-notes.md §7). An O tile's values reach lanes only through o_stage between workgroup
// barriers (the earlier register form without them gave wrong results on the H200).
// bindings: see attn_prefill_rows.wgsl (as attn_prefill.wgsl; one bind-group layout for both).
// dispatch: (ceil(n_tokens·GROUP / BM), n_kv, S) workgroups of WG = SUBGROUPS·32, each over one
//           key split of its tile (attn_prefill_rows.wgsl; combine after it when S > 1).
// pipelines: module consts HEAD_DIM, GROUP and the override TOKEN_TABLE as attn_prefill.wgsl;
//            the module consts ROW_BLOCKS, KEY_STEP, HEAD_TILES (dim tiles covering the head, a
//            multiple of DIM_SPLIT), DIM_SPLIT, SLACK, Q_REGS, S_INTERLEAVE and RUN_KEYS (0 or
//            512) from the host
//            (engine `attn_prefill::CoopTile`),
//            which also checks the workgroup memory of main below against the device.
// variants: the shape file before it: matmul_coop16.wgsl (Vulkan) | matmul_coop8.wgsl (Metal);
//           `enable f16; enable wgpu_cooperative_matrix;` from the variant, which requires
//           SUBGROUP (subgroup_id, shuffles) and, on the host, subgroups exactly 32 wide.
// requires: kv_f32|kv_f16.wgsl, kv_paged.wgsl, step.wgsl, view.wgsl, positions.wgsl,
//           attn_combine.wgsl, attn_prefill_rows.wgsl, a shape file; the consts ROW_BLOCKS,
//           KEY_STEP, HEAD_TILES, DIM_SPLIT, SLACK, Q_REGS, S_INTERLEAVE, RUN_KEYS.

const SUBGROUP_WIDTH: u32 = 32u;
const SUBGROUPS: u32 = ROW_BLOCKS * DIM_SPLIT;
const WG: u32 = SUBGROUPS * SUBGROUP_WIDTH;
const BM: u32 = ROW_BLOCKS * COOP;
const BN: u32 = KEY_STEP;
const KEY_BLOCKS: u32 = BN / COOP;
// S tiles (key blocks) and O tiles (dim tiles) per subgroup.
const KEY_TILES: u32 = KEY_BLOCKS / DIM_SPLIT;
const DIM_TILES: u32 = HEAD_TILES / DIM_SPLIT;
// Quads of a padded head, and the K/V quads each invocation moves per step.
const D4: u32 = HEAD_TILES * COOP / 4u;
const QUADS: u32 = (BN * D4 + WG - 1u) / WG;
// Row strides of the f16 tiles, in vec4s: 8 halves more than the row so the 16-byte row segments
// of one fragment load fall in different banks (as matmul_x16.wgsl); s_tile's in f32, p_tile's
// in halves.
const Q_STRIDE4: u32 = D4 + 2u;
const KV_STRIDE4: u32 = D4 + 2u;
const S_STRIDE: u32 = BN + 4u;
const P_STRIDE: u32 = BN + 8u;
// Softmax lanes per row, the keys each of them scores, and the columns of an O tile each scales.
const ROW_LANES: u32 = SUBGROUP_WIDTH / COOP;
const LANE_KEYS: u32 = BN / ROW_LANES;
const LANE_COLS: u32 = COOP / ROW_LANES;
const SLACK_LOG2: f32 = f32(SLACK);
const_assert HEAD_TILES % DIM_SPLIT == 0u && KEY_BLOCKS % DIM_SPLIT == 0u;
const_assert DIM_TILES <= 8u && KEY_TILES <= 4u && HEAD_DIM <= HEAD_TILES * COOP;
// Splits hold whole key steps, so keys past a split's end are past the causal limit too.
const_assert SPLIT_KEYS % BN == 0u;
// Runs hold whole key steps (RUN_KEYS 0: splits cut the keys evenly).
const_assert RUN_KEYS % SPLIT_KEYS == 0u;
// Q in registers: the subgroup holds its row block's HEAD_TILES fragments (named q0..q7), which
// needs one subgroup a row block and Q staged through kv_tile.
const_assert Q_REGS == 0u || (DIM_SPLIT == 1u && BM <= BN);
const_assert S_INTERLEAVE == 0u || Q_REGS == 1u;

// Q (scaled, f16); two vec4s (16 bytes: every workgroup variable here is a whole number of 16
// bytes, see rescale_mark) when Q_REGS = 1 (staged through kv_tile, kept in fragments).
var<workgroup> q_tile: array<vec4<f16>, BM * Q_STRIDE4 * (1u - Q_REGS) + 2u * Q_REGS>;
var<workgroup> kv_tile: array<vec4<f16>, BN * KV_STRIDE4>;
// The S tile (BM × BN, row-major) and P (f16).
var<workgroup> s_tile: array<f32, BM * S_STRIDE>;
var<workgroup> p_tile: array<f16, BM * P_STRIDE>;
// One COOP × COOP slot per subgroup: O tiles on their way to a rescale or the output.
var<workgroup> o_stage: array<f32, SUBGROUPS * COOP * COOP>;
var<workgroup> key_base: array<u32, BN>;
// k0 + 1 of the last key step some row marked for a rescale (in .x; a vec4 so that the tiles
// beside it keep 16-byte offsets: as a lone u32 the H200's tiles came out wrong,
// experiments/NOTES.md, coop-probe).
var<workgroup> rescale_mark: vec4<u32>;

// The element index of key k0 + jj of the tile's kv head for jj < n (lanes below BN).
// A workgroup of one or two subgroups has fewer lanes than a 64-key step has keys, so each lane
// sets every WG-th one (the H200 run of 2026-12-05 #5 caught keys 32..63 left unset).
fn set_key_bases(k0: u32, n: u32, page_row: u32, g: u32, local: u32) {
    for (var jj = local; jj < n; jj += WG) {
        key_base[jj] = kv_base(params.kv, page_row, k0 + jj, g);
    }
}

// This invocation's quads of the step's n_keys key (values false) or value rows: quad
// local + WG·u of the BN × D4 tile; zeros past n_keys and head_dim, so the NaN or garbage of
// unwritten cache slots never reaches an MMA.
fn fetch_kv(values: bool, n_keys: u32, local: u32) -> array<vec4<KvScalar>, QUADS> {
    var out: array<vec4<KvScalar>, QUADS>;
    for (var u = 0u; u < QUADS; u++) {
        let e = local + u * WG;
        let jj = e / D4;
        let i = e % D4;
        var v = vec4<KvScalar>();
        if jj < n_keys && 4u * i < HEAD_DIM {
            v = cache_quad(values, key_base[jj], i);
        }
        out[u] = v;
    }
    return out;
}

fn put_kv(quads: array<vec4<KvScalar>, QUADS>, local: u32) {
    for (var u = 0u; u < QUADS; u++) {
        let e = local + u * WG;
        if e < BN * D4 {
            kv_tile[(e / D4) * KV_STRIDE4 + e % D4] = vec4<f16>(quads[u]);
        }
    }
}

fn store_scores(s: CoopC, mi: u32, kb: u32) {
    let at = mi * COOP * S_STRIDE + kb * COOP;
    let stride = S_STRIDE;
    coopStoreT(s, &s_tile[at], stride);
}

// Step B: the S tiles of row block mi and key blocks kb0..kb0 + KEY_TILES (scores in log2
// units) into s_tile; the key blocks' chains interleave, sharing each Q fragment.
fn scores(mi: u32, kb0: u32) {
    let q_stride = Q_STRIDE4;
    let kv_stride = KV_STRIDE4;
    var s0 = CoopC();
    var s1 = CoopC();
    var s2 = CoopC();
    var s3 = CoopC();
    for (var dt = 0u; dt < HEAD_TILES; dt++) {
        let q_at = mi * COOP * Q_STRIDE4 + dt * (COOP / 4u);
        let a = coopLoadT<CoopA>(&q_tile[q_at], q_stride);
        let k_at = kb0 * COOP * KV_STRIDE4 + dt * (COOP / 4u);
        let b0 = coopLoad<CoopB>(&kv_tile[k_at], kv_stride);
        s0 = coopMultiplyAdd(a, b0, s0);
        if KEY_TILES > 1u {
            let k_at1 = k_at + COOP * KV_STRIDE4;
            let b1 = coopLoad<CoopB>(&kv_tile[k_at1], kv_stride);
            s1 = coopMultiplyAdd(a, b1, s1);
        }
        if KEY_TILES > 2u {
            let k_at2 = k_at + 2u * COOP * KV_STRIDE4;
            let b2 = coopLoad<CoopB>(&kv_tile[k_at2], kv_stride);
            s2 = coopMultiplyAdd(a, b2, s2);
        }
        if KEY_TILES > 3u {
            let k_at3 = k_at + 3u * COOP * KV_STRIDE4;
            let b3 = coopLoad<CoopB>(&kv_tile[k_at3], kv_stride);
            s3 = coopMultiplyAdd(a, b3, s3);
        }
    }
    store_scores(s0, mi, kb0);
    if KEY_TILES > 1u {
        store_scores(s1, mi, kb0 + 1u);
    }
    if KEY_TILES > 2u {
        store_scores(s2, mi, kb0 + 2u);
    }
    if KEY_TILES > 3u {
        store_scores(s3, mi, kb0 + 3u);
    }
}

// Q_REGS: the Q fragment of row block mi and dim tile dt, staged in kv_tile.
fn q_fragment(mi: u32, dt: u32) -> CoopA {
    let at = mi * COOP * KV_STRIDE4 + dt * (COOP / 4u);
    let stride = KV_STRIDE4;
    return coopLoadT<CoopA>(&kv_tile[at], stride);
}

// s + Q's dim tile dt (fragment q) times Kᵀ's of key block kb.
fn qk(s: CoopC, q: CoopA, kb: u32, dt: u32) -> CoopC {
    let at = kb * COOP * KV_STRIDE4 + dt * (COOP / 4u);
    let stride = KV_STRIDE4;
    let b = coopLoad<CoopB>(&kv_tile[at], stride);
    return coopMultiplyAdd(q, b, s);
}

// Q_REGS, step B: the S tile of key block kb from the register fragments.
fn score_regs(
    kb: u32,
    q0: CoopA,
    q1: CoopA,
    q2: CoopA,
    q3: CoopA,
    q4: CoopA,
    q5: CoopA,
    q6: CoopA,
    q7: CoopA,
) -> CoopC {
    var s = CoopC();
    s = qk(s, q0, kb, 0u);
    if HEAD_TILES > 1u {
        s = qk(s, q1, kb, 1u);
    }
    if HEAD_TILES > 2u {
        s = qk(s, q2, kb, 2u);
    }
    if HEAD_TILES > 3u {
        s = qk(s, q3, kb, 3u);
    }
    if HEAD_TILES > 4u {
        s = qk(s, q4, kb, 4u);
    }
    if HEAD_TILES > 5u {
        s = qk(s, q5, kb, 5u);
    }
    if HEAD_TILES > 6u {
        s = qk(s, q6, kb, 6u);
    }
    if HEAD_TILES > 7u {
        s = qk(s, q7, kb, 7u);
    }
    return s;
}

// Q_REGS, S_INTERLEAVE, step B: every key block's S tile of row block mi into s_tile, the
// blocks' chains interleaved: dim tile dt's fragment meets key blocks 0..KEY_TILES in turn
// before the next dim tile. (Named accumulators, no struct or array of cooperative matrices:
// an array of them broke on the H200, experiments/NOTES.md.)
fn scores_interleaved(
    mi: u32,
    q0: CoopA,
    q1: CoopA,
    q2: CoopA,
    q3: CoopA,
    q4: CoopA,
    q5: CoopA,
    q6: CoopA,
    q7: CoopA,
) {
    var s0 = CoopC();
    var s1 = CoopC();
    var s2 = CoopC();
    var s3 = CoopC();
    for (var dt = 0u; dt < HEAD_TILES; dt++) {
        // The dim tile's fragment (a select over named values: each is loop-invariant).
        var q = q0;
        switch dt {
            case 1u: { q = q1; }
            case 2u: { q = q2; }
            case 3u: { q = q3; }
            case 4u: { q = q4; }
            case 5u: { q = q5; }
            case 6u: { q = q6; }
            case 7u: { q = q7; }
            default: {}
        }
        s0 = qk(s0, q, 0u, dt);
        if KEY_TILES > 1u {
            s1 = qk(s1, q, 1u, dt);
        }
        if KEY_TILES > 2u {
            s2 = qk(s2, q, 2u, dt);
        }
        if KEY_TILES > 3u {
            s3 = qk(s3, q, 3u, dt);
        }
    }
    store_scores(s0, mi, 0u);
    if KEY_TILES > 1u {
        store_scores(s1, mi, 1u);
    }
    if KEY_TILES > 2u {
        store_scores(s2, mi, 2u);
    }
    if KEY_TILES > 3u {
        store_scores(s3, mi, 3u);
    }
}

// P's fragment of row block mi and key block kb.
fn p_block(mi: u32, kb: u32) -> CoopA {
    let at = mi * COOP * P_STRIDE + kb * COOP;
    let stride = P_STRIDE;
    return coopLoadT<CoopA>(&p_tile[at], stride);
}

// o + P's block times V's rows of key block kb and dims of dim tile dt.
fn pv(o: CoopC, p: CoopA, kb: u32, dt: u32) -> CoopC {
    let at = kb * COOP * KV_STRIDE4 + dt * (COOP / 4u);
    let stride = KV_STRIDE4;
    let v = coopLoadT<CoopB>(&kv_tile[at], stride);
    return coopMultiplyAdd(p, v, o);
}

// The lane's part of a COOP × COOP tile: row lane / ROW_LANES, LANE_COLS columns from this.
fn lane_cell(slot: u32, lane: u32) -> u32 {
    return slot + (lane / ROW_LANES) * COOP + (lane % ROW_LANES) * LANE_COLS;
}

// o with each row times its α (the lane's row's), through the subgroup's o_stage slot. Call from
// workgroup-uniform control flow: its barriers order the slot's store, the lanes' updates and
// the load (and the previous load before this store).
fn scaled(o: CoopC, slot: u32, lane: u32, alpha: f32) -> CoopC {
    let stride = COOP;
    workgroupBarrier();
    coopStoreT(o, &o_stage[slot], stride);
    workgroupBarrier();
    let at = lane_cell(slot, lane);
    for (var c = 0u; c < LANE_COLS; c++) {
        o_stage[at + c] *= alpha;
    }
    workgroupBarrier();
    return coopLoadT<CoopC>(&o_stage[slot], stride);
}

// The lane's row's fold of its runs (attn_prefill_rows.wgsl, key runs): the weights w of the
// run that ends into the runs before it; `kept`, whether any of those is in memory (else the fold
// starts from the empty state).
struct RunsDone {
    w: RunFold,
    kept: bool,
}

// Stores O tile o (dims d0..d0 + COOP of the subgroup's rows; the lane's row is th, its weight
// sum l) through the subgroup's slot: with `last`, the row's output (o / l, or the split's
// partial; folded with the runs before as `runs` says); else (a run's end) folded into the runs
// before in memory. Workgroup-uniform, as `scaled`.
fn write_tile(
    o: CoopC,
    slot: u32,
    lane: u32,
    split: KeySplit,
    th: vec2<u32>,
    d0: u32,
    l: f32,
    runs: RunsDone,
    last: bool,
) {
    let stride = COOP;
    workgroupBarrier();
    coopStoreT(o, &o_stage[slot], stride);
    workgroupBarrier();
    let at = lane_cell(slot, lane);
    let d = d0 + (lane % ROW_LANES) * LANE_COLS;
    if th.x != 0xffffffffu {
        for (var c = 0u; c < LANE_COLS; c++) {
            if d + c < HEAD_DIM {
                let y = o_stage[at + c];
                if last {
                    store_folded(split, th, d + c, runs.w, runs.kept, y, l);
                } else {
                    fold_run(split, th, d + c, runs.w, !runs.kept, y);
                }
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let tile = tile_and_head(wg, groups);
    let row0 = tile.x * BM;
    let g = tile.y;
    if row0 >= step_tokens() * GROUP {
        return;
    }
    // A split without keys runs no key step and stores nothing (no early return: the limit comes
    // from storage, which the cooperative-matrix operations' uniformity rules out).
    let split = key_split(tile_key_limit(row0, BM), wg.z, groups.z);
    let page_row = token_page_row(row0 / GROUP);
    let qscale = params.scale * LOG2_E;
    // This subgroup's row block, its part (key blocks in B, dim tiles in D) and o_stage slot.
    let mi = subgroup / DIM_SPLIT;
    let ni = subgroup % DIM_SPLIT;
    let dt0 = ni * DIM_TILES;
    let slot = subgroup * COOP * COOP;
    // This lane's softmax row (of the row block) and part of it.
    let r = lane / ROW_LANES;
    let part = lane % ROW_LANES;
    let i = mi * COOP + r;
    let me = row_token_head(row0 + i, g);
    let valid = me.x != 0xffffffffu;
    var my_pos = 0u;
    if valid {
        my_pos = token_pos(me.x);
    }

    for (var e = local; e < BM * D4; e += WG) {
        let row = e / D4;
        let d = 4u * (e % D4);
        let q4 = vec4<f32>(
            query_element(row0 + row, g, d, qscale),
            query_element(row0 + row, g, d + 1u, qscale),
            query_element(row0 + row, g, d + 2u, qscale),
            query_element(row0 + row, g, d + 3u, qscale),
        );
        if Q_REGS == 1u {
            kv_tile[row * KV_STRIDE4 + e % D4] = vec4<f16>(q4);
        } else {
            q_tile[row * Q_STRIDE4 + e % D4] = vec4<f16>(q4);
        }
    }
    var q0 = CoopA();
    var q1 = CoopA();
    var q2 = CoopA();
    var q3 = CoopA();
    var q4 = CoopA();
    var q5 = CoopA();
    var q6 = CoopA();
    var q7 = CoopA();
    if Q_REGS == 1u {
        workgroupBarrier();
        q0 = q_fragment(mi, 0u);
        if HEAD_TILES > 1u {
            q1 = q_fragment(mi, 1u);
        }
        if HEAD_TILES > 2u {
            q2 = q_fragment(mi, 2u);
        }
        if HEAD_TILES > 3u {
            q3 = q_fragment(mi, 3u);
        }
        if HEAD_TILES > 4u {
            q4 = q_fragment(mi, 4u);
        }
        if HEAD_TILES > 5u {
            q5 = q_fragment(mi, 5u);
        }
        if HEAD_TILES > 6u {
            q6 = q_fragment(mi, 6u);
        }
        if HEAD_TILES > 7u {
            q7 = q_fragment(mi, 7u);
        }
        // (The prologue's barrier below orders these loads before the first K store.)
    }
    if local == 0u {
        rescale_mark = vec4<u32>(0u);
    }
    var m = NEG;
    var l = 0.0;
    var o0 = CoopC();
    var o1 = CoopC();
    var o2 = CoopC();
    var o3 = CoopC();
    var o4 = CoopC();
    var o5 = CoopC();
    var o6 = CoopC();
    var o7 = CoopC();
    let d0 = dt0 * COOP;
    // Key runs: the fold of the lane's row's finished runs (max, weight sum; their O in memory)
    // and whether one has ended (workgroup-uniform: from the keys alone).
    var run_m = NEG;
    var run_l = 0.0;
    var folded = false;

    set_key_bases(split.begin, min(BN, split.end - split.begin), page_row, g, local);
    workgroupBarrier();
    var k_next = fetch_kv(false, min(BN, split.end - split.begin), local);
    for (var k0 = split.begin; k0 < split.end; k0 += BN) {
        let n_keys = min(BN, split.end - k0);
        if starts_run(k0, split) {
            // The run that ends folded into the runs before it; the next starts from nothing.
            let runs = RunsDone(fold_weights(run_m, m), folded);
            write_tile(o0, slot, lane, split, me, d0, l, runs, false);
            if DIM_TILES > 1u {
                write_tile(o1, slot, lane, split, me, d0 + COOP, l, runs, false);
            }
            if DIM_TILES > 2u {
                write_tile(o2, slot, lane, split, me, d0 + 2u * COOP, l, runs, false);
            }
            if DIM_TILES > 3u {
                write_tile(o3, slot, lane, split, me, d0 + 3u * COOP, l, runs, false);
            }
            if DIM_TILES > 4u {
                write_tile(o4, slot, lane, split, me, d0 + 4u * COOP, l, runs, false);
            }
            if DIM_TILES > 5u {
                write_tile(o5, slot, lane, split, me, d0 + 5u * COOP, l, runs, false);
            }
            if DIM_TILES > 6u {
                write_tile(o6, slot, lane, split, me, d0 + 6u * COOP, l, runs, false);
            }
            if DIM_TILES > 7u {
                write_tile(o7, slot, lane, split, me, d0 + 7u * COOP, l, runs, false);
            }
            o0 = CoopC();
            o1 = CoopC();
            o2 = CoopC();
            o3 = CoopC();
            o4 = CoopC();
            o5 = CoopC();
            o6 = CoopC();
            o7 = CoopC();
            run_m = runs.w.m;
            run_l = fold_into(runs.w, run_l, l);
            folded = true;
            m = NEG;
            l = 0.0;
        }
        // A. (The previous step's last barrier, or the fold's: every subgroup is done with its V
        // and its stage.)
        put_kv(k_next, local);
        workgroupBarrier();

        // B.
        let v_rows = fetch_kv(true, n_keys, local);
        if S_INTERLEAVE == 1u {
            scores_interleaved(mi, q0, q1, q2, q3, q4, q5, q6, q7);
        } else if Q_REGS == 1u {
            for (var kt = 0u; kt < KEY_TILES; kt++) {
                let s_kt = score_regs(kt, q0, q1, q2, q3, q4, q5, q6, q7);
                store_scores(s_kt, mi, kt);
            }
        } else {
            scores(mi, ni * KEY_TILES);
        }
        workgroupBarrier();

        // C.
        put_kv(v_rows, local);
        var s: array<f32, LANE_KEYS>;
        var s_max = NEG;
        for (var u = 0u; u < LANE_KEYS; u++) {
            let jj = part + ROW_LANES * u;
            s[u] = s_tile[i * S_STRIDE + jj];
            if !valid || k0 + jj > my_pos {
                s[u] = NEG;
            }
            s_max = max(s_max, s[u]);
        }
        for (var x = 1u; x < ROW_LANES; x *= 2u) {
            s_max = max(s_max, subgroupShuffleXor(s_max, x));
        }
        var alpha = 1.0;
        if s_max > m + SLACK_LOG2 {
            // m = NEG: the row's first keys (α = 0 on l = 0 and zero o rows: no rescale).
            alpha = exp2(m - s_max);
            m = s_max;
            if l > 0.0 {
                rescale_mark.x = k0 + 1u;
            }
        }
        var part_sum = 0.0;
        for (var u = 0u; u < LANE_KEYS; u++) {
            var p = f16(0.0);
            if s[u] != NEG {
                p = f16(exp2(s[u] - m));
            }
            if ni == 0u {
                p_tile[i * P_STRIDE + part + ROW_LANES * u] = p;
            }
            part_sum += f32(p);
        }
        for (var x = 1u; x < ROW_LANES; x *= 2u) {
            part_sum += subgroupShuffleXor(part_sum, x);
        }
        l = l * alpha + part_sum;
        // Every key address of this step has been used (its V fetched before B's barrier).
        let k_ahead = k0 + BN;
        let n_ahead = min(BN, max(split.end, k_ahead) - k_ahead);
        set_key_bases(k_ahead, n_ahead, page_row, g, local);

        // D.
        let rescale = workgroupUniformLoad(&rescale_mark).x == k0 + 1u;
        k_next = fetch_kv(false, n_ahead, local);
        if rescale {
            o0 = scaled(o0, slot, lane, alpha);
            if DIM_TILES > 1u {
                o1 = scaled(o1, slot, lane, alpha);
            }
            if DIM_TILES > 2u {
                o2 = scaled(o2, slot, lane, alpha);
            }
            if DIM_TILES > 3u {
                o3 = scaled(o3, slot, lane, alpha);
            }
            if DIM_TILES > 4u {
                o4 = scaled(o4, slot, lane, alpha);
            }
            if DIM_TILES > 5u {
                o5 = scaled(o5, slot, lane, alpha);
            }
            if DIM_TILES > 6u {
                o6 = scaled(o6, slot, lane, alpha);
            }
            if DIM_TILES > 7u {
                o7 = scaled(o7, slot, lane, alpha);
            }
        }
        for (var kb = 0u; kb < KEY_BLOCKS; kb++) {
            let p = p_block(mi, kb);
            o0 = pv(o0, p, kb, dt0);
            if DIM_TILES > 1u {
                o1 = pv(o1, p, kb, dt0 + 1u);
            }
            if DIM_TILES > 2u {
                o2 = pv(o2, p, kb, dt0 + 2u);
            }
            if DIM_TILES > 3u {
                o3 = pv(o3, p, kb, dt0 + 3u);
            }
            if DIM_TILES > 4u {
                o4 = pv(o4, p, kb, dt0 + 4u);
            }
            if DIM_TILES > 5u {
                o5 = pv(o5, p, kb, dt0 + 5u);
            }
            if DIM_TILES > 6u {
                o6 = pv(o6, p, kb, dt0 + 6u);
            }
            if DIM_TILES > 7u {
                o7 = pv(o7, p, kb, dt0 + 7u);
            }
        }
        workgroupBarrier();
    }

    // The last run folded into the runs before it as it is stored (none ended: m and l as they
    // are, the old store).
    let runs = RunsDone(fold_weights(run_m, m), folded);
    let out_m = select(m, runs.w.m, folded);
    let out_l = select(l, fold_into(runs.w, run_l, l), folded);
    if part == 0u && ni == 0u && valid {
        store_stats(split, me, out_m, out_l);
    }
    write_tile(o0, slot, lane, split, me, d0, out_l, runs, true);
    if DIM_TILES > 1u {
        write_tile(o1, slot, lane, split, me, d0 + COOP, out_l, runs, true);
    }
    if DIM_TILES > 2u {
        write_tile(o2, slot, lane, split, me, d0 + 2u * COOP, out_l, runs, true);
    }
    if DIM_TILES > 3u {
        write_tile(o3, slot, lane, split, me, d0 + 3u * COOP, out_l, runs, true);
    }
    if DIM_TILES > 4u {
        write_tile(o4, slot, lane, split, me, d0 + 4u * COOP, out_l, runs, true);
    }
    if DIM_TILES > 5u {
        write_tile(o5, slot, lane, split, me, d0 + 5u * COOP, out_l, runs, true);
    }
    if DIM_TILES > 6u {
        write_tile(o6, slot, lane, split, me, d0 + 6u * COOP, out_l, runs, true);
    }
    if DIM_TILES > 7u {
        write_tile(o7, slot, lane, split, me, d0 + 7u * COOP, out_l, runs, true);
    }
}
