//! Token choice from logits: greedy, or sampled with penalties, temperature, top-k, top-p and
//! min-p from a seed; and the log-probabilities a client may ask for.
//!
//! Order (as Hugging Face and vLLM apply it): the repetition penalty (prompt and output tokens)
//! and the presence and frequency penalties (output tokens) adjust the logits; temperature
//! scales them; top-k keeps the k largest; top-p keeps the smallest prefix of those (by
//! probability) whose mass reaches p; min-p drops what is less likely than min-p times the most
//! likely; one token is drawn from the renormalised rest. Temperature 0 means greedy (after the
//! penalties); ties go to the lowest id, as the GPU argmax does. Deterministic for a seed.
//!
//! Every range is checked in one place, [`SamplingParams::validated`], which
//! [`SamplingParams::new`] and every front end (the CLI, the server) go through.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    /// 1.0 = no top-p cut.
    pub top_p: f32,
    pub seed: u64,
    /// 0.0 = no min-p cut.
    pub min_p: f32,
    /// Divides a positive logit (multiplies a negative one) of every token already in the
    /// prompt or the output; 1.0 = none.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token the output holds; 0.0 = none.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time the output holds it; 0.0 = none.
    pub frequency_penalty: f32,
}

/// A sampling parameter out of its range, named as the OpenAI API names it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("temperature must be between 0 and 2, got {0}")]
    Temperature(f32),
    #[error("top_p must be greater than 0 and at most 1, got {0}")]
    TopP(f32),
    #[error("min_p must be between 0 and 1, got {0}")]
    MinP(f32),
    #[error("repetition_penalty must be greater than 0 and at most 2, got {0}")]
    RepetitionPenalty(f32),
    #[error("presence_penalty must be between -2 and 2, got {0}")]
    PresencePenalty(f32),
    #[error("frequency_penalty must be between -2 and 2, got {0}")]
    FrequencyPenalty(f32),
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }

    /// Temperature, top-k, top-p and seed, checked; no min-p cut, no penalties.
    pub fn new(
        temperature: f32,
        top_k: usize,
        top_p: f32,
        seed: u64,
    ) -> Result<Self, SamplingError> {
        Self {
            temperature,
            top_k,
            top_p,
            seed,
            ..Self::greedy()
        }
        .validated()
    }

    /// These parameters if every one is in range (NaN never is): the one place ranges are
    /// checked. The ranges are OpenAI's where it has the parameter (temperature 0..=2, top_p
    /// in (0, 1], penalties -2..=2), vLLM's otherwise (min_p 0..=1, repetition_penalty > 0, here
    /// at most 2).
    pub fn validated(self) -> Result<Self, SamplingError> {
        let within = |v: f32, lo: f32, hi: f32| (lo..=hi).contains(&v);
        if !within(self.temperature, 0.0, 2.0) {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        if !within(self.min_p, 0.0, 1.0) {
            return Err(SamplingError::MinP(self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty <= 2.0) {
            return Err(SamplingError::RepetitionPenalty(self.repetition_penalty));
        }
        if !within(self.presence_penalty, -2.0, 2.0) {
            return Err(SamplingError::PresencePenalty(self.presence_penalty));
        }
        if !within(self.frequency_penalty, -2.0, 2.0) {
            return Err(SamplingError::FrequencyPenalty(self.frequency_penalty));
        }
        Ok(self)
    }

    /// Whether the choice is the argmax of the raw logits (what the GPU computes): temperature 0
    /// or top-k 1, and no penalty moving the logits.
    pub fn is_greedy(&self) -> bool {
        (self.temperature <= 0.0 || self.top_k == 1) && !self.penalizes()
    }

    fn penalizes(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
    }
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    /// Tokens of the prompt (the repetition penalty's only).
    prompt: Vec<u32>,
    /// How often each token was chosen so far.
    counts: HashMap<u32, u32>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        Self::for_prompt(params, &[])
    }

    /// A sampler whose repetition penalty also counts the tokens of `prompt`.
    pub fn for_prompt(params: SamplingParams, prompt: &[u32]) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        let mut prompt = match params.repetition_penalty != 1.0 {
            true => prompt.to_vec(),
            false => Vec::new(),
        };
        prompt.sort_unstable();
        prompt.dedup();
        Self {
            params,
            rng,
            prompt,
            counts: HashMap::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Chooses the next token from `logits` and remembers it (for the penalties).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let token = self.choose(logits);
        *self.counts.entry(token).or_default() += 1;
        token
    }

    fn choose(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return crate::reference::ops::argmax(logits);
        }
        let penalized;
        let logits = match self.params.penalizes() {
            true => {
                penalized = self.penalized(logits);
                &penalized
            }
            false => logits,
        };
        if self.params.temperature <= 0.0 || self.params.top_k == 1 {
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

    /// `logits` with the repetition, presence and frequency penalties applied.
    fn penalized(&self, logits: &[f32]) -> Vec<f32> {
        let mut out = logits.to_vec();
        let p = &self.params;
        let repeat = |v: f32| match v > 0.0 {
            true => v / p.repetition_penalty,
            false => v * p.repetition_penalty,
        };
        if p.repetition_penalty != 1.0 {
            for &id in &self.prompt {
                if !self.counts.contains_key(&id)
                    && let Some(v) = out.get_mut(id as usize)
                {
                    *v = repeat(*v);
                }
            }
        }
        for (&id, &n) in &self.counts {
            if let Some(v) = out.get_mut(id as usize) {
                *v = repeat(*v) - p.presence_penalty - p.frequency_penalty * n as f32;
            }
        }
        out
    }

    /// (id, unnormalised probability) after temperature, top-k, top-p and min-p, most likely
    /// first.
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
        // The most likely token's weight is exp(0) = 1: min-p keeps weights ≥ min_p.
        let floor = f64::from(self.params.min_p);
        let mut kept = Vec::new();
        let mut mass = 0.0;
        for (id, w) in weighted {
            if w < floor {
                break;
            }
            kept.push((id, w));
            mass += w / total;
            if mass >= f64::from(self.params.top_p) {
                break;
            }
        }
        kept
    }
}

/// The log-probability of `chosen` and the `top` most likely tokens, from the raw logits (the
/// model's distribution, before any penalty or temperature), most likely first.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TokenLogprobs {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

pub fn logprobs(logits: &[f32], chosen: u32, top: usize) -> TokenLogprobs {
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&v| f64::from(v - max).exp())
        .sum();
    let log_z = f64::from(max) + sum.ln();
    let lp = |id: u32| (f64::from(logits[id as usize]) - log_z) as f32;
    let mut order: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| !logits[i as usize].is_nan())
        .collect();
    let top = top.min(order.len());
    if top > 0 {
        order.select_nth_unstable_by(top - 1, |&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
    }
    order.truncate(top);
    order.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    TokenLogprobs {
        token: chosen,
        logprob: lp(chosen),
        top: order.into_iter().map(|id| (id, lp(id))).collect(),
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
    fn min_p_drops_what_is_far_less_likely_than_the_best() {
        // Probabilities ∝ 1, 0.5, 0.01: min-p 0.1 keeps the first two only.
        let logits = [0.0f32, 0.5f32.ln(), 0.01f32.ln()];
        let p = SamplingParams {
            temperature: 1.0,
            min_p: 0.1,
            ..SamplingParams::greedy()
        }
        .validated()
        .unwrap();
        let mut s = Sampler::new(p);
        let draws: Vec<u32> = (0..2000).map(|_| s.sample(&logits)).collect();
        assert!(!draws.contains(&2));
        assert!(draws.contains(&0) && draws.contains(&1));
    }

    #[test]
    fn penalties_move_greedy_off_a_repeated_token() {
        let logits = [1.0f32, 0.9, -3.0];
        let with = |presence: f32, frequency: f32, repetition: f32, prompt: &[u32]| {
            let p = SamplingParams {
                presence_penalty: presence,
                frequency_penalty: frequency,
                repetition_penalty: repetition,
                ..SamplingParams::greedy()
            }
            .validated()
            .unwrap();
            assert!(!p.is_greedy(), "a penalty needs the logits on the host");
            let mut s = Sampler::for_prompt(p, prompt);
            [s.sample(&logits), s.sample(&logits), s.sample(&logits)]
        };
        // Presence: token 0 once chosen loses 0.5, so 1 wins next, then both are penalised
        // equally and 0 wins again.
        assert_eq!(with(0.5, 0.0, 1.0, &[]), [0, 1, 0]);
        // Frequency: each repeat costs 0.06; 0 wins twice (1.0, 0.94 > 0.9), then 1.
        assert_eq!(with(0.0, 0.06, 1.0, &[]), [0, 0, 1]);
        // Repetition over the prompt: 1.0 / 1.5 < 0.9, so 1 wins first; then 1 is penalised
        // too (0.6 < 0.67) and 0 wins, once per token however often it repeats.
        assert_eq!(with(0.0, 0.0, 1.5, &[0]), [1, 0, 0]);
    }

    #[test]
    fn every_range_is_checked_and_nan_never_passes() {
        let bad = |f: fn(&mut SamplingParams)| {
            let mut p = SamplingParams::greedy();
            f(&mut p);
            p.validated().unwrap_err()
        };
        let bad_value = |f: fn(&mut SamplingParams, f32), v: f32| {
            let mut p = SamplingParams::greedy();
            f(&mut p, v);
            p.validated().unwrap_err()
        };
        assert_eq!(
            bad(|p| p.temperature = -0.1),
            SamplingError::Temperature(-0.1)
        );
        for t in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert!(matches!(
                bad_value(|p, v| p.temperature = v, t),
                SamplingError::Temperature(_)
            ));
            assert!(matches!(
                bad_value(|p, v| p.top_p = v, t),
                SamplingError::TopP(_)
            ));
            assert!(matches!(
                bad_value(|p, v| p.min_p = v, t),
                SamplingError::MinP(_)
            ));
            assert!(matches!(
                bad_value(|p, v| p.repetition_penalty = v, t),
                SamplingError::RepetitionPenalty(_)
            ));
            assert!(matches!(
                bad_value(|p, v| p.presence_penalty = v, t),
                SamplingError::PresencePenalty(_)
            ));
        }
        assert_eq!(bad(|p| p.top_p = 0.0), SamplingError::TopP(0.0));
        assert_eq!(bad(|p| p.top_p = 1.5), SamplingError::TopP(1.5));
        assert_eq!(bad(|p| p.min_p = 2.0), SamplingError::MinP(2.0));
        assert_eq!(
            bad(|p| p.repetition_penalty = 0.0),
            SamplingError::RepetitionPenalty(0.0)
        );
        assert_eq!(
            bad(|p| p.presence_penalty = 2.5),
            SamplingError::PresencePenalty(2.5)
        );
        assert!(matches!(
            bad(|p| p.frequency_penalty = f32::NAN),
            SamplingError::FrequencyPenalty(_)
        ));
        assert!(SamplingParams::new(2.0, 40, 1.0, 1).is_ok());
        assert!(
            SamplingParams::new(2.1, 40, 1.0, 1)
                .unwrap_err()
                .to_string()
                .contains("temperature")
        );
    }

    #[test]
    fn an_infinite_logit_is_drawn_every_time() {
        let logits = [0.0, f32::INFINITY, 1.0, f32::NEG_INFINITY];
        let mut s = Sampler::new(params(1.0, 0, 1.0, 5));
        for _ in 0..100 {
            assert_eq!(s.sample(&logits), 1);
        }
    }

    #[test]
    fn logprobs_are_a_log_softmax_with_the_best_first() {
        let logits = [1.0f32, 3.0, 2.0, f32::NAN];
        let lp = logprobs(&logits, 2, 2);
        let z = (1f64.exp() + 3f64.exp() + 2f64.exp()).ln();
        assert!((f64::from(lp.logprob) - (2.0 - z)).abs() < 1e-6);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2]);
        assert!((f64::from(lp.top[0].1) - (3.0 - z)).abs() < 1e-6);
        assert!(logprobs(&logits, 0, 0).top.is_empty());
    }
}
