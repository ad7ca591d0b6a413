//! The only module with `unsafe` code: thin libc wrappers for AF_PACKET sockets, the TPACKET_V3
//! receive ring, `sendmmsg` and `poll`.
//!
//! References: packet(7); the kernel's Documentation/networking/packet_mmap.rst ("TPACKET_V3
//! example"); uapi `linux/if_packet.h` for the block and frame headers (via `libc`). No maintained
//! crate wraps TPACKET_V3 (CONTRIBUTING.md, Dependencies), so the ring walk is written here, with
//! every offset the kernel hands us checked against the block before it is dereferenced.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Most frames handed to one `sendmmsg` call, 64: the batch of the plain `recvmmsg`/`sendmmsg`
/// forwarder the daemon's throughput is measured against (`crates/testbed/src/forwarder.rs`;
/// docs/results/daemon.md, "Throughput ceiling").
pub(crate) const SEND_BATCH: usize = 64;

/// Offset of the `sockaddr_ll` after a `tpacket3_hdr`: `TPACKET_ALIGN(sizeof(tpacket3_hdr))`.
const SLL_OFFSET: usize = (size_of::<libc::tpacket3_hdr>() + libc::TPACKET_ALIGNMENT - 1)
    & !(libc::TPACKET_ALIGNMENT - 1);

/// The interface index of `name`, or the OS error (`ENODEV` if there is none).
pub(crate) fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// A non-blocking, close-on-exec AF_PACKET SOCK_RAW socket for `protocol` (host order; 0
/// receives nothing until bound to a protocol).
pub(crate) fn packet_socket(protocol: u16) -> io::Result<OwnedFd> {
    let ty = libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::socket(libc::AF_PACKET, ty, i32::from(protocol.to_be())) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, SOL_PACKET, name, value)`.
pub(crate) fn set_packet_opt<T: Copy>(fd: &OwnedFd, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of `size_of::<T>()` bytes; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads (and thereby resets) the socket's `PACKET_STATISTICS` (TPACKET_V3 layout).
pub(crate) fn packet_stats(fd: &OwnedFd) -> io::Result<libc::tpacket_stats_v3> {
    let mut st = MaybeUninit::<libc::tpacket_stats_v3>::zeroed();
    let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `st` is a writable buffer of `len` bytes; `len` is a valid in/out length.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            st.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised plain integers, possibly overwritten by the kernel.
    Ok(unsafe { st.assume_init() })
}

/// `getsockopt(fd, SOL_PACKET, PACKET_FANOUT)`: the socket's fanout group, `id | type << 16 |
/// flags << 24` (packet(7)); 0 when it is in none.
pub(crate) fn packet_fanout(fd: &OwnedFd) -> io::Result<u32> {
    let mut v: u32 = 0;
    let mut len = size_of::<u32>() as libc::socklen_t;
    // SAFETY: `v` is a writable u32 and `len` its size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut v as *mut u32).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// Binds a packet socket to interface `ifindex` and `protocol` (host order).
pub(crate) fn bind_packet(fd: &OwnedFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain integers; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a live sockaddr_ll and the length passed is its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// poll(2) for `POLLIN` on `fd` for at most `timeout_ms` (-1: forever). `EINTR` is `Ok(false)`.
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1.
    let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(rc > 0 && p.revents & (libc::POLLIN | libc::POLLERR) != 0)
}

/// Most buffers one message of [`send_msgs`] / [`recv_frames`] gathers or scatters: a
/// virtio-net header, headers (or a pool slot) and a payload (or the overflow of a super-frame).
pub(crate) const MSG_PARTS: usize = 3;

/// `sendmmsg(fd, msgs, MSG_DONTWAIT)` on a bound packet socket: one message per entry of `msgs`,
/// gathered from its (up to [`MSG_PARTS`], possibly empty) buffers in order, no address (the
/// bound interface is used). At most [`SEND_BATCH`] messages. Returns how many the kernel took;
/// an error means it took none.
pub(crate) fn send_msgs(fd: &OwnedFd, msgs: &[[&[u8]; MSG_PARTS]]) -> io::Result<usize> {
    let n = msgs.len().min(SEND_BATCH);
    // SAFETY: iovec and mmsghdr are plain integers and pointers; all-zero is valid (null
    // pointers, zero lengths).
    let mut iov: [[libc::iovec; MSG_PARTS]; SEND_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        for (v, part) in iov[i].iter_mut().zip(&msgs[i]) {
            v.iov_base = part.as_ptr() as *mut libc::c_void;
            v.iov_len = part.len();
        }
        hdrs[i].msg_hdr.msg_iov = iov[i].as_mut_ptr();
        hdrs[i].msg_hdr.msg_iovlen = MSG_PARTS;
    }
    // SAFETY: `hdrs[..n]` point at `iov[..n]`, which point at the caller's live buffers; the
    // kernel only reads the buffers and writes `msg_len`. All outlive the call.
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// One frame as the ring holds it, borrowed from a block the caller currently owns.
pub(crate) struct RingFrame<'a> {
    /// Frame bytes from the MAC header, `tp_snaplen` long.
    pub data: &'a [u8],
    /// Length on the wire (`tp_len`); more than `data.len()` if the ring truncated the frame.
    pub wire_len: u32,
    /// `tp_status` (`TP_STATUS_*` flags).
    pub status: u32,
    /// 802.1Q TCI the kernel stripped, valid if `status & TP_STATUS_VLAN_VALID`.
    pub vlan_tci: u16,
    /// TPID of that tag, valid if `status & TP_STATUS_VLAN_TPID_VALID`.
    pub vlan_tpid: u16,
    /// `sll_pkttype` (`PACKET_HOST`, `PACKET_OUTGOING`, ...).
    pub pkttype: u8,
    /// The kernel's receive time, `tp_sec`/`tp_nsec` (`CLOCK_REALTIME`), nanoseconds.
    pub stamp_ns: u64,
}

/// Where the reader is inside the block it holds.
#[derive(Clone, Copy)]
struct Cursor {
    /// Frames left in the block, the current one included.
    left: u32,
    /// Byte offset of the current frame's `tpacket3_hdr` in the block.
    offset: usize,
}

/// A mapped TPACKET_V3 RX ring: `block_count` blocks of `block_size` bytes, consumed in order.
/// A block belongs to user space from `TP_STATUS_USER` until [`RxRing::advance`] passes its last
/// frame and writes `TP_STATUS_KERNEL` back (packet_mmap.rst, "TPACKET_V3 example").
pub(crate) struct RxRing {
    base: NonNull<u8>,
    map_len: usize,
    block_size: usize,
    block_count: usize,
    /// The block read next (or being read).
    block: usize,
    /// Set while the reader holds `block`.
    held: Option<Cursor>,
}

// SAFETY: the ring is a private memory mapping reached only through `&mut RxRing`; moving it to
// another thread moves the only access path with it.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Maps the ring of `fd`, which must already have `PACKET_RX_RING` set with these sizes.
    pub(crate) fn map(fd: &OwnedFd, block_size: usize, block_count: usize) -> io::Result<Self> {
        let map_len = block_size * block_count;
        // SAFETY: a fresh shared mapping of the socket's ring; the kernel checks the length
        // against the ring it set up. No existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(RxRing {
            base,
            map_len,
            block_size,
            block_count,
            block: 0,
            held: None,
        })
    }

    /// Pointer to the start of block `i` (< `block_count`).
    fn block_ptr(&self, i: usize) -> *mut u8 {
        // SAFETY: `i < block_count`, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(i * self.block_size) }
    }

    /// The block's `block_status` word, shared with the kernel.
    fn status_word(&self, i: usize) -> &AtomicU32 {
        let off = std::mem::offset_of!(libc::tpacket_block_desc, hdr);
        // SAFETY: `block_status` is the first u32 of `hdr` in the block descriptor at the start
        // of the page-aligned block; the kernel updates it concurrently, hence atomic access.
        unsafe { &*self.block_ptr(i).add(off).cast::<AtomicU32>() }
    }

    /// Takes the next block if the kernel has handed it over. Returns `false` if it has not.
    fn acquire(&mut self) -> bool {
        let status = self.status_word(self.block).load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return false;
        }
        // SAFETY: the block is ours (TP_STATUS_USER, acquired above) and starts with a
        // `tpacket_block_desc`; read unaligned-safe by value.
        let desc = unsafe {
            self.block_ptr(self.block)
                .cast::<libc::tpacket_block_desc>()
                .read()
        };
        // SAFETY: TPACKET_V3 blocks always carry the `bh1` variant.
        let bh1 = unsafe { desc.hdr.bh1 };
        self.held = Some(Cursor {
            left: bh1.num_pkts,
            offset: bh1.offset_to_first_pkt as usize,
        });
        true
    }

    /// Hands the held block back to the kernel and moves to the next one.
    fn release(&mut self) {
        self.status_word(self.block)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.held = None;
        self.block = (self.block + 1) % self.block_count;
    }

    /// The frame at the cursor, acquiring the next block if needed. `Err(())` means the block's
    /// headers are inconsistent: the caller counts it and calls [`RxRing::skip_block`].
    pub(crate) fn peek(&mut self) -> Option<Result<RingFrame<'_>, ()>> {
        let offset = loop {
            match self.held {
                None => {
                    if !self.acquire() {
                        return None;
                    }
                }
                Some(c) if c.left == 0 => self.release(),
                Some(c) => break c.offset,
            }
        };
        Some(self.frame_at(offset))
    }

    /// Reads and checks the frame header at `offset` in the held block.
    fn frame_at(&self, offset: usize) -> Result<RingFrame<'_>, ()> {
        let hdr_end = offset
            .checked_add(SLL_OFFSET + size_of::<libc::sockaddr_ll>())
            .ok_or(())?;
        if hdr_end > self.block_size {
            return Err(());
        }
        let block = self.block_ptr(self.block);
        // SAFETY: the header lies inside the held block (checked above); read by value.
        let h = unsafe {
            block
                .add(offset)
                .cast::<libc::tpacket3_hdr>()
                .read_unaligned()
        };
        // SAFETY: the sockaddr_ll lies inside the block (checked above).
        let sll = unsafe {
            block
                .add(offset + SLL_OFFSET)
                .cast::<libc::sockaddr_ll>()
                .read_unaligned()
        };
        let start = offset + h.tp_mac as usize;
        let end = start.checked_add(h.tp_snaplen as usize).ok_or(())?;
        if end > self.block_size {
            return Err(());
        }
        // SAFETY: `start..end` lies inside the held block, which the kernel does not write until
        // it is released; the slice borrows `self`, so it cannot outlive the hold.
        let data = unsafe { std::slice::from_raw_parts(block.add(start), end - start) };
        Ok(RingFrame {
            data,
            wire_len: h.tp_len,
            status: h.tp_status,
            vlan_tci: h.hv1.tp_vlan_tci as u16,
            vlan_tpid: h.hv1.tp_vlan_tpid,
            pkttype: sll.sll_pkttype,
            stamp_ns: u64::from(h.tp_sec) * 1_000_000_000 + u64::from(h.tp_nsec),
        })
    }

    /// Moves past the frame returned by [`RxRing::peek`], releasing the block after its last frame.
    pub(crate) fn advance(&mut self) {
        let Some(c) = self.held else { return };
        let block = self.block_ptr(self.block);
        let next = if c.offset + size_of::<libc::tpacket3_hdr>() <= self.block_size {
            // SAFETY: the header lies inside the held block (checked just above).
            unsafe {
                block
                    .add(c.offset)
                    .cast::<libc::tpacket3_hdr>()
                    .read_unaligned()
                    .tp_next_offset
            }
        } else {
            0
        };
        let left = c.left - 1;
        if left == 0 || next == 0 {
            self.release();
        } else {
            self.held = Some(Cursor {
                left,
                offset: c.offset + next as usize,
            });
        }
    }

    /// Gives up the rest of the held block (after a header error).
    pub(crate) fn skip_block(&mut self) {
        if self.held.is_some() {
            self.release();
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `map`; no slice into it survives, since
        // every `RingFrame` borrows `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

/// What `recvmmsg` said about one received frame.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvMeta {
    /// Bytes written into the buffer.
    pub len: usize,
    /// The kernel cut the frame short (`MSG_TRUNC`: longer than its buffer).
    pub truncated: bool,
    /// `tp_status` of the frame's `PACKET_AUXDATA` (`TP_STATUS_*`), 0 without one.
    pub status: u32,
    /// 802.1Q TCI the kernel stripped, valid if `status & TP_STATUS_VLAN_VALID`.
    pub vlan_tci: u16,
    /// TPID of that tag, valid if `status & TP_STATUS_VLAN_TPID_VALID`.
    pub vlan_tpid: u16,
}

/// Control buffer of one message: room for one `PACKET_AUXDATA` cmsg (`CMSG_SPACE(20)` is 40
/// bytes on 64-bit Linux), aligned like a `cmsghdr`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; 64]);

/// `recvmmsg(fd, MSG_DONTWAIT)` into `bufs` (one message per entry, scattered over its up to
/// [`MSG_PARTS`] buffers in order; at most [`SEND_BATCH`] messages), writing what it learnt of
/// each frame to `meta` (its `PACKET_AUXDATA` when the socket has that option on). Returns how
/// many messages arrived; 0 when none was waiting (`EAGAIN`).
pub(crate) fn recv_frames(
    fd: &OwnedFd,
    bufs: &mut [[&mut [u8]; MSG_PARTS]],
    meta: &mut [RecvMeta],
) -> io::Result<usize> {
    let n = bufs.len().min(meta.len()).min(SEND_BATCH);
    // SAFETY: iovec and mmsghdr are plain integers and pointers; all-zero is valid.
    let mut iov: [[libc::iovec; MSG_PARTS]; SEND_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; SEND_BATCH] = unsafe { std::mem::zeroed() };
    let mut control = [CmsgBuf([0; 64]); SEND_BATCH];
    for i in 0..n {
        for (v, part) in iov[i].iter_mut().zip(bufs[i].iter_mut()) {
            v.iov_base = part.as_mut_ptr().cast();
            v.iov_len = part.len();
        }
        msgs[i].msg_hdr.msg_iov = iov[i].as_mut_ptr();
        msgs[i].msg_hdr.msg_iovlen = MSG_PARTS;
        msgs[i].msg_hdr.msg_control = control[i].0.as_mut_ptr().cast();
        msgs[i].msg_hdr.msg_controllen = control[i].0.len();
    }
    // SAFETY: `msgs[..n]` point at `iov[..n]` (the caller's buffers, live and exclusively
    // borrowed) and at `control[..n]`, all outliving the call; the kernel writes at most
    // `iov_len` / `msg_controllen` bytes into them and fills `msg_len`, `msg_flags` and
    // `msg_controllen`. A null timeout with MSG_DONTWAIT returns what is there.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
            _ => Err(e),
        };
    }
    let got = rc as usize;
    for i in 0..got {
        let hdr = &msgs[i].msg_hdr;
        let mut m = RecvMeta {
            len: msgs[i].msg_len as usize,
            truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
            ..RecvMeta::default()
        };
        // SAFETY: `hdr` is a message header the kernel just filled, whose control buffer
        // (`control[i]`, live) holds `msg_controllen` valid bytes; CMSG_FIRSTHDR / CMSG_NXTHDR
        // stay within it and return null at its end.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(hdr) };
        while !c.is_null() {
            // SAFETY: `c` is non-null and points at a complete cmsghdr inside the buffer.
            let cm = unsafe { &*c };
            let want = size_of::<libc::tpacket_auxdata>();
            if cm.cmsg_level == libc::SOL_PACKET
                && cm.cmsg_type == libc::PACKET_AUXDATA
                && cm.cmsg_len as usize >= unsafe { libc::CMSG_LEN(want as u32) } as usize
            {
                // SAFETY: the cmsg carries at least a tpacket_auxdata (length checked); the
                // data may be unaligned, so it is read unaligned.
                let aux: libc::tpacket_auxdata =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
                m.status = aux.tp_status;
                m.vlan_tci = aux.tp_vlan_tci;
                m.vlan_tpid = aux.tp_vlan_tpid;
            }
            // SAFETY: as for CMSG_FIRSTHDR.
            c = unsafe { libc::CMSG_NXTHDR(hdr, c) };
        }
        meta[i] = m;
    }
    Ok(got)
}

/// `setsockopt(fd, SOL_SOCKET, SO_MARK, mark)`: the `skb->mark` of every packet the socket
/// sends (needs CAP_NET_ADMIN).
pub(crate) fn set_mark(fd: &OwnedFd, mark: u32) -> io::Result<()> {
    // SAFETY: `mark` is a live u32 and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const u32).cast(),
            size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt(fd, SOL_SOCKET, SO_ATTACH_BPF, program)`: the loaded BPF socket filter
/// `program` runs for every frame before the socket queues it.
pub(crate) fn attach_bpf(fd: &OwnedFd, program: RawFd) -> io::Result<()> {
    // SAFETY: `program` is a live c_int and the length passed is its size; the kernel checks
    // that it names a socket filter program.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_BPF,
            (&program as *const RawFd).cast(),
            size_of::<RawFd>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(fd, SOL_SOCKET, SO_MARK)`: what [`set_mark`] set (the tests check it).
#[cfg(test)]
pub(crate) fn mark(fd: &OwnedFd) -> io::Result<u32> {
    let mut mark = 0u32;
    let mut len = size_of::<u32>() as libc::socklen_t;
    // SAFETY: `mark` and `len` are live and `len` is `mark`'s size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mut mark as *mut u32).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(mark)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, bytes)` (root may exceed `rmem_max`), falling
/// back to `SO_RCVBUF` (capped by `net.core.rmem_max`) without CAP_NET_ADMIN.
pub(crate) fn set_rcvbuf(fd: &OwnedFd, bytes: libc::c_int) -> io::Result<()> {
    /// `SO_RCVBUFFORCE` of uapi `asm-generic/socket.h`.
    const SO_RCVBUFFORCE: libc::c_int = 33;
    for opt in [SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `bytes` is a live c_int and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
    }
    Err(io::Error::last_os_error())
}

/// `struct ethtool_value` of uapi `linux/ethtool.h`: a command and one 32-bit value.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Issues the ethtool ioctl `cmd` (an `ETHTOOL_S*` or `ETHTOOL_G*` command taking an
/// `ethtool_value`) with `data` on interface `ifname` of the calling thread's network namespace,
/// as `ethtool -K` / `ethtool -k` do (`SIOCETHTOOL`, uapi `linux/sockios.h`). Returns the
/// value's `data` after the call (what a get-command read).
pub(crate) fn ethtool_value(ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let name = ifname.as_bytes();
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: a plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor this function owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: ifreq is plain integers, arrays and a union of them; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(name) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: `ifr` names the interface (NUL-terminated: zeroed beyond the name) and points at
    // `value`, both live for the call; SIOCETHTOOL reads the command and value from them.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut ifr) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value.data)
    }
}
