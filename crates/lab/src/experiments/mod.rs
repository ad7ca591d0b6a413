//! The registry of experiment functions, looked up by the name in a plan's `[experiment]`.
//!
//! An experiment is a plain function from one [`Point`] to the rows it measured there: typed
//! getters, randomness seeded from the point, no printing, only the columns its plan documents. To
//! add one: write `src/experiments/<name>.rs` with `pub fn run(point: &Point) -> Result<Vec<Row>,
//! LabError>`, add `mod <name>;` and an [`Experiment`] entry to [`REGISTRY`], and write
//! `lab/plans/<name>.toml`, listed in [`crate::plans::EMBEDDED`]. What each experiment reproduces:
//! the `Lab:` sections of docs/design/ (carousel.md, zd.md, mq-ecn.md, nicpic.md).

pub mod carousel_backpressure;
pub mod carousel_conformance;
pub mod cluster;
pub mod fairq;
pub mod incast;
pub mod mqecn;
pub mod nba;
pub mod nicpic;
mod rows;
mod simulated;
pub mod wheel_granularity;
pub mod zd;

use crate::error::LabError;
use crate::point::{Point, Row};

/// The signature of an experiment: one point in, its rows out.
pub type ExperimentFn = fn(&Point) -> Result<Vec<Row>, LabError>;

/// A registered experiment.
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    /// The name plans refer to (`[experiment] name`), kebab-case.
    pub name: &'static str,
    /// One line on what it measures, for `metronome lab --list`.
    pub summary: &'static str,
    /// The function.
    pub run: ExperimentFn,
}

/// Every experiment the lab can run.
pub const REGISTRY: &[Experiment] = &[
    Experiment {
        name: wheel_granularity::NAME,
        summary: "rate conformance of one timing wheel vs slot granularity (Carousel Fig. 16)",
        run: wheel_granularity::run,
    },
    Experiment {
        name: carousel_backpressure::NAME,
        summary: "packets held in the shaper: Deferred Completions vs Vegas vs none (Carousel Fig. 14-15)",
        run: carousel_backpressure::run,
    },
    Experiment {
        name: carousel_conformance::NAME,
        summary: "rate conformance of timing wheel, fq tree and HTB-like bucket (Carousel Fig. 12, 13, 16)",
        run: carousel_conformance::run,
    },
    Experiment {
        name: incast::NAME,
        summary: "100:1 incast held to a rate at the receiver: ACK shaping vs ingress queue (Carousel Fig. 19)",
        run: incast::run,
    },
    Experiment {
        name: mqecn::NAME,
        summary: "ECN on a multi-queue switch port: per-queue standard/min, per-port, MQ-ECN (MQ-ECN Fig. 1, 3, 6-10)",
        run: mqecn::run,
    },
    Experiment {
        name: zd::NAME,
        summary: "TSQ + pfifo vs zD: drops, retransmissions, latency tail, 500-16k flows (zD Fig. 3, 9-12)",
        run: zd::run,
    },
    Experiment {
        name: nicpic::NAME,
        summary: "inter-packet gap deviation and ns/packet of NicPic, HTB-like and timing wheel, 16-10k classes (NicPic Fig. 2)",
        run: nicpic::run,
    },
    Experiment {
        name: nba::NAME,
        summary: "an aggregate limit over 2-4 per-core shapers via the NIC-level bandwidth allocator, shifting demand (Carousel §5.3)",
        run: nba::run,
    },
    Experiment {
        name: fairq::NAME,
        summary: "a sparse request/response flow beside 16-256 bulk flows in one rate-limited class: single FIFO vs fair mode (NicPic §3)",
        run: fairq::run,
    },
    Experiment {
        name: cluster::NAME,
        summary: "one limit over 3-1000 hosts through an etcd-like store: periods to settle, writes/s, overshoot (Carousel §2, §5.3)",
        run: cluster::run,
    },
];

/// The experiment called `name`.
pub fn find(name: &str) -> Option<&'static Experiment> {
    REGISTRY.iter().find(|e| e.name == name)
}

/// The experiment called `name`, or [`LabError::UnknownExperiment`] listing the known ones.
pub fn lookup(name: &str) -> Result<&'static Experiment, LabError> {
    find(name).ok_or_else(|| LabError::UnknownExperiment {
        name: name.to_string(),
        known: names().map(str::to_string).collect(),
    })
}

/// The registered names, in registry order.
pub fn names() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|e| e.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_kebab_case() {
        for (i, e) in REGISTRY.iter().enumerate() {
            assert!(
                REGISTRY[..i].iter().all(|o| o.name != e.name),
                "{} twice",
                e.name
            );
            assert!(
                e.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{} is not kebab-case",
                e.name
            );
        }
    }

    #[test]
    fn unknown_experiment_lists_the_known_ones() {
        let e = lookup("no-such").unwrap_err();
        assert!(e.is_bad_input());
        let text = e.to_string();
        assert!(
            text.contains("no-such") && text.contains(wheel_granularity::NAME),
            "{text}"
        );
    }
}
