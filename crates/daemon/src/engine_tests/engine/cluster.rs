//! A cluster class in the single loop's engine through its [`ClusterPort`]: the share is the
//! class's rate from the next packet, a zero share closes the class (frames refused, counted as
//! `queue_full`) and a positive one opens it again at once, and the port publishes what the
//! class sent and holds.

use super::*;
use crate::ops::cluster::{ClusterCell, ClusterPort};
use std::sync::Arc;

#[test]
fn the_share_is_the_rate_zero_closes_and_the_demand_is_published() {
    let mut rig = Rig::new(BASE);
    let cell = Arc::new(ClusterCell::new("bulk", Rate::mbps(100), 1, Rate::mbps(10)));
    let mut port = ClusterPort::new(std::slice::from_ref(&cell), 0, true, &rig.engine);
    port.poll(&mut rig.engine, rig.now);
    // 10 Mbit/s: a full frame every 1.2112 ms.
    rig.push(&[
        tcp(1, 5201, FULL, 0),
        tcp(1, 5201, FULL, 0),
        tcp(1, 5201, FULL, 0),
    ]);
    rig.run_until_empty(Duration::from_micros(100));
    assert_eq!(rig.sent.len(), 3);
    let gap = rig.sent[2].0.saturating_since(rig.sent[1].0).as_nanos();
    assert!((1_150_000..1_300_000).contains(&gap), "gap {gap} ns");
    port.poll(&mut rig.engine, rig.now);
    let d = cell.demand(rig.now).unwrap();
    assert_eq!((d.sent_bytes, d.backlog_bytes), (3 * FULL as u64, 0));

    // Zero: closed. Frames are refused and counted; nothing is stuck afterwards.
    cell.set_share(0);
    port.poll(&mut rig.engine, rig.now);
    rig.push(&[tcp(1, 5201, FULL, 0), tcp(1, 5201, FULL, 0)]);
    assert_eq!(rig.engine.queued(), 0);
    assert_eq!(
        rig.series("metronome_class_drops_total{class=\"bulk\",reason=\"queue_full\"}"),
        2
    );
    cell.set_share(100_000_000);
    port.poll(&mut rig.engine, rig.now);
    let sent = rig.sent.len();
    rig.push(&[tcp(1, 5201, FULL, 0), tcp(1, 5201, FULL, 0)]);
    rig.run_until_empty(Duration::from_micros(10));
    assert_eq!(rig.sent.len(), sent + 2);
    let gap = rig.sent[sent + 1]
        .0
        .saturating_since(rig.sent[sent].0)
        .as_nanos();
    assert!(
        (100_000..140_000).contains(&gap),
        "gap {gap} ns at 100 Mbit/s"
    );
}
