//! Reading an architecture's hyperparameters: the `{arch}.*` keys of a GGUF through one reader
//! ([`Keys`]) every spec file's `Hparams::from_gguf` uses, and the checks every architecture
//! shares, so a bound on a hyperparameter has one home.

use super::ModelError;
use super::bounds::{self, Size};
use crate::gguf::Gguf;

/// The `{prefix}.*` metadata keys of a GGUF. Every error names the file and the key.
pub struct Keys<'g> {
    gguf: &'g Gguf,
    prefix: &'static str,
}

impl<'g> Keys<'g> {
    pub fn new(gguf: &'g Gguf, prefix: &'static str) -> Self {
        Keys { gguf, prefix }
    }

    pub fn gguf(&self) -> &'g Gguf {
        self.gguf
    }

    /// The full key of `name` (`qwen3.block_count`).
    pub fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    /// An error about key `name`.
    pub fn error(&self, name: &str, why: impl Into<String>) -> ModelError {
        self.gguf.metadata().error(&self.key(name), why).into()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.gguf.metadata().contains(&self.key(name))
    }

    pub fn usize(&self, name: &str) -> Result<usize, ModelError> {
        Ok(self.gguf.metadata().usize(&self.key(name))?)
    }

    pub fn opt_usize(&self, name: &str) -> Result<Option<usize>, ModelError> {
        Ok(self.gguf.metadata().opt_usize(&self.key(name))?)
    }

    pub fn f32(&self, name: &str) -> Result<f32, ModelError> {
        Ok(self.gguf.metadata().f32(&self.key(name))?)
    }

    pub fn opt_f32(&self, name: &str) -> Result<Option<f32>, ModelError> {
        Ok(self.gguf.metadata().opt_f32(&self.key(name))?)
    }

    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ModelError> {
        Ok(self.gguf.metadata().opt_bool(&self.key(name))?)
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<&'g str>, ModelError> {
        Ok(self.gguf.metadata().opt_str(&self.key(name))?)
    }

    pub fn bool_array(&self, name: &str) -> Result<&'g [bool], ModelError> {
        Ok(self.gguf.metadata().bool_array(&self.key(name))?)
    }

    /// The one value a per-layer key (a scalar, or an array of `n_blocks`) has on the layers
    /// `used` selects; `differs` says why differing values are refused.
    pub fn uniform(
        &self,
        name: &str,
        n_blocks: usize,
        used: impl Fn(usize) -> bool,
        differs: &str,
    ) -> Result<usize, ModelError> {
        let per_layer = self
            .gguf
            .metadata()
            .usize_per_layer(&self.key(name), n_blocks)?;
        let values: Vec<usize> = per_layer
            .iter()
            .enumerate()
            .filter(|&(i, _)| used(i))
            .map(|(_, &v)| v)
            .collect();
        match values.first() {
            Some(&v) if values.iter().all(|&x| x == v) => Ok(v),
            Some(_) => Err(self.error(name, differs)),
            None => Err(self.error(name, "describes no layer")),
        }
    }

    /// `vocab_size`, else the rows of the token embedding.
    pub fn n_vocab(&self) -> Result<usize, ModelError> {
        match self.opt_usize("vocab_size")? {
            Some(v) => Ok(v),
            None => Ok(self
                .gguf
                .require_tensor("token_embd.weight")?
                .shape
                .get(1)
                .copied()
                .unwrap_or(0) as usize),
        }
    }

    /// `block_count`, bounded ([`bounds::block_count`]) before anything per layer is read.
    pub fn block_count(&self) -> Result<usize, ModelError> {
        bounds::block_count(self.gguf.metadata(), &self.key("block_count"))
    }

    /// Refuses the first of `settings` ((key name, value, what it counts)) outside its range
    /// ([`bounds::check_settings`]), before anything is sized from them.
    pub fn bounded(&self, settings: &[(&str, usize, Size)]) -> Result<(), ModelError> {
        bounds::check_settings(self.gguf.metadata(), self.prefix, settings)
    }

    /// The checks every attention layer's hyperparameters get: whole KV head groups, an even
    /// rotation within the head, `attention.value_length` (if given) equal to the key length,
    /// a positive norm eps and rope base.
    pub fn check_attention(
        &self,
        (n_head, n_head_kv, head_dim): (usize, usize, usize),
        n_rot: usize,
        (rms_eps, rope_base): (f32, f32),
    ) -> Result<(), ModelError> {
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(self.error(
                "attention.head_count_kv",
                format!("{n_head_kv} does not divide head_count {n_head}"),
            ));
        }
        if !n_rot.is_multiple_of(2) || n_rot > head_dim {
            return Err(self.error(
                "rope.dimension_count",
                format!("{n_rot} must be even and at most the head size {head_dim}"),
            ));
        }
        if let Some(v) = self.opt_usize("attention.value_length")?
            && v != head_dim
        {
            return Err(self.error(
                "attention.value_length",
                format!("{v} differs from key_length {head_dim}"),
            ));
        }
        if !(rms_eps > 0.0 && rope_base > 0.0) {
            return Err(self.error(
                "attention.layer_norm_rms_epsilon",
                format!("{rms_eps} and rope.freq_base {rope_base} must be positive"),
            ));
        }
        Ok(())
    }
}
