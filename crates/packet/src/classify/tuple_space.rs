//! The tuple-space index of [`super::Classifier`] (Open vSwitch's classifier): rules grouped by
//! [`Shape`], each shape a table from [`Key`] to the key's rules, the tables visited in
//! increasing order of their first rule. The module documentation of [`super`] says how a
//! packet is looked up; this file also keeps the index in step with single rules inserted and
//! removed.
//!
//! Each table knows the smallest live rule id of its shape (`first`), exactly: the search stops
//! at the first table whose `first` comes after the best match, which needs the tables sorted by
//! `first` and a `first` that is not too small. A table keeps its rule ids in increasing order in
//! a deque; a removed id stays there until it reaches the front (popped) or the removed ids are
//! more than half of the deque (compacted), so both are O(1) amortized. When removing a shape's
//! first rule raises its `first`, the table moves later in the visiting order, past the tables
//! whose first rule now comes before it: at most the number of shapes, which is also what a
//! packet costs.

use super::keyed::Keyed;
use super::rule::ClassRule;
use super::shape::{Entry, Key, Shape};
use crate::frame::IpPacket;
use metronome_core::ClassId;
use std::collections::{HashMap, VecDeque};

/// The rules of one shape.
#[derive(Clone, Debug)]
struct ShapeTable {
    shape: Shape,
    /// The smallest live rule id of the shape.
    first: u32,
    rules: Keyed,
    /// The shape's rule ids, increasing, removed ones included until popped or compacted.
    ids: VecDeque<u32>,
    /// How many ids of `ids` are removed rules.
    removed: usize,
}

/// The tuple-space index: tables in increasing order of `first`.
#[derive(Clone, Debug, Default)]
pub(super) struct TupleSpace {
    tables: Vec<ShapeTable>,
    /// Each shape's position in `tables`.
    position: HashMap<Shape, usize>,
}

impl TupleSpace {
    /// Adds rule `id`, which is above every id present, at the end of first-match order.
    /// O(1) amortized. Unsatisfiable rules match nothing and are left out.
    pub(super) fn insert(&mut self, id: u32, rule: &ClassRule, class: ClassId) {
        if rule.is_unsatisfiable() {
            return;
        }
        let shape = Shape::of(rule);
        let at = *self.position.entry(shape).or_insert_with(|| {
            // A new shape's first rule is the last rule: the table goes last in visiting order.
            self.tables.push(ShapeTable {
                shape,
                first: id,
                rules: Keyed::new(),
                ids: VecDeque::new(),
                removed: 0,
            });
            self.tables.len() - 1
        });
        let table = &mut self.tables[at];
        table
            .rules
            .insert(Key::of_rule(rule, shape), Entry::of_rule(id, rule, class));
        table.ids.push_back(id);
    }

    /// Removes rule `id` (inserted with this `rule`); `is_live` says whether a rule id is still
    /// in the classifier (false for `id`). Costs the rules of the rule's key, O(1) amortized for
    /// the table's ids, and, when the rule was its shape's first, a move of the table past at
    /// most every other table.
    pub(super) fn remove(&mut self, id: u32, rule: &ClassRule, is_live: impl Fn(u32) -> bool) {
        if rule.is_unsatisfiable() {
            return;
        }
        let shape = Shape::of(rule);
        let Some(&at) = self.position.get(&shape) else {
            return;
        };
        let table = &mut self.tables[at];
        let was_there = table.rules.remove(&Key::of_rule(rule, shape), id);
        debug_assert!(was_there, "rule {id} missing from its key");
        table.removed += 1;
        while table.ids.front().is_some_and(|&front| !is_live(front)) {
            table.ids.pop_front();
            table.removed = table.removed.saturating_sub(1);
        }
        if table.removed > table.ids.len() / 2 {
            table.ids.retain(|&i| is_live(i));
            table.removed = 0;
        }
        match table.ids.front() {
            None => self.remove_table(at),
            Some(&first) if first != table.first => {
                table.first = first;
                self.move_later(at);
            }
            Some(_) => {}
        }
    }

    /// Removes the emptied table at `at`.
    fn remove_table(&mut self, at: usize) {
        let table = self.tables.remove(at);
        self.position.remove(&table.shape);
        for (i, t) in self.tables.iter().enumerate().skip(at) {
            self.position.insert(t.shape, i);
        }
    }

    /// Moves the table at `at`, whose `first` grew, to its place in visiting order.
    fn move_later(&mut self, mut at: usize) {
        while at + 1 < self.tables.len() && self.tables[at + 1].first < self.tables[at].first {
            self.tables.swap(at, at + 1);
            self.position.insert(self.tables[at].shape, at);
            self.position.insert(self.tables[at + 1].shape, at + 1);
            at += 1;
        }
    }

    /// The class of the first rule, in first-match order, that matches `ip`. Kept out of line
    /// so that [`super::Classifier::class_of`], inlined into the per-packet path, stays as small
    /// as the linear scan alone for configurations of few rules.
    #[inline(never)]
    pub(super) fn find(&self, ip: &IpPacket) -> Option<ClassId> {
        let mut best: Option<&Entry> = None;
        for table in &self.tables {
            if best.is_some_and(|b| b.id < table.first) {
                break;
            }
            let Some(key) = table.shape.key(ip) else {
                continue;
            };
            let Some(list) = table.rules.get(&key) else {
                continue;
            };
            if let Some(e) = list.iter().find(|e| e.ports_match(ip)) {
                if best.is_none_or(|b| e.id < b.id) {
                    best = Some(e);
                }
            }
        }
        best.map(|e| e.class)
    }

    /// The number of shapes and the longest list of rules of one key (tests only).
    #[cfg(test)]
    pub(super) fn shapes_and_longest_list(&self) -> (usize, usize) {
        let longest = self.tables.iter().map(|t| t.rules.longest_list()).max();
        (self.tables.len(), longest.unwrap_or(0))
    }

    /// Checks the invariants the search relies on, against the live rules in order: tables in
    /// strictly increasing `first`, each `first` the smallest live id of its shape, no empty
    /// table, positions right. Panics with the broken invariant (tests only).
    #[cfg(test)]
    pub(super) fn check(&self, live: &[(u32, &ClassRule)]) {
        for (i, t) in self.tables.iter().enumerate() {
            assert_eq!(self.position.get(&t.shape), Some(&i), "position of {t:?}");
            assert!(!t.rules.is_empty(), "empty table {t:?}");
            let smallest = live
                .iter()
                .find(|(_, r)| !r.is_unsatisfiable() && Shape::of(r) == t.shape)
                .map(|&(id, _)| id);
            assert_eq!(Some(t.first), smallest, "first of {t:?}");
            if i > 0 {
                assert!(self.tables[i - 1].first < t.first, "visiting order at {i}");
            }
        }
        assert_eq!(self.position.len(), self.tables.len());
    }
}
