//! Frames the daemon could not take, never silent (CONTRIBUTING.md §11): every frame a port
//! dropped on receive (longer than the pool's largest slot, no large slot free, truncated above
//! 64 KiB, a virtio-net header it could not read or honour, no origin tag on a port that reads
//! one) and every piece of a super-frame
//! whose headers could not be rewritten is counted under a named reason in
//! `metronome_rx_refused_frames_total{reason}`, logged once per reason the first time it
//! happens, and listed in the daemon's `stopped` line ([`Refusals::of`]).

use crate::ops::metrics::Metrics;
use metronome_io::CutCounters;
use metronome_io::PortCounters;

/// Number of reasons in [`Refusals`].
const REASONS: usize = 6;

/// Frames refused, by reason, summed over both ports. Cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Longer than the pool's largest slot (`rx_oversize`).
    pub oversize: u64,
    /// A super-frame found every large slot in use (`rx_no_large_slot`).
    pub no_large_slot: u64,
    /// Longer than 64 KiB, truncated by the socket (`rx_gso_truncated`: BIG TCP).
    pub gso_truncated: u64,
    /// A virtio-net header the kernel could not write or the port could not read
    /// (`rx_vnet_errors`: an unknown GSO type).
    pub vnet_error: u64,
    /// A piece of a cut super-frame whose headers could not be rewritten when due.
    pub piece_failed: u64,
    /// No VLAN tag carrying an origin, on a port that reads one (`rx_untagged`): not a frame
    /// of the capture program.
    pub untagged: u64,
}

impl Refusals {
    /// The refusals in two ports' counters and the cut counters.
    pub fn of(inside: &PortCounters, outside: &PortCounters, cuts: &CutCounters) -> Refusals {
        Refusals {
            oversize: inside.rx_oversize + outside.rx_oversize,
            no_large_slot: inside.rx_no_large_slot + outside.rx_no_large_slot,
            gso_truncated: inside.rx_gso_truncated + outside.rx_gso_truncated,
            vnet_error: inside.rx_vnet_errors + outside.rx_vnet_errors,
            piece_failed: cuts.pieces_failed,
            untagged: inside.rx_untagged + outside.rx_untagged,
        }
    }

    /// Every refused frame.
    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, n)| n).sum()
    }

    /// `(reason, count)` pairs, reasons named as in the metric's label.
    pub fn by_reason(&self) -> [(&'static str, u64); REASONS] {
        [
            ("oversize", self.oversize),
            ("no_large_slot", self.no_large_slot),
            ("gso_truncated", self.gso_truncated),
            ("vnet_error", self.vnet_error),
            ("piece_failed", self.piece_failed),
            ("untagged", self.untagged),
        ]
    }
}

/// Publishes refusals as they grow and logs each reason once.
#[derive(Debug, Default)]
pub struct RefusalLog {
    last: Refusals,
}

impl RefusalLog {
    /// Adds what grew since the last call to the metrics; logs a reason the first time it
    /// counts a frame (with what to do about it).
    pub fn observe(&mut self, now: Refusals, metrics: &Metrics) {
        let before = self.last.by_reason();
        for (i, (reason, n)) in now.by_reason().into_iter().enumerate() {
            let old = before[i].1;
            if n <= old {
                continue;
            }
            metrics.rx_refused(reason, n - old);
            if old == 0 {
                tracing::warn!(reason, frames = n, hint = hint(reason), "frames refused");
            }
        }
        self.last = now;
    }
}

/// What a reason means for the operator.
fn hint(reason: &str) -> &'static str {
    match reason {
        "oversize" => "frames longer than the pool's largest slot: enable daemon.vnet_hdr",
        "no_large_slot" => "every super-frame slot in use: raise daemon.gso_slots",
        "gso_truncated" => {
            "frames above 64 KiB (BIG TCP): ip link set IF gro_max_size 65536 gso_max_size 65536"
        }
        "vnet_error" => "a GSO type the virtio-net header cannot describe",
        "untagged" => {
            "frames without the origin tag on the capture interface: not from the capture program"
        }
        _ => "a super-frame's headers could not be rewritten for a piece",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_reach_the_metrics_by_reason_as_they_grow() {
        let metrics = Metrics::new();
        let mut log = RefusalLog::default();
        let mut inside = PortCounters {
            rx_no_large_slot: 3,
            ..PortCounters::default()
        };
        let outside = PortCounters {
            rx_vnet_errors: 1,
            ..PortCounters::default()
        };
        let cuts = CutCounters::default();
        log.observe(Refusals::of(&inside, &outside, &cuts), &metrics);
        inside.rx_no_large_slot = 5;
        inside.rx_gso_truncated = 2;
        inside.rx_untagged = 4;
        let now = Refusals::of(&inside, &outside, &cuts);
        log.observe(now, &metrics);
        assert_eq!(now.total(), 12);
        let text = metrics.encode();
        for (reason, n) in [
            ("no_large_slot", 5),
            ("vnet_error", 1),
            ("gso_truncated", 2),
            ("untagged", 4),
        ] {
            let line = format!("metronome_rx_refused_frames_total{{reason=\"{reason}\"}} {n}");
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("reason=\"oversize\""));
    }
}
