//! The exact-match cache in front of the tuple-space index ([`ExactCache`]), as Open vSwitch keeps
//! one in front of its classifier: the class the index found for a packet's exact fields, in a
//! direct-mapped table indexed by its flow hash, so a recent flow's packet costs one compare. Exact
//! (it never changes a class), invalidated by generation at every push and remove, no worse than
//! the index under hostile senders; [`CACHE_ENTRIES`] entries of 64 bytes. In full:
//! ARCHITECTURE.md, "The exact-match cache".

use crate::frame::IpPacket;
use metronome_core::{ClassId, FlowId};
use std::cell::Cell;

/// Entries of the cache: 4 096, a power of two (the slot is the flow hash's low bits). At 64
/// bytes each, 256 KiB, which the second-level cache of the machines this runs on holds;
/// enough for a few thousand active flows at a few per cent of slots shared.
pub const CACHE_ENTRIES: usize = 4096;

/// The fields of a packet the rules can read (see `super::rule::ClassRule::matches`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fields {
    tuple: crate::frame::FiveTuple,
    dscp: u8,
    origin: u16,
    has_ports: bool,
}

impl Fields {
    fn of(ip: &IpPacket) -> Fields {
        Fields {
            tuple: ip.tuple,
            dscp: ip.dscp,
            origin: ip.origin,
            has_ports: ip.has_ports,
        }
    }
}

/// One slot: a packet's fields, the class the index gave them, and the generation it was
/// asked in (0: empty).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Entry {
    fields: Fields,
    class: ClassId,
    generation: u32,
}

/// The cache (see the module docs). Its slots are `Cell`s: classifying takes the classifier
/// by shared reference, and a classifier belongs to one shaping thread.
#[derive(Clone, Debug)]
pub(super) struct ExactCache {
    slots: Box<[Cell<Option<Entry>>]>,
    generation: u32,
}

impl ExactCache {
    pub(super) fn new() -> ExactCache {
        ExactCache {
            slots: (0..CACHE_ENTRIES).map(|_| Cell::new(None)).collect(),
            generation: 1,
        }
    }

    /// The rules changed: every entry made before is stale.
    pub(super) fn invalidate(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            for slot in self.slots.iter() {
                slot.set(None);
            }
            self.generation = 1;
        }
    }

    /// The class of `ip` (of flow `flow`), from the cache or else from `find`, which the cache
    /// then keeps.
    #[inline]
    pub(super) fn class_of(
        &self,
        ip: &IpPacket,
        flow: FlowId,
        find: impl FnOnce() -> ClassId,
    ) -> ClassId {
        let fields = Fields::of(ip);
        let slot = &self.slots[flow.0 as usize & (CACHE_ENTRIES - 1)];
        if let Some(e) = slot.get() {
            if e.generation == self.generation && e.fields == fields {
                return e.class;
            }
        }
        let class = find();
        slot.set(Some(Entry {
            fields,
            class,
            generation: self.generation,
        }));
        class
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_64_bytes() {
        assert_eq!(std::mem::size_of::<Option<Entry>>(), 64);
    }
}
