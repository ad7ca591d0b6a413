//! The agent's reading of other hosts' records, without etcd: records put as a read or the watch
//! delivers them, and the share put in force as after a revision.

use super::*;
use crate::ops::cluster::cells;
use crate::ops::config::Config;
use crate::ops::metrics::Metrics;
use metronome_core::cluster::{least_share, MAX_WEIGHT};
use metronome_core::Rate;

const LIMIT: u64 = 300_000_000;
const S: u64 = 1_000_000_000;

/// A runner of host `host` with one cluster class of 300 Mbit/s, and its metrics.
fn runner(host: &str) -> (Runner, Metrics) {
    let text = format!(
        "[interfaces]\ninside = \"a\"\noutside = \"b\"\n\
         [cluster]\nname = \"c\"\netcd = [\"http://127.0.0.1:1\"]\nhost = \"{host}\"\n\
         [[class]]\nname = \"t\"\nrate = \"300mbit\"\nscope = \"cluster\"\n"
    );
    let config = Config::from_toml_str(&text, "test").expect("valid configuration");
    let section = config.cluster.clone().expect("[cluster]");
    let metrics = Metrics::new();
    let runner = Runner::new(
        section,
        host.to_string(),
        ConnectOptions::new(),
        cells(&config, 1),
        metrics.cluster(),
    );
    (runner, metrics)
}

/// A record of `host` at its cap over one second: it offered twice the half of the limit it
/// enforced.
fn busy(host: &str, weight: u32) -> HostRecord<String> {
    HostRecord {
        host: host.to_string(),
        weight,
        sample: UsageSample {
            at: Timestamp::from_nanos(2 * S),
            sent_bytes: 1_000 + LIMIT / 16,
            backlog_bytes: LIMIT / 16,
            refused_bytes: 0,
        },
        previous: Some(UsageSample {
            at: Timestamp::from_nanos(S),
            sent_bytes: 1_000,
            backlog_bytes: 0,
            refused_bytes: 0,
        }),
        enforced_bps: LIMIT / 2,
    }
}

/// Puts `record` as etcd would deliver it.
fn put(r: &mut Runner, record: &HostRecord<String>) {
    let key = format!("{}{}", r.classes[0].prefix, record.host);
    r.put_record(key.as_bytes(), encode(record, LIMIT).as_bytes());
}

/// The share put in force with `own` as the newest record.
fn share(r: &mut Runner, own: &HostRecord<String>) -> u64 {
    r.classes[0].newest = Some(own.clone());
    r.recompute(0);
    r.classes[0].share
}

/// The value of the series `line` starts with (0 without one).
fn series(m: &Metrics, line: &str) -> f64 {
    m.encode()
        .lines()
        .find(|l| l.starts_with(line))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn refused(m: &Metrics, reason: &str) -> f64 {
    series(
        m,
        &format!("metronome_cluster_records_refused_total{{reason=\"{reason}\"}}"),
    )
}

#[test]
fn a_peer_of_weight_u32_max_is_refused_and_the_honest_hosts_split_the_limit() {
    let (mut r, m) = runner("a");
    let own = busy("a", 1);
    put(&mut r, &own);
    put(&mut r, &busy("b", 1));
    put(&mut r, &busy("c", 1));
    // Host c now claims the greatest weight a u32 holds: its record is refused, and its earlier
    // one with it.
    put(&mut r, &busy("c", u32::MAX));
    assert_eq!(refused(&m, "weight"), 1.0, "{}", m.encode());
    assert_eq!(share(&mut r, &own), LIMIT / 2);
    assert_eq!(series(&m, "metronome_cluster_peers{class=\"t\"}"), 1.0);
    assert_eq!(
        series(&m, "metronome_cluster_share_bps{class=\"t\"}"),
        (LIMIT / 2) as f64
    );
    // The greatest weight a daemon can be configured with is counted as it is.
    put(&mut r, &busy("c", MAX_WEIGHT));
    assert_eq!(refused(&m, "weight"), 1.0);
    assert!(share(&mut r, &own) >= least_share(Rate::from_bps(LIMIT), &r.cfg));
}

#[test]
fn a_hundred_thousand_fake_hosts_leave_an_honest_host_its_share_among_max_hosts() {
    let max = metronome_core::cluster::DEFAULT_MAX_HOSTS as u64;
    // Host "a" sorts before the fakes' ids, host "zz" after them: both keep their share.
    for own_id in ["a", "zz"] {
        let (mut r, m) = runner(own_id);
        let own = busy(own_id, 1);
        put(&mut r, &own);
        put(&mut r, &busy("b", 1));
        for i in 0..100_000 {
            put(&mut r, &busy(&format!("fake-{i:06}"), 1));
        }
        // Every host counted is busy with weight 1: one max_hosts-th of the limit each, where
        // counting them all would leave 1 / 100 002.
        let got = share(&mut r, &own);
        assert!(got >= LIMIT / max, "{own_id}: {got}");
        assert_eq!(
            series(&m, "metronome_cluster_peers{class=\"t\"}"),
            (max - 1) as f64
        );
        assert_eq!(
            refused(&m, "too_many_hosts"),
            (100_000 + 1 - (max - 1)) as f64
        );
        r.records.values().for_each(ClassRecords::invariants);
    }
    // Fakes of the greatest weight: the least share, the idle floor of max_hosts hosts.
    let (mut r, _m) = runner("a");
    let own = busy("a", 1);
    put(&mut r, &own);
    for i in 0..100_000 {
        put(&mut r, &busy(&format!("fake-{i:06}"), MAX_WEIGHT));
    }
    let least = least_share(Rate::from_bps(LIMIT), &r.cfg);
    assert_eq!(least, LIMIT / 100 / max);
    assert_eq!(share(&mut r, &own), least);
}

#[test]
fn malformed_records_and_other_classes_are_counted_by_reason() {
    let (mut r, m) = runner("a");
    let prefix = r.classes[0].prefix.clone();
    r.put_record(format!("{prefix}b").as_bytes(), b"not a record");
    r.put_record(
        b"/metronome/c/other-class/b",
        encode(&busy("b", 1), LIMIT).as_bytes(),
    );
    assert_eq!(refused(&m, "malformed"), 1.0);
    assert_eq!(refused(&m, "class"), 1.0);
    let own = busy("a", 1);
    put(&mut r, &own);
    assert_eq!(share(&mut r, &own), LIMIT, "alone");
}
