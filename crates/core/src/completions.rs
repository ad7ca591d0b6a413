//! Deferred Completions: backpressure from the shaper to its sources by holding each packet's
//! completion until the shaper releases the packet (Carousel §5.2, Figure 11).
//!
//! A source keeps at most [`DEFAULT_INFLIGHT_LIMIT`] packets in flight per flow ([`InFlight`]);
//! [`CompletionMode::AtEnqueue`] completes at acceptance (Figure 11a, no backpressure),
//! [`CompletionMode::AtRelease`] with the packet's release (Figure 11b). [`Deferred`] wraps any
//! [`EdtQueue`] and produces one [`Completion`] per packet, out of order across flows as Carousel's
//! driver does (§5.2). A packet the queue hands back is a virtual drop, not in flight.
//!
//! Where it departs from the paper: a flow index beyond the tracker's capacity is untracked
//! (counted in `untracked`), not refused. The reasons: `docs/design/carousel.md`.

use crate::packet::{FlowId, PacketRef};
use crate::queue::{EdtQueue, QueueCounters, Rejected};
use crate::time::Timestamp;

/// Default packets in flight per flow: 2, TCP Small Queues' default of two TSO packets per socket
/// (zD §5.1, "if a socket already has two TSO packets in flight, the socket will be throttled").
pub const DEFAULT_INFLIGHT_LIMIT: u16 = 2;

/// Bytes of per-flow state of an [`InFlight`] tracker (one `u16` count).
pub const INFLIGHT_BYTES_PER_FLOW: usize = core::mem::size_of::<u16>();

/// The completion of one packet: the source may send again on `flow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The packet's id ([`PacketRef::id`]).
    pub id: u32,
    /// The packet's flow.
    pub flow: FlowId,
}

impl Completion {
    /// The completion of `pkt`.
    pub const fn of(pkt: &PacketRef) -> Self {
        Completion {
            id: pkt.id,
            flow: pkt.flow,
        }
    }
}

/// When a packet's completion is produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CompletionMode {
    /// When the shaper accepts the packet: no backpressure (Carousel Figure 11a).
    AtEnqueue,
    /// When the shaper releases the packet: Deferred Completions (Carousel Figure 11b).
    #[default]
    AtRelease,
}

/// Named counters of an [`InFlight`] tracker. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlightCounters {
    /// Packets recorded as sent on a tracked flow.
    pub sent: u64,
    /// Completions recorded on a tracked flow.
    pub completed: u64,
    /// Packets sent while the flow was at its limit (a source that ignored `can_send`).
    pub sent_over_limit: u64,
    /// Completions on a flow with nothing in flight (ignored).
    pub completed_unmatched: u64,
    /// `sent` or `completed` on a flow index beyond capacity (untracked).
    pub untracked: u64,
}

/// Packets in flight per flow, with a per-flow limit (TCP Small Queues).
///
/// Flows are dense indices `0..capacity`, fixed at construction (no allocation afterwards);
/// 2 bytes per flow. A flow beyond capacity is untracked: `can_send` is true, `sent` and
/// `completed` only count it.
///
/// ```
/// use metronome_core::completions::InFlight;
/// use metronome_core::FlowId;
///
/// let mut f = InFlight::new(4, 2);
/// f.sent(FlowId(1));
/// f.sent(FlowId(1));
/// assert!(!f.can_send(FlowId(1)));
/// f.completed(FlowId(1));
/// assert!(f.can_send(FlowId(1)));
/// ```
#[derive(Clone, Debug)]
pub struct InFlight {
    counts: Vec<u16>,
    limit: u16,
    total: u64,
    counters: InFlightCounters,
}

impl InFlight {
    /// A tracker for flows `0..flows`, each allowed `limit` packets in flight.
    pub fn new(flows: usize, limit: u16) -> Self {
        InFlight {
            counts: vec![0; flows],
            limit,
            total: 0,
            counters: InFlightCounters::default(),
        }
    }

    /// A tracker with [`DEFAULT_INFLIGHT_LIMIT`].
    pub fn with_default_limit(flows: usize) -> Self {
        Self::new(flows, DEFAULT_INFLIGHT_LIMIT)
    }

    /// True if `flow` may send one more packet.
    #[inline]
    pub fn can_send(&self, flow: FlowId) -> bool {
        self.counts
            .get(flow.0 as usize)
            .is_none_or(|&c| c < self.limit)
    }

    /// Records a packet of `flow` sent.
    #[inline]
    pub fn sent(&mut self, flow: FlowId) {
        let Some(c) = self.counts.get_mut(flow.0 as usize) else {
            self.counters.untracked += 1;
            return;
        };
        if *c >= self.limit {
            self.counters.sent_over_limit += 1;
        }
        *c = c.saturating_add(1);
        self.total += 1;
        self.counters.sent += 1;
    }

    /// Records the completion of a packet of `flow`.
    #[inline]
    pub fn completed(&mut self, flow: FlowId) {
        let Some(c) = self.counts.get_mut(flow.0 as usize) else {
            self.counters.untracked += 1;
            return;
        };
        if *c == 0 {
            self.counters.completed_unmatched += 1;
            return;
        }
        *c -= 1;
        self.total -= 1;
        self.counters.completed += 1;
    }

    /// Packets of `flow` in flight (0 for an untracked flow).
    pub fn in_flight(&self, flow: FlowId) -> u16 {
        self.counts.get(flow.0 as usize).copied().unwrap_or(0)
    }

    /// Packets in flight over all tracked flows.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The per-flow limit.
    pub fn limit(&self) -> u16 {
        self.limit
    }

    /// Flow indices tracked: `0..capacity()`.
    pub fn capacity(&self) -> usize {
        self.counts.len()
    }

    /// Bytes held by the per-flow table.
    pub fn memory_bytes(&self) -> usize {
        self.counts.capacity() * INFLIGHT_BYTES_PER_FLOW
    }

    /// The named counters.
    pub fn counters(&self) -> InFlightCounters {
        self.counters
    }

    /// Checks the invariants (walks every flow: for tests): the total is the sum of the counts
    /// and equals sends minus completions.
    pub fn invariants(&self) {
        let sum: u64 = self.counts.iter().map(|&c| u64::from(c)).sum();
        assert_eq!(sum, self.total);
        assert_eq!(self.counters.sent - self.counters.completed, self.total);
    }
}

/// Named counters of a [`Deferred`] wrapper. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionCounters {
    /// Packets the queue accepted.
    pub enqueued: u64,
    /// Packets the queue handed back (virtual drops; no completion, not in flight).
    pub handed_back: u64,
    /// Completions produced at enqueue ([`CompletionMode::AtEnqueue`]).
    pub completions_at_enqueue: u64,
    /// Completions produced at release ([`CompletionMode::AtRelease`]).
    pub completions_at_release: u64,
}

/// An [`EdtQueue`] whose packets' completions are produced per [`CompletionMode`], with the
/// per-flow in-flight count sources consult before sending (Carousel §5.2).
///
/// ```
/// use metronome_core::completions::{CompletionMode, Deferred};
/// use metronome_core::{ClassId, Duration, FlowId, PacketRef, Timestamp, TimingWheel,
///                      TimingWheelConfig};
///
/// let wheel = TimingWheel::new(TimingWheelConfig { pool_packets: 64, ..Default::default() });
/// let mut d = Deferred::new(wheel, CompletionMode::AtRelease, 8, 2);
/// let now = Timestamp::from_nanos(1_000_000);
/// let pkt = PacketRef::new(7, FlowId(3), ClassId(0), 1500);
/// assert_eq!(d.enqueue(now, now + Duration::from_micros(10), pkt), Ok(None));
/// assert_eq!(d.in_flight(FlowId(3)), 1);
/// let (mut out, mut done) = ([PacketRef::default(); 8], Vec::with_capacity(8));
/// assert_eq!(d.dequeue(now + Duration::from_micros(10), &mut out, &mut done), 1);
/// assert_eq!(done[0].id, 7);
/// assert_eq!(d.in_flight(FlowId(3)), 0);
/// ```
pub struct Deferred<Q: EdtQueue> {
    queue: Q,
    inflight: InFlight,
    mode: CompletionMode,
    counters: CompletionCounters,
}

impl<Q: EdtQueue> Deferred<Q> {
    /// Wraps `queue`, tracking flows `0..flows` with `limit` packets in flight each.
    pub fn new(queue: Q, mode: CompletionMode, flows: usize, limit: u16) -> Self {
        Deferred {
            queue,
            inflight: InFlight::new(flows, limit),
            mode,
            counters: CompletionCounters::default(),
        }
    }

    /// True if `flow`'s source may send another packet (it has fewer than the limit in flight).
    #[inline]
    pub fn can_send(&self, flow: FlowId) -> bool {
        self.inflight.can_send(flow)
    }

    /// Packets of `flow` sent and not yet completed.
    pub fn in_flight(&self, flow: FlowId) -> u16 {
        self.inflight.in_flight(flow)
    }

    /// Offers `pkt` to the queue. `Ok(Some(completion))` in [`CompletionMode::AtEnqueue`] (the
    /// completion is immediate), `Ok(None)` in [`CompletionMode::AtRelease`] (it comes from
    /// `dequeue`). A packet the queue refuses is handed back and is not in flight.
    #[inline]
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        edt: Timestamp,
        pkt: PacketRef,
    ) -> Result<Option<Completion>, Rejected> {
        if let Err(r) = self.queue.enqueue(now, edt, pkt) {
            self.counters.handed_back += 1;
            return Err(r);
        }
        self.counters.enqueued += 1;
        self.inflight.sent(pkt.flow);
        match self.mode {
            CompletionMode::AtRelease => Ok(None),
            CompletionMode::AtEnqueue => {
                self.inflight.completed(pkt.flow);
                self.counters.completions_at_enqueue += 1;
                Ok(Some(Completion::of(&pkt)))
            }
        }
    }

    /// Releases the packets due at `now` into `out` (as [`EdtQueue::dequeue`]) and, in
    /// [`CompletionMode::AtRelease`], appends one completion per released packet to
    /// `completions`, in release order. Returns the number of packets released.
    #[inline]
    pub fn dequeue(
        &mut self,
        now: Timestamp,
        out: &mut [PacketRef],
        completions: &mut impl Extend<Completion>,
    ) -> usize {
        let n = self.queue.dequeue(now, out);
        if self.mode == CompletionMode::AtRelease {
            for pkt in &out[..n] {
                self.inflight.completed(pkt.flow);
            }
            self.counters.completions_at_release += n as u64;
            completions.extend(out[..n].iter().map(Completion::of));
        }
        n
    }

    /// The wrapped queue's next deadline.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.queue.next_due()
    }

    /// Packets queued.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The completion mode.
    pub fn mode(&self) -> CompletionMode {
        self.mode
    }

    /// The wrapped queue (read only: enqueueing behind the wrapper's back would break the count).
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// The in-flight tracker.
    pub fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    /// This wrapper's counters.
    pub fn counters(&self) -> CompletionCounters {
        self.counters
    }

    /// The wrapped queue's counters.
    pub fn queue_counters(&self) -> QueueCounters {
        self.queue.counters()
    }

    /// Bytes of per-flow state: [`INFLIGHT_BYTES_PER_FLOW`].
    pub const fn bytes_per_flow() -> usize {
        INFLIGHT_BYTES_PER_FLOW
    }

    /// Unwraps the queue.
    pub fn into_inner(self) -> Q {
        self.queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary_heap::BinaryHeapQueue;
    use crate::packet::ClassId;
    use crate::queue::RejectReason;
    use crate::time::Duration;
    use crate::{HorizonPolicy, TimingWheel, TimingWheelConfig};

    fn pkt(id: u32, flow: u32) -> PacketRef {
        PacketRef::new(id, FlowId(flow), ClassId(0), 1500)
    }

    fn wheel() -> TimingWheel {
        TimingWheel::new(TimingWheelConfig {
            granularity: Duration::from_micros(1),
            horizon: Duration::from_micros(100),
            horizon_policy: HorizonPolicy::Reject,
            pool_packets: 64,
        })
    }

    #[test]
    fn inflight_limits_and_counts() {
        let mut f = InFlight::with_default_limit(2);
        assert_eq!(f.limit(), 2);
        f.sent(FlowId(0));
        f.sent(FlowId(0));
        assert!(!f.can_send(FlowId(0)));
        assert!(f.can_send(FlowId(1)));
        f.sent(FlowId(0)); // a source that ignored can_send
        assert_eq!(f.in_flight(FlowId(0)), 3);
        assert_eq!(f.total(), 3);
        for _ in 0..4 {
            f.completed(FlowId(0));
        }
        f.sent(FlowId(9));
        f.completed(FlowId(9));
        assert!(f.can_send(FlowId(9)));
        let c = f.counters();
        assert_eq!(
            (
                c.sent,
                c.completed,
                c.sent_over_limit,
                c.completed_unmatched,
                c.untracked
            ),
            (3, 3, 1, 1, 2)
        );
        assert_eq!(f.total(), 0);
        assert_eq!(f.memory_bytes(), 4);
    }

    #[test]
    fn at_release_completes_out_of_order_in_release_order() {
        let mut d = Deferred::new(BinaryHeapQueue::new(), CompletionMode::AtRelease, 4, 2);
        let t0 = Timestamp::from_nanos(1_000);
        // The slow flow 0 arrives first, the fast flow 1 later but leaves first.
        d.enqueue(t0, t0 + Duration::from_micros(50), pkt(1, 0))
            .unwrap();
        d.enqueue(t0, t0 + Duration::from_micros(5), pkt(2, 1))
            .unwrap();
        d.enqueue(t0, t0 + Duration::from_micros(6), pkt(3, 1))
            .unwrap();
        assert!(!d.can_send(FlowId(1)));
        assert!(d.can_send(FlowId(0)));
        let mut out = [PacketRef::default(); 8];
        let mut done = Vec::new();
        assert_eq!(
            d.dequeue(t0 + Duration::from_micros(10), &mut out, &mut done),
            2
        );
        assert_eq!(
            done,
            vec![
                Completion {
                    id: 2,
                    flow: FlowId(1)
                },
                Completion {
                    id: 3,
                    flow: FlowId(1)
                }
            ]
        );
        assert!(d.can_send(FlowId(1)));
        assert_eq!(d.in_flight(FlowId(0)), 1);
        assert_eq!(
            d.dequeue(t0 + Duration::from_micros(50), &mut out, &mut done),
            1
        );
        assert_eq!(done[2].flow, FlowId(0));
        assert_eq!(d.counters().completions_at_release, 3);
        assert_eq!(d.counters().completions_at_enqueue, 0);
        assert!(d.is_empty());
    }

    #[test]
    fn at_enqueue_completes_at_once() {
        let mut d = Deferred::new(wheel(), CompletionMode::AtEnqueue, 4, 2);
        let t0 = Timestamp::from_nanos(1_000);
        for id in 0..5 {
            let c = d.enqueue(t0, t0 + Duration::from_micros(20), pkt(id, 0));
            assert_eq!(
                c,
                Ok(Some(Completion {
                    id,
                    flow: FlowId(0)
                }))
            );
            assert!(d.can_send(FlowId(0)));
        }
        assert_eq!(d.len(), 5);
        let mut out = [PacketRef::default(); 8];
        let mut done = Vec::new();
        assert_eq!(
            d.dequeue(t0 + Duration::from_micros(20), &mut out, &mut done),
            5
        );
        assert!(done.is_empty());
        assert_eq!(d.counters().completions_at_enqueue, 5);
        assert_eq!(d.mode(), CompletionMode::AtEnqueue);
    }

    #[test]
    fn handed_back_packets_are_not_in_flight() {
        let mut d = Deferred::new(wheel(), CompletionMode::AtRelease, 4, 2);
        let t0 = Timestamp::from_nanos(1_000);
        let r = d.enqueue(t0, t0 + Duration::from_millis(1), pkt(1, 2));
        assert_eq!(
            r,
            Err(Rejected {
                pkt: pkt(1, 2),
                reason: RejectReason::BeyondHorizon
            })
        );
        assert_eq!(d.in_flight(FlowId(2)), 0);
        assert_eq!(d.counters().handed_back, 1);
        assert_eq!(d.queue_counters().rejected_beyond_horizon, 1);
        assert_eq!(d.next_due(), None);
        assert_eq!(Deferred::<TimingWheel>::bytes_per_flow(), 2);
        assert_eq!(d.into_inner().len(), 0);
    }
}
