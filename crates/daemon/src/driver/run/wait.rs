//! The idle loop's sleep: how long ([`wake_after`]: never before the wheel's next departure,
//! at most `timer_slack` after it, at most [`MAX_SLEEP`]) and on what ([`wait`]: `ppoll(2)` on
//! both ports' descriptors and the hook's, so that a frame arriving meanwhile, or an operation
//! of the control socket, wakes the loop at once).

use super::MAX_SLEEP;
pub use crate::ops::metrics::Wake;
use metronome_core::Timestamp;
use metronome_io::PacketPort;
use nix::poll::{PollFd, PollFlags};
use std::os::fd::BorrowedFd;
use std::time::Duration as StdDuration;

/// Time until `next_due`, at most [`MAX_SLEEP`]; zero when due.
pub(super) fn sleep_time(next_due: Option<Timestamp>, now: Timestamp) -> StdDuration {
    match next_due {
        Some(t) => StdDuration::from_nanos(t.saturating_since(now).as_nanos()).min(MAX_SLEEP),
        None => MAX_SLEEP,
    }
}

/// How long the idle loop sleeps when the wheel's next departure is `next_due`: until
/// `slack` after it (frames due within the slack then leave in one batch), at most
/// [`MAX_SLEEP`]. Never before `next_due`, so a frame woken for leaves at or after its EDT
/// (`Engine::release` takes only what is due) and, the machine's wake-up latency aside, at
/// most `slack` after it. A frame that arrives meanwhile wakes the loop at once, and the round
/// it starts releases whatever is due by then.
pub(super) fn wake_after(
    next_due: Option<Timestamp>,
    slack: metronome_core::Duration,
    now: Timestamp,
) -> StdDuration {
    sleep_time(next_due.map(|t| t.saturating_add(slack)), now)
}

/// The window over which [`Arrivals`] counts frames: 10 ms.
pub(super) const ARRIVAL_WINDOW: metronome_core::Duration =
    metronome_core::Duration::from_millis(10);

/// Frames that must arrive, on average, within one arrival slack for the loop to sleep through
/// arrivals: 2. Below that, a wake-up per arrival costs little more than the departures' own,
/// and waiting for the next departure would only delay the arrival.
pub(super) const COALESCE_ARRIVALS: u64 = 2;

/// How often frames arrive: counted over windows of [`ARRIVAL_WINDOW`], so that the loop sleeps
/// through arrivals only while they come often enough that one wake-up serves several
/// ([`Arrivals::frequent`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Arrivals {
    /// When the current window began.
    since: Option<Timestamp>,
    /// Frames of the current window.
    count: u64,
    /// Whether the last whole window had frequent arrivals.
    frequent: bool,
}

impl Arrivals {
    /// Counts `frames` received at `now`; at the end of a window decides whether arrivals
    /// came at least [`COALESCE_ARRIVALS`] per `slack` over it.
    pub(super) fn count(&mut self, now: Timestamp, frames: u64, slack: metronome_core::Duration) {
        self.count += frames;
        let since = *self.since.get_or_insert(now);
        let window = now.saturating_since(since);
        if window >= ARRIVAL_WINDOW {
            // count / window >= COALESCE_ARRIVALS / slack, in integers.
            self.frequent = u128::from(self.count) * u128::from(slack.as_nanos())
                >= u128::from(COALESCE_ARRIVALS) * u128::from(window.as_nanos());
            (self.since, self.count) = (Some(now), 0);
        }
    }

    /// Whether frames arrived at least [`COALESCE_ARRIVALS`] per arrival slack over the last
    /// whole window.
    pub(super) fn frequent(&self) -> bool {
        self.frequent
    }
}

/// How one of the loop's sleeps ended: which ports to read, and why it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Woken {
    pub(super) inside: bool,
    pub(super) outside: bool,
    pub(super) by: Wake,
}

/// Sleeps until `wake` is readable or `timeout` passes, and unless `deaf` until either port is
/// readable too (ppoll(2), nanosecond timeout). `wake` is the loop hook's descriptor
/// ([`super::LoopHook::wake_fd`]: the control socket's operations), which the hook reads at the
/// top of the next round. A port without a descriptor, any `ppoll` failure (EINTR: a signal) and
/// every port after a `deaf` sleep count as readable (frames may have come meanwhile).
pub(super) fn wait<I: PacketPort, O: PacketPort>(
    inside: &I,
    outside: &O,
    wake: Option<BorrowedFd<'_>>,
    timeout: StdDuration,
    deaf: bool,
) -> Woken {
    let events = PollFlags::POLLIN;
    let (fd_in, fd_out) = if deaf {
        (None, None)
    } else {
        (inside.poll_fd(), outside.poll_fd())
    };
    let present = [fd_in, fd_out, wake];
    let Some(any) = present.iter().flatten().next().copied() else {
        std::thread::sleep(timeout);
        return Woken {
            inside: true,
            outside: true,
            by: Wake::Due,
        };
    };
    // A missing descriptor's place polls one that is present again (harmless, its result
    // unread), so the set is one array whatever is present: nothing allocated per sleep.
    let mut fds = present.map(|fd| PollFd::new(fd.unwrap_or(any), events));
    let ts = nix::sys::time::TimeSpec::from_duration(timeout);
    let ok = nix::poll::ppoll(&mut fds, Some(ts), None).is_ok();
    let ready = |k: usize| {
        !ok || fds[k].revents().is_none_or(|r| {
            r.intersects(PollFlags::POLLIN | PollFlags::POLLERR | PollFlags::POLLHUP)
        })
    };
    let (port_in, port_out) = (fd_in.is_some() && ready(0), fd_out.is_some() && ready(1));
    let by = if !ok || port_in || port_out {
        Wake::Frame
    } else if wake.is_some() && ready(2) {
        Wake::Control
    } else {
        Wake::Due
    };
    Woken {
        inside: fd_in.is_none() || port_in,
        outside: fd_out.is_none() || port_out,
        by,
    }
}
