//! The shared link (`[link]`, [`crate::config::link`]): packets of the classes on it leave the
//! timing wheel at their class's ceiling EDT (Carousel §5.1, as every class) into a multi-queue
//! port ([`metronome_core::MqPort`]: DWRR or WRR across the weighted classes under a
//! strict-priority tier, one shared buffer, MQ-ECN §4.2), which a link clock ([`LinkClock`])
//! drains at the link's rate; marking follows MQ-ECN §3 ([`metronome_core::mq_ecn`], CE by
//! [`mark_ce`]) as a packet joins the port.
//!
//! Departures: the link clock lets a late loop catch up by at most `[link] burst` bytes; a not
//! ECN-capable packet follows its class's `non_ect` (the port is built with
//! [`NonEctPolicy::Drop`] and told "ECN-capable" for `pass` classes); super-frames are charged
//! their wire bytes, cut into pieces within a `PacketRef`'s 65 535 bytes (`cut_segments`); a
//! reload ([`LinkStage::configure`]) moves every queued packet into the new port. Why each, in
//! docs/design/mq-ecn.md, "The daemon's shared link". Accounting: every packet is queued,
//! dropped under a named reason ([`LinkCounters`]) or released; [`LinkStage::invariants`].

use crate::config::{ClassLink, LinkConfig};
use crate::stats::{LinkClassSnapshot, Telemetry};
use metronome_core::{
    ClassId, Duration, MqCounters, MqRejectReason, NonEctPolicy, PacketRef, Timestamp,
};
use metronome_packet::{mark_ce, parse, Ecn, EcnMark};

mod clock;
#[cfg(test)]
mod clock_tests;
mod nicpic_queues;
mod sched;

pub use clock::LinkClock;
pub use nicpic_queues::NicPicQueues;
use sched::{build_sched, queue_order, Sched};

/// Shortest time between two publications of the link's series, ns: 10 ms. A scrape (seconds
/// apart) and `metronome stats`' 500 ms interval see values at most this stale, and the per-class
/// pass costs at most a hundred times a second whatever the batch rate and class count.
const PUBLISH_PERIOD_NS: u64 = 10_000_000;

/// No port queue for a class.
const NO_QUEUE: u32 = u32::MAX;

/// The stage's own counters, cumulative. Every packet handed to [`LinkStage::enqueue`] is in
/// the port, in `dropped_*`, or in `dequeued` (or discarded at stop by the engine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Packets that entered the port.
    pub enqueued: u64,
    /// Packets that left it onto the link (and bytes on the wire).
    pub dequeued: u64,
    /// Wire bytes that left on the link.
    pub dequeued_bytes: u64,
    /// Packets marked CE by the link's marking.
    pub marked: u64,
    /// Packets the marking selected that already carried CE.
    pub already_ce: u64,
    /// Packets the marking selected that were not ECN-capable, passed (`non_ect = "pass"`).
    pub not_ect_passed: u64,
    /// Drops: the shared buffer was full.
    pub dropped_buffer: u64,
    /// Drops: not ECN-capable above the threshold, `non_ect = "drop"`.
    pub dropped_not_ect: u64,
    /// Drops: longer than the link's longest frame, or of no queue (refused by the port).
    pub dropped_refused: u64,
    /// Packets moved from the old port to the new one by a reload.
    pub moved_by_reload: u64,
    /// Packets of classes that left the link by a reload, released without the link.
    pub released_by_reload: u64,
    /// Packets emptied out of the port at stop ([`LinkStage::drain`]; the engine counts them
    /// under `discarded_at_stop`).
    pub drained: u64,
}

impl LinkCounters {
    /// Every drop of the stage.
    pub fn dropped(&self) -> u64 {
        self.dropped_buffer + self.dropped_not_ect + self.dropped_refused
    }
}

/// Per class (by the engine's class state index): what it sent on the link and how its packets
/// fared, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkClassCounters {
    /// Packets and wire bytes that left on the link.
    pub packets: u64,
    /// Wire bytes that left on the link.
    pub bytes: u64,
    /// CE marks set by the link.
    pub marked: u64,
    /// Not ECN-capable packets above the threshold, passed.
    pub not_ect_passed: u64,
    /// Drops: buffer full.
    pub dropped_buffer: u64,
    /// Drops: not ECN-capable above the threshold.
    pub dropped_not_ect: u64,
    /// Sum of the delays from EDT to departure of its packets, ns (the time waited for the link).
    pub delay_sum_ns: u64,
    /// Longest such delay, ns.
    pub delay_max_ns: u64,
}

/// Why the stage dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkDrop {
    /// The shared buffer had no room.
    Buffer,
    /// Not ECN-capable above the threshold, under `non_ect = "drop"`.
    NotEct,
    /// Refused by the port (too long, no queue).
    Refused,
}

/// The link: a port, its clock, and the map between classes and queues. See the module docs.
pub struct LinkStage {
    config: LinkConfig,
    port: Sched,
    clock: LinkClock,
    /// Class state index -> port queue, [`NO_QUEUE`] off the link.
    queue_of: Vec<u32>,
    /// Port queue -> class state index.
    class_of: Vec<u32>,
    /// Per port queue: the class's `non_ect`.
    non_ect: Vec<NonEctPolicy>,
    /// Per class state index.
    classes: Vec<LinkClassCounters>,
    /// Packets of classes a reload took off the link: released at the next release.
    orphans: Vec<PacketRef>,
    /// Latest `now` seen (time never goes backwards here: an earlier `now` is taken as this).
    last_now: Timestamp,
    counters: LinkCounters,
    /// Per class state index: it has been on the link, so its series are published.
    published: Vec<bool>,
    /// When the series may next be published ([`PUBLISH_PERIOD_NS`]).
    next_publish: Timestamp,
}

impl std::fmt::Debug for LinkStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkStage")
            .field("queued", &self.port.total_packets())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl LinkStage {
    /// The link of `config` shared by `classes` (class state index and its place, in
    /// configuration order).
    pub fn new(config: &LinkConfig, classes: &[(usize, ClassLink)]) -> LinkStage {
        let members = queue_order(classes);
        let mut stage = LinkStage {
            config: *config,
            port: build_sched(config, &members),
            clock: LinkClock::new(config.rate, u64::from(config.burst_bytes)),
            queue_of: Vec::new(),
            class_of: Vec::new(),
            non_ect: Vec::new(),
            classes: Vec::new(),
            orphans: Vec::new(),
            last_now: Timestamp::ZERO,
            counters: LinkCounters::default(),
            published: Vec::new(),
            next_publish: Timestamp::ZERO,
        };
        stage.map(&members);
        stage
    }

    fn map(&mut self, members: &[(usize, ClassLink)]) {
        let states = members.iter().map(|(s, _)| s + 1).max().unwrap_or(0);
        if self.classes.len() < states {
            self.classes.resize(states, LinkClassCounters::default());
        }
        self.queue_of = vec![NO_QUEUE; self.classes.len()];
        self.class_of = members.iter().map(|(s, _)| *s as u32).collect();
        self.non_ect = members.iter().map(|(_, l)| l.non_ect).collect();
        for (q, (s, _)) in members.iter().enumerate() {
            self.queue_of[*s] = q as u32;
        }
    }

    /// Applies a reloaded `config` and class set: rebuilds the port and moves every queued
    /// packet into it, in its queue's order (see the module docs).
    pub fn configure(&mut self, config: &LinkConfig, classes: &[(usize, ClassLink)]) {
        let members = queue_order(classes);
        let mut old = std::mem::replace(&mut self.port, build_sched(config, &members));
        self.config = *config;
        self.clock
            .set_rate(config.rate, u64::from(config.burst_bytes));
        let old_class_of = std::mem::take(&mut self.class_of);
        self.map(&members);
        let now = self.last_now;
        let mut moving = Vec::with_capacity(old.total_packets());
        old.take_all(&mut moving);
        for (old_pkt, old_queue) in moving {
            let state = old_class_of.get(old_queue).copied().unwrap_or(0) as usize;
            let original = PacketRef {
                class: ClassId(state as u32),
                ..old_pkt
            };
            match self.queue_of.get(state).copied().unwrap_or(NO_QUEUE) {
                NO_QUEUE => {
                    self.orphans.push(original);
                    self.counters.released_by_reload += 1;
                }
                q => {
                    let pkt = PacketRef {
                        class: ClassId(q),
                        ..old_pkt
                    };
                    // Same buffer and frame bound as the old port (a change needs a restart),
                    // and "ECN-capable" so the marking cannot drop: it fits; should it not, it
                    // leaves without the link rather than being lost.
                    if self.port.enqueue(now, pkt, true).is_ok() {
                        self.counters.moved_by_reload += 1;
                    } else {
                        self.orphans.push(original);
                        self.counters.released_by_reload += 1;
                    }
                }
            }
        }
    }

    /// True when class state `class` is on the link.
    pub fn carries(&self, class: usize) -> bool {
        self.queue_of.get(class).is_some_and(|&q| q != NO_QUEUE)
    }

    /// Takes a packet of a class on the link (its `class` the engine's state index) into the
    /// port at `now`, marking CE in `frame` (the packet's pool slot) when the marking selects it.
    /// `Err`: dropped, counted; the caller frees the slot.
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        pkt: PacketRef,
        frame: &mut [u8],
    ) -> Result<(), LinkDrop> {
        self.last_now = self.last_now.max(now);
        let now = self.last_now;
        let state = pkt.class.index();
        let q = self.queue_of.get(state).copied().unwrap_or(NO_QUEUE);
        if q == NO_QUEUE {
            self.counters.dropped_refused += 1;
            return Err(LinkDrop::Refused);
        }
        let policy = self.non_ect[q as usize];
        // `pass` classes are "ECN-capable" to the port (see the module docs); `drop` ones say
        // what they are, read from the frame.
        let ect = match policy {
            NonEctPolicy::Pass => true,
            NonEctPolicy::Drop => parse(frame).ip().is_some_and(|ip| ip.ecn != Ecn::NotEct),
        };
        if self.port.total_packets() == 0 {
            self.clock.wake(now);
        }
        let port_pkt = PacketRef {
            class: ClassId(q),
            ..pkt
        };
        let c = &mut self.classes[state];
        match self.port.enqueue(now, port_pkt, ect) {
            Ok(marked) => {
                self.counters.enqueued += 1;
                if marked {
                    match mark_ce(frame, &parse(frame)) {
                        EcnMark::Marked => {
                            self.counters.marked += 1;
                            c.marked += 1;
                        }
                        EcnMark::AlreadyCe => self.counters.already_ce += 1,
                        EcnMark::NotEct | EcnMark::NotIp => {
                            self.counters.not_ect_passed += 1;
                            c.not_ect_passed += 1;
                        }
                    }
                }
                Ok(())
            }
            Err(reason) => Err(match reason {
                MqRejectReason::BufferFull => {
                    self.counters.dropped_buffer += 1;
                    c.dropped_buffer += 1;
                    LinkDrop::Buffer
                }
                MqRejectReason::NotEctDropped => {
                    self.counters.dropped_not_ect += 1;
                    c.dropped_not_ect += 1;
                    LinkDrop::NotEct
                }
                MqRejectReason::TooLong | MqRejectReason::UnknownQueue => {
                    self.counters.dropped_refused += 1;
                    LinkDrop::Refused
                }
            }),
        }
    }

    /// The next packet to leave at `now`, when the link is free (or a reload's orphan): its
    /// `class` is the engine's state index again. `wire_bytes` gives a packet's bytes on the
    /// wire, which the link clock charges.
    pub fn dequeue(
        &mut self,
        now: Timestamp,
        wire_bytes: impl Fn(PacketRef) -> u64,
    ) -> Option<PacketRef> {
        self.last_now = self.last_now.max(now);
        let now = self.last_now;
        if let Some(pkt) = self.orphans.pop() {
            return Some(pkt);
        }
        let nicpic = matches!(self.port, Sched::NicPic(_));
        if self.port.total_packets() == 0 || (!nicpic && !self.clock.ready(now)) {
            return None;
        }
        // The departure does not depend on the packet's length, so the port is asked at it.
        // NicPic keeps its own link clock at the link's rate, and says when a packet leaves.
        let start = if nicpic { now } else { self.clock.send(now, 0) };
        let (port_pkt, queue) = self.port.dequeue(start)?;
        let state = self.class_of.get(queue).copied().unwrap_or(0) as usize;
        let pkt = PacketRef {
            class: ClassId(state as u32),
            ..port_pkt
        };
        let wire = wire_bytes(pkt);
        self.clock.send(start, wire);
        self.counters.dequeued += 1;
        self.counters.dequeued_bytes += wire;
        if let Some(c) = self.classes.get_mut(state) {
            c.packets += 1;
            c.bytes += wire;
        }
        Some(pkt)
    }

    /// Publishes the series of class state `class` from now on (kept across reloads).
    pub fn publish_class(&mut self, class: usize) {
        if self.published.len() <= class {
            self.published.resize(class + 1, false);
        }
        self.published[class] = true;
    }

    /// Publishes every class's series and the link's, at most every [`PUBLISH_PERIOD_NS`] of
    /// the time the stage has seen (called once per batch).
    pub fn publish(&mut self, telemetry: &mut dyn Telemetry) {
        if self.last_now < self.next_publish {
            return;
        }
        self.next_publish = self
            .last_now
            .saturating_add(Duration::from_nanos(PUBLISH_PERIOD_NS));
        for class in 0..self.published.len() {
            if !self.published[class] {
                continue;
            }
            let c = self.class_counters(class);
            let (queue_packets, queue_bytes) = self.class_queued(class);
            telemetry.link_class(
                class,
                &LinkClassSnapshot {
                    bytes: c.bytes,
                    packets: c.packets,
                    marks: c.marked,
                    not_ect: c.not_ect_passed,
                    delay_sum_ns: c.delay_sum_ns,
                    delay_max_ns: c.delay_max_ns,
                    queue_bytes,
                    queue_packets,
                    threshold_bytes: self.class_threshold_bytes(class),
                },
            );
        }
        let round = self.round_time().map_or(0, |d| d.as_nanos());
        telemetry.link_port(self.clock.rate().bps(), self.counters.dequeued_bytes, round);
    }

    /// Records that a packet of class state `class` left `delay` after its EDT.
    pub fn observe_delay(&mut self, class: usize, delay: Duration) {
        if let Some(c) = self.classes.get_mut(class) {
            let ns = delay.as_nanos();
            c.delay_sum_ns = c.delay_sum_ns.saturating_add(ns);
            c.delay_max_ns = c.delay_max_ns.max(ns);
        }
    }

    /// Empties the port (at stop): every packet, in no particular order, class as the engine's.
    pub fn drain(&mut self, out: &mut Vec<PacketRef>) {
        out.append(&mut self.orphans);
        let mut left = Vec::with_capacity(self.port.total_packets());
        self.port.take_all(&mut left);
        for (pkt, queue) in left {
            self.counters.drained += 1;
            let state = self.class_of.get(queue).copied().unwrap_or(0);
            out.push(PacketRef {
                class: ClassId(state),
                ..pkt
            });
        }
    }

    /// When the next packet may leave: when the link is free, if the port holds one; at once for
    /// an orphan.
    pub fn next_due(&self) -> Option<Timestamp> {
        if !self.orphans.is_empty() {
            return Some(self.last_now);
        }
        match &self.port {
            Sched::NicPic(n) => n.next_due(),
            Sched::Mq(p) => (!p.is_empty()).then(|| self.clock.free_at()),
        }
    }

    /// Packets in the port (and orphans waiting to leave).
    pub fn len(&self) -> usize {
        self.port.total_packets() + self.orphans.len()
    }

    /// Bytes in the port's queues.
    pub fn total_bytes(&self) -> u64 {
        self.port.total_bytes()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packets waiting in class state `class`'s queue.
    pub fn class_queued(&self, class: usize) -> (u64, u64) {
        match self.queue_of.get(class).copied() {
            Some(q) if q != NO_QUEUE => self.port.queue(q as usize),
            _ => (0, 0),
        }
    }

    /// Class state `class`'s current marking threshold in bytes (`u64::MAX` without marking or
    /// off the link).
    pub fn class_threshold_bytes(&self, class: usize) -> u64 {
        match self.queue_of.get(class).copied() {
            Some(q) if q != NO_QUEUE => self.port.threshold_bytes(q as usize),
            _ => u64::MAX,
        }
    }

    /// Class state `class`'s counters (zero for a class never on the link).
    pub fn class_counters(&self, class: usize) -> LinkClassCounters {
        self.classes.get(class).copied().unwrap_or_default()
    }

    /// MQ-ECN's smoothed round time, `None` before the first sample or under other rules.
    pub fn round_time(&self) -> Option<Duration> {
        match &self.port {
            Sched::Mq(p) => p.t_round(),
            Sched::NicPic(_) => None,
        }
    }

    /// The stage's counters.
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// The DWRR/WRR port's own counters (since the last reload rebuilt it); `None` under
    /// NicPic.
    pub fn port_counters(&self) -> Option<&MqCounters> {
        match &self.port {
            Sched::Mq(p) => Some(p.counters()),
            Sched::NicPic(_) => None,
        }
    }

    /// The link's configuration in force.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Checks the stage's accounting and the port's invariants (CONTRIBUTING.md §10); panics
    /// with the counters if broken.
    pub fn invariants(&self) {
        self.port.invariants();
        let c = &self.counters;
        assert_eq!(
            c.enqueued,
            c.dequeued + c.released_by_reload + c.drained + self.port.total_packets() as u64,
            "link accounting: a packet that entered the port is unaccounted for: {c:?}"
        );
        let per_class: u64 = self.classes.iter().map(|k| k.packets).sum();
        assert_eq!(per_class, c.dequeued, "link per-class packets: {c:?}");
    }
}

/// The engine's side of the link: which wheel entries go to it, and what happens to them there.
impl super::Engine {
    /// True when `pkt` (a wheel entry) belongs to a class on the link.
    pub(super) fn on_link(&self, pkt: PacketRef) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| l.carries(pkt.class.index()))
    }

    /// Hands a wheel entry of a class on the link to it; a drop frees its slot (after a cut
    /// super-frame's last piece) and is counted.
    pub(super) fn link_enqueue(
        &mut self,
        now: Timestamp,
        pool: &mut metronome_io::FramePool,
        pkt: PacketRef,
    ) {
        let Some(link) = &mut self.link else { return };
        let (slot, _) = metronome_io::piece::decode(pkt.id);
        let Err(drop) = link.enqueue(now, pkt, pool.frame_mut(slot)) else {
            return;
        };
        self.counters.link_dropped += 1;
        let class = pkt.class.index();
        let reason = match drop {
            LinkDrop::Buffer | LinkDrop::Refused => crate::stats::DropReason::LinkBuffer,
            LinkDrop::NotEct => crate::stats::DropReason::LinkNotEct,
        };
        self.class_count(class, |s| s.drops[reason as usize] += 1);
        self.discard(pool, pkt);
    }

    /// Moves up to `room` packets that the link sends by `now` onto `out`; returns how many.
    pub(super) fn link_release(
        &mut self,
        now: Timestamp,
        out: &mut Vec<u32>,
        room: usize,
    ) -> usize {
        let mut sent = 0;
        while sent < room {
            let Some(link) = &mut self.link else { break };
            let slots = &self.slots;
            let Some(pkt) = link.dequeue(now, |p| slots.wire(p)) else {
                break;
            };
            let edt = self.depart(now, pkt, out);
            if let Some(link) = &mut self.link {
                link.observe_delay(pkt.class.index(), now.saturating_since(edt));
            }
            sent += 1;
        }
        sent
    }
}
