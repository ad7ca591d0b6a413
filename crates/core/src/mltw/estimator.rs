//! A destination bucket's rate estimator (FlowBundler §IV-D): every few packets the rate of their
//! scheduled departures, filtered by an EWMA, in integer arithmetic.

use crate::time::NANOS_PER_SEC;
use core::mem::size_of;

/// A destination bucket (FlowBundler §IV-C): its rate estimate and estimator window. 24 bytes,
/// 512 of them in 12 KiB.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bucket {
    /// Estimated (or set) rate, bits per second.
    pub(super) rate_bps: u64,
    /// Start time of the estimator window, ns (a packet's scheduled departure).
    pub(super) window_start: u64,
    /// Bytes released since `window_start`.
    pub(super) window_bytes: u32,
    /// Packets released since `window_start`.
    pub(super) window_packets: u16,
    /// The level `rate_bps` maps to, cached so enqueue does no arithmetic on the rate.
    pub(super) level: u8,
    /// `window_start` is meaningful (the bucket released at least one packet).
    pub(super) started: bool,
}

/// Size of a [`Bucket`] in bytes (checked at compile time).
pub(super) const BUCKET_BYTES: usize = 24;
const _: () = assert!(size_of::<Bucket>() == BUCKET_BYTES);

impl Bucket {
    pub(super) fn new(rate_bps: u64, level: u32) -> Self {
        Bucket {
            rate_bps,
            window_start: 0,
            window_bytes: 0,
            window_packets: 0,
            level: level as u8,
            started: false,
        }
    }

    /// Accounts one packet of `len` bytes scheduled to depart at `t`; every `every` packets
    /// updates the rate by EWMA (FlowBundler §IV-D). True if the rate changed.
    pub(super) fn record(&mut self, t: u64, len: u16, every: u16, ewma_shift: u32) -> bool {
        if !self.started {
            // The first packet opens the window; its bytes left before it.
            self.started = true;
            self.window_start = t;
            return false;
        }
        self.window_bytes = self.window_bytes.saturating_add(len as u32);
        self.window_packets = self.window_packets.saturating_add(1);
        if self.window_packets < every {
            return false;
        }
        let elapsed = t.saturating_sub(self.window_start);
        if elapsed == 0 {
            return false; // keep accumulating until time moves
        }
        let inst = instantaneous_bps(self.window_bytes, elapsed);
        self.rate_bps = ewma(self.rate_bps, inst, ewma_shift);
        self.window_start = t;
        self.window_bytes = 0;
        self.window_packets = 0;
        true
    }
}

/// `bytes × 8 × 10^9 / elapsed_ns`, the rate in bits per second (rounded down, saturating).
/// A 64-bit divide when the numerator fits 64 bits (windows below 2.3 GB, i.e. always in
/// practice); the 128-bit divide, a library call several times slower, only beyond.
#[inline]
fn instantaneous_bps(bytes: u32, elapsed_ns: u64) -> u64 {
    match (bytes as u64).checked_mul(8 * NANOS_PER_SEC) {
        Some(bits_ns) => bits_ns / elapsed_ns,
        None => {
            let bits_ns = bytes as u128 * 8 * NANOS_PER_SEC as u128;
            (bits_ns / elapsed_ns as u128).min(u64::MAX as u128) as u64
        }
    }
}

/// `R <- (1 - 2^-s) R + 2^-s inst`, exactly `((R << s) - R + inst) >> s` (which lies between `R`
/// and `inst`), computed in 64 bits: `R + floor((inst - R) / 2^s)`, where the floor of a
/// negative quotient `-d / 2^s` is `-(((d - 1) >> s) + 1)`.
#[inline]
fn ewma(rate: u64, inst: u64, shift: u32) -> u64 {
    if inst >= rate {
        rate + ((inst - rate) >> shift)
    } else {
        rate - (((rate - inst - 1) >> shift) + 1)
    }
}
