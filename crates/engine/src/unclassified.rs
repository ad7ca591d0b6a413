//! What the engine does with frames the classifier cannot place in a class: malformed frames
//! (`metronome_packet::Malformed`: a bad IHL or total length, a truncated header, a VLAN
//! stack or IPv6 extension chain the parser refuses) and non-IP frames (ARP, LLDP, any other
//! EtherType). `[daemon] malformed` and `[daemon] non_ip` choose, separately, one
//! [`Unclassified`] action each:
//!
//! * `default` (the default for both): the frame is charged to the default class, as an IP
//!   packet no rule matches: shaped at the default class's rate when it has one, forwarded at
//!   once when it has none. All such frames of one kind are one flow ([`MALFORMED_FLOW`],
//!   [`NON_IP_FLOW`]) for the default class's pacing and backpressure. A configured limit then
//!   holds against garbage: a sender cannot get past its class by sending frames the parser
//!   refuses, and the default class's rate bounds what is not in any class. ARP shares the
//!   default class with neighbour discovery (ICMPv6, classified like any IP packet).
//! * `pass`: forwarded at once, unshaped (a bump in the wire that must not delay link-layer
//!   control traffic at any cost; frames of this kind can then exceed every limit).
//! * `drop`: freed and counted.
//!
//! Every frame is counted once in `metronome_unclassified_frames_total{kind, action}`
//! (CONTRIBUTING.md §11); malformed frames also by reason in `metronome_malformed_frames_total`.
//! Both settings are read per frame, so a reload applies them to the next frame.

use metronome_core::FlowId;
use serde::Deserialize;

/// The flow all malformed frames charged to the default class belong to.
pub const MALFORMED_FLOW: FlowId = FlowId(0xffff_fff0);
/// The flow all non-IP frames charged to the default class belong to.
pub const NON_IP_FLOW: FlowId = FlowId(0xffff_fff1);

/// The action for one kind of unclassifiable frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unclassified {
    /// Charge it to the default class (shaped at its rate when it has one).
    #[default]
    Default,
    /// Forward it at once, unshaped.
    Pass,
    /// Free it and count it.
    Drop,
}

impl Unclassified {
    /// Every action, in the order of [`Unclassified::index`].
    pub const ALL: [Unclassified; 3] = [
        Unclassified::Default,
        Unclassified::Pass,
        Unclassified::Drop,
    ];

    /// The value as written in the configuration and in the metric's `action` label.
    pub fn label(self) -> &'static str {
        match self {
            Unclassified::Default => "default",
            Unclassified::Pass => "pass",
            Unclassified::Drop => "drop",
        }
    }

    /// Its position in [`Unclassified::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Which kind of frame the classifier could not place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnclassifiedKind {
    /// A frame the parser refused (counted by reason too).
    Malformed,
    /// A frame of another EtherType than IPv4/IPv6.
    NonIp,
}

impl UnclassifiedKind {
    /// Both kinds, in the order of [`UnclassifiedKind::index`].
    pub const ALL: [UnclassifiedKind; 2] = [UnclassifiedKind::Malformed, UnclassifiedKind::NonIp];

    /// The metric's `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            UnclassifiedKind::Malformed => "malformed",
            UnclassifiedKind::NonIp => "non_ip",
        }
    }

    /// Its position in [`UnclassifiedKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The flow frames of this kind form in the default class.
    pub fn flow(self) -> FlowId {
        match self {
            UnclassifiedKind::Malformed => MALFORMED_FLOW,
            UnclassifiedKind::NonIp => NON_IP_FLOW,
        }
    }
}
