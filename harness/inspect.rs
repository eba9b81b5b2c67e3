//! `harness inspect`: what a GGUF file holds and what a decode step reads.

use anyhow::Result;
use fak::gguf::{Gguf, TensorInfo, Value};
use fak::model::{DecodeStepBytes, ModelError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (any shard of a split model).
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    files: Vec<String>,
    version: u32,
    alignment: u64,
    metadata: Vec<MetaEntry>,
    tensors: Vec<TensorEntry>,
    totals_by_type: BTreeMap<String, TypeTotal>,
    total_tensor_bytes: u64,
    /// None where fak does not run the file's architecture (`decode_step_unknown` says why).
    decode_step_bytes: Option<DecodeStepBytes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decode_step_unknown: Option<String>,
}

#[derive(Serialize)]
struct MetaEntry {
    key: String,
    #[serde(rename = "type")]
    ty: String,
    /// Scalars verbatim; arrays summarised (first elements and the count).
    value: String,
}

#[derive(Serialize)]
struct TensorEntry {
    name: String,
    shape: Vec<u64>,
    #[serde(rename = "type")]
    ty: String,
    bytes: u64,
    offset: u64,
}

#[derive(Serialize, Default)]
struct TypeTotal {
    tensors: usize,
    bytes: u64,
}

pub fn run(args: Args) -> Result<()> {
    let model = Gguf::open(&args.file)?;
    let report = build_report(&model);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

fn build_report(model: &Gguf) -> Report {
    let metadata = model
        .metadata()
        .entries()
        .iter()
        .map(|(k, v)| MetaEntry {
            key: k.clone(),
            ty: v.type_description(),
            value: summarise(v),
        })
        .collect();
    let tensors: Vec<TensorEntry> = model.tensors().iter().map(tensor_entry).collect();
    let decode = decode_step_bytes(model);
    let mut totals_by_type: BTreeMap<String, TypeTotal> = BTreeMap::new();
    for t in model.tensors() {
        let total = totals_by_type.entry(t.ty.name().to_owned()).or_default();
        total.tensors += 1;
        total.bytes += t.n_bytes;
    }
    Report {
        files: model
            .paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        version: model.version(),
        alignment: model.alignment(),
        metadata,
        total_tensor_bytes: model.tensors().iter().map(|t| t.n_bytes).sum(),
        decode_step_bytes: decode.as_ref().ok().copied(),
        decode_step_unknown: decode.err().map(|e| e.to_string()),
        totals_by_type,
        tensors,
    }
}

fn summarise(v: &Value) -> String {
    let s = v.to_string();
    // Chat templates and similar long strings would drown the listing.
    const LIMIT: usize = 160;
    if s.chars().count() > LIMIT {
        let head: String = s.chars().take(LIMIT).collect();
        format!("{head}… ({} chars)", s.chars().count())
    } else {
        s
    }
}

fn tensor_entry(t: &TensorInfo) -> TensorEntry {
    TensorEntry {
        name: t.name.clone(),
        shape: t.shape.clone(),
        ty: t.ty.name().to_owned(),
        bytes: t.n_bytes,
        offset: t.file_offset,
    }
}

/// The weight bytes one decode step of `model` reads, as its architecture's spec says (the
/// tensors of the layers and the head, one embedding row; not MTP blocks).
pub fn decode_step_bytes(model: &Gguf) -> Result<DecodeStepBytes, ModelError> {
    Ok(fak::model::blueprint(model)?.decode_step_bytes())
}

fn print_text(r: &Report) {
    println!("file: {}", r.files.join(", "));
    println!("GGUF v{}, alignment {}", r.version, r.alignment);
    println!("\nmetadata ({} keys):", r.metadata.len());
    for m in &r.metadata {
        println!("  {} [{}] = {}", m.key, m.ty, m.value);
    }
    println!("\ntensors ({}):", r.tensors.len());
    for t in &r.tensors {
        println!(
            "  {:<40} {:<24} {:<6} {:>12} B",
            t.name,
            format!("{:?}", t.shape),
            t.ty,
            t.bytes
        );
    }
    println!("\ntotals by type:");
    for (ty, total) in &r.totals_by_type {
        println!(
            "  {ty:<6} {:>5} tensors {:>14} B",
            total.tensors, total.bytes
        );
    }
    println!(
        "\ntensor data: {} B ({})",
        r.total_tensor_bytes,
        human(r.total_tensor_bytes)
    );
    match (&r.decode_step_bytes, &r.decode_step_unknown) {
        (Some(d), _) => println!(
            "decode step reads: {} B ({}) of weights{} (KV cache and recurrent state not \
             included)",
            d.bytes,
            human(d.bytes),
            if d.tied_lm_head {
                ", tied embedding read whole as the LM head"
            } else {
                ", one embedding row"
            }
        ),
        (None, why) => println!(
            "decode step reads: unknown ({})",
            why.as_deref().unwrap_or("no spec")
        ),
    }
}

fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", units[u])
}
