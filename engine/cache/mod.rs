//! The prefix cache: KV pages shared between sequences through a radix tree over token ids,
//! recurrent-state snapshots for hybrid models (at its node boundaries, and part-way into the
//! page after one where a sequence ended), and the page pool.
//!
//! This module is pure bookkeeping (no GPU): which physical page holds which tokens, who reads
//! them, what to evict. The runtime writes the page table and copies state to match.

pub mod pages;
pub mod radix;

pub use pages::PageAllocator;
pub use radix::{
    CacheConfig, CacheStats, Inserted, NodeId, PartialPage, PrefixCache, PrefixMatch, Snapshot,
    common_prefix,
};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CacheError {
    #[error("prefix cache: {0}")]
    Config(String),
    #[error(
        "prefix cache: {needed} KV pages needed, {free} free of {n_pages} ({cached} held by \
         cached prefixes that sequences in flight still read)"
    )]
    OutOfPages {
        needed: usize,
        free: usize,
        n_pages: u32,
        cached: usize,
    },
    #[error("prefix cache: page {page} is not in use (the pool has {n_pages} pages)")]
    PageNotInUse { page: u32, n_pages: u32 },
    #[error("prefix cache: page {page} belongs to the tree, not to a sequence")]
    PageInTree { page: u32 },
    #[error(
        "prefix cache: {tokens} tokens do not fill {pages} pages of {page_size} tokens exactly"
    )]
    Misaligned {
        tokens: usize,
        pages: usize,
        page_size: usize,
    },
    #[error("prefix cache: a prefix of {tokens} tokens is not in the tree")]
    NotCached { tokens: usize },
    #[error("prefix cache: released a node no sequence holds")]
    NotLocked,
}
