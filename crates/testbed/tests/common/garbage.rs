//! Random garbage frames for the real-traffic tests (`garbage.rs`, `soak.rs`): the generator of
//! [`metronome_testbed::flood::frames`] (the kinds the parser must refuse and non-IP frames),
//! under the names these tests use.

use metronome_testbed::netns::Namespace;

#[allow(unused_imports)] // each test binary uses a part
pub use metronome_testbed::flood::frames::{garbage as frame, Rng};

/// The MAC address of `iface` in `ns`; panics (failing the test) when it cannot be read.
pub fn mac_of(ns: &Namespace, iface: &str) -> [u8; 6] {
    metronome_testbed::flood::frames::mac_of(ns, iface).unwrap()
}
