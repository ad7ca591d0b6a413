//! Real kernel TCP with its default offloads through two `vnet_hdr` AF_PACKET ports: a sender
//! namespace (TSO/GSO on, the veth default), a middle namespace where a plain forwarding loop
//! moves frames between two `AfPacketPort`s opened with `vnet_hdr`, and a receiver namespace.
//! Checks that TCP super-frames (longer than an MTU frame, `gso_type` TCPV4) come through with
//! their header, that the transfer arrives intact without any checksum computed in user space
//! (the header's `NEEDS_CSUM` goes back out with the frame), and that GRO can be switched on and
//! off on a veth and read back.
//!
//! Needs CAP_NET_ADMIN and CAP_NET_RAW (root); without them it prints why and passes. Namespaces
//! and interfaces are named after the process id and a counter; the transfer is bounded (4 MiB,
//! socket timeouts of 20 s); a Drop guard deletes the three namespaces, and with them the veth
//! pairs, even when an assertion fails.

mod common;

use common::{ip, spawn_in, unique_ids};
use metronome_io::{
    AfPacketConfig, AfPacketPort, FramePool, Offload, PacketPort, RxFrame, TxPiece,
    DEFAULT_SLOT_SIZE, GSO_SLOT_SIZE,
};
use metronome_packet::{GsoType, SuperFrame, VnetHdr};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MAC_S: &str = "02:6d:74:00:01:01";
const MAC_R: &str = "02:6d:74:00:01:02";
const IP_S: Ipv4Addr = Ipv4Addr::new(10, 212, 0, 1);
const IP_R: Ipv4Addr = Ipv4Addr::new(10, 212, 0, 2);
/// Bytes the TCP transfer carries: enough for the congestion window to open and TCP to build
/// super-frames, small enough to finish quickly.
const TRANSFER: usize = 4 << 20;
/// Socket timeouts: a stalled path fails the test instead of hanging it.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(20);
/// Ethernet + IPv4 + TCP frame of a full 1500-byte MTU packet.
const MTU_FRAME: usize = 1514;

/// Sender `s0` (ns `snd`) — `m0` (ns `mid`), `m1` (ns `mid`) — `r0` (ns `rcv`): a bump in the
/// wire. Dropping it deletes the namespaces.
struct Topology {
    snd: String,
    mid: String,
    rcv: String,
    s0: String,
    m0: String,
    m1: String,
    r0: String,
}

impl Topology {
    fn create() -> Option<Topology> {
        let (pid, n) = unique_ids()?;
        let t = Topology {
            snd: format!("mtoff-{pid}-{n}-s"),
            mid: format!("mtoff-{pid}-{n}-m"),
            rcv: format!("mtoff-{pid}-{n}-r"),
            s0: format!("mos{pid}x{n}"),
            m0: format!("mom{pid}x{n}"),
            m1: format!("mon{pid}x{n}"),
            r0: format!("mor{pid}x{n}"),
        };
        // The capabilities are held: a failing `ip netns add` is a real failure, with its cause.
        if let Err(e) = ip(&["netns", "add", &t.snd]) {
            panic!("cannot create a network namespace: {e}");
        }
        let (s, m, r) = (t.snd.as_str(), t.mid.as_str(), t.rcv.as_str());
        let mut steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", m],
            vec!["netns", "add", r],
            vec![
                "link", "add", &t.s0, "netns", s, "address", MAC_S, "type", "veth", "peer", "name",
                &t.m0, "netns", m,
            ],
            vec![
                "link", "add", &t.r0, "netns", r, "address", MAC_R, "type", "veth", "peer", "name",
                &t.m1, "netns", m,
            ],
        ];
        let (ep_s, ep_r) = (t.s0.as_str(), t.r0.as_str());
        steps.extend([
            vec!["-n", s, "addr", "add", "10.212.0.1/24", "dev", ep_s],
            vec!["-n", r, "addr", "add", "10.212.0.2/24", "dev", ep_r],
            vec![
                "-n",
                s,
                "neigh",
                "replace",
                "10.212.0.2",
                "lladdr",
                MAC_R,
                "dev",
                ep_s,
            ],
            vec![
                "-n",
                r,
                "neigh",
                "replace",
                "10.212.0.1",
                "lladdr",
                MAC_S,
                "dev",
                ep_r,
            ],
            vec!["-n", s, "link", "set", &t.s0, "up"],
            vec!["-n", m, "link", "set", &t.m0, "up"],
            vec!["-n", m, "link", "set", &t.m1, "up"],
            vec!["-n", r, "link", "set", &t.r0, "up"],
        ]);
        for step in steps {
            ip(&step).unwrap_or_else(|e| panic!("building the test topology: {e}"));
        }
        Some(t)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.snd, &self.mid, &self.rcv] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Byte `i` of the transfer.
fn pattern(i: usize) -> u8 {
    (i * 7 % 251) as u8
}

/// What the forwarding loop saw.
#[derive(Debug, Default)]
struct Seen {
    frames: u64,
    /// Frames longer than an MTU frame with a TCPV4 GSO header.
    tcp4_super_frames: u64,
    longest: usize,
    /// Frames whose header asks for checksum completion (left to the kernel).
    needs_csum: u64,
    /// Pieces sent with `send_pieces`.
    pieces: u64,
    /// Frames reported `csum_not_ready` (the loop fills in nothing).
    csum_not_ready: u64,
    /// NEEDS_CSUM TCP frames whose `csum_start` was checked.
    csum_start_checked: u64,
}

/// Moves frames `a -> b` and `b -> a` until `stop`; frames the device refused as busy wait in
/// `pending` and go first next time. With `cut = Some(Cut::Direct(n))`, TCP super-frames going
/// `a -> b` are cut into pieces of at most `n` segments and sent with `send_pieces` (headers from
/// a scratch buffer, payload straight from the pool slot); with `Cut::Pool(n)` the cut is
/// recorded with the slot (`FramePool::set_cut`) and the piece ids go to `PacketPort::send`, which
/// writes their headers itself and frees the slot after the last piece.
fn forward(
    a: &mut AfPacketPort,
    b: &mut AfPacketPort,
    stop: &AtomicBool,
    cut: Option<Cut>,
) -> Seen {
    let mut pool = FramePool::with_large(2048, DEFAULT_SLOT_SIZE, 64, GSO_SLOT_SIZE);
    let mut seen = Seen::default();
    let mut pending: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut batch = [RxFrame::default(); 64];
    while !stop.load(Ordering::Relaxed) {
        let mut moved = 0;
        for (dir, pend) in pending.iter_mut().enumerate() {
            let (rx, tx) = if dir == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            let n = rx.recv(&mut pool, &mut batch).expect("recv");
            for f in &batch[..n] {
                let hdr = pool.vnet(f.id);
                seen.frames += 1;
                seen.longest = seen.longest.max(f.len as usize);
                if f.len as usize > MTU_FRAME && hdr.gso_type == GsoType::TcpV4 {
                    seen.tcp4_super_frames += 1;
                }
                seen.needs_csum += u64::from(hdr.needs_csum());
                // The header carries the partial checksum; the port leaves nothing to fix.
                assert!(!f.csum_not_ready || !hdr.needs_csum());
                seen.csum_not_ready += u64::from(f.csum_not_ready);
                if hdr.needs_csum() {
                    check_csum_start(pool.frame(f.id), &hdr);
                    seen.csum_start_checked += 1;
                }
                match cut.filter(|_| dir == 0 && hdr.is_gso()) {
                    Some(Cut::Direct(max)) => {
                        seen.pieces += send_cut(tx, pool.frame(f.id), &hdr, max);
                        pool.free(f.id);
                    }
                    Some(Cut::Pool(max)) => {
                        let sf = SuperFrame::parse(pool.frame(f.id), &hdr).expect("TCP");
                        let count = sf.pieces(max);
                        pool.set_cut(f.id, max, count);
                        pend.extend((0..count).map(|k| metronome_io::piece::encode(f.id, k)));
                        seen.pieces += u64::from(count);
                    }
                    None => pend.push(f.id),
                }
            }
            let sent = tx.send(&mut pool, pend).expect("send");
            pend.drain(..sent);
            moved += n + sent;
        }
        if moved == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    for ids in &pending {
        for &id in ids {
            pool.free_entry(id);
        }
    }
    // Every slot a receive took (the large slots it borrowed included) is back.
    assert_eq!(pool.in_use(), 0);
    seen
}

/// Asserts that a NEEDS_CSUM TCP frame's `csum_start` is its TCP header and `csum_offset` the
/// TCP checksum field.
fn check_csum_start(frame: &[u8], hdr: &VnetHdr) {
    let Some(ip) = metronome_packet::parse(frame).ip().copied() else {
        panic!("NEEDS_CSUM on a frame that does not parse as IP");
    };
    assert_eq!(ip.tuple.protocol, 6, "only TCP in these tests");
    let l3 = usize::from(ip.ip_offset);
    let l4 = if frame[l3] >> 4 == 4 {
        l3 + usize::from(frame[l3] & 0x0f) * 4
    } else {
        l3 + 40
    };
    assert_eq!(
        (usize::from(hdr.csum_start), hdr.csum_offset),
        (l4, 16),
        "{hdr:?}"
    );
}

/// How the forwarder cuts super-frames ([`forward`]).
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Into pieces of at most this many segments, sent with `send_pieces`.
    Direct(u32),
    /// Into pieces of at most this many segments, recorded with the slot and sent by
    /// `PacketPort::send`.
    Pool(u32),
}

/// Cuts the super-frame `frame` into pieces of at most `max` segments and sends them all
/// (retrying while the device is busy); returns how many pieces went out.
fn send_cut(tx: &mut AfPacketPort, frame: &[u8], hdr: &VnetHdr, max: u32) -> u64 {
    let sf = SuperFrame::parse(frame, hdr).expect("a TCP super-frame");
    let mut scratch = [[0u8; 128]; 64];
    let count = sf.pieces(max).min(64);
    assert_eq!(count, sf.pieces(max), "at most 64 pieces in this test");
    let mut pieces = Vec::new();
    for (k, s) in (0..count).zip(scratch.iter_mut()) {
        let p = sf.piece(frame, k, max, s).expect("piece");
        pieces.push((p.vnet, p.header_len, p.payload));
    }
    let tx_pieces: Vec<TxPiece<'_>> = pieces
        .iter()
        .zip(&scratch)
        .map(|((vnet, h, payload), s)| TxPiece {
            vnet: *vnet,
            headers: &s[..*h],
            payload: &frame[payload.clone()],
        })
        .collect();
    let mut done = 0;
    while done < tx_pieces.len() {
        done += tx.send_pieces(&tx_pieces[done..]).expect("send_pieces");
    }
    tx_pieces.len() as u64
}

#[test]
fn tcp_super_frames_cross_two_vnet_hdr_ports_intact() {
    let Some(seen) = transfer_through_forwarder(Sender::Tso, None) else {
        return;
    };
    assert_eq!(seen.pieces, 0);
}

/// The same transfer with every super-frame cut into pieces of at most 3 segments on its way
/// through: the receiver's TCP accepts the pieces (headers rewritten by `SuperFrame::piece`,
/// checksums completed by the kernel from the pieces' pseudo-header sums).
#[test]
fn tcp_super_frames_cut_into_pieces_arrive_intact() {
    let Some(seen) = transfer_through_forwarder(Sender::Tso, Some(Cut::Direct(3))) else {
        return;
    };
    assert!(seen.pieces > seen.tcp4_super_frames, "{seen:?}");
}

/// The same with the cut kept by the pool and the pieces sent by `PacketPort::send` itself (the
/// daemon's way): the transfer arrives intact and every slot is freed after its last piece.
#[test]
fn pieces_sent_by_the_port_from_the_pool_arrive_intact() {
    let Some(seen) = transfer_through_forwarder(Sender::Tso, Some(Cut::Pool(3))) else {
        return;
    };
    assert!(seen.pieces > seen.tcp4_super_frames, "{seen:?}");
}

/// The sender sends MTU frames (TSO and GSO off) and GRO on the forwarder's ingress veth merges
/// them: the super-frames the port receives are GRO's.
#[test]
fn gro_super_frames_at_the_ingress_cross_intact() {
    let Some(seen) = transfer_through_forwarder(Sender::MtuWithGroAtIngress, None) else {
        return;
    };
    assert_eq!(seen.pieces, 0);
}

/// Control for the GRO test: with TSO, GSO and GRO off every frame is an MTU frame.
#[test]
fn without_offloads_no_super_frame_arrives() {
    let Some(seen) = transfer_through_forwarder(Sender::Mtu, None) else {
        return;
    };
    assert_eq!(seen.tcp4_super_frames, 0, "{seen:?}");
    assert!(seen.longest <= MTU_FRAME, "{seen:?}");
}

/// A TCP/IPv4 super-frame behind an 802.1Q tag, sent with a GSO header from a `vnet_hdr` port
/// in the sender namespace (raw: no VLAN interface needed), crosses the veth unsegmented; the
/// kernel strips the tag before the receiving port sees the frame, the port re-inserts it and
/// moves `csum_start` with it. The frame arrives byte for byte, with the header it was sent
/// with.
#[test]
fn tagged_super_frames_keep_their_bytes_and_checksum_offsets() {
    let Some(t) = Topology::create() else {
        return;
    };
    let config = AfPacketConfig {
        vnet_hdr: true,
        ..AfPacketConfig::DEFAULT
    };
    let s0 = t.s0.clone();
    let mut tx = spawn_in(&t.snd, move || {
        AfPacketPort::open(&s0, &config).expect("open s0")
    })
    .join()
    .unwrap();
    let m0 = t.m0.clone();
    let mut rx = spawn_in(&t.mid, move || {
        AfPacketPort::open(&m0, &config).expect("open m0")
    })
    .join()
    .unwrap();
    let (frame, hdr) = tagged_super_frame(20_000, 1000);
    let piece = TxPiece {
        vnet: hdr,
        headers: &frame[..58],
        payload: &frame[58..],
    };
    assert_eq!(tx.send_pieces(&[piece]).expect("send"), 1);
    let mut pool = FramePool::with_large(64, DEFAULT_SLOT_SIZE, 4, GSO_SLOT_SIZE);
    let mut batch = [RxFrame::default(); 64];
    let mut got = None;
    for _ in 0..3000 {
        let n = rx.recv(&mut pool, &mut batch).expect("recv");
        for f in &batch[..n] {
            if pool.frame(f.id).len() > MTU_FRAME {
                got = Some((pool.frame(f.id).to_vec(), pool.vnet(f.id)));
            }
            pool.free(f.id);
        }
        if got.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (bytes, vnet) = got.expect("the tagged super-frame");
    assert_eq!(bytes, frame);
    assert_eq!(
        (
            vnet.gso_type,
            vnet.gso_size,
            vnet.csum_start,
            vnet.csum_offset
        ),
        (GsoType::TcpV4, 1000, 38, 16)
    );
    assert!(vnet.needs_csum());
    check_csum_start(&bytes, &vnet);
    assert_eq!(rx.counters().rx_vnet_errors, 0);
}

/// Ethernet + 802.1Q (VLAN 42) + IPv4 + TCP (20 bytes) + `payload` bytes to the receiver's
/// MAC, its TCP checksum partial (the pseudo-header sum), with its TCPV4 GSO header.
fn tagged_super_frame(payload: usize, gso_size: u16) -> (Vec<u8>, VnetHdr) {
    let mac = |m: &str| -> Vec<u8> {
        m.split(':')
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    };
    let mut f = mac(MAC_R);
    f.extend(mac(MAC_S));
    f.extend_from_slice(&[0x81, 0x00, 0x00, 42, 0x08, 0x00]);
    let ip_len = (20 + 20 + payload) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&IP_S.octets());
    f.extend_from_slice(&IP_R.octets());
    let sum = metronome_packet::ipv4_header_checksum(&f[18..38]).unwrap();
    f[28..30].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10]);
    f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    f.extend((0..payload).map(pattern));
    // Pseudo-header sum: addresses, protocol 6, TCP length; folded, not complemented.
    let words = f[30..38]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>()
        + 6
        + (20 + payload) as u32;
    let folded = (words & 0xffff) + (words >> 16);
    let folded = ((folded & 0xffff) + (folded >> 16)) as u16;
    f[54..56].copy_from_slice(&folded.to_be_bytes());
    let hdr = VnetHdr {
        flags: metronome_packet::gso::FLAG_NEEDS_CSUM,
        gso_type: GsoType::TcpV4,
        ecn: false,
        hdr_len: 58,
        gso_size,
        csum_start: 38,
        csum_offset: 16,
    };
    (f, hdr)
}

/// Where the super-frames come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sender {
    /// The sender's TCP builds them (TSO and GSO on at `s0`, the veth default).
    Tso,
    /// TSO and GSO off at `s0`, GRO on at the forwarder's ingress `m0`.
    MtuWithGroAtIngress,
    /// TSO and GSO off at `s0`, GRO off at `m0`: no super-frames.
    Mtu,
}

/// Runs the 4 MiB transfer through the forwarder (cutting super-frames as `cut` says), checks
/// the transfer and the ports' counters, and returns what the forwarder saw; `None` without
/// the privilege to build the topology.
fn transfer_through_forwarder(source: Sender, cut: Option<Cut>) -> Option<Seen> {
    let t = Topology::create()?;
    let tso = source == Sender::Tso;
    let s0 = t.s0.clone();
    let offloads = spawn_in(&t.snd, move || {
        Offload::Tso.set(&s0, tso).and(Offload::Gso.set(&s0, tso))?;
        Ok::<_, metronome_io::PortError>((Offload::Tso.get(&s0)?, Offload::Gso.get(&s0)?))
    });
    assert_eq!(offloads.join().unwrap().expect("ethtool"), (tso, tso));
    let m0 = t.m0.clone();
    let gro_on = source == Sender::MtuWithGroAtIngress;
    let gro = spawn_in(&t.mid, move || {
        Offload::Gro.set(&m0, gro_on)?;
        Offload::Gro.get(&m0)
    });
    assert_eq!(gro.join().unwrap().expect("ethtool"), gro_on);

    let stop = Arc::new(AtomicBool::new(false));
    let (m0, m1, halt) = (t.m0.clone(), t.m1.clone(), stop.clone());
    let forwarder = spawn_in(&t.mid, move || {
        let config = AfPacketConfig {
            vnet_hdr: true,
            ..AfPacketConfig::DEFAULT
        };
        let mut a = AfPacketPort::open(&m0, &config).expect("open m0");
        let mut b = AfPacketPort::open(&m1, &config).expect("open m1");
        assert!(a.vnet_hdr() && b.vnet_hdr());
        let seen = forward(&mut a, &mut b, &halt, cut);
        (seen, a.counters(), b.counters())
    });

    let listener = spawn_in(&t.rcv, || {
        TcpListener::bind(SocketAddrV4::new(IP_R, 5201)).expect("bind")
    })
    .join()
    .unwrap();
    let receiver = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        conn.set_read_timeout(Some(SOCKET_TIMEOUT)).unwrap();
        let mut got = Vec::with_capacity(TRANSFER);
        conn.read_to_end(&mut got).map(|_| got)
    });
    let sender = spawn_in(&t.snd, || {
        let to = SocketAddrV4::new(IP_R, 5201).into();
        let mut conn = TcpStream::connect_timeout(&to, SOCKET_TIMEOUT)?;
        conn.set_write_timeout(Some(SOCKET_TIMEOUT))?;
        assert_eq!(conn.local_addr()?.ip(), IP_S);
        let data: Vec<u8> = (0..TRANSFER).map(pattern).collect();
        conn.write_all(&data)?;
        conn.shutdown(std::net::Shutdown::Write)
    });
    let sent = sender.join().unwrap();
    let received = receiver.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (seen, c0, c1) = forwarder.join().unwrap();
    eprintln!("forwarder saw {seen:?}\nm0 {c0:?}\nm1 {c1:?}");

    sent.expect("the sender's transfer");
    let got = received.expect("the receiver's transfer");
    assert_eq!(got.len(), TRANSFER);
    assert!(got.iter().enumerate().all(|(i, &b)| b == pattern(i)));
    if source != Sender::Mtu {
        assert!(
            seen.tcp4_super_frames > 0,
            "no TCPV4 super-frame seen: {seen:?}"
        );
        assert!(seen.longest > MTU_FRAME);
    }
    assert!(seen.needs_csum > 0);
    assert_eq!(seen.csum_not_ready, 0);
    for c in [c0, c1] {
        assert_eq!(
            (
                c.rx_no_large_slot,
                c.rx_gso_truncated,
                c.rx_vnet_errors,
                c.rx_oversize,
                c.tx_errors
            ),
            (0, 0, 0, 0, 0),
            "{c:?}"
        );
    }
    Some(seen)
}

#[test]
fn gro_switches_on_and_off_on_a_veth() {
    let Some(t) = Topology::create() else {
        return;
    };
    let r0 = t.r0.clone();
    let states = spawn_in(&t.rcv, move || {
        let mut states = Vec::new();
        for on in [true, false, true] {
            Offload::Gro.set(&r0, on)?;
            states.push(Offload::Gro.get(&r0)?);
        }
        Ok::<_, metronome_io::PortError>(states)
    });
    assert_eq!(
        states.join().unwrap().expect("ethtool"),
        [true, false, true]
    );
}

/// A TCP super-frame sent from a `vnet_hdr` port (with the default `PACKET_QDISC_BYPASS`) out a
/// veth whose TSO and GSO are off leaves as its segments: the kernel segments it in software
/// (the bypass path alone would drop it: `ENOBUFS`, the veth's `tx_dropped`). Both ways of
/// sending are checked, `send_pieces` and `PacketPort::send` from the pool; the receiving port
/// gets MTU-sized segments whose payloads re-assemble to the super-frame's.
#[test]
fn super_frames_leave_a_veth_without_tso_as_segments() {
    let Some(t) = Topology::create() else {
        return;
    };
    let config = AfPacketConfig {
        vnet_hdr: true,
        ..AfPacketConfig::DEFAULT
    };
    assert!(config.qdisc_bypass);
    let open_s0 = |t: &Topology| {
        let s0 = t.s0.clone();
        spawn_in(&t.snd, move || {
            AfPacketPort::open(&s0, &config).expect("open s0")
        })
        .join()
        .unwrap()
    };
    // Opened while the veth has TSO: the port learns of the change from the first refusal.
    let mut tx = open_s0(&t);
    let s0 = t.s0.clone();
    let offloads = spawn_in(&t.snd, move || {
        Offload::Tso
            .set(&s0, false)
            .and(Offload::Gso.set(&s0, false))?;
        Ok::<_, metronome_io::PortError>((Offload::Tso.get(&s0)?, Offload::Gso.get(&s0)?))
    });
    assert_eq!(offloads.join().unwrap().expect("ethtool"), (false, false));
    // Opened without TSO: the port knows from the start.
    let mut tx_late = open_s0(&t);
    let m0 = t.m0.clone();
    let mut rx = spawn_in(&t.mid, move || {
        AfPacketPort::open(&m0, &config).expect("open m0")
    })
    .join()
    .unwrap();
    const PAYLOAD: usize = 5000;
    const MSS: u16 = 1000;
    let (frame, hdr) = tagged_super_frame(PAYLOAD, MSS);
    let piece = TxPiece {
        vnet: hdr,
        headers: &frame[..58],
        payload: &frame[58..],
    };
    assert_eq!(tx.send_pieces(&[piece]).expect("send_pieces"), 1);
    let mut tx_pool = FramePool::with_large(4, DEFAULT_SLOT_SIZE, 1, GSO_SLOT_SIZE);
    let id = tx_pool.store(&frame).expect("a large slot");
    tx_pool.set_vnet(id, hdr);
    assert_eq!(tx_late.send(&mut tx_pool, &[id]).expect("send"), 1);
    for mut port in [tx, tx_late] {
        let c = port.counters();
        assert_eq!(
            (c.tx_packets, c.tx_errors, c.tx_gso_software),
            (1, 0, 1),
            "{c:?}"
        );
    }

    // Each super-frame arrives as 5 segments of 1000 payload bytes behind 58 header bytes.
    let mut pool = FramePool::with_large(64, DEFAULT_SLOT_SIZE, 4, GSO_SLOT_SIZE);
    let mut batch = [RxFrame::default(); 64];
    let mut payload = Vec::new();
    let mut segments = 0;
    for _ in 0..3000 {
        let n = rx.recv(&mut pool, &mut batch).expect("recv");
        for f in &batch[..n] {
            let bytes = pool.frame(f.id);
            // Only the test's frames: TCP from port 40000 behind the VLAN tag.
            if bytes.len() > 58 && bytes[12..14] == [0x81, 0x00] && bytes[38..40] == [0x9c, 0x40] {
                assert!(bytes.len() <= MTU_FRAME + 4, "{}", bytes.len());
                assert!(!pool.vnet(f.id).is_gso());
                payload.extend_from_slice(&bytes[58..]);
                segments += 1;
            }
            pool.free(f.id);
        }
        if segments >= 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(segments, 10);
    let one: Vec<u8> = (0..PAYLOAD).map(pattern).collect();
    assert_eq!(payload, [one.clone(), one].concat());
}
