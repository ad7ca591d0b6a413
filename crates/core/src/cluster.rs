//! One limit shared by the daemons of a cluster: the per-host demand record each daemon publishes
//! and the shares every daemon computes from the same set of records (Carousel §2, §5.3).
//!
//! The NBA's water-filling ([`crate::nba`]) one level up, without a central allocator: every daemon
//! publishes a [`HostRecord`] per cluster class each period, and [`shares`] computes the same
//! shares from one store revision on every daemon (deterministic, summing to at most the limit).
//! Demand is estimated as the NBA does ([`crate::nba::estimate_demand`]), counting sent, queued and
//! refused bytes. Pure and clock-free (CONTRIBUTING.md §1).
//!
//! Where it departs from the NBA: refused bytes offered, a frame of slack, a lower cap threshold
//! and larger headroom, each record carrying its previous sample, one idle reserve for the whole
//! cluster, a join floor, a host's own newest record ([`own_share`]), weights
//! ([`water_fill_weighted`]). The reasons: `docs/design/carousel.md`.
//!
//! The records come from other hosts and are not trusted: a weight above [`MAX_WEIGHT`] is not
//! counted, at most [`ClusterConfig::max_hosts`] hosts are (the lowest host ids, the host's own
//! always), and a host's own share is never below [`least_share`], so no set of records can push
//! an honest host's share towards zero (docs/config.md "Cluster classes").

use crate::nba::DEFAULT_IDLE_FLOOR_FRACTION;
use crate::nba::{estimate_demand, measured_rate, water_fill_weighted, DemandEstimate};
use crate::rate::Rate;
use crate::time::Timestamp;

#[cfg(test)]
mod tests;

/// Fraction of the limit that the idle hosts keep together: 1 % (Carousel §5.3: "still reserves
/// 1% of the aggregate rate, to provide headroom for ramping up"; here for the cluster as a whole,
/// see the module docs).
pub const DEFAULT_IDLE_RESERVE_FRACTION: f64 = DEFAULT_IDLE_FLOOR_FRACTION;

/// Fraction of the limit a new host enforces until its first measured period: 1 % (the same
/// reserve Carousel §5.3 keeps for an idle core, which is what a new host is).
pub const DEFAULT_JOIN_FLOOR_FRACTION: f64 = 0.01;

/// Margin a satisfied host gets above its measured rate: 5 % (the NBA's is 2 %, see
/// [`DEFAULT_CLUSTER_CAP_THRESHOLD`]).
pub const DEFAULT_CLUSTER_HEADROOM: f64 = 0.05;

/// Fraction of its enforced share above which a host is at its cap: 0.97 (ours; the NBA's 0.99
/// is for cores fed at line rate: kernel TCP held back by a host's share sends 98–99 % of it
/// over a period, the pacing-gain cycles of BBR below 1 included, and 0.99 read such hosts
/// as satisfied, holding them below their fair share period after period; with 5 % headroom a
/// satisfied host sits at 1 / 1.05 = 0.952 of its share, below the threshold).
pub const DEFAULT_CLUSTER_CAP_THRESHOLD: f64 = 0.97;

/// Bytes a host may fall short of its cap in one period and still count as at its cap: two
/// full 1 514-byte frames (ours: a shaper sending exactly at its share can have a frame in
/// flight at each end of the period, which at a small share is more than the cap threshold's
/// 1 %: at 1 Mbit/s over 1 s one frame is 1.2 % of the period's bytes).
pub const DEFAULT_CAP_SLACK_BYTES: u64 = 2 * 1514;

/// Largest weight a host may have: 1 000 000 (ours: the bound of `[cluster] weight`, so that one
/// host outweighs another at most a millionfold). A record of a greater weight is not counted
/// ([`ShareCounters::overweight`]).
pub const MAX_WEIGHT: u32 = 1_000_000;

/// Most hosts counted per cluster class: 1 024 (ours: a cluster of a thousand daemons, the
/// largest `metronome lab cluster` runs, with margin). Each host's idle floor is at least the
/// idle reserve divided by this many hosts ([`least_share`]).
pub const DEFAULT_MAX_HOSTS: usize = 1024;

/// A rate given either as a fraction of the cluster limit or in bit/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Floor {
    /// This fraction of the limit, in [0, 1].
    FractionOfLimit(f64),
    /// This many bit/s (at most the limit).
    Bps(u64),
}

impl Floor {
    /// The floor's rate under `limit`, at most `limit`.
    pub fn rate(self, limit: Rate) -> Rate {
        let bps = match self {
            Floor::FractionOfLimit(f) => (limit.bps() as f64 * f) as u64,
            Floor::Bps(b) => b,
        };
        Rate::from_bps(bps.min(limit.bps()))
    }
}

/// How shares are computed. Every daemon of a cluster must use the same configuration (it is part
/// of the cluster's definition, like the limit), or their shares disagree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterConfig {
    /// What a host with no measured period asks for ([`DEFAULT_JOIN_FLOOR_FRACTION`]).
    pub join_floor: Floor,
    /// Fraction of the limit the idle hosts keep together ([`DEFAULT_IDLE_RESERVE_FRACTION`]).
    pub idle_reserve_fraction: f64,
    /// Margin a satisfied host gets above its measured rate ([`DEFAULT_CLUSTER_HEADROOM`]).
    pub headroom: f64,
    /// Fraction of its enforced share above which a host is at its cap
    /// ([`DEFAULT_CLUSTER_CAP_THRESHOLD`]); must lie in (1 / (1 + `headroom`), 1].
    pub cap_threshold: f64,
    /// Bytes a period's offered bytes may lack of the cap threshold and still be at the cap
    /// ([`DEFAULT_CAP_SLACK_BYTES`]).
    pub cap_slack_bytes: u64,
    /// Most hosts counted ([`DEFAULT_MAX_HOSTS`]): the lowest host ids; at least 1.
    pub max_hosts: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            join_floor: Floor::FractionOfLimit(DEFAULT_JOIN_FLOOR_FRACTION),
            idle_reserve_fraction: DEFAULT_IDLE_RESERVE_FRACTION,
            headroom: DEFAULT_CLUSTER_HEADROOM,
            cap_threshold: DEFAULT_CLUSTER_CAP_THRESHOLD,
            cap_slack_bytes: DEFAULT_CAP_SLACK_BYTES,
            max_hosts: DEFAULT_MAX_HOSTS,
        }
    }
}

impl ClusterConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ClusterConfigError> {
        if let Floor::FractionOfLimit(f) = self.join_floor {
            if !(0.0..=1.0).contains(&f) {
                return Err(ClusterConfigError::JoinFloor);
            }
        }
        if !(0.0..=1.0).contains(&self.idle_reserve_fraction) {
            return Err(ClusterConfigError::IdleReserve);
        }
        if !(self.headroom >= 0.0 && self.headroom.is_finite()) {
            return Err(ClusterConfigError::Headroom);
        }
        let satisfied = 1.0 / (1.0 + self.headroom);
        if !(self.cap_threshold > satisfied && self.cap_threshold <= 1.0) {
            return Err(ClusterConfigError::CapThreshold);
        }
        if self.max_hosts == 0 {
            return Err(ClusterConfigError::MaxHosts);
        }
        Ok(())
    }
}

/// Why a [`ClusterConfig`] is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ClusterConfigError {
    /// The join floor's fraction is not in [0, 1].
    #[error("the join floor's fraction of the limit must lie in [0, 1]")]
    JoinFloor,
    /// The idle reserve is not in [0, 1].
    #[error("the idle reserve fraction must lie in [0, 1]")]
    IdleReserve,
    /// `headroom` is negative or not finite.
    #[error("headroom must be a finite fraction >= 0")]
    Headroom,
    /// `cap_threshold` is not in (1 / (1 + headroom), 1].
    #[error("cap threshold must lie in (1/(1+headroom), 1]")]
    CapThreshold,
    /// `max_hosts` is 0.
    #[error("at least one host must be counted")]
    MaxHosts,
}

/// One usage sample of a cluster class on one host, on that host's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsageSample {
    /// When the counts were read (the host's own clock).
    pub at: Timestamp,
    /// Bytes of the class sent since the daemon started (cumulative).
    pub sent_bytes: u64,
    /// Bytes of the class queued in the shaper at `at`.
    pub backlog_bytes: u64,
    /// Bytes of the class that arrived and were refused before queueing (dropped for its queue
    /// bounds or its horizon: held back by its share), cumulative.
    pub refused_bytes: u64,
}

impl UsageSample {
    /// Bytes offered so far: everything that arrived, sent, queued or refused.
    pub fn offered_bytes(&self) -> u64 {
        self.sent_bytes
            .saturating_add(self.backlog_bytes)
            .saturating_add(self.refused_bytes)
    }
}

/// What one host publishes for one cluster class each period. `H` is the host id (the store's
/// key suffix; any type with a total order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRecord<H> {
    /// The publishing host.
    pub host: H,
    /// Its weight (0 counts as 1 and is counted in [`ShareCounters::zero_weights`]; above
    /// [`MAX_WEIGHT`] the record is not counted).
    pub weight: u32,
    /// The sample taken at this publish.
    pub sample: UsageSample,
    /// The sample of the previous publish (the start of the measured period); `None` before the
    /// host has measured a period.
    pub previous: Option<UsageSample>,
    /// The share the host enforced between `previous` and `sample`, bit/s.
    pub enforced_bps: u64,
}

/// How a host's demand was read from its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostDemand {
    /// No measured period: asks for the join floor.
    Joining,
    /// The record's samples go backwards or carry no time (a restarted daemon): treated as
    /// joining.
    Unmeasurable,
    /// Sent nothing: the idle floor.
    Idle,
    /// At its cap: unbounded.
    Capped,
    /// Below its cap: measured plus headroom.
    Satisfied,
}

/// One host's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostShare<H> {
    /// The host.
    pub host: H,
    /// Its weight (at least 1).
    pub weight: u32,
    /// Its share of the limit, bit/s.
    pub share_bps: u64,
    /// The demand water-filling used for it, bit/s (the limit when capped).
    pub demand_bps: u64,
    /// How that demand was read.
    pub demand: HostDemand,
}

/// Named counts of one computation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareCounters {
    /// Records dropped because another record of the same host was kept (the one with the
    /// greatest sample; a store holds one per host, so this means a caller's mistake).
    pub duplicate_hosts: u64,
    /// Records whose weight 0 was taken as 1.
    pub zero_weights: u64,
    /// Records whose samples go backwards or carry no time, treated as joining.
    pub unmeasurable: u64,
    /// Records not counted for a weight above [`MAX_WEIGHT`].
    pub overweight: u64,
    /// Hosts not counted for being beyond [`ClusterConfig::max_hosts`] (the greatest host ids).
    pub beyond_max_hosts: u64,
}

/// The shares of one revision, sorted by host id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shares<H> {
    /// One entry per distinct host, in host-id order; the shares sum to the limit (or to zero
    /// when there is no host).
    pub hosts: Vec<HostShare<H>>,
    /// What was counted.
    pub counters: ShareCounters,
}

impl<H: Ord> Shares<H> {
    /// The share of `host`, if it is in the revision.
    pub fn share_of(&self, host: &H) -> Option<u64> {
        self.hosts
            .binary_search_by(|h| h.host.cmp(host))
            .ok()
            .map(|i| self.hosts[i].share_bps)
    }
}

/// Each host's share of `limit`, computed from the records of one revision: demand estimation as
/// in the module docs, then weighted max-min water-filling with the idle floor. Records of a
/// weight above [`MAX_WEIGHT`] are left out, and of the hosts left only the `cfg.max_hosts`
/// lowest host ids are counted. The result does not depend on the order of `records` (they are
/// sorted by host id, then by sample, first), so every daemon computing from the same revision
/// gets the same shares.
pub fn shares<H: Ord + Clone>(
    limit: Rate,
    cfg: &ClusterConfig,
    records: &[HostRecord<H>],
) -> Shares<H> {
    let mut counters = ShareCounters::default();
    let mut order: Vec<&HostRecord<H>> =
        records.iter().filter(|r| r.weight <= MAX_WEIGHT).collect();
    counters.overweight = (records.len() - order.len()) as u64;
    // By host, the greatest sample first, so that the record kept for a duplicated host is the
    // same whatever the input order.
    order.sort_by(|a, b| {
        a.host
            .cmp(&b.host)
            .then_with(|| record_key(b).cmp(&record_key(a)))
    });
    let before = order.len();
    order.dedup_by(|later, kept| later.host == kept.host);
    counters.duplicate_hosts = (before - order.len()) as u64;
    let counted = order.len().min(cfg.max_hosts.max(1));
    counters.beyond_max_hosts = (order.len() - counted) as u64;
    order.truncate(counted);

    let n = order.len() as u64;
    let join = cfg.join_floor.rate(limit);
    let idle_floor = match n {
        0 => 0,
        n => (limit.bps() as f64 * cfg.idle_reserve_fraction) as u64 / n,
    };
    let mut demands = Vec::with_capacity(order.len());
    let mut kinds = Vec::with_capacity(order.len());
    let mut weights = Vec::with_capacity(order.len());
    for r in &order {
        if r.weight == 0 {
            counters.zero_weights += 1;
        }
        weights.push(r.weight.max(1));
        let (kind, demand) = host_demand(limit, cfg, join, r);
        if kind == HostDemand::Unmeasurable {
            counters.unmeasurable += 1;
        }
        kinds.push(kind);
        demands.push(demand);
    }
    let mut out = vec![Rate::from_bps(0); order.len()];
    water_fill_weighted(
        limit,
        &demands,
        &weights,
        Rate::from_bps(idle_floor),
        &mut out,
    );
    let hosts = order
        .iter()
        .zip(out.iter().zip(demands.iter().zip(kinds)))
        .map(|(r, (share, (demand, kind)))| HostShare {
            host: r.host.clone(),
            weight: r.weight.max(1),
            share_bps: share.bps(),
            demand_bps: demand.bps(),
            demand: kind,
        })
        .collect();
    Shares { hosts, counters }
}

/// The share host `own.host` enforces after computing from `records` (one revision) while its own
/// newest record, `own`, may not be in that revision yet: the smaller of its share in the
/// revision and its share in the same revision with `own` in place of its older record, and never
/// below [`least_share`]. `None` when the revision holds no record of the host (a new host keeps
/// its join floor until it does).
///
/// The host counts itself and, of the other hosts whose weight is at most [`MAX_WEIGHT`], the
/// `cfg.max_hosts - 1` lowest host ids; a host among the `max_hosts` lowest ids counts the same
/// hosts as the others of them. Hosts computing from the same revision with equal weights
/// enforce shares that sum to at most the limit: the least share is then below every share (it
/// is the idle floor of `max_hosts` hosts, and each share is at least the idle floor of the
/// hosts counted). With unequal weights a light host may be raised to the least share, and the
/// sum is at most the limit plus the idle reserve. The second computation only lowers a share,
/// when the host's demand fell since the revision (a host that went idle does not hold the share
/// of a busy one for a period). A host whose demand rose waits for its record to reach the
/// revision, as the others do.
pub fn own_share<H: Ord + Clone>(
    limit: Rate,
    cfg: &ClusterConfig,
    records: &[HostRecord<H>],
    own: &HostRecord<H>,
) -> Option<u64> {
    let mut peers: Vec<&HostRecord<H>> = records
        .iter()
        .filter(|r| r.host != own.host && r.weight <= MAX_WEIGHT)
        .collect();
    peers.sort_by(|a, b| a.host.cmp(&b.host));
    // The first `max_hosts - 1` distinct peer hosts, with every record of each.
    let mut distinct = 0;
    let mut kept = 0;
    for (i, r) in peers.iter().enumerate() {
        if i == 0 || peers[i - 1].host != r.host {
            distinct += 1;
        }
        if distinct > cfg.max_hosts.max(1) - 1 {
            break;
        }
        kept = i + 1;
    }
    peers.truncate(kept);
    let mut counted: Vec<HostRecord<H>> = peers.into_iter().cloned().collect();
    counted.extend(records.iter().filter(|r| r.host == own.host).cloned());
    let in_revision = shares(limit, cfg, &counted).share_of(&own.host)?;
    counted.retain(|r| r.host != own.host);
    counted.push(own.clone());
    let with_own = shares(limit, cfg, &counted).share_of(&own.host)?;
    Some(in_revision.min(with_own).max(least_share(limit, cfg)))
}

/// The least share a host enforces once it has one, bit/s: the idle floor of a cluster of
/// `cfg.max_hosts` hosts (the idle reserve of `limit` divided by `max_hosts`), which no record of
/// another host can lower.
pub fn least_share(limit: Rate, cfg: &ClusterConfig) -> u64 {
    (limit.bps() as f64 * cfg.idle_reserve_fraction) as u64 / cfg.max_hosts.max(1) as u64
}

/// A total order on a record's contents, so that the choice between duplicates is deterministic.
fn record_key<H>(r: &HostRecord<H>) -> (UsageSample, Option<UsageSample>, u64, u32) {
    (r.sample, r.previous, r.enforced_bps, r.weight)
}

/// How host `r`'s demand reads, and the demand (before the idle floor).
fn host_demand<H>(
    limit: Rate,
    cfg: &ClusterConfig,
    join: Rate,
    r: &HostRecord<H>,
) -> (HostDemand, Rate) {
    let Some(prev) = r.previous else {
        return (HostDemand::Joining, join);
    };
    let (base, latest) = (prev.offered_bytes(), r.sample.offered_bytes());
    let backwards = r.sample.sent_bytes < prev.sent_bytes || r.sample.at < prev.at;
    let measured = match measured_rate(base, prev.at, latest, r.sample.at) {
        Some(m) if !backwards => m,
        _ => return (HostDemand::Unmeasurable, join),
    };
    // The slack, as a rate over this period: at its cap within a frame or two.
    let period_ns = r.sample.at.saturating_since(prev.at).as_nanos().max(1);
    let slack_bps = (u128::from(cfg.cap_slack_bytes) * 8 * 1_000_000_000 / u128::from(period_ns))
        .min(u128::from(u64::MAX)) as u64;
    let estimate = estimate_demand(
        measured,
        Rate::from_bps(r.enforced_bps),
        limit,
        cfg.headroom,
        cfg.cap_threshold,
        Rate::from_bps(slack_bps),
    );
    let kind = match estimate {
        DemandEstimate::Idle => HostDemand::Idle,
        DemandEstimate::Capped => HostDemand::Capped,
        DemandEstimate::Satisfied(_) => HostDemand::Satisfied,
    };
    (kind, estimate.demand(limit))
}
