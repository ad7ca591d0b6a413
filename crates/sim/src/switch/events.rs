//! The event queue of the switch-port scenario: timers (flow starts and arrivals, RTOs, NIC and
//! port transmissions, the end) go through a binary heap; packets and ACKs travel three FIFO
//! delay lines (host -> switch, switch -> receiver, receiver -> sender), each of constant delay
//! and entered in time order ([`TimedQueue`], as in [`crate::event`]). Everything pops in
//! `(time, sequence)` order. All containers keep their capacity, so the steady state does not
//! allocate.

use crate::event::{Ack, TimedQueue};

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

/// Timers in a heap, packets and ACKs on three FIFO lines.
pub(super) type Queue = TimedQueue<Ev, 3>;

pub(super) const TO_SWITCH: usize = 0;
pub(super) const TO_RECEIVER: usize = 1;
pub(super) const TO_SENDER: usize = 2;
