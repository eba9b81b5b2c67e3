//! The benchmark's arithmetic: percentiles, rates, inter-token gaps, the bootstrap, ratios and the
//! bucket-sum check, and the distributions and tolerance they produce. Pure functions over seconds,
//! the statistics leaf of the packet (it imports only the raw bucket type); [`super::summary`]
//! applies them to raw samples.

use super::raw::Buckets;
use serde::{Deserialize, Serialize};

/// The bootstrap behind every p50 interval: resample requests with replacement (ITL: resample
/// requests and pool their gaps), take the p50 of each resample, report the 2.5th and 97.5th
/// percentiles of those. Indices come from splitmix64 seeded with `seed`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BootstrapSpec {
    pub resamples: usize,
    pub seed: u64,
    pub confidence: f64,
}

/// Percentiles of a time over counted requests (ITL: over all gaps pooled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeDist {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Bootstrap interval of the p50, [low, high].
    pub p50_ci: [f64; 2],
}

/// A rate as `tokens / time`: its p50 is tokens / p50(time) and its p95 the slow tail,
/// tokens / p95(time), so p95 ≤ p50.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateDist {
    pub tokens: f64,
    pub p50: f64,
    pub p95: f64,
    pub p50_ci: [f64; 2],
}

/// |measured − expected| ≤ abs_s + rel · expected.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub abs_s: f64,
    pub rel: f64,
}

impl Tolerance {
    pub fn allows(&self, measured: f64, expected: f64) -> bool {
        (measured - expected).abs() <= self.abs_s + self.rel * expected.abs()
    }
}

/// The p-quantile (p in [0, 1]) of sorted values by linear interpolation between order
/// statistics (Hyndman–Fan type 7, numpy's default): h = (n − 1)·p, x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]).
/// `None` for no values.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// [`percentile_sorted`] of unsorted values.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    percentile_sorted(&sorted(values), p)
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Prefill tok/s = n_ctx / prefill.
pub fn prefill_rate(n_ctx: usize, prefill_s: f64) -> f64 {
    n_ctx as f64 / prefill_s
}

/// Decode tok/s = (n_out − 1) / decode: the first token comes from prefill. `None` when n_out < 2.
pub fn decode_rate(n_out: usize, decode_s: f64) -> Option<f64> {
    (n_out >= 2).then(|| (n_out - 1) as f64 / decode_s)
}

/// Gaps between consecutive output tokens: n_out − 1 of them.
pub fn itl_gaps(token_times_s: &[f64]) -> Vec<f64> {
    token_times_s.windows(2).map(|w| w[1] - w[0]).collect()
}

/// The bucket sum against the wall clock: `Err` says by how much it missed.
pub fn check_total(buckets: &Buckets, wall_s: f64, tol: &Tolerance) -> Result<(), String> {
    let total = buckets.total();
    if tol.allows(total, wall_s) {
        Ok(())
    } else {
        Err(format!(
            "bucket sum {total:.6} s vs wall clock {wall_s:.6} s: off by {:.6} s, more than {} s + {} × wall",
            total - wall_s,
            tol.abs_s,
            tol.rel
        ))
    }
}

/// splitmix64: a tiny, fully specified generator, so a bootstrap can be recomputed anywhere.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An index in 0..n: the high 64 bits of next_u64 · n.
    pub fn index(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// The bootstrap interval of the p50. `clusters` are the resampling units (one request's value,
/// or one request's ITL gaps): each resample draws as many clusters as there are, with
/// replacement, pools their values and takes the p50; the interval is the (1 ± confidence)/2
/// percentiles of those p50s. A fresh generator from `spec.seed` for every interval.
pub fn bootstrap_p50_ci(clusters: &[Vec<f64>], spec: &BootstrapSpec) -> Option<[f64; 2]> {
    if clusters.is_empty() || spec.resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64::new(spec.seed);
    let mut medians = Vec::with_capacity(spec.resamples);
    let mut pool = Vec::new();
    for _ in 0..spec.resamples {
        pool.clear();
        for _ in 0..clusters.len() {
            pool.extend_from_slice(&clusters[rng.index(clusters.len())]);
        }
        pool.sort_by(f64::total_cmp);
        medians.push(percentile_sorted(&pool, 0.5)?);
    }
    medians.sort_by(f64::total_cmp);
    let tail = (1.0 - spec.confidence) / 2.0;
    Some([
        percentile_sorted(&medians, tail)?,
        percentile_sorted(&medians, 1.0 - tail)?,
    ])
}

/// Percentiles, mean, extremes and the p50 interval of values pooled over clusters.
pub fn time_dist(clusters: &[Vec<f64>], spec: &BootstrapSpec) -> Option<TimeDist> {
    let all: Vec<f64> = sorted(&clusters.concat());
    let n = all.len();
    Some(TimeDist {
        n,
        p50: percentile_sorted(&all, 0.5)?,
        p95: percentile_sorted(&all, 0.95)?,
        p99: percentile_sorted(&all, 0.99)?,
        mean: all.iter().sum::<f64>() / n as f64,
        min: all[0],
        max: all[n - 1],
        p50_ci: bootstrap_p50_ci(clusters, spec)?,
    })
}

/// One value per request, as bootstrap clusters.
pub fn singletons(values: impl IntoIterator<Item = f64>) -> Vec<Vec<f64>> {
    values.into_iter().map(|v| vec![v]).collect()
}

/// A rate `tokens / time` from the time's distribution: p50 = tokens / p50(time), p95 = tokens /
/// p95(time) (the slow tail), the interval mapped through the same division (ends swap).
pub fn rate_dist(tokens: f64, time: &TimeDist) -> RateDist {
    RateDist {
        tokens,
        p50: tokens / time.p50,
        p95: tokens / time.p95,
        p50_ci: [tokens / time.p50_ci[1], tokens / time.p50_ci[0]],
    }
}

/// arm / reference.
pub fn ratio(arm: f64, reference: f64) -> f64 {
    arm / reference
}

/// The cosine of two vectors (logit rows), summed in f64. NaN anywhere, rows of different
/// lengths or a zero row give NaN, which fails every threshold.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// Relative closeness for recomputed figures that went through JSON: |a − b| ≤ 1e-9 · max(|a|, |b|)
/// (plus 1e-15 absolute for zeros).
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-15
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: BootstrapSpec = BootstrapSpec {
        resamples: 1000,
        seed: 7,
        confidence: 0.95,
    };

    #[test]
    fn percentile_interpolates_between_order_statistics() {
        // n = 4, sorted 1 2 3 10: p50 → h = 1.5 → 2.5; p95 → h = 2.85 → 3 + 0.85·7 = 8.95.
        let v = [10.0, 1.0, 3.0, 2.0];
        assert_eq!(percentile(&v, 0.5), Some(2.5));
        assert!((percentile(&v, 0.95).unwrap() - 8.95).abs() < 1e-12);
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 1.0), Some(10.0));
        // n = 5, odd: the p50 is the middle value exactly.
        assert_eq!(percentile(&[5.0, 4.0, 3.0, 2.0, 1.0], 0.5), Some(3.0));
        assert_eq!(percentile(&[42.0], 0.95), Some(42.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn rates_count_prompt_tokens_and_output_gaps() {
        assert_eq!(prefill_rate(128, 0.064), 2000.0);
        // 64 tokens: the first from prefill, 63 gaps in 0.63 s → 100 tok/s.
        assert!((decode_rate(64, 0.63).unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(decode_rate(1, 0.0), None);
    }

    #[test]
    fn itl_has_one_gap_per_consecutive_pair() {
        let gaps = itl_gaps(&[0.5, 0.6, 0.75, 0.75]);
        assert_eq!(gaps.len(), 3);
        assert!((gaps[0] - 0.1).abs() < 1e-12 && (gaps[1] - 0.15).abs() < 1e-12);
        assert_eq!(gaps[2], 0.0);
        assert!(itl_gaps(&[1.0]).is_empty());
    }

    #[test]
    fn rate_p95_is_the_slow_tail() {
        // Decode times 1..=5 s for 10 tokens: p50(time) = 3, p95(time) = 4.8.
        let clusters = singletons([1.0, 2.0, 3.0, 4.0, 5.0]);
        let t = time_dist(&clusters, &SPEC).unwrap();
        assert_eq!((t.p50, t.min, t.max, t.mean), (3.0, 1.0, 5.0, 3.0));
        assert!((t.p95 - 4.8).abs() < 1e-12);
        let r = rate_dist(10.0, &t);
        assert!((r.p50 - 10.0 / 3.0).abs() < 1e-12);
        assert!((r.p95 - 10.0 / 4.8).abs() < 1e-12);
        assert!(r.p95 <= r.p50);
        assert!(r.p50_ci[0] <= r.p50 && r.p50 <= r.p50_ci[1]);
        assert_eq!(r.p50_ci, [10.0 / t.p50_ci[1], 10.0 / t.p50_ci[0]]);
    }

    #[test]
    fn splitmix64_matches_its_reference_sequence() {
        // First outputs for seed 0 (Vigna's splitmix64.c).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut g = SplitMix64::new(1);
        assert!((0..1000).all(|_| g.index(3) < 3));
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_median() {
        let clusters = singletons((1..=21).map(f64::from));
        let a = bootstrap_p50_ci(&clusters, &SPEC).unwrap();
        let b = bootstrap_p50_ci(&clusters, &SPEC).unwrap();
        assert_eq!(a, b, "same seed, same interval");
        assert!(
            a[0] < 11.0 && 11.0 < a[1],
            "{a:?} should bracket the median 11"
        );
        // The median of 21 uniform values moves by a few ranks, not by the whole range.
        assert!(a[0] >= 5.0 && a[1] <= 17.0, "{a:?}");
        let other = bootstrap_p50_ci(&clusters, &BootstrapSpec { seed: 8, ..SPEC }).unwrap();
        assert_ne!(a, other, "another seed draws other resamples");
        // Identical values leave no doubt.
        assert_eq!(
            bootstrap_p50_ci(&singletons([2.0; 9]), &SPEC),
            Some([2.0, 2.0])
        );
        assert_eq!(bootstrap_p50_ci(&[], &SPEC), None);
    }

    #[test]
    fn bootstrap_of_one_cluster_is_that_clusters_median() {
        // One request's ITL gaps: every resample is the same request.
        let ci = bootstrap_p50_ci(&[vec![0.01, 0.03, 0.02]], &SPEC).unwrap();
        assert_eq!(ci, [0.02, 0.02]);
    }

    #[test]
    fn total_is_checked_against_the_wall_clock() {
        let tol = Tolerance {
            abs_s: 0.002,
            rel: 0.01,
        };
        let b = Buckets {
            queue_s: 0.001,
            setup_s: 0.002,
            prefill_s: 0.1,
            decode_s: 0.5,
            verification_s: 0.0,
            recovery_s: 0.0,
            other_s: 0.003,
        };
        assert!((b.total() - 0.606).abs() < 1e-12);
        assert!((b.ttft() - 0.103).abs() < 1e-12);
        // Allowed: 0.002 + 0.01 × 0.61 = 0.0081 around the wall clock.
        assert!(check_total(&b, 0.61, &tol).is_ok());
        assert!(check_total(&b, 0.6, &tol).is_ok());
        let err = check_total(&b, 0.7, &tol).unwrap_err();
        assert!(err.contains("off by -0.094"), "{err}");
    }

    #[test]
    fn ratio_and_closeness() {
        assert_eq!(ratio(150.0, 100.0), 1.5);
        assert!(close(0.1 + 0.2, 0.3));
        assert!(!close(1.0, 1.0 + 1e-6));
        assert!(close(0.0, 0.0));
    }

    #[test]
    fn cosine_is_one_for_parallel_rows_and_nan_for_broken_ones() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-12);
        assert!(cosine(&[1.0, 0.0], &[0.0, 1.0]).abs() < 1e-12);
        assert!(cosine(&[1.0, f32::NAN], &[1.0, 1.0]).is_nan());
        assert!(cosine(&[1.0, 2.0], &[1.0]).is_nan());
        assert!(cosine(&[0.0, 0.0], &[1.0, 1.0]).is_nan());
    }
}
