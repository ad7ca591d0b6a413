//! The steady-state workload of Carousel Table 1 (§7.1.3, "CPU Overhead of Timing Wheel").
//!
//! N packets stay resident. Each step advances time by `step`, dequeues everything due and, for
//! every packet released, enqueues one new packet of the same flow (a closed loop, as Deferred
//! Completions would drive it), so the structure holds N packets throughout. The F flows are paced
//! at equal rates summing to the departure rate P packets per second: a flow's next packet has the
//! EDT of its previous one plus `F / P`, plus a seeded jitter below a quarter of that gap (which
//! keeps each flow's EDTs increasing). The resident packets' EDTs therefore spread over `N / P`
//! seconds, "the time that N packets occupy at the configured departure rate".
//!
//! Cost per packet is wall time over the packets released (each release is paired with one
//! enqueue), so it counts one enqueue plus one dequeue plus the loop's own small bookkeeping, the
//! same for every structure.

use metronome_core::{ClassId, EdtQueue, FlowId, PacketRef, Timestamp};
use std::time::Instant;

/// Parameters of the steady state.
#[derive(Clone, Copy, Debug)]
pub struct SteadyParams {
    /// Departure rate, packets per second. Default 12.5 M/s (150 Gbit/s of 1 500-byte packets):
    /// 20 M resident packets then span 1.6 s, inside Carousel's 2 s horizon, and a 2 µs slot
    /// holds 25 packets.
    pub departure_pps: u64,
    /// Flows. Default 1 000.
    pub flows: u32,
    /// Packet length, bytes. Default 1 500 (an MTU).
    pub packet_len: u16,
    /// Time advanced per step, nanoseconds. Default 2 000 (one Carousel slot).
    pub step_ns: u64,
    /// Seed of the jitter.
    pub seed: u64,
}

impl Default for SteadyParams {
    fn default() -> Self {
        SteadyParams {
            departure_pps: 12_500_000,
            flows: 1_000,
            packet_len: 1_500,
            step_ns: 2_000,
            seed: 0x5eed_2017,
        }
    }
}

impl SteadyParams {
    /// Gap between two packets of one flow, nanoseconds.
    pub fn flow_gap_ns(&self) -> u64 {
        self.flows as u64 * 1_000_000_000 / self.departure_pps.max(1)
    }
    /// Bits per second of one flow.
    pub fn flow_bps(&self) -> u64 {
        self.departure_pps * self.packet_len as u64 * 8 / self.flows.max(1) as u64
    }
}

/// A structure held at N resident packets, ready to be stepped.
pub struct SteadyState<Q: EdtQueue> {
    /// The structure under test.
    pub queue: Q,
    params: SteadyParams,
    now: u64,
    /// Per flow: the EDT (without jitter) of its latest packet.
    last_edt: Vec<u64>,
    gap: u64,
    /// Seeded jitter values in `[0, gap / 4)`, nanoseconds.
    jitter_table: Vec<u32>,
    next_id: u32,
    out: Vec<PacketRef>,
    /// Packets handed back by the structure (a valid run has none).
    pub rejected: u64,
    /// Packets released so far.
    pub released: u64,
}

/// Start of simulated time: one second, so that no EDT is near zero.
const T0: u64 = 1_000_000_000;
/// Entries of the jitter table (a power of two).
const JITTER_TABLE: usize = 4096;

/// `JITTER_TABLE` values in `[0, range)` from an xorshift64* generator seeded with `seed`.
fn jitter_table(seed: u64, range: u64) -> Vec<u32> {
    let range = range.clamp(1, u32::MAX as u64);
    let mut x = seed | 1;
    (0..JITTER_TABLE)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            // Lemire's multiply-shift maps 32 random bits onto [0, range).
            (((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) * range) >> 32) as u32
        })
        .collect()
}

/// Dequeue buffer: a transmit batch of 256 references.
const BATCH: usize = 256;

impl<Q: EdtQueue> SteadyState<Q> {
    /// Fills `queue` with `resident` packets.
    pub fn new(queue: Q, params: SteadyParams, resident: u64) -> Self {
        let flows = params.flows.max(1) as usize;
        let mut s = SteadyState {
            queue,
            params,
            now: T0,
            last_edt: vec![0; flows],
            gap: params.flow_gap_ns().max(1),
            jitter_table: jitter_table(params.seed, params.flow_gap_ns() / 4),
            next_id: 0,
            out: vec![PacketRef::default(); BATCH],
            rejected: 0,
            released: 0,
        };
        let spacing = 1_000_000_000 / params.departure_pps.max(1);
        for k in 0..resident {
            let f = (k % flows as u64) as usize;
            let base = T0 + k * spacing;
            s.last_edt[f] = base;
            s.push(f, base);
        }
        s
    }

    #[inline(always)]
    fn jitter(&mut self) -> u64 {
        // A precomputed table of seeded values keeps the harness's own cost per packet small.
        self.jitter_table[self.next_id as usize & (JITTER_TABLE - 1)] as u64
    }

    #[inline(always)]
    fn push(&mut self, f: usize, base: u64) {
        let edt = base + self.jitter();
        let pkt = PacketRef::new(
            self.next_id,
            FlowId(f as u32),
            ClassId(f as u32),
            self.params.packet_len,
        );
        self.next_id = self.next_id.wrapping_add(1);
        if self
            .queue
            .enqueue(
                Timestamp::from_nanos(self.now),
                Timestamp::from_nanos(edt),
                pkt,
            )
            .is_err()
        {
            self.rejected += 1;
        }
    }

    /// Steps until at least `packets` more packets were released (each replaced by a new one).
    pub fn run(&mut self, packets: u64) {
        let target = self.released + packets;
        while self.released < target {
            self.now += self.params.step_ns;
            let now = Timestamp::from_nanos(self.now);
            loop {
                let n = self.queue.dequeue(now, &mut self.out);
                for i in 0..n {
                    let f = self.out[i].flow.0 as usize;
                    let base = self.last_edt[f] + self.gap;
                    self.last_edt[f] = base;
                    self.push(f, base);
                }
                self.released += n as u64;
                if n < BATCH {
                    break;
                }
            }
        }
    }

    /// Runs `packets` releases and returns the wall-clock nanoseconds per packet.
    pub fn measure(&mut self, packets: u64) -> f64 {
        let before = self.released;
        let start = Instant::now();
        self.run(packets);
        let elapsed = start.elapsed().as_nanos() as f64;
        elapsed / (self.released - before).max(1) as f64
    }

    /// Bytes spent on queued packets per resident packet.
    pub fn bytes_per_packet(&self) -> f64 {
        self.queue.packet_bytes() as f64 / self.queue.len().max(1) as f64
    }
}
