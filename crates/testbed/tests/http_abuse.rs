//! The metrics endpoint attacked while the daemon shapes: real kernel TCP (4 flows) into a class
//! `tcp` limited to 211 Mbit/s, beside a default class limited to 50 Mbit/s, through the daemon's
//! loop, while its metrics endpoint (`Metrics::serve` on 127.0.0.1 in the shaper's namespace,
//! `crates/daemon/src/ops/metrics/http.rs`, default bounds) is attacked from that namespace for
//! [`ABUSE_FOR`], after a warm-up, by:
//!
//! * a request declaring `Content-Length: 900000000000` every [`BURST_EVERY`];
//! * a request with [`OVERSIZED_HEAD_BYTES`] of header lines every [`BURST_EVERY`];
//! * [`SLOW_CLIENTS`] clients that send half a request line and stall, in two waves;
//! * [`IDLE_CONNECTIONS`] connections opened at once that send nothing.
//!
//! Asserted: the daemon's loop stays up and its engine's invariants held at every check while it
//! ran (`metronome_testbed::flood::spawn_checked_shaper`; a failed check panics the loop's
//! thread); in every second of the abuse the TCP sinks' goodput is within [`TOLERANCE`] of the
//! `tcp` class's rate in payload and the receiver's veth carries at most the sum of the limits
//! plus [`WIRE_OVER`]; every abusive connection got a refusal (413, 431, 408 or 503) or was
//! closed unanswered to make room for a newer one (`idle`), and
//! `metronome_metrics_http_refused_total{reason}` counts each one under the reason its answer
//! stands for, with at least one of each (`body`, `too_large`, `timeout`, `idle`); and in every
//! second of the abuse a scrape answers, with the scraper itself giving up after
//! [`SCRAPE_WITHIN`] (`metrics::stats::scrape_bounded`): the target is that a scrape answers
//! within 1 s under every abuse, so no other assertion is made on its time. Prints its
//! per-second figures (`--nocapture`).
//!
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1); the topology
//! is removed on every path (its `Drop`).

mod common;

use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::stats::{scrape_bounded, MAX_RESPONSE_BYTES};
use metronome_daemon::ops::metrics::{Metrics, MetricsError};
use metronome_testbed::flood::{self, per_second_bps, shifted, CheckedReport};
use metronome_testbed::netns::Topology;
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan, TrafficReport};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The `tcp` class's rate, bit/s of frame bytes.
const TCP_LIMIT_BPS: f64 = 211e6;
/// The default class's rate, bit/s of frame bytes.
const DEFAULT_LIMIT_BPS: f64 = 50e6;
/// How far the `tcp` class's goodput may be from its target in a second of the abuse: 2 %, the
/// isolation `flood.rs` asks of a class beside a flood (its measurements are there).
const TOLERANCE: f64 = 0.02;
/// How far above the sum of the limits the receiver's wire may be in a second: 1 %, as in
/// `flood.rs`.
const WIRE_OVER: f64 = 0.01;
/// TCP flows in the `tcp` class.
const TCP_FLOWS: usize = 4;
/// The TCP ports of the `tcp` class.
const TCP_PORTS: std::ops::RangeInclusive<u16> = 5201..=5204;
/// When the abuse starts, from the start of the TCP run: TCP is past slow start and holds its
/// rate (about 1.5 s after its handshakes, as in `flood.rs`).
const ABUSE_FROM: Duration = Duration::from_millis(1600);
/// How long the abuse lasts: 4 s, two of the endpoint's read timeouts (2 s,
/// `metrics::http::READ_TIMEOUT`), so that stalled connections time out within it.
const ABUSE_FOR: Duration = Duration::from_secs(4);
/// How long TCP runs after the abuse ends.
const TCP_AFTER: Duration = Duration::from_millis(800);
/// How often the receiver's veth counters are read.
const LINK_SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// How long a scrape may take before the scraper gives up: 1 s, the target that a scrape
/// answers within 1 s under every abuse.
const SCRAPE_WITHIN: Duration = Duration::from_secs(1);
/// The body length the huge-body request declares, bytes: 900 GB, far beyond any memory.
const HUGE_BODY: &str = "900000000000";
/// Bytes of header lines in the oversized request: 64 KiB, eight times the endpoint's head
/// limit (`metrics::http::MAX_HEAD_BYTES`, 8 KiB).
const OVERSIZED_HEAD_BYTES: usize = 64 * 1024;
/// How often a huge-body and an oversized request are sent during the abuse: every 500 ms.
const BURST_EVERY: Duration = Duration::from_millis(500);
/// Slow clients per wave: 8, half of the endpoint's connection cap
/// (`metrics::http::MAX_CONNECTIONS`, 16).
const SLOW_CLIENTS: usize = 8;
/// When each wave of slow clients starts, from the start of the abuse: the second starts after
/// the first has timed out (2 s).
const SLOW_WAVES: [Duration; 2] = [Duration::ZERO, Duration::from_millis(2200)];
/// Idle connections opened at once.
const IDLE_CONNECTIONS: usize = 1000;
/// When the idle connections are opened, from the start of the abuse.
const IDLE_AT: Duration = Duration::from_secs(1);
/// The longest any client waits for its answer: turns a hang into a failure (the endpoint
/// answers within its connection deadline, 10 s). Not a measurement.
const GUARD: Duration = Duration::from_secs(15);

/// The classes: `tcp` at 211 Mbit/s, the default class at 50 Mbit/s.
fn config() -> Config {
    let text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[[class]]\nname = \"tcp\"\n\
                match = { protocol = \"tcp\", dst_port = \"5201-5204\" }\nrate = \"211mbit\"\n\n\
                [default]\nrate = \"50mbit\"\n";
    Config::from_toml_str(text, "http_abuse.toml").unwrap()
}

/// What one abusive connection got: the status code of the answer it read ([`CLOSED`] for a
/// connection the endpoint closed without an answer), or why it read none.
type Answer = Result<u16, String>;

/// The "status" of a connection closed without an answer: made room for a newer one.
const CLOSED: u16 = 0;

/// The status code at the start of `response`, if it is an HTTP status line.
fn status_of(response: &[u8]) -> Option<u16> {
    let line = response.split(|&b| b == b'\r').next()?;
    let code = line.strip_prefix(b"HTTP/1.1 ")?.get(..3)?;
    std::str::from_utf8(code).ok()?.parse().ok()
}

/// Reads `stream`'s answer to its end (the endpoint closes after it), at most [`GUARD`].
fn answer_of(stream: &mut TcpStream) -> Answer {
    stream
        .set_read_timeout(Some(GUARD))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let read = stream.read_to_end(&mut out);
    match (status_of(&out), read) {
        // A reset after the answer arrived (the endpoint closed with bytes of ours unread)
        // still leaves the answer.
        (Some(code), _) => Ok(code),
        // Closed, or reset, before a byte of an answer: evicted to make room.
        (None, Ok(_)) if out.is_empty() => Ok(CLOSED),
        (None, Err(e)) if out.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => {
            Ok(CLOSED)
        }
        (None, Err(e)) => Err(format!("{e} after {} bytes", out.len())),
        (None, Ok(_)) => Err(format!(
            "no status line in {:?}",
            String::from_utf8_lossy(&out)
        )),
    }
}

/// Connects to `addr`, sends `request` (a write the endpoint refuses to take is not an error:
/// it may close first) and reads the answer.
fn send(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let _ = s.write_all(request);
    answer_of(&mut s)
}

/// A `GET` declaring a body of [`HUGE_BODY`] bytes (none sent).
fn huge_body(addr: SocketAddr) -> Answer {
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {HUGE_BODY}\r\n\r\n");
    send(addr, request.as_bytes())
}

/// A `GET` with [`OVERSIZED_HEAD_BYTES`] of header lines.
fn oversized_head(addr: SocketAddr) -> Answer {
    let mut request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n").into_bytes();
    let mut n = 0;
    while request.len() < OVERSIZED_HEAD_BYTES {
        request.extend_from_slice(format!("X-Filler-{n}: {}\r\n", "a".repeat(64)).as_bytes());
        n += 1;
    }
    request.extend_from_slice(b"\r\n");
    send(addr, &request)
}

/// Half a request line, then nothing: the client waits for the endpoint to give up.
fn slow_client(addr: SocketAddr) -> Answer {
    send(addr, b"GET /metr")
}

/// Opens `n` connections to `addr` that send nothing; returns them (or the connect error).
fn idle_connections(addr: SocketAddr, n: usize) -> Vec<Result<TcpStream, String>> {
    (0..n)
        .map(|i| TcpStream::connect(addr).map_err(|e| format!("connect {i}: {e}")))
        .collect()
}

/// Raises the soft limit on open files to fit `n` client sockets and as many accepted ones
/// (the endpoint runs in this process), plus room for the rest of the test.
fn room_for_connections(n: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let want = 2 * n as u64 + 512;
    assert!(
        want <= hard,
        "open files limited to {hard}: {n} idle connections need {want}"
    );
    if want > soft {
        setrlimit(Resource::RLIMIT_NOFILE, want, hard).expect("setrlimit");
    }
}

/// What the abusers got, by kind.
#[derive(Debug, Default)]
struct Abused {
    huge_body: Vec<Answer>,
    oversized: Vec<Answer>,
    slow: Vec<Answer>,
    idle: Vec<Answer>,
}

impl Abused {
    /// Every answer with the kind of its abuser.
    fn all(&self) -> Vec<(&'static str, &Answer)> {
        let kinds: [(&'static str, &Vec<Answer>); 4] = [
            ("huge body", &self.huge_body),
            ("oversized head", &self.oversized),
            ("slow", &self.slow),
            ("idle", &self.idle),
        ];
        kinds
            .into_iter()
            .flat_map(|(name, v)| v.iter().map(move |a| (name, a)))
            .collect()
    }
}

/// Sleeps until `t`.
fn sleep_until(t: Instant) {
    std::thread::sleep(t.saturating_duration_since(Instant::now()));
}

/// Attacks the endpoint at `addr` from `topo`'s shaper namespace for [`ABUSE_FOR`] from now, as
/// the module docs list; returns when every abuser has its answer.
fn abuse(topo: &Topology, addr: SocketAddr) -> Abused {
    let start = Instant::now();
    let ns = &topo.shaper;
    let bursts = ns
        .spawn(move || {
            let (mut body, mut oversized) = (Vec::new(), Vec::new());
            let mut at = start;
            while at < start + ABUSE_FOR {
                sleep_until(at);
                body.push(huge_body(addr));
                oversized.push(oversized_head(addr));
                at += BURST_EVERY;
            }
            (body, oversized)
        })
        .unwrap();
    let slow: Vec<_> = SLOW_WAVES
        .iter()
        .flat_map(|&wave| std::iter::repeat_n(wave, SLOW_CLIENTS))
        .map(|wave| {
            ns.spawn(move || {
                sleep_until(start + wave);
                slow_client(addr)
            })
            .unwrap()
        })
        .collect();
    let idle = ns
        .spawn(move || {
            sleep_until(start + IDLE_AT);
            let connections = idle_connections(addr, IDLE_CONNECTIONS);
            sleep_until(start + ABUSE_FOR);
            connections
                .into_iter()
                .map(|c| c.and_then(|mut s| answer_of(&mut s)))
                .collect::<Vec<_>>()
        })
        .unwrap();
    let (huge_body, oversized) = bursts.join().unwrap().unwrap();
    Abused {
        huge_body,
        oversized,
        slow: slow
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect(),
        idle: idle.join().unwrap().unwrap(),
    }
}

/// One scrape of the abuse: when it was asked (from the abuse's start) and what came back.
type Scrape = (Duration, Result<String, MetricsError>);

/// What one run measured.
struct Run {
    tcp: TrafficReport,
    wire: Vec<(Duration, u64)>,
    checked: CheckedReport,
    abused: Abused,
    scrapes: Vec<Scrape>,
    /// The abuse's start, from the origin of the wire's series.
    abuse_at: Duration,
    /// The TCP run's start, from the same origin.
    tcp_at: Duration,
    metrics: Metrics,
}

/// Runs TCP into `tcp` through the daemon's loop on a fresh topology and attacks the metrics
/// endpoint meanwhile; `None` when skipped without the privilege.
fn run(name: &str, prefix: &str) -> Option<Run> {
    let topo = common::topology(prefix, name)?;
    topo.one_mtu_segments().unwrap();
    room_for_connections(IDLE_CONNECTIONS);
    let metrics = Metrics::new();
    let server = flood::serve_metrics(&topo.shaper, &metrics).unwrap();
    let addr = server.addr();
    let control = Control::default();
    let shaper = common::checked_shaper(&topo, config(), &metrics, &control);
    let origin = Instant::now();
    let stop = AtomicBool::new(false);
    let (tcp, wire, abused, scrapes, abuse_at) = std::thread::scope(|s| {
        let wire = s.spawn(|| {
            let (ns, iface) = (&topo.receiver, &topo.receiver_if);
            flood::sample_link(ns, iface, origin, LINK_SAMPLE_EVERY, &stop).unwrap()
        });
        let tcp = s.spawn(|| {
            let plan = TrafficPlan::new(
                topo.receiver_addr,
                vec![FlowGroup::tcp("tcp", *TCP_PORTS.start(), TCP_FLOWS)],
                ABUSE_FROM + ABUSE_FOR + TCP_AFTER,
            );
            trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver)).expect("TCP run")
        });
        std::thread::sleep(ABUSE_FROM);
        let abuse_at = origin.elapsed();
        let abuser = s.spawn(|| abuse(&topo, addr));
        let scrapes = scrape_each_second(&topo, addr);
        let abused = abuser.join().unwrap();
        let tcp = tcp.join().unwrap();
        stop.store(true, Ordering::Release);
        (tcp, wire.join().unwrap(), abused, scrapes, abuse_at)
    });
    let checked = common::stop_checked(shaper, &control);
    drop(server);
    Some(Run {
        tcp_at: tcp.started.saturating_duration_since(origin),
        tcp,
        wire,
        checked,
        abused,
        scrapes,
        abuse_at,
        metrics,
    })
}

/// One bounded scrape from the shaper's namespace in the middle of each second of the abuse.
fn scrape_each_second(topo: &Topology, addr: SocketAddr) -> Vec<Scrape> {
    let start = Instant::now();
    (0..ABUSE_FOR.as_secs())
        .map(|i| {
            let at = Duration::from_millis(500 + 1000 * i);
            sleep_until(start + at);
            let body = topo
                .shaper
                .run(move || scrape_bounded(addr, MAX_RESPONSE_BYTES, SCRAPE_WITHIN))
                .unwrap();
            (at, body)
        })
        .collect()
}

/// The reason of `metronome_metrics_http_refused_total` a refusal's status code stands for
/// (`crates/daemon/src/ops/metrics/http/refusal.rs`, `Refusal::status`).
fn reason_of(code: u16) -> Option<&'static str> {
    Some(match code {
        431 => "too_large",
        413 => "body",
        408 => "timeout",
        503 => "busy",
        400 => "bad_request",
        405 => "method",
        404 => "not_found",
        CLOSED => "idle",
        _ => return None,
    })
}

/// The value of `metronome_metrics_http_refused_total{reason}` in `m`.
fn refused(m: &Metrics, reason: &str) -> u64 {
    let prefix = format!("metronome_metrics_http_refused_total{{reason=\"{reason}\"}} ");
    let text = m.encode();
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix));
    line.unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
        .trim()
        .parse()
        .expect("counter value")
}

/// Refusals by reason (the `reason` label of `metronome_metrics_http_refused_total`).
type ByReason = BTreeMap<&'static str, u64>;

/// The refusals the abusive clients saw, by reason. Panics when one got no refusal.
fn refusals_seen(name: &str, r: &Run) -> ByReason {
    let mut seen = BTreeMap::new();
    for (kind, answer) in r.abused.all() {
        let code = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("{name}: a {kind} client got no answer: {e}"));
        let reason = reason_of(*code)
            .unwrap_or_else(|| panic!("{name}: a {kind} client was answered {code}"));
        *seen.entry(reason).or_insert(0) += 1;
    }
    seen
}

/// The refusals the abusive clients saw and those the endpoint counted, by reason (the
/// scrapes, when answered, are not refusals), printed; polls the counters until they match the
/// refusals seen (a connection is counted when its thread ends, just after its answer), plus in
/// `busy` at most the scrapes that failed, at most [`GUARD`].
fn refusals(name: &str, r: &Run) -> (ByReason, ByReason) {
    let seen = refusals_seen(name, r);
    let counted = || -> ByReason {
        [
            "too_large",
            "body",
            "timeout",
            "busy",
            "bad_request",
            "method",
            "not_found",
            "idle",
        ]
        .into_iter()
        .map(|reason| (reason, refused(&r.metrics, reason)))
        .filter(|&(_, n)| n > 0)
        .collect()
    };
    // A scrape that failed may have been refused as `busy`, with no answer to show for it
    // (`metrics::http` closes without reading its request, so the scraper sees a reset).
    let failed_scrapes = r.scrapes.iter().filter(|(_, s)| s.is_err()).count() as u64;
    let settled = |c: &ByReason| {
        let busy = |m: &ByReason| m.get("busy").copied().unwrap_or(0);
        let others = |m: &ByReason| {
            m.iter()
                .filter(|(k, _)| **k != "busy")
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>()
        };
        others(c) == others(&seen)
            && (busy(&seen)..=busy(&seen) + failed_scrapes).contains(&busy(c))
    };
    let start = Instant::now();
    while !settled(&counted()) && start.elapsed() < GUARD {
        std::thread::sleep(Duration::from_millis(20));
    }
    let by_code = |v: &[Answer]| {
        let mut codes = BTreeMap::new();
        for a in v {
            *codes.entry(a.as_ref().map_or(0, |c| *c)).or_insert(0u64) += 1;
        }
        codes
    };
    println!(
        "{name}: answers by status: huge body {:?}, oversized head {:?}, slow {:?}, idle {:?}",
        by_code(&r.abused.huge_body),
        by_code(&r.abused.oversized),
        by_code(&r.abused.slow),
        by_code(&r.abused.idle),
    );
    let counted = counted();
    println!("{name}: refusals seen by the abusive clients {seen:?}, counted {counted:?}");
    (seen, counted)
}

/// The per-second targets, the loop's health, the refusals and the scrapes of a run.
fn assert_held(name: &str, r: &Run) {
    let seconds = ABUSE_FOR.as_secs() as usize;
    let from = r.abuse_at.saturating_sub(Duration::from_secs(1));
    let tcp_series = shifted(&r.tcp.groups[0].received_at, r.tcp_at);
    let tcp = per_second_bps(&tcp_series, from, seconds + 1);
    let wire = per_second_bps(&r.wire, from, seconds + 1);
    let tcp_target = TCP_LIMIT_BPS / common::WIRE_PER_PAYLOAD;
    let limits = TCP_LIMIT_BPS + DEFAULT_LIMIT_BPS;
    println!("{name}: second, tcp goodput, wire (Mbit/s)");
    for i in 0..=seconds {
        let label = if i == 0 {
            "before".to_owned()
        } else {
            format!("abuse {i}")
        };
        println!(
            "{name}: {label:>8}: tcp {:.2} ({:+.2} %), wire {:.2}",
            tcp[i] / 1e6,
            (tcp[i] / tcp_target - 1.0) * 100.0,
            wire[i] / 1e6
        );
    }
    for (at, s) in &r.scrapes {
        match s {
            Ok(body) => println!(
                "{name}: scrape at {at:?} of the abuse: {} bytes",
                body.len()
            ),
            Err(e) => println!("{name}: scrape at {at:?} of the abuse failed: {e}"),
        }
    }
    let (seen, counted) = refusals(name, r);
    let l = &r.checked.report;
    println!(
        "{name}: loop busy {:.0} %, {} invariant checks; {l:?}",
        l.busy_pct(),
        r.checked.checks
    );
    let off: Vec<String> = tcp[1..]
        .iter()
        .map(|x| format!("{:+.1} %", (x / tcp_target - 1.0) * 100.0))
        .collect();
    common::uncaptured(&format!(
        "{name}: per abuse second: tcp {off:?} of {:.1} Mbit/s goodput",
        tcp_target / 1e6
    ));

    // The loop stayed up (its report came back) and was checked all along.
    common::assert_checked_loop(&r.checked, (ABUSE_FOR, common::CHECK_EVERY), name);
    // A scrape answered in each second of the abuse, within the scraper's own 1 s.
    assert_eq!(r.scrapes.len(), seconds, "{name}");
    for (at, s) in &r.scrapes {
        let body = s
            .as_ref()
            .unwrap_or_else(|e| panic!("{name}: the scrape at {at:?} of the abuse: {e}"));
        assert!(
            body.contains("metronome_class_bytes_total{class=\"tcp\"}"),
            "{body}"
        );
    }
    // Every abusive connection was refused, under the reason the counters give it.
    assert_eq!(
        counted, seen,
        "{name}: refusals counted vs seen by the clients"
    );
    for reason in ["body", "too_large", "timeout", "idle"] {
        assert!(
            seen.get(reason).copied().unwrap_or(0) >= 1,
            "{name}: no {reason}"
        );
    }
    for i in 1..=seconds {
        let dev = tcp[i] / tcp_target - 1.0;
        assert!(
            dev.abs() <= TOLERANCE,
            "{name}: abuse second {i}: tcp goodput {:.2} Mbit/s, {:+.2} % off {:.2}",
            tcp[i] / 1e6,
            dev * 100.0,
            tcp_target / 1e6
        );
        assert!(
            wire[i] <= limits * (1.0 + WIRE_OVER),
            "{name}: abuse second {i}: wire {:.2} Mbit/s",
            wire[i] / 1e6
        );
    }
}

#[test]
fn the_metrics_endpoint_under_abuse_neither_stops_nor_slows_the_shaper() {
    let name = "http_abuse";
    // METRONOME_TEST_CPU_HOG=N: N spinning threads beside the run.
    let hog = metronome_testbed::load::CpuHog::from_env();
    let before = metronome_testbed::load::LoadSample::now();
    let Some(r) = run(name, "mtr-ha") else {
        return;
    };
    let after = metronome_testbed::load::LoadSample::now();
    common::uncaptured(&format!(
        "{name}: {}",
        metronome_testbed::load::describe(&before, &after, hog.threads())
    ));
    drop(hog);
    assert_held(name, &r);
}
