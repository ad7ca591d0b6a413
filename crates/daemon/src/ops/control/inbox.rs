//! How an operation of the control socket reaches the shaping loops: one [`Inbox`] per loop
//! (the single loop, or each silo), an eventfd in the loop's `ppoll` set so that an idle loop
//! wakes at once, and a [`Ticket`] the control thread waits on until every loop applied it.
//!
//! The loop looks at its inbox at the top of every round ([`LiveEndpoint::poll`]): one atomic
//! load when nothing is pending. The queue's mutex is taken only when something is.

use crate::datapath::engine::{Engine, LiveError};
use crate::ops::config::ClassConfig;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration as StdDuration, Instant};

/// An operation on the engines' classes.
#[derive(Clone, Debug)]
pub enum LiveOp {
    /// [`Engine::add_class`].
    Add(ClassConfig),
    /// [`Engine::change_class`]; `rematch`: its match changed.
    Change {
        /// The class as it is now.
        class: ClassConfig,
        /// Whether its match changed.
        rematch: bool,
    },
    /// [`Engine::delete_class`].
    Delete(String),
}

/// What the loops did with one operation, shared by the control thread and the loops.
#[derive(Debug)]
pub struct Ticket {
    loops: usize,
    state: Mutex<TicketState>,
    done: Condvar,
}

#[derive(Debug)]
struct TicketState {
    left: usize,
    error: Option<LiveError>,
    last_applied: Option<Instant>,
}

impl Ticket {
    /// A ticket for `loops` loops.
    pub fn new(loops: usize) -> Arc<Ticket> {
        Arc::new(Ticket {
            loops,
            state: Mutex::new(TicketState {
                left: loops,
                error: None,
                last_applied: None,
            }),
            done: Condvar::new(),
        })
    }

    /// The loops it was posted to.
    pub fn loops(&self) -> usize {
        self.loops
    }

    fn finish(&self, result: Result<(), LiveError>) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.left = s.left.saturating_sub(1);
        s.last_applied = Some(Instant::now());
        if let Err(e) = result {
            s.error.get_or_insert(e);
        }
        self.done.notify_all();
    }

    /// Waits until every loop applied the operation, at most `timeout`: `Ok(when the last one
    /// did)`, `Err(Some(error))` when a loop refused it, `Err(None)` on the timeout.
    pub fn wait(&self, timeout: StdDuration) -> Result<Option<Instant>, Option<LiveError>> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (s, _) = self
            .done
            .wait_timeout_while(s, timeout, |s| s.left > 0)
            .unwrap_or_else(PoisonError::into_inner);
        match (&s.error, s.left) {
            (Some(e), _) => Err(Some(e.clone())),
            (None, 0) => Ok(s.last_applied),
            (None, _) => Err(None),
        }
    }
}

/// One loop's inbox.
#[derive(Debug)]
pub struct Inbox {
    queue: Mutex<Vec<(Arc<LiveOp>, Arc<Ticket>)>>,
    pending: AtomicBool,
    wake: EventFd,
}

impl Inbox {
    /// An empty inbox with its eventfd (non-blocking, close-on-exec).
    pub fn new() -> std::io::Result<Arc<Inbox>> {
        let wake = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(std::io::Error::from)?;
        Ok(Arc::new(Inbox {
            queue: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            wake,
        }))
    }

    /// Queues `op` for the loop and wakes it.
    pub fn post(&self, op: Arc<LiveOp>, ticket: Arc<Ticket>) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((op, ticket));
        self.pending.store(true, Ordering::Release);
        // Only fails when the counter would overflow: the loop is woken already.
        let _ = self.wake.write(1);
    }
}

/// A loop's end of its [`Inbox`]: applies what is posted to the loop's engine.
#[derive(Debug)]
pub struct LiveEndpoint {
    inbox: Arc<Inbox>,
    /// Silos sharing each class's rate: a class added or changed gets `rate / silos` here until
    /// the allocator publishes its shares (`crate::driver::silo`).
    silos: usize,
}

impl LiveEndpoint {
    /// The end of `inbox` for a loop among `silos` (1: the single loop).
    pub fn new(inbox: Arc<Inbox>, silos: usize) -> LiveEndpoint {
        LiveEndpoint {
            inbox,
            silos: silos.max(1),
        }
    }

    /// The descriptor the loop's `ppoll` waits on besides its ports.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.inbox.wake.as_fd()
    }

    /// Applies every posted operation to `engine` and frees the states of deleted classes that
    /// drained; returns how many operations it applied.
    pub fn poll(&mut self, engine: &mut Engine) -> usize {
        if engine.classes_draining() > 0 {
            engine.reap_drained();
        }
        if !self.inbox.pending.swap(false, Ordering::Acquire) {
            return 0;
        }
        // Read before taking the queue: a post after the take wakes the loop again.
        let _ = self.inbox.wake.read();
        let posted = std::mem::take(
            &mut *self
                .inbox
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (op, ticket) in &posted {
            ticket.finish(self.apply(engine, op));
        }
        posted.len()
    }

    /// Applies `op`. A reload may have put a class in force before its `add` arrives (or taken
    /// it out before its `del`): the add then sets its policy, the delete finds nothing to do.
    fn apply(&self, engine: &mut Engine, op: &LiveOp) -> Result<(), LiveError> {
        let (index, class) = match op {
            LiveOp::Add(class) => match engine.add_class(class) {
                Err(LiveError::Exists(_)) => (engine.change_class(class, true)?, class),
                other => (other?, class),
            },
            LiveOp::Change { class, rematch } => (engine.change_class(class, *rematch)?, class),
            LiveOp::Delete(name) => {
                return match engine.delete_class(name) {
                    Ok(_) | Err(LiveError::Unknown(_)) => Ok(()),
                    Err(e) => Err(e),
                };
            }
        };
        if let (Some(rate), true) = (class.policy.rate, self.silos > 1) {
            let share = metronome_core::Rate::from_bps((rate.bps() / self.silos as u64).max(1));
            engine.set_class_rate(index, share);
        }
        Ok(())
    }
}
