//! Embedding the shaping core: stamp packets with EDTs from a pacing policy and a tenant's rate
//! limit, queue them in a Carousel timing wheel, and release them in batches as time passes. The
//! caller owns the packets (here a Vec of descriptors) and the clock (here simulated time).

use metronome_core::timestamp::{PolicyKind, Timestamper};
use metronome_core::{
    ClassId, Duration, EdtQueue, FlowId, HorizonPolicy, PacketRef, Rate, Timestamp, TimingWheel,
    TimingWheelConfig,
};

/// The caller's own packet descriptor: the wheel only ever sees its index.
struct Descriptor {
    edt: Timestamp,
    len: u16,
}

fn main() {
    let mut stamper = Timestamper::new();
    let tenant = stamper.add_policy(PolicyKind::Aggregate, Rate::mbps(500), 3_000);
    let flows = [
        stamper.add_policy(PolicyKind::Pacing, Rate::gbps(1), 1_500),
        stamper.add_policy(PolicyKind::Pacing, Rate::mbps(100), 1_500),
    ];
    let mut wheel = TimingWheel::new(TimingWheelConfig {
        granularity: Duration::from_micros(2),
        horizon: Duration::from_millis(100),
        horizon_policy: HorizonPolicy::Reject,
        pool_packets: 4_096,
    });

    let mut descriptors = Vec::new();
    let mut now = Timestamp::from_nanos(1_000_000);
    for i in 0..20u32 {
        let f = (i % 2) as usize;
        let len = 1_500u16;
        let edt = stamper.stamp(now, len as u32, &[flows[f], tenant]);
        let pkt = PacketRef::new(i, FlowId(f as u32), ClassId(0), len);
        match wheel.enqueue(now, edt, pkt) {
            Ok(()) => descriptors.push(Descriptor { edt, len }),
            Err(rejected) => println!("packet {} handed back: {}", i, rejected.reason),
        }
    }

    let mut batch = [PacketRef::default(); 32];
    let mut sent_bytes = 0u64;
    while let Some(due) = wheel.next_due() {
        now = now.max(due); // a real loop would sleep until `due`
        let n = wheel.dequeue(now, &mut batch);
        for pkt in &batch[..n] {
            let d = &descriptors[pkt.id as usize];
            sent_bytes += d.len as u64;
            println!(
                "t={:>9} ns  packet {:>2} of flow {}  (EDT {} ns)",
                now.as_nanos(),
                pkt.id,
                pkt.flow.0,
                d.edt.as_nanos()
            );
        }
    }
    println!("sent {sent_bytes} bytes; counters: {:?}", wheel.counters());
}
