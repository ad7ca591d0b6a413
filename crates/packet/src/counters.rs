//! Counters of parse verdicts, malformed reasons and ECN outcomes, for the daemon to export.
//!
//! CONTRIBUTING.md §11: nothing is dropped silently, every drop, mark and fallback has a named
//! counter, so every packet the daemon did not forward is in one. [`ParseCounters`] counts each
//! [`Verdict`] and each [`Malformed`] reason under its [`Malformed::name`]; [`EcnCounters`] counts
//! each [`EcnMark`]. Both are plain `u64` fields owned by one core (no atomics on the hot path);
//! the exporter sums the per-core copies with `merge`. [`ParseCounters::iter`] lists `(name,
//! value)` pairs without allocating, in a fixed order, ready for Prometheus labels
//! (`reason="bad_ihl"`).

use crate::classify::Verdict;
use crate::ecn::EcnMark;
use crate::frame::Malformed;

/// Frames per verdict, and malformed frames per reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParseCounters {
    /// IP packets handed to the shaper ([`Verdict::Shape`]).
    pub shaped: u64,
    /// Non-IP frames passed unshaped ([`Verdict::PassNonIp`]).
    pub passed_non_ip: u64,
    /// Malformed frames, indexed by [`Malformed::index`].
    malformed: [u64; Malformed::COUNT],
}

impl ParseCounters {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one verdict.
    #[inline]
    pub fn record(&mut self, verdict: &Verdict) {
        match verdict {
            Verdict::Shape { .. } => self.shaped += 1,
            Verdict::PassNonIp => self.passed_non_ip += 1,
            Verdict::Malformed(reason) => self.malformed[reason.index()] += 1,
        }
    }

    /// Malformed frames for `reason`.
    pub fn malformed(&self, reason: Malformed) -> u64 {
        self.malformed[reason.index()]
    }

    /// Malformed frames over all reasons.
    pub fn malformed_total(&self) -> u64 {
        self.malformed.iter().sum()
    }

    /// Every frame counted.
    pub fn total(&self) -> u64 {
        self.shaped + self.passed_non_ip + self.malformed_total()
    }

    /// Adds `other` (another core's counters) into `self`.
    pub fn merge(&mut self, other: &ParseCounters) {
        self.shaped += other.shaped;
        self.passed_non_ip += other.passed_non_ip;
        for (mine, theirs) in self.malformed.iter_mut().zip(other.malformed) {
            *mine += theirs;
        }
    }

    /// `("shaped", n)`, `("passed_non_ip", n)`, then `("malformed_<reason>", n)` for every
    /// reason in [`Malformed::ALL`] order, zeros included (a Prometheus series should exist
    /// before its first increment).
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        [
            ("shaped", self.shaped),
            ("passed_non_ip", self.passed_non_ip),
        ]
        .into_iter()
        .chain(
            Malformed::ALL
                .iter()
                .map(|r| (r.counter_name(), self.malformed(*r))),
        )
    }
}

/// Outcomes of [`crate::mark_ce`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EcnCounters {
    /// Packets newly marked CE.
    pub marked: u64,
    /// Packets that were not ECN-capable (left unmarked).
    pub not_ect: u64,
    /// Packets already CE.
    pub already_ce: u64,
    /// Calls on frames without an IP header.
    pub not_ip: u64,
}

impl EcnCounters {
    /// Counts one outcome.
    #[inline]
    pub fn record(&mut self, mark: EcnMark) {
        match mark {
            EcnMark::Marked => self.marked += 1,
            EcnMark::NotEct => self.not_ect += 1,
            EcnMark::AlreadyCe => self.already_ce += 1,
            EcnMark::NotIp => self.not_ip += 1,
        }
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &EcnCounters) {
        self.marked += other.marked;
        self.not_ect += other.not_ect;
        self.already_ce += other.already_ce;
        self.not_ip += other.not_ip;
    }

    /// `(name, value)` pairs: `ecn_marked`, `ecn_not_ect`, `ecn_already_ce`, `ecn_not_ip`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("ecn_marked", self.marked),
            ("ecn_not_ect", self.not_ect),
            ("ecn_already_ce", self.already_ce),
            ("ecn_not_ip", self.not_ip),
        ]
        .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_core::{ClassId, FlowId};

    #[test]
    fn every_verdict_and_reason_lands_in_its_own_named_counter() {
        let mut c = ParseCounters::new();
        c.record(&Verdict::Shape {
            class: ClassId(1),
            flow: FlowId(2),
            len: 60,
        });
        c.record(&Verdict::PassNonIp);
        c.record(&Verdict::PassNonIp);
        for (i, reason) in Malformed::ALL.iter().enumerate() {
            for _ in 0..=i {
                c.record(&Verdict::Malformed(*reason));
            }
        }
        for (i, reason) in Malformed::ALL.iter().enumerate() {
            assert_eq!(c.malformed(*reason), i as u64 + 1);
            assert_eq!(reason.index(), i);
            assert_eq!(
                reason.counter_name(),
                format!("malformed_{}", reason.name())
            );
        }
        let n = Malformed::COUNT as u64;
        assert_eq!(c.malformed_total(), n * (n + 1) / 2);
        assert_eq!(c.total(), 3 + c.malformed_total());
        let pairs: Vec<_> = c.iter().collect();
        assert_eq!(pairs.len(), 2 + Malformed::COUNT);
        assert_eq!(pairs[0], ("shaped", 1));
        assert_eq!(pairs[1], ("passed_non_ip", 2));
        let mut names: Vec<_> = pairs.iter().map(|p| p.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), pairs.len(), "counter names are unique");

        let mut sum = c.clone();
        sum.merge(&c);
        assert_eq!(sum.total(), 2 * c.total());
    }

    #[test]
    fn ecn_outcomes_are_counted_by_name() {
        let mut e = EcnCounters::default();
        for m in [
            EcnMark::Marked,
            EcnMark::Marked,
            EcnMark::NotEct,
            EcnMark::AlreadyCe,
        ] {
            e.record(m);
        }
        e.record(EcnMark::NotIp);
        let mut twice = e;
        twice.merge(&e);
        assert_eq!(twice.marked, 4);
        let pairs: Vec<_> = e.iter().collect();
        assert_eq!(
            pairs,
            [
                ("ecn_marked", 2),
                ("ecn_not_ect", 1),
                ("ecn_already_ce", 1),
                ("ecn_not_ip", 1)
            ]
        );
    }
}
