//! The cluster agent's series (`crate::ops::cluster`): per cluster class its limit, this
//! daemon's share and the number of peers; the last etcd revision seen and its age; whether etcd
//! answers; the agent's state; its writes, etcd errors, moves to another member and state
//! transitions. Written by the
//! agent's thread only, none of them by a shaping loop.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The agent's state (`metronome_cluster_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentState {
    /// No share from etcd yet: the floors.
    Joining,
    /// Shares computed from etcd's records.
    Shared,
    /// etcd unreachable for at most `hold`: the last shares.
    Holding,
    /// etcd unreachable for longer than `hold`: the floors.
    Floor,
}

impl AgentState {
    /// The label value.
    pub const fn label(self) -> &'static str {
        match self {
            AgentState::Joining => "joining",
            AgentState::Shared => "shared",
            AgentState::Holding => "holding",
            AgentState::Floor => "floor",
        }
    }
}

/// `{class="..."}` of the cluster series (the daemon's, never per silo).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ClusterClassLabel {
    class: String,
}

/// `{state="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StateLabel {
    state: &'static str,
}

/// `{op="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OpLabel {
    op: &'static str,
}

/// `{to="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ToLabel {
    to: &'static str,
}

/// `{reason="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RefusedLabel {
    reason: &'static str,
}

/// The agent's states, in label order (`metronome_cluster_state{state}`).
pub const CLUSTER_STATES: [&str; 4] = [
    AgentState::Joining.label(),
    AgentState::Shared.label(),
    AgentState::Holding.label(),
    AgentState::Floor.label(),
];

/// The families (registered in every registry; without a `[cluster]` they stay at zero and the
/// per-class ones have no series).
#[derive(Clone, Default)]
pub struct ClusterMetrics {
    limit: Family<ClusterClassLabel, Gauge>,
    share: Family<ClusterClassLabel, Gauge>,
    peers: Family<ClusterClassLabel, Gauge>,
    revision: Gauge,
    revision_age: Gauge<f64, AtomicU64>,
    reachable: Gauge,
    state: Family<StateLabel, Gauge>,
    writes: Counter,
    errors: Family<OpLabel, Counter>,
    failovers: Counter,
    transitions: Family<ToLabel, Counter>,
    refused: Family<RefusedLabel, Counter>,
}

impl std::fmt::Debug for ClusterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterMetrics").finish_non_exhaustive()
    }
}

impl ClusterMetrics {
    /// Registers the families under `metronome_cluster_*`.
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "cluster_limit_bps",
            "A cluster class's limit: the rate of all daemons of the cluster together, bit/s",
            self.limit.clone(),
        );
        r.register(
            "cluster_share_bps",
            "The share of a cluster class's limit this daemon enforces, bit/s",
            self.share.clone(),
        );
        r.register(
            "cluster_peers",
            "Other daemons with a record of the cluster class in the etcd revision in use",
            self.peers.clone(),
        );
        r.register(
            "cluster_revision",
            "The last etcd revision this daemon has seen",
            self.revision.clone(),
        );
        r.register(
            "cluster_revision_age_seconds",
            "Seconds since etcd last answered this daemon (the age of its last revision)",
            self.revision_age.clone(),
        );
        r.register(
            "cluster_etcd_reachable",
            "1 while etcd answers within the period, else 0",
            self.reachable.clone(),
        );
        r.register(
            "cluster_state",
            "The cluster agent's state: joining (floor until the first share), shared (shares \
             from etcd), holding (etcd unreachable, last shares kept for [cluster] hold), floor \
             (etcd unreachable for longer: the floors)",
            self.state.clone(),
        );
        r.register(
            "cluster_writes",
            "Writes to etcd: records published and lease keep-alives",
            self.writes.clone(),
        );
        r.register(
            "cluster_etcd_errors",
            "etcd requests that failed or timed out, by operation (connect, lease, keepalive, \
             put, get, watch)",
            self.errors.clone(),
        );
        r.register(
            "cluster_failovers",
            "Times the agent moved to the next etcd member of [cluster] etcd after a request \
             failed",
            self.failovers.clone(),
        );
        r.register(
            "cluster_transitions",
            "Changes of the cluster agent's state, by the state entered",
            self.transitions.clone(),
        );
        r.register(
            "cluster_records_refused",
            "Records under the cluster's prefix that were not used, by reason (malformed, \
             class: a class this daemon does not have, weight: a weight above 1000000, \
             too_many_hosts: beyond the [cluster] max_hosts lowest host ids)",
            self.refused.clone(),
        );
    }

    /// Sets class `class`'s limit.
    pub fn set_limit(&self, class: &str, bps: u64) {
        gauge(&self.limit, class).set(clamp(bps));
    }

    /// Sets the share class `class` enforces.
    pub fn set_share(&self, class: &str, bps: u64) {
        gauge(&self.share, class).set(clamp(bps));
    }

    /// Sets the number of peers of class `class`.
    pub fn set_peers(&self, class: &str, peers: u64) {
        gauge(&self.peers, class).set(clamp(peers));
    }

    /// Sets the last revision seen and its age.
    pub fn set_revision(&self, revision: i64, age_seconds: f64) {
        self.revision.set(revision);
        self.revision_age.set(age_seconds);
    }

    /// Sets whether etcd answers.
    pub fn set_reachable(&self, reachable: bool) {
        self.reachable.set(i64::from(reachable));
    }

    /// Makes `state` (one of [`CLUSTER_STATES`]) the current one; counts a transition when it
    /// changed.
    pub fn set_state(&self, state: &'static str, changed: bool) {
        for s in CLUSTER_STATES {
            self.state
                .get_or_create(&StateLabel { state: s })
                .set(i64::from(s == state));
        }
        if changed {
            self.transitions.get_or_create(&ToLabel { to: state }).inc();
        }
    }

    /// Counts `n` writes.
    pub fn wrote(&self, n: u64) {
        self.writes.inc_by(n);
    }

    /// Counts a failed request of `op`.
    pub fn error(&self, op: &'static str) {
        self.errors.get_or_create(&OpLabel { op }).inc();
    }

    /// Counts a move to the next etcd member.
    pub fn failed_over(&self) {
        self.failovers.inc();
    }

    /// Counts a record not used, for `reason`.
    pub fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&RefusedLabel { reason }).inc();
    }
}

fn gauge<'a>(
    family: &'a Family<ClusterClassLabel, Gauge>,
    class: &str,
) -> impl std::ops::Deref<Target = Gauge> + 'a {
    family.get_or_create(&ClusterClassLabel {
        class: class.to_string(),
    })
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
