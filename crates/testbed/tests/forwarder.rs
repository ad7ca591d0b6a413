//! The reference forwarders of `metronome compare --ceiling` on a real path: a sender, shaper and
//! receiver namespace, the forwarder between the shaper's veths, one kernel TCP flow for 1 s
//! capped at 20 MB. Each test asserts that the TCP payload arrives (so frames cross in both
//! directions with valid checksums) and that every frame the forwarder received was sent, is in a
//! counter, or was pending at the stop:
//!
//! * the plain `recvmmsg`/`sendmmsg` forwarder with every offload off (ethtool ioctl);
//! * the forwarder in [`ForwarderMode::VnetHdr`] with TSO, GSO and transmit checksum offload on at
//!   the sender (set explicitly, so the test does not depend on the topology's defaults): the
//!   partial checksums the sender left to the "hardware" are completed after the forwarder sends
//!   the frames back with their header, and super-frames cross (more bytes per frame than an MTU
//!   frame carries).
//!
//! Fails without CAP_NET_ADMIN (skips, saying why, under METRONOME_SKIP_PRIVILEGED=1); the topology
//! is removed on every path (its `Drop`).

mod common;

use metronome_io::Offload;
use metronome_testbed::forwarder::{self, ForwarderMode, ForwarderReport};
use metronome_testbed::netns::Topology;
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes the one flow may send: bounds the test's volume.
const CAP_BYTES: u64 = 20 << 20;
/// The largest Ethernet frame without offloads (1500-byte MTU + 14-byte header).
const MTU_FRAME: u64 = 1514;

/// Runs the forwarder in `mode` between the shaper's veths while one TCP flow to `port` sends for
/// 1 s; asserts that more than 1 MiB of payload crossed and that every frame received on one port
/// left through the other, was refused for good (counted) or was pending at the stop. Returns the
/// forwarder's report and the payload bytes received.
fn forward_one_flow(topo: &Topology, mode: ForwarderMode, port: u16) -> (ForwarderReport, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let (inside, outside) = (topo.shaper_in.clone(), topo.shaper_out.clone());
    let fw = topo
        .shaper
        .spawn(move || forwarder::forward_with(&inside, &outside, mode, &s))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100)); // sockets open

    let mut group = FlowGroup::tcp("bulk", port, 1);
    group.max_bytes_per_flow = CAP_BYTES;
    let plan = TrafficPlan::new(topo.receiver_addr, vec![group], Duration::from_secs(1));
    let traffic = trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver));
    stop.store(true, Ordering::Relaxed);
    let report = fw.join().unwrap().unwrap().unwrap();
    let traffic = traffic.unwrap();

    let received = traffic.groups[0].bytes;
    assert!(
        received > 1 << 20,
        "only {received} bytes of TCP payload crossed the {mode:?} forwarder: {report:?}"
    );
    for (rx, tx) in [
        (report.inside, report.outside),
        (report.outside, report.inside),
    ] {
        assert!(
            rx.rx_packets <= tx.tx_packets + tx.tx_errors + report.pending_at_stop,
            "{report:?}"
        );
    }
    (report, received)
}

#[test]
fn tcp_crosses_the_plain_forwarder_and_every_frame_is_counted() {
    let Some(mut topo) = common::topology("mtr-fw", "forwarder test") else {
        return;
    };
    topo.one_mtu_segments().unwrap();
    topo.offloads_off().unwrap();
    let (report, received) = forward_one_flow(&topo, ForwarderMode::Plain, 5301);
    let forwarded = report.outside.tx_packets;
    assert!(
        forwarded >= received / 1500,
        "{forwarded} frames out for {received} B"
    );
}

#[test]
fn super_frames_cross_the_vnet_forwarder_with_their_header() {
    let Some(topo) = common::topology("mtr-fwv", "vnet forwarder test") else {
        return;
    };
    let snd = topo.sender_if.clone();
    let offloads = topo
        .sender
        .run(move || {
            for o in [Offload::TxChecksum, Offload::Tso, Offload::Gso] {
                o.set(&snd, true)?;
            }
            Offload::Tso.get(&snd)
        })
        .unwrap();
    let tso = offloads.unwrap();
    assert!(tso, "TSO could not be turned on on the sender's veth");

    let (report, _) = forward_one_flow(&topo, ForwarderMode::VnetHdr, 5302);
    let inside = report.inside;
    assert_eq!(
        inside.rx_oversize
            + inside.rx_no_large_slot
            + inside.rx_gso_truncated
            + inside.rx_vnet_errors,
        0,
        "the forwarder lost frames: {report:?}"
    );
    let out = report.outside;
    assert!(out.tx_packets > 0, "{report:?}");
    assert!(
        out.tx_bytes / out.tx_packets > MTU_FRAME,
        "no super-frames crossed: {} B in {} frames ({report:?})",
        out.tx_bytes,
        out.tx_packets
    );
}
