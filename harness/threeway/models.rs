//! The weights a run compares: the user's files, or — with no `--model` — the tiny synthetic
//! Qwen3 written once into a cache folder (Q4_K_M GGUF for fak and llama.cpp, the f32 GGUF of the
//! same float weights for the reference, MLX's 4-bit conversion of them for MLX).

use crate::synth;
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The preset and seed the bare command synthesizes.
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

    /// The tiny synthetic model, written into the cache on first use: into a folder of this
    /// process's own, renamed into place when complete, so runs racing to write it never see
    /// (or leave) half a model.
    pub fn synthetic() -> Result<Models> {
        let dir = cache_dir().join("threeway").join(format!(
            "qwen3-{TINY_PRESET}-seed{TINY_SEED}-v{}",
            env!("CARGO_PKG_VERSION")
        ));
        let at = |dir: &Path| Models {
            gguf: dir.join("model-q4_k_m.gguf"),
            reference: Some(dir.join("reference-f32.gguf")),
            mlx: Some(dir.join("mlx-4bit")),
        };
        if dir.is_dir() {
            return Ok(at(&dir));
        }
        let tmp = dir.with_extension(format!("partial-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        eprintln!(
            "threeway: writing the tiny synthetic model into {}",
            dir.display()
        );
        let partial = at(&tmp);
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
            })
        };
        synth(synth::Quant::Q4KM, &partial.gguf, partial.mlx.clone())?;
        synth(
            synth::Quant::F32,
            partial.reference.as_deref().expect("set above"),
            None,
        )?;
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another run finished first; its model is the same (same seed), keep it.
            let _ = std::fs::remove_dir_all(&tmp);
            anyhow::ensure!(dir.is_dir(), "could not move {} into place", tmp.display());
        }
        Ok(at(&dir))
    }
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
        let mut hash = Sha256::new();
        for file in names.iter().filter(|p| p.is_file()) {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            hash.update(format!("{name}\0{}\n", sha256_of(file)?));
        }
        return Ok(super::envelope::hex(&hash.finalize()));
    }
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(super::envelope::hex(&hash.finalize()))
}

/// The machine's host name.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if ok && !name.is_empty() => name.to_string(),
        _ => "unknown-host".into(),
    }
}

/// UTC now as `YYYYMMDDTHHMMSSZ` (folder names).
pub fn utc_stamp() -> String {
    utc_now().replace(['-', ':'], "")
}

/// UTC now as ISO 8601 `YYYY-MM-DDTHH:MM:SSZ` (days from the civil calendar algorithm).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
