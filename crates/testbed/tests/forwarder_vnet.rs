//! The `vnet_hdr` reference forwarder of `metronome compare --ceiling` on a real path with the
//! host's offloads: a sender, shaper and receiver namespace whose sender veth has TSO, GSO and
//! transmit checksum offload on (set explicitly with the ethtool ioctl, so the test does not
//! depend on the topology's defaults), the forwarder in [`ForwarderMode::VnetHdr`] between the
//! shaper's veths, one kernel TCP flow for 1 s capped at 20 MB. Asserts that the TCP payload
//! arrives (the partial checksums the sender left to the "hardware" were completed after the
//! forwarder sent the frames back with their header), that super-frames crossed (more bytes per
//! frame than an MTU frame carries), and that every frame the forwarder received was sent, is
//! in a counter, or was pending at the stop. Skips, saying why, without CAP_NET_ADMIN; the
//! topology is removed on every path (its `Drop`).

mod common;

use metronome_io::Offload;
use metronome_testbed::forwarder::{self, ForwarderMode};
use metronome_testbed::trafficgen::{self, FlowGroup, TrafficPlan};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes the one flow may send: bounds the test's volume.
const CAP_BYTES: u64 = 20 << 20;
/// The largest Ethernet frame without offloads (1500-byte MTU + 14-byte header).
const MTU_FRAME: u64 = 1514;

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

    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let (inside, outside) = (topo.shaper_in.clone(), topo.shaper_out.clone());
    let fw = topo
        .shaper
        .spawn(move || forwarder::forward_with(&inside, &outside, ForwarderMode::VnetHdr, &s))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100)); // sockets open

    let mut group = FlowGroup::tcp("bulk", 5302, 1);
    group.max_bytes_per_flow = CAP_BYTES;
    let plan = TrafficPlan::new(topo.receiver_addr, vec![group], Duration::from_secs(1));
    let traffic = trafficgen::run(&plan, Some(&topo.sender), Some(&topo.receiver));
    stop.store(true, Ordering::Relaxed);
    let report = fw.join().unwrap().unwrap().unwrap();
    let traffic = traffic.unwrap();

    let received = traffic.groups[0].bytes;
    assert!(
        received > 1 << 20,
        "only {received} bytes of TCP payload crossed the vnet forwarder: {report:?}"
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
