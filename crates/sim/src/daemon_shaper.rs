//! The daemon's own shaping pipeline as the simulator's shaper: every segment becomes a real
//! Ethernet + IPv4 + TCP frame in a [`FramePool`] slot, [`Engine::receive`] classifies, applies
//! backpressure, stamps (Carousel §5.1.1) and queues it in its wheel (§5.1.2), [`Engine::release`]
//! hands it to the simulated NIC, all in simulated time. One `[default]` class built from the
//! [`ShaperSpec::Daemon`] fields through the daemon's own validation; flow `f` sends from
//! `10.f.f.f`. How the fields map and what the frames carry: ARCHITECTURE.md, "The daemon's engine
//! as the simulator's shaper".

use crate::scenario::{DaemonBackpressure, ScenarioError, ShaperSpec};
use metronome_config::Config;
use metronome_core::{PacketRef, Timestamp};
use metronome_engine::engine::Engine;
use metronome_io::{FramePool, RxFrame};
use metronome_packet::build::{write_tcp_frame, TcpFrame, TCP_FRAME_HEADERS};
use metronome_packet::Ecn;

/// Offset of the IPv4 TOS byte in a frame [`write_tcp_frame`] builds (after the 14-byte Ethernet
/// header, second byte of the IPv4 header).
const TOS_OFFSET: usize = 15;

/// What happened to a segment offered to the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Queued in the engine's wheel.
    Queued,
    /// No free frame slot: the engine holds `capacity` packets.
    Full,
    /// The engine dropped it (its per-flow limit, horizon or node pool) or did not shape it.
    Dropped,
}

/// The engine, its frame pool and the map from pool slots back to the simulator's descriptors.
pub(crate) struct DaemonShaper {
    engine: Engine,
    pool: FramePool,
    /// The simulator's reference (descriptor id, flow, length) of the segment in each pool slot.
    slot_pkt: Vec<PacketRef>,
    ecn: Ecn,
    rx: [RxFrame; 1],
    /// Slot ids the engine forwards or releases (reused).
    out: Vec<u32>,
}

/// The daemon configuration of `spec`: one `[default]` class (see the module docs).
fn config_text(spec: &ShaperSpec, seg_bytes: u32) -> Result<(String, u32), ScenarioError> {
    let ShaperSpec::Daemon {
        granularity_ns,
        horizon_ns,
        aggregate_bps,
        per_flow_bps,
        capacity_packets,
        backpressure,
        reject_beyond_horizon,
        fair,
    } = *spec
    else {
        return Err(ScenarioError::OutOfRange {
            field: "shaper",
            why: "not the daemon's engine",
        });
    };
    let mut text = format!(
        "[interfaces]\ninside = \"sim0\"\noutside = \"sim1\"\nmtu = {seg_bytes}\n\
         [wheel]\ngranularity = \"{granularity_ns}ns\"\nhorizon = \"{horizon_ns}ns\"\n\
         pool_packets = {capacity_packets}\nhorizon_policy = \"{horizon}\"\n\
         [daemon]\npool_share = 0\n\
         [default]\nburst = {seg_bytes}\n",
        horizon = if reject_beyond_horizon {
            "reject"
        } else {
            "clamp"
        },
    );
    if let Some(r) = aggregate_bps {
        text.push_str(&format!("rate = {r}\n"));
    }
    if let Some(r) = per_flow_bps {
        text.push_str(&format!("pacing = {r}\n"));
    }
    if fair {
        text.push_str("fair = true\n");
    }
    if aggregate_bps.is_some() || per_flow_bps.is_some() {
        // The simulated shaper's one bound is its memory, `capacity_packets` (the papers'
        // shaper with a fixed buffer), not the daemon's per-class bounds.
        text.push_str(&format!(
            "queue = {{ packets = {capacity_packets}, bytes = {} }}\n",
            i64::MAX
        ));
    }
    match backpressure {
        DaemonBackpressure::None => {}
        DaemonBackpressure::Ecn { threshold_ns } => text.push_str(&format!(
            "backpressure = {{ mode = \"ecn\", threshold = \"{threshold_ns}ns\" }}\n"
        )),
        DaemonBackpressure::Drop { limit } => text.push_str(&format!(
            "backpressure = {{ mode = \"drop\", limit = {limit} }}\n"
        )),
    }
    Ok((text, capacity_packets))
}

impl DaemonShaper {
    /// The engine of `spec` (a [`ShaperSpec::Daemon`]) for segments of at most `seg_bytes`
    /// bytes, whose frames are ECT(0) when `ect`.
    pub(crate) fn new(spec: &ShaperSpec, seg_bytes: u32, ect: bool) -> Result<Self, ScenarioError> {
        if !(68..=65_535).contains(&seg_bytes) || (seg_bytes as usize) < TCP_FRAME_HEADERS {
            return Err(ScenarioError::OutOfRange {
                field: "transport.mtu",
                why: "the daemon's engine needs segments of 68 to 65535 bytes",
            });
        }
        let (text, capacity) = config_text(spec, seg_bytes)?;
        let config = Config::from_toml_str(&text, "simulated daemon").map_err(|_| {
            ScenarioError::OutOfRange {
                field: "shaper",
                why: "the daemon refuses this configuration (see `metronome check`)",
            }
        })?;
        let engine = Engine::new(&config.engine(), capacity as usize);
        Ok(DaemonShaper {
            engine,
            pool: FramePool::new(capacity, seg_bytes as usize),
            slot_pkt: vec![PacketRef::default(); capacity as usize],
            ecn: if ect { Ecn::Ect0 } else { Ecn::NotEct },
            rx: [RxFrame {
                id: 0,
                len: 0,
                csum_not_ready: false,
                stamp_ns: 0,
            }],
            out: Vec::with_capacity(4),
        })
    }

    /// Builds the frame of `pkt` (its descriptor id, flow and length) and hands it to the engine
    /// at `now`.
    pub(crate) fn offer(&mut self, now: Timestamp, pkt: PacketRef) -> Admit {
        let Some(slot) = self.pool.alloc() else {
            return Admit::Full;
        };
        let f = pkt.flow.0;
        let len = usize::from(pkt.len);
        self.pool.set_len(slot, len);
        let frame = TcpFrame {
            src_ip: [10, (f >> 16) as u8, (f >> 8) as u8, f as u8],
            dst_ip: [10, 255, 255, 254],
            src_port: 40_000,
            dst_port: 5201,
            ecn: self.ecn,
            seq: 0,
        };
        if write_tcp_frame(self.pool.frame_mut(slot), &frame).is_err() {
            // Unreachable: `new` checked the segment size and the pool's slots hold it.
            self.pool.free(slot);
            return Admit::Dropped;
        }
        self.slot_pkt[slot as usize] = pkt;
        self.rx[0] = RxFrame {
            id: slot,
            len: len as u32,
            csum_not_ready: false,
            stamp_ns: 0,
        };
        let before = self.engine.counters();
        self.out.clear();
        self.engine
            .receive(now, &mut self.pool, &self.rx, &mut self.out);
        let after = self.engine.counters();
        // Into the wheel, or (a fair class) into its flow's queue, whence the engine pulls it
        // into the wheel when the class has credit.
        if after.enqueued > before.enqueued || after.fair_enqueued > before.fair_enqueued {
            return Admit::Queued;
        }
        // Forwarded unshaped (cannot happen for a well-formed frame of the shaped default class)
        // or dropped by the engine, which freed the slot: a physical drop either way.
        for &id in &self.out {
            self.pool.free(id);
        }
        Admit::Dropped
    }

    /// Releases one packet due at `now`: the reference it was offered with, and whether the
    /// engine marked it CE.
    pub(crate) fn release(&mut self, now: Timestamp) -> Option<(PacketRef, bool)> {
        self.out.clear();
        if self.engine.release(now, &mut self.pool, &mut self.out, 1) == 0 {
            return None;
        }
        let slot = self.out[0];
        let frame = self.pool.frame(slot);
        let ce = frame
            .get(TOS_OFFSET)
            .is_some_and(|b| b & 0b11 == Ecn::Ce as u8);
        let pkt = self.slot_pkt[slot as usize];
        self.pool.free(slot);
        Some((pkt, ce))
    }

    /// The earliest instant a packet is due, `None` when empty.
    pub(crate) fn next_due(&self) -> Option<Timestamp> {
        self.engine.next_due()
    }

    /// Packets queued in the engine's wheel.
    pub(crate) fn len(&self) -> usize {
        self.engine.queued()
    }

    /// The engine itself (its counters, its accounting invariants).
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

#[cfg(test)]
mod tests;
