//! Super-frames cut into pieces on the way out (NicPic §3: large segments burst, so the shaper
//! pulls smaller pieces of them through a per-class offset and classes interleave at fine
//! granularity).
//!
//! A GSO super-frame whose transmission at its class's rate would take longer than the class's
//! `gso_burst` is cut, when it is queued, into pieces of at most `max_segments` segments
//! (at least two, as the kernel's `tcp_tso_autosize` keeps at least two segments per burst);
//! [`crate::engine::Engine`] gives each piece its own EDT and its own wheel entry. The entry's id
//! is [`encode`]`(slot, piece)`: the pool slot in the low [`PIECE_SHIFT`] bits, the piece index
//! above. The frame stays whole in its slot; nothing is copied or allocated per piece: when a
//! piece is due, [`Cuts::headers`] writes its headers into a per-batch scratch buffer
//! ([`metronome_packet::SuperFrame::piece`]) and the port gathers headers and a slice of the
//! pooled frame (`AfPacketPort::send_pieces`). The slot is freed after its last piece is sent
//! or discarded ([`Cuts::finish`]).
//!
//! A piece's wire length fits the `u16` of a `metronome_core::PacketRef`: its segments are also
//! bounded by 65 535 wire bytes ([`metronome_packet::SuperFrame::segments_within`]). A frame
//! within the bound is not cut however long it is (at 10 Gbit/s a whole 64 KiB super-frame is
//! 54 µs): one `send` message rather than two.

use metronome_io::{AfPacketPort, FramePool, MemoryPort, PacketPort, PortError, TxPiece};
use metronome_packet::{SuperFrame, VnetHdr};

/// Bits of a wheel entry's id that hold the pool slot; the piece index is above them.
pub const PIECE_SHIFT: u32 = 24;
/// Mask of the slot bits of an entry id.
const SLOT_MASK: u32 = (1 << PIECE_SHIFT) - 1;
/// Most pieces one super-frame is cut into: the piece index has 8 bits.
pub const MAX_PIECES: u32 = 1 << (32 - PIECE_SHIFT);
/// Bytes of scratch for one piece's headers: Ethernet with two VLAN tags (22), IPv6 (40) or
/// IPv4 with options (60), TCP with options (60), rounded up.
pub const HEADER_SCRATCH: usize = 160;
/// Pieces handed to one `send_pieces` call: the daemon's largest transmit batch.
const PIECE_BATCH: usize = 2 * crate::config::MAX_BATCH_SIZE;

/// The wheel entry id of piece `piece` of the frame in `slot`.
pub const fn encode(slot: u32, piece: u32) -> u32 {
    (piece << PIECE_SHIFT) | (slot & SLOT_MASK)
}

/// The (slot, piece) of a wheel entry id.
pub const fn decode(id: u32) -> (u32, u32) {
    (id & SLOT_MASK, id >> PIECE_SHIFT)
}

/// How a queued super-frame is cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SlotCut {
    /// Segments per piece; 0 when the slot's frame is not cut.
    max_segments: u16,
    /// Pieces not yet sent or discarded.
    outstanding: u16,
}

/// Counters of the cutting.
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

/// The cut of every pool slot and the scratch where due pieces' headers are written. See the
/// module docs.
pub struct Cuts {
    slots: Vec<SlotCut>,
    scratch: Vec<[u8; HEADER_SCRATCH]>,
    counters: CutCounters,
}

impl std::fmt::Debug for Cuts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cuts")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Cuts {
    /// No cuts, for a pool of `slots` slots.
    pub fn new(slots: usize) -> Cuts {
        Cuts {
            slots: vec![SlotCut::default(); slots],
            scratch: vec![[0; HEADER_SCRATCH]; PIECE_BATCH],
            counters: CutCounters::default(),
        }
    }

    /// Records that the frame in `slot` is cut into `pieces` pieces of `max_segments` segments.
    pub(crate) fn start(&mut self, slot: u32, max_segments: u32, pieces: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = SlotCut {
                max_segments: max_segments.min(u32::from(u16::MAX)) as u16,
                outstanding: pieces.min(u32::from(u16::MAX)) as u16,
            };
            self.counters.frames_cut += 1;
        }
    }

    /// Lowers the pieces outstanding of `slot` to `pieces` (the rest were never queued).
    pub(crate) fn truncate(&mut self, slot: u32, pieces: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.outstanding = s.outstanding.min(pieces as u16);
        }
    }

    /// True if the entry `id` is a piece of a cut frame.
    pub fn is_piece(&self, id: u32) -> bool {
        let (slot, _) = decode(id);
        self.slots
            .get(slot as usize)
            .is_some_and(|s| s.max_segments > 0)
    }

    /// One piece of entry `id` is done with (sent or discarded): frees its slot after the last.
    /// A plain frame's slot is freed at once.
    pub fn finish(&mut self, pool: &mut FramePool, id: u32) {
        let (slot, _) = decode(id);
        match self.slots.get_mut(slot as usize) {
            Some(s) if s.max_segments > 0 => {
                s.outstanding = s.outstanding.saturating_sub(1);
                if s.outstanding == 0 {
                    *s = SlotCut::default();
                    pool.free(slot);
                }
            }
            _ => {
                pool.free(slot);
            }
        }
    }

    /// The counters.
    pub fn counters(&self) -> CutCounters {
        self.counters
    }

    /// Writes the headers of piece entry `id` into scratch `k` and returns the piece's vnet
    /// header, header length and payload range.
    fn headers(
        &mut self,
        pool: &FramePool,
        id: u32,
        k: usize,
    ) -> Option<(VnetHdr, usize, std::ops::Range<usize>)> {
        let (slot, piece) = decode(id);
        let cut = *self.slots.get(slot as usize)?;
        let frame = pool.frame(slot);
        let sf = SuperFrame::parse(frame, &pool.vnet(slot)).ok()?;
        let scratch = self.scratch.get_mut(k)?;
        let p = sf
            .piece(frame, piece, u32::from(cut.max_segments), scratch)
            .ok()?;
        Some((p.vnet, p.header_len, p.payload))
    }

    /// Sends `ids` on `port` in order: plain frames with [`PacketPort::send`], pieces with
    /// [`SendPieces::send_pieces`]. Returns how many leading ids were consumed (sent or
    /// refused for good); the rest stay with the caller (the port was busy).
    pub fn send<P: PacketPort + SendPieces>(
        &mut self,
        port: &mut P,
        pool: &mut FramePool,
        ids: &[u32],
    ) -> Result<usize, PortError> {
        let mut done = 0;
        while done < ids.len() {
            let piece = self.is_piece(ids[done]);
            let run = ids[done..]
                .iter()
                .take_while(|&&id| self.is_piece(id) == piece)
                .count();
            let run = &ids[done..done + run];
            let sent = if piece {
                self.send_run(port, pool, run)?
            } else {
                port.send(pool, run)?
            };
            done += sent;
            if sent < run.len() {
                break;
            }
        }
        Ok(done)
    }

    /// Sends a run of piece entries (at most [`PIECE_BATCH`] at a time).
    fn send_run<P: SendPieces>(
        &mut self,
        port: &mut P,
        pool: &mut FramePool,
        run: &[u32],
    ) -> Result<usize, PortError> {
        let run = &run[..run.len().min(PIECE_BATCH)];
        let mut meta = [(VnetHdr::NONE, 0usize, 0usize, 0usize); PIECE_BATCH];
        let mut ok = [false; PIECE_BATCH];
        for (k, &id) in run.iter().enumerate() {
            if let Some((vnet, h, payload)) = self.headers(pool, id, k) {
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
                headers: &self.scratch[k][..h],
                payload: pool.frame(slot).get(start..end).unwrap_or(&[]),
            };
            n += 1;
        }
        let sent = if n > 0 {
            port.send_pieces(&list[..n])?
        } else {
            0
        };
        // Consumed: the leading `sent` good pieces and the failed ones among them (dropped,
        // counted).
        let mut consumed = 0;
        let mut good = 0;
        for (k, &id) in run.iter().enumerate() {
            if ok[k] {
                if good == sent {
                    break;
                }
                good += 1;
            } else {
                self.counters.pieces_failed += 1;
            }
            self.finish(pool, id);
            consumed += 1;
        }
        self.counters.pieces_sent += sent as u64;
        Ok(consumed)
    }
}

/// A port that sends pieces of super-frames: headers from a scratch buffer, payload from the
/// pool (`AfPacketPort::send_pieces`).
pub trait SendPieces {
    /// Sends `pieces` in order; returns how many leading ones were consumed (sent or refused
    /// for good), the rest not sent because the port was busy.
    fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError>;
}

impl SendPieces for AfPacketPort {
    fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError> {
        AfPacketPort::send_pieces(self, pieces)
    }
}

thread_local! {
    /// The memory port's staging pool: a piece is assembled there and sent as a frame.
    static STAGING: std::cell::RefCell<FramePool> = std::cell::RefCell::new(
        FramePool::with_large(4, metronome_io::DEFAULT_SLOT_SIZE, 4, metronome_io::GSO_SLOT_SIZE),
    );
}

/// The in-memory port (tests, benchmarks) sends a piece as one frame: headers then payload,
/// with the piece's virtio-net header in its slot.
impl SendPieces for MemoryPort {
    fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError> {
        STAGING.with(|staging| {
            let mut pool = staging.borrow_mut();
            let mut done = 0;
            for p in pieces {
                let len = p.headers.len() + p.payload.len();
                let Ok(id) = pool.alloc_for(len) else {
                    break;
                };
                let slot = pool.slot_mut(id);
                slot[..p.headers.len()].copy_from_slice(p.headers);
                slot[p.headers.len()..len].copy_from_slice(p.payload);
                pool.set_len(id, len);
                pool.set_vnet(id, p.vnet);
                let sent = self.send(&mut pool, &[id])?;
                if sent == 0 {
                    pool.free(id);
                    break;
                }
                done += 1;
            }
            Ok(done)
        })
    }
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
