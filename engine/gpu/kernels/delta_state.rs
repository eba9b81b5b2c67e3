//! What the Gated DeltaNet kernels share: the layer's dimensions ([`DeltaDims`]) and how value
//! heads read key heads ([`HeadMapping`]), the conv and recurrent state of every sequence slot
//! with its zeroing and snapshot/restore ([`DeltaState`]), and the plumbing of their wrappers
//! (WGSL files, checked binding windows, dispatch plans).
//!
//! # A GDN layer on the GPU (model-spec.md §5.4–5.6)
//!
//! After the projections `m = W_qkv h`, `z = W_gate h`, `b = W_β h`, `a = W_α h`:
//! 1. [`SsmConv`](super::ssm_conv::SsmConv): `mixed = silu(conv(m))`, conv state rolled;
//! 2. [`DeltaPrep`](super::delta_prep::DeltaPrep): q̂, k̂ normalised in place in `mixed`, the
//!    gates β and g into `gates`;
//! 3. decode: [`GatedDeltaDecode`](super::gated_delta::GatedDeltaDecode), or prefill:
//!    [`GatedDeltaChunked`](super::gated_delta_chunk::GatedDeltaChunked): `o`, recurrent state
//!    updated;
//! 4. [`GatedNorm`](super::gated_norm::GatedNorm): `y = ssm_norm ⊙ RMSNorm₀(o) ⊙ silu(z)`,
//!    then `W_out y`.
//!
//! Steps 1 and 3 read the step's [`SequenceTable`] (`gpu::step`): which state slot each
//! sequence of the step reads and writes. A decode step (one token per sequence) runs steps 1–4
//! as one dispatch instead, [`GdnDecode`](super::gdn_decode::GdnDecode), over the same table
//! and state.

use crate::gpu::buffers::{round_up, storage_buffer};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernels::ssm_conv::SUPPORTED_CONV_KERNELS;
use crate::gpu::profile::OpBytes;
use crate::gpu::step::{SeqBatch, SequenceTable};
use crate::quant::GgmlType;
use std::ops::Range;

/// The WGSL files of the Gated DeltaNet kernels (kept here rather than in `gpu::kernel::wgsl` so
/// the family stays in its own files).
pub mod wgsl {
    use crate::gpu::kernel::WgslFile;

    macro_rules! file {
        ($name:literal) => {
            WgslFile {
                name: $name,
                text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../wgsl/", $name)),
            }
        };
    }

    /// `struct Sequences` (the [`SequenceTable`] layout).
    pub const SEQUENCES: WgslFile = file!("sequences.wgsl");
    /// Sums over aligned lane groups: subgroup shuffles / workgroup memory.
    pub const ROW_SUM_SUBGROUP: WgslFile = file!("row_sum_subgroup.wgsl");
    pub const ROW_SUM_WORKGROUP: WgslFile = file!("row_sum_workgroup.wgsl");
    /// sigmoid, silu, softplus: one definition for every GDN kernel.
    pub const GDN_MATH: WgslFile = file!("gdn_math.wgsl");
    /// Four rows' sums at once (`row_sum4`, vec4) over ROW_SUM_SUBGROUP / ROW_SUM_WORKGROUP.
    pub const ROW_SUM4_SUBGROUP: WgslFile = file!("row_sum4_subgroup.wgsl");
    pub const ROW_SUM4_WORKGROUP: WgslFile = file!("row_sum4_workgroup.wgsl");
    pub const SSM_CONV: WgslFile = file!("ssm_conv.wgsl");
    pub const DELTA_PREP: WgslFile = file!("delta_prep.wgsl");
    pub const GATED_DELTA: WgslFile = file!("gated_delta.wgsl");
    /// What the chunked delta rule's two kernels share (bindings, chunk grid, gates, inverse).
    pub const GATED_DELTA_CHUNK_IO: WgslFile = file!("gated_delta_chunk_io.wgsl");
    pub const GATED_DELTA_CHUNK: WgslFile = file!("gated_delta_chunk.wgsl");
    /// The chunked delta rule with its products on cooperative matrices.
    pub const GATED_DELTA_CHUNK_COOP: WgslFile = file!("gated_delta_chunk_coop.wgsl");
    /// Its f16 cells: one half each (the default) or four (`FAK_GDN_CHUNK=coop+quads`).
    pub const GATED_DELTA_CHUNK_HALVES: WgslFile = file!("gated_delta_chunk_halves.wgsl");
    pub const GATED_DELTA_CHUNK_QUADS: WgslFile = file!("gated_delta_chunk_quads.wgsl");
    pub const GATED_NORM: WgslFile = file!("gated_norm.wgsl");
    pub const GDN_DECODE: WgslFile = file!("gdn_decode.wgsl");
}

/// How a v-head finds the k-head it reads (model-spec.md §5.4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum HeadMapping {
    /// llama.cpp's qwen35 converter order: v-head p reads k-head p mod nk.
    Tiled,
    /// Hugging Face / qwen3next order: v-head h reads k-head ⌊h / (nv/nk)⌋.
    Grouped,
}

impl HeadMapping {
    pub fn key_head(self, v_head: usize, nk: usize, nv: usize) -> usize {
        match self {
            HeadMapping::Tiled => v_head % nk,
            HeadMapping::Grouped => v_head / (nv / nk),
        }
    }
}

/// The shapes of one Gated DeltaNet layer, as the kernels need them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeltaDims {
    /// Key heads (`ssm.group_count`).
    pub nk: u32,
    /// Value heads (`ssm.time_step_rank`).
    pub nv: u32,
    /// Key/query head size (`ssm.state_size`).
    pub dk: u32,
    /// Value head size (`ssm.inner_size / nv`).
    pub dv: u32,
    /// Conv taps K (`ssm.conv_kernel`).
    pub conv_kernel: u32,
    /// Which key head a value head reads.
    pub head_mapping: HeadMapping,
    /// The RMS eps, also the eps of the q/k L2 norms and of the gated norm.
    pub eps: f32,
}

impl DeltaDims {
    /// Qwen3.5-27B (model-spec.md §5.1): the shape the registry translates the kernels for.
    pub const QWEN35_27B: DeltaDims = DeltaDims {
        nk: 16,
        nv: 48,
        dk: 128,
        dv: 128,
        conv_kernel: 4,
        head_mapping: HeadMapping::Tiled,
        eps: 1e-6,
    };

    /// Checks what the kernels assume, naming the metadata key of whatever is out of range.
    pub fn validate(&self) -> Result<(), GpuError> {
        let fail = |message: String| Err(dims_error(message));
        if self.nk == 0 || self.nv == 0 || !self.nv.is_multiple_of(self.nk) {
            return fail(format!(
                "ssm.time_step_rank (value heads) = {} must be a positive multiple of \
                 ssm.group_count (key heads) = {}",
                self.nv, self.nk
            ));
        }
        if !self.dk.is_multiple_of(16) || !(16..=256).contains(&self.dk) {
            return fail(format!(
                "ssm.state_size (key head size) = {}: the kernels support multiples of 16 up to 256",
                self.dk
            ));
        }
        if !self.dv.is_multiple_of(4) || !(4..=1024).contains(&self.dv) {
            return fail(format!(
                "value head size (ssm.inner_size / time_step_rank) = {}: the kernels support \
                 multiples of 4 up to 1024",
                self.dv
            ));
        }
        if !SUPPORTED_CONV_KERNELS.contains(&(self.conv_kernel as usize)) {
            return fail(format!(
                "ssm.conv_kernel = {}: the conv kernel supports {SUPPORTED_CONV_KERNELS:?} taps",
                self.conv_kernel
            ));
        }
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return fail(format!(
                "attention.layer_norm_rms_epsilon = {} is not a finite eps ≥ 0",
                self.eps
            ));
        }
        Ok(())
    }

    pub fn key_dim(&self) -> u32 {
        self.nk * self.dk
    }

    pub fn value_dim(&self) -> u32 {
        self.nv * self.dv
    }

    /// Channels of the conv and of a `mixed` row: q, k, then v.
    pub fn conv_dim(&self) -> u32 {
        2 * self.key_dim() + self.value_dim()
    }

    /// κ(h) = (h / group_div) mod nk covers both head orders.
    pub(crate) fn group_div(&self) -> u32 {
        match self.head_mapping {
            HeadMapping::Tiled => 1,
            HeadMapping::Grouped => self.nv / self.nk,
        }
    }

    /// Floats of one slot's conv state: the last K−1 raw rows.
    pub fn conv_state_floats(&self) -> u64 {
        u64::from(self.conv_kernel - 1) * u64::from(self.conv_dim())
    }

    /// Floats of one slot's recurrent state: nv states of dk×dv.
    pub fn recurrent_state_floats(&self) -> u64 {
        u64::from(self.nv) * u64::from(self.dv) * u64::from(self.dk)
    }

    // What each kernel of a step over a batch moves: f32 weights and each sequence's state in
    // `weights` (the roofline's bytes: read once per sequence whatever its length), f32
    // activations read and written in `activations`; state writes count as activations.

    /// The conv: the taps and the K−1 raw rows before the step in; the raw rows in, y out, the
    /// state out.
    pub fn conv_bytes(&self, batch: SeqBatch) -> OpBytes {
        let conv_dim = u64::from(self.conv_dim());
        let state = u64::from(batch.count) * 4 * self.conv_state_floats();
        OpBytes::new(
            4 * conv_dim * u64::from(self.conv_kernel) + state,
            4 * 2 * batch.tokens() * conv_dim + state,
        )
    }

    /// The gates and q/k norms: ssm_a and dt_bias; q and k normalised in place, β and α logits
    /// in, gates out.
    pub fn prep_bytes(&self, n_tokens: u32) -> OpBytes {
        let (key_dim, nv) = (u64::from(self.key_dim()), u64::from(self.nv));
        OpBytes::new(4 * 2 * nv, 4 * u64::from(n_tokens) * (4 * key_dim + 4 * nv))
    }

    /// The delta rule (recurrent or chunked): the state in (and out); q̂, k̂, v and the gates
    /// in, o out.
    pub fn delta_bytes(&self, batch: SeqBatch) -> OpBytes {
        let state = u64::from(batch.count) * 4 * self.recurrent_state_floats();
        let per_token = u64::from(self.conv_dim() + 2 * self.nv + self.value_dim());
        OpBytes::new(state, 4 * batch.tokens() * per_token + state)
    }

    /// The fused decode step (gdn_decode): every weight of the four kernels and both states in
    /// (and out); the raw qkv, z, β and α of each token in, y out. The intermediate rows the
    /// four kernels pass through memory (mixed, gates, o) stay in the workgroup.
    pub fn decode_bytes(&self, batch: SeqBatch) -> OpBytes {
        let (conv_dim, nv, vd) = (
            u64::from(self.conv_dim()),
            u64::from(self.nv),
            u64::from(self.value_dim()),
        );
        let state =
            u64::from(batch.count) * 4 * (self.conv_state_floats() + self.recurrent_state_floats());
        let weights = 4 * (conv_dim * u64::from(self.conv_kernel) + 2 * nv + u64::from(self.dv));
        OpBytes::new(
            weights + state,
            4 * batch.tokens() * (conv_dim + 2 * nv + 2 * vd) + state,
        )
    }

    /// The gated norm: ssm_norm; o and z in, y out.
    pub fn norm_bytes(&self, n_tokens: u32) -> OpBytes {
        OpBytes::new(
            4 * u64::from(self.dv),
            4 * 3 * u64::from(n_tokens) * u64::from(self.value_dim()),
        )
    }
}

fn dims_error(message: String) -> GpuError {
    GpuError::Shape {
        kernel: "gated_delta",
        message,
    }
}

/// The conv and recurrent state of one GDN layer for `slots` sequences, f32:
/// - `conv`: `[slots][K−1][conv_dim]`, the last K−1 raw qkv rows, oldest first;
/// - `recurrent`: `[slots][nv][dv][dk]`, per value head the dk×dv state stored as dv rows of dk
///   (row j is column j of S; the layout the decode kernel's lane groups own).
///
/// A snapshot of a slot (for the prefix cache) is its conv bytes followed by its recurrent
/// bytes, [`DeltaState::snapshot_bytes`] in all, at any 4-byte-aligned offset of a buffer with
/// COPY_DST (save) or COPY_SRC (restore). Zeroing, saving and restoring are copy commands on an
/// encoder, outside any compute pass.
pub struct DeltaState {
    pub conv: wgpu::Buffer,
    pub recurrent: wgpu::Buffer,
    dims: DeltaDims,
    slots: u32,
}

impl DeltaState {
    /// Zeroed state for `slots` sequences (wgpu zero-initialises new buffers).
    pub fn new(ctx: &GpuContext, dims: DeltaDims, slots: u32) -> Result<Self, GpuError> {
        dims.validate()?;
        if slots == 0 {
            return Err(state_error("a state needs at least one slot".into()));
        }
        let n = u64::from(slots);
        Ok(DeltaState {
            conv: storage_buffer(ctx, "conv state", n * 4 * dims.conv_state_floats())?,
            recurrent: storage_buffer(
                ctx,
                "recurrent state",
                n * 4 * dims.recurrent_state_floats(),
            )?,
            dims,
            slots,
        })
    }

    pub fn dims(&self) -> DeltaDims {
        self.dims
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    pub fn conv_slot_bytes(&self) -> u64 {
        4 * self.dims.conv_state_floats()
    }

    pub fn recurrent_slot_bytes(&self) -> u64 {
        4 * self.dims.recurrent_state_floats()
    }

    /// Bytes of one slot's snapshot (conv then recurrent).
    pub fn snapshot_bytes(&self) -> u64 {
        self.conv_slot_bytes() + self.recurrent_slot_bytes()
    }

    /// Bytes of `slot` inside [`DeltaState::conv`].
    pub fn conv_range(&self, slot: u32) -> Result<Range<u64>, GpuError> {
        self.check_slot(slot)?;
        let start = u64::from(slot) * self.conv_slot_bytes();
        Ok(start..start + self.conv_slot_bytes())
    }

    /// Bytes of `slot` inside [`DeltaState::recurrent`].
    pub fn recurrent_range(&self, slot: u32) -> Result<Range<u64>, GpuError> {
        self.check_slot(slot)?;
        let start = u64::from(slot) * self.recurrent_slot_bytes();
        Ok(start..start + self.recurrent_slot_bytes())
    }

    /// Records zeroing `slot` (a new sequence starts there).
    pub fn zero_slot(&self, encoder: &mut wgpu::CommandEncoder, slot: u32) -> Result<(), GpuError> {
        let conv = self.conv_range(slot)?;
        let recurrent = self.recurrent_range(slot)?;
        encoder.clear_buffer(&self.conv, conv.start, Some(conv.end - conv.start));
        encoder.clear_buffer(
            &self.recurrent,
            recurrent.start,
            Some(recurrent.end - recurrent.start),
        );
        Ok(())
    }

    /// Records copying `slot`'s state into `dst` at byte `offset` (the snapshot layout).
    pub fn save_slot(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        slot: u32,
        dst: &wgpu::Buffer,
        offset: u64,
    ) -> Result<(), GpuError> {
        let conv = self.conv_range(slot)?;
        let recurrent = self.recurrent_range(slot)?;
        self.check_snapshot("save", dst, offset)?;
        encoder.copy_buffer_to_buffer(&self.conv, conv.start, dst, offset, self.conv_slot_bytes());
        encoder.copy_buffer_to_buffer(
            &self.recurrent,
            recurrent.start,
            dst,
            offset + self.conv_slot_bytes(),
            self.recurrent_slot_bytes(),
        );
        Ok(())
    }

    /// Records copying a snapshot at byte `offset` of `src` into `slot`.
    pub fn restore_slot(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        offset: u64,
        slot: u32,
    ) -> Result<(), GpuError> {
        let conv = self.conv_range(slot)?;
        let recurrent = self.recurrent_range(slot)?;
        self.check_snapshot("restore", src, offset)?;
        encoder.copy_buffer_to_buffer(src, offset, &self.conv, conv.start, self.conv_slot_bytes());
        encoder.copy_buffer_to_buffer(
            src,
            offset + self.conv_slot_bytes(),
            &self.recurrent,
            recurrent.start,
            self.recurrent_slot_bytes(),
        );
        Ok(())
    }

    fn check_slot(&self, slot: u32) -> Result<(), GpuError> {
        if slot < self.slots {
            Ok(())
        } else {
            Err(state_error(format!(
                "slot {slot} is past the {} slots",
                self.slots
            )))
        }
    }

    /// A snapshot at `offset` of `buffer` must be whole words inside it (wgpu would panic).
    fn check_snapshot(
        &self,
        op: &'static str,
        buffer: &wgpu::Buffer,
        offset: u64,
    ) -> Result<(), GpuError> {
        let end = offset.saturating_add(self.snapshot_bytes());
        let problem = if !offset.is_multiple_of(4) {
            "is not whole words"
        } else if end > buffer.size() {
            "runs past the end"
        } else {
            return Ok(());
        };
        Err(GpuError::BufferRange {
            op,
            start: offset,
            end,
            buffer_size: buffer.size(),
            problem,
        })
    }
}

fn state_error(message: String) -> GpuError {
    GpuError::Shape {
        kernel: "delta state",
        message,
    }
}

/// A GGUF tensor uploaded as stored, with what identifies it in errors.
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    pub name: &'a str,
    pub ty: GgmlType,
    pub buffer: &'a wgpu::Buffer,
}

/// One dispatch of a wrapper's plan: the entry point and its workgroup grid. `encode` records
/// exactly its plan, so a test can check how many dispatches a step takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub entry: &'static str,
    pub workgroups: [u32; 3],
}

/// What a bind group entry holds: a storage range of `bytes` from offset 0 of a buffer, a
/// binding already checked (an activation view: `support::view_binding`), or a whole uniform
/// buffer.
pub(crate) enum Resource<'a> {
    Storage {
        name: &'a str,
        buffer: &'a wgpu::Buffer,
        bytes: u64,
    },
    Checked(wgpu::BindingResource<'a>),
    Uniform(&'a wgpu::Buffer),
}

impl<'a> Resource<'a> {
    /// All of `buffer` as a storage binding (the sequence table, a state's slots).
    pub(crate) fn whole(name: &'a str, buffer: &'a wgpu::Buffer) -> Self {
        Resource::Storage {
            name,
            buffer,
            bytes: buffer.size(),
        }
    }
}

/// The bind group of `resources` in binding order, after checking that every storage buffer
/// holds the bytes the kernel will touch and that they fit one binding.
pub(crate) fn bind_group(
    ctx: &GpuContext,
    kernel: &'static str,
    layout: &wgpu::BindGroupLayout,
    resources: &[Resource],
) -> Result<wgpu::BindGroup, GpuError> {
    let mut entries = Vec::with_capacity(resources.len());
    for (i, resource) in resources.iter().enumerate() {
        let binding = match resource {
            &Resource::Storage {
                name,
                buffer,
                bytes,
            } => {
                let size = round_up(bytes.max(4), 4);
                if size > buffer.size() {
                    return Err(GpuError::Shape {
                        kernel,
                        message: format!(
                            "{name} needs {size} bytes, its buffer has {}",
                            buffer.size()
                        ),
                    });
                }
                if size > ctx.max_binding_size() {
                    return Err(GpuError::TooLarge {
                        what: format!("kernel {kernel}: the {name} binding (bytes)"),
                        size,
                        limit: ctx.max_binding_size(),
                        limit_name: "max_storage_buffer_binding_size",
                    });
                }
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: 0,
                    size: std::num::NonZeroU64::new(size),
                })
            }
            Resource::Checked(binding) => binding.clone(),
            Resource::Uniform(buffer) => buffer.as_entire_binding(),
        };
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32,
            resource: binding,
        });
    }
    Ok(ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(kernel),
        layout,
        entries: &entries,
    }))
}

/// Bytes of `rows` rows of `width` f32.
pub(crate) fn f32_rows(rows: u32, width: u32) -> u64 {
    4 * u64::from(rows) * u64::from(width)
}

/// Checks a weight is F32 with `len` elements (the GGUF 1-D/conv tensors these kernels read).
pub(crate) fn check_f32_weight(
    kernel: &'static str,
    weight: &TensorRef,
    len: u64,
) -> Result<(), GpuError> {
    if weight.ty != GgmlType::F32 {
        return Err(GpuError::Shape {
            kernel,
            message: format!(
                "tensor {} is {}; the kernel reads F32",
                weight.name, weight.ty
            ),
        });
    }
    if weight.buffer.size() < 4 * len {
        return Err(GpuError::Shape {
            kernel,
            message: format!(
                "tensor {} needs {len} f32 ({} bytes), its buffer has {}",
                weight.name,
                4 * len,
                weight.buffer.size()
            ),
        });
    }
    Ok(())
}

/// Checks a grid against the per-dimension limit (nothing here wraps into a second dimension:
/// every axis is a head, a sequence or a modest count of tiles).
pub(crate) fn check_grid(
    limit: u32,
    kernel: &'static str,
    entry: &'static str,
    workgroups: [u32; 3],
) -> Result<Dispatch, GpuError> {
    if let Some(&big) = workgroups.iter().find(|&&n| n > limit) {
        return Err(GpuError::TooLarge {
            what: format!("kernel {kernel} {entry}: a grid of {workgroups:?} workgroups"),
            size: u64::from(big),
            limit: u64::from(limit),
            limit_name: "max_compute_workgroups_per_dimension",
        });
    }
    Ok(Dispatch { entry, workgroups })
}

/// Checks a batch fits the tokens and sequences a binding was made for.
pub(crate) fn check_batch(
    kernel: &'static str,
    batch: SeqBatch,
    max_tokens: u32,
    max_seqs: u32,
) -> Result<(), GpuError> {
    if batch.count == 0 || batch.len == 0 || batch.count > max_seqs {
        return Err(GpuError::Shape {
            kernel,
            message: format!(
                "a batch of {} sequences of {} tokens: the binding takes 1..={max_seqs} sequences",
                batch.count, batch.len
            ),
        });
    }
    check_tokens(kernel, u64::from(batch.rows), max_tokens)
}

pub(crate) fn check_tokens(
    kernel: &'static str,
    tokens: u64,
    max_tokens: u32,
) -> Result<(), GpuError> {
    if tokens == 0 || tokens > u64::from(max_tokens) {
        return Err(GpuError::Shape {
            kernel,
            message: format!("{tokens} tokens: the binding was made for 1..={max_tokens}"),
        });
    }
    Ok(())
}

/// Records `plan` with `pipelines` (looked up by entry point) and one bind group.
pub(crate) fn record(
    pass: &mut wgpu::ComputePass,
    group: &wgpu::BindGroup,
    plan: &[Dispatch],
    pipelines: &[(&'static str, wgpu::ComputePipeline)],
) {
    pass.set_bind_group(0, group, &[]);
    for d in plan {
        let (_, pipeline) = pipelines
            .iter()
            .find(|(entry, _)| *entry == d.entry)
            .expect("plans name the wrapper's own entry points");
        pass.set_pipeline(pipeline);
        let [x, y, z] = d.workgroups;
        pass.dispatch_workgroups(x, y, z);
    }
}

/// Pairs built pipelines with the entry points of their specs.
pub(crate) fn by_entry(
    specs: &[crate::gpu::kernel::PipelineSpec],
    pipelines: Vec<wgpu::ComputePipeline>,
) -> Vec<(&'static str, wgpu::ComputePipeline)> {
    specs.iter().map(|s| s.entry_point).zip(pipelines).collect()
}

/// A state bound with a table must have the layer's shape and every slot the table may name.
pub(crate) fn check_state(
    kernel: &'static str,
    dims: DeltaDims,
    table: &SequenceTable,
    state: &DeltaState,
) -> Result<(), GpuError> {
    if state.dims() != dims {
        return Err(GpuError::Shape {
            kernel,
            message: format!(
                "the state was made for {:?}, the kernel for {dims:?}",
                state.dims()
            ),
        });
    }
    if table.n_slots() > state.slots() {
        return Err(GpuError::Shape {
            kernel,
            message: format!(
                "the sequence table names slots up to {}, the state has {}",
                table.n_slots(),
                state.slots()
            ),
        });
    }
    Ok(())
}
