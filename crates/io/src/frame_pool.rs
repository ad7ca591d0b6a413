//! The frame pool: N preallocated, fixed-size frame buffers with a free list, indexed by `u32`.
//!
//! The shaper queues packet references ([`metronome_core::PacketRef`], Carousel §5.2), so a port
//! copies every received frame once into a pool slot and hands the kernel its ring block back at
//! once. One contiguous buffer per size class ([`DEFAULT_SLOT_SIZE`] slots and a bounded number of
//! [`GSO_SLOT_SIZE`] slots for super-frames, [`StoreError::NoLargeSlot`] when none is free), with
//! parallel vectors of lengths, [`VnetHdr`]s and origin tags ([`FramePool::origin`]), and a LIFO
//! free stack per class: O(1), no allocation (CONTRIBUTING.md §5). A slot also carries the cut of
//! its super-frame ([`FramePool::set_cut`], [`FramePool::free_entry`], [`CutCounters`]). Why one
//! copy beats holding ring blocks, and why two classes: ARCHITECTURE.md, "The frame pool".

use crate::piece::{decode, CutCounters, SlotCut};
use metronome_packet::VnetHdr;

/// Default slot size in bytes: a 1500-byte MTU frame plus Ethernet and 802.1Q headers, rounded up
/// to a power of two. Enough when GRO, GSO and TSO are off on the interfaces.
pub const DEFAULT_SLOT_SIZE: usize = 2048;

/// Slot size in bytes for GRO/GSO super-frames: the kernel's default `gso_max_size`
/// (`GSO_LEGACY_MAX_SIZE`, 65 536 bytes, include/linux/netdevice.h) bounds such a frame. Needed
/// when TSO/GSO/GRO cannot be turned off (no `ethtool`); 32× the memory of
/// [`DEFAULT_SLOT_SIZE`]. Frames above the slot size are dropped under `rx_oversize`. With
/// `AfPacketConfig::vnet_hdr`, a [`FramePool::with_large`] pool holds super-frames in a bounded
/// number of [`GSO_SLOT_SIZE`] slots instead.
pub const JUMBO_SLOT_SIZE: usize = 65_536;

/// Slot size in bytes of the large class for GSO/GRO super-frames with a virtio-net header
/// (`AfPacketConfig::vnet_hdr`): the largest IP packet the kernel builds under its default
/// `gso_max_size`/`gro_max_size` (65 536, `GSO_LEGACY_MAX_SIZE` in include/linux/netdevice.h; an
/// IPv4 total length is at most 65 535) plus a 14-byte Ethernet header and two re-inserted
/// 4-byte VLAN tags, 65 557 bytes, rounded up to a multiple of 128.
pub const GSO_SLOT_SIZE: usize = 65_664;

/// Why [`FramePool::store`] could not take a frame. The frame is not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Every slot of the class the frame needs is in use (the small class for frames up to
    /// [`FramePool::slot_size`]).
    #[error("frame pool exhausted")]
    Exhausted,
    /// The frame is longer than a small slot and every large slot is in use.
    #[error("frame of {len} bytes finds no free large slot")]
    NoLargeSlot {
        /// Length of the refused frame in bytes.
        len: usize,
    },
    /// The frame is longer than the largest slot.
    #[error("frame of {len} bytes exceeds the {slot_size}-byte slot")]
    Oversize {
        /// Length of the refused frame in bytes.
        len: usize,
        /// The pool's largest slot size in bytes.
        slot_size: usize,
    },
}

/// A fixed pool of frame buffers in two size classes, indexed by `u32` slot ids.
///
/// Ids `0..small` are slots of [`FramePool::slot_size`] bytes, ids `small..capacity` slots of
/// [`FramePool::large_slot_size`] bytes. [`FramePool::new`] makes a pool of one class. Every
/// slot also holds the [`VnetHdr`] its frame was received with (or is to be sent with) and its
/// origin tag ([`FramePool::origin`]).
pub struct FramePool {
    /// Small slots then large slots: slot `i < small` is `bytes[i*slot_size..][..slot_size]`,
    /// slot `small + j` is `bytes[small*slot_size + j*large_slot_size..][..large_slot_size]`.
    bytes: Vec<u8>,
    /// Frame length of each slot in bytes (0 when free).
    lens: Vec<u32>,
    /// Virtio-net header of each slot ([`VnetHdr::NONE`] when free).
    vnet: Vec<VnetHdr>,
    /// Origin tag of each slot's frame (0 when free or of no known origin).
    origins: Vec<u16>,
    /// Cut of each slot's super-frame ([`SlotCut::default`] when not cut or free).
    cuts: Vec<SlotCut>,
    /// Slots with a cut: while 0, sends and frees skip `cuts`.
    cut_slots: u32,
    cut_counters: CutCounters,
    /// True for allocated slots: catches double frees and use of free slots.
    in_use: Vec<bool>,
    /// Free small slot ids, a LIFO stack.
    free: Vec<u32>,
    /// Free large slot ids, a LIFO stack.
    free_large: Vec<u32>,
    slot_size: usize,
    large_slot_size: usize,
    /// Number of small slots: the first large id.
    small: u32,
}

impl FramePool {
    /// A pool of `slots` slots of `slot_size` bytes each, all free, and no large class.
    /// Allocates `slots × slot_size` bytes once. `slot_size` is at least 64 (a minimum
    /// Ethernet frame).
    pub fn new(slots: u32, slot_size: usize) -> Self {
        Self::with_large(slots, slot_size, 0, 0)
    }

    /// A pool of `small` slots of `slot_size` bytes and `large` slots of `large_slot_size`
    /// bytes (at least `slot_size`; [`GSO_SLOT_SIZE`] for super-frames), all free. Allocates
    /// `small × slot_size + large × large_slot_size` bytes once: 8 192 slots of 2 KiB and 256
    /// of 64 KiB are 32 MiB, where 8 448 slots of 64 KiB would be 541 MiB.
    pub fn with_large(small: u32, slot_size: usize, large: u32, large_slot_size: usize) -> Self {
        let slot_size = slot_size.max(64);
        let large_slot_size = if large == 0 {
            slot_size
        } else {
            large_slot_size.max(slot_size)
        };
        let n = small as usize + large as usize;
        let total = small as usize * slot_size + large as usize * large_slot_size;
        FramePool {
            bytes: vec![0; total],
            lens: vec![0; n],
            vnet: vec![VnetHdr::NONE; n],
            origins: vec![0; n],
            cuts: vec![SlotCut::default(); n],
            cut_slots: 0,
            cut_counters: CutCounters::default(),
            in_use: vec![false; n],
            // Reversed so that the lowest id is handed out first.
            free: (0..small).rev().collect(),
            free_large: (small..small + large).rev().collect(),
            slot_size,
            large_slot_size,
            small,
        }
    }

    /// Bytes per small slot: the longest frame a small slot holds.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Bytes per large slot (equal to [`FramePool::slot_size`] without a large class).
    pub fn large_slot_size(&self) -> usize {
        self.large_slot_size
    }

    /// Total number of slots, both classes.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Number of large slots.
    pub fn large_capacity(&self) -> usize {
        self.capacity() - self.small as usize
    }

    /// Number of free slots, both classes.
    pub fn available(&self) -> usize {
        self.free.len() + self.free_large.len()
    }

    /// Number of free small slots.
    pub fn available_small(&self) -> usize {
        self.free.len()
    }

    /// Number of free large slots.
    pub fn available_large(&self) -> usize {
        self.free_large.len()
    }

    /// Number of allocated slots.
    pub fn in_use(&self) -> usize {
        self.capacity() - self.available()
    }

    /// True if `id` is a large slot.
    pub fn is_large(&self, id: u32) -> bool {
        id >= self.small && (id as usize) < self.capacity()
    }

    /// Start and size of slot `id` in `bytes`, or `None` out of range.
    fn span(&self, id: u32) -> Option<(usize, usize)> {
        if (id as usize) >= self.capacity() {
            None
        } else if id < self.small {
            Some((id as usize * self.slot_size, self.slot_size))
        } else {
            let j = (id - self.small) as usize;
            let base = self.small as usize * self.slot_size;
            Some((base + j * self.large_slot_size, self.large_slot_size))
        }
    }

    /// Takes a free small slot, with frame length 0, [`VnetHdr::NONE`] and origin 0, or `None`
    /// if every small slot is in use.
    pub fn alloc(&mut self) -> Option<u32> {
        let id = self.free.pop()?;
        self.take(id);
        Some(id)
    }

    /// Takes a free large slot, with frame length 0, [`VnetHdr::NONE`] and origin 0, or `None`
    /// if every large slot is in use (or the pool has none).
    pub fn alloc_large(&mut self) -> Option<u32> {
        let id = self.free_large.pop()?;
        self.take(id);
        Some(id)
    }

    fn take(&mut self, id: u32) {
        self.in_use[id as usize] = true;
        self.lens[id as usize] = 0;
        self.vnet[id as usize] = VnetHdr::NONE;
        self.origins[id as usize] = 0;
    }

    /// Takes a free slot for a frame of `len` bytes: small if it fits one, else large. The
    /// frame length is left 0 (fill the slot, then [`FramePool::set_len`]).
    pub fn alloc_for(&mut self, len: usize) -> Result<u32, StoreError> {
        if len <= self.slot_size {
            self.alloc().ok_or(StoreError::Exhausted)
        } else if len <= self.large_slot_size && self.large_capacity() > 0 {
            self.alloc_large().ok_or(StoreError::NoLargeSlot { len })
        } else {
            Err(StoreError::Oversize {
                len,
                slot_size: self.large_slot_size,
            })
        }
    }

    /// Copies `frame` into a free slot (small if it fits one, else large) and returns its id.
    pub fn store(&mut self, frame: &[u8]) -> Result<u32, StoreError> {
        let len = frame.len();
        let id = self.alloc_for(len)?;
        self.slot_mut(id)[..len].copy_from_slice(frame);
        self.lens[id as usize] = len as u32;
        Ok(id)
    }

    /// Returns slot `id` to its free list. Returns `false` (and changes nothing) if `id` is out
    /// of range or already free — a caller bug, caught by a debug assertion.
    pub fn free(&mut self, id: u32) -> bool {
        let ok = self.in_use.get(id as usize).copied().unwrap_or(false);
        debug_assert!(ok, "freeing slot {id} that is not allocated");
        if ok {
            self.in_use[id as usize] = false;
            self.lens[id as usize] = 0;
            self.vnet[id as usize] = VnetHdr::NONE;
            self.origins[id as usize] = 0;
            if self.cut_slots > 0 && self.cuts[id as usize] != SlotCut::default() {
                self.cuts[id as usize] = SlotCut::default();
                self.cut_slots -= 1;
            }
            if id < self.small {
                self.free.push(id);
            } else {
                self.free_large.push(id);
            }
        }
        ok
    }

    /// Records that the super-frame in allocated slot `slot` is cut into `pieces` pieces of
    /// `max_segments` segments (at most [`crate::piece::MAX_PIECES`]), its entries
    /// [`crate::piece::encode`]`(slot, k)`; counted in `frames_cut`. Ignored for a free slot,
    /// an id out of range or `max_segments` 0.
    pub fn set_cut(&mut self, slot: u32, max_segments: u32, pieces: u32) {
        if !self.is_allocated(slot) || max_segments == 0 {
            return;
        }
        let cut = &mut self.cuts[slot as usize];
        if *cut == SlotCut::default() {
            self.cut_slots += 1;
        }
        *cut = SlotCut {
            max_segments: max_segments.min(u32::from(u16::MAX)) as u16,
            outstanding: pieces.min(u32::from(u16::MAX)) as u16,
        };
        self.cut_counters.frames_cut += 1;
    }

    /// Lowers the pieces outstanding of the cut slot `slot` to `pieces` (the rest were never
    /// queued).
    pub fn truncate_cut(&mut self, slot: u32, pieces: u32) {
        if let Some(c) = self.cuts.get_mut(slot as usize) {
            if c.max_segments > 0 {
                c.outstanding = c.outstanding.min(pieces.min(u32::from(u16::MAX)) as u16);
            }
        }
    }

    /// The cut of the slot of entry `id` (a slot or piece id), `None` when its frame is not cut.
    pub fn cut(&self, id: u32) -> Option<SlotCut> {
        if self.cut_slots == 0 {
            return None;
        }
        let (slot, _) = decode(id);
        self.cuts
            .get(slot as usize)
            .copied()
            .filter(|c| c.max_segments > 0)
    }

    /// True if entry `id` is a piece of a cut frame.
    pub fn is_piece(&self, id: u32) -> bool {
        self.cut(id).is_some()
    }

    /// True if some slot holds a cut frame (a send without any takes ids as slots).
    pub fn has_cuts(&self) -> bool {
        self.cut_slots > 0
    }

    /// Entry `id` is done with (sent or discarded): a frame's slot is freed at once, a cut
    /// frame's after its last piece. Returns whether a slot was freed.
    pub fn free_entry(&mut self, id: u32) -> bool {
        let (slot, _) = decode(id);
        if self.cut_slots > 0 {
            if let Some(c) = self.cuts.get_mut(slot as usize) {
                if c.max_segments > 0 {
                    c.outstanding = c.outstanding.saturating_sub(1);
                    if c.outstanding > 0 {
                        return false;
                    }
                }
            }
        }
        self.free(slot)
    }

    /// Counters of the cutting.
    pub fn cut_counters(&self) -> CutCounters {
        self.cut_counters
    }

    /// Counts pieces a port sent and pieces it dropped for headers it could not write.
    pub(crate) fn count_pieces(&mut self, sent: u64, failed: u64) {
        self.cut_counters.pieces_sent += sent;
        self.cut_counters.pieces_failed += failed;
    }

    /// True if slot `id` is allocated.
    pub fn is_allocated(&self, id: u32) -> bool {
        self.in_use.get(id as usize).copied().unwrap_or(false)
    }

    /// The frame in slot `id` (empty if `id` is out of range).
    pub fn frame(&self, id: u32) -> &[u8] {
        let len = self.len(id);
        self.span(id)
            .and_then(|(start, _)| self.bytes.get(start..start + len))
            .unwrap_or(&[])
    }

    /// The frame in slot `id`, writable in place (to rewrite DSCP/ECN, say).
    pub fn frame_mut(&mut self, id: u32) -> &mut [u8] {
        let len = self.len(id);
        match self.span(id) {
            Some((start, _)) => &mut self.bytes[start..start + len],
            None => &mut [],
        }
    }

    /// The whole slot `id` (its class's size), to fill before [`FramePool::set_len`].
    pub fn slot_mut(&mut self, id: u32) -> &mut [u8] {
        match self.span(id) {
            Some((start, size)) => &mut self.bytes[start..start + size],
            None => &mut [],
        }
    }

    /// The whole slots `ids` at once, as disjoint writable buffers in the order of `ids` (for a
    /// `recvmmsg` that fills several slots in one call). `ids` must be strictly increasing; an id
    /// out of order or out of range ends the sequence early (a caller bug, caught by a debug
    /// assertion).
    pub fn slots_mut<'a>(&'a mut self, ids: &'a [u32]) -> impl Iterator<Item = &'a mut [u8]> + 'a {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not increasing");
        let spans: &'a [u32] = ids;
        let (small, slot_size, large_slot_size, capacity) = (
            self.small,
            self.slot_size,
            self.large_slot_size,
            self.capacity(),
        );
        let span = move |id: u32| -> Option<(usize, usize)> {
            if (id as usize) >= capacity {
                None
            } else if id < small {
                Some((id as usize * slot_size, slot_size))
            } else {
                let base = small as usize * slot_size;
                Some((
                    base + (id - small) as usize * large_slot_size,
                    large_slot_size,
                ))
            }
        };
        let mut rest: &'a mut [u8] = &mut self.bytes;
        let mut next_start = 0usize;
        spans.iter().map_while(move |&id| {
            let (start, size) = span(id)?;
            let skip = start.checked_sub(next_start)?;
            if rest.len() < skip + size {
                return None;
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(skip);
            let (slot, tail) = tail.split_at_mut(size);
            rest = tail;
            next_start = start + size;
            Some(slot)
        })
    }

    /// Sets the frame length of slot `id`, clamped to its slot size.
    pub fn set_len(&mut self, id: u32, len: usize) {
        if let Some((_, size)) = self.span(id) {
            self.lens[id as usize] = len.min(size) as u32;
        }
    }

    /// Frame length of slot `id` in bytes.
    pub fn len(&self, id: u32) -> usize {
        self.lens.get(id as usize).copied().unwrap_or(0) as usize
    }

    /// The virtio-net header of slot `id` ([`VnetHdr::NONE`] for a plain frame or an id out of
    /// range). An [`crate::AfPacketPort`] with `vnet_hdr` sets it on receive and sends the frame
    /// with it.
    pub fn vnet(&self, id: u32) -> VnetHdr {
        self.vnet.get(id as usize).copied().unwrap_or(VnetHdr::NONE)
    }

    /// Sets the virtio-net header of slot `id` (ignored out of range). After completing a
    /// partial checksum in software, set [`VnetHdr::NONE`] (or clear `NEEDS_CSUM`): a device
    /// would otherwise sum over the completed checksum again.
    pub fn set_vnet(&mut self, id: u32, hdr: VnetHdr) {
        if let Some(v) = self.vnet.get_mut(id as usize) {
            *v = hdr;
        }
    }

    /// The origin tag of slot `id`'s frame: which workload interface or cgroup it came from, as
    /// the receiving port tells it (see the module docs); 0 for no known origin, a free slot or
    /// an id out of range.
    pub fn origin(&self, id: u32) -> u16 {
        self.origins.get(id as usize).copied().unwrap_or(0)
    }

    /// Sets the origin tag of allocated slot `id` (ignored for a free slot or an id out of
    /// range). Allocating and freeing the slot set it back to 0.
    pub fn set_origin(&mut self, id: u32, tag: u16) {
        if self.is_allocated(id) {
            self.origins[id as usize] = tag;
        }
    }

    /// Checks the pool's invariants (CONTRIBUTING.md §10): every slot is either free (exactly
    /// once on its class's free list, length 0, no header, origin 0) or allocated, and every
    /// length fits its slot.
    pub fn invariants(&self) {
        let mut on_list = vec![false; self.capacity()];
        for (list, large) in [(&self.free, false), (&self.free_large, true)] {
            for &id in list {
                assert_eq!(self.is_large(id), large, "slot {id} on the wrong free list");
                assert!(!on_list[id as usize], "slot {id} twice on the free list");
                assert!(
                    !self.in_use[id as usize],
                    "allocated slot {id} on the free list"
                );
                assert_eq!(self.lens[id as usize], 0, "free slot {id} has a length");
                assert_eq!(self.vnet[id as usize], VnetHdr::NONE, "free slot {id}");
                assert_eq!(self.origins[id as usize], 0, "free slot {id} has an origin");
                assert_eq!(
                    self.cuts[id as usize],
                    SlotCut::default(),
                    "free slot {id} cut"
                );
                on_list[id as usize] = true;
            }
        }
        let cut = self
            .cuts
            .iter()
            .filter(|c| **c != SlotCut::default())
            .count();
        assert_eq!(cut, self.cut_slots as usize, "slots with a cut");
        for (id, (&used, &listed)) in self.in_use.iter().zip(&on_list).enumerate() {
            assert!(used != listed, "slot {id} neither free nor allocated");
        }
        for id in 0..self.capacity() as u32 {
            let size = self.span(id).map_or(0, |(_, size)| size);
            assert!(self.len(id) <= size, "slot {id} longer than its class");
        }
    }
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("slots", &self.capacity())
            .field("slot_size", &self.slot_size)
            .field("large_slots", &self.large_capacity())
            .field("large_slot_size", &self.large_slot_size)
            .field("in_use", &self.in_use())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_read_free_reuse() {
        let mut pool = FramePool::new(4, 128);
        let a = pool.store(b"hello").unwrap();
        let b = pool.store(&[7u8; 128]).unwrap();
        assert_eq!((a, b), (0, 1));
        assert_eq!(pool.frame(a), b"hello");
        assert_eq!(pool.frame(b), &[7u8; 128][..]);
        assert_eq!(pool.in_use(), 2);
        pool.frame_mut(a)[0] = b'j';
        assert_eq!(pool.frame(a), b"jello");
        assert!(pool.free(a));
        pool.invariants();
        // LIFO: the slot freed last comes back first, with length 0.
        assert_eq!(pool.alloc(), Some(a));
        assert_eq!(pool.frame(a), b"");
        pool.invariants();
    }

    #[test]
    fn a_reused_slot_never_carries_an_earlier_origin() {
        let mut pool = FramePool::with_large(2, 64, 1, 256);
        let small = pool.store(b"from a pod").unwrap();
        let large = pool.alloc_large().unwrap();
        assert_eq!((pool.origin(small), pool.origin(large)), (0, 0));
        pool.set_origin(small, 7);
        pool.set_origin(large, u16::MAX);
        assert_eq!((pool.origin(small), pool.origin(large)), (7, u16::MAX));
        assert!(pool.free(small));
        assert!(pool.free(large));
        assert_eq!((pool.origin(small), pool.origin(large)), (0, 0));
        pool.invariants();
        // A free slot and an id out of range take no origin.
        pool.set_origin(small, 3);
        pool.set_origin(99, 3);
        assert_eq!((pool.origin(small), pool.origin(99)), (0, 0));
        pool.invariants();
        // Allocated again (LIFO: the same slots), by every way of allocating, with origin 0.
        assert_eq!(pool.alloc(), Some(small));
        assert_eq!(pool.origin(small), 0);
        pool.set_origin(small, 9);
        assert!(pool.free(small));
        assert_eq!(pool.store(b"again"), Ok(small));
        assert_eq!(pool.origin(small), 0);
        assert_eq!(pool.alloc_for(200), Ok(large));
        assert_eq!(pool.origin(large), 0);
    }

    #[test]
    fn exhaustion_and_oversize_hand_the_frame_back() {
        let mut pool = FramePool::new(2, 64);
        assert_eq!(
            pool.store(&[0; 65]),
            Err(StoreError::Oversize {
                len: 65,
                slot_size: 64
            })
        );
        pool.store(b"x").unwrap();
        pool.store(b"y").unwrap();
        assert_eq!(pool.store(b"z"), Err(StoreError::Exhausted));
        assert_eq!(pool.alloc(), None);
        assert_eq!(pool.available(), 0);
        pool.invariants();
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn double_free_is_refused() {
        let mut pool = FramePool::new(2, 64);
        let a = pool.store(b"x").unwrap();
        assert!(pool.free(a));
        assert!(!pool.free(a));
        assert!(!pool.free(99));
        pool.invariants();
    }

    #[test]
    fn out_of_range_ids_read_empty() {
        let mut pool = FramePool::new(1, 64);
        assert!(pool.frame(5).is_empty());
        assert!(pool.frame_mut(5).is_empty());
        assert!(pool.slot_mut(5).is_empty());
        assert!(!pool.is_allocated(5));
        pool.set_len(5, 10);
        assert_eq!(pool.len(5), 0);
    }

    #[test]
    fn slot_mut_then_set_len() {
        let mut pool = FramePool::new(1, 64);
        let id = pool.alloc().unwrap();
        pool.slot_mut(id)[..3].copy_from_slice(b"abc");
        pool.set_len(id, 3);
        assert_eq!(pool.frame(id), b"abc");
        pool.set_len(id, 1000);
        assert_eq!(pool.len(id), 64);
    }

    /// Differential test against a plain model (CONTRIBUTING.md §13): a deterministic mix of
    /// stores (small, large and oversize frames), frees and header writes on a two-class pool,
    /// checked slot by slot against a `Vec<Option<(Vec<u8>, VnetHdr)>>`.
    #[test]
    fn matches_a_plain_model() {
        const SMALL: u32 = 16;
        const LARGE: u32 = 4;
        let mut pool = FramePool::with_large(SMALL, 96, LARGE, 300);
        let n = (SMALL + LARGE) as usize;
        let mut model: Vec<Option<(Vec<u8>, VnetHdr)>> = vec![None; n];
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for step in 0..8_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let live: Vec<u32> = (0..n as u32)
                .filter(|&i| model[i as usize].is_some())
                .collect();
            let live_small = live.iter().filter(|&&i| i < SMALL).count();
            if !rng.is_multiple_of(3) || live.is_empty() {
                // Mostly small frames, some large, a few oversize.
                let len = match (rng >> 40) % 8 {
                    0 | 1 => 97 + (rng >> 8) as usize % 204,
                    2 => 301 + (rng >> 8) as usize % 10,
                    _ => (rng >> 8) as usize % 97,
                };
                let frame: Vec<u8> = (0..len).map(|i| (i as u32 ^ step) as u8).collect();
                match pool.store(&frame) {
                    Ok(id) => {
                        assert!(model[id as usize].is_none());
                        assert_eq!(pool.is_large(id), len > 96, "class of {len} bytes");
                        let hdr = VnetHdr {
                            gso_size: step as u16,
                            ..VnetHdr::NONE
                        };
                        pool.set_vnet(id, hdr);
                        model[id as usize] = Some((frame, hdr));
                    }
                    Err(StoreError::Oversize { .. }) => assert!(len > 300),
                    Err(StoreError::NoLargeSlot { .. }) => {
                        assert!(len > 96 && live.len() - live_small == LARGE as usize)
                    }
                    Err(StoreError::Exhausted) => {
                        assert!(len <= 96 && live_small == SMALL as usize)
                    }
                }
            } else {
                let id = live[(rng >> 20) as usize % live.len()];
                assert!(pool.free(id));
                assert_eq!(pool.vnet(id), VnetHdr::NONE);
                model[id as usize] = None;
            }
            for (id, m) in model.iter().enumerate() {
                if let Some((bytes, hdr)) = m {
                    assert_eq!(pool.frame(id as u32), &bytes[..]);
                    assert_eq!(pool.vnet(id as u32), *hdr);
                }
            }
            assert_eq!(pool.in_use(), model.iter().flatten().count());
        }
        pool.invariants();
    }

    #[test]
    fn a_cut_slot_is_freed_after_its_last_piece() {
        use crate::piece::encode;
        let mut pool = FramePool::new(4, 128);
        let plain = pool.store(b"plain").unwrap();
        let cut = pool.store(b"super").unwrap();
        assert!(!pool.has_cuts() && !pool.is_piece(cut));
        pool.set_cut(cut, 2, 3);
        assert!(pool.has_cuts() && pool.is_piece(encode(cut, 2)) && !pool.is_piece(plain));
        assert_eq!(pool.cut_counters().frames_cut, 1);
        pool.invariants();
        // Only two of the three pieces were queued.
        pool.truncate_cut(cut, 2);
        assert!(!pool.free_entry(encode(cut, 1)));
        assert!(pool.is_allocated(cut));
        assert!(pool.free_entry(encode(cut, 0)));
        assert!(!pool.is_allocated(cut) && !pool.has_cuts());
        // A plain frame's entry frees its slot at once.
        assert!(pool.free_entry(plain));
        assert_eq!(pool.in_use(), 0);
        pool.invariants();
        // A cut slot freed whole (a drop) leaves no cut behind.
        let again = pool.store(b"again").unwrap();
        pool.set_cut(again, 2, 5);
        assert!(pool.free(again));
        assert!(!pool.has_cuts());
        pool.invariants();
    }

    #[test]
    fn two_classes_footprint_and_slots_mut_across_them() {
        let mut pool = FramePool::with_large(8192, DEFAULT_SLOT_SIZE, 256, GSO_SLOT_SIZE);
        // 16 MiB + 16.0 MiB, against 541 MiB for 8 448 slots of 64 KiB.
        assert_eq!(
            pool.bytes.len(),
            8192 * DEFAULT_SLOT_SIZE + 256 * GSO_SLOT_SIZE
        );
        assert_eq!((pool.capacity(), pool.large_capacity()), (8448, 256));
        let small = pool.alloc().unwrap();
        let large = pool.alloc_large().unwrap();
        assert_eq!((small, large), (0, 8192));
        let sizes: Vec<usize> = pool.slots_mut(&[small, large]).map(|s| s.len()).collect();
        assert_eq!(sizes, [DEFAULT_SLOT_SIZE, GSO_SLOT_SIZE]);
        pool.slot_mut(large)[GSO_SLOT_SIZE - 1] = 7;
        pool.set_len(large, GSO_SLOT_SIZE + 5);
        assert_eq!(pool.len(large), GSO_SLOT_SIZE);
        assert_eq!(pool.frame(large)[GSO_SLOT_SIZE - 1], 7);
        // A one-class pool has no large slot: super-frames are oversize, never silently cut.
        let mut plain = FramePool::new(4, 2048);
        assert_eq!(plain.alloc_large(), None);
        assert_eq!(
            plain.store(&[0; 3000]),
            Err(StoreError::Oversize {
                len: 3000,
                slot_size: 2048
            })
        );
        pool.invariants();
    }
}
