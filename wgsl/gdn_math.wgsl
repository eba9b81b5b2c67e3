// gdn_math — the scalar functions of the Gated DeltaNet kernels (model-spec.md §5.4)
//
// sigmoid(x) = 1 / (1 + e^−x)      (β = σ(b))
// silu(x)    = x / (1 + e^−x)      (after the conv; the gate of the gated RMSNorm)
// softplus(x) = log(1 + e^x), linear above 20 (PyTorch's threshold), for g = ssm_a · softplus(α + dt_bias)
// One definition each, so the separate kernels (ssm_conv, delta_prep, gated_norm) and the fused
// decode (gdn_decode) compute the same values the same way.
// provides: sigmoid, silu, log_1p, softplus.

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// log(1 + u) for 0 ≤ u ≤ 1, to a few 1e-6 relative. GPU `log` is only specified to an absolute
// 2^-21 near 1 (Vulkan), which for log(1 + u) with small u is a large relative error, so small u
// takes the series: its first omitted term u^7/7 is below 1.5e-7 of the value at u = 0.1.
fn log_1p(u: f32) -> f32 {
    if u < 0.1 {
        return u * (1.0 - u * (0.5 - u * (1.0 / 3.0 - u * (0.25 - u * (0.2 - u / 6.0)))));
    }
    return log(1.0 + u);
}

// softplus with PyTorch's threshold: linear above 20.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        return x;
    }
    return max(x, 0.0) + log_1p(exp(-abs(x)));
}
