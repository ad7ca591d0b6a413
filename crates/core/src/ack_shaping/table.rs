//! The ACK shaper's preallocated flow table: a slab of [`FlowSlot`]s, an open-addressing index
//! (linear probing, backward-shift deletion, Knuth TAOCP vol. 3 §6.4 Algorithm R) and two
//! intrusive doubly linked lists over the slots:
//! * [`LRU`]: flows by last ACK seen, oldest first (idle expiry from the head);
//! * [`PENDING`]: flows holding data back, by due time of their next generated ACK (the head
//!   is [`super::AckShaper::next_due`]).
//!
//! Both lists stay sorted by appending at the tail with a key no earlier than the tail's: times
//! never go backwards, and a pending flow's due time is clamped up to the tail's when a rate
//! change shortened the interval (it is then at most one interval late).
//!
//! Layout: the slot (80 bytes, checked at compile time) holds the sequence state read on every ACK
//! first, then the list links. Nothing allocates after [`FlowTable::new`].

use crate::time::{Duration, Timestamp};

/// List index of the idle-expiry order.
pub(super) const LRU: usize = 0;
/// List index of the generated-ACK order.
pub(super) const PENDING: usize = 1;
/// End of a list, and "not linked".
const NIL: u32 = u32::MAX;
/// An empty index bucket.
const EMPTY: u32 = u32::MAX;

/// One flow's state.
#[derive(Clone, Copy, Debug)]
pub(super) struct FlowSlot {
    /// `T_a` as a virtual time: ns since the epoch, 40.24 fixed point (see the module docs of
    /// `ack_shaping`).
    pub t_a_fp: u128,
    /// The caller's flow key.
    pub key: u64,
    /// Last acknowledged sequence number sent (`SN_a`).
    pub sn_a: u32,
    /// Highest acknowledgement number the receiver produced (`SN_r`).
    pub sn_r: u32,
    /// Due time of the next generated ACK (meaningful while pending).
    pub due: Timestamp,
    /// Last ACK that left for this flow.
    pub last_emit: Timestamp,
    /// Last segment seen from the receiver.
    pub last_seen: Timestamp,
    /// `[prev, next]` per list.
    links: [[u32; 2]; 2],
}

impl FlowSlot {
    /// A new flow acknowledged up to `ack`, with `T_a` at `t_a_fp`, seen at `now`.
    pub fn new(key: u64, ack: u32, t_a_fp: u128, now: Timestamp) -> Self {
        FlowSlot {
            t_a_fp,
            key,
            sn_a: ack,
            sn_r: ack,
            due: now,
            last_emit: now,
            last_seen: now,
            links: [[NIL; 2]; 2],
        }
    }

    fn linked(&self, l: usize) -> bool {
        self.links[l] != [NIL, NIL]
    }
}

const _: () = assert!(core::mem::size_of::<FlowSlot>() <= 80);

/// The table. See the module documentation.
#[derive(Clone, Debug)]
pub(super) struct FlowTable {
    slots: Box<[FlowSlot]>,
    free: Vec<u32>,
    index: Box<[u32]>,
    mask: usize,
    /// `[head, tail]` per list.
    lists: [[u32; 2]; 2],
    len: u32,
}

/// Spreads a key over the index (Fibonacci hashing).
fn home(key: u64, mask: usize) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask
}

impl FlowTable {
    /// Room for `capacity` flows; the index has at least twice as many buckets.
    pub fn new(capacity: u32) -> Self {
        let buckets = (capacity as usize * 2).next_power_of_two().max(2);
        FlowTable {
            slots: vec![FlowSlot::new(0, 0, 0, Timestamp::ZERO); capacity as usize].into(),
            free: (0..capacity).rev().collect(),
            index: vec![EMPTY; buckets].into(),
            mask: buckets - 1,
            lists: [[NIL; 2]; 2],
            len: 0,
        }
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn slot(&self, i: u32) -> &FlowSlot {
        &self.slots[i as usize]
    }

    pub fn slot_mut(&mut self, i: u32) -> &mut FlowSlot {
        &mut self.slots[i as usize]
    }

    fn bucket_of(&self, key: u64) -> Result<usize, usize> {
        let mut b = home(key, self.mask);
        loop {
            match self.index[b] {
                EMPTY => return Err(b),
                i if self.slots[i as usize].key == key => return Ok(b),
                _ => b = (b + 1) & self.mask,
            }
        }
    }

    /// The slot of `key`, if tracked.
    pub fn find(&self, key: u64) -> Option<u32> {
        self.bucket_of(key).ok().map(|b| self.index[b])
    }

    /// Inserts a flow (not already present), last in both orders' LRU; `None` when full.
    pub fn insert(&mut self, slot: FlowSlot) -> Option<u32> {
        let b = self.bucket_of(slot.key).err()?;
        let i = self.free.pop()?;
        self.slots[i as usize] = slot;
        self.index[b] = i;
        self.len += 1;
        self.push_back(LRU, i);
        Some(i)
    }

    /// Removes slot `i` from the index, both lists and the table.
    pub fn remove(&mut self, i: u32) {
        let key = self.slots[i as usize].key;
        let Ok(mut hole) = self.bucket_of(key) else {
            debug_assert!(false, "removing an untracked slot");
            return;
        };
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let v = self.index[j];
            if v == EMPTY {
                break;
            }
            let h = home(self.slots[v as usize].key, self.mask);
            if (j.wrapping_sub(h) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                self.index[hole] = v;
                hole = j;
            }
        }
        self.index[hole] = EMPTY;
        for l in [LRU, PENDING] {
            self.unlink(l, i);
        }
        self.free.push(i);
        self.len -= 1;
    }

    pub fn head(&self, l: usize) -> Option<u32> {
        let h = self.lists[l][0];
        (h != NIL).then_some(h)
    }

    fn push_back(&mut self, l: usize, i: u32) {
        debug_assert!(!self.slots[i as usize].linked(l) && self.lists[l][0] != i);
        let tail = self.lists[l][1];
        self.slots[i as usize].links[l] = [tail, NIL];
        if tail == NIL {
            self.lists[l][0] = i;
        } else {
            self.slots[tail as usize].links[l][1] = i;
        }
        self.lists[l][1] = i;
    }

    fn unlink(&mut self, l: usize, i: u32) {
        let [prev, next] = self.slots[i as usize].links[l];
        if prev == NIL && next == NIL && self.lists[l][0] != i {
            return;
        }
        match prev {
            NIL => self.lists[l][0] = next,
            p => self.slots[p as usize].links[l][1] = next,
        }
        match next {
            NIL => self.lists[l][1] = prev,
            n => self.slots[n as usize].links[l][0] = prev,
        }
        self.slots[i as usize].links[l] = [NIL, NIL];
    }

    fn in_list(&self, l: usize, i: u32) -> bool {
        self.slots[i as usize].linked(l) || self.lists[l][0] == i
    }

    /// Flow `i` was seen at `now`: last in the LRU order.
    pub fn touch(&mut self, i: u32, now: Timestamp) {
        self.unlink(LRU, i);
        self.slots[i as usize].last_seen = now;
        self.push_back(LRU, i);
    }

    /// An ACK of flow `i` left at `now`: it is pending again, due one `interval` later, if it
    /// still holds data back.
    pub fn emitted(&mut self, i: u32, now: Timestamp, interval: Duration) {
        self.unlink(PENDING, i);
        let s = &mut self.slots[i as usize];
        s.last_emit = now;
        if s.sn_a != s.sn_r {
            self.append_pending(i, now + interval);
        }
    }

    /// Flow `i` holds data back without an ACK leaving: pending from its last ACK, if not yet.
    pub fn schedule_pending(&mut self, i: u32, interval: Duration) {
        if !self.in_list(PENDING, i) {
            let due = self.slots[i as usize].last_emit + interval;
            self.append_pending(i, due);
        }
    }

    fn append_pending(&mut self, i: u32, due: Timestamp) {
        let tail_due = self
            .head(PENDING)
            .map(|_| self.slots[self.lists[PENDING][1] as usize].due);
        self.slots[i as usize].due = tail_due.map_or(due, |t| due.max(t));
        self.push_back(PENDING, i);
    }

    fn walk(&self, l: usize) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.lists[l][0];
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let i = cur;
                cur = self.slots[i as usize].links[l][1];
                i
            })
        })
    }

    /// Panics on the first inconsistency (see `AckShaper::invariants`).
    pub fn invariants(&self) {
        let lru: Vec<u32> = self.walk(LRU).collect();
        assert_eq!(
            lru.len(),
            self.len as usize,
            "every flow is in the LRU order"
        );
        assert_eq!(
            self.free.len() + lru.len(),
            self.slots.len(),
            "slots leaked"
        );
        let mut last = Timestamp::ZERO;
        for &i in &lru {
            let s = &self.slots[i as usize];
            assert!(s.last_seen >= last, "LRU order unsorted");
            last = s.last_seen;
            assert_eq!(self.find(s.key), Some(i), "flow not reachable by its key");
            assert!(!super::seq_lt(s.sn_r, s.sn_a), "SN_a beyond SN_r");
            assert_eq!(
                self.in_list(PENDING, i),
                s.sn_a != s.sn_r,
                "pending exactly when data is held back"
            );
        }
        let mut last = Timestamp::ZERO;
        for i in self.walk(PENDING) {
            let due = self.slots[i as usize].due;
            assert!(due >= last, "pending order unsorted");
            last = due;
        }
        let used = self.index.iter().filter(|&&v| v != EMPTY).count();
        assert_eq!(used, self.len as usize, "index and table disagree");
    }
}
