//! The real clock: CLOCK_MONOTONIC through `std::time::Instant`, as nanoseconds since the clock
//! was created (CONTRIBUTING.md §2, after tokio `runtime/time/source.rs`).

use metronome_core::{Clock, Timestamp};
use std::time::Instant;

/// A monotonic clock reading nanoseconds since its creation. Never goes backwards.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Timestamp {
        let ns = self.origin.elapsed().as_nanos();
        Timestamp::from_nanos(ns.min(u64::MAX as u128) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_backwards() {
        let c = MonotonicClock::new();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
    }
}
