//! Carrier state of the loop's two ports: a link that goes down (`ENETDOWN`, or `ENXIO`/`ENODEV`
//! while the interface is away) is an event, not a fatal error.
//!
//! [`Carrier::on_error`] marks the link down (counted, logged once); the loop then leaves that port
//! alone. While `outside` is down the shaping clock stops for at most `daemon.link_down_grace`
//! ([`Carrier::shaping_time`], [`Carrier::paused`]), so queued EDTs and timestampers (Carousel
//! §5.1.1) move by the outage together; beyond the grace, what falls due is dropped and counted.
//! Every [`CARRIER_POLL`] the loop probes the interface ([`probe_interface`]); up for
//! [`CARRIER_SETTLE`] with the same index, it resumes; with another index it reopens
//! ([`CarrierEvent::Replaced`], [`Carrier::reopened`]). What each outage does to each queue:
//! ARCHITECTURE.md, "Carrier state".

use crate::ops::metrics::Metrics;
use metronome_core::{Duration, Timestamp};
use metronome_io::PortError;
use nix::libc::{ENETDOWN, ENODEV, ENXIO};
use prometheus_client::metrics::counter::Counter;

/// How often a down link is probed: every 10 ms (bounds how late the loop notices the link is
/// back, a tenth of the 100 ms within which shaping must resume; one `getifaddrs(3)` each
/// time, tens of microseconds, and only while a link is down).
pub const CARRIER_POLL: Duration = Duration::from_millis(10);

/// How long probes must see a link up before the loop uses it again: 20 ms, two probes. A
/// carrier can flicker while a link comes up, and it can come on before the far end can
/// answer: on a veth pair the kernel starts the peer's transmit queue from its link watcher,
/// after the carrier (`dev_activate` from `linkwatch_do_dev`), so frames a host answers at once
/// can be dropped in its own stopped queue, and the sender then resumes only at its
/// retransmission timer. The real-traffic test `link_flap` exercises it; its results:
/// docs/results/daemon.md ("Link faults, garbage and the soak").
pub const CARRIER_SETTLE: Duration = Duration::from_millis(20);

pub use crate::os::ports::{probe_interface, Probe};

/// Whether `e` means the link went down or away (not a fault of the daemon).
pub fn is_carrier_error(e: &PortError) -> bool {
    match e {
        PortError::NoSuchInterface { .. } => true,
        PortError::Io { source, .. } => matches!(
            source.raw_os_error(),
            Some(ENETDOWN) | Some(ENXIO) | Some(ENODEV)
        ),
        _ => false,
    }
}

/// A change [`Carrier::poll`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CarrierEvent {
    /// Nothing changed (up, or still down).
    None,
    /// The link is up again with the same index: the port works again.
    Up,
    /// The interface is up again with another index, or was absent meanwhile: the port must
    /// be reopened, then [`Carrier::reopened`] called. The link stays down until then.
    Replaced,
}

/// The state of one port's link, and the shaping clock its outages stop. See the module docs.
#[derive(Debug)]
pub struct Carrier {
    name: String,
    index: Option<u32>,
    /// `daemon.link_down_grace`: the longest an outage stops the shaping clock, and the longest
    /// a frame waits past its EDT.
    grace: Duration,
    down_since: Option<Timestamp>,
    next_probe: Timestamp,
    /// A probe of this outage found no interface of that name, or one with another index.
    replaced: bool,
    /// Since when the probes of this outage have seen the link up ([`CARRIER_SETTLE`]).
    up_since: Option<Timestamp>,
    /// The time the shaping clock stood still over the outages that ended: each one's length,
    /// at most the grace.
    paused: Duration,
    /// The latest shaping time handed out: an earlier one is taken as it (CONTRIBUTING.md §10).
    shaping: Timestamp,
    /// The length of the outage that ended, until [`Carrier::returned`] takes it.
    returned: Option<Duration>,
    downs: Counter,
    reopens: Counter,
    dropped: Counter,
}

impl Carrier {
    /// The link of interface `name`, up, with the index `probe` sees now; `grace` is
    /// `daemon.link_down_grace`.
    pub fn new(name: &str, probe: Probe, grace: Duration, metrics: &Metrics) -> Carrier {
        Carrier {
            name: name.to_owned(),
            index: probe.map(|(i, _)| i),
            grace,
            down_since: None,
            next_probe: Timestamp::ZERO,
            replaced: false,
            up_since: None,
            paused: Duration::ZERO,
            shaping: Timestamp::ZERO,
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
        if !is_carrier_error(e) {
            return false;
        }
        if self.down_since.is_none() {
            self.down_since = Some(now);
            self.up_since = None;
            self.next_probe = now.saturating_add(CARRIER_POLL);
            self.downs.inc();
            tracing::warn!(interface = %self.name, error = %e, "link down; waiting for it");
        }
        true
    }

    /// While down, probes the link (with `probe`, at most every [`CARRIER_POLL`]); reports it
    /// back once the probes have seen it up for [`CARRIER_SETTLE`].
    pub fn poll(&mut self, now: Timestamp, probe: impl FnOnce(&str) -> Probe) -> CarrierEvent {
        let Some(since) = self.down_since else {
            return CarrierEvent::None;
        };
        if now < self.next_probe {
            return CarrierEvent::None;
        }
        self.next_probe = now.saturating_add(CARRIER_POLL);
        match probe(&self.name) {
            Some((index, up)) => {
                if self.index.is_some_and(|i| i != index) {
                    self.replaced = true;
                    self.index = Some(index);
                }
                if !up {
                    self.up_since = None;
                    return CarrierEvent::None;
                }
                let seen = *self.up_since.get_or_insert(now);
                if now.saturating_since(seen) < CARRIER_SETTLE {
                    return CarrierEvent::None;
                }
                if self.replaced {
                    // Stays down until the port is reopened (`reopened`).
                    return CarrierEvent::Replaced;
                }
                let down_ms = self.end_outage(now, since).as_nanos() / 1_000_000;
                tracing::info!(interface = %self.name, down_ms, "link up; resuming");
                CarrierEvent::Up
            }
            None => {
                self.replaced = true;
                self.up_since = None;
                CarrierEvent::None
            }
        }
    }

    /// The port was opened again after [`CarrierEvent::Replaced`] at `now`: the link is up, the
    /// reopening counted and logged.
    pub fn reopened(&mut self, now: Timestamp) {
        let Some(since) = self.down_since else {
            return;
        };
        self.replaced = false;
        let down_ms = self.end_outage(now, since).as_nanos() / 1_000_000;
        self.reopens.inc();
        tracing::warn!(
            interface = %self.name,
            index = ?self.index,
            down_ms,
            "interface re-created; sockets reopened; resuming"
        );
    }

    /// The link is up at `now` after an outage since `since`: the shaping clock keeps the time
    /// it stood still, the outage's length is kept for [`Carrier::returned`] and returned.
    fn end_outage(&mut self, now: Timestamp, since: Timestamp) -> Duration {
        let outage = now.saturating_since(since);
        self.paused = self.paused + outage.min(self.grace);
        self.down_since = None;
        self.returned = Some(outage);
        outage
    }

    /// How long the link was down, once after it came back (up, or reopened); `None` otherwise.
    /// The loop drops the frames of the port's transmit batch when that is more than
    /// `daemon.link_down_grace` (see the module docs), counted with [`Carrier::count_dropped`].
    pub fn returned(&mut self) -> Option<Duration> {
        self.returned.take()
    }

    /// `daemon.link_down_grace`.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Whether the link has been down at `now` for longer than the grace: the wheel's entries
    /// that fall due are then dropped (see the module docs).
    pub fn outlasted_grace(&self, now: Timestamp) -> bool {
        self.outage(now) > self.grace
    }

    /// How long the link has been down at `now` (zero while it is up).
    pub fn outage(&self, now: Timestamp) -> Duration {
        self.down_since
            .map_or(Duration::ZERO, |since| now.saturating_since(since))
    }

    /// The time the shaping clock has stood still by wall time `now`: over the outages that
    /// ended and the current one, each for at most the grace.
    pub fn paused(&self, now: Timestamp) -> Duration {
        self.paused + self.outage(now).min(self.grace)
    }

    /// The engine's time at wall time `now` (see the module docs): `now` minus
    /// [`Carrier::paused`], never earlier than a shaping time handed out before. The loop passes
    /// the outside link's shaping time to every [`crate::datapath::engine::Engine`] call that takes
    /// a time.
    pub fn shaping_time(&mut self, now: Timestamp) -> Timestamp {
        let t = now.saturating_sub(self.paused(now));
        self.shaping = self.shaping.max(t);
        self.shaping
    }

    /// The wall time at which the engine's time reaches `t` while the link stays up (for the
    /// loop's sleep until [`crate::datapath::engine::Engine::next_due`]).
    pub fn wall_time(&self, t: Timestamp) -> Timestamp {
        t.saturating_add(self.paused)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `daemon.link_down_grace` of these tests.
    const GRACE: Duration = Duration::from_millis(200);

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
        let mut link = Carrier::new("b1", Some((7, true)), GRACE, &metrics);
        let t0 = Timestamp::from_nanos(1_000_000_000);
        let up = |_: &str| Some((7, true));
        assert!(link.on_error(t0, &down()));
        // A second error of the same outage is not a second transition.
        assert!(link.on_error(t0 + Duration::from_millis(1), &down()));
        assert!(!link.is_up());
        // Not probed before CARRIER_POLL; down at the first probe.
        let before = t0 + Duration::from_nanos(CARRIER_POLL.as_nanos() - 1);
        let early = link.poll(before, |_| panic!("probed early"));
        assert_eq!(early, CarrierEvent::None);
        let first = t0 + CARRIER_POLL;
        assert_eq!(link.poll(first, |_| Some((7, false))), CarrierEvent::None);
        assert_eq!(link.next_probe(), Some(first + CARRIER_POLL));
        // Seen up, then down again: not back; seen up again, back after CARRIER_SETTLE.
        let seen = first + CARRIER_POLL;
        assert_eq!(link.poll(seen, up), CarrierEvent::None);
        let flicker = seen + CARRIER_POLL;
        assert_eq!(link.poll(flicker, |_| Some((7, false))), CarrierEvent::None);
        let seen = flicker + CARRIER_POLL;
        assert_eq!(link.poll(seen, up), CarrierEvent::None);
        assert_eq!(link.poll(seen + CARRIER_POLL, up), CarrierEvent::None);
        assert!(!link.is_up());
        let back = seen + CARRIER_SETTLE;
        assert_eq!(link.poll(back, up), CarrierEvent::Up);
        assert!(link.is_up());
        // The outage's length, once.
        assert_eq!(link.returned(), Some(back - t0));
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
        let t1 = t0 + Duration::from_secs(1);
        assert!(link.on_error(t1, &down()));
        let seen = t1 + CARRIER_POLL;
        assert_eq!(link.poll(seen, |_| Some((9, true))), CarrierEvent::None);
        let back = seen + CARRIER_SETTLE;
        assert_eq!(link.poll(back, |_| Some((9, true))), CarrierEvent::Replaced);
        assert!(!link.is_up());
        link.reopened(back);
        assert!(link.is_up());
        assert_eq!(link.returned(), Some(back - t1));
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
        let t2 = t1 + Duration::from_secs(1);
        assert!(link.on_error(t2, &down()));
        assert_eq!(link.poll(t2 + CARRIER_POLL, |_| None), CarrierEvent::None);
        let seen = t2 + CARRIER_POLL + CARRIER_POLL;
        assert_eq!(link.poll(seen, |_| Some((9, true))), CarrierEvent::None);
        let back = seen + CARRIER_SETTLE;
        assert_eq!(link.poll(back, |_| Some((9, true))), CarrierEvent::Replaced);
        link.reopened(back);
        // A plain flap after that is an `Up` again.
        assert!(link.on_error(back, &down()));
        let seen = back + CARRIER_POLL;
        assert_eq!(link.poll(seen, |_| Some((9, true))), CarrierEvent::None);
        let up = seen + CARRIER_SETTLE;
        assert_eq!(link.poll(up, |_| Some((9, true))), CarrierEvent::Up);
    }

    #[test]
    fn the_shaping_clock_stops_for_at_most_the_grace_of_each_outage() {
        let metrics = Metrics::new();
        let mut link = Carrier::new("b1", Some((7, true)), GRACE, &metrics);
        let ms = |n: u64| Timestamp::from_nanos(1_000_000_000 + n * 1_000_000);
        let d = Duration::from_millis;
        // Up: the wall time.
        assert_eq!(link.shaping_time(ms(0)), ms(0));
        assert_eq!(link.wall_time(ms(5)), ms(5));
        // Down at 10 for 40 ms (within the grace): stands still, then runs 40 ms behind.
        assert!(link.on_error(ms(10), &down()));
        assert_eq!(link.shaping_time(ms(30)), ms(10));
        assert_eq!(link.poll(ms(30), |_| Some((7, true))), CarrierEvent::None);
        assert_eq!(link.poll(ms(50), |_| Some((7, true))), CarrierEvent::Up);
        assert_eq!(link.paused(ms(50)), d(40));
        assert_eq!(link.shaping_time(ms(50)), ms(10));
        assert_eq!(link.shaping_time(ms(60)), ms(20));
        assert_eq!(link.wall_time(ms(20)), ms(60));
        // Down at 100 for 300 ms (beyond the grace): stands still for the grace, then runs.
        assert!(link.on_error(ms(100), &down()));
        assert_eq!(link.outage(ms(150)), d(50));
        assert_eq!(link.shaping_time(ms(100 + 200)), ms(60));
        assert_eq!(link.shaping_time(ms(100 + 250)), ms(110));
        let back = ms(400);
        assert_eq!(link.poll(ms(380), |_| Some((7, true))), CarrierEvent::None);
        assert_eq!(link.poll(back, |_| Some((7, true))), CarrierEvent::Up);
        assert_eq!(link.paused(back), d(40) + GRACE);
        assert_eq!(link.shaping_time(back), ms(160));
        assert_eq!(link.outage(back), Duration::ZERO);
        // A time earlier than one handed out is taken as it.
        assert_eq!(link.shaping_time(ms(399)), ms(160));
    }
}

#[cfg(test)]
mod outage_tests;
