//! `attn_decode`: one query token per sequence against its paged KV cache, GQA, split across
//! workgroups along the keys with a combining pass (wgsl/attn_decode.wgsl). Where the integer
//! mat-vec reads `W_o`'s input, the kernel also writes o as its q8 blocks ([`DecodeIo::o_q8`]),
//! so that product needs no quantize dispatch. Its rope form ([`AttnDecode::build_rope`],
//! wgsl/attn_decode_rope.wgsl) also does `rope_kv`'s work for the step (the norm and rotation of
//! q and k, the cache write of k and v), so a decode step needs no `rope_kv` dispatch.

use super::delta_state::wgsl::{
    ROW_SUM_SUBGROUP, ROW_SUM_WORKGROUP, ROW_SUM4_SUBGROUP, ROW_SUM4_WORKGROUP,
};
use super::kv_cache::{KvCache, KvDtype, check_dtype};
use super::quantize_q8::{Q8_BLOCK, Q8Vectors};
use super::rope::{ROPE_ANGLE, RopePairing, RopeTable};
use super::rope_kv::{self, HeadNorms};
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
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
use crate::gpu::step::PageTable;
use crate::gpu::step::StepBuffer;

const ATTN_DECODE: WgslFile = step_wgsl!("attn_decode.wgsl");
/// The default module's caches, read-only.
const ATTN_DECODE_READ: WgslFile = step_wgsl!("attn_decode_read.wgsl");
/// The rope form's entry point, its read-write caches and rope bindings.
const ATTN_DECODE_ROPE: WgslFile = step_wgsl!("attn_decode_rope.wgsl");
const ROW_LANES_SUBGROUP: WgslFile = step_wgsl!("row_lanes_subgroup.wgsl");
const ROW_LANES_WORKGROUP: WgslFile = step_wgsl!("row_lanes_workgroup.wgsl");
/// The combine of split-K attention, shared with the prefill attention.
pub(super) const ATTN_COMBINE: WgslFile = step_wgsl!("attn_combine.wgsl");
/// q, k_cache, v_cache, page_table, token_slots, partials, o, params, step, gate, yq, yd.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
];
/// The rope form's: [`SLOTS`] with the caches read-write, then k_in, v_in, q_norm, k_norm,
/// table, rope params.
const ROPE_SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::Uniform,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Uniform,
];
/// Teams of `row_lanes` lanes per workgroup, each walking its own keys (`TEAMS` of the WGSL).
const TEAMS: u32 = 8;
/// Lanes per key row on the SUBGROUP path: the adapter's smallest subgroup, at most 32 (a head of
/// 128 then sits at 4 dims per lane; wider rows would leave lanes with one or two).
const MAX_ROW_LANES: u32 = 32;
/// Lanes per key row on the fallback path, whose row sums go through workgroup memory.
const FALLBACK_ROW_LANES: u32 = 16;
/// Most accumulators a lane holds (GROUP query heads × its dims; its query slice is as large):
/// past this the registers spill whatever the driver does.
const MAX_LANE_ACC: u32 = 192;
const MAX_GROUP: u32 = 32;
/// Most splits a binding may have (`MAX_SPLITS` of wgsl/attn_combine.wgsl: the combine pass
/// keeps one weight per split in workgroup memory).
pub const MAX_SPLITS: u32 = 64;

/// The most keys [`AttnDecode::with_split_keys`] takes (more is the same cut for any context a
/// cache holds, and keeps the WGSL's `kv_len + size − 1` inside u32).
const MAX_SPLIT_KEYS: u32 = 1 << 24;

/// How a team walks its keys (`KEYS` of wgsl/attn_decode.wgsl): the form of the kernel's key
/// loop. Both give the reference's attention; [`KeyWalk::from_env`] picks one per process, so an
/// A/B of the two runs on one binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyWalk {
    /// Four consecutive keys per team and step, their rows loaded together, their scores summed
    /// in one vec4 butterfly and the online softmax rescaled once per step
    /// (`FAK_ATTN_DECODE=tiles`; the default until 2026-12-06 #9).
    Tiles,
    /// One key per team and step, the next key's rows loaded while the current one is scored
    /// (the form before 2026-12-05 #6; `FAK_ATTN_DECODE=old`).
    OneKey,
    /// [`KeyWalk::Tiles`] with the next step's four rows loaded before the current ones are
    /// scored: two tiles in flight per team, the loads overlapping the butterflies and exp2
    /// (the same arithmetic in the same order as `Tiles`, so the same bits). The default since
    /// 2026-12-06 #9, with [`default_max_splits`]: alone it lost at depth 8192 on an H100, with
    /// the split cap it wins at every depth (below).
    Ahead,
}

impl KeyWalk {
    /// Every form, for the tests.
    pub const ALL: [KeyWalk; 3] = [KeyWalk::Tiles, KeyWalk::OneKey, KeyWalk::Ahead];

    /// [`KeyWalk::OneKey`] where `FAK_ATTN_DECODE=old`, [`KeyWalk::Tiles`] where it is `tiles`,
    /// else [`KeyWalk::Ahead`].
    pub fn from_env() -> KeyWalk {
        match std::env::var("FAK_ATTN_DECODE").as_deref() {
            Ok("old") => KeyWalk::OneKey,
            Ok("tiles") => KeyWalk::Tiles,
            _ => KeyWalk::Ahead,
        }
    }

    /// Keys per team and step (`KEYS`).
    pub fn keys(self) -> u32 {
        match self {
            KeyWalk::Tiles | KeyWalk::Ahead => 4,
            KeyWalk::OneKey => 1,
        }
    }

    /// Whether the next step's rows are loaded before the current ones are scored (`AHEAD`).
    fn ahead(self) -> bool {
        self == KeyWalk::Ahead
    }

    /// Keys per workgroup and step (`STEP`): a split covers whole steps.
    pub fn step(self) -> u32 {
        TEAMS * self.keys()
    }

    /// How the kernel cuts a sequence of `kv_len` keys at a binding's `n_split`
    /// (`split_chunks` of the WGSL) with splits of at least one step: (keys per split, splits
    /// holding keys). The combine pass runs for the sequence only when the count is above 1.
    pub fn cut(self, kv_len: u32, n_split: u32) -> (u32, u32) {
        self.cut_at_least(kv_len, n_split, self.step())
    }

    /// [`KeyWalk::cut`] with splits of at least `split_keys` keys (whole steps); `n_split` is the
    /// most splits (the binding's, or the cap [`AttnDecode::with_max_splits`] sets).
    pub fn cut_at_least(self, kv_len: u32, n_split: u32, split_keys: u32) -> (u32, u32) {
        let size = (kv_len.div_ceil(n_split).div_ceil(self.step()) * self.step()).max(split_keys);
        (size, kv_len.div_ceil(size))
    }

    /// `keys` rounded up to whole steps, at least one: the fewest keys a split may be asked to
    /// hold.
    pub fn split_keys(self, keys: u32) -> u32 {
        keys.div_ceil(self.step()).max(1) * self.step()
    }
}

/// The most workgroups a sequence's decode pass runs where `FAK_ATTN_DECODE_SPLITS` does not
/// say ([`default_max_splits`]: this many over the kv heads). Measured on an H100 (132 SMs;
/// experiments/NOTES.md, session 2026-12-06 #9, two rounds interleaved): the Qwen3-8B (8 kv
/// heads) with [`KeyWalk::Ahead`] and at most 16 splits, 128 workgroups, decodes 228.6 / 218.8 /
/// 190.8 tok/s at depths 128 / 2048 / 8192 against the uncapped tiles' 218.3 / 207.8 / 185.6;
/// at most 8 splits (64 workgroups) loses at depth (147.7 at 8192), and so does the Qwen3.5-27B
/// (4 kv heads) at 16 splits, 64 workgroups (81.1 against 82.9 at 8192). One wave of long
/// splits is latency-bound; the walk ahead hides it only with enough of them in flight.
pub const DEFAULT_MAX_WORKGROUPS: u32 = 128;

/// The most splits per sequence a shape of `n_kv` kv heads gets by default: at most
/// [`DEFAULT_MAX_WORKGROUPS`] workgroups (16 for 8 kv heads, 32 for 4), at least one split.
pub fn default_max_splits(n_kv: u32) -> u32 {
    (DEFAULT_MAX_WORKGROUPS / n_kv.max(1)).max(1)
}

/// The most splits per sequence `FAK_ATTN_DECODE_SPLITS` caps a binding's `n_split` at (None where
/// unset or not a positive number; then [`default_max_splits`]): with n_kv kv heads, a sequence
/// runs at most that many times n_kv workgroups, whatever `n_split` the model bound, so the count
/// can follow the GPU's size (wgpu does not tell the SM count: the caller does). `64`
/// ([`MAX_SPLITS`]) lifts the cap.
pub fn max_splits_from_env() -> Option<u32> {
    let n: u32 = std::env::var("FAK_ATTN_DECODE_SPLITS").ok()?.parse().ok()?;
    (n > 0).then_some(n)
}

/// The fewest keys per split `FAK_ATTN_DECODE_SPLIT` asks for (a count of keys; None where unset
/// or not a number): longer splits than the default's one step, so a context up to that length
/// runs one split per kv head and no combine pass, and a long one fewer, longer splits.
pub fn split_keys_from_env() -> Option<u32> {
    std::env::var("FAK_ATTN_DECODE_SPLIT").ok()?.parse().ok()
}

/// The attention shape of a model: query heads, kv heads and their width. Kernels are
/// specialised for it (loop bounds and workgroup arrays become constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttnShape {
    pub n_head: u32,
    pub n_kv: u32,
    pub head_dim: u32,
}

impl AttnShape {
    /// The shape the registry's variants are specialised for (portability translation): GQA
    /// group 6 as in qwen35, head_dim 128.
    pub const EXAMPLE: AttnShape = AttnShape {
        n_head: 12,
        n_kv: 2,
        head_dim: 128,
    };

    /// Query heads per kv head.
    pub fn group(&self) -> u32 {
        self.n_head / self.n_kv.max(1)
    }

    /// `1/sqrt(head_dim)`.
    pub fn scale(&self) -> f32 {
        (1.0 / f64::from(self.head_dim).sqrt()) as f32
    }

    /// Checks n_head a positive multiple of n_kv and a positive head_dim.
    pub(crate) fn check(&self, kernel: &'static str) -> Result<(), GpuError> {
        let AttnShape {
            n_head,
            n_kv,
            head_dim,
        } = *self;
        if n_kv == 0 || head_dim == 0 || n_head == 0 || !n_head.is_multiple_of(n_kv) {
            return Err(shape_error(
                kernel,
                format!("{self:?}: n_head must be a positive multiple of n_kv, head_dim positive"),
            ));
        }
        Ok(())
    }
}

/// How a module of the kernel is laid out: lanes per key row and the vec4s each lane holds.
#[derive(Clone, Copy, Debug)]
struct LaneLayout {
    row_lanes: u32,
    /// Vec4s of a row per lane (`LANE_VECS`).
    lane_vecs: u32,
}

impl LaneLayout {
    /// Checks that `shape` fits `row_lanes` lanes per key row.
    fn new(shape: AttnShape, row_lanes: u32) -> Result<LaneLayout, GpuError> {
        shape.check(AttnDecode::NAME)?;
        let group = shape.group();
        if group > MAX_GROUP || !shape.head_dim.is_multiple_of(4) {
            return Err(shape_error(
                AttnDecode::NAME,
                format!(
                    "{shape:?}: at most {MAX_GROUP} query heads per kv head and head_dim a \
                     multiple of 4 supported"
                ),
            ));
        }
        let lane_vecs = (shape.head_dim / 4).div_ceil(row_lanes);
        if 4 * group * lane_vecs > MAX_LANE_ACC {
            return Err(shape_error(
                AttnDecode::NAME,
                format!(
                    "{shape:?}: {group}·{} accumulators per lane at {row_lanes} lanes per key, at \
                     most {MAX_LANE_ACC}",
                    4 * lane_vecs
                ),
            ));
        }
        Ok(LaneLayout {
            row_lanes,
            lane_vecs,
        })
    }

    /// Invocations per workgroup (`WG`).
    fn workgroup_size(&self) -> u32 {
        TEAMS * self.row_lanes
    }

    /// Bytes of workgroup memory the module declares (a bound for either entry point): the
    /// per-team maxima and sums, one head's accumulators of every team (the combine's partial
    /// sums reuse them), the fallback row sums' scratch (one float and one vec4 per invocation),
    /// one head's o (for its q8 blocks) and the combine's two floats per split.
    fn workgroup_bytes(&self, shape: AttnShape) -> u64 {
        let wg = self.workgroup_size();
        let floats = 2 * TEAMS * shape.group() + 4 * wg * self.lane_vecs + 5 * wg + shape.head_dim;
        u64::from(floats) * 4 + combine_bytes(shape.head_dim, wg)
    }

    /// [`LaneLayout::workgroup_bytes`] of the rope form: also the workgroup sum's one float per
    /// invocation (reduce_*.wgsl).
    fn rope_workgroup_bytes(&self, shape: AttnShape) -> u64 {
        self.workgroup_bytes(shape) + 4 * u64::from(self.workgroup_size())
    }
}

/// Bytes of the workgroup arrays of wgsl/attn_combine.wgsl in a workgroup of `wg` invocations:
/// two floats per split and the split-lane sums (`COMBINE_LANES` vec4s per vec4 of the row).
fn combine_bytes(head_dim: u32, wg: u32) -> u64 {
    let vecs = head_dim / 4;
    let lanes = (wg / vecs).max(1);
    u64::from(2 * MAX_SPLITS + 4 * lanes * vecs) * 4
}

/// Lanes per key row of `variant` on an adapter whose subgroups are `min`..=`max` lanes: the
/// smallest subgroup (≤ 32) on the SUBGROUP path, where a team must fit in one subgroup and a
/// workgroup hold whole subgroups; None where the adapter rules that out.
fn row_lanes(variant: KernelPaths, min: u32, max: u32) -> Option<u32> {
    if !variant.subgroup {
        return Some(FALLBACK_ROW_LANES);
    }
    let lanes = min.min(MAX_ROW_LANES);
    (lanes >= 4 && lanes.is_power_of_two() && max <= TEAMS * lanes).then_some(lanes)
}

/// `Params` of wgsl/attn_decode.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    kv: super::kv_cache::KvGeometry,
    q: support::ViewParams,
    o: support::ViewParams,
    gate: support::ViewParams,
    n_head: u32,
    n_split: u32,
    scale: f32,
    gated: u32,
    quantize_out: u32,
    split_keys: u32,
    cut_splits: u32,
    pad: u32,
}

/// `RopeParams` of wgsl/attn_decode_rope.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RopeParams {
    k: support::ViewParams,
    v: support::ViewParams,
    half_rot: u32,
    neox: u32,
    has_norm: u32,
    eps: f32,
    n_pages: u32,
    pad: [u32; 3],
}

/// What the rope form reads besides [`DecodeIo`] (whose `q` is then the raw projection, as
/// `rope_kv` reads it): the step's raw k and v (n_kv heads of head_dim per sequence), the
/// per-head norms and the rotation, as [`rope_kv::RopeKvIo`] names them.
#[derive(Clone, Copy)]
pub struct DecodeRopeIo<'a> {
    pub k: View<'a>,
    pub v: View<'a>,
    pub norms: Option<HeadNorms<'a>>,
    pub pairing: RopePairing,
    pub table: &'a RopeTable,
}

/// What a decode binding reads and writes.
#[derive(Clone, Copy)]
pub struct DecodeIo<'a> {
    /// The queries: n_head heads of head_dim per sequence (row b = sequence b of the step).
    pub q: View<'a>,
    /// The output, n_head heads of head_dim per sequence.
    pub o: View<'a>,
    /// An output gate (qwen35's gated attention): `o ⊙= σ(gate)`, n_head heads of head_dim per
    /// sequence (inside the q projection's rows); None for none.
    pub gate: Option<View<'a>>,
    /// o (gated) also as q8 blocks, row b as vector b, for an integer mat-vec of `W_o`: the
    /// codes quantize_q8 would make of o. Needs head_dim a multiple of the block
    /// ([`AttnDecode::quantizes`]).
    pub o_q8: Option<&'a Q8Vectors>,
    pub cache: &'a KvCache,
    pub pages: &'a PageTable,
    /// Each sequence's position (it attends to positions 0..=pos) and page-table row.
    pub positions: Positions<'a>,
    pub step: &'a StepBuffer,
    /// Workgroups per (sequence, kv head) along the keys, at most [`MAX_SPLITS`]: the most
    /// splits a step may cut a sequence into (see [`AttnDecode::default_splits`]). 1 always
    /// writes `o` directly; more need a `scratch` of [`AttnDecode::scratch_bytes`].
    pub n_split: u32,
    pub scratch: Option<&'a wgpu::Buffer>,
    /// The most sequences (query rows) one step has.
    pub max_seqs: u32,
}

/// The decode-attention kernel, specialised for one [`AttnShape`].
pub struct AttnDecode {
    variant: KernelPaths,
    shape: AttnShape,
    walk: KeyWalk,
    /// The fewest keys a split holds (whole steps; one step unless
    /// [`AttnDecode::with_split_keys`] asks for more).
    split_keys: u32,
    /// The most splits a sequence is cut into, below a binding's `n_split` (None: no cap).
    max_splits: Option<u32>,
    layout: wgpu::BindGroupLayout,
    /// decode and combine, each with Step positions then with the token table.
    pipelines: Vec<wgpu::ComputePipeline>,
    /// Lanes per key row (`ROW_LANES`).
    row_lanes: u32,
    /// Whether the adapter's subgroup sizes made this kernel take the fallback reduction where
    /// its paths allowed subgroups (then `rope_kv`'s reduction is another kind).
    fell_back: bool,
    /// The rope form, where [`AttnDecode::build_rope`] built it.
    rope: Option<RopeForm>,
    /// Stands in for the token table (read-only) and, separately, the scratch (read-write) when
    /// a binding has none: one buffer cannot be bound both ways in a dispatch.
    placeholder: wgpu::Buffer,
    scratch_placeholder: wgpu::Buffer,
}

/// The rope form's bind-group layout and pipelines (decode_rope, then combine, each with Step
/// positions then with the token table).
struct RopeForm {
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<wgpu::ComputePipeline>,
}

/// The marker of the rope form for the kernel registry (portability, selftest listing): the
/// module [`AttnDecode::build_rope`] builds.
pub struct AttnDecodeRope;

impl Kernel for AttnDecodeRope {
    const NAME: &'static str = "attn_decode_rope";
    const AXES: Axes = AttnDecode::AXES;

    fn source(variant: KernelPaths) -> KernelSource {
        let lanes = row_lanes(variant, MAX_ROW_LANES, MAX_ROW_LANES).expect("32-lane subgroups");
        AttnDecode::source_with(variant, AttnShape::EXAMPLE, lanes, KeyWalk::Tiles, true)
            .expect("the example shape fits")
    }
}

/// A layer's queries and cache bound for [`AttnDecode::encode`].
pub struct DecodeBinding {
    group: wgpu::BindGroup,
    table: bool,
    /// Whether the binding is the rope form's (its pipelines; rope_kv's bytes too).
    rope: Option<RopeBytes>,
    /// Whether o is gated as it is written (the gate's reads are the step's bytes too).
    gated: bool,
    /// Whether o is also written as q8 blocks.
    quantized: bool,
    n_split: u32,
    max_seqs: u32,
}

impl DecodeBinding {
    /// Whether the binding is the rope form's: its decode step also does rope_kv's work.
    pub fn is_rope(&self) -> bool {
        self.rope.is_some()
    }
}

/// What the rope form moves per sequence besides the attention's bytes: q, k, v read, k and v
/// written into the cache (as `rope_kv` records them, less its q_out), and the norm weights.
#[derive(Clone, Copy)]
struct RopeBytes {
    per_seq: u64,
    norms: u64,
}

impl Kernel for AttnDecode {
    const NAME: &'static str = "attn_decode";
    const AXES: Axes = Axes {
        subgroup: true,
        f16: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let lanes = row_lanes(variant, MAX_ROW_LANES, MAX_ROW_LANES).expect("32-lane subgroups");
        Self::source_for(variant, AttnShape::EXAMPLE, lanes, KeyWalk::Tiles)
            .expect("the example shape fits")
    }
}

impl AttnDecode {
    /// The module and pipelines of `variant` specialised for `shape` at `row_lanes` lanes per
    /// key row, walking keys as `walk` says (see [`AttnDecode::new`]).
    pub fn source_for(
        variant: KernelPaths,
        shape: AttnShape,
        row_lanes: u32,
        walk: KeyWalk,
    ) -> Result<KernelSource, GpuError> {
        Self::source_with(variant, shape, row_lanes, walk, false)
    }

    /// [`AttnDecode::source_for`], or with `rope` the rope form's module
    /// (wgsl/attn_decode_rope.wgsl: its decode_rope entry point and combine) and slots.
    fn source_with(
        variant: KernelPaths,
        shape: AttnShape,
        row_lanes: u32,
        walk: KeyWalk,
        rope: bool,
    ) -> Result<KernelSource, GpuError> {
        LaneLayout::new(shape, row_lanes)?;
        let (row_sum, row_sum4, lanes_of) = if variant.subgroup {
            (ROW_SUM_SUBGROUP, ROW_SUM4_SUBGROUP, ROW_LANES_SUBGROUP)
        } else {
            (ROW_SUM_WORKGROUP, ROW_SUM4_WORKGROUP, ROW_LANES_WORKGROUP)
        };
        let mut module = WgslModule::new(variant)
            .with_const("HEAD_DIM", shape.head_dim)
            .with_const("GROUP", shape.group())
            .with_const("ROW_LANES", row_lanes)
            .with_const("KEYS", walk.keys())
            .with_const("AHEAD", u32::from(walk.ahead()))
            .with(row_sum)
            .with(row_sum4)
            .with(support::kv_scalar(variant.f16))
            .with(support::KV_PAGED)
            .with(wgsl::STEP)
            .with(support::VIEW)
            .with(support::POSITIONS)
            .with(wgsl::Q8_BLOCK)
            .with(ATTN_COMBINE)
            .with(ATTN_DECODE);
        module = match rope {
            false => module.with(ATTN_DECODE_READ),
            true => module
                .with_const("ROPE_LANES", rope_kv::WG)
                .with(wgsl::reduction(variant))
                .with(lanes_of)
                .with(ROPE_ANGLE)
                .with(ATTN_DECODE_ROPE),
        };
        let (name, decode, slots) = match rope {
            false => ("attn_decode", "decode", SLOTS),
            true => ("attn_decode_rope", "decode_rope", ROPE_SLOTS),
        };
        let label = |what: &str| format!("{name} {what} {shape:?} row_lanes={row_lanes} {walk:?}");
        let spec = |what: &str, entry_point, table: bool| PipelineSpec {
            label: label(what),
            entry_point,
            constants: vec![("TOKEN_TABLE", f64::from(table))],
        };
        let pipelines = vec![
            spec("decode", decode, false),
            spec("decode token_table", decode, true),
            spec("combine", "combine", false),
            spec("combine token_table", "combine", true),
        ];
        Ok(KernelSource {
            module,
            slots,
            pipelines,
        })
    }

    /// Builds the variant of `paths` (subgroup row sums, f16 cache where allowed) for `shape`,
    /// in the form [`KeyWalk::from_env`] names, its splits at least the keys
    /// [`split_keys_from_env`] asks for and at most the count [`max_splits_from_env`] caps
    /// ([`default_max_splits`] of the shape where it is unset).
    pub fn new(ctx: &GpuContext, paths: KernelPaths, shape: AttnShape) -> Result<Self, GpuError> {
        let mut kernel = Self::with_walk(ctx, paths, shape, KeyWalk::from_env())?;
        if let Some(keys) = split_keys_from_env() {
            kernel = kernel.with_split_keys(keys);
        }
        let cap = max_splits_from_env().unwrap_or(default_max_splits(shape.n_kv));
        Ok(kernel.with_max_splits(cap))
    }

    /// This kernel cutting a sequence into at most `n` splits (≥ 1) whatever a binding's
    /// `n_split`: a sequence then runs at most n·n_kv workgroups, each over longer splits.
    pub fn with_max_splits(mut self, n: u32) -> Self {
        self.max_splits = Some(n.max(1));
        self
    }

    /// The most splits a binding of `n_split` cuts a sequence into (`cut_splits` of the WGSL):
    /// the workgroups along the keys its decode pass dispatches.
    fn cut_splits(&self, n_split: u32) -> u32 {
        self.max_splits.map_or(n_split, |cap| cap.min(n_split))
    }

    /// This kernel with splits of at least `keys` keys (rounded up to whole steps; one step is
    /// the default): a sequence of up to that many keys runs one split per kv head, written as o
    /// with no combine, and a long one fewer, longer splits than its binding's `n_split` would
    /// cut. A step whose sequences hold that many keys or fewer in all records no combine
    /// dispatch.
    pub fn with_split_keys(mut self, keys: u32) -> Self {
        self.split_keys = self.walk.split_keys(keys.min(MAX_SPLIT_KEYS));
        self
    }

    /// The fewest keys a split holds.
    pub fn split_keys(&self) -> u32 {
        self.split_keys
    }

    /// How this kernel cuts a sequence of `kv_len` keys at a binding's `n_split`: (keys per
    /// split, splits holding keys); see [`KeyWalk::cut_at_least`].
    pub fn cut(&self, kv_len: u32, n_split: u32) -> (u32, u32) {
        self.walk
            .cut_at_least(kv_len, self.cut_splits(n_split), self.split_keys)
    }

    /// Whether a step whose sequences attend over `keys` positions in all cuts each of them into
    /// one split: every sequence holds at most `keys` positions, so where that is within a split
    /// asked for with [`AttnDecode::with_split_keys`] no combine need run. (Only then: the
    /// default form records its combine dispatch at every depth, as it did before the knob.)
    fn single_splits(&self, keys: u32) -> bool {
        self.split_keys > self.walk.step() && keys <= self.split_keys
    }

    /// [`AttnDecode::new`] in the form `walk`. The SUBGROUP path needs key rows of ≥ 4 lanes
    /// inside the adapter's smallest subgroup and workgroups of whole subgroups; where the
    /// adapter's sizes rule that out, the fallback is built.
    pub fn with_walk(
        ctx: &GpuContext,
        paths: KernelPaths,
        shape: AttnShape,
        walk: KeyWalk,
    ) -> Result<Self, GpuError> {
        let mut variant = Self::AXES.select(paths);
        let facts = ctx.facts();
        let mut fell_back = false;
        let lanes = row_lanes(variant, facts.subgroup_min_size, facts.subgroup_max_size)
            .unwrap_or_else(|| {
                variant.subgroup = false;
                fell_back = true;
                FALLBACK_ROW_LANES
            });
        let bytes = LaneLayout::new(shape, lanes)?.workgroup_bytes(shape);
        let limit = ctx.device.limits().max_compute_workgroup_storage_size;
        if bytes > u64::from(limit) {
            return Err(GpuError::TooLarge {
                what: format!("decode attention for {shape:?} (workgroup memory bytes)"),
                size: bytes,
                limit: u64::from(limit),
                limit_name: "max_compute_workgroup_storage_size",
            });
        }
        let built = build(
            ctx,
            &KernelVariant {
                kernel: Self::NAME,
                paths: variant,
                source: Self::source_with(variant, shape, lanes, walk, false)?,
            },
        )?;
        Ok(AttnDecode {
            variant,
            shape,
            walk,
            split_keys: walk.step(),
            max_splits: None,
            layout: built.layout,
            pipelines: built.pipelines,
            row_lanes: lanes,
            fell_back,
            rope: None,
            placeholder: support::placeholder(ctx),
            scratch_placeholder: support::placeholder(ctx),
        })
    }

    /// Builds the rope form beside the default ([`AttnDecode::bind_rope`] binds it): the decode
    /// pass also norms and rotates q and k and writes the step's k and v, as `rope_kv` does for a
    /// decode step, in the same bits (wgsl/attn_decode_rope.wgsl). Refused, and the default left
    /// as it is, where the form cannot give `rope_kv`'s bits or the adapter cannot hold it: a
    /// workgroup below `rope_kv`'s, another kind of reduction than `rope_kv` runs (this kernel fell
    /// back from subgroups), more storage bindings or workgroup memory than the limits allow.
    pub fn build_rope(&mut self, ctx: &GpuContext) -> Result<(), GpuError> {
        let lanes = self.row_lanes;
        let layout = LaneLayout::new(self.shape, lanes)?;
        let limits = ctx.device.limits();
        let what =
            |part: &str| format!("decode attention's rope form for {:?}: {part}", self.shape);
        if self.fell_back || layout.workgroup_size() < rope_kv::WG {
            return Err(shape_error(
                Self::NAME,
                what(&format!(
                    "rope_kv's sums need a workgroup of at least {} invocations with its kind of \
                     reduction ({} here, subgroups {})",
                    rope_kv::WG,
                    layout.workgroup_size(),
                    self.variant.subgroup
                )),
            ));
        }
        let storage = ROPE_SLOTS
            .iter()
            .filter(|slot| !matches!(slot, Slot::Uniform))
            .count() as u64;
        let checks = [
            (
                "storage bindings",
                storage,
                limits.max_storage_buffers_per_shader_stage,
                "max_storage_buffers_per_shader_stage",
            ),
            (
                "workgroup memory bytes",
                layout.rope_workgroup_bytes(self.shape),
                limits.max_compute_workgroup_storage_size,
                "max_compute_workgroup_storage_size",
            ),
        ];
        for (part, size, limit, limit_name) in checks {
            if size > u64::from(limit) {
                return Err(GpuError::TooLarge {
                    what: what(part),
                    size,
                    limit: u64::from(limit),
                    limit_name,
                });
            }
        }
        let built = build(
            ctx,
            &KernelVariant {
                kernel: AttnDecodeRope::NAME,
                paths: self.variant,
                source: Self::source_with(self.variant, self.shape, lanes, self.walk, true)?,
            },
        )?;
        self.rope = Some(RopeForm {
            layout: built.layout,
            pipelines: built.pipelines,
        });
        Ok(())
    }

    /// Whether [`AttnDecode::build_rope`] built the rope form.
    pub fn has_rope(&self) -> bool {
        self.rope.is_some()
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The form of the key loop this kernel was built with.
    pub fn walk(&self) -> KeyWalk {
        self.walk
    }

    /// Whether o can also be written as q8 blocks for `shape`: each head whole blocks.
    pub fn quantizes(shape: &AttnShape) -> bool {
        u64::from(shape.head_dim).is_multiple_of(Q8_BLOCK)
    }

    /// The cache type this kernel reads.
    pub fn dtype(&self) -> KvDtype {
        KvDtype::of(self.variant)
    }

    /// Bytes of the scratch a binding with `n_split` > 1 needs for `max_seqs` sequences (one
    /// scratch can serve every layer: their decode passes run one after another).
    pub fn scratch_bytes(&self, max_seqs: u32, n_split: u32) -> u64 {
        u64::from(max_seqs)
            * u64::from(self.shape.n_head)
            * u64::from(n_split)
            * u64::from(self.shape.head_dim + 2)
            * 4
    }

    /// A split count for sequences of up to `max_positions` tokens: one split per 64 keys, at
    /// most [`MAX_SPLITS`]. It is a bound, not the count a step uses: the kernel cuts a sequence
    /// of kv_len keys into splits of max(⌈kv_len / n_split⌉, step) keys, whole steps
    /// ([`KeyWalk::step`]: TEAMS·KEYS of the WGSL, 32 keys by default), so a short context runs
    /// few splits of one step each and splits past the last return at once; a long one fills
    /// the GPU with n_split × n_kv workgroups. The cut depends on a sequence's own kv_len and
    /// this bound only, never on the other sequences of a step. (At depth 2048, 64 workgroups
    /// per layer had run decode at half its depth-128 speed on an H200: experiments/NOTES.md,
    /// "H200 runs".)
    pub fn default_splits(max_positions: u32) -> u32 {
        max_positions.div_ceil(64).clamp(1, MAX_SPLITS)
    }

    /// Binds one layer's decode attention (see [`DecodeIo`]).
    pub fn bind(&self, ctx: &GpuContext, io: DecodeIo<'_>) -> Result<DecodeBinding, GpuError> {
        self.bind_form(ctx, io, None)
    }

    /// Binds one layer's decode attention in the rope form ([`AttnDecode::build_rope`]): `io.q`
    /// is the raw q projection (as `rope_kv` reads it), `rope` the rest of rope_kv's inputs; the
    /// step's k and v go into `io.cache`. Refused where the form was not built.
    pub fn bind_rope(
        &self,
        ctx: &GpuContext,
        io: DecodeIo<'_>,
        rope: DecodeRopeIo<'_>,
    ) -> Result<DecodeBinding, GpuError> {
        self.bind_form(ctx, io, Some(rope))
    }

    fn bind_form(
        &self,
        ctx: &GpuContext,
        io: DecodeIo<'_>,
        rope: Option<DecodeRopeIo<'_>>,
    ) -> Result<DecodeBinding, GpuError> {
        let DecodeIo {
            q,
            o,
            gate,
            o_q8,
            cache,
            pages,
            positions,
            step,
            n_split,
            scratch,
            max_seqs,
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
        if n_split == 0 || max_seqs == 0 {
            return Err(shape_error(
                Self::NAME,
                format!("{n_split} splits, {max_seqs} sequences: both must be positive"),
            ));
        }
        let (n_head, hd) = (shape.n_head, shape.head_dim);
        let q_binding = view_binding(ctx, Self::NAME, "q", &q, max_seqs, n_head, hd)?;
        let o_binding = view_binding(ctx, Self::NAME, "o", &o, max_seqs, n_head, hd)?;
        if q.buffer == o.buffer || gate.is_some_and(|g| g.buffer == o.buffer) {
            return Err(shape_error(
                Self::NAME,
                "q and the gate must be in other buffers than o",
            ));
        }
        let o_q8_bindings = match o_q8 {
            Some(q8) => {
                if !Self::quantizes(&shape) {
                    return Err(shape_error(
                        Self::NAME,
                        format!(
                            "o as q8 blocks with heads of {hd}: heads must be whole blocks of \
                             {Q8_BLOCK}"
                        ),
                    ));
                }
                let cols = u64::from(n_head * hd);
                q8.check(Self::NAME, cols, max_seqs)?;
                let elements = u64::from(max_seqs) * cols;
                [
                    words(ctx, Self::NAME, "o's q8 codes", &q8.codes, elements / 4)?,
                    words(
                        ctx,
                        Self::NAME,
                        "o's q8 scales",
                        &q8.scales,
                        elements / Q8_BLOCK,
                    )?,
                ]
            }
            // Written never; bound beside the scratch, read-write as it is.
            None => [0; 2].map(|_| self.scratch_placeholder.as_entire_binding()),
        };
        let gate_binding = match &gate {
            Some(g) => view_binding(ctx, Self::NAME, "gate", g, max_seqs, n_head, hd)?,
            None => self.placeholder.as_entire_binding(),
        };
        let cache_words = layout.cache_bytes().div_ceil(4);
        let k_cache = words(ctx, Self::NAME, "the k cache", &cache.k, cache_words)?;
        let v_cache = words(ctx, Self::NAME, "the v cache", &cache.v, cache_words)?;
        let table = pages.binding(ctx, Self::NAME, &layout)?;
        let slots = positions_binding(ctx, Self::NAME, positions, &self.placeholder, max_seqs)?;
        let partials = match (n_split, scratch) {
            (1, _) => self.scratch_placeholder.as_entire_binding(),
            (_, Some(buffer)) => words(
                ctx,
                Self::NAME,
                &format!("the scratch for {n_split} splits of {max_seqs} sequences"),
                buffer,
                self.scratch_bytes(max_seqs, n_split) / 4,
            )?,
            (_, None) => {
                return Err(shape_error(
                    Self::NAME,
                    format!("{n_split} splits need a scratch buffer"),
                ));
            }
        };
        if n_split > MAX_SPLITS {
            return Err(shape_error(
                Self::NAME,
                format!("{n_split} splits, at most {MAX_SPLITS}"),
            ));
        }
        let limit = ctx.device.limits().max_compute_workgroups_per_dimension;
        if max_seqs > limit {
            return Err(GpuError::TooLarge {
                what: format!("decode attention over {max_seqs} sequences (workgroups)"),
                size: u64::from(max_seqs),
                limit: u64::from(limit),
                limit_name: "max_compute_workgroups_per_dimension",
            });
        }
        let params = uniform(
            ctx,
            "attn_decode params",
            &Params {
                kv: layout.geometry(),
                q: q.params(),
                o: o.params(),
                gate: gate.map_or(support::ViewParams::default(), |g| g.params()),
                n_head,
                n_split,
                scale: shape.scale(),
                gated: u32::from(gate.is_some()),
                quantize_out: u32::from(o_q8.is_some()),
                split_keys: self.split_keys,
                cut_splits: self.cut_splits(n_split),
                pad: 0,
            },
        );
        let [yq, yd] = o_q8_bindings;
        let rope_params = match rope {
            Some(r) => Some(self.rope_params(ctx, &layout, &r)?),
            None => None,
        };
        let mut entries = vec![
            entry(0, q_binding),
            entry(1, k_cache),
            entry(2, v_cache),
            entry(3, table),
            entry(4, slots),
            entry(5, partials),
            entry(6, o_binding),
            entry(7, params.as_entire_binding()),
            entry(8, step.buffer.as_entire_binding()),
            entry(9, gate_binding),
            entry(10, yq),
            entry(11, yd),
        ];
        let (group_layout, rope_bytes) = match (rope, &rope_params) {
            (Some(r), Some(params)) => {
                let form = self.rope.as_ref().ok_or_else(|| {
                    shape_error(Self::NAME, "the rope form was not built (build_rope)")
                })?;
                entries.extend(self.rope_entries(ctx, &r, params, max_seqs)?);
                let (q_width, kv_width) = (u64::from(n_head * hd), u64::from(layout.n_kv * hd));
                let bytes = RopeBytes {
                    per_seq: 4 * q_width + 2 * (4 * kv_width + kv_width * self.dtype().bytes()),
                    norms: r.norms.map_or(0, |_| 2 * 4 * u64::from(hd)),
                };
                (&form.layout, Some(bytes))
            }
            _ => (&self.layout, None),
        };
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(if rope.is_some() {
                "attn_decode_rope"
            } else {
                "attn_decode"
            }),
            layout: group_layout,
            entries: &entries,
        });
        Ok(DecodeBinding {
            group,
            rope: rope_bytes,
            table: positions.is_table(),
            gated: gate.is_some(),
            quantized: o_q8.is_some(),
            n_split,
            max_seqs,
        })
    }

    /// The rope form's params (`RopeParams`), its rotation checked against the head.
    fn rope_params(
        &self,
        ctx: &GpuContext,
        layout: &super::kv_cache::KvLayout,
        r: &DecodeRopeIo<'_>,
    ) -> Result<wgpu::Buffer, GpuError> {
        let n_rot = r.table.n_rot();
        if n_rot > layout.head_dim {
            return Err(shape_error(
                AttnDecodeRope::NAME,
                format!("n_rot = {n_rot} past heads of {}", layout.head_dim),
            ));
        }
        Ok(uniform(
            ctx,
            "attn_decode_rope params",
            &RopeParams {
                k: r.k.params(),
                v: r.v.params(),
                half_rot: n_rot / 2,
                neox: u32::from(r.pairing == RopePairing::Neox),
                has_norm: u32::from(r.norms.is_some()),
                eps: r.norms.map_or(0.0, |n| n.eps),
                n_pages: layout.n_pages,
                pad: [0; 3],
            },
        ))
    }

    /// Bindings 12–17 of the rope form: raw k and v, the norms (placeholders without), the
    /// rotation table and `params`.
    fn rope_entries<'a>(
        &'a self,
        ctx: &GpuContext,
        r: &DecodeRopeIo<'a>,
        params: &'a wgpu::Buffer,
        max_seqs: u32,
    ) -> Result<Vec<wgpu::BindGroupEntry<'a>>, GpuError> {
        let name = AttnDecodeRope::NAME;
        let AttnShape {
            n_kv, head_dim: hd, ..
        } = self.shape;
        let (q_norm, k_norm) = match r.norms {
            Some(n) => (
                words(ctx, name, "the q norm weight", n.q, u64::from(hd))?,
                words(ctx, name, "the k norm weight", n.k, u64::from(hd))?,
            ),
            None => (
                self.placeholder.as_entire_binding(),
                self.placeholder.as_entire_binding(),
            ),
        };
        Ok(vec![
            entry(12, view_binding(ctx, name, "k", &r.k, max_seqs, n_kv, hd)?),
            entry(13, view_binding(ctx, name, "v", &r.v, max_seqs, n_kv, hd)?),
            entry(14, q_norm),
            entry(15, k_norm),
            entry(16, r.table.binding(ctx, name)?),
            entry(17, params.as_entire_binding()),
        ])
    }

    /// Records the dispatches for a step of `n_seqs` sequences (at most the binding's
    /// `max_seqs`): the split pass, and the combining pass when the binding has several splits
    /// (it does nothing for a sequence the split pass gave a single split; with longer splits
    /// asked for, it is not recorded where `keys` rules out a second split). `keys` is the
    /// positions the sequences attend over, summed: the cache bytes recorded.
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &DecodeBinding,
        n_seqs: u32,
        keys: u32,
    ) -> Result<Recorded, GpuError> {
        let n = n_seqs.min(binding.max_seqs);
        let pipelines = match binding.rope {
            None => &self.pipelines,
            Some(_) => {
                let form = self.rope.as_ref().ok_or_else(|| {
                    shape_error(
                        Self::NAME,
                        "a rope-form binding on a kernel without the form",
                    )
                })?;
                &form.pipelines
            }
        };
        pass.set_bind_group(0, &binding.group, &[]);
        pass.set_pipeline(&pipelines[usize::from(binding.table)]);
        pass.dispatch_workgroups(self.cut_splits(binding.n_split), self.shape.n_kv, n);
        let split = self.cut_splits(binding.n_split) > 1 && !self.single_splits(keys);
        if split {
            pass.set_pipeline(&pipelines[2 + usize::from(binding.table)]);
            pass.dispatch_workgroups(self.shape.n_head, n, 1);
        }
        let mut bytes = attention_bytes(&self.shape, self.dtype(), n, keys);
        if let Some(rope) = binding.rope {
            bytes = bytes + OpBytes::new(rope.norms, u64::from(n) * rope.per_seq);
        }
        if binding.gated {
            let gates =
                u64::from(n) * u64::from(self.shape.n_head) * u64::from(self.shape.head_dim);
            bytes = bytes + OpBytes::new(0, 4 * gates);
        }
        if binding.quantized {
            let cols = u64::from(self.shape.n_head) * u64::from(self.shape.head_dim);
            bytes = bytes + OpBytes::new(0, u64::from(n) * Q8Vectors::bytes_per_vector(cols));
        }
        Ok(Recorded::new(Self::NAME, 1 + usize::from(split), bytes))
    }
}

/// What an attention step over `keys` cached positions moves: k and v of every position read
/// once (the roofline's bytes), q read and o written per token.
pub(crate) fn attention_bytes(
    shape: &AttnShape,
    dtype: KvDtype,
    tokens: u32,
    keys: u32,
) -> OpBytes {
    let cached = u64::from(shape.n_kv) * u64::from(shape.head_dim) * dtype.bytes();
    let q = 4 * u64::from(shape.n_head) * u64::from(shape.head_dim);
    OpBytes::new(2 * u64::from(keys) * cached, 2 * u64::from(tokens) * q)
}
