//! A loop's part in source pacing (`crate::os::pace`): every
//! [`metronome_engine::engine::pace::PACE_PERIOD`] it takes its engine's new flows and ceilings
//! to the program, with the heartbeat that keeps the program slowing sockets; an idle loop
//! wakes every [`IDLE_BEAT`] for the heartbeat alone.

use super::PaceLoop;
use crate::datapath::engine::pace::{Ceiling, PacedFlow};
use crate::datapath::engine::Engine;
use crate::ops::metrics::Metrics;
use crate::os::pace::Counter;
use metronome_core::{Duration, Timestamp};

/// Longest an idle loop sleeps while it paces sockets: the heartbeat must stay well within
/// `crate::os::pace::STALE_AFTER`.
pub const IDLE_BEAT: Duration = Duration::from_millis(100);

/// The loop's scratch and its last pass.
pub(super) struct Pacer<'a> {
    pace: &'a PaceLoop,
    flows: Vec<PacedFlow>,
    ceilings: Vec<Ceiling>,
    last: Timestamp,
}

impl<'a> Pacer<'a> {
    /// Turns source pacing on in `engine`.
    pub(super) fn new(pace: &'a PaceLoop, engine: &mut Engine, now: Timestamp) -> Pacer<'a> {
        engine.enable_source_pacing();
        Pacer {
            pace,
            flows: Vec::new(),
            ceilings: Vec::new(),
            last: now,
        }
    }

    /// Runs the engine's pass when its period is over and hands the result to the program;
    /// hands new flows over at once (their sockets are slowed from their next RTT sample).
    pub(super) fn tick(&mut self, now: Timestamp, engine: &mut Engine, metrics: &Metrics) {
        // `pace_pass` empties the ceilings when its period is not over.
        let passed = engine.pace_pass(now, &mut self.ceilings);
        if !passed && !engine.has_paced_flows() {
            return;
        }
        let lost = engine.take_paced_flows(&mut self.flows);
        if lost > 0 {
            tracing::debug!(
                lost,
                "source pacing: new flows not listed (the list was full)"
            );
        }
        let first = self.pace.index == 0;
        let pacing = &self.pace.pacing;
        pacing.update(
            self.pace.index,
            &self.flows,
            &self.ceilings,
            first && passed,
        );
        if !passed {
            return;
        }
        self.last = now;
        for c in &self.ceilings {
            if let Some(name) = engine.class_state_name(c.class) {
                metrics.pace_class(name, c.bytes_per_sec * 8.0, c.flows, c.held_frames);
            }
        }
        if first {
            let events = [
                ("applied", pacing.counter(Counter::Applied)),
                ("restored", pacing.counter(Counter::Restored)),
                ("closed", pacing.counter(Counter::Closed)),
                ("setsockopt_failed", pacing.counter(Counter::Failed)),
                ("map_write_failed", pacing.write_errors()),
            ];
            metrics.pace_program(pacing.counter(Counter::Slowed), &events);
        }
    }

    /// How long the idle loop may sleep before the next heartbeat is due.
    pub(super) fn sleep_bound(&self, now: Timestamp) -> std::time::Duration {
        let due = self.last.saturating_add(IDLE_BEAT);
        std::time::Duration::from_nanos(due.saturating_since(now).as_nanos())
    }
}
