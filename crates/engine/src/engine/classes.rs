//! Classes: what the engine keeps per class, and the live reload of the class set.
//!
//! * **States by name.** A class's state (its policies, counts, metrics) is indexed by a state
//!   index stable across reloads while the class keeps its name; `PacketRef::class` holds it, and
//!   the configuration's class ids map to it (`class_map`).
//! * **Reload** ([`Engine::reload`]): an existing class keeps its aggregate and pacing policies
//!   (`Timestamper::set_rate`, so no burst is granted) and its queued packets leave at their
//!   EDT; a new classifier, hashing flows with the engine's seed ([`crate::flow_seed`],
//!   so live flows keep their ids), takes the next packet. Changes that need a restart
//!   (`ReloadPlan::restart_required`) are refused, the running configuration kept.
//! * **Admission** ([`Engine::admit`]): a class holds at most its `queue` bounds and its share of
//!   the frame pool (the dynamic threshold of shared-buffer switches).
//! * **Counts**: entries and wire bytes each class holds in the wheel and on the link, by pool
//!   size class ([`Engine::count_queued`], [`Engine::count_left`]).

use super::{link, Engine, ReloadError, MAX_CLASS_STATES};
use crate::config::{ClassPolicy, EngineConfig, ETHERNET_HEADER};
use crate::stats::{ClassStats, DropReason};
use metronome_core::timestamp::{PolicyId, PolicyKind};
use metronome_core::{HorizonPolicy, PacketRef};
use metronome_io::piece::decode;
use metronome_io::FramePool;
use metronome_packet::RuleId;

/// Name of the class state of packets no class matches (as in `Config::class_name`).
const DEFAULT_CLASS_NAME: &str = "default";

/// What the engine keeps per class. Indexed by a *state* index that is stable across reloads
/// (a class keeps its state while it keeps its name); `PacketRef::class` holds that index.
#[derive(Debug)]
pub(super) struct ClassState {
    pub(super) name: String,
    pub(super) policy: ClassPolicy,
    pub(super) horizon_policy: HorizonPolicy,
    /// The class's aggregate rate policy, when it has a rate.
    pub(super) aggregate: Option<PolicyId>,
    /// What it counted since it took this state, published by [`Engine::publish_gauges`]
    /// (once per batch, not per packet).
    pub(super) stats: ClassStats,
    /// Listed in `Engine::dirty`: its `queued` or `stats` changed since the last publish.
    pub(super) dirty: bool,
    /// Packets of this class in the wheel.
    pub(super) queued: u64,
    /// Wire bytes of the class's entries in the wheel and on the link.
    pub(super) queued_bytes: u64,
    /// Of `queued`: entries whose frame is in a large pool slot.
    pub(super) queued_large: u64,
    /// The class's `queue` bounds in force, frames and wire bytes
    /// ([`crate::config::QueueLimit::bounds`]).
    pub(super) bound: (u64, u64),
    /// Bytes of this class accepted into the wheel, cumulative: the silo's demand that the
    /// NIC-level bandwidth allocator reads (Carousel §5.3, "byte count" samples).
    pub(super) stamped_bytes: u64,
    /// The class's rule in the classifier and its configuration class id (its entry of
    /// `Engine::class_map`); `None` for the default class, a deleted class and a class a reload
    /// left out ([`super::live`]).
    pub(super) rule: Option<(RuleId, u32)>,
    /// Deleted while it still held packets: they leave at its rate, then the state is freed
    /// ([`super::live`]).
    pub(super) draining: bool,
    /// Bytes of frames of this class dropped before they were queued (admission, flow limit,
    /// horizon), cumulative: demand its rate turned away (`crate::ops::cluster`).
    pub(super) refused_bytes: u64,
    /// Holds no queue: every frame is refused at admission as [`DropReason::QueueFull`] (a
    /// cluster class whose share is zero, `crate::ops::cluster`).
    pub(super) closed: bool,
    /// Its place in the class tree ([`super::tree`]).
    pub(super) node: super::tree::Node,
    /// Its source pacing ([`super::pace`]).
    pub(super) pace: super::pace::ClassPace,
}

impl ClassState {
    /// Lists this class, state `index`, in `dirty` for the next [`Engine::publish_gauges`]
    /// (once).
    #[inline]
    pub(super) fn touch(&mut self, index: usize, dirty: &mut Vec<usize>) {
        if !self.dirty {
            self.dirty = true;
            dirty.push(index);
        }
    }

    /// Takes one entry of `wire` bytes, in a large slot or not, off the class's counts.
    pub(super) fn left(&mut self, wire: u64, large: bool) {
        self.queued = self.queued.saturating_sub(1);
        self.queued_bytes = self.queued_bytes.saturating_sub(wire);
        self.queued_large = self.queued_large.saturating_sub(u64::from(large));
    }
}

impl Engine {
    /// Maps every class of `config` to a state, creating or updating states by name.
    pub(super) fn install_classes(&mut self, config: &EngineConfig) -> Result<(), ReloadError> {
        let mut wanted: Vec<(&str, ClassPolicy)> = vec![(DEFAULT_CLASS_NAME, config.default_class)];
        wanted.extend(config.classes.iter().map(|c| (c.name.as_str(), c.policy)));
        let new_names = wanted
            .iter()
            .filter(|(n, _)| !self.class_index.contains_key(*n))
            .count();
        if self.classes.len() + new_names > MAX_CLASS_STATES {
            return Err(ReloadError::TooManyClasses);
        }
        let mut map = Vec::with_capacity(wanted.len());
        for state in &mut self.classes {
            state.rule = None;
            state.node.gathers = false;
        }
        // The classifier below numbers the rules in first-match order (`class_rules`).
        let mut rule_of = vec![None; config.classes.len()];
        for (r, i) in crate::config::tree::rule_order(&config.classes)
            .into_iter()
            .enumerate()
        {
            rule_of[i] = Some(RuleId(r as u32));
        }
        for (k, (name, policy)) in wanted.into_iter().enumerate() {
            let index = match self.class_index.get(name) {
                Some(&i) => i,
                None => self.new_state(name, config),
            };
            self.apply_policy(index, policy, &config.wheel, config.mtu);
            let rule = k
                .checked_sub(1)
                .and_then(|c| rule_of[c])
                .map(|r| (r, k as u32));
            let state = &mut self.classes[index];
            state.rule = rule;
            state.node.gathers = k > 0 && rule.is_none();
            state.draining = false;
            map.push(index as u32); // at most MAX_CLASS_STATES: checked above
        }
        self.live.installed();
        self.configure_link(config, &map);
        self.tree_install(config, &map);
        self.class_map = map;
        self.flows.set_classes(self.classes.len());
        self.classifier = config.classifier_seeded(self.flow_seed.flow_hash());
        Ok(())
    }

    /// Builds or reconfigures the link stage for `config`, whose classes have the state indices
    /// `map` (default first).
    fn configure_link(&mut self, config: &EngineConfig, map: &[u32]) {
        let Some(link_config) = &config.link else {
            self.link = None;
            return;
        };
        let policies =
            std::iter::once(&config.default_class).chain(config.classes.iter().map(|c| &c.policy));
        let members: Vec<_> = map
            .iter()
            .zip(policies)
            .map(|(&state, policy)| (state as usize, policy.link))
            .collect();
        let stage = match &mut self.link {
            Some(stage) => {
                stage.configure(link_config, &members);
                stage
            }
            None => self
                .link
                .insert(link::LinkStage::new(link_config, &members)),
        };
        for (state, l) in members {
            if l.on_link {
                stage.publish_class(state);
            }
        }
    }

    /// A state for a class `name` that has none: one a deleted class left free
    /// ([`super::live`]), else a new one; unshaped until [`Engine::apply_policy`].
    pub(super) fn new_state(&mut self, name: &str, config: &EngineConfig) -> usize {
        self.new_state_with(name, config.mtu, config.wheel.horizon_policy)
    }

    /// [`Engine::new_state`] with frames of `mtu` bytes under the wheel's `horizon_policy`.
    pub(super) fn new_state_with(
        &mut self,
        name: &str,
        mtu: u32,
        horizon_policy: HorizonPolicy,
    ) -> usize {
        let state = ClassState {
            name: name.to_owned(),
            policy: ClassPolicy::unshaped(mtu),
            horizon_policy,
            aggregate: None,
            stats: ClassStats::default(),
            dirty: false,
            queued: 0,
            queued_bytes: 0,
            queued_large: 0,
            bound: (u64::MAX, u64::MAX),
            stamped_bytes: 0,
            rule: None,
            draining: false,
            closed: false,
            refused_bytes: 0,
            node: super::tree::Node::default(),
            pace: super::pace::ClassPace::default(),
        };
        let index = match self.live.take_free_state() {
            Some(i) => {
                self.classes[i] = state;
                i
            }
            None => {
                self.classes.push(state);
                self.classes.len() - 1
            }
        };
        self.class_index.insert(name.to_owned(), index);
        self.telemetry.class_named(index, name);
        index
    }

    /// Puts `policy` in force for class state `index`, under the wheel `wheel` and frames of
    /// `mtu` bytes.
    pub(super) fn apply_policy(
        &mut self,
        index: usize,
        policy: ClassPolicy,
        wheel: &metronome_core::TimingWheelConfig,
        mtu: u32,
    ) {
        let wheel_horizon = wheel.horizon_policy;
        let frame = mtu.saturating_add(ETHERNET_HEADER);
        let burst = self.aggregate_burst(&policy);
        let state = &mut self.classes[index];
        state.bound = policy.queue.bounds(policy.rate, wheel.horizon, frame);
        state.aggregate = match (policy.rate, state.aggregate) {
            (Some(rate), Some(p)) => {
                let _ = self.stamper.set_rate(p, rate);
                let _ = self.stamper.set_burst(p, burst);
                Some(p)
            }
            (Some(rate), None) => Some(match self.live.take_free_policy() {
                Some(p) => {
                    let _ = self
                        .stamper
                        .reset_policy(p, PolicyKind::Aggregate, rate, burst);
                    p
                }
                None => self.stamper.add_policy(PolicyKind::Aggregate, rate, burst),
            }),
            (None, old) => {
                self.live.free_policy(old);
                None
            }
        };
        if let Some(pacing) = policy.pacing {
            self.flows
                .set_class_pacing(index as u32, &mut self.stamper, pacing, policy.burst);
        }
        let state = &mut self.classes[index];
        state.node.own_rate = policy.rate;
        state.policy = policy;
        state.horizon_policy = policy.horizon_policy.unwrap_or(wheel_horizon);
    }

    /// Applies `new`'s classes, rates and default policy live (SIGHUP). Queued packets stay and
    /// leave at their EDT. What needs a restart (the wheel, the frame size, the link's buffer)
    /// the daemon refuses before it gets here (`metronome_config::ReloadPlan`).
    pub fn reload(&mut self, new: EngineConfig) -> Result<(), ReloadError> {
        self.install_classes(&new)?;
        self.fair_configure(&new);
        self.acks.reload(&new);
        self.config = new;
        Ok(())
    }

    /// Counts into class state `index`'s stats with `count`, listing it for the next publish.
    #[inline]
    pub(super) fn class_count(&mut self, index: usize, count: impl FnOnce(&mut ClassStats)) {
        if let Some(state) = self.classes.get_mut(index) {
            count(&mut state.stats);
            state.touch(index, &mut self.dirty);
        }
    }

    /// Counts an entry of class `index` into the wheel: its frame in pool slot `slot`, `wire`
    /// bytes (the class's `queued`, `queued_bytes`, `queued_large`).
    pub(super) fn count_queued(&mut self, index: usize, slot: u32, wire: u64) {
        let large = slot >= self.large_from;
        if let Some(state) = self.classes.get_mut(index) {
            state.queued += 1;
            state.queued_bytes += wire;
            state.queued_large += u64::from(large);
            state.touch(index, &mut self.dirty);
        }
    }

    /// Takes entry `pkt` (`wire` bytes) off its class's counts when it leaves the wheel or the
    /// link, discarded or dropped ([`Engine::depart`] counts a sent one).
    pub(super) fn count_left(&mut self, pkt: PacketRef, wire: u64) {
        let (slot, _) = decode(pkt.id);
        let large = slot >= self.large_from;
        let index = pkt.class.index();
        if let Some(state) = self.classes.get_mut(index) {
            state.left(wire, large);
            state.touch(index, &mut self.dirty);
        }
    }

    /// Frames and wire bytes class `index` holds waiting, what its `queue` bounds count: its
    /// entries in the wheel and on the link, and its frames in the fair queue.
    pub(super) fn class_held(&self, index: usize) -> (u64, u64) {
        let (fair_packets, fair_bytes) = self.fair_class_load(index);
        self.classes.get(index).map_or((0, 0), |s| {
            (s.queued + fair_packets, s.queued_bytes + fair_bytes)
        })
    }

    /// Whether class `index` may take one more frame, in pool slot `id`, of `len` wire bytes:
    /// within its `queue` bounds (frames and bytes waiting in its fair queue, the wheel and on
    /// the link; [`DropReason::QueueFull`]) and within its share of the frame pool
    /// ([`DropReason::PoolShare`]): the class holds fewer slots of the frame's size class than
    /// `daemon.pool_share` (α) times the slots still free. A class alone can take most of the
    /// pool; with N classes over their share each holds at most `α / (1 + N α)` of it, and the
    /// rest stays free for the others and for the receive path (the dynamic threshold of
    /// shared-buffer switches, `crate::config::DEFAULT_POOL_SHARE`). α = 0: no share.
    pub(super) fn admit(
        &self,
        pool: &FramePool,
        index: usize,
        id: u32,
        len: u64,
    ) -> Result<(), DropReason> {
        let Some(s) = self.classes.get(index) else {
            return Ok(());
        };
        let (packets, bytes) = self.class_held(index);
        if packets >= s.bound.0 || bytes.saturating_add(len) > s.bound.1 {
            return Err(DropReason::QueueFull);
        }
        let share = u64::from(self.config.pool_share);
        if share == 0 {
            return Ok(());
        }
        let (held, free) = if id >= self.large_from {
            (s.queued_large, pool.available_large())
        } else {
            (s.queued - s.queued_large, pool.available_small())
        };
        if held >= share.saturating_mul(free as u64) {
            return Err(DropReason::PoolShare);
        }
        Ok(())
    }

    /// Packets of class `name` waiting in the wheel or on the link (0 for an unknown name).
    pub fn class_queued(&self, name: &str) -> u64 {
        self.class_index(name)
            .and_then(|i| self.classes.get(i))
            .map_or(0, |s| s.queued)
    }

    /// The state index of class `name` (stable across reloads while the name stays), for
    /// [`Engine::set_class_rate`] and [`Engine::class_stamped_bytes`].
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.class_index.get(name).copied()
    }

    /// Bytes of class `index` accepted into the wheel so far (0 for an unknown index).
    ///
    /// A class with children counts its subtree's too, as of the tree's last pass.
    pub fn class_stamped_bytes(&self, index: usize) -> u64 {
        self.classes
            .get(index)
            .map_or(0, |s| s.stamped_bytes + s.node.sub_stamped)
    }

    /// Bytes of class `index` held (in its fair queue, the wheel and on the link), 0 for an
    /// unknown index: its backlog.
    pub fn class_backlog_bytes(&self, index: usize) -> u64 {
        let sub = self.classes.get(index).map_or(0, |s| s.node.sub_held);
        self.class_held(index).1 + sub
    }

    /// Bytes of class `index` dropped before they were queued, cumulative (0 for an unknown
    /// index).
    pub fn class_refused_bytes(&self, index: usize) -> u64 {
        self.classes
            .get(index)
            .map_or(0, |s| s.refused_bytes + s.node.sub_refused)
    }

    /// Closes class `index` (every frame refused at admission, counted as
    /// [`DropReason::QueueFull`]: the class holds no queue) or opens it again; what is queued
    /// still leaves at its EDT. Returns false for an unknown index.
    /// A class with children closes its subtree with it.
    pub fn set_class_closed(&mut self, index: usize, closed: bool) -> bool {
        match self.classes.get_mut(index) {
            Some(s) => {
                let changed = s.closed != closed;
                s.closed = closed;
                if changed && s.node.children > 0 {
                    self.tree_closures();
                }
                true
            }
            None => false,
        }
    }

    /// Sets the rate of class `index`'s aggregate policy to `rate` from the next packet on, as a
    /// silo's share of the class's `rate` (Carousel §5.3); no burst is granted
    /// (`Timestamper::set_rate`). The configuration keeps the class's whole rate, which a reload
    /// puts back. Returns false when the class has no aggregate policy.
    pub fn set_class_rate(&mut self, index: usize, rate: metronome_core::Rate) -> bool {
        if self.classes.get(index).is_some_and(|s| s.node.member) {
            let has = self.classes[index].aggregate.is_some();
            if has {
                self.tree_set_cap(index, rate);
            }
            return has;
        }
        match self.classes.get(index).and_then(|s| s.aggregate) {
            Some(p) => self.stamper.set_rate(p, rate).is_ok(),
            None => false,
        }
    }
}

/// A class as the kernel's early admission sees it ([`Engine::admission`]): its name, its
/// aggregate rate and its `queue` bound in wire bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmittedClass {
    /// The class's name (`"default"` for the default class).
    pub name: String,
    /// Its aggregate rate (on a `[link]`, its ceiling); `None`: no rate, nothing to refuse.
    pub rate: Option<metronome_core::Rate>,
    /// The most wire bytes it may hold waiting (`queue.bytes` in force).
    pub queue_bytes: u64,
}

/// What the early admission needs of the engine's classes ([`Engine::admission`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The first rules in first-match order, each with its class.
    pub rules: Vec<(metronome_packet::ClassRule, AdmittedClass)>,
    /// Whether `rules` holds every rule: then a packet that matches none is the default
    /// class's.
    pub complete: bool,
    /// The default class.
    pub default: AdmittedClass,
}

impl Engine {
    /// The class of state `index` for [`Admission`].
    fn admitted(&self, index: usize) -> AdmittedClass {
        let s = &self.classes[index];
        AdmittedClass {
            name: s.name.clone(),
            rate: s.policy.rate,
            queue_bytes: s.bound.1,
        }
    }

    /// The first `max_rules` rules of the classifier in first-match order with their classes,
    /// and the default class: what a filter in front of the loop needs to refuse early what a
    /// class could not take anyway (`crate::os::early`).
    pub fn admission(&self, max_rules: usize) -> Admission {
        let state_of =
            |id: metronome_core::ClassId| self.class_map.get(id.index()).map_or(0, |&i| i as usize);
        let rules = self
            .classifier
            .rules()
            .take(max_rules)
            .map(|(rule, id)| (rule.clone(), self.admitted(state_of(*id))))
            .collect();
        Admission {
            rules,
            complete: self.classifier.len() <= max_rules,
            default: self.admitted(state_of(EngineConfig::DEFAULT_CLASS)),
        }
    }
}
