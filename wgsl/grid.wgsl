// grid — the flat index of a workgroup on a 2-D dispatch grid
//
// A dispatch may have at most 65535 workgroups per dimension, so 1-D work of n workgroups is
// dispatched as (x, y) = (min(n, 65535), ceil(n / x)) (engine `gpu::Grid`). The last grid row can
// overshoot n: kernels still guard their element range.
// provides: flat_workgroup(@builtin(workgroup_id), @builtin(num_workgroups)) -> u32

fn flat_workgroup(id: vec3<u32>, count: vec3<u32>) -> u32 {
    return id.y * count.x + id.x;
}
