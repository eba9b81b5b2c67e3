// dequant — dst[dst_index + i] = dequant(src)[i] for i < n: a GGUF tensor's elements to f32
//
// bindings: 0 src (array<u32>, read: GGUF blocks as stored) · 1 dst (array<f32>, read_write)
//           · 2 params (uniform Params)
// dispatch: one invocation per 4 consecutive elements, WG invocations per workgroup, on the 2-D
//           grid of ceil(n / (4·WG)) workgroups (engine `gpu::Grid`). Tensors larger than one
//           binding are split into row ranges on the host; src_byte / dst_index place a range
//           inside its aligned binding window.
// pipelines: one per ggml type, specialised by the override constants GGML_TYPE, BLOCK_ELEMS,
//           BLOCK_BYTES;
//           entry `dequant_blocks` for block types, `dequant_elements` for F32/F16/BF16 (n need
//           not be a multiple of 4 there).
// variants: one (no subgroup or f16 use).
// requires: bytes.wgsl, blocks.wgsl, dequant_type.wgsl, grid.wgsl.

struct Params {
    // Elements in this range; a whole number of blocks for block types.
    n: u32,
    // Byte offset of the range's first block inside the src binding.
    src_byte: u32,
    // Index of the range's first element inside the dst binding.
    dst_index: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

override WG: u32 = 64u;
// The ggml type (dequant_type.wgsl) and its block geometry (engine `kernels::type_constants`).
override GGML_TYPE: u32;
override BLOCK_ELEMS: u32 = 1u;
override BLOCK_BYTES: u32;

fn src_word(index: u32) -> u32 {
    return src[index];
}

// The first of the four elements this invocation writes.
fn first_element(wg: vec3<u32>, count: vec3<u32>, local: u32) -> u32 {
    return (flat_workgroup(wg, count) * WG + local) * 4u;
}

// Block types: n is a whole number of blocks of at least 32, so all four elements are in range
// whenever the first one is.
@compute @workgroup_size(WG)
fn dequant_blocks(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
                  @builtin(local_invocation_index) local: u32) {
    let e = first_element(wg, count, local);
    if e < params.n {
        let v = dequant4(params.src_byte + (e / BLOCK_ELEMS) * BLOCK_BYTES, e % BLOCK_ELEMS);
        let at = params.dst_index + e;
        dst[at] = v.x;
        dst[at + 1u] = v.y;
        dst[at + 2u] = v.z;
        dst[at + 3u] = v.w;
    }
}

// F32, F16, BF16: each element is guarded, the range may end inside a group of four.
@compute @workgroup_size(WG)
fn dequant_elements(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) count: vec3<u32>,
                    @builtin(local_invocation_index) local: u32) {
    let e = first_element(wg, count, local);
    for (var i = e; i < min(e + 4u, params.n); i++) {
        dst[params.dst_index + i] = dequant1(params.src_byte, i);
    }
}
