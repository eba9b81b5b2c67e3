// rms_norm — y[t, h, i] = x[t, h, i] / sqrt(mean_i x[t, h, i]² + eps) · w[i]   (i < n)
//
// Rows are (token t < step.n_tokens, sub-row h < rows_per_token), each addressed through a View
// (view.wgsl): the attention/FFN/output norms are one row per token; the per-head q/k norms are
// n_head rows per token, and qwen35's q heads sit at stride 2·hd inside the [q | gate] projection.
// The weight w (f32, n values) is optional (has_weight = 0: the weightless norm). The sum of
// squares is f32, reduced across the workgroup (the CPU reference sums in f64); y is rounded as
// the reference rounds it: (x·scale)·w.
// bindings: 0 x (read; unused when IN_PLACE) · 1 y (read_write) · 2 w (read) · 3 params (uniform)
//           · 4 step (uniform Step)
// dispatch: one workgroup of WG invocations per row, on the 2-D grid of n_tokens·rows_per_token
//           workgroups (engine `gpu::Grid`); each invocation strides over the row by WG, so any n.
// pipelines: WG ∈ {64, 256} (64 for rows of at most 512, so short per-head rows keep the lanes
//           busy) × IN_PLACE (y is both read and written: x cannot be bound beside it, wgpu
//           forbids a read-only and a read-write binding of one buffer in a dispatch).
// variants: subgroup (reduce_subgroup.wgsl) | fallback (reduce_workgroup.wgsl).
// requires: reduce_*.wgsl, grid.wgsl, view.wgsl, step.wgsl, strided_squares.wgsl.

struct Params {
    src: View,
    dst: View,
    n: u32,
    rows_per_token: u32,
    eps: f32,
    has_weight: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<uniform> step: Step;

override WG: u32 = 64u;
override IN_PLACE: bool = false;

fn load_src(index: u32) -> f32 {
    if IN_PLACE {
        return y[index];
    }
    return x[index];
}

// strided_squares.wgsl's element.
fn squares_value(c: u32) -> f32 {
    return load_src(c);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
        lanes: Lanes) {
    let row = flat_workgroup(wg, count);
    // Uniform per workgroup, so the reduction below stays in uniform control flow.
    if row >= step.n_tokens * params.rows_per_token {
        return;
    }
    let t = row / params.rows_per_token;
    let h = row % params.rows_per_token;
    let src = view_index(params.src, t, h, 0u);
    let dst = view_index(params.dst, t, h, 0u);
    let squares = strided_squares(src + lanes.index, src + params.n, WG);
    let total = workgroup_sum(squares, lanes);
    let scale = 1.0 / sqrt(total / f32(params.n) + params.eps);
    for (var i = lanes.index; i < params.n; i += WG) {
        var v = load_src(src + i) * scale;
        if params.has_weight != 0u {
            v *= w[i];
        }
        y[dst + i] = v;
    }
}
