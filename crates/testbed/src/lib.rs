//! # metronome-testbed
//!
//! What builds and measures topologies around the daemon (`metronome-daemon`): throwaway network
//! namespaces, real kernel TCP through them, and the daemon, kernel qdiscs or a plain forwarder
//! in between. The daemon does not depend on this crate; `metronome demo`, `metronome compare`,
//! the pipeline benchmark's CPU accounting and the real-traffic integration tests do.
//!
//! * [`netns`]: a sender / shaper / receiver "bump in the wire" topology of network namespaces
//!   and veths, `tc` qdiscs for the kernel baselines, per-namespace link counters, cleanup on
//!   drop and on signals; [`netns::attach`]: a host whose own TCP and bridged (or routed)
//!   workloads leave through one uplink, for the daemon attached in place, with the kernel
//!   baselines on that uplink; [`netns::cni`]: a Kubernetes-like node whose pods get their
//!   network from a CNI plugin chain run as libcni runs it.
//! * [`trafficgen`]: kernel TCP (and UDP) flow groups from the sender to sinks in the receiver,
//!   goodput windows and an RTT probe.
//! * [`shaper`]: the daemon's loop ([`shaper::spawn_shaper`]) or its silos
//!   ([`shaper::spawn_daemon`] with `run_silos`) on a thread inside a namespace.
//! * [`demo`]: `metronome demo`, the daemon on a topology with a conformance table, or the same
//!   scenario in `metronome-sim` without the privilege.
//! * [`compare`]: `metronome compare`, the daemon against kernel HTB and TBF on the same path;
//!   [`compare::measure`] holds the rate, deviation and CPU accounting; [`compare::attach`]
//!   the same against `metronome run` attached to a host's uplink (`compare --attach`);
//!   [`compare::cni`] pods limited by `metronome-cni` against the `bandwidth` plugin
//!   (`compare --cni`).
//! * [`forwarder`]: the `recvmmsg`/`sendmmsg` AF_PACKET forwarder (plain, or with virtio-net
//!   headers for super-frames) that `compare --ceiling` measures the daemon against.
//! * [`offloads`]: the offload mode of a `demo` or `compare` run (the host's defaults, or off).
//! * [`flood`]: floods for the attack tests (paced UDP, raw garbage, spoofed 5-tuples), a tap
//!   that counts what the receiver got by class, per-second rates, and the daemon's loop with
//!   its invariants checked while it runs.
//! * [`class_traffic`]: paced raw UDP for thousands of classes (one destination /32 each) and a
//!   receiver that measures every class's rate from its first to its last frame
//!   (`compare --classes`, [`compare::classes`]).
//! * [`load`]: a CPU hog a real-traffic test runs beside itself when asked
//!   (`METRONOME_TEST_CPU_HOG`), and the machine's load and steal time printed with its figures.
//! * [`stall`]: a probe of the machine's own stalls (a real-time thread per CPU that wakes every
//!   millisecond), beside a run whose tail latencies it explains.
//! * [`stats`]: medians, nearest-rank percentiles, means, deviation and Jain's index;
//!   [`scrape`]: the daemon's Prometheus text parsed once and queried by name and label.
//! * [`etcd`]: throwaway etcd clusters (one or more members) on loopback for the tests of what
//!   shares state through etcd; members killed one by one or all at once, removed on drop.
//!
//! Building a topology needs CAP_NET_ADMIN; without it the entry points return
//! [`netns::TopoError::MissingPrivilege`] and the integration tests fail, or skip saying why when
//! the run sets `METRONOME_SKIP_PRIVILEGED=1` ([`netns::skip_unprivileged`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod class_traffic;
pub mod compare;
pub mod demo;
pub mod etcd;
pub mod flood;
pub mod forwarder;
pub mod load;
pub mod netns;
pub mod offloads;
pub mod scrape;
pub mod shaper;
pub mod stall;
pub mod stats;
pub mod trafficgen;
