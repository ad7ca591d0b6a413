//! Named counters of a [`super::MqPort`]: per queue and for the whole port (CONTRIBUTING.md §11:
//! every drop, mark and fallback has one). Monotonic over the port's life.

/// Counters of one queue; the port's `port` field holds the same sums over all queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MqQueueCounters {
    /// Packets accepted.
    pub enqueued_packets: u64,
    /// Bytes accepted.
    pub enqueued_bytes: u64,
    /// Packets sent.
    pub dequeued_packets: u64,
    /// Bytes sent.
    pub dequeued_bytes: u64,
    /// Accepted packets the caller was told to mark CE.
    pub marked: u64,
    /// Packets handed back because the shared buffer was full (drop-tail).
    pub buffer_drops: u64,
    /// Non-ECN-capable packets over the threshold handed back ([`crate::NonEctPolicy::Drop`]).
    pub non_ect_drops: u64,
    /// Non-ECN-capable packets over the threshold accepted unmarked
    /// ([`crate::NonEctPolicy::Pass`]).
    pub non_ect_passes: u64,
    /// Turns of service finished by a weighted queue (each gives one `T_round` sample under
    /// MQ-ECN); 0 for strict-priority queues, which have no turns.
    pub turns: u64,
}

/// Counters of a port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MqCounters {
    /// Sums over all queues.
    pub port: MqQueueCounters,
    /// Per queue, by index.
    pub queues: Vec<MqQueueCounters>,
    /// Packets handed back because their class names no queue (no queue to charge).
    pub unknown_queue: u64,
    /// Packets handed back because they were longer than the MTU (no queue charged).
    pub too_long: u64,
    /// Of `buffer_drops`: refused because the reference pool ran out before the byte limit
    /// (packets shorter than [`super::MIN_PACKET_BYTES`]).
    pub pool_exhausted: u64,
    /// `T_round` samples taken (MQ-ECN only).
    pub t_round_samples: u64,
    /// Whole `T_idle` periods of idleness that decayed `T_round` (MQ-ECN only).
    pub idle_decays: u64,
}

impl MqCounters {
    pub(super) fn new(queues: usize) -> Self {
        MqCounters {
            queues: vec![MqQueueCounters::default(); queues],
            ..Default::default()
        }
    }

    /// Applies `f` to queue `qi`'s counters and to the port's.
    #[inline]
    fn both(&mut self, qi: usize, f: impl Fn(&mut MqQueueCounters)) {
        f(&mut self.queues[qi]);
        f(&mut self.port);
    }

    pub(super) fn count_enqueue(&mut self, qi: usize, len: u64, marked: bool) {
        self.both(qi, |c| {
            c.enqueued_packets += 1;
            c.enqueued_bytes += len;
            c.marked += u64::from(marked);
        });
    }

    pub(super) fn count_dequeue(&mut self, qi: usize, len: u64) {
        self.both(qi, |c| {
            c.dequeued_packets += 1;
            c.dequeued_bytes += len;
        });
    }

    pub(super) fn count_turn(&mut self, qi: usize) {
        self.both(qi, |c| c.turns += 1);
    }

    pub(super) fn count_buffer_drop(&mut self, qi: usize) {
        self.both(qi, |c| c.buffer_drops += 1);
    }

    pub(super) fn count_non_ect_drop(&mut self, qi: usize) {
        self.both(qi, |c| c.non_ect_drops += 1);
    }

    pub(super) fn count_non_ect_pass(&mut self, qi: usize) {
        self.both(qi, |c| c.non_ect_passes += 1);
    }
}
