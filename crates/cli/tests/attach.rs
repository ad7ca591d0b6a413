//! Attach mode on real traffic (`[interfaces] attach`, `crates/daemon/src/os/attach.rs`), with
//! the built `metronome` binary in the host namespace of an attach topology (a host whose own TCP
//! and two bridged workloads leave through the uplink `up0`,
//! `metronome_testbed::netns::attach`):
//!
//! * each class holds its rate: two workloads by `from` (their veths, bridged and routed out of
//!   the uplink), the host's own sockets in a cgroup by `cgroup`, the rest by the default class;
//! * a clean stop leaves the uplink's qdiscs, filters, tcx programs and the host's interfaces as
//!   they were before the start;
//! * a SIGKILL under load leaves traffic flowing unshaped within 1 s (the hooks die with the
//!   process), and a restart attaches once, without duplicates;
//! * SIGHUP adds and removes attached interfaces;
//! * an attached uplink that goes down and up, or is deleted and made again, is shaped again
//!   (counted: `metronome_link_down_total`, `metronome_attach_events_total`);
//! * an interface that does not exist, or that another daemon is attached to, is refused at
//!   start (exit 2, named).

mod common;

use common::{
    check_share, egress_programs, scrape_host, start_daemon_in, stop_cleanly, wait_until, Daemon,
    Scratch,
};
use metronome_daemon::os::attach::tcx_programs;
use metronome_testbed::netns::attach::{attach_or_skip, AttachTopology, WorkloadLink};
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The classes of the test configuration: name, rate in bit/s.
const W0_BPS: u64 = 40_000_000;
const W1_BPS: u64 = 20_000_000;
const JOB_BPS: u64 = 30_000_000;
const DEFAULT_BPS: u64 = 60_000_000;

/// Ports of the sinks in the receiver: the host's own flows, workload 0, workload 1, the job.
const PORTS: [u16; 4] = [5301, 5302, 5303, 5310];

fn write_config(topo: &AttachTopology, dir: &Path, cgroup: &str) -> PathBuf {
    let text = format!(
        "[interfaces]\nattach = [\"{up}\"]\n\n\
         [[class]]\nname = \"w0\"\nmatch = {{ from = \"{hv0}\" }}\nrate = \"{W0_BPS}\"\n\n\
         [[class]]\nname = \"w1\"\nmatch = {{ from = \"{hv1}\" }}\nrate = \"{W1_BPS}\"\n\n\
         [[class]]\nname = \"job\"\nmatch = {{ cgroup = \"{cgroup}\" }}\nrate = \"{JOB_BPS}\"\n\n\
         [default]\nrate = \"{DEFAULT_BPS}\"\n",
        up = topo.uplink,
        hv0 = topo.workloads[0].host_if,
        hv1 = topo.workloads[1].host_if,
    );
    let path = dir.join("attach.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(topo: &AttachTopology, dir: &Path, config: &Path, label: &str) -> Daemon {
    let socket = dir.join(format!("notify-{label}"));
    let _ = std::fs::remove_file(&socket);
    let stderr = dir.join(format!("{label}.log"));
    start_daemon_in(
        topo.host.name(),
        config,
        &socket,
        &stderr,
        label,
        Duration::from_secs(10),
    )
}

/// Runs `metronome run --config CONFIG` in the host namespace and checks that it exits 2 at
/// start, its error containing `why`.
fn refused_at_start(topo: &AttachTopology, config: &Path, why: &str) {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", topo.host.name()))
        .arg(env!("CARGO_BIN_EXE_metronome"))
        .args(["run", "--control", "", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(why), "{stderr}");
}

/// Sends SIGHUP to `daemon`.
fn hangup(daemon: &Daemon) {
    let pid = daemon.child.id().to_string();
    let kill = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(kill.success(), "kill -HUP {pid}");
}

fn run_in(ns: &str, program: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{program} {args:?}: {:?}", out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a start may change and a stop must restore: the uplink's qdiscs and filters, the tcx
/// programs of the uplink and the workloads' veths, the host namespace's interfaces.
fn host_state(topo: &AttachTopology) -> String {
    let ns = topo.host.name();
    let up = topo.uplink.as_str();
    let mut state = String::new();
    state += &run_in(ns, "tc", &["qdisc", "show", "dev", up]);
    state += &run_in(ns, "tc", &["filter", "show", "dev", up, "egress"]);
    state += &run_in(ns, "tc", &["filter", "show", "dev", up, "ingress"]);
    let links = run_in(ns, "ip", &["-o", "link", "show"]);
    let mut names: Vec<&str> = links.lines().filter_map(|l| l.split(": ").nth(1)).collect();
    names.sort_unstable();
    state += &format!("links {names:?}\n");
    state += &format!("tcx {:?}\n", tcx(topo));
    state
}

/// The tcx programs at the uplink's egress and at each workload veth's ingress.
fn tcx(topo: &AttachTopology) -> Vec<(String, Vec<String>)> {
    let mut ifaces = vec![(topo.uplink.clone(), true)];
    ifaces.extend(topo.workloads.iter().map(|w| (w.host_if.clone(), false)));
    topo.host
        .run(move || {
            ifaces
                .into_iter()
                .map(|(i, egress)| {
                    let progs = tcx_programs(&i, egress).unwrap();
                    (i, progs)
                })
                .collect()
        })
        .unwrap()
}

fn capture_pairs(topo: &AttachTopology) -> usize {
    run_in(topo.host.name(), "ip", &["-o", "link", "show"])
        .lines()
        .filter(|l| l.split(": ").nth(1).is_some_and(|n| n.starts_with("mtc")))
        .count()
}

/// A cgroup v2 for the test's job, removed when dropped.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new() -> Cgroup {
        let root = metronome_daemon::os::attach::cgroup2_root();
        let name = format!("mtr-attach-{}", std::process::id());
        let dir = PathBuf::from(root).join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Cgroup(dir)
    }

    /// The path a configuration names it by (from the hierarchy's root).
    fn config_path(&self) -> String {
        format!("/{}", self.0.file_name().unwrap().to_string_lossy())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs `iperf3 -c` for `secs` seconds from the host namespace, inside `cgroup`; its receiver
/// goodput in bit/s.
fn iperf3_in_cgroup(topo: &AttachTopology, cgroup: &Cgroup, port: u16, secs: u32) -> f64 {
    let mut server = Command::new("ip")
        .args(["netns", "exec", topo.receiver.name(), "iperf3", "-s", "-1"])
        .args(["-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec iperf3 -J -c {} -p {port} -t {secs}",
        cgroup.0.display(),
        topo.receiver_addr
    );
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", topo.host.name()))
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    let _ = server.wait();
    assert!(out.status.success(), "iperf3 in the cgroup: {out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap()
}

fn plan(topo: &AttachTopology, name: &str, port: u16, secs: u64) -> TrafficPlan {
    TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp(name, port, 4)],
        Duration::from_secs(secs),
    )
}

#[test]
fn attached_classes_hold_their_rates_stop_cleanly_and_fail_open_on_sigkill() {
    let test = "attached_classes_hold_their_rates_stop_cleanly_and_fail_open_on_sigkill";
    let Some(topo) = attach_or_skip("mtr-att", (2, WorkloadLink::Bridge), test) else {
        return;
    };
    let dir = Scratch::new("attach");
    let cgroup = Cgroup::new();
    let config = write_config(&topo, &dir.0, &cgroup.config_path());
    // Someone else's tc set-up on the uplink, which must survive the daemon's start and stop.
    let ns = topo.host.name();
    let up = topo.uplink.as_str();
    run_in(ns, "tc", &["qdisc", "add", "dev", up, "clsact"]);
    let others = [
        "filter", "add", "dev", up, "ingress", "protocol", "all", "u32", "match", "u32", "0", "0",
    ];
    run_in(ns, "tc", &others);
    let others = [
        "filter", "add", "dev", up, "egress", "protocol", "arp", "u32", "match", "u32", "0", "0",
    ];
    run_in(ns, "tc", &others);
    let before = host_state(&topo);
    assert!(before.contains("u32"), "{before}");

    let daemon = start(&topo, &dir.0, &config, "first");
    let hooks = tcx(&topo);
    assert_eq!(hooks[0].1, ["capture"], "{hooks:?}");
    assert!(hooks[1..].iter().all(|(_, p)| p == &["stamp"]), "{hooks:?}");
    assert_eq!(capture_pairs(&topo), 2, "one veth pair");
    // A second daemon on the same interface is refused and leaves the first one's pair alone.
    refused_at_start(&topo, &config, "another metronome is attached");
    assert_eq!(tcx(&topo), hooks, "the first daemon's hooks stay");
    assert_eq!(capture_pairs(&topo), 2, "and its pair");

    // The host's own flows (default class) and both workloads at once, 4 s.
    let senders = [
        (topo.host.clone(), "default", PORTS[0], DEFAULT_BPS),
        (topo.workloads[0].ns.clone(), "w0", PORTS[1], W0_BPS),
        (topo.workloads[1].ns.clone(), "w1", PORTS[2], W1_BPS),
    ];
    let threads: Vec<_> = senders
        .iter()
        .map(|(ns, name, port, rate)| {
            let (ns, receiver) = (ns.clone(), topo.receiver.clone());
            let plan = plan(&topo, name, *port, 4);
            let (name, rate) = (name.to_string(), *rate);
            std::thread::spawn(move || {
                let report = trafficgen::run(&plan, Some(&ns), Some(&receiver)).unwrap();
                (name, report.groups[0].mean_bps(), rate)
            })
        })
        .collect();
    for t in threads {
        let (name, bps, rate) = t.join().unwrap();
        check_share(&name, bps, rate);
    }
    // The host's own sockets in the cgroup: their class.
    let job = iperf3_in_cgroup(&topo, &cgroup, PORTS[3], 3);
    check_share("job", job, JOB_BPS);

    // A clean stop restores everything.
    let mut daemon = daemon;
    stop_cleanly(&mut daemon);
    assert_eq!(host_state(&topo), before, "{}", daemon.log());
    drop(daemon);

    // SIGKILL under load: traffic flows again, unshaped, within 1 s.
    let daemon = start(&topo, &dir.0, &config, "killed");
    let mut counters = topo.receiver.interface_counters(&topo.receiver_if).unwrap();
    let (ns, receiver) = (topo.workloads[0].ns.clone(), topo.receiver.clone());
    let load_plan = plan(&topo, "w0", PORTS[1], 4);
    let load = std::thread::spawn(move || trafficgen::run(&load_plan, Some(&ns), Some(&receiver)));
    let start_at = Instant::now();
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut killed_at = None;
    let mut daemon = daemon;
    while start_at.elapsed() < Duration::from_millis(3800) {
        let now = start_at.elapsed();
        samples.push((now, counters.read().unwrap().rx_bytes));
        if killed_at.is_none() && now >= Duration::from_millis(1500) {
            daemon.child.kill().unwrap();
            killed_at = Some(start_at.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    load.join().unwrap().unwrap();
    let killed_at = killed_at.unwrap();
    let _ = daemon.child.wait();
    // The longest time without a received byte after the kill, and the rate in the second
    // after the first second.
    let after: Vec<&(Duration, u64)> = samples.iter().filter(|(t, _)| *t >= killed_at).collect();
    let mut longest = Duration::ZERO;
    let mut last_change = killed_at;
    for pair in after.windows(2) {
        if pair[1].1 > pair[0].1 {
            last_change = pair[1].0;
        }
        longest = longest.max(pair[1].0 - last_change);
    }
    let bytes_at = |t: Duration| {
        samples
            .iter()
            .find(|(at, _)| *at >= t)
            .map_or(samples.last().unwrap().1, |s| s.1)
    };
    let second = Duration::from_secs(1);
    let unshaped_bps =
        (bytes_at(killed_at + 2 * second) - bytes_at(killed_at + second)) as f64 * 8.0;
    println!(
        "after SIGKILL: longest time without a received byte {longest:?}; \
         {:.1} Mbit/s in the second after the first",
        unshaped_bps / 1e6
    );
    assert!(
        longest < second,
        "traffic stopped for {longest:?} after the kill"
    );
    assert!(
        unshaped_bps > 2.0 * W0_BPS as f64,
        "{unshaped_bps} bit/s after the kill: still shaped or stopped"
    );
    let hooks = tcx(&topo);
    assert_eq!(
        hooks[0].1,
        Vec::<String>::new(),
        "the capture hook died with the daemon"
    );
    assert_eq!(
        capture_pairs(&topo),
        2,
        "the killed daemon's pair stays behind"
    );

    // A restart replaces the pair and attaches once.
    let mut daemon = start(&topo, &dir.0, &config, "restarted");
    let hooks = tcx(&topo);
    assert_eq!(hooks[0].1, ["capture"], "{hooks:?}");
    assert!(hooks[1..].iter().all(|(_, p)| p == &["stamp"]), "{hooks:?}");
    assert_eq!(capture_pairs(&topo), 2, "one pair after the restart");

    // SIGHUP adds an attached interface (the first workload's veth: what the host sends to it),
    // then takes the uplink away.
    let hv0 = topo.workloads[0].host_if.clone();
    let text = std::fs::read_to_string(&config).unwrap();
    let both = text.replace(
        &format!("attach = [\"{}\"]", topo.uplink),
        &format!("attach = [\"{}\", \"{hv0}\"]", topo.uplink),
    );
    assert_ne!(both, text);
    std::fs::write(&config, &both).unwrap();
    hangup(&daemon);
    wait_until("two capture pairs after adding an interface", || {
        capture_pairs(&topo) == 4 && egress_programs(&topo, &hv0) == ["capture"]
    });
    std::fs::write(&config, both.replace(&format!("\"{}\", ", topo.uplink), "")).unwrap();
    hangup(&daemon);
    wait_until("the uplink's pair gone after removing it", || {
        capture_pairs(&topo) == 2 && egress_programs(&topo, &topo.uplink).is_empty()
    });
    stop_cleanly(&mut daemon);
    assert_eq!(host_state(&topo), before, "{}", daemon.log());
    drop(cgroup);
    topo.remove().unwrap();
}

#[test]
fn an_interface_that_does_not_exist_is_refused_with_exit_2() {
    let test = "an_interface_that_does_not_exist_is_refused_with_exit_2";
    let Some(topo) = attach_or_skip("mtr-att2", (0, WorkloadLink::Bridge), test) else {
        return;
    };
    let dir = Scratch::new("attach-refused");
    let config = dir.0.join("missing.toml");
    std::fs::write(&config, "[interfaces]\nattach = [\"nosuch0\"]\n").unwrap();
    let before = host_state(&topo);
    refused_at_start(&topo, &config, "no interface \"nosuch0\"");
    assert_eq!(host_state(&topo), before);
    topo.remove().unwrap();
}

/// The value of the first series of `body` that starts with `prefix` (0 when there is none).
fn series(body: &str, prefix: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Bit/s the receiver's uplink received over `span`.
fn received_bps(topo: &AttachTopology, span: Duration) -> f64 {
    let mut counters = topo.receiver.interface_counters(&topo.receiver_if).unwrap();
    let before = counters.read().unwrap().rx_bytes;
    std::thread::sleep(span);
    let after = counters.read().unwrap().rx_bytes;
    (after - before) as f64 * 8.0 / span.as_secs_f64()
}

#[test]
fn an_attached_uplink_that_flaps_or_is_recreated_is_shaped_again() {
    let test = "an_attached_uplink_that_flaps_or_is_recreated_is_shaped_again";
    let Some(topo) = attach_or_skip("mtr-att3", (0, WorkloadLink::Bridge), test) else {
        return;
    };
    let dir = Scratch::new("attach-flap");
    let config = dir.0.join("flap.toml");
    let rate = 50_000_000u64;
    let text = format!(
        "[interfaces]\nattach = [\"{}\"]\n\n[default]\nrate = \"{rate}\"\n",
        topo.uplink
    );
    std::fs::write(&config, text).unwrap();
    let mut daemon = start(&topo, &dir.0, &config, "flap");
    let (host, receiver) = (topo.host.clone(), topo.receiver.clone());
    let load = plan(&topo, "default", PORTS[0], 6);
    let traffic = std::thread::spawn(move || trafficgen::run(&load, Some(&host), Some(&receiver)));
    std::thread::sleep(Duration::from_millis(1500));
    let up = topo.uplink.clone();
    topo.host.ip(&["link", "set", &up, "down"]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    topo.host.ip(&["link", "set", &up, "up"]).unwrap();
    // TCP's retransmission timer brings the flows back within a second or two.
    std::thread::sleep(Duration::from_millis(2000));
    let after_flap = received_bps(&topo, Duration::from_millis(1500));
    traffic.join().unwrap().unwrap();
    let body = scrape_host(&topo);
    let downs = series(
        &body,
        &format!("metronome_attach_events_total{{interface=\"{up}\",event=\"down\"}}"),
    );
    println!(
        "after a 0.5 s flap: {:.1} Mbit/s on the wire; down events {downs}",
        after_flap / 1e6
    );
    assert!(downs >= 1.0, "the flap was not counted:\n{body}");
    let share = after_flap / rate as f64;
    assert!(
        (0.9..=1.03).contains(&share),
        "{share:.3} of the rate after the flap"
    );

    // The uplink deleted and made again under its name (with its peer and addresses).
    topo.recreate_uplink(Duration::from_millis(500)).unwrap();
    wait_until("the capture hook on the re-created uplink", || {
        egress_programs(&topo, &up) == ["capture"]
    });
    let (host, receiver) = (topo.host.clone(), topo.receiver.clone());
    let again = plan(&topo, "default", PORTS[0], 3);
    let report = trafficgen::run(&again, Some(&host), Some(&receiver)).unwrap();
    check_share("after re-creation", report.groups[0].mean_bps(), rate);
    let body = scrape_host(&topo);
    let events: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("metronome_attach_events_total") && l.contains(&up))
        .collect();
    println!("{events:?}");
    assert!(
        !events.is_empty(),
        "the re-creation was not counted:\n{body}"
    );
    stop_cleanly(&mut daemon);
    topo.remove().unwrap();
}
