//! Mat-vec cases against f64 oracles over the dequantized weights (`fak::quant::dequantize`,
//! bit-exact with gguf-py): the f32 path (wgsl/matvec.wgsl) and the integer path
//! (wgsl/quantize_q8.wgsl, then wgsl/matvec_q8.wgsl). The GPU test (tests/gpu_matvec.rs) asserts
//! them; `harness selftest` reports them (`report::matvecs`).
//!
//! The integer path is held to two oracles. Tight: the f64 product of the weights with x̂, the
//! vectors as the GPU quantized them (read back), under the f32 path's rounding bound — the
//! integer sums are exact, so only the same f32 roundings remain. Loose: the f64 product with x
//! itself, plus Σ_i |w_i|·|x_i − x̂_i| ≤ Σ_i |w_i|·(d_i/2), the most the q8 rounding of x can move
//! the product (d_i the scale of x_i's block). The quantization itself is checked against its
//! definition: |q·d − v| ≤ d/2, |q| ≤ 127, d = max |v| / 127 per block.

use super::compare::Output;
use super::{poisoned_f32, rng};
use fak::gpu::kernels::matvec::{InputNorm, MatVec, MatVecFusion, MatVecIo, MatVecShape};
use fak::gpu::kernels::quantize_q8::{Q8Vectors, QuantizeQ8};
use fak::gpu::step::MAX_BATCH;
use fak::gpu::{
    Activations, GpuContext, Step, StepBuffer, read_back_f32, storage_buffer, upload, write,
};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use rand::Rng;

/// Row counts: one row, fewer than a workgroup's 4, a workgroup more than a power of two, many.
pub const ROWS: [u64; 4] = [1, 7, 257, 1000];
/// One batch per pipeline capacity (1, 2, 4, 8); 3 leaves one slot of the capacity-4 pipeline
/// unused.
pub const BATCHES: [u32; 4] = [1, 2, 3, 8];
/// W starts this far into its buffer (GGUF's tensor-data alignment), so the binding window has a
/// skip.
pub const WEIGHTS_OFFSET: u64 = 32;
/// eps of the folded norms.
const EPS: f32 = 1e-6;

/// Row lengths per type: one block, a few, and more units than a workgroup's 64 invocations take
/// in one pass, not a multiple of them (8 units per Q4_K/Q5_K block, 16 per Q6_K block, 4 per
/// 32-element block, one per 4 elements of F32/F16/BF16, whose odd lengths also leave rows that
/// start mid-word and end inside a unit).
pub fn col_counts(ty: GgmlType) -> [u64; 3] {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => [1, 37, 261],
        GgmlType::Q4_K | GgmlType::Q5_K => [256, 768, 2304],
        GgmlType::Q6_K => [256, 768, 1280],
        _ => [32, 96, 544],
    }
}

/// Random GGUF rows of `ty` whose values have about unit spread (`fill_random_rows`).
pub fn random_weights(ty: GgmlType, rows: u64, cols: u64, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; (ty.row_bytes(cols).unwrap() * rows) as usize];
    fill_random_rows(ty, cols as usize, rows as usize, 1.0, seed, &mut bytes).unwrap();
    bytes
}

/// Per element, the magnitude of the terms the kernel sums for it: |w| for types whose values
/// are products, and |a·q| + |b| for the affine ones (w = a·q ± b; the kernel multiplies out
/// a·Σq·x and b·Σx separately, so a rounding error scales with both). a·q is read off a copy of
/// the blocks with the offset field (m of Q4_1/Q5_1, dmin of Q4_K/Q5_K: the f16 at byte 2)
/// zeroed.
fn term_magnitudes(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let w = dequantize(ty, bytes, n).unwrap();
    if !matches!(
        ty,
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K
    ) {
        return w.iter().map(|v| v.abs()).collect();
    }
    let mut scaled_only = bytes.to_vec();
    for block in scaled_only.chunks_exact_mut(ty.block_bytes() as usize) {
        block[2..4].fill(0);
    }
    let aq = dequantize(ty, &scaled_only, n).unwrap();
    aq.iter()
        .zip(&w)
        .map(|(&aq, &w)| aq.abs() + (w - aq).abs())
        .collect()
}

/// The oracle: for each of `batch` vectors and each row, Σ w·x in f64 over the dequantized row,
/// Σ |terms|·|x|, the scale of the kernel's rounding errors, and (where `steps` gives each
/// element's q8 step d) Σ |w|·d/2, the most the q8 rounding of x moves the product.
/// `[b·rows + r]`.
pub struct Expected {
    pub dots: Vec<f64>,
    pub scales: Vec<f64>,
    pub rounding: Vec<f64>,
}

pub fn expected(
    ty: GgmlType,
    bytes: &[u8],
    (rows, cols): (u64, u64),
    x: &[f32],
    steps: Option<&[f32]>,
    batch: u32,
) -> Expected {
    let (rows, cols) = (rows as usize, cols as usize);
    let row_bytes = bytes.len() / rows;
    let n = batch as usize * rows;
    let mut e = Expected {
        dots: vec![0.0; n],
        scales: vec![0.0; n],
        rounding: vec![0.0; n],
    };
    for r in 0..rows {
        let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
        let w = dequantize(ty, row, cols).unwrap();
        let mags = term_magnitudes(ty, row, cols);
        for b in 0..batch as usize {
            let x = &x[b * cols..(b + 1) * cols];
            let o = b * rows + r;
            for i in 0..cols {
                e.dots[o] += f64::from(w[i]) * f64::from(x[i]);
                e.scales[o] += f64::from(mags[i]) * f64::from(x[i]).abs();
                if let Some(d) = steps {
                    e.rounding[o] += f64::from(w[i]).abs() * f64::from(d[b * cols + i]) / 2.0;
                }
            }
        }
    }
    e
}

/// The bound on |GPU − oracle| for one output. Each term passes through at most ~15 roundings
/// inside a unit (scale products, the 4-wide dots, the group sums and the offset term), one per
/// unit an invocation accumulates (≤ cols/256) and ≤ 15 in the reduction (a subgroupAdd of up to
/// 32 lanes and a sum over up to 8 subgroups, or a 6-level tree), plus the accumulate add: at most
/// 31 + cols/256 roundings of 2^-24 on Σ|terms| (+ |y0|), Higham's γ_n bound. 32 + 4·√cols
/// covers that for every cols below 2^20, and is the √cols law the rounding errors of an
/// f32 sum follow. The integer path has fewer roundings (its sums of codes are exact).
pub fn bound(cols: u64, scale: f64) -> f32 {
    ((32.0 + 4.0 * (cols as f64).sqrt()) * 2f64.powi(-24) * scale) as f32
}

/// Unit-spread random f32 values.
pub fn random_f32(rng: &mut impl Rng, n: u64) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// One Step uniform per batch of [`BATCHES`].
pub fn steps(ctx: &GpuContext) -> Vec<StepBuffer> {
    BATCHES.iter().map(|&n| step_of(ctx, n)).collect()
}

fn step_of(ctx: &GpuContext, n: u32) -> StepBuffer {
    let step = StepBuffer::new(ctx);
    step.set(ctx, Step::new(0, n, 0));
    step
}

/// `bytes` at byte `offset` of a new buffer.
pub fn weights_buffer_at(ctx: &GpuContext, bytes: &[u8], offset: u64) -> wgpu::Buffer {
    let mut padded = vec![0u8; offset as usize];
    padded.extend_from_slice(bytes);
    upload(ctx, "matvec W", &padded).unwrap()
}

/// How a case feeds x to the product.
#[derive(Clone, Copy)]
pub enum Path<'a> {
    /// f32 x (wgsl/matvec.wgsl).
    F32,
    /// x quantized by this kernel, integer dot products (wgsl/matvec_q8.wgsl).
    Q8(&'a QuantizeQ8),
}

/// Room for `n` q8 vectors of `cols` columns, poisoned: an unwritten scale reads NaN, an
/// unwritten code 0x7f.
pub fn poisoned_q8(ctx: &GpuContext, cols: u64, n: u32) -> Q8Vectors {
    let q8 = Q8Vectors::new(ctx, "matvec test", cols, n).unwrap();
    write(ctx, &q8.codes, 0, &vec![0x7f; q8.codes.size() as usize]).unwrap();
    write(
        ctx,
        &q8.scales,
        0,
        bytemuck::cast_slice(&vec![f32::NAN; q8.scales.size() as usize / 4]),
    )
    .unwrap();
    q8
}

/// `n` vectors of `x` (RMS-normed by `norm` first) quantized on the GPU, and what came out: per
/// vector, x̂ = q·d and each element's step d.
fn quantize(
    ctx: &GpuContext,
    quantizer: &QuantizeQ8,
    x: Activations<'_>,
    cols: u64,
    norm: Option<InputNorm<'_>>,
    n: u32,
) -> (Q8Vectors, Vec<f32>, Vec<f32>) {
    let q8 = poisoned_q8(ctx, cols, n);
    let step = step_of(ctx, n);
    let binding = quantizer.bind(ctx, x, cols, norm, &q8, &step, n).unwrap();
    ctx.run_pass("quantize_q8", |pass| {
        quantizer.encode(pass, &binding, n).unwrap();
    })
    .unwrap();
    let mut x_hat = Vec::new();
    let mut d = Vec::new();
    for (codes, scales) in q8.read_back(ctx, cols, n).unwrap() {
        for (i, &q) in codes.iter().enumerate() {
            let step = scales[i / 32];
            x_hat.push(f32::from(q) * step);
            d.push(step);
        }
    }
    (q8, x_hat, d)
}

/// The quantization against its definition (module docs): `v` the vectors it quantized (the
/// CPU's normed ones under a norm, within `v_rel` relative of the GPU's own), x̂ and d as read
/// back.
fn quantization_outputs(what: String, v: &[f32], x_hat: &[f32], d: &[f32], v_rel: f64) -> Output {
    let mut out = Output::each(format!("quantize_q8 {what}"));
    for (block, ((v, x_hat), d)) in v
        .chunks(32)
        .zip(x_hat.chunks(32))
        .zip(d.chunks(32))
        .enumerate()
    {
        let amax = v.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
        let step = f64::from(d[0]);
        // d = amax/127 within the division's and the norm's rounding.
        let d_error = (step - amax / 127.0).abs();
        // (A NaN scale fails too.)
        let d_ok = d_error <= (v_rel + 2f64.powi(-21)) * amax / 127.0;
        if !d_ok {
            out.push(f32::NAN, amax / 127.0, 0.0);
            out.what += &format!(" (block {block}: d {step} for max |v| {amax})");
        }
        for (&v, &x_hat) in v.iter().zip(x_hat) {
            // x̂ = q·d rounded to f32: |q| ≤ 127 exactly when |x̂/d| < 127.5.
            let code = f64::from(x_hat) / step;
            let in_range = step == 0.0 || code.abs() < 127.5;
            let got = if in_range { x_hat } else { f32::NAN };
            out.push(
                got,
                f64::from(v),
                step * (0.5 + 2f64.powi(-16)) + v_rel * f64::from(v).abs(),
            );
        }
    }
    out
}

/// One tensor multiplied by every batch, overwriting and accumulating, in a single pass: each of
/// the 8 runs writes its own region of one y buffer (rows `rows + 1` apart, so a gap element
/// follows each row). Overwriting runs read contiguous x; accumulating runs read x at an offset
/// with a padded stride and add to random y0. Everything a run must not write (rows past its
/// batch, the gaps, the space between regions) is checked to keep its initial bits. The integer
/// path quantizes both x layouts first (one [`Output`] each) and gives two per run: against
/// W·x̂, then against W·x.
#[allow(clippy::too_many_arguments)]
pub fn check_tensor(
    ctx: &GpuContext,
    kernel: &MatVec,
    path: Path<'_>,
    ty: GgmlType,
    (rows, cols): (u64, u64),
    bytes: &[u8],
    weights_offset: u64,
    max_binding: u64,
    seed: u64,
) -> Vec<Output> {
    let mut rng = rng(seed);
    let batch = u64::from(MAX_BATCH);
    let x = random_f32(&mut rng, batch * cols);
    let w = weights_buffer_at(ctx, bytes, weights_offset);

    let x_contiguous = upload(ctx, "x", bytemuck::cast_slice(&x)).unwrap();
    let (x_offset, x_stride) = (3, cols + 5);
    let mut strided = vec![f32::NAN; (x_offset + (batch - 1) * x_stride + cols) as usize];
    for b in 0..batch {
        let at = (x_offset + b * x_stride) as usize;
        strided[at..at + cols as usize]
            .copy_from_slice(&x[(b * cols) as usize..((b + 1) * cols) as usize]);
    }
    let x_strided = upload(ctx, "x strided", bytemuck::cast_slice(&strided)).unwrap();
    let x_of = |accumulate: bool| match accumulate {
        true => Activations {
            buffer: &x_strided,
            offset: x_offset,
            stride: x_stride,
        },
        false => Activations::contiguous(&x_contiguous, cols),
    };

    let mut out = Vec::new();
    let oracle = expected(ty, bytes, (rows, cols), &x, None, MAX_BATCH);
    // The integer path: each x layout quantized, and the oracles over x̂.
    let quantized = match path {
        Path::F32 => None,
        Path::Q8(quantizer) => {
            let [plain, strided] = [false, true].map(|s| {
                let (q8, x_hat, d) = quantize(ctx, quantizer, x_of(s), cols, None, MAX_BATCH);
                let what = format!("{cols} columns strided {s} ({})", quantizer.variant());
                out.push(quantization_outputs(what, &x, &x_hat, &d, 0.0));
                (q8, x_hat, d)
            });
            assert_eq!(
                plain.1, strided.1,
                "quantize_q8: both layouts of the same x must quantize alike"
            );
            let hat = expected(ty, bytes, (rows, cols), &plain.1, Some(&plain.2), MAX_BATCH);
            Some((plain.0, strided.0, hat, plain.2))
        }
    };
    let loose = quantized
        .as_ref()
        .map(|(.., d)| expected(ty, bytes, (rows, cols), &x, Some(d), MAX_BATCH).rounding);

    let y_stride = rows + 1;
    let region = batch * y_stride + 2;
    let runs: Vec<(usize, bool)> = (0..BATCHES.len())
        .flat_map(|i| [(i, false), (i, true)])
        .collect();
    let mut initial = vec![f32::NAN; runs.len() * region as usize];
    let y0 = random_f32(&mut rng, batch * rows);
    for (k, &(_, accumulate)) in runs.iter().enumerate() {
        if accumulate {
            for b in 0..batch {
                let at = (k as u64 * region + 1 + b * y_stride) as usize;
                initial[at..at + rows as usize]
                    .copy_from_slice(&y0[(b * rows) as usize..((b + 1) * rows) as usize]);
            }
        }
    }
    let y = storage_buffer(ctx, "y", initial.len() as u64 * 4).unwrap();
    write(ctx, &y, 0, bytemuck::cast_slice(&initial)).unwrap();

    let steps = steps(ctx);
    let shape = MatVecShape { ty, rows, cols };
    let bindings: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(k, &(i, accumulate))| {
            let io = MatVecIo {
                weights: &w,
                weights_offset,
                x: x_of(accumulate),
                y: Activations {
                    buffer: &y,
                    offset: k as u64 * region + 1,
                    stride: y_stride,
                },
                step: &steps[i],
                accumulate,
                max_batch: MAX_BATCH,
            };
            let fusion = MatVecFusion {
                q8: quantized
                    .as_ref()
                    .map(|(plain, strided, ..)| match accumulate {
                        true => strided,
                        false => plain,
                    }),
                ..MatVecFusion::default()
            };
            kernel
                .bind_fused_within(ctx, shape, &io, fusion, max_binding)
                .unwrap()
        })
        .collect();
    ctx.run_pass("matvec", |pass| {
        for (binding, &(i, _)) in bindings.iter().zip(&runs) {
            kernel.encode(pass, binding, BATCHES[i]).unwrap();
        }
    })
    .unwrap();
    let got = read_back_f32(ctx, &y, 0..y.size()).unwrap();

    let mut untouched = vec![true; got.len()];
    for (k, &(i, accumulate)) in runs.iter().enumerate() {
        let n = u64::from(BATCHES[i]);
        let what = format!(
            "{ty} {rows}x{cols} W at byte {weights_offset} batch {n} accumulate {accumulate} ({})",
            kernel.variant()
        );
        let mut exact = Output::each(what.clone());
        let mut against_x = Output::each(format!("{what} against W·x"));
        for b in 0..n {
            for r in 0..rows {
                let at = (k as u64 * region + 1 + b * y_stride + r) as usize;
                let o = (b * rows + r) as usize;
                let y0 = if accumulate { f64::from(y0[o]) } else { 0.0 };
                untouched[at] = false;
                let f32_bound = f64::from(bound(cols, oracle.scales[o] + y0.abs()));
                match (&quantized, &loose) {
                    (Some((_, _, hat, _)), Some(rounding)) => {
                        let hat_bound = bound(cols, hat.scales[o] + y0.abs());
                        exact.push(got[at], y0 + hat.dots[o], f64::from(hat_bound));
                        // The q8 rounding, plus both products' own roundings.
                        let loose =
                            rounding[o] * (1.0 + 2f64.powi(-10)) + f32_bound + f64::from(hat_bound);
                        against_x.push(got[at], y0 + oracle.dots[o], loose);
                    }
                    _ => exact.push(got[at], y0 + oracle.dots[o], f32_bound),
                }
            }
        }
        out.push(exact);
        if quantized.is_some() {
            out.push(against_x);
        }
    }
    let stray = (0..got.len()).any(|i| untouched[i] && got[i].to_bits() != initial[i].to_bits());
    if let Some(last) = out.last_mut() {
        last.wrote_outside = stray;
    }
    out
}

/// The kernel fused cases: the model's two uses (the norm before QKV; the norm, gate/up pairing
/// and SwiGLU of the MLP, x strided) and the pairing alone; (norm, swiglu, strided x).
pub const FUSIONS: [(bool, bool, bool); 3] = [
    (true, false, false),
    (true, true, true),
    (false, true, false),
];

/// Row lengths for the fused tests: a few blocks, a multiple of 4 (the folded norm reads its
/// weight four at a time) and of 32 (q8 blocks), more units than one pass of a workgroup for the
/// 32-element types.
fn fused_cols(ty: GgmlType) -> u64 {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 260,
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 768,
        _ => 544,
    }
}

/// RMSNorm in f64, as the CPU reference defines it: x / sqrt(mean x² + eps) · w.
fn normed(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mean = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64;
    let scale = 1.0 / (mean + f64::from(eps)).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &w)| (f64::from(v) * scale * f64::from(w)) as f32)
        .collect()
}

/// One fused binding against the f64 oracle: `rows` outputs for every batch of [`BATCHES`], x
/// the raw vectors (each at its own scale, so every vector's norm differs), W `rows` rows or
/// (`swiglu`) `2·rows` gate-then-up rows, y poisoned. Rows past a step's batch must stay NaN.
/// On the integer path the norm is folded into the quantization (one [`Output`] for it) and
/// the products are held to W·x̂ (and, for the unpaired product, to W·x, loosely).
#[allow(clippy::too_many_arguments)]
pub fn check_fused(
    ctx: &GpuContext,
    kernel: &MatVec,
    path: Path<'_>,
    ty: GgmlType,
    rows: u64,
    (norm, swiglu, strided_x): (bool, bool, bool),
    seed: u64,
) -> Vec<Output> {
    let cols = fused_cols(ty);
    let mut rng = rng(seed);
    let w_rows = if swiglu { 2 * rows } else { rows };
    let bytes = random_weights(ty, w_rows, cols, seed);
    let batch = u64::from(MAX_BATCH);
    let x: Vec<f32> = (0..batch)
        .flat_map(|b| {
            let scale = 0.1 + b as f32;
            random_f32(&mut rng, cols)
                .into_iter()
                .map(move |v| v * scale)
        })
        .collect();
    let nw: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.5..1.5)).collect();
    // What the plain product sees: the normed vectors (rounded to f32, as an unfused norm
    // would store them; the bound below covers the difference).
    let h: Vec<f32> = match norm {
        true => x
            .chunks(cols as usize)
            .flat_map(|v| normed(v, &nw, EPS))
            .collect(),
        false => x.clone(),
    };
    let w = weights_buffer_at(ctx, &bytes, WEIGHTS_OFFSET);
    let (x_offset, x_stride) = if strided_x { (3, cols + 5) } else { (0, cols) };
    let mut x_host = vec![f32::NAN; (x_offset + (batch - 1) * x_stride + cols) as usize];
    for b in 0..batch {
        let at = (x_offset + b * x_stride) as usize;
        x_host[at..at + cols as usize]
            .copy_from_slice(&x[(b * cols) as usize..((b + 1) * cols) as usize]);
    }
    let xb = upload(ctx, "x", bytemuck::cast_slice(&x_host)).unwrap();
    let x_act = Activations {
        buffer: &xb,
        offset: x_offset,
        stride: x_stride,
    };
    let nwb = upload(ctx, "norm weight", bytemuck::cast_slice(&nw)).unwrap();
    let input_norm = norm.then_some(InputNorm {
        weight: &nwb,
        eps: EPS,
        shared: false,
    });
    let mut out = Vec::new();
    // The norm's own rounding (x·s, ·w, the f32 sum of squares), relative to each value, as
    // checks/rms_norm.rs bounds the RMSNorm kernel.
    let norm_rel = if norm { 1e-5 } else { 0.0 };
    let quantized = match path {
        Path::F32 => None,
        Path::Q8(quantizer) => {
            let (q8, x_hat, d) = quantize(ctx, quantizer, x_act, cols, input_norm, MAX_BATCH);
            let what = format!("{cols} columns norm {norm} ({})", quantizer.variant());
            out.push(quantization_outputs(what, &h, &x_hat, &d, norm_rel));
            Some((q8, x_hat, d))
        }
    };
    let oracle = expected(ty, &bytes, (w_rows, cols), &h, None, MAX_BATCH);
    let hat = quantized
        .as_ref()
        .map(|(_, x_hat, d)| expected(ty, &bytes, (w_rows, cols), x_hat, Some(d), MAX_BATCH));
    let steps = steps(ctx);
    let ys: Vec<_> = BATCHES
        .iter()
        .map(|_| poisoned_f32(ctx, "y", batch * rows))
        .collect();
    let fusion = MatVecFusion {
        norm: input_norm.filter(|_| quantized.is_none()),
        swiglu,
        q8: quantized.as_ref().map(|(q8, ..)| q8),
        ..MatVecFusion::default()
    };
    let bind = |step, y, fusion| {
        let io = MatVecIo {
            weights: &w,
            weights_offset: WEIGHTS_OFFSET,
            x: x_act,
            y: Activations::contiguous(y, rows),
            step,
            accumulate: false,
            max_batch: MAX_BATCH,
        };
        kernel
            .bind_fused(ctx, MatVecShape { ty, rows, cols }, &io, fusion)
            .unwrap()
    };
    let bindings: Vec<_> = steps
        .iter()
        .zip(&ys)
        .map(|(step, y)| bind(step, y, fusion))
        .collect();
    ctx.run_pass("matvec fused", |pass| {
        for (binding, &n) in bindings.iter().zip(&BATCHES) {
            kernel.encode(pass, binding, n).unwrap();
        }
    })
    .unwrap();
    let what = |n| {
        format!(
            "{ty} {rows}x{cols} norm {norm} swiglu {swiglu} strided x {strided_x} batch {n} ({})",
            kernel.variant()
        )
    };
    // The oracle the products are held to: W·x̂ on the integer path, W·h on the f32 one; the
    // f32 path's folded norm adds a few roundings per term (x·w, the scale, its product with
    // the sum) beside the mat-vec's own: 8 more ulps of Σ|terms| covers them.
    let held = hat.as_ref().unwrap_or(&oracle);
    let product_bound = |o: usize| {
        f64::from(bound(cols, held.scales[o])) + 8.0 * f64::from(f32::EPSILON) * held.scales[o]
    };
    for (y, &n) in ys.iter().zip(&BATCHES) {
        let got = read_back_f32(ctx, y, 0..4 * batch * rows).unwrap();
        let mut exact = Output::each(what(n));
        let mut against_x = Output::each(format!("{} against W·x", what(n)));
        for b in 0..u64::from(n) {
            for r in 0..rows {
                let at = (b * rows + r) as usize;
                if swiglu {
                    let (g, u) = ((b * w_rows + r) as usize, (b * w_rows + rows + r) as usize);
                    let (gv, uv) = (held.dots[g], held.dots[u]);
                    let silu = gv / (1.0 + (-gv).exp());
                    // silu' ≤ 1.1 in magnitude: the product's error from each factor's, plus
                    // the rounding of the exp and the two products.
                    let e = 1.1 * uv.abs() * product_bound(g)
                        + silu.abs() * product_bound(u)
                        + 8.0 * f64::from(f32::EPSILON) * (silu * uv).abs();
                    exact.push(got[at], silu * uv, e);
                } else {
                    exact.push(got[at], held.dots[at], product_bound(at));
                    if let Some(hat) = &hat {
                        // The q8 rounding of h (steps d/2 of h's own blocks) and the norm's
                        // rounding of h, which the quantization saw instead of h.
                        let e = hat.rounding[at] * (1.0 + 2f64.powi(-10))
                            + norm_rel * oracle.scales[at]
                            + product_bound(at)
                            + f64::from(bound(cols, oracle.scales[at]));
                        against_x.push(got[at], oracle.dots[at], e);
                    }
                }
            }
        }
        let split = (u64::from(n) * rows) as usize;
        exact.wrote_outside = got[split..].iter().any(|v| !v.is_nan());
        out.push(exact);
        if !against_x.got.is_empty() {
            out.push(against_x);
        }
    }
    out
}
