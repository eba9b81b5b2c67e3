// reduce_probe — a test kernel for the workgroup reductions (wgsl/reduce_*.wgsl)
//
// Math: with acc_t = Σ_{i ≡ t mod WG, i < n} x[r·n + i] (invocation t's strided partial of row r):
//   sums[2r] = Σ_t acc_t,  sums[2r + 1] = Σ_t acc_t²   (two calls: the scratch is reused)
//   seen[r·WG + t] = the first total as invocation t received it (every invocation gets it)
// bindings: 0 x (array<f32>, read) · 1 sums (read_write) · 2 seen (read_write) · 3 params (uniform)
// dispatch: one workgroup per row, (rows, 1, 1)
// variants: reduce_subgroup.wgsl | reduce_workgroup.wgsl, same text here.

struct Params {
    n: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> sums: array<f32>;
@group(0) @binding(2) var<storage, read_write> seen: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

override WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let row = wg.x;
    var acc = 0.0;
    for (var i = lanes.index; i < params.n; i += WG) {
        acc += x[row * params.n + i];
    }
    let total = workgroup_sum(acc, lanes);
    let squares = workgroup_sum(acc * acc, lanes);
    seen[row * WG + lanes.index] = total;
    if lanes.index == 0u {
        sums[2u * row] = total;
        sums[2u * row + 1u] = squares;
    }
}
