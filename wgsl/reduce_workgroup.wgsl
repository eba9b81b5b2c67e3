// reduce_workgroup — workgroup-wide sum through workgroup memory (no-subgroup fallback)
//
// Math: workgroup_sum(v) = Σ v over every invocation of the workgroup, returned to all of them,
// by a binary tree in workgroup memory: log2(WG) halving steps, one barrier each.
//
// Same interface as reduce_subgroup.wgsl:
//   struct Lanes  — take it as an entry-point argument (`lanes: Lanes`) and use `lanes.index` as the
//                   local invocation index;
//   workgroup_sum(v, lanes) -> f32 — call from uniform control flow, by every invocation.
// requires: `override WG: u32`, the workgroup size, a power of two.

struct Lanes {
    @builtin(local_invocation_index) index: u32,
}

var<workgroup> reduce_scratch: array<f32, WG>;

fn workgroup_sum(v: f32, lanes: Lanes) -> f32 {
    reduce_scratch[lanes.index] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if lanes.index < stride {
            reduce_scratch[lanes.index] += reduce_scratch[lanes.index + stride];
        }
        workgroupBarrier();
    }
    let total = reduce_scratch[0];
    // The scratch may be overwritten by the next call only after everyone has read the total.
    workgroupBarrier();
    return total;
}
