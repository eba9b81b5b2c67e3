//! One line per architecture fak runs, found by its GGUF name: its spec (what the plan, the GPU
//! model and the decode-step byte count read from a file: [`Blueprint`]) and what its
//! converter writes beside the weights (the tokenizer's pre-type). Everything else about an
//! architecture follows from its spec; the CPU reference (`reference::for_model`) and `harness
//! synth` keep their own exhaustive `match` over [`Arch`], so the compiler names every place a
//! new architecture must be added.

use super::decoder::Blueprint;
use super::{ModelError, qwen2, qwen3, qwen35};
use crate::gguf::Gguf;

/// The GGUF `general.architecture` values fak runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Qwen35,
}

/// What fak knows about one architecture.
pub struct ArchSpec {
    pub arch: Arch,
    /// `general.architecture`, also the prefix of its hyperparameter keys (`qwen3.block_count`).
    pub name: &'static str,
    /// Its spec file's reading of a GGUF: hyperparameters, tensors (shape-checked), attention
    /// and GDN shapes, the scratch table.
    pub blueprint: for<'g> fn(&'g Gguf) -> Result<Blueprint<'g>, ModelError>,
    /// The `tokenizer.ggml.pre` its converter writes.
    pub tokenizer_pre: &'static str,
}

/// Every architecture, one line each.
pub const REGISTRY: [ArchSpec; 4] = [
    ArchSpec {
        arch: Arch::Llama,
        name: "llama",
        blueprint: qwen3::llama_blueprint,
        tokenizer_pre: "llama-bpe",
    },
    ArchSpec {
        arch: Arch::Qwen2,
        name: "qwen2",
        blueprint: qwen2::blueprint,
        tokenizer_pre: "qwen2",
    },
    ArchSpec {
        arch: Arch::Qwen3,
        name: "qwen3",
        blueprint: qwen3::blueprint,
        tokenizer_pre: "qwen2",
    },
    ArchSpec {
        arch: Arch::Qwen35,
        name: "qwen35",
        blueprint: qwen35::blueprint,
        tokenizer_pre: "qwen35",
    },
];

impl Arch {
    /// The names fak runs, for error messages.
    pub fn supported() -> Vec<&'static str> {
        REGISTRY.iter().map(|s| s.name).collect()
    }

    /// The architecture `gguf` says it is (`general.architecture`).
    pub fn of(gguf: &Gguf) -> Result<Self, ModelError> {
        let name = gguf.metadata().str("general.architecture")?;
        match REGISTRY.iter().find(|s| s.name == name) {
            Some(spec) => Ok(spec.arch),
            None => Err(ModelError::UnsupportedArch {
                path: gguf.path().to_owned(),
                arch: name.into(),
            }),
        }
    }

    /// Its registry line.
    pub fn spec(self) -> &'static ArchSpec {
        REGISTRY
            .iter()
            .find(|s| s.arch == self)
            .expect("every Arch has a registry line")
    }

    /// The metadata key prefix (`qwen3.block_count`, …).
    pub fn key_prefix(self) -> &'static str {
        self.spec().name
    }
}

/// What `gguf`'s architecture reads from it.
pub fn blueprint(gguf: &Gguf) -> Result<Blueprint<'_>, ModelError> {
    (Arch::of(gguf)?.spec().blueprint)(gguf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arch_has_one_line_and_every_name_one_arch() {
        for arch in [Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Qwen35] {
            let lines = REGISTRY.iter().filter(|s| s.arch == arch).count();
            assert_eq!(lines, 1, "{arch:?}");
            assert_eq!(arch.spec().arch, arch);
        }
        let mut names = Arch::supported();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REGISTRY.len());
    }
}
