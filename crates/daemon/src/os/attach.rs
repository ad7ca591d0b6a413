//! Attach mode (`[interfaces] attach`): the daemon shapes what leaves interfaces in place, as a
//! qdisc would, without changing an address, a route or a bridge of the host.
//!
//! The `capture` program (`crates/daemon/bpf/attach.bpf.c`) at an attached interface's tcx egress
//! tags each packet with its origin and redirects it into a capture veth pair the daemon made; the
//! loop receives it there and sends it out of the interface with `PACKET_QDISC_BYPASS`, past the
//! hook. The `stamp` program writes a `from` interface's tag into `[interfaces] origin_mark`;
//! `cgroup` matches the socket's cgroup; a bridge of `[interfaces] bridges` gets a pair and a loop,
//! its `to` ports a `capture` hook, and sends with [`Uplink::send_mark`]. The hooks are BPF links
//! held by the process, so a dead daemon fails open; [`Attachment::release`] detaches them first at
//! a stop; [`Attachment::refresh`] re-attaches re-created interfaces every [`REFRESH`]. The
//! packet's path step by step: docs/deploy.md, "How attach mode works".

use crate::ops::config::Config;
use crate::ops::metrics::Metrics;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::programs::tc::TcAttachOptions;
use aya::programs::{LinkOrder, SchedClassifier, TcAttachType};
use aya::Ebpf;
use origins::{CgroupOrigin, Origin, ToOrigin};
use std::collections::BTreeMap;
use std::time::Duration;

mod origins;
pub use origins::{cgroup2_root, unlisted_master};

/// The programs, compiled by `crates/daemon/build.rs` (empty when clang was missing).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/attach.bpf.o"));

/// How often [`Attachment::refresh`] looks for interfaces that came, went or were re-created.
pub const REFRESH: Duration = Duration::from_millis(250);

/// MTU of the capture veth pairs: the largest (`ETH_MAX_MTU`), so that no frame the uplink may
/// send is refused on the way to the daemon (GSO super-frames pass whatever the MTU).
const CAPTURE_MTU: u32 = 65_535;

/// Name prefix of the capture veth pairs: `mtc<ifindex>` and `mtc<ifindex>r` (at most 14 bytes,
/// within `IFNAMSIZ`).
pub const CAPTURE_PREFIX: &str = "mtc";

/// Why attach mode could not start: a start-up error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The build had no clang: no BPF object.
    #[error(
        "attach mode is unavailable: this build has no BPF programs (clang and libbpf-dev were \
         missing when it was built; install them and rebuild)"
    )]
    NoPrograms,
    /// An attached interface does not exist.
    #[error("[interfaces] attach: no interface {0:?}")]
    NoSuchInterface(String),
    /// A listed bridge does not exist.
    #[error("[interfaces] bridges: no interface {0:?}")]
    NoSuchBridge(String),
    /// Loading the programs failed (no CAP_BPF, or a kernel without tcx).
    #[error("attach: loading the BPF programs failed: {0}")]
    Load(String),
    /// The thread that follows interfaces could not be started.
    #[error("attach: starting the watcher thread failed: {0}")]
    Watcher(String),
    /// Attaching a program to an interface failed.
    #[error("attach: {ifname}: {reason}")]
    Interface {
        /// The interface.
        ifname: String,
        /// What failed.
        reason: String,
    },
}

/// The names of an attached interface's capture pair.
pub fn capture_names(ifindex: u32) -> (String, String) {
    let send = format!("{CAPTURE_PREFIX}{ifindex}");
    let recv = format!("{send}r");
    (send, recv)
}

/// One attached interface or bridge.
#[derive(Debug)]
pub struct Uplink {
    /// Its name (`[interfaces] attach` or `bridges`).
    pub name: String,
    /// A bridge of `[interfaces] bridges`: no capture hook at its own egress; its capture pair
    /// takes what the `to` ports capture, and the daemon sends it out of the bridge with the
    /// mark [`Uplink::send_mark`].
    pub bridge: bool,
    /// Its index when it was last seen (`None`: gone).
    ifindex: Option<u32>,
    /// The capture hook, while attached.
    link: Option<aya::programs::tc::SchedClassifierLinkId>,
    /// The capture pair's sending end (the redirect's target) and its index.
    send: (String, u32),
    /// The capture pair's receiving end (the daemon's port) and its index.
    pub recv: (String, u32),
    /// Whether it was up with carrier at the last refresh (`None`: not looked at yet).
    up: Option<bool>,
}

impl Uplink {
    /// The attached interface or bridge `name` with its capture pair made (none hooked yet).
    fn new(name: &str, bridge: bool) -> Result<Uplink, AttachError> {
        let ifindex = index_of(name).ok_or_else(|| {
            if bridge {
                AttachError::NoSuchBridge(name.to_string())
            } else {
                AttachError::NoSuchInterface(name.to_string())
            }
        })?;
        // Another daemon's capture hook: its pair must not be taken for a stale one.
        if tcx_programs(name, true).is_ok_and(|p| p.iter().any(|n| n == "capture")) {
            return Err(AttachError::Interface {
                ifname: name.to_string(),
                reason: "another metronome is attached to it (a `capture` program is at its \
                         egress hook)"
                    .to_string(),
            });
        }
        let (send, recv) = capture_names(ifindex);
        let pair = make_pair(&send, &recv).map_err(|reason| AttachError::Interface {
            ifname: name.to_string(),
            reason,
        })?;
        Ok(Uplink {
            name: name.to_string(),
            bridge,
            ifindex: Some(ifindex),
            link: None,
            send: (send, pair.0),
            recv: (recv, pair.1),
            up: None,
        })
    }

    /// The `SO_MARK` of the daemon's transmit socket on this interface: for a bridge, every
    /// bit of `origin_mark` (`mark`), which the `capture` program at the port's egress lets
    /// pass; 0 (none) for an attached interface.
    pub fn send_mark(&self, mark: u32) -> u32 {
        if self.bridge {
            mark
        } else {
            0
        }
    }
}

/// The daemon's hooks and capture pairs (see the module docs). Dropping it detaches every hook
/// and deletes the capture pairs.
pub struct Attachment {
    bpf: Ebpf,
    uplinks: Vec<Uplink>,
    from: BTreeMap<String, Origin>,
    to: BTreeMap<String, ToOrigin>,
    cgroups: BTreeMap<String, CgroupOrigin>,
    /// Where the cgroup v2 hierarchy is mounted ([`cgroup2_root`]), read once when a cgroup is
    /// first looked up.
    cgroup_root: Option<String>,
    mark: u32,
    /// Whether the capture hooks are wanted ([`Attachment::engage`] until
    /// [`Attachment::release`]).
    engaged: bool,
    metrics: Metrics,
    /// Packet counts of the `capture` program already exported (`COUNTERS`).
    exported: [u64; PACKET_RESULTS.len()],
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("uplinks", &self.uplinks)
            .finish_non_exhaustive()
    }
}

/// The labels of the `capture` program's counters, by index (`enum counter` in the program).
const PACKET_RESULTS: [&str; 5] = [
    "captured",
    "not_ip",
    "tag_failed",
    "already_shaped",
    "not_unicast",
];

/// The attached interfaces then the bridges of `config`, each with whether it is a bridge.
fn listed(config: &Config) -> impl Iterator<Item = (&str, bool)> {
    let i = &config.interfaces;
    i.attach
        .iter()
        .map(|n| (n.as_str(), false))
        .chain(i.bridges.iter().map(|n| (n.as_str(), true)))
}

fn index_of(name: &str) -> Option<u32> {
    nix::net::if_::if_nametoindex(name).ok()
}

impl Attachment {
    /// Loads the programs and makes a capture pair for each attached interface; attaches no
    /// hook yet (the daemon opens its ports first, then calls [`Attachment::engage`]).
    pub fn prepare(config: &Config, metrics: &Metrics) -> Result<Attachment, AttachError> {
        if OBJECT.is_empty() {
            return Err(AttachError::NoPrograms);
        }
        let mut uplinks = Vec::new();
        for (name, bridge) in listed(config) {
            uplinks.push(Uplink::new(name, bridge)?);
        }
        let mut bpf = Ebpf::load(OBJECT).map_err(|e| AttachError::Load(e.to_string()))?;
        for name in ["capture", "stamp", "discard"] {
            program(&mut bpf, name)?
                .load()
                .map_err(|e| AttachError::Load(format!("{name}: {e}")))?;
        }
        let mark = config.interfaces.origin_mark;
        {
            let mut settings: Array<&mut MapData, u32> = map(&mut bpf, "SETTINGS")?;
            let shift = if mark == 0 { 0 } else { mark.trailing_zeros() };
            settings
                .set(0, mark, 0)
                .and_then(|()| settings.set(1, shift, 0))
                .map_err(|e| AttachError::Load(format!("SETTINGS: {e}")))?;
        }
        let mut attachment = Attachment {
            bpf,
            uplinks,
            from: BTreeMap::new(),
            to: BTreeMap::new(),
            cgroups: BTreeMap::new(),
            cgroup_root: None,
            mark,
            engaged: false,
            metrics: metrics.clone(),
            exported: [0; PACKET_RESULTS.len()],
        };
        let receiving: Vec<String> = attachment
            .uplinks
            .iter()
            .map(|u| u.recv.0.clone())
            .collect();
        for recv in receiving {
            attachment.hook_discard(&recv)?;
        }
        attachment.set_origins(config);
        Ok(attachment)
    }

    /// Follows a new list of attached interfaces (`[interfaces] attach` of `config`, after
    /// [`Attachment::release`]): the capture pairs of interfaces no longer listed go, new ones
    /// get theirs; the order becomes the list's. The origins follow `config` too, and the
    /// counters go to `metrics` from here on. Call [`Attachment::engage`] afterwards.
    pub fn retarget(&mut self, config: &Config, metrics: &Metrics) -> Result<(), AttachError> {
        self.metrics = metrics.clone();
        let mut kept = Vec::with_capacity(config.attached_silos());
        let mut old = std::mem::take(&mut self.uplinks);
        for (name, bridge) in listed(config) {
            if let Some(i) = old
                .iter()
                .position(|u| u.name == name && u.bridge == bridge)
            {
                kept.push(old.swap_remove(i));
                continue;
            }
            let uplink = Uplink::new(name, bridge)?;
            self.hook_discard(&uplink.recv.0)?;
            kept.push(uplink);
            self.event(name, "attached");
        }
        for gone in old {
            if let Some(ifindex) = gone.ifindex {
                if let Ok(mut m) =
                    map::<BpfHashMap<&mut MapData, u32, u32>>(&mut self.bpf, "CAPTURE")
                {
                    let _ = m.remove(&ifindex);
                }
            }
            if let Err(e) = crate::os::netlink::delete(gone.send.1) {
                tracing::warn!(pair = %gone.send.0, error = %e, "attach: deleting the capture pair failed");
            }
            self.event(&gone.name, "detached");
        }
        self.uplinks = kept;
        self.set_origins(config);
        Ok(())
    }

    /// Attaches `discard` at the ingress of capture pair end `recv`, which the daemon's port
    /// reads: nothing captured goes up the host's stack.
    fn hook_discard(&mut self, recv: &str) -> Result<(), AttachError> {
        self.attach("discard", recv, TcAttachType::Ingress)
            .map(drop)
            .map_err(|reason| AttachError::Interface {
                ifname: recv.to_string(),
                reason,
            })
    }

    /// The attached interfaces in `[interfaces] attach` order, then the bridges in `bridges`
    /// order: one silo each.
    pub fn uplinks(&self) -> &[Uplink] {
        &self.uplinks
    }

    /// `[interfaces] origin_mark`: what [`Uplink::send_mark`] gives a bridge.
    pub fn origin_mark(&self) -> u32 {
        self.mark
    }

    /// Attaches the capture hook of every attached interface and `to` port: from here on their
    /// IP traffic goes through the daemon.
    pub fn engage(&mut self) -> Result<(), AttachError> {
        self.engaged = true;
        for i in 0..self.uplinks.len() {
            let name = self.uplinks[i].name.clone();
            let Some(ifindex) = self.uplinks[i].ifindex else {
                continue;
            };
            if self.uplinks[i].bridge {
                continue;
            }
            self.hook_uplink(i, ifindex)
                .map_err(|reason| AttachError::Interface {
                    ifname: name,
                    reason,
                })?;
        }
        self.refresh_to();
        Ok(())
    }

    /// Points the `CAPTURE` map at uplink `i`'s pair for `ifindex` and attaches its hook.
    fn hook_uplink(&mut self, i: usize, ifindex: u32) -> Result<(), String> {
        let target = self.uplinks[i].send.1;
        {
            let mut capture: BpfHashMap<&mut MapData, u32, u32> =
                map(&mut self.bpf, "CAPTURE").map_err(|e| e.to_string())?;
            capture
                .insert(ifindex, target, 0)
                .map_err(|e| format!("CAPTURE: {e}"))?;
        }
        let name = self.uplinks[i].name.clone();
        let link = self.attach("capture", &name, TcAttachType::Egress)?;
        self.uplinks[i].link = Some(link);
        self.uplinks[i].ifindex = Some(ifindex);
        Ok(())
    }

    fn attach(
        &mut self,
        which: &str,
        ifname: &str,
        direction: TcAttachType,
    ) -> Result<aya::programs::tc::SchedClassifierLinkId, String> {
        let prog = program(&mut self.bpf, which).map_err(|e| e.to_string())?;
        prog.attach_with_options(
            ifname,
            direction,
            TcAttachOptions::TcxOrder(LinkOrder::last()),
        )
        .map_err(|e| format!("attaching {which}: {e}"))
    }

    fn detach(&mut self, which: &str, link: aya::programs::tc::SchedClassifierLinkId) {
        if let Ok(prog) = program(&mut self.bpf, which) {
            // A link whose interface is gone was detached by the kernel already.
            let _ = prog.detach(link);
        }
    }

    fn event(&self, interface: &str, event: &'static str) {
        tracing::info!(interface, event, "attach");
        self.metrics.attach_event(interface, event);
    }

    /// Looks at every attached and `from` interface and cgroup: hooks those that came or were
    /// re-created, counts those that went; exports the capture program's counters.
    pub fn refresh(&mut self) {
        for i in 0..self.uplinks.len() {
            if !self.engaged {
                break;
            }
            let name = self.uplinks[i].name.clone();
            // Its link going down and up, as the host's own routing sees it: while it is down
            // the host sends nothing through it, so the loop may never meet an error.
            let up = crate::os::ports::probe_interface(&name).map(|(_, up)| up);
            if let (Some(was_up), Some(up)) = (self.uplinks[i].up, up) {
                if was_up != up {
                    self.event(&name, if up { "up" } else { "down" });
                }
            }
            if up.is_some() {
                self.uplinks[i].up = up;
            }
            let now = index_of(&name);
            let was = self.uplinks[i].ifindex;
            let hooked = self.uplinks[i].link.is_some() || self.uplinks[i].bridge;
            if now == was && (now.is_none() || hooked) {
                continue;
            }
            if self.uplinks[i].bridge {
                // A bridge has no hook of its own: its `to` ports follow it
                // (`refresh_to`), and the daemon's socket on it fails until it is back.
                self.uplinks[i].ifindex = now;
                let event = match (was, now) {
                    (_, None) => "gone",
                    (Some(_), Some(_)) => "recreated",
                    (None, Some(_)) => "came",
                };
                self.event(&name, event);
                continue;
            }
            match now {
                None => {
                    self.uplinks[i].ifindex = None;
                    self.uplinks[i].link = None;
                    self.event(&name, "gone");
                }
                Some(ifindex) => match self.hook_uplink(i, ifindex) {
                    Ok(()) => self.event(&name, if was.is_some() { "recreated" } else { "came" }),
                    Err(reason) => {
                        tracing::warn!(interface = %name, %reason, "attach: re-attaching failed");
                        self.event(&name, "attach_failed");
                    }
                },
            }
        }
        self.refresh_origins();
        self.export_counters();
    }

    fn export_counters(&mut self) {
        let Ok(counters) = map::<PerCpuArray<&mut MapData, u64>>(&mut self.bpf, "COUNTERS") else {
            return;
        };
        let mut totals = [0u64; PACKET_RESULTS.len()];
        for (i, total) in totals.iter_mut().enumerate() {
            if let Ok(values) = counters.get(&(i as u32), 0) {
                *total = values.iter().sum();
            }
        }
        for (i, total) in totals.iter().enumerate() {
            let delta = total.saturating_sub(self.exported[i]);
            if delta > 0 {
                self.metrics.attach_packets(PACKET_RESULTS[i], delta);
            }
        }
        self.exported = totals;
    }

    /// Detaches the capture hooks: from here on traffic leaves unshaped, and what was captured
    /// is still in the daemon's sockets for the loop to read and send.
    pub fn release(&mut self) {
        self.engaged = false;
        for i in 0..self.uplinks.len() {
            if let Some(link) = self.uplinks[i].link.take() {
                self.detach("capture", link);
            }
        }
        self.unhook_to_all();
        self.export_counters();
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.release();
        let stamps: Vec<_> = self
            .from
            .values_mut()
            .filter_map(|o| o.link.take())
            .collect();
        for link in stamps {
            self.detach("stamp", link);
        }
        for uplink in &self.uplinks {
            if let Err(e) = crate::os::netlink::delete(uplink.send.1) {
                tracing::warn!(pair = %uplink.send.0, error = %e, "attach: deleting the capture pair failed");
            }
        }
    }
}

/// Makes the capture pair `send` - `recv` (deleting one left by a daemon that was killed), IPv6
/// off on both ends (no link-local traffic of their own), both up. Returns their indexes.
fn make_pair(send: &str, recv: &str) -> Result<(u32, u32), String> {
    if let Some(stale) = index_of(send) {
        crate::os::netlink::delete(stale).map_err(|e| format!("deleting the stale {send}: {e}"))?;
    }
    if let Some(stale) = index_of(recv) {
        crate::os::netlink::delete(stale).map_err(|e| format!("deleting the stale {recv}: {e}"))?;
    }
    crate::os::netlink::create_veth(send, recv, CAPTURE_MTU)
        .map_err(|e| format!("creating the capture pair {send}/{recv}: {e}"))?;
    let mut indexes = [0u32; 2];
    for (i, name) in [send, recv].into_iter().enumerate() {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
        indexes[i] = index_of(name).ok_or_else(|| format!("{name} vanished"))?;
        crate::os::netlink::set_up(indexes[i]).map_err(|e| format!("bringing {name} up: {e}"))?;
    }
    Ok((indexes[0], indexes[1]))
}

fn program<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut SchedClassifier, AttachError> {
    bpf.program_mut(name)
        .ok_or_else(|| AttachError::Load(format!("no program {name}")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| AttachError::Load(format!("{name}: {e}")))
}

fn map<'a, M>(bpf: &'a mut Ebpf, name: &str) -> Result<M, AttachError>
where
    M: TryFrom<&'a mut aya::maps::Map, Error = aya::maps::MapError>,
{
    let m = bpf
        .map_mut(name)
        .ok_or_else(|| AttachError::Load(format!("no map {name}")))?;
    M::try_from(m).map_err(|e| AttachError::Load(format!("{name}: {e}")))
}

/// The names of the tcx programs attached at `ifname`'s egress (`egress`) or ingress, in the
/// order they run: what an operator (and the tests) check to see whether Metronome's hooks are
/// there (`capture`, `stamp`, `discard`). Asks the kernel (`BPF_PROG_QUERY`) in the calling
/// thread's network namespace.
pub fn tcx_programs(ifname: &str, egress: bool) -> Result<Vec<String>, String> {
    let direction = if egress {
        TcAttachType::Egress
    } else {
        TcAttachType::Ingress
    };
    let (_, programs) = SchedClassifier::query_tcx(ifname, direction)
        .map_err(|e| format!("{ifname}: querying its tcx programs: {e}"))?;
    Ok(programs
        .iter()
        .map(|p| p.name_as_str().unwrap_or("?").to_string())
        .collect())
}
