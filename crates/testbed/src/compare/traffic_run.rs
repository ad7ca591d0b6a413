//! One run's traffic through the shaper started for it: the bulk flows and the probe of
//! `crate::trafficgen` driven from the sender, the start awaited at the receiver, then the
//! measured windows, the probe and the CPU ([`super::measure`]) as a [`Row`].

use super::measure::{self, cpu_pct_per_gbit, MachineCpu};
use super::{
    volume_cap, CompareError, Row, RunReport, Shaper, START_BYTES, START_BYTES_PER_FLOW,
    START_POLL, START_TIMEOUT, TAIL,
};
use crate::netns::{InterfaceCounters, TopoError, Topology};
use crate::stats::{jain_index, mean, mean_abs_deviation_pct};
use crate::trafficgen::TrafficReport;
use crate::trafficgen::{self, sleep_until, FlowGroup, ProbeReport, TrafficError, TrafficPlan};
use std::time::{Duration, Instant};

/// What the measured part of a run saw.
struct Measured {
    /// Window rates on the wire, bits/s.
    rates: Vec<f64>,
    /// CPUs busy over the windows ([`MachineCpu`]).
    machine_cores: f64,
    /// The same, split by kind of time.
    machine_split: measure::CoresSplit,
    /// The daemon thread's CPUs over the windows.
    daemon_cores: Option<f64>,
    /// The probe, run during the windows only.
    probe: ProbeReport,
}

/// Where a run's traffic goes: from `sender` to `receiver_addr` in `receiver`, measured on the
/// receiver's `receiver_if` (the bump in the wire's `snd0` -> `rcv0`, or the attach topology's
/// host -> `rcv0`, [`attach`]).
#[derive(Clone, Debug)]
pub(crate) struct TrafficPath {
    pub(crate) sender: crate::netns::Namespace,
    pub(crate) receiver: crate::netns::Namespace,
    pub(crate) receiver_if: String,
    pub(crate) receiver_addr: std::net::Ipv4Addr,
    /// The congestion control every TCP socket of the run sets (`TCP_CONGESTION`); `None`: the
    /// sender namespace's default.
    pub(crate) congestion: Option<String>,
}

impl TrafficPath {
    pub(crate) fn of(topo: &Topology) -> Self {
        TrafficPath {
            sender: topo.sender.clone(),
            receiver: topo.receiver.clone(),
            receiver_if: topo.receiver_if.clone(),
            receiver_addr: topo.receiver_addr,
            congestion: None,
        }
    }
}

/// Drives the traffic of one run through the started shaper and measures it: `timing` is the
/// warm-up and the measured time; `daemon_cpu` reads the daemon's CPU time (ns), `None` when no
/// daemon runs, and `processes` are other processes whose user time the machine's CPU counts (a
/// daemon run as a process of its own); `tail` runs after the measured windows, while the
/// traffic still runs (the run's [`TAIL`]), outside the CPU's account.
pub(crate) fn measure_run(
    path: &TrafficPath,
    timing: (Duration, Duration),
    (daemon_cpu, processes): (&mut dyn FnMut() -> Option<u64>, &[u32]),
    tail: &mut dyn FnMut(),
    shaper: Shaper,
    (target, flows): (u64, usize),
    port: u16,
) -> Result<RunReport, CompareError> {
    let (warmup, span) = timing;
    let duration = warmup + span + TAIL;
    let mut group = FlowGroup::tcp("bulk", port, flows);
    group.max_bytes_per_flow = volume_cap(target, duration);
    let plan = TrafficPlan::new(path.receiver_addr, vec![group], duration);
    let mut counters = path.receiver.interface_counters(&path.receiver_if)?;
    let mut machine = MachineCpu::with_processes(processes).map_err(TopoError::Io)?;
    let traffic = spawn_traffic(path, plan);

    // The bulk traffic starts after every connection is accepted: wait for its first bytes.
    let base = counters.read()?.rx_bytes;
    let threshold = START_BYTES + START_BYTES_PER_FLOW * flows as u64;
    let give_up = Instant::now() + START_TIMEOUT;
    let started = loop {
        if counters.read()?.rx_bytes.saturating_sub(base) > threshold {
            break Some(Instant::now());
        }
        if traffic.is_finished() || Instant::now() > give_up {
            break None;
        }
        std::thread::sleep(START_POLL);
    };
    let measured = match started {
        Some(t0) => Some(measure_windows(
            path,
            span,
            daemon_cpu,
            (&mut counters, &mut machine),
            t0 + warmup,
            port + 1,
        )?),
        None => None,
    };
    if measured.is_some() {
        tail();
    }
    let bulk = traffic.join().map_err(|_| TrafficError::ThreadPanicked)??;
    let per_flow: Vec<f64> = bulk
        .groups
        .first()
        .map(|g| g.bytes_per_flow.iter().map(|&b| b as f64).collect())
        .unwrap_or_default();
    let Some(m) = measured else {
        return Err(CompareError::NoTraffic {
            shaper: shaper.name(),
            target_bps: target,
            flows,
        });
    };
    let achieved = mean(&m.rates);
    Ok(RunReport {
        row: Row {
            shaper,
            target_bps: target,
            flows,
            achieved_bps: achieved,
            deviation_pct: mean_abs_deviation_pct(&m.rates, target as f64).unwrap_or(100.0),
            rtt_p99_us: answered(&m.probe).map(|p| p.p99_us),
            rtt_p50_us: answered(&m.probe).map(|p| p.p50_us),
            cpu_pct: cpu_pct_per_gbit(m.machine_cores, achieved),
            daemon_cpu_pct: m.daemon_cores.map(|c| cpu_pct_per_gbit(c, achieved)),
            jain_bulk: jain_index(&per_flow),
            cpu_account: measure::CpuAccount::of(m.machine_split, achieved),
            queue: None,
        },
        windows: m.rates.len(),
        probe_samples: m.probe.samples,
    })
}

/// The probe's report if at least one ping was answered (its percentiles are then measured).
pub fn answered(probe: &ProbeReport) -> Option<&ProbeReport> {
    (probe.samples > 0).then_some(probe)
}

type TrafficThread = std::thread::JoinHandle<Result<TrafficReport, TrafficError>>;

fn spawn_traffic(path: &TrafficPath, plan: TrafficPlan) -> TrafficThread {
    let plan = match &path.congestion {
        Some(name) => plan.with_congestion(name),
        None => plan,
    };
    let (snd, rcv) = (path.sender.clone(), path.receiver.clone());
    std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)))
}

/// From `first` on: the probe (its own connection, so the warm-up's slow-start queue is not in
/// its percentiles), the rate windows, and the CPU over them.
fn measure_windows(
    path: &TrafficPath,
    span: Duration,
    daemon_cpu: &mut dyn FnMut() -> Option<u64>,
    (counters, machine): (&mut InterfaceCounters, &mut MachineCpu),
    first: Instant,
    probe_port: u16,
) -> Result<Measured, CompareError> {
    sleep_until(first);
    let probe_plan = TrafficPlan::new(path.receiver_addr, Vec::new(), span).with_probe(probe_port);
    let probe = spawn_traffic(path, probe_plan);
    let cpu0 = (machine.read().map_err(TopoError::Io)?, daemon_cpu());
    let mut sampler = measure::WindowSampler::default();
    let wire = |c: &mut InterfaceCounters| -> Result<u64, CompareError> {
        let l = c.read()?;
        Ok(measure::wire_bytes(l.rx_bytes, l.rx_packets))
    };
    sampler.push(Instant::now(), wire(counters)?);
    let n = (span.as_nanos() / measure::WINDOW.as_nanos()).max(1) as u32;
    for k in 1..=n {
        sleep_until(first + measure::WINDOW * k);
        sampler.push(Instant::now(), wire(counters)?);
    }
    let elapsed = Instant::now().saturating_duration_since(first);
    let cpu1 = (machine.read().map_err(TopoError::Io)?, daemon_cpu());
    let probe = probe.join().map_err(|_| TrafficError::ThreadPanicked)??;
    let daemon_cores = match (cpu0.1, cpu1.1) {
        (Some(a), Some(b)) if !elapsed.is_zero() => {
            Some(b.saturating_sub(a) as f64 / elapsed.as_nanos() as f64)
        }
        _ => None,
    };
    Ok(Measured {
        rates: sampler.rates(),
        machine_cores: cpu1.0.cores_since(&cpu0.0),
        machine_split: cpu1.0.split_since(&cpu0.0),
        daemon_cores,
        probe: probe.probe.unwrap_or_default(),
    })
}
