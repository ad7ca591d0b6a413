//! The machine's load beside a real-traffic test: a CPU hog the test runs beside itself when
//! asked ([`CpuHog::from_env`], `METRONOME_TEST_CPU_HOG=N`: N threads that spin, as
//! `stress-ng --cpu N` does), and the load the test saw ([`LoadSample`], [`describe`]): the
//! load average, the CPUs' busy share and the hypervisor's steal time over the run, printed
//! with the test's figures so that a figure measured on a busy machine says so.

use crate::compare::measure::{parse_proc_stat, CpuTimes};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The variable that asks for a CPU hog: the number of spinning threads.
pub const HOG_ENV: &str = "METRONOME_TEST_CPU_HOG";

/// Threads that spin until dropped: an unrelated CPU hog beside a test.
pub struct CpuHog {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl CpuHog {
    /// `n` spinning threads (ordinary tasks, nice 0).
    pub fn spinning(n: usize) -> CpuHog {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("cpu-hog-{i}"))
                    .spawn(move || {
                        let mut x = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    })
                    .expect("spawn a hog thread")
            })
            .collect();
        CpuHog { stop, threads }
    }

    /// As many spinning threads as [`HOG_ENV`] says (none when unset or not a number).
    pub fn from_env() -> CpuHog {
        let n = std::env::var(HOG_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Self::spinning(n)
    }

    /// Its threads.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The machine's counters at one instant.
#[derive(Clone, Copy, Debug)]
pub struct LoadSample {
    /// `/proc/stat`'s CPU times.
    pub stat: Option<CpuTimes>,
    /// The one-minute load average of `/proc/loadavg`.
    pub loadavg: Option<f64>,
}

impl LoadSample {
    /// Reads them now.
    pub fn now() -> LoadSample {
        let stat = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| parse_proc_stat(&t));
        let loadavg = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok());
        LoadSample { stat, loadavg }
    }
}

/// One line on the load between `from` and `to` with `hog` hog threads: the load average at
/// the end, the share of the CPUs' time in the kernel (system, irq, softirq: where the
/// veths' and sockets' work is done) and the steal time.
pub fn describe(from: &LoadSample, to: &LoadSample, hog: usize) -> String {
    let load = to.loadavg.map_or("?".to_string(), |l| format!("{l:.2}"));
    let (busy, steal, cpus) = match (from.stat, to.stat) {
        (Some(a), Some(b)) if b.total > a.total => {
            let total = (b.total - a.total) as f64;
            (
                format!("{:.0} %", 100.0 * (b.busy - a.busy) as f64 / total),
                format!("{:.2} %", 100.0 * (b.steal - a.steal) as f64 / total),
                b.cpus,
            )
        }
        _ => ("?".into(), "?".into(), 0),
    };
    format!(
        "machine: {cpus} CPUs, load average {load}, kernel time {busy}, steal {steal}, CPU hog \
         threads {hog}"
    )
}
