// rope_angle — the rotary angle of position p for one tabulated frequency, reduced exactly; the
// rotation of one pair and a head's RMS scale (shared by the kernels that rotate heads, so they
// compute the same bits)
//
// Accuracy: θ computed in f32 (p · inv_freq) is off by up to ulp(θ)/2, 0.016 rad at p = 2^18, so
// the angle is kept in turns and reduced exactly instead. The host tabulates, per frequency,
// f = inv_freq_i / 2π (in f64, the factor folded in) split as f_hi + f_mid + f_lo, f_hi and f_mid
// of 12 significant bits each. With p = p_hi·2^12 + p_lo (p < 2^24), every product of a 12-bit
// half of p with f_hi or f_mid is an exact f32, so its fractional part is exact; p·f_lo is below
// 2^-24·p·f turns, so its rounding is negligible. The fractions are added one at a time and
// wrapped back below 1, each addition rounding by at most 2^-24 turn: the phase is within about
// 5e-7 turn (3e-6 rad) of the f64 one at any position, and sin/cos see an angle in [−π, π],
// where every backend's sin/cos is accurate.
// provides: angle(p, f) -> f32 in [−π, π], for f = table[i] = (f_hi, f_mid, f_lo, 0)
//           (engine `RopeTable`); rope_pair(i, half, neox) -> the element indices (a, b) of pair
//           i; rotate(a, b, θ) -> (a·cosθ − b·sinθ, a·sinθ + b·cosθ); rms_scale(Σx², n, eps)
//           -> 1/sqrt(Σx²/n + eps). Used by rope_kv.wgsl and attn_decode_rope.wgsl.

const TWO_PI: f32 = 6.283185307179586;

// The angle p·2π·f, reduced to [−π, π], for f tabulated as (f_hi, f_mid, f_lo) as above.
fn angle(p: u32, f: vec4<f32>) -> f32 {
    let p_hi = f32(p >> 12u) * 4096.0;
    let p_lo = f32(p & 4095u);
    var turns = fract(p_hi * f.x);
    turns = fract(turns + fract(p_lo * f.x));
    turns = fract(turns + fract(p_hi * f.y));
    turns = fract(turns + fract(p_lo * f.y));
    turns = turns + f32(p) * f.z;
    return (turns - round(turns)) * TWO_PI;
}

// The element indices (a, b) of pair i < half: NeoX (i, i + half) or adjacent (2i, 2i + 1).
fn rope_pair(i: u32, half: u32, neox: bool) -> vec2<u32> {
    if neox {
        return vec2(i, i + half);
    }
    return vec2(2u * i, 2u * i + 1u);
}

// (a, b) turned by θ.
fn rotate(a: f32, b: f32, theta: f32) -> vec2<f32> {
    let c = cos(theta);
    let s = sin(theta);
    return vec2(a * c - b * s, a * s + b * c);
}

// The RMSNorm scale of a head of n values whose squares sum to `total`.
fn rms_scale(total: f32, n: u32, eps: f32) -> f32 {
    return 1.0 / sqrt(total / f32(n) + eps);
}
