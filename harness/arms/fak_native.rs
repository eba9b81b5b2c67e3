//! The fak-native arm: this very binary, started again as `harness serve-arm --model <gguf>` in
//! a child process, so fak gets a fresh process of its own like the other engines.

use super::jsonl::{BUCKET_METHODS, JsonlEngine};
use super::process::{EngineProcess, ExitInfo};
use super::{Arm, ArmFacts, Buckets, Done, Logits, Timed};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub struct FakNative {
    pub model: PathBuf,
    /// KV-cache length the child allocates (n_ctx + n_out, or more for the quality pass).
    pub max_context: usize,
    pub scratch: PathBuf,
    /// `fak-native`, or `fak-reference` when it runs the unquantized reference weights (a
    /// scenario arm's name, e.g. `fak-native-cache`, in a scenario).
    pub label: &'static str,
    pub serve: ServeOptions,
    engine: Option<JsonlEngine>,
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
            engine: None,
        }
    }

    fn engine(&mut self) -> Result<&mut JsonlEngine> {
        self.engine
            .as_mut()
            .with_context(|| format!("{}: not started", self.label))
    }
}

impl Arm for FakNative {
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
        })
    }

    fn bucket_methods(&self) -> Buckets<&'static str> {
        BUCKET_METHODS
    }

    fn start(&mut self) -> Result<ArmFacts> {
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
        let log = self.scratch.join(format!("{}.log", self.label));
        let process = EngineProcess::spawn(self.label, command, &log, true)?;
        let (engine, facts) = JsonlEngine::start(process, &self.scratch)?;
        self.engine = Some(engine);
        Ok(facts)
    }

    fn generate(&mut self, prompt: &[u32], n_out: usize) -> Result<Timed> {
        self.engine()?.generate(prompt, n_out)
    }

    fn logits(&mut self, ids: &[u32]) -> Result<Logits> {
        self.engine()?.logits(ids)
    }

    fn submit(&mut self, id: u64, prompt: &[u32], n_out: usize) -> Result<()> {
        self.engine()?.submit(id, prompt, n_out)
    }

    fn next_done(&mut self, timeout: Duration) -> Result<Option<Done>> {
        self.engine()?.next_done(timeout)
    }

    fn pid(&self) -> Option<u32> {
        self.engine.as_ref().map(|e| e.process.pid())
    }

    fn stop(&mut self) -> ExitInfo {
        match self.engine.take() {
            Some(mut e) => e.process.stop(Duration::from_secs(10)),
            None => ExitInfo::default(),
        }
    }
}
