//! The control socket's server ([`ControlServer`]): the socket made and bound, a thread
//! accepting connections, at most [`MAX_CONNECTIONS`] served (the oldest idle one giving its
//! place to a new one), each request read whole within [`READ_DEADLINE`] and answered, peers
//! other than root and the daemon's user refused (docs/config.md, "Live classes: the control
//! socket").

use super::{
    protocol, Live, Reply, ReplyError, Request, MAX_CONNECTIONS, READ_DEADLINE, WRITE_TIMEOUT,
};
use crate::ops::metrics::Metrics;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Why the control socket could not be opened (a start error, exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Another daemon listens on the path.
    #[error(
        "control socket {0}: a running daemon listens on it; stop it, or give this one another \
         [daemon] control path (\"\" for none)"
    )]
    InUse(PathBuf),
    /// Something that is not a socket is at the path.
    #[error("control socket {0}: the path exists and is not a socket")]
    NotSocket(PathBuf),
    /// Making the directory, binding, or setting the owner failed.
    #[error("control socket {path}: {op}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        op: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// The listening socket and its thread; dropping it stops the thread and removes the socket.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (see the module docs), owned by `owner` (uid, gid) when given.
    pub fn bind(path: &Path, owner: Option<(u32, u32)>) -> Result<UnixListener, ControlError> {
        let io = |op, source| ControlError::Io {
            path: path.to_path_buf(),
            op,
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(|e| io("making its directory", e))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| io("setting its directory's mode", e))?;
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                        .map_err(|e| io("giving its directory to [daemon] user", e))?;
                }
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
                Ok(_) => return Err(ControlError::InUse(path.to_path_buf())),
                Err(_) => {
                    tracing::info!(path = %path.display(), "replacing a stale control socket");
                    std::fs::remove_file(path).map_err(|e| io("removing a stale socket", e))?;
                }
            },
            Ok(_) => return Err(ControlError::NotSocket(path.to_path_buf())),
            Err(_) => {}
        }
        // The socket is made with mode 0600 (the umask masks the rest while it is bound): no
        // moment where another user may connect to it.
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let bound = UnixListener::bind(path);
        nix::sys::stat::umask(umask);
        let listener = bound.map_err(|e| io("binding", e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io("setting its mode", e))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| io("giving it to [daemon] user", e))?;
        }
        Ok(listener)
    }

    /// Serves `listener` (bound at `path`) on a thread of its own. With `realtime` (`[daemon]
    /// realtime_priority`), that thread and the connections' threads it spawns (which inherit
    /// its policy) run `SCHED_FIFO` one below the loops ([`crate::os::realtime::control_priority`]):
    /// a real-time loop busy on one CPU and ordinary senders on the others would otherwise
    /// leave an operation's validation waiting for milliseconds.
    pub fn serve(
        listener: UnixListener,
        path: &Path,
        live: Arc<Live>,
        realtime: Option<u8>,
    ) -> ControlServer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                crate::os::realtime::ordinary();
                let priority = realtime.map(crate::os::realtime::control_priority);
                crate::os::realtime::enter_logged(priority, "control");
                accept_loop(&listener, &live, &flag)
            })
            .map_err(|e| tracing::error!(error = %e, "the control socket's thread did not start"))
            .ok();
        tracing::info!(path = %path.display(), "control socket");
        ControlServer {
            path: path.to_path_buf(),
            stop,
            thread,
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept; the thread then sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: &UnixListener, live: &Arc<Live>, stop: &AtomicBool) {
    let slots = Arc::new(Slots::default());
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if let Err(refusal) = peer_allowed(&stream) {
            live.metrics.control_refused(refusal.reason);
            refuse_now(&stream, "", &refusal.message);
            continue;
        }
        let Some(id) = slots.admit(&stream, &live.metrics) else {
            let busy = format!(
                "more than {MAX_CONNECTIONS} connections, each answering a request: try again"
            );
            live.metrics.control_refused("busy");
            refuse_now(&stream, "", &busy);
            continue;
        };
        let (conn_live, worker) = (live.clone(), slots.clone());
        let spawned = std::thread::Builder::new()
            .name("control-conn".into())
            .spawn(move || {
                serve_connection(stream, &conn_live, &worker, id);
                worker.finished(id);
            });
        if spawned.is_err() {
            slots.finished(id);
            live.metrics.control_refused("busy");
            tracing::warn!("a control connection was refused: no thread");
        }
    }
}

/// Why a connection or a request was refused: the `reason` label of
/// `metronome_control_refused_total` and the reply's message.
struct Refusal {
    reason: &'static str,
    message: String,
}

/// Refuses a peer whose uid is neither root nor the daemon's own (the `[daemon] user` it
/// switched to, who owns the socket): the socket's mode already keeps others out, this holds
/// when a socket was made reachable otherwise (a lax mode set by hand, a descriptor passed on).
fn peer_allowed(stream: &UnixStream) -> Result<(), Refusal> {
    let own = nix::unistd::geteuid().as_raw();
    match nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials) {
        Ok(cred) if cred.uid() == 0 || cred.uid() == own => Ok(()),
        Ok(cred) => Err(Refusal {
            reason: "peer",
            message: format!(
                "uid {} may not use this socket: only root and the daemon's user (uid {own})",
                cred.uid()
            ),
        }),
        Err(e) => Err(Refusal {
            reason: "peer",
            message: format!("the peer's credentials cannot be read (SO_PEERCRED: {e})"),
        }),
    }
}

/// Writes one refusal line about `field` without waiting on the client (a fresh socket's
/// buffer takes it) and closes the connection.
fn refuse_now(stream: &UnixStream, field: &str, message: &str) {
    let line = Reply::refused(ReplyError::new(field, message)).to_line();
    if stream.set_nonblocking(true).is_ok() {
        let _ = (&*stream).write_all(format!("{line}\n").as_bytes());
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// One connection whose thread runs.
struct Slot {
    id: u64,
    /// A second handle of its socket, to close it when it is evicted.
    stream: UnixStream,
    /// Waiting for a request (not answering one): it may be evicted.
    idle: bool,
    /// Closed to make room; its thread is ending.
    evicted: bool,
}

/// The connections being served, oldest first (see [`Slots::admit`]).
#[derive(Default)]
struct Slots {
    slots: Mutex<Vec<Slot>>,
    next_id: AtomicU64,
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for `stream`, made by evicting the oldest idle connection when
    /// [`MAX_CONNECTIONS`] are served (counted `idle`); `None` when every one is answering a
    /// request (or the evicted ones' threads have not ended: at most as many again).
    fn admit(&self, stream: &UnixStream, metrics: &Metrics) -> Option<u64> {
        let handle = stream.try_clone().ok()?;
        let mut slots = self.lock();
        let evicted = slots.iter().filter(|s| s.evicted).count();
        if slots.len() - evicted >= MAX_CONNECTIONS {
            if evicted >= MAX_CONNECTIONS {
                return None;
            }
            let victim = slots.iter_mut().find(|s| !s.evicted && s.idle)?;
            victim.evicted = true;
            metrics.control_refused("idle");
            refuse_now(
                &victim.stream,
                protocol::CONNECTION_FIELD,
                "closed while idle to make room for a new connection",
            );
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        slots.push(Slot {
            id,
            stream: handle,
            idle: true,
            evicted: false,
        });
        Some(id)
    }

    /// Marks connection `id` idle (waiting for a request) or answering one; `false` when it
    /// was evicted meanwhile.
    fn set_idle(&self, id: u64, idle: bool) -> bool {
        match self.lock().iter_mut().find(|s| s.id == id) {
            Some(slot) if !slot.evicted => {
                slot.idle = idle;
                true
            }
            _ => false,
        }
    }

    fn finished(&self, id: u64) {
        self.lock().retain(|s| s.id != id);
    }
}

/// What one read of a request line gave.
enum Line {
    /// A whole line, without its newline.
    Whole(Vec<u8>),
    /// The connection closed, or failed.
    Closed,
    /// No whole line within [`READ_DEADLINE`].
    Deadline,
    /// More than [`protocol::MAX_REQUEST_LINE`] bytes without a newline.
    TooLong,
}

/// Reads the next line of `stream` into `buffer` (which keeps what follows it), within
/// [`READ_DEADLINE`] of the call.
fn read_line(stream: &mut UnixStream, buffer: &mut Vec<u8>) -> Line {
    let deadline = Instant::now() + READ_DEADLINE;
    let mut scanned = 0;
    loop {
        if let Some(at) = buffer[scanned..].iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=scanned + at).collect();
            return Line::Whole(line[..line.len() - 1].to_vec());
        }
        scanned = buffer.len();
        if buffer.len() > protocol::MAX_REQUEST_LINE {
            return Line::TooLong;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Line::Deadline;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => return Line::Closed,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Line::Deadline
            }
            Err(_) => return Line::Closed,
        }
    }
}

/// Answers the requests of one connection in turn until it closes, is evicted, or sends no
/// whole request within [`READ_DEADLINE`].
fn serve_connection(mut stream: UnixStream, live: &Live, slots: &Slots, id: u64) {
    if stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err() {
        return;
    }
    let mut buffer = Vec::new();
    loop {
        if !slots.set_idle(id, true) {
            return;
        }
        let line = match read_line(&mut stream, &mut buffer) {
            Line::Whole(line) => line,
            Line::Closed => return,
            Line::Deadline => {
                if slots.set_idle(id, false) {
                    let message = format!(
                        "no whole request within {READ_DEADLINE:?}: closed (send each request \
                         as one line)"
                    );
                    live.metrics.control_refused("deadline");
                    refuse_now(&stream, protocol::CONNECTION_FIELD, &message);
                }
                return;
            }
            Line::TooLong => {
                let message = format!(
                    "a request is one line of at most {} bytes",
                    protocol::MAX_REQUEST_LINE
                );
                live.metrics.control_refused("too_long");
                refuse_now(&stream, "", &message);
                return;
            }
        };
        if !slots.set_idle(id, false) {
            return;
        }
        let arrived = Instant::now();
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let reply = match Request::parse_bytes(&line) {
            Ok(request) => live.handle(request, arrived),
            Err(e) => {
                live.metrics.control_refused("malformed");
                Reply::refused(e)
            }
        };
        let sent = writeln!(stream, "{}", reply.to_line()).and_then(|()| stream.flush());
        if sent.is_err() {
            return;
        }
    }
}
