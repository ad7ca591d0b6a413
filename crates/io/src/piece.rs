//! Pieces of cut super-frames (NicPic §3: a large segment bursts, so a shaper sends it as smaller
//! pieces, each with its own departure time, and classes interleave at fine granularity).
//!
//! The cut travels with the pool slot ([`FramePool::set_cut`]); piece `k` of slot `s` is the id
//! [`encode`]`(s, k)` ([`PIECE_SHIFT`], [`decode`]); the port sends pieces itself
//! ([`crate::PacketPort::send`], headers written from [`metronome_packet::SuperFrame::piece`]) and
//! the slot is freed after its last piece ([`FramePool::free_entry`]); counted in [`CutCounters`].
//! A piece's wire length fits a `PacketRef`'s `u16`
//! ([`metronome_packet::SuperFrame::segments_within`]). In full: `docs/design/nicpic.md`.

use crate::frame_pool::FramePool;
use crate::port::PortError;
use metronome_packet::{SuperFrame, VnetHdr};

/// Bits of an entry id that hold the pool slot; the piece index is above them.
pub const PIECE_SHIFT: u32 = 24;
/// Mask of the slot bits of an entry id.
const SLOT_MASK: u32 = (1 << PIECE_SHIFT) - 1;
/// Most pieces one super-frame is cut into: the piece index has 8 bits.
pub const MAX_PIECES: u32 = 1 << (32 - PIECE_SHIFT);
/// Bytes of scratch for one piece's headers: Ethernet with two VLAN tags (22), IPv6 (40) or
/// IPv4 with options (60), TCP with options (60), rounded up.
pub const HEADER_SCRATCH: usize = 160;
/// Pieces whose headers one send prepares at a time: twice the daemon's largest transmit batch
/// (`metronome_daemon::ops::config::MAX_BATCH_SIZE`, 1024), so a batch is never split for its
/// pieces.
pub const PIECE_BATCH: usize = 2048;

/// The entry id of piece `piece` of the frame in `slot`.
pub const fn encode(slot: u32, piece: u32) -> u32 {
    (piece << PIECE_SHIFT) | (slot & SLOT_MASK)
}

/// The (slot, piece) of an entry id.
pub const fn decode(id: u32) -> (u32, u32) {
    (id & SLOT_MASK, id >> PIECE_SHIFT)
}

/// How the super-frame in a pool slot is cut ([`FramePool::cut`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotCut {
    /// Segments per piece; 0 when the slot's frame is not cut.
    pub max_segments: u16,
    /// Pieces not yet sent or discarded.
    pub outstanding: u16,
}

/// Counters of the cutting, cumulative ([`FramePool::cut_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutCounters {
    /// Super-frames cut into more than one piece.
    pub frames_cut: u64,
    /// Pieces handed to a port.
    pub pieces_sent: u64,
    /// Pieces whose headers could not be rewritten when due (the frame changed under the
    /// shaper: should stay 0), dropped.
    pub pieces_failed: u64,
}

/// One piece to send: the message is `vnet`'s 10 bytes, then `headers`, then `payload`
/// (`AfPacketPort::send_pieces` has the kernel gather them: the payload is not copied in user
/// space).
#[derive(Clone, Copy, Debug)]
pub struct TxPiece<'a> {
    /// The virtio-net header (from [`metronome_packet::Piece::vnet`]).
    pub vnet: VnetHdr,
    /// Ethernet through TCP headers (the scratch buffer [`metronome_packet::SuperFrame::piece`]
    /// wrote).
    pub headers: &'a [u8],
    /// The payload (a slice of the pooled super-frame).
    pub payload: &'a [u8],
}

/// A port's scratch for the headers of the pieces of one send: [`PIECE_BATCH`] buffers of
/// [`HEADER_SCRATCH`] bytes, allocated at the first piece the port sends.
#[derive(Default)]
pub(crate) struct PieceScratch {
    headers: Vec<[u8; HEADER_SCRATCH]>,
}

/// What a port does with the runs of a send that holds pieces ([`send_entries`]).
pub(crate) trait PieceSink {
    /// Sends whole frames (the port's plain send): returns how many leading ids were consumed.
    fn send_frames(&mut self, pool: &mut FramePool, ids: &[u32]) -> Result<usize, PortError>;
    /// Sends pieces in order; returns how many leading ones were consumed (sent or refused for
    /// good), the rest not sent because the port was busy.
    fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError>;
    /// The port's scratch for the headers of the pieces of one send.
    fn scratch(&mut self) -> &mut PieceScratch;
}

/// A port's [`crate::PacketPort::send`]: its plain send while no slot of `pool` is cut, else
/// [`send_entries`] with the port's scratch.
pub(crate) fn send<S: PieceSink>(
    sink: &mut S,
    pool: &mut FramePool,
    ids: &[u32],
) -> Result<usize, PortError> {
    if !pool.has_cuts() {
        return sink.send_frames(pool, ids);
    }
    let mut scratch = std::mem::take(sink.scratch());
    let sent = send_entries(sink, &mut scratch, pool, ids);
    *sink.scratch() = scratch;
    sent
}

/// [`crate::PacketPort::send`] of `ids`, frames and pieces, in order: runs of frames with
/// [`PieceSink::send_frames`], runs of pieces with [`PieceSink::send_pieces`] (their headers
/// written into `scratch`). Returns how many leading ids were consumed (sent or refused for
/// good); the rest stay with the caller (the port was busy).
pub(crate) fn send_entries<S: PieceSink>(
    sink: &mut S,
    scratch: &mut PieceScratch,
    pool: &mut FramePool,
    ids: &[u32],
) -> Result<usize, PortError> {
    let mut done = 0;
    while done < ids.len() {
        let piece = pool.is_piece(ids[done]);
        let run = ids[done..]
            .iter()
            .take_while(|&&id| pool.is_piece(id) == piece)
            .count();
        let run = &ids[done..done + run];
        let sent = if piece {
            send_run(sink, scratch, pool, run)?
        } else {
            sink.send_frames(pool, run)?
        };
        done += sent;
        if sent < run.len() {
            break;
        }
    }
    Ok(done)
}

/// Writes the headers of piece entry `id` into `scratch` and returns the piece's vnet header,
/// header length and payload range.
fn headers(
    pool: &FramePool,
    id: u32,
    scratch: &mut [u8; HEADER_SCRATCH],
) -> Option<(VnetHdr, usize, std::ops::Range<usize>)> {
    let (slot, piece) = decode(id);
    let cut = pool.cut(id)?;
    let frame = pool.frame(slot);
    let sf = SuperFrame::parse(frame, &pool.vnet(slot)).ok()?;
    let p = sf
        .piece(frame, piece, u32::from(cut.max_segments), scratch)
        .ok()?;
    Some((p.vnet, p.header_len, p.payload))
}

/// Sends a run of piece entries (at most [`PIECE_BATCH`] at a time).
fn send_run<S: PieceSink>(
    sink: &mut S,
    scratch: &mut PieceScratch,
    pool: &mut FramePool,
    run: &[u32],
) -> Result<usize, PortError> {
    if scratch.headers.is_empty() {
        scratch.headers = vec![[0; HEADER_SCRATCH]; PIECE_BATCH];
    }
    let run = &run[..run.len().min(PIECE_BATCH)];
    let mut meta = [(VnetHdr::NONE, 0usize, 0usize, 0usize); PIECE_BATCH];
    let mut ok = [false; PIECE_BATCH];
    for (k, &id) in run.iter().enumerate() {
        if let Some((vnet, h, payload)) = headers(pool, id, &mut scratch.headers[k]) {
            meta[k] = (vnet, h, payload.start, payload.end);
            ok[k] = true;
        }
    }
    let mut list = [TxPiece {
        vnet: VnetHdr::NONE,
        headers: &[],
        payload: &[],
    }; PIECE_BATCH];
    let mut n = 0;
    for (k, &id) in run.iter().enumerate() {
        if !ok[k] {
            continue;
        }
        let (vnet, h, start, end) = meta[k];
        let (slot, _) = decode(id);
        list[n] = TxPiece {
            vnet,
            headers: &scratch.headers[k][..h],
            payload: pool.frame(slot).get(start..end).unwrap_or(&[]),
        };
        n += 1;
    }
    let sent = if n > 0 {
        sink.send_pieces(&list[..n])?
    } else {
        0
    };
    // Consumed: the leading `sent` good pieces and the failed ones among them (dropped,
    // counted).
    let mut consumed = 0;
    let mut good = 0;
    let mut failed = 0;
    for (k, &id) in run.iter().enumerate() {
        if ok[k] {
            if good == sent {
                break;
            }
            good += 1;
        } else {
            failed += 1;
        }
        pool.free_entry(id);
        consumed += 1;
    }
    pool.count_pieces(sent as u64, failed);
    Ok(consumed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for (slot, piece) in [(0, 0), (65_791, 3), (SLOT_MASK, MAX_PIECES - 1)] {
            assert_eq!(decode(encode(slot, piece)), (slot, piece));
        }
    }
}
