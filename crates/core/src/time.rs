//! Time: one nanosecond [`Timestamp`] / [`Duration`] pair and the [`Clock`] seam.
//!
//! Every component of the core takes `now` as an argument; nothing here reads a clock. A real
//! monotonic clock lives in the I/O crate (`metronome-io`), a [`ManualClock`] here serves tests and
//! the simulator (CONTRIBUTING.md §2, after s2n-quic `time/clock.rs` and tokio
//! `runtime/time/source.rs`).
//!
//! Conversion of a time to a wheel slot happens in exactly one place, [`SlotClock::slot_of`], which
//! rounds *down* (a packet whose EDT lies inside a slot belongs to that slot, so it may leave up to
//! one granularity before its EDT, never after the slot is polled; Carousel §7.1.3, Figure 18).

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// Nanoseconds per second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// An instant in nanoseconds since an arbitrary epoch chosen by the [`Clock`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(u64);

impl Timestamp {
    /// The epoch (time zero).
    pub const ZERO: Timestamp = Timestamp(0);
    /// The latest representable instant (about 584 years after the epoch).
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub const fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.0))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    pub const fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(d.0))
    }
}

impl Duration {
    /// No time.
    pub const ZERO: Duration = Duration(0);
    /// The longest representable span.
    pub const MAX: Duration = Duration(u64::MAX);

    /// A span of `n` nanoseconds.
    pub const fn from_nanos(n: u64) -> Self {
        Duration(n)
    }
    /// A span of `us` microseconds.
    pub const fn from_micros(us: u64) -> Self {
        Duration(us * 1_000)
    }
    /// A span of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * 1_000_000)
    }
    /// A span of `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Duration(s * NANOS_PER_SEC)
    }
    /// The span in nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// The span in seconds, as a float (for reports only).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SEC as f64
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturating: an EDT never wraps into the past.
    fn add(self, d: Duration) -> Timestamp {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    /// Saturating at zero: time never goes backwards.
    fn sub(self, earlier: Timestamp) -> Duration {
        self.saturating_since(earlier)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, o: Duration) -> Duration {
        Duration(self.0.saturating_add(o.0))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n >= NANOS_PER_SEC && n.is_multiple_of(1_000_000) {
            write!(f, "{}s", n as f64 / 1e9)
        } else if n >= 1_000_000 && n.is_multiple_of(1_000) {
            write!(f, "{}ms", n as f64 / 1e6)
        } else if n >= 1_000 {
            write!(f, "{}us", n as f64 / 1e3)
        } else {
            write!(f, "{n}ns")
        }
    }
}

/// A source of `now`. The core never calls it; loops around the core do.
pub trait Clock {
    /// The current instant. Successive calls never go backwards.
    fn now(&self) -> Timestamp;
}

/// A clock that moves only when told to: for tests and the simulator.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: core::cell::Cell<u64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: core::cell::Cell::new(start.0),
        }
    }
    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.set(self.now.get().saturating_add(d.0));
    }
    /// Moves the clock to `t`; a `t` in the past is ignored (time never goes backwards).
    pub fn set(&self, t: Timestamp) {
        if t.0 > self.now.get() {
            self.now.set(t.0);
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.get())
    }
}

/// Maps instants to slot numbers of a fixed granularity: the one place where time becomes a slot.
///
/// Slot `s` covers `[s * g, (s + 1) * g)`. Rounding is *down*: `slot_of(t) = floor(t / g)`.
/// The division is exact for every `u64` and costs a multiply and a shift, not a divide: the
/// divisor is strength-reduced once, when the granularity is set (`strength_reduce`).
#[derive(Clone, Copy, Debug)]
pub struct SlotClock {
    granularity: u64,
    divisor: strength_reduce::StrengthReducedU64,
}

impl PartialEq for SlotClock {
    fn eq(&self, other: &Self) -> bool {
        self.granularity == other.granularity
    }
}

impl Eq for SlotClock {}

impl SlotClock {
    /// A slot clock of `granularity` (at least one nanosecond).
    pub fn new(granularity: Duration) -> Self {
        let granularity = granularity.0.max(1);
        SlotClock {
            granularity,
            divisor: strength_reduce::StrengthReducedU64::new(granularity),
        }
    }
    /// The slot granularity.
    pub fn granularity(&self) -> Duration {
        Duration(self.granularity)
    }
    /// The slot holding `t`, rounding down.
    #[inline]
    pub fn slot_of(&self, t: Timestamp) -> u64 {
        t.0 / self.divisor
    }
    /// The instant at which slot `slot` begins.
    #[inline]
    pub fn start_of(&self, slot: u64) -> Timestamp {
        Timestamp(slot.saturating_mul(self.granularity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(
            Timestamp::from_nanos(5) - Timestamp::from_nanos(9),
            Duration::ZERO
        );
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
    }

    #[test]
    fn manual_clock_never_goes_back() {
        let c = ManualClock::new(Timestamp::from_nanos(100));
        c.set(Timestamp::from_nanos(50));
        assert_eq!(c.now().as_nanos(), 100);
        c.advance(Duration::from_micros(2));
        assert_eq!(c.now().as_nanos(), 2_100);
    }

    #[test]
    fn slots_round_down() {
        let s = SlotClock::new(Duration::from_micros(2));
        assert_eq!(s.slot_of(Timestamp::from_nanos(1_999)), 0);
        assert_eq!(s.slot_of(Timestamp::from_nanos(2_000)), 1);
        assert_eq!(s.start_of(3).as_nanos(), 6_000);
    }

    #[test]
    fn strength_reduced_division_is_exact() {
        for g in [
            1u64,
            2,
            3,
            7,
            1_000,
            2_000,
            4_096,
            999_983,
            4_000_000,
            u64::MAX / 3,
        ] {
            let s = SlotClock::new(Duration::from_nanos(g));
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for t in [0, 1, g - 1, g, g + 1, u64::MAX - 1, u64::MAX] {
                assert_eq!(s.slot_of(Timestamp(t)), t / g, "t={t} g={g}");
            }
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                assert_eq!(s.slot_of(Timestamp(x)), x / g, "t={x} g={g}");
            }
        }
    }

    #[test]
    fn durations_display() {
        assert_eq!(Duration::from_micros(2).to_string(), "2us");
        assert_eq!(Duration::from_secs(2).to_string(), "2s");
        assert_eq!(Duration::from_nanos(100).to_string(), "100ns");
    }
}
