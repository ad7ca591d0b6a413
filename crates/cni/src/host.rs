//! Finding the pod's host-side interface, the one its classes match (`from` / `to`).
//!
//! The `bridge` plugin's result lists the bridge, the host veth (neither with a `sandbox`) and
//! the pod's interface (with one). The host veth is the interface without a `sandbox` that is a
//! port of a bridge. When `prevResult` names none (another plugin before this one, or a result
//! without interfaces), it is the peer of `CNI_IFNAME` inside `CNI_NETNS`: its `IFLA_LINK`,
//! looked up in the host's namespace.
//!
//! The questions to the kernel go through the [`Links`] trait, so the choice is tested without
//! interfaces; [`SystemLinks`] asks rtnetlink (not sysfs, which shows the namespace it was
//! mounted in, not necessarily the caller's).

use crate::error::{CniError, NO_HOST_INTERFACE};
use netlink_packet_route::link::{InfoPortKind, LinkAttribute, LinkInfo, LinkMessage};
use serde_json::{Map, Value};
use std::io;
use std::path::Path;

/// What finding the host interface asks of the kernel.
pub trait Links {
    /// Whether the interface `name` of the host's namespace is a port of a bridge (`false`
    /// when there is no such interface).
    fn is_bridge_port(&self, name: &str) -> io::Result<bool>;
    /// The host-side name of the veth peer of `ifname` inside the namespace at `netns`.
    fn peer_of(&self, netns: &Path, ifname: &str) -> io::Result<String>;
}

/// The interfaces of `prev_result` without a `sandbox` (host-side), in its order.
fn host_side(prev_result: Option<&Map<String, Value>>) -> Vec<String> {
    let interfaces = prev_result
        .and_then(|r| r.get("interfaces"))
        .and_then(Value::as_array);
    interfaces
        .into_iter()
        .flatten()
        .filter(|i| {
            i.get("sandbox")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
        })
        .filter_map(|i| i.get("name").and_then(Value::as_str))
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The pod's host-side interface (see the module docs); error 101 saying what was tried.
pub fn host_interface(
    prev_result: Option<&Map<String, Value>>,
    netns: Option<&Path>,
    ifname: &str,
    links: &dyn Links,
) -> Result<String, CniError> {
    let candidates = host_side(prev_result);
    let mut tried = Vec::new();
    for name in &candidates {
        match links.is_bridge_port(name) {
            Ok(true) => return Ok(name.clone()),
            Ok(false) => tried.push(format!("{name}: not a bridge port")),
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    if candidates.is_empty() {
        tried.push("prevResult lists no host-side interface".to_owned());
    }
    match netns {
        Some(netns) => match links.peer_of(netns, ifname) {
            Ok(peer) => return Ok(peer),
            Err(e) => tried.push(format!("the peer of {ifname} in {}: {e}", netns.display())),
        },
        None => tried.push("no CNI_NETNS to look for the peer of CNI_IFNAME".to_owned()),
    }
    Err(CniError::new(
        NO_HOST_INTERFACE,
        "no host interface for the pod",
        format!(
            "the pod's host veth is a bridge port named in prevResult, or the peer of its \
             interface: {}",
            tried.join("; ")
        ),
    ))
}

/// [`Links`] through rtnetlink.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemLinks;

fn by_name(name: &str) -> io::Result<Option<LinkMessage>> {
    let mut message = LinkMessage::default();
    message
        .attributes
        .push(LinkAttribute::IfName(name.to_owned()));
    metronome_daemon::os::netlink::get_link(message)
}

impl Links for SystemLinks {
    fn is_bridge_port(&self, name: &str) -> io::Result<bool> {
        let Some(link) = by_name(name)? else {
            return Ok(false);
        };
        Ok(link.attributes.iter().any(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos
                .iter()
                .any(|i| matches!(i, LinkInfo::PortKind(InfoPortKind::Bridge))),
            _ => false,
        }))
    }

    fn peer_of(&self, netns: &Path, ifname: &str) -> io::Result<String> {
        let ns = std::fs::File::open(netns)?;
        let ifname = ifname.to_owned();
        // setns(2) moves only the calling thread: a thread of its own enters the pod's
        // namespace and ends there.
        let peer_index = std::thread::spawn(move || -> io::Result<u32> {
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(io::Error::from)?;
            let link = by_name(&ifname)?.ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("no interface {ifname}"))
            })?;
            link.attributes
                .iter()
                .find_map(|a| match a {
                    LinkAttribute::Link(index) => Some(*index),
                    _ => None,
                })
                .ok_or_else(|| io::Error::other(format!("{ifname} has no peer (not a veth)")))
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))??;
        let mut message = LinkMessage::default();
        message.header.index = peer_index;
        let link = metronome_daemon::os::netlink::get_link(message)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface of index {peer_index} in the host's namespace"),
            )
        })?;
        link.attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            })
            .ok_or_else(|| io::Error::other(format!("link {peer_index} has no name")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Ports `ports`; the peer lookup answers `peer`.
    struct Fake {
        ports: Vec<&'static str>,
        peer: Option<&'static str>,
    }

    impl Links for Fake {
        fn is_bridge_port(&self, name: &str) -> io::Result<bool> {
            Ok(self.ports.contains(&name))
        }
        fn peer_of(&self, _netns: &Path, _ifname: &str) -> io::Result<String> {
            self.peer
                .map(str::to_owned)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no peer"))
        }
    }

    fn bridge_result() -> Map<String, Value> {
        let Value::Object(m) = json!({"cniVersion":"1.0.0","interfaces":[
            {"name":"cni0","mac":"00:11:22:33:44:55"},
            {"name":"veth3243","mac":"55:44:33:22:11:11"},
            {"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}]})
        else {
            unreachable!()
        };
        m
    }

    #[test]
    fn the_host_veth_is_the_bridge_port_without_a_sandbox() {
        let links = Fake {
            ports: vec!["veth3243", "eth0"],
            peer: Some("wrong"),
        };
        let r = bridge_result();
        let netns = Path::new("/var/run/netns/blue");
        assert_eq!(
            host_interface(Some(&r), Some(netns), "eth0", &links).unwrap(),
            "veth3243"
        );
    }

    #[test]
    fn without_a_bridge_port_the_peer_is_asked() {
        let netns = Path::new("/var/run/netns/blue");
        let links = Fake {
            ports: vec![],
            peer: Some("vethpeer"),
        };
        let r = bridge_result();
        assert_eq!(
            host_interface(Some(&r), Some(netns), "eth0", &links).unwrap(),
            "vethpeer"
        );
        assert_eq!(
            host_interface(None, Some(netns), "eth0", &links).unwrap(),
            "vethpeer"
        );
        let nothing = Fake {
            ports: vec![],
            peer: None,
        };
        let e = host_interface(Some(&r), Some(netns), "eth0", &nothing).unwrap_err();
        assert_eq!(e.code, NO_HOST_INTERFACE);
        assert!(e.details.contains("veth3243: not a bridge port"), "{e}");
        assert!(e.details.contains("no peer"), "{e}");
    }

    #[test]
    fn the_kernel_answers_for_loopback() {
        // Every namespace has `lo`, a port of no bridge; a name no interface has is not one
        // either.
        assert!(!SystemLinks.is_bridge_port("lo").unwrap());
        assert!(!SystemLinks.is_bridge_port("nosuchif0").unwrap());
    }
}
