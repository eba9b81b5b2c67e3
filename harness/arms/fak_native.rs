//! The fak-native arm: this very binary, started again as `harness serve-arm --model <gguf>` in
//! a child process, so fak gets a fresh process of its own like the other engines; a
//! [`super::jsonl::JsonlArm`] runs it.

use super::jsonl::JsonlChild;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct FakNative {
    pub model: PathBuf,
    /// KV-cache length the child allocates (n_ctx + n_out, or more for the quality pass).
    pub max_context: usize,
    pub scratch: PathBuf,
    /// `fak-native`, or `fak-reference` when it runs the unquantized reference weights (a
    /// scenario arm's name, e.g. `fak-native-cache`, in a scenario).
    pub label: &'static str,
    pub serve: ServeOptions,
}

/// How the child serves concurrent requests (the multi-agent scenario); the defaults are the
/// matched envelope's: no prefix cache, one sequence, the engine's page size.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Prefix-cache budget in bytes; 0 turns the cache off.
    pub cache_mem: u64,
    /// Sequences one batched decode step serves.
    pub max_seqs: usize,
    pub page_size: Option<u32>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            cache_mem: 0,
            max_seqs: 1,
            page_size: None,
        }
    }
}

impl FakNative {
    pub fn new(label: &'static str, model: PathBuf, max_context: usize, scratch: PathBuf) -> Self {
        FakNative {
            model,
            max_context,
            scratch,
            label,
            serve: ServeOptions::default(),
        }
    }
}

/// Every FAK_* variable set for the run (layouts, forms, probes, as the engine's children inherit
/// them): a packet names the engine it measured, not only the adapter switches.
pub(crate) fn fak_env() -> std::collections::BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("FAK_"))
        .collect()
}

impl JsonlChild for FakNative {
    fn name(&self) -> &'static str {
        self.label
    }

    fn flags(&self) -> serde_json::Value {
        let env = |k: &str| std::env::var(k).ok();
        json!({
            "max_context": self.max_context,
            "cache_mem": self.serve.cache_mem,
            "max_seqs": self.serve.max_seqs,
            "page_size": self.serve.page_size,
            "FAK_ADAPTER": env("FAK_ADAPTER"),
            "WGPU_BACKEND": env("WGPU_BACKEND"),
            "FAK_FORCE": env("FAK_FORCE"),
            "FAK_COOP_MATRIX": env("FAK_COOP_MATRIX"),
            "FAK_INT_DOT": env("FAK_INT_DOT"),
            "fak_env": fak_env(),
        })
    }

    fn command(&self) -> Result<Command> {
        let exe = std::env::current_exe().context("locating the harness binary")?;
        let mut command = Command::new(exe);
        command
            .arg("serve-arm")
            .arg("--model")
            .arg(&self.model)
            .args(["--max-context", &self.max_context.to_string()])
            .args(["--cache-mem", &self.serve.cache_mem.to_string()])
            .args(["--max-seqs", &self.serve.max_seqs.to_string()]);
        if let Some(page) = self.serve.page_size {
            command.args(["--page-size", &page.to_string()]);
        }
        Ok(command)
    }

    fn scratch(&self) -> &Path {
        &self.scratch
    }
}
