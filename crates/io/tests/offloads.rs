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

use metronome_io::{
    AfPacketConfig, AfPacketPort, FramePool, Offload, PacketPort, RxFrame, TxPiece,
    DEFAULT_SLOT_SIZE, GSO_SLOT_SIZE,
};
use metronome_packet::{GsoType, SuperFrame, VnetHdr};
use nix::sched::CloneFlags;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
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

static NEXT: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

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
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        // CAP_NET_ADMIN (12) and CAP_NET_RAW (13), capabilities(7).
        if eff & (0b11 << 12) != 0b11 << 12 {
            eprintln!("skipping: needs CAP_NET_ADMIN and CAP_NET_RAW");
            return None;
        }
        let (pid, n) = (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let t = Topology {
            snd: format!("mtoff-{pid}-{n}-s"),
            mid: format!("mtoff-{pid}-{n}-m"),
            rcv: format!("mtoff-{pid}-{n}-r"),
            s0: format!("mos{pid}x{n}"),
            m0: format!("mom{pid}x{n}"),
            m1: format!("mon{pid}x{n}"),
            r0: format!("mor{pid}x{n}"),
        };
        if let Err(e) = ip(&["netns", "add", &t.snd]) {
            eprintln!("skipping: cannot create a network namespace: {e}");
            return None;
        }
        let (s, m, r) = (t.snd.as_str(), t.mid.as_str(), t.rcv.as_str());
        let steps: Vec<Vec<&str>> = vec![
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
            vec!["-n", s, "addr", "add", "10.212.0.1/24", "dev", &t.s0],
            vec!["-n", r, "addr", "add", "10.212.0.2/24", "dev", &t.r0],
            vec![
                "-n",
                s,
                "neigh",
                "replace",
                "10.212.0.2",
                "lladdr",
                MAC_R,
                "dev",
                &t.s0,
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
                &t.r0,
            ],
            vec!["-n", s, "link", "set", &t.s0, "up"],
            vec!["-n", m, "link", "set", &t.m0, "up"],
            vec!["-n", m, "link", "set", &t.m1, "up"],
            vec!["-n", r, "link", "set", &t.r0, "up"],
        ];
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

/// Runs `f` on a new thread inside namespace `ns`.
fn spawn_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open the namespace");
        nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
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
}

/// Moves frames `a -> b` and `b -> a` until `stop`; frames the device refused as busy wait in
/// `pending` and go first next time. With `cut = Some(n)`, TCP super-frames going `a -> b` are
/// cut into pieces of at most `n` segments and sent with `send_pieces` (headers from a scratch
/// buffer, payload straight from the pool slot).
fn forward(
    a: &mut AfPacketPort,
    b: &mut AfPacketPort,
    stop: &AtomicBool,
    cut: Option<u32>,
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
                match cut.filter(|_| dir == 0 && hdr.is_gso()) {
                    Some(max) => {
                        seen.pieces += send_cut(tx, pool.frame(f.id), &hdr, max);
                        pool.free(f.id);
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
            pool.free(id);
        }
    }
    seen
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
    let Some(seen) = transfer_through_forwarder(Sender::Tso, Some(3)) else {
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
fn transfer_through_forwarder(source: Sender, cut: Option<u32>) -> Option<Seen> {
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
