// dequant_type — dequantize one element group of the ggml type a pipeline is specialised for
//
// Math: dequant4(block, e) = elements e..e+3 (e a multiple of 4) of the block at byte `block`;
// dequant1(base, i) = element i of an unblocked (F32/F16/BF16) row starting at byte `base`;
// both as blocks.wgsl's per-type decoders compute them. Types outside each function's set give 0.
// Shared by the kernels that decode whole rows of any type (dequant, embed).
// requires: blocks.wgsl, `override GGML_TYPE: u32` (the ggml type id, model-spec.md §1.3).

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

fn dequant1(base: u32, i: u32) -> f32 {
    switch GGML_TYPE {
        case 0u: { return dequant1_f32(base, i); }
        case 1u: { return dequant1_f16(base, i); }
        case 30u: { return dequant1_bf16(base, i); }
        default: { return 0.0; }
    }
}
