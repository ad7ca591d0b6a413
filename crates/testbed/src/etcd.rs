//! Throwaway etcd clusters on loopback for the tests of what shares state through etcd: limits
//! of aggregates spread over many hosts, whose rates come from an allocator above the per-host
//! enforcers (Carousel §2 and §5.3), here computed by every daemon from what etcd holds.
//!
//! [`EtcdCluster::start`] runs one or more `etcd` members (Debian's `etcd-server`, or the binary
//! named by [`ETCD_BINARY_ENV`]) as child processes: every member listens on `127.0.0.1` with a
//! client and a peer port that the kernel picked free (bound on port 0, then released just before
//! the members start), keeps its data in a per-cluster directory under the system's temporary
//! directory, and is waited for until its `/health` endpoint answers `"health":"true"` (which etcd
//! says only once the member sees a leader). Members can be killed one by one (SIGKILL, as a
//! crashed host) or stopped all at once; dropping the cluster (also while a test panics) kills
//! what still runs and removes the directory.
//!
//! The flags are those of etcd 3.4 (Debian 12's 3.4.23) and later: a static bootstrap
//! (`--initial-cluster`, `--initial-cluster-state new`) with a per-cluster token so that members
//! of two tests running at once never join each other, and `--logger zap` (3.4's default logger
//! is the deprecated capnslog, which warns on every start). Each member's log goes to
//! `<member>.log` beside its data; start-up failures quote its last lines.
//!
//! Nothing here needs a privilege. A member's process outlives a test process that is killed by
//! a signal it cannot handle (SIGKILL), and its files stay under the temporary directory, named
//! `mtr-etcd-<pid>-<n>`: the next [`EtcdCluster::start`] ([`remove_stale`]) kills the members
//! of directories whose process is gone and removes the directories.

use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that names the etcd binary to run; without it, `etcd` on `PATH`.
/// (Not `ETCD_...`: etcd reads every `ETCD_<FLAG>` variable as a flag.)
pub const ETCD_BINARY_ENV: &str = "METRONOME_ETCD";

/// How long [`EtcdCluster::start`] waits for every member to report healthy. A
/// three-member cluster elects a leader about one election timeout (etcd's default 1 000 ms)
/// after the members see each other; the rest is margin for a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one `/health` request may take before it counts as unanswered.
const HEALTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause between two rounds of `/health` requests while waiting.
const HEALTH_POLL: Duration = Duration::from_millis(50);

/// How many lines of a member's log an error quotes.
const LOG_TAIL_LINES: usize = 15;

/// Clusters started by this process so far: the `<n>` of their directories and tokens.
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// What can go wrong while starting or driving a cluster.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No etcd binary: neither [`ETCD_BINARY_ENV`] nor `etcd` on `PATH`.
    #[error("no etcd binary ({ETCD_BINARY_ENV} unset and no etcd on PATH; Debian: apt-get install etcd-server)")]
    MissingBinary,
    /// A file-system or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A member exited while the cluster was starting.
    #[error("etcd member {member} exited ({status}) while starting; its log ends:\n{log_tail}")]
    Exited {
        /// The member's name.
        member: String,
        /// Its exit status.
        status: ExitStatus,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A member did not report healthy in time.
    #[error(
        "etcd member {member} not healthy after {waited:?} ({last}); its log ends:\n{log_tail}"
    )]
    Unhealthy {
        /// The member's name.
        member: String,
        /// How long it was waited for.
        waited: Duration,
        /// The last answer (or failure) of its `/health` endpoint.
        last: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A member index beyond the cluster's size.
    #[error("no member {0} in this cluster")]
    NoSuchMember(usize),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EtcdError {
    let what = what.into();
    move |source| EtcdError::Io { what, source }
}

/// The etcd binary to run: [`ETCD_BINARY_ENV`] if set, else the first `etcd` on `PATH`.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(ETCD_BINARY_ENV) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// The version line of `binary --version` (`etcd Version: 3.4.23`), or the error.
pub fn etcd_version(binary: &Path) -> Result<String, EtcdError> {
    let out = Command::new(binary)
        .arg("--version")
        .env_clear()
        .output()
        .map_err(io(format!("running {} --version", binary.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

/// One member: its name, its URLs and, while it runs, its process.
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    log: PathBuf,
    child: Option<Child>,
    /// The client port on one more address ([`EtcdCluster::start_with`]).
    extra_client: Option<SocketAddr>,
}

impl Member {
    fn client_url(&self) -> String {
        format!("http://{}", self.client)
    }

    /// The client URLs the member listens on and advertises: loopback, then the extra address.
    fn client_urls(&self) -> String {
        match self.extra_client {
            Some(extra) => format!("{},http://{extra}", self.client_url()),
            None => self.client_url(),
        }
    }

    fn peer_url(&self) -> String {
        format!("http://{}", self.peer)
    }
}

/// A running etcd cluster of one or more members on loopback; see the module documentation.
pub struct EtcdCluster {
    dir: PathBuf,
    members: Vec<Member>,
    started_in: Duration,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("dir", &self.dir)
            .field("endpoints", &self.all_endpoints())
            .field("running", &self.running())
            .finish()
    }
}

impl EtcdCluster {
    /// Starts `size` members (at least one) of a new cluster and waits until each reports
    /// healthy ([`START_TIMEOUT`]). On any failure the members started so far are killed and
    /// the directory removed.
    pub fn start(size: usize) -> Result<Self, EtcdError> {
        Self::start_on(size, None)
    }

    /// [`EtcdCluster::start`] with every member also listening for clients on `extra_client_ip`
    /// (an address of this host, with the same port as its loopback one):
    /// [`EtcdCluster::extra_endpoints`] are the URLs there.
    pub fn start_with(size: usize, extra_client_ip: IpAddr) -> Result<Self, EtcdError> {
        Self::start_on(size, Some(extra_client_ip))
    }

    fn start_on(size: usize, extra_client_ip: Option<IpAddr>) -> Result<Self, EtcdError> {
        let binary = etcd_binary().ok_or(EtcdError::MissingBinary)?;
        remove_stale();
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{seq}", std::process::id()));
        // The cluster owns the directory from here on: its Drop removes it on every way out.
        let mut cluster = EtcdCluster {
            dir,
            members: Vec::new(),
            started_in: Duration::ZERO,
        };
        fs::create_dir_all(&cluster.dir)
            .map_err(io(format!("creating {}", cluster.dir.display())))?;

        // All ports are held until every one is chosen, so that no two coincide; released just
        // before the members bind them.
        let mut held = Vec::new();
        for i in 0..size.max(1) {
            let client = free_port(&mut held)?;
            let peer = free_port(&mut held)?;
            cluster.members.push(Member {
                name: format!("m{i}"),
                client,
                peer,
                log: cluster.dir.join(format!("m{i}.log")),
                child: None,
                extra_client: extra_client_ip.map(|ip| SocketAddr::new(ip, client.port())),
            });
        }
        drop(held);

        let initial_cluster = cluster
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("mtr-{}-{seq}", std::process::id());
        let start = Instant::now();
        for i in 0..cluster.members.len() {
            let member = &cluster.members[i];
            let args = member_args(
                member,
                &cluster.dir.join(&member.name),
                &initial_cluster,
                &token,
            );
            let log = File::create(&member.log)
                .map_err(io(format!("creating {}", member.log.display())))?;
            let log_err = log
                .try_clone()
                .map_err(io(format!("opening {}", member.log.display())))?;
            // Only PATH is passed on: etcd reads any ETCD_<FLAG> variable as a flag, which
            // would clash with the flags given here.
            let mut command = Command::new(&binary);
            command
                .args(&args)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err);
            if let Some(path) = std::env::var_os("PATH") {
                command.env("PATH", path);
            }
            // etcd 3.4 refuses to start on arm64 unless told it may (`ETCD_UNSUPPORTED_ARCH`).
            if let Some(arch) = std::env::var_os("ETCD_UNSUPPORTED_ARCH") {
                command.env("ETCD_UNSUPPORTED_ARCH", arch);
            }
            let child = command
                .spawn()
                .map_err(io(format!("starting {}", binary.display())))?;
            cluster.members[i].child = Some(child);
        }
        cluster.wait_healthy(START_TIMEOUT)?;
        cluster.started_in = start.elapsed();
        Ok(cluster)
    }

    /// How long the members took from their start to all reporting healthy.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The number of members, running or not.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The client URLs of every member (`http://127.0.0.1:<port>`), running or not: what a
    /// daemon would be configured with.
    pub fn all_endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::client_url).collect()
    }

    /// The client URLs of every member on the extra address of [`EtcdCluster::start_with`]
    /// (`http://IP:<port>`), running or not; empty for a cluster started without one.
    pub fn extra_endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .filter_map(|m| m.extra_client)
            .map(|a| format!("http://{a}"))
            .collect()
    }

    /// The client URLs of the members still running.
    pub fn running_endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.child.is_some())
            .map(Member::client_url)
            .collect()
    }

    /// How many members still run (were neither killed nor stopped here).
    pub fn running(&self) -> usize {
        self.members.iter().filter(|m| m.child.is_some()).count()
    }

    /// The cluster's directory: the members' data directories and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits until every running member answers `/health` with `"health":"true"`, at most
    /// `timeout`; a member that exits meanwhile is an error at once.
    pub fn wait_healthy(&mut self, timeout: Duration) -> Result<(), EtcdError> {
        let start = Instant::now();
        for member in self.members.iter_mut() {
            let Some(child) = member.child.as_mut() else {
                continue;
            };
            loop {
                if let Some(status) = child
                    .try_wait()
                    .map_err(io(format!("waiting for etcd member {}", member.name)))?
                {
                    member.child = None;
                    return Err(EtcdError::Exited {
                        member: member.name.clone(),
                        status,
                        log_tail: log_tail(&member.log),
                    });
                }
                let last = match health(member.client) {
                    Ok(body) if body.contains("\"health\":\"true\"") => break,
                    Ok(body) => body,
                    Err(e) => e.to_string(),
                };
                if start.elapsed() >= timeout {
                    return Err(EtcdError::Unhealthy {
                        member: member.name.clone(),
                        waited: start.elapsed(),
                        last,
                        log_tail: log_tail(&member.log),
                    });
                }
                std::thread::sleep(HEALTH_POLL);
            }
        }
        Ok(())
    }

    /// Kills member `index` with SIGKILL (a crashed host) and reaps it; a member that is no
    /// longer running is left as it is.
    pub fn kill(&mut self, index: usize) -> Result<(), EtcdError> {
        let member = self
            .members
            .get_mut(index)
            .ok_or(EtcdError::NoSuchMember(index))?;
        if let Some(mut child) = member.child.take() {
            child
                .kill()
                .map_err(io(format!("killing etcd member {}", member.name)))?;
            child
                .wait()
                .map_err(io(format!("reaping etcd member {}", member.name)))?;
        }
        Ok(())
    }

    /// Stops every running member (SIGKILL, all of etcd gone at once) and reaps them; the data
    /// stays until the cluster is dropped.
    pub fn stop_all(&mut self) -> Result<(), EtcdError> {
        for index in 0..self.members.len() {
            self.kill(index)?;
        }
        Ok(())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                // Best effort on the way out: a member that already exited fails the kill.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("removing {}: {e}", self.dir.display());
            }
        }
    }
}

/// [`EtcdCluster::start`], or `None` after saying why test `test` is skipped when there is no
/// etcd binary and [`crate::netns::SKIP_PRIVILEGED_ENV`] is `1` (without it,
/// [`crate::netns::skip_unprivileged`] panics). Any other failure to start panics.
pub fn start_or_skip(size: usize, test: &str) -> Option<EtcdCluster> {
    match EtcdCluster::start(size) {
        Ok(cluster) => Some(cluster),
        Err(e @ EtcdError::MissingBinary) => {
            crate::netns::skip_unprivileged(test, &e);
            None
        }
        Err(e) => panic!("starting a {size}-member etcd cluster failed: {e}"),
    }
}

/// The command line of `member` with data in `data_dir`, in a cluster bootstrapped as
/// `initial_cluster` (`name=peer-url,...`) with token `token`.
fn member_args(
    member: &Member,
    data_dir: &Path,
    initial_cluster: &str,
    token: &str,
) -> Vec<String> {
    vec![
        format!("--name={}", member.name),
        format!("--data-dir={}", data_dir.display()),
        format!("--listen-client-urls={}", member.client_urls()),
        format!("--advertise-client-urls={}", member.client_urls()),
        format!("--listen-peer-urls={}", member.peer_url()),
        format!("--initial-advertise-peer-urls={}", member.peer_url()),
        format!("--initial-cluster={initial_cluster}"),
        "--initial-cluster-state=new".into(),
        format!("--initial-cluster-token={token}"),
        "--logger=zap".into(),
        "--log-outputs=stderr".into(),
    ]
}

/// The prefix of every cluster's directory under the system's temporary directory; the process
/// id and a sequence number follow (`mtr-etcd-<pid>-<n>`).
const DIR_PREFIX: &str = "mtr-etcd-";

/// Kills the members of clusters whose test process is gone (killed by SIGKILL, so no Drop ran)
/// and removes their directories: a directory `mtr-etcd-<pid>-<n>` whose `<pid>` is not a
/// running process, and every process whose command line holds `--data-dir=<that directory>/`.
/// Best effort: what cannot be read or killed is left, as it is for a directory whose process
/// id is in use again.
pub fn remove_stale() {
    let tmp = std::env::temp_dir();
    let Ok(entries) = fs::read_dir(&tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let dir = entry.path();
        kill_members_of(&dir);
        if let Err(e) = fs::remove_dir_all(&dir) {
            eprintln!("removing stale {}: {e}", dir.display());
        }
    }
}

/// SIGKILLs every process whose command line holds `--data-dir=<dir>/...`.
fn kill_members_of(dir: &Path) {
    let needle = format!("--data-dir={}/", dir.display());
    let Ok(procs) = fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let member = cmdline
            .split(|&b| b == 0)
            .any(|arg| arg.starts_with(needle.as_bytes()));
        if member {
            // Best effort: it may have exited since /proc was read.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A loopback address with a port the kernel reports free; its listener goes into `held` so
/// that the next call gets another port.
fn free_port(held: &mut Vec<TcpListener>) -> Result<SocketAddr, EtcdError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding 127.0.0.1:0"))?;
    let addr = listener.local_addr().map_err(io("reading a bound port"))?;
    held.push(listener);
    Ok(addr)
}

/// One `GET /health` to the client port at `addr` (HTTP/1.0, so that the body ends with the
/// connection); returns the body.
fn health(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, HEALTH_REQUEST_TIMEOUT)?;
    stream.set_read_timeout(Some(HEALTH_REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(HEALTH_REQUEST_TIMEOUT))?;
    stream.write_all(format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(match response.split_once("\r\n\r\n") {
        Some((_, body)) => body.trim().to_owned(),
        None => response.trim().to_owned(),
    })
}

/// The last [`LOG_TAIL_LINES`] lines of the log at `path` (or why it cannot be read).
fn log_tail(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(e) => format!("(reading {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_flags_name_its_own_urls_and_the_whole_cluster() {
        let member = Member {
            name: "m1".into(),
            client: "127.0.0.1:40001".parse().unwrap(),
            peer: "127.0.0.1:40002".parse().unwrap(),
            log: PathBuf::from("/nonexistent/m1.log"),
            child: None,
            extra_client: None,
        };
        let args = member_args(
            &member,
            Path::new("/tmp/d/m1"),
            "m0=http://127.0.0.1:40000,m1=http://127.0.0.1:40002",
            "tok",
        );
        assert!(args.contains(&"--listen-client-urls=http://127.0.0.1:40001".to_string()));
        assert!(args.contains(&"--initial-advertise-peer-urls=http://127.0.0.1:40002".to_string()));
        assert!(args.contains(&"--data-dir=/tmp/d/m1".to_string()));
        assert!(args.contains(
            &"--initial-cluster=m0=http://127.0.0.1:40000,m1=http://127.0.0.1:40002".to_string()
        ));
        assert!(args.contains(&"--initial-cluster-token=tok".to_string()));
    }

    #[test]
    fn an_extra_client_address_is_listened_on_and_advertised_beside_loopback() {
        let member = Member {
            name: "m0".into(),
            client: "127.0.0.1:40001".parse().unwrap(),
            peer: "127.0.0.1:40002".parse().unwrap(),
            log: PathBuf::from("/nonexistent/m0.log"),
            child: None,
            extra_client: Some("10.81.3.1:40001".parse().unwrap()),
        };
        let args = member_args(&member, Path::new("/tmp/d/m0"), "m0=x", "tok");
        let both = "http://127.0.0.1:40001,http://10.81.3.1:40001";
        assert!(
            args.contains(&format!("--listen-client-urls={both}")),
            "{args:?}"
        );
        assert!(
            args.contains(&format!("--advertise-client-urls={both}")),
            "{args:?}"
        );
        assert!(args.contains(&"--listen-peer-urls=http://127.0.0.1:40002".to_string()));
    }

    #[test]
    fn free_ports_differ_while_held() {
        let mut held = Vec::new();
        let a = free_port(&mut held).unwrap();
        let b = free_port(&mut held).unwrap();
        assert_ne!(a.port(), b.port());
        assert!(a.ip().is_loopback());
    }

    #[test]
    fn remove_stale_kills_members_of_dead_processes_and_removes_their_directories() {
        use std::os::unix::process::ExitStatusExt;
        // A process id no process has: the kernel hands out ids below pid_max (a child that
        // exited is not enough: on a busy machine with a small pid_max its id comes back).
        let pid_max = fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
        let dead_pid: u32 = pid_max.trim().parse().unwrap();
        assert!(!Path::new("/proc").join(dead_pid.to_string()).exists());
        let dir =
            std::env::temp_dir().join(format!("{DIR_PREFIX}{dead_pid}-{}", std::process::id()));
        // A stand-in for a member left behind: its command line names the directory's data.
        // It runs before the directory exists: a `remove_stale` of another test running at the
        // same time that finds the directory kills it too, never the directory without it.
        let mut member = Command::new("sh")
            // The shell's own `read` waits on the pipe: one process, no child left behind.
            .args(["-c", "read line", "sh"])
            .arg(format!("--data-dir={}/m0", dir.display()))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        // `spawn` can return before the kernel shows the new command line in /proc (a vfork'd
        // child wakes its parent before its exec has finished): wait until it does, as a
        // member left behind by a dead test process long has.
        let cmdline = format!("/proc/{}/cmdline", member.id());
        let needle = format!("--data-dir={}/", dir.display());
        let shown = std::time::Instant::now() + Duration::from_secs(10);
        while !fs::read(&cmdline).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle)) {
            assert!(
                std::time::Instant::now() < shown,
                "{cmdline} never showed {needle}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        fs::create_dir_all(dir.join("m0")).unwrap();
        remove_stale();
        // Bounded: a stand-in that was not killed fails the test instead of hanging it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = member.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = member.kill();
                let _ = member.wait();
                let _ = fs::remove_dir_all(&dir);
                panic!("remove_stale left the member of {} running", dir.display());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let exists = dir.exists();
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(status.signal(), Some(nix::libc::SIGKILL), "{status:?}");
        assert!(!exists, "{} left", dir.display());
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("mtr-etcd-tail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let text: String = (0..40).map(|i| format!("line {i}\n")).collect();
        fs::write(&path, text).unwrap();
        let tail = log_tail(&path);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(tail.lines().count(), LOG_TAIL_LINES);
        assert_eq!(tail.lines().last(), Some("line 39"));
        assert!(log_tail(&dir.join("missing")).starts_with("(reading"));
    }
}
