//! `metronome stats`: scrape the endpoint and print tc -s-like lines per class.
//!
//! A daemon with several silos labels every series with `silo`: the class lines and the wheel
//! line are sums over the silos (lateness buckets summed bound by bound), and one line per silo
//! follows with its share of the traffic and the allocator's rate for each class.
//!
//! The rate is computed from two scrapes [`STATS_INTERVAL`] apart: the byte counter's delta × 8
//! divided by the measured time between the two responses. (A rate gauge kept by the daemon
//! would need a window of its own; a counter delta needs nothing from the daemon and is what
//! Prometheus' `rate()` does.) The scrape is a plain HTTP/1.0 `GET /metrics` on a
//! `std::net::TcpStream`, bounded like the server it reads ([`super::http`]): a connect and
//! per-read timeout, a deadline for the whole response and a largest response, so that
//! whatever listens on the address cannot make `metronome stats` hang or exhaust memory.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Time between the two scrapes of [`fetch_and_format`]: 500 ms, long enough to average a few
/// hundred TX batches, short enough for an interactive command.
pub const STATS_INTERVAL: Duration = Duration::from_millis(500);
/// Connect timeout, and longest wait for one read or write, of a scrape: 2 s, the endpoint's
/// own [`super::http::READ_TIMEOUT`].
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a whole scrape may take: 10 s, the endpoint's [`super::http::CONNECTION_DEADLINE`]
/// (and Prometheus' default `scrape_timeout`).
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(10);
/// Largest response a scrape reads, bytes: 64 MiB, room for tens of thousands of class-silo
/// pairs of [`super::Metrics::encode`]'s text (each about a kilobyte at most with short class
/// names); a larger answer is refused with [`MetricsError::TooLarge`] rather than read.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Why the endpoint could not be served or read.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The server could not bind its address.
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// Why: the HTTP server's error, or the serving thread's spawn error.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The endpoint could not be reached or read.
    #[error("cannot read metrics from {addr}: {source}")]
    Fetch {
        /// The endpoint.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The endpoint's response exceeded the largest a scrape reads.
    #[error("metrics endpoint {addr} answered more than {max_bytes} bytes: refused")]
    TooLarge {
        /// The endpoint.
        addr: SocketAddr,
        /// The limit ([`MAX_RESPONSE_BYTES`] for [`scrape`]).
        max_bytes: usize,
    },
    /// The endpoint answered with something other than 200.
    #[error("metrics endpoint {addr} answered: {status}")]
    Status {
        /// The endpoint.
        addr: SocketAddr,
        /// Its status line.
        status: String,
    },
}

/// One `GET /metrics` over HTTP/1.0 within [`SCRAPE_DEADLINE`], of at most
/// [`MAX_RESPONSE_BYTES`]; returns the body.
pub fn scrape(addr: SocketAddr) -> Result<String, MetricsError> {
    scrape_bounded(addr, MAX_RESPONSE_BYTES, SCRAPE_DEADLINE)
}

/// [`scrape`] with a response of at most `max_bytes` (status line and headers included), all
/// of it read within `deadline`; each connect, read and write waits at most
/// [`SCRAPE_TIMEOUT`].
pub fn scrape_bounded(
    addr: SocketAddr,
    max_bytes: usize,
    deadline: Duration,
) -> Result<String, MetricsError> {
    let fetch = |source| MetricsError::Fetch { addr, source };
    let mut stream = TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT).map_err(fetch)?;
    stream
        .set_write_timeout(Some(SCRAPE_TIMEOUT))
        .map_err(fetch)?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(fetch)?;
    let response = read_bounded(&mut stream, max_bytes, deadline).map_err(|e| match e {
        ReadError::TooLarge => MetricsError::TooLarge { addr, max_bytes },
        ReadError::Io(source) => fetch(source),
    })?;
    let response = String::from_utf8(response)
        .map_err(|e| fetch(std::io::Error::new(ErrorKind::InvalidData, e)))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or("").to_owned();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(MetricsError::Status { addr, status });
    }
    Ok(body.to_owned())
}

/// Why [`read_bounded`] stopped.
enum ReadError {
    TooLarge,
    Io(std::io::Error),
}

/// Reads `stream` to its end: at most `max_bytes`, each read waiting at most
/// [`SCRAPE_TIMEOUT`], all of them done within `deadline`. A timeout is a `TimedOut` error that
/// says which one ran out.
fn read_bounded(
    stream: &mut TcpStream,
    max_bytes: usize,
    deadline: Duration,
) -> Result<Vec<u8>, ReadError> {
    let end = Instant::now() + deadline;
    let timed_out = |what: String| ReadError::Io(std::io::Error::new(ErrorKind::TimedOut, what));
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(format!(
                "response not complete within {deadline:?}"
            )));
        }
        stream
            .set_read_timeout(Some(left.min(SCRAPE_TIMEOUT)))
            .map_err(ReadError::Io)?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) if out.len() + n > max_bytes => return Err(ReadError::TooLarge),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(timed_out(if Instant::now() >= end {
                    format!("response not complete within {deadline:?}")
                } else {
                    format!("nothing received for {SCRAPE_TIMEOUT:?}")
                }));
            }
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

/// Scrapes `addr` twice, [`STATS_INTERVAL`] apart, and formats the second scrape with rates
/// from the difference (see [`format_stats`]).
pub fn fetch_and_format(addr: SocketAddr) -> Result<String, MetricsError> {
    let first = scrape(addr)?;
    let t0 = Instant::now();
    std::thread::sleep(STATS_INTERVAL);
    let second = scrape(addr)?;
    Ok(format_stats(&first, &second, t0.elapsed()))
}

/// One sample line: name, labels, value.
#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `name{k="v",...} value [timestamp]`; `None` for comments and lines it cannot read.
fn parse_line(line: &str) -> Option<Sample> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices();
        let (mut key, mut value, mut in_value, mut escaped) =
            (String::new(), String::new(), false, false);
        let mut end = None;
        for (i, c) in chars.by_ref() {
            match (in_value, escaped, c) {
                (true, true, 'n') => (value.push('\n'), escaped = false).1,
                (true, true, c) => (value.push(c), escaped = false).1,
                (true, false, '\\') => escaped = true,
                (true, false, '"') => {
                    labels.push((std::mem::take(&mut key), std::mem::take(&mut value)));
                    in_value = false;
                }
                (true, false, c) => value.push(c),
                (false, _, '"') => in_value = true,
                (false, _, '}') => {
                    end = Some(i);
                    break;
                }
                (false, _, '=' | ',' | ' ') => {}
                (false, _, c) => key.push(c),
            }
        }
        rest = &after[end? + 1..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

#[derive(Clone, Copy, Debug, Default)]
struct ClassLine {
    bytes: f64,
    packets: f64,
    dropped: f64,
    ecn_marked: f64,
    queued: f64,
    /// Flows with packets waiting, for a fair class (`class_fair_flows`).
    fair_flows: Option<f64>,
    /// Packets of a fair class that waited in its overflow flow.
    fair_overflow: f64,
    /// In a class tree: its share of its parent in force (`class_share_bps`, summed over silos).
    share: Option<f64>,
}

/// One silo's traffic (all classes) and allocator rates.
#[derive(Debug, Default)]
struct SiloLine {
    bytes: f64,
    packets: f64,
    /// (class, bit/s) from `nba_rate_bps`.
    nba: Vec<(String, f64)>,
}

/// One class's series on the shared link.
#[derive(Clone, Copy, Debug, Default)]
struct LinkClassLine {
    bytes: f64,
    packets: f64,
    marks: f64,
    not_ect: f64,
    queue_bytes: f64,
    queue_packets: f64,
    threshold: f64,
    delay_max_ns: f64,
}

/// The shared link's own series; `rate_bps` is `None` without a link.
#[derive(Debug, Default)]
struct LinkLine {
    rate_bps: Option<f64>,
    bytes: f64,
    round_time_ns: f64,
    classes: BTreeMap<String, LinkClassLine>,
}

/// One cluster class (`cluster_*_bps`, `cluster_peers`).
#[derive(Clone, Copy, Debug, Default)]
struct ClusterClassLine {
    limit: f64,
    share: f64,
    peers: f64,
}

/// The cluster agent's series; `classes` is empty without a `[cluster]`.
#[derive(Debug, Default)]
struct ClusterLine {
    classes: BTreeMap<String, ClusterClassLine>,
    revision: f64,
    age_seconds: f64,
    reachable: bool,
    state: Option<String>,
}

#[derive(Debug, Default)]
struct Summary {
    classes: BTreeMap<String, ClassLine>,
    /// Each class in a tree and its parent.
    parents: BTreeMap<String, String>,
    cluster: ClusterLine,
    link: LinkLine,
    silos: BTreeMap<u32, SiloLine>,
    occupancy: f64,
    rx_ring_drops: f64,
    malformed: f64,
    pass_through: f64,
    // (upper bound, cumulative count) of the lateness histogram.
    lateness: Vec<(f64, f64)>,
}

fn summarise(text: &str) -> Summary {
    let mut s = Summary::default();
    for sample in text.lines().filter_map(parse_line) {
        let name = sample
            .name
            .strip_prefix("metronome_")
            .unwrap_or(&sample.name);
        let silo = sample.label("silo").and_then(|v| v.parse::<u32>().ok());
        if let Some(field) = name.strip_prefix("cluster_") {
            let c = &mut s.cluster;
            let v = sample.value;
            match (field, sample.label("class")) {
                ("limit_bps", Some(class)) => {
                    c.classes.entry(class.to_owned()).or_default().limit = v
                }
                ("share_bps", Some(class)) => {
                    c.classes.entry(class.to_owned()).or_default().share = v
                }
                ("peers", Some(class)) => c.classes.entry(class.to_owned()).or_default().peers = v,
                ("revision", _) => c.revision = v,
                ("revision_age_seconds", _) => c.age_seconds = v,
                ("etcd_reachable", _) => c.reachable = v == 1.0,
                ("state", _) if v == 1.0 => c.state = sample.label("state").map(str::to_owned),
                _ => {}
            }
            continue;
        }
        if let Some(class) = sample.label("class") {
            if let Some(i) = silo {
                let line = s.silos.entry(i).or_default();
                match name {
                    "class_bytes_total" => line.bytes += sample.value,
                    "class_packets_total" => line.packets += sample.value,
                    "nba_rate_bps" => line.nba.push((class.to_owned(), sample.value)),
                    _ => {}
                }
            }
            if let Some(field) = name.strip_prefix("link_class_") {
                let l = s.link.classes.entry(class.to_owned()).or_default();
                let v = sample.value;
                match field {
                    "bytes_total" => l.bytes += v,
                    "packets_total" => l.packets += v,
                    "marks_total" => l.marks += v,
                    "not_ect_total" => l.not_ect += v,
                    "queue_bytes" => l.queue_bytes += v,
                    "queue_packets" => l.queue_packets += v,
                    "threshold_bytes" => l.threshold = v,
                    "delay_max_ns" => l.delay_max_ns = l.delay_max_ns.max(v),
                    _ => {}
                }
                continue;
            }
            let c = s.classes.entry(class.to_owned()).or_default();
            match name {
                "class_bytes_total" => c.bytes += sample.value,
                "class_packets_total" => c.packets += sample.value,
                "class_drops_total" => c.dropped += sample.value,
                "class_ecn_marks_total" => c.ecn_marked += sample.value,
                "class_queued_packets" => c.queued += sample.value,
                "class_fair_flows" => *c.fair_flows.get_or_insert(0.0) += sample.value,
                "class_fair_overflow_total" => c.fair_overflow += sample.value,
                "class_share_bps" => {
                    *c.share.get_or_insert(0.0) += sample.value;
                    if let Some(parent) = sample.label("parent") {
                        s.parents.insert(class.to_owned(), parent.to_owned());
                    }
                }
                _ => {}
            }
            continue;
        }
        match name {
            "wheel_occupancy_packets" => s.occupancy += sample.value,
            "link_rate_bps" => s.link.rate_bps = Some(sample.value),
            "link_bytes_total" => s.link.bytes += sample.value,
            "link_round_time_ns" => s.link.round_time_ns = sample.value,
            "rx_ring_drops_total" => s.rx_ring_drops += sample.value,
            "malformed_frames_total" => s.malformed += sample.value,
            "pass_through_packets_total" => s.pass_through += sample.value,
            "lateness_ns_bucket" => {
                let le = sample
                    .label("le")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::INFINITY);
                // Silos' histograms share their bounds: sum bound by bound.
                match s.lateness.iter_mut().find(|(b, _)| *b == le) {
                    Some(bucket) => bucket.1 += sample.value,
                    None => s.lateness.push((le, sample.value)),
                }
            }
            _ => {}
        }
    }
    s
}

/// The classes in the order `stats` prints them, each with its level in the class tree: by
/// name, each under its parent (whose line holds its subtree's counts).
fn tree_order(s: &Summary) -> Vec<(&str, usize)> {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut roots = Vec::new();
    for name in s.classes.keys() {
        match s.parents.get(name).filter(|p| s.classes.contains_key(*p)) {
            Some(p) => children.entry(p.as_str()).or_default().push(name),
            None => roots.push(name.as_str()),
        }
    }
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<(&str, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((name, level)) = stack.pop() {
        if !seen.insert(name) {
            continue;
        }
        out.push((name, level));
        if let Some(kids) = children.get(name) {
            stack.extend(kids.iter().rev().map(|k| (*k, level + 1)));
        }
    }
    // A loop (which the daemon refuses) still shows every class.
    for name in s.classes.keys() {
        if !seen.contains(name.as_str()) {
            out.push((name, 0));
        }
    }
    out
}

/// A rate in tc's style: `199.8Mbit`, `1.2Gbit`, `800.0Kbit`, `12bit`.
pub fn format_rate(bps: f64) -> String {
    match bps {
        b if b >= 1e9 => format!("{:.1}Gbit", b / 1e9),
        b if b >= 1e6 => format!("{:.1}Mbit", b / 1e6),
        b if b >= 1e3 => format!("{:.1}Kbit", b / 1e3),
        b => format!("{:.0}bit", b.max(0.0)),
    }
}

/// The smallest bucket bound holding at least `q` of the observations, in microseconds.
fn quantile_us(cumulative: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    cumulative
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| le / 1e3)
}

/// A duration in nanoseconds as `850ns`, `12.5us` or `3.2ms`.
fn format_ns(ns: f64) -> String {
    match ns {
        n if n >= 1e6 => format!("{:.1}ms", n / 1e6),
        n if n >= 1e3 => format!("{:.1}us", n / 1e3),
        n => format!("{:.0}ns", n.max(0.0)),
    }
}

/// The shared link's lines, like `tc -s class show` of an HTB root and its leaves: the link's
/// rate, its measured rate and MQ-ECN's round time, then per class its bytes on the link, its
/// share of what the link sent in the interval, its backlog, marks and threshold:
///
/// ```text
/// link: rate 1.0Gbit sent 123456 bytes rate 987.6Mbit round 1.2ms
///   class a: sent 30864 bytes 21 pkt rate 246.9Mbit share 25.0% backlog 45420b 30p marked 4 not-ect 0 threshold 15000b delay max 2.1ms
/// ```
fn format_link(before: &LinkLine, now: &LinkLine, secs: f64, out: &mut String) {
    // The rate gauge is registered always and stays 0 without a `[link]`.
    let Some(rate) = now.rate_bps.filter(|r| *r > 0.0) else {
        return;
    };
    let link_delta = (now.bytes - before.bytes).max(0.0);
    let round = if now.round_time_ns > 0.0 {
        format_ns(now.round_time_ns)
    } else {
        "n/a".to_owned()
    };
    out.push_str(&format!(
        "link: rate {} sent {:.0} bytes rate {} round {round}\n",
        format_rate(rate),
        now.bytes,
        format_rate(link_delta * 8.0 / secs)
    ));
    for (name, c) in &now.classes {
        let prev = before.classes.get(name).map_or(c.bytes, |p| p.bytes);
        let delta = (c.bytes - prev).max(0.0);
        let share = if link_delta > 0.0 {
            format!("{:.1}%", 100.0 * delta / link_delta)
        } else {
            "n/a".to_owned()
        };
        let threshold = if c.threshold < 0.0 {
            "none".to_owned()
        } else {
            format!("{:.0}b", c.threshold)
        };
        out.push_str(&format!(
            "  class {name}: sent {:.0} bytes {:.0} pkt rate {} share {share} backlog {:.0}b {:.0}p \
             marked {:.0} not-ect {:.0} threshold {threshold} delay max {}\n",
            c.bytes,
            c.packets,
            format_rate(delta * 8.0 / secs),
            c.queue_bytes,
            c.queue_packets,
            c.marks,
            c.not_ect,
            format_ns(c.delay_max_ns)
        ));
    }
}

/// Formats `second` as one line per class plus one line for the wheel and the I/O path; rates
/// come from the byte counters' difference to `first` over `elapsed`:
///
/// ```text
/// class A: sent 123456 bytes 789 pkt (dropped 0, ecn marked 3) rate 199.8Mbit queued 12
/// class B: sent 98765 bytes 65 pkt (dropped 0, ecn marked 0) rate 99.9Mbit queued 40 fair flows 16 (overflow 0)
/// wheel: occupancy 40 pkt, lateness p99 <= 16us; rx ring drops 0, malformed 0, pass-through 12 pkt
/// ```
pub fn format_stats(first: &str, second: &str, elapsed: Duration) -> String {
    let (before, now) = (summarise(first), summarise(second));
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut out = String::new();
    for (name, level) in tree_order(&now) {
        let c = &now.classes[name];
        let prev = before.classes.get(name).map_or(c.bytes, |p| p.bytes);
        let rate = format_rate((c.bytes - prev).max(0.0) * 8.0 / secs);
        out.push_str(&"  ".repeat(level));
        out.push_str(&format!(
            "class {name}: sent {:.0} bytes {:.0} pkt (dropped {:.0}, ecn marked {:.0}) rate {rate} queued {:.0}",
            c.bytes, c.packets, c.dropped, c.ecn_marked, c.queued
        ));
        if let Some(share) = c.share {
            out.push_str(&format!(" share {}", format_rate(share)));
        }
        if let Some(flows) = c.fair_flows {
            out.push_str(&format!(
                " fair flows {flows:.0} (overflow {:.0})",
                c.fair_overflow
            ));
        }
        out.push('\n');
    }
    let lateness = quantile_us(&now.lateness, 0.99).map_or("n/a".to_owned(), |us| {
        if us.is_finite() {
            format!("<= {us:.0}us")
        } else {
            "> histogram range".to_owned()
        }
    });
    out.push_str(&format!(
        "wheel: occupancy {:.0} pkt, lateness p99 {lateness}; rx ring drops {:.0}, malformed {:.0}, pass-through {:.0} pkt\n",
        now.occupancy, now.rx_ring_drops, now.malformed, now.pass_through
    ));
    format_link(&before.link, &now.link, secs, &mut out);
    let cluster = &now.cluster;
    for (name, c) in &cluster.classes {
        out.push_str(&format!(
            "cluster class {name}: limit {}, share {}, peers {:.0}; etcd revision {:.0} ({:.1}s ago, {}), state {}\n",
            format_rate(c.limit),
            format_rate(c.share),
            c.peers,
            cluster.revision,
            cluster.age_seconds,
            if cluster.reachable { "reachable" } else { "unreachable" },
            cluster.state.as_deref().unwrap_or("unknown"),
        ));
    }
    for (i, silo) in &now.silos {
        let prev = before.silos.get(i).map_or(silo.bytes, |p| p.bytes);
        let rate = format_rate((silo.bytes - prev).max(0.0) * 8.0 / secs);
        out.push_str(&format!(
            "silo {i}: sent {:.0} bytes {:.0} pkt rate {rate}",
            silo.bytes, silo.packets
        ));
        for (class, bps) in &silo.nba {
            out.push_str(&format!(", nba {class} {}", format_rate(*bps)));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_tree_prints_each_class_under_its_parent_with_its_share() {
        let text = "metronome_class_bytes_total{class=\"tenant\"} 3000\n\
                    metronome_class_bytes_total{class=\"b\"} 1000\n\
                    metronome_class_bytes_total{class=\"a\"} 2000\n\
                    metronome_class_bytes_total{class=\"solo\"} 5\n\
                    metronome_class_share_bps{class=\"a\",parent=\"tenant\"} 150000000\n\
                    metronome_class_share_bps{class=\"b\",parent=\"tenant\"} 150000000\n";
        let out = format_stats(text, text, Duration::from_millis(500));
        let names: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("class "))
            .collect();
        assert!(names[0].starts_with("class solo:"), "{out}");
        assert!(names[1].starts_with("class tenant:"), "{out}");
        assert!(names[2].starts_with("  class a:"), "{out}");
        assert!(names[2].ends_with("share 150.0Mbit"), "{out}");
        assert!(names[3].starts_with("  class b:"), "{out}");
    }

    #[test]
    fn a_cluster_class_line_shows_limit_share_peers_and_the_revision() {
        let text = "metronome_cluster_limit_bps{class=\"t\"} 300000000\n\
                    metronome_cluster_share_bps{class=\"t\"} 150000000\n\
                    metronome_cluster_peers{class=\"t\"} 2\n\
                    metronome_cluster_revision 812\n\
                    metronome_cluster_revision_age_seconds 0.25\n\
                    metronome_cluster_etcd_reachable 1\n\
                    metronome_cluster_state{state=\"joining\"} 0\n\
                    metronome_cluster_state{state=\"shared\"} 1\n";
        let out = format_stats(text, text, Duration::from_millis(500));
        assert!(
            out.contains(
                "cluster class t: limit 300.0Mbit, share 150.0Mbit, peers 2; etcd revision 812 \
                 (0.2s ago, reachable), state shared"
            ),
            "{out}"
        );
        assert!(!out.contains("class t: sent"), "{out}");
    }

    #[test]
    fn parses_labels_with_escapes() {
        let s =
            parse_line(r#"metronome_class_bytes_total{class="a \"b\"",x="1"} 42"#).expect("sample");
        assert_eq!(s.name, "metronome_class_bytes_total");
        assert_eq!(s.label("class"), Some("a \"b\""));
        assert_eq!(s.label("x"), Some("1"));
        assert_eq!(s.value, 42.0);
        assert_eq!(
            parse_line("metronome_rx_ring_drops_total 7").map(|s| s.value),
            Some(7.0)
        );
        assert!(parse_line("# HELP x y").is_none());
        assert!(parse_line("garbage{").is_none());
    }

    #[test]
    fn a_fair_class_line_shows_its_flows() {
        let text = "metronome_class_bytes_total{class=\"f\"} 10\n\
                    metronome_class_fair_flows{class=\"f\"} 16\n\
                    metronome_class_fair_overflow_total{class=\"f\"} 2\n\
                    metronome_class_bytes_total{class=\"g\"} 10\n";
        let out = format_stats(text, text, Duration::from_secs(1));
        assert!(
            out.contains("queued 0 fair flows 16 (overflow 2)\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "class g: sent 10 bytes 0 pkt (dropped 0, ecn marked 0) rate 0bit queued 0\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn rates_look_like_tc() {
        assert_eq!(format_rate(199.8e6), "199.8Mbit");
        assert_eq!(format_rate(1.25e9), "1.2Gbit");
        assert_eq!(format_rate(800e3), "800.0Kbit");
        assert_eq!(format_rate(12.0), "12bit");
    }
}
