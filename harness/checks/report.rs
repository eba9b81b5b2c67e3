//! Kernel checks as a report instead of a panic, for `harness selftest` on the machine's own
//! adapter: a kernel family on seeded random inputs, on every variant the adapter can run, its
//! outputs poisoned (NaN) before the run, measured against the CPU reference under the tolerance
//! the GPU tests hold it to (the same helpers and constants: `gdn`, `compare`).

use super::compare::{Measured, Output, Tolerance, measure};
use super::gdn::{
    CpuOutputs, CpuState, Form, GpuLayer, GpuOutputs, LAYER_TOL, LayerWeights, Projections,
    STEP_TOL, cpu_layer, dims,
};
use super::kv::Pages;
use super::matmul::{Problem, Product};
use super::matvec::{self, Path};
use super::rms_norm;
use super::rope_kv::StepTokens;
use super::variants;
use super::{argmax, attn_decode, attn_prefill, dequant, elementwise, embed, rope_kv};
use fak::gpu::kernels::argmax::{Argmax, ArgmaxRows};
use fak::gpu::kernels::attn_decode::{AttnDecode, AttnShape};
use fak::gpu::kernels::attn_prefill::AttnPrefill;
use fak::gpu::kernels::delta_prep::DeltaPrep;
use fak::gpu::kernels::delta_state::DeltaDims;
use fak::gpu::kernels::delta_state::HeadMapping;
use fak::gpu::kernels::dequant::{Dequant, DequantShape};
use fak::gpu::kernels::elementwise::Elementwise;
use fak::gpu::kernels::embed::{Embed, EmbedShape};
use fak::gpu::kernels::gated_delta::GatedDeltaDecode;
use fak::gpu::kernels::gated_delta_chunk::GatedDeltaChunked;
use fak::gpu::kernels::gated_norm::GatedNorm;
use fak::gpu::kernels::gdn_decode::GdnDecode;
use fak::gpu::kernels::matmul::{Matmul, MatmulOutput};
use fak::gpu::kernels::matvec::MatVec;
use fak::gpu::kernels::quantize_q8::QuantizeQ8;
use fak::gpu::kernels::rms_norm::RmsNorm;
use fak::gpu::kernels::rope::RopePairing;
use fak::gpu::kernels::rope_kv::RopeKv;
use fak::gpu::kernels::ssm_conv::SsmConv;
use fak::gpu::{GpuContext, Kernel, KernelPaths};

use fak::quant::GgmlType;
use serde::Serialize;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// One kernel on one variant, on one case.
#[derive(Clone, Debug, Serialize)]
pub struct KernelCheck {
    pub kernel: &'static str,
    /// The variant the kernel ran: its own axes of the adapter path (`KernelPaths::name`).
    pub variant: String,
    #[serde(skip)]
    pub variant_paths: KernelPaths,
    /// The adapter path the check was built for (the variant itself where the check runs each
    /// variant once).
    pub path: String,
    pub case: String,
    /// The tolerance the output was held to (for dequantized values the loosest of their groups';
    /// `EXACT` where the check did not run).
    pub tolerance: Tolerance,
    pub measured: Option<Measured>,
    pub pass: bool,
    /// Why the check could not run (the kernel failed to build or run).
    pub error: Option<String>,
}

/// Every family checked here, in order: the Gated DeltaNet kernels of a qwen35 layer, decode and
/// prefill attention, RMSNorm, the fused norm + RoPE + KV write, the embedding, the elementwise
/// ops, argmax, dequantization, the prefill mat-mul.
pub fn run_all(ctx: &GpuContext) -> Vec<KernelCheck> {
    let mut out = gated_deltanet(ctx);
    out.extend(attention_decode(ctx));
    out.extend(attention_prefill(ctx));
    out.extend(rms_norms(ctx));
    out.extend(rope_kv(ctx));
    out.extend(embed(ctx));
    out.extend(elementwise(ctx));
    out.extend(argmax(ctx));
    out.extend(dequant(ctx));
    out.extend(matmul(ctx));
    out.extend(matvecs(ctx));
    out
}

/// The mat-vec on every variant, at small shapes (7 rows, every batch capacity, accumulate on
/// and off, strided x): the f32 path on the Q4_K_M types and F32, and its folded norm + gate/up
/// pairing; on int-dot variants the integer path instead — quantize_q8 (plain and with the
/// norm) and the integer product of every type it takes, against W·x̂ (tight) and W·x (loose),
/// and its pairing, and (Q4_K) the pairing with the norm quantized in each workgroup, also bit
/// for bit against the product of quantize_q8's vectors; each output under its own bound
/// (`matvec`).
pub fn matvecs(ctx: &GpuContext) -> Vec<KernelCheck> {
    let mut out = Vec::new();
    for variant in variants::<MatVec>(ctx) {
        // Built once per variant (44 pipelines: seconds on lavapipe), then every case.
        let built = catch_unwind(AssertUnwindSafe(|| {
            let kernel =
                MatVec::new(ctx, variant).unwrap_or_else(|e| panic!("building matvec: {e}"));
            let quantizer = variant.int_dot.then(|| {
                QuantizeQ8::new(ctx, variant)
                    .unwrap_or_else(|e| panic!("building quantize_q8: {e}"))
            });
            (kernel, quantizer)
        }));
        let (kernel, quantizer) = match built {
            Ok(built) => built,
            Err(panic) => {
                out.push(failed("matvec", variant, "build".into(), panic));
                continue;
            }
        };
        let path = quantizer.as_ref().map_or(Path::F32, Path::Q8);
        let types: &[GgmlType] = match variant.int_dot {
            true => &MatVec::Q8_TYPES,
            false => &[
                GgmlType::F32,
                GgmlType::Q8_0,
                GgmlType::Q4_K,
                GgmlType::Q6_K,
            ],
        };
        for (seed, &ty) in types.iter().enumerate() {
            let seed = 0x5e1f_3a7e + seed as u64;
            let cols = matvec::col_counts(ty)[1];
            let what = format!("{ty} 7x{cols}, batches 1-8, accumulate, strided x");
            out.extend(matvec_check(variant, what, || {
                let bytes = matvec::random_weights(ty, 7, cols, seed);
                let (offset, binding) = (matvec::WEIGHTS_OFFSET, ctx.max_binding_size());
                let shape = (7, cols);
                matvec::check_tensor(ctx, &kernel, path, ty, shape, &bytes, offset, binding, seed)
            }));
            // The folded norm with the gate/up pairing, as the MLP runs it.
            if matches!(ty, GgmlType::Q4_K | GgmlType::Q8_0) {
                let what = format!("{ty} 5 paired outputs, norm, strided x");
                out.extend(matvec_check(variant, what, || {
                    matvec::check_fused(ctx, &kernel, path, ty, 5, matvec::FUSIONS[1], seed)
                }));
            }
        }
    }
    out
}

/// One mat-vec case on `variant`, the checks of each kernel it exercises: quantize_q8's outputs
/// (int-dot variants: recorded on the mat-vec's variant, as part of its integer path), then
/// the product's (`matvec` or `matvec_q8`), each output under its own bound.
fn matvec_check(
    variant: KernelPaths,
    case: String,
    run: impl FnOnce() -> Vec<Output>,
) -> Vec<KernelCheck> {
    let product = match variant.int_dot {
        true => "matvec_q8",
        false => "matvec",
    };
    let outputs = match catch_unwind(AssertUnwindSafe(run)) {
        Ok(outputs) => outputs,
        Err(panic) => return vec![failed(product, variant, case, panic)],
    };
    let (quantized, products): (Vec<Output>, Vec<Output>) = outputs
        .into_iter()
        .partition(|o| o.what.starts_with("quantize_q8"));
    let mut checks = report("quantize_q8", variant, &case, &quantized);
    checks.extend(report(product, variant, &case, &products));
    checks
}

/// RMSNorm on every variant: per-token rows of a hidden size (5 of 6 tokens, weighted, into a
/// poisoned output that must stay poisoned outside the rows) and qwen35's per-head q norm in
/// place at the [q | gate] stride (the gates must come back unchanged).
pub fn rms_norms(ctx: &GpuContext) -> Vec<KernelCheck> {
    let cases = [
        rms_norm::Case {
            layout: rms_norm::Layout::rows(1024),
            max_tokens: 6,
            n_tokens: 5,
            weighted: true,
            in_place: false,
        },
        rms_norm::Case {
            layout: rms_norm::Layout {
                n: 256,
                heads: 4,
                offset: 0,
                token_stride: 2 * 256 * 4,
                head_stride: 2 * 256,
            },
            max_tokens: 4,
            n_tokens: 3,
            weighted: true,
            in_place: true,
        },
    ];
    let mut out = Vec::new();
    for variant in variants::<RmsNorm>(ctx) {
        for (seed, case) in cases.iter().enumerate() {
            let what = format!(
                "n {} heads {} tokens {}/{}{}",
                case.layout.n,
                case.layout.heads,
                case.n_tokens,
                case.max_tokens,
                if case.in_place { " in place" } else { "" }
            );
            out.push(check_one("rms_norm", variant, what, rms_norm::TOL, || {
                let kernel =
                    RmsNorm::new(ctx, variant).unwrap_or_else(|e| panic!("building rms_norm: {e}"));
                let run = rms_norm::run_case(ctx, &kernel, case, seed as u64);
                assert!(!run.wrote_outside, "{}: wrote outside its rows", run.what);
                (run.got, run.want)
            }));
        }
    }
    out
}

/// Decode attention at both models' head shapes on every variant: qwen3's (GQA 2, head 128;
/// three sequences on shuffled pages, split in 4) and qwen35's gated attention (head 256, queries
/// inside [q | gate] rows; one sequence, split in 3), under the GPU test's tolerance.
pub fn attention_decode(ctx: &GpuContext) -> Vec<KernelCheck> {
    let cases = || {
        let shape = |head_dim| AttnShape {
            n_head: 4,
            n_kv: 2,
            head_dim,
        };
        [
            attn_decode::Case {
                shape: shape(128),
                lens: vec![5, 70, 33],
                n_split: 4,
                table: true,
                gated_q: false,
            },
            attn_decode::Case {
                shape: shape(256),
                lens: vec![37],
                n_split: 3,
                table: false,
                gated_q: true,
            },
        ]
    };
    let mut out = Vec::new();
    for variant in variants::<AttnDecode>(ctx) {
        for (seed, case) in cases().into_iter().enumerate() {
            let what = format!(
                "head {} lens {:?} splits {}{}",
                case.shape.head_dim,
                case.lens,
                case.n_split,
                if case.gated_q { " gated q" } else { "" }
            );
            out.push(check_one(
                "attn_decode",
                variant,
                what,
                attn_decode::TOL,
                || {
                    let kernel = AttnDecode::new(ctx, variant, case.shape)
                        .unwrap_or_else(|e| panic!("building attn_decode: {e}"));
                    let (_, got, want) = attn_decode::run_case(ctx, &kernel, &case, seed as u64);
                    (got, want)
                },
            ));
        }
        out.extend(attention_decode_rope(ctx, variant));
    }
    out
}

/// The decode attention's rope form (the engine's default decode: rope_kv's norms, rotation and
/// cache write done inside the attention pass) on `variant`: qwen3's inputs (norms, NeoX, head
/// 128) for one sequence over 3 splits, and qwen35's (norms, 64 of 256 dims rotated, q inside
/// [q | gate]) for three sequences on shuffled pages from a token table; each bit for bit rope_kv
/// + the two-pass decode and against the CPU's rope and attention (`attn_decode::run_rope_case`).
fn attention_decode_rope(ctx: &GpuContext, variant: KernelPaths) -> Vec<KernelCheck> {
    let cases = [
        (128, 128, vec![37], 3, false),
        (256, 64, vec![30, 9, 1], 4, true),
    ];
    let mut out = Vec::new();
    for (seed, (head_dim, n_rot, lens, n_split, gated_q)) in cases.into_iter().enumerate() {
        let what =
            format!("rope form head {head_dim} rotating {n_rot} lens {lens:?} splits {n_split}");
        let rc = attn_decode::RopeCase {
            case: attn_decode::Case {
                shape: AttnShape {
                    n_head: 4,
                    n_kv: 2,
                    head_dim,
                },
                table: lens.len() > 1,
                lens,
                n_split,
                gated_q,
            },
            n_rot,
            pairing: RopePairing::Neox,
            norms: true,
            factors: false,
        };
        out.push(check_one(
            "attn_decode",
            variant,
            what,
            attn_decode::ROPE_TOL,
            || {
                let mut kernel = AttnDecode::new(ctx, variant, rc.case.shape)
                    .unwrap_or_else(|e| panic!("building attn_decode: {e}"));
                kernel
                    .build_rope(ctx)
                    .unwrap_or_else(|e| panic!("building attn_decode's rope form: {e}"));
                let rope_kv =
                    RopeKv::new(ctx, variant).unwrap_or_else(|e| panic!("building rope_kv: {e}"));
                let seed = 0x5e1f_a770 + seed as u64;
                let (_, got, want) = attn_decode::run_rope_case(ctx, &kernel, &rope_kv, &rc, seed);
                (got, want)
            },
        ));
    }
    out
}

/// Prefill attention on every variant at both models' head shapes: qwen3's (GQA 2, head 128) on
/// a fresh prompt of 21 tokens, positions from the Step, and qwen35's (head 256) continuing a
/// cache of 30 tokens by 13 on a shuffled page-table row, positions from a token table.
pub fn attention_prefill(ctx: &GpuContext) -> Vec<KernelCheck> {
    let shape = |head_dim| AttnShape {
        n_head: 4,
        n_kv: 2,
        head_dim,
    };
    let cases = [
        attn_prefill::Case {
            shape: shape(128),
            start: 0,
            n_tokens: 21,
            table: false,
        },
        attn_prefill::Case {
            shape: shape(256),
            start: 30,
            n_tokens: 13,
            table: true,
        },
    ];
    let mut out = Vec::new();
    for variant in variants::<AttnPrefill>(ctx) {
        for (seed, case) in cases.iter().enumerate() {
            let what = format!(
                "head {} tokens {}..{}{}",
                case.shape.head_dim,
                case.start,
                case.start + case.n_tokens,
                if case.table { " table" } else { "" }
            );
            out.extend(check_outputs("attn_prefill", variant, what, || {
                let kernel = AttnPrefill::new(ctx, variant, case.shape)
                    .unwrap_or_else(|e| panic!("building attn_prefill: {e}"));
                vec![attn_prefill::run_case(ctx, &kernel, case, seed as u64)]
            }));
        }
    }
    out
}

/// The fused per-head norm + RoPE + KV write on every variant (subgroup or not, f32 or f16
/// cache): qwen3's shape on a prefill across a page boundary, and qwen35's (q inside [q | gate]
/// rows, partial rotary) on batched decode tokens of shuffled page rows, one past its row and one
/// on a page past the cache; the rotated q, and the k and v caches (every other slot must stay
/// poisoned), each a check.
pub fn rope_kv(ctx: &GpuContext) -> Vec<KernelCheck> {
    type Layout = fn() -> (Pages, Vec<StepTokens>);
    let cases: [(&str, rope_kv::Case, Layout); 2] = [
        (
            "qwen3 prefill 13..18",
            rope_kv::Case::QWEN3,
            rope_kv::prefill_across_pages,
        ),
        ("qwen35 batched decode", rope_kv::Case::QWEN35, || {
            rope_kv::batched_decode(0x5e1f_40be)
        }),
    ];
    let mut out = Vec::new();
    for variant in variants::<RopeKv>(ctx) {
        for (seed, &(what, case, layout)) in cases.iter().enumerate() {
            out.extend(check_outputs("rope_kv", variant, what.into(), || {
                let kernel =
                    RopeKv::new(ctx, variant).unwrap_or_else(|e| panic!("building rope_kv: {e}"));
                let (pages, steps) = layout();
                let seed = 0x5e1f_40be + seed as u64;
                rope_kv::run(ctx, &kernel, &case, &pages, &steps, seed).into()
            }));
        }
    }
    out
}

/// The embedding lookup of every table type: 5 tokens from a table of 40 rows of two blocks (37
/// elements for the unblocked types), with a repeated id, the first and last rows and two ids
/// past the table (zero rows), into strided rows of a poisoned output.
pub fn embed(ctx: &GpuContext) -> Vec<KernelCheck> {
    let mut out = Vec::new();
    for variant in variants::<Embed>(ctx) {
        for (seed, ty) in Embed::TYPES.into_iter().enumerate() {
            let block = ty.block_elems();
            let shape = EmbedShape {
                ty,
                rows: 40,
                cols: if block == 1 { 37 } else { 2 * block },
            };
            let what = format!("{ty} {}x{}, 5 tokens", shape.rows, shape.cols);
            out.extend(check_outputs("embed", variant, what, || {
                let kernel =
                    Embed::new(ctx, variant).unwrap_or_else(|e| panic!("building embed: {e}"));
                let seed = 0x5e1f_e4b0 + seed as u64;
                let bytes = embed::random_table(ty, shape.rows, shape.cols, seed);
                let ids = embed::random_ids(&mut super::rng(seed), shape.rows, 5);
                let max = ctx.max_binding_size();
                vec![embed::look_up(ctx, &kernel, shape, &bytes, &ids, max).output]
            }));
        }
    }
    out
}

/// The elementwise ops on every variant: SwiGLU of a fused [gate | up] projection (the last
/// token's output must stay poisoned), the residual add (exact), and qwen35's sigmoid gate read
/// at the [q | gate] stride.
pub fn elementwise(ctx: &GpuContext) -> Vec<KernelCheck> {
    type Op = fn(&GpuContext, &Elementwise, u64) -> Output;
    let ops: [(&str, Op); 4] = [
        ("swiglu n 1000", |ctx, k, seed| {
            elementwise::swiglu(ctx, k, 1000, seed)
        }),
        ("add n 37", |ctx, k, seed| {
            elementwise::add(ctx, k, 37, seed)
        }),
        ("bias add n 37", |ctx, k, seed| {
            elementwise::add_bias(ctx, k, 37, seed)
        }),
        ("sigmoid gate 3x256", |ctx, k, seed| {
            elementwise::sigmoid_gate(ctx, k, 3, 256, seed)
        }),
    ];
    let mut out = Vec::new();
    for variant in variants::<Elementwise>(ctx) {
        for (seed, (what, op)) in ops.iter().enumerate() {
            out.extend(check_outputs(
                "elementwise",
                variant,
                (*what).into(),
                || {
                    let kernel = Elementwise::new(ctx, variant)
                        .unwrap_or_else(|e| panic!("building elementwise: {e}"));
                    vec![op(ctx, &kernel, 0x5e1f_e1e0 + seed as u64)]
                },
            ));
        }
    }
    out
}

/// Greedy argmax on every variant: the last of 3 rows at Qwen's vocabulary of 151 936 with the
/// maximum tied 4 times (the lowest index wins), and every row of a batched decode (plain,
/// NaN-strewn, ±0) wrapping the history ring; next_token and the ring compared exactly.
pub fn argmax(ctx: &GpuContext) -> Vec<KernelCheck> {
    let cases: [(ArgmaxRows, u32, &[usize], u32); 2] = [
        (ArgmaxRows::Last, 151_936, &[1], 5),
        (ArgmaxRows::All, 9000, &[0, 2, 3], argmax::HISTORY - 1),
    ];
    let mut out = Vec::new();
    for variant in variants::<Argmax>(ctx) {
        for (seed, &(rows, vocab, styles, out_index)) in cases.iter().enumerate() {
            let what = format!("{rows:?} rows vocab {vocab}");
            out.extend(check_outputs("argmax", variant, what, || {
                let kernel =
                    Argmax::new(ctx, variant).unwrap_or_else(|e| panic!("building argmax: {e}"));
                let mut rng = super::rng(0x5e1f_a700 + seed as u64);
                vec![argmax::run_case(
                    ctx, &kernel, &mut rng, vocab, rows, styles, out_index,
                )]
            }));
        }
    }
    out
}

/// Dequantization of every type on every variant: 3 rows of two blocks (5 × 37 elements for the
/// unblocked types) of random codes and finite f16 scales, into a poisoned output.
pub fn dequant(ctx: &GpuContext) -> Vec<KernelCheck> {
    let mut out = Vec::new();
    for variant in variants::<Dequant>(ctx) {
        for (seed, ty) in Dequant::TYPES.into_iter().enumerate() {
            let block = ty.block_elems();
            let (rows, row_len) = if block == 1 { (5, 37) } else { (3, 2 * block) };
            let shape = DequantShape { ty, rows, row_len };
            let what = format!("{ty} {rows}x{row_len}");
            out.extend(check_outputs("dequant", variant, what, || {
                let kernel =
                    Dequant::new(ctx, variant).unwrap_or_else(|e| panic!("building dequant: {e}"));
                let mut rng = super::rng(0x5e1f_dec0 + seed as u64);
                vec![dequant::run_case(
                    ctx,
                    &kernel,
                    shape,
                    dequant::Scales::AnyFinite,
                    &mut rng,
                )]
            }));
        }
    }
    out
}

/// The prefill mat-mul on every variant (the cooperative-matrix ones where the adapter has them
/// and `FAK_COOP_MATRIX` allows them): per type, 70 rows × a few blocks (a row tile and a ragged one),
/// stored for 17 tokens (part of a token tile) and accumulated for 70 (more than one tile).
pub fn matmul(ctx: &GpuContext) -> Vec<KernelCheck> {
    let mut out = Vec::new();
    for variant in variants::<Matmul>(ctx) {
        for (seed, ty) in Matmul::TYPES.into_iter().enumerate() {
            let cols = match ty.block_elems() {
                1 => 77,
                32 => 96,
                _ => 256,
            };
            let what = format!("{ty} 70x{cols}");
            out.extend(check_outputs("matmul", variant, what.clone(), || {
                let kernel =
                    Matmul::new(ctx, variant).unwrap_or_else(|e| panic!("building matmul: {e}"));
                let mut rng = super::rng(0x5e1f_3a70 + seed as u64);
                let problem = Problem::random(ty, 70, cols, &mut rng);
                [
                    (MatmulOutput::Store, 17, "stored, 17 tokens"),
                    (MatmulOutput::Accumulate, 70, "accumulated, 70 tokens"),
                ]
                .into_iter()
                .map(|(output, n_tokens, part)| {
                    let product = Product::new(ctx, &kernel, &problem, output, u64::MAX)
                        .unwrap_or_else(|e| panic!("binding matmul: {e}"));
                    Output {
                        part,
                        ..product.run(ctx, &kernel, n_tokens, &what)
                    }
                })
                .collect()
            }));
        }
    }
    out
}

/// Every output of one kernel variant on one case, a check each (named `case, part` where the
/// case has several; outputs of one part measured together); a panic (the kernel failed to
/// build, bind or run) is one check with the error. An output written outside its place fails,
/// whatever its values.
fn check_outputs(
    kernel: &'static str,
    variant: KernelPaths,
    case: String,
    run: impl FnOnce() -> Vec<Output>,
) -> Vec<KernelCheck> {
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(outputs) => report(kernel, variant, &case, &outputs),
        Err(panic) => vec![failed(kernel, variant, case, panic)],
    }
}

/// The checks of [`check_outputs`] from outputs it has.
fn report(
    kernel: &'static str,
    variant: KernelPaths,
    case: &str,
    outputs: &[Output],
) -> Vec<KernelCheck> {
    let mut parts: Vec<(&'static str, Measured, Tolerance, bool)> = Vec::new();
    for output in outputs {
        let (measured, tolerance) = output.measure();
        match parts.iter_mut().find(|p| p.0 == output.part) {
            Some((_, m, tol, outside)) => {
                *m = m.merge(measured);
                *tol = Tolerance {
                    rel: tol.rel.max(tolerance.rel),
                    abs: tol.abs.max(tolerance.abs),
                };
                *outside |= output.wrote_outside;
            }
            None => parts.push((output.part, measured, tolerance, output.wrote_outside)),
        }
    }
    parts
        .into_iter()
        .map(|(part, measured, tolerance, wrote_outside)| {
            let name = match part {
                "" => case.to_string(),
                part => format!("{case}, {part}"),
            };
            KernelCheck {
                tolerance,
                measured: Some(measured),
                pass: measured.pass() && !wrote_outside,
                error: wrote_outside.then(|| "wrote outside its output".to_string()),
                ..unmeasured(kernel, variant, name)
            }
        })
        .collect()
}

/// A check that could not run: `panic` says why.
fn failed(
    kernel: &'static str,
    variant: KernelPaths,
    case: String,
    panic: Box<dyn std::any::Any + Send>,
) -> KernelCheck {
    KernelCheck {
        error: Some(panic_message(panic)),
        ..unmeasured(kernel, variant, case)
    }
}

/// A check of `kernel` on `variant` before it has measured anything: failing.
fn unmeasured(kernel: &'static str, variant: KernelPaths, case: String) -> KernelCheck {
    KernelCheck {
        kernel,
        variant: variant.name(),
        variant_paths: variant,
        path: variant.name(),
        case,
        tolerance: Tolerance::EXACT,
        measured: None,
        pass: false,
        error: None,
    }
}

/// One kernel variant on one case: `run` gives the kernel's output and the reference's; a panic
/// (the kernel failed to build, bind or run) is recorded as the check's error.
fn check_one(
    kernel: &'static str,
    variant: KernelPaths,
    case: String,
    tolerance: Tolerance,
    run: impl FnOnce() -> (Vec<f32>, Vec<f32>),
) -> KernelCheck {
    let (measured, error) = match catch_unwind(AssertUnwindSafe(run)) {
        Ok((got, want)) => (Some(measure(&got, &want, tolerance)), None),
        Err(panic) => (None, Some(panic_message(panic))),
    };
    KernelCheck {
        tolerance,
        pass: measured.is_some_and(|m| m.pass()),
        measured,
        error,
        ..unmeasured(kernel, variant, case)
    }
}

/// The GDN kernels' names and their variants on `path`.
fn gdn_variants(path: KernelPaths) -> [(&'static str, KernelPaths); 6] {
    [
        ("ssm_conv", SsmConv::select(path)),
        ("delta_prep", DeltaPrep::select(path)),
        ("gated_delta_chunk", GatedDeltaChunked::select(path)),
        ("gated_delta", GatedDeltaDecode::select(path)),
        ("gated_norm", GatedNorm::select(path)),
        ("gdn_decode", GdnDecode::select(path)),
    ]
}

/// Both decode lane widths (dk 16 and 128, the family's real head size) and both head orders.
fn gdn_shapes() -> [(DeltaDims, u32); 2] {
    [
        (dims(2, 6, 16, 16, 4, HeadMapping::Tiled), 70),
        (dims(2, 4, 128, 128, 4, HeadMapping::Grouped), 66),
    ]
}

/// The GDN kernels as one layer runs them, on every distinct set of variants the adapter has: a
/// prefill of a new sequence past a chunk boundary (ssm_conv over the prompt, delta_prep,
/// gated_delta_chunk, gated_norm), then two decode steps of two sequences (ssm_conv's rolling
/// state, delta_prep, gated_delta and the state it leaves, gated_norm) and one fused decode step
/// of both (gdn_decode: y and the state it leaves), against the CPU layer.
pub fn gated_deltanet(ctx: &GpuContext) -> Vec<KernelCheck> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for path in ctx.runnable_paths() {
        let variants = gdn_variants(path);
        if seen.contains(&variants) {
            continue;
        }
        seen.push(variants);
        for (seed, (d, prompt)) in gdn_shapes().into_iter().enumerate() {
            let case = format!("nk {} nv {} dk {} dv {}", d.nk, d.nv, d.dk, d.dv);
            let run = catch_unwind(AssertUnwindSafe(|| gdn_layer(ctx, path, d, prompt, seed)));
            let entry = |(kernel, variant): (&'static str, KernelPaths), stage: &str| KernelCheck {
                kernel,
                variant: variant.name(),
                variant_paths: variant,
                path: path.name(),
                case: format!("{case}, {stage}"),
                tolerance: STEP_TOL,
                measured: None,
                pass: false,
                error: None,
            };
            match run {
                Ok(measured) => {
                    for (i, (stage, m, tol)) in measured.into_iter().enumerate() {
                        let mut c = entry(variants[GDN_STAGE_KERNEL[i]], stage);
                        c.pass = m.pass();
                        c.measured = Some(m);
                        c.tolerance = tol;
                        out.push(c);
                    }
                }
                Err(panic) => {
                    let why = panic_message(panic);
                    out.extend(variants.iter().map(|&v| KernelCheck {
                        error: Some(why.clone()),
                        ..entry(v, "did not run")
                    }));
                }
            }
        }
    }
    out
}

/// Which kernel of [`gdn_variants`] produced each measurement [`gdn_layer`] returns.
const GDN_STAGE_KERNEL: [usize; 9] = [0, 1, 2, 4, 0, 1, 3, 4, 5];

type Stage = (&'static str, Measured, Tolerance);

/// One layer through a `prompt`-token prefill and two decode steps; the measurements in
/// [`GDN_STAGE_KERNEL`]'s order.
fn gdn_layer(
    ctx: &GpuContext,
    path: KernelPaths,
    d: DeltaDims,
    prompt: u32,
    seed: usize,
) -> [Stage; 9] {
    let mut rng = super::rng(0x5e1f_7e57 + seed as u64);
    let weights = LayerWeights::random(&d, &mut rng);
    let layer = GpuLayer::new(ctx, path, d, &weights, (prompt, 2, 3));
    let mut cpu = CpuState::zeros(&d, 3);
    let x = Projections::random(&d, prompt as usize, &mut rng);
    let got = layer.step(ctx, &x, &[2], prompt, Form::Chunked);
    let want = cpu_layer(&d, &weights, &mut cpu, &x, &[2], prompt as usize);
    let [conv, prep, o, y] = stages(&got, &want);
    let mut decoded = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let x = Projections::random(&d, 2, &mut rng);
        let got = layer.step(ctx, &x, &[2, 0], 1, Form::Recurrent);
        let want = cpu_layer(&d, &weights, &mut cpu, &x, &[2, 0], 1);
        decoded.0.push(got);
        decoded.1.push(want);
    }
    let joined = |f: &dyn Fn(&GpuOutputs) -> &Vec<f32>, g: &dyn Fn(&CpuOutputs) -> &Vec<f32>| {
        (
            decoded.0.iter().flat_map(f).copied().collect::<Vec<f32>>(),
            decoded.1.iter().flat_map(g).copied().collect::<Vec<f32>>(),
        )
    };
    let (mixed, want_mixed) = joined(&|o| &o.mixed, &|o| &o.mixed);
    let (gates, want_gates) = joined(&|o| &o.gates, &|o| &o.gates);
    let (mut o2, mut want_o2) = joined(&|o| &o.o, &|o| &o.o);
    let (y2, want_y2) = joined(&|o| &o.y, &|o| &o.y);
    // The state the decode steps leave belongs to gated_delta's result too.
    let state = layer.download_state(ctx);
    for slot in 0..3 {
        o2.extend(state.flat(slot));
        want_o2.extend(cpu.flat(slot));
    }
    let x = Projections::random(&d, 2, &mut rng);
    let got = layer.step(ctx, &x, &[2, 0], 1, Form::Fused);
    // Where y is whole q8 blocks the kernel also writes them: quantize_q8's bits of its y.
    if let Some(q8) = &got.y_q8 {
        let want = super::quantize_q8_of(ctx, &got.y, u64::from(d.value_dim()), 2);
        assert!(
            q8 == &want,
            "gdn_decode: y's q8 blocks are not quantize_q8 of y"
        );
    }
    let mut fused = got.y;
    let mut want_fused = cpu_layer(&d, &weights, &mut cpu, &x, &[2, 0], 1).y;
    let state = layer.download_state(ctx);
    for slot in 0..3 {
        fused.extend(state.flat(slot));
        want_fused.extend(cpu.flat(slot));
    }
    [
        ("prefill", conv.0, conv.1),
        ("prefill", prep.0, prep.1),
        ("prefill", o.0, o.1),
        ("prefill", y.0, y.1),
        ("decode", measure(&mixed, &want_mixed, STEP_TOL), STEP_TOL),
        ("decode", measure(&gates, &want_gates, STEP_TOL), STEP_TOL),
        (
            "decode + state",
            measure(&o2, &want_o2, LAYER_TOL),
            LAYER_TOL,
        ),
        ("decode", measure(&y2, &want_y2, LAYER_TOL), LAYER_TOL),
        (
            "fused decode y + state",
            measure(&fused, &want_fused, LAYER_TOL),
            LAYER_TOL,
        ),
    ]
}

/// conv, prep, delta rule and norm outputs of one step, each under the layer tests' tolerance.
fn stages(got: &GpuOutputs, want: &CpuOutputs) -> [(Measured, Tolerance); 4] {
    [
        (measure(&got.mixed, &want.mixed, STEP_TOL), STEP_TOL),
        (measure(&got.gates, &want.gates, STEP_TOL), STEP_TOL),
        (measure(&got.o, &want.o, LAYER_TOL), LAYER_TOL),
        (measure(&got.y, &want.y, LAYER_TOL), LAYER_TOL),
    ]
}

/// The text of a caught panic.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}
