//! Integration tests of `AfPacketPort` on a real veth pair between two throwaway network
//! namespaces. They need CAP_NET_ADMIN and CAP_NET_RAW (root); without them they print why and
//! pass. Each test builds its own namespaces, named after the process id and a counter, sends a
//! bounded number of frames (a few hundred, within 3 s) only to addresses inside them, and a Drop
//! guard deletes both namespaces — and with them the veth pair — even when an assertion fails.

mod common;

use common::{ip, spawn_in, unique_ids};
use metronome_io::{wait_readable, AfPacketConfig, AfPacketPort, FramePool, PacketPort, RxFrame};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// MAC addresses of the two veth ends (locally administered).
const MAC_A: [u8; 6] = [0x02, 0x6d, 0x74, 0x00, 0x00, 0x01];
const MAC_B: [u8; 6] = [0x02, 0x6d, 0x74, 0x00, 0x00, 0x02];
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);
/// IEEE 802 "local experimental" EtherType 1, for the raw frames of the TX test.
const ETHERTYPE_TEST: u16 = 0x88b5;
/// Longest a test waits for frames.
const DEADLINE: Duration = Duration::from_secs(3);

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Two namespaces joined by a veth pair `if_a` (in `ns_a`) — `if_b` (in `ns_b`), both up, with
/// addresses and static neighbour entries (no ARP). Dropping it deletes both namespaces, which
/// destroys the veth pair.
struct Topology {
    ns_a: String,
    ns_b: String,
    if_a: String,
    if_b: String,
}

impl Topology {
    /// Builds the topology, or `None` (after printing why) without the privilege to.
    fn create() -> Option<Topology> {
        let (pid, n) = unique_ids()?;
        let topo = Topology {
            ns_a: format!("mtio-{pid}-{n}-a"),
            ns_b: format!("mtio-{pid}-{n}-b"),
            if_a: format!("mta{pid}x{n}"),
            if_b: format!("mtb{pid}x{n}"),
        };
        // The capabilities are held: a failing `ip netns add` is a real failure, with its cause.
        let (a, b) = (&topo.ns_a, &topo.ns_b);
        let (ia, ib) = (&topo.if_a, &topo.if_b);
        let steps: [&[&str]; 10] = [
            &["netns", "add", a],
            &["netns", "add", b],
            &[
                "link",
                "add",
                ia,
                "netns",
                a,
                "address",
                &mac_str(MAC_A),
                "type",
                "veth",
                "peer",
                "name",
                ib,
                "netns",
                b,
                "address",
                &mac_str(MAC_B),
            ],
            &["-n", a, "addr", "add", "10.211.0.1/24", "dev", ia],
            &["-n", b, "addr", "add", "10.211.0.2/24", "dev", ib],
            &["-n", a, "link", "set", ia, "up"],
            &["-n", b, "link", "set", ib, "up"],
            &[
                "-n",
                a,
                "neigh",
                "replace",
                "10.211.0.2",
                "lladdr",
                &mac_str(MAC_B),
                "dev",
                ia,
            ],
            &[
                "-n",
                b,
                "neigh",
                "replace",
                "10.211.0.1",
                "lladdr",
                &mac_str(MAC_A),
                "dev",
                ib,
            ],
            &["-n", a, "link", "set", "lo", "up"],
        ];
        for step in steps {
            // `topo` is dropped on panic, deleting whatever was created.
            ip(step).unwrap_or_else(|e| panic!("building the test topology: {e}"));
        }
        Some(topo)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end inside it, and with it the pair.
        let _ = ip(&["netns", "del", &self.ns_a]);
        let _ = ip(&["netns", "del", &self.ns_b]);
    }
}

/// Runs `f` on a thread that has entered namespace `ns`; sockets it opens stay in `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in(ns, f).join().expect("namespace thread")
}

fn open_port(ns: &str, ifname: &str) -> AfPacketPort {
    let ifname = ifname.to_string();
    in_netns(ns, move || {
        AfPacketPort::open(&ifname, &AfPacketConfig::default())
            .unwrap_or_else(|e| panic!("open: {e}"))
    })
}

/// Receives on `port` until `want` frames satisfied `keep` or the deadline passes; frames not
/// kept (ARP, IPv6 neighbour discovery) are freed. Returns the kept frames' bytes.
fn collect(
    port: &mut AfPacketPort,
    pool: &mut FramePool,
    want: usize,
    keep: impl Fn(&[u8]) -> bool,
) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut batch = [RxFrame::default(); 64];
    let end = Instant::now() + DEADLINE;
    while got.len() < want && Instant::now() < end {
        let n = port.recv(pool, &mut batch).expect("recv");
        if n == 0 {
            let fd = port.poll_fd().expect("an AF_PACKET port has an fd");
            wait_readable(fd, Duration::from_millis(10)).expect("poll");
        }
        for f in &batch[..n] {
            let bytes = pool.frame(f.id);
            assert_eq!(bytes.len(), f.len as usize);
            if keep(bytes) {
                got.push(bytes.to_vec());
            }
            pool.free(f.id);
        }
    }
    got
}

/// The UDP payload of test datagram `seq`: recognisable and different for every `seq`.
fn udp_payload(seq: u32) -> Vec<u8> {
    let mut p = format!("metronome-io udp {} {seq:05} ", std::process::id()).into_bytes();
    p.extend((0..(seq % 700) as usize).map(|i| (i as u32 * 7 + seq) as u8));
    p
}

#[test]
fn rx_receives_kernel_udp_from_the_peer_namespace() {
    let Some(topo) = Topology::create() else {
        return;
    };
    let mut port = open_port(&topo.ns_a, &topo.if_a);
    let sock = in_netns(&topo.ns_b, || {
        UdpSocket::bind(SocketAddrV4::new(IP_B, 0)).expect("bind in ns b")
    });
    const N: u32 = 300;
    for seq in 0..N {
        sock.send_to(&udp_payload(seq), SocketAddrV4::new(IP_A, 9))
            .expect("send_to");
    }
    let mut pool = FramePool::new(1024, 2048);
    let frames = collect(&mut port, &mut pool, N as usize, |f| {
        // Ethernet to A, IPv4 (no options), UDP to port 9.
        f.len() > 42
            && f[..6] == MAC_A
            && f[12..14] == [0x08, 0x00]
            && f[23] == 17
            && f[36..38] == [0, 9]
    });
    assert_eq!(frames.len(), N as usize, "received {} of {N}", frames.len());
    for (seq, f) in frames.iter().enumerate() {
        // Intact bytes: headers as sent, payload byte for byte, in order.
        assert_eq!(&f[6..12], &MAC_B);
        assert_eq!(&f[26..30], &IP_B.octets());
        assert_eq!(&f[30..34], &IP_A.octets());
        assert_eq!(&f[42..], &udp_payload(seq as u32)[..]);
    }
    let c = port.counters();
    assert!(c.rx_packets >= u64::from(N));
    assert_eq!(
        (
            c.rx_ring_drops,
            c.rx_oversize,
            c.rx_truncated,
            c.rx_ring_errors
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(pool.in_use(), 0);
}

/// Raw test frame `seq` from A to B: untagged, or with an 802.1Q tag (VLAN `seq`) every 5th.
fn raw_frame(seq: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(1514);
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    if seq.is_multiple_of(5) {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&(seq as u16 & 0x0fff).to_be_bytes());
    }
    f.extend_from_slice(&ETHERTYPE_TEST.to_be_bytes());
    f.extend_from_slice(format!("metronome-io raw {} {seq:05} ", std::process::id()).as_bytes());
    let len = 60 + (seq as usize * 37) % 1440;
    while f.len() < len {
        f.push((f.len() as u32 ^ seq) as u8);
    }
    f
}

#[test]
fn tx_frames_arrive_intact_on_the_peer() {
    let Some(topo) = Topology::create() else {
        return;
    };
    let mut tx = open_port(&topo.ns_a, &topo.if_a);
    let mut rx = open_port(&topo.ns_b, &topo.if_b);
    const N: u32 = 200;
    let mut pool = FramePool::new(512, 2048);
    let ids: Vec<u32> = (0..N).map(|s| pool.store(&raw_frame(s)).unwrap()).collect();
    let mut sent = 0;
    let end = Instant::now() + DEADLINE;
    while sent < ids.len() && Instant::now() < end {
        sent += tx.send(&mut pool, &ids[sent..]).expect("send");
    }
    assert_eq!(sent, N as usize);
    assert_eq!(pool.in_use(), 0, "send frees every slot it consumes");

    let magic = format!("metronome-io raw {} ", std::process::id()).into_bytes();
    let frames = collect(&mut rx, &mut pool, N as usize, |f| {
        f.windows(magic.len())
            .take(24)
            .any(|w| w == magic.as_slice())
    });
    assert_eq!(frames.len(), N as usize, "received {} of {N}", frames.len());
    for (seq, f) in frames.iter().enumerate() {
        // Byte for byte, VLAN tags included (re-inserted from the ring's tp_vlan_tci).
        assert_eq!(f, &raw_frame(seq as u32), "frame {seq}");
    }
    let c = tx.counters();
    assert_eq!((c.tx_packets, c.tx_errors), (u64::from(N), 0));
    let c = rx.counters();
    assert_eq!((c.rx_ring_drops, c.rx_oversize, c.rx_truncated), (0, 0, 0));
}

#[test]
fn oversize_and_runt_frames_are_counted_not_fatal() {
    let Some(topo) = Topology::create() else {
        return;
    };
    let mut tx = open_port(&topo.ns_a, &topo.if_a);
    let mut pool = FramePool::new(4, 9000);
    // Longer than the 1500-byte MTU (EMSGSIZE) and shorter than an Ethernet header (EINVAL).
    let big = pool.store(&vec![0u8; 4000]).unwrap();
    let runt = pool.store(&[0u8; 6]).unwrap();
    let ok = pool.store(&raw_frame(1)).unwrap();
    assert_eq!(tx.send(&mut pool, &[big, runt, ok]).expect("send"), 3);
    let c = tx.counters();
    assert_eq!((c.tx_errors, c.tx_packets), (2, 1));
    assert_eq!(pool.in_use(), 0);
}

/// Frame `seq` of the origin-tag test from A to B: even ones with an 802.1Q tag of TCI
/// `origin_tci(seq)` (a priority code point set, and TCI 0 for frame 0), odd ones untagged;
/// and the frame as it should arrive, without the tag.
fn origin_frame(seq: u32) -> (Vec<u8>, Vec<u8>) {
    let mut body = Vec::new();
    body.extend_from_slice(&ETHERTYPE_TEST.to_be_bytes());
    body.extend_from_slice(
        format!("metronome-io origin {} {seq:05} ", std::process::id()).as_bytes(),
    );
    while body.len() < 46 + (seq as usize * 29) % 1400 {
        body.push((body.len() as u32 ^ seq) as u8);
    }
    let mut plain = [&MAC_B[..], &MAC_A[..]].concat();
    plain.extend_from_slice(&body);
    let mut sent = [&MAC_B[..], &MAC_A[..]].concat();
    if seq.is_multiple_of(2) {
        sent.extend_from_slice(&[0x81, 0x00]);
        sent.extend_from_slice(&origin_tci(seq).to_be_bytes());
    }
    sent.extend_from_slice(&body);
    (sent, plain)
}

/// The TCI of even frame `seq` of the origin-tag test.
fn origin_tci(seq: u32) -> u16 {
    if seq == 0 {
        0
    } else {
        0x2000 | seq as u16
    }
}

#[test]
fn an_origin_tag_port_keeps_the_tag_as_the_slot_origin_and_drops_untagged_frames() {
    let Some(topo) = Topology::create() else {
        return;
    };
    for vnet_hdr in [false, true] {
        let mut tx = open_port(&topo.ns_a, &topo.if_a);
        let ifname = topo.if_b.clone();
        let mut rx = in_netns(&topo.ns_b, move || {
            let config = AfPacketConfig {
                origin_tags: true,
                vnet_hdr,
                ..AfPacketConfig::default()
            };
            AfPacketPort::open(&ifname, &config).unwrap_or_else(|e| panic!("open: {e}"))
        });
        const N: u32 = 100;
        let mut pool = FramePool::with_large(512, 2048, 8, metronome_io::GSO_SLOT_SIZE);
        let ids: Vec<u32> = (0..N)
            .map(|s| pool.store(&origin_frame(s).0).unwrap())
            .collect();
        let mut sent = 0;
        let end = Instant::now() + DEADLINE;
        while sent < ids.len() && Instant::now() < end {
            sent += tx.send(&mut pool, &ids[sent..]).expect("send");
        }
        assert_eq!(sent, N as usize);

        let magic = format!("metronome-io origin {} ", std::process::id()).into_bytes();
        let mut got: Vec<(Vec<u8>, u16)> = Vec::new();
        let mut batch = [RxFrame::default(); 64];
        let end = Instant::now() + DEADLINE;
        while got.len() < (N / 2) as usize && Instant::now() < end {
            let n = rx.recv(&mut pool, &mut batch).expect("recv");
            if n == 0 {
                wait_readable(rx.poll_fd().unwrap(), Duration::from_millis(10)).expect("poll");
            }
            for f in &batch[..n] {
                let bytes = pool.frame(f.id);
                if bytes.windows(magic.len()).take(24).any(|w| w == magic) {
                    got.push((bytes.to_vec(), pool.origin(f.id)));
                }
                pool.free(f.id);
            }
        }
        assert_eq!(got.len(), (N / 2) as usize, "vnet_hdr {vnet_hdr}");
        for (k, (frame, origin)) in got.iter().enumerate() {
            // Only the tagged frames, in order, without their tag, with its TCI as the origin.
            let seq = 2 * k as u32;
            assert_eq!(
                frame,
                &origin_frame(seq).1,
                "vnet_hdr {vnet_hdr} frame {seq}"
            );
            assert_eq!(*origin, origin_tci(seq), "vnet_hdr {vnet_hdr} frame {seq}");
        }
        let c = rx.counters();
        // The untagged test frames, and any of the interface's own (IPv6 neighbour discovery).
        assert!(
            c.rx_untagged >= u64::from(N / 2),
            "vnet_hdr {vnet_hdr}: {c:?}"
        );
        assert_eq!((c.rx_oversize, c.rx_truncated), (0, 0));
        assert_eq!(pool.in_use(), 0);
    }
}

/// A transmit-only port (`receive = false`) learns that its interface went down only from a
/// refused send, which frees and counts the frame; its next `recv` reports it as the carrier
/// error the daemon's link handling looks for, once.
#[test]
fn a_transmit_only_port_reports_its_interface_going_down_on_the_next_recv() {
    let Some(topo) = Topology::create() else {
        return;
    };
    let ifname = topo.if_a.clone();
    let mut tx = in_netns(&topo.ns_a, move || {
        let config = AfPacketConfig {
            receive: false,
            promiscuous: false,
            ..AfPacketConfig::default()
        };
        AfPacketPort::open(&ifname, &config).unwrap_or_else(|e| panic!("open: {e}"))
    });
    let mut pool = FramePool::new(16, 2048);
    let mut rx = vec![RxFrame::default(); 4];
    assert_eq!(tx.recv(&mut pool, &mut rx).expect("nothing to report"), 0);
    ip(&["-n", &topo.ns_a, "link", "set", &topo.if_a, "down"]).unwrap();
    let id = pool.store(&raw_frame(1)).unwrap();
    assert_eq!(
        tx.send(&mut pool, &[id])
            .expect("a refused frame is consumed"),
        1
    );
    assert_eq!(pool.in_use(), 0, "the refused frame is freed");
    assert_eq!(tx.counters().tx_errors, 1);
    let err = tx
        .recv(&mut pool, &mut rx)
        .expect_err("the interface went down");
    assert!(err.to_string().contains("down"), "{err}");
    assert_eq!(tx.recv(&mut pool, &mut rx).expect("reported once"), 0);
}
