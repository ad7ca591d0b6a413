//! Serving one connection on its own thread: read one request head within the read timeout and
//! the connection's deadline, answer it (the metrics, or a refusal), close the sending side and
//! read off what the client still sends so that the close does not reset the connection before
//! the answer is read.

use super::{parse_request, send_now, HttpLimits, Method, Refusal, Request, Shared, READ_CHUNK};
use crate::ops::metrics::Metrics;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Bytes read and discarded after a response, before closing, 64 KiB: a client whose request
/// was refused with bytes still unread (a body it sent anyway) would otherwise get a TCP reset
/// instead of the response (RFC 9112 §9.6). Read within the connection's deadline.
const LINGER_BYTES: usize = 64 * 1024;
/// Content type of the OpenMetrics text format that `prometheus-client` encodes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves one connection: reads one request head, answers, closes. Returns the refusal to
/// count, if any.
pub(super) fn serve_connection(mut stream: TcpStream, shared: &Shared, id: u64) -> Option<Refusal> {
    let (metrics, limits) = (&shared.metrics, &shared.limits);
    let deadline = Instant::now() + limits.connection_deadline;
    if let Err(e) = stream.set_nonblocking(false) {
        tracing::warn!("metrics endpoint: cannot set up a connection: {e}");
        return None;
    }
    let _ = stream.set_nodelay(true);
    let head_read = || shared.answering(id);
    let (response, refusal) = match read_head(&mut stream, metrics, limits, deadline, head_read) {
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
    metrics: &Metrics,
    limits: &HttpLimits,
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
