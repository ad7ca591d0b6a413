//! Receiving: every frame the loop hands to [`Engine::receive`] is forwarded at once, queued,
//! or dropped under a named reason (Carousel §5.1, in order):
//!
//! 1. **Checksum.** A frame received with `csum_not_ready` (a local sender's `CHECKSUM_PARTIAL`)
//!    gets its TCP/UDP checksum computed ([`metronome_packet::fix_l4_checksum`]).
//! 2. **Classify** ([`metronome_packet::parse`], [`metronome_packet::Classifier`]), with the
//!    origin tag the receiving port gave the frame's slot ([`FramePool::origin`]; 0 for none):
//!    an unshaped class's frame is forwarded at once; non-IP and malformed frames get the action of
//!    `[daemon] non_ip` / `malformed` ([`crate::unclassified`]), by default charged to
//!    the default class.
//! 3. **Admit** ([`Engine::admit`]) before the flow table: within the class's `queue` bounds
//!    (`queue_full`) and its share of the frame pool (`pool_share`); a fair class sheds from its
//!    fattest flow instead ([`super::fair`]). Then backpressure: `drop` past the flow's `limit`
//!    (`flow_limit`), `ecn` marks CE above `threshold` ([`metronome_packet::mark_ce`]; a
//!    not-ECT packet is queued unmarked and counted under `ecn_not_ect`), a `reject` horizon
//!    drops a packet whose delay would reach it (`horizon`).
//! 4. **Stamp**: the EDT is the latest of the class's aggregate policy and, when the class
//!    paces, the flow's own ([`crate::flow_table`]; a flow with no room there is paced
//!    under its class's overflow entry, counted under `flow_table_full`); clamped to the horizon.
//! 5. **Queue** in the timing wheel, booked with its slot ([`super::slots`]); a super-frame
//!    beyond its class's `gso_burst` is cut into pieces first ([`super::cut`]). A wheel
//!    rejection is a counted drop, its slot freed.
//!
//! A super-frame (with `vnet_hdr`) is one unit for classification, the flow table and
//! backpressure, and charges its class the bytes its segments occupy on the wire
//! ([`metronome_packet::wire_bytes`]). One with `NEEDS_CSUM` keeps it: the kernel or the device
//! completes its checksum when it leaves.

use super::cut::{cut_segments, PieceRun};
use super::fair::FairArrival;
use super::slots::Booking;
use super::{clamp_u32, reject_reason, Engine};
use crate::config::Backpressure;
use crate::flow_table::Lookup;
use crate::stats::DropReason;
use crate::unclassified::{Unclassified, UnclassifiedKind};
use metronome_core::timestamp::PolicyStack;
use metronome_core::{ClassId, EdtQueue, FlowId, HorizonPolicy, PacketRef, Timestamp};
use metronome_io::{FramePool, RxFrame};
use metronome_packet::gso::RX_BYTES_FRAMING;
use metronome_packet::{
    fix_l4_checksum, mark_ce, parse, EcnMark, L4Checksum, Parsed, SuperFrame, Verdict, VnetHdr,
};

/// A classified frame to shape ([`Engine::shape`]).
#[derive(Clone, Copy, Debug)]
struct Arrival {
    /// Its pool slot.
    id: u32,
    /// Its configuration class.
    class: ClassId,
    /// Its flow.
    flow: FlowId,
    /// The bytes it charges its class ([`Engine::charge`]).
    wire: u64,
    /// Its walked headers, for a GSO super-frame.
    superframe: Option<SuperFrame>,
}

impl Engine {
    /// Processes received frames (slots of `pool`): pushes the ids to transmit at once onto
    /// `forward`, queues shaped packets, frees the slots of dropped ones.
    pub fn receive(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        frames: &[RxFrame],
        forward: &mut Vec<u32>,
    ) {
        self.large_from = u32::try_from(pool.capacity() - pool.large_capacity()).unwrap_or(0);
        for rx in frames {
            self.counters.received += 1;
            let vnet = pool.vnet(rx.id);
            if vnet.is_gso() {
                self.counters.superframes += 1;
            }
            let origin = pool.origin(rx.id);
            let frame = pool.frame_mut(rx.id);
            let mut parsed = parse(frame);
            if let Parsed::Ip(ip) = &mut parsed {
                // The frame does not carry its origin: the port that received it told its slot.
                ip.origin = origin;
            }
            if rx.csum_not_ready {
                match fix_l4_checksum(frame, &parsed) {
                    L4Checksum::Fixed => self.counters.checksums_fixed += 1,
                    L4Checksum::Malformed => self.counters.checksum_failed += 1,
                    L4Checksum::NotApplicable => {}
                }
            }
            let verdict = self.classifier.classify(&parsed);
            self.parse_counters.record(&verdict);
            match verdict {
                Verdict::Shape { class, flow, len } => {
                    let (wire, superframe) = self.charge(pool, rx.id, &vnet, u32::from(len));
                    let arrival = Arrival {
                        id: rx.id,
                        class,
                        flow,
                        wire,
                        superframe,
                    };
                    self.shape(now, pool, arrival, &parsed, forward)
                }
                Verdict::PassNonIp => {
                    self.counters.passed_non_ip += 1;
                    let kind = UnclassifiedKind::NonIp;
                    self.unclassified(now, pool, rx, kind, &parsed, forward);
                }
                Verdict::Malformed(reason) => {
                    self.counters.malformed += 1;
                    self.telemetry.malformed(reason.name());
                    let kind = UnclassifiedKind::Malformed;
                    self.unclassified(now, pool, rx, kind, &parsed, forward);
                }
            }
        }
        self.publish_gauges();
    }

    /// Frames received on the outside port, passed to the inside unshaped: completes their
    /// checksums (a local receiver's ACKs are `CHECKSUM_PARTIAL` too), counts them and pushes
    /// their ids onto `out`.
    pub fn pass_through(&mut self, pool: &mut FramePool, frames: &[RxFrame], out: &mut Vec<u32>) {
        for rx in frames {
            if rx.csum_not_ready {
                let frame = pool.frame_mut(rx.id);
                let parsed = parse(frame);
                match fix_l4_checksum(frame, &parsed) {
                    L4Checksum::Fixed => self.counters.checksums_fixed += 1,
                    L4Checksum::Malformed => self.counters.checksum_failed += 1,
                    L4Checksum::NotApplicable => {}
                }
            }
            let vnet = pool.vnet(rx.id);
            if vnet.needs_csum() && !vnet.is_gso() && self.acks.is_active() {
                // ACK shaping updates the TCP checksum incrementally (RFC 1624), which is only
                // right for a complete checksum, not for the pseudo-header sum of NEEDS_CSUM.
                let frame = pool.frame_mut(rx.id);
                if metronome_packet::gso::complete_partial_checksum(
                    frame,
                    vnet.csum_start,
                    vnet.csum_offset,
                ) {
                    self.counters.checksums_fixed += 1;
                    let flags = vnet.flags & !metronome_packet::gso::FLAG_NEEDS_CSUM;
                    pool.set_vnet(rx.id, VnetHdr { flags, ..vnet });
                } else {
                    self.counters.checksum_failed += 1;
                }
            }
            let (wire, _) = self.charge(pool, rx.id, &vnet, rx.len);
            self.tally_pass_through(wire);
            out.push(rx.id);
        }
        self.publish_gauges();
    }

    /// A frame the classifier could not place: the action `[daemon] malformed` / `non_ip` names
    /// ([`crate::unclassified`]), counted.
    fn unclassified(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        rx: &RxFrame,
        kind: UnclassifiedKind,
        parsed: &Parsed,
        forward: &mut Vec<u32>,
    ) {
        let action = match kind {
            UnclassifiedKind::Malformed => self.config.malformed,
            UnclassifiedKind::NonIp => self.config.non_ip,
        };
        self.gauges.unclassified[kind.index()][action.index()] += 1;
        match action {
            Unclassified::Pass => {
                self.forward(rx.id, forward);
                self.tally_pass_through(u64::from(rx.len));
            }
            Unclassified::Drop => {
                self.counters.dropped_unclassified += 1;
                pool.free(rx.id);
            }
            Unclassified::Default => {
                self.counters.unclassified_to_default += 1;
                let arrival = Arrival {
                    id: rx.id,
                    class: self.classifier.default_class(),
                    flow: kind.flow(),
                    wire: u64::from(rx.len),
                    superframe: None,
                };
                self.shape(now, pool, arrival, parsed, forward);
            }
        }
    }

    fn forward(&mut self, id: u32, forward: &mut Vec<u32>) {
        self.counters.forwarded += 1;
        forward.push(id);
    }

    /// Admits, stamps and queues a frame of a shaped class (steps 3 to 5 of the module docs);
    /// forwards one of an unshaped class; a fair class's goes to its flow queue ([`super::fair`]).
    fn shape(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        arrival: Arrival,
        parsed: &Parsed,
        forward: &mut Vec<u32>,
    ) {
        let Arrival {
            id,
            class,
            flow,
            wire: len,
            superframe,
        } = arrival;
        let index = self.class_map.get(class.index()).copied().unwrap_or(0) as usize;
        let Some(state) = self.classes.get(index) else {
            return self.forward(id, forward);
        };
        if !state.policy.is_shaped() && !state.policy.link.on_link {
            let state = &mut self.classes[index];
            state.stats.sent_packets += 1;
            state.stats.sent_bytes += len;
            state.touch(index, &mut self.dirty);
            return self.forward(id, forward);
        }
        let (policy, horizon_policy, aggregate, closed) = (
            state.policy,
            state.horizon_policy,
            state.aggregate,
            state.closed || state.node.closed_above,
        );
        let fair = policy.fair && aggregate.is_some();
        if self.tree.any {
            self.tree_touch(index);
        }
        if closed {
            return self.drop_frame(pool, id, index, DropReason::QueueFull);
        }
        // Before the flow table: a frame its class cannot hold takes no flow entry.
        if !fair {
            if let Err(reason) = self.admit(pool, index, id, len) {
                return self.drop_frame(pool, id, index, reason);
            }
        }
        let claims = self.flows.claims;
        let entry = match self.flows.lookup(index as u32, flow, now, &self.stamper) {
            Lookup::Entry(e) => Some(e),
            // The bucket is full of active flows: the class's overflow entry paces and limits
            // this packet with the others that found no way (`crate::flow_table`).
            Lookup::Overflow(e) => {
                self.counters.flow_table_full += 1;
                self.class_count(index, |s| s.flow_table_overflow += 1);
                Some(e)
            }
            // Not reached: `install_classes` gives every class an overflow entry.
            Lookup::Full => {
                self.counters.flow_table_full += 1;
                None
            }
        };
        if let (true, true, Some(e)) = (policy.pace_sockets, self.pace.enabled, entry) {
            self.pace_packet(index, e, self.flows.claims != claims, parsed);
        }
        if let (Backpressure::Drop { limit }, Some(e)) = (policy.backpressure, entry) {
            if self.flows.queued(e) >= limit {
                return self.drop_frame(pool, id, index, DropReason::FlowLimit);
            }
        }
        if fair {
            let packet = FairArrival {
                id,
                index,
                entry,
                wire: len,
                superframe,
            };
            return self.fair_enqueue(now, pool, packet, parsed);
        }
        let pacing = match (policy.pacing, entry) {
            (Some(rate), Some(e)) => {
                self.flows
                    .pacing_policy(e, &mut self.stamper, rate, policy.burst)
            }
            _ => None,
        };
        let policies = PolicyStack::new(aggregate, pacing);
        // The delay this packet will wait: the largest backlog among its policies and its
        // ancestors' (which stamp it when its own EDT comes, [`super::tree`]).
        let delay = self.class_stack(index, pacing).backlog(&self.stamper, now);
        if let Backpressure::Ecn { threshold } = policy.backpressure {
            if delay > threshold {
                self.mark_ecn(pool, id, index, parsed);
            }
        }
        if horizon_policy == HorizonPolicy::Reject && delay >= self.max_delay {
            return self.drop_frame(pool, id, index, DropReason::Horizon);
        }
        if let Some(sf) = superframe {
            let max_segments = cut_segments(&sf, &policy);
            let n = sf.pieces(max_segments);
            if n > 1 {
                let run = PieceRun {
                    now,
                    at: now,
                    id,
                    flow,
                    index,
                    max_segments,
                    pieces: n,
                    policies,
                    entry,
                    wire: len,
                };
                if let Err(reason) = self.queue_pieces(pool, &sf, run) {
                    self.drop_frame(pool, id, index, reason);
                }
                return;
            }
        }
        let edt = policies.stamp(&mut self.stamper, now, now, clamp_u32(len));
        let edt = edt.min(now.saturating_add(self.max_delay));
        let len16 = u16::try_from(len).unwrap_or(u16::MAX);
        let pkt = PacketRef::new(id, flow, ClassId(index as u32), len16);
        match self.wheel.enqueue(now, edt, pkt) {
            Ok(()) => self.book_whole(pool, id, index, edt, len, entry),
            Err(rejected) => self.drop_frame(pool, id, index, reject_reason(rejected.reason)),
        }
    }

    /// Books a frame the wheel took whole (one entry, not cut into pieces): slot `id` of class
    /// `index`, `len` bytes stamped, departing at `edt`, of flow-table entry `entry`.
    pub(super) fn book_whole(
        &mut self,
        pool: &mut FramePool,
        id: u32,
        index: usize,
        edt: Timestamp,
        len: u64,
        entry: Option<u32>,
    ) {
        self.counters.enqueued += 1;
        self.count_queued(index, id, len);
        self.classes[index].stamped_bytes += len;
        let booking = Booking {
            edt,
            last: edt,
            wire: len,
            entry,
            cut: None,
        };
        self.slots.book(pool, id, booking);
        if let Some(e) = entry {
            self.flows.add_queued(e);
        }
    }

    /// The bytes a received frame in slot `id` charges its class: for a GSO super-frame the
    /// bytes its segments occupy on the wire (`metronome_packet::wire_bytes`, the `rx_bytes`
    /// convention), with its walked headers for cutting; else `len`.
    fn charge(
        &mut self,
        pool: &FramePool,
        id: u32,
        vnet: &VnetHdr,
        len: u32,
    ) -> (u64, Option<SuperFrame>) {
        if !vnet.is_gso() {
            return (u64::from(len), None);
        }
        let frame = pool.frame(id);
        match SuperFrame::parse(frame, vnet) {
            Ok(sf) => (sf.wire_bytes(RX_BYTES_FRAMING), Some(sf)),
            Err(_) => {
                self.counters.gso_uncut += 1;
                let wire = metronome_packet::wire_bytes(frame, vnet, RX_BYTES_FRAMING)
                    .unwrap_or(u64::from(len));
                (wire, None)
            }
        }
    }

    /// Marks packet `id` of class `class` CE (ECN backpressure) and counts the outcome: marked,
    /// already CE, or not ECN-capable (CONTRIBUTING.md §11).
    pub(super) fn mark_ecn(
        &mut self,
        pool: &mut FramePool,
        id: u32,
        class: usize,
        parsed: &Parsed,
    ) {
        match mark_ce(pool.frame_mut(id), parsed) {
            EcnMark::Marked => {
                self.counters.ecn_marked += 1;
                self.class_count(class, |s| s.ecn_marked += 1);
            }
            EcnMark::AlreadyCe => self.counters.ecn_already_ce += 1,
            EcnMark::NotEct | EcnMark::NotIp => {
                self.counters.ecn_not_ect += 1;
                self.class_count(class, |s| s.ecn_not_ect += 1);
            }
        }
    }

    /// Frees the frame in slot `id` of class `index`, dropped for `reason`, and counts it.
    pub(super) fn drop_frame(
        &mut self,
        pool: &mut FramePool,
        id: u32,
        class: usize,
        reason: DropReason,
    ) {
        match reason {
            DropReason::FlowLimit => self.counters.dropped_flow_limit += 1,
            DropReason::Horizon => self.counters.dropped_horizon += 1,
            DropReason::QueueFull => self.counters.dropped_queue_full += 1,
            DropReason::PoolShare => self.counters.dropped_pool_share += 1,
            _ => self.counters.dropped_pool += 1,
        }
        let len = pool.len(id) as u64;
        if let Some(state) = self.classes.get_mut(class) {
            state.stats.drops[reason as usize] += 1;
            state.refused_bytes += len;
            state.touch(class, &mut self.dirty);
        }
        pool.free(id);
    }

    /// Counts a frame passed unshaped; published with the gauges.
    pub(super) fn tally_pass_through(&mut self, len: u64) {
        self.gauges.pass_packets += 1;
        self.gauges.pass_bytes += len;
    }
}
