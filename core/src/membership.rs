//! Membership changes: one voter added or removed at a time, by the admin, and autopilot.
//!
//! Every node holds an electorate and a **position**: `(stamp, version)`, where `stamp` is the
//! last term whose admin confirmed that electorate to the node (the admin itself stamps its own
//! term when it wins). Positions order electorates as Raft's `(last log term, last log index)`
//! orders logs, and the protocol is Raft's single-server membership change with the log cut
//! down to its configuration entries (plus each term's no-op, which is the stamp). It is, rule
//! for rule, MongoDB's logless reconfiguration protocol (MongoRaftReconfig: config term and
//! version, the new primary rewriting the config term, the config quorum and term quorum
//! checks), whose safety was model-checked with TLC and proved in TLAPS (Schultz, Dimopoulos,
//! Schvimer, Sigman, Lamport — "Formal Verification of a Distributed Dynamic Reconfiguration
//! Protocol", CPP 2022), with a stricter commit rule (majorities of both electorates).
//!
//! Rules, each checked by a test in this file or in `core/tests/membership.rs`:
//! 1. A voter grants a (pre-)vote only to a candidate whose position is at least its own; at
//!    an equal position the electorates must be the same (`election.rs`). A candidate counts
//!    grants from members of its own electorate only, and a node whose electorate changes while
//!    it stands gives the round up (its grants were counted against the old one).
//! 2. The admin of term T holds position (T, v) from its election on. It is **established**
//!    once a majority of its electorate *holds* (T, v) — acknowledged a heartbeat of T saying
//!    so (`HeartbeatAck.holds`) — which is Raft's "an entry of my term is committed" (Ongaro's
//!    2015 fix to single-server changes).
//! 3. Only an established admin proposes, only while it holds its lease, only one change at a
//!    time, and only when a majority of the new electorate is following it now (etcd's strict
//!    reconfiguration check; the node being added counts). It adopts the new electorate at once
//!    (version + 1, proposing term T, position (T, v + 1)) and carries it in every heartbeat.
//! 4. The change commits once a majority of the old electorate *and* a majority of the new one
//!    hold (T, v + 1), and a majority of the new one holds its link (rule 7). Until then the
//!    lease and check-quorum need majorities of both. An admin that removed itself steps down
//!    once the change commits.
//! 5. A follower takes the electorate of the admin of its current term whenever it differs from
//!    its own — from a heartbeat carrying it, or from that admin's WHOAMI reply — except an
//!    older version from that same admin (a delayed message: the node's stamp is already this
//!    term). Holding the admin's electorate, it stamps the term. Besides, a member of a node's
//!    electorate may hand it an electorate at a later position, which it takes with that
//!    stamp, moving to the stamp's term first (`discovery.rs`; MongoRaftReconfig's
//!    SendConfig). Nobody else hands a node an electorate once it has one.
//! 6. So that the nodes holding a later electorate can win, a node hears (pre-)vote requests
//!    from an eligible peer outside its electorate that names a later position (a member added
//!    by a change it missed), and the heartbeats of the candidate it voted for (`trust.rs`).
//! 7. **Certified links** (`certificate.rs`, `catchup.rs`). A member signs the statement
//!    (genesis, version, proposing term, members) of every electorate it holds and sends the
//!    signature with the acknowledgement that says it holds it; the admin commits a change only
//!    with such endorsements from a majority of the old electorate, and keeps them as the new
//!    electorate's *link*. Every node keeps an *anchor* — the newest electorate it can vouch
//!    for: its first one, then each link it checked — and the links after it. A node behind a
//!    heartbeat's or an acknowledgement's certified version asks for the links after its
//!    anchor, checks each against the one before (the next version of its cluster, signed by
//!    distinct members making a majority of its predecessor, every signature good), and takes
//!    the last like any later position (rule 5's second half), stamped with its proposing
//!    term. A node that refuses a heartbeat as `not_member` asks its sender the same way: so a
//!    voter that missed any number of changes, while every member it knew was retired, catches
//!    up from whoever reaches it (`sim/reproducers/stale-voter-rolling.toml`).
//!    A link made by the admin alone dies with it (a retiring admin stopped right after its own
//!    removal, a crash within a heartbeat): the admin names a new link in a heartbeat at once,
//!    its followers fetch it and acknowledge again, and the change counts as committed — to
//!    the operator, and for the next change — only once a majority of the new electorate holds
//!    the link. An admin elected on an electorate whose link it does not hold (its proposer died
//!    between making the link and spreading it) makes it itself from its voters' endorsements,
//!    checked from its anchor like any link, and proposes nothing until a majority holds it.
//!    So every committed link is held by a majority of its electorate
//!    (`sim/reproducers/lost-link-rolling.toml`; issue 51, finding 9).
//!
//! Trust (who may tell a node what): members are trusted to tell the truth about positions
//! (they are trusted with votes anyway). A link needs no trust in whoever hands it over:
//! * a **hostile worker** (or any non-member) can hand a node only links that check, because
//!   its own signature counts for nothing (it is no member of any predecessor) and it cannot
//!   sign for a member (an Ed25519 key is the peer id; the simulator's names use a keyed hash
//!   that stands for a signature among honest simulated nodes and is never accepted from a peer
//!   id). It can withhold links, or answer a question with garbage, refused as
//!   `bad_certificate` and counted; the node asks again, one question at a time.
//! * a **colluding minority** of an electorate cannot certify a successor of its own making:
//!   a link needs a majority of the predecessor. With a majority of every electorate honest, a
//!   link exists only for an electorate an honest majority held — one an established admin
//!   proposed — which rule 5 would hand the node anyway; so what a node takes from a chain is
//!   what the cluster's own history holds, and the argument below covers it.
//! * still trusted on first use: a node's first electorate (bootstrap's agreement, or
//!   discovery's confirmations from `confirmations` peers) and a forced recovery's (the
//!   operator's word; nodes of the old electorate cannot check it and are added back by hand).
//!   Rule 6 listens to an *eligible* non-member about its *position*, which is not yet signed:
//!   a peer that lies about a later position can collect votes and be followed. It cannot make
//!   two honest admins of one term; it can keep a cluster from electing one.
//! * not kept for ever: a node keeps the newest 1,024 links; a node further behind, whose old
//!   members are all gone, is started afresh by its operator. A link lives at the majority of
//!   its electorate that held it when it committed, and at every node that fetched it since
//!   (followers and standbys fetch every link their admin names). A node that joined later
//!   holds only the links after the electorate it joined with: if every node that holds an
//!   old link is retired while a voter that needs it is down, that voter is started afresh.
//!
//! Why no two admins of one term, whatever the changes (the argument a reviewer should attack;
//! `chorus-mc` checks it on small clusters):
//!
//! * *Positions only grow at a node.* A stamp changes only to the term of the admin the node
//!   follows, which is its current term, at least any stamp it held, or to a later position
//!   handed over (rule 5's second half, rule 7: taken only when later, and then (s, v) is a
//!   position the admin of s held with that very electorate); within one stamp the version
//!   only grows (rule 5's exception). So a node that held (T, v) holds (T, v) or later from
//!   then on — and it stays durable, being a fold of the logged events.
//! * *One position, one electorate.* Positions with stamp T are made only by the admin of T
//!   (rule 2, 3, 5), and that admin's versions grow one by one: two nodes at the same position
//!   hold the same electorate, if one admin per term holds up to T (induction on terms).
//! * *Every later admin holds every committed electorate, or a descendant.* Let C, at (T, v),
//!   be committed: a majority of C holds (T, v) or later. Take the first term T' > T whose
//!   admin's electorate E' does not descend from C. Its voters held positions at most E''s
//!   position (s', v') (rule 1), and E' and C are one member apart or equal, or descend from
//!   a common committed electorate by changes that each waited for the one before (rules 3, 4),
//!   so a majority of E' meets the majority of C that holds (T, v): s' ≥ T. If s' = T, E' is a
//!   version ≥ v of admin T's chain, which passes through C. If s' > T, E' came from the admin
//!   of s' < T', which by choice of T' holds a descendant of C, and only extends it. Either
//!   way E' descends from C: a contradiction.
//! * *Hence two uncommitted siblings cannot both elect.* Siblings at version v + 1 proposed in
//!   terms T1 < T2 (finding 1 of issue 32): the admin of T2 proposed its sibling only once
//!   established, i.e. once a majority of its electorate held (T2, v). Any candidate still on
//!   T1's sibling has position (T1, v + 1) < (T2, v) and is refused by that majority, so it
//!   can win only with a majority of T1's sibling that does not meet it — impossible, as the
//!   two electorates are each one member from v, and their majorities meet the majority of v
//!   that holds (T2, v). Under the old order (version first) the T1 sibling ranked ahead of
//!   (T2, v) and that majority granted it: two admins of term 3, for good. Chains of
//!   uncommitted siblings reduce to this case one link at a time, each admin proposing only
//!   after its own term's position is held by a majority.
//!
//! Two admins of one term can then only come from a bug or broken clocks; should they meet,
//! the one that hears the other steps down (`conflicting_admin`) and a higher term decides.
//!
//! Autopilot (the admin, on each heartbeat): a standby — an eligible node outside the electorate
//! that holds the admin's electorate — connected for `stabilization_time_ms` is promoted while
//! the electorate is below `max_voters` (best score first); otherwise a voter not heard from for
//! `dead_voter_timeout_ms` is removed while at least `min_quorum` voters remain. Both go through
//! rule 3.
//!
//! The operator's word wins over autopilot's: an operator's removal (`chorus members remove`,
//! or `leave` at the node itself) puts the node in the new electorate's `retired` list, which
//! every later electorate carries until an operator's `add` takes it off. Autopilot never
//! promotes a retired node, at this admin or at any later one: the list is part of the
//! electorate, so it is committed, signed (rule 7) and held by every admin that follows (the
//! argument above). A dead voter autopilot removed is not retired: it is promoted again when
//! it comes back. A node started afresh (a new data dir, hence a new id) is a new node.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::heartbeat::VoterAck;
use crate::{Command, Core, Electorate, Message, NodeId, Notice, Role, StepDownReason};

/// A membership change proposed and not yet committed: `electorate` is already the new one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingChange {
    /// The electorate before the change.
    pub(crate) old: Arc<Electorate>,
    /// The first heartbeat that carried the new electorate: a voter that acknowledged it or
    /// a later one holds the new electorate.
    pub(crate) from_beat: u64,
    /// Who asked for it: the node and its request id, answered when the change commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) requested_by: Option<(NodeId, u64)>,
}

/// At most this many forwarded change requests await their answer at one node (an operator
/// asks one at a time; the bound only keeps a flood of requests from growing the state).
pub(crate) const MAX_FORWARDED: usize = 64;

/// Who asked for a change: an operator's removal is kept in the electorate (`retired`), so that
/// autopilot, at this admin or any later one, never undoes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `chorus members add|remove|leave`, at this node or forwarded by another.
    Operator,
    /// This admin's autopilot.
    Autopilot,
}

/// A change of one voter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MemberChange {
    /// Make an eligible node a voter.
    Add {
        /// The node.
        node: NodeId,
    },
    /// Make a voter a standby (or forget it, if it is gone).
    Remove {
        /// The node.
        node: NodeId,
    },
}

impl MemberChange {
    /// The node the change is about.
    pub fn node(&self) -> &NodeId {
        match self {
            MemberChange::Add { node } | MemberChange::Remove { node } => node,
        }
    }
}

/// What became of a requested change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ChangeOutcome {
    /// Forwarded by a node that is not the admin to the admin it follows.
    Forwarded {
        /// The admin asked.
        admin: NodeId,
    },
    /// Proposed: version `version` is being committed.
    Proposed {
        /// The new electorate's version.
        version: u64,
    },
    /// Committed: a majority of the old and of the new electorate hold `version`.
    Committed {
        /// The committed version.
        version: u64,
    },
    /// Not proposed.
    Refused {
        /// Why.
        reason: ChangeRefusal,
    },
}

/// Why a change was not proposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeRefusal {
    /// The node asked is not the admin (it was when the request was sent, or it stepped down).
    NotAdmin,
    /// No admin is known to forward the request to.
    NoAdmin,
    /// Asked at a worker: only voters and admin-eligible nodes may ask for changes.
    AskAVoter,
    /// The admin's lease is not valid now.
    NoLease,
    /// No majority has acknowledged a heartbeat of this admin's term yet.
    NotEstablished,
    /// Another change is being committed.
    ChangePending,
    /// `add` of a node that is a voter already.
    AlreadyVoter,
    /// `remove` of a node that is not a voter.
    NotVoter,
    /// `add` of a node that is not connected and admin-eligible.
    NotEligible,
    /// `remove` of the last voter.
    LastVoter,
    /// The electorate version reached the wire's limit (2⁵³ − 1); no change can follow.
    VersionExhausted,
    /// A majority of the electorate the change would make is not following this admin now.
    NewMajorityNotFollowing,
}

impl ChangeRefusal {
    /// A sentence for operators.
    pub fn explain(self) -> &'static str {
        match self {
            ChangeRefusal::NotAdmin => "the node asked is no longer the admin; retry",
            ChangeRefusal::NoAdmin => "no admin is known (an election is running?); retry shortly",
            ChangeRefusal::AskAVoter => {
                "this node is a worker; ask a voter or an admin-eligible node (its --addr)"
            }
            ChangeRefusal::NoLease => "the admin's lease is not valid now; retry shortly",
            ChangeRefusal::NotEstablished => {
                "the admin was just elected and no majority has acknowledged it yet; retry shortly"
            }
            ChangeRefusal::ChangePending => "another membership change is being committed",
            ChangeRefusal::AlreadyVoter => "the node is a voter already",
            ChangeRefusal::NotVoter => "the node is not a voter",
            ChangeRefusal::NotEligible => {
                "the node is not connected to the admin or does not advertise admin_election"
            }
            ChangeRefusal::LastVoter => "the last voter cannot be removed",
            ChangeRefusal::VersionExhausted => {
                "the electorate version reached its limit (2^53 - 1); no further change is possible"
            }
            ChangeRefusal::NewMajorityNotFollowing => {
                "a majority of the electorate after the change is not following the admin now (down, cut off, or behind); it could never commit"
            }
        }
    }
}

impl Core {
    /// The electorate to carry in heartbeats: the new one while a change is being committed.
    pub(crate) fn pending_electorate(&self) -> Option<Arc<Electorate>> {
        let pending = self.admin_state.as_ref()?.change.is_some();
        pending.then(|| self.electorate.clone()).flatten()
    }

    /// Whether `id` is a voter whose acknowledgements count: a member of this node's
    /// electorate, or, while this admin commits a change, of the electorate before it.
    pub(crate) fn counts_as_voter(&self, id: &NodeId) -> bool {
        self.is_member(id)
            || self
                .admin_state
                .as_ref()
                .and_then(|a| a.change.as_ref())
                .is_some_and(|c| c.old.contains(id))
    }

    /// Rule 5: takes `theirs`, the electorate of the admin of this node's term, whenever it
    /// differs from this node's — Raft's follower replacing its log's tail with its leader's
    /// — except a delayed message of that admin's naming an older version than one this node
    /// already holds from the same admin (its stamp is this term).
    pub(crate) fn follow_admin_electorate(
        &mut self,
        theirs: Arc<Electorate>,
        out: &mut Vec<Command>,
    ) {
        let take = match &self.electorate {
            None => false, // A node joins a cluster through discovery, not a heartbeat.
            Some(mine) => {
                let delayed = self.stamp == self.term && mine.version > theirs.version;
                mine.genesis == theirs.genesis && mine.key() != theirs.key() && !delayed
            }
        };
        if take {
            self.set_electorate(theirs, out);
        }
    }

    /// An operator's request at this node (`request` is echoed in the notices about it), or
    /// autopilot's (`request` 0). The admin proposes it; any other node forwards it to the admin
    /// it follows, whose [`Message::ChangeResult`] comes back as a notice with the same
    /// `request`. Returns whether this node proposed the change (and so sent a heartbeat).
    pub(crate) fn on_change_members(
        &mut self,
        change: MemberChange,
        request: u64,
        origin: Origin,
        out: &mut Vec<Command>,
    ) -> bool {
        if self.role != Role::Admin {
            let outcome = match self.admin.clone().filter(|a| *a != self.id) {
                // The admin takes requests only from voters and eligible nodes (trust.rs), so a
                // worker says so at once instead of forwarding into silence.
                Some(_) if !self.is_eligible() && !self.is_member(&self.id) => {
                    ChangeOutcome::Refused {
                        reason: ChangeRefusal::AskAVoter,
                    }
                }
                Some(admin) => {
                    if self.forwarded.len() >= MAX_FORWARDED {
                        self.forwarded.pop_first();
                    }
                    self.forwarded.insert(request, admin.clone());
                    out.push(Command::Send {
                        to: admin.clone(),
                        msg: Message::ChangeRequest {
                            request,
                            change: change.clone(),
                        },
                    });
                    ChangeOutcome::Forwarded { admin }
                }
                None => ChangeOutcome::Refused {
                    reason: ChangeRefusal::NoAdmin,
                },
            };
            out.push(Command::Notice(Notice::MembershipChange {
                change,
                outcome,
                request,
            }));
            return false;
        }
        let requester = (request != 0).then(|| (self.id.clone(), request));
        self.propose_announced(&change, requester, request, origin, out)
            .is_ok()
    }

    /// Proposes `change` for `requester`, says what became of it (a notice carrying
    /// `request`), and sends the heartbeat that carries a proposed change now, not at the next
    /// interval.
    fn propose_announced(
        &mut self,
        change: &MemberChange,
        requester: Option<(NodeId, u64)>,
        request: u64,
        origin: Origin,
        out: &mut Vec<Command>,
    ) -> Result<u64, ChangeRefusal> {
        let result = self.propose(change, requester, origin, out);
        out.push(Command::Notice(Notice::MembershipChange {
            change: change.clone(),
            outcome: outcome_of(result),
            request,
        }));
        if result.is_ok() {
            self.send_heartbeat(out);
        }
        result
    }

    /// A change forwarded by `from`. Only a voter or an admin-eligible peer may ask (an
    /// operator at a worker is told to ask a voter); the answer goes back now if refused, or
    /// when the change commits.
    pub(crate) fn on_change_request(
        &mut self,
        from: NodeId,
        request: u64,
        change: MemberChange,
        out: &mut Vec<Command>,
    ) {
        let may_ask =
            self.counts_as_voter(&from) || self.peers.get(&from).is_some_and(|p| p.eligible());
        if !may_ask {
            self.refuse(from, "change_request", crate::Refusal::NotEligible, out);
            return;
        }
        // Only an operator's request is forwarded: autopilot runs at the admin alone.
        let requester = Some((from.clone(), request));
        let result = self.propose_announced(&change, requester, 0, Origin::Operator, out);
        if let Err(reason) = result {
            out.push(Command::Send {
                to: from,
                msg: Message::ChangeResult {
                    request,
                    change,
                    outcome: ChangeOutcome::Refused { reason },
                },
            });
        }
    }

    /// The admin's answer to a request this node forwarded to it; any other (unasked, from
    /// another node, or a second answer) is refused. A refused or committed change is settled.
    pub(crate) fn on_change_result(
        &mut self,
        from: NodeId,
        request: u64,
        change: MemberChange,
        outcome: ChangeOutcome,
        out: &mut Vec<Command>,
    ) {
        let settles = matches!(
            outcome,
            ChangeOutcome::Committed { .. } | ChangeOutcome::Refused { .. }
        );
        if self.forwarded.get(&request) != Some(&from) || !settles {
            return self.refuse(from, "change_result", crate::Refusal::Unsolicited, out);
        }
        self.forwarded.remove(&request);
        out.push(Command::Notice(Notice::MembershipChange {
            change,
            outcome,
            request,
        }));
    }

    fn propose(
        &mut self,
        change: &MemberChange,
        requested_by: Option<(NodeId, u64)>,
        origin: Origin,
        out: &mut Vec<Command>,
    ) -> Result<u64, ChangeRefusal> {
        let now = self.now_ms;
        if self.role != Role::Admin {
            return Err(ChangeRefusal::NotAdmin);
        }
        let Some(admin) = &self.admin_state else {
            return Err(ChangeRefusal::NotAdmin);
        };
        if admin.lease_until_ms <= now {
            return Err(ChangeRefusal::NoLease);
        }
        if !admin.established {
            return Err(ChangeRefusal::NotEstablished);
        }
        if !self.electorate_settled() {
            // The last change, or its link's spread to a majority, is still under way.
            return Err(ChangeRefusal::ChangePending);
        }
        let Some(old) = self.electorate.clone() else {
            return Err(ChangeRefusal::NotAdmin);
        };
        let mut members = old.members().to_vec();
        match change {
            MemberChange::Add { node } => {
                if old.contains(node) {
                    return Err(ChangeRefusal::AlreadyVoter);
                }
                if !self.peers.get(node).is_some_and(|p| p.eligible()) {
                    return Err(ChangeRefusal::NotEligible);
                }
                members.push(node.clone());
            }
            MemberChange::Remove { node } => {
                if !old.contains(node) {
                    return Err(ChangeRefusal::NotVoter);
                }
                if old.len() == 1 {
                    return Err(ChangeRefusal::LastVoter);
                }
                members.retain(|m| m != node);
            }
        }
        if old.version >= crate::MAX_WIRE_INT {
            return Err(ChangeRefusal::VersionExhausted);
        }
        // etcd's strict reconfiguration check: the new electorate's majority must be following
        // this admin now (acknowledged lately, holding its electorate), or the change could
        // never commit and, the lease needing both majorities meanwhile, would stall the
        // cluster. As in etcd, a node being added counts as following (it is connected and
        // eligible, checked above).
        let recent = now.saturating_sub(self.config.election_timeout_min_ms);
        let key = old.key();
        let added = match change {
            MemberChange::Add { node } => Some(node),
            MemberChange::Remove { .. } => None,
        };
        let following = members
            .iter()
            .filter(|m| {
                **m == self.id
                    || Some(*m) == added
                    || admin
                        .voters
                        .get(*m)
                        .is_some_and(|v| v.holds == Some(key) && v.sent_at_ms >= recent)
                    || admin
                        .standbys
                        .get(*m)
                        .is_some_and(|(_, last)| *last >= recent)
            })
            .count();
        if following < members.len() / 2 + 1 {
            return Err(ChangeRefusal::NewMajorityNotFollowing);
        }
        let retired = retired_after(&old, change, origin);
        let new = Arc::new(old.successor(self.term, members).with_retired(retired));
        let version = new.version;
        let from_beat = self.beat + 1;
        if let Some(admin) = &mut self.admin_state {
            admin.change = Some(PendingChange {
                old,
                from_beat,
                requested_by,
            });
        }
        self.set_electorate(new, out);
        self.cut_lease_to_promises(out);
        Ok(version)
    }

    /// A lease stands on the promises of a majority of the electorate it was earned with.
    /// Once a change is proposed only the promises of the electorates in force count (both,
    /// until it commits), so the lease is cut to what they support. One change keeps every
    /// new majority meeting the old promisers, but two do not: a lease the founder of a
    /// cluster grown from one voter granted itself alone outlived the two changes that made
    /// {n0, n1, n2}, and n1 and n2 elected another admin while it ran (`chorus-sim fuzz`,
    /// seed 341872: invariant 2).
    fn cut_lease_to_promises(&mut self, out: &mut Vec<Command>) {
        let (now, term) = (self.now_ms, self.term);
        let supported = self.tally().map_or(now, |t| t.lease_until_ms.max(now));
        let Some(admin) = &mut self.admin_state else {
            return;
        };
        if supported >= admin.lease_until_ms {
            return;
        }
        admin.lease_until_ms = supported;
        if supported > now {
            // Reported as a renewal (its end is what it is now, earlier than before).
            out.push(Command::Notice(Notice::LeaseRenewed {
                term,
                lease_until_ms: supported,
            }));
            self.timers.set(crate::Timer::Lease, supported, out);
        } else {
            out.push(Command::Notice(Notice::LeaseExpired { term }));
            self.timers.cancel(crate::Timer::Lease, out);
        }
    }

    /// Rule 4: commits the pending change once majorities of the old and the new electorate
    /// hold it, the old majority's endorsements making its link (rule 7).
    pub(crate) fn check_commit(&mut self, out: &mut Vec<Command>) {
        let (Some(admin), Some(new)) = (&self.admin_state, &self.electorate) else {
            return;
        };
        let Some(change) = &admin.change else {
            return self.make_missing_link(out);
        };
        if self.certified() < new.version {
            let Some(link) = self.endorsed_link(&change.old, change.from_beat) else {
                return;
            };
            self.certify(Arc::new(link));
            // Heard at once: the followers ask for the link, and acknowledge again once they
            // hold it.
            self.send_heartbeat(out);
        }
        // A link held by the admin alone dies with it (a retiring admin stopped right after
        // its own removal, a crash within a heartbeat): the change counts as committed, to
        // the operator and for the next change, once a majority of the new electorate holds
        // it (issue 51, finding 9).
        let (Some(admin), Some(new)) = (&self.admin_state, &self.electorate) else {
            return;
        };
        let Some(change) = &admin.change else { return };
        if !self.link_spread(new) {
            return;
        }
        let (version, removed_self) = (new.version, !new.contains(&self.id));
        let change_done = diff(&change.old, new);
        let requested_by = change.requested_by.clone();
        if let Some(admin) = &mut self.admin_state {
            admin.change = None;
        }
        if let Some(change) = change_done {
            let outcome = ChangeOutcome::Committed { version };
            let request = match requested_by {
                Some((node, request)) if node == self.id => request,
                Some((node, request)) => {
                    out.push(Command::Send {
                        to: node,
                        msg: Message::ChangeResult {
                            request,
                            change: change.clone(),
                            outcome: outcome.clone(),
                        },
                    });
                    0
                }
                None => 0,
            };
            out.push(Command::Notice(Notice::MembershipChange {
                change,
                outcome,
                request,
            }));
        }
        if removed_self {
            // Its own removal committed: hand over at once, as a graceful shutdown does.
            self.step_down(StepDownReason::Removed, out);
            out.push(Command::Broadcast {
                msg: Message::StepDown {
                    term: self.term,
                    successor: None,
                },
            });
        }
    }

    /// The link of the electorate this admin holds, from the endorsements of a majority of
    /// `old` (its predecessor) in acknowledgements of beat `from_beat` or later that hold it,
    /// if a majority of it holds it too (rule 4); `None` until then.
    fn endorsed_link(&self, old: &Electorate, from_beat: u64) -> Option<crate::Link> {
        let (admin, new) = (self.admin_state.as_ref()?, self.electorate.as_ref()?);
        let key = new.key();
        let holding = |v: &VoterAck| v.beat >= from_beat && v.holds == Some(key);
        let holds = new
            .members()
            .iter()
            .filter(|m| admin.voters.get(*m).is_some_and(holding))
            .count();
        // The old majority's endorsements are the new electorate's link (rule 7): a voter that
        // misses this change checks it with them, from whoever hands it over.
        let signers: Vec<_> = old
            .members()
            .iter()
            .filter_map(|m| {
                if *m == self.id {
                    // Its own, signed since the heartbeat that recorded it.
                    return Some((m.clone(), self.own_endorsement()?));
                }
                let v = admin.voters.get(m).filter(|v| holding(v))?;
                Some((m.clone(), v.endorsement.clone()?))
            })
            .collect();
        (holds >= new.quorum() && signers.len() >= old.quorum()).then(|| crate::Link {
            electorate: new.clone(),
            signers,
        })
    }

    /// Whether a majority of `e` holds its link (this admin by its chain, the others by their
    /// acknowledgements): then it outlives any one node.
    fn link_spread(&self, e: &Electorate) -> bool {
        let Some(admin) = &self.admin_state else {
            return false;
        };
        let holding = e
            .members()
            .iter()
            .filter(|m| {
                if **m == self.id {
                    self.certified() >= e.version
                } else {
                    admin
                        .voters
                        .get(*m)
                        .is_some_and(|v| v.certified >= e.version)
                }
            })
            .count();
        holding >= e.quorum()
    }

    /// Whether the electorate this admin holds is settled: no change pending, and its link
    /// (none for the first electorate) held by a majority of it. Only then is the next change
    /// proposed, so no link is ever held by fewer than a majority of its electorate.
    pub(crate) fn electorate_settled(&self) -> bool {
        let (Some(admin), Some(e)) = (&self.admin_state, &self.electorate) else {
            return false;
        };
        admin.change.is_none() && self.certified() >= e.version && self.link_spread(e)
    }

    /// An established admin whose electorate has no link yet — its proposer certified it and
    /// died before any follower fetched the link, or never finished — makes the link itself
    /// from its voters' endorsements, exactly as the proposer would have: the signatures of a
    /// majority of its anchor (the electorate before, which it can vouch for) over the
    /// electorate they now hold. Checked as any node checks a link.
    fn make_missing_link(&mut self, out: &mut Vec<Command>) {
        let (Some(admin), Some(e), Some(anchor)) =
            (&self.admin_state, &self.electorate, &self.chain.anchor)
        else {
            return;
        };
        if !admin.established || anchor.version + 1 != e.version {
            return;
        }
        let Some(link) = self.endorsed_link(anchor, admin.first_beat) else {
            return;
        };
        if link.check(anchor, crate::certificate::verify).is_err() {
            return;
        }
        self.certify(Arc::new(link));
        self.send_heartbeat(out);
    }

    /// Whether [`Event::ForceNewElectorate`](crate::Event::ForceNewElectorate) would act, and
    /// if not, why (a sentence for operators).
    pub fn check_force_new_electorate(&self) -> Result<(), &'static str> {
        let Some(e) = &self.electorate else {
            return Err("this node never joined a cluster: start it normally instead");
        };
        if !self.is_eligible() {
            return Err("this node is a worker (no admin_election): run it on a voter");
        }
        if e.version >= crate::MAX_WIRE_INT || self.term >= crate::MAX_WIRE_INT {
            return Err("the term or electorate version reached its limit (2^53 - 1)");
        }
        Ok(())
    }

    /// Operator recovery: the electorate becomes this node alone, version + 1, proposed in a
    /// new term (so it orders after every electorate of the old terms and this node's own
    /// election cannot collide with an old vote).
    pub(crate) fn force_new_electorate(&mut self, out: &mut Vec<Command>) {
        if self.check_force_new_electorate().is_err() {
            return;
        }
        let Some(old) = self.electorate.clone() else {
            return;
        };
        self.observe_term(self.term + 1, out);
        // A node an operator removed, forced back as the only voter, is retired no more.
        let retired = old.retired().iter().filter(|r| **r != self.id).cloned();
        let new = old.successor(self.term, vec![self.id.clone()]);
        let new = Arc::new(new.with_retired(retired.collect()));
        // The operator vouches for it: no majority of the old electorate endorsed it, so nodes
        // of the old one cannot check it and are added back by hand.
        self.chain.anchor = Some(new.clone());
        self.set_electorate(new, out);
    }

    /// Autopilot: at most one change per heartbeat, only when a change could be proposed.
    /// Returns whether it proposed one (and so sent a heartbeat).
    pub(crate) fn autopilot(&mut self, out: &mut Vec<Command>) -> bool {
        if !self.config.autopilot || self.role != Role::Admin {
            return false;
        }
        let Some(admin) = &self.admin_state else {
            return false;
        };
        let Some(e) = &self.electorate else {
            return false;
        };
        let now = self.now_ms;
        if !admin.established || admin.lease_until_ms <= now || !self.electorate_settled() {
            return false;
        }
        let max = self.config.max_voters as usize;
        if max == 0 || e.len() < max {
            // Stable: connected, and following this admin, for the stabilization time.
            let stab = self.config.stabilization_time_ms;
            let recent = now.saturating_sub(2 * self.config.heartbeat_interval_ms);
            let best = admin
                .standbys
                .iter()
                .filter(|(id, (first, last))| {
                    // An operator's removal stands until an operator adds the node back.
                    !e.contains(id) && !e.is_retired(id) && first + stab <= now && *last >= recent
                })
                .filter_map(|(id, _)| {
                    let p = self.peers.get(id)?;
                    (p.eligible() && p.up_since_ms() + stab <= now)
                        .then(|| (std::cmp::Reverse(p.score_at(now)), id))
                })
                .min()
                .map(|(_, id)| id.clone());
            if let Some(node) = best {
                return self.on_change_members(
                    MemberChange::Add { node },
                    0,
                    Origin::Autopilot,
                    out,
                );
            }
        }
        if e.len() > self.config.min_quorum as usize {
            let dead_timeout = self.config.dead_voter_timeout_ms;
            let dead = e
                .members()
                .iter()
                .filter(|m| **m != self.id)
                .map(|m| {
                    let heard = admin.voters.get(m).map_or(admin.elected_at_ms, |v| {
                        v.sent_at_ms.max(admin.elected_at_ms)
                    });
                    (heard, m)
                })
                .filter(|(heard, _)| heard + dead_timeout <= now)
                .min()
                .map(|(_, m)| m.clone());
            if let Some(node) = dead {
                return self.on_change_members(
                    MemberChange::Remove { node },
                    0,
                    Origin::Autopilot,
                    out,
                );
            }
        }
        false
    }
}

/// The operator-removed ids after `change`: an operator's removal adds its node (the oldest
/// forgotten beyond [`crate::MAX_RETIRED`]); any add, the operator's or autopilot's, takes its
/// node off (autopilot never adds a retired node, so that is the operator's word again).
fn retired_after(old: &Electorate, change: &MemberChange, origin: Origin) -> Vec<NodeId> {
    let mut retired: Vec<NodeId> = old
        .retired()
        .iter()
        .filter(|r| *r != change.node())
        .cloned()
        .collect();
    if let (MemberChange::Remove { node }, Origin::Operator) = (change, origin) {
        retired.push(node.clone());
        let over = retired.len().saturating_sub(crate::MAX_RETIRED);
        retired.drain(..over);
    }
    retired
}

fn outcome_of(result: Result<u64, ChangeRefusal>) -> ChangeOutcome {
    match result {
        Ok(version) => ChangeOutcome::Proposed { version },
        Err(reason) => ChangeOutcome::Refused { reason },
    }
}

/// The one-voter change from `old` to `new`, if they differ by one.
fn diff(old: &Electorate, new: &Electorate) -> Option<MemberChange> {
    if let Some(node) = new.members().iter().find(|m| !old.contains(m)) {
        return Some(MemberChange::Add { node: node.clone() });
    }
    old.members()
        .iter()
        .find(|m| !new.contains(m))
        .map(|node| MemberChange::Remove { node: node.clone() })
}

#[cfg(test)]
mod force_tests {
    use crate::testutil::*;
    use crate::{Event, NodeId, Notice, Role, Timer};

    const ABC: &[&str] = &["a", "b", "c"];

    /// Operator recovery: a stopped survivor of {a, b, c} forced to {a} alone, one version
    /// later in a new term, elects itself once started, with no other vote.
    #[test]
    fn a_forced_survivor_elects_itself_alone() {
        let mut a = elect("a", ABC, &["b"]);
        a.step_vec(a.now_ms() + 10, Event::Shutdown);
        let (term, t) = (a.term(), a.now_ms() + 10);
        assert!(a.check_force_new_electorate().is_ok());
        let out = a.step_vec(t, Event::ForceNewElectorate);
        let e = a.electorate().expect("electorate");
        assert_eq!(
            (e.version, e.term, e.members()),
            (2, term + 1, &[NodeId::from("a")][..])
        );
        assert_eq!(a.term(), term + 1);
        assert_eq!(a.voted_for(), None);
        assert!(
            out.contains(&crate::Command::Notice(Notice::ElectorateChanged {
                version: 2,
                term: term + 1,
                members: vec!["a".into()].into(),
            }))
        );
        a.step_vec(t + 10, Event::Started);
        fire(&mut a, Timer::Discovery);
        fire(&mut a, Timer::Election);
        if a.role() != Role::Admin {
            fire(&mut a, Timer::Election);
        }
        assert_eq!(a.role(), Role::Admin, "a quorum of one");
    }

    /// A standby an operator removed, forced as the survivor, is taken off the retired list;
    /// the other removals stand.
    #[test]
    fn a_forced_survivor_is_retired_no_more() {
        let mut x = node_with(
            "x",
            ABC,
            vec![crate::ADMIN_ELECTION.to_owned()],
            crate::Config::default(),
        );
        let e = crate::Electorate::new(1, ["a", "b", "c"].map(NodeId::from).to_vec());
        let retired = e.successor(2, ["a", "b", "c"].map(NodeId::from).to_vec());
        x.set_electorate_for_test(retired.with_retired(vec!["d".into(), "x".into()]));
        x.step_vec(10, Event::Shutdown);
        x.step_vec(20, Event::ForceNewElectorate);
        let e = x.electorate().expect("electorate");
        assert_eq!(e.members(), &[NodeId::from("x")][..]);
        assert_eq!(e.retired(), &[NodeId::from("d")][..]);
    }

    /// Nothing to force on a node that never joined a cluster or that is a worker; the event
    /// changes nothing there.
    #[test]
    fn force_is_refused_without_an_electorate_or_on_a_worker() {
        let mut fresh = crate::Core::new(
            "x".into(),
            crate::Config::default(),
            vec![crate::ADMIN_ELECTION.to_owned()],
            1,
        )
        .unwrap();
        assert!(fresh.check_force_new_electorate().is_err());
        fresh.step_vec(0, Event::ForceNewElectorate);
        assert!(fresh.electorate().is_none());
        assert_eq!(fresh.term(), 0);

        let mut w = node_with("w", ABC, vec!["docker".into()], crate::Config::default());
        assert!(w.check_force_new_electorate().is_err());
        w.step_vec(5, Event::ForceNewElectorate);
        assert_eq!(w.electorate().map(|e| e.version), Some(1));
    }
}
