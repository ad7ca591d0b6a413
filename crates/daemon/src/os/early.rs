//! Early refusal: what a class cannot take is refused in the kernel, before the shaping loop pays
//! for it (zD §1-3: no class may lose because another is flooded; Carousel §5.1.2: bounded queues).
//!
//! [`EarlyFilter`] loads the socket filter `admit` (`crates/daemon/bpf/early.bpf.c`), which every
//! receiving socket of the shaped direction runs: it classifies by the first [`MAX_RULES`] rules,
//! refuses what exceeds a bucket of `[daemon] early_multiple` times a class's rate as deep as its
//! `queue` bound, gives malformed and non-IP frames a bucket of their own, and holds classes to
//! their rates while a loop is overloaded ([`EarlyFilter::set_overloaded`], [`OVERLOAD_PERIOD`]).
//! [`EarlyFilter::sync`] follows the engine's classes and exports the counters; without the BPF
//! object the daemon runs without it. The rules and why they refuse only what admission would:
//! ARCHITECTURE.md, "Early refusal"; the keys: docs/config.md ("Early refusal").

use crate::datapath::engine::{Admission, AdmittedClass, Engine};
use crate::datapath::unclassified::Unclassified;
use crate::ops::config::Config;
use crate::ops::metrics::Metrics;
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::SocketFilter;
use aya::Ebpf;
use metronome_packet::ClassRule;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The program's object, compiled by `build.rs`; empty in a build without clang.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/early.bpf.o"));

/// Rules the filter holds (`MAX_RULES` in the program).
pub const MAX_RULES: usize = 64;
/// IPv6 extension headers the filter walks (`MAX_EXT` in the program).
pub const MAX_EXT_HEADERS: usize = 4;
/// How long a loop must go without sleeping, or how often its receive socket's drops are
/// looked at, for [`EarlyFilter::set_overloaded`] (the loop's counter period).
pub const OVERLOAD_PERIOD: Duration = Duration::from_millis(100);

/// The default class's bucket (after one per rule).
const DEFAULT_BUCKET: usize = MAX_RULES;
/// The bucket of frames refused by a `drop` action: no class's.
const DROP_BUCKET: usize = MAX_RULES + 1;
/// The default class's bucket of the malformed and non-IP frames charged to it.
const UNCLASSIFIED_BUCKET: usize = MAX_RULES + 2;
const BUCKETS: usize = MAX_RULES + 3;
/// The class name of [`DROP_BUCKET`] in the metrics.
const NO_CLASS: &str = "none";

/// Bytes of `struct rule` in the program.
const RULE_BYTES: usize = 84;

/// Why the filter refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Beyond its class's bucket.
    OverRate,
    /// Malformed (or unreadable to the filter), beyond the default class's bucket or dropped.
    Malformed,
    /// Not IP, the same.
    NonIp,
}

impl Reason {
    /// Every reason, in the program's order.
    pub const ALL: [Reason; 3] = [Reason::OverRate, Reason::Malformed, Reason::NonIp];

    /// The metrics' `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Reason::OverRate => "over_rate",
            Reason::Malformed => "malformed",
            Reason::NonIp => "non_ip",
        }
    }
}

/// Indexes of the program's `SETTINGS`.
mod setting {
    pub const RULES: u32 = 0;
    pub const COMPLETE: u32 = 1;
    pub const MALFORMED: u32 = 2;
    pub const NON_IP: u32 = 3;
    pub const MULTIPLE: u32 = 4;
    pub const OVERLOAD: u32 = 5;
    pub const ORIGIN_TAGS: u32 = 6;
}

/// Why the filter could not be had.
#[derive(Debug, thiserror::Error)]
pub enum EarlyError {
    /// The build has no BPF object (clang was missing when it was built).
    #[error("this build has no early-refusal filter (built without clang and libbpf-dev)")]
    NoProgram,
    /// The kernel refused the program or a map (privileges, kernel version).
    #[error("loading the early-refusal filter failed: {0}")]
    Load(String),
}

/// The loaded filter, shared by every loop of the daemon. See the module docs.
pub struct EarlyFilter {
    inner: Mutex<Inner>,
    program: RawFd,
    /// `[daemon] early_multiple` (restart-only).
    multiple: u32,
    /// Bit `i`: loop `i` is overloaded.
    overloaded: AtomicU64,
}

struct Inner {
    /// Owns the program (its descriptor is [`EarlyFilter::program`]).
    _bpf: Ebpf,
    rules: Array<MapData, [u8; RULE_BYTES]>,
    buckets: Array<MapData, [u64; 3]>,
    settings: Array<MapData, u64>,
    refused: PerCpuArray<MapData, [u64; 2]>,
    /// What the tables hold now; `None` before the first [`EarlyFilter::sync`].
    table: Option<(Admission, [u64; 3])>,
    /// The class name of each bucket, for the counters.
    names: Vec<String>,
    /// Per bucket and reason, frames and bytes already exported.
    exported: Vec<[u64; 2]>,
    /// Frames refused, by [`Reason`], since the load.
    totals: [u64; 3],
    /// The overload setting written last.
    overload: bool,
    /// Where the counts go: the metrics of the last [`EarlyFilter::sync`].
    metrics: Option<Metrics>,
}

impl std::fmt::Debug for EarlyFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlyFilter")
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

fn load_err(what: &str) -> impl Fn(String) -> EarlyError + '_ {
    move |e| EarlyError::Load(format!("{what}: {e}"))
}

impl EarlyFilter {
    /// Loads the filter for `config` (its multiple, its unclassified actions, attach mode's
    /// origin tags); `Ok(None)` with `[daemon] early_refuse = false`.
    /// Needs CAP_BPF (or CAP_SYS_ADMIN): the daemon loads it before it drops its privileges;
    /// the maps it updates afterwards need none. The tables start empty (every frame passes)
    /// until the first [`EarlyFilter::sync`].
    pub fn load(config: &Config) -> Result<Option<EarlyFilter>, EarlyError> {
        if !config.daemon.early_refuse {
            return Ok(None);
        }
        if OBJECT.is_empty() {
            return Err(EarlyError::NoProgram);
        }
        let mut bpf = Ebpf::load(OBJECT).map_err(|e| EarlyError::Load(e.to_string()))?;
        let program: &mut SocketFilter = bpf
            .program_mut("admit")
            .ok_or_else(|| EarlyError::Load("no program admit".to_string()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| EarlyError::Load(e.to_string()))?;
        program
            .load()
            .map_err(|e| load_err("admit")(e.to_string()))?;
        let fd = program
            .fd()
            .map_err(|e| load_err("admit")(e.to_string()))?
            .as_fd()
            .as_raw_fd();
        let take = |bpf: &mut Ebpf, name: &str| {
            bpf.take_map(name)
                .ok_or_else(|| EarlyError::Load(format!("no map {name}")))
        };
        let rules = Array::try_from(take(&mut bpf, "RULES")?)
            .map_err(|e| load_err("RULES")(e.to_string()))?;
        let buckets = Array::try_from(take(&mut bpf, "BUCKETS")?)
            .map_err(|e| load_err("BUCKETS")(e.to_string()))?;
        let mut settings: Array<MapData, u64> = Array::try_from(take(&mut bpf, "SETTINGS")?)
            .map_err(|e| load_err("SETTINGS")(e.to_string()))?;
        let refused = PerCpuArray::try_from(take(&mut bpf, "REFUSED")?)
            .map_err(|e| load_err("REFUSED")(e.to_string()))?;
        let d = &config.daemon;
        let writes = [
            (setting::MALFORMED, action(d.malformed)),
            (setting::NON_IP, action(d.non_ip)),
            (setting::MULTIPLE, u64::from(d.early_multiple.max(1))),
            (setting::ORIGIN_TAGS, u64::from(config.is_attach())),
        ];
        for (at, value) in writes {
            settings
                .set(at, value, 0)
                .map_err(|e| load_err("SETTINGS")(e.to_string()))?;
        }
        Ok(Some(EarlyFilter {
            multiple: d.early_multiple.max(1),
            inner: Mutex::new(Inner {
                _bpf: bpf,
                rules,
                buckets,
                settings,
                refused,
                table: None,
                names: vec![String::new(); BUCKETS],
                exported: vec![[0; 2]; BUCKETS * Reason::ALL.len()],
                totals: [0; 3],
                overload: false,
                metrics: None,
            }),
            program: fd,
            overloaded: AtomicU64::new(0),
        }))
    }

    /// The program's descriptor, for `metronome_io::AfPacketConfig::socket_filter`; valid
    /// while `self` lives.
    pub fn program_fd(&self) -> RawFd {
        self.program
    }

    /// Puts the engine's classes (its first [`MAX_RULES`] rules, their rates and queue
    /// bounds, the unclassified actions) in force in the kernel when they changed since the
    /// last call, and exports the refusals counted since then into `metrics`. Errors are
    /// logged once per call; the tables keep what they held.
    pub fn sync(&self, engine: &Engine, metrics: &Metrics) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.metrics.is_none() {
            metrics.early_state(true, inner.overload);
        }
        inner.metrics = Some(metrics.clone());
        inner.export();
        let admission = engine.admission(MAX_RULES);
        let e = engine.config();
        let knobs = [
            action(e.malformed),
            action(e.non_ip),
            u64::from(self.multiple),
        ];
        if inner
            .table
            .as_ref()
            .is_some_and(|(a, k)| *a == admission && *k == knobs)
        {
            return;
        }
        if let Err(e) = inner.write(&admission, knobs) {
            tracing::warn!(error = %e, "early filter: updating the kernel's tables failed");
            return;
        }
        inner.table = Some((admission, knobs));
    }

    /// Records whether loop `index` (0..64) is overloaded; the filter holds every class to its
    /// rate while any loop is (see the module docs).
    pub fn set_overloaded(&self, index: usize, overloaded: bool) {
        let bit = 1u64 << (index % 64);
        let mask = if overloaded {
            self.overloaded.fetch_or(bit, Ordering::AcqRel) | bit
        } else {
            self.overloaded.fetch_and(!bit, Ordering::AcqRel) & !bit
        };
        let any = mask != 0;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.overload == any {
            return;
        }
        match inner.settings.set(setting::OVERLOAD, u64::from(any), 0) {
            Ok(()) => {
                inner.overload = any;
                if let Some(m) = &inner.metrics {
                    m.early_state(true, any);
                }
                tracing::info!(
                    overloaded = any,
                    "early filter: classes held to {} their rates",
                    if any {
                        "1 times"
                    } else {
                        "daemon.early_multiple times"
                    }
                );
            }
            Err(e) => tracing::warn!(error = %e, "early filter: setting the overload failed"),
        }
    }

    /// Whether the filter holds every class to its rate now (a loop is overloaded).
    pub fn overloaded(&self) -> bool {
        self.overloaded.load(Ordering::Acquire) != 0
    }

    /// Frames refused since the load, by [`Reason`] (in [`Reason::ALL`]'s order), counted up to
    /// the last [`EarlyFilter::sync`] or this call, which exports them too.
    pub fn refused(&self) -> [u64; 3] {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.export();
        inner.totals
    }
}

/// A `[daemon] malformed` / `non_ip` action as the program reads it.
fn action(a: Unclassified) -> u64 {
    match a {
        Unclassified::Default => 0,
        Unclassified::Pass => 1,
        Unclassified::Drop => 2,
    }
}

impl Inner {
    /// Reads the per-CPU refusal counts and adds what is new to the metrics and the totals.
    fn export(&mut self) {
        for bucket in 0..BUCKETS {
            for (r, reason) in Reason::ALL.iter().enumerate() {
                let at = bucket * Reason::ALL.len() + r;
                let Ok(values) = self.refused.get(&(at as u32), 0) else {
                    continue;
                };
                let (frames, bytes) = values
                    .iter()
                    .fold((0u64, 0u64), |(f, b), v| (f + v[0], b + v[1]));
                let [old_f, old_b] = self.exported[at];
                if frames > old_f {
                    let name = if bucket == DROP_BUCKET {
                        NO_CLASS
                    } else {
                        self.names[bucket].as_str()
                    };
                    let (df, db) = (frames - old_f, bytes.saturating_sub(old_b));
                    if let Some(m) = &self.metrics {
                        m.early_refused(name, reason.label(), df, db);
                    }
                    self.totals[r] += df;
                    self.exported[at] = [frames, bytes];
                }
            }
        }
    }

    /// Writes `admission` and the actions and multiple `knobs` into the kernel's tables: the
    /// rule count goes to 0 first and to its value last, so that the program never reads a
    /// half-written table (it passes a frame no rule held decides).
    fn write(&mut self, admission: &Admission, knobs: [u64; 3]) -> Result<(), String> {
        let e = |what: &'static str| move |err: aya::maps::MapError| format!("{what}: {err}");
        self.settings
            .set(setting::RULES, 0, 0)
            .map_err(e("SETTINGS"))?;
        self.settings
            .set(setting::COMPLETE, 0, 0)
            .map_err(e("SETTINGS"))?;
        let [malformed, non_ip, multiple] = knobs;
        for (at, value) in [
            (setting::MALFORMED, malformed),
            (setting::NON_IP, non_ip),
            (setting::MULTIPLE, multiple),
        ] {
            self.settings.set(at, value, 0).map_err(e("SETTINGS"))?;
        }
        // Taken: after a failed write the next sync writes every bucket again.
        let old = self.table.take().map(|(a, _)| a);
        let old = old.as_ref();
        for (i, (rule, class)) in admission.rules.iter().enumerate() {
            self.rules
                .set(i as u32, encode_rule(rule, i as u32), 0)
                .map_err(e("RULES"))?;
            let same = old
                .and_then(|a| a.rules.get(i))
                .is_some_and(|(_, c)| c == class);
            self.put_bucket(i, class, same)?;
        }
        let same = old.is_some_and(|a| a.default == admission.default);
        for bucket in [DEFAULT_BUCKET, UNCLASSIFIED_BUCKET] {
            self.put_bucket(bucket, &admission.default, same)?;
        }
        self.names[DROP_BUCKET] = NO_CLASS.to_string();
        self.settings
            .set(setting::COMPLETE, u64::from(admission.complete), 0)
            .map_err(e("SETTINGS"))?;
        self.settings
            .set(setting::RULES, admission.rules.len() as u64, 0)
            .map_err(e("SETTINGS"))?;
        Ok(())
    }

    /// Bucket `index` for `class`; an unchanged class (`same`) keeps its state.
    fn put_bucket(
        &mut self,
        index: usize,
        class: &AdmittedClass,
        same: bool,
    ) -> Result<(), String> {
        self.names[index] = class.name.clone();
        if same {
            return Ok(());
        }
        self.buckets
            .set(index as u32, bucket_of(class), 0)
            .map_err(|err| format!("BUCKETS: {err}"))
    }
}

/// Picoseconds per byte at `bps`, at least 1.
fn ps_per_byte(bps: u64) -> u64 {
    (8_000_000_000_000u64 / bps.max(1)).max(1)
}

/// `struct bucket` of the program for `class`: its rate as picoseconds per byte (0: none) and
/// its queue bound as the time it takes at that rate; the arrival time starts at 0 (full).
fn bucket_of(class: &AdmittedClass) -> [u64; 3] {
    match class.rate {
        Some(rate) if rate.bps() > 0 => {
            let ps = ps_per_byte(rate.bps());
            let tolerance_ns = class.queue_bytes.saturating_mul(ps) / 1000;
            [ps, tolerance_ns, 0]
        }
        _ => [0, 0, 0],
    }
}

/// Rule fields present (`F_*` in the program).
const F_DST: u16 = 1;
const F_SRC: u16 = 2;
const F_DSCP: u16 = 4;
const F_PROTOCOL: u16 = 8;
const F_DST_PORT: u16 = 16;
const F_SRC_PORT: u16 = 32;
const F_ORIGIN: u16 = 64;

/// A prefix as the program compares it: network-order address bytes and mask bytes (IPv4 in
/// the first four), and its family.
fn prefix(net: &ipnet::IpNet) -> ([u8; 16], [u8; 16], u8) {
    let (mut addr, mut mask) = ([0u8; 16], [0u8; 16]);
    match net {
        ipnet::IpNet::V4(n) => {
            addr[..4].copy_from_slice(&n.network().octets());
            mask[..4].copy_from_slice(&n.netmask().octets());
            (addr, mask, 4)
        }
        ipnet::IpNet::V6(n) => {
            addr.copy_from_slice(&n.network().octets());
            mask.copy_from_slice(&n.netmask().octets());
            (addr, mask, 6)
        }
    }
}

/// `struct rule` of the program for `rule`, whose class has bucket `bucket`.
fn encode_rule(rule: &ClassRule, bucket: u32) -> [u8; RULE_BYTES] {
    let mut b = [0u8; RULE_BYTES];
    let mut flags = 0u16;
    if let Some(net) = &rule.dst {
        let (addr, mask, family) = prefix(net);
        b[0..16].copy_from_slice(&addr);
        b[16..32].copy_from_slice(&mask);
        b[66] = family;
        flags |= F_DST;
    }
    if let Some(net) = &rule.src {
        let (addr, mask, family) = prefix(net);
        b[32..48].copy_from_slice(&addr);
        b[48..64].copy_from_slice(&mask);
        b[67] = family;
        flags |= F_SRC;
    }
    if let Some(d) = rule.dscp {
        b[68] = d;
        flags |= F_DSCP;
    }
    if let Some(p) = rule.protocol {
        b[69] = p;
        flags |= F_PROTOCOL;
    }
    if let Some(o) = rule.origin {
        b[70..72].copy_from_slice(&o.to_ne_bytes());
        flags |= F_ORIGIN;
    }
    if let Some((lo, hi)) = rule.dst_port {
        b[72..74].copy_from_slice(&lo.to_ne_bytes());
        b[74..76].copy_from_slice(&hi.to_ne_bytes());
        flags |= F_DST_PORT;
    }
    if let Some((lo, hi)) = rule.src_port {
        b[76..78].copy_from_slice(&lo.to_ne_bytes());
        b[78..80].copy_from_slice(&hi.to_ne_bytes());
        flags |= F_SRC_PORT;
    }
    b[64..66].copy_from_slice(&flags.to_ne_bytes());
    b[80..84].copy_from_slice(&bucket.to_ne_bytes());
    b
}

/// A loop's overload, judged every [`OVERLOAD_PERIOD`] from its sleep and its receive
/// socket's drops (see the module docs): overloaded when the socket dropped frames or the loop
/// slept less than 2 % of the period; no longer when it slept at least 10 % and nothing was
/// dropped. A busy-polling loop never sleeps: only its drops count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OverloadJudge {
    /// Whether the loop is judged overloaded now.
    pub overloaded: bool,
}

impl OverloadJudge {
    /// Judges one period of `period_ns` in which the loop slept `slept_ns` and its socket
    /// dropped `drops` frames; returns the judgement.
    pub fn judge(&mut self, period_ns: u64, slept_ns: u64, drops: u64, busy_poll: bool) -> bool {
        let slept = if busy_poll { period_ns } else { slept_ns };
        let share = slept as f64 / period_ns.max(1) as f64;
        if drops > 0 || share < 0.02 {
            self.overloaded = true;
        } else if share >= 0.10 {
            self.overloaded = false;
        }
        self.overloaded
    }
}

/// The early filter of `config`, loaded while the daemon may still load
/// BPF programs; `None` when `[daemon] early_refuse = false` or it cannot be had (logged: the
/// loop then reads every frame itself, as a daemon without it did).
pub fn load_logged(config: &Config) -> Option<Arc<EarlyFilter>> {
    match EarlyFilter::load(config) {
        Ok(Some(filter)) => {
            tracing::info!(
                multiple = config.daemon.early_multiple,
                "early refusal: the receiving sockets' filter is loaded"
            );
            Some(Arc::new(filter))
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "early refusal off: the loop reads every frame");
            None
        }
    }
}

#[cfg(test)]
mod tests;
