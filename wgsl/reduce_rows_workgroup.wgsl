// reduce_rows_workgroup — per-output totals of a workgroup's partial sums (no-subgroup fallback)
//
// Math: as reduce_rows_subgroup.wgsl — invocation t < 4·MAX_B receives Σ_i acc_i[t / 4][t % 4] —
// by one binary tree in workgroup memory over all MAX_B vec4 partials at once: log2(WG) halving
// steps, one barrier each.
//
// Same interface as reduce_rows_subgroup.wgsl. Call once per dispatch, from uniform control flow,
// by every invocation.
// requires: reduce_workgroup.wgsl (struct Lanes), `override WG: u32` (a power of two) and
// `override MAX_B: u32` (≤ 8) and `override ROW_SLOTS: u32 = WG * MAX_B`. (Sizing the array
// by the expression `WG * MAX_B` itself made naga 30's process_overrides panic on the matvec
// module; a named override translates: experiments/NOTES.md.)

var<workgroup> rows_scratch: array<vec4<f32>, ROW_SLOTS>;

fn sum_rows(acc: ptr<function, array<vec4<f32>, 8>>, lanes: Lanes) -> f32 {
    let i = lanes.index;
    for (var b = 0u; b < MAX_B; b++) {
        rows_scratch[b * WG + i] = (*acc)[b];
    }
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if i < stride {
            for (var b = 0u; b < MAX_B; b++) {
                rows_scratch[b * WG + i] += rows_scratch[b * WG + i + stride];
            }
        }
        workgroupBarrier();
    }
    let b = i / 4u;
    if b < MAX_B {
        return rows_scratch[b * WG][i % 4u];
    }
    return 0.0;
}
