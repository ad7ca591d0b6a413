//! Link state of the loop's two ports: a link that goes down (`ENETDOWN`, or `ENXIO`/`ENODEV`
//! while the interface is away) is an event, not a fatal error.
//!
//! When a port operation fails with such an error, [`Link::on_error`] marks the link down,
//! counts it in `metronome_link_down_total{interface}` and logs the transition once. While it is
//! down the loop neither receives from nor sends to that port.
//!
//! **What was queued for the down port** is sent when the link returns if it is at most
//! `daemon.link_down_grace` past its departure time, else dropped and counted in
//! `metronome_link_down_dropped_total{interface}`, so that nothing leaves later than its EDT
//! plus the grace and a class sends at most the grace's worth of its rate at once when the link
//! returns:
//! * the shaped frames stay in the wheel with their EDT: while the outside link is down nothing
//!   is released ([`release_outbound`]), and every entry more than the grace past its EDT is
//!   dropped ([`Engine::expire`]; also per class, `metronome_class_drops_total{reason=
//!   "link_down"}`). On the link's return the rest leave as the wheel releases them: at once
//!   for those due (within the grace), at their EDT for the others. Frames still arrive on the
//!   inside port meanwhile and are stamped as usual, so the class's rate holds across the
//!   outage and after it.
//! * frames already in the port's transmit batch when it went down (released at their EDT, or
//!   passed unshaped, at most two batches) are sent when the link returns after an outage of at
//!   most the grace, and dropped when it was longer ([`Link::returned`]).
//!
//! Frames the other port receives while the transmit batch is full wait in its ring, whose
//! overflow the kernel counts (`rx_ring_drops`).
//!
//! Every [`LINK_POLL`] the loop probes the interface by name ([`probe_interface`]: its ifindex and
//! whether it is up with carrier); when it is up again with the same index, the AF_PACKET
//! socket (bound to that index) works again, and the loop logs the transition and resumes.
//! An interface that came back with another index, or that was seen absent meanwhile (deleted
//! and re-created), cannot be used by the bound socket: [`LinkEvent::Replaced`]; the loop opens
//! the port again by name (`ports::Reopen`, the silos rejoining one fanout group; on the inside
//! interface GRO is switched on again, `ports::enable_gro`, as at start) and calls
//! [`Link::reopened`], which counts it in `metronome_link_reopened_total{interface}`, logs it
//! once and resumes. A reopening that fails because the interface went away again leaves the
//! link down and probed every `LINK_POLL`.

use crate::engine::Engine;
use crate::metrics::Metrics;
use metronome_core::{Duration, Timestamp};
use metronome_io::{FramePool, PortError};
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
    /// The wheel may hold entries to drop for this outage ([`release_outbound`]): set when
    /// the link goes down, cleared by the first release after it returned.
    expiring: bool,
    /// The length of the outage that ended, until [`Link::returned`] takes it.
    returned: Option<Duration>,
    downs: Counter,
    reopens: Counter,
    dropped: Counter,
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
            expiring: false,
            returned: None,
            downs: metrics.link_down_counter(name),
            reopens: metrics.link_reopened_counter(name),
            dropped: metrics.link_down_dropped_counter(name),
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
            self.expiring = true;
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
                self.returned = Some(now.saturating_since(since));
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
        self.returned = Some(now.saturating_since(since));
        self.reopens.inc();
        let down_ms = now.saturating_since(since).as_nanos() / 1_000_000;
        tracing::warn!(
            interface = %self.name,
            index = ?self.index,
            down_ms,
            "interface re-created; sockets reopened; resuming"
        );
    }

    /// How long the link was down, once after it came back (up, or reopened); `None` otherwise.
    /// The loop drops the frames of the port's transmit batch when that is more than
    /// `daemon.link_down_grace` (see the module docs), counted with [`Link::count_dropped`].
    pub fn returned(&mut self) -> Option<Duration> {
        self.returned.take()
    }

    /// Counts `frames` dropped for having waited for this link beyond the grace
    /// (`metronome_link_down_dropped_total{interface}`).
    pub fn count_dropped(&self, frames: u64) {
        if frames > 0 {
            self.dropped.inc_by(frames);
        }
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

/// The loop's release of shaped frames for the outside port, whose link is `link`, at `now`:
/// while the link is up, [`Engine::release`] of what is due into `out` (at most `room`);
/// while it is down, nothing (the frames keep their place and EDT in the wheel). While it is
/// down and once more when it is back, every wheel entry more than `grace` past its EDT is
/// dropped ([`Engine::expire`]) and counted with [`Link::count_dropped`]. Returns how many
/// frames were released.
pub fn release_outbound(
    engine: &mut Engine,
    pool: &mut FramePool,
    link: &mut Link,
    (now, grace): (Timestamp, Duration),
    out: &mut Vec<u32>,
    room: usize,
) -> usize {
    if link.expiring {
        link.count_dropped(engine.expire(now, grace, pool));
        link.expiring = !link.is_up();
    }
    if !link.is_up() {
        return 0;
    }
    engine.release(now, pool, out, room)
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
        // The outage's length, once.
        assert_eq!(link.returned(), Some(LINK_POLL + LINK_POLL));
        assert_eq!(link.returned(), None);
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
        assert_eq!(link.returned(), Some(LINK_POLL));
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

#[cfg(test)]
mod outage_tests {
    //! The shaped direction across an outage of the outside link, in simulated time: the
    //! engine driven as the loop drives it ([`release_outbound`]), one tick per millisecond.

    use super::*;
    use crate::config::Config;
    use metronome_io::RxFrame;

    /// The default class's rate: one 1514-byte frame per millisecond.
    const RATE: &str = "12112kbit";
    const FRAME: usize = 1514;
    /// The link goes down at this tick and is up again at `UP` (probed every `LINK_POLL`).
    const DOWN: u64 = 300;
    const UP: u64 = 500;
    /// Frames are offered at twice the rate until this tick.
    const OFFER_UNTIL: u64 = 1000;
    const GRACE_MS: u64 = 20;

    fn down() -> PortError {
        PortError::Io {
            op: "sendmmsg",
            ifname: "out0".into(),
            source: std::io::Error::from_raw_os_error(ENETDOWN),
        }
    }

    /// The value of the line of `text` that starts with `series ` (0 when absent).
    fn value(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    #[test]
    fn frames_queued_across_an_outage_leave_within_the_grace_or_are_dropped_and_counted() {
        let text = format!(
            "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n[daemon]\n\
             link_down_grace = \"{GRACE_MS}ms\"\n[default]\nrate = \"{RATE}\"\n"
        );
        let config = Config::from_toml_str(&text, "t.toml").unwrap();
        let grace = config.daemon.link_down_grace;
        let metrics = Metrics::new();
        let mut pool = FramePool::new(4096, 2048);
        let mut engine = Engine::new(&config, pool.capacity(), metrics.clone());
        let mut inside = metronome_io::MemoryPort::new(Default::default());
        let mut link = Link::new("out0", Some((7, true)), &metrics);
        let mut frame = vec![0u8; FRAME];
        frame[12..14].copy_from_slice(&[0x08, 0x06]); // non-IP: the default class takes it
        let t0 = Timestamp::from_nanos(1_000_000_000);
        let mut rx = [RxFrame::default(); 64];
        let mut out = Vec::new();
        // (tick, bytes) of every frame released.
        let mut sent: Vec<(u64, usize)> = Vec::new();
        let mut ms = 0;
        while ms < OFFER_UNTIL || engine.queued() > 0 {
            let now = t0 + Duration::from_millis(ms);
            if ms == DOWN {
                assert!(link.on_error(now, &down()));
            }
            link.poll(now, |_| Some((7, ms >= UP)));
            assert_eq!(link.is_up(), !(DOWN..UP).contains(&ms), "tick {ms}");
            if ms < OFFER_UNTIL {
                for _ in 0..2 {
                    use metronome_io::PacketPort;
                    inside.inject(&frame).unwrap();
                    let n = inside.recv(&mut pool, &mut rx).unwrap();
                    let mut forwarded = Vec::new();
                    engine.receive(now, &mut pool, &rx[..n], &mut forwarded);
                    assert!(forwarded.is_empty());
                }
            }
            out.clear();
            release_outbound(
                &mut engine,
                &mut pool,
                &mut link,
                (now, grace),
                &mut out,
                64,
            );
            for &id in &out {
                sent.push((ms, pool.frame(id).len()));
                engine.cuts_mut().finish(&mut pool, id);
            }
            engine.invariants();
            assert_eq!(pool.in_use(), engine.queued());
            ms += 1;
            assert!(ms < 10_000, "the wheel does not drain");
        }
        let c = engine.counters();
        let text = metrics.encode();
        // Every frame accounted for: released or dropped for the outage.
        assert_eq!(c.received, 2 * OFFER_UNTIL, "{c:?}");
        assert_eq!(c.received, c.enqueued_frames() + c.dropped(), "{c:?}");
        assert_eq!(c.enqueued, c.released + c.dropped_link_down, "{c:?}");
        assert_eq!(sent.len() as u64, c.released);
        // Nothing left later than its EDT plus the grace (and a slot of the wheel).
        let bound = grace + config.wheel.granularity;
        let late = metrics.lateness().count_above(bound.as_nanos());
        assert_eq!(
            late, 0,
            "{late} frames sent more than {bound} after their EDT"
        );
        // Nothing left while the link was down.
        assert!(!sent.iter().any(|&(t, _)| (DOWN..UP).contains(&t)));
        // The rate holds after the link's return: from it to any later tick, at most the
        // class's rate plus what was due within the grace (and one frame of burst); and the
        // backlogged class sends at its rate from the grace after its return on.
        let per_ms = FRAME; // bytes per millisecond at RATE
        let mut bytes = 0;
        for &(t, b) in sent.iter().filter(|&&(t, _)| t >= UP) {
            bytes += b;
            let allowed = (t - UP + 1 + GRACE_MS + 1) as usize * per_ms;
            assert!(
                bytes <= allowed,
                "{bytes} bytes by tick {t}, {allowed} allowed"
            );
        }
        let steady: usize = sent
            .iter()
            .filter(|&&(t, _)| (UP + GRACE_MS..OFFER_UNTIL).contains(&t))
            .map(|&(_, b)| b)
            .sum();
        let want = (OFFER_UNTIL - UP - GRACE_MS) as usize * per_ms;
        assert!(
            steady + 2 * per_ms >= want,
            "{steady} bytes of {want} after the return"
        );
        // What was due more than the grace before the link came back was dropped, and counted
        // per interface and per class.
        assert!(c.dropped_link_down > 100, "{c:?}");
        let per_link = "metronome_link_down_dropped_total{interface=\"out0\"}";
        assert_eq!(value(&text, per_link), c.dropped_link_down, "{text}");
        let per_class = "metronome_class_drops_total{class=\"default\",reason=\"link_down\"}";
        assert_eq!(value(&text, per_class), c.dropped_link_down, "{text}");
    }
}
