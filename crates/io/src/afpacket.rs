//! [`AfPacketPort`]: a [`PacketPort`] on a Linux interface, receiving with `recvmmsg` batches
//! (default) or a TPACKET_V3 memory-mapped RX ring, and transmitting with `sendmmsg` batches.
//!
//! After packet(7) and the kernel's Documentation/networking/packet_mmap.rst:
//!
//! * **RX, [`RxMode::Mmsg`]** (default): an `AF_PACKET`/`SOCK_RAW` socket with `PACKET_AUXDATA`
//!   (each frame's `tp_status`: checksum not ready, stripped VLAN tag) and a receive buffer as
//!   large as the ring would be (`SO_RCVBUFFORCE`), bound, promiscuous and ignoring outgoing
//!   frames as below; `recvmmsg` writes up to 64 frames straight into pool slots (one copy, like
//!   the ring's), and a stripped 802.1Q tag is re-inserted in place. Frames are handed over as
//!   soon as they arrive. Why this is the default: on veth the ring's blocks hold frames until
//!   they fill or retire (at least 1 ms), which measured about 20 % off one TCP flow's throughput
//!   through the daemon (`metronome compare --ceiling`). Socket buffer overflows are counted in
//!   `rx_ring_drops` (`PACKET_STATISTICS` counts them for both modes).
//! * **RX, [`RxMode::Ring`]**: the socket opened with protocol 0 (so it receives nothing
//!   yet), `PACKET_VERSION = TPACKET_V3`, `PACKET_RX_RING` (blocks of `block_size` bytes, retired
//!   to user space when full or after `retire_timeout_ms`), `mmap`, then `bind` to the interface
//!   with `ETH_P_ALL`. Promiscuous through `PACKET_ADD_MEMBERSHIP`/`PACKET_MR_PROMISC` (a bump in
//!   the wire forwards frames not addressed to it; the membership dies with the socket), and
//!   `PACKET_IGNORE_OUTGOING` so the frames we transmit on the interface do not loop back (frames
//!   with `sll_pkttype == PACKET_OUTGOING` are skipped as well, for older kernels).
//!   Each frame is copied into the caller's [`FramePool`] and the block goes back to the kernel as
//!   soon as its last frame is copied (see [`crate::frame_pool`] for why one copy beats holding
//!   blocks). The kernel strips 802.1Q tags into `tp_vlan_tci` before packet taps see them; the
//!   copy re-inserts the tag so a forwarded frame leaves as it came.
//! * **TX**: a second socket, protocol 0 (it receives nothing), bound to the interface, with
//!   `PACKET_QDISC_BYPASS` (the frame goes straight to the driver: Metronome is the qdisc), fed by
//!   `sendmmsg` batches of up to 64 frames. Chosen over a TPACKET TX ring: the frames are in pool
//!   slots already, so a TX ring would add a second copy into its slots plus status-word handling
//!   and a `send` kick, for a gain (fewer syscalls) `sendmmsg` batching mostly gets too;
//!   the forwarder the daemon's throughput is measured against is `sendmmsg` with batches of 64.
//!   A `vnet_hdr` port with the bypass has a second TX socket without it, for GSO frames the
//!   device cannot take whole: the bypass path drops a frame the kernel must segment in
//!   software (see `Tx`); they are counted in `tx_gso_software`.
//!
//! * **Origin tags** ([`AfPacketConfig::origin_tags`], [`RxMode::Mmsg`] only): the port reads a
//!   capture interface into which a BPF program redirects the packets of other interfaces,
//!   after pushing an 802.1Q tag whose TCI names where each came from (the daemon's attach
//!   mode). The kernel strips the tag into the auxiliary data as for any tagged frame; here its
//!   TCI becomes the slot's origin tag ([`FramePool::origin`], which the classifier matches
//!   through `metronome_packet::ClassRule::origin`) and is not re-inserted: the frame leaves
//!   as the workload sent it. A frame without a tag is not the program's (the capture
//!   interface's own IPv6 neighbour discovery, say): dropped and counted in `rx_untagged`.
//! * **Transmit only** ([`AfPacketConfig::receive`] false): the RX socket is bound with protocol
//!   0, so it receives nothing, without promiscuous membership, ring or receive buffer;
//!   [`PacketPort::recv`] returns no frame without a system call. For a port the daemon only
//!   sends on (in attach mode, frames arrive on another interface).
//!
//! * **Fanout** (per-core silos, Carousel §5.3): with [`AfPacketConfig::fanout`] set, the RX
//!   socket joins a `PACKET_FANOUT` group of type `PACKET_FANOUT_HASH` right after `bind`: the
//!   kernel hashes each frame's flow (`skb_get_hash`, the same for every packet of a 5-tuple) and
//!   delivers it to one socket of the group only, so each silo's ring sees whole flows. The first
//!   socket creates the group with `PACKET_FANOUT_FLAG_UNIQUEID` (the kernel picks an id no
//!   other group in the namespace uses; [`AfPacketPort::fanout_group`] reads it back), the
//!   others join that id. Between a socket's `bind` and its joining (microseconds at start-up)
//!   it sees every frame, like a plain tap: a frame may then be delivered twice, never lost.
//!
//! Offloads: with GRO/GSO/TSO on, frames up to 64 KiB reach the socket with a partial checksum.
//! Three ways to handle them:
//!
//! * **[`AfPacketConfig::vnet_hdr`]** (module `vnet`): `PACKET_VNET_HDR` on both sockets. Every
//!   received frame comes with its `struct virtio_net_hdr` ([`metronome_packet::VnetHdr`]: GSO
//!   type and size, `NEEDS_CSUM` offsets), stored with the frame's slot
//!   ([`FramePool::vnet`]); [`PacketPort::send`] sends each frame with its slot's header, so the
//!   kernel segments a super-frame only where a device needs it and completes the checksum;
//!   [`AfPacketPort::send_pieces`] sends pieces cut with [`metronome_packet::SuperFrame::piece`]
//!   as (header, headers, payload) iovecs without copying the payload. Receive mode
//!   [`RxMode::Mmsg`] only: [`RxMode::Ring`] with `vnet_hdr` is refused with
//!   [`PortError::Config`] (the ring would need a second per-frame header walk and its blocks
//!   hold 64 KiB frames poorly). Use a pool with a large class ([`FramePool::with_large`],
//!   [`crate::frame_pool::GSO_SLOT_SIZE`]).
//! * A [`crate::frame_pool::JUMBO_SLOT_SIZE`] pool without the header: frames arrive whole but
//!   must leave as MTU frames, which a super-frame is not (`tx_errors`).
//! * Turning them off (`ethtool -K IF gro off gso off tso off`; without `ethtool`,
//!   `ip link set IF gso_max_segs 1` stops TCP building super-frames on the sending side).
//!   Frames from a local sender with checksum offload still arrive with
//!   [`RxFrame::csum_not_ready`] set.

use crate::frame_pool::{FramePool, StoreError};
use crate::piece::{self, PieceScratch, PieceSink, TxPiece};
use crate::port::{PacketPort, PortCapabilities, PortCounters, PortError, RxFrame};
use crate::sys::{self, RxRing, MSG_PARTS, SEND_BATCH};
use metronome_packet::VNET_HDR_LEN;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

mod reopen;
mod vnet;

pub use reopen::rejoin_group;

/// `ETH_P_ALL`: every protocol (linux/if_ether.h).
const ETH_P_ALL: u16 = 0x0003;
/// `ETH_P_8021Q`: the default TPID of a re-inserted VLAN tag (linux/if_ether.h).
const ETH_P_8021Q: u16 = 0x8100;
/// Bytes of the two MAC addresses, after which an 802.1Q tag goes (IEEE 802.1Q §9.3).
const MAC_ADDRS_LEN: usize = 12;
/// Smallest ring block: one 4 KiB page (packet_mmap.rst: a block is a multiple of PAGE_SIZE).
const MIN_BLOCK_SIZE: u32 = 4096;
/// Frames per `recvmmsg` call in [`RxMode::Mmsg`]: as many as one `sendmmsg` call takes (64).
pub const RECV_BATCH: usize = SEND_BATCH;

/// Ring layout and socket options of an [`AfPacketPort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Bytes per RX ring block; a power of two, at least 4096 (a page). Default 256 KiB: about
    /// 170 full-size frames, or three 64 KiB GRO frames.
    pub block_size: u32,
    /// Number of RX ring blocks. Default 64: a 16 MiB ring, about 11 000 full-size frames or
    /// 25 ms at 4 Gbit/s.
    pub block_count: u32,
    /// `tp_frame_size` in bytes: TPACKET_V3 packs frames of any size into a block, but the kernel
    /// still checks `tp_frame_nr = block_count × block_size / frame_size`. Default 2048.
    pub frame_size: u32,
    /// Milliseconds after which the kernel retires a partly filled block to user space
    /// (`tp_retire_blk_tov`): the worst RX latency at low rates. Default 1 (the smallest; 0 would
    /// let the kernel derive it from the link speed, 8 ms and more).
    pub retire_timeout_ms: u32,
    /// Put the interface in promiscuous mode while the port is open. Default true.
    pub promiscuous: bool,
    /// Set `PACKET_QDISC_BYPASS` on the TX socket. Default true.
    pub qdisc_bypass: bool,
    /// Join the RX socket to a `PACKET_FANOUT_HASH` group (see the module docs). Default none:
    /// the socket sees every frame.
    pub fanout: Option<Fanout>,
    /// How frames are received: `recvmmsg` batches (default) or the TPACKET_V3 ring.
    pub rx: RxMode,
    /// Set `PACKET_VNET_HDR` on both sockets: receive GSO/GRO super-frames of up to
    /// [`crate::frame_pool::GSO_SLOT_SIZE`] bytes with their virtio-net header, send every frame
    /// with one (see the module docs). Needs [`RxMode::Mmsg`]. Costs 4.2 MB of receive overflow
    /// buffers per port (`RECV_BATCH × GSO_SLOT_SIZE`), besides the pool's large slots.
    /// Default false.
    pub vnet_hdr: bool,
    /// The 802.1Q tag the kernel stripped from a received frame is the frame's origin tag: its
    /// TCI is stored as the slot's [`FramePool::origin`] and the tag is not re-inserted; a frame
    /// that arrives without a tag is dropped and counted in `rx_untagged` (see the module docs,
    /// "Origin tags"). Needs [`RxMode::Mmsg`]. Default false: a stripped tag is re-inserted and
    /// every slot's origin is 0.
    pub origin_tags: bool,
    /// Receive frames. False opens a transmit-only port (see the module docs, "Transmit
    /// only"); it cannot join a fanout group. Default true.
    pub receive: bool,
    /// `SO_MARK` of the transmit sockets: every frame sent carries this `skb->mark` (the kernel
    /// takes a packet socket's mark for each frame it sends, af_packet's `sockcm_init`); needs
    /// CAP_NET_ADMIN. 0 (the default) leaves the mark alone. The daemon's attach mode marks
    /// what it sends through a bridge, so that its own `capture` program lets it pass.
    pub mark: u32,
    /// A loaded BPF socket filter program (its descriptor) attached to the receive socket with
    /// `SO_ATTACH_BPF` before it is bound, so that no frame reaches the socket unfiltered; a
    /// port opened again ([`PacketPort::reopen`]) attaches it again. The kernel runs it for
    /// every frame before queueing it: a frame it refuses costs the socket nothing and counts
    /// in none of the port's counters. The caller keeps the program loaded while the port is
    /// open. Default `None`.
    pub socket_filter: Option<std::os::fd::RawFd>,
}

/// How an [`AfPacketPort`] receives (see the module docs, "RX").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxMode {
    /// `recvmmsg` batches of up to 64 frames straight into pool slots, with `PACKET_AUXDATA`
    /// for the checksum status and VLAN tag, and a socket receive buffer of the ring's size.
    /// The default: it hands frames over as soon as they arrive, where the ring holds them until
    /// a block is full or retired; measured on veth, one TCP flow through the daemon ran about
    /// 20 % faster (`metronome compare --ceiling`).
    #[default]
    Mmsg,
    /// The TPACKET_V3 memory-mapped ring of `block_count` blocks of `block_size` bytes.
    Ring,
}

/// The `PACKET_FANOUT_HASH` group an RX socket joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// Create a new group with an id the kernel picks (`PACKET_FANOUT_FLAG_UNIQUEID`); read it
    /// back with [`AfPacketPort::fanout_group`] and open the other members with
    /// [`Fanout::Join`].
    NewGroup,
    /// Join the group of this id (on the same interface).
    Join(u16),
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl AfPacketConfig {
    /// The defaults, as a constant (see each field).
    pub const DEFAULT: AfPacketConfig = AfPacketConfig {
        block_size: 1 << 18,
        block_count: 64,
        frame_size: 2048,
        retire_timeout_ms: 1,
        promiscuous: true,
        qdisc_bypass: true,
        fanout: None,
        rx: RxMode::Mmsg,
        vnet_hdr: false,
        origin_tags: false,
        receive: true,
        mark: 0,
        socket_filter: None,
    };
}

impl AfPacketConfig {
    /// The first value the kernel would refuse, if any.
    fn check(&self) -> Result<(), &'static str> {
        if self.block_size < MIN_BLOCK_SIZE || !self.block_size.is_power_of_two() {
            return Err("block_size must be a power of two of at least 4096 bytes");
        }
        if self.block_count == 0 {
            return Err("block_count must be at least 1");
        }
        if (self.block_size as u64) * (self.block_count as u64) > 1 << 32 {
            return Err("ring larger than 4 GiB");
        }
        let hdr = libc::TPACKET3_HDRLEN as u32;
        if self.frame_size < hdr
            || !self.frame_size.is_multiple_of(16)
            || self.frame_size > self.block_size
        {
            return Err(
                "frame_size must be a multiple of 16 between TPACKET3_HDRLEN and block_size",
            );
        }
        if self.retire_timeout_ms == 0 {
            return Err("retire_timeout_ms must be at least 1");
        }
        if self.vnet_hdr && self.rx == RxMode::Ring {
            return Err("vnet_hdr needs rx = Mmsg (the TPACKET_V3 ring is not supported with it)");
        }
        if self.origin_tags && self.rx == RxMode::Ring {
            return Err(
                "origin_tags needs rx = Mmsg (the TPACKET_V3 ring is not supported with it)",
            );
        }
        if !self.receive && self.fanout.is_some() {
            return Err("fanout needs receive (a transmit-only port joins no fanout group)");
        }
        Ok(())
    }
}

/// A [`PacketPort`] on one Linux interface through AF_PACKET: TPACKET_V3 RX ring, `sendmmsg` TX.
pub struct AfPacketPort {
    ifname: String,
    /// The options it was opened with ([`PacketPort::reopen`] opens it again with them).
    config: AfPacketConfig,
    rx_fd: OwnedFd,
    tx: Tx,
    /// The ring, in [`RxMode::Ring`]; `None` receives with `recvmmsg`.
    ring: Option<RxRing>,
    counters: PortCounters,
    fanout_group: Option<u16>,
    /// With [`AfPacketConfig::vnet_hdr`]: the receive overflow buffers (see module `vnet`).
    vnet: Option<vnet::VnetRx>,
    /// Messages the next `recvmmsg` asks for ([`next_recv_want`]).
    rx_want: usize,
    /// Headers of the pieces of one send ([`crate::piece`]).
    scratch: PieceScratch,
}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("ifname", &self.ifname)
            .field("counters", &self.counters)
            .finish()
    }
}

impl AfPacketPort {
    /// Opens the port on interface `ifname` of the calling thread's network namespace. Errors
    /// name the interface: [`PortError::NoSuchInterface`], [`PortError::Permission`] (no
    /// CAP_NET_RAW/CAP_NET_ADMIN), [`PortError::Config`], [`PortError::Io`].
    pub fn open(ifname: &str, config: &AfPacketConfig) -> Result<Self, PortError> {
        let name = || ifname.to_string();
        config.check().map_err(|reason| PortError::Config {
            ifname: name(),
            reason,
        })?;
        let io_err = |op: &'static str| move |e: io::Error| os_error(ifname, op, e);
        let ifindex = sys::if_index(ifname).map_err(io_err("if_nametoindex"))?;

        let rx_fd = sys::packet_socket(0).map_err(io_err("socket"))?;
        let one: libc::c_int = 1;
        if config.vnet_hdr {
            sys::set_packet_opt(&rx_fd, libc::PACKET_VNET_HDR, &one)
                .map_err(io_err("PACKET_VNET_HDR"))?;
        }
        let ring = match config.rx {
            // Transmit only: no ring, no receive buffer; bound below with protocol 0.
            _ if !config.receive => None,
            RxMode::Ring => Some(map_ring(&rx_fd, config).map_err(io_err("PACKET_RX_RING"))?),
            RxMode::Mmsg => {
                sys::set_packet_opt(&rx_fd, libc::PACKET_AUXDATA, &one)
                    .map_err(io_err("PACKET_AUXDATA"))?;
                // As much buffering as the ring would have had.
                let bytes = u64::from(config.block_size) * u64::from(config.block_count);
                sys::set_rcvbuf(&rx_fd, bytes.min(i32::MAX as u64) as libc::c_int)
                    .map_err(io_err("SO_RCVBUF"))?;
                None
            }
        };
        sys::set_packet_opt(&rx_fd, libc::PACKET_IGNORE_OUTGOING, &one)
            .map_err(io_err("PACKET_IGNORE_OUTGOING"))?;
        if let Some(program) = config.socket_filter.filter(|_| config.receive) {
            sys::attach_bpf(&rx_fd, program).map_err(io_err("SO_ATTACH_BPF"))?;
        }
        let protocol = if config.receive { ETH_P_ALL } else { 0 };
        sys::bind_packet(&rx_fd, ifindex, protocol).map_err(io_err("bind"))?;
        let fanout_group = match config.fanout {
            None => None,
            Some(f) => Some(join_fanout(&rx_fd, f).map_err(io_err("PACKET_FANOUT"))?),
        };
        if config.promiscuous && config.receive {
            let mreq = libc::packet_mreq {
                mr_ifindex: ifindex as i32,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sys::set_packet_opt(&rx_fd, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(io_err("PACKET_ADD_MEMBERSHIP"))?;
        }

        let tx_fd = sys::packet_socket(0).map_err(io_err("socket"))?;
        if config.vnet_hdr {
            sys::set_packet_opt(&tx_fd, libc::PACKET_VNET_HDR, &one)
                .map_err(io_err("PACKET_VNET_HDR"))?;
        }
        if config.qdisc_bypass {
            sys::set_packet_opt(&tx_fd, libc::PACKET_QDISC_BYPASS, &one)
                .map_err(io_err("PACKET_QDISC_BYPASS"))?;
        }
        if config.mark != 0 {
            sys::set_mark(&tx_fd, config.mark).map_err(io_err("SO_MARK"))?;
        }
        sys::bind_packet(&tx_fd, ifindex, 0).map_err(io_err("bind"))?;
        let soft = if config.vnet_hdr && config.qdisc_bypass {
            let soft = sys::packet_socket(0).map_err(io_err("socket"))?;
            sys::set_packet_opt(&soft, libc::PACKET_VNET_HDR, &one)
                .map_err(io_err("PACKET_VNET_HDR"))?;
            if config.mark != 0 {
                sys::set_mark(&soft, config.mark).map_err(io_err("SO_MARK"))?;
            }
            sys::bind_packet(&soft, ifindex, 0).map_err(io_err("bind"))?;
            Some(soft)
        } else {
            None
        };
        // Without TSO every TCP super-frame needs software segmentation: start on the socket
        // that allows it. A device that has TSO but refuses some frame (`UDP_L4` without UDP
        // segmentation offload, `gso_max_segs`) is found by the first refusal (`Tx::send`).
        let tso = crate::Offload::Tso.get(ifname).unwrap_or(true);

        Ok(AfPacketPort {
            ifname: ifname.to_string(),
            config: *config,
            rx_fd,
            tx: Tx {
                gso_via_soft: soft.is_some() && !tso,
                fd: tx_fd,
                soft,
                gone: None,
            },
            ring,
            counters: PortCounters::default(),
            fanout_group,
            vnet: config.vnet_hdr.then(|| vnet::VnetRx::new(config.receive)),
            rx_want: RECV_BATCH,
            scratch: PieceScratch::default(),
        })
    }

    /// Attaches the loaded BPF socket filter `program` to the open receive socket, as
    /// [`AfPacketConfig::socket_filter`] does at open (frames already queued are not filtered),
    /// and keeps it for [`PacketPort::reopen`]. Does nothing on a transmit-only port.
    pub fn set_socket_filter(&mut self, program: std::os::fd::RawFd) -> Result<(), PortError> {
        if !self.config.receive {
            return Ok(());
        }
        sys::attach_bpf(&self.rx_fd, program)
            .map_err(|e| os_error(&self.ifname, "SO_ATTACH_BPF", e))?;
        self.config.socket_filter = Some(program);
        Ok(())
    }

    /// The id of the fanout group the RX socket is in (`None` without [`AfPacketConfig::fanout`]).
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout_group
    }

    /// The interface name the port was opened on.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// True if the port was opened with [`AfPacketConfig::vnet_hdr`].
    pub fn vnet_hdr(&self) -> bool {
        self.vnet.is_some()
    }
}

/// Sets TPACKET_V3 on `rx_fd` and maps its RX ring as `config` says.
fn map_ring(rx_fd: &OwnedFd, config: &AfPacketConfig) -> io::Result<RxRing> {
    let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
    sys::set_packet_opt(rx_fd, libc::PACKET_VERSION, &version)?;
    let req = libc::tpacket_req3 {
        tp_block_size: config.block_size,
        tp_block_nr: config.block_count,
        tp_frame_size: config.frame_size,
        tp_frame_nr: (config.block_size / config.frame_size) * config.block_count,
        tp_retire_blk_tov: config.retire_timeout_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    sys::set_packet_opt(rx_fd, libc::PACKET_RX_RING, &req)?;
    RxRing::map(
        rx_fd,
        config.block_size as usize,
        config.block_count as usize,
    )
}

/// Joins `fd` (bound) to the `PACKET_FANOUT_HASH` group `f`; returns the group's id.
fn join_fanout(fd: &OwnedFd, f: Fanout) -> io::Result<u16> {
    let hash = libc::PACKET_FANOUT_HASH;
    let arg: u32 = match f {
        Fanout::NewGroup => (hash | libc::PACKET_FANOUT_FLAG_UNIQUEID) << 16,
        Fanout::Join(id) => u32::from(id) | hash << 16,
    };
    sys::set_packet_opt(fd, libc::PACKET_FANOUT, &arg)?;
    // packet(7): getsockopt(PACKET_FANOUT) returns `id | type << 16 | flags << 24`.
    Ok((sys::packet_fanout(fd)? & 0xffff) as u16)
}

/// Copies `data` into a fresh slot of `pool` (of the class its length needs), re-inserting the
/// 802.1Q tag the kernel stripped (`vlan`: TPID, TCI). The pool's error if it cannot.
fn copy_frame(
    pool: &mut FramePool,
    data: &[u8],
    vlan: Option<(u16, u16)>,
) -> Result<u32, StoreError> {
    let Some((tpid, tci)) = vlan.filter(|_| data.len() >= MAC_ADDRS_LEN) else {
        return pool.store(data);
    };
    let len = data.len() + 4;
    let id = pool.alloc_for(len)?;
    let slot = pool.slot_mut(id);
    slot[..MAC_ADDRS_LEN].copy_from_slice(&data[..MAC_ADDRS_LEN]);
    slot[MAC_ADDRS_LEN..MAC_ADDRS_LEN + 2].copy_from_slice(&tpid.to_be_bytes());
    slot[MAC_ADDRS_LEN + 2..MAC_ADDRS_LEN + 4].copy_from_slice(&tci.to_be_bytes());
    slot[MAC_ADDRS_LEN + 4..len].copy_from_slice(&data[MAC_ADDRS_LEN..]);
    pool.set_len(id, len);
    Ok(id)
}

/// The transmit side of a port: the bound socket (with `PACKET_QDISC_BYPASS` when configured)
/// and, for a `vnet_hdr` port with the bypass, a second bound socket without it.
///
/// Why two: a GSO frame sent on a bypass socket goes to `__dev_direct_xmit` (net/core/dev.c),
/// which runs `validate_xmit_skb_list` and drops the frame if that replaced it, i.e. if the
/// device could not take it whole and the kernel segmented it in software (TSO off, a
/// `gso_type` the device has no offload for, more segments than `gso_max_segs`): `sendmsg`
/// fails with `ENOBUFS` and the device counts `tx_dropped`. Through the queueing layer
/// (`__dev_queue_xmit`) the same frame leaves as its segments.
struct Tx {
    fd: OwnedFd,
    /// No bypass: GSO frames the device must segment in software go here.
    soft: Option<OwnedFd>,
    /// Set when the device is known not to take GSO frames whole: every GSO frame goes to
    /// `soft`. Set at open when the device has no TSO, or at the first GSO frame the bypass
    /// path refuses; it stays set for the port's life.
    gso_via_soft: bool,
    /// The errno of the last send refused because the interface is down or gone (`ENETDOWN`,
    /// `ENXIO`), until a transmit-only port's `recv` reports it (see [`PacketPort::recv`] of
    /// [`AfPacketPort`]).
    gone: Option<i32>,
}

impl Tx {
    /// Sends a leading run of `msgs` with one `sendmmsg`, `gso[i]` saying whether message `i`
    /// is a GSO frame. Returns how many the kernel took (GSO frames that went through the
    /// queueing layer also counted in `tx_gso_software`); an error means it took none.
    fn send(
        &mut self,
        msgs: &[[&[u8]; MSG_PARTS]],
        gso: &[bool],
        counters: &mut PortCounters,
    ) -> io::Result<usize> {
        let Some(soft) = self.soft.as_ref() else {
            return sys::send_msgs(&self.fd, msgs);
        };
        let first_gso = gso.first().copied().unwrap_or(false);
        if self.gso_via_soft {
            let run = gso.iter().take_while(|&&g| g == first_gso).count();
            let run = run.max(1).min(msgs.len());
            if !first_gso {
                return sys::send_msgs(&self.fd, &msgs[..run]);
            }
            let sent = sys::send_msgs(soft, &msgs[..run])?;
            counters.tx_gso_software += sent as u64;
            return Ok(sent);
        }
        match sys::send_msgs(&self.fd, msgs) {
            Err(e) if first_gso && e.raw_os_error() == Some(libc::ENOBUFS) => {
                // Refused by the bypass path (see the type's docs), or the device was busy:
                // through the queueing layer it either leaves (the device needs software
                // segmentation: so do the GSO frames after it) or is busy there too.
                let sent = sys::send_msgs(soft, &msgs[..1]).map_err(|_| e)?;
                if sent == 1 {
                    self.gso_via_soft = true;
                    counters.tx_gso_software += 1;
                }
                Ok(sent)
            }
            other => other,
        }
    }
}

/// [`PacketPort::send`] on a bound packet socket: `sendmmsg` batches of up to 64 frames from
/// `pool`, counted in `counters`. A busy device stops early (`tx_busy`), a frame refused for good
/// is counted (`tx_errors`) and freed; an unexpected error is returned only while no id was
/// consumed, so the caller still knows exactly which slots it owns.
///
/// With `vnet` (the socket has `PACKET_VNET_HDR`) each frame goes out behind its slot's
/// [`FramePool::vnet`] header.
fn send_batches(
    tx: &mut Tx,
    vnet: bool,
    counters: &mut PortCounters,
    pool: &mut FramePool,
    ids: &[u32],
) -> io::Result<usize> {
    let mut done = 0;
    while done < ids.len() {
        let batch = &ids[done..ids.len().min(done + SEND_BATCH)];
        let mut headers = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
        let mut gso = [false; SEND_BATCH];
        if vnet {
            for ((h, g), &id) in headers.iter_mut().zip(&mut gso).zip(batch) {
                let vnet = pool.vnet(id);
                *h = vnet.to_bytes();
                *g = vnet.is_gso();
            }
        }
        let mut msgs: [[&[u8]; MSG_PARTS]; SEND_BATCH] = [[&[]; MSG_PARTS]; SEND_BATCH];
        for ((m, &id), h) in msgs.iter_mut().zip(batch).zip(&headers) {
            let header: &[u8] = if vnet { h } else { &[] };
            *m = [header, pool.frame(id), &[]];
        }
        match tx.send(&msgs[..batch.len()], &gso[..batch.len()], counters) {
            Ok(sent) => {
                for &id in &batch[..sent] {
                    counters.tx_packets += 1;
                    counters.tx_bytes += pool.len(id) as u64;
                    pool.free(id);
                }
                done += sent;
                if sent == 0 {
                    counters.tx_busy += 1;
                    break;
                }
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                    counters.tx_busy += 1;
                    break;
                }
                // The first frame of the batch was refused for good: count, free, go on.
                Some(
                    errno @ (libc::EMSGSIZE
                    | libc::EINVAL
                    | libc::ENETDOWN
                    | libc::ENXIO
                    | libc::EFAULT),
                ) => {
                    if matches!(errno, libc::ENETDOWN | libc::ENXIO) {
                        tx.gone = Some(errno);
                    }
                    counters.tx_errors += 1;
                    pool.free(batch[0]);
                    done += 1;
                }
                _ if done > 0 => break,
                _ => return Err(e),
            },
        }
    }
    Ok(done)
}

/// The [`PortError`] naming `ifname` for an OS error of operation `op`: `EPERM`/`EACCES` are
/// [`PortError::Permission`], `ENODEV`/`ENXIO` [`PortError::NoSuchInterface`], anything else
/// [`PortError::Io`].
pub(crate) fn os_error(ifname: &str, op: &'static str, e: io::Error) -> PortError {
    let ifname = ifname.to_string();
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => PortError::Permission { ifname },
        Some(libc::ENODEV) | Some(libc::ENXIO) => PortError::NoSuchInterface { ifname },
        _ => PortError::Io {
            op,
            ifname,
            source: e,
        },
    }
}

/// The 802.1Q tag (TPID, TCI) the kernel stripped from a frame of status `status`, if any.
fn stripped_vlan(status: u32, tpid: u16, tci: u16) -> Option<(u16, u16)> {
    (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
        let tpid_valid = status & libc::TP_STATUS_VLAN_TPID_VALID != 0;
        let tpid = if tpid_valid && tpid != 0 {
            tpid
        } else {
            ETH_P_8021Q
        };
        (tpid, tci)
    })
}

/// What becomes of a received frame's stripped 802.1Q tag ([`rx_tag`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxTag {
    /// Re-insert this tag (TPID, TCI), if any: the frame leaves as it came.
    Reinsert(Option<(u16, u16)>),
    /// With [`AfPacketConfig::origin_tags`]: the tag's TCI, the frame's origin tag, kept with
    /// its slot ([`FramePool::set_origin`]) and not in the frame.
    Origin(u16),
    /// With [`AfPacketConfig::origin_tags`]: the frame came without a tag, so not from the
    /// capture program; dropped, counted in `rx_untagged`.
    Untagged,
}

/// What the stripped tag `vlan` ([`stripped_vlan`]) of a frame received on a port with or
/// without `origin_tags` becomes.
fn rx_tag(origin_tags: bool, vlan: Option<(u16, u16)>) -> RxTag {
    match (origin_tags, vlan) {
        (false, vlan) => RxTag::Reinsert(vlan),
        (true, Some((_, tci))) => RxTag::Origin(tci),
        (true, None) => RxTag::Untagged,
    }
}

/// Finishes the `len`-byte frame received into slot `id` by its stripped tag: re-inserts it in
/// place, or sets the slot's origin tag. Returns the frame's length, or `None` for a frame to
/// drop, counted in `counters` (`rx_untagged`, or `rx_oversize` when the slot has no room for
/// a re-inserted tag); the caller frees the slot.
fn finish_tag(
    pool: &mut FramePool,
    id: u32,
    len: usize,
    tag: RxTag,
    counters: &mut PortCounters,
) -> Option<usize> {
    match tag {
        RxTag::Reinsert(None) => Some(len),
        RxTag::Reinsert(Some(vlan)) => {
            let len = insert_vlan(pool.slot_mut(id), len, vlan);
            if len.is_none() {
                counters.rx_oversize += 1;
            }
            len
        }
        RxTag::Origin(origin) => {
            pool.set_origin(id, origin);
            Some(len)
        }
        RxTag::Untagged => {
            counters.rx_untagged += 1;
            None
        }
    }
}

/// Re-inserts `vlan` (TPID, TCI) after the MAC addresses of the `len`-byte frame in `slot`, in
/// place; returns the new length, or `None` if the slot has no room for the 4 bytes.
fn insert_vlan(slot: &mut [u8], len: usize, (tpid, tci): (u16, u16)) -> Option<usize> {
    if len < MAC_ADDRS_LEN || len + 4 > slot.len() {
        return None;
    }
    slot.copy_within(MAC_ADDRS_LEN..len, MAC_ADDRS_LEN + 4);
    slot[MAC_ADDRS_LEN..MAC_ADDRS_LEN + 2].copy_from_slice(&tpid.to_be_bytes());
    slot[MAC_ADDRS_LEN + 2..MAC_ADDRS_LEN + 4].copy_from_slice(&tci.to_be_bytes());
    Some(len + 4)
}

/// Up to `max` (at most [`RECV_BATCH`]) fresh small slots for one `recvmmsg`, in increasing id
/// order (the order in which [`FramePool::slots_mut`] hands out disjoint slots), and how many.
/// Fewest messages a `recvmmsg` asks for ([`next_recv_want`]).
pub const MIN_RECV_WANT: usize = 8;

/// Messages the next `recvmmsg` of a port asks for, after one that asked for `want` and got
/// `got`: four times as many after a full batch, otherwise twice what came but at least half
/// of `want`, within [`MIN_RECV_WANT`]..=[`RECV_BATCH`]. Every message asked for takes a pool
/// slot and its buffers before the call, and most calls of a loop woken for one frame find one
/// frame or none: asking for what is likely to come keeps that preparation small, while a
/// burst reaches a whole batch by the second call and keeps it while frames keep coming.
pub fn next_recv_want(want: usize, got: usize) -> usize {
    let next = if got >= want {
        want.saturating_mul(4)
    } else {
        got.saturating_mul(2).max(want / 2)
    };
    next.clamp(MIN_RECV_WANT, RECV_BATCH)
}

fn alloc_batch(pool: &mut FramePool, max: usize) -> ([u32; RECV_BATCH], usize) {
    let want = max.min(pool.available_small()).min(RECV_BATCH);
    let mut ids = [0u32; RECV_BATCH];
    for id in &mut ids[..want] {
        // `want` is at most `available_small()`, so every allocation succeeds.
        *id = pool.alloc().unwrap_or_default();
    }
    ids[..want].sort_unstable();
    (ids, want)
}

impl AfPacketPort {
    /// [`PacketPort::recv`] in [`RxMode::Mmsg`]: one `recvmmsg` straight into fresh pool slots.
    fn recv_mmsg(&mut self, pool: &mut FramePool, out: &mut [RxFrame]) -> Result<usize, PortError> {
        let (ids, want) = alloc_batch(pool, out.len().min(self.rx_want));
        if want == 0 {
            return Ok(0);
        }
        let mut meta = [sys::RecvMeta::default(); RECV_BATCH];
        let got = {
            let mut bufs: [[&mut [u8]; MSG_PARTS]; RECV_BATCH] =
                std::array::from_fn(|_| std::array::from_fn(|_| &mut [][..]));
            for (buf, slot) in bufs.iter_mut().zip(pool.slots_mut(&ids[..want])) {
                buf[0] = slot;
            }
            sys::recv_frames(&self.rx_fd, &mut bufs[..want], &mut meta)
        };
        let got = match got {
            Ok(n) => n,
            Err(e) => {
                for &id in &ids[..want] {
                    pool.free(id);
                }
                return Err(os_error(&self.ifname, "recvmmsg", e));
            }
        };
        self.rx_want = next_recv_want(want, got);
        let mut n = 0;
        for (i, &id) in ids[..want].iter().enumerate() {
            let m = &meta[i];
            let vlan = stripped_vlan(m.status, m.vlan_tpid, m.vlan_tci);
            let tag = rx_tag(self.config.origin_tags, vlan);
            let len = match (i < got, m.truncated) {
                (false, _) => None,
                (true, true) => {
                    self.counters.rx_truncated += 1;
                    None
                }
                (true, false) => finish_tag(pool, id, m.len, tag, &mut self.counters),
            };
            let Some(len) = len else {
                pool.free(id);
                continue;
            };
            pool.set_len(id, len);
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += len as u64;
            out[n] = RxFrame {
                id,
                len: len as u32,
                csum_not_ready: m.status & libc::TP_STATUS_CSUMNOTREADY != 0,
                stamp_ns: 0,
            };
            n += 1;
        }
        Ok(n)
    }
}

impl PacketPort for AfPacketPort {
    fn recv(&mut self, pool: &mut FramePool, out: &mut [RxFrame]) -> Result<usize, PortError> {
        if !self.config.receive {
            // Nothing to receive, but a transmit-only port's interface going down or away is
            // seen only by its sends, which count and free the refused frame and go on: report
            // it here, where the caller's link handling looks (the carrier errors).
            return match self.tx.gone.take() {
                None => Ok(0),
                Some(errno) => Err(os_error(
                    &self.ifname,
                    "sendmmsg",
                    io::Error::from_raw_os_error(errno),
                )),
            };
        }
        if self.vnet.is_some() {
            return self.recv_vnet(pool, out);
        }
        let Some(ring) = self.ring.as_mut() else {
            return self.recv_mmsg(pool, out);
        };
        let mut n = 0;
        while n < out.len() && pool.available() > 0 {
            let frame = match ring.peek() {
                None => break,
                Some(Ok(f)) => f,
                Some(Err(())) => {
                    self.counters.rx_ring_errors += 1;
                    ring.skip_block();
                    continue;
                }
            };
            if frame.pkttype == libc::PACKET_OUTGOING {
                // Looped-back transmissions; PACKET_IGNORE_OUTGOING normally filters them.
            } else if (frame.data.len() as u32) < frame.wire_len {
                self.counters.rx_truncated += 1;
            } else {
                let vlan = stripped_vlan(frame.status, frame.vlan_tpid, frame.vlan_tci);
                let csum_not_ready = frame.status & libc::TP_STATUS_CSUMNOTREADY != 0;
                match copy_frame(pool, frame.data, vlan) {
                    Ok(id) => {
                        let len = pool.len(id) as u32;
                        out[n] = RxFrame {
                            id,
                            len,
                            csum_not_ready,
                            stamp_ns: frame.stamp_ns,
                        };
                        n += 1;
                        self.counters.rx_packets += 1;
                        self.counters.rx_bytes += u64::from(len);
                    }
                    // The frame's class is full: it stays in the ring for the next call.
                    Err(StoreError::Exhausted) => break,
                    Err(StoreError::NoLargeSlot { .. }) => self.counters.rx_no_large_slot += 1,
                    Err(StoreError::Oversize { .. }) => self.counters.rx_oversize += 1,
                }
            }
            ring.advance();
        }
        Ok(n)
    }

    fn send(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        piece::send(self, pool, ids)
    }

    fn counters(&mut self) -> PortCounters {
        // Reading PACKET_STATISTICS resets the kernel's counters, so accumulate. A failure here
        // (it cannot fail on an open packet socket) leaves the previous totals.
        if let Ok(st) = sys::packet_stats(&self.rx_fd) {
            self.counters.rx_ring_drops += u64::from(st.tp_drops);
            self.counters.rx_ring_freezes += u64::from(st.tp_freeze_q_cnt);
        }
        self.counters
    }

    fn poll_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.rx_fd.as_fd())
    }

    fn interface(&self) -> Option<&str> {
        Some(&self.ifname)
    }

    fn capabilities(&self) -> PortCapabilities {
        PortCapabilities {
            vnet_hdr: self.vnet.is_some(),
            reopen: true,
        }
    }

    /// See the `reopen` module.
    fn reopen(&mut self) -> Result<PortCounters, PortError> {
        self.open_again()
    }
}

impl PieceSink for AfPacketPort {
    fn scratch(&mut self) -> &mut PieceScratch {
        &mut self.scratch
    }

    fn send_frames(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError> {
        let vnet = self.vnet.is_some();
        send_batches(&mut self.tx, vnet, &mut self.counters, pool, ids).map_err(|source| {
            PortError::Io {
                op: "sendmmsg",
                ifname: self.ifname.clone(),
                source,
            }
        })
    }

    fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError> {
        AfPacketPort::send_pieces(self, pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A privileged test cannot run (`why`): panics saying so, unless
    /// `METRONOME_SKIP_PRIVILEGED=1`, where it writes `SKIPPED: why` to the process's stderr
    /// (past the test harness's capture, so that the skip shows in a passing run) and returns.
    /// The same rule as `metronome_testbed::netns::skip_unprivileged` (CONTRIBUTING.md,
    /// "Privileged tests").
    fn skip_unprivileged(why: &dyn std::fmt::Display) {
        use std::io::Write;
        if std::env::var("METRONOME_SKIP_PRIVILEGED").as_deref() != Ok("1") {
            panic!(
                "the privileged test cannot run: {why}; it needs root or CAP_NET_ADMIN and \
                 CAP_NET_RAW (set METRONOME_SKIP_PRIVILEGED=1 to skip it instead)"
            );
        }
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED (METRONOME_SKIP_PRIVILEGED=1): {why}"
        );
    }

    #[test]
    fn the_receive_batch_follows_what_arrives_within_its_bounds() {
        // A full batch grows four-fold up to the whole batch.
        assert_eq!(
            next_recv_want(MIN_RECV_WANT, MIN_RECV_WANT),
            4 * MIN_RECV_WANT
        );
        assert_eq!(next_recv_want(RECV_BATCH, RECV_BATCH), RECV_BATCH);
        let mut want = MIN_RECV_WANT;
        let mut calls = 1;
        while want < RECV_BATCH {
            want = next_recv_want(want, want);
            calls += 1;
        }
        assert!(calls <= 3, "{calls} calls to reach a whole batch");
        // Nothing or one frame: halves, never below the minimum.
        assert_eq!(next_recv_want(RECV_BATCH, 0), RECV_BATCH / 2);
        assert_eq!(next_recv_want(MIN_RECV_WANT, 0), MIN_RECV_WANT);
        assert_eq!(next_recv_want(MIN_RECV_WANT, 1), MIN_RECV_WANT);
        // Otherwise twice what came, within the bounds, and always more than came.
        for want in MIN_RECV_WANT..=RECV_BATCH {
            for got in 0..=want {
                let next = next_recv_want(want, got);
                assert!((MIN_RECV_WANT..=RECV_BATCH).contains(&next), "{want} {got}");
                assert!(next >= want / 2, "{want} {got} -> {next}");
                if got < RECV_BATCH {
                    assert!(next > got, "{want} {got} -> {next}");
                }
            }
        }
    }

    #[test]
    fn vlan_tag_is_reinserted_in_place() {
        let mut slot = [0u8; 32];
        let frame: Vec<u8> = (1..=20).collect();
        slot[..20].copy_from_slice(&frame);
        assert_eq!(insert_vlan(&mut slot, 20, (0x8100, 0x0123)), Some(24));
        assert_eq!(&slot[..12], &frame[..12]);
        assert_eq!(&slot[12..16], &[0x81, 0x00, 0x01, 0x23]);
        assert_eq!(&slot[16..24], &frame[12..]);
        // No room for the tag: refused, the caller counts it.
        let mut full = [0u8; 22];
        assert_eq!(insert_vlan(&mut full, 20, (0x8100, 1)), None);
        assert_eq!(
            stripped_vlan(libc::TP_STATUS_VLAN_VALID, 0, 7),
            Some((ETH_P_8021Q, 7))
        );
        assert_eq!(stripped_vlan(0, 0x88a8, 7), None);
    }

    #[test]
    fn both_receive_modes_open_on_loopback() {
        // Root in CI; without CAP_NET_RAW opening fails with a permission error: nothing to test.
        // Any other error fails the test.
        for rx in [RxMode::Mmsg, RxMode::Ring] {
            let config = AfPacketConfig {
                rx,
                promiscuous: false,
                ..AfPacketConfig::DEFAULT
            };
            let mut port = match AfPacketPort::open("lo", &config) {
                Ok(p) => p,
                Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
                Err(e) => panic!("{rx:?}: {e}"),
            };
            let mut pool = FramePool::new(64, 2048);
            let mut out = [RxFrame::default(); 64];
            // Whatever lo carries right now arrives whole, every slot accounted for.
            let n = port.recv(&mut pool, &mut out).unwrap();
            assert_eq!(pool.in_use(), n, "{rx:?}");
            for f in &out[..n] {
                assert_eq!(pool.len(f.id), f.len as usize);
            }
        }
    }

    #[test]
    fn a_mark_is_set_on_every_transmit_socket() {
        // Root in CI; without CAP_NET_RAW (or CAP_NET_ADMIN for SO_MARK) opening fails with a
        // permission error: nothing to test. Any other error fails the test.
        let mark_of = |fd: &OwnedFd| sys::mark(fd).unwrap();
        for mark in [0, 0x0fff_0000] {
            let config = AfPacketConfig {
                receive: false,
                promiscuous: false,
                vnet_hdr: true,
                mark,
                ..AfPacketConfig::DEFAULT
            };
            let port = match AfPacketPort::open("lo", &config) {
                Ok(p) => p,
                Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
                Err(e) => panic!("{e}"),
            };
            assert_eq!(mark_of(&port.tx.fd), mark);
            let soft = port
                .tx
                .soft
                .as_ref()
                .expect("vnet_hdr and bypass: a soft socket");
            assert_eq!(mark_of(soft), mark);
        }
    }

    #[test]
    fn default_config_is_valid() {
        assert_eq!(AfPacketConfig::default().check(), Ok(()));
        let bad = AfPacketConfig {
            block_size: 5000,
            ..Default::default()
        };
        assert!(bad.check().is_err());
        let bad = AfPacketConfig {
            frame_size: 2049,
            ..Default::default()
        };
        assert!(bad.check().is_err());
        let vnet = AfPacketConfig {
            vnet_hdr: true,
            ..Default::default()
        };
        assert_eq!(vnet.check(), Ok(()));
        let ring = AfPacketConfig {
            rx: RxMode::Ring,
            ..vnet
        };
        assert!(ring.check().unwrap_err().contains("vnet_hdr"));
        let origin = AfPacketConfig {
            origin_tags: true,
            ..Default::default()
        };
        assert_eq!(origin.check(), Ok(()));
        assert_eq!(
            AfPacketConfig {
                vnet_hdr: true,
                ..origin
            }
            .check(),
            Ok(())
        );
        let ring = AfPacketConfig {
            rx: RxMode::Ring,
            ..origin
        };
        assert!(ring.check().unwrap_err().contains("origin_tags"));
        let tx_only = AfPacketConfig {
            receive: false,
            ..Default::default()
        };
        assert_eq!(tx_only.check(), Ok(()));
        let fanout = AfPacketConfig {
            fanout: Some(Fanout::NewGroup),
            ..tx_only
        };
        assert!(fanout.check().unwrap_err().contains("fanout"));
    }

    #[test]
    fn an_origin_tag_goes_to_the_slot_and_an_untagged_frame_is_dropped() {
        let mut pool = FramePool::new(4, 64);
        let mut counters = PortCounters::default();
        let frame: Vec<u8> = (1..=20).collect();
        let tagged = stripped_vlan(libc::TP_STATUS_VLAN_VALID, 0, 7);
        // Origin tags: the TCI is the slot's origin, the frame stays as received.
        let id = pool.store(&frame).unwrap();
        let tag = rx_tag(true, tagged);
        assert_eq!(tag, RxTag::Origin(7));
        assert_eq!(finish_tag(&mut pool, id, 20, tag, &mut counters), Some(20));
        assert_eq!(pool.origin(id), 7);
        assert_eq!(&pool.slot_mut(id)[..20], &frame[..]);
        // No tag on such a port: dropped and counted, the slot's origin untouched.
        let untagged = pool.store(&frame).unwrap();
        let tag = rx_tag(true, stripped_vlan(0, 0, 7));
        assert_eq!(tag, RxTag::Untagged);
        assert_eq!(
            finish_tag(&mut pool, untagged, 20, tag, &mut counters),
            None
        );
        assert_eq!(pool.origin(untagged), 0);
        assert_eq!(
            counters,
            PortCounters {
                rx_untagged: 1,
                ..PortCounters::default()
            }
        );
        // Without origin tags a stripped tag is re-inserted and the origin stays 0.
        let plain = pool.store(&frame).unwrap();
        let tag = rx_tag(false, tagged);
        assert_eq!(tag, RxTag::Reinsert(Some((ETH_P_8021Q, 7))));
        assert_eq!(
            finish_tag(&mut pool, plain, 20, tag, &mut counters),
            Some(24)
        );
        assert_eq!(&pool.slot_mut(plain)[12..16], &[0x81, 0x00, 0x00, 0x07]);
        assert_eq!(pool.origin(plain), 0);
        assert_eq!(rx_tag(false, None), RxTag::Reinsert(None));
        assert_eq!(counters.rx_untagged, 1);
    }

    #[test]
    fn a_transmit_only_port_sends_and_receives_nothing() {
        // Loopback, not promiscuous: a frame one port sends comes back on lo; the receiving
        // port sees it, the transmit-only port (bound with protocol 0) does not.
        let rx_config = AfPacketConfig {
            promiscuous: false,
            block_count: 2,
            ..Default::default()
        };
        let mut rx = match AfPacketPort::open("lo", &rx_config) {
            Ok(p) => p,
            Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
            Err(e) => panic!("{e}"),
        };
        let tx_config = AfPacketConfig {
            receive: false,
            promiscuous: true,
            ..rx_config
        };
        let mut tx = AfPacketPort::open("lo", &tx_config).unwrap();
        let mut pool = FramePool::new(64, 2048);
        let mut out = [RxFrame::default(); 64];
        // Whatever lo carried before this test.
        while rx.recv(&mut pool, &mut out).unwrap() > 0 {
            for f in &out {
                pool.free(f.id);
            }
        }
        // An IEEE 802 local experimental EtherType (0x88B5): no protocol of the host reads it.
        let mut frame = [0u8; 60];
        frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        frame[14..18].copy_from_slice(b"mtio");
        let id = pool.store(&frame).unwrap();
        assert_eq!(tx.send(&mut pool, &[id]).unwrap(), 1);
        assert_eq!(tx.counters().tx_packets, 1);
        let readable =
            crate::wait_readable(rx.poll_fd().unwrap(), std::time::Duration::from_secs(5));
        assert!(readable.unwrap(), "the receiving port never saw the frame");
        let n = rx.recv(&mut pool, &mut out).unwrap();
        assert!(
            out[..n].iter().any(|f| pool.frame(f.id) == frame),
            "{n} frames"
        );
        // The transmit-only socket queued nothing (it would be readable by now), and its recv
        // hands out nothing.
        let fd = tx.poll_fd().unwrap();
        assert!(!crate::wait_readable(fd, std::time::Duration::ZERO).unwrap());
        let in_use = pool.in_use();
        assert_eq!(tx.recv(&mut pool, &mut out).unwrap(), 0);
        assert_eq!(pool.in_use(), in_use);
        assert_eq!(tx.counters().rx_packets, 0);
    }

    #[test]
    fn missing_interface_is_named() {
        let err = AfPacketPort::open("mtio-nope0", &AfPacketConfig::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("mtio-nope0"), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn fanout_members_share_the_group_the_first_created() {
        // Loopback, not promiscuous: no effect on the host beyond two short-lived sockets.
        let first = AfPacketConfig {
            promiscuous: false,
            block_count: 2,
            fanout: Some(Fanout::NewGroup),
            ..Default::default()
        };
        let a = match AfPacketPort::open("lo", &first) {
            Ok(p) => p,
            Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
            Err(e) => panic!("{e}"),
        };
        let id = a.fanout_group().expect("a fanout group");
        let join = AfPacketConfig {
            fanout: Some(Fanout::Join(id)),
            ..first
        };
        let b = AfPacketPort::open("lo", &join).unwrap();
        assert_eq!(b.fanout_group(), Some(id));
        // A second new group gets another id.
        let c = AfPacketPort::open("lo", &first).unwrap();
        assert_ne!(c.fanout_group(), Some(id));
        let plain = AfPacketConfig {
            fanout: None,
            ..first
        };
        assert_eq!(
            AfPacketPort::open("lo", &plain).unwrap().fanout_group(),
            None
        );
    }

    #[test]
    fn vlan_tag_is_reinserted() {
        let mut pool = FramePool::new(2, 64);
        let frame: Vec<u8> = (0..20).collect();
        let id = copy_frame(&mut pool, &frame, Some((0x8100, 0x0123))).unwrap();
        let got = pool.frame(id);
        assert_eq!(got.len(), 24);
        assert_eq!(&got[..12], &frame[..12]);
        assert_eq!(&got[12..16], &[0x81, 0x00, 0x01, 0x23]);
        assert_eq!(&got[16..], &frame[12..]);
        // 62 + 4 > 64: refused without using a slot.
        assert_eq!(
            copy_frame(&mut pool, &[0; 62], Some((0x8100, 1))),
            Err(StoreError::Oversize {
                len: 66,
                slot_size: 64
            })
        );
        assert_eq!(pool.in_use(), 1);
        // With a large class it goes there; with that full it is refused by name.
        let mut two = FramePool::with_large(1, 64, 1, 128);
        let id = copy_frame(&mut two, &[1; 62], Some((0x8100, 1))).unwrap();
        assert!(two.is_large(id));
        assert_eq!(two.frame(id).len(), 66);
        assert_eq!(
            copy_frame(&mut two, &[1; 62], Some((0x8100, 1))),
            Err(StoreError::NoLargeSlot { len: 66 })
        );
    }
}
