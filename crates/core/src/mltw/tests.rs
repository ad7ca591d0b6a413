//! Unit tests of the multi-level timing wheel: placement (Algorithm 1), release order and bounds
//! (Algorithm 2), rate estimation (§IV-D), batching, memory, and a differential test against a
//! sorted-vector model.

use super::*;
use crate::packet::ClassId;
use proptest::prelude::*;

const MTU: u16 = 1500;

fn pkt(id: u32, flow: u32) -> PacketRef {
    PacketRef::new(id, FlowId(flow), ClassId(0), MTU)
}

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// A small deterministic RNG (splitmix64), one per test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A config without estimation, so levels change only through `set_rate`.
fn fixed(min_granularity_log2: u32, levels: usize, slots_per_level: usize) -> MltwConfig {
    MltwConfig {
        min_granularity_log2,
        levels,
        slots_per_level,
        estimate_every: 0,
        pool_packets: 4096,
        ..Default::default()
    }
}

/// Dequeues at every `next_due` until empty; returns (release time, packet) pairs and batch sizes.
fn drain_event_driven(q: &mut Mltw) -> (Vec<(u64, PacketRef)>, Vec<usize>) {
    let mut out = [PacketRef::default(); 256];
    let (mut got, mut batches) = (Vec::new(), Vec::new());
    while let Some(due) = q.next_due() {
        let now = due.max(q.front());
        let n = q.dequeue(now, &mut out);
        assert!(n > 0, "next_due {due:?} released nothing");
        got.extend(out[..n].iter().map(|p| (now.as_nanos(), *p)));
        batches.push(n);
        q.invariants();
    }
    (got, batches)
}

#[test]
fn name_and_defaults() {
    let c = MltwConfig::default();
    assert_eq!(c.min_granularity(), Duration::from_nanos(1));
    assert_eq!((c.levels, c.slots_per_level, c.buckets), (64, 1024, 512));
    assert_eq!((c.mtu, c.ewma_shift, c.estimate_every), (1500, 2, 5));
    assert_eq!(c.initial_rate, Rate::gbps(20));
    assert_eq!(c.horizon_policy, HorizonPolicy::Clamp);
    let q = Mltw::new(MltwConfig {
        pool_packets: 0,
        ..c
    });
    assert_eq!(q.name(), "mltw");
    assert!(q.is_empty());
    assert_eq!(q.next_due(), None);
    // 20 Gbit/s: an MTU every 600 ns, level floor(log2 600) = 9.
    assert_eq!(q.level_for(FlowId(3)), 9);
    assert_eq!(
        q.level_granularity_for(FlowId(3)),
        Duration::from_nanos(512)
    );
    assert_eq!(q.horizon(), Duration::MAX);
}

#[test]
fn level_choice_from_rate() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    let f = FlowId(1);
    let cases = [
        (Rate::gbps(100), 6),                 // 120 ns
        (Rate::gbps(12), 9),                  // 1000 ns
        (Rate::gbps(10), 10),                 // 1200 ns
        (Rate::gbps(1), 13),                  // 12 000 ns
        (Rate::mbps(625), 14),                // 19 200 ns
        (Rate::kbps(10), 30),                 // 1.2 s (§IV-B: the coarsest of 32 queues)
        (Rate::from_bps(11_718_750_000), 10), // exactly 1024 ns
        (Rate::from_bps(11_718_750_001), 9),  // just under 1024 ns
        (Rate::from_bps(0), 0),               // paused: no gap to round within
        (Rate::from_bps(u64::MAX), 0),
    ];
    for (rate, level) in cases {
        q.set_rate(f, rate);
        assert_eq!(q.level_for(f), level, "{rate}");
        assert_eq!(q.estimated_rate(f), rate);
        assert_eq!(q.level_granularity_for(f), Duration::from_nanos(1 << level));
    }
    // Against floor(log2(MTU × 8e9 / R / g_min)) computed with a division, for g_min = 16 ns.
    let q = Mltw::new(fixed(4, 20, 64));
    let mut rng = Rng(1);
    for _ in 0..10_000 {
        let bits = 1 + rng.below(40);
        let bps = 1 + rng.below(1 << bits);
        let gap_in_gmin = 1500u128 * 8 * 1_000_000_000 / (bps as u128 * 16);
        let want = if gap_in_gmin == 0 {
            0
        } else {
            gap_in_gmin.ilog2().min(19)
        };
        assert_eq!(q.geo.rate_level(bps), want, "{bps} bit/s");
    }
}

/// FlowBundler Fig. 6, with g_min = 1024 ns standing in for 1 µs: flows at 12, 6 and 3 Gbit/s
/// (scaled so their MTU gaps are 1, 2 and 4 g_min) go to queues 1, 2, 3, and the packets due at
/// the same instant share the slot of the coarsest queue.
#[test]
fn fig6_accumulates_into_coarsest_aligned_slot() {
    let mut q = Mltw::new(fixed(10, 3, 16));
    let flows = [
        (FlowId(1), Rate::from_bps(11_718_750_000), 1024),
        (FlowId(2), Rate::from_bps(5_859_375_000), 2048),
        (FlowId(3), Rate::from_bps(2_929_687_500), 4096),
    ];
    let buckets: Vec<_> = flows.iter().map(|f| bucket_index(f.0, 511)).collect();
    assert!(buckets[0] != buckets[1] && buckets[1] != buckets[2] && buckets[0] != buckets[2]);
    let mut id = 0;
    for (level, &(flow, rate, gap)) in flows.iter().enumerate() {
        q.set_rate(flow, rate);
        assert_eq!(q.level_for(flow), level);
        for k in 1..=8192 / gap {
            let edt = ts(k * gap);
            let p = q.placement(ts(0), flow, edt).unwrap();
            assert_eq!(p.rounding_level, level);
            assert_eq!(p.slot_start, edt);
            // 4 µs and 8 µs land in queue 3, 2 µs and 6 µs in queue 2, odd µs in queue 1.
            let want = match (k * gap / 1024) % 4 {
                0 => 2,
                2 => 1,
                _ => 0,
            };
            assert_eq!(p.storage_level, want, "flow {flow:?} at {edt:?}");
            q.enqueue(ts(0), edt, pkt(id, flow.0)).unwrap();
            id += 1;
            q.invariants();
        }
    }
    // The 4 µs slot lives in queue 3 (level 2), slot 1, and holds all three flows.
    let idx = q.index(2, 1);
    assert_eq!(q.pool.count(&q.slots[idx]), 3);
    let (got, batches) = drain_event_driven(&mut q);
    assert_eq!(batches, [1, 2, 1, 3, 1, 2, 1, 3]);
    let times: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(&times[..4], &[1024, 2048, 2048, 3072]);
    assert_eq!(q.counters().nonempty_dequeues, 8);
}

#[test]
fn batch_dequeue_returns_the_whole_slot() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    // 40 destinations at 1 Gbit/s (level 13, 8192 ns), EDTs spread inside one slot.
    for i in 0..40u32 {
        q.set_rate(FlowId(i), Rate::gbps(1));
        q.enqueue(ts(0), ts(8192 + 200 * i as u64), pkt(i, i))
            .unwrap();
    }
    assert_eq!(q.next_due(), Some(ts(8192)));
    let mut out = [PacketRef::default(); 64];
    assert_eq!(q.dequeue(ts(8191), &mut out), 0);
    assert_eq!(q.dequeue(ts(8192), &mut out), 40);
    assert!(out[..40].iter().map(|p| p.id).eq(0..40));
    assert_eq!(q.counters().nonempty_dequeues, 1);
    assert!(q.is_empty());
    q.invariants();
}

#[test]
fn a_full_out_resumes_on_the_next_call() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    for i in 0..40u32 {
        q.set_rate(FlowId(i), Rate::gbps(1));
        q.enqueue(ts(0), ts(8192 + i as u64), pkt(i, i)).unwrap();
    }
    q.enqueue(ts(0), ts(20_000), pkt(99, 0)).unwrap();
    let mut out = [PacketRef::default(); 16];
    let mut ids = Vec::new();
    for want in [16, 16, 8, 0] {
        let n = q.dequeue(ts(10_000), &mut out);
        assert_eq!(n, want);
        ids.extend(out[..n].iter().map(|p| p.id));
        q.invariants();
    }
    assert!(ids.into_iter().eq(0..40));
    assert_eq!(q.len(), 1);
    assert_eq!(q.dequeue(ts(20_000), &mut out), 1);
}

#[test]
fn fifo_within_a_slot_and_within_a_flow() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    let mut rng = Rng(7);
    // Four flows at 100 Mbit/s (level 16, 65 536 ns); EDTs in shuffled order inside one slot.
    for f in 0..4 {
        q.set_rate(FlowId(f), Rate::mbps(100));
    }
    let slot = 3 * 65_536;
    for i in 0..200u32 {
        let edt = slot + rng.below(65_536);
        q.enqueue(ts(0), ts(edt), pkt(i, i % 4)).unwrap();
    }
    // Then each flow's later packets, slot after slot.
    for i in 200..400u32 {
        let edt = slot + 65_536 * (1 + (i as u64 - 200) / 4);
        q.enqueue(ts(0), ts(edt), pkt(i, i % 4)).unwrap();
    }
    let (got, _) = drain_event_driven(&mut q);
    assert!(got.iter().map(|g| g.1.id).eq(0..400));
}

/// Release bounds: never before floor(edt / g_L) × g_L; with polling every `poll` ns
/// (`poll <= g_L`) never more than `poll` after the EDT.
#[test]
fn nothing_leaves_before_its_slot_floor_nor_late() {
    let mut q = Mltw::new(MltwConfig {
        estimate_every: 5, // levels move under the test's feet; placements are recorded
        pool_packets: 1 << 14,
        ..Default::default()
    });
    let mut rng = Rng(11);
    let rates = [
        Rate::mbps(100),
        Rate::gbps(1),
        Rate::gbps(9),
        Rate::gbps(40),
    ];
    for f in 0..32 {
        q.set_rate(FlowId(f), rates[f as usize % 4]);
    }
    let poll = 64; // ns, finer than any level these rates map to (40 Gbit/s: level 8)
    let mut placed = std::collections::HashMap::new();
    let mut out = [PacketRef::default(); 512];
    let mut now = 1_000_000u64;
    let mut id = 0u32;
    let mut released = 0;
    for step in 0..40_000 {
        if step % 3 == 0 {
            let flow = rng.below(32) as u32;
            let edt = now + rng.below(200_000);
            let p = q.placement(ts(now), FlowId(flow), ts(edt)).unwrap();
            // The level in force for this packet (the estimator, which runs at enqueue, may
            // move it for the next one).
            let level = q.level_for(FlowId(flow));
            q.enqueue(ts(now), ts(edt), pkt(id, flow)).unwrap();
            let g = p.granularity.as_nanos();
            assert_eq!(p.slot_start.as_nanos(), edt / g * g);
            assert!(p.rounding_level >= level);
            placed.insert(id, (edt, p));
            id += 1;
        }
        now += poll;
        let n = q.dequeue(ts(now), &mut out);
        for r in &out[..n] {
            let (edt, p) = placed[&r.id];
            let g = p.granularity.as_nanos();
            assert!(now >= edt / g * g, "released {now} before floor({edt}/{g})");
            // Polled every `poll` <= g ns: the first poll at or after the slot start (and
            // after the enqueue, which happened at or before the EDT).
            assert!(now <= edt + poll, "released {now} late for {edt}");
            released += 1;
        }
    }
    assert!(released > 10_000);
    assert_eq!(q.counters().past_due, 0);
    q.invariants();
}

#[test]
fn past_due_goes_to_the_front() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    let mut out = [PacketRef::default(); 8];
    assert_eq!(q.dequeue(ts(1_000_000), &mut out), 0);
    assert_eq!(q.front(), ts(1_000_000));
    q.enqueue(ts(1_000_000), ts(500_000), pkt(1, 1)).unwrap();
    assert_eq!(q.counters().past_due, 1);
    assert!(q.next_due().unwrap() <= ts(1_000_000));
    assert_eq!(q.dequeue(ts(1_000_000), &mut out), 1);
    // An idle wheel's front follows `now` on enqueue too.
    q.enqueue(ts(5_000_000), ts(4_000_000), pkt(2, 1)).unwrap();
    assert_eq!(q.counters().past_due, 2);
    assert_eq!(q.front(), ts(5_000_000));
    q.invariants();
}

#[test]
fn far_edts_descend_to_the_finest_covering_level() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    let f = FlowId(5);
    q.set_rate(f, Rate::gbps(100)); // level 6: 64 ns × 1024 slots = 65.5 µs of ring
    let now = 123_456_789;
    q.enqueue(ts(now), ts(now), pkt(0, 5)).unwrap(); // pins the front at `now`
    let mut rng = Rng(3);
    for _ in 0..20_000 {
        let bits = rng.below(40);
        let edt = now + rng.below(1 << bits);
        let p = q.placement(ts(now), f, ts(edt)).unwrap();
        // Brute force: the finest level >= 6 whose ring window from the front holds `edt`.
        let want = (6..64).find(|&l| (edt >> l) - (now >> l) < 1024).unwrap();
        assert_eq!(p.rounding_level, want, "edt {edt}");
        let g = p.granularity.as_nanos();
        assert_eq!(p.slot_start.as_nanos(), edt / g * g);
        assert!(!p.clamped);
    }
    // One millisecond ahead: level 10, released at its slot start and not before.
    let edt = now + 1_000_000;
    q.enqueue(ts(now), ts(edt), pkt(1, 5)).unwrap();
    let mut out = [PacketRef::default(); 4];
    assert_eq!(q.dequeue(ts(now), &mut out), 1);
    assert_eq!(q.next_due(), Some(ts(edt / 1024 * 1024)));
    assert_eq!(q.dequeue(ts(edt / 1024 * 1024 - 1), &mut out), 0);
    assert_eq!(q.dequeue(ts(edt / 1024 * 1024), &mut out), 1);
    assert_eq!(out[0].id, 1);
    q.invariants();
}

#[test]
fn beyond_the_top_clamp_or_reject() {
    // Four levels of 16 slots from 1 ns: the top (8 ns) covers 128 ns.
    let small = |policy| MltwConfig {
        min_granularity_log2: 0,
        levels: 4,
        slots_per_level: 16,
        horizon_policy: policy,
        ..fixed(0, 4, 16)
    };
    let mut q = Mltw::new(small(HorizonPolicy::Clamp));
    assert_eq!(q.horizon(), Duration::from_nanos(128));
    let now = 1000;
    q.enqueue(ts(now), ts(now + 10_000), pkt(1, 1)).unwrap();
    assert_eq!(q.counters().clamped_beyond_horizon, 1);
    let last = (now / 8 + 15) * 8;
    assert_eq!(q.next_due(), Some(ts(last)));
    let mut out = [PacketRef::default(); 4];
    assert_eq!(q.dequeue(ts(last - 1), &mut out), 0);
    assert_eq!(q.dequeue(ts(last), &mut out), 1);
    q.invariants();

    let mut q = Mltw::new(small(HorizonPolicy::Reject));
    let p = pkt(2, 1);
    let err = q.enqueue(ts(now), ts(now + 10_000), p).unwrap_err();
    assert_eq!(
        err,
        Rejected {
            pkt: p,
            reason: RejectReason::BeyondHorizon
        }
    );
    assert_eq!(q.counters().rejected_beyond_horizon, 1);
    assert!(q.is_empty());
    // The last covered instant is still accepted.
    q.enqueue(ts(now), ts(last + 7), p).unwrap();
    assert!(q.enqueue(ts(now), ts(last + 8), p).is_err());
    q.invariants();
}

#[test]
fn pool_exhaustion_hands_the_packet_back() {
    let mut q = Mltw::new(MltwConfig {
        pool_packets: 0,
        ..fixed(0, 64, 1024)
    });
    let p = pkt(1, 1);
    let err = q.enqueue(ts(0), ts(10), p).unwrap_err();
    assert_eq!(
        err,
        Rejected {
            pkt: p,
            reason: RejectReason::PoolExhausted
        }
    );
    assert_eq!(q.counters().rejected_pool_exhausted, 1);
    assert_eq!(q.next_due(), None);
    q.invariants();

    // Two slots of packets fit in `nodes_for(2, slots)` = 1 + 2 nodes; fill one slot to the brim.
    let mut q = Mltw::new(MltwConfig {
        pool_packets: 2,
        ..fixed(0, 64, 1024)
    });
    let mut accepted = 0;
    let rejected = loop {
        match q.enqueue(ts(0), ts(5000), pkt(accepted, 1)) {
            Ok(()) => accepted += 1,
            Err(r) => break r,
        }
    };
    assert_eq!(accepted as usize, 3 * crate::pool::REFS_PER_NODE);
    assert_eq!(rejected.reason, RejectReason::PoolExhausted);
    assert_eq!(rejected.pkt.id, accepted);
    assert_eq!(q.len(), accepted as usize);
    assert_eq!(q.packet_bytes(), 3 * NODE_BYTES);
    q.invariants();
    let mut out = [PacketRef::default(); 64];
    assert_eq!(q.dequeue(ts(5000), &mut out), accepted as usize);
    assert_eq!(q.packet_bytes(), 0);
    q.enqueue(ts(5000), ts(6000), pkt(100, 1)).unwrap();
}

/// Runs one paced flow per rate (one packet queued per flow), polling at `next_due`, from the
/// wheel's current time. Each flow's EDTs are `phase + k × gap(rate)`; `on_batch` sees each batch.
fn paced_run(
    q: &mut Mltw,
    rates: &[Rate],
    phases: &[u64],
    packets_per_flow: u64,
    mut on_batch: impl FnMut(&Mltw, u64, &[PacketRef]),
) {
    let mut next_edt: Vec<u64> = phases.to_vec();
    let mut sent = vec![0u64; rates.len()];
    let start = ts(q.last_now);
    for (f, &e) in next_edt.iter().enumerate() {
        q.enqueue(start, ts(e), pkt(0, f as u32)).unwrap();
    }
    let mut out = [PacketRef::default(); 256];
    while let Some(due) = q.next_due() {
        let now = due.max(q.front()).as_nanos();
        let n = q.dequeue(ts(now), &mut out);
        assert!(n > 0);
        on_batch(q, now, &out[..n]);
        for p in &out[..n] {
            let f = p.flow.0 as usize;
            sent[f] += 1;
            if sent[f] < packets_per_flow {
                next_edt[f] += rates[f].transmit_time(MTU as u64).as_nanos();
                q.enqueue(ts(now), ts(next_edt[f]), pkt(sent[f] as u32, f as u32))
                    .unwrap();
            }
        }
    }
}

#[test]
fn rate_estimate_converges_to_a_paced_flow() {
    let mut q = Mltw::new(MltwConfig {
        pool_packets: 1024,
        ..Default::default()
    });
    let f = FlowId(0);
    assert_eq!(q.estimated_rate(f), Rate::gbps(20));
    let mut samples = Vec::new();
    paced_run(&mut q, &[Rate::mbps(2500)], &[777], 600, |q, _, _| {
        samples.push(q.estimated_rate(FlowId(0)).bps());
    });
    // 20 Gbit/s decays by 0.75 per estimate: within 2% after ~60 estimates = 300 packets.
    let tail = &samples[400..];
    for &r in tail {
        assert!((r as f64 / 2.5e9 - 1.0).abs() < 0.05, "{r}");
    }
    let mean = tail.iter().sum::<u64>() as f64 / tail.len() as f64;
    assert!((mean / 2.5e9 - 1.0).abs() < 0.02, "{mean}");
    // 2.5 Gbit/s is an MTU every 4800 ns: level 12.
    assert_eq!(q.level_for(f), 12);
}

#[test]
fn rate_estimate_follows_a_rate_change() {
    let mut q = Mltw::new(MltwConfig {
        pool_packets: 1024,
        ..Default::default()
    });
    paced_run(&mut q, &[Rate::gbps(5)], &[0], 300, |_, _, _| {});
    assert_eq!(q.level_for(FlowId(0)), 11); // 2400 ns
    let start = q.front().as_nanos() + 10_000;
    paced_run(&mut q, &[Rate::mbps(500)], &[start], 300, |_, _, _| {});
    let r = q.estimated_rate(FlowId(0)).bps() as f64;
    assert!((r / 5e8 - 1.0).abs() < 0.05, "{r}");
    assert_eq!(q.level_for(FlowId(0)), 14); // 24 000 ns
    q.invariants();
}

/// §IV-A's premise: 16 destinations at equal rates, polled at `next_due`, leave in inter-flow
/// batches, and no flow ever sends more than two packets in one batch (§IV-B footnote 5).
#[test]
fn sixteen_destinations_batch_well_above_five() {
    for explicit in [false, true] {
        let mut q = Mltw::new(MltwConfig {
            pool_packets: 4096,
            ..Default::default()
        });
        let mut rng = Rng(42);
        let rates = [Rate::mbps(625); 16];
        let gap = rates[0].transmit_time(MTU as u64).as_nanos();
        let phases: Vec<u64> = (0..16).map(|_| 1_000 + rng.below(gap)).collect();
        if explicit {
            for f in 0..16 {
                q.set_rate(FlowId(f), rates[0]);
            }
        }
        let mut worst_burst = 0;
        paced_run(&mut q, &rates, &phases, 2000, |_, _, batch| {
            let mut per_flow = [0; 16];
            for p in batch {
                per_flow[p.flow.0 as usize] += 1;
            }
            worst_burst = worst_burst.max(*per_flow.iter().max().unwrap());
        });
        let c = q.counters();
        let per_dequeue = c.dequeued as f64 / c.nonempty_dequeues as f64;
        assert_eq!(c.dequeued, 32_000);
        assert!(
            per_dequeue > 10.0,
            "explicit {explicit}: {per_dequeue} per dequeue"
        );
        assert!(worst_burst <= 2, "{worst_burst}");
        for f in 0..16 {
            assert_eq!(q.level_for(FlowId(f)), 14); // 19.2 µs per MTU -> 16 384 ns
        }
    }
}

#[test]
fn default_structure_fits_in_one_and_a_half_megabytes() {
    let bytes = structure_bytes(&MltwConfig::default());
    // 64 × 1024 slot heads of 8 B = 512 KiB, + 8.3 KiB bitmap + 12 KiB buckets + the struct.
    assert!(bytes <= 1_500_000, "{bytes}");
    assert!(bytes >= 64 * 1024 * 8);
}

#[test]
fn structure_bytes_matches_a_real_instance() {
    for config in [
        MltwConfig::default(),
        fixed(3, 20, 100),
        MltwConfig {
            buckets: 3,
            ..fixed(0, 1, 2)
        },
    ] {
        let empty = Mltw::new(MltwConfig {
            pool_packets: 0,
            ..config
        });
        assert_eq!(empty.memory_bytes(), structure_bytes(&config));
        let q = Mltw::new(MltwConfig {
            pool_packets: 1000,
            ..config
        });
        let c = q.config();
        let nodes = NodePool::nodes_for(1000, c.levels * c.slots_per_level);
        assert_eq!(
            q.memory_bytes(),
            structure_bytes(&config) + nodes * NODE_BYTES
        );
        assert_eq!(q.packet_bytes(), 0);
    }
}

#[test]
fn next_due_jumps_over_long_idle_gaps() {
    let mut q = Mltw::new(fixed(0, 64, 1024));
    q.set_rate(FlowId(1), Rate::gbps(40)); // level 8, 256 ns
    let mut out = [PacketRef::default(); 4];
    let mut now = 0;
    for i in 0..100u32 {
        // Every EDT is tens of ring turns of level 8 after the previous one.
        let edt = now + 30_000_000 + 7 * i as u64;
        q.enqueue(ts(now), ts(edt), pkt(i, 1)).unwrap();
        let due = q.next_due().unwrap().as_nanos();
        assert!(due <= edt && due > now);
        assert_eq!(q.dequeue(ts(due - 1), &mut out), 0);
        assert_eq!(q.dequeue(ts(due), &mut out), 1);
        assert_eq!(out[0].id, i);
        now = due;
        q.invariants();
    }
}

#[test]
fn odd_configurations_are_normalized_not_fatal() {
    let odd = [
        MltwConfig {
            min_granularity_log2: 200,
            levels: 0,
            slots_per_level: 0,
            buckets: 0,
            mtu: 0,
            ewma_shift: 99,
            estimate_every: u32::MAX,
            pool_packets: 16,
            ..Default::default()
        },
        MltwConfig {
            levels: 1000,
            slots_per_level: 3,
            buckets: 1000,
            initial_rate: Rate::from_bps(0),
            estimate_every: 1,
            pool_packets: 16,
            ..Default::default()
        },
    ];
    for config in odd {
        let mut q = Mltw::new(config);
        let c = *q.config();
        assert!(c.levels >= 1 && c.levels + c.min_granularity_log2 as usize <= 64);
        assert!(c.slots_per_level.is_power_of_two() && c.buckets.is_power_of_two());
        let mut out = [PacketRef::default(); 8];
        for (i, t) in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]
            .into_iter()
            .enumerate()
        {
            let _ = q.enqueue(ts(t), ts(t), pkt(i as u32, i as u32));
            let _ = q.enqueue(ts(t), Timestamp::MAX, pkt(i as u32, 9));
            q.dequeue(ts(t), &mut out);
            q.invariants();
        }
        q.dequeue(Timestamp::MAX, &mut out);
        q.invariants();
    }
}

/// One operation of the differential test.
#[derive(Clone, Debug)]
enum Op {
    Enqueue { flow: u32, ahead: i64, len: u16 },
    Advance(u64),
    Dequeue(usize),
    SetRate { flow: u32, bps: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..6, -300i64..3000, 1u16..1500)
            .prop_map(|(flow, ahead, len)| Op::Enqueue { flow, ahead, len }),
        2 => (0u64..400).prop_map(Op::Advance),
        2 => (0usize..12).prop_map(Op::Dequeue),
        1 => (0u32..6, 0u64..200_000_000_000).prop_map(|(flow, bps)| Op::SetRate { flow, bps }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Differential test against a plain model: queued packets sorted by (slot start, enqueue
    /// order); a dequeue at `now` returns the longest due prefix that fits.
    #[test]
    fn matches_a_sorted_model(
        gmin in 0u32..4,
        levels in 1usize..7,
        slot_bits in 1u32..5,
        reject in any::<bool>(),
        estimate_every in prop::sample::select(vec![0u32, 1, 5]),
        pool_packets in prop_oneof![0usize..4, 4usize..60],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut q = Mltw::new(MltwConfig {
            min_granularity_log2: gmin,
            levels,
            slots_per_level: 1 << slot_bits,
            horizon_policy: if reject { HorizonPolicy::Reject } else { HorizonPolicy::Clamp },
            estimate_every,
            pool_packets,
            mtu: 100,
            initial_rate: Rate::gbps(1),
            ..Default::default()
        });
        let s = 1u64 << slot_bits;
        let mut model: Vec<(u64, u32, PacketRef)> = Vec::new();
        let (mut now, mut seq) = (50_000u64, 0u32);
        let mut out = [PacketRef::default(); 12];
        for op in ops {
            match op {
                Op::Enqueue { flow, ahead, len } => {
                    let edt = now.saturating_add_signed(ahead);
                    let p = PacketRef::new(seq, FlowId(flow), ClassId(0), len);
                    let want = q.placement(ts(now), FlowId(flow), ts(edt));
                    let rate_level = q.level_for(FlowId(flow)) as u32;
                    match q.enqueue(ts(now), ts(edt), p) {
                        Ok(()) => {
                            let pl = want.unwrap();
                            let front = q.front().as_nanos();
                            let t = edt.max(front);
                            // The finest level >= the rate level whose window holds t.
                            let shift = |l: u32| gmin + l;
                            let fits = |l: u32| (t >> shift(l)) - (front >> shift(l)) < s;
                            let top = levels as u32 - 1;
                            let exact = (rate_level..=top).find(|&l| fits(l));
                            prop_assert_eq!(pl.past_due, edt < front);
                            match exact {
                                Some(l) => {
                                    prop_assert!(!pl.clamped);
                                    prop_assert_eq!(pl.rounding_level, l as usize);
                                    let g = pl.granularity.as_nanos();
                                    prop_assert_eq!(pl.slot_start.as_nanos(), t / g * g);
                                }
                                None => {
                                    prop_assert!(!reject && pl.clamped);
                                    let last = ((front >> shift(top)) + s - 1) << shift(top);
                                    prop_assert_eq!(pl.slot_start.as_nanos(), last);
                                }
                            }
                            model.push((pl.slot_start.as_nanos(), seq, p));
                        }
                        Err(r) => {
                            prop_assert_eq!(r.pkt, p);
                            match r.reason {
                                RejectReason::BeyondHorizon => {
                                    prop_assert!(reject);
                                    prop_assert_eq!(want, Err(RejectReason::BeyondHorizon));
                                }
                                RejectReason::PoolExhausted => prop_assert!(want.is_ok()),
                                other => prop_assert!(false, "unexpected {:?}", other),
                            }
                        }
                    }
                    seq += 1;
                }
                Op::Advance(d) => now += d,
                Op::Dequeue(k) => {
                    model.sort_by_key(|m| (m.0, m.1));
                    let due = model.iter().take_while(|m| m.0 <= now).count().min(k);
                    let want: Vec<PacketRef> = model.drain(..due).map(|m| m.2).collect();
                    let n = q.dequeue(ts(now), &mut out[..k]);
                    prop_assert_eq!(&out[..n], &want[..]);
                }
                Op::SetRate { flow, bps } => q.set_rate(FlowId(flow), Rate::from_bps(bps)),
            }
            q.invariants();
            prop_assert_eq!(q.len(), model.len());
            let earliest = model.iter().map(|m| m.0).min();
            prop_assert_eq!(q.next_due().map(|t| t.as_nanos()), earliest);
        }
        let c = q.counters();
        prop_assert_eq!(c.enqueued - c.dequeued, q.len() as u64);
    }
}
