//! The threads of a traffic run: sinks (acceptor + one reader per connection, one reader per UDP
//! socket, the probe echo), senders (one writer per connection, the probe client) and the
//! goodput sampler on the caller's thread. Time line: bind sinks, connect every sender, wait for
//! every accept, start all writers at one instant, sample windows until the deadline, raise the
//! stop flag, join everything.

use super::sleep_until;
use super::{
    FlowGroup, GroupReport, Probe, ProbeReport, TrafficError, TrafficPlan, TrafficReport, Transport,
};
use crate::netns::Namespace;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Time allowed for binding, connecting and accepting before the run starts.
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Socket timeout: how often a blocked reader/writer looks at the deadline and stop flag.
const POLL: Duration = Duration::from_millis(50);
/// Delay between the end of set-up and the common start, so every writer is waiting on time.
const START_DELAY: Duration = Duration::from_millis(20);
/// Bytes per `write`/`read` call: 64 KiB, the largest TSO/GRO segment.
const CHUNK: usize = 64 << 10;
/// Stack of each worker thread: they hold no large locals (buffers are on the heap).
const STACK: usize = 256 << 10;
/// How long the probe waits for one echo before counting it unanswered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

type Worker<T> = JoinHandle<Result<T, TrafficError>>;

enum Sink {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

enum Source {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TrafficError {
    let what = what.into();
    move |source| TrafficError::Io { what, source }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, TrafficError> + Send + 'static,
) -> Result<Worker<T>, TrafficError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .stack_size(STACK)
        .spawn(f)
        .map_err(io_err("spawning a traffic thread"))
}

fn join<T>(handle: Worker<T>) -> Result<T, TrafficError> {
    handle.join().map_err(|_| TrafficError::ThreadPanicked)?
}

fn in_ns<T: Send + 'static>(
    ns: Option<&Namespace>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TrafficError> {
    match ns {
        Some(ns) => Ok(ns.run(f)?),
        None => Ok(f()),
    }
}

pub(super) fn run(
    plan: &TrafficPlan,
    sender: Option<&Namespace>,
    receiver: Option<&Namespace>,
) -> Result<TrafficReport, TrafficError> {
    let stop = Arc::new(AtomicBool::new(false));
    let result = run_inner(plan, sender, receiver, &stop);
    stop.store(true, Ordering::Release);
    result
}

fn run_inner(
    plan: &TrafficPlan,
    sender: Option<&Namespace>,
    receiver: Option<&Namespace>,
    stop: &Arc<AtomicBool>,
) -> Result<TrafficReport, TrafficError> {
    let setup_deadline = Instant::now() + SETUP_TIMEOUT;
    let (sinks, probe_listener) = bind_sinks(plan, receiver)?;
    let counters: Vec<Arc<AtomicU64>> = plan.groups.iter().map(|_| Arc::default()).collect();
    let mut acceptors = Vec::new();
    for ((group, sink), counter) in plan.groups.iter().zip(sinks).zip(&counters) {
        let (group, counter, stop) = (group.clone(), counter.clone(), stop.clone());
        acceptors.push(spawn("tg-accept", move || {
            accept_group(&group, sink, counter, stop, setup_deadline)
        })?);
    }
    let echo = match probe_listener {
        Some(l) => {
            let stop = stop.clone();
            Some(spawn("tg-echo", move || echo(l, stop, setup_deadline))?)
        }
        None => None,
    };
    // If connecting fails, raising `stop` (in `run`) ends the acceptors; join them anyway.
    let connected = connect_all(plan, sender);
    let readers: Vec<_> = acceptors.into_iter().map(join).collect();
    let (sources, probe_stream) = connected?;
    let readers = readers.into_iter().collect::<Result<Vec<_>, _>>()?;

    let start = Instant::now() + START_DELAY;
    let deadline = start + plan.duration;
    let mut writers = Vec::new();
    for (group, group_sources) in plan.groups.iter().zip(sources) {
        let mut handles = Vec::new();
        for source in group_sources {
            let (cap, transport) = (group.max_bytes_per_flow, group.transport);
            handles.push(spawn("tg-write", move || {
                write(source, transport, cap, start, deadline)
            })?);
        }
        writers.push(handles);
    }
    let prober = match (plan.probe, probe_stream) {
        (Some(p), Some(s)) => Some(spawn("tg-probe", move || probe(s, p, start, deadline))?),
        _ => None,
    };

    let sampled = sample_windows(plan, &counters, start);
    stop.store(true, Ordering::Release);

    let mut groups = Vec::new();
    for (((group, handles), group_readers), ((bytes, windows_bps), received_at)) in
        plan.groups.iter().zip(writers).zip(readers).zip(
            sampled
                .at_deadline
                .into_iter()
                .zip(sampled.windows)
                .zip(sampled.received_at),
        )
    {
        let sent: Result<Vec<u64>, _> = handles.into_iter().map(join).collect();
        let received = join(group_readers)?;
        groups.push(GroupReport {
            name: group.name.clone(),
            port: group.port,
            bytes,
            sent_bytes: sent?.iter().sum(),
            bytes_per_flow: received,
            windows_bps,
            received_at,
        });
    }
    let probe = prober.map(join).transpose()?;
    if let Some(e) = echo {
        join(e)?;
    }
    Ok(TrafficReport {
        groups,
        probe,
        elapsed: sampled.elapsed,
        started: start,
    })
}

/// What [`sample_windows`] read, per group (outer vectors in plan order).
struct Sampled {
    /// Goodput of each window, bit/s.
    windows: Vec<Vec<f64>>,
    /// Bytes received by the last sample.
    at_deadline: Vec<u64>,
    /// Bytes received by each sample, with the time since the start it was read.
    received_at: Vec<Vec<(Duration, u64)>>,
    /// Time from the start to the last sample.
    elapsed: Duration,
}

/// Samples the group counters at `start + k × window` until the deadline; returns per-group
/// windows in bit/s (divided by the measured, not the nominal, window length), per-group bytes
/// at each sample with the time it was read, and at the last sample, and the elapsed time.
fn sample_windows(plan: &TrafficPlan, counters: &[Arc<AtomicU64>], start: Instant) -> Sampled {
    let n = (plan.duration.as_nanos() / plan.window.as_nanos()) as u32;
    let mut windows = vec![Vec::with_capacity(n as usize); counters.len()];
    let mut received_at = vec![Vec::with_capacity(n as usize + 1); counters.len()];
    sleep_until(start);
    let mut prev_t = Instant::now();
    let mut prev: Vec<u64> = counters.iter().map(|c| c.load(Ordering::Acquire)).collect();
    for (series, &v) in received_at.iter_mut().zip(&prev) {
        series.push((prev_t.saturating_duration_since(start), v));
    }
    for k in 1..=n {
        sleep_until(start + plan.window * k);
        let now = Instant::now();
        let secs = (now - prev_t).as_secs_f64().max(1e-9);
        for (i, c) in counters.iter().enumerate() {
            let v = c.load(Ordering::Acquire);
            windows[i].push((v - prev[i]) as f64 * 8.0 / secs);
            received_at[i].push((now.saturating_duration_since(start), v));
            prev[i] = v;
        }
        prev_t = now;
    }
    Sampled {
        windows,
        at_deadline: prev,
        received_at,
        elapsed: prev_t.saturating_duration_since(start),
    }
}

fn bind_sinks(
    plan: &TrafficPlan,
    receiver: Option<&Namespace>,
) -> Result<(Vec<Sink>, Option<TcpListener>), TrafficError> {
    let ip = plan.receiver_addr;
    let groups: Vec<(u16, bool)> = plan
        .groups
        .iter()
        .map(|g| (g.port, g.transport == Transport::Tcp))
        .collect();
    let probe_port = plan.probe.map(|p| p.port);
    in_ns(receiver, move || {
        let bind_err = |port| move |source| TrafficError::Bind { port, source };
        let mut sinks = Vec::new();
        for (port, tcp) in groups {
            let addr = SocketAddr::from((ip, port));
            sinks.push(if tcp {
                Sink::Tcp(TcpListener::bind(addr).map_err(bind_err(port))?)
            } else {
                Sink::Udp(UdpSocket::bind(addr).map_err(bind_err(port))?)
            });
        }
        let probe = probe_port
            .map(|port| TcpListener::bind((ip, port)).map_err(bind_err(port)))
            .transpose()?;
        Ok((sinks, probe))
    })?
}

type Connected = (Vec<Vec<Source>>, Option<TcpStream>);

fn connect_all(plan: &TrafficPlan, sender: Option<&Namespace>) -> Result<Connected, TrafficError> {
    let ip = plan.receiver_addr;
    let groups: Vec<FlowGroup> = plan.groups.clone();
    let probe_port = plan.probe.map(|p| p.port);
    let congestion = plan.congestion.clone();
    in_ns(sender, move || {
        let connect = |addr: SocketAddr| -> Result<TcpStream, TrafficError> {
            let stream = TcpStream::connect_timeout(&addr, SETUP_TIMEOUT)
                .map_err(|source| TrafficError::Connect { addr, source })?;
            if let Some(name) = &congestion {
                set_congestion(&stream, name)?;
            }
            Ok(stream)
        };
        let mut all = Vec::new();
        for g in &groups {
            let addr = SocketAddr::from((ip, g.port));
            let mut sources = Vec::new();
            for _ in 0..g.flows {
                sources.push(match g.transport {
                    Transport::Tcp => Source::Tcp(connect(addr)?),
                    Transport::Udp { .. } => {
                        let s = UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0))
                            .and_then(|s| s.connect(addr).map(|()| s))
                            .map_err(|source| TrafficError::Connect { addr, source })?;
                        Source::Udp(s)
                    }
                });
            }
            all.push(sources);
        }
        let probe = probe_port
            .map(|port| connect(SocketAddr::from((ip, port))))
            .transpose()?;
        Ok((all, probe))
    })?
}

/// Sets the socket's congestion control (`TCP_CONGESTION`); before the first byte is written,
/// so the whole transfer runs under it.
fn set_congestion(stream: &TcpStream, name: &str) -> Result<(), TrafficError> {
    let value = std::ffi::OsString::from(name);
    nix::sys::socket::setsockopt(stream, nix::sys::socket::sockopt::TcpCongestion, &value).map_err(
        |e| TrafficError::Io {
            what: format!("TCP_CONGESTION {name}"),
            source: std::io::Error::from(e),
        },
    )
}

/// Accepts the group's TCP connections (or takes its UDP socket) and returns the reader thread.
fn accept_group(
    group: &FlowGroup,
    sink: Sink,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    setup_deadline: Instant,
) -> Result<Worker<Vec<u64>>, TrafficError> {
    let listener = match sink {
        Sink::Udp(socket) => return spawn("tg-udp-sink", move || read_udp(socket, counter, stop)),
        Sink::Tcp(l) => l,
    };
    let streams = accept_n(&listener, group.port, group.flows, &stop, setup_deadline)?;
    let mut readers = Vec::new();
    for stream in streams {
        let (counter, stop) = (counter.clone(), stop.clone());
        readers.push(spawn("tg-read", move || read_tcp(stream, counter, stop))?);
    }
    spawn("tg-join", move || readers.into_iter().map(join).collect())
}

fn accept_n(
    listener: &TcpListener,
    port: u16,
    n: usize,
    stop: &AtomicBool,
    setup_deadline: Instant,
) -> Result<Vec<TcpStream>, TrafficError> {
    listener.set_nonblocking(true).map_err(io_err("listener"))?;
    let mut streams = Vec::with_capacity(n);
    while streams.len() < n {
        if stop.load(Ordering::Acquire) || Instant::now() > setup_deadline {
            let (accepted, expected) = (streams.len(), n);
            return Err(TrafficError::Accept {
                port,
                accepted,
                expected,
            });
        }
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)
                    .and_then(|()| s.set_read_timeout(Some(POLL)))
                    .map_err(io_err("accepted socket"))?;
                streams.push(s);
            }
            Err(e) if is_timeout(&e) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => return Err(io_err(format!("accept on port {port}"))(e)),
        }
    }
    Ok(streams)
}

fn read_tcp(
    mut stream: TcpStream,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<u64, TrafficError> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    while !stop.load(Ordering::Acquire) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                counter.fetch_add(n as u64, Ordering::Release);
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) if stop.load(Ordering::Acquire) => break,
            Err(e) => return Err(io_err("sink read")(e)),
        }
    }
    Ok(total)
}

/// Reads one UDP sink socket; bytes per source address, in order of first arrival.
fn read_udp(
    socket: UdpSocket,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<Vec<u64>, TrafficError> {
    socket
        .set_read_timeout(Some(POLL))
        .map_err(io_err("UDP sink"))?;
    let mut buf = vec![0u8; 65_536];
    let mut per_source: Vec<(SocketAddr, u64)> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                counter.fetch_add(n as u64, Ordering::Release);
                match per_source.iter_mut().find(|(a, _)| *a == from) {
                    Some((_, b)) => *b += n as u64,
                    None => per_source.push((from, n as u64)),
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(io_err("UDP sink read")(e)),
        }
    }
    Ok(per_source.into_iter().map(|(_, b)| b).collect())
}

/// One writer: from `start` until `deadline` or `cap` bytes. Errors after the deadline (the sink
/// closed first) are not errors of the run.
fn write(
    source: Source,
    transport: Transport,
    cap: u64,
    start: Instant,
    deadline: Instant,
) -> Result<u64, TrafficError> {
    let buf = vec![0u8; CHUNK];
    let mut sent = 0u64;
    sleep_until(start);
    match (source, transport) {
        (Source::Tcp(mut s), _) => {
            s.set_write_timeout(Some(POLL))
                .map_err(io_err("sender socket"))?;
            while sent < cap && Instant::now() < deadline {
                let len = (cap - sent).min(CHUNK as u64) as usize;
                match s.write(&buf[..len]) {
                    Ok(n) => sent += n as u64,
                    Err(e) if is_timeout(&e) => {}
                    Err(_) if Instant::now() >= deadline => break,
                    Err(e) => return Err(io_err("sender write")(e)),
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        (Source::Udp(s), Transport::Udp { payload, rate_bps }) => {
            // Pacing: credit of `rate_bps` since `start`; out of credit, sleep 1 ms.
            let credit = |now: Instant| match rate_bps {
                Some(r) => ((now - start).as_secs_f64() * r as f64 / 8.0) as u64 + payload as u64,
                None => u64::MAX,
            };
            loop {
                let now = Instant::now();
                if sent >= cap || now >= deadline {
                    break;
                }
                if sent + payload as u64 > credit(now) {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                match s.send(&buf[..payload]) {
                    Ok(n) => sent += n as u64,
                    // ENOBUFS (a full qdisc) and ECONNREFUSED (a late ICMP): keep sending.
                    Err(e)
                        if is_timeout(&e)
                            || e.raw_os_error() == Some(nix::errno::Errno::ENOBUFS as i32) =>
                    {
                        std::thread::yield_now()
                    }
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(io_err("UDP send")(e)),
                }
            }
        }
        (Source::Udp(_), Transport::Tcp) => {}
    }
    Ok(sent)
}

/// The probe's echo side: returns every 8-byte ping to its sender until the stop flag.
fn echo(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    setup_deadline: Instant,
) -> Result<(), TrafficError> {
    let mut stream = match accept_n(&listener, 0, 1, &stop, setup_deadline) {
        Ok(mut s) => s.remove(0),
        Err(_) if stop.load(Ordering::Acquire) => return Ok(()),
        Err(e) => return Err(e),
    };
    stream.set_nodelay(true).map_err(io_err("probe echo"))?;
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Acquire) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Err(e) = stream.write_all(&buf[..n]) {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    return Err(io_err("probe echo write")(e));
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

/// The probe's client side: ping, wait for the echo of that sequence number (at most
/// [`PROBE_TIMEOUT`]), then wait for the next interval boundary.
fn probe(
    mut s: TcpStream,
    p: Probe,
    start: Instant,
    deadline: Instant,
) -> Result<ProbeReport, TrafficError> {
    s.set_nodelay(true)
        .and_then(|()| s.set_read_timeout(Some(Duration::from_millis(5))))
        .map_err(io_err("probe socket"))?;
    let (mut rtts, mut unanswered) = (Vec::new(), 0usize);
    let (mut pending, mut have) = ([0u8; 8], 0usize);
    let mut seq = 0u64;
    let mut next = start;
    while next < deadline {
        sleep_until(next);
        seq += 1;
        let sent_at = Instant::now();
        if s.write_all(&seq.to_le_bytes()).is_err() {
            break;
        }
        let give_up = (sent_at + PROBE_TIMEOUT).min(deadline);
        let mut answered = false;
        while !answered && Instant::now() < give_up {
            match s.read(&mut pending[have..]) {
                Ok(0) => break,
                Ok(n) => have += n,
                Err(e) if is_timeout(&e) => continue,
                Err(_) => break,
            }
            if have == pending.len() {
                have = 0;
                answered = u64::from_le_bytes(pending) == seq;
            }
        }
        if answered {
            rtts.push(sent_at.elapsed().as_micros() as u64);
        } else {
            unanswered += 1;
        }
        next = (next + p.interval).max(Instant::now());
    }
    Ok(ProbeReport::from_samples(rtts, unanswered))
}
