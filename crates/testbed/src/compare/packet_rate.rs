//! `metronome compare --packet-rate`: small UDP frames per second through `metronome run` with
//! many classes against one class, real traffic on the bump in the wire, and the daemon's CPU per
//! frame (NicPic §1: the per-packet work of tens of thousands of rate limiters must not grow
//! with their number).
//!
//! The traffic, the runs and what they measure are [`run`]'s.

use super::attach::AttachedDaemon;
use super::CompareError;
use crate::class_traffic::{
    send_classes, wait_forwarding, ClassFlows, Schedule, SendReport, MAX_CLASSES,
};
use crate::flood::frames::mac_of;
use crate::flood::FloodError;
use crate::netns::{TopoError, Topology};
use metronome_daemon::ops::config::Config;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prefix of the namespaces of `compare --packet-rate`.
pub const NS_PREFIX: &str = "mtr-pps";
/// Every class's rate, bit/s: 100 Gbit/s, ten times what one core forwards on veth (the
/// `--ceiling` runs of `metronome compare`), so no class ever holds a frame back.
pub const CLASS_RATE_BPS: u64 = 100_000_000_000;
/// The most classes the daemon accepts today (`ClassId` is 16 bits, one id for the default):
/// the default large class count.
pub const DAEMON_MAX_CLASSES: usize = 65_534;
/// Delivered frames over sent frames above which the sender, not the daemon, limits: 0.95.
pub const SENDER_LIMITED: f64 = 0.95;
/// Traffic kept running after the measured window.
const TAIL: Duration = Duration::from_millis(300);

/// What `compare --packet-rate` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct PacketRateOptions {
    /// Class counts, each run in turn every round.
    pub class_counts: Vec<usize>,
    /// Frame length, bytes (Ethernet header included).
    pub frame_bytes: usize,
    /// Skipped after the traffic starts.
    pub warmup: Duration,
    /// Measured after the warm-up.
    pub measure: Duration,
    /// Times each class count runs.
    pub rounds: usize,
    /// The `metronome` binary whose `run` is measured.
    pub daemon_binary: Option<PathBuf>,
}

impl PacketRateOptions {
    /// One class against [`DAEMON_MAX_CLASSES`], 64-byte frames, 1 s of warm-up and 5 s
    /// measured, three rounds.
    pub fn full() -> Self {
        PacketRateOptions {
            class_counts: vec![1, DAEMON_MAX_CLASSES],
            frame_bytes: 64,
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            rounds: 3,
            daemon_binary: None,
        }
    }

    /// The destinations the traffic is spread over: the largest class count's.
    pub fn flows(&self) -> usize {
        self.class_counts
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .clamp(1, MAX_CLASSES)
    }
}

/// One run: exactly the fields of a row of `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PacketRateRow {
    /// Classes of the daemon's configuration.
    pub classes: usize,
    /// Which round.
    pub round: usize,
    /// Frame length, bytes.
    pub frame_bytes: usize,
    /// Frames per second the sender's socket took.
    pub sent_fps: f64,
    /// Frames per second the receiver's veth got over the window.
    pub delivered_fps: f64,
    /// The daemon process's CPU over the window, in CPUs (1 = one CPU all the time).
    pub daemon_cpus: f64,
    /// The daemon's CPU time per delivered frame, ns.
    pub daemon_ns_per_frame: f64,
    /// From starting `metronome run` to its forwarding a first frame, ms.
    pub setup_ms: u64,
    /// Frames the daemon's sockets lost before it read them over the run
    /// (`metronome_rx_ring_drops_total` at the end; `null`: its metrics could not be read).
    #[serde(default)]
    pub daemon_socket_drops: Option<u64>,
}

/// A run: its row, or why it could not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PacketRateOutcome {
    /// Measured.
    Measured(PacketRateRow),
    /// Not measured.
    Failed {
        /// Classes.
        classes: usize,
        /// Which round.
        round: usize,
        /// Why, in one line.
        error: String,
    },
}

/// The daemon's configuration for `classes` classes of a packet-rate run (see the module docs):
/// class `i` the destination of flow `i`, or one class for all of them; the daemon's defaults
/// otherwise.
pub fn daemon_config_text(classes: usize) -> String {
    let mut text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n".to_owned();
    if classes == 1 {
        let _ = write!(
            text,
            "\n[[class]]\nname = \"all\"\nmatch = {{ dst = \"{}/9\" }}\nrate = {CLASS_RATE_BPS}\n",
            ClassFlows::dst(0)
        );
        return text;
    }
    for i in 0..classes {
        let _ = write!(
            text,
            "\n[[class]]\nname = \"c{i}\"\nmatch = {{ dst = \"{}/32\" }}\nrate = {CLASS_RATE_BPS}\n",
            ClassFlows::dst(i)
        );
    }
    text
}

/// Whether the sender limited a run: the receiver got at least [`SENDER_LIMITED`] of what was
/// sent.
pub fn sender_limited(row: &PacketRateRow) -> bool {
    row.sent_fps > 0.0 && row.delivered_fps / row.sent_fps >= SENDER_LIMITED
}

/// Runs `options`, printing progress to `progress`: every class count once per round, in
/// turn. Only a failure of the topology itself is an error.
///
/// The traffic is the same for every run: [`crate::class_traffic::send_classes`] as fast as the
/// sender goes ([`Schedule::Flood`]), [`PacketRateOptions::frame_bytes`]-byte UDP frames to the
/// destinations of the largest class count in turn, one flow per destination. A run with `n`
/// classes gives class `i` the destination /32 of flow `i` ([`daemon_config_text`]); the run with
/// one class gives its class all of them (one prefix). Every class's rate is
/// [`CLASS_RATE_BPS`], far above what arrives, so that the daemon's per-packet work (parse,
/// classify, stamp, send), not the shaping, limits what passes.
///
/// Each run starts once `metronome run` forwards a first frame
/// ([`crate::class_traffic::wait_forwarding`]). Measured after [`PacketRateOptions::warmup`], over
/// [`PacketRateOptions::measure`]: the frames the receiver's veth got per second (`rx_packets`),
/// the frames the sender's socket took per second, and the daemon process's CPU (user + system time
/// of all its threads) per delivered frame. The runs alternate ([`PacketRateOptions::rounds`]
/// times), so that a noisy moment of the shared machine does not fall on one class count only. When
/// the sender, not the daemon, limits (the daemon delivers about everything it is sent,
/// [`sender_limited`]), the ratio of frames per second compares nothing, and the CPU per frame is
/// the figure.
pub fn run(
    options: &PacketRateOptions,
    progress: &mut dyn Write,
) -> Result<Vec<PacketRateOutcome>, CompareError> {
    let topo = Topology::bump_in_the_wire(NS_PREFIX)?;
    let macs = (
        mac_of(&topo.receiver, &topo.receiver_if)?,
        mac_of(&topo.sender, &topo.sender_if)?,
    );
    let mut outcomes = Vec::new();
    for round in 0..options.rounds {
        for &classes in &options.class_counts {
            let _ = write!(progress, "round {round}: {classes} classes... ");
            let outcome = match run_one(&topo, options, macs, classes) {
                Ok(mut row) => {
                    row.round = round;
                    PacketRateOutcome::Measured(row)
                }
                Err(error) => PacketRateOutcome::Failed {
                    classes,
                    round,
                    error,
                },
            };
            let _ = writeln!(progress, "{}", describe(&outcome));
            outcomes.push(outcome);
        }
    }
    topo.remove()?;
    Ok(outcomes)
}

/// One line about `outcome`.
pub fn describe(outcome: &PacketRateOutcome) -> String {
    match outcome {
        PacketRateOutcome::Measured(r) => format!(
            "{} classes: delivered {:.0} frames/s of {:.0} sent, daemon {:.2} CPUs, {:.0} ns per \
             frame, {} frames lost at its sockets",
            r.classes,
            r.delivered_fps,
            r.sent_fps,
            r.daemon_cpus,
            r.daemon_ns_per_frame,
            r.daemon_socket_drops
                .map_or("unknown".to_owned(), |d| d.to_string())
        ),
        PacketRateOutcome::Failed { classes, error, .. } => {
            format!("{classes} classes: not measured: {error}")
        }
    }
}

/// One run with `classes` classes; `Err(why)` when it could not run.
fn run_one(
    topo: &Topology,
    options: &PacketRateOptions,
    macs: ([u8; 6], [u8; 6]),
    classes: usize,
) -> Result<PacketRateRow, String> {
    let binary = options
        .daemon_binary
        .as_ref()
        .ok_or("no `metronome` binary to run the daemon with")?;
    let text = daemon_config_text(classes);
    let config = Config::from_toml_str(&text, "compare-packet-rate.toml")
        .map_err(|e| format!("the daemon refused the configuration: {e}"))?;
    let started = Instant::now();
    let daemon = AttachedDaemon::start(&topo.shaper, binary, (&text, &config), false)
        .map_err(|e| e.to_string())??;
    let rx = topo
        .receiver
        .interface_counters(&topo.receiver_if)
        .map_err(|e| e.to_string())?;
    let probe = (&topo.sender, topo.sender_if.as_str());
    let timeout = super::classes::FORWARD_TIMEOUT;
    match wait_forwarding(probe, rx, macs, flows(options, topo), timeout) {
        Ok(Some(_)) => {}
        Ok(None) => {
            let _ = daemon.stop();
            return Err(format!(
                "`metronome run` forwarded nothing within {timeout:?}"
            ));
        }
        Err(e) => {
            let _ = daemon.stop();
            return Err(e.to_string());
        }
    }
    let setup = started.elapsed();
    let measured = measure(topo, options, macs, &daemon);
    let drops = daemon
        .metrics()
        .map(|m| m.sum("metronome_rx_ring_drops_total") as u64);
    let stopped = daemon.stop();
    let (sent, frames, cpu_ns) = measured.map_err(|e| e.to_string())?;
    stopped?;
    let secs = options.measure.as_secs_f64();
    Ok(PacketRateRow {
        classes,
        round: 0,
        frame_bytes: options.frame_bytes,
        sent_fps: sent.sent as f64 / sent.elapsed.as_secs_f64().max(1e-9),
        delivered_fps: frames as f64 / secs,
        daemon_cpus: cpu_ns as f64 / 1e9 / secs,
        daemon_ns_per_frame: if frames > 0 {
            cpu_ns as f64 / frames as f64
        } else {
            f64::NAN
        },
        setup_ms: setup.as_millis() as u64,
        daemon_socket_drops: drops,
    })
}

/// Floods through the daemon; returns the sender's report, the frames the receiver's veth got
/// over the window and the daemon's CPU time over it, ns.
fn measure(
    topo: &Topology,
    options: &PacketRateOptions,
    macs: ([u8; 6], [u8; 6]),
    daemon: &AttachedDaemon,
) -> Result<(SendReport, u64, u64), FloodError> {
    let flows = flows(options, topo);
    let stop = Arc::new(AtomicBool::new(false));
    let (sender_ns, iface, flag) = (topo.sender.clone(), topo.sender_if.clone(), stop.clone());
    let duration = options.warmup + options.measure + TAIL;
    let sender = std::thread::spawn(move || {
        send_classes(
            &sender_ns,
            &iface,
            macs,
            (flows, Schedule::Flood),
            duration,
            flag,
        )
    });
    let mut rx = topo.receiver.interface_counters(&topo.receiver_if)?;
    let origin = Instant::now();
    std::thread::sleep(options.warmup);
    let (f0, c0) = (rx.read()?.rx_packets, daemon.cpu_ns());
    let remaining =
        (origin + options.warmup + options.measure).saturating_duration_since(Instant::now());
    std::thread::sleep(remaining);
    let (f1, c1) = (rx.read()?.rx_packets, daemon.cpu_ns());
    let sent = sender.join().map_err(|_| FloodError::ThreadPanicked)??;
    let cpu = c0
        .zip(c1)
        .map(|(a, b)| b.saturating_sub(a))
        .ok_or(TopoError::Command {
            command: format!("read /proc/{}/stat", daemon.pid()),
            stderr: "the daemon's CPU time could not be read".to_owned(),
        })?;
    Ok((sent, f1.saturating_sub(f0), cpu))
}

/// The frames of a packet-rate run from the sender of `topo`.
fn flows(options: &PacketRateOptions, topo: &Topology) -> ClassFlows {
    ClassFlows {
        classes: options.flows(),
        src: topo.sender_addr,
        frame_bytes: options.frame_bytes,
        src_port: 40_000,
        dst_port: 9,
    }
}

/// The medians per class count of the measured rows: (classes, delivered frames/s, ns per
/// frame), in the order the counts first appear.
pub fn medians(outcomes: &[PacketRateOutcome]) -> Vec<(usize, f64, f64)> {
    let mut counts: Vec<usize> = Vec::new();
    for o in outcomes {
        if let PacketRateOutcome::Measured(r) = o {
            if !counts.contains(&r.classes) {
                counts.push(r.classes);
            }
        }
    }
    counts
        .into_iter()
        .map(|n| {
            let rows: Vec<&PacketRateRow> = outcomes
                .iter()
                .filter_map(|o| match o {
                    PacketRateOutcome::Measured(r) if r.classes == n => Some(r),
                    _ => None,
                })
                .collect();
            let fps: Vec<f64> = rows.iter().map(|r| r.delivered_fps).collect();
            let ns: Vec<f64> = rows.iter().map(|r| r.daemon_ns_per_frame).collect();
            let median = |v: &[f64]| crate::stats::median(v).unwrap_or(f64::NAN);
            (n, median(&fps), median(&ns))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_class_takes_every_flow_and_many_take_one_each() {
        let one = Config::from_toml_str(&daemon_config_text(1), "t.toml").unwrap();
        assert_eq!(one.classes.len(), 1);
        let many = Config::from_toml_str(&daemon_config_text(1000), "t.toml").unwrap();
        assert_eq!(many.classes.len(), 1000);
        let text = daemon_config_text(1000);
        assert!(text.contains("name = \"c999\"\nmatch = { dst = \"10.128.3.231/32\" }"));
        assert_eq!(PacketRateOptions::full().flows(), DAEMON_MAX_CLASSES);
    }

    #[test]
    fn medians_go_per_class_count_and_the_sender_limit_is_named() {
        let row = |classes, fps, ns| {
            PacketRateOutcome::Measured(PacketRateRow {
                classes,
                round: 0,
                frame_bytes: 64,
                sent_fps: 100.0,
                delivered_fps: fps,
                daemon_cpus: 0.5,
                daemon_ns_per_frame: ns,
                setup_ms: 1,
                daemon_socket_drops: None,
            })
        };
        let failed = PacketRateOutcome::Failed {
            classes: 1,
            round: 2,
            error: "x".into(),
        };
        let rows = [
            row(1, 99.0, 10.0),
            row(5, 50.0, 30.0),
            row(1, 97.0, 12.0),
            failed,
        ];
        let m = medians(&rows);
        assert_eq!(m, vec![(1, 98.0, 11.0), (5, 50.0, 30.0)]);
        let PacketRateOutcome::Measured(r) = &rows[0] else {
            unreachable!()
        };
        assert!(sender_limited(r));
        let PacketRateOutcome::Measured(r) = &rows[1] else {
            unreachable!()
        };
        assert!(!sender_limited(r));
    }
}
