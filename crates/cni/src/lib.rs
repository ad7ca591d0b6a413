//! `metronome-cni`, a chained CNI plugin (CNI specification 1.0.0) that gives a pod the limits of
//! its `runtimeConfig.bandwidth` (the `kubernetes.io/egress-bandwidth` and `ingress-bandwidth`
//! annotations) as two classes of the node's daemon, `metronome run` in attach mode, registered
//! live through its control socket (docs/config.md, "Live classes: the control socket"):
//!
//! * `cni.<id>.<ifname>.egress`, `match = { from = HOST_VETH }`: what the pod sends, shaped
//!   where it leaves the host;
//! * `cni.<id>.<ifname>.ingress`, `match = { to = HOST_VETH }`: what goes to the pod, shaped on
//!   its host veth's way out of the bridge.
//!
//! docs/cni.md is the operator's page: the conflist, the keys, what the daemon needs, the limits
//! and what happens when the daemon is down. The modules:
//!
//! * [`invocation`]: the `CNI_*` environment;
//! * [`netconf`]: the network configuration on stdin;
//! * [`host`]: finding the pod's host veth;
//! * [`classes`]: class names, class objects, the state file the daemon's `class_dir` reads;
//! * [`plugin`]: ADD, DEL, CHECK, VERSION;
//! * [`error`]: the error object and its codes.
//!
//! The executable is `crates/cli/src/bin/metronome-cni.rs`, which calls [`main`].

pub mod classes;
pub mod error;
pub mod host;
pub mod invocation;
pub mod netconf;
pub mod plugin;

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
