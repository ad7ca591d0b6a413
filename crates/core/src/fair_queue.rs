//! Fair queueing inside a rate-limited class: which flow's packet leaves when the class's
//! aggregate may send its next bytes. Deficit round robin with a list of new flows served before
//! the old ones, as Linux `fq_codel` schedules its flows (McKenney's stochastic fairness queueing
//! with Shreedhar and Varghese's DRR, and `fq_codel`'s new-flow list).
//!
//! Carousel §5.1 stamps every packet of an aggregate from one running departure time, so an
//! aggregate is one virtual FIFO: a sparse flow's packet waits behind everything the bulk flows
//! have queued. NicPic §3 instead lets the scheduler *pull* the next piece on demand, at the moment
//! the class may send, "with fair sharing" among what is queued; FlowBundler §IV keeps one bucket
//! per destination so that flows of one aggregate do not block each other. This module is that
//! pull: the caller keeps the class's timestamper (the aggregate decides *when*), and asks
//! [`FairQueue::dequeue`] *which* packet leaves at that moment.
//!
//! # The algorithm (`fq_codel`-style DRR)
//!
//! Per class there are two lists of flows, *new* and *old*. A flow that gets a packet while it is
//! on neither list (it was idle) joins the tail of the new list with a fresh quantum of credit
//! (its *deficit*). [`FairQueue::dequeue`] looks at the head of the new list, or of the old list
//! when the new one is empty:
//! * a flow whose deficit is used up (zero or less) gets one more quantum and moves to the tail of
//!   the old list;
//! * else its head packet leaves and its length is taken from the deficit;
//! * a flow found empty leaves the lists (it is idle), except a flow of the new list while the old
//!   list is not empty, which moves to the old list first (so a flow that keeps going idle cannot
//!   starve the old flows, as `fq_codel` does).
//!
//! So a sparse flow, whose packets find it idle, is served within one pass over the new flows,
//! ahead of the bulk; two continuously backlogged flows get the same bytes within one quantum
//! plus one packet. Each packet's enqueue time is kept, so [`FairQueueDequeued::sojourn`] and
//! [`FairQueue::flow_sojourn`] give the flow's *own* queueing delay for marking and dropping.
//!
//! # Layout (CONTRIBUTING.md §5)
//!
//! Packets are the caller's ids (pool slots, `0..packets`): a flow's queue is linked through a
//! preallocated per-slot record of 16 bytes (`next` id, length, enqueue time, read together), so
//! nothing is allocated after [`FairQueue::new`]. Flows are the caller's indices `0..flows`
//! (the daemon's flow-table entries), each [`FLOW_STATE_BYTES`] = 32 bytes (checked at compile
//! time, within the 64-byte budget): head, tail, list link, packets, deficit, class, list tag and
//! backlog bytes. One extra flow per class, its *overflow* flow, takes the packets that come
//! without a flow index (the caller's flow state was full) or whose flow is busy in another class;
//! both are counted ([`FairQueueCounters::overflowed`], [`FairQueueCounters::class_conflicts`]).
//!
//! # Where this departs from `fq_codel`
//!
//! * No hashing into a fixed number of queues: flows are the caller's exact indices, and the
//!   bounded state is the caller's (its table being full sends a packet to the overflow flow).
//! * No CoDel inside: the sojourn time is returned, and the caller decides to mark or drop.
//! * The quantum is in bytes per class round, the same for every flow of every class (the
//!   daemon uses one full frame, as `fq_codel`'s default quantum is one MTU plus headers).
//!
//! Time never goes backwards per packet: a sojourn is `now - enqueued_at`, saturating at zero if
//! the caller passes an earlier `now`.

use crate::packet::{ClassId, FlowId, PacketRef};
use crate::queue::Rejected;
use crate::time::{Duration, Timestamp};

#[cfg(test)]
mod tests;

/// Bytes of one flow's scheduling state (`Flow`); checked at compile time. The budget is 64
/// bytes a flow (one cache line); this layout takes half.
pub const FLOW_STATE_BYTES: usize = 32;

/// The end of a list, or no packet.
const NIL: u32 = u32::MAX;
/// A slot's `next` while its packet is not in any queue.
const NOT_QUEUED: u32 = u32::MAX - 1;

/// Which list a flow is on.
const LIST_NONE: u8 = 0;
const LIST_NEW: u8 = 1;
const LIST_OLD: u8 = 2;

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
    /// DRR credit in bytes; may go negative after a packet larger than the credit.
    deficit: i32,
    /// The class whose lists hold the flow (meaningful while `list != LIST_NONE`).
    class: u16,
    /// [`LIST_NONE`], [`LIST_NEW`] or [`LIST_OLD`].
    list: u8,
    _pad: u8,
    /// Bytes queued.
    bytes: u64,
}

const _: () = assert!(core::mem::size_of::<Flow>() == FLOW_STATE_BYTES);
const _: () = assert!(FLOW_STATE_BYTES <= 64);

impl Flow {
    const IDLE: Flow = Flow {
        head: NIL,
        tail: NIL,
        next: NIL,
        packets: 0,
        deficit: 0,
        class: 0,
        list: LIST_NONE,
        _pad: 0,
        bytes: 0,
    };
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

/// One class's lists and totals.
#[derive(Clone, Copy, Debug)]
struct ClassLists {
    new: FlowList,
    old: FlowList,
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
        packets: 0,
        backlogged: 0,
        bytes: 0,
    };
}

/// Sizes of a [`FairQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairQueueConfig {
    /// Packet ids `0..packets` (the caller's pool slots).
    pub packets: u32,
    /// Flow indices `0..flows` (the caller's flow table).
    pub flows: u32,
    /// Classes `0..classes`, each with its own lists and overflow flow.
    pub classes: u16,
    /// Bytes of credit a flow gets per round: one full frame (`fq_codel`'s default quantum is
    /// the device's MTU plus its link header).
    pub quantum: u32,
}

/// A [`FairQueueConfig`] that cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FairQueueConfigError {
    /// A zero quantum would never serve a packet.
    #[error("the quantum must be at least one byte")]
    ZeroQuantum,
    /// The quantum must fit the signed deficit.
    #[error("the quantum must be below 2^30 bytes")]
    QuantumTooLarge,
    /// Flows plus overflow flows must stay below the list sentinels.
    #[error("too many flows: flows + classes must be below 2^32 - 2")]
    TooManyFlows,
    /// Packet ids must stay below the list sentinels.
    #[error("too many packets: at most 2^32 - 2")]
    TooManyPackets,
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
}

/// Where [`FairQueue::enqueue`] put a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairQueueEnqueued {
    /// The flow index that holds it (the class's overflow flow when `overflow`).
    pub flow: u32,
    /// It went to the class's overflow flow.
    pub overflow: bool,
    /// Its flow was idle and joined the new list.
    pub new_flow: bool,
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
    /// Idle flows that joined a new list.
    pub new_flows: u64,
    /// Packets dequeued from the new list.
    pub served_new: u64,
    /// Quanta granted to flows that used up their deficit.
    pub rounds: u64,
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
        if u64::from(config.flows) + u64::from(config.classes) >= u64::from(NOT_QUEUED) {
            return Err(FairQueueConfigError::TooManyFlows);
        }
        if config.packets >= NOT_QUEUED {
            return Err(FairQueueConfigError::TooManyPackets);
        }
        let n = config.packets as usize;
        Ok(FairQueue {
            flows: vec![Flow::IDLE; config.flows as usize + usize::from(config.classes)],
            classes: vec![ClassLists::EMPTY; usize::from(config.classes)],
            slots: vec![Slot::FREE; n],
            flows_cap: config.flows,
            quantum: config.quantum,
            packets: 0,
            counters: FairQueueCounters::default(),
        })
    }

    /// Grows the classes to `classes` (configuration time: allocates). Never shrinks.
    pub fn set_classes(&mut self, classes: u16) {
        let have = self.classes.len();
        let want = usize::from(classes);
        if want > have {
            self.classes.resize(want, ClassLists::EMPTY);
            self.flows
                .resize(self.flows_cap as usize + want, Flow::IDLE);
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
        self.flows_cap + u32::from(class.0)
    }

    /// Queues packet `id` of `len` bytes of `class` at the tail of `flow` (its class's overflow
    /// flow when `None` or out of range, or when the flow is on another class's lists), stamped
    /// `now` for its sojourn. A flow that was idle joins the new list with a fresh quantum.
    pub fn enqueue(
        &mut self,
        now: Timestamp,
        class: ClassId,
        flow: Option<u32>,
        id: u32,
        len: u32,
    ) -> Result<FairQueueEnqueued, Rejected<FairRejectReason>> {
        let c = usize::from(class.0);
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
            _ => {
                self.counters.overflowed += 1;
                overflow_flow
            }
        };
        {
            let st = &self.flows[f as usize];
            if st.list != LIST_NONE && st.class != class.0 {
                self.counters.class_conflicts += 1;
                self.counters.overflowed += 1;
                f = overflow_flow;
            }
        }
        let i = id as usize;
        self.slots[i] = Slot {
            next: NIL,
            len,
            enqueued_at: now,
        };
        let quantum = self.quantum as i32;
        let st = &mut self.flows[f as usize];
        if st.tail == NIL {
            st.head = id;
        } else {
            self.slots[st.tail as usize].next = id;
        }
        st.tail = id;
        st.packets += 1;
        st.bytes += u64::from(len);
        let lists = &mut self.classes[c];
        if st.packets == 1 {
            lists.backlogged += 1;
        }
        lists.packets += 1;
        lists.bytes += u64::from(len);
        let new_flow = st.list == LIST_NONE;
        if new_flow {
            st.list = LIST_NEW;
            st.class = class.0;
            st.deficit = quantum;
            st.next = NIL;
            self.counters.new_flows += 1;
            push_tail(&mut self.flows, &mut self.classes[c].new, f);
        }
        self.packets += 1;
        self.counters.enqueued += 1;
        Ok(FairQueueEnqueued {
            flow: f,
            overflow: f == overflow_flow,
            new_flow,
        })
    }

    /// The packet of `class` that leaves now (see the module docs), or `None` when the class has
    /// nothing queued; `now` gives its sojourn.
    pub fn dequeue(&mut self, now: Timestamp, class: ClassId) -> Option<FairQueueDequeued> {
        let c = usize::from(class.0);
        self.classes.get(c)?;
        let quantum = self.quantum as i32;
        // Each pass either serves a packet, grants a quantum (at most once per listed flow
        // before it serves or is found empty) or takes an empty flow off a list: empty flows
        // left on the lists are removed here, also when the class has nothing queued.
        loop {
            let lists = &mut self.classes[c];
            let from_new = lists.new.head != NIL;
            let f = if from_new {
                lists.new.head
            } else {
                lists.old.head
            };
            if f == NIL {
                debug_assert_eq!(lists.packets, 0, "class {c} has packets but no listed flow");
                return None;
            }
            let st = &mut self.flows[f as usize];
            if st.deficit <= 0 {
                st.deficit += quantum;
                self.counters.rounds += 1;
                self.move_head_to_old(c, from_new);
                continue;
            }
            if st.head == NIL {
                let keep = from_new && self.classes[c].old.head != NIL;
                if keep {
                    self.move_head_to_old(c, true);
                } else {
                    let list = if from_new {
                        &mut self.classes[c].new
                    } else {
                        &mut self.classes[c].old
                    };
                    pop_head(&mut self.flows, list);
                    self.flows[f as usize].list = LIST_NONE;
                }
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
            st.bytes -= u64::from(len);
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

    /// Moves the head flow of class `c`'s new (or old) list to the tail of its old list.
    fn move_head_to_old(&mut self, c: usize, from_new: bool) {
        let lists = &mut self.classes[c];
        let f = if from_new {
            pop_head(&mut self.flows, &mut lists.new)
        } else {
            pop_head(&mut self.flows, &mut lists.old)
        };
        self.flows[f as usize].list = LIST_OLD;
        push_tail(&mut self.flows, &mut self.classes[c].old, f);
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
        self.flows.get(flow as usize).map_or(0, |f| f.bytes)
    }

    /// Packets queued in `class` (0 out of range).
    pub fn class_packets(&self, class: ClassId) -> u32 {
        self.classes
            .get(usize::from(class.0))
            .map_or(0, |c| c.packets)
    }

    /// Bytes queued in `class` (0 out of range).
    pub fn class_bytes(&self, class: ClassId) -> u64 {
        self.classes
            .get(usize::from(class.0))
            .map_or(0, |c| c.bytes)
    }

    /// Flows of `class` with at least one packet queued (0 out of range).
    pub fn backlogged_flows(&self, class: ClassId) -> u32 {
        self.classes
            .get(usize::from(class.0))
            .map_or(0, |c| c.backlogged)
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
            for (list, tag) in [(lists.new, LIST_NEW), (lists.old, LIST_OLD)] {
                let (mut f, mut last) = (list.head, NIL);
                while f != NIL {
                    let st = &self.flows[f as usize];
                    assert!(!seen[f as usize], "flow {f} listed twice");
                    seen[f as usize] = true;
                    assert_eq!(st.list, tag, "flow {f} tag in class {c}: {st:?}");
                    assert_eq!(usize::from(st.class), c, "flow {f}: {st:?}");
                    packets += u64::from(st.packets);
                    bytes += st.bytes;
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
                assert_eq!(st.list, LIST_NONE, "flow {f} tagged but not listed: {st:?}");
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
                (st.packets, st.bytes, st.tail),
                "flow {f}"
            );
            chained += u64::from(n);
        }
        let queued = self.slots.iter().filter(|s| s.next != NOT_QUEUED).count() as u64;
        assert_eq!(chained, queued, "queued ids not in any flow");
        assert_eq!(queued, self.packets);
        let c = &self.counters;
        assert_eq!(c.enqueued, c.dequeued + self.packets, "{c:?}");
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
