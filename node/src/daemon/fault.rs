//! Deliberately broken builds, for the tests that must show the checker catches them (issue
//! 12: "the merged-history checker has caught a deliberately broken build"). Compiled only with
//! the `fault-injection` feature (the end-to-end test binary has it; a release build of
//! `chorus` does not), and active only when `CHORUS_FAULT` names a fault.
//!
//! `CHORUS_FAULT=forge-heartbeat-acks`: every heartbeat this node broadcasts is answered at once
//! by an acknowledgement "from" every peer it ever saw — a build whose lease renewal does not
//! check who acknowledged. In a minority partition such an admin keeps renewing its lease while
//! the majority elects another: two leases at once (docs/design.md §5, invariant 2).

use std::collections::{BTreeSet, VecDeque};

use chorus_core::{Message, NodeId};
use chorus_io::runtime::TransportEvent;

/// The environment variable naming the fault.
pub const ENV: &str = "CHORUS_FAULT";

/// Forged acknowledgements, queued ahead of the real input.
pub struct ForgedAcks {
    peers: BTreeSet<NodeId>,
    queue: VecDeque<TransportEvent>,
    /// The promise each forged ack claims (an honest voter's `election_timeout_min_ms`).
    promise_ms: u64,
}

impl ForgedAcks {
    /// The fault `CHORUS_FAULT` asks for, if it is this one.
    pub fn from_env(promise_ms: u64) -> Option<ForgedAcks> {
        let wanted = std::env::var(ENV).ok()?;
        if wanted == "forge-heartbeat-acks" {
            tracing::warn!("FAULT INJECTED ({ENV}={wanted}): this node forges heartbeat acks");
            Some(ForgedAcks {
                peers: BTreeSet::new(),
                queue: VecDeque::new(),
                promise_ms,
            })
        } else {
            tracing::warn!("{ENV}={wanted} names no fault this build knows; ignored");
            None
        }
    }

    /// Notes a peer the node saw.
    pub fn saw(&mut self, event: &TransportEvent) {
        if let TransportEvent::PeerUp { peer, .. } = event {
            self.peers.insert(peer.clone());
        }
    }

    /// After a broadcast: an ack of a heartbeat from every peer.
    pub fn broadcast(&mut self, msg: &Message) {
        if let Message::Heartbeat { term, beat, .. } = msg {
            for peer in &self.peers {
                self.queue.push_back(TransportEvent::Message {
                    from: peer.clone(),
                    msg: Message::HeartbeatAck {
                        term: *term,
                        beat: *beat,
                        promise_ms: self.promise_ms,
                        holds: false,
                        endorsement: None,
                        certified: 0,
                    },
                });
            }
        }
    }

    /// The next forged input, if any.
    pub fn next_forged(&mut self) -> Option<TransportEvent> {
        self.queue.pop_front()
    }
}
