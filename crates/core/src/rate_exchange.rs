//! Lock-free exchange of usage and rates between per-core silos and the NIC-level bandwidth
//! allocator (Carousel §5.3, component 2: "lazy updates to avoid the overhead of locking the data
//! path").
//!
//! Per core a [`RateExchange`] holds a demand cell written by the silo
//! ([`RateExchange::publish_demand`]) and a rate cell written by the allocator
//! ([`RateExchange::publish_rate`]), each a sequence lock over atomics (no `unsafe`; Boehm, MSPC
//! 2012, the fence-based variant) on its own cache lines. Writers never wait; the data path's
//! `try_` readers give up instead of retrying. One exchange per aggregate limit. The loom models
//! (CONTRIBUTING.md §13) check that no torn pair is read and that epochs only grow; the design:
//! `docs/design/carousel.md`.

use crate::rate::Rate;
use crate::sync::{fence, spin_hint, AtomicU64, Ordering, Padded};
use crate::time::Timestamp;

/// A pair of words behind a sequence lock; one writer, any number of readers.
#[derive(Debug, Default)]
struct PairCell {
    /// Even when stable, odd while a write is in progress.
    seq: AtomicU64,
    first: AtomicU64,
    second: AtomicU64,
}

impl PairCell {
    fn new() -> Self {
        PairCell {
            seq: AtomicU64::new(0),
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
        }
    }

    /// Stores a pair. Only one thread may write a given cell.
    fn write(&self, first: u64, second: u64) {
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert!(
            seq.is_multiple_of(2),
            "a second writer on a single-writer cell"
        );
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd sequence before the data: a reader that sees new data sees it odd too.
        fence(Ordering::Release);
        self.first.store(first, Ordering::Relaxed);
        self.second.store(second, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// One read attempt: the pair if no write overlapped it.
    fn try_read(&self) -> Option<(u64, u64)> {
        let before = self.seq.load(Ordering::Acquire);
        if !before.is_multiple_of(2) {
            return None;
        }
        let first = self.first.load(Ordering::Relaxed);
        let second = self.second.load(Ordering::Relaxed);
        // Orders the data loads before the second look at the sequence.
        fence(Ordering::Acquire);
        let after = self.seq.load(Ordering::Relaxed);
        (before == after).then_some((first, second))
    }

    /// Reads a consistent pair, retrying while writes overlap.
    fn read(&self) -> (u64, u64) {
        loop {
            if let Some(pair) = self.try_read() {
                return pair;
            }
            spin_hint();
        }
    }
}

/// One core's cells; the demand cell and the rate cell have different writers, so each sits on
/// its own cache lines.
#[derive(Debug)]
struct CoreCells {
    demand: Padded<PairCell>,
    rate: Padded<PairCell>,
}

/// Shared between the silos and the allocator (wrap it in an `Arc`): per core, a demand cell the
/// silo publishes and a rate cell the allocator publishes. `Send + Sync`; single writer per cell.
///
/// Before anything is published a demand reads `(0, Timestamp::ZERO)` and a rate reads
/// `(Rate::from_bps(0), 0)`: epoch 0 means "no rate yet", so a silo keeps its configured rate.
#[derive(Debug)]
pub struct RateExchange {
    cores: Box<[CoreCells]>,
}

impl RateExchange {
    /// Cells for `cores` cores.
    pub fn new(cores: usize) -> Self {
        let cores = (0..cores)
            .map(|_| CoreCells {
                demand: Padded(PairCell::new()),
                rate: Padded(PairCell::new()),
            })
            .collect();
        RateExchange { cores }
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// Silo side: core `core`'s cumulative byte count at `now`. Only core `core`'s silo may call
    /// this. Never waits.
    ///
    /// # Panics
    /// If `core` is out of range.
    pub fn publish_demand(&self, core: usize, cumulative_bytes: u64, now: Timestamp) {
        self.cores[core]
            .demand
            .0
            .write(cumulative_bytes, now.as_nanos());
    }

    /// Allocator side: core `core`'s latest (byte count, timestamp) pair, never torn; retries
    /// while the silo is writing it.
    pub fn read_demand(&self, core: usize) -> (u64, Timestamp) {
        let (bytes, at) = self.cores[core].demand.0.read();
        (bytes, Timestamp::from_nanos(at))
    }

    /// Allocator side: core `core`'s rate for epoch `epoch`. Only the allocator may call this,
    /// with epochs that never decrease. Never waits.
    pub fn publish_rate(&self, core: usize, rate: Rate, epoch: u64) {
        self.cores[core].rate.0.write(rate.bps(), epoch);
    }

    /// Silo side: core `core`'s (rate, epoch), both from the same publish; retries while the
    /// allocator is writing it.
    pub fn read_rate(&self, core: usize) -> (Rate, u64) {
        let (bps, epoch) = self.cores[core].rate.0.read();
        (Rate::from_bps(bps), epoch)
    }

    /// Silo side, for the data path: like [`RateExchange::read_rate`] but gives up (`None`)
    /// instead of retrying when a publish overlaps; the silo keeps its rate and looks again later.
    pub fn try_read_rate(&self, core: usize) -> Option<(Rate, u64)> {
        let (bps, epoch) = self.cores[core].rate.0.try_read()?;
        Some((Rate::from_bps(bps), epoch))
    }

    /// Allocator side: like [`RateExchange::read_demand`] without retrying.
    pub fn try_read_demand(&self, core: usize) -> Option<(u64, Timestamp)> {
        let (bytes, at) = self.cores[core].demand.0.try_read()?;
        Some((bytes, Timestamp::from_nanos(at)))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn starts_empty_and_reads_back_what_was_published() {
        let x = RateExchange::new(3);
        assert_eq!(x.cores(), 3);
        assert_eq!(x.read_demand(1), (0, Timestamp::ZERO));
        assert_eq!(x.read_rate(2), (Rate::from_bps(0), 0));
        x.publish_demand(1, 1500, Timestamp::from_nanos(7));
        x.publish_rate(2, Rate::mbps(300), 4);
        assert_eq!(x.read_demand(1), (1500, Timestamp::from_nanos(7)));
        assert_eq!(x.try_read_rate(2), Some((Rate::mbps(300), 4)));
        assert_eq!(x.read_demand(0), (0, Timestamp::ZERO), "cells are per core");
    }

    #[test]
    fn cells_do_not_share_cache_lines() {
        assert!(core::mem::align_of::<Padded<PairCell>>() >= 128);
        assert!(core::mem::size_of::<CoreCells>() >= 256);
    }

    /// Threads hammer one core's cells; every pair read obeys the writer's relation (timestamp =
    /// 3 x bytes, epoch = rate / 1000), so a torn read would show. Not timed: a fixed op count.
    #[test]
    fn concurrent_readers_never_see_torn_pairs() {
        const WRITES: u64 = 20_000;
        let x = Arc::new(RateExchange::new(1));
        let silo = {
            let x = Arc::clone(&x);
            std::thread::spawn(move || {
                let mut last_epoch = 0;
                for i in 1..=WRITES {
                    x.publish_demand(0, i, Timestamp::from_nanos(3 * i));
                    let (rate, epoch) = x.read_rate(0);
                    assert_eq!(rate.bps(), epoch * 1000);
                    assert!(epoch >= last_epoch);
                    last_epoch = epoch;
                }
            })
        };
        let mut last = 0;
        for e in 1..=WRITES {
            x.publish_rate(0, Rate::from_bps(e * 1000), e);
            let (bytes, at) = x.read_demand(0);
            assert_eq!(at.as_nanos(), 3 * bytes);
            assert!(bytes >= last);
            last = bytes;
        }
        silo.join().unwrap();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::Arc;

    /// Preemptions per execution the models explore: 3 (loom's advice for seqlock-sized models;
    /// keeps the whole loom run under two minutes on two cores).
    const PREEMPTIONS: usize = 3;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(PREEMPTIONS);
        b.check(f);
    }

    #[test]
    fn loom_demand_pairs_are_never_torn() {
        model(|| {
            let x = Arc::new(RateExchange::new(1));
            let w = Arc::clone(&x);
            let silo = loom::thread::spawn(move || {
                for i in 1..=2u64 {
                    w.publish_demand(0, i, Timestamp::from_nanos(10 * i));
                }
            });
            let mut last = 0;
            for _ in 0..2 {
                let (bytes, at) = x.read_demand(0);
                assert_eq!(at.as_nanos(), 10 * bytes, "torn (bytes, timestamp) pair");
                assert!(bytes >= last, "went back in time");
                last = bytes;
            }
            silo.join().unwrap();
            assert_eq!(x.read_demand(0), (2, Timestamp::from_nanos(20)));
        });
    }

    #[test]
    fn loom_rates_come_from_one_publish_and_epochs_grow() {
        model(|| {
            let x = Arc::new(RateExchange::new(1));
            let w = Arc::clone(&x);
            let nba = loom::thread::spawn(move || {
                for e in 1..=2u64 {
                    w.publish_rate(0, Rate::from_bps(1000 * e), e);
                }
            });
            let mut last = 0;
            for _ in 0..2 {
                if let Some((rate, epoch)) = x.try_read_rate(0) {
                    assert_eq!(rate.bps(), 1000 * epoch, "rate from a mix of publishes");
                    assert!(epoch >= last, "epoch went backwards");
                    last = epoch;
                }
                let (rate, epoch) = x.read_rate(0);
                assert_eq!(rate.bps(), 1000 * epoch, "rate from a mix of publishes");
                assert!(epoch >= last, "epoch went backwards");
                last = epoch;
            }
            nba.join().unwrap();
        });
    }
}
