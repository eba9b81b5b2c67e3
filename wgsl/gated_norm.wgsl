// gated_norm — the gated RMSNorm after the delta rule, per value head
//
// Math (model-spec.md §5.5, output stage 1), per token t and value head h, over its dv values:
//   y[t][h·dv + j] = w[j] · o_j · rsqrt(Σ_j o_j² / dv + eps) · silu(z[t][h·dv + j])
// w = ssm_norm, a plain weight (no +1), shared by every head.
//
// z is read through a view (view.wgsl: z_{t,h,j} at offset + t·token_stride + h·head_stride + j),
// so it may sit in a wider row (qwen35 stacks the z, β and α projections).
//
// bindings: 0 o (array<f32>, read: [n_tokens][nv·dv]) · 1 z (array<f32>, read: the gate
//           projection, n_tokens × nv heads of dv through params.z, same head order) · 2 w (array<f32>, read: F32 [dv])
//           · 3 y (array<f32>, read_write: [n_tokens][nv·dv]) · 4 params (uniform Params)
// dispatch: (nv, n_tokens) workgroups of WG, one per (head, token).
// variants: SUBGROUP (subgroupAdd reduction) | fallback (workgroup-memory tree); any subgroup size.
// requires: reduce_subgroup.wgsl or reduce_workgroup.wgsl, view.wgsl, gdn_math.wgsl.

struct Params {
    nv: u32,
    dv: u32,
    eps: f32,
    pad0: u32,
    z: View,
}

@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

override WG: u32 = 64u;

@compute @workgroup_size(WG)
fn gated_norm(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let base = (wg.y * params.nv + wg.x) * params.dv;
    var sum_sq = 0.0;
    for (var j = lanes.index; j < params.dv; j += WG) {
        let x = o[base + j];
        sum_sq = fma(x, x, sum_sq);
    }
    let scale = inverseSqrt(workgroup_sum(sum_sq, lanes) / f32(params.dv) + params.eps);
    for (var j = lanes.index; j < params.dv; j += WG) {
        let gate = z[view_index(params.z, wg.y, wg.x, j)];
        y[base + j] = w[j] * (o[base + j] * scale) * silu(gate);
    }
}
