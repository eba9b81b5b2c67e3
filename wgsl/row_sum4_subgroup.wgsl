// row_sum4_subgroup — row_sum of four values at once (SUBGROUP variants)
//
// Math: row_sum4(v) = Σ v over the ROW_LANES invocations of the caller's group, componentwise:
// the butterfly of row_sum_subgroup.wgsl on a vec4, so a group that owns four rows sums them in
// the shuffles of one. Every lane of a group gets the same bits.
// Same interface as row_sum4_workgroup.wgsl: row_sum4(v, l) -> vec4<f32>, called like row_sum.
// requires: row_sum_subgroup.wgsl.

fn row_sum4(v: vec4<f32>, l: RowLanes) -> vec4<f32> {
    var total = v;
    for (var mask = 1u; mask < ROW_LANES; mask = mask << 1u) {
        total += subgroupShuffleXor(total, mask);
    }
    return total;
}
