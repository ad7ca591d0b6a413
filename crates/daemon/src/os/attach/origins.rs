//! The origins of attach mode's classes ([`Attachment::set_origins`]): the `from` interfaces,
//! hooked with the `stamp` program and listed in the `ORIGIN_IF` map, and the `cgroup`s, listed
//! by their cgroup v2 id in `ORIGIN_CGROUP`; followed as they come and go
//! ([`Attachment::refresh_origins`]).

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
        let (from, cgroups) = config.origins();
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

    fn forget_if(&mut self, ifindex: u32) {
        if let Ok(mut m) = map::<BpfHashMap<&mut MapData, u32, u16>>(&mut self.bpf, "ORIGIN_IF") {
            let _ = m.remove(&ifindex);
        }
    }

    /// Hooks the `from` interfaces that came or were re-created, forgets those that went, and
    /// looks the cgroups up again.
    pub(super) fn refresh_origins(&mut self) {
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
