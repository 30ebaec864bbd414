//! Production transports for the runtime loop: the libp2p adapter (docs/design.md §4.1), which implements
//! [`crate::runtime::Transport`] over TCP + noise + yamux with gossipsub broadcasts and
//! request-response direct messages.

pub mod libp2p;

pub use self::libp2p::{
    load_or_create_identity, load_psk, Libp2pConfig, Libp2pStats, Libp2pTransport, StatsSnapshot,
    TransportError, TransportErrorCategory,
};
