//! The `metronome-cni` executable speaks the CNI execution protocol: the environment and stdin
//! in, the result or the error object on stdout, a non-zero exit status on error. The commands
//! themselves are tested in `crates/cni/tests/plugin.rs`.

use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

/// Runs the plugin with `env` (nothing else of this process's `CNI_*`) and `stdin`.
fn plugin(env: &[(&str, &str)], stdin: &str) -> (i32, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_metronome-cni"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CNI_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("metronome-cni runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout:?}"));
    (out.status.code().unwrap_or(-1), value)
}

#[test]
fn version_prints_the_supported_versions() {
    let (status, v) = plugin(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(status, 0);
    assert_eq!(
        v["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0"])
    );
}

#[test]
fn an_error_is_an_object_on_stdout_and_a_non_zero_status() {
    let (status, v) = plugin(
        &[],
        r#"{"cniVersion":"0.4.0","name":"n","type":"metronome-cni"}"#,
    );
    assert_ne!(status, 0);
    assert_eq!(v["code"], json!(4));
    assert_eq!(v["cniVersion"], json!("0.4.0"));
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc"),
        ("CNI_NETNS", "/var/run/netns/x"),
        ("CNI_IFNAME", "eth0"),
    ];
    let (status, v) = plugin(&env, "not json");
    assert_ne!(status, 0);
    assert_eq!(v["code"], json!(6));
}
