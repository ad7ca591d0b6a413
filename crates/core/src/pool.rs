//! The global pool: preallocated nodes, each holding several packet references (Carousel §5.1.2).
//!
//! "We introduce a Global Pool of memory: a free list of nodes to hold packet references ... each
//! free list node can hold references to n packets. Preallocated nodes are assigned to different
//! time slots based on need." A slot is a FIFO chain of nodes ([`SlotList`]); the pool hands nodes
//! out and takes them back through an intrusive free list, so enqueue and dequeue never allocate.
//! Exhaustion hands the packet back to the caller (CONTRIBUTING.md §11).
//!
//! Layout: a [`Node`] is two cache lines, `#[repr(C, align(64))]`: seven 16-byte references
//! (112 B) then the link and the read/write cursors (8 B), 8 B of padding. A full node costs
//! 18.3 bytes per packet.

use crate::packet::PacketRef;

/// References per node: seven 16-byte references and the 8-byte header fit two cache lines
/// (eight would not).
pub const REFS_PER_NODE: usize = 7;

/// The end of a chain / an empty list.
const NIL: u32 = u32::MAX;

/// A pool node: up to [`REFS_PER_NODE`] references, read from `head`, written at `tail`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Node {
    refs: [PacketRef; REFS_PER_NODE],
    next: u32,
    head: u16,
    tail: u16,
}

/// Size of a node in bytes (two cache lines, checked at compile time).
pub const NODE_BYTES: usize = 128;
const _: () = assert!(core::mem::size_of::<Node>() == NODE_BYTES);

/// A FIFO chain of nodes: one per wheel slot. 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotList {
    head: u32,
    tail: u32,
}

impl SlotList {
    /// An empty list.
    pub const EMPTY: SlotList = SlotList {
        head: NIL,
        tail: NIL,
    };
    /// True if the list holds no node.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

impl Default for SlotList {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// The preallocated node pool shared by all slots of a wheel.
pub struct NodePool {
    nodes: Vec<Node>,
    free: u32,
    in_use: usize,
}

impl NodePool {
    /// A pool of `nodes` preallocated nodes (at most `u32::MAX - 1`).
    pub fn new(nodes: usize) -> Self {
        let nodes = nodes.min(NIL as usize - 1);
        let mut v = Vec::with_capacity(nodes);
        for i in 0..nodes {
            let next = if i + 1 < nodes { i as u32 + 1 } else { NIL };
            v.push(Node {
                refs: [PacketRef::default(); REFS_PER_NODE],
                next,
                head: 0,
                tail: 0,
            });
        }
        NodePool {
            nodes: v,
            free: if nodes > 0 { 0 } else { NIL },
            in_use: 0,
        }
    }

    /// Nodes needed so that `packets` references always fit when at most `slots` slots are
    /// occupied at once: every occupied slot may waste most of one node.
    pub fn nodes_for(packets: usize, slots: usize) -> usize {
        packets.div_ceil(REFS_PER_NODE) + packets.min(slots)
    }

    /// Nodes in the pool.
    pub fn capacity_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Nodes handed out to slots.
    pub fn nodes_in_use(&self) -> usize {
        self.in_use
    }

    /// Bytes preallocated.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * NODE_BYTES
    }

    /// Appends `pkt` to `list`, or hands it back when no node is free.
    #[inline(always)]
    pub fn push_back(&mut self, list: &mut SlotList, pkt: PacketRef) -> Result<(), PacketRef> {
        if list.tail != NIL {
            let tail = &mut self.nodes[list.tail as usize];
            if (tail.tail as usize) < REFS_PER_NODE {
                tail.refs[tail.tail as usize] = pkt;
                tail.tail += 1;
                return Ok(());
            }
        }
        let idx = self.free;
        if idx == NIL {
            return Err(pkt);
        }
        let node = &mut self.nodes[idx as usize];
        self.free = node.next;
        node.next = NIL;
        node.head = 0;
        node.tail = 1;
        node.refs[0] = pkt;
        self.in_use += 1;
        if list.tail == NIL {
            list.head = idx;
        } else {
            self.nodes[list.tail as usize].next = idx;
        }
        list.tail = idx;
        Ok(())
    }

    /// Moves up to `out.len()` references from the front of `list` into `out`, in FIFO order,
    /// returning how many; drained nodes go back to the free list.
    #[inline]
    pub fn drain_into(&mut self, list: &mut SlotList, out: &mut [PacketRef]) -> usize {
        let mut n = 0;
        while list.head != NIL && n < out.len() {
            let idx = list.head;
            let node = &mut self.nodes[idx as usize];
            let (h, t) = (node.head as usize, node.tail as usize);
            let take = (t - h).min(out.len() - n);
            if h == 0 && out.len() - n >= REFS_PER_NODE {
                // The common case, a whole node into a roomy buffer: one fixed-size 120-byte
                // copy, which compiles to a few vector moves instead of a call to memmove. Slots
                // of `out` past `n + take` receive stale references the caller never reads.
                out[n..n + REFS_PER_NODE].copy_from_slice(&node.refs);
            } else {
                out[n..n + take].copy_from_slice(&node.refs[h..h + take]);
            }
            n += take;
            node.head += take as u16;
            if node.head == node.tail {
                list.head = node.next;
                node.next = self.free;
                self.free = idx;
                self.in_use -= 1;
                if list.head == NIL {
                    list.tail = NIL;
                }
            }
        }
        n
    }

    /// Removes and returns the front reference of `list`.
    pub fn pop_front(&mut self, list: &mut SlotList) -> Option<PacketRef> {
        let mut one = [PacketRef::default()];
        (self.drain_into(list, &mut one) == 1).then_some(one[0])
    }

    /// Counts the references in `list` (walks the chain; for checks, not the hot path).
    pub fn count(&self, list: &SlotList) -> usize {
        let mut n = 0;
        let mut i = list.head;
        while i != NIL {
            let node = &self.nodes[i as usize];
            n += (node.tail - node.head) as usize;
            i = node.next;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{ClassId, FlowId};

    fn p(id: u32) -> PacketRef {
        PacketRef::new(id, FlowId(0), ClassId(0), 100)
    }

    #[test]
    fn fifo_across_nodes_and_reuse() {
        let mut pool = NodePool::new(3);
        let mut a = SlotList::EMPTY;
        for i in 0..18 {
            pool.push_back(&mut a, p(i)).unwrap();
        }
        assert_eq!(pool.nodes_in_use(), 3);
        // 21 fit in three nodes; the 22nd is handed back.
        for i in 18..21 {
            pool.push_back(&mut a, p(i)).unwrap();
        }
        assert_eq!(pool.push_back(&mut a, p(99)), Err(p(99)));
        let mut out = [PacketRef::default(); 7];
        let mut got = Vec::new();
        loop {
            let n = pool.drain_into(&mut a, &mut out);
            if n == 0 {
                break;
            }
            got.extend(out[..n].iter().map(|r| r.id));
        }
        assert_eq!(got, (0..21).collect::<Vec<_>>());
        assert!(a.is_empty());
        assert_eq!(pool.nodes_in_use(), 0);
        // All nodes are free again.
        let mut b = SlotList::EMPTY;
        for i in 0..21 {
            pool.push_back(&mut b, p(i)).unwrap();
        }
        assert_eq!(pool.count(&b), 21);
        assert_eq!(pool.pop_front(&mut b), Some(p(0)));
    }
}
