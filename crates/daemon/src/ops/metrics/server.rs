//! Starting and stopping the metrics endpoint: [`Metrics::serve`] binds the listener and runs
//! [`super::http`]'s accepting thread; the returned [`MetricsServer`] stops and joins it when
//! dropped.

use super::http::{self, HttpLimits};
use super::{Metrics, MetricsError};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

impl Metrics {
    /// Serves `GET /metrics` on `addr` from a background thread until the returned server is
    /// dropped, under the default [`HttpLimits`]. Port 0 picks a free port
    /// ([`MetricsServer::addr`] tells which).
    pub fn serve(&self, addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        self.serve_with(addr, HttpLimits::default(), || {})
    }

    /// [`Metrics::serve`] under `limits` ([`http`]); the accepting thread first runs
    /// `thread_start` (the daemon's makes the thread an ordinary task, `crate::os::realtime`),
    /// which its connection threads inherit.
    pub fn serve_with(
        &self,
        addr: SocketAddr,
        limits: HttpLimits,
        thread_start: fn(),
    ) -> Result<MetricsServer, MetricsError> {
        let bind = |e: std::io::Error| MetricsError::Bind {
            addr,
            source: Box::new(e),
        };
        let listener = TcpListener::bind(addr).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (metrics, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                thread_start();
                http::accept_loop(&listener, metrics, limits, flag)
            })
            .map_err(bind)?;
        Ok(MetricsServer {
            addr: local,
            stop,
            thread: Some(thread),
        })
    }
}

/// The running endpoint. Dropping it stops the accepting thread (within [`http::ACCEPT_POLL`])
/// and joins it; connections being served end within their deadline.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
