//! Receiver-side ACK shaping (Carousel §6): the receiver slows incast senders down by releasing
//! acknowledgements at a target rate instead of queueing their data.
//!
//! Per flow the shaper keeps the paper's three variables: the last acknowledged sequence number
//! `SN_a` (the ACK number that last left the receiver), the time of that acknowledgement `T_a`,
//! and the last received sequence number `SN_r` (the highest ACK number the receiver's own TCP
//! produced). Every outgoing ACK is rewritten to
//!
//! ```text
//! NewAck = min((now - T_a) x Rate + SN_a, SN_r)
//! ```
//!
//! in TCP sequence space (mod 2^32, never moving an ACK backwards), and an ACK is generated when
//! no ACK has left for `MTU / Rate` while received data remains unacknowledged
//! ([`AckShaper::poll`], due at [`AckShaper::next_due`]). `Rate` is configured per flow, or is an
//! aggregate divided by the flows in the table ([`AckRate`]).
//!
//! Departures from the paper, and why:
//! * **Credit carried, capped at a burst.** The paper sets `T_a = now` on every advance, which
//!   loses the unspent allowance when `SN_r` was the limit, and lets the allowance grow without
//!   bound while a flow is idle (a later burst of data would be acknowledged all at once). Here
//!   `T_a` is a virtual time advanced by exactly the bytes acknowledged (in the 40.24 fixed point
//!   of [`Rate`], so no rounding accumulates) and never older than `burst / Rate` before `now`:
//!   a token bucket of depth `burst` (default one MTU). Over any interval the bytes acknowledged
//!   are at most `Rate x interval + burst`.
//! * **Duplicate ACKs suppressed.** A pure ACK (no payload, no SYN/FIN/RST) whose rewritten number
//!   would repeat the last one while data is held back would be a duplicate ACK to the sender and
//!   trigger fast retransmit (RFC 5681 §3.2); it is suppressed ([`AckAction::Suppress`], counter
//!   `suppressed`) and the generated ACK releases the data later. A true duplicate ACK (nothing
//!   held back) passes unchanged.
//! * **Active flows.** "Total available bandwidth divided by the number of flows": the flows
//!   counted are those in the table, i.e. seen within `idle_timeout` or with data held back.
//! * **Not handled:** SACK blocks and the advertised window are left as the receiver wrote them
//!   (the window's right edge moves down with the ACK, which only restricts the sender further);
//!   a SACK block above a held-back ACK may make a sender with real losses retransmit early.
//!
//! Memory: a preallocated table of `capacity` flows (80 bytes each plus two 4-byte index buckets,
//! so the index stays at most half full); an ACK of a flow that finds the table full passes
//! unchanged and is counted (`table_full`). Flows fully acknowledged and idle for `idle_timeout`
//! are expired lazily. The generated-ACK order is an intrusive list sorted by due time, so
//! [`AckShaper::next_due`] is O(1) and nothing allocates after construction.

use crate::rate::Rate;
use crate::time::{Duration, Timestamp};

mod table;

use table::{FlowSlot, FlowTable, LRU, PENDING};

/// Default bytes of one generated-ACK step and of the burst: 1500, Carousel §7.1.4's packet size.
pub const DEFAULT_MTU: u32 = 1500;

/// Default idle time after which a fully acknowledged flow leaves the table: 1 s, long beside a
/// datacenter RTT (Carousel §7.1.4: about 10 µs) and a WAN one, short beside a connection's life.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Most flows one shaper tracks: slot indices must stay below the `u32` list sentinel.
pub const MAX_FLOWS: u32 = 1 << 30;

/// The rate at which a flow's acknowledgements are released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckRate {
    /// Every flow gets this rate (set by a bandwidth allocator, Carousel §6).
    PerFlow(Rate),
    /// This aggregate divided by the flows in the table (Carousel §6: "the total available
    /// bandwidth divided by the number of flows").
    Shared(Rate),
}

/// Parameters of an [`AckShaper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckShapingConfig {
    /// How fast acknowledgements are released.
    pub rate: AckRate,
    /// Most flows tracked at once (1..=[`MAX_FLOWS`]).
    pub capacity: u32,
    /// Bytes per generated-ACK interval (`MTU / Rate`, Carousel §6).
    pub mtu: u32,
    /// Bytes of allowance a flow may bank while it has nothing to acknowledge.
    pub burst: u32,
    /// A flow with nothing held back and no ACK for this long leaves the table.
    pub idle_timeout: Duration,
}

impl AckShapingConfig {
    /// `rate` with [`DEFAULT_MTU`], a one-MTU burst, [`DEFAULT_IDLE_TIMEOUT`] and room for
    /// `capacity` flows.
    pub fn new(rate: AckRate, capacity: u32) -> Self {
        AckShapingConfig {
            rate,
            capacity,
            mtu: DEFAULT_MTU,
            burst: DEFAULT_MTU,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Why a configuration is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AckShapingConfigError {
    /// The rate is zero: nothing would ever be acknowledged.
    #[error("ACK shaping rate must be above 0 bit/s")]
    ZeroRate,
    /// Capacity outside 1..=MAX_FLOWS.
    #[error("ACK shaping capacity must be 1..={MAX_FLOWS} flows")]
    Capacity,
    /// A zero MTU: generated ACKs would be due continuously.
    #[error("ACK shaping mtu must be above 0 bytes")]
    ZeroMtu,
}

/// What a segment leaving the receiver is, as far as ACK shaping cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// No payload and no SYN/FIN/RST: suppressed rather than sent as a duplicate.
    PureAck,
    /// Payload or FIN: always sent, its ACK number rewritten.
    Carrying,
    /// SYN (a SYN-ACK): passes unchanged and (re)starts the flow's state.
    Syn,
    /// RST: passes unchanged and removes the flow.
    Reset,
}

/// A tracked flow's slot, stable while the flow is in the table (for per-flow side state such
/// as a header template).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowHandle(pub u32);

/// What to do with an outgoing segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckAction {
    /// Send it unchanged.
    Pass,
    /// Send it with this acknowledgement number.
    Rewrite(u32),
    /// Do not send it (a pure ACK that would be a duplicate); a generated ACK follows.
    Suppress,
}

/// The decision for one segment, and the flow's slot when the flow is tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckDecision {
    /// What to do.
    pub action: AckAction,
    /// The flow's slot, `None` when it is not tracked (table full, RST).
    pub flow: Option<FlowHandle>,
}

/// An acknowledgement the shaper generated (Carousel §6: "Acknowledgments are generated by
/// Carousel when no packet has been generated by the upper layer for the time MTU/Rate").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneratedAck {
    /// The flow's slot.
    pub flow: FlowHandle,
    /// The flow's key, as given to [`AckShaper::on_ack`].
    pub key: u64,
    /// The acknowledgement number to send.
    pub ack: u32,
}

/// Named counters (CONTRIBUTING.md §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckShapingCounters {
    /// Segments sent with a lower acknowledgement number than the receiver wrote.
    pub rewritten: u64,
    /// Segments sent unchanged (nothing held back, untracked, SYN, RST).
    pub passthrough: u64,
    /// Pure ACKs suppressed as would-be duplicates.
    pub suppressed: u64,
    /// ACKs generated when due.
    pub generated: u64,
    /// Segments of new flows that found the table full (sent unchanged).
    pub table_full: u64,
    /// Segments whose ACK number was older than the flow's `SN_r` (reordered or stale).
    pub stale: u64,
    /// Flows entered into the table.
    pub flows_opened: u64,
    /// Flows removed by an RST.
    pub flows_reset: u64,
    /// Flows removed after `idle_timeout` with nothing held back.
    pub flows_expired: u64,
}

/// `a` is before `b` in sequence space (RFC 793 §3.3, mod 2^32 within half the space).
#[inline]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// The receiver-side ACK shaper. See the module documentation.
#[derive(Clone, Debug)]
pub struct AckShaper {
    cfg: AckShapingConfig,
    table: FlowTable,
    /// Per-flow rate now in force, and its ns per byte (40.24 fixed point).
    flow_rate: Rate,
    ns_per_byte_fp: u128,
    /// `MTU / Rate` in ns: the generated-ACK interval.
    interval: Duration,
    counters: AckShapingCounters,
    last_now: Timestamp,
}

impl AckShaper {
    /// A shaper with room for `cfg.capacity` flows, all allocated now.
    pub fn new(cfg: AckShapingConfig) -> Result<Self, AckShapingConfigError> {
        let rate = match cfg.rate {
            AckRate::PerFlow(r) | AckRate::Shared(r) => r,
        };
        if rate.bps() == 0 {
            return Err(AckShapingConfigError::ZeroRate);
        }
        if cfg.capacity == 0 || cfg.capacity > MAX_FLOWS {
            return Err(AckShapingConfigError::Capacity);
        }
        if cfg.mtu == 0 {
            return Err(AckShapingConfigError::ZeroMtu);
        }
        let mut s = AckShaper {
            cfg,
            table: FlowTable::new(cfg.capacity),
            flow_rate: rate,
            ns_per_byte_fp: 0,
            interval: Duration::ZERO,
            counters: AckShapingCounters::default(),
            last_now: Timestamp::ZERO,
        };
        s.update_rate();
        Ok(s)
    }

    /// The configuration.
    pub fn config(&self) -> &AckShapingConfig {
        &self.cfg
    }

    /// The counters so far.
    pub fn counters(&self) -> AckShapingCounters {
        self.counters
    }

    /// Flows in the table.
    pub fn flows(&self) -> u32 {
        self.table.len()
    }

    /// The rate each flow's acknowledgements are released at now.
    pub fn flow_rate(&self) -> Rate {
        self.flow_rate
    }

    /// Changes the rate (a bandwidth allocator's update, or a configuration reload).
    pub fn set_rate(&mut self, rate: AckRate) -> Result<(), AckShapingConfigError> {
        match rate {
            AckRate::PerFlow(r) | AckRate::Shared(r) if r.bps() == 0 => {
                Err(AckShapingConfigError::ZeroRate)
            }
            _ => {
                self.cfg.rate = rate;
                self.update_rate();
                Ok(())
            }
        }
    }

    fn update_rate(&mut self) {
        self.flow_rate = match self.cfg.rate {
            AckRate::PerFlow(r) => r,
            AckRate::Shared(r) => {
                Rate::from_bps((r.bps() / u64::from(self.table.len().max(1))).max(1))
            }
        };
        self.ns_per_byte_fp = self.flow_rate.transmit_time_fp(1).max(1);
        self.interval = self
            .flow_rate
            .transmit_time(u64::from(self.cfg.mtu))
            .max(Duration::from_nanos(1));
    }

    /// Time never goes backwards (CONTRIBUTING.md §10): an earlier `now` is taken as the latest
    /// seen.
    fn clock(&mut self, now: Timestamp) -> Timestamp {
        debug_assert!(now >= self.last_now, "time went backwards");
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// Takes a segment the receiver sends on flow `key` carrying acknowledgement number `ack`
    /// and says what to send instead.
    pub fn on_ack(&mut self, now: Timestamp, key: u64, ack: u32, kind: SegmentKind) -> AckDecision {
        let now = self.clock(now);
        self.expire(now);
        if kind == SegmentKind::Reset {
            if let Some(i) = self.table.find(key) {
                self.table.remove(i);
                self.counters.flows_reset += 1;
                self.update_rate();
            }
            self.counters.passthrough += 1;
            return AckDecision {
                action: AckAction::Pass,
                flow: None,
            };
        }
        let i = match self.table.find(key) {
            Some(i) if kind != SegmentKind::Syn => i,
            found => {
                if let Some(i) = found {
                    self.table.remove(i);
                    self.update_rate();
                }
                return self.open(now, key, ack);
            }
        };
        self.table.touch(i, now);
        let s = self.table.slot_mut(i);
        if seq_lt(s.sn_r, ack) {
            s.sn_r = ack;
        } else if ack != s.sn_r {
            self.counters.stale += 1;
        }
        let n = self.allowance(i, now);
        let s = self.table.slot(i);
        let (sn_a, sn_r) = (s.sn_a, s.sn_r);
        let action = if n > 0 {
            self.advance(i, now, n);
            let new = sn_a.wrapping_add(n);
            if new == ack {
                AckAction::Pass
            } else {
                AckAction::Rewrite(new)
            }
        } else if sn_a != sn_r && kind == SegmentKind::PureAck {
            self.counters.suppressed += 1;
            self.table.schedule_pending(i, self.interval);
            return AckDecision {
                action: AckAction::Suppress,
                flow: Some(FlowHandle(i)),
            };
        } else {
            self.table.emitted(i, now, self.interval);
            if ack == sn_a {
                AckAction::Pass
            } else {
                AckAction::Rewrite(sn_a)
            }
        };
        match action {
            AckAction::Pass => self.counters.passthrough += 1,
            _ => self.counters.rewritten += 1,
        }
        AckDecision {
            action,
            flow: Some(FlowHandle(i)),
        }
    }

    /// Enters a new flow acknowledged up to `ack` (sent unchanged), or counts a full table.
    fn open(&mut self, now: Timestamp, key: u64, ack: u32) -> AckDecision {
        self.counters.passthrough += 1;
        let t_a = u128::from(now.as_nanos()) << Rate::FRAC_BITS;
        let slot = FlowSlot::new(key, ack, t_a, now);
        match self.table.insert(slot) {
            Some(i) => {
                self.counters.flows_opened += 1;
                self.update_rate();
                AckDecision {
                    action: AckAction::Pass,
                    flow: Some(FlowHandle(i)),
                }
            }
            None => {
                self.counters.table_full += 1;
                AckDecision {
                    action: AckAction::Pass,
                    flow: None,
                }
            }
        }
    }

    /// Bytes flow `i` may acknowledge now: its credit, capped by what it received.
    fn allowance(&self, i: u32, now: Timestamp) -> u32 {
        let s = self.table.slot(i);
        let held = s.sn_r.wrapping_sub(s.sn_a);
        if held == 0 {
            return 0;
        }
        let now_fp = u128::from(now.as_nanos()) << Rate::FRAC_BITS;
        let t_a = s.t_a_fp.max(self.credit_floor(now_fp));
        let credit = now_fp.saturating_sub(t_a) / self.ns_per_byte_fp;
        credit.min(u128::from(held)) as u32
    }

    /// The oldest `T_a` allowed at `now`: `burst / Rate` before it.
    fn credit_floor(&self, now_fp: u128) -> u128 {
        now_fp.saturating_sub(u128::from(self.cfg.burst) * self.ns_per_byte_fp)
    }

    /// Acknowledges `n` more bytes of flow `i` at `now`.
    fn advance(&mut self, i: u32, now: Timestamp, n: u32) {
        let now_fp = u128::from(now.as_nanos()) << Rate::FRAC_BITS;
        let floor = self.credit_floor(now_fp);
        let step = u128::from(n) * self.ns_per_byte_fp;
        let s = self.table.slot_mut(i);
        s.t_a_fp = s.t_a_fp.max(floor) + step;
        s.sn_a = s.sn_a.wrapping_add(n);
        debug_assert!(s.t_a_fp <= now_fp, "acknowledged beyond the credit");
        self.table.emitted(i, now, self.interval);
    }

    /// When the earliest generated ACK is due, if any flow holds data back.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.table.head(PENDING).map(|i| self.table.slot(i).due)
    }

    /// Generates the ACKs due at `now` into `out`; returns how many. Call again while it fills
    /// `out` (the rest stay due).
    pub fn poll(&mut self, now: Timestamp, out: &mut [GeneratedAck]) -> usize {
        let now = self.clock(now);
        self.expire(now);
        let mut n = 0;
        while n < out.len() {
            let Some(i) = self.table.head(PENDING) else {
                break;
            };
            if self.table.slot(i).due > now {
                break;
            }
            let bytes = self.allowance(i, now);
            if bytes == 0 {
                // Rounding left less than a byte of credit: due again one interval on.
                self.table.emitted(i, now, self.interval);
                continue;
            }
            self.advance(i, now, bytes);
            let s = self.table.slot(i);
            out[n] = GeneratedAck {
                flow: FlowHandle(i),
                key: s.key,
                ack: s.sn_a,
            };
            n += 1;
            self.counters.generated += 1;
        }
        n
    }

    /// Removes flows idle for `idle_timeout` with nothing held back (the least recently seen
    /// first); a flow still holding data back is kept and seen again.
    fn expire(&mut self, now: Timestamp) {
        let mut changed = false;
        // Each flow is looked at most once (a kept flow goes to the tail).
        for _ in 0..self.table.len() {
            let Some(i) = self.table.head(LRU) else { break };
            let s = self.table.slot(i);
            if s.last_seen.saturating_add(self.cfg.idle_timeout) > now {
                break;
            }
            if s.sn_a != s.sn_r {
                self.table.touch(i, now);
                continue;
            }
            self.table.remove(i);
            self.counters.flows_expired += 1;
            changed = true;
        }
        if changed {
            self.update_rate();
        }
    }

    /// The acknowledgement state `(SN_a, SN_r)` of a tracked flow.
    pub fn flow_state(&self, key: u64) -> Option<(u32, u32)> {
        self.table.find(key).map(|i| {
            let s = self.table.slot(i);
            (s.sn_a, s.sn_r)
        })
    }

    /// Checks the table's invariants (lists sorted and consistent, `SN_a <= SN_r`, a flow is
    /// pending exactly when it holds data back); panics with the first violation.
    pub fn invariants(&self) {
        self.table.invariants();
    }
}

#[cfg(test)]
mod tests;
