//! `metronome run` refuses a bump in the wire whose two interfaces would send the daemon's own
//! frames back to it (crates/daemon/src/os/ports.rs, `refuse_loop`): the two ends of one veth
//! pair, two ports of one bridge, a bridge and its own port. Each start exits with status 2 and
//! says why before it opens a port; two unrelated interfaces are not refused by it.
//!
//! Needs CAP_NET_ADMIN and iproute2; fails otherwise (skips, saying why, under
//! `METRONOME_SKIP_PRIVILEGED=1`). The topology (its own `mtr-lp` names) is removed on every
//! path, and a daemon that did not exit in time is killed.

mod common;

use common::Scratch;
use metronome_testbed::netns::{self, Topology};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a refused start may take to exit: a bound against hanging, not a measurement (it
/// exits before opening a port, in milliseconds).
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// Runs `metronome run` in `topo`'s shaper namespace with `inside` and `outside`; its exit code
/// and standard error.
fn start(topo: &Topology, dir: &Path, inside: &str, outside: &str) -> (Option<i32>, String) {
    let config = dir.join(format!("{inside}-{outside}.toml"));
    let text = format!(
        "[interfaces]\ninside = \"{inside}\"\noutside = \"{outside}\"\n[daemon]\n\
         metrics_listen = \"127.0.0.1:0\"\n"
    );
    std::fs::write(&config, text).unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", topo.shaper.name()])
        .arg(env!("CARGO_BIN_EXE_metronome"))
        .args(["run", "--control", "", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ip netns exec metronome run");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > EXIT_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            panic!("metronome run with {inside} and {outside} did not exit within {EXIT_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

#[test]
fn a_start_that_would_loop_exits_2_saying_why() {
    let test = "a_start_that_would_loop_exits_2_saying_why";
    let Some(mut topo) = netns::bump_in_the_wire_or_skip("mtr-lp", test) else {
        return;
    };
    let dir = Scratch::new("loops");
    let ns = topo.shaper.clone();
    ns.ip(&["link", "add", "lpa", "type", "veth", "peer", "name", "lpb"])
        .unwrap();
    for end in ["lpa", "lpb"] {
        ns.ip(&["link", "set", end, "up"]).unwrap();
    }
    for (inside, outside) in [("lpa", "lpb"), ("lpb", "lpa")] {
        let (code, stderr) = start(&topo, &dir.0, inside, outside);
        assert_eq!(code, Some(2), "{inside}/{outside}: {stderr}");
        assert!(stderr.contains("veth pair"), "{inside}/{outside}: {stderr}");
    }
    topo.bridge_shaper().unwrap();
    let (inside, outside) = (topo.shaper_in.clone(), topo.shaper_out.clone());
    for (i, o) in [
        (inside.as_str(), outside.as_str()),
        ("br0", inside.as_str()),
        (outside.as_str(), "br0"),
    ] {
        let (code, stderr) = start(&topo, &dir.0, i, o);
        assert_eq!(code, Some(2), "{i}/{o}: {stderr}");
        assert!(stderr.contains("bridge \"br0\""), "{i}/{o}: {stderr}");
    }
}
