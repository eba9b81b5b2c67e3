//! `matmul`: the prefill mat-mul `Y[t, r] (+)= Σ_k W[r, k] · X[t, k]` for `t < n_tokens`, with W
//! a GGUF weight of any type the block decoders cover (wgsl/matmul*.wgsl).
//!
//! Variants ([`Matmul::variants`]):
//! - fallback: register-tiled, f32 tiles in workgroup memory (wgsl/matmul.wgsl);
//! - `subgroup+f16+coop16` (Vulkan) / `subgroup+f16+coop8` (Metal): cooperative-matrix tiles,
//!   f16 inputs and f32 accumulators, W dequantized to f16 in workgroup memory by all the
//!   workgroup's subgroups together. Built where the context has the shape
//!   (`GpuContext::paths`: 16×16 by default, 8×8 with `FAK_COOP_MATRIX=1`). Two kernels, each
//!   specialised by consts ([`CoopKernel`]): the staged one (wgsl/matmul_coop.wgsl: X converted
//!   per tile, its K loop a [`CoopTiling`]) and the x16 one (wgsl/matmul_x16.wgsl: X converted to
//!   f16 once per product by its `to_f16` entry point into a scratch the kernel owns, 16-byte
//!   Q4_K loads, the next step's loads in flight during the MMAs, direct stores; its workgroup
//!   tile and K loop an [`X16Tiling`]). [`Matmul::new`] builds [`CoopKernel::for_shape`] (the
//!   rule per adapter; `FAK_MATMUL_TILING` names another of [`CoopKernel::SWEEP`] for a
//!   measurement), [`Matmul::with_tiling`] any of the sweep (experiments/matmul-bench `--sweep`
//!   times them).
//!
//! There is no f16 variant without cooperative matrices: the register-tiled inner loop is bound
//! by FMAs, so f16 tiles would add conversions and save nothing that limits it
//! (experiments/matmul-tiles.md).
//!
//! Split-K (wgsl/matmul_split.wgsl): K is summed in slices fixed by the weight's shape
//! ([`SplitK::weight_slices`]), added in order. A product whose tiles would give fewer than
//! [`SplitGrid::DEFAULT`]'s waves gives each slice workgroups of its own, writing into
//! the kernel's scratch of partial sums that `reduce_partials` then adds into Y; otherwise each
//! workgroup sums the slices itself, one after another. Both forms add the same sums in the same
//! order, so an output does not depend on how many tokens share the step (the register-tiled and
//! x16 kernels; the staged coop kernel sums K whole when it does not split). The fallback's
//! tests on lavapipe check both forms. Which steps split across workgroups is a [`SplitGrid`]
//! (`FAK_MATMUL_SPLIT` names another rule than the engine's for a measurement; every rule
//! computes the same bits).
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
use crate::gpu::kernels::rms_norm;
use crate::gpu::kernels::type_constants;
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, CoopShape, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::StepBuffer;
use crate::quant::GgmlType;
use std::sync::Mutex;

/// w, x, y, params, step, partials.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::ReadWrite,
];
/// The x16 kernel's: those, then x16 (X rounded to f16) and the prefill norm fold's weight.
const SLOTS_X16: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Read,
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

    /// The slices of K a weight of `rows` × `cols` is summed in, the same at every token count:
    /// [`SplitK::slices`] for one token tile of 128 (the most a short prompt needs), without
    /// the scratch's cap (a step whose partial sums would not fit sums its slices in place).
    pub fn weight_slices(&self, rows: u64, cols: u64) -> u32 {
        self.slices(rows.div_ceil(NOMINAL_TILE_ROWS), cols, 1)
    }

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

/// Which steps give a weight's K slices workgroups of their own ([`Matmul::with_grid`];
/// [`SplitGrid::DEFAULT`] unless `FAK_MATMUL_SPLIT` names another). The
/// slices themselves are the weight's ([`SplitK::weight_slices`]) under every rule, and both
/// forms add the same slice sums in the same order, so every rule computes the same bits; only
/// the grid, the partial-sum traffic and the reduction dispatch differ.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SplitGrid {
    /// A grid of fewer tiles than [`SplitK::target_workgroups`] (the engine's rule until
    /// 2026-12-06 #8).
    Below,
    /// Where the slices' grid fills waves of `resident` concurrent workgroups (a GPU's SMs ×
    /// the kernel's workgroups per SM: 132 for the x16 kernel on an H100 or H200) at least
    /// [`WAVE_GAIN`] better than the tiles' grid does. Why (experiments/NOTES.md, "q6mm"): at the
    /// prefill's 512-token chunks the Qwen3-8B's attn_output and ffn_down have 128 tiles of
    /// 128 × 128 — one wave — yet `Below` cuts them into 8 slices of 1024 workgroups, which
    /// write and reread 64 MiB of partial sums each and restart their K pipeline every 8–24 K
    /// steps; the 27B's ffn_down (160 tiles: 1.2 waves, the second nearly empty) still gains
    /// from its slices. No adapter fact gives the number of SMs, so it is named.
    Waves(u32),
    /// Never: each workgroup sums its slices one after another (a control for the bench).
    Never,
}

/// How much better the slices' grid must fill its waves than the tiles' for [`SplitGrid::Waves`]
/// to split, as a ratio num/den: the partial sums' write, reread and the reduction's dispatch
/// cost a few % of a product.
const WAVE_GAIN: (u64, u64) = (21, 20);

impl SplitGrid {
    /// The engine's rule: waves of 132 workgroups (an H100's or H200's SMs, one x16 workgroup
    /// each). On an H100 (2026-12-06 #8, experiments/h200/q6mm.sh) it took the Qwen3-8B's
    /// 2048-token prefill from 6886 to 7438 tok/s and its 128-token one from 5257 to 5507 against
    /// [`SplitGrid::Below`], the 27B's within noise (1591 vs 1573–1597, 2198 vs 2202–2207). A
    /// GPU with fewer SMs is full at fewer tiles, so it splits no grid it would want whole; one
    /// with more splits a little less than it could.
    pub const DEFAULT: SplitGrid = SplitGrid::Waves(132);

    /// The variable that overrides [`SplitGrid::DEFAULT`] in [`Matmul::new`] ([`SplitGrid::named`]).
    pub const VAR: &'static str = "FAK_MATMUL_SPLIT";

    /// The rule `FAK_MATMUL_SPLIT` asks for (unset: [`SplitGrid::DEFAULT`]).
    pub fn requested() -> Result<Self, GpuError> {
        match std::env::var(Self::VAR) {
            Err(std::env::VarError::NotPresent) => Ok(Self::DEFAULT),
            Ok(v) => Self::named(&v),
            Err(e) => Self::named(&format!("{e}")),
        }
    }

    /// The rule a value of `FAK_MATMUL_SPLIT` names: empty, the engine's; `below`; `never`;
    /// `waves:N` (N concurrent workgroups, N > 0). Anything else is an error naming the
    /// variable: a measurement must not silently run another rule than the one it names.
    pub fn named(value: &str) -> Result<Self, GpuError> {
        let bad = || GpuError::Shape {
            kernel: Matmul::NAME,
            message: format!(
                "{}={value:?} is neither empty, below, never nor waves:N (N > 0 concurrent \
                 workgroups)",
                Self::VAR
            ),
        };
        match value.split(':').collect::<Vec<_>>()[..] {
            [""] => Ok(Self::DEFAULT),
            ["below"] => Ok(Self::Below),
            ["never"] => Ok(Self::Never),
            ["waves", n] => n
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(Self::Waves)
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }

    /// Whether a step whose tiles make `workgroups` workgroups runs the weight's `slices` in
    /// workgroups of their own (`split` gives [`SplitGrid::Below`] its target); never a weight
    /// of one slice.
    pub fn across_workgroups(self, split: SplitK, workgroups: u64, slices: u32) -> bool {
        if slices < 2 {
            return false;
        }
        match self {
            Self::Below => workgroups < u64::from(split.target_workgroups),
            Self::Never => false,
            Self::Waves(resident) => {
                let resident = u64::from(resident);
                let sliced = workgroups * u64::from(slices);
                // fill(n) = n / (waves(n) · resident); resident cancels from both sides.
                let waves = |n: u64| n.div_ceil(resident);
                let (num, den) = WAVE_GAIN;
                workgroups > 0
                    && u128::from(sliced) * u128::from(waves(workgroups)) * u128::from(den)
                        > u128::from(num) * u128::from(workgroups) * u128::from(waves(sliced))
            }
        }
    }
}

/// The K step split-K counts slices in (TILE_K of matmul.wgsl and of the default
/// [`CoopTiling`]; a tiling with K steps of 64 cuts the same slices into half as many steps).
const TILE_K: u64 = 32;
/// The row tile [`SplitK::weight_slices`] counts a weight's tiles in, whatever the variant's.
const NOMINAL_TILE_ROWS: u64 = 128;
/// The most bytes of partial sums one binding may ask for: S × n_tokens × rows floats must fit
/// for a step to split K across workgroups (the scratch every binding of one [`Matmul`] shares,
/// one product running at a time, grows to what its bindings can use).
const PARTIALS_BYTES: u64 = 96 << 20;
/// Invocations per workgroup of `reduce_partials` (its RW).
const REDUCE_WG: u64 = 256;
/// Invocations per workgroup of the x16 kernel's `to_f16` (its CW).
const TO_F16_WG: u32 = 256;
/// The x16 kernel's rows of X in f16 are padded to a multiple of this (the longest K step), so
/// its tile loads never reach past a row.
const X16_ROW_ALIGN: u64 = 64;

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
    x16_stride: u32,
    k_slices: u32,
    /// The norm fold's eps (0 where the binding does not fold one).
    eps: f32,
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

/// What the x16 kernel's conversion of X to f16 applies first ([`Matmul::bind_folded`]): the
/// op that produced the product's input, folded in so that its dispatch is gone.
#[derive(Clone, Copy)]
pub enum MatmulInput<'a> {
    /// X itself (`to_f16`).
    Plain,
    /// X is an RMSNorm's input: the product multiplies RMSNorm(X) (`to_f16_norm`).
    Normed(MatmulNorm<'a>),
    /// X is `[n, 2·cols]` rows of gate then up values: the product multiplies
    /// silu(gate) · up (`to_f16_swiglu`), elementwise.wgsl's swiglu.
    SwiGlu,
}

/// An RMSNorm folded into the x16 kernel's conversion of X: the product multiplies
/// `RMSNorm(X) · weight` (f32 `[cols]`), the bits of rms_norm's output rounded to f16 as
/// `to_f16` rounds it.
#[derive(Clone, Copy)]
pub struct MatmulNorm<'a> {
    pub weight: &'a wgpu::Buffer,
    pub eps: f32,
}

/// The block of Y one workgroup computes: `tokens` × `rows`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tile {
    pub tokens: u32,
    pub rows: u32,
}

impl Tile {
    /// The tile of a variant's kernel ([`CoopKernel::for_shape`] on the cooperative-matrix
    /// ones); the WGSL consts `TILE_T` / `TILE_R` of its module say the same
    /// (tests/gpu_matmul.rs reads them back through naga).
    pub fn of(variant: KernelPaths) -> Tile {
        match variant.coop_matrix {
            None => Tile {
                tokens: 64,
                rows: 64,
            },
            Some(shape) => CoopKernel::for_shape(shape).tile(shape),
        }
    }

    /// The staged kernel's: 8 × 8 shape tiles, in 4 × 2 subgroups of 2 × 4 tiles each or 2 × 2
    /// subgroups of 4 × 4 ([`CoopTiling`]; wgsl/matmul_coop.wgsl says why this tiling).
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

/// The x16 kernel's workgroup tile and K loop: the specialisation consts of wgsl/matmul_x16.wgsl
/// (its header says what each does). Every subgroup holds 2 × 4 accumulator tiles; the
/// workgroup's subgroups are `subgroups_t` × 2.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct X16Tiling {
    /// Subgroups along the tokens (SG_T): 4 (128 × 128 tiles for 16×16, 256 invocations) or 2
    /// (64 tokens × 128 rows, 128 invocations).
    pub subgroups_t: u32,
    /// Elements of K per step (TILE_K): 32 or 64.
    pub k_step: u32,
    /// Pairs of tiles in workgroup memory (STAGES): 2 (one barrier per K step) or 1 (two).
    pub stages: u32,
    /// Q6_K weights fetched as raw words a step ahead, as Q4_K always is (RAW_Q6K).
    pub raw_q6k: bool,
    /// With `raw_q6k`: in pairs of tasks sharing their high-bit words (RAW_Q6K = 2; K steps of
    /// 64 only).
    pub q6k_pairs: bool,
    /// K summed in the weight's fixed slices whether the grid splits it or not (SLICED); false
    /// only to measure what that costs (a row's result then depends on the step's other rows).
    pub sliced: bool,
}

impl X16Tiling {
    const fn new(subgroups_t: u32, k_step: u32, stages: u32, raw_q6k: bool) -> Self {
        X16Tiling {
            subgroups_t,
            k_step,
            stages,
            raw_q6k,
            q6k_pairs: false,
            sliced: true,
        }
    }

    const fn paired(self) -> Self {
        X16Tiling {
            q6k_pairs: true,
            ..self
        }
    }

    const fn unsliced(self) -> Self {
        X16Tiling {
            sliced: false,
            ..self
        }
    }

    /// Its workgroup tile for `shape`.
    pub fn tile(self, shape: CoopShape) -> Tile {
        Tile {
            tokens: self.subgroups_t * 2 * shape.size(),
            rows: 2 * 4 * shape.size(),
        }
    }

    fn consts(self) -> [(&'static str, u32); 5] {
        [
            ("SG_T", self.subgroups_t),
            ("TILE_K", self.k_step),
            ("STAGES", self.stages),
            (
                "RAW_Q6K",
                u32::from(self.raw_q6k) + u32::from(self.q6k_pairs),
            ),
            ("SLICED", u32::from(self.sliced)),
        ]
    }
}

impl std::fmt::Display for X16Tiling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tokens = self.subgroups_t * 32;
        let q6k = match (self.raw_q6k, self.q6k_pairs) {
            (true, true) => "-rawq6p",
            (true, false) => "-rawq6",
            _ => "",
        };
        let whole = if self.sliced { "" } else { "-unsliced" };
        write!(
            f,
            "x16-{tokens}x128-k{}-{}st{q6k}{whole}",
            self.k_step, self.stages
        )
    }
}

/// Which cooperative-matrix kernel, specialised how.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CoopKernel {
    /// wgsl/matmul_coop.wgsl: X converted to f16 by each tile's loader.
    Staged(CoopTiling),
    /// wgsl/matmul_x16.wgsl: X converted once per product (16×16 only: its loader's geometry
    /// needs 128-row tiles).
    X16(X16Tiling),
}

impl CoopKernel {
    /// The staged kernel's engine default (session #4's measured best).
    pub const STAGED: CoopKernel = CoopKernel::Staged(CoopTiling::DEFAULT);

    /// What matmul-bench `--sweep` times and tests/gpu_matmul.rs checks on the device: the
    /// staged kernel's best K loop, then the x16 kernel's tilings (every one within 48 KiB of
    /// workgroup memory: 128 × 128 tiles with K steps of 64 fit only one stage). Measured on the
    /// H200 (experiments/NOTES.md, "gemm (session 2026-12-04 #4)", call 1, before the fixed K
    /// slices): 128 × 128 with K 64 in one stage fastest everywhere (Q4_K 8B layer: 11 267 tok/s
    /// of mat-muls at 2048 tokens, 7922 at 128; staged 2499 / 2335), K 32 two stages 8–10 %
    /// behind, one stage of K 32 behind that; 64 × 128 tiles lose 2× (the W tile is decoded for
    /// half as many tokens; Q6_K, decoded as it loads, 2.5×). The Q6_K raw-word path (`-rawq6`)
    /// ran on the H200 in 2026-12-05's sweep: Q6_K products 1.6–1.7× faster than the default's
    /// dequant4 (experiments/NOTES.md, "q6mm"); its pair tasks (`-rawq6p`) have not run on
    /// hardware yet. The 64 × 128 tile's raw twin (2026-12-08 #24) is there for a later turn's
    /// 160-token prefill steps (three 64-token tiles 83 % full against two of 128 at 62.5 %),
    /// with its Q6_K loaded as the engine kernel's are; every sliced x16 tiling computes the
    /// engine kernel's bits (tests/gpu_matmul.rs), so a rule by token count would keep a row's
    /// bits.
    pub const SWEEP: [CoopKernel; 11] = [
        Self::STAGED,
        CoopKernel::X16(X16Tiling::new(4, 64, 1, false)),
        CoopKernel::X16(X16Tiling::new(4, 64, 1, true)),
        CoopKernel::X16(X16Tiling::new(4, 64, 1, true).paired()),
        CoopKernel::X16(X16Tiling::new(4, 64, 1, false).unsliced()),
        CoopKernel::X16(X16Tiling::new(4, 32, 2, false)),
        CoopKernel::X16(X16Tiling::new(4, 32, 2, true)),
        CoopKernel::X16(X16Tiling::new(4, 32, 1, false)),
        CoopKernel::X16(X16Tiling::new(2, 32, 2, false)),
        CoopKernel::X16(X16Tiling::new(2, 64, 1, false)),
        CoopKernel::X16(X16Tiling::new(2, 64, 1, true)),
    ];

    /// The rule per adapter: the kernel [`Matmul::new`] builds for `shape`. 16×16 (Vulkan:
    /// NVIDIA) runs [`CoopKernel::X16_DEFAULT`]: on the H200 (experiments/h200/2026-12-05,
    /// `gemm.sh`) every x16 tiling matched the CPU, the model suites held their floors on it,
    /// and it ran the 8B layer's Q4_K products 4.4× faster than the staged kernel at 2048 tokens
    /// (5.2 vs 22.7 ms), the whole 8B prefill 2128 → 4000 tok/s at 2048 and 2120 → 4560 at
    /// 128. 8×8 (Metal, not yet run on hardware) keeps the staged kernel: the x16 kernel has no
    /// 8×8 geometry. Adapters without cooperative matrices run the register-tiled fallback
    /// ([`Matmul::select`]).
    pub fn for_shape(shape: CoopShape) -> CoopKernel {
        match shape {
            CoopShape::M16x16 => Self::X16_DEFAULT,
            CoopShape::M8x8 => Self::STAGED,
        }
    }

    /// The x16 kernel 16×16 runs: 128 × 128 tiles, K steps of 64, one stage (the sweep's fastest
    /// on the H200 in both sessions' sweeps), K summed in the weight's fixed slices, Q6_K on the
    /// raw-word path (`-rawq6`: fetched a step ahead like Q4_K, the same f16 values and MMAs, so
    /// the same bits as the dequant path). The H200 sweep of 2026-12-05
    /// (experiments/h200/2026-12-05/gemm/matmul-sweep.tsv: both PASS against the CPU) ran every
    /// Q6_K product of the 8B's shapes 1.5–1.7× faster on it (ffn_down 62.8 → 99.5 TFLOP/s at 128
    /// tokens, attn_output 73.2 → 122.1 at 2048) and Q4_K the same; it was made the default in
    /// session 2026-12-05 #7 from that sweep, before running in a model on a device.
    pub const X16_DEFAULT: CoopKernel = CoopKernel::X16(X16Tiling::new(4, 64, 1, true));

    /// `FAK_MATMUL_TILING`: a kernel of [`CoopKernel::SWEEP`] by its label, for a measurement
    /// of another kernel in the model; None when unset or empty.
    pub fn from_env() -> Result<Option<CoopKernel>, GpuError> {
        match std::env::var("FAK_MATMUL_TILING") {
            Ok(text) if !text.is_empty() => Self::SWEEP
                .into_iter()
                .find(|k| k.to_string() == text)
                .map(Some)
                .ok_or_else(|| GpuError::Shape {
                    kernel: Matmul::NAME,
                    message: format!(
                        "FAK_MATMUL_TILING={text:?} names none of {}",
                        Self::SWEEP.map(|k| k.to_string()).join(", ")
                    ),
                }),
            _ => Ok(None),
        }
    }

    /// Every kernel the tests check on the device: each staged K loop of [`CoopTiling::SWEEP`]
    /// (measured in session 2026-12-04 #2 and kept buildable) and each x16 tiling.
    pub fn every() -> Vec<CoopKernel> {
        let staged = CoopTiling::SWEEP.into_iter().map(Self::Staged);
        let x16 = Self::SWEEP
            .into_iter()
            .filter(|k| matches!(k, Self::X16(_)));
        staged.chain(x16).collect()
    }

    /// Whether it builds for `shape` at all.
    pub fn supports(self, shape: CoopShape) -> bool {
        matches!(
            (self, shape),
            (Self::Staged(_), _) | (Self::X16(_), CoopShape::M16x16)
        )
    }

    /// Its workgroup tile for `shape`.
    pub fn tile(self, shape: CoopShape) -> Tile {
        match self {
            Self::Staged(_) => Tile::of_coop(shape),
            Self::X16(tiling) => tiling.tile(shape),
        }
    }

    /// Bytes of workgroup memory it declares for `shape`: the f16 W and X tiles (rows of
    /// `k_step + 8` halves, per buffer) and one f32 staging tile per subgroup.
    pub fn workgroup_bytes(self, shape: CoopShape) -> u32 {
        match self {
            Self::Staged(tiling) => tiling.workgroup_bytes(shape),
            Self::X16(tiling) => {
                let tile = tiling.tile(shape);
                let halves = tiling.stages * (tile.rows + tile.tokens) * (tiling.k_step + 8);
                2 * halves + 4 * self.subgroups() * shape.size() * shape.size()
            }
        }
    }

    /// Subgroups per workgroup.
    pub fn subgroups(self) -> u32 {
        match self {
            Self::Staged(tiling) => tiling.subgroups(),
            Self::X16(tiling) => tiling.subgroups_t * 2,
        }
    }
}

impl std::fmt::Display for CoopKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Staged(tiling) => write!(f, "{tiling}"),
            Self::X16(tiling) => write!(f, "{tiling}"),
        }
    }
}

/// The mat-mul kernel of one variant: one pipeline per supported type, the split-K reduction and
/// its scratch.
pub struct Matmul {
    variant: KernelPaths,
    /// The cooperative-matrix kernel (None for the fallback).
    tiling: Option<CoopKernel>,
    layout: wgpu::BindGroupLayout,
    /// Parallel to [`Matmul::TYPES`].
    pipelines: Vec<wgpu::ComputePipeline>,
    reduce: wgpu::ComputePipeline,
    /// The x16 kernel's `to_f16`.
    to_f16: Option<wgpu::ComputePipeline>,
    /// The x16 kernel's `to_f16_norm`, one per rms_norm workgroup size (`rms_norm::WORKGROUPS`);
    /// empty for the other kernels.
    to_f16_norm: Vec<wgpu::ComputePipeline>,
    /// The x16 kernel's `to_f16_swiglu`.
    to_f16_swiglu: Option<wgpu::ComputePipeline>,
    /// Binding 7 of the x16 bindings that fold no norm.
    no_norm: wgpu::Buffer,
    /// The scratch of partial sums, grown by `bind` to what a binding's split steps need.
    partials: Scratch,
    /// The x16 kernel's scratch for X in f16, shared by its bindings (one product runs at a
    /// time) and grown by `bind` when a binding needs more; a binding keeps the one it was bound
    /// to alive.
    x16: Scratch,
    split: SplitK,
    grid: SplitGrid,
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
    /// Output rows (N), and whether y is accumulated into (read and written).
    rows: u64,
    accumulate: bool,
    max_tokens: u32,
    /// (bind group, rows in the range, K slices), in row order.
    ranges: Vec<(wgpu::BindGroup, u64, u32)>,
    /// vec4s per row of X in f16 (the x16 kernel's `to_f16` grid).
    x16_stride: u32,
    /// Bytes of partial sums its bind groups' scratch holds.
    partials_bytes: u64,
    /// How X is converted to f16 (x16 kernel only).
    conversion: Conversion,
}

/// The x16 kernel's conversion dispatch of a binding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Conversion {
    Plain,
    /// `to_f16_norm`, the pipeline for the row's rms_norm workgroup size (an index into
    /// `Matmul::to_f16_norm`).
    Normed(usize),
    SwiGlu,
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
        let kernel = variant
            .coop_matrix
            .map_or(CoopKernel::STAGED, CoopKernel::for_shape);
        Self::source_for(variant, kernel)
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

    /// The module and pipelines of `variant`, its cooperative-matrix kernel `kernel` (the
    /// fallback ignores it): the product per type, `reduce_partials`, and the x16 kernel's
    /// `to_f16`, `to_f16_swiglu` and `to_f16_norm` (per rms_norm workgroup size) last.
    pub fn source_for(variant: KernelPaths, kernel: CoopKernel) -> KernelSource {
        let mut module = WgslModule::new(variant);
        if variant.coop_matrix.is_some() {
            let consts: &[(&'static str, u32)] = match &kernel {
                CoopKernel::Staged(tiling) => &tiling.consts(),
                CoopKernel::X16(tiling) => &tiling.consts(),
            };
            for &(name, value) in consts {
                module = module.with_const(name, value);
            }
        }
        let module = module
            .with(wgsl::BYTES)
            .with(wgsl::BLOCKS)
            .with(wgsl::DEQUANT_TYPE)
            .with(wgsl::STEP);
        let x16 = matches!(kernel, CoopKernel::X16(_)) && variant.coop_matrix.is_some();
        // The norm fold's row reduction (x16 requires subgroups).
        let module = if x16 {
            module
                .with(wgsl::reduction(variant))
                .with(wgsl::STRIDED_SQUARES)
        } else {
            module
        };
        let module = match variant.coop_matrix {
            None => module
                .with(wgsl::MATMUL_WORDS)
                .with(wgsl::MATMUL_LOAD)
                .with(wgsl::MATMUL_SPLIT)
                .with(wgsl::MATMUL),
            Some(shape) => {
                let module = module.with(match shape {
                    CoopShape::M8x8 => wgsl::MATMUL_COOP8,
                    CoopShape::M16x16 => wgsl::MATMUL_COOP16,
                });
                let module = if x16 {
                    module
                } else {
                    module.with(wgsl::MATMUL_WORDS)
                };
                let module = module
                    .with(wgsl::MATMUL_LOAD)
                    .with(wgsl::MATMUL_SPLIT)
                    .with(wgsl::MATMUL_COOP_OUT);
                module.with(if x16 {
                    wgsl::MATMUL_X16
                } else {
                    wgsl::MATMUL_COOP
                })
            }
        };
        let mut pipelines: Vec<_> = Self::TYPES
            .iter()
            .map(|&ty| PipelineSpec {
                label: match variant.coop_matrix {
                    None => format!("matmul {ty}"),
                    Some(_) => format!("matmul {ty} {kernel}"),
                },
                entry_point: "main",
                constants: type_constants(ty),
            })
            .collect();
        // Neither reads a weight: any type's constants do.
        pipelines.push(PipelineSpec {
            label: "matmul reduce_partials".into(),
            entry_point: "reduce_partials",
            constants: type_constants(GgmlType::F32),
        });
        if x16 {
            pipelines.push(PipelineSpec {
                label: "matmul to_f16".into(),
                entry_point: "to_f16",
                constants: type_constants(GgmlType::F32),
            });
            pipelines.push(PipelineSpec {
                label: "matmul to_f16_swiglu".into(),
                entry_point: "to_f16_swiglu",
                constants: type_constants(GgmlType::F32),
            });
            for wg in rms_norm::WORKGROUPS {
                let mut constants = type_constants(GgmlType::F32);
                constants.push(("NORM_WG", f64::from(wg)));
                pipelines.push(PipelineSpec {
                    label: format!("matmul to_f16_norm NORM_WG={wg}"),
                    entry_point: "to_f16_norm",
                    constants,
                });
            }
        }
        KernelSource {
            module,
            slots: if x16 { SLOTS_X16 } else { SLOTS },
            pipelines,
        }
    }

    /// Whether the variant `allowed` selects multiplies on cooperative matrices (X and W rounded
    /// to f16, as the CPU reference's `Activations::F16Tiles` rounds them).
    pub fn runs_on_matrix_units(allowed: KernelPaths) -> bool {
        Self::select(allowed).coop_matrix.is_some()
    }

    /// Builds the variant `paths` selects ([`Matmul::select`]), a cooperative-matrix one with the
    /// kernel of [`CoopKernel::for_shape`] (or `FAK_MATMUL_TILING`'s), its grids split by
    /// [`SplitGrid::DEFAULT`] (or `FAK_MATMUL_SPLIT`'s rule).
    pub fn new(ctx: &GpuContext, paths: KernelPaths) -> Result<Self, GpuError> {
        let kernel = match (Self::select(paths).coop_matrix, CoopKernel::from_env()?) {
            (Some(shape), Some(named)) if named.supports(shape) => named,
            (Some(shape), _) => CoopKernel::for_shape(shape),
            (None, _) => CoopKernel::STAGED,
        };
        let grid = SplitGrid::requested()?;
        Ok(Self::with_tiling(ctx, paths, kernel)?.with_grid(grid))
    }

    /// [`Matmul::new`] with the cooperative-matrix kernel `kernel` (the fallback ignores it);
    /// refused where the shape has no such kernel or its workgroup memory exceeds the device's.
    pub fn with_tiling(
        ctx: &GpuContext,
        paths: KernelPaths,
        kernel: CoopKernel,
    ) -> Result<Self, GpuError> {
        let paths = Self::select(paths);
        if let Some(shape) = paths.coop_matrix {
            let limit = ctx.device.limits().max_compute_workgroup_storage_size;
            let refusal = if !kernel.supports(shape) {
                Some(format!("{kernel} has no {shape:?} form"))
            } else if kernel.workgroup_bytes(shape) > limit {
                Some(format!(
                    "{kernel} needs more than {limit} bytes of workgroup memory"
                ))
            } else {
                None
            };
            if let Some(message) = refusal {
                return Err(GpuError::Shape {
                    kernel: Self::NAME,
                    message,
                });
            }
        }
        let variant = KernelVariant {
            kernel: Self::NAME,
            paths,
            source: Self::source_for(paths, kernel),
        };
        let x16 = variant.source.slots.len() == SLOTS_X16.len();
        let mut built = build(ctx, &variant)?;
        let to_f16_norm = match x16 {
            true => built
                .pipelines
                .split_off(built.pipelines.len() - rms_norm::WORKGROUPS.len()),
            false => Vec::new(),
        };
        let to_f16_swiglu = x16.then(|| built.pipelines.pop().expect("then to_f16_swiglu"));
        let to_f16 = x16.then(|| built.pipelines.pop().expect("then to_f16"));
        let reduce = built
            .pipelines
            .pop()
            .expect("source() has reduce_partials after the products");
        Ok(Matmul {
            variant: variant.paths,
            tiling: paths.coop_matrix.map(|_| kernel),
            layout: built.layout,
            pipelines: built.pipelines,
            reduce,
            to_f16,
            to_f16_norm,
            to_f16_swiglu,
            no_norm: storage_buffer(ctx, "matmul no norm", 16)?,
            partials: Scratch::new("matmul partials"),
            x16: Scratch::new("matmul x16"),
            split: SplitK::DEFAULT,
            grid: SplitGrid::DEFAULT,
        })
    }

    /// The same kernel splitting K by another rule, so tests can run the whole-K path and short
    /// slices on small shapes.
    pub fn with_split(mut self, split: SplitK) -> Self {
        self.split = split;
        self
    }

    /// The same kernel giving K's slices workgroups of their own by another rule (bind after
    /// this: a binding sizes its partial sums by the rule).
    pub fn with_grid(mut self, grid: SplitGrid) -> Self {
        self.grid = grid;
        self
    }

    /// The rule its grids split by.
    pub fn grid(&self) -> SplitGrid {
        self.grid
    }

    /// The variant that was built.
    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cooperative-matrix kernel that was built (None for the fallback).
    pub fn tiling(&self) -> Option<CoopKernel> {
        self.tiling
    }

    /// The block of Y one workgroup of this variant computes.
    pub fn tile(&self) -> Tile {
        match (self.variant.coop_matrix, self.tiling) {
            (Some(shape), Some(kernel)) => kernel.tile(shape),
            _ => Tile::of(self.variant),
        }
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
        self.bind_ranges(ctx, shape, buffers, max_binding, MatmulInput::Plain)
    }

    /// Whether this kernel folds an input's producer into its conversion of X
    /// ([`Matmul::bind_folded`]): the x16 kernel only (the others read X in f32 per tile and
    /// keep the producer's dispatch).
    pub fn folds(&self) -> bool {
        self.to_f16_swiglu.is_some()
    }

    /// [`Matmul::bind`] with `input`'s op folded in: X (`buffers.x`) is that op's input, and each
    /// encode converts the op's output to f16 in one dispatch where the unfolded product needs
    /// the op's and `to_f16`'s — the same bits. Refused by kernels that do not fold
    /// ([`Matmul::folds`]).
    pub fn bind_folded(
        &self,
        ctx: &GpuContext,
        shape: MatmulShape,
        buffers: MatmulBuffers<'_>,
        input: MatmulInput<'_>,
    ) -> Result<MatmulBinding, GpuError> {
        let refusal = match input {
            _ if !self.folds() => Some(format!(
                "the {} kernel folds no op into its input (the x16 kernel does)",
                self.variant
            )),
            MatmulInput::Normed(norm) if norm.weight.size() < 4 * shape.cols => Some(format!(
                "a norm weight of {} bytes for rows of {} values",
                norm.weight.size(),
                shape.cols
            )),
            _ => None,
        };
        if let Some(message) = refusal {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message,
            });
        }
        self.bind_ranges(ctx, shape, buffers, ctx.max_binding_size(), input)
    }

    fn bind_ranges(
        &self,
        ctx: &GpuContext,
        shape: MatmulShape,
        buffers: MatmulBuffers<'_>,
        max_binding: u64,
        input: MatmulInput<'_>,
    ) -> Result<MatmulBinding, GpuError> {
        let norm = match input {
            MatmulInput::Normed(norm) => Some(norm),
            _ => None,
        };
        // A SwiGLU's X holds gate and up: two values per input column.
        let x_cols = match input {
            MatmulInput::SwiGlu => 2 * shape.cols,
            _ => shape.cols,
        };
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
        let x_bytes = check_activation(device_binding, "X", tokens, x_cols)?;
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
        let x16_cols = round_up(cols, X16_ROW_ALIGN);
        let x16 = match self.to_f16 {
            Some(_) => {
                let bytes = tokens.saturating_mul(x16_cols).saturating_mul(2);
                if bytes > device_binding {
                    return Err(GpuError::TooLarge {
                        what: format!(
                            "mat-mul activation X in f16 of {tokens} × {x16_cols} (bytes)"
                        ),
                        size: bytes,
                        limit: device_binding,
                        limit_name: "max_storage_buffer_binding_size",
                    });
                }
                Some(self.x16.at_least(ctx, bytes)?)
            }
            None => None,
        };
        let partials_bytes = ranges
            .iter()
            .map(|range| {
                let rows = range.end - range.start;
                let slices = self.split.weight_slices(rows, cols);
                if slices > 1 {
                    let tokens = self.split_tokens(rows, slices, tokens);
                    (u64::from(slices) * tokens * rows * 4).min(PARTIALS_BYTES)
                } else {
                    0
                }
            })
            .max()
            .unwrap_or(0);
        let partials = self.partials.at_least(ctx, partials_bytes.max(4))?;
        let ranges = ranges
            .into_iter()
            .map(|range| {
                let len = range.end - range.start;
                let w_window = Window::around(range.start * row_bytes, len * row_bytes, align);
                // Every value is below the 2 GiB binding cap checked above, so fits a u32.
                let k_slices = self.split.weight_slices(len, cols);
                let params = Params {
                    rows: len as u32,
                    cols: cols as u32,
                    w_byte: w_window.skip as u32,
                    row_bytes: row_bytes as u32,
                    y_col: range.start as u32,
                    y_stride: rows as u32,
                    accumulate: u32::from(output == MatmulOutput::Accumulate),
                    x16_stride: (x16_cols / 4) as u32,
                    k_slices,
                    eps: norm.map_or(0.0, |n| n.eps),
                };
                let params = uniform(ctx, "matmul params", &params);
                let mut entries = vec![
                    entry(0, w_window.binding(buffers.weights)),
                    entry(1, x_window.binding(buffers.x)),
                    entry(2, y_window.binding(buffers.y)),
                    entry(3, params.as_entire_binding()),
                    entry(4, buffers.step.buffer.as_entire_binding()),
                    entry(5, partials.as_entire_binding()),
                ];
                if let Some(x16) = &x16 {
                    entries.push(entry(6, x16.as_entire_binding()));
                    let norm_weight = norm.map_or(&self.no_norm, |n| n.weight);
                    entries.push(entry(7, norm_weight.as_entire_binding()));
                }
                let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("matmul"),
                    layout: &self.layout,
                    entries: &entries,
                });
                (group, len, k_slices)
            })
            .collect();
        Ok(MatmulBinding {
            ty,
            cols,
            rows,
            accumulate: output == MatmulOutput::Accumulate,
            max_tokens,
            ranges,
            x16_stride: (x16_cols / 4) as u32,
            partials_bytes,
            conversion: match input {
                MatmulInput::Plain => Conversion::Plain,
                // cols fits a u32 (Params holds it).
                MatmulInput::Normed(_) => {
                    Conversion::Normed(rms_norm::workgroup_index(cols as u32))
                }
                MatmulInput::SwiGlu => Conversion::SwiGlu,
            },
        })
    }

    /// The most tokens of a step that may give a range of `rows` rows and `slices` K slices
    /// workgroups per slice (at most `max_tokens`): its partial sums are what the scratch holds.
    fn split_tokens(&self, rows: u64, slices: u32, max_tokens: u64) -> u64 {
        let tile = self.tile();
        let row_tiles = rows.div_ceil(u64::from(tile.rows));
        let tile_tokens = u64::from(tile.tokens);
        match self.grid {
            // Its tiles fewer than the target (one token tile more than needed: the size the
            // engine has always allocated).
            SplitGrid::Below => {
                let token_tiles = u64::from(self.split.target_workgroups).div_ceil(row_tiles);
                max_tokens.min(token_tiles * tile_tokens)
            }
            _ => (1..=max_tokens.div_ceil(tile_tokens))
                .filter(|&t| {
                    self.grid
                        .across_workgroups(self.split, t * row_tiles, slices)
                })
                .max()
                .map_or(0, |t| max_tokens.min(t * tile_tokens)),
        }
    }

    /// What [`Matmul::encode`] dispatches for `n_tokens`, one entry per row range: their number
    /// depends only on the binding; their size, and whether K is split, on the token count.
    pub fn grids(&self, binding: &MatmulBinding, n_tokens: u32) -> Vec<MatmulGrid> {
        let tile = self.tile();
        binding
            .ranges
            .iter()
            .map(|&(_, rows, k_slices)| {
                let tiles = Grid {
                    x: n_tokens.div_ceil(tile.tokens),
                    // bind() checked the grid against the limit, so this fits.
                    y: rows.div_ceil(u64::from(tile.rows)) as u32,
                };
                let workgroups = u64::from(tiles.x) * u64::from(tiles.y);
                let outputs = u64::from(n_tokens) * rows;
                let fits = u64::from(k_slices) * outputs * 4 <= binding.partials_bytes;
                let across = self
                    .grid
                    .across_workgroups(self.split, workgroups, k_slices);
                let splits = if across && fits { k_slices } else { 1 };
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

    /// Records the x16 kernel's conversion of X to f16 for `binding` (its bind group set), with
    /// the op it folds.
    fn record_conversion(&self, pass: &mut wgpu::ComputePass, binding: &MatmulBinding, n: u32) {
        let elementwise = match binding.conversion {
            Conversion::Normed(wg) => {
                // One workgroup per token row: the norm's sum needs the whole row.
                pass.set_pipeline(&self.to_f16_norm[wg]);
                pass.dispatch_workgroups(1, n, 1);
                return;
            }
            Conversion::SwiGlu => &self.to_f16_swiglu,
            Conversion::Plain => &self.to_f16,
        };
        let pipeline = elementwise.as_ref().expect("bound only on the x16 kernel");
        pass.set_pipeline(pipeline);
        pass.dispatch_workgroups(binding.x16_stride.div_ceil(TO_F16_WG), n, 1);
    }

    /// Records the dispatches of `binding` for `n_tokens` tokens (which the step uniform must
    /// hold when the pass runs) into `pass`; returns what it recorded: the weight read once, x
    /// read, y written (read too when accumulating), and the product's FLOPs.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &MatmulBinding,
        n_tokens: u32,
    ) -> Result<Recorded, GpuError> {
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
        for ((group, _, _), grid) in binding.ranges.iter().zip(self.grids(binding, n_tokens)) {
            // Every range reads the same X: its first converts it (the x16 kernel).
            if dispatches == 0 && self.to_f16.is_some() {
                pass.set_bind_group(0, group, &[]);
                self.record_conversion(pass, binding, n_tokens);
                dispatches += 1;
            }
            pass.set_pipeline(&self.pipelines[index]);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(grid.tiles.x, grid.tiles.y, grid.splits);
            if let Some(reduce) = grid.reduce {
                pass.set_pipeline(&self.reduce);
                pass.dispatch_workgroups(reduce.x, reduce.y, grid.splits);
            }
            dispatches += grid.dispatches();
        }
        let (rows, cols, n) = (binding.rows, binding.cols, u64::from(n_tokens));
        let weights = rows * binding.ty.row_bytes(cols).unwrap_or(0);
        let y_passes = if binding.accumulate { 2 } else { 1 };
        let bytes =
            OpBytes::new(weights, 4 * n * (cols + y_passes * rows)).product(rows, cols, n_tokens);
        Ok(Recorded::new(Self::NAME, dispatches, bytes))
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

/// A storage buffer shared by a kernel's bindings (one product runs at a time), grown when a
/// binding needs more; each binding keeps the buffer it was bound to alive.
struct Scratch {
    label: &'static str,
    buffer: Mutex<Option<wgpu::Buffer>>,
}

impl Scratch {
    fn new(label: &'static str) -> Scratch {
        Scratch {
            label,
            buffer: Mutex::new(None),
        }
    }

    /// The buffer, at least `bytes` long (a new one when the current one is shorter).
    fn at_least(&self, ctx: &GpuContext, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
        let mut buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        match &*buffer {
            Some(current) if current.size() >= bytes => Ok(current.clone()),
            _ => {
                let grown = storage_buffer(ctx, self.label, bytes)?;
                *buffer = Some(grown.clone());
                Ok(grown)
            }
        }
    }
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
    /// or K too short to cut, stays whole; the scratch caps the slices of a wide product; a
    /// weight's own count is the one-tile count.
    #[test]
    fn few_tile_products_are_split_along_k_until_the_target() {
        let split = SplitK::DEFAULT;
        assert_eq!(split.slices(40, 17408, 128 * 5120), 7);
        assert_eq!(split.slices(1, 5120, 128 * 48), 20);
        assert_eq!(split.slices(1, 5120, 5 * 48), 20);
        assert_eq!(split.slices(16 * 40, 4096, 2048 * 5120), 1);
        assert_eq!(split.slices(1, 224, 128 * 48), 1);
        assert_eq!(split.slices(2, 65536, 128 * 32768), 6);
        assert_eq!(split.slices(0, 4096, 0), 1);
        assert_eq!(SplitK::NEVER.slices(1, 5120, 48), 1);
        // Fixed per weight: the counts above at one 128-token tile, whatever the step.
        assert_eq!(split.weight_slices(5120, 17408), 7);
        assert_eq!(split.weight_slices(48, 5120), 20);
        assert_eq!(split.weight_slices(34816, 5120), 1);
        assert_eq!(SplitK::NEVER.weight_slices(48, 5120), 1);
    }

    /// `FAK_MATMUL_SPLIT`'s values: the engine's rule by default, a wave count, never; anything
    /// else refused with the variable's name.
    #[test]
    fn the_split_grid_rule_is_chosen_by_name() {
        let named = |value: &str| SplitGrid::named(value).unwrap();
        assert_eq!(named(""), SplitGrid::DEFAULT);
        assert_eq!(named("below"), SplitGrid::Below);
        assert_eq!(named("never"), SplitGrid::Never);
        assert_eq!(named("waves:132"), SplitGrid::Waves(132));
        for bad in ["waves", "waves:0", "waves:x", "132", "below:1", "always"] {
            let error = SplitGrid::named(bad).unwrap_err().to_string();
            assert!(error.contains("FAK_MATMUL_SPLIT"), "{bad}: {error}");
        }
    }

    /// The wave rule on the prefill's products (128 × 128 tiles, 132 resident workgroups): a
    /// 512-token chunk's one-wave grids (the 8B's attn_output and ffn_down: 128 tiles, 8 slices)
    /// stay whole, where the engine's rule splits them; a grid of 1.2 waves (the 27B's ffn_down:
    /// 160 tiles, 7 slices) and every 128-token grid below a wave split as before; a 2.4-wave
    /// grid split four ways fills 0.97 of its waves against 0.81 and splits; a weight of one
    /// slice never does.
    #[test]
    fn the_wave_rule_splits_only_grids_that_leave_a_wave_part_empty() {
        let (split, waves) = (SplitK::DEFAULT, SplitGrid::Waves(132));
        let cases = [
            // (workgroups, slices, waves splits, below splits)
            (128, 8, false, true),
            (160, 7, true, true),
            (32, 8, true, true),
            (40, 7, true, true),
            (192, 2, true, true),
            (320, 4, true, false),
            (516, 2, false, false),
            (40, 1, false, false),
        ];
        for (workgroups, slices, by_waves, below) in cases {
            assert_eq!(
                waves.across_workgroups(split, workgroups, slices),
                by_waves,
                "{workgroups} workgroups, {slices} slices"
            );
            assert_eq!(
                SplitGrid::Below.across_workgroups(split, workgroups, slices),
                below,
                "{workgroups} workgroups, {slices} slices"
            );
            assert!(!SplitGrid::Never.across_workgroups(split, workgroups, slices));
        }
    }
}
