//! `[cluster]` and a class's `scope = "cluster"`: limits shared by the daemons of a cluster
//! through etcd (`metronome_daemon::ops::cluster`, docs/config.md "Cluster classes").
//!
//! A class with `scope = "cluster"` has a `rate` that is the limit of all daemons of the cluster
//! together (the classes of the same name on every daemon whose `[cluster] name` is the same).
//! Everything that decides the shares (the class's rate, `period`, `floor`) must be the same on
//! every daemon of the cluster; `host` and `weight` are each daemon's own.
//!
//! Checks: `name` and `host` are plain (they become parts of etcd keys); every `etcd` endpoint
//! is an `http://` or `https://` URL with a host; `period` lies in [100 ms, 60 s]; `lease` is whole
//! seconds, at least 2 (the shortest TTL etcd grants with its default election timeout) and at
//! least twice the period (a keep-alive goes out every third of it); `floor` is a rate, a
//! percentage of the class's rate, or 0; `weight` lies in [1, `MAX_WEIGHT`]; `max_hosts` lies in
//! [2, 100 000]; `tls.cert` and `tls.key` come together, and so do `etcd_user` and
//! `etcd_password_file` (the file is read at start, by the daemon); a cluster class has a `rate`
//! and needs `[cluster]`.

use super::raw::Scalar;
use super::validate::{Result, Validator};
use metronome_core::cluster::{DEFAULT_MAX_HOSTS, MAX_WEIGHT};
use metronome_core::{Duration, Rate};
use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;

/// Default `[cluster] period`: 1 s, the reporting period of docs/config.md.
pub const DEFAULT_CLUSTER_PERIOD: Duration = Duration::from_secs(1);
/// Default `[cluster] lease`: 3 s, three periods (a daemon that vanished gives its share back
/// within the lease plus one period; the lab's `leave` runs settle in 3.6 periods with it).
pub const DEFAULT_CLUSTER_LEASE: Duration = Duration::from_secs(3);
/// Default `[cluster] floor`: 1 % of the class's rate, in parts per million (the reserve
/// Carousel §5.3 keeps for an idle core, `metronome_core::cluster::DEFAULT_JOIN_FLOOR_FRACTION`).
pub const DEFAULT_CLUSTER_FLOOR_PPM: u32 = 10_000;
/// Default `[cluster] prefix`: the etcd key prefix under which every cluster's records live.
pub const DEFAULT_CLUSTER_PREFIX: &str = "/metronome";
/// Longest cluster or host name in bytes (a part of every record's key).
const MAX_NAME: usize = 64;
/// Shortest lease etcd grants with its default timing: 2 s (its minimum TTL is 1.5 times the
/// election timeout of 1 s, rounded up to whole seconds).
const MIN_LEASE: Duration = Duration::from_secs(2);
/// Bounds of `period`: 100 ms (ten writes per second per class and daemon) to 60 s.
const MIN_PERIOD: Duration = Duration::from_millis(100);
const MAX_PERIOD: Duration = Duration::from_secs(60);
/// Largest `max_hosts`: 100 000 (a record is about 200 bytes: 20 MB of records per class).
const MAX_MAX_HOSTS: i64 = 100_000;

/// `[cluster]` as serde reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    pub name: Option<Spanned<String>>,
    pub etcd: Option<Spanned<Vec<Spanned<String>>>>,
    pub host: Option<Spanned<String>>,
    pub period: Option<Spanned<String>>,
    pub lease: Option<Spanned<String>>,
    pub hold: Option<Spanned<String>>,
    pub floor: Option<Spanned<Scalar>>,
    pub weight: Option<Spanned<i64>>,
    pub prefix: Option<Spanned<String>>,
    pub max_hosts: Option<Spanned<i64>>,
    pub etcd_user: Option<Spanned<String>>,
    pub etcd_password_file: Option<Spanned<String>>,
    pub tls: Option<Spanned<RawTls>>,
}

/// `[cluster.tls]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub ca: Option<Spanned<String>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub domain: Option<Spanned<String>>,
}

/// What a daemon enforces for a cluster class when it has no share from etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterFloor {
    /// A rate in bit/s (0: fail closed).
    Rate(u64),
    /// Parts per million of the class's rate.
    PartsPerMillion(u32),
}

impl ClusterFloor {
    /// The floor of a class whose cluster limit is `limit`, at most `limit`.
    pub fn rate(self, limit: Rate) -> Rate {
        let bps = match self {
            ClusterFloor::Rate(b) => b,
            ClusterFloor::PartsPerMillion(p) => {
                (u128::from(limit.bps()) * u128::from(p) / 1_000_000) as u64
            }
        };
        Rate::from_bps(bps.min(limit.bps()))
    }

    /// The same floor for the share computation (`metronome_core::cluster::ClusterConfig`).
    pub fn core(self) -> metronome_core::cluster::Floor {
        match self {
            ClusterFloor::Rate(b) => metronome_core::cluster::Floor::Bps(b),
            ClusterFloor::PartsPerMillion(p) => {
                metronome_core::cluster::Floor::FractionOfLimit(f64::from(p) / 1e6)
            }
        }
    }
}

impl std::fmt::Display for ClusterFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterFloor::Rate(b) => write!(f, "{}", Rate::from_bps(*b)),
            ClusterFloor::PartsPerMillion(p) => write!(f, "{}%", f64::from(*p) / 1e4),
        }
    }
}

/// `[cluster.tls]`: passed to the etcd client as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterTls {
    /// PEM file of the CA that signed etcd's certificates (else the system's roots are not used:
    /// give one).
    pub ca: Option<PathBuf>,
    /// PEM certificate of this daemon (client authentication), with `key`.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// The name etcd's certificate must carry (default: the endpoint's host).
    pub domain: Option<String>,
}

/// `[cluster] etcd_user` and `etcd_password_file`: etcd's authentication (its users and roles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterAuth {
    /// The etcd user the daemon authenticates as.
    pub user: String,
    /// The file holding its password (one line), read at start.
    pub password_file: PathBuf,
}

/// One class with `scope = "cluster"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterClass {
    /// The class's name (the same on every daemon).
    pub name: String,
    /// Its `rate`: the limit of the whole cluster.
    pub limit: Rate,
}

/// The validated `[cluster]`, with the classes that use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSection {
    /// Daemons of the same name share limits.
    pub name: String,
    /// etcd endpoint URLs.
    pub etcd: Vec<String>,
    /// This daemon's id in the records; `None`: the machine's hostname.
    pub host: Option<String>,
    /// Reporting period.
    pub period: Duration,
    /// Lease length (whole seconds).
    pub lease: Duration,
    /// How long the last share is kept while etcd cannot be reached (default: the lease).
    pub hold: Duration,
    /// What a class enforces without a share.
    pub floor: ClusterFloor,
    /// This daemon's weight.
    pub weight: u32,
    /// Key prefix.
    pub prefix: String,
    /// Most hosts counted per cluster class, this one included.
    pub max_hosts: usize,
    /// The etcd user and its password file; `None`: no authentication.
    pub auth: Option<ClusterAuth>,
    /// TLS towards etcd.
    pub tls: Option<ClusterTls>,
    /// The cluster classes, in file order.
    pub classes: Vec<ClusterClass>,
}

impl ClusterSection {
    /// The etcd key prefix of class `class`'s records: `<prefix>/<name>/<class>/`.
    pub fn class_prefix(&self, class: &str) -> String {
        format!(
            "{}/{}/{}/",
            self.prefix.trim_end_matches('/'),
            self.name,
            class
        )
    }

    /// The prefix of every record of this cluster: `<prefix>/<name>/`.
    pub fn cluster_prefix(&self) -> String {
        format!("{}/{}/", self.prefix.trim_end_matches('/'), self.name)
    }
}

/// True for a name that can be a part of an etcd key here: 1 to [`MAX_NAME`] of A-Z a-z 0-9 _ - .
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// True for `http://HOST[:PORT]` or `https://...` with a non-empty host.
fn endpoint_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) => {
            let authority = r.split('/').next().unwrap_or("");
            !authority.is_empty()
                && !authority.starts_with(':')
                && !authority.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

impl Validator<'_> {
    /// Validates `[cluster]`; the classes are filled in by the caller.
    pub(super) fn cluster(&self, spanned: &Spanned<RawCluster>) -> Result<ClusterSection> {
        let raw = spanned.get_ref();
        let name = match &raw.name {
            Some(n) if plain(n.get_ref()) => n.get_ref().clone(),
            Some(n) => {
                return Err(self.invalid(
                    n.span(),
                    "cluster.name",
                    format!(
                        "{:?} is not a cluster name (1 to {MAX_NAME} of A-Z a-z 0-9 _ - .)",
                        n.get_ref()
                    ),
                ))
            }
            None => {
                return Err(self.invalid(
                    spanned.span(),
                    "cluster",
                    "missing field `name`: daemons of the same name share limits".to_string(),
                ))
            }
        };
        let etcd = match &raw.etcd {
            Some(list) if !list.get_ref().is_empty() => {
                let mut out = Vec::new();
                for (i, url) in list.get_ref().iter().enumerate() {
                    if !endpoint_url(url.get_ref()) {
                        return Err(self.invalid(
                            url.span(),
                            &format!("cluster.etcd[{i}]"),
                            format!(
                                "{:?} is not an etcd endpoint (http://HOST:PORT or https://HOST:PORT)",
                                url.get_ref()
                            ),
                        ));
                    }
                    out.push(url.get_ref().clone());
                }
                out
            }
            Some(list) => {
                return Err(self.invalid(
                    list.span(),
                    "cluster.etcd",
                    "needs at least one endpoint URL".to_string(),
                ))
            }
            None => {
                return Err(self.invalid(
                    spanned.span(),
                    "cluster",
                    "missing field `etcd`: the endpoint URLs, e.g. [\"http://10.0.0.5:2379\"]"
                        .to_string(),
                ))
            }
        };
        let host = match &raw.host {
            Some(h) if plain(h.get_ref()) => Some(h.get_ref().clone()),
            Some(h) => {
                return Err(self.invalid(
                    h.span(),
                    "cluster.host",
                    format!(
                        "{:?} is not a host id (1 to {MAX_NAME} of A-Z a-z 0-9 _ - .)",
                        h.get_ref()
                    ),
                ))
            }
            None => None,
        };
        let period = match &raw.period {
            Some(p) => {
                let d = self.duration(p, "cluster.period")?;
                if !(MIN_PERIOD..=MAX_PERIOD).contains(&d) {
                    return Err(self.invalid(
                        p.span(),
                        "cluster.period",
                        format!("must lie between {MIN_PERIOD} and {MAX_PERIOD}"),
                    ));
                }
                d
            }
            None => DEFAULT_CLUSTER_PERIOD,
        };
        let lease = match &raw.lease {
            Some(l) => {
                let d = self.duration(l, "cluster.lease")?;
                let whole = d.as_nanos() % 1_000_000_000 == 0;
                if !whole || d < MIN_LEASE || d.as_nanos() < 2 * period.as_nanos() {
                    return Err(self.invalid(
                        l.span(),
                        "cluster.lease",
                        format!(
                            "must be whole seconds, at least {MIN_LEASE} and at least twice \
                             the period ({period})"
                        ),
                    ));
                }
                d
            }
            None => {
                let twice = Duration::from_nanos(2 * period.as_nanos());
                let secs = twice.as_nanos().div_ceil(1_000_000_000);
                DEFAULT_CLUSTER_LEASE.max(Duration::from_secs(secs))
            }
        };
        let hold = match &raw.hold {
            Some(h) => self.duration(h, "cluster.hold")?,
            None => lease,
        };
        let floor = match &raw.floor {
            Some(f) => self.cluster_floor(f)?,
            None => ClusterFloor::PartsPerMillion(DEFAULT_CLUSTER_FLOOR_PPM),
        };
        let weight = match &raw.weight {
            Some(w) => self.int_in(w, "cluster.weight", 1, i64::from(MAX_WEIGHT))? as u32,
            None => 1,
        };
        let prefix = match &raw.prefix {
            Some(p) => {
                let text = p.get_ref();
                if !text.starts_with('/')
                    || text.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(self.invalid(
                        p.span(),
                        "cluster.prefix",
                        format!("{text:?} is not a key prefix (starts with '/', no whitespace)"),
                    ));
                }
                text.clone()
            }
            None => DEFAULT_CLUSTER_PREFIX.to_string(),
        };
        let max_hosts = match &raw.max_hosts {
            Some(m) => self.int_in(m, "cluster.max_hosts", 2, MAX_MAX_HOSTS)? as usize,
            None => DEFAULT_MAX_HOSTS,
        };
        let auth = self.cluster_auth(raw)?;
        let tls = raw.tls.as_ref().map(|t| self.cluster_tls(t)).transpose()?;
        Ok(ClusterSection {
            name,
            etcd,
            host,
            period,
            lease,
            hold,
            floor,
            weight,
            prefix,
            max_hosts,
            auth,
            tls,
            classes: Vec::new(),
        })
    }

    fn cluster_floor(&self, raw: &Spanned<Scalar>) -> Result<ClusterFloor> {
        let field = "cluster.floor";
        match raw.get_ref() {
            Scalar::Int(0) => Ok(ClusterFloor::Rate(0)),
            Scalar::Text(t) if t.trim() == "0" => Ok(ClusterFloor::Rate(0)),
            Scalar::Text(t) if t.trim_end().ends_with('%') => {
                let number = t.trim_end().trim_end_matches('%').trim();
                match number.parse::<f64>() {
                    Ok(p) if (0.0..=100.0).contains(&p) => {
                        Ok(ClusterFloor::PartsPerMillion((p * 1e4).round() as u32))
                    }
                    _ => Err(self.invalid(
                        raw.span(),
                        field,
                        format!("{t:?} is not a percentage of the class's rate (0% to 100%)"),
                    )),
                }
            }
            _ => Ok(ClusterFloor::Rate(self.rate(raw, field)?.bps())),
        }
    }

    fn cluster_auth(&self, raw: &RawCluster) -> Result<Option<ClusterAuth>> {
        match (&raw.etcd_user, &raw.etcd_password_file) {
            (None, None) => Ok(None),
            (Some(u), None) => Err(self.invalid(
                u.span(),
                "cluster.etcd_password_file",
                "missing: `etcd_user` needs `etcd_password_file`, the file of its password"
                    .to_string(),
            )),
            (None, Some(f)) => Err(self.invalid(
                f.span(),
                "cluster.etcd_user",
                "missing: `etcd_password_file` needs `etcd_user`, the etcd user it is the \
                 password of"
                    .to_string(),
            )),
            (Some(u), Some(f)) => {
                let user = u.get_ref();
                if user.is_empty() || user.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(self.invalid(
                        u.span(),
                        "cluster.etcd_user",
                        format!("{user:?} is not an etcd user name (not empty, no whitespace)"),
                    ));
                }
                if f.get_ref().is_empty() {
                    return Err(self.invalid(
                        f.span(),
                        "cluster.etcd_password_file",
                        "needs the path of the password's file".to_string(),
                    ));
                }
                Ok(Some(ClusterAuth {
                    user: user.clone(),
                    password_file: PathBuf::from(f.get_ref()),
                }))
            }
        }
    }

    fn cluster_tls(&self, spanned: &Spanned<RawTls>) -> Result<ClusterTls> {
        let raw = spanned.get_ref();
        let path = |p: &Option<Spanned<String>>| p.as_ref().map(|p| PathBuf::from(p.get_ref()));
        if raw.cert.is_some() != raw.key.is_some() {
            return Err(self.invalid(
                spanned.span(),
                "cluster.tls",
                "`cert` and `key` go together (the daemon's client certificate)".to_string(),
            ));
        }
        Ok(ClusterTls {
            ca: path(&raw.ca),
            cert: path(&raw.cert),
            key: path(&raw.key),
            domain: raw.domain.as_ref().map(|d| d.get_ref().clone()),
        })
    }
}

impl Validator<'_> {
    /// `[cluster]` with the classes whose `scope` is `"cluster"` (each with a `rate`), or
    /// `None` without a `[cluster]` (then no class may have that scope).
    pub(super) fn cluster_classes(
        &self,
        raw: Option<&Spanned<RawCluster>>,
        raw_classes: &[Spanned<super::raw::RawClass>],
        classes: &[super::ClassConfig],
    ) -> Result<Option<ClusterSection>> {
        let mut section = raw.map(|r| self.cluster(r)).transpose()?;
        for (i, (r, c)) in raw_classes.iter().zip(classes).enumerate() {
            let Some(scope) = &r.get_ref().scope else {
                continue;
            };
            let field = format!("class[{i}].scope");
            match scope.get_ref().as_str() {
                "host" => {}
                "cluster" => {
                    let Some(s) = section.as_mut() else {
                        return Err(self.invalid(
                            scope.span(),
                            &field,
                            "a cluster class needs a [cluster] section (name, etcd)".to_string(),
                        ));
                    };
                    let Some(limit) = c.policy.rate else {
                        return Err(self.invalid(
                            scope.span(),
                            &field,
                            "a cluster class needs a `rate`: the limit of the cluster together"
                                .to_string(),
                        ));
                    };
                    s.classes.push(ClusterClass {
                        name: c.name.clone(),
                        limit,
                    });
                }
                other => {
                    return Err(self.invalid(
                        scope.span(),
                        &field,
                        format!("{other:?} is not a scope (\"host\" or \"cluster\")"),
                    ))
                }
            }
        }
        Ok(section)
    }
}
