//! The prefill mat-mul (wgsl/matmul*.wgsl) against dequantize-then-f64 on the CPU: every type ×
//! every variant the device runs (cooperative-matrix ones too, where the adapter has them) ×
//! n_tokens ∈ {1, 5, 17, 64, 70, 150} × ragged rows and columns, with Y
//! stored and accumulated, K whole and split into slices of one K step (ragged and empty last
//! slices included); weights split across bindings; the dispatches of one mat-mul; the tile
//! geometry the host assumes against the WGSL; every cooperative-matrix kernel
//! (`CoopKernel::every`: the staged K loops and the x16 tilings, where the adapter runs them)
//! and the workgroup memory each declares;
//! bad shapes.

use fak::gpu::kernels::elementwise::{Elementwise, ElementwiseOp, ElementwiseShape};
use fak::gpu::kernels::matmul::{
    CoopKernel, Matmul, MatmulBinding, MatmulBuffers, MatmulInput, MatmulNorm, MatmulOutput,
    MatmulShape, SplitGrid, SplitK, Tile,
};
use fak::gpu::kernels::rms_norm::{NormIo, RmsNorm, RmsNormShape};
use fak::gpu::kernels::support::View;
use fak::gpu::{
    GpuContext, GpuError, KernelPaths, KernelVariant, Step, StepBuffer, read_back_f32,
    storage_buffer, upload, write,
};
use fak::quant::GgmlType;
use fak_tests::inputs::upload_f32;
use fak_tests::matmul::{MAX_TOKENS, Problem, Product};
use fak_tests::wgsl_module::{
    all_coop_paths, odd_sized_workgroup_vars, parse, parse_valid, u32_const, workgroup_bytes,
};
use fak_tests::{gpu, rng, variants};
use rand::Rng;

const TOKEN_COUNTS: [u32; 6] = [1, 5, 17, 64, 70, 150];

/// Slices of one K step for every product of fewer than 64 workgroups: on the small shapes
/// here, 2 to 16 slices, the last ones ragged (K not a multiple of 32) or empty (the K steps do
/// not divide evenly), so the split path and its reduction run on every type and variant.
const SHORT_SLICES: SplitK = SplitK {
    target_workgroups: 64,
    min_slice_steps: 1,
};

/// (rows, cols) per type: rows below one tile and past one of every variant (the largest has
/// 128 rows); columns not a multiple of any tile (F32/F16/BF16 rows end inside a K step and
/// inside a quad), whole blocks otherwise.
fn shapes(ty: GgmlType) -> [(usize, usize); 2] {
    match ty.block_elems() {
        1 => [(37, 77), (140, 302)],
        32 => [(37, 96), (140, 160)],
        _ => [(37, 256), (140, 512)],
    }
}

#[test]
fn every_type_and_variant_matches_the_cpu_on_ragged_shapes_and_token_counts() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0001);
    for paths in variants::<Matmul>(ctx) {
        for split in [SplitK::NEVER, SHORT_SLICES] {
            let kernel = Matmul::new(ctx, paths).unwrap().with_split(split);
            for ty in Matmul::TYPES {
                for (rows, cols) in shapes(ty) {
                    let problem = Problem::random(ty, rows, cols, &mut rng);
                    for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
                        let product =
                            Product::new(ctx, &kernel, &problem, output, u64::MAX).unwrap();
                        for n_tokens in TOKEN_COUNTS {
                            let splits = kernel.grids(&product.binding, n_tokens)[0].splits;
                            let what = format!(
                                "{ty} {rows}x{cols} ({}, K in {splits} slices)",
                                kernel.variant()
                            );
                            product.run(ctx, &kernel, n_tokens, &what).assert();
                        }
                    }
                }
            }
        }
    }
}

/// The value of the module's u32 const `name` (naga evaluates const expressions at parse time).
/// The prefill folds (`FAK_PREFILL_FOLD=norm,swiglu`): on every kernel that folds
/// (`Matmul::folds`: the x16 kernel, on the device), `bind_folded` over the folded op's input
/// gives the bits of that op (the engine's rms_norm or elementwise swiglu, into h) and then the
/// product over h — Store and Accumulate, K whole and in slices, rows of 256 values (rms_norm's
/// 64-lane workgroups) and of 1024 (256 lanes), 5 and 150 tokens; Y poisoned with NaN before
/// each run, the unfolded result finite. A kernel that does not fold (lavapipe's) refuses it.
#[test]
fn each_prefill_fold_computes_the_bits_of_the_op_then_the_product() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0009);
    for paths in variants::<Matmul>(ctx) {
        let ops = (
            RmsNorm::new(ctx, paths).unwrap(),
            Elementwise::new(ctx, paths).unwrap(),
        );
        for split in [SplitK::NEVER, SHORT_SLICES] {
            let kernel = Matmul::new(ctx, paths).unwrap().with_split(split);
            let cases = [
                (GgmlType::Q4_K, 256),
                (GgmlType::Q6_K, 1024),
                (GgmlType::Q4_K, 1024),
            ];
            for (ty, cols) in cases {
                let problem = Problem::random(ty, 140, cols, &mut rng);
                // The norm's weight; the SwiGLU's [gate | up] rows.
                let weight: Vec<f32> = (0..cols).map(|_| rng.random_range(0.5f32..1.5)).collect();
                let gate_up: Vec<f32> = (0..2 * problem.x.len())
                    .map(|_| rng.random_range(-4f32..4.0))
                    .collect();
                for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
                    for fold in [Fold::Norm(&weight), Fold::SwiGlu(&gate_up)] {
                        let what = format!(
                            "{} {ty} 140x{cols} {output:?} ({}, {split:?})",
                            fold.name(),
                            kernel.variant()
                        );
                        fold_case(ctx, (&kernel, &ops), &problem, fold, output, &what);
                    }
                }
            }
        }
    }
}

/// The op a case folds, and its operand: the norm's weight, or the SwiGLU's [gate | up] rows
/// (which replace the problem's X).
#[derive(Clone, Copy)]
enum Fold<'a> {
    Norm(&'a [f32]),
    SwiGlu(&'a [f32]),
}

impl Fold<'_> {
    fn name(self) -> &'static str {
        match self {
            Fold::Norm(_) => "norm",
            Fold::SwiGlu(_) => "swiglu",
        }
    }
}

/// One case of [`each_prefill_fold_computes_the_bits_of_the_op_then_the_product`].
fn fold_case(
    ctx: &GpuContext,
    (kernel, (norm, elementwise)): (&Matmul, &(RmsNorm, Elementwise)),
    problem: &Problem,
    fold: Fold<'_>,
    output: MatmulOutput,
    what: &str,
) {
    const EPS: f32 = 1e-6;
    let (rows, cols) = (problem.rows, problem.cols);
    let w = upload(ctx, "w", &problem.w_bytes).unwrap();
    let x = upload_f32(
        ctx,
        "x",
        match fold {
            Fold::Norm(_) => &problem.x,
            Fold::SwiGlu(gate_up) => gate_up,
        },
    );
    let norm_w = upload_f32(
        ctx,
        "norm w",
        match fold {
            Fold::Norm(weight) => weight,
            Fold::SwiGlu(_) => &[0.0],
        },
    );
    let h = storage_buffer(ctx, "h", 4 * problem.x.len() as u64).unwrap();
    let y = storage_buffer(ctx, "y", 4 * problem.y0.len() as u64).unwrap();
    let step = StepBuffer::new(ctx);
    let shape = problem.shape(output);
    let buffers = |x| MatmulBuffers {
        weights: &w,
        x,
        y: &y,
        step: &step,
    };
    let input = match fold {
        Fold::Norm(_) => MatmulInput::Normed(MatmulNorm {
            weight: &norm_w,
            eps: EPS,
        }),
        Fold::SwiGlu(_) => MatmulInput::SwiGlu,
    };
    let folded = kernel.bind_folded(ctx, shape, buffers(&x), input);
    if !kernel.folds() {
        assert!(
            folded.is_err(),
            "{what}: a kernel that does not fold bound a fold"
        );
        return;
    }
    let folded = folded.unwrap();
    let plain = kernel.bind(ctx, shape, buffers(&h)).unwrap();
    let width = cols as u32;
    // The unfolded op, into h.
    let (normed, swiglu) = match fold {
        Fold::Norm(_) => {
            let norm_shape = RmsNormShape {
                n: width,
                rows_per_token: 1,
                eps: EPS,
                max_tokens: MAX_TOKENS,
            };
            let io = NormIo::Out {
                x: View::rows(&x, width),
                y: View::rows(&h, width),
            };
            (
                Some(
                    norm.bind(ctx, norm_shape, io, Some(&norm_w), &step)
                        .unwrap(),
                ),
                None,
            )
        }
        Fold::SwiGlu(_) => {
            let half = |offset| View::rows(&x, width).strided(2 * width, 0).at(offset);
            let op = ElementwiseOp::SwiGlu {
                gate: half(0),
                up: half(width),
                out: View::rows(&h, width),
            };
            let op_shape = ElementwiseShape {
                heads: 1,
                width,
                max_tokens: MAX_TOKENS,
            };
            (
                None,
                Some(elementwise.bind(ctx, op_shape, op, &step).unwrap()),
            )
        }
    };
    for n_tokens in [5u32, 150] {
        let run = |record: &dyn Fn(&mut wgpu::ComputePass)| -> Vec<f32> {
            let initial = match output {
                MatmulOutput::Store => vec![f32::NAN; problem.y0.len()],
                MatmulOutput::Accumulate => problem.y0.clone(),
            };
            write(ctx, &y, 0, bytemuck::cast_slice(&initial)).unwrap();
            step.set(ctx, Step::new(0, n_tokens, 0));
            ctx.run_pass("prefill fold", record).unwrap();
            read_back_f32(ctx, &y, 0..4 * u64::from(n_tokens) * rows as u64).unwrap()
        };
        let want = run(&|pass| {
            if let Some(b) = &normed {
                norm.encode(pass, b, n_tokens).unwrap();
            }
            if let Some(b) = &swiglu {
                elementwise.encode(pass, b, n_tokens).unwrap();
            }
            kernel.encode(pass, &plain, n_tokens).unwrap();
        });
        let got = run(&|pass| {
            kernel.encode(pass, &folded, n_tokens).unwrap();
        });
        let what = format!("{what}, {n_tokens} tokens");
        assert!(
            want.iter().all(|v| v.is_finite()),
            "{what}: unfolded not finite"
        );
        let differ = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "{what}: {differ} outputs differ from the unfolded bits"
        );
    }
}

/// F16 (rows ending inside a quad), a block type and two super-block types.
const TILING_TYPES: [GgmlType; 4] = [
    GgmlType::F16,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Every K loop of the sweep on the cooperative-matrix variants the adapter runs (none on
/// lavapipe: the H200 runs this before matmul-bench --sweep trusts a timing), on TILING_TYPES, K
/// whole and in one-step slices, one tile and more than one tile of tokens.
#[test]
fn every_coop_tiling_matches_the_cpu() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0006);
    let coop = variants::<Matmul>(ctx)
        .into_iter()
        .filter(|p| p.coop_matrix.is_some());
    for paths in coop {
        for tiling in CoopKernel::every() {
            for split in [SplitK::NEVER, SHORT_SLICES] {
                let kernel = Matmul::with_tiling(ctx, paths, tiling)
                    .unwrap()
                    .with_split(split);
                for ty in TILING_TYPES {
                    for (rows, cols) in shapes(ty) {
                        let problem = Problem::random(ty, rows, cols, &mut rng);
                        for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
                            let product =
                                Product::new(ctx, &kernel, &problem, output, u64::MAX).unwrap();
                            for n_tokens in [5, 150] {
                                let what = format!("{ty} {rows}x{cols} ({paths}, {tiling})");
                                product.run(ctx, &kernel, n_tokens, &what).assert();
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The host refuses a kernel by [`CoopKernel::workgroup_bytes`] and grids by its tile: both
/// must be what the WGSL declares (naga's layouter; TILE_T, TILE_R and the workgroup size WG),
/// for every shape and tiling, and every tiling's module validates (tests/portability.rs
/// translates each one).
#[test]
fn each_coop_tiling_declares_the_workgroup_memory_the_host_counts() {
    for (coop, paths) in all_coop_paths() {
        for tiling in CoopKernel::every() {
            if !tiling.supports(coop) {
                continue;
            }
            let (module, info) = parse_valid(&Matmul::source_for(paths, tiling).module.text());
            // The product's (the x16 module's to_f16_norm has a reduction's partials of its own).
            let bytes = workgroup_bytes(&module, Some((&info, "main")));
            assert_eq!(bytes, tiling.workgroup_bytes(coop), "{coop:?} {tiling}");
            assert!(bytes <= 48 << 10, "{coop:?} {tiling}: {bytes} bytes");
            assert_eq!(odd_sized_workgroup_vars(&module), [], "{coop:?} {tiling}");
            let tile = tiling.tile(coop);
            assert_eq!(
                ["TILE_T", "TILE_R", "WG"].map(|name| u32_const(&module, name)),
                [tile.tokens, tile.rows, 32 * tiling.subgroups()],
                "{coop:?} {tiling}"
            );
        }
    }
}

/// K split across workgroups below two workgroups: a 48-row weight (one row tile of every
/// variant) is cut into two slices at 3 tokens (one workgroup) and summed slice by slice inside
/// each workgroup at 150 (two or three token tiles).
const SPLIT_BELOW_TWO: SplitK = SplitK {
    target_workgroups: 2,
    min_slice_steps: 1,
};

/// A row's result does not depend on how many other rows share the step: the first 3 tokens'
/// outputs are bit-for-bit the same in a 3-token step (K split across workgroups, partial sums
/// added by reduce_partials) and in a 150-token step (each workgroup adding the same slices in
/// the same order itself; the `below` rule with a target of two workgroups makes exactly that
/// split), on the fallback and on every sliced x16 kernel the adapter runs, for a
/// super-block type, its six-bit sibling and an unblocked type; both runs also match the CPU.
/// (The staged cooperative-matrix kernel sums K whole when it does not split: not checked.)
#[test]
fn a_rows_result_does_not_depend_on_how_many_rows_share_the_step() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0007);
    let mut kernels = Vec::new();
    for paths in variants::<Matmul>(ctx) {
        match paths.coop_matrix {
            None => kernels.push(Matmul::new(ctx, paths).unwrap()),
            Some(shape) => {
                for tiling in CoopKernel::every() {
                    if matches!(tiling, CoopKernel::X16(t) if t.sliced) && tiling.supports(shape) {
                        kernels.push(Matmul::with_tiling(ctx, paths, tiling).unwrap());
                    }
                }
            }
        }
    }
    for kernel in kernels {
        let kernel = kernel
            .with_split(SPLIT_BELOW_TWO)
            .with_grid(SplitGrid::Below);
        let name = match kernel.tiling() {
            Some(tiling) => format!("{} {tiling}", kernel.variant()),
            None => kernel.variant().to_string(),
        };
        for (ty, cols) in [
            (GgmlType::Q4_K, 2048),
            (GgmlType::Q6_K, 2048),
            (GgmlType::F16, 1000),
        ] {
            let problem = Problem::random(ty, 48, cols, &mut rng);
            for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
                let product = Product::new(ctx, &kernel, &problem, output, u64::MAX).unwrap();
                let splits = |n| kernel.grids(&product.binding, n)[0].splits;
                assert_eq!((splits(3), splits(150)), (2, 1), "{ty} ({name})");
                let what = format!("{ty} 48x{cols} ({name})");
                let few = product.run(ctx, &kernel, 3, &what);
                let many = product.run(ctx, &kernel, 150, &what);
                let bits = |v: &[f32]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
                let shared = few.got.len();
                assert!(
                    bits(&few.got) == bits(&many.got[..shared]),
                    "{what}, {output:?}: the first 3 tokens' outputs differ between a step of 3 \
                     (K split across workgroups) and a step of 150"
                );
                few.assert();
                many.assert();
            }
        }
    }
}

/// Every rule for which steps split K across workgroups (`FAK_MATMUL_SPLIT`) computes the
/// engine rule's bits: the slices are the weight's under every rule, so only the grid moves. On
/// every variant the adapter runs (its engine kernel and, on 16×16, the Q6_K raw-word twin),
/// short slices so that the small shapes have 10–16 of them, Store and Accumulate; each rule's
/// grids must differ from the engine's at some token count (else the test would compare a
/// rule with itself), and its outputs match the CPU.
#[test]
fn every_split_grid_rule_computes_the_engine_rules_bits() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0008);
    let rules = [
        SplitGrid::Never,
        SplitGrid::Below,
        SplitGrid::Waves(3),
        SplitGrid::Waves(4),
    ];
    let mut tilings = Vec::new();
    for paths in variants::<Matmul>(ctx) {
        tilings.push((paths, None));
        if let Some(shape) = paths.coop_matrix {
            let raw = CoopKernel::SWEEP
                .into_iter()
                .filter(|k| k.supports(shape) && k.to_string().contains("-rawq6"));
            tilings.extend(raw.map(|k| (paths, Some(k))));
        }
    }
    for (paths, tiling) in tilings {
        let build = |grid: SplitGrid| {
            let kernel = match tiling {
                None => Matmul::new(ctx, paths).unwrap(),
                Some(tiling) => Matmul::with_tiling(ctx, paths, tiling).unwrap(),
            };
            kernel.with_split(SHORT_SLICES).with_grid(grid)
        };
        // Each kernel built once (a build compiles a pipeline per type).
        let engine = build(SplitGrid::DEFAULT);
        let kernels = rules.map(|rule| (rule, build(rule)));
        let name = format!("{paths} {:?}", engine.tiling());
        for (ty, cols) in [
            (GgmlType::Q6_K, 512),
            (GgmlType::Q4_K, 512),
            (GgmlType::F16, 302),
        ] {
            let problem = Problem::random(ty, 140, cols, &mut rng);
            for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
                let reference = Product::new(ctx, &engine, &problem, output, u64::MAX).unwrap();
                for (rule, kernel) in &kernels {
                    let (rule, kernel) = (*rule, kernel);
                    let product = Product::new(ctx, kernel, &problem, output, u64::MAX).unwrap();
                    let mut moved = false;
                    for n_tokens in [5, 70, 150] {
                        let splits = |k: &Matmul, p: &Product| k.grids(&p.binding, n_tokens)[0];
                        moved |= splits(kernel, &product) != splits(&engine, &reference);
                        let what = format!("{ty} 140x{cols} ({name}, {rule:?}, {n_tokens} tokens)");
                        let want = reference.run(ctx, &engine, n_tokens, &what);
                        let got = product.run(ctx, kernel, n_tokens, &what);
                        let bits = |v: &[f32]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
                        assert!(
                            bits(&got.got) == bits(&want.got),
                            "{what}, {output:?}: the outputs differ from the engine rule's"
                        );
                        got.assert();
                    }
                    if rule == SplitGrid::Never {
                        assert!(moved, "{ty} ({name}): never splitting changed no grid");
                    }
                }
            }
        }
    }
}

/// The cooperative-matrix variants the adapter runs; none (lavapipe) prints `what` SKIPPED.
fn coop_variants(ctx: &GpuContext, what: &str) -> Vec<KernelPaths> {
    let coop: Vec<_> = variants::<Matmul>(ctx)
        .into_iter()
        .filter(|p| p.coop_matrix.is_some())
        .collect();
    if coop.is_empty() {
        eprintln!("{what} SKIPPED (the adapter has no cooperative matrices)");
    }
    coop
}

/// `kernel` computes `control`'s bits on `problem` at each token count, Store and Accumulate,
/// and matches the CPU.
fn assert_same_bits(
    ctx: &GpuContext,
    (kernel, control): (&Matmul, &Matmul),
    problem: &Problem,
    token_counts: &[u32],
    what: &str,
) {
    let bits = |v: &[f32]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
    for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
        let product = Product::new(ctx, kernel, problem, output, u64::MAX).unwrap();
        let reference = Product::new(ctx, control, problem, output, u64::MAX).unwrap();
        for &n_tokens in token_counts {
            let got = product.run(ctx, kernel, n_tokens, what);
            let want = reference.run(ctx, control, n_tokens, what);
            assert!(
                bits(&got.got) == bits(&want.got),
                "{what}, {output:?}, {n_tokens} tokens: the outputs differ from the control's"
            );
            got.assert();
        }
    }
}

/// The Q6_K raw-word path (`-rawq6`: 12 words fetched a K step ahead, decoded after the MMAs;
/// `-rawq6p`: the same in pairs of tasks sharing their high-bit words) computes its twin's bits (decoded through dequant4 as it loads): the same (d · scale) ·
/// (q − 32) per element rounded to f16, the same MMAs in the same order — so the engine may take
/// either. Every x16 tiling with the raw path against its twin, Q6_K rows below and past a tile,
/// K whole and in short slices, Store and Accumulate, 5 and 150 tokens; each also against the CPU.
/// Only where the adapter has 16×16 cooperative matrices (lavapipe: SKIPPED on stderr).
#[test]
fn the_q6k_raw_path_computes_the_dequant_paths_bits() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0009);
    for paths in coop_variants(ctx, "the Q6_K raw path") {
        let shape = paths.coop_matrix.unwrap();
        let raw = CoopKernel::SWEEP
            .into_iter()
            .filter(|k| k.supports(shape) && k.to_string().contains("-rawq6"));
        for raw in raw {
            let label = raw.to_string();
            let twin_label = label.replace("-rawq6p", "").replace("-rawq6", "");
            let twin = CoopKernel::SWEEP
                .into_iter()
                .find(|k| k.to_string() == twin_label)
                .expect("every -rawq6 kernel has its twin in the sweep");
            for split in [SplitK::NEVER, SHORT_SLICES] {
                let kernel = |k| {
                    Matmul::with_tiling(ctx, paths, k)
                        .unwrap()
                        .with_split(split)
                };
                let (raw_kernel, twin_kernel) = (kernel(raw), kernel(twin));
                for (rows, cols) in shapes(GgmlType::Q6_K) {
                    let problem = Problem::random(GgmlType::Q6_K, rows, cols, &mut rng);
                    let what = format!("Q6_K {rows}x{cols} ({paths}, {label} against its twin)");
                    let kernels = (&raw_kernel, &twin_kernel);
                    assert_same_bits(ctx, kernels, &problem, &[5, 150], &what);
                }
            }
        }
    }
}

/// Every sliced x16 tiling computes the engine kernel's bits: its tile of tokens and rows, its
/// stages and its Q6_K loads change which workgroup computes an output and when its operands
/// arrive, never the f16 values, the MMAs or their order along K (the weight's slices, one
/// 16-deep product after another) — so a rule may pick a tiling by the step's token count (a
/// later turn's 160 tokens in 64-token tiles, issue 21) without a row's bits following the
/// step. Each against the engine's kernel on Q4_K and Q6_K, K whole and in short slices, 5, 70
/// and 150 tokens (150: two 128-token tiles, the last ragged, or three of 64), Store and
/// Accumulate; each also against the CPU. Only where the adapter has 16×16 cooperative
/// matrices (lavapipe: SKIPPED on stderr).
#[test]
fn every_sliced_x16_tiling_computes_the_engine_kernels_bits() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_000a);
    for paths in coop_variants(ctx, "the x16 tilings' bits") {
        let shape = paths.coop_matrix.unwrap();
        let others = CoopKernel::SWEEP.into_iter().filter(|k| {
            k.supports(shape)
                && matches!(k, CoopKernel::X16(t) if t.sliced)
                && *k != CoopKernel::for_shape(shape)
        });
        // The engine's kernel built once per split (a build compiles a pipeline per type).
        let engines = [SplitK::NEVER, SHORT_SLICES]
            .map(|split| (split, Matmul::new(ctx, paths).unwrap().with_split(split)));
        for other in others {
            for (split, engine) in &engines {
                let kernel = Matmul::with_tiling(ctx, paths, other)
                    .unwrap()
                    .with_split(*split);
                for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
                    for (rows, cols) in shapes(ty) {
                        let problem = Problem::random(ty, rows, cols, &mut rng);
                        let what =
                            format!("{ty} {rows}x{cols} ({paths}, {other} against the engine's)");
                        assert_same_bits(ctx, (&kernel, engine), &problem, &[5, 70, 150], &what);
                    }
                }
            }
        }
    }
}

/// A small binding cap so that tiny weights split the way one larger than 128 MiB (lavapipe) or
/// 2 GiB (Vulkan) does; rows of 210 B (Q6_K) and 154 B (F16) put the later ranges at offsets that
/// are not word-aligned inside their windows.
const SPLIT_BINDING: u64 = 4096;

#[test]
fn a_weight_larger_than_one_binding_is_split_into_row_ranges() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0002);
    for paths in variants::<Matmul>(ctx) {
        let kernel = Matmul::new(ctx, paths).unwrap().with_split(SHORT_SLICES);
        for (ty, cols) in [(GgmlType::Q6_K, 256), (GgmlType::F16, 77)] {
            let problem = Problem::random(ty, 100, cols, &mut rng);
            let output = MatmulOutput::Accumulate;
            let product = Product::new(ctx, &kernel, &problem, output, SPLIT_BINDING).unwrap();
            let ranges = product.binding.ranges();
            assert!(
                ranges >= 3,
                "{ty}: expected a split into row ranges, got {ranges}"
            );
            for n_tokens in [5, 70] {
                let what = format!("{ty} 100x{cols} split {ranges} ways ({})", kernel.variant());
                product.run(ctx, &kernel, n_tokens, &what).assert();
            }
        }
    }
}

#[test]
fn one_matmul_dispatches_once_per_row_range_whatever_the_token_count() {
    let ctx = gpu();
    let problem = Problem::random(GgmlType::Q6_K, 100, 256, &mut rng(0x3a7_0003));
    for paths in variants::<Matmul>(ctx) {
        let kernel = Matmul::new(ctx, paths).unwrap().with_split(SplitK::NEVER);
        let tile = kernel.tile();
        for max_binding in [u64::MAX, SPLIT_BINDING] {
            let product =
                Product::new(ctx, &kernel, &problem, MatmulOutput::Store, max_binding).unwrap();
            let ranges = product.binding.ranges();
            let rows_grid: Vec<u32> = kernel
                .grids(&product.binding, 1)
                .iter()
                .map(|g| g.tiles.y)
                .collect();
            for n_tokens in 0..=MAX_TOKENS {
                let grids = kernel.grids(&product.binding, n_tokens);
                assert_eq!(grids.len(), ranges, "{n_tokens} tokens ({paths})");
                for (grid, &rows) in grids.iter().zip(&rows_grid) {
                    let x = n_tokens.div_ceil(tile.tokens);
                    assert_eq!(grid.tiles.x, x, "{n_tokens} tokens");
                    assert_eq!(grid.tiles.y, rows, "{n_tokens} tokens: the row grid moved");
                    assert_eq!(
                        (grid.splits, grid.dispatches()),
                        (1, 1),
                        "{n_tokens} tokens"
                    );
                }
            }
        }
    }
}

/// The host computes grids from [`Tile::of`]; the kernels' workgroups cover `TILE_T × TILE_R`
/// as their WGSL consts say. Read back through naga for every variant, so the
/// cooperative-matrix ones are checked on adapters that cannot run them.
#[test]
fn the_host_tile_geometry_matches_each_variants_wgsl() {
    for variant in KernelVariant::all_of::<Matmul>() {
        let module = parse(&variant.source.module.text());
        let tile = Tile::of(variant.paths);
        assert_eq!(
            (u32_const(&module, "TILE_T"), u32_const(&module, "TILE_R")),
            (tile.tokens, tile.rows),
            "matmul ({})",
            variant.paths
        );
    }
}

#[test]
fn bad_shapes_types_and_token_counts_are_refused_before_any_gpu_work() {
    let ctx = gpu();
    let kernel = Matmul::new(ctx, KernelPaths::FALLBACK).unwrap();
    let w = upload(ctx, "bad w", &[0u8; 4096]).unwrap();
    let x = storage_buffer(ctx, "bad x", 4 * 8 * 256).unwrap();
    let y = storage_buffer(ctx, "bad y", 4 * 8 * 16).unwrap();
    let step = StepBuffer::new(ctx);
    let buffers = MatmulBuffers {
        weights: &w,
        x: &x,
        y: &y,
        step: &step,
    };
    let bind = |ty, rows, cols, max_tokens| {
        let shape = MatmulShape {
            ty,
            rows,
            cols,
            max_tokens,
            output: MatmulOutput::Store,
        };
        kernel.bind(ctx, shape, buffers)
    };
    let shape_error = |r: Result<MatmulBinding, GpuError>| matches!(r, Err(GpuError::Shape { .. }));
    // Not whole Q4_K blocks.
    assert!(shape_error(bind(GgmlType::Q4_K, 4, 100, 8)));
    // 15 Q8_0 rows of 256 fit the 4096 weight bytes (15 × 272), 16 do not.
    assert!(bind(GgmlType::Q8_0, 15, 256, 8).is_ok());
    assert!(shape_error(bind(GgmlType::Q8_0, 16, 256, 8)));
    // X holds 8 tokens of 256 columns, Y 8 tokens of 16 rows.
    assert!(shape_error(bind(GgmlType::Q8_0, 15, 256, 9)));
    assert!(shape_error(bind(GgmlType::Q4_0, 17, 256, 8)));
    assert!(shape_error(bind(GgmlType::F32, 0, 256, 8)));
    assert!(shape_error(bind(GgmlType::F32, 1, 256, 0)));
    assert!(matches!(
        bind(GgmlType::Q2_K, 1, 256, 8),
        Err(GpuError::UnsupportedType { .. })
    ));
    let binding = bind(GgmlType::Q8_0, 15, 256, 8).unwrap();
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut pass = encoder.begin_compute_pass(&Default::default());
    assert!(matches!(
        kernel.encode(&mut pass, &binding, 9),
        Err(GpuError::Shape { .. })
    ));
    assert!(kernel.encode(&mut pass, &binding, 8).is_ok());
}
