//! The request parser: a pure function from the bytes a client sent to a [`Request`] the
//! endpoint answers or the [`RequestError`] it refuses, so that it can be fuzzed
//! (`crates/daemon/tests/http_fuzz.rs`) apart from any socket. Strict RFC 9112 (the departures
//! are listed in the module docs of [`super`]).

use super::Refusal;

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
