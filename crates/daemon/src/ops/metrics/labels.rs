//! The label sets of the registry's families. A `silo` label is written only when the daemon
//! runs several silos ([`SiloLabel`]), so that a one-silo daemon's series carry no `silo` label.

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};

/// `{class="...",outcome="..."}` of the ACK-shaping counters (one series per class and outcome,
/// summed over silos).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ClassOutcomeLabel {
    pub(super) class: String,
    pub(super) outcome: &'static str,
}

/// `{class="...",reason="..."}` of the early refusals (`crate::os::early`): one series per
/// class and reason, for the whole daemon.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ClassReasonLabel {
    pub(super) class: String,
    pub(super) reason: &'static str,
}

/// `{class="..."}`, plus `silo="i"` when the daemon runs several silos.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) struct ClassLabel {
    pub(super) class: String,
    pub(super) silo: Option<u16>,
}

impl EncodeLabelSet for ClassLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("class", self.class.as_str()).encode(encoder.encode_label())?;
        SiloLabel { silo: self.silo }.encode(encoder)
    }
}

/// `{class="...",parent="..."}`, plus `silo="i"` when the daemon runs several silos.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) struct ClassParentLabel {
    pub(super) class: String,
    pub(super) parent: String,
    pub(super) silo: Option<u16>,
}

impl EncodeLabelSet for ClassParentLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("class", self.class.as_str()).encode(encoder.encode_label())?;
        ("parent", self.parent.as_str()).encode(encoder.encode_label())?;
        SiloLabel { silo: self.silo }.encode(encoder)
    }
}

/// `{by="..."}` of the loop's wake-ups (what ended a sleep), plus `silo="i"` when the daemon runs
/// several silos.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) struct WakeLabel {
    pub(super) by: &'static str,
    pub(super) silo: Option<u16>,
}

impl EncodeLabelSet for WakeLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("by", self.by).encode(encoder.encode_label())?;
        SiloLabel { silo: self.silo }.encode(encoder)
    }
}

/// `{silo="i"}`, or nothing with one silo.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) struct SiloLabel {
    pub(super) silo: Option<u16>,
}

impl EncodeLabelSet for SiloLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        match self.silo {
            Some(s) => ("silo", s).encode(encoder.encode_label()),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    pub(super) reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct InterfaceLabel {
    pub(super) interface: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct InterfaceEventLabel {
    pub(super) interface: String,
    pub(super) event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindActionLabel {
    pub(super) kind: String,
    pub(super) action: String,
}

/// `{op="add",result="ok"}` of the control socket's class changes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OpResultLabel {
    pub(super) op: &'static str,
    pub(super) result: &'static str,
}
