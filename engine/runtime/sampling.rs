//! Token choice from logits: greedy, or sampled with temperature, top-k and top-p from a seed.
//!
//! Order (as Hugging Face and vLLM apply it): temperature scales the logits, top-k keeps the k
//! largest, top-p keeps the smallest prefix of those (by probability) whose mass reaches p, then
//! one token is drawn from the renormalised distribution. Temperature ≤ 0 means greedy; ties go
//! to the lowest id, as the GPU argmax does. Deterministic for a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How the next token is chosen. Built only through [`SamplingParams::new`] (or
/// [`greedy`](SamplingParams::greedy)), which refuses values outside their ranges: the one check
/// every front end shares, the command line's flags and a server's request fields alike.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    seed: u64,
}

/// A sampling value outside its range; the message names the parameter, the value and the range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{name} {value}: {range}")]
pub struct SamplingError {
    /// The parameter as the caller knows it (`temperature`, `top_p`).
    pub name: &'static str,
    pub value: String,
    pub range: &'static str,
}

impl SamplingParams {
    /// The most temperature accepted: far past where sampling is uniform over the candidates
    /// (logits differ by tens), and finite, so the scaled logits stay numbers.
    pub const MAX_TEMPERATURE: f32 = 1e6;
    const TEMPERATURE_RANGE: &str =
        "the temperature must be a finite number from 0 (greedy) to 1000000";
    const TOP_P_RANGE: &str = "top-p must be a number above 0 and at most 1 (1 keeps every token)";

    /// Temperature ≥ 0 (0 is greedy), top-k any count (0 = no cut), top-p in (0, 1] (1 = no
    /// cut), any seed. NaN, infinities and negative values are refused.
    pub fn new(
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
    ) -> Result<Self, SamplingError> {
        if !(0.0..=Self::MAX_TEMPERATURE).contains(&temperature) {
            return Err(SamplingError {
                name: "temperature",
                value: temperature.to_string(),
                range: Self::TEMPERATURE_RANGE,
            });
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(SamplingError {
                name: "top_p",
                value: top_p.to_string(),
                range: Self::TOP_P_RANGE,
            });
        }
        Ok(Self {
            temperature,
            top_k,
            top_p,
            seed,
        })
    }

    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }

    pub fn temperature(&self) -> f32 {
        self.temperature
    }

    /// 0 = no top-k cut.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// 1.0 = no top-p cut.
    pub fn top_p(&self) -> f32 {
        self.top_p
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
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
        // The best logit weighs 1 (also when it is +inf, where the difference would be NaN).
        let weight = |l: f64| if l == max { 1.0 } else { ((l - max) / t).exp() };
        let weighted: Vec<(u32, f64)> = ids
            .into_iter()
            .map(|i| (i, weight(f64::from(logits[i as usize]))))
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
        SamplingParams::new(temperature, top_k, top_p, seed).unwrap()
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
        assert!(
            (ones - 0.75).abs() < 0.03,
            "frequency of the 3/4 token: {ones}"
        );
    }

    #[test]
    fn values_outside_their_ranges_are_refused_naming_the_range() {
        for t in [f32::NAN, f32::INFINITY, -0.5, 2e6] {
            let err = SamplingParams::new(t, 0, 1.0, 0).unwrap_err().to_string();
            assert!(err.starts_with(&format!("temperature {t}: ")), "{err}");
            assert!(err.contains("from 0 (greedy) to 1000000"), "{err}");
        }
        for p in [f32::NAN, 0.0, -0.1, 1.5, f32::INFINITY] {
            let err = SamplingParams::new(1.0, 0, p, 0).unwrap_err().to_string();
            assert!(err.starts_with(&format!("top_p {p}: ")), "{err}");
            assert!(err.contains("above 0 and at most 1"), "{err}");
        }
        assert!(SamplingParams::new(0.0, usize::MAX, 1.0, u64::MAX).is_ok());
    }

    #[test]
    fn an_infinite_logit_is_drawn_every_time() {
        let logits = [0.0, f32::INFINITY, 1.0, f32::NEG_INFINITY];
        let mut s = Sampler::new(params(1.0, 0, 1.0, 5));
        for _ in 0..100 {
            assert_eq!(s.sample(&logits), 1);
        }
    }
}
