//! The frame pool: N preallocated, fixed-size frame buffers with a free list, indexed by `u32`.
//!
//! The shaper queues packet *references* ([`metronome_core::PacketRef`], Carousel §5.2), so the
//! bytes must stay put while a reference waits in the wheel — possibly for the whole horizon. A
//! port therefore copies every received frame once into a pool slot and hands the kernel its ring
//! block back at once; `PacketRef::id` is the slot index. The alternative — pointing into the
//! TPACKET_V3 ring and holding its blocks until every packet in them departs — is zero-copy but
//! stalls the ring: one slow flow pins a whole block, the kernel freezes the queue
//! (`tp_freeze_q_cnt`) and drops everything behind it (`tp_drops`). One `memcpy` of at most one
//! MTU per packet is the price of a ring that never waits for the shaper.
//!
//! Layout (STYLE.md §5): one contiguous `Vec<u8>` of `slots × slot_size` bytes (slot `i` starts at
//! `i × slot_size`), a parallel `Vec<u32>` of frame lengths, and a LIFO free stack (the slot freed
//! last is reused first, so it is likely still in cache). Allocation and release are O(1) and never
//! allocate. The pool is owned by the caller, not by a port, so a bump in the wire can receive on
//! one port and transmit the same slot on the other.

/// Default slot size in bytes: a 1500-byte MTU frame plus Ethernet and 802.1Q headers, rounded up
/// to a power of two. Enough when GRO, GSO and TSO are off on the interfaces.
pub const DEFAULT_SLOT_SIZE: usize = 2048;

/// Slot size in bytes for GRO/GSO super-frames: the kernel's default `gso_max_size`
/// (`GSO_LEGACY_MAX_SIZE`, 65 536 bytes, include/linux/netdevice.h) bounds such a frame. Needed
/// when TSO/GSO/GRO cannot be turned off (no `ethtool`); 32× the memory of
/// [`DEFAULT_SLOT_SIZE`]. Frames above the slot size are dropped under `rx_oversize`.
pub const JUMBO_SLOT_SIZE: usize = 65_536;

/// Why [`FramePool::store`] could not take a frame. The frame is not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Every slot is in use.
    #[error("frame pool exhausted")]
    Exhausted,
    /// The frame is longer than a slot.
    #[error("frame of {len} bytes exceeds the {slot_size}-byte slot")]
    Oversize {
        /// Length of the refused frame in bytes.
        len: usize,
        /// The pool's slot size in bytes.
        slot_size: usize,
    },
}

/// A fixed pool of frame buffers, indexed by `u32` slot ids.
pub struct FramePool {
    /// `slots × slot_size` bytes; slot `i` is `bytes[i*slot_size..][..slot_size]`.
    bytes: Vec<u8>,
    /// Frame length of each slot in bytes (0 when free).
    lens: Vec<u32>,
    /// True for allocated slots: catches double frees and use of free slots.
    in_use: Vec<bool>,
    /// Free slot ids, a LIFO stack.
    free: Vec<u32>,
    slot_size: usize,
}

impl FramePool {
    /// A pool of `slots` slots of `slot_size` bytes each, all free. Allocates `slots × slot_size`
    /// bytes once. `slot_size` is at least 64 (a minimum Ethernet frame).
    pub fn new(slots: u32, slot_size: usize) -> Self {
        let slot_size = slot_size.max(64);
        let n = slots as usize;
        FramePool {
            bytes: vec![0; n * slot_size],
            lens: vec![0; n],
            in_use: vec![false; n],
            // Reversed so that slot 0 is handed out first.
            free: (0..slots).rev().collect(),
            slot_size,
        }
    }

    /// Bytes per slot: the longest frame the pool can hold.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Total number of slots.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Number of free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Number of allocated slots.
    pub fn in_use(&self) -> usize {
        self.capacity() - self.available()
    }

    /// Takes a free slot, with frame length 0, or `None` if the pool is exhausted.
    pub fn alloc(&mut self) -> Option<u32> {
        let id = self.free.pop()?;
        self.in_use[id as usize] = true;
        self.lens[id as usize] = 0;
        Some(id)
    }

    /// Copies `frame` into a free slot and returns its id.
    pub fn store(&mut self, frame: &[u8]) -> Result<u32, StoreError> {
        if frame.len() > self.slot_size {
            return Err(StoreError::Oversize {
                len: frame.len(),
                slot_size: self.slot_size,
            });
        }
        let id = self.alloc().ok_or(StoreError::Exhausted)?;
        self.slot_mut(id)[..frame.len()].copy_from_slice(frame);
        self.lens[id as usize] = frame.len() as u32;
        Ok(id)
    }

    /// Returns slot `id` to the free list. Returns `false` (and changes nothing) if `id` is out of
    /// range or already free — a caller bug, caught by a debug assertion.
    pub fn free(&mut self, id: u32) -> bool {
        let ok = self.in_use.get(id as usize).copied().unwrap_or(false);
        debug_assert!(ok, "freeing slot {id} that is not allocated");
        if ok {
            self.in_use[id as usize] = false;
            self.lens[id as usize] = 0;
            self.free.push(id);
        }
        ok
    }

    /// True if slot `id` is allocated.
    pub fn is_allocated(&self, id: u32) -> bool {
        self.in_use.get(id as usize).copied().unwrap_or(false)
    }

    /// The frame in slot `id` (empty if `id` is out of range).
    pub fn frame(&self, id: u32) -> &[u8] {
        let len = self.lens.get(id as usize).copied().unwrap_or(0) as usize;
        self.bytes
            .get(id as usize * self.slot_size..)
            .map_or(&[][..], |s| &s[..len])
    }

    /// The frame in slot `id`, writable in place (to rewrite DSCP/ECN, say).
    pub fn frame_mut(&mut self, id: u32) -> &mut [u8] {
        let len = self.lens.get(id as usize).copied().unwrap_or(0) as usize;
        let start = id as usize * self.slot_size;
        self.bytes
            .get_mut(start..)
            .map_or(&mut [][..], |s| &mut s[..len])
    }

    /// The whole slot `id` (`slot_size` bytes), to fill before [`FramePool::set_len`].
    pub fn slot_mut(&mut self, id: u32) -> &mut [u8] {
        let start = id as usize * self.slot_size;
        let size = self.slot_size;
        self.bytes
            .get_mut(start..)
            .map_or(&mut [][..], |s| &mut s[..size])
    }

    /// The whole slots `ids` at once, as disjoint writable buffers in the order of `ids` (for a
    /// `recvmmsg` that fills several slots in one call). `ids` must be strictly increasing; an id
    /// out of order or out of range ends the sequence early (a caller bug, caught by a debug
    /// assertion).
    pub fn slots_mut<'a>(&'a mut self, ids: &'a [u32]) -> impl Iterator<Item = &'a mut [u8]> + 'a {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not increasing");
        let size = self.slot_size;
        let mut rest: &'a mut [u8] = &mut self.bytes;
        let mut next_start = 0usize;
        ids.iter().map_while(move |&id| {
            let start = (id as usize).checked_mul(size)?;
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

    /// Sets the frame length of slot `id`, clamped to the slot size.
    pub fn set_len(&mut self, id: u32, len: usize) {
        if let Some(l) = self.lens.get_mut(id as usize) {
            *l = len.min(self.slot_size) as u32;
        }
    }

    /// Frame length of slot `id` in bytes.
    pub fn len(&self, id: u32) -> usize {
        self.lens.get(id as usize).copied().unwrap_or(0) as usize
    }

    /// Checks the pool's invariants (STYLE.md §10): every slot is either free (exactly once on
    /// the free list, length 0) or allocated, and every length fits its slot.
    pub fn invariants(&self) {
        let mut on_list = vec![false; self.capacity()];
        for &id in &self.free {
            assert!(!on_list[id as usize], "slot {id} twice on the free list");
            assert!(
                !self.in_use[id as usize],
                "allocated slot {id} on the free list"
            );
            assert_eq!(self.lens[id as usize], 0, "free slot {id} has a length");
            on_list[id as usize] = true;
        }
        for (id, (&used, &listed)) in self.in_use.iter().zip(&on_list).enumerate() {
            assert!(used != listed, "slot {id} neither free nor allocated");
        }
        assert!(self.lens.iter().all(|&l| l as usize <= self.slot_size));
    }
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("slots", &self.capacity())
            .field("slot_size", &self.slot_size)
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

    /// Differential test against a plain model (STYLE.md §13): a deterministic mix of stores and
    /// frees, checked slot by slot against a `Vec<Option<Vec<u8>>>`.
    #[test]
    fn matches_a_plain_model() {
        let mut pool = FramePool::new(16, 96);
        let mut model: Vec<Option<Vec<u8>>> = vec![None; 16];
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for step in 0..5_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let live: Vec<u32> = (0..16).filter(|&i| model[i as usize].is_some()).collect();
            if !rng.is_multiple_of(3) || live.is_empty() {
                let len = (rng >> 8) as usize % 100;
                let frame: Vec<u8> = (0..len).map(|i| (i as u32 ^ step) as u8).collect();
                match pool.store(&frame) {
                    Ok(id) => {
                        assert!(model[id as usize].is_none());
                        model[id as usize] = Some(frame);
                    }
                    Err(StoreError::Oversize { .. }) => assert!(len > 96),
                    Err(StoreError::Exhausted) => assert!(live.len() == 16),
                }
            } else {
                let id = live[(rng >> 20) as usize % live.len()];
                assert!(pool.free(id));
                model[id as usize] = None;
            }
            for (id, m) in model.iter().enumerate() {
                if let Some(bytes) = m {
                    assert_eq!(pool.frame(id as u32), &bytes[..]);
                }
            }
        }
        pool.invariants();
    }
}
