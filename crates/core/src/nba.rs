//! The NIC-level bandwidth allocator (NBA): one aggregate rate limit shared by per-core shapers
//! (Carousel §5.3, component 1), redistributed every period ([`DEFAULT_PERIOD`], "≈ 100 ms") by
//! water-filling over the cores' demands ([`Nba::record_demand`]), with a floor of the aggregate
//! for idle cores ([`NbaConfig::idle_floor_fraction`], the paper's 1 %).
//!
//! The paper leaves the demand estimate open: here a core below [`NbaConfig::cap_threshold`] of its
//! rate asks for its measured rate plus [`NbaConfig::headroom`], a core at its cap is taken as
//! unbounded, and a core without a new sample keeps its estimate ([`NbaCounters::stale_cores`]).
//!
//! Where it departs from the paper: rates in bit/s ([`Rate`]), and the rates always sum to exactly
//! the aggregate ([`water_fill`]). Pure and clock-free; nothing allocates after [`Nba::new`]. The
//! estimate, its margin and the reasons: `docs/design/carousel.md`.

use crate::rate::Rate;
use crate::time::{Duration, Timestamp, NANOS_PER_SEC};

#[cfg(test)]
mod tests;

/// Update period: 100 ms (Carousel §5.3: "we currently use ≈ 100 ms").
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);

/// Share of the aggregate kept for each core with no demand: 1 % (Carousel §5.3: "still reserves
/// 1% of the aggregate rate, to provide headroom for ramping up").
pub const DEFAULT_IDLE_FLOOR_FRACTION: f64 = 0.01;

/// Margin a satisfied core asks for above its measured rate: 2 % (ours; it keeps a satisfied core
/// measurably below its cap, see the module docs, and costs at most 2 % of the satisfied cores'
/// demand when the aggregate is exactly used).
pub const DEFAULT_HEADROOM: f64 = 0.02;

/// A core that used at least this fraction of its rate is at its cap: 0.99 (ours; between
/// 1 / (1 + [`DEFAULT_HEADROOM`]) = 0.980, where a satisfied core sits, and 1, leaving 1 % for
/// measurement noise such as one 1500-byte packet in a 100 ms period at 12 Mbit/s).
pub const DEFAULT_CAP_THRESHOLD: f64 = 0.99;

/// The allocator's configuration. Build it with [`NbaConfig::new`] and change fields as needed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NbaConfig {
    /// The limit spanning cores. Zero shares out zero to every core (each core's policy is then
    /// paused, see [`Rate`]); a later [`Nba::set_aggregate`] above zero splits it equally at once.
    pub aggregate: Rate,
    /// Cores sharing it.
    pub cores: usize,
    /// Time between updates ([`DEFAULT_PERIOD`]).
    pub period: Duration,
    /// Each core with no demand keeps this fraction of the aggregate
    /// ([`DEFAULT_IDLE_FLOOR_FRACTION`]); at most 1 / `cores`.
    pub idle_floor_fraction: f64,
    /// Margin a satisfied core gets above its measured rate ([`DEFAULT_HEADROOM`]).
    pub headroom: f64,
    /// Fraction of its rate above which a core is treated as wanting more
    /// ([`DEFAULT_CAP_THRESHOLD`]); must lie in (1 / (1 + `headroom`), 1].
    pub cap_threshold: f64,
}

impl NbaConfig {
    /// `aggregate` shared by `cores` with the defaults above.
    pub fn new(aggregate: Rate, cores: usize) -> Self {
        NbaConfig {
            aggregate,
            cores,
            period: DEFAULT_PERIOD,
            idle_floor_fraction: DEFAULT_IDLE_FLOOR_FRACTION,
            headroom: DEFAULT_HEADROOM,
            cap_threshold: DEFAULT_CAP_THRESHOLD,
        }
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), NbaConfigError> {
        if self.cores == 0 {
            return Err(NbaConfigError::NoCores);
        }
        if self.period == Duration::ZERO {
            return Err(NbaConfigError::ZeroPeriod);
        }
        let floor_ok =
            self.idle_floor_fraction >= 0.0 && self.idle_floor_fraction * self.cores as f64 <= 1.0;
        if !floor_ok {
            return Err(NbaConfigError::IdleFloor);
        }
        if !(self.headroom >= 0.0 && self.headroom.is_finite()) {
            return Err(NbaConfigError::Headroom);
        }
        let satisfied = 1.0 / (1.0 + self.headroom);
        if !(self.cap_threshold > satisfied && self.cap_threshold <= 1.0) {
            return Err(NbaConfigError::CapThreshold);
        }
        Ok(())
    }
}

/// Why an [`NbaConfig`] is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NbaConfigError {
    /// `cores` is zero.
    #[error("the allocator needs at least one core")]
    NoCores,
    /// `period` is zero.
    #[error("the update period must be positive")]
    ZeroPeriod,
    /// `idle_floor_fraction` is negative, NaN, or above 1 / `cores`.
    #[error("idle floor fraction must lie in [0, 1/cores]")]
    IdleFloor,
    /// `headroom` is negative or not finite.
    #[error("headroom must be a finite fraction >= 0")]
    Headroom,
    /// `cap_threshold` is not in (1 / (1 + headroom), 1].
    #[error("cap threshold must lie in (1/(1+headroom), 1]")]
    CapThreshold,
}

/// Named counters of an [`Nba`]. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NbaCounters {
    /// Updates that recomputed the rates.
    pub updates: u64,
    /// Core-periods in which the core was at its cap (demand taken as unbounded).
    pub capped_cores: u64,
    /// Core-periods in which the core had no demand and got the idle floor.
    pub floored_cores: u64,
    /// Core-periods without a new sample (previous demand kept).
    pub stale_cores: u64,
    /// Samples whose byte count or timestamp went backwards (measurement restarted from them).
    pub regressed_samples: u64,
    /// Samples ignored because their core index is out of range.
    pub unknown_core_samples: u64,
}

/// One (byte count, timestamp) usage sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sample {
    bytes: u64,
    at: Timestamp,
}

/// The allocator: per-core demand in, per-core rates out, every [`NbaConfig::period`].
///
/// Layout: one `Vec` per per-core field, all sized once in [`Nba::new`]; `rates` is what
/// [`Nba::rates`] hands out.
#[derive(Clone, Debug)]
pub struct Nba {
    cfg: NbaConfig,
    floor: Rate,
    /// Sample in force at the previous update (start of the measured period).
    base: Vec<Sample>,
    /// Latest sample recorded.
    latest: Vec<Sample>,
    /// Measured rate of the last period.
    measured: Vec<Rate>,
    /// Demand estimate fed to water-filling.
    demand: Vec<Rate>,
    /// Rates in force.
    rates: Vec<Rate>,
    /// Whether the first update (which only takes the baseline) has happened.
    started: bool,
    next_update: Timestamp,
    epoch: u64,
    counters: NbaCounters,
}

impl Nba {
    /// An allocator whose rates start as an equal split of the aggregate.
    pub fn new(cfg: NbaConfig) -> Result<Nba, NbaConfigError> {
        cfg.validate()?;
        let n = cfg.cores;
        let mut nba = Nba {
            cfg,
            floor: Rate::from_bps(0),
            base: vec![Sample::default(); n],
            latest: vec![Sample::default(); n],
            measured: vec![Rate::from_bps(0); n],
            demand: vec![Rate::from_bps(0); n],
            rates: vec![Rate::from_bps(0); n],
            started: false,
            next_update: Timestamp::ZERO,
            epoch: 0,
            counters: NbaCounters::default(),
        };
        nba.set_aggregate(cfg.aggregate);
        Ok(nba)
    }

    /// Changes the aggregate (a configuration reload); the rates are rescaled to it at once, in
    /// proportion to the current ones (equally when they are all zero, as after a zero
    /// aggregate), and the next update recomputes them. A zero aggregate gives every core a zero
    /// rate.
    pub fn set_aggregate(&mut self, aggregate: Rate) {
        let old_total: u128 = self.rates.iter().map(|r| r.bps() as u128).sum();
        self.cfg.aggregate = aggregate;
        let floor = (aggregate.bps() as f64 * self.cfg.idle_floor_fraction) as u64;
        self.floor = Rate::from_bps(floor.min(aggregate.bps() / self.cfg.cores as u64));
        // Reuse `demand` as the weights of the split (equal when nothing was allocated yet).
        for (d, r) in self.demand.iter_mut().zip(&self.rates) {
            *d = if old_total == 0 { aggregate } else { *r };
        }
        split_proportionally(aggregate, &self.demand, &mut self.rates);
        self.debug_invariants();
    }

    /// Core `core`'s cumulative transmitted+queued bytes at `now` (a (byte count, timestamp)
    /// pair, Carousel §5.3). A sample whose count or time goes backwards (a silo restarted with a
    /// fresh counter) starts the core's measurement afresh from it: the core keeps its previous
    /// demand until a full period has been measured. Samples for a core out of range are ignored.
    /// Both are counted.
    pub fn record_demand(&mut self, core: usize, cumulative_bytes: u64, now: Timestamp) {
        if core >= self.cfg.cores {
            self.counters.unknown_core_samples += 1;
            return;
        }
        let sample = Sample {
            bytes: cumulative_bytes,
            at: now,
        };
        let latest = self.latest[core];
        if cumulative_bytes < latest.bytes || now < latest.at {
            self.counters.regressed_samples += 1;
            self.base[core] = sample;
        }
        self.latest[core] = sample;
    }

    /// If a period has elapsed since the last update, recomputes the per-core rates by
    /// water-filling over the demand estimates (see the module docs) and returns them.
    ///
    /// The first call only takes the baseline samples (there is no period to measure yet) and
    /// returns `None`; from then on an update happens at most once per period.
    pub fn update(&mut self, now: Timestamp) -> Option<&[Rate]> {
        if !self.started {
            self.started = true;
            self.base.copy_from_slice(&self.latest);
            self.next_update = now.saturating_add(self.cfg.period);
            return None;
        }
        if now < self.next_update {
            return None;
        }
        for core in 0..self.cfg.cores {
            self.estimate(core);
        }
        self.base.copy_from_slice(&self.latest);
        water_fill(
            self.cfg.aggregate,
            &self.demand,
            self.floor,
            &mut self.rates,
        );
        // The next update is one period after this one (not after the missed deadline), so a late
        // call does not cause a burst of catch-up updates.
        self.next_update = now.saturating_add(self.cfg.period);
        self.epoch += 1;
        self.counters.updates += 1;
        self.debug_invariants();
        Some(&self.rates)
    }

    /// Measures core `core` over the period and sets its demand estimate.
    fn estimate(&mut self, core: usize) {
        let (base, latest) = (self.base[core], self.latest[core]);
        let Some(measured) = measured_rate(base.bytes, base.at, latest.bytes, latest.at) else {
            self.counters.stale_cores += 1;
            return;
        };
        self.measured[core] = measured;
        let estimate = estimate_demand(
            measured,
            self.rates[core],
            self.cfg.aggregate,
            self.cfg.headroom,
            self.cfg.cap_threshold,
            Rate::from_bps(0),
        );
        match estimate {
            DemandEstimate::Idle => self.counters.floored_cores += 1,
            DemandEstimate::Capped => self.counters.capped_cores += 1,
            DemandEstimate::Satisfied(_) => {}
        }
        self.demand[core] = estimate.demand(self.cfg.aggregate);
    }

    /// The rates in force, one per core, summing to the aggregate. A core's rate can be zero only
    /// when the aggregate is, or when its floor (`aggregate` × [`NbaConfig::idle_floor_fraction`],
    /// at most `aggregate / cores`, in whole bit/s) is zero and the core shows no demand while the
    /// others take the whole aggregate; a core at zero sends nothing, so it shows no demand until
    /// the others leave room.
    pub fn rates(&self) -> &[Rate] {
        &self.rates
    }

    /// When [`Nba::update`] will next recompute the rates (the loop's sleep-until);
    /// [`Timestamp::ZERO`] before the first call.
    pub fn next_update(&self) -> Timestamp {
        self.next_update
    }

    /// Updates done so far (the epoch to publish with the rates).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The measured rates of the last period, one per core.
    pub fn measured(&self) -> &[Rate] {
        &self.measured
    }

    /// The demand estimates of the last update, one per core.
    pub fn demands(&self) -> &[Rate] {
        &self.demand
    }

    /// The configuration in force.
    pub fn config(&self) -> &NbaConfig {
        &self.cfg
    }

    /// The named counters.
    pub fn counters(&self) -> NbaCounters {
        self.counters
    }

    /// Checks the allocator's invariants; panics on violation.
    pub fn invariants(&self) {
        let n = self.cfg.cores;
        assert!(self.base.len() == n && self.latest.len() == n && self.rates.len() == n);
        let total: u128 = self.rates.iter().map(|r| r.bps() as u128).sum();
        assert_eq!(
            total,
            self.cfg.aggregate.bps() as u128,
            "rates sum to the aggregate"
        );
        for (b, l) in self.base.iter().zip(&self.latest) {
            assert!(
                b.bytes <= l.bytes && b.at <= l.at,
                "samples never go backwards"
            );
        }
    }

    #[inline]
    fn debug_invariants(&self) {
        #[cfg(debug_assertions)]
        self.invariants();
    }
}

/// The rate measured between two (byte count, timestamp) samples of one sender: the count's
/// growth over the samples' own time difference (not the update times, so a late publish does
/// not distort the rate), in whole bit/s; `None` when no time passed between them (no new
/// sample). A count that went backwards measures zero.
pub fn measured_rate(
    base_bytes: u64,
    base_at: Timestamp,
    latest_bytes: u64,
    latest_at: Timestamp,
) -> Option<Rate> {
    let dt = latest_at.saturating_since(base_at).as_nanos();
    if dt == 0 {
        return None;
    }
    let bits = latest_bytes.saturating_sub(base_bytes) as u128 * 8;
    let bps = (bits * NANOS_PER_SEC as u128 / dt as u128).min(u64::MAX as u128) as u64;
    Some(Rate::from_bps(bps))
}

/// What a sender's measured rate says about its demand (the module docs: at its cap, below it,
/// or idle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemandEstimate {
    /// It sent nothing: no demand (it keeps the idle floor).
    Idle,
    /// It used at least the cap threshold of its rate: it may want more, its demand is unbounded.
    Capped,
    /// It stayed below its cap: its demand is the measured rate plus the headroom.
    Satisfied(Rate),
}

impl DemandEstimate {
    /// The demand fed to water-filling: zero, the whole `aggregate`, or the satisfied demand.
    pub fn demand(self, aggregate: Rate) -> Rate {
        match self {
            DemandEstimate::Idle => Rate::from_bps(0),
            DemandEstimate::Capped => aggregate,
            DemandEstimate::Satisfied(d) => d,
        }
    }
}

/// Classifies a sender that measured `measured` while its rate was `cap`: idle when it sent
/// nothing, [`DemandEstimate::Capped`] when `measured + slack >= cap_threshold × cap`,
/// otherwise satisfied with a demand of `measured × (1 + headroom)`, at most `aggregate`. The
/// NBA's cores take no slack; a cluster's hosts take a frame or two of it
/// ([`crate::cluster::ClusterConfig::cap_slack_bytes`]).
pub fn estimate_demand(
    measured: Rate,
    cap: Rate,
    aggregate: Rate,
    headroom: f64,
    cap_threshold: f64,
    slack: Rate,
) -> DemandEstimate {
    let bps = measured.bps();
    if bps == 0 {
        DemandEstimate::Idle
    } else if bps.saturating_add(slack.bps()) as f64 >= cap_threshold * cap.bps() as f64 {
        DemandEstimate::Capped
    } else {
        let demand = ((bps as f64 * (1.0 + headroom)) as u64).min(aggregate.bps());
        DemandEstimate::Satisfied(Rate::from_bps(demand))
    }
}

/// Shares `total` among `demands` max-min fairly and writes the shares into `out`; the shares
/// always sum to exactly `total` (work conservation).
///
/// Every entry first counts as demanding at least `floor` (lowered to `total / n` when `n` floors
/// do not fit). If the demands reach `total`, the water level `L` is the largest with
/// `sum(min(demand, L)) <= total`, entry `i` gets `min(demand_i, L)`, and the few bit/s of
/// rounding go one each to the first entries above the level. Otherwise every entry gets its
/// demand plus an equal share of what is left. Integer arithmetic throughout, no allocation:
/// a binary search over the level, O(n log total). This is [`water_fill_weighted`] with every
/// weight 1.
///
/// # Panics
/// If `out` and `demands` differ in length.
pub fn water_fill(total: Rate, demands: &[Rate], floor: Rate, out: &mut [Rate]) {
    fill(total, demands, |_| 1, floor, out);
}

/// Weighted max-min water-filling: as [`water_fill`], but entry `i` fills at `weights[i]` times
/// the level (`min(demand_i, weights[i] × L)`) and what is left when the demands do not reach
/// `total` is split in proportion to the weights (rounded down, the remaining bit/s one each to
/// the first entries); the rounding above the level goes to the first entries above it, at most
/// `weights[i]` bit/s each. A weight of 0 counts as 1. With equal weights of 1 the shares are
/// exactly those of [`water_fill`]. Integer arithmetic only, so the result depends on the order
/// of the entries only through who receives the rounding bit/s.
///
/// # Panics
/// If `out`, `demands` and `weights` differ in length.
pub fn water_fill_weighted(
    total: Rate,
    demands: &[Rate],
    weights: &[u32],
    floor: Rate,
    out: &mut [Rate],
) {
    assert_eq!(weights.len(), demands.len(), "one weight per demand");
    fill(total, demands, |i| u64::from(weights[i].max(1)), floor, out);
}

/// The water-filling of [`water_fill_weighted`] with the weight of entry `i` given by `weight`.
fn fill(
    total: Rate,
    demands: &[Rate],
    weight: impl Fn(usize) -> u64,
    floor: Rate,
    out: &mut [Rate],
) {
    assert_eq!(demands.len(), out.len(), "one share per demand");
    let n = demands.len() as u64;
    if n == 0 {
        return;
    }
    let total = total.bps();
    let floor = floor.bps().min(total / n);
    let want = |i: usize| demands[i].bps().max(floor);
    let cap = |i: usize, level: u64| (want(i) as u128).min(weight(i) as u128 * level as u128);
    let filled = |level: u64| -> u128 { (0..demands.len()).map(|i| cap(i, level)).sum() };
    let sum_want: u128 = (0..demands.len()).map(|i| want(i) as u128).sum();
    if sum_want <= total as u128 {
        let left = (total as u128 - sum_want) as u64;
        let sum_weights: u128 = (0..demands.len()).map(|i| weight(i) as u128).sum();
        let share = |i: usize| (left as u128 * weight(i) as u128 / sum_weights) as u64;
        let given: u64 = (0..demands.len()).map(share).sum();
        let extra = left - given; // < n
        for (i, o) in out.iter_mut().enumerate() {
            *o = Rate::from_bps(want(i) + share(i) + u64::from((i as u64) < extra));
        }
        return;
    }
    // Largest level with filled(level) <= total: filled(0) = 0 and filled(total) >= total.
    let (mut lo, mut hi) = (0u64, total);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if filled(mid) <= total as u128 {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    // Below what one more level step would add to the entries above the level.
    let mut rest = total - filled(lo) as u64;
    for (i, o) in out.iter_mut().enumerate() {
        let at_level = cap(i, lo) as u64;
        let step = (cap(i, lo.saturating_add(1)) as u64 - at_level).min(rest);
        rest -= step;
        *o = Rate::from_bps(at_level + step);
    }
}

/// Splits `total` in proportion to `weights` (equal split if they are all zero); shares sum to
/// exactly `total`.
fn split_proportionally(total: Rate, weights: &[Rate], out: &mut [Rate]) {
    let n = weights.len() as u128;
    let sum: u128 = weights.iter().map(|w| w.bps() as u128).sum();
    let t = total.bps() as u128;
    let mut given = 0u128;
    for (i, (o, w)) in out.iter_mut().zip(weights).enumerate() {
        let share = (t * w.bps() as u128).checked_div(sum).unwrap_or(t / n);
        let share = if i + 1 == weights.len() {
            t - given
        } else {
            share
        };
        given += share;
        *o = Rate::from_bps(share as u64);
    }
}
