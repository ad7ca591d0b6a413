//! Source pacing (`pace_sockets`): what the engine does so that the host's own TCP sockets are
//! slowed at their source instead of queueing in the daemon (Carousel §5.2, zD §3: a shaper that
//! holds a few packets per flow and drops none).
//!
//! The daemon (`metronome_daemon::os::pace`) gives every local TCP flow of a paced class a
//! pacing ceiling, `SO_MAX_PACING_RATE` set by a BPF program on the sockets; the kernel's TCP
//! then sends no faster than that. The engine does two things for it:
//!
//! * **It names the flows.** The first packet of a TCP flow new to the flow table
//!   ([`crate::flow_table::FlowTable::claims`]) in a paced class is listed as a [`PacedFlow`]
//!   ([`Engine::take_paced_flows`]); the daemon registers its addresses and ports for the BPF
//!   program. A flow whose entry was reclaimed while idle is listed again when it returns.
//! * **It computes each class's ceiling** ([`Engine::pace_pass`], every [`PACE_PERIOD`]): the
//!   rate one flow of the class may send at, such that what the class's flows send together
//!   matches the class's rate in force `R` (its `rate`, its share among silos or in its tree)
//!   with a short queue. The ceiling is `f × R / n`: an equal share among the `n` flows seen in
//!   the last [`PACE_FLOW_WINDOW`] periods, so that flows coming and going change it at once,
//!   times a factor `f` that moves by at most 10 % a period (up to 50 % up, to at most 2, in
//!   the class's first 300 ms while it holds nothing and gets less than 90 % of `R`: its flows
//!   are starting):
//!   - it integrates the arrivals' distance from `R` (averaged over about four periods), so
//!     that in the long run the flows send `R`, no less (the class would lose rate) and no
//!     more (its queue would grow);
//!   - and, with 3 % of that gain, the least the class held at the passes of the last window
//!     against [`PACE_STANDING`]: a class that ran empty pushes `f` up, one whose queue stood
//!     all window pulls it down (a larger gain keeps the queue shorter and loses rate);
//!   - but in the class's first 600 ms, a queue that stood above [`PACE_DRAIN`] all window
//!     (or for the last 30 ms) and holds 64 frames or more while `f` is above 1 brings `f` down
//!     by the most a period allows, to 1 at the least: many flows that start together open `f`
//!     up and then send at the class's rate because the class holds them, ACK-clocked, not
//!     because of their ceilings, and the integral above sees no error;
//!   - the queue at the pass moves the ceiling itself (not `f`) by up to 20 % either way around
//!     [`PACE_TARGET`], so that a burst is answered within a period.
//!
//!   `f` absorbs what an equal share misses: flows that send less than their share (the others
//!   may take it, up to `f = n` times [`PACE_HEADROOM`], one flow alone at 1.1 `R`), traffic
//!   the daemon cannot slow (forwarded, or from sockets out of reach; the ceiling stays at least
//!   [`PACE_FLOOR_SHARE`] of an equal share so that it cannot starve the local flows), and a
//!   socket that sends faster than its ceiling for a while (the kernel credits a socket late
//!   for its pacing timer). With source pacing, a class's aggregate bucket holds at least
//!   [`PACE_TARGET`] of its rate ([`Engine::aggregate_burst`]). A class that saw no flow for a
//!   whole window leaves the pass, its factor kept.
//!
//! Ceilings are in wire bytes per second (the class's unit); the daemon converts them to the
//! socket's (TCP payload). The engine does no I/O: [`Engine::pace_pass`] fills the caller's
//! vector with what changed.

use super::Engine;
use metronome_core::{Duration, Timestamp};
use metronome_packet::{FiveTuple, Parsed};

/// How often [`Engine::pace_pass`] recomputes the ceilings: 10 ms, a few round trips of a
/// host's flows, many ACKs (each applies the ceiling in force).
pub const PACE_PERIOD: Duration = Duration::from_millis(10);
/// The queue a paced class aims at, in time at its rate: 1 ms; also the least burst of its
/// aggregate policy ([`Engine::aggregate_burst`]).
pub const PACE_TARGET: Duration = Duration::from_millis(1);
/// The lowest ceiling, as a share of an equal share of the rate (see the module docs).
pub const PACE_FLOOR_SHARE: f64 = 0.25;
/// The highest ceiling, as a share of the class's rate: a flow alone may be let send a little
/// more than `R` (the class holds it to `R`), since the kernel's pacing sends a little less
/// than its ceiling.
pub const PACE_HEADROOM: f64 = 1.1;
/// Gain of the controller on the arrivals' excess over the rate (its share of `R`), a period.
const GAIN_RATE: f64 = 0.1;
/// How much the queue's distance from its target moves the ceiling at once (at most this share
/// either way).
const GAIN_QUEUE: f64 = 0.2;
/// How much the standing queue's distance from [`PACE_STANDING`] moves `f` a period.
const GAIN_STANDING: f64 = 0.003;
/// The least a paced class should hold over a window of [`PACE_FLOW_WINDOW`] periods, in time
/// at its rate: 0.25 ms. Less, and it ran empty (rate lost); more, and a queue stood all along.
pub const PACE_STANDING: Duration = Duration::from_micros(250);
/// A queue that stands above this, in time at the class's rate, for a whole window (or for
/// [`DRAIN_PASSES`] passes of the current one) in a class's start brings a factor above 1 down
/// at its fastest, to 1: 10 ms.
pub const PACE_DRAIN: Duration = Duration::from_millis(10);
/// Frames a class holds, at the least, for [`PACE_DRAIN`] to apply: 64, a quarter of the
/// default super-frame slots (a few flows' start is not a threat to the frame pool, and the
/// slower terms answer it without losing rate).
const DRAIN_FRAMES: u64 = 64;
/// Passes of a window after which its least queue counts for [`PACE_DRAIN`].
const DRAIN_PASSES: u32 = 3;
/// Passes of a class's start during which [`PACE_DRAIN`] applies (600 ms): later, a queue that
/// stands for moments is the flows' own bursts (Cubic's), which the slower terms answer
/// without losing rate.
const DRAIN_UNTIL: u32 = 2 * PACE_START_PASSES;
/// Weight of a period's arrivals in their average.
const ARRIVALS_WEIGHT: f64 = 0.25;
/// Most flows listed between two [`Engine::take_paced_flows`]; more are counted, not listed.
pub const MAX_PACED_NEWS: usize = 4096;
/// Periods over which a class's flows are counted (80 ms): a flow held at its ceiling sends a
/// burst every few milliseconds, not in every period.
pub const PACE_FLOW_WINDOW: u32 = 8;
/// Passes in which a class's factor may open up fast (300 ms; see the module docs).
const PACE_START_PASSES: u32 = 30;
/// IP protocol number of TCP.
const TCP: u8 = 6;

/// A TCP flow new to a paced class: its 5-tuple as the packet leaves the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacedFlow {
    /// The class's state index.
    pub class: u32,
    /// Addresses and ports, source first.
    pub tuple: FiveTuple,
}

/// A class's ceiling as [`Engine::pace_pass`] left it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ceiling {
    /// The class's state index.
    pub class: u32,
    /// Wire bytes per second one flow may send.
    pub bytes_per_sec: f64,
    /// Flows of the class seen in the last [`PACE_FLOW_WINDOW`] periods (at least).
    pub flows: u32,
    /// Frames the class holds (its fair queue, the wheel, the link's queue).
    pub held_frames: u64,
}

/// What a paced class keeps between passes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ClassPace {
    /// The factor `f` (0: not computed yet).
    pub(super) factor: f64,
    /// Arrivals, wire bytes per second, averaged.
    pub(super) arrivals: f64,
    /// The class's `stamped_bytes + refused_bytes` at the last pass.
    pub(super) arrived: u64,
    /// Flows seen in the current window of [`PACE_FLOW_WINDOW`] periods.
    pub(super) flows: u32,
    /// Flows seen in the last complete window.
    pub(super) flows_last: u32,
    /// The least the class held at a pass of the current window, bytes (`None`: no pass yet).
    pub(super) least: Option<u64>,
    /// The same over the last complete window.
    pub(super) least_last: Option<u64>,
    /// Listed in `Pace::active`.
    pub(super) listed: bool,
    /// Passes since its factor was first computed (saturating).
    pub(super) passes: u32,
    /// Passes of the current window of [`PACE_FLOW_WINDOW`] periods.
    pub(super) window_passes: u32,
}

/// The engine's source-pacing state.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// Whether the daemon asked for it ([`Engine::enable_source_pacing`]).
    pub(super) enabled: bool,
    /// The current period's number (never 0: the flow table's entries start at 0).
    pub(super) period: u32,
    /// When the current period began.
    pub(super) since: Option<Timestamp>,
    /// Classes with flows in the last periods, by state index.
    pub(super) active: Vec<usize>,
    /// New flows since the last [`Engine::take_paced_flows`].
    pub(super) news: Vec<PacedFlow>,
    /// New flows not listed, `news` being full.
    pub(super) news_lost: u64,
}

impl Engine {
    /// Turns source pacing on: from now on the engine lists the new TCP flows of the classes
    /// with `pace_sockets` and computes their ceilings. The daemon calls it when it could
    /// attach its program; without it both stay empty.
    pub fn enable_source_pacing(&mut self) {
        self.pace.enabled = true;
        self.pace.period = 1;
        for index in 0..self.classes.len() {
            let state = &self.classes[index];
            if let Some(p) = state.aggregate {
                let burst = self.aggregate_burst(&state.policy);
                let _ = self.stamper.set_burst(p, burst);
            }
        }
    }

    /// The burst of the aggregate policy of a class of `policy`: its `burst`, and with source
    /// pacing at least [`PACE_TARGET`] at its rate. Paced sockets leave short gaps between their
    /// packets; a one-frame bucket would lose what each gap could have sent, about 1 % of the
    /// rate on this machine's tests (docs/results/attach.md), where 1 ms of credit keeps it
    /// (HTB's default bucket is about as deep, `rate / HZ`).
    pub(super) fn aggregate_burst(&self, policy: &crate::config::ClassPolicy) -> u32 {
        match (self.pace.enabled && policy.pace_sockets, policy.rate) {
            (true, Some(rate)) => {
                let credit = u32::try_from(rate.bytes_in(PACE_TARGET)).unwrap_or(u32::MAX);
                policy.burst.max(credit)
            }
            _ => policy.burst,
        }
    }

    /// Whether [`Engine::enable_source_pacing`] was called.
    pub fn source_pacing(&self) -> bool {
        self.pace.enabled
    }

    /// Notes a packet of class `index` whose flow has entry `entry` (claimed now when
    /// `claimed`): counts the flow once per period and lists a new TCP flow.
    pub(super) fn pace_packet(&mut self, index: usize, entry: u32, claimed: bool, p: &Parsed) {
        let window = self.pace.period / PACE_FLOW_WINDOW + 1;
        let first = self.flows.mark_seen(entry, window);
        let state = &mut self.classes[index];
        if first {
            state.pace.flows += 1;
            if !state.pace.listed {
                state.pace.listed = true;
                self.pace.active.push(index);
            }
        }
        if !claimed {
            return;
        }
        let Parsed::Ip(ip) = p else {
            return;
        };
        if ip.tuple.protocol != TCP || !ip.has_ports {
            return;
        }
        if self.pace.news.len() >= MAX_PACED_NEWS {
            self.pace.news_lost += 1;
            return;
        }
        self.pace.news.push(PacedFlow {
            class: index as u32,
            tuple: ip.tuple,
        });
    }

    /// The name of class state `index` (for the ceilings' metrics).
    pub fn class_state_name(&self, index: u32) -> Option<&str> {
        self.classes.get(index as usize).map(|s| s.name.as_str())
    }

    /// Whether flows were listed since the last [`Engine::take_paced_flows`].
    pub fn has_paced_flows(&self) -> bool {
        !self.pace.news.is_empty()
    }

    /// Moves the flows listed since the last call into `out` (cleared first); returns how many
    /// could not be listed since the last call, the list being full.
    pub fn take_paced_flows(&mut self, out: &mut Vec<PacedFlow>) -> u64 {
        out.clear();
        out.append(&mut self.pace.news);
        std::mem::take(&mut self.pace.news_lost)
    }

    /// Once [`PACE_PERIOD`] has passed since the last pass: recomputes the ceiling of every
    /// paced class that had flows (see the module docs) and puts them into `out` (cleared
    /// first). Returns whether it ran.
    pub fn pace_pass(&mut self, now: Timestamp, out: &mut Vec<Ceiling>) -> bool {
        out.clear();
        if !self.pace.enabled {
            return false;
        }
        let since = *self.pace.since.get_or_insert(now);
        let dt = now.saturating_since(since);
        if dt < PACE_PERIOD {
            return false;
        }
        self.pace.since = Some(now);
        let window = self.pace.period / PACE_FLOW_WINDOW;
        self.pace.period = self.pace.period.wrapping_add(1).max(1);
        let new_window = self.pace.period / PACE_FLOW_WINDOW != window;
        let secs = dt.as_nanos() as f64 / 1e9;
        let mut k = 0;
        while k < self.pace.active.len() {
            let index = self.pace.active[k];
            match self.pace_class(index, secs, new_window) {
                Some(c) => {
                    out.push(c);
                    k += 1;
                }
                None => {
                    self.classes[index].pace.listed = false;
                    self.pace.active.swap_remove(k);
                }
            }
        }
        true
    }

    /// The new ceiling of class `index` after a period of `secs` seconds, the last of a window
    /// of flows when `new_window`; `None` when it saw no flow in a whole window (it leaves the
    /// active list with the ceiling `R`).
    fn pace_class(&mut self, index: usize, secs: f64, new_window: bool) -> Option<Ceiling> {
        let (held_frames, held) = self.class_held(index);
        let rate = self.classes[index]
            .aggregate
            .and_then(|a| self.stamper.policy(a))
            .map(|p| p.rate().bps() as f64 / 8.0);
        let state = &mut self.classes[index];
        let arrived_now = state.stamped_bytes + state.refused_bytes;
        let arrived = arrived_now.saturating_sub(state.pace.arrived) as f64 / secs;
        state.pace.arrived = arrived_now;
        let flows = state.pace.flows.max(state.pace.flows_last);
        let least = state.pace.least.map_or(held, |l| l.min(held));
        state.pace.least = Some(least);
        state.pace.window_passes += 1;
        // The queue stood above PACE_DRAIN all along: over the last window, or over the
        // current one once it is a few passes old.
        let stood = state
            .pace
            .least_last
            .into_iter()
            .chain((state.pace.window_passes >= DRAIN_PASSES).then_some(least));
        let stood = stood.max().unwrap_or(0);
        if new_window {
            state.pace.flows_last = std::mem::take(&mut state.pace.flows);
            state.pace.least_last = state.pace.least.take();
            state.pace.window_passes = 0;
        }
        let rate = rate.filter(|r| *r > 0.0)?;
        if flows == 0 {
            return None;
        }
        let pace = &mut state.pace;
        if pace.factor == 0.0 {
            (pace.factor, pace.arrivals) = (1.0, arrived);
        }
        pace.arrivals += ARRIVALS_WEIGHT * (arrived - pace.arrivals);
        let target = rate * PACE_TARGET.as_nanos() as f64 / 1e9;
        let rate_error = (rate - pace.arrivals) / rate;
        let queue_error = ((target - held as f64) / target).clamp(-1.0, 1.0);
        let standing = rate * PACE_STANDING.as_nanos() as f64 / 1e9;
        let standing_error = pace
            .least_last
            .map_or(0.0, |l| ((standing - l as f64) / standing).clamp(-1.0, 1.0));
        // In its first passes a class that holds nothing and gets less than 90 % of its rate
        // opens up at once (its flows are starting): the rate's whole error, at most 50 % a
        // period.
        pace.passes = pace.passes.saturating_add(1);
        let starting = pace.passes <= PACE_START_PASSES;
        let (gain, most) = if starting && (held as f64) < standing && rate_error > 0.1 {
            (1.0, 1.5)
        } else {
            (GAIN_RATE, 1.1)
        };
        let drain = rate * PACE_DRAIN.as_nanos() as f64 / 1e9;
        let draining = stood as f64 > drain
            && held_frames >= DRAIN_FRAMES
            && pace.factor > 1.0
            && pace.passes <= DRAIN_UNTIL;
        let step = if draining {
            // The class holds its starting flows back, not their ceilings, which opened up
            // above an equal share while they started (they send at the class's rate,
            // ACK-clocked, with a queue that stands): the factor comes down at the most a period
            // allows, to an equal share.
            (1.0 / pace.factor).max(0.9)
        } else {
            1.0 + gain * rate_error + GAIN_STANDING * standing_error
        };
        let n = f64::from(flows);
        let mut factor = pace.factor * step.clamp(0.9, most);
        if most > 1.1 {
            // Opening up fast goes no further than twice an equal share: enough for a flow
            // beside an idle one, not a cap lifted for every flow of many.
            factor = factor.min(pace.factor.max(2.0));
        }
        let most_factor = n * PACE_HEADROOM;
        pace.factor = factor.clamp(PACE_FLOOR_SHARE, most_factor);
        Some(Ceiling {
            class: index as u32,
            bytes_per_sec: (pace.factor * (1.0 + GAIN_QUEUE * queue_error))
                .clamp(PACE_FLOOR_SHARE, most_factor)
                * rate
                / n,
            flows,
            held_frames,
        })
    }
}
