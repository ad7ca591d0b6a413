//! The machine's own stalls, measured beside a run: one thread per CPU this process may use,
//! pinned to it at real-time priority (`SCHED_FIFO`: no ordinary task delays it), asleep for
//! [`PERIOD`] at a time. A wake-up later than [`RECORDED`] is a [`Stall`] of that CPU: for that
//! long nothing of this machine's tasks ran there, because the hypervisor ran something else on
//! it (steal) or the kernel ran interrupt work. Any task of the measured run on that CPU (the
//! daemon's loop, a sender) waited at least as long, whatever it was doing.
//!
//! Where this process may not use `SCHED_FIFO` (without CAP_SYS_NICE), the threads run at their
//! normal priority and measure the scheduler's queueing as well; [`Stalls::realtime`] says
//! which. `/proc/stat`'s steal time ([`steal_ms`]) is the hypervisor's own account, in whole
//! clock ticks (10 ms).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long each probe thread sleeps between two looks at the clock: 1 ms (a wake-up a
/// millisecond each per CPU: no measurable load).
pub const PERIOD: Duration = Duration::from_millis(1);
/// Wake-ups later than this are recorded: 200 us (an idle CPU wakes a real-time thread within
/// tens of microseconds).
pub const RECORDED: Duration = Duration::from_micros(200);
/// The probe's real-time priority (`SCHED_FIFO` 1..=99): above every ordinary task, below the
/// kernel's own real-time threads.
const PRIORITY: u8 = 50;

/// A CPU that did not run this machine's tasks for a while.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stall {
    /// The CPU.
    pub cpu: usize,
    /// When the probe's wake-up was due, from the origin given to [`StallProbe::spawn`].
    pub at: Duration,
    /// How much later it woke.
    pub late: Duration,
}

impl Stall {
    /// The part of `[from, to)` it covers.
    pub fn overlap(&self, from: Duration, to: Duration) -> Duration {
        let start = self.at.max(from);
        let end = (self.at + self.late).min(to);
        end.saturating_sub(start)
    }
}

/// What a [`StallProbe`] recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stalls {
    /// Whether the probe's threads ran at real-time priority (else they measured the
    /// scheduler's queueing too).
    pub realtime: bool,
    /// The CPUs probed.
    pub cpus: usize,
    /// Every stall, by CPU then time.
    pub stalls: Vec<Stall>,
}

/// The stalls of one span of time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StallSummary {
    /// Stalls longer than 1 ms that fall (at least partly) in the span.
    pub over_1ms: usize,
    /// The longest of them, microseconds (its whole length).
    pub longest_us: u64,
    /// The time the CPUs stalled within the span, all CPUs together, milliseconds.
    pub stalled_ms: f64,
}

impl Stalls {
    /// The longest stall of any CPU overlapping `[from, to)` (zero when none).
    pub fn longest_in(&self, from: Duration, to: Duration) -> Duration {
        self.stalls
            .iter()
            .filter(|s| !s.overlap(from, to).is_zero())
            .map(|s| s.late)
            .max()
            .unwrap_or_default()
    }

    /// The stalls of `[from, to)`.
    pub fn summary(&self, from: Duration, to: Duration) -> StallSummary {
        let within: Vec<&Stall> = self
            .stalls
            .iter()
            .filter(|s| !s.overlap(from, to).is_zero())
            .collect();
        let long: Vec<&&Stall> = within
            .iter()
            .filter(|s| s.late > Duration::from_millis(1))
            .collect();
        StallSummary {
            over_1ms: long.len(),
            longest_us: within
                .iter()
                .map(|s| u64::try_from(s.late.as_micros()).unwrap_or(u64::MAX))
                .max()
                .unwrap_or(0),
            stalled_ms: within
                .iter()
                .map(|s| s.overlap(from, to).as_secs_f64() * 1e3)
                .sum(),
        }
    }
}

/// The probe's threads, running until [`StallProbe::finish`].
pub struct StallProbe {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(bool, Vec<Stall>)>>,
}

impl StallProbe {
    /// Starts one thread per CPU this process may run on; stall times count from `origin`.
    pub fn spawn(origin: Instant) -> std::io::Result<StallProbe> {
        let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .map_err(std::io::Error::from)?;
        let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            let flag = stop.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("stall-probe-{cpu}"))
                .spawn(move || probe(cpu, origin, &flag));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    let probe = StallProbe { stop, threads };
                    probe.finish();
                    return Err(e);
                }
            }
        }
        Ok(StallProbe { stop, threads })
    }

    /// Stops the threads and gives what they recorded.
    pub fn finish(self) -> Stalls {
        self.stop.store(true, Ordering::Release);
        let cpus = self.threads.len();
        let mut realtime = cpus > 0;
        let mut stalls = Vec::new();
        for t in self.threads {
            match t.join() {
                Ok((rt, s)) => {
                    realtime &= rt;
                    stalls.extend(s);
                }
                Err(_) => realtime = false,
            }
        }
        Stalls {
            realtime,
            cpus,
            stalls,
        }
    }
}

/// One probe thread: pinned to `cpu`, real time where allowed, until `stop`.
fn probe(cpu: usize, origin: Instant, stop: &AtomicBool) -> (bool, Vec<Stall>) {
    let mut set = nix::sched::CpuSet::new();
    let pinned = set.set(cpu).is_ok()
        && nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok();
    let realtime = pinned && metronome_daemon::os::realtime::enter(PRIORITY).is_ok();
    let mut stalls = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let due = Instant::now() + PERIOD;
        std::thread::sleep(PERIOD);
        let late = Instant::now().saturating_duration_since(due);
        if late > RECORDED {
            stalls.push(Stall {
                cpu,
                at: due.saturating_duration_since(origin),
                late,
            });
        }
    }
    (realtime, stalls)
}

/// The machine's steal time so far (`/proc/stat`'s `cpu` line, eighth field), milliseconds, in
/// whole clock ticks; `None` when it cannot be read.
pub fn steal_ms() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks = crate::compare::measure::parse_proc_stat(&text)?.steal;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&hz| hz > 0)?;
    Some(ticks as f64 * 1e3 / hz as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stall(cpu: usize, at_ms: u64, late_us: u64) -> Stall {
        Stall {
            cpu,
            at: Duration::from_millis(at_ms),
            late: Duration::from_micros(late_us),
        }
    }

    #[test]
    fn overlaps_and_summaries_count_what_falls_in_the_span() {
        let s = Stalls {
            realtime: true,
            cpus: 2,
            stalls: vec![stall(0, 10, 300), stall(1, 20, 3_000), stall(0, 99, 2_000)],
        };
        let ms = Duration::from_millis;
        assert_eq!(s.longest_in(ms(0), ms(15)), Duration::from_micros(300));
        // The second stall runs 20..23 ms: a span from 22 ms sees it.
        assert_eq!(s.longest_in(ms(22), ms(30)), ms(3));
        assert_eq!(s.longest_in(ms(30), ms(99)), Duration::ZERO);
        let sum = s.summary(ms(0), ms(100));
        assert_eq!((sum.over_1ms, sum.longest_us), (2, 3_000));
        // 0.3 + 3 + the first 1 ms of the last.
        assert!((sum.stalled_ms - 4.3).abs() < 1e-9, "{sum:?}");
        assert_eq!(s.summary(ms(40), ms(90)), StallSummary::default());
    }

    #[test]
    fn the_probe_runs_on_every_allowed_cpu_and_stops() {
        let origin = Instant::now();
        let probe = StallProbe::spawn(origin).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let stalls = probe.finish();
        assert!(stalls.cpus >= 1);
        assert!(stalls
            .stalls
            .iter()
            .all(|s| s.late > RECORDED && s.at < origin.elapsed()));
    }

    #[test]
    fn steal_is_read_from_proc_stat() {
        assert!(steal_ms().is_some_and(|ms| ms >= 0.0));
    }
}
