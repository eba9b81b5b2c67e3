//! The MLX arm: `mlx_driver.py` (embedded here, written next to the run's scratch files) on
//! `mlx_lm`, run by the Python that imports it, over the JSON-lines protocol of [`super::jsonl`].
//! Its weights are MLX's own affine 4-bit (group 64) conversion of the same float weights,
//! never the GGUF: the packet labels it as different weights, so it is never called parity.

use super::NotInstalled;
use super::jsonl::JsonlChild;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DRIVER: &str = include_str!("mlx_driver.py");

pub struct Mlx {
    pub python: String,
    pub model_dir: PathBuf,
    pub scratch: PathBuf,
    /// mlx_lm's `LRUPromptCache` with this many entries serves `submit` requests (the
    /// multi-agent scenario's cache arm); None: every request starts from an empty cache.
    pub prompt_cache: Option<usize>,
    /// The log file's name (`<log_name>.log`).
    pub log_name: &'static str,
}

impl Mlx {
    pub fn new(python: String, model_dir: PathBuf, scratch: PathBuf) -> Self {
        Mlx {
            python,
            model_dir,
            scratch,
            prompt_cache: None,
            log_name: "mlx",
        }
    }
}

/// The Python to run the driver with: `python` if given, else `$FAK_PYTHON`, else `python3`;
/// it must import `mlx.core` and `mlx_lm`.
pub fn find_python(python: Option<&str>) -> Result<String, NotInstalled> {
    let python = python
        .map(str::to_string)
        .or_else(|| std::env::var("FAK_PYTHON").ok())
        .unwrap_or_else(|| "python3".into());
    let out = Command::new(&python)
        .args(["-c", "import mlx.core, mlx_lm"])
        .output()
        .map_err(|e| NotInstalled(format!("{python}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").trim();
        return Err(NotInstalled(format!(
            "{python} cannot import mlx_lm ({last}); pip install 'mlx[cpu]' mlx-lm, or pass --python"
        )));
    }
    Ok(python)
}

impl JsonlChild for Mlx {
    fn name(&self) -> &'static str {
        "mlx"
    }

    fn flags(&self) -> serde_json::Value {
        json!({
            "python": self.python, "model_dir": self.model_dir,
            "generation_loop": "mlx_lm.generate.generate_step (greedy; EOS never stops it)",
            "weights": "MLX affine 4-bit, group 64, of the same float weights",
            "prompt_cache": self.prompt_cache.map_or(
                "none: each request prefills its whole prompt".to_string(),
                |n| format!("mlx_lm.models.cache.LRUPromptCache(max_size={n})"),
            ),
            "serving": "one request at a time, in arrival order (the driver is one loop)",
        })
    }

    /// The driver, written next to the run's scratch files, on the model directory.
    fn command(&self) -> Result<Command> {
        let driver = self.scratch.join("mlx_driver.py");
        std::fs::write(&driver, DRIVER).with_context(|| format!("writing {}", driver.display()))?;
        let mut command = Command::new(&self.python);
        command.arg(&driver).arg(&self.model_dir);
        if let Some(n) = self.prompt_cache {
            command.args(["--prompt-cache", &n.to_string()]);
        }
        Ok(command)
    }

    fn scratch(&self) -> &Path {
        &self.scratch
    }

    fn log_name(&self) -> &str {
        self.log_name
    }
}
