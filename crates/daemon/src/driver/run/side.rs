//! One side of the loop: a port, its carrier state, the batch waiting to be sent on it and
//! whether it may have frames to read. The loop holds two, `inside` and `outside`, and treats
//! them alike; only what flows between them differs (see the loop's module docs).
//!
//! - **Receive** ([`Side::recv`]) only when the port's carrier is up, it may have frames
//!   ([`Side::may_read`]) and the other side's batch has room; the frames go into the pool of
//!   the direction that leaves on the other side.
//! - **Send** ([`Side::flush`]) the batch, [`TX_CHUNK`] frames per `send`, the loop's live
//!   operations applied between two; what the device did not take stays, first in line for the
//!   next round; everything stays while the carrier is down.
//! - **Carrier** ([`Side::watch_carrier`]): a down link is probed, a re-created interface's port
//!   opened again, and a batch that waited longer than the grace for its return dropped and
//!   counted ([`crate::driver::carrier`]).
//! - **Reading again** ([`next_may_read`]): after a round, a side is read without a `ppoll`
//!   in between only when frames may be waiting on it.

use crate::driver::carrier::{probe_interface, Carrier, CarrierEvent};
use crate::ops::metrics::Metrics;
use crate::os::ports::add_counters;
use metronome_core::{Duration, Timestamp};
use metronome_io::{FramePool, PacketPort, PortCounters, PortError, RxFrame};

/// Frames per `send` at most (16). A veth's transmit runs the peer namespace's stack in the
/// sending thread (its TCP, its taps), tens of microseconds a frame, so one `sendmmsg` of a
/// whole batch (up to `2 × batch_size` frames) would hold the loop for a millisecond or more;
/// between two chunks the loop applies the control socket's operations
/// (`LoopHook::poll_live`), so that one waits at most for a chunk. A chunk still amortises the
/// system call over 16 frames.
pub(super) const TX_CHUNK: usize = 16;

/// One side of the loop. See the module docs.
pub(super) struct Side<'a, P> {
    /// The side's port.
    pub port: &'a mut P,
    /// The pool of the frames sent on this side (those of the direction that ends here).
    pub pool: &'a mut FramePool,
    /// The port's carrier state; the outside one's also keeps the engine's time.
    pub carrier: Carrier,
    /// Slot ids waiting to be sent on this side, in order.
    pub tx: Vec<u32>,
    /// Largest transmit batch: twice the receive batch (what is released plus what passes).
    tx_max: usize,
    /// Counters of the sockets a reopening closed, added to the port's own.
    retired: PortCounters,
    /// Frames freed because the port refused them with an error.
    pub tx_failed: u64,
    /// Frames of the batch dropped for having waited beyond the grace for the carrier.
    pub dropped: u64,
    /// Whether the port may have frames waiting: asked at the next round without a `ppoll`.
    pub may_read: bool,
    /// What this round did on the side: read it, filled the receive batch, sent on it.
    round: (bool, bool, bool),
}

impl<'a, P: PacketPort> Side<'a, P> {
    /// The side of `port`, interface `name`, whose sent frames live in `pool`; `batch` is the
    /// receive batch and `grace` `daemon.link_down_grace`.
    pub fn new(
        port: &'a mut P,
        pool: &'a mut FramePool,
        name: &str,
        batch: usize,
        grace: Duration,
        metrics: &Metrics,
    ) -> Self {
        Side {
            port,
            pool,
            carrier: Carrier::new(name, probe_interface(name), grace, metrics),
            tx: Vec::with_capacity(2 * batch),
            tx_max: 2 * batch,
            retired: PortCounters::default(),
            tx_failed: 0,
            dropped: 0,
            may_read: true,
            round: (false, false, false),
        }
    }

    /// Room left in the transmit batch.
    pub fn room(&self) -> usize {
        self.tx_max.saturating_sub(self.tx.len())
    }

    /// Frames waiting to be sent that can leave now: none while the carrier is down.
    pub fn live(&self) -> usize {
        if self.carrier.is_up() {
            self.tx.len()
        } else {
            0
        }
    }

    /// Probes a down carrier, opens the port again when its interface was re-created, and drops
    /// (counted) the batch that waited for a return after an outage longer than the grace.
    /// Returns true when the port was opened again and works; an error other than the link's
    /// ends the loop.
    pub fn watch_carrier(&mut self, now: Timestamp) -> Result<bool, PortError> {
        let mut reopened = false;
        if self.carrier.poll(now, probe_interface) == CarrierEvent::Replaced {
            match self.port.reopen() {
                Ok(closed) => {
                    self.retired = add_counters(self.retired, closed);
                    self.carrier.reopened(now);
                    reopened = self.carrier.is_up();
                }
                Err(e) if self.carrier.on_error(now, &e) => {}
                Err(e) => return Err(e),
            }
        }
        if self
            .carrier
            .returned()
            .is_some_and(|d| d > self.carrier.grace())
        {
            let n = self.free_all();
            self.carrier.count_dropped(n);
            self.dropped += n;
        }
        Ok(reopened)
    }

    /// Receives a batch into `into` when `room` (the other side's batch has room for it), the
    /// carrier is up and the port may have frames; `None` when it did not ask. A link error
    /// marks the carrier down (nothing received); any other error ends the loop.
    pub fn recv(
        &mut self,
        room: bool,
        into: &mut FramePool,
        rx: &mut [RxFrame],
        now: Timestamp,
    ) -> Result<Option<usize>, PortError> {
        if !(room && self.may_read && self.carrier.is_up()) {
            return Ok(None);
        }
        let n = match self.port.recv(into, rx) {
            Err(e) if self.carrier.on_error(now, &e) => 0,
            r => r?,
        };
        self.round.0 = true;
        self.round.1 = n == rx.len();
        Ok(Some(n))
    }

    /// Sends the batch, [`TX_CHUNK`] frames per `send`, calling `between` before each chunk
    /// after the first (the loop applies the control socket's operations there); keeps what the
    /// port did not take, and everything while the carrier is down (sent when it returns,
    /// [`crate::driver::carrier`]). A port error other than the link's frees the batch (logged,
    /// counted in `tx_failed`).
    pub fn flush(&mut self, metrics: &Metrics, now: Timestamp, between: &mut dyn FnMut()) {
        let waiting = self.tx.len();
        let mut done = 0;
        while done < self.tx.len() && self.carrier.is_up() {
            if done > 0 {
                between();
            }
            let chunk = &self.tx[done..self.tx.len().min(done + TX_CHUNK)];
            match self.port.send(self.pool, chunk) {
                Err(e) if self.carrier.on_error(now, &e) => break,
                Ok(n) => {
                    if n > 0 {
                        metrics.observe_tx_batch(n as u64);
                    }
                    done += n;
                    if n < chunk.len() {
                        break;
                    }
                }
                Err(e) => {
                    self.tx.drain(..done);
                    tracing::error!(error = %e, frames = self.tx.len(), "transmit failed, frames freed");
                    self.tx_failed += self.free_all();
                    done = 0;
                    break;
                }
            }
        }
        self.tx.drain(..done);
        self.round.2 |= self.tx.len() < waiting;
    }

    /// Ends the round: whether the next one reads the port without a `ppoll`
    /// ([`next_may_read`]).
    pub fn end_round(&mut self) {
        let (read, full, sent) = std::mem::take(&mut self.round);
        self.may_read = next_may_read(self.may_read, read, full, sent);
    }

    /// The port's cumulative counters, with those of the sockets a reopening closed.
    pub fn counters(&mut self) -> PortCounters {
        add_counters(self.port.counters(), self.retired)
    }

    /// Frees the batch; returns how many frames it held (the caller counts them).
    pub fn free_all(&mut self) -> u64 {
        let n = self.tx.len() as u64;
        for &id in &self.tx {
            self.pool.free_entry(id);
        }
        self.tx.clear();
        n
    }
}

/// Whether the round after one that did (`read`, `full`, `sent`) on a side that `was` readable
/// asks it for frames without a `ppoll` in between: a port this round could not read (no room,
/// link down) and was readable, a port whose receive filled its batch (more may wait), and a
/// port this round sent on. The last is the frames' far end answering in this thread: a veth
/// transmit runs the peer namespace's stack in the sender's context, so the receiver's ACKs
/// (after a send on `outside`) and the sender's next segments (after a send on `inside`) are
/// already in the socket when `sendmmsg` returns. Frames that arrive otherwise wait for the
/// next `ppoll` (taken as soon as a round does nothing) or `UNREAD_MAX`, whichever is first.
pub(super) fn next_may_read(was: bool, read: bool, full: bool, sent: bool) -> bool {
    (was && !read) || full || sent
}
