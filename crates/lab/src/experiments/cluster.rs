//! `cluster`: one tenant limit shared by the daemons of a cluster through a store like etcd, each
//! daemon computing its own share from the published demand records of one revision
//! ([`metronome_core::cluster`]; Carousel §2, §5.3, which give no figure for it): periods to
//! settle after a change, the store's writes per second, and the overshoot while hosts disagree,
//! at 3 to 1 000 hosts.
//!
//! Deterministic, on the simulator's event queue ([`TimedQueue`]) with a seeded [`Rng`] per host:
//! fluid hosts with weights, each publishing every `period_ms` and enforcing [`own_share`], a store
//! with commit and watch latencies and leases; scenarios `start`, `shift`, `leave` and `join`,
//! settled against the weighted max-min shares ([`water_fill_weighted`]). The model in full:
//! `docs/design/carousel.md`.

use metronome_core::cluster::{own_share, ClusterConfig, Floor, HostRecord, UsageSample};
use metronome_core::{water_fill_weighted, Rate, Timestamp};
use metronome_sim::event::TimedQueue;
use metronome_sim::host::Rng;

use super::rows::round;
use crate::error::LabError;
use crate::point::{Point, Row};

#[cfg(test)]
mod tests;

/// The experiment's registered name.
pub const NAME: &str = "cluster";

/// Nanoseconds per microsecond and per millisecond.
const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// Samples of the shares per period.
const SAMPLES_PER_PERIOD: u64 = 10;

/// Where the change falls within a period, in thousandths: 0.37 of a period (off the grid).
const CHANGE_OFFSET_PERMILLE: u64 = 370;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Start,
    Shift,
    Leave,
    Join,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Start => "start",
            Scenario::Shift => "shift",
            Scenario::Leave => "leave",
            Scenario::Join => "join",
        }
    }
}

/// The parameters of one run, read from a [`Point`].
#[derive(Clone, Debug, PartialEq)]
struct Params {
    scenario: Scenario,
    hosts: usize,
    weights: Vec<u32>,
    weights_text: String,
    limit_bps: u64,
    period_ns: u64,
    lease_ns: u64,
    commit_ns: u64,
    watch_ns: u64,
    tail_pct: f64,
    tail_factor: u64,
    busy_factor: u64,
    queue_ns: u64,
    join_floor_pct: f64,
    warmup_periods: u64,
    after_periods: u64,
    sum_pct: f64,
    fair_pct: f64,
    hold_pct: f64,
    seed: u64,
}

impl Params {
    fn read(p: &Point) -> Result<Self, LabError> {
        let scenario = match p.str("scenario")? {
            "start" => Scenario::Start,
            "shift" => Scenario::Shift,
            "leave" => Scenario::Leave,
            "join" => Scenario::Join,
            other => {
                return Err(LabError::param(
                    p.index,
                    "scenario",
                    format!("unknown scenario {other:?}; known: start, shift, leave, join"),
                ))
            }
        };
        let weights_text = p.str("weights")?.to_string();
        let weights = weights_text
            .split(',')
            .map(|w| w.trim().parse::<u32>().ok().filter(|w| *w > 0))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                LabError::param(p.index, "weights", "a comma-separated list of weights >= 1")
            })?;
        let join_floor_pct = p.f64("join_floor_pct")?;
        if !(0.0..=100.0).contains(&join_floor_pct) {
            return Err(LabError::param(
                p.index,
                "join_floor_pct",
                "must lie in [0, 100]",
            ));
        }
        let hosts = p.u64_in("hosts", 2, 100_000)? as usize;
        let params = Params {
            scenario,
            hosts,
            weights,
            weights_text,
            limit_bps: p.positive("limit_bps")?,
            period_ns: p.positive("period_ms")? * MS,
            lease_ns: p.u64_in("lease_ms", 3, 3_600_000)? * MS,
            commit_ns: p.u64("commit_us")? * US,
            watch_ns: p.u64("watch_us")? * US,
            tail_pct: p.f64("tail_pct")?.clamp(0.0, 100.0),
            tail_factor: p.positive("tail_factor")?,
            busy_factor: p.positive("busy_factor")?,
            queue_ns: p.positive("queue_ms")? * MS,
            join_floor_pct,
            warmup_periods: p.u64("warmup_periods")?,
            after_periods: p.positive("after_periods")?,
            sum_pct: p.f64("sum_pct")?,
            fair_pct: p.f64("fair_pct")?,
            hold_pct: p.f64("hold_pct")?,
            seed: p.u64("seed")?,
        };
        if params.scenario != Scenario::Start && params.warmup_periods < 2 {
            return Err(LabError::param(
                p.index,
                "warmup_periods",
                "must be at least 2 for shift, leave and join (the shares settle first)",
            ));
        }
        Ok(params)
    }

    fn weight(&self, h: usize) -> u32 {
        self.weights[h % self.weights.len()]
    }

    fn change_at(&self) -> u64 {
        match self.scenario {
            Scenario::Start => 0,
            _ => {
                self.warmup_periods * self.period_ns
                    + self.period_ns * CHANGE_OFFSET_PERMILLE / 1000
            }
        }
    }

    fn end(&self) -> u64 {
        self.change_at() + self.after_periods * self.period_ns
    }

    fn cluster_config(&self) -> ClusterConfig {
        ClusterConfig {
            join_floor: Floor::FractionOfLimit(self.join_floor_pct / 100.0),
            ..ClusterConfig::default()
        }
    }

    /// A commit or watch latency with median `median_ns`: see the module docs.
    fn latency(&self, rng: &mut Rng, median_ns: u64) -> u64 {
        let base = median_ns / 2 + rng.below(median_ns.max(1));
        let tail = rng.below(1_000_000) < (self.tail_pct * 10_000.0) as u64;
        if tail {
            base * self.tail_factor
        } else {
            base
        }
    }
}

/// What happens at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    /// A host joins (takes its baseline, gets its lease).
    Join(u32),
    /// A host's period: publish, then compute.
    Tick(u32),
    /// A host sends a keep-alive.
    KeepAlive(u32),
    /// A keep-alive takes effect.
    KeepAliveLanded(u32),
    /// A publish (index into the record log) takes effect: a revision.
    Commit(u32),
    /// A host's lease may have expired.
    Expire(u32),
    /// The scenario's change.
    Change,
    /// The shares are sampled.
    Sample,
}

/// One simulated host.
struct Host {
    joined: bool,
    alive: bool,
    weight: u32,
    rng: Rng,
    offered_bps: u64,
    share_bps: u64,
    /// Fluid state: bytes sent (cumulative) and queued, as of `last_ns`.
    sent: f64,
    backlog: f64,
    last_ns: u64,
    previous: Option<UsageSample>,
    lease_expiry_ns: u64,
    /// Watch: the last revision received, when, and when the next one arrives (once drawn).
    seen_rev: usize,
    seen_at: u64,
    next_delivery: Option<u64>,
}

impl Host {
    /// Moves the fluid forward to `now` at the current offered rate and share.
    fn advance(&mut self, now: u64, p: &Params) {
        let dt = now.saturating_sub(self.last_ns) as f64 / 1e9;
        self.last_ns = now.max(self.last_ns);
        if dt == 0.0 || !self.alive {
            return;
        }
        let (offered, share) = (self.offered_bps as f64 / 8.0, self.share_bps as f64 / 8.0);
        let bound = (share * p.queue_ns as f64 / 1e9).max(3_000.0);
        if offered >= share {
            self.sent += share * dt;
            // A lower share does not drop what is queued; the queue only stops growing.
            self.backlog = (self.backlog + (offered - share) * dt).min(bound.max(self.backlog));
        } else {
            let drained = (share - offered) * dt;
            if drained >= self.backlog {
                self.sent += self.backlog + offered * dt;
                self.backlog = 0.0;
            } else {
                self.sent += share * dt;
                self.backlog -= drained;
            }
        }
    }

    fn sample(&self) -> UsageSample {
        UsageSample {
            at: Timestamp::from_nanos(self.last_ns),
            sent_bytes: self.sent as u64,
            backlog_bytes: self.backlog as u64,
            refused_bytes: 0,
        }
    }
}

/// The store: the log of published records and the revisions, in commit order.
#[derive(Default)]
struct Store {
    records: Vec<HostRecord<u32>>,
    /// Revision `r` (from 1) is `revisions[r - 1]`: commit time, host, record (None: deleted).
    revisions: Vec<(u64, u32, Option<u32>)>,
    /// Per host: (revision, record) in revision order.
    versions: Vec<Vec<(usize, Option<u32>)>>,
    writes: u64,
}

impl Store {
    fn commit(&mut self, now: u64, host: u32, record: Option<u32>) {
        self.revisions.push((now, host, record));
        self.versions[host as usize].push((self.revisions.len(), record));
    }

    /// The records present at revision `rev`.
    fn view(&self, rev: usize, out: &mut Vec<HostRecord<u32>>) {
        out.clear();
        for v in &self.versions {
            let k = v.partition_point(|(r, _)| *r <= rev);
            if let Some((_, Some(rec))) = k.checked_sub(1).map(|k| v[k]) {
                out.push(self.records[rec as usize].clone());
            }
        }
    }
}

/// What the samples after the change showed.
#[derive(Debug, Default)]
struct Outcome {
    /// Time of the first sample from which every later one is settled (None: never).
    settled_from: Option<u64>,
    /// Largest sum of the live hosts' shares above the limit, bit/s.
    max_over_bps: u64,
    /// Largest rate the live hosts sent together between two samples above the limit, bit/s.
    max_sent_over_bps: u64,
    /// Bytes all hosts had sent at the previous sample.
    sent_before: f64,
    /// At the last sample: sum of the shares, the smallest and largest busy share relative to
    /// its fair share, and host 0's share.
    final_sum_bps: u64,
    final_min_fair: f64,
    final_max_fair: f64,
    final_host0_bps: u64,
    /// The joining host's share at the first sample after it joined (join only).
    join_share_bps: Option<u64>,
    deleted_at: Option<u64>,
}

struct Sim<'a> {
    p: &'a Params,
    cfg: ClusterConfig,
    q: TimedQueue<Ev, 0>,
    hosts: Vec<Host>,
    store: Store,
    departed_share_bps: u64,
    out: Outcome,
    view: Vec<HostRecord<u32>>,
}

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let p = Params::read(point)?;
    let cfg = p.cluster_config();
    cfg.validate().map_err(|e| LabError::Experiment {
        point: point.index,
        message: e.to_string(),
    })?;
    let mut sim = Sim::new(&p, cfg);
    sim.run();
    Ok(vec![sim.row()])
}

impl<'a> Sim<'a> {
    fn new(p: &'a Params, cfg: ClusterConfig) -> Self {
        let join_floor = cfg.join_floor.rate(Rate::from_bps(p.limit_bps)).bps();
        let hosts = (0..p.hosts)
            .map(|h| Host {
                joined: false,
                alive: true,
                weight: p.weight(h),
                rng: Rng::for_flow(p.seed, h as u32),
                offered_bps: p.limit_bps * p.busy_factor,
                share_bps: join_floor,
                sent: 0.0,
                backlog: 0.0,
                last_ns: 0,
                previous: None,
                lease_expiry_ns: 0,
                seen_rev: 0,
                seen_at: 0,
                next_delivery: None,
            })
            .collect();
        let mut q = TimedQueue::with_capacity(4 * p.hosts + 16);
        let late = usize::from(p.scenario == Scenario::Join);
        for h in 0..p.hosts - late {
            q.schedule(Timestamp::ZERO, Ev::Join(h as u32));
        }
        q.schedule(Timestamp::from_nanos(p.change_at()), Ev::Change);
        q.schedule(Timestamp::ZERO, Ev::Sample);
        Sim {
            p,
            cfg,
            q,
            hosts,
            store: Store {
                versions: vec![Vec::new(); p.hosts],
                ..Store::default()
            },
            departed_share_bps: 0,
            out: Outcome::default(),
            view: Vec::with_capacity(p.hosts),
        }
    }

    fn at(t: u64) -> Timestamp {
        Timestamp::from_nanos(t)
    }

    fn run(&mut self) {
        let end = self.p.end();
        while let Some((t, ev)) = self.q.pop() {
            let now = t.as_nanos();
            if now > end {
                break;
            }
            match ev {
                Ev::Join(h) => self.join(h as usize, now),
                Ev::Tick(h) => self.tick(h as usize, now),
                Ev::KeepAlive(h) => self.keep_alive(h as usize, now),
                Ev::KeepAliveLanded(h) => {
                    let lease = self.p.lease_ns;
                    let host = &mut self.hosts[h as usize];
                    host.lease_expiry_ns = host.lease_expiry_ns.max(now + lease);
                }
                Ev::Commit(rec) => {
                    let host = self.store.records[rec as usize].host;
                    self.store.commit(now, host, Some(rec));
                }
                Ev::Expire(h) => self.expire(h as usize, now),
                Ev::Change => self.change(now),
                Ev::Sample => {
                    self.sample(now);
                    let next = now + self.p.period_ns / SAMPLES_PER_PERIOD;
                    self.q.schedule(Self::at(next), Ev::Sample);
                }
            }
        }
    }

    fn join(&mut self, h: usize, now: u64) {
        let p = self.p;
        let host = &mut self.hosts[h];
        host.joined = true;
        host.last_ns = now;
        host.previous = Some(host.sample());
        host.lease_expiry_ns = now + p.lease_ns;
        let phase = 1 + host.rng.below(p.period_ns);
        self.q.schedule(Self::at(now + phase), Ev::Tick(h as u32));
        self.q
            .schedule(Self::at(now + p.lease_ns / 3), Ev::KeepAlive(h as u32));
    }

    fn keep_alive(&mut self, h: usize, now: u64) {
        if !self.hosts[h].alive {
            return;
        }
        self.store.writes += 1;
        let lat = self.p.latency(&mut self.hosts[h].rng, self.p.commit_ns);
        self.q
            .schedule(Self::at(now + lat), Ev::KeepAliveLanded(h as u32));
        self.q
            .schedule(Self::at(now + self.p.lease_ns / 3), Ev::KeepAlive(h as u32));
    }

    fn expire(&mut self, h: usize, now: u64) {
        let expiry = self.hosts[h].lease_expiry_ns;
        if expiry > now {
            self.q.schedule(Self::at(expiry), Ev::Expire(h as u32));
            return;
        }
        self.store.commit(now, h as u32, None);
        self.out.deleted_at = Some(now);
    }

    /// Publish the record of the period just ended, then compute the share from the latest
    /// revision seen.
    fn tick(&mut self, h: usize, now: u64) {
        let p = self.p;
        if !self.hosts[h].alive {
            return;
        }
        let host = &mut self.hosts[h];
        host.advance(now, p);
        let sample = host.sample();
        let record = HostRecord {
            host: h as u32,
            weight: host.weight,
            sample,
            previous: host.previous.replace(sample),
            enforced_bps: host.share_bps,
        };
        let lat = p.latency(&mut host.rng, p.commit_ns);
        let index = self.store.records.len() as u32;
        self.store.records.push(record.clone());
        self.store.writes += 1;
        self.q.schedule(Self::at(now + lat), Ev::Commit(index));
        self.q
            .schedule(Self::at(now + p.period_ns), Ev::Tick(h as u32));

        self.deliver(h, now);
        let rev = self.hosts[h].seen_rev;
        if rev == 0 {
            return;
        }
        self.store.view(rev, &mut self.view);
        let limit = Rate::from_bps(p.limit_bps);
        if let Some(share) = own_share(limit, &self.cfg, &self.view, &record) {
            self.hosts[h].share_bps = share;
        }
    }

    /// The revisions host `h`'s watch has delivered by `now`, in order.
    fn deliver(&mut self, h: usize, now: u64) {
        let p = self.p;
        let host = &mut self.hosts[h];
        while host.seen_rev < self.store.revisions.len() {
            let commit = self.store.revisions[host.seen_rev].0;
            let at = match host.next_delivery {
                Some(at) => at,
                None => {
                    let delay = p.latency(&mut host.rng, p.watch_ns);
                    let at = (commit + delay).max(host.seen_at);
                    host.next_delivery = Some(at);
                    at
                }
            };
            if at > now {
                return;
            }
            host.seen_rev += 1;
            host.seen_at = at;
            host.next_delivery = None;
        }
    }

    fn change(&mut self, now: u64) {
        let p = self.p;
        let last = p.hosts - 1;
        match p.scenario {
            Scenario::Start => {}
            Scenario::Shift => {
                for host in &mut self.hosts[1..] {
                    host.advance(now, p);
                    host.offered_bps = 0;
                }
            }
            Scenario::Leave => {
                let host = &mut self.hosts[last];
                host.alive = false;
                self.departed_share_bps = host.share_bps;
                let expiry = host.lease_expiry_ns;
                self.q
                    .schedule(Self::at(expiry.max(now)), Ev::Expire(last as u32));
            }
            Scenario::Join => self.join(last, now),
        }
    }

    fn live(&self) -> impl Iterator<Item = (usize, &Host)> {
        self.hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.joined && h.alive)
    }

    /// Fair shares of the live hosts given their true demands (busy: unbounded, idle: none).
    fn fair(&self) -> Vec<(usize, u64)> {
        let live: Vec<usize> = self.live().map(|(i, _)| i).collect();
        let limit = self.p.limit_bps;
        let demands: Vec<Rate> = live
            .iter()
            .map(|&i| {
                Rate::from_bps(if self.hosts[i].offered_bps > 0 {
                    limit
                } else {
                    0
                })
            })
            .collect();
        let weights: Vec<u32> = live.iter().map(|&i| self.hosts[i].weight).collect();
        let reserve = (limit as f64 * self.cfg.idle_reserve_fraction) as u64;
        let floor = Rate::from_bps(reserve / live.len().max(1) as u64);
        let mut out = vec![Rate::from_bps(0); live.len()];
        water_fill_weighted(Rate::from_bps(limit), &demands, &weights, floor, &mut out);
        live.into_iter().zip(out.iter().map(Rate::bps)).collect()
    }

    fn sample(&mut self, now: u64) {
        let p = self.p;
        for host in self.hosts.iter_mut().filter(|h| h.joined && h.alive) {
            host.advance(now, p);
        }
        let sent: f64 = self.hosts.iter().map(|h| h.sent).sum();
        if now > p.change_at() {
            let window = (p.period_ns / SAMPLES_PER_PERIOD) as f64 / 1e9;
            let bps = ((sent - self.out.sent_before) * 8.0 / window) as u64;
            self.out.max_sent_over_bps = self
                .out
                .max_sent_over_bps
                .max(bps.saturating_sub(p.limit_bps));
        }
        self.out.sent_before = sent;
        if now < p.change_at() {
            return;
        }
        let limit = p.limit_bps;
        let sum: u64 = self.live().map(|(_, h)| h.share_bps).sum();
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for (i, fair) in self.fair() {
            let host = &self.hosts[i];
            if host.offered_bps > 0 && fair > 0 {
                let r = host.share_bps as f64 / fair as f64;
                lo = lo.min(r);
                hi = hi.max(r);
            }
        }
        let host0 = self.hosts[0].share_bps;
        let fair_ok = (1.0 - lo) * 100.0 <= p.fair_pct && (hi - 1.0) * 100.0 <= p.fair_pct;
        let sum_ok = (sum as f64 - limit as f64).abs() <= limit as f64 * p.sum_pct / 100.0;
        let settled = match p.scenario {
            Scenario::Start | Scenario::Join => sum_ok && fair_ok,
            Scenario::Shift => host0 as f64 >= limit as f64 * p.hold_pct / 100.0,
            Scenario::Leave => sum + self.departed_share_bps / 100 >= limit && fair_ok && sum_ok,
        };
        if !settled {
            self.out.settled_from = None;
        } else if self.out.settled_from.is_none() {
            self.out.settled_from = Some(now);
        }
        self.out.max_over_bps = self.out.max_over_bps.max(sum.saturating_sub(limit));
        self.out.final_sum_bps = sum;
        self.out.final_min_fair = lo;
        self.out.final_max_fair = hi;
        self.out.final_host0_bps = host0;
        if p.scenario == Scenario::Join && self.out.join_share_bps.is_none() {
            self.out.join_share_bps = Some(self.hosts[p.hosts - 1].share_bps);
        }
    }

    fn row(&self) -> Row {
        let p = self.p;
        let period = p.period_ns as f64;
        let change = p.change_at();
        let settle = self
            .out
            .settled_from
            .map(|t| round((t - change) as f64 / period, 1));
        let bound = match p.scenario {
            Scenario::Leave => round((p.lease_ns + p.period_ns) as f64 / period, 1),
            _ => 3.0,
        };
        let secs = p.end() as f64 / 1e9;
        let revisions = self.store.revisions.len() as f64;
        let pct = |bps: u64| round(bps as f64 * 100.0 / p.limit_bps as f64, 3);
        let ratio = |r: f64| {
            if r.is_finite() {
                round(r * 100.0, 2)
            } else {
                0.0
            }
        };
        let mut row = Row::new()
            .with("experiment", NAME)
            .with("scenario", p.scenario.name())
            .with("hosts", p.hosts as u64)
            .with("weights", p.weights_text.as_str())
            .with("join_floor_pct", p.join_floor_pct)
            .with("period_ms", p.period_ns / MS)
            .with("lease_ms", p.lease_ns / MS)
            .with("commit_us", p.commit_ns / US)
            .with("seed", p.seed)
            .with("settled", settle.is_some())
            .with(
                "periods_to_settle",
                settle.unwrap_or(p.after_periods as f64),
            )
            .with("bound_periods", bound)
            .with("writes_per_s", round(self.store.writes as f64 / secs, 1))
            .with("revisions_per_s", round(revisions / secs, 1))
            .with(
                "watch_events_per_s",
                round(revisions * p.hosts as f64 / secs, 0),
            )
            .with("max_overshoot_pct", pct(self.out.max_over_bps))
            .with("max_sent_overshoot_pct", pct(self.out.max_sent_over_bps))
            .with("final_sum_pct", pct(self.out.final_sum_bps))
            .with("final_min_fair_pct", ratio(self.out.final_min_fair))
            .with("final_max_fair_pct", ratio(self.out.final_max_fair))
            .with("final_host0_pct", pct(self.out.final_host0_bps));
        if let Some(j) = self.out.join_share_bps {
            row.set("join_share_pct", pct(j));
        }
        if let Some(d) = self.out.deleted_at {
            row.set(
                "deleted_after_periods",
                round((d - change) as f64 / period, 2),
            );
        }
        row
    }
}
