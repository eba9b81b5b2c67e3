// row_lanes_subgroup — a row sum's lanes from a workgroup sum's (SUBGROUP variants)
//
// For an entry point that needs both reductions: it takes `lanes: Lanes` (reduce_subgroup.wgsl;
// the two structs share builtins, which an entry point may name once) and hands row_sum the
// RowLanes of the same invocation.
// provides: row_lanes(l: Lanes) -> RowLanes.
// requires: reduce_subgroup.wgsl, row_sum_subgroup.wgsl.

fn row_lanes(l: Lanes) -> RowLanes {
    return RowLanes(l.lane, l.width, l.subgroup);
}
