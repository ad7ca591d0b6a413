//! Link state of the loop's two ports: a link that goes down (`ENETDOWN`, or `ENXIO`/`ENODEV`
//! while the interface is away) is an event, not a fatal error.
//!
//! When a port operation fails with such an error, [`Link::on_error`] marks the link down,
//! counts it in `metronome_link_down_total{interface}` and logs the transition once. While it is
//! down the loop neither receives from nor sends to that port: frames bound for it stay in their
//! transmit batch, and the engine keeps the rest in the wheel (its release stops when the batch
//! is full), so what was queued is **sent when the link returns**, late by at most the outage
//! (their EDTs passed; they leave at once, in EDT order). Frames the other port receives
//! meanwhile wait in its ring, whose overflow the kernel counts (`rx_ring_drops`).
//!
//! Every [`LINK_POLL`] the loop probes the interface by name ([`probe_interface`]: its ifindex and
//! whether it is up with carrier); when it is up again with the same index, the AF_PACKET
//! socket (bound to that index) works again, and the loop logs the transition and resumes.
//! An interface that came back with another index, or that was seen absent meanwhile (deleted
//! and re-created), cannot be used by the bound socket: [`LinkEvent::Replaced`]; the loop opens
//! the port again by name (`ports::Reopen`, the silos rejoining one fanout group) and calls
//! [`Link::reopened`], which counts it in `metronome_link_reopened_total{interface}`, logs it
//! once and resumes. A reopening that fails because the interface went away again leaves the
//! link down and probed every `LINK_POLL`.

use crate::metrics::Metrics;
use metronome_core::{Duration, Timestamp};
use metronome_io::PortError;
use nix::libc::{ENETDOWN, ENODEV, ENXIO};
use prometheus_client::metrics::counter::Counter;

/// How often a down link is probed: every 50 ms (bounds how late the loop notices the link is
/// back; one `getifaddrs` each time).
pub const LINK_POLL: Duration = Duration::from_millis(50);

/// What a probe saw of an interface: `None` when it does not exist, else its index and whether
/// it is up.
pub type Probe = Option<(u32, bool)>;

/// Whether `e` means the link went down or away (not a fault of the daemon).
pub fn is_link_error(e: &PortError) -> bool {
    match e {
        PortError::NoSuchInterface { .. } => true,
        PortError::Io { source, .. } => matches!(
            source.raw_os_error(),
            Some(ENETDOWN) | Some(ENXIO) | Some(ENODEV)
        ),
        _ => false,
    }
}

/// Probes interface `name` in the calling thread's network namespace (`/sys/class/net` shows
/// the namespace `/sys` was mounted in, not necessarily this one): its index
/// (`if_nametoindex(3)`) and whether it is administratively up with carrier (`IFF_UP` and
/// `IFF_RUNNING`, from `getifaddrs(3)`). Cold path: only while a link is down.
pub fn probe_interface(name: &str) -> Probe {
    use nix::net::if_::InterfaceFlags;
    let index = nix::net::if_::if_nametoindex(name).ok()?;
    let running = InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING;
    let up = nix::ifaddrs::getifaddrs()
        .ok()?
        .any(|a| a.interface_name == name && a.flags.contains(running));
    Some((index, up))
}

/// A change [`Link::poll`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// Nothing changed (up, or still down).
    None,
    /// The link is up again with the same index: the port works again.
    Up,
    /// The interface is up again with another index, or was absent meanwhile: the port must
    /// be reopened, then [`Link::reopened`] called. The link stays down until then.
    Replaced,
}

/// The state of one port's link. See the module docs.
#[derive(Debug)]
pub struct Link {
    name: String,
    index: Option<u32>,
    down_since: Option<Timestamp>,
    next_probe: Timestamp,
    /// A probe of this outage found no interface of that name, or one with another index.
    replaced: bool,
    downs: Counter,
    reopens: Counter,
}

impl Link {
    /// The link of interface `name`, up, with the index `probe` sees now.
    pub fn new(name: &str, probe: Probe, metrics: &Metrics) -> Link {
        Link {
            name: name.to_owned(),
            index: probe.map(|(i, _)| i),
            down_since: None,
            next_probe: Timestamp::ZERO,
            replaced: false,
            downs: metrics.link_down_counter(name),
            reopens: metrics.link_reopened_counter(name),
        }
    }

    /// Whether the port may be used.
    pub fn is_up(&self) -> bool {
        self.down_since.is_none()
    }

    /// A port operation failed with `e` at `now`: when it is a link error, marks the link down
    /// (counted and logged once per transition) and returns true; otherwise false, the caller
    /// handles `e`.
    pub fn on_error(&mut self, now: Timestamp, e: &PortError) -> bool {
        if !is_link_error(e) {
            return false;
        }
        if self.down_since.is_none() {
            self.down_since = Some(now);
            self.next_probe = now.saturating_add(LINK_POLL);
            self.downs.inc();
            tracing::warn!(interface = %self.name, error = %e, "link down; waiting for it");
        }
        true
    }

    /// While down, probes the link (with `probe`, at most every [`LINK_POLL`]).
    pub fn poll(&mut self, now: Timestamp, probe: impl FnOnce(&str) -> Probe) -> LinkEvent {
        let Some(since) = self.down_since else {
            return LinkEvent::None;
        };
        if now < self.next_probe {
            return LinkEvent::None;
        }
        self.next_probe = now.saturating_add(LINK_POLL);
        match probe(&self.name) {
            Some((index, up)) => {
                if self.index.is_some_and(|i| i != index) {
                    self.replaced = true;
                    self.index = Some(index);
                }
                if !up {
                    return LinkEvent::None;
                }
                if self.replaced {
                    // Stays down until the port is reopened (`reopened`).
                    return LinkEvent::Replaced;
                }
                self.down_since = None;
                let down_ms = now.saturating_since(since).as_nanos() / 1_000_000;
                tracing::info!(interface = %self.name, down_ms, "link up; resuming");
                LinkEvent::Up
            }
            None => {
                self.replaced = true;
                LinkEvent::None
            }
        }
    }

    /// The port was opened again after [`LinkEvent::Replaced`] at `now`: the link is up, the
    /// reopening counted and logged.
    pub fn reopened(&mut self, now: Timestamp) {
        let Some(since) = self.down_since.take() else {
            return;
        };
        self.replaced = false;
        self.reopens.inc();
        let down_ms = now.saturating_since(since).as_nanos() / 1_000_000;
        tracing::warn!(
            interface = %self.name,
            index = ?self.index,
            down_ms,
            "interface re-created; sockets reopened; resuming"
        );
    }

    /// When the link should next be probed, if it is down.
    pub fn next_probe(&self) -> Option<Timestamp> {
        self.down_since.map(|_| self.next_probe)
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> PortError {
        PortError::Io {
            op: "recvmmsg",
            ifname: "b1".into(),
            source: std::io::Error::from_raw_os_error(ENETDOWN),
        }
    }

    #[test]
    fn a_flap_is_counted_once_and_probed_until_up() {
        let metrics = Metrics::new();
        let mut link = Link::new("b1", Some((7, true)), &metrics);
        let t0 = Timestamp::from_nanos(1_000_000_000);
        assert!(link.on_error(t0, &down()));
        // A second error of the same outage is not a second transition.
        assert!(link.on_error(t0 + Duration::from_millis(1), &down()));
        assert!(!link.is_up());
        // Not probed before LINK_POLL; down at the first probe; up at the second.
        let early = link.poll(t0 + Duration::from_millis(10), |_| panic!("probed early"));
        assert_eq!(early, LinkEvent::None);
        let first = t0 + LINK_POLL;
        assert_eq!(link.poll(first, |_| Some((7, false))), LinkEvent::None);
        assert_eq!(link.next_probe(), Some(first + LINK_POLL));
        assert_eq!(
            link.poll(first + LINK_POLL, |_| Some((7, true))),
            LinkEvent::Up
        );
        assert!(link.is_up());
        let text = metrics.encode();
        assert!(
            text.contains("metronome_link_down_total{interface=\"b1\"} 1"),
            "{text}"
        );
        // Other errors are the caller's.
        let other = PortError::Config {
            ifname: "b1".into(),
            reason: "x",
        };
        assert!(!link.on_error(t0, &other));
        // Back with another index: the port must be reopened; down until it is.
        assert!(link.on_error(t0, &down()));
        assert_eq!(
            link.poll(t0 + LINK_POLL, |_| Some((9, true))),
            LinkEvent::Replaced
        );
        assert!(!link.is_up());
        link.reopened(t0 + LINK_POLL);
        assert!(link.is_up());
        let text = metrics.encode();
        assert!(
            text.contains("metronome_link_down_total{interface=\"b1\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("metronome_link_reopened_total{interface=\"b1\"} 1"),
            "{text}"
        );
        // Deleted and re-created with the same index: seen absent, so reopened too.
        let t1 = t0 + Duration::from_secs(1);
        assert!(link.on_error(t1, &down()));
        assert_eq!(link.poll(t1 + LINK_POLL, |_| None), LinkEvent::None);
        let back = t1 + LINK_POLL + LINK_POLL;
        assert_eq!(link.poll(back, |_| Some((9, true))), LinkEvent::Replaced);
        link.reopened(back);
        // A plain flap after that is an `Up` again.
        assert!(link.on_error(back, &down()));
        let up = back + LINK_POLL;
        assert_eq!(link.poll(up, |_| Some((9, true))), LinkEvent::Up);
    }
}
