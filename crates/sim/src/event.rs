//! The event queue: simulated time jumps from one event to the next, in `(time, sequence)` order.
//!
//! Events are stamped with a sequence number when scheduled, so two events at the same instant
//! fire in the order they were scheduled: the run is deterministic (CONTRIBUTING.md §14) with no
//! dependence on heap internals.
//!
//! Layout for speed. Most events of a run are packet arrivals at the receiver and ACK arrivals at
//! the sender. Both travel a path of constant delay (base RTT / 2 each way) and enter it in time
//! order (the NIC serializes; the receiver answers as packets arrive), so each path is a FIFO
//! delay line: a `VecDeque` push and pop instead of a heap insertion. The queue pops the earliest
//! of the heap's top and the two lines' heads, still in `(time, sequence)` order. Only timers
//! (RTO, pacing, shaper polls, windows) go through the binary heap. All three containers keep
//! their capacity, so the steady state does not allocate.

use metronome_core::Timestamp;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// An ACK on its way back to the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The flow.
    pub flow: u32,
    /// Cumulative ACK: the next MTU the receiver expects.
    pub ack: u32,
    /// The send time of the segment that triggered it (a TCP timestamp echo).
    pub ts_echo: Timestamp,
    /// ECN echo: the segment carried CE.
    pub ece: bool,
}

/// What happens at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A source starts sending.
    FlowStart(u32),
    /// A source's pacing timer: it may send again.
    SourceWake(u32),
    /// A constant-rate UDP source generates a packet.
    UdpTick(u32),
    /// A flow's retransmission timer (lazy: it re-checks the flow's deadline).
    Rto(u32),
    /// A receiver's delayed-ACK timer.
    DelAck(u32),
    /// The shaper may have a due packet.
    ShaperPoll,
    /// The NIC finished serializing its packet.
    NicDone,
    /// A measurement window closes.
    Window,
    /// The run ends.
    End,
    /// A data packet (descriptor index) reaches the receiver.
    Arrive(u32),
    /// An ACK reaches the sender.
    AckArrive(Ack),
}

/// An event stamped with its time and scheduling sequence.
#[derive(Clone, Copy, Debug)]
struct Entry<E> {
    time: Timestamp,
    seq: u64,
    ev: E,
}

impl<E> Entry<E> {
    fn key(&self) -> (Timestamp, u64) {
        (self.time, self.seq)
    }
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest `(time, seq)` must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key().cmp(&self.key())
    }
}

/// Timers in a binary heap plus `LINES` FIFO delay lines (each entered in time order), popped in
/// `(time, sequence)` order: the queue of every simulated scenario (the host model's
/// [`EventQueue`], the switch-port and incast models).
#[derive(Debug)]
pub struct TimedQueue<E, const LINES: usize> {
    heap: BinaryHeap<Entry<E>>,
    lines: [VecDeque<Entry<E>>; LINES],
    next_seq: u64,
    now: Timestamp,
    popped: u64,
}

impl<E, const LINES: usize> TimedQueue<E, LINES> {
    /// An empty queue with room for `capacity` events in each container.
    pub fn with_capacity(capacity: usize) -> Self {
        TimedQueue {
            heap: BinaryHeap::with_capacity(capacity),
            lines: std::array::from_fn(|_| VecDeque::with_capacity(capacity)),
            next_seq: 0,
            now: Timestamp::ZERO,
            popped: 0,
        }
    }

    fn entry(&mut self, time: Timestamp, ev: E) -> Entry<E> {
        debug_assert!(time >= self.now, "event scheduled in the past");
        let seq = self.next_seq;
        self.next_seq += 1;
        Entry {
            time: time.max(self.now),
            seq,
            ev,
        }
    }

    /// Schedules a timer event at `time` (not before the current time).
    pub fn schedule(&mut self, time: Timestamp, ev: E) {
        let e = self.entry(time, ev);
        self.heap.push(e);
    }

    /// Puts `ev` on delay line `line`, arriving at `time` (not before the line's tail).
    pub fn push_line(&mut self, line: usize, time: Timestamp, ev: E) {
        let e = self.entry(time, ev);
        debug_assert!(self.lines[line].back().is_none_or(|b| b.time <= e.time));
        self.lines[line].push_back(e);
    }

    /// The earliest event, removed, with the clock moved to its time.
    pub fn pop(&mut self) -> Option<(Timestamp, E)> {
        let mut best = self.heap.peek().map(Entry::key);
        let mut from = None;
        for (i, l) in self.lines.iter().enumerate() {
            if let Some(k) = l.front().map(Entry::key) {
                if best.is_none_or(|b| k < b) {
                    best = Some(k);
                    from = Some(i);
                }
            }
        }
        let e = match from {
            Some(i) => self.lines[i].pop_front(),
            None => self.heap.pop(),
        }?;
        debug_assert!(e.time >= self.now, "time went backwards");
        self.now = e.time;
        self.popped += 1;
        Some((e.time, e.ev))
    }

    /// The current simulated time: the time of the last event popped.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Events popped so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len() + self.lines.iter().map(VecDeque::len).sum::<usize>()
    }

    /// True when no event waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A deadline that moves often (a TCP retransmission timer pushed back by every ACK) served by
/// lazy events: setting it asks for an event only when none is pending at or before the new
/// deadline, and an event that fires before the deadline asks for one at it. So a flow has at
/// most a few timer events in the queue however often its deadline moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LazyTimer {
    /// The deadline, when the timer runs.
    deadline: Option<Timestamp>,
    /// The earliest pending event for this timer.
    event_at: Option<Timestamp>,
}

/// What a [`LazyTimer`]'s event found when it fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerFire {
    /// The deadline has passed: the timer expired.
    Expired,
    /// The deadline is later (it moved): call [`LazyTimer::set`] with it again.
    Early(Timestamp),
    /// The timer is stopped.
    Stopped,
}

impl LazyTimer {
    /// True while the timer runs.
    pub fn is_set(&self) -> bool {
        self.deadline.is_some()
    }

    /// Stops the timer (a pending event will find it stopped).
    pub fn clear(&mut self) {
        self.deadline = None;
    }

    /// Sets the deadline to `t`; returns the time to schedule an event at, or `None` when a
    /// pending event fires at or before `t` already.
    #[must_use]
    pub fn set(&mut self, t: Timestamp) -> Option<Timestamp> {
        self.deadline = Some(t);
        if self.event_at.is_none_or(|e| t < e) {
            self.event_at = Some(t);
            Some(t)
        } else {
            None
        }
    }

    /// One of this timer's events fired at `now`.
    pub fn fire(&mut self, now: Timestamp) -> TimerFire {
        if self.event_at == Some(now) {
            self.event_at = None;
        }
        match self.deadline {
            Some(t) if t <= now => TimerFire::Expired,
            Some(t) => TimerFire::Early(t),
            None => TimerFire::Stopped,
        }
    }
}

/// The data delay line of [`EventQueue`] (sender -> receiver).
const DATA_LINE: usize = 0;
/// The ACK delay line of [`EventQueue`] (receiver -> sender).
const ACK_LINE: usize = 1;

/// The host model's queue: timers in a heap plus the data and ACK delay lines.
#[derive(Debug)]
pub struct EventQueue(TimedQueue<Event, 2>);

impl EventQueue {
    /// An empty queue with room for `capacity` events in each container.
    pub fn with_capacity(capacity: usize) -> Self {
        EventQueue(TimedQueue::with_capacity(capacity))
    }

    /// Schedules a timer event at `time` (not before the current time).
    pub fn schedule(&mut self, time: Timestamp, ev: Event) {
        self.0.schedule(time, ev);
    }

    /// Puts a packet on the data delay line, arriving at `time` (not before the line's tail).
    pub fn push_arrival(&mut self, time: Timestamp, desc: u32) {
        self.0.push_line(DATA_LINE, time, Event::Arrive(desc));
    }

    /// Puts an ACK on the return delay line, arriving at `time` (not before the line's tail).
    pub fn push_ack(&mut self, time: Timestamp, ack: Ack) {
        self.0.push_line(ACK_LINE, time, Event::AckArrive(ack));
    }

    /// The earliest event, removed, with the clock moved to its time.
    pub fn pop(&mut self) -> Option<(Timestamp, Event)> {
        self.0.pop()
    }

    /// The current simulated time: the time of the last event popped.
    pub fn now(&self) -> Timestamp {
        self.0.now()
    }

    /// Events popped so far.
    pub fn popped(&self) -> u64 {
        self.0.popped()
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no event waits.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    #[test]
    fn pops_in_time_then_sequence_order_across_containers() {
        let mut q = EventQueue::with_capacity(8);
        q.schedule(t(30), Event::Window);
        q.push_arrival(t(10), 1);
        q.push_ack(
            t(10),
            Ack {
                flow: 0,
                ack: 1,
                ts_echo: t(0),
                ece: false,
            },
        );
        q.schedule(t(10), Event::ShaperPoll);
        q.push_arrival(t(20), 2);
        let order: Vec<Event> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert!(matches!(order[0], Event::Arrive(1)));
        assert!(matches!(order[1], Event::AckArrive(_)));
        assert_eq!(order[2], Event::ShaperPoll);
        assert_eq!(order[3], Event::Arrive(2));
        assert_eq!(order[4], Event::Window);
        assert_eq!(q.now(), t(30));
        assert_eq!(q.popped(), 5);
        assert!(q.is_empty());
    }

    #[test]
    fn a_lazy_timer_asks_for_an_event_only_when_none_fires_earlier() {
        let mut r = LazyTimer::default();
        assert!(!r.is_set());
        assert_eq!(r.set(t(100)), Some(t(100)));
        // Pushed back: the pending event at 100 will do.
        assert_eq!(r.set(t(150)), None);
        assert_eq!(r.fire(t(100)), TimerFire::Early(t(150)));
        assert_eq!(r.set(t(150)), Some(t(150)));
        // Brought forward: a new, earlier event.
        assert_eq!(r.set(t(120)), Some(t(120)));
        assert_eq!(r.fire(t(120)), TimerFire::Expired);
        r.clear();
        assert_eq!(r.fire(t(150)), TimerFire::Stopped);
        assert!(!r.is_set());
    }
}
