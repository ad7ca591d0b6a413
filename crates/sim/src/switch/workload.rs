//! Flow-size distributions and Poisson flow arrivals for the switch-port scenario (MQ-ECN §5.1.2:
//! "a client/server application to generate dynamic traffic according to the web search workload
//! \[6\]" with requests "based on a Poisson process").
//!
//! [`FlowSizeCdf`] reads an empirical CDF in the text format of `lab/data/websearch.cdf` (the file
//! MQ-ECN's simulations use, sizes in 1460-byte packets) and samples it by inverse CDF with linear
//! interpolation between points, the way ns-2's `EmpiricalRandomVariable` (used by pFabric's and
//! MQ-ECN's scripts) does. [`FlowSizeCdf::websearch`] is that file, embedded.
//!
//! Arrivals: for a load `rho` of a port of rate `C`, flows arrive at rate
//! `lambda = rho C / (8 E[bytes on the wire])`, inter-arrival times exponential
//! ([`FlowSizeCdf::arrival_rate`]), drawn from one seeded generator ([`crate::host::Rng`]).

use crate::host::Rng;

/// The web-search distribution, `lab/data/websearch.cdf`, embedded at build time.
pub const WEBSEARCH_CDF: &str = include_str!("../../../../lab/data/websearch.cdf");

/// Payload bytes of one packet of the CDF files: 1460 (one MSS of a 1500-byte MTU; MQ-ECN's
/// and pFabric's ns-2 scripts multiply the file's sizes by 1460).
pub const CDF_PACKET_PAYLOAD: u64 = 1460;

/// A CDF file that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("flow-size CDF line {line}: {why}")]
pub struct CdfError {
    /// 1-based line number (0: the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub why: &'static str,
}

/// An empirical flow-size CDF: points `(size in packets, cumulative probability)`.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSizeCdf {
    points: Vec<(f64, f64)>,
}

impl FlowSizeCdf {
    /// Parses the text format of `lab/data/websearch.cdf`: `<packets> <probability>` per line,
    /// `#` comments, sizes >= 1 and non-decreasing, probabilities in [0, 1], non-decreasing,
    /// the last exactly 1.
    pub fn parse(text: &str) -> Result<Self, CdfError> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("").trim();
            if body.is_empty() {
                continue;
            }
            let err = |why| CdfError { line, why };
            let mut it = body.split_whitespace();
            let (Some(x), Some(p), None) = (it.next(), it.next(), it.next()) else {
                return Err(err("expected two numbers"));
            };
            let x: f64 = x.parse().map_err(|_| err("size is not a number"))?;
            let p: f64 = p.parse().map_err(|_| err("probability is not a number"))?;
            if !(x >= 1.0 && x.is_finite()) {
                return Err(err("size must be at least 1 packet"));
            }
            if !(0.0..=1.0).contains(&p) {
                return Err(err("probability outside [0, 1]"));
            }
            if let Some(&(px, pp)) = points.last() {
                if x < px || p < pp {
                    return Err(err("sizes and probabilities must not decrease"));
                }
            }
            points.push((x, p));
        }
        match points.last() {
            Some(&(_, 1.0)) => Ok(FlowSizeCdf { points }),
            _ => Err(CdfError {
                line: 0,
                why: "the last probability must be 1",
            }),
        }
    }

    /// The web-search distribution ([`WEBSEARCH_CDF`]).
    pub fn websearch() -> Self {
        // The embedded file is part of the repository and checked by a unit test.
        Self::parse(WEBSEARCH_CDF).expect("lab/data/websearch.cdf is valid")
    }

    /// The size in packets at cumulative probability `u` in [0, 1): linear interpolation
    /// between the points around `u`, rounded up to whole packets (at least 1).
    pub fn quantile(&self, u: f64) -> u32 {
        let mut prev = (self.points[0].0, 0.0);
        for &(x, p) in &self.points {
            if u < p {
                let (x0, p0) = prev;
                let x = x0 + (x - x0) * (u - p0) / (p - p0);
                return x.ceil().max(1.0) as u32;
            }
            prev = (x, p);
        }
        prev.0.ceil().max(1.0) as u32
    }

    /// One flow size in packets, drawn with `rng`.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        self.quantile(uniform(rng))
    }

    /// The mean flow size in packets of [`FlowSizeCdf::sample`] (rounding up included), exact.
    pub fn mean_packets(&self) -> f64 {
        let mut mean = 0.0;
        let mut prev = (self.points[0].0, 0.0);
        for &(x, p) in &self.points {
            let (x0, p0) = prev;
            let mass = p - p0;
            if mass > 0.0 {
                mean += mass * mean_ceil(x0, x);
            }
            prev = (x, p);
        }
        mean
    }

    /// Flows per second that load a port of `line_rate_bps` to `load` (0..1) when every packet
    /// takes `wire_bytes` on the wire.
    pub fn arrival_rate(&self, load: f64, line_rate_bps: u64, wire_bytes: u32) -> f64 {
        load * line_rate_bps as f64 / (8.0 * f64::from(wire_bytes) * self.mean_packets())
    }
}

/// `E[ceil(X)]` for `X` uniform on `[a, b]` (`ceil(a)` when `a == b`), at least 1.
fn mean_ceil(a: f64, b: f64) -> f64 {
    if b <= a {
        return a.ceil().max(1.0);
    }
    // Integrate ceil over [a, b] piece by piece: on (k - 1, k] it is k.
    let mut total = 0.0;
    let mut lo = a;
    while lo < b {
        let k = (lo.floor() + 1.0).min(b.ceil());
        let hi = k.min(b);
        total += (hi - lo) * k.max(1.0);
        lo = hi;
    }
    total / (b - a)
}

/// A uniform value in [0, 1) with 53 random bits.
pub fn uniform(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An exponential inter-arrival time in nanoseconds for `rate_per_s` arrivals per second.
pub fn exponential_ns(rng: &mut Rng, rate_per_s: f64) -> u64 {
    let u = uniform(rng);
    (-(1.0 - u).ln() / rate_per_s * 1e9).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Rng;
    use proptest::prelude::{prop_assert, proptest};

    /// The reference: the smallest integer `n >= 1` whose interpolated CDF value `F(n)` reaches
    /// `u` (`F` piecewise linear through the points), found by scanning `n` upwards.
    fn reference_quantile(points: &[(f64, f64)], u: f64) -> u32 {
        let cdf = |x: f64| {
            let mut prev = (points[0].0, 0.0);
            let mut f = 0.0;
            for &(px, pp) in points {
                if x >= px {
                    f = pp;
                } else if x > prev.0 {
                    f = prev.1 + (pp - prev.1) * (x - prev.0) / (px - prev.0);
                    break;
                } else {
                    break;
                }
                prev = (px, pp);
            }
            f
        };
        let mut n = 1u32;
        while cdf(f64::from(n)) < u && f64::from(n) < points[points.len() - 1].0 {
            n += 1;
        }
        n
    }

    proptest! {
        #[test]
        fn quantile_is_monotone_and_bounded(a in 0.0f64..1.0, b in 0.0f64..1.0) {
            let c = FlowSizeCdf::websearch();
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(c.quantile(lo) <= c.quantile(hi));
            prop_assert!((6..=20_000).contains(&c.quantile(lo)));
        }

        #[test]
        fn quantile_matches_a_scan_of_the_cdf(
            steps in proptest::collection::vec((1u32..50, 0.01f64..0.5), 1..6),
            u in 0.0f64..1.0,
        ) {
            // A random CDF: sizes increase by 1..50 packets, probabilities by random weights.
            let total: f64 = steps.iter().map(|s| s.1).sum();
            let mut points = vec![(1.0, 0.0)];
            let (mut x, mut p) = (1.0, 0.0);
            for (dx, w) in &steps {
                x += f64::from(*dx);
                p += w / total;
                points.push((x, p.min(1.0)));
            }
            let last = points.len() - 1;
            points[last].1 = 1.0;
            let c = FlowSizeCdf { points: points.clone() };
            let got = c.quantile(u);
            let want = reference_quantile(&points, u);
            prop_assert!(got == want, "u {} got {} want {} {:?}", u, got, want, points);
        }
    }

    #[test]
    fn websearch_file_parses_with_the_published_points() {
        let c = FlowSizeCdf::websearch();
        assert_eq!(c.points.len(), 12);
        assert_eq!(c.points[1], (6.0, 0.15));
        assert_eq!(c.points[10], (6667.0, 0.97));
        assert_eq!(c.points[11], (20000.0, 1.0));
    }

    #[test]
    fn quantiles_interpolate_between_points() {
        let c = FlowSizeCdf::websearch();
        assert_eq!(c.quantile(0.0), 6);
        assert_eq!(c.quantile(0.1499), 6, "point mass at 6 packets");
        assert_eq!(
            c.quantile(0.175),
            10,
            "halfway from 6 to 13 is 9.5, rounded up"
        );
        assert_eq!(
            c.quantile(0.95),
            5_715,
            "3333 + 3334 * 0.05 / 0.07 = 5714.4"
        );
        assert_eq!(c.quantile(0.999_999), 20_000);
    }

    #[test]
    fn samples_match_the_cdf_and_the_exact_mean() {
        let c = FlowSizeCdf::websearch();
        let mut rng = Rng::for_flow(42, 0);
        let n = 200_000;
        let draws: Vec<u32> = (0..n).map(|_| c.sample(&mut rng)).collect();
        for (x, p) in [(6, 0.15), (53, 0.53), (667, 0.7), (3333, 0.9)] {
            let below = draws.iter().filter(|&&d| d <= x).count() as f64 / n as f64;
            assert!(
                (below - p).abs() < 0.01,
                "P(size <= {x}) = {below}, CDF says {p}"
            );
        }
        let mean = draws.iter().map(|&d| f64::from(d)).sum::<f64>() / n as f64;
        let exact = c.mean_packets();
        assert!((mean / exact - 1.0).abs() < 0.03, "{mean} vs {exact}");
        // The web-search mean is about 1.1k packets (1.6 MB), the figure papers quote.
        assert!((1000.0..1200.0).contains(&exact), "{exact}");
    }

    #[test]
    fn bad_files_are_rejected_with_the_line() {
        assert_eq!(FlowSizeCdf::parse("5 0.5\n4 1").unwrap_err().line, 2);
        assert_eq!(FlowSizeCdf::parse("5 0.5\n").unwrap_err().line, 0);
        assert_eq!(FlowSizeCdf::parse("0 1").unwrap_err().line, 1);
        assert_eq!(FlowSizeCdf::parse("# c\n1 x").unwrap_err().line, 2);
        assert!(FlowSizeCdf::parse("1 0\n10 1 # ok").is_ok());
    }

    #[test]
    fn exponential_gaps_have_the_requested_mean() {
        let mut rng = Rng::for_flow(1, 1);
        let n = 100_000;
        let total: u64 = (0..n).map(|_| exponential_ns(&mut rng, 1000.0)).sum();
        let mean_us = total as f64 / n as f64 / 1e3;
        assert!((mean_us - 1000.0).abs() < 15.0, "{mean_us}");
    }
}
