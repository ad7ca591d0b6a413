//! The invariants every input to parse, classify and mark_ce must keep, shared by the fuzz
//! targets and the corpus test.

use super::v4_checksum_ok;
use metronome_core::ClassId;
use metronome_packet::{
    mark_ce, parse, ClassRule, Classifier, Ecn, EcnMark, Fragment, ParseCounters, Parsed, Verdict,
    MAX_FRAME_BYTES,
};
use std::net::IpAddr;

/// A classifier with a port rule, a v4 prefix, a v6 prefix and a DSCP rule.
pub fn classifier() -> Classifier {
    let rule = |s: &str| ClassRule {
        dst: Some(s.parse().unwrap()),
        ..Default::default()
    };
    Classifier::new(
        vec![
            (
                ClassRule {
                    dst_port: Some((1000, 2000)),
                    protocol: Some(6),
                    ..Default::default()
                },
                ClassId(1),
            ),
            (rule("10.0.0.0/8"), ClassId(2)),
            (rule("2001:db8::/32"), ClassId(3)),
            (
                ClassRule {
                    dscp: Some(46),
                    ..Default::default()
                },
                ClassId(4),
            ),
        ],
        ClassId(0),
    )
}

/// The invariants every input must keep; returns the parse for further checks.
pub fn check_invariants(frame: &[u8], classifier: &Classifier) -> Parsed {
    let parsed = parse(frame);
    let verdict = classifier.classify(&parsed);
    let mut counters = ParseCounters::new();
    counters.record(&verdict);
    assert_eq!(counters.total(), 1);
    match (&parsed, verdict) {
        (Parsed::Ip(ip), Verdict::Shape { len, .. }) => {
            assert_eq!(usize::from(len), frame.len().min(MAX_FRAME_BYTES));
            let at = usize::from(ip.ip_offset);
            assert!(at == 14 + 4 * usize::from(ip.vlan_tags));
            let version = frame[at] >> 4;
            assert_eq!(version, if ip.tuple.src.is_ipv4() { 4 } else { 6 });
            assert_eq!(ip.tuple.src.is_ipv4(), ip.tuple.dst.is_ipv4());
            assert!(ip.dscp < 64);
            assert_eq!(ip.origin, 0, "the frame does not carry an origin");
            if !ip.has_ports {
                assert_eq!((ip.tuple.src_port, ip.tuple.dst_port), (0, 0));
            }
            if ip.fragment == Fragment::Later {
                assert!(!ip.has_ports);
            }
        }
        (Parsed::NonIp(n), Verdict::PassNonIp) => {
            assert_eq!(usize::from(n.wire_len), frame.len().min(MAX_FRAME_BYTES))
        }
        (Parsed::Malformed(a), Verdict::Malformed(b)) => assert_eq!(*a, b),
        (p, v) => panic!("verdict {v:?} for {p:?}"),
    }
    check_marking(frame, &parsed);
    parsed
}

pub fn check_marking(frame: &[u8], parsed: &Parsed) {
    let mut marked = frame.to_vec();
    let outcome = mark_ce(&mut marked, parsed);
    let Some(ip) = parsed.ip() else {
        assert_eq!(outcome, EcnMark::NotIp);
        assert_eq!(marked, frame);
        return;
    };
    let at = usize::from(ip.ip_offset);
    let allowed: &[usize] = match ip.tuple.src {
        IpAddr::V4(_) => &[at + 1, at + 10, at + 11],
        IpAddr::V6(_) => &[at + 1],
    };
    for (i, (a, b)) in frame.iter().zip(&marked).enumerate() {
        assert!(a == b || allowed.contains(&i), "byte {i} changed");
    }
    if outcome == EcnMark::Marked {
        let reparsed = parse(&marked);
        assert_eq!(reparsed.ip().map(|p| p.ecn), Some(Ecn::Ce));
        if ip.tuple.src.is_ipv4() && v4_checksum_ok(frame, at) {
            assert!(v4_checksum_ok(&marked, at), "checksum broken by the mark");
        }
    } else {
        assert_eq!(marked, frame);
    }
    assert_ne!(
        mark_ce(&mut marked, parsed),
        EcnMark::Marked,
        "marked twice"
    );
}
