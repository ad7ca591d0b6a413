//! FlowBundler's Multi-Level Timing Wheel (MLTW): inter-flow batching with per-destination rate
//! estimation (FlowBundler §IV-B "Multi-Level Timing Wheel", §IV-C Algorithm 1, §IV-D Algorithm
//! 2; parameters from §V-A).
//!
//! `levels` timing wheels of `S` slots, level `q` of granularity `g_min << q`, every slot a FIFO
//! [`SlotList`] of nodes from one [`NodePool`]. Enqueue hashes the flow into one of 512
//! destination buckets, takes the level from the bucket's rate, descends to a coarser level for a
//! far EDT and accumulates into the coarsest level sharing the slot's start, so packets due at one
//! instant share a slot and leave as one batch; dequeue releases slots earliest start first. A
//! packet rounded at level `L` leaves no earlier than its slot's start and, polled every `g_L`,
//! no later than `edt + g_L` (clamped packets excepted). Fixed size: [`structure_bytes`].
//!
//! Where it departs from the paper: exact level arithmetic, bitmap skipping, FIFO slots, rate
//! estimation at enqueue, the front advanced on enqueue, explicit rates ([`Mltw::set_rate`]). The
//! algorithm, the guarantees and the reasons: `docs/design/flowbundler.md`.

use crate::bitmap::OccupancyBitmap;
use crate::packet::{FlowId, PacketRef};
use crate::pool::{NodePool, SlotList, NODE_BYTES};
use crate::queue::{EdtQueue, HorizonPolicy, QueueCounters, RejectReason, Rejected};
use crate::rate::Rate;
use crate::time::{Duration, Timestamp, NANOS_PER_SEC};
use core::mem::size_of;

#[cfg(test)]
mod tests;

mod estimator;
use estimator::{Bucket, BUCKET_BYTES};

/// Default minimum granularity, as log2 of nanoseconds: 0, i.e. 1 ns (FlowBundler §V-A, "the
/// minimum granularity is set to 1ns"; §IV-B: enough for a 12 Tbit/s flow).
pub const DEFAULT_MIN_GRANULARITY_LOG2: u32 = 0;
/// Default number of levels (timing wheels): 64 (FlowBundler §V-A and footnote 7, enlarged from
/// §IV-B's 32 "in case a packet's EDT is too far").
pub const DEFAULT_LEVELS: usize = 64;
/// Default slots per level: 1024 (FlowBundler §V-A and footnote 7; §IV-B's 128 suffice under
/// TSQ's 128 KB per connection).
pub const DEFAULT_SLOTS_PER_LEVEL: usize = 1024;
/// Default MTU in bytes: 1500, Ethernet (FlowBundler §IV-B sizes levels for MTU-sized packets).
pub const DEFAULT_MTU: u32 = 1500;
/// Default initial estimated rate of a bucket, in bits per second: 20 Gbit/s (FlowBundler §V-A).
pub const DEFAULT_INITIAL_RATE_BPS: u64 = 20_000_000_000;
/// Default EWMA weight as a shift, `alpha = 2^-shift`: 2, i.e. `alpha = 0.25` (FlowBundler §V-A).
pub const DEFAULT_EWMA_SHIFT: u32 = 2;
/// Default packets between two rate estimates of a bucket: 5 (FlowBundler §IV-D).
pub const DEFAULT_ESTIMATE_EVERY: u32 = 5;
/// Default destination buckets: 512 (FlowBundler §IV-C, "a hash table with 512 buckets is
/// sufficient").
pub const DEFAULT_BUCKETS: usize = 512;
/// Default pool size in packets: 65 536 (Metronome's choice: 512 connections at TSQ's 128 KB,
/// FlowBundler §IV-B). The pool is sized so that this many packets always fit.
pub const DEFAULT_POOL_PACKETS: usize = 1 << 16;
/// Most levels: one bit each in the `u64` level bitmap (and `g_min << level` must fit 64 bits).
pub const MAX_LEVELS: usize = 64;
/// Most slots per level, a count: 2^20 (Metronome bound on a configuration; 64 such levels are
/// 512 MiB of slot heads).
pub const MAX_SLOTS_PER_LEVEL: usize = 1 << 20;
/// Most destination buckets, a count: 2^16 (Metronome bound; §IV-C finds 512 sufficient).
pub const MAX_BUCKETS: usize = 1 << 16;
/// Largest EWMA shift accepted (`alpha = 2^-32`, a filter that practically never moves).
const MAX_EWMA_SHIFT: u32 = 32;

/// Configuration of a [`Mltw`]. [`Default`] gives FlowBundler's §V-A parameters.
///
/// Out-of-range values are normalized by [`Mltw::new`] (see [`MltwConfig::normalized`]), never
/// rejected with a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MltwConfig {
    /// log2 of the minimum granularity `g_min` in nanoseconds (0 = 1 ns). At most 63.
    pub min_granularity_log2: u32,
    /// Number of levels; level `q` has granularity `g_min << q`. 1 to
    /// `64 - min_granularity_log2`.
    pub levels: usize,
    /// Slots per level, rounded up to a power of two, 2 to [`MAX_SLOTS_PER_LEVEL`].
    pub slots_per_level: usize,
    /// Bytes per MTU-sized packet, used to turn a rate into a level (1 to 65 535, the largest
    /// [`PacketRef`] length).
    pub mtu: u32,
    /// The rate every bucket starts with. Zero rounds at level 0 (see [`Mltw::set_rate`]).
    pub initial_rate: Rate,
    /// EWMA weight of a new sample as a shift: `alpha = 2^-ewma_shift` (at most 32).
    pub ewma_shift: u32,
    /// Packets of a bucket per rate estimate; 0 disables estimation (rates then change
    /// only through [`Mltw::set_rate`]). At most 65 535.
    pub estimate_every: u32,
    /// Destination buckets, rounded up to a power of two, 1 to [`MAX_BUCKETS`].
    pub buckets: usize,
    /// What to do with an EDT beyond the top level's ring.
    pub horizon_policy: HorizonPolicy,
    /// Packets that always fit in the node pool (more fit when they share slots).
    pub pool_packets: usize,
}

impl Default for MltwConfig {
    fn default() -> Self {
        MltwConfig {
            min_granularity_log2: DEFAULT_MIN_GRANULARITY_LOG2,
            levels: DEFAULT_LEVELS,
            slots_per_level: DEFAULT_SLOTS_PER_LEVEL,
            mtu: DEFAULT_MTU,
            initial_rate: Rate::from_bps(DEFAULT_INITIAL_RATE_BPS),
            ewma_shift: DEFAULT_EWMA_SHIFT,
            estimate_every: DEFAULT_ESTIMATE_EVERY,
            buckets: DEFAULT_BUCKETS,
            horizon_policy: HorizonPolicy::Clamp,
            pool_packets: DEFAULT_POOL_PACKETS,
        }
    }
}

impl MltwConfig {
    /// The configuration [`Mltw::new`] actually uses: every field clamped to its documented
    /// range, slot and bucket counts rounded up to powers of two.
    pub fn normalized(self) -> Self {
        let min_granularity_log2 = self.min_granularity_log2.min(63);
        let max_levels = MAX_LEVELS - min_granularity_log2 as usize;
        MltwConfig {
            min_granularity_log2,
            levels: self.levels.clamp(1, max_levels),
            slots_per_level: self
                .slots_per_level
                .clamp(2, MAX_SLOTS_PER_LEVEL)
                .next_power_of_two(),
            ewma_shift: self.ewma_shift.min(MAX_EWMA_SHIFT),
            mtu: self.mtu.clamp(1, u16::MAX as u32),
            estimate_every: self.estimate_every.min(u16::MAX as u32),
            buckets: self.buckets.clamp(1, MAX_BUCKETS).next_power_of_two(),
            ..self
        }
    }

    /// The minimum granularity `g_min`.
    pub fn min_granularity(&self) -> Duration {
        Duration::from_nanos(1u64 << self.min_granularity_log2.min(63))
    }
}

/// Bytes of the fixed structure of a [`Mltw`] built from `config`, without the node pool: slot
/// heads, occupancy bitmap, bucket table and the struct itself. Computed from the same sizes as
/// the allocation in [`Mltw::new`]; `memory_bytes() == structure_bytes(config) + pool bytes`.
pub fn structure_bytes(config: &MltwConfig) -> usize {
    let c = config.normalized();
    let slots = c.levels * c.slots_per_level;
    size_of::<Mltw>()
        + slots * size_of::<SlotList>()
        + OccupancyBitmap::new(slots).memory_bytes()
        + c.buckets * BUCKET_BYTES
}

/// Where [`Mltw::enqueue`] puts (or would put) a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The level whose granularity rounded the EDT down: the bucket's rate level, or the coarser
    /// level a far EDT descended to.
    pub rounding_level: usize,
    /// That level's granularity `g_L`: `slot_start = floor(max(edt, front) / g_L) × g_L` unless
    /// `clamped`.
    pub granularity: Duration,
    /// The level holding the slot after inter-flow accumulation (same start time, coarsest
    /// aligned level).
    pub storage_level: usize,
    /// The slot's start time: the packet leaves at the first dequeue with `now >= slot_start`.
    pub slot_start: Timestamp,
    /// The EDT lay before the front and was moved to it.
    pub past_due: bool,
    /// The EDT lay beyond the top level's ring and went to its last slot.
    pub clamped: bool,
}

/// Level arithmetic: the one place where time becomes a slot and a rate becomes a level.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    /// log2 of `g_min` in ns.
    gmin_log2: u32,
    /// The coarsest level (levels - 1); `gmin_log2 + top <= 63`.
    top: u32,
    /// log2 of the slots per level.
    slot_bits: u32,
    /// MTU × 8 bit/byte × 10^9 ns/s: the MTU's transmission time at 1 bit/s, in ns.
    mtu_bit_ns: u64,
}

impl Geometry {
    fn new(c: &MltwConfig) -> Self {
        Geometry {
            gmin_log2: c.min_granularity_log2,
            top: c.levels as u32 - 1,
            slot_bits: c.slots_per_level.trailing_zeros(),
            // `normalized` caps the MTU at 65 535 B: x 8 x 10^9 = 5.2e14 < 2^49, fits u64.
            mtu_bit_ns: c.mtu as u64 * 8 * NANOS_PER_SEC,
        }
    }

    /// log2 of level `level`'s granularity in ns (at most 63).
    #[inline]
    fn shift(&self, level: u32) -> u32 {
        self.gmin_log2 + level
    }

    /// Level `level`'s granularity in ns.
    #[inline]
    fn granularity(&self, level: u32) -> u64 {
        1u64 << self.shift(level)
    }

    /// The absolute slot of level `level` holding `t`, rounding *down*: slot `n` covers
    /// `[n × g, (n + 1) × g)`, so a packet may leave up to one granularity before its EDT.
    #[inline]
    fn slot_of(&self, t: u64, level: u32) -> u64 {
        t >> self.shift(level)
    }

    /// The instant slot `slot` of level `level` begins, saturating at the end of time.
    #[inline]
    fn slot_start(&self, slot: u64, level: u32) -> u64 {
        let shift = self.shift(level);
        // `slot << shift` overflows iff a set bit would leave the word (no 128-bit shift).
        if slot.leading_zeros() < shift {
            u64::MAX
        } else {
            slot << shift
        }
    }

    /// True if level `level`'s ring, seen from `front`, has a slot for `t >= front`.
    #[inline]
    fn covers(&self, front: u64, level: u32, t: u64) -> bool {
        self.slot_of(t, level) - self.slot_of(front, level) < 1u64 << self.slot_bits
    }

    /// The finest level that can cover `d` ns past the front: the smallest shift with
    /// `d >> shift < S` (necessary; sufficient one level up). Algorithm 1 lines 12–15.
    #[inline]
    fn descend_floor(&self, d: u64) -> u32 {
        if d >> self.slot_bits == 0 {
            return 0;
        }
        (d.ilog2() + 1 - self.slot_bits).saturating_sub(self.gmin_log2)
    }

    /// [`Geometry::descend_floor`] without a branch: `64 - lzcnt(d | 1)` is `ilog2(d) + 1`
    /// for `d >= 1` and 1 for `d = 0`, and a `d` below `S` gives at most `slot_bits`, which
    /// the saturating subtraction turns into level 0 as the branch does.
    #[inline(always)]
    fn descend_floor_fast(&self, d: u64) -> u32 {
        let bits = u64::BITS - (d | 1).leading_zeros();
        bits.saturating_sub(self.slot_bits + self.gmin_log2)
    }

    /// The level of a bucket sending at `bps`: `floor(log2(MTU / R / g_min))`, capped to
    /// `[0, top]` (Algorithm 1 line 9). `C = MTU × 8e9`, `B = R × g_min`: the FLS difference
    /// `k = FLS(C) - FLS(B)` is the answer or one too many; one comparison decides.
    ///
    /// A zero rate gives level 0: it has no packet gap to round within, and the formula's limit
    /// (the top level) would round an EDT down by up to the top granularity, releasing a paused
    /// destination's packets at once.
    fn rate_level(&self, bps: u64) -> u32 {
        if bps == 0 {
            return 0;
        }
        let c = self.mtu_bit_ns;
        // `bps << gmin_log2` in 64 bits; if it would overflow it exceeds `c` (< 2^49) anyway.
        if bps.leading_zeros() < self.gmin_log2 {
            return 0;
        }
        let b = bps << self.gmin_log2;
        if c < b {
            return 0; // an MTU takes less than g_min
        }
        let k = c.ilog2() - b.ilog2();
        let level = if b << k <= c { k } else { k - 1 };
        level.min(self.top)
    }
}

/// Hashes a flow into one of `mask + 1` buckets (murmur3's 32-bit finalizer, then modulo the
/// power-of-two bucket count). Collisions are not resolved (FlowBundler §IV-C).
#[inline]
fn bucket_index(flow: FlowId, mask: usize) -> usize {
    let mut h = flow.0;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h as usize & mask
}

/// A slot chosen by [`Mltw::locate`]: the few words enqueue needs (a [`Placement`] is built from
/// it only on request).
#[derive(Clone, Copy, Debug)]
struct Spot {
    /// The level whose granularity rounded the EDT down.
    rounding_level: u32,
    /// The storage level (after accumulation) and the absolute slot number there.
    level: u32,
    slot: u64,
    /// The slot's start time, ns.
    start: u64,
    past_due: bool,
    clamped: bool,
}

impl Spot {
    fn placement(&self, geo: &Geometry) -> Placement {
        Placement {
            rounding_level: self.rounding_level as usize,
            granularity: Duration::from_nanos(geo.granularity(self.rounding_level)),
            storage_level: self.level as usize,
            slot_start: Timestamp::from_nanos(self.start),
            past_due: self.past_due,
            clamped: self.clamped,
        }
    }
}

/// FlowBundler's Multi-Level Timing Wheel; see the [module documentation](self).
///
/// Invariants (checked by `invariants()` in tests):
/// * every occupied slot `n` of level `L` lies in the ring window
///   `[front >> shift_L, (front >> shift_L) + S)`, so ring position `n mod S` is unambiguous;
/// * an occupied slot below the top level has an odd slot number (accumulation);
/// * `heads[L]` is level `L`'s earliest occupied slot and `next` the earliest start over levels;
/// * `front <= now`, and `front` never passes the end of an occupied slot.
pub struct Mltw {
    // Hot, read by every enqueue and dequeue.
    /// The front time, ns: EDTs before it are past due; rings are windows from it.
    front: u64,
    /// The earliest occupied slot: (start time in ns, level). `None` when empty.
    next: Option<(u64, u32)>,
    /// Bit `L` set iff level `L` has an occupied slot.
    level_mask: u64,
    geo: Geometry,
    bucket_mask: usize,
    estimate_every: u16,
    ewma_shift: u32,
    policy: HorizonPolicy,
    len: usize,
    last_now: u64,
    /// Earliest occupied absolute slot per level (valid where `level_mask` is set).
    heads: [u64; MAX_LEVELS],
    // Large arrays: slot heads (8 B each, `level × S + ring position`), their occupancy, the
    // buckets, the node pool. Allocated once in `new`.
    slots: Box<[SlotList]>,
    occupied: OccupancyBitmap,
    buckets: Box<[Bucket]>,
    pool: NodePool,
    // Cold.
    counters: QueueCounters,
    config: MltwConfig,
}

impl Mltw {
    /// A wheel built from `config` (normalized, see [`MltwConfig::normalized`]). Allocates the
    /// slot arrays, the bucket table and the node pool; nothing is allocated afterwards.
    pub fn new(config: MltwConfig) -> Self {
        let config = config.normalized();
        let geo = Geometry::new(&config);
        let slots = config.levels * config.slots_per_level;
        let initial = Bucket::new(
            config.initial_rate.bps(),
            geo.rate_level(config.initial_rate.bps()),
        );
        Mltw {
            front: 0,
            next: None,
            level_mask: 0,
            geo,
            bucket_mask: config.buckets - 1,
            estimate_every: config.estimate_every as u16,
            ewma_shift: config.ewma_shift,
            policy: config.horizon_policy,
            len: 0,
            last_now: 0,
            heads: [0; MAX_LEVELS],
            slots: vec![SlotList::EMPTY; slots].into_boxed_slice(),
            occupied: OccupancyBitmap::new(slots),
            buckets: vec![initial; config.buckets].into_boxed_slice(),
            pool: NodePool::new(NodePool::nodes_for(config.pool_packets, slots)),
            counters: QueueCounters::default(),
            config,
        }
    }

    /// The configuration in use (normalized).
    pub fn config(&self) -> &MltwConfig {
        &self.config
    }

    /// The front time: EDTs before it are placed at it.
    pub fn front(&self) -> Timestamp {
        Timestamp::from_nanos(self.front)
    }

    /// The span the top level's ring covers ahead of the front (saturating): EDTs beyond it
    /// follow the [`HorizonPolicy`].
    pub fn horizon(&self) -> Duration {
        let g = self.geo.granularity(self.geo.top) as u128;
        let span = (g << self.geo.slot_bits).min(u64::MAX as u128);
        Duration::from_nanos(span as u64)
    }

    /// Granularity of level `level` (`g_min << level`; levels beyond the top read as the top).
    pub fn granularity(&self, level: usize) -> Duration {
        let level = level.min(self.geo.top as usize) as u32;
        Duration::from_nanos(self.geo.granularity(level))
    }

    /// Sets the rate of `flow`'s destination bucket (shared with colliding flows), and with it
    /// the level its next packets go to; packets already queued keep their slots. The estimator
    /// keeps refining it unless `estimate_every` is 0.
    ///
    /// The MLTW releases packets by their EDT and uses the rate only to choose the rounding
    /// granularity. A zero rate (a paused destination, whose packets a [`crate::timestamp`]
    /// policy stamps [`Timestamp::MAX`]) rounds at level 0, the finest: it never lets a packet
    /// leave before its EDT rounded down to `g_min`. A later rate takes effect from the next
    /// packet.
    pub fn set_rate(&mut self, flow: FlowId, rate: Rate) {
        let level = self.geo.rate_level(rate.bps());
        let b = &mut self.buckets[bucket_index(flow, self.bucket_mask)];
        b.rate_bps = rate.bps();
        b.level = level as u8;
    }

    /// The rate of `flow`'s destination bucket: estimated from departures, or set.
    pub fn estimated_rate(&self, flow: FlowId) -> Rate {
        Rate::from_bps(self.buckets[bucket_index(flow, self.bucket_mask)].rate_bps)
    }

    /// The level `flow`'s next packets are rounded at, from its bucket's rate (a far EDT may
    /// still descend to a coarser one; see [`Mltw::placement`]).
    pub fn level_for(&self, flow: FlowId) -> usize {
        self.buckets[bucket_index(flow, self.bucket_mask)].level as usize
    }

    /// The granularity of [`Mltw::level_for`]: a packet of `flow` within that level's ring is
    /// released no earlier than `floor(edt / g) × g`.
    pub fn level_granularity_for(&self, flow: FlowId) -> Duration {
        self.granularity(self.level_for(flow))
    }

    /// Where a packet of `flow` with `edt`, enqueued at `now`, would go, without enqueuing it;
    /// or why it would be rejected ([`RejectReason::BeyondHorizon`] only; the pool is not
    /// consulted).
    pub fn placement(
        &self,
        now: Timestamp,
        flow: FlowId,
        edt: Timestamp,
    ) -> Result<Placement, RejectReason> {
        let now = now.as_nanos().max(self.last_now);
        let level = self.buckets[bucket_index(flow, self.bucket_mask)].level as u32;
        self.locate(self.front_at(now), level, edt.as_nanos())
            .map(|s| s.placement(&self.geo))
    }

    /// Records `now` (time never goes backwards) and advances the front to it, stopping at the
    /// earliest occupied slot. Returns `now` in ns.
    fn observe(&mut self, now: Timestamp) -> u64 {
        let now = now.as_nanos();
        debug_assert!(now >= self.last_now, "time went backwards");
        let now = now.max(self.last_now);
        self.last_now = now;
        self.front = self.front_at(now);
        now
    }

    /// The front at `now`: `now`, but never past the earliest occupied slot, never backwards.
    fn front_at(&self, now: u64) -> u64 {
        let cap = self.next.map_or(now, |(start, _)| start.min(now));
        self.front.max(cap)
    }

    /// Algorithm 1 lines 5–21: clamp, descend, accumulate.
    ///
    /// Inlined into enqueue, with a branch-free fast path for the common case: the level `L`
    /// the descend starts from ([`Geometry::descend_floor_fast`]) covers `t` with a slot to
    /// spare. Since `(t >> s) - (front >> s) <= ((t - front) >> s) + 1`, the test
    /// `(t - front) >> s < S - 1` proves that level `L`'s ring covers `t`, so the general path
    /// ([`Mltw::locate_far`]) would not step further either. Its slot start, `t` rounded down to
    /// `g_L`, cannot overflow. Only EDTs in the last slot of that ring or beyond the horizon
    /// take the general path.
    #[inline(always)]
    fn locate(&self, front: u64, rate_level: u32, edt: u64) -> Result<Spot, RejectReason> {
        let geo = &self.geo;
        let t = edt.max(front);
        let level = rate_level
            .max(geo.descend_floor_fast(t - front))
            .min(geo.top);
        let shift = geo.shift(level);
        if (t - front) >> shift < (1u64 << geo.slot_bits) - 1 {
            let start = t & !((1u64 << shift) - 1);
            return Ok(self.accumulate(level, t >> shift, start, edt < front, false));
        }
        self.locate_far(front, rate_level, edt)
    }

    /// [`Mltw::locate`] for an EDT in the last slot of its ring or beyond: descend one more
    /// level, clamp or reject.
    #[inline(never)]
    fn locate_far(&self, front: u64, rate_level: u32, edt: u64) -> Result<Spot, RejectReason> {
        let geo = &self.geo;
        let past_due = edt < front;
        let t = edt.max(front);
        let mut level = rate_level.max(geo.descend_floor(t - front)).min(geo.top);
        // At most one step: the level above the FLS bound always covers (see `descend_floor`).
        while level < geo.top && !geo.covers(front, level, t) {
            level += 1;
        }
        let (slot, clamped) = if geo.covers(front, level, t) {
            (geo.slot_of(t, level), false)
        } else {
            match self.policy {
                HorizonPolicy::Reject => return Err(RejectReason::BeyondHorizon),
                HorizonPolicy::Clamp => {
                    let last = geo.slot_of(front, level) + ((1u64 << geo.slot_bits) - 1);
                    (last, true)
                }
            }
        };
        let start = geo.slot_start(slot, level);
        Ok(self.accumulate(level, slot, start, past_due, clamped))
    }

    /// Accumulate (Algorithm 1 lines 16–21): slot `slot` of level `level`, starting at `start`,
    /// is stored at the coarsest level with a slot starting at the same instant.
    #[inline(always)]
    fn accumulate(&self, level: u32, slot: u64, start: u64, past_due: bool, clamped: bool) -> Spot {
        let k = slot.trailing_zeros().min(self.geo.top - level);
        Spot {
            rounding_level: level,
            level: level + k,
            slot: slot >> k,
            start,
            past_due,
            clamped,
        }
    }

    /// Index into `slots` / `occupied` of absolute slot `slot` of `level`.
    #[inline]
    fn index(&self, level: u32, slot: u64) -> usize {
        let mask = (1u64 << self.geo.slot_bits) - 1;
        ((level as usize) << self.geo.slot_bits) | (slot & mask) as usize
    }

    /// Marks a slot that just received a packet as occupied.
    fn occupy(&mut self, level: u32, slot: u64, start: u64) {
        self.occupied.set(self.index(level, slot));
        let bit = 1u64 << level;
        let head = &mut self.heads[level as usize];
        if self.level_mask & bit == 0 || slot < *head {
            *head = slot;
        }
        self.level_mask |= bit;
        match self.next {
            Some((s, _)) if s <= start => {}
            _ => self.next = Some((start, level)),
        }
    }

    /// Clears level `level`'s head slot `slot`, just drained, and finds the next heads.
    fn vacate(&mut self, level: u32, slot: u64) {
        let idx = self.index(level, slot);
        self.occupied.clear(idx);
        let mask = (1usize << self.geo.slot_bits) - 1;
        let pos = idx & mask;
        match self.next_in_level(level, pos) {
            // Occupied slots lie in (slot, slot + S): ring order from `pos` is time order.
            Some(p) => self.heads[level as usize] = slot + (p.wrapping_sub(pos) & mask) as u64,
            None => self.level_mask &= !(1u64 << level),
        }
        self.next = None;
        let mut levels = self.level_mask;
        while levels != 0 {
            let l = levels.trailing_zeros();
            levels &= levels - 1;
            let start = self.geo.slot_start(self.heads[l as usize], l);
            if self.next.is_none_or(|(s, _)| start < s) {
                self.next = Some((start, l));
            }
        }
    }

    /// The first occupied ring position of `level` at or after `pos`, in ring order.
    fn next_in_level(&self, level: u32, pos: usize) -> Option<usize> {
        let base = (level as usize) << self.geo.slot_bits;
        let end = base + (1usize << self.geo.slot_bits);
        match self.occupied.next_set(base + pos) {
            Some(i) if i < end => Some(i - base),
            _ => self
                .occupied
                .next_set(base)
                .filter(|&i| i < base + pos)
                .map(|i| i - base),
        }
    }

    fn reject(&mut self, pkt: PacketRef, reason: RejectReason) -> Rejected {
        self.counters.count_rejection(reason);
        Rejected { pkt, reason }
    }

    /// Checks every invariant by walking the whole structure (tests only: O(levels × S)).
    #[cfg(test)]
    fn invariants(&self) {
        let s = 1usize << self.geo.slot_bits;
        let mut total = 0;
        let mut earliest: Option<(u64, u32)> = None;
        assert!(self.front <= self.last_now);
        for level in 0..=self.geo.top {
            let f = self.geo.slot_of(self.front, level);
            let mut head = None;
            for pos in 0..s {
                let idx = self.index(level, 0) + pos;
                let list = &self.slots[idx];
                assert_eq!(
                    self.occupied.get(idx),
                    !list.is_empty(),
                    "bitmap at {level}/{pos}"
                );
                if list.is_empty() {
                    continue;
                }
                total += self.pool.count(list);
                let slot = f + ((pos as u64).wrapping_sub(f) & (s as u64 - 1));
                assert!(level == self.geo.top || slot % 2 == 1, "unaccumulated slot");
                head = Some(head.map_or(slot, |h: u64| h.min(slot)));
            }
            assert_eq!(head.is_some(), self.level_mask & (1 << level) != 0);
            if let Some(h) = head {
                assert_eq!(self.heads[level as usize], h, "head of level {level}");
                let start = self.geo.slot_start(h, level);
                if earliest.is_none_or(|(e, _)| start < e) {
                    earliest = Some((start, level));
                }
            }
        }
        assert_eq!(total, self.len);
        assert_eq!(self.next.map(|n| n.0), earliest.map(|e| e.0));
    }
}

impl EdtQueue for Mltw {
    fn name(&self) -> &'static str {
        "mltw"
    }

    /// Algorithm 1: classify by destination bucket, take the bucket's level, clamp, descend,
    /// accumulate, append to the slot's FIFO.
    // Inlined into the caller's loop for the same reason as the timing wheel's enqueue: passed
    // through memory, the 12-byte reference is re-read right after being written field by
    // field, and the failed store-to-load forwarding costs more than the placement arithmetic.
    #[inline(always)]
    fn enqueue(&mut self, now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        self.observe(now);
        let bucket = bucket_index(pkt.flow, self.bucket_mask);
        let level = self.buckets[bucket].level as u32;
        let spot = match self.locate(self.front, level, edt.as_nanos()) {
            Ok(spot) => spot,
            Err(reason) => return Err(self.reject(pkt, reason)),
        };
        let idx = self.index(spot.level, spot.slot);
        let was_empty = self.slots[idx].is_empty();
        if let Err(pkt) = self.pool.push_back(&mut self.slots[idx], pkt) {
            return Err(self.reject(pkt, RejectReason::PoolExhausted));
        }
        if was_empty {
            // A slot that already held packets is already marked, and is already counted in
            // its level's head and in `next`: only a slot's first packet updates them.
            self.occupy(spot.level, spot.slot, spot.start);
        }
        if self.estimate_every != 0 {
            // The departure this packet is scheduled for: its EDT, or now if already due.
            let t = edt.as_nanos().max(now.as_nanos());
            let b = &mut self.buckets[bucket];
            if b.record(t, pkt.len, self.estimate_every, self.ewma_shift) {
                b.level = self.geo.rate_level(b.rate_bps) as u8;
            }
        }
        self.len += 1;
        self.counters.enqueued += 1;
        self.counters.past_due += spot.past_due as u64;
        self.counters.clamped_beyond_horizon += spot.clamped as u64;
        Ok(())
    }

    /// Algorithm 2 without the slot-by-slot walk: drain the earliest occupied slot while it
    /// starts at or before `now` and `out` has room.
    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        let now = self.observe(now);
        let mut n = 0;
        while n < out.len() {
            let Some((start, level)) = self.next else {
                break;
            };
            if start > now {
                break;
            }
            self.front = self.front.max(start);
            let slot = self.heads[level as usize];
            let idx = self.index(level, slot);
            let got = self.pool.drain_into(&mut self.slots[idx], &mut out[n..]);
            n += got;
            if !self.slots[idx].is_empty() {
                break; // `out` is full; the rest leaves on the next call
            }
            self.vacate(level, slot);
        }
        self.front = self.front_at(now);
        self.len -= n;
        self.counters.dequeued += n as u64;
        self.counters.nonempty_dequeues += (n > 0) as u64;
        n
    }

    fn next_due(&self) -> Option<Timestamp> {
        self.next.map(|(start, _)| Timestamp::from_nanos(start))
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The struct, slot heads, occupancy bitmap, bucket table and node pool.
    fn memory_bytes(&self) -> usize {
        size_of::<Mltw>()
            + self.slots.len() * size_of::<SlotList>()
            + self.occupied.memory_bytes()
            + self.buckets.len() * size_of::<Bucket>()
            + self.pool.memory_bytes()
    }

    fn packet_bytes(&self) -> usize {
        self.pool.nodes_in_use() * NODE_BYTES
    }

    fn counters(&self) -> QueueCounters {
        self.counters
    }
}
