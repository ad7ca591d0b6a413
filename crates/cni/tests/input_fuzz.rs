//! Fuzz tests of the plugin's input: the network configuration on stdin
//! (`metronome_cni::netconf::NetConf::parse`, `error_version`) and the `CNI_*` environment
//! (`metronome_cni::invocation::Invocation::from_env`), with bolero, over the committed corpus
//! `crates/cni/corpus/`.
//!
//! Under `cargo test` (stable) bolero's test engine feeds each target a few thousand random
//! inputs (OS-seeded; a failure prints `BOLERO_RANDOM_SEED=...` to replay it). With
//! `cargo bolero test -p metronome-cni --test input_fuzz <target>` on a nightly toolchain the
//! same targets run under libFuzzer. The corpus: `corpus/netconf/*.json`, each a configuration
//! as a runtime writes it on stdin, and `corpus/env/*.env`, each an environment (`KEY=VALUE`
//! lines); a file's name starts with its expected outcome, `ok.` or `errorN.` (the CNI error
//! code N). Targets:
//!
//! * `arbitrary_stdin`: any bytes as the configuration.
//! * `mutated_netconf_seeds`: the corpus configurations with random byte flips, insertions and
//!   a truncation.
//! * `arbitrary_environment`: each variable unset, a corpus value, or any text; `CNI_COMMAND`
//!   one of the commands or any text.
//!
//! Invariants for every input: no panic; an error is a CNI error object that is JSON with the
//! specification's keys; a configuration taken has a supported version (the one an error
//! object would be written in) and an MTU in range, and its classes (one for each direction it
//! or the pod's namespace limits, a pod's `parent` one of the namespace's aggregates) have names
//! the daemon's rule takes; an environment taken names a pod whose class names, and whose
//! namespace's aggregate names, the daemon's rule takes and whose state file name has no `/`
//! and no leading `.`.

use bolero::{check, generator::TypeGenerator};
use metronome_cni::classes::{self, Direction};
use metronome_cni::invocation::{Command, Invocation, MAX_IFNAME};
use metronome_cni::namespace;
use metronome_cni::netconf::{self, NetConf, MTU_RANGE, SUPPORTED_VERSIONS};
use metronome_cni::CniError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Random inputs per target under `cargo test`: a few thousand, as the daemon's fuzz targets
/// (`crates/daemon/tests/http_fuzz.rs`).
const ITERATIONS: usize = 4_000;
/// The daemon's longest class name in bytes (`crates/config/src/validate/class.rs`).
const MAX_CLASS_NAME: usize = 64;

/// The namespaces a configuration's classes are checked for: none, a plain one, one of the
/// corpus's overrides and one of odd characters.
const NAMESPACES: [Option<&str>; 4] = [None, Some("team-a"), Some("batch"), Some("a b/é;..")];

/// The outcome's name: `ok` or `errorN`.
fn outcome<T>(r: &Result<T, CniError>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => format!("error{}", e.code),
    }
}

/// The error object of `e` is JSON with the specification's keys.
fn check_error(e: &CniError, stdin: &[u8]) {
    let json = e.to_json(netconf::error_version(stdin));
    let v: serde_json::Value = serde_json::from_str(&json).expect("the error object is JSON");
    assert_eq!(v["code"], serde_json::json!(e.code), "{json}");
    assert!(
        v["cniVersion"].is_string() && v["msg"].is_string(),
        "{json}"
    );
}

/// A class name the daemon takes: 1 to 64 of `A-Za-z0-9_-.`.
fn check_class_name(name: &str) {
    assert!(!name.is_empty() && name.len() <= MAX_CLASS_NAME, "{name}");
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')),
        "{name}"
    );
}

fn check_stdin(stdin: &[u8]) -> Result<NetConf, CniError> {
    let parsed = NetConf::parse(stdin);
    match &parsed {
        Err(e) => check_error(e, stdin),
        Ok(conf) => {
            assert!(SUPPORTED_VERSIONS.contains(&conf.cni_version.as_str()));
            assert_eq!(netconf::error_version(stdin), conf.cni_version);
            assert!(MTU_RANGE.contains(&conf.mtu));
            for ns in NAMESPACES {
                let pod = ("ab-c", "d", "veth1");
                let wanted = namespace::pod_classes(conf, pod, ns);
                let limited = conf.limits().is_some() || conf.namespace_limits(ns).is_some();
                assert_eq!(wanted.is_empty(), !limited);
                let aggregates = namespace::wanted_aggregates(conf, ns);
                assert_eq!(aggregates.is_empty(), conf.namespace_limits(ns).is_none());
                for class in &aggregates {
                    check_class_name(class["name"].as_str().expect("a name"));
                    assert!(class["name"]
                        .as_str()
                        .unwrap()
                        .starts_with(namespace::NS_PREFIX));
                }
                for class in &wanted {
                    check_class_name(class["name"].as_str().expect("a name"));
                    let change = classes::as_change(class);
                    assert!(change.contains_key("backpressure") && change.contains_key("parent"));
                    // A parent is one of the aggregates.
                    if let Some(parent) = class.get("parent") {
                        assert!(aggregates.iter().any(|a| &a["name"] == parent), "{class:?}");
                    }
                }
            }
        }
    }
    parsed
}

fn check_env(env: &BTreeMap<String, String>) -> Result<Invocation, CniError> {
    let parsed = Invocation::from_env(|k| env.get(k).cloned());
    match &parsed {
        Err(e) => check_error(e, b""),
        Ok(inv) if inv.command == Command::Version => {}
        Ok(inv) => {
            assert!(!inv.container_id.is_empty());
            assert!(!inv.ifname.is_empty() && inv.ifname.len() <= MAX_IFNAME);
            for d in Direction::BOTH {
                check_class_name(&classes::class_name(&inv.container_id, &inv.ifname, d));
                if let Some(ns) = &inv.pod_namespace {
                    check_class_name(&namespace::aggregate_name(ns, d));
                }
            }
            let file = classes::state_name(&inv.container_id, &inv.ifname);
            assert!(!file.contains('/') && !file.starts_with('.'), "{file}");
            assert!(file.ends_with(".json"), "{file}");
        }
    }
    parsed
}

fn corpus(kind: &str, ext: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// The expected outcome in a corpus file's name: what comes before its first `.`.
fn expected(path: &Path) -> String {
    let name = path.file_name().unwrap().to_string_lossy();
    name.split('.').next().unwrap().to_owned()
}

/// An environment file: `KEY=VALUE` lines.
fn env_of(bytes: &[u8]) -> BTreeMap<String, String> {
    std::str::from_utf8(bytes)
        .expect("an environment file is text")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn every_corpus_file_parses_as_expected() {
    let confs = corpus("netconf", "json");
    assert!(confs.len() >= 20, "{} netconf files", confs.len());
    for (path, stdin) in &confs {
        let got = check_stdin(stdin);
        assert_eq!(outcome(&got), expected(path), "{path:?}: {got:?}");
    }
    let envs = corpus("env", "env");
    assert!(envs.len() >= 12, "{} env files", envs.len());
    for (path, bytes) in &envs {
        let got = check_env(&env_of(bytes));
        assert_eq!(outcome(&got), expected(path), "{path:?}: {got:?}");
    }
    // Both outcomes are in each corpus.
    for files in [&confs, &envs] {
        assert!(files.iter().any(|(p, _)| expected(p) == "ok"));
        assert!(files.iter().any(|(p, _)| expected(p) != "ok"));
    }
}

#[test]
fn arbitrary_stdin() {
    check!()
        .with_iterations(ITERATIONS)
        .with_max_len(512)
        .for_each(|bytes: &[u8]| {
            let _ = check_stdin(bytes);
        });
}

/// A mutation of one committed corpus configuration.
#[derive(Clone, Debug, TypeGenerator)]
struct SeedMutation {
    seed: u16,
    #[generator(bolero::produce::<Vec<(u16, u8)>>().with().len(0..6usize))]
    flips: Vec<(u16, u8)>,
    #[generator(bolero::produce::<Vec<(u16, u8)>>().with().len(0..4usize))]
    inserts: Vec<(u16, u8)>,
    /// Below 0x4000 (one time in four): truncate to `truncate % (len + 1)` bytes.
    truncate: u16,
}

#[test]
fn mutated_netconf_seeds() {
    let seeds: Vec<Vec<u8>> = corpus("netconf", "json")
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| !b.is_empty())
        .collect();
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<SeedMutation>()
        .for_each(|m: &SeedMutation| {
            let mut stdin = seeds[usize::from(m.seed) % seeds.len()].clone();
            for &(at, xor) in &m.flips {
                let len = stdin.len();
                stdin[usize::from(at) % len] ^= xor;
            }
            for &(at, byte) in &m.inserts {
                let at = usize::from(at) % (stdin.len() + 1);
                stdin.insert(at, byte);
            }
            if m.truncate < 0x4000 {
                stdin.truncate(usize::from(m.truncate) % (stdin.len() + 1));
            }
            let _ = check_stdin(&stdin);
        });
}

/// One variable of a generated environment.
#[derive(Clone, Debug, TypeGenerator)]
enum Value {
    Unset,
    /// The value of this variable in corpus file `n` (unset when it has none).
    Seed(u8),
    Text(String),
}

/// A generated environment: the six variables.
#[derive(Clone, Debug, TypeGenerator)]
struct EnvSpec {
    /// Below 200: one of the four commands; else `command_text`.
    command: u8,
    command_text: String,
    container_id: Value,
    netns: Value,
    ifname: Value,
    args: Value,
    path: Value,
}

const COMMANDS: [&str; 4] = ["ADD", "DEL", "CHECK", "VERSION"];

#[test]
fn arbitrary_environment() {
    let seeds: Vec<BTreeMap<String, String>> = corpus("env", "env")
        .iter()
        .map(|(_, b)| env_of(b))
        .collect();
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<EnvSpec>()
        .for_each(|spec: &EnvSpec| {
            let mut env = BTreeMap::new();
            let command = if spec.command < 200 {
                COMMANDS[usize::from(spec.command) % COMMANDS.len()].to_owned()
            } else {
                spec.command_text.clone()
            };
            env.insert("CNI_COMMAND".to_owned(), command);
            for (key, value) in [
                ("CNI_CONTAINERID", &spec.container_id),
                ("CNI_NETNS", &spec.netns),
                ("CNI_IFNAME", &spec.ifname),
                ("CNI_ARGS", &spec.args),
                ("CNI_PATH", &spec.path),
            ] {
                let v = match value {
                    Value::Unset => None,
                    Value::Seed(n) => seeds[usize::from(*n) % seeds.len()].get(key).cloned(),
                    Value::Text(t) => Some(t.clone()),
                };
                if let Some(v) = v {
                    env.insert(key.to_owned(), v);
                }
            }
            let _ = check_env(&env);
        });
}
