//! `--forms`: issue 19's products under the engine's opt-in mat-mul forms (experiments/NOTES.md,
//! "q6mm"): the x16 kernel's Q6_K decode — through dequant4 as it loads (the default) or as raw
//! words fetched a K step ahead (`FAK_MATMUL_TILING=…-rawq6`), or so in pairs of tasks sharing
//! their high-bit words (`…-rawq6p`) — × the rule for which steps split
//! K across workgroups — the engine's `below` or `waves:N` (`FAK_MATMUL_SPLIT`; N from
//! `MATMUL_WAVES`, default 132: an H100's or H200's SMs, one x16 workgroup each). Every form
//! computes the default's bits (tests/gpu_matmul.rs); each is checked against the CPU here first
//! (the sweep's check) and left out if it fails. Then each product of one Qwen3-8B and one
//! Qwen3.5-27B layer set, with the type the Q4_K_M recipe gives it, is timed at 128 tokens and at
//! the prefill's 512-token chunk, the forms back to back per weight, in ROUNDS rounds. One TSV
//! line per measurement (with the K slices the grid ran in), then per form, model and token
//! count the products' total over the model's layers.
//! `--quick`: two small products, the f32 kernel with both rules (lavapipe's smoke run).

use crate::Weight;
use crate::sweep::{Candidate, check};
use fak::gpu::kernels::matmul::{CoopKernel, Matmul, SplitGrid, X16Tiling};
use fak::gpu::{GpuContext, Kernel};
use fak::quant::GgmlType::{self, Q4_K, Q6_K};

/// (model, product, type, rows, cols, how many of the model's layers run it). The 8B (36
/// layers): q, k, v stacked where v is Q4_K, q, k apart from a Q6_K v in the recipe's
/// use_more_bits layers (18 of 36), ffn_down Q6_K in the same 18. The 27B (48 Gated DeltaNet
/// layers, 16 attention layers): the GDN projections q/k/v with z, β, α stacked where qkv is
/// Q4_K, apart where it is Q6_K (24 of 48), ffn_down Q6_K in 32 of 64.
const PRODUCTS: [(&str, &str, GgmlType, u64, u64, u32); 14] = [
    ("8b", "attn_qkv", Q4_K, 6144, 4096, 18),
    ("8b", "attn_qk", Q4_K, 5120, 4096, 18),
    ("8b", "attn_v", Q6_K, 1024, 4096, 18),
    ("8b", "attn_output", Q4_K, 4096, 4096, 36),
    ("8b", "ffn_gate_up", Q4_K, 24576, 4096, 36),
    ("8b", "ffn_down", Q4_K, 4096, 12288, 18),
    ("8b", "ffn_down", Q6_K, 4096, 12288, 18),
    ("27b", "gdn_qkv", Q6_K, 10240, 5120, 24),
    ("27b", "gdn_qkvzba", Q4_K, 16480, 5120, 24),
    ("27b", "gdn_out", Q4_K, 5120, 6144, 48),
    ("27b", "attn_output", Q4_K, 5120, 6144, 16),
    ("27b", "ffn_gate_up", Q4_K, 34816, 5120, 64),
    ("27b", "ffn_down", Q4_K, 5120, 17408, 32),
    ("27b", "ffn_down", Q6_K, 5120, 17408, 32),
];
const QUICK_PRODUCTS: [(&str, &str, GgmlType, u64, u64, u32); 2] = [
    ("quick", "small", Q6_K, 96, 256, 1),
    ("quick", "tall", Q4_K, 320, 512, 1),
];
const TOKEN_COUNTS: [u32; 2] = [128, 512];
const QUICK_TOKEN_COUNTS: [u32; 2] = [5, 70];
const ROUNDS: usize = 2;

pub fn run(ctx: &GpuContext, quick: bool) {
    let waves = std::env::var("MATMUL_WAVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(132);
    println!("check\tvariant\tform\tverdict\tworst_of_tolerance\tcases\tfirst_failure");
    let candidates = forms(ctx, waves);
    let passed: Vec<&Candidate> = candidates.iter().filter(|c| check(ctx, c)).collect();
    let (products, token_counts): (&[_], &[u32]) = if quick {
        (&QUICK_PRODUCTS, &QUICK_TOKEN_COUNTS)
    } else {
        (&PRODUCTS, &TOKEN_COUNTS)
    };
    let weights: Vec<Weight> = products
        .iter()
        .map(|&(_, _, ty, rows, cols, _)| Weight::random(ctx, ty, rows, cols))
        .collect();
    println!("round\tvariant\tform\tmodel\tproduct\ttype\trows\tcols\ttokens\tslices\tus\ttflops");
    let rounds = if quick { 1 } else { ROUNDS };
    // (form, model, tokens) → summed µs over the model's layers, from the last round.
    let mut totals: Vec<(String, &str, u32, f64)> = Vec::new();
    for round in 0..rounds {
        totals.clear();
        for &n_tokens in token_counts {
            for (&(model, name, ty, rows, cols, layers), weight) in products.iter().zip(&weights) {
                for candidate in &passed {
                    let (seconds, slices) = weight.timed(ctx, &candidate.kernel, n_tokens);
                    let flops = 2.0 * (rows * cols) as f64 * f64::from(n_tokens);
                    println!(
                        "{round}\t{}\t{}\t{model}\t{name}\t{ty}\t{rows}\t{cols}\t{n_tokens}\t{slices}\t{:.1}\t{:.2}",
                        candidate.variant,
                        candidate.tiling,
                        seconds * 1e6,
                        flops / seconds / 1e12
                    );
                    let us = seconds * 1e6 * f64::from(layers);
                    match totals.iter_mut().find(|(f, m, n, _)| {
                        *f == candidate.tiling && *m == model && *n == n_tokens
                    }) {
                        Some(total) => total.3 += us,
                        None => totals.push((candidate.tiling.clone(), model, n_tokens, us)),
                    }
                }
            }
        }
    }
    println!("total\tform\tmodel\ttokens\tms_of_products_per_step");
    for (form, model, n_tokens, us) in totals {
        println!("total\t{form}\t{model}\t{n_tokens}\t{:.2}", us / 1e3);
    }
}

/// The forms the adapter runs: on a 16×16 variant the engine's x16 tiling with Q6_K decoded as
/// it loads and on its raw-word paths, each with the engine's split rule and the wave rule; without cooperative
/// matrices the f32 kernel with both rules.
fn forms(ctx: &GpuContext, waves: u32) -> Vec<Candidate> {
    let mut variants = Vec::new();
    for paths in ctx.runnable_paths().into_iter().map(Matmul::select) {
        if !variants.contains(&paths) {
            variants.push(paths);
        }
    }
    // The cooperative-matrix variant where there is one, else the f32 kernel.
    variants.sort_by_key(|v| v.coop_matrix.is_none());
    let Some(&paths) = variants.first() else {
        return Vec::new();
    };
    let kernels: Vec<Option<CoopKernel>> = match paths.coop_matrix {
        Some(shape) => match CoopKernel::for_shape(shape) {
            // The engine's x16 tiling with Q6_K through dequant4 as it loads, on the raw-word
            // path (the default since 2026-12-05 #7) and on it in pairs, where the sweep has
            // that form.
            CoopKernel::X16(tiling) => [(false, false), (true, false), (true, true)]
                .map(|(raw_q6k, q6k_pairs)| {
                    CoopKernel::X16(X16Tiling {
                        raw_q6k,
                        q6k_pairs,
                        ..tiling
                    })
                })
                .into_iter()
                .filter(|k| CoopKernel::SWEEP.contains(k))
                .map(Some)
                .collect(),
            other => vec![Some(other)],
        },
        None => vec![None],
    };
    let mut out = Vec::new();
    for kernel in kernels {
        for grid in [SplitGrid::Below, SplitGrid::Waves(waves)] {
            let built = match kernel {
                Some(kernel) => Matmul::with_tiling(ctx, paths, kernel),
                None => Matmul::new(ctx, paths),
            };
            let grid_name = match grid {
                SplitGrid::Waves(n) => format!("waves:{n}"),
                _ => "below".to_string(),
            };
            let name = match kernel {
                Some(kernel) => format!("{kernel}/{grid_name}"),
                None => format!("{}/{grid_name}", Matmul::NAME),
            };
            match built {
                Ok(built) => out.push(Candidate {
                    variant: paths.to_string(),
                    tiling: name,
                    kernel: built.with_grid(grid),
                }),
                Err(e) => {
                    let e = e.to_string().replace(['\n', '\t'], " ");
                    println!("check\t{paths}\t{name}\tFAIL\t-\t0\tbuilding: {e}");
                }
            }
        }
    }
    out
}
