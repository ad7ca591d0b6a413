//! The NIC-level bandwidth allocator of per-core silos (Carousel §5.3, "NBA"): for every class
//! with an aggregate `rate`, one [`metronome_core::nba::Nba`] water-fills the aggregate over the
//! silos' measured demands and publishes each silo's rate through a [`RateExchange`]. The
//! daemon's coordinator thread runs it (`metronome_daemon::driver::silo`), the lab's NBA
//! experiment too. [`cell`]: what a cluster class's share and demand travel in.

pub mod cell;

use crate::config::{tree, ClassSet, Match, MAX_TREE_DEPTH};
use cell::ClusterCell;
use metronome_core::nba::{Nba, NbaConfig};
use metronome_core::rate_exchange::RateExchange;
use metronome_core::{Duration, Rate, Timestamp};
use std::sync::Arc;

/// How often a silo publishes its demand: every 1 ms at most (ours: a hundredth of the default
/// allocator period, so a period's measurement is at most 1 % stale, at the cost of one
/// sequence-locked store pair per class per millisecond).
pub const DEMAND_PUBLISH: Duration = Duration::from_millis(1);
/// One class's cross-core limit as the silos see it: its name and its exchange.
#[derive(Clone, Debug)]
pub struct LimitCell {
    /// The class name (`"default"` for the default class).
    pub class: String,
    /// Demands in, rates out.
    pub exchange: Arc<RateExchange>,
}

/// One allocator per class with an aggregate `rate` (see the module docs).
#[derive(Debug)]
struct Limit {
    class: String,
    /// The silos that can carry the class's packets ([`class_silos`]), in order: the allocator's
    /// cores. The others get [`Limit::idle`].
    silos: Vec<usize>,
    /// What a silo that never carries the class gets: the allocator's idle floor of the
    /// aggregate, outside the aggregate (only a packet that reached such a silo against
    /// [`class_silos`]'s reasoning would use it).
    idle: Rate,
    nba: Nba,
    exchange: Arc<RateExchange>,
    /// Epoch of the last rates published (ours: bumped on every publish, including the initial
    /// split and reload rescales, so it never goes back).
    epoch: u64,
    /// A cluster class whose share is zero: every silo gets a zero rate, which closes the class
    /// ([`cell::apply_share`]).
    closed: bool,
}

impl Limit {
    fn publish(&mut self, cores: usize) {
        self.epoch += 1;
        let rates = self.nba.rates();
        for silo in 0..cores {
            let rate = match self.silos.iter().position(|&s| s == silo) {
                _ if self.closed => Rate::from_bps(0),
                Some(k) => rates[k],
                None => self.idle,
            };
            self.exchange.publish_rate(silo, rate, self.epoch);
        }
    }
}

/// Where the silos capture packets: in attach mode with both attached interfaces and bridges
/// (`metronome_daemon::os::attach`), the first `attached` silos capture at the attached
/// interfaces and the last `bridges` at the bridges; otherwise (zeros) every silo sees every
/// class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Silos capturing at attached interfaces (the first ones).
    pub attached: usize,
    /// Silos capturing at bridges (the last ones).
    pub bridges: usize,
}

/// The silos of `cores` that can carry the packets of a class matching `matcher` under
/// `placement`: all of them, except with both attached interfaces and bridges, where a class
/// matching `from` or `cgroup` is captured only at the attached interfaces (the first silos) and
/// a class matching `to` only at the bridges (the last ones): splitting its rate with silos that
/// never see it would leave that share unused.
fn class_silos(placement: Placement, matcher: Option<&Match>, cores: usize) -> Vec<usize> {
    let Placement { attached, bridges } = placement;
    let all: Vec<usize> = (0..cores).collect();
    if attached == 0 || bridges == 0 || attached + bridges != cores {
        return all;
    }
    match matcher {
        Some(m) if m.from.is_some() => (0..attached).collect(),
        Some(m) if m.to.is_some() => (attached..cores).collect(),
        Some(m) if m.cgroup.is_some() => (0..attached).collect(),
        _ => all,
    }
}

/// The coordinator's side of the NIC-level bandwidth allocation: every class with an aggregate
/// rate, its [`Nba`] and its [`RateExchange`].
#[derive(Debug)]
pub struct Allocator {
    cores: usize,
    period: Duration,
    placement: Placement,
    limits: Vec<Limit>,
    /// The cluster classes' cells ([`cell`]): their shares are the aggregates of
    /// their limits, with the epoch applied last.
    cluster: Vec<(Arc<ClusterCell>, u64)>,
}

/// The classes of `config` with an aggregate rate, `(name, rate, silos)`, the default class
/// included (no match), each on the silos of `cores` that can carry its packets under
/// `placement` ([`class_silos`]). A class that only gathers its children (`gather`) matches no
/// packet itself: it is on the silos of the classes of its subtree, where its children's packets
/// are, so that no silo that never sees them holds part of its rate; one without such a class
/// is on every silo.
fn limited_classes(
    config: ClassSet<'_>,
    placement: Placement,
    cores: usize,
) -> Vec<(String, Rate, Vec<usize>)> {
    let classes = config.classes;
    let parents = tree::parents(classes);
    let mut subtree: Vec<Vec<usize>> = vec![Vec::new(); classes.len()];
    for (i, c) in classes.iter().enumerate() {
        if c.tree.gathers_only {
            continue;
        }
        let silos = class_silos(placement, Some(&c.matcher), cores);
        // At most MAX_TREE_DEPTH levels up: `parents` cuts a cycle no deeper.
        let mut at = parents[i];
        for _ in 0..MAX_TREE_DEPTH {
            let Some(p) = at else { break };
            for s in &silos {
                if !subtree[p].contains(s) {
                    subtree[p].push(*s);
                }
            }
            at = parents[p];
        }
    }
    let default = config
        .default_class
        .rate
        .map(|r| ("default".to_owned(), r, class_silos(placement, None, cores)));
    let limited = classes.iter().enumerate().filter_map(|(i, c)| {
        let rate = c.policy.rate?;
        let silos = if c.tree.gathers_only && !subtree[i].is_empty() {
            let mut silos = subtree[i].clone();
            silos.sort_unstable();
            silos
        } else {
            class_silos(placement, Some(&c.matcher), cores)
        };
        Some((c.name.clone(), rate, silos))
    });
    default.into_iter().chain(limited).collect()
}

impl Allocator {
    /// Allocators for `config`'s limited classes over `cores` silos placed as `placement`,
    /// updating every `period`, rates published as the equal split (epoch 1).
    pub fn new(
        config: ClassSet<'_>,
        period: Duration,
        placement: Placement,
        cores: usize,
    ) -> Allocator {
        Allocator::with_cluster(config, period, placement, cores, &[])
    }

    /// [`Allocator::new`] whose cluster classes' aggregates are the shares in `cells` (a
    /// daemon's share of a cluster limit, split over its silos as any aggregate), from the
    /// start and at every change.
    pub fn with_cluster(
        config: ClassSet<'_>,
        period: Duration,
        placement: Placement,
        cores: usize,
        cells: &[Arc<ClusterCell>],
    ) -> Allocator {
        let mut a = Allocator {
            cores: cores.max(1),
            period,
            placement,
            limits: Vec::new(),
            cluster: cells.iter().map(|c| (c.clone(), 0)).collect(),
        };
        a.apply(config);
        a
    }

    /// The share of cluster class `name` now (`None` for another class), its epoch noted.
    fn cluster_share(&mut self, name: &str) -> Option<u64> {
        let (cell, epoch) = self.cluster.iter_mut().find(|(c, _)| c.class() == name)?;
        let (share, e) = cell.share();
        *epoch = e;
        Some(share)
    }

    /// Makes the limits match `config`: rescales kept classes (`Nba::set_aggregate`), adds new
    /// ones, forgets removed ones; publishes every limit's rates.
    pub fn apply(&mut self, config: ClassSet<'_>) {
        let cores = self.cores;
        let wanted = limited_classes(config, self.placement, cores);
        // A class whose silos changed (its match did) gets an allocator afresh.
        self.limits.retain(|l| {
            wanted
                .iter()
                .any(|(n, _, silos)| *n == l.class && *silos == l.silos)
        });
        for (name, rate, silos) in wanted {
            // A cluster class's aggregate is this daemon's share (zero: closed, the allocator
            // keeping the class's rate).
            let share = self.cluster_share(&name);
            let closed = share == Some(0);
            let rate = match share {
                Some(bps) if bps > 0 => Rate::from_bps(bps),
                _ => rate,
            };
            let idle = Rate::from_bps(
                (rate.bps() as f64 * metronome_core::nba::DEFAULT_IDLE_FLOOR_FRACTION) as u64,
            );
            match self.limits.iter_mut().find(|l| l.class == name) {
                Some(l) => {
                    l.nba.set_aggregate(rate);
                    l.idle = idle;
                    l.closed = closed;
                }
                None => {
                    let cfg = NbaConfig {
                        period: self.period,
                        ..NbaConfig::new(rate, silos.len())
                    };
                    // At least one silo, a positive period and the default fractions: valid.
                    let Ok(nba) = Nba::new(cfg) else { continue };
                    self.limits.push(Limit {
                        class: name,
                        silos,
                        idle,
                        nba,
                        exchange: Arc::new(RateExchange::new(cores)),
                        epoch: 0,
                        closed,
                    });
                }
            }
        }
        for l in &mut self.limits {
            l.publish(cores);
        }
    }

    /// How many classes have a limit.
    pub fn limits(&self) -> usize {
        self.limits.len()
    }

    /// The allocation period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What the silos need: each limit's class and exchange.
    pub fn cells(&self) -> Vec<LimitCell> {
        self.limits
            .iter()
            .map(|l| LimitCell {
                class: l.class.clone(),
                exchange: l.exchange.clone(),
            })
            .collect()
    }

    /// Reads every silo's demand, runs each allocator whose period has passed and publishes its
    /// rates. Returns when the next update is due.
    pub fn step(&mut self, now: Timestamp) -> Timestamp {
        for (cell, applied) in &mut self.cluster {
            let (share, epoch) = cell.share();
            if epoch == *applied {
                continue;
            }
            *applied = epoch;
            if let Some(l) = self.limits.iter_mut().find(|l| l.class == cell.class()) {
                l.closed = share == 0;
                if share > 0 {
                    l.nba.set_aggregate(Rate::from_bps(share));
                }
                l.publish(self.cores);
            }
        }
        let mut next = now.saturating_add(self.period);
        for l in &mut self.limits {
            for (k, &silo) in l.silos.iter().enumerate() {
                let (bytes, at) = l.exchange.read_demand(silo);
                if at > Timestamp::ZERO {
                    l.nba.record_demand(k, bytes, at);
                }
            }
            if l.nba.update(now).is_some() {
                l.publish(self.cores);
            }
            next = next.min(l.nba.next_update().max(now));
        }
        next
    }

    /// The rates in force for class `class`, one per silo that can carry it (every silo but in
    /// attach mode with bridges, see `class_silos`), in silo order (`None` if it has no limit).
    pub fn rates(&self, class: &str) -> Option<&[Rate]> {
        self.limits
            .iter()
            .find(|l| l.class == class)
            .map(|l| l.nba.rates())
    }
}

/// The rate silo `silo` takes from `exchange` when its epoch differs from `applied`, the epoch it
/// took last (which it then becomes). `None` when nothing new was published, or when a publish
/// overlapped the read: the silo looks again at its next iteration.
pub fn fresh_rate(exchange: &RateExchange, silo: usize, applied: &mut u64) -> Option<Rate> {
    let (rate, epoch) = exchange.try_read_rate(silo)?;
    if epoch == *applied {
        return None;
    }
    *applied = epoch;
    Some(rate)
}
