//! The engine's per-flow state: a bounded, set-associative table keyed by (class, flow).
//!
//! Each entry holds what the daemon knows about one flow of one class: its per-flow pacing policy
//! in the [`Timestamper`] (Carousel §5.1.1, "per-flow pacing" policies stacked under the class's
//! aggregate policy) and how many of its packets wait in the wheel (for the `drop` backpressure
//! mode and for eviction). Flows come and go, so the table is bounded: [`FLOW_TABLE_BUCKETS`]
//! buckets of [`FLOW_TABLE_WAYS`] entries, [`FLOW_TABLE_CAPACITY`] flows in all. A flow is placed
//! in the bucket its 32-bit flow hash selects, the class mixed in. The flow hash is keyed by a
//! secret the daemon draws from the OS at every start ([`crate::flow_seed`]), so a sender
//! cannot compute which tuples share a victim flow's bucket; the class mix needs no key of its own.
//! When the bucket is full, an **idle** entry is evicted: one with no packet queued whose pacing
//! policy has no backlog (its last timestamp is not in the future), so evicting it loses no state
//! a future packet could need — a returning flow gets the same treatment as a new one, a burst's
//! worth of credit.
//!
//! **A full bucket keeps every limit in force.** When all ways of the bucket hold active flows,
//! the packet goes to its class's **overflow entry** ([`Lookup::Overflow`]): one entry per class
//! outside the buckets ([`FlowTable::set_classes`]), shared by every packet of the class that
//! finds no way. It is a flow entry like the others: the class's per-flow pacing policy paces all
//! its packets together at the class's `pacing` rate, and the `drop` limit counts its queued
//! packets. So every flow without a way of its own still leaves no faster than its pacing rate
//! and queues no more than the limit — together they get one flow's share, conservative and
//! bounded — and `ecn` looks at the overflow entry's backlog. The engine counts such packets
//! (`flow_table_full`, per class `metronome_class_flow_table_overflow_total`); in a fair class
//! the same packets wait in the class's overflow flow of the fair queue
//! (`metronome_core::fair_queue`, whose overflow flow of class `c` has the index of this table's
//! overflow entry of class `c`). A flow that gets a way of its own while some of its packets
//! still wait under the overflow entry has packets under two policies until those leave: then,
//! and only then, it may reach twice its pacing rate and twice the drop limit, and its packets
//! may leave out of order.
//!
//! Layout (CONTRIBUTING.md §5): one `Vec<FlowEntry>` allocated at start-up, entries of a bucket
//! adjacent (four 16-byte entries, one cache line), the overflow entries after the buckets
//! (allocated when classes are installed: at start-up and on a reload that adds a class, never
//! per packet). Pacing policies are added to the timestamper lazily, at most one per entry, and
//! reused when an entry is evicted, so the timestamper holds at most [`FLOW_TABLE_CAPACITY`]
//! pacing policies plus one per class.

use metronome_core::timestamp::{PolicyId, PolicyKind, Timestamper};
use metronome_core::{FlowId, Rate, Timestamp};

/// Entries per bucket: four 16-byte entries fill one 64-byte cache line.
pub const FLOW_TABLE_WAYS: usize = 4;
/// Buckets: 16 384, so [`FLOW_TABLE_CAPACITY`] is 65 536 flows — above `metronome compare`'s
/// largest flow count (256 flows) and Carousel's 10 000-flow experiments (§7.1.1), in 1 MiB of
/// entries plus 512 KiB of policy ids.
pub const FLOW_TABLE_BUCKETS: usize = 16_384;
/// Flows tracked at once (buckets × ways).
pub const FLOW_TABLE_CAPACITY: usize = FLOW_TABLE_BUCKETS * FLOW_TABLE_WAYS;
/// Marks an entry that holds no flow.
const EMPTY: u32 = u32::MAX;
/// The `flow` field of an overflow entry (no flow of its own; never compared, as overflow entries
/// are outside the buckets).
const OVERFLOW_FLOW: u32 = u32::MAX;

/// One flow of one class.
#[derive(Clone, Copy, Debug)]
struct FlowEntry {
    /// The class state index ([`EMPTY`] when the entry is free).
    class: u32,
    /// The flow hash.
    flow: u32,
    /// Packets of this flow waiting in the wheel.
    queued: u32,
    /// The last source-pacing period in which a packet of the flow was seen
    /// ([`FlowTable::mark_seen`]).
    seen: u32,
}

impl FlowEntry {
    const FREE: FlowEntry = FlowEntry {
        class: EMPTY,
        flow: 0,
        queued: 0,
        seen: 0,
    };
}

/// The result of [`FlowTable::lookup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The flow's entry (existing, or just claimed).
    Entry(u32),
    /// Every way of the flow's bucket holds an active flow: the class's overflow entry, shared
    /// by every packet of the class that finds no way (see the module docs).
    Overflow(u32),
    /// Every way of the flow's bucket holds an active flow and the class has no overflow entry
    /// (a table whose [`FlowTable::set_classes`] was not told of the class): no entry.
    Full,
}

/// The bounded (class, flow) table. See the module docs.
#[derive(Debug)]
pub struct FlowTable {
    /// [`FLOW_TABLE_CAPACITY`] bucket entries, then the overflow entry of each class (by class
    /// index: entry `FLOW_TABLE_CAPACITY + class`).
    entries: Vec<FlowEntry>,
    /// Pacing policies created so far, by entry; reused on eviction.
    policies: Vec<Option<PolicyId>>,
    /// Entries evicted to make room (a named counter).
    pub evictions: u64,
    /// Ways claimed by a flow that had none, cumulative: a flow new to the table.
    pub claims: u64,
}

impl Default for FlowTable {
    fn default() -> Self {
        Self::new()
    }
}

impl FlowTable {
    /// An empty table of [`FLOW_TABLE_CAPACITY`] entries (allocated once, about 1.5 MiB), with
    /// no overflow entry yet ([`FlowTable::set_classes`]).
    pub fn new() -> Self {
        FlowTable {
            entries: vec![FlowEntry::FREE; FLOW_TABLE_CAPACITY],
            policies: vec![None; FLOW_TABLE_CAPACITY],
            evictions: 0,
            claims: 0,
        }
    }

    /// Gives classes `0..classes` an overflow entry each (20 bytes a class). Classes keep their
    /// entries: a smaller count changes nothing. Cold path: start-up and reloads.
    pub fn set_classes(&mut self, classes: usize) {
        let have = self.entries.len() - FLOW_TABLE_CAPACITY;
        for class in have..classes {
            self.entries.push(FlowEntry {
                class: u32::try_from(class).unwrap_or(EMPTY - 1),
                flow: OVERFLOW_FLOW,
                queued: 0,
                seen: 0,
            });
            self.policies.push(None);
        }
    }

    /// The overflow entry of class `class`, if [`FlowTable::set_classes`] gave it one.
    pub fn overflow_entry(&self, class: u32) -> Option<u32> {
        let i = FLOW_TABLE_CAPACITY.checked_add(usize::try_from(class).ok()?)?;
        (i < self.entries.len()).then_some(i as u32)
    }

    /// The first entry of the bucket of `flow` in class `class` (tests craft colliding flows
    /// with it).
    pub fn bucket(class: u32, flow: FlowId) -> usize {
        // The flow id is already a seeded hash of the 5-tuple; mix the class in so that one flow
        // seen in two classes (after a reload) lands in different buckets.
        let h = flow.0 ^ class.wrapping_mul(0x9E37_79B9);
        (h as usize % FLOW_TABLE_BUCKETS) * FLOW_TABLE_WAYS
    }

    /// The entry of `flow` in class `class`, claiming a free or idle way if it has none. An idle
    /// way is one with nothing queued and no pacing backlog at `now` in `stamper`.
    pub fn lookup(
        &mut self,
        class: u32,
        flow: FlowId,
        now: Timestamp,
        stamper: &Timestamper,
    ) -> Lookup {
        let base = Self::bucket(class, flow);
        let mut free = None;
        for i in base..base + FLOW_TABLE_WAYS {
            let e = &self.entries[i];
            if e.class == class && e.flow == flow.0 {
                return Lookup::Entry(i as u32);
            }
            if free.is_none() && self.is_idle(i, now, stamper) {
                free = Some(i);
            }
        }
        let Some(i) = free else {
            return self
                .overflow_entry(class)
                .map_or(Lookup::Full, Lookup::Overflow);
        };
        if self.entries[i].class != EMPTY {
            self.evictions += 1;
        }
        self.entries[i] = FlowEntry {
            class,
            flow: flow.0,
            queued: 0,
            seen: 0,
        };
        self.claims += 1;
        Lookup::Entry(i as u32)
    }

    /// Notes that entry `e` had a packet in period `period` (a non-zero number); true for its
    /// first packet of the period (source pacing counts a class's flows so).
    pub fn mark_seen(&mut self, e: u32, period: u32) -> bool {
        let Some(entry) = self.entries.get_mut(e as usize) else {
            return false;
        };
        let first = entry.seen != period;
        entry.seen = period;
        first
    }

    fn is_idle(&self, i: usize, now: Timestamp, stamper: &Timestamper) -> bool {
        let e = &self.entries[i];
        if e.class == EMPTY {
            return true;
        }
        if e.queued > 0 {
            return false;
        }
        match self.policies[i] {
            Some(p) => stamper.backlog(p, now).is_none_or(|b| b.as_nanos() == 0),
            None => true,
        }
    }

    /// The pacing policy of entry `entry`, created on first use and (re)set to `rate` and
    /// `burst`. Setting the rate of an existing policy keeps its last timestamp (no new burst).
    pub fn pacing_policy(
        &mut self,
        entry: u32,
        stamper: &mut Timestamper,
        rate: Rate,
        burst: u32,
    ) -> Option<PolicyId> {
        let i = entry as usize;
        let slot = self.policies.get_mut(i)?;
        match *slot {
            Some(p) => {
                let current = stamper.policy(p)?;
                if current.rate() != rate {
                    stamper.set_rate(p, rate).ok()?;
                }
                if current_burst(stamper, p) != burst {
                    stamper.set_burst(p, burst).ok()?;
                }
                Some(p)
            }
            None => {
                let p = stamper.add_policy(PolicyKind::Pacing, rate, burst);
                *slot = Some(p);
                Some(p)
            }
        }
    }

    /// Packets of entry `entry` waiting in the wheel.
    pub fn queued(&self, entry: u32) -> u32 {
        self.entries.get(entry as usize).map_or(0, |e| e.queued)
    }

    /// Counts one more packet of `entry` in the wheel.
    pub fn add_queued(&mut self, entry: u32) {
        if let Some(e) = self.entries.get_mut(entry as usize) {
            e.queued = e.queued.saturating_add(1);
        }
    }

    /// Counts one packet of `entry` released from the wheel.
    pub fn remove_queued(&mut self, entry: u32) {
        if let Some(e) = self.entries.get_mut(entry as usize) {
            debug_assert!(e.queued > 0, "flow entry {entry} released more than queued");
            e.queued = e.queued.saturating_sub(1);
        }
    }

    /// Sets the pacing rate and burst of every existing policy of class `class` (a reload).
    pub fn set_class_pacing(
        &mut self,
        class: u32,
        stamper: &mut Timestamper,
        rate: Rate,
        burst: u32,
    ) {
        for i in 0..self.entries.len() {
            if self.entries[i].class == class {
                if let Some(p) = self.policies[i] {
                    let _ = stamper.set_rate(p, rate);
                    let _ = stamper.set_burst(p, burst);
                }
            }
        }
    }

    /// Flows currently holding an entry of a bucket (overflow entries not counted).
    pub fn occupied(&self) -> usize {
        self.entries[..FLOW_TABLE_CAPACITY]
            .iter()
            .filter(|e| e.class != EMPTY)
            .count()
    }

    /// Packets queued over all entries (for invariant checks).
    pub fn total_queued(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.queued)).sum()
    }
}

fn current_burst(stamper: &Timestamper, p: PolicyId) -> u32 {
    stamper.policy(p).map_or(0, |pol| pol.burst())
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_core::Duration;

    #[test]
    fn same_flow_same_entry_and_idle_eviction() {
        let stamper = Timestamper::new();
        let mut t = FlowTable::new();
        let now = Timestamp::from_nanos(1_000_000);
        let Lookup::Entry(a) = t.lookup(1, FlowId(7), now, &stamper) else {
            panic!()
        };
        assert_eq!(t.lookup(1, FlowId(7), now, &stamper), Lookup::Entry(a));
        assert_ne!(t.lookup(2, FlowId(7), now, &stamper), Lookup::Entry(a));
        // Fill flow 7's bucket in class 1 with queued flows: the next new flow finds no room.
        let bucket = FlowTable::bucket(1, FlowId(7));
        let mut same_bucket = Vec::new();
        let mut f = 0u32;
        while same_bucket.len() < FLOW_TABLE_WAYS * 2 {
            if FlowTable::bucket(1, FlowId(f)) == bucket {
                same_bucket.push(FlowId(f));
            }
            f += 1;
        }
        for &flow in &same_bucket[..FLOW_TABLE_WAYS] {
            if let Lookup::Entry(e) = t.lookup(1, flow, now, &stamper) {
                t.add_queued(e);
            }
        }
        assert_eq!(t.lookup(1, same_bucket[5], now, &stamper), Lookup::Full);
        // One drains, and its way is reused for the new flow.
        let Lookup::Entry(e) = t.lookup(1, same_bucket[0], now, &stamper) else {
            panic!()
        };
        t.remove_queued(e);
        assert_eq!(t.lookup(1, same_bucket[5], now, &stamper), Lookup::Entry(e));
        assert!(t.evictions >= 1);
    }

    #[test]
    fn a_paced_flow_with_backlog_is_not_evicted() {
        let mut stamper = Timestamper::new();
        let mut t = FlowTable::new();
        let now = Timestamp::from_nanos(0);
        let Lookup::Entry(e) = t.lookup(1, FlowId(3), now, &stamper) else {
            panic!()
        };
        let p = t
            .pacing_policy(e, &mut stamper, Rate::mbps(1), 1514)
            .unwrap();
        stamper.stamp(now, 1514, &[p]);
        stamper.stamp(now, 1514, &[p]);
        assert!(!t.is_idle(e as usize, now, &stamper));
        assert!(t.is_idle(e as usize, now + Duration::from_secs(1), &stamper));
        // Reuse keeps the same policy and takes the new rate.
        let again = t
            .pacing_policy(e, &mut stamper, Rate::mbps(2), 3000)
            .unwrap();
        assert_eq!(again, p);
        assert_eq!(stamper.policy(p).unwrap().rate(), Rate::mbps(2));
    }

    /// The first `n` flows of class `class` that share flow 7's bucket.
    fn colliding(class: u32, n: usize) -> Vec<FlowId> {
        let bucket = FlowTable::bucket(class, FlowId(7));
        (0u32..)
            .map(FlowId)
            .filter(|&f| FlowTable::bucket(class, f) == bucket)
            .take(n)
            .collect()
    }

    #[test]
    fn a_full_bucket_sends_every_flow_of_the_class_to_its_overflow_entry() {
        let mut stamper = Timestamper::new();
        let mut t = FlowTable::new();
        let now = Timestamp::from_nanos(1_000_000);
        let flows = colliding(1, FLOW_TABLE_WAYS + 2);
        for &flow in &flows[..FLOW_TABLE_WAYS] {
            let Lookup::Entry(e) = t.lookup(1, flow, now, &stamper) else {
                panic!("a free way")
            };
            t.add_queued(e);
        }
        // No overflow entry yet: the table says so.
        assert_eq!(t.lookup(1, flows[4], now, &stamper), Lookup::Full);
        t.set_classes(3);
        let o = t.overflow_entry(1).unwrap();
        assert_eq!(o as usize, FLOW_TABLE_CAPACITY + 1);
        assert_eq!(t.lookup(1, flows[4], now, &stamper), Lookup::Overflow(o));
        assert_eq!(t.lookup(1, flows[5], now, &stamper), Lookup::Overflow(o));
        // Another class's overflow entry is its own; a second call keeps the entries.
        assert_ne!(t.overflow_entry(2), Some(o));
        assert_eq!(t.overflow_entry(3), None);
        t.add_queued(o);
        t.set_classes(2);
        assert_eq!((t.overflow_entry(1), t.queued(o)), (Some(o), 1));
        assert_eq!(t.occupied(), FLOW_TABLE_WAYS);
        assert_eq!(t.total_queued(), FLOW_TABLE_WAYS as u64 + 1);
        // Its pacing policy follows the class's pacing on a reload, like a flow's.
        let p = t
            .pacing_policy(o, &mut stamper, Rate::mbps(1), 1514)
            .unwrap();
        t.set_class_pacing(1, &mut stamper, Rate::mbps(3), 3028);
        let policy = stamper.policy(p).unwrap();
        assert_eq!((policy.rate(), policy.burst()), (Rate::mbps(3), 3028));
    }

    /// Operation `(class, flow, enqueue)` on a table whose flows share one bucket per class.
    fn op() -> impl proptest::strategy::Strategy<Value = (u32, usize, bool)> {
        (0u32..2, 0usize..8, proptest::bool::weighted(0.6))
    }

    proptest::proptest! {
        /// Against a reference (a map of flow to packets queued, without pacing): a flow with
        /// packets queued keeps its entry; a packet goes to its class's overflow entry exactly
        /// when its flow has no entry and all ways of its bucket hold flows with packets queued;
        /// the queued counts add up.
        #[test]
        fn lookups_match_a_reference(ops in proptest::collection::vec(op(), 1..200)) {
            use std::collections::BTreeMap;
            let stamper = Timestamper::new();
            let mut t = FlowTable::new();
            t.set_classes(2);
            let flows = [colliding(0, 8), colliding(1, 8)];
            let now = Timestamp::from_nanos(1);
            // (class, flow) -> (entry, queued), plus the overflow entries' queues.
            let mut held: BTreeMap<(u32, usize), (u32, u32)> = BTreeMap::new();
            let mut overflow_queued = [0u32; 2];
            for (class, k, enqueue) in ops {
                let c = class as usize;
                if enqueue {
                    let active = held
                        .iter()
                        .filter(|(&(hc, _), &(_, q))| hc == class && q > 0)
                        .count();
                    let mine = held.get(&(class, k)).copied();
                    let got = t.lookup(class, flows[c][k], now, &stamper);
                    match (got, mine) {
                        (Lookup::Entry(e), Some((old, q))) if q > 0 => {
                            proptest::prop_assert_eq!(e, old, "an active flow moved");
                        }
                        (Lookup::Entry(e), _) => {
                            proptest::prop_assert!(active < FLOW_TABLE_WAYS);
                            held.retain(|_, &mut (he, _)| he != e);
                            held.insert((class, k), (e, 0));
                        }
                        (Lookup::Overflow(o), mine) => {
                            proptest::prop_assert!(mine.is_none_or(|(_, q)| q == 0));
                            proptest::prop_assert_eq!(active, FLOW_TABLE_WAYS);
                            proptest::prop_assert_eq!(Some(o), t.overflow_entry(class));
                            t.add_queued(o);
                            overflow_queued[c] += 1;
                            continue;
                        }
                        (Lookup::Full, _) => proptest::prop_assert!(false, "no overflow entry"),
                    }
                    let slot = held.get_mut(&(class, k)).expect("just held");
                    t.add_queued(slot.0);
                    slot.1 += 1;
                } else if let Some(slot) = held.get_mut(&(class, k)).filter(|s| s.1 > 0) {
                    t.remove_queued(slot.0);
                    slot.1 -= 1;
                } else if overflow_queued[c] > 0 {
                    t.remove_queued(t.overflow_entry(class).expect("set"));
                    overflow_queued[c] -= 1;
                }
                let expected: u64 = held.values().map(|&(_, q)| u64::from(q)).sum::<u64>()
                    + u64::from(overflow_queued[0] + overflow_queued[1]);
                proptest::prop_assert_eq!(t.total_queued(), expected);
                proptest::prop_assert!(t.occupied() <= 2 * FLOW_TABLE_WAYS);
            }
        }
    }
}
