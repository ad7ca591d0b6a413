//! A pod interface's two classes and the name of its state file (its namespace's aggregates
//! are [`crate::namespace`]'s).
//!
//! * **Names:** `cni.<id>.<ifname>.<key>.egress` and `cni.<id>.<ifname>.<key>.ingress`: `<id>`
//!   the container ID's first [`ID_CHARS`] characters and `<ifname>` the pod's interface, both
//!   for the reader (every character outside `A-Za-z0-9_-` replaced by `_`), and `<key>`
//!   ([`pod_key`]) 16 hexadecimal digits of the FNV-1a hash of the full container ID and
//!   interface name, so that two pods whose readable parts agree still get two names. A name has
//!   at most 57 bytes, within the daemon's rule (at most 64 of `A-Za-z0-9_-.`).
//! * **Classes:** the control protocol's class objects (the keys and words of a `[[class]]`
//!   table, docs/config.md): egress `match = { from = HOST_VETH }` (what the pod sends, shaped
//!   where it leaves the host), ingress `match = { to = HOST_VETH }` (what goes to the pod, shaped
//!   at its host veth), each with `rate`, `burst` (bytes: the bucket's bits / 8 rounded up, at
//!   least one frame, `mtu + 14`), `fair` and, with `ecn`, `backpressure = { mode = "ecn", threshold = ecnThreshold }`.
//! * **State file:** `<stateDir>/<containerid>.<ifname>.json` ([`state_name`]): the container ID
//!   as it is and the interface name with every byte outside `A-Za-z0-9_-` written `%XX`, so the
//!   last `.` before `.json` separates the two and no two pods share a file. Its format is the
//!   daemon's `class_dir` ([`ClassFile`]); how it is written and read is [`crate::state`].

use crate::netconf::{Bandwidth, NetConf};
use metronome_core::Rate;
use metronome_daemon::ops::control::ClassObject;
use serde_json::Value;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// Characters of the container ID in a class name (12): the short ID `docker ps` and `crictl ps`
/// show, for the reader; [`pod_key`] tells pods apart.
pub const ID_CHARS: usize = 12;
/// Characters of the interface name in a class name (15): the kernel's longest
/// ([`crate::invocation::MAX_IFNAME`]).
pub const IFNAME_CHARS: usize = crate::invocation::MAX_IFNAME;
/// Bytes of an Ethernet header (14) added to the MTU for the smallest burst: one full frame, the
/// daemon's default burst (`mtu + 14`, docs/config.md).
pub const ETHERNET_HEADER_BYTES: u64 = 14;
/// The pod interface's record in the state directory: the daemon's own `class_dir` format.
pub(crate) use metronome_daemon::ops::control::ClassFile;

/// Which way a class shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// What the pod sends (`egressRate`): `match.from`.
    Egress,
    /// What goes to the pod (`ingressRate`): `match.to`.
    Ingress,
}

impl Direction {
    /// Both, in the order the classes are registered.
    pub const BOTH: [Direction; 2] = [Direction::Egress, Direction::Ingress];

    /// The last part of the class name.
    pub fn word(self) -> &'static str {
        match self {
            Direction::Egress => "egress",
            Direction::Ingress => "ingress",
        }
    }

    /// The match key naming the host veth.
    pub fn match_key(self) -> &'static str {
        match self {
            Direction::Egress => "from",
            Direction::Ingress => "to",
        }
    }

    /// The rate and the burst `bandwidth` asks for this way: `None` when the rate is 0 or absent.
    /// A burst of [`UNSET_BURST_BITS`] counts as none given (0: the daemon's one frame).
    pub fn limit(self, bandwidth: &Bandwidth) -> Option<(u64, u64)> {
        let (rate, burst) = match self {
            Direction::Egress => (bandwidth.egress_rate, bandwidth.egress_burst),
            Direction::Ingress => (bandwidth.ingress_rate, bandwidth.ingress_burst),
        };
        let burst = burst.filter(|&b| b != UNSET_BURST_BITS).unwrap_or(0);
        rate.filter(|&r| r > 0).map(|r| (r, burst))
    }
}

/// The burst, in bits, that Kubernetes runtimes pass when a pod's annotations give only rates
/// (containerd and CRI-O write `math.MaxUint32`, "no burst chosen"): taken as no burst, so
/// the class gets the daemon's default of one frame instead of a 512 MiB bucket that an idle pod
/// could empty at line rate before its limit holds. A burst the operator chose is kept as given.
pub const UNSET_BURST_BITS: u64 = u32::MAX as u64;

/// `text` with every character outside `A-Za-z0-9_-` replaced by `_`.
pub(crate) fn sanitized(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The pod's key: the FNV-1a (64-bit) hash of `container_id`, a NUL byte and `ifname`, as 16
/// lowercase hexadecimal digits. Neither part holds a NUL (the environment cannot carry one), so
/// the bytes hashed name one pod; FNV-1a is fixed by its definition, so every run of the plugin
/// (ADD, then DEL or CHECK) computes the same key.
pub fn pod_key(container_id: &str, ifname: &str) -> String {
    let mut h = fnv::FnvHasher::default();
    h.write(container_id.as_bytes());
    h.write(&[0]);
    h.write(ifname.as_bytes());
    format!("{:016x}", h.finish())
}

/// The class name of `container_id`'s interface `ifname` in `direction`.
pub fn class_name(container_id: &str, ifname: &str, direction: Direction) -> String {
    let id: String = container_id.chars().take(ID_CHARS).collect();
    let ifname_part: String = ifname.chars().take(IFNAME_CHARS).collect();
    format!(
        "cni.{}.{}.{}.{}",
        sanitized(&id),
        sanitized(&ifname_part),
        pod_key(container_id, ifname),
        direction.word()
    )
}

/// `text` with every byte outside `A-Za-z0-9_-` and `keep` written `%XX` (uppercase hex).
fn percent_encoded(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The state file's name of `container_id`'s interface `ifname`: `<id>.<ifname>.json`, the
/// container ID with `.` kept and the interface name with `.` encoded (so the last `.` before
/// `.json` splits them), every other byte outside `A-Za-z0-9_-` as `%XX` in both: two pods never
/// share a name. A leading `.` is encoded too, so a name never starts with one (the temporary
/// files of [`crate::state`] do).
pub fn state_name(container_id: &str, ifname: &str) -> String {
    let mut id = percent_encoded(container_id, b".");
    if id.starts_with('.') {
        id.replace_range(..1, "%2E");
    }
    format!("{id}.{}.json", percent_encoded(ifname, b""))
}

/// The state file of `container_id`'s interface `ifname` in `state_dir`.
pub fn state_path(state_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    state_dir.join(state_name(container_id, ifname))
}

/// The burst in bytes for a bucket of `burst_bits` bits: rounded up to whole bytes, at least one
/// frame of `mtu`.
pub fn burst_bytes(burst_bits: u64, mtu: u32) -> u64 {
    burst_bits
        .div_ceil(8)
        .max(u64::from(mtu) + ETHERNET_HEADER_BYTES)
}

/// The class of `container_id`'s `ifname` in `direction` at `rate_bps` with `burst_bits`,
/// matching `host_if`.
pub fn class_object(
    conf: &NetConf,
    container_id: &str,
    ifname: &str,
    host_if: &str,
    direction: Direction,
    (rate_bps, burst_bits): (u64, u64),
) -> ClassObject {
    let mut matcher = ClassObject::new();
    matcher.insert(direction.match_key().into(), Value::from(host_if));
    let mut o = ClassObject::new();
    o.insert(
        "name".into(),
        Value::from(class_name(container_id, ifname, direction)),
    );
    o.insert("match".into(), Value::Object(matcher));
    o.insert(
        "rate".into(),
        Value::from(Rate::from_bps(rate_bps).to_string()),
    );
    o.insert(
        "burst".into(),
        Value::from(format!("{}b", burst_bytes(burst_bits, conf.mtu))),
    );
    o.insert("fair".into(), Value::from(conf.fair));
    if conf.ecn {
        let mut bp = ClassObject::new();
        bp.insert("mode".into(), Value::from("ecn"));
        bp.insert("threshold".into(), Value::from(conf.ecn_threshold.clone()));
        o.insert("backpressure".into(), Value::Object(bp));
    }
    o
}

/// The keys this plugin sets that a class may lack: a `change` sets each missing one to `null`
/// (removed, back to its default), so that a class re-registered by `change` is exactly the new
/// object whatever the old one held (a pod whose namespace no longer has an aggregate leaves
/// it).
pub const OPTIONAL_KEYS: [&str; 2] = ["backpressure", "parent"];

/// `class` as a `change`: its keys, and `null` for each of [`OPTIONAL_KEYS`] it lacks.
pub fn as_change(class: &ClassObject) -> ClassObject {
    let mut c = class.clone();
    for key in OPTIONAL_KEYS {
        c.entry(key).or_insert(Value::Null);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::pod_classes;
    use serde_json::json;

    fn conf(extra: &str) -> NetConf {
        NetConf::parse(
            format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"t"{extra}}}"#).as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn names_are_short_and_plain() {
        let id = "0123456789abcdef0123";
        let key = pod_key(id, "eth0");
        assert_eq!(key.len(), 16);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_eq!(
            class_name(id, "eth0", Direction::Egress),
            format!("cni.0123456789ab.eth0.{key}.egress")
        );
        assert_eq!(
            class_name("a.b+c", "e@1", Direction::Ingress),
            format!("cni.a_b_c.e_1.{}.ingress", pod_key("a.b+c", "e@1"))
        );
        let longest = class_name(&"x".repeat(64), &"y".repeat(15), Direction::Ingress);
        assert_eq!(longest.len(), 57, "{longest}");
        // FNV-1a of its definition: the key does not depend on the build.
        assert_eq!(
            pod_key("", ""),
            format!("{:016x}", 0xaf63_bd4c_8601_b7df_u64)
        );
        assert_eq!(
            state_path(Path::new("/d"), "abc", "eth0"),
            PathBuf::from("/d/abc.eth0.json")
        );
        assert_eq!(state_name("a.b", "c.d%"), "a.b.c%2Ed%25.json");
        assert_eq!(state_name(".x", "e"), "%2Ex.e.json");
    }

    #[test]
    fn pods_whose_readable_parts_agree_get_names_of_their_own() {
        let pods = [
            ("ab-c", "d"),
            ("ab", "c-d"),
            ("ab.c", "d"),
            ("ab", "c.d"),
            ("0123456789abX", "eth0"),
            ("0123456789abY", "eth0"),
            ("a+b", "eth0"),
            ("a_b", "eth0"),
            ("a", "e@1"),
            ("a", "e_1"),
        ];
        let mut classes = std::collections::BTreeSet::new();
        let mut files = std::collections::BTreeSet::new();
        for (id, ifname) in pods {
            for d in Direction::BOTH {
                assert!(classes.insert(class_name(id, ifname, d)), "{id} {ifname}");
            }
            assert!(files.insert(state_name(id, ifname)), "{id} {ifname}");
        }
    }

    #[test]
    fn the_runtimes_unset_burst_is_one_frame_and_a_chosen_one_is_kept() {
        let bw = |burst| Bandwidth {
            egress_rate: Some(100_000_000),
            egress_burst: Some(burst),
            ..Bandwidth::default()
        };
        assert_eq!(
            Direction::Egress.limit(&bw(u64::from(u32::MAX))),
            Some((100_000_000, 0))
        );
        assert_eq!(
            Direction::Egress.limit(&bw(800_000)),
            Some((100_000_000, 800_000))
        );
        assert_eq!(Direction::Ingress.limit(&bw(800_000)), None);
    }

    #[test]
    fn the_burst_is_whole_bytes_and_at_least_one_frame() {
        assert_eq!(burst_bytes(0, 1500), 1514);
        assert_eq!(burst_bytes(8 * 1514 - 7, 1500), 1514);
        assert_eq!(burst_bytes(8 * 100_000 + 1, 1500), 100_001);
        assert_eq!(burst_bytes(80_000, 9000), 10_000);
        assert_eq!(burst_bytes(8 * 9000, 9000), 9014);
    }

    #[test]
    fn objects_say_what_the_configuration_asks() {
        let c = conf(
            r#","ecn":true,"runtimeConfig":{"bandwidth":
               {"egressRate":100000000,"egressBurst":800000,"ingressRate":1500000}}"#,
        );
        let classes = pod_classes(&c, ("abcdef", "eth0", "veth1"), None);
        assert_eq!(classes.len(), 2);
        assert_eq!(
            Value::Object(classes[0].clone()),
            json!({"name":class_name("abcdef", "eth0", Direction::Egress),"match":{"from":"veth1"},"rate":"100mbit",
                   "burst":"100000b","fair":true,"backpressure":{"mode":"ecn","threshold":"500us"}})
        );
        assert_eq!(classes[1]["match"], json!({"to":"veth1"}));
        assert_eq!(classes[1]["rate"], json!("1500kbit"));
        assert_eq!(classes[1]["burst"], json!("1514b"));
        // One direction only.
        let c = conf(r#","fair":false,"runtimeConfig":{"bandwidth":{"ingressRate":1000}}"#);
        let classes = pod_classes(&c, ("abcdef", "eth0", "veth1"), None);
        assert_eq!(classes.len(), 1);
        assert_eq!(
            classes[0]["name"],
            json!(class_name("abcdef", "eth0", Direction::Ingress))
        );
        assert_eq!(classes[0]["fair"], json!(false));
        assert!(!classes[0].contains_key("backpressure"));
        assert_eq!(as_change(&classes[0])["backpressure"], Value::Null);
        assert_eq!(as_change(&classes[0])["parent"], Value::Null);
    }

    #[test]
    fn the_words_are_what_the_daemon_validates() {
        // The daemon's own validation of a live class, its `match` aside (a `from`/`to` match
        // needs attach mode and a bridge).
        let config = metronome_daemon::Config::from_toml_str(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n",
            "t.toml",
        )
        .unwrap();
        let c = conf(
            r#","ecn":true,"runtimeConfig":{"bandwidth":
               {"egressRate":123456789,"egressBurst":4294967295,"ingressRate":1}}"#,
        );
        for mut class in pod_classes(&c, ("abcdef", "eth0", "veth1"), None) {
            class.remove("match");
            let table = metronome_daemon::ops::control::protocol::toml_table(&class).unwrap();
            let valid = config.live_class(&table).unwrap();
            assert!(valid.policy.rate.is_some(), "{class:?}");
        }
    }
}
