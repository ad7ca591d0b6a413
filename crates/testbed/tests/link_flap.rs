//! Link faults under load: real kernel TCP (4 flows, one class limited to 100 Mbit/s) through
//! the daemon while one of the shaper's veths is set down for 0.5 s and up again (a flap), or
//! deleted and created again with the same name 0.5 s later (a new ifindex: the daemon must open
//! its sockets again by name). Each of `in0` and `out0`, with one loop and with two silos
//! (`cores = 2`, whose fanout group is rejoined on a re-created interface), every fault with the
//! default `daemon.link_down_grace` (1 s, longer than the outage): the shaping clock stops
//! while `out0` is down, and what was queued leaves at the class's rate when it returns.
//!
//! Asserts that the daemon keeps running (its loops return reports, not an error), counts the
//! transition in `metronome_link_down_total{interface}` once per loop (and, for a re-created
//! interface, `metronome_link_reopened_total{interface}`), that the frames dropped for an
//! outage are counted in `metronome_link_down_dropped_total{interface}` as in the loops'
//! reports and that there are none (the outage was within the grace; none from the wheel for
//! `in0` in any case), that forwarding resumes after the link is back (within
//! [`RESUME_BOUND`] after a flap: the shaper held what was queued, and the ACKs of what it sent
//! meanwhile, and sends them when the link returns; within [`TCP_RESUME_BOUND`] after a
//! re-creation, which the hosts' veths undergo too), that the rate after the fault holds within
//! the tolerance, that a re-created `in0` has GRO on again (`daemon.gro`, switched on at start
//! and on reopening), and that every frame each loop received is accounted for. Each fault
//! prints one line with its figures (`link_flap: ...`, on standard error). Skips, saying why,
//! without CAP_NET_ADMIN.

mod common;

use metronome_daemon::driver::run::{Control, LoopReport};
use metronome_daemon::driver::silo::run_silos;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_io::Offload;
use metronome_testbed::netns::{InterfaceCounters, Namespace, TopoError, Topology};
use metronome_testbed::shaper::{spawn_daemon, spawn_shaper, ShaperThread, SilosThread};
use metronome_testbed::trafficgen::{FlowGroup, TrafficPlan};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Traffic duration.
const RUN: Duration = Duration::from_secs(5);
/// When the link goes down, after the traffic started.
const FLAP_AT: Duration = Duration::from_millis(1000);
/// How long it stays down (or deleted).
const FLAP_FOR: Duration = Duration::from_millis(500);
/// The steady part after the fault starts this long after the link is back (TCP's
/// retransmission timers and slow start after the outage).
const SETTLE: Duration = Duration::from_millis(1500);
/// Skipped at the end (flows stopping one by one).
const COOLDOWN: Duration = Duration::from_millis(300);
/// Tolerance of the rate after a flap with one loop, as in `real_traffic.rs`: within 3 %
/// (measured with the default grace, `cargo test -p metronome-testbed --test link_flap --
/// --nocapture`, 10 runs with a load average of 2 to 6 from other helpers' builds and tests:
/// -3.15 to +0.46 % in first attempts, the -3.15 % one +0.00 % on its retry).
const TOLERANCE: f64 = 0.03;
/// The rate after the other faults (with two silos, or a re-creation): at most 3 % above the
/// limit (above, the shaper released more than its limit: a reopened socket bypassing the
/// engine, frames delivered twice; measured at most +0.02 %) and at most 40 % below. Measured
/// in the same runs and 6 more of the two-silo tests alone: flaps with two silos -23.37 to
/// +0.01 % in first attempts (-13.49, -10.95 and -17.55 % besides the -23.37 %, the rest within
/// -1.73 %), re-creations -28.03 to +0.02 % but one -95.54 % (two silos, `out0`: the loops
/// forwarded all the senders sent, 11 789 frames in 5 s; the load starved the senders' TCP).
/// A loop that does not resume, or resumes on half its flows, is further off.
const OVER: f64 = 0.03;
const UNDER: f64 = 0.40;
/// The class's limit, bit/s.
const TARGET_BPS: f64 = 100e6;
/// Forwarding resumes within this of the link coming back after a flap: the daemon probes a
/// down link every 10 ms (`carrier::CARRIER_POLL`), takes it back once seen up for 20 ms
/// (`carrier::CARRIER_SETTLE`), and then sends what it held at once (due when the link went down);
/// the receiver's counter is sampled every 20 ms. 100 ms, the bound the daemon is built to.
/// Measured in the runs of [`TOLERANCE`] and [`OVER`]: 21 to 53 ms in 52 of 54 flaps, 118 and
/// 347 ms in two (load average 4 to 6: the senders or the sampler starved), which a retry
/// absorbs.
const RESUME_BOUND: Duration = Duration::from_millis(100);
/// Forwarding resumes within this of the link coming back after a re-creation: the hosts'
/// veths are deleted and created again too, so the sender's kernel drops what it sends
/// meanwhile and the next frame may be the sender's TCP retransmission, whose timer backs off
/// during the outage (200 ms minimum, doubled per expiry: 200, 400, 800 ms after the last
/// ACK), so it fires up to about 1 s after a 0.5 s outage ends.
const TCP_RESUME_BOUND: Duration = Duration::from_millis(1200);
/// The longest outage (from the test's `ip` command to the other) after which nothing may be
/// dropped for it: the default grace (1 s) less the daemon's detection of the link's return
/// (a 10 ms probe) and 190 ms for scheduling on a loaded machine.
const WITHIN_GRACE: Duration = Duration::from_millis(800);

/// Frames the loops may receive beyond what the hosts' veths sent: a socket joining its fanout
/// group sees every frame for the microseconds between its `bind` and its joining (delivered
/// twice, never lost), and the frames sent between the last reading of a veth's counters and its
/// deletion are not in them (about a millisecond: 8 frames at 100 Mbit/s). Twice-delivered
/// traffic after a re-creation (silos not rejoining one group) is thousands of frames.
const SLACK: u64 = 500;

/// The frames a host's veth sent over a run, across its re-creation (which restarts its
/// counters).
struct TxCount {
    counters: InterfaceCounters,
    base: u64,
    carried: u64,
}

impl TxCount {
    fn new(ns: &Namespace, iface: &str) -> TxCount {
        let mut counters = ns.interface_counters(iface).unwrap();
        let base = counters.read().unwrap().tx_packets;
        TxCount {
            counters,
            base,
            carried: 0,
        }
    }

    /// The veth is being deleted: reads its counters every millisecond until it is gone and
    /// keeps the last reading (what it sent before), so that at most a millisecond of frames
    /// is missed.
    fn until_deleted(&mut self) {
        let mut last = self.base;
        loop {
            match self.counters.read() {
                Ok(stats) => last = stats.tx_packets,
                Err(TopoError::NoSuchInterface { .. }) => break,
                Err(e) => panic!("reading a veth's counters: {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.carried += last - self.base;
        self.base = 0;
    }

    fn total(&mut self) -> u64 {
        self.carried + self.counters.read().unwrap().tx_packets - self.base
    }
}

/// What happens to the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// `ip link set IF down`, then `up`.
    Flap,
    /// `ip link del IF` (the veth pair), then the pair created again with the same names.
    Recreate,
}

/// The daemon's configuration: `cores` loops, the default `daemon.link_down_grace`.
fn config(cores: usize) -> Config {
    let daemon = format!("\n[daemon]\ncores = {cores}\n");
    common::bulk_config("5201-5216", "100mbit", &daemon, "link_flap.toml")
}

/// The value of the counter line `name{interface="iface"}` in `text`, 0 when absent.
fn counter(text: &str, name: &str, iface: &str) -> u64 {
    let prefix = format!("{name}{{interface=\"{iface}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Applies `fault` to the shaper's `iface` [`FLAP_AT`] after the call, for [`FLAP_FOR`];
/// `sent` and `acked` keep counting across a re-created veth. Returns when the link went down and
/// when it was back, from the call.
fn apply(
    topo: &Topology,
    iface: &str,
    fault: Fault,
    sent: &mut TxCount,
    acked: &mut TxCount,
) -> (Duration, Duration) {
    let start = Instant::now();
    std::thread::sleep(FLAP_AT);
    let mac = match fault {
        Fault::Flap => {
            topo.shaper.ip(&["link", "set", iface, "down"]).unwrap();
            String::new()
        }
        Fault::Recreate => {
            let count = if iface == topo.shaper_in { sent } else { acked };
            std::thread::scope(|s| {
                let watcher = s.spawn(|| count.until_deleted());
                let mac = topo.delete_veth(iface).unwrap();
                watcher.join().unwrap();
                mac
            })
        }
    };
    let down = start.elapsed();
    std::thread::sleep(FLAP_FOR);
    match fault {
        Fault::Flap => topo.shaper.ip(&["link", "set", iface, "up"]).map(drop),
        Fault::Recreate => topo
            .recreate_veth(iface, &mac)
            .and_then(|()| topo.one_mtu_segments()),
    }
    .unwrap();
    (down, start.elapsed())
}

/// How long after `up_at` forwarding resumed: the first sample after the link is up whose
/// counter rose by ten full frames over the one at the link's return (not an ARP frame or two).
/// The traffic thread and the faulter start within a millisecond.
fn resumed_after(samples: &[common::Sample], up_at: Duration) -> Option<Duration> {
    let at_up = samples
        .iter()
        .rev()
        .find(|(t, _, _)| *t <= up_at)
        .unwrap()
        .1;
    // A re-created receiver veth counts from 0: a sample below `at_up` is on the new one.
    samples
        .iter()
        .find(|(t, b, _)| *t > up_at && *b >= if *b < at_up { 0 } else { at_up } + 10 * 1514)
        .map(|(t, _, _)| t.saturating_sub(up_at))
}

/// Every frame each loop received is accounted for, the loops shaped traffic, and each frame
/// reached one loop once: the loops received no more than the hosts' veths sent (the silos of a
/// re-created interface share one fanout group again).
fn assert_accounted(loops: &[LoopReport], who: &str, mut sent: TxCount, mut acked: TxCount) {
    for (i, l) in loops.iter().enumerate() {
        common::assert_every_frame_accounted(l, &format!("{who}, loop {i}"));
    }
    // 4 flows leave a silo empty with probability 2^-3, so only the sum is asserted.
    let released: u64 = loops.iter().map(|l| l.engine.released).sum();
    assert!(released > 1000, "{loops:?}");
    let (sent, acked) = (sent.total(), acked.total());
    let received: u64 = loops.iter().map(|l| l.inside.rx_packets).sum();
    let passed_back: u64 = loops.iter().map(|l| l.passed_back).sum();
    println!(
        "sender sent {sent}, loops received {received}; receiver sent {acked}, loops passed \
         back {passed_back}"
    );
    assert!(
        received <= sent + SLACK,
        "received {received} of {sent} sent"
    );
    assert!(
        passed_back <= acked + SLACK,
        "passed back {passed_back} of {acked} sent"
    );
}

/// The frames dropped for having waited for a down link beyond `daemon.link_down_grace`:
/// `metronome_link_down_dropped_total{interface}` of each interface in `text` is what the loops
/// report (the wheel's drops for `out0`, the transmit batches' for either); none from the wheel
/// for `in0` (the shaping clock stops only for `out0`); none at all when the outage was within
/// the grace (`within_grace`). Returns how many.
fn assert_link_down_drops(
    loops: &[LoopReport],
    text: &str,
    outside: bool,
    within_grace: bool,
) -> u64 {
    let sum = |f: fn(&LoopReport) -> u64| loops.iter().map(f).sum::<u64>();
    let wheel = sum(|l| l.engine.dropped_link_down);
    let to_out = sum(|l| l.link_down_dropped_outside);
    let to_in = sum(|l| l.link_down_dropped_inside);
    let on_out = counter(text, "metronome_link_down_dropped_total", "out0");
    let on_in = counter(text, "metronome_link_down_dropped_total", "in0");
    println!("dropped for the outage: {wheel} from the wheel, {to_out} + {to_in} from batches");
    assert_eq!((on_out, on_in), (wheel + to_out, to_in), "{text}");
    if within_grace {
        assert_eq!(
            on_out + on_in,
            0,
            "nothing is dropped within the grace: {text}"
        );
    }
    if !outside {
        assert_eq!((wheel, to_out), (0, 0), "{loops:?}");
    }
    on_out + on_in
}

/// The reports of the single loop or of every silo, which must have survived the fault.
fn join_loops(
    single: Option<Spawned<ShaperThread>>,
    silos: Option<Spawned<SilosThread>>,
) -> Vec<LoopReport> {
    match (single, silos) {
        (Some(t), _) => vec![t
            .unwrap()
            .join()
            .unwrap()
            .unwrap()
            .expect("the daemon's loop survives the fault")],
        (_, Some(t)) => t
            .unwrap()
            .join()
            .unwrap()
            .unwrap()
            .expect("every silo survives the fault")
            .into_iter()
            .map(|r| r.report)
            .collect(),
        _ => unreachable!(),
    }
}

/// A loop thread as spawned, or why it could not be.
type Spawned<T> = Result<T, TopoError>;

/// One run with `fault` on the shaper's `iface` and `cores` loops; returns the rate on the
/// wire after the fault and how long after the link's return forwarding resumed.
fn faulted_run(topo: &Topology, iface: &str, fault: Fault, cores: usize) -> (f64, Duration) {
    let metrics = Metrics::with_silos(cores);
    let control = Control::default();
    let config = config(cores);
    let single = (cores == 1).then(|| {
        spawn_shaper(
            &topo.shaper,
            config.clone(),
            metrics.clone(),
            control.clone(),
        )
    });
    let silos = (cores > 1).then(|| {
        spawn_daemon(
            &topo.shaper,
            config,
            metrics.clone(),
            control.clone(),
            run_silos,
        )
    });
    std::thread::sleep(Duration::from_millis(100)); // ports open, rings mapped
    let plan = TrafficPlan::new(
        topo.receiver_addr,
        vec![FlowGroup::tcp("bulk", 5201, 4)],
        RUN,
    );
    let mut sent = TxCount::new(&topo.sender, &topo.sender_if);
    let mut acked = TxCount::new(&topo.receiver, &topo.receiver_if);
    let (report, samples, (down_at, up_at)) = std::thread::scope(|s| {
        let (sent, acked) = (&mut sent, &mut acked);
        let faulter = s.spawn(move || apply(topo, iface, fault, sent, acked));
        let (report, samples) = common::drive(topo, plan);
        (report, samples, faulter.join().unwrap())
    });
    control.stop.store(true, Ordering::Relaxed);
    let loops = join_loops(single, silos);
    let text = metrics.encode();
    // Each loop has its own sockets on the interface and sees the transition once.
    let downs = counter(&text, "metronome_link_down_total", iface);
    assert_eq!(downs, cores as u64, "down transitions of {iface}: {text}");
    let reopened = counter(&text, "metronome_link_reopened_total", iface);
    let want_reopened = if fault == Fault::Recreate { cores } else { 0 };
    assert_eq!(
        reopened, want_reopened as u64,
        "reopenings of {iface}: {text}"
    );
    let within_grace = up_at.saturating_sub(down_at) <= WITHIN_GRACE;
    let outside = iface == topo.shaper_out;
    let dropped = assert_link_down_drops(&loops, &text, outside, within_grace);
    if (iface, fault) == (topo.shaper_in.as_str(), Fault::Recreate) {
        let gro = topo.shaper.run(|| Offload::Gro.get("in0")).unwrap();
        assert!(gro.unwrap(), "GRO on the re-created in0");
    }
    let resumed = resumed_after(&samples, up_at);
    let steady = (up_at + SETTLE, RUN.saturating_sub(COOLDOWN));
    let after = common::wire_of_payload(common::payload_bps(&samples, steady.0, steady.1));
    println!(
        "{fault:?} of {iface} with {cores} loop(s): down at {down_at:?}, up at {up_at:?}; \
         forwarding resumed after {resumed:?}; {:.2} Mbit/s on the wire after it; goodput \
         {:.2} Mbit/s; {loops:?}",
        after / 1e6,
        report.groups[0].mean_bps() / 1e6,
    );
    let resumed = resumed.expect("traffic resumed after the fault");
    common::uncaptured(&format!(
        "link_flap: {fault:?} of {iface}, {cores} loop(s): down {:.0} ms, resumed {:.0} ms after \
         the return, {:+.2} % after it, {dropped} dropped for the outage",
        (up_at - down_at).as_secs_f64() * 1e3,
        resumed.as_secs_f64() * 1e3,
        (after / TARGET_BPS - 1.0) * 100.0,
    ));
    assert_accounted(&loops, &format!("{fault:?} of {iface}"), sent, acked);
    (after, resumed)
}

/// The MAC address of `iface` in `ns` (`ip -o link show`).
fn mac_of(ns: &Namespace, iface: &str) -> String {
    let text = ns.ip(&["-o", "link", "show", "dev", iface]).unwrap();
    let mut words = text.split_whitespace();
    words.find(|w| *w == "link/ether");
    words.next().expect("a MAC address").to_owned()
}

/// Makes each host's neighbour entry of the other permanent. A host's veth loses its carrier
/// while the shaper's end is down, and when the kernel's link watcher handles that during the
/// outage it flushes the host's dynamic neighbour entries (a flap of 0.5 s of a veth between
/// two namespaces flushed them in 3 of 5 tries); a host whose ARP request then fell into the
/// outage asks again only after `retrans_time` (1 s), so its traffic resumes after the
/// host's own recovery, not the shaper's (measured without: 4 of 37 flaps of `in0` resumed
/// 524 to 717 ms after the return, the rest within 49 ms). A re-created veth loses its
/// entry: the hosts resolve each other again then.
fn permanent_neighbours(topo: &Topology) {
    let hosts = [
        (
            &topo.sender,
            &topo.sender_if,
            topo.receiver_addr,
            &topo.receiver,
            &topo.receiver_if,
        ),
        (
            &topo.receiver,
            &topo.receiver_if,
            topo.sender_addr,
            &topo.sender,
            &topo.sender_if,
        ),
    ];
    for (ns, iface, peer_addr, peer_ns, peer_if) in hosts {
        let mac = mac_of(peer_ns, peer_if);
        let addr = peer_addr.to_string();
        let args = [
            "neigh",
            "replace",
            &addr,
            "lladdr",
            &mac,
            "dev",
            iface,
            "nud",
            "permanent",
        ];
        ns.ip(&args).unwrap();
    }
}

/// One real-traffic run at a time in this binary: the tests would share the machine's two
/// cores and measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Builds a topology, runs `fault` on `iface` with `cores` loops, removes the topology (also on
/// a panic: its `Drop`). An attempt holds when forwarding resumed within [`RESUME_BOUND`] (a
/// flap) or [`TCP_RESUME_BOUND`] (a re-creation) and the rate after the fault is within
/// [`TOLERANCE`] (a flap with one loop) or [`OVER`] and [`UNDER`] (the others). One more
/// attempt is made when the first resumed late or fell short (the load of a shared machine
/// starves the kernel's TCP senders, never makes the shaper send more), never when it was over
/// the limit or, with [`TOLERANCE`], more than `common::RETRY_BOUND_TOLERANCES` tolerances
/// short. Every attempt's line goes to standard error, uncaptured, and the failure names both.
fn survives(prefix: &str, test: &str, iface: &str, fault: Fault, cores: usize) {
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(topo) = common::topology(prefix, test) else {
        return;
    };
    topo.one_mtu_segments().unwrap();
    permanent_neighbours(&topo);
    let label = format!("after a {fault:?} of {iface} ({cores} loops): ");
    let (over, under, retry_floor) = if (fault, cores) == (Fault::Flap, 1) {
        let floor = common::RETRY_BOUND_TOLERANCES * TOLERANCE;
        (TOLERANCE, TOLERANCE, floor)
    } else {
        (OVER, UNDER, 1.0)
    };
    let bound = match fault {
        Fault::Flap => RESUME_BOUND,
        Fault::Recreate => TCP_RESUME_BOUND,
    };
    let mut lines = Vec::new();
    let mut held = false;
    for attempt in 1..=2 {
        let (after, resumed) = faulted_run(&topo, iface, fault, cores);
        let deviation = after / TARGET_BPS - 1.0;
        let line = format!(
            "{label}{:+.2} % off (bounds +{:.0} % / -{:.0} %), resumed {} ms after the link's \
             return (bound {} ms), attempt {attempt}",
            deviation * 100.0,
            over * 100.0,
            under * 100.0,
            resumed.as_millis(),
            bound.as_millis(),
        );
        common::uncaptured(&line);
        lines.push(line);
        if (-under..=over).contains(&deviation) && resumed <= bound {
            if attempt > 1 {
                common::uncaptured(&format!("{label}held on a retry: {}", lines.join("; ")));
            }
            held = true;
            break;
        }
        if deviation > over || deviation < -retry_floor {
            lines.push("no retry: over the limit, or too far short".into());
            break;
        }
    }
    topo.remove().unwrap();
    assert!(held, "{}", lines.join("; "));
}

#[test]
fn a_flap_of_the_outside_link_is_survived_under_load() {
    survives("mtr-flo", "link_flap outside", "out0", Fault::Flap, 1);
}

#[test]
fn a_flap_of_the_inside_link_is_survived_under_load() {
    survives("mtr-fli", "link_flap inside", "in0", Fault::Flap, 1);
}

#[test]
fn a_flap_of_each_link_is_survived_by_two_silos() {
    survives(
        "mtr-fl2o",
        "link_flap silos outside",
        "out0",
        Fault::Flap,
        2,
    );
    survives("mtr-fl2i", "link_flap silos inside", "in0", Fault::Flap, 2);
}

#[test]
fn a_recreated_outside_interface_is_reopened_under_load() {
    survives(
        "mtr-rco",
        "link_flap recreate outside",
        "out0",
        Fault::Recreate,
        1,
    );
}

#[test]
fn a_recreated_inside_interface_is_reopened_under_load() {
    survives(
        "mtr-rci",
        "link_flap recreate inside",
        "in0",
        Fault::Recreate,
        1,
    );
}

#[test]
fn a_recreated_interface_is_reopened_by_two_silos() {
    survives(
        "mtr-rc2o",
        "link_flap recreate silos outside",
        "out0",
        Fault::Recreate,
        2,
    );
    survives(
        "mtr-rc2i",
        "link_flap recreate silos inside",
        "in0",
        Fault::Recreate,
        2,
    );
}
