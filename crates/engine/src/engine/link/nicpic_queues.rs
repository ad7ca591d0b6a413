//! The link's queues under `scheduler = "nicpic"`: one FIFO per class in a shared node pool
//! (the "queues in host memory" of NicPic §3.1), scheduled by the core's [`NicPic`] (32 bytes per
//! class, on-demand, NicPic §3.2), for thousands of classes on one link.
//!
//! Each class's NicPic limit is `weight x` the link's rate: the limits always oversubscribe the
//! link, so NicPic's virtual time shares it "in the ratio of configured rate limits" (§3.2), that
//! is by weight, and a class alone gets the whole link. NicPic's own link clock (at the link's
//! rate) decides when a packet may leave, with the link's `burst` as its catch-up allowance
//! ([`NicPic::set_catch_up`]) as the DWRR link's clock has; its MTU is the link's longest frame,
//! so a packet is one piece.
//!
//! Marking, at enqueue as on the DWRR port, against `K = C x RTT x lambda`: `per-queue` compares
//! the class's bytes with `K`, `per-port` the link's, `per-queue-min` the class's with
//! `K x w_i / sum(w)`. `mq-ecn` compares the class's bytes with `K x min(1, w_i / W)`, `W` the
//! weights of the backlogged classes with this one: the class's current service rate over `C`,
//! which is what MQ-ECN's `quantum_i / T_round` measures on a round-robin port (MQ-ECN §3.2); a
//! virtual-time scheduler has no rounds to time, so the rate is taken from the weights.
//! RED variants are refused by validation.

use crate::config::{LinkConfig, LinkMarkingRule};
use metronome_core::nicpic::{NicPic, NicPicConfig, MAX_SEGMENT_BYTES};
use metronome_core::pool::{NodePool, SlotList};
use metronome_core::{MqRejectReason, PacketRef, Rate, Timestamp};

/// Smallest frame the buffer is sized for, bytes (IEEE 802.3 minimum).
const MIN_FRAME_BYTES: u64 = 64;

/// The queues and their scheduler. See the module docs.
pub struct NicPicQueues {
    nic: NicPic,
    pool: NodePool,
    heads: Vec<Option<PacketRef>>,
    rest: Vec<SlotList>,
    packets: Vec<u32>,
    bytes: Vec<u64>,
    weights: Vec<u64>,
    weight_sum: u64,
    backlogged_weight: u64,
    total_bytes: u64,
    total_packets: usize,
    buffer_bytes: u64,
    /// Longest packet, bytes: NicPic's MTU, so that every packet is one piece.
    max_frame_bytes: u32,
    rule: LinkMarkingRule,
    /// `C x RTT x lambda`, bytes.
    k_bytes: f64,
}

impl NicPicQueues {
    /// The queues of `weights` (one per class, in queue order) on the link of `config`.
    pub fn new(config: &LinkConfig, weights: &[u32]) -> NicPicQueues {
        let n = weights.len().max(1);
        let rates: Vec<Rate> = (0..n)
            .map(|i| {
                let w = u64::from(weights.get(i).copied().unwrap_or(1).max(1));
                Rate::from_bps(config.rate.bps().saturating_mul(w))
            })
            .collect();
        let nic_config = NicPicConfig {
            link: config.rate,
            mtu: config.max_frame_bytes.min(MAX_SEGMENT_BYTES),
            ..NicPicConfig::default()
        };
        let mut nic = NicPic::new(nic_config, &rates)
            .unwrap_or_else(|e| panic!("NicPic refused a validated link: {e}"));
        nic.set_catch_up(config.rate.transmit_time(u64::from(config.burst_bytes)));
        let max_packets = (config.buffer_bytes / MIN_FRAME_BYTES) as usize;
        let weights: Vec<u64> = (0..n)
            .map(|i| u64::from(weights.get(i).copied().unwrap_or(1).max(1)))
            .collect();
        let m = config.marking;
        NicPicQueues {
            nic,
            pool: NodePool::new(NodePool::nodes_for(max_packets, n)),
            heads: vec![None; n],
            rest: vec![SlotList::EMPTY; n],
            packets: vec![0; n],
            bytes: vec![0; n],
            weight_sum: weights.iter().sum(),
            weights,
            backlogged_weight: 0,
            total_bytes: 0,
            total_packets: 0,
            buffer_bytes: config.buffer_bytes,
            max_frame_bytes: nic_config.mtu,
            rule: m.rule,
            k_bytes: config.rate.bytes_in(m.rtt) as f64 * m.lambda,
        }
    }

    /// Queue `q`'s threshold now, bytes (`u64::MAX` without marking); under `mq-ecn` as if a
    /// packet were joining it.
    pub fn threshold_bytes(&self, q: usize) -> u64 {
        let Some(&w) = self.weights.get(q) else {
            return u64::MAX;
        };
        let scale = match self.rule {
            LinkMarkingRule::None => return u64::MAX,
            LinkMarkingRule::PerQueue | LinkMarkingRule::PerPort => 1.0,
            LinkMarkingRule::PerQueueMin => w as f64 / self.weight_sum.max(1) as f64,
            LinkMarkingRule::MqEcn => {
                let joining = if self.packets[q] == 0 { w } else { 0 };
                let active = (self.backlogged_weight + joining).max(1);
                (w as f64 / active as f64).min(1.0)
            }
        };
        (self.k_bytes * scale).round() as u64
    }

    /// Accepts `pkt` into queue `pkt.class.0`; `Ok(true)`: over the threshold and `ect`, the
    /// caller marks CE. Handed back (nothing changed) when the buffer is full, the queue unknown,
    /// or not ECN-capable over the threshold.
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        pkt: PacketRef,
        ect: bool,
    ) -> Result<bool, MqRejectReason> {
        let q = pkt.class.index();
        if q >= self.heads.len() {
            return Err(MqRejectReason::UnknownQueue);
        }
        let len = u64::from(pkt.len);
        if u32::from(pkt.len) > self.max_frame_bytes {
            return Err(MqRejectReason::TooLong);
        }
        if self.total_bytes + len > self.buffer_bytes {
            return Err(MqRejectReason::BufferFull);
        }
        let occupancy = match self.rule {
            LinkMarkingRule::PerPort => self.total_bytes + len,
            _ => self.bytes[q] + len,
        };
        let over = occupancy > self.threshold_bytes(q);
        if over && !ect {
            return Err(MqRejectReason::NotEctDropped);
        }
        if self.heads[q].is_none() {
            if self
                .nic
                .backlog(now, q as u32, u32::from(pkt.len).max(1))
                .is_err()
            {
                return Err(MqRejectReason::TooLong);
            }
            self.heads[q] = Some(pkt);
            self.backlogged_weight += self.weights[q];
        } else if self.pool.push_back(&mut self.rest[q], pkt).is_err() {
            return Err(MqRejectReason::BufferFull);
        }
        self.packets[q] += 1;
        self.bytes[q] += len;
        self.total_bytes += len;
        self.total_packets += 1;
        Ok(over)
    }

    /// The packet NicPic sends at `now` (the link free, its class's turn), with its queue.
    pub fn dequeue(&mut self, now: Timestamp) -> Option<(PacketRef, usize)> {
        let pull = self.nic.pull(now)?;
        let q = pull.class as usize;
        let pkt = self.heads.get_mut(q)?.take()?;
        self.heads[q] = self.pool.pop_front(&mut self.rest[q]);
        match self.heads[q] {
            // Announced in the same instant, so the class keeps its place (NicPic's `last`).
            Some(next) => {
                let _ = self.nic.backlog(now, q as u32, u32::from(next.len).max(1));
            }
            None => self.backlogged_weight -= self.weights[q],
        }
        let len = u64::from(pkt.len);
        self.packets[q] -= 1;
        self.bytes[q] -= len;
        self.total_bytes -= len;
        self.total_packets -= 1;
        Some((pkt, q))
    }

    /// Every packet, queue by queue, at stop or for a reload (NicPic's state is dropped with
    /// the queues).
    pub fn take_all(&mut self, out: &mut Vec<(PacketRef, usize)>) {
        for q in 0..self.heads.len() {
            while let Some(pkt) = self.heads[q].take() {
                out.push((pkt, q));
                self.heads[q] = self.pool.pop_front(&mut self.rest[q]);
            }
            self.packets[q] = 0;
            self.bytes[q] = 0;
        }
        self.backlogged_weight = 0;
        self.total_bytes = 0;
        self.total_packets = 0;
    }

    /// When NicPic sends next, `None` when empty.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.nic.next_due()
    }

    /// Packets held.
    pub fn total_packets(&self) -> usize {
        self.total_packets
    }

    /// Bytes held.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Queue `q`'s packets and bytes.
    pub fn queue(&self, q: usize) -> (u64, u64) {
        (
            self.packets.get(q).map_or(0, |&p| u64::from(p)),
            self.bytes.get(q).copied().unwrap_or(0),
        )
    }

    /// Checks the counts against the lists and NicPic's own invariants.
    pub fn invariants(&self) {
        self.nic.invariants();
        let mut total = 0usize;
        for q in 0..self.heads.len() {
            let held = usize::from(self.heads[q].is_some()) + self.pool.count(&self.rest[q]);
            assert_eq!(
                held, self.packets[q] as usize,
                "nicpic queue {q}: packet count"
            );
            total += held;
        }
        assert_eq!(total, self.total_packets, "nicpic packets");
        assert!(self.total_bytes <= self.buffer_bytes, "nicpic buffer");
    }
}
