// rope — rotary position embedding, in place on the first n_rot dims of every head
//
// For token t (position p = token_pos(t)), head h < n_heads and pair i < n_rot/2:
//   θ = p · base^(−2i/n_rot) / factor_i
//   (a, b) = (v[i], v[i + n_rot/2])   NeoX pairing (qwen2, qwen3, qwen35)
//          | (v[2i], v[2i + 1])       adjacent pairing (llama)
//   (a, b) → (a·cosθ − b·sinθ, a·sinθ + b·cosθ);   dims n_rot..head_dim are left as they are.
// Heads are addressed through a View (view.wgsl), so q heads inside qwen35's [q | gate] rows
// rotate where they sit.
//
// The angle comes from rope_angle.wgsl (exact phase reduction, see there).
// bindings: 0 x (read_write) · 1 table (read: vec4<f32> (f_hi, f_mid, f_lo, 0) per frequency)
//           · 2 token_slots (read) · 3 params (uniform) · 4 step (uniform)
// dispatch: one invocation per (t, h, i), WG per workgroup, on the 2-D grid of
//           ceil(n_tokens·n_heads·n_rot/2 / WG) workgroups.
// pipelines: TOKEN_TABLE false | true (positions.wgsl).
// variants: one.
// requires: grid.wgsl, step.wgsl, view.wgsl, positions.wgsl, rope_angle.wgsl.

struct Params {
    x: View,
    n_heads: u32,
    half_rot: u32,
    neox: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> token_slots: array<TokenSlot>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;

override WG: u32 = 64u;
override TOKEN_TABLE: bool = false;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
        @builtin(local_invocation_index) local: u32) {
    let item = flat_workgroup(wg, count) * WG + local;
    let per_token = params.n_heads * params.half_rot;
    if item >= step.n_tokens * per_token {
        return;
    }
    let t = item / per_token;
    let h = (item % per_token) / params.half_rot;
    let i = item % params.half_rot;
    let theta = angle(token_pos(t), table[i]);
    let c = cos(theta);
    let s = sin(theta);
    let base = view_index(params.x, t, h, 0u);
    var ia = base + 2u * i;
    var ib = ia + 1u;
    if params.neox != 0u {
        ia = base + i;
        ib = ia + params.half_rot;
    }
    let a = x[ia];
    let b = x[ib];
    x[ia] = a * c - b * s;
    x[ib] = a * s + b * c;
}
