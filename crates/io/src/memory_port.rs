//! [`MemoryPort`]: an in-memory [`PacketPort`], a pair of bounded queues, for tests, the daemon's
//! in-memory benchmark and, later, the simulator.
//!
//! The RX queue is filled by [`MemoryPort::inject`] (or, for benchmarks, replays a fixed set of
//! template frames forever, [`MemoryPort::set_replay`]); the TX queue collects what the engine
//! sent, read back with [`MemoryPort::pop_sent`], or is discarded after counting
//! ([`MemoryPortConfig::keep_sent`] = false). Both queues store bytes in a private
//! [`FramePool`], so steady-state operation allocates nothing; `recv` copies into the caller's pool
//! exactly as the AF_PACKET port does, so benchmarks pay the same per-packet copy. A full TX queue
//! behaves like a busy device: `send` stops early and counts `tx_busy`.
//!
//! A frame injected with an origin tag ([`MemoryPort::inject_with_origin`]) comes out of `recv`
//! with that tag on its slot of the caller's pool ([`FramePool::origin`]), as an AF_PACKET port
//! with `AfPacketConfig::origin_tags` delivers the tag it read from the frame's VLAN tag; every
//! other frame with origin 0.

use crate::frame_pool::{FramePool, StoreError, DEFAULT_SLOT_SIZE};
use crate::piece::{self, PieceScratch, PieceSink, TxPiece};
use crate::port::{PacketPort, PortCounters, PortError, RxFrame};
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;

/// Sizes of a [`MemoryPort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPortConfig {
    /// Frames each queue holds. Default 4096.
    pub capacity: u32,
    /// Longest frame in bytes. Default [`DEFAULT_SLOT_SIZE`].
    pub slot_size: usize,
    /// Keep sent frames for [`MemoryPort::pop_sent`]; if false they are counted and discarded
    /// (benchmarks). Default true.
    pub keep_sent: bool,
}

impl Default for MemoryPortConfig {
    fn default() -> Self {
        MemoryPortConfig {
            capacity: 4096,
            slot_size: DEFAULT_SLOT_SIZE,
            keep_sent: true,
        }
    }
}

/// An in-memory port: frames injected on one side come out of `recv`; frames given to `send`
/// queue up on the other side.
///
/// ```
/// use metronome_io::{FramePool, MemoryPort, MemoryPortConfig, PacketPort, RxFrame};
///
/// let mut port = MemoryPort::new(MemoryPortConfig::default());
/// let mut pool = FramePool::new(256, 2048);
/// port.inject(&[0xab; 64]).unwrap();
///
/// let mut batch = [RxFrame::default(); 32];
/// let n = port.recv(&mut pool, &mut batch).unwrap();
/// assert_eq!(n, 1);
/// assert_eq!(pool.frame(batch[0].id), &[0xab; 64][..]);
///
/// // ... the shaper holds batch[0].id for a while, then releases it:
/// assert_eq!(port.send(&mut pool, &[batch[0].id]).unwrap(), 1);
/// assert_eq!(port.pop_sent().unwrap(), vec![0xab; 64]);
/// assert_eq!(pool.in_use(), 0);
/// ```
pub struct MemoryPort {
    /// Backing store of both queues.
    store: FramePool,
    /// Injected frames waiting for `recv`, oldest first (slots of `store`).
    rx: VecDeque<u32>,
    /// Sent frames waiting for `pop_sent`, oldest first (slots of `store`).
    tx: VecDeque<u32>,
    /// Template frames `recv` cycles through when `rx` is empty (benchmarks).
    replay: Vec<Vec<u8>>,
    /// Next template to replay.
    replay_next: usize,
    /// Most frames `tx` holds.
    tx_capacity: usize,
    keep_sent: bool,
    counters: PortCounters,
    /// Headers of the pieces of one send ([`crate::piece`]).
    scratch: PieceScratch,
}

impl std::fmt::Debug for MemoryPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPort")
            .field("rx_queued", &self.rx.len())
            .field("tx_queued", &self.tx.len())
            .field("counters", &self.counters)
            .finish()
    }
}

impl MemoryPort {
    /// An empty port with the given sizes (allocates both queues once).
    pub fn new(config: MemoryPortConfig) -> Self {
        let cap = config.capacity as usize;
        MemoryPort {
            store: FramePool::new(config.capacity.saturating_mul(2), config.slot_size),
            rx: VecDeque::with_capacity(cap),
            tx: VecDeque::with_capacity(cap),
            replay: Vec::new(),
            replay_next: 0,
            tx_capacity: cap,
            keep_sent: config.keep_sent,
            counters: PortCounters::default(),
            scratch: PieceScratch::default(),
        }
    }

    /// Queues `frame` for `recv`, of no known origin. Hands back why if the RX queue is full or
    /// the frame is too long.
    pub fn inject(&mut self, frame: &[u8]) -> Result<(), StoreError> {
        self.inject_with_origin(frame, 0)
    }

    /// Queues `frame` for `recv` with origin tag `origin`: `recv` sets it on the frame's slot
    /// ([`FramePool::set_origin`]), as an AF_PACKET port with `origin_tags` sets the tag it
    /// read from the frame's VLAN tag. Hands back why if the RX queue is full or the frame is
    /// too long.
    pub fn inject_with_origin(&mut self, frame: &[u8], origin: u16) -> Result<(), StoreError> {
        if self.rx.len() >= self.tx_capacity {
            return Err(StoreError::Exhausted);
        }
        let id = self.store.store(frame)?;
        self.store.set_origin(id, origin);
        self.rx.push_back(id);
        Ok(())
    }

    /// Makes `recv` produce these frames in a cycle, without end, whenever nothing injected is
    /// waiting. An empty list turns replay off. Templates longer than a slot are skipped.
    pub fn set_replay(&mut self, templates: Vec<Vec<u8>>) {
        let size = self.store.slot_size();
        self.replay = templates.into_iter().filter(|t| t.len() <= size).collect();
        self.replay_next = 0;
    }

    /// Frames waiting for `recv` (not counting replay).
    pub fn rx_queued(&self) -> usize {
        self.rx.len()
    }

    /// Frames sent and not yet popped.
    pub fn tx_queued(&self) -> usize {
        self.tx.len()
    }

    /// The oldest sent frame, removed from the TX queue (allocates the returned `Vec`).
    pub fn pop_sent(&mut self) -> Option<Vec<u8>> {
        let id = self.tx.pop_front()?;
        let bytes = self.store.frame(id).to_vec();
        self.store.free(id);
        Some(bytes)
    }

    /// Empties the TX queue; returns how many frames it held.
    pub fn discard_sent(&mut self) -> usize {
        let n = self.tx.len();
        while let Some(id) = self.tx.pop_front() {
            self.store.free(id);
        }
        n
    }

    /// Counts a received frame `pool` refused for good: too long for any slot, or no free large
    /// slot (dropped like an AF_PACKET port drops it, rather than stalling the queue).
    fn count_refused(&mut self, e: StoreError) {
        match e {
            StoreError::NoLargeSlot { .. } => self.counters.rx_no_large_slot += 1,
            _ => self.counters.rx_oversize += 1,
        }
    }

    /// Copies the next frame to hand out into `pool`: an injected one, else a replayed template.
    /// `Ok(None)`: nothing to hand out. `Err(())`: `pool` is exhausted, the frame stays queued.
    fn next_into(&mut self, pool: &mut FramePool) -> Result<Option<u32>, ()> {
        if let Some(&src) = self.rx.front() {
            let stored = pool.store(self.store.frame(src));
            match stored {
                Ok(id) => {
                    pool.set_origin(id, self.store.origin(src));
                    self.rx.pop_front();
                    self.store.free(src);
                    Ok(Some(id))
                }
                Err(StoreError::Exhausted) => Err(()),
                Err(e @ (StoreError::Oversize { .. } | StoreError::NoLargeSlot { .. })) => {
                    self.rx.pop_front();
                    self.store.free(src);
                    self.count_refused(e);
                    Ok(None)
                }
            }
        } else if !self.replay.is_empty() {
            let t = &self.replay[self.replay_next];
            match pool.store(t) {
                Ok(id) => {
                    self.replay_next = (self.replay_next + 1) % self.replay.len();
                    Ok(Some(id))
                }
                Err(StoreError::Exhausted) => Err(()),
                Err(e @ (StoreError::Oversize { .. } | StoreError::NoLargeSlot { .. })) => {
                    self.replay_next = (self.replay_next + 1) % self.replay.len();
                    self.count_refused(e);
                    Ok(None)
                }
            }
        } else {
            Ok(None)
        }
    }
}

impl PacketPort for MemoryPort {
    fn recv(&mut self, pool: &mut FramePool, out: &mut [RxFrame]) -> Result<usize, PortError> {
        let mut n = 0;
        while n < out.len() && (!self.rx.is_empty() || !self.replay.is_empty()) {
            match self.next_into(pool) {
                Ok(Some(id)) => {
                    let len = pool.len(id) as u32;
                    out[n] = RxFrame {
                        id,
                        len,
                        csum_not_ready: false,
                        stamp_ns: 0,
                    };
                    n += 1;
                    self.counters.rx_packets += 1;
                    self.counters.rx_bytes += u64::from(len);
                }
                Ok(None) => {}
                Err(()) => break,
            }
        }
        Ok(n)
    }

    fn send(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        piece::send(self, pool, ids)
    }

    fn counters(&mut self) -> PortCounters {
        self.counters
    }

    fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// A memory port has no interface to come back: reopening it fails as for a deleted one.
    fn reopen(&mut self) -> Result<PortCounters, PortError> {
        Err(PortError::NoSuchInterface {
            ifname: "memory".into(),
        })
    }
}

/// The memory port sends a piece as one frame: headers then payload, copied into its TX queue.
impl PieceSink for MemoryPort {
    fn scratch(&mut self) -> &mut PieceScratch {
        &mut self.scratch
    }

    fn send_frames(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        let mut done = 0;
        for &id in ids {
            let len = pool.len(id);
            if self.keep_sent {
                if self.tx.len() >= self.tx_capacity {
                    self.counters.tx_busy += 1;
                    break;
                }
                match self.store.store(pool.frame(id)) {
                    Ok(copy) => self.tx.push_back(copy),
                    Err(StoreError::Exhausted | StoreError::NoLargeSlot { .. }) => {
                        self.counters.tx_busy += 1;
                        break;
                    }
                    Err(StoreError::Oversize { .. }) => {
                        self.counters.tx_errors += 1;
                        pool.free(id);
                        done += 1;
                        continue;
                    }
                }
            }
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += len as u64;
            pool.free(id);
            done += 1;
        }
        Ok(done)
    }

    fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError> {
        let mut done = 0;
        for p in pieces {
            let len = p.headers.len() + p.payload.len();
            if self.keep_sent {
                if self.tx.len() >= self.tx_capacity {
                    self.counters.tx_busy += 1;
                    break;
                }
                match self.store.alloc_for(len) {
                    Ok(copy) => {
                        let slot = self.store.slot_mut(copy);
                        slot[..p.headers.len()].copy_from_slice(p.headers);
                        slot[p.headers.len()..len].copy_from_slice(p.payload);
                        self.store.set_len(copy, len);
                        self.tx.push_back(copy);
                    }
                    Err(StoreError::Exhausted | StoreError::NoLargeSlot { .. }) => {
                        self.counters.tx_busy += 1;
                        break;
                    }
                    Err(StoreError::Oversize { .. }) => {
                        self.counters.tx_errors += 1;
                        done += 1;
                        continue;
                    }
                }
            }
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += len as u64;
            done += 1;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(capacity: u32) -> MemoryPort {
        MemoryPort::new(MemoryPortConfig {
            capacity,
            slot_size: 128,
            keep_sent: true,
        })
    }

    #[test]
    fn frames_pass_through_in_order() {
        let mut p = port(8);
        let mut pool = FramePool::new(8, 128);
        for i in 0..5u8 {
            p.inject(&[i; 60]).unwrap();
        }
        let mut out = [RxFrame::default(); 3];
        assert_eq!(p.recv(&mut pool, &mut out).unwrap(), 3);
        assert_eq!(pool.frame(out[0].id), &[0u8; 60][..]);
        assert_eq!(out[2].len, 60);
        let ids: Vec<u32> = out.iter().map(|f| f.id).collect();
        assert_eq!(p.send(&mut pool, &ids).unwrap(), 3);
        assert_eq!(pool.in_use(), 0);
        for i in 0..3u8 {
            assert_eq!(p.pop_sent().unwrap(), vec![i; 60]);
        }
        assert_eq!(p.pop_sent(), None);
        assert_eq!(p.rx_queued(), 2);
        let c = p.counters();
        assert_eq!((c.rx_packets, c.tx_packets, c.tx_bytes), (3, 3, 180));
        assert!(p.poll_fd().is_none());
    }

    #[test]
    fn an_injected_origin_ends_up_on_the_frame_slot() {
        let mut p = port(8);
        let mut pool = FramePool::new(8, 128);
        p.inject_with_origin(&[1; 60], 5).unwrap();
        p.inject(&[2; 60]).unwrap();
        p.inject_with_origin(&[3; 60], u16::MAX).unwrap();
        let mut out = [RxFrame::default(); 3];
        assert_eq!(p.recv(&mut pool, &mut out).unwrap(), 3);
        let origins: Vec<u16> = out.iter().map(|f| pool.origin(f.id)).collect();
        assert_eq!(origins, [5, 0, u16::MAX]);
        assert_eq!(pool.frame(out[0].id), &[1u8; 60][..]);
        // The port's own slots were freed with their tags: reused, they carry none.
        for _ in 0..3 {
            p.inject(&[4; 60]).unwrap();
        }
        for f in &out {
            pool.free(f.id);
        }
        assert_eq!(p.recv(&mut pool, &mut out).unwrap(), 3);
        assert!(out.iter().all(|f| pool.origin(f.id) == 0));
        pool.invariants();
    }

    #[test]
    fn exhausted_pool_leaves_frames_queued() {
        let mut p = port(8);
        let mut pool = FramePool::new(2, 128);
        for _ in 0..4 {
            p.inject(b"abc").unwrap();
        }
        let mut out = [RxFrame::default(); 8];
        assert_eq!(p.recv(&mut pool, &mut out).unwrap(), 2);
        assert_eq!(p.rx_queued(), 2);
        pool.free(out[0].id);
        assert_eq!(p.recv(&mut pool, &mut out).unwrap(), 1);
        assert_eq!(p.rx_queued(), 1);
    }

    #[test]
    fn full_tx_queue_hands_frames_back() {
        let mut p = port(2);
        let mut pool = FramePool::new(4, 128);
        let ids: Vec<u32> = (0..4).map(|i| pool.store(&[i; 10]).unwrap()).collect();
        assert_eq!(p.send(&mut pool, &ids).unwrap(), 2);
        assert_eq!(p.counters().tx_busy, 1);
        // The unsent ones are still the caller's.
        assert!(pool.is_allocated(ids[2]) && pool.is_allocated(ids[3]));
        assert_eq!(p.discard_sent(), 2);
        assert_eq!(p.send(&mut pool, &ids[2..]).unwrap(), 2);
        assert_eq!(p.pop_sent().unwrap(), vec![2; 10]);
    }

    #[test]
    fn oversize_is_refused_or_counted() {
        let mut p = port(2);
        assert!(matches!(
            p.inject(&[0; 129]),
            Err(StoreError::Oversize { .. })
        ));
        // A smaller caller pool than the port's slots: counted as rx_oversize.
        let mut small = FramePool::new(2, 64);
        p.inject(&[1; 100]).unwrap();
        let mut out = [RxFrame::default(); 2];
        assert_eq!(p.recv(&mut small, &mut out).unwrap(), 0);
        assert_eq!(p.counters().rx_oversize, 1);
        assert_eq!(p.rx_queued(), 0);
    }

    #[test]
    fn a_reopen_fails_as_for_a_deleted_interface() {
        let mut p = port(2);
        assert!(matches!(p.reopen(), Err(PortError::NoSuchInterface { .. })));
        assert_eq!(p.capabilities(), crate::PortCapabilities::default());
    }

    #[test]
    fn replay_cycles_templates_and_discard_mode_counts() {
        let mut p = MemoryPort::new(MemoryPortConfig {
            capacity: 4,
            slot_size: 128,
            keep_sent: false,
        });
        p.set_replay(vec![vec![1; 10], vec![2; 20]]);
        let mut pool = FramePool::new(64, 128);
        let mut out = [RxFrame::default(); 16];
        for _ in 0..10 {
            let n = p.recv(&mut pool, &mut out).unwrap();
            assert_eq!(n, 16);
            assert_eq!(pool.frame(out[0].id), &[1u8; 10][..]);
            assert_eq!(pool.frame(out[1].id), &[2u8; 20][..]);
            let ids: Vec<u32> = out.iter().map(|f| f.id).collect();
            assert_eq!(p.send(&mut pool, &ids).unwrap(), 16);
        }
        let c = p.counters();
        assert_eq!(
            (c.rx_packets, c.tx_packets, c.tx_bytes),
            (160, 160, 80 * 30)
        );
        assert_eq!(p.tx_queued(), 0);
        assert_eq!(pool.in_use(), 0);
    }
}
