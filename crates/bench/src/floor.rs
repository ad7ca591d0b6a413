//! The harness floor: the steady-state loop's own cost per packet.
//!
//! [`FifoFloor`] is a plain FIFO that releases its head while the head's EDT has passed. It does
//! no time indexing and is not a shaper (a packet behind a later one waits); it exists so that
//! `metronome bench` can measure, in the same run and with the same loop, how much of a
//! structure's ns per packet is the loop itself (workload bookkeeping, the transmit batch) rather
//! than the structure's enqueue and dequeue.

use metronome_core::{EdtQueue, PacketRef, QueueCounters, Rejected, Timestamp};
use std::collections::VecDeque;

/// A FIFO of (EDT, reference) pairs, released from the head while due.
#[derive(Debug, Default)]
pub struct FifoFloor {
    queue: VecDeque<(Timestamp, PacketRef)>,
    counters: QueueCounters,
}

impl FifoFloor {
    /// An empty FIFO.
    pub fn new() -> Self {
        Self::default()
    }
}

impl EdtQueue for FifoFloor {
    fn name(&self) -> &'static str {
        "fifo_floor"
    }

    #[inline(always)]
    fn enqueue(&mut self, _now: Timestamp, edt: Timestamp, pkt: PacketRef) -> Result<(), Rejected> {
        self.queue.push_back((edt, pkt));
        self.counters.enqueued += 1;
        Ok(())
    }

    fn dequeue(&mut self, now: Timestamp, out: &mut [PacketRef]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.queue.front() {
                Some(&(edt, pkt)) if edt <= now => {
                    out[n] = pkt;
                    n += 1;
                    self.queue.pop_front();
                }
                _ => break,
            }
        }
        self.counters.dequeued += n as u64;
        n
    }

    fn next_due(&self) -> Option<Timestamp> {
        self.queue.front().map(|&(edt, _)| edt)
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn memory_bytes(&self) -> usize {
        self.queue.capacity() * core::mem::size_of::<(Timestamp, PacketRef)>()
    }

    fn packet_bytes(&self) -> usize {
        self.queue.len() * core::mem::size_of::<(Timestamp, PacketRef)>()
    }

    fn counters(&self) -> QueueCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metronome_core::{ClassId, FlowId};

    #[test]
    fn releases_the_head_while_due() {
        let mut q = FifoFloor::new();
        let p = |id| PacketRef::new(id, FlowId(0), ClassId(0), 100);
        let t = Timestamp::from_nanos;
        q.enqueue(t(0), t(10), p(1)).unwrap();
        q.enqueue(t(0), t(5), p(2)).unwrap();
        q.enqueue(t(0), t(30), p(3)).unwrap();
        let mut out = [PacketRef::default(); 8];
        assert_eq!(q.dequeue(t(9), &mut out), 0);
        assert_eq!(q.dequeue(t(10), &mut out), 2);
        assert_eq!(q.next_due(), Some(t(30)));
    }
}
