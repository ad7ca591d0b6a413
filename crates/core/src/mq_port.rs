//! A multi-queue switch port: DWRR or WRR over N FIFO queues under a strict-priority tier, a shared
//! buffer with a per-port byte limit, and ECN marking at enqueue ([`crate::mq_ecn`]).
//!
//! The scheduler is the one MQ-ECN's prototype builds on (MQ-ECN §4.2, DWRR after Shreedhar and
//! Varghese): a list of backlogged weighted queues served in turn, each turn ended eagerly so that
//! a dequeue is O(1), and a `T_round` sample at the end of each turn (§4.2, §3.3.1).
//! Strict-priority queues ([`QueueConfig::strict_priority`]) are served first (§3.3.2). One shared
//! pool of packet references ([`crate::pool::NodePool`]), drop-tail by handing back
//! ([`MqRejectReason::BufferFull`], §5.1). An earlier `now` is taken as the latest seen.
//!
//! Where it departs from or reads the paper: a turn ends when its last packet has been transmitted,
//! as the authors' ns-2 and Linux code time it, so a sample is never 0. The turn rules, the buffer
//! and the timing: `docs/design/mq-ecn.md`.

mod counters;
#[cfg(test)]
mod tests;

pub use counters::{MqCounters, MqQueueCounters};

use crate::mq_ecn::{EcnState, Marking, MarkingConfigError, NonEctPolicy};
use crate::packet::PacketRef;
use crate::pool::{NodePool, SlotList};
use crate::queue::Rejected;
use crate::rate::Rate;
use crate::time::{Duration, Timestamp};
use std::collections::VecDeque;

/// Smallest Ethernet frame in bytes (IEEE 802.3 minimum, without preamble): sizes the shared pool.
pub const MIN_PACKET_BYTES: u64 = 64;

/// Default MTU in bytes (Ethernet payload, the paper's 1.5 KB packets, §5.2).
pub const DEFAULT_MTU_BYTES: u32 = 1500;

/// Largest shared buffer in bytes: 1 GiB. The reference pool costs about a fifth of the buffer
/// (`buffer / MIN_PACKET_BYTES` references at 18.3 bytes each, a full pool node), so this bounds it
/// near 300 MiB; switch ports hold 96 KB to a few MB (MQ-ECN §5.1-5.2: 96 KB and 300 KB).
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// Most queues per port: 64, one bit each in the strict-priority occupancy word. Switch chips
/// have 4-8 per port; the paper's scaling test uses 32 (§5.3.1).
pub const MAX_QUEUES: usize = 64;

/// The weighted scheduler under the strict-priority tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Scheduling {
    /// Deficit weighted round robin: `quantum_bytes` per turn.
    #[default]
    Dwrr,
    /// Weighted round robin: `quantum_bytes / mtu_bytes` packets per turn.
    Wrr,
}

/// One queue of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueConfig {
    /// DWRR quantum in bytes per turn (at least the MTU); WRR weight = `quantum_bytes / mtu_bytes`.
    pub quantum_bytes: u32,
    /// In the strict-priority tier, served before all weighted queues.
    pub strict_priority: bool,
}

impl QueueConfig {
    /// A weighted queue of `quantum_bytes` per turn.
    pub const fn weighted(quantum_bytes: u32) -> Self {
        QueueConfig {
            quantum_bytes,
            strict_priority: false,
        }
    }
}

/// A port's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct MqPortConfig {
    /// Link capacity `C`.
    pub line_rate: Rate,
    /// Shared buffer of the port in bytes; drop-tail beyond.
    pub buffer_bytes: u64,
    /// The weighted scheduler.
    pub scheduling: Scheduling,
    /// The queues; a packet goes to queue `pkt.class.0`.
    pub queues: Vec<QueueConfig>,
    /// The ECN marking rule.
    pub marking: Marking,
    /// Largest packet in bytes: longer packets are handed back; the default `T_idle`.
    pub mtu_bytes: u32,
    /// What happens to non-ECN-capable packets the rule would mark.
    pub non_ect: NonEctPolicy,
}

impl Default for MqPortConfig {
    /// The paper's simulated switch port (§5.2): 10 Gbit/s, 300 KB shared by 8 DWRR queues of
    /// 1.5 KB quantum, 1500-byte MTU; no marking.
    fn default() -> Self {
        MqPortConfig {
            line_rate: Rate::gbps(10),
            buffer_bytes: 300_000,
            scheduling: Scheduling::Dwrr,
            queues: vec![QueueConfig::weighted(1500); 8],
            marking: Marking::None,
            mtu_bytes: DEFAULT_MTU_BYTES,
            non_ect: NonEctPolicy::Pass,
        }
    }
}

/// Why a configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MqConfigError {
    /// No queue, or more than [`MAX_QUEUES`].
    #[error("a port needs 1..=64 queues")]
    QueueCount,
    /// A queue's quantum is below the MTU.
    #[error("queue {0}: quantum below the MTU")]
    QuantumBelowMtu(usize),
    /// The line rate is zero.
    #[error("line rate must be positive")]
    LineRate,
    /// The buffer exceeds [`MAX_BUFFER_BYTES`].
    #[error("buffer above 1 GiB")]
    BufferTooLarge,
    /// The MTU is zero or above 65 535 bytes.
    #[error("MTU must lie in 1..=65535 bytes")]
    Mtu,
    /// The marking rule is invalid.
    #[error("marking: {0}")]
    Marking(#[from] MarkingConfigError),
}

/// An accepted packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqEnqueued {
    /// The caller must set CE on the packet.
    pub marked: bool,
}

/// Why a packet was handed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MqRejectReason {
    /// The shared buffer has no room for it (drop-tail).
    #[error("port buffer full")]
    BufferFull,
    /// Its class names no queue of the port.
    #[error("unknown queue")]
    UnknownQueue,
    /// Not ECN-capable, over the threshold, and the policy is [`NonEctPolicy::Drop`].
    #[error("non-ECT packet over the marking threshold")]
    NotEctDropped,
    /// Longer than the port's MTU.
    #[error("packet longer than the MTU")]
    TooLong,
}

/// A departing packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqDequeued {
    /// The packet.
    pub pkt: PacketRef,
    /// The queue it left.
    pub queue: usize,
    /// Marked at dequeue (the port marks at enqueue only: always false).
    pub marked: bool,
}

/// One queue's state. The head packet sits outside the pool so its length can be read.
#[derive(Clone, Debug)]
struct Queue {
    head: Option<PacketRef>,
    rest: SlotList,
    packets: usize,
    bytes: u64,
    /// DWRR: bytes left in this turn; WRR: packets left in this turn.
    deficit: u64,
    /// DWRR: quantum in bytes; WRR: packets per turn.
    credit: u64,
    strict: bool,
    on_list: bool,
    /// When the queue's current turn started (MQ-ECN §4.2 `T_start`): when it joined the tail
    /// of the active list, or when the last packet of its previous turn had been transmitted.
    t_start: Timestamp,
}

/// A multi-queue port with ECN marking. See the module docs.
///
/// ```
/// use metronome_core::{Marking, MqPort, MqPortConfig, QueueConfig, PacketRef, FlowId, ClassId,
///                      Duration, Timestamp};
///
/// let mut port = MqPort::new(MqPortConfig {
///     queues: vec![QueueConfig::weighted(1500); 4],
///     marking: Marking::MqEcn { rtt: Duration::from_micros(80), lambda: 0.15, beta: 0.75,
///                               t_idle: None },
///     ..Default::default() // 10 Gbit/s, 300 KB shared, DWRR, MTU 1500
/// })
/// .unwrap();
/// assert_eq!(port.threshold_bytes(0), 15_000); // C x RTT x lambda before any round
/// let now = Timestamp::from_nanos(0);
/// let pkt = PacketRef::new(1, FlowId(9), ClassId(2), 1500); // queue 2
/// assert!(!port.enqueue(now, pkt, true).unwrap().marked);
/// let out = port.dequeue(now).unwrap();
/// assert_eq!((out.pkt, out.queue), (pkt, 2));
/// ```
pub struct MqPort {
    // Read on every operation.
    queues: Vec<Queue>,
    pool: NodePool,
    /// Weighted queues with packets, in service order; the head is being served.
    active: VecDeque<u16>,
    /// Bit `i`: strict-priority queue `i` holds packets.
    strict_nonempty: u64,
    total_bytes: u64,
    total_packets: usize,
    ecn: EcnState,
    // Configuration.
    line_rate: Rate,
    buffer_bytes: u64,
    mtu_bytes: u32,
    scheduling: Scheduling,
    non_ect: NonEctPolicy,
    // Time.
    last_now: Timestamp,
    /// When the link went idle with the port empty; `None` while it holds packets.
    idle_since: Option<Timestamp>,
    counters: MqCounters,
}

impl MqPort {
    /// Builds a port; allocates its whole pool here.
    pub fn new(cfg: MqPortConfig) -> Result<MqPort, MqConfigError> {
        let n = cfg.queues.len();
        if n == 0 || n > MAX_QUEUES {
            return Err(MqConfigError::QueueCount);
        }
        if cfg.buffer_bytes > MAX_BUFFER_BYTES {
            return Err(MqConfigError::BufferTooLarge);
        }
        if cfg.line_rate.bps() == 0 {
            return Err(MqConfigError::LineRate);
        }
        if cfg.mtu_bytes == 0 || cfg.mtu_bytes > u32::from(u16::MAX) {
            return Err(MqConfigError::Mtu);
        }
        let mtu = u64::from(cfg.mtu_bytes);
        if let Some(i) = cfg
            .queues
            .iter()
            .position(|q| u64::from(q.quantum_bytes) < mtu)
        {
            return Err(MqConfigError::QuantumBelowMtu(i));
        }
        let credit = |q: &QueueConfig| match cfg.scheduling {
            Scheduling::Dwrr => u64::from(q.quantum_bytes),
            Scheduling::Wrr => u64::from(q.quantum_bytes) / mtu,
        };
        // MQ-ECN's quantum_i: the most a queue sends in a round (§3.3.2).
        let quanta: Vec<u64> = cfg
            .queues
            .iter()
            .map(|q| match cfg.scheduling {
                Scheduling::Dwrr => credit(q),
                Scheduling::Wrr => credit(q) * mtu,
            })
            .collect();
        let strict: Vec<bool> = cfg.queues.iter().map(|q| q.strict_priority).collect();
        let ecn = EcnState::new(&cfg.marking, cfg.line_rate, cfg.mtu_bytes, &quanta, &strict)?;
        let queues = cfg
            .queues
            .iter()
            .map(|q| Queue {
                head: None,
                rest: SlotList::EMPTY,
                packets: 0,
                bytes: 0,
                deficit: 0,
                credit: credit(q),
                strict: q.strict_priority,
                on_list: false,
                t_start: Timestamp::ZERO,
            })
            .collect();
        let max_packets = (cfg.buffer_bytes / MIN_PACKET_BYTES) as usize;
        Ok(MqPort {
            queues,
            pool: NodePool::new(NodePool::nodes_for(max_packets, n)),
            active: VecDeque::with_capacity(n),
            strict_nonempty: 0,
            total_bytes: 0,
            total_packets: 0,
            ecn,
            line_rate: cfg.line_rate,
            buffer_bytes: cfg.buffer_bytes,
            mtu_bytes: cfg.mtu_bytes,
            scheduling: cfg.scheduling,
            non_ect: cfg.non_ect,
            last_now: Timestamp::ZERO,
            idle_since: None,
            counters: MqCounters::new(n),
        })
    }

    fn advance(&mut self, now: Timestamp) -> Timestamp {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// Accepts `pkt` into queue `pkt.class.0`, deciding ECN at enqueue; `ect`: the packet is
    /// ECN-capable. `Ok(MqEnqueued { marked: true })`: the caller must set CE. A packet not
    /// accepted is handed back with its reason, and counted.
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        pkt: PacketRef,
        ect: bool,
    ) -> Result<MqEnqueued, Rejected<MqRejectReason>> {
        let now = self.advance(now);
        let qi = pkt.class.0 as usize;
        if qi >= self.queues.len() {
            self.counters.unknown_queue += 1;
            return Err(Rejected {
                pkt,
                reason: MqRejectReason::UnknownQueue,
            });
        }
        let len = u64::from(pkt.len);
        if len > u64::from(self.mtu_bytes) {
            self.counters.too_long += 1;
            return Err(Rejected {
                pkt,
                reason: MqRejectReason::TooLong,
            });
        }
        if self.total_bytes + len > self.buffer_bytes {
            self.counters.count_buffer_drop(qi);
            return Err(Rejected {
                pkt,
                reason: MqRejectReason::BufferFull,
            });
        }
        self.wake(now);
        // The occupancy compared is the queue's (or port's) bytes with this packet in it.
        let over = self
            .ecn
            .over_threshold(qi, self.queues[qi].bytes + len, self.total_bytes + len);
        let marked = over && ect;
        if over && !ect && self.non_ect == NonEctPolicy::Drop {
            self.counters.count_non_ect_drop(qi);
            return Err(Rejected {
                pkt,
                reason: MqRejectReason::NotEctDropped,
            });
        }
        let q = &mut self.queues[qi];
        if q.head.is_none() {
            q.head = Some(pkt);
        } else if let Err(pkt) = self.pool.push_back(&mut q.rest, pkt) {
            self.counters.pool_exhausted += 1;
            self.counters.count_buffer_drop(qi);
            return Err(Rejected {
                pkt,
                reason: MqRejectReason::BufferFull,
            });
        }
        if over && !ect {
            self.counters.count_non_ect_pass(qi);
        }
        self.idle_since = None;
        q.packets += 1;
        q.bytes += len;
        self.total_bytes += len;
        self.total_packets += 1;
        if q.strict {
            self.strict_nonempty |= 1 << qi;
        } else if !q.on_list {
            q.on_list = true;
            q.deficit = q.credit;
            // Its previous turn may still be on the wire: the new one starts after it.
            q.t_start = q.t_start.max(now);
            self.active.push_back(qi as u16);
        }
        self.counters.count_enqueue(qi, len, marked);
        Ok(MqEnqueued { marked })
    }

    /// Applies MQ-ECN's `T_idle` decay (§3.3.1) for the whole `T_idle` periods the port has been
    /// idle; the remainder stays counted in `idle_since` in case the packet is refused.
    fn wake(&mut self, now: Timestamp) {
        if let (Some(since), true) = (self.idle_since, self.ecn.samples_rounds()) {
            let periods = self.ecn.decay_idle(now.saturating_since(since));
            let step = self.ecn.t_idle().as_nanos().saturating_mul(periods);
            self.idle_since = Some(since.saturating_add(Duration::from_nanos(step)));
            self.counters.idle_decays += periods;
        }
    }

    /// The next packet to transmit, `None` when the port is empty (work-conserving). Call it
    /// when the link is free; the caller serialises the packet for `len / line_rate`.
    pub fn dequeue(&mut self, now: Timestamp) -> Option<MqDequeued> {
        let now = self.advance(now);
        let qi = if self.strict_nonempty != 0 {
            self.strict_nonempty.trailing_zeros() as usize
        } else {
            *self.active.front()? as usize
        };
        let pkt = self.pop(qi);
        let len = u64::from(pkt.len);
        if !self.queues[qi].strict {
            self.end_turn_if_done(now, qi, len);
        } else if self.queues[qi].packets == 0 {
            self.strict_nonempty &= !(1 << qi);
        }
        self.total_bytes -= len;
        self.total_packets -= 1;
        if self.total_packets == 0 {
            self.idle_since = Some(now.saturating_add(self.line_rate.transmit_time(len)));
        }
        self.counters.count_dequeue(qi, len);
        Some(MqDequeued {
            pkt,
            queue: qi,
            marked: false,
        })
    }

    /// Removes queue `qi`'s head packet (the queue must not be empty).
    fn pop(&mut self, qi: usize) -> PacketRef {
        let q = &mut self.queues[qi];
        let pkt = q.head.take().expect("a scheduled queue holds packets");
        q.head = self.pool.pop_front(&mut q.rest);
        q.packets -= 1;
        q.bytes -= u64::from(pkt.len);
        pkt
    }

    /// Charges the weighted head queue `qi` for a departure of `len` bytes and, if its turn is
    /// over, takes it off the head: gone if empty, to the tail with a new credit otherwise.
    /// Either way one `T_round` sample (MQ-ECN §4.2), from `T_start` to the end of this
    /// packet's transmission, which is also the next turn's `T_start` (see the module docs).
    fn end_turn_if_done(&mut self, now: Timestamp, qi: usize, len: u64) {
        let served = now.saturating_add(self.line_rate.transmit_time(len));
        let scheduling = self.scheduling;
        let q = &mut self.queues[qi];
        q.deficit -= match scheduling {
            Scheduling::Dwrr => len,
            Scheduling::Wrr => 1,
        };
        let fits = |q: &Queue| match (scheduling, q.head) {
            (_, None) => false,
            (Scheduling::Dwrr, Some(h)) => u64::from(h.len) <= q.deficit,
            (Scheduling::Wrr, Some(_)) => q.deficit > 0,
        };
        if fits(q) {
            return;
        }
        let sample = served.saturating_since(q.t_start);
        q.t_start = served;
        self.active.pop_front();
        if q.packets == 0 {
            q.on_list = false;
            q.deficit = 0;
        } else {
            q.deficit = match scheduling {
                Scheduling::Dwrr => q.deficit + q.credit,
                Scheduling::Wrr => q.credit,
            };
            self.active.push_back(qi as u16);
        }
        self.counters.count_turn(qi);
        if self.ecn.samples_rounds() {
            self.ecn.sample_round(sample);
            self.counters.t_round_samples += 1;
        }
    }

    /// Bytes in queue `queue` (0 for an unknown queue).
    pub fn queue_bytes(&self, queue: usize) -> u64 {
        self.queues.get(queue).map_or(0, |q| q.bytes)
    }

    /// Packets in queue `queue` (0 for an unknown queue).
    pub fn queue_packets(&self, queue: usize) -> usize {
        self.queues.get(queue).map_or(0, |q| q.packets)
    }

    /// Bytes in the port.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Packets in the port.
    pub fn total_packets(&self) -> usize {
        self.total_packets
    }

    /// True when the port holds no packet.
    pub fn is_empty(&self) -> bool {
        self.total_packets == 0
    }

    /// Number of queues.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// The current threshold `K_i` of `queue` in bytes (the port's `K` under per-port marking;
    /// with RED, the threshold `K_min` and `K_max` are fractions of); `u64::MAX` without marking.
    /// MQ-ECN's idle decay is applied at the next enqueue, not here.
    pub fn threshold_bytes(&self, queue: usize) -> u64 {
        if queue >= self.queues.len() {
            return u64::MAX;
        }
        self.ecn.threshold_bytes(queue)
    }

    /// MQ-ECN's smoothed round time, `None` before the first sample or under other rules.
    pub fn t_round(&self) -> Option<Duration> {
        self.ecn.t_round()
    }

    /// The port idleness after which `T_round` decays.
    pub fn t_idle(&self) -> Duration {
        self.ecn.t_idle()
    }

    /// The named counters.
    pub fn counters(&self) -> &MqCounters {
        &self.counters
    }

    /// Bytes preallocated for queued packet references.
    pub fn memory_bytes(&self) -> usize {
        self.pool.memory_bytes()
    }

    /// Checks the port's invariants; panics with the broken one. For tests and debug builds:
    /// walks every queue (O(queues + packets)).
    pub fn invariants(&self) {
        let (mut bytes, mut packets) = (0u64, 0usize);
        for (i, q) in self.queues.iter().enumerate() {
            let held = usize::from(q.head.is_some()) + self.pool.count(&q.rest);
            assert_eq!(held, q.packets, "queue {i}: packet count");
            assert_eq!(
                q.head.is_none(),
                q.rest.is_empty() && q.packets == 0,
                "queue {i}: head"
            );
            bytes += q.bytes;
            packets += q.packets;
            if q.strict {
                assert_eq!(
                    self.strict_nonempty >> i & 1 == 1,
                    q.packets > 0,
                    "queue {i}: SP bit"
                );
                assert!(!q.on_list, "queue {i}: strict queue on the weighted list");
            } else {
                let listed = self.active.iter().filter(|&&a| a as usize == i).count();
                assert_eq!(
                    listed,
                    usize::from(q.on_list),
                    "queue {i}: listed once iff on_list"
                );
                assert_eq!(
                    q.on_list,
                    q.packets > 0,
                    "queue {i}: on the list iff backlogged"
                );
                if let Some(h) = q.head {
                    let fits = match self.scheduling {
                        Scheduling::Dwrr => u64::from(h.len) <= q.deficit,
                        Scheduling::Wrr => q.deficit > 0,
                    };
                    assert!(fits, "queue {i}: listed but its head cannot be sent");
                } else {
                    assert_eq!(q.deficit, 0, "queue {i}: idle deficit");
                }
            }
        }
        assert_eq!(bytes, self.total_bytes, "port bytes");
        assert_eq!(packets, self.total_packets, "port packets");
        assert!(self.total_bytes <= self.buffer_bytes, "buffer limit");
        assert!(
            self.idle_since.is_none() || packets == 0,
            "idle while holding packets"
        );
        let c = &self.counters.port;
        assert_eq!(
            c.enqueued_packets - c.dequeued_packets,
            packets as u64,
            "counters: enqueued - dequeued = held"
        );
        assert_eq!(
            c.enqueued_bytes - c.dequeued_bytes,
            bytes,
            "counters: bytes held"
        );
    }
}
