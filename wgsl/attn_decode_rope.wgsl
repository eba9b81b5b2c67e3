// attn_decode_rope — the decode attention with rope_kv folded in: each workgroup norms and
// rotates its own query heads, and the split that holds the new position writes its k and v
//
// One decode step per sequence b at position p = token_pos(b), as attn_decode.wgsl's decode
// entry (the same walk, merge, partials, combine), but from the projections' raw q, k, v instead
// of rope_kv's output: what rope_kv.wgsl computes for a decode token, done inside the workgroups
// that read it, so the step has no rope_kv dispatch.
// - Workgroup (s, g, b) norms and rotates query heads g·GROUP .. g·GROUP + GROUP − 1 itself, one
//   at a time through workgroup memory (head_out), and scales each lane's vec4s into q_lane as
//   the default loads them from rope_kv's q_out: every split repeats it (GROUP heads of
//   HEAD_DIM floats from L2, against the split's K and V rows).
// - The split that holds position p (s + 1 = the sequence's split count; no other split reads
//   p) first norms and rotates k head g, writes k_p and v_p into the cache (paged; no write where
//   p is past its row or its page past the cache, as rope_kv), then storageBarrier(), then walks:
//   its own writes are the only ones of the step it reads.
// - Bits: rope_kv's. The sum of squares of a head runs over ROPE_LANES (rope_kv's workgroup)
//   invocations in rope_kv's stride order, and workgroup_sum adds the other invocations' zeros:
//   each subgroup partial and each tree level is the same sum as in a workgroup of ROPE_LANES
//   (wherever subgroups are formed from consecutive invocations of one width, as on NVIDIA and
//   lavapipe; the host builds this form only where rope_kv's reduction is the same kind and
//   WG ≥ ROPE_LANES). The scale, pairing and rotation are rope_angle.wgsl's shared functions,
//   the norm weights multiply as rope_kv's head_value does, and k is rounded to KvScalar once,
//   on its way into the cache. So o, the partials and the cache rows are the default's bits.
// bindings: attn_decode.wgsl's 0 (q: the raw projection, params.q its view) and 3–11, plus
//           1 k_cache, 2 v_cache (read_write) · 12 k_in (read) · 13 v_in (read) · 14 q_norm
//           (read) · 15 k_norm (read; both placeholders without norms) · 16 table (read: the
//           RopeTable) · 17 rope (uniform: RopeParams).
// dispatch: as attn_decode's decode; the combine entry point is attn_decode.wgsl's, over the
//           same bindings.
// requires: attn_decode.wgsl (and what it requires but attn_decode_read.wgsl), reduce_*.wgsl
//           (Lanes, workgroup_sum), row_lanes_*.wgsl, rope_angle.wgsl; const ROPE_LANES.

struct RopeParams {
    k: View,
    v: View,
    half_rot: u32,
    neox: u32,
    has_norm: u32,
    eps: f32,
    // Physical pages in the cache.
    n_pages: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(1) var<storage, read_write> k_cache: array<vec4<KvScalar>>;
@group(0) @binding(2) var<storage, read_write> v_cache: array<vec4<KvScalar>>;
@group(0) @binding(12) var<storage, read> k_in: array<f32>;
@group(0) @binding(13) var<storage, read> v_in: array<f32>;
@group(0) @binding(14) var<storage, read> q_norm: array<f32>;
@group(0) @binding(15) var<storage, read> k_norm: array<f32>;
@group(0) @binding(16) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(17) var<uniform> rope: RopeParams;

// Element i of the raw head at src of q (is_q) or k.
fn raw_head(is_q: bool, src: u32, i: u32) -> f32 {
    if is_q {
        return q[src + i];
    }
    return k_in[src + i];
}

// Element i of that head normed (rope_kv.wgsl's head_value: (x·scale)·w).
fn normed_head(is_q: bool, src: u32, i: u32, scale: f32) -> f32 {
    var x = raw_head(is_q, src, i) * scale;
    if rope.has_norm != 0u {
        if is_q {
            x *= q_norm[i];
        } else {
            x *= k_norm[i];
        }
    }
    return x;
}

// The head at src of q (is_q) or k, normed and rotated to position pos, into head_out. Called by
// every invocation (uniform control flow); ends with a barrier.
fn prepare_head(is_q: bool, src: u32, pos: u32, lanes: Lanes) {
    var scale = 1.0;
    if rope.has_norm != 0u {
        // rope_kv's invocations and order; the others add zeros.
        var squares = 0.0;
        if lanes.index < ROPE_LANES {
            for (var i = lanes.index; i < HEAD_DIM; i += ROPE_LANES) {
                let x = raw_head(is_q, src, i);
                squares += x * x;
            }
        }
        let total = workgroup_sum(squares, lanes);
        scale = rms_scale(total, params.kv.head_dim, rope.eps);
    }
    let half = rope.half_rot;
    for (var i = lanes.index; i < half; i += WG) {
        let pair = rope_pair(i, half, rope.neox != 0u);
        let a = normed_head(is_q, src, pair.x, scale);
        let b = normed_head(is_q, src, pair.y, scale);
        let turned = rotate(a, b, angle(pos, table[i]));
        head_out[pair.x] = turned.x;
        head_out[pair.y] = turned.y;
    }
    for (var i = 2u * half + lanes.index; i < HEAD_DIM; i += WG) {
        head_out[i] = normed_head(is_q, src, i, scale);
    }
    workgroupBarrier();
}

// The split holding position pos: k head g normed and rotated, k and v written into the cache
// where the position has a page, then made visible to the workgroup's walk.
fn write_new_key(sp: Split, pos: u32, lanes: Lanes) {
    prepare_head(false, view_index(rope.k, sp.b, sp.g, 0u), pos, lanes);
    let page = pos >> params.kv.page_shift;
    let cached = page < params.kv.pages_per_row
        && page_table[sp.page_row * params.kv.pages_per_row + page] < rope.n_pages;
    if cached {
        let row = kv_base(params.kv, sp.page_row, pos, sp.g) / 4u;
        let v_src = view_index(rope.v, sp.b, sp.g, 0u);
        for (var e = lanes.index; e < HEAD_VECS; e += WG) {
            let d = 4u * e;
            let k4 = vec4(head_out[d], head_out[d + 1u], head_out[d + 2u], head_out[d + 3u]);
            let v4 = vec4(v_in[v_src + d], v_in[v_src + d + 1u], v_in[v_src + d + 2u],
                          v_in[v_src + d + 3u]);
            k_cache[row + e] = vec4<KvScalar>(k4);
            v_cache[row + e] = vec4<KvScalar>(v4);
        }
    }
    // The walk reads k_p, v_p back; the q heads overwrite head_out.
    storageBarrier();
    workgroupBarrier();
}

// Workgroup wg does rope_kv's part, then the walk (nothing where the split is not live).
@compute @workgroup_size(WG)
fn decode_rope(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let sp = split_of(wg);
    if !sp.live {
        return;
    }
    let pos = token_pos(sp.b);
    if sp.s + 1u == sp.count {
        write_new_key(sp, pos, lanes);
    }
    let rows = row_lanes(lanes);
    let lane = lane_position(rows) % ROW_LANES;
    // The query heads as decode loads them from rope_kv's q_out, pre-scaled into log2 units.
    let qscale = params.scale * LOG2_E;
    var q_lane: HeadLanes;
    for (var r = 0u; r < GROUP; r++) {
        prepare_head(true, view_index(params.q, sp.b, sp.g * GROUP + r, 0u), pos, lanes);
        for (var i = 0u; i < LANE_VECS; i++) {
            let e = i * ROW_LANES + lane;
            var x = vec4(0.0);
            if e < HEAD_VECS {
                let d = 4u * e;
                x = vec4(head_out[d], head_out[d + 1u], head_out[d + 2u], head_out[d + 3u]) * qscale;
            }
            q_lane[r][i] = x;
        }
        // The next head overwrites head_out.
        workgroupBarrier();
    }
    attend(sp, &q_lane, rows);
}
