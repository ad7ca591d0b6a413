//! # metronome-core
//!
//! The shaping core of Metronome: Earliest-Departure-Time (EDT) timestamping and the time-indexed
//! queues that release packets at their EDT, plus the baselines they are measured against.
//!
//! * [`timestamp`]: per-flow pacing and per-aggregate rate-limit policies that stamp packets with
//!   an EDT (Carousel §5.1.1).
//! * [`timing_wheel`]: Carousel's single time-indexed queue with a global pool of multi-reference
//!   nodes (Carousel §5.1.2, Algorithm 1), and the same wheel with per-packet allocating lists.
//! * [`mltw`]: FlowBundler's multi-level timing wheel with inter-flow batching and per-destination
//!   rate estimation (FlowBundler §IV-B..D).
//! * [`ack_shaping`]: receiver-side ACK shaping of incast flows (Carousel §6).
//! * [`mq_port`], [`mq_ecn`]: a multi-queue switch port (DWRR or WRR under strict priority, a
//!   shared buffer) with per-queue, per-port and MQ-ECN marking (MQ-ECN, NSDI '16, §2-§4).
//! * [`fair_queue`]: fair queueing inside a rate-limited class: `fq_codel`-style deficit round
//!   robin over the class's flows, new flows first, 32 bytes a flow (Carousel §5.1, NicPic §3,
//!   FlowBundler §IV).
//! * [`nicpic`]: NicPic's transmit scheduler: per-class rate limits over 100 000+ classes whose
//!   queues stay in host memory, 32 bytes per class, MTU-sized pulls out of large segments and
//!   weighted sharing when the limits oversubscribe the link (NicPic §3).
//! * [`nba`], [`rate_exchange`]: the NIC-level bandwidth allocator that splits an aggregate limit
//!   across per-core shapers, and the lock-free cells they exchange usage and rates through
//!   (Carousel §5.3); [`spsc`]: the lock-free ring that hands packets between cores. Their loom
//!   model tests run with `RUSTFLAGS="--cfg loom" cargo test -p metronome-core --release --lib
//!   loom` (`cargo test --workspace` runs the other tests).
//! * [`cluster`]: one limit shared by the daemons of a cluster, each computing its share from the
//!   same published demand records by the NBA's water-filling (Carousel §2, §5.3).
//! * [`binary_heap`], [`fq_tree`], [`token_bucket_rr`]: baselines behind the same [`EdtQueue`]
//!   trait.
//!
//! The core does no I/O and reads no clock: every operation takes `now` as an argument.
//!
//! ```
//! use metronome_core::{EdtQueue, TimingWheel, TimingWheelConfig, PacketRef, FlowId, ClassId,
//!                      Timestamp, Duration};
//!
//! let mut wheel = TimingWheel::new(TimingWheelConfig {
//!     granularity: Duration::from_micros(2),
//!     horizon: Duration::from_millis(10),
//!     pool_packets: 1024,
//!     ..Default::default()
//! });
//! let now = Timestamp::from_nanos(1_000_000);
//! let pkt = PacketRef::new(7, FlowId(1), ClassId(0), 1500);
//! wheel.enqueue(now, now + Duration::from_micros(30), pkt).unwrap();
//! assert_eq!(wheel.next_due(), Some(Timestamp::from_nanos(1_030_000)));
//!
//! let mut out = [PacketRef::default(); 32];
//! assert_eq!(wheel.dequeue(now, &mut out), 0); // not yet
//! let later = now + Duration::from_micros(30);
//! assert_eq!(wheel.dequeue(later, &mut out), 1);
//! assert_eq!(out[0].id, 7);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ack_shaping;
pub mod binary_heap;
pub mod bitmap;
pub mod cluster;
pub mod completions;
pub mod fair_queue;
pub mod fq_tree;
pub mod mltw;
pub mod mq_ecn;
pub mod mq_port;
pub mod nba;
pub mod nicpic;
pub mod packet;
pub mod paused_flows;
pub mod pool;
pub mod queue;
pub mod rate;
pub mod rate_exchange;
pub mod spsc;
mod sync;
pub mod time;
pub mod timestamp;
pub mod timing_wheel;
pub mod token_bucket_rr;
pub mod zd;

pub use completions::{Completion, CompletionMode, Deferred, InFlight};
pub use fair_queue::{
    FairQueue, FairQueueConfig, FairQueueConfigError, FairQueueCounters, FairQueueDequeued,
    FairQueueEnqueued, FairRejectReason,
};
pub use mq_ecn::{Marking, MarkingConfigError, NonEctPolicy, Red};
pub use mq_port::{
    MqConfigError, MqCounters, MqDequeued, MqEnqueued, MqPort, MqPortConfig, MqQueueCounters,
    MqRejectReason, QueueConfig, Scheduling,
};
pub use nba::{water_fill, water_fill_weighted, Nba, NbaConfig, NbaConfigError, NbaCounters};
pub use nicpic::{NicPic, NicPicConfig, NicPicCounters, Pull};
pub use packet::{ClassId, FlowId, PacketRef};
pub use paused_flows::{Discipline, PausedFlows};
pub use queue::{EdtQueue, HorizonPolicy, QueueCounters, RejectReason, Rejected};
pub use rate::{ParseRateError, Rate};
pub use rate_exchange::RateExchange;
pub use time::{Clock, Duration, ManualClock, SlotClock, Timestamp};
pub use timing_wheel::{
    GenericTimingWheel, ListSlots, PoolSlots, TimingWheel, TimingWheelConfig, TimingWheelList,
};
pub use zd::{CappedWheel, Overflow, Pfifo, ScheduledBuffer, TbfBuffer, Zd, ZdConfig, ZdVerdict};

/// The README's code blocks, compiled and run as doctests so the README cannot drift.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
