//! The network configuration on stdin (CNI specification 1.0.0, "Section 1: Network
//! configuration format"): the well-known keys (`cniVersion`, `name`, `type`), this plugin's
//! keys (camelCase, as CNI plugins write them), `runtimeConfig.bandwidth` (the `bandwidth`
//! capability, in the words of the reference `bandwidth` plugin: bits per second and bits),
//! `namespaceBandwidth` (the same words, for all the pods of a Kubernetes namespace together)
//! and `prevResult`. Unknown keys are ignored, as the specification allows.

use crate::error::{CniError, DECODING_FAILURE, INCOMPATIBLE_VERSION, INVALID_CONFIG};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// The specification versions this plugin speaks, oldest first (`VERSION`'s
/// `supportedVersions`). 0.3.0 is the first with chained plugins and `prevResult`.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"];
/// The newest of [`SUPPORTED_VERSIONS`]: `VERSION`'s own `cniVersion`, and the version of an
/// error object when the configuration gave none this plugin supports.
pub const CURRENT_VERSION: &str = "1.0.0";
/// The daemon's control socket when `socket` is not given: the daemon's own default
/// (`[daemon] control`, docs/config.md).
pub const DEFAULT_SOCKET: &str = "/run/metronome/control.sock";
/// The state directory when `stateDir` is not given: the daemon's `class_dir` in the examples
/// (examples/cni/daemonset.yaml, docs/cni.md).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/metronome/cni";
/// The ECN marking threshold when `ecnThreshold` is not given: a flow's queued delay (its EDT
/// minus now) above which its ECN-capable packets are marked; the value docs/config.md's
/// `backpressure` table gives as its example (the daemon has no default: `ecn` needs one).
pub const DEFAULT_ECN_THRESHOLD: &str = "500us";
/// The MTU when `mtu` is not given, in bytes: Ethernet's, the daemon's `interfaces.mtu` default.
pub const DEFAULT_MTU: u32 = 1500;
/// The MTU's bounds in bytes: IPv4's minimum (68) to the largest the daemon takes (65 535), the
/// range of the daemon's `interfaces.mtu` (docs/config.md).
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 68..=65535;

/// `runtimeConfig.bandwidth`: rates in bit/s, bursts in bits; a rate of 0 or absent is no limit
/// in that direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    /// What goes to the pod, bit/s.
    #[serde(default)]
    pub ingress_rate: Option<u64>,
    /// The bucket of `ingress_rate`, bits.
    #[serde(default)]
    pub ingress_burst: Option<u64>,
    /// What the pod sends, bit/s.
    #[serde(default)]
    pub egress_rate: Option<u64>,
    /// The bucket of `egress_rate`, bits.
    #[serde(default)]
    pub egress_burst: Option<u64>,
}

impl Bandwidth {
    /// Whether it limits either direction.
    pub fn limits_anything(&self) -> bool {
        self.ingress_rate.unwrap_or(0) > 0 || self.egress_rate.unwrap_or(0) > 0
    }
}

/// `namespaceBandwidth`: a limit on all the pods of each Kubernetes namespace together, in the
/// words of [`Bandwidth`], and `namespaces`, the limits of the namespaces that differ. An entry
/// of `namespaces` replaces the limit in full for its namespace: a direction it leaves out (or
/// gives a rate of 0) has no aggregate there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceBandwidth {
    /// What goes to each namespace's pods together, bit/s.
    #[serde(default)]
    pub ingress_rate: Option<u64>,
    /// The bucket of `ingress_rate`, bits.
    #[serde(default)]
    pub ingress_burst: Option<u64>,
    /// What each namespace's pods send together, bit/s.
    #[serde(default)]
    pub egress_rate: Option<u64>,
    /// The bucket of `egress_rate`, bits.
    #[serde(default)]
    pub egress_burst: Option<u64>,
    /// The limits of namespaces that differ, by namespace name.
    #[serde(default)]
    pub namespaces: std::collections::BTreeMap<String, Bandwidth>,
}

impl NamespaceBandwidth {
    /// The limit of `namespace`'s pods together: its entry in `namespaces`, else the default.
    pub fn of(&self, namespace: &str) -> Bandwidth {
        self.namespaces
            .get(namespace)
            .copied()
            .unwrap_or(Bandwidth {
                ingress_rate: self.ingress_rate,
                ingress_burst: self.ingress_burst,
                egress_rate: self.egress_rate,
                egress_burst: self.egress_burst,
            })
    }
}

#[derive(Default, Deserialize)]
struct RuntimeConfig {
    #[serde(default)]
    bandwidth: Option<Bandwidth>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawNetConf {
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(rename = "type")]
    plugin_type: Option<String>,
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    fair: Option<bool>,
    ecn: Option<bool>,
    ecn_threshold: Option<String>,
    mtu: Option<u32>,
    namespace_bandwidth: Option<NamespaceBandwidth>,
    #[serde(default)]
    runtime_config: Option<RuntimeConfig>,
    prev_result: Option<Map<String, Value>>,
}

/// The network configuration as this plugin uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConf {
    /// `cniVersion`, one of [`SUPPORTED_VERSIONS`].
    pub cni_version: String,
    /// `name`, the network's name.
    pub name: String,
    /// `socket`: the daemon's control socket.
    pub socket: PathBuf,
    /// `stateDir`: where the state files go (the daemon's `class_dir`).
    pub state_dir: PathBuf,
    /// `fair`: fair queueing inside each pod's limit (default true).
    pub fair: bool,
    /// `ecn`: ECN backpressure (`backpressure = { mode = "ecn" }`, default false).
    pub ecn: bool,
    /// `ecnThreshold`: the queued delay above which `ecn` marks (a duration: `500us`, `1ms`).
    pub ecn_threshold: String,
    /// `mtu` in bytes: the smallest burst is `mtu + 14`.
    pub mtu: u32,
    /// `namespaceBandwidth`: the limits of each namespace's pods together, when given.
    pub namespace_bandwidth: Option<NamespaceBandwidth>,
    /// `runtimeConfig.bandwidth`, when the runtime passed one.
    pub bandwidth: Option<Bandwidth>,
    /// `prevResult`, the previous plugin's result, when given.
    pub prev_result: Option<Map<String, Value>>,
}

/// The `cniVersion` of `stdin`, if it is JSON with one this plugin supports: the version an
/// error object is written in.
pub fn error_version(stdin: &[u8]) -> &'static str {
    let version = serde_json::from_slice::<Value>(stdin).ok().and_then(|v| {
        v.get("cniVersion")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    SUPPORTED_VERSIONS
        .iter()
        .copied()
        .find(|s| Some(*s) == version.as_deref())
        .unwrap_or(CURRENT_VERSION)
}

/// Checks that `version` is one of [`SUPPORTED_VERSIONS`] (else error 1).
pub fn check_version(version: &str) -> Result<(), CniError> {
    if SUPPORTED_VERSIONS.contains(&version) {
        Ok(())
    } else {
        Err(CniError::new(
            INCOMPATIBLE_VERSION,
            "incompatible CNI versions",
            format!("config is {version:?}, plugin supports {SUPPORTED_VERSIONS:?}"),
        ))
    }
}

fn decoding(details: impl Into<String>) -> CniError {
    CniError::new(
        DECODING_FAILURE,
        "decoding the network configuration",
        details,
    )
}

fn invalid(details: impl Into<String>) -> CniError {
    CniError::new(INVALID_CONFIG, "invalid network configuration", details)
}

impl NetConf {
    /// Parses stdin: not JSON or a key of the wrong type is error 6, a missing `cniVersion`,
    /// `name` or `type` or an MTU out of range error 7, an unsupported `cniVersion` error 1.
    pub fn parse(stdin: &[u8]) -> Result<NetConf, CniError> {
        let value: Value = serde_json::from_slice(stdin)
            .map_err(|e| decoding(format!("stdin is not a JSON object: {e}")))?;
        if !value.is_object() {
            return Err(decoding("stdin is not a JSON object"));
        }
        let raw: RawNetConf =
            serde_json::from_value(value).map_err(|e| decoding(format!("stdin: {e}")))?;
        let cni_version = raw
            .cni_version
            .ok_or_else(|| invalid("cniVersion: missing"))?;
        check_version(&cni_version)?;
        let name = raw.name.ok_or_else(|| invalid("name: missing"))?;
        raw.plugin_type.ok_or_else(|| invalid("type: missing"))?;
        let mtu = raw.mtu.unwrap_or(DEFAULT_MTU);
        if !MTU_RANGE.contains(&mtu) {
            return Err(invalid(format!(
                "mtu: {mtu} is outside {}..={} bytes",
                MTU_RANGE.start(),
                MTU_RANGE.end()
            )));
        }
        let ecn_threshold = raw
            .ecn_threshold
            .unwrap_or_else(|| DEFAULT_ECN_THRESHOLD.to_owned());
        match metronome_daemon::ops::units::parse_duration(&ecn_threshold) {
            Ok(d) if d.as_nanos() > 0 => {}
            Ok(_) => return Err(invalid("ecnThreshold: must be more than 0")),
            Err(e) => {
                return Err(invalid(format!(
                    "ecnThreshold: {e} in {ecn_threshold:?} (a duration: \"500us\", \"1ms\")"
                )))
            }
        }
        if let Some(ns) = &raw.namespace_bandwidth {
            if ns.namespaces.contains_key("") {
                return Err(invalid(
                    "namespaceBandwidth.namespaces: an entry without a name (a namespace has one)",
                ));
            }
        }
        Ok(NetConf {
            cni_version,
            name,
            socket: raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.into()),
            state_dir: raw.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into()),
            fair: raw.fair.unwrap_or(true),
            ecn: raw.ecn.unwrap_or(false),
            ecn_threshold,
            mtu,
            namespace_bandwidth: raw.namespace_bandwidth,
            bandwidth: raw.runtime_config.and_then(|r| r.bandwidth),
            prev_result: raw.prev_result,
        })
    }

    /// The bandwidth asked for, when it limits either direction.
    pub fn limits(&self) -> Option<Bandwidth> {
        self.bandwidth.filter(Bandwidth::limits_anything)
    }

    /// The limit of the pods of `namespace` together, when it limits either direction: none
    /// without `namespaceBandwidth` or a namespace.
    pub fn namespace_limits(&self, namespace: Option<&str>) -> Option<Bandwidth> {
        let ns = namespace?;
        self.namespace_bandwidth
            .as_ref()
            .map(|n| n.of(ns))
            .filter(Bandwidth::limits_anything)
    }

    /// Whether `cniVersion` has the CHECK command (0.4.0 and later).
    pub fn has_check(&self) -> bool {
        !self.cni_version.starts_with("0.3.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_keys() {
        let c =
            NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"metronome-cni"}"#).unwrap();
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert!(c.fair && !c.ecn);
        assert_eq!(c.mtu, 1500);
        assert_eq!(c.limits(), None);
        let c = NetConf::parse(
            br#"{"cniVersion":"0.4.0","name":"n","type":"t","socket":"/s","stateDir":"/d",
                "fair":false,"ecn":true,"mtu":9000,"unknown":1,
                "runtimeConfig":{"bandwidth":{"egressRate":1000000,"egressBurst":80000}}}"#,
        )
        .unwrap();
        assert_eq!((c.fair, c.ecn, c.mtu), (false, true, 9000));
        assert_eq!(c.limits().unwrap().egress_rate, Some(1_000_000));
        // Rates of 0 limit nothing.
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"t",
                "runtimeConfig":{"bandwidth":{"egressRate":0,"ingressRate":0}}}"#,
        )
        .unwrap();
        assert_eq!(c.limits(), None);
    }

    #[test]
    fn a_namespace_takes_its_entry_in_full_else_the_default() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"t","namespaceBandwidth":{
                "egressRate":1000000000,"ingressRate":500000000,"egressBurst":80000,
                "namespaces":{"batch":{"egressRate":2000000},"kube-system":{}}}}"#,
        )
        .unwrap();
        let team = c.namespace_limits(Some("team")).unwrap();
        assert_eq!(
            (team.egress_rate, team.egress_burst, team.ingress_rate),
            (Some(1_000_000_000), Some(80_000), Some(500_000_000))
        );
        let batch = c.namespace_limits(Some("batch")).unwrap();
        assert_eq!(
            (batch.egress_rate, batch.ingress_rate),
            (Some(2_000_000), None)
        );
        assert_eq!(c.namespace_limits(Some("kube-system")), None);
        assert_eq!(c.namespace_limits(None), None);
        let e = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"t",
                "namespaceBandwidth":{"namespaces":{"":{}}}}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, INVALID_CONFIG);
        assert!(e.details.starts_with("namespaceBandwidth"), "{e}");
    }

    #[test]
    fn errors_have_the_specifications_codes() {
        let code = |s: &str| NetConf::parse(s.as_bytes()).unwrap_err().code;
        assert_eq!(code("not json"), DECODING_FAILURE);
        assert_eq!(code("[1]"), DECODING_FAILURE);
        assert_eq!(
            code(r#"{"cniVersion":"1.0.0","name":"n","type":"t","mtu":"big"}"#),
            DECODING_FAILURE
        );
        assert_eq!(
            code(r#"{"cniVersion":"0.2.0","name":"n","type":"t"}"#),
            INCOMPATIBLE_VERSION
        );
        assert_eq!(code(r#"{"name":"n","type":"t"}"#), INVALID_CONFIG);
        assert_eq!(code(r#"{"cniVersion":"1.0.0","type":"t"}"#), INVALID_CONFIG);
        assert_eq!(
            code(r#"{"cniVersion":"1.0.0","name":"n","type":"t","mtu":20}"#),
            INVALID_CONFIG
        );
        let e =
            NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"t","ecnThreshold":"5"}"#)
                .unwrap_err();
        assert_eq!(e.code, INVALID_CONFIG);
        assert!(e.details.starts_with("ecnThreshold"), "{e}");
    }

    #[test]
    fn an_error_is_written_in_the_configurations_version_when_supported() {
        assert_eq!(error_version(br#"{"cniVersion":"0.4.0"}"#), "0.4.0");
        assert_eq!(error_version(br#"{"cniVersion":"9.9.9"}"#), CURRENT_VERSION);
        assert_eq!(error_version(b"garbage"), CURRENT_VERSION);
    }
}
