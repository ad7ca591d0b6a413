//! What the endpoint refuses and how it counts it: each [`Refusal`] has its status line and
//! its one-line response, and [`RefusalCounters`] holds
//! `metronome_metrics_http_refused_total{reason}`, one series per reason, present at zero from
//! start-up.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Why the endpoint refused a connection (the `reason` label of
/// `metronome_metrics_http_refused_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `431`: the head exceeded [`super::HttpLimits::max_head_bytes`].
    TooLarge,
    /// `413`: the request declared a body.
    Body,
    /// A read, a write or the connection's deadline ran out (`408` if the head was not complete).
    Timeout,
    /// `503`: [`super::HttpLimits::max_connections`] were being served already (or no thread
    /// could be started for the connection).
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
    pub(super) fn status(self) -> (u16, &'static str) {
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
    pub(super) fn response(self) -> Vec<u8> {
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

    pub(super) fn count(&self, reason: Refusal) {
        self.counters[reason as usize].inc();
    }
}
