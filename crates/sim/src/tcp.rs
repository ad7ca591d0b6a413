//! The TCP-like transport of a simulated source: sequence state, congestion control (Reno, CUBIC,
//! Vegas, DCTCP), fast retransmit / fast recovery, RTO with backoff and the ECN reaction.
//!
//! Sequence numbers and windows count MTUs. Reno and NewReno recovery after RFC 5681 and RFC 6582,
//! RTO after RFC 6298 (up to [`MAX_RTO`]) from echoed timestamps (RFC 7323, shaper time included as
//! Carousel §5.2 asks), CUBIC after RFC 8312, Vegas as Carousel §5.2's delay-based backpressure
//! (Linux `tcp_vegas.c`), ECN after RFC 3168, DCTCP after RFC 8257 ([`DCTCP_G`]).
//! [`TcpSender::take_delivered`] gives each segment's delivery latency (zD §2.3, §6.2).
//!
//! Where it departs from the RFCs: no pacing discount in Vegas, no immediate ACK on a CE change,
//! no SACK. The rules in full: ARCHITECTURE.md, "The simulated TCP".

use crate::event::{Ack, LazyTimer, TimerFire};
use crate::scenario::{CongestionControl, MAX_RTO};
use metronome_core::{Duration, Timestamp};
use std::collections::VecDeque;

/// CUBIC's scaling constant `C` in MTUs per second cubed (RFC 8312 §5.1).
const CUBIC_C: f64 = 0.4;
/// CUBIC's multiplicative decrease factor (RFC 8312 §4.5).
const CUBIC_BETA: f64 = 0.7;
/// Reno's multiplicative decrease factor (RFC 5681 §3.1, equation 4).
const RENO_BETA: f64 = 0.5;
/// Duplicate ACKs that trigger fast retransmit (RFC 5681 §3.2).
const DUPACK_THRESHOLD: u32 = 3;
/// Smallest `ssthresh` after a reduction, MTUs (RFC 5681 equation 4: `2 * SMSS`).
const MIN_SSTHRESH: f64 = 2.0;
/// Vegas' slow-start exit threshold `gamma`, packets (Linux `tcp_vegas.c`).
const VEGAS_GAMMA: f64 = 1.0;
/// DCTCP's estimation gain `g` (RFC 8257 §4.2 and the DCTCP paper §3.1: 1/16).
pub const DCTCP_G: f64 = 1.0 / 16.0;
/// DCTCP's initial `alpha` (Linux `dctcp_alpha_on_init` default: the maximum, 1).
const DCTCP_ALPHA_INIT: f64 = 1.0;

/// Per-algorithm state.
#[derive(Clone, Copy, Debug)]
enum Cc {
    Reno,
    Cubic {
        w_max: f64,
        w_last_max: f64,
        k: f64,
        origin: f64,
        w_est: f64,
        epoch_start: Option<Timestamp>,
    },
    Vegas {
        alpha: f64,
        beta: f64,
        /// End of the current per-RTT epoch (a sequence number).
        epoch_end: u32,
        /// Minimum RTT sample of the current epoch, ns.
        epoch_min: u64,
    },
    Dctcp {
        /// Estimated fraction of marked MTUs, in [0, 1].
        alpha: f64,
        /// End of the current observation window (a sequence number).
        window_end: u32,
        /// MTUs acknowledged in the current observation window.
        acked: u32,
        /// MTUs acknowledged by ACKs carrying ECE in the current observation window.
        marked: u32,
    },
}

/// Counters of one sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Segments sent again (fast retransmit, partial ACK, go-back-N after an RTO).
    pub retransmits: u64,
    /// Fast retransmits (third duplicate ACK).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Window reductions caused by ECN echoes.
    pub ecn_reductions: u64,
}

/// What the source must do after an ACK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// MTUs newly acknowledged.
    pub newly_acked: u32,
    /// The RTT sample the ACK carried, if it acknowledged new data.
    pub rtt: Option<Duration>,
}

/// A TCP sender's state.
#[derive(Clone, Debug)]
pub struct TcpSender {
    // Hot: sequence state and window, touched on every ACK and send.
    /// Oldest unacknowledged MTU.
    pub snd_una: u32,
    /// Next MTU to send.
    pub snd_nxt: u32,
    /// One past the highest MTU ever sent (`snd_nxt` falls below it after an RTO).
    pub high_tx: u32,
    /// The segment at `snd_una` must be sent again before anything else.
    pub retx_pending: bool,
    cwnd: f64,
    ssthresh: f64,
    dupacks: u32,
    in_recovery: bool,
    recover: u32,
    ecn_recover: u32,
    cc: Cc,
    // RTT estimation and the retransmission timer.
    srtt: u64,
    rttvar: u64,
    min_rtt: u64,
    rto: Duration,
    rto_min: Duration,
    backoff: u32,
    // Delivery-latency bookkeeping: `(end, t)` for each segment of new data, in sequence order:
    // MTUs below `end` (and above the previous entry's end) were first sent at `t`. It holds at
    // most the flight (<= the socket buffer) and keeps its capacity, so the steady state does not
    // allocate.
    first_sent: VecDeque<(u32, Timestamp)>,
    /// The retransmission timer: runs while data is outstanding, restarted by every ACK of new
    /// data ([`TcpSender::sent`], [`TcpSender::acked`], [`TcpSender::timer_fired`]).
    timer: LazyTimer,
    /// Counters.
    pub counters: TcpCounters,
}

/// What a retransmission-timer event did ([`TcpSender::timer_fired`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStep {
    /// The timer expired: the sender went back to `snd_una` and may send again.
    pub expired: bool,
    /// Schedule a timer event at this time.
    pub schedule: Option<Timestamp>,
}

impl TcpSender {
    /// A sender with `initial_cwnd` MTUs of window, RFC 6298's initial RTO and `rto_min`.
    pub fn new(cc: CongestionControl, initial_cwnd: u32, rto_min: Duration) -> Self {
        let cc = match cc {
            CongestionControl::Reno => Cc::Reno,
            CongestionControl::Cubic => Cc::Cubic {
                w_max: 0.0,
                w_last_max: 0.0,
                k: 0.0,
                origin: 0.0,
                w_est: 0.0,
                epoch_start: None,
            },
            CongestionControl::Vegas { alpha, beta } => Cc::Vegas {
                alpha: f64::from(alpha),
                beta: f64::from(beta),
                epoch_end: 0,
                epoch_min: u64::MAX,
            },
            CongestionControl::Dctcp => Cc::Dctcp {
                alpha: DCTCP_ALPHA_INIT,
                window_end: 0,
                acked: 0,
                marked: 0,
            },
        };
        TcpSender {
            snd_una: 0,
            snd_nxt: 0,
            high_tx: 0,
            retx_pending: false,
            cwnd: f64::from(initial_cwnd),
            ssthresh: f64::INFINITY,
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            ecn_recover: 0,
            cc,
            srtt: 0,
            rttvar: 0,
            min_rtt: u64::MAX,
            rto: crate::scenario::INITIAL_RTO.max(rto_min),
            rto_min,
            backoff: 0,
            first_sent: VecDeque::with_capacity(initial_cwnd as usize),
            timer: LazyTimer::default(),
            counters: TcpCounters::default(),
        }
    }

    /// Records a segment sent ([`TcpSender::on_sent`]) and starts the retransmission timer
    /// (`now + RTO`) unless it runs; returns the time to schedule a timer event at, if any.
    #[must_use]
    pub fn sent(&mut self, now: Timestamp, seq: u32, n: u32) -> Option<Timestamp> {
        self.on_sent(now, seq, n);
        if self.timer.is_set() {
            None
        } else {
            self.timer.set(now + self.rto())
        }
    }

    /// Processes an ACK ([`TcpSender::on_ack`]), then stops the retransmission timer when nothing
    /// is outstanding or restarts it when the ACK acknowledged new data (RFC 6298 §5.2–5.3);
    /// returns the outcome and the time to schedule a timer event at, if any.
    #[must_use]
    pub fn acked(&mut self, now: Timestamp, ack: &Ack) -> (AckOutcome, Option<Timestamp>) {
        let out = self.on_ack(now, ack);
        let schedule = if !self.has_outstanding() {
            self.timer.clear();
            None
        } else if out.newly_acked > 0 {
            self.timer.set(now + self.rto())
        } else {
            None
        };
        (out, schedule)
    }

    /// One of the retransmission timer's events fired at `now`: on expiry the sender backs off
    /// ([`TcpSender::on_rto`]) and the timer restarts with the new RTO.
    #[must_use]
    pub fn timer_fired(&mut self, now: Timestamp) -> TimerStep {
        match self.timer.fire(now) {
            TimerFire::Expired => {
                self.on_rto();
                TimerStep {
                    expired: true,
                    schedule: self.timer.set(now + self.rto()),
                }
            }
            TimerFire::Early(t) => TimerStep {
                expired: false,
                schedule: self.timer.set(t),
            },
            TimerFire::Stopped => TimerStep::default(),
        }
    }

    /// The same sender with `rto` as its retransmission timeout before the first RTT sample
    /// (at least its minimum), e.g. to model a connection whose handshake already gave an RTT
    /// sample instead of RFC 6298's 1 s.
    pub fn with_initial_rto(mut self, rto: Duration) -> Self {
        self.rto = rto.max(self.rto_min);
        self
    }

    /// The congestion window in MTUs.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// DCTCP's current estimate of the fraction of marked packets (`None` for other algorithms).
    pub fn dctcp_alpha(&self) -> Option<f64> {
        match self.cc {
            Cc::Dctcp { alpha, .. } => Some(alpha),
            _ => None,
        }
    }

    /// MTUs sent and not yet acknowledged.
    pub fn in_flight(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }

    /// MTUs of new data the window allows now, given a socket-buffer cap of `sndbuf` MTUs.
    pub fn window_room(&self, sndbuf: u32) -> u32 {
        let wnd = (self.cwnd as u32).min(sndbuf);
        wnd.saturating_sub(self.in_flight())
    }

    /// The current retransmission timeout, backoff included.
    pub fn rto(&self) -> Duration {
        let ns = self
            .rto
            .as_nanos()
            .saturating_mul(1 << self.backoff.min(16));
        Duration::from_nanos(ns.min(MAX_RTO.as_nanos()))
    }

    /// True while data is outstanding (the retransmission timer must run).
    pub fn has_outstanding(&self) -> bool {
        self.high_tx != self.snd_una
    }

    /// Records that MTUs `[seq, seq + n)` went out at `now`; counts retransmissions and keeps
    /// the first transmission time of new data for [`TcpSender::take_delivered`].
    pub fn on_sent(&mut self, now: Timestamp, seq: u32, n: u32) {
        if seq < self.high_tx {
            self.counters.retransmits += 1;
        }
        if seq + n > self.high_tx {
            self.first_sent.push_back((seq + n, now));
        }
        if seq == self.snd_una && self.retx_pending {
            self.retx_pending = false;
        }
        let end = seq + n;
        if seq == self.snd_nxt || end > self.snd_nxt {
            self.snd_nxt = self.snd_nxt.max(end);
        }
        self.high_tx = self.high_tx.max(end);
    }

    /// Hands `sink` the delivery latency of every segment the ACKs so far cover cumulatively and
    /// that was not handed out before: `now` minus the segment's first transmission time. Call it
    /// after [`TcpSender::on_ack`]. One sample per segment as first sent (with TSO, one per
    /// shaper packet of new data); a segment still partly unacknowledged waits.
    pub fn take_delivered(&mut self, now: Timestamp, mut sink: impl FnMut(Duration)) {
        while let Some(&(end, t)) = self.first_sent.front() {
            if end > self.snd_una {
                break;
            }
            debug_assert!(t <= now, "a segment acknowledged before it was sent");
            sink(now.saturating_since(t));
            self.first_sent.pop_front();
        }
    }

    /// The first transmission time of the oldest segment not yet covered by an ACK, if any.
    pub fn oldest_unacked_sent(&self) -> Option<Timestamp> {
        self.first_sent.front().map(|&(_, t)| t)
    }

    /// Processes an ACK at `now`.
    pub fn on_ack(&mut self, now: Timestamp, ack: &Ack) -> AckOutcome {
        let mut out = AckOutcome::default();
        if ack.ack > self.snd_una {
            let acked = ack.ack - self.snd_una;
            self.snd_una = ack.ack;
            self.snd_nxt = self.snd_nxt.max(self.snd_una);
            self.backoff = 0;
            let rtt = now.saturating_since(ack.ts_echo);
            self.sample_rtt(rtt);
            out = AckOutcome {
                newly_acked: acked,
                rtt: Some(rtt),
            };
            if self.in_recovery {
                if self.snd_una >= self.recover {
                    // Full ACK: leave fast recovery (RFC 6582 §3.2 step 3).
                    self.in_recovery = false;
                    self.cwnd = self.ssthresh;
                } else {
                    // Partial ACK: resend the next hole, deflate (RFC 6582 §3.2 step 3).
                    self.retx_pending = true;
                    self.cwnd = (self.cwnd - f64::from(acked) + 1.0).max(1.0);
                }
            } else {
                self.dupacks = 0;
                self.grow(now, acked, rtt);
            }
        } else if ack.ack == self.snd_una && self.has_outstanding() {
            self.on_dupack();
        }
        self.dctcp_observe(out.newly_acked, ack.ece);
        if ack.ece && self.snd_una >= self.ecn_recover && !self.in_recovery {
            self.counters.ecn_reductions += 1;
            if let Cc::Dctcp { alpha, .. } = self.cc {
                // RFC 8257 §3.4: cwnd = cwnd * (1 - alpha / 2).
                self.ssthresh = (self.cwnd * (1.0 - alpha / 2.0)).max(MIN_SSTHRESH);
            } else {
                self.reduce();
            }
            self.cwnd = self.ssthresh;
            self.ecn_recover = self.snd_nxt;
        }
        out
    }

    /// DCTCP's per-window estimation (RFC 8257 §3.3): counts `newly_acked` MTUs (marked if
    /// `ece`) and, once `snd_una` passes the window's end, folds the marked fraction into
    /// `alpha` and opens the next window.
    fn dctcp_observe(&mut self, newly_acked: u32, ece: bool) {
        let Cc::Dctcp {
            alpha,
            window_end,
            acked,
            marked,
        } = &mut self.cc
        else {
            return;
        };
        *acked += newly_acked;
        if ece {
            *marked += newly_acked;
        }
        if self.snd_una < *window_end || *acked == 0 {
            return;
        }
        let f = f64::from(*marked) / f64::from(*acked);
        *alpha = (1.0 - DCTCP_G) * *alpha + DCTCP_G * f;
        debug_assert!((0.0..=1.0).contains(alpha), "alpha {alpha} out of [0, 1]");
        *acked = 0;
        *marked = 0;
        *window_end = self.snd_nxt;
    }

    fn on_dupack(&mut self) {
        self.dupacks += 1;
        if self.in_recovery {
            self.cwnd += 1.0; // window inflation (RFC 5681 §3.2 step 4)
        } else if self.dupacks == DUPACK_THRESHOLD && self.snd_una >= self.recover {
            self.counters.fast_retransmits += 1;
            self.reduce();
            self.cwnd = self.ssthresh + f64::from(DUPACK_THRESHOLD);
            self.in_recovery = true;
            self.recover = self.high_tx;
            self.retx_pending = true;
        }
    }

    /// The retransmission timer expired (RFC 6298 §5.4–5.7, RFC 5681 §3.1 equation 4).
    pub fn on_rto(&mut self) {
        self.counters.timeouts += 1;
        self.reduce();
        self.cwnd = 1.0;
        self.in_recovery = false;
        self.dupacks = 0;
        self.recover = self.high_tx;
        self.snd_nxt = self.snd_una;
        self.retx_pending = false;
        self.backoff = (self.backoff + 1).min(16);
        if let Cc::Cubic { epoch_start, .. } = &mut self.cc {
            *epoch_start = None;
        }
    }

    /// Multiplicative decrease: sets `ssthresh` from the flight size.
    fn reduce(&mut self) {
        // Linux `tcp_reno_ssthresh` / `bictcp_recalc_ssthresh`: a fraction of cwnd.
        let base = self.cwnd;
        self.ssthresh = match &mut self.cc {
            Cc::Reno | Cc::Vegas { .. } | Cc::Dctcp { .. } => (base * RENO_BETA).max(MIN_SSTHRESH),
            Cc::Cubic {
                w_max,
                w_last_max,
                epoch_start,
                ..
            } => {
                // Fast convergence (RFC 8312 §4.6).
                *w_max = if self.cwnd < *w_last_max {
                    self.cwnd * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    self.cwnd
                };
                *w_last_max = self.cwnd;
                *epoch_start = None;
                (base * CUBIC_BETA).max(MIN_SSTHRESH)
            }
        };
    }

    fn sample_rtt(&mut self, rtt: Duration) {
        let r = rtt.as_nanos().max(1);
        self.min_rtt = self.min_rtt.min(r);
        if self.srtt == 0 {
            self.srtt = r;
            self.rttvar = r / 2;
        } else {
            let err = self.srtt.abs_diff(r);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        }
        let rto = self.srtt + 4 * self.rttvar;
        self.rto = Duration::from_nanos(rto.max(self.rto_min.as_nanos()));
        if let Cc::Vegas { epoch_min, .. } = &mut self.cc {
            *epoch_min = (*epoch_min).min(r);
        }
    }

    /// Window growth on `acked` new MTUs.
    fn grow(&mut self, now: Timestamp, acked: u32, _rtt: Duration) {
        let acked = f64::from(acked);
        if let Cc::Vegas { .. } = self.cc {
            self.vegas_grow(acked);
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += acked; // slow start
            return;
        }
        match &mut self.cc {
            Cc::Reno | Cc::Vegas { .. } | Cc::Dctcp { .. } => self.cwnd += acked / self.cwnd,
            Cc::Cubic {
                w_max,
                k,
                origin,
                w_est,
                epoch_start,
                ..
            } => {
                let cwnd = self.cwnd;
                let start = *epoch_start.get_or_insert_with(|| {
                    if cwnd < *w_max {
                        *k = ((*w_max - cwnd) / CUBIC_C).cbrt();
                        *origin = *w_max;
                    } else {
                        *k = 0.0;
                        *origin = cwnd;
                    }
                    *w_est = cwnd;
                    now
                });
                let min_rtt = if self.min_rtt == u64::MAX {
                    0
                } else {
                    self.min_rtt
                };
                let t = (now.saturating_since(start).as_nanos() + min_rtt) as f64 / 1e9;
                let target = *origin + CUBIC_C * (t - *k).powi(3);
                let inc = if target > cwnd {
                    (target - cwnd) / cwnd
                } else {
                    0.01 / cwnd
                };
                *w_est += 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA) * acked / cwnd;
                self.cwnd = (cwnd + inc * acked).max(*w_est);
            }
        }
    }

    fn vegas_grow(&mut self, acked: f64) {
        let Cc::Vegas {
            alpha,
            beta,
            epoch_end,
            epoch_min,
        } = &mut self.cc
        else {
            return;
        };
        if self.cwnd < self.ssthresh {
            self.cwnd += acked;
        }
        if self.snd_una < *epoch_end || *epoch_min == u64::MAX {
            return;
        }
        // One adjustment per RTT.
        let base = self.min_rtt as f64;
        let rtt = *epoch_min as f64;
        let diff = self.cwnd * (rtt - base) / rtt;
        if self.cwnd < self.ssthresh {
            if diff > VEGAS_GAMMA {
                let target = self.cwnd * base / rtt;
                self.cwnd = self.cwnd.min(target + 1.0);
                self.ssthresh = (self.cwnd - 1.0).max(MIN_SSTHRESH);
            }
        } else if diff > *beta {
            self.cwnd -= 1.0;
        } else if diff < *alpha {
            self.cwnd += 1.0;
        }
        self.cwnd = self.cwnd.max(MIN_SSTHRESH);
        *epoch_end = self.snd_nxt;
        *epoch_min = u64::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(a: u32, ts: u64) -> Ack {
        Ack {
            flow: 0,
            ack: a,
            ts_echo: Timestamp::from_nanos(ts),
            ece: false,
        }
    }

    #[test]
    fn slow_start_doubles_then_fast_retransmit_halves() {
        let mut s = TcpSender::new(CongestionControl::Reno, 10, Duration::from_millis(200));
        s.on_sent(Timestamp::ZERO, 0, 10);
        let now = Timestamp::from_nanos(100_000);
        s.on_ack(now, &ack(10, 0));
        assert_eq!(s.cwnd(), 20.0);
        s.on_sent(now, 10, 20);
        for _ in 0..3 {
            s.on_ack(now, &ack(10, 0));
        }
        assert!(s.retx_pending);
        assert_eq!(s.counters.fast_retransmits, 1);
        assert_eq!(s.cwnd(), 10.0 + 3.0);
        s.on_sent(now, 10, 1);
        assert_eq!(s.counters.retransmits, 1);
        s.on_ack(now, &ack(30, 0));
        assert_eq!(s.cwnd(), 10.0);
    }

    #[test]
    fn rto_backs_off_and_goes_back_n() {
        let mut s = TcpSender::new(CongestionControl::Cubic, 10, Duration::from_millis(200));
        s.on_sent(Timestamp::ZERO, 0, 10);
        let r0 = s.rto();
        s.on_rto();
        assert_eq!(s.snd_nxt, 0);
        assert_eq!(s.cwnd(), 1.0);
        assert_eq!(s.rto().as_nanos(), 2 * r0.as_nanos());
    }

    /// Segment 0 is lost and resent after the RTO; segments 1-2 arrive out of order. The
    /// echoed RTT of the final ACK is one base RTT, the delivery latency of all three exceeds the
    /// RTO.
    #[test]
    fn delivery_latency_includes_the_rto_stall() {
        let ms = |m: u64| Timestamp::from_nanos(m * 1_000_000);
        let mut s = TcpSender::new(CongestionControl::Cubic, 10, Duration::from_millis(200));
        s.on_sent(ms(0), 0, 1);
        s.on_sent(ms(0), 1, 2);
        let mut got = Vec::new();
        s.on_ack(ms(1), &ack(0, 0)); // duplicate ACKs of the out-of-order segment
        s.take_delivered(ms(1), |d| got.push(d));
        assert!(got.is_empty(), "nothing delivered in order yet");
        let rto = s.rto();
        s.on_rto();
        let resent = ms(0) + rto;
        s.on_sent(resent, 0, 1);
        assert_eq!(s.counters.retransmits, 1);
        let done = resent + Duration::from_millis(1);
        let out = s.on_ack(done, &ack(3, resent.as_nanos()));
        assert_eq!(
            out.rtt,
            Some(Duration::from_millis(1)),
            "echoed RTT hides the stall"
        );
        s.take_delivered(done, |d| got.push(d));
        assert_eq!(got.len(), 2, "one sample per segment as first sent");
        assert!(got.iter().all(|d| *d > rto), "{got:?} vs RTO {rto:?}");
        s.take_delivered(done, |d| got.push(d));
        assert_eq!(got.len(), 2, "each segment is sampled once");
    }

    /// A DCTCP sender with one window of `n` MTUs in flight.
    fn dctcp(n: u32) -> TcpSender {
        let mut s = TcpSender::new(CongestionControl::Dctcp, 10, Duration::from_millis(10));
        s.on_sent(Timestamp::ZERO, 0, n);
        s
    }

    /// Sends the next `n` MTUs, then ACKs the oldest `n` one by one, the first `marked` with
    /// ECE: from the second call on, each call is exactly one DCTCP observation window.
    fn dctcp_window(s: &mut TcpSender, n: u32, marked: u32) {
        let nxt = s.snd_nxt;
        s.on_sent(Timestamp::ZERO, nxt, n);
        let start = s.snd_una;
        for i in 0..n {
            let mut a = ack(start + i + 1, 0);
            a.ece = i < marked;
            s.on_ack(Timestamp::from_nanos(1000), &a);
        }
    }

    #[test]
    fn dctcp_alpha_follows_the_marked_fraction_with_gain_one_sixteenth() {
        let mut s = dctcp(10);
        assert_eq!(s.dctcp_alpha(), Some(1.0));
        // The first window is the first ACK alone (its end starts at 0): F = 0.
        dctcp_window(&mut s, 10, 0);
        let a1 = s.dctcp_alpha().unwrap();
        assert!((a1 - 15.0 / 16.0).abs() < 1e-12, "{a1}");
        // No marks for many windows: alpha decays geometrically towards 0.
        for _ in 0..200 {
            dctcp_window(&mut s, 10, 0);
        }
        assert!(s.dctcp_alpha().unwrap() < 1e-4);
        // Every packet marked: alpha converges to 1.
        for _ in 0..200 {
            dctcp_window(&mut s, 10, 10);
        }
        assert!(s.dctcp_alpha().unwrap() > 0.999);
        let reno = TcpSender::new(CongestionControl::Reno, 1, Duration::ZERO);
        assert_eq!(reno.dctcp_alpha(), None);
    }

    #[test]
    fn dctcp_steady_marking_settles_alpha_at_the_fraction() {
        let mut s = dctcp(10);
        for _ in 0..400 {
            dctcp_window(&mut s, 10, 3);
        }
        let a = s.dctcp_alpha().unwrap();
        assert!((a - 0.3).abs() < 1e-6, "{a}");
    }

    #[test]
    fn dctcp_cuts_by_half_alpha_once_per_window() {
        let mut s = dctcp(4);
        for _ in 0..200 {
            dctcp_window(&mut s, 4, 1); // alpha settles at 1/4 (one ECE per window)
        }
        let cuts = s.counters.ecn_reductions;
        // The gate reopens once the data in flight at a cut is acknowledged: with one window
        // sent ahead, that is every second window.
        assert!((99..=101).contains(&cuts), "{cuts}");
        s.ssthresh = 1.0; // congestion avoidance from here
        let before = s.cwnd();
        let una = s.snd_una;
        let mut a = ack(una + 1, 0);
        a.ece = true;
        s.on_ack(Timestamp::from_nanos(1000), &a);
        let alpha = s.dctcp_alpha().unwrap();
        assert!((alpha - 0.25).abs() < 1e-3, "{alpha}");
        let expected = ((before + 1.0 / before) * (1.0 - alpha / 2.0)).max(MIN_SSTHRESH);
        assert!(
            (s.cwnd() - expected).abs() < 1e-9,
            "{} vs {expected}",
            s.cwnd()
        );
        assert_eq!(s.counters.ecn_reductions, cuts + 1);
        // A second ECE in the same window does not cut again.
        a.ack = una + 2;
        s.on_ack(Timestamp::from_nanos(1000), &a);
        assert_eq!(s.counters.ecn_reductions, cuts + 1);
    }

    #[test]
    fn dctcp_loss_halves_like_reno() {
        let mut s = dctcp(20);
        for _ in 0..50 {
            dctcp_window(&mut s, 20, 0);
        }
        let before = s.cwnd();
        let una = s.snd_una;
        for _ in 0..3 {
            s.on_ack(Timestamp::from_nanos(1000), &ack(una, 0));
        }
        assert_eq!(s.counters.fast_retransmits, 1);
        assert!((s.ssthresh - before * RENO_BETA).abs() < 1e-9);
    }

    #[test]
    fn ecn_reduces_once_per_rtt() {
        let mut s = TcpSender::new(CongestionControl::Reno, 40, Duration::from_millis(200));
        s.ssthresh = 1.0;
        s.on_sent(Timestamp::ZERO, 0, 40);
        let now = Timestamp::from_nanos(1000);
        let mut a = ack(1, 0);
        a.ece = true;
        s.on_ack(now, &a);
        let after = s.cwnd();
        assert!(after <= 20.5, "{after}");
        a.ack = 2;
        s.on_ack(now, &a);
        assert_eq!(s.counters.ecn_reductions, 1);
    }
}
