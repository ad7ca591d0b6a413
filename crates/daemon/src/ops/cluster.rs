//! Cluster classes: one limit held by the daemons of a cluster together, through etcd
//! (`[cluster]`, a class's `scope = "cluster"`; docs/config.md "Cluster classes"), by the NBA's
//! water-filling one level up (Carousel §2, §5.3; `metronome_core::cluster`), with no allocator of
//! our own: every daemon computes the same shares from the same revision.
//!
//! Each period the [`agent`] puts a [`record`] per cluster class under its lease, watches the
//! cluster's prefix and enforces [`metronome_core::cluster::own_share`]; the share goes through a
//! [`ClusterCell`] ([`metronome_engine::allocator::cell`]) to the single loop's engine ([`ClusterPort`]) or to the silos'
//! allocator. Before a first share, and after `hold` without etcd, a daemon enforces the `floor`; a
//! vanished daemon's share returns within its lease plus a period. The protocol and the failure
//! rules: `docs/design/carousel.md`.

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
