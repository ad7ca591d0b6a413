//! What the host ([`crate::run`]), switch-port ([`crate::switch`]) and incast
//! ([`crate::incast`]) scenarios share about their flows: the slab their packet descriptors live
//! in, and the sender side of a TCP flow driven by events ([`TcpFlows`]: a segment sent starts
//! the retransmission timer, an ACK restarts or stops it and lets the flow send again, an expired
//! timer goes back to `snd_una` and lets it send again).
//!
//! Each scenario has its own event type; [`TcpFlows`] asks it only to schedule a flow's timer
//! event and to send what the flow may send, so the TCP and timer logic is written once
//! ([`TcpSender::sent`], [`TcpSender::acked`], [`TcpSender::timer_fired`]).

use crate::event::Ack;
use crate::tcp::{AckOutcome, TcpSender};
use metronome_core::Timestamp;

/// Descriptors in a vector with a free list: no allocation once the high-water mark is reached
/// (CONTRIBUTING.md §5).
#[derive(Debug, Default)]
pub struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T: Copy> Slab<T> {
    /// An empty slab with room for `capacity` descriptors.
    pub fn with_capacity(capacity: usize) -> Self {
        Slab {
            items: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
        }
    }

    /// Stores `item`; returns its index (a freed one first).
    pub fn alloc(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = item;
                i
            }
            None => {
                self.items.push(item);
                (self.items.len() - 1) as u32
            }
        }
    }

    /// Frees index `i` for reuse.
    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    /// The descriptor at `i`.
    pub fn get(&self, i: u32) -> T {
        self.items[i as usize]
    }

    /// The descriptor at `i`, to change.
    pub fn get_mut(&mut self, i: u32) -> &mut T {
        &mut self.items[i as usize]
    }

    /// Descriptors stored and not freed.
    pub fn live(&self) -> usize {
        self.items.len() - self.free.len()
    }
}

/// A scenario whose flows are TCP senders: the event glue of sending, ACKs and retransmission
/// timers, written once for every scenario.
pub trait TcpFlows {
    /// The sender of flow `f`, or `None` when it has none (a UDP source) or has finished.
    fn sender(&mut self, f: u32) -> Option<&mut TcpSender>;

    /// Schedules a retransmission-timer event of flow `f` at `at`.
    fn schedule_timer(&mut self, f: u32, at: Timestamp);

    /// Sends what flow `f` may send at `now`.
    fn send_more(&mut self, f: u32, now: Timestamp);

    /// Flow `f` sent MTUs `[seq, seq + n)` at `now` (new data or a retransmission).
    fn segment_sent(&mut self, f: u32, now: Timestamp, seq: u32, n: u32) {
        let at = self.sender(f).and_then(|tcp| tcp.sent(now, seq, n));
        if let Some(at) = at {
            self.schedule_timer(f, at);
        }
    }

    /// `ack` reached its sender at `now`: the sender and its timer are updated; the caller
    /// measures what it needs from the outcome and then calls [`TcpFlows::send_more`]. `None`
    /// when the flow has no sender.
    fn ack_arrived(&mut self, now: Timestamp, ack: &Ack) -> Option<AckOutcome> {
        let (out, at) = self.sender(ack.flow)?.acked(now, ack);
        if let Some(at) = at {
            self.schedule_timer(ack.flow, at);
        }
        Some(out)
    }

    /// A retransmission-timer event of flow `f` fired at `now`.
    fn timer_event(&mut self, f: u32, now: Timestamp) {
        let Some(step) = self.sender(f).map(|tcp| tcp.timer_fired(now)) else {
            return;
        };
        if let Some(at) = step.schedule {
            self.schedule_timer(f, at);
        }
        if step.expired {
            self.send_more(f, now);
        }
    }
}
