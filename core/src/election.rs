//! Elections: the rank-biased delay, pre-vote, vote, and winning.
//!
//! Rules (docs/design.md §4.4), each checked by a test in this file:
//! 1. A node stands only when eligible and in the electorate, and only one round at a time.
//! 2. Pre-vote changes no state at voters; a voter says yes only if the proposed term is above its
//!    own, the candidate is a voter of the same electorate, and it has no live promise. A voter
//!    that says yes leaves the candidate time to win before standing itself; of two
//!    pre-candidates, the one on the older electorate stands back, on one electorate the
//!    lower-ranked.
//! 3. A voter grants at most one vote per term (the vote is state, persisted via the event log).
//! 4. A promise (from an admin's heartbeat, from voting, or from a restart) blocks (pre-)votes for
//!    anyone else for `election_timeout_min_ms`; admin leases rest on it.
//! 5. A strict majority of the electorate wins; any higher term sends a node back to follower.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::heartbeat::VoterAck;
use crate::node::{AdminState, BeatRound, Round};
use crate::timer::ElectionPhase;
use crate::{rng, score, Command, Core, Message, NodeId, Notice, Refusal, Role, Timer};

impl Core {
    /// The rank of this node among the live voters that could stand, and how many there are
    /// (this node included). Ordered by score descending, then node id ascending.
    pub fn rank(&self) -> (usize, usize) {
        let my = (self.score(), &self.id);
        // A count, so no order is needed: the live members, found by walking the smaller of
        // the member list and the peer table and looking each up in the other (every voter
        // ranks itself at a cold start: with all of n nodes voters and peers, walking the table
        // reads it in order, where n lookups into it were ~3 cache misses each); the peers
        // themselves before there is an electorate.
        let standing: Box<dyn Iterator<Item = (&NodeId, &crate::Peer)>> =
            match self.electorate.as_deref() {
                Some(e) if self.peers.len() <= e.len() => {
                    Box::new(self.peers.unordered().filter(|(id, _)| e.contains(id)))
                }
                Some(e) => {
                    Box::new((e.members().iter()).filter_map(|m| self.peers.get(m).map(|p| (m, p))))
                }
                None => Box::new(self.peers.unordered()),
            };
        let mut better = 0;
        let mut n = 1;
        // An admin heard stepping down in this term is leaving, or handing over: it will not
        // stand now (`transfer.rs` rule 5).
        let resigned = self.resigned(self.term);
        for (id, peer) in standing {
            if !peer.eligible() || resigned == Some(id) {
                continue;
            }
            n += 1;
            let score = peer.score_at(self.now_ms);
            if score > my.0 || (score == my.0 && id < my.1) {
                better += 1;
            }
        }
        (better, n)
    }

    /// Whether this node outranks `other` (score descending, then node id ascending).
    fn ranks_above(&self, other: &NodeId) -> bool {
        let theirs = self.peers.get(other).map_or(0, |p| p.score_at(self.now_ms));
        let mine = self.score();
        mine > theirs || (mine == theirs && self.id < *other)
    }

    /// Draws the delay before standing: inside this node's rank slot of the window, or anywhere
    /// in the window when score bias is off.
    fn election_delay(&mut self) -> u64 {
        let window = self.config.election_timeout_max_ms - self.config.election_timeout_min_ms;
        if !self.config.score_bias {
            return rng::below(&mut self.rng, window + 1);
        }
        let (rank, n) = self.rank();
        let (start, width) = score::slot(rank, n, window, self.config.election_slot_min_ms);
        // Jitter only in the slot's first quarter: consecutive ranks stay at least three quarters
        // of a slot apart, while nodes that disagree about a rank still draw apart.
        start + rng::below(&mut self.rng, width / 4)
    }

    /// Arms the election timer to stand after the rank-biased delay.
    pub(crate) fn arm_stand(&mut self, out: &mut Vec<Command>) {
        let delay = self.election_delay();
        self.election_phase = ElectionPhase::Stand;
        // While this node's own promise lasts (after a restart, say) its peers are most likely
        // bound too: standing earlier would only waste a pre-vote round.
        let base = self.now_ms.max(self.promise_until_ms);
        self.timers.set(Timer::Election, base + delay, out);
    }

    pub(crate) fn on_election_timeout(&mut self, out: &mut Vec<Command>) {
        match (self.role, self.election_phase) {
            (Role::Admin, _) => {}
            (_, ElectionPhase::Suspect) => {
                // A transfer request kept for a step-down that never came: the promise that
                // kept it has run out, so it is answered as any request is (`transfer.rs` rule
                // 4), and a vote granted now stands in place of a round of this node's own.
                if let Some(d) = self.take_deferred_vote() {
                    let (candidate, term) = (d.from.clone(), d.term);
                    self.answer_deferred(d, out);
                    if self.term == term && self.voted_for.as_ref() == Some(&candidate) {
                        return;
                    }
                }
                // The admin (or our own round) went quiet for the minimum election timeout.
                let knew_none = self.admin.is_none();
                self.become_follower(out);
                self.admin = None;
                let can_stand = self.can_stand();
                if can_stand {
                    self.arm_stand(out);
                }
                // While no admin is known a node keeps asking its peers (docs/design.md §4.2, Discovery),
                // a node that could stand too once a whole timeout passed without one (its round
                // failed, or a higher term ended it): the voters may follow an admin outside this
                // node's electorate (it missed a membership change, or holds one that never
                // committed), whose heartbeats it refuses, and only members' reports lead it
                // there (`discovery.rs`). Not when the admin just went quiet: members that have
                // not suspected it yet would still report it.
                if (!can_stand || knew_none) && self.timers.deadline(Timer::Discovery).is_none() {
                    self.begin_discovery(out);
                }
            }
            (_, ElectionPhase::Stand) => self.start_pre_vote(out),
        }
    }

    /// Sends `msg` to every voter except this node.
    fn send_to_voters(&self, msg: Message, out: &mut Vec<Command>) {
        let Some(electorate) = &self.electorate else {
            return;
        };
        for m in electorate.members() {
            if *m != self.id {
                out.push(Command::Send {
                    to: m.clone(),
                    msg: msg.clone(),
                });
            }
        }
    }

    fn start_pre_vote(&mut self, out: &mut Vec<Command>) {
        if !self.can_stand() {
            return;
        }
        let (stamp, version, electorate_term, hash) = self.vote_key();
        self.role = Role::PreCandidate;
        self.admin = None;
        self.round = Some(Round {
            term: self.term + 1,
            pre_vote: true,
            granted: vec![self.id.clone()],
            promises: Default::default(),
            started_at_ms: self.now_ms,
        });
        out.push(Command::RoleChanged {
            role: Role::PreCandidate,
            term: self.term,
            lease_until_ms: None,
        });
        // If the round fails, fall back and retry. A full maximum timeout per phase: a round
        // must outlast a round trip even when the timeouts are short.
        self.arm_suspect(self.now_ms + self.config.election_timeout_max_ms, out);
        let msg = Message::PreVoteRequest {
            term: self.term + 1,
            electorate_version: version,
            electorate_term,
            electorate_hash: hash,
            electorate_stamp: stamp,
        };
        self.send_to_voters(msg, out);
        self.check_round(out);
    }

    /// Stands in the next term: after a won pre-vote, or at once when the admin hands over
    /// (`transfer`, `transfer.rs` rule 3).
    pub(crate) fn start_vote(&mut self, transfer: bool, out: &mut Vec<Command>) {
        self.term += 1;
        self.voted_for = Some(self.id.clone());
        self.promise_until_ms = self.now_ms + self.config.election_timeout_min_ms;
        self.promised_to = Some(self.id.clone());
        self.role = Role::Candidate;
        self.round = Some(Round {
            term: self.term,
            pre_vote: false,
            granted: vec![self.id.clone()],
            promises: Default::default(),
            started_at_ms: self.now_ms,
        });
        out.push(Command::Notice(Notice::Voted {
            term: self.term,
            candidate: self.id.clone(),
        }));
        out.push(Command::RoleChanged {
            role: Role::Candidate,
            term: self.term,
            lease_until_ms: None,
        });
        self.arm_suspect(self.now_ms + self.config.election_timeout_max_ms, out);
        let (stamp, version, electorate_term, hash) = self.vote_key();
        let msg = Message::VoteRequest {
            term: self.term,
            electorate_version: version,
            electorate_term,
            electorate_hash: hash,
            electorate_stamp: stamp,
            transfer,
        };
        self.send_to_voters(msg, out);
        self.check_round(out);
    }

    /// Whether a (pre-)vote for `candidate` may be considered at all: this node is eligible,
    /// the candidate's electorate is at least as up to date as this node's — ordered by
    /// (stamp, version), as Raft orders logs by (last term, last index); at an equal position
    /// it must be the same electorate — and no promise to someone else is live. The candidate
    /// counts the grant only if this node is a member of the candidate's electorate (see
    /// `membership.rs` for why that keeps every committed electorate in every later admin's
    /// hands).
    fn may_support(&self, candidate: &NodeId, key: (u64, u64, u64, u64)) -> bool {
        let Some(e) = &self.electorate else {
            return false;
        };
        let (stamp, version, term, hash) = key;
        let up_to_date = match (stamp, version).cmp(&self.position()) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => (term, hash) == (e.term, e.fingerprint()),
            std::cmp::Ordering::Less => false,
        };
        self.is_eligible()
            && up_to_date
            && (self.now_ms >= self.promise_until_ms
                || self.promised_to.as_ref() == Some(candidate))
    }

    pub(crate) fn on_pre_vote_request(
        &mut self,
        from: NodeId,
        term: u64,
        key: (u64, u64, u64, u64),
        out: &mut Vec<Command>,
    ) {
        if self.role == Role::PreCandidate {
            // Two pre-candidates at once: the better-ranked one goes on, the other stands back,
            // so simultaneous timeouts do not split the vote (ties break by node id). On
            // different electorates the later one goes on whatever the ranks: voters holding it
            // refuse the older one, so a better-ranked node on the older one could not win and
            // turning the other away livelocked the two.
            let goes_on = match (key.0, key.1).cmp(&self.position()) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => self.ranks_above(&from),
                std::cmp::Ordering::Greater => false,
            };
            if goes_on {
                let msg = Message::PreVoteReply {
                    term: self.term,
                    granted: false,
                };
                out.push(Command::Send { to: from, msg });
                return;
            }
            self.become_follower(out);
        }
        let granted = term > self.term && self.may_support(&from, key);
        if granted && self.role == Role::Follower {
            // Someone stands: give its vote request time to arrive instead of standing against
            // it. (If it fails, this node stands after the usual suspicion period.)
            self.arm_suspect(self.now_ms + self.config.election_timeout_min_ms, out);
        }
        let reply_term = if granted { term } else { self.term };
        out.push(Command::Send {
            to: from,
            msg: Message::PreVoteReply {
                term: reply_term,
                granted,
            },
        });
    }

    pub(crate) fn on_pre_vote_reply(
        &mut self,
        from: NodeId,
        term: u64,
        granted: bool,
        out: &mut Vec<Command>,
    ) {
        let asked = self.role == Role::PreCandidate && matches!(&self.round, Some(r) if r.pre_vote);
        if !asked {
            // We asked for term + 1 at most; anything above that was never asked.
            let reason = if term <= self.term.saturating_add(1) {
                Refusal::Stale
            } else {
                Refusal::Unsolicited
            };
            return self.refuse(from, "pre_vote_reply", reason, out);
        }
        if !granted {
            // A voter already in a term at least as high as ours + 1: we are behind.
            if term > self.term {
                self.observe_term(term, out);
            }
            return;
        }
        match self.round.as_ref().map(|r| r.term) {
            Some(t) if t == term => self.record_grant(from, None, out),
            Some(t) if term < t => self.refuse(from, "pre_vote_reply", Refusal::Stale, out),
            _ => self.refuse(from, "pre_vote_reply", Refusal::Unsolicited, out),
        }
    }

    pub(crate) fn on_vote_request(
        &mut self,
        from: NodeId,
        term: u64,
        key: (u64, u64, u64, u64),
        transfer: bool,
        out: &mut Vec<Command>,
    ) {
        if transfer && !self.may_support(&from, key) && self.defer_transfer_vote(&from, term, key) {
            // Answered when the admin's step-down arrives (`transfer.rs` rule 4).
            return;
        }
        if term < self.term || !self.may_support(&from, key) {
            out.push(Command::Send {
                to: from,
                msg: Message::VoteReply {
                    term: self.term,
                    granted: false,
                    promise_ms: 0,
                },
            });
            return;
        }
        self.observe_term(term, out);
        let granted = match &self.voted_for {
            None => true,
            Some(v) => *v == from,
        };
        if granted && self.voted_for.is_none() {
            self.voted_for = Some(from.clone());
            self.promise_until_ms = self.now_ms + self.config.election_timeout_min_ms;
            self.promised_to = Some(from.clone());
            out.push(Command::Notice(Notice::Voted {
                term,
                candidate: from.clone(),
            }));
            self.arm_suspect(self.now_ms + self.config.election_timeout_min_ms, out);
        }
        out.push(Command::Send {
            to: from,
            msg: Message::VoteReply {
                term: self.term,
                granted,
                // A granted vote is a promise for this node's own minimum election timeout.
                promise_ms: if granted {
                    self.config.election_timeout_min_ms
                } else {
                    0
                },
            },
        });
    }

    pub(crate) fn on_vote_reply(
        &mut self,
        from: NodeId,
        term: u64,
        granted: bool,
        promise_ms: u64,
        out: &mut Vec<Command>,
    ) {
        let asking = self.role == Role::Candidate
            && matches!(&self.round, Some(r) if !r.pre_vote && r.term == self.term);
        // Only a candidate asked, and only for its own term, the highest it ever stood in.
        let refusal = match (asking, granted) {
            (false, _) if term <= self.term => Some(Refusal::Stale),
            (false, _) => Some(Refusal::Unsolicited),
            (true, true) if term < self.term => Some(Refusal::Stale),
            (true, true) if term > self.term => Some(Refusal::Unsolicited),
            (true, _) => None,
        };
        if let Some(reason) = refusal {
            return self.refuse(from, "vote_reply", reason, out);
        }
        if granted {
            self.record_grant(from, Some(promise_ms), out);
        } else {
            // A voter ahead of us: we are behind.
            self.observe_term(term, out);
        }
    }

    fn record_grant(&mut self, from: NodeId, promise_ms: Option<u64>, out: &mut Vec<Command>) {
        let Some(e) = &self.electorate else { return };
        if !e.contains(&from) {
            return;
        }
        let Some(round) = &mut self.round else { return };
        if !round.granted.contains(&from) {
            round.granted.push(from.clone());
        }
        if let Some(p) = promise_ms {
            round.promises.insert(from, p);
        }
        self.check_round(out);
    }

    /// Moves on once a round has a strict majority.
    fn check_round(&mut self, out: &mut Vec<Command>) {
        let (Some(round), Some(e)) = (&self.round, &self.electorate) else {
            return;
        };
        if round.granted.len() < e.quorum() {
            return;
        }
        if round.pre_vote {
            self.start_vote(false, out);
        } else {
            self.become_admin(out);
        }
    }

    fn become_admin(&mut self, out: &mut Vec<Command>) {
        let Some(round) = self.round.take() else {
            return;
        };
        // Every granting voter promised at or after the round started, each for its own
        // promise length: the lease rests on the promises of a majority (`heartbeat.rs`).
        let mut voters = BTreeMap::new();
        let own = self.config.election_timeout_min_ms;
        for v in &round.granted {
            let promise_ms = if *v == self.id {
                own
            } else {
                round.promises.get(v).copied().unwrap_or(0)
            };
            voters.insert(
                v.clone(),
                VoterAck {
                    beat: 0,
                    sent_at_ms: round.started_at_ms,
                    promise_ms,
                    // A grant says nothing of the electorate held: establishment waits for
                    // acknowledgements that do.
                    holds: None,
                    endorsement: None,
                    certified: 0,
                },
            );
        }
        self.role = Role::Admin;
        // Raft's no-op entry of the new term: the admin's own electorate is confirmed in it.
        self.stamp = self.term;
        self.admin_state = Some(Box::new(AdminState {
            lease_until_ms: round.started_at_ms,
            quorum_at_ms: round.started_at_ms,
            // `can_stand` keeps the beat below the top of its range.
            first_beat: self.beat + 1,
            beats: Vec::new(),
            voters,
            established: false,
            change: None,
            elected_at_ms: self.now_ms,
            standbys: BTreeMap::new(),
            tasks: Default::default(),
        }));
        let lease_until_ms = self.tally().map_or(self.now_ms, |t| t.lease_until_ms);
        if let Some(admin) = &mut self.admin_state {
            admin.lease_until_ms = lease_until_ms;
        }
        out.push(Command::RoleChanged {
            role: Role::Admin,
            term: self.term,
            lease_until_ms: Some(lease_until_ms),
        });
        out.push(Command::Notice(Notice::BecameAdmin {
            term: self.term,
            lease_until_ms,
        }));
        let me = self.id.clone();
        self.set_admin(me, out);
        self.timers.cancel(Timer::Election, out);
        self.timers.set(Timer::Lease, lease_until_ms, out);
        self.send_heartbeat(out);
    }

    /// Starts a heartbeat round (also used right after winning).
    pub(crate) fn send_heartbeat(&mut self, out: &mut Vec<Command>) {
        if self.admin_state.is_none() {
            return;
        }
        if self.beat >= crate::MAX_WIRE_INT {
            // Out of beats (only a lying member can push the counter this far): send nothing,
            // so no acknowledgement renews the lease and check-quorum retires this admin.
            self.timers.set(
                Timer::Heartbeat,
                self.now_ms + self.config.heartbeat_interval_ms,
                out,
            );
            return;
        }
        self.beat += 1;
        let (beat, now, own) = (self.beat, self.now_ms, self.config.election_timeout_min_ms);
        let key = self.electorate_version_key();
        let id = self.id.clone();
        let endorsement = self.own_endorsement();
        if let Some(admin) = &mut self.admin_state {
            admin.beats.push(BeatRound {
                beat,
                sent_at_ms: now,
                names: key,
            });
            if admin.beats.len() > crate::node::MAX_BEAT_ROUNDS {
                admin.beats.remove(0);
            }
            // The admin is its own first acknowledgement: it too promises not to vote for
            // others.
            admin.voters.insert(
                id.clone(),
                VoterAck {
                    beat,
                    sent_at_ms: now,
                    promise_ms: own,
                    holds: Some(key),
                    endorsement,
                    // Its own links are read from its chain (`link_spread`).
                    certified: 0,
                },
            );
        }
        self.promise_until_ms = now + own;
        self.promised_to = Some(id);
        let (membership_version, membership_term) = self.electorate_version_key();
        out.push(Command::Broadcast {
            msg: Message::Heartbeat {
                term: self.term,
                beat: self.beat,
                membership_version,
                membership_term,
                genesis: self.genesis(),
                electorate: self.pending_electorate(),
                certified: self.certified(),
            },
        });
        let interval = self.heartbeat_interval_now();
        self.timers
            .set(Timer::Heartbeat, self.now_ms + interval, out);
        // A single-voter electorate renews on its own acknowledgement.
        self.after_acks(out);
    }

    /// The admin's heartbeat interval now: its configured one, but at most half the shortest
    /// promise a voter stated (each voter's own minimum election timeout, in its vote or
    /// acknowledgement; the defaults' ratio, 15 s to 30 s), so a voter configured with shorter
    /// timeouts than the admin's interval hears it twice per timeout instead of deposing it
    /// over and over
    /// (finding 3 of issue 32: nodes may run with different settings, and none can see the
    /// others' but through what they state).
    pub(crate) fn heartbeat_interval_now(&self) -> u64 {
        let configured = self.config.heartbeat_interval_ms;
        let shortest = (self.admin_state.iter())
            .flat_map(|a| a.voters.values())
            .map(|v| v.promise_ms)
            .filter(|p| *p > 0)
            .min();
        // Never below a tenth of the configured interval: a member stating a tiny promise must
        // not turn the admin into a flood.
        match shortest {
            Some(p) => configured.min(p / 2).max(configured / 10).max(1),
            None => configured,
        }
    }

    /// Stores an electorate given explicitly (tests and tools).
    pub fn set_electorate_for_test(&mut self, electorate: crate::Electorate) {
        self.electorate = Some(Arc::new(electorate));
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::*;
    use crate::{Command, Config, Core, Event, Message, Notice, PeerInfo, Resources, Role, Timer};

    const ABC: &[&str] = &["a", "b", "c"];

    fn granted(out: &[Command], to: &str) -> bool {
        match sent_to(out, to).as_slice() {
            [Message::VoteReply { granted, .. }] | [Message::PreVoteReply { granted, .. }] => {
                *granted
            }
            other => panic!("expected one reply to {to}, got {other:?}"),
        }
    }

    #[test]
    fn one_vote_per_term_second_candidate_refused() {
        let mut a = voter("a", ABC);
        let req = vote_req(&a, 1);
        let out = a.step_vec(20_000, from("b", req.clone()));
        assert!(granted(&out, "b"));
        assert!(out.contains(&Command::Notice(Notice::Voted {
            term: 1,
            candidate: "b".into()
        })));
        // Same term, another candidate: refused. The same candidate again: granted again.
        assert!(!granted(&a.step_vec(20_001, from("c", req.clone())), "c"));
        assert!(granted(&a.step_vec(20_002, from("b", req)), "b"));
        assert_eq!(a.voted_for().unwrap().as_str(), "b");
    }

    #[test]
    fn vote_refused_for_a_stale_term() {
        let mut a = voter("a", ABC);
        a.step_vec(1, from("b", vote_req(&a, 3)));
        let out = a.step_vec(MIN + 10, from("c", vote_req(&a, 2)));
        assert_eq!(
            sent_to(&out, "c"),
            [&Message::VoteReply {
                term: 3,
                granted: false,
                promise_ms: 0
            }]
        );
    }

    #[test]
    fn pre_vote_refused_while_admin_heartbeat_is_fresh() {
        let mut a = voter("a", ABC);
        a.step_vec(
            1_000,
            from(
                "b",
                Message::Heartbeat {
                    term: 1,
                    beat: 1,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            ),
        );
        let req = pre_vote_req(&a, 2);
        assert!(!granted(
            &a.step_vec(1_000 + MIN - 1, from("c", req.clone())),
            "c"
        ));
        assert!(granted(&a.step_vec(1_000 + MIN, from("c", req)), "c"));
    }

    #[test]
    fn pre_vote_changes_no_state() {
        let mut a = voter("a", ABC);
        let before = a.clone();
        let out = a.step_vec(0, from("b", pre_vote_req(&a, 5)));
        assert!(granted(&out, "b"));
        assert_eq!(
            (a.term(), a.voted_for()),
            (before.term(), before.voted_for())
        );
    }

    #[test]
    fn vote_refused_while_promised_to_another() {
        let mut a = voter("a", ABC);
        a.step_vec(0, from("b", vote_req(&a, 1)));
        // A higher term does not break the promise to b, and is not adopted.
        let out = a.step_vec(MIN - 1, from("c", vote_req(&a, 2)));
        assert!(!granted(&out, "c"));
        assert_eq!(a.term(), 1);
        assert!(granted(&a.step_vec(MIN, from("c", vote_req(&a, 2))), "c"));
    }

    #[test]
    fn electorate_mismatch_or_outsider_is_refused() {
        let mut a = voter("a", ABC);
        let wrong = Message::VoteRequest {
            term: 1,
            electorate_version: 1,
            electorate_hash: 1,
            electorate_term: 0,
            electorate_stamp: 0,
            transfer: false,
        };
        assert!(!granted(&a.step_vec(0, from("b", wrong)), "b"));
        // An outsider is not even answered: it is refused and reported.
        let out = a.step_vec(0, from("z", vote_req(&a, 1)));
        assert!(sent_to(&out, "z").is_empty());
        assert!(matches!(
            out.as_slice(),
            [Command::Notice(Notice::Refused {
                reason: crate::Refusal::NotMember,
                ..
            })]
        ));
        assert_eq!(a.voted_for(), None);
    }

    #[test]
    fn non_eligible_nodes_never_vote_or_stand() {
        let mut w = node_with("w", ABC, vec!["docker".into()], Config::default());
        assert!(!granted(&w.step_vec(0, from("b", vote_req(&w, 1))), "b"));
        fire(&mut w, Timer::Discovery);
        assert_eq!(
            w.timers.deadline(Timer::Election),
            None,
            "a worker never arms an election"
        );
        let outsider = voter("d", ABC);
        assert!(!outsider.can_stand());
    }

    #[test]
    fn majority_wins_and_lease_counts_from_round_start() {
        let a = elect("a", &["a", "b", "c", "d", "e"], &["b", "c"]);
        assert_eq!(a.term(), 1);
        let started = a.round.as_ref().map(|r| r.started_at_ms);
        assert_eq!(started, None, "round consumed");
        assert_eq!(a.lease_until_ms(), Some(a.now_ms() + a.config().lease_ms()));
        assert!(a.holds_lease(a.now_ms()));
    }

    #[test]
    fn minority_of_votes_does_not_win() {
        let mut a = voter("a", &["a", "b", "c", "d", "e"]);
        fire(&mut a, Timer::Discovery);
        fire(&mut a, Timer::Election);
        let now = a.now_ms();
        a.step_vec(
            now,
            from(
                "b",
                Message::PreVoteReply {
                    term: 1,
                    granted: true,
                },
            ),
        );
        a.step_vec(
            now,
            from(
                "b",
                Message::PreVoteReply {
                    term: 1,
                    granted: true,
                },
            ),
        );
        assert_eq!(
            (a.role(), a.term()),
            (Role::PreCandidate, 0),
            "duplicates do not count"
        );
        a.step_vec(
            now,
            from(
                "c",
                Message::PreVoteReply {
                    term: 1,
                    granted: true,
                },
            ),
        );
        assert_eq!((a.role(), a.term()), (Role::Candidate, 1));
        a.step_vec(
            now,
            from(
                "b",
                Message::VoteReply {
                    term: 1,
                    granted: true,
                    promise_ms: 30_000,
                },
            ),
        );
        a.step_vec(
            now,
            from(
                "z",
                Message::VoteReply {
                    term: 1,
                    granted: true,
                    promise_ms: 30_000,
                },
            ),
        );
        assert_eq!(
            a.role(),
            Role::Candidate,
            "an outsider's vote does not count"
        );
    }

    #[test]
    fn higher_term_sends_candidate_and_admin_back() {
        let mut a = voter("a", ABC);
        fire(&mut a, Timer::Discovery);
        fire(&mut a, Timer::Election);
        assert_eq!(a.role(), Role::PreCandidate);
        let out = a.step_vec(
            a.now_ms(),
            from(
                "b",
                Message::PreVoteReply {
                    term: 4,
                    granted: false,
                },
            ),
        );
        assert_eq!((a.role(), a.term()), (Role::Follower, 4));
        assert!(out.iter().any(|c| matches!(
            c,
            Command::RoleChanged {
                role: Role::Follower,
                ..
            }
        )));

        let mut admin = elect("a", ABC, &["b"]);
        // A vote reply nobody asked for moves nothing; an ack of the admin's own beat does.
        let unasked = Message::VoteReply {
            term: 7,
            granted: false,
            promise_ms: 0,
        };
        admin.step_vec(admin.now_ms(), from("c", unasked));
        assert_eq!((admin.role(), admin.term()), (Role::Admin, 1));
        let out = admin.step_vec(
            admin.now_ms(),
            from(
                "c",
                Message::HeartbeatAck {
                    term: 7,
                    beat: 1,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!((admin.role(), admin.term()), (Role::Follower, 7));
        assert!(out
            .iter()
            .any(|c| matches!(c, Command::Notice(Notice::SteppedDown { .. }))));
    }

    #[test]
    fn pre_candidate_keeps_its_term_when_isolated() {
        let mut a = voter("a", ABC);
        fire(&mut a, Timer::Discovery);
        for _ in 0..10 {
            fire(&mut a, Timer::Election);
        }
        assert_eq!(
            a.term(),
            0,
            "pre-vote never raises the term without a majority"
        );
    }

    #[test]
    fn best_score_stands_first_and_ties_break_by_id() {
        let strong = Resources {
            cpu_millicores: 16_000,
            mem_free_mb: 65_536,
            ..Default::default()
        };
        let peer = |res| {
            Event::peer_up(
                "x".into(),
                PeerInfo {
                    capabilities: vec![crate::ADMIN_ELECTION.into()].into(),
                    uptime_s: 0,
                    resources: res,
                },
            )
        };
        let members = &["a", "b", "x"];
        let mut a = voter("a", members);
        a.step_vec(0, peer(strong));
        assert_eq!(a.rank(), (1, 2), "x outscores a");
        let mut b = voter("b", members);
        b.step_vec(0, peer(Resources::default()));
        assert_eq!(
            b.rank(),
            (0, 2),
            "equal scores: the lower id (b) ranks first"
        );
        let mut z = voter("z", &["x", "z"]);
        z.step_vec(0, peer(Resources::default()));
        assert_eq!(z.rank(), (1, 2), "equal scores: x ranks before z");
    }

    #[test]
    fn rank_slots_order_the_stand_times() {
        let members: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = members.iter().map(String::as_str).collect();
        let mut deadlines = Vec::new();
        for id in &refs {
            let mut c = voter(id, &refs);
            for p in &refs {
                c.step_vec(
                    0,
                    Event::peer_up(
                        (*p).into(),
                        PeerInfo {
                            capabilities: vec![crate::ADMIN_ELECTION.into()].into(),
                            ..Default::default()
                        },
                    ),
                );
            }
            fire(&mut c, Timer::Discovery);
            deadlines.push(c.timers.deadline(Timer::Election).unwrap());
        }
        let mut sorted = deadlines.clone();
        sorted.sort();
        assert_eq!(deadlines, sorted, "equal scores: lower id stands first");
        assert!(deadlines[0] < 15_000 + 3_000 && deadlines[4] >= 15_000 + 12_000);
    }

    #[test]
    fn restart_keeps_the_vote_and_grants_nothing_for_a_timeout() {
        let mut a = voter("a", ABC);
        a.step_vec(10, from("b", vote_req(&a, 1)));
        let mut log_state: Core = a.clone();
        log_state.step_vec(20, Event::Started);
        assert_eq!(
            (log_state.term(), log_state.voted_for().map(|v| v.as_str())),
            (1, Some("b"))
        );
        // The old promise died with the process, but a restart renews it.
        assert!(!granted(
            &log_state.step_vec(MIN, from("c", vote_req(&log_state, 2))),
            "c"
        ));
        assert!(granted(
            &log_state.step_vec(20 + MIN, from("c", vote_req(&log_state, 2))),
            "c"
        ));
    }
}

#[cfg(test)]
mod simultaneous {
    use crate::testutil::*;
    use crate::{Command, Message, Role, Timer};

    fn pre_candidate(id: &str) -> crate::Core {
        let mut c = voter(id, &["a", "b", "c"]);
        for p in ["a", "b", "c"] {
            let info = crate::PeerInfo {
                capabilities: vec![crate::ADMIN_ELECTION.to_owned()].into(),
                ..Default::default()
            };
            c.step_vec(0, crate::Event::peer_up(p.into(), info));
        }
        fire(&mut c, Timer::Discovery);
        fire(&mut c, Timer::Election);
        assert_eq!(c.role(), Role::PreCandidate);
        c
    }

    fn reply(out: &[Command], to: &str) -> Message {
        sent_to(out, to)[0].clone()
    }

    #[test]
    fn of_two_pre_candidates_the_lower_ranked_stands_back() {
        // Equal scores: "a" outranks "b" by id.
        let mut a = pre_candidate("a");
        let out = a.step_vec(a.now_ms(), from("b", pre_vote_req(&a, 1)));
        assert_eq!(
            reply(&out, "b"),
            Message::PreVoteReply {
                term: 0,
                granted: false
            }
        );
        assert_eq!(a.role(), Role::PreCandidate);

        let mut b = pre_candidate("b");
        let now = b.now_ms();
        let out = b.step_vec(now, from("a", pre_vote_req(&b, 1)));
        assert_eq!(
            reply(&out, "a"),
            Message::PreVoteReply {
                term: 1,
                granted: true
            }
        );
        assert_eq!(b.role(), Role::Follower);
        assert_eq!(
            b.timers.deadline(Timer::Election),
            Some(now + MIN),
            "b waits for a to win"
        );
    }
}
