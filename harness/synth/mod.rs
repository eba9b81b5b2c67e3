//! `harness synth`: models of real shapes with seeded random weights.
//!
//! No model can be downloaded where fak is built and tested, so synth writes what a real
//! pipeline would have produced: the GGUF of llama.cpp's converter (and, for Q4_K_M, of
//! `llama-quantize` after it) with the same metadata keys, tensor names, per-tensor types and
//! tensor order, a real tokenizer; and optionally the Hugging Face directory the converter
//! would have started from, holding the same float weights.
//!
//! One module per architecture turns a preset into a [`ModelPlan`]; weights ([`weights`]),
//! types ([`recipe`]), the GGUF stream and the Hugging Face export ([`hf`]) are shared.
//! Every tensor streams through the GGUF writer in row chunks, so memory stays at a chunk
//! (16 MiB of floats) plus the tensor table whatever the model size.

mod checkpoint;
mod hf;
pub mod mlx;
mod qwen2;
mod qwen3;
mod qwen35;
mod recipe;
mod vocab;
mod weights;

use anyhow::{Context, Result};
use checkpoint::Checkpoint;
use fak::gguf::{GgufWriter, TensorSource, Value};
use fak::quant::GgmlType;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
pub use recipe::{Quant, Tensor, llama_quantize_types};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use vocab::Tokenizer;
pub use vocab::Vocab;
use weights::Init;

#[derive(clap::Args)]
pub struct Args {
    /// Architecture, as GGUF names it.
    #[arg(long, value_enum)]
    pub arch: Arch,
    /// Model shape: `tiny` (CI-sized), `trained` (the shape of the trained tiny models, with the
    /// cut 4 096-token vocabulary: d = 256, 2 layers, tied embedding) or a real model's (qwen2:
    /// qwen2.5-0.5b, qwen2.5-7b; qwen3: qwen3-0.6b, qwen3-8b; qwen35: qwen35-9b, qwen35-27b, and
    /// `mid`, the 27B's heads at d = 1024 over 8 layers).
    #[arg(long)]
    pub preset: String,
    /// Tensor types: the converter's f32/f16/q8_0 output, or llama-quantize's Q4_K_M.
    #[arg(long, value_enum)]
    pub quant: Quant,
    /// Seed of the random weights; the same seed gives the same file.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The vocabulary: the family's real table, `cut` (the 4 096-token cut of it the trained
    /// presets carry: a 4 096-row head, the model test suites' choice), or `bytes` (the 256 byte
    /// tokens and the added tokens: a tiny model of kilobytes for crafted-file tests and fuzz
    /// seeds).
    #[arg(long, value_enum, default_value = "full")]
    pub vocab: Vocab,
    /// The GGUF file to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the same float weights as a Hugging Face model directory.
    #[arg(long)]
    pub hf_dir: Option<PathBuf>,
    /// Write random quantized blocks directly (no float weights, no quantization search), so a
    /// large Q4_K_M model writes as fast as the disk allows. Its weights are those blocks: with
    /// --mlx-4bit and --f16-reference, MLX's model and the reference hold the blocks'
    /// dequantized values (MLX requantized to its own 4-bit form, the reference rounded to f16).
    #[arg(long, conflicts_with_all = ["hf_dir"])]
    pub fast_random: bool,
    /// Write only the metadata and tensor table and leave the tensor data a hole (a sparse
    /// file of the full size whose weights read as zeros): a real-size model's layout at once,
    /// for tools that read no weights (`llama-quantize --dry-run`, loaders).
    #[arg(long, conflicts_with_all = ["hf_dir", "fast_random"])]
    pub layout_only: bool,
    /// Also write the same float weights as MLX's own affine 4-bit (group 64) model directory,
    /// what `mlx_lm.convert -q` would make of the Hugging Face export.
    #[arg(long)]
    pub mlx_4bit: Option<PathBuf>,
    /// Also write the same weights as an f16 GGUF (the converter's f16 tensor types): the
    /// unquantized reference `harness threeway --reference-model` takes. Matters with
    /// --fast-random, whose weights no other f16/f32 synth can reproduce.
    #[arg(long, conflicts_with = "layout_only")]
    pub f16_reference: Option<PathBuf>,
    /// Take the weights from a file instead of the seed: a Hugging Face checkpoint
    /// (`model.safetensors` as `transformers` saves it, names and shapes of the --hf-dir export)
    /// or a GGUF of the same preset. synth is then llama.cpp's converter (and, for q6_k/q4_k_m,
    /// llama-quantize) for these weights.
    #[arg(long, conflicts_with_all = ["fast_random", "layout_only"])]
    pub weights: Option<PathBuf>,
}

/// The architectures synth can write.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Arch {
    Qwen2,
    Qwen3,
    Qwen35,
}

/// A model to write: everything architecture-specific, in the converter's terms.
pub struct ModelPlan {
    /// `general.architecture`.
    pub arch: &'static str,
    /// `general.name`.
    pub name: String,
    /// The `{arch}.*` hyperparameter keys, in the converter's order.
    pub hparams: Vec<(String, Value)>,
    /// How many of `hparams` the converter writes before `general.file_type` (it writes the
    /// file type at the end of the generic text-model keys, before an architecture's own).
    pub file_type_at: usize,
    pub tokenizer: Tokenizer,
    pub tensors: Vec<TensorPlan>,
    /// The Hugging Face `config.json`.
    pub hf_config: serde_json::Value,
}

/// One tensor: its names in both worlds, GGUF shape and how its values are drawn.
///
/// The values drawn are the GGUF's (what the converter wrote); the Hugging Face checkpoint
/// holds them with the converter's transform undone ([`hf::ToHf`], [`hf::VHeads`]).
#[derive(Clone, Debug)]
pub struct TensorPlan {
    /// GGUF name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Hugging Face name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub hf_name: String,
    /// GGUF shape, `ne[0]` (the contiguous row) first.
    pub shape: Vec<u64>,
    /// The Hugging Face shape over the same number of values: the GGUF shape reversed unless
    /// the converter squeezed a dimension (conv1d's [C, 1, K]).
    pub hf_shape: Vec<u64>,
    pub init: Init,
    /// How the Hugging Face value of an element follows from the GGUF one.
    pub to_hf: hf::ToHf,
    /// The value-head axis the converter reordered (qwen35), if any.
    pub v_heads: Option<hf::VHeads>,
}

impl TensorPlan {
    pub fn new(name: &str, hf_name: &str, shape: &[u64], init: Init) -> Self {
        Self {
            name: name.into(),
            hf_name: hf_name.into(),
            shape: shape.to_vec(),
            hf_shape: shape.iter().rev().copied().collect(),
            init,
            to_hf: hf::ToHf::Same,
            v_heads: None,
        }
    }

    pub fn with_to_hf(mut self, to_hf: hf::ToHf) -> Self {
        self.to_hf = to_hf;
        self
    }

    pub fn with_v_heads(mut self, v_heads: hf::VHeads) -> Self {
        self.v_heads = Some(v_heads);
        self
    }

    pub fn with_hf_shape(mut self, hf_shape: &[u64]) -> Self {
        assert_eq!(
            hf_shape.iter().product::<u64>(),
            self.n_elements(),
            "{}: Hugging Face shape {hf_shape:?} holds another number of values",
            self.name
        );
        self.hf_shape = hf_shape.to_vec();
        self
    }

    pub fn row_len(&self) -> u64 {
        self.shape[0]
    }

    pub fn n_rows(&self) -> u64 {
        self.shape[1..].iter().product()
    }

    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

impl Arch {
    fn plan(self, preset: &str, vocab: Vocab) -> Result<ModelPlan> {
        match self {
            Arch::Qwen2 => qwen2::plan(preset, vocab),
            Arch::Qwen3 => qwen3::plan(preset, vocab),
            Arch::Qwen35 => qwen35::plan(preset, vocab),
        }
    }
}

/// `harness synth`: writes the model and prints one line saying what was written.
pub fn run(args: Args) -> Result<()> {
    println!("{}", write(args)?);
    Ok(())
}

/// Writes the model (and the exports asked for) and returns the one-line summary, printing
/// nothing: callers such as `selftest --json` keep stdout for their own output.
pub fn write(args: Args) -> Result<String> {
    let mut plan = args.arch.plan(&args.preset, args.vocab)?;
    let types = args.quant.arrange(&mut plan.tensors);
    let source = Source {
        seed: args.seed,
        fast_random: args.fast_random,
        weights: match &args.weights {
            // Leaked: it lives as long as the process, which writes this one model.
            Some(path) => Some(&*Box::leak(Box::new(Checkpoint::load(path, &plan)?))),
            None => None,
        },
    };
    let name = model_name(&plan, &args);
    let writer = gguf_writer(&plan, &plan.tensors, &types, args.quant, &name, |t, ty| {
        tensor_source(t, ty, source)
    })?;
    let reference = match &args.f16_reference {
        Some(_) => Some(reference_writer(&plan, &types, &args, source)?),
        None => None,
    };
    let float_bytes: u64 = plan.tensors.iter().map(|t| 4 * t.n_elements()).sum();
    let exports = u64::from(args.hf_dir.is_some()) + u64::from(args.mlx_4bit.is_some());
    let reference_bytes = reference.as_ref().map_or(0, GgufWriter::data_bytes);
    let bar = progress_bar(writer.data_bytes() + exports * float_bytes + reference_bytes)?;

    let size = if args.layout_only {
        writer.write_layout(&args.out)
    } else {
        writer.write(&args.out, |n| bar.inc(n))
    }
    .context("writing the GGUF")?;
    if let Some(dir) = &args.hf_dir {
        hf::write(dir, &plan, source, &bar)
            .with_context(|| format!("writing the Hugging Face export {}", dir.display()))?;
    }
    if let Some(dir) = &args.mlx_4bit {
        mlx::write(dir, &plan, &types, source, &bar)
            .with_context(|| format!("writing the MLX 4-bit model {}", dir.display()))?;
    }
    if let (Some(path), Some(writer)) = (&args.f16_reference, reference) {
        writer
            .write(path, |n| bar.inc(n))
            .with_context(|| format!("writing the f16 reference {}", path.display()))?;
    }
    bar.finish_and_clear();
    Ok(format!(
        "{}: {} {} {} {}, {} tensors, {:.1} MiB",
        args.out.display(),
        plan.arch,
        args.preset,
        args.quant.name(),
        match &args.weights {
            Some(path) => format!("weights {}", path.display()),
            None => format!("seed {}", args.seed),
        },
        plan.tensors.len(),
        size as f64 / (1u64 << 20) as f64
    ))
}

/// `general.name`: the plan's name with the seed, or alone for trained weights.
fn model_name(plan: &ModelPlan, args: &Args) -> String {
    match args.weights {
        Some(_) => format!("fak {} {}, trained weights", plan.arch, args.preset),
        None => format!("{} seed {}", plan.name, args.seed),
    }
}

/// MLX's own 4-bit model ([`mlx::write`]) of trained weights: `weights` is a GGUF (or Hugging
/// Face checkpoint) of `arch`'s `preset`, such as the f16 file of a trained model.
pub fn write_mlx_4bit(arch: Arch, preset: &str, weights: &Path, dir: &Path) -> Result<()> {
    let mut plan = arch.plan(preset, Vocab::Full)?;
    let types = Quant::F16.arrange(&mut plan.tensors);
    let checkpoint = Checkpoint::load(weights, &plan)?;
    let source = Source {
        seed: 0,
        fast_random: false,
        // Leaked: the caller writes one such model per process (a threeway run's cache).
        weights: Some(Box::leak(Box::new(checkpoint))),
    };
    mlx::write(dir, &plan, &types, source, &ProgressBar::hidden())
        .with_context(|| format!("writing the MLX 4-bit model {}", dir.display()))
}

fn progress_bar(total: u64) -> Result<ProgressBar> {
    // indicatif draws nothing when stderr is not a terminal (CI logs stay clean).
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(
        "{wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )?);
    Ok(bar)
}

/// The f16 reference's writer: the plan's tensors in the converter's f16 types and order, each
/// holding the values the main GGUF's tensor encodes ([`Source::fill_rows`] with that tensor's
/// type there), rounded to f16 (norms and other 1-D tensors stay f32, as the converter keeps them).
fn reference_writer(
    plan: &ModelPlan,
    types: &[GgmlType],
    args: &Args,
    source: Source,
) -> Result<GgufWriter> {
    let gguf_types: std::collections::HashMap<String, GgmlType> = plan
        .tensors
        .iter()
        .zip(types)
        .map(|(t, &ty)| (t.name.clone(), ty))
        .collect();
    let mut tensors = plan.tensors.clone();
    let f16_types = Quant::F16.arrange(&mut tensors);
    gguf_writer(
        plan,
        &tensors,
        &f16_types,
        Quant::F16,
        &model_name(plan, args),
        |t, ty| {
            let from = gguf_types[&t.name];
            Box::new(move |w| write_values_as(&t, from, ty, source, w))
        },
    )
}

/// The GGUF writer with `plan`'s keys and `tensors` (the plan's, in the order `types` was
/// arranged for) queued, nothing written yet; `source` gives each tensor's bytes.
fn gguf_writer(
    plan: &ModelPlan,
    tensors: &[TensorPlan],
    types: &[GgmlType],
    quant: Quant,
    name: &str,
    source: impl Fn(TensorPlan, GgmlType) -> TensorSource,
) -> Result<GgufWriter> {
    let mut w = GgufWriter::new();
    let n_params = tensors.iter().map(TensorPlan::n_elements).sum();
    let s = |v: &str| Value::String(v.into());
    let general = [
        ("general.architecture", s(plan.arch)),
        ("general.type", s("model")),
        ("general.name", s(name)),
        ("general.size_label", s(&size_label(n_params))),
    ];
    for (key, value) in general {
        w.set(key, value)?;
    }
    let (generic, own) = plan.hparams.split_at(plan.file_type_at);
    for (key, value) in generic {
        w.set(key, value.clone())?;
    }
    w.set("general.file_type", Value::U32(quant.file_type()))?;
    for (key, value) in own {
        w.set(key, value.clone())?;
    }
    w.set("general.quantization_version", Value::U32(2))?;
    for (key, value) in plan.tokenizer.gguf_metadata() {
        w.set(&key, value)?;
    }

    for (t, &ty) in tensors.iter().zip(types) {
        w.add_tensor(&t.name, ty, &t.shape, source(t.clone(), ty))?;
    }
    Ok(w)
}

/// gguf-py's `size_label` for a dense model: the parameter count with a K/M/B/T suffix and at
/// least two significant digits ("596M", "8.2B").
fn size_label(n_params: u64) -> String {
    let n = n_params as f64;
    let (scaled, suffix) = [(1e12, "T"), (1e9, "B"), (1e6, "M")]
        .into_iter()
        .find(|&(scale, _)| n > scale)
        .map_or((n * 1e-3, "K"), |(scale, suffix)| (n / scale, suffix));
    let digits = (scaled.round() as u64)
        .to_string()
        .trim_start_matches('0')
        .len();
    let decimals = 2usize.saturating_sub(digits);
    format!("{scaled:.decimals$}{suffix}")
}

/// Floats per chunk of rows generated and encoded at once (16 MiB).
const CHUNK_ELEMS: u64 = 1 << 22;
/// Bytes per chunk of random blocks written at once.
const CHUNK_BYTES: u64 = 16 << 20;

/// Where a tensor's values come from: trained weights (`--weights`), the seeded float stream, or
/// — for a tensor `--fast-random` writes as random blocks — those blocks. Every file of one synth
/// run (the GGUF, the MLX model, the f16 reference) takes its values from here, so they all hold
/// the same weights up to their own encoding.
#[derive(Clone, Copy)]
pub struct Source {
    pub seed: u64,
    pub fast_random: bool,
    pub weights: Option<&'static Checkpoint>,
}

impl Source {
    /// The standard deviation of the random blocks the GGUF holds for `t` as `ty`, or `None`
    /// when it holds the encoded seeded floats.
    fn random_blocks(self, t: &TensorPlan, ty: GgmlType) -> Option<f32> {
        match t.init {
            Init::Normal { std } if self.fast_random && ty.block_elems() > 1 => Some(std),
            _ => None,
        }
    }

    /// All of `t`'s values ([`Source::fill_rows`] as `ty`), chunk of rows by chunk, each handed
    /// to `each` with its first row; stops at the first error.
    fn for_each_chunk(
        self,
        t: &TensorPlan,
        ty: GgmlType,
        mut each: impl FnMut(u64, &[f32]) -> io::Result<()>,
    ) -> io::Result<()> {
        let (row_len, n_rows) = (t.row_len(), t.n_rows());
        let step = (CHUNK_ELEMS / row_len).clamp(1, n_rows);
        let mut floats = vec![0f32; (step * row_len) as usize];
        for first in (0..n_rows).step_by(step as usize) {
            let rows = step.min(n_rows - first);
            let chunk = &mut floats[..(rows * row_len) as usize];
            self.fill_rows(t, ty, first, chunk)?;
            each(first, chunk)?;
        }
        Ok(())
    }

    /// Rows `first..` of `t` (whole rows fill `out`) as the GGUF that stores it as `ty`
    /// means them: the seeded floats (which the GGUF holds encoded), or its random blocks
    /// dequantized (which it holds exactly).
    pub fn fill_rows(
        self,
        t: &TensorPlan,
        ty: GgmlType,
        first: u64,
        out: &mut [f32],
    ) -> io::Result<()> {
        let row_len = t.row_len() as usize;
        if let Some(weights) = self.weights {
            weights.rows(t, first, out);
            return Ok(());
        }
        let Some(std) = self.random_blocks(t, ty) else {
            weights::fill_rows(t.init, self.seed, &t.name, first, row_len, out);
            return Ok(());
        };
        let rows = out.len() / row_len;
        let row_bytes = ty.row_bytes(row_len as u64).ok_or_else(|| {
            io::Error::other(format!("rows of {row_len} are not whole {ty} blocks"))
        })?;
        let mut blocks = vec![0u8; rows * row_bytes as usize];
        let seed = weights::block_seed(self.seed, &t.name);
        fak::quant::fill_random_rows_from(ty, row_len, first, rows, std, seed, &mut blocks)
            .and_then(|()| fak::quant::dequantize_into(ty, &blocks, out))
            .map_err(|e| io::Error::other(format!("{} rows {first}..: {e}", t.name)))
    }
}

fn tensor_source(t: TensorPlan, ty: GgmlType, source: Source) -> TensorSource {
    match source.random_blocks(&t, ty) {
        Some(std) => Box::new(move |w| write_random_blocks(&t, ty, std, source.seed, w)),
        None => Box::new(move |w| write_values_as(&t, ty, ty, source, w)),
    }
}

/// Writes the tensor's values ([`Source::fill_rows`], as the GGUF storing it as `from` means
/// them) chunk by chunk, encoded as `ty`.
fn write_values_as(
    t: &TensorPlan,
    from: GgmlType,
    ty: GgmlType,
    source: Source,
    w: &mut dyn Write,
) -> io::Result<()> {
    let row_len = t.row_len() as usize;
    source.for_each_chunk(t, from, |first, chunk| {
        let bytes = fak::quant::quantize(ty, chunk, row_len)
            .map_err(|e| io::Error::other(format!("rows {first}..: {e}")))?;
        w.write_all(&bytes)
    })
}

/// Writes random `ty` blocks of roughly N(0, std²) values, chunk by chunk.
fn write_random_blocks(
    t: &TensorPlan,
    ty: GgmlType,
    std: f32,
    seed: u64,
    w: &mut dyn Write,
) -> io::Result<()> {
    let (row_len, n_rows) = (t.row_len(), t.n_rows());
    let row_bytes = ty
        .row_bytes(row_len)
        .ok_or_else(|| io::Error::other(format!("rows of {row_len} are not whole {ty} blocks")))?;
    let step = (CHUNK_BYTES / row_bytes).clamp(1, n_rows);
    let mut blocks = vec![0u8; (step * row_bytes) as usize];
    let tensor_seed = weights::block_seed(seed, &t.name);
    for first in (0..n_rows).step_by(step as usize) {
        let rows = step.min(n_rows - first);
        let out = &mut blocks[..(rows * row_bytes) as usize];
        fak::quant::fill_random_rows_from(
            ty,
            row_len as usize,
            first,
            rows as usize,
            std,
            tensor_seed,
            out,
        )
        .map_err(|e| io::Error::other(format!("rows {first}..: {e}")))?;
        w.write_all(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::size_label;

    #[test]
    fn size_labels_round_like_gguf_py() {
        assert_eq!(size_label(596_049_920), "596M");
        assert_eq!(size_label(8_190_735_360), "8.2B");
        assert_eq!(size_label(19_600_000), "20M");
    }
}
