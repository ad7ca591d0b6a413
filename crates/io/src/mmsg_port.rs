//! [`MmsgPort`]: a [`PacketPort`] on plain AF_PACKET sockets, `recvmmsg` and `sendmmsg` in
//! batches of 64, without a memory-mapped ring (packet(7), recvmmsg(2)).
//!
//! It is the issue's reference forwarder's I/O ("a plain `recvmmsg`/`sendmmsg` AF_PACKET forwarder
//! with batches of 64"): `metronome compare --ceiling` forwards through two of these with no
//! parsing at all ([`crate::MmsgPort`] behind `metronome_daemon::forwarder`), to measure what the
//! daemon's own path costs against the cheapest forwarding user space can do on the same sockets.
//! `recvmmsg` writes each frame straight into a [`FramePool`] slot, so it copies once, like the
//! ring port ([`crate::AfPacketPort`]), which copies from its ring.
//!
//! The receive socket is promiscuous and ignores the interface's outgoing frames
//! (`PACKET_IGNORE_OUTGOING`), as the ring port's is; the transmit socket bypasses the qdisc when asked (`PACKET_QDISC_BYPASS`), the
//! same options as the ring port's so that only the receive path differs. Unlike the ring port it
//! cannot see the kernel's `TP_STATUS_CSUMNOTREADY`: frames of a local sender with checksum
//! offload keep their partial checksum, so the end hosts must compute full checksums (checksum
//! offload off, [`crate::offload`]) when nothing completes them.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::afpacket::ETH_P_ALL;
use crate::frame_pool::FramePool;
use crate::port::{PacketPort, PortCounters, PortError, RxFrame};
use crate::sys::{self, SEND_BATCH};

/// Frames per `recvmmsg` / `sendmmsg` call: the reference forwarder's batch (issue 4).
pub const MMSG_BATCH: usize = SEND_BATCH;

/// A [`PacketPort`] on one interface through two plain packet sockets.
pub struct MmsgPort {
    ifname: String,
    rx_fd: OwnedFd,
    tx_fd: OwnedFd,
    counters: PortCounters,
}

impl std::fmt::Debug for MmsgPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmsgPort")
            .field("ifname", &self.ifname)
            .field("counters", &self.counters)
            .finish()
    }
}

impl MmsgPort {
    /// Opens the port on `ifname` of the calling thread's network namespace; `qdisc_bypass` sets
    /// `PACKET_QDISC_BYPASS` on the transmit socket. Errors name the interface, as
    /// [`crate::AfPacketPort::open`]'s do.
    pub fn open(ifname: &str, qdisc_bypass: bool) -> Result<Self, PortError> {
        let io_err =
            |op: &'static str| move |e: std::io::Error| crate::afpacket::os_error(ifname, op, e);
        let ifindex = sys::if_index(ifname).map_err(io_err("if_nametoindex"))?;
        let one: libc::c_int = 1;
        let rx_fd = sys::packet_socket(0).map_err(io_err("socket"))?;
        sys::set_packet_opt(&rx_fd, libc::PACKET_IGNORE_OUTGOING, &one)
            .map_err(io_err("PACKET_IGNORE_OUTGOING"))?;
        sys::bind_packet(&rx_fd, ifindex, ETH_P_ALL).map_err(io_err("bind"))?;
        // Promiscuous, as the ring port: a bump in the wire forwards frames not addressed to it.
        let mreq = libc::packet_mreq {
            mr_ifindex: ifindex as i32,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        sys::set_packet_opt(&rx_fd, libc::PACKET_ADD_MEMBERSHIP, &mreq)
            .map_err(io_err("PACKET_ADD_MEMBERSHIP"))?;
        let tx_fd = sys::packet_socket(0).map_err(io_err("socket"))?;
        if qdisc_bypass {
            sys::set_packet_opt(&tx_fd, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(io_err("PACKET_QDISC_BYPASS"))?;
        }
        sys::bind_packet(&tx_fd, ifindex, 0).map_err(io_err("bind"))?;
        Ok(MmsgPort {
            ifname: ifname.to_string(),
            rx_fd,
            tx_fd,
            counters: PortCounters::default(),
        })
    }

    /// The interface's name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    fn io_error(&self, op: &'static str, source: std::io::Error) -> PortError {
        PortError::Io {
            op,
            ifname: self.ifname.clone(),
            source,
        }
    }
}

impl PacketPort for MmsgPort {
    fn recv(&mut self, pool: &mut FramePool, out: &mut [RxFrame]) -> Result<usize, PortError> {
        let want = out.len().min(pool.available()).min(MMSG_BATCH);
        if want == 0 {
            return Ok(0);
        }
        let mut ids = [0u32; MMSG_BATCH];
        for id in &mut ids[..want] {
            // `want` is at most `available()`, so every allocation succeeds.
            *id = pool.alloc().unwrap_or_default();
        }
        // `slots_mut` hands out disjoint slots in increasing id order.
        ids[..want].sort_unstable();
        let mut lens = [0usize; MMSG_BATCH];
        let mut truncated = [false; MMSG_BATCH];
        let got = {
            let mut bufs: [&mut [u8]; MMSG_BATCH] = std::array::from_fn(|_| &mut [][..]);
            for (buf, slot) in bufs.iter_mut().zip(pool.slots_mut(&ids[..want])) {
                *buf = slot;
            }
            sys::recv_frames(&self.rx_fd, &mut bufs[..want], &mut lens, &mut truncated)
        };
        let got = match got {
            Ok(n) => n,
            Err(e) => {
                for &id in &ids[..want] {
                    pool.free(id);
                }
                return Err(self.io_error("recvmmsg", e));
            }
        };
        let mut n = 0;
        for i in 0..want {
            let id = ids[i];
            if i >= got {
                pool.free(id);
            } else if truncated[i] {
                self.counters.rx_oversize += 1;
                pool.free(id);
            } else {
                pool.set_len(id, lens[i]);
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += lens[i] as u64;
                out[n] = RxFrame {
                    id,
                    len: lens[i] as u32,
                    csum_not_ready: false,
                };
                n += 1;
            }
        }
        Ok(n)
    }

    fn send(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        crate::afpacket::send_batches(&self.tx_fd, &mut self.counters, pool, ids)
            .map_err(|e| self.io_error("sendmmsg", e))
    }

    fn counters(&mut self) -> PortCounters {
        self.counters
    }

    fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.rx_fd.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_interface_is_named() {
        match MmsgPort::open("mtr-no-such-if", true) {
            Err(PortError::NoSuchInterface { ifname }) => assert_eq!(ifname, "mtr-no-such-if"),
            // Without CAP_NET_RAW the socket fails first; either way the name is in the error.
            Err(e) => assert!(e.to_string().contains("mtr-no-such-if"), "{e}"),
            Ok(_) => panic!("opened a port on a missing interface"),
        }
    }

    #[test]
    fn loopback_port_opens_and_reads_nothing_when_idle() {
        // Root in CI; without CAP_NET_RAW the open fails with a permission error, also fine.
        let Ok(mut port) = MmsgPort::open("lo", true) else {
            return;
        };
        let mut pool = FramePool::new(8, 2048);
        let mut out = [RxFrame::default(); 8];
        // Anything on lo (nothing in a fresh test namespace, possibly some traffic elsewhere)
        // comes back as whole frames with their lengths; the pool accounts for every slot.
        let n = port.recv(&mut pool, &mut out).unwrap();
        assert_eq!(pool.in_use(), n);
        for f in &out[..n] {
            assert_eq!(pool.len(f.id), f.len as usize);
        }
    }
}
