//! The sizes of a fair queue and why a configuration cannot be built.

/// Sizes of a [`FairQueue`](super::FairQueue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairQueueConfig {
    /// Packet ids `0..packets` (the caller's pool slots).
    pub packets: u32,
    /// Flow indices `0..flows` (the caller's flow table).
    pub flows: u32,
    /// Classes `0..classes`, each with its own lists and overflow flow; at most
    /// [`MAX_FAIR_CLASSES`](super::MAX_FAIR_CLASSES).
    pub classes: u32,
    /// Bytes of credit a flow gets per round: one full frame (`fq_codel`'s default quantum is
    /// the device's MTU plus its link header).
    pub quantum: u32,
}

/// A [`FairQueueConfig`] that cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FairQueueConfigError {
    /// A zero quantum would never serve a packet.
    #[error("the quantum must be at least one byte")]
    ZeroQuantum,
    /// The quantum must fit the signed deficit.
    #[error("the quantum must be below 2^30 bytes")]
    QuantumTooLarge,
    /// Flows plus overflow flows must stay below the list sentinels.
    #[error("too many flows: flows + classes must be below 2^32 - 2")]
    TooManyFlows,
    /// Packet ids must stay below the list sentinels.
    #[error("too many packets: at most 2^32 - 2")]
    TooManyPackets,
    /// More than [`MAX_FAIR_CLASSES`](super::MAX_FAIR_CLASSES) classes.
    #[error("too many classes: at most 2^30")]
    TooManyClasses,
}
