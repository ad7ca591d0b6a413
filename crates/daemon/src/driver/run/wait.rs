//! The idle loop's sleep: how long ([`wake_after`]: never before the wheel's next departure,
//! at most `timer_slack` after it, at most [`MAX_SLEEP`]) and on what ([`wait`]: `ppoll(2)` on
//! both ports' descriptors and the hook's, so that a frame arriving meanwhile, or an operation
//! of the control socket, wakes the loop at once).

use super::MAX_SLEEP;
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

/// Sleeps until either port or `wake` is readable or `timeout` passes (ppoll(2), nanosecond
/// timeout); returns which ports `ppoll` reported readable (or in error: the receive reports
/// it). `wake` is the loop hook's descriptor ([`super::LoopHook::wake_fd`]: the control
/// socket's operations), which the hook reads at the top of the next round. A port without a
/// descriptor, or any `ppoll` failure (EINTR: a signal), counts as readable.
pub(super) fn wait<I: PacketPort, O: PacketPort>(
    inside: &I,
    outside: &O,
    wake: Option<BorrowedFd<'_>>,
    timeout: StdDuration,
) -> (bool, bool) {
    let events = PollFlags::POLLIN;
    let (fd_in, fd_out) = (inside.poll_fd(), outside.poll_fd());
    let present = [fd_in, fd_out, wake];
    let Some(any) = present.iter().flatten().next().copied() else {
        std::thread::sleep(timeout);
        return (true, true);
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
    (fd_in.is_none() || ready(0), fd_out.is_none() || ready(1))
}
