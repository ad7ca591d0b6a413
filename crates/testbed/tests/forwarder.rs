//! The reference forwarder of `metronome compare --ceiling` on a real path: a sender, shaper and
//! receiver namespace with every offload off (ethtool ioctl), the plain `recvmmsg`/`sendmmsg`
//! forwarder between the shaper's veths, one kernel TCP flow for 1 s capped at 20 MB. Asserts that
//! the TCP payload arrives (so frames cross in both directions with valid checksums) and that every
//! frame the forwarder received was sent or is counted. Skips, saying why, without CAP_NET_ADMIN;
//! the topology is removed on every path (its `Drop`).

mod common;

use metronome_testbed::forwarder;
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes the one flow may send: bounds the test's volume.
const CAP_BYTES: u64 = 20 << 20;

#[test]
fn tcp_crosses_the_plain_forwarder_and_every_frame_is_counted() {
    let Some(mut topo) = common::topology("mtr-fw", "forwarder test") else {
        return;
    };
    topo.one_mtu_segments().unwrap();
    topo.offloads_off().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let (inside, outside) = (topo.shaper_in.clone(), topo.shaper_out.clone());
    let fw = topo
        .shaper
        .spawn(move || forwarder::forward(&inside, &outside, &s))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100)); // sockets open

    let mut group = FlowGroup::tcp("bulk", 5301, 1);
    group.max_bytes_per_flow = CAP_BYTES;
    let plan = TrafficPlan::new(topo.receiver_addr, vec![group], Duration::from_secs(1));
    let traffic = trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver));
    stop.store(true, Ordering::Relaxed);
    let report = fw.join().unwrap().unwrap().unwrap();
    let traffic = traffic.unwrap();

    let received = traffic.groups[0].bytes;
    assert!(
        received > 1 << 20,
        "only {received} bytes of TCP payload crossed the forwarder: {report:?}"
    );
    for (rx, tx) in [
        (report.inside, report.outside),
        (report.outside, report.inside),
    ] {
        // Frames received on one port went out of the other, were refused for good (counted),
        // or were still pending at the stop.
        assert!(
            rx.rx_packets <= tx.tx_packets + tx.tx_errors + report.pending_at_stop,
            "{report:?}"
        );
    }
    let forwarded = report.outside.tx_packets;
    assert!(
        forwarded >= received / 1500,
        "{forwarded} frames out for {received} B"
    );
}
