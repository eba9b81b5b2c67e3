//! A request's logits do not depend on what else the engine does: one request's prefill logits
//! and decode-step logits, bit for bit, alone and decoded in one batched step with other
//! sequences (at another row of the batch), with its prompt cut into steps of other sizes or
//! prefilled in parts with other sequences' decode steps between them (`Engine::prefill_part`),
//! prefilled in one step together with other requests' prompts (`Engine::prefill_together`),
//! and resumed from a prefix another request's prompt (whole, or cut short mid-prefill) left in
//! the cache. This is what makes a
//! server's greedy answers identical under load (`fak serve`'s load test checks the tokens end to
//! end). Kernel choices follow a token's role (prompt or decode), never the step's size; a hybrid
//! model's prompt steps and snapshots sit on the delta rule's 64-token chunk grid. Run on the
//! engine's default kernel paths for the adapter, since those are what a server runs; caches and
//! activations NaN-poisoned at load.

use fak::runtime::engine::PromptPart;
use fak::runtime::{Engine, EngineOptions, SeqId, Started};
use fak_tests::model::{CUT_VOCAB, tiny_cut};
use fak_tests::rng;
use rand::Rng;
use std::path::PathBuf;

const N_OUT: usize = 5;

fn tiny(arch: &str) -> PathBuf {
    tiny_of(arch, "q8_0")
}

fn tiny_of(arch: &str, quant: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("batch_invariance");
    tiny_cut(&dir, arch, quant, 5)
}

fn engine(arch: &str, prefill_chunk: u32) -> Engine {
    engine_caching(arch, prefill_chunk, 0)
}

/// [`engine`] with a prefix cache of `cache_mem` bytes.
fn engine_caching(arch: &str, prefill_chunk: u32, cache_mem: u64) -> Engine {
    load(arch, &options(prefill_chunk, cache_mem))
}

fn options(prefill_chunk: u32, cache_mem: u64) -> EngineOptions {
    let mut o = EngineOptions::from_env().expect("engine options");
    o.context.shared = true;
    o.cache_mem = cache_mem;
    o.max_context = Some(256);
    o.prefill_chunk = prefill_chunk;
    o.page_size = 16;
    o.max_seqs = 4;
    o.poison = true;
    o
}

fn load(arch: &str, options: &EngineOptions) -> Engine {
    Engine::load(&tiny(arch), options).unwrap_or_else(|e| panic!("loading tiny {arch}: {e}"))
}

fn random_ids(seed: u64, n: usize) -> Vec<u32> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| r.random_range(0..CUT_VOCAB as u32))
        .collect()
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

/// [`logits_of`] with `prompt` begun ([`Engine::begin`]) and prefilled in parts of `budget`
/// tokens, `other` (started first) decoding a step between every two parts, and the two decoded
/// together after (the request at row 1); and how many parts the prefill took.
fn logits_in_parts(
    e: &mut Engine,
    prompt: &[u32],
    budget: usize,
    other: &[u32],
) -> (Vec<Vec<f32>>, usize) {
    let other = e.start(other, 32, false).unwrap().seq;
    let seq = e.begin(prompt, N_OUT, true).unwrap();
    let (started, parts) = prefill_in_parts(e, seq, budget, &mut |e| {
        e.step(&[other]).unwrap();
    });
    let seqs = [other, seq];
    let mut rows = vec![started.logits.unwrap()];
    for _ in 1..N_OUT {
        let (_, logits) = e.step_with_logits(&seqs).unwrap();
        rows.push(logits[1].clone());
    }
    for s in seqs {
        e.finish(s).unwrap();
    }
    (rows, parts)
}

/// Prefills `seq` a part of `budget` tokens at a time, calling `between` after every part but
/// the last; returns what the last part started and how many parts there were.
fn prefill_in_parts(
    e: &mut Engine,
    seq: SeqId,
    budget: usize,
    between: &mut dyn FnMut(&mut Engine),
) -> (Started, usize) {
    let mut parts = 1;
    loop {
        match e.prefill_part(seq, budget).unwrap() {
            Some(started) => return (started, parts),
            None => {
                between(e);
                parts += 1;
            }
        }
    }
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
    alone_and_batched_on(&mut engine(arch, 64), arch, prompt)
}

fn alone_and_batched_on(e: &mut Engine, what: &str, prompt: &[u32]) -> Vec<Vec<f32>> {
    let others = [random_ids(2, 23), random_ids(3, 57), random_ids(4, 9)];
    let alone = logits_of(e, prompt, &[], 0);
    let batched = logits_of(e, prompt, &others, 2);
    assert_same_bits(&format!("{what}: batched with 3 others"), &batched, &alone);
    alone
}

/// Q4_K_M files (Q4_K and Q6_K weights: the types of the integer path's wide mat-vec): batched
/// decode on both architectures. With the integer path (FAK_INT_DOT=1 on lavapipe, the default
/// on the H200) every step runs the wide mat-vec's batched form (wgsl/matvec_q8_batched.wgsl; the
/// plain wide loop under FAK_MATVEC_BATCHED=0), which must give the same bits.
#[test]
fn q4_k_m_logits_do_not_depend_on_the_batch() {
    for arch in ["qwen3", "qwen35"] {
        let path = tiny_of(arch, "q4_k_m");
        let mut e = Engine::load(&path, &options(64, 0))
            .unwrap_or_else(|e| panic!("loading tiny {arch} q4_k_m: {e}"));
        alone_and_batched_on(&mut e, &format!("{arch} q4_k_m"), &random_ids(1, 40));
    }
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

/// Past the prefill attention's key runs (512 keys from key 0, wgsl/attn_prefill_rows.wgsl): a
/// 600-token prompt as one step, in steps of 512 + 88, and after a cached prefix of 512 tokens
/// (its last 88 tokens a step of their own over 600 keys) gives the same bits. A step of few row
/// tiles over many keys splits them over several workgroups and a long one does not, so this
/// holds only because a row's keys are summed in the same runs, folded in key order, split or not
/// (experiments/NOTES.md "detsplit"; issue 21).
#[test]
fn dense_logits_past_a_key_run_do_not_depend_on_the_step() {
    let long = |prefill_chunk, cache_mem| {
        let mut o = options(prefill_chunk, cache_mem);
        o.max_context = Some(1024);
        load("qwen3", &o)
    };
    let shared = random_ids(11, 512);
    let with_suffix = |seed| [shared.as_slice(), &random_ids(seed, 88)].concat();
    let (first, prompt) = (with_suffix(12), with_suffix(13));
    let whole = logits_of(&mut long(1024, 0), &prompt, &[], 0);
    let parts = logits_of(&mut long(512, 0), &prompt, &[], 0);
    assert_same_bits("qwen3: a 600-token prompt in steps of 512", &parts, &whole);
    let mut e = long(1024, 64 << 20);
    logits_of(&mut e, &first, &[], 0);
    let before = e.cache_stats();
    let warm = logits_of(&mut e, &prompt, &[], 0);
    let hit = e.cache_stats().tokens_reused - before.tokens_reused;
    assert!(
        hit >= 496,
        "the prompt reused {hit} cached tokens, expected at least 496"
    );
    assert_same_bits(
        "qwen3: a 600-token prompt after a cached prefix",
        &warm,
        &whole,
    );
}

/// Dense: a 40-token prompt prefilled in parts of 16 (16 + 16 + 8), 24 and 39 tokens (its last
/// token a part of its own), another sequence decoding a step between every two parts, gives
/// `start`'s first token and logits bit for bit, and so does every decode step after.
#[test]
fn dense_logits_do_not_depend_on_the_prefill_parts() {
    let prompt = random_ids(1, 40);
    let mut e = engine("qwen3", 64);
    let whole = logits_of(&mut e, &prompt, &[], 0);
    for (budget, parts) in [(16, 3), (24, 2), (39, 2)] {
        let (rows, ran) = logits_in_parts(&mut e, &prompt, budget, &random_ids(2, 23));
        assert_eq!(ran, parts, "qwen3: parts of {budget} tokens");
        assert_same_bits(
            &format!("qwen3: prompt in parts of {budget}"),
            &rows,
            &whole,
        );
    }
}

/// Hybrid: a 200-token prompt in parts of 64 (64 × 3 + 8), 100 (rounded down to whole 64-token
/// delta-rule chunks while the prompt goes on, its 72-token end, off the grid, in one: 64 + 64 +
/// 72) and 128 (128 + 72) tokens, another sequence decoding between them, against one step of
/// the whole prompt.
#[test]
fn hybrid_logits_do_not_depend_on_the_prefill_parts() {
    let prompt = random_ids(1, 200);
    let mut e = engine("qwen35", 256);
    let whole = logits_of(&mut e, &prompt, &[], 0);
    for (budget, parts) in [(64, 4), (100, 3), (128, 2)] {
        let (rows, ran) = logits_in_parts(&mut e, &prompt, budget, &random_ids(2, 23));
        assert_eq!(ran, parts, "qwen35: parts of {budget} tokens");
        assert_same_bits(
            &format!("qwen35: prompt in parts of {budget}"),
            &rows,
            &whole,
        );
    }
}

/// A prompt prefilled in parts leaves its prefix in the cache as `start` does: a second request
/// extending it reuses it (the hybrid model from the snapshot its prefill took at the last
/// 64-token boundary) and gets the logits a cold engine gives.
#[test]
fn a_prompt_prefilled_in_parts_leaves_a_reusable_prefix() {
    let first = random_ids(10, 200);
    let second = [first.as_slice(), &random_ids(11, 40)].concat();
    for arch in ["qwen3", "qwen35"] {
        let cold = logits_of(&mut engine_caching(arch, 256, 16 << 20), &second, &[], 0);
        let mut e = engine_caching(arch, 256, 16 << 20);
        logits_in_parts(&mut e, &first, 64, &random_ids(2, 23));
        let before = e.cache_stats().tokens_reused;
        let warm = logits_of(&mut e, &second, &[], 0);
        let hit = e.cache_stats().tokens_reused - before;
        assert!(
            hit >= 192,
            "{arch}: the second prompt reused {hit} cached tokens, expected at least 192"
        );
        assert_same_bits(&format!("{arch}: after a prompt in parts"), &warm, &cold);
    }
}

/// A sequence finished after the first 128-token part of its 200-token prompt (its client gone)
/// leaves what it computed in the cache: for the hybrid model (snapshotting every 64 tokens) the
/// two states that part took, at 64 (as the step passed) and at 128 (where it ended) — a prompt
/// sharing the first 128 tokens resumes at 128, one sharing 100 at 64 — and each gets a cold
/// engine's logits; the dense model's pages serve the same two prompts.
#[test]
fn a_sequence_finished_mid_prefill_leaves_what_it_computed() {
    let prompt = random_ids(12, 200);
    let sharing = |n: usize, seed| [&prompt[..n], &random_ids(seed, 60)].concat();
    for arch in ["qwen3", "qwen35"] {
        let mut o = options(256, 16 << 20);
        o.snapshot_every = 64;
        let mut e = load(arch, &o);
        let seq = e.begin(&prompt, N_OUT, false).unwrap();
        assert!(e.prefill_part(seq, 128).unwrap().is_none());
        assert_eq!(e.prompt_left(seq).unwrap(), 72);
        assert!(
            e.step(&[seq]).is_err(),
            "{arch}: decoding a sequence mid-prefill"
        );
        e.finish(seq).unwrap();
        for (shared, seed, at_least) in [(128, 13, 128), (100, 14, 64)] {
            let next = sharing(shared, seed);
            let cold = logits_of(&mut engine_caching(arch, 256, 16 << 20), &next, &[], 0);
            let before = e.cache_stats().tokens_reused;
            let warm = logits_of(&mut e, &next, &[], 0);
            let hit = e.cache_stats().tokens_reused - before;
            assert!(
                hit >= at_least,
                "{arch}: a prompt sharing {shared} tokens reused {hit}, expected at least \
                 {at_least}"
            );
            let what = format!("{arch}: sharing {shared} tokens with a prompt cut short");
            assert_same_bits(&what, &warm, &cold);
        }
    }
}

/// Several requests' prompts prefilled in one step ([`Engine::prefill_together`]), on an engine
/// whose prefix cache holds a 140-token prompt: prompts of 45 and 90 tokens (not multiples of 64;
/// the hybrid model's 90-token one snapshots its state at 64 as the step passes) and one of 150
/// sharing the cached prompt's first 128 (resuming there, its last 22 computed). One forward step
/// runs all three (the engine's step counter), and each request's first logits and decode steps
/// after are those of its prompt alone on a cold engine, bit for bit.
fn prompts_prefilled_together(arch: &str) {
    let cached = random_ids(20, 140);
    let resuming = [&cached[..128], &random_ids(21, 22)].concat();
    let prompts = [random_ids(22, 45), random_ids(23, 90), resuming];
    let alone: Vec<Vec<Vec<f32>>> = {
        let mut e = engine(arch, 256);
        prompts
            .iter()
            .map(|p| logits_of(&mut e, p, &[], 0))
            .collect()
    };
    let mut e = engine_caching(arch, 256, 16 << 20);
    logits_of(&mut e, &cached, &[], 0);
    let seqs: Vec<SeqId> = prompts
        .iter()
        .map(|p| e.begin(p, N_OUT, true).unwrap())
        .collect();
    assert_eq!(
        e.prompt_left(seqs[2]).unwrap(),
        22,
        "{arch}: the third resumes at the cached prompt's 128th token"
    );
    let before = e.forward_steps();
    let parts = e.prefill_together(&seqs, usize::MAX).unwrap();
    assert_eq!(e.forward_steps() - before, 1, "{arch}: the prompts' steps");
    let ran: Vec<usize> = parts.iter().map(|p| p.tokens).collect();
    assert_eq!(ran, [45, 90, 22], "{arch}: tokens each prompt ran");
    let rows = logits_through_decode(&mut e, &seqs, parts);
    for (i, (got, want)) in rows.iter().zip(&alone).enumerate() {
        let what = format!("{arch}: prompt {i} of 3 prefilled together");
        assert_same_bits(&what, got, want);
    }
}

#[test]
fn dense_prompts_prefilled_together_give_each_its_own_logits() {
    prompts_prefilled_together("qwen3");
}

#[test]
fn hybrid_prompts_prefilled_together_give_each_its_own_logits() {
    prompts_prefilled_together("qwen35");
}

/// Each prompt's logits through its decode: those its prompt step gave (every prompt of `parts`
/// done), then [`decode_rest`]'s.
fn logits_through_decode(
    e: &mut Engine,
    seqs: &[SeqId],
    parts: Vec<PromptPart>,
) -> Vec<Vec<Vec<f32>>> {
    let mut rows: Vec<Vec<Vec<f32>>> = parts
        .into_iter()
        .map(|p| vec![p.started.expect("prompt done").logits.expect("logits")])
        .collect();
    decode_rest(e, seqs, &mut rows);
    rows
}

/// Decodes `seqs` together for the rest of their `N_OUT` tokens, each step's logits appended to
/// the sequence's list in `rows` (which holds its prefill's).
fn decode_rest(e: &mut Engine, seqs: &[SeqId], rows: &mut [Vec<Vec<f32>>]) {
    for _ in 1..N_OUT {
        let (_, logits) = e.step_with_logits(seqs).unwrap();
        for (r, l) in rows.iter_mut().zip(logits) {
            r.push(l);
        }
    }
}

/// The greedy tokens of `prompt` decoded for `N_OUT` tokens alone; the sequence then finishes,
/// leaving its prompt and answer (and, on a hybrid model, its state after them) in the cache.
fn converse(e: &mut Engine, prompt: &[u32]) -> Vec<u32> {
    let started = e.start(prompt, N_OUT, false).unwrap();
    let mut out = vec![started.first];
    for _ in 1..N_OUT {
        out.push(e.step(&[started.seq]).unwrap()[0]);
    }
    e.finish(started.seq).unwrap();
    out
}

/// A conversation's second turn resumes where its first left the cache: after the answer's
/// tokens, off the delta rule's chunk grid (a 100-token prompt and 5 decoded tokens leave the
/// hybrid model's state at 104). Prefilled together with another request's prompt, the turn's
/// step still keeps its state at the cache's next boundary (128: 24 rows into its portion; a
/// fak-serve multi-agent run on the H200 failed here, 2026-12-05), and each request gets the
/// logits it gets alone on an engine with the same history, bit for bit — also where the
/// turn's rows sit in other places of their chunks' tiles than alone unless its chunks are
/// those of the absolute grid (an H100's cooperative-matrix delta rule differed by up to 2e-3,
/// 2026-12-07 #18), and a longer turn prefilled alone in parts.
fn a_next_turn_resumes_off_the_chunk_grid_together_with_another_prompt(arch: &str) {
    let first_turn = random_ids(30, 100);
    let other = random_ids(31, 70);
    let second_turn = |answer: &[u32]| [&first_turn, answer, &random_ids(32, 41)[..]].concat();
    let (alone, answer) = {
        let mut e = engine_caching(arch, 256, 16 << 20);
        let answer = converse(&mut e, &first_turn);
        let turn = logits_of(&mut e, &second_turn(&answer), &[], 0);
        let mut cold = engine(arch, 256);
        (vec![turn, logits_of(&mut cold, &other, &[], 0)], answer)
    };
    let mut e = engine_caching(arch, 256, 16 << 20);
    assert_eq!(
        converse(&mut e, &first_turn),
        answer,
        "{arch}: the first turn"
    );
    let prompts = [second_turn(&answer), other.clone()];
    let seqs: Vec<SeqId> = prompts
        .iter()
        .map(|p| e.begin(p, N_OUT, true).unwrap())
        .collect();
    assert_eq!(
        e.prompt_left(seqs[0]).unwrap(),
        42,
        "{arch}: resumes after the answer"
    );
    let mut started: Vec<Option<Started>> = vec![None, None];
    for _ in 0..4 {
        for part in e.prefill_together(&seqs, usize::MAX).unwrap() {
            let i = seqs.iter().position(|&s| s == part.seq).unwrap();
            started[i] = part.started.or(started[i].take());
        }
    }
    let mut rows: Vec<Vec<Vec<f32>>> = started
        .into_iter()
        .map(|s| vec![s.expect("prompt done").logits.expect("logits")])
        .collect();
    decode_rest(&mut e, &seqs, &mut rows);
    for (i, (got, want)) in rows.iter().zip(&alone).enumerate() {
        assert_same_bits(&format!("{arch}: request {i} of 2"), got, want);
    }
    // Alone again, a longer turn (106 tokens left) in parts of 64: a hybrid model's first part
    // ends on the absolute chunk grid (24 tokens, to position 128), where a cut 64 tokens on
    // would split a chunk, and its last (18 tokens, which the room holds) ends the prompt off
    // the grid; the logits are the turn's in one part. (The 42 tokens of the turn above are one
    // part: the room holds them.)
    let long_turn = [&first_turn, &answer[..], &random_ids(33, 105)[..]].concat();
    let in_one = {
        let mut e = engine_caching(arch, 256, 16 << 20);
        converse(&mut e, &first_turn);
        logits_of(&mut e, &long_turn, &[], 0)
    };
    let mut e = engine_caching(arch, 256, 16 << 20);
    converse(&mut e, &first_turn);
    let (rows, parts) = logits_in_parts(&mut e, &long_turn, 64, &other);
    let want_parts = if arch == "qwen35" { 3 } else { 2 };
    assert_eq!(parts, want_parts, "{arch}: the parts of the resumed turn");
    assert_same_bits(&format!("{arch}: the turn in parts"), &rows, &in_one);
}

#[test]
fn dense_next_turn_resumes_together_with_another_prompt() {
    a_next_turn_resumes_off_the_chunk_grid_together_with_another_prompt("qwen3");
}

#[test]
fn hybrid_next_turn_resumes_off_the_chunk_grid_together_with_another_prompt() {
    a_next_turn_resumes_off_the_chunk_grid_together_with_another_prompt("qwen35");
}

/// Three conversations' second turns (first turns of 100, 90 and 110 tokens, 41 more after each
/// answer: each resumes off the chunk grid, at 104, 94 and 114) prefilled together: each has a
/// snapshot due at 128 inside its portion, and each portion takes its own in passing (a spare
/// state slot per prompt of the step), so one step runs all three whole (with one spare a step,
/// the second and third were cut at 128 and took a second step). Each turn's logits, and those of
/// a third prompt per conversation that branches at 128 (resuming from that snapshot), are the
/// bits they are where each turn ran alone.
#[test]
fn hybrid_next_turns_together_each_take_their_snapshot_in_passing() {
    let arch = "qwen35";
    let firsts = [random_ids(40, 100), random_ids(41, 90), random_ids(42, 110)];
    let second = |i: usize, answer: &[u32]| {
        [&firsts[i], answer, &random_ids(43 + i as u64, 41)[..]].concat()
    };
    let branch = |turn: &[u32], i: usize| [&turn[..128], &random_ids(46 + i as u64, 30)].concat();
    // Alone: each conversation's turns one after another on one engine.
    let mut e = engine_caching(arch, 256, 16 << 20);
    let mut answers = Vec::new();
    let mut alone = Vec::new();
    for (i, first) in firsts.iter().enumerate() {
        let answer = converse(&mut e, first);
        let turn = second(i, &answer);
        alone.push((
            logits_of(&mut e, &turn, &[], 0),
            branch_logits(&mut e, &branch(&turn, i)),
        ));
        answers.push(answer);
    }
    // Together: the first turns, then the second turns in one step.
    let mut e = engine_caching(arch, 256, 16 << 20);
    for (first, answer) in firsts.iter().zip(&answers) {
        assert_eq!(&converse(&mut e, first), answer, "the first turns");
    }
    let turns: Vec<Vec<u32>> = (0..3).map(|i| second(i, &answers[i])).collect();
    let seqs: Vec<SeqId> = turns
        .iter()
        .map(|t| e.begin(t, N_OUT, true).unwrap())
        .collect();
    let left: Vec<usize> = seqs.iter().map(|&s| e.prompt_left(s).unwrap()).collect();
    assert_eq!(left, [42, 42, 42], "each turn resumes after its answer");
    let before = e.forward_steps();
    let parts = e.prefill_together(&seqs, usize::MAX).unwrap();
    assert_eq!(e.forward_steps() - before, 1, "the turns' prompt steps");
    let ran: Vec<usize> = parts.iter().map(|p| p.tokens).collect();
    assert_eq!(ran, [42, 42, 42], "tokens each turn ran");
    let rows = logits_through_decode(&mut e, &seqs, parts);
    for s in seqs {
        e.finish(s).unwrap();
    }
    for (i, (got, (want, (want_reused, want_branch)))) in rows.iter().zip(&alone).enumerate() {
        assert_same_bits(&format!("turn {i} of 3 together"), got, want);
        let (reused, branched) = branch_logits(&mut e, &branch(&turns[i], i));
        assert_eq!(
            (reused, *want_reused),
            (128, 128),
            "conversation {i}: a branch at 128 resumes from the snapshot there"
        );
        assert_same_bits(
            &format!("conversation {i}: the branch from the snapshot the step took"),
            &branched,
            want_branch,
        );
    }
}

/// Tokens `prompt` reused from the prefix cache, and its logits ([`logits_of`] alone).
fn branch_logits(e: &mut Engine, prompt: &[u32]) -> (usize, Vec<Vec<f32>>) {
    let before = e.cache_stats().tokens_reused;
    let logits = logits_of(e, prompt, &[], 0);
    let reused = e.cache_stats().tokens_reused - before;
    (reused as usize, logits)
}

/// The greedy tokens of `prompts` decoded together for `N_OUT` tokens each: one step at a time
/// (`Engine::step`), or with two steps in flight (`Engine::submit_decode`: each fed the one
/// before's tokens where its argmax left them on the GPU).
fn decoded_together(e: &mut Engine, prompts: &[Vec<u32>], in_flight: bool) -> Vec<Vec<u32>> {
    let started: Vec<Started> = (prompts.iter())
        .map(|p| e.start(p, N_OUT, false).unwrap())
        .collect();
    let seqs: Vec<SeqId> = started.iter().map(|s| s.seq).collect();
    let mut out: Vec<Vec<u32>> = started.iter().map(|s| vec![s.first]).collect();
    let mut keep = |tokens: Vec<u32>| out.iter_mut().zip(tokens).for_each(|(o, t)| o.push(t));
    let steps = N_OUT - 1;
    match in_flight {
        false => (0..steps).for_each(|_| keep(e.step(&seqs).unwrap())),
        true => {
            e.submit_decode(&seqs).unwrap();
            for step in 1..=steps {
                if step < steps {
                    e.submit_decode(&seqs).unwrap();
                }
                keep(e.take_decode().unwrap());
            }
        }
    }
    for seq in seqs {
        e.finish(seq).unwrap();
    }
    out
}

/// Decode steps in flight give every sequence the tokens that steps one at a time give, and
/// what would disturb a step in flight is refused until it is taken: another step (of other
/// sequences, a third, or one that waits), a sequence opened or finished, a token replaced.
/// A sequence stopped at a token taken while a later step is in flight finishes after that
/// step; it then leaves the stop token's K, V (and recurrent state) in the prefix cache, and its
/// next turn resumes after the stop token — the bits of an engine that ran that later step one
/// step at a time (a cold prefill of the same text may differ in the last bits: the stop
/// token's K and V come from a decode step, README).
fn decode_steps_in_flight_give_the_tokens_of_steps_one_at_a_time(arch: &str) {
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|i| random_ids(50 + i, 100 + 7 * i as usize))
        .collect();
    let one_at_a_time = decoded_together(&mut engine(arch, 256), &prompts, false);
    let mut e = engine(arch, 256);
    assert_eq!(
        decoded_together(&mut e, &prompts, true),
        one_at_a_time,
        "{arch}: tokens with two steps in flight"
    );
    let next_turn = |in_flight| stopped_then_resumed(arch, &prompts, in_flight);
    let (cached, answer) = next_turn(true);
    assert_eq!(
        cached,
        prompts[0].len() + 2,
        "{arch}: the next turn resumes after the stop token"
    );
    assert_eq!(
        (cached, answer),
        next_turn(false),
        "{arch}: the next turn after a stop with a step in flight"
    );
}

/// Two sequences (`prompts[0]`, `prompts[1]`) run two decode steps together — in flight
/// (checking what is refused meanwhile), or one at a time — and the first stops at the first
/// step's token (the second step's is dropped); both finish. The prefix cache already holds
/// the first prompt's whole greedy answer, so the stop lies inside a path the tree holds (a
/// hybrid model's state there is kept all the same: the radix tree's tail states). Then its
/// next turn (its prompt, its two tokens, nine more) runs: the tokens it took from the cache
/// and its greedy answer, decoded as the two steps were.
fn stopped_then_resumed(arch: &str, prompts: &[Vec<u32>], in_flight: bool) -> (usize, Vec<u32>) {
    let mut e = engine_caching(arch, 256, 16 << 20);
    decoded_together(&mut e, &prompts[..1], in_flight);
    let first = e.start(&prompts[0], N_OUT, false).unwrap();
    let second = e.start(&prompts[1], N_OUT, false).unwrap();
    let seqs = [first.seq, second.seq];
    let stop = match in_flight {
        false => {
            let stop = e.step(&seqs).unwrap()[0];
            e.step(&seqs).unwrap();
            stop
        }
        true => {
            assert!(
                e.take_decode().is_err(),
                "{arch}: a take with none in flight"
            );
            e.submit_decode(&seqs).unwrap();
            assert_refused_in_flight(arch, &mut e, &seqs, &prompts[2]);
            e.submit_decode(&seqs).unwrap();
            assert!(e.submit_decode(&seqs).is_err(), "{arch}: a third step");
            let stop = e.take_decode().unwrap()[0];
            e.take_decode().unwrap();
            stop
        }
    };
    e.finish(first.seq).unwrap();
    e.finish(second.seq).unwrap();
    let next_turn = [&prompts[0], &[first.first, stop][..], &random_ids(60, 9)].concat();
    let resumed = e.start(&next_turn, N_OUT, false).unwrap();
    e.finish(resumed.seq).unwrap();
    let answer = decoded_together(&mut e, std::slice::from_ref(&next_turn), in_flight).remove(0);
    (resumed.cached_tokens, answer)
}

/// With a decode step of `seqs` in flight, what would disturb it is refused.
fn assert_refused_in_flight(arch: &str, e: &mut Engine, seqs: &[SeqId; 2], other: &[u32]) {
    let swapped = [seqs[1], seqs[0]];
    let refused: [(&str, bool); 6] = [
        (
            "a step of the sequences swapped",
            e.submit_decode(&swapped).is_err(),
        ),
        ("a step that waits", e.step(seqs).is_err()),
        ("a sequence finished", e.finish(seqs[0]).is_err()),
        ("a sequence started", e.start(other, N_OUT, false).is_err()),
        ("a token replaced", e.set_last_token(seqs[0], 1).is_err()),
        ("a step with logits", e.step_with_logits(seqs).is_err()),
    ];
    for (what, was_refused) in refused {
        assert!(was_refused, "{arch}: {what} while a step is in flight");
    }
}

#[test]
fn dense_decode_steps_in_flight_give_the_tokens_of_steps_one_at_a_time() {
    decode_steps_in_flight_give_the_tokens_of_steps_one_at_a_time("qwen3");
}

#[test]
fn hybrid_decode_steps_in_flight_give_the_tokens_of_steps_one_at_a_time() {
    decode_steps_in_flight_give_the_tokens_of_steps_one_at_a_time("qwen35");
}
