//! The event loop: sources, shaper, NIC, path and receivers wired together (Carousel §5.2,
//! Figure 11; zD §4, Figure 6). The backpressure modes differ in where the completion happens: at
//! enqueue (`None`, `DelayBased`, Figure 11a), at release (`DeferredCompletions`, Figure 11b,
//! [`metronome_core::completions::InFlight`]), at NIC transmit (`Tsq`, zD §5.1), or not at all
//! (`Zd`, [`metronome_core::zd::Zd`]). A physical drop is a network loss to TCP, a virtual drop
//! leaves the segment at the source. Nothing allocates per packet. A packet's life step by step:
//! ARCHITECTURE.md, "The event loop".

use crate::event::{Ack, Event, EventQueue};
use crate::flows::{Slab, TcpFlows};
use crate::host::{Flow, Rng, Transport, DELAYED_ACK_TIMEOUT};
use crate::metrics::Metrics;
use crate::report::{DropReport, ShaperReport, SimReport, Speed};
use crate::scenario::{BackpressureMode, Scenario, ScenarioError, SourceKind};
use crate::shaper::{Shaper, Verdict};
use crate::tcp::TcpSender;
use metronome_core::completions::InFlight;
use metronome_core::{ClassId, Duration, FlowId, PacketRef, Rate, Timestamp};
use std::collections::VecDeque;

/// How long a source waits before offering again a packet the shaper handed back without pausing
/// it (only a horizon refusal under zD): 1 ms, a few packet times at 1–10 Gbit/s.
const HANDED_BACK_RETRY: Duration = Duration::from_millis(1);

/// One packet's descriptor, owned by the simulator; the shaper holds its index.
#[derive(Clone, Copy, Debug, Default)]
struct Desc {
    flow: u32,
    seq: u32,
    mtus: u32,
    bytes: u32,
    sent_at: Timestamp,
    ce: bool,
}

/// Where a packet's completion is produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CompletionPoint {
    AtEnqueue,
    AtRelease,
    AtTransmit,
    Zd,
}

/// The whole simulated system.
pub(crate) struct Sim<'a> {
    sc: &'a Scenario,
    q: EventQueue,
    flows: Vec<Flow>,
    descs: Slab<Desc>,
    shaper: Shaper,
    inflight: Option<InFlight>,
    completion: CompletionPoint,
    nic_busy: bool,
    nic_pkt: u32,
    poll_at: Option<Timestamp>,
    ready: VecDeque<u32>,
    resumed: Vec<FlowId>,
    metrics: Metrics,
    line: Rate,
    pacing: Option<Rate>,
    half_rtt: Duration,
    mtu: u32,
    seg_mtus: u32,
    end: Timestamp,
    physical_drops: u64,
    ce_marked: u64,
    packets_sent: u64,
    /// The sparse flow's index (`sc.flows`) and its request size, when the scenario has one.
    probe: Option<(u32, u32)>,
    probe_lost: u64,
}

impl<'a> Sim<'a> {
    /// Builds the system of a validated scenario.
    pub(crate) fn new(sc: &'a Scenario) -> Result<Self, ScenarioError> {
        let zd = match sc.backpressure {
            BackpressureMode::Zd { discipline } => Some(discipline),
            _ => None,
        };
        let ect = matches!(sc.source, SourceKind::Tcp(cc) if cc.ecn_capable());
        let probe = sc.probe.map(|p| (sc.flows, p.request_bytes));
        let total = sc.flows + u32::from(probe.is_some());
        let shaper = Shaper::new(&sc.shaper, total, sc.segment_bytes(), zd, ect)?;
        let (completion, limit) = match sc.backpressure {
            BackpressureMode::None | BackpressureMode::DelayBased => {
                (CompletionPoint::AtEnqueue, 0)
            }
            BackpressureMode::DeferredCompletions { limit } => (CompletionPoint::AtRelease, limit),
            BackpressureMode::Tsq { limit } => (CompletionPoint::AtTransmit, limit),
            BackpressureMode::Zd { .. } => (CompletionPoint::Zd, 0),
        };
        let limit = u16::try_from(limit).map_err(|_| ScenarioError::OutOfRange {
            field: "backpressure.limit",
            why: "at most 65535",
        })?;
        let inflight = matches!(
            completion,
            CompletionPoint::AtRelease | CompletionPoint::AtTransmit
        )
        .then(|| InFlight::new(total as usize, limit));
        let tr = &sc.transport;
        let rto_min = Duration::from_nanos(tr.rto_min_ns);
        let seg_bytes = u64::from(sc.segment_bytes());
        let line = Rate::from_bps(sc.line_rate_bps);
        let flows = (0..total)
            .map(|f| {
                let transport = match sc.source {
                    _ if f == sc.flows => Transport::Udp {
                        interval: Duration::from_nanos(sc.probe.map_or(1, |p| p.interval_ns)),
                        backlog: 0,
                        next_seq: 0,
                    },
                    SourceKind::Tcp(cc) => {
                        Transport::Tcp(Box::new(TcpSender::new(cc, tr.initial_cwnd, rto_min)))
                    }
                    SourceKind::Udp { rate_bps } => Transport::Udp {
                        interval: rate_bps
                            .map_or(line, Rate::from_bps)
                            .transmit_time(seg_bytes),
                        backlog: 0,
                        next_seq: 0,
                    },
                };
                Flow::new(transport, Rng::for_flow(sc.seed, f))
            })
            .collect();
        let measured = sc.duration_ns - sc.warmup_ns;
        let windows = (measured / sc.window_ns) as usize;
        let capacity = (sc.flows as usize * 4).max(1024);
        Ok(Sim {
            sc,
            q: EventQueue::with_capacity(capacity),
            flows,
            descs: Slab::with_capacity(shaper.capacity().min(1 << 20) + capacity),
            shaper,
            inflight,
            completion,
            nic_busy: false,
            nic_pkt: 0,
            poll_at: None,
            ready: VecDeque::with_capacity(total as usize),
            resumed: Vec::with_capacity(16),
            metrics: Metrics::new(
                Timestamp::from_nanos(sc.warmup_ns),
                Duration::from_nanos(sc.window_ns),
                windows,
                total as usize,
            ),
            line,
            pacing: tr.pacing_bps.map(Rate::from_bps),
            half_rtt: Duration::from_nanos(sc.base_rtt_ns / 2),
            mtu: tr.mtu,
            seg_mtus: tr.tso_segments,
            end: Timestamp::from_nanos(sc.duration_ns),
            physical_drops: 0,
            ce_marked: 0,
            packets_sent: 0,
            probe,
            probe_lost: 0,
        })
    }

    /// Runs to the end of the scenario.
    pub(crate) fn run(&mut self) {
        let sc = self.sc;
        for f in 0..self.flows.len() as u32 {
            let start = self.flows[f as usize].rng.below(sc.start_spread_ns);
            self.q
                .schedule(Timestamp::from_nanos(start), Event::FlowStart(f));
        }
        self.q.schedule(self.end, Event::End);
        let first_window = sc.warmup_ns + sc.window_ns;
        if first_window <= sc.duration_ns {
            self.q
                .schedule(Timestamp::from_nanos(first_window), Event::Window);
        }
        while let Some((now, ev)) = self.q.pop() {
            if ev == Event::End {
                break;
            }
            self.handle(now, ev);
            while let Some(f) = self.ready.pop_front() {
                self.flows[f as usize].ready = false;
                self.try_send(f, now);
            }
        }
    }

    fn handle(&mut self, now: Timestamp, ev: Event) {
        match ev {
            Event::FlowStart(f) => {
                self.flows[f as usize].started = true;
                if let Transport::Udp { interval, .. } = self.flows[f as usize].transport {
                    self.q.schedule(now + interval, Event::UdpTick(f));
                    self.udp_generate(f);
                }
                self.try_send(f, now);
            }
            Event::SourceWake(f) => {
                let fl = &mut self.flows[f as usize];
                if fl.wake_at == Some(now) {
                    fl.wake_at = None;
                }
                self.try_send(f, now);
            }
            Event::UdpTick(f) => {
                if let Transport::Udp { interval, .. } = self.flows[f as usize].transport {
                    self.q.schedule(now + interval, Event::UdpTick(f));
                }
                self.udp_generate(f);
                self.try_send(f, now);
            }
            Event::Rto(f) => self.timer_event(f, now),
            Event::DelAck(f) => {
                if let Some(ack) = self.flows[f as usize].rx.on_delack_timer(f) {
                    self.q.push_ack(now + self.half_rtt, ack);
                }
            }
            Event::ShaperPoll => {
                if self.poll_at == Some(now) {
                    self.poll_at = None;
                }
                self.kick(now);
            }
            Event::NicDone => self.on_nic_done(now),
            Event::Window => {
                self.metrics.close_window();
                let next = now + Duration::from_nanos(self.sc.window_ns);
                if next <= self.end {
                    self.q.schedule(next, Event::Window);
                }
            }
            Event::Arrive(id) => self.on_arrive(id, now),
            Event::AckArrive(ack) => self.on_ack(ack, now),
            Event::End => {}
        }
    }

    fn mark_ready(&mut self, f: u32) {
        let fl = &mut self.flows[f as usize];
        if !fl.ready {
            fl.ready = true;
            self.ready.push_back(f);
        }
    }

    fn udp_generate(&mut self, f: u32) {
        let cap = self.sc.transport.sndbuf_mtus / self.seg_mtus.max(1);
        let fl = &mut self.flows[f as usize];
        if let Transport::Udp { backlog, .. } = &mut fl.transport {
            if *backlog < cap.max(1) {
                *backlog += 1;
            } else {
                fl.source_drops += 1;
            }
        }
    }

    /// The next segment `(seq, mtus)` the flow's transport wants to send, if any.
    fn next_segment(&self, f: usize) -> Option<(u32, u32)> {
        match &self.flows[f].transport {
            Transport::Tcp(tcp) => {
                if tcp.retx_pending {
                    let n = tcp
                        .high_tx
                        .saturating_sub(tcp.snd_una)
                        .clamp(1, self.seg_mtus);
                    return Some((tcp.snd_una, n));
                }
                let room = tcp.window_room(self.sc.transport.sndbuf_mtus);
                (room > 0).then(|| (tcp.snd_nxt, room.min(self.seg_mtus)))
            }
            Transport::Udp {
                backlog, next_seq, ..
            } => (*backlog > 0).then_some((*next_seq, self.seg_mtus)),
        }
    }

    /// Sends what the flow may send now (the source buffer regulator of zD §4.1).
    fn try_send(&mut self, f: u32, now: Timestamp) {
        let fi = f as usize;
        if !self.flows[fi].started {
            return;
        }
        let mut offered = false;
        loop {
            let fl = &self.flows[fi];
            if fl.paused {
                break;
            }
            if let Some(inf) = &self.inflight {
                if !inf.can_send(FlowId(f)) {
                    break;
                }
            }
            let Some((seq, mtus)) = self.next_segment(fi) else {
                break;
            };
            if fl.next_send > now {
                self.schedule_wake(fi, fl.next_send);
                break;
            }
            offered = true;
            if !self.offer(f, seq, mtus, now) {
                break;
            }
        }
        let fl = &mut self.flows[fi];
        if fl.resumed_turn && (offered || fl.paused) {
            fl.resumed_turn = false;
        }
        if fl.resumed_turn {
            // A resumed flow with nothing to offer passes its turn (zD §4.2's contract).
            fl.resumed_turn = false;
            if let Some(g) = self.shaper.pass_turn() {
                self.resume(g);
            }
        }
    }

    /// Offers one segment to the shaper; false when the flow must stop sending for now.
    fn offer(&mut self, f: u32, seq: u32, mtus: u32, now: Timestamp) -> bool {
        let bytes = self.segment_bytes(f, mtus);
        let ce = self
            .sc
            .ecn_threshold_packets
            .is_some_and(|thr| self.shaper.len() >= thr as usize);
        let id = self.descs.alloc(Desc {
            flow: f,
            seq,
            mtus,
            bytes,
            sent_at: now,
            ce,
        });
        // `bytes` <= MAX_SEGMENT_BYTES, checked by `Scenario::validate`.
        let pkt = PacketRef::new(id, FlowId(f), ClassId(0), bytes as u16);
        let admit = self.shaper.offer(now, pkt);
        self.flows[f as usize].resumed_turn = false;
        match admit {
            Verdict::Enqueued => {
                self.ce_marked += u64::from(ce);
                if let (Some(inf), CompletionPoint::AtRelease | CompletionPoint::AtTransmit) =
                    (&mut self.inflight, self.completion)
                {
                    inf.sent(FlowId(f));
                }
                self.on_segment_sent(f, seq, mtus, now);
                self.kick(now);
                true
            }
            Verdict::Dropped => {
                // Lost: freed at once (its completion), found out by TCP as a network loss.
                self.descs.release(id);
                self.physical_drops += 1;
                if self.probe.is_some_and(|(p, _)| p == f) {
                    self.probe_lost += 1;
                }
                self.on_segment_sent(f, seq, mtus, now);
                true
            }
            Verdict::Paused => {
                self.descs.release(id);
                self.flows[f as usize].paused = true;
                false
            }
            Verdict::HandedBack => {
                self.descs.release(id);
                self.schedule_wake(f as usize, now + HANDED_BACK_RETRY);
                false
            }
        }
    }

    /// Bytes of a segment of `mtus` MTUs of flow `f`: the sparse flow's requests are smaller.
    fn segment_bytes(&self, f: u32, mtus: u32) -> u32 {
        match self.probe {
            Some((p, bytes)) if p == f => bytes,
            _ => mtus * self.mtu,
        }
    }

    /// Transport bookkeeping for a segment that left the source (accepted or physically lost).
    fn on_segment_sent(&mut self, f: u32, seq: u32, mtus: u32, now: Timestamp) {
        self.packets_sent += 1;
        let bytes = self.segment_bytes(f, mtus);
        // The transport's pacing paces the bulk flows; the sparse flow keeps its own interval.
        let paced = self
            .pacing
            .filter(|_| self.probe.is_none_or(|(p, _)| p != f));
        let fl = &mut self.flows[f as usize];
        if let Some(p) = paced {
            fl.next_send = fl.next_send.max(now) + p.transmit_time(u64::from(bytes));
        }
        if let Transport::Udp {
            backlog, next_seq, ..
        } = &mut fl.transport
        {
            *backlog -= 1;
            *next_seq += mtus;
        } else {
            self.segment_sent(f, now, seq, mtus);
        }
    }

    fn schedule_wake(&mut self, f: usize, t: Timestamp) {
        let fl = &mut self.flows[f];
        if fl.wake_at.is_none_or(|w| t < w) {
            fl.wake_at = Some(t);
            self.q.schedule(t, Event::SourceWake(f as u32));
        }
    }

    fn resume(&mut self, f: FlowId) {
        let fl = &mut self.flows[f.0 as usize];
        fl.paused = false;
        fl.resumed_turn = true;
        self.mark_ready(f.0);
    }

    /// Lets an idle NIC take the shaper's next due packet, or schedules the poll for it.
    fn kick(&mut self, now: Timestamp) {
        if self.nic_busy {
            return;
        }
        let Some(due) = self.shaper.next_due() else {
            return;
        };
        let pkt = if due <= now {
            self.shaper.dequeue_one(now, &mut self.resumed)
        } else {
            None
        };
        for i in 0..self.resumed.len() {
            let g = self.resumed[i];
            self.resume(g);
        }
        self.resumed.clear();
        match pkt {
            Some((pkt, ce)) => {
                if ce {
                    self.descs.get_mut(pkt.id).ce = true;
                }
                self.start_tx(now, pkt)
            }
            None => {
                let t = self
                    .shaper
                    .poll_time(now)
                    .unwrap_or(now)
                    .max(now + Duration::from_nanos(1));
                if self.poll_at.is_none_or(|p| t < p) {
                    self.poll_at = Some(t);
                    self.q.schedule(t, Event::ShaperPoll);
                }
            }
        }
    }

    fn start_tx(&mut self, now: Timestamp, pkt: PacketRef) {
        debug_assert!(
            self.shaper.len() < self.shaper.capacity(),
            "shaper over capacity"
        );
        debug_assert!(!self.nic_busy, "NIC took two packets");
        let d = self.descs.get(pkt.id);
        self.metrics
            .on_dequeue(now, self.shaper.len(), now.saturating_since(d.sent_at));
        if self.completion == CompletionPoint::AtRelease {
            self.complete(d.flow);
        }
        self.nic_busy = true;
        self.nic_pkt = pkt.id;
        let done = now + self.line.transmit_time(u64::from(d.bytes));
        self.q.schedule(done, Event::NicDone);
    }

    fn complete(&mut self, f: u32) {
        if let Some(inf) = &mut self.inflight {
            inf.completed(FlowId(f));
        }
        self.mark_ready(f);
    }

    fn on_nic_done(&mut self, now: Timestamp) {
        self.nic_busy = false;
        let id = self.nic_pkt;
        let d = self.descs.get(id);
        self.metrics.on_transmit(now, u64::from(d.bytes));
        if self.metrics.measuring(now) {
            self.flows[d.flow as usize].bytes_measured += u64::from(d.bytes);
        }
        if self.completion == CompletionPoint::AtTransmit {
            self.complete(d.flow);
        }
        self.q.push_arrival(now + self.half_rtt, id);
        self.kick(now);
    }

    fn on_arrive(&mut self, id: u32, now: Timestamp) {
        let d = self.descs.get(id);
        self.descs.release(id);
        if self.probe.is_some_and(|(p, _)| p == d.flow) {
            // The response returns on the unshaped reverse path, base RTT / 2.
            let answered = now + self.half_rtt;
            self.metrics
                .on_probe(answered, answered.saturating_since(d.sent_at));
            return;
        }
        let delayed = self.sc.transport.delayed_ack;
        let fl = &mut self.flows[d.flow as usize];
        let before = fl.rx.rcv_nxt;
        let ack = fl
            .rx
            .on_data(d.flow, d.seq, d.mtus, d.sent_at, d.ce, delayed);
        let advanced = fl.rx.rcv_nxt - before;
        self.metrics.delivered_bytes += u64::from(advanced) * u64::from(self.mtu);
        if let Transport::Udp { .. } = fl.transport {
            return;
        }
        match ack {
            Some(ack) => self.q.push_ack(now + self.half_rtt, ack),
            None if !fl.rx.delack_armed => {
                fl.rx.delack_armed = true;
                self.q
                    .schedule(now + DELAYED_ACK_TIMEOUT, Event::DelAck(d.flow));
            }
            None => {}
        }
    }

    fn on_ack(&mut self, ack: Ack, now: Timestamp) {
        let f = ack.flow;
        let Some(out) = self.ack_arrived(now, &ack) else {
            return;
        };
        if let Some(rtt) = out.rtt {
            self.metrics.on_rtt(now, rtt);
        }
        if let Transport::Tcp(tcp) = &mut self.flows[f as usize].transport {
            let metrics = &mut self.metrics;
            tcp.take_delivered(now, |d| metrics.on_delivery(now, f, d));
        }
        self.try_send(f, now);
    }

    /// The report of the finished run, with `wall` the wall time it took.
    pub(crate) fn report(&self, wall: std::time::Duration) -> SimReport {
        let sc = self.sc;
        let mut drops = DropReport {
            physical: self.physical_drops,
            ce_marked: self.ce_marked + self.shaper.ce_marked(),
            ..Default::default()
        };
        if let Some(z) = self.shaper.zd_counters() {
            drops.virtual_drops = z.virtual_drops;
            drops.resumes = z.resumed;
            drops.physical += z.physical_drops;
        }
        for fl in &self.flows {
            drops.source += fl.source_drops;
            if let Transport::Tcp(tcp) = &fl.transport {
                let c = tcp.counters;
                drops.retransmissions += c.retransmits;
                drops.fast_retransmits += c.fast_retransmits;
                drops.timeouts += c.timeouts;
                drops.ecn_reductions += c.ecn_reductions;
            }
        }
        let sh = self.shaper.counters();
        let shaper = ShaperReport {
            name: self.shaper.name().to_string(),
            capacity: self.shaper.capacity() as u64,
            held: self.metrics.held(),
            enqueued: sh.enqueued,
            released: sh.released,
            operations_per_packet: sh.operations as f64 / sh.released.max(1) as f64,
        };
        let measured = Duration::from_nanos(sc.duration_ns - sc.warmup_ns);
        let throughput = self.metrics.throughput(
            sc.target_rate().bps() as f64,
            self.flows
                .iter()
                .take(sc.flows as usize)
                .map(|f| f.bytes_measured),
            measured,
            sc.per_flow_report,
        );
        let events = self.q.popped();
        let secs = wall.as_secs_f64().max(1e-9);
        SimReport {
            scenario: sc.clone(),
            throughput,
            shaper,
            drops,
            rtt: self.metrics.rtt(),
            delivery_latency: self.metrics.delivery_latency(),
            flow_delivery_latency: self.metrics.flow_delivery_latency(
                self.end,
                self.flows.iter().map(|fl| match &fl.transport {
                    Transport::Tcp(tcp) => tcp.oldest_unacked_sent(),
                    Transport::Udp { .. } => None,
                }),
            ),
            queueing_delay: self.metrics.queueing_delay(),
            probe_latency: self.metrics.probe_latency(),
            probe_lost: self.probe_lost,
            events,
            packets_sent: self.packets_sent,
            speed: Speed {
                wall_seconds: wall.as_secs_f64(),
                events_per_second: events as f64 / secs,
                speedup: sc.duration_ns as f64 / 1e9 / secs,
            },
        }
    }
}

impl TcpFlows for Sim<'_> {
    fn sender(&mut self, f: u32) -> Option<&mut TcpSender> {
        match &mut self.flows[f as usize].transport {
            Transport::Tcp(tcp) => Some(tcp.as_mut()),
            Transport::Udp { .. } => None,
        }
    }

    fn schedule_timer(&mut self, f: u32, at: Timestamp) {
        self.q.schedule(at, Event::Rto(f));
    }

    fn send_more(&mut self, f: u32, now: Timestamp) {
        self.try_send(f, now);
    }
}
