//! `metronome run` as a process of its own for the comparisons that run the real binary
//! (`compare attach`, `classes`, `packet-rate`, `churn`, `cluster`, the attached `demo`): started
//! in a namespace with its configuration in a scratch directory, awaited on its metrics
//! endpoint, its CPU read from `/proc/PID/stat`, stopped with SIGTERM (then SIGKILL).

use crate::compare::CompareError;
use crate::netns::{Namespace, TopoError};
use crate::scrape::Scrape;
use metronome_daemon::ops::config::Config;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Sequence number of the daemons' scratch directories within this process.
static DAEMON_SEQ: AtomicU32 = AtomicU32::new(0);

/// How long `metronome run` may take to attach and answer on its metrics endpoint: 10 s (it
/// loads its BPF programs and opens its capture pairs first; well under a second on the
/// machines this ran on).
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopped daemon may take to detach and exit before it is killed: 5 s.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// `metronome run` in attach mode, a process in the host namespace (`nsenter
/// --net=/run/netns/HOST BINARY run --config FILE`: the network namespace only, as a daemon on
/// a host runs in the host's mount namespace, where source pacing finds the host's bpffs;
/// `ip netns exec` would mount a fresh `/sys` without one), with its configuration and its
/// standard error in a scratch directory that goes with it.
#[derive(Debug)]
pub struct AttachedDaemon {
    child: Child,
    host: Namespace,
    metrics: SocketAddr,
    dir: PathBuf,
}

impl AttachedDaemon {
    /// Writes `text` (already parsed by [`daemon_config`] into `config`) to a scratch file and
    /// starts `binary run --config FILE` in `host`, all its threads on CPU 0 with `pin`
    /// (started through `taskset -c 0`). Returns once its metrics endpoint
    /// answers; `Ok(Err(why))` when it exits before (why: the last lines of its standard error)
    /// or does not answer within [`READY_TIMEOUT`].
    pub fn start(
        host: &Namespace,
        binary: &Path,
        (text, config): (&str, &Config),
        pin: bool,
    ) -> Result<Result<AttachedDaemon, String>, CompareError> {
        Self::start_controlled(host, binary, (text, config), pin, None)
    }

    /// [`AttachedDaemon::start`] with its control socket at `control` (`run --control PATH`;
    /// `None`: none, as comparisons that run daemons side by side want).
    pub fn start_controlled(
        host: &Namespace,
        binary: &Path,
        (text, config): (&str, &Config),
        pin: bool,
        control: Option<&Path>,
    ) -> Result<Result<AttachedDaemon, String>, CompareError> {
        let seq = DAEMON_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mtr-attd-{}-{seq}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(TopoError::Io)?;
        let file = dir.join("daemon.toml");
        std::fs::write(&file, text).map_err(TopoError::Io)?;
        let stderr = std::fs::File::create(dir.join("stderr")).map_err(TopoError::Io)?;
        // `taskset -c 0` (util-linux) execs the rest with the affinity set, so every thread of
        // the daemon inherits it.
        let mut command = if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", "0", "nsenter"]);
            c
        } else {
            Command::new("nsenter")
        };
        command
            .arg(format!("--net=/run/netns/{}", host.name()))
            .arg(binary)
            .arg("run")
            .arg("--control")
            .arg(control.unwrap_or(Path::new("")))
            .arg("--config")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let spawned = spawn_with_stop_signals(command);
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(Err(format!("cannot run {}: {e}", binary.display())));
            }
        };
        let mut daemon = AttachedDaemon {
            child,
            host: host.clone(),
            metrics: config.daemon.metrics_listen,
            dir,
        };
        let give_up = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Ok(Err(format!(
                    "`metronome run` exited at start ({status}): {}",
                    daemon.stderr_tail()
                )));
            }
            if daemon.metrics_text().is_some() {
                return Ok(Ok(daemon));
            }
            if Instant::now() > give_up {
                let why = format!(
                    "`metronome run` did not answer on {} within {READY_TIMEOUT:?}: {}",
                    daemon.metrics,
                    daemon.stderr_tail()
                );
                let _ = daemon.stop();
                return Ok(Err(why));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon process's CPU time so far (user + system, all its threads), nanoseconds.
    pub fn cpu_ns(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&h| h > 0)? as u64;
        Some(ticks * 1_000_000_000 / hz)
    }

    /// The daemon's metrics text (`GET /metrics` on its endpoint, from inside the host
    /// namespace).
    pub fn metrics_text(&self) -> Option<String> {
        Scrape::fetch_text(&self.host, self.metrics)
    }

    /// The daemon's metrics, parsed ([`AttachedDaemon::metrics_text`]).
    pub fn metrics(&self) -> Option<Scrape> {
        Scrape::fetch(&self.host, self.metrics)
    }

    /// The last lines of the daemon's standard error (its log), one line.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(2)..].join(" / ");
        if tail.is_empty() {
            "no output".to_owned()
        } else {
            tail
        }
    }

    /// Stops the daemon (SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]) and removes its scratch
    /// directory. `Err(why)` when it did not exit cleanly.
    pub fn stop(mut self) -> Result<(), String> {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let give_up = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() > give_up => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break Err(format!(
                        "`metronome run` did not exit within {STOP_TIMEOUT:?} of SIGTERM: killed"
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => break Err(format!("waiting for `metronome run`: {e}")),
            }
        };
        let result = match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!(
                "`metronome run` exited with {s}: {}",
                self.stderr_tail()
            )),
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => tracing::debug!("metronome run: {}", self.stderr_tail()),
            Err(e) => tracing::warn!("{e}"),
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        result
    }
}

impl Drop for AttachedDaemon {
    fn drop(&mut self) {
        // `stop` took the child already when it ran; otherwise it must not outlive the run.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Spawns `command` from a thread of its own that does not block SIGINT and SIGTERM: a child
/// inherits the blocked signals of the thread that starts it, and the CLI blocks them in every
/// thread for its clean-up (`crate::netns::cleanup_on_signals`), which would leave the daemon
/// deaf to the SIGTERM that stops it. For the few microseconds that thread lives, a SIGINT or
/// SIGTERM sent to this process may end it without the clean-up; the next run removes what it
/// left (`crate::netns::remove_stale`).
fn spawn_with_stop_signals(mut command: Command) -> std::io::Result<Child> {
    std::thread::spawn(move || {
        use nix::sys::signal::{SigSet, Signal};
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        set.thread_unblock().map_err(std::io::Error::from)?;
        command.spawn()
    })
    .join()
    .map_err(|_| std::io::Error::other("the thread starting the daemon panicked"))?
}
