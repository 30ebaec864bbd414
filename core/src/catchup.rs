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
        self.chain.statement = None;
        let Some(e) = &self.electorate else { return };
        if self.is_eligible() || e.contains(&self.id) {
            let digest = e.statement();
            self.chain.statement = Some(digest);
            out.push(Command::Sign { digest });
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
        if self.chain.statement != Some(digest) {
            return;
        }
        self.chain.endorsement = Some(signature);
        if self.role == Role::Admin {
            return self.check_commit(out); // its own endorsement may be the last one wanted
        }
        self.acknowledge_again(out);
    }

    /// A follower that holds its admin's electorate acknowledges the newest beat again, with
    /// what it has now: its endorsement, signed after the first acknowledgement, or the links
    /// it just caught up on (a change commits once a majority holds its link). No new promise:
    /// the first acknowledgement of the beat made it.
    fn acknowledge_again(&mut self, out: &mut Vec<Command>) {
        let following = self.role == Role::Follower && self.term > 0 && self.stamp == self.term;
        if let Some(admin) = self.admin.clone().filter(|a| following && *a != self.id) {
            out.push(Command::Send {
                to: admin,
                msg: Message::HeartbeatAck {
                    term: self.term,
                    beat: self.beat,
                    promise_ms: 0,
                    holds: true,
                    endorsement: self.own_endorsement(),
                    certified: self.certified(),
                },
            });
        }
    }

    /// This node's signature over the electorate it holds, if it has one yet (reset with every
    /// change of electorate, so it is always for the current one).
    pub(crate) fn own_endorsement(&self) -> Option<Signature> {
        self.chain.endorsement.clone()
    }

    /// The newest version this node holds a chain up to.
    pub(crate) fn certified(&self) -> u64 {
        self.chain.certified()
    }

    /// Whether `sig` is `from`'s endorsement of the electorate this node holds. The statement
    /// was computed when the electorate changed (an admin signs what it holds); hashed again
    /// only for an admin that does not sign.
    pub(crate) fn endorses_mine(&self, from: &NodeId, sig: &Signature) -> bool {
        let statement = self
            .chain
            .statement
            .or_else(|| self.electorate.as_ref().map(|e| e.statement()));
        statement.is_some_and(|d| certificate::verify(from, &d, sig))
    }

    /// The admin certified `link` (a majority of the electorate before it endorsed it): keep it
    /// and vouch for it from now on.
    pub(crate) fn certify(&mut self, link: Arc<Link>) {
        self.chain.anchor = Some(link.electorate.clone());
        self.chain.keep(link);
    }

    /// Asks `peer` for the links after this node's anchor. A stranger (`trusted` false: the
    /// sender of a heartbeat refused as `not_member`) is asked only when no question went out
    /// within a heartbeat interval; the node's admin, or a voter acknowledging it, is asked at
    /// once (heartbeats and acknowledgements pace it), and so a stranger that keeps announcing
    /// newer links can slow a stale node's catch-up but never a follower's.
    ///
    /// A question unanswered for a heartbeat interval (an answer clears it) means whoever was
    /// asked has no links from this node's anchor on: it joined the cluster after them, or lost
    /// them. Asked again by the same peer, the node walks the peer table instead, one connected
    /// peer after another, round the table, until one answers: the links check themselves,
    /// whoever hands them over (found by `chorus-sim fuzz`, seed 243728: workers of the founding
    /// electorate asked only the admin, which had joined after the first change, and never
    /// followed it).
    pub(crate) fn ask_chain(&mut self, peer: NodeId, trusted: bool, out: &mut Vec<Command>) {
        let mut peer = peer;
        if let Some((last, at)) = &self.chain.asked {
            let unanswered = self.now_ms >= at + self.config.heartbeat_interval_ms;
            if !trusted && !unanswered {
                return;
            }
            let from = match &self.chain.walk {
                Some(walked) => Some(walked),
                None => Some(last).filter(|l| **l == peer),
            };
            if let Some(next) = from
                .filter(|_| unanswered)
                .and_then(|f| self.peers.next_after(f))
            {
                self.chain.walk = Some(next.clone());
                peer = next;
            }
        }
        self.send_chain_request(peer, self.certified(), out);
    }

    /// Asks `peer` for the links after version `after`: the one question out.
    fn send_chain_request(&mut self, peer: NodeId, after: u64, out: &mut Vec<Command>) {
        out.push(Command::Send {
            to: peer.clone(),
            msg: Message::ChainRequest { after },
        });
        self.chain.asked = Some((peer, self.now_ms));
    }

    /// A node that joined through discovery holds its first electorate without its link (the
    /// proof a majority of the one before held it), and so could never hand a voter one
    /// version behind it the way on. It asks its admin for it, once per process, when it
    /// has nothing newer to ask for; the answer's link to its anchor is kept if it is exactly
    /// the anchor (`on_chain`). Without it, once every node that held that link was retired,
    /// a node one version behind never caught up (`chorus-sim fuzz`, seed 454363).
    pub(crate) fn ask_anchor_link(&mut self, admin: NodeId, out: &mut Vec<Command>) {
        let Some(anchor) = &self.chain.anchor else {
            return;
        };
        let version = anchor.version;
        if self.chain.anchor_link_asked
            || version < 2
            || self.chain.links.contains_key(&version)
            || self.chain.asked.is_some()
        {
            return;
        }
        self.chain.anchor_link_asked = true;
        self.send_chain_request(admin, version - 1, out);
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
        self.chain.walk = None;
        let before = self.certified();
        for link in links {
            let Some(anchor) = self.chain.anchor.clone() else {
                return;
            };
            if link.electorate.version <= anchor.version {
                // The anchor's own link, asked for by `ask_anchor_link`: kept to hand on when
                // it is exactly the anchor (nothing else here can be checked).
                let version = anchor.version;
                if link.electorate.version == version
                    && *link.electorate == *anchor
                    && !self.chain.links.contains_key(&version)
                {
                    self.chain.keep(link);
                }
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
            if self.admin.as_ref() == Some(&from) {
                self.acknowledge_again(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::certificate::{simulated_signature, Link};
    use crate::testutil::*;
    use crate::{Electorate, Message, NodeId, Notice, Refusal};

    fn ids(names: &[&str]) -> Vec<NodeId> {
        names.iter().map(|n| NodeId::from(*n)).collect()
    }

    /// The link to `members`, proposed in `term` after `prev`, endorsed by `signers`.
    fn link(prev: &Electorate, term: u64, members: &[&str], signers: &[&str]) -> Arc<Link> {
        let e = Arc::new(prev.successor(term, ids(members)));
        let st = e.statement();
        let mut signers: Vec<_> = ids(signers)
            .into_iter()
            .map(|s| {
                let sig = simulated_signature(&s, &st);
                (s, sig)
            })
            .collect();
        signers.sort();
        Arc::new(Link {
            electorate: e,
            signers,
        })
    }

    /// a, b, c founded {a, b, c}; while c was away d was added (term 2), a removed (term 3)
    /// and b removed (term 4): the electorate is {c, d}, and every member c knew is gone.
    fn history(c: &crate::Core) -> Vec<Arc<Link>> {
        let v1 = c.electorate().unwrap().clone();
        let l2 = link(&v1, 2, &["a", "b", "c", "d"], &["a", "b"]);
        let l3 = link(&l2.electorate, 3, &["b", "c", "d"], &["a", "b", "d"]);
        let l4 = link(&l3.electorate, 4, &["c", "d"], &["b", "d"]);
        vec![l2, l3, l4]
    }

    fn heartbeat(term: u64, certified: u64, genesis: u64) -> Message {
        Message::Heartbeat {
            term,
            beat: 1,
            membership_version: certified,
            membership_term: term,
            genesis,
            electorate: None,
            certified,
        }
    }

    fn refusals(out: &[crate::Command]) -> Vec<Refusal> {
        out.iter()
            .filter_map(|c| match c {
                crate::Command::Notice(Notice::Refused { reason, .. }) => Some(*reason),
                _ => None,
            })
            .collect()
    }

    /// Rule 7: a voter that missed every change while every member it knew was retired asks
    /// the stranger whose heartbeat it refuses, checks the links from its own electorate, and
    /// takes the last at its proposing term; then it follows that admin.
    #[test]
    fn a_stale_voter_catches_up_along_links_from_a_stranger() {
        let mut c = voter("c", &["a", "b", "c"]);
        let links = history(&c);
        let genesis = c.electorate().unwrap().genesis;
        let out = c.step_vec(10, from("d", heartbeat(5, 4, genesis)));
        assert_eq!(refusals(&out), [Refusal::NotMember]);
        assert_eq!(sent_to(&out, "d"), [&Message::ChainRequest { after: 1 }]);
        let out = c.step_vec(
            11,
            from(
                "d",
                Message::Chain {
                    links: links.clone(),
                },
            ),
        );
        assert_eq!(refusals(&out), []);
        assert_eq!(c.electorate(), Some(&*links[2].electorate));
        assert_eq!((c.position(), c.term()), ((4, 4), 4));
        // It serves the links on, and now hears d's heartbeats.
        let out = c.step_vec(12, from("e", Message::ChainRequest { after: 2 }));
        assert_eq!(
            sent_to(&out, "e"),
            [&Message::Chain {
                links: links[1..].to_vec()
            }]
        );
        let out = c.step_vec(13, from("d", heartbeat(5, 4, genesis)));
        assert_eq!(refusals(&out), []);
        assert_eq!(c.admin().map(NodeId::as_str), Some("d"));
    }

    /// Against a colluding minority and a hostile worker: links signed by too few members of
    /// the electorate before, by strangers, or with signatures that do not fit are refused,
    /// and so is an answer nobody asked for; a chain is taken up to its first bad link.
    #[test]
    fn forged_or_unasked_links_are_refused_and_a_chain_is_taken_up_to_its_first_bad_link() {
        let mut c = voter("c", &["a", "b", "c"]);
        let good = history(&c);
        let v1 = c.electorate().unwrap().clone();
        let genesis = v1.genesis;
        // w announces newer links and c asks it; then w answers with `links` a moment later.
        let asked_then_answered = |c: &mut crate::Core, t, links: Vec<Arc<Link>>| {
            let out = c.step_vec(t, from("w", heartbeat(5, 4, genesis)));
            assert_eq!(sent_to(&out, "w").len(), 1, "asked w");
            refusals(&c.step_vec(t + 1, from("w", Message::Chain { links })))
        };
        // Unasked.
        let out = c.step_vec(
            5,
            from(
                "w",
                Message::Chain {
                    links: good.clone(),
                },
            ),
        );
        assert_eq!(refusals(&out), [Refusal::Unsolicited]);
        // Signatures of a majority, over another electorate than the one shown.
        let mut swapped = Link::clone(&good[0]);
        swapped.electorate = Arc::new(v1.successor(2, ids(&["a", "b", "w"])));
        let forgeries = [
            // A colluding minority (a alone) of {a, b, c}.
            link(&v1, 2, &["a", "w"], &["a"]),
            // A hostile worker signing for itself among members.
            link(&v1, 2, &["a", "w"], &["a", "w"]),
            Arc::new(swapped),
        ];
        let mut t = MIN;
        for forged in forgeries {
            t += MIN;
            let refused = asked_then_answered(&mut c, t, vec![forged]);
            assert_eq!(refused, [Refusal::BadCertificate]);
            assert_eq!(c.electorate(), Some(&v1));
        }
        // Two good links, then a forged one: it takes the two.
        let bad = link(&good[1].electorate, 4, &["c", "w"], &["w"]);
        let links = vec![good[0].clone(), good[1].clone(), bad];
        let refused = asked_then_answered(&mut c, t + MIN, links);
        assert_eq!(refused, [Refusal::BadCertificate]);
        assert_eq!(c.electorate(), Some(&*good[1].electorate));
        assert_eq!(c.position(), (3, 3));
    }
}
