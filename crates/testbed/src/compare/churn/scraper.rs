//! The daemon's class counters during `compare churn`: its metrics scraped every
//! [`SCRAPE_EVERY`] on a thread of its own, the largest value of each counter kept.

use super::{ChurnError, METRICS_LISTEN, SCRAPE_EVERY};
use crate::netns::{Namespace, TopoError};
use crate::scrape::Scrape;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A class's counters as the scrapes saw them (the largest value of each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ClassCounts {
    pub(super) packets: u64,
    pub(super) drops: u64,
    /// `metronome_class_queued_packets`, the largest a scrape saw.
    pub(super) queued: u64,
}

/// The key under which [`Scraper`] keeps `metronome_class_changes_total{op="add"|"del",
/// result="ok"}` (in `packets`): no class has this name (names are not empty).
pub(super) const CHANGES_OK: &str = "";

/// Scrapes the daemon's metrics every [`SCRAPE_EVERY`] on a thread of its own.
pub(super) struct Scraper {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeMap<String, ClassCounts>>,
}

impl Scraper {
    pub(super) fn start(shaper: &Namespace) -> Result<Scraper, ChurnError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, ns) = (stop.clone(), shaper.clone());
        let thread = std::thread::Builder::new()
            .name("churn-scrape".into())
            .spawn(move || {
                let mut seen = BTreeMap::new();
                loop {
                    let last = flag.load(Ordering::Acquire);
                    if let Some(body) = scrape(&ns) {
                        merge_counts(&body, &mut seen);
                    }
                    if last {
                        return seen;
                    }
                    std::thread::sleep(SCRAPE_EVERY);
                }
            })
            .map_err(TopoError::Io)?;
        Ok(Scraper { stop, thread })
    }

    /// One last scrape, and what they all saw.
    pub(super) fn finish(self) -> BTreeMap<String, ClassCounts> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// The daemon's metrics text, from inside the shaper namespace; `None` when it did not answer.
fn scrape(ns: &Namespace) -> Option<String> {
    Scrape::fetch_text(ns, METRICS_LISTEN.parse().ok()?)
}

/// Adds one scrape's class packets and drops (all reasons summed) and the successful changes
/// to `seen`, keeping the largest value of each (the counters only grow while a class exists).
fn merge_counts(body: &str, seen: &mut BTreeMap<String, ClassCounts>) {
    let scrape = Scrape::parse(body);
    let mut now: BTreeMap<String, ClassCounts> = BTreeMap::new();
    let per_class = |name: &'static str| {
        scrape
            .samples(name)
            .filter_map(|s| Some((s.label("class")?.to_owned(), s.value as u64)))
    };
    for (class, value) in per_class("metronome_class_packets_total") {
        now.entry(class).or_default().packets += value;
    }
    for (class, value) in per_class("metronome_class_queued_packets") {
        now.entry(class).or_default().queued += value;
    }
    for (class, value) in per_class("metronome_class_drops_total") {
        now.entry(class).or_default().drops += value;
    }
    let changes_ok = scrape
        .samples("metronome_class_changes_total")
        .filter(|s| s.label("result") == Some("ok") && matches!(s.label("op"), Some("add" | "del")))
        .map(|s| s.value as u64);
    for value in changes_ok {
        now.entry(CHANGES_OK.to_owned()).or_default().packets += value;
    }
    for (class, c) in now {
        let e = seen.entry(class).or_default();
        e.packets = e.packets.max(c.packets);
        e.drops = e.drops.max(c.drops);
        e.queued = e.queued.max(c.queued);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrapes_keep_the_largest_counts_of_each_class() {
        let mut seen = BTreeMap::new();
        let first = "metronome_class_packets_total{class=\"churn-1\"} 5\n\
                     metronome_class_drops_total{class=\"churn-1\",reason=\"horizon\"} 1\n\
                     metronome_class_drops_total{class=\"churn-1\",reason=\"queue_full\"} 2\n\
                     metronome_class_queued_packets{class=\"churn-1\"} 3\n\
                     metronome_class_changes_total{op=\"add\",result=\"ok\"} 3\n\
                     metronome_class_changes_total{op=\"del\",result=\"ok\"} 2\n\
                     metronome_class_changes_total{op=\"del\",result=\"refused\"} 9\n";
        merge_counts(first, &mut seen);
        merge_counts(
            "metronome_class_packets_total{class=\"churn-1\"} 4\n",
            &mut seen,
        );
        assert_eq!(
            seen["churn-1"],
            ClassCounts {
                packets: 5,
                drops: 3,
                queued: 3
            }
        );
        assert_eq!(seen[CHANGES_OK].packets, 5);
    }
}
