//! What `metronome compare` measures, and how: the rate on the wire ([`WindowSampler`],
//! [`wire_bytes`]), the machine's CPU ([`MachineCpu`]) and the thread CPU of the daemon
//! ([`metronome_io::ThreadCpu`]); the statistics over them are `crate::stats`'s.
//!
//! Where it departs from Carousel §7.1.1 (conformance in 100 ms windows): the rate is the bytes
//! the receiver's TCP payload occupies on a wire in full segments, from the receiver veth's
//! `rx_bytes` and `rx_packets` ([`wire_bytes`]: a veth counts a GSO super-frame once, so the
//! payload is scaled by a full segment's frame-to-payload ratio), each window's over the
//! *measured* time between two reads; the CPU is the machine's kernel time plus this process's
//! user time ([`MachineCpu`]), not a thread's, since the kernel shapers work in softirq context;
//! [`CpuAccount`] splits it into user, system and softirq time, per Gbit/s and per frame.

use std::fs::File;
use std::io::{Read, Seek};
use std::time::{Duration, Instant};

/// Rate window: 100 ms (Carousel §7.1.1).
pub const WINDOW: Duration = Duration::from_millis(100);

/// Bytes of headers in each data frame of the compared TCP flows: 14 Ethernet + 20 IPv4 + 32 TCP
/// (Linux sends the timestamps option by default).
pub const FRAME_HEADERS: u64 = 66;

/// Frame bytes per payload byte of a full TCP segment: 1448 B of payload (the MSS of a 1500-byte
/// MTU with the timestamps option) in a 1514-byte frame.
pub const WIRE_PER_PAYLOAD: f64 = 1514.0 / 1448.0;

/// The bytes on a wire of what a receiver's interface counted as `rx_bytes` in `rx_packets`
/// frames of TCP data: their payload (bytes minus [`FRAME_HEADERS`] per frame) in full segments
/// ([`WIRE_PER_PAYLOAD`]). See the module docs.
pub fn wire_bytes(rx_bytes: u64, rx_packets: u64) -> u64 {
    let payload = rx_bytes.saturating_sub(FRAME_HEADERS * rx_packets);
    (payload as f64 * WIRE_PER_PAYLOAD) as u64
}

/// The rates of consecutive windows from `(time, cumulative bytes)` samples, in bits/s: window
/// `k` is `8 × (bytes[k+1] - bytes[k]) / (t[k+1] - t[k])`. A counter that goes backwards (it
/// cannot, short of an interface reset) counts as zero bytes; a zero-length window is skipped.
pub fn window_rates(samples: &[(Instant, u64)]) -> Vec<f64> {
    samples
        .windows(2)
        .filter_map(|w| {
            let dt = w[1].0.saturating_duration_since(w[0].0).as_secs_f64();
            (dt > 0.0).then(|| w[1].1.saturating_sub(w[0].1) as f64 * 8.0 / dt)
        })
        .collect()
}

/// Percent of one CPU per Gbit/s of achieved rate: `cpu_cores × 100 / (achieved_bps / 1e9)`.
/// 0 when nothing was achieved (no rate to charge the CPU to).
pub fn cpu_pct_per_gbit(cpu_cores: f64, achieved_bps: f64) -> f64 {
    if achieved_bps <= 0.0 {
        return 0.0;
    }
    cpu_cores * 100.0 / (achieved_bps / 1e9)
}

/// Samples a cumulative byte counter at [`WINDOW`] ticks.
#[derive(Debug, Default)]
pub struct WindowSampler {
    samples: Vec<(Instant, u64)>,
}

impl WindowSampler {
    /// Records one `(time, cumulative bytes)` sample.
    pub fn push(&mut self, at: Instant, bytes: u64) {
        self.samples.push((at, bytes));
    }

    /// The window rates so far, bits/s ([`window_rates`]).
    pub fn rates(&self) -> Vec<f64> {
        window_rates(&self.samples)
    }
}

/// One reading of `/proc/stat`'s aggregate line, in clock ticks, and the number of CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// `system + irq + softirq` of the machine plus this process's `utime` (see the module docs):
    /// `user + system + softirq` below.
    pub busy: u64,
    /// The user time counted: this process's `utime` and that of the processes of
    /// [`MachineCpu::with_processes`] (a daemon run as a process of its own).
    pub user: u64,
    /// The machine's `system` time.
    pub system: u64,
    /// The machine's `irq + softirq` time: where the kernel's qdiscs, the veths' receive path
    /// and the stacks' protocol work run.
    pub softirq: u64,
    /// All eight fields: the CPUs' whole time.
    pub total: u64,
    /// Lines `cpuN`: the CPUs the kernel accounts.
    pub cpus: u32,
    /// `steal`: time the hypervisor ran something else on the machine's CPUs.
    pub steal: u64,
}

/// Parses the text of `/proc/stat` (the `cpu` line and the `cpuN` lines).
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 5 {
        return None;
    }
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest is already inside user).
    let busy = get(2) + get(5) + get(6);
    let idle = get(0) + get(1) + get(3) + get(4) + get(7);
    let cpus = text
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(CpuTimes {
        busy,
        user: 0,
        system: get(2),
        softirq: get(5) + get(6),
        steal: get(7),
        total: busy + idle,
        cpus: u32::try_from(cpus).unwrap_or(u32::MAX).max(1),
    })
}

impl CpuTimes {
    /// CPUs busy on average between `earlier` and `self` (0 ..= `cpus`).
    pub fn cores_since(&self, earlier: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        let busy = self.busy.saturating_sub(earlier.busy);
        busy as f64 / total as f64 * f64::from(self.cpus)
    }

    /// [`CpuTimes::cores_since`] split into user, system and softirq time, CPUs each.
    pub fn split_since(&self, earlier: &CpuTimes) -> CoresSplit {
        let total = self.total.saturating_sub(earlier.total);
        let cores = |now: u64, then: u64| {
            if total == 0 {
                return 0.0;
            }
            now.saturating_sub(then) as f64 / total as f64 * f64::from(self.cpus)
        };
        CoresSplit {
            user: cores(self.user, earlier.user),
            system: cores(self.system, earlier.system),
            softirq: cores(self.softirq, earlier.softirq),
        }
    }
}

/// CPUs busy in user, system and softirq (with irq) time over a run: the parts of
/// [`CpuTimes::cores_since`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoresSplit {
    /// This process's user time (the senders, receivers and probe; an in-process daemon's
    /// loop too) and that of a daemon run as a process of its own.
    pub user: f64,
    /// The machine's system time (system calls: the copies into and out of sockets).
    pub system: f64,
    /// The machine's irq and softirq time (the stacks' receive and transmit work, qdiscs).
    pub softirq: f64,
}

/// Bytes of one full-size frame on the wire (1514: a 1500-byte MTU's segment with its Ethernet
/// header), the unit of [`CpuAccount`]'s per-packet figure.
pub const FULL_FRAME_BYTES: f64 = 1514.0;

/// The machine's busy CPU of a run, per Gbit/s achieved and per packet: what a step that moves
/// fewer bytes or wakes less saves shows in one part.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct CpuAccount {
    /// User time (see [`CoresSplit::user`]), percent of one CPU per Gbit/s.
    pub user_pct: f64,
    /// System time, percent of one CPU per Gbit/s.
    pub system_pct: f64,
    /// Irq and softirq time, percent of one CPU per Gbit/s.
    pub softirq_pct: f64,
    /// The machine's busy nanoseconds per full-size frame delivered ([`FULL_FRAME_BYTES`] on
    /// the wire; a super-frame counts as the frames it carries).
    pub ns_per_frame: f64,
    /// The machine's busy nanoseconds per KiB delivered on the wire.
    pub ns_per_kib: f64,
}

impl CpuAccount {
    /// The account of `split` (CPUs) at `achieved_bps` on the wire; `None` when nothing was
    /// achieved.
    pub fn of(split: CoresSplit, achieved_bps: f64) -> Option<CpuAccount> {
        if achieved_bps <= 0.0 {
            return None;
        }
        let busy = split.user + split.system + split.softirq;
        let bytes_per_s = achieved_bps / 8.0;
        Some(CpuAccount {
            user_pct: cpu_pct_per_gbit(split.user, achieved_bps),
            system_pct: cpu_pct_per_gbit(split.system, achieved_bps),
            softirq_pct: cpu_pct_per_gbit(split.softirq, achieved_bps),
            ns_per_frame: busy * 1e9 / (bytes_per_s / FULL_FRAME_BYTES),
            ns_per_kib: busy * 1e9 / (bytes_per_s / 1024.0),
        })
    }
}

/// What a run's shaper held and lost and what the senders resent (the attach comparison's host
/// part, where the senders are the host's own sockets): the figures of backpressure (Carousel
/// Figures 14-15 on real traffic).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct QueueAccount {
    /// TCP segments the senders' namespace retransmitted over the whole run (the flows' start
    /// included); `None` when its counters could not be read.
    pub retransmitted_segments: Option<u64>,
    /// Frames the shaper dropped over the whole run: the daemon's
    /// `metronome_class_drops_total`, a qdisc's `dropped` (`tc -s qdisc`).
    pub shaper_drops: Option<u64>,
    /// Frames the daemon held per flow of the class (its
    /// `metronome_class_held_per_flow_millipackets`), the mean of [`HELD_SAMPLES`] scrapes taken
    /// after the measured windows while the traffic still ran; `None` for a qdisc and where
    /// source pacing is off (the daemon computes it for paced classes only).
    pub held_per_flow: Option<f64>,
    /// Sockets that source pacing slowed (`metronome_sockets_slowed`), the mean of the same
    /// scrapes; `None` for a qdisc.
    pub sockets_slowed: Option<f64>,
}

/// How many scrapes [`QueueAccount::held_per_flow`] takes, [`HELD_EVERY`] apart, after the
/// measured windows (outside the CPU's account, inside the run's tail).
pub const HELD_SAMPLES: usize = 4;

/// The time between two of those scrapes.
pub const HELD_EVERY: Duration = Duration::from_millis(50);

/// The sum of the `dropped N` figures of a `tc -s qdisc show` output.
pub fn qdisc_drops(stats: &str) -> u64 {
    let words: Vec<&str> = stats.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0].trim_start_matches('(') == "dropped")
        .filter_map(|w| w[1].trim_end_matches(',').parse::<u64>().ok())
        .sum()
}

/// The user time of a process, field 14 (`utime`, clock ticks) of `/proc/<pid>/stat`, whose
/// second field (`comm`, in parentheses) may hold spaces.
pub fn parse_utime(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After `comm`: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime(14).
    after_comm.split_whitespace().nth(11)?.parse().ok()
}

/// A reader of the machine's CPU times (`/proc/stat`) and this process's (`/proc/self/stat`),
/// plus the user time of other processes that belong to the run (a daemon started as a process
/// of its own, [`MachineCpu::with_processes`]).
#[derive(Debug)]
pub struct MachineCpu {
    file: File,
    own: File,
    others: Vec<File>,
    buf: String,
}

impl MachineCpu {
    /// Opens `/proc/stat`.
    pub fn open() -> std::io::Result<Self> {
        Self::with_processes(&[])
    }

    /// [`MachineCpu::open`], counting the user time of the processes `pids` too.
    pub fn with_processes(pids: &[u32]) -> std::io::Result<Self> {
        let others = pids
            .iter()
            .map(|pid| File::open(format!("/proc/{pid}/stat")))
            .collect::<std::io::Result<Vec<File>>>()?;
        Ok(MachineCpu {
            file: File::open("/proc/stat")?,
            own: File::open("/proc/self/stat")?,
            others,
            buf: String::with_capacity(8192),
        })
    }

    /// Reads the current times.
    pub fn read(&mut self) -> std::io::Result<CpuTimes> {
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "unreadable /proc/stat");
        self.file.rewind()?;
        self.buf.clear();
        self.file.read_to_string(&mut self.buf)?;
        let mut times = parse_proc_stat(&self.buf).ok_or_else(bad)?;
        self.own.rewind()?;
        self.buf.clear();
        self.own.read_to_string(&mut self.buf)?;
        times.user += parse_utime(&self.buf).ok_or_else(bad)?;
        for other in &mut self.others {
            other.rewind()?;
            self.buf.clear();
            other.read_to_string(&mut self.buf)?;
            times.user += parse_utime(&self.buf).ok_or_else(bad)?;
        }
        times.busy += times.user;
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qdisc_drops_add_up_every_qdisc_of_the_output() {
        let stats = "qdisc htb 1: root refcnt 2 r2q 10 default 0x1 direct_packets_stat 0\n \
                     Sent 4542 bytes 3 pkt (dropped 7, overlimits 0 requeues 0)\n \
                     backlog 0b 0p requeues 0\n\
                     qdisc noqueue 0: dev lo root refcnt 2\n \
                     Sent 0 bytes 0 pkt (dropped 5, overlimits 0 requeues 0)\n";
        assert_eq!(qdisc_drops(stats), 12);
        assert_eq!(qdisc_drops(""), 0);
    }

    #[test]
    fn wire_bytes_count_every_segment_of_a_super_frame() {
        // 100 full MTU frames: what the veth counted.
        assert_eq!(wire_bytes(100 * 1514, 100), 100 * 1514);
        // The same payload as 2 super-frames of 50 segments: one set of headers each.
        let veth = 2 * (66 + 50 * 1448);
        assert_eq!(wire_bytes(veth, 2), 100 * 1514);
        // A counter read mid-reset cannot go below zero.
        assert_eq!(wire_bytes(10, 1), 0);
    }

    #[test]
    fn window_rates_use_the_measured_time_between_reads() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // 125 000 bytes in 100 ms = 10 Mbit/s; then 250 000 bytes in 200 ms (a late read) = 10.
        let samples = [(at(0), 1000), (at(100), 126_000), (at(300), 376_000)];
        let rates = window_rates(&samples);
        assert_eq!(rates.len(), 2);
        for r in &rates {
            assert!((r - 10e6).abs() < 1e-3, "{rates:?}");
        }
        // A counter going backwards is zero bytes, a zero-length window is skipped.
        assert_eq!(window_rates(&[(at(0), 10), (at(100), 5)]), [0.0]);
        assert!(window_rates(&[(at(0), 10), (at(0), 20)]).is_empty());
    }

    #[test]
    fn cpu_is_charged_per_gbit() {
        // Half a core at 500 Mbit/s is 100 % of a core per Gbit/s.
        assert_eq!(cpu_pct_per_gbit(0.5, 500e6), 100.0);
        assert_eq!(cpu_pct_per_gbit(1.0, 0.0), 0.0);
    }

    #[test]
    fn proc_stat_is_parsed() {
        let text = "cpu  100 5 50 800 20 3 7 1 0 0\ncpu0 50 2 25 400 10 1 3 0 0 0\n\
                    cpu1 50 3 25 400 10 2 4 1 0 0\nintr 12345\nctxt 99\n";
        let a = parse_proc_stat(text).unwrap();
        assert_eq!(
            a,
            CpuTimes {
                busy: 60,
                user: 0,
                system: 50,
                softirq: 10,
                total: 986,
                cpus: 2,
                steal: 1,
            }
        );
        let own = "4242 (tg accept) S 1 4242 4242 0 -1 4194560 10 0 0 0 77 5 0 0 20 0 9 0";
        assert_eq!(parse_utime(own), Some(77));
        let b = CpuTimes {
            busy: a.busy + 50,
            total: a.total + 200,
            ..a
        };
        assert_eq!(b.cores_since(&a), 0.5);
        assert_eq!(a.cores_since(&a), 0.0);
        assert!(parse_proc_stat("intr 1\n").is_none());
    }

    #[test]
    fn the_busy_time_splits_into_user_system_and_softirq() {
        let a = CpuTimes {
            busy: 100,
            user: 40,
            system: 40,
            softirq: 20,
            total: 1_000,
            cpus: 2,
            steal: 0,
        };
        // Over 100 ticks of the two CPUs: 30 user, 10 system, 10 softirq ticks.
        let b = CpuTimes {
            busy: 150,
            user: 70,
            system: 50,
            softirq: 30,
            total: 1_100,
            ..a
        };
        let split = b.split_since(&a);
        assert_eq!((split.user, split.system, split.softirq), (0.6, 0.2, 0.2));
        assert!((split.user + split.system + split.softirq - b.cores_since(&a)).abs() < 1e-12);
        // One CPU at 1 Gbit/s: 100 %/Gbit/s, 1514 B frames at 82 563 frames/s: 12 112 ns each.
        let account = CpuAccount::of(split, 1e9).unwrap();
        assert!((account.user_pct - 60.0).abs() < 1e-9, "{account:?}");
        assert!((account.system_pct + account.softirq_pct - 40.0).abs() < 1e-9);
        assert!(
            (account.ns_per_frame - 12_112.0).abs() < 1e-6,
            "{account:?}"
        );
        assert!((account.ns_per_kib - 8_192.0).abs() < 1e-6, "{account:?}");
        assert_eq!(CpuAccount::of(split, 0.0), None);
    }

    #[test]
    fn this_machine_can_be_read() {
        let mut m = MachineCpu::open().unwrap();
        assert!(m.read().unwrap().cpus >= 1);
    }
}
