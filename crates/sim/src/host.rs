//! Hosts: the per-flow source (a TCP-like or UDP-like transport plus its timers and backpressure
//! state), the receiver that answers it with cumulative ACKs, and the seeded random generator each
//! source owns (CONTRIBUTING.md §14: one seeded RNG per source).
//!
//! All per-flow state is preallocated in one `Vec<Flow>` indexed by flow number; the receiver's
//! out-of-order list keeps its capacity, so the steady state does not allocate.
//!
//! The receiver follows RFC 5681 §4.2 / RFC 1122 4.2.3.2: one cumulative ACK per segment, or, with
//! delayed ACKs, one per two in-order segments with an immediate ACK for any segment that is out
//! of order or fills a hole, and a timer ([`DELAYED_ACK_TIMEOUT`]) for a lone segment. The ACK
//! echoes the triggering segment's send time (RFC 7323 timestamps) and its CE mark (RFC 3168).

use crate::event::Ack;
use crate::tcp::TcpSender;
use metronome_core::{Duration, Timestamp};

/// Delayed-ACK timeout, 40 ms (Linux `TCP_DELACK_MIN`).
pub const DELAYED_ACK_TIMEOUT: Duration = Duration::from_millis(40);

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast, seedable generator; one per source.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator of flow `flow` under run seed `seed`.
    pub fn for_flow(seed: u64, flow: u32) -> Self {
        let mut r = Rng(seed ^ (u64::from(flow).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, n)` (0 when `n` is 0), by widening multiply (Lemire).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A source's transport.
#[derive(Clone, Debug)]
pub enum Transport {
    /// TCP-like: closed loop.
    Tcp(Box<TcpSender>),
    /// UDP-like: open loop; `backlog` packets wait in the socket buffer.
    Udp {
        /// Time between two generated packets.
        interval: Duration,
        /// Packets generated and not yet sent.
        backlog: u32,
        /// Next sequence number (for the receiver).
        next_seq: u32,
    },
}

/// The receiving side of one flow.
#[derive(Clone, Debug, Default)]
pub struct Receiver {
    /// Next in-order MTU expected.
    pub rcv_nxt: u32,
    /// Out-of-order ranges `[start, end)` above `rcv_nxt`, sorted, disjoint, not adjacent.
    ooo: Vec<(u32, u32)>,
    /// In-order segments received since the last ACK (delayed ACK).
    unacked_segments: u32,
    /// CE seen since the last ACK.
    ce_pending: bool,
    /// Echo of the latest segment not yet ACKed.
    ts_pending: Timestamp,
    /// A delayed-ACK timer is scheduled.
    pub delack_armed: bool,
}

impl Receiver {
    /// Takes MTUs `[seq, seq + n)` sent at `ts`; returns the ACK to send now, if any.
    pub fn on_data(
        &mut self,
        flow: u32,
        seq: u32,
        n: u32,
        ts: Timestamp,
        ce: bool,
        delayed: bool,
    ) -> Option<Ack> {
        let end = seq + n;
        let in_order = seq <= self.rcv_nxt;
        let had_holes = !self.ooo.is_empty();
        if in_order {
            self.rcv_nxt = self.rcv_nxt.max(end);
            self.absorb();
        } else {
            self.insert(seq, end);
        }
        self.ce_pending |= ce;
        self.ts_pending = ts;
        self.unacked_segments += 1;
        let immediate = !delayed || !in_order || had_holes || self.unacked_segments >= 2;
        immediate.then(|| self.ack(flow))
    }

    /// The ACK a delayed-ACK timer sends, if anything is unacknowledged.
    pub fn on_delack_timer(&mut self, flow: u32) -> Option<Ack> {
        self.delack_armed = false;
        (self.unacked_segments > 0).then(|| self.ack(flow))
    }

    fn ack(&mut self, flow: u32) -> Ack {
        let a = Ack {
            flow,
            ack: self.rcv_nxt,
            ts_echo: self.ts_pending,
            ece: self.ce_pending,
        };
        self.unacked_segments = 0;
        self.ce_pending = false;
        a
    }

    /// Merges out-of-order ranges that `rcv_nxt` now reaches.
    fn absorb(&mut self) {
        let mut k = 0;
        while k < self.ooo.len() && self.ooo[k].0 <= self.rcv_nxt {
            self.rcv_nxt = self.rcv_nxt.max(self.ooo[k].1);
            k += 1;
        }
        if k > 0 {
            self.ooo.drain(..k);
        }
    }

    /// Inserts `[s, e)` into the sorted out-of-order list, merging overlaps.
    fn insert(&mut self, s: u32, e: u32) {
        let i = self.ooo.partition_point(|r| r.1 < s);
        let mut j = i;
        let (mut s2, mut e2) = (s, e);
        while j < self.ooo.len() && self.ooo[j].0 <= e2 {
            s2 = s2.min(self.ooo[j].0);
            e2 = e2.max(self.ooo[j].1);
            j += 1;
        }
        if j == i {
            self.ooo.insert(i, (s2, e2));
        } else {
            self.ooo[i] = (s2, e2);
            self.ooo.drain(i + 1..j);
        }
    }
}

/// All state of one flow: source, timers, backpressure, receiver, counters.
///
/// Hot fields first: the transport and the gates consulted on every send.
#[derive(Clone, Debug)]
pub struct Flow {
    /// The transport.
    pub transport: Transport,
    /// The earliest time the transport's pacing lets the next packet leave.
    pub next_send: Timestamp,
    /// Paused by zD (a virtual drop), until resumed.
    pub paused: bool,
    /// zD resumed the flow and it has not offered since: if it has nothing to send it must pass
    /// its turn on (zD §4.2).
    pub resumed_turn: bool,
    /// The flow has started.
    pub started: bool,
    /// A `SourceWake` event is pending at this time.
    pub wake_at: Option<Timestamp>,
    /// The flow is in the event loop's ready list.
    pub ready: bool,
    /// The receiver.
    pub rx: Receiver,
    /// The source's random generator.
    pub rng: Rng,
    /// Bytes the NIC sent for this flow after the warm-up.
    pub bytes_measured: u64,
    /// Packets generated by a UDP source that found its socket buffer full.
    pub source_drops: u64,
}

impl Flow {
    /// A flow that has not started.
    pub fn new(transport: Transport, rng: Rng) -> Self {
        Flow {
            transport,
            next_send: Timestamp::ZERO,
            paused: false,
            resumed_turn: false,
            started: false,
            wake_at: None,
            ready: false,
            rx: Receiver::default(),
            rng,
            bytes_measured: 0,
            source_drops: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receiver_acks_cumulatively_across_holes() {
        let mut r = Receiver::default();
        let t = Timestamp::ZERO;
        assert_eq!(r.on_data(0, 0, 1, t, false, false).unwrap().ack, 1);
        assert_eq!(r.on_data(0, 2, 1, t, false, false).unwrap().ack, 1); // hole
        assert_eq!(r.on_data(0, 4, 2, t, false, false).unwrap().ack, 1);
        assert_eq!(r.on_data(0, 3, 1, t, true, false).unwrap().ack, 1);
        let a = r.on_data(0, 1, 1, t, false, false).unwrap();
        assert_eq!(a.ack, 6);
        assert!(!a.ece, "CE was echoed with the previous ACK");
        assert!(r.ooo.is_empty());
    }

    #[test]
    fn delayed_acks_every_second_segment() {
        let mut r = Receiver::default();
        let t = Timestamp::ZERO;
        assert!(r.on_data(0, 0, 1, t, false, true).is_none());
        assert_eq!(r.on_data(0, 1, 1, t, false, true).unwrap().ack, 2);
        assert!(r.on_data(0, 2, 1, t, false, true).is_none());
        assert_eq!(r.on_delack_timer(0).unwrap().ack, 3);
        assert!(r.on_delack_timer(0).is_none());
    }

    #[test]
    fn rng_is_seeded_and_uniformish() {
        let mut a = Rng::for_flow(7, 3);
        let mut b = Rng::for_flow(7, 3);
        let mut c = Rng::for_flow(8, 3);
        let (x, y, z) = (a.next_u64(), b.next_u64(), c.next_u64());
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert!((0..1000).all(|_| a.below(10) < 10));
    }
}
