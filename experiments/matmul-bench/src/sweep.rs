//! `--sweep`: the cooperative-matrix mat-mul's kernels (`CoopKernel::SWEEP`: the staged kernel's
//! default and the x16 kernel's tilings) and the f32 kernel as the control.
//! Each is first checked against the CPU (the GPU tests' oracle, `fak_tests::matmul`) on small
//! ragged products with the engine's split-K rule: one `check` line per kernel, PASS or FAIL, and
//! a kernel that fails is not timed. Then every one that passed is timed, back to back per
//! weight and token count, in `ROUNDS` rounds (old and new interleaved, so clock drift shows as
//! spread between rounds, not as a difference between kernels): the Qwen3-8B layer's products
//! (attn_qkv, attn_output, ffn_gate_up, ffn_down) with Q4_K and Q6_K weights at 128 and 2048
//! tokens, with a per-layer line (tok/s from the mat-muls alone over 36 layers), and (round 0
//! only) the Qwen3.5-27B FFN products with Q4_K at 128 and 2048 tokens; K split by the engine's
//! rule. One TSV line per measurement. `--tokens 160,640` times those token counts instead (every
//! group: a later turn's prefill steps are 160–800 tokens, issue 21). `--quick`: small shapes,
//! one round, for a smoke run on lavapipe (the f32 kernel only there).

use crate::{LAYERS, SHAPES, SHAPES_27B, Weight};
use fak::gpu::kernels::matmul::{CoopKernel, Matmul, MatmulOutput};
use fak::gpu::{GpuContext, Kernel};
use fak::quant::GgmlType;
use fak_tests::matmul::{Problem, Product};

const QUICK_SHAPES: [(&str, u64, u64); 1] = [("small", 96, 256)];
const TYPES: [GgmlType; 2] = [GgmlType::Q4_K, GgmlType::Q6_K];
const TOKEN_COUNTS: [u32; 2] = [128, 2048];
const TOKEN_COUNTS_27B: [u32; 2] = [128, 2048];
const QUICK_TOKEN_COUNTS: [u32; 2] = [5, 70];
const ROUNDS: usize = 3;

/// (type, rows, cols) of the check: F16 rows ending inside a quad and a K step, a block type and
/// the two super-block types of Q4_K_M, each more than one 128-row tile, K cut in two slices by
/// the default rule.
const CHECKS: [(GgmlType, usize, usize); 4] = [
    (GgmlType::F16, 140, 302),
    (GgmlType::Q8_0, 140, 544),
    (GgmlType::Q4_K, 140, 512),
    (GgmlType::Q6_K, 140, 512),
];
/// Token counts of the check: a partial tile, more than one tile.
const CHECK_TOKENS: [u32; 2] = [5, 150];

/// One kernel of the sweep and its name in the TSV.
pub struct Candidate {
    pub variant: String,
    pub tiling: String,
    pub kernel: Matmul,
}

/// A sweep's group of products: (type, shapes, token counts, whether the shapes are one 8B layer).
type ShapeGroup = (
    GgmlType,
    &'static [(&'static str, u64, u64)],
    Vec<u32>,
    bool,
);

/// `tokens`: the token counts every group is timed at instead of its own.
pub fn run(ctx: &GpuContext, quick: bool, tokens: Option<Vec<u32>>) {
    println!("check\tvariant\ttiling\tverdict\tworst_of_tolerance\tcases\tfirst_failure");
    let candidates = candidates(ctx);
    let passed: Vec<&Candidate> = candidates.iter().filter(|c| check(ctx, c)).collect();
    let groups: Vec<ShapeGroup> = if quick {
        vec![(
            GgmlType::Q4_K,
            &QUICK_SHAPES,
            QUICK_TOKEN_COUNTS.to_vec(),
            false,
        )]
    } else {
        let mut groups: Vec<ShapeGroup> = TYPES
            .iter()
            .map(|&ty| (ty, &SHAPES[..], TOKEN_COUNTS.to_vec(), true))
            .collect();
        let ffn_27b = &SHAPES_27B[SHAPES_27B.len() - 2..];
        groups.push((GgmlType::Q4_K, ffn_27b, TOKEN_COUNTS_27B.to_vec(), false));
        groups
    };
    let groups: Vec<ShapeGroup> = match tokens {
        Some(counts) => groups
            .into_iter()
            .map(|(ty, shapes, _, layer)| (ty, shapes, counts.clone(), layer))
            .collect(),
        None => groups,
    };
    let weights: Vec<Vec<Weight>> = groups
        .iter()
        .map(|&(ty, shapes, _, _)| {
            shapes
                .iter()
                .map(|&(_, rows, cols)| Weight::random(ctx, ty, rows, cols))
                .collect()
        })
        .collect();
    println!("round\tvariant\ttiling\ttype\tshape\trows\tcols\ttokens\tus_per_dispatch\ttflops");
    let rounds = if quick { 1 } else { ROUNDS };
    for round in 0..rounds {
        for ((ty, shapes, token_counts, layer), weights) in groups.iter().zip(&weights) {
            let (ty, shapes, layer) = (*ty, *shapes, *layer);
            // The 27B group once: the rounds are for the 8B layer's old-versus-new spread.
            if round > 0 && !layer {
                continue;
            }
            if let (Some(first), Some(weight)) = (passed.first(), weights.first()) {
                // Warm-up, not printed: the first group of a call has read slow before
                // (experiments/NOTES.md, session #5 call 2).
                weight.seconds(ctx, &first.kernel, token_counts[token_counts.len() - 1]);
            }
            for &n_tokens in token_counts {
                let mut per_layer = vec![0.0; passed.len()];
                for (&(name, rows, cols), weight) in shapes.iter().zip(weights) {
                    for (candidate, total) in passed.iter().zip(&mut per_layer) {
                        let seconds = weight.seconds(ctx, &candidate.kernel, n_tokens);
                        *total += seconds;
                        let flops = 2.0 * (rows * cols) as f64 * f64::from(n_tokens);
                        println!(
                            "{round}\t{}\t{}\t{ty}\t{name}\t{rows}\t{cols}\t{n_tokens}\t{:.1}\t{:.2}",
                            candidate.variant,
                            candidate.tiling,
                            seconds * 1e6,
                            flops / seconds / 1e12
                        );
                    }
                }
                if layer {
                    for (candidate, seconds) in passed.iter().zip(&per_layer) {
                        println!(
                            "{round}\t{}\t{}\t{ty}\tlayer\t-\t-\t{n_tokens}\t{:.1}\t-\t# x{LAYERS} layers: {:.0} prompt tok/s from mat-muls alone",
                            candidate.variant,
                            candidate.tiling,
                            seconds * 1e6,
                            f64::from(n_tokens) / (seconds * LAYERS)
                        );
                    }
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
        let tilings: &[CoopKernel] = match paths.coop_matrix {
            None => &[CoopKernel::STAGED],
            Some(_) => &CoopKernel::SWEEP,
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
pub fn check(ctx: &GpuContext, candidate: &Candidate) -> bool {
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
