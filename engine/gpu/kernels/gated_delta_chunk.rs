//! `gated_delta_chunk`: the gated delta rule in its chunked form for prefill, chunk 64
//! (wgsl/gated_delta_chunk.wgsl): `chunk_prepare` does the per-chunk algebra of every chunk and
//! head at once, `chunk_scan` carries the state across chunks. Two dispatches for any prompt.
//!
//! Variants:
//! - `fallback`: f32 tiles (wgsl/gated_delta_chunk.wgsl), every adapter (the default where the
//!   coop kernel below cannot run);
//! - `subgroup+f16+coop16x16`: the dense products (Gram matrices, T·R, W·S, Q·S, P·V', the state
//!   update) on 16×16 cooperative matrices with operands split into hi + lo f16 pairs and two f32
//!   accumulators, so the results keep f32-grade accuracy (wgsl/gated_delta_chunk_coop.wgsl).
//!   The default where the adapter has it (`FAK_GDN_CHUNK=f32` for the f32 kernel,
//!   [`ChunkKernel`]): on the H200 it passes every gated_delta and model_qwen35 test and cuts
//!   the 27B's 2048-token chunked delta rule from 306 to 115 ms (experiments/NOTES.md, session
//!   2026-12-05 #5); the split is emulated against the f64 reference in the unit tests of
//!   engine/reference/coop_delta.rs. Built where
//!   the adapter offers 16×16 f16 → f32 matrices on 32-wide subgroups and its workgroup memory
//!   holds it ([`GatedDeltaChunked::coop_workgroup_bytes`]); elsewhere the f32 kernel runs.
//!   Metal's 8×8 matrices get the f32 kernel: an 8×8 form would need four times the
//!   accumulators per subgroup and more workgroup memory than Metal's 32 KiB.
//!
//! Both kernels read the chunk grid, the sequence table and the state through
//! wgsl/gated_delta_chunk_io.wgsl, so a change of the batch layout applies to both.
//!
//! Forms ([`ChunkForm`], named by `FAK_GDN_CHUNK=coop+quads`, `coop+fused`, `coop+columns`,
//! `coop+quads+fused+columns`, `coop+quads+fused+blocks`, `coop+quads+fused+lean+blocks`,
//! `f32+columns`, `f32+blocks`): vec4<f16> cells, a fused scan, a lean scan (U early, S decayed
//! on the update's accumulators), the inverse by columns or by block rows ([`Inverse`]). Each
//! computes the same values in the same order as the plain form (bit for bit).
//! `quads`, `fused`, `lean` and `blocks` together were the coop kernel's default until
//! 2026-12-07 (`coop+quads+fused+lean+blocks`, [`ChunkKernel::DEFAULT_UNSPLIT`], still the
//! engine's form where the split scan does not fit): on an H100 `quads`, `fused` and `columns`
//! cut the 27B's 2048-token chunked delta rule from 96 to 82 ms (2026-12-06 #8, each alone
//! 4–6 %), then `blocks` for `columns` to 75.5 and `lean` on top to 71.2 ms (81.3 → 71.2 in one
//! run; 6.8 → 6.1 ms at 128 tokens: 2026-12-06 #10, experiments/h200/gdnscan.sh). The f32
//! kernel keeps its plain form unless one is named (its `columns` and `blocks` forms are
//! untimed). (gdnchunk's `…+lean+ahead+blocks` (chunk_prepare's loads issued a phase ahead),
//! `…+lean+deep+blocks` (chunk_scan's fragments loaded several k-steps ahead) and both lost or
//! were neutral on an H100 (`ahead+deep` 70.4 → 81.9 ms at 2048 tokens, #10; `deep` 70.8 →
//! 83.1, `ahead` 70.1, #11), and gdnchunk2's `…+lean+pairs+blocks`, `…+lean+lower+blocks` and
//! both were neutral: all removed, experiments/NOTES.md "prune" and "Second prune".) The
//! default since 2026-12-07
//! ([`ChunkKernel::DEFAULT`], `coop+quads+fused+lean+splitk+ustore+blocks` since #18): the scan by
//! `chunk_scan_split` on 8 subgroups with W·S's, Q̃·S's and P·V''s reductions split in halves (a
//! new sum order, held to the f64 reference, not the plain form's bits) — on an H100 61.2 →
//! 57.6 ms at the 27B's 2048-token step (experiments/h200/gdn128.sh, session #16 call 1);
//! `coop+quads+lean+splitk+blocks`, Q̃·S after V', is its twin (58.1 ms). Timed on an H100
//! (experiments/h200/gdnkh.sh, 2026-12-07 #18; op ms at 2048 / 128 tokens): the split scan with
//! T·R's U blocks stored from the accumulators (`…+splitk+ustore+blocks`, now the default) 56.9
//! / 5.75 against 58.1 / 5.88; with chunk_prepare's Gram phase once per key head
//! (`…+splitk+keyheads+blocks`: a workgroup per chunk and key head finishing its nv / nk value
//! heads) 58.0 / 9.38, and both (`…+splitk+keyheads+ustore+blocks`) 56.5 / 9.00: the key-head
//! forms lose at 128 tokens (a third of the workgroups, each three heads long) and stay opt-in.
//! All keep the split scan's bits. The f32 kernel's
//! `f32+keyheads+blocks` is its Gram phase once per key head (the plain form's bits).

use super::delta_state::{
    DeltaDims, DeltaState, Dispatch, Resource, bind_group, by_entry, check_batch, check_grid,
    check_state, f32_rows, record, wgsl,
};
use crate::gpu::buffers::{storage_buffer, uniform};
use crate::gpu::context::GpuContext;
use crate::gpu::error::GpuError;
use crate::gpu::kernel::wgsl::MATMUL_COOP16;
use crate::gpu::kernel::{Kernel, KernelSource, KernelVariant, PipelineSpec, WgslModule, build};
use crate::gpu::layout::Slot;
use crate::gpu::paths::{Axes, CoopShape, KernelPaths};
use crate::gpu::profile::{OpBytes, Recorded};
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
/// The same and the f16 scratch (`halves`) of the cooperative-matrix kernel.
const COOP_SLOTS: &[Slot] = &[
    Slot::Read,
    Slot::Read,
    Slot::Read,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::ReadWrite,
    Slot::Uniform,
    Slot::ReadWrite,
];
/// The cooperative-matrix shape the coop kernel is written for.
const COOP_SHAPE: CoopShape = CoopShape::M16x16;

/// How the chunked kernels lay out and schedule their work: ways to compute the same values in
/// the same order, so every form's results equal the default's bit for bit
/// (tests/gpu_gated_delta.rs checks it: the f32 kernel's on every adapter, the coop kernel's on
/// the device) — but `split_k`, which adds its reductions' halves in another order and is held
/// to the f64 reference instead ([`ChunkForm::same_bits`]). They differ in the instructions the
/// driver gets, which only a device can time.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ChunkForm {
    /// Coop kernel: the f16 scratch and tiles as vec4<f16> cells (gated_delta_chunk_quads.wgsl:
    /// 8-byte stores, fragment loads through a vec4 pointer) instead of f16 ones (_halves.wgsl).
    pub quads: bool,
    /// Coop kernel, `SCAN_FUSED`: chunk_scan computes Q̃·S in W·S's loop and the state update's
    /// dk tiles two at a time.
    pub fused: bool,
    /// Coop kernel, `SCAN_LEAN`: chunk_scan loads U before W·S and decays S on the state
    /// update's accumulators (no pass over S and, with `fused`, one barrier less a chunk).
    pub lean: bool,
    /// Coop kernel (`…+splitk+…`): the scan by `chunk_scan_split`, 8 subgroups a workgroup,
    /// each pair splitting W·S's and Q̃·S's dk reduction and P·V''s chunk steps in halves and
    /// the state update one dk tile a subgroup — half the MMA chain a warp, twice the warps;
    /// `fused` there computes Q̃·S in W·S's loop, else after V'. A new sum order (each half
    /// joined, then the halves added): the forms whose results are held to the f64 reference
    /// rather than to the plain form's bits ([`Self::same_bits`]).
    pub split_k: bool,
    /// Both kernels, `PREP_KEY_HEADS` (`…+keyheads+…`): chunk_prepare one workgroup per (chunk,
    /// key head) instead of per value head, computing the Gram matrices K·Kᵀ and Q·Kᵀ (which
    /// read the key head alone) once and finishing A, T, W, U, P for each of the nv / nk value
    /// heads that read it in turn — the Gram phase's MMAs, barriers and loads once instead of
    /// nv / nk times (3 on the 27B). The same values in the same order: the bits of the form
    /// without it.
    pub key_heads: bool,
    /// Coop kernel, `U_DIRECT` (`…+ustore+…`): T·R's U blocks stored from the accumulators
    /// straight to the f32 scratch (row stride dv) where dv is a whole number of 32-column
    /// blocks, not through workgroup memory — a barrier and a copy pass less a block (4 of the
    /// 27B's 8). The same floats: the bits of the form without it.
    pub u_direct: bool,
    /// Both kernels, `INVERSE`: how chunk_prepare computes T = (I + A)⁻¹.
    pub inverse: Inverse,
}

/// How chunk_prepare computes T = (I + A)⁻¹ (wgsl/gated_delta_chunk_io.wgsl, override
/// `INVERSE`); each form adds the same fmas in the same order to every T_tj.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Inverse {
    /// One row at a time, two workgroup barriers a row (126 in a full chunk).
    #[default]
    Rows,
    /// Each column on its own invocation, two barriers in all: column 0 is a chain of 1953
    /// fmas on one invocation while the workgroup waits.
    Columns,
    /// By block rows of 8: the part of each sum over earlier block rows one (row, column) pair
    /// per invocation, then each column finishes the block's rows on its own — the longest
    /// chain 479 fmas, 17 barriers in all.
    Blocks,
}

impl Inverse {
    /// The value of the WGSL's `INVERSE` override.
    fn code(self) -> u8 {
        match self {
            Inverse::Rows => 0,
            Inverse::Columns => 1,
            Inverse::Blocks => 2,
        }
    }

    /// Its suffix in `FAK_GDN_CHUNK`.
    fn suffix(self) -> &'static str {
        match self {
            Inverse::Rows => "",
            Inverse::Columns => "+columns",
            Inverse::Blocks => "+blocks",
        }
    }
}

impl ChunkForm {
    /// The forms the tests run and `FAK_GDN_CHUNK` names on the coop kernel, the plain one
    /// first: each change alone, then quads, fused and columns, then those with the inverse by
    /// blocks, then that with the lean scan (the default), then the default's opt-in twins.
    pub const COOP: [ChunkForm; 12] = [
        ChunkForm::with(false, false, false, Inverse::Rows),
        ChunkForm::with(true, false, false, Inverse::Rows),
        ChunkForm::with(false, true, false, Inverse::Rows),
        ChunkForm::with(false, false, false, Inverse::Columns),
        ChunkForm::with(true, true, false, Inverse::Columns),
        ChunkForm::with(true, true, false, Inverse::Blocks),
        ChunkForm::with(true, true, true, Inverse::Blocks),
        // And the scan on 8 subgroups with its reductions split in halves (opt-in until timed:
        // experiments/h200/gdn128.sh; not the default's bits), Q̃·S in W·S's loop (fused) or
        // after V' (fewer registers at the peak): the same sums, so each other's bits.
        ChunkForm::with(true, true, true, Inverse::Blocks).split_k(),
        ChunkForm::with(true, false, true, Inverse::Blocks).split_k(),
        // And the default with chunk_prepare's Gram phase once per key head, with U stored
        // from the accumulators, and both (opt-in until timed: experiments/h200/gdnkh.sh): the
        // default's bits.
        ChunkForm::with(true, true, true, Inverse::Blocks)
            .split_k()
            .key_heads(),
        ChunkForm::with(true, true, true, Inverse::Blocks)
            .split_k()
            .u_direct(),
        ChunkForm::with(true, true, true, Inverse::Blocks)
            .split_k()
            .key_heads()
            .u_direct(),
    ];
    /// The f32 kernel's forms (it has no f16 cells and one scan): the inverses, and the Gram
    /// phase once per key head with the inverse by blocks.
    pub const F32: [ChunkForm; 4] = [
        ChunkForm::with(false, false, false, Inverse::Rows),
        ChunkForm::with(false, false, false, Inverse::Columns),
        ChunkForm::with(false, false, false, Inverse::Blocks),
        ChunkForm::with(false, false, false, Inverse::Blocks).key_heads(),
    ];

    const fn with(quads: bool, fused: bool, lean: bool, inverse: Inverse) -> Self {
        ChunkForm {
            quads,
            fused,
            lean,
            split_k: false,
            key_heads: false,
            u_direct: false,
            inverse,
        }
    }

    /// The same with the scan's reductions split over 8 subgroups.
    const fn split_k(self) -> Self {
        ChunkForm {
            split_k: true,
            ..self
        }
    }

    /// The same with chunk_prepare's Gram phase once per key head.
    const fn key_heads(self) -> Self {
        ChunkForm {
            key_heads: true,
            ..self
        }
    }

    /// The same with T·R's U blocks stored from the accumulators.
    const fn u_direct(self) -> Self {
        ChunkForm {
            u_direct: true,
            ..self
        }
    }

    /// Whether it computes the plain form's values in the same order (bit for bit): all but
    /// `split_k`, which sums its halves in another order (its forms compute the first split
    /// form's values in the same order: `key_heads` and `u_direct` change neither).
    pub fn same_bits(self) -> bool {
        !self.split_k
    }

    /// The scan's entry point: `chunk_scan`, or `chunk_scan_split` for `split_k`.
    pub fn scan_entry(self) -> &'static str {
        match self.split_k {
            true => "chunk_scan_split",
            false => "chunk_scan",
        }
    }

    /// Its suffix in `FAK_GDN_CHUNK` (`+quads+fused+columns`, empty for the plain form).
    pub fn suffix(self) -> String {
        let cells_and_scan: String = [
            (self.quads, "+quads"),
            (self.fused, "+fused"),
            (self.lean, "+lean"),
            (self.split_k, "+splitk"),
            (self.key_heads, "+keyheads"),
            (self.u_direct, "+ustore"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        cells_and_scan + self.inverse.suffix()
    }
}

/// Which kernel of the chunked delta rule `FAK_GDN_CHUNK` asks for: unset or empty, the
/// cooperative-matrix one where the adapter has it in [`ChunkKernel::DEFAULT`]'s form (the f32
/// kernel elsewhere); `coop`, the cooperative-matrix one in its plain form;
/// `f32`, the f32 kernel everywhere; either followed by the suffix of one of its forms
/// ([`ChunkForm::COOP`], [`ChunkForm::F32`]: `coop+quads`, `f32+columns`, …). Any other value is
/// an error: a measurement must not silently run another kernel than the one it names. (The coop
/// kernel was opt-in until its first H200 pass: a lone u32 in its workgroup memory had broken
/// its tiles there, experiments/coop-probe.)
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ChunkKernel {
    pub coop: bool,
    pub form: ChunkForm,
}

impl ChunkKernel {
    pub const VAR: &'static str = "FAK_GDN_CHUNK";
    pub const F32: ChunkKernel = ChunkKernel {
        coop: false,
        form: ChunkForm::with(false, false, false, Inverse::Rows),
    };
    /// The coop kernel in its plain form (`coop`).
    pub const COOP: ChunkKernel = ChunkKernel {
        coop: true,
        form: ChunkForm::with(false, false, false, Inverse::Rows),
    };
    /// The engine's default (unset or empty): the coop kernel with quads, fused, the lean scan,
    /// the scan's reductions split over 8 subgroups, T·R's U blocks stored from the
    /// accumulators and the inverse by block rows (`coop+quads+fused+lean+splitk+ustore+blocks`).
    /// On an H100 (27B synth, 2026-12-07 #16 call 1, two interleaved rounds) the split scan cut
    /// the chunked delta rule at a 2048-token step from 61.2 to 57.6 ms against
    /// [`Self::DEFAULT_UNSPLIT`] (6.0 → 5.82 ms at 128 tokens, 4.95 → 4.77 at 64; its twin with
    /// Q̃·S after V' 58.1 at 2048); U's direct store then 58.1–58.2 → 56.9 ms at 2048 and
    /// 5.88 → 5.75 at 128, the same bits (#18, experiments/h200/gdnkh.sh). Where its scan's
    /// workgroup memory does not fit (dk = 256 on 48 KiB) the engine runs
    /// [`Self::DEFAULT_UNSPLIT`] ([`GatedDeltaChunked::chosen`]).
    pub const DEFAULT: ChunkKernel = ChunkKernel {
        coop: true,
        form: ChunkForm::with(true, true, true, Inverse::Blocks)
            .split_k()
            .u_direct(),
    };
    /// The default before the split scan, by name `coop+quads+fused+lean+blocks` (chunk_scan on
    /// 4 subgroups, the plain form's bits): the engine's form where the default's does not fit.
    pub const DEFAULT_UNSPLIT: ChunkKernel = ChunkKernel {
        coop: true,
        form: ChunkForm::with(true, true, true, Inverse::Blocks),
    };

    pub fn requested() -> Result<Self, GpuError> {
        match std::env::var(Self::VAR) {
            Err(std::env::VarError::NotPresent) => Ok(ChunkKernel::DEFAULT),
            Ok(v) => Self::named(&v),
            Err(e) => Self::named(&format!("{e}")),
        }
    }

    /// Every kernel and form `FAK_GDN_CHUNK` can name.
    pub fn every() -> impl Iterator<Item = ChunkKernel> {
        let f32 = ChunkForm::F32.map(|form| ChunkKernel { coop: false, form });
        let coop = ChunkForm::COOP.map(|form| ChunkKernel { coop: true, form });
        f32.into_iter().chain(coop)
    }

    /// `FAK_GDN_CHUNK`'s name for it.
    pub fn label(self) -> String {
        let kernel = if self.coop { "coop" } else { "f32" };
        format!("{kernel}{}", self.form.suffix())
    }

    /// The kernel `value` of `FAK_GDN_CHUNK` names.
    pub fn named(value: &str) -> Result<Self, GpuError> {
        if value.is_empty() {
            return Ok(ChunkKernel::DEFAULT);
        }
        Self::every()
            .find(|kernel| kernel.label() == value)
            .ok_or_else(|| {
                let names: Vec<String> = Self::every().map(ChunkKernel::label).collect();
                GpuError::Shape {
                    kernel: GatedDeltaChunked::NAME,
                    message: format!("{}={value:?} is none of {}", Self::VAR, names.join(", ")),
                }
            })
    }
}

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
    q_at: u32,
    k_at: u32,
    pad: u32,
}

/// The per-chunk intermediates chunk_prepare hands to chunk_scan (W, U, P, γ of every chunk and
/// value head), sized for the largest prefill step; the cooperative-matrix kernel keeps U and γ
/// in `buffer` and W, Q̃, K̃, P as hi/lo f16 pairs in `halves`.
pub struct ChunkScratch {
    pub buffer: wgpu::Buffer,
    pub halves: Option<wgpu::Buffer>,
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

/// Half offsets of the cooperative-matrix kernel's f16 regions, each [blocks][2][rows][cols].
struct HalfRegions {
    w: u64,
    q: u64,
    k: u64,
    p: u64,
    end: u64,
}

impl ChunkScratch {
    /// Scratch for `kernel`'s batches of at most `max_tokens` tokens in at most `max_seqs`
    /// sequences.
    pub fn new(
        ctx: &GpuContext,
        kernel: &GatedDeltaChunked,
        max_tokens: u32,
        max_seqs: u32,
    ) -> Result<Self, GpuError> {
        let dims = kernel.dims;
        let chunks = Self::chunks(max_tokens, max_seqs)?;
        let bytes = 4 * Self::regions(&dims, chunks).end;
        let halves = match kernel.on_matrix_units() {
            true => Some(storage_buffer(
                ctx,
                "gated_delta_chunk f16 scratch",
                2 * Self::half_regions(&dims, chunks).end,
            )?),
            false => None,
        };
        Ok(ChunkScratch {
            buffer: storage_buffer(ctx, "gated_delta_chunk scratch", bytes)?,
            halves,
            dims,
            chunks,
        })
    }

    /// Bytes [`ChunkScratch::new`] allocates for these arguments (the memory plan counts them);
    /// for the coop kernel with the f16 regions, an upper bound where the adapter then
    /// runs the f32 kernel.
    pub fn bytes(
        dims: &DeltaDims,
        max_tokens: u32,
        max_seqs: u32,
        kernel: ChunkKernel,
    ) -> Result<u64, GpuError> {
        let chunks = Self::chunks(max_tokens, max_seqs)?;
        let halves = match kernel {
            ChunkKernel { coop: false, .. } => 0,
            ChunkKernel { coop: true, .. } => 2 * Self::half_regions(dims, chunks).end,
        };
        Ok(4 * Self::regions(dims, chunks).end + halves)
    }

    /// Bytes of its buffers.
    pub fn allocated_bytes(&self) -> u64 {
        self.buffer.size() + self.halves.as_ref().map_or(0, wgpu::Buffer::size)
    }

    /// Sequences whose rows do not share a chunk of rows take at most ⌈max_tokens/C⌉ chunks,
    /// and each one's lead rows (wgsl/sequences.wgsl) at most one more.
    fn chunks(max_tokens: u32, max_seqs: u32) -> Result<u32, GpuError> {
        let chunks = u64::from(max_tokens).div_ceil(u64::from(CHUNK)) + u64::from(max_seqs);
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

    fn half_regions(dims: &DeltaDims, chunks: u32) -> HalfRegions {
        let rows = 2 * u64::from(chunks) * u64::from(dims.nv) * u64::from(CHUNK);
        let w = 0;
        let q = w + rows * u64::from(dims.dk);
        let k = q + rows * u64::from(dims.dk);
        let p = k + rows * u64::from(dims.dk);
        HalfRegions {
            w,
            q,
            k,
            p,
            end: p + rows * u64::from(CHUNK),
        }
    }
}

pub struct GatedDeltaChunked {
    variant: KernelPaths,
    form: ChunkForm,
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
    const AXES: Axes = Axes {
        subgroup: true,
        f16: true,
        coop_matrix: true,
        ..Axes::NONE
    };

    fn source(variant: KernelPaths) -> KernelSource {
        Self::source_for(variant, &DeltaDims::QWEN35_27B)
    }

    /// The f32 kernel and the 16×16 cooperative-matrix one (which alone uses subgroups and f16).
    fn variants() -> Vec<KernelPaths> {
        Self::AXES
            .variants()
            .into_iter()
            .filter(|v| match v.coop_matrix {
                Some(shape) => shape == COOP_SHAPE && v.subgroup,
                None => !v.f16 && !v.subgroup,
            })
            .collect()
    }

    /// The f32 kernel, also where cooperative matrices are allowed: [`GatedDeltaChunked::new`]
    /// picks the coop kernel itself (it needs the workgroup memory checked and `FAK_GDN_CHUNK`).
    fn select(_allowed: KernelPaths) -> KernelPaths {
        KernelPaths::FALLBACK
    }
}

impl GatedDeltaChunked {
    /// The module and pipelines of `variant` at `dims`'s key head size (the DK override), the
    /// cooperative-matrix kernel in its default form.
    pub fn source_for(variant: KernelPaths, dims: &DeltaDims) -> KernelSource {
        Self::source_with(variant, dims, ChunkForm::default())
    }

    /// The same in `form` (the f32 kernel takes its inverse and `key_heads` alone).
    pub fn source_with(variant: KernelPaths, dims: &DeltaDims, form: ChunkForm) -> KernelSource {
        let coop = variant.coop_matrix.is_some();
        let form = Self::form_of(variant, form);
        let flag = |on: bool| f64::from(u8::from(on));
        let mut constants = vec![
            ("DK", f64::from(dims.dk)),
            ("INVERSE", f64::from(form.inverse.code())),
            ("PREP_KEY_HEADS", flag(form.key_heads)),
        ];
        if coop {
            constants.push(("SCAN_FUSED", flag(form.fused)));
            constants.push(("SCAN_LEAN", flag(form.lean)));
            constants.push(("U_DIRECT", flag(form.u_direct)));
        }
        let label = ChunkKernel { coop, form }.label();
        let spec = |entry_point: &'static str| PipelineSpec {
            label: format!("{entry_point} dk={} {label}", dims.dk),
            entry_point,
            constants: constants.clone(),
        };
        let cells = match form.quads {
            true => wgsl::GATED_DELTA_CHUNK_QUADS,
            false => wgsl::GATED_DELTA_CHUNK_HALVES,
        };
        let module = WgslModule::new(variant).with(wgsl::SEQUENCES);
        let (module, slots) = match variant.coop_matrix {
            Some(_) => (
                module
                    .with(MATMUL_COOP16)
                    .with(wgsl::GATED_DELTA_CHUNK_IO)
                    .with(cells)
                    .with(wgsl::GATED_DELTA_CHUNK_COOP),
                COOP_SLOTS,
            ),
            None => (
                module
                    .with(wgsl::GATED_DELTA_CHUNK_IO)
                    .with(wgsl::GATED_DELTA_CHUNK),
                SLOTS,
            ),
        };
        KernelSource {
            module,
            slots,
            pipelines: vec![spec("chunk_prepare"), spec(form.scan_entry())],
        }
    }

    /// Workgroup memory of the cooperative-matrix kernel's larger entry point at key head size
    /// `dk` in `form` (the sizes of wgsl/gated_delta_chunk_coop.wgsl's workgroup arrays; the
    /// split scan's vst2 holds two of vst's tiles).
    pub fn coop_workgroup_bytes(dk: u32, form: ChunkForm) -> u32 {
        let chunk = CHUNK;
        // γ and β, in both entry points.
        let shared = 4 * 2 * chunk;
        let prepare = 4 * chunk * (chunk + 4) + 2 * (2 * chunk * (chunk + 8) + 2 * chunk * 40);
        let scan = 4 * (SCAN_ROWS * (dk + 4) + 16 * 16)
            + 2 * (2 * SCAN_ROWS * (dk + 8))
            + 2 * (2 * chunk * (SCAN_ROWS + 8))
            + 4 * chunk * (SCAN_ROWS + 4) * if form.split_k { 2 } else { 1 };
        shared + prepare.max(scan)
    }

    /// The cooperative-matrix variant where `allowed` has 16×16 matrices with subgroups.
    pub fn coop_paths(allowed: KernelPaths) -> Option<KernelPaths> {
        let fastest = Self::AXES.select(allowed);
        (fastest.coop_matrix == Some(COOP_SHAPE) && fastest.subgroup).then_some(fastest)
    }

    /// Builds the kernel and form [`Self::chosen`] picks for `FAK_GDN_CHUNK`
    /// ([`ChunkKernel::requested`]) on `paths` and the device's workgroup memory. An unknown
    /// `FAK_GDN_CHUNK` is an error.
    pub fn new(ctx: &GpuContext, paths: KernelPaths, dims: DeltaDims) -> Result<Self, GpuError> {
        dims.validate()?;
        let limit = ctx.device.limits().max_compute_workgroup_storage_size;
        let (selected, form) = Self::chosen(ChunkKernel::requested()?, paths, dims.dk, limit);
        Self::with_form(ctx, selected, dims, form)
    }

    /// The variant and form [`Self::new`] builds for `requested` where `paths` are allowed, at
    /// key head size `dk`, with `limit` bytes of workgroup memory: the cooperative-matrix kernel
    /// where `paths` have it, `requested` asks for it and its workgroup memory fits — for the
    /// default, in its form or else [`ChunkKernel::DEFAULT_UNSPLIT`]'s (the split scan's two
    /// result tiles do not fit 48 KiB at dk = 256); the f32 kernel otherwise, in the requested
    /// form (its inverse and `key_heads`), the default's in the plain form (the default was timed on the coop
    /// kernel alone).
    pub fn chosen(
        requested: ChunkKernel,
        paths: KernelPaths,
        dk: u32,
        limit: u32,
    ) -> (KernelPaths, ChunkForm) {
        let is_default = requested == ChunkKernel::DEFAULT;
        let forms = match is_default {
            true => vec![requested.form, ChunkKernel::DEFAULT_UNSPLIT.form],
            false => vec![requested.form],
        };
        let fitting = forms
            .into_iter()
            .find(|&form| Self::coop_workgroup_bytes(dk, form) <= limit);
        match (Self::coop_paths(paths), fitting) {
            (Some(coop), Some(form)) if requested.coop => (coop, form),
            _ if is_default => (Self::select(paths), ChunkForm::default()),
            _ => (Self::select(paths), requested.form),
        }
    }

    /// Builds `variant`, one of [`Kernel::variants`], whatever `FAK_GDN_CHUNK` says (the tests
    /// run each), the cooperative-matrix one in its default form.
    pub fn with_variant(
        ctx: &GpuContext,
        variant: KernelPaths,
        dims: DeltaDims,
    ) -> Result<Self, GpuError> {
        Self::with_form(ctx, variant, dims, ChunkForm::default())
    }

    /// The same in `form` (of which the f32 kernel takes the inverse and `key_heads` alone).
    pub fn with_form(
        ctx: &GpuContext,
        variant: KernelPaths,
        dims: DeltaDims,
        form: ChunkForm,
    ) -> Result<Self, GpuError> {
        dims.validate()?;
        if !Self::variants().contains(&variant) {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!("{variant} is not one of its variants"),
            });
        }
        let limit = ctx.device.limits().max_compute_workgroup_storage_size;
        let bytes = Self::coop_workgroup_bytes(dims.dk, form);
        if variant.coop_matrix.is_some() && bytes > limit {
            return Err(GpuError::TooLarge {
                what: format!("{} ({variant}) at dk = {}", Self::NAME, dims.dk),
                size: u64::from(bytes),
                limit: u64::from(limit),
                limit_name: "max_compute_workgroup_storage_size",
            });
        }
        let form = Self::form_of(variant, form);
        let variant = KernelVariant {
            kernel: Self::NAME,
            paths: variant,
            source: Self::source_with(variant, &dims, form),
        };
        let built = build(ctx, &variant)?;
        Ok(GatedDeltaChunked {
            variant: variant.paths,
            form,
            dims,
            layout: built.layout,
            pipelines: by_entry(&variant.source.pipelines, built.pipelines),
        })
    }

    pub fn variant(&self) -> KernelPaths {
        self.variant
    }

    /// The form it was built in.
    pub fn form(&self) -> ChunkForm {
        self.form
    }

    /// What of `form` `variant` has: all of it on cooperative matrices, the inverse and
    /// `key_heads` alone on f32.
    fn form_of(variant: KernelPaths, form: ChunkForm) -> ChunkForm {
        match variant.coop_matrix {
            Some(_) => form,
            None => ChunkForm {
                inverse: form.inverse,
                key_heads: form.key_heads,
                ..ChunkForm::default()
            },
        }
    }

    /// Whether the built kernel is the cooperative-matrix one, which binds the f16 scratch.
    pub fn on_matrix_units(&self) -> bool {
        self.variant.coop_matrix.is_some()
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
        let halves = ChunkScratch::half_regions(&d, io.scratch.chunks);
        let half_buffer = match (self.on_matrix_units(), &io.scratch.halves) {
            (false, _) => None,
            (true, Some(buffer)) => Some(buffer),
            (true, None) => {
                return Err(GpuError::Shape {
                    kernel: Self::NAME,
                    message: "the scratch was made for the f32 kernel, not the \
                              cooperative-matrix one"
                        .into(),
                });
            }
        };
        // The binding checks below keep every float offset under 2^29 and every half offset
        // under 2^30. The coop kernel reads W, P (and Q̃, K̃) from the halves.
        let (w_at, p_at) = match half_buffer {
            Some(_) => (halves.w, halves.p),
            None => (regions.w, regions.p),
        };
        let params = Params {
            conv_dim: d.conv_dim(),
            nk: d.nk,
            nv: d.nv,
            dv: d.dv,
            group_div: d.group_div(),
            w_at: w_at as u32,
            u_at: regions.u as u32,
            p_at: p_at as u32,
            gamma_at: regions.gamma as u32,
            q_at: halves.q as u32,
            k_at: halves.k as u32,
            pad: 0,
        };
        let params = uniform(ctx, "gated_delta_chunk params", &params);
        let mut resources = vec![
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
            Resource::whole("sequence table", &io.table.buffer),
            Resource::Storage {
                name: "chunk scratch",
                buffer: &io.scratch.buffer,
                bytes: 4 * regions.end,
            },
            Resource::whole("recurrent state", &io.state.recurrent),
            Resource::Storage {
                name: "o (delta rule output)",
                buffer: io.o,
                bytes: f32_rows(io.max_tokens, d.value_dim()),
            },
            Resource::Uniform(&params),
        ];
        if let Some(buffer) = half_buffer {
            resources.push(Resource::Storage {
                name: "chunk scratch (f16)",
                buffer,
                bytes: 2 * halves.end,
            });
        }
        let group = bind_group(ctx, Self::NAME, &self.layout, &resources)?;
        Ok(ChunkBinding {
            group,
            max_tokens: io.max_tokens,
            max_seqs: io.table.max_seqs(),
            chunks: io.scratch.chunks,
            max_grid: ctx.device.limits().max_compute_workgroups_per_dimension,
        })
    }

    /// The two dispatches of a prefill, whatever its length: chunk_prepare over (chunks, value
    /// heads — key heads for `key_heads` —, sequences), then chunk_scan over (state-row blocks,
    /// value heads, sequences). The grid counts the longest sequence's chunks with room for its
    /// lead rows (a prompt's chunks are those of the absolute grid: wgsl/sequences.wgsl), over
    /// len + CHUNK − 1 rows; the workgroups of a chunk past a sequence's last return at once.
    /// Several sequences of any lengths ([`SequenceTable::write_ragged`]) must fit the scratch
    /// with their chunks in all.
    pub fn plan(&self, binding: &ChunkBinding, batch: SeqBatch) -> Result<Vec<Dispatch>, GpuError> {
        check_batch(Self::NAME, batch, binding.max_tokens, binding.max_seqs)?;
        // The grid counts the longest sequence's chunks; the scratch holds every sequence's.
        let chunks = (batch.len + CHUNK - 1).div_ceil(CHUNK);
        if batch.chunks > binding.chunks {
            return Err(GpuError::Shape {
                kernel: Self::NAME,
                message: format!(
                    "{} sequences of {} chunks in all exceed the scratch's {} chunks",
                    batch.count, batch.chunks, binding.chunks
                ),
            });
        }
        let (nv, count) = (self.dims.nv, batch.count);
        // chunk_prepare's workgroups: one per value head, or with `key_heads` per key head.
        let prep_heads = match self.form.key_heads {
            true => self.dims.nk,
            false => nv,
        };
        Ok(vec![
            check_grid(
                binding.max_grid,
                Self::NAME,
                "chunk_prepare",
                [chunks, prep_heads, count],
            )?,
            check_grid(
                binding.max_grid,
                Self::NAME,
                self.form.scan_entry(),
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

    /// [`Self::encode`]'s dispatches one at a time, so that a profile can time them apart
    /// (`FAK_GDN_PROFILE=entries`): [`ChunkEntry::Prepare`] then [`ChunkEntry::Scan`], each
    /// recorded once per step in that order; the state bytes are the scan's.
    pub fn encode_entry(
        &self,
        pass: &mut wgpu::ComputePass,
        binding: &ChunkBinding,
        batch: SeqBatch,
        entry: ChunkEntry,
    ) -> Result<Recorded, GpuError> {
        let plan = self.plan(binding, batch)?;
        let at = entry as usize;
        record(pass, &binding.group, &plan[at..=at], &self.pipelines);
        let bytes = match entry {
            ChunkEntry::Prepare => OpBytes::default(),
            ChunkEntry::Scan => self.dims.delta_bytes(batch),
        };
        Ok(Recorded::new(Self::NAME, 1, bytes))
    }
}

/// The chunked delta rule's two dispatches, in [`GatedDeltaChunked::plan`]'s order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ChunkEntry {
    /// chunk_prepare: every chunk's W, U, P, γ (and Q̃, K̃) at once.
    Prepare = 0,
    /// chunk_scan or chunk_scan_split: the state carried across the chunks.
    Scan = 1,
}

/// How a profiled prompt step notes the chunked delta rule (`FAK_GDN_PROFILE`; a measurement
/// knob, not a form — the same dispatches in the same order, so the same bits): unset or empty,
/// as one op `gated_delta`; `entries`, chunk_prepare as op `gated_delta_prepare` and the scan as
/// `gated_delta`, each timed alone. Anything else is an error.
pub fn entries_profiled() -> Result<bool, GpuError> {
    match std::env::var("FAK_GDN_PROFILE") {
        Err(std::env::VarError::NotPresent) => Ok(false),
        Ok(value) => entries_named(&value),
        Err(e) => entries_named(&e.to_string()),
    }
}

/// What `FAK_GDN_PROFILE=value` asks for ([`entries_profiled`]).
pub fn entries_named(value: &str) -> Result<bool, GpuError> {
    match value {
        "" => Ok(false),
        "entries" => Ok(true),
        other => Err(GpuError::Shape {
            kernel: GatedDeltaChunked::NAME,
            message: format!("FAK_GDN_PROFILE={other:?} is neither empty nor `entries`"),
        }),
    }
}
