//! Several sites that share one etcd: the topology of the cluster classes' tests and of
//! `metronome compare --cluster`, where daemons on different hosts enforce one limit together
//! through etcd (Carousel §2: rates from an allocator above the per-host enforcers).
//!
//! ```text
//!  site i:  snd ns --- shaper ns (daemon between in0/out0) --- rcv ns   (a bump in the wire)
//!                         | mgmt0 10.81.y.(10+i)/24
//!  host ns:          bridge mtc<pid>b<n> 10.81.y.1/24   <- etcd's extra client address
//! ```
//!
//! Each site is a [`Topology::bump_in_the_wire`] of its own (its own namespaces and subnet).
//! A daemon runs in the site's shaper namespace, whose loopback is not the host's, so the etcd
//! members on the host's loopback ([`crate::etcd::EtcdCluster`]) cannot be reached from it. Each
//! shaper namespace therefore gets a management veth `mgmt0` whose other end is a port of a bridge
//! in the host namespace; the bridge holds the first address of a private /24 made for this
//! topology, and the members also listen for clients there
//! ([`crate::etcd::EtcdCluster::start_with`]). The shaper namespace has no route beyond that
//! /24: its daemon reaches etcd and nothing else, and the sites' traffic stays inside their own
//! namespaces.
//!
//! The /24 is `10.81.y.0/24` with the first `y` (from a start that depends on the process id
//! and a per-process sequence number) that no address of the host namespace lies in, so two
//! topologies on one host, of one process or of several, do not share a subnet.
//!
//! Names: the bridge and the host ends of the veths live in the host namespace, so they carry
//! the process id and a per-process sequence number (`mtc<pid>b<n>`, `mtc<pid>v<n>`: at most 15
//! bytes, `IFNAMSIZ` - 1). Cleanup: dropping the topology deletes the sites' namespaces (which
//! deletes the veths, host ends included) and then the bridge, also while unwinding from a
//! panic. On SIGINT/SIGTERM [`super::cleanup_on_signals`] deletes the namespaces; a bridge left
//! by a process that ended without its `Drop` is deleted by [`remove_stale_bridges`], which
//! [`ClusterTopology::new`] runs first.

use super::{process, TopoError, Topology};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

/// Second octet of the management subnets, `10.81.y.0/24`: beside the bump in the wire's
/// `10.77`, the attach topology's `10.78` and the CNI pods' `10.79`, which live inside
/// namespaces; these live in the host namespace.
pub const MGMT_SECOND_OCTET: u8 = 81;

/// The management interface in each shaper namespace.
pub const MGMT_IF: &str = "mgmt0";

/// Prefix of the host-side interface names (`mtc<pid>b<n>` bridges, `mtc<pid>v<n>` veths).
const HOST_IF_PREFIX: &str = "mtc";

/// Host number of the first site's management address (`.10`; site `i` has `.10 + i`).
const FIRST_SITE_HOST: u8 = 10;

/// Most sites of one topology: the host numbers `.10` to `.249` of the /24.
pub const MAX_SITES: usize = 240;

/// Per-process sequence of the host-side interface names.
static HOST_SEQ: AtomicU32 = AtomicU32::new(0);

/// One site: a bump in the wire and the management address of its shaper namespace.
#[derive(Debug)]
pub struct Site {
    /// The site's namespaces (sender, shaper, receiver).
    pub topo: Topology,
    /// The address of [`MGMT_IF`] in the shaper namespace.
    pub mgmt_addr: Ipv4Addr,
    /// The host end of the management veth, once made.
    host_end: Option<String>,
}

/// `sites` bumps in the wire whose shaper namespaces reach the host's management bridge; see
/// the module documentation. Dropping it removes everything.
#[derive(Debug)]
pub struct ClusterTopology {
    /// The sites, in order.
    pub sites: Vec<Site>,
    /// The host-side bridge.
    pub bridge: String,
    /// The bridge's address, `10.81.y.1`: where etcd listens for the daemons.
    pub host_addr: Ipv4Addr,
    bridge_made: bool,
}

impl ClusterTopology {
    /// Prefix length of the management subnet.
    pub const MGMT_PREFIX_LEN: u8 = 24;

    /// Creates `sites` sites (namespaces `<prefix>-<pid>-<seq>-{snd,shp,rcv}` each), the bridge
    /// with the first address of a free management /24, and one management veth per shaper
    /// namespace. On any failure what was created is removed before the error is returned.
    pub fn new(prefix: &str, sites: usize) -> Result<ClusterTopology, TopoError> {
        process::check_net_admin()?;
        if sites > MAX_SITES {
            return Err(TopoError::Io(std::io::Error::other(format!(
                "{sites} sites: at most {MAX_SITES}"
            ))));
        }
        remove_stale_bridges();
        let pid = std::process::id();
        let n = HOST_SEQ.fetch_add(1, Ordering::Relaxed);
        let y = free_subnet(pid.wrapping_add(n))?;
        let mut topo = ClusterTopology {
            sites: Vec::new(),
            bridge: format!("{HOST_IF_PREFIX}{pid}b{n}"),
            host_addr: Ipv4Addr::new(10, MGMT_SECOND_OCTET, y, 1),
            bridge_made: false,
        };
        // From here on `topo`'s Drop removes whatever exists, also on the error paths below.
        topo.make_bridge()?;
        for i in 0..sites {
            let site = Topology::bump_in_the_wire(prefix)?;
            let host = FIRST_SITE_HOST + u8::try_from(i).unwrap_or(0);
            let mgmt_addr = Ipv4Addr::new(10, MGMT_SECOND_OCTET, y, host);
            topo.sites.push(Site {
                topo: site,
                mgmt_addr,
                host_end: None,
            });
            topo.connect(i)?;
        }
        Ok(topo)
    }

    fn make_bridge(&mut self) -> Result<(), TopoError> {
        let b = self.bridge.clone();
        process::run("ip", &super::bridge_add_args(&b))?;
        self.bridge_made = true;
        let cidr = format!("{}/{}", self.host_addr, Self::MGMT_PREFIX_LEN);
        process::run("ip", &["addr", "add", &cidr, "dev", &b])?;
        process::run("ip", &["link", "set", &b, "up"]).map(drop)
    }

    /// Gives site `i`'s shaper namespace its management veth, a port of the bridge.
    fn connect(&mut self, i: usize) -> Result<(), TopoError> {
        let n = HOST_SEQ.fetch_add(1, Ordering::Relaxed);
        let host_end = format!("{HOST_IF_PREFIX}{}v{n}", std::process::id());
        let shaper = self.sites[i].topo.shaper.name().to_owned();
        let args = [
            "link", "add", &host_end, "type", "veth", "peer", "name", MGMT_IF, "netns", &shaper,
        ];
        process::run("ip", &args)?;
        self.sites[i].host_end = Some(host_end.clone());
        let site = &self.sites[i];
        process::run("ip", &["link", "set", &host_end, "master", &self.bridge])?;
        process::run("ip", &["link", "set", &host_end, "up"])?;
        let cidr = format!("{}/{}", site.mgmt_addr, Self::MGMT_PREFIX_LEN);
        let ns = &site.topo.shaper;
        ns.ip(&["addr", "add", &cidr, "dev", MGMT_IF])?;
        ns.ip(&["link", "set", MGMT_IF, "up"]).map(drop)
    }

    /// Deletes everything now (what `Drop` does), reporting the first failure.
    pub fn remove(mut self) -> Result<(), TopoError> {
        self.delete_all()
    }

    fn delete_all(&mut self) -> Result<(), TopoError> {
        let mut first = Ok(());
        for site in self.sites.drain(..) {
            // The veth first, by its host end: a namespace's own interfaces go when the kernel
            // gets to the namespace's clean-up, after `ip netns del` has returned.
            if let Some(end) = &site.host_end {
                let r = process::run("ip", &["link", "del", end]).map(drop);
                if first.is_ok() {
                    first = r;
                }
            }
            let r = site.topo.remove();
            if first.is_ok() {
                first = r;
            }
        }
        if self.bridge_made {
            let r = process::run("ip", &["link", "del", &self.bridge]).map(drop);
            self.bridge_made = false;
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for ClusterTopology {
    fn drop(&mut self) {
        if let Err(e) = self.delete_all() {
            tracing::warn!("removing the cluster topology: {e}");
        }
    }
}

/// [`ClusterTopology::new`], or `None` after saying why privileged test `test` is skipped (no
/// CAP_NET_ADMIN and [`super::SKIP_PRIVILEGED_ENV`] set; without it,
/// [`super::skip_unprivileged`] panics). Any other failure to build it panics.
pub fn cluster_or_skip(prefix: &str, sites: usize, test: &str) -> Option<ClusterTopology> {
    match ClusterTopology::new(prefix, sites) {
        Ok(topo) => Some(topo),
        Err(e @ TopoError::MissingPrivilege(_)) => {
            super::skip_unprivileged(test, &e);
            None
        }
        Err(e) => panic!("building the cluster topology failed: {e}"),
    }
}

/// The first `y` from `start` (modulo 250) such that no IPv4 address of the host namespace lies
/// in `10.81.y.0/24`.
fn free_subnet(start: u32) -> Result<u8, TopoError> {
    let shown = process::run("ip", &["-o", "-4", "addr", "show"])?;
    let used = used_third_octets(&shown);
    (0..250)
        .map(|k| ((start + k) % 250) as u8)
        .find(|y| !used.contains(y))
        .ok_or_else(|| {
            TopoError::Io(std::io::Error::other(format!(
                "no free 10.{MGMT_SECOND_OCTET}.y.0/24 in the host namespace"
            )))
        })
}

/// The third octets of the `10.81.y.z` addresses in the text of `ip -o -4 addr show`.
fn used_third_octets(shown: &str) -> Vec<u8> {
    let prefix = format!("10.{MGMT_SECOND_OCTET}.");
    shown
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(&prefix))
        .filter_map(|rest| rest.split('.').next()?.parse::<u8>().ok())
        .collect()
}

/// Deletes the bridges `mtc<pid>b<n>` of the host namespace whose process no longer runs (left
/// by a process that ended without its `Drop`: SIGKILL, or SIGINT/SIGTERM through
/// [`super::cleanup_on_signals`], which deletes namespaces only). Best effort. Returns the names
/// it deleted.
pub fn remove_stale_bridges() -> Vec<String> {
    let Ok(shown) = process::run("ip", &["-o", "link", "show", "type", "bridge"]) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for name in bridge_names(&shown) {
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if pid == std::process::id() || std::path::Path::new("/proc").join(pid.to_string()).exists()
        {
            continue;
        }
        if process::run("ip", &["link", "del", &name]).is_ok() {
            removed.push(name);
        }
    }
    removed
}

/// The interface names in the text of `ip -o link show` (`N: NAME: <FLAGS> ...`).
fn bridge_names(shown: &str) -> Vec<String> {
    shown
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect()
}

/// The process id in a host-side name `mtc<pid>b<n>`, if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(HOST_IF_PREFIX)?;
    let (pid, n) = rest.split_once('b')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_subnets_are_read_from_ip_addr() {
        let shown = "1: lo    inet 127.0.0.1/8 scope host lo\n\
                     7: mtc1b0    inet 10.81.17.1/24 scope global mtc1b0\n\
                     8: eth0    inet 10.81.x.1/24 scope global eth0\n";
        assert_eq!(used_third_octets(shown), vec![17]);
    }

    #[test]
    fn only_names_of_this_scheme_have_an_owner() {
        assert_eq!(owner_pid("mtc4194304b12"), Some(4_194_304));
        assert_eq!(owner_pid("mtc12v3"), None);
        assert_eq!(owner_pid("br0"), None);
        assert_eq!(owner_pid("mtcxb1"), None);
        let shown = "5: mtc77b0: <BROADCAST,MULTICAST,UP> mtu 1500\n9: cni0@if3: <UP> mtu 1500\n";
        assert_eq!(bridge_names(shown), ["mtc77b0", "cni0"]);
    }

    #[test]
    fn host_side_names_fit_ifnamsiz() {
        // The longest process id Linux hands out (pid_max 4 194 304) and a four-digit sequence.
        let longest = format!("{HOST_IF_PREFIX}{}b{}", 4_194_304, 9_999);
        assert!(longest.len() <= 15, "{longest}");
    }
}
