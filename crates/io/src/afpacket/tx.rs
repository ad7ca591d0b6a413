//! The transmit side of an [`AfPacketPort`](super::AfPacketPort): `sendmmsg` batches from the
//! frame pool, with a second socket for GSO frames the bypass path cannot take.

use crate::frame_pool::FramePool;
use crate::port::PortCounters;
use crate::sys::{self, MSG_PARTS, SEND_BATCH};
use metronome_packet::VNET_HDR_LEN;
use std::io;
use std::os::fd::OwnedFd;

/// The transmit side of a port: the bound socket (with `PACKET_QDISC_BYPASS` when configured)
/// and, for a `vnet_hdr` port with the bypass, a second bound socket without it.
///
/// Why two: a GSO frame sent on a bypass socket goes to `__dev_direct_xmit` (net/core/dev.c),
/// which runs `validate_xmit_skb_list` and drops the frame if that replaced it, i.e. if the
/// device could not take it whole and the kernel segmented it in software (TSO off, a
/// `gso_type` the device has no offload for, more segments than `gso_max_segs`): `sendmsg`
/// fails with `ENOBUFS` and the device counts `tx_dropped`. Through the queueing layer
/// (`__dev_queue_xmit`) the same frame leaves as its segments.
pub(super) struct Tx {
    pub(super) fd: OwnedFd,
    /// No bypass: GSO frames the device must segment in software go here.
    pub(super) soft: Option<OwnedFd>,
    /// Set when the device is known not to take GSO frames whole: every GSO frame goes to
    /// `soft`. Set at open when the device has no TSO, or at the first GSO frame the bypass
    /// path refuses; it stays set for the port's life.
    pub(super) gso_via_soft: bool,
    /// The errno of the last send refused because the interface is down or gone (`ENETDOWN`,
    /// `ENXIO`), until a transmit-only port's `recv` reports it (see
    /// [`PacketPort::recv`](crate::port::PacketPort::recv) of
    /// [`AfPacketPort`](super::AfPacketPort)).
    pub(super) gone: Option<i32>,
}

impl Tx {
    /// Sends a leading run of `msgs` with one `sendmmsg`, `gso[i]` saying whether message `i`
    /// is a GSO frame. Returns how many the kernel took (GSO frames that went through the
    /// queueing layer also counted in `tx_gso_software`); an error means it took none.
    pub(super) fn send(
        &mut self,
        msgs: &[[&[u8]; MSG_PARTS]],
        gso: &[bool],
        counters: &mut PortCounters,
    ) -> io::Result<usize> {
        let Some(soft) = self.soft.as_ref() else {
            return sys::send_msgs(&self.fd, msgs);
        };
        let first_gso = gso.first().copied().unwrap_or(false);
        if self.gso_via_soft {
            let run = gso.iter().take_while(|&&g| g == first_gso).count();
            let run = run.max(1).min(msgs.len());
            if !first_gso {
                return sys::send_msgs(&self.fd, &msgs[..run]);
            }
            let sent = sys::send_msgs(soft, &msgs[..run])?;
            counters.tx_gso_software += sent as u64;
            return Ok(sent);
        }
        match sys::send_msgs(&self.fd, msgs) {
            Err(e) if first_gso && e.raw_os_error() == Some(libc::ENOBUFS) => {
                // Refused by the bypass path (see the type's docs), or the device was busy:
                // through the queueing layer it either leaves (the device needs software
                // segmentation: so do the GSO frames after it) or is busy there too.
                let sent = sys::send_msgs(soft, &msgs[..1]).map_err(|_| e)?;
                if sent == 1 {
                    self.gso_via_soft = true;
                    counters.tx_gso_software += 1;
                }
                Ok(sent)
            }
            other => other,
        }
    }
}

/// [`PacketPort::send`](crate::port::PacketPort::send) on a bound packet socket: `sendmmsg` batches
/// of up to 64 frames from `pool`, counted in `counters`. A busy device stops early (`tx_busy`), a
/// frame refused for good is counted (`tx_errors`) and freed; an unexpected error is returned only
/// while no id was consumed, so the caller still knows exactly which slots it owns.
///
/// With `vnet` (the socket has `PACKET_VNET_HDR`) each frame goes out behind its slot's
/// [`FramePool::vnet`] header.
pub(super) fn send_batches(
    tx: &mut Tx,
    vnet: bool,
    counters: &mut PortCounters,
    pool: &mut FramePool,
    ids: &[u32],
) -> io::Result<usize> {
    let mut done = 0;
    while done < ids.len() {
        let batch = &ids[done..ids.len().min(done + SEND_BATCH)];
        let mut headers = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
        let mut gso = [false; SEND_BATCH];
        if vnet {
            for ((h, g), &id) in headers.iter_mut().zip(&mut gso).zip(batch) {
                let vnet = pool.vnet(id);
                *h = vnet.to_bytes();
                *g = vnet.is_gso();
            }
        }
        let mut msgs: [[&[u8]; MSG_PARTS]; SEND_BATCH] = [[&[]; MSG_PARTS]; SEND_BATCH];
        for ((m, &id), h) in msgs.iter_mut().zip(batch).zip(&headers) {
            let header: &[u8] = if vnet { h } else { &[] };
            *m = [header, pool.frame(id), &[]];
        }
        match tx.send(&msgs[..batch.len()], &gso[..batch.len()], counters) {
            Ok(sent) => {
                for &id in &batch[..sent] {
                    counters.tx_packets += 1;
                    counters.tx_bytes += pool.len(id) as u64;
                    pool.free(id);
                }
                done += sent;
                if sent == 0 {
                    counters.tx_busy += 1;
                    break;
                }
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                    counters.tx_busy += 1;
                    break;
                }
                // The first frame of the batch was refused for good: count, free, go on.
                Some(
                    errno @ (libc::EMSGSIZE
                    | libc::EINVAL
                    | libc::ENETDOWN
                    | libc::ENXIO
                    | libc::EFAULT),
                ) => {
                    if matches!(errno, libc::ENETDOWN | libc::ENXIO) {
                        tx.gone = Some(errno);
                    }
                    counters.tx_errors += 1;
                    pool.free(batch[0]);
                    done += 1;
                }
                _ if done > 0 => break,
                _ => return Err(e),
            },
        }
    }
    Ok(done)
}
