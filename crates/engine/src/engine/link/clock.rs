//! The link's departure clock: when the shared link is free, at its rate.
//!
//! * The time the link is free is kept in nanoseconds with [`Rate::FRAC_BITS`] fractional bits,
//!   so back-to-back frames fill the link exactly.
//! * A packet may leave when the link is free; its departure is stamped at the later of that
//!   time and `now` minus the catch-up allowance (`[link] burst` bytes at the rate), so a loop
//!   that wakes late sends what the link owes in one batch, never more than `burst` beyond the
//!   rate.
//! * An empty port makes the link idle ([`LinkClock::wake`]): the next packet finds it free at
//!   `now`.

use metronome_core::{Rate, Timestamp};

/// The link's departure clock. See the module docs.
#[derive(Clone, Copy, Debug)]
pub struct LinkClock {
    rate: Rate,
    /// When the link is free, in nanoseconds with [`Rate::FRAC_BITS`] fractional bits.
    free_fp: u128,
    /// The catch-up allowance in the same unit.
    catch_up_fp: u128,
    burst_bytes: u64,
}

impl LinkClock {
    /// A link of `rate` that may send `burst_bytes` back to back to catch up, free at 0.
    pub fn new(rate: Rate, burst_bytes: u64) -> LinkClock {
        LinkClock {
            rate,
            free_fp: 0,
            catch_up_fp: rate.transmit_time_fp(burst_bytes),
            burst_bytes,
        }
    }

    /// When the link is free (rounded up to the nanosecond).
    pub fn free_at(&self) -> Timestamp {
        let ns = self.free_fp.div_ceil(1 << Rate::FRAC_BITS);
        Timestamp::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// True when a packet may start at `now`.
    pub fn ready(&self, now: Timestamp) -> bool {
        self.free_at() <= now
    }

    /// The link was idle until `now` (its queue was empty): it is free from `now` at the latest.
    pub fn wake(&mut self, now: Timestamp) {
        self.free_fp = self.free_fp.max(fp(now));
    }

    /// Stamps the departure of `wire_bytes` at `now` (the link must be [`LinkClock::ready`]):
    /// the later of when the link is free and `now` minus the catch-up allowance. Returns the
    /// departure; the link is then busy for `wire_bytes / rate`.
    pub fn send(&mut self, now: Timestamp, wire_bytes: u64) -> Timestamp {
        let start = self.free_fp.max(fp(now).saturating_sub(self.catch_up_fp));
        self.free_fp = start + self.rate.transmit_time_fp(wire_bytes);
        Timestamp::from_nanos(u64::try_from(start >> Rate::FRAC_BITS).unwrap_or(u64::MAX))
    }

    /// Changes the rate from the next departure on (the current one keeps its end).
    pub fn set_rate(&mut self, rate: Rate, burst_bytes: u64) {
        self.rate = rate;
        self.burst_bytes = burst_bytes;
        self.catch_up_fp = rate.transmit_time_fp(burst_bytes);
    }

    /// The link's rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }
}

fn fp(t: Timestamp) -> u128 {
    u128::from(t.as_nanos()) << Rate::FRAC_BITS
}
