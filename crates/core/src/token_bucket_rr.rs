//! The token-bucket shaper architecture of HTB and policers: one FIFO and one token bucket per
//! class, polled round-robin (Carousel §2, Figure 1), a baseline `metronome bench` measures beside
//! the timing wheel as Carousel Table 1 does; its polling cost, linear in the classes (§3), stays
//! visible.
//!
//! The class is the packet's [`ClassId`] ([`RejectReason::UnknownClass`] otherwise); **the EDT
//! argument of [`EdtQueue::enqueue`] is ignored**. Tokens start full, are refilled lazily and
//! exactly ([`TOKEN_UNITS_PER_BYTE`]); a head packet leaves when `tokens >= min(len, burst)` and
//! may drive them negative; `next_due` is O(classes); queues are unbounded. The rules in full:
//! `docs/design/carousel.md`.

use crate::packet::{ClassId, PacketRef, PACKET_REF_BYTES};
use crate::queue::{EdtQueue, QueueCounters, RejectReason, Rejected};
use crate::rate::Rate;
use crate::time::{Duration, Timestamp, NANOS_PER_SEC};
use std::collections::VecDeque;

/// Token units per byte: 8 bits per byte times [`NANOS_PER_SEC`]. A class at `bps` bits per
/// second earns exactly `bps` units per nanosecond, so refills are integer and exact.
pub const TOKEN_UNITS_PER_BYTE: i128 = 8 * NANOS_PER_SEC as i128;

/// Most classes a [`TokenBucketRr`] holds: the range of [`ClassId`] (a `u32`), less its largest
/// value. Further configured classes could never be addressed and are ignored.
pub const MAX_CLASSES: usize = u32::MAX as usize;

/// One class's shaping parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassConfig {
    /// The rate tokens accrue at. Zero sends nothing, whatever the tokens (see [`Rate`]).
    pub rate: Rate,
    /// The bucket depth in bytes: the largest burst released at once. At least 1 (0 is raised).
    pub burst: u32,
}

/// The class named in a call is not configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown class {0:?}")]
pub struct UnknownClass(pub ClassId);

/// A token bucket in exact integer units, with its send rule: the head packet of a FIFO leaves
/// when the rate is above zero and the tokens cover `min(len, burst)`, and then costs `len` (so an
/// oversized packet leaves with a debt instead of being stuck). At a zero rate nothing leaves, as
/// [`Rate`] defines for every API: the tokens already in the bucket (at most `burst`) stay there
/// until a rate above zero is set. Shared by the classes here and by [`crate::zd::TbfBuffer`].
#[derive(Clone, Debug)]
pub(crate) struct TokenBucket {
    /// Tokens in [`TOKEN_UNITS_PER_BYTE`] units; at most `cap`, negative after an oversized packet.
    pub(crate) tokens: i128,
    pub(crate) last_refill: Timestamp,
    /// `burst` in token units.
    pub(crate) cap: i128,
    pub(crate) rate: Rate,
    pub(crate) burst: u32,
}

impl TokenBucket {
    /// A full bucket of `burst` bytes (raised to 1) filling at `rate`.
    pub(crate) fn new(rate: Rate, burst: u32) -> Self {
        let burst = burst.max(1);
        let cap = i128::from(burst) * TOKEN_UNITS_PER_BYTE;
        TokenBucket {
            tokens: cap,
            last_refill: Timestamp::ZERO,
            cap,
            rate,
            burst,
        }
    }

    /// Adds the tokens earned since the last refill, capped at the burst.
    pub(crate) fn refill(&mut self, now: Timestamp) {
        let elapsed = now.saturating_since(self.last_refill).as_nanos();
        self.last_refill = self.last_refill.max(now);
        if self.tokens >= self.cap {
            return;
        }
        let room = (self.cap - self.tokens) as u128; // positive: tokens < cap
        let earned = u128::from(elapsed) * u128::from(self.rate.bps()); // < 2^128
        self.tokens = if earned >= room {
            self.cap
        } else {
            self.tokens + earned as i128 // earned < room, which fits i128
        };
    }

    /// Token units the head of `queue` needs before it may leave (the send rule), if any.
    fn head_need(&self, queue: &VecDeque<PacketRef>) -> Option<i128> {
        let len = u32::from(queue.front()?.len);
        Some(i128::from(len.min(self.burst)) * TOKEN_UNITS_PER_BYTE)
    }

    /// True if the head of `queue` may leave now.
    pub(crate) fn head_sendable(&self, queue: &VecDeque<PacketRef>) -> bool {
        self.rate.bps() != 0
            && self
                .head_need(queue)
                .is_some_and(|need| self.tokens >= need)
    }

    /// Releases head packets of `queue` into `out` while the tokens allow; returns how many.
    pub(crate) fn serve(
        &mut self,
        queue: &mut VecDeque<PacketRef>,
        out: &mut [PacketRef],
    ) -> usize {
        let mut n = 0;
        while n < out.len() && self.head_sendable(queue) {
            let Some(pkt) = queue.pop_front() else {
                break;
            };
            self.tokens -= i128::from(pkt.len) * TOKEN_UNITS_PER_BYTE;
            out[n] = pkt;
            n += 1;
        }
        n
    }

    /// The earliest instant the head of `queue` may leave; `Timestamp::MAX` at a zero rate.
    pub(crate) fn due(&self, queue: &VecDeque<PacketRef>) -> Option<Timestamp> {
        let deficit = self.head_need(queue)? - self.tokens;
        let bps = u128::from(self.rate.bps());
        if bps == 0 {
            return Some(Timestamp::MAX);
        }
        if deficit <= 0 {
            return Some(self.last_refill);
        }
        // Exact ceiling of deficit / bps: `Rate::transmit_time` rounds down in fixed point, which
        // could name an instant a nanosecond early, where a poll would find nothing to send.
        let ns = (deficit as u128).div_ceil(bps);
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        Some(self.last_refill.saturating_add(Duration::from_nanos(ns)))
    }
}

/// One class: its bucket and its FIFO.
#[derive(Debug)]
struct Class {
    // Touched on every visit: bucket state, then the queue.
    bucket: TokenBucket,
    /// True while the class is in the active list (exactly when its queue is non-empty).
    active: bool,
    queue: VecDeque<PacketRef>,
}

impl Class {
    fn new(cfg: ClassConfig) -> Self {
        Class {
            bucket: TokenBucket::new(cfg.rate, cfg.burst),
            active: false,
            queue: VecDeque::new(),
        }
    }

    fn refill(&mut self, now: Timestamp) {
        self.bucket.refill(now);
    }

    fn head_sendable(&self) -> bool {
        self.bucket.head_sendable(&self.queue)
    }

    fn serve(&mut self, out: &mut [PacketRef]) -> usize {
        self.bucket.serve(&mut self.queue, out)
    }

    fn due(&self) -> Option<Timestamp> {
        self.bucket.due(&self.queue)
    }
}

/// Per-class FIFOs with token buckets, polled round-robin (HTB leaves without the hierarchy).
///
/// ```
/// use metronome_core::token_bucket_rr::{ClassConfig, TokenBucketRr};
/// use metronome_core::{ClassId, EdtQueue, FlowId, PacketRef, Rate, Timestamp};
///
/// let mut q = TokenBucketRr::new(vec![ClassConfig { rate: Rate::mbps(1), burst: 1500 }]);
/// let p = |id| PacketRef::new(id, FlowId(0), ClassId(0), 1500);
/// let t0 = Timestamp::ZERO;
/// q.enqueue(t0, t0, p(1)).unwrap();
/// q.enqueue(t0, t0, p(2)).unwrap();
/// let mut out = [PacketRef::default(); 4];
/// assert_eq!(q.dequeue(t0, &mut out), 1); // the burst
/// // 1500 bytes at 1 Mbit/s take 12 ms.
/// assert_eq!(q.next_due(), Some(Timestamp::from_nanos(12_000_000)));
/// ```
#[derive(Debug)]
pub struct TokenBucketRr {
    classes: Vec<Class>,
    /// Backlogged classes in round-robin order; the front is visited next.
    active: VecDeque<u32>,
    len: usize,
    last_now: Timestamp,
    counters: QueueCounters,
}

impl TokenBucketRr {
    /// A shaper with one class per entry of `classes`, class `i` being `ClassId(i)`, each with a
    /// full bucket. Entries beyond [`MAX_CLASSES`] are ignored.
    pub fn new(classes: Vec<ClassConfig>) -> Self {
        let classes: Vec<Class> = classes
            .into_iter()
            .take(MAX_CLASSES)
            .map(Class::new)
            .collect();
        TokenBucketRr {
            // Preallocated: the active list never holds more than one entry per class.
            active: VecDeque::with_capacity(classes.len()),
            classes,
            len: 0,
            last_now: Timestamp::ZERO,
            counters: QueueCounters::default(),
        }
    }

    /// Changes `class`'s rate. Tokens earned up to the latest `now` this shaper has seen are
    /// credited at the old rate first; the core reads no clock, so time after that counts at the
    /// new rate. At zero the class sends nothing, whatever its tokens; a rate above zero set later
    /// lets it use the tokens it kept (at most its burst) and earn more from then on.
    pub fn set_rate(&mut self, class: ClassId, rate: Rate) -> Result<(), UnknownClass> {
        let now = self.last_now;
        let c = self
            .classes
            .get_mut(class.index())
            .ok_or(UnknownClass(class))?;
        c.refill(now);
        c.bucket.rate = rate;
        Ok(())
    }

    /// `class`'s rate, `None` when not configured.
    pub fn rate(&self, class: ClassId) -> Option<Rate> {
        self.classes.get(class.index()).map(|c| c.bucket.rate)
    }

    /// `class`'s burst in bytes (after raising 0 to 1), `None` when not configured.
    pub fn burst(&self, class: ClassId) -> Option<u32> {
        self.classes.get(class.index()).map(|c| c.bucket.burst)
    }

    /// Number of configured classes.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Classes currently backlogged.
    pub fn backlogged_classes(&self) -> usize {
        self.active.len()
    }

    /// Records `now`; time never goes backwards.
    fn observe(&mut self, now: Timestamp) {
        debug_assert!(now >= self.last_now, "time went backwards");
        self.last_now = self.last_now.max(now);
    }

    /// Checks the executable invariants (CONTRIBUTING.md §10).
    #[cfg(test)]
    fn invariants(&self) {
        let mut seen = vec![false; self.classes.len()];
        for &id in &self.active {
            assert!(
                !core::mem::replace(&mut seen[id as usize], true),
                "listed twice"
            );
        }
        let mut held = 0;
        for (c, listed) in self.classes.iter().zip(seen) {
            assert_eq!(c.active, listed);
            assert_eq!(c.active, !c.queue.is_empty());
            assert!(c.bucket.tokens <= c.bucket.cap);
            assert!(c.bucket.tokens > -i128::from(u16::MAX) * TOKEN_UNITS_PER_BYTE);
            held += c.queue.len();
        }
        assert_eq!(held, self.len);
        assert_eq!(
            self.counters.enqueued - self.counters.dequeued,
            self.len as u64
        );
    }
}

impl EdtQueue for TokenBucketRr {
    fn name(&self) -> &'static str {
        "token_bucket_rr"
    }

    /// Queues `pkt` in its class's FIFO. `edt` is ignored (module docs).
    fn enqueue(&mut self, now: Timestamp, _edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        self.observe(now);
        let Some(c) = self.classes.get_mut(pkt.class.index()) else {
            let reason = RejectReason::UnknownClass;
            self.counters.count_rejection(reason);
            return Err(Rejected { pkt, reason });
        };
        c.queue.push_back(pkt);
        if !c.active {
            c.active = true;
            self.active.push_back(pkt.class.0);
        }
        self.len += 1;
        self.counters.enqueued += 1;
        Ok(())
    }

    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        self.observe(now);
        let mut n = 0;
        let mut visits = self.active.len();
        while visits > 0 && n < out.len() {
            visits -= 1;
            let Some(&id) = self.active.front() else {
                break;
            };
            let Some(c) = self.classes.get_mut(id as usize) else {
                self.active.pop_front();
                continue;
            };
            c.refill(now);
            n += c.serve(&mut out[n..]);
            if c.queue.is_empty() {
                c.active = false;
                self.active.pop_front();
            } else if n == out.len() && c.head_sendable() {
                break; // out is full: the next call resumes with this class
            } else {
                self.active.rotate_left(1);
            }
        }
        self.len -= n;
        self.counters.dequeued += n as u64;
        if n > 0 {
            self.counters.nonempty_dequeues += 1;
        }
        n
    }

    /// The earliest instant any backlogged class has the tokens for its head packet; in the past
    /// when one already has. `Timestamp::MAX` when only zero-rate classes are backlogged.
    fn next_due(&self) -> Option<Timestamp> {
        self.active
            .iter()
            .filter_map(|&id| self.classes.get(id as usize))
            .filter_map(Class::due)
            .min()
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The class table, every FIFO's buffer and the active list, all exact. Walks the classes:
    /// O(classes), for reports, not for the hot path.
    fn memory_bytes(&self) -> usize {
        let table = self.classes.capacity() * core::mem::size_of::<Class>();
        let fifos: usize = self
            .classes
            .iter()
            .map(|c| c.queue.capacity() * PACKET_REF_BYTES)
            .sum();
        table + fifos + self.active.capacity() * core::mem::size_of::<u32>()
    }

    /// One [`PacketRef`] per queued packet.
    fn packet_bytes(&self) -> usize {
        self.len * PACKET_REF_BYTES
    }

    fn counters(&self) -> QueueCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::FlowId;

    const MS: u64 = 1_000_000;

    fn pkt(id: u32, class: u16, len: u16) -> PacketRef {
        PacketRef::new(id, FlowId(id), ClassId(u32::from(class)), len)
    }

    fn ts(n: u64) -> Timestamp {
        Timestamp::from_nanos(n)
    }

    fn one_class(rate: Rate, burst: u32) -> TokenBucketRr {
        TokenBucketRr::new(vec![ClassConfig { rate, burst }])
    }

    fn ids(q: &mut TokenBucketRr, now: u64, batch: usize) -> Vec<u32> {
        let mut out = vec![PacketRef::default(); batch];
        let n = q.dequeue(ts(now), &mut out);
        q.invariants();
        out[..n].iter().map(|p| p.id).collect()
    }

    #[test]
    fn tokens_start_full_then_refill_at_rate() {
        let mut q = one_class(Rate::mbps(1), 4_500);
        for id in 0..5 {
            q.enqueue(ts(0), ts(0), pkt(id, 0, 1_500)).unwrap();
        }
        assert_eq!(ids(&mut q, 0, 8), [0, 1, 2]);
        // 1500 bytes at 1 Mbit/s: 12 ms.
        assert_eq!(q.next_due(), Some(ts(12 * MS)));
        assert_eq!(ids(&mut q, 12 * MS - 1, 8), Vec::<u32>::new());
        assert_eq!(ids(&mut q, 12 * MS, 8), [3]);
        assert_eq!(q.next_due(), Some(ts(24 * MS)));
        assert_eq!(ids(&mut q, 30 * MS, 8), [4]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn equal_edts_leave_fifo_and_edt_is_ignored() {
        let mut q = one_class(Rate::gbps(1), 100_000);
        q.enqueue(ts(0), ts(5 * MS), pkt(1, 0, 100)).unwrap();
        q.enqueue(ts(0), ts(0), pkt(2, 0, 100)).unwrap();
        q.enqueue(ts(0), ts(5 * MS), pkt(3, 0, 100)).unwrap();
        // The bucket decides, not the EDT: all leave now, in arrival order.
        assert_eq!(ids(&mut q, 0, 8), [1, 2, 3]);
    }

    #[test]
    fn nothing_leaves_before_its_tokens() {
        let mut q = one_class(Rate::mbps(8), 1_000); // 1 byte per microsecond
        q.enqueue(ts(0), ts(0), pkt(1, 0, 1_000)).unwrap();
        q.enqueue(ts(0), ts(0), pkt(2, 0, 600)).unwrap();
        assert_eq!(ids(&mut q, 0, 4), [1]);
        assert_eq!(q.next_due(), Some(ts(600_000)));
        for t in [1, 1_000, 300_000, 599_999] {
            assert_eq!(ids(&mut q, t, 4), Vec::<u32>::new(), "at {t} ns");
        }
        assert_eq!(ids(&mut q, 600_000, 4), [2]);
    }

    #[test]
    fn unknown_class_is_handed_back() {
        let mut q = TokenBucketRr::new(vec![
            ClassConfig {
                rate: Rate::gbps(1),
                burst: 1_500
            };
            2
        ]);
        let p = pkt(9, 2, 100);
        let err = q.enqueue(ts(0), ts(0), p).unwrap_err();
        assert_eq!((err.pkt, err.reason), (p, RejectReason::UnknownClass));
        assert_eq!(q.counters().rejected_unknown_class, 1);
        assert_eq!(q.counters().enqueued, 0);
        assert_eq!(
            q.set_rate(ClassId(2), Rate::gbps(1)),
            Err(UnknownClass(ClassId(2)))
        );
        assert!(q.is_empty());
        q.invariants();
    }

    #[test]
    fn classes_are_served_round_robin() {
        let cfg = ClassConfig {
            rate: Rate::mbps(1),
            burst: 1_500,
        };
        let mut q = TokenBucketRr::new(vec![cfg; 3]);
        for round in 0..3u32 {
            for class in 0..3u16 {
                q.enqueue(
                    ts(0),
                    ts(0),
                    pkt(10 * round + u32::from(class), class, 1_500),
                )
                .unwrap();
            }
        }
        assert_eq!(q.backlogged_classes(), 3);
        assert_eq!(ids(&mut q, 0, 8), [0, 1, 2]);
        assert_eq!(ids(&mut q, 12 * MS, 8), [10, 11, 12]);
        assert_eq!(ids(&mut q, 24 * MS, 8), [20, 21, 22]);
        assert_eq!(q.backlogged_classes(), 0);
    }

    #[test]
    fn out_buffer_limit_respected_and_round_robin_resumes() {
        let cfg = ClassConfig {
            rate: Rate::mbps(1),
            burst: 3_000,
        };
        let mut q = TokenBucketRr::new(vec![cfg; 2]);
        for id in 0..3 {
            q.enqueue(ts(0), ts(0), pkt(id, 0, 1_000)).unwrap();
            q.enqueue(ts(0), ts(0), pkt(10 + id, 1, 1_000)).unwrap();
        }
        // Class 0 can send three but out holds two: it stays at the front.
        assert_eq!(ids(&mut q, 0, 2), [0, 1]);
        assert_eq!(ids(&mut q, 0, 2), [2, 10]);
        assert_eq!(ids(&mut q, 0, 2), [11, 12]);
        assert_eq!(ids(&mut q, 0, 0), Vec::<u32>::new());
        assert!(q.is_empty());
        let c = q.counters();
        assert_eq!((c.enqueued, c.dequeued, c.nonempty_dequeues), (6, 6, 3));
    }

    #[test]
    fn blocked_class_does_not_block_others() {
        let cfg = |rate| ClassConfig { rate, burst: 1_500 };
        let mut q = TokenBucketRr::new(vec![cfg(Rate::kbps(1)), cfg(Rate::gbps(1))]);
        for id in 0..2 {
            q.enqueue(ts(0), ts(0), pkt(id, 0, 1_500)).unwrap();
            q.enqueue(ts(0), ts(0), pkt(10 + id, 1, 1_500)).unwrap();
        }
        assert_eq!(ids(&mut q, 0, 8), [0, 10]);
        assert_eq!(q.next_due(), Some(ts(12_000))); // class 1: 1500 B at 1 Gbit/s
        assert_eq!(ids(&mut q, 12_000, 8), [11]);
        assert_eq!(q.next_due(), Some(ts(12_000 * MS))); // class 0: 1500 B at 1 kbit/s
    }

    #[test]
    fn oversized_packet_leaves_on_a_full_bucket_and_pays_in_full() {
        let mut q = one_class(Rate::mbps(1), 100);
        q.enqueue(ts(0), ts(0), pkt(1, 0, 1_500)).unwrap();
        q.enqueue(ts(0), ts(0), pkt(2, 0, 1_500)).unwrap();
        assert_eq!(ids(&mut q, 0, 4), [1]);
        // Debt of 1400 bytes, then 100 to reach min(len, burst): 1500 bytes = 12 ms.
        assert_eq!(q.next_due(), Some(ts(12 * MS)));
        assert_eq!(ids(&mut q, 12 * MS - 1, 4), Vec::<u32>::new());
        assert_eq!(ids(&mut q, 12 * MS, 4), [2]);
    }

    #[test]
    fn zero_burst_is_raised_to_one_byte() {
        let mut q = one_class(Rate::mbps(8), 0);
        assert_eq!(q.burst(ClassId(0)), Some(1));
        q.enqueue(ts(0), ts(0), pkt(1, 0, 64)).unwrap();
        q.enqueue(ts(0), ts(0), pkt(2, 0, 64)).unwrap();
        assert_eq!(ids(&mut q, 0, 4), [1]);
        assert_eq!(q.next_due(), Some(ts(64_000)));
    }

    #[test]
    fn zero_rate_holds_packets_until_set_rate() {
        let mut q = one_class(Rate::from_bps(0), 1_500);
        for id in 0..2 {
            q.enqueue(ts(0), ts(0), pkt(id, 0, 1_500)).unwrap();
        }
        // Nothing leaves at zero, not even what the full bucket would cover.
        assert_eq!(q.next_due(), Some(Timestamp::MAX));
        assert_eq!(ids(&mut q, 0, 4), Vec::<u32>::new());
        assert_eq!(ids(&mut q, 1_000 * MS, 4), Vec::<u32>::new());
        q.set_rate(ClassId(0), Rate::mbps(1)).unwrap();
        assert_eq!(q.rate(ClassId(0)), Some(Rate::mbps(1)));
        // The kept burst lets the head leave at once; the next earns its tokens from the latest
        // `now` seen (1 s), at the new rate.
        assert_eq!(q.next_due(), Some(ts(1_000 * MS)));
        assert_eq!(ids(&mut q, 1_000 * MS, 4), [0]);
        assert_eq!(q.next_due(), Some(ts(1_012 * MS)));
        assert_eq!(ids(&mut q, 1_012 * MS, 4), [1]);
    }

    /// Bytes released by `t` never exceed `burst + rate * t` and stay within one packet of it
    /// while backlogged; `next_due` is exact: nothing a nanosecond before, something at it.
    #[test]
    fn rate_conformance_over_a_long_run() {
        let rate = Rate::mbps(937); // not a round number of bytes per ns
        let burst = 3_000u32;
        let mut q = one_class(rate, burst);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next_len = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            64 + (seed % 1_437) as u16
        };
        for id in 0..60_000 {
            q.enqueue(ts(0), ts(0), pkt(id, 0, next_len())).unwrap();
        }
        let mut out = [PacketRef::default(); 16];
        let (mut sent, mut now, mut polls) = (0u64, 0u64, 0u64);
        let end = 200 * MS;
        while now < end {
            let due = q.next_due().unwrap().as_nanos();
            if due > now {
                assert_eq!(q.dequeue(ts(due - 1), &mut out), 0, "early at {}", due - 1);
                now = due;
            }
            let n = q.dequeue(ts(now), &mut out);
            assert!(n > 0, "next_due {due} released nothing at {now}");
            sent += out[..n].iter().map(|p| u64::from(p.len)).sum::<u64>();
            let allowed = u64::from(burst) + rate.bytes_in(Duration::from_nanos(now));
            assert!(sent <= allowed, "{sent} > {allowed} at {now}");
            assert!(sent + 1_500 >= allowed, "{sent} lags {allowed} at {now}");
            polls += 1;
        }
        assert!(polls > 10_000);
        q.invariants();
    }

    proptest::proptest! {
        /// Random operations on several classes, some with bursts below the packet size: the
        /// invariants hold, each class stays within its bound, and `next_due` is never late.
        #[test]
        fn random_operations_conform(
            ops in proptest::collection::vec((0u16..4, 40u16..2_000, 0u64..50_000), 1..400),
            batch in 1usize..5,
        ) {
            let cfgs = [(Rate::mbps(100), 1_000), (Rate::mbps(7), 3_000), (Rate::gbps(2), 64)];
            let mut q = TokenBucketRr::new(
                cfgs.iter().map(|&(rate, burst)| ClassConfig { rate, burst }).collect(),
            );
            let mut sent = [0u64; 3];
            let mut out = vec![PacketRef::default(); batch];
            let mut now = 0;
            for (id, &(class, len, advance)) in ops.iter().enumerate() {
                let accepted = q.enqueue(ts(now), ts(0), pkt(id as u32, class, len)).is_ok();
                proptest::prop_assert_eq!(accepted, class < 3);
                now += advance;
                let due_before = q.next_due();
                let n = q.dequeue(ts(now), &mut out);
                if due_before.is_some_and(|d| d <= ts(now)) {
                    proptest::prop_assert!(n > 0);
                }
                for p in &out[..n] {
                    sent[p.class.index()] += u64::from(p.len);
                }
                for (c, &(rate, burst)) in cfgs.iter().enumerate() {
                    let overshoot = 2_000u64.saturating_sub(u64::from(burst));
                    let allowed = u64::from(burst) + rate.bytes_in(Duration::from_nanos(now));
                    proptest::prop_assert!(sent[c] <= allowed + overshoot);
                }
                q.invariants();
            }
        }
    }

    #[test]
    fn memory_accounting() {
        let cfg = ClassConfig {
            rate: Rate::gbps(1),
            burst: 1_500,
        };
        let mut q = TokenBucketRr::new(vec![cfg; 4]);
        let empty = q.memory_bytes();
        assert!(empty >= 4 * core::mem::size_of::<Class>());
        for id in 0..10 {
            q.enqueue(ts(0), ts(0), pkt(id, (id % 4) as u16, 100))
                .unwrap();
        }
        assert_eq!(q.packet_bytes(), 10 * PACKET_REF_BYTES);
        assert!(q.memory_bytes() >= empty + q.packet_bytes());
        assert_eq!(q.name(), "token_bucket_rr");
        assert_eq!(q.class_count(), 4);
    }
}
