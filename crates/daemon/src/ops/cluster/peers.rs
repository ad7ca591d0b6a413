//! The records of one cluster class as the agent keeps them: this host's own and those of at
//! most `max_hosts - 1` other hosts, each checked as it is read against the bounds of the share
//! computation (`metronome_core::cluster`), so that what other hosts write cannot push this
//! host's share towards zero (docs/config.md "Cluster classes").
//!
//! A record of a weight above [`MAX_WEIGHT`] is refused (`weight`, never clamped: no honest
//! daemon writes one) and the host's earlier record goes with it: a host that writes a refused
//! record is not counted. Of the other hosts, the `max_hosts - 1` lowest host ids are kept, the
//! ones `metronome_core::cluster::own_share` counts: a record of a host beyond them is refused
//! (`too_many_hosts`), and a record of a lower id pushes the greatest kept one out, refused in
//! its turn. Every host publishes each period, so a host pushed out is back within a period of a
//! kept one going. Refusals are counted by the caller and logged at most once per
//! [`REFUSAL_LOG_EVERY`] and reason ([`RefusalLog`]).

use metronome_core::cluster::{HostRecord, MAX_WEIGHT};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How often at most a refusal of one reason is logged: once a minute (ours: a flood of bad
/// records is one line a minute; `metronome_cluster_records_refused_total{reason}` counts them
/// all).
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// Why a record is not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Not a record of this version, or too large.
    Malformed,
    /// Of a class this daemon does not have.
    Class,
    /// A weight above [`MAX_WEIGHT`].
    Weight,
    /// Beyond the `max_hosts - 1` lowest host ids.
    TooManyHosts,
}

impl Refusal {
    /// The `reason` label of `metronome_cluster_records_refused_total`.
    pub const fn label(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Class => "class",
            Refusal::Weight => "weight",
            Refusal::TooManyHosts => "too_many_hosts",
        }
    }
}

/// One class's records (see the module docs).
#[derive(Debug)]
pub struct ClassRecords {
    own_host: String,
    /// `max_hosts - 1`.
    max_peers: usize,
    own: Option<HostRecord<String>>,
    peers: BTreeMap<String, HostRecord<String>>,
}

impl ClassRecords {
    /// No records yet, for host `own_host` counting at most `max_hosts` hosts (itself included).
    pub fn new(own_host: &str, max_hosts: usize) -> ClassRecords {
        ClassRecords {
            own_host: own_host.to_string(),
            max_peers: max_hosts.saturating_sub(1),
            own: None,
            peers: BTreeMap::new(),
        }
    }

    /// Takes `record`, read from etcd. Returns the refusal, if any, with the host whose record
    /// is not counted: `record`'s own, or that of the host it pushed out.
    pub fn put(&mut self, record: HostRecord<String>) -> Option<(Refusal, String)> {
        if record.weight > MAX_WEIGHT {
            self.remove(&record.host);
            return Some((Refusal::Weight, record.host));
        }
        if record.host == self.own_host {
            self.own = Some(record);
            return None;
        }
        if self.peers.contains_key(&record.host) || self.peers.len() < self.max_peers {
            self.peers.insert(record.host.clone(), record);
            return None;
        }
        let greatest = self.peers.last_key_value().map(|(h, _)| h.clone());
        match greatest {
            Some(g) if record.host < g => {
                self.peers.remove(&g);
                self.peers.insert(record.host.clone(), record);
                Some((Refusal::TooManyHosts, g))
            }
            _ => Some((Refusal::TooManyHosts, record.host)),
        }
    }

    /// Forgets the record of `host` (deleted from etcd).
    pub fn remove(&mut self, host: &str) {
        if host == self.own_host {
            self.own = None;
        } else {
            self.peers.remove(host);
        }
    }

    /// The number of other hosts counted.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// The records counted: this host's, if read, and the other hosts' kept.
    pub fn records(&self) -> Vec<HostRecord<String>> {
        self.own
            .iter()
            .chain(self.peers.values())
            .cloned()
            .collect()
    }

    /// Checks the bounds of the module docs; panics with the offending state.
    pub fn invariants(&self) {
        assert!(
            self.peers.len() <= self.max_peers,
            "{} peers kept, at most {}",
            self.peers.len(),
            self.max_peers
        );
        assert!(
            !self.peers.contains_key(&self.own_host),
            "own host among the peers"
        );
        let heavy = self.records().into_iter().find(|r| r.weight > MAX_WEIGHT);
        assert!(heavy.is_none(), "a record above MAX_WEIGHT kept: {heavy:?}");
    }
}

/// When each reason of refusal was last logged, and how many refusals went unlogged since.
#[derive(Debug, Default)]
pub struct RefusalLog {
    last: BTreeMap<Refusal, (Instant, u64)>,
}

impl RefusalLog {
    /// A refusal for `reason` at `now`: `Some(n)` when it is to be logged, `n` being the
    /// refusals of that reason left unlogged since the last line; `None` within
    /// [`REFUSAL_LOG_EVERY`] of it.
    pub fn note(&mut self, reason: Refusal, now: Instant) -> Option<u64> {
        match self.last.get_mut(&reason) {
            Some((at, unlogged)) if now.saturating_duration_since(*at) < REFUSAL_LOG_EVERY => {
                *unlogged += 1;
                None
            }
            Some((at, unlogged)) => {
                let n = *unlogged;
                *at = now;
                *unlogged = 0;
                Some(n)
            }
            None => {
                self.last.insert(reason, (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_core::cluster::UsageSample;

    fn rec(host: &str, weight: u32) -> HostRecord<String> {
        HostRecord {
            host: host.to_string(),
            weight,
            sample: UsageSample::default(),
            previous: None,
            enforced_bps: 0,
        }
    }

    fn hosts(c: &ClassRecords) -> Vec<String> {
        c.records().into_iter().map(|r| r.host).collect()
    }

    #[test]
    fn a_weight_above_the_bound_is_refused_and_takes_the_hosts_record_with_it() {
        let mut c = ClassRecords::new("me", 8);
        assert_eq!(c.put(rec("b", 1)), None);
        assert_eq!(
            c.put(rec("b", MAX_WEIGHT)),
            None,
            "the bound itself is counted"
        );
        assert_eq!(
            c.put(rec("b", u32::MAX)),
            Some((Refusal::Weight, "b".to_string()))
        );
        assert_eq!(
            c.put(rec("c", MAX_WEIGHT + 1)),
            Some((Refusal::Weight, "c".to_string()))
        );
        assert!(hosts(&c).is_empty(), "{:?}", hosts(&c));
        c.invariants();
    }

    #[test]
    fn the_lowest_host_ids_are_kept_and_the_own_record_always() {
        let mut c = ClassRecords::new("zz", 3);
        assert_eq!(c.put(rec("m", 1)), None);
        assert_eq!(c.put(rec("n", 1)), None);
        assert_eq!(
            c.put(rec("o", 1)),
            Some((Refusal::TooManyHosts, "o".to_string()))
        );
        // A lower id pushes the greatest kept one out; an update of a kept host is taken.
        assert_eq!(
            c.put(rec("a", 1)),
            Some((Refusal::TooManyHosts, "n".to_string()))
        );
        assert_eq!(c.put(rec("m", 2)), None);
        // Its own record whatever its id.
        assert_eq!(c.put(rec("zz", 1)), None);
        assert_eq!(hosts(&c), ["zz", "a", "m"]);
        assert_eq!(c.peers(), 2);
        // A kept host goes: the next record beyond takes its place.
        c.remove("a");
        assert_eq!(c.put(rec("o", 1)), None);
        assert_eq!(hosts(&c), ["zz", "m", "o"]);
        c.invariants();
    }

    #[test]
    fn a_hundred_thousand_fake_hosts_keep_at_most_max_hosts() {
        let mut c = ClassRecords::new("me", 1024);
        c.put(rec("me", 1));
        // An id below the fakes' (a fake of a lower id pushes a greater one out, whoever it is).
        c.put(rec("b-honest", 1));
        let mut refused = 0;
        for i in 0..100_000 {
            if c.put(rec(&format!("fake-{i:06}"), 1)).is_some() {
                refused += 1;
            }
        }
        assert_eq!(c.peers(), 1023);
        assert_eq!(refused, 100_000 - 1022);
        assert!(hosts(&c).contains(&"b-honest".to_string()));
        assert_eq!(
            c.put(rec("a-fake", 1)),
            Some((Refusal::TooManyHosts, "fake-001021".to_string()))
        );
        c.invariants();
    }

    #[test]
    fn refusals_are_logged_once_a_period_per_reason_with_the_count_left_out() {
        let mut log = RefusalLog::default();
        let t = Instant::now();
        assert_eq!(log.note(Refusal::Weight, t), Some(0));
        assert_eq!(log.note(Refusal::Weight, t), None);
        assert_eq!(log.note(Refusal::Weight, t + Duration::from_secs(1)), None);
        assert_eq!(log.note(Refusal::Malformed, t), Some(0), "per reason");
        assert_eq!(log.note(Refusal::Weight, t + REFUSAL_LOG_EVERY), Some(2));
        assert_eq!(log.note(Refusal::Weight, t + REFUSAL_LOG_EVERY), None);
    }
}
