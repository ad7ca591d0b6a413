//! The offload mode of a `demo` or `compare` run ([`OffloadMode`]).
//!
//! * [`OffloadMode::Host`] (the default): the veths keep the offloads a Linux host gives them
//!   (TSO, GSO, GRO and checksum offload on), so the end hosts' TCP hands the shaper GSO
//!   super-frames of up to 64 KiB, the way users run.
//! * [`OffloadMode::Off`]: one frame per MTU. The end hosts' TCP builds one-MTU segments
//!   ([`Topology::one_mtu_segments`]) and transmit checksum offload, TSO, GSO and GRO are off on
//!   all four veths ([`Topology::offloads_off`]): full checksums and MTU frames everywhere. The
//!   daemon is told not to switch GRO back on on its inside interface ([`OffloadMode::configure`]).

use crate::netns::{TopoError, Topology};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which offloads the topology's veths run with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OffloadMode {
    /// The host's default offloads: super-frames reach the shaper.
    #[default]
    Host,
    /// Offloads off, one frame per MTU.
    Off,
}

impl OffloadMode {
    /// The name used on the command line (`--offloads host|off`), in tables and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            OffloadMode::Host => "host",
            OffloadMode::Off => "off",
        }
    }

    /// A short description for the text reports.
    pub fn describe(self) -> &'static str {
        match self {
            OffloadMode::Host => "host defaults (TSO, GSO, GRO, checksum offload on: super-frames)",
            OffloadMode::Off => {
                "off (one-MTU segments; tx checksum, TSO, GSO, GRO off on all four veths)"
            }
        }
    }

    /// Sets `topo`'s veths up for this mode. [`OffloadMode::Host`] changes nothing: a new
    /// [`Topology`] has the host's defaults.
    pub fn apply(self, topo: &mut Topology) -> Result<(), TopoError> {
        match self {
            OffloadMode::Host => Ok(()),
            OffloadMode::Off => {
                topo.one_mtu_segments()?;
                topo.offloads_off()
            }
        }
    }
}

impl OffloadMode {
    /// Sets the daemon's `config` up for this mode: with [`OffloadMode::Off`] the daemon leaves
    /// GRO off on its inside interface (`[daemon] gro = false`), so it sees one frame per MTU as
    /// the veths do.
    pub fn configure(self, config: &mut metronome_daemon::ops::config::Config) {
        if self == OffloadMode::Off {
            config.daemon.gro = false;
        }
    }
}

impl std::fmt::Display for OffloadMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OffloadMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "host" => Ok(OffloadMode::Host),
            "off" => Ok(OffloadMode::Off),
            other => Err(format!(
                "unknown offload mode {other:?} (expected \"host\" or \"off\")"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_names() {
        for m in [OffloadMode::Host, OffloadMode::Off] {
            assert_eq!(m.name().parse::<OffloadMode>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        assert_eq!(OffloadMode::default(), OffloadMode::Host);
        assert!("on".parse::<OffloadMode>().unwrap_err().contains("\"on\""));
        assert!("".parse::<OffloadMode>().is_err());
    }
}
