//! The fak-native arm: this very binary, started again as `harness serve-arm --model <gguf>` in
//! a child process, so fak gets a fresh process of its own like the other engines.

use super::jsonl::{BUCKET_METHODS, JsonlEngine};
use super::process::{EngineProcess, ExitInfo};
use super::{Arm, ArmFacts, Buckets, Logits, Timed};
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
    /// `fak-native`, or `fak-reference` when it runs the unquantized reference weights.
    pub label: &'static str,
    engine: Option<JsonlEngine>,
}

impl FakNative {
    pub fn new(label: &'static str, model: PathBuf, max_context: usize, scratch: PathBuf) -> Self {
        FakNative {
            model,
            max_context,
            scratch,
            label,
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
            "FAK_ADAPTER": env("FAK_ADAPTER"),
            "WGPU_BACKEND": env("WGPU_BACKEND"),
            "FAK_FORCE": env("FAK_FORCE"),
            "FAK_COOP_MATRIX": env("FAK_COOP_MATRIX"),
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
            .args(["--max-context", &self.max_context.to_string()]);
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
