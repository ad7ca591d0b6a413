use super::*;

const LIMIT: usize = MAX_HEAD_BYTES;

fn parse(text: &str) -> Result<Option<Request<'_>>, RequestError> {
    parse_request(text.as_bytes(), LIMIT)
}

#[test]
fn a_scrape_parses_with_crlf_or_lf() {
    let text = "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\nrest";
    let r = parse(text).unwrap().unwrap();
    assert_eq!(r.method, Method::Get);
    assert_eq!(r.target, "/metrics?x=1");
    assert_eq!(r.path(), "/metrics");
    assert_eq!(r.head_bytes, text.len() - "rest".len());
    let r = parse("HEAD /metrics HTTP/1.0\nContent-Length:  0 \n\n").unwrap();
    assert_eq!(r.map(|r| r.method), Some(Method::Head));
}

#[test]
fn an_incomplete_head_asks_for_more_until_the_limit() {
    assert_eq!(parse(""), Ok(None));
    assert_eq!(parse("GET /metrics HTTP/1.1\r\nHost: a\r\n"), Ok(None));
    let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(LIMIT));
    assert_eq!(parse(&long), Err(RequestError::HeadTooLarge));
    // A head that ends exactly at the limit is complete; one byte more is too large.
    let pad = |n: usize| format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "b".repeat(n));
    let exact = pad(LIMIT - pad(0).len());
    assert_eq!(exact.len(), LIMIT);
    assert!(matches!(parse(&exact), Ok(Some(_))));
    let over = pad(LIMIT + 1 - pad(0).len());
    assert_eq!(parse(&over), Err(RequestError::HeadTooLarge));
}

#[test]
fn a_declared_body_is_refused_before_the_method() {
    for text in [
        "GET /metrics HTTP/1.1\r\nContent-Length: 900000000000\r\n\r\n",
        "GET /metrics HTTP/1.1\r\ncontent-length: 99999999999999999999999999\r\n\r\n",
        "POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 1\r\n\r\n",
    ] {
        assert_eq!(parse(text), Err(RequestError::Body), "{text:?}");
    }
    assert_eq!(
        parse("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
        Err(RequestError::Malformed("content-length"))
    );
}

#[test]
fn methods_other_than_get_and_head_are_not_allowed() {
    for m in ["POST", "PUT", "DELETE", "OPTIONS", "get", "PRI"] {
        let text = format!("{m} /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(parse(&text), Err(RequestError::MethodNotAllowed), "{m}");
    }
}

#[test]
fn malformed_heads_name_the_part() {
    let cases = [
        ("\r\n\r\n", "request line"),
        ("GET  /metrics HTTP/1.1\r\n\r\n", "request line"),
        ("GET /metrics\r\n\r\n", "request line"),
        ("G(T /metrics HTTP/1.1\r\n\r\n", "method"),
        ("GET /m\x01 HTTP/1.1\r\n\r\n", "request target"),
        ("GET /metrics HTTP/2.0\r\n\r\n", "version"),
        ("GET /metrics HTTP/1.1\r\nHost a\r\n\r\n", "header line"),
        ("GET /metrics HTTP/1.1\r\nHost : a\r\n\r\n", "header name"),
        (
            "GET /metrics HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
            "folded header line",
        ),
        ("GET /metrics HTTP/1.1\r\nA: b\rc\r\n\r\n", "header value"),
    ];
    for (text, part) in cases {
        assert_eq!(parse(text), Err(RequestError::Malformed(part)), "{text:?}");
    }
}

#[test]
fn every_refusal_has_its_status_and_closes() {
    for r in Refusal::ALL {
        let text = String::from_utf8(r.response()).unwrap();
        let (code, _) = r.status();
        assert!(text.starts_with(&format!("HTTP/1.1 {code} ")), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length = format!("\r\nContent-Length: {}\r\n", body.len());
        assert!(head.contains(&length), "{text}");
    }
    let method = String::from_utf8(Refusal::Method.response()).unwrap();
    assert!(method.contains("\r\nAllow: GET, HEAD\r\n"), "{method}");
}

#[test]
fn refusals_are_registered_at_zero() {
    let m = Metrics::new();
    let text = m.encode();
    for r in Refusal::ALL {
        let line = format!(
            "metronome_metrics_http_refused_total{{reason=\"{}\"}} 0",
            r.label()
        );
        assert!(text.contains(&line), "{line} in\n{text}");
    }
}
