//! # metronome-io
//!
//! Everything around the core that touches the operating system (CONTRIBUTING.md §1):
//!
//! * [`clock`]: the real monotonic [`MonotonicClock`].
//! * [`port`]: the packet I/O seam, [`PacketPort`], that the daemon loop drives, with its
//!   [`RxFrame`], [`PortCounters`] and [`PortError`].
//! * [`frame_pool`]: the [`FramePool`] of preallocated frame buffers that received frames are
//!   copied into, in two size classes (MTU frames and, for `PACKET_VNET_HDR`, 64 KiB
//!   super-frames), each slot with its virtio-net header; the shaper queues their `u32` ids as
//!   `PacketRef::id`.
//! * [`afpacket`]: [`AfPacketPort`], Linux AF_PACKET with `recvmmsg` batches or a TPACKET_V3
//!   memory-mapped RX ring, and `sendmmsg` TX (packet(7),
//!   Documentation/networking/packet_mmap.rst); with [`AfPacketConfig::vnet_hdr`], GSO/GRO
//!   super-frames with their virtio-net header, and [`AfPacketPort::send_pieces`] for pieces cut
//!   from them.
//! * [`piece`]: super-frames cut into pieces, the cut kept with the pool slot
//!   ([`FramePool::set_cut`]) and the pieces sent by the port itself ([`PacketPort::send`]).
//! * [`memory_port`]: [`MemoryPort`], an in-memory port for tests and benchmarks.
//! * [`offload`]: turning an interface's offloads (TSO, GSO, GRO, checksum) on or off, as
//!   `ethtool -K` does.
//! * [`thread_cpu`]: [`ThreadCpu`], the on-CPU time of one thread (`/proc/thread-self/schedstat`).
//!
//! All `unsafe` code (libc calls, the ring mapping) lives in one private module, `sys`.
//!
//! ```
//! use metronome_io::{FramePool, MemoryPort, MemoryPortConfig, PacketPort, RxFrame};
//!
//! let mut port = MemoryPort::new(MemoryPortConfig::default());
//! let mut pool = FramePool::new(256, 2048);
//! port.inject(&[0xab; 64]).unwrap();
//!
//! let mut batch = [RxFrame::default(); 32];
//! let n = port.recv(&mut pool, &mut batch).unwrap();
//! assert_eq!(n, 1);
//! assert_eq!(pool.frame(batch[0].id), &[0xab; 64][..]);
//!
//! // ... the shaper holds batch[0].id for a while, then releases it:
//! assert_eq!(port.send(&mut pool, &[batch[0].id]).unwrap(), 1);
//! assert_eq!(port.pop_sent().unwrap(), vec![0xab; 64]);
//! assert_eq!(pool.in_use(), 0);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod afpacket;
pub mod clock;
pub mod frame_pool;
pub mod memory_port;
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
