//! `metronome compare --classes`: thousands of classes, each held to its own rate, measured class
//! by class at the receiver, through `metronome run` and through kernel HTB with hashed u32 filters
//! on the same path in the same run (NicPic §1 and §3: tens of thousands of rate limiters on one
//! host; Carousel §2: shaping for tens of thousands of aggregates per host).
//!
//! One [`Topology::bump_in_the_wire`] with its four veths at [`ClassesOptions::frame_bytes`]
//! (jumbo frames: an MTU of 9000, as data-centre hosts run). Class `i` is every frame to
//! [`ClassFlows::dst`]`(i)` (one destination /32), limited to [`ClassesOptions::rate_bps`]`(i)`
//! (spread linearly from the smallest rate to the largest). The shapers take turns:

use super::attach::AttachedDaemon;
use super::measure::{cpu_pct_per_gbit, MachineCpu};
use super::{CompareError, Shaper};
use crate::class_traffic::{
    send_classes, wait_forwarding, ClassCounter, ClassFlows, CountReport, Schedule, SendReport,
};
use crate::flood::frames::mac_of;
use crate::flood::FloodError;
use crate::netns::{run_command, TopoError, Topology};
use crate::trafficgen::sleep_until;
use metronome_daemon::ops::config::Config;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prefix of the namespaces of `compare --classes`.
pub const NS_PREFIX: &str = "mtr-cls";
/// The most frames of queue a class gets in the daemon runs: 64, the daemon's least default
/// (docs/config.md, `queue.packets`).
pub const MAX_QUEUE_PACKETS: usize = 64;
/// Frame-pool slots kept free of the classes' queues in the daemon runs: 4096, room for the
/// batches in flight.
const POOL_HEADROOM: usize = 4096;

/// Frames of queue per class in the daemon runs (`queue = { packets = N }`): the daemon's frame
/// pool ([`metronome_daemon::os::ports::DEFAULT_FRAME_SLOTS`] slots) less [`POOL_HEADROOM`],
/// shared out among the classes, at most [`MAX_QUEUE_PACKETS`] and at least 2. An overloaded class
/// always holds one frame waiting for its departure time; the rest carries it through the
/// sender's stalls on a loaded machine (6 frames at 10 000 classes: 430 ms at 1 Mbit/s of
/// 9 014-byte frames). HTB's leaves keep their default queue (the veth's 1 000 packets).
pub fn queue_packets(classes: usize) -> usize {
    let slots = metronome_daemon::os::ports::DEFAULT_FRAME_SLOTS as usize - POOL_HEADROOM;
    (slots / classes.max(1)).clamp(2, MAX_QUEUE_PACKETS)
}
/// Traffic kept running after the measured window, so no class stops inside it.
const TAIL: Duration = Duration::from_millis(500);
/// The frame of the full run, bytes: an MTU of 9000 plus the Ethernet header (jumbo frames).
pub const JUMBO_FRAME: usize = 9014;
/// UDP ports of the class traffic (any: the classes match on the destination address).
const PORTS: (u16, u16) = (40_000, 9);
/// How long `metronome run` may take from its metrics endpoint answering to forwarding a frame
/// (it builds its engine in between): 60 s, far more than 65 534 classes take.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// What `compare --classes` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassesOptions {
    /// Classes.
    pub classes: usize,
    /// The smallest and the largest class rate, bit/s; class `i`'s lies linearly between.
    pub rates_bps: (u64, u64),
    /// Frame length, bytes (Ethernet header included); the veths' MTU is this less 14.
    pub frame_bytes: usize,
    /// Each class is offered its rate times this (above 1).
    pub overload: f64,
    /// Skipped after the traffic starts.
    pub warmup: Duration,
    /// Measured after the warm-up.
    pub measure: Duration,
    /// The largest deviation from its rate a class may show, percent (the target: 2).
    pub tolerance_pct: f64,
    /// The shapers, in turn.
    pub shapers: Vec<Shaper>,
    /// The `metronome` binary whose `run` the daemon rows start.
    pub daemon_binary: Option<PathBuf>,
}

impl ClassesOptions {
    /// The full run: 10 000 classes at 1 Mbit/s each (10 Gbit/s in all), jumbo frames, 5 % over
    /// each rate, 3 s of warm-up and 20 s measured, both shapers.
    pub fn full() -> Self {
        ClassesOptions {
            classes: 10_000,
            rates_bps: (1_000_000, 1_000_000),
            frame_bytes: JUMBO_FRAME,
            overload: 1.05,
            warmup: Duration::from_secs(3),
            measure: Duration::from_secs(20),
            tolerance_pct: 2.0,
            shapers: Shaper::CLASSES.to_vec(),
            daemon_binary: None,
        }
    }

    /// `--quick`: 1 000 classes at 1 to 2 Mbit/s (1.5 Gbit/s in all), 10 s measured.
    pub fn quick() -> Self {
        ClassesOptions {
            classes: 1_000,
            rates_bps: (1_000_000, 2_000_000),
            measure: Duration::from_secs(10),
            ..ClassesOptions::full()
        }
    }

    /// Class `i`'s rate, bit/s.
    pub fn rate_bps(&self, i: usize) -> u64 {
        let (lo, hi) = self.rates_bps;
        if self.classes <= 1 || hi <= lo {
            return lo;
        }
        lo + ((hi - lo) as f64 * i as f64 / (self.classes - 1) as f64).round() as u64
    }

    /// The sum of the class rates, bit/s.
    pub fn aggregate_bps(&self) -> f64 {
        (0..self.classes).map(|i| self.rate_bps(i) as f64).sum()
    }

    /// The veths' MTU (and the daemon's `[interfaces] mtu`), bytes.
    pub fn mtu(&self) -> usize {
        self.frame_bytes.saturating_sub(14).max(1500)
    }
}

/// The worst class of a run: the one furthest from its rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorstClass {
    /// Its index.
    pub class: usize,
    /// Its destination.
    pub dst: String,
    /// Its rate, bit/s.
    pub target_bps: u64,
    /// Its measured rate, bit/s (`null`: fewer than two frames arrived in the window).
    pub achieved_bps: Option<f64>,
    /// Its deviation, percent (`null` with no rate).
    pub deviation_pct: Option<f64>,
}

/// One shaper's run: exactly the fields of a row of `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClassesRow {
    /// Which shaper.
    pub shaper: Shaper,
    /// Classes.
    pub classes: usize,
    /// Frame length, bytes.
    pub frame_bytes: usize,
    /// Sum of the class rates, bit/s.
    pub target_bps: f64,
    /// What the sender offered over its run, bit/s (the target times the overload when it kept
    /// up).
    pub offered_bps: f64,
    /// Sum of the measured class rates, bit/s.
    pub achieved_bps: f64,
    /// Classes with a rate (at least two frames in the window).
    pub measured: usize,
    /// Classes within `tolerance_pct` of their rate.
    pub within_tolerance: usize,
    /// The tolerance, percent.
    pub tolerance_pct: f64,
    /// Mean absolute deviation of the measured classes from their rates, percent.
    pub deviation_mean_pct: f64,
    /// The smallest signed deviation, percent.
    pub deviation_min_pct: f64,
    /// The largest signed deviation, percent.
    pub deviation_max_pct: f64,
    /// The class furthest from its rate (a class with no rate first).
    pub worst: Option<WorstClass>,
    /// Machine kernel time plus the user time of this process and the daemon, % of one CPU per
    /// Gbit/s delivered.
    pub cpu_pct: f64,
    /// The daemon process's own CPU (user + system), % of one CPU per Gbit/s delivered; `null`
    /// for the kernel shaper.
    pub daemon_cpu_pct: Option<f64>,
    /// How long the shaper took to set up, ms: `metronome run` from its start to forwarding its
    /// first frame, or the `tc -batch` of HTB's classes and filters.
    pub setup_ms: u64,
    /// The latest a paced frame left the sender after its due time, ms.
    pub sender_lag_ms: f64,
    /// Frames the receiver's counter missed (its socket's drops): the classes undercount.
    pub receiver_missed: u64,
    /// Frames the daemon's sockets lost before it read them over the run
    /// (`metronome_rx_ring_drops_total` at the end): a daemon that was not scheduled in time, or
    /// could not keep up; `null` for the kernel shaper or when its metrics could not be read.
    #[serde(default)]
    pub daemon_socket_drops: Option<u64>,
}

/// A shaper's run: its row, or why it could not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ClassesOutcome {
    /// Measured.
    Measured(ClassesRow),
    /// Not measured.
    Failed {
        /// Which shaper.
        shaper: Shaper,
        /// Classes.
        classes: usize,
        /// Why, in one line.
        error: String,
    },
}

/// The daemon's configuration text for `options` on the bump in the wire: a class per
/// destination /32 (see the module docs).
pub fn daemon_config_text(options: &ClassesOptions) -> String {
    let queue = queue_packets(options.classes);
    let slots = (options.classes * queue + POOL_HEADROOM).clamp(1024, 65_536);
    let mut text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\nmtu = {}\n\n[daemon]\nvnet_hdr = \
         false\n\n[wheel]\npool_packets = {slots}\n",
        options.mtu()
    );
    for i in 0..options.classes {
        let _ = write!(
            text,
            "\n[[class]]\nname = \"c{i}\"\nmatch = {{ dst = \"{}/32\" }}\nrate = {}\nqueue = {{ \
             packets = {queue} }}\n",
            ClassFlows::dst(i),
            options.rate_bps(i)
        );
    }
    text
}

/// The `tc -batch` text of the kernel baseline on `iface` (see the module docs): HTB with leaf
/// `1:(i+1)` per class and a two-level u32 hash on the destination's third and fourth octets.
/// At most 65 535 classes (HTB's minor class ids) within 10.128.0.0/16.
pub fn htb_batch(options: &ClassesOptions, iface: &str) -> String {
    let frame = options.frame_bytes;
    let mut b = format!("qdisc replace dev {iface} root handle 1: htb default ffff\n");
    for i in 0..options.classes {
        let rate = options.rate_bps(i);
        let _ = writeln!(
            b,
            "class add dev {iface} parent 1: classid 1:{:x} htb rate {rate}bit ceil {rate}bit \
             burst {frame} cburst {frame} quantum {frame}",
            i + 1
        );
    }
    let f = format!("filter add dev {iface} parent 1: prio 1 protocol ip u32");
    let thirds = options.classes.div_ceil(256);
    let _ = writeln!(
        b,
        "filter add dev {iface} parent 1: prio 1 handle 100: protocol ip u32 divisor 256"
    );
    for j in 0..thirds {
        let _ = writeln!(
            b,
            "filter add dev {iface} parent 1: prio 1 handle {:x}: protocol ip u32 divisor 256",
            0x200 + j
        );
        let net = ClassFlows::dst(j * 256);
        let _ = writeln!(
            b,
            "{f} ht 100:{j:x}: match ip dst {net}/24 hashkey mask 0x000000ff at 16 link {:x}:",
            0x200 + j
        );
    }
    for i in 0..options.classes {
        let (j, k) = (i / 256, i % 256);
        let _ = writeln!(
            b,
            "{f} ht {:x}:{k:x}: match ip dst {}/32 flowid 1:{:x}",
            0x200 + j,
            ClassFlows::dst(i),
            i + 1
        );
    }
    let _ = writeln!(
        b,
        "{f} ht 800:: match ip dst {}/16 hashkey mask 0x0000ff00 at 16 link 100:",
        ClassFlows::dst(0)
    );
    b
}

/// Runs `options`, printing progress to `progress`; one outcome per shaper. Only a failure of
/// the topology itself (also: no CAP_NET_ADMIN) is an error; a shaper that could not run is a
/// [`ClassesOutcome::Failed`].
///
/// * **metronome**: `metronome run` on `in0`/`out0` ([`daemon_config_text`]: a `[[class]]` per
///   class matching its /32, `rate`, the default one-frame burst, [`queue_packets`] frames of
///   queue; `[interfaces] mtu` the veths' and plain frames, `vnet_hdr = false`), a process of its
///   own as a user runs it ([`AttachedDaemon`]), measured once it forwards a first frame
///   ([`wait_forwarding`]: its metrics endpoint answers before it has built its engine);
/// * **htb-u32**: a bridge joins `in0` and `out0`; `out0` gets HTB with a leaf per class (`rate` =
///   `ceil` = the class's rate, `burst` = `cburst` = one frame, as the daemon's) and u32 filters
///   hashed on the destination address in two levels (the third octet, then the fourth: one
///   lookup per level whatever the number of classes, tc's `u32` hash tables), built with one
///   `tc -batch` ([`htb_batch`]).
///
/// The traffic ([`crate::class_traffic`]): raw UDP frames of [`ClassesOptions::frame_bytes`], each
/// class paced at its rate times [`ClassesOptions::overload`], so every class is over its rate and
/// the shaper, not the sender, sets what it delivers. After [`ClassesOptions::warmup`] (the
/// shaper's first burst and the classes' queues filling) each class's rate over
/// [`ClassesOptions::measure`] is measured at the receiver from its first to its last frame
/// ([`crate::class_traffic::ClassArrivals::rate_bps`]), and compared with its limit: the mean
/// absolute deviation, the smallest and largest signed deviation, the classes within
/// [`ClassesOptions::tolerance_pct`] and the worst class. CPU as `metronome compare` reports it
/// ([`super::measure`]): the machine's kernel time plus the user time of this process and of the
/// daemon, per Gbit/s delivered, and the daemon process's own (user + system) per Gbit/s.
///
/// Why jumbo frames: the aggregate of 10 000 classes at 1 Mbit/s is 10 Gbit/s, 833 000 frames/s
/// of 1 514 bytes, more than a raw sender, the daemon and a receiver share on a 2-core machine;
/// at 9 014 bytes it is 139 000 frames/s. The per-class work of the shapers (classify, one EDT
/// per frame) is per frame, so fewer, larger frames carry the same classes and rates. What the
/// sender could not offer is reported ([`ClassesRow::offered_bps`], [`ClassesRow::sender_lag_ms`]):
/// a class offered less than its rate measures the sender, not the shaper.
pub fn run(
    options: &ClassesOptions,
    progress: &mut dyn Write,
) -> Result<Vec<ClassesOutcome>, CompareError> {
    let mut topo = Topology::bump_in_the_wire(NS_PREFIX)?;
    let mtu = options.mtu().to_string();
    for (ns, iface) in topo.interfaces() {
        ns.ip(&["link", "set", "dev", iface, "mtu", &mtu])?;
    }
    let macs = (
        mac_of(&topo.receiver, &topo.receiver_if)?,
        mac_of(&topo.sender, &topo.sender_if)?,
    );
    let mut outcomes = Vec::new();
    for &shaper in &options.shapers {
        let _ = writeln!(
            progress,
            "{}: {} classes, {:.2} Gbit/s in all, {}-byte frames...",
            shaper.name(),
            options.classes,
            options.aggregate_bps() / 1e9,
            options.frame_bytes
        );
        let outcome = match run_one(&mut topo, options, macs, shaper) {
            Ok(Ok(row)) => ClassesOutcome::Measured(row),
            Ok(Err(error)) => ClassesOutcome::Failed {
                shaper,
                classes: options.classes,
                error,
            },
            Err(e) => return Err(e),
        };
        let _ = writeln!(progress, "  {}", describe(&outcome));
        outcomes.push(outcome);
    }
    topo.remove()?;
    Ok(outcomes)
}

/// One line about `outcome`.
pub fn describe(outcome: &ClassesOutcome) -> String {
    match outcome {
        ClassesOutcome::Measured(r) => format!(
            "{}: {}/{} classes within {} %, deviation mean {:.2} %, min {:+.2} %, max {:+.2} %, \
             {:.3} of {:.3} Gbit/s (offered {:.3}), cpu {:.1} %/G",
            r.shaper.name(),
            r.within_tolerance,
            r.classes,
            r.tolerance_pct,
            r.deviation_mean_pct,
            r.deviation_min_pct,
            r.deviation_max_pct,
            r.achieved_bps / 1e9,
            r.target_bps / 1e9,
            r.offered_bps / 1e9,
            r.cpu_pct
        ),
        ClassesOutcome::Failed { shaper, error, .. } => {
            format!("{}: not measured: {error}", shaper.name())
        }
    }
}

/// One shaper's run; `Ok(Err(why))` when the shaper could not be set up or measured.
fn run_one(
    topo: &mut Topology,
    options: &ClassesOptions,
    macs: ([u8; 6], [u8; 6]),
    shaper: Shaper,
) -> Result<Result<ClassesRow, String>, CompareError> {
    match shaper {
        Shaper::Metronome => {
            let Some(binary) = &options.daemon_binary else {
                return Ok(Err(
                    "no `metronome` binary to run the daemon with".to_owned()
                ));
            };
            let text = daemon_config_text(options);
            let config = match Config::from_toml_str(&text, "compare-classes.toml") {
                Ok(c) => c,
                Err(e) => return Ok(Err(format!("the daemon refused the configuration: {e}"))),
            };
            let started = Instant::now();
            let daemon = match AttachedDaemon::start(&topo.shaper, binary, (&text, &config), false)?
            {
                Ok(d) => d,
                Err(why) => return Ok(Err(why)),
            };
            let flows = class_flows(options, topo);
            let rx = topo.receiver.interface_counters(&topo.receiver_if)?;
            let probe = (&topo.sender, topo.sender_if.as_str());
            match wait_forwarding(probe, rx, macs, flows, FORWARD_TIMEOUT) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    let _ = daemon.stop();
                    let why =
                        format!("`metronome run` forwarded nothing within {FORWARD_TIMEOUT:?}");
                    return Ok(Err(why));
                }
                Err(e) => {
                    let _ = daemon.stop();
                    return Ok(Err(e.to_string()));
                }
            }
            let setup = started.elapsed();
            let mut cpu = || daemon.cpu_ns();
            let measured = measure(topo, options, macs, (&mut cpu, &[daemon.pid()]));
            let drops = daemon
                .metrics()
                .map(|m| m.sum("metronome_rx_ring_drops_total") as u64);
            let stopped = daemon.stop();
            let row = measured.map_err(|e| e.to_string()).and_then(|m| {
                stopped?;
                let mut row = m.row(shaper, options, setup);
                row.daemon_socket_drops = drops;
                Ok(row)
            });
            Ok(row)
        }
        Shaper::HtbU32 => {
            topo.bridge_shaper()?;
            topo.shaper.ip(&[
                "link",
                "set",
                "dev",
                "br0",
                "mtu",
                &options.mtu().to_string(),
            ])?;
            let started = Instant::now();
            let installed = install_batch(topo, &htb_batch(options, &topo.shaper_out));
            let setup = started.elapsed();
            let row = match installed {
                Ok(()) => measure(topo, options, macs, (&mut || None, &[]))
                    .map(|m| m.row(shaper, options, setup))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("tc -batch: {e}")),
            };
            topo.remove_qdisc(&topo.shaper_out.clone())?;
            topo.unbridge_shaper()?;
            Ok(row)
        }
        other => Ok(Err(other.not_in("the classes comparison"))),
    }
}

/// Writes `batch` to a scratch file and runs `tc -batch` on it in the shaper namespace.
fn install_batch(topo: &Topology, batch: &str) -> Result<(), TopoError> {
    let file = std::env::temp_dir().join(format!("{}.tc", topo.shaper.name()));
    std::fs::write(&file, batch).map_err(TopoError::Io)?;
    let path = file.to_string_lossy().into_owned();
    let result = run_command("tc", &["-n", topo.shaper.name(), "-batch", &path]);
    let _ = std::fs::remove_file(&file);
    result.map(drop)
}

/// What one shaper's traffic gave.
struct Measured {
    counted: CountReport,
    sent: SendReport,
    machine_cores: f64,
    daemon_cores: Option<f64>,
}

/// Sends the class traffic through the shaper in place and counts it at the receiver; reads the
/// CPU over the measured window (`cpu`: the daemon's CPU time so far, ns, `None` for none;
/// `pids`: processes whose user time the machine figure adds).
fn measure(
    topo: &Topology,
    options: &ClassesOptions,
    macs: ([u8; 6], [u8; 6]),
    (cpu, pids): (&mut dyn FnMut() -> Option<u64>, &[u32]),
) -> Result<Measured, FloodError> {
    let origin = Instant::now();
    let window = (options.warmup, options.warmup + options.measure);
    let counter = ClassCounter::spawn(
        &topo.receiver,
        &topo.receiver_if,
        (options.classes, options.frame_bytes),
        origin,
        window,
    )?;
    let flows = class_flows(options, topo);
    let offered_bps = (0..options.classes)
        .map(|i| (options.rate_bps(i) as f64 * options.overload) as u64)
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let sender_ns = topo.sender.clone();
    let iface = topo.sender_if.clone();
    let duration = window.1 + TAIL;
    let flag = stop.clone();
    let sender = std::thread::spawn(move || {
        let schedule = Schedule::Paced { offered_bps };
        send_classes(&sender_ns, &iface, macs, (flows, schedule), duration, flag)
    });
    let mut machine = MachineCpu::with_processes(pids).map_err(TopoError::Io)?;
    sleep_until(origin + window.0);
    let (m0, d0) = (machine.read().map_err(TopoError::Io)?, cpu());
    sleep_until(origin + window.1);
    let (m1, d1) = (machine.read().map_err(TopoError::Io)?, cpu());
    let sent = sender.join().map_err(|_| FloodError::ThreadPanicked)?;
    std::thread::sleep(Duration::from_millis(100));
    let counted = counter.finish()?;
    let sent = sent?;
    let secs = options.measure.as_secs_f64();
    Ok(Measured {
        counted,
        sent,
        machine_cores: m1.cores_since(&m0),
        daemon_cores: d0
            .zip(d1)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9 / secs),
    })
}

impl Measured {
    /// The row of `shaper`'s run.
    fn row(&self, shaper: Shaper, options: &ClassesOptions, setup: Duration) -> ClassesRow {
        let tol = options.tolerance_pct;
        let mut row = ClassesRow {
            shaper,
            classes: options.classes,
            frame_bytes: options.frame_bytes,
            target_bps: options.aggregate_bps(),
            offered_bps: self.sent.offered_bps(),
            achieved_bps: 0.0,
            measured: 0,
            within_tolerance: 0,
            tolerance_pct: tol,
            deviation_mean_pct: 0.0,
            deviation_min_pct: f64::INFINITY,
            deviation_max_pct: f64::NEG_INFINITY,
            worst: None,
            cpu_pct: 0.0,
            daemon_cpu_pct: None,
            setup_ms: setup.as_millis() as u64,
            sender_lag_ms: self.sent.max_lag.as_secs_f64() * 1e3,
            receiver_missed: self.counted.missed,
            daemon_socket_drops: None,
        };
        let mut worst: Option<(f64, WorstClass)> = None;
        let mut abs_sum = 0.0;
        for (i, a) in self.counted.classes.iter().enumerate() {
            let target = options.rate_bps(i);
            let rate = a.rate_bps();
            let dev = rate.map(|r| (r / target as f64 - 1.0) * 100.0);
            if let (Some(r), Some(d)) = (rate, dev) {
                row.measured += 1;
                row.achieved_bps += r;
                abs_sum += d.abs();
                row.within_tolerance += usize::from(d.abs() <= tol);
                row.deviation_min_pct = row.deviation_min_pct.min(d);
                row.deviation_max_pct = row.deviation_max_pct.max(d);
            }
            let badness = dev.map_or(f64::INFINITY, f64::abs);
            if worst.as_ref().is_none_or(|(b, _)| badness > *b) {
                let class = WorstClass {
                    class: i,
                    dst: ClassFlows::dst(i).to_string(),
                    target_bps: target,
                    achieved_bps: rate,
                    deviation_pct: dev,
                };
                worst = Some((badness, class));
            }
        }
        if row.measured == 0 {
            row.deviation_min_pct = 0.0;
            row.deviation_max_pct = 0.0;
        } else {
            row.deviation_mean_pct = abs_sum / row.measured as f64;
        }
        row.worst = worst.map(|w| w.1);
        row.cpu_pct = cpu_pct_per_gbit(self.machine_cores, row.achieved_bps);
        row.daemon_cpu_pct = self
            .daemon_cores
            .map(|c| cpu_pct_per_gbit(c, row.achieved_bps));
        row
    }
}

/// The frames of `options`'s classes from the sender of `topo`.
fn class_flows(options: &ClassesOptions, topo: &Topology) -> ClassFlows {
    ClassFlows {
        classes: options.classes,
        src: topo.sender_addr,
        frame_bytes: options.frame_bytes,
        src_port: PORTS.0,
        dst_port: PORTS.1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(classes: usize) -> ClassesOptions {
        ClassesOptions {
            classes,
            rates_bps: (1_000_000, 10_000_000),
            ..ClassesOptions::full()
        }
    }

    #[test]
    fn rates_spread_from_the_smallest_to_the_largest() {
        let o = options(10);
        assert_eq!(o.rate_bps(0), 1_000_000);
        assert_eq!(o.rate_bps(9), 10_000_000);
        assert_eq!(o.rate_bps(3), 4_000_000);
        assert!((o.aggregate_bps() - 55e6).abs() < 1.0);
        assert_eq!(options(1).rate_bps(0), 1_000_000);
        assert_eq!(ClassesOptions::full().mtu(), 9000);
    }

    #[test]
    fn the_daemon_configuration_has_a_class_per_destination() {
        let o = options(300);
        let config = Config::from_toml_str(&daemon_config_text(&o), "t.toml").unwrap();
        assert_eq!(config.classes.len(), 300);
        assert_eq!(config.interfaces.mtu, 9000);
        assert!(!config.daemon.vnet_hdr);
        assert_eq!(queue_packets(300), MAX_QUEUE_PACKETS);
        assert_eq!(queue_packets(10_000), 6);
        assert_eq!(queue_packets(1_000_000), 2);
        assert!(queue_packets(10_000) * 10_000 + POOL_HEADROOM <= 65_536);
        let text = daemon_config_text(&o);
        assert!(
            text.contains("name = \"c257\"\nmatch = { dst = \"10.128.1.1/32\" }"),
            "{text}"
        );
    }

    #[test]
    fn the_htb_batch_has_a_leaf_and_a_hashed_filter_per_class() {
        let o = options(300);
        let b = htb_batch(&o, "out0");
        assert_eq!(
            b.lines().filter(|l| l.starts_with("class add")).count(),
            300
        );
        assert_eq!(b.lines().filter(|l| l.contains(" flowid 1:")).count(), 300);
        // Two second-level tables (300 classes span two third octets), each linked from its
        // bucket of the first level, and the root's link to the first level last.
        assert_eq!(b.lines().filter(|l| l.contains("divisor 256")).count(), 3);
        assert!(
            b.contains("ht 201:2b: match ip dst 10.128.1.43/32 flowid 1:12c"),
            "{b}"
        );
        assert!(b.contains(
            "ht 100:1: match ip dst 10.128.1.0/24 hashkey mask 0x000000ff at 16 link 201:"
        ));
        assert!(b.trim_end().ends_with("link 100:"), "{b}");
    }

    #[test]
    fn a_row_names_the_worst_class_and_counts_the_classes_within_tolerance() {
        use crate::class_traffic::ClassArrivals;
        let o = ClassesOptions {
            classes: 3,
            rates_bps: (1_000_000, 1_000_000),
            ..ClassesOptions::full()
        };
        // 1 000-byte frames every 8 ms is 1 Mbit/s; every 7.8 ms 2.56 % over.
        let class = |n: u64, every_ns: u64| ClassArrivals {
            frames: n,
            bytes: n * 1000,
            first_len: 1000,
            first_ns: 1_000,
            last_ns: 1_000 + (n - 1) * every_ns,
        };
        let m = Measured {
            counted: CountReport {
                classes: vec![
                    class(100, 8_000_000),
                    class(100, 7_800_000),
                    class(1, 8_000_000),
                ],
                other: 0,
                missed: 0,
            },
            sent: SendReport {
                started: Instant::now(),
                elapsed: Duration::from_secs(1),
                sent: 0,
                bytes: 0,
                refused: 0,
                tx_errors: 0,
                max_lag: Duration::ZERO,
            },
            machine_cores: 0.5,
            daemon_cores: None,
        };
        let row = m.row(Shaper::HtbU32, &o, Duration::from_millis(7));
        assert_eq!((row.measured, row.within_tolerance), (2, 1));
        assert!((row.deviation_max_pct - 2.564).abs() < 0.01, "{row:?}");
        assert!(row.deviation_min_pct.abs() < 1e-9, "{row:?}");
        let worst = row.worst.unwrap();
        assert_eq!(
            (worst.class, worst.achieved_bps),
            (2, None),
            "no rate is worst"
        );
        assert_eq!(row.setup_ms, 7);
    }
}
