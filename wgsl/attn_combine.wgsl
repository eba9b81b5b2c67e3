// attn_combine — the second pass of split-K attention (flash-decoding): merging the key splits of
// one attention row (token b, query head h), shared by attn_decode.wgsl and the prefill kernels
// (attn_prefill_rows.wgsl)
//
// Split s of a row wrote its partial (acc_s [HEAD_DIM], m_s, l_s): acc_s = Σ_{j in s} 2^(s_j − m_s)
// v_j, m_s its largest score (log2 units), l_s = Σ_{j in s} 2^(s_j − m_s). With M = max_s m_s:
//   o = Σ_s 2^(m_s − M) acc_s / Σ_s 2^(m_s − M) l_s
// A split holding none of the row's keys has acc_s = 0, m_s = NEG, l_s = 0 and weighs 0 (the
// callers guarantee that one split has a key, so M is finite and the sum positive).
// Partials: row (b, h) of n_head, split s of n_split at partial_base(b·n_head + h, n_split, s):
// HEAD_DIM floats of acc_s, then m_s, l_s.
// Work: one workgroup of COMBINE_WG per row. The weights 2^(m_s − M) / Σ are computed once per
// split; COMBINE_LANES invocations per vec4 of o each add every COMBINE_LANES-th split (short
// chains rather than one chain of n), loading COMBINE_ROUND of their splits at once, then one
// invocation per vec4 adds their sums.
// requires: consts HEAD_DIM (a multiple of 4), COMBINE_WG; `partials: array<f32>` (read_write);
//           NEG; `fn store_o(b, h, i, x: f32)`: stores what o holds where the attention of row
//           (b, h) gives x at dim i (attn_decode: gated, and kept for its q8 blocks; the prefill
//           kernels: x).
// Key runs (the prefill's f32-tile kernel, issue 21): where a row's keys are summed in runs fixed
// by key position, each run's (m_r, l_r, acc_r) from its own start, the row is their left fold in
// key order, one run at a time:
//   m' = max(m, m_r),  l' = l·2^(m − m') + l_r·2^(m_r − m'),  acc' likewise;  o = acc / l
// with the products fused as fold_into writes them, so a workgroup that folds its runs in
// registers (the unsplit tile) and fold_splits (its runs split over workgroups) give the same
// bits. Folding a run into the empty state (NEG, 0, 0) gives the run exactly, and a run with no
// key of the row (m_r = NEG, l_r = 0, acc_r = 0) changes nothing, so a row's bits depend on its
// keys' runs alone, not on how many runs its tile or split holds.
// provides: MAX_SPLITS, partial_base, combine_splits (call it from workgroup-uniform control
//           flow: it has barriers); RunFold, fold_weights, fold_into, fold_splits (no barriers).

// The most splits a row may have (one weight each in workgroup memory; the host refuses more).
const MAX_SPLITS: u32 = 64u;
const COMBINE_VECS: u32 = HEAD_DIM / 4u;
const COMBINE_LANES: u32 = max(COMBINE_WG / COMBINE_VECS, 1u);
// Splits an invocation loads at once.
const COMBINE_ROUND: u32 = 4u;

// Each split's max m_s; its sum l_s, then its weight 2^(m_s − M) / Σ_s 2^(m_s − M) l_s.
var<workgroup> split_m: array<f32, MAX_SPLITS>;
var<workgroup> split_weight: array<f32, MAX_SPLITS>;
// The split-lane sums, [COMBINE_LANES][COMBINE_VECS].
var<workgroup> combine_sums: array<vec4<f32>, COMBINE_LANES * COMBINE_VECS>;

// Index of split s's partial of attention row `row` (= token · n_head + head).
fn partial_base(row: u32, n_split: u32, s: u32) -> u32 {
    return (row * n_split + s) * (HEAD_DIM + 2u);
}

// Writes o of row (b, h) from the first n splits (of n_split) of its partials; `position` is the
// invocation's index in the workgroup.
fn combine_splits(b: u32, h: u32, n_head: u32, n_split: u32, n: u32, position: u32) {
    let row = b * n_head + h;
    for (var s = position; s < n; s += COMBINE_WG) {
        let at = partial_base(row, n_split, s) + HEAD_DIM;
        split_m[s] = partials[at];
        split_weight[s] = partials[at + 1u];
    }
    workgroupBarrier();
    var big_m = NEG;
    for (var s = 0u; s < n; s++) {
        big_m = max(big_m, split_m[s]);
    }
    var total = 0.0;
    for (var s = 0u; s < n; s++) {
        total += split_weight[s] * exp2(split_m[s] - big_m);
    }
    // Everyone has read the sums before they turn into weights.
    workgroupBarrier();
    for (var s = position; s < n; s += COMBINE_WG) {
        split_weight[s] = exp2(split_m[s] - big_m) / total;
    }
    workgroupBarrier();
    for (var x = position; x < COMBINE_LANES * COMBINE_VECS; x += COMBINE_WG) {
        let e = x % COMBINE_VECS;
        var sum = vec4(0.0);
        // COMBINE_ROUND splits per round, loaded before any is added (independent loads in
        // flight, not a chain of one per split); added in split order, as one at a time would.
        for (var s0 = x / COMBINE_VECS; s0 < n; s0 += COMBINE_ROUND * COMBINE_LANES) {
            var parts: array<vec4<f32>, COMBINE_ROUND>;
            for (var k = 0u; k < COMBINE_ROUND; k++) {
                // Past the last split: split n − 1's (written, finite) partial, not added.
                let at = partial_base(row, n_split, min(s0 + k * COMBINE_LANES, n - 1u)) + 4u * e;
                parts[k] = vec4(partials[at], partials[at + 1u], partials[at + 2u],
                                partials[at + 3u]);
            }
            for (var k = 0u; k < COMBINE_ROUND; k++) {
                let s = s0 + k * COMBINE_LANES;
                if s < n {
                    sum += parts[k] * split_weight[s];
                }
            }
        }
        combine_sums[x] = sum;
    }
    workgroupBarrier();
    for (var e = position; e < COMBINE_VECS; e += COMBINE_WG) {
        var sum = vec4(0.0);
        for (var lane_set = 0u; lane_set < COMBINE_LANES; lane_set++) {
            sum += combine_sums[lane_set * COMBINE_VECS + e];
        }
        for (var c = 0u; c < 4u; c++) {
            store_o(b, h, 4u * e + c, sum[c]);
        }
    }
}

// The weights of a fold of a run of max m_b into a state of max m_a: the new max and the factors
// 2^(m_a − m') and 2^(m_b − m') of each side.
struct RunFold {
    m: f32,
    a: f32,
    b: f32,
}

fn fold_weights(m_a: f32, m_b: f32) -> RunFold {
    let m = max(m_a, m_b);
    return RunFold(m, exp2(m_a - m), exp2(m_b - m));
}

// x·w.a + y·w.b, the fold of a state's sum x with a run's sum y (one fused multiply-add, so no
// compiler contracts it differently in another kernel).
fn fold_into(w: RunFold, x: f32, y: f32) -> f32 {
    return fma(x, w.a, y * w.b);
}

// Writes o of row (b, h) from the first n splits (of n_split) of its partials, each split one key
// run, folded in key order (the runs' rule above): one invocation per dim, each folding the n runs
// itself (a few max and exp2 per run against the run's HEAD_DIM · keys of work).
fn fold_splits(b: u32, h: u32, n_head: u32, n_split: u32, n: u32, position: u32) {
    let row = b * n_head + h;
    for (var d = position; d < HEAD_DIM; d += COMBINE_WG) {
        var m = NEG;
        var l = 0.0;
        var acc = 0.0;
        for (var s = 0u; s < n; s++) {
            let at = partial_base(row, n_split, s);
            let w = fold_weights(m, partials[at + HEAD_DIM]);
            m = w.m;
            l = fold_into(w, l, partials[at + HEAD_DIM + 1u]);
            acc = fold_into(w, acc, partials[at + d]);
        }
        store_o(b, h, d, acc / l);
    }
}
