// reduce_subgroup — workgroup-wide sum with subgroup operations (SUBGROUP variants)
//
// Math: workgroup_sum(v) = Σ v over every invocation of the workgroup, returned to all of them.
// Each subgroup adds its lanes with subgroupAdd and parks one partial per subgroup in workgroup
// memory; then every subgroup adds the partials itself (a strided loop, so any subgroup size and
// any number of subgroups work: 8 lanes on lavapipe, 32 on NVIDIA and Apple, 64 on AMD), which
// hands the total to all invocations without another broadcast.
//
// Same interface as reduce_workgroup.wgsl:
//   struct Lanes  — take it as an entry-point argument (`lanes: Lanes`) and use `lanes.index` as the
//                   local invocation index (it carries the builtins the reduction needs);
//   workgroup_sum(v, lanes) -> f32 — call from uniform control flow, by every invocation.
// requires: `override WG: u32`, the workgroup size (a power of two, as the fallback needs).

struct Lanes {
    @builtin(local_invocation_index) index: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) width: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
}

// One slot per subgroup; WG bounds the subgroup count for any subgroup size. (Not named
// reduce_partials: the mat-mul module that folds a norm has an entry point of that name.)
var<workgroup> subgroup_sums: array<f32, WG>;

fn workgroup_sum(v: f32, lanes: Lanes) -> f32 {
    let partial = subgroupAdd(v);
    if lanes.lane == 0u {
        subgroup_sums[lanes.subgroup] = partial;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = lanes.lane; i < lanes.subgroups; i += lanes.width) {
        total += subgroup_sums[i];
    }
    total = subgroupAdd(total);
    // The partials may be overwritten by the next call only after everyone has read them.
    workgroupBarrier();
    return total;
}
