//! The built `metronome` binary as a process in the shaper namespace of a test topology, for
//! this crate's tests (`privileges.rs`, `restart.rs`): started with `ip netns exec` (which execs
//! it in place, so the child's pid is the daemon's) and a `NOTIFY_SOCKET` of the test's, and
//! killed if the test ends while it runs.

use metronome_testbed::netns::Topology;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A fresh directory for one test's files, searchable by every user (the daemon may have
/// switched to another), removed when dropped (also when the test fails).
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `mtr-NAME-PID` in the temporary directory, emptied first.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mtr-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `metronome run`; killed when dropped while it still runs.
pub struct Daemon {
    pub child: Child,
    stderr: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Daemon {
    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for it to exit, at most `within`.
    #[allow(dead_code)] // one of the tests that include this module waits with `child.wait`
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < within,
                "the daemon did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Starts `metronome run --config CONFIG` in `topo`'s shaper namespace, its notify socket at
/// `socket` (writable by every user: the daemon may have switched to another) and its standard
/// error in `stderr`; returns it once it has sent `READY=1`, at most `within` later. `label`
/// names it in a failure's message.
#[allow(dead_code)] // not every test that includes this module uses it
pub fn start_daemon(
    topo: &Topology,
    config: &Path,
    socket: &Path,
    stderr: &Path,
    label: &str,
    within: Duration,
) -> Daemon {
    start_daemon_with(in_shaper(topo), config, None, socket, stderr, label, within)
}

/// `ip netns exec SHAPER`: the start of a command that runs in `topo`'s shaper namespace.
fn in_shaper(topo: &Topology) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", topo.shaper.name()]);
    command
}

/// [`start_daemon`] with its control socket at `control` (the others run without one: tests
/// run daemons side by side).
#[allow(dead_code)] // used by the control socket's tests only
pub fn start_daemon_controlled(
    topo: &Topology,
    config: &Path,
    control: &Path,
    socket: &Path,
    stderr: &Path,
    label: &str,
    within: Duration,
) -> Daemon {
    start_daemon_with(
        in_shaper(topo),
        config,
        Some(control),
        socket,
        stderr,
        label,
        within,
    )
}

/// [`start_daemon`] in the network namespace `netns` (a name under `/run/netns`), entered with
/// `nsenter --net`, which, unlike `ip netns exec`, leaves `/sys` (and with it the cgroup
/// hierarchy) as the host has it.
#[allow(dead_code)] // used by the attach tests only
pub fn start_daemon_in(
    netns: &str,
    config: &Path,
    socket: &Path,
    stderr: &Path,
    label: &str,
    within: Duration,
) -> Daemon {
    start_daemon_with(in_netns(netns), config, None, socket, stderr, label, within)
}

/// [`start_daemon_in`] with its control socket at `control`.
#[allow(dead_code)] // used by the attach bridge tests only
pub fn start_daemon_in_controlled(
    netns: &str,
    config: &Path,
    control: &Path,
    socket: &Path,
    stderr: &Path,
    label: &str,
    within: Duration,
) -> Daemon {
    start_daemon_with(
        in_netns(netns),
        config,
        Some(control),
        socket,
        stderr,
        label,
        within,
    )
}

/// `nsenter --net=/run/netns/NETNS`, to exec its arguments in that network namespace.
fn in_netns(netns: &str) -> Command {
    let mut command = Command::new("nsenter");
    command.arg(format!("--net=/run/netns/{netns}"));
    command
}

/// `command` (which enters a namespace and execs its arguments) running `metronome run
/// --config CONFIG --control CONTROL` (`""`, none, without `control`); see [`start_daemon`].
fn start_daemon_with(
    mut command: Command,
    config: &Path,
    control: Option<&Path>,
    socket: &Path,
    stderr: &Path,
    label: &str,
    within: Duration,
) -> Daemon {
    let notify = UnixDatagram::bind(socket).unwrap();
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let child = command
        .arg(env!("CARGO_BIN_EXE_metronome"))
        .arg("run")
        .arg("--control")
        .arg(control.unwrap_or(Path::new("")))
        .arg("--config")
        .arg(config)
        .env("NOTIFY_SOCKET", socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("spawning ip netns exec metronome run");
    let mut daemon = Daemon {
        child,
        stderr: stderr.to_path_buf(),
    };
    let started = Instant::now();
    let mut buf = [0u8; 512];
    loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            panic!(
                "the {label} daemon exited ({status}) before READY=1:\n{}",
                daemon.log()
            );
        }
        assert!(
            started.elapsed() < within,
            "the {label} daemon sent no READY=1 within {within:?}:\n{}",
            daemon.log()
        );
        if let Ok(n) = notify.recv(&mut buf) {
            if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
                return daemon;
            }
        }
    }
}

/// Polls `done` every 20 ms for at most 5 s; panics naming `what` past that.
#[allow(dead_code)] // used by the attach tests only
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: not within 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The tcx programs at `ifname`'s egress in `topo`'s host namespace.
#[allow(dead_code)] // used by the attach tests only
pub fn egress_programs(
    topo: &metronome_testbed::netns::attach::AttachTopology,
    ifname: &str,
) -> Vec<String> {
    let ifname = ifname.to_string();
    topo.host
        .run(move || metronome_daemon::os::attach::tcx_programs(&ifname, true).unwrap())
        .unwrap()
}

/// A class's receiver goodput over its rate must lie in this range in the attach tests: TCP/IP
/// and Ethernet headers take 4.4 % of a full-size frame (66 of 1514 bytes), the senders' start
/// the rest.
#[allow(dead_code)] // used by the attach tests only
pub const GOODPUT_SHARE: std::ops::RangeInclusive<f64> = 0.88..=1.01;

/// Prints the goodput of class `name` and checks it against its `rate_bps` ([`GOODPUT_SHARE`]).
#[allow(dead_code)] // used by the attach tests only
pub fn check_share(name: &str, goodput_bps: f64, rate_bps: u64) {
    let share = goodput_bps / rate_bps as f64;
    println!(
        "{name}: {:.2} Mbit/s goodput, {share:.3} of its rate",
        goodput_bps / 1e6
    );
    assert!(
        GOODPUT_SHARE.contains(&share),
        "{name}: {goodput_bps:.0} bit/s for a rate of {rate_bps} ({share:.3})"
    );
}

/// Checks that `daemon` still runs, stops it with SIGTERM and checks it exits 0.
#[allow(dead_code)] // used by the attach tests only
pub fn stop_cleanly(daemon: &mut Daemon) {
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "{}",
        daemon.log()
    );
    let pid = daemon.child.id().to_string();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(kill.success(), "kill -TERM {pid}");
    let status = daemon.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
}

/// A scrape of the metrics endpoint (127.0.0.1:9187) of a daemon in `topo`'s host namespace.
#[allow(dead_code)] // used by the attach tests only
pub fn scrape_host(topo: &metronome_testbed::netns::attach::AttachTopology) -> String {
    topo.host
        .run(|| metronome_daemon::ops::metrics::scrape("127.0.0.1:9187".parse().unwrap()))
        .unwrap()
        .unwrap()
}

/// Writes `text` to `dir/daemon.toml` and starts `metronome run` on it in `topo`'s host
/// namespace, with its notify socket and log (`daemon.log`) in `dir` and `label` to name it.
#[allow(dead_code)] // used by the attach tests only
pub fn start_attached(
    topo: &metronome_testbed::netns::attach::AttachTopology,
    dir: &Path,
    text: &str,
    label: &str,
) -> Daemon {
    let config = dir.join("daemon.toml");
    std::fs::write(&config, text).unwrap();
    start_daemon_in(
        topo.host.name(),
        &config,
        &dir.join("notify"),
        &dir.join("daemon.log"),
        label,
        Duration::from_secs(10),
    )
}

/// The sum of the series of `metric` (a `metronome_...` name) in a scrape `body` whose line
/// contains `filter` (`""`: every series).
#[allow(dead_code)] // used by the attach tests only
pub fn metric_total(body: &str, metric: &str, filter: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(metric) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
