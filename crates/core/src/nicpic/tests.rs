use super::*;
use proptest::prelude::*;

const MTU: u32 = 1500;

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn nic(rates: &[Rate]) -> NicPic {
    NicPic::new(NicPicConfig::default(), rates).expect("valid configuration")
}

/// One pull as the driver saw it.
#[derive(Clone, Copy, Debug)]
struct Sent {
    at: u64,
    pull: Pull,
}

/// Drives `nic` in simulated time until `end` ns or until nothing is backlogged: sleeps until
/// `next_due`, pulls, and asks `refill(class, now)` for the next segment after each `last`
/// piece (announced in the same instant). Checks the invariants and that `next_due` is never
/// late: a pull at the instant it names returns a piece unless a parked class had to move.
fn drive(nic: &mut NicPic, end: u64, mut refill: impl FnMut(u32, u64) -> Option<u32>) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut now = 0;
    let mut idle_polls = 0;
    while let Some(due) = nic.next_due() {
        now = now.max(due.as_nanos());
        if now >= end {
            break;
        }
        let reinserted = nic.counters().reinserted;
        match nic.pull(t(now)) {
            Some(pull) => {
                idle_polls = 0;
                if pull.last {
                    if let Some(len) = refill(pull.class, now) {
                        nic.backlog(t(now), pull.class, len)
                            .expect("idle class accepts");
                    }
                }
                sent.push(Sent { at: now, pull });
            }
            None => {
                assert!(
                    nic.counters().reinserted > reinserted,
                    "next_due named {now} but nothing was pulled"
                );
                idle_polls += 1;
                assert!(idle_polls < 1_000, "no progress");
            }
        }
        if sent.len() % 997 == 0 {
            nic.invariants();
        }
    }
    nic.invariants();
    sent
}

#[test]
fn per_class_struct_is_32_bytes_and_100k_classes_fit() {
    assert_eq!(core::mem::size_of::<Class>(), 32);
    let mut n = nic(&vec![Rate::mbps(50); 100_000]);
    for c in 0..100_000 {
        n.backlog(t(0), c, MTU).unwrap();
    }
    assert_eq!(n.backlogged(), 100_000);
    assert!(n.oversubscribed()); // 5 Tbit/s of limits on 10 Gbit/s
    let sent = drive(&mut n, 1_000_000, |_, _| Some(MTU));
    // 1 ms of a 10 Gbit/s link: 833 pieces of 1.2 us, each from a different class.
    assert_eq!(sent.len(), 834);
    let mut classes: Vec<u32> = sent.iter().map(|s| s.pull.class).collect();
    classes.sort_unstable();
    classes.dedup();
    assert_eq!(classes.len(), sent.len());
    assert_eq!(
        n.memory_bytes(),
        100_000 * 32 + DEFAULT_BUCKETS * 8 + OccupancyBitmap::bytes_for(DEFAULT_BUCKETS)
    );
}

#[test]
fn one_class_is_paced_at_its_rate_and_next_due_is_exact() {
    let mut n = nic(&[Rate::gbps(1)]);
    n.backlog(t(0), 0, 4 * MTU).unwrap();
    let mut at = Vec::new();
    while let Some(due) = n.next_due() {
        let d = due.as_nanos();
        if d > 0 {
            assert_eq!(n.pull(t(d - 1)), None, "early at {}", d - 1);
        }
        let p = n.pull(due).expect("due");
        at.push((d, p.offset, p.len, p.last));
        n.invariants();
    }
    // 1500 bytes at 1 Gbit/s: 12 us.
    assert_eq!(
        at,
        [
            (0, 0, 1500, false),
            (12_000, 1500, 1500, false),
            (24_000, 3000, 1500, false),
            (36_000, 4500, 1500, true)
        ]
    );
    assert_eq!(n.backlogged(), 0);
}

#[test]
fn doorbells_are_refused_with_their_reason() {
    let mut n = nic(&[Rate::gbps(1); 2]);
    let refused = |n: &mut NicPic, class, len| n.backlog(t(0), class, len).unwrap_err().reason;
    assert_eq!(refused(&mut n, 2, MTU), NicPicRejectReason::UnknownClass);
    assert_eq!(refused(&mut n, 0, 0), NicPicRejectReason::EmptySegment);
    assert_eq!(
        refused(&mut n, 0, 65_537),
        NicPicRejectReason::SegmentTooLong
    );
    n.backlog(t(0), 0, 65_536).unwrap();
    let e = n.backlog(t(0), 0, MTU).unwrap_err();
    assert_eq!(
        e,
        RejectedSegment {
            class: 0,
            segment_len: MTU,
            reason: NicPicRejectReason::AlreadyBacklogged
        }
    );
    let k = n.counters();
    assert_eq!(
        (
            k.refused_unknown_class,
            k.refused_empty_segment,
            k.refused_segment_too_long,
            k.refused_already_backlogged,
            k.doorbells
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(
        n.set_rate(t(0), 5, Rate::gbps(1)),
        Err(RateError::UnknownClass)
    );
    assert_eq!(
        n.set_rate(t(0), 0, Rate::from_bps(0)),
        Err(RateError::ZeroRate)
    );
    assert_eq!(n.counters().refused_rate, 2);
    n.invariants();
}

#[test]
fn bad_configurations_are_named() {
    let cfg = NicPicConfig::default();
    let zero_link = NicPicConfig {
        link: Rate::from_bps(0),
        ..cfg
    };
    assert_eq!(
        NicPic::new(zero_link, &[]).unwrap_err(),
        NicPicConfigError::ZeroLinkRate
    );
    let no_mtu = NicPicConfig { mtu: 0, ..cfg };
    assert_eq!(
        NicPic::new(no_mtu, &[]).unwrap_err(),
        NicPicConfigError::BadMtu
    );
    assert_eq!(
        NicPic::new(cfg, &[Rate::gbps(1), Rate::from_bps(0)]).unwrap_err(),
        NicPicConfigError::ZeroRate(1)
    );
}

/// NicPic §3.2: a 64 KB segment is pulled in MTU pieces that interleave with other classes.
#[test]
fn a_tso_segment_interleaves_with_other_classes() {
    let mut n = nic(&[Rate::gbps(3); 3]);
    n.backlog(t(0), 0, 65_536).unwrap();
    n.backlog(t(0), 1, MTU).unwrap();
    n.backlog(t(0), 2, MTU).unwrap();
    let mut more = 200; // segments of classes 1 and 2, enough to outlast class 0's 44 pieces
    let sent = drive(&mut n, u64::MAX, |c, _| {
        more -= 1;
        (c != 0 && more > 0).then_some(MTU)
    });
    let big: Vec<&Sent> = sent.iter().filter(|s| s.pull.class == 0).collect();
    assert_eq!(big.len(), 44); // 43 x 1500 + 1036
    for (i, s) in big.iter().enumerate() {
        assert_eq!(s.pull.offset, i as u32 * MTU);
    }
    assert_eq!(big[43].pull.len, 1036);
    assert!(big[43].pull.last);
    // Until class 0 is done, no two consecutive pieces are class 0's.
    let end = sent
        .iter()
        .position(|s| s.pull.class == 0 && s.pull.last)
        .unwrap();
    for w in sent[..end].windows(2) {
        assert!(w[0].pull.class != 0 || w[1].pull.class != 0, "{w:?}");
    }
    // Each class keeps 3 Gbit/s: 1500 bytes every 4 us.
    // (Rate's fixed point makes 3 Gbit/s a fraction of a ppm slow: at most 1 ns more.)
    for w in big[..43].windows(2) {
        assert!((w[1].at - w[0].at).abs_diff(4_000) <= 1, "{w:?}");
    }
}

#[test]
fn the_link_serialises_pieces() {
    let mut n = nic(&[Rate::gbps(100)]); // a limit above the 10 Gbit/s link
    n.backlog(t(0), 0, 4 * MTU).unwrap();
    let sent = drive(&mut n, u64::MAX, |_, _| None);
    let at: Vec<u64> = sent.iter().map(|s| s.at).collect();
    assert_eq!(at, [0, 1_200, 2_400, 3_600]);
    assert_eq!(n.counters().oversubscribed_pieces, 4);
}

#[test]
fn rate_change_applies_from_the_next_piece() {
    let mut n = nic(&[Rate::gbps(1)]);
    n.backlog(t(0), 0, 10 * MTU).unwrap();
    assert!(n.pull(t(0)).is_some());
    // At 6 us, half the 12 us wait has passed; at 4 Gbit/s the other half takes 1.5 us.
    n.set_rate(t(6_000), 0, Rate::gbps(4)).unwrap();
    assert_eq!(n.next_due(), Some(t(7_500)));
    assert_eq!(n.pull(t(7_499)), None);
    assert!(n.pull(t(7_500)).is_some());
    assert_eq!(n.next_due(), Some(t(10_500)));
    // Slowing down stretches the rest of the wait the same way.
    n.set_rate(t(9_000), 0, Rate::gbps(1)).unwrap();
    assert_eq!(n.next_due(), Some(t(15_000)));
    assert_eq!(n.counters().rate_changes, 2);
    n.invariants();
}

#[test]
fn a_class_backlogged_again_later_gets_no_credit_for_idleness() {
    let mut n = nic(&[Rate::gbps(1)]);
    n.backlog(t(0), 0, MTU).unwrap();
    assert!(n.pull(t(0)).unwrap().last);
    // Back within its gap: it waits for the gap.
    n.backlog(t(5_000), 0, MTU).unwrap();
    assert_eq!(n.next_due(), Some(t(12_000)));
    assert!(n.pull(t(12_000)).unwrap().last);
    // Back after a long idle period: it starts now, not in a burst of saved-up credit.
    n.backlog(t(1_000_000), 0, 3 * MTU).unwrap();
    assert_eq!(n.next_due(), Some(t(1_000_000)));
    assert!(n.pull(t(1_000_000)).is_some());
    assert_eq!(n.next_due(), Some(t(1_012_000)));
    n.invariants();
}

#[test]
fn tags_beyond_the_window_are_parked_and_put_back() {
    let cfg = NicPicConfig {
        buckets: 16, // 16 us window
        ..NicPicConfig::default()
    };
    let mut n = NicPic::new(cfg, &[Rate::mbps(100), Rate::gbps(5)]).unwrap();
    n.backlog(t(0), 0, 3 * MTU).unwrap();
    n.backlog(t(0), 1, MTU).unwrap();
    let sent = drive(&mut n, u64::MAX, |_, _| None);
    let slow: Vec<u64> = sent
        .iter()
        .filter(|s| s.pull.class == 0)
        .map(|s| s.at)
        .collect();
    // 1500 bytes at 100 Mbit/s: 120 us, far beyond the 16 us window, and still exact.
    assert_eq!(slow, [0, 120_000, 240_000]);
    let k = n.counters();
    assert!(k.clamped_beyond_window >= 2 && k.reinserted >= 2, "{k:?}");
}

#[test]
fn oversubscribed_limits_share_in_proportion() {
    // 4 + 8 + 12 = 24 Gbit/s of limits on 10 Gbit/s: shares 1/6, 1/3, 1/2.
    let mut n = nic(&[Rate::gbps(4), Rate::gbps(8), Rate::gbps(12)]);
    for c in 0..3 {
        n.backlog(t(0), c, 65_536).unwrap();
    }
    let sent = drive(&mut n, 100_000_000, |_, _| Some(65_536));
    let mut bytes = [0u64; 3];
    for s in &sent {
        bytes[s.pull.class as usize] += u64::from(s.pull.len);
    }
    let total: u64 = bytes.iter().sum();
    // 100 ms of a fully used 10 Gbit/s link.
    assert!(total > 125_000_000 - 2 * u64::from(MTU), "{total}");
    for (c, weight) in [(0, 1), (1, 2), (2, 3)] {
        let share = total * weight / 6;
        assert!(bytes[c].abs_diff(share) <= u64::from(MTU), "{bytes:?}");
    }
    assert!(n.counters().oversubscribed_pieces > 0);
}

/// The reference model of the pieces: the segments each class announced, in order.
#[derive(Default)]
struct Segments {
    announced: Vec<Vec<u32>>,
}

impl Segments {
    /// Checks that `sent` covers every announced segment exactly once, in order, in contiguous
    /// pieces of at most `mtu` bytes; returns how many segments each class finished.
    fn check(&self, sent: &[Sent], mtu: u32) -> Result<Vec<usize>, TestCaseError> {
        let mut cursor = vec![(0usize, 0u32); self.announced.len()];
        for s in sent {
            let p = s.pull;
            let (seg, off) = &mut cursor[p.class as usize];
            let len = self.announced[p.class as usize][*seg];
            prop_assert_eq!(p.offset, *off, "class {} segment {}", p.class, seg);
            prop_assert!(p.len >= 1 && p.len <= mtu);
            prop_assert_eq!(p.last, p.offset + p.len == len);
            *off += p.len;
            if p.last {
                *seg += 1;
                *off = 0;
            }
        }
        Ok(cursor.iter().map(|c| c.0).collect())
    }
}

fn rates_strategy(max_classes: usize, max_mbps: u64) -> impl Strategy<Value = Vec<Rate>> {
    proptest::collection::vec((1u64..=max_mbps).prop_map(Rate::mbps), 1..=max_classes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No piece is lost or duplicated: offsets cover every segment once, in order, whatever the
    /// rates, segment lengths, idle periods and rate changes; the invariants hold throughout.
    #[test]
    fn pieces_cover_every_segment_once_in_order(
        rates in rates_strategy(6, 20_000),
        lens in proptest::collection::vec(1u32..=65_536, 1..40),
        changes in proptest::collection::vec((0u64..2_000_000, 0u32..6, 1u64..20_000), 0..6),
        mtu in 64u32..=9_000,
        gap_ns in 0u64..50_000,
    ) {
        let cfg = NicPicConfig { mtu, buckets: 256, ..NicPicConfig::default() };
        let mut n = NicPic::new(cfg, &rates).unwrap();
        let classes = rates.len();
        let mut model = Segments { announced: vec![Vec::new(); classes] };
        let mut next = 0usize;
        let mut take = |class: usize, model: &mut Segments| {
            let len = lens.get(next).copied();
            next += 1;
            if let Some(len) = len { model.announced[class].push(len); }
            len
        };
        for c in 0..classes {
            if let Some(len) = take(c, &mut model) {
                n.backlog(t(0), c as u32, len).unwrap();
            }
        }
        // Segments come back after a pause of `gap_ns` every other time (then the class idles).
        let mut late: Vec<(u64, u32)> = Vec::new();
        let mut changes = changes;
        changes.sort();
        let mut sent = Vec::new();
        let mut now = 0u64;
        let mut turn = 0u64;
        for _ in 0..100_000 {
            let due = n.next_due().map(|d| d.as_nanos());
            let wake = late.iter().map(|l| l.0).chain(due).chain(changes.first().map(|c| c.0)).min();
            let Some(wake) = wake else { break };
            now = now.max(wake);
            if let Some(&(at, class, mbps)) = changes.first() {
                if at <= now {
                    changes.remove(0);
                    let r = n.set_rate(t(now), class % classes as u32, Rate::mbps(mbps));
                    prop_assert!(r.is_ok());
                    continue;
                }
            }
            if let Some(i) = late.iter().position(|l| l.0 <= now) {
                let (_, class) = late.swap_remove(i);
                if let Some(len) = take(class as usize, &mut model) {
                    n.backlog(t(now), class, len).unwrap();
                }
                continue;
            }
            if let Some(p) = n.pull(t(now)) {
                if p.last {
                    turn += 1;
                    if turn.is_multiple_of(2) {
                        if let Some(len) = take(p.class as usize, &mut model) {
                            n.backlog(t(now), p.class, len).unwrap();
                        }
                    } else {
                        late.push((now + gap_ns, p.class));
                    }
                }
                sent.push(Sent { at: now, pull: p });
            }
            n.invariants();
        }
        prop_assert_eq!(n.backlogged(), 0);
        let done = model.check(&sent, mtu)?;
        for (c, segs) in model.announced.iter().enumerate() {
            prop_assert_eq!(done[c], segs.len(), "class {} unfinished", c);
        }
        let total: u64 = model.announced.iter().flatten().map(|&l| u64::from(l)).sum();
        prop_assert_eq!(n.counters().bytes, total);
    }

    /// When the limits oversubscribe the link, shares follow the limits: normalised services
    /// differ by at most one piece of each class (SFQ's bound), whatever the segment lengths.
    #[test]
    fn oversubscribed_shares_follow_the_limits(
        rates in rates_strategy(8, 10_000),
        // At least a minimum Ethernet frame: pulls happen at whole nanoseconds, so 1-byte
        // segments (0.8 ns at 10 Gbit/s) could not fill the link.
        lens in proptest::collection::vec(64u32..=65_536, 8),
    ) {
        let sum: u64 = rates.iter().map(|r| r.bps()).sum();
        prop_assume!(sum > 11_000_000_000);
        let mut n = nic(&rates);
        for (c, &len) in lens.iter().enumerate().take(rates.len()) {
            n.backlog(t(0), c as u32, len).unwrap();
        }
        let sent = drive(&mut n, 10_000_000, |c, _| Some(lens[c as usize]));
        let mut bytes = vec![0u64; rates.len()];
        for s in &sent {
            bytes[s.pull.class as usize] += u64::from(s.pull.len);
        }
        let total: u64 = bytes.iter().sum();
        prop_assert!(total >= 12_500_000 - rates.len() as u64 * 65_536, "link idle: {}", total);
        // SFQ's fairness bound (Goyal et al.): normalised services differ by at most one
        // piece of each class.
        let mtu = f64::from(MTU);
        for (i, ri) in rates.iter().enumerate() {
            for (j, rj) in rates.iter().enumerate() {
                let (ri, rj) = (ri.bps() as f64 / 8e9, rj.bps() as f64 / 8e9);
                let d = (bytes[i] as f64 / ri - bytes[j] as f64 / rj).abs();
                prop_assert!(d <= mtu / ri + mtu / rj + 1.0, "{} vs {}: {:?}", i, j, bytes);
            }
        }
        for (c, r) in rates.iter().enumerate() {
            let share = (u128::from(total) * u128::from(r.bps()) / u128::from(sum)) as u64;
            // Implied by the pairwise bound: one MTU, plus one MTU of the others' pieces in the
            // proportion r_i / sum over the classes.
            let bound = mtu * (1.0 + rates.len() as f64 * r.bps() as f64 / sum as f64);
            prop_assert!(
                bytes[c].abs_diff(share) as f64 <= bound,
                "class {} got {} for a share of {} ({:?})", c, bytes[c], share, bytes
            );
        }
    }

    /// When the limits fit in the link no class exceeds its rate: the bytes a class has pulled
    /// since it became backlogged stay within one piece of `r × elapsed`, and a continuously
    /// backlogged class keeps up with it to within the link's contention.
    #[test]
    fn undersubscribed_classes_conform_to_their_limits(
        rates in rates_strategy(8, 2_500),
        lens in proptest::collection::vec(64u32..=65_536, 8), // see the test above
    ) {
        let sum: u64 = rates.iter().map(|r| r.bps()).sum();
        prop_assume!(sum <= 10_000_000_000);
        let mut n = nic(&rates);
        for (c, &len) in lens.iter().enumerate().take(rates.len()) {
            n.backlog(t(0), c as u32, len).unwrap();
        }
        let sent = drive(&mut n, 2_000_000, |c, _| Some(lens[c as usize]));
        let mut bytes = vec![0u64; rates.len()];
        // Contention: every other class's piece may go first, plus one granularity.
        let slack_ns = rates.len() as u64 * 1_200 + 1_024;
        for s in &sent {
            let c = s.pull.class as usize;
            let r = rates[c];
            let before = bytes[c];
            bytes[c] += u64::from(s.pull.len);
            let allowed = r.bytes_in(Duration::from_nanos(s.at)) + u64::from(MTU);
            prop_assert!(bytes[c] <= allowed + 1, "class {} at {}: {} > {}", c, s.at, bytes[c], allowed);
            let owed = r.bytes_in(Duration::from_nanos(s.at.saturating_sub(slack_ns)));
            prop_assert!(before + u64::from(MTU) >= owed, "class {} lags at {}: {} < {}", c, s.at, before, owed);
        }
        if sum < 9_999_000_000 {
            // (At exactly the link rate, Rate's fixed point can tip the sum a hair over it.)
            prop_assert_eq!(n.counters().oversubscribed_pieces, 0);
        }
    }

    /// After a rate change, every gap from the next piece on is `piece / new rate`.
    #[test]
    fn rate_change_sets_every_later_gap(
        old_mbps in 100u64..5_000,
        new_mbps in 100u64..5_000,
        change_at in 0u64..200_000,
    ) {
        let mut n = nic(&[Rate::mbps(old_mbps)]);
        n.backlog(t(0), 0, 65_536).unwrap();
        let mut changed = false;
        let mut sent: Vec<u64> = Vec::new();
        let mut after = None;
        while let Some(due) = n.next_due() {
            let now = due.as_nanos();
            if !changed && now > change_at {
                n.set_rate(t(change_at), 0, Rate::mbps(new_mbps)).unwrap();
                changed = true;
                after = Some(sent.len());
                continue;
            }
            n.pull(due).expect("due");
            sent.push(now);
        }
        let first_new = after.unwrap_or(sent.len());
        let gap_new = Rate::mbps(new_mbps).transmit_time(u64::from(MTU)).as_nanos();
        let gap_old = Rate::mbps(old_mbps).transmit_time(u64::from(MTU)).as_nanos();
        for (i, w) in sent.windows(2).enumerate() {
            let expect = if i + 1 > first_new { gap_new } else if i + 1 < first_new { gap_old } else { continue };
            prop_assert!((w[1] - w[0]).abs_diff(expect) <= 1, "gap {} is {} not {}", i, w[1] - w[0], expect);
        }
    }
}

/// A late poll sends back to back what the link owes, up to the catch-up allowance; without
/// one (the default) it sends one piece and waits a transmission time.
#[test]
fn catch_up_lets_a_late_poll_send_what_the_link_owes() {
    let pieces_at = |catch_up: Duration| {
        let mut nic = NicPic::new(NicPicConfig::default(), &[Rate::gbps(20)]).unwrap();
        nic.set_catch_up(catch_up);
        // One 64 KiB segment: the class stays backlogged, its pieces eligible by then.
        nic.backlog(Timestamp::ZERO, 0, 1 << 16).unwrap();
        assert!(nic.pull(Timestamp::ZERO).is_some());
        let late = Timestamp::from_nanos(100_000);
        let mut n = 0;
        while nic.pull(late).is_some() {
            n += 1;
        }
        nic.invariants();
        n
    };
    assert_eq!(pieces_at(Duration::ZERO), 1);
    // 3000 bytes at 10 Gbit/s = 2.4 µs: two pieces in the past, one starting now.
    assert_eq!(pieces_at(Duration::from_nanos(2_400)), 3);
}
