//! The CPU reference forward passes (f32 math, f64 accumulation for every sum): the oracle for
//! every kernel and model test, sharing the GGUF loader and the dequantizers with the engine.
//! Every model runs one token at a time; prefill is the same loop, so the GPU's batched prefill
//! is checked against the plain recurrence.

pub mod activations;
/// The cooperative-matrix chunked delta rule's split arithmetic, against `gated_delta` (tests).
#[cfg(test)]
mod coop_delta;
pub mod dense;
pub mod gated_delta;
pub mod ops;
pub mod qwen35;

pub use activations::{Activations, AttentionRounding};
pub use dense::DenseReference;
pub use qwen35::Qwen35Reference;

use crate::gguf::Gguf;
use crate::model::{Arch, ModelError};

/// The CPU reference of `gguf`'s architecture, its mat-vec inputs rounded as `activations`
/// says. The one `match` over the architectures: a new one is added here.
pub fn for_model<'g>(
    gguf: &'g Gguf,
    activations: Activations,
) -> Result<Box<dyn Reference + 'g>, ModelError> {
    Ok(match Arch::of(gguf)? {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            Box::new(DenseReference::with_activations(gguf, activations)?)
        }
        Arch::Qwen35 => Box::new(Qwen35Reference::with_activations(gguf, activations)?),
    })
}

/// A CPU model that runs one token at the next position.
pub trait Reference {
    /// Runs `token` and returns its logits.
    fn forward(&mut self, token: u32) -> Result<Vec<f32>, ModelError>;

    /// Rounds every projection's input (and weights, for [`Activations::F16Tiles`]) as
    /// `activations` says from the next token on, so a caller can mirror an engine that rounds
    /// in some steps and not in others (the cooperative-matrix mat-mul of a prefill step, the
    /// mat-vecs of a decode step). The token embedding stays an exact row lookup.
    fn set_activations(&mut self, activations: Activations) -> Result<(), ModelError>;

    /// Rounds attention as `rounding` says from the next token on (keys and values cached
    /// before keep the rounding they were cached with).
    fn set_attention(&mut self, rounding: AttentionRounding);

    /// Runs `tokens` in order and returns the logits after each (teacher forcing).
    fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, ModelError> {
        tokens.iter().map(|&t| self.forward(t)).collect()
    }

    /// Greedy continuation: `n` tokens after `prompt` (end-of-sequence not special here).
    fn greedy(&mut self, prompt: &[u32], n: usize) -> Result<Vec<u32>, ModelError> {
        let logits = self
            .forward_all(prompt)?
            .pop()
            .ok_or_else(|| ModelError::Input("empty prompt".into()))?;
        continue_greedy(self, logits, n)
    }

    /// Greedy continuation as the engine generates it: the prompt rounded as set now (its
    /// prompt steps), every later token's step with its inputs rounded as `decode` says (its
    /// decode steps: `Activations::Q8Blocks` on the integer mat-vec path).
    fn greedy_decoding(
        &mut self,
        prompt: &[u32],
        n: usize,
        decode: Activations,
    ) -> Result<Vec<u32>, ModelError> {
        let logits = self
            .forward_all(prompt)?
            .pop()
            .ok_or_else(|| ModelError::Input("empty prompt".into()))?;
        self.set_activations(decode)?;
        continue_greedy(self, logits, n)
    }
}

/// `n` greedy tokens from `logits` on, each but the last fed back to `r`.
fn continue_greedy<R: Reference + ?Sized>(
    r: &mut R,
    mut logits: Vec<f32>,
    n: usize,
) -> Result<Vec<u32>, ModelError> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let next = ops::argmax(&logits);
        out.push(next);
        if i + 1 < n {
            logits = r.forward(next)?;
        }
    }
    Ok(out)
}

fn check_token(token: u32, n_vocab: usize) -> Result<(), ModelError> {
    if (token as usize) < n_vocab {
        Ok(())
    } else {
        Err(ModelError::Input(format!(
            "token id {token} is outside the vocabulary of {n_vocab}"
        )))
    }
}
