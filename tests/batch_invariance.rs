//! A request's logits do not depend on what else the engine does: one request's prefill logits
//! and decode-step logits, bit for bit, alone and decoded in one batched step with other
//! sequences (at another row of the batch), with its prompt cut into steps of other sizes, and
//! resumed from a prefix another request's prompt left in the cache. This is what makes a
//! server's greedy answers identical under load (`fak serve`'s load test checks the tokens end to
//! end). Kernel choices follow a token's role (prompt or decode), never the step's size; a hybrid
//! model's prompt steps and snapshots sit on the delta rule's 64-token chunk grid. Run on the
//! engine's default kernel paths for the adapter, since those are what a server runs; caches and
//! activations NaN-poisoned at load.

use fak::runtime::{Engine, EngineOptions, SeqId};
use fak_tests::harness::synth_model;
use fak_tests::rng;
use rand::Rng;
use std::path::PathBuf;

/// The cut vocabulary's size (`synth --vocab cut`).
const VOCAB: u32 = 4096;
const N_OUT: usize = 5;

fn tiny(arch: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("batch_invariance");
    let args = [
        "--arch", arch, "--preset", "tiny", "--vocab", "cut", "--quant", "q8_0", "--seed", "5",
    ];
    synth_model(&dir, &format!("tiny-{arch}-q8_0-5.gguf"), &args)
}

fn engine(arch: &str, prefill_chunk: u32) -> Engine {
    engine_caching(arch, prefill_chunk, 0)
}

/// [`engine`] with a prefix cache of `cache_mem` bytes.
fn engine_caching(arch: &str, prefill_chunk: u32, cache_mem: u64) -> Engine {
    let mut o = EngineOptions::from_env().expect("engine options");
    o.cache_mem = cache_mem;
    o.max_context = Some(256);
    o.prefill_chunk = prefill_chunk;
    o.page_size = 16;
    o.max_seqs = 4;
    o.poison = true;
    Engine::load(&tiny(arch), &o).unwrap_or_else(|e| panic!("loading tiny {arch}: {e}"))
}

fn random_ids(seed: u64, n: usize) -> Vec<u32> {
    let mut r = rng(seed);
    (0..n).map(|_| r.random_range(0..VOCAB)).collect()
}

/// The prefill's logits, then each decode step's, of `prompt` decoded greedily for `N_OUT`
/// tokens, with `others` (prompts) started first and decoded in the same steps, the request at
/// row `row` of every step.
fn logits_of(e: &mut Engine, prompt: &[u32], others: &[Vec<u32>], row: usize) -> Vec<Vec<f32>> {
    let mut seqs: Vec<SeqId> = others
        .iter()
        .map(|p| e.start(p, N_OUT + 1, false).unwrap().seq)
        .collect();
    let started = e.start(prompt, N_OUT, true).unwrap();
    seqs.insert(row, started.seq);
    let mut rows = vec![started.logits.unwrap()];
    for _ in 1..N_OUT {
        let (_, logits) = e.step_with_logits(&seqs).unwrap();
        rows.push(logits[row].clone());
    }
    for s in seqs {
        e.finish(s).unwrap();
    }
    rows
}

/// Fails naming the first row (prefill 0, then decode steps) that is not bit for bit the same,
/// with how far it is.
fn assert_same_bits(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.iter().all(|v| !v.is_nan()), "{what}: NaN in row {i}");
        let differ = g
            .iter()
            .zip(w)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let worst = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert_eq!(
            differ,
            0,
            "{what}: row {i} ({}) differs in {differ} of {} logits, by up to {worst}",
            match i {
                0 => "the prefill's".to_string(),
                _ => format!("decode step {i}"),
            },
            g.len()
        );
    }
}

/// Alone and batched with 3 others (the request at row 2 of every step) on one engine.
fn alone_and_batched(arch: &str, prompt: &[u32]) -> Vec<Vec<f32>> {
    let others = [random_ids(2, 23), random_ids(3, 57), random_ids(4, 9)];
    let mut e = engine(arch, 64);
    let alone = logits_of(&mut e, prompt, &[], 0);
    let batched = logits_of(&mut e, prompt, &others, 2);
    assert_same_bits(&format!("{arch}: batched with 3 others"), &batched, &alone);
    alone
}

/// The logits of `prompt` prefilled in chunks of `chunk` tokens, alone, on a fresh engine.
fn chunked(arch: &str, prompt: &[u32], chunk: u32) -> Vec<Vec<f32>> {
    logits_of(&mut engine(arch, chunk), prompt, &[], 0)
}

/// Dense: batched decode, and the prompt cut into steps of 16 (16 + 16 + 8), 24 and 39 (its
/// last token a step of its own): prompt tokens go through the mat-mul and the prefill attention
/// however few a step holds.
#[test]
fn dense_logits_do_not_depend_on_the_batch_or_the_chunking() {
    let prompt = random_ids(1, 40);
    let alone = alone_and_batched("qwen3", &prompt);
    for chunk in [16, 24, 39] {
        let rows = chunked("qwen3", &prompt, chunk);
        assert_same_bits(
            &format!("qwen3: prompt in chunks of {chunk}"),
            &rows,
            &alone,
        );
    }
}

/// Hybrid: batched decode, and a 150-token prompt in steps of 64, 100 (a step holds whole
/// 64-token chunks of the delta rule, so 100 runs as 64) and 128 against one step of 256 (which
/// snapshots the state at 128 as it passes).
#[test]
fn hybrid_logits_do_not_depend_on_the_batch_or_the_chunking() {
    let prompt = random_ids(1, 150);
    alone_and_batched("qwen35", &random_ids(1, 40));
    let whole = chunked("qwen35", &prompt, 256);
    for chunk in [64, 100, 128] {
        let rows = chunked("qwen35", &prompt, chunk);
        assert_same_bits(
            &format!("qwen35: prompt in chunks of {chunk}"),
            &rows,
            &whole,
        );
    }
}

/// A prompt that resumes from the prefix cache (another request's prompt shared its first 100
/// tokens) gives the logits of the same prompt on an engine that never saw the other: the dense
/// model resumes at the shared pages, the hybrid at the delta-rule chunk boundary below them
/// where the third request finds a snapshot the second left.
#[test]
fn logits_do_not_depend_on_a_prefix_cache_hit() {
    let shared = random_ids(6, 100);
    let with_suffix = |seed| [shared.as_slice(), &random_ids(seed, 50)].concat();
    let (first, second, third) = (with_suffix(7), with_suffix(8), with_suffix(9));
    for arch in ["qwen3", "qwen35"] {
        let cold = logits_of(&mut engine_caching(arch, 256, 16 << 20), &third, &[], 0);
        let mut e = engine_caching(arch, 256, 16 << 20);
        logits_of(&mut e, &first, &[], 0);
        logits_of(&mut e, &second, &[], 0);
        let before = e.cache_stats();
        let warm = logits_of(&mut e, &third, &[], 0);
        let hit = e.cache_stats().tokens_reused - before.tokens_reused;
        let at_least = if arch == "qwen3" { 96 } else { 64 };
        assert!(
            hit >= at_least,
            "{arch}: the third prompt reused {hit} cached tokens, expected at least {at_least}"
        );
        assert_same_bits(&format!("{arch}: prompt after a cache hit"), &warm, &cold);
    }
}
