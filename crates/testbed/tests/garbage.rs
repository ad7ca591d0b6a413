//! Garbage from the sender's side cannot get past a limit: real kernel TCP (4 flows) into a
//! class limited to 100 Mbit/s, a default class limited to 20 Mbit/s (`backpressure = drop`,
//! 100 packets a flow), and meanwhile about 40 Mbit/s of random garbage frames sent on the
//! sender's veth with a raw AF_PACKET socket: IPv4 with a bad IHL, IPv4 with a total length
//! beyond the frame, three stacked VLAN tags, an IPv6 extension chain cut off, truncated IPv4
//! headers, and non-IP frames of a local experimental EtherType. `[daemon] malformed` and
//! `non_ip` keep their default (`default`: charged to the default class).
//!
//! Asserts that the receiver's wire rate (its veth's rx bytes: one-MTU frames, the bytes the
//! shaper charges) stays within `OVER` above the sum of the configured limits (120 Mbit/s), that
//! the default class carried garbage at its rate (so the garbage reached the shaper and was
//! shaped, not lost), that ARP and IPv6 neighbour discovery keep working while the default
//! class is full of garbage (both hosts' neighbour caches flushed mid-run, then resolved again;
//! an NDP exchange to the receiver's link-local address), and that every frame is accounted
//! for: the loop's frame accounting, every malformed garbage frame sent counted once under
//! `metronome_unclassified_frames_total{kind="malformed"}`, every non-IP one under
//! `kind="non_ip"` (with the sender's few ARP frames). Skips, saying why, without
//! CAP_NET_ADMIN; the topology is removed on every path (its `Drop`).

mod common;

use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::metrics::Metrics;
use metronome_io::{AfPacketConfig, AfPacketPort, FramePool, PacketPort};
use metronome_testbed::netns::{Namespace, Topology};
use metronome_testbed::shaper::spawn_shaper;
use metronome_testbed::trafficgen::{FlowGroup, TrafficPlan};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// TCP traffic duration.
const RUN: Duration = Duration::from_secs(4);
/// Garbage starts this long after the TCP flows (their handshakes and ARP done) ...
const GARBAGE_FROM: Duration = Duration::from_millis(500);
/// ... and lasts this long (ends before the flows do).
const GARBAGE_FOR: Duration = Duration::from_millis(3200);
/// Offered garbage, bit/s of frame bytes: twice the default class's rate.
const GARBAGE_BPS: f64 = 40e6;
/// When the neighbour caches are flushed.
const FLUSH_AT: Duration = Duration::from_millis(1000);
/// The measured window: from when the default class's queue is full of garbage and TCP is back
/// from the flush, to before the garbage ends.
const WINDOW: (Duration, Duration) = (Duration::from_millis(1500), Duration::from_millis(3600));
/// The sum of the configured limits, bit/s: `bulk` 100 Mbit/s plus the default class's 20.
const LIMITS_BPS: f64 = 120e6;
/// How far above the sum of the limits the wire may be: 1 %. Measured (`cargo test -p
/// metronome-testbed --test garbage -- --nocapture`, 7 runs, the machine loaded by other builds
/// with a load average of 7): -2.32 % to +0.00 %, never above +0.00 %; below is the kernel TCP
/// senders slowed by the load, which cannot raise the wire, so only the upper side is asserted.
/// With `[daemon] malformed = "pass"` and `non_ip = "pass"` the garbage escapes: +16.67 %.
const OVER: f64 = 0.01;
/// The spread measured, printed with each run's figure.
const MEASURED: &str = "-2.32 % to +0.00 % in 7 loaded runs";
/// The default class carries garbage at its rate: its bytes over the measured window are at
/// least this share of 20 Mbit/s (it is full: offered twice its rate).
const DEFAULT_FULL: f64 = 0.95;

/// The default class at 20 Mbit/s (drop backpressure), beside the bulk class.
const DEFAULT_CLASS: &str = r#"
[default]
rate = "20mbit"
backpressure = { mode = "drop", limit = 100 }
"#;

/// Sends garbage on the sender's veth at [`GARBAGE_BPS`] for [`GARBAGE_FOR`] (in the sender's
/// namespace); returns the frames the socket sent, `(malformed, non_ip)`.
fn send_garbage(topo: &Topology) -> (u64, u64) {
    let dst = common::garbage::mac_of(&topo.receiver, &topo.receiver_if);
    let src = common::garbage::mac_of(&topo.sender, &topo.sender_if);
    let iface = topo.sender_if.clone();
    let thread = topo.sender.spawn(move || {
        let mut port = AfPacketPort::open(&iface, &AfPacketConfig::default()).unwrap();
        let mut pool = FramePool::new(64, 2048);
        let mut rng = common::garbage::Rng(0x9e37_79b9_7f4a_7c15);
        let (mut malformed, mut non_ip, mut bytes, mut n) = (0u64, 0u64, 0f64, 0u64);
        let start = Instant::now();
        while start.elapsed() < GARBAGE_FOR {
            if bytes * 8.0 > GARBAGE_BPS * start.elapsed().as_secs_f64() {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let (frame, bad) = common::garbage::frame(&mut rng, n, dst, src);
            n += 1;
            let id = pool.store(&frame).unwrap();
            if port.send(&mut pool, &[id]).unwrap() == 1 {
                bytes += frame.len() as f64;
                if bad {
                    malformed += 1;
                } else {
                    non_ip += 1;
                }
            } else {
                pool.free(id);
            }
        }
        assert_eq!(port.counters().tx_errors, 0);
        (malformed, non_ip)
    });
    thread.unwrap().join().unwrap().unwrap()
}

/// The value of the first line of `text` starting with `prefix` (a metric and its labels).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// Whether `ns`'s neighbour cache has a resolved entry (with a link-layer address) for
/// `addr` on `iface`.
fn resolved(ns: &Namespace, family: &str, addr: &str, iface: &str) -> bool {
    let shown = ns
        .ip(&[family, "neigh", "show", addr, "dev", iface])
        .unwrap();
    shown.contains("lladdr") && !shown.contains("FAILED")
}

/// The receiver's IPv6 link-local address, once both ends' link-local addresses finished
/// duplicate address detection (a tentative one cannot be used; the kernel takes about 1 s).
fn link_local(topo: &Topology) -> String {
    for (ns, iface) in [
        (&topo.sender, &topo.sender_if),
        (&topo.receiver, &topo.receiver_if),
    ] {
        let mut tries = 0;
        while ns
            .ip(&["-6", "addr", "show", "dev", iface.as_str(), "tentative"])
            .unwrap()
            .contains("inet6")
        {
            tries += 1;
            assert!(tries < 100, "{iface}'s link-local address stays tentative");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let shown = topo
        .receiver
        .ip(&[
            "-6",
            "-o",
            "addr",
            "show",
            "dev",
            &topo.receiver_if,
            "scope",
            "link",
        ])
        .unwrap();
    let cidr = shown
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .expect("the receiver's veth has an IPv6 link-local address");
    cidr.split('/').next().unwrap().to_owned()
}

/// Sends one UDP datagram from the sender to `addr` (the receiver's link-local) on the sender's
/// veth: the kernel resolves it with neighbour discovery first.
fn udp6_to(topo: &Topology, addr: &str) {
    let (iface, addr) = (topo.sender_if.clone(), addr.to_owned());
    topo.sender
        .run(move || {
            let scope = nix::net::if_::if_nametoindex(iface.as_str()).unwrap();
            let ip: std::net::Ipv6Addr = addr.parse().unwrap();
            let to = std::net::SocketAddrV6::new(ip, 9, 0, scope);
            let s = std::net::UdpSocket::bind("[::]:0").unwrap();
            s.send_to(b"nd", to).unwrap();
        })
        .unwrap();
}

#[test]
fn garbage_cannot_get_past_the_limits_and_arp_keeps_working() {
    let Some(topo) = common::topology("mtr-gb", "garbage") else {
        return;
    };
    topo.one_mtu_segments().unwrap();
    let ll = link_local(&topo);
    let metrics = Metrics::new();
    let control = Control::default();
    let config = common::bulk_config("5201-5204", "100mbit", DEFAULT_CLASS, "garbage.toml");
    let shaper = spawn_shaper(&topo.shaper, config, metrics.clone(), control.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // ports open
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5201, 4)],
        RUN,
    );
    let mut default_bytes = (0.0, 0.0);
    let (report, samples, (malformed, non_ip)) = std::thread::scope(|s| {
        let garbage = s.spawn(|| {
            std::thread::sleep(GARBAGE_FROM);
            send_garbage(&topo)
        });
        let meddler = s.spawn(|| {
            std::thread::sleep(FLUSH_AT);
            topo.sender
                .ip(&["neigh", "flush", "dev", &topo.sender_if])
                .unwrap();
            topo.receiver
                .ip(&["neigh", "flush", "dev", &topo.receiver_if])
                .unwrap();
            topo.sender
                .ip(&["-6", "neigh", "flush", "dev", &topo.sender_if])
                .unwrap();
            udp6_to(&topo, &ll);
            std::thread::sleep(WINDOW.0 - FLUSH_AT);
            let read = || {
                metric(
                    &metrics.encode(),
                    "metronome_class_bytes_total{class=\"default\"} ",
                )
            };
            let first = read();
            std::thread::sleep(WINDOW.1 - WINDOW.0);
            (first, read())
        });
        let (report, samples) = common::drive(&topo, plan);
        default_bytes = meddler.join().unwrap();
        (report, samples, garbage.join().unwrap())
    });
    control.stop.store(true, Ordering::Relaxed);
    let l = shaper.join().unwrap().unwrap().unwrap();
    let text = metrics.encode();
    let wire = common::wire_bps(&samples, WINDOW.0, WINDOW.1);
    let deviation = wire / LIMITS_BPS - 1.0;
    let default_bps =
        (default_bytes.1 - default_bytes.0) * 8.0 / (WINDOW.1 - WINDOW.0).as_secs_f64();
    common::uncaptured(&format!(
        "garbage: wire {:.2} Mbit/s, {:+.2} % of the limits' sum (bound +{:.0} %; measured \
         {MEASURED}); default class {:.2} Mbit/s; TCP goodput {:.2} Mbit/s; garbage sent: {} \
         malformed, {} non-IP",
        wire / 1e6,
        deviation * 100.0,
        OVER * 100.0,
        default_bps / 1e6,
        report.groups[0].mean_bps() / 1e6,
        malformed,
        non_ip,
    ));
    println!("{l:?}");
    // No frame escapes a limit.
    assert!(
        deviation <= OVER,
        "the wire carried {deviation:+.4} over the limits"
    );
    // The garbage reached the shaper and filled the default class.
    assert!(
        default_bps >= DEFAULT_FULL * 20e6,
        "default class {default_bps} bit/s"
    );
    // ARP and neighbour discovery work while the default class is full of garbage.
    let receiver = topo.receiver_addr.to_string();
    let sender = topo.sender_addr.to_string();
    assert!(resolved(&topo.sender, "-4", &receiver, &topo.sender_if));
    assert!(resolved(&topo.receiver, "-4", &sender, &topo.receiver_if));
    assert!(
        resolved(&topo.sender, "-6", &ll, &topo.sender_if),
        "neighbour discovery of {ll}"
    );
    assert!(report.groups[0].bytes > 0);
    // Every frame accounted for: the loop's accounting, and each garbage frame counted once
    // by kind; the socket's receive drops are named too (`rx_ring_drops`).
    common::assert_every_frame_accounted(&l, "garbage");
    // (The veth's own `rx_dropped` is no loss here: it counts the frames of an EtherType no
    // kernel protocol takes, which the shaper's socket received.)
    let kernel_drops = l.inside.rx_ring_drops;
    let counted = |kind: &str| {
        let prefix =
            format!("metronome_unclassified_frames_total{{kind=\"{kind}\",action=\"default\"}} ");
        metric(&text, &prefix) as u64
    };
    let (m, n) = (counted("malformed"), counted("non_ip"));
    // What the early filter refused in the kernel beyond the default class's bucket.
    let early = |reason: &str| {
        let prefix = format!(
            "metronome_early_refused_frames_total{{class=\"default\",reason=\"{reason}\"}} "
        );
        metric(&text, &prefix) as u64
    };
    let (early_m, early_n) = (early("malformed"), early("non_ip"));
    println!(
        "counted malformed {m}, non-IP {n}; refused early malformed {early_m}, non-IP \
         {early_n}; kernel drops {kernel_drops}"
    );
    assert!(
        m <= malformed && m + early_m + kernel_drops >= malformed,
        "{text}"
    );
    // The non-IP count has the sender's ARP frames too: a few.
    assert!(
        n + early_n + kernel_drops >= non_ip && n <= non_ip + 50,
        "{text}"
    );
    assert_eq!(l.engine.unclassified_to_default, m + n);
    topo.remove().unwrap();
}
