// gated_delta — the gated delta rule in its recurrent form: one state update per token
//
// Math (model-spec.md §5.5), per sequence s (slot σ), value head h reading key head
// κ(h) = (h / group_div) mod nk (group_div = 1: llama.cpp's tiled order h mod nk; nv/nk: the
// grouped order ⌊h·nk/nv⌋), for each token t of the sequence in order:
//   S ← e^g S;  u = Sᵀ k̂;  δ = β (v − u);  S ← S + k̂ δᵀ;  o = Sᵀ q̂
// with S = state[σ][h] ∈ R^{dk×dv} stored as dv rows of dk contiguous floats (row j = column j of
// S, the MLX / llama.cpp layout), so both products are row dot products: u_j = S_j·k̂, o_j = S_j·q̂.
//
// Layout of the work (the MLX gated_delta kernels): a row is owned by ROW_LANES lanes of one
// subgroup, each holding DK / ROW_LANES of its floats in registers for all of the sequence's
// tokens (vec4 p of the row sits with lane p mod ROW_LANES, so a group's loads are contiguous);
// the two dot products per token are row_sum butterflies inside the group. MLX's generic kernel
// is the case ROW_LANES = 32 (a whole simdgroup per row); its faster packed kernel uses 4 lanes
// per row. A fixed ROW_LANES (≤ every subgroup size) keeps the grid, the register budget and the
// unrolled loops independent of the adapter's subgroup size.
//
// bindings: 0 mixed (array<vec4<f32>>, read: conv output after delta_prep, [n_tokens][conv_dim]:
//           q̂ heads, k̂ heads, then v heads) · 1 gates (array<f32>, read: [n_tokens][2·nv], β then
//           g) · 2 seqs (Sequences, read) · 3 state (array<vec4<f32>>, read_write: [slots][nv][dv][dk])
//           · 4 o (array<f32>, read_write: [n_tokens][nv·dv]) · 5 params (uniform Params)
// dispatch: (ceil(dv / ROWS), nv, count) workgroups of WG = ROWS·ROW_LANES; rows past dv compute
//           on a clamped row (the reductions need every lane) and write nothing.
// variants: SUBGROUP (row_sum_subgroup: shuffles) | fallback (row_sum_workgroup: workgroup memory).
// overrides: DK (multiple of 4·ROW_LANES, ≤ 4·ROW_LANES·MAX_VEC), ROW_LANES, WG.
// requires: sequences.wgsl, row_sum_subgroup.wgsl or row_sum_workgroup.wgsl.

struct Params {
    conv_dim: u32,
    nk: u32,
    nv: u32,
    dv: u32,
    group_div: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> mixed: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> gates: array<f32>;
@group(0) @binding(2) var<storage, read> seqs: Sequences;
@group(0) @binding(3) var<storage, read_write> state: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

override WG: u32 = 128u;
override ROW_LANES: u32 = 8u;
override DK: u32 = 128u;
// State rows per workgroup, and vec4s of a row per lane.
override ROWS: u32 = WG / ROW_LANES;
override VEC: u32 = DK / (4u * ROW_LANES);
const MAX_VEC: u32 = 16u;

@compute @workgroup_size(WG)
fn decode(@builtin(workgroup_id) wg: vec3<u32>, lanes: RowLanes) {
    let position = lane_position(lanes);
    let lane = position % ROW_LANES;
    let row = wg.x * ROWS + position / ROW_LANES;
    let live = row < params.dv;
    let j = min(row, params.dv - 1u);
    let h = wg.y;
    let s = wg.z;
    let kh = (h / params.group_div) % params.nk;
    let dk4 = DK / 4u;
    let row_vec4s = params.conv_dim / 4u;
    let state_row = ((seqs.seq[s].slot * params.nv + h) * params.dv + j) * dk4;

    var st: array<vec4<f32>, MAX_VEC>;
    for (var e = 0u; e < VEC; e++) {
        st[e] = state[state_row + e * ROW_LANES + lane];
    }
    var key: array<vec4<f32>, MAX_VEC>;
    for (var t = 0u; t < seqs.seq[s].len; t++) {
        let r = seqs.seq[s].start + t;
        let q_at = r * row_vec4s + kh * dk4 + lane;
        let k_at = r * row_vec4s + (params.nk + kh) * dk4 + lane;
        let beta = gates[r * 2u * params.nv + h];
        let decay = exp(gates[r * 2u * params.nv + params.nv + h]);
        var u = 0.0;
        for (var e = 0u; e < VEC; e++) {
            key[e] = mixed[k_at + e * ROW_LANES];
            st[e] *= decay;
            u += dot(st[e], key[e]);
        }
        u = row_sum(u, lanes);
        let v_index = r * params.conv_dim + 2u * params.nk * DK + h * params.dv + j;
        let delta = beta * (mixed[v_index / 4u][v_index % 4u] - u);
        var out = 0.0;
        for (var e = 0u; e < VEC; e++) {
            st[e] = fma(key[e], vec4<f32>(delta), st[e]);
            out += dot(st[e], mixed[q_at + e * ROW_LANES]);
        }
        out = row_sum(out, lanes);
        if live && lane == 0u {
            o[r * params.nv * params.dv + h * params.dv + j] = out;
        }
    }
    if live {
        for (var e = 0u; e < VEC; e++) {
            state[state_row + e * ROW_LANES + lane] = st[e];
        }
    }
}
