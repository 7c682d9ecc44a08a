//! Order statistics over a handful of samples.
//!
//! Rounds are few (3 by default) and noisy, so the summary is the median and the full range
//! rather than a mean and a deviation that would pretend to a distribution we do not have.
use serde::Serialize;

/// The median and the range of one metric's samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// `None` for no samples; NaN samples are ignored, since a failed parse must not poison
    /// the ordering of the rest.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let sorted = sorted(samples);
        Some(Self {
            median: median_sorted(&sorted)?,
            min: *sorted.first()?,
            max: *sorted.last()?,
        })
    }

    pub(crate) fn is_single(&self) -> bool {
        self.min == self.max
    }
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The median; even counts average the two middle samples.
pub(crate) fn median(samples: &[f64]) -> Option<f64> {
    median_sorted(&sorted(samples))
}

/// Nearest-rank percentile: always one of the samples, so a p99 of 200 pings is a latency that
/// really happened rather than an interpolation between two of them.
pub(crate) fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    let sorted = sorted(samples);
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn median_ignores_nan() {
        assert_eq!(median(&[f64::NAN, 1.0, 5.0, 3.0]), Some(3.0));
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn p99_is_nearest_rank() {
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 99.0), Some(99.0));
        assert_eq!(percentile(&hundred, 100.0), Some(100.0));
        assert_eq!(percentile(&hundred, 50.0), Some(50.0));
        let two_hundred: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        assert_eq!(percentile(&two_hundred, 99.0), Some(198.0));
        // Few samples: p99 is the largest.
        assert_eq!(percentile(&[5.0, 1.0, 9.0], 99.0), Some(9.0));
        assert_eq!(percentile(&[5.0], 0.0), Some(5.0));
        assert_eq!(percentile(&[], 99.0), None);
        assert_eq!(percentile(&[1.0], 101.0), None);
    }

    #[test]
    fn spread_is_median_min_max() {
        let s = Spread::of(&[3.0, 9.0, 1.0, 4.0]).unwrap();
        assert_eq!(
            s,
            Spread {
                median: 3.5,
                min: 1.0,
                max: 9.0
            }
        );
        assert!(!s.is_single());
        assert!(Spread::of(&[2.0]).unwrap().is_single());
        assert_eq!(Spread::of(&[]), None);
    }
}
