//! The gated delta rule on the CPU, in both forms (model-spec.md §5.5–5.6): the recurrent step
//! decode uses and the chunked form prefill uses. They must agree to floating-point tolerance;
//! the unit tests here pin that, and the GPU kernels are checked against these functions.
//!
//! State of one value head: `S ∈ R^{dk×dv}`, row-major (`s[i·dv + j]`, i over key dims).
//! Inputs are per token: `q̂` (l2-normalised and scaled by dk^-½), `k̂` (l2-normalised), `v`,
//! `β ∈ (0,1)` and the log-decay `g ≤ 0`.

/// One recurrent step: `S ← e^g S; u = Sᵀk; S ← S + k (β(v − u))ᵀ; o = Sᵀq`. Returns `o`.
pub fn gated_delta_step(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], beta: f32, g: f32) -> Vec<f32> {
    let (dk, dv) = (k.len(), v.len());
    debug_assert_eq!(s.len(), dk * dv);
    let decay = f64::from(g).exp();
    let mut state: Vec<f64> = s.iter().map(|&x| f64::from(x) * decay).collect();
    let delta: Vec<f64> = (0..dv)
        .map(|j| {
            let u: f64 = (0..dk).map(|i| state[i * dv + j] * f64::from(k[i])).sum();
            f64::from(beta) * (f64::from(v[j]) - u)
        })
        .collect();
    for i in 0..dk {
        for j in 0..dv {
            state[i * dv + j] += f64::from(k[i]) * delta[j];
        }
    }
    let out = (0..dv)
        .map(|j| (0..dk).map(|i| state[i * dv + j] * f64::from(q[i])).sum::<f64>() as f32)
        .collect();
    for (dst, src) in s.iter_mut().zip(&state) {
        *dst = *src as f32;
    }
    out
}

/// The inputs of one value head over T tokens, row-major per token.
pub struct HeadSequence<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub beta: &'a [f32],
    pub g: &'a [f32],
    pub dk: usize,
    pub dv: usize,
}

/// The chunked form over a whole sequence: chunks of `chunk` tokens (64 in the engine), the last
/// one zero-padded (q = k = v = 0, β = 0, g = 0, which changes neither outputs nor state).
/// Updates `s` to the final state and returns the T×dv outputs.
pub fn gated_delta_chunked(s: &mut [f32], x: &HeadSequence, chunk: usize) -> Vec<f32> {
    let (dk, dv) = (x.dk, x.dv);
    let t_len = x.beta.len();
    let mut state: Vec<f64> = s.iter().map(|&v| f64::from(v)).collect();
    let mut out = vec![0f32; t_len * dv];
    for c0 in (0..t_len).step_by(chunk) {
        let n = chunk.min(t_len - c0);
        let rows = |a: &[f32], w: usize| -> Vec<f64> {
            let mut m = vec![0f64; chunk * w];
            for (dst, &src) in m.iter_mut().zip(&a[c0 * w..(c0 + n) * w]) {
                *dst = f64::from(src);
            }
            m
        };
        let (q, k, v) = (rows(x.q, dk), rows(x.k, dk), rows(x.v, dv));
        let (beta, g) = (rows(x.beta, 1), rows(x.g, 1));
        let o = chunk_step(&mut state, &q, &k, &v, &beta, &g, dk, dv, chunk);
        for (dst, &src) in out[c0 * dv..(c0 + n) * dv].iter_mut().zip(&o) {
            *dst = src as f32;
        }
    }
    for (dst, src) in s.iter_mut().zip(&state) {
        *dst = *src as f32;
    }
    out
}

/// One chunk of C rows (model-spec.md §5.6), in f64.
#[allow(clippy::too_many_arguments)]
fn chunk_step(
    s: &mut [f64],
    q: &[f64],
    k: &[f64],
    v: &[f64],
    beta: &[f64],
    g: &[f64],
    dk: usize,
    dv: usize,
    c: usize,
) -> Vec<f64> {
    let dot = |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    let row = |m: &[f64], w: usize, t: usize| m[t * w..(t + 1) * w].to_vec();
    // γ_t: cumulative log-decay; Γ_ts = exp(γ_t − γ_s) for s ≤ t (≤ 1 since g ≤ 0).
    let gamma: Vec<f64> = g
        .iter()
        .scan(0.0, |acc, &x| {
            *acc += x;
            Some(*acc)
        })
        .collect();
    let decay = |t: usize, s_: usize| (gamma[t] - gamma[s_]).exp();
    // A_ts = β_t (k_t·k_s) Γ_ts for s < t; solve (I + A) X = R by forward substitution.
    let a = |t: usize, s_: usize| beta[t] * dot(&row(k, dk, t), &row(k, dk, s_)) * decay(t, s_);
    let solve = |r: Vec<f64>, w: usize| -> Vec<f64> {
        let mut x = r;
        for t in 0..c {
            for s_ in 0..t {
                let coef = a(t, s_);
                for j in 0..w {
                    x[t * w + j] -= coef * x[s_ * w + j];
                }
            }
        }
        x
    };
    let scaled = |m: &[f64], w: usize, f: &dyn Fn(usize) -> f64| -> Vec<f64> {
        (0..c * w).map(|i| m[i] * f(i / w)).collect()
    };
    let u = solve(scaled(v, dv, &|t| beta[t]), dv);
    let w_ = solve(scaled(k, dk, &|t| beta[t] * gamma[t].exp()), dk);
    // V' = U − W S: the part of the values the incoming state does not predict.
    let mut v_new = u;
    for t in 0..c {
        for j in 0..dv {
            let ws: f64 = (0..dk).map(|i| w_[t * dk + i] * s[i * dv + j]).sum();
            v_new[t * dv + j] -= ws;
        }
    }
    // O = diag(e^γ) Q S + [(Q Kᵀ) ⊙ Γ]_{s≤t} V'.
    let mut out = vec![0f64; c * dv];
    for t in 0..c {
        let qt = row(q, dk, t);
        for j in 0..dv {
            let qs: f64 = (0..dk).map(|i| qt[i] * s[i * dv + j]).sum();
            out[t * dv + j] = gamma[t].exp() * qs;
        }
        for s_ in 0..=t {
            let coef = dot(&qt, &row(k, dk, s_)) * decay(t, s_);
            for j in 0..dv {
                out[t * dv + j] += coef * v_new[s_ * dv + j];
            }
        }
    }
    // S ← e^{γ_C} S + (diag(e^{γ_C − γ}) K)ᵀ V'.
    let last = gamma[c - 1];
    for x in s.iter_mut() {
        *x *= last.exp();
    }
    for t in 0..c {
        let f = (last - gamma[t]).exp();
        for i in 0..dk {
            let kf = k[t * dk + i] * f;
            for j in 0..dv {
                s[i * dv + j] += kf * v_new[t * dv + j];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn normalised(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm * scale).collect()
    }

    struct Case {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        beta: Vec<f32>,
        g: Vec<f32>,
        s0: Vec<f32>,
    }

    fn case(seed: u64, t: usize, dk: usize, dv: usize) -> Case {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let scale = 1.0 / (dk as f32).sqrt();
        let mut q = Vec::new();
        let mut k = Vec::new();
        for _ in 0..t {
            q.extend(normalised(&mut rng, dk, scale));
            k.extend(normalised(&mut rng, dk, 1.0));
        }
        Case {
            q,
            k,
            v: (0..t * dv).map(|_| rng.random_range(-1.0..1.0)).collect(),
            beta: (0..t).map(|_| rng.random_range(0.01..0.99)).collect(),
            g: (0..t).map(|_| -rng.random_range(0.0..1.5)).collect(),
            s0: (0..dk * dv).map(|_| rng.random_range(-0.5..0.5)).collect(),
        }
    }

    #[test]
    fn chunked_form_equals_the_recurrence_for_partial_and_whole_chunks() {
        let (dk, dv, chunk) = (8, 6, 16);
        for t in [1, 2, 15, 16, 17, 33, 50] {
            let c = case(t as u64, t, dk, dv);
            let mut s_rec = c.s0.clone();
            let o_rec: Vec<f32> = (0..t)
                .flat_map(|i| {
                    gated_delta_step(
                        &mut s_rec,
                        &c.q[i * dk..(i + 1) * dk],
                        &c.k[i * dk..(i + 1) * dk],
                        &c.v[i * dv..(i + 1) * dv],
                        c.beta[i],
                        c.g[i],
                    )
                })
                .collect();
            let mut s_chunk = c.s0.clone();
            let seq = HeadSequence { q: &c.q, k: &c.k, v: &c.v, beta: &c.beta, g: &c.g, dk, dv };
            let o_chunk = gated_delta_chunked(&mut s_chunk, &seq, chunk);
            // Both run in f64 inside and round to f32 once per token (recurrent) or per
            // sequence (chunked): agreement to a few f32 ulps of O(1) values.
            for (a, b) in o_rec.iter().zip(&o_chunk).chain(s_rec.iter().zip(&s_chunk)) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "T={t}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn zero_beta_and_zero_decay_leave_the_state_unchanged() {
        let c = case(5, 1, 4, 3);
        let mut s = c.s0.clone();
        gated_delta_step(&mut s, &c.q, &c.k, &c.v, 0.0, 0.0);
        assert_eq!(s, c.s0);
    }

    #[test]
    fn beta_one_with_a_unit_key_writes_the_value_under_that_key() {
        let c = case(6, 1, 4, 3);
        let mut s = c.s0.clone();
        let key = [0.0, 1.0, 0.0, 0.0];
        gated_delta_step(&mut s, &c.q, &key, &c.v, 1.0, -0.3);
        // Reading the state with the same key returns v exactly (up to f32 rounding).
        let read = gated_delta_step(&mut s.clone(), &key, &key, &c.v, 0.0, 0.0);
        for (r, v) in read.iter().zip(&c.v) {
            assert!((r - v).abs() < 1e-6, "{r} vs {v}");
        }
    }
}
