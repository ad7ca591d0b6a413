//! Receiver-side ACK shaping in the daemon's reverse direction (Carousel §6): the TCP ACKs that
//! come back from `outside` for the flows of a class with `ack_shaping` are rewritten by
//! [`metronome_core::ack_shaping::AckShaper`], so the class's senders on `inside` are slowed to
//! the configured rate by their own ACK clock, without their data being queued.
//!
//! Per reverse frame ([`AckShaping::on_reverse`], after `engine::Engine::pass_through`
//! completed its checksum): parse it; a TCP segment with ACK set is matched to a class by the
//! **data direction's** 5-tuple (source and destination swapped, so a class written for the
//! data, e.g. `dst_port = 5201`, takes its ACKs); if the class shapes ACKs, the core decides:
//! * pass unchanged;
//! * rewrite the acknowledgement number in place, TCP checksum updated incrementally (RFC 1624
//!   §3, [`metronome_packet::checksum_update`] over the two 16-bit words of the number);
//! * suppress a pure ACK that would be a duplicate: its frame is freed and counted.
//!
//! Every ACK of a tracked flow leaves its headers (up to [`TEMPLATE_BYTES`]) in a per-flow
//! template. Due ACKs ([`AckShaping::generate`], at [`AckShaping::next_due`]) are built from it:
//! payload cut, FIN/SYN/RST/PSH/URG cleared, the new acknowledgement number, IP length and
//! checksums recomputed ([`metronome_packet::ipv4_header_checksum`],
//! [`metronome_packet::fix_l4_checksum`]), so they carry the receiver's latest window, TCP
//! options (timestamps) and ECN echo.
//!
//! Rates are TCP sequence bytes (goodput), not wire bytes like a class's `rate`; the
//! generated-ACK step is one `interfaces.mtu`, the burst two ([`DAEMON_BURST_MTUS`]). Flows are
//! keyed by a 64-bit SipHash of the 5-tuple under the engine's secret keys
//! ([`crate::flow_seed::FlowSeed::ack_keys`], drawn from the OS at every daemon start and
//! kept across reloads): a sender who cannot learn the keys cannot compute tuples whose keys share
//! an index position of the core's table with a victim flow (open addressing with linear
//! probing, `metronome_core::ack_shaping`) or equal a victim's key, and a collision between two
//! live flows has probability about n² / 2^65. Tests use fixed keys
//! ([`crate::flow_seed::FlowSeed::FIXED`]).
//! Not handled, passed unchanged and counted (`unsupported`): IPv6 extension headers, truncated
//! headers, headers longer than a template. Outcomes are counted per class in
//! `metronome_ack_shaping_total{class, outcome}`.

use crate::config::{AckShapingPolicy, ClassPolicy, EngineConfig};
use crate::flow_seed::FlowSeed;
use crate::stats::{Telemetry, ACK_OUTCOMES};
use metronome_core::ack_shaping::{
    AckAction, AckRate, AckShaper, AckShapingConfig, AckShapingCounters, FlowHandle, GeneratedAck,
    SegmentKind,
};
use metronome_core::{ClassId, Timestamp};
use metronome_io::FramePool;
use metronome_packet::{
    checksum_update, fix_l4_checksum, ipv4_header_checksum, parse, proto, Classifier, FiveTuple,
    Fragment, IpPacket, Parsed,
};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

mod frame;

pub use frame::{tcp_view, TcpView, TEMPLATE_BYTES};

/// MTUs of ACK credit a flow may bank: 2. A generated ACK is due when one MTU of credit has
/// accrued; with a one-MTU cap (the core's default, exact in the simulator) every poll that the
/// loop makes late (a `ppoll` wake-up, another batch first) would lose the credit of its
/// lateness, and a kernel TCP sender's rate would fall a few percent short of the class's.
/// Two absorb a poll up to one MTU time late; the bound on acknowledged bytes becomes
/// `rate x interval + 2 MTU`.
const DAEMON_BURST_MTUS: u32 = 2;

/// Generated ACKs taken per poll call, a batch (the caller's room bounds it further); the loop
/// calls until fewer come back, so the value changes speed, never results.
const GENERATE_BATCH: usize = 64;

/// Outcome labels of `metronome_ack_shaping_total`, in [`ClassAcks::outcome_counts`] order.
const OUTCOMES: [&str; 6] = ACK_OUTCOMES;

/// Counters of the daemon's side of ACK shaping (the core counts the rest, per class).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckFrameCounters {
    /// Reverse TCP frames of ACK-shaped classes whose headers could not be handled (passed).
    pub unsupported: u64,
    /// Generated ACKs not sent: the frame pool had no free slot (a later ACK covers them).
    pub no_buffer: u64,
}

/// One flow's last ACK headers.
#[derive(Clone, Copy, Debug)]
struct Template {
    bytes: [u8; TEMPLATE_BYTES],
    view: TcpView,
}

/// The ACK shaper of one class and its per-flow templates.
struct ClassAcks {
    name: String,
    policy: AckShapingPolicy,
    shaper: AckShaper,
    /// Indexed by [`FlowHandle`]; allocated with the shaper.
    templates: Vec<Option<Template>>,
    /// Counts already published.
    published: [u64; OUTCOMES.len()],
    unsupported: u64,
}

impl ClassAcks {
    fn new(name: &str, policy: AckShapingPolicy, mtu: u32) -> Self {
        let rate = if policy.per_flow {
            AckRate::PerFlow(policy.rate)
        } else {
            AckRate::Shared(policy.rate)
        };
        let cfg = AckShapingConfig {
            mtu,
            burst: mtu.saturating_mul(DAEMON_BURST_MTUS),
            ..AckShapingConfig::new(rate, policy.flows)
        };
        // Validation bounds the rate (> 0), the flows (1..=2^20) and the MTU (> 0).
        let shaper = AckShaper::new(cfg).expect("validated ACK-shaping policy");
        ClassAcks {
            name: name.to_owned(),
            policy,
            shaper,
            templates: vec![None; policy.flows as usize],
            published: [0; OUTCOMES.len()],
            unsupported: 0,
        }
    }

    fn outcome_counts(&self) -> [u64; OUTCOMES.len()] {
        let c = self.shaper.counters();
        [
            c.rewritten,
            c.passthrough,
            c.suppressed,
            c.generated,
            c.table_full,
            self.unsupported,
        ]
    }

    fn publish(&mut self, telemetry: &mut dyn Telemetry) {
        let now = self.outcome_counts();
        if now != self.published {
            telemetry.ack_shaping(&self.name, &now);
            self.published = now;
        }
    }
}

/// ACK shaping for every class that asks for it. See the module documentation.
pub struct AckShaping {
    classifier: Classifier,
    /// The keys of [`flow_key`], fixed for the shaper's life.
    seed: FlowSeed,
    /// Config class id (0 = default) -> index into `classes`.
    class_map: Vec<Option<u32>>,
    classes: Vec<ClassAcks>,
    mtu: u32,
    scratch: [GeneratedAck; GENERATE_BATCH],
    counters: AckFrameCounters,
}

impl std::fmt::Debug for AckShaping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckShaping")
            .field("classes", &self.classes.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl AckShaping {
    /// ACK shaping for the classes of `config` that set `ack_shaping`, keying flows with
    /// `seed`'s ACK keys.
    pub fn new(config: &EngineConfig, seed: FlowSeed) -> Self {
        let mut s = AckShaping {
            classifier: Classifier::new(Vec::new(), EngineConfig::DEFAULT_CLASS),
            seed,
            class_map: Vec::new(),
            classes: Vec::new(),
            mtu: config.mtu,
            scratch: [GeneratedAck {
                flow: FlowHandle(0),
                key: 0,
                ack: 0,
            }; GENERATE_BATCH],
            counters: AckFrameCounters::default(),
        };
        s.reload(config);
        s
    }

    /// Applies `config`'s classes: a class that keeps its name and flow count keeps its flows
    /// (its rate updated); others start afresh. ACKs of a removed class pass unchanged from now
    /// on, which releases whatever it held back.
    pub fn reload(&mut self, config: &EngineConfig) {
        let mut old: Vec<ClassAcks> = std::mem::take(&mut self.classes);
        let mut wanted: Vec<(&str, &ClassPolicy)> = vec![("default", &config.default_class)];
        wanted.extend(config.classes.iter().map(|c| (c.name.as_str(), &c.policy)));
        self.class_map = wanted
            .iter()
            .map(|(name, policy)| {
                let a = policy.ack_shaping?;
                let kept = old
                    .iter()
                    .position(|c| c.name == *name && c.policy.flows == a.flows)
                    .map(|i| old.swap_remove(i));
                let class = match kept {
                    Some(mut c) => {
                        let rate = if a.per_flow {
                            AckRate::PerFlow(a.rate)
                        } else {
                            AckRate::Shared(a.rate)
                        };
                        let _ = c.shaper.set_rate(rate); // validated: above 0
                        c.policy = a;
                        c
                    }
                    None => ClassAcks::new(name, a, self.mtu),
                };
                self.classes.push(class);
                Some((self.classes.len() - 1) as u32)
            })
            .collect();
        // Without a class that shapes ACKs nothing is looked up: no classifier to build (with
        // 100 000 classes it is a sizeable part of start-up) and no map to keep.
        if self.classes.is_empty() {
            self.class_map = Vec::new();
            self.classifier = Classifier::new(Vec::new(), EngineConfig::DEFAULT_CLASS);
        } else {
            self.classifier = config.classifier_seeded(self.seed.flow_hash());
        }
    }

    /// True when some class shapes ACKs.
    pub fn is_active(&self) -> bool {
        !self.classes.is_empty()
    }

    /// Shapes the ACKs among `ids[from..]`, frames just received on `outside` and bound for
    /// `inside`: rewrites them in place, or frees and removes the suppressed ones.
    pub fn on_reverse(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        ids: &mut Vec<u32>,
        from: usize,
    ) {
        if self.classes.is_empty() || from >= ids.len() {
            return;
        }
        let mut kept = from;
        for k in from..ids.len() {
            let id = ids[k];
            if self.shape_one(now, pool, id) {
                ids[kept] = id;
                kept += 1;
            } else {
                pool.free(id);
            }
        }
        ids.truncate(kept);
    }

    /// One reverse frame; false when it is suppressed.
    fn shape_one(&mut self, now: Timestamp, pool: &mut FramePool, id: u32) -> bool {
        let frame = pool.frame_mut(id);
        let Parsed::Ip(ip) = parse(frame) else {
            return true;
        };
        if ip.tuple.protocol != proto::TCP {
            return true;
        }
        let Some(c) = self.class_of_ack(&ip) else {
            return true;
        };
        let class = &mut self.classes[c];
        let Some(view) = tcp_view(frame, &ip).filter(|_| ip.fragment == Fragment::Whole) else {
            class.unsupported += 1;
            return true;
        };
        let flags = frame[view.tcp + 13];
        if flags & frame::ACK == 0 {
            return true; // a SYN: no acknowledgement number yet
        }
        let kind = if flags & frame::RST != 0 {
            SegmentKind::Reset
        } else if flags & frame::SYN != 0 {
            SegmentKind::Syn
        } else if view.payload > 0 || flags & frame::FIN != 0 {
            SegmentKind::Carrying
        } else {
            SegmentKind::PureAck
        };
        let ack = view.ack(frame);
        let key = flow_key(&ip.tuple, self.seed);
        let d = class.shaper.on_ack(now, key, ack, kind);
        if let Some(FlowHandle(h)) = d.flow {
            let mut bytes = [0u8; TEMPLATE_BYTES];
            let n = view.header_end();
            bytes[..n].copy_from_slice(&frame[..n]);
            class.templates[h as usize] = Some(Template { bytes, view });
        }
        match d.action {
            AckAction::Pass => true,
            AckAction::Rewrite(new) => {
                view.rewrite_ack(frame, new);
                true
            }
            AckAction::Suppress => false,
        }
    }

    /// The index of the ACK-shaping state of the class the ACK's flow belongs to, by the data
    /// direction's tuple.
    fn class_of_ack(&self, ip: &IpPacket) -> Option<usize> {
        let mut data = *ip;
        data.tuple = FiveTuple {
            src: ip.tuple.dst,
            dst: ip.tuple.src,
            protocol: ip.tuple.protocol,
            src_port: ip.tuple.dst_port,
            dst_port: ip.tuple.src_port,
        };
        let class: ClassId = self.classifier.class_of(&data);
        let i = (*self.class_map.get(class.index())?)?;
        Some(i as usize)
    }

    /// Builds the ACKs due at `now` into frames of `pool` and pushes their ids onto `out`, at
    /// most `room`. Returns how many.
    pub fn generate(
        &mut self,
        now: Timestamp,
        pool: &mut FramePool,
        out: &mut Vec<u32>,
        room: usize,
    ) -> usize {
        let mut sent = 0;
        for c in 0..self.classes.len() {
            while sent < room {
                let want = (room - sent).min(GENERATE_BATCH);
                let n = self.classes[c].shaper.poll(now, &mut self.scratch[..want]);
                for g in &self.scratch[..n] {
                    let Some(t) = self.classes[c].templates[g.flow.0 as usize] else {
                        continue; // every tracked flow stored one with its first ACK
                    };
                    match build_ack(pool, &t, g.ack) {
                        Some(id) => {
                            out.push(id);
                            sent += 1;
                        }
                        None => self.counters.no_buffer += 1,
                    }
                }
                if n < want {
                    break;
                }
            }
        }
        sent
    }

    /// When the earliest generated ACK is due, if any class holds data back.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.classes
            .iter()
            .filter_map(|c| c.shaper.next_due())
            .min()
    }

    /// The daemon-side counters.
    pub fn frame_counters(&self) -> AckFrameCounters {
        let unsupported = self.classes.iter().map(|c| c.unsupported).sum();
        AckFrameCounters {
            unsupported,
            ..self.counters
        }
    }

    /// The core's shaper of class `name`, if it shapes ACKs.
    pub fn class_shaper(&self, name: &str) -> Option<&AckShaper> {
        self.classes
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.shaper)
    }

    /// The core's counters of class `name`, if it shapes ACKs.
    pub fn class_counters(&self, name: &str) -> Option<AckShapingCounters> {
        self.classes
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.shaper.counters())
    }

    /// Publishes each class's counts that changed since the last call.
    pub fn publish(&mut self, telemetry: &mut dyn Telemetry) {
        for c in &mut self.classes {
            c.publish(telemetry);
        }
    }
}

/// A 64-bit key of a TCP flow's ACK direction: SipHash-2-4 (std's `SipHasher`) keyed with
/// `seed`'s ACK keys.
pub fn flow_key(t: &FiveTuple, seed: FlowSeed) -> u64 {
    let [k0, k1] = seed.ack_keys();
    // std's keyed SipHash; deprecated only in favour of `DefaultHasher`, which takes no keys.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
    match (t.src, t.dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (a.octets(), b.octets()).hash(&mut h),
        (a, b) => (a, b).hash(&mut h),
    }
    (t.protocol, t.src_port, t.dst_port).hash(&mut h);
    h.finish()
}

/// A pure ACK built from `t` with acknowledgement number `ack`, in a new pool slot.
fn build_ack(pool: &mut FramePool, t: &Template, ack: u32) -> Option<u32> {
    let id = pool.alloc()?;
    let v = t.view;
    let n = v.header_end();
    pool.slot_mut(id)[..n].copy_from_slice(&t.bytes[..n]);
    pool.set_len(id, n);
    let frame = pool.frame_mut(id);
    v.make_pure_ack(frame, ack);
    if v.ipv4 {
        let ip = &mut frame[v.ip..v.tcp];
        ip[10..12].fill(0);
        if let Some(sum) = ipv4_header_checksum(ip) {
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
    }
    let parsed = parse(frame);
    let _ = fix_l4_checksum(frame, &parsed); // the template's headers parsed before
    Some(id)
}

/// Rewrites the 32-bit word at `at` of a TCP header starting at `tcp` and updates the checksum
/// incrementally (RFC 1624 §3, one 16-bit word at a time).
fn rewrite_u32(frame: &mut [u8], tcp: usize, at: usize, new: u32) {
    let old = u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
    let mut sum = u16::from_be_bytes([frame[tcp + 16], frame[tcp + 17]]);
    sum = checksum_update(sum, (old >> 16) as u16, (new >> 16) as u16);
    sum = checksum_update(sum, old as u16, new as u16);
    frame[at..at + 4].copy_from_slice(&new.to_be_bytes());
    frame[tcp + 16..tcp + 18].copy_from_slice(&sum.to_be_bytes());
}
