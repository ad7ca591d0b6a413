//! `metronome-cni`, a chained CNI plugin (CNI specification 1.0.0) that gives a pod the limits of
//! its `runtimeConfig.bandwidth` (the `kubernetes.io/egress-bandwidth` and `ingress-bandwidth`
//! annotations) as two live classes of the node's daemon in attach mode, registered through its
//! control socket: `cni.<id>.<ifname>.<key>.egress` matching `from` the pod's host veth and
//! `cni.<id>.<ifname>.<key>.ingress` matching `to` it, and with `namespaceBandwidth` one
//! aggregate class per Kubernetes namespace and direction, `cni-ns.<namespace>.<key>.<direction>`,
//! their parent. docs/cni.md is the operator's page.
//!
//! Modules: [`invocation`] (the `CNI_*` environment), [`netconf`] (the configuration on stdin),
//! [`host`] (the pod's host veth), [`classes`] (class names and objects, the state file's name),
//! [`namespace`] (a Kubernetes namespace's aggregates, `namespaceBandwidth`),
//! [`state`] (the state directory the daemon's `class_dir` reads, and its files), [`plugin`] (ADD,
//! DEL, CHECK, VERSION), [`error`] (the error object and its codes). The executable, `crates/cli/src/bin/metronome-cni.rs`, calls [`main`].

pub mod classes;
pub mod error;
pub mod host;
pub mod invocation;
pub mod namespace;
pub mod netconf;
pub mod plugin;
pub mod state;

pub use error::CniError;
pub use plugin::{run, Outcome};

use std::io::{Read, Write};

/// The executable's body: reads the environment and stdin, runs the command, prints its output
/// on stdout (and its notes on stderr), and returns the exit status.
pub fn main() -> i32 {
    let mut stdin = Vec::new();
    let outcome = match std::io::stdin().read_to_end(&mut stdin) {
        Ok(_) => run(|name| std::env::var(name).ok(), &stdin, &host::SystemLinks),
        Err(e) => Outcome {
            stdout: CniError::new(error::IO_FAILURE, "reading stdin", e.to_string())
                .to_json(netconf::CURRENT_VERSION),
            notes: Vec::new(),
            exit_code: 1,
        },
    };
    let mut err = std::io::stderr().lock();
    for note in &outcome.notes {
        let _ = writeln!(err, "{note}");
    }
    let mut out = std::io::stdout().lock();
    if !outcome.stdout.is_empty() {
        let _ = writeln!(out, "{}", outcome.stdout);
    }
    let _ = out.flush();
    outcome.exit_code
}
