//! The shaper or scheduled buffer under test, behind one enum (CONTRIBUTING.md §4).
//! [`ShaperSpec::Daemon`] is the daemon's own engine (`crate::daemon_shaper`); the simulator's own
//! EDT shapers are stamped by a [`metronome_core::timestamp::PolicyStack`] (Carousel §5.1.1); the
//! timestamp-free baselines (HTB-like, `pfifo`, `tbf`) ignore EDTs, and the HTB-like bucket is
//! polled on a timer ([`Shaper::poll_time`], Carousel §2). Every variant holds at most `capacity`
//! packets: a packet over it is a physical drop, or under zD (zD §4, [`Zd`]) a pause. The NIC pulls
//! one packet at a time ([`Shaper::dequeue_one`]). In full: ARCHITECTURE.md, "The shaper under
//! test".

use crate::daemon_shaper::{Admit, DaemonShaper};
use crate::scenario::{ScenarioError, ShaperSpec, ZdDiscipline};
use metronome_core::fq_tree::FqTree;
use metronome_core::timestamp::{PolicyId, PolicyKind, PolicyStack, Timestamper};
use metronome_core::token_bucket_rr::{ClassConfig, TokenBucketRr};
use metronome_core::zd::{
    CappedWheel, Overflow, Pfifo, ScheduledBuffer, TbfBuffer, TbfConfig, Zd, ZdConfig, ZdCounters,
    ZdVerdict,
};
use metronome_core::{
    ClassId, Discipline, Duration, EdtQueue, FlowId, PacketRef, Rate, Timestamp, TimingWheel,
    TimingWheelConfig,
};

/// The structure inside a [`Shaper`].
enum Queue {
    /// The daemon's engine, which stamps packets itself.
    Daemon(Box<DaemonShaper>),
    Wheel(Box<TimingWheel>),
    Fq(Box<FqTree>),
    /// A single-class token bucket polled by a timer: the HTB-like baseline.
    Bucket(Box<TokenBucketRr>),
    /// `pfifo` that drops when full (zD's baseline).
    Pfifo(Pfifo),
    /// `tbf` that drops when full.
    Tbf(Box<TbfBuffer>),
    /// zD over a `pfifo`.
    ZdPfifo(Box<Zd<Pfifo>>),
    /// zD over a `tbf`.
    ZdTbf(Box<Zd<TbfBuffer>>),
    /// zD over a timing wheel of fixed capacity.
    ZdWheel(Box<Zd<CappedWheel>>),
}

/// What happened to a packet offered to the shaper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted.
    Enqueued,
    /// Refused and lost: a physical drop (the source learns of it as a network loss).
    Dropped,
    /// zD paused the flow: a virtual drop, the source keeps the packet until resumed.
    Paused,
    /// Handed back without pausing (beyond the horizon under zD): the source keeps the packet.
    HandedBack,
}

/// Named counters of a [`Shaper`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShaperCounters {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets released to the NIC.
    pub released: u64,
    /// Packets refused because the shaper held `capacity` packets.
    pub rejected_full: u64,
    /// Packets the core structure handed back for another reason (horizon, pool).
    pub rejected_other: u64,
    /// Calls into the structure: offers (a zD offer includes its probe) and dequeues.
    pub operations: u64,
}

/// The shaper under test.
pub struct Shaper {
    queue: Queue,
    stamper: Timestamper,
    aggregate: Option<PolicyId>,
    /// One pacing policy per flow, or empty.
    per_flow: Vec<PolicyId>,
    capacity: usize,
    poll_timer: Option<Duration>,
    counters: ShaperCounters,
}

fn wheel_config(granularity_ns: u64, horizon_ns: u64, capacity: u32) -> TimingWheelConfig {
    TimingWheelConfig {
        granularity: Duration::from_nanos(granularity_ns),
        horizon: Duration::from_nanos(horizon_ns),
        pool_packets: capacity as usize,
        ..Default::default()
    }
}

impl Shaper {
    /// Builds the shaper of `spec` for `flows` flows whose packets are at most `seg_bytes` long
    /// (the burst of every policy: one packet, for the strictest conformance), under zD with
    /// `zd`'s discipline when set. zD needs a buffer with a probe: pfifo, tbf or timing wheel.
    /// `ect`: the transport is ECN-capable (the daemon's frames carry ECT(0)).
    pub fn new(
        spec: &ShaperSpec,
        flows: u32,
        seg_bytes: u32,
        zd: Option<ZdDiscipline>,
        ect: bool,
    ) -> Result<Self, ScenarioError> {
        let mut stamper = Timestamper::new();
        let mut policies = |agg: Option<u64>, per_flow: Option<u64>| {
            let a = agg
                .map(|r| stamper.add_policy(PolicyKind::Aggregate, Rate::from_bps(r), seg_bytes));
            let p: Vec<PolicyId> = match per_flow {
                Some(r) => (0..flows)
                    .map(|_| stamper.add_policy(PolicyKind::Pacing, Rate::from_bps(r), seg_bytes))
                    .collect(),
                None => Vec::new(),
            };
            (a, p)
        };
        let zd_config = |d: ZdDiscipline| ZdConfig {
            flows: flows as usize,
            discipline: match d {
                ZdDiscipline::Fifo => Discipline::Fifo,
                ZdDiscipline::EdtOrdered => Discipline::edt_ordered(),
            },
            per_flow_limit: metronome_core::zd::DEFAULT_PER_FLOW_LIMIT,
        };
        let tbf = |rate_bps: u64, burst: u32, capacity: u32, overflow| {
            TbfBuffer::new(TbfConfig {
                rate: Rate::from_bps(rate_bps),
                burst,
                capacity: capacity as usize,
                overflow,
            })
        };
        let none = (None, Vec::new());
        let (queue, capacity, (aggregate, per_flow), poll_timer) = match (*spec, zd) {
            (
                ShaperSpec::TimingWheel {
                    granularity_ns,
                    horizon_ns,
                    aggregate_bps,
                    per_flow_bps,
                    capacity_packets,
                },
                d,
            ) => {
                let cfg = wheel_config(granularity_ns, horizon_ns, capacity_packets);
                let pol = policies(aggregate_bps, per_flow_bps);
                let q = match d {
                    None => Queue::Wheel(Box::new(TimingWheel::new(cfg))),
                    Some(d) => {
                        let w =
                            CappedWheel::new(cfg, capacity_packets as usize, Overflow::HandBack);
                        Queue::ZdWheel(Box::new(Zd::new(w, zd_config(d))))
                    }
                };
                (q, capacity_packets, pol, None)
            }
            (
                ShaperSpec::Daemon {
                    capacity_packets, ..
                },
                None,
            ) => {
                let d = DaemonShaper::new(spec, seg_bytes, ect)?;
                (Queue::Daemon(Box::new(d)), capacity_packets, none, None)
            }
            (
                ShaperSpec::FqTree {
                    aggregate_bps,
                    per_flow_bps,
                    capacity_packets,
                },
                None,
            ) => {
                let pol = policies(aggregate_bps, per_flow_bps);
                (
                    Queue::Fq(Box::new(FqTree::new())),
                    capacity_packets,
                    pol,
                    None,
                )
            }
            (
                ShaperSpec::TokenBucketRr {
                    rate_bps,
                    burst_bytes,
                    timer_ns,
                    capacity_packets,
                },
                None,
            ) => {
                let q = TokenBucketRr::new(vec![ClassConfig {
                    rate: Rate::from_bps(rate_bps),
                    burst: burst_bytes,
                }]);
                let timer = Some(Duration::from_nanos(timer_ns));
                (Queue::Bucket(Box::new(q)), capacity_packets, none, timer)
            }
            (
                ShaperSpec::Tbf {
                    rate_bps,
                    burst_bytes,
                    capacity,
                },
                d,
            ) => {
                let q = match d {
                    None => Queue::Tbf(Box::new(tbf(
                        rate_bps,
                        burst_bytes,
                        capacity,
                        Overflow::Drop,
                    ))),
                    Some(d) => {
                        let b = tbf(rate_bps, burst_bytes, capacity, Overflow::HandBack);
                        Queue::ZdTbf(Box::new(Zd::new(b, zd_config(d))))
                    }
                };
                (q, capacity, none, None)
            }
            (ShaperSpec::Pfifo { capacity }, d) => {
                let q = match d {
                    None => Queue::Pfifo(Pfifo::new(capacity as usize, Overflow::Drop)),
                    Some(d) => {
                        let b = Pfifo::new(capacity as usize, Overflow::HandBack);
                        Queue::ZdPfifo(Box::new(Zd::new(b, zd_config(d))))
                    }
                };
                (q, capacity, none, None)
            }
            (ShaperSpec::Daemon { .. }, Some(_)) => {
                return Err(ScenarioError::OutOfRange {
                    field: "shaper",
                    why: "the daemon's engine has no zD: use timing_wheel, pfifo or tbf",
                })
            }
            (ShaperSpec::FqTree { .. } | ShaperSpec::TokenBucketRr { .. }, Some(_)) => {
                return Err(ScenarioError::OutOfRange {
                    field: "shaper",
                    why: "zD needs a buffer with a probe: pfifo, tbf or timing_wheel",
                })
            }
        };
        Ok(Shaper {
            queue,
            stamper,
            aggregate,
            per_flow,
            capacity: capacity as usize,
            poll_timer,
            counters: ShaperCounters::default(),
        })
    }

    /// Offers `pkt` (its descriptor id, flow and length in bytes) at `now`. The simulator's own
    /// EDT shapers stamp it with the latest of its policies (Carousel §5.1.1); a refused packet is
    /// never stamped, so a drop does not consume the aggregate's rate. The daemon's engine does
    /// the same inside [`metronome_engine::engine::Engine::receive`]. Without zD a full
    /// shaper (or a refusal by the structure) drops the packet physically; under zD the flow may be
    /// paused (zD Algorithm 1 `ProcessFlow`).
    #[inline]
    pub fn offer(&mut self, now: Timestamp, pkt: PacketRef) -> Verdict {
        self.counters.operations += 1;
        if let Queue::Daemon(d) = &mut self.queue {
            let admit = match d.offer(now, pkt) {
                Admit::Queued => Verdict::Enqueued,
                Admit::Full => {
                    self.counters.rejected_full += 1;
                    return Verdict::Dropped;
                }
                Admit::Dropped => {
                    self.counters.rejected_other += 1;
                    return Verdict::Dropped;
                }
            };
            self.counters.enqueued += 1;
            return admit;
        }
        let (len, flow) = (u32::from(pkt.len), pkt.flow.0);
        let policies = self.policies(flow);
        let edt = policies.peek(&self.stamper, now, now, len);
        let admit = self.offer_stamped(now, edt, pkt);
        if admit == Verdict::Enqueued {
            let stamped = policies.stamp(&mut self.stamper, now, now, len);
            debug_assert_eq!(stamped, edt, "peek and stamp disagree");
        }
        admit
    }

    /// The policies a packet of `flow` passes: the aggregate's and the flow's pacing, when set.
    #[inline]
    fn policies(&self, flow: u32) -> PolicyStack {
        PolicyStack::new(self.aggregate, self.per_flow.get(flow as usize).copied())
    }

    /// Offers `pkt` with `edt` to one of the simulator's own structures.
    #[inline]
    fn offer_stamped(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Verdict {
        let zd_admit = |o: ZdVerdict| match o {
            ZdVerdict::Enqueued => Verdict::Enqueued,
            ZdVerdict::Paused(_) | ZdVerdict::AlreadyPaused(_) => Verdict::Paused,
            ZdVerdict::Rejected(_) | ZdVerdict::UnknownFlow(_) => Verdict::HandedBack,
            ZdVerdict::Dropped(_) => Verdict::Dropped,
        };
        let plain = |r: Result<(), _>| {
            if r.is_ok() {
                Verdict::Enqueued
            } else {
                Verdict::Dropped
            }
        };
        let full = self.len() >= self.capacity;
        let admit = match &mut self.queue {
            Queue::ZdPfifo(z) => zd_admit(z.offer(now, edt, pkt)),
            Queue::ZdTbf(z) => zd_admit(z.offer(now, edt, pkt)),
            Queue::ZdWheel(z) => zd_admit(z.offer(now, edt, pkt)),
            _ if full => Verdict::Dropped,
            Queue::Daemon(_) => Verdict::Dropped, // offered in `offer`
            Queue::Wheel(q) => plain(q.enqueue(now, edt, pkt)),
            Queue::Fq(q) => plain(q.enqueue(now, edt, pkt)),
            Queue::Bucket(q) => plain(q.enqueue(
                now,
                edt,
                PacketRef {
                    class: ClassId(0),
                    ..pkt
                },
            )),
            Queue::Pfifo(q) => plain(q.enqueue(now, edt, pkt)),
            Queue::Tbf(q) => plain(q.enqueue(now, edt, pkt)),
        };
        match admit {
            Verdict::Enqueued => self.counters.enqueued += 1,
            Verdict::Dropped if full => self.counters.rejected_full += 1,
            Verdict::Dropped => self.counters.rejected_other += 1,
            Verdict::Paused | Verdict::HandedBack => {}
        }
        admit
    }

    /// Releases one due packet, if any, and whether the daemon's engine marked it CE; under zD
    /// the flows its departure resumes (zD Algorithm 1 `ResumeFlow`) are appended to `resumed`.
    #[inline]
    pub fn dequeue_one(
        &mut self,
        now: Timestamp,
        resumed: &mut Vec<FlowId>,
    ) -> Option<(PacketRef, bool)> {
        self.counters.operations += 1;
        let mut out = [PacketRef::default(); 1];
        let n = match &mut self.queue {
            Queue::Daemon(d) => {
                let released = d.release(now);
                if released.is_some() {
                    self.counters.released += 1;
                }
                return released;
            }
            Queue::Wheel(q) => q.dequeue(now, &mut out),
            Queue::Fq(q) => q.dequeue(now, &mut out),
            Queue::Bucket(q) => q.dequeue(now, &mut out),
            Queue::Pfifo(q) => q.dequeue(now, &mut out),
            Queue::Tbf(q) => q.dequeue(now, &mut out),
            Queue::ZdPfifo(z) => z.dequeue(now, &mut out, resumed),
            Queue::ZdTbf(z) => z.dequeue(now, &mut out, resumed),
            Queue::ZdWheel(z) => z.dequeue(now, &mut out, resumed),
        };
        if n == 0 {
            return None;
        }
        self.counters.released += 1;
        Some((out[0], false))
    }

    /// A resumed source had nothing to send: zD resumes the next paused flow instead.
    pub fn pass_turn(&mut self) -> Option<FlowId> {
        match &mut self.queue {
            Queue::ZdPfifo(z) => z.pass_turn(),
            Queue::ZdTbf(z) => z.pass_turn(),
            Queue::ZdWheel(z) => z.pass_turn(),
            _ => None,
        }
    }

    /// zD's counters, when zD runs.
    pub fn zd_counters(&self) -> Option<ZdCounters> {
        match &self.queue {
            Queue::ZdPfifo(z) => Some(z.counters()),
            Queue::ZdTbf(z) => Some(z.counters()),
            Queue::ZdWheel(z) => Some(z.counters()),
            _ => None,
        }
    }

    /// The earliest instant a packet is due, `None` when empty.
    #[inline]
    pub fn next_due(&self) -> Option<Timestamp> {
        match &self.queue {
            Queue::Daemon(d) => d.next_due(),
            Queue::Wheel(q) => q.next_due(),
            Queue::Fq(q) => q.next_due(),
            Queue::Bucket(q) => q.next_due(),
            Queue::Pfifo(q) => q.next_due(),
            Queue::Tbf(q) => q.next_due(),
            Queue::ZdPfifo(z) => z.next_due(),
            Queue::ZdTbf(z) => z.next_due(),
            Queue::ZdWheel(z) => z.next_due(),
        }
    }

    /// When an idle NIC should poll next: [`Shaper::next_due`], rounded up to the poll timer's
    /// period for the HTB-like baseline; never before `now`.
    pub fn poll_time(&self, now: Timestamp) -> Option<Timestamp> {
        let due = self.next_due()?.max(now);
        let Some(timer) = self.poll_timer else {
            return Some(due);
        };
        let p = timer.as_nanos();
        let rounded = due.as_nanos().div_ceil(p).saturating_mul(p);
        Some(Timestamp::from_nanos(rounded))
    }

    /// Packets held.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.queue {
            Queue::Daemon(d) => d.len(),
            Queue::Wheel(q) => q.len(),
            Queue::Fq(q) => q.len(),
            Queue::Bucket(q) => q.len(),
            Queue::Pfifo(q) => q.len(),
            Queue::Tbf(q) => q.len(),
            Queue::ZdPfifo(z) => z.buffer().len(),
            Queue::ZdTbf(z) => z.buffer().len(),
            Queue::ZdWheel(z) => z.buffer().len(),
        }
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packets the shaper holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The counters.
    pub fn counters(&self) -> ShaperCounters {
        self.counters
    }

    /// Packets the daemon's engine marked CE (0 for the other shapers, which do not mark).
    pub fn ce_marked(&self) -> u64 {
        match &self.queue {
            Queue::Daemon(d) => d.engine().counters().ecn_marked,
            _ => 0,
        }
    }

    /// The daemon's engine, when the shaper is one: its counters and accounting invariants.
    pub fn daemon_engine(&self) -> Option<&metronome_engine::engine::Engine> {
        match &self.queue {
            Queue::Daemon(d) => Some(d.engine()),
            _ => None,
        }
    }

    /// The structure's name.
    pub fn name(&self) -> &'static str {
        match &self.queue {
            Queue::Daemon(_) => "daemon_engine",
            Queue::Wheel(q) => q.name(),
            Queue::Fq(q) => q.name(),
            Queue::Bucket(q) => q.name(),
            Queue::Pfifo(q) => q.name(),
            Queue::Tbf(q) => q.name(),
            Queue::ZdPfifo(z) => z.buffer().name(),
            Queue::ZdTbf(z) => z.buffer().name(),
            Queue::ZdWheel(z) => z.buffer().name(),
        }
    }
}
