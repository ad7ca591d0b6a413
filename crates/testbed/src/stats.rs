//! # stats
//!
//! The statistics every measurement of the harness reports: medians, nearest-rank percentiles
//! and their spread, means, the mean absolute deviation from a target (Carousel §7.1.1) and
//! Jain's fairness index. Plain functions over slices; nothing here reads a clock or a socket.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
/// Values are ordered by [`f64::total_cmp`], so a NaN sorts last and is not filtered out.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The nearest-rank percentile `q` (0 to 1) of `samples`: the smallest sample with at least
/// `q` of the samples at or below it. `None` when empty.
pub fn percentile(samples: &[u64], q: f64) -> Option<u64> {
    let mut v = samples.to_vec();
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        return None;
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    Some(v[rank - 1])
}

/// p50, p99 and the largest of some samples (nearest rank), microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Spread {
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest.
    pub max_us: u64,
}

impl Spread {
    /// Of `samples` (any order; all 0 when empty).
    pub fn of(samples: &[u64]) -> Spread {
        Spread {
            p50_us: percentile(samples, 0.50).unwrap_or(0),
            p99_us: percentile(samples, 0.99).unwrap_or(0),
            max_us: samples.iter().copied().max().unwrap_or(0),
        }
    }
}

/// The arithmetic mean of `values` (0 when empty).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// The mean absolute deviation of `windows` from `target_bps`, in percent of the target
/// (Carousel §7.1.1's conformance); `None` without windows or without a target.
pub fn mean_abs_deviation_pct(windows: &[f64], target_bps: f64) -> Option<f64> {
    if windows.is_empty() || target_bps <= 0.0 {
        return None;
    }
    let sum: f64 = windows.iter().map(|w| (w - target_bps).abs()).sum();
    Some(sum / windows.len() as f64 / target_bps * 100.0)
}

/// Jain's fairness index of `shares`, `(Σx)² / (n Σx²)`: 1 when all are equal, `1/n` when one
/// has everything (Jain, Chiu and Hawe, DEC-TR-301, 1984). `None` without shares or when all are
/// zero.
pub fn jain_index(shares: &[f64]) -> Option<f64> {
    let sum: f64 = shares.iter().sum();
    let squares: f64 = shares.iter().map(|x| x * x).sum();
    (!shares.is_empty() && squares > 0.0).then(|| sum * sum / (shares.len() as f64 * squares))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), Some(3.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&samples, 0.5), Some(50));
        assert_eq!(percentile(&samples, 0.99), Some(99));
        assert_eq!(percentile(&[5, 1, 3], 0.99), Some(5));
        assert_eq!(percentile(&[], 0.5), None);
        let s = Spread::of(&(1..=200).rev().collect::<Vec<u64>>());
        assert_eq!((s.p50_us, s.p99_us, s.max_us), (100, 198, 200));
        assert_eq!(Spread::of(&[]), Spread::default());
    }

    #[test]
    fn jain_index_is_one_for_equal_shares_and_one_over_n_for_one_taker() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_index(&[8.0, 0.0, 0.0, 0.0]), Some(0.25));
        let j = jain_index(&[1.0, 2.0]).unwrap();
        assert!((j - 0.9).abs() < 1e-12);
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0.0, 0.0]), None);
    }

    #[test]
    fn deviation_is_in_percent_of_the_target() {
        assert_eq!(mean_abs_deviation_pct(&[90.0, 110.0], 100.0), Some(10.0));
        assert_eq!(mean_abs_deviation_pct(&[], 100.0), None);
        assert_eq!(mean(&[]), 0.0);
    }
}

/// TCP segments retransmitted in the calling thread's network namespace since it was made
/// (`RetransSegs` of `/proc/thread-self/net/snmp`; run it inside a namespace with
/// [`crate::netns::Namespace::run`]); `None` when it cannot be read.
pub fn tcp_retransmitted_segments() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/snmp").ok()?;
    retransmitted_segments(&text)
}

/// `RetransSegs` of the `Tcp:` lines of an snmp table.
fn retransmitted_segments(snmp: &str) -> Option<u64> {
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let at = names.split_whitespace().position(|n| n == "RetransSegs")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod snmp_tests {
    #[test]
    fn retransmitted_segments_are_read_by_name() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm ActiveOpens RetransSegs InErrs\nTcp: 1 7 852 0\n";
        assert_eq!(super::retransmitted_segments(snmp), Some(852));
        assert_eq!(super::retransmitted_segments("Tcp: RetransSegs\n"), None);
    }

    #[test]
    fn this_namespace_counts_retransmissions() {
        assert!(super::tcp_retransmitted_segments().is_some());
    }
}
