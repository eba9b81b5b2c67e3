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
    // f64::max ignores NaN, so NaN is carried explicitly.
    let worse = |a: f64, b: f64| {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
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

/// GPU-dequantized values of `ty` against the CPU dequantizer. Types whose values are products
/// (d·q, (d·sc)·q) must agree bit for bit: the GPU evaluates the same products in the same order.
/// Types with an offset (a·q − b, a·q + b: Q4_1, Q5_1, Q4_K, Q5_K) may be fused into one fma on
/// the GPU, one rounding where the CPU has two: the difference is at most ulp(a·q)/2, and within
/// a group of 32 sharing (a, b) with two distinct codes |a·q| ≤ 64·max|x|, so it is below 2^-18
/// of the group's largest value; 2^-17 of it is the tolerance (a wrong code or scale moves a
/// value by a whole step, ≥ 1/31 of the group range).
pub fn assert_dequantized(what: &str, ty: GgmlType, got: &[f32], want: &[f32]) {
    let affine = matches!(
        ty,
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K
    );
    if !affine {
        assert_close(what, got, want, Tolerance::EXACT);
        return;
    }
    assert_eq!(got.len(), want.len(), "{what}: output length");
    for (g, (got, want)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
        let largest = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let tol = Tolerance {
            rel: 0.0,
            abs: largest * 2f32.powi(-17),
        };
        assert_close(&format!("{what}, group {g}"), got, want, tol);
    }
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
