//! `gated_delta_chunk`: the gated delta rule in its chunked form for prefill, chunk 64
//! (wgsl/gated_delta_chunk.wgsl): `chunk_prepare` does the per-chunk algebra of every chunk and
//! head at once, `chunk_scan` carries the state across chunks. Two dispatches for any prompt.

use super::delta_state::{
    DeltaDims, DeltaState, Dispatch, Resource, bind_group, by_entry, check_batch, check_grid,
    check_state, f32_rows, record, wgsl,
};
use crate::gpu::buffers::{storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::{Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, KernelPaths};
use crate::gpu::profile::Recorded;
use crate::gpu::step::{SeqBatch, SequenceTable};

/// Tokens per chunk (the WGSL's `C`).
pub const CHUNK: u32 = 64;
/// State rows per chunk_scan workgroup (the WGSL's `ROWS`).
const SCAN_ROWS: u32 = 16;
/// mixed, gates, seqs, scratch, state, o, params.
const SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    conv_dim: u32,
    nk: u32,
    nv: u32,
    dv: u32,
    group_div: u32,
    w_at: u32,
    u_at: u32,
    p_at: u32,
    gamma_at: u32,
    pad: [u32; 3],
}

/// The per-chunk intermediates chunk_prepare hands to chunk_scan (W, U, P, γ of every chunk and
/// value head), sized for the largest prefill step.
pub struct ChunkScratch {
    pub buffer: wgpu::Buffer,
    dims: DeltaDims,
    /// Chunks (over all sequences of a batch) it holds.
    chunks: u32,
}

/// Float offsets of the scratch regions.
struct Regions {
    w: u64,
    u: u64,
    p: u64,
    gamma: u64,
    end: u64,
}

impl ChunkScratch {
    /// Scratch for batches of at most `max_tokens` tokens in at most `max_seqs` sequences.
    pub fn new(
        ctx: &GpuContext,
        dims: DeltaDims,
        max_tokens: u32,
        max_seqs: u32,
    ) -> Result<Self, GpuError> {
        dims.validate()?;
        let chunks = Self::chunks(max_tokens, max_seqs)?;
        let bytes = 4 * Self::regions(&dims, chunks).end;
        Ok(ChunkScratch {
            buffer: storage_buffer(ctx, "gated_delta_chunk scratch", bytes)?,
            dims,
            chunks,
        })
    }

    /// Bytes [`ChunkScratch::new`] allocates for these arguments (the memory plan counts them).
    pub fn bytes(dims: &DeltaDims, max_tokens: u32, max_seqs: u32) -> Result<u64, GpuError> {
        Ok(4 * Self::regions(dims, Self::chunks(max_tokens, max_seqs)?).end)
    }

    /// Bytes of its buffer.
    pub fn allocated_bytes(&self) -> u64 {
        self.buffer.size()
    }

    /// count·⌈len/C⌉ ≤ (count·len + (C−1)·count) / C.
    fn chunks(max_tokens: u32, max_seqs: u32) -> Result<u32, GpuError> {
        let chunks = (u64::from(max_tokens) + u64::from(CHUNK - 1) * u64::from(max_seqs))
            .div_ceil(u64::from(CHUNK));
        u32::try_from(chunks).map_err(|_| GpuError::Shape {
            kernel: GatedDeltaChunked::NAME,
            message: format!("{chunks} chunks of scratch do not fit in u32"),
        })
    }

    fn regions(dims: &DeltaDims, chunks: u32) -> Regions {
        let rows = u64::from(chunks) * u64::from(dims.nv) * u64::from(CHUNK);
        let w = 0;
        let u = w + rows * u64::from(dims.dk);
        let p = u + rows * u64::from(dims.dv);
        let gamma = p + rows * u64::from(CHUNK);
        Regions {
            w,
            u,
            p,
            gamma,
            end: gamma + rows,
        }
    }
}

pub struct GatedDeltaChunked {
    variant: KernelPaths,
    dims: DeltaDims,
    layout: wgpu::BindGroupLayout,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
}

/// The buffers of one GDN layer's chunked prefill, for [`GatedDeltaChunked::bind`].
pub struct ChunkIo<'a> {
    /// The conv output after [`DeltaPrep`](super::delta_prep::DeltaPrep), `[max_tokens][conv_dim]`.
    pub mixed: &'a wgpu::Buffer,
    /// `[max_tokens][2·nv]` from DeltaPrep.
    pub gates: &'a wgpu::Buffer,
    pub table: &'a SequenceTable,
    pub state: &'a DeltaState,
    /// Shared by every layer: each layer's prefill rewrites it before reading it.
    pub scratch: &'a ChunkScratch,
    /// Output `[max_tokens][nv·dv]`.
    pub o: &'a wgpu::Buffer,
    pub max_tokens: u32,
}

pub struct ChunkBinding {
    group: wgpu::BindGroup,
    max_tokens: u32,
    max_seqs: u32,
    chunks: u32,
    max_grid: u32,
}

impl Kernel for GatedDeltaChunked {
    const NAME: &'static str = "gated_delta_chunk";
    const AXES: Axes = Axes::NONE;

    fn source(variant: KernelPaths) -> KernelSource {
        Self::source_for(variant, &DeltaDims::QWEN35_27B)
    }
}

impl GatedDeltaChunked {
    fn source_for(variant: KernelPaths, dims: &DeltaDims) -> KernelSource {
        let spec = |entry_point: &'static str| PipelineSpec {
            label: format!("{entry_point} dk={}", dims.dk),
            entry_point,
            constants: vec![("DK", f64::from(dims.dk))],
        };
        KernelSource {
            module: WgslModule::new(variant)
                .with(wgsl::SEQUENCES)
                .with(wgsl::GATED_DELTA_CHUNK),
            slots: SLOTS,
            pipelines: vec![spec("chunk_prepare"), spec("chunk_scan")],
        }
    }

    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        dims.validate()?;
        let mut variant = KernelVariant::of::<Self>(Self::AXES.select(paths));
        variant.source = Self::source_for(variant.paths, &dims);
        let built = build(ctx, &variant)?;
        Ok(GatedDeltaChunked {
            variant: variant.paths,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    pub fn bind(&self, ctx: &GpuContext, io: ChunkIo) -> Result<ChunkBinding, GpuError> {
        let d = self.dims;
        check_state(Self::NAME, d, io.table, io.state)?;
        if io.scratch.dims != d {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "the scratch was made for {:?}, the kernel for {d:?}",
                    io.scratch.dims
                ),
            });
        }
        let regions = ChunkScratch::regions(&d, io.scratch.chunks);
        // The binding check below keeps every offset under 2^29 floats.
        let params = Params {
            conv_dim: d.conv_dim(),
            nk: d.nk,
            nv: d.nv,
            dv: d.dv,
            group_div: d.group_div(),
            w_at: regions.w as u32,
            u_at: regions.u as u32,
            p_at: regions.p as u32,
            gamma_at: regions.gamma as u32,
            pad: [0; 3],
        };
        let params = uniform(ctx, "gated_delta_chunk params", &params);
        let group = bind_group(
            ctx,
            Self::NAME,
            &self.layout,
            &[
                Resource::Storage {
                    name: "mixed (q̂, k̂, v)",
                    buffer: io.mixed,
                    bytes: f32_rows(io.max_tokens, d.conv_dim()),
                },
                Resource::Storage {
                    name: "gates",
                    buffer: io.gates,
                    bytes: f32_rows(io.max_tokens, 2 * d.nv),
                },
                Resource::Storage {
                    name: "sequence table",
                    buffer: &io.table.buffer,
                    bytes: io.table.buffer.size(),
                },
                Resource::Storage {
                    name: "chunk scratch",
                    buffer: &io.scratch.buffer,
                    bytes: 4 * regions.end,
                },
                Resource::Storage {
                    name: "recurrent state",
                    buffer: &io.state.recurrent,
                    bytes: io.state.recurrent.size(),
                },
                Resource::Storage {
                    name: "o (delta rule output)",
                    buffer: io.o,
                    bytes: f32_rows(io.max_tokens, d.value_dim()),
                },
                Resource::Uniform(&params),
            ],
        )?;
        Ok(ChunkBinding {
            group,
            max_tokens: io.max_tokens,
            max_seqs: io.table.max_seqs(),
            chunks: io.scratch.chunks,
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// The two dispatches of a prefill, whatever its length: chunk_prepare over (chunks, value
    /// heads, sequences), then chunk_scan over (state-row blocks, value heads, sequences). A
    /// one-sequence step gets room for the lead rows of a mid-step snapshot
    /// ([`super::delta_state::MidSave`]): its chunks are counted over len + CHUNK − 1 rows, and
    /// the workgroups of a chunk past the table's last return at once. Several sequences of
    /// any lengths ([`SequenceTable::write_ragged`]) take the longest one's chunks in the grid,
    /// and their chunks in all must fit the scratch.
    pub fn plan(&self, binding: &ChunkBinding, batch: SeqBatch) -> Result<Vec<Dispatch>, GpuError> {
        check_batch(Self::NAME, batch, binding.max_tokens, binding.max_seqs)?;
        // The grid counts the longest sequence's chunks; the scratch holds every sequence's.
        let lead_room = if batch.count == 1 { CHUNK - 1 } else { 0 };
        let chunks = (batch.len + lead_room).div_ceil(CHUNK);
        let blocks = if batch.count == 1 {
            chunks
        } else {
            batch.chunks
        };
        if blocks > binding.chunks {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "{} sequences of {blocks} chunks in all exceed the scratch's {} chunks",
                    batch.count, binding.chunks
                ),
            });
        }
        let (nv, count) = (self.dims.nv, batch.count);
        Ok(vec![
            check_grid(
                binding.max_grid,
                Self::NAME,
                "chunk_prepare",
                [chunks, nv, count],
            )?,
            check_grid(
                binding.max_grid,
                Self::NAME,
                "chunk_scan",
                [self.dims.dv.div_ceil(SCAN_ROWS), nv, count],
            )?,
        ])
    }

    pub fn encode(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &ChunkBinding,
        batch: SeqBatch,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, batch)?;
        record(pass, &binding.group, &plan, &self.pipelines);
        let bytes = self.dims.delta_bytes(batch);
        Ok(Recorded::new(Self::NAME, plan.len(), bytes))
    }
}
