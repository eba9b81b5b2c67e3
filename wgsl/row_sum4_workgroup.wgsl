// row_sum4_workgroup — row_sum of four values at once through workgroup memory (no-subgroup
// fallback)
//
// Math: row_sum4(v) = Σ v over the ROW_LANES invocations of the caller's group, componentwise,
// as row_sum_workgroup.wgsl does for one value (same order, so the same bits in every lane), in
// vec4 partials of its own: two barriers for four sums. A file of its own so that the kernels
// that only call row_sum do not declare the 16·WG bytes.
// Same interface as row_sum4_subgroup.wgsl: row_sum4(v, l) -> vec4<f32>, called like row_sum.
// requires: row_sum_workgroup.wgsl.

var<workgroup> row_partials4: array<vec4<f32>, WG>;

fn row_sum4(v: vec4<f32>, l: RowLanes) -> vec4<f32> {
    row_partials4[l.index] = v;
    workgroupBarrier();
    let first = l.index - l.index % ROW_LANES;
    var total = vec4<f32>(0.0);
    for (var i = 0u; i < ROW_LANES; i++) {
        total += row_partials4[first + i];
    }
    // The partials may be overwritten by the next call only after the whole group has read them.
    workgroupBarrier();
    return total;
}
