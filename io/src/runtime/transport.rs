//! The transport a runtime loop talks through: best-effort sends, and a stream of authenticated,
//! already decoded inputs.

use std::future::Future;

use chorus_core::{Digest, Message, NodeId, PeerInfo, Signature};

/// What a transport hands the runtime loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportEvent {
    /// A decoded message from an authenticated peer. `from` is the peer of the connection (or
    /// the datagram's source), never a field of the payload.
    Message {
        /// The authenticated sender.
        from: NodeId,
        /// The decoded message.
        msg: Message,
    },
    /// A peer became reachable, with what it advertises about itself.
    PeerUp {
        /// The peer.
        peer: NodeId,
        /// Its capabilities and score inputs.
        info: PeerInfo,
    },
    /// A peer became unreachable.
    PeerDown {
        /// The peer.
        peer: NodeId,
    },
    /// Bytes that were not a message for us. The loop counts them (see
    /// [`Observer::on_rejected`](super::Observer::on_rejected)); they never reach the core or
    /// the event log.
    Rejected {
        /// The sender, when the transport knows it.
        from: Option<NodeId>,
        /// A short, stable label, e.g. [`CodecError::kind`](chorus_core::codec::CodecError::kind).
        reason: &'static str,
    },
}

/// A best-effort message transport.
///
/// Encoding and decoding with [`chorus_core::codec`] belong to implementations: the loop only
/// sees [`Message`]s. Sends never block the loop and never fail towards it; a transport counts
/// and logs its own failures (an unknown peer, an over-sized message, a full socket buffer).
///
/// The future returned by [`Transport::next`] must be cancel safe: the loop polls it inside a
/// `select!` and drops it whenever a timer or shutdown wins, and an event must not be lost then.
/// The trait does not require the future to be `Send`; a concrete transport whose future is
/// `Send` gives a loop future that is `Send` too.
pub trait Transport {
    /// Sends `msg` to one peer, best effort, without waiting.
    fn send(&mut self, to: &NodeId, msg: &Message);

    /// Sends `msg` to every connected peer, best effort, without waiting.
    fn broadcast(&mut self, msg: &Message);

    /// Waits for the next input. Cancel safe.
    fn next(&mut self) -> impl Future<Output = TransportEvent>;

    /// Signs `digest` as `signer`, this node (the core's [`Command::Sign`](chorus_core::Command::Sign)):
    /// with the libp2p identity key for a real transport, or
    /// [`simulated_signature`](chorus_core::certificate::simulated_signature) for a simulated one.
    fn sign(&self, signer: &NodeId, digest: &Digest) -> Signature;
}
