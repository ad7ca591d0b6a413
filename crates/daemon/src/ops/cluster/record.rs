//! A demand record as etcd holds it: one JSON object per key
//! `<prefix>/<cluster>/<class>/<host>` ([`metronome_core::cluster::HostRecord`] with the limit
//! the writer enforces, so that daemons configured with different limits can be told apart).
//!
//! ```json
//! {"v":1,"weight":1,"limit_bps":300000000,"enforced_bps":150000000,
//!  "sample":{"at_ns":5000000000,"sent":187500000,"backlog":30000},
//!  "previous":{"at_ns":4000000000,"sent":168750000,"backlog":29000}}
//! ```
//!
//! Times are the writer's own monotonic clock; only differences within one record are used.

use metronome_core::cluster::{HostRecord, UsageSample};
use metronome_core::Timestamp;
use serde::{Deserialize, Serialize};

/// The format's version (`v`); a record of another version is refused.
pub const RECORD_VERSION: u32 = 1;
/// Largest record read, in bytes: a record is about 200; anything far larger is not one.
pub const MAX_RECORD_BYTES: usize = 4096;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireSample {
    at_ns: u64,
    sent: u64,
    backlog: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord {
    v: u32,
    weight: u32,
    limit_bps: u64,
    enforced_bps: u64,
    sample: WireSample,
    previous: Option<WireSample>,
}

fn wire(s: &UsageSample) -> WireSample {
    WireSample {
        at_ns: s.at.as_nanos(),
        sent: s.sent_bytes,
        backlog: s.backlog_bytes,
    }
}

fn usage(s: &WireSample) -> UsageSample {
    UsageSample {
        at: Timestamp::from_nanos(s.at_ns),
        sent_bytes: s.sent,
        backlog_bytes: s.backlog,
    }
}

/// The JSON of `record`, whose writer enforces the limit `limit_bps`.
pub fn encode(record: &HostRecord<String>, limit_bps: u64) -> String {
    let w = WireRecord {
        v: RECORD_VERSION,
        weight: record.weight,
        limit_bps,
        enforced_bps: record.enforced_bps,
        sample: wire(&record.sample),
        previous: record.previous.as_ref().map(wire),
    };
    // Plain integers and options: serialization cannot fail.
    serde_json::to_string(&w).unwrap_or_default()
}

/// The record of host `host` from `bytes`, and the limit its writer enforces; `None` when it is
/// not a record of this version (counted by the caller as `malformed`).
pub fn decode(host: &str, bytes: &[u8]) -> Option<(HostRecord<String>, u64)> {
    if bytes.len() > MAX_RECORD_BYTES {
        return None;
    }
    let w: WireRecord = serde_json::from_slice(bytes).ok()?;
    if w.v != RECORD_VERSION {
        return None;
    }
    Some((
        HostRecord {
            host: host.to_string(),
            weight: w.weight,
            sample: usage(&w.sample),
            previous: w.previous.as_ref().map(usage),
            enforced_bps: w.enforced_bps,
        },
        w.limit_bps,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_garbage_is_refused() {
        let r = HostRecord {
            host: "a".to_string(),
            weight: 3,
            sample: UsageSample {
                at: Timestamp::from_nanos(2_000),
                sent_bytes: 10,
                backlog_bytes: 2,
            },
            previous: Some(UsageSample {
                at: Timestamp::from_nanos(1_000),
                sent_bytes: 4,
                backlog_bytes: 1,
            }),
            enforced_bps: 7,
        };
        let text = encode(&r, 300);
        assert_eq!(decode("a", text.as_bytes()), Some((r.clone(), 300)));
        let first = HostRecord {
            previous: None,
            ..r
        };
        assert_eq!(decode("a", encode(&first, 1).as_bytes()), Some((first, 1)));
        assert_eq!(decode("a", b"{}"), None);
        assert_eq!(decode("a", b"not json"), None);
        let other = text.replace("\"v\":1", "\"v\":2");
        assert_eq!(decode("a", other.as_bytes()), None);
        assert_eq!(decode("a", &vec![b' '; MAX_RECORD_BYTES + 1]), None);
    }
}
