// attn_prefill_rows — bindings, parameters, row addressing, key splits and the combine pass
// shared by the two prefill-attention kernels (attn_prefill.wgsl: f32 tiles;
// attn_prefill_coop.wgsl: cooperative matrices)
//
// A tile's rows are consecutive (token, query head) pairs of one kv head g, row ρ = t·GROUP + r
// for query head h = g·GROUP + r, so the tile's key and value rows serve all GROUP heads of its
// tokens (GQA read sharing) and its causal limit is its last token's position.
// Key splits (flash-decoding for prefill): a kernel's dispatch has z = S splits (S from the host,
// read back as num_workgroups.z, so no uniform changes between steps). Workgroup (x, y, s) walks
// split s of the keys 0..limit of its row tile and kv head (tile_and_head: tile x of kv head y
// in the default order), cut into whole runs of SPLIT_KEYS (key_split): a tile with keys for one
// split only writes o itself; otherwise each split that holds keys writes every row's partial
// (Σ 2^(s_j − m) v_j, m, l) over its keys — a row none of whose keys fall in the split writes
// (0, NEG, 0) — and splits without keys return at once. The combine entry point merges them
// (attn_combine.wgsl).
// bindings: 0 q (read) · 1 k_cache (read) · 2 v_cache (read) · 3 page_table (read)
//           · 4 token_slots (read) · 5 o (read_write) · 6 params (uniform) · 7 step (uniform)
//           · 8 partials (read_write: n_tokens·n_head·S partials of HEAD_DIM + 2 floats)
// entry point combine: (ceil(n_tokens / S), n_head, S) workgroups of COMBINE_WG; workgroup
//   (x, h, z) merges row (token x·S + z, head h) when its tile has keys for several splits.
// Key runs: a kernel whose RUN_KEYS is not 0 sums each row's keys in runs of RUN_KEYS from key 0,
// each from its own online-softmax start, folded in key order (attn_combine.wgsl), split or not:
// a row's bits then do not depend on the step's size, its tiles or its splits (issue 21). With
// RUN_KEYS = 0 splits cut each tile's keys evenly and the combine weighs them at once: a row split
// otherwise sums otherwise. A kernel that cannot keep a second accumulator set (the
// cooperative-matrix kernels: O lives in their matrices) folds through memory: at a run's end
// its lanes fold their rows' O into the finished runs' sum kept where the row's result goes
// (fold_run: o where the tile has one split with keys, else the split's partial; only the lane
// that stores a (row, dim) reads it back), and the last run is folded as it is stored
// (store_folded; where no run ended before it, the old store: a row of ≤ RUN_KEYS keys keeps its
// bits).
// requires: consts HEAD_DIM (a multiple of 4), GROUP, the kernel's BM and RUN_KEYS; kv_f32|kv_f16.wgsl,
//           kv_paged.wgsl, step.wgsl, view.wgsl, positions.wgsl, attn_combine.wgsl.
// provides: the bindings, override TOKEN_TABLE; NEG, LOG2_E, SPLIT_KEYS; step_tokens,
//           tile_and_head, row_token_head, query_element, cache_element, cache_quad, tile_key_limit, KeySplit,
//           key_split, store_output, store_stats, starts_run, fold_run, store_folded, store_o (x itself: a
//           prompt step applies an output gate as an op of its own); the entry point combine.

struct Params {
    kv: KvGeometry,
    q: View,
    o: View,
    scale: f32,
    // Tokens the q/o bindings hold (the binding's max_tokens): a Step asking for more reads no
    // further.
    max_tokens: u32,
    // The order in which a dispatch's workgroups take their row tiles (tile_and_head).
    order: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
// The caches as quads (head_dim is a multiple of 4, so a row's quads are whole): 16- or 8-byte
// loads for the cooperative-matrix kernel's staging, as attn_decode.wgsl.
@group(0) @binding(1) var<storage, read> k_cache: array<vec4<KvScalar>>;
@group(0) @binding(2) var<storage, read> v_cache: array<vec4<KvScalar>>;
@group(0) @binding(3) var<storage, read> page_table: array<u32>;
@group(0) @binding(4) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;
@group(0) @binding(7) var<uniform> step: Step;
@group(0) @binding(8) var<storage, read_write> partials: array<f32>;

override TOKEN_TABLE: bool = false;

// Stores o of row (token b, head h) at dim i for the attention x (attn_combine.wgsl): x itself.
fn store_o(b: u32, h: u32, i: u32, x: f32) {
    o[view_index(params.o, b, h, i)] = x;
}

// The masked score (scores are finite, so any exp2 of NEG minus a score is 0).
const NEG: f32 = -3.0e38;
const LOG2_E: f32 = 1.4426950408889634;
// Splits cut a tile's keys into runs of whole SPLIT_KEYS (a multiple of every kernel's key step:
// 32 for attn_prefill.wgsl, 32 or 64 for attn_prefill_coop.wgsl).
const SPLIT_KEYS: u32 = 64u;
const COMBINE_WG: u32 = 128u;

fn step_tokens() -> u32 {
    return min(step.n_tokens, params.max_tokens);
}

// (token, query head) of tile row ρ of kv head g; x = 0xffffffff past the last row.
fn row_token_head(rho: u32, g: u32) -> vec2<u32> {
    if rho >= step_tokens() * GROUP {
        return vec2<u32>(0xffffffffu, 0u);
    }
    return vec2<u32>(rho / GROUP, g * GROUP + rho % GROUP);
}

// Query element d of row ρ times qscale (scale · log2 e, so scores are in log2 units); 0 past
// the last row or head_dim, so padded tiles add nothing.
fn query_element(rho: u32, g: u32, d: u32, qscale: f32) -> f32 {
    let th = row_token_head(rho, g);
    if th.x == 0xffffffffu || d >= HEAD_DIM {
        return 0.0;
    }
    return q[view_index(params.q, th.x, th.y, d)] * qscale;
}

// The row tile (x) and kv head (y) workgroup wg of a dispatch of groups.x row tiles × groups.y kv
// heads (× key splits) computes. Order 0: tile wg.x of kv head wg.y. Order 1, longest first: the
// workgroups, in the order the GPU starts them (x fastest, then y), take the row tiles from the
// last down, all kv heads of a tile together. A causal step's last tile has the most keys (one
// sequence: each tile a key step more than the one before), and a step of more workgroups than
// the GPU holds at once (the 8B's 2048 tokens: 512 of them, one an SM) runs its workgroups as SMs
// free up: in order 0 the longest start last and the step waits on their tail (166 key steps of
// wave for 126 of work a multiprocessor), longest first lets the short ones fill in behind (127).
// The same tiles, rows, splits and keys either way, so the same bits (experiments/NOTES.md
// "attn2k").
fn tile_and_head(wg: vec3<u32>, groups: vec3<u32>) -> vec2<u32> {
    if params.order == 0u {
        return wg.xy;
    }
    let i = wg.y * groups.x + wg.x;
    return vec2<u32>(groups.x - 1u - i / groups.y, i % groups.y);
}

// Keys the tile of rows row0..row0 + rows (row0 < n_rows) attends to: 0..=its last token's
// position.
fn tile_key_limit(row0: u32, rows: u32) -> u32 {
    let last_token = (min(row0 + rows, step_tokens() * GROUP) - 1u) / GROUP;
    return token_pos(last_token) + 1u;
}

// Element d of the key (values false) or value row whose element 0 sits at base, as f32.
fn cache_element(values: bool, base: u32, d: u32) -> f32 {
    let at = base + d;
    if values {
        return f32(v_cache[at / 4u][at % 4u]);
    }
    return f32(k_cache[at / 4u][at % 4u]);
}

// Elements 4·i..4·i + 3 of the key (values false) or value row whose element 0 sits at base
// (a multiple of 4), as stored.
fn cache_quad(values: bool, base: u32, i: u32) -> vec4<KvScalar> {
    let at = base / 4u + i;
    if values {
        return v_cache[at];
    }
    return k_cache[at];
}

// Split `index` of `n` of a tile's keys 0..key_limit: begin..end (empty for index ≥ count), and
// `count` ≤ n, the splits that hold keys (each ⌈steps / n⌉ runs of SPLIT_KEYS; split 0 always
// holds key 0). A kernel of key runs (RUN_KEYS > 0) splits whole runs instead, ⌈runs / n⌉ each:
// one run a split when n covers the tile's runs (the host's rule for it), which is what lets the
// combine fold them as the unsplit tile does (attn_combine.wgsl).
struct KeySplit {
    begin: u32,
    end: u32,
    index: u32,
    count: u32,
    n: u32,
}

fn key_split(key_limit: u32, index: u32, n: u32) -> KeySplit {
    // The unit a split holds whole: a key run, or a split step where the kernel has no runs.
    let unit = select(RUN_KEYS, SPLIT_KEYS, RUN_KEYS == 0u);
    let per = ((key_limit + unit - 1u) / unit + n - 1u) / n * unit;
    let begin = min(index * per, key_limit);
    return KeySplit(begin, min(begin + per, key_limit), index, (key_limit + per - 1u) / per, n);
}

// Element d of row th = (token, query head): o = acc / l where the tile has one split with keys,
// else the split's partial acc; nothing from a split without keys.
fn store_output(split: KeySplit, th: vec2<u32>, d: u32, acc: f32, l: f32) {
    if split.index >= split.count {
        return;
    }
    if split.count == 1u {
        o[view_index(params.o, th.x, th.y, d)] = acc / l;
    } else {
        let row = th.x * params.kv.n_kv * GROUP + th.y;
        partials[partial_base(row, split.n, split.index) + d] = acc;
    }
}

// The split's row max m and sum l of row th (nothing where the tile has one split with keys, or
// from a split without keys).
fn store_stats(split: KeySplit, th: vec2<u32>, m: f32, l: f32) {
    if split.count > 1u && split.index < split.count {
        let row = th.x * params.kv.n_kv * GROUP + th.y;
        let at = partial_base(row, split.n, split.index) + HEAD_DIM;
        partials[at] = m;
        partials[at + 1u] = l;
    }
}

// Key runs: whether the split's key step from k0 starts a run other than its first (the run
// before it ends there).
fn starts_run(k0: u32, split: KeySplit) -> bool {
    return RUN_KEYS != 0u && k0 > split.begin && k0 < split.end && k0 % max(RUN_KEYS, 1u) == 0u;
}

// Where element d of row th's finished runs' sum is kept: o where the tile has one split with
// keys, else the split's partial (which its last store overwrites in place).
fn run_at(split: KeySplit, th: vec2<u32>, d: u32) -> u32 {
    if split.count == 1u {
        return view_index(params.o, th.x, th.y, d);
    }
    let row = th.x * params.kv.n_kv * GROUP + th.y;
    return partial_base(row, split.n, split.index) + d;
}

fn load_run(split: KeySplit, th: vec2<u32>, d: u32) -> f32 {
    if split.count == 1u {
        return o[run_at(split, th, d)];
    }
    return partials[run_at(split, th, d)];
}

// Key runs: element d (y) of row th's run that just ended folded, with the weights w of its row's
// fold, into the runs before it (none yet where `first`: the fold of the empty state, the run
// itself), kept in memory for the next fold.
fn fold_run(split: KeySplit, th: vec2<u32>, d: u32, w: RunFold, first: bool, y: f32) {
    if split.index >= split.count {
        return;
    }
    var x = 0.0;
    if !first {
        x = load_run(split, th, d);
    }
    let at = run_at(split, th, d);
    if split.count == 1u {
        o[at] = fold_into(w, x, y);
    } else {
        partials[at] = fold_into(w, x, y);
    }
}

// store_output of element d (y) of row th's last run: folded (weights w) into the runs before it
// where any ended (`folded`), l the folded sum; else y itself, as a kernel without runs stores it.
fn store_folded(split: KeySplit, th: vec2<u32>, d: u32, w: RunFold, folded: bool, y: f32, l: f32) {
    var x = y;
    if folded && split.index < split.count {
        x = fold_into(w, load_run(split, th, d), y);
    }
    store_output(split, th, d, x, l);
}

@compute @workgroup_size(COMBINE_WG)
fn combine(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let t = wg.x * groups.z + wg.z;
    let h = wg.y;
    if t >= step_tokens() {
        return;
    }
    // The row's tile (of kv head h / GROUP) and how many of its splits hold keys.
    let row0 = (t * GROUP + h % GROUP) / BM * BM;
    let count = key_split(tile_key_limit(row0, BM), 0u, groups.z).count;
    if count == 1u {
        return;
    }
    if RUN_KEYS == 0u {
        combine_splits(t, h, params.kv.n_kv * GROUP, groups.z, count, local);
    } else {
        fold_splits(t, h, params.kv.n_kv * GROUP, groups.z, count, local);
    }
}
