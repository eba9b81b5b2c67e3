// q8_block — one 32-element block of f32 values as 8-bit codes and a scale (llama.cpp's q8_1
// rounding, without its block sum)
//
// Math: d = max_i |v_i| / 127,  q_i = clamp(round(v_i / d), −127, 127)  (all 0 when d = 0), so
// |v_i − d·q_i| ≤ d/2 (round: ties to even). Codes are packed 4 per u32, q_{4j+i} in byte i of
// word j (two's complement). Every writer of q8 vectors (quantize_q8.wgsl; the quantized outputs
// of matvec.wgsl, gdn_decode.wgsl and attn_decode.wgsl) rounds a block through q8_block, so they
// agree bit for bit: a kernel that writes its output as q8 blocks gives the next mat-vec the codes
// quantize_q8 would have given it from the same f32 values.
// provides: q8_scale(amax) -> f32 · q8_pack(v, d) -> u32 · struct Q8Block · q8_block(v) -> Q8Block

fn q8_scale(amax: f32) -> f32 {
    return amax / 127.0;
}

// The codes of four values of a block whose scale is d, packed as i8 bytes.
fn q8_pack(v: vec4<f32>, d: f32) -> u32 {
    var q = vec4<f32>(0.0);
    if d > 0.0 {
        q = clamp(round(v / d), vec4<f32>(-127.0), vec4<f32>(127.0));
    }
    let b = bitcast<vec4<u32>>(vec4<i32>(q)) & vec4<u32>(0xffu);
    return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}

// One block's 8 words of codes and its scale.
struct Q8Block {
    codes: array<u32, 8>,
    d: f32,
}

// The 32 values v[j][i] = v_{4j+i} of a block as codes and a scale. (The largest magnitude is
// exact in any order, so every writer gets the same d from the same values.)
fn q8_block(v: array<vec4<f32>, 8>) -> Q8Block {
    var amax = 0.0;
    for (var j = 0u; j < 8u; j++) {
        let a = abs(v[j]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    var block: Q8Block;
    block.d = q8_scale(amax);
    for (var j = 0u; j < 8u; j++) {
        block.codes[j] = q8_pack(v[j], block.d);
    }
    return block;
}
