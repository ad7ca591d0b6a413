//! Traffic for many classes at once, and what measures each class at the receiver: the real-traffic
//! side of a shaper holding thousands of classes each to its own rate (NicPic §1 and §3: "tens of
//! thousands of rate limiters"; Carousel §2: shaping for tens of thousands of aggregates per
//! host).
//!
//! * [`send_classes`]: raw UDP frames written on the sender's veth with an AF_PACKET socket in
//!   `sendmmsg` batches, class `i`'s frames addressed to [`ClassFlows::dst`]`(i)` (one destination
//!   /32 per class, so that a shaper can tell the classes apart by one exact field). Either paced
//!   ([`Schedule::Paced`]: each class at its own offered rate, its frames due on a calendar of the
//!   classes ordered by their next due time, so a frame costs one heap operation whatever the
//!   number of classes) or as fast as the sender goes ([`Schedule::Flood`]: the classes in turn,
//!   for packets-per-second runs).
//! * [`ClassCounter`]: an AF_PACKET socket on the receiver's veth that keeps, per class, the
//!   frames and bytes that arrived within a window and the arrival times of the first and the last
//!   of them. A class's rate is then the bytes after its first frame over the time from its first
//!   to its last frame ([`ClassArrivals::rate_bps`]): for a class paced at `L / T` (frames of `L`
//!   bytes every `T`) that is exactly `L / T` however the window's edges fall between frames, where
//!   bytes counted over a fixed window would be off by up to one frame at each edge (a 9 014-byte
//!   frame is 7 % of a 1 Mbit/s class's second).
//!
//! The receiver's stack drops the frames (no address of the receiver is a class's destination and
//! it does not forward), after the counter saw them. Rates are in bits per second of frame bytes
//! (Ethernet header included, no FCS), what the daemon and HTB charge a class.

use crate::flood::{FloodError, Receiver};
use crate::netns::Namespace;
use metronome_io::{
    wait_readable, AfPacketConfig, AfPacketPort, FramePool, PacketPort, PortError, RxFrame,
};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames per `sendmmsg` of [`send_classes`] at most: 64, the port's batch (`metronome_io`'s
/// `SEND_BATCH`).
pub const SEND_BATCH: usize = 64;
/// How long [`send_classes`] sleeps when no frame is due yet, or the device refused a batch.
const SEND_PAUSE: Duration = Duration::from_micros(100);
/// Frames per `recvmmsg` of a [`ClassCounter`].
const COUNT_BATCH: usize = 64;
/// How long a [`ClassCounter`]'s thread waits for a frame before it looks at its stop flag.
const COUNT_POLL: Duration = Duration::from_millis(2);
/// Ethernet header, bytes.
const ETH: usize = 14;
/// IPv4 header without options, bytes.
const IPV4: usize = 20;
/// The shortest frame [`ClassFlows`] builds, bytes: the Ethernet minimum without FCS (IEEE
/// 802.3), 64 bytes, more than the headers' 42 (Ethernet, IPv4, UDP's 8).
pub const MIN_FRAME: usize = 64;
/// Classes [`ClassFlows`] can address: one destination each in 10.128.0.0/9 (2^23).
pub const MAX_CLASSES: usize = 1 << 23;
/// The first class's destination, 10.128.0.0 (RFC 1918 space, inside the test's namespaces
/// only); class `i`'s is this plus `i`.
const FIRST_DST: u32 = u32::from_be_bytes([10, 128, 0, 0]);

/// The frames of `classes` classes: UDP from `src` (source port `src_port`) to class `i`'s
/// destination [`ClassFlows::dst`]`(i)`, destination port `dst_port`, `frame_bytes` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassFlows {
    /// Classes (at most [`MAX_CLASSES`]).
    pub classes: usize,
    /// The source address (the sender's).
    pub src: Ipv4Addr,
    /// Frame length, bytes (Ethernet header included, no FCS); at least [`MIN_FRAME`].
    pub frame_bytes: usize,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

impl ClassFlows {
    /// Class `i`'s destination address: 10.128.0.0 plus `i` (`i` below [`MAX_CLASSES`]).
    pub fn dst(i: usize) -> Ipv4Addr {
        Ipv4Addr::from(FIRST_DST + (i % MAX_CLASSES) as u32)
    }

    /// The class a frame belongs to: its IPv4 destination's offset from [`ClassFlows::dst`]`(0)`
    /// when that is below `classes`; `None` for anything else.
    pub fn class_of(frame: &[u8], classes: usize) -> Option<usize> {
        if frame.len() < ETH + IPV4 || frame[12..14] != [0x08, 0x00] {
            return None;
        }
        let dst = u32::from_be_bytes([frame[30], frame[31], frame[32], frame[33]]);
        let i = usize::try_from(dst.checked_sub(FIRST_DST)?).ok()?;
        (i < classes).then_some(i)
    }

    /// Writes the frame of class `i` (its `n`-th, which sets the IPv4 identification) from `src`
    /// to `dst` MAC into `f` ([`ClassFlows::write_headers`], the payload zeros).
    pub fn frame(&self, i: usize, n: u64, macs: ([u8; 6], [u8; 6]), f: &mut Vec<u8>) {
        f.clear();
        f.resize(self.frame_bytes.max(MIN_FRAME), 0);
        self.write_headers(i, n, macs, f);
    }

    /// Writes the Ethernet, IPv4 and UDP headers of class `i`'s `n`-th frame at the start of
    /// `f`, whose length is the frame's (at least [`MIN_FRAME`]); the payload after them is left
    /// as it is (the sender reuses its slots: nothing but the headers is written per frame). The
    /// IPv4 header checksum is right; the UDP checksum is 0 ("none", RFC 768), which the receiver
    /// accepts.
    pub fn write_headers(&self, i: usize, n: u64, (dst, src): ([u8; 6], [u8; 6]), f: &mut [u8]) {
        let len = f.len();
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[ETH..ETH + IPV4];
        ip.fill(0);
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((len - ETH) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&(n as u16).to_be_bytes());
        ip[6] = 0x40; // don't fragment
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&self.src.octets());
        ip[16..20].copy_from_slice(&Self::dst(i).octets());
        let sum = ipv4_checksum(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let udp = &mut f[ETH + IPV4..ETH + IPV4 + 8];
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&((len - ETH - IPV4) as u16).to_be_bytes());
        udp[6..8].fill(0);
    }
}

/// The Internet checksum (RFC 1071) of an IPv4 header whose checksum field is zero.
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// When [`send_classes`] sends each class's frames.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// Class `i` at `offered_bps[i]` bit/s of frames, its first frame at a phase spread over its
    /// interval (so the classes do not start in step). A frame late on its time is sent at once
    /// and the class's next frame stays on its own schedule (a sender that fell behind catches
    /// up; its largest lateness is reported).
    Paced {
        /// Offered rate per class, bit/s of frame bytes (positive).
        offered_bps: Vec<u64>,
    },
    /// As fast as the sender goes, the classes in turn, one frame each.
    Flood,
}

/// What [`send_classes`] sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SendReport {
    /// When the first frame was handed to the socket.
    pub started: Instant,
    /// From `started` to the last send.
    pub elapsed: Duration,
    /// Frames the socket took (its `tx_packets`).
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames built but not taken by a busy device (freed, not sent again).
    pub refused: u64,
    /// Frames the socket refused for good (`tx_errors`).
    pub tx_errors: u64,
    /// The latest a paced frame left after its due time (zero for [`Schedule::Flood`]): a sender
    /// that could not keep up shows here.
    pub max_lag: Duration,
}

impl SendReport {
    /// The rate the sender offered over its run, bit/s of frame bytes.
    pub fn offered_bps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Sends `flows`'s frames on `iface` of `ns` from `src` to `dst` MAC (`macs` = (dst, src)) on
/// `schedule` for `duration`, or until `stop`; returns when done.
pub fn send_classes(
    ns: &Namespace,
    iface: &str,
    macs: ([u8; 6], [u8; 6]),
    (flows, schedule): (ClassFlows, Schedule),
    duration: Duration,
    stop: Arc<AtomicBool>,
) -> Result<SendReport, FloodError> {
    let iface = iface.to_owned();
    ns.run(move || send(&iface, macs, &flows, &schedule, (duration, &stop)))?
}

/// The calendar of a paced sender: per class its interval, nanoseconds, and a min-heap of
/// (due time since the start in ns, class).
struct Calendar {
    interval_ns: Vec<u64>,
    due: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Calendar {
    fn new(frame_bytes: usize, offered_bps: &[u64]) -> Calendar {
        let interval_ns: Vec<u64> = offered_bps
            .iter()
            .map(|&r| (frame_bytes as f64 * 8.0 * 1e9 / r.max(1) as f64) as u64)
            .collect();
        // Phases spread by the golden ratio's fractional part (Weyl sequence): evenly over each
        // interval, not in step across classes.
        let due = interval_ns
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let phase = (i as f64 * 0.618_033_988_749_895).fract();
                Reverse(((phase * t as f64) as u64, i as u32))
            })
            .collect();
        Calendar { interval_ns, due }
    }
}

/// The body of [`send_classes`], inside the namespace.
fn send(
    iface: &str,
    macs: ([u8; 6], [u8; 6]),
    flows: &ClassFlows,
    schedule: &Schedule,
    (duration, stop): (Duration, &AtomicBool),
) -> Result<SendReport, FloodError> {
    let config = AfPacketConfig {
        receive: false,
        ..AfPacketConfig::default()
    };
    let mut port = AfPacketPort::open(iface, &config)?;
    let slot = flows.frame_bytes.max(MIN_FRAME).next_multiple_of(128);
    let mut pool = FramePool::new(SEND_BATCH as u32, slot);
    let mut calendar = match schedule {
        Schedule::Paced { offered_bps } => Some(Calendar::new(flows.frame_bytes, offered_bps)),
        Schedule::Flood => None,
    };
    let mut r = SendReport {
        started: Instant::now(),
        elapsed: Duration::ZERO,
        sent: 0,
        bytes: 0,
        refused: 0,
        tx_errors: 0,
        max_lag: Duration::ZERO,
    };
    let (mut n, len) = (0u64, flows.frame_bytes.max(MIN_FRAME));
    let mut batch: Vec<(u32, usize)> = Vec::with_capacity(SEND_BATCH);
    let mut ids = Vec::with_capacity(SEND_BATCH);
    let classes = flows.classes.max(1);
    while r.started.elapsed() < duration && !stop.load(Ordering::Relaxed) {
        batch.clear();
        let now_ns = r.started.elapsed().as_nanos() as u64;
        while batch.len() < SEND_BATCH {
            let class = match &mut calendar {
                Some(c) => match c.due.peek() {
                    Some(&Reverse((due, i))) if due <= now_ns => {
                        c.due.pop();
                        let lag = Duration::from_nanos(now_ns - due);
                        r.max_lag = r.max_lag.max(lag);
                        c.due.push(Reverse((due + c.interval_ns[i as usize], i)));
                        i as usize
                    }
                    _ => break,
                },
                None => (n % classes as u64) as usize,
            };
            let id = pool.alloc().expect("a batch fits the pool");
            pool.set_len(id, len);
            flows.write_headers(class, n, macs, pool.frame_mut(id));
            n += 1;
            batch.push((id, len));
        }
        if batch.is_empty() {
            std::thread::sleep(SEND_PAUSE);
            continue;
        }
        ids.clear();
        ids.extend(batch.iter().map(|b| b.0));
        let taken = port.send(&mut pool, &ids)?;
        r.bytes += batch[..taken].iter().map(|b| b.1 as u64).sum::<u64>();
        for &(id, _) in &batch[taken..] {
            pool.free(id);
            r.refused += 1;
        }
        if taken < batch.len() {
            std::thread::sleep(SEND_PAUSE);
        }
    }
    r.elapsed = r.started.elapsed();
    let c = port.counters();
    r.tx_errors = c.tx_errors;
    r.sent = c.tx_packets;
    Ok(r)
}

/// How often [`wait_forwarding`] sends its probe frame.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// Sends one frame of class 0 of `flows` every [`PROBE_EVERY`] on `iface` of `ns` until the
/// receiver's interface counts a frame more than when it started (`rx`), at most `timeout`;
/// returns how long that took, `None` if nothing arrived. A daemon's metrics endpoint answers
/// before its loop forwards (it builds its engine after), so a run that must not measure the
/// daemon's start-up waits for this.
pub fn wait_forwarding(
    (ns, iface): (&Namespace, &str),
    mut rx: crate::netns::InterfaceCounters,
    macs: ([u8; 6], [u8; 6]),
    flows: ClassFlows,
    timeout: Duration,
) -> Result<Option<Duration>, FloodError> {
    let iface = iface.to_owned();
    ns.run(move || {
        let config = AfPacketConfig {
            receive: false,
            ..AfPacketConfig::default()
        };
        let mut port = AfPacketPort::open(&iface, &config)?;
        let slot = flows.frame_bytes.max(MIN_FRAME).next_multiple_of(128);
        let mut pool = FramePool::new(1, slot);
        let mut frame = Vec::new();
        let before = rx.read()?.rx_packets;
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < timeout {
            flows.frame(0, n, macs, &mut frame);
            n += 1;
            let id = pool.store(&frame).expect("one frame fits the pool");
            if port.send(&mut pool, &[id])? == 0 {
                pool.free(id);
            }
            std::thread::sleep(PROBE_EVERY);
            if rx.read()?.rx_packets > before {
                return Ok(Some(started.elapsed()));
            }
        }
        Ok(None)
    })?
}

/// What arrived of one class within a [`ClassCounter`]'s window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassArrivals {
    /// Frames.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The first frame's length, bytes.
    pub first_len: u64,
    /// When the first arrived, ns since the counter's origin.
    pub first_ns: u64,
    /// When the last arrived, ns since the counter's origin.
    pub last_ns: u64,
}

impl ClassArrivals {
    /// The class's rate from its first to its last frame, bit/s: the bytes after the first frame
    /// over the time between the two. `None` with fewer than two frames or no time between.
    pub fn rate_bps(&self) -> Option<f64> {
        let span = self.last_ns.checked_sub(self.first_ns).filter(|&s| s > 0)?;
        (self.frames >= 2).then(|| (self.bytes - self.first_len) as f64 * 8e9 / span as f64)
    }
}

/// What a [`ClassCounter`] counted.
#[derive(Clone, Debug, PartialEq)]
pub struct CountReport {
    /// Per class, what arrived within the window.
    pub classes: Vec<ClassArrivals>,
    /// Frames of no class, or outside the window.
    pub other: u64,
    /// Frames the socket missed (its `rx_ring_drops`): a class then undercounts.
    pub missed: u64,
}

/// Counts, per class, the frames a receiver gets within a window, with the arrival times of the
/// first and the last (see the module docs): an AF_PACKET socket on its interface on a thread
/// inside its namespace. A frame's arrival time is when its `recvmmsg` batch returned (a batch
/// of 64 frames of 9 014 bytes is 0.46 ms of 10 Gbit/s).
pub struct ClassCounter(Receiver<CountReport>);

impl ClassCounter {
    /// Opens the counter on `iface` of `ns` for `classes` classes of frames up to `frame_bytes`,
    /// counting what arrives from `window.0` to `window.1` after `origin`; returns once its
    /// socket is open.
    pub fn spawn(
        ns: &Namespace,
        iface: &str,
        (classes, frame_bytes): (usize, usize),
        origin: Instant,
        window: (Duration, Duration),
    ) -> Result<ClassCounter, FloodError> {
        let slot = frame_bytes.max(MIN_FRAME).next_multiple_of(128);
        Receiver::spawn(ns, iface, move |port, stop| {
            count(port, (classes, slot), origin, window, stop)
        })
        .map(ClassCounter)
    }

    /// Stops counting and returns what was counted.
    pub fn finish(self) -> Result<CountReport, FloodError> {
        self.0.finish()
    }
}

/// The loop of a [`ClassCounter`]'s thread.
fn count(
    mut port: AfPacketPort,
    (classes, slot): (usize, usize),
    origin: Instant,
    (from, to): (Duration, Duration),
    stop: &AtomicBool,
) -> Result<CountReport, FloodError> {
    let mut pool = FramePool::new(COUNT_BATCH as u32, slot);
    let mut out = [RxFrame::default(); COUNT_BATCH];
    let mut report = CountReport {
        classes: vec![ClassArrivals::default(); classes],
        other: 0,
        missed: 0,
    };
    let (from_ns, to_ns) = (from.as_nanos() as u64, to.as_nanos() as u64);
    while !stop.load(Ordering::Acquire) {
        let n = port.recv(&mut pool, &mut out)?;
        let t = origin.elapsed().as_nanos() as u64;
        for rx in &out[..n] {
            let class = ClassFlows::class_of(pool.frame(rx.id), classes);
            match class.filter(|_| (from_ns..=to_ns).contains(&t)) {
                Some(i) => {
                    let a = &mut report.classes[i];
                    let len = u64::from(rx.len);
                    if a.frames == 0 {
                        a.first_ns = t;
                        a.first_len = len;
                    }
                    a.frames += 1;
                    a.bytes += len;
                    a.last_ns = t;
                }
                None => report.other += 1,
            }
            pool.free(rx.id);
        }
        if n == 0 {
            if let Some(fd) = port.poll_fd() {
                wait_readable(fd, COUNT_POLL).map_err(|source| PortError::Io {
                    op: "poll",
                    ifname: port.ifname().to_owned(),
                    source,
                })?;
            }
        }
    }
    report.missed = port.counters().rx_ring_drops;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flows(frame_bytes: usize) -> ClassFlows {
        ClassFlows {
            classes: 70_000,
            src: Ipv4Addr::new(10, 77, 3, 1),
            frame_bytes,
            src_port: 4000,
            dst_port: 5000,
        }
    }

    #[test]
    fn a_frame_reads_back_as_its_class_with_a_valid_header() {
        let mut f = Vec::new();
        for (i, len) in [(0, 64), (255, 1514), (65_535, 9014), (69_999, 40)] {
            flows(len).frame(i, 7, ([2; 6], [4; 6]), &mut f);
            assert_eq!(f.len(), len.max(MIN_FRAME));
            assert_eq!(ClassFlows::class_of(&f, 70_000), Some(i));
            assert_eq!(ClassFlows::class_of(&f, i), None, "beyond the classes");
            assert_eq!(
                ipv4_checksum(&f[ETH..ETH + IPV4]),
                0,
                "the header sums to 0xffff"
            );
            assert_eq!(
                crate::flood::frames::classify_ipv4(&f),
                Some((17, 5000)),
                "a well-formed UDP frame"
            );
        }
        assert_eq!(ClassFlows::dst(256), Ipv4Addr::new(10, 128, 1, 0));
        assert_eq!(ClassFlows::class_of(&[0u8; 20], 10), None);
    }

    #[test]
    fn the_rate_runs_from_the_first_frame_to_the_last() {
        // 9 000-byte frames every 72 ms: 1 Mbit/s, whatever the first frame's phase.
        let a = ClassArrivals {
            frames: 11,
            bytes: 11 * 9000,
            first_len: 9000,
            first_ns: 5_000_000,
            last_ns: 5_000_000 + 10 * 72_000_000,
        };
        assert!((a.rate_bps().unwrap() - 1e6).abs() < 1e-6);
        let one = ClassArrivals { frames: 1, ..a };
        assert_eq!(one.rate_bps(), None);
        assert_eq!(ClassArrivals::default().rate_bps(), None);
    }

    #[test]
    fn the_calendar_sends_each_class_at_its_rate_out_of_step() {
        let c = Calendar::new(1000, &[8_000_000, 800_000]);
        assert_eq!(c.interval_ns, vec![1_000_000, 10_000_000]);
        let mut due: Vec<(u64, u32)> = c.due.into_iter().map(|Reverse(d)| d).collect();
        due.sort_unstable();
        assert_eq!(due[0], (0, 0), "class 0's phase is 0");
        assert_eq!(due[1].1, 1);
        assert!(due[1].0 > 0 && due[1].0 < 10_000_000, "{due:?}");
    }
}
