//! A bounded single-producer single-consumer ring of `u64` tokens (frame indices, packet handles)
//! for handing packets between cores without locks (Carousel §5.3: one shaper per core "allows
//! lock-free queuing of packets to a NIC instance on a specific core").
//!
//! Lamport's ring over atomics only, no `unsafe`: each side owns its monotonic index on its own
//! cache line and caches the other's. Nothing is dropped: [`Producer::push`] hands a token back
//! when the ring is full, [`Producer::push_batch`] says how many it took, [`Producer::refused`]
//! counts refusals. Hand-written rather than `rtrb` so that it runs under loom without `unsafe`
//! (CONTRIBUTING.md, Dependencies; §13). The memory orderings: `docs/design/carousel.md`.

use crate::sync::{spin_hint, Arc, AtomicU64, Ordering, Padded};

/// The shared part of a ring.
#[derive(Debug)]
struct Ring {
    slots: Box<[AtomicU64]>,
    mask: u64,
    /// Next slot to read (consumer's).
    head: Padded<AtomicU64>,
    /// Next slot to write (producer's).
    tail: Padded<AtomicU64>,
}

/// Why a ring cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SpscError {
    /// The capacity is zero or not a power of two.
    #[error("ring capacity must be a power of two >= 1")]
    Capacity,
}

/// A ring of `capacity` tokens (a power of two), split into its two ends.
pub fn channel(capacity: usize) -> Result<(Producer, Consumer), SpscError> {
    if !capacity.is_power_of_two() {
        return Err(SpscError::Capacity);
    }
    let ring = Arc::new(Ring {
        slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        mask: capacity as u64 - 1,
        head: Padded(AtomicU64::new(0)),
        tail: Padded(AtomicU64::new(0)),
    });
    let producer = Producer {
        ring: Arc::clone(&ring),
        tail: 0,
        cached_head: 0,
        refused: 0,
    };
    let consumer = Consumer {
        ring,
        head: 0,
        cached_tail: 0,
    };
    Ok((producer, consumer))
}

/// The writing end; `Send`, one thread at a time (`&mut self`).
#[derive(Debug)]
pub struct Producer {
    ring: Arc<Ring>,
    /// Our copy of `ring.tail` (we are its only writer).
    tail: u64,
    /// Last `ring.head` seen.
    cached_head: u64,
    refused: u64,
}

impl Producer {
    /// Free slots, rereading the consumer's index if the cached one shows fewer than `want`.
    fn room(&mut self, want: u64) -> u64 {
        let cap = self.ring.mask + 1;
        let mut free = cap - self.tail.wrapping_sub(self.cached_head);
        if free < want {
            self.cached_head = self.ring.head.0.load(Ordering::Acquire);
            free = cap - self.tail.wrapping_sub(self.cached_head);
        }
        free
    }

    /// Appends `token`, or hands it back if the ring is full.
    pub fn push(&mut self, token: u64) -> Result<(), u64> {
        if self.room(1) == 0 {
            self.refused += 1;
            return Err(token);
        }
        self.ring.slots[(self.tail & self.ring.mask) as usize].store(token, Ordering::Relaxed);
        self.tail = self.tail.wrapping_add(1);
        self.ring.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Appends a prefix of `tokens` with one publish and returns its length; the rest did not
    /// fit and stays with the caller (counted in [`Producer::refused`]).
    pub fn push_batch(&mut self, tokens: &[u64]) -> usize {
        let n = (tokens.len() as u64).min(self.room(tokens.len() as u64));
        for (i, t) in tokens[..n as usize].iter().enumerate() {
            let slot = (self.tail.wrapping_add(i as u64) & self.ring.mask) as usize;
            self.ring.slots[slot].store(*t, Ordering::Relaxed);
        }
        self.refused += tokens.len() as u64 - n;
        if n > 0 {
            self.tail = self.tail.wrapping_add(n);
            self.ring.tail.0.store(self.tail, Ordering::Release);
        }
        n as usize
    }

    /// Appends `token`, waiting (spinning) while the ring is full. For tests and cold paths.
    pub fn push_blocking(&mut self, token: u64) {
        while self.room(1) == 0 {
            spin_hint();
        }
        self.push(token).expect("room was checked");
    }

    /// Tokens refused because the ring was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The ring's capacity.
    pub fn capacity(&self) -> usize {
        self.ring.slots.len()
    }
}

/// The reading end; `Send`, one thread at a time (`&mut self`).
#[derive(Debug)]
pub struct Consumer {
    ring: Arc<Ring>,
    /// Our copy of `ring.head` (we are its only writer).
    head: u64,
    /// Last `ring.tail` seen.
    cached_tail: u64,
}

impl Consumer {
    /// Tokens ready, rereading the producer's index if the cached one shows fewer than `want`.
    fn ready(&mut self, want: u64) -> u64 {
        let mut ready = self.cached_tail.wrapping_sub(self.head);
        if ready < want {
            self.cached_tail = self.ring.tail.0.load(Ordering::Acquire);
            ready = self.cached_tail.wrapping_sub(self.head);
        }
        ready
    }

    /// Takes the oldest token, if any.
    pub fn pop(&mut self) -> Option<u64> {
        if self.ready(1) == 0 {
            return None;
        }
        let token = self.ring.slots[(self.head & self.ring.mask) as usize].load(Ordering::Relaxed);
        self.head = self.head.wrapping_add(1);
        self.ring.head.0.store(self.head, Ordering::Release);
        Some(token)
    }

    /// Takes up to `out.len()` of the oldest tokens in order with one release; returns how many.
    pub fn pop_batch(&mut self, out: &mut [u64]) -> usize {
        let n = (out.len() as u64).min(self.ready(out.len() as u64));
        for (i, o) in out[..n as usize].iter_mut().enumerate() {
            let slot = (self.head.wrapping_add(i as u64) & self.ring.mask) as usize;
            *o = self.ring.slots[slot].load(Ordering::Relaxed);
        }
        if n > 0 {
            self.head = self.head.wrapping_add(n);
            self.ring.head.0.store(self.head, Ordering::Release);
        }
        n as usize
    }

    /// Tokens waiting, as of a fresh look at the producer's index.
    pub fn len(&mut self) -> usize {
        self.ready(u64::MAX) as usize
    }

    /// Whether no token waits, as of a fresh look at the producer's index.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// The ring's capacity.
    pub fn capacity(&self) -> usize {
        self.ring.slots.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
