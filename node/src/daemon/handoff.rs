//! The transport the runtime loop drives: the libp2p transport, handed back when the loop drops
//! it so the process can let the last messages (a step-down) leave before closing connections;
//! with the `fault-injection` feature, a deliberately broken build's forged input first.

use std::sync::{Arc, Mutex, PoisonError};

use chorus_core::{Message, NodeId};
use chorus_io::runtime::{Transport, TransportEvent};
use chorus_io::transport::Libp2pTransport;

/// The libp2p transport, handed back through `slot` when the runtime drops it, so the process
/// can let queued messages leave before closing connections.
pub(super) struct Handoff {
    pub(super) inner: Option<Libp2pTransport>,
    pub(super) slot: Arc<Mutex<Option<Libp2pTransport>>>,
    /// A deliberately broken build's forged input (tests only; see `fault.rs`).
    #[cfg(feature = "fault-injection")]
    pub(super) forged: Option<super::fault::ForgedAcks>,
}

impl Transport for Handoff {
    fn send(&mut self, to: &NodeId, msg: &Message) {
        if let Some(t) = self.inner.as_mut() {
            t.send(to, msg);
        }
    }

    fn broadcast(&mut self, msg: &Message) {
        #[cfg(feature = "fault-injection")]
        if let Some(f) = self.forged.as_mut() {
            f.broadcast(msg);
        }
        if let Some(t) = self.inner.as_mut() {
            t.broadcast(msg);
        }
    }

    fn sign(&self, signer: &NodeId, digest: &chorus_core::Digest) -> chorus_core::Signature {
        match self.inner.as_ref() {
            Some(t) => t.sign(signer, digest),
            // Handed back at shutdown: nothing is signed any more (an empty signature checks
            // nowhere).
            None => chorus_core::Signature::from_bytes(&[]),
        }
    }

    async fn next(&mut self) -> TransportEvent {
        #[cfg(feature = "fault-injection")]
        if let Some(ev) = self
            .forged
            .as_mut()
            .and_then(super::fault::ForgedAcks::next_forged)
        {
            return ev;
        }
        let ev = match self.inner.as_mut() {
            Some(t) => t.next().await,
            None => std::future::pending().await,
        };
        #[cfg(feature = "fault-injection")]
        if let Some(f) = self.forged.as_mut() {
            f.saw(&ev);
        }
        ev
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        if let Some(t) = self.inner.take() {
            *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
        }
    }
}
