use super::*;

/// A privileged test cannot run (`why`): panics saying so, unless
/// `METRONOME_SKIP_PRIVILEGED=1`, where it writes `SKIPPED: why` to the process's stderr (past
/// the test harness's capture, so that the skip shows in a passing run) and returns. The same
/// rule as `metronome_testbed::netns::skip_unprivileged` (CONTRIBUTING.md, "Privileged tests").
fn skip_unprivileged(why: &dyn std::fmt::Display) {
    use std::io::Write;
    if std::env::var("METRONOME_SKIP_PRIVILEGED").as_deref() != Ok("1") {
        panic!(
            "the privileged test cannot run: {why}; it needs root or CAP_NET_ADMIN and \
             CAP_NET_RAW (set METRONOME_SKIP_PRIVILEGED=1 to skip it instead)"
        );
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED (METRONOME_SKIP_PRIVILEGED=1): {why}"
    );
}

#[test]
fn the_receive_batch_follows_what_arrives_within_its_bounds() {
    // A full batch grows four-fold up to the whole batch.
    assert_eq!(
        next_recv_want(MIN_RECV_WANT, MIN_RECV_WANT),
        4 * MIN_RECV_WANT
    );
    assert_eq!(next_recv_want(RECV_BATCH, RECV_BATCH), RECV_BATCH);
    let mut want = MIN_RECV_WANT;
    let mut calls = 1;
    while want < RECV_BATCH {
        want = next_recv_want(want, want);
        calls += 1;
    }
    assert!(calls <= 3, "{calls} calls to reach a whole batch");
    // Nothing or one frame: halves, never below the minimum.
    assert_eq!(next_recv_want(RECV_BATCH, 0), RECV_BATCH / 2);
    assert_eq!(next_recv_want(MIN_RECV_WANT, 0), MIN_RECV_WANT);
    assert_eq!(next_recv_want(MIN_RECV_WANT, 1), MIN_RECV_WANT);
    // Otherwise twice what came, within the bounds, and always more than came.
    for want in MIN_RECV_WANT..=RECV_BATCH {
        for got in 0..=want {
            let next = next_recv_want(want, got);
            assert!((MIN_RECV_WANT..=RECV_BATCH).contains(&next), "{want} {got}");
            assert!(next >= want / 2, "{want} {got} -> {next}");
            if got < RECV_BATCH {
                assert!(next > got, "{want} {got} -> {next}");
            }
        }
    }
}

#[test]
fn vlan_tag_is_reinserted_in_place() {
    let mut slot = [0u8; 32];
    let frame: Vec<u8> = (1..=20).collect();
    slot[..20].copy_from_slice(&frame);
    assert_eq!(insert_vlan(&mut slot, 20, (0x8100, 0x0123)), Some(24));
    assert_eq!(&slot[..12], &frame[..12]);
    assert_eq!(&slot[12..16], &[0x81, 0x00, 0x01, 0x23]);
    assert_eq!(&slot[16..24], &frame[12..]);
    // No room for the tag: refused, the caller counts it.
    let mut full = [0u8; 22];
    assert_eq!(insert_vlan(&mut full, 20, (0x8100, 1)), None);
    assert_eq!(
        stripped_vlan(libc::TP_STATUS_VLAN_VALID, 0, 7),
        Some((ETH_P_8021Q, 7))
    );
    assert_eq!(stripped_vlan(0, 0x88a8, 7), None);
}

#[test]
fn both_receive_modes_open_on_loopback() {
    // Root in CI; without CAP_NET_RAW opening fails with a permission error: nothing to test.
    // Any other error fails the test.
    for rx in [RxMode::Mmsg, RxMode::Ring] {
        let config = AfPacketConfig {
            rx,
            promiscuous: false,
            ..AfPacketConfig::DEFAULT
        };
        let mut port = match AfPacketPort::open("lo", &config) {
            Ok(p) => p,
            Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
            Err(e) => panic!("{rx:?}: {e}"),
        };
        let mut pool = FramePool::new(64, 2048);
        let mut out = [RxFrame::default(); 64];
        // Whatever lo carries right now arrives whole, every slot accounted for.
        let n = port.recv(&mut pool, &mut out).unwrap();
        assert_eq!(pool.in_use(), n, "{rx:?}");
        for f in &out[..n] {
            assert_eq!(pool.len(f.id), f.len as usize);
        }
    }
}

#[test]
fn a_mark_is_set_on_every_transmit_socket() {
    // Root in CI; without CAP_NET_RAW (or CAP_NET_ADMIN for SO_MARK) opening fails with a
    // permission error: nothing to test. Any other error fails the test.
    let mark_of = |fd: &OwnedFd| sys::mark(fd).unwrap();
    for mark in [0, 0x0fff_0000] {
        let config = AfPacketConfig {
            receive: false,
            promiscuous: false,
            vnet_hdr: true,
            mark,
            ..AfPacketConfig::DEFAULT
        };
        let port = match AfPacketPort::open("lo", &config) {
            Ok(p) => p,
            Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(mark_of(&port.tx.fd), mark);
        let soft = port
            .tx
            .soft
            .as_ref()
            .expect("vnet_hdr and bypass: a soft socket");
        assert_eq!(mark_of(soft), mark);
    }
}

#[test]
fn default_config_is_valid() {
    assert_eq!(AfPacketConfig::default().check(), Ok(()));
    let bad = AfPacketConfig {
        block_size: 5000,
        ..Default::default()
    };
    assert!(bad.check().is_err());
    let bad = AfPacketConfig {
        frame_size: 2049,
        ..Default::default()
    };
    assert!(bad.check().is_err());
    let vnet = AfPacketConfig {
        vnet_hdr: true,
        ..Default::default()
    };
    assert_eq!(vnet.check(), Ok(()));
    let ring = AfPacketConfig {
        rx: RxMode::Ring,
        ..vnet
    };
    assert!(ring.check().unwrap_err().contains("vnet_hdr"));
    let origin = AfPacketConfig {
        origin_tags: true,
        ..Default::default()
    };
    assert_eq!(origin.check(), Ok(()));
    assert_eq!(
        AfPacketConfig {
            vnet_hdr: true,
            ..origin
        }
        .check(),
        Ok(())
    );
    let ring = AfPacketConfig {
        rx: RxMode::Ring,
        ..origin
    };
    assert!(ring.check().unwrap_err().contains("origin_tags"));
    let tx_only = AfPacketConfig {
        receive: false,
        ..Default::default()
    };
    assert_eq!(tx_only.check(), Ok(()));
    let fanout = AfPacketConfig {
        fanout: Some(Fanout::NewGroup),
        ..tx_only
    };
    assert!(fanout.check().unwrap_err().contains("fanout"));
}

#[test]
fn an_origin_tag_goes_to_the_slot_and_an_untagged_frame_is_dropped() {
    let mut pool = FramePool::new(4, 64);
    let mut counters = PortCounters::default();
    let frame: Vec<u8> = (1..=20).collect();
    let tagged = stripped_vlan(libc::TP_STATUS_VLAN_VALID, 0, 7);
    // Origin tags: the TCI is the slot's origin, the frame stays as received.
    let id = pool.store(&frame).unwrap();
    let tag = rx_tag(true, tagged);
    assert_eq!(tag, RxTag::Origin(7));
    assert_eq!(finish_tag(&mut pool, id, 20, tag, &mut counters), Some(20));
    assert_eq!(pool.origin(id), 7);
    assert_eq!(&pool.slot_mut(id)[..20], &frame[..]);
    // No tag on such a port: dropped and counted, the slot's origin untouched.
    let untagged = pool.store(&frame).unwrap();
    let tag = rx_tag(true, stripped_vlan(0, 0, 7));
    assert_eq!(tag, RxTag::Untagged);
    assert_eq!(
        finish_tag(&mut pool, untagged, 20, tag, &mut counters),
        None
    );
    assert_eq!(pool.origin(untagged), 0);
    assert_eq!(
        counters,
        PortCounters {
            rx_untagged: 1,
            ..PortCounters::default()
        }
    );
    // Without origin tags a stripped tag is re-inserted and the origin stays 0.
    let plain = pool.store(&frame).unwrap();
    let tag = rx_tag(false, tagged);
    assert_eq!(tag, RxTag::Reinsert(Some((ETH_P_8021Q, 7))));
    assert_eq!(
        finish_tag(&mut pool, plain, 20, tag, &mut counters),
        Some(24)
    );
    assert_eq!(&pool.slot_mut(plain)[12..16], &[0x81, 0x00, 0x00, 0x07]);
    assert_eq!(pool.origin(plain), 0);
    assert_eq!(rx_tag(false, None), RxTag::Reinsert(None));
    assert_eq!(counters.rx_untagged, 1);
}

#[test]
fn a_transmit_only_port_sends_and_receives_nothing() {
    // Loopback, not promiscuous: a frame one port sends comes back on lo; the receiving
    // port sees it, the transmit-only port (bound with protocol 0) does not.
    let rx_config = AfPacketConfig {
        promiscuous: false,
        block_count: 2,
        ..Default::default()
    };
    let mut rx = match AfPacketPort::open("lo", &rx_config) {
        Ok(p) => p,
        Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
        Err(e) => panic!("{e}"),
    };
    let tx_config = AfPacketConfig {
        receive: false,
        promiscuous: true,
        ..rx_config
    };
    let mut tx = AfPacketPort::open("lo", &tx_config).unwrap();
    let mut pool = FramePool::new(64, 2048);
    let mut out = [RxFrame::default(); 64];
    // Whatever lo carried before this test.
    while rx.recv(&mut pool, &mut out).unwrap() > 0 {
        for f in &out {
            pool.free(f.id);
        }
    }
    // An IEEE 802 local experimental EtherType (0x88B5): no protocol of the host reads it.
    let mut frame = [0u8; 60];
    frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    frame[14..18].copy_from_slice(b"mtio");
    let id = pool.store(&frame).unwrap();
    assert_eq!(tx.send(&mut pool, &[id]).unwrap(), 1);
    assert_eq!(tx.counters().tx_packets, 1);
    let readable = crate::wait_readable(rx.poll_fd().unwrap(), std::time::Duration::from_secs(5));
    assert!(readable.unwrap(), "the receiving port never saw the frame");
    let n = rx.recv(&mut pool, &mut out).unwrap();
    assert!(
        out[..n].iter().any(|f| pool.frame(f.id) == frame),
        "{n} frames"
    );
    // The transmit-only socket queued nothing (it would be readable by now), and its recv
    // hands out nothing.
    let fd = tx.poll_fd().unwrap();
    assert!(!crate::wait_readable(fd, std::time::Duration::ZERO).unwrap());
    let in_use = pool.in_use();
    assert_eq!(tx.recv(&mut pool, &mut out).unwrap(), 0);
    assert_eq!(pool.in_use(), in_use);
    assert_eq!(tx.counters().rx_packets, 0);
}

#[test]
fn missing_interface_is_named() {
    let err = AfPacketPort::open("mtio-nope0", &AfPacketConfig::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("mtio-nope0"), "{msg}");
    assert!(!msg.contains('\n'));
}

#[test]
fn fanout_members_share_the_group_the_first_created() {
    // Loopback, not promiscuous: no effect on the host beyond two short-lived sockets.
    let first = AfPacketConfig {
        promiscuous: false,
        block_count: 2,
        fanout: Some(Fanout::NewGroup),
        ..Default::default()
    };
    let a = match AfPacketPort::open("lo", &first) {
        Ok(p) => p,
        Err(e @ PortError::Permission { .. }) => return skip_unprivileged(&e),
        Err(e) => panic!("{e}"),
    };
    let id = a.fanout_group().expect("a fanout group");
    let join = AfPacketConfig {
        fanout: Some(Fanout::Join(id)),
        ..first
    };
    let b = AfPacketPort::open("lo", &join).unwrap();
    assert_eq!(b.fanout_group(), Some(id));
    // A second new group gets another id.
    let c = AfPacketPort::open("lo", &first).unwrap();
    assert_ne!(c.fanout_group(), Some(id));
    let plain = AfPacketConfig {
        fanout: None,
        ..first
    };
    assert_eq!(
        AfPacketPort::open("lo", &plain).unwrap().fanout_group(),
        None
    );
}

#[test]
fn vlan_tag_is_reinserted() {
    let mut pool = FramePool::new(2, 64);
    let frame: Vec<u8> = (0..20).collect();
    let id = copy_frame(&mut pool, &frame, Some((0x8100, 0x0123))).unwrap();
    let got = pool.frame(id);
    assert_eq!(got.len(), 24);
    assert_eq!(&got[..12], &frame[..12]);
    assert_eq!(&got[12..16], &[0x81, 0x00, 0x01, 0x23]);
    assert_eq!(&got[16..], &frame[12..]);
    // 62 + 4 > 64: refused without using a slot.
    assert_eq!(
        copy_frame(&mut pool, &[0; 62], Some((0x8100, 1))),
        Err(StoreError::Oversize {
            len: 66,
            slot_size: 64
        })
    );
    assert_eq!(pool.in_use(), 1);
    // With a large class it goes there; with that full it is refused by name.
    let mut two = FramePool::with_large(1, 64, 1, 128);
    let id = copy_frame(&mut two, &[1; 62], Some((0x8100, 1))).unwrap();
    assert!(two.is_large(id));
    assert_eq!(two.frame(id).len(), 66);
    assert_eq!(
        copy_frame(&mut two, &[1; 62], Some((0x8100, 1))),
        Err(StoreError::NoLargeSlot { len: 66 })
    );
}
