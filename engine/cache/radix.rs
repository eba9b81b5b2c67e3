//! [`PrefixCache`]: a radix tree over token ids whose nodes own KV pages (SGLang's RadixAttention
//! at page granularity, as vLLM caches only full blocks).
//!
//! - A node holds a run of whole pages: `tokens` (a multiple of the page size) and the physical
//!   `pages` their K and V live in. The path from the root to a node spells a prefix; the node's
//!   pages hold that prefix's last tokens. Children are keyed by their first page of tokens, so
//!   siblings differ in their first page and nodes split only at page boundaries.
//! - A node may carry a [`Snapshot`] of the recurrent (DeltaNet + conv) state after its last
//!   token. Hybrid models resume only at such a boundary (or at the root, from zero state): the
//!   state cannot be rebuilt from a shorter prefix.
//! - A node may also keep *tails*: a partly filled page after its end (fewer than a page of
//!   tokens, the last page of a sequence that ended there), never shared in place. A lookup whose
//!   prompt runs on into a tail, or part-way into a child's first page, reuses those tokens by
//!   copy-on-write: the engine copies the page into one the new sequence owns
//!   ([`PrefixMatch::partial`]), so a later turn computes only what is new.
//! - A node may also keep *tail states*: the snapshot after 1..page tokens past its end (where a
//!   sequence of a hybrid model ended), which is where a hybrid model resumes inside a page. A
//!   tail state is kept apart from the page holding its tokens' K and V — its own tail, or a
//!   longer tail or a child's first page that holds the same tokens — because the page serves
//!   every shorter run of its tokens and the state only its own: a sequence that stops inside
//!   tokens the tree already holds (the same prompt answered again, shorter) still leaves the
//!   state its next turn resumes from, and a longer tail or a child replacing a tail keeps its
//!   state. A tail state goes with the last cached page holding its tokens.
//! - `refs` counts the sequences in flight whose prefix runs through the node (a lock counts on
//!   the node and every ancestor). Only unreferenced leaves are evicted, least recently used
//!   first, so a page a sequence reads is never handed to another.
//! - The budget bounds the bytes the tree keeps: its pages times `page_bytes` plus its snapshots.
//!   Inserting and attaching may exceed it while sequences hold what they inserted; releasing
//!   evicts back under it. A budget of 0 turns the cache off: lookups reuse nothing and inserts
//!   keep nothing.
//! - Snapshot states the tree lets go (evicted with their node or the page holding a tail
//!   state's tokens, or refused by [`PrefixCache::attach_snapshot`]) wait in
//!   [`PrefixCache::take_released`] for the owner to reuse or drop: a state is a large device
//!   buffer that the next snapshot can be written to.

use super::CacheError;
use super::pages::PageAllocator;
use std::collections::HashMap;

/// A node of the tree (stable while the node lives, also across splits: a split node keeps its
/// end, its children, tails and snapshots; a new node takes its head).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeId(usize);

const ROOT: NodeId = NodeId(0);

/// Recurrent state after a node's last token: whatever the engine stores it in, and its size.
pub struct Snapshot<S> {
    pub state: S,
    pub bytes: u64,
}

/// The sizes the cache accounts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Token slots per page.
    pub page_size: usize,
    /// Bytes of one page over every attention layer's K and V.
    pub page_bytes: u64,
    /// Physical pages in the pool (cached and in-flight together).
    pub n_pages: u32,
    /// Most bytes the tree keeps once no sequence holds them (0: cache off).
    pub budget: u64,
}

/// Tokens two sequences share from their start.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What a cache has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    pub lookups: u64,
    /// Lookups that reused at least one token.
    pub hits: u64,
    /// Tokens of the prompts looked up.
    pub tokens_looked_up: u64,
    pub tokens_reused: u64,
    /// Tokens inserted that the tree did not hold yet.
    pub tokens_inserted: u64,
    /// Nodes evicted, and the tokens and snapshots they held.
    pub evictions: u64,
    pub tokens_evicted: u64,
    pub snapshots_kept: u64,
    pub snapshots_evicted: u64,
}

/// The longest usable cached prefix of a prompt, locked until [`PrefixCache::release`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixMatch {
    /// The locked node ending at the whole pages reused (the root when there are none).
    pub node: NodeId,
    /// Tokens to reuse: the whole pages', then those of `partial`.
    pub tokens: usize,
    /// The whole pages holding them, in order (shared in place).
    pub pages: Vec<u32>,
    /// The tokens past the whole pages that a cached page holds (a tail, or the start of a
    /// child's first page; for a hybrid model, those of a tail state): the sequence copies that
    /// page into a page of its own, which it then fills on. The source page is the tree's until
    /// the sequence's own allocation evicts it; no GPU work runs in between, so its contents are
    /// intact for the copy (and when the evicted page comes back as the copy's destination, they
    /// are already in place).
    pub partial: Option<PartialPage>,
    /// Page-aligned prompt tokens the tree holds (≥ the whole pages of `tokens`). Larger only
    /// when resuming needs a snapshot and none sits at the end of the match: a branch point,
    /// where a snapshot taken while prefilling lets the next prompt resume.
    pub matched: usize,
}

/// A cached page whose first `tokens` slots a prompt reuses by copy-on-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialPage {
    /// The physical page to copy from.
    pub page: u32,
    pub tokens: usize,
    /// Whether it is a tail (else a child node's first page).
    pub tail: bool,
}

/// What [`PrefixCache::insert`] did with a sequence's pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// The locked node ending at the inserted tokens (the root when the cache is off).
    pub node: NodeId,
    /// Pages the tree did not take because it already held their tokens (another sequence
    /// computed them, or the cache is off): still the caller's, to free when it stops reading them.
    pub unused_pages: Vec<u32>,
}

struct Node<S> {
    parent: Option<NodeId>,
    tokens: Vec<u32>,
    pages: Vec<u32>,
    children: HashMap<Box<[u32]>, NodeId>,
    /// Partly filled pages after the node's end, none a prefix of another.
    tails: Vec<Tail>,
    refs: u32,
    last_use: u64,
    /// The state after the node's last token.
    snapshot: Option<Snapshot<S>>,
    /// States after 1..page tokens past the node's end, each run of tokens held by one of its
    /// tails or its child's first page; no two of the same tokens.
    tail_states: Vec<TailState<S>>,
}

/// 1..page tokens after a node whose K and V fill the first slots of `page`; only ever copied,
/// so evictable whenever the budget or the pool asks (least recently used first).
struct Tail {
    tokens: Vec<u32>,
    page: u32,
    last_use: u64,
}

/// The recurrent state after `tokens` (1..page of them) past a node's end.
struct TailState<S> {
    tokens: Vec<u32>,
    snapshot: Snapshot<S>,
}

/// What eviction may take: an unreferenced leaf node without tails, or any tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victim {
    Node(NodeId),
    Tail(NodeId, usize),
}

impl<S> Node<S> {
    fn new(parent: Option<NodeId>, tokens: Vec<u32>, pages: Vec<u32>, last_use: u64) -> Self {
        Node {
            parent,
            tokens,
            pages,
            children: HashMap::new(),
            tails: Vec::new(),
            refs: 0,
            last_use,
            snapshot: None,
            tail_states: Vec::new(),
        }
    }
}

pub struct PrefixCache<S> {
    config: CacheConfig,
    pages: PageAllocator,
    /// Arena of nodes; `None` marks a free slot (listed in `free_ids`).
    nodes: Vec<Option<Node<S>>>,
    free_ids: Vec<usize>,
    /// Advances on every lookup and insert: the LRU clock.
    clock: u64,
    /// Pages the tree owns times `page_bytes`, plus its snapshots' bytes.
    cached_bytes: u64,
    /// Snapshot states the tree no longer holds, not yet taken back by the owner.
    released: Vec<S>,
    stats: CacheStats,
}

impl<S> PrefixCache<S> {
    pub fn new(config: CacheConfig) -> Result<Self, CacheError> {
        if config.page_size == 0 || config.page_bytes == 0 {
            return Err(CacheError::Config(format!(
                "pages of {} tokens and {} bytes: both must be positive",
                config.page_size, config.page_bytes
            )));
        }
        Ok(PrefixCache {
            config,
            pages: PageAllocator::new(config.n_pages),
            nodes: vec![Some(Node::new(None, Vec::new(), Vec::new(), 0))],
            free_ids: Vec::new(),
            clock: 0,
            cached_bytes: 0,
            released: Vec::new(),
            stats: CacheStats::default(),
        })
    }

    pub fn config(&self) -> CacheConfig {
        self.config
    }

    pub fn enabled(&self) -> bool {
        self.config.budget > 0
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Bytes the tree holds (pages and snapshots).
    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    /// The snapshot states the tree let go since the last call (evicted or refused), for the
    /// owner to reuse. Work already submitted may still read or write them; whatever the owner
    /// submits later runs after it, in queue order.
    pub fn take_released(&mut self) -> Vec<S> {
        std::mem::take(&mut self.released)
    }

    /// Tokens the tree holds (tails included).
    pub fn cached_tokens(&self) -> usize {
        self.live()
            .map(|(_, n)| n.tokens.len() + n.tails.iter().map(|t| t.tokens.len()).sum::<usize>())
            .sum()
    }

    /// Nodes besides the root.
    pub fn node_count(&self) -> usize {
        self.live().count() - 1
    }

    pub fn free_pages(&self) -> usize {
        self.pages.free_count()
    }

    /// How many sequences hold `node` (directly or through a descendant).
    pub fn refs(&self, node: NodeId) -> Option<u32> {
        self.get(node).map(|n| n.refs)
    }

    /// The snapshot at the end of `node`, if it has one.
    pub fn snapshot(&self, node: NodeId) -> Option<&S> {
        self.get(node)?.snapshot.as_ref().map(|s| &s.state)
    }

    /// The snapshot a sequence resumes from after `m`, a match of `prompt` (the state after its
    /// `m.tokens` tokens): its node's tail state, when it ends inside a page, else its node's.
    pub fn resume_state(&self, m: &PrefixMatch, prompt: &[u32]) -> Option<&S> {
        let node = self.get(m.node)?;
        let snapshot = match m.partial {
            Some(p) => {
                let tokens = &prompt[m.tokens - p.tokens..m.tokens];
                let state = node.tail_states.iter().find(|s| s.tokens == tokens);
                state.map(|s| &s.snapshot)
            }
            None => node.snapshot.as_ref(),
        };
        snapshot.map(|s| &s.state)
    }

    /// The longest cached prefix of `tokens` that a sequence may reuse, locked: whole pages, then
    /// the first tokens of a cached page to copy ([`PrefixMatch::partial`]), at most `limit`
    /// tokens (a request keeps at least its last prompt token to compute, so its first output
    /// comes from logits of its own), ending at a snapshot when `need_snapshot` (a node's, or a
    /// tail state's: the deepest on the prompt's path).
    pub fn lookup(&mut self, tokens: &[u32], limit: usize, need_snapshot: bool) -> PrefixMatch {
        let page = self.config.page_size;
        self.clock += 1;
        self.stats.lookups += 1;
        self.stats.tokens_looked_up += tokens.len() as u64;
        let limit = match self.enabled() {
            true => limit.min(tokens.len()),
            false => 0,
        };
        let cap = limit / page * page;
        let (mut node, mut at) = (ROOT, 0);
        let mut usable = (ROOT, 0);
        // A hybrid model's deepest tail state on the path: its node, the node's end, the page.
        let mut in_page = None;
        let mut matched = 0;
        loop {
            if need_snapshot && let Some(found) = self.state_page(node, &tokens[at..limit]) {
                in_page = Some((node, at, found));
            }
            if at == cap {
                break;
            }
            let Some(child) = self.child(node, &tokens[at..at + page]) else {
                break;
            };
            let len = self.node(child).pages.len();
            let k = self.common_pages(child, &tokens[at..cap]);
            matched = at + k * page;
            if k < len {
                // The match ends inside `child`: a dense model reuses up to there, so the node
                // is split to give the lock a boundary; a hybrid model has no state there.
                if !need_snapshot {
                    usable = (self.split(child, k), matched);
                }
                break;
            }
            (node, at) = (child, matched);
            if !need_snapshot || self.node(child).snapshot.is_some() {
                usable = (child, at);
            }
        }
        // A tail state lies past its node's end: deeper than a snapshot at or above that node,
        // short of any below it.
        let (node, whole, partial) = match in_page {
            Some((node, at, (p, tail))) if at >= usable.1 => {
                if let Some(i) = tail {
                    self.touch_tail(node, i);
                }
                (node, at, Some(p))
            }
            _ if need_snapshot || usable.1 == limit => (usable.0, usable.1, None),
            _ => {
                let partial = self.partial_page(usable.0, &tokens[usable.1..limit]);
                (usable.0, usable.1, partial)
            }
        };
        let reused = whole + partial.map_or(0, |p| p.tokens);
        self.lock(node);
        if reused > 0 {
            self.stats.hits += 1;
            self.stats.tokens_reused += reused as u64;
        }
        PrefixMatch {
            node,
            tokens: reused,
            pages: self.path_pages(node),
            matched,
            partial,
        }
    }

    /// The cached page after `node` sharing the most leading tokens with `rest` (at least one):
    /// one of its tails, or the first page of one of its children.
    fn partial_page(&mut self, node: NodeId, rest: &[u32]) -> Option<PartialPage> {
        let page = self.config.page_size;
        let n = self.node(node);
        let tails = (n.tails.iter().enumerate())
            .map(|(i, t)| (common_prefix(&t.tokens, rest), Some(i), t.page));
        let children = n.children.values().map(|&c| {
            (
                common_prefix(&self.node(c).tokens[..page], rest),
                None,
                self.node(c).pages[0],
            )
        });
        let (tokens, tail, src) = tails
            .chain(children)
            .max_by_key(|&(k, tail, src)| (k, tail.is_some(), src))?;
        if tokens == 0 {
            return None;
        }
        if let Some(i) = tail {
            self.touch_tail(node, i);
        }
        Some(PartialPage {
            page: src,
            tokens,
            tail: tail.is_some(),
        })
    }

    /// The longest tail state of `node` that `rest` starts with, as the page to copy its
    /// tokens from (a hybrid model resumes there, restoring the state) and, when that page is a
    /// tail, which one (touched only if the lookup resumes there).
    fn state_page(&self, node: NodeId, rest: &[u32]) -> Option<(PartialPage, Option<usize>)> {
        let states = self.node(node).tail_states.iter();
        let ours = states.filter(|s| rest.starts_with(&s.tokens));
        let tokens = ours.map(|s| s.tokens.len()).max()?;
        let (page, tail) = self
            .page_holding(node, &rest[..tokens])
            .expect("a tail state goes with the last page holding its tokens");
        let found = PartialPage {
            page,
            tokens,
            tail: tail.is_some(),
        };
        Some((found, tail))
    }

    /// The cached page holding `tokens` (fewer than a page) right after `node`'s end: one of its
    /// tails (and which), else the lowest first page of a child that starts with them.
    fn page_holding(&self, node: NodeId, tokens: &[u32]) -> Option<(u32, Option<usize>)> {
        let n = self.node(node);
        if let Some(i) = n.tails.iter().position(|t| t.tokens.starts_with(tokens)) {
            return Some((n.tails[i].page, Some(i)));
        }
        let children = n.children.iter();
        let firsts = children.filter(|(key, _)| key.starts_with(tokens));
        let page = firsts.map(|(_, &c)| self.node(c).pages[0]).min()?;
        Some((page, None))
    }

    fn touch_tail(&mut self, node: NodeId, i: usize) {
        let clock = self.clock;
        self.node_mut(node).tails[i].last_use = clock;
    }

    /// A match of nothing, for a sequence that computes its whole prompt (the quality path):
    /// the root, locked like any match, and no statistics.
    pub fn cold(&mut self) -> PrefixMatch {
        self.lock(ROOT);
        PrefixMatch {
            node: ROOT,
            tokens: 0,
            pages: Vec::new(),
            matched: 0,
            partial: None,
        }
    }

    /// Adds a sequence's computed prefix to the tree: `tokens` whose K and V sit in `pages`, the
    /// last page possibly partly filled (kept as a tail: only a sequence that writes no more into
    /// it may insert one). Pages of tokens the tree already holds stay the caller's
    /// (`unused_pages`); the rest the tree takes. The node ending at the whole pages comes back
    /// locked (release it, and the lock of the sequence's lookup, when the sequence is done).
    pub fn insert(&mut self, tokens: &[u32], pages: &[u32]) -> Result<Inserted, CacheError> {
        let page = self.config.page_size;
        let full = tokens.len() / page;
        let rem = tokens.len() % page;
        if pages.len() != full + usize::from(rem > 0) {
            return Err(CacheError::Misaligned {
                tokens: tokens.len(),
                pages: pages.len(),
                page_size: page,
            });
        }
        if !self.enabled() {
            self.lock(ROOT);
            return Ok(Inserted {
                node: ROOT,
                unused_pages: pages.to_vec(),
            });
        }
        self.clock += 1;
        let (mut node, mut i) = (ROOT, 0);
        let mut unused_pages = Vec::new();
        let (tail, pages) = match rem > 0 {
            true => (Some((&tokens[full * page..], pages[full])), &pages[..full]),
            false => (None, pages),
        };
        let tokens = &tokens[..full * page];
        while i < pages.len() {
            let at = i * page;
            match self.child(node, &tokens[at..at + page]) {
                Some(child) => {
                    let k = self.common_pages(child, &tokens[at..]);
                    let held = &self.node(child).pages[..k];
                    for (&held, &ours) in held.iter().zip(&pages[i..i + k]) {
                        if held != ours {
                            unused_pages.push(ours);
                        }
                    }
                    node = match k < self.node(child).pages.len() {
                        true => self.split(child, k),
                        false => child,
                    };
                    i += k;
                }
                None => {
                    node = self.add_leaf(node, tokens[at..].to_vec(), pages[i..].to_vec());
                    self.stats.tokens_inserted += (tokens.len() - at) as u64;
                    i = pages.len();
                }
            }
        }
        if let Some((tail, page)) = tail
            && !self.add_tail(node, tail, page)
        {
            unused_pages.push(page);
        }
        self.lock(node);
        Ok(Inserted { node, unused_pages })
    }

    /// Keeps `tokens` (less than a page) in `page` as a tail of `node`, unless a tail or child
    /// of it already holds them; a tail they extend goes (its page back to the pool). Returns
    /// whether the tree took `page`.
    fn add_tail(&mut self, node: NodeId, tokens: &[u32], page: u32) -> bool {
        if self.page_holding(node, tokens).is_some() {
            return false;
        }
        let last_use = self.clock;
        self.node_mut(node).tails.push(Tail {
            tokens: tokens.to_vec(),
            page,
            last_use,
        });
        self.cached_bytes += self.config.page_bytes;
        self.stats.tokens_inserted += tokens.len() as u64;
        self.evict_tails_held_by(node, tokens);
        true
    }

    /// Evicts the tails of `node` shorter than `tokens` that `tokens` starts with: a page the
    /// tree just took after `node` holds `tokens`, so theirs too (their tail states stay, held by
    /// it; hence after it is in place).
    fn evict_tails_held_by(&mut self, node: NodeId, tokens: &[u32]) {
        let held = |t: &Tail| t.tokens.len() < tokens.len() && tokens.starts_with(&t.tokens);
        while let Some(i) = self.node(node).tails.iter().position(held) {
            self.evict_tail(node, i);
        }
    }

    /// Keeps `snapshot` as the state after `prefix` (whole pages, held by the tree: the caller
    /// holds a lock on it or below; or whole pages and fewer than a page of tokens that a cached
    /// page after them holds: their node's tail state). Makes room by evicting other leaves;
    /// returns false, keeping nothing, when it would not fit the budget, `prefix` already has
    /// one, or no cached page holds its last tokens. A refused state goes to
    /// [`PrefixCache::take_released`] (on an error it is dropped).
    pub fn attach_snapshot(
        &mut self,
        prefix: &[u32],
        snapshot: Snapshot<S>,
    ) -> Result<bool, CacheError> {
        let refused = self.place_snapshot(prefix, snapshot)?;
        let kept = refused.is_none();
        self.released.extend(refused.map(|s| s.state));
        Ok(kept)
    }

    /// [`PrefixCache::attach_snapshot`], handing a refused snapshot back.
    fn place_snapshot(
        &mut self,
        prefix: &[u32],
        snapshot: Snapshot<S>,
    ) -> Result<Option<Snapshot<S>>, CacheError> {
        if !self.enabled() || prefix.is_empty() {
            return Ok(Some(snapshot));
        }
        let page = self.config.page_size;
        let whole = prefix.len() / page * page;
        let node = self.boundary(&prefix[..whole])?;
        let tail = &prefix[whole..];
        // A state inside a page is of use only beside a cached page holding its tokens' K and V
        // (whichever: its own tail, a longer one, a child's first page).
        let placeable = |c: &Self| match tail.is_empty() {
            true => c.node(node).snapshot.is_none(),
            false => {
                let states = &c.node(node).tail_states;
                !states.iter().any(|s| s.tokens == tail) && c.page_holding(node, tail).is_some()
            }
        };
        if !placeable(self) {
            return Ok(Some(snapshot));
        }
        let (budget, snapshot_bytes) = (self.config.budget, snapshot.bytes);
        self.lock(node);
        // The page holding a tail state's tokens may go to make room (a tail is evictable
        // whatever the locks).
        self.evict_while(|c| c.cached_bytes + snapshot_bytes > budget);
        let fits = self.cached_bytes + snapshot_bytes <= budget;
        let refused = match fits && placeable(self) {
            true => {
                let n = self.node_mut(node);
                match tail.is_empty() {
                    true => n.snapshot = Some(snapshot),
                    false => n.tail_states.push(TailState {
                        tokens: tail.to_vec(),
                        snapshot,
                    }),
                }
                self.cached_bytes += snapshot_bytes;
                self.stats.snapshots_kept += 1;
                None
            }
            false => Some(snapshot),
        };
        self.unlock(node)?;
        Ok(refused)
    }

    /// Drops a sequence's lock on `node`, then evicts down to the budget.
    pub fn release(&mut self, node: NodeId) -> Result<(), CacheError> {
        self.unlock(node)?;
        let budget = self.config.budget;
        self.evict_while(|c| c.cached_bytes > budget);
        Ok(())
    }

    /// `n` free pages for a sequence, evicting unreferenced leaves (least recently used first)
    /// while the pool is short, whatever the budget.
    pub fn alloc_pages(&mut self, n: usize) -> Result<Vec<u32>, CacheError> {
        self.evict_while(|c| c.pages.free_count() < n);
        self.pages.alloc(n).ok_or_else(|| CacheError::OutOfPages {
            needed: n,
            free: self.pages.free_count(),
            n_pages: self.pages.n_pages(),
            cached: self.cached_tokens() / self.config.page_size,
        })
    }

    /// Returns a sequence's own pages (never ones the tree took) to the pool.
    pub fn free_pages_of_sequence(&mut self, pages: &[u32]) -> Result<(), CacheError> {
        if let Some(&p) = pages.iter().find(|&&p| self.tree_owns(p)) {
            return Err(CacheError::PageInTree { page: p });
        }
        self.pages.free(pages)
    }

    fn tree_owns(&self, page: u32) -> bool {
        self.live()
            .any(|(_, n)| n.pages.contains(&page) || n.tails.iter().any(|t| t.page == page))
    }

    /// The node ending exactly after `prefix`, splitting one if the boundary falls inside it.
    fn boundary(&mut self, prefix: &[u32]) -> Result<NodeId, CacheError> {
        let page = self.config.page_size;
        let missing = || CacheError::NotCached {
            tokens: prefix.len(),
        };
        if !prefix.len().is_multiple_of(page) {
            return Err(missing());
        }
        let (mut node, mut at) = (ROOT, 0);
        while at < prefix.len() {
            let child = self
                .child(node, &prefix[at..at + page])
                .ok_or_else(missing)?;
            let k = self.common_pages(child, &prefix[at..]);
            let end = at + k * page;
            if k < self.node(child).pages.len() {
                // The prefix ends inside `child` (a boundary to make) or leaves it (not cached).
                return match end == prefix.len() {
                    true => Ok(self.split(child, k)),
                    false => Err(missing()),
                };
            }
            (node, at) = (child, end);
        }
        Ok(node)
    }

    /// Whole pages that `child`'s tokens share with the start of `tokens` (its first page is
    /// known to match).
    fn common_pages(&self, child: NodeId, tokens: &[u32]) -> usize {
        let page = self.config.page_size;
        self.node(child)
            .tokens
            .chunks(page)
            .zip(tokens.chunks_exact(page))
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Cuts `id` after `k` pages: a new node takes the head (and the place under the parent),
    /// `id` keeps the tail, its children and its snapshot. Returns the head.
    fn split(&mut self, id: NodeId, k: usize) -> NodeId {
        let page = self.config.page_size;
        let node = self.node_mut(id);
        let tail_tokens = node.tokens.split_off(k * page);
        let tail_pages = node.pages.split_off(k);
        let head_tokens = std::mem::replace(&mut node.tokens, tail_tokens);
        let head_pages = std::mem::replace(&mut node.pages, tail_pages);
        let (parent, refs, last_use) = (node.parent, node.refs, node.last_use);
        let tail_key: Box<[u32]> = node.tokens[..page].into();
        let mut head = Node::new(parent, head_tokens, head_pages, last_use);
        head.refs = refs;
        head.children.insert(tail_key, id);
        let head_key: Box<[u32]> = head.tokens[..page].into();
        let head_id = self.alloc_node(head);
        self.node_mut(id).parent = Some(head_id);
        let parent = parent.expect("the root is never split");
        self.node_mut(parent).children.insert(head_key, head_id);
        head_id
    }

    /// Adds a node of whole pages under `parent`; tails of `parent` its first page holds go.
    fn add_leaf(&mut self, parent: NodeId, tokens: Vec<u32>, pages: Vec<u32>) -> NodeId {
        let key: Box<[u32]> = tokens[..self.config.page_size].into();
        self.cached_bytes += pages.len() as u64 * self.config.page_bytes;
        let id = self.alloc_node(Node::new(Some(parent), tokens, pages, self.clock));
        self.node_mut(parent).children.insert(key.clone(), id);
        self.evict_tails_held_by(parent, &key);
        id
    }

    fn alloc_node(&mut self, node: Node<S>) -> NodeId {
        match self.free_ids.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                NodeId(i)
            }
            None => {
                self.nodes.push(Some(node));
                NodeId(self.nodes.len() - 1)
            }
        }
    }

    /// Counts a lock on `id` and its ancestors, and marks the path used now.
    fn lock(&mut self, id: NodeId) {
        let clock = self.clock;
        let mut at = Some(id);
        while let Some(n) = at {
            let node = self.node_mut(n);
            node.refs += 1;
            node.last_use = clock;
            at = node.parent;
        }
    }

    fn unlock(&mut self, id: NodeId) -> Result<(), CacheError> {
        if self.get(id).is_none_or(|n| n.refs == 0) {
            return Err(CacheError::NotLocked);
        }
        let mut at = Some(id);
        while let Some(n) = at {
            let node = self.node_mut(n);
            node.refs -= 1;
            at = node.parent;
        }
        Ok(())
    }

    /// Evicts least-recently-used tails and unreferenced leaves (a node once its tails are
    /// gone) while `more` holds and there are any.
    fn evict_while(&mut self, more: impl Fn(&Self) -> bool) {
        while more(self) {
            let victim = self
                .live()
                .flat_map(|(id, n)| {
                    let leaf =
                        id != ROOT && n.refs == 0 && n.children.is_empty() && n.tails.is_empty();
                    let node = leaf.then_some((n.last_use, id.0, 0, Victim::Node(id)));
                    let tails = n
                        .tails
                        .iter()
                        .enumerate()
                        .map(move |(i, t)| (t.last_use, id.0, i + 1, Victim::Tail(id, i)));
                    node.into_iter().chain(tails)
                })
                .min_by_key(|&(last_use, id, i, _)| (last_use, id, i))
                .map(|(.., victim)| victim);
            match victim {
                Some(Victim::Node(id)) => self.evict(id),
                Some(Victim::Tail(id, i)) => self.evict_tail(id, i),
                None => return,
            }
        }
    }

    fn evict_tail(&mut self, id: NodeId, i: usize) {
        let tail = self.node_mut(id).tails.swap_remove(i);
        self.pages
            .free(&[tail.page])
            .expect("the tree owns its pages exactly once");
        self.cached_bytes -= self.config.page_bytes;
        self.stats.evictions += 1;
        self.stats.tokens_evicted += tail.tokens.len() as u64;
        self.drop_unheld_states(id);
    }

    fn evict(&mut self, id: NodeId) {
        let node = self.nodes[id.0].take().expect("a live node");
        self.free_ids.push(id.0);
        let parent = node.parent.expect("the root is never evicted");
        let key = &node.tokens[..self.config.page_size];
        self.node_mut(parent).children.remove(key);
        self.pages
            .free(&node.pages)
            .expect("the tree owns its pages exactly once");
        self.cached_bytes -= node.pages.len() as u64 * self.config.page_bytes;
        self.stats.evictions += 1;
        self.stats.tokens_evicted += node.tokens.len() as u64;
        let states = node.tail_states.into_iter().map(|s| s.snapshot);
        for s in node.snapshot.into_iter().chain(states) {
            self.let_go(s);
        }
        self.drop_unheld_states(parent);
    }

    /// Lets go of `node`'s tail states whose tokens no cached page holds any more.
    fn drop_unheld_states(&mut self, node: NodeId) {
        let states = std::mem::take(&mut self.node_mut(node).tail_states);
        let (held, gone): (Vec<_>, Vec<_>) = states
            .into_iter()
            .partition(|s| self.page_holding(node, &s.tokens).is_some());
        self.node_mut(node).tail_states = held;
        for s in gone {
            self.let_go(s.snapshot);
        }
    }

    /// Takes an evicted snapshot's bytes off the tree's and hands its state to the owner.
    fn let_go(&mut self, s: Snapshot<S>) {
        self.cached_bytes -= s.bytes;
        self.stats.snapshots_evicted += 1;
        self.released.push(s.state);
    }

    /// The pages from the root to the end of `id`.
    fn path_pages(&self, id: NodeId) -> Vec<u32> {
        let mut runs = Vec::new();
        let mut at = Some(id);
        while let Some(n) = at {
            let node = self.node(n);
            runs.push(&node.pages);
            at = node.parent;
        }
        runs.into_iter().rev().flatten().copied().collect()
    }

    fn child(&self, id: NodeId, first_page: &[u32]) -> Option<NodeId> {
        self.node(id).children.get(first_page).copied()
    }

    fn live(&self) -> impl Iterator<Item = (NodeId, &Node<S>)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().map(|n| (NodeId(i), n)))
    }

    fn get(&self, id: NodeId) -> Option<&Node<S>> {
        self.nodes.get(id.0).and_then(Option::as_ref)
    }

    fn node(&self, id: NodeId) -> &Node<S> {
        self.get(id).expect("a live node")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node<S> {
        self.nodes[id.0].as_mut().expect("a live node")
    }
}

#[cfg(test)]
mod tests;
