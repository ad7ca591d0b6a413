//! The incast run's events in one binary heap ([`TimedQueue`] without delay lines), popped in
//! `(time, sequence)` order so that two events at the same instant fire in the order they were
//! scheduled (deterministic runs, CONTRIBUTING.md §14). The heap keeps its capacity: the steady
//! state does not allocate.

use crate::event::{Ack, TimedQueue};

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

/// The event heap (timers only: no delay line).
pub(super) type EventHeap = TimedQueue<Ev, 0>;
