//! Models: typed hyperparameters from GGUF metadata and the tensors of each architecture, one
//! file per architecture. `qwen3` covers the dense family (llama and qwen2 differ from it only by
//! flags: no q/k norm, q/k/v biases, NORM rope pairing); `qwen35` is the hybrid GDN family.

pub mod bounds;
pub mod device;
pub mod qwen3;
pub mod qwen35;

use crate::gguf::{Gguf, GgufError, TensorInfo};
use crate::gpu::{GpuContext, GpuError};
use crate::quant::GgmlType;
use crate::runtime::{DeviceModel, StepIo};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("{}: architecture {arch:?} is not supported (supported: {})", path.display(), Arch::SUPPORTED.join(", "))]
    UnsupportedArch { path: PathBuf, arch: String },
    #[error("{}: tensor {tensor}: shape {found:?}, expected {expected:?}", path.display())]
    Shape {
        path: PathBuf,
        tensor: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("{}: tensor {tensor}: type {ty} is not supported here ({why})", path.display())]
    TensorType {
        path: PathBuf,
        tensor: String,
        ty: GgmlType,
        why: String,
    },
    #[error("{}: {why}", path.display())]
    Hparams { path: PathBuf, why: String },
    /// A request the model cannot serve (token id out of range, empty prompt, …).
    #[error("{0}")]
    Input(String),
}

/// The GGUF `general.architecture` values fak runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Qwen35,
}

impl Arch {
    pub const SUPPORTED: [&'static str; 4] = ["llama", "qwen2", "qwen3", "qwen35"];

    pub fn of(gguf: &Gguf) -> Result<Self, ModelError> {
        let name = gguf.metadata().str("general.architecture")?;
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "qwen35" => Arch::Qwen35,
            other => {
                return Err(ModelError::UnsupportedArch {
                    path: gguf.path().to_owned(),
                    arch: other.into(),
                });
            }
        })
    }

    /// The metadata key prefix (`qwen3.block_count`, …).
    pub fn key_prefix(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen35 => "qwen35",
        }
    }
}

/// How RoPE pairs the dimensions of a head (model-spec.md §4.d).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RopePairing {
    /// (v[2i], v[2i+1]): llama, whose converter permutes Q/K rows into this order.
    Adjacent,
    /// (v[i], v[i + n_rot/2]): qwen2, qwen3, qwen3.5.
    Neox,
}

/// A tensor that must exist with exactly `shape` (ne order: row length first).
pub(crate) fn expect_tensor<'g>(
    gguf: &'g Gguf,
    name: &str,
    shape: &[u64],
) -> Result<&'g TensorInfo, ModelError> {
    let t = gguf.require_tensor(name)?;
    check_shape(gguf, t, shape)?;
    Ok(t)
}

/// Like [`expect_tensor`], for tensors a model may or may not have.
pub(crate) fn optional_tensor<'g>(
    gguf: &'g Gguf,
    name: &str,
    shape: &[u64],
) -> Result<Option<&'g TensorInfo>, ModelError> {
    gguf.tensor(name)
        .map(|t| check_shape(gguf, t, shape).map(|_| t))
        .transpose()
}

fn check_shape(gguf: &Gguf, t: &TensorInfo, shape: &[u64]) -> Result<(), ModelError> {
    // GGUF writers may or may not keep trailing unit dimensions; compare without them.
    let trim = |s: &[u64]| {
        let n = s.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
        s[..n].to_vec()
    };
    if trim(&t.shape) != trim(shape) {
        return Err(ModelError::Shape {
            path: gguf.path().to_owned(),
            tensor: t.name.clone(),
            found: t.shape.clone(),
            expected: shape.to_vec(),
        });
    }
    Ok(())
}

/// What a model needs on the device, known before anything is allocated: the engine refuses a
/// model that cannot fit with a message that says how much it needed.
#[derive(Clone, Debug)]
pub struct DevicePlan {
    pub arch: Arch,
    pub n_vocab: usize,
    pub max_context: usize,
    /// Most tokens one forward step processes (the prefill chunk).
    pub max_tokens: u32,
    /// Rows of logits one step can keep (the quality path's chunk), within one binding.
    pub logit_rows: u32,
    /// Token slots per KV page.
    pub page_size: u32,
    /// Physical pages of the KV pool all sequences and cached prefixes share.
    pub kv_pages: u32,
    /// Sequences in flight at once (page-table rows, rows of a batched decode step).
    pub max_seqs: u32,
    /// K and V elements of one token over every attention layer, and their size in bytes.
    pub kv_elems_per_token: u64,
    pub kv_elem_bytes: u64,
    /// Recurrent (DeltaNet + conv) state of one sequence (0 for dense models).
    pub state_bytes: u64,
    pub weight_bytes: u64,
    pub cache_bytes: u64,
    pub scratch_bytes: u64,
    /// Fill activations, logits and caches with NaN at load, so a value a kernel should have
    /// written but did not shows (tests; `FAK_POISON=1`).
    pub poison: bool,
}

impl DevicePlan {
    pub fn of(
        gguf: &Gguf,
        max_context: Option<usize>,
        prefill_chunk: u32,
    ) -> Result<Self, ModelError> {
        let arch = Arch::of(gguf)?;
        check_weight_types(gguf)?;
        let (n_vocab, n_ctx_train, kv_elems_per_token, state_bytes, widths, fixed_scratch) =
            match arch {
                Arch::Qwen35 => {
                    let hp = qwen35::Hparams::from_gguf(gguf)?;
                    // Every tensor and the kernels' limits are checked here, before any GPU work.
                    qwen35::Tensors::bind(gguf, &hp)?;
                    // Blocks past the trunk (multi-token prediction) are declared, not run.
                    let n_blocks = bounds::block_count(gguf.metadata(), "qwen35.block_count")?;
                    let mtp_blocks = hp.n_layer..n_blocks;
                    bounds::refuse_unused_tensors(
                        gguf,
                        "qwen35.block_count",
                        n_blocks,
                        mtp_blocks,
                    )?;
                    let (_, max_tokens) =
                        context_and_tokens(hp.n_ctx_train, max_context, prefill_chunk);
                    let memory = hp.memory(max_tokens)?;
                    (
                        hp.n_vocab,
                        hp.n_ctx_train,
                        memory.kv_elems_per_token,
                        memory.state_bytes,
                        hp.activation_width(),
                        memory.scratch_bytes,
                    )
                }
                _ => {
                    let hp = qwen3::Hparams::from_gguf(gguf)?;
                    qwen3::Tensors::bind(gguf, &hp)?;
                    let block_count = format!("{}.block_count", hp.arch.key_prefix());
                    bounds::refuse_unused_tensors(gguf, &block_count, hp.n_layer, 0..0)?;
                    let widths = 3 * hp.n_embd + hp.q_dim() + 2 * hp.kv_dim() + 2 * hp.n_ff;
                    (
                        hp.n_vocab,
                        hp.n_ctx_train,
                        hp.n_layer * 2 * hp.kv_dim(),
                        0,
                        widths,
                        0,
                    )
                }
            };
        let (max_context, max_tokens) = context_and_tokens(n_ctx_train, max_context, prefill_chunk);
        // Keep the logits of a step inside one 128 MiB binding (lavapipe's limit, the smallest).
        let logit_rows =
            ((128u64 << 20) / (n_vocab as u64 * 4)).clamp(1, u64::from(max_tokens)) as u32;
        let mut plan = DevicePlan {
            arch,
            n_vocab,
            max_context,
            max_tokens,
            logit_rows,
            page_size: 1,
            kv_pages: 0,
            max_seqs: 1,
            kv_elems_per_token: kv_elems_per_token as u64,
            kv_elem_bytes: 4,
            state_bytes: state_bytes as u64,
            weight_bytes: gguf.tensors().iter().map(|t| t.n_bytes).sum(),
            cache_bytes: 0,
            scratch_bytes: (u64::from(max_tokens) * widths as u64
                + u64::from(logit_rows) * n_vocab as u64)
                * 4
                + fixed_scratch,
            poison: false,
        };
        plan.size_kv_pool(Self::PAGE_SIZE, 1, 0, 4);
        Ok(plan)
    }

    /// Token slots per KV page by default: whole pages are what the prefix cache shares.
    pub const PAGE_SIZE: u32 = 64;

    /// Sizes the KV pool: pages of `page_size` tokens (of `kv_elem_bytes`-byte elements) for
    /// `max_seqs` sequences of up to `max_context` tokens each, plus `cache_mem` bytes of cached
    /// prefixes; and the recurrent state of `max_seqs` sequences.
    pub fn size_kv_pool(
        &mut self,
        page_size: u32,
        max_seqs: u32,
        cache_mem: u64,
        kv_elem_bytes: u64,
    ) {
        self.page_size = page_size.max(1);
        self.max_seqs = max_seqs.max(1);
        self.kv_elem_bytes = kv_elem_bytes;
        let cached = cache_mem / self.kv_page_bytes().max(1);
        let pages = u64::from(self.max_seqs) * u64::from(self.pages_per_row()) + cached;
        self.kv_pages = pages.min(u64::from(u32::MAX)) as u32;
        // Saturating: a size past u64 (an absurd page size or budget) stays the largest size,
        // which no adapter has, so the memory check refuses it instead of a wrapped small one.
        self.cache_bytes = u64::from(self.kv_pages)
            .saturating_mul(self.kv_page_bytes())
            .saturating_add(u64::from(self.max_seqs).saturating_mul(self.state_bytes));
    }

    /// Pages one sequence of `max_context` tokens spans.
    pub fn pages_per_row(&self) -> u32 {
        (self.max_context as u32).div_ceil(self.page_size)
    }

    /// Bytes of one page over every attention layer's K and V.
    pub fn kv_page_bytes(&self) -> u64 {
        (self.kv_elems_per_token * self.kv_elem_bytes).saturating_mul(u64::from(self.page_size))
    }

    pub fn total_bytes(&self) -> u64 {
        self.weight_bytes
            .saturating_add(self.cache_bytes)
            .saturating_add(self.scratch_bytes)
    }

    pub fn describe(&self) -> String {
        let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
        format!(
            "weights {}, KV pool of {} pages of {} tokens and state for {} sequences {}, \
             activations {}",
            gib(self.weight_bytes),
            self.kv_pages,
            self.page_size,
            self.max_seqs,
            gib(self.cache_bytes),
            gib(self.scratch_bytes)
        )
    }
}

/// The KV-cache length (default min(training context, 4096)) and the most tokens one step
/// processes (the prefill chunk, within the context).
fn context_and_tokens(
    n_ctx_train: usize,
    max_context: Option<usize>,
    prefill_chunk: u32,
) -> (usize, u32) {
    let max_context = max_context
        .unwrap_or(n_ctx_train.min(4096))
        .min(n_ctx_train)
        .max(1);
    (max_context, prefill_chunk.clamp(1, max_context as u32))
}

/// Loads the model of `gguf` onto the GPU, per its architecture.
pub fn load_device_model(
    ctx: &GpuContext,
    gguf: &Gguf,
    io: &StepIo,
    plan: &DevicePlan,
) -> Result<Box<dyn DeviceModel>, ModelError> {
    match plan.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            Ok(Box::new(qwen3::DenseModel::load(ctx, gguf, io, plan)?))
        }
        Arch::Qwen35 => Ok(Box::new(qwen35::HybridModel::load(ctx, gguf, io, plan)?)),
    }
}

/// Refuses, before any GPU work, a file holding a tensor of a type the GPU kernels cannot read
/// (the mat-vec, mat-mul and embedding kernels share one list of types).
fn check_weight_types(gguf: &Gguf) -> Result<(), ModelError> {
    use crate::gpu::kernels::matvec::MatVec;
    match gguf
        .tensors()
        .iter()
        .find(|t| !MatVec::TYPES.contains(&t.ty))
    {
        Some(t) => Err(ModelError::TensorType {
            path: gguf.path().to_owned(),
            tensor: t.name.clone(),
            ty: t.ty,
            why: format!(
                "the GPU kernels read {}",
                MatVec::TYPES.map(|t| t.to_string()).join(", ")
            ),
        }),
        None => Ok(()),
    }
}
