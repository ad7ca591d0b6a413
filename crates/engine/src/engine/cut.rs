//! Super-frames cut into pieces when they are queued (NicPic §3: a large segment bursts, so
//! the shaper sends smaller pieces of it, each with its own departure time, and classes
//! interleave at fine granularity).
//!
//! * **When.** A GSO super-frame whose transmission at its class's rate would take longer than
//!   the class's `gso_burst` is cut ([`cut_segments`]); so is one above 65 535 wire bytes of a
//!   class on the link, whose port charges a packet its `PacketRef` length.
//! * **Pieces.** At most `max_segments` segments each (at least two, as the kernel's
//!   `tcp_tso_autosize` keeps), at most [`MAX_PIECES`] of them, each within 65 535 wire bytes.
//! * **Queueing** ([`Engine::queue_pieces`]): every piece is stamped at the class's rate and
//!   gets its own wheel entry, [`metronome_io::piece::encode`]`(slot, k)`; a piece that finds
//!   the wheel full drops the pieces after it. The cut is booked with the slot
//!   ([`super::slots::Slots::book`]), which hands it to the frame pool: the port writes each
//!   piece's headers and sends it when it is due ([`metronome_io::piece`]).
//!
//! A frame within the bound is not cut however long it is (at 10 Gbit/s a whole 64 KiB
//! super-frame is 54 µs): one `send` message rather than two.

use super::slots::Booking;
use super::{clamp_u32, reject_reason, Engine};
use crate::config::ClassPolicy;
use crate::stats::DropReason;
use metronome_core::timestamp::PolicyStack;
use metronome_core::{ClassId, EdtQueue, FlowId, PacketRef, Timestamp};
use metronome_io::piece::{encode, MAX_PIECES};
use metronome_io::FramePool;
use metronome_packet::gso::RX_BYTES_FRAMING;
use metronome_packet::SuperFrame;

/// Segments per piece of `sf` for a class with `policy`: what leaves within the class's
/// `gso_burst` at its rate (the smaller of `rate` and `pacing`), at least two segments (as
/// `tcp_tso_autosize` keeps), and few enough for [`MAX_PIECES`] pieces. A frame within
/// the bound is not cut, however long, except on a link; the pieces of a cut frame have at most
/// 65 535 wire bytes (a `PacketRef`'s length).
pub(super) fn cut_segments(sf: &SuperFrame, policy: &ClassPolicy) -> u32 {
    let total = sf.segments();
    let rate = match (policy.rate, policy.pacing) {
        (Some(a), Some(b)) => Some(if a.bps() <= b.bps() { a } else { b }),
        (a, b) => a.or(b),
    };
    let budget = rate.map_or(u64::MAX, |r| r.bytes_in(policy.gso_burst));
    let by_rate = sf.segments_within(budget, RX_BYTES_FRAMING).max(2);
    let by_len = sf.segments_within(u64::from(u16::MAX), RX_BYTES_FRAMING);
    if by_rate >= total {
        if policy.link.on_link && by_len < total {
            // The link's port charges DWRR deficits, its buffer and its marking thresholds a
            // packet's `PacketRef` length: a frame above 65 535 wire bytes goes as pieces of
            // equal segments within it, so that every queue pays its wire bytes exactly.
            return total.div_ceil(total.div_ceil(by_len));
        }
        // Within the bound: one unit, whatever its length (its wire bytes are kept per slot).
        return total;
    }
    by_rate
        .min(by_len)
        .max(total.div_ceil(MAX_PIECES))
        .min(total)
        .max(1)
}

/// Wire bytes of piece `k` of `sf` cut into pieces of `max_segments` segments (what
/// `metronome_packet::Piece::wire_bytes` reports, without writing its headers).
fn piece_wire_bytes(sf: &SuperFrame, k: u32, max_segments: u32) -> u64 {
    let s = sf.gso_size() as u64;
    let first = u64::from(k) * u64::from(max_segments);
    let segments = (u64::from(sf.segments()) - first.min(u64::from(sf.segments())))
        .min(u64::from(max_segments));
    let payload = (sf.payload_len() as u64)
        .saturating_sub(first * s)
        .min(segments * s);
    segments * (sf.header_len() as u64 + u64::from(RX_BYTES_FRAMING)) + payload
}

/// The pieces of one super-frame to queue ([`Engine::queue_pieces`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct PieceRun {
    /// The time the wheel is given.
    pub now: Timestamp,
    /// The time the pieces are stamped as of (`now`, or a fair class's busy time).
    pub at: Timestamp,
    /// The frame's pool slot.
    pub id: u32,
    /// Its flow.
    pub flow: FlowId,
    /// Its class state index.
    pub index: usize,
    /// Segments per piece.
    pub max_segments: u32,
    /// Pieces.
    pub pieces: u32,
    /// The policies that stamp them.
    pub policies: PolicyStack,
    /// Its flow-table entry.
    pub entry: Option<u32>,
    /// Wire bytes of the whole frame.
    pub wire: u64,
}

impl Engine {
    /// Queues the pieces of super-frame `sf` as `run` says, each with its own EDT at the class's
    /// rate (NicPic §3), one wheel entry each, and books the cut with the slot. A piece that
    /// finds the wheel full drops the pieces after it; when the first one does, nothing is
    /// queued and the reason comes back for the caller to drop the frame.
    pub(super) fn queue_pieces(
        &mut self,
        pool: &mut FramePool,
        sf: &SuperFrame,
        run: PieceRun,
    ) -> Result<(), DropReason> {
        let PieceRun {
            now,
            at,
            id,
            flow,
            index,
            max_segments,
            pieces: n,
            policies,
            entry,
            wire: frame_wire,
        } = run;
        let latest = now.saturating_add(self.max_delay);
        let (mut first, mut last) = (Timestamp::ZERO, Timestamp::ZERO);
        let mut queued = 0;
        for k in 0..n {
            let wire = piece_wire_bytes(sf, k, max_segments);
            let edt = policies
                .stamp(&mut self.stamper, at, at, clamp_u32(wire))
                .min(latest);
            let len16 = u16::try_from(wire).unwrap_or(u16::MAX);
            let pkt = PacketRef::new(encode(id, k), flow, ClassId(index as u32), len16);
            match self.wheel.enqueue(now, edt, pkt) {
                Ok(()) => {
                    if k == 0 {
                        first = edt;
                    }
                    last = edt;
                    queued += 1;
                    self.count_queued(index, id, wire);
                    self.classes[index].stamped_bytes += wire;
                    if let Some(e) = entry {
                        self.flows.add_queued(e);
                    }
                }
                Err(rejected) => {
                    let reason = reject_reason(rejected.reason);
                    if k == 0 {
                        return Err(reason);
                    }
                    let lost = u64::from(n - k);
                    self.counters.pieces_dropped += lost;
                    self.class_count(index, |s| s.drops[reason as usize] += lost);
                    break;
                }
            }
        }
        self.counters.enqueued += u64::from(queued);
        self.counters.pieces_extra += u64::from(queued - 1);
        let booking = Booking {
            edt: first,
            last,
            wire: frame_wire,
            entry,
            cut: Some((max_segments, queued)),
        };
        self.slots.book(pool, id, booking);
        Ok(())
    }
}
