//! The mat-vec kernel (wgsl/matvec.wgsl) against dequantize-then-f64-dot on the CPU
//! (`fak::quant::dequantize`, bit-exact with gguf-py): every type, every variant the device has,
//! every batch capacity, ragged row and column counts, accumulate on and off, strided inputs and
//! outputs, weights at an offset in their buffer and split into row ranges; bad shapes refused.

use fak::gpu::kernels::matvec::{
    InputNorm, MAX_BATCH, MatVec, MatVecFusion, MatVecIo, MatVecShape,
};
use fak::gpu::{
    Activations, GpuContext, GpuError, KernelPaths, Step, StepBuffer, read_back_f32,
    storage_buffer, upload, write,
};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use fak_tests::{assert_within, gpu, poisoned_f32, rng, variants};
use rand::Rng;

/// Row counts: one row, fewer than a workgroup's 4, a workgroup more than a power of two, many.
const ROWS: [u64; 4] = [1, 7, 257, 1000];
/// One batch per pipeline capacity (1, 2, 4, 8); 3 leaves one slot of the capacity-4 pipeline
/// unused.
const BATCHES: [u32; 4] = [1, 2, 3, 8];
/// W starts this far into its buffer (GGUF's tensor-data alignment), so the binding window has a
/// skip.
const WEIGHTS_OFFSET: u64 = 32;

/// Row lengths per type: one block, a few, and more units than a workgroup's 64 invocations take
/// in one pass, not a multiple of them (8 units per Q4_K/Q5_K block, 16 per Q6_K block, 4 per
/// 32-element block, one per 4 elements of F32/F16/BF16, whose odd lengths also leave rows that
/// start mid-word and end inside a unit).
fn col_counts(ty: GgmlType) -> [u64; 3] {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => [1, 37, 261],
        GgmlType::Q4_K | GgmlType::Q5_K => [256, 768, 2304],
        GgmlType::Q6_K => [256, 768, 1280],
        _ => [32, 96, 544],
    }
}

/// Random GGUF rows of `ty` whose values have about unit spread (`fill_random_rows`).
fn random_weights(ty: GgmlType, rows: u64, cols: u64, seed: u64) -> Vec<u8> {
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
/// and Σ |terms|·|x|, the scale of the kernel's rounding errors. `[b·rows + r]`.
struct Expected {
    dots: Vec<f64>,
    scales: Vec<f64>,
}

fn expected(ty: GgmlType, bytes: &[u8], rows: u64, cols: u64, x: &[f32], batch: u32) -> Expected {
    let (rows, cols) = (rows as usize, cols as usize);
    let row_bytes = bytes.len() / rows;
    let mut dots = vec![0.0; batch as usize * rows];
    let mut scales = vec![0.0; batch as usize * rows];
    for r in 0..rows {
        let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
        let w = dequantize(ty, row, cols).unwrap();
        let mags = term_magnitudes(ty, row, cols);
        for b in 0..batch as usize {
            let x = &x[b * cols..(b + 1) * cols];
            dots[b * rows + r] = w
                .iter()
                .zip(x)
                .map(|(&w, &x)| f64::from(w) * f64::from(x))
                .sum();
            scales[b * rows + r] = mags
                .iter()
                .zip(x)
                .map(|(&m, &x)| f64::from(m) * f64::from(x).abs())
                .sum();
        }
    }
    Expected { dots, scales }
}

/// The bound on |GPU − oracle| for one output. Each term passes through at most ~15 roundings
/// inside a unit (scale products, the 4-wide dots, the group sums and the offset term), one per
/// unit an invocation accumulates (≤ cols/256) and ≤ 15 in the reduction (a subgroupAdd of up to
/// 32 lanes and a sum over up to 8 subgroups, or a 6-level tree), plus the accumulate add: at most
/// 31 + cols/256 roundings of 2^-24 on Σ|terms| (+ |y0|), Higham's γ_n bound. 32 + 4·√cols
/// covers that for every cols below 2^20, and is the √cols law the rounding errors of an
/// f32 sum follow.
fn bound(cols: u64, scale: f64) -> f32 {
    ((32.0 + 4.0 * (cols as f64).sqrt()) * 2f64.powi(-24) * scale) as f32
}

/// Unit-spread random f32 values.
fn random_f32(rng: &mut impl Rng, n: u64) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn steps(ctx: &GpuContext) -> Vec<StepBuffer> {
    BATCHES
        .iter()
        .map(|&n| {
            let step = StepBuffer::new(ctx);
            step.set(ctx, Step::new(0, n, 0));
            step
        })
        .collect()
}

fn weights_buffer(ctx: &GpuContext, bytes: &[u8]) -> wgpu::Buffer {
    weights_buffer_at(ctx, bytes, WEIGHTS_OFFSET)
}

fn weights_buffer_at(ctx: &GpuContext, bytes: &[u8], offset: u64) -> wgpu::Buffer {
    let mut padded = vec![0u8; offset as usize];
    padded.extend_from_slice(bytes);
    upload(ctx, "matvec W", &padded).unwrap()
}

/// One tensor multiplied by every batch, overwriting and accumulating, in a single pass: each of
/// the 8 runs writes its own region of one y buffer (rows `rows + 1` apart, so a gap element
/// follows each row). Overwriting runs read contiguous x; accumulating runs read x at an offset
/// with a padded stride and add to random y0. Everything a run must not write (rows past its
/// batch, the gaps, the space between regions) is checked to keep its initial bits.
#[allow(clippy::too_many_arguments)]
fn check_tensor(
    ctx: &GpuContext,
    kernel: &MatVec,
    ty: GgmlType,
    (rows, cols): (u64, u64),
    bytes: &[u8],
    weights_offset: u64,
    max_binding: u64,
    seed: u64,
) {
    let mut rng = rng(seed);
    let batch = u64::from(MAX_BATCH);
    let x = random_f32(&mut rng, batch * cols);
    let oracle = expected(ty, bytes, rows, cols, &x, MAX_BATCH);
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
            let x = if accumulate {
                Activations {
                    buffer: &x_strided,
                    offset: x_offset,
                    stride: x_stride,
                }
            } else {
                Activations::contiguous(&x_contiguous, cols)
            };
            let io = MatVecIo {
                weights: &w,
                weights_offset,
                x,
                y: Activations {
                    buffer: &y,
                    offset: k as u64 * region + 1,
                    stride: y_stride,
                },
                step: &steps[i],
                accumulate,
                max_batch: MAX_BATCH,
            };
            kernel.bind_within(ctx, shape, &io, max_binding).unwrap()
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
        let mut got_run = Vec::new();
        let mut want = Vec::new();
        let mut bounds = Vec::new();
        for b in 0..n {
            for r in 0..rows {
                let at = (k as u64 * region + 1 + b * y_stride + r) as usize;
                let o = (b * rows + r) as usize;
                let y0 = if accumulate { f64::from(y0[o]) } else { 0.0 };
                untouched[at] = false;
                got_run.push(got[at]);
                want.push((y0 + oracle.dots[o]) as f32);
                bounds.push(bound(cols, oracle.scales[o] + y0.abs()));
            }
        }
        let what = format!(
            "{ty} {rows}x{cols} W at byte {weights_offset} batch {n} accumulate {accumulate} ({})",
            kernel.variant()
        );
        assert_within(&what, &got_run, &want, &bounds);
    }
    let stray: Vec<usize> = (0..got.len())
        .filter(|&i| untouched[i] && got[i].to_bits() != initial[i].to_bits())
        .collect();
    assert!(
        stray.is_empty(),
        "{ty} {rows}x{cols} ({}): {} elements outside the outputs were written, first at {:?}",
        kernel.variant(),
        stray.len(),
        stray.first()
    );
}

#[test]
fn every_type_batch_and_ragged_shape_matches_a_dequantized_f64_product() {
    let ctx = gpu();
    let kernels: Vec<MatVec> = variants::<MatVec>(ctx)
        .into_iter()
        .map(|paths| MatVec::new(ctx, paths).unwrap())
        .collect();
    let mut seed = 0x3a7e_0000;
    for ty in MatVec::TYPES {
        for rows in ROWS {
            for cols in col_counts(ty) {
                seed += 1;
                let bytes = random_weights(ty, rows, cols, seed);
                // Q4_K reads 16-byte words where its blocks start on 16 bytes: W at byte 36
                // takes the 4-byte loads instead.
                let offsets: &[u64] = match ty {
                    GgmlType::Q4_K => &[WEIGHTS_OFFSET, WEIGHTS_OFFSET + 4],
                    _ => &[WEIGHTS_OFFSET],
                };
                for kernel in &kernels {
                    for &offset in offsets {
                        check_tensor(
                            ctx,
                            kernel,
                            ty,
                            (rows, cols),
                            &bytes,
                            offset,
                            ctx.max_binding_size(),
                            seed,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rows_split_across_small_bindings_start_at_any_byte_offset() {
    let ctx = gpu();
    // Q6_K rows of 5 blocks are 1050 bytes: every other row starts 2 bytes into a word, and the
    // ranges of a 64 KiB binding (62 rows each) start mid-window.
    let (ty, rows, cols) = (GgmlType::Q6_K, 257, 1280);
    let bytes = random_weights(ty, rows, cols, 0x3a7e_1001);
    for paths in variants::<MatVec>(ctx) {
        let kernel = MatVec::new(ctx, paths).unwrap();
        check_tensor(
            ctx,
            &kernel,
            ty,
            (rows, cols),
            &bytes,
            WEIGHTS_OFFSET,
            64 << 10,
            0x3a7e_1002,
        );
    }
}

/// 128 MiB: lavapipe's binding limit, and the cap used on devices with larger bindings so the test
/// splits (and stays affordable) everywhere.
const SPLIT_BINDING: u64 = 128 << 20;

#[test]
fn a_weight_larger_than_one_binding_is_split_into_row_ranges_on_a_2d_grid() {
    let ctx = gpu();
    let max_binding = ctx.max_binding_size().min(SPLIT_BINDING);
    // 300 000 Q8_0 rows of 448 elements (476 bytes, not a multiple of any binding alignment) are
    // 143 MB: two ranges, the first of more than 65535 workgroups of 4 rows.
    let (ty, rows, cols) = (GgmlType::Q8_0, 300_000u64, 448u64);
    let batch = 3;
    let bytes = random_weights(ty, rows, cols, 0x3a7e_2001);
    let mut rng = rng(0x3a7e_2002);
    let x = random_f32(&mut rng, u64::from(batch) * cols);
    let oracle = expected(ty, &bytes, rows, cols, &x, batch);
    let kernel = MatVec::new(ctx, KernelPaths::FALLBACK).unwrap();

    let w = weights_buffer(ctx, &bytes);
    let xb = upload(ctx, "x", bytemuck::cast_slice(&x)).unwrap();
    let y = poisoned_f32(ctx, "y", u64::from(batch) * rows);
    let step = StepBuffer::new(ctx);
    step.set(ctx, Step::new(0, batch, 0));
    let io = MatVecIo {
        weights: &w,
        weights_offset: WEIGHTS_OFFSET,
        x: Activations::contiguous(&xb, cols),
        y: Activations::contiguous(&y, rows),
        step: &step,
        accumulate: false,
        max_batch: batch,
    };
    let binding = kernel
        .bind_within(ctx, MatVecShape { ty, rows, cols }, &io, max_binding)
        .unwrap();
    let grids: Vec<_> = binding.grids().collect();
    assert!(
        grids.len() >= 2,
        "expected a split into row ranges, got {grids:?}"
    );
    assert!(
        grids.iter().any(|g| g.y > 1),
        "expected a 2-D grid past 65535 workgroups, got {grids:?}"
    );
    ctx.run_pass("matvec split", |pass| {
        kernel.encode(pass, &binding, batch).unwrap()
    })
    .unwrap();
    let got = read_back_f32(ctx, &y, 0..4 * u64::from(batch) * rows).unwrap();
    let want: Vec<f32> = oracle.dots.iter().map(|&d| d as f32).collect();
    let bounds: Vec<f32> = oracle.scales.iter().map(|&s| bound(cols, s)).collect();
    assert_within(
        &format!(
            "{ty} {rows}x{cols} batch {batch} split {} ways",
            grids.len()
        ),
        &got,
        &want,
        &bounds,
    );
}

#[test]
fn bad_shapes_batches_and_offsets_are_refused_before_any_gpu_work() {
    let ctx = gpu();
    let kernel = MatVec::new(ctx, KernelPaths::FALLBACK).unwrap();
    let w = upload(ctx, "W", &[0u8; 4096]).unwrap();
    let x = poisoned_f32(ctx, "x", 512);
    let y = poisoned_f32(ctx, "y", 64);
    let step = StepBuffer::new(ctx);
    let io = |max_batch, weights_offset| MatVecIo {
        weights: &w,
        weights_offset,
        x: Activations::contiguous(&x, 256),
        y: Activations::contiguous(&y, 8),
        step: &step,
        accumulate: false,
        max_batch,
    };
    let bind =
        |ty, rows, cols, io: MatVecIo<'_>| kernel.bind(ctx, MatVecShape { ty, rows, cols }, &io);
    let shape_error = |r: Result<_, GpuError>| matches!(r, Err(GpuError::Shape { .. }));
    // Not whole blocks; W past its buffer (8 rows of 256 Q8_0 are 2176 bytes: fine; 16 are not).
    assert!(shape_error(bind(GgmlType::Q4_K, 8, 100, io(1, 0))));
    assert!(shape_error(bind(GgmlType::Q8_0, 16, 256, io(1, 0))));
    // x holds 2 vectors of 256, y 8 vectors of 8: a batch of 3 overruns x.
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(3, 0))));
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(0, 0))));
    assert!(shape_error(bind(
        GgmlType::Q8_0,
        8,
        256,
        io(MAX_BATCH + 1, 0)
    )));
    assert!(shape_error(bind(GgmlType::Q8_0, 8, 256, io(1, 2))));
    assert!(shape_error(bind(GgmlType::Q8_0, 0, 256, io(1, 0))));
    assert!(matches!(
        bind(GgmlType::Q2_K, 8, 256, io(1, 0)),
        Err(GpuError::UnsupportedType { .. })
    ));
    // A binding checked for 2 vectors refuses a step of 3.
    let binding = bind(GgmlType::Q8_0, 8, 256, io(2, 32)).unwrap();
    let mut refused = false;
    ctx.run_pass("refused", |pass| {
        refused = matches!(
            kernel.encode(pass, &binding, 3),
            Err(GpuError::Shape { .. })
        );
    })
    .unwrap();
    assert!(
        refused,
        "encode accepted more vectors than the binding was checked for"
    );
}

/// Row lengths for the fused tests: a few blocks, a multiple of 4 (the folded norm reads its
/// weight four at a time), more units than one pass of a workgroup for the 32-element types.
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
#[allow(clippy::too_many_arguments)]
fn check_fused(
    ctx: &GpuContext,
    kernel: &MatVec,
    ty: GgmlType,
    rows: u64,
    norm: bool,
    swiglu: bool,
    strided_x: bool,
    seed: u64,
) {
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
    let eps = 1e-6;
    // What the plain product sees: the normed vectors (rounded to f32, as an unfused norm
    // would store them; the bound below covers the difference).
    let h: Vec<f32> = match norm {
        true => x
            .chunks(cols as usize)
            .flat_map(|v| normed(v, &nw, eps))
            .collect(),
        false => x.clone(),
    };
    let oracle = expected(ty, &bytes, w_rows, cols, &h, MAX_BATCH);
    let w = weights_buffer(ctx, &bytes);
    let (x_offset, x_stride) = if strided_x { (3, cols + 5) } else { (0, cols) };
    let mut x_host = vec![f32::NAN; (x_offset + (batch - 1) * x_stride + cols) as usize];
    for b in 0..batch {
        let at = (x_offset + b * x_stride) as usize;
        x_host[at..at + cols as usize]
            .copy_from_slice(&x[(b * cols) as usize..((b + 1) * cols) as usize]);
    }
    let xb = upload(ctx, "x", bytemuck::cast_slice(&x_host)).unwrap();
    let nwb = upload(ctx, "norm weight", bytemuck::cast_slice(&nw)).unwrap();
    let steps = steps(ctx);
    let ys: Vec<_> = BATCHES
        .iter()
        .map(|_| poisoned_f32(ctx, "y", batch * rows))
        .collect();
    let fusion = MatVecFusion {
        norm: norm.then_some(InputNorm { weight: &nwb, eps }),
        swiglu,
    };
    let bindings: Vec<_> = steps
        .iter()
        .zip(&ys)
        .map(|(step, y)| {
            let io = MatVecIo {
                weights: &w,
                weights_offset: WEIGHTS_OFFSET,
                x: Activations {
                    buffer: &xb,
                    offset: x_offset,
                    stride: x_stride,
                },
                y: Activations::contiguous(y, rows),
                step,
                accumulate: false,
                max_batch: MAX_BATCH,
            };
            kernel
                .bind_fused(ctx, MatVecShape { ty, rows, cols }, &io, fusion)
                .unwrap()
        })
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
    // The norm adds a few roundings per term (x·w, the scale, its product with the sum) beside
    // the mat-vec's own: 8 more ulps of Σ|terms| covers them.
    let product_bound =
        |o: usize| bound(cols, oracle.scales[o]) + 8.0 * f32::EPSILON * oracle.scales[o] as f32;
    for (y, &n) in ys.iter().zip(&BATCHES) {
        let got = read_back_f32(ctx, y, 0..4 * batch * rows).unwrap();
        let mut want = Vec::new();
        let mut bounds = Vec::new();
        for b in 0..u64::from(n) {
            for r in 0..rows {
                if swiglu {
                    let (g, u) = ((b * w_rows + r) as usize, (b * w_rows + rows + r) as usize);
                    let (gv, uv) = (oracle.dots[g], oracle.dots[u]);
                    let silu = gv / (1.0 + (-gv).exp());
                    want.push((silu * uv) as f32);
                    // silu' ≤ 1.1 in magnitude: the product's error from each factor's, plus
                    // the rounding of the exp and the two products.
                    let e = 1.1 * uv.abs() * f64::from(product_bound(g))
                        + silu.abs() * f64::from(product_bound(u))
                        + 8.0 * f64::from(f32::EPSILON) * (silu * uv).abs();
                    bounds.push(e as f32);
                } else {
                    let o = (b * rows + r) as usize;
                    want.push(oracle.dots[o] as f32);
                    bounds.push(product_bound(o));
                }
            }
        }
        let split = (u64::from(n) * rows) as usize;
        assert_within(&what(n), &got[..split], &want, &bounds);
        assert!(
            got[split..].iter().all(|v| v.is_nan()),
            "{}: rows past the batch were written",
            what(n)
        );
    }
}

#[test]
fn a_folded_norm_and_a_gate_up_pairing_match_the_unfused_math_on_every_x_layout() {
    let ctx = gpu();
    let kernels: Vec<MatVec> = variants::<MatVec>(ctx)
        .into_iter()
        .map(|paths| MatVec::new(ctx, paths).unwrap())
        .collect();
    let mut seed = 0x3a7e_5000;
    // One type per way load_xs pairs x with codes (the only code the fusions touch besides the
    // prologue and the epilogue, which no type changes), and each unquantized type (its own
    // unit loads): each NORM type costs four pipeline builds, seconds each on lavapipe.
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        for kernel in &kernels {
            // (norm, swiglu, strided x): the model's two uses (QKV, the MLP), the pairing
            // alone, and an x the kernel must read four bytes at a time.
            for (norm, swiglu, strided) in [
                (true, false, false),
                (true, true, true),
                (false, true, false),
            ] {
                seed += 1;
                // 7 rows: a ragged last workgroup of 4; 5 paired outputs: of 2.
                let rows = if swiglu { 5 } else { 7 };
                check_fused(ctx, kernel, ty, rows, norm, swiglu, strided, seed);
            }
        }
    }
}

#[test]
fn fusions_the_kernel_cannot_do_are_refused() {
    let ctx = gpu();
    let kernel = MatVec::new(ctx, KernelPaths::FALLBACK).unwrap();
    let w = upload(ctx, "W", &[0u8; 8192]).unwrap();
    let x = poisoned_f32(ctx, "x", 512);
    let y = poisoned_f32(ctx, "y", 64);
    let nw = poisoned_f32(ctx, "norm weight", 64);
    let step = StepBuffer::new(ctx);
    let io = |accumulate| MatVecIo {
        weights: &w,
        weights_offset: 0,
        x: Activations::contiguous(&x, 256),
        y: Activations::contiguous(&y, 8),
        step: &step,
        accumulate,
        max_batch: 1,
    };
    let shape = |ty, cols| MatVecShape { ty, rows: 8, cols };
    let shape_error = |r: Result<_, GpuError>| matches!(r, Err(GpuError::Shape { .. }));
    let pairing = MatVecFusion {
        norm: None,
        swiglu: true,
    };
    // A pairing writes silu(g)·u: it cannot add to y.
    assert!(shape_error(kernel.bind_fused(
        ctx,
        shape(GgmlType::Q8_0, 256),
        &io(true),
        pairing
    )));
    // 16 rows of 256 Q8_0 (gate + up) are 4352 bytes; 64 of 256 F32 are not in 8 KiB.
    assert!(
        kernel
            .bind_fused(ctx, shape(GgmlType::Q8_0, 256), &io(false), pairing)
            .is_ok()
    );
    assert!(shape_error(kernel.bind_fused(
        ctx,
        MatVecShape {
            ty: GgmlType::F32,
            rows: 32,
            cols: 64
        },
        &io(false),
        pairing
    )));
    // The norm weight holds 64 values: too few for rows of 256; rows of 6 are not whole vec4s.
    let norm = MatVecFusion {
        norm: Some(InputNorm {
            weight: &nw,
            eps: 1e-6,
        }),
        swiglu: false,
    };
    assert!(shape_error(kernel.bind_fused(
        ctx,
        shape(GgmlType::Q8_0, 256),
        &io(false),
        norm
    )));
    assert!(shape_error(kernel.bind_fused(
        ctx,
        shape(GgmlType::F32, 6),
        &io(false),
        norm
    )));
    // A pairing too large for one binding is refused, not split.
    assert!(matches!(
        kernel.bind_fused_within(ctx, shape(GgmlType::Q8_0, 256), &io(false), pairing, 4096),
        Err(GpuError::TooLarge { .. })
    ));
}
