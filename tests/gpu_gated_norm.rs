//! The gated RMSNorm after the delta rule (wgsl/gated_norm.wgsl) against the CPU reference
//! (`rms_norm` without weight, times ssm_norm, times silu(z)), per value head, on every variant.

use fak::gpu::kernels::delta_state::HeadMapping;
use fak::gpu::kernels::gated_norm::GatedNorm;

use fak_tests::gdn::{GpuLayer, LayerWeights, cpu_gated_norm, dims, uniform_vec};
use fak_tests::{Tolerance, assert_close, gpu, rng, variants};

#[test]
fn gated_norm_matches_cpu_per_value_head_on_every_variant() {
    let ctx = gpu();
    let mut rng = rng(0x9a7e_d001);
    for paths in variants::<GatedNorm>(ctx) {
        // dv 16 (fewer values than the 64 invocations) and 128 (two per invocation).
        for dv in [16, 128] {
            let d = dims(2, 6, 16, dv, 4, HeadMapping::Tiled);
            let weights = LayerWeights::random(&d, &mut rng);
            let layer = GpuLayer::new(ctx, paths, d, &weights, (3, 1, 1));
            let n = 3 * d.value_dim() as usize;
            // Heads of very different scales: the norm must be per head.
            let mut o = uniform_vec(&mut rng, n, -1.0, 1.0);
            for (i, x) in o.iter_mut().enumerate() {
                *x *= [1e-3, 1.0, 40.0][(i / dv as usize) % 3];
            }
            let z = uniform_vec(&mut rng, n, -6.0, 6.0);
            let got = layer.norm_only(ctx, &o, &z);
            let want: Vec<f32> = o
                .chunks(d.value_dim() as usize)
                .zip(z.chunks(d.value_dim() as usize))
                .flat_map(|(o, z)| cpu_gated_norm(&d, o, z, &weights.norm))
                .collect();
            // Σo² over ≤ 128 terms in f32 (≤ 128·2^-24 relative), rsqrt and exp to a few ulps:
            // 1e-5 relative; the absolute floor covers outputs near zero where silu(z) ≈ 0.
            let tol = Tolerance {
                rel: 1e-5,
                abs: 1e-6,
            };
            assert_close(&format!("{paths} dv={dv}"), &got, &want, tol);
        }
    }
}
