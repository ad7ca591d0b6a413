//! The secret that keys the daemon's flow hashing, drawn from the OS at every start.
//!
//! Per-flow state is found by hashing the 5-tuple: the classifier's [`metronome_packet::flow_id`]
//! selects a flow's bucket in the [`crate::flow_table`] (four ways, then the class's
//! overflow entry), and ACK shaping keys its flows by a SipHash of the tuple
//! ([`crate::ack_shaping`]). Neither hash is cryptographic in the sense of hiding its key
//! from someone who sees many outputs, but both are useless to a sender who does not know the key:
//! with a known seed, a sender could compute tuples that land in a victim flow's bucket and fill
//! it, and the victim's packets would share the class's overflow entry with them. So `metronome
//! run` draws a [`FlowSeed`] from the OS random source ([`FlowSeed::draw`], the `getrandom` crate:
//! the `getrandom(2)` system call) when it starts, and hands it to every engine it builds
//! (`crate::engine::Engine::seeded`). The engine keeps it for its whole life: a SIGHUP
//! reload rebuilds the classifier with the same seed, so live flows keep their
//! [`metronome_core::FlowId`] and their state. With silos (`cores > 1`) each silo draws its own
//! seed when it is built: the kernel's `PACKET_FANOUT_HASH` (its own per-boot secret) decides which
//! silo sees a flow, and a silo's tables are its own, so nothing needs the silos to agree on flow
//! ids.
//!
//! Tests, the simulator, the lab and the benchmarks build engines with [`FlowSeed::FIXED`]
//! (`crate::engine::Engine::new`), so flow ids and the outputs that depend on them are
//! the same in every run.

use metronome_packet::DEFAULT_FLOW_SEED;

/// The keys of the daemon's flow hashing: the classifier's 64-bit flow-hash seed and the two
/// 64-bit SipHash keys of ACK shaping's flow keys, drawn independently. Its `Debug` form does
/// not show them (they would let a reader of the logs aim collisions).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FlowSeed {
    flow_hash: u64,
    ack_keys: [u64; 2],
}

impl std::fmt::Debug for FlowSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == FlowSeed::FIXED {
            f.write_str("FlowSeed::FIXED")
        } else {
            f.write_str("FlowSeed(secret)")
        }
    }
}

impl FlowSeed {
    /// The deterministic seed of tests, the simulator, the lab and the benchmarks: the packet
    /// crate's [`DEFAULT_FLOW_SEED`] and SipHash keys `(0, 0)` (those of
    /// `std::hash::SipHasher::new`).
    pub const FIXED: FlowSeed = FlowSeed {
        flow_hash: DEFAULT_FLOW_SEED,
        ack_keys: [0, 0],
    };

    /// A seed of the given values (tests that need two distinct known seeds).
    pub const fn from_parts(flow_hash: u64, ack_keys: [u64; 2]) -> FlowSeed {
        FlowSeed {
            flow_hash,
            ack_keys,
        }
    }

    /// 192 fresh bits from the OS random source. Where that fails (no `getrandom(2)` and no
    /// readable `/dev/urandom`, which the crate falls back to), the seed is mixed from the wall
    /// clock, the process id and a stack address, and a warning is logged: such a seed is
    /// unpredictable to a remote sender only as far as the start time is, which is better than
    /// a public constant and does not keep the daemon from starting.
    pub fn draw() -> FlowSeed {
        let mut bytes = [0u8; 24];
        match getrandom::fill(&mut bytes) {
            Ok(()) => {
                let word = |k: usize| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(&bytes[8 * k..8 * k + 8]);
                    u64::from_ne_bytes(w)
                };
                FlowSeed {
                    flow_hash: word(0),
                    ack_keys: [word(1), word(2)],
                }
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    "no OS random source: flow-hash seed mixed from the clock and the process id"
                );
                Self::from_clock()
            }
        }
    }

    /// The fallback of [`FlowSeed::draw`]: the wall clock in nanoseconds, the process id and the
    /// address of a local (randomised by ASLR), each mixed through SipHash.
    fn from_clock() -> FlowSeed {
        use std::hash::{Hash, Hasher};
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let local = 0u8;
        let address = std::ptr::addr_of!(local) as usize;
        let mix = |salt: u64| {
            let mut h = std::hash::DefaultHasher::new();
            (salt, nanos, std::process::id(), address).hash(&mut h);
            h.finish()
        };
        FlowSeed {
            flow_hash: mix(1),
            ack_keys: [mix(2), mix(3)],
        }
    }

    /// The classifier's flow-hash seed ([`metronome_packet::Classifier::with_flow_seed`]).
    pub fn flow_hash(self) -> u64 {
        self.flow_hash
    }

    /// The SipHash keys of ACK shaping's flow keys.
    pub fn ack_keys(self) -> [u64; 2] {
        self.ack_keys
    }
}

impl Default for FlowSeed {
    /// [`FlowSeed::FIXED`]: a default never draws from the OS.
    fn default() -> Self {
        FlowSeed::FIXED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two draws differ: a constant or a half-filled draw fails this (two 64-bit words from a
    /// working source are equal with probability 2^-64).
    #[test]
    fn two_draws_differ_in_every_word() {
        let (a, b) = (FlowSeed::draw(), FlowSeed::draw());
        assert_ne!(a.flow_hash(), b.flow_hash());
        assert_ne!(a.ack_keys()[0], b.ack_keys()[0]);
        assert_ne!(a.ack_keys()[1], b.ack_keys()[1]);
        assert_ne!(a, FlowSeed::FIXED);
        assert_ne!(a.flow_hash(), a.ack_keys()[0]);
    }

    #[test]
    fn the_fallback_differs_from_the_fixed_seed_and_debug_hides_the_keys() {
        let s = FlowSeed::from_clock();
        assert_ne!(s, FlowSeed::FIXED);
        assert_eq!(format!("{s:?}"), "FlowSeed(secret)");
        assert_eq!(format!("{:?}", FlowSeed::default()), "FlowSeed::FIXED");
        assert_eq!(FlowSeed::FIXED.flow_hash(), DEFAULT_FLOW_SEED);
    }
}
