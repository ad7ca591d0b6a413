//! # metronome-io
//!
//! Everything around the core that touches the operating system (CONTRIBUTING.md §1): the
//! monotonic clock ([`clock`], [`MonotonicClock`]); the packet I/O seam the daemon's loop drives
//! ([`port`], [`PacketPort`], [`RxFrame`], [`PortCounters`], [`PortError`]); the [`FramePool`] of
//! preallocated frame buffers in two size classes, each slot with its virtio-net header
//! ([`frame_pool`]); Linux AF_PACKET ([`afpacket`], [`AfPacketPort`], with GSO/GRO super-frames
//! by [`AfPacketConfig::vnet_hdr`]); super-frames cut into pieces sent by the port ([`piece`],
//! [`FramePool::set_cut`]); an in-memory port for tests and benchmarks ([`memory_port`],
//! [`MemoryPort`]); interface offloads on or off as `ethtool -K` does ([`offload`]); one thread's
//! on-CPU time ([`thread_cpu`], [`ThreadCpu`]). All `unsafe` code (libc calls, the ring mapping)
//! lives in one private module, `sys`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod afpacket;
pub mod clock;
pub mod frame_pool;
pub mod memory_port;
pub mod netns;
pub mod offload;
pub mod piece;
pub mod port;
mod sys;
pub mod thread_cpu;

pub use afpacket::{rejoin_group, AfPacketConfig, AfPacketPort, Fanout, RxMode, RECV_BATCH};
pub use clock::MonotonicClock;
pub use frame_pool::{FramePool, StoreError, DEFAULT_SLOT_SIZE, GSO_SLOT_SIZE, JUMBO_SLOT_SIZE};
pub use memory_port::{MemoryPort, MemoryPortConfig};
pub use offload::Offload;
pub use piece::{CutCounters, SlotCut, TxPiece};
pub use port::{wait_readable, PacketPort, PortCapabilities, PortCounters, PortError, RxFrame};
pub use thread_cpu::ThreadCpu;
