// read_probe — stream a buffer once, as fast as the device reads memory: the bandwidth ceiling a
// decode roofline divides by
//
// Math: folds every vec4<u32> of src with XOR into one value per invocation; writes it only if
// it equals `params.never` (the host passes a value the fold cannot produce for its zero-filled
// buffer), so the loads cannot be optimised away and the writes cost nothing.
// bindings: 0 src (array<vec4<u32>>, read) · 1 sink (array<u32>, read_write) · 2 params (uniform)
// dispatch: params.workgroups workgroups of WG invocations in x; each invocation walks src with
//           a stride of the whole grid (consecutive invocations on consecutive 16-byte words:
//           every warp load is one contiguous 512-byte run on a 32-wide subgroup).

struct Params {
    // vec4 words in src.
    words: u32,
    never: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> sink: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

override WG: u32 = 256u;

@compute @workgroup_size(WG)
fn read_probe(@builtin(global_invocation_id) id: vec3<u32>,
              @builtin(num_workgroups) count: vec3<u32>) {
    let stride = count.x * WG;
    var fold = vec4<u32>(0u);
    for (var i = id.x; i < params.words; i += stride) {
        fold ^= src[i];
    }
    let folded = fold.x ^ fold.y ^ fold.z ^ fold.w;
    if folded == params.never {
        sink[id.x % arrayLength(&sink)] = folded;
    }
}
