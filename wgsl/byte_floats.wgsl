// byte_floats — the four byte lanes of a u32 as exact f32 values, without int→float conversions
//
// Math: byte_floats(w, offset)[i] = ((w >> 8i) & 0xff) − offset, exactly, for integer offsets
// 0 ≤ offset < 2^23 (every code of a GGUF block is a byte lane once masked: nibbles, 5- and 6-bit
// codes, and i8 codes after `^ 0x80808080u` with offset 128).
//
// Why: OR-ing a byte b into the mantissa of 2^23 (bits 0x4b000000) gives the float 2^23 + b exactly;
// subtracting 2^23 + offset (exact, and exact again by Sterbenz since both lie in [2^23, 2^24))
// leaves b − offset. That is integer shifts and masks plus one float subtract per lane. The
// obvious `vec4<f32>(unpack4xU8(w))` compiles to int→float conversions, which NVIDIA GPUs run
// at an eighth of the FMA rate (16 per SM per clock against 128): at Q4_K's 0.56 bytes per
// weight a mat-vec would be conversion-bound at about half the H200's memory bandwidth
// (experiments/matvec-design.md).
// provides: byte_floats(w: u32, offset: f32) -> vec4<f32>

fn byte_floats(w: u32, offset: f32) -> vec4<f32> {
    let lanes = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(lanes | vec4<u32>(0x4b000000u)) - (8388608.0 + offset);
}
