//! systemd-style readiness notification (`sd_notify(3)`): when `NOTIFY_SOCKET` is set, the
//! daemon sends one datagram per state change to that unix socket (a path, or an abstract
//! name written with a leading `@`):
//!
//! * `READY=1` once the ports are open and the engine (every silo's) is built: the loop is
//!   about to shape (with many classes, building the engine takes a good part of the start);
//! * `RELOADING=1` with `MONOTONIC_USEC=` (the time of the request, as `Type=notify-reload`
//!   requires) when a SIGHUP reload starts, and `READY=1` when it has been applied or refused;
//! * `STOPPING=1` when a stop was requested, before the loop drains its queue.
//!
//! Without `NOTIFY_SOCKET` nothing is sent. A failed send is logged at debug level and ignored:
//! the supervisor's absence never stops the shaper. `examples/metronome.service` is a unit file
//! using it.

use std::io;
use std::os::unix::net::UnixDatagram;

/// The environment variable naming the supervisor's socket.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Sends `state` to `$NOTIFY_SOCKET`, if set. Returns whether a datagram was sent.
pub fn notify(state: &str) -> bool {
    let Some(socket) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
        return false;
    };
    let socket = socket.to_string_lossy();
    match notify_to(&socket, state) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(socket = %socket, error = %e, state, "sd_notify failed");
            false
        }
    }
}

/// Sends `state` to the unix datagram socket `socket`: a path, or an abstract name after `@`.
pub fn notify_to(socket: &str, state: &str) -> io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sender.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            sender.send_to(state.as_bytes(), socket)?;
        }
    }
    Ok(())
}

/// `RELOADING=1` with the `CLOCK_MONOTONIC` time in microseconds, as `Type=notify-reload`
/// requires.
pub fn reloading_state() -> String {
    let usec = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000)
        .unwrap_or(0);
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn states_arrive_on_a_path_socket_and_an_abstract_one() {
        let dir = std::env::temp_dir().join(format!("mtr-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let receiver = UnixDatagram::bind(&path).unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 256];
        for state in ["READY=1", "STOPPING=1"] {
            notify_to(path.to_str().unwrap(), state).unwrap();
            let n = receiver.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], state.as_bytes());
        }
        let reloading = reloading_state();
        notify_to(path.to_str().unwrap(), &reloading).unwrap();
        let n = receiver.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(&buf[..n]).unwrap();
        let usec: u64 = got
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap()
            .parse()
            .unwrap();
        assert!(usec > 0, "{got}");
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("mtr-notify-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_rx = UnixDatagram::bind_addr(&addr).unwrap();
        abstract_rx
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        notify_to(&format!("@{name}"), "READY=1").unwrap();
        let n = abstract_rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        // Nobody listening: an error for the caller, never a panic.
        assert!(notify_to("/nonexistent/mtr-notify.sock", "READY=1").is_err());
    }
}
