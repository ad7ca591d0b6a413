//! A throwaway "bump in the wire" topology of network namespaces for `metronome demo`,
//! `metronome compare` and the integration tests.
//!
//! ```text
//!  sender ns            shaper ns                   receiver ns
//!  snd0 10.77.x.1/24 <-> in0   [daemon | bridge]   out0 <-> rcv0 10.77.x.2/24
//! ```
//!
//! The shaper namespace has no addresses: it forwards Ethernet frames between `in0` and `out0`,
//! either through the Metronome daemon (AF_PACKET on both veths) or, for the kernel baselines of
//! `compare` and for tests, through a Linux bridge ([`Topology::bridge_shaper`]) with a `tc`
//! qdisc on `out0` ([`Topology::install_qdisc`]).
//!
//! Everything is created with `ip`/`tc` from iproute2 (shelling out to `ip` in test fixtures keeps
//! netlink code out of the project). Namespace names carry the process id and a per-process
//! sequence number, so concurrent runs never collide; the interface names are fixed (`snd0`, `in0`,
//! `out0`, `rcv0`) because each lives alone in its own private namespace, which keeps them
//! short (<= 15 bytes, `IFNAMSIZ` - 1) and lets configs name them. Cleanup: [`Topology`]'s
//! `Drop` deletes the namespaces (which deletes the veths), also while unwinding from a panic;
//! [`cleanup_on_signals`] does the same on SIGINT/SIGTERM; [`remove_stale`] removes namespaces
//! left by a process that was killed with SIGKILL.
//!
//! Per-namespace counters (verified on Linux 6.x): `/sys/class/net` shows the network namespace
//! of whoever *mounted* sysfs, not of the reading thread, so a thread that `setns`-ed into a
//! namespace still sees the host's interfaces there. `/proc/self/net/dev` follows the thread
//! group leader's namespace. `/proc/thread-self/net/dev` follows the calling thread's namespace,
//! and a file descriptor opened there keeps reporting *that* namespace when re-read (after a
//! rewind) from any other thread. [`InterfaceCounters`] therefore opens it once inside the
//! namespace and re-reads it from the caller's thread: no process spawn and no thread per sample.
//!
//! Offloads: the topology keeps the host's default offloads (on veth: TSO, GSO and checksum
//! offload on, so TCP hands its interface super-frames of up to 64 KiB), the way users run.
//! Runs that need one frame per MTU opt in: [`Topology::offloads_off`] switches checksum
//! offload, TSO, GSO and GRO off on all four veths (the set-up of the MTU-frame throughput
//! figures), [`Topology::one_mtu_segments`] makes the end hosts' TCP send one MTU per segment.

pub mod attach;
pub mod cluster;
pub mod cni;
mod process;

pub use process::{cleanup_on_signals, remove_stale};

use std::fs::File;
use std::io::{Read, Seek};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Directory where `ip netns add` bind-mounts named network namespaces (iproute2 default).
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Per-process sequence number that makes namespace names unique within one process.
static SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// `ip` arguments that add bridge `name` without STP and without forwarding delay, so that its
/// ports forward at once.
pub(crate) fn bridge_add_args(name: &str) -> [&str; 9] {
    [
        "link",
        "add",
        name,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
    ]
}

/// An error building, using or removing a topology. Messages are one line and name the
/// missing privilege, tool or interface.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The process lacks CAP_NET_ADMIN (read from its effective capability set).
    #[error("creating network namespaces needs CAP_NET_ADMIN (run as root or grant the capability): {0}")]
    MissingPrivilege(String),
    /// A required program (`ip`, `tc`) could not be run.
    #[error("cannot run `{program}` (is iproute2 installed?): {source}")]
    MissingTool {
        /// The program name.
        program: &'static str,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// A command ran but exited with a failure.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its standard error, trimmed to one line.
        stderr: String,
    },
    /// Entering a namespace failed.
    #[error("cannot enter network namespace {ns}: {source}")]
    Setns {
        /// The namespace name.
        ns: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An interface is missing from a namespace's counters.
    #[error("interface {iface} not found in namespace {ns}")]
    NoSuchInterface {
        /// The namespace name.
        ns: String,
        /// The interface name.
        iface: String,
    },
    /// Reading counters or spawning a thread failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The closure run in a namespace panicked.
    #[error("the thread running in namespace {0} panicked")]
    ThreadPanicked(String),
}

/// A named network namespace. A cheap handle (the name); the [`Topology`] owns the namespace's
/// life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// The handle of an existing namespace named `name` (under [`NETNS_RUN_DIR`]).
    pub fn new(name: impl Into<String>) -> Self {
        Namespace { name: name.into() }
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on a new thread inside this namespace and waits for its result. Sockets created
    /// by `f` live in this namespace and may be returned and used from any thread.
    pub fn run<F, T>(&self, f: F) -> Result<T, TopoError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let handle = self.spawn(f)?;
        handle
            .join()
            .map_err(|_| TopoError::ThreadPanicked(self.name.clone()))?
    }

    /// Spawns `f` on a new thread inside this namespace; join the handle for its result.
    pub fn spawn<F, T>(
        &self,
        f: F,
    ) -> Result<std::thread::JoinHandle<Result<T, TopoError>>, TopoError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = Path::new(NETNS_RUN_DIR).join(&self.name);
        let fd = File::open(&path).map_err(|source| TopoError::Setns {
            ns: self.name.clone(),
            source,
        })?;
        let name = self.name.clone();
        let handle = std::thread::Builder::new()
            .name(format!("ns-{}", self.name))
            .spawn(move || {
                nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                    TopoError::Setns {
                        ns: name,
                        source: std::io::Error::from(e),
                    }
                })?;
                Ok(f())
            })?;
        Ok(handle)
    }

    /// Runs `ip -n <ns> <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<String, TopoError> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        process::run("ip", &full)
    }

    /// The MAC address of `iface` as `ip -o link show` writes it (`aa:bb:...`), `None` when the
    /// link has no `link/ether` address.
    pub fn link_mac(&self, iface: &str) -> Result<Option<String>, TopoError> {
        let shown = self.ip(&["-o", "link", "show", "dev", iface])?;
        let mut words = shown.split_whitespace().skip_while(|w| *w != "link/ether");
        Ok(words.nth(1).map(str::to_owned))
    }

    /// Adds bridge `name` without STP and without forwarding delay, so its ports forward at once.
    pub fn add_bridge(&self, name: &str) -> Result<(), TopoError> {
        self.ip(&bridge_add_args(name)).map(drop)
    }

    /// Opens the rx/tx counters of `iface` in this namespace (see the module docs for why
    /// `/proc/thread-self/net/dev` and not sysfs).
    pub fn interface_counters(&self, iface: &str) -> Result<InterfaceCounters, TopoError> {
        let file = self.run(|| File::open("/proc/thread-self/net/dev"))??;
        let mut counters = InterfaceCounters {
            file,
            ns: self.name.clone(),
            iface: iface.to_owned(),
            buf: String::with_capacity(4096),
        };
        counters.read()?;
        Ok(counters)
    }
}

/// One sample of an interface's counters (as in `/proc/net/dev`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceStats {
    /// Bytes received (Ethernet frames without FCS).
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets dropped on receive.
    pub rx_dropped: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
}

/// A reader of one interface's counters in one namespace, re-readable from any thread.
#[derive(Debug)]
pub struct InterfaceCounters {
    file: File,
    ns: String,
    iface: String,
    buf: String,
}

impl InterfaceCounters {
    /// Reads the current counters (one `lseek` and one `read` of a few hundred bytes).
    pub fn read(&mut self) -> Result<InterfaceStats, TopoError> {
        self.file.rewind()?;
        self.buf.clear();
        self.file.read_to_string(&mut self.buf)?;
        parse_net_dev(&self.buf, &self.iface).ok_or_else(|| TopoError::NoSuchInterface {
            ns: self.ns.clone(),
            iface: self.iface.clone(),
        })
    }
}

/// Finds `iface` in the text of `/proc/net/dev` (two header lines, then
/// `name: rx_bytes rx_packets errs drop fifo frame compressed multicast tx_bytes tx_packets errs
/// drop ...`).
pub fn parse_net_dev(text: &str, iface: &str) -> Option<InterfaceStats> {
    text.lines().skip(2).find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != iface {
            return None;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        (f.len() >= 12).then(|| InterfaceStats {
            rx_bytes: f[0],
            rx_packets: f[1],
            rx_dropped: f[3],
            tx_bytes: f[8],
            tx_packets: f[9],
            tx_dropped: f[11],
        })
    })
}

/// A kernel qdisc installed as the root of an interface by [`Topology::install_qdisc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QdiscSpec {
    /// One HTB class (`1:10`, the default class) with `rate` = `ceil` = `rate_bps`; `burst_bytes`
    /// `None` lets `tc` pick its default (rate / HZ, at least one MTU).
    Htb {
        /// Rate in bits per second.
        rate_bps: u64,
        /// Bucket size in bytes, or the `tc` default.
        burst_bytes: Option<u32>,
    },
    /// A TBF with a bucket of `burst_bytes` and a queue holding at most `latency_us` of traffic.
    Tbf {
        /// Rate in bits per second.
        rate_bps: u64,
        /// Bucket size in bytes; [`QdiscSpec::tbf`] picks 1 ms of rate, at least 2 MTU-sized
        /// frames.
        burst_bytes: u32,
        /// Maximum queueing delay in microseconds (`tc ... latency`).
        latency_us: u32,
    },
    /// A plain FIFO of `limit` packets (no shaping; the pass-through baseline).
    Pfifo {
        /// Queue length in packets.
        limit: u32,
    },
}

impl QdiscSpec {
    /// A TBF at `rate_bps` with the default bucket (1 ms of rate, at least 2 × 1514 bytes so a
    /// full frame always fits; tbf rejects a bucket smaller than one frame) and 20 ms of queue
    /// (an arbitrary bound that keeps the probe RTT comparable to HTB's 1000-packet leaf).
    pub fn tbf(rate_bps: u64) -> Self {
        QdiscSpec::Tbf {
            rate_bps,
            burst_bytes: Self::tbf_burst_bytes(rate_bps),
            latency_us: 20_000,
        }
    }

    /// The bucket of [`QdiscSpec::tbf`] at `rate_bps`, bytes: 1 ms of rate, at least 2 × 1514.
    pub fn tbf_burst_bytes(rate_bps: u64) -> u32 {
        let one_ms = rate_bps / 8 / 1000;
        let burst = one_ms.clamp(2 * 1514, u64::from(u32::MAX));
        u32::try_from(burst).unwrap_or(u32::MAX)
    }
}

/// The three namespaces and two veth pairs of a bump in the wire. Dropping it deletes them.
#[derive(Debug)]
pub struct Topology {
    /// The namespace of the traffic sources (holds [`Topology::sender_if`]).
    pub sender: Namespace,
    /// The namespace of the shaper (holds [`Topology::shaper_in`] and [`Topology::shaper_out`]).
    pub shaper: Namespace,
    /// The namespace of the sinks (holds [`Topology::receiver_if`]).
    pub receiver: Namespace,
    /// The sender's veth, `snd0`.
    pub sender_if: String,
    /// The shaper's veth towards the sender, `in0`.
    pub shaper_in: String,
    /// The shaper's veth towards the receiver, `out0`.
    pub shaper_out: String,
    /// The receiver's veth, `rcv0`.
    pub receiver_if: String,
    /// The sender's address (prefix length [`Topology::PREFIX_LEN`]).
    pub sender_addr: Ipv4Addr,
    /// The receiver's address, in the same subnet.
    pub receiver_addr: Ipv4Addr,
    warnings: Vec<String>,
    bridged: bool,
}

impl Topology {
    /// Prefix length of the one subnet shared by sender and receiver.
    pub const PREFIX_LEN: u8 = 24;

    /// Creates namespaces `<prefix>-<pid>-<seq>-{snd,shp,rcv}`, the veth pairs `snd0`<->`in0`
    /// and `out0`<->`rcv0`, addresses `10.77.<seq>.1/24` and `.2/24`, and brings every link (and
    /// `lo`) up. Offloads stay as the kernel sets them (see the module docs). On any failure,
    /// what was created is removed before the error is returned.
    pub fn bump_in_the_wire(prefix: &str) -> Result<Topology, TopoError> {
        process::check_net_admin()?;
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let base = format!("{prefix}-{}-{seq}", std::process::id());
        let octet = u8::try_from(seq % 250).unwrap_or(0);
        let mut topo = Topology {
            sender: Namespace::new(format!("{base}-snd")),
            shaper: Namespace::new(format!("{base}-shp")),
            receiver: Namespace::new(format!("{base}-rcv")),
            sender_if: "snd0".into(),
            shaper_in: "in0".into(),
            shaper_out: "out0".into(),
            receiver_if: "rcv0".into(),
            sender_addr: Ipv4Addr::new(10, 77, octet, 1),
            receiver_addr: Ipv4Addr::new(10, 77, octet, 2),
            warnings: Vec::new(),
            bridged: false,
        };
        // From here on `topo`'s Drop removes whatever exists, also on the error paths below.
        topo.create()?;
        Ok(topo)
    }

    fn create(&mut self) -> Result<(), TopoError> {
        for ns in self.namespaces() {
            process::register(ns.name());
            add_namespace(ns.name())?;
            ns.ip(&["link", "set", "lo", "up"])?;
        }
        add_veth(&self.sender, &self.sender_if, &self.shaper, &self.shaper_in)?;
        add_veth(
            &self.shaper,
            &self.shaper_out,
            &self.receiver,
            &self.receiver_if,
        )?;
        let cidr = |a: Ipv4Addr| format!("{a}/{}", Self::PREFIX_LEN);
        for (ns, addr, iface) in [
            (&self.sender, self.sender_addr, &self.sender_if),
            (&self.receiver, self.receiver_addr, &self.receiver_if),
        ] {
            ns.ip(&["addr", "add", &cidr(addr), "dev", iface])?;
        }
        for (ns, iface) in self.interfaces() {
            ns.ip(&["link", "set", iface, "up"])?;
        }
        Ok(())
    }

    /// The three namespaces: sender, shaper, receiver.
    pub fn namespaces(&self) -> [&Namespace; 3] {
        [&self.sender, &self.shaper, &self.receiver]
    }

    /// The four veths with their namespaces: snd0, in0, out0, rcv0.
    pub fn interfaces(&self) -> [(&Namespace, &str); 4] {
        [
            (&self.sender, &self.sender_if),
            (&self.shaper, &self.shaper_in),
            (&self.shaper, &self.shaper_out),
            (&self.receiver, &self.receiver_if),
        ]
    }

    /// Degradations noticed (for example: an offload [`Topology::offloads_off`] could not change).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Makes the end hosts' TCP hand their veths one MTU per segment (`gso_max_size 1514
    /// gso_max_segs 1` on the sender's and receiver's interfaces, with iproute2), so a shaper
    /// with MTU-sized frame slots never sees 64 KiB GSO super-frames: an explicit opt-in for
    /// MTU-frame runs.
    pub fn one_mtu_segments(&self) -> Result<(), TopoError> {
        for (ns, iface) in [
            (&self.sender, &self.sender_if),
            (&self.receiver, &self.receiver_if),
        ] {
            ns.ip(&[
                "link",
                "set",
                "dev",
                iface,
                "gso_max_size",
                "1514",
                "gso_max_segs",
                "1",
            ])?;
        }
        Ok(())
    }

    /// The far end of the shaper's interface `shaper_if` (`in0` or `out0`): its namespace,
    /// name and address.
    fn peer_of(&self, shaper_if: &str) -> (&Namespace, &str, Ipv4Addr) {
        if shaper_if == self.shaper_in {
            (&self.sender, &self.sender_if, self.sender_addr)
        } else {
            (&self.receiver, &self.receiver_if, self.receiver_addr)
        }
    }

    /// Deletes the veth pair of the shaper's interface `shaper_if` (its far end goes with it);
    /// returns the far end's MAC address, for [`Topology::recreate_veth`].
    pub fn delete_veth(&self, shaper_if: &str) -> Result<String, TopoError> {
        let (ns, iface, _) = self.peer_of(shaper_if);
        let mac = ns.link_mac(iface)?.unwrap_or_default();
        self.shaper.ip(&["link", "del", shaper_if])?;
        Ok(mac)
    }

    /// Creates the veth pair of the shaper's interface `shaper_if` again (new interface
    /// indices) with the far end's address and the MAC address `mac` it had (so the other host's
    /// neighbour entry stays right), and sets both ends up.
    pub fn recreate_veth(&self, shaper_if: &str, mac: &str) -> Result<(), TopoError> {
        let (ns, iface, addr) = self.peer_of(shaper_if);
        add_veth(&self.shaper, shaper_if, ns, iface)?;
        if !mac.is_empty() {
            ns.ip(&["link", "set", "dev", iface, "address", mac])?;
        }
        let cidr = format!("{addr}/{}", Self::PREFIX_LEN);
        ns.ip(&["addr", "add", &cidr, "dev", iface])?;
        ns.ip(&["link", "set", iface, "up"])?;
        self.shaper.ip(&["link", "set", shaper_if, "up"]).map(drop)
    }

    /// Turns transmit checksum offload, TSO, GSO and GRO off on all four veths with the ethtool
    /// ioctl ([`metronome_io::Offload`]; no `ethtool` program needed): one-MTU frames and full
    /// checksums everywhere, the set-up of the throughput targets. An offload the driver
    /// cannot change is a warning (kept in [`Topology::warnings`]), not an error.
    pub fn offloads_off(&mut self) -> Result<(), TopoError> {
        let interfaces: Vec<(Namespace, String)> = self
            .interfaces()
            .iter()
            .map(|(ns, iface)| ((*ns).clone(), iface.to_string()))
            .collect();
        for (ns, iface) in interfaces {
            let name = iface.clone();
            let failures = ns.run(move || {
                metronome_io::Offload::ALL
                    .iter()
                    .filter_map(|o| {
                        o.set(&name, false)
                            .err()
                            .map(|e| format!("{}: {e}", o.name()))
                    })
                    .collect::<Vec<_>>()
            })?;
            for f in failures {
                let warning = format!("{}/{iface}: cannot turn offload {f}", ns.name());
                tracing::warn!("{warning}");
                self.warnings.push(warning);
            }
        }
        Ok(())
    }

    /// Turns ECN on for TCP in the sender namespace (`net.ipv4.tcp_ecn=1`), so CE marks from the
    /// shaper reach congestion control. A failure is logged, not fatal: the shaper then counts
    /// its not-ECT fallbacks instead.
    pub fn enable_sender_ecn(&self) {
        let args = [
            "netns",
            "exec",
            self.sender.name(),
            "sysctl",
            "-qw",
            "net.ipv4.tcp_ecn=1",
        ];
        if let Err(e) = run_command("ip", &args) {
            tracing::warn!("could not enable ECN in the sender namespace: {e}");
        }
    }

    /// Steers the receive processing of the end hosts' veths (`rcv0`, `snd0`) to the CPUs of
    /// `mask` (`rps_cpus` of their one receive queue, a hexadecimal CPU mask as sysfs takes it):
    /// a frame sent into them is then received on one of those CPUs, not in the sender's
    /// context. A failure is a warning (kept in [`Topology::warnings`]).
    pub fn steer_endpoint_receive(&mut self, mask: &str) {
        let ends = [
            (self.receiver.name().to_owned(), self.receiver_if.clone()),
            (self.sender.name().to_owned(), self.sender_if.clone()),
        ];
        for (ns, iface) in ends {
            let cmd = format!("echo {mask} > /sys/class/net/{iface}/queues/rx-0/rps_cpus");
            if let Err(e) = run_command("ip", &["netns", "exec", &ns, "sh", "-c", &cmd]) {
                let warning = format!("{ns}/{iface}: cannot set rps_cpus {mask}: {e}");
                tracing::warn!("{warning}");
                self.warnings.push(warning);
            }
        }
    }

    /// Joins `in0` and `out0` in a Linux bridge `br0` inside the shaper namespace, so frames
    /// flow without the daemon (kernel baselines of `compare`, tests). STP off, no forward delay.
    pub fn bridge_shaper(&mut self) -> Result<(), TopoError> {
        if self.bridged {
            return Ok(());
        }
        let ns = &self.shaper;
        ns.add_bridge("br0")?;
        self.bridged = true;
        ns.ip(&["link", "set", &self.shaper_in, "master", "br0"])?;
        ns.ip(&["link", "set", &self.shaper_out, "master", "br0"])?;
        ns.ip(&["link", "set", "br0", "up"]).map(drop)
    }

    /// Removes the bridge of [`Topology::bridge_shaper`]; `in0` and `out0` stay up.
    pub fn unbridge_shaper(&mut self) -> Result<(), TopoError> {
        if !self.bridged {
            return Ok(());
        }
        self.shaper.ip(&["link", "del", "br0"])?;
        self.bridged = false;
        Ok(())
    }

    /// Replaces the root qdisc of `iface` in the shaper namespace with `spec`.
    pub fn install_qdisc(&self, iface: &str, spec: &QdiscSpec) -> Result<(), TopoError> {
        install_root_qdisc(&self.shaper, iface, spec)
    }

    /// Removes the root qdisc of `iface` in the shaper namespace (back to the default).
    pub fn remove_qdisc(&self, iface: &str) -> Result<(), TopoError> {
        let args = [
            "-n",
            self.shaper.name(),
            "qdisc",
            "del",
            "dev",
            iface,
            "root",
        ];
        match process::run("tc", &args) {
            // "No such file or directory" / "Cannot delete qdisc with handle of zero": none to
            // remove.
            Err(TopoError::Command { .. }) => Ok(()),
            other => other.map(drop),
        }
    }

    /// `tc -s qdisc show dev <iface>` in the shaper namespace (for logs and reports).
    pub fn qdisc_stats(&self, iface: &str) -> Result<String, TopoError> {
        process::run(
            "tc",
            &[
                "-n",
                self.shaper.name(),
                "-s",
                "qdisc",
                "show",
                "dev",
                iface,
            ],
        )
    }

    /// Deletes the namespaces now (what `Drop` does), reporting the first failure.
    pub fn remove(mut self) -> Result<(), TopoError> {
        self.delete_all()
    }

    fn delete_all(&mut self) -> Result<(), TopoError> {
        let mut first = Ok(());
        for ns in [&self.sender, &self.shaper, &self.receiver] {
            if Path::new(NETNS_RUN_DIR).join(ns.name()).exists() {
                let r = process::run("ip", &["netns", "del", ns.name()]).map(drop);
                if first.is_ok() {
                    first = r;
                }
            }
            process::unregister(ns.name());
        }
        first
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.delete_all() {
            tracing::warn!("removing topology: {e}");
        }
    }
}

/// Replaces the root qdisc of `iface` in namespace `ns` with `spec` (the kernel baselines of the
/// bump in the wire and of the attach topology, [`attach::AttachTopology`]).
pub fn install_root_qdisc(ns: &Namespace, iface: &str, spec: &QdiscSpec) -> Result<(), TopoError> {
    let ns = ns.name();
    let tc = |args: &[&str]| {
        let mut full = vec!["-n", ns];
        full.extend_from_slice(args);
        process::run("tc", &full).map(drop)
    };
    match *spec {
        QdiscSpec::Htb {
            rate_bps,
            burst_bytes,
        } => {
            tc(&[
                "qdisc", "replace", "dev", iface, "root", "handle", "1:", "htb", "default", "10",
            ])?;
            let rate = format!("{rate_bps}bit");
            let mut args = vec![
                "class", "add", "dev", iface, "parent", "1:", "classid", "1:10",
            ];
            args.extend_from_slice(&["htb", "rate", &rate, "ceil", &rate]);
            let burst = burst_bytes.map(|b| b.to_string());
            if let Some(b) = &burst {
                args.extend_from_slice(&["burst", b, "cburst", b]);
            }
            tc(&args)
        }
        QdiscSpec::Tbf {
            rate_bps,
            burst_bytes,
            latency_us,
        } => {
            let (rate, burst) = (format!("{rate_bps}bit"), burst_bytes.to_string());
            let latency = format!("{latency_us}us");
            let args = [
                "qdisc", "replace", "dev", iface, "root", "tbf", "rate", &rate,
            ];
            let mut full = args.to_vec();
            full.extend_from_slice(&["burst", &burst, "latency", &latency]);
            tc(&full)
        }
        QdiscSpec::Pfifo { limit } => {
            let limit = limit.to_string();
            tc(&[
                "qdisc", "replace", "dev", iface, "root", "pfifo", "limit", &limit,
            ])
        }
    }
}

/// Creates the named network namespace (`ip netns add`). The caller checked CAP_NET_ADMIN
/// before; any failure here (a name in use, no `/run/netns`, a kernel without namespaces) is
/// reported as the command's own error, never as a missing privilege.
fn add_namespace(name: &str) -> Result<(), TopoError> {
    process::run("ip", &["netns", "add", name]).map(drop)
}

/// The environment variable that lets a run skip the privileged tests it cannot run: with it set
/// to `1`, a privileged test without its privilege (root or CAP_NET_ADMIN) or without a tool it
/// needs (the `etcd` binary, say) passes after saying so ([`skip_unprivileged`]); without it,
/// such a test fails. `.ci/run` never sets it.
pub const SKIP_PRIVILEGED_ENV: &str = "METRONOME_SKIP_PRIVILEGED";

/// Creates the veth pair `a_if` (in `a`) - `b_if` (in `b`).
pub(crate) fn add_veth(
    a: &Namespace,
    a_if: &str,
    b: &Namespace,
    b_if: &str,
) -> Result<(), TopoError> {
    let args = [
        "link",
        "add",
        a_if,
        "netns",
        a.name(),
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ];
    process::run("ip", &args).map(drop)
}

/// Privileged test `test` cannot run, for reason `why`: panics saying so and how to run it,
/// unless [`SKIP_PRIVILEGED_ENV`] is `1`, where it returns (the caller returns from the test)
/// after writing `SKIPPED test: why` to the standard error. That line goes to the process's
/// stderr itself, not through `eprintln!`, which the test harness captures and shows only for
/// failed tests, so a skip stays visible in the output of a passing run.
pub fn skip_unprivileged(test: &str, why: &dyn std::fmt::Display) {
    if !skip_privileged_requested() {
        panic!(
            "{test} cannot run: {why}. The privileged tests need root or CAP_NET_ADMIN and the \
             tools README.md lists; set {SKIP_PRIVILEGED_ENV}=1 to skip them instead"
        );
    }
    report_skip(test, why);
}

/// Whether [`SKIP_PRIVILEGED_ENV`] is `1`.
pub fn skip_privileged_requested() -> bool {
    std::env::var(SKIP_PRIVILEGED_ENV).as_deref() == Ok("1")
}

/// Writes `SKIPPED test (METRONOME_SKIP_PRIVILEGED=1): why` to the process's stderr, past the
/// test harness's capture.
fn report_skip(test: &str, why: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test} ({SKIP_PRIVILEGED_ENV}=1): {why}"
    );
}

/// [`Topology::bump_in_the_wire`] with namespaces named `prefix`-..., or `None` after saying why
/// privileged test `test` is skipped (no CAP_NET_ADMIN and [`SKIP_PRIVILEGED_ENV`] set; without
/// it, [`skip_unprivileged`] panics). Any other failure to build it panics.
pub fn bump_in_the_wire_or_skip(prefix: &str, test: &str) -> Option<Topology> {
    match Topology::bump_in_the_wire(prefix) {
        Ok(topo) => Some(topo),
        Err(e @ TopoError::MissingPrivilege(_)) => {
            skip_unprivileged(test, &e);
            None
        }
        Err(e) => panic!("building the topology failed: {e}"),
    }
}

/// Whether a namespace named `name` exists.
pub fn namespace_exists(name: &str) -> bool {
    Path::new(NETNS_RUN_DIR).join(name).exists()
}

/// Runs `program args` (used by [`Topology`]; public for tests and `compare`).
pub fn run_command(program: &'static str, args: &[&str]) -> Result<String, TopoError> {
    process::run(program, args)
}

#[cfg(test)]
mod tests;
