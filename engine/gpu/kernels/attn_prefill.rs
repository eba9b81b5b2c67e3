//! `attn_prefill`: causal flash attention of a step's tokens against the paged KV cache, GQA,
//! continuing whatever the cache already holds.
//!
//! Variants ([`AttnPrefill::variants`]):
//! - fallback (f32 cache) and `f16` (f16 cache): f32 tiles in workgroup memory, f32 FMAs
//!   (wgsl/attn_prefill.wgsl);
//! - `subgroup+f16+coop16x16` (Vulkan) / `subgroup+f16+coop8x8` (Metal): S = Q·Kᵀ and P·V on
//!   cooperative matrices, f16 inputs and f32 accumulation, O kept in the accumulators and
//!   rescaled only when a row's max outgrows its reference (wgsl/attn_prefill_coop.wgsl);
//!   the default for 16×16 matrices until the flash form below (`FAK_ATTN_PREFILL=coop` now;
//!   `tiles` for the f32-tile kernel, a tile by its label to measure it): on the H200 it passes the attention and model tests and cuts
//!   the 8B's 2048-token prefill attention from 234 to 39 ms (experiments/NOTES.md, session
//!   2026-12-05 #5); Metal's 8×8 form has run nowhere yet, so there it is opt-in (`coop`);
//!   [`AttnPrefill::with_tile`] builds any [`CoopTile`] (tests, bench);
//! - the same variants with a [`CoopTile`] of form [`CoopForm::Flash`]: the same attention on
//!   another schedule (wgsl/attn_prefill_flash.wgsl: K and V tiles of their own, two barriers
//!   per key step, every load issued a phase ahead): the default on 16×16 matrices since it
//!   was timed on an H100 (2026-12-06 #9; `FAK_ATTN_PREFILL=coop` for the staged kernel);
//!   with [`CoopTile::lean`] the same kernel's lean step (`LEAN`: one page-table read per fetched
//!   key step, S's chains interleaved with P·V, the mask only on diagonal steps; the same bits),
//!   the default since an H100 timed it (2026-12-06 #10: the Qwen3-8B's 2048-token prefill's
//!   attention 17.07 → 15.03 ms a step; `FAK_ATTN_PREFILL=flash` without it). (`lean-a`, S one
//!   step ahead of its softmax, lost 20 % on an H100, and `lean-k`, pairs of subgroups sharing
//!   K's fragments, 9 % (16.41 ms there): both removed, experiments/NOTES.md "prune".)
//!
//! Both share the bindings and row addressing (wgsl/attn_prefill_rows.wgsl), so a binding is the
//! same for every variant; only the rows per workgroup differ ([`AttnPrefill::rows_per_tile`]).
//!
//! Key splits (flash-decoding for prefill): a step whose row tiles are too few for the GPU (few
//! tokens against many cached keys: a prefix-cache hit) runs each tile's keys in several
//! workgroups, and a combining pass merges their partials (wgsl/attn_combine.wgsl, shared with
//! the decode attention). [`SplitKeys`] picks the count per step on the host.
//!
//! Key runs: the f32-tile kernel sums each row's keys in runs of [`RUN_KEYS`] from key 0, folded
//! in key order, so a row's bits do not depend on the step (issue 21); the cooperative-matrix
//! kernels do where their tile has [`CoopTile::runs`] (`FAK_ATTN_RUNS=on`, [`KeyRuns`]: opt-in
//! until timed), else they split each tile's keys evenly.
//!
//! Tile order: which row tile each workgroup of a step takes ([`TileOrder`]: by default tile x
//! of kv head y; `FAK_ATTN_ORDER=long`, the longest first) changes when a tile runs, never what
//! it computes: the same bits in either order.

use super::attn_decode::{ATTN_COMBINE, AttnShape, MAX_SPLITS, attention_bytes};
use super::kv_cache::{KvCache, KvDtype, check_dtype};
use super::support::{
    self, Positions, View, entry, positions_binding, shape_error, step_wgsl, view_binding, words,
};
use crate::gpu::buffers::uniform;
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslFile, WgslModule, build, wgsl,
};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, CoopShape, KernelPaths};
use crate::gpu::profile::Recorded;
use crate::gpu::step::PageTable;
use crate::gpu::step::StepBuffer;

/// Keys a run (wgsl/attn_prefill.wgsl's `RUN_KEYS`; the cooperative-matrix kernels' where a
/// tile has [`CoopTile::runs`]): each row's keys are summed in runs from key 0, folded in key
/// order, however the step splits them.
pub const RUN_KEYS: u32 = 512;
const ATTN_PREFILL_ROWS: WgslFile = step_wgsl!("attn_prefill_rows.wgsl");
const ATTN_PREFILL: WgslFile = step_wgsl!("attn_prefill.wgsl");
const ATTN_PREFILL_COOP: WgslFile = step_wgsl!("attn_prefill_coop.wgsl");
const ATTN_PREFILL_FLASH: WgslFile = step_wgsl!("attn_prefill_flash.wgsl");
/// q, k_cache, v_cache, page_table, token_slots, o, params, step, partials.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::ReadWrite,
];
/// (token, query head) rows per workgroup of the f32-tile kernel (`BM`).
const SCALAR_ROWS: u32 = 32;
/// The widest head the kernels' accumulators hold (the f32-tile kernel: 4 invocations per row,
/// 64 each).
pub const MAX_HEAD_DIM: u32 = 256;
/// Row blocks (`ROW_BLOCKS`, 16 rows each on Vulkan) the cooperative-matrix kernel may take,
/// most first; [`CoopTile::fitting`] takes the first whose workgroup memory fits.
pub const COOP_ROW_BLOCKS: [u32; 3] = [4, 2, 1];
/// Keys per step (`KEY_STEP`) the cooperative-matrix kernel may take, in the order
/// [`CoopTile::fitting`] prefers them for a row-block count.
pub const COOP_KEY_STEPS: [u32; 2] = [64, 32];
/// Row blocks of the flash form (one subgroup each: 128, 64 or 32 rows on 16×16), most first
/// (32 rows: four times the 128-row tile's workgroups, for short prompts).
pub const FLASH_ROW_BLOCKS: [u32; 3] = [8, 4, 2];
/// The workgroup memory the example module's tile is chosen for (WebGPU's and NVIDIA's 48 KiB).
const COOP_WORKGROUP_BYTES: u32 = 49152;
/// The most O accumulators (dim tiles) and S accumulators (key blocks) one subgroup of the
/// cooperative-matrix kernel holds (its named values).
const COOP_DIM_TILES: u32 = 8;
const COOP_KEY_TILES: u32 = 4;

/// Which cooperative-matrix kernel a [`CoopTile`] runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CoopForm {
    /// wgsl/attn_prefill_coop.wgsl: K, then V, through one tile, four barriers per key step
    /// (the engine's default).
    Staged,
    /// wgsl/attn_prefill_flash.wgsl: K and V in tiles of their own, P·V one step behind S, two
    /// workgroup barriers per key step of 32, each load issued a phase before its store, S and P
    /// in per-subgroup slabs; one subgroup per row block, Q in registers, heads of at most 8 dim
    /// tiles.
    Flash,
}

/// The workgroup geometry of the cooperative-matrix kernel (the consts of
/// wgsl/attn_prefill_coop.wgsl, or of wgsl/attn_prefill_flash.wgsl for the flash form):
/// `row_blocks` × `dim_split` subgroups of 32, `row_blocks`·COOP rows, key steps of `keys`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CoopTile {
    pub coop: CoopShape,
    /// The kernel that runs it.
    pub form: CoopForm,
    pub row_blocks: u32,
    pub keys: u32,
    /// Dim tiles of COOP covering the head (the head padded with zeros), a multiple of
    /// `dim_split`.
    pub head_tiles: u32,
    /// Subgroups sharing a row block's head dims, so that none holds more than 8 O tiles.
    pub dim_split: u32,
    /// How far (log2 units) a row's max may outgrow the reference its weights use before O is
    /// rescaled (wgsl/attn_prefill_coop.wgsl: the result does not depend on it; 0 rescales on
    /// every growth, which the tests use to cover that path).
    pub slack: u32,
    /// Q held in each subgroup's fragments rather than a workgroup tile (one subgroup a row
    /// block, Q staged once through the K/V tile: rows ≤ keys), which leaves room for 64 × 64
    /// tiles at head 128.
    pub q_regs: bool,
    /// With Q in registers, the S tiles of a step's key blocks computed with their MMA chains
    /// interleaved (`S_INTERLEAVE`: each Q fragment meets every key block before the next dim
    /// tile) rather than one chain after another; the same products in the same order per tile,
    /// so the same scores. Label suffix `i` (`64x64qi`); never the default: the sweep times it.
    pub interleave: bool,
    /// The flash form's lean step (wgsl/attn_prefill_flash.wgsl, `LEAN`): one page-table read
    /// per fetched key step where pages hold whole steps, S's MMA chains interleaved with P·V's,
    /// the causal mask only on steps that reach a row's position; the same MMAs on the same
    /// values, so the same bits as the flash tile. Label suffix `l` (`128x32fl`); the default
    /// on 16×16 matrices (`FAK_ATTN_PREFILL=flash` without it).
    pub lean: bool,
    /// Each row's keys summed in runs of [`RUN_KEYS`] from key 0, each from its own
    /// online-softmax start, folded in key order through the output's memory (the kernels'
    /// `RUN_KEYS`; wgsl/attn_prefill_rows.wgsl): a row's bits then do not depend on the step's
    /// size, tiles or splits (issue 21), and splits hold whole runs. Without it splits cut each
    /// tile's keys evenly. Not in the label: any tile either way ([`KeyRuns`],
    /// `FAK_ATTN_RUNS`); where a tile's keys fit one run, the same bits either way.
    pub runs: bool,
}

impl CoopTile {
    /// The slack the engine runs: weights up to 2^8.
    pub const SLACK: u32 = 8;

    /// Key steps of 32 (see [`CoopTile::with_keys`]).
    pub fn new(coop: CoopShape, row_blocks: u32, head_dim: u32) -> Self {
        let tiles = head_dim.div_ceil(coop.size());
        let dim_split = tiles.div_ceil(COOP_DIM_TILES);
        CoopTile {
            coop,
            form: CoopForm::Staged,
            row_blocks,
            keys: 32,
            head_tiles: tiles.div_ceil(dim_split) * dim_split,
            dim_split,
            slack: Self::SLACK,
            q_regs: false,
            interleave: false,
            lean: false,
            runs: false,
        }
    }

    /// The same tile with Q in registers (`q_regs`) or not.
    pub fn with_q_regs(self, q_regs: bool) -> Self {
        CoopTile { q_regs, ..self }
    }

    /// The same tile with its S chains interleaved (`interleave`) or not.
    pub fn with_interleave(self, interleave: bool) -> Self {
        CoopTile { interleave, ..self }
    }

    /// The same tile with the flash form's lean step (`lean`) or not.
    pub fn with_lean(self, lean: bool) -> Self {
        CoopTile { lean, ..self }
    }

    /// The same tile summing each row in key runs (`runs`) or not.
    pub fn with_runs(self, runs: bool) -> Self {
        CoopTile { runs, ..self }
    }

    /// The kernels' `RUN_KEYS`: [`RUN_KEYS`] with `runs`, else 0 (even splits).
    fn run_keys(self) -> u32 {
        if self.runs { RUN_KEYS } else { 0 }
    }

    /// The same geometry run by the kernel of `form`.
    pub fn with_form(self, form: CoopForm) -> Self {
        CoopTile { form, ..self }
    }

    /// The flash form's tile of `row_blocks` row blocks (key steps of 32, Q in registers).
    pub fn flash(coop: CoopShape, row_blocks: u32, head_dim: u32) -> Self {
        CoopTile::new(coop, row_blocks, head_dim)
            .with_q_regs(true)
            .with_form(CoopForm::Flash)
    }

    /// The same tile with key steps of `keys`.
    pub fn with_keys(self, keys: u32) -> Self {
        CoopTile { keys, ..self }
    }

    /// The same tile rescaling at another slack.
    pub fn with_slack(self, slack: u32) -> Self {
        CoopTile { slack, ..self }
    }

    /// Whether the kernel has this geometry: whole key blocks, split evenly between a row
    /// block's subgroups, at most 4 a subgroup; key steps dividing the splits' runs (64).
    pub fn supported(self) -> bool {
        if self.form == CoopForm::Flash {
            // Two key blocks of 16 (its softmax pairs two lanes a row), one subgroup a row block
            // holding the whole head.
            return self.coop == CoopShape::M16x16
                && self.keys == 32
                && FLASH_ROW_BLOCKS.contains(&self.row_blocks)
                && self.dim_split == 1
                && self.head_tiles <= COOP_DIM_TILES
                && self.q_regs
                && !self.interleave;
        }
        if self.lean {
            return false;
        }
        let blocks = self.keys / self.coop.size();
        self.keys.is_multiple_of(self.coop.size())
            && 64 % self.keys == 0
            && blocks.is_multiple_of(self.dim_split)
            && blocks / self.dim_split <= COOP_KEY_TILES
            && (!self.q_regs || (self.dim_split == 1 && self.rows() <= self.keys))
            && (!self.interleave || self.q_regs)
    }

    /// Every supported tile of `head_dim` in the order [`CoopTile::fitting`] prefers them: the
    /// most rows, then the longest key step, then Q in registers; a Q-in-registers tile's
    /// interleaved twin right after it (same memory, so `fitting` never picks it); then the
    /// flash form's tiles, most rows first (never `fitting`'s pick); then their lean twins, in
    /// the same order.
    pub fn candidates(coop: CoopShape, head_dim: u32) -> impl Iterator<Item = CoopTile> {
        let flash = [false, true].into_iter().flat_map(move |lean| {
            FLASH_ROW_BLOCKS
                .into_iter()
                .map(move |blocks| CoopTile::flash(coop, blocks, head_dim).with_lean(lean))
                .filter(|tile| tile.supported())
        });
        Self::staged_candidates(coop, head_dim).chain(flash)
    }

    /// The staged form's tiles, in [`CoopTile::candidates`]' order.
    fn staged_candidates(coop: CoopShape, head_dim: u32) -> impl Iterator<Item = CoopTile> {
        COOP_ROW_BLOCKS.into_iter().flat_map(move |blocks| {
            COOP_KEY_STEPS.into_iter().flat_map(move |keys| {
                [(true, false), (true, true), (false, false)]
                    .into_iter()
                    .map(move |(q_regs, interleave)| {
                        CoopTile::new(coop, blocks, head_dim)
                            .with_keys(keys)
                            .with_q_regs(q_regs)
                            .with_interleave(interleave)
                    })
                    .filter(|tile| tile.supported())
            })
        })
    }

    /// The first staged candidate whose workgroup memory fits `limit` bytes.
    pub fn fitting(coop: CoopShape, head_dim: u32, limit: u32) -> Option<CoopTile> {
        Self::staged_candidates(coop, head_dim).find(|tile| tile.workgroup_bytes() <= limit)
    }

    /// The first flash candidate whose workgroup memory fits `limit` bytes (the most rows), not
    /// lean.
    pub fn fitting_flash(coop: CoopShape, head_dim: u32, limit: u32) -> Option<CoopTile> {
        Self::candidates(coop, head_dim)
            .filter(|tile| tile.form == CoopForm::Flash && !tile.lean)
            .find(|tile| tile.workgroup_bytes() <= limit)
    }

    pub fn rows(self) -> u32 {
        self.row_blocks * self.coop.size()
    }

    /// Rows × keys, `q` when Q lives in registers (`64x64q`), then `i` when its S chains
    /// interleave (`64x64qi`); the flash form's rows × keys then `f` (`128x32f`), then `l` for
    /// its lean step (`128x32fl`); the bench's and `FAK_ATTN_PREFILL`'s name for the tile (the
    /// slack and dim split follow from the head).
    pub fn label(self) -> String {
        if self.form == CoopForm::Flash {
            let l = if self.lean { "l" } else { "" };
            return format!("{}x{}f{l}", self.rows(), self.keys);
        }
        let q = if self.q_regs { "q" } else { "" };
        let i = if self.interleave { "i" } else { "" };
        format!("{}x{}{q}{i}", self.rows(), self.keys)
    }

    pub fn invocations(self) -> u32 {
        self.row_blocks * self.dim_split * 32
    }

    /// Bytes of workgroup memory the kernel declares (its `var<workgroup>` arrays).
    pub fn workgroup_bytes(self) -> u32 {
        let n = self.coop.size();
        let (rows, keys) = (self.rows(), self.keys);
        let dims = self.head_tiles * n;
        let subgroups = self.row_blocks * self.dim_split;
        if self.form == CoopForm::Flash {
            // K and V tiles; per subgroup an S slab (f32, keys + 4 a row) and a P slab (f16,
            // keys + 8); the rescale mark a vec4.
            let halves = 2 * keys * (dims + 8) + rows * (keys + 8);
            let words = rows * (keys + 4) + 4;
            return 2 * halves + 4 * words;
        }
        // q_tile is two vec4s (8 halves) when Q lives in registers; the rescale mark a vec4.
        let q_halves = if self.q_regs { 8 } else { rows * (dims + 8) };
        let halves = q_halves + keys * (dims + 8) + rows * (keys + 8);
        let words = rows * (keys + 4) + subgroups * n * n + keys + 4;
        2 * halves + 4 * words
    }
}

/// What `FAK_ATTN_PREFILL` asks the engine to run where the adapter has cooperative matrices:
/// unset or empty, on 16×16 matrices the flash form's largest tile that fits (the staged
/// kernel's where none does), and the f32-tile kernel on Metal's 8×8 ones (not yet run on
/// hardware). The flash form is the default since 2026-12-06 #9: on an H100 it passed every
/// prefill test and took the Qwen3-8B's 2048-token prefill from 7537 to 7955 tok/s (attention
/// 39.7 → 25.5 ms a step, 14.1 % → 9.5 %; neutral at 128 tokens), two rounds interleaved
/// (experiments/NOTES.md, session 2026-12-06 #9); with its lean step since 2026-12-06 #10
/// (attention 17.07 → 15.03 ms a step of the same prefill unsplit, the same bits). `tiles`, the f32-tile kernel; `coop`, the
/// staged cooperative-matrix kernel (the default before: [`CoopTile::fitting`]'s tile; passed
/// on the H200 once its workgroup variables were whole 16-byte units and every key of a 64-key
/// step had its base, session 2026-12-05 #5); `flash`, the flash form's largest tile that fits
/// ([`CoopTile::fitting_flash`]; the staged kernel's where none does: a head over 8 dim tiles);
/// without its lean step; `lean`, the same tile with the lean step ([`CoopTile::lean`],
/// experiments/NOTES.md "flash2": the default); a [`CoopTile`] label (`64x32`, `64x64q`: rows ×
/// keys, `q` for Q in registers; `128x32f`, `64x32f`: the flash form's; `128x32fl`: lean), that
/// tile where it fits. Any other value (the removed `lean-k`, `lean-a` among them) is refused.
enum Override {
    Default,
    Tiles,
    Coop,
    Flash,
    Lean,
    Tile(String),
}

fn env_override() -> Override {
    match std::env::var("FAK_ATTN_PREFILL") {
        Ok(v) if v == "coop" => Override::Coop,
        Ok(v) if v == "tiles" => Override::Tiles,
        Ok(v) if v == "flash" => Override::Flash,
        Ok(v) if v == "lean" => Override::Lean,
        Ok(v) if !v.is_empty() => Override::Tile(v),
        _ => Override::Default,
    }
}

/// The choice environment variable `var` names through `named` (unset or empty: `default`; a
/// value that is not Unicode goes to `named` as its error text, which refuses it by name).
fn requested<T>(
    var: &str,
    default: T,
    named: impl Fn(&str) -> Result<T, GpuError>,
) -> Result<T, GpuError> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Ok(v) if v.is_empty() => Ok(default),
        Ok(v) => named(&v),
        Err(e) => named(&format!("{e}")),
    }
}

/// How many workgroups share each row tile's keys in a step ([`AttnPrefill::with_split`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SplitKeys {
    /// Split while the row tiles (× kv heads) give fewer than `target_workgroups` workgroups,
    /// each split keeping at least `min_keys` of the step's keys.
    Fill {
        target_workgroups: u32,
        min_keys: u32,
    },
    /// `n` splits whatever the grid (tests and the bench; 1: never split).
    Fixed(u32),
}

impl SplitKeys {
    /// Measured on the H200 (`matmul-bench --attn`, experiments/NOTES.md, session 2026-12-04
    /// #2): splitting pays in two ways. Few tiles over many keys (Qwen3.5-27B's cached step: 128
    /// tokens, GROUP 6, 4 kv heads = 96 tiles, 2176 keys) go from 2954 µs unsplit to 1173 with 4
    /// splits, 1451 with 6, 1320 with 8: past one wave of the GPU's resident workgroups (132 SMs
    /// × ~4 of these) more splits cost. And a long causal prompt's many tiles (Qwen3-8B's
    /// 512-token chunks: 512 workgroups) still gain 20–35 % with 4–16 splits once the chunk
    /// sits deep in the context (3298 → 2543 µs at 1536 cached keys, 15696 → 10127 at 7680):
    /// the tiles at the chunk's end have far more keys than its start, and splits even them
    /// out. So: a split per 512 keys, while the grid stays under 4096 workgroups. No adapter
    /// fact gives the number of multiprocessors; the figures are the largest GPU measured.
    pub const DEFAULT: SplitKeys = SplitKeys::Fill {
        target_workgroups: 4096,
        min_keys: 512,
    };
    /// The flash form's rule ([`CoopForm::Flash`], where `FAK_ATTN_SPLIT` is unset): split only
    /// while the grid is under one wave of these heavier workgroups. On an H100 (2026-12-06 #9,
    /// the Qwen3-8B's 2048-token prefill: 512-token chunks, 128 workgroups a chunk) the flash
    /// form unsplit ran 8362 tok/s against 7967 under [`SplitKeys::DEFAULT`] (attention 17.1
    /// against 25.4 ms), and in isolation 101 against 54 TFLOP/s at 1536 cached keys; this rule
    /// computes exactly that unsplit grid there, yet still splits a short step over a long
    /// cache (a few row tiles over thousands of keys), where splits paid for the staged kernel.
    pub const FLASH_DEFAULT: SplitKeys = SplitKeys::Fill {
        target_workgroups: 128,
        min_keys: 512,
    };
    /// Every tile's keys in one workgroup (the kernel before splits).
    pub const NEVER: SplitKeys = SplitKeys::Fixed(1);
    /// The variable that overrides [`SplitKeys::DEFAULT`] in [`AttnPrefill::new`] (the prefill
    /// sweep measures other rules on the device; see [`SplitKeys::named`]).
    pub const VAR: &'static str = "FAK_ATTN_SPLIT";

    /// The rule `FAK_ATTN_SPLIT` asks for ([`SplitKeys::named`]; unset: `default`, the form's).
    pub fn requested(default: SplitKeys) -> Result<Self, GpuError> {
        requested(Self::VAR, default, Self::named)
    }

    /// The rule a value of `FAK_ATTN_SPLIT` names: empty, the default; `never`; `N` (that many
    /// splits whatever the grid, 1..=MAX_SPLITS); `fill:T:K` (split while the grid has fewer
    /// than T workgroups, each split keeping at least K keys). Anything else is an error naming
    /// the variable: a measurement must not silently run another rule than the one it names.
    pub fn named(value: &str) -> Result<Self, GpuError> {
        let bad = || {
            shape_error(
                AttnPrefill::NAME,
                format!(
                    "{}={value:?} is neither empty, never, a split count (1..={MAX_SPLITS}) \
                     nor fill:TARGET_WORKGROUPS:MIN_KEYS",
                    Self::VAR
                ),
            )
        };
        let number = |s: &str| s.parse::<u32>().ok().filter(|n| *n > 0);
        match value.split(':').collect::<Vec<_>>()[..] {
            [""] => Ok(Self::DEFAULT),
            ["never"] => Ok(Self::NEVER),
            [n] => number(n)
                .filter(|n| *n <= MAX_SPLITS)
                .map(SplitKeys::Fixed)
                .ok_or_else(bad),
            ["fill", target, keys] => match (number(target), number(keys)) {
                (Some(target_workgroups), Some(min_keys)) => Ok(SplitKeys::Fill {
                    target_workgroups,
                    min_keys,
                }),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    /// The splits of a grid of `workgroups` row tiles × kv heads over `keys` keys (the step's
    /// last position + 1), at most [`MAX_SPLITS`] (the combine keeps a weight per split).
    pub fn splits(self, workgroups: u64, keys: u32) -> u32 {
        let n = match self {
            SplitKeys::Fill {
                target_workgroups,
                min_keys,
            } => {
                let target = u64::from(target_workgroups);
                if workgroups == 0 || workgroups >= target {
                    1
                } else {
                    let by_keys = u64::from(keys.div_ceil(min_keys.max(1)));
                    target.div_ceil(workgroups).min(by_keys)
                }
            }
            SplitKeys::Fixed(n) => u64::from(n),
        };
        n.clamp(1, u64::from(MAX_SPLITS)) as u32
    }
}

/// In which order a step's workgroups take its row tiles ([`AttnPrefill::with_order`]; the
/// kernels' `tile_and_head`, wgsl/attn_prefill_rows.wgsl). Either order runs the same tiles over
/// the same keys and splits, so a row's bits do not depend on it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TileOrder {
    /// Workgroup (x, y) takes row tile x of kv head y: a causal step's shortest tiles start
    /// first, kv head by kv head.
    Rows,
    /// The workgroups, in the order the GPU starts them (x fastest, then y), take the row tiles
    /// from the last (of one sequence: the most keys) down, all kv heads of a tile together; so
    /// where a step has more workgroups than the GPU runs at once, the short tiles fill in
    /// behind the long ones instead of the long ones starting last. Counted for the Qwen3-8B's
    /// 2048-token step on an H100 (experiments/NOTES.md "attn2k": 64 row tiles of 128 rows × 8
    /// kv heads = 512 workgroups, one an SM, tile i running i + 1 key steps of 32): a wave of
    /// 166 key steps a multiprocessor in [`TileOrder::Rows`], 127 longest first, for 126 of work.
    LongFirst,
}

impl TileOrder {
    /// The engine's order where `FAK_ATTN_ORDER` is unset. Longest first since 2026-12-07: on
    /// an H100 the Qwen3-8B's prefill attention took 12.1 ms against 13.3 at a 2048-token step
    /// and 4.5 against 5.3 at 1024, the same at 128 (one wave); experiments/NOTES.md "Session
    /// 2026-12-07 #16".
    pub const DEFAULT: TileOrder = TileOrder::LongFirst;
    /// The variable that overrides [`TileOrder::DEFAULT`] in [`AttnPrefill::new`].
    pub const VAR: &'static str = "FAK_ATTN_ORDER";

    /// The order `FAK_ATTN_ORDER` asks for ([`TileOrder::named`]; unset: `default`).
    pub fn requested(default: TileOrder) -> Result<Self, GpuError> {
        requested(Self::VAR, default, Self::named)
    }

    /// The order a value of `FAK_ATTN_ORDER` names: empty, the default; `rows`; `long` (the
    /// longest tiles first). Anything else is an error naming the variable.
    pub fn named(value: &str) -> Result<Self, GpuError> {
        match value {
            "" => Ok(Self::DEFAULT),
            "rows" => Ok(TileOrder::Rows),
            "long" => Ok(TileOrder::LongFirst),
            _ => Err(shape_error(
                AttnPrefill::NAME,
                format!("{}={value:?} is neither empty, rows nor long", Self::VAR),
            )),
        }
    }

    /// `Params::order` (wgsl/attn_prefill_rows.wgsl's `tile_and_head`).
    fn code(self) -> u32 {
        match self {
            TileOrder::Rows => 0,
            TileOrder::LongFirst => 1,
        }
    }
}

/// Whether the cooperative-matrix kernels sum each row in key runs ([`CoopTile::runs`];
/// the f32-tile kernel always does).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KeyRuns {
    /// Splits cut each tile's keys evenly and the combine weighs them at once: a row's bits
    /// depend on the step once its keys pass a split's (issue 21, experiments/NOTES.md "attn2k").
    Off,
    /// Runs of [`RUN_KEYS`] from key 0, folded in key order, split or not (experiments/NOTES.md
    /// "detcoop").
    On,
}

impl KeyRuns {
    /// The engine's choice where `FAK_ATTN_RUNS` is unset.
    pub const DEFAULT: KeyRuns = KeyRuns::Off;
    /// The variable that overrides [`KeyRuns::DEFAULT`] in [`AttnPrefill::new`].
    pub const VAR: &'static str = "FAK_ATTN_RUNS";

    /// The choice `FAK_ATTN_RUNS` asks for ([`KeyRuns::named`]; unset: `default`).
    pub fn requested(default: KeyRuns) -> Result<Self, GpuError> {
        requested(Self::VAR, default, Self::named)
    }

    /// The choice a value of `FAK_ATTN_RUNS` names: empty, the default; `on`; `off`. Anything
    /// else is an error naming the variable.
    pub fn named(value: &str) -> Result<Self, GpuError> {
        match value {
            "" => Ok(Self::DEFAULT),
            "on" => Ok(KeyRuns::On),
            "off" => Ok(KeyRuns::Off),
            _ => Err(shape_error(
                AttnPrefill::NAME,
                format!("{}={value:?} is neither empty, on nor off", Self::VAR),
            )),
        }
    }
}

/// `Params` of wgsl/attn_prefill.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    kv: super::kv_cache::KvGeometry,
    q: support::ViewParams,
    o: support::ViewParams,
    scale: f32,
    max_tokens: u32,
    /// [`TileOrder::code`].
    order: u32,
    pad: u32,
}

/// What a prefill binding reads and writes.
#[derive(Clone, Copy)]
pub struct PrefillIo<'a> {
    /// The queries: n_head heads of head_dim per token.
    pub q: View<'a>,
    /// The output, n_head heads of head_dim per token.
    pub o: View<'a>,
    /// The cache, already holding this step's k and v (written by `rope_kv` before).
    pub cache: &'a KvCache,
    pub pages: &'a PageTable,
    /// The tokens' positions (ascending, one sequence) and page-table row.
    pub positions: Positions<'a>,
    pub step: &'a StepBuffer,
    /// The most tokens one step has.
    pub max_tokens: u32,
    /// Where split steps keep their partials (one buffer can serve every layer: their passes
    /// run one after another); [`AttnPrefill::scratch_bytes`] says how much the binding's steps
    /// can use. A step splits only as far as its partials fit (None: never).
    pub scratch: Option<&'a wgpu::Buffer>,
}

/// The prefill-attention kernel, specialised for one [`AttnShape`].
pub struct AttnPrefill {
    variant: KernelPaths,
    shape: AttnShape,
    tile: Option<CoopTile>,
    split: SplitKeys,
    order: TileOrder,
    layout: wgpu::BindGroupLayout,
    /// main, then combine, each with Step positions then with the token table.
    pipelines: Vec<wgpu::ComputePipeline>,
    /// Stand in for the token table (read-only) and, separately, the scratch (read-write) when
    /// a binding has none: one buffer cannot be bound both ways in a dispatch.
    placeholder: wgpu::Buffer,
    scratch_placeholder: wgpu::Buffer,
}

/// A layer's queries and cache bound for [`AttnPrefill::encode`].
pub struct PrefillBinding {
    group: wgpu::BindGroup,
    table: bool,
    max_tokens: u32,
    /// Partials (one row and split each) the bound scratch holds.
    scratch_partials: u64,
}

impl Kernel for AttnPrefill {
    const NAME: &'static str = "attn_prefill";
    const AXES: Axes = Axes {
        subgroup: true,
        f16: true,
        coop_matrix: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let shape = AttnShape::EXAMPLE;
        let tile = variant.coop_matrix.map(|coop| {
            CoopTile::fitting(coop, shape.head_dim, COOP_WORKGROUP_BYTES)
                .expect("a tile of the example shape fits")
        });
        Self::source_for(variant, shape, tile).expect("the example shape is supported")
    }

    /// Fallback, f16 cache, and the cooperative-matrix shapes (which alone use subgroups: their
    /// workgroups split into subgroups by `subgroup_id`).
    fn variants() -> Vec<KernelPaths> {
        Self::AXES
            .variants()
            .into_iter()
            .filter(|v| v.subgroup == v.coop_matrix.is_some())
            .collect()
    }

    /// The cooperative-matrix kernel where `allowed` has cooperative matrices (with subgroups,
    /// which it uses), else the f32-tile kernel on the cache type `allowed` gives.
    fn select(allowed: KernelPaths) -> KernelPaths {
        let paths = Self::AXES.select(allowed);
        if paths.coop_matrix.is_some() && paths.subgroup {
            paths
        } else {
            KernelPaths {
                subgroup: false,
                coop_matrix: None,
                ..paths
            }
        }
    }
}

impl AttnPrefill {
    /// The module and pipelines of `variant` specialised for `shape`; `tile` is the workgroup of
    /// a cooperative-matrix variant (None for the others).
    pub fn source_for(
        variant: KernelPaths,
        shape: AttnShape,
        tile: Option<CoopTile>,
    ) -> Result<KernelSource, GpuError> {
        shape.check(Self::NAME)?;
        if shape.head_dim > MAX_HEAD_DIM {
            return Err(shape_error(
                Self::NAME,
                format!("{shape:?}: head_dim above {MAX_HEAD_DIM} is not supported"),
            ));
        }
        if !shape.head_dim.is_multiple_of(4) {
            return Err(shape_error(
                Self::NAME,
                format!("{shape:?}: head_dim must be a multiple of 4 (the combine reads vec4s)"),
            ));
        }
        let module = WgslModule::new(variant)
            .with_const("HEAD_DIM", shape.head_dim)
            .with_const("GROUP", shape.group())
            .with(support::kv_scalar(variant.f16))
            .with(support::KV_PAGED)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(support::POSITIONS)
            .with(ATTN_COMBINE)
            .with(ATTN_PREFILL_ROWS);
        let module = match (variant.coop_matrix, tile) {
            (None, None) => module.with(ATTN_PREFILL),
            (Some(coop), Some(tile)) if tile.coop == coop => match tile.form {
                CoopForm::Staged => Self::staged_module(module, tile),
                CoopForm::Flash => module
                    .with_const("RUN_KEYS", tile.run_keys())
                    .with_const("ROW_BLOCKS", tile.row_blocks)
                    .with_const("KEY_STEP", tile.keys)
                    .with_const("HEAD_TILES", tile.head_tiles)
                    .with_const("SLACK", tile.slack)
                    .with_const("LEAN", u32::from(tile.lean))
                    .with(wgsl::MATMUL_COOP16)
                    .with(ATTN_PREFILL_FLASH),
            },
            _ => {
                return Err(shape_error(
                    Self::NAME,
                    format!("variant {variant} with tile {tile:?}"),
                ));
            }
        };
        let spec = |entry_point, table: bool| PipelineSpec {
            label: format!("attn_prefill {entry_point} {shape:?} {tile:?} token_table={table}"),
            entry_point,
            constants: vec![("TOKEN_TABLE", f64::from(table))],
        };
        let pipelines = vec![
            spec("main", false),
            spec("main", true),
            spec("combine", false),
            spec("combine", true),
        ];
        Ok(KernelSource {
            module,
            slots: SLOTS,
            pipelines,
        })
    }

    /// `module` completed with the staged kernel (wgsl/attn_prefill_coop.wgsl) for `tile`.
    fn staged_module(module: WgslModule, tile: CoopTile) -> WgslModule {
        module
            .with_const("RUN_KEYS", tile.run_keys())
            .with_const("ROW_BLOCKS", tile.row_blocks)
            .with_const("KEY_STEP", tile.keys)
            .with_const("HEAD_TILES", tile.head_tiles)
            .with_const("DIM_SPLIT", tile.dim_split)
            .with_const("SLACK", tile.slack)
            .with_const("Q_REGS", u32::from(tile.q_regs))
            .with_const("S_INTERLEAVE", u32::from(tile.interleave))
            .with(match tile.coop {
                CoopShape::M8x8 => wgsl::MATMUL_COOP8,
                CoopShape::M16x16 => wgsl::MATMUL_COOP16,
            })
            .with(ATTN_PREFILL_COOP)
    }

    /// The cooperative-matrix tile `FAK_ATTN_PREFILL` asks for (None: the f32-tile kernel). A
    /// label that names no tile of this head is an error (a measurement must not silently run
    /// another kernel); a named tile over the device's workgroup memory gives the fitting one.
    fn chosen_tile(
        coop: CoopShape,
        head_dim: u32,
        limit: u32,
    ) -> Result<Option<CoopTile>, GpuError> {
        let over = env_override();
        // The flash form's largest fitting tile, with the lean step or not; the staged kernel's
        // tile where no flash tile fits.
        let flash = |lean: bool| {
            CoopTile::fitting_flash(coop, head_dim, limit)
                .map(|tile| tile.with_lean(lean))
                .or_else(|| CoopTile::fitting(coop, head_dim, limit))
        };
        Ok(match over {
            Override::Default if coop == CoopShape::M16x16 => flash(true),
            Override::Default | Override::Tiles => None,
            Override::Coop => CoopTile::fitting(coop, head_dim, limit),
            Override::Flash => flash(false),
            Override::Lean => flash(true),
            Override::Tile(label) => {
                let mut tiles = CoopTile::candidates(coop, head_dim);
                let named = tiles.find(|tile| tile.label() == label).ok_or_else(|| {
                    let labels: Vec<String> = CoopTile::candidates(coop, head_dim)
                        .map(CoopTile::label)
                        .collect();
                    shape_error(
                        Self::NAME,
                        format!(
                            "FAK_ATTN_PREFILL={label:?} is neither tiles, coop, flash, lean \
                             nor a tile of head dim {head_dim} ({})",
                            labels.join(", ")
                        ),
                    )
                })?;
                Some(named)
                    .filter(|tile| tile.workgroup_bytes() <= limit)
                    .or_else(|| CoopTile::fitting(coop, head_dim, limit))
            }
        })
    }

    /// Builds the variant `paths` selects ([`AttnPrefill::select`]) for `shape`; on cooperative
    /// matrices the tile `FAK_ATTN_PREFILL` leaves chosen ([`AttnPrefill::chosen_tile`]: by
    /// default on 16×16 matrices the tile with the most rows whose workgroup memory the device
    /// has), or the f32-tile kernel where none is; split by `FAK_ATTN_SPLIT`'s rule
    /// ([`SplitKeys::requested`]), its tiles in `FAK_ATTN_ORDER`'s order
    /// ([`TileOrder::requested`]), a cooperative-matrix tile summing in key runs where
    /// `FAK_ATTN_RUNS` asks ([`KeyRuns::requested`]).
    pub fn new(ctx: &GpuContext, paths: KernelPaths, shape: AttnShape) -> Result<Self, GpuError> {
        let variant = Self::select(paths);
        let limit = ctx.device.limits().max_compute_workgroup_storage_size;
        let runs = KeyRuns::requested(KeyRuns::DEFAULT)? == KeyRuns::On;
        let tile = match variant.coop_matrix {
            Some(coop) => Self::chosen_tile(coop, shape.head_dim, limit)?,
            None => None,
        }
        .map(|tile| tile.with_runs(runs));
        let default = match tile {
            Some(tile) if tile.form == CoopForm::Flash => SplitKeys::FLASH_DEFAULT,
            _ => SplitKeys::DEFAULT,
        };
        let split = SplitKeys::requested(default)?;
        let order = TileOrder::requested(TileOrder::DEFAULT)?;
        let kernel = match tile {
            Some(tile) => Self::with_tile(ctx, variant, shape, Some(tile)),
            None => {
                let scalar = KernelPaths {
                    subgroup: false,
                    coop_matrix: None,
                    ..variant
                };
                Self::with_tile(ctx, scalar, shape, None)
            }
        };
        Ok(kernel?.with_split(split).with_order(order))
    }

    /// Builds `variant` (one of [`AttnPrefill::variants`]) with the cooperative-matrix workgroup
    /// `tile` (None for the other variants).
    pub fn with_tile(
        ctx: &GpuContext,
        variant: KernelPaths,
        shape: AttnShape,
        tile: Option<CoopTile>,
    ) -> Result<Self, GpuError> {
        if let Some(tile) = tile {
            if !tile.supported() {
                return Err(shape_error(
                    Self::NAME,
                    format!("{tile:?} is not supported"),
                ));
            }
            let limit = ctx.device.limits().max_compute_workgroup_storage_size;
            if tile.workgroup_bytes() > limit {
                return Err(shape_error(
                    Self::NAME,
                    format!("{tile:?} needs more than {limit} bytes of workgroup memory"),
                ));
            }
        }
        let built = build(
            ctx,
            &KernelVariant {
                kernel: Self::NAME,
                paths: variant,
                source: Self::source_for(variant, shape, tile)?,
            },
        )?;
        Ok(AttnPrefill {
            variant,
            shape,
            tile,
            split: SplitKeys::DEFAULT,
            order: TileOrder::DEFAULT,
            layout: built.layout,
            pipelines: built.pipelines,
            placeholder: support::placeholder(ctx),
            scratch_placeholder: support::placeholder(ctx),
        })
    }

    /// The same kernel splitting keys by another rule (tests force splits; the bench compares).
    pub fn with_split(mut self, split: SplitKeys) -> Self {
        self.split = split;
        self
    }

    pub fn split(&self) -> SplitKeys {
        self.split
    }

    /// The same kernel taking its row tiles in another order (set before [`AttnPrefill::bind`]:
    /// a binding's parameters carry it).
    pub fn with_order(mut self, order: TileOrder) -> Self {
        self.order = order;
        self
    }

    pub fn order(&self) -> TileOrder {
        self.order
    }

    /// Bytes of one row's partial for one split: HEAD_DIM sums, m and l.
    fn partial_bytes(&self) -> u64 {
        4 * u64::from(self.shape.head_dim + 2)
    }

    /// Bytes of scratch that let every step of up to `max_tokens` tokens over up to `max_keys`
    /// keys split as the rule asks (0 when it never splits them).
    pub fn scratch_bytes(&self, max_tokens: u32, max_keys: u32) -> u64 {
        (1..=max_tokens)
            .map(|n| {
                let splits = self.rule_splits(n, max_keys);
                if splits == 1 {
                    return 0;
                }
                u64::from(n) * u64::from(self.shape.n_head) * u64::from(splits)
            })
            .max()
            .unwrap_or(0)
            * self.partial_bytes()
    }

    /// The splits a step of `n_tokens` tokens over `keys` keys runs in: the rule's count, as far
    /// as the binding's scratch holds the partials.
    pub fn splits(&self, binding: &PrefillBinding, n_tokens: u32, keys: u32) -> u32 {
        let n = n_tokens.min(binding.max_tokens);
        let rows = u64::from(n) * u64::from(self.shape.n_head);
        let fit = binding.scratch_partials / rows.max(1);
        let splits = self.rule_splits(n, keys);
        if self.sums_in_runs() && u64::from(splits) > fit {
            // Fewer splits than runs would sum a row otherwise: all in one workgroup instead.
            return 1;
        }
        u64::from(splits).min(fit).max(1) as u32
    }

    /// The rule's splits of a step of `n` tokens over `keys` keys. A kernel summing each row in
    /// key runs of [`RUN_KEYS`] ([`AttnPrefill::sums_in_runs`]) splits only by whole runs, one a
    /// split, so a split step computes the bits of an unsplit one (issue 21): where the rule
    /// splits, it splits into the longest tile's runs (at most [`MAX_SPLITS`], else not).
    fn rule_splits(&self, n: u32, keys: u32) -> u32 {
        let splits = self.split.splits(self.workgroups(n), keys);
        if !self.sums_in_runs() || splits == 1 {
            return splits;
        }
        let runs = keys.div_ceil(RUN_KEYS);
        if runs <= MAX_SPLITS { runs.max(1) } else { 1 }
    }

    /// Whether the kernel sums each row in key runs: the f32-tile kernel always, a
    /// cooperative-matrix tile with [`CoopTile::runs`].
    pub fn sums_in_runs(&self) -> bool {
        self.tile.is_none_or(|tile| tile.runs)
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The cooperative-matrix workgroup (None for the f32-tile kernel).
    pub fn tile(&self) -> Option<CoopTile> {
        self.tile
    }

    /// The attention shape it was built for.
    pub fn shape(&self) -> AttnShape {
        self.shape
    }

    /// (token, query head) rows per workgroup. A tile reads the page-table row of its first
    /// token (the host keeps two sequences out of one tile: `StepIo::pad_row`).
    pub fn rows_per_tile(&self) -> u32 {
        self.tile.map_or(SCALAR_ROWS, CoopTile::rows)
    }

    /// The cache type this kernel reads.
    pub fn dtype(&self) -> KvDtype {
        KvDtype::of(self.variant)
    }

    /// Binds one layer's prefill attention (see [`PrefillIo`]).
    pub fn bind(&self, ctx: &GpuContext, io: PrefillIo<'_>) -> Result<PrefillBinding, GpuError> {
        let PrefillIo {
            q,
            o,
            cache,
            pages,
            positions,
            step,
            max_tokens,
            scratch,
        } = io;
        let shape = self.shape;
        let layout = cache.layout;
        layout.check(Self::NAME)?;
        check_dtype(Self::NAME, &layout, self.dtype())?;
        if (layout.n_kv, layout.head_dim) != (shape.n_kv, shape.head_dim) {
            return Err(shape_error(
                Self::NAME,
                format!(
                    "the cache has {} kv heads of {}, the kernel was built for {shape:?}",
                    layout.n_kv, layout.head_dim
                ),
            ));
        }
        if q.buffer == o.buffer {
            return Err(shape_error(Self::NAME, "q and o must be different buffers"));
        }
        let (n_head, hd) = (shape.n_head, shape.head_dim);
        let q_binding = view_binding(ctx, Self::NAME, "q", &q, max_tokens, n_head, hd)?;
        let o_binding = view_binding(ctx, Self::NAME, "o", &o, max_tokens, n_head, hd)?;
        let cache_words = layout.cache_bytes().div_ceil(4);
        let k_cache = words(ctx, Self::NAME, "the k cache", &cache.k, cache_words)?;
        let v_cache = words(ctx, Self::NAME, "the v cache", &cache.v, cache_words)?;
        let table = pages.binding(ctx, Self::NAME, &layout)?;
        let slots = positions_binding(ctx, Self::NAME, positions, &self.placeholder, max_tokens)?;
        // The scratch's whole partials, as far as one binding reaches.
        let scratch_partials = scratch.map_or(0, |buffer| {
            buffer.size().min(ctx.max_binding_size()) / self.partial_bytes()
        });
        let partials = match scratch {
            Some(buffer) if scratch_partials > 0 => words(
                ctx,
                Self::NAME,
                "the split partials",
                buffer,
                scratch_partials * self.partial_bytes() / 4,
            )?,
            _ => self.scratch_placeholder.as_entire_binding(),
        };
        let tiles = self.tiles(max_tokens);
        let limit = ctx.device.limits().max_compute_workgroups_per_dimension;
        if tiles > u64::from(limit) {
            return Err(GpuError::TooLarge {
                what: format!("prefill attention over {max_tokens} tokens (row tiles)"),
                size: tiles,
                limit: u64::from(limit),
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        let params = uniform(
            ctx,
            "attn_prefill params",
            &Params {
                kv: layout.geometry(),
                q: q.params(),
                o: o.params(),
                scale: shape.scale(),
                max_tokens,
                order: self.order.code(),
                pad: 0,
            },
        );
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("attn_prefill"),
            layout: &self.layout,
            entries: &[
                entry(0, q_binding),
                entry(1, k_cache),
                entry(2, v_cache),
                entry(3, table),
                entry(4, slots),
                entry(5, o_binding),
                entry(6, params.as_entire_binding()),
                entry(7, step.buffer.as_entire_binding()),
                entry(8, partials),
            ],
        });
        Ok(PrefillBinding {
            group,
            table: positions.is_table(),
            max_tokens,
            scratch_partials,
        })
    }

    /// Row tiles (workgroups per kv head) for `n_tokens` tokens.
    fn tiles(&self, n_tokens: u32) -> u64 {
        (u64::from(n_tokens) * u64::from(self.shape.group()))
            .div_ceil(u64::from(self.rows_per_tile()))
    }

    /// Row tiles × kv heads for `n_tokens` tokens: the workgroups of an unsplit step.
    fn workgroups(&self, n_tokens: u32) -> u64 {
        self.tiles(n_tokens) * u64::from(self.shape.n_kv)
    }

    /// Records the dispatches for a step of `n_tokens` tokens (at most the binding's
    /// `max_tokens`) whose last token sits at position `keys - 1`: the attention, split as
    /// [`AttnPrefill::splits`] says, and the combine when it splits. `keys` only steers the
    /// split count (and the bytes recorded); the kernel finds each tile's keys itself. Returns
    /// what it recorded.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &PrefillBinding,
        n_tokens: u32,
        keys: u32,
    ) -> Result<Recorded, GpuError> {
        let n = n_tokens.min(binding.max_tokens);
        let splits = self.splits(binding, n, keys);
        let table = usize::from(binding.table);
        pass.set_bind_group(0, &binding.group, &[]);
        pass.set_pipeline(&self.pipelines[table]);
        // bind() checked the tiles of max_tokens against the per-dimension limit.
        pass.dispatch_workgroups(self.tiles(n) as u32, self.shape.n_kv, splits);
        if splits > 1 {
            pass.set_pipeline(&self.pipelines[2 + table]);
            pass.dispatch_workgroups(n.div_ceil(splits), self.shape.n_head, splits);
        }
        let bytes = attention_bytes(&self.shape, self.dtype(), n, keys);
        Ok(Recorded::new(
            Self::NAME,
            1 + usize::from(splits > 1),
            bytes,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{
        ATTN_PREFILL, CoopForm, CoopShape, CoopTile, KeyRuns, RUN_KEYS, SplitKeys, TileOrder,
    };

    /// The host splits the f32-tile kernel by the runs the kernel sums in.
    #[test]
    fn the_host_key_run_matches_the_wgsl() {
        let line = format!("const RUN_KEYS: u32 = {RUN_KEYS}u;");
        assert!(
            ATTN_PREFILL.text.contains(&line),
            "wgsl/attn_prefill.wgsl lacks {line}"
        );
    }

    /// The flash form's rule leaves a grid of a wave unsplit (the 8B's 512-token chunks: 16 row
    /// tiles × 8 kv heads, up to 2048 keys), as measured, and splits a short step over a long
    /// cache by its keys (one row tile × 4 kv heads over 4096 keys: 8 splits of 512).
    #[test]
    fn the_flash_rule_leaves_a_wave_whole_and_splits_a_short_step_over_a_long_cache() {
        let split = SplitKeys::FLASH_DEFAULT;
        assert_eq!(split.splits(128, 2048), 1);
        assert_eq!(split.splits(4, 4096), 8);
        assert_eq!(split.splits(8, 300), 1);
        assert!(SplitKeys::DEFAULT.splits(128, 2048) > 1);
    }

    /// The default rule: a split per 512 keys while the grid stays under 4096 workgroups, so
    /// the 27B's cached step and the deep chunks of a long prompt split, a short context does
    /// not, and a split count fits the combine.
    #[test]
    fn the_default_rule_splits_by_keys_while_the_grid_is_small() {
        let split = SplitKeys::DEFAULT;
        // 27B: 128 tokens · GROUP 6 / 32 rows = 24 tiles × 4 kv heads, after 2048 cached tokens.
        assert_eq!(split.splits(96, 2176), 5);
        assert_eq!(split.splits(96, 600), 2);
        assert_eq!(split.splits(96, 200), 1);
        // 8B: 512-token chunks (64 tiles × 8 kv heads): none at the start, 4 after 1536 cached,
        // 8 (the grid's limit) after 7680.
        assert_eq!(split.splits(512, 512), 1);
        assert_eq!(split.splits(512, 2048), 4);
        assert_eq!(split.splits(512, 8192), 8);
        assert_eq!(split.splits(4096, 1 << 20), 1);
        assert_eq!(split.splits(1, 1 << 20), 64);
        assert_eq!(SplitKeys::Fixed(1000).splits(1, 10), 64);
        assert_eq!(SplitKeys::NEVER.splits(1, 1 << 20), 1);
    }

    /// The interleaved S chains are a twin of each Q-in-registers tile, named apart and never
    /// chosen by `fitting` (the default stays the tile it was).
    #[test]
    fn interleaved_tiles_are_named_twins_the_default_never_picks() {
        for head_dim in [64, 128, 256] {
            let tiles: Vec<CoopTile> = CoopTile::candidates(CoopShape::M16x16, head_dim).collect();
            let labels: std::collections::BTreeSet<String> =
                tiles.iter().map(|t| t.label()).collect();
            assert_eq!(labels.len(), tiles.len(), "{head_dim}: labels repeat");
            for tile in tiles.iter().filter(|t| t.interleave) {
                assert!(tile.q_regs, "{tile:?}");
                let twin = tile.with_interleave(false);
                assert!(tiles.contains(&twin), "{tile:?}");
                assert_eq!(tile.workgroup_bytes(), twin.workgroup_bytes());
            }
            let picked = CoopTile::fitting(CoopShape::M16x16, head_dim, 49152).unwrap();
            assert!(!picked.interleave, "{head_dim}: {picked:?}");
        }
        let tile = CoopTile::fitting(CoopShape::M16x16, 128, 49152).unwrap();
        assert_eq!(tile.label(), "64x64q");
        assert_eq!(tile.with_interleave(true).label(), "64x64qi");
    }

    /// The flash form's tiles are candidates named apart from the staged ones, never `fitting`'s
    /// pick; at head 128 both row counts fit 48 KiB (128 rows: 46 096 bytes), at head 256 there
    /// is none (more than 8 dim tiles a subgroup).
    #[test]
    fn flash_tiles_are_named_candidates_the_default_never_picks() {
        let coop = CoopShape::M16x16;
        let flash: Vec<CoopTile> = CoopTile::candidates(coop, 128)
            .filter(|t| t.form == CoopForm::Flash && !t.lean)
            .collect();
        let labels: Vec<String> = flash.iter().map(|t| t.label()).collect();
        assert_eq!(labels, ["128x32f", "64x32f", "32x32f"]);
        assert_eq!(flash[0].workgroup_bytes(), 46096);
        assert_eq!(flash[1].workgroup_bytes(), 31760);
        assert_eq!(CoopTile::fitting_flash(coop, 128, 49152), Some(flash[0]));
        assert_eq!(CoopTile::fitting_flash(coop, 128, 40000), Some(flash[1]));
        assert_eq!(CoopTile::fitting_flash(coop, 256, 49152), None);
        assert_eq!(CoopTile::fitting_flash(CoopShape::M8x8, 64, 49152), None);
        for head_dim in [40, 64, 128, 256] {
            let picked = CoopTile::fitting(coop, head_dim, 49152).unwrap();
            assert_eq!(picked.form, CoopForm::Staged, "{head_dim}");
        }
        assert_eq!(flash[0].rows(), 128);
        assert_eq!(flash[0].invocations(), 256);
    }

    /// Each flash tile has a lean twin (same geometry and memory), named apart, after every plain
    /// flash tile, never `fitting_flash`'s pick; only the flash form has a lean step.
    #[test]
    fn lean_tiles_are_named_twins_of_the_flash_tiles() {
        let coop = CoopShape::M16x16;
        let tiles: Vec<CoopTile> = CoopTile::candidates(coop, 128)
            .filter(|t| t.form == CoopForm::Flash)
            .collect();
        let labels: Vec<String> = tiles.iter().map(|t| t.label()).collect();
        let want = [
            "128x32f", "64x32f", "32x32f", "128x32fl", "64x32fl", "32x32fl",
        ];
        assert_eq!(labels, want);
        for (i, plain) in tiles[..3].iter().enumerate() {
            let lean = tiles[3 + i];
            assert_eq!(plain.with_lean(true), lean);
            assert_eq!(plain.workgroup_bytes(), lean.workgroup_bytes());
        }
        let picked = CoopTile::fitting_flash(coop, 128, 49152).unwrap();
        assert!(!picked.lean);
        let staged = CoopTile::fitting(coop, 128, 49152).unwrap();
        assert!(!staged.with_lean(true).supported());
        let wide = CoopTile::candidates(coop, 256).filter(|t| t.lean);
        assert_eq!(wide.count(), 0);
    }

    /// `FAK_ATTN_ORDER` names an order or is refused, naming the variable; each order has its
    /// own code in the kernels' parameters (0: the default, tile x of kv head y).
    #[test]
    fn the_tile_order_is_chosen_by_name() {
        assert_eq!(TileOrder::named("").unwrap(), TileOrder::DEFAULT);
        assert_eq!(TileOrder::named("rows").unwrap(), TileOrder::Rows);
        assert_eq!(TileOrder::named("long").unwrap(), TileOrder::LongFirst);
        assert_eq!(TileOrder::Rows.code(), 0);
        assert_eq!(TileOrder::LongFirst.code(), 1);
        for bad in ["longest", "1", "Long", "rows:long"] {
            let err = TileOrder::named(bad).unwrap_err().to_string();
            assert!(err.contains(TileOrder::VAR), "{bad}: {err}");
        }
    }

    /// `FAK_ATTN_RUNS` names a choice or is refused, naming the variable; a tile's runs set its
    /// kernels' `RUN_KEYS` (0: even splits) and nothing of its geometry or name.
    #[test]
    fn key_runs_are_chosen_by_name() {
        assert_eq!(KeyRuns::named("").unwrap(), KeyRuns::DEFAULT);
        assert_eq!(KeyRuns::named("on").unwrap(), KeyRuns::On);
        assert_eq!(KeyRuns::named("off").unwrap(), KeyRuns::Off);
        for bad in ["1", "On", "yes", "on:512"] {
            let err = KeyRuns::named(bad).unwrap_err().to_string();
            assert!(err.contains(KeyRuns::VAR), "{bad}: {err}");
        }
        for tile in CoopTile::candidates(CoopShape::M16x16, 128) {
            let runs = tile.with_runs(true);
            assert_eq!((tile.run_keys(), runs.run_keys()), (0, RUN_KEYS));
            assert_eq!(runs.label(), tile.label());
            assert_eq!(runs.workgroup_bytes(), tile.workgroup_bytes());
        }
    }

    /// `FAK_ATTN_SPLIT` names a rule or is refused, naming the variable.
    #[test]
    fn the_split_rule_is_chosen_by_name() {
        assert_eq!(SplitKeys::named("").unwrap(), SplitKeys::DEFAULT);
        assert_eq!(SplitKeys::named("never").unwrap(), SplitKeys::NEVER);
        assert_eq!(SplitKeys::named("4").unwrap(), SplitKeys::Fixed(4));
        assert_eq!(
            SplitKeys::named("fill:2048:1024").unwrap(),
            SplitKeys::Fill {
                target_workgroups: 2048,
                min_keys: 1024
            }
        );
        for bad in [
            "0",
            "65",
            "fill:2048",
            "fill:0:512",
            "fill:x:512",
            "often",
            "4:4",
        ] {
            let err = SplitKeys::named(bad).unwrap_err().to_string();
            assert!(err.contains(SplitKeys::VAR), "{bad}: {err}");
        }
    }
}
