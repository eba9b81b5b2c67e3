//! Times the decode mat-vec (wgsl/matvec.wgsl, wgsl/matvec_q8.wgsl, wgsl/matvec_q8_wide.wgsl)
//! in every candidate layout (`MatVecLayout::CANDIDATES`: invocations per workgroup, teams of 4
//! rows, units in flight; `MatVecLayout::WIDE_CANDIDATES`: the integer path's wide form, on the
//! q8 path only) on both input paths, f32 and integer (x quantized to 8-bit blocks), at the
//! products of one
//! Qwen3-8B Q4_K_M decode step as the engine binds them (norms folded, gate+up+SwiGLU paired,
//! residual adds accumulated) and Qwen3.5-27B's MLP, on the adapter `FAK_ADAPTER` picks with its
//! best paths (subgroups where it has them).
//!
//! Each figure is the median over `REPS` (or `--reps`) passes of back-to-back dispatches over distinct copies
//! of the weights (enough copies to stream ≥ 256 MB per pass, so the 50 MB L2 of an H200 never
//! holds the next dispatch's weights, as in a decode step where every layer's are new), timed by
//! pass timestamps: per-dispatch overhead (~2 µs on an H200) is included, as in a forward pass.
//! Before a figure that follows a pause of more than `IDLE` (the pipeline builds of a new layout
//! or type) the same dispatches run for `WARM` without one: an H100 drops its SM clock to 345
//! MHz after ~3.5 s without work, and a measurement of a few milliseconds does not bring it back
//! (experiments/NOTES.md, "mvbatch").
//! One kernel per layout serves every batch (its pipelines are built once).
//! The integer path is timed alone (`q8`) and with the quantize dispatch before every product
//! (`q8+quantize`, what the engine records where the quantization is not shared); the gate/up
//! pairing in a layout of 16 teams also writing its output as q8 blocks (`…+q8out`: the
//! ffn_down input of the integer path, which then needs no quantize). GB/s counts the
//! weight bytes only; `%probe` is that against the read probe's bandwidth measured in the same
//! process. One tab-separated line per measurement, then the best layout per product and path.
//!
//! Every binding is first run once and checked against the CPU (`Reference`: dequantize, f64
//! dot, on all rows of a small product and a sample of a large one's, first and last rows
//! always): y poisoned with NaN (an accumulating product's preset to 0.25), every checked
//! output within 2e-4 of Σ|w·x| of its row (a wrong unit, row or lane is off by O(1) of that;
//! f32 rounding over 17408 terms stays far below). The `check` column is the worst error as a
//! share of that bound; a binding that fails (or gives NaN) is printed as FAILED and not timed.
//!
//!   matvec-bench [--quick] [--layouts 64/1/1,128/4/2] [--paths f32,q8] [--batches 1,2,4,8]
//!                [--products 27b_ffn_gate_up,output]
//!
//! `--batches B,…` (each 1 to 8; `--batch B` is one) multiplies B input vectors per dispatch, as a
//! batched decode step of B sequences does (the B vectors are copies of one x, each output
//! vector checked against the same reference), every batch on the same weights in one process;
//! GB/s stays weight bytes over time. With several batches a last table sets each layout's
//! q8 time at every batch against its time at the first (issue 21: a step of 8 sequences should
//! cost little more than a step of 1), and the best layout per batch. `MatVecLayout::
//! BATCHED_CANDIDATES` (the wide form's vector loop with x in 16-byte loads) are timed at every
//! batch; `SPLIT_CANDIDATES` (the batched form with G vectors a workgroup on B / G times the
//! grid, `…/splitG`) run unsplit at B ≤ G, so their figures there are the batched twin's.
//! `--products` keeps the named products (all of a name: ffn_down is two); `--plain` times the
//! q8 path alone (no `q8+quantize`, no `q8+q8out`); `--reps N` takes the median of N passes
//! instead of REPS (a short device call).

use fak::gpu::kernels::matvec::{
    InputNorm, MatVec, MatVecBinding, MatVecFusion, MatVecIo, MatVecLayout, MatVecShape,
};
use fak::gpu::kernels::quantize_q8::{Q8Vectors, QuantizeQ8, QuantizeQ8Binding};
use fak::gpu::kernels::read_probe::ReadProbe;
use fak::gpu::{Activations, GpuContext, KernelPaths, Step, StepBuffer, storage_buffer, upload};
use fak::quant::{GgmlType, dequantize, fill_random_rows};

/// How the engine binds a product.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fusion {
    /// y = W x.
    Plain,
    /// y = W·RMSNorm(x) (q/k/v: the attention norm folded in).
    Normed,
    /// y = silu(W_gate h)·(W_up h), h = RMSNorm(x): `rows` outputs from 2·rows weight rows.
    GateUp,
    /// y += W x (attn_output, ffn_down: the residual add).
    Accumulate,
}

/// One decode product: (name, type, outputs, columns, fusion, per step in the model).
#[derive(Clone, Copy)]
struct Product {
    name: &'static str,
    ty: GgmlType,
    rows: u64,
    cols: u64,
    fusion: Fusion,
    /// How many of it one decode step runs (36 layers; half of them for the Q4_K_M recipe's
    /// Q6_K/Q4_K alternatives), for the per-token estimate.
    per_step: u32,
}

const fn product(
    name: &'static str,
    ty: GgmlType,
    rows: u64,
    cols: u64,
    fusion: Fusion,
    per_step: u32,
) -> Product {
    Product {
        name,
        ty,
        rows,
        cols,
        fusion,
        per_step,
    }
}

/// Qwen3-8B (hidden 4096, 32 q heads and 8 kv heads of 128, FFN 12288, vocab 151936), Q4_K_M:
/// 18 layers stack q, k and v (all Q4_K), 18 stack q and k and keep a Q6_K v; ffn_down is Q6_K
/// in 18 layers; the output head is Q6_K. Then Qwen3.5-27B's MLP (hidden 5120, FFN 17408), and
/// its products of short rows (5120 or 6144 columns): a Gated DeltaNet layer's q/k/v (Q6_K in
/// half the layers), q/k/v with z/b/a (Q4_K, the other half), z/b/a alone and its output
/// projection, and the output head (vocabulary 248320).
const PRODUCTS: [Product; 16] = [
    product("attn_qkv", GgmlType::Q4_K, 6144, 4096, Fusion::Normed, 18),
    product("attn_qk", GgmlType::Q4_K, 5120, 4096, Fusion::Normed, 18),
    product("attn_v", GgmlType::Q6_K, 1024, 4096, Fusion::Normed, 18),
    product(
        "attn_output",
        GgmlType::Q4_K,
        4096,
        4096,
        Fusion::Accumulate,
        36,
    ),
    product(
        "ffn_gate_up",
        GgmlType::Q4_K,
        12288,
        4096,
        Fusion::GateUp,
        36,
    ),
    product(
        "ffn_down",
        GgmlType::Q4_K,
        4096,
        12288,
        Fusion::Accumulate,
        18,
    ),
    product(
        "ffn_down",
        GgmlType::Q6_K,
        4096,
        12288,
        Fusion::Accumulate,
        18,
    ),
    product("output", GgmlType::Q6_K, 151936, 4096, Fusion::Plain, 1),
    product(
        "27b_ffn_gate_up",
        GgmlType::Q4_K,
        17408,
        5120,
        Fusion::GateUp,
        0,
    ),
    product(
        "27b_ffn_down",
        GgmlType::Q4_K,
        5120,
        17408,
        Fusion::Accumulate,
        0,
    ),
    product(
        "27b_ffn_down",
        GgmlType::Q6_K,
        5120,
        17408,
        Fusion::Accumulate,
        0,
    ),
    product(
        "27b_gdn_qkv",
        GgmlType::Q6_K,
        10240,
        5120,
        Fusion::Normed,
        0,
    ),
    product(
        "27b_gdn_qkvzba",
        GgmlType::Q4_K,
        16480,
        5120,
        Fusion::Normed,
        0,
    ),
    product("27b_gdn_zba", GgmlType::Q4_K, 6240, 5120, Fusion::Normed, 0),
    product(
        "27b_gdn_out",
        GgmlType::Q4_K,
        5120,
        6144,
        Fusion::Accumulate,
        0,
    ),
    product("27b_output", GgmlType::Q6_K, 248320, 5120, Fusion::Plain, 0),
];
const QUICK_PRODUCTS: [Product; 4] = [
    product("small_normed", GgmlType::Q4_K, 40, 512, Fusion::Normed, 1),
    product("small_gate_up", GgmlType::Q4_K, 32, 512, Fusion::GateUp, 1),
    product("small_down", GgmlType::Q6_K, 36, 768, Fusion::Accumulate, 1),
    product("small_head", GgmlType::Q6_K, 100, 256, Fusion::Plain, 1),
];
const REPS: usize = 7;
/// How long the dispatches of a figure run before they are timed after a pause (module doc).
const WARM: std::time::Duration = std::time::Duration::from_millis(400);
/// The pause after which a figure is warmed first (well inside the ~3.5 s the clock waits).
const IDLE: std::time::Duration = std::time::Duration::from_secs(1);
/// When the last timed pass ended.
static LAST_TIMED: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
/// Passes per submission while warming.
const WARM_PASSES: usize = 8;
/// Bytes of weights one timed pass streams at least (several copies of a small weight).
const PASS_BYTES: u64 = 256 << 20;
const MAX_COPIES: u64 = 64;
const EPS: f32 = 1e-6;

/// One measurement: (batch, product index, path name, layout, seconds per dispatch).
type Timing = (u32, usize, &'static str, MatVecLayout, f64);

/// The input paths: f32 x, or x quantized to 8-bit blocks (timed without and with the quantize).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum InputPath {
    F32,
    Q8,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let layouts: Vec<MatVecLayout> = match option("--layouts") {
        Some(list) => list
            .split(',')
            .map(|l| MatVecLayout::parse(l).expect("--layouts"))
            .collect(),
        None => MatVecLayout::CANDIDATES
            .into_iter()
            .chain(MatVecLayout::WIDE_CANDIDATES)
            .chain(MatVecLayout::BATCHED_CANDIDATES)
            .chain(MatVecLayout::SPLIT_CANDIDATES)
            .collect(),
    };
    let input_paths: Vec<InputPath> = match option("--paths").as_deref() {
        Some("f32") => vec![InputPath::F32],
        Some("q8") => vec![InputPath::Q8],
        _ => vec![InputPath::F32, InputPath::Q8],
    };
    let ctx = GpuContext::from_env().expect("opening the GPU");
    assert!(
        ctx.device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY),
        "the adapter has no timestamp queries"
    );
    let facts = ctx.facts();
    println!(
        "# {} ({}, {})",
        facts.name, facts.backend, facts.driver_info
    );
    let probe_bytes = if quick { 64 << 20 } else { 1 << 30 };
    let probe = ReadProbe::new(&ctx)
        .and_then(|p| p.measure(&ctx, probe_bytes, 5))
        .expect("the read probe");
    println!(
        "# read probe: {:.0} GB/s ({} MiB, fastest of 5 passes)",
        probe.gb_per_s,
        probe.bytes >> 20
    );
    let best = ctx.paths();
    println!("# paths: {best}");
    println!(
        "product\ttype\trows\tcols\tlayout\tpath\tus_per_dispatch\tweight_gbps\tpct_probe\tcopies\tcheck"
    );
    let all: &[Product] = if quick { &QUICK_PRODUCTS } else { &PRODUCTS };
    let products: Vec<Product> = match option("--products") {
        Some(names) => all
            .iter()
            .filter(|p| names.split(',').any(|n| n.trim() == p.name))
            .copied()
            .collect(),
        None => all.to_vec(),
    };
    assert!(
        !products.is_empty(),
        "--products named none of the products"
    );
    let plain = args.iter().any(|a| a == "--plain");
    let reps: usize = option("--reps").map_or(REPS, |r| r.parse().expect("--reps"));
    assert!(reps >= 1, "--reps {reps}: expected at least 1");
    let batches: Vec<u32> = option("--batches")
        .or(option("--batch"))
        .map_or(vec![1], |list| {
            list.split(',')
                .map(|b| b.trim().parse().expect("--batches"))
                .collect()
        });
    assert!(
        batches.iter().all(|b| (1..=8).contains(b)),
        "--batches {batches:?}: expected 1 to 8"
    );
    let step = StepBuffer::new(&ctx);
    // (batch, product index, path name) → (layout, µs), for the summaries.
    let mut results: Vec<Timing> = Vec::new();
    let copies = if quick { 2 } else { MAX_COPIES };
    let max_batch = batches.iter().copied().max().unwrap_or(1);
    let benches: Vec<Bench> = products
        .iter()
        .map(|p| Bench::new(&ctx, p, &step, copies, max_batch, reps))
        .collect();
    for &input in &input_paths {
        let paths = KernelPaths {
            int_dot: input == InputPath::Q8,
            ..best
        };
        let quantizer = (input == InputPath::Q8)
            .then(|| QuantizeQ8::new(&ctx, paths).expect("building quantize_q8"));
        let quantize: Vec<Option<QuantizeQ8Binding>> = benches
            .iter()
            .map(|bench| quantizer.as_ref().map(|q| bench.quantize_binding(&ctx, q)))
            .collect();
        // The CPU's outputs per product on this path (x̂ read back after a quantize on q8, which
        // takes its vector count from the step: every vector the buffers hold).
        step.set(&ctx, Step::new(0, max_batch, 0));
        let references: Vec<Reference> = benches
            .iter()
            .zip(&quantize)
            .map(|(bench, q)| bench.reference(&ctx, quantizer.as_ref().zip(q.as_ref())))
            .collect();
        // One kernel per layout: its pipelines are shared by the products of one type and by
        // every batch. A wide layout on f32 inputs is the narrow one: timed once.
        let name = if input == InputPath::Q8 { "q8" } else { "f32" };
        let kernels: Vec<(MatVecLayout, MatVec)> = layouts
            .iter()
            .filter(|l| input == InputPath::Q8 || !l.wide)
            .map(|&layout| {
                let kernel = MatVec::with_layout(&ctx, paths, layout).expect("building matvec");
                (layout, kernel)
            })
            .collect();
        for &batch in &batches {
            println!("# input vectors per dispatch: {batch}");
            step.set(&ctx, Step::new(0, batch, 0));
            for (layout, kernel) in &kernels {
                let layout = *layout;
                for (index, (p, bench)) in products.iter().zip(&benches).enumerate() {
                    let bindings = bench.bind(&ctx, kernel, false);
                    let check = bench.check(
                        &ctx,
                        &references[index],
                        quantizer.as_ref().zip(quantize[index].as_ref()),
                        batch,
                        |pass| {
                            kernel.encode(pass, &bindings[0], batch).unwrap();
                        },
                    );
                    if check.is_nan() || check > 1.0 {
                        println!(
                            "{}\t{}\t{}\t{}\t{layout}\t{name}\tFAILED\t\t\t\t{check:.3e}",
                            p.name, p.ty, p.rows, p.cols
                        );
                        continue;
                    }
                    let mut timed = vec![(
                        name,
                        bench.time(&ctx, |pass, copy| {
                            kernel.encode(pass, &bindings[copy], batch).unwrap();
                        }),
                    )];
                    if !plain
                        && p.fusion == Fusion::GateUp
                        && p.rows.is_multiple_of(32)
                        && layout.teams == MatVecLayout::QUANTIZING_TEAMS
                    {
                        let quantizing = bench.bind(&ctx, kernel, true);
                        let path = if input == InputPath::Q8 {
                            "q8+q8out"
                        } else {
                            "f32+q8out"
                        };
                        // Its f32 outputs held to the same reference (the q8 ones are
                        // tests/gpu_matvec.rs's, bit for bit).
                        let check = bench.check(
                            &ctx,
                            &references[index],
                            quantizer.as_ref().zip(quantize[index].as_ref()),
                            batch,
                            |pass| {
                                kernel.encode(pass, &quantizing[0], batch).unwrap();
                            },
                        );
                        if check <= 1.0 {
                            timed.push((
                                path,
                                bench.time(&ctx, |pass, copy| {
                                    kernel.encode(pass, &quantizing[copy], batch).unwrap();
                                }),
                            ));
                        } else {
                            println!(
                                "{}\t{}\t{}\t{}\t{layout}\t{path}\tFAILED\t\t\t\t{check:.3e}",
                                p.name, p.ty, p.rows, p.cols
                            );
                        }
                    }
                    if let (false, Some(q), Some(qb)) = (plain, &quantizer, &quantize[index]) {
                        timed.push((
                            "q8+quantize",
                            bench.time(&ctx, |pass, copy| {
                                q.encode(pass, qb, batch).unwrap();
                                kernel.encode(pass, &bindings[copy], batch).unwrap();
                            }),
                        ));
                    }
                    for (path, seconds) in timed {
                        let gbps = bench.weight_bytes as f64 / seconds / 1e9;
                        println!(
                            "{}\t{}\t{}\t{}\t{layout}\t{path}\t{:.1}\t{gbps:.0}\t{:.1}\t{}\t{check:.1e}",
                            p.name,
                            p.ty,
                            p.rows,
                            p.cols,
                            seconds * 1e6,
                            100.0 * gbps / probe.gb_per_s,
                            bench.copies
                        );
                        results.push((batch, index, path, layout, seconds));
                    }
                }
            }
        }
    }
    for &batch in &batches {
        println!("# summary at {batch} input vectors per dispatch");
        let mine: Vec<_> = results
            .iter()
            .filter(|r| r.0 == batch)
            .map(|r| (r.1, r.2, r.3, r.4))
            .collect();
        summarize(&products, &mine, &probe.gb_per_s);
    }
    if batches.len() > 1 {
        batch_summary(&products, &results, &batches);
    }
}

/// Issue 21's measure: per product and layout, the time at each batch against the time at the
/// first batch (B = 1), on the plain q8 path; and per product the best layout at each batch.
fn batch_summary(products: &[Product], results: &[Timing], batches: &[u32]) {
    let time = |batch: u32, index: usize, layout: MatVecLayout| {
        results
            .iter()
            .find(|r| r.0 == batch && r.1 == index && r.2 == "q8" && r.3 == layout)
            .map(|r| r.4)
    };
    let mut layouts: Vec<MatVecLayout> = results.iter().map(|r| r.3).collect();
    layouts.sort_by_key(|l| l.to_string());
    layouts.dedup();
    println!("# batch\tproduct\ttype\tlayout\tus at each batch {batches:?}\t× the first");
    for (index, p) in products.iter().enumerate() {
        for &layout in &layouts {
            let times: Vec<Option<f64>> = batches.iter().map(|&b| time(b, index, layout)).collect();
            let Some(Some(first)) = times.first().copied() else {
                continue;
            };
            let cells: Vec<String> = times
                .iter()
                .map(|t| t.map_or("-".into(), |t| format!("{:.1}", t * 1e6)))
                .collect();
            let ratios: Vec<String> = times
                .iter()
                .map(|t| t.map_or("-".into(), |t| format!("{:.2}", t / first)))
                .collect();
            println!(
                "# batch\t{}\t{}\t{layout}\t{}\t{}",
                p.name,
                p.ty,
                cells.join(" "),
                ratios.join(" ")
            );
        }
        // The best layout at each batch, against the best at the first.
        let best: Vec<Option<(MatVecLayout, f64)>> = batches
            .iter()
            .map(|&b| {
                layouts
                    .iter()
                    .filter_map(|&l| time(b, index, l).map(|t| (l, t)))
                    .min_by(|x, y| x.1.total_cmp(&y.1))
            })
            .collect();
        if let Some(Some((_, first))) = best.first().copied() {
            let cells: Vec<String> = best
                .iter()
                .map(|b| {
                    b.map_or("-".into(), |(l, t)| {
                        format!("{l} {:.1} ({:.2}×)", t * 1e6, t / first)
                    })
                })
                .collect();
            println!("# batch best\t{}\t{}\t{}", p.name, p.ty, cells.join("\t"));
        }
    }
}

/// The fastest layout per product and path, and a decode step's mat-vec time from the 8B rows.
fn summarize(
    products: &[Product],
    results: &[(usize, &'static str, MatVecLayout, f64)],
    probe_gbps: &f64,
) {
    println!("# best layout per product and path (µs, % of the probe), default layout beside it");
    let mut step_best = std::collections::BTreeMap::<&str, f64>::new();
    let mut step_default = std::collections::BTreeMap::<&str, f64>::new();
    for (index, p) in products.iter().enumerate() {
        for path in ["f32", "q8", "q8+quantize", "f32+q8out", "q8+q8out"] {
            let mine: Vec<_> = results
                .iter()
                .filter(|r| r.0 == index && r.1 == path)
                .collect();
            let Some(best) = mine.iter().min_by(|a, b| a.3.total_cmp(&b.3)) else {
                continue;
            };
            let default = mine
                .iter()
                .find(|r| r.2 == MatVecLayout::DEFAULT)
                .map_or(f64::NAN, |r| r.3);
            let bytes = p.ty.row_bytes(p.cols).unwrap() as f64
                * (p.rows * if p.fusion == Fusion::GateUp { 2 } else { 1 }) as f64;
            let pct = |s: f64| 100.0 * bytes / s / 1e9 / probe_gbps;
            println!(
                "# best\t{}\t{}\t{path}\t{}\t{:.1} us\t{:.1} %\tdefault {:.1} us\t{:.1} %",
                p.name,
                p.ty,
                best.2,
                best.3 * 1e6,
                pct(best.3),
                default * 1e6,
                pct(default)
            );
            *step_best.entry(path).or_default() += f64::from(p.per_step) * best.3;
            *step_default.entry(path).or_default() += f64::from(p.per_step) * default;
        }
    }
    // One layout for every product (what FAK_MATVEC_LAYOUT sets), per path.
    for path in ["f32", "q8"] {
        let mut per_layout = std::collections::BTreeMap::<String, f64>::new();
        for r in results.iter().filter(|r| r.1 == path) {
            *per_layout.entry(r.2.to_string()).or_default() +=
                f64::from(products[r.0].per_step) * r.3;
        }
        if let Some((layout, seconds)) = per_layout.iter().min_by(|a, b| a.1.total_cmp(b.1)) {
            println!(
                "# best single layout {path}: {layout} ({:.0} us per token of 8B products)",
                seconds * 1e6
            );
        }
    }
    for (path, seconds) in &step_best {
        println!(
            "# per token (8B products × their count per step): {path} best layouts {:.0} us, \
             default layout {:.0} us",
            seconds * 1e6,
            step_default[path] * 1e6
        );
    }
    bandwidth_summary(products, results);
}

/// Issue 18's measure: weight bytes over time, byte-weighted over a set of products (the 8B
/// step's, each × its count per step; the 27B MLP's, each once), for each path in the best
/// layout per product, and per layout (its form, wide or not, where it serves).
fn bandwidth_summary(products: &[Product], results: &[(usize, &'static str, MatVecLayout, f64)]) {
    let bytes = |p: &Product| {
        let rows = p.rows * if p.fusion == Fusion::GateUp { 2 } else { 1 };
        (p.ty.row_bytes(p.cols).unwrap() * rows) as f64
    };
    // A set's weight of each product in the byte-weighted sum.
    type Weight = fn(&Product) -> f64;
    let sets: [(&str, Weight); 2] = [
        ("8B step", |p| f64::from(p.per_step)),
        ("27B MLP", |p| {
            f64::from(u8::from(p.name.starts_with("27b_ffn")))
        }),
    ];
    for (set, weight) in sets {
        for path in ["f32", "q8", "q8+q8out"] {
            let (mut total_bytes, mut total_seconds) = (0.0, 0.0);
            for (index, p) in products.iter().enumerate() {
                let best = results
                    .iter()
                    .filter(|r| r.0 == index && r.1 == path)
                    .map(|r| r.3)
                    .min_by(f64::total_cmp);
                if let Some(seconds) = best {
                    total_bytes += weight(p) * bytes(p);
                    total_seconds += weight(p) * seconds;
                }
            }
            if total_seconds > 0.0 {
                println!(
                    "# byte-weighted {set} {path}, best layout per product: {:.1} GB/s",
                    total_bytes / total_seconds / 1e9
                );
            }
        }
        let mut layouts: Vec<MatVecLayout> = results.iter().map(|r| r.2).collect();
        layouts.sort_by_key(|l| l.to_string());
        layouts.dedup();
        for layout in layouts {
            let (mut total_bytes, mut total_seconds) = (0.0, 0.0);
            for r in results.iter().filter(|r| r.1 == "q8" && r.2 == layout) {
                let p = &products[r.0];
                total_bytes += weight(p) * bytes(p);
                total_seconds += weight(p) * r.3;
            }
            if total_seconds > 0.0 {
                println!(
                    "# byte-weighted {set} q8 in {layout}: {:.1} GB/s",
                    total_bytes / total_seconds / 1e9
                );
            }
        }
    }
}

/// Checked rows of a product: all of one of at most this many weight elements, else a sample of
/// about this many (and the first and last 64 rows).
const CHECKED_ELEMENTS: u64 = 16 << 20;
/// The error bound, as a share of Σ|w·x| of the output's row(s).
const CHECK_SHARE: f64 = 2e-4;
/// What an accumulating product's y holds before it adds.
const Y0: f32 = 0.25;

/// The CPU's outputs of one product on one input path, at the checked rows.
struct Reference {
    rows: Vec<u64>,
    y: Vec<f64>,
    /// Each output's error bound (CHECK_SHARE of its row's Σ|w·x|, through SwiGLU when paired).
    bound: Vec<f64>,
}

/// The rows a check reads: every row of a small product, else a stride through it plus the
/// first and last 64.
fn checked_rows(rows: u64, cols: u64) -> Vec<u64> {
    let stride = (rows * cols).div_ceil(CHECKED_ELEMENTS).max(1);
    let mut picked: Vec<u64> = (0..rows)
        .filter(|&r| r % stride == 0 || r < 64 || r + 64 >= rows)
        .collect();
    picked.dedup();
    picked
}

/// Σ w·v and Σ |w·v| over row `row` of the weights `bytes`, in f64.
fn row_dot(ty: GgmlType, bytes: &[u8], row: u64, cols: u64, v: &[f64]) -> (f64, f64) {
    let row_bytes = ty.row_bytes(cols).unwrap() as usize;
    let at = row as usize * row_bytes;
    let w = dequantize(ty, &bytes[at..at + row_bytes], cols as usize).unwrap();
    w.iter().zip(v).fold((0.0, 0.0), |(s, a), (&w, &v)| {
        (s + f64::from(w) * v, a + (f64::from(w) * v).abs())
    })
}

fn silu(z: f64) -> f64 {
    z / (1.0 + (-z).exp())
}

/// One product's buffers: `copies` copies of the weights (each bound on its own), x, y, the
/// norm weight and the q8 vectors.
struct Bench<'a> {
    product: &'a Product,
    /// The weights as uploaded (the CPU reference's).
    bytes: Vec<u8>,
    weights: Vec<wgpu::Buffer>,
    x: wgpu::Buffer,
    y: wgpu::Buffer,
    norm: wgpu::Buffer,
    q8: Q8Vectors,
    /// The quantized output of a gate/up pairing (the next product's q8 input).
    y_q8: Q8Vectors,
    step: &'a StepBuffer,
    /// The most input vectors per dispatch (copies of one x) the buffers hold.
    batch: u32,
    weight_bytes: u64,
    copies: usize,
    /// Timed passes per measurement (the median is taken).
    reps: usize,
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
}

impl<'a> Bench<'a> {
    fn new(
        ctx: &GpuContext,
        product: &'a Product,
        step: &'a StepBuffer,
        max_copies: u64,
        batch: u32,
        reps: usize,
    ) -> Bench<'a> {
        let p = product;
        let w_rows = if p.fusion == Fusion::GateUp {
            2 * p.rows
        } else {
            p.rows
        };
        let weight_bytes = p.ty.row_bytes(p.cols).unwrap() * w_rows;
        let mut bytes = vec![0u8; weight_bytes as usize];
        fill_random_rows(p.ty, p.cols as usize, w_rows as usize, 0.02, 7, &mut bytes).unwrap();
        let copies = PASS_BYTES.div_ceil(weight_bytes).clamp(2, max_copies) as usize;
        // Buffers of whole 16-byte words, as the decode products' tensors are; the quick shapes'
        // are not.
        let buffer_bytes = weight_bytes.next_multiple_of(16);
        let mut padded = bytes.clone();
        padded.resize(buffer_bytes as usize, 0);
        let first = upload(ctx, "w", &padded).unwrap();
        let mut weights = vec![first];
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        for _ in 1..copies {
            let copy = storage_buffer(ctx, "w copy", buffer_bytes).unwrap();
            encoder.copy_buffer_to_buffer(&weights[0], 0, &copy, 0, buffer_bytes);
            weights.push(copy);
        }
        ctx.queue.submit([encoder.finish()]);
        let x: Vec<f32> = (0..p.cols * u64::from(batch))
            .map(|i| ((i % p.cols % 97) as f32 - 48.0) / 48.0)
            .collect();
        let norm: Vec<f32> = (0..p.cols).map(|i| 1.0 + (i % 7) as f32 / 7.0).collect();
        let queries = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("matvec timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        Bench {
            product,
            bytes,
            weights,
            x: upload(ctx, "x", bytemuck::cast_slice(&x)).unwrap(),
            y: storage_buffer(ctx, "y", 4 * p.rows * u64::from(batch)).unwrap(),
            norm: upload(ctx, "norm", bytemuck::cast_slice(&norm)).unwrap(),
            q8: Q8Vectors::new(ctx, "x q8", p.cols, batch).unwrap(),
            y_q8: Q8Vectors::new(ctx, "y q8", p.rows.next_multiple_of(32), batch).unwrap(),
            step,
            batch,
            weight_bytes,
            copies,
            reps,
            queries,
            resolved,
        }
    }

    fn input_norm(&self) -> Option<InputNorm<'_>> {
        matches!(self.product.fusion, Fusion::Normed | Fusion::GateUp).then_some(InputNorm {
            weight: &self.norm,
            eps: EPS,
            shared: false,
        })
    }

    /// The vector the product multiplies on the CPU: x (RMS-normed where the product folds the
    /// norm) or, on the integer path, x̂ as the quantize dispatch wrote it.
    fn input(&self, ctx: &GpuContext, q8: Option<(&QuantizeQ8, &QuantizeQ8Binding)>) -> Vec<f64> {
        let cols = self.product.cols;
        if let Some((q, binding)) = q8 {
            ctx.run_pass("matvec bench quantize", |pass| {
                q.encode(pass, binding, self.batch).unwrap();
            })
            .unwrap();
            let (codes, scales) = self.q8.read_back(ctx, cols, 1).unwrap().remove(0);
            return codes
                .iter()
                .enumerate()
                .map(|(i, &c)| f64::from(c) * f64::from(scales[i / 32]))
                .collect();
        }
        let x: Vec<f32> =
            bytemuck::pod_collect_to_vec(&fak::gpu::read_back(ctx, &self.x, 0..4 * cols).unwrap());
        let x: Vec<f64> = x.into_iter().map(f64::from).collect();
        if self.input_norm().is_none() {
            return x;
        }
        let norm: Vec<f32> = bytemuck::pod_collect_to_vec(
            &fak::gpu::read_back(ctx, &self.norm, 0..4 * cols).unwrap(),
        );
        let mean = x.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        let s = 1.0 / (mean + f64::from(EPS)).sqrt();
        x.iter()
            .zip(norm)
            .map(|(v, w)| v * s * f64::from(w))
            .collect()
    }

    /// The CPU's outputs at the checked rows.
    fn reference(
        &self,
        ctx: &GpuContext,
        q8: Option<(&QuantizeQ8, &QuantizeQ8Binding)>,
    ) -> Reference {
        let p = self.product;
        let v = self.input(ctx, q8);
        let rows = checked_rows(p.rows, p.cols);
        let (mut y, mut bound) = (Vec::new(), Vec::new());
        for &r in &rows {
            let (dot, size) = row_dot(p.ty, &self.bytes, r, p.cols, &v);
            let (value, share) = match p.fusion {
                Fusion::GateUp => {
                    let (up, up_size) = row_dot(p.ty, &self.bytes, p.rows + r, p.cols, &v);
                    // |d silu| ≤ 1.1: the gate's error moves the output by at most 1.1·|up| of it.
                    (
                        silu(dot) * up,
                        1.1 * size * up.abs() + silu(dot).abs() * up_size,
                    )
                }
                Fusion::Accumulate => (f64::from(Y0) + dot, size),
                _ => (dot, size),
            };
            y.push(value);
            bound.push(CHECK_SHARE * share.max(1e-3));
        }
        Reference { rows, y, bound }
    }

    /// Runs `encode` once (after the quantize on the integer path) on y poisoned with NaN (an
    /// accumulating product's set to Y0) and returns the worst error at the checked rows as a
    /// share of its bound (NaN, which never passes `≤ 1`, where an output is not finite).
    fn check(
        &self,
        ctx: &GpuContext,
        reference: &Reference,
        q8: Option<(&QuantizeQ8, &QuantizeQ8Binding)>,
        batch: u32,
        encode: impl Fn(&mut wgpu::ComputePass),
    ) -> f64 {
        let p = self.product;
        let start = match p.fusion {
            Fusion::Accumulate => Y0,
            _ => f32::NAN,
        };
        let y0 = vec![start; (p.rows * u64::from(self.batch)) as usize];
        ctx.queue
            .write_buffer(&self.y, 0, bytemuck::cast_slice(&y0));
        ctx.run_pass("matvec bench check", |pass| {
            if let Some((q, binding)) = q8 {
                q.encode(pass, binding, batch).unwrap();
            }
            encode(pass);
        })
        .unwrap();
        let y: Vec<f32> = bytemuck::pod_collect_to_vec(
            &fak::gpu::read_back(ctx, &self.y, 0..4 * p.rows * u64::from(self.batch)).unwrap(),
        );
        let mut worst = 0.0f64;
        // Every vector's outputs: the B inputs are copies of one x.
        for b in 0..u64::from(batch) {
            for ((&r, &want), &bound) in reference
                .rows
                .iter()
                .zip(&reference.y)
                .zip(&reference.bound)
            {
                let got = f64::from(y[(b * p.rows + r) as usize]);
                if !got.is_finite() {
                    return f64::NAN;
                }
                worst = worst.max((got - want).abs() / bound);
            }
        }
        worst
    }

    /// The quantization of x (normed where the product's norm is folded), as the engine
    /// records it before an integer product.
    fn quantize_binding(&self, ctx: &GpuContext, q: &QuantizeQ8) -> QuantizeQ8Binding {
        let x = Activations::contiguous(&self.x, self.product.cols);
        q.bind(
            ctx,
            x,
            self.product.cols,
            self.input_norm(),
            &self.q8,
            self.step,
            self.batch,
        )
        .expect("binding quantize_q8")
    }

    /// One binding per weight copy; `quantize_output`: a gate/up pairing also writes y as q8.
    fn bind(&self, ctx: &GpuContext, kernel: &MatVec, quantize_output: bool) -> Vec<MatVecBinding> {
        let p = self.product;
        let q8 = kernel.variant().int_dot;
        let fusion = MatVecFusion {
            norm: self.input_norm().filter(|_| !q8),
            swiglu: p.fusion == Fusion::GateUp,
            q8: q8.then_some(&self.q8),
            quantize_output: quantize_output.then_some(&self.y_q8),
            ..MatVecFusion::default()
        };
        self.weights
            .iter()
            .map(|w| {
                let io = MatVecIo {
                    weights: w,
                    weights_offset: 0,
                    x: Activations::contiguous(&self.x, p.cols),
                    y: Activations::contiguous(&self.y, p.rows),
                    step: self.step,
                    accumulate: p.fusion == Fusion::Accumulate,
                    max_batch: self.batch,
                };
                let shape = MatVecShape {
                    ty: p.ty,
                    rows: p.rows,
                    cols: p.cols,
                };
                kernel
                    .bind_fused(ctx, shape, &io, fusion)
                    .expect("binding matvec")
            })
            .collect()
    }

    /// Median seconds per dispatch (or per `encode`'s group of dispatches) over `reps` passes, each
    /// encoding once per weight copy.
    fn time(&self, ctx: &GpuContext, encode: impl Fn(&mut wgpu::ComputePass, usize)) -> f64 {
        self.warm(ctx, &encode);
        let period = f64::from(ctx.queue.get_timestamp_period()) * 1e-9;
        let mut samples: Vec<f64> = (0..self.reps + 1)
            .map(|_| {
                let mut encoder = ctx.device.create_command_encoder(&Default::default());
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("matvec bench"),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &self.queries,
                            beginning_of_pass_write_index: Some(0),
                            end_of_pass_write_index: Some(1),
                        }),
                    });
                    for copy in 0..self.copies {
                        encode(&mut pass, copy);
                    }
                }
                encoder.resolve_query_set(&self.queries, 0..2, &self.resolved, 0);
                ctx.queue.submit([encoder.finish()]);
                let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(
                    &fak::gpu::read_back(ctx, &self.resolved, 0..16).unwrap(),
                );
                (ticks[1] - ticks[0]) as f64 * period / self.copies as f64
            })
            .skip(1) // the first pass pays for pipeline warm-up
            .collect();
        *LAST_TIMED.lock().unwrap() = Some(std::time::Instant::now());
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    }

    /// After a pause of more than `IDLE` since the last figure, runs `encode`'s passes back to
    /// back for `WARM`, waiting only between submissions of `WARM_PASSES` passes: the GPU's
    /// clock up before a figure (see the module doc).
    fn warm(&self, ctx: &GpuContext, encode: &impl Fn(&mut wgpu::ComputePass, usize)) {
        let last = *LAST_TIMED.lock().unwrap();
        if last.is_some_and(|t| t.elapsed() < IDLE) {
            return;
        }
        let start = std::time::Instant::now();
        while start.elapsed() < WARM {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                for _ in 0..WARM_PASSES {
                    for copy in 0..self.copies {
                        encode(&mut pass, copy);
                    }
                }
            }
            ctx.queue.submit([encoder.finish()]);
            // The wait: a read of the resolved timestamps orders after the submission.
            fak::gpu::read_back(ctx, &self.resolved, 0..16).unwrap();
        }
    }
}
