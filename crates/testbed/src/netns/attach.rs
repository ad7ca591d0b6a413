//! The "attach" topology: a host whose own TCP and whose workloads' traffic leave through one
//! uplink, the set-up users have when the daemon attaches in place to an interface
//! (`[interfaces] attach`) instead of sitting as a bump in the wire between two.
//!
//! ```text
//!  workload ns w<i>            host ns                           receiver ns
//!  eth0 10.79.x.(10+i) <-> hv<i> ─┐
//!                               br0 10.79.x.1 ─ forward ─ up0 10.78.x.1 <-> rcv0 10.78.x.2
//!                  (the host's own TCP leaves through up0 too; all prefixes /24)
//! ```
//!
//! * The host namespace holds the uplink `up0` (its peer `rcv0` is in the receiver namespace,
//!   where the sinks listen), the bridge `br0` with the workloads' gateway address, and the host
//!   side `hv<i>` of each workload's veth, enslaved to `br0`. It routes (`net.ipv4.ip_forward =
//!   1` in that namespace only), so workload traffic leaves through `up0` with its own source
//!   address: no NAT. The receiver routes the workload subnet back via the host's uplink address.
//! * Each workload namespace holds `eth0` with one address and a default route via the bridge.
//! * [`WorkloadLink::Routed`] ([`AttachTopology::with_link`]) joins the workloads without a
//!   bridge instead, as routed container networks (the containernetworking `ptp` plugin, Calico)
//!   do: each `hv<i>` carries the gateway address as a /32 and the host routes the workload's
//!   /32 to it. The difference matters to whoever identifies a workload by the interface its
//!   packets entered the host through: through a bridge, the kernel receives the packet a second
//!   time on the bridge device (`br_pass_frame_up` in `net/bridge/br_input.c`), so its input
//!   interface (`skb->skb_iif`) is `br0` by the time it is routed; routed, it stays `hv<i>`.
//! * Offloads stay the kernel's defaults (TSO, GSO and GRO on), the way users run.
//!
//! Names: namespaces are `<prefix>-<pid>-<seq>-{host,rcv,w<i>}`, unique per process and topology
//! as in [`super::Topology`]; interface names are fixed (`up0`, `rcv0`, `br0`, `hv<i>`, `eth0`,
//! `ifb<i>`) because each lives in a namespace private to the topology, which keeps them short
//! (<= 15 bytes) and lets a daemon configuration name them ([`AttachTopology::uplink`],
//! [`Workload::host_if`]).
//!
//! The kernel baselines of `metronome compare --attach` are installed here, on the same uplink
//! and veths the daemon attaches to: a root HTB or TBF on the uplink
//! ([`AttachTopology::install_uplink_qdisc`], the code of [`super::install_root_qdisc`] that the
//! bump in the wire uses too), one HTB class per workload selected by u32 filters on the
//! workloads' source addresses ([`AttachTopology::install_workload_htb`]), and the
//! containernetworking `bandwidth` plugin's per-workload IFB with a TBF
//! ([`AttachTopology::install_workload_ifb_tbf`]). [`AttachTopology::remove_baselines`] takes
//! them all off; deleting the namespaces (on drop, also after a failure or a panic, and on
//! SIGINT/SIGTERM through [`super::cleanup_on_signals`]) removes everything else.

use super::{
    add_namespace, add_veth, install_root_qdisc, process, Namespace, QdiscSpec, TopoError,
};
use super::{NETNS_RUN_DIR, SEQUENCE};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::Ordering;

/// Most workloads one topology holds: their addresses are `.10` to `.10 + n - 1` of one /24 and
/// their HTB class ids `1:10` to `1:10 + n - 1` (hexadecimal minor ids below `ffff`).
pub const MAX_WORKLOADS: usize = 200;

/// Prefix length of the uplink subnet and of the workload subnet.
pub const PREFIX_LEN: u8 = 24;

/// The queue of the `bandwidth` plugin's TBF, in milliseconds of the rate: its `limit` is this
/// much traffic at the rate plus the bucket (the plugin's `latencyInMillis`).
pub const IFB_TBF_LATENCY_MS: u64 = 25;

/// HTB class id (minor, hexadecimal) of the unlimited default class of
/// [`AttachTopology::install_workload_htb`]: what no workload filter takes (the host's own
/// traffic, ARP) leaves through it.
const HTB_DEFAULT_MINOR: &str = "ffff";

/// Rate of that default class, bits/s: 100 Gbit/s, ten times what a veth carries on the machines
/// this runs on, so it never limits.
pub const HTB_DEFAULT_BPS: u64 = 100_000_000_000;

/// One workload: a namespace with one veth whose host side is enslaved to the host's bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// The workload's namespace (`<base>-w<i>`).
    pub ns: Namespace,
    /// The workload's side of its veth, `eth0`.
    pub iface: String,
    /// The host side of its veth, `hv<i>` in the host namespace: what a class's
    /// `match = { from = ... }` names.
    pub host_if: String,
    /// The workload's address, in the workload subnet.
    pub addr: Ipv4Addr,
}

/// How the workloads' veths join the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadLink {
    /// Enslaved to the bridge `br0`, which holds the gateway address (the workloads share one
    /// L2 segment).
    #[default]
    Bridge,
    /// No bridge: each host-side veth holds the gateway address as a /32 and a /32 route leads
    /// to its workload (a routed container network).
    Routed,
}

impl WorkloadLink {
    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadLink::Bridge => "bridge",
            WorkloadLink::Routed => "routed",
        }
    }
}

impl std::str::FromStr for WorkloadLink {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bridge" => Ok(WorkloadLink::Bridge),
            "routed" => Ok(WorkloadLink::Routed),
            other => Err(format!("`{other}`: expected `bridge` or `routed`")),
        }
    }
}

/// What [`AttachTopology::install_workload_ifb_tbf`] and
/// [`AttachTopology::install_workload_htb`] left to remove.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Installed {
    uplink_root: bool,
    ifbs: usize,
}

/// A host with an uplink and `N` bridged workloads, and a receiver behind the uplink. Dropping
/// it deletes every namespace (and with them the veths, the bridge and the IFBs).
#[derive(Debug)]
pub struct AttachTopology {
    /// The host namespace: the uplink, the bridge, the workloads' host-side veths; the daemon
    /// runs here, attached to [`AttachTopology::uplink`].
    pub host: Namespace,
    /// The receiver namespace (the sinks).
    pub receiver: Namespace,
    /// The workloads, in order.
    pub workloads: Vec<Workload>,
    /// The host's uplink, `up0`.
    pub uplink: String,
    /// The receiver's side of the uplink, `rcv0`.
    pub receiver_if: String,
    /// How the workloads' veths join the host.
    pub link: WorkloadLink,
    /// The host's bridge of the workloads' veths, `br0` ([`WorkloadLink::Bridge`]; there is no
    /// such interface with [`WorkloadLink::Routed`]).
    pub bridge: String,
    /// The host's address on the uplink.
    pub host_addr: Ipv4Addr,
    /// The receiver's address, in the uplink subnet.
    pub receiver_addr: Ipv4Addr,
    /// The workloads' gateway: the bridge's address, or each host-side veth's
    /// ([`WorkloadLink::Routed`]).
    pub gateway_addr: Ipv4Addr,
    installed: Installed,
}

impl AttachTopology {
    /// Creates the namespaces `<prefix>-<pid>-<seq>-{host,rcv,w0,..}`, the uplink veth
    /// `up0`<->`rcv0` (`10.78.<seq>.1/24`, `.2/24`), the bridge `br0` (`10.79.<seq>.1/24`) and
    /// `workloads` workloads (`eth0` = `10.79.<seq>.(10+i)/24` <-> `hv<i>` on `br0`), the routes
    /// both ways and forwarding in the host namespace; brings every link up. Offloads stay the
    /// kernel's. On any failure what was created is removed before the error is returned.
    pub fn new(prefix: &str, workloads: usize) -> Result<AttachTopology, TopoError> {
        Self::with_link(prefix, workloads, WorkloadLink::Bridge)
    }

    /// [`AttachTopology::new`] with the workloads joined as `link` says: bridged as there, or
    /// routed (no `br0`; `hv<i>` holds `10.79.<seq>.1/32` and the host routes
    /// `10.79.<seq>.(10+i)/32` to it; the workload's `eth0` holds its address as a /32 with
    /// routes to the gateway on `eth0` and by default via it).
    pub fn with_link(
        prefix: &str,
        workloads: usize,
        link: WorkloadLink,
    ) -> Result<AttachTopology, TopoError> {
        Self::build(prefix, (workloads, link), "br0")
    }

    /// [`AttachTopology::new`] with the bridge named `bridge` (at most 15 bytes) instead of
    /// `br0`: the node of [`super::cni::CniTopology`] has no workloads of its own and names its
    /// bridge as the CNI `bridge` plugin's configuration does (`cni0`).
    pub fn with_bridge(
        prefix: &str,
        workloads: usize,
        bridge: &str,
    ) -> Result<AttachTopology, TopoError> {
        Self::build(prefix, (workloads, WorkloadLink::Bridge), bridge)
    }

    fn build(
        prefix: &str,
        (workloads, link): (usize, WorkloadLink),
        bridge: &str,
    ) -> Result<AttachTopology, TopoError> {
        process::check_net_admin()?;
        if workloads > MAX_WORKLOADS {
            return Err(TopoError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{workloads} workloads: at most {MAX_WORKLOADS} fit one topology"),
            )));
        }
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let base = format!("{prefix}-{}-{seq}", std::process::id());
        let octet = u8::try_from(seq % 250).unwrap_or(0);
        let workloads = (0..workloads)
            .map(|i| Workload {
                ns: Namespace::new(format!("{base}-w{i}")),
                iface: "eth0".into(),
                host_if: format!("hv{i}"),
                // `i` < MAX_WORKLOADS, so 10 + i fits a u8.
                addr: Ipv4Addr::new(10, 79, octet, 10 + i as u8),
            })
            .collect();
        let mut topo = AttachTopology {
            host: Namespace::new(format!("{base}-host")),
            receiver: Namespace::new(format!("{base}-rcv")),
            workloads,
            uplink: "up0".into(),
            receiver_if: "rcv0".into(),
            link,
            bridge: bridge.into(),
            host_addr: Ipv4Addr::new(10, 78, octet, 1),
            receiver_addr: Ipv4Addr::new(10, 78, octet, 2),
            gateway_addr: Ipv4Addr::new(10, 79, octet, 1),
            installed: Installed::default(),
        };
        // From here on `topo`'s Drop removes whatever exists, also on the error paths below.
        topo.create()?;
        Ok(topo)
    }

    /// The workloads' subnet (network address, prefix length).
    pub fn workload_subnet(&self) -> (Ipv4Addr, u8) {
        let [a, b, c, _] = self.gateway_addr.octets();
        (Ipv4Addr::new(a, b, c, 0), PREFIX_LEN)
    }

    /// Every namespace: host, receiver, then the workloads'.
    pub fn namespaces(&self) -> Vec<&Namespace> {
        let mut all = vec![&self.host, &self.receiver];
        all.extend(self.workloads.iter().map(|w| &w.ns));
        all
    }

    fn create(&mut self) -> Result<(), TopoError> {
        for ns in self.namespaces() {
            process::register(ns.name());
            add_namespace(ns.name())?;
            ns.ip(&["link", "set", "lo", "up"])?;
        }
        self.make_uplink()?;
        match self.link {
            WorkloadLink::Bridge => self.join_bridged()?,
            WorkloadLink::Routed => self.join_routed()?,
        }
        sysctl(&self.host, "net.ipv4.ip_forward=1")
    }

    /// The uplink veth `up0` - `rcv0` with its addresses, up, and the receiver's route to the
    /// workloads through it.
    fn make_uplink(&self) -> Result<(), TopoError> {
        let cidr = |a: Ipv4Addr| format!("{a}/{PREFIX_LEN}");
        add_veth(&self.host, &self.uplink, &self.receiver, &self.receiver_if)?;
        self.host
            .ip(&["addr", "add", &cidr(self.host_addr), "dev", &self.uplink])?;
        self.receiver.ip(&[
            "addr",
            "add",
            &cidr(self.receiver_addr),
            "dev",
            &self.receiver_if,
        ])?;
        self.host.ip(&["link", "set", &self.uplink, "up"])?;
        self.receiver
            .ip(&["link", "set", &self.receiver_if, "up"])?;
        let (net, len) = self.workload_subnet();
        let host = self.host_addr.to_string();
        self.receiver
            .ip(&["route", "add", &format!("{net}/{len}"), "via", &host])
            .map(drop)
    }

    /// Deletes the uplink (its peer goes with it), waits `gone`, and makes it again as
    /// [`AttachTopology::new`] did: an interface that goes away and comes back under its name.
    pub fn recreate_uplink(&self, gone: std::time::Duration) -> Result<(), TopoError> {
        self.host.ip(&["link", "del", &self.uplink])?;
        std::thread::sleep(gone);
        self.make_uplink()
    }

    fn join_bridged(&self) -> Result<(), TopoError> {
        let cidr = |a: Ipv4Addr| format!("{a}/{PREFIX_LEN}");
        self.host.add_bridge(&self.bridge)?;
        self.host
            .ip(&["addr", "add", &cidr(self.gateway_addr), "dev", &self.bridge])?;
        self.host.ip(&["link", "set", &self.bridge, "up"])?;
        let gateway = self.gateway_addr.to_string();
        for w in &self.workloads {
            add_veth(&w.ns, &w.iface, &self.host, &w.host_if)?;
            self.host
                .ip(&["link", "set", &w.host_if, "master", &self.bridge])?;
            self.host.ip(&["link", "set", &w.host_if, "up"])?;
            w.ns.ip(&["addr", "add", &cidr(w.addr), "dev", &w.iface])?;
            w.ns.ip(&["link", "set", &w.iface, "up"])?;
            w.ns.ip(&["route", "add", "default", "via", &gateway])?;
        }
        Ok(())
    }

    fn join_routed(&self) -> Result<(), TopoError> {
        let gateway = self.gateway_addr.to_string();
        let host_route = |a: Ipv4Addr| format!("{a}/32");
        for w in &self.workloads {
            add_veth(&w.ns, &w.iface, &self.host, &w.host_if)?;
            self.host.ip(&[
                "addr",
                "add",
                &host_route(self.gateway_addr),
                "dev",
                &w.host_if,
            ])?;
            self.host.ip(&["link", "set", &w.host_if, "up"])?;
            self.host
                .ip(&["route", "add", &host_route(w.addr), "dev", &w.host_if])?;
            w.ns.ip(&["addr", "add", &host_route(w.addr), "dev", &w.iface])?;
            w.ns.ip(&["link", "set", &w.iface, "up"])?;
            w.ns.ip(&["route", "add", &gateway, "dev", &w.iface])?;
            w.ns.ip(&["route", "add", "default", "via", &gateway, "dev", &w.iface])?;
        }
        Ok(())
    }

    /// Replaces the root qdisc of the uplink with `spec` (baselines (a) and (b): HTB or TBF at
    /// the target for everything the host sends).
    pub fn install_uplink_qdisc(&mut self, spec: &QdiscSpec) -> Result<(), TopoError> {
        self.installed.uplink_root = true;
        install_root_qdisc(&self.host, &self.uplink, spec)
    }

    /// Runs `commands` (each the arguments after `tc -n HOST`) in order, as a root qdisc of the
    /// uplink that [`AttachTopology::remove_baselines`] takes off (the class tree of
    /// `compare hierarchy`); stops at the first that fails.
    pub fn install_uplink_tc(&mut self, commands: &[Vec<String>]) -> Result<(), TopoError> {
        self.installed.uplink_root = true;
        for c in commands {
            let args: Vec<&str> = c.iter().map(String::as_str).collect();
            self.tc(&args)?;
        }
        Ok(())
    }

    /// Per-workload limits in one HTB on the uplink (baseline (c)): root `1:` whose default is
    /// an unlimited class `1:ffff` ([`HTB_DEFAULT_BPS`]), one class `1:<10 + i>` (hexadecimal)
    /// per workload with rate = ceil = `rates_bps[i]` and the `tc` default burst, and a u32
    /// filter on the workload's source address into it. `rates_bps` has one rate per workload.
    pub fn install_workload_htb(&mut self, rates_bps: &[u64]) -> Result<(), TopoError> {
        self.check_rates(rates_bps)?;
        let dev = self.uplink.clone();
        self.installed.uplink_root = true;
        self.tc(&[
            "qdisc",
            "replace",
            "dev",
            &dev,
            "root",
            "handle",
            "1:",
            "htb",
            "default",
            HTB_DEFAULT_MINOR,
        ])?;
        let unlimited = format!("{HTB_DEFAULT_BPS}bit");
        let default_class = format!("1:{HTB_DEFAULT_MINOR}");
        self.tc(&[
            "class",
            "add",
            "dev",
            &dev,
            "parent",
            "1:",
            "classid",
            &default_class,
            "htb",
            "rate",
            &unlimited,
            "ceil",
            &unlimited,
        ])?;
        for (i, (w, &rate)) in self.workloads.iter().zip(rates_bps).enumerate() {
            let class = format!("1:{:x}", 0x10 + i);
            let rate = format!("{rate}bit");
            self.tc(&[
                "class", "add", "dev", &dev, "parent", "1:", "classid", &class, "htb", "rate",
                &rate, "ceil", &rate,
            ])?;
            let src = format!("{}/32", w.addr);
            self.tc(&[
                "filter", "add", "dev", &dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "ip", "src", &src, "flowid", &class,
            ])?;
        }
        Ok(())
    }

    /// The containernetworking `bandwidth` plugin's egress limit, per workload (baseline (d)):
    /// an IFB `ifb<i>` in the host namespace; the host-side veth's ingress (what the workload
    /// sends) redirected into it (`clsact`, a u32 filter matching every packet, `u32 match u32 0
    /// 0`, with the `mirred egress redirect` action); a TBF root on the IFB at `rates_bps[i]`
    /// with the bucket of [`QdiscSpec::tbf`] and a `limit` of [`IFB_TBF_LATENCY_MS`] of the rate
    /// plus the bucket, as the plugin computes it.
    pub fn install_workload_ifb_tbf(&mut self, rates_bps: &[u64]) -> Result<(), TopoError> {
        self.check_rates(rates_bps)?;
        for (i, (w, &rate)) in self.workloads.iter().zip(rates_bps).enumerate() {
            let ifb = format!("ifb{i}");
            self.host.ip(&["link", "add", &ifb, "type", "ifb"])?;
            self.installed.ifbs = i + 1;
            self.host.ip(&["link", "set", &ifb, "up"])?;
            let burst_bytes = QdiscSpec::tbf_burst_bytes(rate);
            let limit = ifb_tbf_limit_bytes(rate, burst_bytes);
            let (rate, burst, limit) = (
                format!("{rate}bit"),
                burst_bytes.to_string(),
                limit.to_string(),
            );
            self.tc(&[
                "qdisc", "replace", "dev", &ifb, "root", "tbf", "rate", &rate, "burst", &burst,
                "limit", &limit,
            ])?;
            self.tc(&["qdisc", "replace", "dev", &w.host_if, "clsact"])?;
            self.tc(&[
                "filter", "add", "dev", &w.host_if, "ingress", "protocol", "all", "prio", "1",
                "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev",
                &ifb,
            ])?;
        }
        Ok(())
    }

    /// Takes every baseline off: the uplink's root qdisc, the workload veths' `clsact` and the
    /// IFBs. What is not there is skipped.
    pub fn remove_baselines(&mut self) -> Result<(), TopoError> {
        if std::mem::take(&mut self.installed.uplink_root) {
            ignore_missing(self.tc(&["qdisc", "del", "dev", &self.uplink, "root"]))?;
        }
        let ifbs = std::mem::take(&mut self.installed.ifbs);
        for (i, w) in self.workloads.iter().enumerate().take(ifbs) {
            ignore_missing(self.tc(&["qdisc", "del", "dev", &w.host_if, "clsact"]))?;
            ignore_missing(self.host.ip(&["link", "del", &format!("ifb{i}")]).map(drop))?;
        }
        Ok(())
    }

    /// `tc -s qdisc show` in the host namespace (every interface; for logs and reports).
    pub fn qdisc_stats(&self) -> Result<String, TopoError> {
        process::run("tc", &["-n", self.host.name(), "-s", "qdisc", "show"])
    }

    /// Steers the receive processing of the receiver's veth (`rcv0`) and of the workloads'
    /// `eth0` to the CPUs of `mask` (`rps_cpus`, hexadecimal as sysfs takes it), as
    /// [`super::Topology::steer_endpoint_receive`] does for the bump in the wire. Returns the
    /// failures as warnings.
    pub fn steer_endpoint_receive(&self, mask: &str) -> Vec<String> {
        let mut ends = vec![(self.receiver.name(), self.receiver_if.as_str())];
        ends.extend(
            self.workloads
                .iter()
                .map(|w| (w.ns.name(), w.iface.as_str())),
        );
        let mut warnings = Vec::new();
        for (ns, iface) in ends {
            let cmd = format!("echo {mask} > /sys/class/net/{iface}/queues/rx-0/rps_cpus");
            if let Err(e) = process::run("ip", &["netns", "exec", ns, "sh", "-c", &cmd]) {
                let warning = format!("{ns}/{iface}: cannot set rps_cpus {mask}: {e}");
                tracing::warn!("{warning}");
                warnings.push(warning);
            }
        }
        warnings
    }

    /// Turns ECN on for TCP in the host and workload namespaces (`net.ipv4.tcp_ecn=1`), as
    /// [`super::Topology::enable_sender_ecn`] does for the sender. A failure is logged.
    pub fn enable_sender_ecn(&self) {
        let mut senders = vec![&self.host];
        senders.extend(self.workloads.iter().map(|w| &w.ns));
        for ns in senders {
            if let Err(e) = sysctl(ns, "net.ipv4.tcp_ecn=1") {
                tracing::warn!("could not enable ECN in {}: {e}", ns.name());
            }
        }
    }

    /// Deletes the namespaces now (what `Drop` does), reporting the first failure.
    pub fn remove(mut self) -> Result<(), TopoError> {
        self.delete_all()
    }

    fn check_rates(&self, rates_bps: &[u64]) -> Result<(), TopoError> {
        if rates_bps.len() != self.workloads.len() || rates_bps.contains(&0) {
            return Err(TopoError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} workload rates for {} workloads (one non-zero rate each)",
                    rates_bps.len(),
                    self.workloads.len()
                ),
            )));
        }
        Ok(())
    }

    fn tc(&self, args: &[&str]) -> Result<(), TopoError> {
        let mut full = vec!["-n", self.host.name()];
        full.extend_from_slice(args);
        process::run("tc", &full).map(drop)
    }

    fn delete_all(&mut self) -> Result<(), TopoError> {
        let names: Vec<String> = self
            .namespaces()
            .iter()
            .map(|n| n.name().to_owned())
            .collect();
        let mut first = Ok(());
        for name in names {
            if Path::new(NETNS_RUN_DIR).join(&name).exists() {
                let r = process::run("ip", &["netns", "del", &name]).map(drop);
                if first.is_ok() {
                    first = r;
                }
            }
            process::unregister(&name);
        }
        first
    }
}

impl Drop for AttachTopology {
    fn drop(&mut self) {
        if let Err(e) = self.delete_all() {
            tracing::warn!("removing attach topology: {e}");
        }
    }
}

/// The `limit` of the `bandwidth` plugin's TBF, bytes: [`IFB_TBF_LATENCY_MS`] of `rate_bps` plus
/// the bucket `burst_bytes`, saturating at `u32::MAX`.
pub fn ifb_tbf_limit_bytes(rate_bps: u64, burst_bytes: u32) -> u32 {
    let queued = u128::from(rate_bps) / 8 * u128::from(IFB_TBF_LATENCY_MS) / 1000;
    u32::try_from(queued + u128::from(burst_bytes)).unwrap_or(u32::MAX)
}

/// [`AttachTopology::with_link`] with namespaces named `prefix`-..., or `None` after saying why
/// privileged test `test` is skipped (no CAP_NET_ADMIN and [`super::SKIP_PRIVILEGED_ENV`] set;
/// without it, [`super::skip_unprivileged`] panics). Any other failure panics.
pub fn attach_or_skip(
    prefix: &str,
    (workloads, link): (usize, WorkloadLink),
    test: &str,
) -> Option<AttachTopology> {
    match AttachTopology::with_link(prefix, workloads, link) {
        Ok(topo) => Some(topo),
        Err(e @ TopoError::MissingPrivilege(_)) => {
            super::skip_unprivileged(test, &e);
            None
        }
        Err(e) => panic!("building the attach topology failed: {e}"),
    }
}

fn sysctl(ns: &Namespace, setting: &str) -> Result<(), TopoError> {
    process::run(
        "ip",
        &["netns", "exec", ns.name(), "sysctl", "-qw", setting],
    )
    .map(drop)
}

/// A `tc`/`ip` deletion of something already gone is not an error.
fn ignore_missing(r: Result<(), TopoError>) -> Result<(), TopoError> {
    match r {
        Err(TopoError::Command { .. }) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ifb_limit_is_25_ms_of_rate_plus_the_bucket() {
        // 100 Mbit/s = 12.5 MB/s; 25 ms of it is 312 500 bytes.
        assert_eq!(ifb_tbf_limit_bytes(100_000_000, 12_500), 325_000);
        assert_eq!(ifb_tbf_limit_bytes(u64::MAX, u32::MAX), u32::MAX);
    }
}
