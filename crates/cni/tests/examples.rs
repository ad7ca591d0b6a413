//! The examples of docs/cni.md say what the plugin and the daemon read:
//! `examples/cni/10-metronome.conflist` chains metronome-cni last with the `bandwidth`
//! capability and parses as its configuration, and `examples/cni/daemonset.yaml` carries the same
//! conflist and a daemon configuration whose control socket and `class_dir` are the plugin's
//! `socket` and `stateDir`.

use metronome_cni::netconf::{NetConf, SUPPORTED_VERSIONS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/cni")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn conflist() -> Value {
    serde_json::from_str(&example("10-metronome.conflist")).expect("the conflist is JSON")
}

/// The text of the block scalar `key: |` in `yaml`, its indentation removed.
fn block(yaml: &str, key: &str) -> String {
    let header = format!("{key}: |");
    let mut lines = yaml.lines().skip_while(|l| l.trim() != header);
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no `{header}` in the YAML"));
    let outer = first.len() - first.trim_start().len();
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > outer)
        .collect();
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The configuration a runtime gives metronome-cni from the conflist: its plugin object with the
/// list's `name` and `cniVersion` (CNI specification 1.0.0, "Deriving execution configuration").
fn plugin_conf(list: &Value) -> NetConf {
    let plugins = list["plugins"].as_array().expect("plugins");
    let mut plugin = plugins.last().expect("a plugin").clone();
    plugin["name"] = list["name"].clone();
    plugin["cniVersion"] = list["cniVersion"].clone();
    plugin["runtimeConfig"] = json!({"bandwidth": {"egressRate": 1000000}});
    NetConf::parse(plugin.to_string().as_bytes()).expect("metronome-cni takes its configuration")
}

#[test]
fn the_conflist_chains_metronome_cni_last_with_the_bandwidth_capability() {
    let list = conflist();
    let version = list["cniVersion"].as_str().unwrap();
    assert_eq!(version, "1.0.0");
    assert!(SUPPORTED_VERSIONS.contains(&version));
    let plugins = list["plugins"].as_array().unwrap();
    let types: Vec<&str> = plugins
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["bridge", "metronome-cni"]);
    assert_eq!(plugins[0]["ipam"]["type"], json!("host-local"));
    assert_eq!(plugins[1]["capabilities"], json!({"bandwidth": true}));
    let conf = plugin_conf(&list);
    assert!(conf.limits().is_some());
    assert_eq!(conf.socket, PathBuf::from("/run/metronome/control.sock"));
    assert_eq!(conf.state_dir, PathBuf::from("/var/lib/metronome/cni"));
}

#[test]
fn the_daemonset_carries_the_conflist_and_a_daemon_configuration_that_matches_it() {
    let yaml = example("daemonset.yaml");
    let carried: Value =
        serde_json::from_str(&block(&yaml, "10-metronome.conflist")).expect("JSON");
    assert_eq!(carried, conflist());
    let conf = plugin_conf(&carried);
    let text = block(&yaml, "metronome.toml");
    let daemon: toml::Table = text.parse().expect("the daemon's configuration is TOML");
    assert_eq!(
        daemon["daemon"]["control"].as_str().map(PathBuf::from),
        Some(conf.socket.clone())
    );
    assert_eq!(
        daemon["daemon"]["class_dir"].as_str().map(PathBuf::from),
        Some(conf.state_dir.clone())
    );
    let bridge = carried["plugins"][0]["bridge"].as_str().unwrap();
    let bridges = daemon["interfaces"]["bridges"].as_array().unwrap();
    assert!(
        bridges.iter().any(|b| b.as_str() == Some(bridge)),
        "{bridges:?}"
    );
    // The host paths the plugin and the daemon share are mounted.
    for path in [
        "/opt/cni/bin",
        "/etc/cni/net.d",
        "/var/lib/metronome/cni",
        "/run/metronome",
    ] {
        assert!(
            yaml.contains(&format!("hostPath: {{ path: {path}, ")),
            "no hostPath {path}"
        );
    }
    assert!(yaml.contains("hostNetwork: true"));
}

#[test]
fn the_daemonsets_configuration_is_a_valid_daemon_configuration() {
    let yaml = example("daemonset.yaml");
    let text = block(&yaml, "metronome.toml");
    if let Err(e) = metronome_daemon::Config::from_toml_str(&text, "daemonset.yaml:metronome.toml")
    {
        panic!("{e}");
    }
}
