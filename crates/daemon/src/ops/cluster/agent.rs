//! The cluster agent: one thread with a single-threaded tokio runtime that talks to etcd for every
//! cluster class of the daemon (the protocol and the failures: `crate::ops::cluster`).
//!
//! The session grants a lease, reads the cluster's records at one revision and watches from the
//! next; each period it puts each class's record from its [`ClusterCell`] and enforces
//! [`own_share`], again within `HOUSEKEEPING` of every revision the watch delivers. Every request
//! has a one-period deadline; a failure moves the session to the next member of `[cluster] etcd`
//! (`Runner::fail_over`), one member at a time. Why one member at a time rather than balancing:
//! `docs/design/carousel.md`. What other hosts wrote is checked as it is read ([`super::peers`]).

use super::peers::{ClassRecords, Refusal, RefusalLog};
use super::record::{decode, encode};
use super::ClusterCell;
use crate::ops::config::cluster::ClusterSection;
use crate::ops::metrics::cluster::AgentState;
use crate::ops::metrics::cluster::ClusterMetrics;
use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions,
    WatchOptions, WatchStream,
};
use metronome_core::cluster::{own_share, ClusterConfig, HostRecord, UsageSample};
use metronome_core::{Clock, Timestamp};
use metronome_io::MonotonicClock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

/// How often the agent looks at its stop flag, its state and its gauges: every 100 ms.
const HOUSEKEEPING: StdDuration = StdDuration::from_millis(100);
/// How long a stopping agent waits for etcd to revoke its lease: 1 s.
const REVOKE_TIMEOUT: StdDuration = StdDuration::from_secs(1);

/// One class as the agent keeps it.
struct AgentClass {
    cell: Arc<ClusterCell>,
    prefix: String,
    key: String,
    /// The sample of the last record etcd took (the start of the next measured period).
    previous: Option<UsageSample>,
    /// The share in force, since `changed_at`, and the integral of the shares in force since
    /// the last record (bit/s × ns).
    share: u64,
    changed_at: Timestamp,
    integral: u128,
    /// Whether a share was computed from a revision since the session began.
    computed: bool,
    /// The record etcd took last.
    newest: Option<HostRecord<String>>,
}

impl AgentClass {
    fn set_share(&mut self, bps: u64, now: Timestamp) {
        let ns = now.saturating_since(self.changed_at).as_nanos();
        self.integral += u128::from(self.share) * u128::from(ns);
        self.changed_at = now;
        self.share = bps;
        self.cell.set_share(bps);
    }

    /// The mean share in force from `since` to `now` (the share in force without `since`).
    fn enforced(&self, since: Option<Timestamp>, now: Timestamp) -> u64 {
        let Some(since) = since else {
            return self.share;
        };
        let span = now.saturating_since(since).as_nanos();
        if span == 0 {
            return self.share;
        }
        let tail = now.saturating_since(self.changed_at).as_nanos();
        let total = self.integral + u128::from(self.share) * u128::from(tail);
        (total / u128::from(span)).min(u128::from(u64::MAX)) as u64
    }
}

/// An open session with etcd.
struct Session {
    /// A client of one member, [`Runner::member`].
    client: Client,
    lease: i64,
    keeper: LeaseKeeper,
    keep_alive: LeaseKeepAliveStream,
    watch: Option<WatchStream>,
}

/// The running agent (see the module docs).
pub struct Agent {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts the agent of `section` as host `host`, connecting with `options`, for `cells`
    /// (one per cluster class, in `section.classes` order).
    pub fn start(
        section: ClusterSection,
        host: String,
        options: ConnectOptions,
        cells: Vec<Arc<ClusterCell>>,
        metrics: ClusterMetrics,
    ) -> std::io::Result<Agent> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metronome-cluster".to_string())
            .spawn(move || {
                crate::os::realtime::ordinary();
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "cluster agent: no runtime: the cluster classes stay at their floors");
                        return;
                    }
                };
                let runner = Runner::new(section, host, options, cells, metrics);
                runtime.block_on(runner.run(flag));
            })?;
        Ok(Agent {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Agent {
    /// Stops the agent: it revokes its lease (its records go at once, the others take its shares
    /// back at their next period) and its thread ends.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Runner {
    section: ClusterSection,
    host: String,
    options: ConnectOptions,
    cfg: ClusterConfig,
    metrics: ClusterMetrics,
    clock: MonotonicClock,
    classes: Vec<AgentClass>,
    /// Records by class prefix.
    records: BTreeMap<String, ClassRecords>,
    /// When refusals were last logged.
    refusals: RefusalLog,
    revision: i64,
    /// When etcd last answered.
    last_answer: Option<Instant>,
    /// When the last request that etcd then took was sent (the hold counts from here: the
    /// lease cannot have expired earlier than a lease length after it).
    last_ok_sent: Option<Instant>,
    /// A request failed and none succeeded since.
    failing: bool,
    state: AgentState,
    /// The watch delivered records since the shares were last computed.
    dirty: bool,
    /// The index in `[cluster] etcd` of the member in use: the open session's, else the one
    /// the next session opens with.
    member: usize,
}

impl Runner {
    fn new(
        section: ClusterSection,
        host: String,
        options: ConnectOptions,
        cells: Vec<Arc<ClusterCell>>,
        metrics: ClusterMetrics,
    ) -> Runner {
        let clock = MonotonicClock::new();
        let now = clock.now();
        let classes = cells
            .into_iter()
            .map(|cell| {
                let prefix = section.class_prefix(cell.class());
                let (share, _) = cell.share();
                metrics.set_limit(cell.class(), cell.limit().bps());
                metrics.set_share(cell.class(), share);
                metrics.set_peers(cell.class(), 0);
                AgentClass {
                    key: format!("{prefix}{host}"),
                    prefix,
                    cell,
                    previous: None,
                    share,
                    changed_at: now,
                    integral: 0,
                    computed: false,
                    newest: None,
                }
            })
            .collect();
        let cfg = ClusterConfig {
            join_floor: section.floor.core(),
            max_hosts: section.max_hosts,
            ..ClusterConfig::default()
        };
        metrics.set_state(AgentState::Joining.label(), false);
        metrics.set_reachable(false);
        Runner {
            section,
            host,
            options,
            cfg,
            metrics,
            clock,
            classes,
            records: BTreeMap::new(),
            refusals: RefusalLog::default(),
            revision: 0,
            last_answer: None,
            last_ok_sent: None,
            failing: false,
            state: AgentState::Joining,
            dirty: false,
            member: 0,
        }
    }

    fn period(&self) -> StdDuration {
        StdDuration::from_nanos(self.section.period.as_nanos())
    }

    async fn run(mut self, stop: Arc<AtomicBool>) {
        tracing::info!(
            cluster = %self.section.name,
            host = %self.host,
            etcd = %self.section.etcd.join(","),
            classes = self.classes.len(),
            "cluster agent started: the cluster classes start at their floors"
        );
        let mut session: Option<Session> = None;
        let mut publish = tokio::time::interval(self.period());
        publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
        let keep_every = StdDuration::from_nanos(self.section.lease.as_nanos() / 3);
        let mut keep = tokio::time::interval(keep_every);
        keep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = housekeeping.tick() => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // Records the watch delivered since: the shares again, from that revision.
                    let watching = session.as_ref().is_some_and(|s| s.watch.is_some());
                    let reachable = matches!(self.state, AgentState::Shared | AgentState::Joining);
                    if self.dirty && watching && reachable {
                        self.dirty = false;
                        for i in 0..self.classes.len() {
                            self.recompute(i);
                        }
                    }
                    self.housekeeping();
                }
                _ = publish.tick() => {
                    if session.is_none() {
                        session = self.open().await;
                    }
                    if let Some(s) = session.as_mut() {
                        if !self.publish(s).await {
                            session = None;
                        }
                    }
                    self.housekeeping();
                }
                _ = keep.tick(), if session.is_some() => {
                    if let Some(s) = session.as_mut() {
                        if !self.keep_alive(s).await {
                            session = None;
                        }
                    }
                }
                message = next_watch(&mut session) => {
                    if let Some(s) = session.as_mut() {
                        self.watched(s, message).await;
                    }
                }
            }
        }
        if let Some(mut s) = session {
            let revoked =
                tokio::time::timeout(REVOKE_TIMEOUT, s.client.lease_revoke(s.lease)).await;
            match revoked {
                Ok(Ok(_)) => tracing::info!("cluster agent stopped: lease revoked, records removed"),
                _ => tracing::warn!(
                    "cluster agent stopped: the lease could not be revoked; the records go when it expires"
                ),
            }
        }
    }

    /// A request of `op` failed: counted, and etcd is unreachable until one succeeds.
    fn failed(&mut self, op: &'static str, error: &dyn std::fmt::Display) {
        self.metrics.error(op);
        if !self.failing {
            tracing::debug!(op, error = %error, "etcd request failed");
        }
        self.failing = true;
    }

    /// A request sent at `sent` succeeded.
    fn succeeded(&mut self, sent: Instant) {
        self.failing = false;
        self.last_answer = Some(Instant::now());
        if self.last_ok_sent.is_none_or(|t| t < sent) {
            self.last_ok_sent = Some(sent);
        }
    }

    /// `request`, sent now, within its deadline of one period: its answer, a request etcd took
    /// ([`Runner::succeeded`]), or its error (`None`: it passed the deadline) with the failure
    /// counted under `op`.
    async fn request<T>(
        &mut self,
        op: &'static str,
        request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, Option<etcd_client::Error>> {
        let sent = Instant::now();
        let answer = self.attempt(op, request).await;
        if answer.is_ok() {
            self.succeeded(sent);
        }
        answer
    }

    /// [`Runner::request`] for what is not a request etcd takes (making the client, which
    /// need not reach a member): failures counted, a success not.
    async fn attempt<T>(
        &mut self,
        op: &'static str,
        request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, Option<etcd_client::Error>> {
        match tokio::time::timeout(self.period(), request).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => {
                self.failed(op, &e);
                Err(Some(e))
            }
            Err(_) => {
                self.failed(op, &"timed out");
                Err(None)
            }
        }
    }

    /// A session with the member in use (the first listed at the start); when it cannot be
    /// opened, the next try is with the next member.
    async fn open(&mut self) -> Option<Session> {
        let session = self.open_with_member().await;
        if session.is_none() {
            self.member = self.next_member();
        }
        session
    }

    async fn open_with_member(&mut self) -> Option<Session> {
        let mut client = self.connect(self.member).await?;
        let ttl = (self.section.lease.as_nanos() / 1_000_000_000) as i64;
        let lease = self
            .request("lease", client.lease_grant(ttl, None))
            .await
            .ok()?
            .id();
        let (keeper, keep_alive) = self
            .request("keepalive", client.lease_keep_alive(lease))
            .await
            .ok()?;
        let mut session = Session {
            client,
            lease,
            keeper,
            keep_alive,
            watch: None,
        };
        for c in &mut self.classes {
            c.computed = false;
        }
        self.resync(&mut session).await;
        tracing::info!(
            lease = format!("{lease:x}"),
            ttl_s = ttl,
            member = %self.section.etcd[self.member],
            "cluster agent: connected to etcd"
        );
        Some(session)
    }

    /// The member after the one in use, round the list.
    fn next_member(&self) -> usize {
        (self.member + 1) % self.section.etcd.len().max(1)
    }

    /// A client of member `member` (it connects on its first request).
    async fn connect(&mut self, member: usize) -> Option<Client> {
        let endpoint = self.section.etcd.get(member)?.clone();
        let connect = Client::connect([endpoint], Some(self.options.clone()));
        self.attempt("connect", connect).await.ok()
    }

    /// Moves session `s` to the next member (see the module docs): a client of it, a keep-alive
    /// stream for the lease, the records read and watched again. The session keeps its lease;
    /// whether the new member answers shows in the requests that follow.
    async fn fail_over(&mut self, s: &mut Session) {
        let next = self.next_member();
        let Some(client) = self.connect(next).await else {
            return;
        };
        tracing::info!(
            from = %self.section.etcd[self.member],
            to = %self.section.etcd[next],
            "cluster agent: a request to etcd failed; going on with the next member"
        );
        self.metrics.failed_over();
        s.client = client;
        self.member = next;
        self.renew_keep_alive(s).await;
        self.resync(s).await;
    }

    /// Reads every record of the cluster (one revision) and watches from the next one.
    async fn resync(&mut self, s: &mut Session) {
        s.watch = None;
        let prefix = self.section.cluster_prefix();
        let get = s
            .client
            .get(prefix.as_bytes(), Some(GetOptions::new().with_prefix()));
        let Ok(response) = self.request("get", get).await else {
            return;
        };
        self.records.clear();
        for kv in response.kvs() {
            self.put_record(kv.key(), kv.value());
        }
        let revision = response.header().map_or(0, |h| h.revision());
        self.revision = revision;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let watch = s.client.watch(prefix.as_bytes(), Some(options));
        s.watch = self.request("watch", watch).await.ok();
    }

    /// Keeps a record read from etcd (key and value), or counts why not.
    fn put_record(&mut self, key: &[u8], value: &[u8]) {
        let Some((prefix, host)) = self.split_key(key) else {
            let key = String::from_utf8_lossy(key).into_owned();
            return self.refused(Refusal::Class, &key);
        };
        let Some((record, _limit)) = decode(&host, value) else {
            return self.refused(Refusal::Malformed, &host);
        };
        let max_hosts = self.section.max_hosts;
        let own = &self.host;
        let class = self
            .records
            .entry(prefix)
            .or_insert_with(|| ClassRecords::new(own, max_hosts));
        if let Some((reason, host)) = class.put(record) {
            self.refused(reason, &host);
        }
    }

    /// A record of `host` (or a key) not counted for `reason`: counted, and logged at most once
    /// per [`super::peers::REFUSAL_LOG_EVERY`] and reason.
    fn refused(&mut self, reason: Refusal, host: &str) {
        self.metrics.refused(reason.label());
        let Some(unlogged) = self.refusals.note(reason, Instant::now()) else {
            return;
        };
        let (cluster, label) = (&self.section.name, reason.label());
        let max_hosts = self.section.max_hosts;
        let message = "cluster agent: a record under the cluster's prefix is not counted \
                       (metronome_cluster_records_refused_total{reason})";
        // Daemons of one cluster may have different classes: theirs are no warning.
        if reason == Refusal::Class {
            tracing::debug!(%cluster, reason = label, key = host, unlogged, "{message}");
        } else {
            tracing::warn!(%cluster, reason = label, host, max_hosts, unlogged, "{message}");
        }
    }

    fn remove_record(&mut self, key: &[u8]) {
        if let Some((prefix, host)) = self.split_key(key) {
            if let Some(class) = self.records.get_mut(&prefix) {
                class.remove(&host);
            }
        }
    }

    /// The class prefix and host of `key`, when the class is one of this daemon's.
    fn split_key(&self, key: &[u8]) -> Option<(String, String)> {
        let key = std::str::from_utf8(key).ok()?;
        self.classes.iter().find_map(|c| {
            let host = key.strip_prefix(c.prefix.as_str())?;
            (!host.is_empty() && !host.contains('/')).then(|| (c.prefix.clone(), host.to_string()))
        })
    }

    async fn watched(
        &mut self,
        s: &mut Session,
        message: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
    ) {
        let response = match message {
            Ok(Some(r)) => r,
            Ok(None) => {
                self.failed("watch", &"the watch stream ended");
                return self.fail_over(s).await;
            }
            Err(e) => {
                self.failed("watch", &e);
                return self.fail_over(s).await;
            }
        };
        if response.canceled() || response.compact_revision() > 0 {
            self.metrics.error("watch");
            return self.resync(s).await;
        }
        self.last_answer = Some(Instant::now());
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            match event.event_type() {
                EventType::Put => self.put_record(kv.key(), kv.value()),
                EventType::Delete => self.remove_record(kv.key()),
            }
        }
        if let Some(h) = response.header() {
            self.revision = self.revision.max(h.revision());
        }
        self.dirty |= !response.events().is_empty();
    }

    /// Publishes every class's record and puts its share in force. False when the session is
    /// gone (its lease expired).
    async fn publish(&mut self, s: &mut Session) -> bool {
        // A watch lost (etcd restarted, or compacted past it): the records again first.
        if s.watch.is_none() {
            self.resync(s).await;
        }
        for i in 0..self.classes.len() {
            let now = self.clock.now();
            let c = &self.classes[i];
            let sample = c.cell.demand(now).unwrap_or(UsageSample {
                at: now,
                ..UsageSample::default()
            });
            let record = HostRecord {
                host: self.host.clone(),
                weight: self.section.weight,
                sample,
                previous: c.previous,
                enforced_bps: c.enforced(c.previous.map(|p| p.at), now),
            };
            let value = encode(&record, c.cell.limit().bps());
            let key = c.key.clone();
            // Sent once more, to the next member, when the first try fails.
            let mut taken = false;
            for attempt in 0..2 {
                if attempt > 0 {
                    self.fail_over(s).await;
                }
                let options = PutOptions::new().with_lease(s.lease);
                let put = s.client.put(key.clone(), value.clone(), Some(options));
                match self.request("put", put).await {
                    Ok(_) => {
                        taken = true;
                        break;
                    }
                    Err(Some(e)) if e.to_string().contains("lease not found") => {
                        tracing::warn!("cluster agent: the lease expired; taking a new one");
                        return false;
                    }
                    Err(_) => {}
                }
            }
            if !taken {
                continue;
            }
            self.metrics.wrote(1);
            let c = &mut self.classes[i];
            c.previous = Some(sample);
            c.integral = 0;
            c.changed_at = now;
            c.newest = Some(record);
            // Without a watch the records may be stale: the share stays until they are read again.
            if s.watch.is_some() {
                self.recompute(i);
            }
        }
        true
    }

    /// Puts in force class `i`'s share from the records the watch has delivered and its newest
    /// record ([`own_share`]); nothing before its first record or while the revision holds no
    /// record of it.
    fn recompute(&mut self, i: usize) {
        let c = &self.classes[i];
        let Some(own) = &c.newest else { return };
        let limit = c.cell.limit();
        let (records, peers) = self
            .records
            .get(&c.prefix)
            .map_or((Vec::new(), 0), |class| (class.records(), class.peers()));
        let share = own_share(limit, &self.cfg, &records, own);
        let now = self.clock.now();
        let c = &mut self.classes[i];
        if let Some(bps) = share {
            c.set_share(bps, now);
            c.computed = true;
        }
        self.metrics.set_share(c.cell.class(), c.share);
        self.metrics.set_peers(c.cell.class(), peers as u64);
    }

    /// Sends a keep-alive, once more to the next member when the first try fails. False when
    /// the lease is gone.
    async fn keep_alive(&mut self, s: &mut Session) -> bool {
        for attempt in 0..2 {
            if attempt > 0 {
                self.fail_over(s).await;
            }
            match self.keep_alive_once(s).await {
                Some(kept) => return kept,
                None => continue,
            }
        }
        true
    }

    /// One keep-alive on the session's stream: `Some(true)` renewed, `Some(false)` the lease is
    /// gone, `None` failed (counted).
    async fn keep_alive_once(&mut self, s: &mut Session) -> Option<bool> {
        let deadline = self.period();
        let sent = Instant::now();
        let answer = tokio::time::timeout(deadline, async {
            s.keeper.keep_alive().await?;
            s.keep_alive.message().await
        })
        .await;
        match answer {
            Ok(Ok(Some(r))) if r.ttl() > 0 => {
                self.succeeded(sent);
                self.metrics.wrote(1);
                Some(true)
            }
            Ok(Ok(Some(_))) => {
                self.failed("keepalive", &"the lease expired");
                tracing::warn!("cluster agent: the lease expired; taking a new one");
                Some(false)
            }
            Ok(Ok(None)) => {
                self.failed("keepalive", &"the keep-alive stream ended");
                None
            }
            Ok(Err(e)) => {
                self.failed("keepalive", &e);
                None
            }
            Err(_) => {
                self.failed("keepalive", &"timed out");
                None
            }
        }
    }

    /// A new keep-alive stream for the session's lease on its client. When it cannot be made,
    /// the next keep-alive fails and moves the session on.
    async fn renew_keep_alive(&mut self, s: &mut Session) {
        let renew = s.client.lease_keep_alive(s.lease);
        if let Ok((keeper, stream)) = self.request("keepalive", renew).await {
            s.keeper = keeper;
            s.keep_alive = stream;
        }
    }

    /// The state from what succeeded when, the floors after `hold`, the gauges.
    fn housekeeping(&mut self) {
        let now = Instant::now();
        let hold = StdDuration::from_nanos(self.section.hold.as_nanos());
        // One failed request is not an unreachable etcd (a member going away fails the requests
        // it was serving; the client goes on with the others): a period without an answer is.
        let period = self.period();
        let failing = self.failing
            && self
                .last_ok_sent
                .is_none_or(|t| now.duration_since(t) > period);
        let state = match (failing, self.last_ok_sent) {
            (false, Some(_)) if self.classes.iter().all(|c| c.computed) => AgentState::Shared,
            (false, _) => AgentState::Joining,
            (true, None) => AgentState::Joining,
            (true, Some(t))
                if now.duration_since(t) <= hold && self.state != AgentState::Joining =>
            {
                AgentState::Holding
            }
            (true, Some(_)) if self.state == AgentState::Joining => AgentState::Joining,
            (true, Some(_)) => AgentState::Floor,
        };
        let changed = state != self.state;
        if changed {
            match state {
                AgentState::Holding => tracing::warn!(
                    hold = %self.section.hold,
                    "etcd unreachable: holding the last shares"
                ),
                AgentState::Floor => tracing::warn!(
                    floor = %self.section.floor,
                    "etcd unreachable for longer than [cluster] hold: falling to the floors"
                ),
                AgentState::Shared
                    if matches!(self.state, AgentState::Holding | AgentState::Floor) =>
                {
                    tracing::info!("etcd reachable again: shares from etcd")
                }
                _ => {}
            }
            self.state = state;
        }
        if state == AgentState::Floor || (state == AgentState::Joining && failing) {
            let at = self.clock.now();
            for c in &mut self.classes {
                let floor = self.section.floor.rate(c.cell.limit()).bps();
                if c.share != floor {
                    c.set_share(floor, at);
                    self.metrics.set_share(c.cell.class(), floor);
                }
                c.computed = false;
            }
        }
        self.metrics.set_state(state.label(), changed);
        self.metrics
            .set_reachable(!failing && self.last_ok_sent.is_some());
        let age = self
            .last_answer
            .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        self.metrics.set_revision(self.revision, age);
    }
}

/// The next message of the session's watch; pending without one.
async fn next_watch(
    session: &mut Option<Session>,
) -> Result<Option<etcd_client::WatchResponse>, etcd_client::Error> {
    match session.as_mut().and_then(|s| s.watch.as_mut()) {
        Some(w) => w.message().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
