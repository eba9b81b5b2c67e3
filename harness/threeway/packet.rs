//! Interim packet assembly (replaced by the packet crate's writer when it lands).

use super::Args;
use super::envelope::Prompts;
use super::models::{Models, sha256_of};
use super::quality::{Parity, ReferenceInfo};
use super::runner::ArmRecord;
use anyhow::Result;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[allow(clippy::too_many_arguments)]
pub fn assemble(
    args: &Args,
    models: &Models,
    prompts: &Prompts,
    reference: &ReferenceInfo,
    records: &[ArmRecord],
    parity: &Option<Parity>,
    selftest: &Value,
    out: &Path,
) -> Result<PathBuf> {
    let arms: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "arm": r.arm, "runtime": r.runtime, "status": r.status, "reason": r.reason,
                "samples": r.samples.len(), "faults": r.faults.len(),
                "quality": r.quality.as_ref().map(|q| &q.summary),
            })
        })
        .collect();
    let packet = json!({
        "schema": "fak.macbench.comparison.v1",
        "envelope": {
            "n_ctx": args.n_ctx, "n_out": args.n_out, "n_prompts": args.prompts,
            "seed": prompts.seed, "prompt_set_sha256": prompts.digest(),
            "model": models.gguf, "model_sha256": sha256_of(&models.gguf)?,
            "origin": models.origin,
        },
        "reference_arm": args.reference_arm,
        "quality_reference": reference,
        "parity": parity,
        "selftest": selftest,
        "arms": arms,
    });
    let path = out.join("packet.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&packet)?)?;
    Ok(path)
}
