//! The daemon's AF_PACKET ports and frame pool size: [`open_ports`] for the single loop,
//! [`open_silo_ports`] for silos (every silo's receive sockets in one `PACKET_FANOUT_HASH` group
//! per interface, so all packets of a flow reach the same silo, Carousel §5.3), and
//! [`frame_slots`], the pool size a configuration asks for.

use crate::config::Config;
use metronome_io::{AfPacketConfig, AfPacketPort, Fanout, PortError};

/// Frame pool slots: 65 536 frames of [`metronome_io::DEFAULT_SLOT_SIZE`] bytes (128 MiB), or the
/// wheel's `pool_packets` when smaller. At 200 Mbit/s this holds 3.9 s of full-size frames, more
/// than the default 2 s horizon.
pub const DEFAULT_FRAME_SLOTS: u32 = 65_536;

/// Frame pool slots for `config` (see [`DEFAULT_FRAME_SLOTS`]).
pub fn frame_slots(config: &Config) -> u32 {
    let wanted = u32::try_from(config.wheel.pool_packets).unwrap_or(u32::MAX);
    wanted.clamp(1024, DEFAULT_FRAME_SLOTS)
}

/// Opens the inside and outside ports of `config` in the calling thread's namespace.
pub fn open_ports(config: &Config) -> Result<(AfPacketPort, AfPacketPort), PortError> {
    let af = AfPacketConfig::default();
    let inside = AfPacketPort::open(&config.interfaces.inside, &af)?;
    let outside = AfPacketPort::open(&config.interfaces.outside, &af)?;
    Ok((inside, outside))
}

/// The two ports of each of `n` silos: inside and outside RX sockets fanned out by flow hash.
pub fn open_silo_ports(
    config: &Config,
    n: usize,
) -> Result<Vec<(AfPacketPort, AfPacketPort)>, PortError> {
    let mut ports: Vec<(AfPacketPort, AfPacketPort)> = Vec::with_capacity(n);
    for _ in 0..n {
        let (fanout_in, fanout_out) = match ports.first() {
            None => (Fanout::NewGroup, Fanout::NewGroup),
            Some((i, o)) => (
                Fanout::Join(i.fanout_group().unwrap_or_default()),
                Fanout::Join(o.fanout_group().unwrap_or_default()),
            ),
        };
        let af = |fanout| AfPacketConfig {
            fanout: Some(fanout),
            ..AfPacketConfig::default()
        };
        let inside = AfPacketPort::open(&config.interfaces.inside, &af(fanout_in))?;
        let outside = AfPacketPort::open(&config.interfaces.outside, &af(fanout_out))?;
        ports.push((inside, outside));
    }
    Ok(ports)
}
