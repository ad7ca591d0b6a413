//! Rates in bits per second and the conversion of a packet length into its transmission time.
//!
//! Carousel §5.1.1 advances a policy's timestamp by `len / R` per packet. Dividing on every packet
//! is avoided: a [`Rate`] carries the nanoseconds per byte in 40.24 fixed point, computed once when
//! the rate is set, so [`Rate::transmit_time`] is one widening multiply and a shift. The fixed
//! point keeps the relative error below 2^-24 x (ns per byte)^-1 per byte: at 400 Gbit/s (0.02 ns
//! per byte) that is 3 parts per million, far below any measurement the lab makes.
//!
//! Rates are written as tc(8) writes them ([`Rate::from_str`](core::str::FromStr)): `100mbit`,
//! `1.5gbit`, `10gibit`, `125mbps` (bytes per second, as in tc), a bare number being bit/s.

use crate::time::{Duration, NANOS_PER_SEC};
use core::fmt;

/// Fractional bits of the nanoseconds-per-byte fixed point.
const FRAC_BITS: u32 = 24;

/// A rate in bits per second, with its per-byte transmission time precomputed.
///
/// A zero rate sends nothing, and every API that accepts a rate reads it so:
/// * a [`Timestamper`](crate::timestamp::Timestamper) policy at zero is paused: a packet passing it
///   gets no EDT ([`Paused`](crate::timestamp::Paused) from `try_stamp_after`,
///   [`Timestamp::MAX`](crate::time::Timestamp::MAX) from `stamp` and `stamp_after`) and changes
///   no policy's state; a rate set above zero later takes effect from the next packet, granting at
///   most the policy's configured burst;
/// * the [`Mltw`](crate::mltw::Mltw), which releases by EDT and uses a rate only to pick a
///   rounding granularity, rounds a zero-rate destination at its finest level, so no packet leaves
///   before its EDT rounded down to `g_min`;
/// * the [`Nba`](crate::nba::Nba) shares a zero aggregate as zero rates, and a core's zero share
///   pauses that core's policy as above;
/// * a token bucket ([`TokenBucketRr`](crate::token_bucket_rr::TokenBucketRr)'s classes,
///   [`TbfBuffer`](crate::zd::TbfBuffer)) at zero releases nothing, whatever its tokens, and
///   reports `next_due` as [`Timestamp::MAX`](crate::time::Timestamp::MAX); a rate above zero set
///   later releases from then on, with at most the burst it kept;
/// * [`NicPic`](crate::nicpic::NicPic) refuses a zero rate with a named error (a class at zero
///   would hold its queue forever).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    bps: u64,
    /// Nanoseconds per byte, 40.24 fixed point; `u64::MAX` for a zero rate.
    ns_per_byte_fp: u64,
}

impl Rate {
    /// Builds a rate of `bps` bits per second. A zero rate sends nothing: its transmit time is
    /// [`Duration::MAX`] (see [`Rate`] for how each API reads it).
    pub const fn from_bps(bps: u64) -> Self {
        // 8e9 << 24 = 1.34e17, fits u64; rounded to nearest.
        let ns_per_byte_fp = match (((8 * NANOS_PER_SEC) << FRAC_BITS) + bps / 2).checked_div(bps) {
            Some(v) => v,
            None => u64::MAX,
        };
        Rate {
            bps,
            ns_per_byte_fp,
        }
    }
    /// `n` kilobits per second.
    pub const fn kbps(n: u64) -> Self {
        Self::from_bps(n * 1_000)
    }
    /// `n` megabits per second.
    pub const fn mbps(n: u64) -> Self {
        Self::from_bps(n * 1_000_000)
    }
    /// `n` gigabits per second.
    pub const fn gbps(n: u64) -> Self {
        Self::from_bps(n * 1_000_000_000)
    }
    /// The rate in bits per second.
    pub const fn bps(&self) -> u64 {
        self.bps
    }
    /// The time `bytes` take to leave at this rate, rounded to the nearest nanosecond.
    #[inline]
    pub fn transmit_time(&self, bytes: u64) -> Duration {
        if self.bps == 0 {
            return Duration::MAX;
        }
        let ns = (self.transmit_time_fp(bytes) + (1 << (FRAC_BITS - 1))) >> FRAC_BITS;
        Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
    }

    /// The time `bytes` take to leave, in nanoseconds with [`Rate::FRAC_BITS`] fractional bits,
    /// for callers that accumulate many packets without rounding each one.
    #[inline]
    pub fn transmit_time_fp(&self, bytes: u64) -> u128 {
        bytes as u128 * self.ns_per_byte_fp as u128
    }

    /// Fractional bits of [`Rate::transmit_time_fp`].
    pub const FRAC_BITS: u32 = FRAC_BITS;
    /// The bytes that leave in `d` at this rate (rounded down).
    pub fn bytes_in(&self, d: Duration) -> u64 {
        let b = d.as_nanos() as u128 * self.bps as u128 / (8 * NANOS_PER_SEC as u128);
        b.min(u64::MAX as u128) as u64
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rate({self})")
    }
}

impl fmt::Display for Rate {
    /// tc-like: `500mbit`, `1gbit`, `1500kbit`, `7bit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.bps;
        if b >= 1_000_000_000 && b.is_multiple_of(1_000_000_000) {
            write!(f, "{}gbit", b / 1_000_000_000)
        } else if b >= 1_000_000 && b.is_multiple_of(1_000_000) {
            write!(f, "{}mbit", b / 1_000_000)
        } else if b >= 1_000 && b.is_multiple_of(1_000) {
            write!(f, "{}kbit", b / 1_000)
        } else {
            write!(f, "{b}bit")
        }
    }
}

/// Why a string is not a tc-like rate ([`Rate`]'s `FromStr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ParseRateError {
    /// Nothing but whitespace.
    #[error("empty rate")]
    Empty,
    /// A leading minus sign: rates are never negative.
    #[error("negative rate")]
    Negative,
    /// No digits where the number should be (`mbit`, `.mbit`, `1.2.3mbit`).
    #[error("no number before the unit")]
    InvalidNumber,
    /// A unit tc does not know (see [`RATE_UNITS`]).
    #[error("unknown unit (tc's: bit, kbit, mbit, gbit, tbit, kibit, mibit, gibit, tibit, bps, kbps, mbps, gbps, tbps, kibps, mibps, gibps, tibps)")]
    UnknownUnit,
    /// More than 2^64 - 1 bit/s.
    #[error("rate above 2^64 - 1 bit/s")]
    Overflow,
}

/// tc(8)'s rate units (`tc/tc_util.c`, `get_rate`), matched without regard to case, with their
/// value in bit/s. `k`, `m`, `g`, `t` are SI (1000-based), `ki`, `mi`, `gi`, `ti` IEC (1024-based);
/// the `bps` family counts **bytes** per second, as in tc.
pub const RATE_UNITS: [(&str, u64); 18] = [
    ("bit", 1),
    ("kbit", 1_000),
    ("mbit", 1_000_000),
    ("gbit", 1_000_000_000),
    ("tbit", 1_000_000_000_000),
    ("kibit", 1 << 10),
    ("mibit", 1 << 20),
    ("gibit", 1 << 30),
    ("tibit", 1 << 40),
    ("bps", 8),
    ("kbps", 8_000),
    ("mbps", 8_000_000),
    ("gbps", 8_000_000_000),
    ("tbps", 8_000_000_000_000),
    ("kibps", 8 << 10),
    ("mibps", 8 << 20),
    ("gibps", 8 << 30),
    ("tibps", 8 << 40),
];

/// Fraction digits kept when parsing a decimal rate; later digits are ignored (they change the
/// result by less than 10^-24 of the unit).
const MAX_FRACTION_DIGITS: u32 = 24;

impl core::str::FromStr for Rate {
    type Err = ParseRateError;

    /// Parses a tc-like rate: a decimal number (`100`, `1.5`, `.5`) and an optional unit from
    /// [`RATE_UNITS`] (no unit: bit/s), rounded to the nearest bit/s. Surrounding whitespace and
    /// whitespace between number and unit are allowed.
    ///
    /// ```
    /// use metronome_core::Rate;
    /// assert_eq!("1.5gbit".parse::<Rate>(), Ok(Rate::from_bps(1_500_000_000)));
    /// assert_eq!("125mbps".parse::<Rate>(), Ok(Rate::gbps(1))); // bytes per second, as in tc
    /// assert_eq!("1kibit".parse::<Rate>(), Ok(Rate::from_bps(1024)));
    /// assert!("100mbitz".parse::<Rate>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(ParseRateError::Empty);
        }
        if s.starts_with('-') {
            return Err(ParseRateError::Negative);
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, unit) = (&s[..split], s[split..].trim_start());
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(ParseRateError::InvalidNumber);
        }
        let multiplier = if unit.is_empty() {
            1
        } else {
            RATE_UNITS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(unit))
                .map(|&(_, m)| m)
                .ok_or(ParseRateError::UnknownUnit)?
        };
        scale_decimal(number, multiplier)
            .map(Rate::from_bps)
            .ok_or(ParseRateError::Overflow)
    }
}

/// `number * multiplier` for a decimal `number` (`12`, `1.5`, `.25`: ASCII digits and at most one
/// dot, checked by the caller), rounded to the nearest integer and computed exactly in integers;
/// `None` if the result does not fit a `u64`. Digits past the 24th after the dot are ignored.
/// Shared by rate parsing here and the daemon's duration and size parsing.
pub fn scale_decimal(number: &str, multiplier: u64) -> Option<u64> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let mut whole: u128 = 0;
    for d in int.bytes() {
        whole = whole
            .checked_mul(10)?
            .checked_add(u128::from(d.wrapping_sub(b'0')))
            .filter(|&w| w <= u128::from(u64::MAX))?;
    }
    let (mut num, mut den) = (0u128, 1u128);
    for d in frac.bytes().take(MAX_FRACTION_DIGITS as usize) {
        num = num * 10 + u128::from(d.wrapping_sub(b'0'));
        den *= 10;
    }
    let m = u128::from(multiplier);
    // num < den <= 10^24 < 2^80; with a multiplier beyond 2^48 the products are checked.
    let total = whole
        .checked_mul(m)?
        .checked_add(num.checked_mul(m)?.checked_add(den / 2)? / den)?;
    u64::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmit_times() {
        assert_eq!(Rate::gbps(1).transmit_time(1500).as_nanos(), 12_000);
        assert_eq!(Rate::mbps(500).transmit_time(1500).as_nanos(), 24_000);
        assert_eq!(Rate::gbps(100).transmit_time(1500).as_nanos(), 120);
        assert_eq!(
            Rate::from_bps(1).transmit_time(1).as_nanos(),
            8 * NANOS_PER_SEC
        );
        assert_eq!(Rate::from_bps(0).transmit_time(1), Duration::MAX);
    }

    #[test]
    fn long_trains_stay_accurate() {
        // One million 1500-byte packets at 400 Gbit/s: 30 ms exactly; allow 3 ppm.
        let t = Rate::gbps(400).transmit_time(1_500_000_000).as_nanos();
        assert!((30_000_000 - t as i64).abs() <= 90, "{t}");
    }

    #[test]
    fn bytes_in_inverts_transmit_time() {
        assert_eq!(Rate::gbps(1).bytes_in(Duration::from_micros(12)), 1500);
    }

    #[test]
    fn display_is_tc_like() {
        assert_eq!(Rate::mbps(500).to_string(), "500mbit");
        assert_eq!(Rate::gbps(1).to_string(), "1gbit");
        assert_eq!(Rate::kbps(1500).to_string(), "1500kbit");
    }

    #[test]
    fn parses_tc_units() {
        let bps = |s: &str| s.parse::<Rate>().map(|r| r.bps());
        assert_eq!(bps("100mbit"), Ok(100_000_000));
        assert_eq!(bps("1gbit"), Ok(1_000_000_000));
        assert_eq!(bps("2tbit"), Ok(2_000_000_000_000));
        assert_eq!(bps("7bit"), Ok(7));
        assert_eq!(bps("1500kbit"), Ok(1_500_000));
        assert_eq!(bps("1kibit"), Ok(1024));
        assert_eq!(bps("1mibit"), Ok(1 << 20));
        assert_eq!(bps("1gibit"), Ok(1 << 30));
        assert_eq!(bps("1tibit"), Ok(1 << 40));
        assert_eq!(bps("12345"), Ok(12_345));
        assert_eq!(bps("  100 Mbit "), Ok(100_000_000));
        assert_eq!(bps("1GBIT"), Ok(1_000_000_000));
    }

    #[test]
    fn bps_units_are_bytes_per_second_as_in_tc() {
        let bps = |s: &str| s.parse::<Rate>().map(|r| r.bps());
        assert_eq!(bps("1bps"), Ok(8));
        assert_eq!(bps("125mbps"), Ok(1_000_000_000));
        assert_eq!(bps("1kbps"), Ok(8_000));
        assert_eq!(bps("1gbps"), Ok(8_000_000_000));
        assert_eq!(bps("1tbps"), Ok(8_000_000_000_000));
        assert_eq!(bps("1kibps"), Ok(8 * 1024));
        assert_eq!(bps("1mibps"), Ok(8 << 20));
    }

    #[test]
    fn parses_decimals_rounding_to_the_nearest_bit() {
        let bps = |s: &str| s.parse::<Rate>().map(|r| r.bps());
        assert_eq!(bps("1.5gbit"), Ok(1_500_000_000));
        assert_eq!(bps(".5mbit"), Ok(500_000));
        assert_eq!(bps("2.mbit"), Ok(2_000_000));
        assert_eq!(bps("0.0004kbit"), Ok(0));
        assert_eq!(bps("0.0005kbit"), Ok(1));
        assert_eq!(bps("1.0000000000000000000000000001gbit"), Ok(1_000_000_000));
    }

    #[test]
    fn rejects_bad_rates() {
        let err = |s: &str| s.parse::<Rate>().unwrap_err();
        assert_eq!(err(""), ParseRateError::Empty);
        assert_eq!(err("   "), ParseRateError::Empty);
        assert_eq!(err("-1mbit"), ParseRateError::Negative);
        assert_eq!(err("mbit"), ParseRateError::InvalidNumber);
        assert_eq!(err(".mbit"), ParseRateError::InvalidNumber);
        assert_eq!(err("1.2.3mbit"), ParseRateError::InvalidNumber);
        assert_eq!(err("100mbitz"), ParseRateError::UnknownUnit);
        assert_eq!(err("100mb"), ParseRateError::UnknownUnit);
        assert_eq!(err("1e9"), ParseRateError::UnknownUnit);
        assert_eq!(err("+1mbit"), ParseRateError::InvalidNumber);
        assert_eq!(err("18446744073709551616"), ParseRateError::Overflow);
        assert_eq!(err("20000000tbit"), ParseRateError::Overflow);
        assert_eq!(
            err("99999999999999999999999999999999999999999bit"),
            ParseRateError::Overflow
        );
        assert_eq!(
            "18446744073709551615".parse::<Rate>().map(|r| r.bps()),
            Ok(u64::MAX)
        );
    }

    #[test]
    fn display_round_trips_through_parse() {
        for r in [
            Rate::mbps(500),
            Rate::gbps(40),
            Rate::kbps(1500),
            Rate::from_bps(7),
        ] {
            assert_eq!(r.to_string().parse::<Rate>(), Ok(r));
        }
    }
}
