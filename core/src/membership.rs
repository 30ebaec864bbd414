//! Membership changes: one voter added or removed at a time, by the admin, and autopilot.
//!
//! Rules, each checked by a test in this file or in `core/tests/membership.rs`:
//! 1. Only an admin proposes, only while it holds its lease, only once a majority has
//!    acknowledged a heartbeat of its term (so the electorate it was elected with is the
//!    cluster's), and only one change at a time.
//! 2. The admin adopts the new electorate at once (version + 1, stamped with its term) and
//!    carries it in every heartbeat until it commits. A receiver adopts it before it acknowledges,
//!    so an ack of a beat from the first such heartbeat on means "I hold the new electorate".
//! 3. The change commits once a majority of the old electorate *and* a majority of the new one
//!    hold it. Until then the lease and check-quorum need majorities of both. An admin that
//!    removed itself steps down once the change commits.
//! 4. Electorates are ordered by (version, proposing term). A voter grants (pre-)votes only to a
//!    candidate whose electorate is its own or later (`election.rs`).
//!
//! Why no old-version majority and new-version majority can both elect. Two electorates that
//! differ by one member have intersecting majorities: for `n` and `n + 1` members the two
//! quorums add up to more than the `n + 1` nodes there are. So in any one term the two cannot
//! both elect (each voter votes once per term). Across terms: once a change to version `v + 1`
//! commits, a majority of version `v` holds `v + 1` or later and refuses every candidate still on
//! `v`, so no candidate on `v` can win again, and the next change is only proposed after that.
//! A proposal that never committed (its admin died) is either carried on by a later admin that
//! holds it, or overwritten: an admin elected without it has an electorate a majority holds,
//! and a follower on an electorate from an older term than its admin's takes the admin's
//! (rule 5; the uncommitted one cannot have committed, or that admin could not have won).
//! 5. A follower takes the electorate of its term's admin — from a heartbeat during a change,
//!    or from a WHOAMI reply when its version differs — when it is later than its own, or when
//!    its own was proposed in an earlier term; never an older one from the admin of its own term
//!    (a delayed message). With no admin known, a node takes the next electorate (version + 1,
//!    one member apart) from an eligible member of its own (`discovery.rs`): a change cut short
//!    by its admin's death must not leave the two sides refusing each other's candidates.
//!
//! Autopilot (the admin, on each heartbeat): a standby — an eligible node outside the electorate
//! — connected for `stabilization_time_ms` is promoted while the electorate is below
//! `max_voters` (best score first); otherwise a voter not heard from for `dead_voter_timeout_ms`
//! is removed while at least `min_quorum` voters remain.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::node::PendingChange;
use crate::{Command, Core, Electorate, Message, NodeId, Notice, Role, StepDownReason};

/// At most this many forwarded change requests await their answer at one node (an operator
/// asks one at a time; the bound only keeps a flood of requests from growing the state).
pub(crate) const MAX_FORWARDED: usize = 64;

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

    /// Rule 5: takes `theirs`, the electorate of the admin of this node's term, if it is later
    /// than this node's or this node's came from an earlier term.
    pub(crate) fn follow_admin_electorate(
        &mut self,
        theirs: Arc<Electorate>,
        out: &mut Vec<Command>,
    ) {
        let take = match &self.electorate {
            None => false, // A node joins a cluster through discovery, not a heartbeat.
            Some(mine) => {
                mine.genesis == theirs.genesis
                    && mine.key() != theirs.key()
                    && (theirs.key() > mine.key() || mine.term < self.term)
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
        self.propose_announced(&change, requester, request, out)
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
        out: &mut Vec<Command>,
    ) -> Result<u64, ChangeRefusal> {
        let result = self.propose(change, requester, out);
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
        let result = self.propose_announced(&change, Some((from.clone(), request)), 0, out);
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
        if admin.change.is_some() {
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
        let new = Arc::new(old.successor(self.term, members));
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
        Ok(version)
    }

    /// Rule 3: commits the pending change once majorities of the old and the new electorate
    /// acknowledged a heartbeat that carried it.
    pub(crate) fn check_commit(&mut self, out: &mut Vec<Command>) {
        let (Some(admin), Some(new)) = (&self.admin_state, &self.electorate) else {
            return;
        };
        let Some(change) = &admin.change else { return };
        let holds = |e: &Electorate| {
            e.members()
                .iter()
                .filter(|m| {
                    admin
                        .voters
                        .get(*m)
                        .is_some_and(|v| v.beat >= change.from_beat)
                })
                .count()
                >= e.quorum()
        };
        if !(holds(new) && holds(&change.old)) {
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
                msg: Message::StepDown { term: self.term },
            });
        }
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
        let new = Arc::new(old.successor(self.term, vec![self.id.clone()]));
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
        if admin.change.is_some() || !admin.established || admin.lease_until_ms <= now {
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
                    !e.contains(id) && first + stab <= now && *last >= recent
                })
                .filter_map(|(id, _)| {
                    let p = self.peers.get(id)?;
                    (p.eligible() && p.up_since_ms() + stab <= now)
                        .then(|| (std::cmp::Reverse(p.score_at(now)), id))
                })
                .min()
                .map(|(_, id)| id.clone());
            if let Some(node) = best {
                return self.on_change_members(MemberChange::Add { node }, 0, out);
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
                return self.on_change_members(MemberChange::Remove { node }, 0, out);
            }
        }
        false
    }
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
