//! Incast at a receiver, and Carousel's receiver-side ACK shaping (Carousel §6, §7.1.4, Figure 19):
//! `senders` machines of `flows_per_sender` TCP flows, one switch, one receiver behind the
//! bottleneck port, which must take `target_bps` in aggregate ([`IncastMode`]: ACK shaping through
//! [`metronome_core::ack_shaping::AckShaper`], an ingress queue draining at the target, or
//! unshaped). The receiver's advertised window (`rwnd_mtus`) is what turns slower ACKs into a
//! slower sender. Measured: goodput windows, port queue and delay, drops, RTT, bytes held.
//!
//! Where it departs from the paper: Cubic or Reno with RFC 3168 ECN instead of DCTCP, and
//! acknowledgements rounded down to whole MTUs (`rounded`). The topology and the reasons:
//! `docs/design/carousel.md`.

use crate::event::Ack;
use crate::flows::{Slab, TcpFlows};
use crate::host::{Receiver, Rng};
use crate::metrics::Metrics;
use crate::report::{CountSummary, LatencySummary, ThroughputReport};
use crate::scenario::{CongestionControl, LINUX_RTO_MIN};
use crate::tcp::TcpSender;
use metronome_core::ack_shaping::{
    AckAction, AckRate, AckShaper, AckShapingConfig, FlowHandle, GeneratedAck, SegmentKind,
};
use metronome_core::{Duration, Rate, Timestamp};
use serde::Serialize;
use std::collections::VecDeque;

mod queue;

use queue::{Ev, EventHeap};

/// Generated ACKs taken per poll call; the loop calls until fewer come back, so the value changes
/// speed, never results.
const POLL_BATCH: usize = 64;

/// How the receiver is held to its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IncastMode {
    /// Carousel §6: ACKs released at the target rate; the port runs at line rate.
    AckShaping,
    /// The port toward the receiver drains at the target; data queues there.
    IngressQueue,
    /// No limit: the port runs at line rate.
    Unshaped,
}

impl IncastMode {
    /// The mode called `name` (`ack-shaping`, `ingress-queue`, `unshaped`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "ack-shaping" => Some(IncastMode::AckShaping),
            "ingress-queue" => Some(IncastMode::IngressQueue),
            "unshaped" => Some(IncastMode::Unshaped),
            _ => None,
        }
    }
}

/// The parameters of one incast run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct IncastScenario {
    /// Sending machines (Carousel §7.1.4: 10).
    pub senders: u32,
    /// TCP flows per machine (Carousel §7.1.4: 10).
    pub flows_per_sender: u32,
    /// Every NIC and the switch port, bit/s.
    pub line_rate_bps: u64,
    /// The aggregate rate the receiver should take, bit/s.
    pub target_bps: u64,
    /// How the target is enforced.
    pub mode: IncastMode,
    /// Unloaded RTT, ns (Carousel §7.1.4: about 10 µs).
    pub base_rtt_ns: u64,
    /// Packet size, bytes (Carousel §7.1.4: 1500).
    pub mtu: u32,
    /// Packets the switch port toward the receiver holds; more are dropped.
    pub port_buffer_packets: u32,
    /// CE marking above this many queued packets, if any.
    pub ecn_threshold_packets: Option<u32>,
    /// The receiver's advertised window, MTUs.
    pub rwnd_mtus: u32,
    /// Initial congestion window, MTUs.
    pub initial_cwnd: u32,
    /// Minimum RTO, ns.
    pub rto_min_ns: u64,
    /// The senders' congestion control.
    pub cc: CongestionControl,
    /// Bytes of allowance an ACK-shaped flow may bank (ACK shaping's burst).
    pub ack_burst_bytes: u32,
    /// Run length, ns.
    pub duration_ns: u64,
    /// Not measured before this, ns.
    pub warmup_ns: u64,
    /// Goodput sample window, ns.
    pub window_ns: u64,
    /// Flows start at uniform random times in `[0, start_spread_ns)`.
    pub start_spread_ns: u64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Default for IncastScenario {
    /// Carousel §7.1.4's set-up at 2 Gbit/s on a 10 Gbit/s link, 0.2 s long.
    fn default() -> Self {
        IncastScenario {
            senders: 10,
            flows_per_sender: 10,
            line_rate_bps: 10_000_000_000,
            target_bps: 2_000_000_000,
            mode: IncastMode::AckShaping,
            base_rtt_ns: 10_000,
            mtu: 1500,
            port_buffer_packets: 1000,
            ecn_threshold_packets: Some(65),
            rwnd_mtus: 44,
            initial_cwnd: 10,
            rto_min_ns: LINUX_RTO_MIN.as_nanos(),
            cc: CongestionControl::Cubic,
            ack_burst_bytes: 1500,
            duration_ns: 200_000_000,
            warmup_ns: 50_000_000,
            window_ns: 10_000_000,
            start_spread_ns: 100_000,
            seed: 1,
        }
    }
}

/// Why a scenario cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("incast scenario: `{field}` {why}")]
pub struct IncastError {
    /// The offending parameter.
    pub field: &'static str,
    /// What is wrong with it.
    pub why: &'static str,
}

impl IncastScenario {
    /// Total flows.
    pub fn flows(&self) -> u32 {
        self.senders * self.flows_per_sender
    }

    /// Checks that the simulator can run this.
    pub fn validate(&self) -> Result<(), IncastError> {
        let bad = |field, why| Err(IncastError { field, why });
        if self.senders == 0 || self.flows_per_sender == 0 || self.flows() > 100_000 {
            return bad("senders", "x flows_per_sender must be 1..=100000");
        }
        if self.target_bps == 0 || self.line_rate_bps == 0 {
            return bad("target_bps", "and line_rate_bps must be above 0");
        }
        if !(64..=9000).contains(&self.mtu) {
            return bad("mtu", "must be 64..=9000 bytes");
        }
        if self.port_buffer_packets == 0 || self.rwnd_mtus == 0 || self.initial_cwnd == 0 {
            return bad(
                "port_buffer_packets",
                "rwnd_mtus and initial_cwnd must be at least 1",
            );
        }
        if self.window_ns == 0 || self.warmup_ns + self.window_ns > self.duration_ns {
            return bad("window_ns", "must be above 0 and fit after the warm-up");
        }
        if self.duration_ns > 100_000_000_000 {
            return bad("duration_ns", "must be at most 100 s");
        }
        Ok(())
    }
}

/// ACK-shaping counters of a run (see [`metronome_core::ack_shaping::AckShapingCounters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AckReport {
    /// ACKs sent with a lower number than the receiver wrote.
    pub rewritten: u64,
    /// ACKs sent unchanged.
    pub passthrough: u64,
    /// Would-be duplicate ACKs not sent.
    pub suppressed: u64,
    /// ACKs generated when due.
    pub generated: u64,
    /// ACKs not sent because rounding to whole MTUs left them equal to the last one.
    pub rounded: u64,
    /// ACKs of flows that found the shaper's table full.
    pub table_full: u64,
}

/// What an incast run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IncastReport {
    /// Goodput at the receiver against the target.
    pub throughput: ThroughputReport,
    /// `|mean goodput - target| / target`, percent.
    pub aggregate_deviation_pct: f64,
    /// Packets queued at the port toward the receiver, sampled at each arrival.
    pub port_queue: CountSummary,
    /// Time packets waited at that port.
    pub queueing_delay: LatencySummary,
    /// The senders' RTT samples (echoed timestamps).
    pub rtt: LatencySummary,
    /// Packets the port dropped (buffer full).
    pub drops: u64,
    /// Packets marked CE.
    pub ce_marked: u64,
    /// Retransmitted segments.
    pub retransmissions: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Most bytes the receiver held received but unacknowledged, all flows, after the warm-up.
    pub held_at_receiver_max_bytes: u64,
    /// ACK shaping's counters (zero in the other modes).
    pub acks: AckReport,
    /// Events simulated.
    pub events: u64,
}

/// A data packet in flight.
#[derive(Clone, Copy, Debug, Default)]
struct Desc {
    flow: u32,
    seq: u32,
    sent_at: Timestamp,
    ce: bool,
}

/// One flow: its sender, its receiver and the ACK state between them.
struct Flow {
    tcp: TcpSender,
    rx: Receiver,
    machine: u32,
    /// Highest acknowledgement (MTUs) sent toward the sender.
    ack_sent: u32,
    /// Echo of the latest segment, for generated ACKs.
    ts_echo: Timestamp,
    /// ECE to carry on the next ACK sent (a suppressed ACK does not lose it).
    ece_pending: bool,
    bytes_measured: u64,
}

/// Runs `sc` to its end.
pub fn run_incast(sc: &IncastScenario) -> Result<IncastReport, IncastError> {
    sc.validate()?;
    let mut sim = IncastSim::new(sc)?;
    sim.run();
    Ok(sim.report())
}

struct IncastSim<'a> {
    sc: &'a IncastScenario,
    q: EventHeap,
    flows: Vec<Flow>,
    descs: Slab<Desc>,
    nic_free: Vec<Timestamp>,
    port_departures: VecDeque<Timestamp>,
    port_last: Timestamp,
    port_rate: Rate,
    line: Rate,
    shaper: Option<AckShaper>,
    generated: [GeneratedAck; POLL_BATCH],
    poll_at: Option<Timestamp>,
    metrics: Metrics,
    quarter_rtt: Duration,
    half_rtt: Duration,
    end: Timestamp,
    held_mtus: u64,
    held_max_mtus: u64,
    drops: u64,
    ce_marked: u64,
    rounded: u64,
}

impl<'a> IncastSim<'a> {
    fn new(sc: &'a IncastScenario) -> Result<Self, IncastError> {
        let n = sc.flows();
        let rto_min = Duration::from_nanos(sc.rto_min_ns);
        let flows = (0..n)
            .map(|f| Flow {
                tcp: TcpSender::new(sc.cc, sc.initial_cwnd, rto_min),
                rx: Receiver::default(),
                machine: f % sc.senders,
                ack_sent: 0,
                ts_echo: Timestamp::ZERO,
                ece_pending: false,
                bytes_measured: 0,
            })
            .collect();
        let target = Rate::from_bps(sc.target_bps);
        let line = Rate::from_bps(sc.line_rate_bps);
        let shaper = match sc.mode {
            IncastMode::AckShaping => {
                let cfg = AckShapingConfig {
                    mtu: sc.mtu,
                    burst: sc.ack_burst_bytes,
                    ..AckShapingConfig::new(AckRate::Shared(target), n)
                };
                Some(AckShaper::new(cfg).map_err(|_| IncastError {
                    field: "target_bps",
                    why: "is not a valid ACK-shaping rate",
                })?)
            }
            _ => None,
        };
        let windows = ((sc.duration_ns - sc.warmup_ns) / sc.window_ns) as usize;
        let buffer = sc.port_buffer_packets as usize;
        Ok(IncastSim {
            sc,
            q: EventHeap::with_capacity(n as usize * 4 + buffer),
            flows,
            descs: Slab::with_capacity(n as usize * sc.rwnd_mtus as usize + buffer),
            nic_free: vec![Timestamp::ZERO; sc.senders as usize],
            port_departures: VecDeque::with_capacity(buffer),
            port_last: Timestamp::ZERO,
            port_rate: if sc.mode == IncastMode::IngressQueue {
                target
            } else {
                line
            },
            line,
            shaper,
            generated: [GeneratedAck {
                flow: FlowHandle(0),
                key: 0,
                ack: 0,
            }; POLL_BATCH],
            poll_at: None,
            metrics: Metrics::new(
                Timestamp::from_nanos(sc.warmup_ns),
                Duration::from_nanos(sc.window_ns),
                windows,
                n as usize,
            ),
            quarter_rtt: Duration::from_nanos(sc.base_rtt_ns / 4),
            half_rtt: Duration::from_nanos(sc.base_rtt_ns / 2),
            end: Timestamp::from_nanos(sc.duration_ns),
            held_mtus: 0,
            held_max_mtus: 0,
            drops: 0,
            ce_marked: 0,
            rounded: 0,
        })
    }

    fn run(&mut self) {
        let sc = self.sc;
        for f in 0..sc.flows() {
            let start = Rng::for_flow(sc.seed, f).below(sc.start_spread_ns.max(1));
            self.q.schedule(Timestamp::from_nanos(start), Ev::Start(f));
        }
        self.q.schedule(self.end, Ev::End);
        self.q.schedule(
            Timestamp::from_nanos(sc.warmup_ns + sc.window_ns),
            Ev::Window,
        );
        while let Some((now, ev)) = self.q.pop() {
            match ev {
                Ev::End => break,
                Ev::Start(f) => self.try_send(f, now),
                Ev::Rto(f) => self.timer_event(f, now),
                Ev::AtPort(id) => self.at_port(id, now),
                Ev::AtReceiver(id) => self.at_receiver(id, now),
                Ev::AckAtSender(ack) => self.at_sender(ack, now),
                Ev::AckPoll => self.on_poll(now),
                Ev::Window => {
                    self.metrics.close_window();
                    let next = now + Duration::from_nanos(sc.window_ns);
                    if next <= self.end {
                        self.q.schedule(next, Ev::Window);
                    }
                }
            }
        }
    }

    fn try_send(&mut self, f: u32, now: Timestamp) {
        loop {
            let fl = &self.flows[f as usize];
            let tcp = &fl.tcp;
            let seq = if tcp.retx_pending {
                tcp.snd_una
            } else if tcp.window_room(self.sc.rwnd_mtus) > 0 {
                tcp.snd_nxt
            } else {
                return;
            };
            let m = fl.machine as usize;
            let depart =
                self.nic_free[m].max(now) + self.line.transmit_time(u64::from(self.sc.mtu));
            self.nic_free[m] = depart;
            let id = self.descs.alloc(Desc {
                flow: f,
                seq,
                sent_at: now,
                ce: false,
            });
            self.q.schedule(depart + self.quarter_rtt, Ev::AtPort(id));
            self.segment_sent(f, now, seq, 1);
        }
    }

    /// A packet reaches the switch port toward the receiver: dropped if the buffer is full,
    /// marked above the ECN threshold, else queued behind the packets still there.
    fn at_port(&mut self, id: u32, now: Timestamp) {
        while self.port_departures.front().is_some_and(|&t| t <= now) {
            self.port_departures.pop_front();
        }
        let queued = self.port_departures.len();
        if queued >= self.sc.port_buffer_packets as usize {
            self.drops += 1;
            self.descs.release(id);
            return;
        }
        if self
            .sc
            .ecn_threshold_packets
            .is_some_and(|k| queued >= k as usize)
        {
            self.descs.get_mut(id).ce = true;
            self.ce_marked += 1;
        }
        let depart = self.port_last.max(now) + self.port_rate.transmit_time(u64::from(self.sc.mtu));
        self.port_last = depart;
        self.port_departures.push_back(depart);
        self.metrics
            .on_dequeue(now, queued, depart.saturating_since(now));
        self.q
            .schedule(depart + self.quarter_rtt, Ev::AtReceiver(id));
    }

    fn at_receiver(&mut self, id: u32, now: Timestamp) {
        let d = self.descs.get(id);
        self.descs.release(id);
        let mtu = u64::from(self.sc.mtu);
        let fl = &mut self.flows[d.flow as usize];
        let before = fl.rx.rcv_nxt;
        let ack = fl.rx.on_data(d.flow, d.seq, 1, d.sent_at, d.ce, false);
        let advanced = u64::from(fl.rx.rcv_nxt - before);
        self.held_mtus += advanced;
        if self.metrics.measuring(now) {
            fl.bytes_measured += advanced * mtu;
        }
        self.metrics.on_transmit(now, advanced * mtu);
        self.metrics.delivered_bytes += advanced * mtu;
        if let Some(ack) = ack {
            self.on_receiver_ack(ack, now);
        }
    }

    /// The receiver's TCP sends `ack`; ACK shaping may rewrite or suppress it.
    fn on_receiver_ack(&mut self, ack: Ack, now: Timestamp) {
        let f = ack.flow as usize;
        self.flows[f].ts_echo = ack.ts_echo;
        self.flows[f].ece_pending |= ack.ece;
        let Some(shaper) = &mut self.shaper else {
            self.send_ack(ack.flow, ack.ack, now);
            return;
        };
        let bytes = ack.ack.wrapping_mul(self.sc.mtu);
        let d = shaper.on_ack(now, u64::from(ack.flow), bytes, SegmentKind::PureAck);
        match d.action {
            AckAction::Pass => self.send_ack(ack.flow, ack.ack, now),
            AckAction::Rewrite(b) => self.send_shaped(ack.flow, b, now),
            AckAction::Suppress => {}
        }
        self.schedule_poll();
    }

    /// Sends the shaped acknowledgement `bytes`, rounded down to a whole MTU.
    fn send_shaped(&mut self, f: u32, bytes: u32, now: Timestamp) {
        let fl = &self.flows[f as usize];
        let rcv = fl.rx.rcv_nxt;
        let behind = rcv.wrapping_mul(self.sc.mtu).wrapping_sub(bytes);
        let mtus = rcv - behind.div_ceil(self.sc.mtu).min(rcv);
        if mtus <= fl.ack_sent && mtus != rcv {
            self.rounded += 1;
            return;
        }
        self.send_ack(f, mtus, now);
    }

    fn send_ack(&mut self, f: u32, mtus: u32, now: Timestamp) {
        let fl = &mut self.flows[f as usize];
        let ack = Ack {
            flow: f,
            ack: mtus,
            ts_echo: fl.ts_echo,
            ece: fl.ece_pending,
        };
        fl.ece_pending = false;
        if mtus > fl.ack_sent {
            self.held_mtus -= u64::from(mtus - fl.ack_sent);
            fl.ack_sent = mtus;
        }
        if self.metrics.measuring(now) {
            self.held_max_mtus = self.held_max_mtus.max(self.held_mtus);
        }
        self.q.schedule(now + self.half_rtt, Ev::AckAtSender(ack));
    }

    fn schedule_poll(&mut self) {
        let Some(due) = self.shaper.as_ref().and_then(AckShaper::next_due) else {
            return;
        };
        if self.poll_at.is_none_or(|p| due < p) {
            self.poll_at = Some(due);
            self.q.schedule(due, Ev::AckPoll);
        }
    }

    fn on_poll(&mut self, now: Timestamp) {
        if self.poll_at == Some(now) {
            self.poll_at = None;
        }
        loop {
            let Some(shaper) = &mut self.shaper else {
                return;
            };
            let mut batch = self.generated;
            let n = shaper.poll(now, &mut batch);
            for g in &batch[..n] {
                self.send_shaped(g.key as u32, g.ack, now);
            }
            if n < POLL_BATCH {
                break;
            }
        }
        self.schedule_poll();
    }

    fn at_sender(&mut self, ack: Ack, now: Timestamp) {
        let Some(out) = self.ack_arrived(now, &ack) else {
            return;
        };
        if let Some(rtt) = out.rtt {
            self.metrics.on_rtt(now, rtt);
        }
        self.try_send(ack.flow, now);
    }

    fn report(&self) -> IncastReport {
        let sc = self.sc;
        let measured = Duration::from_nanos(sc.duration_ns - sc.warmup_ns);
        let throughput = self.metrics.throughput(
            sc.target_bps as f64,
            self.flows.iter().map(|f| f.bytes_measured),
            measured,
            false,
        );
        let acks = self.shaper.as_ref().map_or(AckReport::default(), |s| {
            let c = s.counters();
            AckReport {
                rewritten: c.rewritten,
                passthrough: c.passthrough,
                suppressed: c.suppressed,
                generated: c.generated,
                rounded: self.rounded,
                table_full: c.table_full,
            }
        });
        let (mut retransmissions, mut timeouts) = (0, 0);
        for fl in &self.flows {
            retransmissions += fl.tcp.counters.retransmits;
            timeouts += fl.tcp.counters.timeouts;
        }
        let target = sc.target_bps as f64;
        IncastReport {
            aggregate_deviation_pct: (throughput.aggregate_bps - target).abs() / target * 100.0,
            throughput,
            port_queue: self.metrics.held(),
            queueing_delay: self.metrics.queueing_delay(),
            rtt: self.metrics.rtt(),
            drops: self.drops,
            ce_marked: self.ce_marked,
            retransmissions,
            timeouts,
            held_at_receiver_max_bytes: self.held_max_mtus * u64::from(sc.mtu),
            acks,
            events: self.q.popped(),
        }
    }
}

impl TcpFlows for IncastSim<'_> {
    fn sender(&mut self, f: u32) -> Option<&mut TcpSender> {
        Some(&mut self.flows[f as usize].tcp)
    }

    fn schedule_timer(&mut self, f: u32, at: Timestamp) {
        self.q.schedule(at, Ev::Rto(f));
    }

    fn send_more(&mut self, f: u32, now: Timestamp) {
        self.try_send(f, now);
    }
}

#[cfg(test)]
mod tests;
