//! The daemon's cluster agent (`metronome_daemon::ops::cluster`) against real etcd members on
//! loopback (`metronome_testbed::etcd`), with the shaping loops replaced by fluid senders: each
//! host's sender sends at exactly the share its agent puts in force while it is busy (a sender
//! held back by its shaper), and publishes its bytes to the class's cell as a loop does. What is
//! checked is the protocol and the failure behaviour; real traffic through three daemons is
//! crates/cli/tests/cluster.rs.
//!
//! Needs the `etcd` binary (Debian: etcd-server); without it the tests fail, or skip saying why
//! under METRONOME_SKIP_PRIVILEGED=1.

// Only the etcd helper of the shared test module: the rest is for the real-traffic tests.
#[path = "common/etcd.rs"]
mod etcd_common;

use etcd_common::leader_index;
use metronome_daemon::ops::cluster::{cells, prepare, Agent, ClusterCell};
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use metronome_testbed::etcd::start_or_skip;
use metronome_testbed::scrape::Scrape;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The cluster limit, bit/s.
const LIMIT: u64 = 300_000_000;
/// How often a fluid sender adds what it sent: 10 ms.
const TICK: Duration = Duration::from_millis(10);

/// One daemon: its agent, its cell, its sender.
struct Host {
    cell: Arc<ClusterCell>,
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    sender: Option<std::thread::JoinHandle<()>>,
    agent: Option<Agent>,
    metrics: Metrics,
}

impl Host {
    fn start(endpoints: &[String], name: &str, host: &str, busy: bool) -> Host {
        let urls: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
        let text = format!(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n\
             [cluster]\nname = \"{name}\"\netcd = [{}]\nhost = \"{host}\"\n\
             period = \"500ms\"\nlease = \"2s\"\nhold = \"2s\"\nfloor = \"1%\"\n\
             [[class]]\nname = \"tenant\"\nrate = \"300mbit\"\nscope = \"cluster\"\n",
            urls.join(", ")
        );
        let config = Config::from_toml_str(&text, "test").expect("valid configuration");
        let section = config.cluster.clone().expect("[cluster]");
        let cell = cells(&config, 1).remove(0);
        let metrics = Metrics::new();
        let agent = prepare(&section)
            .expect("prepared")
            .start(vec![cell.clone()], metrics.cluster())
            .expect("agent started");
        let busy = Arc::new(AtomicBool::new(busy));
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (cell, busy, stop) = (cell.clone(), busy.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut sent = 0u64;
                let mut last = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    let now = Instant::now();
                    if busy.load(Ordering::Relaxed) {
                        let (share, _) = cell.share();
                        sent += (share as f64 / 8.0 * (now - last).as_secs_f64()) as u64;
                    }
                    last = now;
                    // A busy sender always has a packet or two waiting.
                    let backlog = if busy.load(Ordering::Relaxed) {
                        3_000
                    } else {
                        0
                    };
                    cell.publish_demand(0, sent, backlog, 0);
                }
            })
        };
        Host {
            cell,
            busy,
            stop,
            sender: Some(sender),
            agent: Some(agent),
            metrics,
        }
    }

    fn share(&self) -> u64 {
        self.cell.share().0
    }

    fn state(&self) -> String {
        let text = self.metrics.encode();
        text.lines()
            .find(|l| l.starts_with("metronome_cluster_state{") && l.ends_with(" 1"))
            .map(|l| l.to_string())
            .unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.sender.take() {
            let _ = s.join();
        }
    }
}

/// Waits up to `within` for `done`, returning the time it took.
fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn near(share: u64, want: u64, pct: f64) -> bool {
    (share as f64 - want as f64).abs() <= want as f64 * pct / 100.0
}

#[test]
fn shares_follow_demand_a_stopped_daemon_returns_its_share_and_etcd_down_holds_then_floors() {
    let Some(mut etcd) = start_or_skip(3, "cluster_agent") else {
        return;
    };
    let endpoints = etcd.all_endpoints();
    let name = format!("t{}", std::process::id());
    let a = Host::start(&endpoints, &name, "a", true);
    let mut b = Host::start(&endpoints, &name, "b", true);
    let c = Host::start(&endpoints, &name, "c", false);

    // Two busy, one idle: the busy ones near half each (the idle one keeps a sliver).
    let fair = wait_for(Duration::from_secs(30), || {
        near(a.share(), LIMIT / 2, 2.0) && near(b.share(), LIMIT / 2, 2.0)
    });
    assert!(
        fair.is_some(),
        "shares did not settle at half each: a {} b {} c {} ({} / {})",
        a.share(),
        b.share(),
        c.share(),
        a.state(),
        b.state()
    );
    let sum = a.share() + b.share() + c.share();
    assert!(
        sum <= LIMIT + LIMIT / 100,
        "sum of shares {sum} above the limit"
    );
    assert!(a.state().contains("shared"), "state: {}", a.state());
    let text = a.metrics.encode();
    assert!(
        text.contains("metronome_cluster_peers{class=\"tenant\"} 2"),
        "peers: {text}"
    );

    // b goes idle: a takes at least 97 % of the limit.
    b.busy.store(false, Ordering::Relaxed);
    let shift = wait_for(Duration::from_secs(30), || a.share() >= LIMIT * 97 / 100);
    assert!(shift.is_some(), "a holds {} after b went idle", a.share());

    // b busy again, then stopped: its lease is revoked and a has the share back.
    b.busy.store(true, Ordering::Relaxed);
    wait_for(Duration::from_secs(30), || near(b.share(), LIMIT / 2, 5.0))
        .unwrap_or_else(|| panic!("b did not come back to half: {}", b.share()));
    drop(b.agent.take());
    let back = wait_for(Duration::from_secs(30), || a.share() >= LIMIT * 97 / 100);
    assert!(back.is_some(), "a holds {} after b stopped", a.share());

    // Every member stopped: a holds its last share for `hold` (2 s), then falls to its floor.
    let held = a.share();
    let stopped = Instant::now();
    etcd.stop_all().expect("etcd stopped");
    let holding = wait_for(Duration::from_secs(10), || a.state().contains("holding"));
    assert!(
        holding.is_some(),
        "a never said it was holding: {}",
        a.state()
    );
    assert_eq!(a.share(), held, "the share moved while holding");
    let floored = wait_for(Duration::from_secs(20), || a.share() == LIMIT / 100);
    let took = stopped.elapsed();
    assert!(
        floored.is_some(),
        "a did not fall to its floor: {} ({})",
        a.share(),
        a.state()
    );
    // The hold counts from the last request etcd took, at most a publish period (500 ms)
    // before the members stopped.
    assert!(
        took >= Duration::from_millis(1_500),
        "a fell to its floor {took:?} after etcd stopped, before hold"
    );
    assert!(a.state().contains("floor"), "state: {}", a.state());
    drop(c);
}

/// The index in `endpoints` of a member that is not the leader.
fn follower(endpoints: &[String]) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let leader = runtime.block_on(leader_index(endpoints, None));
    (leader + 1) % endpoints.len()
}

#[test]
fn a_member_killed_moves_the_agents_to_the_next_one_and_no_share_moves() {
    let Some(mut etcd) = start_or_skip(3, "cluster_agent_member") else {
        return;
    };
    // A follower: killing the leader would leave etcd itself without a leader for an election
    // (one to two election timeouts), which the agents meet by holding, then by their floors.
    let mut endpoints = etcd.all_endpoints();
    let killed = follower(&endpoints);
    endpoints.rotate_left(killed);
    let name = format!("m{}", std::process::id());
    // Every agent starts with the first member listed: the one killed below.
    let a = Host::start(&endpoints, &name, "a", true);
    let b = Host::start(&endpoints, &name, "b", true);
    let c = Host::start(&endpoints, &name, "c", false);
    // Settled: a and b near half each, every agent sharing, the sum within the limit, and no
    // share moving over two periods (an idle daemon's first shares come from its joining
    // record: it takes a few periods to fall to its reserve).
    let shares = || [a.share(), b.share(), c.share()];
    let mut last = shares();
    let settled = wait_for(Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_secs(1));
        let now = shares();
        let steady = now
            .iter()
            .zip(last)
            .all(|(&s, was)| s.abs_diff(was) <= LIMIT / 1_000);
        last = now;
        steady
            && near(now[0], LIMIT / 2, 2.0)
            && near(now[1], LIMIT / 2, 2.0)
            && now.iter().sum::<u64>() <= LIMIT + LIMIT / 100
            && [&a, &b, &c].iter().all(|h| h.state().contains("shared"))
    });
    assert!(
        settled.is_some(),
        "shares did not settle: {:?} ({} / {} / {})",
        shares(),
        a.state(),
        b.state(),
        c.state()
    );
    let before = shares();
    etcd.kill(killed).expect("the follower killed");

    // Two leases (4 s): a lost lease would take a daemon's record away and move every share.
    let start = Instant::now();
    let mut worst = 0.0f64;
    let mut trace = Vec::new();
    while start.elapsed() < Duration::from_secs(4) {
        let now = shares();
        let moved = now
            .iter()
            .zip(before)
            .map(|(&s, was)| s.abs_diff(was) as f64 / LIMIT as f64 * 100.0)
            .fold(0.0, f64::max);
        if moved > 1.0 && trace.len() < 10 {
            trace.push(format!("{:.2} s: {now:?}", start.elapsed().as_secs_f64()));
        }
        worst = worst.max(moved);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        worst <= 1.0,
        "a share moved by {worst:.2} % of the limit after one member of three was killed \
         (before: {before:?}):\n{}",
        trace.join("\n")
    );
    // Each agent has moved on (its watch and keep-alive stream were on the member killed) and
    // is sharing again within a period or two.
    let shared = wait_for(Duration::from_secs(5), || {
        [&a, &b, &c].iter().all(|h| h.state().contains("shared"))
    });
    assert!(
        shared.is_some(),
        "states after the member was killed: {} / {} / {}",
        a.state(),
        b.state(),
        c.state()
    );
    for (h, id) in [(&a, "a"), (&b, "b"), (&c, "c")] {
        let text = h.metrics.encode();
        let scrape = Scrape::parse(&text);
        let moves = scrape
            .value("metronome_cluster_failovers_total", None)
            .unwrap_or(0.0);
        let errors = scrape.sum("metronome_cluster_etcd_errors_total") as u64;
        eprintln!("{id}: {moves} moves to another member, {errors} failed requests");
        assert!(moves >= 1.0, "{id}: {moves} moves to another member");
        assert!(
            text.contains("metronome_cluster_peers{class=\"tenant\"} 2"),
            "{id} lost a peer: {text}"
        );
    }
}
