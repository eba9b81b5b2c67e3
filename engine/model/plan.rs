//! What a model needs on the device, planned before anything is allocated ([`DevicePlan`]), and
//! loading it ([`load_device_model`]).

use super::decoder::Decoder;
use super::{Arch, DeviceModel, ModelError, bounds};
use crate::gguf::Gguf;
use crate::gpu::GpuContext;
use crate::gpu::step::{StepIo, state_slots};

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
    /// The largest per-token activation of a step of `max_tokens` tokens, in bytes: the widest
    /// binding the step's scratch needs.
    pub widest_activation_bytes: u64,
    /// Token slots per KV page.
    pub page_size: u32,
    /// Physical pages of the KV pool all sequences and cached prefixes share, and the padding
    /// page after them ([`DevicePlan::pad_page`]).
    pub kv_pages: u32,
    /// Sequences in flight at once (page-table rows, rows of a batched decode step).
    pub max_seqs: u32,
    /// K and V elements of one token over every attention layer, and their size in bytes.
    pub kv_elems_per_token: u64,
    pub kv_elem_bytes: u64,
    /// Recurrent (DeltaNet + conv) state of one slot (0 for dense models); a model keeps
    /// [`state_slots`] of them (a sequence's, and the spares mid-step snapshots go to).
    pub state_bytes: u64,
    pub weight_bytes: u64,
    pub cache_bytes: u64,
    /// The activations (the architecture's scratch table), the logits and the chunked delta
    /// rule's scratch: what the model and `StepIo` allocate for them.
    pub scratch_bytes: u64,
    /// The chunked delta rule's f16 scratch, allocated only where its cooperative-matrix kernel
    /// runs (`Decoder::coop_scratch_bytes`); counted in [`DevicePlan::total_bytes`] as if it did.
    pub coop_scratch_bytes: u64,
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
        // Every tensor and the kernels' limits are checked here, before any GPU work.
        let b = (arch.spec().blueprint)(gguf)?;
        let block_count = format!("{}.block_count", arch.key_prefix());
        let not_run = b.tensors.layers.len()..b.n_blocks;
        bounds::refuse_unused_tensors(gguf, &block_count, b.n_blocks, not_run)?;
        let (max_context, max_tokens) =
            context_and_tokens(b.n_ctx_train, max_context, prefill_chunk);
        // Keep the logits of a step inside one 128 MiB binding (lavapipe's limit, the smallest).
        let logit_rows =
            ((128u64 << 20) / (b.n_vocab as u64 * 4)).clamp(1, u64::from(max_tokens)) as u32;
        let mut plan = DevicePlan {
            arch,
            n_vocab: b.n_vocab,
            max_context,
            max_tokens,
            logit_rows,
            widest_activation_bytes: 4
                * u64::from(max_tokens)
                * b.scratch.widest_per_token() as u64,
            page_size: 1,
            kv_pages: 0,
            max_seqs: 1,
            kv_elems_per_token: b.kv_elems_per_token(),
            kv_elem_bytes: 4,
            state_bytes: b.state_bytes(),
            weight_bytes: gguf.tensors().iter().map(|t| t.n_bytes).sum(),
            cache_bytes: 0,
            scratch_bytes: b.scratch_bytes(max_tokens, logit_rows)?,
            coop_scratch_bytes: b.coop_scratch_bytes(max_tokens)?,
            poison: false,
        };
        plan.size_kv_pool(Self::PAGE_SIZE, 1, 0, 4);
        Ok(plan)
    }

    /// Token slots per KV page by default: whole pages are what the prefix cache shares.
    pub const PAGE_SIZE: u32 = 64;

    /// Sizes the KV pool: pages of `page_size` tokens (of `kv_elem_bytes`-byte elements) for
    /// `max_seqs` sequences of up to `max_context` tokens each, plus `cache_mem` bytes of cached
    /// prefixes, and the padding page; and the recurrent state of `max_seqs` sequences and of
    /// the spare slots their steps' snapshots go to ([`state_slots`]).
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
        let pages = u64::from(self.max_seqs) * u64::from(self.pages_per_row()) + cached + 1;
        self.kv_pages = pages.min(u64::from(u32::MAX)) as u32;
        // Saturating: a size past u64 (an absurd page size or budget) stays the largest size,
        // which no adapter has, so the memory check refuses it instead of a wrapped small one.
        self.cache_bytes = u64::from(self.kv_pages)
            .saturating_mul(self.kv_page_bytes())
            .saturating_add(self.all_state_bytes());
    }

    /// The recurrent state of every slot (0 for dense models).
    pub fn all_state_bytes(&self) -> u64 {
        u64::from(state_slots(self.max_seqs)).saturating_mul(self.state_bytes)
    }

    /// The last page of the pool, which no sequence or cached prefix holds: the padding tokens
    /// of a step of several prompts write their K and V there (`StepIo::pad_row`).
    pub fn pad_page(&self) -> u32 {
        self.kv_pages - 1
    }

    /// Physical pages sequences and cached prefixes draw from (all but the padding page).
    pub fn shared_pages(&self) -> u32 {
        self.kv_pages - 1
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
            .saturating_add(self.coop_scratch_bytes)
    }

    pub fn describe(&self) -> String {
        let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
        let state = match self.state_bytes {
            0 => String::new(),
            _ => format!(
                " (of which recurrent state {}: {} slots, one per sequence and a spare per \
                 prompt of a step)",
                gib(self.all_state_bytes()),
                state_slots(self.max_seqs)
            ),
        };
        format!(
            "weights {}, KV pool of {} pages of {} tokens and state for {} sequences {}{state}, \
             activations {} for steps of {} tokens",
            gib(self.weight_bytes),
            self.kv_pages,
            self.page_size,
            self.max_seqs,
            gib(self.cache_bytes),
            gib(self.scratch_bytes + self.coop_scratch_bytes),
            self.max_tokens
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
    let b = (plan.arch.spec().blueprint)(gguf)?;
    Ok(Box::new(Decoder::load(ctx, gguf, io, plan, &b)?))
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
