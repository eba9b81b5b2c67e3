//! A request's logits do not depend on what else the engine does: one request's prefill logits
//! and decode-step logits, bit for bit, alone and decoded in one batched step with other
//! sequences (at another row of the batch); and, for the dense model, with its prompt prefilled
//! in chunks of another size as long as every chunk is above the mat-vec batch. This is what
//! makes a server's greedy answers identical under load (`fak serve`'s load test checks the tokens
//! end to end). Any chunking (a prefix-cache hit resumes a prompt mid-way) is the ignored test
//! at the end, with the two kernel choices that break it today. Run on the engine's default
//! kernel paths for the adapter, since those are what a server runs; caches and activations
//! NaN-poisoned at load.

use fak::runtime::{Engine, EngineOptions, SeqId};
use fak_tests::harness::synth_model;
use fak_tests::rng;
use rand::Rng;
use std::path::PathBuf;

const VOCAB: u32 = 151_936;
const N_OUT: usize = 5;

fn tiny(arch: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("batch_invariance");
    let args = [
        "--arch", arch, "--preset", "tiny", "--quant", "q8_0", "--seed", "5",
    ];
    synth_model(&dir, &format!("tiny-{arch}-q8_0-5.gguf"), &args)
}

fn engine(arch: &str, prefill_chunk: u32) -> Engine {
    let mut o = EngineOptions::from_env().expect("engine options");
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

/// The logits of `prompt` prefilled in chunks of `chunk` tokens, alone.
fn chunked(arch: &str, prompt: &[u32], chunk: u32) -> Vec<Vec<f32>> {
    logits_of(&mut engine(arch, chunk), prompt, &[], 0)
}

/// Dense: batched decode, and a prompt of 40 in chunks of 24 + 16 (each above the mat-vec
/// batch, so every prompt token goes through the mat-mul and the prefill attention either way).
#[test]
fn dense_logits_do_not_depend_on_the_batch_or_on_chunks_above_the_matvec_batch() {
    let prompt = random_ids(1, 40);
    let alone = alone_and_batched("qwen3", &prompt);
    let rows = chunked("qwen3", &prompt, 24);
    assert_same_bits("qwen3: prompt in chunks of 24 + 16", &rows, &alone);
}

#[test]
fn hybrid_logits_do_not_depend_on_the_batch() {
    alone_and_batched("qwen35", &random_ids(1, 40));
}

/// What the server's promise needs and the kernels do not give yet (experiments/NOTES.md, branch
/// serve): any chunking of a prompt, a prefix-cache hit's suffix included.
#[test]
#[ignore = "fails on the current kernels: (1) a prompt chunk of at most MAX_BATCH (8) tokens \
            runs every projection on the mat-vec, and a 1-token chunk the decode attention, \
            instead of the mat-mul and prefill attention (model/device.rs chooses by step size, \
            not by the token's role); (2) qwen35's chunked delta rule groups 64-token chunks \
            from each step's start, so a prompt split elsewhere sums in another order"]
fn prompt_logits_do_not_depend_on_the_chunking() {
    let prompt = random_ids(1, 40);
    for arch in ["qwen3", "qwen35"] {
        let whole = chunked(arch, &prompt, 64);
        for chunk in [16, 24, 39] {
            let rows = chunked(arch, &prompt, chunk);
            assert_same_bits(
                &format!("{arch}: prompt in chunks of {chunk}"),
                &rows,
                &whole,
            );
        }
    }
}
