// gdn_decode — a decode step of a Gated DeltaNet layer in one dispatch: conv + SiLU rolling the
// conv state, the q/k L2 norms and gates, the recurrent delta rule and the gated RMSNorm
//
// Math (model-spec.md §5.4–5.5: what ssm_conv → delta_prep → gated_delta → gated_norm compute
// for one token), per sequence s (slot σ = seqs.seq[s].slot, its one row r = seqs.seq[s].start):
//   x_c  = silu(Σ_{j<K} w[c·K + j] · win_c[j]),  win_c = (state[σ][0..K−1][c], m[r][c]);
//          then state[σ][i][c] = win_c[i + 1]: the conv state moves on by one row
//   q̂ = x_q · rsqrt(Σ x_q² + eps) / √dk,  k̂ = x_k · rsqrt(Σ x_k² + eps)     (key head κ)
//   per value head h reading κ:  β = σ(b_h),  g = ssm_a_h · softplus(a_h + dt_bias_h)
//   S ← e^g S;  δ = β (v_h − Sᵀ k̂);  S ← S + k̂ δᵀ;  o = Sᵀ q̂
//   y[r][h·dv + j] = w_norm[j] · o_j · rsqrt(Σ_j o_j² / dv + eps) · silu(z[r][h][j])
// with S = recurrent[σ][h] stored as dv rows of dk (gated_delta.wgsl's layout) and κ(h) =
// (h / group_div) mod nk (delta_state.rs: HeadMapping).
//
// Work split (entry gdn_decode, the default): one workgroup per (key head κ, sequence), doing the
// HEADS = GROUP = nv/nk value heads that read κ. So q̂ and k̂ are computed once, and every conv
// channel (q and k of κ, v of its value heads) belongs to exactly one workgroup, whose invocation
// reads the channel's conv rows and then rewrites them: no workgroup reads state another one
// writes. (A workgroup per value head has several reading κ's conv rows: the wide split below.)
//   1. conv + SiLU of the workgroup's 2·DK + HEADS·DV channels into workgroup memory, the conv
//      state rolled; β and e^g of its HEADS heads.
//   2. q̂, k̂: every lane group (ROW_LANES lanes) holds all of q and k, DK/ROW_LANES floats a lane,
//      and normalises them with one row_sum4; all groups get the same bits.
//   3. the delta rule: the HEADS·DV state rows in passes; in a pass a lane group owns four
//      consecutive rows (one head: DV is a multiple of 4), holding 4·DK/ROW_LANES state floats a
//      lane in registers (four rows in flight per lane, as gated_delta.wgsl has one), their dot
//      products summed by row_sum4; o into workgroup memory.
//   4. the gated RMSNorm: lane group i sums head i's o² (row_sum), then every invocation writes y.
//   5. with params.quantize_out, y also as q8 blocks (q8_block.wgsl: the integer path's input of
//      W_out, which then needs no quantize dispatch): vector r's codes at yq[r·nv·DV/4 ..], its
//      block scales at yd[r·nv·DV/32 ..] (engine `Q8Vectors`); DV is whole blocks (the host
//      checks), so a block is 32 values of one head and one invocation rounds it from the values
//      it stored, bit for bit what quantize_q8 makes of y.
//
// Wide split (entry gdn_decode_wide, FAK_GDN_DECODE=wide; the host builds it with HEADS = 1): one
// workgroup per (value head, sequence), GROUP times the workgroups (48 instead of 16 a sequence on
// the 27B), each walking DV state rows instead of GROUP·DV. Steps 1–5 are the same code on one
// head: the same sums in the same order, so the same bits as the default. A value head's gated
// norm stays inside its workgroup. What changes is the conv state of q and k: the GROUP workgroups
// of κ all need κ's q/k conv outputs, so each computes them from the conv rows without writing
// (a roll by one of them would race the others' reads: a dispatch orders no workgroups). The roll
// is left to the last of them to finish: after its y, each workgroup adds one to
// arrivals[s·nk + κ] (one invocation, after the barriers that follow its conv reads, whose values
// it has long consumed); the one that draws GROUP − 1 knows the GROUP − 1 others have read, rolls
// κ's 2·DK q/k channels and sets the counter back to 0 for the next dispatch. Which workgroup
// rolls varies; what it writes does not (the rows move by one and m's row comes in). With AHEAD
// (`wide`; `wide-late` without) a workgroup loads its first pass of state rows before step 1 (at
// WG 256 all of its DV rows), so their latency overlaps the conv's; step 3 decays them as before.
//
// bindings: 0 m (array<f32>, read: the raw qkv projection through params.m, conv_dim values of
//           row r) · 1 z (read: the gate projection through params.z, nv heads of dv) · 2 b
//           (read: β logits through params.b, nv values) · 3 a (read: α through params.a)
//           · 4 conv_w (read: F32 ssm_conv1d, ne = [K, conv_dim]) · 5 ssm_a (read: F32 [nv], already
//           −exp(A_log)) · 6 dt_bias (read: F32 [nv]) · 7 norm_w (read: F32 ssm_norm [dv])
//           · 8 seqs (Sequences, read) · 9 conv_state (read_write: [slots][K−1][conv_dim])
//           · 10 state (array<vec4<f32>>, read_write: [slots][nv][dv][dk]) · 11 y (read_write:
//           [rows][nv·dv]) · 12 params (uniform Params) · 13 yq (array<u32>, read_write) · 14 yd
//           (array<f32>, read_write): y's q8 codes and scales (placeholders unless quantize_out)
//           · 15 arrivals (array<atomic<u32>>, read_write, gdn_decode_wide only: [max_seqs][nk],
//           all zero between dispatches)
// dispatch: gdn_decode (nk, count), gdn_decode_wide (nv, count: x = i·nk + κ for κ's i-th value
//           head) workgroups of WG; every sequence of the table has one token (the host checks),
//           and decode tables take no mid-step snapshot.
// variants: SUBGROUP (row_sum(4)_subgroup: shuffles) | fallback (row_sum(4)_workgroup).
// constants: DK, DV, GROUP, HEADS (module consts: they size workgroup arrays; DK a multiple of
//           4·ROW_LANES, ≤ 4·ROW_LANES·MAX_VEC); overrides: WG (a multiple of ROW_LANES),
//           ROW_LANES, K ∈ 2..=4, AHEAD (the wide split's first pass of state rows loaded before
//           step 1, `FAK_GDN_DECODE=wide`; not with `wide-late`).
// requires: sequences.wgsl, view.wgsl, gdn_math.wgsl, q8_block.wgsl, row_sum_subgroup.wgsl + row_sum4_subgroup.wgsl
//           or row_sum_workgroup.wgsl + row_sum4_workgroup.wgsl.

struct Params {
    nk: u32,
    nv: u32,
    group_div: u32,
    eps: f32,
    // 1/√dk.
    q_scale: f32,
    // 1: y also as q8 blocks into yq, yd.
    quantize_out: u32,
    pad1: u32,
    pad2: u32,
    m: View,
    z: View,
    b: View,
    a: View,
}

@group(0) @binding(0) var<storage, read> m: array<f32>;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> conv_w: array<f32>;
@group(0) @binding(5) var<storage, read> ssm_a: array<f32>;
@group(0) @binding(6) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(7) var<storage, read> norm_w: array<f32>;
@group(0) @binding(8) var<storage, read> seqs: Sequences;
@group(0) @binding(9) var<storage, read_write> conv_state: array<f32>;
@group(0) @binding(10) var<storage, read_write> state: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read_write> y: array<f32>;
@group(0) @binding(12) var<uniform> params: Params;
@group(0) @binding(13) var<storage, read_write> yq: array<u32>;
@group(0) @binding(14) var<storage, read_write> yd: array<f32>;
@group(0) @binding(15) var<storage, read_write> arrivals: array<atomic<u32>>;

override WG: u32 = 256u;
override ROW_LANES: u32 = 8u;
override K: u32 = 4u;
// Whether the first pass's state rows are loaded before the conv (gdn_decode_wide only).
override AHEAD: bool = false;
// vec4s of a state row per lane.
override VEC: u32 = DK / (4u * ROW_LANES);
const MAX_VEC: u32 = 16u;
// The workgroup's state rows: HEADS heads of DV.
const ROWS: u32 = HEADS * DV;

// The conv outputs of q (first DK) and k of the key head, then q̂ and k̂ as each group reads them.
var<workgroup> qk: array<f32, 2u * DK>;
// The conv outputs of the HEADS value heads' v, and the delta rule's outputs o.
var<workgroup> values: array<f32, ROWS>;
var<workgroup> outputs: array<f32, ROWS>;
// Per value head of the workgroup: β, e^g, and 1/RMS(o).
var<workgroup> betas: array<f32, HEADS>;
var<workgroup> decays: array<f32, HEADS>;
var<workgroup> inv_rms: array<f32, HEADS>;
// gdn_decode_wide: what this workgroup drew from arrivals.
var<workgroup> arrived: u32;

// The i-th value head (i < GROUP) that reads key head kh: h = (kh + ⌊i / div⌋·nk)·div + i mod div,
// the inverse of κ(h) = ⌊h / div⌋ mod nk for div = 1 (tiled: kh, kh + nk, …) and div = GROUP
// (grouped: kh·GROUP + i).
fn value_head(kh: u32, i: u32) -> u32 {
    let div = params.group_div;
    return (kh + (i / div) * params.nk) * div + i % div;
}

// silu of channel c's conv over its K−1 state rows and m (ssm_conv.wgsl's sum, in the same order,
// for a sequence of one token), rolling those rows where `roll`.
fn conv_window(slot: u32, r: u32, c: u32, conv_dim: u32, roll: bool) -> f32 {
    let base = slot * (K - 1u) * conv_dim + c;
    var acc = 0.0;
    for (var j = 0u; j + 1u < K; j++) {
        let x = conv_state[base + j * conv_dim];
        acc = fma(conv_w[c * K + j], x, acc);
        if roll && j > 0u {
            conv_state[base + (j - 1u) * conv_dim] = x;
        }
    }
    let newest = m[view_index(params.m, r, 0u, c)];
    if roll {
        conv_state[base + (K - 2u) * conv_dim] = newest;
    }
    return silu(fma(conv_w[c * K + K - 1u], newest, acc));
}

@compute @workgroup_size(WG)
fn gdn_decode(@builtin(workgroup_id) wg: vec3<u32>, lanes: RowLanes) {
    decode_heads(wg.x, 0u, wg.y, lanes, true);
}

@compute @workgroup_size(WG)
fn gdn_decode_wide(@builtin(workgroup_id) wg: vec3<u32>, lanes: RowLanes) {
    let kh = wg.x % params.nk;
    let s = wg.y;
    decode_heads(kh, wg.x / params.nk, s, lanes, false);
    // 6. The last of κ's GROUP workgroups of sequence s rolls κ's q/k conv rows.
    let position = lane_position(lanes);
    let counter = s * params.nk + kh;
    if position == 0u {
        arrived = atomicAdd(&arrivals[counter], 1u);
    }
    if workgroupUniformLoad(&arrived) == GROUP - 1u {
        let slot = seqs.seq[s].slot;
        let r = seqs.seq[s].start;
        let key_dim = params.nk * DK;
        let conv_dim = 2u * key_dim + params.nv * DV;
        for (var i = position; i < 2u * DK; i += WG) {
            roll_channel(slot, r, (i / DK) * key_dim + kh * DK + i % DK, conv_dim);
        }
        if position == 0u {
            atomicStore(&arrivals[counter], 0u);
        }
    }
}

// Channel c's conv rows move on by one row, m's row r coming in (what conv_window's roll writes).
fn roll_channel(slot: u32, r: u32, c: u32, conv_dim: u32) {
    let base = slot * (K - 1u) * conv_dim + c;
    for (var j = 1u; j + 1u < K; j++) {
        conv_state[base + (j - 1u) * conv_dim] = conv_state[base + j * conv_dim];
    }
    conv_state[base + (K - 2u) * conv_dim] = m[view_index(params.m, r, 0u, c)];
}

// Where vec4 `lane` of the workgroup's state row rc (of its HEADS·DV, from its head0-th head
// of key head kh on) is in `state`.
fn row_vec(kh: u32, head0: u32, slot: u32, rc: u32, lane: u32) -> u32 {
    let h = value_head(kh, head0 + rc / DV);
    return ((slot * params.nv + h) * DV + rc % DV) * (DK / 4u) + lane;
}

// Steps 1–5 for sequence s on the HEADS value heads of key head kh from its head0-th on; its q/k
// conv rows rolled where `roll_qk`.
fn decode_heads(kh: u32, head0: u32, s: u32, lanes: RowLanes, roll_qk: bool) {
    let slot = seqs.seq[s].slot;
    let r = seqs.seq[s].start;
    let position = lane_position(lanes);
    let key_dim = params.nk * DK;
    let conv_dim = 2u * key_dim + params.nv * DV;
    let lane = position % ROW_LANES;
    let group = position / ROW_LANES;
    let groups = WG / ROW_LANES;
    let dk4 = DK / 4u;

    // 0. With AHEAD, the first pass's state rows are loaded now: they depend on nothing steps 1–2
    // compute, so their latency overlaps the conv's (decayed in step 3, the same product).
    var ahead: array<vec4<f32>, 4u * MAX_VEC>;
    if AHEAD {
        let at = row_vec(kh, head0, slot, min(4u * group, ROWS - 4u), lane);
        for (var e = 0u; e < VEC; e++) {
            for (var c = 0u; c < 4u; c++) {
                ahead[4u * e + c] = state[at + c * dk4 + e * ROW_LANES];
            }
        }
    }

    // 1. conv + SiLU of q and k of κ, then v of its value heads; the gates.
    for (var i = position; i < 2u * DK + ROWS; i += WG) {
        if i < 2u * DK {
            let c = (i / DK) * key_dim + kh * DK + i % DK;
            qk[i] = conv_window(slot, r, c, conv_dim, roll_qk);
        } else {
            let e = i - 2u * DK;
            let c = 2u * key_dim + value_head(kh, head0 + e / DV) * DV + e % DV;
            values[e] = conv_window(slot, r, c, conv_dim, true);
        }
    }
    if position < HEADS {
        let h = value_head(kh, head0 + position);
        betas[position] = sigmoid(b[view_index(params.b, r, 0u, h)]);
        let g = ssm_a[h] * softplus(a[view_index(params.a, r, 0u, h)] + dt_bias[h]);
        decays[position] = exp(g);
    }
    workgroupBarrier();

    // 2. q̂ and k̂ in every lane group: vec4 e of this lane is floats 4·(e·ROW_LANES + lane)….
    var q: array<vec4<f32>, MAX_VEC>;
    var k: array<vec4<f32>, MAX_VEC>;
    var squares = vec4<f32>(0.0);
    for (var e = 0u; e < VEC; e++) {
        let at = 4u * (e * ROW_LANES + lane);
        q[e] = vec4<f32>(qk[at], qk[at + 1u], qk[at + 2u], qk[at + 3u]);
        k[e] = vec4<f32>(qk[DK + at], qk[DK + at + 1u], qk[DK + at + 2u], qk[DK + at + 3u]);
        squares += vec4<f32>(dot(q[e], q[e]), dot(k[e], k[e]), 0.0, 0.0);
    }
    squares = row_sum4(squares, lanes);
    let q_norm = inverseSqrt(squares.x + params.eps) * params.q_scale;
    let k_norm = inverseSqrt(squares.y + params.eps);
    for (var e = 0u; e < VEC; e++) {
        q[e] *= q_norm;
        k[e] *= k_norm;
    }

    // 3. The delta rule, four rows per lane group and pass; st[4e + c] is vec4 e of row c.
    for (var first = 0u; first < ROWS; first += 4u * groups) {
        let row = first + 4u * group;
        let live = row < ROWS;
        // Past the end a group computes on the last rows (the sums need every lane) and writes
        // nothing.
        let rc = min(row, ROWS - 4u);
        let i = rc / DV;
        let at = row_vec(kh, head0, slot, rc, lane);
        let decay = decays[i];
        var st: array<vec4<f32>, 4u * MAX_VEC>;
        for (var e = 0u; e < VEC; e++) {
            for (var c = 0u; c < 4u; c++) {
                if AHEAD && first == 0u {
                    st[4u * e + c] = ahead[4u * e + c] * decay;
                } else {
                    st[4u * e + c] = state[at + c * dk4 + e * ROW_LANES] * decay;
                }
            }
        }
        var u = vec4<f32>(0.0);
        for (var e = 0u; e < VEC; e++) {
            let key = k[e];
            u += vec4<f32>(
                dot(st[4u * e], key),
                dot(st[4u * e + 1u], key),
                dot(st[4u * e + 2u], key),
                dot(st[4u * e + 3u], key),
            );
        }
        u = row_sum4(u, lanes);
        let v = vec4<f32>(values[rc], values[rc + 1u], values[rc + 2u], values[rc + 3u]);
        let delta = betas[i] * (v - u);
        var out = vec4<f32>(0.0);
        for (var e = 0u; e < VEC; e++) {
            let key = k[e];
            let query = q[e];
            st[4u * e] = fma(key, vec4<f32>(delta.x), st[4u * e]);
            st[4u * e + 1u] = fma(key, vec4<f32>(delta.y), st[4u * e + 1u]);
            st[4u * e + 2u] = fma(key, vec4<f32>(delta.z), st[4u * e + 2u]);
            st[4u * e + 3u] = fma(key, vec4<f32>(delta.w), st[4u * e + 3u]);
            out += vec4<f32>(
                dot(st[4u * e], query),
                dot(st[4u * e + 1u], query),
                dot(st[4u * e + 2u], query),
                dot(st[4u * e + 3u], query),
            );
        }
        out = row_sum4(out, lanes);
        if live {
            if lane == 0u {
                outputs[rc] = out.x;
                outputs[rc + 1u] = out.y;
                outputs[rc + 2u] = out.z;
                outputs[rc + 3u] = out.w;
            }
            for (var e = 0u; e < VEC; e++) {
                for (var c = 0u; c < 4u; c++) {
                    state[at + c * dk4 + e * ROW_LANES] = st[4u * e + c];
                }
            }
        }
    }
    workgroupBarrier();

    // 4. The gated RMSNorm: lane group i finds head i's 1/RMS, then y.
    for (var first = 0u; first < HEADS; first += groups) {
        let i = min(first + group, HEADS - 1u);
        var sum_sq = 0.0;
        for (var j = lane; j < DV; j += ROW_LANES) {
            let o = outputs[i * DV + j];
            sum_sq = fma(o, o, sum_sq);
        }
        let total = row_sum(sum_sq, lanes);
        if first + group < HEADS && lane == 0u {
            inv_rms[i] = inverseSqrt(total / f32(DV) + params.eps);
        }
    }
    workgroupBarrier();
    for (var e = position; e < ROWS; e += WG) {
        let i = e / DV;
        let j = e % DV;
        let h = value_head(kh, head0 + i);
        let gate = z[view_index(params.z, r, h, j)];
        let value = norm_w[j] * (outputs[e] * inv_rms[i]) * silu(gate);
        y[r * params.nv * DV + h * DV + j] = value;
        // Only this invocation reads outputs[e] in this loop.
        outputs[e] = value;
    }
    if params.quantize_out != 0u {
        workgroupBarrier();
        quantize_y(kh, head0, r, position);
    }
}

// 5. Vector r's q8 blocks of the workgroup's heads, from their y values in `outputs`.
fn quantize_y(kh: u32, head0: u32, r: u32, position: u32) {
    let width = params.nv * DV;
    for (var block = position; block < ROWS / 32u; block += WG) {
        let e = 32u * block;
        let column = value_head(kh, head0 + e / DV) * DV + e % DV;
        var v: array<vec4<f32>, 8>;
        for (var j = 0u; j < 8u; j++) {
            let at = e + 4u * j;
            v[j] = vec4<f32>(outputs[at], outputs[at + 1u], outputs[at + 2u], outputs[at + 3u]);
        }
        let q = q8_block(v);
        let codes = r * (width / 4u) + column / 4u;
        for (var j = 0u; j < 8u; j++) {
            yq[codes + j] = q.codes[j];
        }
        yd[r * (width / 32u) + column / 32u] = q.d;
    }
}
