// elementwise — the pointwise ops of a step, over (token t < step.n_tokens, head h < heads,
// index i < width), every operand addressed through its own View (view.wgsl):
//   swiglu        out = silu(a) · b,   silu(z) = z / (1 + e^−z)   (a = gate, b = up)
//   add           out = out + a                  (the residual x += y; a bias: a's token stride 0)
//   sigmoid_gate  out = out · σ(a),    σ(z) = 1 / (1 + e^−z)        (qwen35 gated attention: out
//                 = o, a = the gate half of each head's [q | gate] slice, a strided view)
// f32 throughout, evaluated as the CPU reference writes it. e^−z overflows to +inf for z < −88,
// which gives silu = −0 and σ = 0, as on the CPU.
// bindings: 0 a (read) · 1 b (read; unused by add and sigmoid_gate) · 2 out (read_write)
//           · 3 params (uniform) · 4 step (uniform)
// dispatch: one invocation per element, WG per workgroup, on the 2-D grid of
//           ceil(n_tokens·heads·width / WG) workgroups.
// variants: one (nothing to reduce; loads are coalesced along i).
// requires: grid.wgsl, step.wgsl, view.wgsl.

struct Params {
    a: View,
    b: View,
    out: View,
    heads: u32,
    width: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;

override WG: u32 = 256u;

// The (t, h, i) of this invocation's element, or none (x = 0xffffffff) past the last one.
fn element(wg: vec3<u32>, count: vec3<u32>, local: u32) -> vec3<u32> {
    let item = flat_workgroup(wg, count) * WG + local;
    let per_token = params.heads * params.width;
    if item >= step.n_tokens * per_token {
        return vec3<u32>(0xffffffffu);
    }
    let within = item % per_token;
    return vec3<u32>(item / per_token, within / params.width, within % params.width);
}

@compute @workgroup_size(WG)
fn swiglu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
          @builtin(local_invocation_index) local: u32) {
    let e = element(wg, count, local);
    if e.x == 0xffffffffu {
        return;
    }
    let gate = a[view_index(params.a, e.x, e.y, e.z)];
    let up = b[view_index(params.b, e.x, e.y, e.z)];
    out[view_index(params.out, e.x, e.y, e.z)] = gate / (1.0 + exp(-gate)) * up;
}

@compute @workgroup_size(WG)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
       @builtin(local_invocation_index) local: u32) {
    let e = element(wg, count, local);
    if e.x == 0xffffffffu {
        return;
    }
    let at = view_index(params.out, e.x, e.y, e.z);
    out[at] = out[at] + a[view_index(params.a, e.x, e.y, e.z)];
}

@compute @workgroup_size(WG)
fn sigmoid_gate(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
                @builtin(local_invocation_index) local: u32) {
    let e = element(wg, count, local);
    if e.x == 0xffffffffu {
        return;
    }
    let at = view_index(params.out, e.x, e.y, e.z);
    let gate = a[view_index(params.a, e.x, e.y, e.z)];
    out[at] = out[at] * (1.0 / (1.0 + exp(-gate)));
}
