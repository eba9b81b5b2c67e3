//! The cooperative-matrix kernel's arithmetic on the CPU (wgsl/gated_delta_chunk_coop.wgsl):
//! how it splits each operand of a product into f16 parts, the f16 × f16 → f32 products the
//! matrix units make and the f32 accumulators they add into, run through the chunked delta rule
//! as the kernel orders it (γ, the Gram matrices, P and A, the scalar inverse, W and U as T·R,
//! then per chunk W·S, V' = U − W·S, O = Q̃·S + P·V' and S ← e^{γ_C} S + K̃ᵀ·V', each of the
//! scan's first three as one sum or, as chunk_scan_split adds them, in two halves). The tests
//! compare it with the f64 reference (`reference::gated_delta`) on the GPU tests' shapes and
//! inputs: the split the kernel has now must land at the f32 kernel's level, and the first
//! form's split, on a device that loses its lo parts as the H100 did, must not (so the test can
//! fail). The lavapipe test box has no cooperative matrices; this is where the precision of that
//! kernel is checked before any device time. Test-only: nothing in the engine runs it.

use half::f16;

/// How a product's operands reach the units that multiply them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// f32 operands and f32 products: what the f32 kernel computes (its level).
    F32,
    /// The first coop kernel: hi = f16(x), lo = f16(x − hi), one accumulator (lo·hi + hi·lo +
    /// hi·hi per term).
    RoundTrip,
    /// The kernel now: hi = x cut to 11 significant bits (0 below 2^-14), lo' = f16(2^11·(x −
    /// hi)); main = Σ hi·hi and small = Σ (hi·lo' + lo'·hi) in two accumulators, joined as
    /// main + 2^-11·small.
    CutScaled,
}

/// What a device does with the f16 conversions of a split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// IEEE: round to nearest, subnormals kept.
    Ieee,
    /// Results below f16's normal range (2^-14) flushed to zero.
    FlushSubnormals,
    /// The compiler folds f32(f16(x)) to x, so a round trip's remainder x − f32(f16(x)) is 0.
    FoldRoundTrip,
}

/// How chunk_scan adds W·S, Q̃·S and P·V' ([`ScanSums::Halves`] is `FAK_GDN_CHUNK=…+splitk+…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanSums {
    /// One pair of accumulators over each whole reduction, joined once (chunk_scan).
    Whole,
    /// Two halves, each on its own accumulators and joined, then added (half 0 + half 1):
    /// W·S and Q̃·S over the first ⌈dk/32⌉ k-steps of 16 and the rest, P·V' over the chunk's
    /// first 32 steps and the rest; O's halves are Q̃·S's and P·V''s of the same half in one
    /// pair of accumulators (chunk_scan_split).
    Halves,
}

const LO_SCALE: f32 = 2048.0;
const LO_UNIT: f32 = 1.0 / 2048.0;
const F16_MIN_NORMAL: f32 = 6.103_515_6e-5;

/// f32 → f16 → f32 as `device` converts.
fn to_f16(x: f32, device: Device) -> f32 {
    let h = f16::from_f32(x).to_f32();
    match device {
        Device::FlushSubnormals if h.abs() < F16_MIN_NORMAL => 0.0,
        _ => h,
    }
}

/// The two f16 parts of `x` (as f32 values) that `split` gives on `device`.
fn parts(x: f32, split: Split, device: Device) -> (f32, f32) {
    match split {
        Split::F32 => (x, 0.0),
        Split::RoundTrip => {
            let hi = to_f16(x, device);
            let rest = match device {
                Device::FoldRoundTrip => 0.0,
                _ => x - hi,
            };
            (hi, to_f16(rest, device))
        }
        Split::CutScaled => {
            let cut = f32::from_bits(x.to_bits() & 0xffff_e000);
            let hi = if cut.abs() >= F16_MIN_NORMAL {
                cut
            } else {
                0.0
            };
            (to_f16(hi, device), to_f16((x - hi) * LO_SCALE, device))
        }
    }
}

/// A row-major matrix.
#[derive(Clone, Debug)]
struct Mat {
    rows: usize,
    cols: usize,
    x: Vec<f32>,
}

impl Mat {
    fn zeros(rows: usize, cols: usize) -> Mat {
        Mat {
            rows,
            cols,
            x: vec![0.0; rows * cols],
        }
    }

    fn from_fn(rows: usize, cols: usize, f: impl Fn(usize, usize) -> f32) -> Mat {
        let x = (0..rows * cols).map(|e| f(e / cols, e % cols)).collect();
        Mat { rows, cols, x }
    }

    fn at(&self, r: usize, c: usize) -> f32 {
        self.x[r * self.cols + c]
    }

    fn transposed(&self) -> Mat {
        Mat::from_fn(self.cols, self.rows, |r, c| self.at(c, r))
    }

    /// Columns `range` of it.
    fn columns(&self, range: std::ops::Range<usize>) -> Mat {
        Mat::from_fn(self.rows, range.len(), |r, c| self.at(r, range.start + c))
    }

    /// Rows `range` of it.
    fn rows_in(&self, range: std::ops::Range<usize>) -> Mat {
        Mat::from_fn(range.len(), self.cols, |r, c| self.at(range.start + r, c))
    }

    /// self + other, element by element (f32 adds).
    fn plus(&self, other: &Mat) -> Mat {
        Mat::from_fn(self.rows, self.cols, |r, c| self.at(r, c) + other.at(r, c))
    }
}

/// The accumulators of one product (or of several products into the same output, as O = Q̃·S +
/// P·V'), starting from `init`.
struct Product {
    split: Split,
    device: Device,
    main: Mat,
    small: Mat,
}

impl Product {
    fn new(init: Mat, split: Split, device: Device) -> Product {
        let small = Mat::zeros(init.rows, init.cols);
        Product {
            split,
            device,
            main: init,
            small,
        }
    }

    /// Adds A·B as the matrix units would, over k in order.
    fn add(&mut self, a: &Mat, b: &Mat) {
        assert_eq!((a.rows, a.cols, b.rows), (self.main.rows, b.rows, a.cols));
        let split = |m: &Mat| -> (Mat, Mat) {
            let pairs: Vec<(f32, f32)> =
                m.x.iter()
                    .map(|&x| parts(x, self.split, self.device))
                    .collect();
            let hi = Mat {
                x: pairs.iter().map(|p| p.0).collect(),
                ..m.clone()
            };
            let lo = Mat {
                x: pairs.iter().map(|p| p.1).collect(),
                ..m.clone()
            };
            (hi, lo)
        };
        let ((a_hi, a_lo), (b_hi, b_lo)) = (split(a), split(b));
        for r in 0..a.rows {
            for c in 0..b.cols {
                let (mut main, mut small) = (self.main.at(r, c), self.small.at(r, c));
                for k in 0..a.cols {
                    let (ah, al, bh, bl) =
                        (a_hi.at(r, k), a_lo.at(r, k), b_hi.at(k, c), b_lo.at(k, c));
                    // Products of two f16 values are exact in f32; each add rounds.
                    match self.split {
                        Split::F32 => main = ah.mul_add(bh, main),
                        Split::RoundTrip => main = main + al * bh + ah * bl + ah * bh,
                        Split::CutScaled => {
                            main += ah * bh;
                            small = small + ah * bl + al * bh;
                        }
                    }
                }
                self.main.x[r * b.cols + c] = main;
                self.small.x[r * b.cols + c] = small;
            }
        }
    }

    fn value(self) -> Mat {
        let small = self.small;
        let mut out = self.main;
        for (o, s) in out.x.iter_mut().zip(&small.x) {
            *o += LO_UNIT * s;
        }
        out
    }
}

/// One value head's inputs over one chunk of CHUNK rows (zero past its rows).
struct ChunkIn {
    q: Mat,
    k: Mat,
    v: Mat,
    beta: Vec<f32>,
    g: Vec<f32>,
}

/// The chunked delta rule over one head's `t` rows as the kernel computes it; `s` is the
/// state, dv rows of dk (the kernel's layout), updated in place. Returns the t × dv outputs.
#[allow(clippy::too_many_arguments)]
pub fn emulate(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    beta: &[f32],
    g: &[f32],
    (dk, dv): (usize, usize),
    split: Split,
    device: Device,
    sums: ScanSums,
) -> Vec<f32> {
    const CHUNK: usize = crate::gpu::kernels::gated_delta_chunk::CHUNK as usize;
    let t_len = beta.len();
    let mut state = Mat {
        rows: dv,
        cols: dk,
        x: s.to_vec(),
    };
    let mut out = Vec::with_capacity(t_len * dv);
    for c0 in (0..t_len).step_by(CHUNK) {
        let n = CHUNK.min(t_len - c0);
        let rows = |x: &[f32], w: usize| {
            Mat::from_fn(
                CHUNK,
                w,
                |t, i| if t < n { x[(c0 + t) * w + i] } else { 0.0 },
            )
        };
        let chunk = ChunkIn {
            q: rows(q, dk),
            k: rows(k, dk),
            v: rows(v, dv),
            beta: (0..CHUNK)
                .map(|t| if t < n { beta[c0 + t] } else { 0.0 })
                .collect(),
            g: (0..CHUNK)
                .map(|t| if t < n { g[c0 + t] } else { 0.0 })
                .collect(),
        };
        let o = chunk_step(&mut state, &chunk, split, device, sums);
        out.extend_from_slice(&o.x[..n * dv]);
    }
    s.copy_from_slice(&state.x);
    out
}

fn chunk_step(state: &mut Mat, x: &ChunkIn, split: Split, device: Device, sums: ScanSums) -> Mat {
    let c = x.beta.len();
    let gamma: Vec<f32> =
        x.g.iter()
            .scan(0.0f32, |acc, &g| {
                *acc += g;
                Some(*acc)
            })
            .collect();
    let product = |init: Mat, terms: &[(&Mat, &Mat)]| {
        let mut p = Product::new(init, split, device);
        for (a, b) in terms {
            p.add(a, b);
        }
        p.value()
    };
    // chunk_prepare: the Gram matrices, P and A, T = (I + A)⁻¹ by substitution, W and U.
    let kt = x.k.transposed();
    let kk = product(Mat::zeros(c, c), &[(&x.k, &kt)]);
    let qk = product(Mat::zeros(c, c), &[(&x.q, &kt)]);
    let decay = |t: usize, s: usize| {
        if s <= t {
            (gamma[t] - gamma[s]).exp()
        } else {
            0.0
        }
    };
    let p = Mat::from_fn(c, c, |t, s| qk.at(t, s) * decay(t, s));
    let mut a = Mat::from_fn(c, c, |t, s| {
        if s < t {
            x.beta[t] * kk.at(t, s) * decay(t, s)
        } else {
            0.0
        }
    });
    for t in 1..c {
        let row: Vec<f32> = (0..t)
            .map(|j| {
                let mut acc = a.at(t, j);
                for s in j + 1..t {
                    acc = a.at(t, s).mul_add(a.at(s, j), acc);
                }
                -acc
            })
            .collect();
        a.x[t * c..t * c + t].copy_from_slice(&row);
    }
    let t_unit = Mat::from_fn(c, c, |t, s| a.at(t, s) + if s == t { 1.0 } else { 0.0 });
    let r_w = Mat::from_fn(c, x.k.cols, |t, i| {
        x.beta[t] * gamma[t].exp() * x.k.at(t, i)
    });
    let r_u = Mat::from_fn(c, x.v.cols, |t, j| x.beta[t] * x.v.at(t, j));
    let w = product(Mat::zeros(c, x.k.cols), &[(&t_unit, &r_w)]);
    let u = product(Mat::zeros(c, x.v.cols), &[(&t_unit, &r_u)]);
    let last = gamma[c - 1];
    let q_decayed = Mat::from_fn(c, x.q.cols, |t, i| gamma[t].exp() * x.q.at(t, i));
    let k_decayed = Mat::from_fn(c, x.k.cols, |t, i| (last - gamma[t]).exp() * x.k.at(t, i));
    // chunk_scan: S as B is dk × dv.
    let s_b = state.transposed();
    let dv = x.v.cols;
    // The halves' ranges of dk (k-steps of 16, half 0 the larger) and of the chunk's rows.
    let k_half = 16 * (x.k.cols / 16).div_ceil(2);
    let ks = [0..k_half, k_half..x.k.cols];
    let ts = [0..c / 2, c / 2..c];
    let ws = match sums {
        ScanSums::Whole => product(Mat::zeros(c, dv), &[(&w, &s_b)]),
        ScanSums::Halves => {
            let half = |h: usize| {
                let (w_h, s_h) = (w.columns(ks[h].clone()), s_b.rows_in(ks[h].clone()));
                product(Mat::zeros(c, dv), &[(&w_h, &s_h)])
            };
            half(0).plus(&half(1))
        }
    };
    let v_new = Mat::from_fn(c, dv, |t, j| u.at(t, j) - ws.at(t, j));
    let o = match sums {
        ScanSums::Whole => product(Mat::zeros(c, dv), &[(&q_decayed, &s_b), (&p, &v_new)]),
        ScanSums::Halves => {
            let half = |h: usize| {
                let (q_h, s_h) = (q_decayed.columns(ks[h].clone()), s_b.rows_in(ks[h].clone()));
                let (p_h, v_h) = (p.columns(ts[h].clone()), v_new.rows_in(ts[h].clone()));
                product(Mat::zeros(c, dv), &[(&q_h, &s_h), (&p_h, &v_h)])
            };
            half(0).plus(&half(1))
        }
    };
    let decayed = Mat::from_fn(s_b.rows, s_b.cols, |i, j| last.exp() * s_b.at(i, j));
    let updated = product(decayed, &[(&k_decayed.transposed(), &v_new)]);
    *state = updated.transposed();
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::gated_delta::{HeadSequence, gated_delta_chunked};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The GPU tests' tolerance of the f64 reference for the delta rule (fak-tests `DELTA_TOL`:
    /// 3e-5 relative with a 3e-6 floor); an emulation's error is reported as its worst fraction
    /// of it.
    const REL: f32 = 3e-5;
    const ABS: f32 = 3e-6;

    /// One head's random inputs as the GPU tests make them (`random_prepared`, `CpuState::random`):
    /// q̂ and k̂ l2-normalised from uniform(−1, 1), q̂ scaled by dk^-½, v in (−1, 1), β in (0.02,
    /// 0.98), g in (−1.2, 0], the state in (−0.5, 0.5).
    struct Case {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        beta: Vec<f32>,
        g: Vec<f32>,
        s0: Vec<f32>,
    }

    fn normalised(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm * scale).collect()
    }

    fn case(rng: &mut ChaCha8Rng, t: usize, dk: usize, dv: usize) -> Case {
        let mut q = Vec::new();
        let mut k = Vec::new();
        for _ in 0..t {
            q.extend(normalised(rng, dk, 1.0 / (dk as f32).sqrt()));
            k.extend(normalised(rng, dk, 1.0));
        }
        Case {
            q,
            k,
            v: (0..t * dv).map(|_| rng.random_range(-1.0..1.0)).collect(),
            beta: (0..t).map(|_| rng.random_range(0.02..0.98)).collect(),
            g: (0..t).map(|_| -rng.random_range(0.0..1.2)).collect(),
            s0: (0..dk * dv).map(|_| rng.random_range(-0.5..0.5)).collect(),
        }
    }

    /// Worst |got − want| / (ABS + REL·|want|) over outputs and final state, against the f64
    /// reference, over the GPU tests' shapes (dk × dv: 16 × 16, 32 × 12, 128 × 128) and lengths.
    fn worst(split: Split, device: Device, sums: ScanSums) -> f32 {
        let mut rng = ChaCha8Rng::seed_from_u64(0x6d7_0003);
        let mut worst = 0.0f32;
        for (dk, dv, lens) in [
            (16, 16, &[1, 2, 63, 64, 65, 130][..]),
            (32, 12, &[1, 2, 63, 64, 65, 130][..]),
            (128, 128, &[2, 65][..]),
        ] {
            for &t in lens {
                let x = case(&mut rng, t, dk, dv);
                // The reference keeps S as dk rows of dv; the kernel as dv rows of dk.
                let mut want_s = x.s0.clone();
                let seq = HeadSequence {
                    q: &x.q,
                    k: &x.k,
                    v: &x.v,
                    beta: &x.beta,
                    g: &x.g,
                    dk,
                    dv,
                };
                let want_o = gated_delta_chunked(&mut want_s, &seq, 64);
                let mut got_s: Vec<f32> =
                    (0..dv * dk).map(|e| x.s0[(e % dk) * dv + e / dk]).collect();
                let got_o = emulate(
                    &mut got_s,
                    &x.q,
                    &x.k,
                    &x.v,
                    &x.beta,
                    &x.g,
                    (dk, dv),
                    split,
                    device,
                    sums,
                );
                let got_s: Vec<f32> = (0..dk * dv)
                    .map(|e| got_s[(e % dv) * dk + e / dv])
                    .collect();
                for (g, w) in got_o.iter().zip(&want_o).chain(got_s.iter().zip(&want_s)) {
                    let ratio = (g - w).abs() / (ABS + REL * w.abs());
                    worst = worst.max(if ratio.is_nan() { f32::INFINITY } else { ratio });
                }
            }
        }
        worst
    }

    /// Measured (this machine, seeds as here): f32 products 0.097 of DELTA_TOL (~3e-6 relative,
    /// the level the f32 kernel shows on lavapipe); the kernel's split 0.094 (IEEE), 0.096
    /// (subnormals flushed), 0.094 (round trips folded); the first form's 0.099 on an IEEE device
    /// but 87.7 with subnormals flushed and 34.1 with round trips folded — ~1e-3 relative, the
    /// H100's failures.
    #[test]
    fn the_kernels_split_keeps_the_f32_kernels_accuracy_and_the_first_forms_did_not() {
        let f32_level = worst(Split::F32, Device::Ieee, ScanSums::Whole);
        let mut report = vec![format!("f32 products: {f32_level:.3} of DELTA_TOL")];
        let mut results = Vec::new();
        for device in [Device::Ieee, Device::FlushSubnormals, Device::FoldRoundTrip] {
            let now = worst(Split::CutScaled, device, ScanSums::Whole);
            let first = worst(Split::RoundTrip, device, ScanSums::Whole);
            report.push(format!(
                "{device:?}: cut + scaled {now:.3}, round trip {first:.3}"
            ));
            results.push((device, now, first));
        }
        let report = report.join("\n");
        eprintln!("{report}");
        assert!(f32_level <= 0.5, "the f32 emulation itself:\n{report}");
        for (device, now, first) in results {
            // The kernel's split: within the tolerance and within 1.5× of f32 products.
            assert!(
                now <= 1.0 && now <= 1.5 * f32_level,
                "{device:?}:\n{report}"
            );
            // The first form: fine where the device keeps its lo parts, ten times outside the
            // tolerance where it loses them.
            match device {
                Device::Ieee => assert!(first <= 1.0, "{report}"),
                _ => assert!(first > 10.0, "{device:?}:\n{report}"),
            }
        }
    }

    /// The split scan's sum order (each reduction in two joined halves, then added) keeps the
    /// kernel's accuracy: within the tolerance and within 1.5× of f32 products, on every
    /// device's conversions — what `FAK_GDN_CHUNK=…+splitk+…` is held to on the device.
    #[test]
    fn the_split_scans_halves_keep_the_kernels_accuracy() {
        let f32_level = worst(Split::F32, Device::Ieee, ScanSums::Whole);
        let mut report = vec![format!("f32 products: {f32_level:.3} of DELTA_TOL")];
        let mut results = Vec::new();
        for device in [Device::Ieee, Device::FlushSubnormals, Device::FoldRoundTrip] {
            let whole = worst(Split::CutScaled, device, ScanSums::Whole);
            let halves = worst(Split::CutScaled, device, ScanSums::Halves);
            report.push(format!("{device:?}: whole {whole:.3}, halves {halves:.3}"));
            results.push((device, halves));
        }
        let report = report.join("\n");
        eprintln!("{report}");
        for (device, halves) in results {
            assert!(
                halves <= 1.0 && halves <= 1.5 * f32_level,
                "{device:?}:\n{report}"
            );
        }
    }

    /// hi is exact in f16 and hi + 2^-11·lo' is x to 2^-22 of |x|, or to 2^-25 absolute where x
    /// is below f16's normal range — also with subnormals flushed.
    #[test]
    fn the_cut_and_scaled_parts_hold_22_bits() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x5b17);
        for _ in 0..100_000 {
            let x = rng.random_range(-1.0f32..1.0) * 2f32.powi(rng.random_range(-30..5));
            for device in [Device::Ieee, Device::FlushSubnormals] {
                let (hi, lo) = parts(x, Split::CutScaled, device);
                assert_eq!(f16::from_f32(hi).to_f32(), hi, "{x:e}: hi {hi:e}");
                let err = (f64::from(hi) + f64::from(lo) / 2048.0 - f64::from(x)).abs();
                let bound = (f64::from(x.abs()) * 2f64.powi(-22)).max(2f64.powi(-25));
                assert!(err <= bound, "{x:e} {device:?}: error {err:e} > {bound:e}");
            }
        }
    }
}
