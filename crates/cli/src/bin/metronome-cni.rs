//! `metronome-cni`, the chained CNI plugin: the logic is the `metronome-cni` library
//! (`crates/cni`); docs/cni.md is its page. The runtime runs it with the `CNI_*` environment and
//! the network configuration on stdin; it prints the result or the error object on stdout.

fn main() {
    std::process::exit(metronome_cni::main());
}
