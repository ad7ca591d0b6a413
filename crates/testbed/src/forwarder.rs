//! The reference forwarder of the daemon's throughput target: a `recvmmsg`/`sendmmsg` AF_PACKET
//! forwarder with batches of 64. It moves frames between two [`AfPacketPort`]s in
//! [`RxMode::Mmsg`] (`recvmmsg` and `sendmmsg`, batches of 64: the same sockets and options as the
//! daemon's ports) in both directions and does nothing else: no parsing, no classification, no
//! checksum work, no queue.
//! `metronome compare --ceiling` runs it on the same path as the daemon to show what the daemon's
//! own per-packet work costs against the cheapest user-space forwarding on the same sockets.
//!
//! Two modes ([`ForwarderMode`]):
//! * [`ForwarderMode::Plain`]: frames up to one 2 KiB slot, no virtio-net header; the reference
//!   for one-MTU frames (offloads off).
//! * [`ForwarderMode::VnetHdr`]: both sockets with `PACKET_VNET_HDR`
//!   ([`AfPacketConfig::vnet_hdr`]) and a two-class pool ([`FramePool::with_large`]): small
//!   slots for ACKs and MTU frames, [`LARGE_SLOTS`] slots of [`GSO_SLOT_SIZE`] for GSO/GRO
//!   super-frames. Each frame is sent back with the header it arrived with (its pool slot's
//!   [`FramePool::vnet`]), so the kernel segments a super-frame and completes a partial
//!   checksum only where a device needs it. The reference with the host's offloads.
//!
//! Each direction keeps the frames the device refused as busy and retries them before receiving
//! more, so nothing is dropped by the forwarder itself; every frame it did not forward is in a
//! port counter (`rx_oversize`, `rx_no_large_slot`, `rx_gso_truncated`, `rx_vnet_errors`,
//! `tx_errors`) or still pending at the stop ([`ForwarderReport`]).
//! When nothing moved it sleeps in `ppoll(2)` on both receive sockets, at most [`IDLE_SLEEP`].

use metronome_io::{
    AfPacketConfig, AfPacketPort, FramePool, PacketPort, PortCounters, PortError, RxFrame, RxMode,
    GSO_SLOT_SIZE, RECV_BATCH as MMSG_BATCH,
};
use nix::poll::{PollFd, PollFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Longest idle sleep: bounds how late a stop is noticed (10 ms).
pub const IDLE_SLEEP: Duration = Duration::from_millis(10);
/// Wait before retrying frames the device refused as busy: 20 µs, as the daemon's loop
/// (`metronome_daemon::driver::run::TX_RETRY`).
const TX_RETRY: Duration = Duration::from_micros(20);
/// The ports: `recvmmsg` receive, the daemon's defaults otherwise.
const PLAIN: AfPacketConfig = AfPacketConfig {
    rx: RxMode::Mmsg,
    ..AfPacketConfig::DEFAULT
};
/// The ports of [`ForwarderMode::VnetHdr`]: `recvmmsg` receive with `PACKET_VNET_HDR`.
const VNET: AfPacketConfig = AfPacketConfig {
    rx: RxMode::Mmsg,
    vnet_hdr: true,
    ..AfPacketConfig::DEFAULT
};
/// Frame slots: four batches per direction in flight at most (receive stops while a direction has
/// frames pending), with room to spare.
const POOL_SLOTS: u32 = 8 * MMSG_BATCH as u32;
/// Super-frame slots of [`ForwarderMode::VnetHdr`]: one batch per direction can be pending at
/// once (a direction receives only when nothing is pending), so two batches never run out;
/// 128 × 64 KiB ≈ 8.4 MB.
pub const LARGE_SLOTS: u32 = 2 * MMSG_BATCH as u32;

/// How the forwarder's sockets handle offloaded frames (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwarderMode {
    /// No virtio-net header, 2 KiB slots: one-MTU frames.
    #[default]
    Plain,
    /// `PACKET_VNET_HDR` on both sockets, small and super-frame slots.
    VnetHdr,
}

impl ForwarderMode {
    /// The name used in reports: `plain` or `vnet_hdr`.
    pub fn name(self) -> &'static str {
        match self {
            ForwarderMode::Plain => "plain",
            ForwarderMode::VnetHdr => "vnet_hdr",
        }
    }

    fn port_config(self) -> AfPacketConfig {
        match self {
            ForwarderMode::Plain => PLAIN,
            ForwarderMode::VnetHdr => VNET,
        }
    }

    fn pool(self) -> FramePool {
        match self {
            ForwarderMode::Plain => FramePool::new(POOL_SLOTS, metronome_io::DEFAULT_SLOT_SIZE),
            ForwarderMode::VnetHdr => FramePool::with_large(
                POOL_SLOTS,
                metronome_io::DEFAULT_SLOT_SIZE,
                LARGE_SLOTS,
                GSO_SLOT_SIZE,
            ),
        }
    }
}

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
/// until `stop` is set, in [`ForwarderMode::Plain`].
pub fn forward(
    inside: &str,
    outside: &str,
    stop: &AtomicBool,
) -> Result<ForwarderReport, PortError> {
    forward_with(inside, outside, ForwarderMode::Plain, stop)
}

/// Forwards between interfaces `inside` and `outside` (of the calling thread's network namespace)
/// in `mode` until `stop` is set.
pub fn forward_with(
    inside: &str,
    outside: &str,
    mode: ForwarderMode,
    stop: &AtomicBool,
) -> Result<ForwarderReport, PortError> {
    let config = mode.port_config();
    let mut a = AfPacketPort::open(inside, &config)?;
    let mut b = AfPacketPort::open(outside, &config)?;
    let mut pool = mode.pool();
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
        let e = forward_with("mtr-no-such-c", "x", ForwarderMode::VnetHdr, &stop).unwrap_err();
        assert!(e.to_string().contains("mtr-no-such-c"), "{e}");
    }

    #[test]
    fn the_vnet_mode_has_super_frame_slots_and_the_header() {
        assert!(ForwarderMode::VnetHdr.port_config().vnet_hdr);
        assert!(!ForwarderMode::Plain.port_config().vnet_hdr);
        let pool = ForwarderMode::VnetHdr.pool();
        assert_eq!(pool.large_capacity(), LARGE_SLOTS as usize);
        assert!(pool.large_slot_size() >= GSO_SLOT_SIZE);
        assert_eq!(ForwarderMode::Plain.pool().large_capacity(), 0);
        assert_eq!(ForwarderMode::default(), ForwarderMode::Plain);
    }
}
