//! The shared workgroup reductions (wgsl/reduce_subgroup.wgsl, wgsl/reduce_workgroup.wgsl), run
//! through the test-only `reduce_probe` kernel on every variant the device has.

use fak::gpu::Kernel;
use fak_tests::reduce_probe::ReduceProbe;
use fak_tests::{Tolerance, assert_close, gpu, rng, variants};
use rand::Rng;

/// Invocation t's strided partial of one row, summed in the kernel's order (f32, i = t, t+WG, …),
/// so the CPU partials equal the GPU's exactly and only the cross-invocation sum differs.
fn partials(row: &[f32], wg: usize) -> Vec<f32> {
    (0..wg)
        .map(|t| row.iter().skip(t).step_by(wg).fold(0.0f32, |a, &x| a + x))
        .collect()
}

#[test]
fn workgroup_sum_matches_f64_on_every_variant_workgroup_size_and_ragged_row() {
    let ctx = gpu();
    let mut rng = rng(0x5eed_0001);
    for paths in variants::<ReduceProbe>(ctx) {
        let probe = ReduceProbe::new(ctx, paths);
        for wg in ReduceProbe::WORKGROUP_SIZES {
            for n in [1, wg - 1, wg, 3 * wg + 5] {
                let rows = 3;
                let x: Vec<f32> = (0..rows * n as usize)
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect();
                let out = probe.run(ctx, wg, &x, n);
                let what = format!("{} WG={wg} n={n}", probe.variant());
                for (r, row) in x.chunks(n as usize).enumerate() {
                    let acc = partials(row, wg as usize);
                    let total: f64 = acc.iter().map(|&a| f64::from(a)).sum();
                    let squares: f64 = acc.iter().map(|&a| f64::from(a) * f64::from(a)).sum();
                    let magnitude: f64 = acc.iter().map(|&a| f64::from(a).abs()).sum();
                    // An f32 tree or subgroup sum of WG ≤ 256 terms errs by at most
                    // log2(WG)·2^-24 of Σ|acc| ≈ 5e-7 of it; 1e-5 leaves room for any order.
                    let tol = Tolerance {
                        rel: 0.0,
                        abs: (1e-5 * magnitude.max(squares)) as f32,
                    };
                    assert_close(
                        &format!("{what} row {r}"),
                        &out.sums[2 * r..2 * r + 2],
                        &[total as f32, squares as f32],
                        tol,
                    );
                    // Every invocation must receive the very same total.
                    let seen = &out.seen[r * wg as usize..(r + 1) * wg as usize];
                    assert_close(
                        &format!("{what} row {r}: the total each invocation received"),
                        seen,
                        &vec![out.sums[2 * r]; wg as usize],
                        Tolerance::EXACT,
                    );
                }
            }
        }
    }
}

#[test]
fn tests_cover_the_subgroup_path_and_its_fallback_where_the_adapter_has_subgroups() {
    let ctx = gpu();
    let variants = variants::<ReduceProbe>(ctx);
    assert!(
        variants.iter().any(|v| !v.subgroup),
        "no fallback variant: {variants:?}"
    );
    if ctx.device.features().contains(wgpu::Features::SUBGROUP) {
        assert!(
            variants.iter().any(|v| v.subgroup),
            "subgroup path untested: {variants:?}"
        );
    }
    assert!(variants.iter().all(|v| ReduceProbe::AXES.select(*v) == *v));
}
