//! # metronome-core
//!
//! The shaping core of Metronome: Earliest-Departure-Time (EDT) timestamping ([`timestamp`],
//! Carousel §5.1.1) and the time-indexed queues that release packets at their EDT: the timing
//! wheel ([`timing_wheel`], Carousel §5.1.2) and FlowBundler's multi-level wheel ([`mltw`],
//! FlowBundler §IV-B..D). Around them: backpressure ([`completions`], Carousel §5.2; [`zd`] and
//! [`paused_flows`], zD §4), receiver-side ACK shaping ([`ack_shaping`], Carousel §6), a
//! multi-queue port with MQ-ECN marking ([`mq_port`], [`mq_ecn`]), fair queueing inside a class
//! ([`fair_queue`]), NicPic's scheduler ([`nicpic`]), the NIC-level bandwidth allocator and its
//! lock-free exchange and ring ([`nba`], [`rate_exchange`], [`spsc`], Carousel §5.3; loom models
//! per CONTRIBUTING.md §13), cluster shares ([`cluster`]), and baselines behind the same
//! [`EdtQueue`] trait ([`binary_heap`], [`fq_tree`], [`token_bucket_rr`]).
//!
//! The core does no I/O and reads no clock: every operation takes `now` as an argument
//! (CONTRIBUTING.md §1). Why each mechanism is built as it is: docs/design/.
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
