use super::*;
use crate::packet::{ClassId, FlowId};

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn pkt(id: u32, queue: u16, len: u16) -> PacketRef {
    PacketRef::new(id, FlowId(id), ClassId(queue), len)
}

#[test]
fn dwrr_two_queues_alternate_by_quantum() {
    let mut port = MqPort::new(MqPortConfig {
        queues: vec![QueueConfig::weighted(3000), QueueConfig::weighted(1500)],
        ..Default::default()
    })
    .unwrap();
    for id in 0..6 {
        port.enqueue(t(0), pkt(id, 0, 1500), true).unwrap();
        port.enqueue(t(0), pkt(100 + id, 1, 1500), true).unwrap();
    }
    port.invariants();
    let order: Vec<usize> = (0..9).map(|i| port.dequeue(t(i)).unwrap().queue).collect();
    assert_eq!(order, [0, 0, 1, 0, 0, 1, 0, 0, 1]);
    port.invariants();
}
