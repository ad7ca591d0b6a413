//! Flow identity: a seeded 32-bit hash of the 5-tuple ([`FlowId`]), cheap, well spread and stable
//! across processes and versions: wyhash's and foldhash's folded multiply over a fixed sequence of
//! words (an IPv4 tuple never collides by construction with its IPv4-mapped form); directional.
//! Not cryptographic: the daemon keeps its seed secret (`metronome_engine::flow_seed`,
//! [`crate::Classifier::with_flow_seed`]); [`DEFAULT_FLOW_SEED`] is for tests, the simulator, the
//! lab and the benchmarks. Why the seed is a secret: ARCHITECTURE.md, "Flow identity".

use crate::frame::FiveTuple;
use core::net::IpAddr;
use metronome_core::FlowId;

/// Seed used when none is given: the first 64 fractional bits of pi (a nothing-up-my-sleeve
/// number, as in Blowfish's P-array). Public, so for reproducible runs only: a shaper facing
/// untrusted senders hashes with a secret seed ([`crate::Classifier::with_flow_seed`]).
pub const DEFAULT_FLOW_SEED: u64 = 0x243F_6A88_85A3_08D3;

/// wyhash's four 64-bit mixing constants (wyhash v4 `_wyp`): odd, each with 32 bits set.
const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
const P3: u64 = 0x5899_65cc_7537_4cc3;

/// 64 x 64 -> 128-bit multiply, high and low halves XORed (wyhash `_wymum`, foldhash
/// `folded_multiply`).
#[inline(always)]
const fn fold_mul(a: u64, b: u64) -> u64 {
    let product = (a as u128) * (b as u128);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Absorbs one word into the state.
#[inline(always)]
const fn absorb(state: u64, word: u64) -> u64 {
    fold_mul(state ^ word, P1)
}

/// The flow id of `tuple` under `seed`. No allocation, about a dozen multiplies for IPv6.
///
/// ```
/// use metronome_packet::{flow_id, FiveTuple, DEFAULT_FLOW_SEED};
/// use std::net::{IpAddr, Ipv4Addr};
/// let t = FiveTuple {
///     src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
///     dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
///     protocol: 6,
///     src_port: 40_000,
///     dst_port: 443,
/// };
/// assert_eq!(flow_id(&t, DEFAULT_FLOW_SEED), flow_id(&t, DEFAULT_FLOW_SEED));
/// assert_ne!(flow_id(&t, DEFAULT_FLOW_SEED), flow_id(&t, 1));
/// ```
#[inline]
pub fn flow_id(tuple: &FiveTuple, seed: u64) -> FlowId {
    let key = fold_mul(seed ^ P0, P3) ^ seed;
    let ports = (u64::from(tuple.src_port) << 48)
        | (u64::from(tuple.dst_port) << 32)
        | (u64::from(tuple.protocol) << 8);
    let mut state = key;
    match (tuple.src, tuple.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            state = absorb(state, ports | 4);
            state = absorb(
                state,
                (u64::from(src.to_bits()) << 32) | u64::from(dst.to_bits()),
            );
        }
        (src, dst) => {
            // IPv6, or a mixed pair (never produced by the parser): absorb both as 128 bits.
            state = absorb(state, ports | 6);
            for addr in [to_u128(src), to_u128(dst)] {
                state = absorb(state, (addr >> 64) as u64);
                state = absorb(state, addr as u64);
            }
        }
    }
    let h = fold_mul(state ^ P2, key ^ P0);
    FlowId((h ^ (h >> 32)) as u32)
}

fn to_u128(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(a.to_bits()),
        IpAddr::V6(a) => a.to_bits(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> FiveTuple {
        FiveTuple {
            src: IpAddr::V4(Ipv4Addr::from(src)),
            dst: IpAddr::V4(Ipv4Addr::from(dst)),
            protocol: 6,
            src_port: sport,
            dst_port: dport,
        }
    }

    /// Known-answer values: the ids must not change between versions (the lab's outputs and
    /// the daemon's per-flow state keys depend on them). Update only on purpose.
    #[test]
    fn flow_id_is_stable_across_versions() {
        let t = v4([10, 0, 0, 1], [10, 0, 0, 2], 40_000, 443);
        let id = flow_id(&t, DEFAULT_FLOW_SEED);
        assert_eq!(id, flow_id(&t, DEFAULT_FLOW_SEED));
        assert_eq!(id, FlowId(KNOWN_V4));
        let t6 = FiveTuple {
            src: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            dst: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
            protocol: 17,
            src_port: 5000,
            dst_port: 5001,
        };
        assert_eq!(flow_id(&t6, DEFAULT_FLOW_SEED), FlowId(KNOWN_V6));
    }
    const KNOWN_V4: u32 = 472_153_850;
    const KNOWN_V6: u32 = 3_491_672_086;

    #[test]
    fn every_field_and_the_seed_change_the_id() {
        let base = v4([10, 0, 0, 1], [10, 0, 0, 2], 40_000, 443);
        let id = flow_id(&base, DEFAULT_FLOW_SEED);
        let variants = [
            FiveTuple {
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
                ..base
            },
            FiveTuple {
                dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
                ..base
            },
            FiveTuple {
                protocol: 17,
                ..base
            },
            FiveTuple {
                src_port: 40_001,
                ..base
            },
            FiveTuple {
                dst_port: 444,
                ..base
            },
            FiveTuple {
                src: base.dst,
                dst: base.src,
                ..base
            },
            FiveTuple {
                src: IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()),
                dst: IpAddr::V6(Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped()),
                ..base
            },
        ];
        for v in variants {
            assert_ne!(flow_id(&v, DEFAULT_FLOW_SEED), id, "{v:?}");
        }
        assert_ne!(flow_id(&base, DEFAULT_FLOW_SEED ^ 1), id);
    }

    /// 2^16 tuples differing only in the source port (the common case behind one NAT), and 2^16
    /// IPv6 tuples differing in one address byte pair, land in 256 buckets of the low and the
    /// high byte about evenly: a chi-square over 255 degrees of freedom stays far below the
    /// 0.1% critical value (330.5).
    #[test]
    fn nearby_tuples_spread_over_low_and_high_bits() {
        let tuples_v4 = (0..=u16::MAX).map(|p| v4([10, 0, 0, 1], [10, 0, 0, 2], p, 443));
        let tuples_v6 = (0..=u16::MAX).map(|i| FiveTuple {
            src: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i)),
            dst: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            protocol: 17,
            src_port: 5000,
            dst_port: 5001,
        });
        for ids in [
            tuples_v4
                .map(|t| flow_id(&t, DEFAULT_FLOW_SEED).0)
                .collect::<Vec<_>>(),
            tuples_v6
                .map(|t| flow_id(&t, DEFAULT_FLOW_SEED).0)
                .collect::<Vec<_>>(),
        ] {
            for shift in [0, 24] {
                let mut buckets = [0u32; 256];
                for id in &ids {
                    buckets[((id >> shift) & 0xff) as usize] += 1;
                }
                let expected = ids.len() as f64 / 256.0;
                let chi2: f64 = buckets
                    .iter()
                    .map(|&n| (f64::from(n) - expected).powi(2) / expected)
                    .sum();
                assert!(chi2 < 330.5, "shift {shift}: chi2 {chi2}");
            }
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            sorted.dedup();
            // Birthday bound: 2^32 ids, 2^16 draws, about 0.5 expected collisions.
            assert!(
                ids.len() - sorted.len() <= 4,
                "{} collisions",
                ids.len() - sorted.len()
            );
        }
    }
}
