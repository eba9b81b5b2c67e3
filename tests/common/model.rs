//! What the end-to-end model tests share besides the oracles (`peer`): the engine options they
//! load with, the kernel paths to force, random prompts, an error summary of logit rows, the
//! integer mat-vec path's check, and rewriting a GGUF with edited metadata or tensors (bad-input
//! tests).

use crate::peer::assert_rows_close;
use fak::gguf::{Gguf, GgufWriter, TensorInfo, Value};
use fak::gpu::Forced;
use fak::gpu::kernels::gated_delta_chunk::{ChunkKernel, GatedDeltaChunked};
use fak::gpu::step::StepIo;
use fak::model::{DevicePlan, load_device_model};
use fak::runtime::{Engine, EngineOptions};
use rand::Rng;
use std::path::{Path, PathBuf};

/// The cut vocabulary's size: `harness synth --vocab cut` gives any preset the 4 096-token table
/// the trained presets carry (`fixtures/vocab/ggml-vocab-qwen-cut4k.gguf`). The suites that run
/// tiny models on lavapipe use it: with the full Qwen table the head is nearly all of a tiny
/// model's step (experiments/NOTES.md, 2026-12-05 #2).
pub const CUT_VOCAB: usize = 4096;

/// `harness synth --arch <arch> --preset tiny --vocab cut --quant <quant> --seed <seed>`, written
/// once per test process into `dir` (the calling file's scratch folder under
/// `CARGO_TARGET_TMPDIR`) as `tiny-<arch>-<quant>-<seed>.gguf`.
pub fn tiny_cut(dir: &Path, arch: &str, quant: &str, seed: u64) -> PathBuf {
    let seed = seed.to_string();
    let args = [
        "--arch", arch, "--preset", "tiny", "--vocab", "cut", "--quant", quant, "--seed", &seed,
    ];
    crate::harness::synth_model(dir, &format!("tiny-{arch}-{quant}-{seed}.gguf"), &args)
}

/// The environment's adapter, a 256-token context, NaN-poisoned activations and caches, and
/// `forced` fast paths off.
pub fn options(prefill_chunk: u32, forced: Forced) -> EngineOptions {
    let mut o = EngineOptions::from_env().expect("engine options");
    // One device for every engine of the test binary: each load took its pipelines from the
    // ones built before instead of building them again (ContextOptions::shared).
    o.context.shared = true;
    o.prefill_chunk = prefill_chunk;
    o.max_context = Some(256);
    o.poison = true;
    o.context.forced = forced;
    // The f32 mat-vec path, whichever the adapter defaults to: these options' tests hold the
    // engine to the f32 reference; the integer path has its own (`assert_int_dot_logits`).
    o.context.int_dot = Some(false);
    o
}

pub use fak_harness::checks::{COOP_MIN_COSINE, min_cosine};

/// [`min_cosine`] on the paths `e` runs.
pub fn engine_min_cosine(e: &Engine) -> f64 {
    min_cosine(e.ctx.paths())
}

/// How a test feeds its tokens: every token a decode step (the mat-vec, decode attention and
/// recurrent delta rule that generation runs), or as a prompt prefilled in steps of up to `n`
/// tokens (the mat-mul, prefill attention and chunked delta rule, however few tokens a step
/// holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steps {
    Decode,
    Prompt(u32),
}

impl Steps {
    /// The engine's prefill chunk for these steps.
    pub fn prefill_chunk(self) -> u32 {
        match self {
            Steps::Decode => 1,
            Steps::Prompt(n) => n,
        }
    }

    /// How many of `n` tokens are fed as a prompt.
    pub fn prompt_tokens(self, n: usize) -> usize {
        match self {
            Steps::Decode => 0,
            Steps::Prompt(_) => n,
        }
    }

    /// The logits after each of `ids` on `e` (loaded with [`Steps::prefill_chunk`]).
    pub fn logits(self, e: &mut Engine, ids: &[u32]) -> Vec<Vec<f32>> {
        e.forced_logits(ids, self.prompt_tokens(ids.len())).unwrap()
    }
}

pub fn engine(path: &Path, prefill_chunk: u32, forced: Forced) -> Engine {
    Engine::load(path, &options(prefill_chunk, forced))
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// The integer mat-vec path (`FAK_INT_DOT=1`) over `ids` fed as decode steps (so every
/// projection is a mat-vec), for each `(no_subgroup, no_f16, min cosine)`: every row held
/// to `want_q8` (the reference rounding its mat-vec inputs as the path does,
/// `Activations::Q8Blocks`); the distance to the f32 reference `want_f32` is printed, not
/// asserted (what the rounding itself does to a random model). Returns each case's logits
/// fingerprint (`crate::pin`).
pub fn assert_int_dot_logits(
    path: &Path,
    ids: &[u32],
    want_q8: &[Vec<f32>],
    want_f32: &[Vec<f32>],
    cases: [(bool, bool, f64); 3],
) -> Vec<(String, String)> {
    let mut fingerprints = Vec::new();
    for (no_subgroup, no_f16, min_cosine) in cases {
        let forced = Forced {
            no_subgroup,
            no_f16,
            ..Forced::default()
        };
        let mut o = options(Steps::Decode.prefill_chunk(), forced);
        o.context.int_dot = Some(true);
        let mut e = Engine::load(path, &o).unwrap();
        let got = Steps::Decode.logits(&mut e, ids);
        let what = format!("int-dot, {forced:?}");
        let q8 = assert_rows_close(&what, &got, want_q8, min_cosine);
        let f32 = rows_error(&got, want_f32).min_cosine;
        eprintln!("{what}: min cosine {q8} against the q8-input reference, {f32} against f32");
        let name = format!("{}, int-dot, steps of 1", crate::pin::path_name(forced));
        fingerprints.push((name, crate::pin::fingerprint(&got)));
    }
    fingerprints
}

/// Every combination of fast paths switched off: on an adapter with subgroups and f16 (lavapipe,
/// NVIDIA, Apple) each kernel's fallback runs too.
pub fn every_path() -> Vec<Forced> {
    let mut out = Vec::new();
    for no_subgroup in [false, true] {
        for no_f16 in [false, true] {
            out.push(Forced {
                no_subgroup,
                no_f16,
                ..Forced::default()
            });
        }
    }
    out
}

pub fn random_ids(seed: u64, n: usize, n_vocab: usize) -> Vec<u32> {
    let mut r = crate::rng(seed);
    (0..n).map(|_| r.random_range(0..n_vocab as u32)).collect()
}

/// The worst cosine over rows and the largest |got − want| relative to the row's largest
/// |want|, for reports.
#[derive(Clone, Copy, Debug)]
pub struct RowsError {
    pub min_cosine: f64,
    pub max_rel: f64,
}

pub fn rows_error(got: &[Vec<f32>], want: &[Vec<f32>]) -> RowsError {
    let mut e = RowsError {
        min_cosine: f64::INFINITY,
        max_rel: 0.0,
    };
    for (g, w) in got.iter().zip(want) {
        let c = crate::cosine(g, w);
        // A NaN cosine must show as the minimum.
        e.min_cosine = if c.is_nan() { c } else { e.min_cosine.min(c) };
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = g
            .iter()
            .zip(w)
            .map(|(a, b)| f64::from((a - b).abs()))
            .fold(0f64, |m, d| if d.is_nan() { d } else { m.max(d) });
        e.max_rel = e.max_rel.max(worst / f64::from(scale));
    }
    e
}

/// Writes `src` to `dst` with its metadata passed through `edit_keys` (change, add or remove
/// keys) and its tensor table through `edit_tensors`: a list of (name to write, tensor of `src`
/// whose type, shape and bytes it gets), so a test can drop, rename or duplicate tensors.
pub fn rewrite_gguf(
    src: &Path,
    dst: &Path,
    edit_keys: impl FnOnce(&mut Vec<(String, Value)>),
    edit_tensors: impl FnOnce(&mut Vec<(String, &TensorInfo)>),
) {
    let gguf = Gguf::open(src).unwrap();
    let mut entries = gguf.metadata().entries().to_vec();
    edit_keys(&mut entries);
    let mut tensors: Vec<(String, &TensorInfo)> =
        gguf.tensors().iter().map(|t| (t.name.clone(), t)).collect();
    edit_tensors(&mut tensors);
    let mut w = GgufWriter::new();
    for (key, value) in entries {
        w.set(&key, value).unwrap();
    }
    for (name, t) in tensors {
        let bytes = gguf.tensor_data(t).to_vec();
        let source = Box::new(move |out: &mut dyn std::io::Write| out.write_all(&bytes));
        w.add_tensor(&name, t.ty, &t.shape, source).unwrap();
    }
    w.write(dst, |_| {}).unwrap();
}

/// Sets `key` to `value` in metadata entries (adding it when absent).
pub fn set_key(entries: &mut Vec<(String, Value)>, key: &str, value: Value) {
    match entries.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => entries.push((key.into(), value)),
    }
}

/// The memory plan sizes the activations exactly as loading allocates them: for each prefill
/// chunk of `chunks`, `DevicePlan::scratch_bytes` is what the model allocated for its
/// activations plus the step's logits (both read the architecture's one scratch table).
pub fn assert_plan_sizes_the_activations(path: &Path, chunks: &[u32]) {
    let gguf = Gguf::open(path).unwrap();
    let ctx = crate::gpu();
    for &chunk in chunks {
        let plan = DevicePlan::of(&gguf, Some(256), chunk).unwrap();
        let rows = (plan.max_seqs, plan.pages_per_row(), plan.pad_page());
        let n_vocab = plan.n_vocab as u32;
        let io = StepIo::new(ctx, plan.max_tokens, plan.logit_rows, n_vocab, rows).unwrap();
        let model = load_device_model(ctx, &gguf, &io, &plan).unwrap();
        let allocated = model.activation_bytes() + io.logits.size();
        // The chunked delta rule's f16 scratch exists only where its coop kernel runs, which
        // the plan (made before the adapter is known) counts apart.
        let coop_runs = ChunkKernel::requested().unwrap().coop
            && GatedDeltaChunked::coop_paths(ctx.paths()).is_some();
        let planned = plan.scratch_bytes
            + if coop_runs {
                plan.coop_scratch_bytes
            } else {
                0
            };
        eprintln!(
            "chunk {chunk}: planned {planned} (f16 chunk scratch {}), allocated {allocated}",
            plan.coop_scratch_bytes
        );
        assert_eq!(planned, allocated, "prefill chunk {chunk}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cut_vocabulary_has_cut_vocab_tokens() {
        let path = crate::fixture("vocab/ggml-vocab-qwen-cut4k.gguf");
        let gguf = fak::gguf::Gguf::open(&path).unwrap();
        let tokens = gguf.metadata().str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(tokens.len(), super::CUT_VOCAB);
    }
}
