// row_sum_workgroup — sums over aligned groups of ROW_LANES invocations through workgroup memory
// (no-subgroup fallback)
//
// Math: row_sum(v) = Σ v over the ROW_LANES invocations of the caller's group (positions
// [g·ROW_LANES, (g+1)·ROW_LANES), position = local_invocation_index), returned to each of them:
// every invocation parks its partial, then adds its group's partials in the same order, so the
// whole group gets the same bits. Two barriers per call.
//
// Same interface as row_sum_subgroup.wgsl:
//   struct RowLanes — take it as an entry-point argument;
//   lane_position(l) -> u32 — this invocation's position, in [0, WG);
//   row_sum(v, l) -> f32 — call from workgroup-uniform control flow, by every invocation.
// requires: `WG: u32`, `ROW_LANES: u32` (override or const; ROW_LANES divides WG).

struct RowLanes {
    @builtin(local_invocation_index) index: u32,
}

var<workgroup> row_partials: array<f32, WG>;

fn lane_position(l: RowLanes) -> u32 {
    return l.index;
}

fn row_sum(v: f32, l: RowLanes) -> f32 {
    row_partials[l.index] = v;
    workgroupBarrier();
    let first = l.index - l.index % ROW_LANES;
    var total = 0.0;
    for (var i = 0u; i < ROW_LANES; i++) {
        total += row_partials[first + i];
    }
    // The partials may be overwritten by the next call only after the whole group has read them.
    workgroupBarrier();
    return total;
}
