//! The daemon's early filter (`metronome_daemon::os::early`) in a real kernel: the receiving
//! socket of the shaper's inside veth runs it, frames are sent from the sender's namespace, and
//! what the socket receives is counted by class. Classes of 1 Mbit/s with a queue bound of
//! 10 000 bytes, frames of 1 000 bytes (8 ms each at the rate), `[daemon] early_multiple` at its
//! default of 2:
//!
//! * a burst of 200 frames into a limited class: about the queue bound gets through (10 frames
//!   and one), the rest is refused and counted `over_rate` under its class; a class without a
//!   rate takes all 200; an IPv6 class the same as an IPv4 one;
//! * malformed (IPv4 with a bad version) and non-IP frames share a bucket of the default
//!   class's rate and depth: refused as `malformed` and `non_ip` beyond it;
//! * a steady 3 Mbit/s into a limited class for 1 s: at most twice its rate reaches the socket;
//!   with the loop declared overloaded, at most once its rate, and what the class sends within
//!   its rate still gets through (the order of `set_overloaded`: classes within their rates
//!   first).
//!
//! The rate bounds are upper bounds from the bucket's definition (a slower sender only sends
//! less); the lower bounds take the smaller of what was sent and what the rate allows.
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1).

use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_daemon::os::early::EarlyFilter;
use metronome_engine::engine::Engine;
use metronome_io::{AfPacketConfig, AfPacketPort, FramePool, PacketPort, RxFrame};
use metronome_testbed::flood::frames::mac_of;
use metronome_testbed::netns::{bump_in_the_wire_or_skip, Topology};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of every frame sent.
const FRAME: usize = 1000;
/// The limited classes' rate, bytes per second (1 Mbit/s).
const RATE_BYTES: f64 = 125_000.0;
/// Their queue bound, bytes.
const QUEUE: usize = 10_000;

const CONFIG: &str = r#"
[interfaces]
inside = "in0"
outside = "out0"

[default]
rate = "1mbit"
queue = { bytes = 10000 }

[[class]]
name = "burst"
match = { protocol = "udp", dst_port = "7001" }
rate = "1mbit"
queue = { bytes = 10000 }

[[class]]
name = "free"
match = { protocol = "udp", dst_port = "7002" }

[[class]]
name = "steady"
match = { protocol = "udp", dst_port = "7003" }
rate = "1mbit"
queue = { bytes = 10000 }

[[class]]
name = "held"
match = { protocol = "udp", dst_port = "7004" }
rate = "1mbit"
queue = { bytes = 10000 }

[[class]]
name = "six"
match = { dst = "fd00:e::/64" }
rate = "1mbit"
queue = { bytes = 10000 }
"#;

/// The Ethernet header from `src` to `dst` with `ether_type`.
fn ethernet(dst: [u8; 6], src: [u8; 6], ether_type: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ether_type.to_be_bytes());
    f
}

/// A UDP datagram's header to `port` and its payload, `len` bytes together.
fn udp(port: u16, len: usize) -> Vec<u8> {
    let mut u = Vec::with_capacity(len);
    u.extend_from_slice(&40000u16.to_be_bytes());
    u.extend_from_slice(&port.to_be_bytes());
    u.extend_from_slice(&(len as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.resize(len, 0x5a);
    u
}

/// A 1 000-byte IPv4 UDP frame to `port`.
fn v4(macs: ([u8; 6], [u8; 6]), port: u16) -> Vec<u8> {
    let mut f = ethernet(macs.0, macs.1, 0x0800);
    let total = FRAME - 14;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip.extend_from_slice(&Ipv4Addr::new(10, 9, 0, 1).octets());
    ip.extend_from_slice(&Ipv4Addr::new(10, 9, 0, 2).octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp(port, total - 20));
    f
}

/// A 1 000-byte IPv6 UDP frame to fd00:e::2.
fn v6(macs: ([u8; 6], [u8; 6])) -> Vec<u8> {
    let mut f = ethernet(macs.0, macs.1, 0x86dd);
    let payload = FRAME - 14 - 40;
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(payload as u16).to_be_bytes());
    ip.extend_from_slice(&[17, 64]);
    ip.extend_from_slice(&"fd00:e::1".parse::<Ipv6Addr>().unwrap().octets());
    ip.extend_from_slice(&"fd00:e::2".parse::<Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp(7005, payload));
    f
}

/// What the receiving socket counts a frame as: the UDP port of an IPv4 frame, 6 for IPv6 to
/// the test's prefix, 1 for the malformed frames, 2 for the non-IP ones.
fn kind(frame: &[u8]) -> Option<u16> {
    let ether = u16::from_be_bytes([frame[12], frame[13]]);
    match ether {
        0x0800 if frame[14] == 0x45 => Some(u16::from_be_bytes([frame[36], frame[37]])),
        0x0800 => Some(1),
        0x86dd if frame[38] == 0xfd && frame[39] == 0 => Some(6),
        0x88b5 => Some(2),
        _ => None,
    }
}

/// The sender's port, the filtered port and the filter.
struct Rig {
    topo: Topology,
    send: AfPacketPort,
    recv: AfPacketPort,
    pool: FramePool,
    filter: Arc<EarlyFilter>,
    macs: ([u8; 6], [u8; 6]),
}

fn rig(name: &str, prefix: &str) -> Option<Rig> {
    let topo = bump_in_the_wire_or_skip(prefix, name)?;
    let config = Config::from_toml_str(CONFIG, "early.toml").unwrap();
    let loading = Instant::now();
    let filter = Arc::new(EarlyFilter::load(&config).unwrap().expect("on by default"));
    println!("{name}: the filter loaded in {:?}", loading.elapsed());
    let engine = Engine::new(&config.engine(), 4096);
    filter.sync(&engine, &Metrics::new());
    let fd = filter.program_fd();
    let inside = topo.shaper_in.clone();
    let recv = topo
        .shaper
        .run(move || {
            let af = AfPacketConfig {
                socket_filter: Some(fd),
                ..AfPacketConfig::default()
            };
            AfPacketPort::open(&inside, &af)
        })
        .unwrap()
        .unwrap();
    let sender_if = topo.sender_if.clone();
    let send = topo
        .sender
        .run(move || {
            let af = AfPacketConfig {
                promiscuous: false,
                ..AfPacketConfig::default()
            };
            AfPacketPort::open(&sender_if, &af)
        })
        .unwrap()
        .unwrap();
    let dst = mac_of(&topo.shaper, &topo.shaper_in).unwrap();
    let src = mac_of(&topo.sender, &topo.sender_if).unwrap();
    Some(Rig {
        topo,
        send,
        recv,
        pool: FramePool::new(4096, 2048),
        filter,
        macs: (dst, src),
    })
}

impl Rig {
    /// Sends `frames` in one batch.
    fn send(&mut self, frames: &[Vec<u8>]) {
        for chunk in frames.chunks(32) {
            let ids: Vec<u32> = chunk.iter().map(|f| self.pool.store(f).unwrap()).collect();
            let mut sent = 0;
            while sent < ids.len() {
                sent += self.send.send(&mut self.pool, &ids[sent..]).unwrap();
            }
        }
    }

    /// Receives until the socket is quiet for 100 ms; the frames counted by [`kind`].
    fn received(&mut self) -> std::collections::HashMap<u16, u64> {
        let mut seen = std::collections::HashMap::new();
        let mut rx = vec![RxFrame::default(); 64];
        let mut quiet = Instant::now();
        while quiet.elapsed() < Duration::from_millis(100) {
            let n = self.recv.recv(&mut self.pool, &mut rx).unwrap();
            if n > 0 {
                quiet = Instant::now();
            }
            for r in &rx[..n] {
                if let Some(k) = kind(&self.pool.frame(r.id)[..r.len as usize]) {
                    *seen.entry(k).or_default() += 1;
                }
                self.pool.free(r.id);
            }
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        seen
    }

    /// Sends frames to `port` at 3 times the class's rate for 1 s (batches of 15 every 40 ms);
    /// returns the frames sent, how long it took and the frames received.
    fn steady(&mut self, port: u16) -> (u64, f64, u64) {
        let start = Instant::now();
        let frame = v4(self.macs, port);
        let mut sent = 0u64;
        for i in 0..25u32 {
            let at = start + Duration::from_millis(40) * i;
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            self.send(&vec![frame.clone(); 15]);
            sent += 15;
        }
        let took = start.elapsed().as_secs_f64();
        let got = self.received().get(&port).copied().unwrap_or(0);
        (sent, took, got)
    }
}

/// The frames a class of [`RATE_BYTES`] and [`QUEUE`] may pass in `secs` at `multiple` times
/// its rate: its depth, one frame, and the rate's, with 5 % and two frames for the clocks.
fn most(secs: f64, multiple: f64) -> u64 {
    let frames = (QUEUE / FRAME) as f64 + 1.0 + multiple * RATE_BYTES * secs / FRAME as f64;
    (frames * 1.05) as u64 + 2
}

#[test]
fn a_burst_beyond_a_class_s_queue_bound_is_refused_in_the_kernel_and_counted() {
    let Some(mut r) = rig("early_burst", "mtr-eb") else {
        return;
    };
    let macs = r.macs;
    let mut frames = vec![v4(macs, 7001); 200];
    frames.extend(vec![v4(macs, 7002); 200]);
    frames.extend(vec![v6(macs); 200]);
    let mut bad = v4(macs, 7001);
    bad[14] = 0x35; // IP version 3
    frames.extend(vec![bad; 100]);
    let mut non_ip = ethernet(macs.0, macs.1, 0x88b5);
    non_ip.resize(FRAME, 0);
    frames.extend(vec![non_ip; 100]);
    let start = Instant::now();
    r.send(&frames);
    let took = start.elapsed().as_secs_f64();
    let seen = r.received();
    let got = |k: u16| seen.get(&k).copied().unwrap_or(0);
    let refused = r.filter.refused();
    println!("early_burst: sent in {took:.3} s, received {seen:?}, refused {refused:?}");
    let (limit, depth) = (most(took, 2.0), (QUEUE / FRAME) as u64 + 1);
    assert!((depth..=limit).contains(&got(7001)), "{seen:?}");
    assert_eq!(got(7002), 200, "a class without a rate takes everything");
    assert!((depth..=limit).contains(&got(6)), "IPv6: {seen:?}");
    // Malformed and non-IP frames share a bucket of the default class's rate.
    assert!((depth..=limit).contains(&(got(1) + got(2))), "{seen:?}");
    let [over, malformed, non] = refused;
    assert_eq!(over, 400 - got(7001) - got(6));
    assert_eq!(malformed, 100 - got(1));
    assert_eq!(non, 100 - got(2));
    drop(r.topo);
}

#[test]
fn an_overloaded_loop_gets_each_class_at_its_rate_and_what_is_within_it_first() {
    let Some(mut r) = rig("early_overload", "mtr-eo") else {
        return;
    };
    let (sent, took, got) = r.steady(7003);
    println!("early_overload: not overloaded: sent {sent} in {took:.3} s, received {got}");
    assert!(got <= most(took, 2.0), "{got} frames at twice the rate");
    let at_twice = ((QUEUE / FRAME) as f64 + 2.0 * RATE_BYTES * took / FRAME as f64) * 0.9;
    assert!(
        got as f64 >= at_twice.min(sent as f64 * 0.9),
        "{got} of {sent}"
    );
    r.filter.set_overloaded(0, true);
    assert!(r.filter.overloaded());
    let (sent, took, got) = r.steady(7004);
    println!("early_overload: overloaded: sent {sent} in {took:.3} s, received {got}");
    assert!(got <= most(took, 1.0), "{got} frames at the rate");
    let at_rate = ((QUEUE / FRAME) as f64 + RATE_BYTES * took / FRAME as f64) * 0.9;
    assert!(
        got as f64 >= at_rate.min(sent as f64 * 0.9),
        "{got} of {sent}"
    );
    // A class within its rate and depth loses nothing while the loop is overloaded.
    let within = vec![v4(r.macs, 7001); 8];
    r.send(&within);
    assert_eq!(r.received().get(&7001).copied(), Some(8));
    r.filter.set_overloaded(0, false);
    assert!(!r.filter.overloaded());
    drop(r.topo);
}
