//! The series one silo updates outside its classes (wheel occupancy, lateness, TX batches, RX
//! ring drops, loop sleep, pass-through traffic) and their registration: without labels for a
//! one-silo daemon, as families with a `silo` label otherwise (see the module docs of
//! [`super`]).

use super::histogram::ArcMetric;
use super::labels::{SiloLabel, WakeLabel};
use super::Wake;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The series one silo updates outside its classes.
#[derive(Clone, Debug)]
pub(super) struct SiloSeries {
    pub(super) wheel_occupancy: Gauge,
    pub(super) lateness: ArcMetric,
    pub(super) tx_batch: ArcMetric,
    pub(super) rx_ring_drops: Counter,
    pub(super) loop_sleep_ns: Counter,
    /// Wake-ups by what ended the sleep, in the order of [`Wake::ALL`].
    pub(super) wakeups: [Counter; 3],
    pub(super) pass_through_packets: Counter,
    pub(super) pass_through_bytes: Counter,
}

impl SiloSeries {
    pub(super) fn new() -> Self {
        SiloSeries {
            wheel_occupancy: Gauge::default(),
            lateness: ArcMetric::lateness(),
            tx_batch: ArcMetric::tx_batch(),
            rx_ring_drops: Counter::default(),
            loop_sleep_ns: Counter::default(),
            wakeups: Default::default(),
            pass_through_packets: Counter::default(),
            pass_through_bytes: Counter::default(),
        }
    }
}

const OCCUPANCY_HELP: &str = "Packets held in the timing wheel";
const LATENESS_HELP: &str = "Actual minus scheduled departure time, nanoseconds";
const TX_BATCH_HELP: &str = "Packets per transmit batch";
const RING_DROPS_HELP: &str = "Frames the RX ring dropped (overruns)";
const LOOP_SLEEP_HELP: &str =
    "Nanoseconds the loop slept waiting for frames or a due time (busy = 1 - rate / 1e9)";
const WAKEUPS_HELP: &str = "Sleeps of the loop that ended, by what ended them (frame: a port \
                            had frames to read; due: the next departure's time; control: an \
                            operation of the control socket)";
const PASS_PACKETS_HELP: &str = "Packets forwarded unshaped (non-IP, reverse direction)";
const PASS_BYTES_HELP: &str = "Bytes forwarded unshaped";

/// Registers one silo's series without labels (the one-silo daemon).
pub(super) fn register_silo_series(r: &mut Registry, s: &mut SiloSeries) {
    let occ = s.wheel_occupancy.clone();
    r.register("wheel_occupancy_packets", OCCUPANCY_HELP, occ);
    r.register("lateness_ns", LATENESS_HELP, s.lateness.clone());
    r.register("tx_batch_packets", TX_BATCH_HELP, s.tx_batch.clone());
    r.register("rx_ring_drops", RING_DROPS_HELP, s.rx_ring_drops.clone());
    let sleep = s.loop_sleep_ns.clone();
    r.register("loop_sleep_nanoseconds", LOOP_SLEEP_HELP, sleep);
    let wakeups = Family::<WakeLabel, Counter>::default();
    s.wakeups = Wake::ALL.map(|w| {
        wakeups
            .get_or_create(&WakeLabel {
                by: w.name(),
                silo: None,
            })
            .clone()
    });
    r.register("loop_wakeups", WAKEUPS_HELP, wakeups);
    let pt = s.pass_through_packets.clone();
    r.register("pass_through_packets", PASS_PACKETS_HELP, pt);
    let ptb = s.pass_through_bytes.clone();
    r.register("pass_through_bytes", PASS_BYTES_HELP, ptb);
}

/// Registers the same series as families with a `silo` label; returns each silo's series.
pub(super) fn register_silo_families(r: &mut Registry, n: usize) -> Vec<SiloSeries> {
    let occupancy = Family::<SiloLabel, Gauge>::default();
    let lateness = Family::<SiloLabel, ArcMetric, fn() -> ArcMetric>::new_with_constructor(
        ArcMetric::lateness as fn() -> ArcMetric,
    );
    let tx_batch = Family::<SiloLabel, ArcMetric, fn() -> ArcMetric>::new_with_constructor(
        ArcMetric::tx_batch as fn() -> ArcMetric,
    );
    let ring_drops = Family::<SiloLabel, Counter>::default();
    let loop_sleep = Family::<SiloLabel, Counter>::default();
    let wakeups = Family::<WakeLabel, Counter>::default();
    let pass_packets = Family::<SiloLabel, Counter>::default();
    let pass_bytes = Family::<SiloLabel, Counter>::default();
    let series = (0..n)
        .map(|i| {
            let l = SiloLabel {
                silo: Some(i as u16),
            };
            SiloSeries {
                wheel_occupancy: occupancy.get_or_create(&l).clone(),
                lateness: lateness.get_or_create(&l).clone(),
                tx_batch: tx_batch.get_or_create(&l).clone(),
                rx_ring_drops: ring_drops.get_or_create(&l).clone(),
                loop_sleep_ns: loop_sleep.get_or_create(&l).clone(),
                wakeups: Wake::ALL.map(|w| {
                    let label = WakeLabel {
                        by: w.name(),
                        silo: l.silo,
                    };
                    wakeups.get_or_create(&label).clone()
                }),
                pass_through_packets: pass_packets.get_or_create(&l).clone(),
                pass_through_bytes: pass_bytes.get_or_create(&l).clone(),
            }
        })
        .collect();
    r.register("wheel_occupancy_packets", OCCUPANCY_HELP, occupancy);
    r.register("lateness_ns", LATENESS_HELP, lateness);
    r.register("tx_batch_packets", TX_BATCH_HELP, tx_batch);
    r.register("rx_ring_drops", RING_DROPS_HELP, ring_drops);
    r.register("loop_sleep_nanoseconds", LOOP_SLEEP_HELP, loop_sleep);
    r.register("loop_wakeups", WAKEUPS_HELP, wakeups);
    r.register("pass_through_packets", PASS_PACKETS_HELP, pass_packets);
    r.register("pass_through_bytes", PASS_BYTES_HELP, pass_bytes);
    series
}
