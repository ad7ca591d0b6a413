//! `metronome run` as a real process with real privileges (crates/daemon/src/os/privileges.rs): the
//! built binary runs as root in the shaper namespace of a bump-in-the-wire topology
//! (`ip netns exec`, which execs it in place: the pid is the daemon's), opens its ports on the
//! veths, and once it has sent `READY=1` to a `NOTIFY_SOCKET` of the test's, every one of its
//! threads (`/proc/PID/task/*/status`) must have only CAP_NET_ADMIN and CAP_NET_RAW (bits 12
//! and 13) in its effective, permitted and bounding sets, nothing inheritable or ambient, and
//! `NoNewPrivs: 1`; with `[daemon] user = "nobody"` (and two silos) every uid must be nobody's
//! with the two capabilities still there, and when its outside interface is deleted and
//! re-created, every silo opens its port again. SIGTERM then stops it with exit status 0.
//!
//! Needs root (to have capabilities to drop and to switch user) and iproute2; fails otherwise
//! (skips, saying why, under `METRONOME_SKIP_PRIVILEGED=1`). The topology (its own `mtr-pv`
//! names) is removed on every path, and the daemon is killed if the test fails while it runs.

mod common;

use common::{Daemon, Scratch};
use metronome_testbed::netns::{self, Topology};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// CAP_NET_ADMIN (12) and CAP_NET_RAW (13), as `/proc/PID/status` shows a set: a hex mask.
const KEPT_MASK: u64 = (1 << 12) | (1 << 13);
/// What a loop logs when it has opened a port again on a re-created interface
/// (crates/daemon/src/driver/carrier.rs).
const REOPENED: &str = "interface re-created; sockets reopened; resuming";
/// The longest the daemon may take to send `READY=1`, or to reopen its ports: a bound against
/// hanging on a broken run, not a measurement (either takes well under a second).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Starts `metronome run` on `topo`'s shaper with `daemon_keys` under `[daemon]`; returns it
/// once it has sent `READY=1` to the notify socket in `dir`.
fn start(topo: &Topology, dir: &Path, daemon_keys: &str) -> Daemon {
    let config = dir.join("metronome.toml");
    let text = format!(
        "[interfaces]\ninside = \"{}\"\noutside = \"{}\"\n[daemon]\n\
         metrics_listen = \"127.0.0.1:0\"\n{daemon_keys}",
        topo.shaper_in, topo.shaper_out
    );
    std::fs::write(&config, text).unwrap();
    let (socket, stderr) = (dir.join("notify.sock"), dir.join("stderr.log"));
    common::start_daemon(topo, &config, &socket, &stderr, "", READY_WITHIN)
}

/// The fields of a `/proc/.../status` file that matter here.
#[derive(Debug)]
struct Status {
    name: String,
    cap_eff: u64,
    cap_prm: u64,
    cap_inh: u64,
    cap_bnd: u64,
    cap_amb: u64,
    no_new_privs: u64,
    uids: Vec<u32>,
}

fn status(path: &Path) -> Status {
    let text = std::fs::read_to_string(path).unwrap();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {}:\n{text}", path.display()))
            .trim()
            .to_owned()
    };
    let hex = |key: &str| u64::from_str_radix(&field(key), 16).unwrap();
    Status {
        name: field("Name:"),
        cap_eff: hex("CapEff:"),
        cap_prm: hex("CapPrm:"),
        cap_inh: hex("CapInh:"),
        cap_bnd: hex("CapBnd:"),
        cap_amb: hex("CapAmb:"),
        no_new_privs: field("NoNewPrivs:").parse().unwrap(),
        uids: field("Uid:")
            .split_whitespace()
            .map(|u| u.parse().unwrap())
            .collect(),
    }
}

/// The status of every thread of process `pid`.
fn threads(pid: u32) -> Vec<Status> {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    std::fs::read_dir(tasks)
        .unwrap()
        .map(|t| status(&t.unwrap().path().join("status")))
        .collect()
}

/// Checks every thread of `daemon`: only the two capabilities (also in the bounding set, the
/// daemon starting as root with CAP_SETPCAP), no-new-privs, every uid `uid`. Returns how many
/// threads there were.
fn assert_least_privilege(daemon: &Daemon, uid: u32) -> usize {
    let pid = daemon.child.id();
    let all = threads(pid);
    assert_eq!(
        status(Path::new(&format!("/proc/{pid}/status"))).name,
        "metronome",
        "ip netns exec runs the daemon in place"
    );
    for t in &all {
        let sets = (t.cap_eff, t.cap_prm, t.cap_bnd, t.cap_inh, t.cap_amb);
        assert_eq!(sets, (KEPT_MASK, KEPT_MASK, KEPT_MASK, 0, 0), "{t:?}");
        assert_eq!(t.no_new_privs, 1, "{t:?}");
        assert_eq!(t.uids, [uid; 4], "{t:?}");
    }
    all.len()
}

/// Whether `n` threads named `silo-*` run in `daemon`.
fn silo_threads_running(daemon: &Daemon, n: usize) -> bool {
    let pid = daemon.child.id();
    threads(pid)
        .iter()
        .filter(|t| t.name.starts_with("silo-"))
        .count()
        >= n
}

/// Sends SIGTERM and expects a clean stop, exit status 0.
fn stop(mut daemon: Daemon) {
    let pid = daemon.child.id().to_string();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(kill.success());
    let exit = daemon.child.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "{exit}:\n{}", daemon.log());
    let log = daemon.log();
    assert!(log.contains("privileges dropped"), "{log}");
}

/// The topology, or `None` (the test skipped, saying why) without root or CAP_NET_ADMIN.
fn topology(test: &str) -> Option<Topology> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(str::to_owned)
        })
        .is_some_and(|uids| uids.split_whitespace().nth(1) == Some("0"));
    if !root {
        netns::skip_unprivileged(
            test,
            &"not root: no capabilities to drop, no user to switch",
        );
        return None;
    }
    netns::bump_in_the_wire_or_skip("mtr-pv", test)
}

#[test]
fn as_root_the_daemon_keeps_only_net_raw_and_net_admin() {
    let Some(topo) = topology("as_root_the_daemon_keeps_only_net_raw_and_net_admin") else {
        return;
    };
    let scratch = Scratch::new("priv-root");
    let dir = &scratch.0;
    let daemon = start(&topo, dir, "");
    // The loop and the metrics endpoint's threads.
    assert!(assert_least_privilege(&daemon, 0) >= 2);
    stop(daemon);
}

#[test]
fn with_a_user_every_silo_runs_as_that_user_with_the_two_capabilities() {
    let test = "with_a_user_every_silo_runs_as_that_user_with_the_two_capabilities";
    let Some(topo) = topology(test) else {
        return;
    };
    let Ok(Some(nobody)) = passwd_uid("nobody") else {
        netns::skip_unprivileged(test, &"no user `nobody` in /etc/passwd");
        return;
    };
    let scratch = Scratch::new("priv-nobody");
    let dir = &scratch.0;
    let mut daemon = start(&topo, dir, "user = \"nobody\"\ncores = 2\n");
    // READY=1 comes before the silos' threads start: wait for both.
    let started = Instant::now();
    while !silo_threads_running(&daemon, 2) {
        assert!(
            started.elapsed() < READY_WITHIN,
            "no two silo threads within {READY_WITHIN:?}:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The coordinator, two silos and the metrics endpoint's threads.
    assert!(assert_least_privilege(&daemon, nobody) >= 4);
    // Re-creating an interface makes every silo open its port again (AF_PACKET, fanout,
    // SO_RCVBUFFORCE): as nobody with the two capabilities, without failing.
    let mac = topo.delete_veth(&topo.shaper_out).unwrap();
    topo.recreate_veth(&topo.shaper_out, &mac).unwrap();
    let started = Instant::now();
    while daemon.log().matches(REOPENED).count() < 2 {
        if let Ok(Some(status)) = daemon.child.try_wait() {
            panic!(
                "the daemon exited ({status}) on a re-created interface:\n{}",
                daemon.log()
            );
        }
        assert!(
            started.elapsed() < READY_WITHIN,
            "no two reopenings within {READY_WITHIN:?}:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_least_privilege(&daemon, nobody);
    stop(daemon);
}

/// The uid of `name` from `/etc/passwd` (`None` if it has no line there).
fn passwd_uid(name: &str) -> std::io::Result<Option<u32>> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    Ok(passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next() == Some(name))
            .then(|| f.nth(1).and_then(|u| u.parse().ok()))
            .flatten()
    }))
}

#[test]
fn with_a_user_the_daemon_restores_class_dir_files_only_root_may_read() {
    let test = "with_a_user_the_daemon_restores_class_dir_files_only_root_may_read";
    let Some(topo) = topology(test) else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("priv-class-dir");
    let dir = &scratch.0;
    // As `metronome-cni` leaves it: a directory of mode 0700 and a file of mode 0600, root's.
    let classes = dir.join("classes");
    std::fs::create_dir(&classes).unwrap();
    std::fs::set_permissions(&classes, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = classes.join("pod.json");
    let text = format!(
        r#"{{"interface":"{}","classes":[{{"name":"restored","match":{{"dst":"10.77.0.0/16"}},"rate":"1mbit"}}]}}"#,
        topo.shaper_in
    );
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.join("metronome.toml");
    std::fs::write(
        &config,
        format!(
            "[interfaces]\ninside = \"{}\"\noutside = \"{}\"\n[daemon]\n\
             metrics_listen = \"127.0.0.1:0\"\nuser = \"nobody\"\nclass_dir = \"{}\"\n",
            topo.shaper_in,
            topo.shaper_out,
            classes.display()
        ),
    )
    .unwrap();
    let control = dir.join("run").join("control.sock");
    let (socket, stderr) = (dir.join("notify.sock"), dir.join("stderr.log"));
    let daemon = common::start_daemon_controlled(
        &topo,
        &config,
        &control,
        &socket,
        &stderr,
        "",
        READY_WITHIN,
    );
    let mut client = metronome_daemon::ops::control::Client::connect(&control).unwrap();
    let listed = client.list().unwrap().classes.unwrap_or_default();
    assert!(
        listed
            .iter()
            .any(|c| c["name"] == "restored" && c["source"] == "api"),
        "{listed:?}\n{}",
        daemon.log()
    );
    drop(client);
    stop(daemon);
}
