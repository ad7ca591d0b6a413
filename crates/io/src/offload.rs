//! Turning an interface's offloads on or off with the ethtool ioctl, as `ethtool -K IF tso off`
//! does, for machines without the `ethtool` program.
//!
//! The throughput ceiling is measured with TSO, GSO and GRO off on all four veths of the testbed
//! (`Topology::offloads_off` in `crates/testbed/src/netns.rs`) so that every frame is one MTU;
//! checksum offload off makes the end hosts compute full TCP checksums, which a forwarder that
//! does not complete partial checksums (the testbed's plain forwarder,
//! `crates/testbed/src/forwarder.rs`) needs. The legacy per-feature commands are used (uapi
//! `linux/ethtool.h`); the kernel maps them onto its feature flags and turns dependent features
//! off too (no TSO without checksum offload).

use crate::port::PortError;
use crate::sys;

/// `ETHTOOL_GLINK` (uapi `linux/ethtool.h`, 0x0a): whether the link is up, as the driver
/// reports it.
const ETHTOOL_GLINK: u32 = 0x0a;

/// Whether interface `ifname` (of the calling thread's network namespace) has link, as `ethtool
/// IF` reports "Link detected" (`ETHTOOL_GLINK`: the driver's `get_link`, the carrier for most
/// drivers and veths). Read at once, unlike the interface's `IFF_RUNNING` flag, which follows
/// its operational state, which the kernel's link watcher updates at most once a second for
/// most devices (`linkwatch_fire_event`, `net/core/link_watch.c`). Errors (no such interface,
/// a driver without `get_link`: `EOPNOTSUPP`) name the interface.
pub fn link_detected(ifname: &str) -> Result<bool, PortError> {
    sys::ethtool_value(ifname, ETHTOOL_GLINK, 0)
        .map(|v| v != 0)
        .map_err(|e| crate::afpacket::os_error(ifname, "ETHTOOL_GLINK", e))
}

/// One offload, by its legacy ethtool set-command (uapi `linux/ethtool.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// Transmit checksum offload (`ETHTOOL_STXCSUM`, 0x17): `ethtool -K IF tx`.
    TxChecksum,
    /// TCP segmentation offload (`ETHTOOL_STSO`, 0x1f): `ethtool -K IF tso`.
    Tso,
    /// Generic segmentation offload (`ETHTOOL_SGSO`, 0x24): `ethtool -K IF gso`.
    Gso,
    /// Generic receive offload (`ETHTOOL_SGRO`, 0x2c): `ethtool -K IF gro`.
    Gro,
}

impl Offload {
    /// All four, in the order they are best turned off (checksum first: TSO depends on it).
    pub const ALL: [Offload; 4] = [
        Offload::TxChecksum,
        Offload::Tso,
        Offload::Gso,
        Offload::Gro,
    ];

    /// The ethtool set-command number; the get-command is one less (`ETHTOOL_GTXCSUM` 0x16,
    /// `ETHTOOL_GTSO` 0x1e, `ETHTOOL_GGSO` 0x23, `ETHTOOL_GGRO` 0x2b).
    fn command(self) -> u32 {
        match self {
            Offload::TxChecksum => 0x17,
            Offload::Tso => 0x1f,
            Offload::Gso => 0x24,
            Offload::Gro => 0x2c,
        }
    }

    /// The name `ethtool -K` uses.
    pub fn name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx",
            Offload::Tso => "tso",
            Offload::Gso => "gso",
            Offload::Gro => "gro",
        }
    }

    /// Sets the offload on `ifname` (of the calling thread's network namespace) on or off. Needs
    /// CAP_NET_ADMIN; errors name the interface and the offload.
    pub fn set(self, ifname: &str, on: bool) -> Result<(), PortError> {
        sys::ethtool_value(ifname, self.command(), u32::from(on))
            .map(drop)
            .map_err(|e| crate::afpacket::os_error(ifname, self.op(), e))
    }

    /// Whether the offload is on for `ifname` (of the calling thread's network namespace), as
    /// `ethtool -k` reports it. Reads the state back after [`Offload::set`]: the kernel may
    /// refuse a feature silently (no TSO without checksum offload).
    pub fn get(self, ifname: &str) -> Result<bool, PortError> {
        sys::ethtool_value(ifname, self.command() - 1, 0)
            .map(|v| v != 0)
            .map_err(|e| crate::afpacket::os_error(ifname, self.get_op(), e))
    }

    fn get_op(self) -> &'static str {
        match self {
            Offload::TxChecksum => "ETHTOOL_GTXCSUM",
            Offload::Tso => "ETHTOOL_GTSO",
            Offload::Gso => "ETHTOOL_GGSO",
            Offload::Gro => "ETHTOOL_GGRO",
        }
    }

    fn op(self) -> &'static str {
        match self {
            Offload::TxChecksum => "ETHTOOL_STXCSUM",
            Offload::Tso => "ETHTOOL_STSO",
            Offload::Gso => "ETHTOOL_SGSO",
            Offload::Gro => "ETHTOOL_SGRO",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_named() {
        let e = Offload::Gro.set("mtr-no-such-if", false).unwrap_err();
        assert!(e.to_string().contains("mtr-no-such-if"), "{e}");
        let e = Offload::Gro.get("mtr-no-such-if").unwrap_err();
        assert!(e.to_string().contains("mtr-no-such-if"), "{e}");
        let e = link_detected("mtr-no-such-if").unwrap_err();
        assert!(e.to_string().contains("mtr-no-such-if"), "{e}");
    }

    #[test]
    fn loopback_has_link() {
        // The loopback driver's `get_link` is always on; reading needs no privilege.
        assert!(link_detected("lo").unwrap());
    }

    #[test]
    fn loopback_offloads_read_back() {
        // Reading needs no privilege. The set/get round trip on a veth is in tests/offloads.rs.
        for o in Offload::ALL {
            assert!(o.get("lo").is_ok(), "{}", o.name());
        }
    }
}
