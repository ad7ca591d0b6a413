//! The per-slot table: what a booking, a hold, a departure and a discard read and write, and
//! that a cut reaches the frame pool with the slot.

use super::{Booking, PendingCut, Slots};
use etherparse::PacketBuilder;
use metronome_core::{ClassId, FlowId, PacketRef, Timestamp};
use metronome_io::piece::encode;
use metronome_io::FramePool;
use metronome_packet::gso::{GsoType, FLAG_NEEDS_CSUM};
use metronome_packet::{SuperFrame, VnetHdr};

fn at(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn entry(id: u32, len: u16) -> PacketRef {
    PacketRef::new(id, FlowId(7), ClassId(1), len)
}

#[test]
fn a_whole_frame_departs_at_its_edt_with_its_wire_bytes() {
    let mut pool = FramePool::new(4, 128);
    let mut slots = Slots::new(4);
    let id = pool.store(&[0; 100]).unwrap();
    let booking = Booking {
        edt: at(5_000),
        last: at(5_000),
        wire: 70_000,
        entry: Some(3),
        cut: None,
    };
    slots.book(&mut pool, id, booking);
    assert!(!pool.has_cuts());
    // The `PacketRef` length saturates; the slot keeps the frame's wire bytes.
    let d = slots.depart(entry(id, u16::MAX), at(9_000));
    assert_eq!((d.edt, d.entry, d.wire), (at(5_000), Some(3), 70_000));
    let d = slots.discard(&mut pool, entry(id, u16::MAX));
    assert_eq!(d.wire, 70_000);
    assert_eq!(pool.in_use(), 0);
    pool.invariants();
}

#[test]
fn pieces_depart_a_step_apart_and_free_their_slot_after_the_last() {
    let mut pool = FramePool::new(4, 128);
    let mut slots = Slots::new(4);
    let id = pool.store(&[0; 100]).unwrap();
    // Three pieces queued, EDTs 1 000, 2 000 and 3 000 ns.
    let booking = Booking {
        edt: at(1_000),
        last: at(3_000),
        wire: 9_000,
        entry: None,
        cut: Some((2, 3)),
    };
    slots.book(&mut pool, id, booking);
    assert!(pool.is_piece(encode(id, 2)));
    assert_eq!(pool.cut_counters().frames_cut, 1);
    for k in 0..3u32 {
        let d = slots.depart(entry(encode(id, k), 3_000), at(0));
        assert_eq!(
            (d.edt, d.entry, d.wire),
            (at(1_000 + 1_000 * u64::from(k)), None, 3_000)
        );
    }
    slots.discard(&mut pool, entry(encode(id, 0), 3_000));
    slots.discard(&mut pool, entry(encode(id, 2), 3_000));
    assert!(pool.is_allocated(id), "one piece is still queued");
    slots.discard(&mut pool, entry(encode(id, 1), 3_000));
    assert_eq!(pool.in_use(), 0);
    pool.invariants();
}

#[test]
fn a_held_frame_gives_its_pending_cut_back_once_and_frees_its_slot_when_discarded() {
    let mut pool = FramePool::new(4, 2048);
    let mut slots = Slots::new(4);
    let id = pool.store(&[0; 100]).unwrap();
    slots.hold(id, 100, Some(5), None);
    assert!(slots.take_pending(id).is_none());
    assert_eq!(slots.entry(id), Some(5));
    // Four segments of 1448 bytes in one TCP/IPv4 super-frame.
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, 5201, 1, 65535)
        .write(&mut frame, &[0x42; 4 * 1448])
        .unwrap();
    let vnet = VnetHdr {
        flags: FLAG_NEEDS_CSUM,
        gso_type: GsoType::TcpV4,
        ecn: false,
        hdr_len: 54,
        gso_size: 1448,
        csum_start: 34,
        csum_offset: 16,
    };
    let sf = SuperFrame::parse(&frame, &vnet).expect("a super-frame");
    let cut = PendingCut {
        sf,
        max_segments: 2,
        pieces: 3,
    };
    slots.hold(id, 100, Some(5), Some(cut));
    let taken = slots.take_pending(id).expect("the pending cut");
    assert_eq!((taken.max_segments, taken.pieces), (2, 3));
    assert!(slots.take_pending(id).is_none(), "taken once");
    slots.hold(id, 100, None, Some(cut));
    assert_eq!(slots.discard_held(&mut pool, id), None);
    assert!(
        slots.take_pending(id).is_none(),
        "a discard drops the pending cut"
    );
    assert_eq!(pool.in_use(), 0);
    pool.invariants();
}
