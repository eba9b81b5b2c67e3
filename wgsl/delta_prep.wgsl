// delta_prep — the gates and the q/k L2 norms of a Gated DeltaNet step, one dispatch
//
// Math (model-spec.md §5.4.4–5), per token t:
//   q̂_p = q_p · rsqrt(Σ q_p² + eps) / √dk,  k̂_p = k_p · rsqrt(Σ k_p² + eps)   for key heads p < nk
//   β_h = σ(b_h),  g_h = ssm_a_h · softplus(a_h + dt_bias_h)   (threshold 20)  for value heads h < nv
// q and k are the first 2·nk·dk channels of the conv output: head p (q for p < nk, k after) is
// channels [p·dk, (p+1)·dk) of the row, normalised in place.
//
// b and a are read through views (view.wgsl: value h of token t at offset + t·token_stride + h),
// so they may sit in wider rows (qwen35 stacks the z, β and α projections).
//
// bindings: 0 mixed (array<f32>, read_write: conv output [n_tokens][conv_dim])
//           · 1 b (array<f32>, read: β logits, n_tokens rows of nv through params.b) · 2 a
//           (array<f32>, read: α, n_tokens rows of nv through params.a) · 3 ssm_a (array<f32>, read: F32 [nv], already −exp(A_log))
//           · 4 dt_bias (array<f32>, read: F32 [nv]) · 5 gates (array<f32>, read_write:
//           [n_tokens][2·nv], β then g) · 6 params (uniform Params)
// dispatch: (2·nk, n_tokens) workgroups of WG: one per (head, token) norm; the workgroups of
//           head 0 also compute the token's nv gates (a handful of exp/log, cheaper than a
//           dispatch of their own).
// variants: SUBGROUP (subgroupAdd reduction) | fallback (workgroup-memory tree); any subgroup size.
// requires: reduce_subgroup.wgsl or reduce_workgroup.wgsl, view.wgsl, gdn_math.wgsl.

struct Params {
    conv_dim: u32,
    nk: u32,
    nv: u32,
    dk: u32,
    eps: f32,
    // 1/√dk.
    q_scale: f32,
    pad0: u32,
    pad1: u32,
    b: View,
    a: View,
}

@group(0) @binding(0) var<storage, read_write> mixed: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> ssm_a: array<f32>;
@group(0) @binding(4) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(5) var<storage, read_write> gates: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

override WG: u32 = 64u;

@compute @workgroup_size(WG)
fn prep(@builtin(workgroup_id) wg: vec3<u32>, lanes: Lanes) {
    let p = wg.x;
    let t = wg.y;
    let base = t * params.conv_dim + p * params.dk;
    var sum_sq = 0.0;
    for (var i = lanes.index; i < params.dk; i += WG) {
        let x = mixed[base + i];
        sum_sq = fma(x, x, sum_sq);
    }
    let total = workgroup_sum(sum_sq, lanes);
    var scale = inverseSqrt(total + params.eps);
    if p < params.nk {
        scale *= params.q_scale;
    }
    for (var i = lanes.index; i < params.dk; i += WG) {
        mixed[base + i] *= scale;
    }
    if p == 0u {
        let row = 2u * t * params.nv;
        for (var h = lanes.index; h < params.nv; h += WG) {
            gates[row + h] = sigmoid(b[view_index(params.b, t, 0u, h)]);
            let alpha = a[view_index(params.a, t, 0u, h)];
            gates[row + params.nv + h] = ssm_a[h] * softplus(alpha + dt_bias[h]);
        }
    }
}
