//! `metronome compare --cluster`: one limit enforced by daemons on several sites together
//! through etcd (a cluster class, `scope = "cluster"`; the daemons' `[cluster]`), measured on
//! real kernel TCP while traffic moves between the sites, a daemon dies and etcd fails.
//!
//! The set-up, the sequence of events and what each step measures are [`run`]'s; the
//! figures of each step are computed from the records afterwards ([`phases`]).

pub mod phases;
mod report;

use super::attach::AttachedDaemon;
use super::measure;
use super::CompareError;
use crate::etcd::EtcdCluster;
use crate::netns::cluster::{ClusterTopology, Site};
use crate::netns::{InterfaceCounters, Namespace, TopoError};
use crate::scrape::Scrape as Exposition;
use crate::trafficgen::sleep_until;
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan, TrafficReport};
use metronome_daemon::ops::config::Config;
use phases::{Scrape, Window};
use report::figures;
pub use report::{describe, event_at, ClusterReport, Event, Reach};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Prefix of the comparison's namespaces.
pub const NS_PREFIX: &str = "mtr-clu";
/// Sites: two busy, one idle.
pub const SITES: usize = 3;
/// The busy sites (indices).
pub const BUSY: [usize; 2] = [0, 1];
/// The cluster limit, bits/s: 300 Mbit/s.
pub const LIMIT_BPS: u64 = 300_000_000;
/// TCP connections per busy site.
pub const FLOWS: usize = 4;
/// The class's name.
pub const CLASS: &str = "tenant";
/// The cluster's name.
pub const CLUSTER: &str = "tenants";
/// Windows between two scrapes of the daemons' metrics: every 2 windows, 200 ms.
pub const SCRAPE_EVERY: u32 = 2;
/// How long every daemon may take from its start to the state `shared`: its first record, a
/// revision that holds every daemon's, and a margin for a loaded machine: 15 s.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(15);
/// Destination port of the first traffic plan; the others follow.
const BASE_PORT: u16 = 34_000;

/// How the daemons share the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Enforcement {
    /// One cluster class over etcd.
    #[serde(rename = "cluster")]
    Cluster,
    /// A per-host class on each daemon at the limit divided by the busy sites.
    #[serde(rename = "per-host")]
    PerHost,
}

impl Enforcement {
    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Enforcement::Cluster => "cluster",
            Enforcement::PerHost => "per-host",
        }
    }
}

/// What the comparison runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOptions {
    /// The limit of all sites together, bits/s.
    pub limit_bps: u64,
    /// TCP connections per busy site.
    pub flows: usize,
    /// `[cluster] period`.
    pub period: Duration,
    /// `[cluster] lease` (whole seconds).
    pub lease: Duration,
    /// `[cluster] hold`.
    pub hold: Duration,
    /// `[cluster] floor`, percent of the limit.
    pub floor_pct: f64,
    /// Cluster class or per-host classes.
    pub enforcement: Enforcement,
    /// The `metronome` binary whose `run` is each site's daemon (`None`: the report says there
    /// is none).
    pub daemon_binary: Option<PathBuf>,
}

impl Default for ClusterOptions {
    /// The scenario of the cluster classes' targets: 300 Mbit/s, period 1 s, lease 3 s, hold
    /// 3 s, floor 1 %.
    fn default() -> Self {
        ClusterOptions {
            limit_bps: LIMIT_BPS,
            flows: FLOWS,
            period: Duration::from_secs(1),
            lease: Duration::from_secs(3),
            hold: Duration::from_secs(3),
            floor_pct: 1.0,
            enforcement: Enforcement::Cluster,
            daemon_binary: None,
        }
    }
}

impl ClusterOptions {
    /// The floor's rate, bits/s (as the daemon computes it from a percentage: rounded down).
    pub fn floor_bps(&self) -> u64 {
        (self.limit_bps as f64 * self.floor_pct / 100.0) as u64
    }
}

/// How long each step of the sequence lasts (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// a: both busy sites from the start.
    pub start: Duration,
    /// b: site a stopped.
    pub shift: Duration,
    /// Site a back, before its daemon is killed.
    pub rejoin: Duration,
    /// c: after a's daemon is killed.
    pub crash: Duration,
    /// d: after the etcd member is killed.
    pub member: Duration,
    /// e: after etcd is gone.
    pub gone: Duration,
}

impl Schedule {
    /// The steps of `options`: 6 periods for the start and the shift (the start target is 3
    /// periods), 5 for the rejoin and after the member's death, lease + period + 2 s after the
    /// crash (the target is lease + period) and hold + period + 3 s after etcd is gone (the
    /// floors come after hold).
    pub fn of(options: &ClusterOptions) -> Self {
        let p = options.period;
        Schedule {
            start: 6 * p,
            shift: 6 * p,
            rejoin: 5 * p,
            crash: options.lease + p + Duration::from_secs(2),
            member: 5 * p,
            gone: options.hold + p + Duration::from_secs(3),
        }
    }

    /// The whole sequence.
    pub fn total(&self) -> Duration {
        self.start + self.shift + self.rejoin + self.crash + self.member + self.gone
    }
}

/// The name of site `i` (`site-a`, ...), its daemon's `host`.
pub fn site_name(i: usize) -> String {
    let letter = (b'a' + (i % 26) as u8) as char;
    format!("site-{letter}")
}

/// A duration as the configuration writes it: whole seconds as `"Ns"`, else milliseconds.
fn duration_text(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The daemon's configuration text for a site (named `host`) whose receiver is `receiver`: the
/// bump in the wire's interfaces, the comparison's wheel, and one class `tenant` of all TCP to
/// that receiver, with the bump-in-the-wire comparison's horizon policy and backpressure
/// ([`super::metronome_config`]). [`Enforcement::Cluster`]: `[cluster]` with `etcd` the
/// endpoints and the options' period, lease, hold and floor, the class at the limit with
/// `scope = "cluster"`; [`Enforcement::PerHost`]: no `[cluster]`, the class at the limit
/// divided by the busy sites.
pub fn site_config_text(
    receiver: Ipv4Addr,
    host: &str,
    options: &ClusterOptions,
    etcd: &[String],
) -> String {
    let mut text = String::from(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[wheel]\nhorizon = \"250ms\"\n\n",
    );
    let (rate, scope) = match options.enforcement {
        Enforcement::Cluster => {
            let endpoints: Vec<String> = etcd.iter().map(|e| format!("\"{e}\"")).collect();
            text += &format!(
                "[cluster]\nname = \"{CLUSTER}\"\netcd = [{}]\nhost = \"{host}\"\n\
                 period = \"{}\"\nlease = \"{}\"\nhold = \"{}\"\nfloor = \"{}%\"\n\n",
                endpoints.join(", "),
                duration_text(options.period),
                duration_text(options.lease),
                duration_text(options.hold),
                options.floor_pct
            );
            (options.limit_bps, "scope = \"cluster\"\n")
        }
        Enforcement::PerHost => (options.limit_bps / BUSY.len() as u64, ""),
    };
    text += &format!(
        "[[class]]\nname = \"{CLASS}\"\nrate = {rate}\n{scope}\
         match = {{ dst = \"{receiver}\", protocol = \"tcp\" }}\nhorizon_policy = \"reject\"\n\
         backpressure = {{ mode = \"ecn\", threshold = \"1ms\" }}\n"
    );
    text
}

/// The state whose `metronome_cluster_state` series is 1, if any.
pub fn current_state(scrape: &Exposition) -> Option<String> {
    metronome_daemon::ops::metrics::cluster::CLUSTER_STATES
        .into_iter()
        .find(|s| scrape.value("metronome_cluster_state", Some(("state", s))) == Some(1.0))
        .map(str::to_owned)
}

/// Every daemon's share of the class and state at one scrape, by site.
type Scraped = (Vec<Option<f64>>, Vec<Option<String>>);

/// A scrape of every daemon (from inside its namespace): its share of the class and its state.
fn scrape_all(targets: &[(Namespace, SocketAddr)]) -> Scraped {
    let scrapes: Vec<Option<Exposition>> = targets
        .iter()
        .map(|(n, a)| Exposition::fetch(n, *a))
        .collect();
    let shares = scrapes
        .iter()
        .map(|s| {
            s.as_ref()?
                .value("metronome_cluster_share_bps", Some(("class", CLASS)))
        })
        .collect();
    let states = scrapes.iter().map(|s| current_state(s.as_ref()?)).collect();
    (shares, states)
}

/// What the sampler recorded: wire bytes of every site's receiver per window tick, and the
/// scrapes.
#[derive(Default)]
struct Recorded {
    wire: Vec<(Instant, Vec<u64>)>,
    scrapes: Vec<(Instant, Scraped)>,
}

/// Samples every site's receiver every window and scrapes every daemon every [`SCRAPE_EVERY`]
/// windows until `stop` is set.
fn spawn_sampler(
    mut counters: Vec<InterfaceCounters>,
    targets: Vec<(Namespace, SocketAddr)>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<Recorded, TopoError>> {
    std::thread::spawn(move || {
        let mut rec = Recorded::default();
        let first = Instant::now();
        let mut k = 0u32;
        while !stop.load(Ordering::Acquire) {
            let mut bytes = Vec::with_capacity(counters.len());
            for c in &mut counters {
                let s = c.read()?;
                bytes.push(measure::wire_bytes(s.rx_bytes, s.rx_packets));
            }
            rec.wire.push((Instant::now(), bytes));
            if k.is_multiple_of(SCRAPE_EVERY) {
                let scraped = scrape_all(&targets);
                rec.scrapes.push((Instant::now(), scraped));
            }
            k += 1;
            sleep_until(first + measure::WINDOW * k);
        }
        Ok(rec)
    })
}

/// Seconds from `t0` to `t` (negative before).
fn since(t0: Instant, t: Instant) -> f64 {
    match t.checked_duration_since(t0) {
        Some(d) => d.as_secs_f64(),
        None => -t0.duration_since(t).as_secs_f64(),
    }
}

/// The windows of `rec` on the time line from `t0`.
fn windows_of(rec: &Recorded, t0: Instant) -> Vec<Window> {
    rec.wire
        .windows(2)
        .filter_map(|w| {
            let dt = w[1].0.saturating_duration_since(w[0].0).as_secs_f64();
            (dt > 0.0).then(|| Window {
                end_s: since(t0, w[1].0),
                site_bps: w[1]
                    .1
                    .iter()
                    .zip(&w[0].1)
                    .map(|(b, a)| b.saturating_sub(*a) as f64 * 8.0 / dt)
                    .collect(),
            })
        })
        .collect()
}

/// `flows` TCP connections from `site`'s sender to its receiver's `port` for `duration`.
fn spawn_traffic(
    site: &Site,
    name: &str,
    (port, flows): (u16, usize),
    duration: Duration,
) -> JoinHandle<Result<TrafficReport, TrafficError>> {
    let plan = TrafficPlan::new(
        site.topo.receiver_addr,
        vec![FlowGroup::tcp(name, port, flows)],
        duration,
    );
    let (snd, rcv) = (site.topo.sender.clone(), site.topo.receiver.clone());
    std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)))
}

fn join(t: JoinHandle<Result<TrafficReport, TrafficError>>) -> Result<TrafficReport, CompareError> {
    Ok(t.join().map_err(|_| TrafficError::ThreadPanicked)??)
}

/// Daemons by site (`None` once killed), and where each answers for metrics.
type Daemons = (Vec<Option<AttachedDaemon>>, Vec<(Namespace, SocketAddr)>);

/// Starts every site's daemon; `Ok(Err(why))` when one refuses its configuration or does not
/// come up.
fn start_daemons(
    topo: &ClusterTopology,
    options: &ClusterOptions,
    etcd: &[String],
    names: &[String],
) -> Result<Result<Daemons, String>, CompareError> {
    let Some(binary) = &options.daemon_binary else {
        return Ok(Err("no `metronome` binary".into()));
    };
    let (mut daemons, mut targets) = (Vec::new(), Vec::new());
    for (site, name) in topo.sites.iter().zip(names) {
        let text = site_config_text(site.topo.receiver_addr, name, options, etcd);
        let config = match Config::from_toml_str(&text, "compare-cluster.toml") {
            Ok(c) => c,
            Err(e) => return Ok(Err(format!("the daemon refused the configuration: {e}"))),
        };
        match AttachedDaemon::start(&site.topo.shaper, binary, (&text, &config), false)? {
            Ok(d) => daemons.push(Some(d)),
            Err(e) => return Ok(Err(format!("{name}: {e}"))),
        }
        targets.push((site.topo.shaper.clone(), config.daemon.metrics_listen));
    }
    Ok(Ok((daemons, targets)))
}

/// Waits until every daemon reports the state `shared`, at most [`JOIN_TIMEOUT`]; `Err(why)`
/// naming the ones that did not.
fn wait_shared(targets: &[(Namespace, SocketAddr)], names: &[String]) -> Result<(), String> {
    let give_up = Instant::now() + JOIN_TIMEOUT;
    loop {
        let (_, states) = scrape_all(targets);
        if states.iter().all(|s| s.as_deref() == Some("shared")) {
            return Ok(());
        }
        if Instant::now() > give_up {
            let late: Vec<String> = states
                .iter()
                .zip(names)
                .filter(|(s, _)| s.as_deref() != Some("shared"))
                .map(|(s, n)| format!("{n} ({})", s.as_deref().unwrap_or("no state")))
                .collect();
            return Err(format!(
                "not in the state shared within {JOIN_TIMEOUT:?}: {}",
                late.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs the comparison (module docs): builds the topology and etcd, runs the sequence, removes
/// everything. Progress lines go to `progress`.
///
/// The set-up: a [`ClusterTopology`] of [`SITES`] sites (`site-a`, `site-b`, `site-c`, each a
/// bump in the wire), a three-member [`EtcdCluster`] listening on the topology's management
/// bridge, and on every site `metronome run` in its shaper namespace ([`AttachedDaemon`]: a
/// process of its own, as a user runs it, the binary of [`ClusterOptions::daemon_binary`]) with
/// one class `tenant` of all TCP to the site's receiver, [`ClusterOptions::limit_bps`] for all
/// sites together ([`site_config_text`]). Sites a and b are busy ([`ClusterOptions::flows`]
/// TCP connections each from their sender to their receiver), site c stays idle. Measured all
/// along, on one time line from the moment the traffic starts: each site's rate on the wire at
/// its receiver's veth (`rcv0`'s counters, [`measure::wire_bytes`], as the bump-in-the-wire
/// comparison measures) in 100 ms windows, and every [`SCRAPE_EVERY`] windows each daemon's
/// `metronome_cluster_share_bps` and `metronome_cluster_state` from its metrics endpoint.
///
/// The sequence ([`Schedule`]), one set-up for all of it; the figures of each step are computed
/// from the records afterwards ([`phases`]):
///
/// * **a. start**: a and b start at once; the first window from which the busy sites' sum is
///   within 1 % of the limit and each site within 2 % of its half ([`phases::settling`]);
/// * **b. shift**: a's traffic stops; the time until b holds at least 97 % of the limit
///   ([`phases::time_to_alone`]);
/// * **rejoin**: a starts again; the same figures as the start;
/// * **c. a daemon killed**: SIGKILL of a's daemon while a still sends; the time until b's share,
///   and b's rate, are at least 97 % of the limit (a's record goes when its lease expires,
///   target: lease + period);
/// * **d. an etcd member killed** (SIGKILL of the first member) while b sends alone: the largest
///   distance of the busy sites' sum from what it was before, the largest change of a share, any
///   state other than `shared` ([`phases::unchanged`]); after the crash, so that what it
///   measures does not depend on how site a came back, and only the last step runs with two
///   members left;
/// * **e. etcd gone**: every member killed; the live daemons' shares over time (held for `hold`,
///   then the floor), the sum of the shares and the largest sum of the sites' rates against the
///   limit plus the live daemons' floors ([`phases::etcd_gone`]).
///
/// [`Enforcement::PerHost`] runs the same sequence with plain per-host classes (each daemon the
/// limit divided by the busy sites, no `[cluster]`): the static split a cluster class replaces,
/// and a check of the harness itself where the daemon has no cluster classes.
///
/// A daemon that refuses its configuration, does not come up or does not reach the state
/// `shared` in [`JOIN_TIMEOUT`] gives the report an error and no figures.
pub fn run(
    options: &ClusterOptions,
    progress: &mut dyn Write,
) -> Result<ClusterReport, CompareError> {
    let _ = crate::netns::remove_stale(NS_PREFIX);
    let names: Vec<String> = (0..SITES).map(site_name).collect();
    let mut report = ClusterReport::empty(options, &names);
    let mut topo = ClusterTopology::new(NS_PREFIX, SITES)?;
    for site in &mut topo.sites {
        site.topo.enable_sender_ecn();
    }
    let mut etcd = EtcdCluster::start_with(3, IpAddr::V4(topo.host_addr))?;
    let endpoints = etcd.extra_endpoints();
    let _ = writeln!(
        progress,
        "etcd: {} members healthy after {:.1} s, clients at {}",
        etcd.size(),
        etcd.started_in().as_secs_f64(),
        endpoints.join(", ")
    );
    let (mut daemons, targets) = match start_daemons(&topo, options, &endpoints, &names)? {
        Ok(d) => d,
        Err(e) => {
            report.error = Some(e);
            return Ok(report);
        }
    };
    if options.enforcement == Enforcement::Cluster {
        if let Err(e) = wait_shared(&targets, &names) {
            report.error = Some(e);
            stop_daemons(&mut daemons, &names, &mut report);
            return Ok(report);
        }
    }
    let _ = writeln!(
        progress,
        "{} daemons up ({})",
        daemons.len(),
        options.enforcement.name()
    );
    let counters = topo
        .sites
        .iter()
        .map(|s| s.topo.receiver.interface_counters(&s.topo.receiver_if))
        .collect::<Result<Vec<_>, _>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = spawn_sampler(counters, targets, Arc::clone(&stop));
    let sequence = run_sequence(&topo, options, (&mut etcd, &mut daemons), progress);
    stop.store(true, Ordering::Release);
    let recorded = sampler
        .join()
        .map_err(|_| TopoError::ThreadPanicked("sampler".into()))??;
    stop_daemons(&mut daemons, &names, &mut report);
    let (t0, events) = sequence?;
    report.windows = windows_of(&recorded, t0);
    report.scrapes = recorded
        .scrapes
        .iter()
        .map(|(at, (shares, states))| Scrape {
            at_s: since(t0, *at),
            share_bps: shares.clone(),
            state: states.clone(),
        })
        .collect();
    report.events = events
        .iter()
        .map(|(at, what)| Event {
            at_s: since(t0, *at),
            what: what.clone(),
        })
        .collect();
    figures(&mut report, options);
    drop(etcd);
    topo.remove()?;
    Ok(report)
}

/// SIGTERMs every daemon still running; what did not stop cleanly goes to the report.
fn stop_daemons(
    daemons: &mut [Option<AttachedDaemon>],
    names: &[String],
    report: &mut ClusterReport,
) {
    for (d, name) in daemons.iter_mut().zip(names) {
        if let Some(d) = d.take() {
            if let Err(e) = d.stop() {
                report.stop_errors.push(format!("{name}: {e}"));
            }
        }
    }
}

/// The events of the sequence, in order: their names in [`ClusterReport::events`].
pub mod events {
    /// The busy sites start.
    pub const START: &str = "site-a and site-b start";
    /// Site a stops.
    pub const SHIFT: &str = "site-a stops";
    /// Site a starts again.
    pub const REJOIN: &str = "site-a starts again";
    /// The first etcd member is killed.
    pub const MEMBER: &str = "etcd member m0 killed (SIGKILL)";
    /// Site a's daemon is killed.
    pub const CRASH: &str = "site-a's daemon killed (SIGKILL)";
    /// Every etcd member is killed.
    pub const GONE: &str = "every etcd member killed";
    /// The traffic ends.
    pub const END: &str = "site-b stops";
}

type Timeline = (Instant, Vec<(Instant, String)>);

/// Drives the sequence (module docs); returns when the busy sites' traffic started (the time
/// line's zero) and the events.
fn run_sequence(
    topo: &ClusterTopology,
    options: &ClusterOptions,
    (etcd, daemons): (&mut EtcdCluster, &mut [Option<AttachedDaemon>]),
    progress: &mut dyn Write,
) -> Result<Timeline, CompareError> {
    let s = Schedule::of(options);
    let (a, b) = (&topo.sites[BUSY[0]], &topo.sites[BUSY[1]]);
    let flows = options.flows;
    let mut events = Vec::new();
    let mut note = |at: Instant, what: &str, progress: &mut dyn Write| {
        let _ = writeln!(progress, "{what}");
        events.push((at, what.to_owned()));
    };
    let t0 = Instant::now();
    let b_traffic = spawn_traffic(b, "site-b", (BASE_PORT, flows), s.total());
    let a_first = spawn_traffic(a, "site-a", (BASE_PORT + 1, flows), s.start);
    sleep_until(t0 + s.start + s.shift);
    let a_first = join(a_first)?;
    note(a_first.started + s.start, events::SHIFT, progress);
    // Site a sends through the crash of its daemon and one period beyond.
    let a_again = s.rejoin + options.period;
    let a_second = spawn_traffic(a, "site-a", (BASE_PORT + 2, flows), a_again);
    sleep_until(t0 + s.start + s.shift + s.rejoin);
    let crash_at = Instant::now();
    drop(daemons[BUSY[0]].take());
    note(crash_at, events::CRASH, progress);
    sleep_until(t0 + s.start + s.shift + s.rejoin + s.crash);
    // Each event is timed when it begins: before the kill.
    let member_at = Instant::now();
    etcd.kill(0)?;
    note(member_at, events::MEMBER, progress);
    sleep_until(t0 + s.total() - s.gone);
    let gone_at = Instant::now();
    etcd.stop_all()?;
    note(gone_at, events::GONE, progress);
    let b_report = join(b_traffic)?;
    let a_second = join(a_second)?;
    note(b_report.started, events::START, progress);
    note(a_second.started, events::REJOIN, progress);
    note(b_report.started + s.total(), events::END, progress);
    events.sort_by_key(|(at, _)| *at);
    Ok((b_report.started, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_scenario_of_the_targets() {
        let o = ClusterOptions::default();
        assert_eq!(o.limit_bps, 300_000_000);
        assert_eq!(o.floor_bps(), 3_000_000);
        let s = Schedule::of(&o);
        assert_eq!(s.crash, Duration::from_secs(6));
        assert_eq!(s.gone, Duration::from_secs(7));
        assert!(s.total() <= Duration::from_secs(40), "{s:?}");
    }

    #[test]
    fn durations_are_written_in_whole_seconds_when_they_can_be() {
        assert_eq!(duration_text(Duration::from_secs(3)), "3s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn the_state_is_the_one_whose_series_is_one() {
        let text = "metronome_cluster_state{state=\"joining\"} 0\n\
                    metronome_cluster_state{state=\"shared\"} 1\n";
        assert_eq!(
            current_state(&Exposition::parse(text)).as_deref(),
            Some("shared")
        );
        assert_eq!(current_state(&Exposition::parse("metronome_up 1\n")), None);
    }

    #[test]
    fn the_per_host_configuration_is_one_the_daemon_takes() {
        let options = ClusterOptions {
            enforcement: Enforcement::PerHost,
            ..ClusterOptions::default()
        };
        let text = site_config_text(Ipv4Addr::new(10, 77, 3, 2), "site-a", &options, &[]);
        assert!(!text.contains("[cluster]"), "{text}");
        let config = Config::from_toml_str(&text, "t.toml").unwrap();
        assert_eq!(config.classes.len(), 1);
    }

    #[test]
    fn the_cluster_configuration_names_etcd_the_host_and_the_scope() {
        let etcd = [
            "http://10.81.3.1:2379".to_owned(),
            "http://10.81.3.1:2381".to_owned(),
        ];
        let o = ClusterOptions::default();
        let text = site_config_text(Ipv4Addr::new(10, 77, 3, 2), "site-b", &o, &etcd);
        for line in [
            "[cluster]\nname = \"tenants\"\n",
            "etcd = [\"http://10.81.3.1:2379\", \"http://10.81.3.1:2381\"]\n",
            "host = \"site-b\"\n",
            "period = \"1s\"\nlease = \"3s\"\nhold = \"3s\"\nfloor = \"1%\"\n",
            "rate = 300000000\nscope = \"cluster\"\n",
            "dst = \"10.77.3.2\"",
        ] {
            assert!(text.contains(line), "{line:?} not in:\n{text}");
        }
    }

    #[test]
    fn site_names_are_letters() {
        assert_eq!(site_name(0), "site-a");
        assert_eq!(site_name(2), "site-c");
    }
}
