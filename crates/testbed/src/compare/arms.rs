//! The shapers of the kernel grid on the bump in the wire, started and stopped one at a time:
//! the daemon's loop or silos with its one-class configuration ([`metronome_config`],
//! [`metronome_fair_config`], [`passthrough_config`]), a kernel qdisc on a bridge, or the plain
//! forwarder (see `crate::compare`'s module docs for what each row is).

use super::{
    measure_run, CompareError, CompareOptions, DaemonLoop, RunReport, Shaper, TrafficPath,
};
use crate::forwarder::ForwarderMode;
use crate::netns::{QdiscSpec, TopoError, Topology};
use crate::offloads::OffloadMode;
use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_daemon::ops::service::run_with;
use metronome_io::ThreadCpu;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The daemon's configuration for a run: one class, all TCP to `receiver`, `target_bps`
/// aggregate, the default burst (one frame), ECN backpressure at 1 ms of queued delay (the
/// sender negotiates ECN), and a hard limit: a 250 ms horizon with `horizon_policy = "reject"`
/// (Carousel §5.1.2: dropping beyond the horizon suits a hard rate limit; clamping lets a full
/// wheel overshoot when many flows ignore ECN, as the host's default BBR does).
pub fn metronome_config(receiver: std::net::Ipv4Addr, target_bps: u64) -> Config {
    class_config(receiver, target_bps, "")
}

/// Large (super-frame) slots of the fair row's daemon: a fair class holds each backlogged flow's
/// queued super-frames until its turn, so 256 flows hold the default 256 slots and arriving
/// super-frames are refused. 1 024 (66 MiB): measured with `metronome compare --target
/// 100mbit,1gbit --flows 256` on a loaded 2-core machine, 256 slots gave 1.5-2.1 % below the
/// rate with 6 000-10 600 frames shed; 1 024 gave 0.6-1.2 % and 300-3 200.
pub const FAIR_GSO_SLOTS: u32 = 1024;

/// [`metronome_config`] with the class in the fair mode (`fair = true`) and
/// [`FAIR_GSO_SLOTS`] large slots: the aggregate still decides when the class sends, a flow
/// scheduler which flow's packet leaves, new and sparse flows first, so the probe does not wait
/// behind the bulk.
pub fn metronome_fair_config(receiver: std::net::Ipv4Addr, target_bps: u64) -> Config {
    let mut c = class_config(receiver, target_bps, "fair = true\n");
    c.daemon.gso_slots = FAIR_GSO_SLOTS;
    c
}

/// The one-class configuration of the metronome runs, `extra` added to the class table.
fn class_config(receiver: std::net::Ipv4Addr, target_bps: u64, extra: &str) -> Config {
    let text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[wheel]\nhorizon = \"250ms\"\n\n[[class]]\nname = \"compare\"\n\
         match = {{ dst = \"{receiver}\", protocol = \"tcp\" }}\nrate = {target_bps}\n\
         horizon_policy = \"reject\"\n\
         backpressure = {{ mode = \"ecn\", threshold = \"1ms\" }}\n{extra}"
    );
    // Built from well-formed values; a failure would be a defect of this function, tested by
    // `the_metronome_config_is_valid`.
    Config::from_toml_str(&text, "compare.toml").expect("the compare config is valid")
}

/// The daemon's configuration for the pass-through runs of `--ceiling`: the same interfaces and
/// wheel, no class, so every frame is parsed, classified to the default and sent at once.
pub fn passthrough_config() -> Config {
    let text = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n";
    // A constant, well-formed text; tested by `the_metronome_config_is_valid`.
    Config::from_toml_str(text, "passthrough.toml").expect("the pass-through config is valid")
}

/// Waits for the daemon's `thread` to open its ports and map its rings (100 ms); returns the
/// thread while its loop runs, or why the loop stopped by itself (its ports could not be
/// opened).
pub(crate) fn started(
    control: &Control,
    thread: crate::shaper::ShaperThread,
) -> Result<crate::shaper::ShaperThread, CompareError> {
    std::thread::sleep(Duration::from_millis(100));
    if control.stop.load(Ordering::Relaxed) {
        let result = thread
            .join()
            .map_err(|_| TopoError::ThreadPanicked("shaper".into()))??;
        return Err(match result {
            Err(e) => e.into(),
            Ok(_) => TopoError::Io(std::io::Error::other("the daemon stopped at once")).into(),
        });
    }
    Ok(thread)
}

/// The `rps_cpus` mask of every CPU but CPU 0 on a machine of `cpus` CPUs (sysfs format:
/// hexadecimal, 32-bit words separated by commas, most significant first); `None` with fewer
/// than two CPUs.
pub fn endpoint_rps_mask(cpus: usize) -> Option<String> {
    if cpus < 2 {
        return None;
    }
    let word = |w: usize| -> u32 {
        let bits = (cpus - w * 32).min(32);
        let all = if bits == 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        if w == 0 {
            all & !1
        } else {
            all
        }
    };
    let parts: Vec<String> = (0..cpus.div_ceil(32))
        .rev()
        .map(|w| format!("{:08x}", word(w)))
        .collect();
    Some(parts.join(","))
}

/// Pins the calling thread to CPU 0 (see [`CompareOptions::isolate_daemon`]); a failure is a
/// warning.
pub(crate) fn pin_to_cpu0() {
    let mut set = nix::sched::CpuSet::new();
    let pinned = set
        .set(0)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = pinned {
        tracing::warn!("could not pin the daemon to CPU 0: {e}");
    }
}

/// The shaper of one run, set up; [`ActiveShaper::stop`] tears it down.
enum ActiveShaper {
    Daemon {
        control: Control,
        thread: crate::shaper::ShaperThread,
        cpu: Option<ThreadCpu>,
        /// Silos; with more than one their reports are logged by the thread itself.
        cores: usize,
    },
    Kernel,
    Forwarder {
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: std::thread::JoinHandle<
            Result<Result<crate::forwarder::ForwarderReport, metronome_io::PortError>, TopoError>,
        >,
    },
}

fn start_shaper(
    topo: &mut Topology,
    shaper: Shaper,
    target: u64,
    (forwarder, offloads, cores, isolate): (ForwarderMode, OffloadMode, usize, bool),
    daemon_loop: DaemonLoop,
) -> Result<ActiveShaper, CompareError> {
    let out = topo.shaper_out.clone();
    match shaper {
        Shaper::Forwarder => {
            topo.remove_qdisc(&out)?;
            topo.unbridge_shaper()?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let s = stop.clone();
            let (inside, outside) = (topo.shaper_in.clone(), out.clone());
            let thread = topo
                .shaper
                .spawn(move || crate::forwarder::forward_with(&inside, &outside, forwarder, &s))?;
            std::thread::sleep(Duration::from_millis(100)); // sockets open
            Ok(ActiveShaper::Forwarder { stop, thread })
        }
        Shaper::Metronome | Shaper::MetronomeFair | Shaper::Passthrough => {
            topo.remove_qdisc(&out)?;
            topo.unbridge_shaper()?;
            let mut config = match shaper {
                Shaper::Passthrough => passthrough_config(),
                Shaper::MetronomeFair => metronome_fair_config(topo.receiver_addr, target),
                _ => metronome_config(topo.receiver_addr, target),
            };
            offloads.configure(&mut config);
            daemon_loop.configure(&mut config);
            let cores = cores.max(1);
            config.daemon.cores = cores;
            let control = Control::default();
            let (tx, rx) = std::sync::mpsc::channel();
            let c = control.clone();
            let thread = topo.shaper.spawn(move || {
                // The hook of `daemon_cpu_pct`: this thread's schedstat, read by the caller
                // (with silos this thread only coordinates: nothing to read).
                if isolate && cores == 1 {
                    // Silos pin themselves, one CPU each.
                    pin_to_cpu0();
                }
                let cpu = if cores == 1 {
                    ThreadCpu::of_current_thread().ok()
                } else {
                    None
                };
                let _ = tx.send(cpu);
                let result = if cores == 1 {
                    run_with(&config, None, &Metrics::new(), &c)
                } else {
                    let metrics = Metrics::with_silos(cores);
                    metronome_daemon::driver::silo::run_silos(&config, None, &metrics, &c).map(
                        |silos| {
                            for s in &silos {
                                metronome_daemon::ops::service::log_report(&s.report);
                            }
                            metronome_daemon::driver::run::LoopReport::default()
                        },
                    )
                };
                if result.is_err() {
                    c.stop.store(true, Ordering::Relaxed);
                }
                result
            })?;
            let cpu = rx.recv_timeout(Duration::from_secs(1)).ok().flatten();
            let thread = started(&control, thread)?;
            Ok(ActiveShaper::Daemon {
                control,
                thread,
                cpu,
                cores,
            })
        }
        Shaper::Htb | Shaper::Tbf => {
            topo.bridge_shaper()?;
            let spec = match shaper {
                Shaper::Htb => QdiscSpec::Htb {
                    rate_bps: target,
                    burst_bytes: None,
                },
                _ => QdiscSpec::tbf(target),
            };
            topo.install_qdisc(&out, &spec)?;
            Ok(ActiveShaper::Kernel)
        }
        other => Err(CompareError::Refused(other.not_in("the kernel grid"))),
    }
}

impl ActiveShaper {
    fn stop(self, topo: &Topology) -> Result<(), CompareError> {
        match self {
            ActiveShaper::Daemon {
                control,
                thread,
                cores,
                ..
            } => {
                control.stop.store(true, Ordering::Relaxed);
                let report = thread
                    .join()
                    .map_err(|_| TopoError::ThreadPanicked("shaper".into()))???;
                if cores == 1 {
                    metronome_daemon::ops::service::log_report(&report);
                }
                Ok(())
            }
            ActiveShaper::Forwarder { stop, thread } => {
                stop.store(true, Ordering::Relaxed);
                let report = thread
                    .join()
                    .map_err(|_| TopoError::ThreadPanicked("forwarder".into()))???;
                tracing::info!(?report, "forwarder stopped");
                Ok(())
            }
            ActiveShaper::Kernel => {
                if let Ok(stats) = topo.qdisc_stats(&topo.shaper_out) {
                    tracing::debug!("{}", stats.trim());
                }
                Ok(topo.remove_qdisc(&topo.shaper_out)?)
            }
        }
    }

    fn cpu_ns(&mut self) -> Option<u64> {
        match self {
            ActiveShaper::Daemon { cpu: Some(c), .. } => c.read().ok(),
            _ => None,
        }
    }
}

/// One run: start the shaper, drive the traffic, measure, stop the shaper.
pub(super) fn run_one(
    topo: &mut Topology,
    options: &CompareOptions,
    shaper: Shaper,
    target: u64,
    flows: usize,
    port: u16,
) -> Result<RunReport, CompareError> {
    let modes = (
        options.forwarder_mode(),
        options.offloads,
        options.daemon_cores,
        options.isolate_daemon,
    );
    let mut active = start_shaper(topo, shaper, target, modes, options.daemon_loop)?;
    let path = TrafficPath::of(topo);
    let timing = (options.warmup, options.measure);
    let mut cpu = || active.cpu_ns();
    let measured = measure_run(
        &path,
        timing,
        (&mut cpu, &[]),
        &mut || {},
        shaper,
        (target, flows),
        port,
    );
    let stopped = active.stop(topo);
    let report = measured?;
    stopped?;
    Ok(report)
}
