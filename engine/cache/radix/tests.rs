use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const PAGE: usize = 4;
const PAGE_BYTES: u64 = 100;

fn cache(n_pages: u32, budget_pages: u64) -> PrefixCache<u32> {
    PrefixCache::new(CacheConfig {
        page_size: PAGE,
        page_bytes: PAGE_BYTES,
        n_pages,
        budget: budget_pages * PAGE_BYTES,
    })
    .unwrap()
}

/// `n` tokens: `base`, base+1, … (distinct runs for distinct bases).
fn run(base: u32, n: usize) -> Vec<u32> {
    (base..base + n as u32).collect()
}

fn cat(a: &[u32], b: &[u32]) -> Vec<u32> {
    [a, b].concat()
}

/// What a sequence does with the cache: reuse the longest prefix, take pages for the rest of
/// `tokens`, insert its whole pages, and hold both locks. Returns (lookup, insert, own pages).
fn serve(c: &mut PrefixCache<u32>, tokens: &[u32]) -> (PrefixMatch, Inserted) {
    let m = c.lookup(tokens, tokens.len() - 1, false);
    let full = tokens.len() / PAGE;
    let own = c.alloc_pages(full - m.pages.len()).unwrap();
    let pages = cat(&m.pages, &own);
    let ins = c.insert(&tokens[..full * PAGE], &pages).unwrap();
    (m, ins)
}

fn finish(c: &mut PrefixCache<u32>, m: PrefixMatch, ins: Inserted) {
    c.free_pages_of_sequence(&ins.unused_pages).unwrap();
    c.release(ins.node).unwrap();
    c.release(m.node).unwrap();
    check_invariants(c);
}

/// The bookkeeping agrees with itself: bytes recomputed from the nodes, tails and snapshots,
/// every tree page in use and owned once, parent/child links both ways, refs of a node ≥ those of
/// each child, tails shorter than a page and none a prefix of another, each tail state's tokens
/// held by a cached page and no two of the same tokens.
fn check_invariants<S>(c: &PrefixCache<S>) {
    let mut bytes = 0;
    let mut pages = Vec::new();
    for (id, n) in c.live() {
        bytes += n.pages.len() as u64 * c.config.page_bytes;
        bytes += n.snapshot.as_ref().map_or(0, |s| s.bytes);
        assert_eq!(n.tokens.len(), n.pages.len() * c.config.page_size);
        pages.extend_from_slice(&n.pages);
        for (i, s) in n.tail_states.iter().enumerate() {
            bytes += s.snapshot.bytes;
            assert!((1..c.config.page_size).contains(&s.tokens.len()));
            assert!(
                c.page_holding(id, &s.tokens).is_some(),
                "a tail state no page holds"
            );
            let twice = n.tail_states[..i].iter().any(|t| t.tokens == s.tokens);
            assert!(!twice, "two tail states of the same tokens");
        }
        for (i, t) in n.tails.iter().enumerate() {
            bytes += c.config.page_bytes;
            pages.push(t.page);
            assert!((1..c.config.page_size).contains(&t.tokens.len()));
            for (j, u) in n.tails.iter().enumerate() {
                assert!(
                    i == j || !u.tokens.starts_with(&t.tokens),
                    "a tail is dominated"
                );
            }
        }
        for (key, &child) in &n.children {
            let ch = c.node(child);
            assert_eq!(ch.parent, Some(id));
            assert_eq!(&ch.tokens[..c.config.page_size], &key[..]);
            assert!(
                ch.refs <= n.refs || id == ROOT,
                "refs grow towards the root"
            );
        }
        if id != ROOT {
            assert!(!n.pages.is_empty(), "no empty nodes");
        }
    }
    assert_eq!(bytes, c.cached_bytes, "cached bytes");
    let n = pages.len();
    pages.sort_unstable();
    pages.dedup();
    assert_eq!(pages.len(), n, "a page owned twice by the tree");
    for p in pages {
        assert!(c.pages.in_use(p), "tree page {p} is marked free");
    }
}

#[test]
fn lookup_finds_the_longest_whole_page_prefix_and_splits_there() {
    let mut c = cache(16, 16);
    let a = run(0, 12);
    let (m, ins) = serve(&mut c, &a);
    assert_eq!((m.tokens, m.pages.clone()), (0, vec![]), "cold");
    finish(&mut c, m, ins);
    assert_eq!((c.node_count(), c.cached_tokens()), (1, 12));

    // Shares 10 tokens: two whole pages are shared, the node splits after them, and the first
    // two tokens of the third page are reused by copying it.
    let b = cat(&a[..10], &run(100, 6));
    let m = c.lookup(&b, b.len() - 1, false);
    assert_eq!((m.tokens, m.pages.clone(), m.matched), (10, vec![0, 1], 8));
    let copy = PartialPage {
        page: 2,
        tokens: 2,
        tail: false,
    };
    assert_eq!(m.partial, Some(copy));
    assert_eq!(c.node_count(), 2, "split after page 2");
    assert_eq!(c.refs(m.node), Some(1));
    c.release(m.node).unwrap();

    // The same prompt again: at most len − 1 tokens are reused, so 11 of 12 (the first output
    // comes from this request's own logits), 3 of them copied from the last page.
    let m = c.lookup(&a, a.len() - 1, false);
    assert_eq!((m.tokens, m.pages.clone()), (11, vec![0, 1]));
    assert_eq!(m.partial.map(|p| (p.page, p.tokens)), Some((2, 3)));
    c.release(m.node).unwrap();
    let m = c.lookup(&cat(&a, &[7]), 12, false);
    assert_eq!(
        (m.tokens, m.pages.clone(), m.partial),
        (12, vec![0, 1, 2], None)
    );
    c.release(m.node).unwrap();
    // A hybrid lookup never copies part of a child's page: the state is not kept there.
    let m = c.lookup(&b, b.len() - 1, true);
    assert_eq!((m.tokens, m.partial), (0, None));
    c.release(m.node).unwrap();
    check_invariants(&c);
}

/// A sequence that ends part-way into a page leaves that page as a tail: a later prompt
/// extending its tokens reuses all of them (copying the page), a longer tail replaces a shorter
/// one, a tail with a snapshot is where a hybrid model resumes, and tails go first under
/// pressure.
#[test]
fn a_partly_filled_last_page_is_kept_as_a_tail_and_reused_by_copy() {
    let mut c = cache(16, 16);
    let a = run(0, 10);
    let pages = c.alloc_pages(3).unwrap();
    let ins = c.insert(&a, &pages).unwrap();
    assert_eq!(
        ins.unused_pages,
        Vec::<u32>::new(),
        "the tree took the tail's page"
    );
    c.release(ins.node).unwrap();
    assert_eq!((c.node_count(), c.cached_tokens()), (1, 10));
    assert_eq!(c.cached_bytes(), 3 * PAGE_BYTES);

    // The next turn: a's 10 tokens and 5 new ones; 8 shared in place, 2 copied from page 2.
    let next = cat(&a, &run(50, 5));
    let m = c.lookup(&next, next.len() - 1, false);
    assert_eq!((m.tokens, m.pages.clone()), (10, vec![0, 1]));
    let tail = PartialPage {
        page: 2,
        tokens: 2,
        tail: true,
    };
    assert_eq!(m.partial, Some(tail));
    // It copied the tail into its own page 3 and ends at 13 tokens: page 3 holds a's tail's
    // tokens and more, so a's tail goes.
    let own = c.alloc_pages(2).unwrap();
    assert_eq!(own, vec![3, 4]);
    let ins = c.insert(&next[..13], &cat(&m.pages, &own[..2])).unwrap();
    assert_eq!(ins.unused_pages, Vec::<u32>::new());
    assert_eq!(c.free_pages(), 12, "a's tail page went back to the pool");
    c.release(ins.node).unwrap();
    c.release(m.node).unwrap();
    assert_eq!(c.stats().tokens_reused, 10);
    // A shorter tail that a cached page already holds stays the caller's.
    let pages = c.alloc_pages(3).unwrap();
    let ins = c.insert(&next[..9], &[0, 1, pages[0]]).unwrap();
    assert_eq!(ins.unused_pages, vec![pages[0]]);
    c.free_pages_of_sequence(&pages).unwrap();
    c.release(ins.node).unwrap();
    check_invariants(&c);

    // A hybrid lookup resumes on the tail only once it has a snapshot, and then on all of it.
    let longer = cat(&next[..13], &[9, 9]);
    let m = c.lookup(&longer, longer.len() - 1, true);
    assert_eq!((m.tokens, m.partial), (0, None));
    c.release(m.node).unwrap();
    let kept = c.attach_snapshot(
        &next[..13],
        Snapshot {
            state: 7,
            bytes: 50,
        },
    );
    assert_eq!(kept, Ok(true));
    let m = c.lookup(&longer, longer.len() - 1, true);
    assert_eq!((m.tokens, m.partial.map(|p| p.page)), (13, Some(4)));
    assert_eq!(c.resume_state(&m, &longer), Some(&7));
    c.release(m.node).unwrap();
    // A prompt that leaves the tail early does not resume on it (no state there).
    let early = cat(&next[..12], &[8, 8]);
    let m = c.lookup(&early, early.len() - 1, true);
    assert_eq!((m.tokens, m.partial), (0, None));
    c.release(m.node).unwrap();
    check_invariants(&c);

    // Under page pressure the tail (and its snapshot) goes before the whole pages.
    let before = c.stats();
    let got = c.alloc_pages(c.free_pages() + 1).unwrap();
    let s = c.stats();
    assert_eq!(s.evictions - before.evictions, 1);
    assert_eq!(
        (
            s.tokens_evicted - before.tokens_evicted,
            s.snapshots_evicted
        ),
        (1, 1)
    );
    assert!(got.contains(&4));
    assert_eq!(c.cached_tokens(), 12);
    check_invariants(&c);
}

/// A hybrid sequence ending after `tokens`: it reuses what it can, inserts all its tokens (the
/// last page a tail) and attaches its state after them, named by how many tokens it took in.
/// Returns the tokens it reused.
fn end_with_state(c: &mut PrefixCache<u32>, tokens: &[u32]) -> usize {
    let m = c.lookup(tokens, tokens.len() - 1, true);
    let own = c
        .alloc_pages(tokens.len().div_ceil(PAGE) - m.pages.len())
        .unwrap();
    let ins = c.insert(tokens, &cat(&m.pages, &own)).unwrap();
    let state = tokens.len() as u32;
    let kept = c.attach_snapshot(tokens, Snapshot { state, bytes: 10 });
    assert_eq!(kept, Ok(true), "the state after {state} tokens");
    let reused = m.tokens;
    finish(c, m, ins);
    reused
}

/// Where a hybrid model resumes `prompt`: the tokens it reuses, the state it restores, the page
/// it copies.
fn resume(c: &mut PrefixCache<u32>, prompt: &[u32]) -> (usize, Option<u32>, Option<PartialPage>) {
    let m = c.lookup(prompt, prompt.len() - 1, true);
    let state = c.resume_state(&m, prompt).copied();
    c.release(m.node).unwrap();
    (m.tokens, state, m.partial)
}

/// A hybrid model's state after a sequence that stopped part-way into a page is kept beside
/// whichever cached page holds those tokens, so its next turn resumes there: a longer run of the
/// same tokens ended before it (its tail holds them) or after it (its tail replaces the
/// stop's), or ran on into whole pages (a child's first page holds them). A prompt running on
/// through that child resumes at the stop, the deepest state on its path; the state goes with
/// the last page holding its tokens. (On 2026-12-07 #22 the tree dropped such a state: the
/// next turn resumed at an earlier snapshot.)
#[test]
fn a_state_inside_a_page_stays_beside_the_page_that_holds_its_tokens() {
    let long = run(0, 11);
    let stop = long[..9].to_vec();
    let next_turn = cat(&stop, &[99, 99]);
    for (what, history) in [
        ("longer first", [&long, &stop]),
        ("stop first", [&stop, &long]),
    ] {
        let mut c = cache(16, 16);
        for tokens in history {
            end_with_state(&mut c, tokens);
        }
        let (tokens, state, _) = resume(&mut c, &next_turn);
        assert_eq!(
            (tokens, state),
            (9, Some(9)),
            "{what}: the stop's next turn"
        );
        let (tokens, state, _) = resume(&mut c, &cat(&long, &[99]));
        assert_eq!((tokens, state), (11, Some(11)), "{what}: the longer one's");
        assert_eq!(c.stats().snapshots_kept, 2, "{what}");
        check_invariants(&c);
    }

    // A run of 14 (3 whole pages and a tail), then the stop, held by the whole page at 8.
    let mut c = cache(16, 16);
    let longer = run(0, 14);
    end_with_state(&mut c, &longer);
    assert_eq!(
        end_with_state(&mut c, &stop),
        0,
        "no state at or under 9 yet"
    );
    let (tokens, state, partial) = resume(&mut c, &next_turn);
    assert_eq!((tokens, state), (9, Some(9)));
    let child_page = PartialPage {
        page: 2,
        tokens: 1,
        tail: false,
    };
    assert_eq!(
        partial,
        Some(child_page),
        "copied from the child's first page"
    );
    let through = cat(&longer[..12], &[99, 99]);
    assert_eq!(
        resume(&mut c, &through).0,
        9,
        "the deepest state on the path"
    );
    // The pool asks for the child's two pages (its tail's, then its own): both states go.
    c.alloc_pages(c.free_pages() + 2).unwrap();
    assert_eq!(c.take_released(), vec![14, 9]);
    assert_eq!(resume(&mut c, &next_turn), (0, None, None));
    check_invariants(&c);
}

#[test]
fn insert_branches_share_the_common_pages_and_return_duplicates() {
    let mut c = cache(16, 16);
    let a = run(0, 12);
    let pages = c.alloc_pages(3).unwrap();
    let ins = c.insert(&a, &pages).unwrap();
    c.release(ins.node).unwrap();
    // b shares the first page, then diverges; it computed all three of its pages itself.
    let b = cat(&a[..4], &run(50, 8));
    let own = c.alloc_pages(3).unwrap();
    assert_eq!(own, vec![3, 4, 5]);
    let ins = c.insert(&b, &own).unwrap();
    assert_eq!(
        ins.unused_pages,
        vec![3],
        "page 0 already held b's first page"
    );
    assert_eq!((c.node_count(), c.cached_tokens()), (3, 20));
    c.free_pages_of_sequence(&ins.unused_pages).unwrap();
    c.release(ins.node).unwrap();
    for (prompt, pages) in [(&a, vec![0, 1, 2]), (&b, vec![0, 4, 5])] {
        let m = c.lookup(&cat(prompt, &[1]), 12, false);
        assert_eq!(m.pages, pages);
        c.release(m.node).unwrap();
    }
    assert_eq!(c.stats().tokens_inserted, 20);
    check_invariants(&c);
}

#[test]
fn locked_prefixes_survive_page_pressure_and_go_once_released() {
    let mut c = cache(6, 6);
    let a = run(0, 16);
    let (m, ins) = serve(&mut c, &a);
    assert_eq!(c.free_pages(), 2);
    // Two pages are free; a third would need the tree's pages, which the sequence still reads.
    let err = c.alloc_pages(3).unwrap_err();
    assert_eq!(
        err,
        CacheError::OutOfPages {
            needed: 3,
            free: 2,
            n_pages: 6,
            cached: 4
        }
    );
    // The pages a second sequence may reuse are the ones the first still reads.
    let m2 = c.lookup(&cat(&a, &[1]), 16, false);
    assert_eq!(m2.pages, vec![0, 1, 2, 3]);
    assert_eq!(c.refs(m2.node), Some(2), "two sequences hold the prefix");
    finish(&mut c, m, ins);
    assert!(
        c.alloc_pages(3).is_err(),
        "still held by the second sequence"
    );
    c.release(m2.node).unwrap();
    let pages = c.alloc_pages(3).unwrap();
    assert_eq!(pages.len(), 3);
    assert_eq!(c.stats().evictions, 1, "the whole unreferenced leaf went");
    assert_eq!(c.cached_tokens(), 0);
    check_invariants(&c);
}

#[test]
fn eviction_takes_the_least_recently_used_leaf_first_and_never_an_inner_node() {
    let mut c = cache(32, 6);
    let (a, b, d) = (run(0, 8), run(100, 8), run(200, 8));
    for p in [&a, &b, &d] {
        let (m, ins) = serve(&mut c, p);
        finish(&mut c, m, ins);
    }
    assert_eq!(c.cached_tokens(), 24, "6 pages: exactly the budget");
    // Touch a: now b is the least recently used.
    let m = c.lookup(&cat(&a, &[0]), 8, false);
    c.release(m.node).unwrap();
    let e = run(300, 4);
    let (m, ins) = serve(&mut c, &cat(&e, &[0]));
    finish(&mut c, m, ins);
    let held = |c: &mut PrefixCache<u32>, p: &[u32]| {
        let m = c.lookup(&cat(p, &[0]), p.len(), false);
        c.release(m.node).unwrap();
        m.tokens
    };
    assert_eq!(held(&mut c, &b), 0, "b was least recently used");
    assert_eq!(held(&mut c, &a), 8);
    assert_eq!(held(&mut c, &d), 8);
    assert_eq!(c.stats().evictions, 1);

    // An inner node (a's first page, shared with a branch) outlives its leaves.
    let mut c = cache(32, 3);
    let (m, ins) = serve(&mut c, &a);
    finish(&mut c, m, ins);
    let branch = cat(&a[..4], &run(400, 4));
    let (m, ins) = serve(&mut c, &branch);
    finish(&mut c, m, ins);
    assert_eq!(c.node_count(), 3);
    // Budget 3 pages; a fourth distinct page evicts the LRU leaf, a's tail, not the inner page.
    let (m, ins) = serve(&mut c, &run(500, 4));
    finish(&mut c, m, ins);
    assert_eq!(
        held(&mut c, &branch),
        8,
        "the inner page and the newer leaf stay"
    );
    assert_eq!(held(&mut c, &a), 4, "a's own tail page went");
    check_invariants(&c);
}

#[test]
fn snapshots_count_in_the_budget_and_mark_where_hybrid_models_resume() {
    let mut c = cache(32, 12);
    let preamble = run(0, 8);
    let a = cat(&preamble, &run(100, 8));
    let (m, ins) = serve(&mut c, &a);
    let kept = c.attach_snapshot(
        &a,
        Snapshot {
            state: 1,
            bytes: 250,
        },
    );
    assert_eq!(kept, Ok(true));
    assert_eq!(c.cached_bytes(), 4 * PAGE_BYTES + 250);
    finish(&mut c, m, ins);

    // A hybrid lookup of a prompt that branches after the preamble: the tree holds 8 tokens of
    // it but has no state there, so nothing is reused; `matched` names the branch point.
    let b = cat(&preamble, &run(200, 8));
    let m = c.lookup(&b, b.len() - 1, true);
    assert_eq!((m.tokens, m.matched), (0, 8));
    assert_eq!(
        c.node_count(),
        1,
        "no split without a snapshot to resume from"
    );
    let own = c.alloc_pages(4).unwrap();
    let ins = c.insert(&b, &own).unwrap();
    // The sequence snapshotted at the branch point while prefilling.
    let kept = c.attach_snapshot(
        &preamble,
        Snapshot {
            state: 2,
            bytes: 250,
        },
    );
    assert_eq!(kept, Ok(true));
    assert_eq!(c.cached_bytes(), 6 * PAGE_BYTES + 500);
    finish(&mut c, m, ins);
    let m = c.lookup(&cat(&preamble, &run(300, 4)), 11, true);
    assert_eq!((m.tokens, c.snapshot(m.node)), (8, Some(&2)));
    c.release(m.node).unwrap();
    let m = c.lookup(&cat(&a, &[0]), 16, true);
    assert_eq!((m.tokens, c.snapshot(m.node)), (16, Some(&1)));
    c.release(m.node).unwrap();

    // A third snapshot, at b's end (held), needs room under the 1200-byte budget: a's tail
    // (unreferenced, least recently used) goes, with its snapshot.
    let m = c.lookup(&cat(&b, &[0]), 16, false);
    let kept = c.attach_snapshot(
        &b,
        Snapshot {
            state: 3,
            bytes: 250,
        },
    );
    assert_eq!(kept, Ok(true));
    let s = c.stats();
    assert_eq!(
        (s.snapshots_kept, s.snapshots_evicted, s.evictions),
        (3, 1, 1)
    );
    assert_eq!(c.cached_bytes(), 4 * PAGE_BYTES + 500);
    // Nothing else can go now (the preamble is b's ancestor): a snapshot over budget is refused.
    let kept = c.attach_snapshot(
        &b[..12],
        Snapshot {
            state: 4,
            bytes: 301,
        },
    );
    assert_eq!(kept, Ok(false));
    assert_eq!(c.cached_bytes(), 4 * PAGE_BYTES + 500);
    c.release(m.node).unwrap();
    check_invariants(&c);
}

/// A snapshot state the tree lets go comes back once through `take_released`, for the engine to
/// write a later snapshot to: refused because its boundary has one, refused for want of room
/// (the only node is held), or evicted with its node when the pool runs short; kept ones stay.
#[test]
fn snapshot_states_the_tree_lets_go_come_back_once() {
    let snapshot = |state, bytes| Snapshot { state, bytes };
    let mut c = cache(4, 6);
    let a = run(0, 8);
    let (m, ins) = serve(&mut c, &a);
    assert_eq!(c.attach_snapshot(&a, snapshot(1, 250)), Ok(true));
    assert_eq!(
        c.attach_snapshot(&a, snapshot(2, 250)),
        Ok(false),
        "the boundary has one"
    );
    assert_eq!(
        c.attach_snapshot(&a[..PAGE], snapshot(3, 200)),
        Ok(false),
        "650 bytes over a 600-byte budget, nothing evictable"
    );
    assert_eq!(c.take_released(), vec![2, 3]);
    assert_eq!(c.take_released(), Vec::<u32>::new(), "handed back once");
    finish(&mut c, m, ins);
    assert_eq!(c.take_released(), Vec::<u32>::new(), "a fits: kept");
    let (m, ins) = serve(&mut c, &run(100, 16));
    assert_eq!(c.take_released(), vec![1], "evicted with a for b's 4 pages");
    finish(&mut c, m, ins);
}

#[test]
fn statistics_count_lookups_hits_reuse_and_evictions() {
    let mut c = cache(8, 4);
    let a = run(0, 13);
    for _ in 0..3 {
        let (m, ins) = serve(&mut c, &a);
        finish(&mut c, m, ins);
    }
    let s = c.stats();
    assert_eq!((s.lookups, s.hits, s.tokens_looked_up), (3, 2, 39));
    assert_eq!((s.tokens_reused, s.tokens_inserted), (24, 12));
    let (m, ins) = serve(&mut c, &run(100, 9));
    finish(&mut c, m, ins);
    let s = c.stats();
    assert_eq!((s.evictions, s.tokens_evicted), (1, 12));
    assert_eq!(c.cached_tokens(), 8);
}

#[test]
fn a_zero_budget_turns_the_cache_off() {
    let mut c = cache(8, 0);
    let a = run(0, 12);
    for _ in 0..2 {
        let (m, ins) = serve(&mut c, &a);
        assert_eq!(m.tokens, 0);
        assert_eq!(ins.unused_pages.len(), 3, "the tree keeps nothing");
        finish(&mut c, m, ins);
    }
    assert_eq!((c.cached_tokens(), c.free_pages()), (0, 8));
    assert_eq!(c.stats().hits, 0);
}

#[test]
fn misuse_is_an_error_not_a_corruption() {
    let mut c = cache(8, 8);
    assert!(matches!(
        c.insert(&run(0, 5), &[0]),
        Err(CacheError::Misaligned { .. })
    ));
    let pages = c.alloc_pages(1).unwrap();
    let ins = c.insert(&run(0, 4), &pages).unwrap();
    assert_eq!(
        c.free_pages_of_sequence(&[0]),
        Err(CacheError::PageInTree { page: 0 })
    );
    c.release(ins.node).unwrap();
    assert_eq!(c.release(ins.node), Err(CacheError::NotLocked));
    assert_eq!(
        c.attach_snapshot(&run(50, 4), Snapshot { state: 0, bytes: 1 }),
        Err(CacheError::NotCached { tokens: 4 })
    );
    assert!(
        PrefixCache::<u32>::new(CacheConfig {
            page_size: 0,
            page_bytes: 1,
            n_pages: 1,
            budget: 1
        })
        .is_err()
    );
}

/// Random sequences over a small alphabet (many shared prefixes) start and finish in random
/// order under a tight pool and budget. Each page records the prefix it was computed for; every
/// page a lookup hands out must hold exactly the prompt's tokens up to its end, even after
/// splits and evictions, and the pool never loses or duplicates a page.
#[test]
fn random_workload_never_hands_out_a_page_of_other_tokens() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let n_pages = 40u32;
    let mut c = cache(n_pages, 16);
    // What each page holds: the tokens from position 0 through its last slot.
    let mut content: Vec<Option<Vec<u32>>> = vec![None; n_pages as usize];
    struct Live {
        tokens: Vec<u32>,
        m: PrefixMatch,
        own: Vec<u32>,
        ins: Option<Inserted>,
    }
    let mut live: Vec<Live> = Vec::new();
    for step in 0..2000 {
        if live.len() < 4 && rng.random_bool(0.6) {
            let len = rng.random_range(1..30);
            let tokens: Vec<u32> = (0..len).map(|_| rng.random_range(0..2)).collect();
            let m = c.lookup(&tokens, len - 1, false);
            let whole = m.pages.len() * PAGE;
            assert!(m.tokens < len && m.tokens >= whole && m.tokens < whole + PAGE);
            for (i, &p) in m.pages.iter().enumerate() {
                let end = (i + 1) * PAGE;
                assert_eq!(
                    content[p as usize].as_deref(),
                    Some(&tokens[..end]),
                    "step {step}: page {p} handed out for the wrong tokens"
                );
            }
            if let Some(partial) = m.partial {
                let held = content[partial.page as usize]
                    .as_deref()
                    .unwrap_or_default();
                assert_eq!(
                    held.get(..m.tokens),
                    Some(&tokens[..m.tokens]),
                    "step {step}: page {} copied for the wrong tokens",
                    partial.page
                );
            } else {
                assert_eq!(m.tokens, whole);
            }
            let want = len.div_ceil(PAGE) - m.pages.len();
            match c.alloc_pages(want) {
                Ok(own) => {
                    for (i, &p) in own.iter().enumerate() {
                        let end = ((m.pages.len() + i + 1) * PAGE).min(len);
                        content[p as usize] = Some(tokens[..end].to_vec());
                    }
                    live.push(Live {
                        tokens,
                        m,
                        own,
                        ins: None,
                    });
                }
                Err(CacheError::OutOfPages { .. }) => c.release(m.node).unwrap(),
                Err(e) => panic!("{e}"),
            }
        } else if !live.is_empty() {
            let i = rng.random_range(0..live.len());
            let s = &mut live[i];
            match s.ins.take() {
                None => {
                    // Insert the whole pages (keeps running: pages stay in its row).
                    let full = s.tokens.len() / PAGE;
                    let pages = cat(&s.m.pages, &s.own);
                    let ins = c.insert(&s.tokens[..full * PAGE], &pages[..full]).unwrap();
                    s.ins = Some(ins);
                }
                Some(ins) => {
                    let s = live.swap_remove(i);
                    let taken: Vec<u32> = s
                        .own
                        .iter()
                        .copied()
                        .filter(|p| {
                            let full = s.tokens.len() / PAGE;
                            let idx = s.m.pages.len() + s.own.iter().position(|q| q == p).unwrap();
                            idx < full && !ins.unused_pages.contains(p)
                        })
                        .collect();
                    let mine: Vec<u32> = s.own.into_iter().filter(|p| !taken.contains(p)).collect();
                    c.free_pages_of_sequence(&mine).unwrap();
                    c.release(ins.node).unwrap();
                    c.release(s.m.node).unwrap();
                }
            }
        }
        check_invariants(&c);
        let held: usize = live.iter().map(|s| s.own.len()).sum();
        assert!(c.pages.used_count() <= c.cached_tokens() / PAGE + held);
    }
    assert!(
        c.stats().hits > 100 && c.stats().evictions > 10,
        "{:?}",
        c.stats()
    );
}

/// Random hybrid sequences over a small alphabet (many stop part-way into pages others hold)
/// one after another under a tight budget, each leaving its state at its end and, at times, at
/// its last page boundary. Every resume restores the state taken after exactly the tokens it
/// reuses, from pages that hold them, and the bookkeeping stays consistent.
#[test]
fn random_hybrid_workload_resumes_only_on_the_state_of_its_own_tokens() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let n_pages = 40u32;
    let mut c = cache(n_pages, 16);
    // What each page holds (the tokens from position 0 through its last slot), and what each
    // state took in (a state names its index).
    let mut content: Vec<Option<Vec<u32>>> = vec![None; n_pages as usize];
    let mut took: Vec<Vec<u32>> = Vec::new();
    let mut resumed_in_page = 0;
    for step in 0..3000 {
        let len = rng.random_range(2..24);
        let tokens: Vec<u32> = (0..len).map(|_| rng.random_range(0..2)).collect();
        let m = c.lookup(&tokens, len - 1, true);
        match c.resume_state(&m, &tokens) {
            Some(&state) => assert_eq!(took[state as usize], tokens[..m.tokens], "step {step}"),
            None => assert_eq!(m.tokens, 0, "step {step}: resumed without a state"),
        }
        let held = m.pages.iter().copied().chain(m.partial.map(|p| p.page));
        for (i, p) in held.enumerate() {
            let end = ((i + 1) * PAGE).min(m.tokens);
            let page = content[p as usize].as_deref().unwrap_or_default();
            assert_eq!(
                page.get(..end),
                Some(&tokens[..end]),
                "step {step}: page {p}"
            );
        }
        resumed_in_page += usize::from(m.partial.is_some());
        let own = c.alloc_pages(len.div_ceil(PAGE) - m.pages.len()).unwrap();
        for (i, &p) in own.iter().enumerate() {
            let end = ((m.pages.len() + i + 1) * PAGE).min(len);
            content[p as usize] = Some(tokens[..end].to_vec());
        }
        let ins = c.insert(&tokens, &cat(&m.pages, &own)).unwrap();
        let boundary = len / PAGE * PAGE;
        let mid = (boundary > m.tokens && rng.random_bool(0.5)).then_some(boundary);
        for at in mid.into_iter().chain([len]) {
            let state = took.len() as u32;
            took.push(tokens[..at].to_vec());
            c.attach_snapshot(&tokens[..at], Snapshot { state, bytes: 60 })
                .unwrap();
        }
        c.take_released();
        finish(&mut c, m, ins);
    }
    let s = c.stats();
    assert!(
        s.hits > 200 && s.snapshots_evicted > 1000 && resumed_in_page > 100,
        "{s:?}, {resumed_in_page} resumed inside a page"
    );
}
