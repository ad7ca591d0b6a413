//! Receive and send with `PACKET_VNET_HDR` (packet(7); net/packet/af_packet.c `packet_rcv_vnet`,
//! `packet_snd_vnet_parse`).
//!
//! Each received message is scattered over the header, a small pool slot and an overflow buffer
//! (or, while super-frames arrive, the tail of a free large slot), so a small frame lands in place
//! and a super-frame is copied at most once ([`FramePool::alloc_large`]; none free:
//! `rx_no_large_slot`). Frames above 64 KiB (BIG TCP, [`MAX_IP_PACKET_BYTES`]) are dropped and
//! counted; a re-inserted VLAN tag moves `csum_start`; every sent message starts with its header
//! ([`FramePool::vnet`], [`AfPacketPort::send_pieces`]). The buffers and every case:
//! ARCHITECTURE.md, "Super-frames with `PACKET_VNET_HDR`".

use super::{
    alloc_batch, finish_tag, os_error, rx_tag, stripped_vlan, AfPacketPort, RxTag, RECV_BATCH,
};
use crate::frame_pool::{FramePool, GSO_SLOT_SIZE};
use crate::piece::TxPiece;
use crate::port::{PortError, RxFrame};
use crate::sys::{self, MSG_PARTS, SEND_BATCH};
use metronome_packet::{link_layer, VnetHdr, MAX_IP_PACKET_BYTES, VNET_HDR_LEN};

/// Bytes from the IP header to the end of a `len`-byte frame whose first bytes are in `head`:
/// `len` less the Ethernet header and the VLAN tags still in the frame; `0` when the link
/// layer does not parse (the frame is left to the parser).
fn ip_packet_len(head: &[u8], len: usize) -> usize {
    match link_layer(&head[..len.min(head.len())]) {
        Ok((_, ip_offset, _)) => len.saturating_sub(ip_offset),
        Err(_) => 0,
    }
}

/// The receive overflow buffers of a `vnet_hdr` port: one [`GSO_SLOT_SIZE`] region per message
/// of a batch.
pub(super) struct VnetRx {
    overflow: Vec<u8>,
    /// The last receive that got frames had one longer than a small slot: receive into large
    /// slots.
    superframes: bool,
}

impl VnetRx {
    /// The buffers of a port that receives (`receive`), none for a transmit-only port.
    pub(super) fn new(receive: bool) -> Self {
        let len = if receive {
            RECV_BATCH * GSO_SLOT_SIZE
        } else {
            0
        };
        VnetRx {
            overflow: vec![0; len],
            superframes: false,
        }
    }
}

impl AfPacketPort {
    /// [`crate::PacketPort::recv`] with `vnet_hdr`: see the module docs.
    pub(super) fn recv_vnet(
        &mut self,
        pool: &mut FramePool,
        out: &mut [RxFrame],
    ) -> Result<usize, PortError> {
        let Some(vnet) = self.vnet.as_mut() else {
            return Ok(0);
        };
        let (ids, want) = alloc_batch(pool, out.len().min(self.rx_want));
        if want == 0 {
            return Ok(0);
        }
        let slot_size = pool.slot_size();
        let overflow_len = GSO_SLOT_SIZE.saturating_sub(slot_size);
        // Large slots taken for this call, the tail of each one message's third buffer; with
        // the small ids in front, `all` is in increasing order (small ids are below large ids).
        let mut all = [0u32; 2 * RECV_BATCH];
        all[..want].copy_from_slice(&ids[..want]);
        let mut standby = 0;
        if vnet.superframes && pool.large_slot_size() >= GSO_SLOT_SIZE {
            while standby < want {
                let Some(id) = pool.alloc_large() else { break };
                all[want + standby] = id;
                standby += 1;
            }
            all[want..want + standby].sort_unstable();
        }
        let larges = &all[want..want + standby];
        let mut used = [false; RECV_BATCH];
        let mut headers = [[0u8; VNET_HDR_LEN]; RECV_BATCH];
        let mut meta = [sys::RecvMeta::default(); RECV_BATCH];
        let got = {
            let mut bufs: [[&mut [u8]; MSG_PARTS]; RECV_BATCH] =
                std::array::from_fn(|_| std::array::from_fn(|_| &mut [][..]));
            let mut slots = pool.slots_mut(&all[..want + standby]);
            for (buf, h) in bufs.iter_mut().zip(headers.iter_mut()).take(want) {
                *buf = [&mut h[..], slots.next().unwrap_or_default(), &mut []];
            }
            for buf in bufs.iter_mut().take(standby) {
                if let Some(large) = slots.next() {
                    buf[2] = &mut large[slot_size..GSO_SLOT_SIZE];
                }
            }
            let overflow = vnet.overflow.chunks_exact_mut(GSO_SLOT_SIZE);
            for (buf, over) in bufs.iter_mut().zip(overflow).take(want).skip(standby) {
                buf[2] = &mut over[..overflow_len];
            }
            sys::recv_frames(&self.rx_fd, &mut bufs[..want], &mut meta)
        };
        let free_standby = |pool: &mut FramePool, used: &[bool; RECV_BATCH]| {
            for (&id, &u) in larges.iter().zip(used) {
                if !u {
                    pool.free(id);
                }
            }
        };
        let got = match got {
            Ok(n) => {
                self.rx_want = super::next_recv_want(want, n);
                n
            }
            Err(e) => {
                for &id in &ids[..want] {
                    pool.free(id);
                }
                free_standby(pool, &used);
                if e.raw_os_error() == Some(libc::EINVAL) {
                    // The frame the kernel could not describe is gone; the rest stay queued.
                    self.counters.rx_vnet_errors += 1;
                    return Ok(0);
                }
                return Err(os_error(&self.ifname, "recvmmsg", e));
            }
        };
        let mut n = 0;
        let mut saw_superframe = false;
        for (i, &small) in ids[..want].iter().enumerate() {
            if i >= got {
                pool.free(small);
                continue;
            }
            let m = &meta[i];
            let parsed = VnetHdr::parse(&headers[i]);
            let (mut hdr, len) = match (m.truncated, parsed, m.len.checked_sub(VNET_HDR_LEN)) {
                (true, _, _) => {
                    self.counters.rx_gso_truncated += 1;
                    pool.free(small);
                    continue;
                }
                (false, Ok(hdr), Some(len)) => (hdr, len),
                _ => {
                    self.counters.rx_vnet_errors += 1;
                    pool.free(small);
                    continue;
                }
            };
            if len > MAX_IP_PACKET_BYTES
                && ip_packet_len(pool.slot_mut(small), len) > MAX_IP_PACKET_BYTES
            {
                // BIG TCP: the same policy as a frame the socket truncated.
                self.counters.rx_gso_truncated += 1;
                pool.free(small);
                continue;
            }
            let vlan = stripped_vlan(m.status, m.vlan_tpid, m.vlan_tci);
            let tag = rx_tag(self.config.origin_tags, vlan);
            if tag == RxTag::Untagged {
                // Dropped before any copy into a large slot (counted by `finish_tag`).
                finish_tag(pool, small, len, tag, &mut self.counters);
                pool.free(small);
                continue;
            }
            let reinsert = matches!(tag, RxTag::Reinsert(Some(_)));
            let need = len + if reinsert { 4 } else { 0 };
            saw_superframe |= need > slot_size;
            let id = if need <= slot_size {
                small
            } else if need > pool.large_slot_size() || pool.large_capacity() == 0 {
                self.counters.rx_oversize += 1;
                pool.free(small);
                continue;
            } else if let Some(&large) = larges.get(i) {
                // The frame's tail is in place: copy its head from the small slot.
                let pair = [small, large];
                {
                    let mut both = pool.slots_mut(&pair);
                    if let (Some(head), Some(dst)) = (both.next(), both.next()) {
                        let in_slot = len.min(slot_size);
                        dst[..in_slot].copy_from_slice(&head[..in_slot]);
                    }
                }
                used[i] = true;
                pool.free(small);
                large
            } else if let Some(large) = pool.alloc_large() {
                // Small ids are below large ids: `slots_mut` hands out both, in this order.
                let pair = [small, large];
                let copied = {
                    let mut both = pool.slots_mut(&pair);
                    match (both.next(), both.next()) {
                        (Some(head), Some(dst)) => {
                            let in_slot = len.min(slot_size);
                            dst[..in_slot].copy_from_slice(&head[..in_slot]);
                            let start = i * GSO_SLOT_SIZE;
                            let rest = &vnet.overflow[start..start + (len - in_slot)];
                            dst[in_slot..len].copy_from_slice(rest);
                            true
                        }
                        _ => false,
                    }
                };
                if !copied {
                    // Unreachable: both ids are allocated and in range.
                    self.counters.rx_oversize += 1;
                    pool.free(large);
                    pool.free(small);
                    continue;
                }
                pool.free(small);
                large
            } else {
                self.counters.rx_no_large_slot += 1;
                pool.free(small);
                continue;
            };
            let Some(len) = finish_tag(pool, id, len, tag, &mut self.counters) else {
                pool.free(id);
                continue;
            };
            if reinsert {
                if hdr.needs_csum() {
                    hdr.csum_start = hdr.csum_start.saturating_add(4);
                }
                if hdr.hdr_len != 0 {
                    hdr.hdr_len = hdr.hdr_len.saturating_add(4);
                }
            }
            pool.set_len(id, len);
            pool.set_vnet(id, hdr);
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += len as u64;
            out[n] = RxFrame {
                id,
                len: len as u32,
                // Sent back with its header, a NEEDS_CSUM frame is completed by the kernel or
                // the device: nothing for the caller to fill in.
                csum_not_ready: m.status & libc::TP_STATUS_CSUMNOTREADY != 0 && !hdr.needs_csum(),
                stamp_ns: 0,
            };
            n += 1;
        }
        free_standby(pool, &used);
        if n > 0 {
            vnet.superframes = saw_superframe;
        }
        Ok(n)
    }

    /// Sends `pieces` in order, each as one message of its virtio-net header, headers and
    /// payload (`sendmmsg` batches of up to 64; the payload is gathered by the kernel, not
    /// copied here). Needs [`super::AfPacketConfig::vnet_hdr`] ([`PortError::Config`]
    /// otherwise). Returns how many leading pieces were consumed: sent (`tx_packets`,
    /// `tx_bytes` counting headers and payload) or refused for good (`tx_errors`); the rest
    /// were not sent because the device was busy (`tx_busy`), to retry. On `Err` none was
    /// consumed. Never blocks.
    pub fn send_pieces(&mut self, pieces: &[TxPiece<'_>]) -> Result<usize, PortError> {
        if self.vnet.is_none() {
            return Err(PortError::Config {
                ifname: self.ifname.clone(),
                reason: "send_pieces needs a port opened with vnet_hdr",
            });
        }
        let mut done = 0;
        while done < pieces.len() {
            let batch = &pieces[done..pieces.len().min(done + SEND_BATCH)];
            let mut headers = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
            let mut msgs: [[&[u8]; MSG_PARTS]; SEND_BATCH] = [[&[]; MSG_PARTS]; SEND_BATCH];
            let mut gso = [false; SEND_BATCH];
            for ((h, g), p) in headers.iter_mut().zip(&mut gso).zip(batch) {
                *h = p.vnet.to_bytes();
                *g = p.vnet.is_gso();
            }
            for ((m, p), h) in msgs.iter_mut().zip(batch).zip(&headers) {
                *m = [&h[..], p.headers, p.payload];
            }
            let taken = self.tx.send(
                &msgs[..batch.len()],
                &gso[..batch.len()],
                &mut self.counters,
            );
            match taken {
                Ok(sent) => {
                    for p in &batch[..sent] {
                        self.counters.tx_packets += 1;
                        self.counters.tx_bytes += (p.headers.len() + p.payload.len()) as u64;
                    }
                    done += sent;
                    if sent == 0 {
                        self.counters.tx_busy += 1;
                        break;
                    }
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                        self.counters.tx_busy += 1;
                        break;
                    }
                    Some(
                        libc::EMSGSIZE | libc::EINVAL | libc::ENETDOWN | libc::ENXIO | libc::EFAULT,
                    ) => {
                        self.counters.tx_errors += 1;
                        done += 1;
                    }
                    _ if done > 0 => break,
                    _ => return Err(os_error(&self.ifname, "sendmmsg", e)),
                },
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_packet_length_skips_the_link_layer() {
        let mut head = [0u8; 64];
        head[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(ip_packet_len(&head, 65_549), MAX_IP_PACKET_BYTES);
        assert_eq!(ip_packet_len(&head, 65_550), MAX_IP_PACKET_BYTES + 1);
        // One tag still in the frame: 4 more bytes before the IP header.
        head[12..18].copy_from_slice(&[0x81, 0x00, 0, 7, 0x08, 0x00]);
        assert_eq!(ip_packet_len(&head, 65_553), MAX_IP_PACKET_BYTES);
        // No EtherType: left to the parser.
        assert_eq!(ip_packet_len(&head[..10], 70_000), 0);
    }
}
