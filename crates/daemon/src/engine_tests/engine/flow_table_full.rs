//! A flow whose bucket of the flow table is full of active flows is still paced and limited:
//! its packets go to the class's overflow entry ([`crate::datapath::flow_table`]). The flows are
//! crafted to share one bucket under [`metronome_packet::DEFAULT_FLOW_SEED`], the seed of
//! `Engine::new`.

use super::*;
use crate::datapath::flow_table::{FLOW_TABLE_BUCKETS, FLOW_TABLE_WAYS};
use metronome_packet::{flow_id, FiveTuple, DEFAULT_FLOW_SEED};
use std::net::{IpAddr, Ipv4Addr};

/// `n` source ports whose flows to `dst_port` (the tuple of [`tcp`]) share one bucket of the flow
/// table in class state `class`: the first bucket that `n` ports from 1024 up reach.
fn colliding_ports(class: u32, dst_port: u16, n: usize) -> Vec<u16> {
    let mut buckets: Vec<Vec<u16>> = vec![Vec::new(); FLOW_TABLE_BUCKETS];
    for src_port in 1024..=u16::MAX {
        let tuple = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            protocol: 6,
            src_port,
            dst_port,
        };
        let flow = flow_id(&tuple, DEFAULT_FLOW_SEED);
        let b = &mut buckets[FlowTable::bucket(class, flow) / FLOW_TABLE_WAYS];
        b.push(src_port);
        if b.len() == n {
            return b.clone();
        }
    }
    panic!("no bucket holds {n} of the ports");
}

/// Departure times (ns after `t0`) of the frames from `src_port`.
fn departures(rig: &Rig, t0: Timestamp, src_port: u16) -> Vec<u64> {
    rig.sent
        .iter()
        .filter(|(_, f)| f[34..36] == src_port.to_be_bytes())
        .map(|(t, _)| t.saturating_since(t0).as_nanos())
        .collect()
}

/// The class's `metronome_class_flow_table_overflow_total`.
fn overflow_metric(rig: &Rig, class: &str) -> u64 {
    rig.series(&format!(
        "metronome_class_flow_table_overflow_total{{class=\"{class}\"}}"
    ))
}

/// Class `paced` (state 2 of `BASE`) paces each flow at 12 Mbit/s and has no aggregate rate. Four
/// backlogged flows fill a bucket; two more flows of that bucket send 5 frames each. Without a
/// way of their own they share the overflow entry: their 10 frames leave one pacing interval
/// apart (the first at once, the entry's burst), so neither exceeds 12 Mbit/s — shaped by the
/// class's aggregate alone, which it does not have, they would all leave at once.
#[test]
fn flows_beyond_a_full_bucket_are_paced_together_at_the_pacing_rate() {
    let mut rig = Rig::new(BASE);
    let t0 = rig.now;
    let ports = colliding_ports(2, 5301, FLOW_TABLE_WAYS + 2);
    let mut frames = Vec::new();
    for &p in &ports[..FLOW_TABLE_WAYS] {
        frames.extend(vec![tcp(p, 5301, FULL, 0); 3]);
    }
    for &p in &ports[FLOW_TABLE_WAYS..] {
        frames.extend(vec![tcp(p, 5301, FULL, 0); 5]);
    }
    rig.push(&frames);
    assert_eq!(rig.engine.counters().flow_table_full, 10);
    assert_eq!(overflow_metric(&rig, "paced"), 10);
    rig.run_until_empty(Duration::from_micros(2));
    assert_eq!(rig.sent.len(), 22);
    let gap = Rate::mbps(12).transmit_time(FULL as u64).as_nanos();
    let mut shared: Vec<u64> = ports[FLOW_TABLE_WAYS..]
        .iter()
        .flat_map(|&p| departures(&rig, t0, p))
        .collect();
    shared.sort_unstable();
    assert_eq!(shared.len(), 10);
    for (k, t) in shared.iter().enumerate() {
        // One wheel slot (2 us steps here) of rounding at most.
        let want = k as u64 * gap;
        assert!(
            *t + 2_000 >= want,
            "overflow frame {k} left at {t} ns, pacing allows {want}"
        );
    }
    // The flows that hold ways keep their own pacing, undisturbed by the overflow.
    for &p in &ports[..FLOW_TABLE_WAYS] {
        let d = departures(&rig, t0, p);
        assert!(d[2].abs_diff(2 * gap) <= 2_000, "{d:?}");
    }
    rig.engine.invariants();
}

/// Class `capped` drops a flow's frames beyond 4 queued. Four flows with frames queued fill a
/// bucket; two more of that bucket send 10 frames each: the overflow entry holds the limit
/// for both together (4 queued, 16 dropped and counted), where a packet without an entry would
/// escape the limit and all 20 would be queued.
#[test]
fn the_drop_limit_holds_for_flows_beyond_a_full_bucket() {
    let text = format!(
        "{BASE}\n[[class]]\nname = \"capped\"\nmatch = {{ dst_port = 9000 }}\nrate = \"10mbit\"\nbackpressure = {{ mode = \"drop\", limit = 4 }}\n"
    );
    let mut rig = Rig::new(&text);
    let ports = colliding_ports(3, 9000, FLOW_TABLE_WAYS + 2);
    let mut frames = Vec::new();
    for &p in &ports[..FLOW_TABLE_WAYS] {
        frames.extend(vec![tcp(p, 9000, FULL, 0); 2]);
    }
    for &p in &ports[FLOW_TABLE_WAYS..] {
        frames.extend(vec![tcp(p, 9000, FULL, 0); 10]);
    }
    rig.push(&frames);
    let c = rig.engine.counters();
    assert_eq!((c.flow_table_full, c.dropped_flow_limit), (20, 16), "{c:?}");
    assert_eq!(overflow_metric(&rig, "capped"), 20);
    let text = rig.metrics.encode();
    assert!(
        text.contains(r#"metronome_class_drops_total{class="capped",reason="flow_limit"} 16"#),
        "{text}"
    );
    // 8 frames of the flows with ways and the 4 of the overflow entry, the first sent at once.
    assert_eq!(rig.sent.len() + rig.engine.queued(), 12);
    rig.run_until_empty(Duration::from_micros(100));
    assert_eq!(rig.sent.len(), 12);
}
