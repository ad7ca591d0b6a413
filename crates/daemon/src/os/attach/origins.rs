//! The origins of attach mode's classes ([`Attachment::set_origins`]): the `from` interfaces,
//! hooked with the `stamp` program and listed in the `ORIGIN_IF` map, the `to` interfaces
//! (ports of a listed bridge), hooked with the `capture` program at their egress while the
//! daemon is engaged and listed in `TO_IF` and `CAPTURE` (redirected to their bridge's capture
//! pair), and the `cgroup`s, listed by their cgroup v2 id in `ORIGIN_CGROUP`; followed as they
//! come, go and are re-created ([`Attachment::refresh_origins`]). A `to` interface whose master
//! is not a listed bridge is not hooked: event `attach_failed`, once for each time it is seen
//! so.

use super::{index_of, map, Attachment};
use crate::ops::config::Config;
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::TcAttachType;

/// An interface a class names with `from`.
#[derive(Debug)]
pub(super) struct Origin {
    pub(super) tag: u16,
    pub(super) ifindex: Option<u32>,
    pub(super) link: Option<aya::programs::tc::SchedClassifierLinkId>,
}

/// An interface a class names with `to`.
#[derive(Debug)]
pub(super) struct ToOrigin {
    pub(super) tag: u16,
    /// Its index when hooked or last looked at.
    pub(super) ifindex: Option<u32>,
    /// The capture pair end its packets are redirected to (its bridge's), while hooked.
    pub(super) target: Option<u32>,
    pub(super) link: Option<aya::programs::tc::SchedClassifierLinkId>,
    /// Hooking it failed (or its master is no listed bridge) for this index and target: not
    /// tried again, nor counted again, until one of them changes.
    pub(super) failed: bool,
}

/// A cgroup a class names with `cgroup`.
#[derive(Debug)]
pub(super) struct CgroupOrigin {
    pub(super) tag: u16,
    pub(super) id: Option<u64>,
}

/// Where the cgroup v2 hierarchy is mounted: the first `cgroup2` line of `/proc/self/mounts`
/// (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a hybrid one), else
/// `/sys/fs/cgroup`.
pub fn cgroup2_root() -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "cgroup2")
        .map_or_else(|| "/sys/fs/cgroup".to_string(), |f| f[1].to_string())
}

/// The cgroup v2 id of `path` (relative to the hierarchy's root, [`cgroup2_root`]): its
/// directory's inode.
fn cgroup_id(root: &str, path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let full = format!("{root}/{}", path.trim_start_matches('/'));
    std::fs::metadata(full).ok().map(|m| m.ino())
}

impl Attachment {
    /// Takes the origins of `config`'s classes (`from`, `cgroup`) and hooks the `from`
    /// interfaces that exist and looks the cgroups up; the others are taken by
    /// [`Attachment::refresh`] when they come.
    pub fn set_origins(&mut self, config: &Config) {
        let all = config.origin_set();
        let to = all.to;
        let (from, cgroups) = (all.from, all.cgroups);
        let old: Vec<String> = self.to.keys().cloned().collect();
        for name in old {
            if to.get(&name) != self.to.get(&name).map(|o| &o.tag) {
                self.unhook_to(&name);
                self.to.remove(&name);
                self.event(&name, "detached");
            }
        }
        for (name, tag) in to {
            self.to.entry(name).or_insert(ToOrigin {
                tag,
                ifindex: None,
                target: None,
                link: None,
                failed: false,
            });
        }
        let old: Vec<String> = self.from.keys().cloned().collect();
        for name in old {
            if from.get(&name) != self.from.get(&name).map(|o| &o.tag) {
                if let Some(o) = self.from.remove(&name) {
                    if let Some(link) = o.link {
                        self.detach("stamp", link);
                    }
                    if let Some(ifindex) = o.ifindex {
                        self.forget_if(ifindex);
                    }
                }
            }
        }
        for (name, tag) in from {
            self.from.entry(name).or_insert(Origin {
                tag,
                ifindex: None,
                link: None,
            });
        }
        let old: Vec<(String, Option<u64>)> = self
            .cgroups
            .iter()
            .map(|(k, v)| (k.clone(), v.id))
            .collect();
        for (path, id) in old {
            if cgroups.get(&path) != self.cgroups.get(&path).map(|c| &c.tag) {
                self.cgroups.remove(&path);
                if let Some(id) = id {
                    if let Ok(mut m) =
                        map::<BpfHashMap<&mut MapData, u64, u16>>(&mut self.bpf, "ORIGIN_CGROUP")
                    {
                        let _ = m.remove(&id);
                    }
                }
            }
        }
        for (path, tag) in cgroups {
            self.cgroups
                .entry(path)
                .or_insert(CgroupOrigin { tag, id: None });
        }
        self.refresh_origins();
    }

    /// Detaches `to` interface `name`'s hook and forgets its map entries; it is hooked again
    /// by the next [`Attachment::refresh_to`] while engaged.
    fn unhook_to(&mut self, name: &str) {
        let Some(o) = self.to.get_mut(name) else {
            return;
        };
        let (link, ifindex) = (o.link.take(), o.ifindex.take());
        o.target = None;
        o.failed = false;
        if let Some(link) = link {
            self.detach("capture", link);
        }
        if let Some(ifindex) = ifindex {
            if let Ok(mut m) = map::<BpfHashMap<&mut MapData, u32, u16>>(&mut self.bpf, "TO_IF") {
                let _ = m.remove(&ifindex);
            }
            if let Ok(mut m) = map::<BpfHashMap<&mut MapData, u32, u32>>(&mut self.bpf, "CAPTURE") {
                let _ = m.remove(&ifindex);
            }
        }
    }

    /// Detaches every `to` hook ([`Attachment::release`]).
    pub(super) fn unhook_to_all(&mut self) {
        let names: Vec<String> = self.to.keys().cloned().collect();
        for name in names {
            self.unhook_to(&name);
        }
    }

    /// While engaged: hooks the `to` interfaces that came, were re-created or moved to another
    /// bridge, forgets those that went, and counts one whose master is no listed bridge.
    pub(super) fn refresh_to(&mut self) {
        if !self.engaged {
            return;
        }
        let names: Vec<String> = self.to.keys().cloned().collect();
        for name in names {
            let now = index_of(&name);
            // Its master (bridge) by index, asked in the daemon's namespace.
            let master = now.and_then(|i| crate::os::netlink::master(i).ok().flatten());
            let target = master.and_then(|m| {
                self.uplinks
                    .iter()
                    .find(|u| u.bridge && u.ifindex == Some(m))
                    .map(|u| u.send.1)
            });
            let (was, was_target, linked, failed, tag) = {
                let o = &self.to[&name];
                (o.ifindex, o.target, o.link.is_some(), o.failed, o.tag)
            };
            let settled = now.is_none() || linked || failed;
            if now == was && target == was_target && settled {
                continue;
            }
            self.unhook_to(&name);
            let entry = self.to.get_mut(&name).expect("key from the map");
            entry.ifindex = now;
            entry.target = target;
            let Some(ifindex) = now else {
                if was.is_some() {
                    self.event(&name, "gone");
                }
                continue;
            };
            let attached = self.uplinks.iter().any(|u| u.name == name);
            let hooked = match target {
                // Its egress has the uplink's own hook, which sends what it captures there.
                Some(_) if attached => {
                    Err("it is an attached interface: its own silo shapes it".to_string())
                }
                None => Err(unlisted_master(master)),
                Some(target) => self.hook_to(&name, ifindex, target, tag),
            };
            match hooked {
                Ok(link) => {
                    self.to.get_mut(&name).expect("key from the map").link = Some(link);
                    self.event(&name, if was.is_some() { "recreated" } else { "came" });
                }
                Err(reason) => {
                    self.to.get_mut(&name).expect("key from the map").failed = true;
                    tracing::warn!(interface = %name, %reason, "attach: hooking a to interface failed");
                    self.event(&name, "attach_failed");
                }
            }
        }
    }

    /// Lists `to` interface `name` (`ifindex`) in `TO_IF` with `tag` and in `CAPTURE` with its
    /// bridge's capture pair end `target`, and attaches `capture` at its egress.
    fn hook_to(
        &mut self,
        name: &str,
        ifindex: u32,
        target: u32,
        tag: u16,
    ) -> Result<aya::programs::tc::SchedClassifierLinkId, String> {
        map::<BpfHashMap<&mut MapData, u32, u16>>(&mut self.bpf, "TO_IF")
            .map_err(|e| e.to_string())?
            .insert(ifindex, tag, 0)
            .map_err(|e| format!("TO_IF: {e}"))?;
        map::<BpfHashMap<&mut MapData, u32, u32>>(&mut self.bpf, "CAPTURE")
            .map_err(|e| e.to_string())?
            .insert(ifindex, target, 0)
            .map_err(|e| format!("CAPTURE: {e}"))?;
        self.attach("capture", name, TcAttachType::Egress)
    }

    fn forget_if(&mut self, ifindex: u32) {
        if let Ok(mut m) = map::<BpfHashMap<&mut MapData, u32, u16>>(&mut self.bpf, "ORIGIN_IF") {
            let _ = m.remove(&ifindex);
        }
    }

    /// Hooks the `from` interfaces that came or were re-created, forgets those that went, and
    /// looks the cgroups up again.
    pub(super) fn refresh_origins(&mut self) {
        self.refresh_to();
        let names: Vec<String> = self.from.keys().cloned().collect();
        for name in names {
            let now = index_of(&name);
            let (was, tag, linked) = {
                let o = &self.from[&name];
                (o.ifindex, o.tag, o.link.is_some())
            };
            if now == was && (now.is_none() || linked || self.mark == 0) {
                continue;
            }
            if let Some(old) = was {
                self.forget_if(old);
            }
            let entry = self.from.get_mut(&name).expect("key from the map");
            entry.ifindex = now;
            entry.link = None;
            let Some(ifindex) = now else {
                if was.is_some() {
                    self.event(&name, "gone");
                }
                continue;
            };
            let inserted = map::<BpfHashMap<&mut MapData, u32, u16>>(&mut self.bpf, "ORIGIN_IF")
                .map_err(|e| e.to_string())
                .and_then(|mut m| m.insert(ifindex, tag, 0).map_err(|e| e.to_string()));
            let hooked = inserted.and_then(|()| {
                if self.mark == 0 {
                    return Ok(None);
                }
                self.attach("stamp", &name, TcAttachType::Ingress).map(Some)
            });
            match hooked {
                Ok(link) => {
                    self.from.get_mut(&name).expect("key from the map").link = link;
                    self.event(&name, if was.is_some() { "recreated" } else { "came" });
                }
                Err(reason) => {
                    tracing::warn!(interface = %name, %reason, "attach: hooking a from interface failed");
                    self.event(&name, "attach_failed");
                }
            }
        }
        let paths: Vec<String> = self.cgroups.keys().cloned().collect();
        if paths.is_empty() {
            return;
        }
        let root = self.cgroup_root.get_or_insert_with(cgroup2_root).clone();
        for path in paths {
            let now = cgroup_id(&root, &path);
            let (was, tag) = {
                let c = &self.cgroups[&path];
                (c.id, c.tag)
            };
            if now == was {
                continue;
            }
            if let Ok(mut m) =
                map::<BpfHashMap<&mut MapData, u64, u16>>(&mut self.bpf, "ORIGIN_CGROUP")
            {
                if let Some(old) = was {
                    let _ = m.remove(&old);
                }
                if let Some(id) = now {
                    let _ = m.insert(id, tag, 0);
                }
            }
            self.cgroups.get_mut(&path).expect("key from the map").id = now;
            self.event(&path, if now.is_some() { "came" } else { "gone" });
        }
    }
}

/// Why a `to` interface whose master is `master` (its bridge's ifindex, `None`: it has none) is
/// not hooked: its master is no bridge of `[interfaces] bridges`. Also the control socket's
/// refusal of such a class (`crate::ops::control`).
pub fn unlisted_master(master: Option<u32>) -> String {
    match master {
        Some(m) => format!("its master (ifindex {m}) is not a bridge of [interfaces] bridges"),
        None => "it is no bridge's port: [interfaces] bridges".to_string(),
    }
}
