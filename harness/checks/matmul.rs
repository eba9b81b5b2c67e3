//! One prefill mat-mul product (wgsl/matmul*.wgsl) against dequantize-then-f64 on the CPU, each
//! output measured against its error scale: the GPU test (tests/gpu_matmul.rs) asserts it on
//! every type and shape, `harness selftest` reports a few (`report`).

use super::compare::{Bound, Output, Tolerance};
use super::poisoned_f32;
use fak::gpu::kernels::matmul::{Matmul, MatmulBinding, MatmulBuffers, MatmulOutput, MatmulShape};
use fak::gpu::{GpuContext, GpuError, KernelPaths, Step, StepBuffer, read_back_f32, upload, write};
use fak::quant::{GgmlType, dequantize, fill_random_rows};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// What every binding is sized for: more than one token tile of every tile of every variant
/// (the largest is 128), not a multiple of any.
pub const MAX_TOKENS: u32 = 150;

/// One product to check: W (GGUF bytes and their CPU dequantization), X for MAX_TOKENS tokens,
/// and the Y an accumulating mat-mul starts from.
pub struct Problem {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub w_bytes: Vec<u8>,
    pub w: Vec<f32>,
    pub x: Vec<f32>,
    pub y0: Vec<f32>,
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
    pub fn random(ty: GgmlType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Problem {
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

    pub fn shape(&self, output: MatmulOutput) -> MatmulShape {
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
pub fn allowed(variant: KernelPaths) -> f32 {
    if variant.coop_matrix.is_some() {
        2f32.powi(-8)
    } else {
        2f32.powi(-14)
    }
}

/// The GPU side of one product: buffers and a binding, reused for every token count.
pub struct Product<'p> {
    problem: &'p Problem,
    output: MatmulOutput,
    step: StepBuffer,
    y: wgpu::Buffer,
    pub binding: MatmulBinding,
    /// Kept alive for the binding.
    _w: wgpu::Buffer,
    _x: wgpu::Buffer,
}

impl<'p> Product<'p> {
    pub fn new(
        ctx: &GpuContext,
        kernel: &Matmul,
        problem: &'p Problem,
        output: MatmulOutput,
        max_binding: u64,
    ) -> Result<Product<'p>, GpuError> {
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
        Ok(Product {
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

    /// Runs the product for `n_tokens`: the first `n_tokens` rows of Y against the oracle, each
    /// output divided by its error scale; the rows past them must stay as they were.
    pub fn run(&self, ctx: &GpuContext, kernel: &Matmul, n_tokens: u32, what: &str) -> Output {
        let initial = self.initial_y();
        write(ctx, &self.y, 0, bytemuck::cast_slice(&initial)).unwrap();
        self.step.set(ctx, Step::new(0, n_tokens, 0));
        ctx.run_pass("matmul", |pass| {
            kernel.encode(pass, &self.binding, n_tokens).unwrap();
        })
        .unwrap();
        let got = read_back_f32(ctx, &self.y, 0..4 * initial.len() as u64).unwrap();
        let written = n_tokens as usize * self.problem.rows;
        let (want, scale) = self.problem.expected(n_tokens as usize, self.output);
        let normalise =
            |v: &[f32]| -> Vec<f32> { v.iter().zip(&scale).map(|(a, s)| a / s).collect() };
        let beyond = |v: &[f32]| v[written..].iter().map(|a| a.to_bits()).collect::<Vec<_>>();
        Output {
            part: "",
            what: format!("{what}, {n_tokens} tokens, {:?}", self.output),
            got: normalise(&got[..written]),
            want: normalise(&want),
            // rel: the f32 rounding of y0 + W·X when accumulating.
            bound: Bound::Within(Tolerance {
                rel: 2f32.powi(-20),
                abs: allowed(kernel.variant()),
            }),
            wrote_outside: beyond(&got) != beyond(&initial),
        }
    }
}
