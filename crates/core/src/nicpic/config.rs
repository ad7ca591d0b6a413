//! The scheduler's configuration, its limits and their defaults (NicPic §3.2's metadata budget
//! and MTU-sized pulls; the link rate of §2.3's NIC).

use crate::rate::Rate;
use crate::time::Duration;

/// Bytes of per-class metadata (`Class`); checked at compile time. NicPic §3.2 budgets "a few
/// 100s of kB" for "10s of thousands" of classes; Metronome's budget is 32 bytes a class.
pub const CLASS_BYTES: usize = 32;

/// Most classes a scheduler can hold: class indices must stay below the list sentinels.
pub const MAX_CLASSES: usize = (u32::MAX - 2) as usize;

/// Largest segment a class may announce: 64 KiB, Linux's `GSO_MAX_SIZE` (the "64kB" bursts of
/// NicPic §2.2.2). Stored as `len - 1` in 16 bits.
pub const MAX_SEGMENT_BYTES: u32 = 1 << 16;

/// Default piece size: 1500 bytes, the Ethernet MTU (NicPic §3.2: "MTU sized chunks").
pub const DEFAULT_MTU: u32 = 1500;

/// Default calendar granularity: 1024 ns of virtual time (a power of two so that a tag's bucket
/// is a shift), under one 1500-byte packet time at 10 Gbit/s (1.2 µs), the lateness bound.
pub const DEFAULT_GRANULARITY: Duration = Duration::from_nanos(1024);

/// Default calendar buckets: 2^16, a window of 67 ms at the default granularity, which covers the
/// gap between two 1500-byte pieces of any class limited to 180 kbit/s or more; 512 KB of bucket
/// heads plus an 8 KB bitmap.
pub const DEFAULT_BUCKETS: usize = 1 << 16;

/// Most calendar buckets (requests are capped): 2^24, 128 MiB of bucket heads.
pub const MAX_BUCKETS: usize = 1 << 24;

/// Fractional bits of virtual time and tags: one tick is 1/256 ns, so a tag advances by
/// `piece / r` with an error under 4 ps per piece, and a `u64` of ticks spans 2.2 years.
pub const TICK_BITS: u32 = 8;

/// Configuration of a [`NicPic`](super::NicPic) scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicPicConfig {
    /// The access link's rate `C`: pieces are pulled no faster, and limits beyond it are shared.
    /// Default 10 Gbit/s (NicPic §2.3's 82599 NIC).
    pub link: Rate,
    /// Largest piece pulled at once, bytes (1..=[`MAX_SEGMENT_BYTES`]). Default [`DEFAULT_MTU`].
    pub mtu: u32,
    /// Width of a calendar bucket in virtual time; rounded down to a power of two of ns.
    /// Default [`DEFAULT_GRANULARITY`].
    pub granularity: Duration,
    /// Calendar buckets; rounded up to a power of two, at least 2 (a parked class must be able to
    /// move), at most [`MAX_BUCKETS`].
    /// Default [`DEFAULT_BUCKETS`].
    pub buckets: usize,
}

impl Default for NicPicConfig {
    fn default() -> Self {
        NicPicConfig {
            link: Rate::gbps(10),
            mtu: DEFAULT_MTU,
            granularity: DEFAULT_GRANULARITY,
            buckets: DEFAULT_BUCKETS,
        }
    }
}

/// Why a scheduler could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NicPicConfigError {
    /// The link rate is zero.
    #[error("link rate must be positive")]
    ZeroLinkRate,
    /// `mtu` is 0 or beyond [`MAX_SEGMENT_BYTES`].
    #[error("mtu must be 1..=65536 bytes")]
    BadMtu,
    /// More than [`MAX_CLASSES`] classes.
    #[error("too many classes")]
    TooManyClasses,
    /// A class's rate is zero.
    #[error("class {0} has a zero rate")]
    ZeroRate(u32),
}
