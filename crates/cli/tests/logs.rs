//! The daemon's log lines carry no ANSI escape sequence when standard error is not a terminal
//! (`metronome_daemon::ops::service::log_ansi`). `metronome run` is started with its standard error
//! on a pipe and a configuration that makes it log a warning before it fails to open its
//! (missing) interfaces: a `[link]` with `--cores 2`, which it answers with "--cores ignored".
//! Needs no privilege: without CAP_NET_RAW the ports fail to open just the same, exit status 2.

use std::process::{Command, Stdio};

/// `[interfaces]` naming two interfaces that do not exist, and a `[link]`.
fn config(tag: &str) -> String {
    format!(
        "[interfaces]\ninside = \"mtl{tag}i\"\noutside = \"mtl{tag}o\"\n\n\
         [link]\nrate = \"1gbit\"\n"
    )
}

#[test]
fn logs_to_a_pipe_have_no_ansi_escapes() {
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("mtr-logs-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("link.toml");
    // Interface names: at most 15 bytes (IFNAMSIZ - 1).
    std::fs::write(&path, config(&format!("{}", pid % 1_000_000))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_metronome"))
        .args(["run", "--config"])
        .arg(&path)
        .args(["--cores", "2"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}:\n{stderr}", out.status);
    // The warning was logged through the daemon's subscriber, not only the final error line.
    assert!(stderr.contains("--cores ignored"), "{stderr}");
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "an escape sequence in a pipe:\n{stderr:?}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));
}
