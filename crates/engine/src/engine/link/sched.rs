//! The link's queues and scheduler ([`Sched`]): the DWRR or WRR multi-queue port of
//! [`metronome_core::mq_port`] (weighted classes under a strict-priority tier, one shared
//! buffer, MQ-ECN marking), or NicPic's queues ([`super::NicPicQueues`]).
//!
//! * **Queue order** ([`queue_order`]): the priority classes by priority then by configuration
//!   order, then the weighted ones in configuration order.
//! * **Quantum**: a class's `quantum_bytes` times its weight, at least one longest frame.
//! * **Not-ECT**: the port is built with [`NonEctPolicy::Drop`]; the stage tells it which
//!   packets are ECN-capable (see [`super`]).

use super::NicPicQueues;
use crate::config::{ClassLink, LinkConfig, LinkScheduler};
use metronome_core::mq_port::{MqPortConfig, QueueConfig, Scheduling};
use metronome_core::{MqPort, MqRejectReason, NonEctPolicy, PacketRef, Timestamp};

/// The link's queues and scheduler: the DWRR/WRR port, or NicPic's.
pub(super) enum Sched {
    Mq(Box<MqPort>),
    NicPic(Box<NicPicQueues>),
}

impl Sched {
    pub(super) fn enqueue(
        &mut self,
        now: Timestamp,
        pkt: PacketRef,
        ect: bool,
    ) -> Result<bool, MqRejectReason> {
        match self {
            Sched::Mq(p) => p
                .enqueue(now, pkt, ect)
                .map(|e| e.marked)
                .map_err(|r| r.reason),
            Sched::NicPic(n) => n.enqueue(now, pkt, ect),
        }
    }

    /// The next packet and its queue: the port's head when the link clock says the link is
    /// free, NicPic's pull (its own link clock) otherwise.
    pub(super) fn dequeue(&mut self, now: Timestamp) -> Option<(PacketRef, usize)> {
        match self {
            Sched::Mq(p) => p.dequeue(now).map(|d| (d.pkt, d.queue)),
            Sched::NicPic(n) => n.dequeue(now),
        }
    }

    pub(super) fn take_all(&mut self, out: &mut Vec<(PacketRef, usize)>) {
        match self {
            Sched::Mq(p) => {
                while let Some(d) = p.dequeue(Timestamp::MAX) {
                    out.push((d.pkt, d.queue));
                }
            }
            Sched::NicPic(n) => n.take_all(out),
        }
    }

    pub(super) fn total_packets(&self) -> usize {
        match self {
            Sched::Mq(p) => p.total_packets(),
            Sched::NicPic(n) => n.total_packets(),
        }
    }

    pub(super) fn total_bytes(&self) -> u64 {
        match self {
            Sched::Mq(p) => p.total_bytes(),
            Sched::NicPic(n) => n.total_bytes(),
        }
    }

    pub(super) fn queue(&self, q: usize) -> (u64, u64) {
        match self {
            Sched::Mq(p) => (p.queue_packets(q) as u64, p.queue_bytes(q)),
            Sched::NicPic(n) => n.queue(q),
        }
    }

    pub(super) fn threshold_bytes(&self, q: usize) -> u64 {
        match self {
            Sched::Mq(p) => p.threshold_bytes(q),
            Sched::NicPic(n) => n.threshold_bytes(q),
        }
    }

    pub(super) fn invariants(&self) {
        match self {
            Sched::Mq(p) => p.invariants(),
            Sched::NicPic(n) => n.invariants(),
        }
    }
}

/// The queues of `config` for `members` (class state index, its place), in queue order.
pub(super) fn build_sched(config: &LinkConfig, members: &[(usize, ClassLink)]) -> Sched {
    if config.scheduler == LinkScheduler::NicPic {
        let weights: Vec<u32> = members.iter().map(|(_, l)| l.weight).collect();
        return Sched::NicPic(Box::new(NicPicQueues::new(config, &weights)));
    }
    Sched::Mq(Box::new(build_port(config, members)))
}

/// The port of `config` for `members` (class state index, its place), in queue order.
fn build_port(config: &LinkConfig, members: &[(usize, ClassLink)]) -> MqPort {
    let queues: Vec<QueueConfig> = members
        .iter()
        .map(|(_, l)| QueueConfig {
            quantum_bytes: config
                .quantum_bytes
                .saturating_mul(l.weight.max(1))
                .max(config.max_frame_bytes),
            strict_priority: l.priority.is_some(),
        })
        .collect();
    let port_config = MqPortConfig {
        line_rate: config.rate,
        buffer_bytes: config.buffer_bytes,
        scheduling: match config.scheduler {
            LinkScheduler::Wrr => Scheduling::Wrr,
            LinkScheduler::Dwrr | LinkScheduler::NicPic => Scheduling::Dwrr,
        },
        queues: if queues.is_empty() {
            vec![QueueConfig::weighted(config.max_frame_bytes)]
        } else {
            queues
        },
        marking: config.core_marking(),
        mtu_bytes: config.max_frame_bytes,
        non_ect: NonEctPolicy::Drop,
    };
    match MqPort::new(port_config.clone()) {
        Ok(port) => port,
        // Validation bounds every field the port checks; should it still refuse, the link runs
        // without marking rather than not at all.
        Err(_) => MqPort::new(MqPortConfig {
            marking: metronome_core::Marking::None,
            ..port_config
        })
        .unwrap_or_else(|e| panic!("link port refused a validated configuration: {e}")),
    }
}

/// The classes on the link in queue order: the priority classes by priority then by
/// configuration order, then the weighted ones in configuration order.
pub(super) fn queue_order(classes: &[(usize, ClassLink)]) -> Vec<(usize, ClassLink)> {
    let mut members: Vec<(usize, ClassLink)> =
        classes.iter().copied().filter(|(_, l)| l.on_link).collect();
    // Stable: configuration order within a priority and among the weighted classes.
    members.sort_by_key(|(_, l)| l.priority.map_or(u16::MAX, u16::from));
    members
}
