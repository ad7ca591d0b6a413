//! Fair queueing inside a rate-limited class: which flow's packet leaves when the class's
//! aggregate may send its next bytes (the pull "with fair sharing" of NicPic §3, where Carousel
//! §5.1 makes an aggregate one virtual FIFO; FlowBundler §IV keeps flows apart likewise).
//!
//! The caller keeps the class's timestamper (*when* the class sends) and asks
//! [`FairQueue::dequeue`] *which* packet leaves: deficit round robin with explicit rounds, flows
//! that come back with credit left in their round served first (start-time fair queueing's start
//! tags counted in rounds). [`FairQueue::fattest_flow`] and [`FairQueue::drop_head`] shed from the
//! longest flow; [`FairQueue::charge_sparse`] charges a packet let through at once. A flow's state
//! is [`FLOW_STATE_BYTES`] = 32 bytes; nothing is allocated after [`FairQueue::new`].
//!
//! Where it departs from `fq_codel`: exact flow indices instead of hashing, no CoDel inside (the
//! sojourn is returned), one byte quantum per class round, round tags instead of keeping emptied
//! flows on the old list. The algorithm and the reasons: `docs/design/nicpic.md`. A sojourn
//! saturates at zero if the caller passes an earlier `now` (CONTRIBUTING.md §10).

use crate::packet::{ClassId, FlowId, PacketRef};
use crate::queue::Rejected;
use crate::time::{Duration, Timestamp};

#[cfg(test)]
mod tests;

mod config;
pub use config::{FairQueueConfig, FairQueueConfigError};

/// Bytes of one flow's scheduling state (`Flow`); checked at compile time. The budget is 64
/// bytes a flow (one cache line); this layout takes half.
pub const FLOW_STATE_BYTES: usize = 32;

/// The end of a list, or no packet.
const NIL: u32 = u32::MAX;
/// A slot's `next` while its packet is not in any queue.
const NOT_QUEUED: u32 = u32::MAX - 1;

/// Most classes a [`FairQueue`] holds: 2^30, what the 30 class bits of a flow's state hold
/// (`Flow::class_list`).
pub const MAX_FAIR_CLASSES: u32 = 1 << 30;
/// The class bits of `Flow::class_list`.
const CLASS_MASK: u32 = MAX_FAIR_CLASSES - 1;

/// Which list a flow is on.
const LIST_NONE: u8 = 0;
const LIST_NEW: u8 = 1;
/// The old or the next list: the flow's round tag tells them apart (current round: old).
const LIST_ROUND: u8 = 2;

/// One flow's state: 32 bytes, the fields of one dequeue together.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Flow {
    /// First packet id, or [`NIL`].
    head: u32,
    /// Last packet id, or [`NIL`].
    tail: u32,
    /// Next flow on the same list, or [`NIL`].
    next: u32,
    /// Packets queued.
    packets: u32,
    /// DRR credit in bytes for round `round`; may go negative after a packet larger than it.
    deficit: i32,
    /// Bytes queued (at most `u32::MAX`: [`FairRejectReason::FlowFull`]).
    bytes: u32,
    /// The class round `deficit` belongs to (wrapping).
    round: u32,
    /// The class whose lists hold the flow, or held it last (the low 30 bits), and the list it
    /// is on, [`LIST_NONE`], [`LIST_NEW`] or [`LIST_ROUND`] (the top 2 bits): one word, so that
    /// the state stays 32 bytes with 32-bit class ids.
    class_list: u32,
}

const _: () = assert!(core::mem::size_of::<Flow>() == FLOW_STATE_BYTES);
const _: () = assert!(FLOW_STATE_BYTES <= 64);

impl Flow {
    /// The class whose lists hold the flow, or held it last.
    #[inline]
    fn class(&self) -> u32 {
        self.class_list & CLASS_MASK
    }

    /// The list the flow is on.
    #[inline]
    fn list(&self) -> u8 {
        (self.class_list >> 30) as u8
    }

    /// Sets the class (below [`MAX_FAIR_CLASSES`]: `FairQueue::enqueue` refuses others).
    #[inline]
    fn set_class(&mut self, class: u32) {
        self.class_list = (self.class_list & !CLASS_MASK) | (class & CLASS_MASK);
    }

    /// Sets the list.
    #[inline]
    fn set_list(&mut self, list: u8) {
        self.class_list = (self.class_list & CLASS_MASK) | (u32::from(list) << 30);
    }

    /// A flow that has never held a packet: one quantum of credit in round 0 of class 0.
    fn idle(quantum: u32) -> Flow {
        Flow {
            head: NIL,
            tail: NIL,
            next: NIL,
            packets: 0,
            deficit: quantum as i32,
            bytes: 0,
            round: 0,
            class_list: 0,
        }
    }
}

/// One packet id's record: the next packet of its flow ([`NIL`] at a tail, [`NOT_QUEUED`] when
/// the id is not queued), its length and its enqueue time; 16 bytes, read together.
#[derive(Clone, Copy, Debug)]
struct Slot {
    next: u32,
    len: u32,
    enqueued_at: Timestamp,
}

const _: () = assert!(core::mem::size_of::<Slot>() == 16);

impl Slot {
    const FREE: Slot = Slot {
        next: NOT_QUEUED,
        len: 0,
        enqueued_at: Timestamp::ZERO,
    };
}

/// A singly linked list of flows.
#[derive(Clone, Copy, Debug)]
struct FlowList {
    head: u32,
    tail: u32,
}

impl FlowList {
    const EMPTY: FlowList = FlowList {
        head: NIL,
        tail: NIL,
    };
}

/// One class's lists, round and totals.
#[derive(Clone, Copy, Debug)]
struct ClassLists {
    /// Flows back with credit left in the current round: served first.
    new: FlowList,
    /// Backlogged flows of the current round.
    old: FlowList,
    /// Flows whose credit of the current round is used up, with the next round's quantum.
    next: FlowList,
    /// The current round (wrapping).
    round: u32,
    /// Packets queued in the class.
    packets: u32,
    /// Flows of the class with at least one packet queued.
    backlogged: u32,
    /// Bytes queued in the class.
    bytes: u64,
}

impl ClassLists {
    const EMPTY: ClassLists = ClassLists {
        new: FlowList::EMPTY,
        old: FlowList::EMPTY,
        next: FlowList::EMPTY,
        round: 0,
        packets: 0,
        backlogged: 0,
        bytes: 0,
    };
}

/// Why [`FairQueue::enqueue`] handed a packet back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FairRejectReason {
    /// The packet id is not below the configured `packets`.
    #[error("packet id out of range")]
    PacketOutOfRange,
    /// The class is not below the configured `classes`.
    #[error("class out of range")]
    ClassOutOfRange,
    /// The packet id is already queued.
    #[error("packet already queued")]
    AlreadyQueued,
    /// The packet would make its flow hold more than `u32::MAX` bytes.
    #[error("flow holds too many bytes")]
    FlowFull,
}

/// Where [`FairQueue::enqueue`] put a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairQueueEnqueued {
    /// The flow index that holds it (the class's overflow flow when `overflow`).
    pub flow: u32,
    /// It went to the class's overflow flow.
    pub overflow: bool,
    /// Its flow was detached and joined the new list: it had credit left in the current round
    /// (or the round turned while it was idle), so it is served before the old list.
    pub new_flow: bool,
    /// Its flow was detached and had used up its credit of the current round: it joined the
    /// next round's list.
    pub next_round: bool,
}

/// A packet [`FairQueue::dequeue`] chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairQueueDequeued {
    /// The caller's packet id.
    pub id: u32,
    /// The flow index that held it.
    pub flow: u32,
    /// Its length as enqueued.
    pub len: u32,
    /// When it was enqueued.
    pub enqueued_at: Timestamp,
    /// How long it waited in its flow's queue: `now - enqueued_at`.
    pub sojourn: Duration,
    /// It was served from the new list.
    pub from_new: bool,
}

/// Counters of a [`FairQueue`], cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairQueueCounters {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets dequeued.
    pub dequeued: u64,
    /// Packets handed back by reason: out of range ids or classes, duplicates.
    pub rejected: u64,
    /// Packets that came without a flow index, or with one out of range, and went to their
    /// class's overflow flow: the caller's flow state was full.
    pub overflowed: u64,
    /// Packets whose flow was still on another class's lists: sent to their class's overflow
    /// flow (also counted in `overflowed`).
    pub class_conflicts: u64,
    /// Detached flows that joined a new list (credit left in the current round).
    pub new_flows: u64,
    /// Detached flows that came back with their round's credit used up and joined the next
    /// round's list.
    pub next_round_flows: u64,
    /// Packets dequeued from the new list.
    pub served_new: u64,
    /// Quanta granted to flows that used up their deficit.
    pub rounds: u64,
    /// Class rounds that turned (the old list emptied and the next list took its place).
    pub round_turns: u64,
    /// Packets taken out by [`FairQueue::drop_head`] (the caller drops them).
    pub dropped: u64,
    /// Packets [`FairQueue::charge_sparse`] let leave without queueing them (charged to their
    /// flow's credit; not in `enqueued` nor `dequeued`).
    pub sparse_charged: u64,
}

/// Per-class fair queues over the caller's packet ids and flow indices. See the module docs.
#[derive(Clone, Debug)]
pub struct FairQueue {
    flows: Vec<Flow>,
    classes: Vec<ClassLists>,
    /// Per packet id: its link, length and enqueue time (one 16-byte record).
    slots: Vec<Slot>,
    /// Flow indices below this are the caller's; `flows_cap + class` is a class's overflow flow.
    flows_cap: u32,
    quantum: u32,
    packets: u64,
    counters: FairQueueCounters,
}

impl FairQueue {
    /// An empty fair queue (allocates everything: 32 bytes a flow, 16 bytes a packet id).
    pub fn new(config: FairQueueConfig) -> Result<FairQueue, FairQueueConfigError> {
        if config.quantum == 0 {
            return Err(FairQueueConfigError::ZeroQuantum);
        }
        if config.quantum >= 1 << 30 {
            return Err(FairQueueConfigError::QuantumTooLarge);
        }
        if config.classes > MAX_FAIR_CLASSES {
            return Err(FairQueueConfigError::TooManyClasses);
        }
        if u64::from(config.flows) + u64::from(config.classes) >= u64::from(NOT_QUEUED) {
            return Err(FairQueueConfigError::TooManyFlows);
        }
        if config.packets >= NOT_QUEUED {
            return Err(FairQueueConfigError::TooManyPackets);
        }
        let n = config.packets as usize;
        let flows = config.flows as usize + config.classes as usize;
        Ok(FairQueue {
            flows: vec![Flow::idle(config.quantum); flows],
            classes: vec![ClassLists::EMPTY; config.classes as usize],
            slots: vec![Slot::FREE; n],
            flows_cap: config.flows,
            quantum: config.quantum,
            packets: 0,
            counters: FairQueueCounters::default(),
        })
    }

    /// Grows the classes to `classes`, at most [`MAX_FAIR_CLASSES`] (configuration time:
    /// allocates). Never shrinks.
    pub fn set_classes(&mut self, classes: u32) {
        let have = self.classes.len();
        let want = classes.min(MAX_FAIR_CLASSES) as usize;
        if want > have {
            self.classes.resize(want, ClassLists::EMPTY);
            self.flows
                .resize(self.flows_cap as usize + want, Flow::idle(self.quantum));
        }
    }

    /// Classes the queue holds.
    pub fn classes(&self) -> usize {
        self.classes.len()
    }

    /// The quantum in bytes.
    pub fn quantum(&self) -> u32 {
        self.quantum
    }

    /// The overflow flow index of `class`.
    pub fn overflow_flow(&self, class: ClassId) -> u32 {
        self.flows_cap + class.0
    }

    /// The current round of `class` (0 out of range; wraps).
    pub fn class_round(&self, class: ClassId) -> u32 {
        self.classes.get(class.index()).map_or(0, |c| c.round)
    }

    /// Queues packet `id` of `len` bytes of `class` at the tail of `flow` (its class's overflow
    /// flow when `None` or out of range, or when the flow is on another class's lists), stamped
    /// `now` for its sojourn. A detached flow joins the new list when it has credit left in the
    /// current round, else the next round's list (see the module docs).
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        class: ClassId,
        flow: Option<u32>,
        id: u32,
        len: u32,
    ) -> Result<FairQueueEnqueued, Rejected<FairRejectReason>> {
        let c = class.index();
        let reject = |reason| {
            let len16 = u16::try_from(len).unwrap_or(u16::MAX);
            Rejected {
                pkt: PacketRef::new(id, FlowId(flow.unwrap_or(NIL)), class, len16),
                reason,
            }
        };
        let reason = if c >= self.classes.len() {
            Some(FairRejectReason::ClassOutOfRange)
        } else {
            match self.slots.get(id as usize) {
                None => Some(FairRejectReason::PacketOutOfRange),
                Some(s) if s.next != NOT_QUEUED => Some(FairRejectReason::AlreadyQueued),
                Some(_) => None,
            }
        };
        if let Some(reason) = reason {
            self.counters.rejected += 1;
            return Err(reject(reason));
        }
        let overflow_flow = self.overflow_flow(class);
        let mut f = match flow {
            Some(f) if f < self.flows_cap => f,
            _ => overflow_flow,
        };
        let conflict = {
            let st = &self.flows[f as usize];
            st.list() != LIST_NONE && st.class() != class.0
        };
        if conflict {
            f = overflow_flow;
        }
        if self.flows[f as usize].bytes.checked_add(len).is_none() {
            self.counters.rejected += 1;
            return Err(reject(FairRejectReason::FlowFull));
        }
        if f == overflow_flow {
            self.counters.overflowed += 1;
            self.counters.class_conflicts += u64::from(conflict);
        }
        let i = id as usize;
        self.slots[i] = Slot {
            next: NIL,
            len,
            enqueued_at: now,
        };
        let quantum = self.quantum as i32;
        let lists = &mut self.classes[c];
        let round = lists.round;
        let st = &mut self.flows[f as usize];
        if st.tail == NIL {
            st.head = id;
        } else {
            self.slots[st.tail as usize].next = id;
        }
        st.tail = id;
        st.packets += 1;
        st.bytes += len;
        if st.packets == 1 {
            lists.backlogged += 1;
        }
        lists.packets += 1;
        lists.bytes += u64::from(len);
        let detached = st.list() == LIST_NONE;
        let (mut new_flow, mut next_round) = (false, false);
        if detached {
            if st.class() != class.0 || st.round != round {
                // Idle rounds bank no credit; the debt of an overrun is kept.
                st.deficit = st.deficit.min(0) + quantum;
                st.round = round;
                st.set_class(class.0);
            }
            if st.deficit > 0 {
                st.set_list(LIST_NEW);
                new_flow = true;
                self.counters.new_flows += 1;
                push_tail(&mut self.flows, &mut self.classes[c].new, f);
            } else {
                st.deficit += quantum;
                st.round = round.wrapping_add(1);
                st.set_list(LIST_ROUND);
                next_round = true;
                self.counters.next_round_flows += 1;
                self.counters.rounds += 1;
                push_tail(&mut self.flows, &mut self.classes[c].next, f);
            }
        }
        self.packets += 1;
        self.counters.enqueued += 1;
        Ok(FairQueueEnqueued {
            flow: f,
            overflow: f == overflow_flow,
            new_flow,
            next_round,
        })
    }

    /// The packet of `class` that leaves now (see the module docs), or `None` when the class has
    /// nothing queued; `now` gives its sojourn.
    pub fn dequeue(&mut self, now: Timestamp, class: ClassId) -> Option<FairQueueDequeued> {
        let c = class.index();
        self.classes.get(c)?;
        let quantum = self.quantum as i32;
        // Each pass serves a packet, grants a quantum (at most once per listed flow before it
        // serves), detaches a flow that a drop left empty, or turns the round (only when the
        // new and old lists are empty and the next list is not): it ends.
        loop {
            let lists = &mut self.classes[c];
            let from_new = lists.new.head != NIL;
            let f = if from_new {
                lists.new.head
            } else if lists.old.head != NIL {
                lists.old.head
            } else if lists.next.head != NIL {
                lists.old = lists.next;
                lists.next = FlowList::EMPTY;
                lists.round = lists.round.wrapping_add(1);
                self.counters.round_turns += 1;
                continue;
            } else {
                debug_assert_eq!(lists.packets, 0, "class {c} has packets but no listed flow");
                return None;
            };
            let round = lists.round;
            let st = &mut self.flows[f as usize];
            if st.head == NIL {
                // Emptied by a drop: detached, its credit and tag kept.
                self.pop_listed(c, from_new);
                continue;
            }
            if st.deficit <= 0 {
                st.deficit += quantum;
                st.round = round.wrapping_add(1);
                self.counters.rounds += 1;
                let f = self.pop_listed(c, from_new);
                self.flows[f as usize].set_list(LIST_ROUND);
                push_tail(&mut self.flows, &mut self.classes[c].next, f);
                continue;
            }
            let id = st.head;
            let i = id as usize;
            let slot = self.slots[i];
            let len = slot.len;
            st.head = slot.next;
            if st.head == NIL {
                st.tail = NIL;
            }
            st.packets -= 1;
            st.bytes -= len;
            st.deficit = st
                .deficit
                .saturating_sub(i32::try_from(len).unwrap_or(i32::MAX));
            let emptied = st.packets == 0;
            self.slots[i].next = NOT_QUEUED;
            let lists = &mut self.classes[c];
            lists.packets -= 1;
            lists.bytes -= u64::from(len);
            if emptied {
                lists.backlogged -= 1;
                // Detached at once: a packet that comes back within the round finds its credit.
                self.pop_listed(c, from_new);
            }
            self.packets -= 1;
            self.counters.dequeued += 1;
            if from_new {
                self.counters.served_new += 1;
            }
            let enqueued_at = slot.enqueued_at;
            return Some(FairQueueDequeued {
                id,
                flow: f,
                len,
                enqueued_at,
                sojourn: now.saturating_since(enqueued_at),
                from_new,
            });
        }
    }

    /// Charges a `len`-byte packet of `flow` in `class` that the caller sends at once, without
    /// queueing it, when the flow is *sparse*: detached (nothing queued, on no list; a caller's
    /// flow index, not an overflow flow) with credit left in the class's current round, the
    /// flow that [`FairQueue::enqueue`] would put on the new list. Its length is taken from the
    /// flow's credit as [`FairQueue::dequeue`] would take it, the flow stays detached, and the
    /// packet is counted in [`FairQueueCounters::sparse_charged`]. So the credit bound per round
    /// holds for packets that bypass the queue: a flow that sends this way gets no more than one
    /// quantum per round (plus the overrun of its last packet) either. Returns false and
    /// changes nothing otherwise (the caller queues the packet).
    pub fn charge_sparse(&mut self, class: ClassId, flow: u32, len: u32) -> bool {
        let Some(lists) = self.classes.get(class.index()) else {
            return false;
        };
        let round = lists.round;
        if flow >= self.flows_cap {
            return false;
        }
        let quantum = self.quantum as i32;
        let st = &mut self.flows[flow as usize];
        if st.list() != LIST_NONE || st.packets != 0 {
            return false;
        }
        // The credit an enqueue would find: idle rounds bank none, an overrun's debt is kept.
        let deficit = if st.class() != class.0 || st.round != round {
            st.deficit.min(0) + quantum
        } else {
            st.deficit
        };
        if deficit <= 0 {
            return false;
        }
        st.deficit = deficit.saturating_sub(i32::try_from(len).unwrap_or(i32::MAX));
        st.round = round;
        st.set_class(class.0);
        self.counters.sparse_charged += 1;
        true
    }

    /// Takes the head flow of class `c`'s new (or old) list off it and marks it detached.
    fn pop_listed(&mut self, c: usize, from_new: bool) -> u32 {
        let lists = &mut self.classes[c];
        let list = if from_new {
            &mut lists.new
        } else {
            &mut lists.old
        };
        let f = pop_head(&mut self.flows, list);
        self.flows[f as usize].set_list(LIST_NONE);
        f
    }

    /// The flow of `class` with the most bytes queued (the first found on a tie; `None` when the
    /// class has nothing queued or is out of range). Walks the class's listed flows.
    pub fn fattest_flow(&self, class: ClassId) -> Option<u32> {
        let lists = self.classes.get(class.index())?;
        let mut best: Option<(u32, u32)> = None;
        for list in [lists.new, lists.old, lists.next] {
            let mut f = list.head;
            while f != NIL {
                let st = &self.flows[f as usize];
                if st.bytes > best.map_or(0, |b| b.1) {
                    best = Some((f, st.bytes));
                }
                f = st.next;
            }
        }
        best.map(|b| b.0)
    }

    /// Takes the oldest packet of `flow` out of the queue for the caller to drop (counted in
    /// [`FairQueueCounters::dropped`]), or `None` when the flow holds nothing. The flow keeps its
    /// place and credit; if it is left empty, the round robin detaches it when it reaches it.
    pub fn drop_head(&mut self, now: Timestamp, flow: u32) -> Option<FairQueueDequeued> {
        let st = self.flows.get_mut(flow as usize)?;
        if st.head == NIL {
            return None;
        }
        let id = st.head;
        let i = id as usize;
        let slot = self.slots[i];
        st.head = slot.next;
        if st.head == NIL {
            st.tail = NIL;
        }
        st.packets -= 1;
        st.bytes -= slot.len;
        let emptied = st.packets == 0;
        let from_new = st.list() == LIST_NEW;
        let lists = &mut self.classes[st.class() as usize];
        lists.packets -= 1;
        lists.bytes -= u64::from(slot.len);
        if emptied {
            lists.backlogged -= 1;
        }
        self.slots[i].next = NOT_QUEUED;
        self.packets -= 1;
        self.counters.dropped += 1;
        Some(FairQueueDequeued {
            id,
            flow,
            len: slot.len,
            enqueued_at: slot.enqueued_at,
            sojourn: now.saturating_since(slot.enqueued_at),
            from_new,
        })
    }

    /// How long the head packet of `flow` has waited at `now`: the flow's own queueing delay
    /// (zero when it has nothing queued or is out of range).
    pub fn flow_sojourn(&self, flow: u32, now: Timestamp) -> Duration {
        match self.flows.get(flow as usize) {
            Some(st) if st.head != NIL => {
                now.saturating_since(self.slots[st.head as usize].enqueued_at)
            }
            _ => Duration::ZERO,
        }
    }

    /// Packets queued in `flow` (0 out of range).
    pub fn flow_packets(&self, flow: u32) -> u32 {
        self.flows.get(flow as usize).map_or(0, |f| f.packets)
    }

    /// Bytes queued in `flow` (0 out of range).
    pub fn flow_bytes(&self, flow: u32) -> u64 {
        self.flows
            .get(flow as usize)
            .map_or(0, |f| u64::from(f.bytes))
    }

    /// Packets queued in `class` (0 out of range).
    pub fn class_packets(&self, class: ClassId) -> u32 {
        self.classes.get(class.index()).map_or(0, |c| c.packets)
    }

    /// Bytes queued in `class` (0 out of range).
    pub fn class_bytes(&self, class: ClassId) -> u64 {
        self.classes.get(class.index()).map_or(0, |c| c.bytes)
    }

    /// Flows of `class` with at least one packet queued (0 out of range).
    pub fn backlogged_flows(&self, class: ClassId) -> u32 {
        self.classes.get(class.index()).map_or(0, |c| c.backlogged)
    }

    /// Packets queued over all classes.
    pub fn len(&self) -> u64 {
        self.packets
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// True if packet `id` is queued.
    pub fn contains(&self, id: u32) -> bool {
        self.slots
            .get(id as usize)
            .is_some_and(|s| s.next != NOT_QUEUED)
    }

    /// The counters.
    pub fn counters(&self) -> FairQueueCounters {
        self.counters
    }

    /// Checks the bookkeeping (CONTRIBUTING.md §10): every listed flow is on exactly the list
    /// its tag says, in its class; flow queues hold exactly the queued ids; totals add up.
    /// Panics with the offending state. Walks everything: for tests.
    pub fn invariants(&self) {
        let mut seen = vec![false; self.flows.len()];
        let mut listed_packets = 0u64;
        for (c, lists) in self.classes.iter().enumerate() {
            let (mut packets, mut bytes, mut backlogged) = (0u64, 0u64, 0u32);
            let next_round = lists.round.wrapping_add(1);
            for (list, tag, round) in [
                (lists.new, LIST_NEW, lists.round),
                (lists.old, LIST_ROUND, lists.round),
                (lists.next, LIST_ROUND, next_round),
            ] {
                let (mut f, mut last) = (list.head, NIL);
                while f != NIL {
                    let st = &self.flows[f as usize];
                    assert!(!seen[f as usize], "flow {f} listed twice");
                    seen[f as usize] = true;
                    assert_eq!(st.list(), tag, "flow {f} tag in class {c}: {st:?}");
                    assert_eq!(st.round, round, "flow {f} round in class {c}: {st:?}");
                    assert_eq!(st.class() as usize, c, "flow {f}: {st:?}");
                    packets += u64::from(st.packets);
                    bytes += u64::from(st.bytes);
                    backlogged += u32::from(st.packets > 0);
                    last = f;
                    f = st.next;
                }
                assert_eq!(last, list.tail, "class {c} list tail");
            }
            assert_eq!(packets, u64::from(lists.packets), "class {c} packets");
            assert_eq!(bytes, lists.bytes, "class {c} bytes");
            assert_eq!(backlogged, lists.backlogged, "class {c} backlogged flows");
            listed_packets += packets;
        }
        assert_eq!(listed_packets, self.packets);
        let mut chained = 0u64;
        for (f, st) in self.flows.iter().enumerate() {
            if !seen[f] {
                assert_eq!(
                    st.list(),
                    LIST_NONE,
                    "flow {f} tagged but not listed: {st:?}"
                );
                assert_eq!(st.packets, 0, "idle flow {f} holds packets: {st:?}");
            }
            let (mut id, mut n, mut bytes, mut last) = (st.head, 0u32, 0u64, NIL);
            while id != NIL {
                n += 1;
                bytes += u64::from(self.slots[id as usize].len);
                last = id;
                id = self.slots[id as usize].next;
                assert_ne!(id, NOT_QUEUED, "flow {f} chain reaches an unqueued id");
            }
            assert_eq!(
                (n, bytes, last),
                (st.packets, u64::from(st.bytes), st.tail),
                "flow {f}"
            );
            chained += u64::from(n);
        }
        let queued = self.slots.iter().filter(|s| s.next != NOT_QUEUED).count() as u64;
        assert_eq!(chained, queued, "queued ids not in any flow");
        assert_eq!(queued, self.packets);
        let c = &self.counters;
        assert_eq!(c.enqueued, c.dequeued + c.dropped + self.packets, "{c:?}");
    }
}

/// Appends flow `f` to `list`.
fn push_tail(flows: &mut [Flow], list: &mut FlowList, f: u32) {
    flows[f as usize].next = NIL;
    if list.tail == NIL {
        list.head = f;
    } else {
        flows[list.tail as usize].next = f;
    }
    list.tail = f;
}

/// Removes and returns the head flow of a non-empty `list`.
fn pop_head(flows: &mut [Flow], list: &mut FlowList) -> u32 {
    let f = list.head;
    list.head = flows[f as usize].next;
    if list.head == NIL {
        list.tail = NIL;
    }
    flows[f as usize].next = NIL;
    f
}
