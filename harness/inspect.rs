//! `harness inspect`: what a GGUF file holds and what a decode step reads.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (any shard of a split model).
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let model = fak::gguf::Gguf::open(&args.file)?;
    println!("{} tensors", model.tensors().len());
    Ok(())
}
