//! The matched envelope's prompts: built once, as token ids, and given unchanged to every arm.
//!
//! The corpus (`corpus.txt`, self-written prose shipped with the harness) is tokenized once with
//! the model's own tokenizer; each prompt is `n_ctx` consecutive ids of that stream starting at
//! an offset drawn from a seeded ChaCha stream (the stream wraps around, so any `n_ctx` works).
//! Where the model's tokenizer adds BOS, the prompt is BOS followed by `n_ctx − 1` corpus ids:
//! engines given ids add nothing themselves (llama-server adds BOS only to text prompts).

use anyhow::{Result, bail};
use fak::tokenizer::Tokenizer;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const CORPUS: &str = include_str!("corpus.txt");

/// The prompts of one run (the first one also serves as each arm's uncounted warm-up).
pub struct Prompts {
    pub timed: Vec<Vec<u32>>,
    pub seed: u64,
}

impl Prompts {
    pub fn build(tokenizer: &Tokenizer, n_ctx: usize, n: usize, seed: u64) -> Result<Prompts> {
        if n_ctx == 0 || n == 0 {
            bail!("the envelope needs n_ctx ≥ 1 and at least one prompt (got {n_ctx} and {n})");
        }
        let bos = tokenizer.adds_bos().then(|| tokenizer.bos()).flatten();
        let body = n_ctx - usize::from(bos.is_some());
        let timed = corpus_runs(tokenizer, body, n, seed)?
            .into_iter()
            .map(|run| bos.into_iter().chain(run).collect())
            .collect();
        Ok(Prompts { timed, seed })
    }
}

/// `n` runs of `len` consecutive corpus ids (no BOS), each from an offset drawn from a ChaCha
/// stream seeded with `seed`; the corpus wraps around.
pub fn corpus_runs(
    tokenizer: &Tokenizer,
    len: usize,
    n: usize,
    seed: u64,
) -> Result<Vec<Vec<u32>>> {
    let stream = tokenizer.encode_plain(CORPUS, false);
    if stream.is_empty() {
        bail!("the tokenizer turned the corpus into no tokens");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok((0..n)
        .map(|_| {
            let start = rng.random_range(0..stream.len());
            (0..len)
                .map(|i| stream[(start + i) % stream.len()])
                .collect()
        })
        .collect())
}
