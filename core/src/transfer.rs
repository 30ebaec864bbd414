//! Handover: an admin that stops (gracefully) or is asked to (`chorus members transfer`) hands
//! its office to one up-to-date voter directly, as Raft's leadership transfer does, instead of
//! leaving the cluster to a ranked election.
//!
//! Rules (docs/design.md §4.4, Handover), each checked by a test in this file or
//! `core/tests/handover.rs`:
//! 1. The admin picks the target: the asked voter, or else the best-ranked voter whose newest
//!    acknowledgement holds the admin's electorate and still promises (it is up to date and
//!    alive). It refuses a target that is not such a voter.
//! 2. The admin gives its lease up **before** anything leaves: it steps down (no admin duty
//!    after this step), ends its own promise, tells every node (`step_down`: broadcast, and sent
//!    to each voter directly as heartbeats are, since a broadcast may go by gossip that a
//!    leaving node cannot wait out), then tells the target (`timeout_now`).
//! 3. A target stands at once, without pre-vote or rank delay, in the next term, only when the
//!    sender is the admin it follows, or the admin whose step-down it just heard, of its own
//!    term. Its vote request carries `transfer`. The step-down names the target too
//!    (`successor`), and whichever of the two arrives first starts the vote: they travel
//!    different ways (broadcast, direct), so either may be late or lost.
//! 4. `transfer` never makes a voter break a promise. A voter whose promise to its admin still
//!    runs keeps the request (one, the newest) instead of refusing it, and answers it when that
//!    admin's step-down arrives, which ends the promise; the step-down and the request travel
//!    different ways and may cross. A step-down that never comes leaves the request to the
//!    promise's own end (the suspect timer), where it is answered before this node thinks of
//!    standing itself. Anything else about the request is judged as usual.
//! 5. The step-down names the successor. Every other node gives it one minimum election timeout
//!    to win before standing itself (a node whose rank slot came first would otherwise win the
//!    race with a pre-vote and leave the successor to vote for it), and leaves the old admin out
//!    of its ranking for that term, so that if the transfer fails the ranked election is led by
//!    the next best voter, not a node that is leaving.
//!
//! Safety is the step-down's: no voter grants a vote while its promise to the old admin runs
//! unless that admin said it gave its lease up, and it had (rule 2), so two leases never
//! overlap. A forged `timeout_now` or `transfer` flag gains its sender nothing: the first only
//! makes a node stand (which any member may do), the second only delays a refusal.

use serde::{Deserialize, Serialize};

use crate::{Command, Core, Message, NodeId, Notice, Refusal, Role, StepDownReason};

/// What a node remembers of handovers in its current term (volatile: boxed, absent nearly
/// always, and judged against the term it names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Handover {
    /// The term this is about.
    term: u64,
    /// The admin of `term` that stepped down, as heard.
    resigned: Option<NodeId>,
    /// A transfer vote request kept while this node's promise to its admin ran (rule 4).
    deferred: Option<DeferredVote>,
}

/// A vote request kept for the step-down that will let this node answer it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeferredVote {
    pub(crate) from: NodeId,
    pub(crate) term: u64,
    key: (u64, u64, u64, u64),
}

/// Why an admin refused to hand over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoverRefusal {
    /// This node is not the admin.
    NotAdmin,
    /// The asked node is not a voter of the admin's electorate (or is the admin itself).
    NotAVoter,
    /// The asked voter has not acknowledged the admin's electorate lately.
    NotUpToDate,
    /// No other voter is up to date and alive.
    NoCandidate,
}

impl HandoverRefusal {
    /// Its name in traces and API answers.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoverRefusal::NotAdmin => "not_admin",
            HandoverRefusal::NotAVoter => "not_a_voter",
            HandoverRefusal::NotUpToDate => "not_up_to_date",
            HandoverRefusal::NoCandidate => "no_candidate",
        }
    }
}

impl std::fmt::Display for HandoverRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Core {
    /// Rule 1: whom this admin would hand over to (`asked`, or the best up-to-date voter).
    pub fn handover_target(&self, asked: Option<&NodeId>) -> Result<NodeId, HandoverRefusal> {
        let (Some(admin), Some(e)) = (&self.admin_state, &self.electorate) else {
            return Err(HandoverRefusal::NotAdmin);
        };
        if self.role != Role::Admin {
            return Err(HandoverRefusal::NotAdmin);
        }
        let key = self.electorate_version_key();
        let own = self.config.election_timeout_min_ms;
        let up_to_date = |id: &NodeId| {
            admin.voters.get(id).is_some_and(|v| {
                v.holds == Some(key)
                    && v.sent_at_ms + self.config.lease_for(v.promise_ms.min(own)) > self.now_ms
            })
        };
        if let Some(id) = asked {
            if *id == self.id || !e.contains(id) {
                return Err(HandoverRefusal::NotAVoter);
            }
            return if up_to_date(id) {
                Ok(id.clone())
            } else {
                Err(HandoverRefusal::NotUpToDate)
            };
        }
        // Best-ranked as `rank` orders: score descending, then id ascending; eligible peers only.
        let mut best: Option<(u32, &NodeId)> = None;
        for id in e.members() {
            if *id == self.id || !up_to_date(id) {
                continue;
            }
            let Some(peer) = self.peers.get(id).filter(|p| p.eligible()) else {
                continue;
            };
            let score = peer.score_at(self.now_ms);
            if best.is_none_or(|(s, b)| score > s || (score == s && id < b)) {
                best = Some((score, id));
            }
        }
        best.map(|(_, id)| id.clone())
            .ok_or(HandoverRefusal::NoCandidate)
    }

    /// Rule 2: steps down and hands over to `target` (none: only steps down and tells everyone).
    pub(crate) fn hand_over(
        &mut self,
        reason: StepDownReason,
        target: Option<NodeId>,
        request: u64,
        out: &mut Vec<Command>,
    ) {
        let term = self.term;
        self.step_down(reason, out);
        // Our own promise backs only the lease just given up.
        if self.promised_to.as_ref() == Some(&self.id) {
            self.promise_until_ms = self.now_ms;
        }
        out.push(Command::Notice(Notice::HandingOver {
            term,
            target: target.clone(),
            request,
        }));
        let step_down = Message::StepDown {
            term,
            successor: target.clone(),
        };
        out.push(Command::Broadcast {
            msg: step_down.clone(),
        });
        // The voters, whose votes the target needs, also on their own links (a copy that
        // arrives second is ignored: `on_step_down`).
        for voter in self.electorate.iter().flat_map(|e| e.members()) {
            if *voter != self.id {
                out.push(Command::Send {
                    to: voter.clone(),
                    msg: step_down.clone(),
                });
            }
        }
        if let Some(to) = target {
            out.push(Command::Send {
                to,
                msg: Message::TimeoutNow { term },
            });
        }
    }

    /// An operator asks this node to hand the office over (`chorus members transfer [ID]`).
    pub(crate) fn on_transfer_admin(
        &mut self,
        to: Option<NodeId>,
        request: u64,
        out: &mut Vec<Command>,
    ) {
        match self.handover_target(to.as_ref()) {
            Ok(target) => self.hand_over(StepDownReason::Transfer, Some(target), request, out),
            Err(reason) => out.push(Command::Notice(Notice::HandoverRefused {
                request,
                reason,
                admin: self.admin.clone(),
            })),
        }
    }

    /// Rule 3: the admin asks this node to stand now.
    pub(crate) fn on_timeout_now(&mut self, from: NodeId, term: u64, out: &mut Vec<Command>) {
        // The step-down, which names this node too, came first and the vote is under way.
        if term + 1 == self.term && self.voted_for.as_ref() == Some(&self.id) {
            return;
        }
        let from_admin = self.admin.as_ref() == Some(&from) || self.resigned(term) == Some(&from);
        // A pre-candidate (it heard the step-down first and its slot came) gives its round up.
        let standing = matches!(self.role, Role::Follower | Role::PreCandidate);
        if term != self.term || !from_admin || !standing {
            let reason = if term < self.term {
                Refusal::Stale
            } else {
                Refusal::Unsolicited
            };
            return self.refuse(from, "timeout_now", reason, out);
        }
        if !self.can_stand() {
            return;
        }
        // The admin gave its lease up before asking (rule 2): the promise to it may end, and
        // its step-down, when it comes, is news no longer.
        self.admin = None;
        if self.promised_to.as_ref() == Some(&from) {
            self.promise_until_ms = self.now_ms;
        }
        self.handover_mut().resigned = Some(from);
        self.start_vote(true, out);
    }

    /// Rule 4, at a voter: whether a transfer request must wait for its admin's step-down, and
    /// if so keeps it. Only while the promise to the admin this node follows is what refuses it.
    pub(crate) fn defer_transfer_vote(
        &mut self,
        from: &NodeId,
        term: u64,
        key: (u64, u64, u64, u64),
    ) -> bool {
        let waiting = term == self.term + 1
            && self.now_ms < self.promise_until_ms
            && self.admin.is_some()
            && self.promised_to == self.admin
            && self.promised_to.as_ref() != Some(from);
        if waiting {
            let h = self.handover_mut();
            h.deferred = Some(DeferredVote {
                from: from.clone(),
                term,
                key,
            });
        }
        waiting
    }

    /// Rule 4, when this node's promise ran out without the step-down it waited for: the kept
    /// transfer request, if it is for the next term.
    pub(crate) fn take_deferred_vote(&mut self) -> Option<DeferredVote> {
        let next = self.term + 1;
        let h = self.handover.as_deref_mut()?;
        h.deferred.take().filter(|d| d.term == next)
    }

    /// Rules 4 and 5, at any node: the admin of this term stepped down (already checked).
    /// Returns the transfer vote request kept for this moment, to be answered now.
    pub(crate) fn heard_step_down(&mut self, from: NodeId) -> Option<DeferredVote> {
        let h = self.handover_mut();
        h.resigned = Some(from);
        h.deferred.take()
    }

    /// Answers a vote request kept for the step-down that just came (rule 4).
    pub(crate) fn answer_deferred(&mut self, d: DeferredVote, out: &mut Vec<Command>) {
        self.on_vote_request(d.from, d.term, d.key, false, out);
    }

    /// The admin of `term` that this node heard step down, if any.
    pub(crate) fn resigned(&self, term: u64) -> Option<&NodeId> {
        (self.handover.as_deref())
            .filter(|h| h.term == term)
            .and_then(|h| h.resigned.as_ref())
    }

    /// This term's handover record, a fresh one if the kept one is of another term.
    fn handover_mut(&mut self) -> &mut Handover {
        let fresh = Handover {
            term: self.term,
            resigned: None,
            deferred: None,
        };
        let h = self.handover.get_or_insert_with(|| Box::new(fresh.clone()));
        if h.term != fresh.term {
            **h = fresh;
        }
        h
    }
}
