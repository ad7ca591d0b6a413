//! # metronome-packet
//!
//! Metronome's view of a raw Ethernet frame: parse it, classify it into a traffic class and a
//! flow, and mark ECN congestion on it, the first step of the daemon's per-packet path (the
//! timestamping and queueing are in `metronome-core`).
//!
//! [`parse`] (module [`frame`]) reads Ethernet, VLAN tags, IPv4, IPv6, TCP, UDP and ICMP into a
//! [`Parsed`] (an [`IpPacket`] with its [`FiveTuple`], [`Parsed::NonIp`], or [`Malformed`] with a
//! reason); [`flow_id`] hashes the 5-tuple with a seed ([`DEFAULT_FLOW_SEED`] for tests); the
//! [`Classifier`]'s ordered [`ClassRule`]s give a [`Verdict`]; [`mark_ce`] sets CE (RFC 3168 §5,
//! RFC 1624); [`ParseCounters`] and [`EcnCounters`] count every outcome;
//! [`build::write_tcp_frame`] writes test frames; [`gso`] handles super-frames ([`VnetHdr`],
//! [`wire_bytes`], [`SuperFrame::piece`]). No I/O, no clock, no allocation per packet, no panic
//! on any input (fuzzed with bolero, `tests/fuzz.rs`, seeds in `corpus/`).
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
