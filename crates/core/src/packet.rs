//! Packet references: the small handle every queue holds instead of packet bytes.
//!
//! Carousel §5.2 keeps packets zero-copy: the timing wheel holds references, "in the order of 8 MB
//! of RAM for every one million packets outstanding". A [`PacketRef`] is 16 bytes: the caller's
//! index of the packet (a descriptor or buffer slot it owns), the wire length, the flow and the
//! class. The packet's EDT travels beside the handle into [`crate::EdtQueue::enqueue`]; the timing
//! wheels use it to place the handle and do not store it (a slot implies it to within one
//! granularity), which keeps the timing wheel near 18 bytes per queued packet, pool included.
//! Callers that need the exact EDT at release (a lateness histogram) keep it in their descriptor.

/// Identifies a flow (a 5-tuple, a connection, a destination: the caller decides).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u32);

/// Identifies a traffic class (a tenant, a VM, a configured class). A `u32`: a host shapes
/// tens of thousands of rate limiters (NicPic §1) and a daemon holds up to a million classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassId(pub u32);

impl ClassId {
    /// The id as an index into a per-class table (a `u32` widens to `usize` without loss on the
    /// 32- and 64-bit targets this workspace builds for).
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A reference to a packet the caller owns. 16 bytes, `Copy`: four `u32` fields and the `u16`
/// length, padded to the `u32` alignment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct PacketRef {
    /// The caller's index of the packet (descriptor, buffer slot, sequence number).
    pub id: u32,
    /// The flow the packet belongs to.
    pub flow: FlowId,
    /// Bytes on the wire, at most 65 535 (the IPv4 total-length limit; larger GSO segments are
    /// split by the caller before shaping).
    pub len: u16,
    /// The packet's class.
    pub class: ClassId,
}

impl PacketRef {
    /// A reference to packet `id` of `flow` and `class`, `len` bytes long.
    pub const fn new(id: u32, flow: FlowId, class: ClassId, len: u16) -> Self {
        PacketRef {
            id,
            flow,
            len,
            class,
        }
    }
}

/// Size of a [`PacketRef`] in bytes (checked at compile time).
pub const PACKET_REF_BYTES: usize = 16;
const _: () = assert!(core::mem::size_of::<PacketRef>() == PACKET_REF_BYTES);
