//! The one trait every EDT-ordered queue implements, so that the timing wheel, the multi-level
//! timing wheel and the baselines are compared side by side in one run (Carousel Table 1,
//! FlowBundler §V-C).
//!
//! Nothing is dropped silently (CONTRIBUTING.md §11): a queue that cannot take a packet hands it
//! back in a [`Rejected`] with its [`RejectReason`], and every rejection, clamp and past-due
//! placement has a named counter in [`QueueCounters`].

use crate::packet::PacketRef;
use crate::time::Timestamp;

/// Why a queue handed a packet back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RejectReason {
    /// The EDT lies beyond the queue's horizon and the policy is [`HorizonPolicy::Reject`].
    #[error("EDT beyond the queue's horizon")]
    BeyondHorizon,
    /// The preallocated node pool has no free node.
    #[error("node pool exhausted")]
    PoolExhausted,
    /// The packet's class is not configured (class-based queues only).
    #[error("unknown class")]
    UnknownClass,
    /// The queue holds as many packets as it is configured for.
    #[error("queue full")]
    Full,
}

/// A packet a queue did not accept, handed back to the caller with the reason. Every queue of the
/// core hands packets back this way; `R` is the queue's own reason type ([`RejectReason`] for the
/// EDT queues, [`crate::mq_port::MqRejectReason`] for the multi-queue port).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected<R = RejectReason> {
    /// The packet, untouched.
    pub pkt: PacketRef,
    /// Why it was not accepted.
    pub reason: R,
}

/// What a time-indexed queue does with an EDT beyond its horizon (Carousel §5.1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HorizonPolicy {
    /// Place it in the last slot: no drop, a temporary overshoot (pacing).
    #[default]
    Clamp,
    /// Hand it back with [`RejectReason::BeyondHorizon`]: a hard rate limit.
    Reject,
}

/// Named counters kept by every queue. Monotonic over the queue's life.
///
/// A packet handed back counts once, under its `rejected_*` reason, and in no other counter;
/// `past_due` and `clamped_beyond_horizon` count accepted packets only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets released.
    pub dequeued: u64,
    /// Packets whose EDT had already passed the queue's front, placed in the front slot.
    pub past_due: u64,
    /// Packets whose EDT lay beyond the horizon and were placed in the last slot.
    pub clamped_beyond_horizon: u64,
    /// Packets handed back: EDT beyond the horizon.
    pub rejected_beyond_horizon: u64,
    /// Packets handed back: node pool exhausted.
    pub rejected_pool_exhausted: u64,
    /// Packets handed back: unknown class.
    pub rejected_unknown_class: u64,
    /// Packets handed back: queue full.
    pub rejected_full: u64,
    /// Calls to `dequeue` that returned at least one packet.
    pub nonempty_dequeues: u64,
}

impl QueueCounters {
    /// Counts a rejection under its reason's name.
    pub fn count_rejection(&mut self, reason: RejectReason) {
        match reason {
            RejectReason::BeyondHorizon => self.rejected_beyond_horizon += 1,
            RejectReason::PoolExhausted => self.rejected_pool_exhausted += 1,
            RejectReason::UnknownClass => self.rejected_unknown_class += 1,
            RejectReason::Full => self.rejected_full += 1,
        }
    }
}

/// An EDT-ordered queue of packet references.
///
/// Time is passed in; implementations never read a clock. `now` never goes backwards between
/// calls (implementations may `debug_assert!` it).
pub trait EdtQueue {
    /// The structure's name as reports print it (`timing_wheel`, `binary_heap`, ...).
    fn name(&self) -> &'static str;

    /// Accepts `pkt`, to be released no earlier than `edt` (rounded down to the structure's
    /// granularity), or hands it back with the reason.
    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected>;

    /// Moves packets due at `now` into `out`, earliest slot first and FIFO within a slot, and
    /// returns how many, `n`, it wrote to `out[..n]` (entries past `n` may be overwritten with
    /// stale references and are not meaningful). It stops when `out` is full; packets still due
    /// stay queued and the next call returns them first.
    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize;

    /// The earliest instant at which `dequeue` would return a packet, or `None` exactly when
    /// empty: the caller may sleep until then. `dequeue(now, ..)` with room in `out` returns at
    /// least one packet exactly when `next_due() <= now`; it may lie in the past when due packets
    /// wait.
    fn next_due(&self) -> Option<Timestamp>;

    /// Packets queued.
    fn len(&self) -> usize;

    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of memory the structure holds now: fixed arrays, preallocated pools and per-packet
    /// allocations.
    fn memory_bytes(&self) -> usize;

    /// Bytes currently spent on queued packets (nodes or allocations in use), so that
    /// `packet_bytes() / len()` is the shaper memory per queued packet.
    fn packet_bytes(&self) -> usize;

    /// The named counters.
    fn counters(&self) -> QueueCounters;
}
