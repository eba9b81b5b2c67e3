// reduce_rows_subgroup — per-output totals of a workgroup's partial sums, with subgroup operations
//
// Math: every invocation i holds partials acc_i[b] (a vec4: four outputs) for b < MAX_B;
//   sum_rows(&acc, lanes) returned to invocation t < 4·MAX_B = Σ_i acc_i[t / 4][t % 4]
// (other invocations get an unspecified value). Each subgroup adds its lanes with one subgroupAdd
// per b and parks the partial in workgroup memory; after one barrier, invocation t adds its
// output's partials over the subgroups. Any subgroup size works (8 on lavapipe, 32 on NVIDIA and
// Apple, 64 on AMD): the partials array has room for WG subgroups of one lane.
//
// Same interface as reduce_rows_workgroup.wgsl. Call once per dispatch, from uniform control flow,
// by every invocation (the partials are not guarded for reuse).
// requires: reduce_subgroup.wgsl (struct Lanes), `override WG: u32` (the workgroup size) and
// `override MAX_B: u32` (≤ 8) and `override ROW_SLOTS: u32 = WG * MAX_B`. (Sizing the array
// by the expression `WG * MAX_B` itself made naga 30's process_overrides panic on the matvec
// module; a named override translates: experiments/NOTES.md.)

var<workgroup> rows_partials: array<vec4<f32>, ROW_SLOTS>;

fn sum_rows(acc: ptr<function, array<vec4<f32>, 8>>, lanes: Lanes) -> f32 {
    for (var b = 0u; b < MAX_B; b++) {
        let partial = subgroupAdd((*acc)[b]);
        if lanes.lane == 0u {
            rows_partials[lanes.subgroup * MAX_B + b] = partial;
        }
    }
    workgroupBarrier();
    let b = lanes.index / 4u;
    var total = 0.0;
    if b < MAX_B {
        for (var s = 0u; s < lanes.subgroups; s++) {
            total += rows_partials[s * MAX_B + b][lanes.index % 4u];
        }
    }
    return total;
}
