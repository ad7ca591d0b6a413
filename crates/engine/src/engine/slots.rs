//! What the engine keeps per frame-pool slot while the slot's frame is queued: one record per
//! slot, indexed by the slot id that the wheel's `PacketRef::id` carries (with a piece index
//! above [`metronome_io::piece::PIECE_SHIFT`] for a cut super-frame).
//!
//! * **Book** ([`Slots::book`]) when a frame enters the wheel: its EDT (a cut frame's first
//!   piece's, with the step between its pieces' EDTs), its wire bytes (a `PacketRef`'s `u16`
//!   length saturates above 65 535), its flow-table entry, and its cut, which goes to the frame
//!   pool with the slot ([`metronome_io::FramePool::set_cut`]: the port sends the pieces).
//! * **Hold** ([`Slots::hold`]) while a frame waits in a fair queue: its wire bytes, its entry,
//!   and the cut it will be given when pulled ([`PendingCut`]), which the pull takes back
//!   ([`Slots::take_pending`]).
//! * **Depart** ([`Slots::depart`]): a queued entry's EDT (lateness at release), entry and wire
//!   bytes. **Discard** ([`Slots::discard`], [`Slots::discard_held`]): the same for an entry or
//!   a held frame that will not be sent, and its slot freed through the pool
//!   ([`metronome_io::FramePool::free_entry`], after a cut frame's last piece).
//!
//! One record of 32 bytes per slot rather than one vector per field: a departure reads one
//! cache line (CONTRIBUTING.md §5). The pending cuts, touched only by super-frames of fair
//! classes, are apart.

use metronome_core::{Duration, PacketRef, Timestamp};
use metronome_io::piece::decode;
use metronome_io::FramePool;
use metronome_packet::SuperFrame;

/// No flow entry for a slot.
const NO_ENTRY: u32 = u32::MAX;

/// How a slot's frame is queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Plan {
    /// One entry for the whole frame (or nothing queued).
    #[default]
    Whole,
    /// Cut into pieces, one entry each; the pool holds the cut.
    Pieces,
    /// Waiting in a fair queue, to be cut when pulled (its [`PendingCut`] in `Slots::pending`).
    Pending,
}

/// The record of one slot.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// EDT of the frame, or of its first piece.
    edt: Timestamp,
    /// Nanoseconds between the EDTs of consecutive pieces (0 for a whole frame).
    step_ns: u64,
    /// Flow-table entry, or [`NO_ENTRY`].
    entry: u32,
    /// Wire bytes of the whole frame.
    wire: u32,
    plan: Plan,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            edt: Timestamp::ZERO,
            step_ns: 0,
            entry: NO_ENTRY,
            wire: 0,
            plan: Plan::Whole,
        }
    }
}

/// A super-frame's cut, kept while it waits in a fair queue.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingCut {
    /// The frame's walked headers.
    pub sf: SuperFrame,
    /// Segments per piece.
    pub max_segments: u32,
    /// Pieces.
    pub pieces: u32,
}

/// How a frame entered the wheel ([`Slots::book`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Booking {
    /// EDT of the frame, or of its first piece.
    pub edt: Timestamp,
    /// EDT of its last piece (`edt` for a whole frame).
    pub last: Timestamp,
    /// Wire bytes of the whole frame.
    pub wire: u64,
    /// Its flow-table entry.
    pub entry: Option<u32>,
    /// Cut into `pieces` queued pieces of `max_segments` segments; `None`: whole.
    pub cut: Option<(u32, u32)>,
}

/// What a queued entry leaves with ([`Slots::depart`], [`Slots::discard`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Departure {
    /// The entry's EDT (a piece's: its frame's first EDT plus its index times the step).
    pub edt: Timestamp,
    /// Its flow-table entry.
    pub entry: Option<u32>,
    /// Its wire bytes: a piece's length, or the whole frame's.
    pub wire: u64,
}

/// The records of every pool slot. See the module docs.
#[derive(Debug)]
pub(super) struct Slots {
    slots: Vec<Slot>,
    /// The cut of each slot whose super-frame waits in a fair queue (allocated at the first).
    pending: Vec<Option<PendingCut>>,
}

fn entry_of(e: u32) -> Option<u32> {
    (e != NO_ENTRY).then_some(e)
}

impl Slots {
    /// Records for a pool of `n` slots.
    pub(super) fn new(n: usize) -> Slots {
        Slots {
            slots: vec![Slot::default(); n],
            pending: Vec::new(),
        }
    }

    /// Books the frame in slot `id`, which entered the wheel as `b` says; a cut goes to `pool`.
    pub(super) fn book(&mut self, pool: &mut FramePool, id: u32, b: Booking) {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return;
        };
        let (step_ns, plan) = match b.cut {
            Some((max_segments, queued)) => {
                pool.set_cut(id, max_segments, queued);
                let step = b.last.saturating_since(b.edt).as_nanos();
                (
                    step / u64::from(queued.saturating_sub(1).max(1)),
                    Plan::Pieces,
                )
            }
            None => (0, Plan::Whole),
        };
        *slot = Slot {
            edt: b.edt,
            step_ns,
            entry: b.entry.unwrap_or(NO_ENTRY),
            wire: super::clamp_u32(b.wire),
            plan,
        };
    }

    /// Records the frame in slot `id` waiting in a fair queue: `wire` bytes, flow-table entry
    /// `entry`, and the cut it gets when pulled.
    pub(super) fn hold(&mut self, id: u32, wire: u64, entry: Option<u32>, cut: Option<PendingCut>) {
        let i = id as usize;
        let n = self.slots.len();
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        slot.entry = entry.unwrap_or(NO_ENTRY);
        slot.wire = super::clamp_u32(wire);
        slot.plan = Plan::Whole;
        if let Some(cut) = cut {
            if self.pending.is_empty() {
                self.pending = vec![None; n];
            }
            slot.plan = Plan::Pending;
            self.pending[i] = Some(cut);
        }
    }

    /// The flow-table entry of the frame in slot `id`.
    pub(super) fn entry(&self, id: u32) -> Option<u32> {
        self.slots.get(id as usize).and_then(|s| entry_of(s.entry))
    }

    /// Takes the cut a held frame in slot `id` is to get (none when it goes whole).
    pub(super) fn take_pending(&mut self, id: u32) -> Option<PendingCut> {
        let i = id as usize;
        let slot = self.slots.get_mut(i)?;
        if slot.plan != Plan::Pending {
            return None;
        }
        slot.plan = Plan::Whole;
        self.pending.get_mut(i).and_then(Option::take)
    }

    /// The wire bytes of queued entry `pkt`: a piece's length, or the whole frame's.
    pub(super) fn wire(&self, pkt: PacketRef) -> u64 {
        let (slot, _) = decode(pkt.id);
        match self.slots.get(slot as usize) {
            Some(s) if s.plan == Plan::Whole => u64::from(s.wire),
            _ => u64::from(pkt.len),
        }
    }

    /// Queued entry `pkt` waits again, until `edt` (its ancestors in a class tree held it back):
    /// a whole frame's EDT becomes `edt`, so that its lateness counts from then; a piece's stays
    /// its frame's (its pieces share one record).
    pub(super) fn restamp(&mut self, pkt: PacketRef, edt: Timestamp) {
        let (slot, _) = decode(pkt.id);
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.plan == Plan::Whole {
                s.edt = edt;
            }
        }
    }

    /// What queued entry `pkt` leaves with at `now` (its EDT is `now` for an id out of range).
    pub(super) fn depart(&self, pkt: PacketRef, now: Timestamp) -> Departure {
        let (slot, piece) = decode(pkt.id);
        let Some(s) = self.slots.get(slot as usize) else {
            return Departure {
                edt: now,
                entry: None,
                wire: u64::from(pkt.len),
            };
        };
        let (edt, wire) = match s.plan {
            Plan::Whole => (s.edt, u64::from(s.wire)),
            _ => {
                let after = Duration::from_nanos(s.step_ns * u64::from(piece));
                (s.edt.saturating_add(after), u64::from(pkt.len))
            }
        };
        Departure {
            edt,
            entry: entry_of(s.entry),
            wire,
        }
    }

    /// Queued entry `pkt` will not be sent: frees it in `pool` (a cut frame's slot after its
    /// last piece) and returns what it leaves with.
    pub(super) fn discard(&mut self, pool: &mut FramePool, pkt: PacketRef) -> Departure {
        let d = self.depart(pkt, Timestamp::ZERO);
        pool.free_entry(pkt.id);
        d
    }

    /// The frame held in slot `id` (a fair queue's) will not be sent: frees its slot and
    /// returns its flow-table entry.
    pub(super) fn discard_held(&mut self, pool: &mut FramePool, id: u32) -> Option<u32> {
        self.take_pending(id);
        pool.free(id);
        self.entry(id)
    }
}

#[cfg(test)]
mod tests;
