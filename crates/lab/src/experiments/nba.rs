//! `nba`: an aggregate limit shared by per-core shapers through the NIC-level bandwidth allocator
//! while the offered load moves between cores (Carousel §5.3): work conservation and convergence,
//! which the paper claims without a figure.
//!
//! In simulated time, deterministic: `cores` cores, each a [`Timestamper`] with one aggregate
//! policy and a FIFO, fed by constant-rate sources split by `splits`; the allocator is the daemon's
//! own [`silo::Allocator`] over a [`RateExchange`] ([`silo::fresh_rate`],
//! [`silo::DEMAND_PUBLISH`]), or `static`. Per phase: `periods_to_converge`, `achieved_bps`,
//! `deviation_pct`; `trace = true` gives one row per window.
//!
//! Where it departs from the paper: demand is what a silo stamped, sources are constant-rate, a
//! published rate is picked up at once. The model and the reasons: `docs/design/carousel.md`.

use std::collections::VecDeque;
use std::sync::Arc;

use metronome_config::Config;
use metronome_core::timestamp::{PolicyId, PolicyKind, Timestamper};
use metronome_core::{RateExchange, Timestamp};
use metronome_engine::allocator as silo;

use super::rows::round;
use crate::error::LabError;
use crate::point::{Point, Row};

#[cfg(test)]
mod tests;

/// The experiment's registered name.
pub const NAME: &str = "nba";

/// Nanoseconds per millisecond.
const MS: u64 = 1_000_000;

/// The parameters of one run, read from a [`Point`].
#[derive(Clone, Debug, PartialEq)]
struct Params {
    allocator: Allocator,
    cores: usize,
    /// Per phase, per core, percent of `offered_bps`.
    splits: Vec<Vec<u64>>,
    splits_text: String,
    aggregate_bps: u64,
    offered_bps: u64,
    period_ns: u64,
    phase_ns: u64,
    shift_lag_ns: u64,
    packet_bytes: u32,
    inflight_packets: usize,
    source_buffer_packets: u64,
    converge_pct: f64,
    /// One row per window instead of one per phase.
    trace: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Allocator {
    Nba,
    Static,
}

impl Params {
    fn read(p: &Point) -> Result<Self, LabError> {
        let allocator = match p.str("allocator")? {
            "nba" => Allocator::Nba,
            "static" => Allocator::Static,
            other => {
                return Err(LabError::param(
                    p.index,
                    "allocator",
                    format!("unknown allocator {other:?}; known: nba, static"),
                ))
            }
        };
        let cores = p.positive("cores")?.min(1024) as usize;
        let splits_text = p.str("splits")?.to_string();
        let splits =
            parse_splits(&splits_text, cores).map_err(|m| LabError::param(p.index, "splits", m))?;
        let params = Params {
            allocator,
            cores,
            splits,
            splits_text,
            aggregate_bps: p.positive("aggregate_bps")?,
            offered_bps: p.positive("offered_bps")?,
            period_ns: p.positive("period_ms")? * MS,
            phase_ns: p.positive("phase_ms")? * MS,
            shift_lag_ns: p.u64("shift_lag_ms")? * MS,
            packet_bytes: p.positive("packet_bytes")?.min(65_535) as u32,
            inflight_packets: p.positive("inflight_packets")?.min(1 << 16) as usize,
            source_buffer_packets: p.positive("source_buffer_packets")?,
            converge_pct: p.f64("converge_pct")?,
            trace: p.bool("trace")?,
        };
        if params.shift_lag_ns >= params.phase_ns || params.phase_ns < 2 * params.period_ns {
            return Err(LabError::param(
                p.index,
                "phase_ms",
                "must exceed shift_lag_ms and cover two periods",
            ));
        }
        Ok(params)
    }

    fn phase_start(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            i as u64 * self.phase_ns + self.shift_lag_ns
        }
    }

    fn end(&self) -> u64 {
        self.splits.len() as u64 * self.phase_ns + self.shift_lag_ns
    }
}

/// `"80/20,20/80"` into `[[80, 20], [20, 80]]`: one group per phase, `cores` numbers each.
fn parse_splits(text: &str, cores: usize) -> Result<Vec<Vec<u64>>, String> {
    let splits: Vec<Vec<u64>> = text
        .split(',')
        .map(|phase| {
            phase
                .split('/')
                .map(|s| s.trim().parse::<u64>().map_err(|e| format!("{s:?}: {e}")))
                .collect::<Result<Vec<u64>, String>>()
        })
        .collect::<Result<_, _>>()?;
    for s in &splits {
        if s.len() != cores || s.iter().sum::<u64>() != 100 {
            return Err(format!(
                "each phase needs {cores} percentages summing to 100: {s:?}"
            ));
        }
    }
    Ok(splits)
}

/// One core: its source, its shaper and what it reported.
struct Core {
    stamper: Timestamper,
    policy: PolicyId,
    /// Offered rate in this phase, bit/s.
    offered_bps: u64,
    /// Start of the current constant-rate arrival train and packets generated since.
    train_start: u64,
    train_packets: u64,
    /// Packets waiting at the source.
    source_queue: u64,
    /// EDTs of the packets in the shaper, in order.
    shaper: VecDeque<u64>,
    /// Bytes handed to the shaper (transmitted + queued): the demand the silo reports.
    stamped_bytes: u64,
    /// Packets the source could not buffer (not offered).
    blocked: u64,
    /// The epoch of the rate taken last ([`silo::fresh_rate`]).
    epoch: u64,
}

impl Core {
    fn next_arrival(&self, packet_bits: u64) -> u64 {
        if self.offered_bps == 0 {
            return u64::MAX;
        }
        let k = u128::from(self.train_packets + 1);
        let dt = k * u128::from(packet_bits) * 1_000_000_000 / u128::from(self.offered_bps);
        self.train_start
            .saturating_add(dt.min(u128::from(u64::MAX)) as u64)
    }

    /// Hands waiting packets to the shaper while it has room (Deferred Completions' bound).
    fn feed(&mut self, now: u64, p: &Params) {
        while self.source_queue > 0 && self.shaper.len() < p.inflight_packets {
            let edt =
                self.stamper
                    .stamp(Timestamp::from_nanos(now), p.packet_bytes, &[self.policy]);
            self.shaper.push_back(edt.as_nanos());
            self.source_queue -= 1;
            self.stamped_bytes += u64::from(p.packet_bytes);
        }
    }
}

/// Runs one point: see the module documentation.
pub fn run(point: &Point) -> Result<Vec<Row>, LabError> {
    let p = Params::read(point)?;
    let (windows, rates) = simulate(&p, point.index)?;
    if p.trace {
        return Ok(trace_rows(&p, &windows));
    }
    Ok((0..p.splits.len())
        .map(|i| phase_row(&p, &windows, &rates[i], i))
        .collect())
}

/// The event loop: bytes departed per window, and each phase's final rates.
fn simulate(p: &Params, point: usize) -> Result<(Vec<u64>, Vec<Vec<u64>>), LabError> {
    let (mut allocator, exchange) = coordinator(p, point)?;
    let mut cores: Vec<Core> = (0..p.cores)
        .map(|i| {
            let mut stamper = Timestamper::new();
            let (rate, _) = exchange.read_rate(i);
            let policy = stamper.add_policy(PolicyKind::Aggregate, rate, p.packet_bytes);
            Core {
                stamper,
                policy,
                offered_bps: 0,
                train_start: 0,
                train_packets: 0,
                source_queue: 0,
                shaper: VecDeque::with_capacity(p.inflight_packets),
                stamped_bytes: 0,
                blocked: 0,
                epoch: 0,
            }
        })
        .collect();
    let end = p.end();
    let packet_bits = u64::from(p.packet_bytes) * 8;
    let mut windows = vec![0u64; end.div_ceil(p.period_ns) as usize];
    let mut final_rates = Vec::with_capacity(p.splits.len());
    let mut phase = 0;
    let mut next_update = 0;
    let mut now = 0;
    loop {
        let shift = if phase < p.splits.len() {
            p.phase_start(phase)
        } else {
            u64::MAX
        };
        let arrival = cores
            .iter()
            .map(|c| c.next_arrival(packet_bits))
            .min()
            .unwrap_or(u64::MAX);
        let departure = cores
            .iter()
            .filter_map(|c| c.shaper.front().copied())
            .min()
            .unwrap_or(u64::MAX);
        let next = shift.min(arrival).min(departure).min(next_update).min(end);
        debug_assert!(next >= now, "time never goes backwards");
        now = next;
        if now >= end {
            break;
        }
        for c in &mut cores {
            while c.shaper.front().is_some_and(|&edt| edt <= now) {
                c.shaper.pop_front();
                windows[(now / p.period_ns) as usize] += u64::from(p.packet_bytes);
            }
            while c.next_arrival(packet_bits) <= now {
                c.train_packets += 1;
                if c.source_queue < p.source_buffer_packets {
                    c.source_queue += 1;
                } else {
                    c.blocked += 1;
                }
            }
            c.feed(now, p);
        }
        if now == shift {
            if phase > 0 {
                final_rates.push(current_rates(&cores));
            }
            for (c, pct) in cores.iter_mut().zip(&p.splits[phase]) {
                c.offered_bps = p.offered_bps / 100 * pct;
                c.train_start = now;
                c.train_packets = 0;
            }
            phase += 1;
        }
        if now == next_update {
            next_update = allocate(p, &mut allocator, &exchange, &mut cores, now);
        }
    }
    final_rates.push(current_rates(&cores));
    Ok((windows, final_rates))
}

/// The daemon's allocator for one class limited to `aggregate_bps` over `cores` silos, updating
/// every `period_ms`, and that class's exchange (rates published as the equal split).
fn coordinator(p: &Params, point: usize) -> Result<(silo::Allocator, Arc<RateExchange>), LabError> {
    let text = format!(
        "[interfaces]\ninside = \"lab0\"\noutside = \"lab1\"\n\
         [daemon]\nnba_period = \"{}ns\"\n[default]\nrate = {}\nburst = {}\n",
        p.period_ns, p.aggregate_bps, p.packet_bytes
    );
    let config =
        Config::from_toml_str(&text, "nba experiment").map_err(|e| LabError::Experiment {
            point,
            message: e.to_string(),
        })?;
    let allocator = silo::Allocator::new(
        config.class_set(),
        config.nba_period(),
        config.placement(),
        p.cores,
    );
    let exchange = allocator
        .cells()
        .into_iter()
        .next()
        .map(|cell| cell.exchange)
        .ok_or_else(|| LabError::Experiment {
            point,
            message: "the daemon made no allocator for the default class".to_owned(),
        })?;
    Ok((allocator, exchange))
}

/// One update: silos publish usage, the allocator steps (with `allocator = "nba"`), silos take
/// their rate. Returns when the next update is due.
fn allocate(
    p: &Params,
    allocator: &mut silo::Allocator,
    exchange: &RateExchange,
    cores: &mut [Core],
    now: u64,
) -> u64 {
    let at = Timestamp::from_nanos(now);
    for (i, c) in cores.iter().enumerate() {
        exchange.publish_demand(i, c.stamped_bytes, at);
    }
    let next = match p.allocator {
        Allocator::Nba => allocator.step(at).as_nanos(),
        Allocator::Static => now + p.period_ns,
    };
    for (i, c) in cores.iter_mut().enumerate() {
        // One thread: no publish overlaps the read.
        if let Some(rate) = silo::fresh_rate(exchange, i, &mut c.epoch) {
            if rate.bps() > 0 {
                c.stamper
                    .set_rate(c.policy, rate)
                    .expect("the core's policy exists");
            }
        }
    }
    next
}

fn current_rates(cores: &[Core]) -> Vec<u64> {
    cores
        .iter()
        .map(|c| c.stamper.policy(c.policy).map_or(0, |pol| pol.rate().bps()))
        .collect()
}

/// The row of phase `i`: convergence and conformance over its windows.
fn phase_row(p: &Params, windows: &[u64], rates: &[u64], i: usize) -> Row {
    let target = p.aggregate_bps.min(p.offered_bps) as f64;
    let start = p.phase_start(i);
    let stop = if i + 1 < p.splits.len() {
        p.phase_start(i + 1)
    } else {
        p.end()
    };
    // Windows starting at the updates after the shift (the first update at or after it) and
    // ending before the next shift.
    let first = start.div_ceil(p.period_ns) as usize;
    let last = (stop / p.period_ns) as usize; // exclusive
    let rate = |w: usize| windows[w] as f64 * 8.0 / (p.period_ns as f64 / 1e9);
    let dev = |w: usize| (rate(w) - target).abs() / target * 100.0;
    let whole: Vec<usize> = (first..last).collect();
    // The first window from which all the rest are within the tolerance.
    let settled_from = whole
        .iter()
        .rposition(|&w| dev(w) > p.converge_pct)
        .map_or(0, |k| k + 1);
    let converged = settled_from < whole.len();
    // Window `first` holds the rates of the first update at or after the shift; for phase 0 that
    // update only takes the baseline, so counting starts one window later.
    let updates_before = usize::from(i == 0 || start.is_multiple_of(p.period_ns));
    let periods_to_converge = settled_from + 1 - updates_before;
    let measured = if converged {
        &whole[settled_from..]
    } else {
        &whole[..]
    };
    let n = measured.len().max(1) as f64;
    let achieved = measured.iter().map(|&w| rate(w)).sum::<f64>() / n;
    let deviation = measured.iter().map(|&w| dev(w)).sum::<f64>() / n;
    let max_dev = measured.iter().map(|&w| dev(w)).fold(0.0, f64::max);
    let split: Vec<String> = p.splits[i].iter().map(u64::to_string).collect();
    let mbps: Vec<String> = rates.iter().map(|r| (r / 1_000_000).to_string()).collect();
    let allocator = if p.allocator == Allocator::Nba {
        "nba"
    } else {
        "static"
    };
    Row::new()
        .with("experiment", NAME)
        .with("setup", format!("{allocator}, {} cores", p.cores))
        .with("allocator", allocator)
        .with("cores", p.cores as u64)
        .with("period_ms", p.period_ns / MS)
        .with("splits", p.splits_text.as_str())
        .with("shift", i as u64)
        .with("split", split.join("/"))
        .with("target_bps", target as u64)
        .with("achieved_bps", achieved.round() as u64)
        .with("deviation_pct", round(deviation, 3))
        .with("max_deviation_pct", round(max_dev, 3))
        .with("converged", converged)
        .with("periods_to_converge", periods_to_converge as u64)
        .with("rates_mbps", mbps.join("/"))
        .with("trace", false)
}

/// With `trace = true`: one row per whole window, the aggregate rate over time.
fn trace_rows(p: &Params, windows: &[u64]) -> Vec<Row> {
    let whole = (p.end() / p.period_ns) as usize;
    (0..whole)
        .map(|w| {
            let start = w as u64 * p.period_ns;
            let phase = (0..p.splits.len())
                .rev()
                .find(|&i| p.phase_start(i) <= start)
                .unwrap_or(0);
            Row::new()
                .with("experiment", NAME)
                .with("setup", setup(p))
                .with("allocator", allocator_name(p))
                .with("cores", p.cores as u64)
                .with("period_ms", p.period_ns / MS)
                .with("splits", p.splits_text.as_str())
                .with("shift", phase as u64)
                .with("target_bps", p.aggregate_bps.min(p.offered_bps))
                .with("time_ms", start / MS)
                .with("window_bps", windows[w] * 8 * 1_000_000_000 / p.period_ns)
                .with("trace", true)
        })
        .collect()
}

fn allocator_name(p: &Params) -> &'static str {
    match p.allocator {
        Allocator::Nba => "nba",
        Allocator::Static => "static",
    }
}

fn setup(p: &Params) -> String {
    format!("{}, {} cores", allocator_name(p), p.cores)
}
