//! `metronome stats [--addr 127.0.0.1:9187]`: reads a running daemon's metrics endpoint twice,
//! half a second apart, and prints tc -s-like lines per class (rates from the difference;
//! `metronome_daemon::ops::metrics::fetch_and_format`).
//!
//! The reads are bounded (`metronome_daemon::ops::metrics::scrape`): 2 s to connect and per read,
//! 10 s per scrape, 64 MiB per response; whatever listens on the address cannot make the
//! command hang or exhaust memory.
//!
//! Exit status: 0 on success; 2 when the endpoint cannot be reached, does not answer in time,
//! answers more than 64 MiB or answers an error (the message names the address).

use clap::Args;
use metronome_daemon::ops::config::DEFAULT_METRICS_LISTEN;
use std::net::SocketAddr;

/// Options of `metronome stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// The daemon's metrics address (`[daemon] metrics_listen`).
    #[arg(long, default_value = DEFAULT_METRICS_LISTEN)]
    addr: SocketAddr,
}

/// Prints the per-class lines.
pub fn run(args: StatsArgs) -> anyhow::Result<()> {
    match metronome_daemon::ops::metrics::fetch_and_format(args.addr) {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(e) => {
            eprintln!("metronome stats: {e}");
            std::process::exit(2);
        }
    }
}
