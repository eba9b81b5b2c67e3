//! Token choice from logits: greedy, or sampled with temperature, top-k and top-p from a seed.
//!
//! Order (as Hugging Face and vLLM apply it): temperature scales the logits, top-k keeps the k
//! largest, top-p keeps the smallest prefix of those (by probability) whose mass reaches p, then
//! one token is drawn from the renormalised distribution. Temperature ≤ 0 means greedy; ties go
//! to the lowest id, as the GPU argmax does. Deterministic for a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    /// 1.0 = no top-p cut.
    pub top_p: f32,
    pub seed: u64,
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Self { params, rng }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return crate::reference::ops::argmax(logits);
        }
        let candidates = self.candidates(logits);
        let total: f64 = candidates.iter().map(|c| c.1).sum();
        let mut draw = self.rng.random::<f64>() * total;
        for &(id, p) in &candidates {
            if draw < p {
                return id;
            }
            draw -= p;
        }
        candidates.last().map_or(0, |c| c.0)
    }

    /// (id, unnormalised probability) after temperature, top-k and top-p, most likely first.
    fn candidates(&self, logits: &[f32]) -> Vec<(u32, f64)> {
        let t = f64::from(self.params.temperature);
        let mut ids: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| !logits[i as usize].is_nan())
            .collect();
        // Stable sort: equal logits keep id order, so ties resolve to the lowest id.
        ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        if self.params.top_k > 0 {
            ids.truncate(self.params.top_k);
        }
        let Some(&best) = ids.first() else {
            return Vec::new();
        };
        let max = f64::from(logits[best as usize]);
        let weighted: Vec<(u32, f64)> = ids
            .into_iter()
            .map(|i| (i, ((f64::from(logits[i as usize]) - max) / t).exp()))
            .collect();
        let total: f64 = weighted.iter().map(|w| w.1).sum();
        let mut kept = Vec::new();
        let mut mass = 0.0;
        for (id, w) in weighted {
            kept.push((id, w));
            mass += w / total;
            if mass >= f64::from(self.params.top_p) {
                break;
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            seed,
        }
    }

    #[test]
    fn zero_temperature_and_top_k_one_are_greedy_with_lowest_id_on_ties() {
        let logits = [0.5, 2.0, 2.0, -1.0];
        assert_eq!(Sampler::new(params(0.0, 0, 1.0, 1)).sample(&logits), 1);
        assert_eq!(Sampler::new(params(1.5, 1, 1.0, 9)).sample(&logits), 1);
    }

    #[test]
    fn top_k_and_top_p_never_draw_outside_their_set() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let mut order: Vec<u32> = (0..50).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let mut s = Sampler::new(params(1.0, 5, 1.0, 3));
        for _ in 0..500 {
            assert!(order[..5].contains(&s.sample(&logits)));
        }
        // With p tiny, only the most likely token survives the nucleus cut.
        let mut s = Sampler::new(params(1.0, 0, 1e-6, 3));
        for _ in 0..100 {
            assert_eq!(s.sample(&logits), order[0]);
        }
    }

    #[test]
    fn sampling_is_deterministic_per_seed_and_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()]; // probabilities 1/4, 3/4 at temperature 1
        let draws = |seed| {
            let mut s = Sampler::new(params(1.0, 0, 1.0, seed));
            (0..4000).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        let ones = draws(7).iter().filter(|&&t| t == 1).count() as f64 / 4000.0;
        // Binomial std at n = 4000, p = 0.75 is 0.007; 0.03 is over four sigma.
        assert!((ones - 0.75).abs() < 0.03, "frequency of the 3/4 token: {ones}");
    }
}
