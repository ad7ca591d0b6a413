//! The classifier's rules in first-match order, by id ([`RuleList`]): what
//! [`super::Classifier::rules`] returns and what the linear scan reads.
//!
//! Ids only grow, so the rules are kept in a vector in increasing id. A removed rule leaves a
//! hole that the scan skips; once the holes are more than the rules, the vector is compacted
//! (O(rules), after at least as many removals: O(1) amortized), so that memory follows the live
//! rules, not the history of pushes. A map from id to position finds a rule in O(1).

use super::rule::ClassRule;
use super::RuleId;
use metronome_core::ClassId;
use std::collections::HashMap;

/// A live rule and its id.
#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) id: RuleId,
    pub(super) rule: (ClassRule, ClassId),
}

/// Rules in increasing id, with holes.
#[derive(Clone, Debug, Default)]
pub(super) struct RuleList {
    /// The rules, increasing id; `None`: a removed rule.
    slots: Vec<Option<Slot>>,
    /// Position in `slots` of each live rule.
    position: HashMap<RuleId, usize>,
    /// The number of `None` slots.
    holes: usize,
}

impl RuleList {
    /// The number of live rules.
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.holes
    }

    /// The live rules, increasing id.
    #[inline]
    pub(super) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().flatten()
    }

    /// Whether rule `id` is live.
    pub(super) fn contains(&self, id: RuleId) -> bool {
        self.position.contains_key(&id)
    }

    /// Rule `id`, if live.
    pub(super) fn get(&self, id: RuleId) -> Option<&(ClassRule, ClassId)> {
        let at = *self.position.get(&id)?;
        self.slots[at].as_ref().map(|s| &s.rule)
    }

    /// Appends rule `id`, above every id present. O(1) amortized.
    pub(super) fn push(&mut self, id: RuleId, rule: (ClassRule, ClassId)) {
        self.position.insert(id, self.slots.len());
        self.slots.push(Some(Slot { id, rule }));
    }

    /// Removes rule `id`, returning it if it was live. O(1) amortized.
    pub(super) fn remove(&mut self, id: RuleId) -> Option<(ClassRule, ClassId)> {
        let at = self.position.remove(&id)?;
        let slot = self.slots[at].take()?;
        self.holes += 1;
        if self.holes > self.len() {
            self.compact();
        }
        Some(slot.rule)
    }

    /// Closes the holes and renumbers the positions.
    pub(super) fn compact(&mut self) {
        if self.holes == 0 {
            return;
        }
        self.slots.retain(Option::is_some);
        self.holes = 0;
        for (at, slot) in self.slots.iter().enumerate() {
            if let Some(s) = slot {
                self.position.insert(s.id, at);
            }
        }
    }
}
