//! `--sweep`: the cooperative-matrix mat-mul's K loops (`CoopTiling::SWEEP`: K step 32 / 64,
//! register prefetch on / off, one or two pairs of tiles) and the f32 kernel as the control.
//! Each is first checked against the CPU (the GPU tests' oracle, `fak_tests::matmul`) on small
//! ragged products with the engine's split-K rule: one `check` line per kernel, PASS or FAIL, and
//! a kernel that fails is not timed. Then every one that passed is timed, back to back per
//! weight and token count, on the Qwen3.5-27B FFN products (ffn_gate_up 34816 × 5120, ffn_down
//! 5120 × 17408) with F16 and Q4_K weights at 128 and 2048 tokens, K split by the engine's rule
//! (ffn_down at 128 tokens is cut in 7 slices; the rest run whole). One TSV line per
//! measurement. `--quick`: small shapes, for a smoke run on lavapipe (the f32 kernel only there).

use crate::Weight;
use fak::gpu::kernels::matmul::{CoopTiling, Matmul, MatmulOutput};
use fak::gpu::{GpuContext, Kernel};
use fak::quant::GgmlType;
use fak_tests::matmul::{Problem, Product};

const SHAPES: [(&str, u64, u64); 2] = [("ffn_gate_up", 34816, 5120), ("ffn_down", 5120, 17408)];
const QUICK_SHAPES: [(&str, u64, u64); 1] = [("small", 96, 256)];
const TYPES: [GgmlType; 2] = [GgmlType::F16, GgmlType::Q4_K];
const TOKEN_COUNTS: [u32; 2] = [128, 2048];
const QUICK_TOKEN_COUNTS: [u32; 2] = [5, 70];

/// (type, rows, cols) of the check: F16 rows ending inside a quad and a K step, a block type and
/// a super-block type, each more than one 128-row tile, K cut in two slices by the default rule.
const CHECKS: [(GgmlType, usize, usize); 3] = [
    (GgmlType::F16, 140, 302),
    (GgmlType::Q8_0, 140, 544),
    (GgmlType::Q4_K, 140, 512),
];
/// Token counts of the check: a partial tile, more than one tile.
const CHECK_TOKENS: [u32; 2] = [5, 150];

/// One kernel of the sweep and its name in the TSV.
struct Candidate {
    variant: String,
    tiling: String,
    kernel: Matmul,
}

pub fn run(ctx: &GpuContext, quick: bool) {
    println!("check\tvariant\ttiling\tverdict\tworst_of_tolerance\tcases\tfirst_failure");
    let candidates = candidates(ctx);
    let passed: Vec<&Candidate> = candidates.iter().filter(|c| check(ctx, c)).collect();
    let (shapes, token_counts): (&[_], &[u32]) = if quick {
        (&QUICK_SHAPES, &QUICK_TOKEN_COUNTS)
    } else {
        (&SHAPES, &TOKEN_COUNTS)
    };
    println!("variant\ttiling\ttype\tshape\trows\tcols\ttokens\tus_per_dispatch\ttflops");
    for ty in TYPES {
        for &(name, rows, cols) in shapes {
            let weight = Weight::random(ctx, ty, rows, cols);
            if let Some(first) = passed.first() {
                // Warm-up, not printed: the first group of a call has read slow before
                // (experiments/NOTES.md, session #5 call 2).
                weight.seconds(ctx, &first.kernel, token_counts[token_counts.len() - 1]);
            }
            for &n_tokens in token_counts {
                for candidate in &passed {
                    let seconds = weight.seconds(ctx, &candidate.kernel, n_tokens);
                    let flops = 2.0 * (rows * cols) as f64 * f64::from(n_tokens);
                    println!(
                        "{}\t{}\t{ty}\t{name}\t{rows}\t{cols}\t{n_tokens}\t{:.1}\t{:.2}",
                        candidate.variant,
                        candidate.tiling,
                        seconds * 1e6,
                        flops / seconds / 1e12
                    );
                }
            }
        }
    }
}

/// The f32 kernel, then every K loop of each cooperative-matrix variant the adapter runs; one that
/// does not build gets its FAIL line here and is left out.
fn candidates(ctx: &GpuContext) -> Vec<Candidate> {
    let mut variants = Vec::new();
    for paths in ctx.runnable_paths().into_iter().map(Matmul::select) {
        if !variants.contains(&paths) {
            variants.push(paths);
        }
    }
    variants.sort_by_key(|v| v.coop_matrix.is_some());
    let mut out = Vec::new();
    for paths in variants {
        let tilings: &[CoopTiling] = match paths.coop_matrix {
            None => &[CoopTiling::DEFAULT],
            Some(_) => &CoopTiling::SWEEP,
        };
        for &tiling in tilings {
            let label = match paths.coop_matrix {
                None => "-".to_string(),
                Some(_) => tiling.to_string(),
            };
            match Matmul::with_tiling(ctx, paths, tiling) {
                Ok(kernel) => out.push(Candidate {
                    variant: paths.to_string(),
                    tiling: label,
                    kernel,
                }),
                Err(e) => {
                    let e = e.to_string().replace(['\n', '\t'], " ");
                    println!("check\t{paths}\t{label}\tFAIL\t-\t0\tbuilding: {e}");
                }
            }
        }
    }
    out
}

/// Runs the check products on `candidate`, prints its line; whether every output passed.
fn check(ctx: &GpuContext, candidate: &Candidate) -> bool {
    let mut rng = fak_tests::rng(0x5eed_0001);
    let mut worst = 0.0f64;
    let mut cases = 0;
    let mut failure = None;
    for (ty, rows, cols) in CHECKS {
        let problem = Problem::random(ty, rows, cols, &mut rng);
        for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
            let product = Product::new(ctx, &candidate.kernel, &problem, output, u64::MAX)
                .expect("binding the check product");
            for n_tokens in CHECK_TOKENS {
                let what = format!("{ty} {rows}x{cols}");
                let result = product.run(ctx, &candidate.kernel, n_tokens, &what);
                let (measured, _) = result.measure();
                cases += 1;
                worst = worst.max(measured.worst_of_tolerance);
                if (!measured.pass() || result.wrote_outside) && failure.is_none() {
                    failure = Some(result.what.clone());
                }
            }
        }
    }
    let verdict = if failure.is_none() { "PASS" } else { "FAIL" };
    println!(
        "check\t{}\t{}\t{verdict}\t{worst:.3}\t{cases}\t{}",
        candidate.variant,
        candidate.tiling,
        failure.as_deref().unwrap_or("-")
    );
    failure.is_none()
}
