//! Fuzz tests of the metrics endpoint's request parser
//! (`metronome_daemon::ops::metrics::http::parse_request`), with bolero, over the committed corpus
//! `crates/daemon/corpus/http/`.
//!
//! Under `cargo test` (stable) bolero's test engine feeds each target a few thousand random
//! inputs (OS-seeded; a failure prints `BOLERO_RANDOM_SEED=...` to replay it). With
//! `cargo bolero test -p metronome-daemon --test http_fuzz <target>` on a nightly toolchain the
//! same targets run under libFuzzer. Corpus files are text: `#` lines are comments (the
//! `# expect: OUTCOME` one gives the parse outcome: `ok`, `incomplete` or a refusal label),
//! the rest is the request with the file's own line ends dropped and `\r`, `\n`, `\t`, `\\` and
//! `\xNN` escapes standing for their bytes. Targets:
//!
//! * `arbitrary_bytes`: any bytes, under a head limit of 8 KiB, 64 bytes and half their length.
//! * `mutated_corpus_seeds`: the corpus requests with random byte flips, insertions and a
//!   truncation.
//! * `generated_requests`: well-formed requests from a specification (method, target, version,
//!   headers, line ends), checked against the outcome the specification calls for.
//!
//! Invariants for every input ([`check_invariants`]): no panic; `incomplete` only below the
//! limit, `too_large` only at or above it; any other outcome depends on the head alone (bytes
//! appended after the input change nothing); a parsed head lies within the input and the
//! limit, its target is visible ASCII, and one byte less of it is incomplete.

mod common;

use bolero::{check, generator::TypeGenerator};
use common::SeedMutation;
use metronome_daemon::ops::metrics::http::{
    parse_request, Method, Request, RequestError, MAX_HEAD_BYTES,
};

/// Random inputs per target under `cargo test`: a few thousand, as the packet parser's fuzz
/// targets (`crates/packet/tests/fuzz.rs`), well under a second here.
const ITERATIONS: usize = 4_000;

/// The outcome's name: `ok`, `incomplete`, or the refusal's label.
fn outcome(r: &Result<Option<Request<'_>>, RequestError>) -> &'static str {
    match r {
        Ok(Some(_)) => "ok",
        Ok(None) => "incomplete",
        Err(e) => e.refusal().label(),
    }
}

fn check_invariants(bytes: &[u8], limit: usize) {
    let result = parse_request(bytes, limit);
    match &result {
        Ok(None) => assert!(
            bytes.len() < limit,
            "incomplete at {} of {limit}",
            bytes.len()
        ),
        Err(RequestError::HeadTooLarge) => assert!(bytes.len() >= limit),
        Ok(Some(r)) => {
            assert!(r.head_bytes <= bytes.len().min(limit), "{r:?}");
            assert!(r.target.bytes().all(|b| b.is_ascii_graphic()), "{r:?}");
            assert_eq!(parse_request(&bytes[..r.head_bytes - 1], limit), Ok(None));
        }
        Err(_) => {}
    }
    if result != Ok(None) {
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(b"\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n");
        let again = parse_request(&longer, limit);
        assert_eq!(outcome(&again), outcome(&result), "{bytes:?}");
        if let (Ok(Some(a)), Ok(Some(b))) = (&result, &again) {
            assert_eq!(a, b);
        }
    }
}

#[test]
fn arbitrary_bytes() {
    check!()
        .with_iterations(ITERATIONS)
        .with_max_len(256)
        .for_each(|bytes: &[u8]| {
            for limit in [MAX_HEAD_BYTES, 64, bytes.len() / 2] {
                check_invariants(bytes, limit);
            }
            // Behind a valid request line, so that the bytes reach the header parser.
            let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
            request.extend_from_slice(bytes);
            check_invariants(&request, MAX_HEAD_BYTES);
        });
}

#[test]
fn every_corpus_file_parses_as_expected() {
    let corpus = common::read_corpus("http");
    assert!(corpus.len() >= 10, "{} corpus files", corpus.len());
    for (path, request, expect) in &corpus {
        let expect = expect
            .as_deref()
            .unwrap_or_else(|| panic!("{path:?}: no `# expect:`"));
        let got = parse_request(request, MAX_HEAD_BYTES);
        assert_eq!(outcome(&got), expect, "{path:?}: {got:?}");
        check_invariants(request, MAX_HEAD_BYTES);
    }
}

#[test]
fn mutated_corpus_seeds() {
    let seeds = common::seeds("http");
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<SeedMutation>()
        .for_each(|m: &SeedMutation| {
            let request = m.apply(&seeds);
            check_invariants(&request, MAX_HEAD_BYTES);
            check_invariants(&request, 64);
        });
}

const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "get", "OPTIONS"];
const TARGETS: [&str; 5] = ["/metrics", "/metrics?x=1&y", "/", "/nope", "*"];
const VERSIONS: [&str; 2] = ["HTTP/1.1", "HTTP/1.0"];

/// One header of a generated request.
#[derive(Clone, Debug, TypeGenerator)]
enum Header {
    Host,
    Accept,
    ContentLength(u64),
    /// 0, 1 or 2, written with 0 to 2 leading zeros.
    ShortContentLength(#[generator(0..3u64)] u64, #[generator(0..3usize)] usize),
    TransferEncoding,
    Pad(#[generator(0..200usize)] usize),
}

/// A well-formed request head.
#[derive(Clone, Debug, TypeGenerator)]
struct RequestSpec {
    method: u8,
    target: u8,
    version: bool,
    #[generator(bolero::produce::<Vec<Header>>().with().len(0..6usize))]
    headers: Vec<Header>,
    /// LF instead of CRLF line ends.
    bare_lf: bool,
    /// Spaces and tabs around header values.
    padded_values: bool,
}

impl RequestSpec {
    fn render(&self) -> String {
        let eol = if self.bare_lf { "\n" } else { "\r\n" };
        let ows = if self.padded_values { " \t " } else { " " };
        let method = METHODS[usize::from(self.method) % METHODS.len()];
        let target = TARGETS[usize::from(self.target) % TARGETS.len()];
        let version = VERSIONS[usize::from(self.version)];
        let mut head = format!("{method} {target} {version}{eol}");
        for h in &self.headers {
            let (name, value) = match h {
                Header::Host => ("Host", "127.0.0.1:9187".to_string()),
                Header::Accept => ("accept", "*/*".to_string()),
                Header::ContentLength(n) => ("Content-Length", n.to_string()),
                Header::ShortContentLength(n, zeros) => {
                    ("content-length", format!("{}{n}", "0".repeat(*zeros)))
                }
                Header::TransferEncoding => ("Transfer-Encoding", "chunked".to_string()),
                Header::Pad(n) => ("X-Pad", "p".repeat(*n)),
            };
            head.push_str(&format!(
                "{name}:{ows}{value}{}{eol}",
                ows.trim_end_matches(' ')
            ));
        }
        head.push_str(eol);
        head
    }

    /// The outcome the specification calls for: a body is refused first, then the method.
    fn expected(&self) -> Result<Method, RequestError> {
        let body = self.headers.iter().any(|h| {
            matches!(h, Header::TransferEncoding)
                || matches!(h, Header::ContentLength(n) | Header::ShortContentLength(n, _) if *n > 0)
        });
        match METHODS[usize::from(self.method) % METHODS.len()] {
            _ if body => Err(RequestError::Body),
            "GET" => Ok(Method::Get),
            "HEAD" => Ok(Method::Head),
            _ => Err(RequestError::MethodNotAllowed),
        }
    }
}

#[test]
fn generated_requests() {
    check!()
        .with_iterations(ITERATIONS)
        .with_type::<RequestSpec>()
        .for_each(|spec: &RequestSpec| {
            let head = spec.render();
            let mut bytes = head.clone().into_bytes();
            bytes.extend_from_slice(b"body bytes that are never read");
            let got = parse_request(&bytes, MAX_HEAD_BYTES);
            match (spec.expected(), got) {
                (Ok(method), Ok(Some(r))) => {
                    assert_eq!(r.method, method, "{head:?}");
                    assert_eq!(r.target, TARGETS[usize::from(spec.target) % TARGETS.len()]);
                    assert_eq!(r.head_bytes, head.len(), "{head:?}");
                }
                (Err(e), Err(got)) => assert_eq!(e, got, "{head:?}"),
                (expected, got) => panic!("{head:?}: expected {expected:?}, got {got:?}"),
            }
            check_invariants(&bytes, MAX_HEAD_BYTES);
            // A head cut anywhere is incomplete.
            let cut = head.len() / 2;
            assert_eq!(
                parse_request(&bytes[..cut], MAX_HEAD_BYTES),
                Ok(None),
                "{head:?}"
            );
        });
}
