use super::*;
use proptest::prelude::*;

fn us(n: u64) -> Timestamp {
    Timestamp::from_nanos(n * 1_000)
}

/// 8 Mbit/s: one byte per microsecond, so allowances read as elapsed microseconds.
fn shaper(capacity: u32) -> AckShaper {
    AckShaper::new(AckShapingConfig::new(
        AckRate::PerFlow(Rate::mbps(8)),
        capacity,
    ))
    .unwrap()
}

#[test]
fn rewrites_to_the_rate_and_suppresses_would_be_duplicates() {
    let mut s = shaper(4);
    let d = s.on_ack(us(0), 1, 1000, SegmentKind::PureAck);
    assert_eq!(d.action, AckAction::Pass, "a new flow's first ACK passes");
    // 10 000 bytes received at once, no credit yet: a pure ACK would be a duplicate.
    assert_eq!(
        s.on_ack(us(0), 1, 11_000, SegmentKind::PureAck).action,
        AckAction::Suppress
    );
    // Data-carrying segments are sent, with the last acknowledged number.
    assert_eq!(
        s.on_ack(us(0), 1, 11_000, SegmentKind::Carrying).action,
        AckAction::Rewrite(1000)
    );
    // 500 us at 1 byte/us: min((now - T_a) x Rate + SN_a, SN_r) = 1500.
    assert_eq!(
        s.on_ack(us(500), 1, 11_000, SegmentKind::PureAck).action,
        AckAction::Rewrite(1500)
    );
    // Next generated ACK one MTU time (1500 us) after the last one left.
    assert_eq!(s.next_due(), Some(us(2000)));
    let mut out = [GeneratedAck {
        flow: FlowHandle(0),
        key: 0,
        ack: 0,
    }; 4];
    assert_eq!(s.poll(us(1999), &mut out), 0);
    assert_eq!(s.poll(us(2000), &mut out), 1);
    assert_eq!((out[0].key, out[0].ack), (1, 3000));
    assert_eq!(s.flow_state(1), Some((3000, 11_000)));
    let c = s.counters();
    assert_eq!(
        (c.suppressed, c.rewritten, c.generated, c.passthrough),
        (1, 2, 1, 1)
    );
    s.invariants();
}

#[test]
fn credit_is_capped_at_one_burst() {
    let mut s = shaper(4);
    s.on_ack(us(0), 1, 0, SegmentKind::PureAck);
    // Idle for 0.999 s (under the idle timeout), then 100 000 bytes arrive: only the 1500-byte
    // burst is acknowledged at once.
    let d = s.on_ack(us(999_000), 1, 100_000, SegmentKind::PureAck);
    assert_eq!(d.action, AckAction::Rewrite(1500));
    s.invariants();
}

#[test]
fn unspent_credit_is_kept_when_received_data_was_the_limit() {
    let mut s = shaper(4);
    s.on_ack(us(0), 1, 0, SegmentKind::PureAck);
    // 1000 us of credit, only 400 bytes received: 400 acknowledged, 600 bytes of credit kept
    // (the paper's T_a = now would drop them).
    assert_eq!(
        s.on_ack(us(1000), 1, 400, SegmentKind::PureAck).action,
        AckAction::Pass
    );
    assert_eq!(
        s.on_ack(us(1000), 1, 2000, SegmentKind::PureAck).action,
        AckAction::Rewrite(1000)
    );
}

#[test]
fn sequence_numbers_wrap() {
    let mut s = shaper(4);
    let isn = u32::MAX - 999;
    s.on_ack(us(0), 9, isn, SegmentKind::PureAck);
    let d = s.on_ack(us(1500), 9, isn.wrapping_add(5000), SegmentKind::PureAck);
    assert_eq!(d.action, AckAction::Rewrite(500)); // isn + 1500, past the wrap
                                                   // An older (reordered) ACK never moves the
                                                   // acknowledgement back.
    let d = s.on_ack(us(1500), 9, isn.wrapping_add(10), SegmentKind::Carrying);
    assert_eq!(d.action, AckAction::Rewrite(500));
    assert_eq!(s.counters().stale, 1);
    s.invariants();
}

#[test]
fn true_duplicates_pass_unchanged() {
    let mut s = shaper(4);
    s.on_ack(us(0), 1, 700, SegmentKind::PureAck);
    for t in [10, 20, 30] {
        assert_eq!(
            s.on_ack(us(t), 1, 700, SegmentKind::PureAck).action,
            AckAction::Pass
        );
    }
    assert_eq!(s.next_due(), None);
    assert_eq!(s.counters().suppressed, 0);
}

#[test]
fn syn_restarts_and_rst_removes() {
    let mut s = shaper(4);
    s.on_ack(us(0), 1, 0, SegmentKind::PureAck);
    s.on_ack(us(0), 1, 50_000, SegmentKind::PureAck);
    assert!(s.next_due().is_some());
    let d = s.on_ack(us(10), 1, 777, SegmentKind::Syn);
    assert_eq!(d.action, AckAction::Pass);
    assert_eq!(s.flow_state(1), Some((777, 777)));
    assert_eq!(s.next_due(), None);
    s.on_ack(us(20), 1, 90_000, SegmentKind::PureAck);
    let d = s.on_ack(us(30), 1, 90_000, SegmentKind::Reset);
    assert_eq!(
        d,
        AckDecision {
            action: AckAction::Pass,
            flow: None
        }
    );
    assert_eq!((s.flows(), s.next_due()), (0, None));
    assert_eq!(s.counters().flows_reset, 1);
    s.invariants();
}

#[test]
fn a_full_table_passes_and_counts() {
    let mut s = shaper(2);
    s.on_ack(us(0), 1, 0, SegmentKind::PureAck);
    s.on_ack(us(0), 2, 0, SegmentKind::PureAck);
    let d = s.on_ack(us(0), 3, 0, SegmentKind::PureAck);
    assert_eq!(
        d,
        AckDecision {
            action: AckAction::Pass,
            flow: None
        }
    );
    let d = s.on_ack(us(1), 3, 99_999, SegmentKind::PureAck);
    assert_eq!(d.action, AckAction::Pass);
    assert_eq!(s.counters().table_full, 2);
    s.invariants();
}

#[test]
fn shared_rate_is_divided_among_flows_and_idle_flows_expire() {
    let cfg = AckShapingConfig {
        idle_timeout: Duration::from_millis(10),
        ..AckShapingConfig::new(AckRate::Shared(Rate::mbps(80)), 16)
    };
    let mut s = AckShaper::new(cfg).unwrap();
    for k in 0..4 {
        s.on_ack(us(0), k, 0, SegmentKind::PureAck);
    }
    assert_eq!(s.flow_rate(), Rate::mbps(20));
    // Flows 0..3 are fully acknowledged; flow 0 keeps data held back and stays.
    s.on_ack(us(5_000), 0, 1_000_000, SegmentKind::PureAck);
    let mut out = [GeneratedAck {
        flow: FlowHandle(0),
        key: 0,
        ack: 0,
    }; 8];
    s.poll(us(20_000), &mut out);
    assert_eq!(s.flows(), 1);
    assert_eq!(s.counters().flows_expired, 3);
    assert_eq!(s.flow_rate(), Rate::mbps(80));
    s.invariants();
}

#[test]
fn bad_configurations_are_refused() {
    let ok = AckShapingConfig::new(AckRate::PerFlow(Rate::mbps(1)), 4);
    let zero = AckShapingConfig {
        rate: AckRate::Shared(Rate::from_bps(0)),
        ..ok
    };
    assert_eq!(
        AckShaper::new(zero).err(),
        Some(AckShapingConfigError::ZeroRate)
    );
    let cap = AckShapingConfig { capacity: 0, ..ok };
    assert_eq!(
        AckShaper::new(cap).err(),
        Some(AckShapingConfigError::Capacity)
    );
    let mtu = AckShapingConfig { mtu: 0, ..ok };
    assert_eq!(
        AckShaper::new(mtu).err(),
        Some(AckShapingConfigError::ZeroMtu)
    );
}

/// One step of a property run: time passes, then the receiver's TCP sends an ACK on a flow
/// (acknowledging `grow` more bytes) or the loop polls for generated ACKs.
#[derive(Clone, Debug)]
enum Op {
    Ack {
        dt_us: u64,
        flow: u64,
        grow: u32,
        pure: bool,
    },
    Poll {
        dt_us: u64,
    },
    PollDue,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..400, 0u64..4, 0u32..6000, any::<bool>())
            .prop_map(|(dt_us, flow, grow, pure)| Op::Ack { dt_us, flow, grow, pure }),
        1 => (0u64..3000).prop_map(|dt_us| Op::Poll { dt_us }),
        2 => Just(Op::PollDue),
    ]
}

/// The reference model of one flow: what the receiver acknowledged, and every acknowledgement
/// that left, as `(time ns, bytes acknowledged since the flow's first ACK)`.
#[derive(Default)]
struct ModelFlow {
    isn: u32,
    received: u64,
    sent: Vec<(u64, u64)>,
}

impl ModelFlow {
    fn offset(&self, ack: u32) -> u64 {
        u64::from(ack.wrapping_sub(self.isn))
    }
    fn emit(&mut self, t: u64, ack: u32) -> Result<(), TestCaseError> {
        let a = self.offset(ack);
        let last = self.sent.last().map_or(0, |x| x.1);
        prop_assert!(a >= last, "acknowledgement moved back: {a} < {last}");
        prop_assert!(
            a <= self.received,
            "acknowledged {a} beyond received {}",
            self.received
        );
        self.sent.push((t, a));
        Ok(())
    }
    /// Over every interval, acknowledged bytes <= Rate x interval + burst (+1 byte and 1 ppm of
    /// fixed-point rounding).
    fn check_rate(&self, rate: Rate, burst: u64) -> Result<(), TestCaseError> {
        for (k, &(t1, a1)) in self.sent.iter().enumerate() {
            for &(t2, a2) in &self.sent[k..] {
                let allowed = rate.bytes_in(Duration::from_nanos(t2 - t1));
                let bound = allowed + burst + 1 + allowed / 1_000_000;
                prop_assert!(
                    a2 - a1 <= bound,
                    "{} bytes in {} ns > {bound}",
                    a2 - a1,
                    t2 - t1
                );
            }
        }
        Ok(())
    }
}

fn run_ops(ops: &[Op], isn_base: u32, rate_mbps: u64) -> Result<(), TestCaseError> {
    let rate = Rate::mbps(rate_mbps);
    let mut s = AckShaper::new(AckShapingConfig {
        idle_timeout: Duration::from_secs(1_000),
        ..AckShapingConfig::new(AckRate::PerFlow(rate), 3)
    })
    .unwrap();
    let mut flows: [ModelFlow; 4] = Default::default();
    let mut out = [GeneratedAck {
        flow: FlowHandle(0),
        key: 0,
        ack: 0,
    }; 2];
    let mut now = 0u64;
    let mut seen = [false; 4];
    let mut tracked = [false; 4];
    let mut distinct = 0;
    let mut poll = |s: &mut AckShaper, flows: &mut [ModelFlow; 4], now: u64| loop {
        let n = s.poll(Timestamp::from_nanos(now), &mut out);
        for g in &out[..n] {
            flows[g.key as usize].emit(now, g.ack)?;
        }
        if n < out.len() {
            return Ok::<(), TestCaseError>(());
        }
    };
    for op in ops {
        match *op {
            Op::Ack {
                dt_us,
                flow,
                grow,
                pure,
            } => {
                now += dt_us * 1000;
                let f = flow as usize;
                if !seen[f] {
                    seen[f] = true;
                    tracked[f] = distinct < 3; // capacity 3, no expiry: the first three keys
                    distinct += 1;
                    flows[f].isn = isn_base.wrapping_add(flow as u32 * 0x4000_0000);
                }
                flows[f].received += u64::from(grow);
                let ack = flows[f].isn.wrapping_add(flows[f].received as u32);
                let kind = if pure {
                    SegmentKind::PureAck
                } else {
                    SegmentKind::Carrying
                };
                let d = s.on_ack(Timestamp::from_nanos(now), flow, ack, kind);
                prop_assert_eq!(
                    d.flow.is_some(),
                    tracked[f],
                    "tracked flows are the first three"
                );
                match d.action {
                    AckAction::Pass => flows[f].emit(now, ack)?,
                    AckAction::Rewrite(a) => flows[f].emit(now, a)?,
                    AckAction::Suppress => {
                        prop_assert!(pure, "a data-carrying segment was suppressed");
                        let (sn_a, sn_r) = s.flow_state(flow).unwrap();
                        prop_assert!(sn_a != sn_r, "suppressed with nothing held back");
                    }
                }
            }
            Op::Poll { dt_us } => {
                now += dt_us * 1000;
                poll(&mut s, &mut flows, now)?;
            }
            Op::PollDue => {
                if let Some(t) = s.next_due() {
                    now = now.max(t.as_nanos());
                    poll(&mut s, &mut flows, now)?;
                }
            }
        }
        s.invariants();
    }
    // Liveness: polling at each due time acknowledges everything received, in about held / Rate.
    let start = now;
    let held: u64 = flows
        .iter()
        .map(|f| f.received - f.sent.last().map_or(0, |x| x.1))
        .sum();
    while let Some(t) = s.next_due() {
        now = now.max(t.as_nanos());
        poll(&mut s, &mut flows, now)?;
        prop_assert!(now - start <= 10_000_000_000, "drain does not end");
    }
    let per_flow = rate
        .transmit_time(held + 3 * u64::from(DEFAULT_MTU))
        .as_nanos();
    prop_assert!(
        now - start <= per_flow + 1_000,
        "drained in {} ns > {per_flow}",
        now - start
    );
    for (k, f) in flows.iter().enumerate().filter(|(_, f)| !f.sent.is_empty()) {
        prop_assert_eq!(
            f.sent.last().unwrap().1,
            f.received,
            "received data never acknowledged"
        );
        if tracked[k] {
            f.check_rate(rate, u64::from(DEFAULT_MTU))?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn acknowledged_bytes_follow_the_rate(
        ops in proptest::collection::vec(op(), 1..200),
        isn in any::<u32>(),
        rate_mbps in prop_oneof![Just(1u64), Just(8), Just(100), Just(1000), Just(10_000)],
    ) {
        run_ops(&ops, isn, rate_mbps)?;
    }
}

/// A plain reference model of one flow at exactly one byte per microsecond (8 Mbit/s, so the
/// fixed point is exact): a token bucket in integer nanoseconds, written from Carousel §6's
/// formula and the module's rules (burst cap, duplicate suppression, generation one MTU time
/// after the last ACK left), without the table, the lists or the fixed point.
struct Reference {
    sn_a: u64,
    sn_r: u64,
    t_a: u64,
    last_emit: u64,
    pending_due: Option<u64>,
}

impl Reference {
    const BURST_NS: u64 = 1500 * 1000;
    const INTERVAL_NS: u64 = 1500 * 1000;

    fn take(&mut self, now: u64) -> u64 {
        self.t_a = self.t_a.max(now.saturating_sub(Self::BURST_NS));
        let n = ((now - self.t_a) / 1000).min(self.sn_r - self.sn_a);
        self.sn_a += n;
        self.t_a += n * 1000;
        n
    }

    fn emitted(&mut self, now: u64) {
        self.last_emit = now;
        self.pending_due = (self.sn_a != self.sn_r).then_some(now + Self::INTERVAL_NS);
    }

    /// The segment's fate: `Some(ack)` sent, `None` suppressed.
    fn on_ack(&mut self, now: u64, received: u64, pure: bool) -> Option<u64> {
        self.sn_r = self.sn_r.max(received);
        if self.take(now) == 0 && self.sn_a != self.sn_r && pure {
            if self.pending_due.is_none() {
                self.pending_due = Some(self.last_emit + Self::INTERVAL_NS);
            }
            return None;
        }
        self.emitted(now);
        Some(self.sn_a)
    }

    fn poll(&mut self, now: u64) -> Option<u64> {
        match self.pending_due {
            Some(due) if due <= now => {
                if self.take(now) == 0 {
                    self.emitted(now);
                    return None;
                }
                self.emitted(now);
                Some(self.sn_a)
            }
            _ => None,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Every decision and every generated ACK of one flow equals the reference model's.
    #[test]
    fn one_flow_matches_the_reference_model(
        steps in proptest::collection::vec((0u64..3000, 0u32..4000, any::<bool>(), any::<bool>()), 1..150),
        isn in any::<u32>(),
    ) {
        let mut s = shaper(1);
        let mut now = 5_000_000u64;
        s.on_ack(Timestamp::from_nanos(now), 7, isn, SegmentKind::PureAck);
        let mut m = Reference { sn_a: 0, sn_r: 0, t_a: now, last_emit: now, pending_due: None };
        let mut received = 0u64;
        let mut out = [GeneratedAck { flow: FlowHandle(0), key: 0, ack: 0 }; 1];
        for (dt, grow, pure, poll) in steps {
            now += dt * 1000 + dt % 7;
            let t = Timestamp::from_nanos(now);
            if poll {
                let got = (s.poll(t, &mut out) == 1).then(|| u64::from(out[0].ack.wrapping_sub(isn)));
                prop_assert_eq!(got, m.poll(now), "generated ACK at {}", now);
            } else {
                received += u64::from(grow);
                let ack = isn.wrapping_add(received as u32);
                let kind = if pure { SegmentKind::PureAck } else { SegmentKind::Carrying };
                let d = s.on_ack(t, 7, ack, kind);
                let got = match d.action {
                    AckAction::Pass => Some(received),
                    AckAction::Rewrite(a) => Some(u64::from(a.wrapping_sub(isn))),
                    AckAction::Suppress => None,
                };
                prop_assert_eq!(got, m.on_ack(now, received, pure), "ACK at {}", now);
            }
            prop_assert_eq!(s.next_due().map(Timestamp::as_nanos), m.pending_due);
        }
    }
}
