//! Comparing kernel outputs with an oracle: relative error with an absolute floor, where NaN never
//! passes.

use fak::quant::GgmlType;

/// How close `got` must be to `want`: |got − want| ≤ abs + rel·|want|. Every use states why its
/// numbers are what they are.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Tolerance {
    pub rel: f32,
    pub abs: f32,
}

impl Tolerance {
    /// Bit-for-bit agreement (infinities of the same sign included).
    pub const EXACT: Tolerance = Tolerance { rel: 0.0, abs: 0.0 };

    fn accepts(self, got: f32, want: f32) -> bool {
        if got.is_nan() || want.is_nan() {
            return false;
        }
        if got.is_infinite() || want.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.abs + self.rel * want.abs()
    }
}

/// How far `got` is from `want` under `tol`, for a report rather than a panic.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Measured {
    pub elements: usize,
    /// Elements outside the tolerance (NaN on either side, or a length mismatch, counts).
    pub outside: usize,
    pub max_abs_error: f64,
    /// max |got − want| / |want| over elements with want ≠ 0.
    pub max_rel_error: f64,
    /// max |got − want| / (abs + rel·|want|): at most 1 where everything passes.
    pub worst_of_tolerance: f64,
}

impl Measured {
    pub fn pass(&self) -> bool {
        self.outside == 0 && self.elements > 0
    }

    /// The measurement of `self`'s elements and `other`'s together.
    pub fn merge(self, other: Measured) -> Measured {
        Measured {
            elements: self.elements + other.elements,
            outside: self.outside + other.outside,
            max_abs_error: worse(self.max_abs_error, other.max_abs_error),
            max_rel_error: worse(self.max_rel_error, other.max_rel_error),
            worst_of_tolerance: worse(self.worst_of_tolerance, other.worst_of_tolerance),
        }
    }
}

/// The larger of two errors, NaN if either is (f64::max would drop it).
fn worse(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Measures `got` against `want` under `tol` (NaN never passes; a length mismatch fails every
/// element).
pub fn measure(got: &[f32], want: &[f32], tol: Tolerance) -> Measured {
    if got.len() != want.len() {
        return Measured {
            elements: want.len(),
            outside: want.len().max(1),
            max_abs_error: f64::NAN,
            max_rel_error: f64::NAN,
            worst_of_tolerance: f64::NAN,
        };
    }
    let mut m = Measured {
        elements: got.len(),
        outside: 0,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        worst_of_tolerance: 0.0,
    };
    for (&g, &w) in got.iter().zip(want) {
        if !tol.accepts(g, w) {
            m.outside += 1;
        }
        let err = (f64::from(g) - f64::from(w)).abs();
        m.max_abs_error = worse(m.max_abs_error, err);
        if w != 0.0 {
            m.max_rel_error = worse(m.max_rel_error, err / f64::from(w).abs());
        }
        let bound = f64::from(tol.abs) + f64::from(tol.rel) * f64::from(w).abs();
        let share = if err == 0.0 { 0.0 } else { err / bound };
        m.worst_of_tolerance = worse(m.worst_of_tolerance, share);
    }
    m
}

/// Panics, naming `what`, the number of mismatches and the worst ones, unless every element of
/// `got` is within `tol` of `want` (same length, no NaN on either side).
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: Tolerance) {
    assert_each_close(what, got, want, |_| tol);
}

/// [`assert_close`] with an absolute bound per element: `|got[i] − want[i]| ≤ bounds[i]`.
pub fn assert_within(what: &str, got: &[f32], want: &[f32], bounds: &[f32]) {
    assert_eq!(bounds.len(), want.len(), "{what}: bounds length");
    assert_each_close(what, got, want, |i| Tolerance {
        rel: 0.0,
        abs: bounds[i],
    });
}

fn assert_each_close(what: &str, got: &[f32], want: &[f32], tol: impl Fn(usize) -> Tolerance) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| !tol(i).accepts(got[i], want[i]))
        .collect();
    if bad.is_empty() {
        return;
    }
    let mut worst = bad.clone();
    worst.sort_by(|&a, &b| {
        let err = |i: usize| {
            let e = (got[i] - want[i]).abs();
            if e.is_nan() { f32::INFINITY } else { e }
        };
        err(b).total_cmp(&err(a))
    });
    let shown: Vec<String> = worst
        .iter()
        .take(8)
        .map(|&i| format!("[{i}] got {:e} want {:e} ({:?})", got[i], want[i], tol(i)))
        .collect();
    panic!(
        "{what}: {} of {} elements outside their tolerance (first at {}); worst: {}",
        bad.len(),
        got.len(),
        bad[0],
        shown.join(", ")
    );
}

/// The bound an [`Output`] is held to.
#[derive(Clone, Debug)]
pub enum Bound {
    /// The same tolerance for every element.
    Within(Tolerance),
    /// Values the CPU dequantizer gives for type `ty` ([`dequant_tolerance`] per group of 32).
    Dequantized(GgmlType),
    /// Each element its own largest distance: `|got[i] − want[i]| ≤ bounds[i]`.
    Each(Vec<f32>),
}

/// One output of a kernel case against the reference: the GPU tests assert it, `harness
/// selftest` measures it (`report`).
pub struct Output {
    /// Which output of the case (`"q"`, `"k cache"`; empty where the case has one).
    pub part: &'static str,
    /// The case in full, for a failure message.
    pub what: String,
    pub got: Vec<f32>,
    pub want: Vec<f32>,
    pub bound: Bound,
    /// The kernel wrote where it must not (outside the output's rows, past the step's tokens,
    /// cache slots no token owns): those elements are not in `got`.
    pub wrote_outside: bool,
}

impl Output {
    /// An empty output of `what`, each element held to its own bound ([`Output::push`]).
    pub fn each(what: String) -> Output {
        Output {
            part: "",
            what,
            got: Vec::new(),
            want: Vec::new(),
            bound: Bound::Each(Vec::new()),
            wrote_outside: false,
        }
    }

    /// Appends an element and its bound to an output of [`Output::each`].
    pub fn push(&mut self, got: f32, want: f64, bound: f64) {
        let Bound::Each(bounds) = &mut self.bound else {
            panic!("{}: bounds are not per element", self.what);
        };
        self.got.push(got);
        self.want.push(want as f32);
        bounds.push(bound as f32);
    }

    /// Panics unless every element is within the bound and nothing was written outside.
    pub fn assert(&self) {
        match &self.bound {
            &Bound::Within(tol) => assert_close(&self.what, &self.got, &self.want, tol),
            &Bound::Dequantized(ty) => assert_dequantized(&self.what, ty, &self.got, &self.want),
            Bound::Each(bounds) => assert_within(&self.what, &self.got, &self.want, bounds),
        }
        assert!(
            !self.wrote_outside,
            "{}: wrote outside its output",
            self.what
        );
    }

    /// How far `got` is from `want`, and the tolerance that says so (for dequantized values,
    /// the loosest of their groups'; for bounds per element, the largest).
    pub fn measure(&self) -> (Measured, Tolerance) {
        match &self.bound {
            &Bound::Within(tol) => (measure(&self.got, &self.want, tol), tol),
            &Bound::Dequantized(ty) => measure_dequantized(ty, &self.got, &self.want),
            Bound::Each(bounds) => measure_within(&self.got, &self.want, bounds),
        }
    }
}

/// [`assert_within`] as a measurement: each element under its own bound, and the largest bound.
pub fn measure_within(got: &[f32], want: &[f32], bounds: &[f32]) -> (Measured, Tolerance) {
    let within = |abs| Tolerance { rel: 0.0, abs };
    let largest = within(bounds.iter().fold(0.0, |m: f32, &b| m.max(b)));
    if bounds.len() != want.len() {
        // The case's own mistake: fails every element.
        return (measure(&[], want, largest), largest);
    }
    if got.len() != want.len() {
        return (measure(got, want, largest), largest);
    }
    let measured = (0..got.len())
        .map(|i| measure(&got[i..=i], &want[i..=i], within(bounds[i])))
        .reduce(Measured::merge)
        .unwrap_or_else(|| measure(got, want, largest));
    (measured, largest)
}

/// The tolerance of a group of 32 GPU-dequantized values of `ty` (`want` the CPU dequantizer's).
/// Types whose values are products (d·q, (d·sc)·q) must agree bit for bit: the GPU evaluates the
/// same products in the same order. Types with an offset (a·q − b, a·q + b: Q4_1, Q5_1, Q4_K,
/// Q5_K) may be fused into one fma on the GPU, one rounding where the CPU has two: the difference
/// is at most ulp(a·q)/2, and within a group of 32 sharing (a, b) with two distinct codes
/// |a·q| ≤ 64·max|x|, so it is below 2^-18 of the group's largest value; 2^-17 of it is the
/// tolerance (a wrong code or scale moves a value by a whole step, ≥ 1/31 of the group range).
pub fn dequant_tolerance(ty: GgmlType, want: &[f32]) -> Tolerance {
    let affine = matches!(
        ty,
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K
    );
    if !affine {
        return Tolerance::EXACT;
    }
    let largest = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    Tolerance {
        rel: 0.0,
        abs: largest * 2f32.powi(-17),
    }
}

/// GPU-dequantized values of `ty` against the CPU dequantizer's, each group of 32 under its
/// [`dequant_tolerance`].
pub fn assert_dequantized(what: &str, ty: GgmlType, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    for (g, (got, want)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
        let tol = dequant_tolerance(ty, want);
        assert_close(&format!("{what}, group {g}"), got, want, tol);
    }
}

/// [`assert_dequantized`] as a measurement: every group under its own tolerance, and the
/// loosest of those tolerances.
pub fn measure_dequantized(ty: GgmlType, got: &[f32], want: &[f32]) -> (Measured, Tolerance) {
    let loosest = want
        .chunks(32)
        .map(|w| dequant_tolerance(ty, w))
        .fold(Tolerance::EXACT, |a, b| if b.abs > a.abs { b } else { a });
    if got.len() != want.len() {
        return (measure(got, want, loosest), loosest);
    }
    let measured = got
        .chunks(32)
        .zip(want.chunks(32))
        .map(|(g, w)| measure(g, w, dequant_tolerance(ty, w)))
        .reduce(Measured::merge)
        .unwrap_or_else(|| measure(got, want, loosest));
    (measured, loosest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_never_passes() {
        let loose = Tolerance {
            rel: 1.0,
            abs: 1e30,
        };
        assert!(!loose.accepts(f32::NAN, 1.0));
        assert!(!loose.accepts(1.0, f32::NAN));
        assert!(!loose.accepts(f32::NAN, f32::NAN));
        assert!(!loose.accepts(f32::INFINITY, 1.0));
        assert!(Tolerance::EXACT.accepts(f32::NEG_INFINITY, f32::NEG_INFINITY));
        let m = measure(&[1.0, f32::NAN], &[1.0, 2.0], loose);
        assert!(!m.pass() && m.outside == 1 && m.max_abs_error.is_nan());
        assert!(measure(&[1.5], &[1.0], Tolerance { rel: 0.5, abs: 0.0 }).pass());
        // Bounds per element: each its own, NaN never within one, a missing bound fails.
        let (m, largest) = measure_within(&[1.5, 2.0], &[1.0, 2.5], &[0.5, 0.5]);
        assert!(m.pass() && m.worst_of_tolerance == 1.0 && largest.abs == 0.5);
        assert!(
            !measure_within(&[1.5, 2.0], &[1.0, 2.5], &[0.5, 0.25])
                .0
                .pass()
        );
        assert!(!measure_within(&[f32::NAN], &[1.0], &[1e30]).0.pass());
        assert!(!measure_within(&[1.0, 2.0], &[1.0, 2.0], &[1.0]).0.pass());
        assert!(
            Tolerance {
                rel: 1e-3,
                abs: 0.0
            }
            .accepts(1.0005, 1.0)
        );
        assert!(
            !Tolerance {
                rel: 1e-3,
                abs: 0.0
            }
            .accepts(1.002, 1.0)
        );
    }
}
