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
// Accuracy: θ computed in f32 (p · inv_freq) is off by up to ulp(θ)/2, 0.016 rad at p = 2^18, so
// the angle is kept in turns and reduced exactly instead. The host tabulates, per frequency,
// f = inv_freq_i / 2π (in f64, the factor folded in) split as f_hi + f_mid + f_lo, f_hi and f_mid
// of 12 significant bits each. With p = p_hi·2^12 + p_lo (p < 2^24), every product of a 12-bit
// half of p with f_hi or f_mid is an exact f32, so its fractional part is exact; p·f_lo is below
// 2^-24·p·f turns, so its rounding is negligible. The fractions are added one at a time and
// wrapped back below 1, each addition rounding by at most 2^-24 turn: the phase is within about
// 5e-7 turn (3e-6 rad) of the f64 one at any position, and sin/cos see an angle in [−π, π],
// where every backend's sin/cos is accurate.
// bindings: 0 x (read_write) · 1 table (read: vec4<f32> (f_hi, f_mid, f_lo, 0) per frequency)
//           · 2 token_slots (read) · 3 params (uniform) · 4 step (uniform)
// dispatch: one invocation per (t, h, i), WG per workgroup, on the 2-D grid of
//           ceil(n_tokens·n_heads·n_rot/2 / WG) workgroups.
// pipelines: TOKEN_TABLE false | true (positions.wgsl).
// variants: one.
// requires: grid.wgsl, step.wgsl, view.wgsl, positions.wgsl.

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

const TWO_PI: f32 = 6.283185307179586;

// The angle p·2π·f, reduced to [−π, π], for f tabulated as (f_hi, f_mid, f_lo) as above.
fn angle(p: u32, f: vec4<f32>) -> f32 {
    let p_hi = f32(p >> 12u) * 4096.0;
    let p_lo = f32(p & 4095u);
    var turns = fract(p_hi * f.x);
    turns = fract(turns + fract(p_lo * f.x));
    turns = fract(turns + fract(p_hi * f.y));
    turns = fract(turns + fract(p_lo * f.y));
    turns = turns + f32(p) * f.z;
    return (turns - round(turns)) * TWO_PI;
}

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
