//! The prefix cache and batched decode on the GPU, through `fak::runtime::Engine`, on the tiny
//! synthetic qwen3: a prompt whose prefix is cached reuses those KV pages (and the cached tokens
//! of a partly matching page, copied) and prefills only the rest, and gives the logits and
//! greedy tokens a cold prefill gives; eviction under a small budget; sequences in flight
//! sharing pages; one decode step serving several sequences with the weights read once. On the
//! tiny synthetic qwen35 (hybrid), a hit also restores the Gated DeltaNet state snapshotted at
//! the prefix's end, into the state slot of the sequence's row, and a batched step serves
//! several sequences, each on its own slot. Caches, states and activations are NaN-poisoned at
//! load, so a page or slot the engine should have written (or kept) but did not cannot pass.

use fak::gguf::Gguf;
use fak::gpu::Forced;
use fak::model::qwen35::Hparams;
use fak::runtime::{Engine, EngineOptions, RuntimeError, SamplingParams, SeqId};
use fak_tests::model::{CUT_VOCAB, tiny_cut};
use fak_tests::{cosine, rng};
use rand::Rng;
use std::path::{Path, PathBuf};

const PAGE: usize = 16;

fn tiny_of(arch: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prefix_cache");
    tiny_cut(&dir, arch, "q8_0", 5)
}

fn tiny() -> PathBuf {
    tiny_of("qwen3")
}

fn engine(cache_mem: u64, max_seqs: usize, forced: Forced) -> Engine {
    let path = tiny();
    load(&path, cache_mem, max_seqs, forced)
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

fn load(
    path: &Path,
    cache_mem: u64,
    max_seqs: usize,
    forced: Forced,
) -> Result<Engine, RuntimeError> {
    Engine::load(path, &options(cache_mem, max_seqs, forced))
}

fn options(cache_mem: u64, max_seqs: usize, forced: Forced) -> EngineOptions {
    let mut o = EngineOptions::from_env().expect("engine options");
    o.context.shared = true;
    o.max_context = Some(256);
    o.prefill_chunk = 64;
    o.poison = true;
    o.page_size = PAGE as u32;
    o.cache_mem = cache_mem;
    o.max_seqs = max_seqs;
    o.context.forced = forced;
    // The f32 mat-vec path wherever the adapter would default to the integer one: these tests
    // hold a hit to the cold prefill's logits, and a hit's suffix and the cold prompt run
    // different step sizes, so on the integer path steps of ≤ MAX_BATCH tokens round their
    // inputs to 8 bits where the other side's longer step rounds to f16 — on the tiny random
    // Qwen3.5 that alone moved the cosine to 0.9997–0.9998 on the H200 (2026-12-04 #2), with
    // FAK_INT_DOT=0 all pass. The cache's own logic is path-independent.
    o.context.int_dot = Some(false);
    o
}

fn random_ids(seed: u64, n: usize) -> Vec<u32> {
    random_ids_in(seed, n, CUT_VOCAB)
}

fn random_ids_in(seed: u64, n: usize, n_vocab: usize) -> Vec<u32> {
    let mut r = rng(seed);
    (0..n).map(|_| r.random_range(0..n_vocab as u32)).collect()
}

fn cat(a: &[u32], b: &[u32]) -> Vec<u32> {
    [a, b].concat()
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// The gap between the largest and second-largest logit.
fn top2_margin(row: &[f32]) -> f32 {
    let mut sorted = row.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted[0] - sorted[1]
}

fn greedy(e: &mut Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    e.generate(prompt, n, &SamplingParams::greedy(), true, &mut |_| {})
        .unwrap()
        .tokens
}

/// The first-token logits of `prompt` started alone on `e`.
fn first_logits(e: &mut Engine, prompt: &[u32]) -> Vec<f32> {
    let started = e.start(prompt, 1, true).unwrap();
    e.finish(started.seq).unwrap();
    started.logits.unwrap()
}

/// Greedy tokens with a cache hit must equal the cold ones; where they differ, the cold
/// logits at the first difference say whether it is a near-tie (reported in the failure).
fn assert_same_greedy(e: &mut Engine, what: &str, prompt: &[u32], got: &[u32], cold: &[u32]) {
    if got == cold {
        return;
    }
    let i = got.iter().zip(cold).position(|(a, b)| a != b).unwrap_or(0);
    let rows = e.teacher_forced_logits(&cat(prompt, &cold[..i])).unwrap();
    let margin = top2_margin(rows.last().unwrap());
    panic!(
        "{what}: greedy tokens differ at output {i} (cold top-2 margin {margin}): {got:?} vs {cold:?}"
    );
}

/// A prompt sharing a 100-token preamble with one served before reuses its 6 whole pages (96
/// tokens) and the preamble's last 4 tokens from a copy of the 7th page, prefills exactly its
/// own 20, and its first-token logits equal the cold prefill's (cosine ≥ 0.9999: only the
/// prefill's chunking differs; the f16 path keeps the cache in f16 either way) with the same
/// greedy tokens for 12 steps; the quality path stays cold.
#[test]
fn a_cache_hit_gives_the_cold_logits_and_greedy_tokens() {
    let preamble = random_ids(1, 100);
    let (p1, p2) = (
        cat(&preamble, &random_ids(2, 20)),
        cat(&preamble, &random_ids(3, 20)),
    );
    // The fast paths, and every fallback at once (subgroup-free kernels, f32 cache): paging is
    // the same code on every path, the cache's element type and page bytes are not.
    for fallback in [false, true] {
        let forced = Forced {
            no_subgroup: fallback,
            no_f16: fallback,
            ..Forced::default()
        };
        let what = format!("{forced:?}");
        let mut e = engine(1 << 22, 1, forced);
        let first = e
            .generate(&p1, 4, &SamplingParams::greedy(), true, &mut |_| {})
            .unwrap();
        assert_eq!(first.cached_tokens, 0, "{what}: a cold engine");
        let cold_logits = e.teacher_forced_logits(&p2).unwrap().pop().unwrap();
        let cold = greedy(&mut engine(0, 1, forced), &p2, 12);

        let hit = e.start(&p2, 12, true).unwrap();
        assert_eq!(
            p2.len() - hit.cached_tokens,
            20,
            "{what}: only p2's own suffix is computed"
        );
        let logits = hit.logits.clone().unwrap();
        let c = cosine(&logits, &cold_logits);
        eprintln!(
            "{what}: hit vs cold first-token logits cosine {c:.8}, cold top-2 margin {}",
            top2_margin(&cold_logits)
        );
        assert!(c >= 0.9999, "{what}: first-token logits cosine {c}");
        let mut tokens = vec![hit.first];
        for _ in 1..12 {
            tokens.extend(e.step(&[hit.seq]).unwrap());
        }
        e.finish(hit.seq).unwrap();
        assert_eq!(
            hit.first,
            argmax(&logits),
            "{what}: GPU argmax of its own logits"
        );
        assert_same_greedy(&mut e, &what, &p2, &tokens, &cold);

        // Through generate() too, now that p2's prompt and outputs are cached.
        let again = e
            .generate(&p2, 12, &SamplingParams::greedy(), true, &mut |_| {})
            .unwrap();
        assert_eq!(
            again.cached_tokens, 119,
            "{what}: all of p2 but its last token (7 pages, 7 tokens copied from the 8th)"
        );
        assert_same_greedy(&mut e, &what, &p2, &again.tokens, &cold);
        let s = e.cache_stats();
        assert_eq!((s.lookups, s.hits), (3, 2), "{what}: {s:?}");
        assert_eq!(s.tokens_reused, 100 + 119, "{what}: {s:?}");
    }
}

/// Under a budget of 10 pages, three 65-token prompts (4 whole pages and a 1-token tail page
/// each) cannot all stay: the least recently used goes (its tail first, then its pages), a later
/// request for it computes everything again (and still gets the cold tokens), and the budget
/// holds after every request.
#[test]
fn eviction_under_memory_pressure_keeps_the_budget_and_the_tokens() {
    let forced = Forced::default();
    let probe = engine(1, 1, forced);
    let page_bytes = probe.cache_config().page_bytes;
    drop(probe);
    let budget = 10 * page_bytes;
    let mut e = engine(budget, 1, forced);
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| random_ids(10 + i, 65)).collect();
    let mut cold = Vec::new();
    for p in &prompts {
        let stats = e
            .generate(p, 1, &SamplingParams::greedy(), true, &mut |_| {})
            .unwrap();
        assert_eq!(stats.cached_tokens, 0);
        assert!(
            e.cached_bytes() <= budget,
            "{} > {budget}",
            e.cached_bytes()
        );
        cold.push(stats.tokens);
    }
    let s = e.cache_stats();
    assert_eq!((s.evictions, s.tokens_evicted), (2, 65), "{s:?}");
    // prompts[0] was evicted (least recently used), prompts[2] is cached.
    for (i, want_cached) in [(2, 64), (0, 0)] {
        let stats = e
            .generate(&prompts[i], 1, &SamplingParams::greedy(), true, &mut |_| {})
            .unwrap();
        assert_eq!(stats.cached_tokens, want_cached, "prompt {i}");
        assert_eq!(stats.tokens, cold[i], "prompt {i}");
        assert!(e.cached_bytes() <= budget);
    }
}

/// Two sequences in flight share the preamble's pages: the second starts while the first is
/// still decoding and reuses the pages the first prefilled. Then one batched decode step at a
/// time serves both (each at its own position, on its own row of pages), a third joins midway
/// and the first leaves early; every sequence's tokens equal its greedy tokens run alone and
/// cold.
#[test]
fn sequences_in_flight_share_pages_and_decode_together() {
    let forced = Forced::default();
    let preamble = random_ids(20, 70);
    let prompts = [
        cat(&preamble, &random_ids(21, 9)),
        cat(&preamble, &random_ids(22, 30)),
        random_ids(23, 17),
    ];
    let n = 10;
    let mut solo = engine(0, 1, forced);
    let cold: Vec<Vec<u32>> = prompts.iter().map(|p| greedy(&mut solo, p, n)).collect();
    drop(solo);

    let mut e = engine(1 << 22, 3, forced);
    let a = e.start(&prompts[0], n, false).unwrap();
    let b = e.start(&prompts[1], n, false).unwrap();
    assert_eq!(a.cached_tokens, 0);
    assert_eq!(
        b.cached_tokens, 64,
        "b reuses the 4 preamble pages a is still reading"
    );
    let mut out: Vec<Vec<u32>> = vec![vec![a.first], vec![b.first], Vec::new()];
    let mut live: Vec<(usize, SeqId)> = vec![(0, a.seq), (1, b.seq)];
    for step in 1.. {
        if step == 3 {
            let c = e.start(&prompts[2], n, false).unwrap();
            out[2].push(c.first);
            live.push((2, c.seq));
        }
        let ids: Vec<SeqId> = live.iter().map(|&(_, s)| s).collect();
        let tokens = e.step(&ids).unwrap();
        for (&(i, _), t) in live.iter().zip(tokens) {
            out[i].push(t);
        }
        let (done, running): (Vec<_>, Vec<_>) = live
            .into_iter()
            .partition(|&(i, _)| out[i].len() == n || (i == 0 && out[i].len() == 6));
        for (_, seq) in done {
            e.finish(seq).unwrap();
        }
        live = running;
        if live.is_empty() {
            break;
        }
    }
    assert_eq!(out[0], cold[0][..6], "a (left after 6 tokens)");
    assert_eq!(out[1], cold[1], "b (shared a's pages)");
    assert_eq!(out[2], cold[2], "c (joined midway)");
}

/// A decode step over 3 sequences records exactly the dispatches of a step over 1 (and of the
/// single-sequence greedy loop's step): each projection is one mat-vec dispatch multiplying all
/// the sequences' vectors, so every weight is read once per step, not once per sequence.
#[test]
fn a_batched_decode_step_reads_the_weights_once() {
    let mut e = engine(0, 3, Forced::default());
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|i| random_ids(30 + i, 12 + i as usize))
        .collect();
    let single = e
        .generate(&prompts[0], 3, &SamplingParams::greedy(), true, &mut |_| {})
        .unwrap()
        .decode_step_dispatches;
    let seqs: Vec<SeqId> = prompts
        .iter()
        .map(|p| e.start(p, 4, false).unwrap().seq)
        .collect();
    e.step(&seqs[..1]).unwrap();
    let one = e.last_step_dispatches();
    e.step(&seqs).unwrap();
    let three = e.last_step_dispatches();
    for s in seqs {
        e.finish(s).unwrap();
    }
    assert_eq!((one, three), (single, single), "dispatches per decode step");
}

/// Bad use of the sequence API is an error naming the problem, not a panic or a corruption.
#[test]
fn the_sequence_api_refuses_bad_use() {
    let mut e = engine(1 << 20, 2, Forced::default());
    let p = random_ids(40, 10);
    let a = e.start(&p, 2, false).unwrap();
    let err = e.step(&[a.seq, a.seq]).unwrap_err().to_string();
    assert!(err.contains("twice"), "{err}");
    e.step(&[a.seq]).unwrap();
    let err = e.step(&[a.seq]).unwrap_err().to_string();
    assert!(err.contains("no room"), "{err}");
    let b = e.start(&p, 1, false).unwrap();
    let err = e.start(&p, 1, false).unwrap_err().to_string();
    assert!(err.contains("in flight"), "{err}");
    e.finish(a.seq).unwrap();
    e.finish(b.seq).unwrap();
    let err = e.finish(b.seq).unwrap_err().to_string();
    assert!(err.contains("not a sequence in flight"), "{err}");
    let mut o = EngineOptions::from_env().unwrap();
    o.max_seqs = 9;
    let err = Engine::load(&tiny(), &o).err().unwrap().to_string();
    assert!(err.contains("9 sequences at once"), "{err}");
}

/// The hybrid model: a cached prefix is its KV pages *and* the GDN conv and recurrent state
/// snapshotted where it ends, so a hit restores that state and prefills only the rest. Snapshots
/// sit on the delta rule's 64-token chunk grid (what keeps a resumed prompt's bits those of a
/// cold one). p1 (200 tokens) leaves its 12 whole pages with a snapshot at its last grid point,
/// 192; p2 branches from it at 96, where no state was kept below, so it runs cold and leaves one
/// at the grid point under its branch, 64 (written partway through a prefill step); p3 (same
/// preamble) then resumes from 64, and its first-token logits equal the cold prefill's bit for
/// bit, with the same greedy tokens for 12 steps; p1 again resumes from 192. On the fast paths
/// and every fallback at once.
#[test]
fn a_hybrid_cache_hit_resumes_from_the_state_snapshot_as_a_cold_prefill_does() {
    let path = tiny_of("qwen35");
    let n_vocab = Hparams::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap()
        .n_vocab;
    let ids = |seed, n| random_ids_in(seed, n, n_vocab);
    let preamble = ids(1, 100);
    let [p1, p2, p3] = [2, 3, 4].map(|seed| cat(&preamble, &ids(seed, 100)));
    for fallback in [false, true] {
        let forced = Forced {
            no_subgroup: fallback,
            no_f16: fallback,
            ..Forced::default()
        };
        let what = format!("qwen35 {forced:?}");
        let cold_engine = || load(&path, 0, 1, forced).unwrap();
        let mut o = options(1 << 22, 1, forced);
        o.prefill_chunk = 128;
        let mut e = Engine::load(&path, &o).unwrap();
        // Forward steps, chunks of 128 and 3 decode steps: p1 saves its last grid point (192)
        // inside the step 128..200 (0..128, 128..200); p2 saves the grid point under its branch
        // (64) inside the step 0..128, not by a step of its own (0..128, 128..200).
        for (p, want_steps) in [(&p1, 2 + 3), (&p2, 2 + 3)] {
            let steps = e.forward_steps();
            let stats = e
                .generate(p, 4, &SamplingParams::greedy(), true, &mut |_| {})
                .unwrap();
            assert_eq!(
                stats.cached_tokens, 0,
                "{what}: no snapshot to resume from yet"
            );
            assert_eq!(
                e.forward_steps() - steps,
                want_steps,
                "{what}: forward steps"
            );
        }
        // A cold start's first-token logits (the next-token row: the head's mat-vec, as the
        // hit's; the quality path's every-row logits take the mat-mul).
        let cold_logits = first_logits(&mut cold_engine(), &p3);
        let cold = greedy(&mut cold_engine(), &p3, 12);

        let hit = e.start(&p3, 12, true).unwrap();
        assert_eq!(
            hit.cached_tokens, 64,
            "{what}: resumed at the grid point under p2's branch"
        );
        assert_eq!(
            hit.logits.as_ref().unwrap(),
            &cold_logits,
            "{what}: hit vs cold first-token logits"
        );
        let mut tokens = vec![hit.first];
        for _ in 1..12 {
            tokens.extend(e.step(&[hit.seq]).unwrap());
        }
        e.finish(hit.seq).unwrap();
        assert_same_greedy(&mut e, &what, &p3, &tokens, &cold);

        let again = e
            .generate(&p1, 12, &SamplingParams::greedy(), true, &mut |_| {})
            .unwrap();
        assert_eq!(
            again.cached_tokens, 192,
            "{what}: p1's snapshot at its last grid point"
        );
        let cold = greedy(&mut cold_engine(), &p1, 12);
        assert_same_greedy(&mut e, &what, &p1, &again.tokens, &cold);
    }
}

/// A hybrid prompt branching off a cached one where no branch was known yet resumes from the
/// nearest periodic snapshot instead of running cold (the second agent sharing a preamble): p1
/// (200 tokens) leaves snapshots every 64 tokens as it prefills (a period rounds down to the
/// delta rule's chunk grid), so p2, sharing its 100-token preamble, resumes at 64 with the cold
/// prefill's first-token logits, bit for bit, and greedy tokens.
#[test]
fn a_hybrid_branch_resumes_from_the_nearest_periodic_snapshot() {
    let path = tiny_of("qwen35");
    let n_vocab = Hparams::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap()
        .n_vocab;
    let ids = |seed, n| random_ids_in(seed, n, n_vocab);
    let preamble = ids(1, 100);
    let [p1, p2] = [2, 3].map(|seed| cat(&preamble, &ids(seed, 100)));
    let mut o = options(1 << 22, 1, Forced::default());
    o.snapshot_every = 4 * PAGE;
    let mut e = Engine::load(&path, &o).unwrap();
    e.generate(&p1, 2, &SamplingParams::greedy(), true, &mut |_| {})
        .unwrap();
    assert_eq!(
        e.cache_stats().snapshots_kept,
        4,
        "at 64 and 128 (periodic), 192 (p1's last grid point) and p1's end (201)"
    );
    let cold_logits = first_logits(&mut load(&path, 0, 1, Forced::default()).unwrap(), &p2);
    let cold = greedy(&mut load(&path, 0, 1, Forced::default()).unwrap(), &p2, 6);
    let hit = e.start(&p2, 6, true).unwrap();
    assert_eq!(
        hit.cached_tokens, 64,
        "the last snapshot inside the preamble"
    );
    assert_eq!(
        hit.logits.as_ref().unwrap(),
        &cold_logits,
        "first-token logits after the hit"
    );
    let mut tokens = vec![hit.first];
    for _ in 1..6 {
        tokens.extend(e.step(&[hit.seq]).unwrap());
    }
    e.finish(hit.seq).unwrap();
    assert_same_greedy(&mut e, "qwen35 periodic snapshot", &p2, &tokens, &cold);
}

/// Greedy tokens and the logits each came from, for `prompt` decoded alone on `e`.
fn alone(e: &mut Engine, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let s = e.start(prompt, n, true).unwrap();
    let (mut tokens, mut logits) = (vec![s.first], vec![s.logits.unwrap()]);
    for _ in 1..n {
        let (t, l) = e.step_with_logits(&[s.seq]).unwrap();
        tokens.extend(t);
        logits.extend(l);
    }
    e.finish(s.seq).unwrap();
    (tokens, logits)
}

/// The hybrid model decodes several sequences in one step, each on the GDN state slot of its
/// row: a and b (b resuming at 64 from a's snapshot, restored into slot 1) decode together, c
/// joins, a leaves, and d takes a's freed row with a prompt extending a's whole conversation,
/// so it resumes at a's end (the snapshot taken when a finished, and a's partly filled last
/// page copied) and computes only a's last token and its own 6. Every sequence's logits equal
/// its logits decoded alone on a cold engine (cosine ≥ 0.9999) with the same greedy tokens, and
/// every step records the dispatches of a one-sequence step: each weight is read once per step.
#[test]
fn hybrid_sequences_decode_together_on_their_own_state_slots() {
    let path = tiny_of("qwen35");
    let n_vocab = Hparams::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap()
        .n_vocab;
    let ids = |seed, n| random_ids_in(seed, n, n_vocab);
    let preamble = ids(1, 70);
    let mut prompts = vec![
        cat(&preamble, &ids(2, 9)),
        cat(&preamble, &ids(3, 5)),
        ids(4, 13),
    ];
    let n = 5;
    let o = options(1 << 22, 3, Forced::default());
    let mut e = Engine::load(&path, &o).unwrap();
    let a = e.start(&prompts[0], n, true).unwrap();
    let b = e.start(&prompts[1], n, true).unwrap();
    assert_eq!(
        (a.cached_tokens, b.cached_tokens),
        (0, 64),
        "b resumes at a's snapshot at its last grid point, 64"
    );
    let mut out: Vec<(Vec<u32>, Vec<Vec<f32>>)> = [a.clone(), b.clone()]
        .into_iter()
        .map(|s| (vec![s.first], vec![s.logits.unwrap()]))
        .collect();
    let mut live = vec![(0, a.seq), (1, b.seq)];
    let mut dispatches = Vec::new();
    while !live.is_empty() {
        let seqs: Vec<SeqId> = live.iter().map(|&(_, s)| s).collect();
        let (tokens, logits) = e.step_with_logits(&seqs).unwrap();
        dispatches.push((seqs.len(), e.last_step_dispatches()));
        for ((&(i, _), t), l) in live.iter().zip(tokens).zip(logits) {
            out[i].0.push(t);
            out[i].1.push(l);
        }
        // a leaves after 4 tokens, the others after n.
        let (done, running): (Vec<_>, Vec<_>) = live
            .into_iter()
            .partition(|&(i, _)| out[i].0.len() == if i == 0 { 4 } else { n });
        live = running;
        for (i, seq) in done {
            if i == 0 {
                let conversation = e.tokens(seq).unwrap().to_vec();
                e.finish(seq).unwrap();
                prompts.push(cat(&conversation, &ids(5, 6)));
                let d = e.start(&prompts[3], n, true).unwrap();
                assert_eq!(d.seq, a.seq, "d takes a's freed row (state slot 0)");
                assert_eq!(
                    prompts[3].len() - d.cached_tokens,
                    7,
                    "d computes a's last token and its own 6"
                );
                out.push((vec![d.first], vec![d.logits.unwrap()]));
                live.push((3, d.seq));
            } else {
                e.finish(seq).unwrap();
            }
        }
        if out.len() == 2 && out[0].0.len() == 3 {
            let c = e.start(&prompts[2], n, true).unwrap();
            out.push((vec![c.first], vec![c.logits.unwrap()]));
            live.push((2, c.seq));
        }
    }
    let mut solo = load(&path, 0, 1, Forced::default()).unwrap();
    let mut worst = f64::INFINITY;
    for (i, (tokens, logits)) in out.iter().enumerate() {
        let (want, want_logits) = alone(&mut solo, &prompts[i], tokens.len());
        for (t, (got, want)) in logits.iter().zip(&want_logits).enumerate() {
            let c = cosine(got, want);
            assert!(c >= 0.9999, "sequence {i} token {t}: logits cosine {c}");
            worst = worst.min(c);
        }
        assert_eq!(tokens, &want, "sequence {i}: greedy tokens");
    }
    eprintln!("qwen35 batched vs alone: worst logits cosine {worst:.9}");
    let single = solo.last_step_dispatches();
    let sizes: Vec<usize> = dispatches.iter().map(|&(n, _)| n).collect();
    assert!(sizes.contains(&1) && sizes.contains(&3), "{sizes:?}");
    for (n, d) in dispatches {
        assert_eq!(d, single, "a step of {n} sequences: dispatches");
    }
}

/// Snapshot buffers the prefix cache lets go are written to again instead of allocated anew. The
/// budget holds one 70-token prompt and its first generated token (5 pages and 2 snapshots: its
/// last grid point, 64, saved as its prefill passes it, and its end), so each new prompt evicts
/// the previous one: its prefill's snapshot needs a new buffer (nothing is evicted until it is
/// attached), its end snapshot takes an evicted one (NaN-filled as it went idle). The tree's bytes and the idle buffers stay within
/// the budget. A prompt extending the last one resumes at its end, from the state in a reused
/// buffer, with the cold prefill's first-token logits; its phases add up to no more than the
/// host time it took.
#[test]
fn snapshot_buffers_are_reused_within_the_budget() {
    let path = tiny_of("qwen35");
    let gguf = Gguf::open(&path).unwrap();
    let hparams = Hparams::from_gguf(&gguf).unwrap();
    let state_bytes = fak::model::DevicePlan::of(&gguf, None, 64)
        .unwrap()
        .state_bytes;
    let ids = |seed, n| random_ids_in(seed, n, hparams.n_vocab);
    let mut cold = load(&path, 0, 1, Forced::default()).unwrap();
    let budget = 5 * cold.cache_config().page_bytes + 2 * state_bytes;
    let mut e = load(&path, budget, 1, Forced::default()).unwrap();
    let n_prompts = 4;
    let mut last = Vec::new();
    for seed in 1..=n_prompts {
        let prompt = ids(seed, 70);
        let before = e.snapshot_stats();
        let stats = e
            .generate(&prompt, 2, &SamplingParams::greedy(), true, &mut |_| {})
            .unwrap();
        let after = e.snapshot_stats();
        let made = (after.created - before.created, after.reused - before.reused);
        let want = if seed == 1 { (2, 0) } else { (1, 1) };
        assert_eq!(
            made, want,
            "prompt {seed}: snapshot buffers (created, reused)"
        );
        assert!(
            e.cached_bytes() + after.idle_bytes <= budget,
            "prompt {seed}: {} cached + {} idle bytes over the {budget}-byte budget",
            e.cached_bytes(),
            after.idle_bytes
        );
        last = cat(&prompt, &stats.tokens[..1]);
    }
    let q = cat(&last, &ids(99, 10));
    let cold_logits = cold.teacher_forced_logits(&q).unwrap().pop().unwrap();
    let started = std::time::Instant::now();
    let hit = e.start(&q, 1, true).unwrap();
    let took = started.elapsed();
    assert_eq!(hit.cached_tokens, 71, "resumed at the last prompt's end");
    let c = cosine(hit.logits.as_ref().unwrap(), &cold_logits);
    eprintln!("qwen35 resumed from a reused snapshot buffer: logits cosine {c:.8}");
    assert!(c >= 0.9999, "first-token logits cosine {c}");
    let p = hit.phases;
    let sum = p.open + p.steps + p.snapshots + p.insert + p.wait;
    assert!(
        sum <= took && !p.wait.is_zero(),
        "{p:?} sum to {sum:?} against {took:?}"
    );
    e.finish(hit.seq).unwrap();
}

/// Runs `prompt` to its first token and finishes it: the cache keeps the prompt (its last page a
/// tail) and, on a hybrid model, the state after its last token.
fn cache_conversation(e: &mut Engine, prompt: &[u32]) {
    let started = e.start(prompt, 1, false).unwrap();
    e.finish(started.seq).unwrap();
}

/// The tokens `prompt` reused and its first-token logits, started alone on `e`.
fn resumed(e: &mut Engine, prompt: &[u32]) -> (usize, Vec<f32>) {
    let started = e.start(prompt, 1, true).unwrap();
    e.finish(started.seq).unwrap();
    (started.cached_tokens, started.logits.unwrap())
}

/// A conversation's next turn resumes where the conversation stopped, also where the tree holds
/// the tokens past that point: a stop (a 100-token prompt and 2 answer tokens, 102) and a longer
/// conversation on the same prompt (5 answer tokens: its tail page also holds the stop's last 6
/// tokens), cached before the stop or after it, or one a page longer (20 answer tokens: its
/// whole page at 96 holds them). The next turn (the stop and 7 tokens) resumes at 102 — a hybrid
/// model from the state the stop left (on 2026-12-07 #22 it resumed at 64, its last state on the
/// chunk grid: the tree dropped a state whose tokens a longer tail or a child's first page held,
/// and the state of a tail that a longer one replaced) — with the first-token logits, bit for
/// bit, of an engine whose cache holds the stop alone. A prompt running on through the longer
/// conversation's whole page (14 of its answer tokens and 7 new) resumes at 102 too on a hybrid
/// model, the last state on its path (a dense model reuses all 114 tokens it shares with it).
fn a_next_turn_resumes_where_its_conversation_stopped(arch: &str) {
    let path = tiny_of(arch);
    let hybrid = arch == "qwen35";
    let prompt = random_ids(1, 100);
    let answer = random_ids(2, 20);
    let stop = cat(&prompt, &answer[..2]);
    let next_turn = cat(&stop, &random_ids(3, 7));
    let run_on = [&prompt, &answer[..14], &random_ids(4, 7)].concat();
    // What it shares with the conversation a page longer.
    let shared = prompt.len() + 14;
    let engine = || load(&path, 1 << 22, 1, Forced::default()).unwrap();
    let mut only_stop = engine();
    cache_conversation(&mut only_stop, &stop);
    let want = resumed(&mut only_stop, &next_turn);
    assert_eq!(want.0, stop.len(), "{arch}: the stop alone in the cache");
    let longer = |n: usize| cat(&prompt, &answer[..n]);
    // Each history, and whether the prompt running on through its longer conversation's page
    // is asked too.
    let histories = [
        (
            "a longer conversation, then the stop",
            [longer(5), stop.clone()],
            false,
        ),
        (
            "the stop, then a longer conversation",
            [stop.clone(), longer(5)],
            false,
        ),
        (
            "a conversation a page longer, then the stop",
            [longer(20), stop.clone()],
            true,
        ),
    ];
    for (what, history, runs_on) in histories {
        let mut e = engine();
        for conversation in &history {
            cache_conversation(&mut e, conversation);
        }
        let (cached, logits) = resumed(&mut e, &next_turn);
        assert_eq!(
            cached,
            stop.len(),
            "{arch}, {what}: the next turn resumes at the stop"
        );
        assert_eq!(logits, want.1, "{arch}, {what}: first-token logits");
        if runs_on {
            let through = if hybrid { stop.len() } else { shared };
            let (cached, _) = resumed(&mut e, &run_on);
            assert_eq!(
                cached, through,
                "{arch}, {what}: a prompt running on past the stop"
            );
        }
    }
}

#[test]
fn dense_next_turn_resumes_where_its_conversation_stopped() {
    a_next_turn_resumes_where_its_conversation_stopped("qwen3");
}

#[test]
fn hybrid_next_turn_resumes_where_its_conversation_stopped() {
    a_next_turn_resumes_where_its_conversation_stopped("qwen35");
}
