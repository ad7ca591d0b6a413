//! Source pacing in attach mode (`pace_sockets`, on by default for classes with a `rate` that
//! match no `from` or `to`): the host's own TCP sockets of a shaped class are slowed where they
//! send, so that the daemon holds a few frames per flow and drops none, instead of a queue
//! that TCP never sees (Carousel §5.2, zD §3).
//!
//! Why it is needed: in attach mode the capture program hands the host's packet to the
//! daemon's capture veth and the kernel frees it there, so TCP Small Queues sees every packet
//! sent at once and nothing slows the socket until the class's queue is full.
//!
//! How: the `pace` sock_ops program (`crates/daemon/bpf/pace.bpf.c`), attached to the root of
//! the cgroup v2 hierarchy, gives a registered flow's socket the ceiling of its class as its
//! `SO_MAX_PACING_RATE` at every RTT sample; the kernel's TCP paces it (internal pacing, no fq
//! needed). The engine lists the class's new TCP flows and computes the ceilings
//! (`metronome_engine::engine::pace`); each loop hands them over every
//! [`metronome_engine::engine::pace::PACE_PERIOD`] ([`SocketPacing::update`]): the flows, keyed
//! by the daemon's network namespace (sockets of other namespaces are not touched), and the
//! ceilings, in TCP payload bytes per second.
//!
//! Failing open: each update also writes a heartbeat; once it is [`STALE_AFTER`] old, the
//! program gives every socket it slowed its own value back at its next RTT sample and slows
//! nothing more. The program's link and its state are pinned under [`PIN_ROOT`] so that a
//! killed daemon leaves it running to do that. A stop writes a stale heartbeat, waits at most
//! [`RELEASE_WAIT`] for the sockets to be restored, then removes the pins (the program
//! detaches); a start, and every [`COLLECT_EVERY`] after it, removes the pins of programs whose
//! heartbeat is stale and that slow no socket any more (or whose heartbeat is older than
//! [`ABANDONED_AFTER`]).

use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData};
use aya::programs::links::FdLink;
use aya::programs::{CgroupAttachMode, SockOps};
use aya::Ebpf;
use metronome_engine::engine::pace::{Ceiling, PacedFlow};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The program, compiled by `crates/daemon/build.rs` (empty when clang was missing).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pace.bpf.o"));

/// Where the program's link and maps are pinned: one directory per daemon,
/// `<network namespace cookie>-<pid>`.
pub const PIN_ROOT: &str = "/sys/fs/bpf/metronome-pace";

/// How old the heartbeat may be before the program restores every socket: 500 ms (the loops
/// write it every 10 ms while they shape, every 100 ms while idle).
pub const STALE_AFTER: Duration = Duration::from_millis(500);

/// How long a stop waits for the sockets the program slowed to get their own value back.
pub const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// How often the first loop removes the pins of stale programs.
pub const COLLECT_EVERY: Duration = Duration::from_secs(5);

/// A stale program whose sockets never sent again is removed anyway after this long.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(60);

/// TCP payload per wire byte of a full frame (1448 of 1514 with timestamps): the kernel paces a
/// socket's payload, the class counts frames.
pub const PAYLOAD_PER_WIRE_BYTE: f64 = 1448.0 / 1514.0;

/// A ceiling is written again only once it moved by more than this share.
const REWRITE_SHARE: f64 = 0.01;

/// Largest ceiling a socket takes (`SO_MAX_PACING_RATE` through BPF is 32 bits wide;
/// `u32::MAX` means none).
const MAX_CEILING: u32 = u32::MAX - 1;

/// Indexes of the program's `COUNTERS`.
#[derive(Clone, Copy, Debug)]
pub enum Counter {
    /// Gauge: sockets that carry a ceiling now.
    Slowed = 0,
    /// Ceilings set or changed.
    Applied = 1,
    /// Sockets given their own value back.
    Restored = 2,
    /// `bpf_setsockopt` refused.
    Failed = 3,
    /// Sockets closed while slowed.
    Closed = 4,
}

/// Why source pacing is off (a warning at start; the daemon shapes on without it).
#[derive(Debug, thiserror::Error)]
pub enum PaceError {
    /// The build had no clang.
    #[error("this build has no BPF programs (clang and libbpf-dev were missing)")]
    NoProgram,
    /// Loading, attaching or pinning failed.
    #[error("{0}")]
    Load(String),
}

/// The key of `FLOWS`, the bytes of the program's `struct flow_key`: the namespace's cookie,
/// the address family, the source and destination addresses (16 bytes each, network byte
/// order, an IPv4 address in the first 4), the source and destination ports, in the host's
/// byte order.
pub type FlowKey = [u8; 48];

/// The address family and the bytes of an address as the program's key holds them.
fn address(addr: IpAddr) -> (u32, [u8; 16]) {
    let mut bytes = [0u8; 16];
    match addr {
        IpAddr::V4(a) => {
            bytes[..4].copy_from_slice(&a.octets());
            (AF_INET, bytes)
        }
        IpAddr::V6(a) => (AF_INET6, a.octets()),
    }
}

/// `AF_INET` and `AF_INET6`.
const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;

/// The key of `flow` as a socket of network namespace `netns` sees it.
pub fn flow_key(netns: u64, flow: &PacedFlow) -> FlowKey {
    let (family, src) = address(flow.tuple.src);
    let (_, dst) = address(flow.tuple.dst);
    let mut key = [0u8; 48];
    key[..8].copy_from_slice(&netns.to_ne_bytes());
    key[8..12].copy_from_slice(&family.to_ne_bytes());
    key[12..28].copy_from_slice(&src);
    key[28..44].copy_from_slice(&dst);
    key[44..46].copy_from_slice(&flow.tuple.src_port.to_ne_bytes());
    key[46..48].copy_from_slice(&flow.tuple.dst_port.to_ne_bytes());
    key
}

/// The slot of class state `class` of silo `silo` in `RATES`.
pub fn slot(silo: usize, class: u32) -> u32 {
    ((silo as u32) << 24) | (class & 0x00ff_ffff)
}

/// A ceiling in wire bytes per second as the socket takes it: TCP payload bytes per second.
pub fn socket_ceiling(wire_bytes_per_sec: f64) -> u32 {
    let v = (wire_bytes_per_sec * PAYLOAD_PER_WIRE_BYTE).max(1.0);
    if v >= f64::from(MAX_CEILING) {
        MAX_CEILING
    } else {
        v as u32
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the program's `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

struct Inner {
    /// Holds the program loaded.
    _bpf: Ebpf,
    flows: BpfHashMap<MapData, FlowKey, u32>,
    rates: BpfHashMap<MapData, u32, u32>,
    state: Array<MapData, u64>,
    counters: Array<MapData, u64>,
    /// The ceilings written, by slot.
    written: std::collections::HashMap<u32, u32>,
    /// Flow and ceiling writes the kernel refused.
    write_errors: u64,
    /// When the first loop last removed stale pins (monotonic ns).
    collected: u64,
}

/// The loaded and attached program (see the module docs). Shared by the loops.
pub struct SocketPacing {
    inner: Mutex<Inner>,
    /// The daemon's network namespace.
    netns: u64,
    /// This daemon's pin directory.
    dir: PathBuf,
}

impl std::fmt::Debug for SocketPacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketPacing")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Where the pins live: the bpffs the host mounts at boot.
const BPFFS: &str = "/sys/fs/bpf";

/// Makes sure a bpffs is mounted at [`BPFFS`]: mounts one where the host has none (some boot
/// without it), but only in the host's own mount namespace, where it outlives the daemon. In
/// another mount namespace a bpffs mounted by the daemon would go with that namespace, and the
/// program with it, before it gave the sockets it slowed their own value back.
fn ensure_bpffs() -> Result<(), PaceError> {
    use nix::sys::statfs::{statfs, BPF_FS_MAGIC};
    let is_bpffs = |p: &str| statfs(p).is_ok_and(|s| s.filesystem_type() == BPF_FS_MAGIC);
    if is_bpffs(BPFFS) {
        return Ok(());
    }
    // The host's namespace is init's; where init's cannot be read (a container), the one the
    // daemon was started from (`ip netns exec` and `unshare -m` make a new one).
    let own = std::fs::read_link("/proc/self/ns/mnt").ok();
    let host = std::fs::read_link("/proc/1/ns/mnt").or_else(|_| {
        std::fs::read_link(format!(
            "/proc/{}/ns/mnt",
            std::os::unix::process::parent_id()
        ))
    });
    if own.is_none() || own != host.ok() {
        return Err(PaceError::Load(format!(
            "no bpffs at {BPFFS}, and the daemon runs in a mount namespace of its own (one \
             mounted there would leave with it): mount one on the host \
             (mount -t bpf bpf {BPFFS}) or start the daemon with nsenter --net rather than \
             ip netns exec"
        )));
    }
    use nix::mount::{mount, MsFlags};
    mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0700"),
    )
    .map_err(|e| load_err("mounting a bpffs")(format!("{BPFFS}: {e}")))?;
    tracing::info!(
        path = BPFFS,
        "source pacing: mounted a bpffs (the host had none)"
    );
    Ok(())
}

fn load_err(what: &str) -> impl Fn(String) -> PaceError + '_ {
    move |e| PaceError::Load(format!("{what}: {e}"))
}

impl SocketPacing {
    /// Loads the program, attaches it to the root of the cgroup v2 hierarchy and pins it under
    /// [`PIN_ROOT`]; removes the pins of stale programs first. Needs CAP_BPF (or CAP_SYS_ADMIN)
    /// and a bpffs at `/sys/fs/bpf`: the daemon loads it before it drops its privileges.
    pub fn load() -> Result<SocketPacing, PaceError> {
        if OBJECT.is_empty() {
            return Err(PaceError::NoProgram);
        }
        let netns = metronome_io::netns::netns_cookie()
            .map_err(|e| load_err("reading the network namespace's cookie")(e.to_string()))?;
        ensure_bpffs()?;
        collect_stale(Path::new(PIN_ROOT), None);
        let dir = Path::new(PIN_ROOT).join(format!("{netns}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            load_err("creating the pin directory")(format!("{}: {e}", dir.display()))
        })?;
        let result = Self::load_in(&dir, netns);
        if result.is_err() {
            remove_pins(&dir);
        }
        result
    }

    fn load_in(dir: &Path, netns: u64) -> Result<SocketPacing, PaceError> {
        let mut bpf = Ebpf::load(OBJECT).map_err(|e| load_err("loading")(e.to_string()))?;
        for (name, file) in [("STATE", "state"), ("COUNTERS", "counters")] {
            bpf.map(name)
                .ok_or_else(|| PaceError::Load(format!("no map {name}")))?
                .pin(dir.join(file))
                .map_err(|e| load_err(name)(e.to_string()))?;
        }
        let take = |bpf: &mut Ebpf, name: &str| {
            bpf.take_map(name)
                .ok_or_else(|| PaceError::Load(format!("no map {name}")))
        };
        let mut state: Array<MapData, u64> = Array::try_from(take(&mut bpf, "STATE")?)
            .map_err(|e| load_err("STATE")(e.to_string()))?;
        let counters = Array::try_from(take(&mut bpf, "COUNTERS")?)
            .map_err(|e| load_err("COUNTERS")(e.to_string()))?;
        let flows = BpfHashMap::try_from(take(&mut bpf, "FLOWS")?)
            .map_err(|e| load_err("FLOWS")(e.to_string()))?;
        let rates = BpfHashMap::try_from(take(&mut bpf, "RATES")?)
            .map_err(|e| load_err("RATES")(e.to_string()))?;
        state
            .set(1, STALE_AFTER.as_nanos() as u64, 0)
            .map_err(|e| load_err("STATE")(e.to_string()))?;
        state
            .set(0, monotonic_ns(), 0)
            .map_err(|e| load_err("STATE")(e.to_string()))?;
        let root = crate::os::attach::cgroup2_root();
        let cgroup = std::fs::File::open(&root)
            .map_err(|e| load_err("opening the cgroup v2 root")(format!("{root}: {e}")))?;
        let program: &mut SockOps = bpf
            .program_mut("pace")
            .ok_or_else(|| PaceError::Load("no program pace".to_string()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| load_err("pace")(e.to_string()))?;
        program
            .load()
            .map_err(|e| load_err("pace")(e.to_string()))?;
        let id = program
            .attach(&cgroup, CgroupAttachMode::Single)
            .map_err(|e| load_err("attaching to the cgroup v2 root")(e.to_string()))?;
        let link: FdLink = program
            .take_link(id)
            .map_err(|e| load_err("pace")(e.to_string()))?
            .try_into()
            .map_err(|e: aya::programs::links::LinkError| load_err("pace")(e.to_string()))?;
        link.pin(dir.join("link"))
            .map_err(|e| load_err("pinning")(e.to_string()))?;
        Ok(SocketPacing {
            inner: Mutex::new(Inner {
                _bpf: bpf,
                flows,
                rates,
                state,
                counters,
                written: std::collections::HashMap::new(),
                write_errors: 0,
                collected: monotonic_ns(),
            }),
            netns,
            dir: dir.to_path_buf(),
        })
    }

    /// This daemon's pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Silo `silo`'s new flows and ceilings (ceilings that moved by less than 1 % are not
    /// written again), and the heartbeat. The first loop (`collects`) also removes the pins
    /// of stale programs every [`COLLECT_EVERY`].
    pub fn update(&self, silo: usize, flows: &[PacedFlow], ceilings: &[Ceiling], collects: bool) {
        let now = monotonic_ns();
        let mut inner = self.lock();
        let mut errors = 0;
        for flow in flows {
            let key = flow_key(self.netns, flow);
            if inner.flows.insert(key, slot(silo, flow.class), 0).is_err() {
                errors += 1;
            }
        }
        for c in ceilings {
            let at = slot(silo, c.class);
            let value = socket_ceiling(c.bytes_per_sec);
            let old = inner.written.get(&at).copied();
            let moved = old.is_none_or(|o| {
                (f64::from(value) - f64::from(o)).abs() > REWRITE_SHARE * f64::from(o)
            });
            if moved {
                if inner.rates.insert(at, value, 0).is_ok() {
                    inner.written.insert(at, value);
                } else {
                    errors += 1;
                }
            }
        }
        if inner.state.set(0, now, 0).is_err() {
            errors += 1;
        }
        inner.write_errors += errors;
        if collects && now.saturating_sub(inner.collected) > COLLECT_EVERY.as_nanos() as u64 {
            inner.collected = now;
            drop(inner);
            collect_stale(Path::new(PIN_ROOT), Some(&self.dir));
        }
    }

    /// The program's counter `which`.
    pub fn counter(&self, which: Counter) -> u64 {
        self.lock().counters.get(&(which as u32), 0).unwrap_or(0)
    }

    /// Flow and ceiling writes the kernel refused, since the load.
    pub fn write_errors(&self) -> u64 {
        self.lock().write_errors
    }

    /// At a stop: writes a stale heartbeat (the program restores every socket it slowed at
    /// its next RTT sample), waits at most [`RELEASE_WAIT`] for none to be slowed, then removes
    /// the pins, which detaches the program. Sockets still slowed then (idle ones) keep the
    /// program pinned until they send again; the next start removes it.
    pub fn release(&self) -> usize {
        {
            let mut inner = self.lock();
            let _ = inner.state.set(0, 0, 0);
        }
        let deadline = std::time::Instant::now() + RELEASE_WAIT;
        let mut slowed = self.counter(Counter::Slowed);
        while slowed != 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            slowed = self.counter(Counter::Slowed);
        }
        if slowed == 0 {
            remove_pins(&self.dir);
        }
        slowed as usize
    }
}

/// Removes a pin directory: the link (which detaches the program once no one holds it) and
/// the maps' pins.
fn remove_pins(dir: &Path) {
    for file in ["link", "state", "counters"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes the pins under `root` (but `own`'s) whose heartbeat is stale and that slow no
/// socket, or whose heartbeat is older than [`ABANDONED_AFTER`]. Returns how many it removed.
pub fn collect_stale(root: &Path, own: Option<&Path>) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let now = monotonic_ns();
    let mut removed = 0;
    for entry in entries.flatten() {
        let dir = entry.path();
        if Some(dir.as_path()) == own {
            continue;
        }
        let read = |file: &str, at: u32| -> Option<u64> {
            let data = MapData::from_pin(dir.join(file)).ok()?;
            let array: Array<MapData, u64> = Array::try_from(Map::Array(data)).ok()?;
            array.get(&at, 0).ok()
        };
        let beat = read("state", 0).unwrap_or(0);
        let slowed = read("counters", Counter::Slowed as u32).unwrap_or(0);
        let age = now.saturating_sub(beat);
        let stale = age > 4 * STALE_AFTER.as_nanos() as u64;
        if stale && (slowed == 0 || age > ABANDONED_AFTER.as_nanos() as u64) {
            remove_pins(&dir);
            removed += 1;
        }
    }
    removed
}

/// [`SocketPacing::load`] when `config` is attach mode; a failure
/// is a warning (the daemon shapes on, queueing what the sockets send).
pub fn load_logged(config: &crate::ops::config::Config) -> Option<std::sync::Arc<SocketPacing>> {
    // Loaded for every attach mode: a class of the control socket may pace later.
    if !config.is_attach() {
        return None;
    }
    match SocketPacing::load() {
        Ok(p) => {
            tracing::info!(pins = %p.dir().display(), "source pacing: the host's TCP sockets of paced classes are slowed at their source");
            Some(std::sync::Arc::new(p))
        }
        Err(e) => {
            tracing::warn!(error = %e, "source pacing off: the classes' sockets queue in the daemon");
            None
        }
    }
}
