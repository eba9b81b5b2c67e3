//! The prefill mat-mul (wgsl/matmul*.wgsl) against dequantize-then-f64 on the CPU: every type ×
//! every variant the device runs (cooperative-matrix ones too, where the adapter has them and
//! `FAK_COOP_MATRIX=1`) × n_tokens ∈ {1, 5, 17, 64, 70} × ragged rows and columns, with Y
//! stored and accumulated; weights split across bindings; the dispatch count of one mat-mul;
//! the tile geometry the host assumes against the WGSL; bad shapes.

use fak::gpu::kernels::matmul::{
    Matmul, MatmulBinding, MatmulBuffers, MatmulOutput, MatmulShape, Tile,
};
use fak::gpu::{
    GpuContext, GpuError, KernelPaths, KernelVariant, Step, StepBuffer, read_back_f32,
    storage_buffer, upload, write,
};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use fak_tests::{Tolerance, assert_close, gpu, poisoned_f32, rng, variants};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

const TOKEN_COUNTS: [u32; 5] = [1, 5, 17, 64, 70];
/// What every binding is sized for: more than one token tile of every variant, not a multiple of
/// any.
const MAX_TOKENS: u32 = 70;

/// One product to check: W (GGUF bytes and their CPU dequantization), X for MAX_TOKENS tokens,
/// and the Y an accumulating mat-mul starts from.
struct Problem {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    w_bytes: Vec<u8>,
    w: Vec<f32>,
    x: Vec<f32>,
    y0: Vec<f32>,
}

/// Byte offsets of the f16 scale fields inside one block (model-spec.md §2).
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// Random blocks (`fill_random_rows`: random codes, unit-variance values), then every block's
/// f16 scales multiplied by a random factor in ±[0.5, 2): blocks of one tensor otherwise share
/// their scales, and a kernel reading another block's scale would go unnoticed.
fn random_weights(ty: GgmlType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut bytes = vec![0u8; ty.row_bytes(cols as u64).unwrap() as usize * rows];
    fill_random_rows(ty, cols, rows, 1.0, rng.random(), &mut bytes).unwrap();
    let block_bytes = ty.block_bytes() as usize;
    for block in bytes.chunks_exact_mut(block_bytes) {
        for &at in scale_fields(ty) {
            let d = half::f16::from_le_bytes([block[at], block[at + 1]]).to_f32();
            let sign = if rng.random() { -1.0 } else { 1.0 };
            let scaled = d * sign * 2f32.powf(rng.random_range(-1.0..1.0));
            block[at..at + 2].copy_from_slice(&half::f16::from_f32(scaled).to_le_bytes());
        }
    }
    bytes
}

fn normals(n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..n).map(|_| StandardNormal.sample(rng)).collect()
}

impl Problem {
    fn random(ty: GgmlType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Problem {
        let w_bytes = random_weights(ty, rows, cols, rng);
        let w = dequantize(ty, &w_bytes, rows * cols).unwrap();
        let tokens = MAX_TOKENS as usize;
        Problem {
            ty,
            rows,
            cols,
            w_bytes,
            w,
            x: normals(tokens * cols, rng),
            y0: normals(tokens * rows, rng),
        }
    }

    fn shape(&self, output: MatmulOutput) -> MatmulShape {
        MatmulShape {
            ty: self.ty,
            rows: self.rows as u64,
            cols: self.cols as u64,
            max_tokens: MAX_TOKENS,
            output,
        }
    }

    /// The oracle for the first `n_tokens` rows of Y, and each output's error scale
    /// ‖W[r]‖·‖X[t]‖/√cols = √cols · rms(W[r]) · rms(X[t]): the size of a dot product of
    /// `cols` independent terms, and so of its rounding error. Dot products in f64.
    fn expected(&self, n_tokens: usize, output: MatmulOutput) -> (Vec<f32>, Vec<f32>) {
        let (rows, cols) = (self.rows, self.cols);
        let norm = |v: &[f32]| v.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
        let mut want = Vec::with_capacity(n_tokens * rows);
        let mut scale = Vec::with_capacity(n_tokens * rows);
        for t in 0..n_tokens {
            let x = &self.x[t * cols..(t + 1) * cols];
            for r in 0..rows {
                let w = &self.w[r * cols..(r + 1) * cols];
                let dot: f64 = w
                    .iter()
                    .zip(x)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                let base = match output {
                    MatmulOutput::Store => 0.0,
                    MatmulOutput::Accumulate => f64::from(self.y0[t * rows + r]),
                };
                want.push((base + dot) as f32);
                scale.push(((norm(w) * norm(x)) / (cols as f64).sqrt()).max(1e-30) as f32);
            }
        }
        (want, scale)
    }
}

/// The error allowed, as a fraction of an output's scale (see [`Problem::expected`]).
/// - f32 tiles: the dequantized weights equal the CPU's up to one fused multiply-add in an
///   affine decode (2^-18 of a group's largest value, tests/gpu_dequant.rs), and f32
///   accumulation over ≤ 512 terms adds ~2^-24·√cols; 2^-14 is ≥ 16× both. One weight off by a
///   single 4-bit step moves an output by ~1/(4√cols) of its scale, far outside.
/// - cooperative matrices: W and X are rounded to f16 (relative error ≤ 2^-11 each, products
///   and sums stay f32), so the sum is off by ~2^-11.3 of its scale (one standard deviation of
///   √cols independent roundings); 2^-8 is ~10 of those. (Measured with f16 tiles in the
///   register-tiled kernel on lavapipe: worst 2^-9.5 over every type and shape here.)
fn allowed(variant: KernelPaths) -> f32 {
    if variant.coop_matrix.is_some() {
        2f32.powi(-8)
    } else {
        2f32.powi(-14)
    }
}

/// The GPU side of one product: buffers and a binding, reused for every token count.
struct Bound<'p> {
    problem: &'p Problem,
    output: MatmulOutput,
    step: StepBuffer,
    y: wgpu::Buffer,
    binding: MatmulBinding,
    /// Kept alive for the binding.
    _w: wgpu::Buffer,
    _x: wgpu::Buffer,
}

impl<'p> Bound<'p> {
    fn new(
        ctx: &GpuContext,
        kernel: &Matmul,
        problem: &'p Problem,
        output: MatmulOutput,
        max_binding: u64,
    ) -> Result<Bound<'p>, GpuError> {
        let w = upload(ctx, "matmul w", &problem.w_bytes)?;
        let x = upload(ctx, "matmul x", bytemuck::cast_slice(&problem.x))?;
        let y = poisoned_f32(ctx, "matmul y", problem.y0.len() as u64);
        let step = StepBuffer::new(ctx);
        let buffers = MatmulBuffers {
            weights: &w,
            x: &x,
            y: &y,
            step: &step,
        };
        let binding = kernel.bind_within(ctx, problem.shape(output), buffers, max_binding)?;
        Ok(Bound {
            problem,
            output,
            step,
            y,
            binding,
            _w: w,
            _x: x,
        })
    }

    /// What Y holds before a run: NaN (so an output the kernel fails to write cannot pass), or
    /// y0 when accumulating.
    fn initial_y(&self) -> Vec<f32> {
        match self.output {
            MatmulOutput::Store => vec![f32::NAN; self.problem.y0.len()],
            MatmulOutput::Accumulate => self.problem.y0.clone(),
        }
    }

    /// Runs the product for `n_tokens` and checks all of Y: the first `n_tokens` rows against
    /// the oracle, the rest untouched.
    fn check(&self, ctx: &GpuContext, kernel: &Matmul, n_tokens: u32, what: &str) {
        let initial = self.initial_y();
        write(ctx, &self.y, 0, bytemuck::cast_slice(&initial)).unwrap();
        self.step.set(ctx, Step::new(0, n_tokens, 0));
        ctx.run_pass("matmul", |pass| {
            kernel.encode(pass, &self.binding, n_tokens).unwrap()
        })
        .unwrap();
        let got = read_back_f32(ctx, &self.y, 0..4 * initial.len() as u64).unwrap();
        let written = n_tokens as usize * self.problem.rows;
        let (want, scale) = self.problem.expected(n_tokens as usize, self.output);
        let normalise =
            |v: &[f32]| -> Vec<f32> { v.iter().zip(&scale).map(|(a, s)| a / s).collect() };
        // rel: the f32 rounding of y0 + W·X when accumulating.
        let tol = Tolerance {
            rel: 2f32.powi(-20),
            abs: allowed(kernel.variant()),
        };
        let what = format!("{what}, {n_tokens} tokens, {:?}", self.output);
        assert_close(&what, &normalise(&got[..written]), &normalise(&want), tol);
        let beyond = |v: &[f32]| v[written..].iter().map(|a| a.to_bits()).collect::<Vec<_>>();
        assert!(
            beyond(&got) == beyond(&initial),
            "{what}: Y rows past n_tokens were written"
        );
    }
}

/// (rows, cols) per type: rows below one tile and just past one; columns not a multiple of any
/// tile (F32/F16/BF16 rows end inside a K step and inside a quad), whole blocks otherwise.
fn shapes(ty: GgmlType) -> [(usize, usize); 2] {
    match ty.block_elems() {
        1 => [(37, 77), (70, 302)],
        32 => [(37, 96), (70, 160)],
        _ => [(37, 256), (70, 512)],
    }
}

#[test]
fn every_type_and_variant_matches_the_cpu_on_ragged_shapes_and_token_counts() {
    let ctx = gpu();
    let mut rng = rng(0x3a7_0001);
    for paths in variants::<Matmul>(ctx) {
        let kernel = Matmul::new(ctx, paths).unwrap();
        for ty in Matmul::TYPES {
            for (rows, cols) in shapes(ty) {
                let problem = Problem::random(ty, rows, cols, &mut rng);
                for output in [MatmulOutput::Store, MatmulOutput::Accumulate] {
                    let bound = Bound::new(ctx, &kernel, &problem, output, u64::MAX).unwrap();
                    for n_tokens in TOKEN_COUNTS {
                        let what = format!("{ty} {rows}x{cols} ({})", kernel.variant());
                        bound.check(ctx, &kernel, n_tokens, &what);
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
        let kernel = Matmul::new(ctx, paths).unwrap();
        for (ty, cols) in [(GgmlType::Q6_K, 256), (GgmlType::F16, 77)] {
            let problem = Problem::random(ty, 100, cols, &mut rng);
            let output = MatmulOutput::Accumulate;
            let bound = Bound::new(ctx, &kernel, &problem, output, SPLIT_BINDING).unwrap();
            let ranges = bound.binding.ranges();
            assert!(
                ranges >= 3,
                "{ty}: expected a split into row ranges, got {ranges}"
            );
            for n_tokens in [5, 70] {
                let what = format!("{ty} 100x{cols} split {ranges} ways ({})", kernel.variant());
                bound.check(ctx, &kernel, n_tokens, &what);
            }
        }
    }
}

#[test]
fn one_matmul_dispatches_once_per_row_range_whatever_the_token_count() {
    let ctx = gpu();
    let problem = Problem::random(GgmlType::Q6_K, 100, 256, &mut rng(0x3a7_0003));
    for paths in variants::<Matmul>(ctx) {
        let kernel = Matmul::new(ctx, paths).unwrap();
        let tile = kernel.tile();
        for max_binding in [u64::MAX, SPLIT_BINDING] {
            let bound =
                Bound::new(ctx, &kernel, &problem, MatmulOutput::Store, max_binding).unwrap();
            let ranges = bound.binding.ranges();
            let rows_grid: Vec<u32> = kernel
                .grids(&bound.binding, 1)
                .iter()
                .map(|g| g.y)
                .collect();
            for n_tokens in 0..=MAX_TOKENS {
                let grids = kernel.grids(&bound.binding, n_tokens);
                assert_eq!(grids.len(), ranges, "{n_tokens} tokens ({paths})");
                for (grid, &rows) in grids.iter().zip(&rows_grid) {
                    assert_eq!(grid.x, n_tokens.div_ceil(tile.tokens), "{n_tokens} tokens");
                    assert_eq!(grid.y, rows, "{n_tokens} tokens: the row grid moved");
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
        let text = variant.source.module.text();
        let module = naga::front::wgsl::parse_str(&text)
            .map_err(|e| e.emit_to_string(&text))
            .unwrap();
        let constant = |name: &str| -> u32 {
            let (_, c) = module
                .constants
                .iter()
                .find(|(_, c)| c.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("{name} in matmul ({})", variant.paths));
            match module.global_expressions[c.init] {
                naga::Expression::Literal(naga::Literal::U32(v)) => v,
                ref other => panic!("{name} is {other:?}, not a u32 literal"),
            }
        };
        let tile = Tile::of(variant.paths);
        assert_eq!(
            (constant("TILE_T"), constant("TILE_R")),
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
