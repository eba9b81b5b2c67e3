//! `harness quantize`: what `llama-quantize IN OUT TYPE` does, with fak's quantizers. Each tensor
//! gets the type llama-quantize's rules give it (the synth recipe: [`synth::llama_quantize_types`]),
//! the tensors come in llama-quantize's order, the metadata is the input's with
//! `general.file_type` and `general.quantization_version` set. A tensor that keeps its type is
//! copied byte for byte; any other is dequantized and quantized again (so a quantized input is
//! requantized, as `llama-quantize --allow-requantize` does), a chunk of rows at a time.

use crate::synth::{self, Quant};
use anyhow::{Context, Result, bail};
use fak::gguf::{Gguf, GgufWriter, TensorInfo, Value};
use fak::quant::GgmlType;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF to quantize (f32/f16 as the converter writes it, or already quantized).
    pub input: PathBuf,
    /// The GGUF to write.
    pub output: PathBuf,
    /// The file type, as llama-quantize names it: Q8_0, Q6_K or Q4_K_M (any case).
    #[arg(value_parser = parse_type)]
    pub ftype: Quant,
}

fn parse_type(name: &str) -> Result<Quant, String> {
    match name.to_ascii_lowercase().as_str() {
        "q8_0" => Ok(Quant::Q8_0),
        "q6_k" => Ok(Quant::Q6K),
        "q4_k_m" => Ok(Quant::Q4KM),
        _ => Err(format!("{name:?}: expected Q8_0, Q6_K or Q4_K_M")),
    }
}

pub fn run(args: Args) -> Result<()> {
    println!("{}", quantize(&args.input, &args.output, args.ftype)?);
    Ok(())
}

/// Floats dequantized and quantized again at once (16 MiB).
const CHUNK_ELEMS: u64 = 1 << 22;

/// Writes `input` quantized as `quant` to `output`; returns a line saying what was written.
pub fn quantize(input: &Path, output: &Path, quant: Quant) -> Result<String> {
    if matches!(quant, Quant::F32 | Quant::F16) {
        bail!("{}: not a quantized file type", quant.name());
    }
    let gguf = Arc::new(Gguf::open(input)?);
    let mut tensors: Vec<TensorInfo> = gguf.tensors().to_vec();
    let types = synth::llama_quantize_types(quant, &mut tensors, |t| t.ty);

    let mut w = GgufWriter::new();
    for (key, value) in gguf.metadata().entries() {
        w.set(key, value.clone())?;
    }
    w.set("general.file_type", Value::U32(quant.file_type()))?;
    w.set("general.quantization_version", Value::U32(2))?;
    let mut requantized = 0;
    for (t, &ty) in tensors.iter().zip(&types) {
        requantized += usize::from(ty != t.ty);
        let (gguf, t_owned) = (Arc::clone(&gguf), t.clone());
        w.add_tensor(
            &t.name,
            ty,
            &t.shape,
            Box::new(move |out| write_as(&gguf, &t_owned, ty, out)),
        )
        .with_context(|| format!("{}: tensor {}", input.display(), t.name))?;
    }
    let size = w
        .write(output, |_| {})
        .with_context(|| format!("writing {}", output.display()))?;
    Ok(format!(
        "{}: {} from {}, {} tensors ({requantized} quantized), {:.2} MiB",
        output.display(),
        quant.name(),
        input.display(),
        tensors.len(),
        size as f64 / (1u64 << 20) as f64
    ))
}

/// Writes tensor `t` of `gguf` as `ty`: its bytes when the type stays, else its values
/// dequantized and quantized as `ty`, chunk of rows by chunk.
fn write_as(gguf: &Gguf, t: &TensorInfo, ty: GgmlType, out: &mut dyn Write) -> std::io::Result<()> {
    let data = gguf.tensor_data(t);
    if ty == t.ty {
        return out.write_all(data);
    }
    let (row_len, n_rows) = (t.row_len(), t.n_rows());
    let rows_per_chunk = (CHUNK_ELEMS / row_len).clamp(1, n_rows.max(1));
    let row_bytes = t.row_bytes() as usize;
    let mut floats = vec![0f32; (rows_per_chunk * row_len) as usize];
    for (i, bytes) in data.chunks(rows_per_chunk as usize * row_bytes).enumerate() {
        let rows = bytes.len() / row_bytes;
        let chunk = &mut floats[..rows * row_len as usize];
        let first = i as u64 * rows_per_chunk;
        let fail = |e: fak::quant::QuantError| {
            std::io::Error::other(format!("{} rows {first}..: {e}", t.name))
        };
        fak::quant::dequantize_into(t.ty, bytes, chunk).map_err(fail)?;
        out.write_all(&fak::quant::quantize(ty, chunk, row_len as usize).map_err(fail)?)?;
    }
    Ok(())
}
