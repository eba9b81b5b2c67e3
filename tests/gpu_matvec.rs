//! The mat-vec kernel (wgsl/matvec.wgsl) against dequantize-then-f64-dot on the CPU
//! (`fak::quant::dequantize`, bit-exact with gguf-py): every type, every variant the device has,
//! every batch capacity, ragged row and column counts, accumulate on and off, strided inputs and
//! outputs, weights at an offset in their buffer and split into row ranges; bad shapes refused.
//! The integer path (int-dot variants: wgsl/quantize_q8.wgsl, then wgsl/matvec_q8.wgsl) on the
//! same cases for its types, against W·x̂ (x̂ the quantized x) tightly and W·x loosely. The case
//! code is shared with `harness selftest` (harness/checks/matvec.rs).

use fak::gpu::kernels::matvec::{
    InputNorm, MatVec, MatVecFusion, MatVecIo, MatVecLayout, MatVecShape, ShortRows,
};
use fak::gpu::kernels::quantize_q8::{Q8Vectors, QuantizeQ8};
use fak::gpu::step::MAX_BATCH;
use fak::gpu::{
    Activations, GpuContext, GpuError, KernelPaths, Step, StepBuffer, read_back, read_back_f32,
    upload,
};
use fak::quant::GgmlType;
use fak_tests::compare::Output;
use fak_tests::matvec::{
    BATCHES, FUSIONS, Path, ROWS, WEIGHTS_OFFSET, bound, check_fused, check_tensor, col_counts,
    expected, poisoned_q8, random_f32, random_weights, weights_buffer_at,
};
use fak_tests::{assert_within, gpu, poisoned_f32, rng, variants};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

fn assert_all(outputs: Vec<Output>) {
    for o in &outputs {
        o.assert();
    }
}

/// The kernel's variants on this device with the integer path or without (the f32 pipelines of
/// an int-dot variant are the same code as those of its f32 twin: tested once).
fn kernels(ctx: &GpuContext, int_dot: bool) -> Vec<MatVec> {
    variants::<MatVec>(ctx)
        .into_iter()
        .filter(|p| p.int_dot == int_dot)
        .map(|paths| MatVec::new(ctx, paths).unwrap())
        .collect()
}

/// The integer types a test takes on int-dot variant `k` of `count`: every one on the last (the
/// subgroup reduction where the device has it), Q4_K and Q6_K (the wide form's) on the others:
/// the reduction after the units is the same for every type, and each type costs pipeline
/// builds of seconds on lavapipe.
fn integer_types(k: usize, count: usize) -> &'static [GgmlType] {
    match k + 1 == count {
        true => &MatVec::Q8_TYPES,
        false => &[GgmlType::Q4_K, GgmlType::Q6_K],
    }
}

/// The quantizer of an int-dot mat-vec variant's subgroup choice.
fn quantizer(ctx: &GpuContext, kernel: &MatVec) -> QuantizeQ8 {
    QuantizeQ8::new(ctx, kernel.variant()).unwrap()
}

/// The f32 path: every type on the last variant (the subgroup reduction where the device has
/// it), on the others a type of each unit load (unquantized, 32-element blocks, the K-quants'
/// two unit sizes): the reduction after the units is the same for every type, and each type
/// costs four pipeline builds, seconds on lavapipe.
#[test]
fn every_type_batch_and_ragged_shape_matches_a_dequantized_f64_product() {
    let ctx = gpu();
    let kernels = kernels(ctx, false);
    let mut seed = 0x3a7e_0000;
    for ty in MatVec::TYPES {
        let some_types = [
            GgmlType::F16,
            GgmlType::Q5_1,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ];
        let kernels = match some_types.contains(&ty) {
            true => &kernels[..],
            false => &kernels[kernels.len() - 1..],
        };
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
                for kernel in kernels {
                    for &offset in offsets {
                        assert_all(check_tensor(
                            ctx,
                            kernel,
                            Path::F32,
                            ty,
                            (rows, cols),
                            &bytes,
                            offset,
                            ctx.max_binding_size(),
                            seed,
                        ));
                    }
                }
            }
        }
    }
}

/// The integer path on every int-dot variant: each of its types (`integer_types`), batch,
/// accumulate, strided x, ragged rows; Q4_K on both weight alignments. Rows: one, a ragged
/// workgroup, more than a power of two (the f32 test's 1000 rows add nothing the integer loop
/// does differently).
#[test]
fn the_integer_path_matches_the_product_of_its_quantized_input_on_every_type_and_batch() {
    let ctx = gpu();
    let mut seed = 0x3a7e_6000;
    let kernels = kernels(ctx, true);
    let count = kernels.len();
    for (k, kernel) in kernels.into_iter().enumerate() {
        let quantizer = quantizer(ctx, &kernel);
        for &ty in integer_types(k, count) {
            for rows in [1, 7, 257] {
                for cols in col_counts(ty) {
                    seed += 1;
                    let bytes = random_weights(ty, rows, cols, seed);
                    let offsets: &[u64] = match ty {
                        GgmlType::Q4_K => &[WEIGHTS_OFFSET, WEIGHTS_OFFSET + 4],
                        _ => &[WEIGHTS_OFFSET],
                    };
                    for &offset in offsets {
                        assert_all(check_tensor(
                            ctx,
                            &kernel,
                            Path::Q8(&quantizer),
                            ty,
                            (rows, cols),
                            &bytes,
                            offset,
                            ctx.max_binding_size(),
                            seed,
                        ));
                    }
                }
            }
        }
    }
}

/// Every candidate layout besides the default (teams of 4 rows, wider workgroups, two units in
/// flight) on every variant, f32 and integer path: the decode's weight types (and F16, whose last
/// unit is guarded) at every batch, accumulate on and off, strided x, and the MLP's fusion (norm,
/// gate/up pairing, strided x). 37 rows leave the last workgroup's teams past the end; the longest
/// rows of `col_counts` take several passes of a team, the last one ragged. Besides the
/// candidates, one layout with two units in flight (`FAK_MATVEC_LAYOUT` can ask for any): the
/// second load of a step clamped past the row's end and its products dropped.
#[test]
fn every_layout_matches_on_the_decode_types_batches_and_fusions() {
    let ctx = gpu();
    let mut seed = 0x3a7e_8000;
    let rows = 37;
    let unrolled = MatVecLayout::new(64, 2, 2);
    for layout in MatVecLayout::CANDIDATES.into_iter().chain([unrolled]) {
        if layout == MatVecLayout::DEFAULT {
            continue;
        }
        for paths in variants::<MatVec>(ctx) {
            let kernel = MatVec::with_layout(ctx, paths, layout).unwrap();
            let quantizer = paths.int_dot.then(|| quantizer(ctx, &kernel));
            let (path, types): (Path, &[GgmlType]) = match &quantizer {
                Some(q) => (Path::Q8(q), &[GgmlType::Q4_K, GgmlType::Q6_K]),
                None => (Path::F32, &[GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16]),
            };
            for &ty in types {
                seed += 1;
                let cols = col_counts(ty)[2];
                let bytes = random_weights(ty, rows, cols, seed);
                assert_all(check_tensor(
                    ctx,
                    &kernel,
                    path,
                    ty,
                    (rows, cols),
                    &bytes,
                    WEIGHTS_OFFSET,
                    ctx.max_binding_size(),
                    seed,
                ));
            }
            seed += 1;
            let mlp = FUSIONS[1];
            assert_all(check_fused(
                ctx,
                &kernel,
                path,
                GgmlType::Q4_K,
                rows,
                mlp,
                seed,
            ));
        }
    }
}

/// The integer path's wide form (wgsl/matvec_q8_wide.wgsl) in each of its candidate layouts on
/// an int-dot variant: Q4_K (16-byte weight loads; and 4-byte ones in the first layout), Q6_K
/// (blocks on 2-byte boundaries) at every batch, accumulate on and off, strided x, 37 rows (the
/// last workgroup's teams past the end), rows of several passes of a team, the last ragged (and
/// the second unit of a step clamped and dropped); the MLP's fusion (gate/up pairing, norm folded
/// into the quantization, strided x). The first layout on every int-dot variant (subgroup
/// reduction and the workgroup tree: the epilogue is matvec.wgsl's, checked in every layout by
/// the tests above), the others on the first only, to keep lavapipe's pipeline builds few. Q5_K,
/// which the wide form does not serve, runs the first layout narrow.
#[test]
fn the_wide_form_matches_on_its_types_batches_and_fusions() {
    check_form(&MatVecLayout::WIDE_CANDIDATES, 0x3a7e_a000);
}

/// The batched form (wgsl/matvec_q8_batched.wgsl: the wide form's loop over vectors with x in
/// 16-byte loads and no branch per vector; a vector past the step's batch re-reads the last one)
/// on the wide form's cases, in each of its candidate layouts: batches of 3 leave a capacity-4
/// pipeline one such vector, whose outputs must stay unwritten (poisoned).
#[test]
fn the_batched_form_matches_on_its_types_batches_and_fusions() {
    check_form(&MatVecLayout::BATCHED_CANDIDATES, 0x3a7e_e000);
}

/// The batched form's split (a GPU's default, wgsl/matvec_q8_batched.wgsl's VECTOR_GROUPS: G vectors a
/// workgroup on B / G times the grid) on the wide form's cases, in each of its candidate layouts:
/// a batch of 3 on 2 vectors a workgroup leaves the second workgroup one vector and a clamped
/// slot, a batch of 2 on a capacity-8 grid leaves workgroups with none (they must write nothing:
/// outputs past the batch stay poisoned); the quantizing gate/up writes its q8 blocks per
/// vector from the workgroup that took it.
#[test]
fn the_split_form_matches_on_its_types_batches_and_fusions() {
    check_form(&MatVecLayout::SPLIT_CANDIDATES, 0x3a7e_f000);
}

/// The cases of the tests above for one form's candidate layouts; on the first int-dot variant
/// also issue 21's determinism ([`assert_bits_kept`]: every vector's outputs at every batch are
/// the wide twin's batch-1 bits) with the pipelines those cases built: each form's first layout
/// on Q4_K and Q6_K, its others on one of them (alternating).
fn check_form(layouts: &[MatVecLayout], seed: u64) {
    let ctx = gpu();
    let mut seed = seed;
    let rows = 37;
    for (i, &layout) in layouts.iter().enumerate() {
        let int_dot = variants::<MatVec>(ctx).into_iter().filter(|p| p.int_dot);
        for (v, paths) in int_dot
            .take(if i == 0 { usize::MAX } else { 1 })
            .enumerate()
        {
            let kernel = MatVec::with_layout(ctx, paths, layout).unwrap();
            let quantizer = quantizer(ctx, &kernel);
            if v == 0 {
                let types = match i {
                    0 => vec![GgmlType::Q4_K, GgmlType::Q6_K],
                    _ => vec![[GgmlType::Q4_K, GgmlType::Q6_K][i % 2]],
                };
                for ty in types {
                    seed += 1;
                    let case = BitsCase::new(ctx, ty, seed);
                    let alone = match layout.batched {
                        true => case.alone(ctx, &wide_twin(ctx, paths, layout), &quantizer),
                        false => case.alone(ctx, &kernel, &quantizer),
                    };
                    let what = format!("{ty} {layout} {paths}");
                    case.assert_bits_kept(ctx, &kernel, &quantizer, &alone, &what);
                }
            }
            let mut cases = vec![
                (GgmlType::Q4_K, WEIGHTS_OFFSET),
                (GgmlType::Q6_K, WEIGHTS_OFFSET),
            ];
            if i == 0 {
                cases.push((GgmlType::Q4_K, WEIGHTS_OFFSET + 4));
                cases.push((GgmlType::Q5_K, WEIGHTS_OFFSET));
            }
            for (ty, offset) in cases {
                seed += 1;
                let cols = col_counts(ty)[2];
                let bytes = random_weights(ty, rows, cols, seed);
                assert_all(check_tensor(
                    ctx,
                    &kernel,
                    Path::Q8(&quantizer),
                    ty,
                    (rows, cols),
                    &bytes,
                    offset,
                    ctx.max_binding_size(),
                    seed,
                ));
            }
            seed += 1;
            assert_all(check_fused(
                ctx,
                &kernel,
                Path::Q8(&quantizer),
                GgmlType::Q4_K,
                rows,
                FUSIONS[1],
                seed,
            ));
        }
    }
}

/// Issue 21's determinism at the kernel under the engine's rule: a sequence's outputs must not
/// depend on what else is in the batch. `MatVec::new`'s kernel on one int-dot variant runs the
/// rule's layouts at batches 1, 2, 4 and 8 — its default layout batched at every batch unless
/// FAK_MATVEC_BATCHED=0, else split where the split G (`MatVec::splits_vectors_of`: by type,
/// FAK_MATVEC_SPLIT and FAK_MATVEC_SPLIT_Q6; none on a CPU adapter unless named) holds fewer;
/// FAK_MATVEC_SHORT_LAYOUT's layout where its rule
/// takes the 37 rows — and every vector's outputs at every batch are that layout's wide twin's
/// batch-1 bits ([`BitsCase::assert_bits_kept`]), on Q4_K and Q6_K. Each candidate form's bits
/// against its wide twin:
/// the form tests (`check_form`), with the pipelines their cases build.
#[test]
fn a_rows_bits_do_not_depend_on_the_batch_or_the_form() {
    let ctx = gpu();
    let paths = variants::<MatVec>(ctx)
        .into_iter()
        .find(|p| p.int_dot)
        .expect("an int-dot variant");
    let kernel = MatVec::new(ctx, paths).unwrap();
    let quantizer = quantizer(ctx, &kernel);
    let short = ShortRows::from_env().unwrap();
    for (k, ty) in [GgmlType::Q4_K, GgmlType::Q6_K].into_iter().enumerate() {
        let case = BitsCase::new(ctx, ty, 0x3a7e_c000 + k as u64);
        // The engine's layout: the integer path's, or FAK_MATVEC_SHORT_LAYOUT's where its rule
        // takes these rows.
        let wide = short
            .and_then(|s| s.layout_of(BITS_ROWS, case.cols))
            .unwrap_or(MatVecLayout::INTEGER)
            .widened();
        let layouts = rule_layouts(ctx, &kernel, &case.w, ty, (BITS_ROWS, case.cols));
        let one = match MatVec::batches_vectors() {
            true => wide.batched_form(),
            false => wide,
        };
        let split = MatVec::splits_vectors_of(ty, BITS_ROWS, ctx.facts()).unwrap();
        let more = |capacity: u32| match one.batched && split > 0 && capacity > split {
            true => wide.split_by(split),
            false => one,
        };
        assert_eq!(layouts, [one, more(2), more(4), more(8)], "{ty} {paths}");
        let alone = case.alone(ctx, &wide_twin(ctx, paths, wide), &quantizer);
        let what = format!("{ty} {paths}: the engine's rule");
        case.assert_bits_kept(ctx, &kernel, &quantizer, &alone, &what);
    }
}

/// Rows of the bits checks' weights: the last workgroup's teams past the end.
const BITS_ROWS: u64 = 37;

/// A weight and its vectors for the bits checks: Q4_K or Q6_K, [`BITS_ROWS`] rows of columns
/// that take several ragged team passes, with 16 bytes of room behind W; [`MAX_BATCH`] vectors.
struct BitsCase {
    ty: GgmlType,
    cols: u64,
    w: wgpu::Buffer,
    x: Vec<f32>,
}

impl BitsCase {
    fn new(ctx: &GpuContext, ty: GgmlType, seed: u64) -> Self {
        let cols = col_counts(ty)[2];
        let mut bytes = random_weights(ty, BITS_ROWS, cols, seed);
        bytes.extend_from_slice(&[0; 16]);
        let w = weights_buffer_at(ctx, &bytes, 0);
        let x = random_f32(&mut rng(seed), u64::from(MAX_BATCH) * cols);
        BitsCase { ty, cols, w, x }
    }

    /// The output bits of `kernel` for the vectors `order` (by index) in one step,
    /// vector-major.
    fn bits(
        &self,
        ctx: &GpuContext,
        kernel: &MatVec,
        quantizer: &QuantizeQ8,
        order: &[usize],
    ) -> Vec<u32> {
        let cols = self.cols as usize;
        let xs: Vec<f32> = (order.iter())
            .flat_map(|&v| self.x[v * cols..][..cols].to_vec())
            .collect();
        let n = order.len() as u32;
        let shape = (BITS_ROWS, self.cols);
        product_bits(ctx, kernel, quantizer, &self.w, self.ty, shape, &xs, n)
    }

    /// Each vector's outputs alone (batch 1 of `reference`, a wide kernel): the bits to keep.
    fn alone(&self, ctx: &GpuContext, reference: &MatVec, quantizer: &QuantizeQ8) -> Vec<Vec<u32>> {
        (0..MAX_BATCH as usize)
            .map(|v| self.bits(ctx, reference, quantizer, &[v]))
            .collect()
    }

    /// Every vector's outputs in `kernel` at batches of 1 (each vector), 3 (vectors 5, 2, 7), 5
    /// (a split of 2 vectors a workgroup leaves one workgroup none) and 8 (all, reversed) are
    /// its bits in `alone`: any form may replace the wide one at any batch.
    fn assert_bits_kept(
        &self,
        ctx: &GpuContext,
        kernel: &MatVec,
        quantizer: &QuantizeQ8,
        alone: &[Vec<u32>],
        what: &str,
    ) {
        let (batch, rows) = (MAX_BATCH as usize, BITS_ROWS as usize);
        let orders = (0..batch).map(|v| vec![v]).chain([
            vec![5, 2, 7],
            vec![6, 1, 4, 0, 3],
            (0..batch).rev().collect(),
        ]);
        for order in orders {
            let y = self.bits(ctx, kernel, quantizer, &order);
            for (slot, &v) in order.iter().enumerate() {
                assert_eq!(
                    y[slot * rows..][..rows],
                    alone[v][..],
                    "{what}: vector {v} at slot {slot} of a batch of {} differs from its wide \
                     batch-1 bits",
                    order.len()
                );
            }
        }
    }
}

/// `form`'s wide twin on `paths` (its layout neither batched nor split), one per test
/// binary: the form tests and the engine's rule take their bits from it, and each of its
/// pipelines costs seconds on lavapipe.
fn wide_twin(ctx: &GpuContext, paths: KernelPaths, form: MatVecLayout) -> Arc<MatVec> {
    type Twins = Mutex<HashMap<(KernelPaths, MatVecLayout), Arc<MatVec>>>;
    static TWINS: LazyLock<Twins> = LazyLock::new(Twins::default);
    let twin = MatVecLayout {
        batched: false,
        split: 0,
        ..form
    };
    let mut twins = TWINS.lock().unwrap_or_else(|e| e.into_inner());
    let built = || Arc::new(MatVec::with_layout(ctx, paths, twin).unwrap());
    twins.entry((paths, twin)).or_insert_with(built).clone()
}

/// The layouts `kernel` runs a q8 binding of W in at batches 1, 2, 4 and 8.
fn rule_layouts(
    ctx: &GpuContext,
    kernel: &MatVec,
    w: &wgpu::Buffer,
    ty: GgmlType,
    (rows, cols): (u64, u64),
) -> Vec<MatVecLayout> {
    let (step, batch) = (StepBuffer::new(ctx), MAX_BATCH);
    let x = poisoned_f32(ctx, "x", u64::from(batch) * cols);
    let y = poisoned_f32(ctx, "y", u64::from(batch) * rows);
    let x_q8 = Q8Vectors::new(ctx, "x", cols, batch).unwrap();
    let shape = MatVecShape { ty, rows, cols };
    let io = MatVecIo::contiguous(shape, w, &x, &y, &step, false, batch);
    let fusion = MatVecFusion {
        q8: Some(&x_q8),
        ..MatVecFusion::default()
    };
    let binding = kernel.bind_fused(ctx, shape, &io, fusion).unwrap();
    [1, 2, 4, 8].map(|n| binding.layout(n)).to_vec()
}

/// The output bits (vector-major, `n·rows` words) of `kernel` on the integer path for the first
/// `n` vectors of `x` (`n·cols` values), y poisoned first.
#[allow(clippy::too_many_arguments)]
fn product_bits(
    ctx: &GpuContext,
    kernel: &MatVec,
    quantizer: &QuantizeQ8,
    w: &wgpu::Buffer,
    ty: GgmlType,
    (rows, cols): (u64, u64),
    x: &[f32],
    n: u32,
) -> Vec<u32> {
    let step = StepBuffer::new(ctx);
    step.set(ctx, Step::new(0, n, 0));
    let x = upload(ctx, "x", bytemuck::cast_slice(x)).unwrap();
    let y = poisoned_f32(ctx, "y", u64::from(n) * rows);
    let x_q8 = Q8Vectors::new(ctx, "x", cols, n).unwrap();
    let io = MatVecIo::contiguous(MatVecShape { ty, rows, cols }, w, &x, &y, &step, false, n);
    let quantize = quantizer
        .bind(ctx, io.x, cols, None, &x_q8, &step, n)
        .unwrap();
    let fusion = MatVecFusion {
        q8: Some(&x_q8),
        ..MatVecFusion::default()
    };
    let binding = kernel
        .bind_fused(ctx, MatVecShape { ty, rows, cols }, &io, fusion)
        .unwrap();
    ctx.run_pass("matvec bits", |pass| {
        quantizer.encode(pass, &quantize, n).unwrap();
        kernel.encode(pass, &binding, n).unwrap();
    })
    .unwrap();
    let y = read_back_f32(ctx, &y, 0..4 * u64::from(n) * rows).unwrap();
    y.iter().map(|v| v.to_bits()).collect()
}

/// A gate/up pairing that also writes its outputs as q8 blocks (the integer ffn_down's input,
/// which then needs no quantize dispatch), in every candidate layout of 16 teams, on every
/// variant (those of two units in flight on one), from f32 and from q8 inputs, for every batch: its codes and scales are what
/// quantize_q8 makes of the f32 outputs it wrote, bit for bit; vectors past the step's batch keep
/// their poison. (The f32 outputs themselves are held to the oracle by the layout test above.)
#[test]
fn a_gate_up_pairing_quantizes_its_outputs_as_quantize_q8_does() {
    let ctx = gpu();
    // Two workgroups of 32 outputs.
    let (rows, cols) = (64, 768);
    let batch = u64::from(MAX_BATCH);
    let mut rng = rng(0x3a7e_9000);
    let bytes = random_weights(GgmlType::Q4_K, 2 * rows, cols, 0x3a7e_9001);
    let w = weights_buffer_at(ctx, &bytes, WEIGHTS_OFFSET);
    let x = random_f32(&mut rng, batch * cols);
    let x = upload(ctx, "x", bytemuck::cast_slice(&x)).unwrap();
    let x = Activations::contiguous(&x, cols);
    let shape = MatVecShape {
        ty: GgmlType::Q4_K,
        rows,
        cols,
    };
    let quantizing = MatVecLayout::CANDIDATES
        .into_iter()
        .chain(MatVecLayout::WIDE_CANDIDATES)
        .chain(MatVecLayout::BATCHED_CANDIDATES)
        .chain(MatVecLayout::SPLIT_CANDIDATES)
        .filter(|l| l.teams == MatVecLayout::QUANTIZING_TEAMS);
    for layout in quantizing {
        // A wide layout on f32 inputs is the narrow one, checked already; a layout of two units
        // in flight writes through the one-unit layouts' epilogue (each reduction checked
        // there): on the first variant it serves.
        let paths = variants::<MatVec>(ctx)
            .into_iter()
            .filter(|p| p.int_dot || !layout.wide);
        for paths in paths.take(if layout.unroll > 1 { 1 } else { usize::MAX }) {
            let kernel = MatVec::with_layout(ctx, paths, layout).unwrap();
            let quantizer = quantizer(ctx, &kernel);
            let x_q8 = Q8Vectors::new(ctx, "x", cols, MAX_BATCH).unwrap();
            for n in BATCHES {
                let step = StepBuffer::new(ctx);
                step.set(ctx, Step::new(0, n, 0));
                let y = poisoned_f32(ctx, "y", batch * rows);
                let (out, again) = (
                    poisoned_q8(ctx, rows, MAX_BATCH),
                    poisoned_q8(ctx, rows, MAX_BATCH),
                );
                let quantize_x = quantizer
                    .bind(ctx, x, cols, None, &x_q8, &step, MAX_BATCH)
                    .unwrap();
                let io = MatVecIo {
                    weights: &w,
                    weights_offset: WEIGHTS_OFFSET,
                    x,
                    y: Activations::contiguous(&y, rows),
                    step: &step,
                    accumulate: false,
                    max_batch: MAX_BATCH,
                };
                let fusion = MatVecFusion {
                    swiglu: true,
                    q8: paths.int_dot.then_some(&x_q8),
                    quantize_output: Some(&out),
                    ..MatVecFusion::default()
                };
                let binding = kernel.bind_fused(ctx, shape, &io, fusion).unwrap();
                let y_act = Activations::contiguous(&y, rows);
                let requantize = quantizer
                    .bind(ctx, y_act, rows, None, &again, &step, MAX_BATCH)
                    .unwrap();
                ctx.run_pass("quantized gate/up output", |pass| {
                    if paths.int_dot {
                        quantizer.encode(pass, &quantize_x, n).unwrap();
                    }
                    kernel.encode(pass, &binding, n).unwrap();
                    quantizer.encode(pass, &requantize, n).unwrap();
                })
                .unwrap();
                let what = format!("{layout} {paths} batch {n}");
                assert_eq!(
                    out.read_back(ctx, rows, n).unwrap(),
                    again.read_back(ctx, rows, n).unwrap(),
                    "{what}: the quantized output differs from quantize_q8 of y"
                );
                let n = u64::from(n);
                let codes = read_back(ctx, &out.codes, n * rows..batch * rows).unwrap();
                let scales =
                    read_back(ctx, &out.scales, 4 * n * rows / 32..4 * batch * rows / 32).unwrap();
                assert!(
                    codes.iter().all(|&c| c == 0x7f)
                        && bytemuck::pod_collect_to_vec::<u8, f32>(&scales)
                            .iter()
                            .all(|s| s.is_nan()),
                    "{what}: wrote q8 vectors past the step's batch"
                );
            }
        }
    }
}

/// The split rule by type and rows (`MatVec::splits_vectors_of`) where neither FAK_MATVEC_SPLIT
/// nor FAK_MATVEC_SPLIT_Q6 is set: on a GPU Q6_K weights of `SPLIT_Q6_MIN_ROWS` rows or more take
/// `DEFAULT_SPLIT_Q6` (4) vectors a workgroup, shorter ones and other types `DEFAULT_SPLIT` (2);
/// on a CPU adapter (lavapipe) none splits. (With either variable set the rule follows it:
/// nothing to assert about the defaults then.)
#[test]
fn tall_q6_k_weights_split_four_vectors_a_workgroup_on_a_gpu_and_none_on_a_cpu() {
    let named = ["FAK_MATVEC_SPLIT", "FAK_MATVEC_SPLIT_Q6"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|t| !t.trim().is_empty()));
    if named {
        return;
    }
    let mut facts = gpu().facts().clone();
    for (device_type, q6, other) in [
        ("discrete", MatVec::DEFAULT_SPLIT_Q6, MatVec::DEFAULT_SPLIT),
        (
            "integrated",
            MatVec::DEFAULT_SPLIT_Q6,
            MatVec::DEFAULT_SPLIT,
        ),
        ("cpu", 0, 0),
    ] {
        facts.device_type = device_type.to_string();
        let split = |ty, rows| MatVec::splits_vectors_of(ty, rows, &facts).unwrap();
        let tall = MatVec::SPLIT_Q6_MIN_ROWS;
        assert_eq!(split(GgmlType::Q6_K, tall), q6, "{device_type} Q6_K");
        assert_eq!(split(GgmlType::Q6_K, 248320), q6, "{device_type} Q6_K head");
        assert_eq!(
            split(GgmlType::Q6_K, tall - 1),
            other,
            "{device_type} short Q6_K"
        );
        assert_eq!(split(GgmlType::Q4_K, tall), other, "{device_type} Q4_K");
        assert_eq!(
            split(GgmlType::Q4_K, 1024),
            other,
            "{device_type} short Q4_K"
        );
    }
    assert_eq!((MatVec::DEFAULT_SPLIT_Q6, MatVec::DEFAULT_SPLIT), (4, 2));
    assert_eq!(MatVec::SPLIT_Q6_MIN_ROWS, 4096);
}

#[test]
fn layouts_the_kernel_was_not_written_for_are_refused() {
    for bad in [
        "64/1/3",
        "48/1/1",
        "512/1/1",
        "64/32/1",
        "64/3/1",
        "64/1",
        "x",
        "64/1/1/narrow",
        "wide",
        "64/1/wide",
        // The staged form, measured slower and removed.
        "64/1/1/staged",
        "batched",
        "64/1/batched",
        "split4",
        "64/1/split4",
        "64/1/1/split3",
        "64/1/1/split8",
        "64/1/1/split0",
        "64/1/1/split4/batched",
    ] {
        assert!(
            MatVecLayout::parse(bad).is_err(),
            "FAK_MATVEC_LAYOUT={bad} was accepted"
        );
    }
    for layout in MatVecLayout::CANDIDATES
        .into_iter()
        .chain(MatVecLayout::WIDE_CANDIDATES)
        .chain(MatVecLayout::BATCHED_CANDIDATES)
        .chain(MatVecLayout::SPLIT_CANDIDATES)
    {
        assert_eq!(MatVecLayout::parse(&layout.to_string()).unwrap(), layout);
    }
    // The short-row rule: rows of 4097–8192 columns, at least min_rows of them (the 27B's GDN
    // q/k/v and head take it, its ffn_down and attn_v do not, nor the 8B's 4096-column rows).
    let short = ShortRows {
        layout: MatVecLayout::QUANTIZING,
        min_rows: ShortRows::MIN_ROWS,
        min_cols: ShortRows::MIN_COLS,
    };
    for (rows, cols, takes) in [
        (10240, 5120, true),
        (248_320, 5120, true),
        (5120, 6144, true),
        (5120, 17408, false),
        (24576, 4096, false),
        (1024, 5120, false),
    ] {
        let expected = takes.then_some(MatVecLayout::QUANTIZING);
        assert_eq!(short.layout_of(rows, cols), expected, "{rows} x {cols}");
    }
    // FAK_MATVEC_SHORT_MIN_COLS=4096 takes the 8B's rows too, and no shorter ones.
    let to_4096 = ShortRows {
        min_cols: 4096,
        ..short
    };
    assert_eq!(
        to_4096.layout_of(24576, 4096),
        Some(MatVecLayout::QUANTIZING)
    );
    assert_eq!(to_4096.layout_of(24576, 4095), None);
}

#[test]
fn rows_split_across_small_bindings_start_at_any_byte_offset() {
    let ctx = gpu();
    // Q6_K rows of 5 blocks are 1050 bytes: every other row starts 2 bytes into a word, and the
    // ranges of a 64 KiB binding (62 rows each) start mid-window; on both paths.
    let (ty, rows, cols) = (GgmlType::Q6_K, 257, 1280);
    let bytes = random_weights(ty, rows, cols, 0x3a7e_1001);
    for paths in variants::<MatVec>(ctx) {
        let kernel = MatVec::new(ctx, paths).unwrap();
        let quantizer = quantizer(ctx, &kernel);
        let path = match paths.int_dot {
            true => Path::Q8(&quantizer),
            false => Path::F32,
        };
        assert_all(check_tensor(
            ctx,
            &kernel,
            path,
            ty,
            (rows, cols),
            &bytes,
            WEIGHTS_OFFSET,
            64 << 10,
            0x3a7e_1002,
        ));
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
    let oracle = expected(ty, &bytes, (rows, cols), &x, None, batch);
    let kernel = MatVec::new(ctx, KernelPaths::FALLBACK).unwrap();

    let w = weights_buffer_at(ctx, &bytes, WEIGHTS_OFFSET);
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
    let mut recorded = None;
    ctx.run_pass("matvec split", |pass| {
        recorded = Some(kernel.encode(pass, &binding, batch).unwrap());
    })
    .unwrap();
    // What the encode says it did: a dispatch per range, W read once, x read and y written per
    // vector, 2·rows·cols FLOPs per vector.
    let recorded = recorded.unwrap();
    let n = u64::from(batch);
    assert_eq!(recorded.dispatches, grids.len());
    assert_eq!(recorded.bytes.weights, bytes.len() as u64);
    assert_eq!(recorded.bytes.activations, 4 * n * (cols + rows));
    assert_eq!(recorded.bytes.flops, 2 * n * rows * cols);
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

#[test]
fn a_folded_norm_and_a_gate_up_pairing_match_the_unfused_math_on_every_x_layout() {
    let ctx = gpu();
    let mut seed = 0x3a7e_5000;
    // One type per way load_xs pairs x with codes (the only code the fusions touch besides the
    // prologue and the epilogue, which no type changes), and each unquantized type (its own
    // unit loads): each NORM type costs four pipeline builds, seconds each on lavapipe.
    // Every type on the last variant (subgroup reduction where the device has it); on the
    // others one unquantized and one block type: the fusions' epilogue is the same for all.
    let kernels = kernels(ctx, false);
    for (k, kernel) in kernels.iter().enumerate() {
        let types: &[GgmlType] = match k + 1 == kernels.len() {
            true => &[
                GgmlType::F32,
                GgmlType::F16,
                GgmlType::BF16,
                GgmlType::Q8_0,
                GgmlType::Q5_1,
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
            ],
            false => &[GgmlType::F16, GgmlType::Q4_K],
        };
        for &ty in types {
            for fusion in FUSIONS {
                seed += 1;
                // 7 rows: a ragged last workgroup of 4; 5 paired outputs: of 2.
                let rows = if fusion.1 { 5 } else { 7 };
                assert_all(check_fused(ctx, kernel, Path::F32, ty, rows, fusion, seed));
            }
        }
    }
}

/// The integer path's fusions: the norm folded into the quantization (QKV), with the gate/up
/// pairing and strided x (the MLP), the pairing alone; every int-dot variant and its types
/// (`integer_types`).
#[test]
fn the_integer_path_folds_the_norm_into_the_quantization_and_pairs_gate_and_up() {
    let ctx = gpu();
    let mut seed = 0x3a7e_7000;
    let kernels = kernels(ctx, true);
    let count = kernels.len();
    for (k, kernel) in kernels.into_iter().enumerate() {
        let quantizer = quantizer(ctx, &kernel);
        for &ty in integer_types(k, count) {
            for fusion in FUSIONS {
                seed += 1;
                let rows = if fusion.1 { 5 } else { 7 };
                let path = Path::Q8(&quantizer);
                assert_all(check_fused(ctx, &kernel, path, ty, rows, fusion, seed));
            }
        }
    }
}

/// The norm's q8 blocks (quantize_q8's NORM pipeline) against the CPU's RMSNorm(x)·nw in f64:
/// each block's scale within the norm's f32 rounding of max |v| / 127, each code's value within
/// half a step of v, no NaN (codes poisoned to −128, which no block writes, scales to NaN). Rows
/// of 2 blocks (most lanes idle), 4096 and 5120 (the 8B's and 27B's) and 32768 (16
/// workgroups a vector); one block all zero (d = 0); vectors of one batch normed each with its own sum. Both
/// reductions.
#[test]
fn the_normed_quantize_rounds_the_normed_row_as_the_cpu_does() {
    let ctx = gpu();
    let eps = 1e-6f32;
    let cases = [(64, 1), (4096, 3), (5120, 2), (32768, 1)];
    for paths in variants::<QuantizeQ8>(ctx) {
        let quantizer = QuantizeQ8::new(ctx, paths).unwrap();
        for (case, &(cols, n)) in cases.iter().enumerate() {
            let mut rng = rng(0x3a7e_d000 + case as u64);
            let mut x: Vec<f32> = (0..n)
                .flat_map(|b| {
                    random_f32(&mut rng, cols)
                        .into_iter()
                        .map(move |v| v * (0.25 + 2.0 * b as f32))
                })
                .collect();
            x[32..64].fill(0.0);
            let nw: Vec<f32> = random_f32(&mut rng, cols)
                .iter()
                .map(|v| 1.0 + v / 2.0)
                .collect();
            let xb = upload(ctx, "x", bytemuck::cast_slice(&x)).unwrap();
            let nwb = upload(ctx, "norm weight", bytemuck::cast_slice(&nw)).unwrap();
            let norm = InputNorm {
                weight: &nwb,
                eps,
                shared: false,
            };
            let step = StepBuffer::new(ctx);
            step.set(ctx, Step::new(0, n, 0));
            let out = Q8Vectors::new(ctx, "normed", cols, n).unwrap();
            fak::gpu::buffers::write(ctx, &out.codes, 0, &vec![0x80; out.codes.size() as usize])
                .unwrap();
            let nan = vec![f32::NAN; out.scales.size() as usize / 4];
            fak::gpu::buffers::write(ctx, &out.scales, 0, bytemuck::cast_slice(&nan)).unwrap();
            let input = Activations::contiguous(&xb, cols);
            let binding = quantizer
                .bind(ctx, input, cols, Some(norm), &out, &step, n)
                .unwrap();
            ctx.run_pass("quantize_q8", |pass| {
                quantizer.encode(pass, &binding, n).unwrap();
            })
            .unwrap();
            let got = out.read_back(ctx, cols, n).unwrap();
            for b in 0..n as usize {
                let row = &x[b * cols as usize..(b + 1) * cols as usize];
                let squares: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                let s = 1.0 / (squares / cols as f64 + f64::from(eps)).sqrt();
                let v: Vec<f64> = row
                    .iter()
                    .zip(&nw)
                    .map(|(&x, &w)| f64::from(x) * s * f64::from(w))
                    .collect();
                let (codes, scales) = &got[b];
                let what = format!("({paths}) cols {cols} vector {b}");
                for (k, block) in v.chunks(32).enumerate() {
                    let amax = block.iter().fold(0f64, |m, v| m.max(v.abs()));
                    let d = f64::from(scales[k]);
                    // The norm's f32 rounding (x·s, ·w, the sum of squares), as the fused
                    // checks bound it; a NaN scale fails.
                    let d_ok = (d - amax / 127.0).abs() <= (1e-5 + 2f64.powi(-21)) * amax / 127.0;
                    assert!(d_ok, "{what}: block {k} scale {d} for max |v| {amax}");
                    for (i, &want) in block.iter().enumerate() {
                        let q = codes[32 * k + i];
                        let err = (f64::from(q) * d - want).abs();
                        let ok = q >= -127 && err <= d * (0.5 + 2f64.powi(-16)) + 1e-5 * want.abs();
                        assert!(
                            ok,
                            "{what}: element {} code {q} step {d} for {want}",
                            32 * k + i
                        );
                    }
                }
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
        swiglu: true,
        ..MatVecFusion::default()
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
            shared: false,
        }),
        ..MatVecFusion::default()
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

#[test]
fn integer_inputs_the_kernel_cannot_take_are_refused() {
    let ctx = gpu();
    let f32_only = MatVec::new(ctx, KernelPaths::FALLBACK).unwrap();
    let int_dot = MatVec::new(
        ctx,
        KernelPaths {
            int_dot: true,
            ..KernelPaths::FALLBACK
        },
    )
    .unwrap();
    let w = upload(ctx, "W", &[0u8; 8192]).unwrap();
    let x = poisoned_f32(ctx, "x", 512);
    let y = poisoned_f32(ctx, "y", 64);
    let nw = poisoned_f32(ctx, "norm weight", 256);
    let q8 = Q8Vectors::new(ctx, "x", 256, 1).unwrap();
    let step = StepBuffer::new(ctx);
    let io = MatVecIo {
        weights: &w,
        weights_offset: 0,
        x: Activations::contiguous(&x, 256),
        y: Activations::contiguous(&y, 8),
        step: &step,
        accumulate: false,
        max_batch: 1,
    };
    let shape = |ty| MatVecShape {
        ty,
        rows: 8,
        cols: 256,
    };
    let q8_input = MatVecFusion {
        q8: Some(&q8),
        ..MatVecFusion::default()
    };
    let shape_error = |r: Result<_, GpuError>| matches!(r, Err(GpuError::Shape { .. }));
    assert!(
        int_dot
            .bind_fused(ctx, shape(GgmlType::Q4_K), &io, q8_input)
            .is_ok()
    );
    // Not on an f32-only variant; not for a type the integer path lacks; not with a norm (it
    // belongs in the quantization); not for more vectors than the q8 buffers hold.
    assert!(shape_error(f32_only.bind_fused(
        ctx,
        shape(GgmlType::Q4_K),
        &io,
        q8_input
    )));
    assert!(matches!(
        int_dot.bind_fused(ctx, shape(GgmlType::Q4_0), &io, q8_input),
        Err(GpuError::UnsupportedType { .. })
    ));
    let with_norm = MatVecFusion {
        norm: Some(InputNorm {
            weight: &nw,
            eps: 1e-6,
            shared: false,
        }),
        ..q8_input
    };
    assert!(shape_error(int_dot.bind_fused(
        ctx,
        shape(GgmlType::Q4_K),
        &io,
        with_norm
    )));
    let two = MatVecIo { max_batch: 2, ..io };
    assert!(shape_error(int_dot.bind_fused(
        ctx,
        shape(GgmlType::Q4_K),
        &two,
        q8_input
    )));
    // The quantizer takes whole blocks of 32 only.
    assert!(Q8Vectors::new(ctx, "x", 100, 1).is_err());
    let quantizer = QuantizeQ8::new(ctx, KernelPaths::FALLBACK).unwrap();
    let x = Activations::contiguous(&x, 256);
    let refused = |r: Result<_, GpuError>| matches!(r, Err(GpuError::Shape { .. }));
    assert!(refused(quantizer.bind(ctx, x, 288, None, &q8, &step, 1)));
    assert!(refused(quantizer.bind(ctx, x, 256, None, &q8, &step, 2)));
}
