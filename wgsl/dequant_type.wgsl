// dequant_type — the block decoder of the one ggml type a pipeline is specialised for
//
// A kernel that reads GGUF weights of any type is built once per type: the override constants
// below pick the decoder (naga folds the switch away when the pipeline is created).
//   GGML_TYPE    — the ggml type id (model-spec.md §1.3)
//   BLOCK_ELEMS  — elements per block (1 for F32/F16/BF16)
//   BLOCK_BYTES  — bytes per block
// provides: dequant4(block, e) for block types, dequant1(base, i) for F32/F16/BF16, and the
//           three overrides (engine `gpu::kernels::type_constants` sets them).
// requires: blocks.wgsl (and so bytes.wgsl and the kernel's `src_word`).

override GGML_TYPE: u32;
override BLOCK_ELEMS: u32 = 1u;
override BLOCK_BYTES: u32;

// Elements e..e+3 (e a multiple of 4) of the block at byte `block`.
fn dequant4(block: u32, e: u32) -> vec4<f32> {
    switch GGML_TYPE {
        case 2u: { return dequant4_q4_0(block, e); }
        case 3u: { return dequant4_q4_1(block, e); }
        case 6u: { return dequant4_q5_0(block, e); }
        case 7u: { return dequant4_q5_1(block, e); }
        case 8u: { return dequant4_q8_0(block, e); }
        case 12u: { return dequant4_q4_k(block, e); }
        case 13u: { return dequant4_q5_k(block, e); }
        case 14u: { return dequant4_q6_k(block, e); }
        default: { return vec4<f32>(0.0); }
    }
}

// Element i of an unblocked row starting at byte `base`.
fn dequant1(base: u32, i: u32) -> f32 {
    switch GGML_TYPE {
        case 0u: { return dequant1_f32(base, i); }
        case 1u: { return dequant1_f16(base, i); }
        case 30u: { return dequant1_bf16(base, i); }
        default: { return 0.0; }
    }
}
