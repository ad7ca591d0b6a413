//! The packet I/O seam: [`PacketPort`], the trait the daemon loop drives, and what it reports.
//!
//! One loop iteration: [`PacketPort::recv`] a batch into the caller's
//! [`FramePool`], classify and timestamp the frames, insert their ids into the wheel; at each tick
//! hand everything due to [`PacketPort::send`] as one batch; when idle, sleep on
//! [`PacketPort::poll_fd`] until readable or `next_due` ([`wait_readable`]). The same loop runs on
//! an AF_PACKET port ([`crate::AfPacketPort`]) and an in-memory port ([`crate::MemoryPort`]).
//!
//! Ownership of frames: `recv` allocates one pool slot per frame and hands the ids to the caller,
//! who owns them until it passes them to `send` (which frees them) or frees them itself (a drop).
//! The pool belongs to the caller rather than to a port so that a bump in the wire can receive on
//! one port and transmit the very same slot on the other without a second copy.

use crate::frame_pool::FramePool;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// One received frame, now in a pool slot the caller owns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxFrame {
    /// The pool slot holding the frame (use it as `PacketRef::id`).
    pub id: u32,
    /// Frame length in bytes, as stored in the pool (including a re-inserted 802.1Q tag).
    pub len: u32,
    /// The kernel had not yet computed the L4 checksum (`TP_STATUS_CSUMNOTREADY`: the frame came
    /// from a local sender with checksum offload, e.g. over a veth). Without `vnet_hdr`, forwarded
    /// as is, it arrives with a wrong checksum; the caller must fill it in (or the sender must
    /// turn TX checksum offload off). With `vnet_hdr` such a frame's header
    /// ([`FramePool::vnet`]) has `NEEDS_CSUM` and sending it with that header lets the kernel or
    /// the device complete the checksum, so the port reports `false`: a caller that fills the
    /// checksum in anyway must also clear `NEEDS_CSUM` in the slot's header
    /// ([`FramePool::set_vnet`]).
    ///
    /// The frame's virtio-net header (GSO type and size, checksum offsets) stays with its slot,
    /// [`FramePool::vnet`], where the shaper's queue (which holds only the id) and
    /// [`PacketPort::send`] find it.
    pub csum_not_ready: bool,
    /// When the kernel received the frame (`CLOCK_REALTIME`, nanoseconds: a TPACKET_V3 ring's
    /// `tp_sec`/`tp_nsec`), where the port's receive mode gives it (an AF_PACKET port in
    /// `RxMode::Ring`); 0 otherwise. A reader that measures rates by it is not moved by its own
    /// scheduling delays.
    pub stamp_ns: u64,
}

/// Counters of a port, cumulative since it was opened. Every frame the port did not deliver or
/// did not send is in one of them (CONTRIBUTING.md §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames delivered by [`PacketPort::recv`].
    pub rx_packets: u64,
    /// Bytes delivered by [`PacketPort::recv`].
    pub rx_bytes: u64,
    /// Frames the kernel dropped because the RX ring was full (`tp_drops` of
    /// `PACKET_STATISTICS`, packet(7)).
    pub rx_ring_drops: u64,
    /// Times the kernel found the RX ring's next block still held by user space and froze the
    /// queue (`tp_freeze_q_cnt`); the frames lost meanwhile are in `rx_ring_drops`.
    pub rx_ring_freezes: u64,
    /// Frames longer than the pool's largest slot, dropped.
    pub rx_oversize: u64,
    /// Super-frames (longer than a small slot) that found every large slot of the pool in use,
    /// dropped.
    pub rx_no_large_slot: u64,
    /// With `vnet_hdr`: frames longer than the receive buffer
    /// ([`crate::frame_pool::GSO_SLOT_SIZE`]), which the socket truncated (`MSG_TRUNC`), and
    /// frames whose IP packet is longer than 65 535 bytes (IPv4 total length 0), dropped.
    /// Happens only when an interface's `gro_max_size`/`gso_max_size` is raised above 64 KiB
    /// (BIG TCP); lower it back (`ip link set IF gro_max_size 65536 gso_max_size 65536`).
    pub rx_gso_truncated: u64,
    /// With `vnet_hdr`: frames the kernel could not describe with a virtio-net header (a GSO
    /// type virtio has no value for: the receive fails with `EINVAL` and the frame is gone), or
    /// whose header did not parse. Dropped.
    pub rx_vnet_errors: u64,
    /// Frames the ring truncated (`tp_snaplen < tp_len`: longer than a ring block), dropped.
    pub rx_truncated: u64,
    /// Ring entries that failed validation (offsets outside their block); the rest of the block
    /// is skipped. Should stay 0.
    pub rx_ring_errors: u64,
    /// With `origin_tags` ([`crate::AfPacketConfig::origin_tags`]): frames that arrived without
    /// the VLAN tag that carries their origin, so not from the capture program (the capture
    /// interface's own traffic, such as IPv6 neighbour discovery), dropped.
    pub rx_untagged: u64,
    /// Frames handed to [`PacketPort::send`] and accepted by the kernel (or the peer queue).
    pub tx_packets: u64,
    /// Bytes of `tx_packets`.
    pub tx_bytes: u64,
    /// Frames the kernel refused for good (too long, malformed header, link down), freed.
    pub tx_errors: u64,
    /// Times `send` stopped early because the device or socket was busy (`EAGAIN`/`ENOBUFS`);
    /// the unsent frames stayed with the caller, nothing was dropped.
    pub tx_busy: u64,
    /// With `vnet_hdr` and `qdisc_bypass`: GSO frames sent through the kernel's queueing layer
    /// instead of straight to the driver, because the device cannot take them whole (TSO/GSO
    /// off, or a `gso_type` it has no segmentation offload for) and the kernel must segment
    /// them in software, which the bypass path refuses (see [`crate::AfPacketPort`]). Sent, also
    /// counted in `tx_packets`.
    pub tx_gso_software: u64,
}

/// Why a port could not be opened or used. One line each, naming the interface.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// No interface of that name (in this network namespace).
    #[error("no such network interface: {ifname}")]
    NoSuchInterface {
        /// The interface name asked for.
        ifname: String,
    },
    /// The process may not open packet sockets.
    #[error(
        "permission denied opening an AF_PACKET socket on {ifname}: needs CAP_NET_RAW (and \
         CAP_NET_ADMIN for promiscuous mode); run as root or grant the capabilities"
    )]
    Permission {
        /// The interface name.
        ifname: String,
    },
    /// A configuration value the kernel would reject.
    #[error("invalid port configuration for {ifname}: {reason}")]
    Config {
        /// The interface name.
        ifname: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The port cannot do this (a [`PacketPort::reopen`] of a port without an interface).
    #[error("{op} is not supported by this port")]
    Unsupported {
        /// The operation asked for.
        op: &'static str,
    },
    /// Any other system call failure.
    #[error("{op} on {ifname} failed: {source}")]
    Io {
        /// The failed operation (`"socket"`, `"PACKET_RX_RING"`, `"sendmmsg"`, ...).
        op: &'static str,
        /// The interface name.
        ifname: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What a port can do beyond receiving and sending frames ([`PacketPort::capabilities`]), as
/// smoltcp's `phy::DeviceCapabilities` describes a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCapabilities {
    /// Frames carry a virtio-net header ([`FramePool::vnet`]): GSO super-frames arrive whole
    /// and leave whole or as pieces ([`crate::piece`]), with `NEEDS_CSUM` completed by the
    /// kernel or the device.
    pub vnet_hdr: bool,
    /// [`PacketPort::reopen`] opens the port again on its interface by name.
    pub reopen: bool,
}

/// A source and sink of Ethernet frames: the I/O seam of the daemon loop.
pub trait PacketPort {
    /// Receives up to `out.len()` frames: copies each into a fresh slot of `pool` and writes an
    /// [`RxFrame`] to `out`. Returns how many were written; 0 if nothing is waiting. Stops early
    /// when `pool` is exhausted, leaving the remaining frames queued in the port (for a ring:
    /// the current block stays held, so a long exhaustion ends in `rx_ring_drops`). Frames it
    /// must drop (oversize, truncated) are counted in [`PortCounters`]. Never blocks.
    fn recv(&mut self, pool: &mut FramePool, out: &mut [RxFrame]) -> Result<usize, PortError>;

    /// Transmits the entries `ids` of `pool`, in order: frames (a slot id) and pieces of cut
    /// super-frames (a piece id, [`crate::piece`]: the port writes the piece's headers into its
    /// own scratch and sends them with a slice of the pooled frame), and frees what it consumes
    /// ([`FramePool::free_entry`]: a cut frame's slot after its last piece). Returns how many
    /// leading ids were consumed (sent, or refused for good and counted in `tx_errors` or the
    /// pool's `pieces_failed`); `ids[n..]` stay allocated and owned by the caller, to retry
    /// later — that only happens when the device is busy (counted in `tx_busy`). On `Err` no id
    /// was consumed. Never blocks.
    fn send(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError>;

    /// The port's cumulative counters. Takes `&mut self` because reading the kernel's
    /// `PACKET_STATISTICS` resets them; the port accumulates.
    fn counters(&mut self) -> PortCounters;

    /// A file descriptor that polls readable when [`PacketPort::recv`] has frames, for poll(2)
    /// or epoll; `None` for ports that are never waited on (the in-memory port).
    fn poll_fd(&self) -> Option<BorrowedFd<'_>>;

    /// The interface the port is on, if it is on one (`None` by default: the in-memory port).
    fn interface(&self) -> Option<&str> {
        None
    }

    /// What the port can do beyond receiving and sending frames; by default nothing.
    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities::default()
    }

    /// Opens the port again on the interface of the same name with the same options (its
    /// interface was deleted and re-created with a new index, so a socket bound to the old one
    /// neither receives nor sends) and replaces `self` with it; returns the closed port's final
    /// counters (the caller adds them to its totals). On error `self` is unchanged. By default
    /// [`PortError::Unsupported`]; [`PortCapabilities::reopen`] says whether a port can.
    fn reopen(&mut self) -> Result<PortCounters, PortError> {
        Err(PortError::Unsupported { op: "reopen" })
    }
}

/// Sleeps until `fd` is readable or `timeout` passes (rounded up to whole milliseconds, the unit
/// of poll(2)); returns whether it is readable. `EINTR` returns `Ok(false)`.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> std::io::Result<bool> {
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
    crate::sys::poll_readable(fd, ms)
}
