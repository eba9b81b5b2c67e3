// argmax_subgroup — workgroup-wide best (key, index) pair with subgroup operations
//
// A candidate is vec2<u32>(key, index); it beats another if its key is larger, or equal with a
// lower index (so the lowest index wins ties). Each subgroup finds its best with subgroupMax on
// the key and subgroupMin on the indices holding it, parks it in workgroup memory, and every
// subgroup then reduces the parked ones the same way (any subgroup size, any subgroup count).
// Same interface as argmax_workgroup.wgsl:
//   workgroup_best(candidate, lanes) -> vec2<u32> — call from uniform control flow, by every
//   invocation; every invocation gets the result.
// requires: reduce_subgroup.wgsl (struct Lanes), `override WG: u32`.

var<workgroup> best_partials: array<vec2<u32>, WG>;

fn subgroup_best(c: vec2<u32>) -> vec2<u32> {
    let key = subgroupMax(c.x);
    let index = subgroupMin(select(0xffffffffu, c.y, c.x == key));
    return vec2<u32>(key, index);
}

fn workgroup_best(c: vec2<u32>, lanes: Lanes) -> vec2<u32> {
    let mine = subgroup_best(c);
    if lanes.lane == 0u {
        best_partials[lanes.subgroup] = mine;
    }
    workgroupBarrier();
    var best = vec2<u32>(0u, 0xffffffffu);
    for (var i = lanes.lane; i < lanes.subgroups; i += lanes.width) {
        let other = best_partials[i];
        if other.x > best.x || (other.x == best.x && other.y < best.y) {
            best = other;
        }
    }
    best = subgroup_best(best);
    // The partials may be overwritten by the next call only after everyone has read them.
    workgroupBarrier();
    return best;
}
