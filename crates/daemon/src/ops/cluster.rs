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
pub mod peers;
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
    /// `[cluster] etcd_password_file` could not be read, or is open to others, or is empty.
    #[error("cluster.etcd_password_file: {path}: {why}")]
    PasswordFile {
        /// The path.
        path: String,
        /// Why.
        why: String,
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
/// host id and the connection's options (TLS files and the etcd password read).
pub struct Prepared {
    section: ClusterSection,
    host: String,
    options: etcd_client::ConnectOptions,
}

/// Without the connection's options: they hold the etcd password.
impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("section", &self.section)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
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
    if let Some(auth) = &section.auth {
        let password = read_password(&auth.password_file)?;
        // A token lost with a restarted member is fetched again on the next request.
        options = options
            .with_user(auth.user.clone(), password)
            .with_auto_token_refresh(true);
    }
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

/// The password in `path`: its first line, without its line ending. Refused when the file is
/// open to its group or to others (mode `0600` or stricter, as ssh asks of a key) or the
/// password is empty.
pub fn read_password(path: &std::path::Path) -> Result<String, ClusterError> {
    use std::os::unix::fs::PermissionsExt;
    let refuse = |why: String| ClusterError::PasswordFile {
        path: path.display().to_string(),
        why,
    };
    let cannot = |e: std::io::Error| refuse(format!("cannot read it: {e}"));
    // One open: the mode checked is that of the file read.
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let mode = file.metadata().map_err(cannot)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(refuse(format!(
            "mode {mode:03o} lets its group or others at the password: chmod 600 it"
        )));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text).map_err(cannot)?;
    let password = text.lines().next().unwrap_or("");
    if password.is_empty() {
        return Err(refuse("the first line (the password) is empty".to_string()));
    }
    Ok(password.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_password_is_the_first_line_of_a_file_only_its_owner_can_open() {
        let dir = std::env::temp_dir().join(format!("mtr-password-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("password");
        let mode = |m: u32| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
        };
        std::fs::write(&path, "s3cret\nignored\n").unwrap();
        mode(0o600);
        let read = read_password(&path);
        mode(0o640);
        let group = read_password(&path).map_err(|e| e.to_string());
        mode(0o604);
        let others = read_password(&path).map_err(|e| e.to_string());
        std::fs::write(&path, "\n").unwrap();
        mode(0o400);
        let empty = read_password(&path).map_err(|e| e.to_string());
        let missing = read_password(&dir.join("missing")).map_err(|e| e.to_string());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read.unwrap(), "s3cret");
        for (err, want) in [
            (group, "640"),
            (others, "604"),
            (empty, "empty"),
            (missing, "cannot read"),
        ] {
            let err = err.unwrap_err();
            assert!(err.starts_with("cluster.etcd_password_file: "), "{err}");
            assert!(err.contains(want), "{err}");
        }
    }
}
