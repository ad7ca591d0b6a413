//! Why a comparison or the demo failed: one error type for every mode of `metronome compare`
//! and for `metronome demo`.

use super::START_TIMEOUT;
use crate::netns::TopoError;
use crate::trafficgen::TrafficError;

/// Why a comparison or the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Building or using the topology failed (also: CAP_NET_ADMIN missing).
    #[error("{0}")]
    Topo(#[from] TopoError),
    /// The traffic generator failed.
    #[error("{0}")]
    Traffic(#[from] TrafficError),
    /// The daemon could not open its ports.
    #[error("{0}")]
    Port(#[from] metronome_io::PortError),
    /// An etcd cluster of the run could not be started or driven.
    #[error("{0}")]
    Etcd(#[from] crate::etcd::EtcdError),
    /// The simulator refused the scenario (the simulated `demo`).
    #[error("simulator: {0}")]
    Sim(#[from] metronome_sim::ScenarioError),
    /// The daemon refused the configuration or stopped at once (`demo --attach`).
    #[error("{0}")]
    Refused(String),
    /// No bulk traffic reached the receiver in time.
    #[error("{shaper} at {target_bps} bit/s with {flows} flows: no traffic reached the receiver within {START_TIMEOUT:?}")]
    NoTraffic {
        /// The shaper of the run.
        shaper: &'static str,
        /// Its target.
        target_bps: u64,
        /// Its flows.
        flows: usize,
    },
}

impl CompareError {
    /// Whether this is the missing CAP_NET_ADMIN (the CLI exits 2 with one line).
    pub fn is_missing_privilege(&self) -> bool {
        matches!(self, CompareError::Topo(TopoError::MissingPrivilege(_)))
    }
}
