// attn_prefill_rows — bindings, parameters and row addressing shared by the two prefill-attention
// kernels (attn_prefill.wgsl: f32 tiles; attn_prefill_coop.wgsl: cooperative matrices)
//
// A tile's rows are consecutive (token, query head) pairs of one kv head g, row ρ = t·GROUP + r
// for query head h = g·GROUP + r, so the tile's key and value rows serve all GROUP heads of its
// tokens (GQA read sharing) and its causal limit is its last token's position.
// bindings: 0 q (read) · 1 k_cache (read) · 2 v_cache (read) · 3 page_table (read)
//           · 4 token_slots (read) · 5 o (read_write) · 6 params (uniform) · 7 step (uniform)
// requires: kv_f32|kv_f16.wgsl, kv_paged.wgsl, step.wgsl, view.wgsl, positions.wgsl.
// provides: the bindings, overrides HEAD_DIM, GROUP, TOKEN_TABLE; NEG, LOG2_E; step_tokens,
//           row_token_head, query_element, cache_element, tile_key_limit.

struct Params {
    kv: KvGeometry,
    q: View,
    o: View,
    scale: f32,
    // Tokens the q/o bindings hold (the binding's max_tokens): a Step asking for more reads no
    // further.
    max_tokens: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<KvScalar>;
@group(0) @binding(2) var<storage, read> v_cache: array<KvScalar>;
@group(0) @binding(3) var<storage, read> page_table: array<u32>;
@group(0) @binding(4) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;
@group(0) @binding(7) var<uniform> step: Step;

override HEAD_DIM: u32 = 128u;
override GROUP: u32 = 2u;
override TOKEN_TABLE: bool = false;

// The masked score (scores are finite, so any exp2 of NEG minus a score is 0).
const NEG: f32 = -3.0e38;
const LOG2_E: f32 = 1.4426950408889634;

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

// Keys the tile of rows row0..row0 + rows (row0 < n_rows) attends to: 0..=its last token's
// position.
fn tile_key_limit(row0: u32, rows: u32) -> u32 {
    let last_token = (min(row0 + rows, step_tokens() * GROUP) - 1u) / GROUP;
    return token_pos(last_token) + 1u;
}

// Element d of the key (values false) or value row whose element 0 sits at base, as f32.
fn cache_element(values: bool, base: u32, d: u32) -> f32 {
    if values {
        return f32(v_cache[base + d]);
    }
    return f32(k_cache[base + d]);
}
