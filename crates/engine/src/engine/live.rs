//! Live classes: a class added, changed or deleted between two packets, without a reload
//! (the control socket's operations, `crate::ops::control`).
//!
//! * **Add** ([`Engine::add_class`]): the class gets a state ([`Engine::new_state`]: one a
//!   deleted class left free, else a new one), a configuration class id (an entry of the
//!   class map, reused the same way) and its rule, appended last in first-match order
//!   (`Classifier::push`). It takes the next packet it matches. A class re-added under the name
//!   of a class still draining takes that state back, with its queued packets.
//! * **Change** ([`Engine::change_class`]): the policy is put in force as a reload would
//!   (`Timestamper::set_rate`: no burst granted, queued packets keep their EDT); a changed
//!   match moves the rule last in first-match order.
//! * **Delete** ([`Engine::delete_class`]): the rule goes at once (`Classifier::remove`), so the
//!   next packet of the class goes to the next matching class or the default; the packets
//!   already queued keep their state, its policies and its rate and leave at their EDT
//!   (nothing queued is lost, `Engine::invariants`). Once the class holds nothing in the wheel,
//!   its fair queue or on the link, [`Engine::reap_drained`] frees the state: its metric
//!   series are removed, its aggregate policy (reset, `Timestamper::reset_policy`) and state
//!   index kept for the next class. The flow table's entries of the freed class are not
//!   scanned (that would cost the table's size): they hold no packet and at most one packet's
//!   pacing backlog, and are reclaimed as idle entries.
//!
//! Each operation costs O(1) in the number of classes, except what the classifier's `push` and
//! `remove` cost, a change of `pacing` (the flow table's entries of the class are updated) and a
//! fair class (the fair queues are resized for the classes). Classes on a `[link]` or with
//! `ack_shaping` are configured in the file only ([`LiveError::Unsupported`]). A class matching
//! on an origin (`from`, `to`, `cgroup`) comes with its tag (`crate::ops::control` keeps the
//! tags stable), and its rule matches it like any other field.

use super::Engine;
use crate::config::{ClassConfig, MAX_CLASSES};
use crate::stats::ClassStats;
use metronome_core::timestamp::PolicyId;
use metronome_core::ClassId;

/// The first setting of `class` that a live class does not take (see the module docs), as a
/// field name, under a configuration with a `[link]` when `link`; `None` when it takes them all.
pub fn live_unsupported(class: &ClassConfig, link: bool) -> Option<&'static str> {
    if link {
        Some("link")
    } else if class.policy.ack_shaping.is_some() {
        Some("ack_shaping")
    } else {
        None
    }
}

/// What the live operations keep: the states, class ids and aggregate policies that deleted
/// classes left free, and the deleted classes still draining.
#[derive(Debug, Default)]
pub(super) struct Live {
    free_states: Vec<usize>,
    free_ids: Vec<u32>,
    free_policies: Vec<PolicyId>,
    draining: Vec<usize>,
}

impl Live {
    pub(super) fn take_free_state(&mut self) -> Option<usize> {
        self.free_states.pop()
    }

    pub(super) fn take_free_policy(&mut self) -> Option<PolicyId> {
        self.free_policies.pop()
    }

    pub(super) fn free_policy(&mut self, policy: Option<PolicyId>) {
        self.free_policies.extend(policy);
    }

    /// A configuration was installed: its classes number the class map afresh.
    pub(super) fn installed(&mut self) {
        self.free_ids.clear();
    }
}

/// A live operation the engine refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LiveError {
    /// `add` of a name that a class in force has.
    #[error("class {0:?} exists")]
    Exists(String),
    /// `change` or `del` of a name no class in force has.
    #[error("no class {0:?}")]
    Unknown(String),
    /// More classes than a `ClassId` can number.
    #[error("more than {MAX_CLASSES} classes")]
    TooManyClasses,
    /// The classifier has handed out every rule id it has (2^32 - 1 rules pushed since the
    /// configuration was installed); a reload (SIGHUP) numbers the rules afresh.
    #[error("the classifier has numbered 2^32 - 1 rules since the configuration was installed: reload (SIGHUP) to number them afresh")]
    RuleIdsExhausted,
    /// A setting that live classes do not take (the field named).
    #[error("{0}: not for live classes; set it in a [[class]] of the file")]
    Unsupported(&'static str),
    /// The class tree refused it ([`super::tree`]).
    #[error(transparent)]
    Tree(#[from] super::TreeError),
}

impl LiveError {
    /// The field of the class the error is about (`name` when it is about the class itself).
    pub fn field(&self) -> &'static str {
        match self {
            LiveError::Unsupported(f) => f,
            LiveError::Tree(e) => e.field(),
            _ => "name",
        }
    }
}

impl Engine {
    /// Adds `class` last in first-match order (see the module docs); returns its state index.
    pub fn add_class(&mut self, class: &ClassConfig) -> Result<usize, LiveError> {
        self.live_supported(class)?;
        let index = match self.class_index.get(&class.name) {
            Some(&i) if self.in_force(i) => return Err(LiveError::Exists(class.name.clone())),
            Some(&i) => i,
            None if self.live.free_states.is_empty() && self.classes.len() >= MAX_CLASSES => {
                return Err(LiveError::TooManyClasses)
            }
            None => {
                let (mtu, horizon) = (self.config.mtu, self.config.wheel.horizon_policy);
                self.new_state_with(&class.name, mtu, horizon)
            }
        };
        if let Some(at) = self.live.draining.iter().position(|&d| d == index) {
            self.live.draining.swap_remove(at);
        }
        self.tree_check(class, None)?;
        self.classes[index].draining = false;
        if class.tree.gathers_only {
            self.classes[index].node.gathers = true;
        } else {
            self.place_rule(index, class)?;
        }
        self.live_policy(index, class);
        self.flows.set_classes(self.classes.len());
        self.tree_added(index, class);
        Ok(index)
    }

    /// Puts `class`'s policy in force for the class of its name; with `rematch`, its match too
    /// (its rule moves last in first-match order). Returns its state index.
    pub fn change_class(&mut self, class: &ClassConfig, rematch: bool) -> Result<usize, LiveError> {
        self.live_supported(class)?;
        let index = self.live_index(&class.name)?;
        self.tree_check(class, Some(index))?;
        let gathers = self.classes[index].node.gathers;
        if rematch || gathers != class.tree.gathers_only {
            if let Some((rule, id)) = self.classes[index].rule.take() {
                self.classifier.remove(rule);
                self.live.free_ids.push(id);
            }
            self.classes[index].node.gathers = class.tree.gathers_only;
            if !class.tree.gathers_only {
                self.place_rule(index, class)?;
                self.after_descendants(index);
            }
        }
        self.live_policy(index, class);
        self.tree_changed(index, class);
        Ok(index)
    }

    /// Deletes class `name`: its rule goes now, its queued packets leave at its rate, then its
    /// state is freed ([`Engine::reap_drained`]). Returns its state index.
    pub fn delete_class(&mut self, name: &str) -> Result<usize, LiveError> {
        let index = self.live_index(name)?;
        let children = self.classes[index].node.children;
        if children > 0 {
            return Err(super::TreeError::HasChildren {
                name: name.to_owned(),
                children,
            }
            .into());
        }
        if let Some((rule, id)) = self.classes[index].rule.take() {
            self.classifier.remove(rule);
            self.live.free_ids.push(id);
        }
        self.tree_removed(index);
        self.classes[index].draining = true;
        self.live.draining.push(index);
        self.reap_drained();
        Ok(index)
    }

    /// Frees the state of every deleted class that holds nothing any more (see the module
    /// docs); returns how many. Cheap when no class drains: the loop calls it every round.
    pub fn reap_drained(&mut self) -> usize {
        let mut freed = 0;
        let mut i = 0;
        while i < self.live.draining.len() {
            let index = self.live.draining[i];
            let state = &self.classes[index];
            let held = self.class_held(index).0 > 0 || state.queued > 0;
            if state.draining && held {
                i += 1;
                continue;
            }
            self.live.draining.swap_remove(i);
            if !self.classes[index].draining {
                continue; // taken back by an add or a reload
            }
            self.free_state(index);
            freed += 1;
        }
        freed
    }

    /// Whether class `name` was deleted and still holds packets.
    pub fn class_draining(&self, name: &str) -> bool {
        self.class_index(name)
            .is_some_and(|i| self.classes[i].draining)
    }

    /// Classes deleted that still hold packets.
    pub fn classes_draining(&self) -> usize {
        self.live.draining.len()
    }

    fn free_state(&mut self, index: usize) {
        let mtu = self.config.mtu;
        let state = &mut self.classes[index];
        let was_fair = state.policy.fair;
        // The class's last counts go into its record before the record leaves the table.
        state.stats.queued = 0;
        self.telemetry.class(index, &state.stats);
        state.stats = ClassStats::default();
        let name = std::mem::take(&mut state.name);
        state.draining = false;
        state.policy = crate::config::ClassPolicy::unshaped(self.config.mtu);
        let policy = state.aggregate.take();
        self.live.free_policy(policy);
        self.class_index.remove(&name);
        self.telemetry.class_removed(index, &name);
        self.fair_forget(index);
        self.live.free_states.push(index);
        if was_fair {
            self.fair_configure_mtu(mtu);
        }
    }

    /// The state of a class in force (with a rule) named `name`.
    fn live_index(&self, name: &str) -> Result<usize, LiveError> {
        match self.class_index.get(name) {
            Some(&i) if self.in_force(i) => Ok(i),
            _ => Err(LiveError::Unknown(name.to_owned())),
        }
    }

    /// Gives state `index` a class id and `class`'s rule, last in first-match order.
    fn place_rule(&mut self, index: usize, class: &ClassConfig) -> Result<(), LiveError> {
        if !self.classifier.can_push() {
            return Err(LiveError::RuleIdsExhausted);
        }
        let id = match self.live.free_ids.pop() {
            Some(id) => id,
            None => {
                let id =
                    u32::try_from(self.class_map.len()).map_err(|_| LiveError::TooManyClasses)?;
                if self.class_map.len() > MAX_CLASSES {
                    return Err(LiveError::TooManyClasses);
                }
                self.class_map.push(Default::default());
                id
            }
        };
        // Both fit the class map's and `ClassId`'s width: at most MAX_CLASSES + 1 of each.
        let slot = usize::try_from(id).unwrap_or(usize::MAX);
        self.class_map[slot] = index.try_into().map_err(|_| LiveError::TooManyClasses)?;
        let class_id = ClassId(id);
        let rule = self.classifier.push(class.matcher.to_rule(), class_id);
        self.classes[index].rule = Some((rule, id));
        Ok(())
    }

    fn live_policy(&mut self, index: usize, class: &ClassConfig) {
        let wheel = self.config.wheel;
        let mtu = self.config.mtu;
        let was_fair = self.classes[index].policy.fair;
        self.apply_policy(index, class.policy, &wheel, mtu);
        if class.policy.fair || was_fair {
            self.fair_configure_mtu(mtu);
        }
    }

    fn live_supported(&self, class: &ClassConfig) -> Result<(), LiveError> {
        match live_unsupported(class, self.config.link.is_some()) {
            Some(field) => Err(LiveError::Unsupported(field)),
            None => Ok(()),
        }
    }

    /// Checks the live operations' bookkeeping (CONTRIBUTING.md §10): a free state holds
    /// nothing and has no rule, a draining state has no rule, and every class id in use maps to
    /// its state.
    pub(super) fn live_invariants(&self) {
        for &i in &self.live.free_states {
            let s = &self.classes[i];
            assert!(
                s.rule.is_none() && s.queued == 0 && s.name.is_empty(),
                "free state {i} in use: {s:?}"
            );
        }
        for &i in &self.live.draining {
            assert!(
                self.classes[i].rule.is_none(),
                "draining state {i} has a rule"
            );
        }
        for (i, s) in self.classes.iter().enumerate() {
            if let Some((_, id)) = s.rule {
                let mapped = self.class_map.get(id as usize).map(|&m| m as usize);
                assert_eq!(mapped, Some(i), "class id {id} of state {i} maps elsewhere");
            }
        }
    }
}
