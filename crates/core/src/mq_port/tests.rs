//! Unit and property tests of [`MqPort`]'s scheduling and buffer against plain reference models:
//! Shreedhar & Varghese's round loop for DWRR, runs of `weight` packets for WRR, and per-queue
//! `VecDeque`s for conservation, FIFO order, priority and byte accounting. Marking is tested in
//! `mq_ecn/tests.rs`.

use super::*;
use crate::packet::{ClassId, FlowId};
use proptest::prelude::*;

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn pkt(id: u32, queue: u16, len: u16) -> PacketRef {
    PacketRef::new(id, FlowId(id), ClassId(u32::from(queue)), len)
}

fn port(scheduling: Scheduling, queues: Vec<QueueConfig>, buffer_bytes: u64) -> MqPort {
    MqPort::new(MqPortConfig {
        scheduling,
        queues,
        buffer_bytes,
        ..Default::default()
    })
    .unwrap()
}

fn strict() -> QueueConfig {
    QueueConfig {
        quantum_bytes: 1500,
        strict_priority: true,
    }
}

#[test]
fn dwrr_two_queues_alternate_by_quantum() {
    let q = vec![QueueConfig::weighted(3000), QueueConfig::weighted(1500)];
    let mut port = port(Scheduling::Dwrr, q, 300_000);
    for id in 0..6 {
        port.enqueue(t(0), pkt(id, 0, 1500), true).unwrap();
        port.enqueue(t(0), pkt(100 + id, 1, 1500), true).unwrap();
    }
    port.invariants();
    let order: Vec<usize> = (0..9).map(|i| port.dequeue(t(i)).unwrap().queue).collect();
    assert_eq!(order, [0, 0, 1, 0, 0, 1, 0, 0, 1]);
    port.invariants();
    assert_eq!(port.counters().queues[0].turns, 3);
    assert_eq!(port.counters().queues[1].turns, 3);
}

#[test]
fn dwrr_carries_the_deficit_and_resets_it_when_empty() {
    // Quantum 1500, packets of 1000: turn 1 sends one (500 left), turn 2 two (0 left).
    let q = vec![QueueConfig::weighted(1500), QueueConfig::weighted(1500)];
    let mut port = port(Scheduling::Dwrr, q, 300_000);
    for id in 0..4 {
        port.enqueue(t(0), pkt(id, 0, 1000), true).unwrap();
    }
    for id in 0..4 {
        port.enqueue(t(0), pkt(10 + id, 1, 1500), true).unwrap();
    }
    let order: Vec<u32> = (0..6).map(|_| port.dequeue(t(0)).unwrap().pkt.id).collect();
    assert_eq!(order, [0, 10, 1, 2, 11, 3]);
    // Queue 0 emptied on its third turn: off the list, deficit 0 (checked by invariants).
    port.invariants();
    assert_eq!(port.queue_packets(0), 0);
    assert_eq!(port.dequeue(t(0)).unwrap().pkt.id, 12);
}

#[test]
fn wrr_serves_weight_packets_whatever_their_size() {
    let q = vec![QueueConfig::weighted(3000), QueueConfig::weighted(1500)];
    let mut port = port(Scheduling::Wrr, q, 300_000);
    for id in 0..6 {
        port.enqueue(t(0), pkt(id, 0, 100), true).unwrap();
        port.enqueue(t(0), pkt(100 + id, 1, 1500), true).unwrap();
    }
    let order: Vec<usize> = (0..9).map(|_| port.dequeue(t(0)).unwrap().queue).collect();
    assert_eq!(order, [0, 0, 1, 0, 0, 1, 0, 0, 1]);
}

#[test]
fn strict_priority_first_lowest_index_first() {
    let q = vec![QueueConfig::weighted(1500), strict(), strict()];
    let mut port = port(Scheduling::Dwrr, q, 300_000);
    port.enqueue(t(0), pkt(1, 0, 1500), true).unwrap();
    port.enqueue(t(0), pkt(2, 2, 1500), true).unwrap();
    port.enqueue(t(0), pkt(3, 1, 1500), true).unwrap();
    port.enqueue(t(0), pkt(4, 2, 1500), true).unwrap();
    port.invariants();
    let order: Vec<u32> = (0..4).map(|_| port.dequeue(t(0)).unwrap().pkt.id).collect();
    assert_eq!(order, [3, 2, 4, 1]);
    assert!(port.dequeue(t(0)).is_none());
    assert_eq!(port.counters().queues[1].turns, 0);
    port.invariants();
}

#[test]
fn refusals_are_handed_back_and_counted() {
    let q = vec![QueueConfig::weighted(1500); 2];
    let mut port = port(Scheduling::Dwrr, q, 3_000);
    port.enqueue(t(0), pkt(1, 0, 1500), true).unwrap();
    port.enqueue(t(0), pkt(2, 1, 1400), true).unwrap();
    assert_eq!(
        port.enqueue(t(0), pkt(3, 1, 101), true),
        Err(Rejected {
            pkt: pkt(3, 1, 101),
            reason: MqRejectReason::BufferFull
        })
    );
    port.enqueue(t(0), pkt(4, 1, 100), true).unwrap(); // exactly full
    assert_eq!(
        port.enqueue(t(0), pkt(5, 2, 100), true),
        Err(Rejected {
            pkt: pkt(5, 2, 100),
            reason: MqRejectReason::UnknownQueue
        })
    );
    assert_eq!(
        port.enqueue(t(0), pkt(6, 0, 1501), true),
        Err(Rejected {
            pkt: pkt(6, 0, 1501),
            reason: MqRejectReason::TooLong
        })
    );
    let c = port.counters();
    assert_eq!((c.queues[1].buffer_drops, c.port.buffer_drops), (1, 1));
    assert_eq!((c.unknown_queue, c.too_long), (1, 1));
    assert_eq!(port.total_bytes(), 3_000);
    port.invariants();
}

#[test]
fn configurations_are_checked() {
    let bad = |cfg: MqPortConfig| MqPort::new(cfg).err();
    let base = MqPortConfig::default;
    assert_eq!(
        bad(MqPortConfig {
            queues: vec![],
            ..base()
        }),
        Some(MqConfigError::QueueCount)
    );
    assert_eq!(
        bad(MqPortConfig {
            queues: vec![QueueConfig::weighted(1500); MAX_QUEUES + 1],
            ..base()
        }),
        Some(MqConfigError::QueueCount)
    );
    assert_eq!(
        bad(MqPortConfig {
            queues: vec![QueueConfig::weighted(1500), QueueConfig::weighted(1499)],
            ..base()
        }),
        Some(MqConfigError::QuantumBelowMtu(1))
    );
    assert_eq!(
        bad(MqPortConfig {
            line_rate: Rate::from_bps(0),
            ..base()
        }),
        Some(MqConfigError::LineRate)
    );
    assert_eq!(
        bad(MqPortConfig {
            mtu_bytes: 70_000,
            ..base()
        }),
        Some(MqConfigError::Mtu)
    );
    assert_eq!(
        bad(MqPortConfig {
            buffer_bytes: MAX_BUFFER_BYTES + 1,
            ..base()
        }),
        Some(MqConfigError::BufferTooLarge)
    );
    assert!(MqPort::new(MqPortConfig {
        queues: vec![QueueConfig::weighted(1500); MAX_QUEUES],
        ..base()
    })
    .is_ok());
}

#[test]
fn the_pool_holds_the_whole_buffer_in_one_queue() {
    let q = vec![QueueConfig::weighted(1500); 4];
    let mut port = port(Scheduling::Dwrr, q, 64 * 100);
    for id in 0..100 {
        port.enqueue(t(0), pkt(id, 3, 64), true).unwrap();
    }
    assert_eq!(
        port.enqueue(t(0), pkt(100, 0, 64), true)
            .unwrap_err()
            .reason,
        MqRejectReason::BufferFull
    );
    assert_eq!(port.counters().pool_exhausted, 0);
    port.invariants();
    for id in 0..100 {
        assert_eq!(port.dequeue(t(0)).unwrap().pkt.id, id);
    }
    assert!(port.is_empty());
}

/// Shreedhar & Varghese's DWRR (SIGCOMM '95, Figure 2) over queues in index order, run until a
/// queue empties: the order of (queue, packet id) departures and the queue whose turn ended after
/// each. WRR: `packets_per_turn` instead of a byte deficit.
fn reference_round_robin(
    queues: &[Vec<u16>],
    credit: &[u64],
    wrr: bool,
) -> Vec<(usize, u32, bool)> {
    let mut fifo: Vec<std::collections::VecDeque<(u32, u16)>> = queues
        .iter()
        .enumerate()
        .map(|(q, lens)| {
            lens.iter()
                .enumerate()
                .map(|(k, &l)| ((q * 10_000 + k) as u32, l))
                .collect()
        })
        .collect();
    let mut deficit = vec![0u64; queues.len()];
    let mut out = Vec::new();
    loop {
        for q in 0..fifo.len() {
            deficit[q] = if wrr {
                credit[q]
            } else {
                deficit[q] + credit[q]
            };
            loop {
                let Some(&(id, len)) = fifo[q].front() else {
                    return out;
                };
                let cost = if wrr { 1 } else { u64::from(len) };
                if cost > deficit[q] {
                    break;
                }
                deficit[q] -= cost;
                fifo[q].pop_front();
                let next_fits = fifo[q]
                    .front()
                    .is_some_and(|&(_, l)| deficit[q] >= if wrr { 1 } else { u64::from(l) });
                out.push((q, id, !next_fits));
                if fifo[q].is_empty() {
                    return out;
                }
            }
        }
    }
}

/// Loads `queues` (packet lengths per queue, queue by queue so the active list is in index
/// order) and dequeues until the first queue empties.
fn run_backlogged(scheduling: Scheduling, quanta: &[u32], queues: &[Vec<u16>]) -> Vec<MqDequeued> {
    let cfg = quanta.iter().map(|&q| QueueConfig::weighted(q)).collect();
    let mut port = port(scheduling, cfg, 100_000_000);
    for (q, lens) in queues.iter().enumerate() {
        for (k, &len) in lens.iter().enumerate() {
            let id = (q * 10_000 + k) as u32;
            port.enqueue(t(0), pkt(id, q as u16, len), true).unwrap();
        }
    }
    let mut out = Vec::new();
    let mut now = 0;
    while let Some(d) = port.dequeue(t(now)) {
        now += 1_000;
        out.push(d);
        if port.queue_packets(d.queue) == 0 {
            break;
        }
    }
    port.invariants();
    out
}

fn backlog() -> impl Strategy<Value = (Vec<u32>, Vec<Vec<u16>>)> {
    (1usize..6).prop_flat_map(|n| {
        (
            proptest::collection::vec(1500u32..6_000, n),
            proptest::collection::vec(proptest::collection::vec(64u16..=1500, 20..120), n),
        )
    })
}

proptest! {
    /// DWRR with every queue backlogged: the same departures as the reference, and after its
    /// `M`-th turn queue `i` has sent within `M x Q_i +/- MTU` (MQ-ECN Equation 7; the deficit
    /// left over is below one packet).
    #[test]
    fn dwrr_matches_reference_and_bound((quanta, queues) in backlog()) {
        let got = run_backlogged(Scheduling::Dwrr, &quanta, &queues);
        let credit: Vec<u64> = quanta.iter().map(|&q| u64::from(q)).collect();
        let want = reference_round_robin(&queues, &credit, false);
        let got_ids: Vec<(usize, u32)> = got.iter().map(|d| (d.queue, d.pkt.id)).collect();
        let want_ids: Vec<(usize, u32)> = want.iter().map(|&(q, id, _)| (q, id)).collect();
        prop_assert_eq!(got_ids, want_ids);
        let mut sent = vec![0u64; quanta.len()];
        let mut turns = vec![0u64; quanta.len()];
        for &(q, id, turn_ends) in &want {
            sent[q] += u64::from(queues[q][id as usize % 10_000]);
            // The turn that empties the queue ends early: the bound is for backlogged turns.
            let emptied = id as usize % 10_000 + 1 == queues[q].len();
            if turn_ends && !emptied {
                turns[q] += 1;
                let m_q = turns[q] * u64::from(quanta[q]);
                prop_assert!(sent[q] + 1500 >= m_q && sent[q] <= m_q + 1500,
                    "queue {} after {} turns sent {} of {}", q, turns[q], sent[q], m_q);
            }
        }
    }

    /// WRR with every queue backlogged: runs of exactly `weight` packets, in index order.
    #[test]
    fn wrr_serves_weight_packets_per_turn(
        weights in proptest::collection::vec(1u32..5, 1..6),
        lens in proptest::collection::vec(64u16..=1500, 200),
    ) {
        let quanta: Vec<u32> = weights.iter().map(|w| w * 1500).collect();
        let queues: Vec<Vec<u16>> = (0..weights.len())
            .map(|q| lens.iter().skip(q * 7).take(60).copied().collect())
            .collect();
        let got = run_backlogged(Scheduling::Wrr, &quanta, &queues);
        let credit: Vec<u64> = weights.iter().map(|&w| u64::from(w)).collect();
        let want = reference_round_robin(&queues, &credit, true);
        prop_assert_eq!(got.len(), want.len());
        // The departures come in runs of weight[q] in index order until the first queue empties.
        let mut expect_q = 0;
        let mut left = weights[0];
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!((g.queue, g.pkt.id), (w.0, w.1));
            prop_assert_eq!(g.queue, expect_q);
            left -= 1;
            if left == 0 {
                expect_q = (expect_q + 1) % weights.len();
                left = weights[expect_q];
            }
        }
    }

    /// Random enqueues (some to unknown queues, some too long), dequeues and time steps on a
    /// port with two strict-priority queues: every packet enqueued leaves exactly once, in FIFO
    /// order per queue, or is handed back with the right reason; strict-priority queues go
    /// first; dequeue is work-conserving; bytes are exact; the buffer limit holds.
    #[test]
    fn conservation_fifo_priority_and_buffer(
        scheduling in prop_oneof![Just(Scheduling::Dwrr), Just(Scheduling::Wrr)],
        ops in proptest::collection::vec((0u8..3, 0u16..6, 64u16..1700, 0u64..3_000), 1..600),
        buffer in 3_000u64..40_000,
    ) {
        let cfg = vec![
            strict(),
            QueueConfig::weighted(1500),
            QueueConfig::weighted(4500),
            strict(),
            QueueConfig::weighted(3000),
        ];
        let is_strict = [true, false, false, true, false];
        let mut port = port(scheduling, cfg, buffer);
        let mut model: Vec<std::collections::VecDeque<PacketRef>> = vec![Default::default(); 5];
        let (mut now, mut next_id, mut held, mut handed_back, mut left) = (0u64, 0u32, 0u64, 0u64, 0u64);
        // Refusals per reason: BufferFull, UnknownQueue, TooLong.
        let mut refused = [0u64; 3];
        for (op, q, len, dt) in ops {
            now += dt;
            if op < 2 {
                let p = pkt(next_id, q, len);
                next_id += 1;
                let want = if q >= 5 {
                    Some(MqRejectReason::UnknownQueue)
                } else if len > 1500 {
                    Some(MqRejectReason::TooLong)
                } else if held + u64::from(len) > buffer {
                    Some(MqRejectReason::BufferFull)
                } else {
                    None
                };
                match port.enqueue(t(now), p, op == 0) {
                    Ok(e) => {
                        prop_assert_eq!(want, None);
                        prop_assert!(!e.marked);
                        model[q as usize].push_back(p);
                        held += u64::from(len);
                    }
                    Err(Rejected { pkt: back, reason: why }) => {
                        prop_assert_eq!(back, p);
                        prop_assert_eq!(Some(why), want);
                        handed_back += 1;
                        match why {
                            MqRejectReason::BufferFull => refused[0] += 1,
                            MqRejectReason::UnknownQueue => refused[1] += 1,
                            MqRejectReason::TooLong => refused[2] += 1,
                            other => prop_assert!(false, "unexpected {:?}", other),
                        }
                    }
                }
            } else {
                let first_strict = (0..5).find(|&i| is_strict[i] && !model[i].is_empty());
                match port.dequeue(t(now)) {
                    None => prop_assert!(model.iter().all(|m| m.is_empty())),
                    Some(d) => {
                        prop_assert_eq!(model[d.queue].pop_front(), Some(d.pkt));
                        if let Some(s) = first_strict {
                            prop_assert_eq!(d.queue, s);
                        }
                        held -= u64::from(d.pkt.len);
                        left += 1;
                    }
                }
            }
            prop_assert_eq!(port.total_bytes(), held);
            prop_assert!(port.total_bytes() <= buffer);
            for (i, m) in model.iter().enumerate() {
                prop_assert_eq!(port.queue_packets(i), m.len());
                prop_assert_eq!(port.queue_bytes(i), m.iter().map(|p| u64::from(p.len)).sum::<u64>());
            }
            port.invariants();
        }
        // Drain: everything accepted leaves exactly once.
        while let Some(d) = port.dequeue(t(now)) {
            prop_assert_eq!(model[d.queue].pop_front(), Some(d.pkt));
            left += 1;
        }
        prop_assert!(model.iter().all(|m| m.is_empty()));
        let c = port.counters();
        prop_assert_eq!(c.port.enqueued_packets + handed_back, u64::from(next_id));
        prop_assert_eq!(c.port.dequeued_packets, left);
        prop_assert_eq!(c.port.enqueued_bytes, c.port.dequeued_bytes);
        prop_assert_eq!(
            c.port.buffer_drops + c.unknown_queue + c.too_long + c.port.non_ect_drops,
            handed_back
        );
        prop_assert_eq!([c.port.buffer_drops, c.unknown_queue, c.too_long], refused);
        let per_queue: u64 = c.queues.iter().map(|q| q.dequeued_bytes).sum();
        prop_assert_eq!(per_queue, c.port.dequeued_bytes);
    }
}
