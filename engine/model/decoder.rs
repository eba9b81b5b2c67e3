//! The skeleton every architecture shares: what its spec file reads from a GGUF ([`Blueprint`]:
//! the tensors in one table, the attention and GDN shapes, the activations), what that costs on
//! the device (`DevicePlan` reads it), and the model on the GPU ([`Decoder`]): the embedding,
//! the layers (each a mixer block and an MLP) and the output head, recorded one step at a time.

use super::blocks::attention::{AttentionBlock, AttentionDims, AttentionKernels, AttentionShape};
use super::blocks::delta_net::{DeltaNetBlock, DeltaNetKernels};
use super::blocks::embedding::{Ends, HeadRows};
use super::blocks::mlp::Mlp;
use super::blocks::scratch::{Scratch, ScratchTable};
use super::blocks::{Binder, Kernels};
use super::tensors::{Mixer, Tensors};
use super::{DeviceModel, DevicePlan, ModelError, vector};
use crate::gguf::Gguf;
use crate::gpu::kernels::delta_state::{DeltaDims, DeltaState};
use crate::gpu::kernels::gated_delta_chunk::{CHUNK, ChunkKernel, ChunkScratch};
use crate::gpu::kernels::rope::RopeTable;
use crate::gpu::profile::StepMarks;
use crate::gpu::step::{MAX_BATCH, SeqBatch, StepIo};
use crate::gpu::{GpuContext, GpuError};

/// What an architecture's spec file reads from a GGUF: everything the plan and the GPU model
/// need, the file's hyperparameters and tensors checked.
pub struct Blueprint<'g> {
    /// The label of the compute pass of the layers (`dense layers`, …).
    pub label: &'static str,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    /// The RMSNorm eps of every norm.
    pub eps: f32,
    pub attention: AttentionShape,
    /// The Gated DeltaNet layers' shape, where the model has them.
    pub delta: Option<DeltaDims>,
    /// Every activation the model allocates.
    pub scratch: ScratchTable,
    /// The blocks the file declares (`{arch}.block_count`): the layers of `tensors`, and any
    /// after them the engine does not run (multi-token prediction).
    pub n_blocks: usize,
    pub tensors: Tensors<'g>,
}

impl Blueprint<'_> {
    /// K and V elements of one token over every attention layer.
    pub fn kv_elems_per_token(&self) -> u64 {
        let a = &self.attention;
        (self.tensors.count(true) * 2 * a.n_kv * a.head_dim) as u64
    }

    /// Conv and recurrent state bytes of one sequence over every GDN layer (0 without them).
    pub fn state_bytes(&self) -> u64 {
        self.delta.map_or(0, |d| {
            let per_layer = 4 * (d.conv_state_floats() + d.recurrent_state_floats());
            self.tensors.count(false) as u64 * per_layer
        })
    }

    /// The weight bytes one decode step reads.
    pub fn decode_step_bytes(&self) -> DecodeStepBytes {
        let t = &self.tensors;
        DecodeStepBytes {
            bytes: t.read_per_step().iter().map(|t| t.n_bytes).sum::<u64>() + t.embd.row_bytes(),
            embedding_row_bytes: t.embd.row_bytes(),
            tied_lm_head: t.tied,
        }
    }

    /// The FLOPs every prompt token costs at the least: 2 × the elements of the layers' weight
    /// products (what each token multiplies; the embedding lookup, the head, the conv taps and
    /// attention's own products left out), for the compute floor under a TTFT. The mat-vec and
    /// mat-mul kernels record the same per token.
    pub fn prefill_flops_per_token(&self) -> u64 {
        let products = self.tensors.layers.iter().flat_map(|l| {
            let mixer = match &l.mixer {
                Mixer::Attention(a) => vec![a.wq, a.wk, a.wv, a.wo],
                Mixer::DeltaNet(d) => vec![d.qkv, d.gate, d.beta, d.alpha, d.out],
            };
            mixer.into_iter().chain([l.mlp.gate, l.mlp.up, l.mlp.down])
        });
        2 * products.map(|t| t.n_elements()).sum::<u64>()
    }

    /// Bytes of the activations of steps of up to `max_tokens` tokens that keep `logit_rows`
    /// rows of logits: the table's, the logits (`StepIo::logits`) and the chunked delta rule's
    /// f32 scratch (hybrid models, steps of more than one token): what [`Decoder::load`] and
    /// `StepIo` allocate on every adapter.
    pub fn scratch_bytes(&self, max_tokens: u32, logit_rows: u32) -> Result<u64, ModelError> {
        let logits = 4 * u64::from(logit_rows) * self.n_vocab as u64;
        let chunked = self.chunk_bytes(max_tokens, ChunkKernel::F32)?;
        Ok(self.scratch.bytes(max_tokens, logit_rows) + logits + chunked)
    }

    /// The chunked delta rule's f16 scratch, allocated besides [`Decoder::scratch_bytes`] only
    /// where its cooperative-matrix kernel runs (which the plan, made before the adapter is
    /// known, cannot tell): 0 unless `FAK_GDN_CHUNK` leaves that kernel chosen.
    pub fn coop_scratch_bytes(&self, max_tokens: u32) -> Result<u64, ModelError> {
        let requested = ChunkKernel::requested()?;
        Ok(self.chunk_bytes(max_tokens, requested)?
            - self.chunk_bytes(max_tokens, ChunkKernel::F32)?)
    }

    fn chunk_bytes(&self, max_tokens: u32, kernel: ChunkKernel) -> Result<u64, ModelError> {
        Ok(match self.delta {
            Some(dims) if max_tokens > 1 => {
                ChunkScratch::bytes(&dims, max_tokens, MAX_BATCH, kernel)?
            }
            _ => 0,
        })
    }
}

/// The weight bytes one decode step reads: every tensor of the layers and the head once, one row
/// of the embedding (and, when tied, the whole table as the head); tensors the architecture does
/// not read per step (MTP blocks, rope divisors) not at all. KV-cache and recurrent-state reads
/// depend on depth and are not included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DecodeStepBytes {
    pub bytes: u64,
    pub embedding_row_bytes: u64,
    pub tied_lm_head: bool,
}

/// A decoder on the GPU: the weights, one bound block per layer, the activations every layer
/// shares (a step of `n` tokens uses their first `n` rows), the attention layers' KV caches and
/// the GDN layers' state (a slot per sequence in flight).
pub struct Decoder {
    label: &'static str,
    n_vocab: usize,
    max_context: usize,
    kernels: Kernels,
    attention: AttentionKernels,
    delta: Option<DeltaNetKernels>,
    /// The embedding and the output head around the layers.
    ends: Ends,
    layers: Vec<DecoderLayer>,
    /// Bytes of the activations allocated for it (the scratch table and the chunked delta
    /// rule's scratch).
    activation_bytes: u64,
}

struct DecoderLayer {
    mixer: MixerBlock,
    mlp: Mlp,
}

enum MixerBlock {
    Attention(Box<AttentionBlock>),
    DeltaNet(Box<DeltaNetBlock>),
}

impl Decoder {
    /// Binds `b`'s model (read from `gguf`) for `plan` on the step buffers `io`.
    pub fn load(
        ctx: &GpuContext,
        gguf: &Gguf,
        io: &StepIo,
        plan: &DevicePlan,
        b: &Blueprint,
    ) -> Result<Decoder, ModelError> {
        let kernels = Kernels::new(ctx)?;
        let dims = AttentionDims::new(&b.attention, plan);
        let attention = AttentionKernels::new(ctx, &dims)?;
        let freqs = b.tensors.rope_freqs.map(|r| vector(gguf, r)).transpose()?;
        let rope = RopeTable::new(
            ctx,
            b.attention.n_rot as u32,
            b.attention.rope_base,
            freqs.as_deref(),
        )?;
        let delta = b
            .delta
            .map(|d| DeltaNetKernels::new(ctx, d, plan.max_tokens))
            .transpose()?;
        let scratch = Scratch::new(ctx, &b.scratch, plan.max_tokens, io.logit_rows, plan.poison)?;
        let binder = Binder {
            k: &kernels,
            ctx,
            gguf,
            io,
            step: &io.step,
            scratch: &scratch,
            rows: plan.max_tokens,
            eps: b.eps,
            poison: plan.poison,
        };
        let ends = Ends::bind(&binder, &b.tensors)?;
        let mut layers: Vec<DecoderLayer> = Vec::with_capacity(b.tensors.layers.len());
        for l in &b.tensors.layers {
            let mixer = match &l.mixer {
                Mixer::Attention(t) => {
                    let shared = (&attention, &dims, &rope);
                    let block = AttentionBlock::bind(&binder, shared, l.attn_norm, t)?;
                    MixerBlock::Attention(Box::new(block))
                }
                Mixer::DeltaNet(t) => {
                    let d = delta.as_ref().ok_or_else(|| no_delta_dims(gguf))?;
                    let block = DeltaNetBlock::bind(&binder, d, l.attn_norm, t)?;
                    MixerBlock::DeltaNet(Box::new(block))
                }
            };
            let mlp = Mlp::bind(&binder, &l.mlp)?;
            layers.push(DecoderLayer { mixer, mlp });
        }
        let chunked = delta.as_ref().map_or(0, DeltaNetKernels::scratch_bytes);
        Ok(Decoder {
            label: b.label,
            n_vocab: b.n_vocab,
            max_context: plan.max_context,
            activation_bytes: scratch.bytes() + chunked,
            kernels,
            attention,
            delta,
            ends,
            layers,
        })
    }

    /// The layers over `batch` (one sequence's tokens, or one token of each sequence of a
    /// batched decode step), then the head on `rows` of them.
    fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        batch: SeqBatch,
        rows: HeadRows<'_>,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let (k, n) = (&self.kernels, batch.rows);
        let layers = |pass: &mut wgpu::ComputePass, marks: &mut StepMarks| {
            self.record_layers(pass, batch, marks)
        };
        self.ends
            .record(k, encoder, self.label, n, rows, marks, layers)
    }

    fn record_layers(
        &self,
        pass: &mut wgpu::ComputePass,
        batch: SeqBatch,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let (k, n) = (&self.kernels, batch.rows);
        for l in &self.layers {
            match &l.mixer {
                MixerBlock::Attention(m) => m.record(k, &self.attention, pass, n, marks)?,
                MixerBlock::DeltaNet(m) => {
                    let d = self.delta.as_ref().expect("bound with the GDN kernels");
                    m.record(k, d, pass, batch, marks)?
                }
            }
            l.mlp.record(k, pass, n, marks)?;
        }
        Ok(())
    }

    /// The GDN layers' states (a slot per sequence each), in layer order.
    fn states(&self) -> impl Iterator<Item = &DeltaState> {
        self.layers.iter().filter_map(|l| match &l.mixer {
            MixerBlock::DeltaNet(m) => Some(&m.state),
            MixerBlock::Attention(_) => None,
        })
    }
}

fn no_delta_dims(gguf: &Gguf) -> ModelError {
    ModelError::Hparams {
        path: gguf.path().to_owned(),
        why: "a Gated DeltaNet layer in an architecture without its dimensions".into(),
    }
}

impl DeviceModel for Decoder {
    fn encode_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_tokens: u32,
        all_logits: bool,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let rows = match all_logits {
            true => HeadRows::Every(n_tokens),
            false => HeadRows::Last,
        };
        self.record(encoder, SeqBatch::uniform(1, n_tokens), rows, marks)
    }

    fn encode_batch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        n_seqs: u32,
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        let batch = SeqBatch::uniform(n_seqs, 1);
        self.record(encoder, batch, HeadRows::Batch, marks)
    }

    fn encode_prompts(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        batch: SeqBatch,
        last_rows: &[u32],
        marks: &mut StepMarks,
    ) -> Result<(), GpuError> {
        self.record(encoder, batch, HeadRows::Rows(last_rows), marks)
    }

    fn prompt_alignment(&self) -> u32 {
        let attention = self.attention.prompt_alignment();
        let gcd = |mut a: u32, mut b: u32| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        match self.delta {
            Some(_) => attention / gcd(attention, CHUNK) * CHUNK,
            None => attention,
        }
    }

    fn encode_reset(&self, encoder: &mut wgpu::CommandEncoder, slot: u32) -> Result<(), GpuError> {
        self.states()
            .try_for_each(|state| state.zero_slot(encoder, slot))
    }

    fn state_bytes(&self) -> u64 {
        self.states().map(DeltaState::snapshot_bytes).sum()
    }

    /// The snapshot is every GDN layer's slot snapshot (conv then recurrent), in layer order.
    fn encode_save_state(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        slot: u32,
        dst: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        if self.states().next().is_none() {
            return Err(super::device_model::no_state());
        }
        let mut offset = 0;
        for state in self.states() {
            state.save_slot(encoder, slot, dst, offset)?;
            offset += state.snapshot_bytes();
        }
        Ok(())
    }

    fn encode_restore_state(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        slot: u32,
    ) -> Result<(), GpuError> {
        if self.states().next().is_none() {
            return Err(super::device_model::no_state());
        }
        let mut offset = 0;
        for state in self.states() {
            state.restore_slot(encoder, src, offset, slot)?;
            offset += state.snapshot_bytes();
        }
        Ok(())
    }

    fn encode_copy_page(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        src: u32,
        dst: u32,
    ) -> Result<(), GpuError> {
        for l in &self.layers {
            if let MixerBlock::Attention(m) = &l.mixer {
                m.copy_page(&self.attention, encoder, src, dst)?;
            }
        }
        Ok(())
    }

    fn max_context(&self) -> usize {
        self.max_context
    }

    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn activation_bytes(&self) -> u64 {
        self.activation_bytes
    }
}
