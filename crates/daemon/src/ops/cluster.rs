//! Cluster classes: one limit held by the daemons of a cluster together, through etcd
//! (`[cluster]`, a class's `scope = "cluster"`; docs/config.md "Cluster classes").
//!
//! Carousel's rates of aggregates "come from a central allocator" above the hosts (§2) and a
//! limit spanning cores is split by water-filling over the cores' measured demands (§5.3,
//! `metronome_core::nba`). Here the same water-filling runs one level up, on every daemon, over
//! the demands the daemons publish in etcd (`metronome_core::cluster`), with no allocator of our
//! own: every daemon computes the same shares from the same revision.
//!
//! * **Protocol** ([`agent`]): each period every daemon puts a record per cluster class at
//!   `<prefix>/<cluster>/<class>/<host>` ([`record`]: its demand sample, the previous one, the
//!   share it enforced between them, its weight), attached to its lease; it watches the
//!   cluster's prefix; after each put, and within 100 ms of every revision its watch delivers,
//!   it enforces [`metronome_core::cluster::own_share`] of the records it has seen and its own
//!   newest record.
//! * **Where the share goes** ([`metronome_engine::allocator::cell`]): the agent writes the share into the class's
//!   [`ClusterCell`]; the single loop puts it in force in its engine at its next iteration
//!   ([`ClusterPort`]), or, with silos, the coordinator makes it the aggregate its allocator
//!   splits over the silos (`crate::driver::silo::Allocator`). A zero share (a zero `floor`)
//!   closes the class: its frames are refused at admission (`queue_full`).
//! * **Demand**: every loop publishes each cluster class's bytes sent and held (its backlog) to
//!   the cell every millisecond; the agent sums them once per period.
//! * **Failures**: before its first share (a new daemon, or etcd unreachable at start) a daemon
//!   enforces the `floor`. A daemon that vanishes stops renewing its lease; etcd deletes its
//!   records when the lease expires and the others compute without it within 100 ms of the
//!   deletion: its share returns within the lease plus one period. When etcd cannot be reached (no request
//!   answered for a period, each failing or passing its one-period deadline), the daemon keeps its last shares for `hold`
//!   (counted from the last request etcd took), then falls to the floors; it logs both and
//!   `metronome_cluster_state` says which. With `hold` at most the lease (the default), a
//!   daemon cut off from a working etcd is at its floor before its lease can expire and the
//!   others take its share: the sum of what the daemons enforce exceeds the limit by at most the
//!   floors of the daemons without a share. A stopping daemon revokes its lease: its share
//!   returns at the others' next period.

pub mod agent;
pub mod record;

pub use crate::ops::metrics::cluster::AgentState;
pub use agent::Agent;
pub use metronome_engine::allocator::cell::{apply_share, ClusterCell, ClusterPort};

use crate::ops::config::cluster::ClusterSection;
use crate::ops::config::Config;
use std::sync::Arc;

/// Why the cluster agent cannot start (a start error: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A TLS file could not be read.
    #[error("cluster.tls.{field}: cannot read {path}: {error}")]
    TlsFile {
        /// `ca`, `cert` or `key`.
        field: &'static str,
        /// The path.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// No `[cluster] host` and no usable hostname.
    #[error("cluster.host: not set and the hostname cannot be read ({0}): set [cluster] host")]
    Host(String),
    /// The agent's thread could not start.
    #[error("cluster agent: cannot start its thread: {0}")]
    Thread(std::io::Error),
}

/// The cells of `config`'s cluster classes for `loops` loops (silos), each starting at its
/// floor; empty without a `[cluster]`.
pub fn cells(config: &Config, loops: usize) -> Vec<Arc<ClusterCell>> {
    let Some(section) = &config.cluster else {
        return Vec::new();
    };
    section
        .classes
        .iter()
        .map(|c| {
            Arc::new(ClusterCell::new(
                &c.name,
                c.limit,
                loops,
                section.floor.rate(c.limit),
            ))
        })
        .collect()
}

/// What the agent needs from the file system, read before the daemon drops its privileges: the
/// host id and the connection's options (TLS files read).
#[derive(Debug)]
pub struct Prepared {
    section: ClusterSection,
    host: String,
    options: etcd_client::ConnectOptions,
}

impl Prepared {
    /// The host id this daemon publishes as.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Starts the agent for `cells` ([`cells`]), counting into `metrics`.
    pub fn start(
        self,
        cells: Vec<Arc<ClusterCell>>,
        metrics: crate::ops::metrics::cluster::ClusterMetrics,
    ) -> Result<Agent, ClusterError> {
        Agent::start(self.section, self.host, self.options, cells, metrics)
            .map_err(ClusterError::Thread)
    }
}

/// Reads what the agent of `section` needs (see [`Prepared`]).
pub fn prepare(section: &ClusterSection) -> Result<Prepared, ClusterError> {
    let host = match &section.host {
        Some(h) => h.clone(),
        None => hostname()?,
    };
    let period = std::time::Duration::from_nanos(section.period.as_nanos());
    let mut options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(period)
        .with_timeout(period)
        .with_keep_alive(period, period)
        .with_require_leader(true);
    if let Some(tls) = &section.tls {
        let read = |field: &'static str, path: &std::path::Path| {
            std::fs::read(path).map_err(|error| ClusterError::TlsFile {
                field,
                path: path.display().to_string(),
                error,
            })
        };
        let mut t = etcd_client::TlsOptions::new();
        if let Some(ca) = &tls.ca {
            t = t.ca_certificate(etcd_client::Certificate::from_pem(read("ca", ca)?));
        }
        if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
            t = t.identity(etcd_client::Identity::from_pem(
                read("cert", cert)?,
                read("key", key)?,
            ));
        }
        if let Some(domain) = &tls.domain {
            t = t.domain_name(domain.clone());
        }
        options = options.with_tls(t);
    }
    Ok(Prepared {
        section: section.clone(),
        host,
        options,
    })
}

/// The machine's hostname as a host id: characters outside A-Z a-z 0-9 _ - . become `-`.
fn hostname() -> Result<String, ClusterError> {
    let name = nix::unistd::gethostname().map_err(|e| ClusterError::Host(e.to_string()))?;
    let name = name.to_string_lossy();
    let id: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if id.is_empty() {
        return Err(ClusterError::Host("empty".to_string()));
    }
    Ok(id)
}
