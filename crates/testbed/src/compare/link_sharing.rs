//! `metronome compare --link-sharing`: one link shared by weighted and priority classes, through
//! the Metronome daemon's `[link]` (a multi-queue port drained at the link rate, MQ-ECN §3–§4)
//! and through kernel HTB, on the same path with the same traffic.
//!
//! The topology is [`Topology::bump_in_the_wire`], as for the rest of `compare`. For each
//! [`Scenario`] the shapers ([`Shaper`], started by [`arms`]) take turns on the shaper
//! namespace: the daemon's `[link]` ([`link_config`]) and kernel HTB ([`htb_commands`]).
//!
//! The senders, and what is measured per class, are [`run`]'s.

mod arms;

use super::measure;
use super::{CompareError, OffloadMode, Shaper, START_POLL, START_TIMEOUT};
use crate::netns::Topology;
use crate::trafficgen::sleep_until;
use crate::trafficgen::{self, FlowGroup, ProbeReport, TrafficError, TrafficPlan, TrafficReport};
pub use arms::{htb_commands, link_config, parse_htb_backlogs};
use arms::{start, Active};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::time::{Duration, Instant};

/// The daemon's `[link] rtt` in the comparison: 8 ms, the round trip of this path through the
/// daemon on a loaded 2-core machine rather than the wire's. Measured with `--link-rtt-us`: at
/// the default 500 µs (a standard threshold of 62.5 kB at 1 Gbit/s, less than one 64 KiB
/// super-frame of the senders' TSO) and at 2 ms the marks kept the Cubic senders at 33–75 % of
/// the link; at 8 ms they filled it.
pub const DEFAULT_LINK_RTT: Duration = Duration::from_millis(8);
/// Prefix of the link-sharing comparison's namespaces.
pub const NS_PREFIX: &str = "mtr-lnk";
/// The link's rate, bits/s: 1 Gbit/s.
pub const LINK_BPS: u64 = 1_000_000_000;
/// The goodput window: 20 ms, so that borrowing is resolved to tens of milliseconds.
pub const SAMPLE: Duration = Duration::from_millis(20);
/// How often the classes' queues are sampled: every 10 ms (Metronome, an in-process read) or
/// every 50 ms (HTB, one `tc` run each, which costs a few milliseconds of CPU).
pub const QUEUE_SAMPLE: Duration = Duration::from_millis(10);
/// [`QUEUE_SAMPLE`] for HTB.
pub const HTB_QUEUE_SAMPLE: Duration = Duration::from_millis(50);
/// Part of the link the remaining classes must carry for borrowing to count as done.
pub const BORROW_SHARE: f64 = 0.98;
/// The senders' congestion control.
pub const CONGESTION: &str = "cubic";
/// The daemon's gauge of a link class's queued bytes, labelled `class`.
pub const LINK_QUEUE_METRIC: &str = "metronome_link_class_queue_bytes";
/// First destination port; class `i` of run `r` uses `BASE_PORT + 16 r + i`, the probe the
/// port after the classes', so no run meets a previous run's connections.
const BASE_PORT: u16 = 30_000;
/// Traffic kept running after the measured interval, so no flow stops inside it.
const TAIL: Duration = Duration::from_millis(300);
/// Bytes at the receiver that mark the start of the bulk traffic (as in `compare`).
const START_BYTES: u64 = 64 << 10;

/// A link-sharing scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Two classes, weights 1:3, 16 flows each.
    Shares,
    /// The same, the first class stopping half-way through.
    Borrow,
    /// Four classes of equal weight with 1, 2, 4 and 8 flows; MQ-ECN against per-queue marking.
    Marking,
    /// A priority class carrying the probe while two weighted classes saturate the link.
    Priority,
}

impl Scenario {
    /// All four, in report order.
    pub const ALL: [Scenario; 4] = [
        Scenario::Shares,
        Scenario::Borrow,
        Scenario::Marking,
        Scenario::Priority,
    ];

    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Shares => "shares",
            Scenario::Borrow => "borrow",
            Scenario::Marking => "marking",
            Scenario::Priority => "priority",
        }
    }

    /// The scenario's classes.
    pub fn classes(self) -> Vec<ClassSpec> {
        let bulk = |name: &str, weight, flows| ClassSpec {
            name: name.to_owned(),
            weight,
            priority: false,
            flows,
            stops_half_way: false,
        };
        match self {
            Scenario::Shares => vec![bulk("a", 1, 16), bulk("b", 3, 16)],
            Scenario::Borrow => {
                let mut first = bulk("a", 1, 16);
                first.stops_half_way = true;
                vec![first, bulk("b", 3, 16)]
            }
            Scenario::Marking => vec![
                bulk("f1", 1, 1),
                bulk("f2", 1, 2),
                bulk("f4", 1, 4),
                bulk("f8", 1, 8),
            ],
            Scenario::Priority => vec![
                ClassSpec {
                    priority: true,
                    ..bulk("probe", 1, 0)
                },
                bulk("a", 1, 16),
                bulk("b", 3, 16),
            ],
        }
    }

    /// The shapers compared in this scenario.
    pub fn shapers(self) -> Vec<Shaper> {
        match self {
            Scenario::Marking => vec![Shaper::Metronome, Shaper::MetronomePerQueue, Shaper::Htb],
            _ => vec![Shaper::Metronome, Shaper::Htb],
        }
    }

    /// Whether a class carries the RTT probe.
    pub fn has_probe(self) -> bool {
        self == Scenario::Priority
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown scenario {s:?}: shares, borrow, marking or priority"))
    }
}

/// One class of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSpec {
    /// Its name (the daemon's class name, the report's `class`).
    pub name: String,
    /// Its weight among the weighted classes.
    pub weight: u32,
    /// A strict-priority class (above the weighted ones).
    pub priority: bool,
    /// Bulk TCP connections (0: only the probe).
    pub flows: usize,
    /// Stops writing half-way through the measured interval ([`Scenario::Borrow`]).
    pub stops_half_way: bool,
}

/// Marking on the daemon's link queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marking {
    /// MQ-ECN (MQ-ECN §3: per-queue thresholds from the measured round time).
    MqEcn,
    /// Per-queue standard marking (a fixed threshold on each queue).
    PerQueue,
}

impl Marking {
    /// The configuration's name for it.
    pub fn config_name(self) -> &'static str {
        match self {
            Marking::MqEcn => "mq-ecn",
            Marking::PerQueue => "per-queue",
        }
    }
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkOptions {
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The link's rate, bits/s.
    pub link_bps: u64,
    /// Skipped after the writers start (slow start, the first queues).
    pub warmup: Duration,
    /// Measured after the warm-up.
    pub measure: Duration,
    /// The veths' offloads.
    pub offloads: OffloadMode,
    /// The shapers run, each in the scenarios that compare it ([`Scenario::shapers`]).
    pub shapers: Vec<Shaper>,
    /// The daemon's `[link] rtt`: the base round-trip time of its marking thresholds
    /// (`K = C x RTT x lambda`).
    pub link_rtt: Duration,
}

impl LinkOptions {
    /// Every scenario, 1 s warm-up, 8 s measured (4 s on each side of the borrowing scenario's
    /// stop).
    pub fn full() -> Self {
        LinkOptions {
            scenarios: Scenario::ALL.to_vec(),
            link_bps: LINK_BPS,
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(8),
            offloads: OffloadMode::Host,
            shapers: Shaper::LINK.to_vec(),
            link_rtt: DEFAULT_LINK_RTT,
        }
    }

    /// `--quick`: every scenario, 1 s warm-up, 3 s measured: 9 runs of 4.3 s plus their set-up,
    /// about a minute.
    pub fn quick() -> Self {
        LinkOptions {
            measure: Duration::from_secs(3),
            ..LinkOptions::full()
        }
    }
}

/// One row of the report: one class under one shaper in one scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkRow {
    /// `metronome`, `metronome-per-queue` or `htb`.
    pub shaper: String,
    /// The scenario.
    pub scenario: Scenario,
    /// The class.
    pub class: String,
    /// Its weight.
    pub weight: u32,
    /// Whether it is a strict-priority class.
    pub priority: bool,
    /// Its bulk TCP connections.
    pub flows: usize,
    /// Its weight's part of the weighted classes, percent; `None` for a priority class.
    pub expected_share_pct: Option<f64>,
    /// Mean rate on the wire over the measured interval, bits/s.
    pub achieved_bps: f64,
    /// Its part of what the weighted classes achieved together, percent; `None` for a
    /// priority class.
    pub share_pct: Option<f64>,
    /// Its rate in percent of the link.
    pub link_pct: f64,
    /// 99th percentile of its queued bytes; `None` when not sampled.
    pub queue_p99_bytes: Option<u64>,
    /// Mean of its queued bytes; `None` when not sampled.
    pub queue_avg_bytes: Option<f64>,
    /// 99th percentile RTT of the probe in this class, microseconds; `None` without a probe or
    /// an answer.
    pub rtt_p99_us: Option<u64>,
    /// [`Scenario::Borrow`], on the classes that keep running: milliseconds from the first
    /// class's stop until the remaining classes carry [`BORROW_SHARE`] of the link; `None`
    /// elsewhere, or when they never did.
    pub borrow_ms: Option<f64>,
    /// [`Scenario::Borrow`], on the classes that keep running: the remaining classes' rate
    /// together after the stop, percent of the link.
    pub after_stop_link_pct: Option<f64>,
}

/// Runs the scenarios of `options`: builds the topology, runs every (scenario, shaper) and
/// removes everything. One progress line per class and run goes to `progress`.
///
/// The senders ([`crate::trafficgen`]) are kernel TCP with Cubic set per socket
/// (`TCP_CONGESTION`, [`CONGESTION`]) and ECN on in the sender namespace
/// (`net.ipv4.tcp_ecn=1`). Each class is one flow group to its own destination port.
///
/// Measured, per class, over the measured interval (after [`LinkOptions::warmup`] from the
/// writers' start, for [`LinkOptions::measure`]):
///
/// * **achieved_bps**: the class's goodput windows of [`SAMPLE`] at its sinks, scaled to bytes on
///   the wire of full segments ([`measure::WIRE_PER_PAYLOAD`]: Ethernet header included, as the
///   rest of `compare` counts). `share_pct` is the class's part of what the weighted classes
///   together achieved (the division the weights govern); `link_pct` is its rate in percent of
///   the link.
/// * **queue**: the class's queued bytes sampled every [`QUEUE_SAMPLE`] (Metronome: the
///   daemon's per-class link queue gauge, [`LINK_QUEUE_METRIC`]; HTB: the leaf's backlog from
///   `tc -s class show`), their p99 (nearest rank) and mean.
/// * **borrowing** ([`Scenario::Borrow`]): the first class stops writing half-way through the
///   measured interval; `borrow_ms` is the time from that instant to the end of the first
///   [`SAMPLE`] window in which the remaining classes together carry at least [`BORROW_SHARE`]
///   of the link.
/// * **probe RTT** ([`Scenario::Priority`]): a TCP ping every 10 ms in the priority class while
///   the others saturate the link, opened at the start of the measured interval; its p99.
pub fn run(options: &LinkOptions, progress: &mut dyn Write) -> Result<Vec<LinkRow>, CompareError> {
    let _ = crate::netns::remove_stale(NS_PREFIX);
    let mut topo = Topology::bump_in_the_wire(NS_PREFIX)?;
    options.offloads.apply(&mut topo)?;
    topo.enable_sender_ecn();
    let mut rows = Vec::new();
    let mut index: u16 = 0;
    for &scenario in &options.scenarios {
        let shapers = scenario.shapers();
        for shaper in shapers.into_iter().filter(|s| options.shapers.contains(s)) {
            let base = BASE_PORT.saturating_add(index.saturating_mul(16));
            index = (index + 1) % 2000;
            let run_rows = run_one(&mut topo, options, scenario, shaper, base)?;
            for r in &run_rows {
                let _ = writeln!(progress, "{}", progress_line(r));
            }
            rows.extend(run_rows);
        }
    }
    topo.remove()?;
    Ok(rows)
}

fn progress_line(r: &LinkRow) -> String {
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("{x:.2}"));
    format!(
        "{:<20} {:<8} {:<6} w{} {:>2} flows: {:>8.2} Mbit/s, share {} % (expected {}), queue \
         p99 {} B avg {}{}{}",
        r.shaper,
        r.scenario.name(),
        r.class,
        r.weight,
        r.flows,
        r.achieved_bps / 1e6,
        opt(r.share_pct),
        opt(r.expected_share_pct),
        r.queue_p99_bytes.map_or("-".to_owned(), |b| b.to_string()),
        opt(r.queue_avg_bytes),
        if r.priority {
            format!(", probe p99 {} us", super::format_rtt_us(r.rtt_p99_us))
        } else {
            String::new()
        },
        r.borrow_ms
            .map(|b| format!(", borrowed in {b:.0} ms"))
            .unwrap_or_default()
    )
}

type TrafficThread = std::thread::JoinHandle<Result<TrafficReport, TrafficError>>;

fn spawn_traffic(topo: &Topology, plan: TrafficPlan) -> TrafficThread {
    let (snd, rcv) = (topo.sender.clone(), topo.receiver.clone());
    std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)))
}

/// What one run saw besides the traffic reports.
struct Seen {
    queues: Vec<Vec<u64>>,
    probe: Option<ProbeReport>,
}

fn run_one(
    topo: &mut Topology,
    options: &LinkOptions,
    scenario: Scenario,
    shaper: Shaper,
    base: u16,
) -> Result<Vec<LinkRow>, CompareError> {
    let classes = scenario.classes();
    let ports: Vec<u16> = (0..classes.len() as u16).map(|i| base + i).collect();
    let pairs: Vec<(&ClassSpec, u16)> = classes.iter().zip(ports.iter().copied()).collect();
    let active = start(topo, options, shaper, &pairs)?;
    let result = drive(topo, options, scenario, &classes, &ports, &active);
    let stopped = active.stop(topo);
    let (reports, seen) = result?;
    stopped?;
    Ok(rows_of(
        options,
        (scenario, shaper),
        &classes,
        &reports,
        seen,
    ))
}

/// The whole run of every bulk plan: warm-up, measured interval, tail.
fn bulk_duration(options: &LinkOptions) -> Duration {
    options.warmup + options.measure + TAIL
}

/// The run of a class that stops half-way through the measured interval.
fn half_duration(options: &LinkOptions) -> Duration {
    options.warmup + options.measure / 2
}

/// Drives the traffic: one plan for the classes that run throughout, one for those that stop
/// half-way; the probe from the start of the measured interval; the queues sampled over it.
fn drive(
    topo: &Topology,
    options: &LinkOptions,
    scenario: Scenario,
    classes: &[ClassSpec],
    ports: &[u16],
    active: &Active,
) -> Result<(Vec<(bool, TrafficReport)>, Seen), CompareError> {
    let mut plans = Vec::new();
    for half in [false, true] {
        let groups: Vec<FlowGroup> = classes
            .iter()
            .zip(ports)
            .filter(|(c, _)| c.flows > 0 && c.stops_half_way == half)
            .map(|(c, &p)| FlowGroup::tcp(&c.name, p, c.flows))
            .collect();
        if groups.is_empty() {
            continue;
        }
        let duration = if half {
            half_duration(options)
        } else {
            bulk_duration(options)
        };
        let mut plan =
            TrafficPlan::new(topo.receiver_addr, groups, duration).with_congestion(CONGESTION);
        plan.window = SAMPLE;
        plans.push((half, plan));
    }
    let mut counters = topo.receiver.interface_counters(&topo.receiver_if)?;
    let base_bytes = counters.read()?.rx_bytes;
    let threads: Vec<(bool, TrafficThread)> = plans
        .into_iter()
        .map(|(half, p)| (half, spawn_traffic(topo, p)))
        .collect();
    let flows: usize = classes.iter().map(|c| c.flows).sum();
    let threshold = START_BYTES + 200 * flows as u64;
    let give_up = Instant::now() + START_TIMEOUT;
    let started = loop {
        if counters.read()?.rx_bytes.saturating_sub(base_bytes) > threshold {
            break true;
        }
        if threads.iter().any(|(_, t)| t.is_finished()) || Instant::now() > give_up {
            break false;
        }
        std::thread::sleep(START_POLL);
    };
    let mut seen = Seen {
        queues: vec![Vec::new(); classes.len()],
        probe: None,
    };
    if started {
        let first = Instant::now() + options.warmup;
        sleep_until(first);
        let probe = scenario.has_probe().then(|| {
            let port = ports[classes.iter().position(|c| c.priority).unwrap_or(0)];
            let plan = TrafficPlan::new(topo.receiver_addr, Vec::new(), options.measure)
                .with_probe(port)
                .with_congestion(CONGESTION);
            spawn_traffic(topo, plan)
        });
        let tick = active.queue_sample();
        let n = (options.measure.as_nanos() / tick.as_nanos()).max(1) as u32;
        for k in 1..=n {
            for (q, v) in seen.queues.iter_mut().zip(active.queues(topo, classes)) {
                q.extend(v);
            }
            sleep_until(first + tick * k);
        }
        if let Some(p) = probe {
            seen.probe = p.join().map_err(|_| TrafficError::ThreadPanicked)??.probe;
        }
    }
    let mut reports = Vec::new();
    for (half, t) in threads {
        reports.push((half, t.join().map_err(|_| TrafficError::ThreadPanicked)??));
    }
    if !started {
        return Err(CompareError::NoTraffic {
            shaper: "link-sharing",
            target_bps: options.link_bps,
            flows,
        });
    }
    Ok((reports, seen))
}

/// A class's wire-rate windows of [`SAMPLE`] as `(end instant, bits/s)`.
fn class_windows(reports: &[TrafficReport], name: &str) -> Vec<(Instant, f64)> {
    reports
        .iter()
        .flat_map(|r| {
            r.groups
                .iter()
                .filter(|g| g.name == name)
                .flat_map(move |g| {
                    g.windows_bps.iter().enumerate().map(move |(k, &bps)| {
                        (
                            r.started + SAMPLE * (k as u32 + 1),
                            bps * measure::WIRE_PER_PAYLOAD,
                        )
                    })
                })
        })
        .collect()
}

/// The mean of the windows that lie wholly inside `[from, to]`.
fn mean_between(windows: &[(Instant, f64)], from: Instant, to: Instant) -> f64 {
    let inside: Vec<f64> = windows
        .iter()
        .filter(|(end, _)| *end >= from + SAMPLE && *end <= to)
        .map(|(_, bps)| *bps)
        .collect();
    crate::stats::mean(&inside)
}

/// Milliseconds from `stop` to the end of the first window after it in which `rates` (one
/// window series per remaining class, on one grid) sum to at least `floor_bps`.
pub fn borrow_ms(sums: &[(Instant, f64)], stop: Instant, floor_bps: f64) -> Option<f64> {
    sums.iter()
        .find(|(end, bps)| *end > stop && *bps >= floor_bps)
        .map(|(end, _)| end.saturating_duration_since(stop).as_secs_f64() * 1e3)
}

/// The rows of one run from its traffic reports (`true`: the plan of the classes that stop
/// half-way) and what was sampled beside them.
fn rows_of(
    options: &LinkOptions,
    (scenario, shaper): (Scenario, Shaper),
    classes: &[ClassSpec],
    plans: &[(bool, TrafficReport)],
    seen: Seen,
) -> Vec<LinkRow> {
    let reports: Vec<TrafficReport> = plans.iter().map(|(_, r)| r.clone()).collect();
    let reports = reports.as_slice();
    let link = options.link_bps as f64;
    // The measured interval starts a warm-up after the last plan's writers started.
    let start = reports
        .iter()
        .map(|r| r.started)
        .max()
        .unwrap_or_else(Instant::now)
        + options.warmup;
    let end = start + options.measure;
    let stop = plans
        .iter()
        .filter(|(half, _)| *half)
        .map(|(_, r)| r.started + half_duration(options))
        .min();
    // Shares are measured while every class runs: up to the stop, if any.
    let share_end = stop.unwrap_or(end);
    let windows: Vec<Vec<(Instant, f64)>> = classes
        .iter()
        .map(|c| class_windows(reports, &c.name))
        .collect();
    let achieved: Vec<f64> = windows
        .iter()
        .map(|w| mean_between(w, start, share_end))
        .collect();
    let weighted_total: f64 = classes
        .iter()
        .zip(&achieved)
        .filter(|(c, _)| !c.priority)
        .map(|(_, a)| a)
        .sum();
    let weight_total: f64 = classes
        .iter()
        .filter(|c| !c.priority)
        .map(|c| f64::from(c.weight))
        .sum();
    // Borrowing: the remaining classes' windows summed on their common grid.
    let (borrow, after) = match stop {
        Some(stop) => {
            let remaining: Vec<&Vec<(Instant, f64)>> = classes
                .iter()
                .zip(&windows)
                .filter(|(c, _)| !c.stops_half_way && c.flows > 0)
                .map(|(_, w)| w)
                .collect();
            let mut sums: Vec<(Instant, f64)> = remaining
                .first()
                .map_or(Vec::new(), |w| w.iter().map(|(t, _)| (*t, 0.0)).collect());
            for w in &remaining {
                for (s, (_, bps)) in sums.iter_mut().zip(w.iter()) {
                    s.1 += bps;
                }
            }
            (
                borrow_ms(&sums, stop, BORROW_SHARE * link),
                Some(mean_between(&sums, stop, end) / link * 100.0),
            )
        }
        None => (None, None),
    };
    classes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let q = &seen.queues[i];
            let avg = (!q.is_empty()).then(|| q.iter().sum::<u64>() as f64 / q.len() as f64);
            let remains = stop.is_some() && !c.stops_half_way;
            LinkRow {
                shaper: shaper.name().to_owned(),
                scenario,
                class: c.name.clone(),
                weight: c.weight,
                priority: c.priority,
                flows: c.flows,
                expected_share_pct: (!c.priority && weight_total > 0.0)
                    .then(|| f64::from(c.weight) / weight_total * 100.0),
                achieved_bps: achieved[i],
                share_pct: (!c.priority && weighted_total > 0.0)
                    .then(|| achieved[i] / weighted_total * 100.0),
                link_pct: achieved[i] / link * 100.0,
                queue_p99_bytes: crate::stats::percentile(q, 0.99),
                queue_avg_bytes: avg,
                rtt_p99_us: if c.priority {
                    seen.probe
                        .as_ref()
                        .and_then(|p| super::answered(p).map(|p| p.p99_us))
                } else {
                    None
                },
                borrow_ms: if remains { borrow } else { None },
                after_stop_link_pct: if remains { after } else { None },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_have_their_classes_weights_and_flows() {
        let shares = Scenario::Shares.classes();
        assert_eq!(
            shares
                .iter()
                .map(|c| (c.weight, c.flows))
                .collect::<Vec<_>>(),
            [(1, 16), (3, 16)]
        );
        let borrow = Scenario::Borrow.classes();
        assert!(borrow[0].stops_half_way && !borrow[1].stops_half_way);
        let marking = Scenario::Marking.classes();
        assert_eq!(
            marking.iter().map(|c| c.flows).collect::<Vec<_>>(),
            [1, 2, 4, 8]
        );
        assert!(marking.iter().all(|c| c.weight == 1));
        assert_eq!(Scenario::Marking.shapers().len(), 3);
        let prio = Scenario::Priority.classes();
        assert!(prio[0].priority && prio[0].flows == 0 && Scenario::Priority.has_probe());
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        assert!("nope".parse::<Scenario>().is_err());
    }

    #[test]
    fn quick_fits_in_ninety_seconds() {
        let q = LinkOptions::quick();
        let runs: usize = q.scenarios.iter().map(|s| s.shapers().len()).sum();
        assert_eq!(runs, 9);
        // Each run: its traffic plus up to 2 s of set-up (connections, daemon start, tc).
        let per_run = bulk_duration(&q) + Duration::from_secs(2);
        assert!(per_run * runs as u32 <= Duration::from_secs(60));
    }

    #[test]
    fn borrowing_ends_at_the_first_window_at_the_floor() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let sums = [
            (at(20), 990.0),
            (at(40), 700.0),
            (at(60), 900.0),
            (at(80), 985.0),
            (at(100), 800.0),
        ];
        // Stop at 30 ms: the window ending at 40 is below, the one ending at 80 reaches 980.
        assert_eq!(borrow_ms(&sums, at(30), 980.0), Some(50.0));
        assert_eq!(borrow_ms(&sums, at(90), 980.0), None);
    }
}
