//! The continuous-batching scheduler (`fak::runtime::scheduler`) on the tiny synthetic models,
//! tick by tick: a long prompt is prefilled a budget's part per tick, each part followed by a
//! decode step of the request already decoding, and both answers are the ones each request gets
//! alone; requests arriving together are prefilled in one step, each answer its own alone; a
//! prompt the budget would cut runs whole where it ends within half a budget past it; a client
//! that goes away mid-prefill frees its sequence (row and pages) for the next
//! request; requests arriving during a tick's prefill step are prefilled in that tick with the
//! budget it has left, within the budget; the step trace lists every step once and each
//! request's prompt in its portions.
//! Caches and activations NaN-poisoned at load.

use fak::runtime::scheduler::{Arrival, Client, Event, Request, Scheduler};
use fak::runtime::trace::{StepRole, TraceLine, parse_trace};
use fak::runtime::{Engine, EngineOptions, SamplingParams};
use fak_tests::model::{CUT_VOCAB, tiny_cut};
use fak_tests::rng;
use rand::Rng;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn engine(arch: &str, max_seqs: usize) -> Engine {
    engine_caching(arch, max_seqs, 0)
}

/// [`engine`] with `cache_mem` bytes of prefix cache.
fn engine_caching(arch: &str, max_seqs: usize, cache_mem: u64) -> Engine {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("scheduler");
    let path = tiny_cut(&dir, arch, "q8_0", 5);
    let mut o = EngineOptions::from_env().expect("engine options");
    o.context.shared = true;
    o.max_context = Some(256);
    o.prefill_chunk = 256;
    o.page_size = 16;
    o.max_seqs = max_seqs;
    o.cache_mem = cache_mem;
    o.poison = true;
    Engine::load(&path, &o).unwrap_or_else(|e| panic!("loading tiny {arch}: {e}"))
}

fn random_ids(seed: u64, n: usize) -> Vec<u32> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| r.random_range(0..CUT_VOCAB as u32))
        .collect()
}

/// An event as a client heard it (what the tests compare).
#[derive(Clone, Debug, PartialEq)]
enum Heard {
    Admitted,
    Started,
    Token(u32),
    Finished,
    Failed(String),
}

/// Every client's events, in the order the scheduler sent them: (client, event).
type Log = Rc<RefCell<Vec<(usize, Heard)>>>;

struct Listener {
    id: usize,
    log: Log,
    gone: Rc<Cell<bool>>,
}

impl Client for Listener {
    fn send(&mut self, event: Event) -> bool {
        let heard = match event {
            Event::Admitted => Heard::Admitted,
            Event::Started { .. } => Heard::Started,
            Event::Token { id, .. } => Heard::Token(id),
            Event::Finished(_) => Heard::Finished,
            Event::Failed(e) => Heard::Failed(e.to_string()),
        };
        self.log.borrow_mut().push((self.id, heard));
        !self.gone.get()
    }

    fn gone(&self) -> bool {
        self.gone.get()
    }
}

/// Client `id` of `log`, and the switch that makes it go away.
fn listener(id: usize, log: &Log) -> (Listener, Rc<Cell<bool>>) {
    let gone = Rc::new(Cell::new(false));
    let client = Listener {
        id,
        log: log.clone(),
        gone: gone.clone(),
    };
    (client, gone)
}

/// What client `id` heard.
fn heard(log: &Log, id: usize) -> Vec<Heard> {
    let log = log.borrow();
    log.iter()
        .filter(|(c, _)| *c == id)
        .map(|(_, h)| h.clone())
        .collect()
}

/// The tokens client `id` received.
fn tokens(log: &Log, id: usize) -> Vec<u32> {
    heard(log, id)
        .into_iter()
        .filter_map(|h| match h {
            Heard::Token(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// `request`'s answer run alone ([`Engine::generate`], greedy, end-of-generation ignored).
fn alone(e: &mut Engine, request: &Request) -> Vec<u32> {
    let greedy = SamplingParams::greedy();
    e.generate(&request.prompt, request.max_new, &greedy, true, &mut |_| {})
        .unwrap()
        .tokens
}

fn run_until_idle(s: &mut Scheduler<Listener>, e: &mut Engine) {
    for _ in 0..1000 {
        if s.is_idle() {
            return;
        }
        s.tick(e).unwrap();
    }
    panic!("the scheduler is not idle after 1000 ticks");
}

/// A request decoding while a 200-token prompt arrives with a budget of `budget` tokens per
/// tick: the long prompt takes `parts` ticks, and the decoding request receives a token between
/// every two of them (each tick takes the decode step left in flight before its part, so
/// `parts − 1` tokens between the long request's `Admitted` and `Started`). Both answers are
/// each request's alone.
fn long_prompt_interleaves_with_decode(arch: &str, budget: usize, parts: usize) {
    let mut e = engine(arch, 4);
    let short = Request::greedy(random_ids(1, 12), 40);
    let long = Request::greedy(random_ids(2, 200), 5);
    let (short_alone, long_alone) = (alone(&mut e, &short), alone(&mut e, &long));
    let log = Log::default();
    let mut s = Scheduler::new(budget);
    s.submit(short, listener(0, &log).0, Instant::now());
    for _ in 0..3 {
        s.tick(&mut e).unwrap();
    }
    // The prefill's token and two decode steps': the third step is in flight (a greedy
    // request's step is taken at the next tick, right after that tick's step is submitted).
    assert_eq!(
        tokens(&log, 0).len(),
        3,
        "{arch}: the short request decodes"
    );
    s.submit(long, listener(1, &log).0, Instant::now());
    run_until_idle(&mut s, &mut e);
    let at = |event: Heard| {
        let log = log.borrow();
        log.iter()
            .position(|h| *h == (1, event.clone()))
            .unwrap_or_else(|| panic!("{arch}: the long request never heard {event:?}"))
    };
    let (admitted, started) = (at(Heard::Admitted), at(Heard::Started));
    let between = log.borrow()[admitted..started]
        .iter()
        .filter(|(c, h)| *c == 0 && matches!(h, Heard::Token(_)))
        .count();
    assert_eq!(
        between,
        parts - 1,
        "{arch}: tokens of the decoding request while a 200-token prompt prefilled in parts of \
         {budget}"
    );
    assert_eq!(tokens(&log, 0), short_alone, "{arch}: the short request");
    assert_eq!(tokens(&log, 1), long_alone, "{arch}: the long request");
    for id in [0, 1] {
        assert_eq!(heard(&log, id).last(), Some(&Heard::Finished));
    }
}

/// Dense: five parts of 32, then the last 40 in one (they end within half a budget past it).
#[test]
fn a_long_dense_prompt_interleaves_with_decode_steps() {
    long_prompt_interleaves_with_decode("qwen3", 32, 6);
}

/// Hybrid: parts of whole 64-token delta-rule chunks (a budget of 100 cuts as 64 does), then
/// the last 136 in one (within half a budget past it).
#[test]
fn a_long_hybrid_prompt_interleaves_with_decode_steps() {
    long_prompt_interleaves_with_decode("qwen35", 100, 2);
}

/// One sequence (so the next request waits for its row): a client that goes away after the
/// first part of its 200-token prompt frees its sequence at the next tick — its KV pages go back
/// to the pool (no prefix cache here) — and the waiting request runs as it does alone.
#[test]
fn a_client_gone_mid_prefill_frees_its_sequence() {
    let mut e = engine("qwen3", 1);
    let long = Request::greedy(random_ids(2, 200), 5);
    let next = Request::greedy(random_ids(3, 20), 6);
    let next_alone = alone(&mut e, &next);
    let idle_pages = e.kv_pages_in_use();
    let log = Log::default();
    let mut s = Scheduler::new(32);
    let (client, gone) = listener(0, &log);
    s.submit(long, client, Instant::now());
    s.tick(&mut e).unwrap();
    assert_eq!(heard(&log, 0), [Heard::Admitted]);
    assert!(
        e.kv_pages_in_use() > idle_pages,
        "the long prompt holds pages"
    );
    s.submit(next, listener(1, &log).0, Instant::now());
    s.tick(&mut e).unwrap();
    assert_eq!(
        (s.running(), s.waiting()),
        (1, 1),
        "the next request waits for the row"
    );
    assert!(heard(&log, 1).is_empty());
    gone.set(true);
    run_until_idle(&mut s, &mut e);
    assert_eq!(
        heard(&log, 0),
        [Heard::Admitted],
        "the gone client heard no more"
    );
    assert_eq!(tokens(&log, 1), next_alone);
    assert_eq!(heard(&log, 1).last(), Some(&Heard::Finished));
    assert_eq!(e.kv_pages_in_use(), idle_pages);
}

/// Three requests arriving together (prompts of 30, 70 and 45 tokens) are prefilled in one step
/// of the first tick, all three started by its end (the engine's step counter: that prompt step
/// and one decode step), and each greedy answer is its answer alone; so it is when a budget of
/// 64 tokens per tick cuts their prompts across steps they share.
fn requests_arriving_together_prefill_in_one_step(arch: &str) {
    let mut e = engine(arch, 4);
    let requests: Vec<Request> = [(30, 1), (70, 2), (45, 3)]
        .into_iter()
        .map(|(n, seed)| Request::greedy(random_ids(seed, n), 6))
        .collect();
    let log = Log::default();
    let mut s = Scheduler::new(512);
    for (id, r) in requests.iter().enumerate() {
        s.submit(r.clone(), listener(id, &log).0, Instant::now());
    }
    let before = e.forward_steps();
    s.tick(&mut e).unwrap();
    assert_eq!(
        e.forward_steps() - before,
        2,
        "{arch}: the first tick's steps (the prompts together, then a decode step)"
    );
    for id in 0..3 {
        let first = heard(&log, id);
        assert_eq!(
            first[..2],
            [Heard::Admitted, Heard::Started],
            "{arch}: request {id} after the first tick"
        );
        // The prefill's token; the decode step is in flight, its tokens heard next tick.
        assert_eq!(tokens(&log, id).len(), 1, "{arch}: request {id}'s tokens");
    }
    run_until_idle(&mut s, &mut e);
    // The same requests under a budget of 64 tokens per tick: prompts cut mid-way share steps
    // with the next ones (the hybrid model's cut in whole 64-token chunks), and each answer is
    // still its own.
    let cut = Log::default();
    let mut s = Scheduler::new(64);
    for (id, r) in requests.iter().enumerate() {
        s.submit(r.clone(), listener(id, &cut).0, Instant::now());
    }
    run_until_idle(&mut s, &mut e);
    for (id, r) in requests.iter().enumerate() {
        let want = alone(&mut e, r);
        assert_eq!(tokens(&log, id), want, "{arch}: request {id}");
        assert_eq!(tokens(&cut, id), want, "{arch}: request {id}, budget 64");
        for log in [&log, &cut] {
            assert_eq!(heard(log, id).last(), Some(&Heard::Finished));
        }
    }
}

#[test]
fn dense_requests_arriving_together_prefill_in_one_step() {
    requests_arriving_together_prefill_in_one_step("qwen3");
}

#[test]
fn hybrid_requests_arriving_together_prefill_in_one_step() {
    requests_arriving_together_prefill_in_one_step("qwen35");
}

/// Four requests arriving together under a budget of `budget` tokens a tick: with prompts of
/// `whole` tokens (their sum within half a budget past it) the first tick's one prompt step
/// runs all four and each has started by its end; with `cut` (the last prompt ending more than
/// half a budget past it) the last waits for the next tick. Every answer is its own alone.
fn a_prompt_ending_soon_past_the_budget_runs_whole(
    arch: &str,
    budget: usize,
    whole: [usize; 4],
    cut: [usize; 4],
) {
    let mut e = engine(arch, 4);
    for (lens, last_started) in [(whole, true), (cut, false)] {
        let requests: Vec<Request> = (0..4)
            .map(|id| Request::greedy(random_ids(40 + id as u64, lens[id]), 4))
            .collect();
        let log = Log::default();
        let mut s = Scheduler::new(budget);
        for (id, r) in requests.iter().enumerate() {
            s.submit(r.clone(), listener(id, &log).0, Instant::now());
        }
        let before = e.forward_steps();
        s.tick(&mut e).unwrap();
        if last_started {
            assert_eq!(
                e.forward_steps() - before,
                2,
                "{arch}: prompts of {lens:?}, the first tick's steps (one prompt step, one decode)"
            );
        }
        for id in 0..4 {
            let started = heard(&log, id).contains(&Heard::Started);
            assert_eq!(
                started,
                id < 3 || last_started,
                "{arch}: prompts of {lens:?} under a budget of {budget}: request {id} started \
                 in the first tick"
            );
        }
        run_until_idle(&mut s, &mut e);
        for (id, r) in requests.iter().enumerate() {
            assert_eq!(
                tokens(&log, id),
                alone(&mut e, r),
                "{arch}: {lens:?}, request {id}"
            );
        }
    }
}

#[test]
fn a_dense_prompt_ending_soon_past_the_budget_runs_whole() {
    a_prompt_ending_soon_past_the_budget_runs_whole("qwen3", 64, [20; 4], [20, 20, 20, 60]);
}

/// Hybrid: the four prompts' rows aligned to the delta rule's 64-token chunks in one step.
#[test]
fn a_hybrid_prompt_ending_soon_past_the_budget_runs_whole() {
    a_prompt_ending_soon_past_the_budget_runs_whole("qwen35", 128, [40; 4], [40, 40, 40, 120]);
}

/// A request decoding (A, 40 tokens), then B (a prompt of `b_len`) submitted before a tick,
/// and during that tick's first prefill step (B's) two more arrive (the arrivals source gives
/// them at its first call): C, a prompt of `c_len` that fits the budget B left, and L, 200
/// tokens. C is prefilled in that tick — it starts before A's next token, where taken only
/// after the tick it would start a tick later, after A's token — and L takes its ticks with A
/// getting a token in each. From the step trace: no tick runs more prompt tokens than the
/// budget's rule allows (the budget, and at most half a budget past it,
/// `Scheduler::step_room`), and every tick that runs L's prompt also runs a decode step. Every
/// answer is its request's alone.
fn arrivals_during_a_prefill_step_join_its_tick(
    arch: &str,
    budget: usize,
    b_len: usize,
    c_len: usize,
) {
    let mut e = engine(arch, 4);
    let a = Request::greedy(random_ids(1, 12), 40);
    let b = Request::greedy(random_ids(4, b_len), 6);
    let c = Request::greedy(random_ids(5, c_len), 6);
    let long = Request::greedy(random_ids(2, 200), 5);
    let requests = [a, b, c, long];
    let answers: Vec<Vec<u32>> = requests.iter().map(|r| alone(&mut e, r)).collect();
    let log = Log::default();
    let out = Shared::default();
    let mut s = Scheduler::new(budget);
    s.trace_steps(&mut e, Box::new(out.clone()), Instant::now());
    let before = e.forward_steps();
    s.submit(requests[0].clone(), listener(0, &log).0, Instant::now());
    for _ in 0..3 {
        s.tick(&mut e).unwrap();
    }
    s.submit(requests[1].clone(), listener(1, &log).0, Instant::now());
    let mut arriving: VecDeque<Arrival<Listener>> = [2, 3]
        .into_iter()
        .map(|id| Arrival {
            request: requests[id].clone(),
            client: listener(id, &log).0,
            arrived: Instant::now(),
        })
        .collect();
    s.tick_with(&mut e, &mut || arriving.pop_front()).unwrap();
    // What the tick did not take, a server submits before the next.
    for a in arriving {
        s.submit(a.request, a.client, a.arrived);
    }
    run_until_idle(&mut s, &mut e);
    let at = |id: usize, event: Heard| {
        let log = log.borrow();
        log.iter()
            .position(|h| *h == (id, event.clone()))
            .unwrap_or_else(|| panic!("{arch}: request {id} never heard {event:?}"))
    };
    let tokens_of_a = |from: usize, to: usize| {
        log.borrow()[from..to]
            .iter()
            .filter(|(c, h)| *c == 0 && matches!(h, Heard::Token(_)))
            .count()
    };
    assert_eq!(
        tokens_of_a(at(1, Heard::Started), at(2, Heard::Started)),
        0,
        "{arch}: C, arriving during B's prefill step, starts in B's tick (before A's next token)"
    );
    let long_ticks = tokens_of_a(at(3, Heard::Admitted), at(3, Heard::Started));
    assert!(
        long_ticks >= 200 / (budget + budget / 2),
        "{arch}: A's tokens while L's 200 tokens prefilled under a budget of {budget}: \
         {long_ticks}"
    );
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let mut prompt_tokens: BTreeMap<u64, usize> = BTreeMap::new();
    let mut long_ticks = Vec::new();
    let mut decode_ticks = Vec::new();
    let mut steps = Vec::new();
    for line in parse_trace(&text).unwrap() {
        if let TraceLine::Step {
            step, tick, record, ..
        } = line
        {
            steps.push(step);
            match record.kind {
                StepRole::Prefill => {
                    *prompt_tokens.entry(tick).or_default() += record.tokens();
                    if record.portions.iter().any(|p| p.request == Some(3)) {
                        long_ticks.push(tick);
                    }
                }
                StepRole::Decode => decode_ticks.push(tick),
            }
        }
    }
    let steps_run = (e.forward_steps() - before) as u64;
    assert_eq!(
        steps,
        (1..=steps_run).collect::<Vec<_>>(),
        "{arch}: every step once"
    );
    for (tick, tokens) in &prompt_tokens {
        assert!(
            *tokens <= budget + budget / 2,
            "{arch}: tick {tick} ran {tokens} prompt tokens under a budget of {budget}"
        );
    }
    assert!(long_ticks.len() > 1, "{arch}: L's prompt takes ticks");
    for tick in &long_ticks {
        assert!(
            decode_ticks.contains(tick),
            "{arch}: tick {tick} runs L's prompt and a decode step"
        );
    }
    for (id, want) in answers.iter().enumerate() {
        assert_eq!(&tokens(&log, id), want, "{arch}: request {id}");
        assert_eq!(heard(&log, id).last(), Some(&Heard::Finished));
    }
}

/// Dense: B's 40 tokens leave 24 of a 64-token budget, C's 20 and L's first 4 run in the
/// tick's second step (a whole budget again for them would run 104 prompt tokens in the tick).
#[test]
fn dense_arrivals_during_a_prefill_step_join_its_tick() {
    arrivals_during_a_prefill_step_join_its_tick("qwen3", 64, 40, 20);
}

/// Hybrid: B's 192 tokens leave 64 of a 256-token budget (one 64-token delta-rule chunk), C's
/// 40 run in the tick's second step, L's first chunk in its third (a whole budget again for
/// them would run 424 prompt tokens in the tick).
#[test]
fn hybrid_arrivals_during_a_prefill_step_join_its_tick() {
    arrivals_during_a_prefill_step_join_its_tick("qwen35", 256, 192, 40);
}

/// Where a test's step trace goes: bytes shared with the test.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Four agents on the hybrid model with the prefix cache on, two turns each (a 128-token
/// preamble, 40 tokens of their own, a reply of 6), a budget of 128 prompt tokens a tick, the
/// step trace on: the trace parses, lists every forward step the engine ran exactly once (its
/// step counter), and for each request its prefill portions run its prompt from where the cache
/// left it to its end without gap or overlap, one prompt step per portion line; each request
/// starts once and then decodes in `max_new − 1` decode steps; a tick's counts never exceed the
/// sequences; each submit line carries the arrival its caller gave. The per-request summary
/// (`harness steps`) agrees.
#[test]
fn the_step_trace_lists_each_step_once_and_each_prompt_whole() {
    let mut e = engine_caching("qwen35", 4, 64 << 20);
    let preamble = random_ids(10, 128);
    let (n_out, agents) = (6, 4);
    let out = Shared::default();
    let mut s = Scheduler::new(128);
    let epoch = Instant::now();
    s.trace_steps(&mut e, Box::new(out.clone()), epoch);
    // Request → when it arrived, as the trace should give it.
    let mut arrival_ns = BTreeMap::new();
    let log = Log::default();
    let before = e.forward_steps();
    let mut prompts: Vec<Vec<u32>> = (0..agents)
        .map(|a| [preamble.clone(), random_ids(20 + a as u64, 40)].concat())
        .collect();
    let mut submitted = 0;
    for turn in 0..2 {
        for p in &mut prompts {
            if turn > 0 {
                p.extend(random_ids(30 + submitted as u64, n_out + 40));
            }
            let arrived = Instant::now();
            let id = s.submit(
                Request::greedy(p.clone(), n_out),
                listener(submitted, &log).0,
                arrived,
            );
            assert_eq!(id, submitted as u64, "ids follow arrival");
            arrival_ns.insert(id, (arrived - epoch).as_nanos() as u64);
            submitted += 1;
        }
        run_until_idle(&mut s, &mut e);
    }
    let steps_run = (e.forward_steps() - before) as u64;
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines = parse_trace(&text).unwrap();
    let mut prompt_len = BTreeMap::new();
    // Request → where its prompt has been prefilled to, and its decode steps.
    let mut reached: BTreeMap<u64, usize> = BTreeMap::new();
    let mut decoded: BTreeMap<u64, usize> = BTreeMap::new();
    let mut started = BTreeMap::new();
    let mut steps = Vec::new();
    for line in &lines {
        match line {
            TraceLine::Submit {
                request,
                prompt_tokens,
                t_ns,
            } => {
                assert_eq!(
                    *t_ns, arrival_ns[request],
                    "a submit is stamped at its arrival"
                );
                prompt_len.insert(*request, *prompt_tokens);
            }
            TraceLine::Admit {
                request,
                cached_tokens,
                ..
            } => {
                assert!(
                    reached.insert(*request, *cached_tokens).is_none(),
                    "admitted twice"
                );
            }
            TraceLine::Started { request, .. } => {
                assert_eq!(
                    reached[request], prompt_len[request],
                    "started before its prompt's end"
                );
                assert!(started.insert(*request, ()).is_none(), "started twice");
            }
            TraceLine::Step {
                step,
                counts,
                record,
                ..
            } => {
                steps.push(*step);
                assert!(counts.prefilling + counts.decoding <= 4, "{counts:?}");
                assert!(record.start_ns <= record.end_ns);
                for p in &record.portions {
                    let request = p.request.expect("every portion names its request");
                    match record.kind {
                        StepRole::Prefill => {
                            let at = reached
                                .get_mut(&request)
                                .expect("admitted before its steps");
                            assert_eq!(
                                p.pos, *at,
                                "request {request}'s portions follow each other"
                            );
                            *at += p.len;
                        }
                        StepRole::Decode => *decoded.entry(request).or_default() += 1,
                    }
                }
            }
        }
    }
    assert_eq!(
        steps,
        (1..=steps_run).collect::<Vec<_>>(),
        "every step once, in order"
    );
    assert_eq!(prompt_len.len(), 2 * agents);
    for (request, len) in &prompt_len {
        assert_eq!(
            reached[request], *len,
            "request {request}: its portions end its prompt"
        );
        assert_eq!(
            decoded.get(request),
            Some(&(n_out - 1)),
            "request {request}'s decode steps"
        );
    }
    assert_eq!(started.len(), 2 * agents);
    let summary = fak_harness::report::steps::summarize(&lines).unwrap();
    let cached: usize = summary.requests.iter().map(|r| r.cached_tokens).sum();
    assert!(cached > 0, "later turns and agents reuse the preamble");
    for r in &summary.requests {
        assert_eq!(
            r.computed() + r.cached_tokens,
            r.prompt_tokens,
            "request {}",
            r.request
        );
        assert!(r.ttft_ns().is_some());
    }
    for id in 0..2 * agents {
        assert_eq!(
            heard(&log, id).last(),
            Some(&Heard::Finished),
            "client {id}"
        );
    }
}
