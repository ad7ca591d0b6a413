//! The switch port as the daemon's own shared link ([`SwitchScenario::daemon`]): every packet
//! becomes a real frame, [`Engine::receive`] classifies it into its service's class on a `[link]`
//! of the port's rate, buffer, quantum and marking, and [`Engine::release`] moves it through the
//! link (`metronome_engine::engine::link`), which marks, drops and sends by its clock;
//! [`DaemonPort::dequeue`] hands it on. Where it departs from the core's port (the link's frame
//! size sets the quantum) and why: `docs/design/mq-ecn.md`.

use super::SwitchScenario;
use metronome_config::Config;
use metronome_core::mq_port::MAX_QUEUES;
use metronome_core::Timestamp;
use metronome_engine::engine::Engine;
use metronome_io::{FramePool, RxFrame};
use metronome_packet::build::{write_tcp_frame, TcpFrame};
use metronome_packet::Ecn;

/// Offset of the IPv4 TOS byte in a frame [`write_tcp_frame`] builds.
const TOS_OFFSET: usize = 15;
/// First destination port of the services' classes.
const SERVICE_PORT: u16 = 5000;
/// Frame slots of the pool: the port's buffer in MTU frames, plus room for packets in flight
/// through the engine (a few); at least what a 1 MB buffer of 64-byte frames holds.
const SLOTS_SPARE: usize = 64;

/// Why the daemon's link did not take a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DaemonReject {
    /// The shared buffer was full.
    BufferFull,
    /// Not ECN-capable above the threshold (a `non_ect = "drop"` class).
    NotEct,
    /// Anything else the engine refused (no frame slot, a drop of another reason).
    Other,
}

/// The engine, its pool, and the map from pool slots back to the simulator's packet ids.
pub(super) struct DaemonPort {
    engine: Engine,
    pool: FramePool,
    slot_pkt: Vec<u32>,
    out: Vec<u32>,
    rx: [RxFrame; 1],
    /// A packet the link sent at once on arrival (an idle port), for the next dequeue.
    ready: Option<u32>,
    /// Class state index of each service's class.
    class_of: Vec<usize>,
}

/// The daemon configuration of `sc`'s port: a `[link]` and one class per queue.
pub(super) fn config_text(sc: &SwitchScenario, lambda: f64, rule: &str) -> String {
    let quantum = sc.quantum_bytes.max(sc.mtu + 22);
    let mut text = format!(
        "[interfaces]\ninside = \"sim0\"\noutside = \"sim1\"\nmtu = {mtu}\n\
         [daemon]\nvnet_hdr = false\npool_share = 0\n\
         [link]\nrate = {rate}\nbuffer = {buffer}\nquantum = {quantum}\nburst = {quantum}\n\
         marking = \"{rule}\"\nrtt = \"{rtt}ns\"\nlambda = {lambda}\nbeta = {beta}\n\
         [default]\nlink = false\n",
        mtu = sc.mtu,
        rate = sc.line_rate_bps,
        buffer = sc.buffer_bytes,
        rtt = sc.base_rtt_ns,
        beta = sc.beta,
    );
    for s in 0..sc.queues.min(MAX_QUEUES as u32 - 1) {
        text.push_str(&format!(
            "[[class]]\nname = \"s{s}\"\nmatch = {{ protocol = \"tcp\", dst_port = {} }}\n\
             weight = 1\n",
            u32::from(SERVICE_PORT) + s
        ));
    }
    text
}

impl DaemonPort {
    /// The daemon's link for `sc`, its marking `rule` with `lambda` (as `[link] marking`).
    pub(super) fn new(sc: &SwitchScenario, lambda: f64, rule: &str) -> Result<Self, String> {
        let config = Config::from_toml_str(&config_text(sc, lambda, rule), "switch port")
            .map_err(|e| e.to_string())?;
        let slots = (sc.buffer_bytes / u64::from(sc.mtu)) as usize + SLOTS_SPARE;
        let engine = Engine::new(&config.engine(), slots);
        let class_of = (0..sc.queues)
            .map(|s| engine.class_index(&format!("s{s}")).unwrap_or(0))
            .collect();
        Ok(DaemonPort {
            engine,
            pool: FramePool::new(slots as u32, sc.mtu as usize + 22),
            slot_pkt: vec![u32::MAX; slots],
            out: Vec::with_capacity(2),
            rx: [RxFrame::default()],
            ready: None,
            class_of,
        })
    }

    /// Packet `id` of flow `flow` in service `service` (`len` bytes on the wire, ECT(0) when
    /// `ect`) reaches the port at `now`. `Ok(marked)`: it is queued (or ready to leave at once),
    /// marked CE when `marked`.
    pub(super) fn enqueue(
        &mut self,
        now: Timestamp,
        (id, flow, service): (u32, u32, u32),
        len: u32,
        ect: bool,
    ) -> Result<bool, DaemonReject> {
        let Some(slot) = self.pool.alloc() else {
            return Err(DaemonReject::Other);
        };
        self.pool.set_len(slot, len as usize);
        let frame = TcpFrame {
            src_ip: [10, (flow >> 16) as u8, (flow >> 8) as u8, flow as u8],
            dst_ip: [10, 255, 255, 254],
            src_port: 40_000,
            dst_port: SERVICE_PORT + service as u16,
            ecn: if ect { Ecn::Ect0 } else { Ecn::NotEct },
            seq: 0,
        };
        if write_tcp_frame(self.pool.frame_mut(slot), &frame).is_err() {
            self.pool.free(slot);
            return Err(DaemonReject::Other);
        }
        self.slot_pkt[slot as usize] = id;
        self.rx[0] = RxFrame {
            id: slot,
            len,
            csum_not_ready: false,
            stamp_ns: 0,
        };
        let before = self.engine.link().map(|l| l.counters()).unwrap_or_default();
        let dropped_before = self.engine.counters().dropped();
        self.out.clear();
        self.engine
            .receive(now, &mut self.pool, &self.rx, &mut self.out);
        if self.engine.counters().dropped() > dropped_before || !self.out.is_empty() {
            for &s in &self.out {
                self.pool.free(s);
            }
            return Err(DaemonReject::Other);
        }
        // Into the link's queue; on an idle link it leaves at once.
        self.engine.release(now, &mut self.pool, &mut self.out, 1);
        let after = self.engine.link().map(|l| l.counters()).unwrap_or_default();
        if after.dropped_buffer > before.dropped_buffer {
            return Err(DaemonReject::BufferFull);
        }
        if after.dropped_not_ect > before.dropped_not_ect {
            return Err(DaemonReject::NotEct);
        }
        if after.dropped() > before.dropped() {
            return Err(DaemonReject::Other);
        }
        let marked = after.marked > before.marked;
        if let Some(&s) = self.out.first() {
            self.ready = Some(self.take(s).0);
        }
        Ok(marked)
    }

    /// Frees slot `s` and returns its packet id and whether its frame carries CE.
    fn take(&mut self, s: u32) -> (u32, bool) {
        let ce = self
            .pool
            .frame(s)
            .get(TOS_OFFSET)
            .is_some_and(|b| b & 0b11 == Ecn::Ce as u8);
        let id = self.slot_pkt[s as usize];
        self.pool.free(s);
        (id, ce)
    }

    /// The next packet to serialise at `now` (the port is free): its id.
    pub(super) fn dequeue(&mut self, now: Timestamp) -> Option<u32> {
        if let Some(id) = self.ready.take() {
            return Some(id);
        }
        self.out.clear();
        // The simulator's serialisation time is rounded to the nanosecond, the link clock's
        // departures are exact: the link may be free up to 1 ns after `now`.
        let at = match self.engine.next_due() {
            Some(due) if due > now && due.as_nanos() - now.as_nanos() <= 1 => due,
            _ => now,
        };
        if self.engine.release(at, &mut self.pool, &mut self.out, 1) == 0 {
            return None;
        }
        let s = self.out[0];
        Some(self.take(s).0)
    }

    /// Bytes waiting in the link's queues.
    pub(super) fn total_bytes(&self) -> u64 {
        self.engine.link().map_or(0, |l| l.total_bytes())
    }

    /// Service 0's current marking threshold, bytes.
    pub(super) fn threshold_bytes_q0(&self) -> u64 {
        let class = self.class_of.first().copied().unwrap_or(0);
        self.engine
            .link()
            .map_or(u64::MAX, |l| l.class_threshold_bytes(class))
    }

    /// The engine (its counters, its accounting invariants).
    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }
}
