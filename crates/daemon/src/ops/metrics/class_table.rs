//! The per-class series, kept in one compact record per class and silo ([`ClassCells`]) instead
//! of one labelled entry per series in the registry's families, and written out by a collector
//! ([`ClassTable`]) at each scrape.
//!
//! **Why not families.** A `prometheus-client` family keeps a hash map from a label set (the class
//! name, copied) to an `Arc` per series: fifteen series a class would be fifteen allocations,
//! fifteen copies of the name and fifteen map entries, all made at start-up. Here a class and silo
//! is one allocation (and its name once more as the lookup key): the fifteen atomics on two cache
//! lines, the sent bytes, sent packets and queued gauge that the data path writes most on the
//! first. The data path writes them with relaxed atomic operations, as `prometheus-client`'s
//! counters do; nothing it does takes a lock a scrape holds: a scrape takes the table's lock only
//! to list the records (a pointer each) and encodes after releasing it, and only a class's creation
//! (start-up, a reload) takes it otherwise.
//!
//! **Which classes get series** ([`ClassSeries`], `[daemon] class_metrics`): all (the default),
//! the classes with traffic (`active`: a class's series are in a scrape from the first scrape
//! after its first packet, sent, dropped or queued, until it has been idle with nothing queued
//! for [`ACTIVE_IDLE`]), or the listed ones. Whatever the selection, every class counts into
//! its record, and the totals over all classes (`metronome_all_classes_*`) are summed from every
//! record at each scrape: they stay exact. `metronome_class_series_hidden` says how many classes
//! the selection left out of the scrape.

use super::class::DropReason;
use super::labels::SiloLabel;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How long a class of the `active` selection keeps its series once idle (no packet sent,
/// dropped, marked or queued between two scrapes, nothing queued): 300 s, Prometheus's default
/// look-back window (`--query.lookback-delta`), so a query over it still finds the class's last
/// samples after they left the scrape.
pub const ACTIVE_IDLE_SECS: u64 = 300;
/// [`ACTIVE_IDLE_SECS`] as a duration.
pub const ACTIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(ACTIVE_IDLE_SECS);

pub use metronome_config::ClassSeries;

/// The counters of one class in one silo. `#[repr(C, align(64))]`: the fields the data path
/// writes per batch (`queued`, `packets`, `bytes`) share the first cache line; 192 bytes with
/// the name's pointer and length and the scrape's own two words.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct ClassCells {
    pub(super) queued: AtomicI64,
    pub(super) packets: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) ecn_marked: AtomicU64,
    pub(super) ecn_not_ect: AtomicU64,
    pub(super) flow_table_overflow: AtomicU64,
    pub(super) drops: [AtomicU64; DropReason::ALL.len()],
    /// What the scrape saw last (the sum of every counter, and whether anything was queued),
    /// for the `active` selection; written by scrapes only.
    seen: AtomicU64,
    /// Seconds since the table's start when a scrape last found the class active, plus one
    /// (0: never).
    active_at: AtomicU64,
    pub(super) name: Box<str>,
    pub(super) silo: Option<u16>,
}

/// Bytes of one [`ClassCells`] (checked at compile time), besides its name's bytes.
pub const CLASS_CELLS_BYTES: usize = 192;
const _: () = assert!(std::mem::size_of::<ClassCells>() == CLASS_CELLS_BYTES);

impl ClassCells {
    fn new(name: &str, silo: Option<u16>) -> ClassCells {
        ClassCells {
            queued: AtomicI64::new(0),
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            ecn_marked: AtomicU64::new(0),
            ecn_not_ect: AtomicU64::new(0),
            flow_table_overflow: AtomicU64::new(0),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            seen: AtomicU64::new(0),
            active_at: AtomicU64::new(0),
            name: name.into(),
            silo,
        }
    }

    /// Adds `gone`'s counters to this record's (a retired class's counts kept in the totals).
    fn absorb(&self, gone: &ClassCells) {
        let pairs = [
            (&self.packets, &gone.packets),
            (&self.bytes, &gone.bytes),
            (&self.ecn_marked, &gone.ecn_marked),
            (&self.ecn_not_ect, &gone.ecn_not_ect),
            (&self.flow_table_overflow, &gone.flow_table_overflow),
        ];
        for (mine, theirs) in pairs.into_iter().chain(self.drops.iter().zip(&gone.drops)) {
            mine.fetch_add(theirs.load(Relaxed), Relaxed);
        }
    }

    /// Everything counted so far, summed, with the top bit set while packets are queued: it
    /// changes whenever the class sends, drops, marks or queues.
    fn signature(&self) -> u64 {
        let counts = [
            &self.packets,
            &self.ecn_marked,
            &self.ecn_not_ect,
            &self.flow_table_overflow,
        ]
        .into_iter()
        .chain(self.drops.iter())
        .fold(0u64, |s, c| s.wrapping_add(c.load(Relaxed)));
        let queued = u64::from(self.queued.load(Relaxed) > 0) << 63;
        (counts & !(1 << 63)) | queued
    }
}

/// A scrape's view of the table: every record, whether the selection shows it, and the
/// retired counts per silo.
type Snapshot = (Vec<Arc<ClassCells>>, Vec<bool>, Vec<Arc<ClassCells>>);

#[derive(Debug, Default)]
struct Records {
    /// Every record, in creation order.
    cells: Vec<Arc<ClassCells>>,
    /// Per silo (0 without silos), name -> index in `cells`.
    by_name: Vec<HashMap<Box<str>, u32>>,
    selection: ClassSeries,
    /// Per silo: the counts of the classes removed ([`ClassTable::remove`]), in the totals and
    /// in no class's series.
    retired: Vec<Arc<ClassCells>>,
}

/// Every class's records and the selection of those with series: the registry's collector of
/// the per-class families (see the module docs).
#[derive(Debug)]
pub(super) struct ClassTable {
    records: Mutex<Records>,
    start: Instant,
}

impl Default for ClassTable {
    fn default() -> Self {
        ClassTable {
            records: Mutex::new(Records::default()),
            start: Instant::now(),
        }
    }
}

impl ClassTable {
    fn records(&self) -> std::sync::MutexGuard<'_, Records> {
        // A panic while holding the lock leaves the records whole (each change is one push).
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The record of class `name` in `silo`: created at zero, or the existing one (so a class
    /// keeps its counts across reloads).
    pub(super) fn cells(&self, name: &str, silo: Option<u16>) -> Arc<ClassCells> {
        let mut r = self.records();
        let s = usize::from(silo.unwrap_or(0));
        if r.by_name.len() <= s {
            r.by_name.resize_with(s + 1, HashMap::new);
        }
        if let Some(&i) = r.by_name[s].get(name) {
            return r.cells[i as usize].clone();
        }
        let cells = Arc::new(ClassCells::new(name, silo));
        let index = u32::try_from(r.cells.len()).unwrap_or(u32::MAX);
        r.cells.push(cells.clone());
        r.by_name[s].insert(name.into(), index);
        cells
    }

    /// Removes class `name`'s record in `silo` (a live class deleted and drained): its series
    /// leave the scrape, its counts stay in the `all_classes` totals. The caller has published
    /// the class's last counts into the record.
    pub(super) fn remove(&self, name: &str, silo: Option<u16>) {
        let mut r = self.records();
        let s = usize::from(silo.unwrap_or(0));
        let Some(i) = r.by_name.get_mut(s).and_then(|m| m.remove(name)) else {
            return;
        };
        let at = i as usize;
        let gone = r.cells.swap_remove(at);
        if let Some(moved) = r.cells.get(at) {
            let (ms, key) = (usize::from(moved.silo.unwrap_or(0)), moved.name.clone());
            r.by_name[ms].insert(key, i);
        }
        let retired = match r.retired.iter().find(|c| c.silo == silo) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(ClassCells::new("", silo));
                r.retired.push(c.clone());
                c
            }
        };
        retired.absorb(&gone);
    }

    /// Sets which classes have series of their own.
    pub(super) fn select(&self, selection: ClassSeries) {
        self.records().selection = selection;
    }

    /// Records (classes and silos) in the table.
    pub(super) fn len(&self) -> usize {
        self.records().cells.len()
    }

    /// Every record, and whether the selection gives it series in this scrape (updating the
    /// `active` selection's view of each class).
    fn snapshot(&self) -> Snapshot {
        let r = self.records();
        let now = self.start.elapsed().as_secs() + 1;
        let shown = r
            .cells
            .iter()
            .map(|c| match &r.selection {
                ClassSeries::All => true,
                ClassSeries::Listed(names) => names.contains(&*c.name),
                ClassSeries::Active => {
                    let sig = c.signature();
                    let before = c.seen.swap(sig, Relaxed);
                    if sig != before || sig >> 63 == 1 {
                        c.active_at.store(now, Relaxed);
                    }
                    let at = c.active_at.load(Relaxed);
                    at > 0 && now - at < ACTIVE_IDLE_SECS
                }
            })
            .collect();
        (r.cells.clone(), shown, r.retired.clone())
    }
}

/// `{class="..."}` (plus `silo`) borrowed from a record.
struct CellLabel<'a>(&'a ClassCells);

impl EncodeLabelSet for CellLabel<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("class", &*self.0.name).encode(encoder.encode_label())?;
        SiloLabel { silo: self.0.silo }.encode(encoder)
    }
}

/// `{class="...",reason="..."}` (plus `silo`) borrowed from a record.
struct CellReasonLabel<'a>(&'a ClassCells, &'static str);

impl EncodeLabelSet for CellReasonLabel<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("class", &*self.0.name).encode(encoder.encode_label())?;
        ("reason", self.1).encode(encoder.encode_label())?;
        SiloLabel { silo: self.0.silo }.encode(encoder)
    }
}

/// `{reason="..."}` (plus `silo`) of a total.
struct ReasonSiloLabel(&'static str, Option<u16>);

impl EncodeLabelSet for ReasonSiloLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("reason", self.0).encode(encoder.encode_label())?;
        SiloLabel { silo: self.1 }.encode(encoder)
    }
}

/// One per-class counter family: its name (without the prefix and `_total`), help and field.
type Field = (&'static str, &'static str, fn(&ClassCells) -> u64);

/// The per-class counters other than drops, in the registry's order.
const COUNTERS: [Field; 5] = [
    ("class_bytes", "Bytes transmitted per class", |c| {
        c.bytes.load(Relaxed)
    }),
    ("class_packets", "Packets transmitted per class", |c| {
        c.packets.load(Relaxed)
    }),
    ("class_ecn_marks", "Packets marked CE per class", |c| {
        c.ecn_marked.load(Relaxed)
    }),
    (
        "class_ecn_not_ect",
        "Packets due for a CE mark that were not ECN-capable, per class",
        |c| c.ecn_not_ect.load(Relaxed),
    ),
    (
        "class_flow_table_overflow",
        "Packets whose flow found its flow-table bucket full of active flows, paced and limited \
         together under the class's overflow entry",
        |c| c.flow_table_overflow.load(Relaxed),
    ),
];

impl Collector for ClassTable {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (cells, shown, retired) = self.snapshot();
        let visible = || {
            cells
                .iter()
                .zip(&shown)
                .filter(|(_, s)| **s)
                .map(|(c, _)| c)
        };
        let mut silos: Vec<Option<u16>> = cells.iter().chain(&retired).map(|c| c.silo).collect();
        silos.sort_unstable();
        silos.dedup();
        // One silo: unlabelled totals, as every series of a one-silo daemon.
        let one_silo = silos.iter().all(Option::is_none);
        let sum = |silo: Option<u16>, f: &dyn Fn(&ClassCells) -> u64| -> u64 {
            cells
                .iter()
                .chain(&retired)
                .filter(|c| c.silo == silo)
                .fold(0u64, |s, c| s.wrapping_add(f(c)))
        };
        for (name, help, field) in COUNTERS {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for c in visible() {
                ConstCounter::new(field(c)).encode(family.encode_family(&CellLabel(c))?)?;
            }
        }
        let help = "Packets dropped per class and reason";
        let mut family =
            encoder.encode_descriptor("class_drops", help, None, MetricType::Counter)?;
        for c in visible() {
            for r in DropReason::ALL {
                let label = CellReasonLabel(c, r.label());
                let v = c.drops[r as usize].load(Relaxed);
                ConstCounter::new(v).encode(family.encode_family(&label)?)?;
            }
        }
        let help = "Packets queued per class";
        let mut family =
            encoder.encode_descriptor("class_queued_packets", help, None, MetricType::Gauge)?;
        for c in visible() {
            let v = c.queued.load(Relaxed);
            ConstGauge::new(v).encode(family.encode_family(&CellLabel(c))?)?;
        }
        for (name, help, field) in COUNTERS {
            let total = format!("all_{}", name.replacen("class_", "classes_", 1));
            let base = help.trim_end_matches(", per class");
            let help = format!(
                "{}, summed over every class",
                base.trim_end_matches(" per class")
            );
            let mut family = encoder.encode_descriptor(&total, &help, None, MetricType::Counter)?;
            if one_silo {
                ConstCounter::new(sum(None, &|c| field(c))).encode(family)?;
                continue;
            }
            for &silo in &silos {
                let v = ConstCounter::new(sum(silo, &|c| field(c)));
                v.encode(family.encode_family(&SiloLabel { silo })?)?;
            }
        }
        let help = "Packets dropped by reason, summed over every class";
        let mut family =
            encoder.encode_descriptor("all_classes_drops", help, None, MetricType::Counter)?;
        for &silo in &silos {
            for r in DropReason::ALL {
                let v = sum(silo, &|c| c.drops[r as usize].load(Relaxed));
                let label = ReasonSiloLabel(r.label(), silo);
                ConstCounter::new(v).encode(family.encode_family(&label)?)?;
            }
        }
        let help = "Packets queued, summed over every class";
        let mut family = encoder.encode_descriptor(
            "all_classes_queued_packets",
            help,
            None,
            MetricType::Gauge,
        )?;
        let queued = |silo| {
            let v = sum(silo, &|c| c.queued.load(Relaxed).max(0) as u64);
            ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
        };
        if one_silo {
            queued(None).encode(family)?;
        } else {
            for &silo in &silos {
                queued(silo).encode(family.encode_family(&SiloLabel { silo })?)?;
            }
        }
        let help = "Classes whose series `[daemon] class_metrics` left out of this scrape \
                    (once per shaping thread); the all_classes totals count them";
        let hidden = shown.iter().filter(|s| !**s).count();
        let family =
            encoder.encode_descriptor("class_series_hidden", help, None, MetricType::Gauge)?;
        ConstGauge::new(i64::try_from(hidden).unwrap_or(i64::MAX)).encode(family)?;
        Ok(())
    }
}
