//! zD: zero drops at the end host by pausing sources instead of dropping their packets
//! (zD §3-4, Algorithm 1; its three parts, zD Figure 6).
//!
//! The source buffer regulator (§4.1) lives with the caller; [`ScheduledBuffer::probe`] is the
//! backpressure interface (§4.2) of [`Pfifo`], [`TbfBuffer`] and [`CappedWheel`]; [`PausedFlows`]
//! is the paused-flows queue (§4.3). [`Zd::offer`] is Algorithm 1's `ProcessFlow`, [`Zd::dequeue`]
//! its `ResumeFlow`. A refused packet goes back to its source ([`Overflow::HandBack`]); only
//! [`Overflow::Drop`], the baseline, drops. [`Zd::bytes_per_flow`] = 9.
//!
//! Where it reads the paper: `sendTwo` of Algorithm 1 line 7 and §4.1's cap of two packets per
//! flow, and deadlock freedom from the regulator's contract (a resumed flow offers or calls
//! [`Zd::pass_turn`]). The reading and the reasons: `docs/design/zd.md`.

use std::collections::VecDeque;

use crate::packet::{FlowId, PacketRef};
use crate::paused_flows::{Discipline, PausedCounters, PausedFlows};
use crate::queue::{EdtQueue, RejectReason, Rejected};
use crate::rate::Rate;
use crate::time::Timestamp;
use crate::timing_wheel::{TimingWheel, TimingWheelConfig};
use crate::token_bucket_rr::TokenBucket;

/// Packets a flow may hold in the scheduled buffer, and pushes per turn: 2 (zD §4.1, "limiting
/// the number of packets to only two provides a good compromise").
pub const DEFAULT_PER_FLOW_LIMIT: u8 = 2;

/// Largest per-flow limit: 15, what a nibble of [`Zd`]'s per-flow byte counts.
pub const MAX_PER_FLOW_LIMIT: u8 = 15;

/// What a full buffer does with a packet enqueued anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// Hand it back as `Rejected { reason: Full }`: a virtual drop, the source keeps the packet.
    #[default]
    HandBack,
    /// Drop it: a physical drop (the baseline without backpressure). The handle still comes back
    /// in the `Rejected` for accounting, but the packet is lost.
    Drop,
}

/// Named counters of a [`ScheduledBuffer`]. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferCounters {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets released.
    pub dequeued: u64,
    /// Packets handed back because the buffer was full ([`Overflow::HandBack`]).
    pub handed_back_full: u64,
    /// Packets dropped because the buffer was full ([`Overflow::Drop`]).
    pub physical_drops: u64,
    /// Packets handed back for another reason (the wheel's horizon or pool).
    pub handed_back_other: u64,
}

/// A scheduled buffer with zD's backpressure interface (zD §4.2).
pub trait ScheduledBuffer {
    /// The structure's name in reports.
    fn name(&self) -> &'static str;
    /// True if there is room for a packet of `flow` (zD §4.2 `probe`).
    fn probe(&self, now: Timestamp, flow: FlowId) -> bool;
    /// Accepts `pkt` to leave no earlier than `edt`, or hands it back (see [`Overflow`]).
    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected>;
    /// Moves packets that may leave at `now` into `out`; returns how many.
    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize;
    /// When `dequeue` would next return a packet (may lie in the past); `None` when empty.
    fn next_due(&self) -> Option<Timestamp>;
    /// Packets held.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Packets the buffer holds at most.
    fn capacity(&self) -> usize;
    /// What it does when full.
    fn overflow(&self) -> Overflow;
    /// The named counters.
    fn counters(&self) -> BufferCounters;
}

/// Counts and builds the refusal of `pkt` by a full buffer.
fn refuse_full(counters: &mut BufferCounters, overflow: Overflow, pkt: PacketRef) -> Rejected {
    match overflow {
        Overflow::HandBack => counters.handed_back_full += 1,
        Overflow::Drop => counters.physical_drops += 1,
    }
    Rejected {
        pkt,
        reason: RejectReason::Full,
    }
}

/// The FIFO of fixed packet capacity under [`Pfifo`] and [`TbfBuffer`]: room check, enqueue with
/// the full-buffer rule, and the counters, written once.
#[derive(Clone, Debug)]
struct BoundedFifo {
    fifo: VecDeque<PacketRef>,
    capacity: usize,
    overflow: Overflow,
    counters: BufferCounters,
}

impl BoundedFifo {
    fn new(capacity: usize, overflow: Overflow) -> Self {
        BoundedFifo {
            fifo: VecDeque::with_capacity(capacity),
            capacity,
            overflow,
            counters: BufferCounters::default(),
        }
    }
    fn has_room(&self) -> bool {
        self.fifo.len() < self.capacity
    }
    fn push(&mut self, pkt: PacketRef) -> Result<(), Rejected> {
        if !self.has_room() {
            return Err(refuse_full(&mut self.counters, self.overflow, pkt));
        }
        self.fifo.push_back(pkt);
        self.counters.enqueued += 1;
        Ok(())
    }
}

/// A FIFO of fixed packet capacity, like pfifo / pfifo_fast (zD §5.1). `probe` is false when it
/// holds `capacity` packets (zD §4.2). It does not pace: `dequeue` releases everything queued, in
/// order, up to `out.len()`; the caller's NIC model drains it at line rate by asking for one
/// packet per transmission time. EDTs are ignored.
#[derive(Clone, Debug)]
pub struct Pfifo {
    q: BoundedFifo,
}

impl Pfifo {
    /// A FIFO of `capacity` packets (allocated now).
    pub fn new(capacity: usize, overflow: Overflow) -> Self {
        Pfifo {
            q: BoundedFifo::new(capacity, overflow),
        }
    }
}

impl ScheduledBuffer for Pfifo {
    fn name(&self) -> &'static str {
        "pfifo"
    }
    fn probe(&self, _now: Timestamp, _flow: FlowId) -> bool {
        self.q.has_room()
    }
    fn enqueue(
        &mut self,
        _now: Timestamp,
        _edt: Timestamp,
        pkt: PacketRef,
    ) -> Result<(), Rejected> {
        self.q.push(pkt)
    }
    fn dequeue(&mut self, _now: Timestamp, out: &mut [PacketRef]) -> usize {
        let n = out.len().min(self.q.fifo.len());
        for (slot, pkt) in out.iter_mut().zip(self.q.fifo.drain(..n)) {
            *slot = pkt;
        }
        self.q.counters.dequeued += n as u64;
        n
    }
    /// Always due while non-empty: [`Timestamp::ZERO`].
    fn next_due(&self) -> Option<Timestamp> {
        (!self.q.fifo.is_empty()).then_some(Timestamp::ZERO)
    }
    fn len(&self) -> usize {
        self.q.fifo.len()
    }
    fn capacity(&self) -> usize {
        self.q.capacity
    }
    fn overflow(&self) -> Overflow {
        self.q.overflow
    }
    fn counters(&self) -> BufferCounters {
        self.q.counters
    }
}

/// Configuration of a [`TbfBuffer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TbfConfig {
    /// Token rate. Zero sends nothing, whatever the tokens (see [`Rate`]).
    pub rate: Rate,
    /// Bucket depth in bytes (raised to 1).
    pub burst: u32,
    /// Packets the FIFO holds (tbf's `limit`, here in packets as zD's probe counts them).
    pub capacity: usize,
    /// What a full buffer does.
    pub overflow: Overflow,
}

/// A tbf-like shaper: one FIFO of fixed capacity released by a token bucket (zD §5.1's TBF).
///
/// Tokens start full and refill at `rate` up to `burst`, in
/// [`TOKEN_UNITS_PER_BYTE`](crate::token_bucket_rr::TOKEN_UNITS_PER_BYTE) units (exact). The send
/// rule is [`crate::token_bucket_rr`]'s: the head leaves when the rate is above zero and the tokens
/// cover `min(len, burst)`, and then costs `len`, so a packet larger than the burst leaves with a
/// debt instead of being refused as Linux tbf does. EDTs are ignored.
#[derive(Clone, Debug)]
pub struct TbfBuffer {
    q: BoundedFifo,
    bucket: TokenBucket,
}

impl TbfBuffer {
    /// A tbf buffer (FIFO allocated now).
    pub fn new(config: TbfConfig) -> Self {
        TbfBuffer {
            q: BoundedFifo::new(config.capacity, config.overflow),
            bucket: TokenBucket::new(config.rate, config.burst),
        }
    }
}

impl ScheduledBuffer for TbfBuffer {
    fn name(&self) -> &'static str {
        "tbf"
    }
    fn probe(&self, _now: Timestamp, _flow: FlowId) -> bool {
        self.q.has_room()
    }
    fn enqueue(
        &mut self,
        _now: Timestamp,
        _edt: Timestamp,
        pkt: PacketRef,
    ) -> Result<(), Rejected> {
        self.q.push(pkt)
    }
    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        self.bucket.refill(now);
        let n = self.bucket.serve(&mut self.q.fifo, out);
        self.q.counters.dequeued += n as u64;
        n
    }
    /// From the token deficit of the head packet; [`Timestamp::MAX`] at a zero rate.
    fn next_due(&self) -> Option<Timestamp> {
        self.bucket.due(&self.q.fifo)
    }
    fn len(&self) -> usize {
        self.q.fifo.len()
    }
    fn capacity(&self) -> usize {
        self.q.capacity
    }
    fn overflow(&self) -> Overflow {
        self.q.overflow
    }
    fn counters(&self) -> BufferCounters {
        self.q.counters
    }
}

/// Carousel's [`TimingWheel`] with a packet capacity: `probe` is false when it holds `capacity`
/// packets. The wheel's own refusals (beyond the horizon under [`crate::HorizonPolicy::Reject`])
/// are handed back whatever the [`Overflow`].
pub struct CappedWheel {
    wheel: TimingWheel,
    capacity: usize,
    overflow: Overflow,
    counters: BufferCounters,
}

impl CappedWheel {
    /// A wheel of `config` holding at most `capacity` packets; its pool is sized for at least
    /// `capacity` packets so the pool never runs out first.
    pub fn new(config: TimingWheelConfig, capacity: usize, overflow: Overflow) -> Self {
        let config = TimingWheelConfig {
            pool_packets: config.pool_packets.max(capacity),
            ..config
        };
        CappedWheel {
            wheel: TimingWheel::new(config),
            capacity,
            overflow,
            counters: BufferCounters::default(),
        }
    }

    /// The wheel (read only).
    pub fn wheel(&self) -> &TimingWheel {
        &self.wheel
    }
}

impl ScheduledBuffer for CappedWheel {
    fn name(&self) -> &'static str {
        "capped_wheel"
    }
    fn probe(&self, _now: Timestamp, _flow: FlowId) -> bool {
        self.wheel.len() < self.capacity
    }
    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        if self.wheel.len() >= self.capacity {
            return Err(refuse_full(&mut self.counters, self.overflow, pkt));
        }
        match self.wheel.enqueue(now, edt, pkt) {
            Ok(()) => {
                self.counters.enqueued += 1;
                Ok(())
            }
            Err(r) => {
                self.counters.handed_back_other += 1;
                Err(r)
            }
        }
    }
    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        let n = self.wheel.dequeue(now, out);
        self.counters.dequeued += n as u64;
        n
    }
    fn next_due(&self) -> Option<Timestamp> {
        self.wheel.next_due()
    }
    fn len(&self) -> usize {
        self.wheel.len()
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn overflow(&self) -> Overflow {
        self.overflow
    }
    fn counters(&self) -> BufferCounters {
        self.counters
    }
}

/// Configuration of a [`Zd`] controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZdConfig {
    /// Flow indices handled: `0..flows`.
    pub flows: usize,
    /// Order of the paused-flows queue (zD §4.3).
    pub discipline: Discipline,
    /// Packets per flow in the buffer and per turn, 1..=[`MAX_PER_FLOW_LIMIT`] (clamped).
    pub per_flow_limit: u8,
}

impl Default for ZdConfig {
    /// 20 000 flows (zD §4's memory example), FIFO, a limit of 2.
    fn default() -> Self {
        ZdConfig {
            flows: 20_000,
            discipline: Discipline::Fifo,
            per_flow_limit: DEFAULT_PER_FLOW_LIMIT,
        }
    }
}

/// What [`Zd::offer`] did with a packet. Every variant but `Enqueued` hands the packet back.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZdVerdict {
    /// The buffer took the packet.
    Enqueued,
    /// The flow is now paused and appended to the paused-flows queue; the source keeps the packet
    /// (the probe copy was virtually dropped) and offers it again when resumed.
    Paused(PacketRef),
    /// The flow was already paused: the regulator should not have sent. Handed back.
    AlreadyPaused(PacketRef),
    /// The buffer refused the packet for a reason other than room (the wheel's horizon). Handed
    /// back; the flow is not paused.
    Rejected(Rejected),
    /// The buffer was full and is configured with [`Overflow::Drop`]: physically dropped.
    Dropped(PacketRef),
    /// The flow index is beyond the configured flows. Handed back.
    UnknownFlow(PacketRef),
}

/// Named counters of a [`Zd`] controller. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZdCounters {
    /// Calls to `offer`.
    pub offers: u64,
    /// Probes of the buffer.
    pub probes: u64,
    /// Probes that found no room.
    pub probes_refused: u64,
    /// Packets enqueued.
    pub enqueued: u64,
    /// Pauses, all reasons.
    pub paused: u64,
    /// Pauses because the probe found no room (Algorithm 1 lines 3-5).
    pub paused_no_room: u64,
    /// Pauses because the flow held its limit in the buffer (§4.1).
    pub paused_at_limit: u64,
    /// Pauses because the flow had used its turn and others waited (Algorithm 1 lines 9-11).
    pub paused_turn_used: u64,
    /// Offers from a flow already paused.
    pub already_paused: u64,
    /// Flows resumed.
    pub resumed: u64,
    /// Packets handed back to their source (every `ZdVerdict` but `Enqueued` and `Dropped`).
    pub virtual_drops: u64,
    /// Packets physically dropped (only with [`Overflow::Drop`]).
    pub physical_drops: u64,
    /// Packets the buffer refused for a reason other than room.
    pub rejected: u64,
    /// Offers from a flow index beyond the configured flows.
    pub unknown_flow: u64,
    /// Departures of packets zD did not account for (enqueued around it).
    pub untracked_departures: u64,
    /// Turns passed on by [`Zd::pass_turn`].
    pub turns_passed: u64,
}

/// One flow's state in one byte: packets in the buffer (low nibble), packets pushed since it was
/// last resumed (high nibble, saturating at 15).
#[derive(Clone, Copy, Debug, Default)]
struct FlowState(u8);

impl FlowState {
    fn in_buffer(self) -> u8 {
        self.0 & 0x0f
    }
    fn pushed(self) -> u8 {
        self.0 >> 4
    }
    fn with(in_buffer: u8, pushed: u8) -> Self {
        FlowState((in_buffer & 0x0f) | (pushed.min(15) << 4))
    }
}

/// Why a flow is paused.
#[derive(Clone, Copy)]
enum PauseCause {
    NoRoom,
    AtLimit,
    TurnUsed,
}

/// zD's controller over a scheduled buffer (zD Algorithm 1). See the module docs.
///
/// ```
/// use metronome_core::zd::{ZdVerdict, Overflow, Pfifo, ScheduledBuffer, Zd, ZdConfig};
/// use metronome_core::{ClassId, FlowId, PacketRef, Timestamp};
///
/// let mut zd = Zd::new(Pfifo::new(1, Overflow::HandBack), ZdConfig { flows: 4, ..Default::default() });
/// let t = Timestamp::ZERO;
/// let p = |id, f| PacketRef::new(id, FlowId(f), ClassId(0), 1500);
/// assert_eq!(zd.offer(t, t, p(1, 0)), ZdVerdict::Enqueued);
/// assert_eq!(zd.offer(t, t, p(2, 1)), ZdVerdict::Paused(p(2, 1))); // full: flow 1 keeps its packet
/// let (mut out, mut resumed) = ([PacketRef::default(); 4], Vec::new());
/// assert_eq!(zd.dequeue(t, &mut out, &mut resumed), 1);
/// assert_eq!(resumed, vec![FlowId(1)]); // the departure resumed flow 1
/// assert_eq!(zd.offer(t, t, p(2, 1)), ZdVerdict::Enqueued);
/// assert_eq!(zd.counters().physical_drops, 0);
/// ```
pub struct Zd<B: ScheduledBuffer> {
    buffer: B,
    flows: Vec<FlowState>,
    paused: PausedFlows,
    limit: u8,
    counters: ZdCounters,
}

impl<B: ScheduledBuffer> Zd<B> {
    /// A controller in front of `buffer`. Allocates the per-flow state now.
    pub fn new(buffer: B, config: ZdConfig) -> Self {
        let flows = config.flows.min(crate::paused_flows::MAX_FLOWS);
        Zd {
            buffer,
            flows: vec![FlowState::default(); flows],
            paused: PausedFlows::new(flows, config.discipline),
            limit: config.per_flow_limit.clamp(1, MAX_PER_FLOW_LIMIT),
            counters: ZdCounters::default(),
        }
    }

    /// Algorithm 1's `ProcessFlow` for one packet of `pkt.flow` with EDT `edt`.
    pub fn offer(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> ZdVerdict {
        self.counters.offers += 1;
        let i = pkt.flow.0 as usize;
        let Some(&state) = self.flows.get(i) else {
            self.counters.unknown_flow += 1;
            self.counters.virtual_drops += 1;
            return ZdVerdict::UnknownFlow(pkt);
        };
        if self.paused.contains(pkt.flow) {
            self.counters.already_paused += 1;
            self.counters.virtual_drops += 1;
            return ZdVerdict::AlreadyPaused(pkt);
        }
        self.counters.probes += 1;
        if !self.buffer.probe(now, pkt.flow) {
            self.counters.probes_refused += 1;
            return self.pause(edt, pkt, PauseCause::NoRoom);
        }
        if state.in_buffer() >= self.limit {
            return self.pause(edt, pkt, PauseCause::AtLimit);
        }
        if state.pushed() >= self.limit && !self.paused.is_empty() {
            return self.pause(edt, pkt, PauseCause::TurnUsed);
        }
        match self.buffer.enqueue(now, edt, pkt) {
            Ok(()) => {
                self.flows[i] = FlowState::with(state.in_buffer() + 1, state.pushed() + 1);
                self.counters.enqueued += 1;
                ZdVerdict::Enqueued
            }
            Err(r) if r.reason == RejectReason::Full => match self.buffer.overflow() {
                Overflow::Drop => {
                    self.counters.physical_drops += 1;
                    ZdVerdict::Dropped(pkt)
                }
                // The probe said there was room; treat it as a failed probe.
                Overflow::HandBack => self.pause(edt, pkt, PauseCause::NoRoom),
            },
            Err(r) => {
                self.counters.rejected += 1;
                self.counters.virtual_drops += 1;
                ZdVerdict::Rejected(r)
            }
        }
    }

    /// Pauses `pkt.flow` (not yet paused, index in range) and hands `pkt` back.
    fn pause(&mut self, edt: Timestamp, pkt: PacketRef, cause: PauseCause) -> ZdVerdict {
        self.counters.virtual_drops += 1;
        if self.paused.pause(pkt.flow, edt).is_err() {
            // Unreachable: same capacity as `flows`, and paused flows return earlier.
            debug_assert!(false, "pause refused");
            self.counters.unknown_flow += 1;
            return ZdVerdict::UnknownFlow(pkt);
        }
        self.counters.paused += 1;
        match cause {
            PauseCause::NoRoom => self.counters.paused_no_room += 1,
            PauseCause::AtLimit => self.counters.paused_at_limit += 1,
            PauseCause::TurnUsed => self.counters.paused_turn_used += 1,
        }
        ZdVerdict::Paused(pkt)
    }

    /// Releases packets from the buffer into `out` and, for each departure, resumes the head of
    /// the paused-flows queue (Algorithm 1 `ResumeFlow`), appending it to `resumed`. Returns the
    /// number of packets released.
    pub fn dequeue(
        &mut self,
        now: Timestamp,
        out: &mut [PacketRef],
        resumed: &mut impl Extend<FlowId>,
    ) -> usize {
        let n = self.buffer.dequeue(now, out);
        for pkt in &out[..n] {
            match self.flows.get_mut(pkt.flow.0 as usize) {
                Some(s) if s.in_buffer() > 0 => *s = FlowState::with(s.in_buffer() - 1, s.pushed()),
                _ => self.counters.untracked_departures += 1,
            }
            if let Some(f) = self.resume_head() {
                resumed.extend(Some(f));
            }
        }
        n
    }

    /// Pops the head of the paused queue and marks it active with a fresh turn.
    fn resume_head(&mut self) -> Option<FlowId> {
        let f = self.paused.pop()?;
        if let Some(s) = self.flows.get_mut(f.0 as usize) {
            *s = FlowState::with(s.in_buffer(), 0);
        }
        self.counters.resumed += 1;
        Some(f)
    }

    /// A resumed source had nothing to send: its turn passes to the head of the paused queue,
    /// which is resumed and returned.
    pub fn pass_turn(&mut self) -> Option<FlowId> {
        self.counters.turns_passed += 1;
        self.resume_head()
    }

    /// Forgets `flow` in the paused queue (the flow went away); its packets in the buffer stay
    /// counted until they leave. True if it was paused.
    pub fn close(&mut self, flow: FlowId) -> bool {
        self.paused.remove(flow)
    }

    /// True if `flow` is paused.
    pub fn is_paused(&self, flow: FlowId) -> bool {
        self.paused.contains(flow)
    }

    /// Packets of `flow` in the buffer.
    pub fn in_buffer(&self, flow: FlowId) -> u8 {
        self.flows.get(flow.0 as usize).map_or(0, |s| s.in_buffer())
    }

    /// The buffer's next deadline.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.buffer.next_due()
    }

    /// The scheduled buffer (read only: enqueueing around zD would break its accounting).
    pub fn buffer(&self) -> &B {
        &self.buffer
    }

    /// The paused-flows queue (read only).
    pub fn paused_flows(&self) -> &PausedFlows {
        &self.paused
    }

    /// Flows paused now.
    pub fn paused_len(&self) -> usize {
        self.paused.len()
    }

    /// The per-flow limit in use.
    pub fn per_flow_limit(&self) -> u8 {
        self.limit
    }

    /// zD's counters.
    pub fn counters(&self) -> ZdCounters {
        self.counters
    }

    /// The paused-flows queue's counters.
    pub fn paused_counters(&self) -> PausedCounters {
        self.paused.counters()
    }

    /// Bytes of per-flow state: one byte here plus the paused-flows queue's 8.
    pub const fn bytes_per_flow() -> usize {
        1 + PausedFlows::bytes_per_flow()
    }

    /// Bytes of control state (per-flow bytes and the paused queue's buckets), buffer excluded.
    pub fn memory_bytes(&self) -> usize {
        self.flows.capacity() + self.paused.memory_bytes()
    }

    /// Checks the invariants (walks every flow: for tests).
    pub fn invariants(&self) {
        self.paused.invariants();
        let held: usize = self.flows.iter().map(|s| usize::from(s.in_buffer())).sum();
        if self.counters.untracked_departures == 0 {
            assert_eq!(held, self.buffer.len(), "per-flow counts vs buffer");
        }
        assert!(self.flows.iter().all(|s| s.in_buffer() <= self.limit));
        assert!(self.buffer.len() <= self.buffer.capacity());
    }
}

#[cfg(test)]
mod tests;
