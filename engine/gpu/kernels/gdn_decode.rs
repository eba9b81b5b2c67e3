//! `gdn_decode`: a decode step of a Gated DeltaNet layer — conv + SiLU with the conv state
//! rolled, q/k L2 norms and gates, the recurrent delta rule and the gated RMSNorm — in one
//! dispatch for every sequence of the step's table (wgsl/gdn_decode.wgsl). Prompt steps keep the
//! four kernels (the chunked delta rule and mid-step snapshots need them); the model picks this
//! one by the step's kind, never by what else is in the batch. Where the integer mat-vec reads
//! `W_out`'s input, the kernel also writes y as its q8 blocks ([`GdnDecodeIo::y_q8`]), so that
//! product needs no quantize dispatch. Two work splits ([`Split`]): a workgroup per value head
//! (the default since 2026-12-06 #10) or per key head (`FAK_GDN_DECODE=key`), the same bits.

use super::delta_state::{
    DeltaDims, DeltaState, Dispatch, Resource, TensorRef, bind_group, by_entry, check_batch,
    check_f32_weight, check_grid, check_state, f32_rows, record, wgsl,
};
use super::quantize_q8::{Q8_BLOCK, Q8Vectors};
use super::support::{self, View, ViewParams};
use crate::gpu::buffers::{storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{
    Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build, wgsl as shared,
};
use crate::gpu::layout::{Slot, with_counters};
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::Recorded;
use crate::gpu::step::{SeqBatch, SequenceTable};

/// Invocations per workgroup unless `FAK_GDN_DECODE_WG` names another of [`WORKGROUP_SIZES`]:
/// wgpu's default invocation limit. 256 invocations take 128 state rows a pass (three passes on
/// the 27B's 384); more take more rows at once but leave each invocation fewer registers.
const WG: u32 = 256;
/// The workgroup sizes the kernel takes: multiples of every subgroup size up to 128 and powers
/// of two.
pub const WORKGROUP_SIZES: [u32; 4] = [128, 256, 512, 1024];
/// m, z, b, a, conv_w, ssm_a, dt_bias, norm_w, seqs, conv_state, state, y, params, yq, yd.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::ReadWrite,
    Slot::ReadWrite,
];
/// [`SLOTS`] and the wide split's arrival counters.
const WIDE_SLOTS: &[Slot] = &with_counters::<{ SLOTS.len() + 1 }>(SLOTS);

/// How a decode step's workgroups share a layer (wgsl/gdn_decode.wgsl, "Work split").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// A workgroup per (key head, sequence) doing the nv/nk value heads that read it: nk
    /// workgroups a sequence (16 on the 27B), each owning its conv channels
    /// (`FAK_GDN_DECODE=key`; the default before 2026-12-06 #10).
    KeyHead,
    /// A workgroup per (value head, sequence): nv workgroups a sequence (48 on the 27B), each
    /// computing its key head's q/k conv outputs, the last of them to finish rolling those conv
    /// rows (an arrival counter per key head and sequence). The same bits as [`Split::KeyHead`].
    /// With `ahead`, a workgroup loads its first pass of state rows before the conv (`AHEAD`:
    /// one memory round trip fewer on its chain, the same bits).
    ValueHead { ahead: bool },
}

impl Split {
    /// The wide split as `FAK_GDN_DECODE=wide` names it: the default. On an H100 (2026-12-06
    /// #10, experiments/NOTES.md) the Qwen3.5-27B's gdn_decode went from 1299 to 1071 µs a
    /// token profiled and its decode from 88.2 to 90.2 tok/s (two rounds interleaved; 8
    /// sequences neutral).
    pub const WIDE: Split = Split::ValueHead { ahead: true };
    pub const ALL: [Split; 3] = [
        Split::KeyHead,
        Split::WIDE,
        Split::ValueHead { ahead: false },
    ];

    /// `FAK_GDN_DECODE`: unset, empty or `wide` [`Split::WIDE`], `wide-late` the value-head
    /// split without `ahead`, `key` [`Split::KeyHead`]; anything else an error naming the
    /// variable.
    pub fn from_env() -> Result<Split, GpuError> {
        Self::named(&std::env::var("FAK_GDN_DECODE").unwrap_or_default())
    }

    pub fn named(name: &str) -> Result<Split, GpuError> {
        match name.trim() {
            "key" => Ok(Split::KeyHead),
            "" | "wide" => Ok(Split::WIDE),
            "wide-late" => Ok(Split::ValueHead { ahead: false }),
            other => Err(GpuError::Shape {
                kernel: GdnDecode::NAME,
                message: format!("FAK_GDN_DECODE={other:?}: `wide`, `wide-late`, `key` or unset"),
            }),
        }
    }

    /// Value heads per workgroup (`HEADS`).
    fn heads(self, dims: &DeltaDims) -> u32 {
        match self {
            Split::KeyHead => group(dims),
            Split::ValueHead { .. } => 1,
        }
    }

    fn entry_point(self) -> &'static str {
        match self {
            Split::KeyHead => "gdn_decode",
            Split::ValueHead { .. } => "gdn_decode_wide",
        }
    }

    /// Whether the first pass's state rows are loaded before the conv (`AHEAD`).
    fn ahead(self) -> bool {
        matches!(self, Split::ValueHead { ahead: true })
    }

    fn slots(self) -> &'static [Slot] {
        match self {
            Split::KeyHead => SLOTS,
            Split::ValueHead { .. } => WIDE_SLOTS,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    nk: u32,
    nv: u32,
    group_div: u32,
    eps: f32,
    q_scale: f32,
    quantize_out: u32,
    pad: [u32; 2],
    m: ViewParams,
    z: ViewParams,
    b: ViewParams,
    a: ViewParams,
}

pub struct GdnDecode {
    variant: KernelPaths,
    split: Split,
    row_lanes: u32,
    workgroup: u32,
    dims: DeltaDims,
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
    /// Bound as yq/yd where y is not quantized.
    placeholder: wgpu::Buffer,
}

/// The buffers of one GDN layer's decode step, for [`GdnDecode::bind`].
pub struct GdnDecodeIo<'a> {
    /// Raw qkv projection: `max_tokens` rows of `conv_dim`, possibly inside wider rows.
    pub m: View<'a>,
    /// The gate projection: `max_tokens` × nv heads of dv.
    pub z: View<'a>,
    /// β logits and α: `max_tokens` rows of nv each.
    pub b: View<'a>,
    pub a: View<'a>,
    /// `blk.N.ssm_conv1d.weight` (F32, `ne = [K, conv_dim]`).
    pub conv_weight: TensorRef<'a>,
    /// `blk.N.ssm_a` (F32 `[nv]`, already −exp(A_log)) and `blk.N.ssm_dt.bias` (F32 `[nv]`).
    pub ssm_a: TensorRef<'a>,
    pub dt_bias: TensorRef<'a>,
    /// `blk.N.ssm_norm.weight` (F32 `[dv]`).
    pub norm_weight: TensorRef<'a>,
    pub table: &'a SequenceTable,
    pub state: &'a DeltaState,
    /// Output `[max_tokens][nv·dv]`: the gated norm's y, what `W_out` reads.
    pub y: &'a wgpu::Buffer,
    /// y also as q8 blocks (row r as vector r), for an integer mat-vec of `W_out`: the codes
    /// quantize_q8 would make of y. Needs dv a multiple of the block ([`GdnDecode::quantizes`]).
    pub y_q8: Option<&'a Q8Vectors>,
    pub max_tokens: u32,
}

pub struct GdnDecodeBinding {
    group: wgpu::BindGroup,
    /// The wide split's arrival counters, `[max_seqs][nk]` u32, zero between dispatches (the
    /// bind group holds them too).
    _arrivals: Option<wgpu::Buffer>,
    quantized: bool,
    max_tokens: u32,
    max_seqs: u32,
    max_grid: u32,
}

impl Kernel for GdnDecode {
    const NAME: &'static str = "gdn_decode";
    const AXES: Axes = Axes {
        subgroup: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        let dims = DeltaDims::QWEN35_27B;
        Self::source_for(
            variant,
            &dims,
            preferred_row_lanes(dims.dk),
            WG,
            Split::KeyHead,
        )
    }
}

/// `FAK_GDN_DECODE_WG`: the workgroup size (one of [`WORKGROUP_SIZES`]; unset or empty: 256),
/// for a sweep on a device.
pub fn workgroup_from_env() -> Result<u32, GpuError> {
    match std::env::var("FAK_GDN_DECODE_WG") {
        Ok(text) if !text.is_empty() => match text.trim().parse::<u32>() {
            Ok(wg) if WORKGROUP_SIZES.contains(&wg) => Ok(wg),
            _ => Err(GpuError::Shape {
                kernel: GdnDecode::NAME,
                message: format!("FAK_GDN_DECODE_WG={text:?}: one of {WORKGROUP_SIZES:?}"),
            }),
        },
        _ => Ok(WG),
    }
}

/// Lanes per state row, as gated_delta picks them: 8 where dk allows it, else 4.
fn preferred_row_lanes(dk: u32) -> u32 {
    if dk.is_multiple_of(32) { 8 } else { 4 }
}

/// Value heads per key head: the heads one workgroup runs.
fn group(dims: &DeltaDims) -> u32 {
    dims.nv / dims.nk
}

/// Bytes of the kernel's workgroup memory in workgroups of `wg`: q and k, v and o of its heads,
/// three values per head, the arrival drawn (the wide split), the row sums' partials (one f32 a
/// lane, and a vec4 a lane without subgroups).
fn workgroup_bytes(dims: &DeltaDims, split: Split, subgroup: bool, wg: u32) -> u64 {
    let heads = u64::from(split.heads(dims));
    let rows = heads * u64::from(dims.dv);
    let arrived = u64::from(split != Split::KeyHead);
    let partials = if subgroup { 0 } else { 5 * u64::from(wg) };
    4 * (2 * u64::from(dims.dk) + 2 * rows + 3 * heads + arrived + partials)
}

impl GdnDecode {
    fn source_for(
        variant: KernelPaths,
        dims: &DeltaDims,
        row_lanes: u32,
        wg: u32,
        split: Split,
    ) -> KernelSource {
        let (row_sum, row_sum4) = if variant.subgroup {
            (wgsl::ROW_SUM_SUBGROUP, wgsl::ROW_SUM4_SUBGROUP)
        } else {
            (wgsl::ROW_SUM_WORKGROUP, wgsl::ROW_SUM4_WORKGROUP)
        };
        KernelSource {
            module: WgslModule::new(variant)
                .with_const("DK", dims.dk)
                .with_const("DV", dims.dv)
                .with_const("GROUP", group(dims))
                .with_const("HEADS", split.heads(dims))
                .with(wgsl::SEQUENCES)
                .with(support::VIEW)
                .with(wgsl::GDN_MATH)
                .with(row_sum)
                .with(row_sum4)
                .with(shared::Q8_BLOCK)
                .with(wgsl::GDN_DECODE),
            slots: split.slots(),
            pipelines: vec![PipelineSpec {
                label: format!(
                    "{} dk={} dv={} group={} lanes={row_lanes} wg={wg}",
                    split.entry_point(),
                    dims.dk,
                    dims.dv,
                    group(dims)
                ),
                entry_point: split.entry_point(),
                constants: vec![
                    ("WG", f64::from(wg)),
                    ("ROW_LANES", f64::from(row_lanes)),
                    ("K", f64::from(dims.conv_kernel)),
                    ("AHEAD", f64::from(u8::from(split.ahead()))),
                ],
            }],
        }
    }

    /// Whether y can also be written as q8 blocks for `dims`: each value head whole blocks.
    pub fn quantizes(dims: &DeltaDims) -> bool {
        u64::from(dims.dv).is_multiple_of(Q8_BLOCK)
    }

    /// Whether the adapter's limits hold the kernel for `dims` in `split` (its 15 or 16
    /// bindings, a workgroup of 256, its workgroup memory); where not, a model keeps the four
    /// separate kernels.
    pub fn fits(ctx: &GpuContext, dims: &DeltaDims, split: Split) -> bool {
        Self::check_limits(ctx, dims, split, false, WG).is_ok()
    }

    fn check_limits(
        ctx: &GpuContext,
        dims: &DeltaDims,
        split: Split,
        subgroup: bool,
        wg: u32,
    ) -> Result<(), GpuError> {
        let limits = ctx.device.limits();
        let bytes = workgroup_bytes(dims, split, subgroup, wg);
        let checks = [
            (
                "its storage bindings",
                (split.slots().len() - 1) as u64,
                limits.max_storage_buffers_per_shader_stage,
                "max_storage_buffers_per_shader_stage",
            ),
            (
                "its workgroup size",
                u64::from(wg),
                limits.max_compute_invocations_per_workgroup,
                "max_compute_invocations_per_workgroup",
            ),
            (
                "its workgroup memory (bytes)",
                bytes,
                limits.max_compute_workgroup_storage_size,
                "max_compute_workgroup_storage_size",
            ),
        ];
        for (what, size, limit, limit_name) in checks {
            if size > u64::from(limit) {
                return Err(GpuError::TooLarge {
                    what: format!("kernel gdn_decode for {dims:?}: {what}"),
                    size,
                    limit: u64::from(limit),
                    limit_name,
                });
            }
        }
        Ok(())
    }

    /// Builds the kernel for `dims` (dk, dv and nv/nk are baked in) in workgroups of
    /// [`workgroup_from_env`], split as [`Split::from_env`] says.
    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        Self::with_workgroup(ctx, paths, dims, workgroup_from_env()?)
    }

    /// [`GdnDecode::new`] in workgroups of `wg` invocations (one of [`WORKGROUP_SIZES`]).
    pub fn with_workgroup(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        wg: u32,
    ) -> Result<Self, GpuError> {
        Self::with_split(ctx, paths, dims, wg, Split::from_env()?)
    }

    /// [`GdnDecode::with_workgroup`] split as `split` says. As for gated_delta, the subgroup
    /// variant needs lane groups that fit the adapter's smallest subgroup and workgroups that
    /// hold whole subgroups; where the adapter rules that out, the fallback is built.
    pub fn with_split(
        ctx: &GpuContext,
        paths: KernelPaths,
        dims: DeltaDims,
        wg: u32,
        split: Split,
    ) -> Result<Self, GpuError> {
        dims.validate()?;
        if !WORKGROUP_SIZES.contains(&wg) || wg < group(&dims) {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "a workgroup of {wg}: the kernel takes {WORKGROUP_SIZES:?}, at least the {} \
                     value heads of a key head",
                    group(&dims)
                ),
            });
        }
        let mut paths = Self::AXES.select(paths);
        let mut row_lanes = preferred_row_lanes(dims.dk);
        if paths.subgroup {
            let facts = ctx.facts();
            let narrowest = facts.subgroup_min_size.min(row_lanes);
            if narrowest < 4 || facts.subgroup_max_size > 128 {
                paths.subgroup = false;
            } else {
                row_lanes = narrowest;
            }
        }
        Self::check_limits(ctx, &dims, split, paths.subgroup, wg)?;
        let mut variant = KernelVariant::of::<Self>(paths);
        variant.source = Self::source_for(paths, &dims, row_lanes, wg, split);
        let built = build(ctx, &variant)?;
        Ok(GdnDecode {
            variant: paths,
            split,
            row_lanes,
            workgroup: wg,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
            placeholder: support::placeholder(ctx),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    pub fn split(&self) -> Split {
        self.split
    }

    /// The registry's variants of the wide split, listed as `gdn_decode_wide` (the default
    /// split's are `KernelVariant::all_of::<GdnDecode>()`), at the shape and workgroup
    /// `source` uses.
    pub fn wide_variants() -> Vec<KernelVariant> {
        let dims = DeltaDims::QWEN35_27B;
        let lanes = preferred_row_lanes(dims.dk);
        let mut all = KernelVariant::all_of::<GdnDecode>();
        for variant in &mut all {
            variant.kernel = Split::WIDE.entry_point();
            variant.source = Self::source_for(variant.paths, &dims, lanes, WG, Split::WIDE);
        }
        all
    }

    /// Invocations that own a state row.
    pub fn row_lanes(&self) -> u32 {
        self.row_lanes
    }

    /// Invocations per workgroup.
    pub fn workgroup(&self) -> u32 {
        self.workgroup
    }

    /// Checks the buffers against the shapes and builds the bind group (once, at load time).
    pub fn bind<'a>(
        &self,
        ctx: &GpuContext,
        io: GdnDecodeIo<'a>,
    ) -> Result<GdnDecodeBinding, GpuError> {
        let d = self.dims;
        let conv_taps = u64::from(d.conv_kernel) * u64::from(d.conv_dim());
        let weights = [
            (&io.conv_weight, conv_taps),
            (&io.ssm_a, u64::from(d.nv)),
            (&io.dt_bias, u64::from(d.nv)),
            (&io.norm_weight, u64::from(d.dv)),
        ];
        for (w, len) in weights {
            check_f32_weight(Self::NAME, w, len)?;
        }
        check_state(Self::NAME, d, io.table, io.state)?;
        if let Some(q8) = io.y_q8 {
            if !Self::quantizes(&d) {
                return Err(GpuError::Shape {
                    kernel: Self::NAME,
                    message: format!(
                        "y as q8 blocks with value heads of {}: heads must be whole blocks of \
                         {Q8_BLOCK}",
                        d.dv
                    ),
                });
            }
            // A decode step's rows are its sequences, one token each.
            q8.check(Self::NAME, u64::from(d.value_dim()), io.table.max_seqs())?;
        }
        let params = Params {
            nk: d.nk,
            nv: d.nv,
            group_div: d.group_div(),
            eps: d.eps,
            q_scale: 1.0 / (d.dk as f32).sqrt(),
            quantize_out: u32::from(io.y_q8.is_some()),
            pad: [0; 2],
            m: io.m.params(),
            z: io.z.params(),
            b: io.b.params(),
            a: io.a.params(),
        };
        let params = uniform(ctx, "gdn_decode params", &params);
        let view = |what, view: &View<'a>, heads, width| {
            support::view_binding(ctx, Self::NAME, what, view, io.max_tokens, heads, width)
        };
        let weight = |w: &TensorRef<'a>, len: u64| Resource::Storage {
            name: w.name,
            buffer: w.buffer,
            bytes: 4 * len,
        };
        let [conv_w, ssm_a, dt_bias, norm_w] = weights.map(|(w, len)| weight(w, len));
        let elements = u64::from(io.table.max_seqs()) * u64::from(d.value_dim());
        let (yq, yd) = match io.y_q8 {
            Some(q8) => (
                Resource::Storage {
                    name: "yq (y's q8 codes)",
                    buffer: &q8.codes,
                    bytes: elements,
                },
                Resource::Storage {
                    name: "yd (y's q8 scales)",
                    buffer: &q8.scales,
                    bytes: 4 * elements / Q8_BLOCK,
                },
            ),
            None => (
                Resource::whole("yq placeholder", &self.placeholder),
                Resource::whole("yd placeholder", &self.placeholder),
            ),
        };
        // Zeroed at creation; every dispatch leaves them zero.
        let arrivals = match self.split {
            Split::KeyHead => None,
            Split::ValueHead { .. } => {
                let counters = u64::from(io.table.max_seqs()) * u64::from(d.nk);
                Some(storage_buffer(ctx, "gdn_decode arrivals", 4 * counters)?)
            }
        };
        let mut resources = vec![
            Resource::Checked(view("m (qkv projection)", &io.m, 1, d.conv_dim())?),
            Resource::Checked(view("z (gate projection)", &io.z, d.nv, d.dv)?),
            Resource::Checked(view("b (beta logits)", &io.b, 1, d.nv)?),
            Resource::Checked(view("a (alpha)", &io.a, 1, d.nv)?),
            conv_w,
            ssm_a,
            dt_bias,
            norm_w,
            Resource::whole("sequence table", &io.table.buffer),
            Resource::whole("conv state", &io.state.conv),
            Resource::whole("recurrent state", &io.state.recurrent),
            Resource::Storage {
                name: "y (gated norm output)",
                buffer: io.y,
                bytes: f32_rows(io.max_tokens, d.value_dim()),
            },
            Resource::Uniform(&params),
            yq,
            yd,
        ];
        if let Some(arrivals) = &arrivals {
            resources.push(Resource::whole("arrival counters", arrivals));
        }
        let group = bind_group(ctx, Self::NAME, &self.layout, &resources)?;
        Ok(GdnDecodeBinding {
            group,
            _arrivals: arrivals,
            quantized: io.y_q8.is_some(),
            max_tokens: io.max_tokens,
            max_seqs: io.table.max_seqs(),
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// One dispatch: a workgroup per (key head, sequence), or per (value head, sequence) in the
    /// wide split. Every sequence of `batch` must be one token (a decode step).
    pub fn plan(
        &self,
        binding: &GdnDecodeBinding,
        batch: SeqBatch,
    ) -> Result<Vec<Dispatch>, GpuError> {
        check_batch(Self::NAME, batch, binding.max_tokens, binding.max_seqs)?;
        if batch.len != 1 {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "a batch of sequences of up to {} tokens: the fused decode takes one token \
                     per sequence",
                    batch.len
                ),
            });
        }
        let heads = self.dims.nv / self.split.heads(&self.dims);
        let grid = [heads, batch.count, 1];
        let entry = self.split.entry_point();
        Ok(vec![check_grid(binding.max_grid, Self::NAME, entry, grid)?])
    }

    /// Records the decode step of `batch` (the batch the sequence table was last written with).
    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &GdnDecodeBinding,
        batch: SeqBatch,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, batch)?;
        record(pass, &binding.group, &plan, &self.pipelines);
        let mut bytes = self.dims.decode_bytes(batch);
        if binding.quantized {
            let cols = u64::from(self.dims.value_dim());
            bytes.activations += batch.tokens() * Q8Vectors::bytes_per_vector(cols);
        }
        Ok(Recorded::new(Self::NAME, plan.len(), bytes))
    }
}
