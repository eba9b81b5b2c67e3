//! `matmul`: the prefill mat-mul `Y[t, r] (+)= Σ_k W[r, k] · X[t, k]` for `t < n_tokens`, with W
//! a GGUF weight of any type the block decoders cover (wgsl/matmul*.wgsl).
//!
//! Variants ([`Matmul::variants`]):
//! - fallback: register-tiled, f32 tiles in workgroup memory (wgsl/matmul.wgsl);
//! - `subgroup+f16+coop16` (Vulkan) / `subgroup+f16+coop8` (Metal): cooperative-matrix tiles,
//!   f16 inputs and f32 accumulators, W dequantized to f16 in workgroup memory by all the
//!   workgroup's subgroups together (wgsl/matmul_coop.wgsl). Built where the context has the
//!   shape (`GpuContext::paths`: 16×16 by default, 8×8 with `FAK_COOP_MATRIX=1`). Its K loop
//!   (K step, register prefetch, ping-pong tiles, tiles per subgroup) is a [`CoopTiling`]:
//!   [`Matmul::new`] builds [`CoopTiling::DEFAULT`], [`Matmul::with_tiling`] any of
//!   [`CoopTiling::SWEEP`] (experiments/matmul-bench `--sweep` times them).
//!
//! There is no f16 variant without cooperative matrices: the register-tiled inner loop is bound
//! by FMAs, so f16 tiles would add conversions and save nothing that limits it
//! (experiments/matmul-tiles.md).
//!
//! Split-K (wgsl/matmul_split.wgsl): a product whose tiles would give fewer than
//! [`SplitK::target_workgroups`] workgroups is cut along K into slices, each summed by workgroups of
//! its own into the kernel's scratch of partial sums, then added into Y by `reduce_partials`. Both
//! variants split the same way, so the fallback's tests on lavapipe check the split path too.
//!
//! Use: `bind` once at load time per weight (it checks shapes and buffer sizes, splits a weight
//! larger than one binding into row ranges and builds their bind groups); `encode(pass, binding,
//! n_tokens)` per step records, per row range, the product (and its reduction where K is split
//! for that token count). The kernel reads `n_tokens` from the [`StepBuffer`], which the host sets
//! to the same value before submitting the step.

use crate::gpu::buffers::{Grid, Window, round_up, split_rows, storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl,
};
use crate::gpu::kernels::dequant::Dequant;
use crate::gpu::kernels::type_constants;
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, CoopShape, KernelPaths};
use crate::gpu::step::StepBuffer;
use crate::quant::GgmlType;

/// w, x, y, params, step, partials.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::ReadWrite,
];

/// When a product's K is split ([`Matmul::with_split`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SplitK {
    /// Products whose tiles give fewer workgroups than this are split along K (0: never).
    pub target_workgroups: u32,
    /// The fewest K steps (of 32) a slice keeps, so the partial sums stay a small share of the
    /// work.
    pub min_slice_steps: u32,
}

impl SplitK {
    /// Enough workgroups to give each SM of a large discrete GPU two (an H200 has 132; about two
    /// of the cooperative-matrix kernel's workgroups fit one), slices of at least 256 of K.
    pub const DEFAULT: SplitK = SplitK {
        target_workgroups: 256,
        min_slice_steps: 8,
    };
    /// K whole in every workgroup.
    pub const NEVER: SplitK = SplitK {
        target_workgroups: 0,
        min_slice_steps: 1,
    };

    /// How many slices of K a product of `workgroups` tiles over `cols` with `outputs` outputs
    /// runs in: enough to reach the target, each slice at least `min_slice_steps` K steps long,
    /// all partial sums inside the scratch.
    pub fn slices(&self, workgroups: u64, cols: u64, outputs: u64) -> u32 {
        let target = u64::from(self.target_workgroups);
        if workgroups == 0 || workgroups >= target {
            return 1;
        }
        let by_target = target.div_ceil(workgroups);
        let by_length = cols.div_ceil(u64::from(self.min_slice_steps.max(1)) * TILE_K);
        let by_scratch = PARTIALS_BYTES / 4 / outputs.max(1);
        by_target.min(by_length).min(by_scratch).max(1) as u32
    }
}

/// The K step split-K counts slices in (TILE_K of matmul.wgsl and of the default
/// [`CoopTiling`]; a tiling with K steps of 64 cuts the same slices into half as many steps).
const TILE_K: u64 = 32;
/// The scratch of partial sums every binding of one [`Matmul`] shares (one product runs at a
/// time): it caps S × n_tokens × rows.
const PARTIALS_BYTES: u64 = 32 << 20;
/// Invocations per workgroup of `reduce_partials` (its RW).
const REDUCE_WG: u64 = 256;

/// The smallest tile side of any variant: `bind` checks grid limits against it, so a binding
/// stays valid for every variant (they share the bind-group layout).
const MIN_TILE: u64 = 64;

/// `Params` of wgsl/matmul_load.wgsl, one per row range.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    w_byte: u32,
    row_bytes: u32,
    y_col: u32,
    y_stride: u32,
    accumulate: u32,
    pad: u32,
}

/// What a mat-mul does with Y.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MatmulOutput {
    /// `Y = W·X`.
    Store,
    /// `Y += W·X` (a residual add fused into the projection).
    Accumulate,
}

/// The product a [`MatmulBinding`] computes: W is `rows` rows of `cols` elements of type `ty`
/// (GGUF layout, `ne[0] = cols`), X is `[n_tokens, cols]` f32 and Y `[n_tokens, rows]` f32,
/// row-major and contiguous, for any `n_tokens` up to `max_tokens`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MatmulShape {
    pub ty: GgmlType,
    pub rows: u64,
    pub cols: u64,
    pub max_tokens: u32,
    pub output: MatmulOutput,
}

/// The buffers a mat-mul reads and writes, each bound from offset 0: the weight's bytes as
/// stored in the GGUF, X and Y sized for `max_tokens`, and the step uniform (`n_tokens`).
#[derive(Clone, Copy)]
pub struct MatmulBuffers<'a> {
    pub weights: &'a wgpu::Buffer,
    pub x: &'a wgpu::Buffer,
    pub y: &'a wgpu::Buffer,
    pub step: &'a StepBuffer,
}

/// The block of Y one workgroup computes: `tokens` × `rows`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tile {
    pub tokens: u32,
    pub rows: u32,
}

impl Tile {
    /// The tile of a variant; the WGSL consts `TILE_T` / `TILE_R` of its module say the same
    /// (tests/gpu_matmul.rs reads them back through naga). A cooperative-matrix workgroup is
    /// 8 × 8 shape tiles, in 4 × 2 subgroups of 2 × 4 tiles each by default or 2 × 2 subgroups of
    /// 4 × 4 ([`CoopTiling`]; wgsl/matmul_coop.wgsl says why this tiling).
    pub fn of(variant: KernelPaths) -> Tile {
        match variant.coop_matrix {
            None => Tile {
                tokens: 64,
                rows: 64,
            },
            Some(shape) => Self::of_coop(shape),
        }
    }

    fn of_coop(shape: CoopShape) -> Tile {
        Tile {
            tokens: 4 * 2 * shape.size(),
            rows: 2 * 4 * shape.size(),
        }
    }
}

/// The K loop of the cooperative-matrix kernel and its subgroups' blocks: the specialisation
/// consts of wgsl/matmul_coop.wgsl (its header says what each does). The workgroup tile stays
/// 128 × 128 (16×16) either way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CoopTiling {
    /// Elements of K per step (TILE_K): 32 or 64.
    pub k_step: u32,
    /// The next step's quads go through registers while this step's MMAs run (PREFETCH).
    pub prefetch: bool,
    /// Pairs of tiles in workgroup memory (BUFFERS): 1, or 2 for one barrier per K step.
    pub buffers: u32,
    /// Token tiles in one subgroup's block of WARP_TILES_T × 4 tiles (WARP_TILES_T): 2 (4 × 2
    /// subgroups) or 4 (2 × 2 subgroups, twice the MMAs per B fragment loaded).
    pub warp_tiles_t: u32,
}

impl CoopTiling {
    /// The engine's: `SWEEP[0]` (K steps of 32, register prefetch, one pair of tiles, 2 × 4
    /// tiles per subgroup) is the H200's best so far (experiments/NOTES.md, session #4 call 4
    /// and call 5's register double buffering); after a sweep, the winner's index goes here.
    pub const DEFAULT: CoopTiling = Self::SWEEP[0];

    /// What matmul-bench `--sweep` times and tests/gpu_matmul.rs checks; every one fits 48 KiB
    /// of workgroup memory (NVIDIA's Vulkan limit), so ping-pong tiles come with K steps of 32.
    pub const SWEEP: [CoopTiling; 10] = [
        Self::new(32, true, 1, 2),
        Self::new(32, false, 1, 2),
        Self::new(32, true, 2, 2),
        Self::new(32, false, 2, 2),
        Self::new(64, true, 1, 2),
        Self::new(64, false, 1, 2),
        Self::new(32, true, 1, 4),
        Self::new(32, false, 1, 4),
        Self::new(32, true, 2, 4),
        Self::new(32, false, 2, 4),
    ];

    const fn new(k_step: u32, prefetch: bool, buffers: u32, warp_tiles_t: u32) -> Self {
        CoopTiling {
            k_step,
            prefetch,
            buffers,
            warp_tiles_t,
        }
    }

    /// Bytes of workgroup memory the kernel declares with this tiling for `shape`: the f16 W and
    /// X tiles (rows of `k_step + 8` halves, per buffer) and one f32 staging tile per subgroup.
    pub fn workgroup_bytes(self, shape: CoopShape) -> u32 {
        let tile = Tile::of_coop(shape);
        let halves = self.buffers * (tile.rows + tile.tokens) * (self.k_step + 8);
        2 * halves + 4 * self.subgroups() * shape.size() * shape.size()
    }

    /// Subgroups per workgroup: the 8 × 8 tiles of the workgroup in blocks of WARP_TILES_T × 4.
    pub fn subgroups(self) -> u32 {
        64 / (self.warp_tiles_t * 4)
    }

    /// The WGSL consts it sets.
    fn consts(self) -> [(&'static str, u32); 4] {
        [
            ("TILE_K", self.k_step),
            ("PREFETCH", u32::from(self.prefetch)),
            ("BUFFERS", self.buffers),
            ("WARP_TILES_T", self.warp_tiles_t),
        ]
    }
}

impl std::fmt::Display for CoopTiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefetch = if self.prefetch { "prefetch" } else { "direct" };
        let (k, buffers, warp) = (self.k_step, self.buffers, self.warp_tiles_t);
        write!(f, "k{k}-{prefetch}-{buffers}buf-{warp}x4")
    }
}

/// The mat-mul kernel of one variant: one pipeline per supported type, the split-K reduction and
/// its scratch.
pub struct Matmul {
    variant: KernelPaths,
    /// The cooperative-matrix variant's K loop (None for the fallback).
    tiling: Option<CoopTiling>,
    layout: wgpu::BindGroupLayout,
    /// Parallel to [`Matmul::TYPES`].
    pipelines: Vec<wgpu::ComputePipeline>,
    reduce: wgpu::ComputePipeline,
    partials: wgpu::Buffer,
    split: SplitK,
}

/// The dispatches of one row range for one token count: the product's grid, cut into `splits`
/// slices of K (its z extent), and the reduction's grid when `splits > 1`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MatmulGrid {
    pub tiles: Grid,
    pub splits: u32,
    pub reduce: Option<Grid>,
}

impl MatmulGrid {
    /// The dispatches it records.
    pub fn dispatches(&self) -> usize {
        1 + usize::from(self.reduce.is_some())
    }
}

/// A weight bound for [`Matmul::encode`]: one bind group per row range that fits a binding.
pub struct MatmulBinding {
    ty: GgmlType,
    /// The input width (K).
    cols: u64,
    max_tokens: u32,
    /// (bind group, rows in the range), in row order.
    ranges: Vec<(wgpu::BindGroup, u64)>,
}

impl MatmulBinding {
    pub fn max_tokens(&self) -> u32 {
        self.max_tokens
    }

    /// How many row ranges (dispatches per encode) the weight was split into.
    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }
}

impl Kernel for Matmul {
    const NAME: &'static str = "matmul";
    const AXES: Axes = Axes {
        subgroup: true,
        f16: true,
        coop_matrix: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        Self::source_for(variant, CoopTiling::DEFAULT)
    }

    /// The fallback and the cooperative-matrix shapes; f16 and subgroups only come with the
    /// latter (its workgroups split into subgroups by `subgroup_id`).
    fn variants() -> Vec<KernelPaths> {
        Self::AXES
            .variants()
            .into_iter()
            .filter(|v| v.f16 == v.coop_matrix.is_some() && v.subgroup == v.f16)
            .collect()
    }

    /// A cooperative-matrix shape where `allowed` has one with subgroups, else the fallback.
    fn select(allowed: KernelPaths) -> KernelPaths {
        let fastest = Self::AXES.select(allowed);
        if fastest.coop_matrix.is_some() && fastest.subgroup {
            fastest
        } else {
            KernelPaths::FALLBACK
        }
    }
}

impl Matmul {
    /// The weight types this kernel multiplies: every type the block decoders cover.
    pub const TYPES: [GgmlType; 11] = Dequant::TYPES;

    /// The module and pipelines of `variant`, its cooperative-matrix K loop specialised as
    /// `tiling` says (the fallback ignores it).
    pub fn source_for(variant: KernelPaths, tiling: CoopTiling) -> KernelSource {
        let mut module = WgslModule::new(variant);
        if variant.coop_matrix.is_some() {
            for (name, value) in tiling.consts() {
                module = module.with_const(name, value);
            }
        }
        let module = module
            .with(wgsl::BYTES)
            .with(wgsl::BLOCKS)
            .with(wgsl::DEQUANT_TYPE)
            .with(wgsl::STEP);
        let module = match variant.coop_matrix {
            None => module.with(wgsl::MATMUL_LOAD).with(wgsl::MATMUL),
            Some(shape) => module
                .with(match shape {
                    CoopShape::M8x8 => wgsl::MATMUL_COOP8,
                    CoopShape::M16x16 => wgsl::MATMUL_COOP16,
                })
                .with(wgsl::MATMUL_LOAD)
                .with(wgsl::MATMUL_COOP),
        };
        let module = module.with(wgsl::MATMUL_SPLIT);
        let mut pipelines: Vec<_> = Self::TYPES
            .iter()
            .map(|&ty| PipelineSpec {
                label: match variant.coop_matrix {
                    None => format!("matmul {ty}"),
                    Some(_) => format!("matmul {ty} {tiling}"),
                },
                entry_point: "main",
                constants: type_constants(ty),
            })
            .collect();
        // The reduction reads no weight: any type's constants do.
        pipelines.push(PipelineSpec {
            label: "matmul reduce_partials".into(),
            entry_point: "reduce_partials",
            constants: type_constants(GgmlType::F32),
        });
        KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        }
    }

    /// Whether the variant `allowed` selects multiplies on cooperative matrices (X and W rounded
    /// to f16, as the CPU reference's `Activations::F16Tiles` rounds them).
    pub fn runs_on_matrix_units(allowed: KernelPaths) -> bool {
        Self::select(allowed).coop_matrix.is_some()
    }

    /// Builds the variant `paths` selects ([`Matmul::select`]).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        Self::with_tiling(ctx, paths, CoopTiling::DEFAULT)
    }

    /// [`Matmul::new`] with the cooperative-matrix K loop `tiling` (the fallback ignores it);
    /// refused where its workgroup memory exceeds the device's.
    pub fn with_tiling(
        ctx: &GpuContext,
        paths: KernelPaths,
        tiling: CoopTiling,
    ) -> Result<Self, GpuError> {
        let paths = Self::select(paths);
        if let Some(shape) = paths.coop_matrix {
            let limit = ctx.device.limits().max_compute_workgroup_storage_size;
            if tiling.workgroup_bytes(shape) > limit {
                return Err(GpuError::Shape {
                    kernel: Self::NAME,
                    message: format!("{tiling} needs more than {limit} bytes of workgroup memory"),
                });
            }
        }
        let variant = KernelVariant {
            kernel: Self::NAME,
            paths,
            source: Self::source_for(paths, tiling),
        };
        let mut built = build(ctx, &variant)?;
        let reduce = built
            .pipelines
            .pop()
            .expect("source() ends with reduce_partials");
        Ok(Matmul {
            variant: variant.paths,
            tiling: paths.coop_matrix.map(|_| tiling),
            layout: built.layout,
            pipelines: built.pipelines,
            reduce,
            partials: storage_buffer(ctx, "matmul partials", PARTIALS_BYTES)?,
            split: SplitK::DEFAULT,
        })
    }

    /// The same kernel splitting K by another rule, so tests can run the whole-K path and short
    /// slices on small shapes.
    pub fn with_split(mut self, split: SplitK) -> Self {
        self.split = split;
        self
    }

    /// The variant that was built.
    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cooperative-matrix K loop that was built (None for the fallback).
    pub fn tiling(&self) -> Option<CoopTiling> {
        self.tiling
    }

    /// The block of Y one workgroup of this variant computes.
    pub fn tile(&self) -> Tile {
        Tile::of(self.variant)
    }

    /// Binds a weight and its activations, splitting the weight's rows so that every binding
    /// fits the device. Checks the shape and every buffer size first.
    pub fn bind(
        &self,
        ctx: &GpuContext,
        shape: MatmulShape,
        buffers: MatmulBuffers<'_>,
    ) -> Result<MatmulBinding, GpuError> {
        self.bind_within(ctx, shape, buffers, ctx.max_binding_size())
    }

    /// [`Matmul::bind`] with weight bindings of at most `max_binding` bytes (at most the
    /// device's limit), so a test can split small weights the way a large one is split. X and
    /// Y are always bound whole and must fit the device's binding limit.
    pub fn bind_within(
        &self,
        ctx: &GpuContext,
        shape: MatmulShape,
        buffers: MatmulBuffers<'_>,
        max_binding: u64,
    ) -> Result<MatmulBinding, GpuError> {
        let MatmulShape {
            ty,
            rows,
            cols,
            max_tokens,
            output,
        } = shape;
        if !Self::TYPES.contains(&ty) {
            return Err(GpuError::UnsupportedType {
                kernel: Self::NAME,
                ty,
            });
        }
        let shape_error = |message: String| GpuError::Shape {
            kernel: Self::NAME,
            message,
        };
        if rows == 0 || cols == 0 || max_tokens == 0 {
            return Err(shape_error(format!(
                "an empty product: {rows} rows, {cols} columns, up to {max_tokens} tokens"
            )));
        }
        let row_bytes = ty.row_bytes(cols).ok_or_else(|| {
            shape_error(format!(
                "a row of {cols} elements is not a whole number of {ty} blocks of {}",
                ty.block_elems()
            ))
        })?;
        let tokens = u64::from(max_tokens);
        let device_binding = ctx.max_binding_size();
        let x_bytes = check_activation(device_binding, "X", tokens, cols)?;
        let y_bytes = check_activation(device_binding, "Y", tokens, rows)?;
        for (name, buffer, need) in [
            // The last row range's window is padded to whole words.
            (
                "weight",
                buffers.weights,
                rows.checked_mul(row_bytes).map(|b| round_up(b, 4)),
            ),
            ("X", buffers.x, Some(x_bytes)),
            ("Y", buffers.y, Some(y_bytes)),
        ] {
            match need {
                Some(need) if need <= buffer.size() => {}
                _ => {
                    return Err(shape_error(format!(
                        "{rows} rows × {cols} columns of {ty} for up to {max_tokens} tokens need more \
                         than the {} bytes of the {name} buffer",
                        buffer.size()
                    )));
                }
            }
        }
        let max_per_dimension = u64::from(ctx.device.limits().max_compute_workgroups_per_dimension);
        if tokens.div_ceil(MIN_TILE) > max_per_dimension
            || rows.div_ceil(MIN_TILE) > max_per_dimension
        {
            return Err(GpuError::TooLarge {
                what: format!(
                    "a mat-mul grid of {max_tokens} tokens × {rows} rows, in tiles of {MIN_TILE}"
                ),
                size: tokens.max(rows).div_ceil(MIN_TILE),
                limit: max_per_dimension,
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        let align = ctx.binding_alignment();
        let ranges = split_rows(
            &format!("a {ty} weight"),
            rows,
            &[row_bytes],
            max_binding.min(device_binding),
            align,
        )?;
        let x_window = Window::around(0, x_bytes, align);
        let y_window = Window::around(0, y_bytes, align);
        let ranges = ranges
            .into_iter()
            .map(|range| {
                let len = range.end - range.start;
                let w_window = Window::around(range.start * row_bytes, len * row_bytes, align);
                // Every value is below the 2 GiB binding cap checked above, so fits a u32.
                let params = Params {
                    rows: len as u32,
                    cols: cols as u32,
                    w_byte: w_window.skip as u32,
                    row_bytes: row_bytes as u32,
                    y_col: range.start as u32,
                    y_stride: rows as u32,
                    accumulate: u32::from(output == MatmulOutput::Accumulate),
                    pad: 0,
                };
                let params = uniform(ctx, "matmul params", &params);
                let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("matmul"),
                    layout: &self.layout,
                    entries: &[
                        entry(0, w_window.binding(buffers.weights)),
                        entry(1, x_window.binding(buffers.x)),
                        entry(2, y_window.binding(buffers.y)),
                        entry(3, params.as_entire_binding()),
                        entry(4, buffers.step.buffer.as_entire_binding()),
                        entry(5, self.partials.as_entire_binding()),
                    ],
                });
                (group, len)
            })
            .collect();
        Ok(MatmulBinding {
            ty,
            cols,
            max_tokens,
            ranges,
        })
    }

    /// What [`Matmul::encode`] dispatches for `n_tokens`, one entry per row range: their number
    /// depends only on the binding; their size, and whether K is split, on the token count.
    pub fn grids(&self, binding: &MatmulBinding, n_tokens: u32) -> Vec<MatmulGrid> {
        let tile = self.tile();
        binding
            .ranges
            .iter()
            .map(|&(_, rows)| {
                let tiles = Grid {
                    x: n_tokens.div_ceil(tile.tokens),
                    // bind() checked the grid against the limit, so this fits.
                    y: rows.div_ceil(u64::from(tile.rows)) as u32,
                };
                let workgroups = u64::from(tiles.x) * u64::from(tiles.y);
                let outputs = u64::from(n_tokens) * rows;
                let splits = self.split.slices(workgroups, binding.cols, outputs);
                let reduce = (splits > 1).then(|| Grid {
                    // At most PARTIALS_BYTES / 4 / REDUCE_WG workgroups: fits any limit.
                    x: outputs.div_ceil(REDUCE_WG * u64::from(splits)) as u32,
                    y: 1,
                });
                MatmulGrid {
                    tiles,
                    splits,
                    reduce,
                }
            })
            .collect()
    }

    /// Records the dispatches of `binding` for `n_tokens` tokens (which the step uniform must
    /// hold when the pass runs) into `pass`; returns how many it recorded.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &MatmulBinding,
        n_tokens: u32,
    ) -> Result<usize, GpuError> {
        if n_tokens > binding.max_tokens {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "{n_tokens} tokens, but the binding was sized for at most {}",
                    binding.max_tokens
                ),
            });
        }
        let index = Self::TYPES
            .iter()
            .position(|&t| t == binding.ty)
            .expect("bind() accepts only TYPES");
        let mut dispatches = 0;
        for ((group, _), grid) in binding.ranges.iter().zip(self.grids(binding, n_tokens)) {
            pass.set_pipeline(&self.pipelines[index]);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(grid.tiles.x, grid.tiles.y, grid.splits);
            if let Some(reduce) = grid.reduce {
                pass.set_pipeline(&self.reduce);
                pass.dispatch_workgroups(reduce.x, reduce.y, grid.splits);
            }
            dispatches += grid.dispatches();
        }
        Ok(dispatches)
    }
}

/// The bytes of a `[tokens, width]` f32 activation, which must fit one binding.
fn check_activation(
    max_binding: u64,
    name: &str,
    tokens: u64,
    width: u64,
) -> Result<u64, GpuError> {
    let bytes = tokens.saturating_mul(width).saturating_mul(4);
    if bytes > max_binding {
        return Err(GpuError::TooLarge {
            what: format!("mat-mul activation {name} of {tokens} × {width} f32 (bytes)"),
            size: bytes,
            limit: max_binding,
            limit_name: "max_storage_buffer_binding_size",
        });
    }
    Ok(bytes)
}

fn entry(binding: u32, resource: wgpu::BindingResource<'_>) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_comes_only_with_cooperative_matrices_and_every_selection_is_a_listed_variant() {
        let listed = Matmul::variants();
        assert_eq!(listed.len(), 3, "{listed:?}");
        assert!(
            listed
                .iter()
                .all(|v| v.f16 == v.coop_matrix.is_some() && v.subgroup == v.f16)
        );
        for subgroup in [false, true] {
            for f16 in [false, true] {
                for coop_matrix in [None, Some(CoopShape::M8x8), Some(CoopShape::M16x16)] {
                    let allowed = KernelPaths {
                        subgroup,
                        f16,
                        coop_matrix,
                        int_dot: false,
                    };
                    let chosen = Matmul::select(allowed);
                    assert!(listed.contains(&chosen), "{allowed} selects {chosen}");
                    assert_eq!(chosen.coop_matrix, coop_matrix.filter(|_| f16 && subgroup));
                }
            }
        }
    }

    /// The default rule on the shapes that need it (Qwen3.5-27B: hidden 5120, FFN 17408, 48
    /// β rows): ffn_down at 128 tokens has 40 tiles of 128 × 128 and is cut until it has about
    /// 256 workgroups; β is one tile, cut into slices of 256 of K; a product with enough tiles,
    /// or K too short to cut, stays whole; the scratch caps the slices of a wide product.
    #[test]
    fn few_tile_products_are_split_along_k_until_the_target() {
        let split = SplitK::DEFAULT;
        assert_eq!(split.slices(40, 17408, 128 * 5120), 7);
        assert_eq!(split.slices(1, 5120, 128 * 48), 20);
        assert_eq!(split.slices(1, 5120, 5 * 48), 20);
        assert_eq!(split.slices(16 * 40, 4096, 2048 * 5120), 1);
        assert_eq!(split.slices(1, 224, 128 * 48), 1);
        assert_eq!(split.slices(2, 65536, 128 * 32768), 2);
        assert_eq!(split.slices(0, 4096, 0), 1);
        assert_eq!(SplitK::NEVER.slices(1, 5120, 48), 1);
    }
}
