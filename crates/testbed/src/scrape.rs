//! # scrape
//!
//! The daemon's metrics as the harness reads them: [`Scrape`], the samples of one Prometheus
//! text exposition parsed once (name, labels, value), queried by name and label; [`Scrape::fetch`]
//! takes one from a daemon's endpoint from inside its namespace, bounded in size and time as
//! `metronome stats` is (`metronome_daemon::ops::metrics::stats::scrape_bounded`). Comment
//! lines (`# HELP`, `# TYPE`) are skipped, and so is a line that does not parse; a timestamp
//! after the value is ignored.

use crate::netns::Namespace;
use metronome_daemon::ops::metrics::stats::{scrape_bounded, MAX_RESPONSE_BYTES};
use std::net::SocketAddr;
use std::time::Duration;

/// How long one scrape may take in all: 2 s.
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(2);

/// One sample of an exposition: `name{key="value",...} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series' metric name.
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// The sample's value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if the sample has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The parsed samples of one exposition, in the order written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    samples: Vec<Sample>,
}

impl Scrape {
    /// Parses a Prometheus text exposition.
    pub fn parse(text: &str) -> Scrape {
        Scrape {
            samples: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// Scrapes the endpoint `addr` from inside `ns`; `None` when it does not answer.
    pub fn fetch(ns: &Namespace, addr: SocketAddr) -> Option<Scrape> {
        Scrape::fetch_text(ns, addr).map(|t| Scrape::parse(&t))
    }

    /// The text of the endpoint `addr` from inside `ns`; `None` when it does not answer.
    pub fn fetch_text(ns: &Namespace, addr: SocketAddr) -> Option<String> {
        ns.run(move || scrape_bounded(addr, MAX_RESPONSE_BYTES, SCRAPE_DEADLINE))
            .ok()?
            .ok()
    }

    /// The samples of metric `name`.
    pub fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The value of the first sample of `name` whose labels hold `key="value"` (the first of
    /// any labels without `label`).
    pub fn value(&self, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
        self.samples(name)
            .find(|s| label.is_none_or(|(k, v)| s.label(k) == Some(v)))
            .map(|s| s.value)
    }

    /// The sum of the samples of `name`, whatever their labels.
    pub fn sum(&self, name: &str) -> f64 {
        self.samples(name).map(|s| s.value).sum()
    }
}

/// One sample line; `None` for a comment, an empty line or one that does not parse.
fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(inner) => parse_labels(inner)?,
        None => (Vec::new(), &line[name_end..]),
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    (!name.is_empty()).then(|| Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The labels after a series' `{` up to its `}`, and what follows it.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(rest) = text.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, after) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_owned(), value));
        text = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP metronome_cluster_share_bps The share.\n\
        # TYPE metronome_cluster_share_bps gauge\n\
        metronome_cluster_share_bps{class=\"web\"} 150000000\n\
        metronome_cluster_share_bps{class=\"ab\",site=\"a\"} 9\n\
        metronome_cluster_state{state=\"shared\"} 1\n\
        metronome_cluster_state{state=\"alone\"} 0\n\
        metronome_rx_ring_drops_total{silo=\"0\"} 3\n\
        metronome_rx_ring_drops_total{silo=\"1\"} 4\n\
        metronome_rx_ring_drops_total_extra 100\n\
        metronome_cluster_revision 42 1700000000\n\
        odd{name=\"a \\\"quoted\\\", b\"} 2\n\
        not a sample\n";

    #[test]
    fn samples_are_found_by_name_and_label() {
        let s = Scrape::parse(TEXT);
        let share = |class| s.value("metronome_cluster_share_bps", Some(("class", class)));
        assert_eq!(share("web"), Some(150e6));
        assert_eq!(share("ab"), Some(9.0));
        assert_eq!(share("a"), None);
        assert_eq!(s.value("metronome_cluster_revision", None), Some(42.0));
        assert_eq!(s.value("metronome_cluster_peers", None), None);
        assert_eq!(s.value("odd", Some(("name", "a \"quoted\", b"))), Some(2.0));
        assert_eq!(s.sum("metronome_rx_ring_drops_total"), 7.0);
        let states: Vec<_> = s
            .samples("metronome_cluster_state")
            .map(|x| (x.label("state").unwrap(), x.value))
            .collect();
        assert_eq!(states, [("shared", 1.0), ("alone", 0.0)]);
        assert_eq!(Scrape::parse("# only\n\n"), Scrape::default());
    }
}
