//! The reference forwarder of the daemon's throughput target: a plain `recvmmsg`/`sendmmsg`
//! AF_PACKET forwarder with batches of 64. It moves frames between two [`AfPacketPort`]s in
//! [`RxMode::Mmsg`] (`recvmmsg` and `sendmmsg`, batches of 64: the same sockets and options as the
//! daemon's ports) in both directions and does nothing else: no parsing, no classification, no
//! checksum work, no queue.
//! `metronome compare --ceiling` runs it on the same path as the daemon to show what the daemon's
//! own per-packet work costs against the cheapest user-space forwarding on the same sockets.
//!
//! Each direction keeps the frames the device refused as busy and retries them before receiving
//! more, so nothing is dropped by the forwarder itself; every frame it did not forward is in a
//! port counter (`rx_oversize`, `tx_errors`) or still pending at the stop ([`ForwarderReport`]).
//! When nothing moved it sleeps in `ppoll(2)` on both receive sockets, at most [`IDLE_SLEEP`].

use metronome_io::{
    AfPacketConfig, AfPacketPort, FramePool, PacketPort, PortCounters, PortError, RxFrame, RxMode,
    RECV_BATCH as MMSG_BATCH,
};
use nix::poll::{PollFd, PollFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Longest idle sleep: bounds how late a stop is noticed (10 ms).
pub const IDLE_SLEEP: Duration = Duration::from_millis(10);
/// Wait before retrying frames the device refused as busy: 20 µs, as the daemon's loop
/// (`metronome_daemon::run::TX_RETRY`).
const TX_RETRY: Duration = Duration::from_micros(20);
/// The ports: `recvmmsg` receive, the daemon's defaults otherwise.
const PLAIN: AfPacketConfig = AfPacketConfig {
    rx: RxMode::Mmsg,
    ..AfPacketConfig::DEFAULT
};
/// Frame slots: four batches per direction in flight at most (receive stops while a direction has
/// frames pending), with room to spare.
const POOL_SLOTS: u32 = 8 * MMSG_BATCH as u32;

/// What the forwarder did, when it stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwarderReport {
    /// Counters of the inside port (receives inside -> outside traffic).
    pub inside: PortCounters,
    /// Counters of the outside port.
    pub outside: PortCounters,
    /// Frames received but not yet sent when the forwarder stopped (freed, not forwarded).
    pub pending_at_stop: u64,
}

/// One direction: frames received on one port and not yet taken by the other.
struct Direction {
    pending: Vec<u32>,
}

impl Direction {
    /// Sends what is pending, then, if everything went, receives one batch and sends it. Returns
    /// how many frames moved.
    fn step(
        &mut self,
        from: &mut AfPacketPort,
        to: &mut AfPacketPort,
        pool: &mut FramePool,
        rx: &mut [RxFrame],
    ) -> Result<usize, PortError> {
        let mut moved = self.flush(to, pool)?;
        if self.pending.is_empty() {
            let n = from.recv(pool, rx)?;
            self.pending.extend(rx[..n].iter().map(|f| f.id));
            moved += self.flush(to, pool)?;
        }
        Ok(moved)
    }

    fn flush(&mut self, to: &mut AfPacketPort, pool: &mut FramePool) -> Result<usize, PortError> {
        if self.pending.is_empty() {
            return Ok(0);
        }
        let sent = to.send(pool, &self.pending)?;
        self.pending.drain(..sent);
        Ok(sent)
    }
}

/// Forwards between interfaces `inside` and `outside` (of the calling thread's network namespace)
/// until `stop` is set.
pub fn forward(
    inside: &str,
    outside: &str,
    stop: &AtomicBool,
) -> Result<ForwarderReport, PortError> {
    let mut a = AfPacketPort::open(inside, &PLAIN)?;
    let mut b = AfPacketPort::open(outside, &PLAIN)?;
    let mut pool = FramePool::new(POOL_SLOTS, metronome_io::DEFAULT_SLOT_SIZE);
    let mut rx = [RxFrame::default(); MMSG_BATCH];
    let mut out = Direction {
        pending: Vec::with_capacity(MMSG_BATCH),
    };
    let mut back = Direction {
        pending: Vec::with_capacity(MMSG_BATCH),
    };
    while !stop.load(Ordering::Relaxed) {
        let moved = out.step(&mut a, &mut b, &mut pool, &mut rx)?
            + back.step(&mut b, &mut a, &mut pool, &mut rx)?;
        if moved > 0 {
            continue;
        }
        if !out.pending.is_empty() || !back.pending.is_empty() {
            std::thread::sleep(TX_RETRY);
            continue;
        }
        let fds = [a.poll_fd(), b.poll_fd()];
        let mut fds: Vec<PollFd> = fds
            .into_iter()
            .flatten()
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        let ts = nix::sys::time::TimeSpec::from_duration(IDLE_SLEEP);
        let _ = nix::poll::ppoll(&mut fds, Some(ts), None);
    }
    let pending_at_stop = (out.pending.len() + back.pending.len()) as u64;
    for id in out.pending.drain(..).chain(back.pending.drain(..)) {
        pool.free(id);
    }
    Ok(ForwarderReport {
        inside: a.counters(),
        outside: b.counters(),
        pending_at_stop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_named() {
        let stop = AtomicBool::new(true);
        let e = forward("mtr-no-such-a", "mtr-no-such-b", &stop).unwrap_err();
        assert!(e.to_string().contains("mtr-no-such-a"), "{e}");
    }
}
