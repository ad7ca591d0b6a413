//! The paced UDP flow of `compare churn`: a sender in the sender namespace, a sink in the
//! receiver's, each on a thread of its own; every datagram carries its sequence number (8 bytes,
//! big-endian), so the sink counts what arrived, distinct and duplicated.

use super::{
    ChurnError, ChurnOptions, UdpRow, DRAIN_QUIET, UDP_BURST, UDP_PAYLOAD, UDP_POLL, UDP_PORT,
};
use crate::netns::{TopoError, Topology};
use crate::trafficgen::TrafficError;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The paced UDP flow (see the module docs).
pub(super) struct UdpFlow {
    stop: Arc<AtomicBool>,
    sender: std::thread::JoinHandle<(u64, u64)>,
    sink: std::thread::JoinHandle<Result<(u64, u64), TrafficError>>,
}

impl UdpFlow {
    pub(super) fn start(topo: &Topology, options: &ChurnOptions) -> Result<UdpFlow, ChurnError> {
        let sink = topo
            .receiver
            .run(|| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, UDP_PORT)))?
            .map_err(TopoError::Io)?;
        let to = SocketAddr::from((topo.receiver_addr, UDP_PORT));
        let socket = topo
            .sender
            .run(move || {
                let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                s.connect(to)?;
                Ok::<_, std::io::Error>(s)
            })?
            .map_err(TopoError::Io)?;
        sink.set_read_timeout(Some(UDP_POLL))
            .map_err(TopoError::Io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let every = Duration::from_secs_f64(
            (UDP_BURST * UDP_PAYLOAD * 8) as f64 / options.udp_rate_bps as f64,
        );
        let flag = stop.clone();
        let sender = std::thread::Builder::new()
            .name("churn-udp".into())
            .spawn(move || send_udp(&socket, every, &flag))
            .map_err(TopoError::Io)?;
        let flag = stop.clone();
        let sink = std::thread::Builder::new()
            .name("churn-udp-sink".into())
            .spawn(move || read_udp(&sink, &flag))
            .map_err(TopoError::Io)?;
        Ok(UdpFlow { stop, sender, sink })
    }

    /// Stops the sender, lets the sink drain, and returns the counts.
    pub(super) fn finish(self) -> Result<UdpRow, ChurnError> {
        self.stop.store(true, Ordering::Release);
        let (sent, send_errors) = self
            .sender
            .join()
            .map_err(|_| TrafficError::ThreadPanicked)?;
        let (received, duplicates) = self
            .sink
            .join()
            .map_err(|_| TrafficError::ThreadPanicked)??;
        Ok(UdpRow {
            sent,
            send_errors,
            received,
            duplicates,
            ..UdpRow::default()
        })
    }
}

/// Sends [`UDP_BURST`] datagrams every `every` until `stop`; returns (sent, failed).
fn send_udp(socket: &UdpSocket, every: Duration, stop: &AtomicBool) -> (u64, u64) {
    let mut buf = [0u8; UDP_PAYLOAD];
    let (mut seq, mut failed) = (0u64, 0u64);
    let start = Instant::now();
    let mut bursts = 0u32;
    while !stop.load(Ordering::Acquire) {
        for _ in 0..UDP_BURST {
            buf[..8].copy_from_slice(&seq.to_be_bytes());
            match socket.send(&buf) {
                Ok(_) => seq += 1,
                Err(_) => failed += 1,
            }
        }
        bursts += 1;
        if let Some(wait) = (start + every * bursts).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    (seq, failed)
}

/// Reads the sink until `stop` is set and then [`DRAIN_QUIET`] passes without a datagram;
/// returns (distinct datagrams, duplicates).
fn read_udp(socket: &UdpSocket, stop: &AtomicBool) -> Result<(u64, u64), TrafficError> {
    let mut buf = [0u8; 2048];
    let mut seen: Vec<bool> = Vec::new();
    let (mut distinct, mut duplicates) = (0u64, 0u64);
    let mut last = Instant::now();
    loop {
        match socket.recv(&mut buf) {
            Ok(n) if n >= 8 => {
                last = Instant::now();
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&buf[..8]);
                let Ok(seq) = usize::try_from(u64::from_be_bytes(seq)) else {
                    continue;
                };
                if seq >= seen.len() {
                    seen.resize(seq + 1, false);
                }
                if std::mem::replace(&mut seen[seq], true) {
                    duplicates += 1;
                } else {
                    distinct += 1;
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(source) => {
                return Err(TrafficError::Io {
                    what: "UDP sink read".into(),
                    source,
                })
            }
        }
        if stop.load(Ordering::Acquire) && last.elapsed() >= DRAIN_QUIET {
            return Ok((distinct, duplicates));
        }
    }
}
