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

use super::Metrics;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
/// Bytes read and discarded after a response, before closing, 64 KiB: a client whose request
/// was refused with bytes still unread (a body it sent anyway) would otherwise get a TCP reset
/// instead of the response (RFC 9112 §9.6). Read within the connection's deadline.
const LINGER_BYTES: usize = 64 * 1024;
/// How long the accepting thread waits for evicted connections' threads to end before it
/// looks again, and how many times at most (1 ms, 10 times): a burst of idle connections is
/// shed without refusing the scraper among them, and the thread never waits long.
const EVICTION_WAIT: Duration = Duration::from_millis(1);
/// Most waits of [`EVICTION_WAIT`] for one connection (see there).
const EVICTION_WAITS: usize = 10;
/// Bytes read from the socket per call.
const READ_CHUNK: usize = 1024;
/// Content type of the OpenMetrics text format that `prometheus-client` encodes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

/// The methods the endpoint answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET`: headers and the metrics text.
    Get,
    /// `HEAD`: the headers a `GET` would get.
    Head,
}

/// A request head the endpoint answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// `GET` or `HEAD`.
    pub method: Method,
    /// The request target as sent (visible ASCII), query string included.
    pub target: &'a str,
    /// Bytes of the head, its terminating empty line included; bytes after it are not read.
    pub head_bytes: usize,
}

impl Request<'_> {
    /// The target without its query string.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// Why a request head is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No end of the head within the head limit.
    #[error("request head larger than its limit")]
    HeadTooLarge,
    /// The head declares a body (`Content-Length` above 0, or `Transfer-Encoding`).
    #[error("request declares a body")]
    Body,
    /// A method other than `GET` and `HEAD`.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The head breaks the syntax; the part that does is named.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

impl RequestError {
    /// The refusal this error is counted under.
    pub fn refusal(self) -> Refusal {
        match self {
            RequestError::HeadTooLarge => Refusal::TooLarge,
            RequestError::Body => Refusal::Body,
            RequestError::MethodNotAllowed => Refusal::Method,
            RequestError::Malformed(_) => Refusal::BadRequest,
        }
    }
}

/// Parses the request head at the start of `buf`. `Ok(None)`: the head is not complete yet
/// and `buf` is shorter than `max_head_bytes`, read more. Only the first `max_head_bytes`
/// bytes are looked at, and nothing after the head's terminating empty line.
///
/// Checks, in order: the head ends within the limit (else [`RequestError::HeadTooLarge`]);
/// the request line and every header line are well formed ([`RequestError::Malformed`]);
/// no body is declared ([`RequestError::Body`]); the method is `GET` or `HEAD`
/// ([`RequestError::MethodNotAllowed`]).
pub fn parse_request(
    buf: &[u8],
    max_head_bytes: usize,
) -> Result<Option<Request<'_>>, RequestError> {
    let window = &buf[..buf.len().min(max_head_bytes)];
    let Some(head_bytes) = head_end(window) else {
        return if buf.len() >= max_head_bytes {
            Err(RequestError::HeadTooLarge)
        } else {
            Ok(None)
        };
    };
    let mut lines = window[..head_bytes].split(|&b| b == b'\n').map(strip_cr);
    let (method, target) = parse_request_line(lines.next().unwrap_or(b""))?;
    let mut body = false;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = parse_header_line(line)?;
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            body = true;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                return Err(RequestError::Malformed("content-length"));
            }
            body |= value.iter().any(|&d| d != b'0');
        }
    }
    if body {
        return Err(RequestError::Body);
    }
    let method = match method {
        b"GET" => Method::Get,
        b"HEAD" => Method::Head,
        _ => return Err(RequestError::MethodNotAllowed),
    };
    Ok(Some(Request {
        method,
        target,
        head_bytes,
    }))
}

/// The length of the head up to and including its first empty line (LF or CRLF), if any.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b == b'\n' {
            if strip_cr(&buf[start..i]).is_empty() {
                return Some(i + 1);
            }
            start = i + 1;
        }
    }
    None
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `method SP request-target SP HTTP-version`, one space each (RFC 9112 §3).
fn parse_request_line(line: &[u8]) -> Result<(&[u8], &str), RequestError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RequestError::Malformed("request line"));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(RequestError::Malformed("method"));
    }
    if target.is_empty() || !target.iter().all(u8::is_ascii_graphic) {
        return Err(RequestError::Malformed("request target"));
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(RequestError::Malformed("version"));
    }
    // Visible ASCII is UTF-8.
    let target =
        std::str::from_utf8(target).map_err(|_| RequestError::Malformed("request target"))?;
    Ok((method, target))
}

/// `field-name ":" OWS field-value OWS` (RFC 9112 §5); returns the name and the trimmed value.
fn parse_header_line(line: &[u8]) -> Result<(&[u8], &[u8]), RequestError> {
    if line.starts_with(b" ") || line.starts_with(b"\t") {
        return Err(RequestError::Malformed("folded header line"));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(RequestError::Malformed("header line"))?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(RequestError::Malformed("header name"));
    }
    // Field values: visible ASCII, space, tab and obs-text (bytes 0x80 and up).
    if !value
        .iter()
        .all(|&b| b == b' ' || b == b'\t' || b.is_ascii_graphic() || b >= 0x80)
    {
        return Err(RequestError::Malformed("header value"));
    }
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |e| e + 1);
    Ok((name, &value[start..end]))
}

/// A `tchar` of RFC 9110 §5.6.2: the characters of a method or a header name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why the endpoint refused a connection (the `reason` label of
/// `metronome_metrics_http_refused_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `431`: the head exceeded [`HttpLimits::max_head_bytes`].
    TooLarge,
    /// `413`: the request declared a body.
    Body,
    /// A read, a write or the connection's deadline ran out (`408` if the head was not complete).
    Timeout,
    /// `503`: [`HttpLimits::max_connections`] were being served already (or no thread could be
    /// started for the connection).
    Busy,
    /// `400`: a malformed head, or a connection closed in the middle of its head.
    BadRequest,
    /// `405`: a method other than `GET` and `HEAD`.
    Method,
    /// `404`: a path other than `/metrics`.
    NotFound,
    /// No answer: the connection had not sent its request when every slot was taken, and was
    /// closed to make room for a new one.
    Idle,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 8] = [
        Refusal::TooLarge,
        Refusal::Body,
        Refusal::Timeout,
        Refusal::Busy,
        Refusal::BadRequest,
        Refusal::Method,
        Refusal::NotFound,
        Refusal::Idle,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::Body => "body",
            Refusal::Timeout => "timeout",
            Refusal::Busy => "busy",
            Refusal::BadRequest => "bad_request",
            Refusal::Method => "method",
            Refusal::NotFound => "not_found",
            Refusal::Idle => "idle",
        }
    }

    /// The status line's code and reason phrase.
    fn status(self) -> (u16, &'static str) {
        match self {
            Refusal::TooLarge => (431, "Request Header Fields Too Large"),
            Refusal::Body => (413, "Content Too Large"),
            Refusal::Timeout => (408, "Request Timeout"),
            Refusal::Busy => (503, "Service Unavailable"),
            Refusal::BadRequest => (400, "Bad Request"),
            Refusal::Method => (405, "Method Not Allowed"),
            Refusal::NotFound => (404, "Not Found"),
            // Never sent: an idle connection is closed without an answer.
            Refusal::Idle => (408, "Request Timeout"),
        }
    }

    /// The whole response: a status line, `Connection: close` and a one-line text body.
    fn response(self) -> Vec<u8> {
        let (code, phrase) = self.status();
        let allow = if self == Refusal::Method {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        };
        let body = format!("{}\n", phrase.to_ascii_lowercase());
        format!(
            "HTTP/1.1 {code} {phrase}\r\n{allow}Content-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// `{reason="..."}` of the refusal counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabel {
    reason: &'static str,
}

/// The counters of `metronome_metrics_http_refused_total`, one per [`Refusal`], all present
/// from start-up at zero.
#[derive(Clone, Debug)]
pub(crate) struct RefusalCounters {
    family: Family<RefusalLabel, Counter>,
    counters: [Counter; Refusal::ALL.len()],
}

impl Default for RefusalCounters {
    fn default() -> Self {
        let family = Family::<RefusalLabel, Counter>::default();
        let counters = Refusal::ALL.map(|reason| {
            let label = RefusalLabel {
                reason: reason.label(),
            };
            family.get_or_create(&label).clone()
        });
        RefusalCounters { family, counters }
    }
}

impl RefusalCounters {
    /// Registers the family in `r`.
    pub(crate) fn register(&self, r: &mut Registry) {
        let help = "Connections the metrics endpoint refused, by reason (too_large, body, \
                    timeout, busy, bad_request, method, not_found, idle)";
        r.register("metrics_http_refused", help, self.family.clone());
    }

    fn count(&self, reason: Refusal) {
        self.counters[reason as usize].inc();
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

/// Serves one connection: reads one request head, answers, closes. Returns the refusal to
/// count, if any.
fn serve_connection(mut stream: TcpStream, shared: &Shared, id: u64) -> Option<Refusal> {
    let (metrics, limits) = (&shared.metrics, &shared.limits);
    let deadline = Instant::now() + limits.connection_deadline;
    if let Err(e) = stream.set_nonblocking(false) {
        tracing::warn!("metrics endpoint: cannot set up a connection: {e}");
        return None;
    }
    let _ = stream.set_nodelay(true);
    let head_read = || shared.answering(id);
    let (response, refusal) = match read_head(&mut stream, (metrics, limits), deadline, head_read) {
        HeadOutcome::Answer(response, refusal) => (response, refusal),
        HeadOutcome::Gone(refusal) => return refusal,
        HeadOutcome::TimedOut => {
            send_now(&stream, &Refusal::Timeout.response());
            return Some(Refusal::Timeout);
        }
    };
    let written = write_until(&mut stream, &response, deadline, limits.write_timeout);
    let refusal = match written {
        Ok(()) => refusal,
        Err(e) if is_timeout(&e) => refusal.or(Some(Refusal::Timeout)),
        Err(e) => {
            tracing::debug!("metrics endpoint: writing the response: {e}");
            refusal
        }
    };
    linger(&mut stream, deadline, limits.read_timeout);
    refusal
}

/// What reading a request head came to.
enum HeadOutcome {
    /// A response to send, and the refusal it stands for.
    Answer(Vec<u8>, Option<Refusal>),
    /// The client closed or reset the connection; a refusal if it had sent part of a head.
    Gone(Option<Refusal>),
    /// A read or the deadline ran out.
    TimedOut,
}

/// Reads a request head and makes its answer; calls `head_read` as soon as the head is
/// complete or refused (before the metrics are encoded or the refusal is sent), so that the
/// connection is no longer evicted: an evicted connection gets no answer and is counted
/// `idle` only.
fn read_head(
    stream: &mut TcpStream,
    (metrics, limits): (&Metrics, &HttpLimits),
    deadline: Instant,
    head_read: impl FnOnce(),
) -> HeadOutcome {
    let mut buf = Vec::with_capacity(READ_CHUNK);
    let mut chunk = [0u8; READ_CHUNK];
    loop {
        match parse_request(&buf, limits.max_head_bytes) {
            Ok(Some(request)) => {
                head_read();
                return answer(&request, metrics);
            }
            Err(e) => {
                head_read();
                let refusal = e.refusal();
                return HeadOutcome::Answer(refusal.response(), Some(refusal));
            }
            Ok(None) => {}
        }
        let Some(timeout) = time_left(deadline, limits.read_timeout) else {
            return HeadOutcome::TimedOut;
        };
        if let Err(e) = stream.set_read_timeout(Some(timeout)) {
            tracing::warn!("metrics endpoint: cannot set a read timeout: {e}");
            return HeadOutcome::Gone(None);
        }
        // Never more than the head limit: `parse_request` refuses a full buffer.
        let want = limits
            .max_head_bytes
            .saturating_sub(buf.len())
            .clamp(1, READ_CHUNK);
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return HeadOutcome::Gone((!buf.is_empty()).then_some(Refusal::BadRequest)),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return HeadOutcome::TimedOut,
            Err(_) => return HeadOutcome::Gone((!buf.is_empty()).then_some(Refusal::BadRequest)),
        }
    }
}

/// The response to a well-formed `GET` or `HEAD`.
fn answer(request: &Request<'_>, metrics: &Metrics) -> HeadOutcome {
    if request.path() != "/metrics" {
        return HeadOutcome::Answer(Refusal::NotFound.response(), Some(Refusal::NotFound));
    }
    let body = metrics.encode();
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if request.method == Method::Get {
        response.extend_from_slice(body.as_bytes());
    }
    HeadOutcome::Answer(response, None)
}

/// Writes all of `bytes`, each write waiting at most `write_timeout` and all of them ending by
/// `deadline`.
fn write_until(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
    write_timeout: Duration,
) -> std::io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let timeout = time_left(deadline, write_timeout).ok_or(ErrorKind::TimedOut)?;
        stream.set_write_timeout(Some(timeout))?;
        match stream.write(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Closes the sending side, then reads and discards what the client still sends (at most
/// [`LINGER_BYTES`], until it closes, a read times out or the deadline passes), so that unread
/// bytes do not turn the close into a reset that destroys the response.
fn linger(stream: &mut TcpStream, deadline: Instant, read_timeout: Duration) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let mut chunk = [0u8; READ_CHUNK];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let Some(timeout) = time_left(deadline, read_timeout) else {
            return;
        };
        if stream.set_read_timeout(Some(timeout)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The time to `deadline`, at most `cap`; `None` once it has passed.
fn time_left(deadline: Instant, cap: Duration) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then(|| left.min(cap))
}

/// A socket timeout: `WouldBlock` on Linux (EAGAIN), `TimedOut` elsewhere.
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests;
