// kv_cache — write this step's k and v rows into the paged KV cache of one layer
//
// For token t < step.n_tokens at position p = token_pos(t) of page-table row r =
// token_page_row(t), kv head g < n_kv and d < head_dim:
//   k_cache[kv_base(r, p, g) + d] = k[t, g, d],   v_cache[kv_base(r, p, g) + d] = v[t, g, d]
// (kv_paged.wgsl: pages of 2^page_shift slots, [page][kv head][slot][head_dim]; k and v are read
// through Views, so they may be slices of a fused QKV projection). A prefill continuing a cache
// writes positions pos..pos+n_tokens; batched decode writes one token per sequence, each at its
// own position and page-table row. The f16 variant rounds to f16 on the way in. A token whose
// position is past its row, or whose row names a page past the cache, is not written: a host
// error must not corrupt memory beyond the cache (the shaders run without bounds checks).
// bindings: 0 k (read) · 1 v (read) · 2 k_cache (read_write, KvScalar) · 3 v_cache (read_write)
//           · 4 page_table (read) · 5 token_slots (read) · 6 params (uniform) · 7 step (uniform)
// dispatch: one invocation per (t, g, d), WG per workgroup, on the 2-D grid of
//           ceil(n_tokens·n_kv·head_dim / WG) workgroups.
// pipelines: TOKEN_TABLE false | true.
// variants: f32 cache | f16 cache (kv_f16.wgsl).
// requires: kv_f32.wgsl | kv_f16.wgsl, kv_paged.wgsl, grid.wgsl, step.wgsl, view.wgsl,
//           positions.wgsl.

struct Params {
    kv: KvGeometry,
    k: View,
    v: View,
    // Physical pages in the cache.
    n_pages: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> k: array<f32>;
@group(0) @binding(1) var<storage, read> v: array<f32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<KvScalar>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<KvScalar>;
@group(0) @binding(4) var<storage, read> page_table: array<u32>;
@group(0) @binding(5) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(6) var<uniform> params: Params;
@group(0) @binding(7) var<uniform> step: Step;

override WG: u32 = 256u;
override TOKEN_TABLE: bool = false;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
        @builtin(local_invocation_index) local: u32) {
    let item = flat_workgroup(wg, count) * WG + local;
    let hd = params.kv.head_dim;
    let per_token = params.kv.n_kv * hd;
    if item >= step.n_tokens * per_token {
        return;
    }
    let t = item / per_token;
    let g = (item % per_token) / hd;
    let d = item % hd;
    let pos = token_pos(t);
    let row = token_page_row(t);
    if (pos >> params.kv.page_shift) >= params.kv.pages_per_row
        || page_table[row * params.kv.pages_per_row + (pos >> params.kv.page_shift)] >= params.n_pages {
        return;
    }
    let at = kv_base(params.kv, row, pos, g) + d;
    k_cache[at] = KvScalar(k[view_index(params.k, t, g, d)]);
    v_cache[at] = KvScalar(v[view_index(params.v, t, g, d)]);
}
