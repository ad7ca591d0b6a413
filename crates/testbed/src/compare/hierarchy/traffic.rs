//! One run of `compare hierarchy`: the host's TCP into the busy TCP children and the UDP flood
//! into `c` from the workload, each child to its own port ([`crate::trafficgen`]), through the
//! shaper on the uplink; the start awaited at the receiver, then the measured interval.
//!
//! A child's rate is its goodput at the receiver over the interval (the sinks' byte counts,
//! interpolated at its ends, `crate::flood::value_at`), scaled to full frames on the wire
//! ([`measure::WIRE_PER_PAYLOAD`] for TCP, [`super::UDP_WIRE_PER_PAYLOAD`] for UDP). The
//! receiver veth's own count over the same interval ([`measure::wire_bytes`]) is reported
//! beside their sum, and the CPU over it as `compare` reports it ([`measure::MachineCpu`],
//! [`measure::CpuAccount`]). Each child's max-min fair share is [`fair_shares`]'s.

use super::{HierarchyOptions, HierarchyRow, Load, Ports, Scenario, CHILDREN};
use crate::compare::measure::{self, cpu_pct_per_gbit, CpuAccount, MachineCpu};
use crate::compare::{
    volume_cap, CompareError, Shaper, START_BYTES, START_BYTES_PER_FLOW, START_POLL, START_TIMEOUT,
    TAIL,
};
use crate::flood::value_at;
use crate::netns::attach::AttachTopology;
use crate::netns::TopoError;
use crate::trafficgen::{
    self, sleep_until, FlowGroup, GroupReport, TrafficError, TrafficPlan, TrafficReport, Transport,
    UDP_FULL_PAYLOAD,
};
use std::time::{Duration, Instant};

/// One child's claim on its parent: its limit, its weight and what it would take alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Demand {
    /// Its own limit, bits/s.
    pub limit_bps: f64,
    /// Its weight among its siblings.
    pub weight: f64,
    /// What it offers, bits/s (`f64::INFINITY`: as much as it gets, as TCP; 0: idle).
    pub offered_bps: f64,
}

/// The max-min fair shares of `children` under a parent of `parent_bps`, weighted: the parent's
/// rate is water-filled among the children that offer something, each in proportion to its
/// weight, none above its limit or its offer; what one cannot take goes to the others.
pub fn fair_shares(parent_bps: f64, children: &[Demand]) -> Vec<f64> {
    let cap = |d: &Demand| d.limit_bps.min(d.offered_bps).max(0.0);
    let mut share = vec![0.0; children.len()];
    let mut open: Vec<usize> = (0..children.len())
        .filter(|&i| cap(&children[i]) > 0.0)
        .collect();
    let mut left = parent_bps;
    while !open.is_empty() {
        let weights: f64 = open.iter().map(|&i| children[i].weight).sum();
        let per_weight = left / weights;
        let (full, rest): (Vec<usize>, Vec<usize>) = open
            .iter()
            .partition(|&&i| cap(&children[i]) <= per_weight * children[i].weight);
        if full.is_empty() {
            for &i in &rest {
                share[i] = per_weight * children[i].weight;
            }
            break;
        }
        for &i in &full {
            share[i] = cap(&children[i]);
            left -= share[i];
        }
        open = rest;
    }
    share
}

/// What one run gave.
pub(super) struct Measured {
    /// Each child's rate on the wire, bits/s ([`CHILDREN`] order).
    achieved_bps: [f64; 3],
    /// Each child's offered rate on the wire (UDP only).
    offered_bps: [Option<f64>; 3],
    receiver_bps: f64,
    machine_cores: f64,
    split: measure::CoresSplit,
    daemon_cores: Option<f64>,
}

/// The flow groups of `scenario`, one per busy child, to its port: the host's TCP groups, and
/// the UDP flood's (sent from the workload).
fn groups(
    options: &HierarchyOptions,
    scenario: Scenario,
    ports: Ports,
) -> (Vec<FlowGroup>, Vec<FlowGroup>) {
    let duration = options.warmup + options.measure + TAIL;
    let (mut tcp, mut udp) = (Vec::new(), Vec::new());
    for (i, load) in scenario.load().into_iter().enumerate() {
        let port = ports.of(i);
        match load {
            Load::Idle => {}
            Load::Tcp => {
                let mut g = FlowGroup::tcp(CHILDREN[i], port, options.flows);
                g.max_bytes_per_flow = volume_cap(options.child_bps, duration);
                tcp.push(g);
            }
            Load::Udp => {
                let flows = options.flood_flows.max(1);
                let payload_bps = options.flood_bps as f64 / super::UDP_WIRE_PER_PAYLOAD;
                let mut g = FlowGroup::udp(CHILDREN[i], port, flows);
                g.transport = Transport::Udp {
                    payload: UDP_FULL_PAYLOAD,
                    rate_bps: Some((payload_bps / flows as f64) as u64),
                };
                g.max_bytes_per_flow = volume_cap(options.flood_bps, duration);
                udp.push(g);
            }
        }
    }
    (tcp, udp)
}

type TrafficThread = std::thread::JoinHandle<Result<TrafficReport, TrafficError>>;

/// Starts `groups` (if any) from `sender` to the receiver of `topo` for `duration`.
fn spawn(
    topo: &AttachTopology,
    sender: &crate::netns::Namespace,
    groups: Vec<FlowGroup>,
    duration: Duration,
) -> Option<TrafficThread> {
    if groups.is_empty() {
        return None;
    }
    let plan = TrafficPlan::new(topo.receiver_addr, groups, duration);
    let (snd, rcv) = (sender.clone(), topo.receiver.clone());
    Some(std::thread::spawn(move || {
        trafficgen::run(&plan, Some(&snd), Some(&rcv))
    }))
}

/// Waits for `thread`, if any.
fn join(thread: Option<TrafficThread>) -> Result<Option<TrafficReport>, CompareError> {
    match thread {
        Some(t) => Ok(Some(t.join().map_err(|_| TrafficError::ThreadPanicked)??)),
        None => Ok(None),
    }
}

/// Runs `scenario`'s traffic through the shaper on `topo`'s uplink and measures it: the TCP
/// children's from the host, the flood from the topology's first workload (forwarded traffic,
/// which a qdisc on the uplink cannot hold back at its socket, as it does the host's own); `cpu`
/// reads the daemon's CPU time (ns; `None` without a daemon), `pids` are processes whose user
/// time the machine's CPU counts.
pub(super) fn measure(
    topo: &AttachTopology,
    options: &HierarchyOptions,
    (shaper, scenario): (Shaper, Scenario),
    ports: Ports,
    (cpu, pids): (&mut dyn FnMut() -> Option<u64>, &[u32]),
) -> Result<Measured, CompareError> {
    let (tcp, udp) = groups(options, scenario, ports);
    let flows: usize = tcp.iter().chain(&udp).map(|g| g.flows).sum();
    let duration = options.warmup + options.measure + TAIL;
    let mut counters = topo.receiver.interface_counters(&topo.receiver_if)?;
    let mut machine = MachineCpu::with_processes(pids).map_err(TopoError::Io)?;
    let flooder = match topo.workloads.first() {
        Some(w) => &w.ns,
        None if udp.is_empty() => &topo.host,
        None => {
            return Err(TopoError::Io(std::io::Error::other("no workload to flood from")).into())
        }
    };
    let threads = (
        spawn(topo, &topo.host, tcp, duration),
        spawn(topo, flooder, udp, duration),
    );
    let base = counters.read()?.rx_bytes;
    let threshold = START_BYTES + START_BYTES_PER_FLOW * flows as u64;
    let give_up = Instant::now() + START_TIMEOUT;
    let finished = |t: &Option<TrafficThread>| t.as_ref().is_some_and(|t| t.is_finished());
    let started = loop {
        if counters.read()?.rx_bytes.saturating_sub(base) > threshold {
            break Some(Instant::now());
        }
        if finished(&threads.0) || finished(&threads.1) || Instant::now() > give_up {
            break None;
        }
        std::thread::sleep(START_POLL);
    };
    let mut interval = None;
    if let Some(t0) = started {
        let wire = |c: &mut crate::netns::InterfaceCounters| -> Result<u64, CompareError> {
            let l = c.read()?;
            Ok(measure::wire_bytes(l.rx_bytes, l.rx_packets))
        };
        sleep_until(t0 + options.warmup);
        let a = (
            Instant::now(),
            wire(&mut counters)?,
            machine.read().map_err(TopoError::Io)?,
            cpu(),
        );
        sleep_until(a.0 + options.measure);
        let b = (
            Instant::now(),
            wire(&mut counters)?,
            machine.read().map_err(TopoError::Io)?,
            cpu(),
        );
        interval = Some((a, b));
    }
    let reports = (join(threads.0), join(threads.1));
    let reports = [reports.0?, reports.1?];
    let Some((a, b)) = interval else {
        return Err(CompareError::NoTraffic {
            shaper: shaper.name(),
            target_bps: options.parent_bps,
            flows,
        });
    };
    let secs = b.0.saturating_duration_since(a.0).as_secs_f64();
    let (achieved_bps, offered_bps) = class_rates(&reports, scenario, (a.0, b.0), duration);
    Ok(Measured {
        achieved_bps,
        offered_bps,
        receiver_bps: b.1.saturating_sub(a.1) as f64 * 8.0 / secs,
        machine_cores: b.2.cores_since(&a.2),
        split: b.2.split_since(&a.2),
        daemon_cores: a
            .3
            .zip(b.3)
            .map(|(x, y)| y.saturating_sub(x) as f64 / 1e9 / secs),
    })
}

/// Each child's rate on the wire over `(from, to)` from the groups of `reports` (the TCP plan's
/// and the flood's, each in plan order, one group per busy child), and the UDP child's offer
/// over the run of `duration`.
fn class_rates(
    reports: &[Option<TrafficReport>; 2],
    scenario: Scenario,
    (from, to): (Instant, Instant),
    duration: Duration,
) -> ([f64; 3], [Option<f64>; 3]) {
    let mut achieved = [0.0; 3];
    let mut offered = [None; 3];
    let secs = to.saturating_duration_since(from).as_secs_f64();
    let mut groups = reports.each_ref().map(|r| listed(r).into_iter());
    for (i, load) in scenario.load().into_iter().enumerate() {
        let (plan, scale) = match load {
            Load::Idle => continue,
            Load::Tcp => (0, measure::WIRE_PER_PAYLOAD),
            Load::Udp => (1, super::UDP_WIRE_PER_PAYLOAD),
        };
        let Some((started, g)) = groups[plan].next() else {
            continue;
        };
        let at = |t: Instant| t.saturating_duration_since(started);
        let bytes = value_at(&g.received_at, at(to)) - value_at(&g.received_at, at(from));
        achieved[i] = bytes * 8.0 / secs * scale;
        if load == Load::Udp {
            offered[i] = Some(g.sent_bytes as f64 * 8.0 / duration.as_secs_f64() * scale);
        }
    }
    (achieved, offered)
}

/// The groups of `report`, each with the time its writers started.
fn listed(report: &Option<TrafficReport>) -> Vec<(Instant, &GroupReport)> {
    report
        .iter()
        .flat_map(|r| r.groups.iter().map(move |g| (r.started, g)))
        .collect()
}

impl Measured {
    /// The row of `shaper`'s run of `scenario`.
    pub(super) fn row(
        &self,
        shaper: Shaper,
        scenario: Scenario,
        options: &HierarchyOptions,
    ) -> HierarchyRow {
        let loads = scenario.load();
        let demands: Vec<Demand> = loads
            .iter()
            .enumerate()
            .map(|(i, load)| Demand {
                limit_bps: options.child_bps as f64,
                weight: 1.0,
                offered_bps: match load {
                    Load::Idle => 0.0,
                    Load::Tcp => f64::INFINITY,
                    Load::Udp => self.offered_bps[i].unwrap_or(options.flood_bps as f64),
                },
            })
            .collect();
        let shares = fair_shares(options.parent_bps as f64, &demands);
        let classes = (0..CHILDREN.len())
            .map(|i| super::ClassRate {
                class: CHILDREN[i].to_owned(),
                load: loads[i],
                limit_bps: options.child_bps,
                offered_bps: self.offered_bps[i],
                fair_share_bps: shares[i],
                achieved_bps: self.achieved_bps[i],
                error_pct: (shares[i] > 0.0)
                    .then(|| (self.achieved_bps[i] / shares[i] - 1.0) * 100.0),
                daemon_drops: None,
            })
            .collect();
        HierarchyRow {
            shaper,
            scenario,
            parent_bps: options.parent_bps,
            classes,
            sum_bps: self.achieved_bps.iter().sum(),
            receiver_bps: self.receiver_bps,
            cpu_pct: cpu_pct_per_gbit(self.machine_cores, self.receiver_bps),
            daemon_cpu_pct: self
                .daemon_cores
                .map(|c| cpu_pct_per_gbit(c, self.receiver_bps)),
            cpu_account: CpuAccount::of(self.split, self.receiver_bps),
            daemon_socket_drops: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(offered_bps: f64) -> Demand {
        Demand {
            limit_bps: 200.0,
            weight: 1.0,
            offered_bps,
        }
    }

    #[test]
    fn busy_children_share_the_parent_and_one_alone_takes_its_limit() {
        let inf = f64::INFINITY;
        assert_eq!(
            fair_shares(300.0, &[child(inf), child(inf), child(0.0)]),
            [150.0, 150.0, 0.0]
        );
        assert_eq!(
            fair_shares(300.0, &[child(inf), child(0.0), child(0.0)]),
            [200.0, 0.0, 0.0]
        );
        assert_eq!(
            fair_shares(300.0, &[child(inf), child(inf), child(2000.0)]),
            [100.0, 100.0, 100.0]
        );
    }

    #[test]
    fn what_a_light_child_leaves_goes_to_the_others_by_weight() {
        let heavy = Demand {
            weight: 2.0,
            limit_bps: 1000.0,
            offered_bps: f64::INFINITY,
        };
        let shares = fair_shares(300.0, &[child(30.0), heavy, child(f64::INFINITY)]);
        assert_eq!(shares, [30.0, 180.0, 90.0]);
        assert_eq!(fair_shares(300.0, &[]), Vec::<f64>::new());
    }
}
