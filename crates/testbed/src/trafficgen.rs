//! The built-in traffic generator of `metronome demo`, `metronome compare` and the integration
//! tests: real kernel TCP (and UDP) from the sender namespace to sinks in the receiver namespace.
//!
//! A [`TrafficPlan`] has flow groups and an optional RTT probe. Each group opens `flows`
//! connections to one destination port (so the shaper's classes can match on the port); every
//! connection writes as fast as the kernel lets it until the deadline or its byte cap. The sinks
//! read and discard, counting bytes per connection and per group; the caller's thread samples the
//! group counters every `window` (100 ms by default, Carousel §7.1.1 measures rate the same way)
//! into goodput windows. The probe is a separate TCP connection (`TCP_NODELAY`) sending an 8-byte
//! sequence number every 10 ms and timing the echo, reported as p50/p99 RTT.
//!
//! Sockets are created inside the namespaces (through [`Namespace::run`]) and then used from
//! ordinary threads: a socket stays in the namespace it was created in. Everything stops by
//! itself at the deadline: writers stop writing, readers stop reading (unread data is discarded
//! with the socket), every thread is joined, and the first error is returned. Goodput here is TCP
//! payload; the on-the-wire rate of `compare` comes from interface counters
//! ([`crate::netns::InterfaceCounters`]).

mod flows;

use crate::netns::{Namespace, TopoError};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Default per-connection byte cap: 4 GiB, above what one flow can move in a 10 s demo run at
/// 2 Gbit/s (2.5 GB), so it bounds volume without shaping the run.
pub const DEFAULT_MAX_BYTES_PER_FLOW: u64 = 4 << 30;
/// Default goodput window: 100 ms, the rate window of Carousel §7.1.1.
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(100);
/// Default probe interval: 10 ms, a hundred RTT samples per second.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Largest plan accepted, in connections: each connection costs two threads.
pub const MAX_FLOWS: usize = 1024;
/// Longest run accepted.
pub const MAX_DURATION: Duration = Duration::from_secs(600);
/// UDP payload that fills a 1500-byte MTU: 1500 - 20 (IPv4) - 8 (UDP) bytes.
pub const UDP_FULL_PAYLOAD: usize = 1472;

/// How a flow group's connections carry their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Kernel TCP, writing as fast as the congestion window allows.
    Tcp,
    /// Connected UDP sockets sending `payload`-byte datagrams, unpaced (`rate_bps` `None`) or
    /// paced per flow to `rate_bps` in 1 ms bursts.
    Udp {
        /// Datagram payload in bytes.
        payload: usize,
        /// Per-flow send rate in bits per second, or as fast as possible.
        rate_bps: Option<u64>,
    },
}

/// A set of connections to one destination port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowGroup {
    /// Name used in reports (for example the class it should land in).
    pub name: String,
    /// Destination port on the receiver.
    pub port: u16,
    /// Number of connections.
    pub flows: usize,
    /// TCP or UDP.
    pub transport: Transport,
    /// Bytes after which one connection stops writing.
    pub max_bytes_per_flow: u64,
}

impl FlowGroup {
    /// `flows` TCP connections to `port`, capped at [`DEFAULT_MAX_BYTES_PER_FLOW`] each.
    pub fn tcp(name: &str, port: u16, flows: usize) -> Self {
        FlowGroup {
            name: name.to_owned(),
            port,
            flows,
            transport: Transport::Tcp,
            max_bytes_per_flow: DEFAULT_MAX_BYTES_PER_FLOW,
        }
    }

    /// `flows` unpaced UDP flows of full-MTU datagrams to `port`.
    pub fn udp(name: &str, port: u16, flows: usize) -> Self {
        FlowGroup {
            transport: Transport::Udp {
                payload: UDP_FULL_PAYLOAD,
                rate_bps: None,
            },
            ..FlowGroup::tcp(name, port, flows)
        }
    }
}

/// The RTT probe: one TCP connection exchanging 8-byte pings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Destination port (pick it so the probe lands in the class whose delay you want).
    pub port: u16,
    /// Time between pings.
    pub interval: Duration,
}

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrafficPlan {
    /// Where the sinks listen (the receiver's address).
    pub receiver_addr: Ipv4Addr,
    /// The flow groups.
    pub groups: Vec<FlowGroup>,
    /// The RTT probe, if any.
    pub probe: Option<Probe>,
    /// How long the writers write.
    pub duration: Duration,
    /// Goodput sampling window.
    pub window: Duration,
    /// The TCP congestion control each TCP socket of the plan (flows and probe) sets for itself
    /// (`TCP_CONGESTION`, for example `"cubic"`), or `None` for the sender namespace's default.
    pub congestion: Option<String>,
}

impl TrafficPlan {
    /// A plan of `groups` for `duration` towards `receiver_addr`, 100 ms windows, no probe.
    pub fn new(receiver_addr: Ipv4Addr, groups: Vec<FlowGroup>, duration: Duration) -> Self {
        TrafficPlan {
            receiver_addr,
            groups,
            probe: None,
            duration,
            window: DEFAULT_WINDOW,
            congestion: None,
        }
    }

    /// Makes every TCP socket of the plan use congestion control `name` (`TCP_CONGESTION`).
    pub fn with_congestion(mut self, name: &str) -> Self {
        self.congestion = Some(name.to_owned());
        self
    }

    /// Adds a probe to `port` every [`DEFAULT_PROBE_INTERVAL`].
    pub fn with_probe(mut self, port: u16) -> Self {
        self.probe = Some(Probe {
            port,
            interval: DEFAULT_PROBE_INTERVAL,
        });
        self
    }

    fn validate(&self) -> Result<(), TrafficError> {
        let total: usize = self.groups.iter().map(|g| g.flows).sum();
        let bad = |why: String| Err(TrafficError::InvalidPlan(why));
        if total == 0 && self.probe.is_none() {
            return bad("no flows and no probe".into());
        }
        if total > MAX_FLOWS {
            return bad(format!("{total} flows, at most {MAX_FLOWS}"));
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad(format!(
                "duration {:?} outside (0, {MAX_DURATION:?}]",
                self.duration
            ));
        }
        if self.window.is_zero() || self.window > self.duration {
            return bad(format!("window {:?} outside (0, duration]", self.window));
        }
        let mut ports: Vec<u16> = self.groups.iter().map(|g| g.port).collect();
        ports.extend(self.probe.map(|p| p.port));
        ports.sort_unstable();
        if ports.windows(2).any(|w| w[0] == w[1]) || ports.contains(&0) {
            return bad("ports must be distinct and non-zero".into());
        }
        for g in &self.groups {
            if let Transport::Udp { payload, .. } = g.transport {
                if payload == 0 || payload > 65_507 {
                    return bad(format!("group {}: UDP payload {payload} bytes", g.name));
                }
            }
        }
        Ok(())
    }
}

/// Per-group results.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupReport {
    /// The group's name.
    pub name: String,
    /// Its destination port.
    pub port: u16,
    /// Bytes the sinks received before the deadline (payload).
    pub bytes: u64,
    /// Bytes the senders handed to the kernel (TCP: written; UDP: sent).
    pub sent_bytes: u64,
    /// Received bytes per connection (TCP) or per socket (UDP), in accept order.
    pub bytes_per_flow: Vec<u64>,
    /// Goodput of each window, bits per second.
    pub windows_bps: Vec<f64>,
    /// Bytes received so far at the start and at the end of each window, with the time since
    /// [`TrafficReport::started`] they were read: the cumulative series behind `windows_bps`, for
    /// rates over other intervals (per second, lined up with other events of a run; see
    /// [`crate::flood::per_second_bps`]).
    pub received_at: Vec<(Duration, u64)>,
}

impl GroupReport {
    /// Mean goodput over the windows, bits per second (0 without windows).
    pub fn mean_bps(&self) -> f64 {
        if self.windows_bps.is_empty() {
            return 0.0;
        }
        self.windows_bps.iter().sum::<f64>() / self.windows_bps.len() as f64
    }
}

/// RTT probe results, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeReport {
    /// Pings answered.
    pub samples: usize,
    /// Pings sent but not answered before the deadline.
    pub unanswered: usize,
    /// Median RTT.
    pub p50_us: u64,
    /// 99th percentile RTT.
    pub p99_us: u64,
    /// Largest RTT.
    pub max_us: u64,
}

impl ProbeReport {
    /// Summarises RTT samples (microseconds, any order).
    pub fn from_samples(rtts_us: Vec<u64>, unanswered: usize) -> Self {
        let spread = crate::stats::Spread::of(&rtts_us);
        ProbeReport {
            samples: rtts_us.len(),
            unanswered,
            p50_us: spread.p50_us,
            p99_us: spread.p99_us,
            max_us: spread.max_us,
        }
    }
}

/// The results of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficReport {
    /// One entry per flow group, in plan order.
    pub groups: Vec<GroupReport>,
    /// The probe's results, if the plan had one.
    pub probe: Option<ProbeReport>,
    /// Wall time from the writers' start to the last window.
    pub elapsed: Duration,
    /// When the writers started: window `k` (from 1) of every group ends at `started + k ×
    /// window`, so the windows of plans run side by side can be lined up.
    pub started: std::time::Instant,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    /// The plan is out of bounds.
    #[error("invalid traffic plan: {0}")]
    InvalidPlan(String),
    /// Entering a namespace failed.
    #[error(transparent)]
    Namespace(#[from] TopoError),
    /// A sink could not bind its port.
    #[error("cannot bind sink port {port}: {source}")]
    Bind {
        /// The port.
        port: u16,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A sender could not connect.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The destination.
        addr: std::net::SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Fewer connections arrived at a sink than were opened.
    #[error("sink port {port} accepted {accepted} of {expected} connections")]
    Accept {
        /// The port.
        port: u16,
        /// Connections accepted before the setup timeout.
        accepted: usize,
        /// Connections expected.
        expected: usize,
    },
    /// A socket operation failed during the run.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A worker thread panicked.
    #[error("a traffic thread panicked")]
    ThreadPanicked,
}

/// Runs `plan`: sinks in `receiver`, senders in `sender` (`None`: the caller's namespace, for
/// loopback runs). Returns when every thread has been joined.
pub fn run(
    plan: &TrafficPlan,
    sender: Option<&Namespace>,
    receiver: Option<&Namespace>,
) -> Result<TrafficReport, TrafficError> {
    plan.validate()?;
    flows::run(plan, sender, receiver)
}

/// Sleeps until `t` (at once when it has passed): the pacing of every sampler and sender.
pub(crate) fn sleep_until(t: Instant) {
    if let Some(d) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let r = ProbeReport::from_samples((1..=100).rev().collect(), 2);
        assert_eq!((r.samples, r.unanswered), (100, 2));
        assert_eq!((r.p50_us, r.p99_us, r.max_us), (50, 99, 100));
        assert_eq!(ProbeReport::from_samples(Vec::new(), 0).p99_us, 0);
    }

    #[test]
    fn plans_out_of_bounds_are_rejected() {
        let addr = Ipv4Addr::LOCALHOST;
        let secs = Duration::from_secs(1);
        let dup = TrafficPlan::new(addr, vec![FlowGroup::tcp("a", 9000, 1); 2], secs);
        assert!(matches!(dup.validate(), Err(TrafficError::InvalidPlan(_))));
        let many = TrafficPlan::new(addr, vec![FlowGroup::tcp("a", 9000, MAX_FLOWS + 1)], secs);
        assert!(many.validate().is_err());
        let empty = TrafficPlan::new(addr, Vec::new(), secs);
        assert!(empty.validate().is_err());
        let ok = TrafficPlan::new(addr, vec![FlowGroup::udp("u", 9001, 2)], secs).with_probe(9002);
        assert!(ok.validate().is_ok());
    }

    /// Loopback, no privileges needed: two TCP flows, one UDP flow and the probe for 300 ms.
    #[test]
    fn loopback_run_stops_by_itself_and_reports() {
        let base = 20_000 + (std::process::id() % 20_000) as u16;
        let groups = vec![
            FlowGroup::tcp("t", base, 2),
            FlowGroup::udp("u", base + 1, 1),
        ];
        let mut plan = TrafficPlan::new(Ipv4Addr::LOCALHOST, groups, Duration::from_millis(300))
            .with_probe(base + 2);
        plan.groups[1].transport = Transport::Udp {
            payload: 1000,
            rate_bps: Some(10_000_000),
        };
        let report = run(&plan, None, None).expect("loopback run");
        let tcp = &report.groups[0];
        assert_eq!(tcp.bytes_per_flow.len(), 2);
        assert!(tcp.bytes > 0 && tcp.sent_bytes >= tcp.bytes, "{tcp:?}");
        assert_eq!(tcp.windows_bps.len(), 3);
        // The cumulative series: the start and each window's end, never decreasing, ending at
        // the group's bytes.
        assert_eq!(tcp.received_at.len(), 4);
        assert!(tcp.received_at.windows(2).all(|w| w[0] <= w[1]), "{tcp:?}");
        assert_eq!(tcp.received_at.last().unwrap().1, tcp.bytes);
        let udp = &report.groups[1];
        // 10 Mbit/s for 0.3 s is 375 kB; allow loss and timing slack.
        assert!(udp.bytes > 50_000 && udp.sent_bytes < 600_000, "{udp:?}");
        let probe = report.probe.expect("probe report");
        assert!(probe.samples > 5, "{probe:?}");
    }
}
