//! Times one mat-mul of every runnable `Matmul` variant on the adapter `FAK_ADAPTER` picks (the
//! cooperative-matrix ones where it has them; `FAK_COOP_MATRIX=1` adds 8×8), with K split by
//! the default rule and whole, at the projection shapes of a Qwen3-8B layer (Q4_K and Q6_K
//! weights, the Q4_K_M recipe's two types) and of a Qwen3.5-27B layer of each kind (Q4_K), for
//! several prompt lengths. Each figure is the median over `REPS` passes of `DISPATCHES` back-to-back
//! products (a split one is two dispatches: the slices, then their sum), timed by pass
//! timestamps, so per-dispatch overhead (~2 µs on an H200) is included as it is in a forward
//! pass. Prints one tab-separated line per measurement plus a
//! per-layer total; results and the command go in `experiments/matmul-tiles.md`.
//! `--attn` times the prefill attention instead (src/attn.rs); `--sweep` checks, then times, every
//! cooperative-matrix K loop (src/sweep.rs); `--forms` checks, then times, the engine's opt-in
//! forms (the Q6_K raw path, the split rule) on the 8B and 27B products (src/forms.rs);
//! `--decode` times every variant at 1–16 tokens (a decode step's batch).

mod attn;
mod forms;
mod sweep;

use fak::gpu::kernels::matmul::{Matmul, MatmulBuffers, MatmulOutput, MatmulShape, SplitK};
use fak::gpu::{GpuContext, Kernel, Step, StepBuffer, storage_buffer, upload};
use fak::quant::{GgmlType, fill_random_rows};

/// (name, rows, cols) of the mat-muls of one Qwen3-8B layer as the engine's prefill runs them
/// (hidden 4096, 32 query heads and 8 key/value heads of 128, FFN 12288; q/k/v stacked into one
/// weight, gate and up into another).
pub const SHAPES: [(&str, u64, u64); 4] = [
    ("attn_qkv", 6144, 4096),
    ("attn_output", 4096, 4096),
    ("ffn_gate_up", 24576, 4096),
    ("ffn_down", 4096, 12288),
];
/// The Qwen3.5-27B shape's products (hidden 5120, FFN 17408; Gated DeltaNet: q/k 16 heads and
/// v 48 heads of 128, β and α one row per v head; gated attention: 24 query heads of 256 with
/// their gates, 4 key/value heads), one layer of each kind: 48 GDN layers and 16 attention
/// layers share the FFN.
pub const SHAPES_27B: [(&str, u64, u64); 9] = [
    ("gdn_qkv", 10240, 5120),
    ("gdn_z", 6144, 5120),
    ("gdn_beta", 48, 5120),
    ("gdn_out", 5120, 6144),
    ("attn_q_gate", 12288, 5120),
    ("attn_kv", 1024, 5120),
    ("attn_output", 5120, 6144),
    ("ffn_gate_up", 34816, 5120),
    ("ffn_down", 5120, 17408),
];
const QUICK_SHAPES: [(&str, u64, u64); 2] = [("small", 96, 256), ("tall", 320, 512)];
pub const LAYERS: f64 = 36.0;
const REPS: usize = 7;
const DISPATCHES: u32 = 8;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
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
    if std::env::args().any(|a| a == "--attn") {
        attn::run(&ctx, quick);
        return;
    }
    if std::env::args().any(|a| a == "--sweep") {
        sweep::run(&ctx, quick, token_counts_arg());
        return;
    }
    if std::env::args().any(|a| a == "--forms") {
        forms::run(&ctx, quick);
        return;
    }
    println!("variant\ttype\tshape\trows\tcols\ttokens\tus_per_dispatch\tgflops\tweight_gbps");
    if std::env::args().any(|a| a == "--types") {
        by_type(&ctx);
        return;
    }
    if std::env::args().any(|a| a == "--decode") {
        decode_batches(&ctx);
        return;
    }
    let (shapes, token_counts): (&[_], &[u32]) = if quick {
        (&QUICK_SHAPES, &[5, 70])
    } else {
        (&SHAPES, &[128, 512, 2048])
    };
    for paths in variants(&ctx) {
        for (split, split_name) in [(SplitK::DEFAULT, "split"), (SplitK::NEVER, "whole")] {
            let kernel = Matmul::new(&ctx, paths)
                .expect("building the mat-mul")
                .with_split(split);
            let label = format!("{}/{split_name}", kernel.variant());
            for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
                for &n_tokens in token_counts {
                    let seconds = time_shapes(&ctx, &kernel, &label, ty, shapes, n_tokens);
                    if !quick {
                        println!(
                            "{label}\t{ty}\tlayer\t-\t-\t{n_tokens}\t{:.1}\t-\t-\t# x{LAYERS} layers: {:.0} prompt tok/s from mat-muls alone",
                            seconds * 1e6,
                            f64::from(n_tokens) / (seconds * LAYERS)
                        );
                    }
                }
            }
            if !quick {
                for n_tokens in [128, 512] {
                    let ty = GgmlType::Q4_K;
                    time_shapes(&ctx, &kernel, &label, ty, &SHAPES_27B, n_tokens);
                }
            }
        }
    }
}

/// The adapter's runnable mat-mul variants, each once (several runnable paths select the same
/// variant: the integer-dot axis does not touch it).
/// `--tokens 160,640`: the token counts `--sweep` times instead of its own; None without it.
fn token_counts_arg() -> Option<Vec<u32>> {
    let args: Vec<String> = std::env::args().collect();
    let list = args.iter().position(|a| a == "--tokens").map(|i| {
        args.get(i + 1)
            .expect("--tokens needs a list: --tokens 160,640")
    })?;
    let counts = list
        .split(',')
        .map(|n| match n.trim().parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => panic!("--tokens {list}: {n:?} is not a token count"),
        })
        .collect();
    Some(counts)
}

fn variants(ctx: &GpuContext) -> Vec<fak::gpu::KernelPaths> {
    let mut variants = Vec::new();
    for paths in ctx.runnable_paths().into_iter().map(Matmul::select) {
        if !variants.contains(&paths) {
            variants.push(paths);
        }
    }
    variants
}

/// `--types`: the two biggest products (8B and 27B ffn_gate_up) at 2048 tokens, whole, in every
/// variant, with F16, Q8_0 and Q4_K weights: how much of a tile's time is the weight decoding
/// (F16 needs none, Q8_0 one scale per 32, Q4_K the 6-bit scales and nibbles).
fn by_type(ctx: &GpuContext) {
    let shapes = [SHAPES[2], SHAPES_27B[7]];
    for paths in variants(ctx) {
        let kernel = Matmul::new(ctx, paths)
            .expect("building the mat-mul")
            .with_split(SplitK::NEVER);
        let label = format!("{}/whole", kernel.variant());
        for ty in [GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K] {
            time_shapes(ctx, &kernel, &label, ty, &shapes, 2048);
        }
    }
}

/// `--decode`: every variant, whole, on the 8B's and the 27B's products at the token counts of a
/// decode step of 1 to 16 sequences, Q4_K and Q6_K: what a matrix-unit product of a few vectors
/// costs against the batched mat-vec's figures (matvec-bench `--batches`) on the same weights.
fn decode_batches(ctx: &GpuContext) {
    let kernels: Vec<(Matmul, String)> = variants(ctx)
        .into_iter()
        .map(|paths| {
            let kernel = Matmul::new(ctx, paths)
                .expect("building the mat-mul")
                .with_split(SplitK::NEVER);
            let label = format!("{}/whole", kernel.variant());
            (kernel, label)
        })
        .collect();
    // Each weight is written once (the 27B's gate/up is 100 MB of random Q4_K) and timed by
    // every kernel at every batch.
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        for &(name, rows, cols) in SHAPES.iter().chain(&SHAPES_27B) {
            let weight = Weight::random(ctx, ty, rows, cols);
            for (kernel, label) in &kernels {
                for n_tokens in [1, 2, 4, 8, 16] {
                    let seconds = weight.seconds(ctx, kernel, n_tokens);
                    print_row(label, ty, (name, rows, cols), n_tokens, seconds);
                }
            }
        }
    }
}

/// Times and prints each of `shapes` at `n_tokens`; returns their summed seconds.
fn time_shapes(
    ctx: &GpuContext,
    kernel: &Matmul,
    label: &str,
    ty: GgmlType,
    shapes: &[(&str, u64, u64)],
    n_tokens: u32,
) -> f64 {
    let mut total = 0.0;
    for &shape in shapes {
        let (_, rows, cols) = shape;
        let seconds = time_one(ctx, kernel, ty, rows, cols, n_tokens);
        total += seconds;
        print_row(label, ty, shape, n_tokens, seconds);
    }
    total
}

/// One measurement's line: its product's GFLOP/s and weight GB/s from `seconds`.
fn print_row(label: &str, ty: GgmlType, shape: (&str, u64, u64), n_tokens: u32, seconds: f64) {
    let (name, rows, cols) = shape;
    let flops = 2.0 * (rows * cols) as f64 * f64::from(n_tokens);
    let weight_bytes = (ty.row_bytes(cols).unwrap() * rows) as f64;
    println!(
        "{label}\t{ty}\t{name}\t{rows}\t{cols}\t{n_tokens}\t{:.1}\t{:.1}\t{:.1}",
        seconds * 1e6,
        flops / seconds / 1e9,
        weight_bytes / seconds / 1e9
    );
}

/// Median seconds per product (its split-K reduction included) of `W[rows, cols] · X[n_tokens, cols]`.
fn time_one(
    ctx: &GpuContext,
    kernel: &Matmul,
    ty: GgmlType,
    rows: u64,
    cols: u64,
    n_tokens: u32,
) -> f64 {
    Weight::random(ctx, ty, rows, cols).seconds(ctx, kernel, n_tokens)
}

/// A random weight on the GPU, kept for several kernels and token counts.
pub struct Weight {
    ty: GgmlType,
    rows: u64,
    cols: u64,
    buffer: wgpu::Buffer,
}

impl Weight {
    pub fn random(ctx: &GpuContext, ty: GgmlType, rows: u64, cols: u64) -> Weight {
        let row_bytes = ty.row_bytes(cols).unwrap();
        let mut w = vec![0u8; (row_bytes * rows) as usize];
        fill_random_rows(ty, cols as usize, rows as usize, 0.02, 1, &mut w).unwrap();
        Weight {
            ty,
            rows,
            cols,
            buffer: upload(ctx, "w", &w).unwrap(),
        }
    }

    /// Median seconds per product of this weight with `n_tokens` tokens on `kernel`.
    pub fn seconds(&self, ctx: &GpuContext, kernel: &Matmul, n_tokens: u32) -> f64 {
        self.timed(ctx, kernel, n_tokens).0
    }

    /// [`Weight::seconds`], and the K slices its grid ran in (1: whole, or summed in-kernel).
    pub fn timed(&self, ctx: &GpuContext, kernel: &Matmul, n_tokens: u32) -> (f64, u32) {
        let (rows, cols) = (self.rows, self.cols);
        let x: Vec<f32> = (0..u64::from(n_tokens) * cols)
            .map(|i| ((i % 97) as f32 - 48.0) / 48.0)
            .collect();
        let x = upload(ctx, "x", bytemuck::cast_slice(&x)).unwrap();
        let y = storage_buffer(ctx, "y", u64::from(n_tokens) * rows * 4).unwrap();
        let step = StepBuffer::new(ctx);
        step.set(ctx, Step::new(0, n_tokens, 0));
        let shape = MatmulShape {
            ty: self.ty,
            rows,
            cols,
            max_tokens: n_tokens,
            output: MatmulOutput::Store,
        };
        let buffers = MatmulBuffers {
            weights: &self.buffer,
            x: &x,
            y: &y,
            step: &step,
        };
        let binding = kernel.bind(ctx, shape, buffers).unwrap();
        let slices = kernel.grids(&binding, n_tokens)[0].splits;
        let seconds = median_seconds(ctx, DISPATCHES, |pass| {
            kernel.encode(pass, &binding, n_tokens).unwrap();
        });
        (seconds, slices)
    }
}

/// Median seconds per dispatch over `REPS` passes of `dispatches` dispatches each recorded by
/// `encode`, timed by pass timestamps (the first pass, which pays for pipeline warm-up, is
/// dropped).
fn median_seconds(
    ctx: &GpuContext,
    dispatches: u32,
    encode: impl Fn(&mut wgpu::ComputePass),
) -> f64 {
    let queries = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("bench timestamps"),
        ty: wgpu::QueryType::Timestamp,
        count: 2,
    });
    let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("timestamps"),
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let period = f64::from(ctx.queue.get_timestamp_period()) * 1e-9;
    let mut samples: Vec<f64> = (0..REPS + 1)
        .map(|_| {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("bench"),
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &queries,
                        beginning_of_pass_write_index: Some(0),
                        end_of_pass_write_index: Some(1),
                    }),
                });
                for _ in 0..dispatches {
                    encode(&mut pass);
                }
            }
            encoder.resolve_query_set(&queries, 0..2, &resolved, 0);
            ctx.queue.submit([encoder.finish()]);
            let ticks: Vec<u64> =
                bytemuck::pod_collect_to_vec(&fak::gpu::read_back(ctx, &resolved, 0..16).unwrap());
            (ticks[1] - ticks[0]) as f64 * period / f64::from(dispatches)
        })
        .skip(1)
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
