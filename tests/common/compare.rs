//! Comparing kernel outputs with an oracle: relative error with an absolute floor, where NaN never
//! passes.

/// How close `got` must be to `want`: |got − want| ≤ abs + rel·|want|. Every use states why its
/// numbers are what they are.
#[derive(Clone, Copy, Debug)]
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

/// Panics, naming `what`, the number of mismatches and the worst ones, unless every element of
/// `got` is within `tol` of `want` (same length, no NaN on either side).
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: Tolerance) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| !tol.accepts(got[i], want[i]))
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
        .map(|&i| format!("[{i}] got {:e} want {:e}", got[i], want[i]))
        .collect();
    panic!(
        "{what}: {} of {} elements outside {tol:?} (first at {}); worst: {}",
        bad.len(),
        got.len(),
        bad[0],
        shown.join(", ")
    );
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
