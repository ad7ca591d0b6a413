//! The metrics endpoint's HTTP server: the smallest HTTP/1.1 server (RFC 9112) on `std::net`
//! that answers `GET /metrics` and `HEAD /metrics` with the Prometheus text, and bounds
//! everything a client can make it hold: bytes, time and threads. Why it is hand-written, and
//! its bounds in full, are in docs/deploy.md, "The metrics endpoint's HTTP server".
//!
//! The request parser is a pure function, [`parse_request`], fuzzed by
//! `crates/daemon/tests/http_fuzz.rs`. Bounds ([`HttpLimits`]): the head at most
//! [`MAX_HEAD_BYTES`] (`431`), no body (`413`), [`READ_TIMEOUT`], [`WRITE_TIMEOUT`] and
//! [`CONNECTION_DEADLINE`] (`408`), at most [`MAX_CONNECTIONS`] served at once, the oldest idle
//! one giving its place to a new one, `503` when all are answering; `Connection: close` always.
//! Each refusal is counted once per connection as a [`Refusal`]; the accepting thread checks its
//! stop flag every [`ACCEPT_POLL`]. Departures from RFC 9112, all strict: one space between
//! request-line parts, obs-fold, a space before the colon and a bare CR are `400`; `Host` is not
//! required; a version other than 1.0 and 1.1 is `400`, not `505`.

mod connection;
mod refusal;
mod request;

pub use refusal::Refusal;
pub(crate) use refusal::RefusalCounters;
pub use request::{parse_request, Method, Request, RequestError};

use super::Metrics;
use connection::serve_connection;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Largest request line plus headers, bytes: 8 KiB, the default header limit of nginx
/// (`large_client_header_buffers`) and Apache (`LimitRequestLine`); a Prometheus scrape sends
/// about 300 bytes.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Longest wait for one read, 2 s: a scraper sends its whole request at once, and Prometheus'
/// default scrape timeout is 10 s (`scrape_timeout`), so a scrape cut here is retried in time.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for one write, 2 s: the same reasoning as [`READ_TIMEOUT`], for a client that
/// stops reading its response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a connection is served in all, 10 s: Prometheus' default `scrape_timeout`, after
/// which the scraper has given up anyway. Bounds a client that trickles one byte per read
/// timeout.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// Connections served at once, 16: one thread each. A few scrapers (Prometheus, a second
/// Prometheus, `metronome stats`) use one each; the rest is headroom.
pub const MAX_CONNECTIONS: usize = 16;
/// How often the accepting thread checks its stop flag while no connection arrives, 100 ms: a
/// dropped [`super::MetricsServer`] joins within it.
pub const ACCEPT_POLL: Duration = Duration::from_millis(100);
/// How long the accepting thread waits for evicted connections' threads to end before it
/// looks again, and how many times at most (1 ms, 10 times): a burst of idle connections is
/// shed without refusing the scraper among them, and the thread never waits long.
const EVICTION_WAIT: Duration = Duration::from_millis(1);
/// Most waits of [`EVICTION_WAIT`] for one connection (see there).
const EVICTION_WAITS: usize = 10;
/// Bytes read from the socket per call.
const READ_CHUNK: usize = 1024;

/// The bounds of one server ([`super::Metrics::serve_with`]); `Default` gives the constants
/// of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request line plus headers, bytes ([`MAX_HEAD_BYTES`]).
    pub max_head_bytes: usize,
    /// Longest wait for one read ([`READ_TIMEOUT`]).
    pub read_timeout: Duration,
    /// Longest wait for one write ([`WRITE_TIMEOUT`]).
    pub write_timeout: Duration,
    /// Longest a connection is served in all ([`CONNECTION_DEADLINE`]).
    pub connection_deadline: Duration,
    /// Connections served at once ([`MAX_CONNECTIONS`]).
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_head_bytes: MAX_HEAD_BYTES,
            read_timeout: READ_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            connection_deadline: CONNECTION_DEADLINE,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// What the threads of one server share.
struct Shared {
    metrics: Metrics,
    limits: HttpLimits,
    stop: Arc<AtomicBool>,
    /// The connections whose threads run, oldest first.
    slots: Mutex<Vec<Slot>>,
    /// The next connection's id.
    next_id: AtomicU64,
}

/// One connection whose thread runs.
struct Slot {
    id: u64,
    /// A second handle of the connection's socket, to close it when it is evicted.
    stream: TcpStream,
    /// Still reading its request head.
    reading: bool,
    /// Closed to make room ([`Refusal::Idle`]); its thread is ending.
    evicted: bool,
}

impl Shared {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connection `id` has its request head: it can no longer be evicted.
    fn answering(&self, id: u64) {
        if let Some(slot) = self.slots().iter_mut().find(|s| s.id == id) {
            slot.reading = false;
        }
    }

    /// Connection `id`'s thread ends; returns whether it was evicted.
    fn finished(&self, id: u64) -> bool {
        let mut slots = self.slots();
        let Some(k) = slots.iter().position(|s| s.id == id) else {
            return false;
        };
        slots.remove(k).evicted
    }
}

/// Whether a byte waits to be read on `stream` (a non-blocking peek, which leaves the socket's
/// own blocking mode, shared with its thread, alone).
fn has_pending(stream: &TcpStream) -> bool {
    let flags = nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT;
    matches!(nix::sys::socket::recv(stream.as_raw_fd(), &mut [0u8; 1], flags), Ok(n) if n > 0)
}

/// Accepts connections on `listener` until `stop` is set: the body of the server's thread.
pub(crate) fn accept_loop(
    listener: &TcpListener,
    metrics: Metrics,
    limits: HttpLimits,
    stop: Arc<AtomicBool>,
) {
    let shared = Arc::new(Shared {
        metrics,
        limits,
        stop,
        slots: Mutex::new(Vec::new()),
        next_id: AtomicU64::new(0),
    });
    let poll_ms = u16::try_from(ACCEPT_POLL.as_millis()).unwrap_or(u16::MAX);
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!("metrics endpoint: cannot make the listener non-blocking: {e}");
    }
    while !shared.stop.load(Ordering::Acquire) {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(poll_ms)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("metrics endpoint: poll: {e}");
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
        }
        accept_pending(listener, &shared);
    }
}

/// Accepts every connection waiting on the (non-blocking) listener.
fn accept_pending(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => dispatch(stream, shared),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => {
                // Out of file descriptors, or memory: the connection waits in the backlog.
                tracing::warn!("metrics endpoint: accept: {e}");
                std::thread::sleep(ACCEPT_POLL);
                return;
            }
        }
    }
}

/// Hands `stream` to a thread of its own, making room by evicting the oldest connection that
/// has not sent its request, or answers `503` (see the module docs). Only the accepting
/// thread adds slots, so the caps hold.
fn dispatch(stream: TcpStream, shared: &Arc<Shared>) {
    let refusals = &shared.metrics.inner.http_refused;
    let max = shared.limits.max_connections;
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    // Evicted connections' threads end at once (their reads return): give them a moment
    // rather than refusing while a burst of connections is being shed.
    for _ in 0..EVICTION_WAITS {
        let slots = shared.slots();
        if slots.iter().filter(|s| s.evicted).count() < max {
            break;
        }
        drop(slots);
        std::thread::sleep(EVICTION_WAIT);
    }
    {
        let mut slots = shared.slots();
        let evicted = slots.iter().filter(|s| s.evicted).count();
        if slots.len() - evicted >= max {
            let victim = (evicted < max)
                .then(|| {
                    slots
                        .iter_mut()
                        .find(|s| !s.evicted && s.reading && !has_pending(&s.stream))
                })
                .flatten();
            let Some(victim) = victim else {
                drop(slots);
                refuse_now(&stream, Refusal::Busy);
                refusals.count(Refusal::Busy);
                return;
            };
            victim.evicted = true;
            let _ = victim.stream.shutdown(Shutdown::Both);
            refusals.count(Refusal::Idle);
        }
        let Ok(handle) = stream.try_clone() else {
            drop(slots);
            refuse_now(&stream, Refusal::Busy);
            refusals.count(Refusal::Busy);
            return;
        };
        slots.push(Slot {
            id,
            stream: handle,
            reading: true,
            evicted: false,
        });
    }
    let worker = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("metrics-conn".into())
        .spawn(move || {
            let refusal = serve_connection(stream, &worker, id);
            // The stream is closed: free the slot, then count, so that a count seen by a
            // test means the slot is free. An evicted connection was counted when evicted.
            let evicted = worker.finished(id);
            if let (Some(r), false) = (refusal, evicted) {
                worker.metrics.inner.http_refused.count(r);
            }
        });
    if let Err(e) = spawned {
        // The closure, and the stream with it, is dropped: the connection is closed.
        shared.finished(id);
        refusals.count(Refusal::Busy);
        tracing::warn!("metrics endpoint: cannot start a connection thread: {e}");
    }
}

/// Answers `refusal` with one non-blocking write, reads off what the client already sent (so
/// that the close does not reset the connection before the answer is read) and closes.
fn refuse_now(stream: &TcpStream, refusal: Refusal) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    send_now(stream, &refusal.response());
    let _ = stream.shutdown(Shutdown::Write);
    let mut chunk = [0u8; READ_CHUNK];
    let mut drained = 0;
    while drained < MAX_HEAD_BYTES {
        match (&*stream).read(&mut chunk) {
            Ok(n) if n > 0 => drained += n,
            _ => return,
        }
    }
}

/// One non-blocking write of a short response (it fits in a fresh socket's send buffer), for
/// the answers that must not wait on the client.
fn send_now(stream: &TcpStream, response: &[u8]) {
    if stream.set_nonblocking(true).is_ok() {
        let _ = (&*stream).write(response);
    }
}

#[cfg(test)]
mod tests;
