// row_lanes_workgroup — a row sum's lanes from a workgroup sum's (no-subgroup fallback)
//
// As row_lanes_subgroup.wgsl: both structs hold the local invocation index alone.
// provides: row_lanes(l: Lanes) -> RowLanes.
// requires: reduce_workgroup.wgsl, row_sum_workgroup.wgsl.

fn row_lanes(l: Lanes) -> RowLanes {
    return RowLanes(l.index);
}
