//! EDT timestamping from stacked policies (Carousel §5.1.1): "we choose the largest of timestamps,
//! which avoids violating any of the policies associated with the packet".
//!
//! A [`Timestamper`] holds per-flow pacing and per-aggregate rate-limit policies; a packet's EDT is
//! the maximum over the policies it passes, `now` and any earlier timestamp the caller supplies.
//! Each policy is a token bucket in EDT form (a GCRA): a train of up to `burst` bytes shares one
//! release time (§5.1.2), an idle policy banks at most its burst, a rate change applies from the
//! next packet. A zero rate pauses a policy: [`Timestamper::try_stamp_after`] hands back
//! [`Paused`], [`Timestamper::stamp`] returns [`Timestamp::MAX`], and no state changes.
//! [`PolicyStack`] is a shaper's per-packet composition (aggregate and pacing, peeked, then
//! committed).
//!
//! Where it departs from the paper: a burst smaller than the packet counts as one packet. The exact
//! arithmetic and the reasons: `docs/design/carousel.md`.

use crate::rate::Rate;
use crate::time::{Duration, Timestamp};

/// What a policy stands for. Both kinds compute timestamps the same way; the kind names the
/// policy in reports and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// A per-flow pacing rate.
    Pacing,
    /// A rate limit shared by a flow aggregate (a tenant, a VM, a destination).
    Aggregate,
}

/// A handle to a policy of one [`Timestamper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyId(u32);

impl PolicyId {
    /// The policy's index in its timestamper.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A policy id that the timestamper never handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}")]
pub struct UnknownPolicy(pub PolicyId);

/// A packet passed a policy whose rate is zero: the policy sends nothing, and no policy's state
/// changed ([`Timestamper::try_stamp_after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("policy {0:?} is paused (zero rate)")]
pub struct Paused(pub PolicyId);

/// One policy's state and counters.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// The policy's kind.
    pub kind: PolicyKind,
    rate: Rate,
    burst: u32,
    /// Theoretical arrival time: when every byte stamped so far would have left at `rate`.
    tat: Timestamp,
    /// Sub-nanosecond part of `tat`, in units of 2^-[`Rate::FRAC_BITS`] ns, so that long runs keep
    /// the exact rate instead of losing up to 1 ns per packet.
    tat_frac: u32,
    /// Packets stamped.
    pub packets: u64,
    /// Bytes stamped.
    pub bytes: u64,
    /// Packets whose EDT this policy pushed later than `now` (it was the one that delayed them,
    /// or tied).
    pub delayed: u64,
    /// Packets this policy held because its rate was zero (not stamped, not in `packets`).
    pub paused: u64,
}

impl Policy {
    /// A policy of `kind`, `rate` and `burst` bytes with nothing stamped yet.
    fn fresh(kind: PolicyKind, rate: Rate, burst: u32) -> Policy {
        Policy {
            kind,
            rate,
            burst,
            tat: Timestamp::ZERO,
            tat_frac: 0,
            packets: 0,
            bytes: 0,
            delayed: 0,
            paused: 0,
        }
    }

    /// The policy's rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }
    /// The policy's burst in bytes.
    pub fn burst(&self) -> u32 {
        self.burst
    }
    /// The latest timestamp state (theoretical arrival time).
    pub fn last_timestamp(&self) -> Timestamp {
        self.tat
    }
    /// True if the rate is zero: the policy sends nothing until its rate is set above zero.
    pub fn is_paused(&self) -> bool {
        self.rate.bps() == 0
    }

    /// Earliest conforming departure of `len` bytes at `now`; [`Timestamp::MAX`] when paused.
    #[inline]
    fn earliest(&self, now: Timestamp, len: u32) -> Timestamp {
        if self.is_paused() {
            return Timestamp::MAX;
        }
        let slack = self.burst.saturating_sub(len) as u64;
        let t = self.tat.saturating_sub(self.rate.transmit_time(slack));
        t.max(now)
    }

    /// Records `len` bytes stamped at `now`. Never called on a paused policy (a zero rate's
    /// transmit time is unbounded; the stamp is refused before any commit).
    #[inline]
    fn commit(&mut self, now: Timestamp, len: u32) {
        debug_assert!(!self.is_paused(), "a paused policy stamps nothing");
        if now > self.tat {
            self.tat = now;
            self.tat_frac = 0;
        }
        let total = self.tat_frac as u128 + self.rate.transmit_time_fp(len as u64);
        let whole = (total >> Rate::FRAC_BITS).min(u64::MAX as u128) as u64;
        self.tat += Duration::from_nanos(whole);
        self.tat_frac = (total & ((1 << Rate::FRAC_BITS) - 1)) as u32;
        self.packets += 1;
        self.bytes += len as u64;
    }
}

/// Counters of a [`Timestamper`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimestamperCounters {
    /// Packets stamped with an EDT (paused packets not included).
    pub stamped: u64,
    /// Packets that passed no policy (EDT = `now` or the caller's earliest time).
    pub unshaped: u64,
    /// Packets refused an EDT because a policy they pass has a zero rate ([`Paused`]).
    pub paused: u64,
    /// Policy ids in a `stamp` call that this timestamper never handed out (skipped).
    pub unknown_policy: u64,
}

/// Stamps packets with EDTs from a set of pacing and rate-limit policies.
#[derive(Clone, Debug, Default)]
pub struct Timestamper {
    policies: Vec<Policy>,
    counters: TimestamperCounters,
}

impl Timestamper {
    /// A timestamper with no policies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a policy of `rate` and `burst` bytes; returns its handle. A zero rate adds it paused.
    pub fn add_policy(&mut self, kind: PolicyKind, rate: Rate, burst: u32) -> PolicyId {
        self.policies.push(Policy::fresh(kind, rate, burst));
        PolicyId(self.policies.len() as u32 - 1)
    }

    /// Makes policy `id` as [`Timestamper::add_policy`] would make a new one (`kind`, `rate`,
    /// `burst`, nothing stamped yet), so that the handle of a policy its owner no longer uses can
    /// serve a new owner: the timestamper never removes a policy, and its handles stay valid.
    pub fn reset_policy(
        &mut self,
        id: PolicyId,
        kind: PolicyKind,
        rate: Rate,
        burst: u32,
    ) -> Result<(), UnknownPolicy> {
        *self.get_mut(id)? = Policy::fresh(kind, rate, burst);
        Ok(())
    }

    /// Changes a policy's rate; it applies from the next packet stamped. Zero pauses the policy
    /// (see [`Paused`]); a rate above zero resumes it from the next packet, with what it stamped
    /// before keeping its times and at most its burst granted if it went idle.
    pub fn set_rate(&mut self, id: PolicyId, rate: Rate) -> Result<(), UnknownPolicy> {
        self.get_mut(id)?.rate = rate;
        Ok(())
    }

    /// Changes a policy's burst; it applies from the next packet stamped.
    pub fn set_burst(&mut self, id: PolicyId, burst: u32) -> Result<(), UnknownPolicy> {
        self.get_mut(id)?.burst = burst;
        Ok(())
    }

    /// A policy's state, if `id` belongs to this timestamper.
    pub fn policy(&self, id: PolicyId) -> Option<&Policy> {
        self.policies.get(id.index())
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// True if there is no policy.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The counters.
    pub fn counters(&self) -> TimestamperCounters {
        self.counters
    }

    fn get_mut(&mut self, id: PolicyId) -> Result<&mut Policy, UnknownPolicy> {
        self.policies.get_mut(id.index()).ok_or(UnknownPolicy(id))
    }

    /// The EDT of a `len`-byte packet arriving at `now` that passes `policies`, or
    /// [`Timestamp::MAX`] if one of them is paused (zero rate; see
    /// [`Timestamper::try_stamp_after`]).
    pub fn stamp(&mut self, now: Timestamp, len: u32, policies: &[PolicyId]) -> Timestamp {
        self.stamp_after(now, now, len, policies)
    }

    /// Like [`Timestamper::stamp`], for a packet that already carries a timestamp `earliest` (the
    /// transport's pacing): the EDT is never before it. [`Timestamp::MAX`] if a policy is paused.
    pub fn stamp_after(
        &mut self,
        now: Timestamp,
        earliest: Timestamp,
        len: u32,
        policies: &[PolicyId],
    ) -> Timestamp {
        self.try_stamp_after(now, earliest, len, policies)
            .unwrap_or(Timestamp::MAX)
    }

    /// Like [`Timestamper::stamp_after`], with a paused policy named: if a known policy in
    /// `policies` has a zero rate, the packet gets no EDT, no policy's state changes, and the
    /// first such policy comes back in [`Paused`] (every paused policy it passes counts it in
    /// [`Policy::paused`]). Unknown ids are skipped and counted in
    /// [`TimestamperCounters::unknown_policy`] when the packet is stamped.
    pub fn try_stamp_after(
        &mut self,
        now: Timestamp,
        earliest: Timestamp,
        len: u32,
        policies: &[PolicyId],
    ) -> Result<Timestamp, Paused> {
        if let Some(&first) = policies
            .iter()
            .find(|id| self.policy(**id).is_some_and(Policy::is_paused))
        {
            for &id in policies {
                if let Some(p) = self.policies.get_mut(id.index()) {
                    p.paused += p.is_paused() as u64;
                }
            }
            self.counters.paused += 1;
            return Err(Paused(first));
        }
        self.counters.stamped += 1;
        let mut edt = earliest.max(now);
        let mut known = 0;
        for &id in policies {
            let Some(p) = self.policies.get_mut(id.index()) else {
                self.counters.unknown_policy += 1;
                continue;
            };
            let t = p.earliest(now, len);
            if t > now {
                p.delayed += 1;
            }
            p.commit(now, len);
            edt = edt.max(t);
            known += 1;
        }
        if known == 0 {
            self.counters.unshaped += 1;
        }
        Ok(edt)
    }

    /// The time a policy needs to drain what it has stamped, as seen at `now` (its backlog).
    pub fn backlog(&self, id: PolicyId, now: Timestamp) -> Option<Duration> {
        self.policy(id).map(|p| p.tat.saturating_since(now))
    }
}

/// Most ancestors' policies a [`PolicyStack`] carries besides the class's own: 7, so that a class
/// and seven levels above it stamp one packet (a class tree of eight levels).
pub const MAX_ANCESTORS: usize = 7;

/// The policies one packet passes: its class's aggregate rate limit, when the flow paces the
/// flow's own pacing policy, and the aggregate policies of the class's ancestors in a class
/// tree (each bounds its subtree). Its EDT is the latest of their departures (Carousel §5.1.1:
/// "we choose the largest of timestamps"), never before the transport's own timestamp; stamping
/// commits every policy. A packet with none is unshaped: its EDT is `max(now, earliest)`.
///
/// Peek, check and commit: [`PolicyStack::peek`] and [`PolicyStack::backlog`] change nothing, so a
/// caller can refuse or drop a packet (backpressure, horizon, a full queue) before
/// [`PolicyStack::stamp`] charges it to the policies, and a dropped packet consumes no rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyStack {
    /// The class's aggregate rate policy, if the class has a rate.
    pub aggregate: Option<PolicyId>,
    /// The flow's pacing policy, if the flow is paced.
    pub pacing: Option<PolicyId>,
    /// The ancestors' policies (indices), nearest first: the first `levels`.
    ancestors: [u32; MAX_ANCESTORS],
    levels: u8,
}

impl PolicyStack {
    /// The stack of `aggregate` and `pacing`.
    pub fn new(aggregate: Option<PolicyId>, pacing: Option<PolicyId>) -> Self {
        PolicyStack {
            aggregate,
            pacing,
            ..PolicyStack::default()
        }
    }

    /// This stack with `ancestors`' policies too (the first [`MAX_ANCESTORS`]).
    pub fn with_ancestors(mut self, ancestors: &[PolicyId]) -> Self {
        let n = ancestors.len().min(MAX_ANCESTORS);
        for (slot, id) in self.ancestors.iter_mut().zip(&ancestors[..n]) {
            *slot = id.0;
        }
        self.levels = n as u8;
        self
    }

    /// This stack with `aggregate` and `pacing` as the class's and the flow's policies (its
    /// ancestors kept).
    pub fn with_own(mut self, aggregate: Option<PolicyId>, pacing: Option<PolicyId>) -> Self {
        self.aggregate = aggregate;
        self.pacing = pacing;
        self
    }

    /// The ancestors' stack of a child of the class whose ancestors this stack carries and whose
    /// own aggregate policy is `parent`: `parent` first, then these ancestors (the first
    /// [`MAX_ANCESTORS`]); no aggregate or pacing policy of its own.
    pub fn below(&self, parent: Option<PolicyId>) -> Self {
        let mut up = PolicyStack::default();
        let mut n = 0;
        for id in parent.into_iter().chain(self.ancestors()) {
            if n == MAX_ANCESTORS {
                break;
            }
            up.ancestors[n] = id.0;
            n += 1;
        }
        up.levels = n as u8;
        up
    }

    /// The ancestors' policies, nearest first.
    pub fn ancestors(&self) -> impl Iterator<Item = PolicyId> + '_ {
        self.ancestors[..self.levels as usize]
            .iter()
            .map(|&id| PolicyId(id))
    }

    /// How many ancestors' policies it carries.
    pub fn levels(&self) -> usize {
        self.levels as usize
    }

    /// The policies, aggregate first, then pacing, then the ancestors.
    fn ids(self) -> impl Iterator<Item = PolicyId> {
        let up = self.ancestors;
        self.aggregate
            .into_iter()
            .chain(self.pacing)
            .chain((0..self.levels as usize).map(move |k| PolicyId(up[k])))
    }

    /// The EDT [`PolicyStack::stamp`] would give a `len`-byte packet at `now` that the transport
    /// stamped `earliest`, without changing any policy: [`Timestamp::MAX`] when a policy is paused.
    /// Ids `ts` never handed out are skipped.
    pub fn peek(
        self,
        ts: &Timestamper,
        now: Timestamp,
        earliest: Timestamp,
        len: u32,
    ) -> Timestamp {
        self.ids()
            .filter_map(|id| ts.policy(id))
            .map(|p| p.earliest(now, len))
            .fold(earliest.max(now), Timestamp::max)
    }

    /// The delay a packet stamped at `now` would wait: the largest backlog among the policies
    /// ([`Timestamper::backlog`]); zero for an unshaped packet.
    pub fn backlog(self, ts: &Timestamper, now: Timestamp) -> Duration {
        self.ids()
            .filter_map(|id| ts.backlog(id, now))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Stamps a `len`-byte packet at `now` that the transport stamped `earliest`: commits every
    /// policy of the stack and returns the latest of their departures and `earliest`
    /// ([`Timestamper::stamp_after`]). With no policy nothing is counted and the EDT is
    /// `max(now, earliest)`.
    pub fn stamp(
        self,
        ts: &mut Timestamper,
        now: Timestamp,
        earliest: Timestamp,
        len: u32,
    ) -> Timestamp {
        if self.levels > 0 {
            let mut ids = [PolicyId(0); MAX_ANCESTORS + 2];
            let mut n = 0;
            for id in self.ids() {
                ids[n] = id;
                n += 1;
            }
            return ts.stamp_after(now, earliest, len, &ids[..n]);
        }
        match (self.aggregate, self.pacing) {
            (Some(a), Some(p)) => ts.stamp_after(now, earliest, len, &[a, p]),
            (Some(p), None) | (None, Some(p)) => ts.stamp_after(now, earliest, len, &[p]),
            (None, None) => earliest.max(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u32 = 1500;

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    #[test]
    fn pacing_under_a_slower_aggregate_gives_the_aggregate_spacing() {
        let mut ts = Timestamper::new();
        let pace = ts.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU);
        let agg = ts.add_policy(PolicyKind::Aggregate, Rate::mbps(500), MTU);
        let now = t(1_000_000);
        let edts: Vec<u64> = (0..100)
            .map(|_| ts.stamp(now, MTU, &[pace, agg]).as_nanos())
            .collect();
        assert_eq!(edts[0], 1_000_000);
        for w in edts.windows(2) {
            assert_eq!(w[1] - w[0], 24_000, "500 Mbit/s spacing of 1500 B");
        }
    }

    #[test]
    fn a_child_s_ancestors_are_its_parent_then_the_parent_s_up_to_the_limit() {
        let mut ts = Timestamper::new();
        let ids: Vec<PolicyId> = (0..9)
            .map(|_| ts.add_policy(PolicyKind::Aggregate, Rate::mbps(1), MTU))
            .collect();
        // Each level's stack is built from the one above it, nearest first.
        let mut up = PolicyStack::default();
        for (level, &id) in ids.iter().enumerate() {
            up = up.below(Some(id));
            let want: Vec<PolicyId> = ids[..=level]
                .iter()
                .rev()
                .take(MAX_ANCESTORS)
                .copied()
                .collect();
            assert_eq!(up.ancestors().collect::<Vec<_>>(), want, "level {level}");
            assert_eq!(up.levels(), want.len());
        }
        // A parent without a policy of its own adds nothing; its own policies come back whole.
        let same = up.below(None);
        assert_eq!(same.levels(), up.levels());
        let stack = up.with_own(Some(ids[0]), None);
        assert_eq!(stack.aggregate, Some(ids[0]));
        assert_eq!(
            stack.ancestors().collect::<Vec<_>>(),
            up.ancestors().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_reset_policy_is_a_new_one_under_the_same_handle() {
        let mut ts = Timestamper::new();
        let agg = ts.add_policy(PolicyKind::Aggregate, Rate::mbps(1), MTU);
        let now = t(1_000_000);
        for _ in 0..10 {
            ts.stamp(now, MTU, &[agg]);
        }
        assert!(ts.policy(agg).unwrap().last_timestamp() > now);
        ts.reset_policy(agg, PolicyKind::Aggregate, Rate::mbps(500), MTU)
            .unwrap();
        let p = ts.policy(agg).unwrap();
        assert_eq!((p.rate(), p.packets), (Rate::mbps(500), 0));
        // No backlog carried over: the next packet leaves now, the one after at the new rate.
        assert_eq!(ts.stamp(now, MTU, &[agg]), now);
        assert_eq!(ts.stamp(now, MTU, &[agg]), t(1_024_000));
        assert_eq!(
            ts.reset_policy(PolicyId(9), PolicyKind::Aggregate, Rate::mbps(1), MTU),
            Err(UnknownPolicy(PolicyId(9)))
        );
    }

    #[test]
    fn aggregate_is_shared_by_flows() {
        let mut ts = Timestamper::new();
        let agg = ts.add_policy(PolicyKind::Aggregate, Rate::gbps(1), MTU);
        let f1 = ts.add_policy(PolicyKind::Pacing, Rate::gbps(10), MTU);
        let f2 = ts.add_policy(PolicyKind::Pacing, Rate::gbps(10), MTU);
        let now = t(0);
        let mut last = 0;
        for i in 0..10 {
            let f = if i % 2 == 0 { f1 } else { f2 };
            let e = ts.stamp(now, MTU, &[f, agg]).as_nanos();
            if i > 0 {
                assert_eq!(e - last, 12_000);
            }
            last = e;
        }
    }

    #[test]
    fn burst_lets_a_train_share_one_release_time() {
        let mut ts = Timestamper::new();
        let p = ts.add_policy(PolicyKind::Aggregate, Rate::gbps(1), 10 * MTU);
        let now = t(5_000_000);
        let edts: Vec<u64> = (0..12)
            .map(|_| ts.stamp(now, MTU, &[p]).as_nanos())
            .collect();
        // Ten packets (the burst) leave at now; then 1 Gbit/s spacing.
        assert!(edts[..10].iter().all(|&e| e == 5_000_000), "{edts:?}");
        assert_eq!(edts[10], 5_012_000);
        assert_eq!(edts[11], 5_024_000);
    }

    #[test]
    fn idle_never_banks_more_than_the_burst() {
        let mut ts = Timestamper::new();
        let p = ts.add_policy(PolicyKind::Aggregate, Rate::gbps(1), 4 * MTU);
        ts.stamp(t(0), MTU, &[p]);
        // A long idle: still only 4 packets share the release time.
        let now = t(10_000_000_000);
        let edts: Vec<u64> = (0..6)
            .map(|_| ts.stamp(now, MTU, &[p]).as_nanos())
            .collect();
        assert_eq!(&edts[..4], &[now.as_nanos(); 4]);
        assert_eq!(edts[4], now.as_nanos() + 12_000);
        assert_eq!(edts[5], now.as_nanos() + 24_000);
    }

    #[test]
    fn rate_change_applies_from_the_next_packet() {
        let mut ts = Timestamper::new();
        let p = ts.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU);
        let now = t(0);
        let mut edts: Vec<u64> = (0..5)
            .map(|_| ts.stamp(now, MTU, &[p]).as_nanos())
            .collect();
        ts.set_rate(p, Rate::mbps(100)).unwrap();
        edts.extend((0..3).map(|_| ts.stamp(now, MTU, &[p]).as_nanos()));
        // 12 us apart at 1 Gbit/s; the 6th packet still leaves when the 5th's bytes are out, then
        // 120 us apart at 100 Mbit/s.
        assert_eq!(
            edts,
            vec![0, 12_000, 24_000, 36_000, 48_000, 60_000, 180_000, 300_000]
        );
    }

    #[test]
    fn unshaped_and_transport_timestamps() {
        let mut ts = Timestamper::new();
        assert_eq!(ts.stamp(t(77), MTU, &[]), t(77));
        assert_eq!(ts.counters().unshaped, 1);
        let p = ts.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU);
        // The transport already paced this packet to 500 ns: the EDT is not earlier.
        assert_eq!(ts.stamp_after(t(100), t(500), MTU, &[p]), t(500));
    }

    #[test]
    fn unknown_policies_are_counted_not_fatal() {
        let mut a = Timestamper::new();
        let mut b = Timestamper::new();
        let _ = b.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU);
        let foreign = b.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU);
        assert_eq!(a.stamp(t(3), MTU, &[foreign]), t(3));
        assert_eq!(a.counters().unknown_policy, 1);
        assert_eq!(
            a.set_rate(foreign, Rate::gbps(2)),
            Err(UnknownPolicy(foreign))
        );
    }

    #[test]
    fn a_policy_stack_peeks_what_it_stamps_and_takes_the_latest_departure() {
        let mut ts = Timestamper::new();
        let agg = ts.add_policy(PolicyKind::Aggregate, Rate::mbps(500), MTU);
        let pace = ts.add_policy(PolicyKind::Pacing, Rate::gbps(1), MTU);
        let both = PolicyStack::new(Some(agg), Some(pace));
        let paced = PolicyStack::new(None, Some(pace));
        let now = t(0);
        for _ in 0..20 {
            let peeked = both.peek(&ts, now, now, MTU);
            assert_eq!(both.stamp(&mut ts, now, now, MTU), peeked);
        }
        // The aggregate (500 Mbit/s, 24 us a packet) is the later of the two.
        assert_eq!(both.backlog(&ts, now), Duration::from_nanos(20 * 24_000));
        assert_eq!(paced.backlog(&ts, now), Duration::from_nanos(20 * 12_000));
        assert_eq!(both.peek(&ts, now, now, MTU), t(20 * 24_000));
        // The transport's own timestamp wins when it is later.
        assert_eq!(both.peek(&ts, now, t(10_000_000), MTU), t(10_000_000));
        // Unshaped: now or the transport's time; nothing committed or counted.
        let none = PolicyStack::default();
        let stamped = ts.counters().stamped;
        assert_eq!(none.stamp(&mut ts, t(5), t(3), MTU), t(5));
        assert_eq!(none.backlog(&ts, t(5)), Duration::ZERO);
        assert_eq!(ts.counters().stamped, stamped);
        // An id this timestamper never handed out is skipped, not fatal.
        let foreign = PolicyStack::new(Some(PolicyId(99)), None);
        assert_eq!(foreign.peek(&ts, t(7), t(7), MTU), t(7));
        assert_eq!(foreign.stamp(&mut ts, t(7), t(7), MTU), t(7));
        assert_eq!(ts.counters().unknown_policy, 1);
        // A paused aggregate: peek and stamp agree on the end of time.
        ts.set_rate(agg, Rate::from_bps(0)).unwrap();
        assert_eq!(both.peek(&ts, now, now, MTU), Timestamp::MAX);
        assert_eq!(both.stamp(&mut ts, now, now, MTU), Timestamp::MAX);
    }

    #[test]
    fn long_run_rate_is_exact() {
        let mut ts = Timestamper::new();
        let p = ts.add_policy(PolicyKind::Aggregate, Rate::mbps(700), MTU);
        let mut last = t(0);
        for _ in 0..100_000 {
            last = ts.stamp(t(0), MTU, &[p]);
        }
        // 99 999 gaps of 1500 B at 700 Mbit/s = 1.714274 s; fixed point error under 1 ppm.
        let want = 99_999.0 * 1500.0 * 8.0 / 700e6 * 1e9;
        let err = (last.as_nanos() as f64 - want).abs() / want;
        assert!(err < 1e-6, "{err}");
    }
}
