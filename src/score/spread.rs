//! The middle and spread of a set's repeated measurements (throughput, projected minutes):
//! median, median absolute deviation, range and count. Medians, not means: one run disturbed by
//! a noisy neighbour moves a median little and a mean a lot.

use serde::Serialize;

/// Median, median absolute deviation (MAD), min, max and count of some runs' values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    /// Median of |x - median| (unscaled; about 0.67 standard deviations for normal noise).
    pub mad: f64,
    pub min: f64,
    pub max: f64,
    /// How many runs the values come from.
    pub runs: usize,
}

impl Spread {
    /// The spread of `values`; None when there are none or one is not finite.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let med = median(values);
        let deviations: Vec<f64> = values.iter().map(|v| (v - med).abs()).collect();
        Some(Spread {
            median: med,
            mad: median(&deviations),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            runs: values.len(),
        })
    }
}

/// The median (the mean of the middle two for an even count); NaN for no values.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad() {
        let s = Spread::of(&[10.0, 12.0, 11.0, 30.0, 9.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (11.0, 9.0, 30.0, 5));
        // deviations 1, 1, 0, 19, 2 -> median 1
        assert_eq!(s.mad, 1.0);
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.median, s.mad), (2.5, 1.0));
        assert_eq!(Spread::of(&[7.0]).unwrap().mad, 0.0);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[1.0, f64::NAN]).is_none());
    }
}
