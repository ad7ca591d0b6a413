//! The event loop of the switch-port scenario ([`super`]): hosts' NICs, the [`MqPort`], the
//! receiver and the DCTCP senders.
//!
//! Events come from [`super::events`] in `(time, sequence)` order, so the run is deterministic.
//! Packet descriptors live in a slab with a free list; the steady state does not allocate.

use super::daemon_port::{DaemonPort, DaemonReject};
use super::events::{Ev, Queue, TO_RECEIVER, TO_SENDER, TO_SWITCH};
use super::workload::{exponential_ns, uniform, FlowSizeCdf};
use super::{FctSummary, MarkingSpec, SwitchError, SwitchReport, SwitchScenario, Workload};
use crate::event::Ack;
use crate::flows::{Slab, TcpFlows};
use crate::host::{Receiver, Rng};
use crate::scenario::CongestionControl;
use crate::tcp::TcpSender;
use hdrhistogram::Histogram;
use metronome_core::{
    ClassId, Duration, FlowId, Marking, MqPort, MqPortConfig, MqRejectReason, PacketRef,
    QueueConfig, Rate, Rejected, Scheduling, Timestamp,
};
use std::collections::VecDeque;

/// Bytes of TCP/IP headers in a data packet (20 + 20): goodput counts the rest.
const HEADER_BYTES: u64 = 40;
/// Flow-size class bounds of MQ-ECN's FCT figures, bytes: small `(0, 100 KB]`, large above
/// 10 MB (KB = 1024 bytes, as the paper's scripts count in KB; §5.1.2).
const SMALL_FLOW_BYTES: u64 = 100 * 1024;
const LARGE_FLOW_BYTES: u64 = 10 * 1024 * 1024;
/// Socket-buffer cap on a sender's window, packets (Linux `tcp_wmem` max 4 MiB / 1500 B).
const SNDBUF_PACKETS: u32 = 2800;
/// Packets a flow may have waiting in or serialising on its host's NIC: 2, TCP Small Queues
/// (Linux's default, see [`crate::scenario::DEFAULT_PER_FLOW_LIMIT`]). Without it a flow whose
/// host NIC is as fast as the port would fill an unbounded host queue instead of the switch's.
const TSQ_PACKETS: u32 = 2;
/// Sequence space of a greedy long-lived flow, packets (never reached in a run).
const GREEDY_PACKETS: u32 = u32::MAX / 2;

/// A data packet in the network.
#[derive(Clone, Copy, Debug, Default)]
struct Pkt {
    flow: u32,
    seq: u32,
    sent_at: Timestamp,
    ect: bool,
    ce: bool,
}

struct Flow {
    tcp: TcpSender,
    rx: Receiver,
    host: u32,
    service: u32,
    ect: bool,
    /// Packets to deliver.
    size: u32,
    /// Packets in the host's NIC FIFO or being serialised (TSQ, [`TSQ_PACKETS`]).
    in_host: u32,
    start: Timestamp,
    done: bool,
}

/// The port under test: the core's, or the daemon's shared link.
enum Port {
    Core(Box<MqPort>),
    Daemon(Box<DaemonPort>),
}

impl Port {
    fn total_bytes(&self) -> u64 {
        match self {
            Port::Core(p) => p.total_bytes(),
            Port::Daemon(d) => d.total_bytes(),
        }
    }

    fn threshold_bytes_q0(&self) -> u64 {
        match self {
            Port::Core(p) => p.threshold_bytes(0),
            Port::Daemon(d) => d.threshold_bytes_q0(),
        }
    }
}

struct Host {
    fifo: VecDeque<u32>,
    busy: bool,
}

/// One run's state.
pub(super) struct SwitchSim<'a> {
    sc: &'a SwitchScenario,
    q: Queue,
    port: Port,
    port_busy: Option<u32>,
    pkts: Slab<Pkt>,
    flows: Vec<Flow>,
    hosts: Vec<Host>,
    rng: Rng,
    cdf: Option<FlowSizeCdf>,
    arrival_rate: f64,
    arrivals_left: u32,
    flows_done: u32,
    // Timing.
    ser: Duration,
    hop: Duration,
    back: Duration,
    warmup: Timestamp,
    end: Timestamp,
    ended: bool,
    // Measurement.
    goodput_bytes: Vec<u64>,
    tx_bytes: u64,
    occ_integral: u128,
    occ_last: Timestamp,
    occ_max: u64,
    rtt_ns: Histogram<u64>,
    /// Per completed flow: bytes, FCT in ns, retransmission timeouts it suffered.
    fcts: Vec<(u64, u64, u64)>,
    thr_sum: f64,
    thr_samples: u64,
    r: SwitchReport,
}

fn marking(sc: &SwitchScenario) -> Marking {
    let rtt = Duration::from_nanos(sc.base_rtt_ns);
    // K = C x RTT x lambda: lambda is what makes K the configured standard threshold.
    let bdp_bytes = sc.line_rate_bps as f64 * rtt.as_secs_f64() / 8.0;
    let lambda = sc.standard_threshold_bytes as f64 / bdp_bytes;
    match sc.marking {
        MarkingSpec::None => Marking::None,
        MarkingSpec::PerQueueStandard => Marking::PerQueueStandard { rtt, lambda },
        MarkingSpec::PerQueueMin => Marking::PerQueueMin { rtt, lambda },
        MarkingSpec::PerPort => Marking::PerPort { rtt, lambda },
        MarkingSpec::MqEcn => Marking::MqEcn {
            rtt,
            lambda,
            beta: sc.beta,
            t_idle: sc.t_idle_ns.map(Duration::from_nanos),
        },
    }
}

/// `[link] lambda` and `marking` of the daemon's link for `sc` (the same `K` as [`marking`]).
fn daemon_marking(sc: &SwitchScenario) -> (f64, &'static str) {
    let bdp_bytes = sc.line_rate_bps as f64 * sc.base_rtt_ns as f64 / 8e9;
    let lambda = sc.standard_threshold_bytes as f64 / bdp_bytes;
    let rule = match sc.marking {
        MarkingSpec::None => "none",
        MarkingSpec::PerQueueStandard => "per-queue",
        MarkingSpec::PerQueueMin => "per-queue-min",
        MarkingSpec::PerPort => "per-port",
        MarkingSpec::MqEcn => "mq-ecn",
    };
    (lambda, rule)
}

impl<'a> SwitchSim<'a> {
    pub(super) fn new(sc: &'a SwitchScenario) -> Result<Self, SwitchError> {
        let cfg = MqPortConfig {
            line_rate: Rate::from_bps(sc.line_rate_bps),
            buffer_bytes: sc.buffer_bytes,
            scheduling: if sc.wrr {
                Scheduling::Wrr
            } else {
                Scheduling::Dwrr
            },
            queues: vec![QueueConfig::weighted(sc.quantum_bytes); sc.queues as usize],
            marking: marking(sc),
            mtu_bytes: sc.mtu,
            ..MqPortConfig::default()
        };
        let port = if sc.daemon {
            let (lambda, rule) = daemon_marking(sc);
            let d = DaemonPort::new(sc, lambda, rule).map_err(|why| SwitchError::Param {
                field: "daemon",
                why,
            })?;
            Port::Daemon(Box::new(d))
        } else {
            Port::Core(Box::new(MqPort::new(cfg).map_err(|e| {
                SwitchError::Param {
                    field: "port",
                    why: e.to_string(),
                }
            })?))
        };
        let ser = sc.mtu_time();
        let prop = sc.base_rtt_ns - 2 * ser.as_nanos();
        let mut sim = SwitchSim {
            sc,
            q: Queue::with_capacity(4096),
            port,
            port_busy: None,
            pkts: Slab::with_capacity(4096),
            flows: Vec::new(),
            hosts: Vec::new(),
            rng: Rng::for_flow(sc.seed, u32::MAX),
            cdf: None,
            arrival_rate: 0.0,
            arrivals_left: 0,
            flows_done: 0,
            ser,
            hop: Duration::from_nanos(prop / 4),
            back: Duration::from_nanos(prop - 2 * (prop / 4)),
            warmup: Timestamp::ZERO,
            end: Timestamp::from_nanos(sc.duration_ns),
            ended: false,
            goodput_bytes: vec![0; sc.services() as usize],
            tx_bytes: 0,
            occ_integral: 0,
            occ_last: Timestamp::ZERO,
            occ_max: 0,
            // Bounds are constants hdrhistogram accepts (1 <= low, high >= 2 low, 3 digits).
            rtt_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds"),
            fcts: Vec::new(),
            thr_sum: 0.0,
            thr_samples: 0,
            r: SwitchReport::default(),
        };
        sim.setup()?;
        Ok(sim)
    }

    fn setup(&mut self) -> Result<(), SwitchError> {
        let sc = self.sc;
        match &sc.workload {
            Workload::LongLived {
                flows_per_service,
                start_spread_ns,
                host_per_flow,
            } => {
                self.warmup = Timestamp::from_nanos(sc.warmup_ns);
                self.occ_last = self.warmup;
                let total: u32 = flows_per_service.iter().sum();
                let hosts = if *host_per_flow {
                    total as usize
                } else {
                    flows_per_service.len()
                };
                self.hosts = (0..hosts).map(|_| host()).collect();
                for (s, &n) in flows_per_service.iter().enumerate() {
                    for _ in 0..n {
                        let at = Timestamp::from_nanos(self.rng.below(*start_spread_ns));
                        let h = if *host_per_flow {
                            self.flows.len() as u32
                        } else {
                            s as u32
                        };
                        let f = self.add_flow(s as u32, h, GREEDY_PACKETS, at);
                        self.q.schedule(at, Ev::FlowStart(f));
                    }
                }
                self.q.schedule(self.end, Ev::End);
            }
            Workload::Poisson {
                load,
                flows,
                hosts,
                cdf,
                ..
            } => {
                let cdf = match cdf {
                    Some(text) => FlowSizeCdf::parse(text).map_err(|e| SwitchError::Param {
                        field: "workload.cdf",
                        why: e.to_string(),
                    })?,
                    None => FlowSizeCdf::websearch(),
                };
                self.arrival_rate = cdf.arrival_rate(*load, sc.line_rate_bps, sc.mtu);
                self.cdf = Some(cdf);
                self.arrivals_left = *flows;
                self.flows.reserve(*flows as usize);
                self.fcts.reserve(*flows as usize);
                self.hosts = (0..*hosts).map(|_| host()).collect();
                self.end = Timestamp::from_nanos(u64::MAX / 4);
                self.q.schedule(Timestamp::ZERO, Ev::NextArrival);
            }
        }
        Ok(())
    }

    fn add_flow(&mut self, service: u32, host: u32, size: u32, start: Timestamp) -> u32 {
        let non_ecn = self.sc.non_ecn_services.contains(&service);
        let cc = if non_ecn {
            CongestionControl::Reno
        } else {
            self.sc.cc
        };
        let rto_min = Duration::from_nanos(self.sc.rto_min_ns);
        self.flows.push(Flow {
            // The handshake (not simulated) gave an RTT sample: the first RTO is the minimum, as
            // Linux's after a SYN-ACK on a sub-millisecond path, not RFC 6298's 1 s.
            tcp: TcpSender::new(cc, self.sc.initial_cwnd, rto_min).with_initial_rto(rto_min),
            rx: Receiver::default(),
            host,
            service,
            ect: cc.ecn_capable(),
            size,
            in_host: 0,
            start,
            done: false,
        });
        (self.flows.len() - 1) as u32
    }

    pub(super) fn run(&mut self) {
        while let Some((now, ev)) = self.q.pop() {
            self.handle(now, ev);
            if self.ended {
                break;
            }
        }
    }

    fn handle(&mut self, now: Timestamp, ev: Ev) {
        match ev {
            Ev::FlowStart(f) => self.try_send(f, now),
            Ev::NextArrival => self.on_arrival(now),
            Ev::Rto(f) => self.timer_event(f, now),
            Ev::HostDone(h) => self.on_host_done(h, now),
            Ev::PortDone => self.on_port_done(now),
            Ev::End => self.finish(now),
            Ev::AtSwitch(p) => self.on_switch(p, now),
            Ev::AtReceiver(p) => self.on_receiver(p, now),
            Ev::AckAt(a) => self.on_ack(a, now),
        }
    }

    fn on_arrival(&mut self, now: Timestamp) {
        let Workload::Poisson {
            services,
            service_weights,
            hosts,
            ..
        } = &self.sc.workload
        else {
            return;
        };
        let (services, hosts) = (u64::from(*services), u64::from(*hosts));
        let size = match &self.cdf {
            Some(cdf) => cdf.sample(&mut self.rng),
            None => return,
        };
        let service = if service_weights.is_empty() {
            self.rng.below(services) as u32
        } else {
            pick(service_weights, uniform(&mut self.rng))
        };
        let host = self.rng.below(hosts) as u32;
        let f = self.add_flow(service, host, size, now);
        self.try_send(f, now);
        self.arrivals_left -= 1;
        if self.arrivals_left > 0 {
            let gap = exponential_ns(&mut self.rng, self.arrival_rate);
            self.q
                .schedule(now + Duration::from_nanos(gap), Ev::NextArrival);
        } else {
            self.end = now + Duration::from_nanos(self.sc.duration_ns);
            self.q.schedule(self.end, Ev::End);
        }
    }

    /// Sends what the flow's window allows: one MTU per packet, into its host's NIC.
    fn try_send(&mut self, f: u32, now: Timestamp) {
        loop {
            let fl = &self.flows[f as usize];
            if fl.done || fl.in_host >= TSQ_PACKETS {
                return;
            }
            let tcp = &fl.tcp;
            let seq = if tcp.retx_pending {
                tcp.snd_una
            } else if tcp.window_room(SNDBUF_PACKETS) > 0 && tcp.snd_nxt < fl.size {
                tcp.snd_nxt
            } else {
                return;
            };
            self.segment_sent(f, now, seq, 1);
            let fl = &mut self.flows[f as usize];
            fl.in_host += 1;
            let (host, ect) = (fl.host, fl.ect);
            let id = self.pkts.alloc(Pkt {
                flow: f,
                seq,
                sent_at: now,
                ect,
                ce: false,
            });
            self.r.packets_sent += 1;
            self.hosts[host as usize].fifo.push_back(id);
            if !self.hosts[host as usize].busy {
                self.hosts[host as usize].busy = true;
                self.q.schedule(now + self.ser, Ev::HostDone(host));
            }
        }
    }

    fn on_host_done(&mut self, h: u32, now: Timestamp) {
        let host = &mut self.hosts[h as usize];
        let sent = host.fifo.pop_front();
        if host.fifo.is_empty() {
            host.busy = false;
        } else {
            self.q.schedule(now + self.ser, Ev::HostDone(h));
        }
        if let Some(id) = sent {
            self.q
                .push_line(TO_SWITCH, now + self.hop, Ev::AtSwitch(id));
            // TSQ: the transmit completion lets the flow send again.
            let f = self.pkts.get(id).flow;
            self.flows[f as usize].in_host -= 1;
            self.try_send(f, now);
        }
    }

    /// Time-weighted port occupancy: adds the current bytes up to `now` (measured time only).
    fn account_occupancy(&mut self, now: Timestamp) {
        if now > self.occ_last {
            let dt = now.saturating_since(self.occ_last).as_nanos();
            self.occ_integral += u128::from(self.port.total_bytes()) * u128::from(dt);
            self.occ_last = now;
        }
    }

    fn on_switch(&mut self, id: u32, now: Timestamp) {
        let p = self.pkts.get(id);
        let service = self.flows[p.flow as usize].service;
        let pkt = PacketRef::new(id, FlowId(p.flow), ClassId(service), self.sc.mtu as u16);
        self.account_occupancy(now);
        let admitted = match &mut self.port {
            Port::Core(port) => port.enqueue(now, pkt, p.ect).map(|e| e.marked).map_err(
                |Rejected { reason, .. }| match reason {
                    MqRejectReason::NotEctDropped => DaemonReject::NotEct,
                    MqRejectReason::BufferFull => DaemonReject::BufferFull,
                    _ => DaemonReject::Other,
                },
            ),
            Port::Daemon(d) => d.enqueue(now, (id, p.flow, service), self.sc.mtu, p.ect),
        };
        match admitted {
            Ok(marked) => {
                if marked {
                    self.pkts.get_mut(id).ce = true;
                    self.r.ce_marked += 1;
                }
                if now >= self.warmup {
                    self.occ_max = self.occ_max.max(self.port.total_bytes());
                    self.thr_sum += self.port.threshold_bytes_q0() as f64;
                    self.thr_samples += 1;
                }
                if self.port_busy.is_none() {
                    self.start_port(now);
                }
            }
            Err(why) => {
                match why {
                    DaemonReject::NotEct => self.r.non_ect_drops += 1,
                    DaemonReject::BufferFull => self.r.buffer_drops += 1,
                    // Cannot happen with one-MTU packets and services mapped to existing queues
                    // (validated), but counted if it does.
                    _ => self.r.other_rejects += 1,
                }
                self.pkts.release(id);
            }
        }
    }

    fn start_port(&mut self, now: Timestamp) {
        self.account_occupancy(now);
        let next = match &mut self.port {
            Port::Core(port) => port.dequeue(now).map(|d| (d.pkt.id, d.marked)),
            Port::Daemon(d) => d.dequeue(now).map(|id| (id, false)),
        };
        if let Some((id, marked)) = next {
            if marked {
                self.pkts.get_mut(id).ce = true;
                self.r.ce_marked += 1;
            }
            self.port_busy = Some(id);
            self.q.schedule(now + self.ser, Ev::PortDone);
        }
    }

    fn on_port_done(&mut self, now: Timestamp) {
        if let Some(id) = self.port_busy.take() {
            if now >= self.warmup {
                self.tx_bytes += u64::from(self.sc.mtu);
            }
            self.q
                .push_line(TO_RECEIVER, now + self.hop, Ev::AtReceiver(id));
        }
        self.start_port(now);
    }

    fn on_receiver(&mut self, id: u32, now: Timestamp) {
        let p = self.pkts.get(id);
        self.pkts.release(id);
        self.r.packets_received += 1;
        if p.ce && !p.ect {
            self.r.ce_on_non_ect += 1;
        }
        let fl = &mut self.flows[p.flow as usize];
        let before = fl.rx.rcv_nxt;
        let ack = fl.rx.on_data(p.flow, p.seq, 1, p.sent_at, p.ce, false);
        if now >= self.warmup {
            let payload = u64::from(self.sc.mtu) - HEADER_BYTES;
            self.goodput_bytes[fl.service as usize] += u64::from(fl.rx.rcv_nxt - before) * payload;
        }
        if let Some(a) = ack {
            self.q.push_line(TO_SENDER, now + self.back, Ev::AckAt(a));
        }
    }

    fn on_ack(&mut self, ack: Ack, now: Timestamp) {
        let f = ack.flow;
        // A finished flow has no sender: its late ACKs are ignored.
        let Some(out) = self.ack_arrived(now, &ack) else {
            return;
        };
        let fl = &mut self.flows[f as usize];
        fl.tcp.take_delivered(now, |_| {});
        if let Some(rtt) = out.rtt {
            if now >= self.warmup {
                // Saturated at 100 s, beyond any RTT of a run.
                let _ = self
                    .rtt_ns
                    .record(rtt.as_nanos().clamp(1, self.rtt_ns.high()));
            }
        }
        if fl.tcp.snd_una >= fl.size {
            // Everything sent is acknowledged: `ack_arrived` stopped the timer.
            fl.done = true;
            let bytes = u64::from(fl.size) * super::workload::CDF_PACKET_PAYLOAD;
            let fct = now.saturating_since(fl.start).as_nanos();
            self.fcts.push((bytes, fct, fl.tcp.counters.timeouts));
            self.flows_done += 1;
            if self.arrivals_left == 0 && self.flows_done as usize == self.flows.len() {
                self.finish(now);
            }
            return;
        }
        self.try_send(f, now);
    }

    fn finish(&mut self, now: Timestamp) {
        self.account_occupancy(now);
        self.r.simulated_ns = now.as_nanos();
        self.ended = true;
    }

    pub(super) fn report(&mut self) -> SwitchReport {
        let mut r = std::mem::take(&mut self.r);
        let end = Timestamp::from_nanos(r.simulated_ns);
        let measured = end.saturating_since(self.warmup).as_secs_f64().max(1e-12);
        r.service_goodput_bps = self
            .goodput_bytes
            .iter()
            .map(|&b| b as f64 * 8.0 / measured)
            .collect();
        r.share_max_min_ratio = share_ratio(&self.sc.workload, &r.service_goodput_bps);
        r.utilization = self.tx_bytes as f64 * 8.0 / (self.sc.line_rate_bps as f64 * measured);
        r.avg_queue_bytes = self.occ_integral as f64 / (measured * 1e9);
        r.max_queue_bytes = self.occ_max;
        let h = &self.rtt_ns;
        if !h.is_empty() {
            r.rtt_mean_us = h.mean() / 1e3;
            r.rtt_p50_us = h.value_at_quantile(0.5) as f64 / 1e3;
            r.rtt_p99_us = h.value_at_quantile(0.99) as f64 / 1e3;
        }
        let class = |lo: u64, hi: u64| {
            let mut v: Vec<f64> = self
                .fcts
                .iter()
                .filter(|(b, _, _)| *b > lo && *b <= hi)
                .map(|&(_, ns, _)| ns as f64 / 1e3)
                .collect();
            v.sort_by(f64::total_cmp);
            FctSummary {
                flows: v.len() as u64,
                mean_us: mean(&v),
                p50_us: percentile(&v, 0.5),
                p99_us: percentile(&v, 0.99),
            }
        };
        r.fct_all = class(0, u64::MAX);
        r.fct_small = class(0, SMALL_FLOW_BYTES);
        r.fct_medium = class(SMALL_FLOW_BYTES, LARGE_FLOW_BYTES);
        r.fct_large = class(LARGE_FLOW_BYTES, u64::MAX);
        // The small-flow tail split by cause: flows that waited for a retransmission timeout
        // (at least RTO_min) and the p99 of the others (queueing, fast retransmits).
        let small = || self.fcts.iter().filter(|(b, _, _)| *b <= SMALL_FLOW_BYTES);
        r.small_flows_timed_out = small().filter(|(_, _, to)| *to > 0).count() as u64;
        let mut clean: Vec<f64> = small()
            .filter(|(_, _, to)| *to == 0)
            .map(|&(_, ns, _)| ns as f64 / 1e3)
            .collect();
        clean.sort_by(f64::total_cmp);
        r.fct_small_p99_no_timeout_us = percentile(&clean, 0.99);
        r.unfinished_flows = self.flows.iter().filter(|f| !f.done).count() as u64;
        if let Workload::LongLived { .. } = self.sc.workload {
            r.unfinished_flows = 0; // greedy flows never finish
        }
        r.packets_in_flight_at_end = self.pkts.live() as u64;
        for fl in &self.flows {
            r.retransmits += fl.tcp.counters.retransmits;
            r.timeouts += fl.tcp.counters.timeouts;
        }
        r.mean_threshold_q0_bytes = if self.thr_samples > 0 {
            self.thr_sum / self.thr_samples as f64
        } else {
            0.0
        };
        match &self.port {
            Port::Core(port) => {
                let c = port.counters();
                r.port_marked = c.port.marked;
                r.port_buffer_drops = c.port.buffer_drops;
                r.non_ect_passes = c.port.non_ect_passes;
                r.t_round_samples = c.t_round_samples;
                r.idle_decays = c.idle_decays;
            }
            Port::Daemon(d) => {
                let e = d.engine();
                e.invariants();
                if let Some(l) = e.link() {
                    let c = l.counters();
                    r.port_marked = c.marked;
                    r.port_buffer_drops = c.dropped_buffer;
                    r.non_ect_passes = c.not_ect_passed;
                    if let Some(pc) = l.port_counters() {
                        r.t_round_samples = pc.t_round_samples;
                        r.idle_decays = pc.idle_decays;
                    }
                }
            }
        }
        r.events = self.q.popped();
        r
    }
}

impl TcpFlows for SwitchSim<'_> {
    fn sender(&mut self, f: u32) -> Option<&mut TcpSender> {
        let fl = &mut self.flows[f as usize];
        (!fl.done).then_some(&mut fl.tcp)
    }

    fn schedule_timer(&mut self, f: u32, at: Timestamp) {
        self.q.schedule(at, Ev::Rto(f));
    }

    fn send_more(&mut self, f: u32, now: Timestamp) {
        self.try_send(f, now);
    }
}

fn host() -> Host {
    Host {
        fifo: VecDeque::with_capacity(256),
        busy: false,
    }
}

/// The index `i` where the cumulative normalised `weights` first exceed `u` in [0, 1).
fn pick(weights: &[f64], u: f64) -> u32 {
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w / total;
        if u < acc {
            return i as u32;
        }
    }
    (weights.len() - 1) as u32
}

/// Largest over smallest goodput among services that have flows.
fn share_ratio(w: &Workload, goodput: &[f64]) -> f64 {
    let active: Vec<f64> = match w {
        Workload::LongLived {
            flows_per_service, ..
        } => goodput
            .iter()
            .zip(flows_per_service)
            .filter(|(_, &n)| n > 0)
            .map(|(&g, _)| g)
            .collect(),
        Workload::Poisson { .. } => goodput.to_vec(),
    };
    let max = active.iter().copied().fold(0.0, f64::max);
    let min = active.iter().copied().fold(f64::INFINITY, f64::min);
    if min > 0.0 {
        max / min
    } else {
        f64::INFINITY
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Nearest-rank percentile of sorted `v` (0 when empty).
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}
