//! The atomics behind [`rate_exchange`](crate::rate_exchange) and [`spsc`](crate::spsc): std's,
//! or `loom`'s when built with `RUSTFLAGS="--cfg loom"` so the loom model tests explore every
//! interleaving (CONTRIBUTING.md §13). Run them with
//! `RUSTFLAGS="--cfg loom" cargo test -p metronome-core --release --lib loom`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// What a retry loop does between attempts: a CPU spin hint, or under loom a yield so the model
/// lets the other thread run.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// `T` alone on its cache lines (128 bytes: two 64-byte lines, since adjacent-line prefetch on
/// x86 pulls pairs; the value crossbeam-utils' `CachePadded` uses on x86-64), so that cells written
/// by different cores do not share a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);
