//! Inter-flow batching (FlowBundler §III-C, §IV-A): packets per dequeue call.
//!
//! D destinations at equal rates share a link (default 10 Gbit/s of 1 500-byte packets); each
//! keeps a window of packets queued and, when one leaves, queues its next one an MTU gap later (a
//! closed loop). Phases are random (seeded). The caller is event-driven, as a shaper that sleeps
//! until work exists: `now = next_due()`, then `dequeue(now)`. A 1 µs timing wheel releases one
//! slot per call; the MLTW releases a whole coarse slot, batching several destinations.
//!
//! Besides the batch size the run records how early and how late packets leave against their EDT,
//! so the price of batching (intra-flow burst, FlowBundler footnote 4) is visible next to it.

use crate::report::BatchingRow;
use metronome_core::mltw::{Mltw, MltwConfig};
use metronome_core::{
    ClassId, Duration, EdtQueue, FlowId, PacketRef, Rate, Timestamp, TimingWheel, TimingWheelConfig,
};

/// Parameters of the batching run.
#[derive(Clone, Debug)]
pub struct BatchingParams {
    /// Destination counts to try.
    pub destinations: Vec<u32>,
    /// Sum of the destinations' rates. Default 10 Gbit/s (FlowBundler's kernel testbed).
    pub total: Rate,
    /// Packet length, bytes.
    pub packet_len: u16,
    /// Packets each destination keeps queued. Default 8.
    pub window: u32,
    /// Simulated time measured, after `warmup`.
    pub duration: Duration,
    /// Simulated time before measuring (rate estimates converge). Default 20 ms.
    pub warmup: Duration,
    /// Seed of the phases.
    pub seed: u64,
}

impl Default for BatchingParams {
    fn default() -> Self {
        BatchingParams {
            destinations: vec![1, 4, 16, 64],
            total: Rate::gbps(10),
            packet_len: 1500,
            window: 8,
            duration: Duration::from_millis(100),
            warmup: Duration::from_millis(20),
            seed: 0xf10b_0d1e,
        }
    }
}

/// Runs the timing wheel at 1 µs (FlowBundler §V-A's setting for 10 Gbit/s) and the MLTW for every
/// destination count.
pub fn run(p: &BatchingParams) -> Vec<BatchingRow> {
    let mut rows = Vec::new();
    for &d in &p.destinations {
        let pool = (d * p.window) as usize * 2 + 1024;
        let wheel = TimingWheel::new(TimingWheelConfig {
            granularity: Duration::from_micros(1),
            horizon: Duration::from_millis(100),
            pool_packets: pool,
            ..Default::default()
        });
        rows.push(run_one(wheel, d, p));
        let mltw = Mltw::new(MltwConfig {
            pool_packets: pool,
            ..Default::default()
        });
        rows.push(run_one(mltw, d, p));
    }
    rows
}

/// One structure with `d` destinations.
pub fn run_one<Q: EdtQueue>(mut q: Q, d: u32, p: &BatchingParams) -> BatchingRow {
    let per_dest = Rate::from_bps(p.total.bps() / d.max(1) as u64);
    let gap = per_dest
        .transmit_time(p.packet_len as u64)
        .as_nanos()
        .max(1);
    let start = 1_000_000_000u64;
    let mut rng = p.seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Per destination: EDT of its latest packet. Per packet id: its EDT.
    let mut last = vec![0u64; d as usize];
    let mut edt_of: Vec<u64> = Vec::new();
    let now0 = Timestamp::from_nanos(start);
    for (f, last_f) in last.iter_mut().enumerate() {
        let phase = next() % gap;
        for k in 0..p.window as u64 {
            let e = start + phase + k * gap;
            *last_f = e;
            let id = edt_of.len() as u32;
            edt_of.push(e);
            let pkt = PacketRef::new(id, FlowId(f as u32), ClassId(0), p.packet_len);
            let _ = q.enqueue(now0, Timestamp::from_nanos(e), pkt);
        }
    }
    let measure_from = start + p.warmup.as_nanos();
    let end = measure_from + p.duration.as_nanos();
    let mut out = vec![PacketRef::default(); 4096];
    let (mut calls, mut released, mut late, mut early) = (0u64, 0u64, 0u64, 0u64);
    let mut now = start;
    while let Some(due) = q.next_due() {
        now = now.max(due.as_nanos());
        if now >= end {
            break;
        }
        let n = q.dequeue(Timestamp::from_nanos(now), &mut out);
        let measuring = now >= measure_from;
        if measuring && n > 0 {
            calls += 1;
            released += n as u64;
        }
        for pkt in &out[..n] {
            let e = edt_of[pkt.id as usize];
            if measuring {
                late = late.max(now.saturating_sub(e));
                early = early.max(e.saturating_sub(now));
            }
            let f = pkt.flow.0 as usize;
            last[f] += gap;
            let id = edt_of.len() as u32;
            edt_of.push(last[f]);
            let new = PacketRef::new(id, pkt.flow, ClassId(0), p.packet_len);
            let _ = q.enqueue(
                Timestamp::from_nanos(now),
                Timestamp::from_nanos(last[f]),
                new,
            );
        }
    }
    BatchingRow {
        structure: q.name().to_string(),
        destinations: d,
        packets_per_dequeue: released as f64 / calls.max(1) as f64,
        dequeue_calls: calls,
        max_late_ns: late,
        max_early_ns: early,
    }
}
