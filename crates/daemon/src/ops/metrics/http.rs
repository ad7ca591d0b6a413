//! The metrics endpoint's HTTP server: the smallest HTTP/1.1 server (RFC 9112) on `std::net`
//! that answers `GET /metrics` and `HEAD /metrics` with the Prometheus text, and bounds
//! everything a client can make it hold: bytes, time and threads.
//!
//! **Why hand-written.** The endpoint has one document and one kind of client, a scraper, so the
//! whole protocol it needs is: read one request head, answer, close. The HTTP servers that do
//! not need an async runtime (`tiny_http`, and `rouille` on top of it) allocate a declared
//! request body up front (a `Content-Length: 900000000000` aborts the process), set no socket
//! timeouts (a client that declares a body and sends none holds the serving thread forever)
//! and bound neither the head nor the connections; `hyper` and the servers built on it need
//! `tokio`, a runtime the daemon has no other use for. Here the request parser is a pure
//! function, [`parse_request`] (bytes in, a request or a typed [`RequestError`] out), fuzzed by
//! `crates/daemon/tests/http_fuzz.rs`, and the socket code around it is a few small functions.
//!
//! **Bounds** ([`HttpLimits`], defaults in the constants below):
//! * the request line and headers together: [`MAX_HEAD_BYTES`]; beyond, `431`;
//! * no request body: a `Content-Length` above 0 or any `Transfer-Encoding` is answered `413`
//!   without reading the body;
//! * every read waits at most [`READ_TIMEOUT`], every write [`WRITE_TIMEOUT`], and a connection
//!   lives at most [`CONNECTION_DEADLINE`] in all; a request head not complete in time is
//!   answered `408` and closed;
//! * at most [`MAX_CONNECTIONS`] connections are served at once, each on a thread of its own.
//!   When all are taken, a new connection takes the place of the oldest one that has not sent
//!   its request yet (no complete head and no byte waiting to be read): that one is closed
//!   without an answer and counted `idle`, so idle or trickling clients cannot lock a scraper,
//!   which sends its request at once, out (Envoy's overload manager sheds the same way). When
//!   every connection is being answered (or as many are still closing), the new one is answered
//!   `503` by the accepting thread with one non-blocking write and closed: at most twice
//!   [`MAX_CONNECTIONS`] threads ever run;
//! * only `GET` and `HEAD` of `/metrics` (any query string) are answered `200`; another path
//!   gets `404`, another method `405`, a malformed head `400`;
//! * every response carries `Connection: close` and the connection is closed after it (no
//!   keep-alive, no pipelining).
//!
//! Every refusal is counted once per connection, under the first reason it met, in
//! `metronome_metrics_http_refused_total{reason}` ([`Refusal`]). A connection closed before it
//! sent a byte made no request and is not counted. The accepting thread checks its stop flag
//! every [`ACCEPT_POLL`]; connections being served when it stops end within their deadline.
//!
//! Departures from RFC 9112, all on the strict side: request-line parts are separated by exactly
//! one space; header lines folded onto the next line (obs-fold), a space before the colon and a
//! bare CR are `400`; a `Host` header is not required (a scraper that omits it still gets its
//! metrics); an HTTP version other than 1.0 and 1.1 is `400` rather than `505`.

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
