//! `metronome run` killed with SIGKILL under load and started again: the built binary runs in the
//! shaper namespace of a bump-in-the-wire topology (`ip netns exec`, which execs it in place: the
//! child's pid is the daemon's) with one class `tcp` of 211 Mbit/s (TCP to ports 5201-5204) and
//! a default class of 50 Mbit/s, its metrics endpoint on the fixed address 127.0.0.1:9187 of
//! that namespace. Real kernel TCP (4 flows) runs through it; after [`KILL_AT`] the daemon is
//! killed with SIGKILL, and [`OUTAGE`] later the same binary is started again with the same
//! configuration. TCP connections outlive an outage this short: the senders retransmit when
//! their timers fire (200 ms, then 400 ms after that) and the flows resume.
//!
//! Asserted:
//! * while no daemon runs, nothing of the class reaches the receiver: a bump in the wire forwards
//!   nothing by itself (a tap on the receiver's veth, `metronome_testbed::flood::Tap`, counts 0
//!   bytes of the class from [`DEAD_AFTER`] after the killed process was reaped until the new
//!   one is spawned);
//! * the new process starts cleanly though the old one left without cleaning up: it sends
//!   `READY=1` to a `NOTIFY_SOCKET` of the test's, logs no `ERROR`, and its metrics endpoint
//!   binds the same address and answers (the old endpoint's closed connections are still in
//!   TIME_WAIT: the test scraped it before the kill), with counters of its own;
//! * the class holds its rate again from the 2nd full second after the new process is ready:
//!   in each of [`SECONDS_ASSERTED`] seconds from then on, the TCP sinks' goodput is within
//!   [`TOLERANCE`] of the class's rate in payload and the receiver's veth carries at most the
//!   sum of the limits plus [`WIRE_OVER`];
//! * SIGTERM stops the new process with exit status 0.
//!
//! Prints its per-second figures (`--nocapture`). Needs root or CAP_NET_ADMIN and iproute2;
//! fails otherwise (it skips, saying why, under `METRONOME_SKIP_PRIVILEGED=1`). The topology
//! (its own `mtr-rs` names) is removed on every path (its `Drop`), a daemon still running when
//! the test fails is killed (`Daemon`'s `Drop`), and the test's scratch directory is removed.

mod common;

use common::{Daemon, Scratch};
use metronome_daemon::ops::metrics::stats::{scrape_bounded, MAX_RESPONSE_BYTES};
use metronome_testbed::compare::measure::WIRE_PER_PAYLOAD;
use metronome_testbed::flood::{self, frames, per_second_bps, shifted, Tap, TapReport};
use metronome_testbed::netns::{self, Topology};
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan, TrafficReport};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The `tcp` class's rate, bit/s of frame bytes.
const TCP_LIMIT_BPS: f64 = 211e6;
/// The default class's rate, bit/s of frame bytes.
const DEFAULT_LIMIT_BPS: f64 = 50e6;
/// How far the class's goodput may be from its target in an asserted second: 2 %, the
/// isolation `crates/testbed/tests/flood.rs` asks of a class (its measurements are there).
const TOLERANCE: f64 = 0.02;
/// How far above the sum of the limits the receiver's wire may be in a second: 1 %, as in
/// `crates/testbed/tests/flood.rs`.
const WIRE_OVER: f64 = 0.01;
/// TCP flows in the class.
const TCP_FLOWS: usize = 4;
/// The first TCP port of the class (ports 5201 to 5204).
const TCP_PORT: u16 = 5201;
/// When the daemon is killed, from the start of the TCP run: TCP has held its rate for a second
/// (it does about 1.5 s after its handshakes, as in `crates/testbed/tests/flood.rs`).
const KILL_AT: Duration = Duration::from_millis(2600);
/// How long after the killed process was reaped the new one is spawned: 300 ms, so that with
/// its start-up the outage stays well under 1 s and the flows' retransmission timers (200 ms,
/// then 400 ms more) find the new daemon after one or two backoffs.
const OUTAGE: Duration = Duration::from_millis(300);
/// From this long after the killed process was reaped, nothing of the class may reach the
/// receiver: 20 ms, two of the tap's samples
/// (`metronome_testbed::flood::TAP_SAMPLE_EVERY`), for frames the dead process handed its
/// veth just before it died.
const DEAD_AFTER: Duration = Duration::from_millis(20);
/// The seconds asserted after the new process is ready: the 2nd, 3rd and 4th full seconds
/// (the 1st is the flows' retransmission and slow start, printed only).
const SECONDS_ASSERTED: usize = 3;
/// How long TCP runs after the new process is expected ready: the seconds printed and asserted,
/// and 1.5 s to spare for the new process's start-up and the flows' end.
const TCP_AFTER_OUTAGE: Duration = Duration::from_millis(5500);
/// How often the receiver's veth counters are read.
const LINK_SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// The metrics endpoint, in the shaper's namespace (each namespace has its own loopback).
const METRICS_LISTEN: &str = "127.0.0.1:9187";
/// How long a scrape may take before the scraper gives up: 1 s, the target that a scrape
/// answers within 1 s.
const SCRAPE_WITHIN: Duration = Duration::from_secs(1);
/// The longest the daemon may take to send `READY=1`, or to exit after SIGTERM: a bound against
/// hanging on a broken run, not a measurement (either takes well under a second).
const GUARD: Duration = Duration::from_secs(30);

/// Writes the configuration into `dir`; returns its path.
fn write_config(topo: &Topology, dir: &Path) -> PathBuf {
    let path = dir.join("metronome.toml");
    let text = format!(
        "[interfaces]\ninside = \"{}\"\noutside = \"{}\"\n\n[daemon]\n\
         metrics_listen = \"{METRICS_LISTEN}\"\n\n[[class]]\nname = \"tcp\"\n\
         match = {{ protocol = \"tcp\", dst_port = \"5201-5204\" }}\nrate = \"211mbit\"\n\n\
         [default]\nrate = \"50mbit\"\n",
        topo.shaper_in, topo.shaper_out
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts `metronome run --config CONFIG` in `topo`'s shaper namespace, its standard error in
/// `dir/LABEL.log`; returns it once it has sent `READY=1` to a notify socket in `dir`.
fn start(topo: &Topology, dir: &Path, config: &Path, label: &str) -> Daemon {
    let socket = dir.join(format!("{label}.notify"));
    let stderr = dir.join(format!("{label}.log"));
    common::start_daemon(topo, config, &socket, &stderr, label, GUARD)
}

/// One scrape of the endpoint in `topo`'s shaper namespace, the scraper giving up after
/// [`SCRAPE_WITHIN`]; returns the body.
fn scrape(topo: &Topology) -> String {
    let addr = METRICS_LISTEN.parse().unwrap();
    topo.shaper
        .run(move || scrape_bounded(addr, MAX_RESPONSE_BYTES, SCRAPE_WITHIN))
        .unwrap()
        .unwrap_or_else(|e| panic!("scraping the daemon: {e}"))
}

/// The `tcp` class's byte counter in a scrape's `body`.
fn class_bytes(body: &str) -> u64 {
    let prefix = "metronome_class_bytes_total{class=\"tcp\"} ";
    body.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// Tap buckets: 0 the class's TCP (to ports 5201 to 5204), 1 the rest.
fn class_bucket(frame: &[u8]) -> Option<usize> {
    match frames::classify_ipv4(frame) {
        Some((6, port)) if (TCP_PORT..TCP_PORT + TCP_FLOWS as u16).contains(&port) => Some(0),
        _ => Some(1),
    }
}

/// Sends SIGTERM to `daemon`.
fn terminate(daemon: &Daemon) {
    let pid = daemon.child.id().to_string();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(kill.success(), "kill -TERM {pid}");
}

/// What a run measured; times from one origin.
struct Run {
    tcp: TrafficReport,
    tap: TapReport,
    wire: Vec<(Duration, u64)>,
    /// When the TCP run started.
    tcp_at: Duration,
    /// When SIGKILL was sent.
    kill_sent_at: Duration,
    /// When the killed process had been reaped.
    killed_at: Duration,
    /// When the new process was spawned.
    respawned_at: Duration,
    /// When the new process had sent `READY=1`.
    ready_at: Duration,
    /// The class's bytes in the old daemon's last scrape, and in the new one's.
    old_bytes: u64,
    new_bytes: u64,
    /// The new daemon's log at its stop, and its exit status.
    new_log: String,
    new_exit: ExitStatus,
    /// How the old daemon ended.
    old_exit: ExitStatus,
}

/// Kills the daemon under TCP and starts it again, on a fresh topology; `None` when skipped.
fn run(name: &str) -> Option<Run> {
    let topo = netns::bump_in_the_wire_or_skip("mtr-rs", name)?;
    topo.one_mtu_segments().unwrap();
    let scratch = Scratch::new(&format!("restart-{name}"));
    let config = write_config(&topo, &scratch.0);
    let mut old = start(&topo, &scratch.0, &config, "old");
    // A connection the endpoint closed first: in TIME_WAIT on the endpoint's port at the kill.
    scrape(&topo);
    let origin = Instant::now();
    let tap = Tap::spawn(&topo.receiver, &topo.receiver_if, class_bucket, 2, origin).unwrap();
    let stop = AtomicBool::new(false);
    let run = std::thread::scope(|s| {
        let wire = s.spawn(|| {
            let (ns, iface) = (&topo.receiver, &topo.receiver_if);
            flood::sample_link(ns, iface, origin, LINK_SAMPLE_EVERY, &stop).unwrap()
        });
        let tcp = s.spawn(|| {
            let plan = TrafficPlan::new(
                topo.receiver_addr,
                vec![FlowGroup::tcp("tcp", TCP_PORT, TCP_FLOWS)],
                KILL_AT + OUTAGE + TCP_AFTER_OUTAGE,
            );
            trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver))
        });
        std::thread::sleep((KILL_AT - Duration::from_millis(300)).saturating_sub(origin.elapsed()));
        let old_bytes = class_bytes(&scrape(&topo));
        std::thread::sleep(KILL_AT.saturating_sub(origin.elapsed()));
        let kill_sent_at = origin.elapsed();
        old.child.kill().expect("SIGKILL");
        let old_exit = old.wait(GUARD);
        let killed_at = origin.elapsed();
        std::thread::sleep(OUTAGE);
        let respawned_at = origin.elapsed();
        let mut new = start(&topo, &scratch.0, &config, "new");
        let ready_at = origin.elapsed();
        let tcp = tcp
            .join()
            .unwrap()
            .expect("the TCP run outlives the outage");
        let new_bytes = class_bytes(&scrape(&topo));
        stop.store(true, Ordering::Release);
        terminate(&new);
        let new_exit = new.wait(GUARD);
        Run {
            tcp_at: tcp.started.saturating_duration_since(origin),
            tcp,
            tap: tap.finish().unwrap(),
            wire: wire.join().unwrap(),
            kill_sent_at,
            killed_at,
            respawned_at,
            ready_at,
            old_bytes,
            new_bytes,
            new_log: new.log(),
            new_exit,
            old_exit,
        }
    });
    Some(run)
}

/// Writes `line` to the process's standard error, bypassing the test harness's capture.
fn uncaptured(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The bytes of `series` between `a` and `b`.
fn bytes_between(series: &[(Duration, u64)], a: Duration, b: Duration) -> f64 {
    flood::value_at(series, b) - flood::value_at(series, a)
}

#[test]
fn a_daemon_killed_under_load_restarts_and_shapes_again() {
    let name = "restart";
    // METRONOME_TEST_CPU_HOG=N: N spinning threads beside the run.
    let hog = metronome_testbed::load::CpuHog::from_env();
    let load_before = metronome_testbed::load::LoadSample::now();
    let Some(r) = run(name) else {
        return;
    };
    let load = metronome_testbed::load::LoadSample::now();
    uncaptured(&format!(
        "{name}: {}",
        metronome_testbed::load::describe(&load_before, &load, hog.threads())
    ));
    drop(hog);
    let tcp_target = TCP_LIMIT_BPS / WIRE_PER_PAYLOAD;
    let limits = TCP_LIMIT_BPS + DEFAULT_LIMIT_BPS;
    let tcp_series = shifted(&r.tcp.groups[0].received_at, r.tcp_at);
    let sec = Duration::from_secs(1);
    // The seconds before the kill end one sink window before it: the sinks' series is read
    // every window, and the window around the kill would smear the outage into them.
    let before = r
        .kill_sent_at
        .saturating_sub(2 * sec + trafficgen::DEFAULT_WINDOW);
    let tcp_before = per_second_bps(&tcp_series, before, 2);
    let tcp_after = per_second_bps(&tcp_series, r.ready_at, 1 + SECONDS_ASSERTED);
    let wire_after = per_second_bps(&r.wire, r.ready_at, 1 + SECONDS_ASSERTED);
    let dead_from = r.killed_at + DEAD_AFTER;
    let class_dead = bytes_between(&r.tap.series[0], dead_from, r.respawned_at);
    let other_dead = bytes_between(&r.tap.series[1], dead_from, r.respawned_at);
    let wire_dead = bytes_between(&r.wire, dead_from, r.respawned_at);
    let pct = |x: f64| (x / tcp_target - 1.0) * 100.0;
    for (i, v) in tcp_before.iter().enumerate() {
        println!(
            "{name}: {} s before the kill: tcp {:.2} Mbit/s ({:+.2} %)",
            2 - i,
            v / 1e6,
            pct(*v)
        );
    }
    println!(
        "{name}: SIGKILL at {:?}, reaped ({}) at {:?}, new process spawned at {:?}, ready at \
         {:?}; while dead from {:?}: class {class_dead} bytes, other frames {other_dead} bytes, \
         wire {wire_dead} bytes at the receiver",
        r.kill_sent_at, r.old_exit, r.killed_at, r.respawned_at, r.ready_at, dead_from
    );
    for i in 0..=SECONDS_ASSERTED {
        println!(
            "{name}: second {} after ready: tcp {:.2} Mbit/s ({:+.2} %), wire {:.2} Mbit/s",
            i + 1,
            tcp_after[i] / 1e6,
            pct(tcp_after[i]),
            wire_after[i] / 1e6
        );
    }
    println!(
        "{name}: class bytes counted by the old daemon before the kill {}, by the new one {}; \
         tap missed {} frames; the new daemon exited with {}",
        r.old_bytes, r.new_bytes, r.tap.counters.rx_ring_drops, r.new_exit
    );
    let off: Vec<String> = tcp_after[1..]
        .iter()
        .map(|x| format!("{:+.1} %", pct(*x)))
        .collect();
    uncaptured(&format!(
        "{name}: seconds 2 to {} after the restart: tcp {off:?} of {:.1} Mbit/s goodput",
        SECONDS_ASSERTED + 1,
        tcp_target / 1e6
    ));

    // The measurement is sound: the old daemon shaped, the tap saw every frame.
    assert!(r.old_bytes > 0, "{name}: the old daemon carried nothing");
    assert_eq!(
        r.tap.counters.rx_ring_drops, 0,
        "{name}: the tap missed frames"
    );
    // SIGKILL ended the old process.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(r.old_exit.signal(), Some(9), "{name}: {}", r.old_exit);
    // Nothing of the class passed while no daemon ran.
    assert_eq!(
        class_dead, 0.0,
        "{name}: the class passed while the daemon was dead"
    );
    // The new process started cleanly: READY=1 (`start`), no error, its own endpoint answering
    // on the same address with counters of its own, and a clean stop.
    assert!(
        !r.new_log.contains("ERROR"),
        "{name}: the new daemon logged an error:\n{}",
        r.new_log
    );
    assert!(r.new_bytes > 0, "{name}: the new daemon carried nothing");
    assert_eq!(
        r.new_exit.code(),
        Some(0),
        "{name}: {}\n{}",
        r.new_exit,
        r.new_log
    );
    // From the 2nd full second after the new process was ready, the class holds its rate.
    for i in 1..=SECONDS_ASSERTED {
        let dev = tcp_after[i] / tcp_target - 1.0;
        assert!(
            dev.abs() <= TOLERANCE,
            "{name}: second {} after the restart: tcp goodput {:.2} Mbit/s, {:+.2} % off {:.2}",
            i + 1,
            tcp_after[i] / 1e6,
            dev * 100.0,
            tcp_target / 1e6
        );
        assert!(
            wire_after[i] <= limits * (1.0 + WIRE_OVER),
            "{name}: second {} after the restart: wire {:.2} Mbit/s",
            i + 1,
            wire_after[i] / 1e6
        );
    }
}
