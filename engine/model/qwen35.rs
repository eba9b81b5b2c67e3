//! Qwen3.5 (GGUF arch `qwen35`): a hybrid of Gated DeltaNet layers and gated full-attention
//! layers, each followed by a dense SwiGLU MLP (model-spec.md §5).
//!
//! Decoder block: `u = x + Mixer(RMSNorm(x; attn_norm))`, `x' = u + MLP(RMSNorm(u; post_attention_norm))`.
//! - GDN mixer: `m = W_qkv h`, causal depthwise conv (K taps, tap 0 the oldest) + SiLU, split
//!   into q, k (nk heads of dk) and v (nv heads of dv); `β = σ(W_β h)`,
//!   `g = ssm_a · softplus(W_α h + dt_bias)`; q̂ = l2norm(q)/√dk, k̂ = l2norm(k); per v-head the
//!   delta rule on a dk×dv state; `y = ssm_norm ⊙ RMSNorm₀(o) ⊙ silu(z)`, `out = W_out y`.
//! - Gated attention: `W_q h` holds per head [q | gate] (hd each); q/k per-head RMSNorm; NeoX RoPE
//!   on the first n_rot dims; causal GQA; `o ⊙ σ(gate)`; `W_o`.
//!
//! On the GPU ([`super::decoder::Decoder`]) each layer is a Gated DeltaNet block or an
//! attention block with an output gate, then an MLP block, over activations shared by all
//! layers; the GDN layers keep their conv and recurrent state, one slot per
//! sequence in flight (its page-table row), beside the attention layers' paged KV caches. A step
//! of one token runs the recurrent delta rule, a prefill step the chunked form (two dispatches
//! whatever its length); both continue the same state, so a prefill may be split over steps and
//! decode picks up where it ended. A batched decode step serves one token of each of several
//! sequences: the projections multiply all their rows in one mat-vec (each weight read once),
//! the GDN kernels run each sequence on its own state slot (`io.seqs`), attention on its own
//! pages and position (`io.tokens`).
//!
//! Traps this file handles: GGUF norm weights already include the +1 (`ssm_norm` never had
//! one); `ssm_a` is already −exp(A_log); V heads are stored tiled (v-head p reads k-head
//! p mod nk) unless the file says `ssm.v_head_reordered = false`; MTP/NextN blocks after the trunk
//! are skipped.

use super::blocks::attention::AttentionShape;
use super::blocks::scratch::{Act, ScratchTable};
use super::bounds::Size;
use super::decoder::Blueprint;
use super::hparams::Keys;
use super::tensors::{AttentionLayout, Block, DeltaNetTensors, Layer, Mixer, Presence, Tensors};
use super::{Arch, ModelError};
use crate::gguf::Gguf;
use crate::gpu::GpuError;
use crate::gpu::kernels::delta_state::{DeltaDims, HeadMapping};
use crate::gpu::kernels::rope::RopePairing;
use crate::gpu::kernels::ssm_conv::SUPPORTED_CONV_KERNELS;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum LayerKind {
    DeltaNet,
    Attention,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Hparams {
    pub n_embd: usize,
    /// Trunk layers (MTP blocks excluded).
    pub n_layer: usize,
    pub layer_kinds: Vec<LayerKind>,
    pub n_ff: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    // Gated attention.
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_rot: usize,
    pub rope_base: f32,
    // Gated DeltaNet.
    pub conv_kernel: usize,
    /// dk: key (and query) head size.
    pub ssm_dk: usize,
    /// dv: value head size.
    pub ssm_dv: usize,
    /// nk: key heads.
    pub ssm_nk: usize,
    /// nv: value heads.
    pub ssm_nv: usize,
    pub head_mapping: HeadMapping,
}

impl Hparams {
    pub fn from_gguf(gguf: &Gguf) -> Result<Self, ModelError> {
        let arch = Arch::of(gguf)?;
        if arch != Arch::Qwen35 {
            return Err(ModelError::Hparams {
                path: gguf.path().to_owned(),
                why: format!("{arch:?} is not a qwen35 model"),
            });
        }
        let k = Keys::new(gguf, "qwen35");
        let n_blocks = k.block_count()?;
        let n_mtp = k.opt_usize("nextn_predict_layers")?.unwrap_or(0);
        let n_layer = n_blocks
            .checked_sub(n_mtp)
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                k.error(
                    "nextn_predict_layers",
                    format!("{n_mtp} leaves no trunk of the {n_blocks} blocks"),
                )
            })?;
        let layer_kinds = layer_schedule(&k, n_blocks, n_layer)?;
        // Per-layer arrays must agree over the trunk layers they describe (head_count_kv may be
        // 0 on GDN layers in some files, so attention keys are checked on attention layers only).
        let uniform = |name: &str, attention_only: bool| {
            let used = |l: usize| {
                l < n_layer && (!attention_only || layer_kinds[l] == LayerKind::Attention)
            };
            k.uniform(
                name,
                n_blocks,
                used,
                "differs between layers, which is not supported",
            )
        };
        let inner = k.usize("ssm.inner_size")?;
        let nv = k.usize("ssm.time_step_rank")?;
        let head_mapping = match k.opt_bool("ssm.v_head_reordered")? {
            Some(false) => HeadMapping::Grouped,
            _ => HeadMapping::Tiled,
        };
        let n_head = uniform("attention.head_count", true)?;
        let hp = Hparams {
            n_embd: k.usize("embedding_length")?,
            n_layer,
            n_ff: uniform("feed_forward_length", false)?,
            n_vocab: k.n_vocab()?,
            n_ctx_train: k.usize("context_length")?,
            rms_eps: k.f32("attention.layer_norm_rms_epsilon")?,
            n_head,
            n_head_kv: uniform("attention.head_count_kv", true)?,
            head_dim: k.usize("attention.key_length")?,
            n_rot: k.usize("rope.dimension_count")?,
            rope_base: k.opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
            conv_kernel: k.usize("ssm.conv_kernel")?,
            ssm_dk: k.usize("ssm.state_size")?,
            ssm_dv: inner.checked_div(nv).unwrap_or(0),
            ssm_nk: k.usize("ssm.group_count")?,
            ssm_nv: nv,
            head_mapping,
            layer_kinds,
        };
        hp.validate(&k, inner)?;
        Ok(hp)
    }

    fn validate(&self, k: &Keys, inner: usize) -> Result<(), ModelError> {
        k.bounded(&[
            ("embedding_length", self.n_embd, Size::Width),
            ("feed_forward_length", self.n_ff, Size::Width),
            ("vocab_size", self.n_vocab, Size::Vocab),
            ("context_length", self.n_ctx_train, Size::Context),
            ("attention.head_count", self.n_head, Size::Heads),
            ("attention.head_count_kv", self.n_head_kv, Size::Heads),
            ("attention.key_length", self.head_dim, Size::HeadDim),
            ("ssm.conv_kernel", self.conv_kernel, Size::Taps),
            ("ssm.state_size", self.ssm_dk, Size::HeadDim),
            ("ssm.group_count", self.ssm_nk, Size::Heads),
            ("ssm.time_step_rank", self.ssm_nv, Size::Heads),
            ("ssm.inner_size", inner, Size::Width),
        ])?;
        if inner != self.ssm_dv * self.ssm_nv || self.ssm_dv == 0 {
            return Err(k.error(
                "ssm.inner_size",
                format!(
                    "{inner} is not a positive multiple of time_step_rank {}",
                    self.ssm_nv
                ),
            ));
        }
        if !self.ssm_nv.is_multiple_of(self.ssm_nk) {
            return Err(k.error(
                "ssm.time_step_rank",
                format!(
                    "{} value heads are not a multiple of the {} key heads (ssm.group_count)",
                    self.ssm_nv, self.ssm_nk
                ),
            ));
        }
        if !SUPPORTED_CONV_KERNELS.contains(&self.conv_kernel) {
            return Err(k.error(
                "ssm.conv_kernel",
                format!(
                    "{} taps; the kernels support {SUPPORTED_CONV_KERNELS:?}",
                    self.conv_kernel
                ),
            ));
        }
        k.check_attention(
            (self.n_head, self.n_head_kv, self.head_dim),
            self.n_rot,
            (self.rms_eps, self.rope_base),
        )
    }

    pub fn key_dim(&self) -> usize {
        self.ssm_nk * self.ssm_dk
    }

    pub fn value_dim(&self) -> usize {
        self.ssm_nv * self.ssm_dv
    }

    /// Channels of the conv (q, k and v together).
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// The GDN layers' shape in the kernels' terms, checked against what they support.
    pub fn delta_dims(&self) -> Result<DeltaDims, GpuError> {
        let narrow = |key: &str, v: usize| {
            u32::try_from(v).map_err(|_| GpuError::Shape {
                kernel: "gated_delta",
                message: format!("{key} = {v} does not fit in u32"),
            })
        };
        let dims = DeltaDims {
            nk: narrow("ssm.group_count", self.ssm_nk)?,
            nv: narrow("ssm.time_step_rank", self.ssm_nv)?,
            dk: narrow("ssm.state_size", self.ssm_dk)?,
            dv: narrow("ssm.inner_size / time_step_rank", self.ssm_dv)?,
            conv_kernel: narrow("ssm.conv_kernel", self.conv_kernel)?,
            head_mapping: self.head_mapping,
            eps: self.rms_eps,
        };
        dims.validate()?;
        Ok(dims)
    }
}

/// Which trunk layers are GDN: the per-block `attention.recurrent_layers` array when present
/// (it includes MTP blocks), else layer ℓ is attention iff (ℓ+1) is a multiple of
/// `full_attention_interval` (default 4).
fn layer_schedule(k: &Keys, n_blocks: usize, n_layer: usize) -> Result<Vec<LayerKind>, ModelError> {
    let name = "attention.recurrent_layers";
    if k.contains(name) {
        let flags = k.bool_array(name)?;
        if flags.len() != n_blocks {
            return Err(k.error(
                name,
                format!("{} entries for {n_blocks} blocks", flags.len()),
            ));
        }
        return Ok(flags[..n_layer]
            .iter()
            .map(|&r| {
                if r {
                    LayerKind::DeltaNet
                } else {
                    LayerKind::Attention
                }
            })
            .collect());
    }
    let name = "full_attention_interval";
    let interval = k.opt_usize(name)?.unwrap_or(4);
    if interval == 0 {
        return Err(k.error(name, "is 0"));
    }
    Ok((0..n_layer)
        .map(|l| match (l + 1) % interval {
            0 => LayerKind::Attention,
            _ => LayerKind::DeltaNet,
        })
        .collect())
}

impl Hparams {
    /// Every tensor of the trunk, shape-checked against these hyperparameters (MTP blocks are
    /// not read).
    pub fn tensors<'g>(&self, gguf: &'g Gguf) -> Result<Tensors<'g>, ModelError> {
        let d = self.n_embd as u64;
        let u = |x: usize| x as u64;
        let attention = AttentionLayout {
            n_embd: d,
            q_dim: u(self.q_dim()),
            kv_dim: u(self.kv_dim()),
            head_dim: u(self.head_dim),
            bias: Presence::Absent,
            qk_norm: Presence::Required,
            output_gate: true,
        };
        let layers = || {
            self.layer_kinds
                .iter()
                .enumerate()
                .map(|(i, kind)| {
                    let b = Block::new(gguf, i);
                    let mixer = match kind {
                        LayerKind::DeltaNet => Mixer::DeltaNet(DeltaNetTensors {
                            qkv: b.need("attn_qkv.weight", &[d, u(self.conv_dim())])?,
                            gate: b.need("attn_gate.weight", &[d, u(self.value_dim())])?,
                            beta: b.need("ssm_beta.weight", &[d, u(self.ssm_nv)])?,
                            alpha: b.need("ssm_alpha.weight", &[d, u(self.ssm_nv)])?,
                            conv: b.need(
                                "ssm_conv1d.weight",
                                &[u(self.conv_kernel), u(self.conv_dim())],
                            )?,
                            dt_bias: b.need("ssm_dt.bias", &[u(self.ssm_nv)])?,
                            a: b.need("ssm_a", &[u(self.ssm_nv)])?,
                            norm: b.need("ssm_norm.weight", &[u(self.ssm_dv)])?,
                            out: b.need("ssm_out.weight", &[u(self.value_dim()), d])?,
                        }),
                        LayerKind::Attention => Mixer::Attention(b.attention(&attention)?),
                    };
                    Ok(Layer {
                        attn_norm: b.need("attn_norm.weight", &[d])?,
                        mixer,
                        mlp: b.mlp("post_attention_norm.weight", d, u(self.n_ff))?,
                    })
                })
                .collect()
        };
        Tensors::bind(gguf, (d, u(self.n_vocab)), layers, None)
    }

    /// The activations the model allocates. The projections of h are stacked in runs of one
    /// weight type: a run writes its outputs side by side per token into the buffer of its
    /// first projection, so each of these is as wide as its projection and every one after it.
    pub fn scratch(&self) -> ScratchTable {
        let (d, q, kv, ff) = (self.n_embd, self.q_dim(), self.kv_dim(), self.n_ff);
        let (conv, vd, nv) = (self.conv_dim(), self.value_dim(), self.ssm_nv);
        let table = [
            (Act::X, "x", d),
            (Act::H, "h", d),
            // Gated attention: `W_q h` (per head [q | gate]), then k and v.
            (Act::Qkv, "q and gate, k, v", 2 * q + 2 * kv),
            (Act::K, "k, v", 2 * kv),
            (Act::V, "v", kv),
            (Act::O, "attention out", q),
            // GDN: the raw qkv projection (then z, β, α), the conv output.
            (
                Act::GdnM,
                "qkv, z, beta, alpha projections",
                conv + vd + 2 * nv,
            ),
            (Act::GdnMixed, "conv out", conv),
            (Act::GdnZ, "z, beta, alpha", vd + 2 * nv),
            (Act::GdnBeta, "beta logits, alpha", 2 * nv),
            (Act::GdnAlpha, "alpha", nv),
            (Act::GdnGates, "gates", 2 * nv),
            (Act::GdnDeltaO, "delta rule out", vd),
            (Act::GdnY, "gated norm out", vd),
            (Act::QRot, "q rotated", q),
            (Act::GateUp, "ffn gate and up", 2 * ff),
            (Act::FfnAct, "ffn act", ff),
        ];
        ScratchTable::new(&table, d)
    }
}

/// The hybrid decoder of `gguf` as the GPU model and the memory plan read it: every tensor
/// and the GDN kernels' limits checked here, before any GPU work.
pub fn blueprint(gguf: &Gguf) -> Result<Blueprint<'_>, ModelError> {
    let hp = Hparams::from_gguf(gguf)?;
    let tensors = hp.tensors(gguf)?;
    // Blocks past the trunk (multi-token prediction) are declared, not run.
    let n_blocks = Keys::new(gguf, "qwen35").block_count()?;
    Ok(Blueprint {
        label: "hybrid layers",
        n_embd: hp.n_embd,
        n_vocab: hp.n_vocab,
        n_ctx_train: hp.n_ctx_train,
        eps: hp.rms_eps,
        // Text positions make IMROPE's three streams equal: plain NeoX on the first n_rot dims.
        attention: AttentionShape {
            n_head: hp.n_head,
            n_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            n_rot: hp.n_rot,
            pairing: RopePairing::Neox,
            rope_base: hp.rope_base,
        },
        delta: Some(hp.delta_dims()?),
        scratch: hp.scratch(),
        n_blocks,
        tensors,
    })
}
