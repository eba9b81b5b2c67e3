//! What serving rests on: batch invariance, the prefix cache, the scheduler, `fak serve` and scale-out.
//!
//! One test binary for the files below (they stay where they are): each binary links the engine,
//! wgpu and naga, so fewer of them keep the target small. CI runs one file's module at a time
//! (`ci/test.sh` `run_tests`); `tests/common/groups.rs` checks that every test file is in a group.

/// One request's logits, bit for bit, alone, batched with other sequences, and with its prompt
/// prefilled in other chunks: what makes a server's greedy answers the same under load.
#[path = "../batch_invariance.rs"]
mod batch_invariance;

/// The prefix cache and batched decode through the Engine: cache hits vs cold logits and tokens,
/// eviction under a budget, sequences sharing pages, one decode step for several sequences.
#[path = "../prefix_cache.rs"]
mod prefix_cache;

/// The continuous-batching scheduler tick by tick: a long prompt prefilled in parts between the
/// decode steps of the requests already decoding, each answer the one it gets alone; a client gone
/// mid-prefill frees its sequence.
#[path = "../scheduler.rs"]
mod scheduler;

/// fak serve with the official openai Python client: endpoints, streaming, errors, disconnects,
/// the full queue, a load test against each request alone, the SIGTERM drain.
#[path = "../serve.rs"]
mod serve;

/// docs/SCALE-OUT.md: two fak serve replicas behind nginx routing on a conversation header;
/// affinity asserted through each replica's /metrics.
#[path = "../scale_out.rs"]
mod scale_out;
