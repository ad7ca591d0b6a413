//! What the daemon asks of the operating system besides moving frames (the ports themselves
//! are `metronome_io`'s).
//!
//! * [`ports`]: opening the AF_PACKET ports (fanned out per silo), sizing the frame pools,
//!   switching GRO on.
//! * [`privileges`]: once the ports are open, only CAP_NET_RAW and CAP_NET_ADMIN are kept, and
//!   the daemon switches to `[daemon] user`.
//! * [`notify`]: systemd-style readiness, reload and stop notifications (`NOTIFY_SOCKET`).

pub mod notify;
pub mod ports;
pub mod privileges;
