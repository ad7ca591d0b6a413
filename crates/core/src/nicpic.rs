//! NicPic's transmit scheduler (NicPic §3, Figure 3): per-class rate limits over many classes
//! whose queues stay in the caller's memory, a schedule computed one piece at a time, MTU-sized
//! pulls out of large segments, and weighted sharing when the limits oversubscribe the link.
//!
//! [`NicPic::backlog`] is §3.1's doorbell; [`NicPic::pull`] and [`NicPic::next_due`] are §3.2's
//! on-demand schedule; a class keeps [`CLASS_BYTES`] = 32 bytes (§3.2's metadata). The schedule is
//! a virtual clock capped at real time over a calendar queue of start tags: O(1) plus a few bitmap
//! word scans, whatever the number of classes.
//!
//! Where it departs from the paper: the algorithm itself (§3.2 leaves it open), FIFO order inside
//! a calendar bucket (a piece late by up to one granularity, never early), tags beyond the window
//! parked in its last bucket, catch-up of a class served late, whole-nanosecond pulls, 64 KiB
//! segments, rate changes from the next piece. The algorithm and the reasons:
//! `docs/design/nicpic.md`.

use crate::bitmap::OccupancyBitmap;
use crate::rate::Rate;
use crate::time::{Duration, Timestamp, NANOS_PER_SEC};

mod config;
pub use config::{
    NicPicConfig, NicPicConfigError, CLASS_BYTES, DEFAULT_BUCKETS, DEFAULT_GRANULARITY,
    DEFAULT_MTU, MAX_BUCKETS, MAX_CLASSES, MAX_SEGMENT_BYTES, TICK_BITS,
};

/// A piece is due when `V` is within this many ticks (1/256 ns) of its tag. Rates are rounded to
/// [`Rate`]'s fixed point, so a class whose limit equals the link's share of it can fall a few
/// parts per million behind `V`; without the slack each such piece would wait for the next
/// nanosecond and the link would lose 1 ns per piece.
const DUE_SLACK_TICKS: u64 = 1;

/// Fractional bits of the virtual clock's slope (`1.0` is `1 << SLOPE_BITS`).
const SLOPE_BITS: u32 = 32;
/// The slope of real time.
const SLOPE_ONE: u64 = 1 << SLOPE_BITS;
/// `ns * slope >> REM_BITS` is in ticks: SLOPE_BITS - TICK_BITS.
const REM_BITS: u32 = SLOPE_BITS - TICK_BITS;
/// Bits of [`Rate::transmit_time_fp`]'s fixed point beyond a tick.
const NPB_TO_TICK: u32 = Rate::FRAC_BITS - TICK_BITS;

/// End of a list / no class.
const NIL: u32 = u32::MAX;
/// `Class::bucket` of a class with no head segment.
const IDLE: u32 = u32::MAX;
/// `Class::bucket` of a class whose segment finished at the latest `now`: it still counts as
/// backlogged until time moves on, so that an immediate [`NicPic::backlog`] keeps its place.
const DRAINED: u32 = u32::MAX - 1;

/// Why [`NicPic::backlog`] refused a doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NicPicRejectReason {
    /// The class index is not configured.
    #[error("unknown class")]
    UnknownClass,
    /// The class already has a head segment being pulled (announce the next one after `last`).
    #[error("class already backlogged")]
    AlreadyBacklogged,
    /// A segment of 0 bytes.
    #[error("empty segment")]
    EmptySegment,
    /// A segment beyond [`MAX_SEGMENT_BYTES`].
    #[error("segment longer than 64 KiB")]
    SegmentTooLong,
}

/// A doorbell handed back with its reason; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("class {class}: segment of {segment_len} bytes refused: {reason}")]
pub struct RejectedSegment {
    /// The class named.
    pub class: u32,
    /// The segment length announced.
    pub segment_len: u32,
    /// Why it was refused.
    pub reason: NicPicRejectReason,
}

/// Why [`NicPic::set_rate`] refused a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RateError {
    /// The class index is not configured.
    #[error("unknown class")]
    UnknownClass,
    /// A zero rate (it would hold the class forever).
    #[error("zero rate")]
    ZeroRate,
}

/// One piece to transmit: `len` bytes at `offset` of the head segment of queue `class`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pull {
    /// The class (the caller's queue index).
    pub class: u32,
    /// Offset of the piece in the head segment (NicPic's TSO offset).
    pub offset: u32,
    /// Bytes of the piece, at most the MTU.
    pub len: u32,
    /// True for the segment's last piece: the caller dequeues the segment and, if the queue holds
    /// another, announces it with [`NicPic::backlog`] (in the same instant to keep its place).
    pub last: bool,
}

/// Named counters of a [`NicPic`] scheduler. Monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicPicCounters {
    /// Doorbells accepted.
    pub doorbells: u64,
    /// Pieces pulled.
    pub pieces: u64,
    /// Bytes pulled.
    pub bytes: u64,
    /// Segments finished (pieces with `last`).
    pub segments: u64,
    /// Pieces pulled while the backlogged limits exceeded the link: the weighted-sharing fallback.
    pub oversubscribed_pieces: u64,
    /// Tags beyond the calendar window, parked in its last bucket.
    pub clamped_beyond_window: u64,
    /// Parked classes put back into the calendar when their bucket came up.
    pub reinserted: u64,
    /// Rates changed by [`NicPic::set_rate`].
    pub rate_changes: u64,
    /// Doorbells refused: unknown class.
    pub refused_unknown_class: u64,
    /// Doorbells refused: class already backlogged.
    pub refused_already_backlogged: u64,
    /// Doorbells refused: empty segment.
    pub refused_empty_segment: u64,
    /// Doorbells refused: segment beyond 64 KiB.
    pub refused_segment_too_long: u64,
    /// Rate changes refused (unknown class or zero rate).
    pub refused_rate: u64,
}

/// Per-class metadata: 32 bytes. Fields touched on every pull come first.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Class {
    /// Virtual start tag of the next piece, ticks.
    tag: u64,
    /// Nanoseconds per byte at the class's rate, [`Rate::FRAC_BITS`] fixed point.
    npb: u64,
    /// Next class in the bucket, [`NIL`] at the tail or when not linked.
    next: u32,
    /// Previous class in the bucket; [`NIL`] when not linked, meaningless at the head.
    prev: u32,
    /// The bucket holding the class, or [`IDLE`] / [`DRAINED`].
    bucket: u32,
    /// Head segment length minus one.
    len_m1: u16,
    /// Offset of the next piece in the head segment.
    offset: u16,
}
const _: () = assert!(core::mem::size_of::<Class>() == CLASS_BYTES);

impl Class {
    fn seg_len(&self) -> u32 {
        u32::from(self.len_m1) + 1
    }
}

/// One calendar bucket: a FIFO of classes.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    head: u32,
    tail: u32,
}

/// The rate in bit/s that `npb` stands for, as used in the sum of backlogged limits. Always the
/// same function of `npb`, so adding and removing a class leaves the sum exact.
fn weight(npb: u64) -> u64 {
    (((8 * NANOS_PER_SEC) << Rate::FRAC_BITS) + npb / 2) / npb.max(1)
}

/// Ticks a piece of `len` bytes spans at `npb`, rounded up so that a class never runs ahead.
fn gap_ticks(len: u32, npb: u64) -> u64 {
    let fp = u128::from(len) * u128::from(npb);
    let ticks = fp.div_ceil(1 << NPB_TO_TICK);
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

/// The NicPic scheduler. See the module documentation.
///
/// ```
/// use metronome_core::nicpic::{NicPic, NicPicConfig, Pull};
/// use metronome_core::{Rate, Timestamp};
///
/// // Two classes of 2 Gbit/s each on a 10 Gbit/s link.
/// let mut nic = NicPic::new(NicPicConfig::default(), &[Rate::gbps(2); 2]).unwrap();
/// let t0 = Timestamp::ZERO;
/// nic.backlog(t0, 0, 64 * 1024).unwrap(); // a 64 KB TSO segment in class 0's queue
/// nic.backlog(t0, 1, 1500).unwrap();      // one MTU in class 1's queue
///
/// let mut pulls = Vec::new();
/// let mut now = t0;
/// while let Some(due) = nic.next_due() {
///     now = now.max(due);
///     if let Some(p) = nic.pull(now) {
///         // DMA `p.len` bytes at `p.offset` of the head segment of queue `p.class`.
///         if p.last && p.class == 1 && pulls.len() < 4 {
///             nic.backlog(now, 1, 1500).unwrap(); // class 1 had another segment queued
///         }
///         pulls.push(p);
///     }
/// }
/// // The big segment goes out in MTU pieces, interleaved with class 1's packets.
/// assert_eq!(pulls[0], Pull { class: 0, offset: 0, len: 1500, last: false });
/// assert_eq!(pulls[1], Pull { class: 1, offset: 0, len: 1500, last: true });
/// assert_eq!(pulls[2], Pull { class: 0, offset: 1500, len: 1500, last: false });
/// // Each class is paced at its 2 Gbit/s: 1500 bytes every 6 us.
/// let last = pulls.last().unwrap();
/// assert_eq!((last.class, last.offset + last.len), (0, 64 * 1024));
/// assert_eq!(nic.counters().bytes, 64 * 1024 + 3 * 1500);
/// ```
#[derive(Clone, Debug)]
pub struct NicPic {
    // Virtual clock, touched on every call.
    /// System virtual time, ticks.
    v: u64,
    /// Fraction of a tick carried between advances (`REM_BITS` bits).
    v_rem: u64,
    /// `dV/dt` in `SLOPE_BITS` fixed point, valid for `slope_sum`.
    slope: u64,
    /// The `sum_bps` the slope was computed for.
    slope_sum: u64,
    /// Sum of the backlogged classes' limits, bit/s (drained classes included).
    sum_bps: u64,
    last_now: Timestamp,
    /// The link is busy until then.
    link_free: Timestamp,
    /// The same instant in ticks, unrounded.
    link_free_ticks: u64,
    /// How far before `now` a pull after an idle gap may start, ticks ([`NicPic::set_catch_up`]).
    catch_up_ticks: u64,
    // Calendar.
    /// A lower bound of the slots linked, never beyond the slot of `v`.
    lo: u64,
    /// `tag >> slot_shift` is a tag's slot.
    slot_shift: u32,
    mask: u64,
    linked: usize,
    /// The class whose segment finished at `last_now`, or [`NIL`].
    drained: u32,
    // Configuration.
    link_npb: u64,
    link_bps: u64,
    mtu: u32,
    counters: NicPicCounters,
    // Tables.
    classes: Vec<Class>,
    buckets: Vec<Bucket>,
    occupied: OccupancyBitmap,
}

impl NicPic {
    /// A scheduler for `rates.len()` classes, class `i` limited to `rates[i]`, all idle, at time
    /// zero.
    pub fn new(config: NicPicConfig, rates: &[Rate]) -> Result<Self, NicPicConfigError> {
        if config.link.bps() == 0 {
            return Err(NicPicConfigError::ZeroLinkRate);
        }
        if config.mtu == 0 || config.mtu > MAX_SEGMENT_BYTES {
            return Err(NicPicConfigError::BadMtu);
        }
        if rates.len() > MAX_CLASSES {
            return Err(NicPicConfigError::TooManyClasses);
        }
        let mut classes = Vec::with_capacity(rates.len());
        for (i, r) in rates.iter().enumerate() {
            if r.bps() == 0 {
                return Err(NicPicConfigError::ZeroRate(i as u32));
            }
            classes.push(Class {
                tag: 0,
                npb: npb_of(*r),
                next: NIL,
                prev: NIL,
                bucket: IDLE,
                len_m1: 0,
                offset: 0,
            });
        }
        let g = config.granularity.as_nanos().max(1);
        let g_shift = 63 - g.leading_zeros(); // round down to a power of two
        let buckets = config.buckets.clamp(2, MAX_BUCKETS).next_power_of_two();
        Ok(NicPic {
            v: 0,
            v_rem: 0,
            slope: SLOPE_ONE,
            slope_sum: 0,
            sum_bps: 0,
            last_now: Timestamp::ZERO,
            link_free: Timestamp::ZERO,
            link_free_ticks: 0,
            catch_up_ticks: 0,
            lo: 0,
            slot_shift: TICK_BITS + g_shift,
            mask: buckets as u64 - 1,
            linked: 0,
            drained: NIL,
            link_npb: npb_of(config.link),
            link_bps: config.link.bps(),
            mtu: config.mtu,
            counters: NicPicCounters::default(),
            classes,
            buckets: vec![
                Bucket {
                    head: NIL,
                    tail: NIL
                };
                buckets
            ],
            occupied: OccupancyBitmap::new(buckets),
        })
    }

    /// The doorbell (NicPic §3.1): class `class` has a head segment of `segment_len` bytes to
    /// send, from offset 0. RejectedSegment, with nothing changed, when the class is unknown or
    /// already backlogged, or the length is 0 or beyond [`MAX_SEGMENT_BYTES`].
    pub fn backlog(
        &mut self,
        now: Timestamp,
        class: u32,
        segment_len: u32,
    ) -> Result<(), RejectedSegment> {
        self.advance(now);
        let refuse = |reason| RejectedSegment {
            class,
            segment_len,
            reason,
        };
        let reason = match self.classes.get(class as usize) {
            None => Some(NicPicRejectReason::UnknownClass),
            Some(_) if segment_len == 0 => Some(NicPicRejectReason::EmptySegment),
            Some(_) if segment_len > MAX_SEGMENT_BYTES => Some(NicPicRejectReason::SegmentTooLong),
            Some(c) if c.bucket != IDLE && c.bucket != DRAINED => {
                Some(NicPicRejectReason::AlreadyBacklogged)
            }
            Some(_) => None,
        };
        if let Some(reason) = reason {
            let c = &mut self.counters;
            match reason {
                NicPicRejectReason::UnknownClass => c.refused_unknown_class += 1,
                NicPicRejectReason::AlreadyBacklogged => c.refused_already_backlogged += 1,
                NicPicRejectReason::EmptySegment => c.refused_empty_segment += 1,
                NicPicRejectReason::SegmentTooLong => c.refused_segment_too_long += 1,
            }
            return Err(refuse(reason));
        }
        let v = self.v;
        let c = &mut self.classes[class as usize];
        if c.bucket == DRAINED {
            // Finished a segment in this very instant: it never stopped being backlogged.
            self.drained = NIL;
        } else {
            c.tag = c.tag.max(v);
            self.sum_bps += weight(c.npb);
        }
        c.len_m1 = (segment_len - 1) as u16;
        c.offset = 0;
        self.link(class);
        self.counters.doorbells += 1;
        Ok(())
    }

    /// The next piece to transmit at `now`, if one is due and the link is free. At most one piece
    /// per call: the link is then busy for the piece's transmission time.
    pub fn pull(&mut self, now: Timestamp) -> Option<Pull> {
        self.advance(now);
        if now < self.link_free {
            return None;
        }
        let v_slot = self.v >> self.slot_shift;
        loop {
            let (pos, slot) = self.first()?;
            if slot > v_slot {
                self.lo = v_slot.max(self.lo);
                return None;
            }
            self.lo = slot;
            let c = self.buckets[pos].head;
            let tag = self.classes[c as usize].tag;
            if tag >> self.slot_shift > slot {
                // Parked beyond the window: put it where it belongs now that the window moved.
                self.unlink(c);
                self.link(c);
                self.counters.reinserted += 1;
                continue;
            }
            if tag > self.v + DUE_SLACK_TICKS {
                return None; // in the current bucket, not yet due
            }
            self.unlink(c);
            return Some(self.serve(c, now));
        }
    }

    /// Sends the next piece of class `c`, just unlinked.
    fn serve(&mut self, c: u32, now: Timestamp) -> Pull {
        let cl = &mut self.classes[c as usize];
        let (len, offset) = (cl.seg_len(), u32::from(cl.offset));
        let piece = (len - offset).min(self.mtu);
        cl.tag = cl.tag.saturating_add(gap_ticks(piece, cl.npb));
        let last = offset + piece == len;
        if last {
            cl.bucket = DRAINED;
            cl.offset = 0;
            if self.drained != NIL {
                self.retire_drained();
            }
            self.drained = c;
            self.counters.segments += 1;
        } else {
            cl.offset = (offset + piece) as u16;
            self.link(c);
        }
        // The link's clock runs in ticks, so that back-to-back pieces keep the link's exact rate
        // however short they are (whole nanoseconds would lose up to half a ns per piece).
        // A pull in the nanosecond the link frees up continues its busy period exactly.
        let now_ticks = now.as_nanos().saturating_mul(1 << TICK_BITS);
        let start = if now_ticks < self.link_free_ticks.saturating_add(1 << TICK_BITS) {
            self.link_free_ticks
                .max(now_ticks.saturating_sub((1 << TICK_BITS) - 1))
        } else {
            // A caller that polls late may let the link catch up on the time it lost, up to
            // `catch_up` (0 by default: the piece starts at `now`).
            self.link_free_ticks
                .max(now_ticks.saturating_sub(self.catch_up_ticks))
        };
        let tx = (u128::from(piece) * u128::from(self.link_npb) + (1 << (NPB_TO_TICK - 1)))
            >> NPB_TO_TICK; // rounded to the nearest tick: unbiased
        let tx = u64::try_from(tx).unwrap_or(u64::MAX).max(1);
        self.link_free_ticks = start.saturating_add(tx);
        let free_ns = self.link_free_ticks.div_ceil(1 << TICK_BITS);
        self.link_free = Timestamp::from_nanos(free_ns);
        let k = &mut self.counters;
        k.pieces += 1;
        k.bytes += u64::from(piece);
        if self.sum_bps > self.link_bps {
            k.oversubscribed_pieces += 1;
        }
        Pull {
            class: c,
            offset,
            len: piece,
            last,
        }
    }

    /// When [`NicPic::pull`] will next return a piece (never before the latest `now` seen), or
    /// `None` when no class is backlogged. Early only when the first class was parked beyond the
    /// window: the pull at that instant moves it and may return nothing.
    pub fn next_due(&self) -> Option<Timestamp> {
        let (pos, slot) = self.first()?;
        let tag = self.classes[self.buckets[pos].head as usize].tag;
        let target = if tag >> self.slot_shift > slot {
            slot << self.slot_shift
        } else {
            tag.saturating_sub(DUE_SLACK_TICKS)
        };
        Some(self.real_time_of(target).max(self.link_free))
    }

    /// Lets a pull that comes after the link freed up start up to `catch_up` before its `now`
    /// (never before the link was free): a caller that polls late, like a software loop woken
    /// after its deadline, then sends back to back what the link owes instead of losing the
    /// time. Default zero. The link's rate holds over any interval up to `catch_up` of bytes.
    pub fn set_catch_up(&mut self, catch_up: Duration) {
        self.catch_up_ticks = catch_up.as_nanos().saturating_mul(1 << TICK_BITS);
    }

    /// Changes `class`'s limit, from the next piece: the rest of its current wait is rescaled to
    /// the new rate (module docs).
    pub fn set_rate(&mut self, now: Timestamp, class: u32, rate: Rate) -> Result<(), RateError> {
        self.advance(now);
        let Some(c) = self.classes.get(class as usize) else {
            self.counters.refused_rate += 1;
            return Err(RateError::UnknownClass);
        };
        if rate.bps() == 0 {
            self.counters.refused_rate += 1;
            return Err(RateError::ZeroRate);
        }
        let (old, new) = (c.npb, npb_of(rate));
        let tag = if c.tag > self.v {
            let rest = u128::from(c.tag - self.v) * u128::from(new) / u128::from(old);
            self.v
                .saturating_add(u64::try_from(rest).unwrap_or(u64::MAX))
        } else {
            c.tag
        };
        let bucket = c.bucket;
        if bucket != IDLE {
            self.sum_bps = self.sum_bps - weight(old) + weight(new);
        }
        let linked = bucket != IDLE && bucket != DRAINED;
        if linked {
            self.unlink(class);
        }
        let c = &mut self.classes[class as usize];
        c.npb = new;
        c.tag = tag;
        if linked {
            self.link(class);
        }
        self.counters.rate_changes += 1;
        Ok(())
    }

    /// Moves the clock to `now` (time never goes backwards).
    fn advance(&mut self, now: Timestamp) {
        debug_assert!(now >= self.last_now, "time went backwards");
        if now <= self.last_now {
            return;
        }
        if self.drained != NIL {
            self.retire_drained();
        }
        if self.slope_sum != self.sum_bps {
            self.slope = self.slope_for(self.sum_bps);
            self.slope_sum = self.sum_bps;
        }
        let elapsed = now.saturating_since(self.last_now).as_nanos();
        let x = u128::from(elapsed) * u128::from(self.slope) + u128::from(self.v_rem);
        let ticks = u64::try_from(x >> REM_BITS).unwrap_or(u64::MAX);
        self.v = self.v.saturating_add(ticks);
        self.v_rem = (x & ((1 << REM_BITS) - 1)) as u64;
        self.last_now = now;
    }

    /// The drained class was not backlogged again in its instant: it is idle now.
    fn retire_drained(&mut self) {
        let c = &mut self.classes[self.drained as usize];
        debug_assert_eq!(c.bucket, DRAINED);
        c.bucket = IDLE;
        self.sum_bps -= weight(c.npb);
        self.drained = NIL;
    }

    /// `dV/dt` when the backlogged limits sum to `sum` bit/s.
    fn slope_for(&self, sum: u64) -> u64 {
        if sum <= self.link_bps {
            SLOPE_ONE
        } else {
            // Rounded up: V never falls behind the fluid system, so the link never idles for
            // rounding while the limits oversubscribe it (V runs ahead by under 1 in 2^32).
            (u128::from(self.link_bps) << SLOPE_BITS).div_ceil(u128::from(sum)) as u64
        }
    }

    /// The first instant at which `V` reaches `target` ticks, at the current slope.
    fn real_time_of(&self, target: u64) -> Timestamp {
        if target <= self.v {
            return self.last_now;
        }
        // The drained class goes idle as soon as time moves on: count it out.
        let mut sum = self.sum_bps;
        if self.drained != NIL {
            sum -= weight(self.classes[self.drained as usize].npb);
        }
        let slope = if self.slope_sum == sum {
            self.slope
        } else {
            self.slope_for(sum)
        };
        let need = (u128::from(target - self.v) << REM_BITS) - u128::from(self.v_rem);
        // Real time (the common case) is a shift; otherwise a 64-bit division when it fits (a
        // 128-bit one costs tens of ns and this runs once per piece).
        let ns = if slope == SLOPE_ONE {
            need.div_ceil(u128::from(SLOPE_ONE))
        } else if let Ok(need) = u64::try_from(need) {
            u128::from(need.div_ceil(slope.max(1)))
        } else {
            need.div_ceil(u128::from(slope.max(1)))
        };
        let ns = u64::try_from(ns).unwrap_or(u64::MAX);
        self.last_now.saturating_add(Duration::from_nanos(ns))
    }

    /// The first non-empty bucket and its slot.
    #[inline]
    fn first(&self) -> Option<(usize, u64)> {
        let lo_pos = (self.lo & self.mask) as usize;
        let pos = self.occupied.next_set_ring(lo_pos)?;
        let slot = self.lo + ((pos as u64).wrapping_sub(lo_pos as u64) & self.mask);
        Some((pos, slot))
    }

    /// Appends class `c` to the bucket of its tag, clamped into the window.
    fn link(&mut self, c: u32) {
        let v_slot = self.v >> self.slot_shift;
        if self.linked == 0 {
            self.lo = self.lo.max(v_slot);
        }
        let mut slot = (self.classes[c as usize].tag >> self.slot_shift).max(self.lo);
        if slot > self.lo + self.mask {
            slot = self.lo + self.mask;
            self.counters.clamped_beyond_window += 1;
        }
        let pos = (slot & self.mask) as usize;
        let tail = self.buckets[pos].tail;
        let cl = &mut self.classes[c as usize];
        cl.next = NIL;
        cl.prev = tail;
        cl.bucket = pos as u32;
        if tail == NIL {
            self.buckets[pos].head = c;
            self.occupied.set(pos);
        } else {
            self.classes[tail as usize].next = c;
        }
        self.buckets[pos].tail = c;
        self.linked += 1;
    }

    /// Takes class `c` out of its bucket. The head's `prev` is not kept up to date (it is never
    /// read: head-ness is `bucket.head == c`), so popping the head touches no other class.
    fn unlink(&mut self, c: u32) {
        let Class {
            next, prev, bucket, ..
        } = self.classes[c as usize];
        let pos = bucket as usize;
        if self.buckets[pos].head == c {
            self.buckets[pos].head = next;
            if next == NIL {
                self.buckets[pos].tail = NIL;
                self.occupied.clear(pos);
            }
        } else {
            self.classes[prev as usize].next = next;
            match next {
                NIL => self.buckets[pos].tail = prev,
                n => self.classes[n as usize].prev = prev,
            }
        }
        let cl = &mut self.classes[c as usize];
        cl.next = NIL;
        cl.prev = NIL;
        self.linked -= 1;
    }

    /// Classes configured.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Classes with a head segment still to pull.
    pub fn backlogged(&self) -> usize {
        self.linked
    }

    /// Sum of the backlogged classes' limits, bit/s.
    pub fn backlogged_bps(&self) -> u64 {
        self.sum_bps
    }

    /// True while the backlogged limits exceed the link (the weighted-sharing fallback is on).
    pub fn oversubscribed(&self) -> bool {
        self.sum_bps > self.link_bps
    }

    /// System virtual time, ticks of 1/256 ns ([`TICK_BITS`]).
    pub fn virtual_time(&self) -> u64 {
        self.v
    }

    /// The counters.
    pub fn counters(&self) -> NicPicCounters {
        self.counters
    }

    /// Bytes held: the class table, the calendar's bucket heads and its bitmap.
    pub fn memory_bytes(&self) -> usize {
        self.classes.capacity() * CLASS_BYTES
            + self.buckets.capacity() * core::mem::size_of::<Bucket>()
            + self.occupied.memory_bytes()
    }

    /// Checks the executable invariants (CONTRIBUTING.md §10); panics on a violation. O(classes +
    /// buckets): for tests.
    pub fn invariants(&self) {
        assert!(self.v_rem < 1 << REM_BITS);
        assert!(
            self.lo <= self.v >> self.slot_shift,
            "window start beyond V"
        );
        let mut seen = vec![false; self.classes.len()];
        let mut linked = 0;
        for (pos, b) in self.buckets.iter().enumerate() {
            assert_eq!(self.occupied.get(pos), b.head != NIL, "bitmap at {pos}");
            let (mut prev, mut c) = (NIL, b.head);
            while c != NIL {
                assert!(
                    !core::mem::replace(&mut seen[c as usize], true),
                    "{c} twice"
                );
                let cl = &self.classes[c as usize];
                // The head's `prev` is stale by design (see `unlink`).
                if prev != NIL {
                    assert_eq!(cl.prev, prev, "prev link of {c}");
                }
                assert_eq!(cl.bucket, pos as u32, "bucket of {c}");
                assert!(u32::from(cl.offset) < cl.seg_len(), "offset of {c}");
                linked += 1;
                prev = c;
                c = cl.next;
            }
            assert_eq!(b.tail, prev, "tail of {pos}");
        }
        assert_eq!(linked, self.linked);
        let mut sum = 0u64;
        for (i, cl) in self.classes.iter().enumerate() {
            match cl.bucket {
                IDLE => assert!(!seen[i]),
                DRAINED => assert_eq!(self.drained, i as u32, "a second drained class"),
                _ => assert!(seen[i], "{i} says it is linked"),
            }
            if cl.bucket != IDLE {
                sum += weight(cl.npb);
            }
        }
        assert_eq!(sum, self.sum_bps);
        let k = &self.counters;
        assert!(k.segments <= k.doorbells && k.pieces >= k.segments);
        assert_eq!(
            k.doorbells - k.segments,
            self.linked as u64,
            "every announced segment is linked until its last piece"
        );
    }
}

/// Nanoseconds per byte of `rate` in [`Rate::FRAC_BITS`] fixed point (`u64::MAX` at zero).
fn npb_of(rate: Rate) -> u64 {
    u64::try_from(rate.transmit_time_fp(1)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
