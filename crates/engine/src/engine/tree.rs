//! The class tree (`parent`, `weight`, `gather`; [`crate::config::Tree`]): classes inside
//! classes, without a tree of queues (Carousel §5.1.1).
//!
//! * **Bounds by stamping.** A packet is stamped by its class's aggregate policy and by every
//!   ancestor's, and leaves at the latest of their EDTs ([`PolicyStack::with_ancestors`]): a
//!   class's rate bounds its subtree exactly, whatever its children do, in the one wheel.
//! * **Sharing by allocation.** Stamping alone would share a parent first come, first served.
//!   So every [`TREE_PERIOD`] (longer with many busy classes, [`PASS_NS_PER_CLASS`]) a pass
//!   water-fills each busy parent's share among its busy children by `weight`, each within its
//!   own rate (weighted max-min, the silos' allocator's rule, Carousel §5.3), and puts each
//!   child's share in force as its aggregate policy's rate (`Timestamper::set_rate`: no burst).
//!   A child's demand is its rate (or its parent's share) when its own policy holds a backlog
//!   back or it had frames refused, else what arrived (smoothed over a few passes; what waits
//!   for an ancestor does not count: it says that the parent is busy, not that the child wants
//!   more); what the demands leave is handed out by weight up to
//!   each rate, and no busy child gets less than its weighted part of its parent, so what one
//!   child leaves the others take at the next pass, and a child that starts sending is not held
//!   back until then (the parent's own policy keeps the sum within its rate meanwhile).
//! * **Idle classes** leave the pass and get their ceiling (the least rate on their path to
//!   the top) as their rate, so a class that wakes up sends at once; the pass costs the busy
//!   classes, not the tree's size.
//! * **What it counts.** A parent's sent packets and bytes are its own and its subtree's (added
//!   at each pass); each class's share in force is `ClassStats::share_bps`.
//! * **Live changes** ([`super::live`]): a class added under a parent, moved to another
//!   (`parent` changed: cycles and depth refused) or given a new rate; a parent with children is
//!   not deleted (the error names them). A class's rule is tried before its ancestors'.

mod live;
mod pass;
pub use pass::water_fill;

use super::Engine;
use crate::config::{EngineConfig, MAX_TREE_DEPTH};
use metronome_core::timestamp::{PolicyId, PolicyKind, PolicyStack};
use metronome_core::{ClassId, Duration, EdtQueue, PacketRef, Rate, Timestamp};

/// Shortest time between two allocation passes: 1 ms, a tenth of the silos' default allocator
/// period; a TCP flow's round trip on a host is longer, so a share follows its demand within
/// one round trip.
pub const TREE_PERIOD: Duration = Duration::from_millis(1);

/// The pass's period grows by this many nanoseconds per busy class, so that it costs at most
/// a few per cent of the loop however many classes are busy: a pass costs about 250 ns a
/// class when the classes' states are out of the cache (`metronome bench --daemon --classes
/// 100000 --tree 1000`, 2 000 busy classes), so 5 µs keeps it near 5 %. 2 000 busy classes
/// have their shares follow their demands every 10 ms.
pub const PASS_NS_PER_CLASS: u64 = 5_000;

/// The demand of a class that holds no backlog is what arrived, smoothed over about this many
/// passes (an exponential average of gain 1/8).
const DEMAND_SMOOTHING: u64 = 8;

/// No limit, in bits per second.
const UNLIMITED: u64 = u64::MAX;

/// The bit of a wheel entry's class that says its ancestors have stamped it (class states are
/// below `crate::engine::MAX_CLASS_STATES`, 2^24).
const STAGED: u32 = 1 << 31;

/// Entry `pkt` without the mark of its ancestors' stamp.
#[inline]
pub(super) fn unstaged(mut pkt: PacketRef) -> PacketRef {
    pkt.class = ClassId(pkt.class.0 & !STAGED);
    pkt
}

/// A class's place in the tree, kept in its state.
#[derive(Debug, Default)]
pub(super) struct Node {
    /// The parent's name as configured (kept so that a parent added later adopts it).
    pub(super) parent_name: Option<Box<str>>,
    /// The parent's state, when it is in force.
    pub(super) parent: Option<u32>,
    /// Its weight among its siblings (0 is read as 1).
    pub(super) weight: u32,
    /// Levels above it.
    pub(super) depth: u8,
    /// Children in force, and the sum of their weights.
    pub(super) children: u32,
    children_weight: u64,
    /// It takes no packet of its own ([`crate::config::Tree::gathers_only`]).
    pub(super) gathers: bool,
    /// It has a parent or children: its packets pass the tree's accounting.
    pub(super) member: bool,
    /// Its configured rate (its policy's, before a member without one takes its ceiling).
    pub(super) own_rate: Option<Rate>,
    /// Its own limit, bps: its rate, or what [`Engine::set_class_rate`] gave it.
    cap: u64,
    /// The least limit on its path to the top, bps: what it gets while idle.
    ceiling: u64,
    /// The aggregate policies of its ancestors, nearest first (a stack of them alone, kept in
    /// the class's state so that the per-packet path reads no other memory for them).
    pub(super) ancestors: PolicyStack,
    /// In the pass's busy list.
    pub(super) busy: bool,
    /// Bytes stamped and refused, and packets and bytes sent, at the last pass.
    last_stamped: u64,
    last_refused: u64,
    last_sent: (u64, u64),
    /// Its share in force, bps (0: none).
    pub(super) share: u64,
    /// What its descendants stamped and refused, cumulative, and held at the last pass, bytes:
    /// with its own, its subtree's demand as the silos' allocator and the cluster agent read it.
    pub(super) sub_stamped: u64,
    pub(super) sub_refused: u64,
    pub(super) sub_held: u64,
    /// The parent's name the telemetry was last told.
    told: Option<String>,
    /// An ancestor is closed (a cluster share of zero): it takes no frame either.
    pub(super) closed_above: bool,
    /// What arrived, bps, smoothed over the passes while it is busy.
    arrivals_bps: u64,
    /// Scratch of the pass: its subtree's demand, whether it or its subtree received, held or
    /// sent anything.
    demand: u64,
    active: bool,
    delta: (u64, u64),
    pass: Gathered,
}

/// What a pass gathers from a class's children ([`Node`]'s subtree counts).
#[derive(Clone, Copy, Debug, Default)]
struct Gathered {
    stamped: u64,
    refused: u64,
    held: u64,
}

/// The tree's engine-wide state.
#[derive(Debug, Default)]
pub(super) struct TreeTable {
    /// Some class is a member: the per-packet path checks this first.
    pub(super) any: bool,
    /// Classes that received or held something since the last pass.
    busy: Vec<u32>,
    /// When the next pass is due, and when the last one ran.
    next: Timestamp,
    last: Timestamp,
    /// Names that classes give as their parent and that no class in force has.
    orphans: std::collections::HashSet<Box<str>>,
    /// Passes run, for tests and the stats.
    pub(super) passes: u64,
    /// The pass's scratch, kept between passes: its classes, their sort keys, and the
    /// water-filling's demands and shares.
    set: Vec<u32>,
    keyed: Vec<(std::cmp::Reverse<u8>, u32, u32)>,
    items: Vec<(u64, u64)>,
    out: Vec<u64>,
    extra: Vec<u64>,
}

/// A live change of the tree that the engine refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// `parent` names no class in force.
    #[error("no class {0:?} to be the parent")]
    UnknownParent(String),
    /// The class would be its own ancestor.
    #[error("{0:?} would be its own ancestor")]
    Cycle(String),
    /// More than [`MAX_TREE_DEPTH`] levels.
    #[error("more than {MAX_TREE_DEPTH} levels")]
    TooDeep,
    /// The class's rate is above an ancestor's: a limit that could never apply.
    #[error(
        "{rate} is above the {limit} of its ancestor {ancestor:?}: a limit that could never apply"
    )]
    AboveAncestor {
        /// The class's rate.
        rate: Rate,
        /// The ancestor's.
        limit: Rate,
        /// The ancestor's name.
        ancestor: String,
    },
    /// The class's new rate is below a child's.
    #[error("{rate} is below the {child_rate} of its child {child:?}: the child's limit could never apply")]
    BelowChild {
        /// The class's new rate.
        rate: Rate,
        /// The child's.
        child_rate: Rate,
        /// The child's name.
        child: String,
    },
    /// A parent is deleted while it has children.
    #[error(
        "class {name:?} has {children} children: delete them or move them to another parent first"
    )]
    HasChildren {
        /// The class.
        name: String,
        /// How many.
        children: u32,
    },
}

impl TreeError {
    /// The field of the class the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            TreeError::UnknownParent(_) | TreeError::Cycle(_) | TreeError::TooDeep => "parent",
            TreeError::AboveAncestor { .. } | TreeError::BelowChild { .. } => "rate",
            TreeError::HasChildren { .. } => "name",
        }
    }
}

fn clamp(wire: u64) -> u32 {
    u32::try_from(wire).unwrap_or(u32::MAX)
}

fn bps(rate: Option<Rate>) -> u64 {
    rate.map_or(UNLIMITED, |r| r.bps())
}

impl Engine {
    /// Puts the configuration's tree in force: parents by name, then every node
    /// ([`Engine::tree_refresh`]). `map` gives each configuration class's state (default first).
    pub(super) fn tree_install(&mut self, config: &EngineConfig, map: &[u32]) {
        for state in &mut self.classes {
            state.node.parent_name = None;
            state.node.weight = 1;
        }
        for (c, &index) in config.classes.iter().zip(map.iter().skip(1)) {
            let node = &mut self.classes[index as usize].node;
            node.parent_name = c.tree.parent.as_deref().map(Into::into);
            node.weight = c.tree.weight;
        }
        self.tree_refresh();
    }

    /// Whether class state `index` is in force: it has a rule, or it only gathers its children.
    pub(super) fn in_force(&self, index: usize) -> bool {
        self.classes
            .get(index)
            .is_some_and(|s| s.rule.is_some() || (s.node.gathers && !s.draining))
    }

    /// Recomputes every node from the parents' names: parents in force, children and their
    /// weights, depth, ancestors' policies, caps and ceilings; a class whose path loops or goes
    /// deeper than [`MAX_TREE_DEPTH`] is put at the top (validation refuses both, so only a set
    /// of restored classes could hold one). Costs the classes times the depth.
    pub(super) fn tree_refresh(&mut self) {
        let n = self.classes.len();
        self.tree.orphans.clear();
        for i in 0..n {
            let name = self.classes[i].node.parent_name.clone();
            let parent = match name.filter(|_| self.in_force(i)) {
                None => None,
                Some(name) => match self.class_index.get(&*name).copied() {
                    Some(p) if p != i && self.in_force(p) => Some(p as u32),
                    _ => {
                        self.tree.orphans.insert(name);
                        None
                    }
                },
            };
            let node = &mut self.classes[i].node;
            node.parent = parent;
            node.children = 0;
            node.children_weight = 0;
        }
        // Cut loops and paths too deep.
        for i in 0..n {
            let mut at = self.classes[i].node.parent;
            let mut steps = 1;
            while let Some(p) = at {
                if p as usize == i || steps >= MAX_TREE_DEPTH {
                    tracing::warn!(
                        class = %self.classes[i].name,
                        "the class's parents loop or go deeper than {MAX_TREE_DEPTH} levels: it \
                         is put at the top of the tree"
                    );
                    self.classes[i].node.parent = None;
                    break;
                }
                steps += 1;
                at = self.classes[p as usize].node.parent;
            }
        }
        for i in 0..n {
            if let Some(p) = self.classes[i].node.parent {
                let w = u64::from(self.classes[i].node.weight.max(1));
                let parent = &mut self.classes[p as usize].node;
                parent.children += 1;
                parent.children_weight += w;
            }
        }
        // Parents before their children: each node is computed from its parent's.
        let depth = |engine: &Engine, i: usize| {
            let mut d = 0;
            let mut at = engine.classes[i].node.parent;
            while let Some(p) = at {
                d += 1;
                at = engine.classes[p as usize].node.parent;
            }
            d
        };
        let mut order: Vec<(u8, u32)> = (0..n).map(|i| (depth(self, i), i as u32)).collect();
        order.sort_unstable();
        let mut any = false;
        for (_, i) in order {
            self.tree_node(i as usize);
            any |= self.classes[i as usize].node.member;
        }
        self.tree.any = any;
        if !any {
            for &i in &self.tree.busy {
                if let Some(s) = self.classes.get_mut(i as usize) {
                    s.node.busy = false;
                }
            }
            self.tree.busy.clear();
        }
    }

    /// Recomputes node `index` from its parent's (already current): depth, ancestors, cap,
    /// ceiling; gives a member without a rate of its own an aggregate policy at its ceiling,
    /// and puts a member's rate at its ceiling until a pass gives it its share.
    pub(super) fn tree_node(&mut self, index: usize) {
        let parent = self.classes[index].node.parent.map(|p| p as usize);
        let (depth, ancestors, parent_ceiling, closed_above) = match parent {
            Some(p) => {
                let pn = &self.classes[p].node;
                let stack = pn.ancestors.below(self.classes[p].aggregate);
                let closed = self.classes[p].closed || pn.closed_above;
                (pn.depth + 1, stack, pn.ceiling, closed)
            }
            None => (0, PolicyStack::default(), UNLIMITED, false),
        };
        let state = &self.classes[index];
        let member = parent.is_some() || state.node.children > 0;
        let cap = bps(state.node.own_rate);
        let ceiling = cap.min(parent_ceiling);
        let told = self.classes[index].node.told.as_deref();
        if told != parent.map(|p| &*self.classes[p].name) {
            let named = parent.map(|p| self.classes[p].name.clone());
            self.telemetry.class_parent(index, named.as_deref());
            self.classes[index].node.told = named;
        }
        let node = &mut self.classes[index].node;
        node.depth = depth;
        node.closed_above = closed_above;
        node.ancestors = ancestors;
        node.member = member;
        node.cap = cap;
        node.ceiling = ceiling;
        if !member {
            node.share = 0;
            return;
        }
        if ceiling == UNLIMITED {
            return;
        }
        let rate = Rate::from_bps(ceiling);
        let burst = self.classes[index].policy.burst;
        match self.classes[index].aggregate {
            Some(p) => {
                let _ = self.stamper.set_rate(p, rate);
            }
            None => {
                // A member without a rate of its own takes its share under an aggregate policy.
                let p = match self.live.take_free_policy() {
                    Some(p) => {
                        let _ = self
                            .stamper
                            .reset_policy(p, PolicyKind::Aggregate, rate, burst);
                        p
                    }
                    None => self.stamper.add_policy(PolicyKind::Aggregate, rate, burst),
                };
                let wheel = self.config.wheel;
                let frame = self
                    .config
                    .mtu
                    .saturating_add(crate::config::ETHERNET_HEADER);
                let state = &mut self.classes[index];
                state.aggregate = Some(p);
                state.policy.rate = Some(rate);
                state.bound = state.policy.queue.bounds(Some(rate), wheel.horizon, frame);
            }
        }
        self.classes[index].node.share = ceiling;
    }

    /// Entry `pkt` fell due at `now`: when its class has ancestors, they stamp it now (each
    /// bounds its subtree as a shaper in tandem would: the packet reaches the parent when its
    /// class lets it go, so the parent sees its subtree's packets in the order they leave their
    /// classes). Returns the entry to send, or `None` when the ancestors hold it back: it is
    /// queued again until their EDT, marked, and leaves then.
    #[inline]
    pub(super) fn tree_stage(&mut self, now: Timestamp, pkt: PacketRef) -> Option<PacketRef> {
        if pkt.class.0 & STAGED != 0 {
            return Some(unstaged(pkt));
        }
        let s = self.classes.get(pkt.class.index())?;
        if s.node.ancestors.levels() == 0 {
            return Some(pkt);
        }
        let stack = s.node.ancestors;
        let wire = self.slots.wire(pkt);
        let edt = stack.stamp(&mut self.stamper, now, now, clamp(wire));
        if edt <= now {
            return Some(pkt);
        }
        let edt = edt.min(now.saturating_add(self.max_delay));
        let staged = PacketRef {
            class: ClassId(pkt.class.0 | STAGED),
            ..pkt
        };
        match self.wheel.enqueue(now, edt, staged) {
            Ok(()) => {
                self.slots.restamp(pkt, edt);
                None
            }
            // Not expected (the entry's own place was just freed): it leaves now.
            Err(_) => Some(pkt),
        }
    }

    /// Marks every class whose ancestor is closed ([`Engine::set_class_closed`]): scans the
    /// classes, for a change of a parent's closure (rare: a cluster share reaching zero).
    pub(super) fn tree_closures(&mut self) {
        for i in 0..self.classes.len() {
            let mut at = self.classes[i].node.parent;
            let mut closed = false;
            let mut steps = 0;
            while let (Some(p), false) = (at, closed) {
                closed = self.classes[p as usize].closed;
                at = self.classes[p as usize].node.parent;
                steps += 1;
                if steps >= MAX_TREE_DEPTH {
                    break;
                }
            }
            self.classes[i].node.closed_above = closed;
        }
    }

    /// The policies a packet of class `index` passes: its aggregate, `pacing`, its ancestors'.
    #[inline]
    pub(super) fn class_stack(&self, index: usize, pacing: Option<PolicyId>) -> PolicyStack {
        let Some(s) = self.classes.get(index) else {
            return PolicyStack::new(None, pacing);
        };
        s.node.ancestors.with_own(s.aggregate, pacing)
    }

    /// Lists member class `index` for the next pass (it received a frame).
    #[inline]
    pub(super) fn tree_touch(&mut self, index: usize) {
        if let Some(s) = self.classes.get_mut(index) {
            if s.node.member && !s.node.busy {
                s.node.busy = true;
                self.tree.busy.push(index as u32);
            }
        }
    }

    /// Runs the allocation pass when it is due (see the module docs). The loop's release calls
    /// it every round; it costs one comparison when not due.
    #[inline]
    pub(super) fn tree_due(&mut self, now: Timestamp) {
        if self.tree.any && now >= self.tree.next && !self.tree.busy.is_empty() {
            self.tree_pass(now);
        }
    }

    /// Sets member class `index`'s own limit to `rate` (a silo's or the cluster's share of its
    /// rate): a class at the top takes it at once, a child at the next pass.
    pub(super) fn tree_set_cap(&mut self, index: usize, rate: Rate) {
        let node = &mut self.classes[index].node;
        node.cap = rate.bps();
        if node.parent.is_none() {
            node.ceiling = rate.bps();
            self.set_share(index, rate.bps());
        }
    }

    /// Whether a class named `name` is some class's parent that is not in force (its children
    /// wait at the top for it).
    pub(super) fn tree_adopts(&self, name: &str) -> bool {
        self.tree.orphans.contains(name)
    }

    /// When the next allocation pass is due, while some class is busy (so that the loop runs
    /// it, and the last sent counts of a class that went idle reach its ancestors).
    pub(super) fn tree_next_due(&self) -> Option<Timestamp> {
        (self.tree.any && !self.tree.busy.is_empty()).then_some(self.tree.next)
    }

    /// The allocation passes run so far.
    pub fn tree_passes(&self) -> u64 {
        self.tree.passes
    }

    /// The share in force of class `name` in bits per second: what the tree's last pass gave
    /// it, or its ceiling while idle; `None` for a class outside any tree or unknown.
    pub fn class_share(&self, name: &str) -> Option<Rate> {
        let s = self.classes.get(self.class_index(name)?)?;
        (s.node.member && s.node.share > 0).then(|| Rate::from_bps(s.node.share))
    }
}

impl Node {
    /// Its share in force, else `fallback`.
    fn share_or(&self, fallback: u64) -> u64 {
        if self.share > 0 {
            self.share
        } else {
            fallback
        }
    }
}
