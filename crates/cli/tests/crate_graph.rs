//! The crate graph written in ARCHITECTURE.md ("The crates") is the real one: its fenced block of
//! `CRATE -> DEP, DEP, ...` lines lists, for every package of the workspace, the workspace
//! packages among its normal dependencies (not dev- or build-dependencies), exactly as
//! `cargo metadata` reads them from the `Cargo.toml` files.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// One edge: a package and a workspace package it depends on.
type Edge = (String, String);

/// The heading of the section whose first fenced block is the graph.
const SECTION: &str = "## The crates";

/// The workspace root (this crate is `crates/cli`).
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The workspace's packages and the edges between them, from `cargo metadata`.
fn manifest_graph() -> (BTreeSet<String>, BTreeSet<Edge>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages");
    let name = |v: &serde_json::Value| v["name"].as_str().expect("a name").to_string();
    let names: BTreeSet<String> = packages.iter().map(name).collect();
    let mut edges = BTreeSet::new();
    for package in packages {
        let dependencies = package["dependencies"].as_array().expect("dependencies");
        for dependency in dependencies {
            // `kind` is null for a normal dependency, "dev" or "build" otherwise.
            if dependency["kind"].is_null() && names.contains(&name(dependency)) {
                edges.insert((name(package), name(dependency)));
            }
        }
    }
    (names, edges)
}

/// The packages and edges of the first fenced block after [`SECTION`] in `doc`: one line per
/// package, `NAME -> DEP, DEP` (nothing after `->` for a package with no dependency of ours).
fn doc_graph(doc: &str) -> Result<(BTreeSet<String>, BTreeSet<Edge>), String> {
    let section = doc
        .find(SECTION)
        .ok_or_else(|| format!("no section {SECTION:?}"))?;
    let mut lines = doc[section..].lines();
    lines
        .by_ref()
        .find(|l| l.starts_with("```"))
        .ok_or_else(|| format!("no fenced block after {SECTION:?}"))?;
    let mut names = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for line in lines.take_while(|l| !l.starts_with("```")) {
        if line.trim().is_empty() {
            continue;
        }
        let (from, to) = line
            .split_once("->")
            .ok_or_else(|| format!("not `CRATE -> DEP, DEP`: {line:?}"))?;
        let from = from.trim().to_string();
        if !names.insert(from.clone()) {
            return Err(format!("{from} has two lines"));
        }
        for dep in to.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            edges.insert((from.clone(), dep.to_string()));
        }
    }
    Ok((names, edges))
}

/// What differs between the manifests' graph and the doc's, one line per difference; empty if
/// they are the same.
fn differences(
    manifests: &(BTreeSet<String>, BTreeSet<Edge>),
    doc: &(BTreeSet<String>, BTreeSet<Edge>),
) -> Vec<String> {
    let edge = |(a, b): &Edge| format!("{a} -> {b}");
    let mut out = Vec::new();
    for name in manifests.0.difference(&doc.0) {
        out.push(format!("package {name} has no line in ARCHITECTURE.md"));
    }
    for name in doc.0.difference(&manifests.0) {
        out.push(format!(
            "ARCHITECTURE.md has a line for {name}, not a workspace package"
        ));
    }
    for e in manifests.1.difference(&doc.1) {
        out.push(format!(
            "in Cargo.toml, not in ARCHITECTURE.md: {}",
            edge(e)
        ));
    }
    for e in doc.1.difference(&manifests.1) {
        out.push(format!(
            "in ARCHITECTURE.md, not in Cargo.toml: {}",
            edge(e)
        ));
    }
    out
}

#[test]
fn architecture_md_states_the_real_crate_graph() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let written = doc_graph(&doc).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    let real = manifest_graph();
    let differences = differences(&real, &written);
    assert!(
        differences.is_empty(),
        "the crate graph in ARCHITECTURE.md ({SECTION}) differs from the Cargo.toml files \
         (normal dependencies between workspace packages):\n  {}",
        differences.join("\n  ")
    );
}

/// The crates the engine, the simulator and the lab must not pull in, even transitively: a
/// runtime, the etcd client, BPF, netlink and the metrics library are the daemon's.
const DAEMON_ONLY: [&str; 6] = [
    "tokio",
    "etcd-client",
    "aya",
    "netlink-sys",
    "netlink-packet-route",
    "prometheus-client",
];

/// The host's target triple (`rustc -vV`'s `host:` line).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .trim()
        .to_string()
}

/// Every package `root` reaches over normal dependencies (build and dev dependencies left out),
/// by name, from `cargo metadata`'s resolved graph for the host's platform (offline, the
/// packages the build fetched: those of other platforms may be missing from the cache).
fn normal_closure(root: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .arg("--filter-platform")
        .arg(host_triple())
        .arg("--manifest-path")
        .arg(self::root().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let nodes = metadata["resolve"]["nodes"]
        .as_array()
        .expect("a resolve graph");
    let name_of = |id: &str| {
        metadata["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .find(|p| p["id"] == id)
            .and_then(|p| p["name"].as_str())
            .unwrap_or("?")
            .to_string()
    };
    let start = nodes
        .iter()
        .find(|n| name_of(n["id"].as_str().unwrap_or("")) == root)
        .unwrap_or_else(|| panic!("{root} is in the graph"));
    let mut seen = BTreeSet::new();
    let mut stack = vec![start["id"].as_str().expect("an id").to_string()];
    while let Some(id) = stack.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let node = nodes
            .iter()
            .find(|n| n["id"] == id.as_str())
            .expect("a node");
        for dep in node["deps"].as_array().expect("deps") {
            let normal = dep["dep_kinds"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k["kind"].is_null()));
            if normal {
                stack.push(dep["pkg"].as_str().expect("a package id").to_string());
            }
        }
    }
    seen.iter().map(|id| name_of(id)).collect()
}

#[test]
fn the_engine_the_simulator_and_the_lab_run_without_the_daemons_dependencies() {
    for root in ["metronome-engine", "metronome-sim", "metronome-lab"] {
        let closure = normal_closure(root);
        assert!(closure.contains("metronome-core"), "{root}: {closure:?}");
        assert!(
            !closure.contains("metronome-daemon"),
            "{root} needs the daemon"
        );
        for name in DAEMON_ONLY {
            assert!(!closure.contains(name), "{root} pulls in {name}");
        }
    }
    assert!(
        normal_closure("metronome-daemon").contains("tokio"),
        "the check sees tokio"
    );
}

#[test]
fn the_comparison_names_each_differing_edge() {
    let doc = "## The crates\n\n```text\na -> b, c\nb  -> c\nc ->\n```\n";
    let written = doc_graph(doc).expect("parses");
    let edge = |a: &str, b: &str| (a.to_string(), b.to_string());
    let names = |ns: &[&str]| ns.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(written.0, names(&["a", "b", "c"]));
    assert_eq!(
        written.1,
        BTreeSet::from([edge("a", "b"), edge("a", "c"), edge("b", "c")])
    );
    let real = (
        names(&["a", "b", "c", "d"]),
        BTreeSet::from([edge("a", "b"), edge("b", "c"), edge("c", "a")]),
    );
    assert_eq!(
        differences(&real, &written),
        [
            "package d has no line in ARCHITECTURE.md",
            "in Cargo.toml, not in ARCHITECTURE.md: c -> a",
            "in ARCHITECTURE.md, not in Cargo.toml: a -> c",
        ]
    );
    assert!(doc_graph("## The crates\n```\na b\n```\n").is_err());
    assert!(doc_graph("## The crates\n```\na ->\na -> b\n```\n").is_err());
}
