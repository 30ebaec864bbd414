//! Rule 7 of `membership.rs`: endorsing electorates, certifying committed ones, and catching up
//! along the links (the data and their checks are in `certificate.rs`).
//!
//! Who asks whom: a follower asks its admin when the admin's heartbeat names a newer certified
//! version than its own anchor; an admin asks a voter whose acknowledgement does. A node that
//! refuses a heartbeat as `not_member` asks its sender when the heartbeat names a newer
//! certified version of the same cluster: it may be a voter that missed every change while the
//! members it knows were retired, and the links it gets are checked from its own anchor, so the
//! sender needs no trust. One question at a time, at most one per heartbeat interval.

use std::sync::Arc;

use crate::certificate::{self, Link};
use crate::{Command, Core, Digest, Message, NodeId, Refusal, Role, Signature};

impl Core {
    /// Asks for this node's signature over the electorate it now holds, if it may have to
    /// endorse it: a member of it, or eligible (a voter the change removes endorses it too).
    /// Workers never sign. Called whenever the electorate changes and at start.
    pub(crate) fn endorse_electorate(&mut self, out: &mut Vec<Command>) {
        self.chain.endorsement = None;
        let Some(e) = &self.electorate else { return };
        if self.is_eligible() || e.contains(&self.id) {
            out.push(Command::Sign {
                digest: e.statement(),
            });
        }
    }

    /// The runtime's answer to [`Command::Sign`]; kept only if it is for the electorate held.
    /// A follower that holds its admin's electorate (it took it from the heartbeat it just
    /// acknowledged, before the signature existed) sends the endorsement at once with a second
    /// acknowledgement of that beat, rather than a heartbeat later: the change commits on it.
    pub(crate) fn on_signed(
        &mut self,
        digest: Digest,
        signature: Signature,
        out: &mut Vec<Command>,
    ) {
        if !self
            .electorate
            .as_ref()
            .is_some_and(|e| e.statement() == digest)
        {
            return;
        }
        self.chain.endorsement = Some((digest, signature.clone()));
        if self.role == Role::Admin {
            return self.check_commit(out); // its own endorsement may be the last one wanted
        }
        let following = self.role == Role::Follower && self.term > 0 && self.stamp == self.term;
        if let Some(admin) = self.admin.clone().filter(|a| following && *a != self.id) {
            out.push(Command::Send {
                to: admin,
                msg: Message::HeartbeatAck {
                    term: self.term,
                    beat: self.beat,
                    // No new promise: the first acknowledgement of the beat made it.
                    promise_ms: 0,
                    holds: true,
                    endorsement: Some(signature),
                    certified: self.certified(),
                },
            });
        }
    }

    /// This node's signature over the electorate it holds, if it has one yet (reset with every
    /// change of electorate, so it is always for the current one).
    pub(crate) fn own_endorsement(&self) -> Option<Signature> {
        self.chain.endorsement.as_ref().map(|(_, s)| s.clone())
    }

    /// The newest version this node holds a chain up to.
    pub(crate) fn certified(&self) -> u64 {
        self.chain.certified()
    }

    /// Whether `sig` is `from`'s endorsement of the electorate this node holds.
    pub(crate) fn endorses_mine(&self, from: &NodeId, sig: &Signature) -> bool {
        self.electorate
            .as_ref()
            .is_some_and(|e| certificate::verify(from, &e.statement(), sig))
    }

    /// The admin certified `link` (a majority of the electorate before it endorsed it): keep it
    /// and vouch for it from now on.
    pub(crate) fn certify(&mut self, link: Arc<Link>) {
        self.chain.anchor = Some(link.electorate.clone());
        self.chain.keep(link);
    }

    /// Asks `peer` for the links after this node's anchor, unless a question is still out.
    pub(crate) fn ask_chain(&mut self, peer: NodeId, out: &mut Vec<Command>) {
        if let Some((_, at)) = &self.chain.asked {
            if self.now_ms < at + self.config.heartbeat_interval_ms {
                return;
            }
        }
        out.push(Command::Send {
            to: peer.clone(),
            msg: Message::ChainRequest {
                after: self.certified(),
            },
        });
        self.chain.asked = Some((peer, self.now_ms));
    }

    /// Anyone may ask: the links are public and check themselves. Answered only with links
    /// that start right after `after` (nothing to say otherwise).
    pub(crate) fn on_chain_request(&mut self, from: NodeId, after: u64, out: &mut Vec<Command>) {
        let links = self.chain.links_after(after);
        if !links.is_empty() {
            out.push(Command::Send {
                to: from,
                msg: Message::Chain { links },
            });
        }
    }

    /// Links from the peer asked: each is checked against the anchor and becomes the anchor;
    /// the first that fails is refused with the rest. A chain that ends ahead of this node's
    /// position is taken like any later position (rule 5's second half), with the last link's
    /// proposing term as its stamp — what the electorate's holders stamped at least.
    pub(crate) fn on_chain(&mut self, from: NodeId, links: Vec<Arc<Link>>, out: &mut Vec<Command>) {
        if self.chain.asked.as_ref().map(|(p, _)| p) != Some(&from) {
            return self.refuse(from, "chain", Refusal::Unsolicited, out);
        }
        self.chain.asked = None;
        let before = self.certified();
        for link in links {
            let Some(anchor) = self.chain.anchor.clone() else {
                return;
            };
            if link.electorate.version <= anchor.version {
                continue;
            }
            if let Err(reason) = link.check(&anchor, certificate::verify) {
                self.refuse(from.clone(), "chain", reason, out);
                break;
            }
            self.certify(link);
        }
        if self.certified() > before {
            if let Some(anchor) = self.chain.anchor.clone() {
                let stamp = anchor.term;
                self.take_later_position(anchor, stamp, out);
            }
        }
    }
}
