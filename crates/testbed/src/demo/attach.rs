//! `metronome demo --attach`: the daemon attached in place to a host's uplink
//! (`[interfaces] attach`), on an [`AttachTopology`] with two workloads.
//!
//! `metronome run` runs in the host namespace (a process of its own, [`AttachedDaemon`]; the
//! binary is the caller's) with [`attach_config_text`]: class `w1` (what
//! entered the host from the first workload's veth, `match = { from = "hv0" }`) at
//! [`W1_BPS`] in the fair mode, class `w2` (from `hv1`) at [`W2_BPS`], and class `host` (the
//! rest of the TCP to the receiver: the host's own) at [`HOST_BPS`]; classes are tried in file
//! order, so the workloads' classes come first. The traffic: 8 TCP flows from the host, 4 from
//! each workload, all to the receiver behind the uplink, and the RTT probe from the host. Every
//! second it prints each class's rate from the daemon's own class byte counters (its metrics
//! endpoint, read from inside the host namespace), at the end the
//! conformance table of `metronome demo` ([`super::format_table`]).
//!
//! A configuration the daemon refuses, a daemon that exits at start or does not stop cleanly is
//! the error
//! ([`DemoError::Refused`]): nothing is measured without the daemon.

use super::{class_bytes, conformance, format_table, ClassRow, DemoError};
use crate::compare::attach::{daemon_config, AttachedDaemon};
use crate::netns::attach::{AttachTopology, WorkloadLink};
use crate::trafficgen::{self, FlowGroup, TrafficError, TrafficPlan, TrafficReport};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Prefix of the attach demo's namespaces.
pub const NS_PREFIX: &str = "mtr-dema";
/// Class `w1`'s rate (the first workload), bits/s: 100 Mbit/s.
pub const W1_BPS: u64 = 100_000_000;
/// Class `w2`'s rate (the second workload), bits/s: 50 Mbit/s.
pub const W2_BPS: u64 = 50_000_000;
/// Class `host`'s rate (the host's own TCP), bits/s: 200 Mbit/s.
pub const HOST_BPS: u64 = 200_000_000;
/// The classes in table order, with their rate and the TCP flows sent into each.
const CLASSES: [(&str, u64, usize); 3] =
    [("host", HOST_BPS, 8), ("w1", W1_BPS, 4), ("w2", W2_BPS, 4)];
/// Destination ports: the host's flows, then each workload's, then the probe.
const PORTS: [u16; 3] = [5201, 5301, 5401];
/// The probe's port.
const PROBE_PORT: u16 = 7000;

/// The demo's configuration text: attached to `uplink`, classes `w1` and `w2` from the host-side
/// veths `from` (the workloads'), then `host`, TCP to `receiver` (see the module docs).
pub fn attach_config_text(uplink: &str, from: [&str; 2], receiver: std::net::Ipv4Addr) -> String {
    format!(
        "[interfaces]\nattach = [\"{uplink}\"]\n\n\
         [[class]]\nname = \"w1\"\nmatch = {{ from = \"{w1}\" }}\nrate = {W1_BPS}\nfair = true\n\n\
         [[class]]\nname = \"w2\"\nmatch = {{ from = \"{w2}\" }}\nrate = {W2_BPS}\n\n\
         [[class]]\nname = \"host\"\nmatch = {{ dst = \"{receiver}\", protocol = \"tcp\" }}\n\
         rate = {HOST_BPS}\n",
        w1 = from[0],
        w2 = from[1],
    )
}

/// The attach demo (needs CAP_NET_ADMIN), the workloads joined as `link` says: prints live
/// rates and the table to `out`.
pub fn run_attached(
    duration: Duration,
    (link, binary): (WorkloadLink, &Path),
    out: &mut dyn Write,
) -> Result<Vec<ClassRow>, DemoError> {
    let topo = AttachTopology::with_link(NS_PREFIX, 2, link)?;
    topo.enable_sender_ecn();
    let from = [
        topo.workloads[0].host_if.as_str(),
        topo.workloads[1].host_if.as_str(),
    ];
    let text = attach_config_text(&topo.uplink, from, topo.receiver_addr);
    let config = daemon_config(&text).map_err(DemoError::Refused)?;
    let daemon = AttachedDaemon::start(&topo.host, binary, (&text, &config), false)
        .map_err(|e| DemoError::Refused(e.to_string()))?
        .map_err(DemoError::Refused)?;
    let class_bytes_now = || {
        daemon
            .metrics_text()
            .map(|t| class_bytes(&t))
            .unwrap_or_default()
    };
    let _ = writeln!(
        out,
        "shaping real kernel TCP for {duration:?} through {} of the host (attached): host 8 flows \
         at {} Mbit/s, workload {} 4 flows at {} Mbit/s (fair), workload {} 4 flows at {} Mbit/s",
        topo.uplink,
        HOST_BPS / 1_000_000,
        topo.workloads[0].host_if,
        W1_BPS / 1_000_000,
        topo.workloads[1].host_if,
        W2_BPS / 1_000_000,
    );
    let senders = [
        topo.host.clone(),
        topo.workloads[0].ns.clone(),
        topo.workloads[1].ns.clone(),
    ];
    let traffic: Vec<_> = senders
        .into_iter()
        .zip(CLASSES.iter().zip(PORTS))
        .map(|(snd, (&(name, _, flows), port))| {
            let mut plan = TrafficPlan::new(
                topo.receiver_addr,
                vec![FlowGroup::tcp(name, port, flows)],
                duration,
            );
            if name == "host" {
                plan = plan.with_probe(PROBE_PORT);
            }
            let rcv = topo.receiver.clone();
            std::thread::spawn(move || trafficgen::run(&plan, Some(&snd), Some(&rcv)))
        })
        .collect();
    let names: Vec<&str> = CLASSES.iter().map(|c| c.0).collect();
    let windows = super::sample_classes(
        &names,
        duration,
        class_bytes_now,
        || traffic.iter().all(|t| t.is_finished()),
        out,
    );
    let mut reports: Vec<Result<TrafficReport, TrafficError>> = Vec::new();
    for t in traffic {
        reports.push(t.join().unwrap_or(Err(TrafficError::ThreadPanicked)));
    }
    let pid = daemon.pid();
    let stopped = daemon.stop();
    let mut probe = None;
    for r in reports {
        let r = r?;
        probe = probe.or(r.probe);
    }
    let rows: Vec<ClassRow> = CLASSES
        .iter()
        .zip(&windows)
        .map(|(&(name, rate, _), w)| {
            let target = Some(rate as f64);
            let (achieved, dev) = conformance(w, target);
            ClassRow {
                name: name.to_owned(),
                target_bps: target,
                achieved_bps: achieved,
                deviation_pct: dev,
            }
        })
        .collect();
    let _ = write!(out, "\n{}", format_table(&rows));
    match probe.filter(|p| p.samples > 0) {
        Some(p) => {
            let _ = writeln!(
                out,
                "probe RTT (host class): p50 {} us, p99 {} us",
                p.p50_us, p.p99_us
            );
        }
        None => {
            let _ = writeln!(out, "probe RTT (host class): no answer");
        }
    }
    match stopped {
        Ok(()) => {
            let _ = writeln!(out, "daemon: `metronome run` (pid {pid}) stopped cleanly");
        }
        Err(e) => return Err(DemoError::Refused(e)),
    }
    topo.remove()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_classes_come_before_the_host_class() {
        let text = attach_config_text("up0", ["hv0", "hv1"], std::net::Ipv4Addr::new(10, 78, 0, 2));
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle}: {text}"))
        };
        assert!(at("attach = [\"up0\"]") < at("name = \"w1\""));
        assert!(at("from = \"hv0\"") < at("name = \"w2\""));
        assert!(at("from = \"hv1\"") < at("name = \"host\""));
        assert!(text.contains("dst = \"10.78.0.2\""), "{text}");
    }
}
