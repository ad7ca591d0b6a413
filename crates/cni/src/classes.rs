//! A pod interface's two classes and its state file.
//!
//! * **Names:** `cni.<id>.<ifname>.egress` and `cni.<id>.<ifname>.ingress`, `<id>` the container
//!   ID's first [`ID_CHARS`] characters; in both parts every character outside `A-Za-z0-9_-` is
//!   replaced by `_`, so a name always passes the daemon's rule (at most 64 of `A-Za-z0-9_-.`).
//! * **Classes:** the control protocol's class objects (the keys and words of a `[[class]]`
//!   table, docs/config.md): egress `match = { from = HOST_VETH }` (what the pod sends, shaped
//!   where it leaves the host), ingress `match = { to = HOST_VETH }` (what goes to the pod, shaped
//!   at its host veth), each with `rate`, `burst` (bytes: the bucket's bits / 8 rounded up, at
//!   least one frame, `mtu + 14`), `fair` and, with `ecn`, `backpressure = { mode = "ecn", threshold = ecnThreshold }`.
//! * **State file:** `<stateDir>/<containerid>-<ifname>.json`, the daemon's `class_dir` format
//!   (one file per pod interface, written atomically, mode 0644): the daemon adds its classes at
//!   start, so a daemon restarted while pods run re-learns them.

use crate::netconf::{Bandwidth, NetConf};
use metronome_core::Rate;
use metronome_daemon::ops::control::ClassObject;
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Characters of the container ID in a class name (12): the short ID `docker ps` and `crictl ps`
/// show, unique enough on one node, and it keeps a name within the daemon's 64 bytes.
pub const ID_CHARS: usize = 12;
/// Bytes of an Ethernet header (14) added to the MTU for the smallest burst: one full frame, the
/// daemon's default burst (`mtu + 14`, docs/config.md).
pub const ETHERNET_HEADER_BYTES: u64 = 14;
/// Mode of a state file (0644): the daemon reads it, whatever user it switched to.
pub const STATE_FILE_MODE: u32 = 0o644;

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
fn sanitized(text: &str) -> String {
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

/// The class name of `container_id`'s interface `ifname` in `direction`.
pub fn class_name(container_id: &str, ifname: &str, direction: Direction) -> String {
    let id: String = container_id.chars().take(ID_CHARS).collect();
    format!(
        "cni.{}.{}.{}",
        sanitized(&id),
        sanitized(ifname),
        direction.word()
    )
}

/// The state file of `container_id`'s interface `ifname` in `state_dir`.
pub fn state_path(state_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    let name = format!("{container_id}-{ifname}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect::<String>();
    state_dir.join(format!("{name}.json"))
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
/// object whatever the old one held.
pub const OPTIONAL_KEYS: [&str; 1] = ["backpressure"];

/// `class` as a `change`: its keys, and `null` for each of [`OPTIONAL_KEYS`] it lacks.
pub fn as_change(class: &ClassObject) -> ClassObject {
    let mut c = class.clone();
    for key in OPTIONAL_KEYS {
        c.entry(key).or_insert(Value::Null);
    }
    c
}

/// The classes `conf` asks for on `host_if` (none when it limits nothing).
pub fn wanted(conf: &NetConf, container_id: &str, ifname: &str, host_if: &str) -> Vec<ClassObject> {
    let Some(bandwidth) = conf.limits() else {
        return Vec::new();
    };
    Direction::BOTH
        .iter()
        .filter_map(|&d| {
            d.limit(&bandwidth)
                .map(|l| class_object(conf, container_id, ifname, host_if, d, l))
        })
        .collect()
}

/// Writes `file` to `path` atomically: a temporary file beside it (a dot name not ending in
/// `.json`, mode 0644, synced), renamed over `path`; the directory is made when missing.
pub(crate) fn write_state(path: &Path, file: &ClassFile) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let text = serde_json::to_string_pretty(file).map_err(std::io::Error::other)?;
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(STATE_FILE_MODE)
            .open(&tmp)?;
        // The mode given to open(2) is reduced by the umask.
        f.set_permissions(std::fs::Permissions::from_mode(STATE_FILE_MODE))?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    // The rename is durable once the directory is synced.
    std::fs::File::open(dir)?.sync_all()
}

/// Reads the state file at `path`: `Ok(None)` when there is none.
pub(crate) fn read_state(path: &Path) -> std::io::Result<Option<ClassFile>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the state file at `path`; none there is fine.
pub(crate) fn remove_state(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(
            class_name(id, "eth0", Direction::Egress),
            "cni.0123456789ab.eth0.egress"
        );
        assert_eq!(
            class_name("a.b+c", "e@1", Direction::Ingress),
            "cni.a_b_c.e_1.ingress"
        );
        let longest = class_name(&"x".repeat(64), &"y".repeat(15), Direction::Ingress);
        assert!(longest.len() <= 64, "{longest}");
        assert_eq!(
            state_path(Path::new("/d"), "abc", "eth0"),
            PathBuf::from("/d/abc-eth0.json")
        );
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
        let classes = wanted(&c, "abcdef", "eth0", "veth1");
        assert_eq!(classes.len(), 2);
        assert_eq!(
            Value::Object(classes[0].clone()),
            json!({"name":"cni.abcdef.eth0.egress","match":{"from":"veth1"},"rate":"100mbit",
                   "burst":"100000b","fair":true,"backpressure":{"mode":"ecn","threshold":"500us"}})
        );
        assert_eq!(classes[1]["match"], json!({"to":"veth1"}));
        assert_eq!(classes[1]["rate"], json!("1500kbit"));
        assert_eq!(classes[1]["burst"], json!("1514b"));
        // One direction only.
        let c = conf(r#","fair":false,"runtimeConfig":{"bandwidth":{"ingressRate":1000}}"#);
        let classes = wanted(&c, "abcdef", "eth0", "veth1");
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0]["name"], json!("cni.abcdef.eth0.ingress"));
        assert_eq!(classes[0]["fair"], json!(false));
        assert!(!classes[0].contains_key("backpressure"));
        assert_eq!(as_change(&classes[0])["backpressure"], Value::Null);
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
        for mut class in wanted(&c, "abcdef", "eth0", "veth1") {
            class.remove("match");
            let table = metronome_daemon::ops::control::protocol::toml_table(&class).unwrap();
            let valid = config.live_class(&table).unwrap();
            assert!(valid.policy.rate.is_some(), "{class:?}");
        }
    }

    #[test]
    fn the_state_file_is_written_whole_and_read_back() {
        let dir = std::env::temp_dir().join(format!("metronome-cni-unit-{}", std::process::id()));
        let path = state_path(&dir, "abc", "eth0");
        let file = ClassFile {
            interface: "veth1".into(),
            container_id: "abc".into(),
            ifname: "eth0".into(),
            netns: "/var/run/netns/x".into(),
            classes: wanted(
                &conf(r#","runtimeConfig":{"bandwidth":{"egressRate":1000}}"#),
                "abc",
                "eth0",
                "veth1",
            ),
        };
        write_state(&path, &file).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, STATE_FILE_MODE);
        assert_eq!(read_state(&path).unwrap(), Some(file));
        // Nothing else is left in the directory.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        remove_state(&path).unwrap();
        remove_state(&path).unwrap();
        assert_eq!(read_state(&path).unwrap(), None);
        std::fs::remove_dir(&dir).unwrap();
    }
}
