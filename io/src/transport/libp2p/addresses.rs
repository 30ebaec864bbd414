//! The addresses a dial by peer id may use, beside Kademlia's table: those the driver checked
//! (`peers::dialable`) when a peer identified itself.
//!
//! Why not identify's own cache: it keeps every listen address a peer advertises, loopback
//! included, and offers them to every dial of that peer. A node on another machine that
//! listens on `0.0.0.0` advertises `127.0.0.1:PORT`; dialled here, that address leads back to
//! this machine — often to this very node — and the failed handshakes read as a key mismatch
//! (issue 54). So identify's cache is off and this one holds only what the driver adds.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::task::{Context, Poll};

use libp2p::core::transport::PortUse;
use libp2p::core::Endpoint;
use libp2p::swarm::behaviour::PeerAddresses;
use libp2p::swarm::{
    dummy, ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent,
    THandlerOutEvent, ToSwarm,
};
use libp2p::{Multiaddr, PeerId};

/// Peers whose addresses are kept (least recently used forgotten first; 10 addresses each).
const PEERS: NonZeroUsize = NonZeroUsize::new(1_024).expect("non-zero");

/// Checked addresses of peers, fed by `Swarm::add_peer_address` (dropped again when a dial to
/// one fails).
pub(super) struct KnownAddresses(PeerAddresses);

impl Default for KnownAddresses {
    fn default() -> Self {
        KnownAddresses(PeerAddresses::new(PEERS))
    }
}

impl NetworkBehaviour for KnownAddresses {
    type ConnectionHandler = dummy::ConnectionHandler;
    type ToSwarm = Infallible;

    fn handle_established_inbound_connection(
        &mut self,
        _: ConnectionId,
        _: PeerId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn handle_established_outbound_connection(
        &mut self,
        _: ConnectionId,
        _: PeerId,
        _: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn handle_pending_outbound_connection(
        &mut self,
        _: ConnectionId,
        peer: Option<PeerId>,
        _: &[Multiaddr],
        _: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        Ok(peer.map(|p| self.0.get(&p).collect()).unwrap_or_default())
    }

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        self.0.on_swarm_event(&event);
    }

    fn on_connection_handler_event(
        &mut self,
        _: PeerId,
        _: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        match event {}
    }

    fn poll(&mut self, _: &mut Context<'_>) -> Poll<ToSwarm<Infallible, THandlerInEvent<Self>>> {
        Poll::Pending
    }
}
