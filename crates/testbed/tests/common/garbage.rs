//! Random garbage frames for the real-traffic tests (`garbage.rs`, `soak.rs`): the kinds the
//! parser must refuse (bad IHL, bad total length, VLAN stacks, a cut-off IPv6 extension chain,
//! truncated headers) and non-IP frames, from a deterministic generator.

use metronome_testbed::netns::Namespace;

/// A small deterministic random number generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

/// One garbage frame from `dst` to `src` MAC: `(frame, malformed)`, `malformed` false for the
/// non-IP kind. The kinds rotate with `n`.
pub fn frame(rng: &mut Rng, n: u64, dst: [u8; 6], src: [u8; 6]) -> (Vec<u8>, bool) {
    let len = 64 + rng.below(1514 - 64 + 1);
    let mut f = vec![0u8; len];
    rng.fill(&mut f);
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    let malformed = match n % 6 {
        // IPv4, IHL 2 words.
        0 => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x42;
            true
        }
        // IPv4, total length 9000 in a shorter frame.
        1 => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[16..18].copy_from_slice(&9000u16.to_be_bytes());
            true
        }
        // Three stacked VLAN tags (the parser reads two), then IPv4 with a bad IHL.
        2 => {
            for t in 0..3 {
                let at = 12 + 4 * t;
                f[at..at + 2].copy_from_slice(&[0x81, 0x00]);
            }
            f[24..26].copy_from_slice(&[0x08, 0x00]);
            f[26] = 0x41;
            true
        }
        // IPv6: hop-by-hop, destination options, then a routing header claiming 1 608 bytes,
        // cut off by the frame.
        3 => {
            f.resize(14 + 40 + 24, 0);
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            f[14] = 0x60;
            f[18..20].copy_from_slice(&24u16.to_be_bytes()); // payload length: the frame's
            f[20] = 0; // hop-by-hop
            f[54] = 60; // then destination options
            f[55] = 0;
            f[62] = 43; // then routing
            f[63] = 0;
            f[70] = 17;
            f[71] = 200; // (200 + 1) * 8 bytes
            true
        }
        // IPv4 cut off after 10 bytes of its header.
        4 => {
            f.resize(24, 0);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            true
        }
        // Not IP: the local experimental EtherType 0x88b5 (IEEE 802).
        _ => {
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            false
        }
    };
    (f, malformed)
}

/// The MAC address of `iface` in `ns`.
pub fn mac_of(ns: &Namespace, iface: &str) -> [u8; 6] {
    let shown = ns.ip(&["-o", "link", "show", "dev", iface]).unwrap();
    let text = shown
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap();
    let mut mac = [0u8; 6];
    for (m, h) in mac.iter_mut().zip(text.split(':')) {
        *m = u8::from_str_radix(h, 16).unwrap();
    }
    mac
}
