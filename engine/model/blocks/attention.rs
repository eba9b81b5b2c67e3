//! Causal attention over the paged KV cache: the kernels a model's attention layers share
//! ([`AttentionKernels`]), one layer's norm, rotation, cache write and attention ([`Attention`]),
//! and the attention half of a decoder block with its options ([`AttentionBlock`]).

use super::linear::{FedMatVec, Linear};
use super::pointwise::Pointwise;
use super::projections::{Projection, StackedProjections};
use super::scratch::Act;
use super::{Binder, Kernels};
use crate::gguf::TensorInfo;
use crate::gpu::kernels::attn_decode::{
    AttnDecode, AttnShape, DecodeBinding, DecodeIo, DecodeRopeIo,
};
use crate::gpu::kernels::attn_prefill::{AttnPrefill, PrefillBinding, PrefillIo};
use crate::gpu::kernels::elementwise::ElementwiseOp;
use crate::gpu::kernels::kv_cache::{KvCache, KvDtype, KvLayout};
use crate::gpu::kernels::matmul::MatmulOutput;
use crate::gpu::kernels::quantize_q8::Q8Vectors;
use crate::gpu::kernels::rope::{RopePairing, RopeTable};
use crate::gpu::kernels::rope_kv::{HeadNorms, RopeKvBinding, RopeKvIo};
use crate::gpu::kernels::support::{Positions, View};
use crate::gpu::profile::StepMarks;
use crate::gpu::step::{StepIo, StepKind};
use crate::gpu::{GpuContext, GpuError, fill_f32, storage_buffer};
use crate::model::tensors::AttentionTensors;
use crate::model::{DevicePlan, ModelError};

/// The head shape and rotary embedding of a model's attention layers, as its spec reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    pub n_head: usize,
    pub n_kv: usize,
    pub head_dim: usize,
    /// Rotated dims per head (the first `n_rot`).
    pub n_rot: usize,
    pub pairing: RopePairing,
    pub rope_base: f32,
}

/// Shapes of one causal attention block.
#[derive(Clone, Copy, Debug)]
pub struct AttentionDims {
    pub n_head: usize,
    pub n_kv: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub pairing: RopePairing,
    pub max_context: usize,
    pub max_tokens: u32,
    /// Token slots per KV page, and physical pages in the pool every sequence draws from.
    pub page_size: u32,
    pub kv_pages: u32,
    /// Most sequences one decode step serves.
    pub max_seqs: u32,
    /// NaN-fill the caches at load (see `DevicePlan::poison`).
    pub poison: bool,
}

impl AttentionDims {
    /// The attention layers of `shape`, loaded for `plan`.
    pub fn new(shape: &AttentionShape, plan: &DevicePlan) -> AttentionDims {
        AttentionDims {
            n_head: shape.n_head,
            n_kv: shape.n_kv,
            head_dim: shape.head_dim,
            n_rot: shape.n_rot,
            pairing: shape.pairing,
            max_context: plan.max_context,
            max_tokens: plan.max_tokens,
            page_size: plan.page_size,
            kv_pages: plan.kv_pages,
            max_seqs: plan.max_seqs,
            poison: plan.poison,
        }
    }
}

/// The attention kernels of one head shape (every attention layer of a model shares them), the
/// split-K scratch their decode and split prefill passes share (a step runs one layer's
/// attention after another), and the buffer a KV page copy goes through.
pub struct AttentionKernels {
    decode: AttnDecode,
    prefill: AttnPrefill,
    scratch: wgpu::Buffer,
    n_split: u32,
    page_bounce: wgpu::Buffer,
}

impl AttentionKernels {
    pub fn new(ctx: &GpuContext, dims: &AttentionDims) -> Result<AttentionKernels, GpuError> {
        let shape = AttnShape {
            n_head: dims.n_head as u32,
            n_kv: dims.n_kv as u32,
            head_dim: dims.head_dim as u32,
        };
        let mut decode = AttnDecode::new(ctx, ctx.paths(), shape)?;
        if super::decode_fuse("rope") {
            // Where the adapter cannot hold the form, or it could not give rope_kv's bits, a
            // decode step keeps the rope_kv dispatch.
            let _ = decode.build_rope(ctx);
        }
        let prefill = AttnPrefill::new(ctx, ctx.paths(), shape)?;
        let n_split = AttnDecode::default_splits(dims.max_context as u32);
        // Prefill steps split only as far as one binding of it reaches.
        let prefill_bytes = prefill
            .scratch_bytes(dims.max_tokens, dims.max_context as u32)
            .min(ctx.max_binding_size());
        let scratch = storage_buffer(
            ctx,
            "attention split-K scratch",
            decode
                .scratch_bytes(dims.max_seqs, n_split)
                .max(prefill_bytes),
        )?;
        // One page of one layer's K (or V), at the larger (f32) element size.
        let page_bounce = storage_buffer(
            ctx,
            "kv page bounce",
            4 * (dims.n_kv * dims.head_dim) as u64 * u64::from(dims.page_size),
        )?;
        Ok(AttentionKernels {
            prefill,
            decode,
            scratch,
            n_split,
            page_bounce,
        })
    }

    /// The tokens each sequence's rows start on a multiple of in a step of several prompts
    /// (`StepIo::pad_row`): the fewest whole (token, query head) row tiles of the prefill
    /// attention that hold whole tokens, lcm(rows per tile, GROUP) / GROUP.
    pub fn prompt_alignment(&self) -> u32 {
        let (tile, group) = (self.prefill.rows_per_tile(), self.prefill.shape().group());
        let gcd = |mut a: u32, mut b: u32| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        tile / gcd(tile, group)
    }

    /// The shared pool: `kv_pages` pages, rows long enough for `max_context` tokens.
    fn layout(&self, dims: &AttentionDims, dtype: KvDtype) -> KvLayout {
        KvLayout {
            n_kv: dims.n_kv as u32,
            head_dim: dims.head_dim as u32,
            page_size: dims.page_size,
            n_pages: dims.kv_pages,
            pages_per_row: (dims.max_context as u32).div_ceil(dims.page_size),
            dtype,
        }
    }
}

/// Per-head q/k norm, rotary embedding, cache write and causal attention of one layer, over q,
/// k, v rows already projected: `o[t] = softmax(q[t] K^T / sqrt(d)) V` over positions 0..=pos(t).
/// Every kernel reads each token's position and page-table row from `io.tokens` (the runtime
/// writes it per step), so one binding serves a prefill chunk of one sequence and a decode step
/// of several, each sequence on its own pages of the shared pool.
pub struct Attention {
    cache: KvCache,
    prepare: RopeKvBinding,
    /// The decode attention; in the rope form (`FAK_DECODE_FUSE=rope`) it also does `prepare`'s
    /// work for a decode step, which then records no rope_kv dispatch.
    decode: DecodeBinding,
    prefill: PrefillBinding,
}

/// Where one layer's attention reads its q, k, v (read-only: they may share a buffer), puts the
/// normed and rotated q (`q_out`, another buffer) and writes o.
pub struct AttentionIo<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub q_out: View<'a>,
    pub o: View<'a>,
    /// The per-head q and k norms (qwen3, qwen35), or none.
    pub norms: Option<HeadNorms<'a>>,
    /// The output gate (qwen35: `o ⊙= σ(gate)`), which the decode kernel applies as it writes o;
    /// a prompt step's gate is the block's own op.
    pub gate: Option<View<'a>>,
    /// Where the decode kernel also writes o (gated) as q8 blocks for W_o's integer mat-vec.
    pub o_q8: Option<&'a Q8Vectors>,
}

impl Attention {
    pub fn bind(
        k: &Kernels,
        attn: &AttentionKernels,
        ctx: &GpuContext,
        dims: &AttentionDims,
        rope: &RopeTable,
        io: AttentionIo<'_>,
        step_io: &StepIo,
    ) -> Result<Attention, GpuError> {
        let step = &step_io.step;
        let pages = &step_io.pages;
        let positions = Positions::Table(&step_io.tokens);
        let cache = KvCache::new(ctx, attn.layout(dims, k.rope_kv.dtype()))?;
        if dims.poison {
            // An f16 cache reads the pair of NaN halves as NaN too.
            fill_f32(ctx, &cache.k, f32::NAN)?;
            fill_f32(ctx, &cache.v, f32::NAN)?;
        }
        let prepare = k.rope_kv.bind(
            ctx,
            &RopeKvIo {
                q: io.q,
                k: io.k,
                v: io.v,
                q_out: io.q_out,
                n_head: dims.n_head as u32,
                norms: io.norms,
                pairing: dims.pairing,
                table: rope,
                cache: &cache,
                pages,
                positions,
                step,
                max_tokens: dims.max_tokens,
            },
        )?;
        let decode_io = |q| DecodeIo {
            q,
            o: io.o,
            gate: io.gate,
            o_q8: io.o_q8,
            cache: &cache,
            pages,
            positions,
            step,
            n_split: attn.n_split,
            scratch: (attn.n_split > 1).then_some(&attn.scratch),
            max_seqs: dims.max_seqs,
        };
        let decode = match attn.decode.has_rope() {
            false => attn.decode.bind(ctx, decode_io(io.q_out))?,
            true => attn.decode.bind_rope(
                ctx,
                decode_io(io.q),
                DecodeRopeIo {
                    k: io.k,
                    v: io.v,
                    norms: io.norms,
                    pairing: dims.pairing,
                    table: rope,
                },
            )?,
        };
        let prefill = attn.prefill.bind(
            ctx,
            PrefillIo {
                q: io.q_out,
                o: io.o,
                cache: &cache,
                pages,
                positions,
                step,
                max_tokens: dims.max_tokens,
                scratch: Some(&attn.scratch),
            },
        )?;
        Ok(Attention {
            cache,
            prepare,
            decode,
            prefill,
        })
    }

    /// Records copying physical page `src` of this layer's K and V into page `dst`.
    pub fn copy_page(
        &self,
        attn: &AttentionKernels,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError> {
        self.cache.copy_page(encoder, src, dst, &attn.page_bounce)
    }

    /// Norms and rotates q and k, writes k and v into the cache (one `rope_kv` dispatch, or in a
    /// decode step of the rope form the decode kernel itself) and attends: the split-K decode
    /// kernel for a decode step's token of each of `n` sequences, the tiled causal kernel for
    /// prompt tokens (however few). The attention op reads k and v of every cached position once
    /// (`marks.kv_len` of them, summed over a batch's sequences).
    pub fn record(
        &self,
        k: &Kernels,
        attn: &AttentionKernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let decode = marks.kind == StepKind::Decode;
        if !(decode && self.decode.is_rope()) {
            let prepared =
                marks.probed("rope_kv", pass, |p| k.rope_kv.encode(p, &self.prepare, n))?;
            marks.op(pass, "rope_kv", prepared);
        }
        let kv_len = marks.kv_len;
        let attended = if decode {
            marks.probed("attention", pass, |p| {
                attn.decode.encode(p, &self.decode, n, kv_len)
            })?
        } else {
            // A prompt step is one sequence: its last token sees marks.kv_len keys.
            attn.prefill.encode(pass, &self.prefill, n, marks.kv_len)?
        };
        marks.op(pass, "attention", attended);
        Ok(())
    }
}

/// The attention half of a decoder block (model-spec.md §4.b–f, §5.3): attn_norm and the q, k, v
/// projections of its h, stacked where their types agree; their biases where the file has them
/// (qwen2); the per-head q/k RMSNorm where it has the norms (qwen3, qwen3.5); RoPE, the KV
/// cache write and causal GQA attention; the output gate where W_q holds one per head (qwen3.5:
/// `o ⊙= σ(gate)`); and `x += W_o o`.
pub struct AttentionBlock {
    qkv: StackedProjections,
    bias: Vec<Pointwise>,
    attention: Attention,
    gate: Option<Pointwise>,
    /// Whether a decode step's attention kernel applies the gate (then no gate op runs).
    gate_in_decode: bool,
    wo: Linear,
    /// On the int-dot path: W_o's decode mat-vec reading the q8 blocks of o that the decode
    /// attention writes (no quantize dispatch).
    wo_fed: Option<FedMatVec>,
}

impl AttentionBlock {
    /// Binds the layer's attention (tensors `t`, its input norm `attn_norm`) over the shared
    /// activations, on the shared pool's page-table rows (`io.tokens`, `io.pages`).
    pub fn bind(
        b: &Binder,
        (kernels, dims, rope): (&AttentionKernels, &AttentionDims, &RopeTable),
        attn_norm: &TensorInfo,
        t: &AttentionTensors,
    ) -> Result<AttentionBlock, ModelError> {
        let s = b.scratch;
        let (n_head, n_kv, hd) = (dims.n_head as u32, dims.n_kv as u32, dims.head_dim as u32);
        let (q_dim, kv_dim) = (n_head * hd, n_kv * hd);
        // q, k, v in runs of weights that can be stored back to back (one mat-vec each): all
        // three when they share a type, q+k when only v differs (Q4_K_M's Q6_K v layers), ….
        // A run's outputs go to the buffer of its first tensor, side by side per token.
        let parts =
            [(t.wq, Act::Qkv), (t.wk, Act::K), (t.wv, Act::V)].map(|(tensor, act)| Projection {
                tensor,
                y: s.get(act),
            });
        let x_h = (s.get(Act::X), s.get(Act::H));
        let (qkv, outputs) = StackedProjections::bind(b, x_h, attn_norm, &parts, qkv_op_name)?;
        // With an output gate, head h's q is values [2h·hd, (2h+1)·hd) of W_q's output, its
        // gate the next hd.
        let q_stride = if t.output_gate { 2 * hd } else { hd };
        let q = outputs[0].heads(n_head, hd, q_stride);
        let mut bias = Vec::new();
        for (tensor, out, width) in [
            (t.bias[0], outputs[0], q_dim),
            (t.bias[1], outputs[1], kv_dim),
            (t.bias[2], outputs[2], kv_dim),
        ] {
            if let Some(tensor) = tensor {
                let y = b.vector(tensor)?;
                let op = ElementwiseOp::Add {
                    x: out.rows(),
                    y: View::rows(&y, width).strided(0, 0),
                };
                bias.push(b.pointwise(1, width as usize, op)?);
            }
        }
        let norms = match t.qk_norm {
            Some([q, k]) => Some((b.vector(q)?, b.vector(k)?)),
            None => None,
        };
        let o = View::heads(s.get(Act::O), n_head, hd);
        let gate_in_decode = t.output_gate && super::decode_fusion();
        // o's q8 blocks are what W_o reads only where the kernel also applies the gate.
        let fold = super::decode_q8_fold()
            && (gate_in_decode || !t.output_gate)
            && AttnDecode::quantizes(&AttnShape {
                n_head,
                n_kv,
                head_dim: hd,
            });
        let (wo, wo_fed) = b.linear_fed(
            t.wo,
            (s.get(Act::O), s.get(Act::X)),
            MatmulOutput::Accumulate,
            fold,
        )?;
        let attention = Attention::bind(
            b.k,
            kernels,
            b.ctx,
            dims,
            rope,
            AttentionIo {
                q,
                k: outputs[1].heads(n_kv, hd, hd),
                v: outputs[2].heads(n_kv, hd, hd),
                q_out: View::heads(s.get(Act::QRot), n_head, hd),
                o,
                norms: norms.as_ref().map(|(q, k)| HeadNorms { q, k, eps: b.eps }),
                gate: gate_in_decode.then(|| q.at(q.offset + hd)),
                o_q8: wo_fed.as_ref().map(FedMatVec::vectors),
            },
            b.io,
        )?;
        let gate = match t.output_gate {
            true => {
                let op = ElementwiseOp::SigmoidGate {
                    o,
                    gate: q.at(q.offset + hd),
                };
                Some(b.pointwise(dims.n_head, dims.head_dim, op)?)
            }
            false => None,
        };
        Ok(AttentionBlock {
            qkv,
            bias,
            attention,
            gate,
            gate_in_decode,
            wo,
            wo_fed,
        })
    }

    /// Records the block for `n` tokens of a step of `marks.kind`.
    pub fn record(
        &self,
        k: &Kernels,
        attn: &AttentionKernels,
        pass: &mut wgpu::ComputePass,
        n: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        self.qkv.record(k, pass, n, marks, "attn_norm")?;
        for op in &self.bias {
            op.record(k, pass, n, marks, "qkv_bias")?;
        }
        self.attention.record(k, attn, pass, n, marks)?;
        // A decode step's attention kernel applied the gate as it wrote o.
        let applied = self.gate_in_decode && marks.kind == StepKind::Decode;
        if let Some(gate) = &self.gate
            && !applied
        {
            gate.record(k, pass, n, marks, "attn_gate")?;
        }
        if let Some(wo) = &self.wo_fed
            && marks.kind == StepKind::Decode
        {
            // o read as the q8 blocks the decode attention wrote.
            let recorded = marks.probed("attn_output", pass, |p| wo.encode(k, p, n))?;
            marks.op(pass, "attn_output", recorded);
            return Ok(());
        }
        self.wo.record(k, pass, n, marks, "attn_output")
    }

    /// Records copying physical page `src` of this layer's K and V into page `dst`.
    pub fn copy_page(
        &self,
        attn: &AttentionKernels,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError> {
        self.attention.copy_page(attn, encoder, src, dst)
    }
}

/// The op name of a run of an attention layer's q, k, v projections (`run` indexes [q, k, v]).
pub fn qkv_op_name(run: std::ops::Range<usize>) -> &'static str {
    match (run.start, run.len()) {
        (0, 3) => "attn_qkv",
        (0, 2) => "attn_qk",
        (0, _) => "attn_q",
        (1, 2) => "attn_kv",
        (1, _) => "attn_k",
        _ => "attn_v",
    }
}
