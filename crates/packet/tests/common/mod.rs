//! Hand-built frames for the integration tests, the fuzz seeds and the corpus generator.
//!
//! TCP, UDP and ICMP over IPv4 and IPv6 come from etherparse's `PacketBuilder` (valid lengths
//! and checksums); VLAN tags, TOS bytes, fragments and IPv6 extension headers are patched in by
//! hand so each test controls the exact bytes.
#![allow(dead_code)] // each test binary uses a different subset

pub mod invariants;
pub mod rules;

use etherparse::PacketBuilder;
use metronome_packet::ipv4_header_checksum;
use std::path::{Path, PathBuf};

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
pub const ETH: usize = 14;

/// The transports the builders know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
    Icmp,
}

/// Ethernet + IPv4 + `l4` with `payload_len` zero bytes of payload and TOS `tos`.
pub fn v4(src: [u8; 4], dst: [u8; 4], l4: L4, sport: u16, dport: u16, tos: u8) -> Vec<u8> {
    v4_len(src, dst, l4, sport, dport, tos, 16)
}

/// As [`v4`], with `payload_len` bytes of payload.
pub fn v4_len(
    src: [u8; 4],
    dst: [u8; 4],
    l4: L4,
    sport: u16,
    dport: u16,
    tos: u8,
    payload_len: usize,
) -> Vec<u8> {
    let ip = PacketBuilder::ethernet2(MAC_A, MAC_B).ipv4(src, dst, 64);
    let payload = vec![0xa5; payload_len];
    let mut out = Vec::new();
    match l4 {
        L4::Tcp => ip.tcp(sport, dport, 1, 65535).write(&mut out, &payload),
        L4::Udp => ip.udp(sport, dport).write(&mut out, &payload),
        L4::Icmp => ip.icmpv4_echo_request(7, 1).write(&mut out, &payload),
    }
    .unwrap();
    set_tos_v4(&mut out, ETH, tos);
    out
}

/// Ethernet + IPv6 + `l4`, traffic class `tc`.
pub fn v6(src: [u8; 16], dst: [u8; 16], l4: L4, sport: u16, dport: u16, tc: u8) -> Vec<u8> {
    let ip = PacketBuilder::ethernet2(MAC_A, MAC_B).ipv6(src, dst, 64);
    let payload = [0x5a; 16];
    let mut out = Vec::new();
    match l4 {
        L4::Tcp => ip.tcp(sport, dport, 1, 65535).write(&mut out, &payload),
        L4::Udp => ip.udp(sport, dport).write(&mut out, &payload),
        L4::Icmp => ip.icmpv6_echo_request(7, 1).write(&mut out, &payload),
    }
    .unwrap();
    set_tc_v6(&mut out, ETH, tc);
    out
}

/// `2001:db8::<last>`.
pub fn ip6(last: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[14..].copy_from_slice(&last.to_be_bytes());
    a
}

/// Sets the TOS byte of the IPv4 header at `ip` and refreshes its checksum.
pub fn set_tos_v4(frame: &mut [u8], ip: usize, tos: u8) {
    frame[ip + 1] = tos;
    fix_v4_checksum(frame, ip);
}

/// Recomputes the IPv4 header checksum at `ip`.
pub fn fix_v4_checksum(frame: &mut [u8], ip: usize) {
    let sum = ipv4_header_checksum(&frame[ip..]).unwrap();
    frame[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
}

/// Whether the IPv4 header at `ip` carries a correct checksum.
pub fn v4_checksum_ok(frame: &[u8], ip: usize) -> bool {
    let stored = u16::from_be_bytes([frame[ip + 10], frame[ip + 11]]);
    ipv4_header_checksum(&frame[ip..]) == Some(stored)
}

/// Sets the IPv6 traffic class at `ip`.
pub fn set_tc_v6(frame: &mut [u8], ip: usize, tc: u8) {
    frame[ip] = 0x60 | (tc >> 4);
    frame[ip + 1] = (tc << 4) | (frame[ip + 1] & 0x0f);
}

/// Inserts VLAN tags `(tpid, vid)` after the MAC addresses, outermost first.
pub fn with_vlans(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    for &(tpid, vid) in tags {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&vid.to_be_bytes());
    }
    out.extend_from_slice(&frame[12..]);
    out
}

/// Turns the IPv4 frame into a fragment: offset in 8-byte units, More Fragments flag; the IP
/// payload is cut to `keep` bytes (total length adjusted, checksum refreshed).
pub fn fragment_v4(frame: &[u8], offset_units: u16, more: bool, keep: usize) -> Vec<u8> {
    let ihl = usize::from(frame[ETH] & 0x0f) * 4;
    let mut out = frame[..ETH + ihl + keep].to_vec();
    let total = (ihl + keep) as u16;
    out[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
    let flags = offset_units | if more { 0x2000 } else { 0 };
    out[ETH + 6..ETH + 8].copy_from_slice(&flags.to_be_bytes());
    fix_v4_checksum(&mut out, ETH);
    out
}

/// An Ethernet + IPv6 frame with a raw chain: `next_header` names the first header in `rest`.
pub fn v6_raw(src: [u8; 16], dst: [u8; 16], next_header: u8, rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ETH + 40 + rest.len());
    out.extend_from_slice(&MAC_B);
    out.extend_from_slice(&MAC_A);
    out.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    out.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    out.extend_from_slice(&[next_header, 64]);
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    out.extend_from_slice(rest);
    out
}

/// An IPv6 Fragment header (RFC 8200 §4.5).
pub fn v6_frag_header(next_header: u8, offset_units: u16, more: bool) -> [u8; 8] {
    let field = (offset_units << 3) | u16::from(more);
    let f = field.to_be_bytes();
    [next_header, 0, f[0], f[1], 0, 0, 0x12, 0x34]
}

/// An 8-byte Hop-by-Hop or Destination Options header padded with PadN (RFC 8200 §4.2).
pub fn v6_options_header(next_header: u8) -> [u8; 8] {
    [next_header, 0, 1, 4, 0, 0, 0, 0]
}

/// A 20-byte TCP header with the given ports, data offset 5.
pub fn tcp_header(sport: u16, dport: u16) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[12] = 5 << 4;
    h
}

/// An ARP request (EtherType 0x0806), padded to the 60-byte Ethernet minimum.
pub fn arp() -> Vec<u8> {
    let mut out = vec![0xff; 6];
    out.extend_from_slice(&MAC_A);
    out.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    out.extend_from_slice(&MAC_A);
    out.extend_from_slice(&[10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2]);
    out.resize(60, 0);
    out
}

/// `crates/packet/corpus`.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Reads a corpus file: `#` comment lines (the `# expect: ...` one returned after the prefix),
/// the rest hex digits, whitespace ignored.
pub fn from_hex_file(text: &str) -> (Vec<u8>, Option<String>) {
    let mut expect = None;
    let mut digits = String::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(e) = comment.trim().strip_prefix("expect:") {
                expect = expect.or(Some(e.trim().to_string()));
            }
        } else {
            digits.extend(line.chars().filter(|c| !c.is_whitespace()));
        }
    }
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    let bytes = (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex digit"))
        .collect();
    (bytes, expect)
}

/// Every `corpus/*.hex` file: path, frame, expectation.
pub fn read_corpus() -> Vec<(PathBuf, Vec<u8>, Option<String>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("corpus directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let (frame, expect) = from_hex_file(&std::fs::read_to_string(&path).unwrap());
            (path, frame, expect)
        })
        .collect()
}
