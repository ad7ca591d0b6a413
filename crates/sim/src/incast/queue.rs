//! The incast run's events in one binary heap, popped in `(time, sequence)` order so that two
//! events at the same instant fire in the order they were scheduled (deterministic runs,
//! STYLE.md §14). The heap keeps its capacity: the steady state does not allocate.

use crate::event::Ack;
use metronome_core::Timestamp;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ev {
    /// A flow starts sending.
    Start(u32),
    /// A flow's retransmission timer (lazy: it re-checks the flow's deadline).
    Rto(u32),
    /// A data packet (descriptor) reaches the switch port toward the receiver.
    AtPort(u32),
    /// A data packet reaches the receiver.
    AtReceiver(u32),
    /// An ACK reaches its sender.
    AckAtSender(Ack),
    /// ACK shaping may have generated ACKs due.
    AckPoll,
    /// A measurement window closes.
    Window,
    /// The run ends.
    End,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    time: Timestamp,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest `(time, seq)` must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// The event heap.
pub(super) struct EventHeap {
    heap: BinaryHeap<Entry>,
    next_seq: u64,
    now: Timestamp,
    popped: u64,
}

impl EventHeap {
    pub fn with_capacity(capacity: usize) -> Self {
        EventHeap {
            heap: BinaryHeap::with_capacity(capacity),
            next_seq: 0,
            now: Timestamp::ZERO,
            popped: 0,
        }
    }

    /// Schedules `ev` at `time` (not before the current time).
    pub fn schedule(&mut self, time: Timestamp, ev: Ev) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry {
            time: time.max(self.now),
            seq,
            ev,
        });
    }

    /// The earliest event, removed, with the clock moved to its time.
    pub fn pop(&mut self) -> Option<(Timestamp, Ev)> {
        let e = self.heap.pop()?;
        debug_assert!(e.time >= self.now, "time went backwards");
        self.now = e.time;
        self.popped += 1;
        Some((e.time, e.ev))
    }

    /// Events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }
}
