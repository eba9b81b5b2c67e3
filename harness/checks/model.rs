//! The model checks of `harness selftest` (harness/selftest.rs): one model loaded on one
//! combination of kernel paths, its teacher-forced logits and greedy tokens held to the CPU
//! reference ([`Oracle`]). Here, in the library, so that the model tests run the very check the
//! selftest runs on a user's adapter.
//!
//! Each check feeds the engine the way its oracle rounds. The f32 oracle's logits come from one
//! prompt (prefill steps of [`PROMPT_TOKENS`] rows: the mat-mul, tiled attention, the chunked
//! delta rule). The int-dot oracle (`Activations::Q8Blocks`) rounds every projection's input to
//! 8-bit blocks, which only the decode mat-vecs do — a prompt step runs the mat-mul on f32
//! inputs however few ids it holds — so its logits come from decode steps, one id each; its
//! greedy tokens follow the prompt's f32 rounding with decode steps' rounding, as generation
//! runs them.

use crate::packet::metrics::cosine;
use anyhow::Result;
use fak::gpu::{ContextOptions, Forced, KernelPaths};
use fak::reference::{Activations, Reference};
use fak::runtime::{Engine, EngineOptions, SamplingParams};
use serde::Serialize;
use std::path::Path;

/// Why 0.99999: the GPU sums in f32 in another order than the reference's f64, and the f16 path
/// keeps the KV cache in f16 (≈1e-3 relative on a logit at most); a wrong kernel lands far below.
/// Paths with cooperative matrices are held to [`super::COOP_MIN_COSINE`] instead (the prefill
/// mat-mul's inputs in f16).
pub const MIN_COSINE: f64 = 0.99999;
/// The integer mat-vec path (int-dot), fed as decode steps, against a reference that rounds its
/// inputs alike (`Activations::Q8Blocks`): with the f16 KV cache, attention's output carries
/// ~5e-4 relative error into the next quantization, where about one code in 127·5e-4 ≈ 6 % lands
/// on the other side of a rounding boundary and moves its input by a whole step (1/127 of its
/// block's largest value): measured 0.99979 on the tiny qwen3 (tests/model_qwen3.rs holds the
/// f16 path to the same number, the f32 one to 0.99999); on the selftest's tiny qwen35 Q4_K_M
/// 0.99993 with the f32 cache and 0.99971 with the f16 one (lavapipe, tests/model_qwen35.rs). A
/// wrong kernel lands far below, and so does the right one held to the wrong rounding: that
/// qwen35's f32 reference is at 0.99722 from its q8-rounded one on the selftest's ids, 0.97764
/// on the test's.
pub const INT_DOT_MIN_COSINE: f64 = 0.999;
/// The ids a model check feeds, and the f32 check's prefill step.
pub const PROMPT_TOKENS: usize = 16;
/// Greedy tokens a model check generates after them.
pub const GREEDY_TOKENS: usize = 4;

/// One model check's outcome, as the selftest reports it.
#[derive(Serialize, Debug)]
pub struct ModelCheck {
    pub model: String,
    pub paths: String,
    pub check: &'static str,
    pub min_cosine: Option<f64>,
    pub tokens_equal: Option<bool>,
    pub pass: bool,
    pub error: Option<String>,
}

/// What a model check holds the engine to: the CPU reference's teacher-forced logits and
/// greedy tokens, the cosine the logits must reach, and how many of the ids the engine takes
/// as a prompt before it feeds the rest one decode step each.
pub struct Oracle {
    pub logits: Vec<Vec<f32>>,
    pub tokens: Vec<u32>,
    pub min_cosine: f64,
    pub prompt_tokens: usize,
}

impl Oracle {
    /// The CPU reference after `ids` with its mat-vec inputs rounded as `activations` says
    /// (module docs): logits, and [`GREEDY_TOKENS`] greedy tokens after the prompt `ids`, each
    /// from a fresh sequence.
    pub fn cpu(model: &Path, ids: &[u32], activations: Activations) -> Result<Oracle> {
        let gguf = fak::gguf::Gguf::open(model)?;
        let fresh = |activations| -> Result<Box<dyn Reference + '_>> {
            Ok(fak::reference::for_model(&gguf, activations)?)
        };
        let logits = fresh(activations)?.forward_all(ids)?;
        // Generation prefills the prompt (f32 inputs) and decodes the rest.
        let tokens = fresh(Activations::F32)?.greedy_decoding(ids, GREEDY_TOKENS, activations)?;
        let (min_cosine, prompt_tokens) = match activations {
            Activations::F32 => (MIN_COSINE, ids.len()),
            // Every id a decode step: every projection a mat-vec, as the rounding assumes.
            _ => (INT_DOT_MIN_COSINE, 0),
        };
        Ok(Oracle {
            logits,
            tokens,
            min_cosine,
            prompt_tokens,
        })
    }
}

/// `model` loaded with `options`' adapter on `paths` (what `forced` leaves of them), activations
/// and caches NaN-poisoned, held to `oracle` after `ids`: its logits, then its greedy tokens.
pub fn check(
    model: &Path,
    options: &ContextOptions,
    (forced, paths): (Forced, KernelPaths),
    ids: &[u32],
    oracle: &Oracle,
) -> Vec<ModelCheck> {
    let (want_logits, want_tokens) = (&oracle.logits, &oracle.tokens);
    let name = model
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let check = |what, min_cosine, tokens_equal, pass, error| ModelCheck {
        model: name.clone(),
        paths: paths.name(),
        check: what,
        min_cosine,
        tokens_equal,
        pass,
        error,
    };
    let mut engine_options = match EngineOptions::from_env() {
        Ok(o) => o,
        Err(e) => return vec![check("load", None, None, false, Some(e.to_string()))],
    };
    // Every model on every path loads on one device, each taking the pipelines an earlier load
    // built (a software driver spends up to a second on each).
    engine_options.context = ContextOptions {
        forced,
        shared: true,
        ..options.clone()
    };
    engine_options.max_context = Some(ids.len() + GREEDY_TOKENS + 8);
    engine_options.prefill_chunk = PROMPT_TOKENS as u32;
    engine_options.poison = true;
    let mut engine = match Engine::load(model, &engine_options) {
        Ok(e) => e,
        Err(e) => return vec![check("load", None, None, false, Some(e.to_string()))],
    };
    let logits = match engine.forced_logits(ids, oracle.prompt_tokens) {
        Ok(got) => {
            let min = got.iter().zip(want_logits).map(|(g, w)| cosine(g, w)).fold(
                f64::INFINITY,
                |a, b| if b.is_nan() { f64::NAN } else { a.min(b) },
            );
            // The cooperative-matrix prefill mat-mul rounds its inputs to f16: its own floor.
            let floor = oracle.min_cosine.min(super::min_cosine(paths));
            let ok = got.len() == want_logits.len() && min >= floor;
            check("teacher-forced logits", Some(min), None, ok, None)
        }
        Err(e) => check(
            "teacher-forced logits",
            None,
            None,
            false,
            Some(e.to_string()),
        ),
    };
    let greedy = SamplingParams::greedy();
    let tokens = match engine.generate(ids, GREEDY_TOKENS, &greedy, true, &mut |_| {}) {
        Ok(stats) => {
            let equal = &stats.tokens == want_tokens;
            check("greedy tokens", None, Some(equal), equal, None)
        }
        Err(e) => check("greedy tokens", None, None, false, Some(e.to_string())),
    };
    vec![logits, tokens]
}
