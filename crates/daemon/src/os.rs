//! What the daemon asks of the operating system besides moving frames (the ports themselves
//! are `metronome_io`'s).
//!
//! * [`ports`]: opening the AF_PACKET ports (fanned out per silo), sizing the frame pools,
//!   switching GRO on.
//! * [`privileges`]: once the ports are open, only CAP_NET_RAW and CAP_NET_ADMIN are kept, and
//!   the daemon switches to `[daemon] user`.
//! * [`attach`]: attach mode's BPF hooks and capture veth pairs (over [`netlink`]), and how
//!   they fail open.
//! * [`early`]: the receiving sockets' filter that refuses in the kernel what a class cannot
//!   take, before the loop reads it.
//! * [`pace`]: source pacing, the host's own TCP sockets of a class slowed where they send.
//! * [`realtime`]: the shaping loops' `SCHED_FIFO` priority (`[daemon] realtime_priority`),
//!   allowed through `RLIMIT_RTPRIO` before the privileges go.
//! * [`notify`]: systemd-style readiness, reload and stop notifications (`NOTIFY_SOCKET`).

pub mod attach;
pub mod early;
pub mod netlink;
pub mod notify;
pub mod pace;
pub mod ports;
#[cfg(test)]
pub(crate) mod privileged_tests;
pub mod privileges;
pub mod realtime;
