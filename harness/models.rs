//! The weights a run compares: the user's files, or — with no `--model` — the trained tiny Qwen3
//! (experiments/trained-tiny; its f16 GGUF is tests/fixtures/trained/qwen3-trained-f16.gguf,
//! embedded in the binary) written once into a cache folder: the f16 GGUF (the true unquantized
//! weights, the quality reference), the Q4_K_M GGUF `harness quantize` makes of it (for fak and
//! llama.cpp) and MLX's own 4-bit conversion of the same weights (for MLX). `selftest` still
//! checks its kernels on the tiny synthetic Qwen3 ([`Models::synthetic`]).

use crate::synth;
use anyhow::{Context, Result, bail};
use fak_harness::packet::{sha256_file, sha256_hex};
use std::path::{Path, PathBuf};

/// The trained tiny Qwen3's f16 GGUF (4 096-token cut vocabulary, d = 256, 2 layers).
static TRAINED_QWEN3_F16: &[u8] =
    include_bytes!("../tests/fixtures/trained/qwen3-trained-f16.gguf");

/// The preset and seed selftest synthesizes.
pub const TINY_PRESET: &str = "tiny";
pub const TINY_SEED: u64 = 1;

pub struct Models {
    /// The GGUF fak-native and llama.cpp both run.
    pub gguf: PathBuf,
    /// The unquantized (f32/f16) GGUF of the same weights, when there is one.
    pub reference: Option<PathBuf>,
    /// MLX's own model directory, when there is one.
    pub mlx: Option<PathBuf>,
}

/// `${FAK_CACHE:-~/.cache/fak}`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FAK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/fak")
        })
}

impl Models {
    pub fn user(gguf: &Path, reference: Option<&Path>, mlx: Option<&Path>) -> Result<Models> {
        let check = |what: &str, p: &Path, dir: bool| -> Result<PathBuf> {
            let ok = if dir {
                p.join("config.json").is_file()
            } else {
                p.is_file()
            };
            if !ok {
                let want = if dir {
                    "a directory holding config.json"
                } else {
                    "a file"
                };
                bail!("{what} {} does not exist or is not {want}", p.display());
            }
            Ok(p.to_path_buf())
        };
        Ok(Models {
            gguf: check("--model", gguf, false)?,
            reference: reference
                .map(|p| check("--reference-model", p, false))
                .transpose()?,
            mlx: mlx.map(|p| check("--mlx-model", p, true)).transpose()?,
        })
    }

    /// The trained tiny Qwen3, written into the cache on first use (a folder named by the
    /// weights' sha256 and the harness version) the way [`Models::synthetic`] writes its model.
    pub fn trained() -> Result<Models> {
        let digest = sha256_hex(TRAINED_QWEN3_F16);
        let dir = cache_dir().join("threeway").join(format!(
            "qwen3-trained-{}-v{}",
            &digest[..12],
            env!("CARGO_PKG_VERSION")
        ));
        write_once(
            &dir,
            "the trained tiny Qwen3",
            "reference-f16.gguf",
            |m: &Models| {
                let reference = m.reference.as_deref().expect("set by the layout");
                std::fs::write(reference, TRAINED_QWEN3_F16)
                    .with_context(|| format!("writing {}", reference.display()))?;
                crate::quantize::quantize(reference, &m.gguf, synth::Quant::Q4KM)?;
                let mlx = m.mlx.as_deref().expect("set by the layout");
                synth::write_mlx_4bit(synth::Arch::Qwen3, "trained", reference, mlx)
            },
        )
    }

    /// The tiny synthetic model, written into the cache on first use: into a folder of this
    /// process's own, renamed into place when complete, so runs racing to write it never see
    /// (or leave) half a model.
    pub fn synthetic() -> Result<Models> {
        let dir = cache_dir().join("threeway").join(format!(
            "qwen3-{TINY_PRESET}-seed{TINY_SEED}-v{}",
            env!("CARGO_PKG_VERSION")
        ));
        write_once(
            &dir,
            "the tiny synthetic model",
            "reference-f32.gguf",
            |partial| {
                let synth = |quant, out: &Path, mlx: Option<PathBuf>| {
                    synth::write(synth::Args {
                        arch: synth::Arch::Qwen3,
                        preset: TINY_PRESET.into(),
                        quant,
                        seed: TINY_SEED,
                        vocab: synth::Vocab::Full,
                        out: out.to_path_buf(),
                        hf_dir: None,
                        fast_random: false,
                        layout_only: false,
                        mlx_4bit: mlx,
                        f16_reference: None,
                        weights: None,
                    })
                };
                synth(synth::Quant::Q4KM, &partial.gguf, partial.mlx.clone())?;
                synth(
                    synth::Quant::F32,
                    partial.reference.as_deref().expect("set by the layout"),
                    None,
                )?;
                Ok(())
            },
        )
    }
}

/// The models of a cache folder `dir`: the GGUF fak and llama.cpp run, the reference (its name
/// saying its type), MLX's directory.
fn layout(dir: &Path, reference: &str) -> Models {
    Models {
        gguf: dir.join("model-q4_k_m.gguf"),
        reference: Some(dir.join(reference)),
        mlx: Some(dir.join("mlx-4bit")),
    }
}

/// The models in cache folder `dir`, which `write` fills on first use: into a folder of this
/// process's own, renamed into place when complete, so runs racing to write it never see (or
/// leave) half a model. `what` names the model in the one line printed while writing.
fn write_once(
    dir: &Path,
    what: &str,
    reference: &str,
    write: impl FnOnce(&Models) -> Result<()>,
) -> Result<Models> {
    if dir.is_dir() {
        return Ok(layout(dir, reference));
    }
    let tmp = dir.with_extension(format!("partial-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    eprintln!("threeway: writing {what} into {}", dir.display());
    write(&layout(&tmp, reference))?;
    if std::fs::rename(&tmp, dir).is_err() {
        // Another run finished first; its model is the same (same weights), keep it.
        let _ = std::fs::remove_dir_all(&tmp);
        anyhow::ensure!(dir.is_dir(), "could not move {} into place", tmp.display());
    }
    Ok(layout(dir, reference))
}

/// sha256 of a file, or of a directory: every file in it (sorted by name) as
/// `<name>\0<sha256 of its bytes>\n`.
pub fn sha256_of(path: &Path) -> Result<String> {
    if path.is_dir() {
        let mut names: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        names.sort();
        let mut listing = String::new();
        for file in names.iter().filter(|p| p.is_file()) {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            listing.push_str(&format!("{name}\0{}\n", sha256_of(file)?));
        }
        return Ok(sha256_hex(listing.as_bytes()));
    }
    sha256_file(path).with_context(|| format!("reading {}", path.display()))
}
