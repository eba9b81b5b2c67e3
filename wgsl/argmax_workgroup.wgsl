// argmax_workgroup — workgroup-wide best (key, index) pair through workgroup memory (fallback)
//
// A candidate is vec2<u32>(key, index); it beats another if its key is larger, or equal with a
// lower index. A binary tree of log2(WG) halving steps, one barrier each.
// Same interface as argmax_subgroup.wgsl:
//   workgroup_best(candidate, lanes) -> vec2<u32> — call from uniform control flow, by every
//   invocation; every invocation gets the result.
// requires: reduce_workgroup.wgsl (struct Lanes), `override WG: u32` (a power of two).

var<workgroup> best_scratch: array<vec2<u32>, WG>;

fn workgroup_best(c: vec2<u32>, lanes: Lanes) -> vec2<u32> {
    best_scratch[lanes.index] = c;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if lanes.index < stride {
            let a = best_scratch[lanes.index];
            let b = best_scratch[lanes.index + stride];
            if b.x > a.x || (b.x == a.x && b.y < a.y) {
                best_scratch[lanes.index] = b;
            }
        }
        workgroupBarrier();
    }
    let best = best_scratch[0];
    workgroupBarrier();
    return best;
}
