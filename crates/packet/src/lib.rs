//! # metronome-packet
//!
//! Metronome's view of a raw Ethernet frame: parse it, classify it into a traffic class and a
//! flow, and mark ECN congestion on it. This is the first step of the daemon's per-packet path
//! (receive a batch, classify, timestamp, insert into the wheel); the
//! timestamping and queueing are in `metronome-core`.
//!
//! * [`parse`] (module [`frame`]): Ethernet II, IEEE 802.1Q / 802.1ad VLAN tags, IPv4 (IHL,
//!   total length, fragments), IPv6 (extension headers), TCP, UDP, ICMP, ICMPv6 into a
//!   [`Parsed`]: non-IP, an [`IpPacket`] with its [`FiveTuple`], DSCP, [`Ecn`], IP offset and
//!   wire length, or [`Malformed`] with a named reason. The packet's origin tag
//!   ([`IpPacket::origin`]) is not in the frame: parse sets 0 and the caller sets the tag its
//!   port received with the frame.
//! * [`flow_id`]: a seeded, stable 32-bit hash of the 5-tuple ([`metronome_core::FlowId`]);
//!   the daemon keys it with a secret seed, tests with the public [`DEFAULT_FLOW_SEED`].
//! * [`Classifier`]: ordered [`ClassRule`]s (prefixes, DSCP, protocol, port ranges, origin tag),
//!   first match wins, a default class; [`Verdict`] says shape, pass or malformed.
//! * [`mark_ce`]: sets CE on ECN-capable packets (RFC 3168 §5), IPv4 checksum updated
//!   incrementally (RFC 1624).
//! * [`ParseCounters`], [`EcnCounters`]: a named counter per verdict, reason and mark outcome.
//! * [`build::write_tcp_frame`]: writes an Ethernet + IPv4 + TCP frame of a given length in place
//!   (the simulator's frames for the daemon's engine).
//! * [`gso`]: GSO/GRO super-frames: the virtio-net header ([`VnetHdr`]) of `PACKET_VNET_HDR`,
//!   their bytes on the wire ([`wire_bytes`]) and cutting a TCP super-frame into pieces
//!   ([`SuperFrame::piece`]) with headers in a scratch buffer and payload left in place.
//!
//! No I/O, no clock reads, no allocation per packet: [`parse`] borrows the frame and returns a
//! `Copy` value; [`Classifier::classify`] reads its rules and their index. Nothing panics on
//! any input (fuzzed with bolero, `tests/fuzz.rs`, seeds in `corpus/`).
//!
//! ```
//! use metronome_packet::{parse, mark_ce, ClassRule, Classifier, EcnMark, Verdict};
//! use metronome_core::ClassId;
//!
//! // An Ethernet + IPv4 + UDP frame to 10.1.2.3:5001, ECT(0).
//! let mut frame = vec![0u8; 14 + 20 + 8];
//! frame[12..14].copy_from_slice(&[0x08, 0x00]);
//! frame[14..34].copy_from_slice(&[
//!     0x45, 0x02, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 1, 2, 3,
//! ]);
//! let sum = metronome_packet::ipv4_header_checksum(&frame[14..34]).unwrap();
//! frame[24..26].copy_from_slice(&sum.to_be_bytes());
//! frame[34..42].copy_from_slice(&[0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0]);
//!
//! let tenant = ClassRule { dst: Some("10.1.0.0/16".parse().unwrap()), ..Default::default() };
//! let classifier = Classifier::new(vec![(tenant, ClassId(1))], ClassId(0));
//! let parsed = parse(&frame);
//! let Verdict::Shape { class, len, .. } = classifier.classify(&parsed) else { panic!() };
//! assert_eq!((class, len), (ClassId(1), 42));
//!
//! assert_eq!(mark_ce(&mut frame, &parsed), EcnMark::Marked);
//! assert_eq!(frame[15] & 0b11, 0b11);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod build;
pub mod checksum;
pub mod classify;
pub mod counters;
pub mod ecn;
pub mod flow_hash;
pub mod frame;
pub mod gso;

pub use checksum::{fix_l4_checksum, L4Checksum};
pub use classify::{ClassRule, Classifier, RuleId, Verdict};
pub use counters::{EcnCounters, ParseCounters};
pub use ecn::{checksum_update, ipv4_header_checksum, mark_ce, EcnMark};
pub use flow_hash::{flow_id, DEFAULT_FLOW_SEED};
pub use frame::{
    link_layer, parse, proto, Ecn, FiveTuple, Fragment, IpPacket, Malformed, NonIp, Parsed,
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, MAX_FRAME_BYTES, MAX_IP_PACKET_BYTES, MAX_SUPER_FRAME_BYTES,
    MAX_VLAN_TAGS,
};
pub use gso::{
    complete_partial_checksum, wire_bytes, GsoError, GsoType, Piece, SuperFrame, VnetError,
    VnetHdr, VNET_HDR_LEN,
};
