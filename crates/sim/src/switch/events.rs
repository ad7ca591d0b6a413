//! The event queue of the switch-port scenario: timers (flow starts and arrivals, RTOs, NIC and
//! port transmissions, the end) go through a binary heap; packets and ACKs travel three FIFO
//! delay lines (host -> switch, switch -> receiver, receiver -> sender), each of constant delay
//! and entered in time order, as in [`crate::event`]. Everything pops in `(time, sequence)`
//! order. All containers keep their capacity, so the steady state does not allocate.

use crate::event::Ack;
use metronome_core::Timestamp;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

/// What happens at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ev {
    FlowStart(u32),
    NextArrival,
    Rto(u32),
    HostDone(u32),
    PortDone,
    End,
    AtSwitch(u32),
    AtReceiver(u32),
    AckAt(Ack),
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
    fn cmp(&self, o: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(o.time, o.seq))
    }
}

/// Timers in a heap, packets and ACKs on three FIFO lines.
pub(super) struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    lines: [VecDeque<Entry>; 3],
    seq: u64,
    now: Timestamp,
    popped: u64,
}

impl Queue {
    /// An empty queue with room for `capacity` events in each container.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Queue {
            heap: BinaryHeap::with_capacity(capacity),
            lines: [(); 3].map(|_| VecDeque::with_capacity(capacity)),
            seq: 0,
            now: Timestamp::ZERO,
            popped: 0,
        }
    }

    /// Events popped so far.
    pub(super) fn popped(&self) -> u64 {
        self.popped
    }

    fn entry(&mut self, time: Timestamp, ev: Ev) -> Entry {
        debug_assert!(time >= self.now, "event scheduled in the past");
        self.seq += 1;
        Entry {
            time: time.max(self.now),
            seq: self.seq,
            ev,
        }
    }
    pub(super) fn timer(&mut self, time: Timestamp, ev: Ev) {
        let e = self.entry(time, ev);
        self.heap.push(Reverse(e));
    }
    pub(super) fn line(&mut self, line: usize, time: Timestamp, ev: Ev) {
        let e = self.entry(time, ev);
        debug_assert!(self.lines[line].back().is_none_or(|b| b.time <= e.time));
        self.lines[line].push_back(e);
    }
    pub(super) fn pop(&mut self) -> Option<(Timestamp, Ev)> {
        let mut best = self.heap.peek().map(|r| (r.0.time, r.0.seq));
        let mut from = None;
        for (i, l) in self.lines.iter().enumerate() {
            if let Some(e) = l.front() {
                if best.is_none_or(|b| (e.time, e.seq) < b) {
                    best = Some((e.time, e.seq));
                    from = Some(i);
                }
            }
        }
        let e = match from {
            Some(i) => self.lines[i].pop_front()?,
            None => self.heap.pop()?.0,
        };
        debug_assert!(e.time >= self.now, "time went backwards");
        self.now = e.time;
        self.popped += 1;
        Some((e.time, e.ev))
    }
}

pub(super) const TO_SWITCH: usize = 0;
pub(super) const TO_RECEIVER: usize = 1;
pub(super) const TO_SENDER: usize = 2;
