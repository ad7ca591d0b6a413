//! The committed seed corpus, `crates/packet/corpus/*.hex`: every file through the parser,
//! the classifier and the ECN marker.
//!
//! File format: `#` comment lines, one of which may read `# expect: ip`, `# expect: non_ip` or
//! `# expect: malformed <reason>` (a [`Malformed::name`]); the rest is the frame in hex
//! (whitespace ignored). A file without an expectation (say, a crash input a fuzzer found,
//! converted with `xxd -p`) is only checked not to panic.
//!
//! The seeds are generated from the builders in `tests/common` by
//! `cargo test -p metronome-packet --test corpus -- --ignored write_corpus`;
//! `corpus_is_up_to_date` fails if a file and its generator disagree.

mod common;

use common::invariants::{check_invariants, classifier};
use common::*;
use metronome_packet::{parse, proto, Malformed, Parsed};

/// What a seed must parse to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Ip,
    NonIp,
    Malformed(Malformed),
}

impl Expect {
    fn line(self) -> String {
        match self {
            Expect::Ip => "# expect: ip".into(),
            Expect::NonIp => "# expect: non_ip".into(),
            Expect::Malformed(m) => format!("# expect: malformed {}", m.name()),
        }
    }

    fn from_str(s: &str) -> Expect {
        match s {
            "ip" => Expect::Ip,
            "non_ip" => Expect::NonIp,
            _ => {
                let name = s
                    .strip_prefix("malformed ")
                    .expect("ip, non_ip or malformed");
                let reason = Malformed::ALL.into_iter().find(|m| m.name() == name);
                Expect::Malformed(reason.unwrap_or_else(|| panic!("unknown reason {name}")))
            }
        }
    }

    fn of(parsed: &Parsed) -> Expect {
        match parsed {
            Parsed::Ip(_) => Expect::Ip,
            Parsed::NonIp(_) => Expect::NonIp,
            Parsed::Malformed(m) => Expect::Malformed(*m),
        }
    }
}

/// The seeds: name, description, frame, expected parse.
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>, Expect)> {
    use Expect::{Ip, Malformed as Bad, NonIp};
    use Malformed::*;
    let (a, b) = ([10, 0, 0, 1], [10, 1, 2, 3]);
    let tcp4 = v4(a, b, L4::Tcp, 40_000, 443, 0);
    let udp4 = v4(a, b, L4::Udp, 5000, 5001, 0);
    let tcp4_long = v4_len(a, b, L4::Tcp, 40_000, 443, 0, 64);
    let patch = |f: &[u8], at: usize, bytes: &[u8]| {
        let mut f = f.to_vec();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    };
    let mut optioned = tcp4[..34].to_vec();
    optioned.extend_from_slice(&[1; 8]);
    optioned.extend_from_slice(&tcp4[34..]);
    optioned[14] = 0x47;
    let total = u16::from_be_bytes([optioned[16], optioned[17]]) + 8;
    optioned[16..18].copy_from_slice(&total.to_be_bytes());
    fix_v4_checksum(&mut optioned, 14);
    let mut padded = v4_len(a, b, L4::Udp, 1, 2, 0, 0);
    padded.resize(60, 0);
    let mut ext_chain = v6_options_header(60).to_vec();
    ext_chain.extend_from_slice(&v6_options_header(proto::TCP));
    ext_chain.extend_from_slice(&tcp_header(1000, 2000));
    let mut frag6_first = v6_frag_header(proto::TCP, 0, true).to_vec();
    frag6_first.extend_from_slice(&tcp_header(1000, 2000));
    let mut frag6_later = v6_frag_header(proto::UDP, 5, false).to_vec();
    frag6_later.extend_from_slice(&[0xee; 24]);
    let mut late_hbh = v6_options_header(0).to_vec();
    late_hbh.extend_from_slice(&v6_options_header(proto::TCP));
    let mut llc = arp();
    llc[12..14].copy_from_slice(&46u16.to_be_bytes());
    vec![
        (
            "tcp_v4",
            "IPv4 TCP 10.0.0.1:40000 -> 10.1.2.3:443",
            tcp4.clone(),
            Ip,
        ),
        ("udp_v4", "IPv4 UDP", udp4.clone(), Ip),
        (
            "icmp_v4",
            "IPv4 ICMP echo request",
            v4(a, b, L4::Icmp, 0, 0, 0),
            Ip,
        ),
        (
            "tcp_v4_ef_ect0",
            "DSCP EF, ECT(0)",
            v4(a, b, L4::Tcp, 1, 2, 46 << 2 | 2),
            Ip,
        ),
        (
            "udp_v4_ce",
            "CE already set",
            v4(a, b, L4::Udp, 1, 2, 3),
            Ip,
        ),
        ("tcp_v4_options", "IHL 7, NOP options", optioned, Ip),
        ("udp_v4_padded", "42-byte frame padded to 60", padded, Ip),
        (
            "tcp_v6",
            "IPv6 TCP",
            v6(ip6(1), ip6(2), L4::Tcp, 1234, 80, 0),
            Ip,
        ),
        (
            "udp_v6_ect1",
            "IPv6 UDP, ECT(1)",
            v6(ip6(1), ip6(2), L4::Udp, 9, 10, 1),
            Ip,
        ),
        (
            "icmp_v6",
            "ICMPv6 echo request",
            v6(ip6(1), ip6(2), L4::Icmp, 0, 0, 0),
            Ip,
        ),
        (
            "v6_ext_chain",
            "Hop-by-Hop, Dest Options, TCP",
            v6_raw(ip6(1), ip6(2), 0, &ext_chain),
            Ip,
        ),
        (
            "v6_gre",
            "IPv6 GRE: no ports",
            v6_raw(ip6(1), ip6(2), 47, &[0; 8]),
            Ip,
        ),
        (
            "vlan_tcp_v4",
            "802.1Q VID 10",
            with_vlans(&tcp4, &[(0x8100, 10)]),
            Ip,
        ),
        (
            "qinq_udp_v4",
            "802.1ad + 802.1Q",
            with_vlans(&udp4, &[(0x88a8, 100), (0x8100, 10)]),
            Ip,
        ),
        (
            "qinq_legacy_tcp_v6",
            "0x9100 + 802.1Q",
            with_vlans(
                &v6(ip6(1), ip6(2), L4::Tcp, 1, 2, 0),
                &[(0x9100, 1), (0x8100, 2)],
            ),
            Ip,
        ),
        (
            "frag_v4_first",
            "first fragment, TCP header inside",
            fragment_v4(&tcp4_long, 0, true, 48),
            Ip,
        ),
        (
            "frag_v4_first_short",
            "first fragment cut inside the TCP header",
            fragment_v4(&tcp4_long, 0, true, 16),
            Ip,
        ),
        (
            "frag_v4_later",
            "non-first fragment",
            fragment_v4(&tcp4_long, 6, false, 40),
            Ip,
        ),
        (
            "frag_v6_first",
            "IPv6 first fragment",
            v6_raw(ip6(1), ip6(2), 44, &frag6_first),
            Ip,
        ),
        (
            "frag_v6_later",
            "IPv6 non-first fragment",
            v6_raw(ip6(1), ip6(2), 44, &frag6_later),
            Ip,
        ),
        ("arp", "ARP request", arp(), NonIp),
        (
            "vlan_arp",
            "802.1Q ARP",
            with_vlans(&arp(), &[(0x8100, 5)]),
            NonIp,
        ),
        ("llc_8023", "802.3 length field", llc, NonIp),
        ("empty", "zero bytes", Vec::new(), Bad(TruncatedEthernet)),
        (
            "trunc_ethernet",
            "10 bytes",
            tcp4[..10].to_vec(),
            Bad(TruncatedEthernet),
        ),
        (
            "trunc_vlan",
            "tag cut",
            with_vlans(&tcp4, &[(0x8100, 10)])[..16].to_vec(),
            Bad(TruncatedVlan),
        ),
        (
            "triple_vlan",
            "three tags",
            with_vlans(&udp4, &[(0x88a8, 1), (0x8100, 2), (0x8100, 3)]),
            Bad(TooManyVlanTags),
        ),
        (
            "trunc_v4_header",
            "IPv4 header cut at 12 bytes",
            tcp4[..26].to_vec(),
            Bad(TruncatedIpHeader),
        ),
        (
            "trunc_v6_header",
            "IPv6 header cut at 30 bytes",
            v6(ip6(1), ip6(2), L4::Udp, 1, 2, 0)[..44].to_vec(),
            Bad(TruncatedIpHeader),
        ),
        (
            "v4_bad_ihl",
            "IHL 4",
            patch(&tcp4, 14, &[0x44]),
            Bad(BadIhl),
        ),
        (
            "v4_bad_version",
            "version 6 under EtherType IPv4",
            patch(&tcp4, 14, &[0x65]),
            Bad(BadIpVersion),
        ),
        (
            "v4_total_len_beyond_frame",
            "total length 0xffff",
            patch(&tcp4, 16, &[0xff, 0xff]),
            Bad(BadTotalLength),
        ),
        (
            "v4_total_len_below_header",
            "total length 19",
            patch(&tcp4, 16, &[0, 19]),
            Bad(BadTotalLength),
        ),
        (
            "trunc_v4_payload",
            "frame cut inside the TCP segment",
            tcp4[..50].to_vec(),
            Bad(BadTotalLength),
        ),
        (
            "v6_payload_len_beyond_frame",
            "payload length 0x1000",
            patch(&v6(ip6(1), ip6(2), L4::Udp, 1, 2, 0), 18, &[0x10, 0]),
            Bad(BadPayloadLength),
        ),
        (
            "v6_hbh_not_first",
            "Hop-by-Hop after Dest Options",
            v6_raw(ip6(1), ip6(2), 60, &late_hbh),
            Bad(BadExtensionHeader),
        ),
        (
            "tcp_bad_doff",
            "TCP data offset 4",
            patch(&tcp4, 46, &[0x40]),
            Bad(BadTcpDataOffset),
        ),
        (
            "tcp_truncated",
            "TCP header cut at 10 bytes",
            fragment_v4(&tcp4, 0, false, 10),
            Bad(TruncatedTransport),
        ),
        (
            "udp_bad_len",
            "UDP length 7",
            patch(&udp4, 38, &[0, 7]),
            Bad(BadUdpLength),
        ),
        (
            "icmp_truncated",
            "ICMP header cut at 4 bytes",
            fragment_v4(&v4(a, b, L4::Icmp, 0, 0, 0), 0, false, 4),
            Bad(TruncatedTransport),
        ),
    ]
}

fn to_hex_file(description: &str, frame: &[u8], expect: Expect) -> String {
    let mut out = format!("# {description}\n{}\n", expect.line());
    for line in frame.chunks(16) {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        out.push_str(&hex.join(" "));
        out.push('\n');
    }
    out
}

#[test]
fn every_corpus_file_parses_as_expected() {
    let classifier = classifier();
    let corpus = read_corpus();
    for (path, frame, expect) in &corpus {
        let parsed = check_invariants(frame, &classifier);
        if let Some(expect) = expect {
            assert_eq!(
                Expect::of(&parsed),
                Expect::from_str(expect),
                "{}",
                path.display()
            );
        }
    }
    assert!(
        corpus.len() >= seeds().len(),
        "{} corpus files",
        corpus.len()
    );
}

#[test]
fn corpus_is_up_to_date() {
    for (name, description, frame, expect) in seeds() {
        assert_eq!(Expect::of(&parse(&frame)), expect, "seed {name}");
        let path = corpus_dir().join(format!("{name}.hex"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}; run the ignored write_corpus test", path.display())
        });
        assert_eq!(
            text,
            to_hex_file(description, &frame, expect),
            "{name} is stale"
        );
    }
}

/// Regenerates `corpus/*.hex` from [`seeds`]. Run on purpose, then commit the files.
#[test]
#[ignore = "writes the committed corpus"]
fn write_corpus() {
    std::fs::create_dir_all(corpus_dir()).unwrap();
    for (name, description, frame, expect) in seeds() {
        let path = corpus_dir().join(format!("{name}.hex"));
        std::fs::write(path, to_hex_file(description, &frame, expect)).unwrap();
    }
}
