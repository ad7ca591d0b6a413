//! The metrics endpoint against hostile local clients, on 127.0.0.1 with port 0
//! (`crates/daemon/src/ops/metrics/http.rs`): a declared huge body, a stalled and a trickling
//! request, an oversized head, a thousand idle connections, wrong methods and paths; after each,
//! the server still answers a scrape and the refusal is counted under its reason. Then the
//! bounds of `metronome stats`' scrape against servers that answer too much or too slowly.
//!
//! No assertion is on speed. Waits are bounded by generous guards (a read timeout of
//! [`GUARD`], a polling loop of at most [`GUARD`]) that only turn a hang into a failure.

use metronome_daemon::ops::metrics::MetricsServer;
use metronome_daemon::ops::metrics::{scrape, scrape_bounded, HttpLimits, Metrics, MetricsError};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Longest any test waits for something that must happen: turns a hang into a failure.
const GUARD: Duration = Duration::from_secs(60);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Limits short enough for a test to see them run out.
fn short_limits() -> HttpLimits {
    HttpLimits {
        max_head_bytes: 1024,
        read_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_millis(300),
        connection_deadline: Duration::from_secs(1),
        max_connections: 4,
    }
}

fn serve(limits: HttpLimits) -> (Metrics, MetricsServer) {
    let m = Metrics::new();
    m.class("bulk").sent(3, 4_500);
    let server = m
        .serve_with(loopback(), limits, || {})
        .expect("bind loopback");
    (m, server)
}

/// The value of `metronome_metrics_http_refused_total{reason}`.
fn refused(m: &Metrics, reason: &str) -> u64 {
    let prefix = format!("metronome_metrics_http_refused_total{{reason=\"{reason}\"}} ");
    let text = m.encode();
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix));
    line.unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
        .parse()
        .expect("counter value")
}

/// Sends `request` and reads the response to its end (the server closes after it).
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(GUARD)).unwrap();
    s.write_all(request).expect("send");
    read_all(&mut s)
}

fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        // A reset after the response was read still leaves the response.
        Err(e) if e.kind() == ErrorKind::ConnectionReset && !out.is_empty() => {}
        Err(e) => panic!("reading the response: {e} (after {out:?})"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn assert_scrape_works(server: &MetricsServer) {
    let body = scrape(server.addr()).expect("scrape after the hostile client");
    assert!(
        body.contains(r#"metronome_class_bytes_total{class="bulk"} 4500"#),
        "{body}"
    );
}

/// Polls `f` until it holds, at most [`GUARD`].
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < GUARD, "{what}: not within {GUARD:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_declared_huge_body_is_refused_unread_and_the_server_goes_on() {
    let (m, server) = serve(HttpLimits::default());
    let reply = exchange(
        server.addr(),
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 900000000000\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    assert!(reply.contains("\r\nConnection: close\r\n"), "{reply}");
    wait_for("the 413 counted", || refused(&m, "body") == 1);
    // A body sent anyway, beyond the head: answered 413 all the same.
    let mut sent = b"PUT /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    sent.extend_from_slice(&[b'z'; 20_000]);
    let reply = exchange(server.addr(), &sent);
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    wait_for("the second 413 counted", || refused(&m, "body") == 2);
    assert_scrape_works(&server);
}

#[test]
fn a_stalled_request_is_cut_and_does_not_block_a_scrape() {
    // A read timeout long enough that the scrape below is answered while the stalled client is
    // certainly still connected.
    let limits = HttpLimits {
        read_timeout: Duration::from_secs(3),
        connection_deadline: Duration::from_secs(5),
        ..HttpLimits::default()
    };
    let (m, server) = serve(limits);
    let mut slow = TcpStream::connect(server.addr()).expect("connect");
    slow.write_all(b"GET /metr").expect("half a request line");
    assert_scrape_works(&server);
    // Still connected: nothing answered yet, no end of stream.
    slow.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let pending = slow.read(&mut byte);
    assert!(
        matches!(&pending, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the stalled client was answered before the scrape: {pending:?}"
    );
    assert_eq!(refused(&m, "timeout"), 0);
    slow.set_nonblocking(false).unwrap();
    slow.set_read_timeout(Some(GUARD)).unwrap();
    let reply = read_all(&mut slow);
    assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");
    wait_for("the timeout counted", || refused(&m, "timeout") == 1);
    assert_scrape_works(&server);
}

#[test]
fn a_trickling_request_is_cut_at_the_connection_deadline() {
    // One byte every 50 ms never lets a 300 ms read time out: only the deadline ends it.
    let (m, server) = serve(short_limits());
    let mut client = TcpStream::connect(server.addr()).expect("connect");
    let mut writer = client.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        let head = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}", "a".repeat(900));
        for b in head.bytes() {
            if writer.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    client.set_read_timeout(Some(GUARD)).unwrap();
    let reply = read_all(&mut client);
    assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");
    drop(client);
    trickle.join().unwrap();
    wait_for("the timeout counted", || refused(&m, "timeout") == 1);
    assert_scrape_works(&server);
}

#[test]
fn an_oversized_head_gets_431() {
    let (m, server) = serve(HttpLimits::default());
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9 * 1024)
    );
    let reply = exchange(server.addr(), request.as_bytes());
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
    // Endless header lines, never an empty one: the same after the first 8 KiB.
    let endless = "X-A: b\r\n".repeat(10_000);
    let reply = exchange(
        server.addr(),
        format!("GET / HTTP/1.1\r\n{endless}").as_bytes(),
    );
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
    wait_for("both counted", || refused(&m, "too_large") == 2);
    assert_scrape_works(&server);
}

#[test]
fn methods_paths_and_garbage_get_their_status() {
    let (m, server) = serve(HttpLimits::default());
    let addr = server.addr();
    let reply = exchange(addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 405 "), "{reply}");
    assert!(reply.contains("\r\nAllow: GET, HEAD\r\n"), "{reply}");
    let reply = exchange(addr, b"GET /nope HTTP/1.1\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 404 "), "{reply}");
    let reply = exchange(
        addr,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    let reply = exchange(addr, b"HEAD /metrics?a=b HTTP/1.1\r\n\r\n");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 "), "{reply}");
    assert!(body.is_empty(), "HEAD has no body: {reply}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    let get = exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
    let (_, get_body) = get.split_once("\r\n\r\n").expect("a head");
    // The GET's body is the registry at its time; the refusals counted in between differ in
    // their value's digits only, so the lengths agree.
    assert_eq!(length, get_body.len(), "{get}");
    // Closed in the middle of a head.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HT").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    let _ = read_all(&mut s);
    wait_for("every refusal counted", || {
        refused(&m, "method") == 1
            && refused(&m, "not_found") == 1
            && refused(&m, "bad_request") == 2
    });
    // A connection that sends nothing and closes made no request: not counted.
    drop(TcpStream::connect(addr).unwrap());
    assert_scrape_works(&server);
    assert_eq!(refused(&m, "bad_request"), 2);
}

/// Raises the soft limit on open files to fit `n` client sockets and as many accepted ones;
/// returns how many connections fit.
fn room_for_connections(n: usize) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let want = (2 * n as u64 + 200).min(hard);
    if want > soft {
        setrlimit(Resource::RLIMIT_NOFILE, want, hard).expect("setrlimit");
    }
    let fit = ((want.max(soft) - 200) / 2) as usize;
    if fit < n {
        eprintln!(
            "open files limited to {}: {fit} connections instead of {n}",
            want.max(soft)
        );
    }
    fit.min(n)
}

#[test]
fn a_thousand_idle_connections_are_capped_counted_and_outlived() {
    let n = room_for_connections(1000);
    let limits = short_limits();
    let (m, server) = serve(limits);
    let clients: Vec<TcpStream> = (0..n)
        .map(|i| TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect {i}: {e}")))
        .collect();
    // While the last of them still hold every slot, a scrape takes the place of the oldest
    // idle one and is answered.
    assert_scrape_works(&server);
    // Every connection ends in one of three ways: closed unanswered to make room for a newer
    // one (`idle`), refused at once while as many were still closing (`busy`), or served and
    // timed out (the clients send nothing and stay open).
    let total = |m: &Metrics| refused(m, "idle") + refused(m, "busy") + refused(m, "timeout");
    wait_for("every connection counted", || total(&m) == n as u64);
    let (idle, busy, timeout) = (
        refused(&m, "idle"),
        refused(&m, "busy"),
        refused(&m, "timeout"),
    );
    assert!(
        idle > 0,
        "no idle connection made room beyond the cap of {}",
        limits.max_connections
    );
    assert!(timeout >= 1, "{timeout} timed out");
    // Each client got the answer it was counted under; the scrape's place cost one idle one.
    let (mut closed, mut got_503, mut got_408) = (0, 0, 0);
    for mut c in clients {
        c.set_read_timeout(Some(GUARD)).unwrap();
        let mut out = Vec::new();
        let reply = match c.read_to_end(&mut out) {
            Ok(_) => String::from_utf8_lossy(&out).into_owned(),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                String::from_utf8_lossy(&out).into_owned()
            }
            Err(e) => panic!("reading an idle connection: {e}"),
        };
        if reply.is_empty() {
            closed += 1;
        } else if reply.starts_with("HTTP/1.1 503 ") {
            got_503 += 1;
        } else if reply.starts_with("HTTP/1.1 408 ") {
            got_408 += 1;
        } else {
            panic!("unexpected answer to an idle connection: {reply:?}");
        }
    }
    assert_eq!((closed, got_503, got_408), (idle, busy, timeout));
    assert_scrape_works(&server);
}

#[test]
fn dropping_the_server_stops_it() {
    let (_m, server) = serve(short_limits());
    let addr = server.addr();
    assert_scrape_works(&server);
    drop(server);
    assert!(scrape(addr).is_err(), "still answering after drop");
}

/// A server on loopback that answers every connection with `respond`, until the test ends.
fn fake_endpoint(respond: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || respond(s));
        }
    });
    addr
}

#[test]
fn a_scrape_refuses_a_response_beyond_its_limit() {
    let addr = fake_endpoint(|mut s| {
        let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
        let chunk = [b'a'; 64 * 1024];
        // Endless, until the client hangs up.
        while s.write_all(&chunk).is_ok() {}
    });
    let err = scrape_bounded(addr, 1 << 20, GUARD).unwrap_err();
    assert!(
        matches!(err, MetricsError::TooLarge { max_bytes, .. } if max_bytes == 1 << 20),
        "{err}"
    );
    assert!(err.to_string().contains("more than 1048576 bytes"), "{err}");
}

#[test]
fn a_scrape_gives_up_on_a_silent_or_trickling_endpoint() {
    let silent = fake_endpoint(|s| {
        std::thread::sleep(Duration::from_secs(30));
        drop(s);
    });
    let err = scrape_bounded(silent, 1 << 20, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, MetricsError::Fetch { .. }), "{err}");
    assert!(err.to_string().contains("not complete within 1s"), "{err}");
    let trickling = fake_endpoint(|mut s| {
        let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
        while s.write_all(b"a").is_ok() {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let err = scrape_bounded(trickling, 1 << 20, Duration::from_secs(1)).unwrap_err();
    assert!(err.to_string().contains("not complete within 1s"), "{err}");
}
