// attn_prefill_flash — the prefill attention of attn_prefill_coop.wgsl (same math, rows, splits,
// lazy reference max and result) on a schedule with two workgroup barriers per key step and every
// global load issued a whole phase before its value is stored
//
// Math: as attn_prefill_coop.wgsl — per row a reference max m (moved only when the row max
// outgrows it by more than SLACK, log2 units), l and o = Σ_j 2^(s_j − m) v_j, o / l at the end
// (or the split's partial o, m, l); Q, K, V and P rounded to f16, S and O accumulated in f32.
//
// Why another schedule (experiments/NOTES.md, "attnpf"): the staged kernel takes ~12 000 SM
// cycles per 64-row × 64-key step for ~1000 cycles of MMAs and a few hundred of softmax: per step
// it drains four workgroup barriers with one or two workgroups per SM, and three of its phases
// start by waiting on memory — the page-table reads for the next keys (written to workgroup
// memory behind a barrier before any K load can start), the K loads issued just before the
// short P·V phase, the V loads just before the S MMAs. Here:
//   - K and V have tiles of their own, and P·V runs one step behind S: per step, barrier A
//     publishes K(t), V(t − 1), P(t − 1) and the rescale mark (workgroupUniformLoad), then every
//     subgroup computes O += P(t − 1)·V(t − 1) and S(t) = Q·K(t)ᵀ back to back (4 × HEAD_TILES
//     MMAs); barrier B ends every read of both tiles and publishes S, then K(t + 1) and V(t) are
//     stored, K(t + 2) and V(t + 1) fetched, and the softmax of S(t) writes P(t). Two barriers,
//     and the loads of a step are in flight through a softmax and a whole MMA phase.
//   - No key-base table: each invocation finds its rows through the page table as it fetches
//     them. Rows past the split's end repeat its last key (finite values; their scores are masked
//     and their weights 0), so no load sits behind a branch.
//   - S and P stay in per-subgroup slabs (S f32, read back as vec4s, 2 lanes a row reduced with
//     one shuffle; P f16 written as 8-byte quads).
//   - Q is loaded once (every load issued before the first is used), staged per subgroup
//     through its P slab two dim tiles at a time, and kept in fragments q0..q7 for the whole key
//     loop; O stays in the accumulators o0..o7 (a rescale, or the final write two tiles at a
//     time, goes through the subgroup's S slab).
//   - BM = ROW_BLOCKS · COOP rows (128, 64 or 32: 8, 4 or 2 subgroups of one row block each),
//     key steps of KEY_STEP = 32: K, V and the slabs fit 48 KiB at head 128 (128 rows: 46 096
//     bytes); the 32-row tile gives short prompts four times the workgroups.
// (WGSL's subgroupBarrier orders only "subgroup memory" in SPIR-V, not workgroup memory, and
// needs a feature of its own: so every slab access is ordered by the workgroup barriers.)
//
// LEAN = 1 (the lean step, experiments/NOTES.md "flash2"): the same MMAs on the same values in
// the same order per tile, so the same bits, with less on a step's critical path:
//   - where a page holds whole key steps (2^page_shift ≥ KEY_STEP: steps start at multiples of
//     KEY_STEP, so a step's keys, clamped to the split, share one page), one page-table read per
//     fetched step, issued right after barrier A (its latency under the MMAs) instead of one
//     dependent read per fetched quad after barrier B; smaller pages take the per-key path;
//   - S(t)'s two MMA chains interleaved with P(t − 1)·V(t − 1)'s independent MMAs (each dim
//     tile: two S links, then that tile's P·V), so the chains' latency fills with P·V's issue
//     rather than trailing the phase;
//   - the causal mask and the masked-weight select only on steps that reach past the lane's
//     row's position (the diagonal step, or a row past the step's tokens).
// RUN_KEYS ≠ 0 (key runs, issue 21; attn_prefill_rows.wgsl): the softmax of a key step starting
// on a multiple of RUN_KEYS past the split's first starts from nothing (m = NEG, l = 0; the run
// that ended keeps its m and l in registers), and since P·V runs a step behind, the next step's
// start folds O — then the ended run's whole sum — through the S slab into the finished runs' sum
// in memory (one stage round trip, without the load back) and sets O = 0 before P·V adds the new
// run's first step: each run computed as a split starting there would. The final store folds the
// last run (a tile whose keys fit one run stores as before). Both kernel forms (plain, lean)
// do the same at the same place in their step.
//
// bindings: see attn_prefill_rows.wgsl (one bind-group layout for every prefill kernel).
// dispatch: (ceil(n_tokens·GROUP / BM), n_kv, S) workgroups of WG = ROW_BLOCKS·32, each over one
//           key split of its tile (attn_prefill_rows.wgsl; combine after it when S > 1).
// pipelines: module consts HEAD_DIM, GROUP and the override TOKEN_TABLE as attn_prefill.wgsl; the
//            module consts ROW_BLOCKS, KEY_STEP, HEAD_TILES (≤ 8 dim tiles: head ≤ 128 on 16×16),
//            SLACK, LEAN (0 or 1), RUN_KEYS (0 or 512) from the host (engine
//            `attn_prefill::CoopTile`, form `Flash`, `lean`), which also
//            checks the workgroup memory of main below against the device.
// variants: after the shape file matmul_coop16.wgsl (Vulkan); `enable f16; enable
//           wgpu_cooperative_matrix;` from the variant, which requires SUBGROUP and, on the
//           host, subgroups exactly 32 wide.
// requires: kv_f32|kv_f16.wgsl, kv_paged.wgsl, step.wgsl, view.wgsl, positions.wgsl,
//           attn_combine.wgsl, attn_prefill_rows.wgsl, a shape file; the consts above.
// naga 30: cooperative values are single named values (no arrays or structs of them: an array
// broke on the H200), their pointers and strides go through `let`s, and coop ops sit only under
// workgroup-uniform branches (a subgroup-uniform one is refused).

const SUBGROUP_WIDTH: u32 = 32u;
const SUBGROUPS: u32 = ROW_BLOCKS;
const WG: u32 = SUBGROUPS * SUBGROUP_WIDTH;
const BM: u32 = ROW_BLOCKS * COOP;
const BN: u32 = KEY_STEP;
// Quads of a padded head and of one step's K (or V) rows; those each invocation moves.
const D4: u32 = HEAD_TILES * COOP / 4u;
const STEP_QUADS: u32 = BN * D4;
const QUADS: u32 = (STEP_QUADS + WG - 1u) / WG;
// Row strides in vec4s: the K/V tiles and P slab 8 halves past the row (so the 16-byte row
// segments of one fragment load fall in different banks, as matmul_x16.wgsl), the S slab 4 floats.
const KV_STRIDE4: u32 = D4 + 2u;
const S_STRIDE4: u32 = BN / 4u + 1u;
const P_STRIDE4: u32 = BN / 4u + 2u;
// Softmax lanes per row, the keys (and quads of them) each scores, the O columns each scales.
const ROW_LANES: u32 = SUBGROUP_WIDTH / COOP;
const LANE_KEYS: u32 = BN / ROW_LANES;
const LANE_QUADS: u32 = LANE_KEYS / 4u;
const LANE_COLS: u32 = COOP / ROW_LANES;
// Q staged through the P slab: dim tiles per round (a P slab row holds BN halves), a row's quads
// of a round, and each lane's.
const Q_PASS_TILES: u32 = BN / COOP;
const Q_ROW_QUADS: u32 = Q_PASS_TILES * COOP / 4u;
const Q_LANE_QUADS: u32 = COOP * Q_ROW_QUADS / SUBGROUP_WIDTH;
const SLACK_LOG2: f32 = f32(SLACK);
const_assert BN == 2u * COOP && COOP == 16u && ROW_LANES == 2u;
const_assert HEAD_TILES <= 8u && HEAD_DIM <= HEAD_TILES * COOP;
// Splits hold whole key steps, so keys past a split's end are past the causal limit too.
const_assert SPLIT_KEYS % BN == 0u;
// Runs hold whole key steps (RUN_KEYS 0: splits cut the keys evenly).
const_assert RUN_KEYS % SPLIT_KEYS == 0u;

var<workgroup> k_tile: array<vec4<f16>, BN * KV_STRIDE4>;
var<workgroup> v_tile: array<vec4<f16>, BN * KV_STRIDE4>;
// Each subgroup's S tiles (f32, COOP rows) and P (f16), by subgroup.
var<workgroup> s_slab: array<vec4<f32>, SUBGROUPS * COOP * S_STRIDE4>;
var<workgroup> p_slab: array<vec4<f16>, SUBGROUPS * COOP * P_STRIDE4>;
// The last key step (k0 + 1) on which some row moved its reference max (a whole 16 bytes: a lone
// 4-byte workgroup variable broke the coop kernels on the H200, experiments/NOTES.md).
var<workgroup> rescale_mark: vec4<u32>;

// This invocation's quads of the K (values false) or V rows of keys k0..k0 + BN, as stored: key
// rows past `end` (the split's end) repeat key end − 1, dims past HEAD_DIM are zero.
fn fetch_rows(
    values: bool,
    k0: u32,
    end: u32,
    page_row: u32,
    g: u32,
    local: u32,
) -> array<vec4<KvScalar>, QUADS> {
    var out: array<vec4<KvScalar>, QUADS>;
    for (var u = 0u; u < QUADS; u++) {
        let e = min(local + u * WG, STEP_QUADS - 1u);
        let i = e % D4;
        let key = min(k0 + e / D4, end - 1u);
        let base = kv_base(params.kv, page_row, key, g);
        let quad = cache_quad(values, base, min(i, HEAD_DIM / 4u - 1u));
        out[u] = select(vec4<KvScalar>(), quad, 4u * i < HEAD_DIM);
    }
    return out;
}

// Lean step: whether a page holds whole key steps (so a step's keys share one page).
fn pages_hold_steps() -> bool {
    return (1u << params.kv.page_shift) >= BN;
}

// Lean step: the element index of kv head g's slot 0 in the page holding keys k0..k0 + BN as
// fetched (clamped to end − 1, the split's last key: one page when pages hold whole steps, k0 a
// multiple of BN; a split without keys repeats its last key).
fn step_page(k0: u32, end: u32, page_row: u32, g: u32) -> u32 {
    let key = min(k0, end - 1u);
    let page = page_table[page_row * params.kv.pages_per_row + (key >> params.kv.page_shift)];
    return ((page * params.kv.n_kv + g) << params.kv.page_shift) * params.kv.head_dim;
}

// fetch_rows for the lean step: through `page` (step_page of k0) where pages hold whole steps,
// else key by key; the same quads either way.
fn fetch_step(
    values: bool,
    k0: u32,
    end: u32,
    page: u32,
    page_row: u32,
    g: u32,
    local: u32,
) -> array<vec4<KvScalar>, QUADS> {
    if !pages_hold_steps() {
        return fetch_rows(values, k0, end, page_row, g, local);
    }
    let slot_mask = (1u << params.kv.page_shift) - 1u;
    var out: array<vec4<KvScalar>, QUADS>;
    for (var u = 0u; u < QUADS; u++) {
        let e = min(local + u * WG, STEP_QUADS - 1u);
        let i = e % D4;
        let key = min(k0 + e / D4, end - 1u);
        let base = page + (key & slot_mask) * params.kv.head_dim;
        let quad = cache_quad(values, base, min(i, HEAD_DIM / 4u - 1u));
        out[u] = select(vec4<KvScalar>(), quad, 4u * i < HEAD_DIM);
    }
    return out;
}

// Stores fetched quads into the K (values false) or V tile.
fn put_rows(values: bool, quads: array<vec4<KvScalar>, QUADS>, local: u32) {
    for (var u = 0u; u < QUADS; u++) {
        let e = local + u * WG;
        if e < STEP_QUADS {
            let at = (e / D4) * KV_STRIDE4 + e % D4;
            if values {
                v_tile[at] = vec4<f16>(quads[u]);
            } else {
                k_tile[at] = vec4<f16>(quads[u]);
            }
        }
    }
}

// Q's elements d..d + 3 of row ρ (d a multiple of 4) times qscale, loaded without a branch (so a
// lane's loads of every round issue together): zero past the step's last row or HEAD_DIM.
fn q_quad(rho: u32, g: u32, d: u32, qscale: f32) -> vec4<f32> {
    let rows = step_tokens() * GROUP;
    let th = row_token_head(min(rho, rows - 1u), g);
    let at = view_index(params.q, th.x, th.y, min(d, HEAD_DIM - 4u));
    let v = vec4<f32>(q[at], q[at + 1u], q[at + 2u], q[at + 3u]) * qscale;
    return select(vec4<f32>(0.0), v, (rho < rows) & (d < HEAD_DIM));
}

// This lane's quads of Q's dims Q_PASS_TILES·COOP·round.. for row block mi (f16, scaled to log2
// units): what put_q stages in the subgroup's P slab for q_fragment.
fn load_q(
    mi: u32,
    round: u32,
    row0: u32,
    g: u32,
    qscale: f32,
    lane: u32,
) -> array<vec4<f16>, Q_LANE_QUADS> {
    var out: array<vec4<f16>, Q_LANE_QUADS>;
    for (var u = 0u; u < Q_LANE_QUADS; u++) {
        let e = lane + u * SUBGROUP_WIDTH;
        let rho = row0 + mi * COOP + e / Q_ROW_QUADS;
        let d = round * Q_PASS_TILES * COOP + 4u * (e % Q_ROW_QUADS);
        out[u] = vec4<f16>(q_quad(rho, g, d, qscale));
    }
    return out;
}

fn put_q(mi: u32, quads: array<vec4<f16>, Q_LANE_QUADS>, lane: u32) {
    for (var u = 0u; u < Q_LANE_QUADS; u++) {
        let e = lane + u * SUBGROUP_WIDTH;
        p_slab[(mi * COOP + e / Q_ROW_QUADS) * P_STRIDE4 + e % Q_ROW_QUADS] = quads[u];
    }
}

// Dim tile `half` (0 or 1) of the round staged by put_q.
fn q_fragment(mi: u32, half: u32) -> CoopA {
    let at = mi * COOP * P_STRIDE4 + half * (COOP / 4u);
    let stride = P_STRIDE4;
    return coopLoadT<CoopA>(&p_slab[at], stride);
}

// s + Q's dim tile dt (fragment q) times Kᵀ's of key block kb (a function of its own: naga 30
// refuses a coop op in main on a fragment loaded at a subgroup-dependent place, uniform control
// flow or not).
fn qk(s: CoopC, q: CoopA, kb: u32, dt: u32) -> CoopC {
    let at = kb * COOP * KV_STRIDE4 + dt * (COOP / 4u);
    let stride = KV_STRIDE4;
    let b = coopLoad<CoopB>(&k_tile[at], stride);
    return coopMultiplyAdd(q, b, s);
}

fn store_scores(s: CoopC, mi: u32, kb: u32) {
    let at = mi * COOP * S_STRIDE4 + kb * (COOP / 4u);
    let stride = S_STRIDE4;
    coopStoreT(s, &s_slab[at], stride);
}

// P's fragment of row block mi and key block kb.
fn p_block(mi: u32, kb: u32) -> CoopA {
    let at = mi * COOP * P_STRIDE4 + kb * (COOP / 4u);
    let stride = P_STRIDE4;
    return coopLoadT<CoopA>(&p_slab[at], stride);
}

// o + the step's P (key blocks 0 and 1: p0, p1) times V's dim tile dt.
fn pv(o: CoopC, p0: CoopA, p1: CoopA, dt: u32) -> CoopC {
    let stride = KV_STRIDE4;
    let at0 = dt * (COOP / 4u);
    let v0 = coopLoadT<CoopB>(&v_tile[at0], stride);
    let at1 = at0 + COOP * KV_STRIDE4;
    let v1 = coopLoadT<CoopB>(&v_tile[at1], stride);
    return coopMultiplyAdd(p1, v1, coopMultiplyAdd(p0, v0, o));
}

// The lane's part of row block mi's COOP × COOP stage (the first COOP columns of its S slab): row
// lane / ROW_LANES, LANE_COLS columns (2 quads) from this.
fn lane_cell(mi: u32, lane: u32) -> u32 {
    return (mi * COOP + lane / ROW_LANES) * S_STRIDE4 + (lane % ROW_LANES) * (LANE_COLS / 4u);
}

// o with each row times its α (the lane's row's), through the S slab. Workgroup-uniform (its
// barriers order the stage's store, the lanes' updates and the load, and the previous load before
// this store).
fn scaled(o: CoopC, mi: u32, lane: u32, alpha: f32) -> CoopC {
    let at = mi * COOP * S_STRIDE4;
    let stride = S_STRIDE4;
    workgroupBarrier();
    coopStoreT(o, &s_slab[at], stride);
    workgroupBarrier();
    let cell = lane_cell(mi, lane);
    s_slab[cell] *= alpha;
    s_slab[cell + 1u] *= alpha;
    workgroupBarrier();
    return coopLoadT<CoopC>(&s_slab[at], stride);
}

// The lane's row's fold of its runs (attn_prefill_rows.wgsl, key runs): the weights w of the
// run that ends into the runs before it; `kept`, whether any of those is in memory (else the fold
// starts from the empty state).
struct RunsDone {
    w: RunFold,
    kept: bool,
}

// Stores O tiles oa and ob (dims d0..d0 + 2·COOP of row block mi; the lane's row is th, its
// weight sum l) through the S slab, side by side: with `last`, the row's output (o / l, or the
// split's partial; folded with the runs before as `runs` says); else (a run's end) folded into
// the runs before in memory. Workgroup-uniform, as `scaled`.
fn write_pair(
    oa: CoopC,
    ob: CoopC,
    mi: u32,
    lane: u32,
    split: KeySplit,
    th: vec2<u32>,
    d0: u32,
    l: f32,
    runs: RunsDone,
    last: bool,
) {
    let at = mi * COOP * S_STRIDE4;
    let at_b = at + COOP / 4u;
    let stride = S_STRIDE4;
    workgroupBarrier();
    coopStoreT(oa, &s_slab[at], stride);
    coopStoreT(ob, &s_slab[at_b], stride);
    workgroupBarrier();
    if th.x != 0xffffffffu {
        for (var t = 0u; t < 2u; t++) {
            let cell = lane_cell(mi, lane) + t * (COOP / 4u);
            let d = d0 + t * COOP + (lane % ROW_LANES) * LANE_COLS;
            for (var c = 0u; c < LANE_COLS; c++) {
                if d + c < HEAD_DIM {
                    let y = s_slab[cell + c / 4u][c % 4u];
                    if last {
                        store_folded(split, th, d + c, runs.w, runs.kept, y, l);
                    } else {
                        fold_run(split, th, d + c, runs.w, !runs.kept, y);
                    }
                }
            }
        }
    }
}

// The lane's softmax row (each of its ROW_LANES lanes holds the same): the reference max m, the
// weight sum l and the last step's α (1: the reference stayed).
struct SoftRow {
    m: f32,
    l: f32,
    alpha: f32,
}

// The softmax's first half: the lane's scores of keys k0 + part·LANE_KEYS.. (from its subgroup's
// S slab at s_at) into `s`, masked past its row's position (my_pos; every key of an invalid row),
// and the row moved to their max: α and m, and the rescale mark set to k0 + BN + 1 where a row
// with weight moved its reference. Whether no key was masked (`plain`, for soften_weights).
fn soften_scores(
    row: ptr<function, SoftRow>,
    s: ptr<function, array<vec4<f32>, LANE_QUADS>>,
    s_at: u32,
    k0: u32,
    part: u32,
    valid: bool,
    my_pos: u32,
) -> bool {
    var s_max = NEG;
    // Lean step: a step wholly at or before the row's position masks nothing (its scores
    // are finite, never NEG, so its weights need no select either).
    let plain = LEAN != 0u && valid && k0 + BN <= my_pos + 1u;
    if plain {
        for (var c = 0u; c < LANE_QUADS; c++) {
            let v = s_slab[s_at + c];
            (*s)[c] = v;
            s_max = max(s_max, max(max(v.x, v.y), max(v.z, v.w)));
        }
    } else {
        for (var c = 0u; c < LANE_QUADS; c++) {
            let key = vec4<u32>(k0 + part * LANE_KEYS + 4u * c) + vec4<u32>(0u, 1u, 2u, 3u);
            let masked = (key > vec4<u32>(my_pos)) | vec4<bool>(!valid);
            let v = select(s_slab[s_at + c], vec4<f32>(NEG), masked);
            (*s)[c] = v;
            s_max = max(s_max, max(max(v.x, v.y), max(v.z, v.w)));
        }
    }
    s_max = max(s_max, subgroupShuffleXor(s_max, 1u));
    (*row).alpha = 1.0;
    if s_max > (*row).m + SLACK_LOG2 {
        // m = NEG: the row's first keys (α = 0 on l = 0 and zero o rows: no rescale).
        (*row).alpha = exp2((*row).m - s_max);
        (*row).m = s_max;
        if (*row).l > 0.0 {
            rescale_mark.x = k0 + BN + 1u;
        }
    }
    return plain;
}

// The softmax's second half: the lane's weights 2^(s − m) (0 where masked) into its subgroup's
// P slab at p_at (f16), and the row's weight sum l (of the rounded weights).
fn soften_weights(
    row: ptr<function, SoftRow>,
    s: array<vec4<f32>, LANE_QUADS>,
    plain: bool,
    p_at: u32,
) {
    let m = (*row).m;
    var part_sum = 0.0;
    if plain {
        for (var c = 0u; c < LANE_QUADS; c++) {
            let p = vec4<f16>(exp2(s[c] - m));
            p_slab[p_at + c] = p;
            part_sum += dot(vec4<f32>(p), vec4<f32>(1.0));
        }
    } else {
        for (var c = 0u; c < LANE_QUADS; c++) {
            let p = vec4<f16>(select(exp2(s[c] - m), vec4<f32>(0.0), s[c] == vec4<f32>(NEG)));
            p_slab[p_at + c] = p;
            part_sum += dot(vec4<f32>(p), vec4<f32>(1.0));
        }
    }
    part_sum += subgroupShuffleXor(part_sum, 1u);
    (*row).l = (*row).l * (*row).alpha + part_sum;
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
    // This subgroup's row block; this lane's softmax row of it and its keys' part of the step.
    let mi = subgroup;
    let r = lane / ROW_LANES;
    let part = lane % ROW_LANES;
    let me = row_token_head(row0 + mi * COOP + r, g);
    let valid = me.x != 0xffffffffu;
    var my_pos = 0u;
    if valid {
        my_pos = token_pos(me.x);
    }

    // Q: every round's loads issued at once, then staged two dim tiles at a time through the P
    // slab.
    var q0 = CoopA();
    var q1 = CoopA();
    var q2 = CoopA();
    var q3 = CoopA();
    var q4 = CoopA();
    var q5 = CoopA();
    var q6 = CoopA();
    var q7 = CoopA();
    let q_round0 = load_q(mi, 0u, row0, g, qscale, lane);
    var q_round1: array<vec4<f16>, Q_LANE_QUADS>;
    var q_round2: array<vec4<f16>, Q_LANE_QUADS>;
    var q_round3: array<vec4<f16>, Q_LANE_QUADS>;
    if HEAD_TILES > 2u {
        q_round1 = load_q(mi, 1u, row0, g, qscale, lane);
    }
    if HEAD_TILES > 4u {
        q_round2 = load_q(mi, 2u, row0, g, qscale, lane);
    }
    if HEAD_TILES > 6u {
        q_round3 = load_q(mi, 3u, row0, g, qscale, lane);
    }
    put_q(mi, q_round0, lane);
    workgroupBarrier();
    q0 = q_fragment(mi, 0u);
    if HEAD_TILES > 1u {
        q1 = q_fragment(mi, 1u);
    }
    if HEAD_TILES > 2u {
        workgroupBarrier();
        put_q(mi, q_round1, lane);
        workgroupBarrier();
        q2 = q_fragment(mi, 0u);
        if HEAD_TILES > 3u {
            q3 = q_fragment(mi, 1u);
        }
    }
    if HEAD_TILES > 4u {
        workgroupBarrier();
        put_q(mi, q_round2, lane);
        workgroupBarrier();
        q4 = q_fragment(mi, 0u);
        if HEAD_TILES > 5u {
            q5 = q_fragment(mi, 1u);
        }
    }
    if HEAD_TILES > 6u {
        workgroupBarrier();
        put_q(mi, q_round3, lane);
        workgroupBarrier();
        q6 = q_fragment(mi, 0u);
        if HEAD_TILES > 7u {
            q7 = q_fragment(mi, 1u);
        }
    }
    // The first step's P·V is of a step before the split: P and V zero, so it adds exactly 0.
    workgroupBarrier();
    for (var e = local; e < SUBGROUPS * COOP * P_STRIDE4; e += WG) {
        p_slab[e] = vec4<f16>();
    }
    for (var e = local; e < BN * KV_STRIDE4; e += WG) {
        v_tile[e] = vec4<f16>();
    }
    if local == 0u {
        rescale_mark = vec4<u32>(0u);
    }
    var row = SoftRow(NEG, 0.0, 1.0);
    // The lane's scores of a step in its subgroup's S slab, its weights in the P slab.
    let s_at = (mi * COOP + r) * S_STRIDE4 + part * LANE_QUADS;
    let p_at = (mi * COOP + r) * P_STRIDE4 + part * LANE_QUADS;
    var o0 = CoopC();
    var o1 = CoopC();
    var o2 = CoopC();
    var o3 = CoopC();
    var o4 = CoopC();
    var o5 = CoopC();
    var o6 = CoopC();
    var o7 = CoopC();

    // Prologue: K(0) stored; K(1) and V(0) in flight. (Rows clamp to the split's keys, so these
    // loads are in bounds even for a split without keys.)
    var k_rows = fetch_rows(false, split.begin, split.end, page_row, g, local);
    var v_rows = fetch_rows(true, split.begin, split.end, page_row, g, local);
    put_rows(false, k_rows, local);
    if split.begin + BN < split.end {
        k_rows = fetch_rows(false, split.begin + BN, split.end, page_row, g, local);
    }
    // S of the step the MMAs compute.
    var s0 = CoopC();
    var s1 = CoopC();
    var k0 = split.begin;
    // Lean step: the page of the next V fetch's keys (read a step ahead, with K's).
    var page_v = 0u;
    if LEAN != 0u {
        page_v = step_page(split.begin + BN, split.end, page_row, g);
    }
    // Key runs: the fold of the lane's row's finished runs (max, weight sum; their O in memory),
    // the run that ended last (its m and l: its O is complete a step later), and whether one has
    // been folded (workgroup-uniform: from the keys alone).
    var run_m = NEG;
    var run_l = 0.0;
    var ended = SoftRow(NEG, 0.0, 1.0);
    var folded = false;
    loop {
        if k0 > split.begin + BN && starts_run(k0 - BN, split) {
            // O holds the run that ended a step ago, whole (this step's P·V is the new run's
            // first): folded into the runs before it; the mark's load below is the barrier
            // after the stage's last read.
            let runs = RunsDone(fold_weights(run_m, ended.m), folded);
            write_pair(o0, o1, mi, lane, split, me, 0u, ended.l, runs, false);
            if HEAD_TILES > 2u {
                write_pair(o2, o3, mi, lane, split, me, 2u * COOP, ended.l, runs, false);
            }
            if HEAD_TILES > 4u {
                write_pair(o4, o5, mi, lane, split, me, 4u * COOP, ended.l, runs, false);
            }
            if HEAD_TILES > 6u {
                write_pair(o6, o7, mi, lane, split, me, 6u * COOP, ended.l, runs, false);
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
            run_l = fold_into(runs.w, run_l, ended.l);
            folded = true;
        }
        // A: K(t), V(t − 1), P(t − 1) and the mark visible. The mark is the key step after the
        // one whose softmax moved some row's reference (+ 1: never 0, the cleared mark).
        let rescale = workgroupUniformLoad(&rescale_mark).x == k0 + 1u;
        if rescale {
            o0 = scaled(o0, mi, lane, row.alpha);
            if HEAD_TILES > 1u {
                o1 = scaled(o1, mi, lane, row.alpha);
            }
            if HEAD_TILES > 2u {
                o2 = scaled(o2, mi, lane, row.alpha);
            }
            if HEAD_TILES > 3u {
                o3 = scaled(o3, mi, lane, row.alpha);
            }
            if HEAD_TILES > 4u {
                o4 = scaled(o4, mi, lane, row.alpha);
            }
            if HEAD_TILES > 5u {
                o5 = scaled(o5, mi, lane, row.alpha);
            }
            if HEAD_TILES > 6u {
                o6 = scaled(o6, mi, lane, row.alpha);
            }
            if HEAD_TILES > 7u {
                o7 = scaled(o7, mi, lane, row.alpha);
            }
            // Every stage load done before S(t)'s stores reuse the slab.
            workgroupBarrier();
        }
        if starts_run(k0, split) {
            // This step's softmax starts a run (the rescale above was the run before's last).
            ended = row;
            row = SoftRow(NEG, 0.0, 1.0);
        }
        // Lean step: the page of K(t + 2)'s keys, its read in flight through the MMAs.
        var page_k = 0u;
        if LEAN != 0u {
            page_k = step_page(k0 + 2u * BN, split.end, page_row, g);
        }
        let p0 = p_block(mi, 0u);
        let p1 = p_block(mi, 1u);
        // The lean step runs P·V here only where no S comes with it (past the split's last
        // step), else interleaved with S below.
        let last = k0 >= split.end;
        if LEAN == 0u || last {
            o0 = pv(o0, p0, p1, 0u);
            if HEAD_TILES > 1u {
                o1 = pv(o1, p0, p1, 1u);
            }
            if HEAD_TILES > 2u {
                o2 = pv(o2, p0, p1, 2u);
            }
            if HEAD_TILES > 3u {
                o3 = pv(o3, p0, p1, 3u);
            }
            if HEAD_TILES > 4u {
                o4 = pv(o4, p0, p1, 4u);
            }
            if HEAD_TILES > 5u {
                o5 = pv(o5, p0, p1, 5u);
            }
            if HEAD_TILES > 6u {
                o6 = pv(o6, p0, p1, 6u);
            }
            if HEAD_TILES > 7u {
                o7 = pv(o7, p0, p1, 7u);
            }
        }
        if k0 >= split.end {
            break;
        }
        s0 = CoopC();
        s1 = CoopC();
        var s: array<vec4<f32>, LANE_QUADS>;
        if LEAN != 0u {
            // Each dim tile's two S links, then that tile's P·V (no dependence between them).
            s0 = qk(s0, q0, 0u, 0u);
            s1 = qk(s1, q0, 1u, 0u);
            o0 = pv(o0, p0, p1, 0u);
            if HEAD_TILES > 1u {
                s0 = qk(s0, q1, 0u, 1u);
                s1 = qk(s1, q1, 1u, 1u);
                o1 = pv(o1, p0, p1, 1u);
            }
            if HEAD_TILES > 2u {
                s0 = qk(s0, q2, 0u, 2u);
                s1 = qk(s1, q2, 1u, 2u);
                o2 = pv(o2, p0, p1, 2u);
            }
            if HEAD_TILES > 3u {
                s0 = qk(s0, q3, 0u, 3u);
                s1 = qk(s1, q3, 1u, 3u);
                o3 = pv(o3, p0, p1, 3u);
            }
            if HEAD_TILES > 4u {
                s0 = qk(s0, q4, 0u, 4u);
                s1 = qk(s1, q4, 1u, 4u);
                o4 = pv(o4, p0, p1, 4u);
            }
            if HEAD_TILES > 5u {
                s0 = qk(s0, q5, 0u, 5u);
                s1 = qk(s1, q5, 1u, 5u);
                o5 = pv(o5, p0, p1, 5u);
            }
            if HEAD_TILES > 6u {
                s0 = qk(s0, q6, 0u, 6u);
                s1 = qk(s1, q6, 1u, 6u);
                o6 = pv(o6, p0, p1, 6u);
            }
            if HEAD_TILES > 7u {
                s0 = qk(s0, q7, 0u, 7u);
                s1 = qk(s1, q7, 1u, 7u);
                o7 = pv(o7, p0, p1, 7u);
            }
        } else {
            s0 = qk(s0, q0, 0u, 0u);
            s1 = qk(s1, q0, 1u, 0u);
            if HEAD_TILES > 1u {
                s0 = qk(s0, q1, 0u, 1u);
                s1 = qk(s1, q1, 1u, 1u);
            }
            if HEAD_TILES > 2u {
                s0 = qk(s0, q2, 0u, 2u);
                s1 = qk(s1, q2, 1u, 2u);
            }
            if HEAD_TILES > 3u {
                s0 = qk(s0, q3, 0u, 3u);
                s1 = qk(s1, q3, 1u, 3u);
            }
            if HEAD_TILES > 4u {
                s0 = qk(s0, q4, 0u, 4u);
                s1 = qk(s1, q4, 1u, 4u);
            }
            if HEAD_TILES > 5u {
                s0 = qk(s0, q5, 0u, 5u);
                s1 = qk(s1, q5, 1u, 5u);
            }
            if HEAD_TILES > 6u {
                s0 = qk(s0, q6, 0u, 6u);
                s1 = qk(s1, q6, 1u, 6u);
            }
            if HEAD_TILES > 7u {
                s0 = qk(s0, q7, 0u, 7u);
                s1 = qk(s1, q7, 1u, 7u);
            }
        }
        let k_next = k0 + BN;
        store_scores(s0, mi, 0u);
        store_scores(s1, mi, 1u);

        // B: every read of K(t) and V(t − 1) done, S(t) visible.
        workgroupBarrier();
        if k_next < split.end {
            put_rows(false, k_rows, local);
            if k_next + BN < split.end {
                if LEAN != 0u {
                    k_rows = fetch_step(false, k_next + BN, split.end, page_k, page_row, g, local);
                } else {
                    k_rows = fetch_rows(false, k_next + BN, split.end, page_row, g, local);
                }
            }
        }
        put_rows(true, v_rows, local);
        if k_next < split.end {
            if LEAN != 0u {
                v_rows = fetch_step(true, k_next, split.end, page_v, page_row, g, local);
            } else {
                v_rows = fetch_rows(true, k_next, split.end, page_row, g, local);
            }
        }
        page_v = page_k;
        let plain = soften_scores(&row, &s, s_at, k0, part, valid, my_pos);
        soften_weights(&row, s, plain, p_at);
        k0 = k_next;
    }

    // The last run folded into the runs before it as it is stored (none ended: m and l as they
    // are, the old store).
    let runs = RunsDone(fold_weights(run_m, row.m), folded);
    let out_m = select(row.m, runs.w.m, folded);
    let out_l = select(row.l, fold_into(runs.w, run_l, row.l), folded);
    if part == 0u && valid {
        store_stats(split, me, out_m, out_l);
    }
    write_pair(o0, o1, mi, lane, split, me, 0u, out_l, runs, true);
    if HEAD_TILES > 2u {
        write_pair(o2, o3, mi, lane, split, me, 2u * COOP, out_l, runs, true);
    }
    if HEAD_TILES > 4u {
        write_pair(o4, o5, mi, lane, split, me, 4u * COOP, out_l, runs, true);
    }
    if HEAD_TILES > 6u {
        write_pair(o6, o7, mi, lane, split, me, 6u * COOP, out_l, runs, true);
    }
}
