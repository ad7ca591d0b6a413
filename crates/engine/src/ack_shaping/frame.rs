//! Where a TCP segment's header lies in a frame, and the edits ACK shaping makes to it (RFC 793
//! §3.1 header layout; RFC 791 §3.1 IPv4 total length; RFC 8200 §3 IPv6 payload length).

use metronome_packet::IpPacket;

/// Bytes of headers a template keeps: Ethernet (14) + two VLAN tags (8) + IPv4 with options
/// (60) + TCP with options (60) = 142, rounded up to 160.
pub const TEMPLATE_BYTES: usize = 160;

/// TCP flag bits (RFC 793 §3.1, byte 13 of the header).
pub(super) const FIN: u8 = 0x01;
pub(super) const SYN: u8 = 0x02;
pub(super) const RST: u8 = 0x04;
pub(super) const ACK: u8 = 0x10;
/// ECN-Echo (RFC 3168 §6.1): kept on generated ACKs, as the receiver last wrote it.
const ECE: u8 = 0x40;

/// Offsets of a TCP segment in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpView {
    /// Start of the IP header.
    pub ip: usize,
    /// Start of the TCP header.
    pub tcp: usize,
    /// TCP header length with options, bytes.
    pub hdr_len: usize,
    /// TCP payload bytes (from the IP length fields).
    pub payload: usize,
    /// IPv4 (else IPv6).
    pub ipv4: bool,
}

/// The TCP header of `ip` in `frame`, when it can be handled: IPv4 (any IHL), IPv6 whose next
/// header is TCP (no extension headers), the whole header inside the frame and within
/// [`TEMPLATE_BYTES`], lengths consistent.
pub fn tcp_view(frame: &[u8], ip: &IpPacket) -> Option<TcpView> {
    let at = usize::from(ip.ip_offset);
    let first = *frame.get(at)?;
    let be16 = |o: usize| -> Option<usize> {
        Some(usize::from(u16::from_be_bytes([
            *frame.get(o)?,
            *frame.get(o + 1)?,
        ])))
    };
    let (ipv4, tcp, l4_len) = match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0x0f) * 4;
            (true, at + ihl, be16(at + 2)?.checked_sub(ihl)?)
        }
        6 if *frame.get(at + 6)? == metronome_packet::proto::TCP => (false, at + 40, be16(at + 4)?),
        _ => return None,
    };
    let hdr_len = usize::from(*frame.get(tcp + 12)? >> 4) * 4;
    if hdr_len < 20 || tcp + hdr_len > frame.len() || tcp + hdr_len > TEMPLATE_BYTES {
        return None;
    }
    let payload = l4_len.checked_sub(hdr_len)?;
    Some(TcpView {
        ip: at,
        tcp,
        hdr_len,
        payload,
        ipv4,
    })
}

impl TcpView {
    /// End of the TCP header (the headers a template keeps).
    pub fn header_end(&self) -> usize {
        self.tcp + self.hdr_len
    }

    /// The acknowledgement number.
    pub fn ack(&self, frame: &[u8]) -> u32 {
        let a = self.tcp + 8;
        u32::from_be_bytes([frame[a], frame[a + 1], frame[a + 2], frame[a + 3]])
    }

    /// Writes acknowledgement number `new`, checksum updated incrementally.
    pub fn rewrite_ack(&self, frame: &mut [u8], new: u32) {
        super::rewrite_u32(frame, self.tcp, self.tcp + 8, new);
    }

    /// Turns the headers in `frame` (cut at [`TcpView::header_end`]) into a pure ACK of `ack`:
    /// no payload, flags ACK (and ECE if set), IP length fields fitted. Checksums are left to
    /// the caller.
    pub fn make_pure_ack(&self, frame: &mut [u8], ack: u32) {
        let t = self.tcp;
        frame[t + 8..t + 12].copy_from_slice(&ack.to_be_bytes());
        frame[t + 13] &= ACK | ECE;
        frame[t + 18..t + 20].fill(0); // urgent pointer
        let (field, len) = if self.ipv4 {
            (self.ip + 2, self.header_end() - self.ip)
        } else {
            (self.ip + 4, self.hdr_len)
        };
        frame[field..field + 2].copy_from_slice(&(len as u16).to_be_bytes());
    }
}
