// attn_decode — attention of one query token per sequence against its paged KV cache
//
// Query row b < step.n_tokens (one per sequence; token_pos(b) = p, page-table row
// token_page_row(b)) attends to the kv_len = p + 1 cached positions 0..=p of its sequence. Query
// head h = g·GROUP + r reads kv head g (GQA, contiguous grouping):
//   s_j = q_h · k_{g,j} / sqrt(HEAD_DIM),  o_h = Σ_j softmax(s)_j v_{g,j}     (f32, online softmax)
// and with an output gate (params.gated: qwen35's gated attention), o_h ⊙= σ(gate_h), gate read
// through params.gate — the elementwise sigmoid_gate's product, folded into the write of o.
// With params.quantize_out, o (gated) is also written as q8 blocks (q8_block.wgsl: the integer
// path's input of W_o, which then needs no quantize dispatch): row b's codes at
// yq[b·n_head·HEAD_DIM/4 ..], its block scales at yd[b·n_head·HEAD_DIM/32 ..] (engine `Q8Vectors`);
// HEAD_DIM is whole blocks (the host checks), so the workgroup that writes a head's o — the
// one-split write, or the combine — keeps it in workgroup memory and rounds its blocks: bit for
// bit what quantize_q8 makes of o.
// Scores carry log2(e) (folded into q) so weights are exp2(s − m).
//
// Layout (flash-decoding, "vector" form as in llama.cpp's fattn-vec and MLX's sdpa_vector):
// - a workgroup owns one (sequence, kv head g, key split), so each key and value row is read once
//   for the GROUP query heads that share it. The keys of a sequence are cut at run time into
//   splits of ⌈kv_len / cut_splits⌉ keys rounded up to whole steps of STEP = TEAMS·KEYS keys,
//   and at least params.split_keys (whole steps: STEP by default; FAK_ATTN_DECODE_SPLIT asks for
//   more) (split_chunks); cut_splits is the binding's n_split unless FAK_ATTN_DECODE_SPLITS caps
//   it. A short context runs few splits, and workgroups past the last split return at once; a
//   long one gets every split. The cut depends on the sequence's kv_len and the binding's
//   params alone (never on the other sequences of the step).
// - a workgroup is TEAMS teams of ROW_LANES lanes. Lane l holds vec4s e = i·ROW_LANES + l
//   (i < LANE_VECS; dims 4e..4e+3, so a row is read with 16-byte loads, consecutive lanes on
//   consecutive vec4s) of the GROUP query heads' q and of their output accumulators, in arrays
//   whose sizes and loop bounds are module constants (the driver can keep them in registers).
//   Each lane adds its partial dot products, the row sum gives every head's score to the whole
//   team, and the team keeps its own running max m and sum l per head (online softmax), with no
//   barrier of its own on the SUBGROUP path. Two forms of a team's walk over its keys (KEYS):
//   · KEYS = 4 (the default): a step gives team t the 4 consecutive keys
//     start + STEP·n + 4t + 0..3. The team loads all 4 rows of K and V at once (8·LANE_VECS
//     independent loads per lane in flight, the page-table reads of the 4 keys independent too),
//     sums the 4 keys' scores of a head in one vec4 butterfly (row_sum4: on the fallback path
//     2 barriers for 4 keys instead of 8), and rescales the head's m, l and accumulators once per
//     step (one exp2(m − m_new) for 4 keys) before adding the 4 weighted values. With AHEAD = 1
//     (FAK_ATTN_DECODE=ahead) the team loads the next step's 4 rows before scoring the current
//     ones (two tiles in flight: the loads overlap the butterflies and exp2); the same
//     arithmetic in the same order, so the same bits as without.
//   · KEYS = 1 (FAK_ATTN_DECODE=old, for A/B runs): team t takes keys start + t, start + t + TEAMS,
//     …, one per step; the rows of its next key are loaded while it scores the current one.
// - at the end the teams merge (m, l, Σ p·v) through workgroup memory, one head at a time, and the
//   split writes its partial, or o directly when the sequence has a single split.
//
// Specialisation (the host prepends `const`s): HEAD_DIM (a multiple of 4), GROUP, ROW_LANES
// (lanes per key row, a power of two: ≤ the adapter's smallest subgroup on the SUBGROUP path),
// KEYS (keys per team and step: 1 or 4, the walk's form), AHEAD (1: with KEYS = 4, the next
// tile loaded before the current one is scored; 0 otherwise).
// Override: TOKEN_TABLE. The caches are bound as vec4 rows (kv_base / 4), declared by
// attn_decode_read.wgsl (read) or, in the form that writes the step's k and v itself,
// attn_decode_rope.wgsl (read_write; its entry point decode_rope, its bindings 12–17).
// bindings: 0 q (read) · 1 k_cache · 2 v_cache · 3 page_table (read)
//           · 4 token_slots (read) · 5 partials (read_write) · 6 o (read_write)
//           · 7 params (uniform) · 8 step (uniform) · 9 gate (read: n_head heads of HEAD_DIM
//           per query row through params.gate; a placeholder when params.gated = 0)
//           · 10 yq (array<u32>, read_write) · 11 yd (array<f32>, read_write): o's q8 codes and
//           scales (placeholders unless params.quantize_out)
// entry points / dispatch:
//   decode  — (cut_splits, n_kv, n_tokens) workgroups of WG. A sequence with one split writes o;
//             otherwise split s writes its partial of row (b, h) at partial_base (attn_combine.wgsl):
//             (Σ p·v [HEAD_DIM], m, l), m in log2 units.
//   combine — (n_head, n_tokens) workgroups of WG: for a sequence of several splits,
//             o = Σ_s e^(m_s − M) acc_s / Σ_s e^(m_s − M) l_s (attn_combine.wgsl's
//             combine_splits); nothing for one split.
// variants: SUBGROUP (row_sum(4)_subgroup: shuffles) | fallback (row_sum(4)_workgroup: workgroup
//           memory, hence every loop around a row sum is workgroup-uniform) × f32 | f16 cache
//           (KvScalar).
// requires: row_sum_subgroup.wgsl + row_sum4_subgroup.wgsl or row_sum_workgroup.wgsl +
//           row_sum4_workgroup.wgsl, kv_f32|kv_f16.wgsl, kv_paged.wgsl,
//           step.wgsl, view.wgsl, positions.wgsl, q8_block.wgsl, attn_combine.wgsl,
//           attn_decode_read.wgsl | attn_decode_rope.wgsl (and what it requires).

struct Params {
    kv: KvGeometry,
    q: View,
    o: View,
    gate: View,
    n_head: u32,
    n_split: u32,
    // 1/sqrt(head_dim)
    scale: f32,
    // 1: o ⊙= σ(gate).
    gated: u32,
    // 1: o also as q8 blocks into yq, yd.
    quantize_out: u32,
    // The fewest keys a split holds: whole steps of STEP, STEP unless the host asks for more.
    split_keys: u32,
    // The most splits a sequence is cut into: n_split unless the host caps it lower (the
    // partials keep n_split's layout).
    cut_splits: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> page_table: array<u32>;
@group(0) @binding(4) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;
@group(0) @binding(7) var<uniform> params: Params;
@group(0) @binding(8) var<uniform> step: Step;
@group(0) @binding(9) var<storage, read> gate: array<f32>;
@group(0) @binding(10) var<storage, read_write> yq: array<u32>;
@group(0) @binding(11) var<storage, read_write> yd: array<f32>;

override TOKEN_TABLE: bool = false;

// Teams per workgroup; a split covers whole steps of STEP keys, KEYS per team.
const TEAMS: u32 = 8u;
const WG: u32 = TEAMS * ROW_LANES;
const STEP: u32 = TEAMS * KEYS;
// A row is HEAD_VECS groups of 4 dims; a lane holds LANE_VECS of them, the last ones of a lane
// possibly past the row when 4·ROW_LANES does not divide HEAD_DIM.
const HEAD_VECS: u32 = HEAD_DIM / 4u;
const LANE_VECS: u32 = (HEAD_VECS + ROW_LANES - 1u) / ROW_LANES;
const COMBINE_WG: u32 = WG;
// Finite stand-in for −∞: exp2(NEG − m) is 0 for any real m, and NEG − NEG is no NaN.
const NEG: f32 = -3.0e38;
const LOG2_E: f32 = 1.4426950408889634;

// Each team's running max and sum per query head: [TEAMS][GROUP].
var<workgroup> team_m: array<f32, TEAMS * GROUP>;
var<workgroup> team_l: array<f32, TEAMS * GROUP>;
// One query head's rescaled accumulators of every team, [TEAMS][ROW_LANES·LANE_VECS] by vec4
// index within the row.
var<workgroup> team_acc: array<vec4<f32>, WG * LANE_VECS>;
// quantize_out: the head's o as written, for its q8 blocks.
var<workgroup> head_out: array<f32, HEAD_DIM>;

// A lane's vec4s of the GROUP query heads (pre-scaled into log2 units) or of their output
// accumulators: [GROUP][LANE_VECS].
alias HeadLanes = array<array<vec4<f32>, LANE_VECS>, GROUP>;

// Where a team walks: the sequence's page-table row, the kv head, the split's keys
// [start, end), the team and the lane's index in its row.
struct Walk {
    page_row: u32,
    g: u32,
    start: u32,
    end: u32,
    team: u32,
    lane: u32,
}

// How a sequence of kv_len keys is cut: `size` keys per split (at least one step, whole steps),
// `count` splits holding keys (≤ n_split); the decode and combine passes agree on it.
struct Chunks {
    size: u32,
    count: u32,
}

// Stores o of row (b, h) at dim i for the attention x: x, gated by σ(gate) where the layer has an
// output gate (the same expression as elementwise.wgsl's sigmoid_gate, so the same bits); kept
// in head_out for the q8 blocks under quantize_out.
fn store_o(b: u32, h: u32, i: u32, x: f32) {
    var value = x;
    if params.gated != 0u {
        value = x * (1.0 / (1.0 + exp(-gate[view_index(params.gate, b, h, i)])));
    }
    o[view_index(params.o, b, h, i)] = value;
    if params.quantize_out != 0u {
        head_out[i] = value;
    }
}

// quantize_out: row b's q8 blocks of head h from head_out (after a barrier: every invocation
// may have stored some of it).
fn quantize_head(b: u32, h: u32, position: u32) {
    let width = params.n_head * HEAD_DIM;
    for (var block = position; block < HEAD_DIM / 32u; block += WG) {
        var v: array<vec4<f32>, 8>;
        for (var j = 0u; j < 8u; j++) {
            let at = 32u * block + 4u * j;
            v[j] = vec4<f32>(head_out[at], head_out[at + 1u], head_out[at + 2u],
                             head_out[at + 3u]);
        }
        let q = q8_block(v);
        let column = h * HEAD_DIM + 32u * block;
        let codes = b * (width / 4u) + column / 4u;
        for (var j = 0u; j < 8u; j++) {
            yq[codes + j] = q.codes[j];
        }
        yd[b * (width / 32u) + column / 32u] = q.d;
    }
}

fn split_chunks(kv_len: u32) -> Chunks {
    let per_split = (kv_len + params.cut_splits - 1u) / params.cut_splits;
    let size = max((per_split + STEP - 1u) / STEP * STEP, params.split_keys);
    return Chunks(size, (kv_len + size - 1u) / size);
}

// Vec4 i of a lane within its row, clamped into the row: a lane's vec4s past the row read a real
// one of the same row (finite) against a zero query, and their accumulators are never written out.
fn lane_vec(i: u32, lane: u32) -> u32 {
    return min(i * ROW_LANES + lane, HEAD_VECS - 1u);
}

// This lane's vec4s of key `pos`'s key and value rows (kv head g).
fn load_rows(
    page_row: u32,
    g: u32,
    pos: u32,
    lane: u32,
    k_lane: ptr<function, array<vec4<f32>, LANE_VECS>>,
    v_lane: ptr<function, array<vec4<f32>, LANE_VECS>>,
) {
    let row = kv_base(params.kv, page_row, pos, g) / 4u;
    for (var i = 0u; i < LANE_VECS; i++) {
        let at = row + lane_vec(i, lane);
        (*k_lane)[i] = vec4<f32>(k_cache[at]);
        (*v_lane)[i] = vec4<f32>(v_cache[at]);
    }
}

// KEYS = 1: team t takes keys start + t, start + t + TEAMS, …; the rows of its next key are
// loaded while it scores the current one. A key past `end` reads the last key instead and is
// skipped (the fallback's row_sum needs every team in every step).
fn walk_one_key(
    w: Walk,
    q_lane: ptr<function, HeadLanes>,
    m: ptr<function, array<f32, GROUP>>,
    l: ptr<function, array<f32, GROUP>>,
    acc: ptr<function, HeadLanes>,
    lanes: RowLanes,
) {
    let end = w.end;
    var k_next: array<vec4<f32>, LANE_VECS>;
    var v_next: array<vec4<f32>, LANE_VECS>;
    load_rows(w.page_row, w.g, min(w.start + w.team, end - 1u), w.lane, &k_next, &v_next);
    for (var j0 = w.start; j0 < end; j0 += TEAMS) {
        let k_lane = k_next;
        let v_lane = v_next;
        load_rows(w.page_row, w.g, min(j0 + TEAMS + w.team, end - 1u), w.lane, &k_next, &v_next);
        let live = j0 + w.team < end;
        for (var r = 0u; r < GROUP; r++) {
            var part = 0.0;
            for (var i = 0u; i < LANE_VECS; i++) {
                part += dot((*q_lane)[r][i], k_lane[i]);
            }
            // Branch-free: a key past `end` leaves m (alpha = 1) and adds p = 0.
            let score = row_sum(part, lanes);
            let m_new = select((*m)[r], max((*m)[r], score), live);
            let alpha = exp2((*m)[r] - m_new);
            let p = select(0.0, exp2(score - m_new), live);
            (*l)[r] = (*l)[r] * alpha + p;
            (*m)[r] = m_new;
            for (var i = 0u; i < LANE_VECS; i++) {
                (*acc)[r][i] = (*acc)[r][i] * alpha + p * v_lane[i];
            }
        }
    }
}

// KEYS = 4: a step gives team t keys first = j0 + 4t .. first + 3, their rows in the cache's own
// type (f16: half the registers). Keys past `end` read the last key instead (the fallback's
// row_sum4 needs every team in every step) and are masked by score_tile.
struct Tile {
    k: array<array<vec4<KvScalar>, LANE_VECS>, KEYS>,
    v: array<array<vec4<KvScalar>, LANE_VECS>, KEYS>,
}

// Loads this lane's vec4s of the rows of keys first .. first + KEYS − 1 (clamped to end − 1).
fn load_tile(w: Walk, first: u32) -> Tile {
    var tile: Tile;
    for (var u = 0u; u < KEYS; u++) {
        let row = kv_base(params.kv, w.page_row, min(first + u, w.end - 1u), w.g) / 4u;
        for (var i = 0u; i < LANE_VECS; i++) {
            let at = row + lane_vec(i, w.lane);
            tile.k[u][i] = k_cache[at];
            tile.v[u][i] = v_cache[at];
        }
    }
    return tile;
}

// Adds keys first .. first + KEYS − 1 of `tile` (those below `end`) to every head's online
// softmax: a head's four scores take one vec4 butterfly, and its state is rescaled once. Keys
// past `end` score NEG and weigh 0.
fn score_tile(
    tile: ptr<function, Tile>,
    first: u32,
    end: u32,
    q_lane: ptr<function, HeadLanes>,
    m: ptr<function, array<f32, GROUP>>,
    l: ptr<function, array<f32, GROUP>>,
    acc: ptr<function, HeadLanes>,
    lanes: RowLanes,
) {
    for (var r = 0u; r < GROUP; r++) {
        var part = vec4(0.0);
        for (var u = 0u; u < KEYS; u++) {
            var dot_u = 0.0;
            for (var i = 0u; i < LANE_VECS; i++) {
                dot_u += dot((*q_lane)[r][i], vec4<f32>((*tile).k[u][i]));
            }
            part[u] = dot_u;
        }
        let sums = row_sum4(part, lanes);
        var scores = vec4(NEG);
        var step_max = NEG;
        for (var u = 0u; u < KEYS; u++) {
            scores[u] = select(NEG, sums[u], first + u < end);
            step_max = max(step_max, scores[u]);
        }
        let m_new = max((*m)[r], step_max);
        let alpha = exp2((*m)[r] - m_new);
        var head_acc = (*acc)[r];
        for (var i = 0u; i < LANE_VECS; i++) {
            head_acc[i] *= alpha;
        }
        var step_sum = 0.0;
        for (var u = 0u; u < KEYS; u++) {
            // A dead key: exp2(NEG − m_new) is 0 unless m_new is NEG too (a team with no
            // live key yet), hence the select.
            let p = select(0.0, exp2(scores[u] - m_new), first + u < end);
            step_sum += p;
            for (var i = 0u; i < LANE_VECS; i++) {
                head_acc[i] += p * vec4<f32>((*tile).v[u][i]);
            }
        }
        (*acc)[r] = head_acc;
        (*l)[r] = (*l)[r] * alpha + step_sum;
        (*m)[r] = m_new;
    }
}

// KEYS = 4: each step's tile is loaded, then scored. With AHEAD = 1 the next step's tile is
// loaded before the current one is scored (two tiles in flight per team: its loads overlap the
// scoring, whose butterflies and exp2 otherwise leave the memory idle); the step after the last
// reads the last key again (a cached row, never scored).
fn walk_key_tiles(
    w: Walk,
    q_lane: ptr<function, HeadLanes>,
    m: ptr<function, array<f32, GROUP>>,
    l: ptr<function, array<f32, GROUP>>,
    acc: ptr<function, HeadLanes>,
    lanes: RowLanes,
) {
    let end = w.end;
    var next: Tile;
    if AHEAD != 0u {
        next = load_tile(w, w.start + w.team * KEYS);
    }
    for (var j0 = w.start; j0 < end; j0 += STEP) {
        let first = j0 + w.team * KEYS;
        var tile: Tile;
        if AHEAD != 0u {
            tile = next;
            next = load_tile(w, first + STEP);
        } else {
            tile = load_tile(w, first);
        }
        score_tile(&tile, first, end, q_lane, m, l, acc, lanes);
    }
}

// The keys of sequence b that workgroup (s, g, b) walks: uniform across the workgroup (no lane
// in it, so a barrier may follow a branch on it). `live` is false for a row past the step or a
// split past the sequence's last.
struct Split {
    live: bool,
    b: u32,
    g: u32,
    s: u32,
    // Splits holding keys: s + 1 == count is the split that holds position kv_len − 1.
    count: u32,
    page_row: u32,
    start: u32,
    end: u32,
}

fn split_of(wg: vec3<u32>) -> Split {
    var split: Split;
    split.s = wg.x;
    split.g = wg.y;
    split.b = wg.z;
    split.live = false;
    if split.b >= step.n_tokens {
        return split;
    }
    let kv_len = token_pos(split.b) + 1u;
    let chunks = split_chunks(kv_len);
    split.count = chunks.count;
    split.page_row = token_page_row(split.b);
    split.start = split.s * chunks.size;
    split.end = min(split.start + chunks.size, kv_len);
    split.live = split.s < chunks.count;
    return split;
}

// Walks the split's keys for the GROUP query heads of q_lane (this lane's vec4s, pre-scaled into
// log2 units: [GROUP][LANE_VECS]), merges the teams and writes the split's partials, or o where
// the sequence has a single split.
fn attend(sp: Split, q_lane: ptr<function, HeadLanes>, lanes: RowLanes) {
    let b = sp.b;
    let g = sp.g;
    let position = lane_position(lanes);
    let team = position / ROW_LANES;
    let lane = position % ROW_LANES;
    var m: array<f32, GROUP>;
    var l: array<f32, GROUP>;
    var acc: HeadLanes;
    for (var r = 0u; r < GROUP; r++) {
        m[r] = NEG;
        l[r] = 0.0;
        for (var i = 0u; i < LANE_VECS; i++) {
            acc[r][i] = vec4(0.0);
        }
    }

    let walk = Walk(sp.page_row, g, sp.start, sp.end, team, lane);
    if KEYS == 1u {
        walk_one_key(walk, q_lane, &m, &l, &acc, lanes);
    } else {
        walk_key_tiles(walk, q_lane, &m, &l, &acc, lanes);
    }

    if lane == 0u {
        for (var r = 0u; r < GROUP; r++) {
            team_m[team * GROUP + r] = m[r];
            team_l[team * GROUP + r] = l[r];
        }
    }
    workgroupBarrier();
    let single = sp.count == 1u;
    let team_row = team * ROW_LANES * LANE_VECS;
    for (var r = 0u; r < GROUP; r++) {
        // Every invocation derives the split's max and sum of head r; a team without keys has
        // m = NEG, l = 0 and weighs 0.
        var big_m = NEG;
        for (var t = 0u; t < TEAMS; t++) {
            big_m = max(big_m, team_m[t * GROUP + r]);
        }
        var total = 0.0;
        for (var t = 0u; t < TEAMS; t++) {
            total += team_l[t * GROUP + r] * exp2(team_m[t * GROUP + r] - big_m);
        }
        let own = exp2(m[r] - big_m);
        for (var i = 0u; i < LANE_VECS; i++) {
            team_acc[team_row + i * ROW_LANES + lane] = acc[r][i] * own;
        }
        workgroupBarrier();
        let h = g * GROUP + r;
        for (var d = position; d < HEAD_DIM; d += WG) {
            var sum = 0.0;
            for (var t = 0u; t < TEAMS; t++) {
                sum += team_acc[t * ROW_LANES * LANE_VECS + d / 4u][d % 4u];
            }
            if single {
                store_o(b, h, d, sum / total);
            } else {
                partials[partial_base(b * params.n_head + h, params.n_split, sp.s) + d] = sum;
            }
        }
        if single && params.quantize_out != 0u {
            workgroupBarrier();
            quantize_head(b, h, position);
        }
        if !single && position == 0u {
            let at = partial_base(b * params.n_head + h, params.n_split, sp.s) + HEAD_DIM;
            partials[at] = big_m;
            partials[at + 1u] = total;
        }
        // The next head overwrites team_acc.
        workgroupBarrier();
    }
}

// Workgroup wg loads its GROUP query heads and walks its split (nothing where the split is not
// live).
@compute @workgroup_size(WG)
fn decode(@builtin(workgroup_id) wg: vec3<u32>, lanes: RowLanes) {
    let sp = split_of(wg);
    if !sp.live {
        return;
    }
    let lane = lane_position(lanes) % ROW_LANES;
    // This lane's vec4s of the GROUP query heads, pre-scaled into log2 units.
    let qscale = params.scale * LOG2_E;
    var q_lane: HeadLanes;
    for (var r = 0u; r < GROUP; r++) {
        for (var i = 0u; i < LANE_VECS; i++) {
            let e = i * ROW_LANES + lane;
            var x = vec4(0.0);
            if e < HEAD_VECS {
                let at = view_index(params.q, sp.b, sp.g * GROUP + r, 4u * e);
                x = vec4(q[at], q[at + 1u], q[at + 2u], q[at + 3u]) * qscale;
            }
            q_lane[r][i] = x;
        }
    }
    attend(sp, &q_lane, lanes);
}

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wg: vec3<u32>, lanes: RowLanes) {
    let h = wg.x;
    let b = wg.y;
    if b >= step.n_tokens {
        return;
    }
    let n = split_chunks(token_pos(b) + 1u).count;
    if n == 1u {
        return;
    }
    let position = lane_position(lanes);
    combine_splits(b, h, params.n_head, params.n_split, n, position);
    if params.quantize_out != 0u {
        workgroupBarrier();
        quantize_head(b, h, position);
    }
}
