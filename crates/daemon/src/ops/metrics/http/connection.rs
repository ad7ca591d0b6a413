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
    let (response, refusal) = match read_head(&mut stream, limits, deadline, head_read) {
        HeadOutcome::Answer(response, refusal) => (response, refusal),
        HeadOutcome::Gone(refusal) => return refusal,
        HeadOutcome::TimedOut => {
            send_now(&stream, &Refusal::Timeout.response());
            return Some(Refusal::Timeout);
        }
    };
    let written = match response {
        Answer::Bytes(bytes) => write_until(&mut stream, &bytes, deadline, limits.write_timeout),
        Answer::Metrics { body } => {
            write_metrics(&mut stream, metrics, body, deadline, limits.write_timeout)
        }
    };
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

/// A response to send.
enum Answer {
    /// These bytes.
    Bytes(Vec<u8>),
    /// The metrics: the head, then (`body`: a `GET`) the text, encoded and written in pieces
    /// of [`BODY_CHUNK`] bytes ([`write_metrics`]).
    Metrics { body: bool },
}

/// What reading a request head came to.
enum HeadOutcome {
    /// A response to send, and the refusal it stands for.
    Answer(Answer, Option<Refusal>),
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
                return answer(&request);
            }
            Err(e) => {
                head_read();
                let refusal = e.refusal();
                return HeadOutcome::Answer(Answer::Bytes(refusal.response()), Some(refusal));
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
fn answer(request: &Request<'_>) -> HeadOutcome {
    if request.path() != "/metrics" {
        let refusal = Refusal::NotFound;
        return HeadOutcome::Answer(Answer::Bytes(refusal.response()), Some(refusal));
    }
    let body = request.method == Method::Get;
    HeadOutcome::Answer(Answer::Metrics { body }, None)
}

/// Bytes of metrics text encoded before they are written, 64 KiB: what a scrape holds at once
/// however many classes there are (the whole text of 100 000 classes is about 90 MB).
const BODY_CHUNK: usize = 64 * 1024;

/// Writes the metrics' head and, with `body`, their text as it is encoded, [`BODY_CHUNK`] bytes
/// at a time. The length of a `GET`'s body is not known in advance, so its head has no
/// `Content-Length`: the body ends where the connection closes (RFC 9112 §6.3, as every response
/// here is `Connection: close`). A `HEAD`'s head gives the length the text has when it is
/// answered, counted by encoding it without keeping it.
fn write_metrics(
    stream: &mut TcpStream,
    metrics: &Metrics,
    body: bool,
    deadline: Instant,
    write_timeout: Duration,
) -> std::io::Result<()> {
    if !body {
        // A HEAD: the length a GET's body would have now, counted without keeping the text.
        let mut length = ByteCount(0);
        let _ = metrics.encode_into(&mut length);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            length.0
        );
        return write_until(stream, head.as_bytes(), deadline, write_timeout);
    }
    let head =
        format!("HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nConnection: close\r\n\r\n");
    write_until(stream, head.as_bytes(), deadline, write_timeout)?;
    let mut out = ChunkedBody {
        stream,
        buf: String::with_capacity(BODY_CHUNK + READ_CHUNK),
        deadline,
        write_timeout,
        error: None,
    };
    let encoded = metrics.encode_into(&mut out);
    if let Some(e) = out.error.take() {
        return Err(e);
    }
    if encoded.is_err() {
        return Err(ErrorKind::Other.into());
    }
    let ChunkedBody { stream, buf, .. } = out;
    write_until(stream, buf.as_bytes(), deadline, write_timeout)
}

/// A `fmt::Write` that counts the bytes written to it.
struct ByteCount(usize);

impl std::fmt::Write for ByteCount {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// A `fmt::Write` that writes to the socket every [`BODY_CHUNK`] bytes; the first write error
/// is kept and ends the encoding.
struct ChunkedBody<'a> {
    stream: &'a mut TcpStream,
    buf: String,
    deadline: Instant,
    write_timeout: Duration,
    error: Option<std::io::Error>,
}

impl std::fmt::Write for ChunkedBody<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.buf.push_str(s);
        if self.buf.len() >= BODY_CHUNK {
            let sent = write_until(
                self.stream,
                self.buf.as_bytes(),
                self.deadline,
                self.write_timeout,
            );
            self.buf.clear();
            if let Err(e) = sent {
                self.error = Some(e);
                return Err(std::fmt::Error);
            }
        }
        Ok(())
    }
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
