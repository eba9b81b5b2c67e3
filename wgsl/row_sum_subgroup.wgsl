// row_sum_subgroup — sums over aligned groups of ROW_LANES invocations with subgroup shuffles
// (SUBGROUP variants)
//
// Math: row_sum(v) = Σ v over the ROW_LANES invocations of the caller's group, returned to each
// of them bit-identically. A butterfly of subgroupShuffleXor with masks 1, 2, …, ROW_LANES/2: each
// step adds a partner's partial; addition is commutative, so every lane of a group ends with the
// same bits (no broadcast needed), and no workgroup memory or barrier is used.
// Groups: lane_position(l) = subgroup_id · subgroup_size + subgroup_invocation_id numbers the
// invocations so that positions [g·ROW_LANES, (g+1)·ROW_LANES) are lanes of one subgroup whose
// indices differ only in their low bits — true for any power-of-two subgroup size ≥ ROW_LANES
// (8 on lavapipe, 32 on NVIDIA and Apple, 64 on AMD), whatever order the driver forms subgroups
// in. The host picks ROW_LANES ≤ the adapter's smallest subgroup size and WG a multiple of it.
//
// Same interface as row_sum_workgroup.wgsl:
//   struct RowLanes — take it as an entry-point argument;
//   lane_position(l) -> u32 — this invocation's position, in [0, WG);
//   row_sum(v, l) -> f32 — call from workgroup-uniform control flow, by every invocation.
// requires: `WG: u32`, `ROW_LANES: u32` (override or const; powers of two).

struct RowLanes {
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) width: u32,
    @builtin(subgroup_id) subgroup: u32,
}

fn lane_position(l: RowLanes) -> u32 {
    return l.subgroup * l.width + l.lane;
}

fn row_sum(v: f32, l: RowLanes) -> f32 {
    var total = v;
    for (var mask = 1u; mask < ROW_LANES; mask = mask << 1u) {
        total += subgroupShuffleXor(total, mask);
    }
    return total;
}
