//! The daemon's AF_PACKET ports and frame pool: [`open_ports`] for the single loop,
//! [`open_silo_ports`] for silos (one `PACKET_FANOUT_HASH` group per interface, Carousel §5.3), the
//! inside ports' receive sockets running the early filter ([`crate::os::early`]), [`frame_slots`]
//! and [`frame_pool`] (small slots of [`small_slot_size`] for the configured MTU, large slots of
//! [`metronome_io::GSO_SLOT_SIZE`] for super-frames with `daemon.vnet_hdr`), and [`enable_gro`].
//! A re-created interface is opened again with `PacketPort::reopen` (`crate::driver::carrier`).

use crate::ops::config::Config;
use crate::os::early::EarlyFilter;
use metronome_io::{
    AfPacketConfig, AfPacketPort, Fanout, FramePool, Offload, PortCounters, PortError,
    DEFAULT_SLOT_SIZE, GSO_SLOT_SIZE,
};

/// Frame pool slots: 65 536 frames of [`metronome_io::DEFAULT_SLOT_SIZE`] bytes (128 MiB), or the
/// wheel's `pool_packets` when smaller. At 200 Mbit/s this holds 3.9 s of full-size frames, more
/// than the default 2 s horizon.
pub const DEFAULT_FRAME_SLOTS: u32 = 65_536;

/// Ethernet header and two 802.1Q tags, bytes: what a frame of `interfaces.mtu` bytes of IP
/// carries besides (IEEE 802.3, IEEE 802.1Q; the parser walks at most two tags).
const FRAME_OVERHEAD: usize = 14 + 2 * 4;
/// Small slots are rounded up to a multiple of this, bytes: two 64-byte cache lines.
const SLOT_ALIGN: usize = 128;

/// Bytes of a small slot for `config`: [`metronome_io::DEFAULT_SLOT_SIZE`], or a frame of
/// `interfaces.mtu` plus `FRAME_OVERHEAD` rounded up to `SLOT_ALIGN` when that is larger
/// (9 088 bytes for an MTU of 9000).
pub fn small_slot_size(config: &Config) -> usize {
    let mtu = usize::try_from(config.interfaces.mtu).unwrap_or(usize::MAX / 2);
    DEFAULT_SLOT_SIZE.max((mtu + FRAME_OVERHEAD).div_ceil(SLOT_ALIGN) * SLOT_ALIGN)
}

/// Frame pool slots for `config` (see [`DEFAULT_FRAME_SLOTS`]).
pub fn frame_slots(config: &Config) -> u32 {
    let wanted = u32::try_from(config.wheel.pool_packets).unwrap_or(u32::MAX);
    wanted.clamp(1024, DEFAULT_FRAME_SLOTS)
}

/// Opens the inside and outside ports of `config` in the calling thread's namespace; the
/// inside one's receive socket runs `early` (`crate::os::early`), when given.
pub fn open_ports(
    config: &Config,
    early: Option<&EarlyFilter>,
) -> Result<(AfPacketPort, AfPacketPort), PortError> {
    let af = port_config(config.daemon.vnet_hdr, None);
    let inside = AfPacketPort::open(&config.interfaces.inside, &filtered(af, early))?;
    let outside = AfPacketPort::open(&config.interfaces.outside, &af)?;
    Ok((inside, outside))
}

/// `af` with `early`'s program as the receive socket's filter.
fn filtered(af: AfPacketConfig, early: Option<&EarlyFilter>) -> AfPacketConfig {
    AfPacketConfig {
        socket_filter: early.map(EarlyFilter::program_fd),
        ..af
    }
}

/// The two ports of each of `n` silos: inside and outside RX sockets fanned out by flow hash.
pub fn open_silo_ports(
    config: &Config,
    n: usize,
    early: Option<&EarlyFilter>,
) -> Result<Vec<(AfPacketPort, AfPacketPort)>, PortError> {
    let mut ports: Vec<(AfPacketPort, AfPacketPort)> = Vec::with_capacity(n);
    for _ in 0..n {
        let (fanout_in, fanout_out) = match ports.first() {
            None => (Fanout::NewGroup, Fanout::NewGroup),
            Some((i, o)) => (
                Fanout::Join(i.fanout_group().unwrap_or_default()),
                Fanout::Join(o.fanout_group().unwrap_or_default()),
            ),
        };
        let af = |fanout| port_config(config.daemon.vnet_hdr, Some(fanout));
        let inside =
            AfPacketPort::open(&config.interfaces.inside, &filtered(af(fanout_in), early))?;
        let outside = AfPacketPort::open(&config.interfaces.outside, &af(fanout_out))?;
        ports.push((inside, outside));
    }
    Ok(ports)
}

/// Attach mode's ports, one pair per attached interface or bridge: `(capture, uplink, mark)`
/// give the capture veth end the loop receives on (frames carry their origin tag,
/// `origin_tags`), the attached interface or bridge it sends on (transmit only,
/// `PACKET_QDISC_BYPASS`: its transmit does not pass the egress hook again) and the `SO_MARK`
/// of what it sends (a bridge's: `crate::os::attach::Uplink::send_mark`; 0: none). Neither is
/// made promiscuous.
pub fn open_attached_ports(
    config: &Config,
    pairs: &[(&str, &str, u32)],
    early: Option<&EarlyFilter>,
) -> Result<Vec<(AfPacketPort, AfPacketPort)>, PortError> {
    let base = AfPacketConfig {
        promiscuous: false,
        ..port_config(config.daemon.vnet_hdr, None)
    };
    pairs
        .iter()
        .map(|&(capture, uplink, mark)| {
            let capture = AfPacketPort::open(
                capture,
                &AfPacketConfig {
                    origin_tags: true,
                    ..filtered(base, early)
                },
            )?;
            let uplink = AfPacketPort::open(
                uplink,
                &AfPacketConfig {
                    receive: false,
                    qdisc_bypass: true,
                    mark,
                    ..base
                },
            )?;
            Ok((capture, uplink))
        })
        .collect()
}

/// The socket options of the daemon's ports: the defaults, `vnet_hdr` and `fanout`.
fn port_config(vnet_hdr: bool, fanout: Option<Fanout>) -> AfPacketConfig {
    AfPacketConfig {
        fanout,
        vnet_hdr,
        ..AfPacketConfig::default()
    }
}

/// `a` plus `b`, field by field: the counters of a port and of the sockets it replaced.
pub fn add_counters(a: PortCounters, b: PortCounters) -> PortCounters {
    PortCounters {
        rx_packets: a.rx_packets + b.rx_packets,
        rx_bytes: a.rx_bytes + b.rx_bytes,
        rx_ring_drops: a.rx_ring_drops + b.rx_ring_drops,
        rx_ring_freezes: a.rx_ring_freezes + b.rx_ring_freezes,
        rx_oversize: a.rx_oversize + b.rx_oversize,
        rx_no_large_slot: a.rx_no_large_slot + b.rx_no_large_slot,
        rx_gso_truncated: a.rx_gso_truncated + b.rx_gso_truncated,
        rx_vnet_errors: a.rx_vnet_errors + b.rx_vnet_errors,
        rx_truncated: a.rx_truncated + b.rx_truncated,
        rx_ring_errors: a.rx_ring_errors + b.rx_ring_errors,
        rx_untagged: a.rx_untagged + b.rx_untagged,
        tx_packets: a.tx_packets + b.tx_packets,
        tx_bytes: a.tx_bytes + b.tx_bytes,
        tx_errors: a.tx_errors + b.tx_errors,
        tx_busy: a.tx_busy + b.tx_busy,
        tx_gso_software: a.tx_gso_software + b.tx_gso_software,
    }
}

/// Small slots of the reverse direction's pool (frames received on `outside`, sent on `inside`):
/// 4096 frames of [`metronome_io::DEFAULT_SLOT_SIZE`] bytes (8 MiB). A frame of that direction
/// is held from its receive to its transmit in the same round (or while ACK shaping withholds
/// it), so a loop holds at most a few transmit batches (2 × 64) of them; the rest is headroom.
pub const REVERSE_FRAME_SLOTS: u32 = 4096;
/// Large slots of the reverse direction's pool, for super-frames of data sent back (64, 4 MiB):
/// like its small slots, held for one round.
pub const REVERSE_GSO_SLOTS: u32 = 64;

/// The reverse direction's pool of one loop ([`crate::driver::run::Pools`]):
/// [`REVERSE_FRAME_SLOTS`] small slots, plus [`REVERSE_GSO_SLOTS`] large ones when the ports carry
/// virtio-net headers. Apart from the shaped direction's pool, so that no class's backlog can take
/// the slots of the ACKs that clock its senders.
pub fn reverse_pool(config: &Config) -> FramePool {
    if config.daemon.vnet_hdr {
        let large = REVERSE_GSO_SLOTS.min(config.daemon.gso_slots.max(1));
        let slot = small_slot_size(config);
        FramePool::with_large(REVERSE_FRAME_SLOTS, slot, large, GSO_SLOT_SIZE)
    } else {
        FramePool::new(REVERSE_FRAME_SLOTS, small_slot_size(config))
    }
}

/// The frame pool of one loop: [`frame_slots`] small slots of [`small_slot_size`], plus
/// `daemon.gso_slots` large ones when the ports carry virtio-net headers.
pub fn frame_pool(config: &Config) -> FramePool {
    if config.daemon.vnet_hdr {
        FramePool::with_large(
            frame_slots(config),
            small_slot_size(config),
            config.daemon.gso_slots,
            GSO_SLOT_SIZE,
        )
    } else {
        FramePool::new(frame_slots(config), small_slot_size(config))
    }
}

/// With `daemon.gro` (the default) switches GRO on on the inside interface, so that the frames
/// of senders without segmentation offload reach the daemon as super-frames too; logs what it
/// did. GRO is left on when the daemon stops: it is the kernel's default for most devices and
/// changes nothing a receiver sees. A failure is logged and the daemon runs without it.
pub fn enable_gro(config: &Config) {
    if config.daemon.gro && config.daemon.vnet_hdr {
        enable_gro_on(&config.interfaces.inside);
    }
}

/// Switches GRO on at `ifname` if it is off (see [`enable_gro`]).
pub fn enable_gro_on(ifname: &str) {
    let before = Offload::Gro.get(ifname).unwrap_or(false);
    if before {
        tracing::info!(interface = %ifname, "GRO already on");
        return;
    }
    match Offload::Gro
        .set(ifname, true)
        .and_then(|()| Offload::Gro.get(ifname))
    {
        Ok(true) => tracing::info!(interface = %ifname, "GRO switched on (left on at exit)"),
        Ok(false) => tracing::warn!(interface = %ifname, "GRO could not be switched on"),
        Err(e) => tracing::warn!(interface = %ifname, error = %e, "switching GRO on failed"),
    }
}

/// What a probe saw of an interface: `None` when it does not exist, else its index and whether
/// it is up.
pub type Probe = Option<(u32, bool)>;

/// Probes interface `name` in the calling thread's network namespace (`/sys/class/net` shows
/// the namespace `/sys` was mounted in, not necessarily this one): its index
/// (`if_nametoindex(3)`) and whether it is administratively up (`IFF_UP`, from
/// `getifaddrs(3)`) with link: `IFF_RUNNING`, or the driver's link state
/// ([`metronome_io::offload::link_detected`]), which comes first: the kernel sets
/// `IFF_RUNNING` from the operational state, which it updates at most once a second for most
/// devices (on a veth set up again it can lag the carrier by hundreds of milliseconds). Cold
/// path: only while a link is down.
pub fn probe_interface(name: &str) -> Probe {
    use nix::net::if_::InterfaceFlags;
    let index = nix::net::if_::if_nametoindex(name).ok()?;
    let flags = nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| a.interface_name == name)
        .fold(InterfaceFlags::empty(), |f, a| f | a.flags);
    let admin = flags.contains(InterfaceFlags::IFF_UP);
    let running = flags.contains(InterfaceFlags::IFF_RUNNING)
        || metronome_io::offload::link_detected(name).unwrap_or(false);
    Some((index, admin && running))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_slots_hold_a_frame_of_the_mtu() {
        let text =
            |mtu: u32| format!("[interfaces]\ninside = \"a\"\noutside = \"b\"\nmtu = {mtu}\n");
        let slot = |mtu| small_slot_size(&Config::from_toml_str(&text(mtu), "t.toml").unwrap());
        assert_eq!(slot(1500), DEFAULT_SLOT_SIZE);
        assert_eq!(slot(9000), 9088);
        assert!(slot(9000) >= 9000 + 14 + 8);
        let mut config = Config::from_toml_str(&text(9000), "t.toml").unwrap();
        config.daemon.vnet_hdr = false;
        let mut pool = frame_pool(&config);
        assert!(pool.store(&vec![0u8; 9014]).is_ok());
    }

    #[test]
    fn counters_add_field_by_field() {
        let a = PortCounters {
            rx_packets: 3,
            tx_packets: 4,
            tx_errors: 1,
            rx_untagged: 1,
            ..PortCounters::default()
        };
        let b = PortCounters {
            rx_packets: 10,
            rx_ring_drops: 2,
            tx_packets: 20,
            rx_untagged: 5,
            ..PortCounters::default()
        };
        let sum = add_counters(a, b);
        assert_eq!(
            (
                sum.rx_packets,
                sum.rx_ring_drops,
                sum.tx_packets,
                sum.tx_errors
            ),
            (13, 2, 24, 1)
        );
        assert_eq!(sum.rx_untagged, 6);
    }
}

/// Why the inside and outside interfaces of a bump in the wire were refused: what the daemon
/// sends on one would come back on the other, and it would forward its own frames for ever.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopError {
    /// Both names are one link (an `altname` of it, say).
    #[error(
        "[interfaces] inside {inside:?} and outside {outside:?} are the same interface: what the \
         daemon sends out would come back in; give two interfaces"
    )]
    SameInterface {
        /// `interfaces.inside`.
        inside: String,
        /// `interfaces.outside`.
        outside: String,
    },
    /// The two are the ends of one veth pair.
    #[error(
        "[interfaces] inside {inside:?} and outside {outside:?} are the two ends of one veth \
         pair: every frame sent on one arrives on the other, so the daemon would forward its own \
         frames in a loop; give the interfaces of two different links"
    )]
    VethPeers {
        /// `interfaces.inside`.
        inside: String,
        /// `interfaces.outside`.
        outside: String,
    },
    /// The two are ports of one bridge, or one is the bridge the other is a port of.
    #[error(
        "[interfaces] inside {inside:?} and outside {outside:?} are joined by bridge {bridge:?}: \
         it floods what the daemon sends on one to the other, a loop; take one of them out of the \
         bridge, or shape the bridge's port with attach mode instead"
    )]
    Bridged {
        /// `interfaces.inside`.
        inside: String,
        /// `interfaces.outside`.
        outside: String,
        /// The bridge's name (its index when it has none).
        bridge: String,
    },
}

/// Refuses inside and outside interfaces of `config` that are one link, veth peers, or joined by
/// one bridge ([`LoopError`]), in the calling thread's namespace. An interface that cannot be
/// asked (missing: opening its port says so) is not refused here.
pub fn refuse_loop(config: &Config) -> Result<(), LoopError> {
    let (inside, outside) = (&config.interfaces.inside, &config.interfaces.outside);
    let ties = |name: &str| crate::os::netlink::link_ties(name).ok().flatten();
    let (Some(a), Some(b)) = (ties(inside), ties(outside)) else {
        return Ok(());
    };
    loop_between(inside, &a, outside, &b)
}

/// The check of [`refuse_loop`] on the ties of `inside` (`a`) and `outside` (`b`).
fn loop_between(
    inside: &str,
    a: &crate::os::netlink::LinkTies,
    outside: &str,
    b: &crate::os::netlink::LinkTies,
) -> Result<(), LoopError> {
    let names = || (inside.to_string(), outside.to_string());
    if a.index == b.index {
        let (inside, outside) = names();
        return Err(LoopError::SameInterface { inside, outside });
    }
    if a.veth_peer == Some(b.index) || b.veth_peer == Some(a.index) {
        let (inside, outside) = names();
        return Err(LoopError::VethPeers { inside, outside });
    }
    let bridge = match (a.master, b.master) {
        (Some(x), Some(y)) if x == y => Some(x),
        (Some(x), _) if b.bridge && x == b.index => Some(x),
        (_, Some(y)) if a.bridge && y == a.index => Some(y),
        _ => None,
    };
    if let Some(index) = bridge {
        let (inside, outside) = names();
        let bridge = nix::net::if_::if_indextoname(index)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("of index {index}"));
        return Err(LoopError::Bridged {
            inside,
            outside,
            bridge,
        });
    }
    Ok(())
}

#[cfg(test)]
mod loop_tests {
    use super::{loop_between, LoopError};
    use crate::os::netlink::LinkTies;

    fn link(index: u32) -> LinkTies {
        LinkTies {
            index,
            ..LinkTies::default()
        }
    }

    #[test]
    fn two_unrelated_links_pass() {
        let (a, b) = (link(2), link(3));
        assert_eq!(loop_between("a", &a, "b", &b), Ok(()));
        let ported = LinkTies {
            master: Some(9),
            ..link(2)
        };
        let other = LinkTies {
            master: Some(10),
            ..link(3)
        };
        assert_eq!(loop_between("a", &ported, "b", &other), Ok(()));
        assert_eq!(loop_between("a", &ported, "b", &link(3)), Ok(()));
    }

    #[test]
    fn one_link_by_two_names_is_refused() {
        let err = loop_between("a", &link(2), "b", &link(2)).unwrap_err();
        assert!(matches!(err, LoopError::SameInterface { .. }));
    }

    #[test]
    fn veth_peers_are_refused_whichever_end_is_inside() {
        let a = LinkTies {
            veth_peer: Some(3),
            ..link(2)
        };
        let b = LinkTies {
            veth_peer: Some(2),
            ..link(3)
        };
        for (x, y) in [(&a, &b), (&b, &a), (&a, &link(3))] {
            let err = loop_between("x", x, "y", y).unwrap_err();
            assert!(matches!(err, LoopError::VethPeers { .. }), "{err}");
            assert!(err.to_string().contains("veth pair"), "{err}");
        }
    }

    #[test]
    fn ports_of_one_bridge_and_a_bridge_with_its_port_are_refused() {
        let port = |index| LinkTies {
            master: Some(7),
            ..link(index)
        };
        let bridge = LinkTies {
            bridge: true,
            ..link(7)
        };
        for (x, y) in [(port(2), port(3)), (port(2), bridge), (bridge, port(3))] {
            let err = loop_between("x", &x, "y", &y).unwrap_err();
            assert!(matches!(err, LoopError::Bridged { .. }), "{err}");
        }
    }
}
