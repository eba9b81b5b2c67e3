// rope_kv — one step's attention inputs made ready: per-head RMSNorm of q and k (optional),
// RoPE on both, q to where attention reads it and k, v into the paged KV cache
//
// For token t (position p = token_pos(t), page-table row r = token_page_row(t)):
//   q head h < n_head:  q_out[t, h] = rope_p(norm(q[t, h]; q_norm))
//   kv head g < n_kv:   k_cache[kv_base(r, p, g) + ·] = rope_p(norm(k[t, g]; k_norm))
//                       v_cache[kv_base(r, p, g) + ·] = v[t, g]
// with norm(x; w) = (x / sqrt(mean x² + eps))·w over the head (has_norm = 0: the identity), and
// rope_p turning pair i < n_rot/2 of the first n_rot dims by θ = p · base^(−2i/n_rot) / factor_i
// (angle(p, table[i]), rope_angle.wgsl):
//   (a, b) = (x[i], x[i + n_rot/2])   NeoX pairing (qwen2, qwen3, qwen35)
//          | (x[2i], x[2i + 1])       adjacent pairing (llama)
//   (a, b) → (a·cosθ − b·sinθ, a·sinθ + b·cosθ);   dims n_rot..head_dim pass through.
// The norm is rounded as rms_norm.wgsl rounds it ((x·scale)·w, summed over the same WG lanes).
// The cache is paged (kv_paged.wgsl: [page][kv head][slot][head_dim]); a prefill continuing a
// cache writes positions pos..pos+n_tokens, batched decode one token per sequence at its own
// position and row; the f16 variant rounds k and v to f16 on the way in. A token whose position
// is past its row, or whose row names a page past the cache, writes no k, v: a host error must
// not corrupt memory beyond the cache (the shaders run without bounds checks); its q is still
// rotated. q, k, v are read through Views, so they may be slices of one fused QKV projection or
// q heads inside qwen35's [q | gate] rows (they are read-only; q_out must be another buffer).
// bindings: 0 q (read) · 1 k (read) · 2 v (read) · 3 q_norm (read) · 4 k_norm (read; both
//           placeholders without a norm) · 5 table (read) · 6 q_out (read_write) · 7 k_cache
//           (read_write, KvScalar) · 8 v_cache (read_write) · 9 page_table (read)
//           · 10 token_slots (read) · 11 params (uniform) · 12 step (uniform)
// dispatch: one workgroup of WG invocations per (t, head), heads n_head q heads then n_kv kv heads,
//           on the 2-D grid of n_tokens·(n_head + n_kv) workgroups.
// pipelines: TOKEN_TABLE false | true.
// variants: subgroup | workgroup reduction × f32 | f16 cache.
// requires: reduce_*.wgsl, kv_f32.wgsl | kv_f16.wgsl, kv_paged.wgsl, grid.wgsl, step.wgsl,
//           view.wgsl, positions.wgsl, rope_angle.wgsl.

struct Params {
    kv: KvGeometry,
    q: View,
    k: View,
    v: View,
    q_out: View,
    n_head: u32,
    half_rot: u32,
    neox: u32,
    has_norm: u32,
    eps: f32,
    // Physical pages in the cache.
    n_pages: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> q_norm: array<f32>;
@group(0) @binding(4) var<storage, read> k_norm: array<f32>;
@group(0) @binding(5) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> q_out: array<f32>;
@group(0) @binding(7) var<storage, read_write> k_cache: array<KvScalar>;
@group(0) @binding(8) var<storage, read_write> v_cache: array<KvScalar>;
@group(0) @binding(9) var<storage, read> page_table: array<u32>;
@group(0) @binding(10) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(11) var<uniform> params: Params;
@group(0) @binding(12) var<uniform> step: Step;

override WG: u32 = 64u;
override TOKEN_TABLE: bool = false;

// Element i of the head being prepared (q when is_q, else k), starting at src, normed.
fn head_value(is_q: bool, src: u32, i: u32, scale: f32) -> f32 {
    if is_q {
        var x = q[src + i] * scale;
        if params.has_norm != 0u {
            x *= q_norm[i];
        }
        return x;
    }
    var x = k[src + i] * scale;
    if params.has_norm != 0u {
        x *= k_norm[i];
    }
    return x;
}

// Writes element i of the prepared head: to q_out (dst its element 0), or to the k cache.
fn store(is_q: bool, dst: u32, i: u32, x: f32) {
    if is_q {
        q_out[dst + i] = x;
    } else {
        k_cache[dst + i] = KvScalar(x);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
        lanes: Lanes) {
    let item = flat_workgroup(wg, count);
    let heads = params.n_head + params.kv.n_kv;
    // Uniform per workgroup, so the reduction below stays in uniform control flow.
    if item >= step.n_tokens * heads {
        return;
    }
    let t = item / heads;
    let j = item % heads;
    let is_q = j < params.n_head;
    let hd = params.kv.head_dim;
    let pos = token_pos(t);
    var src: u32;
    var dst: u32;
    var cached = true;
    if is_q {
        src = view_index(params.q, t, j, 0u);
        dst = view_index(params.q_out, t, j, 0u);
    } else {
        let g = j - params.n_head;
        src = view_index(params.k, t, g, 0u);
        let row = token_page_row(t);
        let page = pos >> params.kv.page_shift;
        cached = page < params.kv.pages_per_row
            && page_table[row * params.kv.pages_per_row + page] < params.n_pages;
        if cached {
            dst = kv_base(params.kv, row, pos, g);
            let v_src = view_index(params.v, t, g, 0u);
            for (var i = lanes.index; i < hd; i += WG) {
                v_cache[dst + i] = KvScalar(v[v_src + i]);
            }
        }
    }
    var scale = 1.0;
    if params.has_norm != 0u {
        var squares = 0.0;
        for (var i = lanes.index; i < hd; i += WG) {
            var x: f32;
            if is_q {
                x = q[src + i];
            } else {
                x = k[src + i];
            }
            squares += x * x;
        }
        let total = workgroup_sum(squares, lanes);
        scale = rms_scale(total, hd, params.eps);
    }
    if !cached {
        return;
    }
    let half = params.half_rot;
    for (var i = lanes.index; i < half; i += WG) {
        let pair = rope_pair(i, half, params.neox != 0u);
        let a = head_value(is_q, src, pair.x, scale);
        let b = head_value(is_q, src, pair.y, scale);
        let turned = rotate(a, b, angle(pos, table[i]));
        store(is_q, dst, pair.x, turned.x);
        store(is_q, dst, pair.y, turned.y);
    }
    for (var i = 2u * half + lanes.index; i < hd; i += WG) {
        store(is_q, dst, i, head_value(is_q, src, i, scale));
    }
}
