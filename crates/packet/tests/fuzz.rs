//! Fuzz tests of the parser, the classifier and the ECN marker, with bolero.
//!
//! Under `cargo test` (stable) bolero's test engine feeds each target a few thousand random
//! inputs (OS-seeded; a failure prints `BOLERO_RANDOM_SEED=...` to replay it). With
//! `cargo bolero test -p metronome-packet --test fuzz <target>` on a nightly toolchain the same
//! targets run under libFuzzer; seed it with the frames of `corpus/` (hex, see
//! `tests/corpus.rs`). Targets:
//!
//! * `arbitrary_bytes`: any bytes through parse, classify and mark_ce. Invariants: no panic; an
//!   IP parse points inside the frame at a header of the right version; a mark changes only
//!   the ECN bits (and the IPv4 checksum, which stays valid if it was valid); a second mark
//!   never marks.
//! * `corrupted_frames`: structurally valid frames (0..=3 VLAN tags, v4/v6, TCP/UDP/ICMP/other,
//!   fragments, ToS, ports) checked against their specification, then hit by random byte
//!   flips and a random truncation, and checked against the same invariants.
//! * `mutated_corpus_seeds`: the committed `corpus/` frames with random byte flips and
//!   truncations (reaches IPv6 extension chains, options and fragments the generator does not).
//! * `vnet_headers_and_cuts`: any 10 bytes through `VnetHdr::parse` (a header that parses
//!   writes back the same bytes), then any header with a TCP super-frame whose header bytes are
//!   XORed with random bytes and truncated at random, through `SuperFrame::parse`, `wire_bytes`
//!   and every piece of a cut. Invariants: no panic; the pieces' payload ranges lie in the
//!   frame, follow each other and cover the payload.

mod common;

use bolero::{check, generator::TypeGenerator};
use common::invariants::{check_invariants, classifier};
use common::*;
use metronome_packet::Parsed;

/// Random inputs per target under `cargo test`: enough to reach every malformed reason from the
/// structured generator, small enough to keep the crate's tests under a second.
const ITERATIONS: usize = 4_000;

#[test]
fn arbitrary_bytes() {
    // Its exact-match cache is made of `Cell`s, which are not unwind-safe: a panic here fails
    // the test, and nothing reads the classifier after it.
    let classifier = std::panic::AssertUnwindSafe(classifier());
    check!()
        .with_iterations(ITERATIONS)
        .with_max_len(128)
        .for_each(|bytes: &[u8]| {
            check_invariants(bytes, &classifier);
            // Also behind an Ethernet + IPv4/IPv6 EtherType, so the random bytes reach the IP
            // and transport parsers rather than stopping at an unknown EtherType.
            for ether_type in [[0x08, 0x00], [0x86, 0xdd], [0x81, 0x00]] {
                let mut frame = [0u8; 12].to_vec();
                frame.extend_from_slice(&ether_type);
                frame.extend_from_slice(bytes);
                check_invariants(&frame, &classifier);
            }
        });
}

/// A frame specification the structured target builds, then corrupts.
#[derive(Clone, Debug, TypeGenerator)]
struct FrameSpec {
    #[generator(0..=3u8)]
    vlan_tags: u8,
    ipv6: bool,
    #[generator(0..=3u8)]
    transport: u8,
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    tos: u8,
    #[generator(0..=2u8)]
    fragment: u8,
    hop_by_hop: bool,
    #[generator(0..=200usize)]
    payload: usize,
    /// A header field set to a random value (checksum refreshed): see [`FrameSpec::poke`].
    poke: Option<(u8, u16)>,
    /// Below 64 (one time in four): cut the transport header to `l4_cut % 24` bytes, IP
    /// lengths adjusted to match.
    l4_cut: u8,
    #[generator(bolero::produce::<Vec<(u16, u8)>>().with().len(0..4usize))]
    flips: Vec<(u16, u8)>,
    /// Below 0x4000 (one time in four): truncate the frame to `truncate % (len + 1)` bytes.
    truncate: u16,
}

impl FrameSpec {
    fn l4(&self) -> L4 {
        match self.transport {
            0 => L4::Tcp,
            1 => L4::Udp,
            _ => L4::Icmp,
        }
    }

    /// The uncorrupted frame, and the IP offset.
    fn build(&self) -> (Vec<u8>, usize) {
        let (sport, dport) = match self.l4() {
            L4::Icmp => (0, 0),
            _ => (self.sport, self.dport),
        };
        let mut frame = if self.ipv6 {
            let mut src = ip6(0);
            src[12..].copy_from_slice(&self.src.to_be_bytes());
            let mut dst = ip6(0);
            dst[12..].copy_from_slice(&self.dst.to_be_bytes());
            let mut f = v6(src, dst, self.l4(), sport, dport, self.tos);
            let ext = match self.fragment {
                0 if self.hop_by_hop => Some((0, v6_options_header(f[20]))),
                0 => None,
                1 => Some((44, v6_frag_header(f[20], 0, true))),
                _ => Some((44, v6_frag_header(f[20], 3, false))),
            };
            if let Some((kind, header)) = ext {
                f.splice(54..54, header);
                f[20] = kind;
                let len = f.len() - 54;
                set_ip_payload_len(&mut f, true, len);
            }
            f
        } else {
            let f = v4_len(
                self.src.to_be_bytes(),
                self.dst.to_be_bytes(),
                self.l4(),
                sport,
                dport,
                self.tos,
                self.payload,
            );
            match self.fragment {
                0 => f,
                1 => {
                    let keep = (f.len() - 34).min(24);
                    fragment_v4(&f, 0, true, keep)
                }
                _ => fragment_v4(&f, 3, false, f.len() - 34),
            }
        };
        if self.transport == 3 {
            // Another protocol number (GRE) in place of the transport's.
            let at = if self.ipv6 { 14 + 6 } else { 14 + 9 };
            frame[at] = 47;
            if !self.ipv6 {
                fix_v4_checksum(&mut frame, 14);
            }
        }
        self.poke(&mut frame);
        let tags: Vec<(u16, u16)> =
            [(0x88a8, 1), (0x8100, 2), (0x9100, 3)][..usize::from(self.vlan_tags)].to_vec();
        (
            with_vlans(&frame, &tags),
            14 + 4 * usize::from(self.vlan_tags),
        )
    }

    /// Sets one header field of the untagged frame to a random value, then cuts the transport
    /// header if asked; IPv4 checksums are refreshed so that only the named field is wrong.
    fn poke(&self, frame: &mut Vec<u8>) {
        let ip = 14;
        let l4 = if self.ipv6 {
            ip + 40
        } else {
            ip + usize::from(frame[ip] & 0x0f) * 4
        };
        if let Some((field, value)) = self.poke {
            let [hi, lo] = value.to_be_bytes();
            let at = match (field % 6, self.ipv6) {
                (0, _) => ip,         // version and IHL / traffic class
                (1, false) => ip + 2, // total length
                (1, true) => ip + 4,  // payload length
                (2, false) => ip + 9, // protocol
                (2, true) => ip + 6,  // next header
                (3, false) => ip + 6, // flags and fragment offset
                (3, true) => l4,      // first extension or transport bytes
                (4, _) => l4 + 4,     // UDP length / TCP sequence number
                _ => l4 + 12,         // TCP data offset
            };
            if at + 1 < frame.len() {
                frame[at] = hi;
                if field % 6 != 0 {
                    frame[at + 1] = lo;
                }
            }
        }
        if self.l4_cut < 64 {
            let keep = (l4 + usize::from(self.l4_cut % 24)).min(frame.len());
            frame.truncate(keep);
            set_ip_payload_len(frame, self.ipv6, keep - 14 - if self.ipv6 { 40 } else { 0 });
        }
        let v4_header = frame.len() >= 34 && frame[ip] >> 4 == 4 && frame[ip] & 0x0f >= 5;
        if !self.ipv6 && v4_header && ipv4_header_checksum_fits(frame) {
            fix_v4_checksum(frame, ip);
        }
    }

    /// What the parse of the uncorrupted frame must say.
    fn check_clean(&self, parsed: &Parsed, ip_offset: usize) {
        if self.vlan_tags > 2 {
            assert!(matches!(parsed, Parsed::Malformed(_)), "{parsed:?}");
            return;
        }
        if self.poke.is_some() || self.l4_cut < 64 {
            return; // may or may not still be valid
        }
        let ip = parsed
            .ip()
            .unwrap_or_else(|| panic!("{self:?} gave {parsed:?}"));
        assert_eq!(usize::from(ip.ip_offset), ip_offset);
        assert_eq!(ip.tuple.src.is_ipv6(), self.ipv6);
        assert_eq!((ip.dscp, ip.ecn as u8), (self.tos >> 2, self.tos & 3));
        let expect_ports = self.transport < 2 && self.fragment != 2;
        assert_eq!(ip.has_ports, expect_ports, "{self:?}");
        if expect_ports {
            assert_eq!(
                (ip.tuple.src_port, ip.tuple.dst_port),
                (self.sport, self.dport)
            );
        }
    }
}

#[test]
fn corrupted_frames() {
    // Its exact-match cache is made of `Cell`s, which are not unwind-safe: a panic here fails
    // the test, and nothing reads the classifier after it.
    let classifier = std::panic::AssertUnwindSafe(classifier());
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<FrameSpec>()
        .for_each(|spec: &FrameSpec| {
            let (mut frame, ip_offset) = spec.build();
            let clean = check_invariants(&frame, &classifier);
            spec.check_clean(&clean, ip_offset);
            for &(at, xor) in &spec.flips {
                let len = frame.len();
                frame[usize::from(at) % len] ^= xor;
            }
            if spec.truncate < 0x4000 {
                frame.truncate(usize::from(spec.truncate) % (frame.len() + 1));
            }
            check_invariants(&frame, &classifier);
        });
}

/// A mutation of one committed corpus seed.
#[derive(Clone, Debug, TypeGenerator)]
struct SeedMutation {
    seed: u16,
    #[generator(bolero::produce::<Vec<(u16, u8)>>().with().len(1..6usize))]
    flips: Vec<(u16, u8)>,
    /// Below 0x4000 (one time in four): truncate to `truncate % (len + 1)` bytes.
    truncate: u16,
}

#[test]
fn mutated_corpus_seeds() {
    // Its exact-match cache is made of `Cell`s, which are not unwind-safe: a panic here fails
    // the test, and nothing reads the classifier after it.
    let classifier = std::panic::AssertUnwindSafe(classifier());
    let seeds: Vec<Vec<u8>> = read_corpus()
        .into_iter()
        .map(|(_, frame, _)| frame)
        .filter(|f| !f.is_empty())
        .collect();
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<SeedMutation>()
        .for_each(|m: &SeedMutation| {
            let mut frame = seeds[usize::from(m.seed) % seeds.len()].clone();
            for &(at, xor) in &m.flips {
                let len = frame.len();
                frame[usize::from(at) % len] ^= xor;
            }
            if m.truncate < 0x4000 {
                frame.truncate(usize::from(m.truncate) % (frame.len() + 1));
            }
            check_invariants(&frame, &classifier);
        });
}

/// Sets the IPv4 total length (`len` = bytes after the Ethernet header) or the IPv6 payload
/// length (`len` = bytes after the fixed header) of an untagged frame.
fn set_ip_payload_len(frame: &mut [u8], ipv6: bool, len: usize) {
    let at = if ipv6 { 14 + 4 } else { 14 + 2 };
    if frame.len() < at + 2 {
        return;
    }
    frame[at..at + 2].copy_from_slice(&(len as u16).to_be_bytes());
}

/// Whether the IPv4 header its IHL describes fits in the frame.
fn ipv4_header_checksum_fits(frame: &[u8]) -> bool {
    frame.len() >= 14 + usize::from(frame[14] & 0x0f) * 4
}

/// A TCP super-frame template: Ethernet, IPv4 or IPv6, TCP (20 bytes), 3000 payload bytes.
fn super_frame_template(ipv6: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    let tcp_len = 20 + 3000;
    if ipv6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        f.extend_from_slice(&[6, 64]);
        f.extend_from_slice(&[0xfd; 32]);
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    }
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18]);
    f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    f.extend((0..3000).map(|i| i as u8));
    f
}

#[test]
fn vnet_headers_and_cuts() {
    use metronome_packet::gso::{wire_bytes, GsoType, SuperFrame, VnetHdr, RX_BYTES_FRAMING};
    let templates = [super_frame_template(false), super_frame_template(true)];
    check!()
        .with_iterations(ITERATIONS)
        .with_max_len(160)
        .for_each(|bytes: &[u8]| {
            if let Ok(h) = VnetHdr::parse(bytes) {
                assert_eq!(&h.to_bytes()[..], &bytes[..10]);
            }
            let Some((&choice, rest)) = bytes.split_first() else {
                return;
            };
            let gso_type = [
                GsoType::TcpV4,
                GsoType::TcpV6,
                GsoType::UdpL4,
                GsoType::None,
            ][usize::from(choice & 3)];
            let (size, rest) = rest.split_at(rest.len().min(2));
            let gso_size =
                u16::from_le_bytes([*size.first().unwrap_or(&0), *size.get(1).unwrap_or(&0)]);
            let hdr = VnetHdr {
                gso_type,
                gso_size,
                ..VnetHdr::NONE
            };
            let mut frame = templates[usize::from(choice >> 2 & 1)].clone();
            for (b, x) in frame.iter_mut().zip(rest) {
                *b ^= x;
            }
            if choice & 0x80 != 0 {
                frame.truncate(usize::from(gso_size) % (frame.len() + 1));
            }
            let _ = wire_bytes(&frame, &hdr, RX_BYTES_FRAMING);
            let Ok(sf) = SuperFrame::parse(&frame, &hdr) else {
                return;
            };
            let n = u32::from(choice >> 3 & 7);
            let mut scratch = [0u8; 128];
            let mut next = sf.header_len();
            for k in 0..sf.pieces(n) {
                let Ok(p) = sf.piece(&frame, k, n, &mut scratch) else {
                    continue;
                };
                assert_eq!(p.payload.start, next);
                assert!(p.payload.end <= frame.len() && p.segments <= n);
                next = p.payload.end;
            }
            if sf.pieces(n) > 0 && hdr.gso_type != GsoType::UdpL4 {
                assert_eq!(next, sf.header_len() + sf.payload_len());
            }
        });
}
