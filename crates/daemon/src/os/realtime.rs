//! The shaping loops' real-time priority (`[daemon] realtime_priority`): each loop's thread makes
//! itself `SCHED_FIFO` at that priority when it starts ([`enter`]), so that it runs before the
//! host's ordinary tasks; the control socket's threads run one below ([`control_priority`]).
//! [`prepare`] settles what allows it while the daemon still has its privileges: a raised
//! `RLIMIT_RTPRIO`, else CAP_SYS_NICE kept, else a start error naming the key. Why a user-space
//! loop needs it: ARCHITECTURE.md, "Real-time priority"; the measurements:
//! docs/results/classes.md.

use caps::{CapSet, Capability};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use thread_priority::{
    RealtimeThreadSchedulePolicy, ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
};

/// Why the real-time priority could not be had.
#[derive(Debug, thiserror::Error)]
pub enum RealtimeError {
    /// Neither `RLIMIT_RTPRIO` nor CAP_SYS_NICE allows the priority.
    #[error(
        "daemon.realtime_priority = {priority}: the shaping loops may not take SCHED_FIFO: \
         RLIMIT_RTPRIO cannot be raised to it ({source}) and CAP_SYS_NICE is not permitted; \
         start the daemon as root, or give it CAP_SYS_NICE (systemd: \
         AmbientCapabilities=CAP_SYS_NICE) or the limit (LimitRTPRIO={priority})"
    )]
    NotAllowed {
        /// The configured priority.
        priority: u8,
        /// The error of `setrlimit` (or `getrlimit`).
        source: nix::Error,
    },
    /// The thread could not make itself `SCHED_FIFO`.
    #[error(
        "daemon.realtime_priority = {priority}: sched_setscheduler(SCHED_FIFO) failed: {message}"
    )]
    Policy {
        /// The configured priority.
        priority: u8,
        /// What failed.
        message: String,
    },
}

/// Before the privileges go: makes sure the loops' threads may take `priority` afterwards.
/// Raises the process's `RLIMIT_RTPRIO` (soft and hard) to it where it may: `Ok(None)`, no
/// capability needed. Else, with CAP_SYS_NICE permitted, `Ok(Some(CAP_SYS_NICE))`: the
/// capability to keep. Else the error.
pub fn prepare(priority: u8) -> Result<Option<Capability>, RealtimeError> {
    let raised = raise_limit(priority);
    let Err(source) = raised else {
        return Ok(None);
    };
    let nice = caps::has_cap(None, CapSet::Permitted, Capability::CAP_SYS_NICE).unwrap_or(false);
    if nice {
        Ok(Some(Capability::CAP_SYS_NICE))
    } else {
        Err(RealtimeError::NotAllowed { priority, source })
    }
}

/// Raises `RLIMIT_RTPRIO` to at least `priority`; limits already as high are left.
fn raise_limit(priority: u8) -> Result<(), nix::Error> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_RTPRIO)?;
    let want = u64::from(priority);
    if soft >= want && hard >= want {
        return Ok(());
    }
    setrlimit(Resource::RLIMIT_RTPRIO, soft.max(want), hard.max(want))
}

/// Makes the calling thread `SCHED_FIFO` at `priority`.
pub fn enter(priority: u8) -> Result<(), RealtimeError> {
    let policy = |message: String| RealtimeError::Policy { priority, message };
    let value = ThreadPriorityValue::try_from(priority).map_err(|e| policy(e.to_string()))?;
    thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Crossplatform(value),
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
    )
    .map_err(|e| policy(format!("{e:?}")))
}

/// The control socket's threads' priority with the loops at `loops`: one below (at least 1),
/// so that a loop with work is never held back by them.
pub fn control_priority(loops: u8) -> u8 {
    loops.saturating_sub(1).max(1)
}

/// [`enter`] for a thread of the daemon when `priority` is set: logs what it got; a failure
/// is logged (the thread then runs as an ordinary task) rather than stopping a daemon already
/// started.
pub fn enter_logged(priority: Option<u8>, which: &str) {
    let Some(priority) = priority else { return };
    match enter(priority) {
        Ok(()) => tracing::info!(priority, thread = which, "runs SCHED_FIFO"),
        Err(e) => tracing::error!(error = %e, thread = which, "left an ordinary task"),
    }
}

/// The nice value of the calling thread (field 19 of `/proc/thread-self/stat`); `None` when
/// it cannot be read.
pub fn current_nice() -> Option<i8> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After `comm` the fields start at 3 (state): nice is field 19.
    after_comm.split_whitespace().nth(19 - 3)?.parse().ok()
}

/// The `thread_priority` cross-platform value that its Linux mapping turns into nice `nice`
/// for an ordinary thread (it maps 0..=MAX onto 19..=-20: nice = 39 × (1 − v / MAX),
/// truncated, − 20).
fn crossplatform_for_nice(nice: i8) -> Option<ThreadPriorityValue> {
    let max = u8::from(ThreadPriorityValue::MAX);
    (0u8..=max).find_map(|v| {
        let ratio = 1f32 - f32::from(v) / f32::from(max);
        let got = (39.0 * ratio) as i8 - 20;
        (got == nice).then(|| ThreadPriorityValue::try_from(v).ok())?
    })
}

/// Gives the calling thread, an ordinary task, the nice value `nice` (-20..=19): its weight
/// among the host's ordinary tasks (sched(7)). A negative value needs CAP_SYS_NICE (or
/// `RLIMIT_NICE`); a thread may always raise its own.
pub fn set_nice(nice: i8) -> Result<(), String> {
    let value = crossplatform_for_nice(nice).ok_or_else(|| format!("nice {nice} out of range"))?;
    thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Crossplatform(value),
        ThreadSchedulePolicy::Normal(thread_priority::NormalThreadSchedulePolicy::Other),
    )
    .map_err(|e| format!("{e:?}"))
}

/// `[daemon] nice` for a shaping loop's thread (or, before the privileges go, the daemon's
/// main thread, whose later threads inherit it): sets `nice` when the thread's nice value is
/// higher (a thread already there, as one created by a thread that was, is left); a failure is
/// logged and the thread runs at the nice value it has.
pub fn nice_logged(nice: i8, which: &str) {
    if current_nice().is_some_and(|n| n <= nice) {
        return;
    }
    match set_nice(nice) {
        Ok(()) => tracing::debug!(nice, thread = which, "nice"),
        Err(e) => tracing::warn!(
            nice,
            error = %e,
            thread = which,
            "daemon.nice could not be set (CAP_SYS_NICE): the loop runs at the nice value it has"
        ),
    }
}

/// Makes the calling thread, one that does not shape (the metrics endpoint, the control
/// socket, the cluster agent, attach mode's watcher), an ordinary task again when it inherited
/// the loops' lower nice value from the thread that made it; always allowed.
pub fn ordinary() {
    if current_nice().is_some_and(|n| n < 0) {
        let _ = set_nice(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::privileged_tests::skip_unprivileged;

    #[test]
    fn every_nice_value_has_its_crossplatform_value() {
        for nice in -20i8..=19 {
            assert!(crossplatform_for_nice(nice).is_some(), "{nice}");
        }
        assert!(crossplatform_for_nice(20).is_none());
    }

    #[test]
    fn a_thread_takes_a_lower_nice_and_an_ordinary_thread_goes_back_to_zero() {
        let got = std::thread::spawn(|| {
            let allowed = set_nice(-5).is_ok();
            let lowered = current_nice();
            ordinary();
            (allowed, lowered, current_nice())
        })
        .join()
        .unwrap();
        if !got.0 {
            return skip_unprivileged("no CAP_SYS_NICE for a negative nice value");
        }
        assert_eq!(got, (true, Some(-5), Some(0)));
        // A thread may always raise its own.
        let raised = std::thread::spawn(|| (set_nice(3), current_nice()))
            .join()
            .unwrap();
        assert_eq!(raised, (Ok(()), Some(3)));
    }

    /// The calling thread's scheduling policy and priority (`sched_getscheduler` through
    /// `/proc/thread-self/stat`'s fields 41 and 40): `(policy, rt_priority)`.
    fn current() -> Option<(u32, u32)> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        let after_comm = &stat[stat.rfind(')')? + 1..];
        // After `comm` the fields start at 3 (state): rt_priority is field 40, policy field 41.
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        let rt_priority = fields.get(40 - 3)?.parse().ok()?;
        let policy = fields.get(41 - 3)?.parse().ok()?;
        Some((policy, rt_priority))
    }

    #[test]
    fn a_thread_takes_the_priority_where_the_process_may() {
        // Root has CAP_SYS_NICE (CI runs as root): there it must work.
        let allowed = prepare(1);
        if allowed.is_err() {
            return skip_unprivileged(
                "neither RLIMIT_RTPRIO nor CAP_SYS_NICE allows SCHED_FIFO here",
            );
        }
        allowed.unwrap();
        let got = std::thread::spawn(|| enter(1).map(|()| current()))
            .join()
            .unwrap();
        // SCHED_FIFO is policy 1.
        assert_eq!(got.unwrap(), Some((1, 1)));
        // The calling thread is left as it was.
        assert_eq!(current().map(|(policy, _)| policy), Some(0));
    }

    #[test]
    fn the_control_threads_run_below_the_loops() {
        assert_eq!(control_priority(10), 9);
        assert_eq!(control_priority(1), 1);
        assert_eq!(control_priority(99), 98);
    }

    #[test]
    fn errors_name_the_key_and_what_allows_it() {
        let e = RealtimeError::NotAllowed {
            priority: 10,
            source: nix::Error::EPERM,
        };
        let text = e.to_string();
        assert!(text.starts_with("daemon.realtime_priority = 10"), "{text}");
        assert!(
            text.contains("CAP_SYS_NICE") && text.contains("LimitRTPRIO=10"),
            "{text}"
        );
    }
}
