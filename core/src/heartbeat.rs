//! Heartbeats, acknowledgements, the admin lease and check-quorum.
//!
//! The lease: each acknowledging voter promised at receipt (≥ the beat's send time `t`) to grant
//! no vote to anyone else for its own minimum election timeout, which its ack states (voters may
//! be configured differently). The lease ends where the promises of a strict majority (the
//! admin counting itself) still run, each shortened by twice the drift bound and capped at the
//! admin's own timeout: no majority can elect anyone else before. See [`Core::tally`]. Admin
//! duties run only under the lease.
//!
//! Check-quorum: an admin that no majority has acknowledged for a full maximum election timeout
//! steps down. It is measured from the same send times as the lease but is longer, so a network
//! whose round trip exceeds the lease (duties pause) still keeps a stable admin.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{
    Command, Core, Electorate, Message, NodeId, Notice, Refusal, Role, StepDownReason, Timer,
};

/// The newest promise a voter made to this admin: on receipt of `beat` (sent at `sent_at_ms`)
/// or of the vote request (`beat` 0), for `promise_ms` of its own clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VoterAck {
    pub(crate) beat: u64,
    pub(crate) sent_at_ms: u64,
    pub(crate) promise_ms: u64,
    /// The electorate (version, proposing term) the voter said it holds (stamped with this
    /// admin's term) in that acknowledgement, if it said so.
    #[serde(default)]
    pub(crate) holds: Option<(u64, u64)>,
    /// The voter's signature over the electorate `holds` names, checked (`catchup.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) endorsement: Option<crate::Signature>,
    /// The newest version the voter said it holds a chain of links up to, in any of its
    /// acknowledgements of this term (it only grows): a change commits once a majority of the
    /// new electorate holds its link (rule 7 of `membership.rs`).
    #[serde(default)]
    pub(crate) certified: u64,
}

/// A heartbeat as received, unpacked.
pub(crate) struct BeatIn {
    pub(crate) term: u64,
    pub(crate) beat: u64,
    /// The admin's electorate (version, proposing term).
    pub(crate) membership: (u64, u64),
    pub(crate) genesis: u64,
    pub(crate) electorate: Option<Arc<Electorate>>,
    /// The admin's certified version (`catchup.rs`).
    pub(crate) certified: u64,
}

/// A heartbeat acknowledgement as received, unpacked.
pub(crate) struct AckIn {
    pub(crate) term: u64,
    pub(crate) beat: u64,
    pub(crate) promise_ms: u64,
    pub(crate) holds: bool,
    pub(crate) endorsement: Option<crate::Signature>,
    pub(crate) certified: u64,
}

/// What the promises on record support (see [`Core::tally`]).
pub(crate) struct Tally {
    pub(crate) lease_until_ms: u64,
    pub(crate) quorum_at_ms: u64,
    pub(crate) established: bool,
}

impl Core {
    pub(crate) fn on_heartbeat_timer(&mut self, out: &mut Vec<Command>) {
        let Some(admin) = &self.admin_state else {
            return;
        };
        if self.now_ms >= admin.quorum_at_ms + self.config.election_timeout_max_ms {
            self.step_down(StepDownReason::CheckQuorum, out);
        } else if !self.autopilot(out) {
            self.send_heartbeat(out);
        }
    }

    pub(crate) fn on_lease_timer(&mut self, out: &mut Vec<Command>) {
        if self.lease_until_ms().is_some_and(|l| self.now_ms >= l) {
            out.push(Command::Notice(Notice::LeaseExpired { term: self.term }));
        }
    }

    pub(crate) fn on_heartbeat(&mut self, from: NodeId, hb: BeatIn, out: &mut Vec<Command>) {
        let BeatIn {
            term,
            beat,
            membership,
            genesis,
            electorate,
            certified,
        } = hb;
        if self.is_foreign(genesis)
            || electorate
                .as_ref()
                .is_some_and(|e| self.is_foreign(e.genesis))
        {
            return self.refuse(from, "heartbeat", Refusal::ForeignCluster, out);
        }
        if term < self.term {
            // A stale admin: our higher term in the ack makes it step down.
            out.push(Command::Send {
                to: from,
                msg: Message::HeartbeatAck {
                    term: self.term,
                    beat,
                    promise_ms: 0,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            });
            return;
        }
        if term == self.term {
            // One admin per term: not this node's term while it is admin itself, and not a
            // second node once the term's admin is known.
            let known = if self.role == Role::Admin {
                Some(&self.id)
            } else {
                self.admin.as_ref()
            };
            if known.is_some_and(|a| *a != from) {
                if self.role == Role::Admin {
                    // Two admins of one term (a bug, or clocks gone wrong): neither may go on,
                    // so this one gives up its lease and the next election's higher term
                    // decides (the other steps down on it, or on this node's heartbeats).
                    self.step_down(StepDownReason::ConflictingAdmin, out);
                }
                return self.refuse(from, "heartbeat", Refusal::ConflictingAdmin, out);
            }
        }
        self.observe_term(term, out);
        self.become_follower(out);
        self.set_admin(from.clone(), out);
        self.beat = self.beat.max(beat);
        self.promise_until_ms = self.now_ms + self.config.election_timeout_min_ms;
        self.promised_to = Some(from.clone());
        self.arm_suspect(self.promise_until_ms, out);
        // A voter before a change carried here must acknowledge it (the admin counts the old
        // majority), even when the change removes it. A standby (eligible, not a voter)
        // acknowledges too, promising nothing: autopilot promotes only standbys that follow.
        let was_member = self.is_member(&self.id);
        if let Some(e) = electorate {
            self.follow_admin_electorate(e, out);
        }
        // Holding the electorate the admin of this term names is confirming it in this term
        // (Raft's follower appending the new leader's no-op): the stamp moves to the term, and
        // the ack says so, which is what establishes the admin and commits a change.
        let holds = membership.0 != 0 && membership == self.electorate_version_key();
        if holds {
            self.stamp = term;
        }
        let voter = was_member || self.is_member(&self.id);
        if voter || (self.is_eligible() && self.electorate.is_some()) {
            out.push(Command::Send {
                to: from.clone(),
                msg: Message::HeartbeatAck {
                    term,
                    beat,
                    promise_ms: if voter {
                        self.config.election_timeout_min_ms
                    } else {
                        0
                    },
                    holds,
                    // What the admin certifies a change with (`catchup.rs`), sent only while
                    // its heartbeat says it holds no link to its electorate yet (its certified
                    // version is below its electorate's): a certified admin never reads one,
                    // and the 64-byte signature was over half of every idle acknowledgement.
                    endorsement: (holds && certified < membership.0)
                        .then(|| self.own_endorsement())
                        .flatten(),
                    certified: self.certified(),
                },
            });
        }
        if certified > self.certified() {
            self.ask_chain(from.clone(), true, out);
        } else {
            self.ask_anchor_link(from.clone(), out);
        }
        if membership.0 != 0 && !holds {
            // On another electorate than the admin (another version, or the same version
            // proposed in another term): ask it (see `membership.rs`), at every heartbeat until
            // they agree, even with a question still unanswered: the question or its answer may
            // have been lost, and then a node asking only once stayed on its old electorate for
            // good. (Version 0 says nothing: an admin has an electorate.)
            self.send_whoami(from, out);
        }
    }

    pub(crate) fn on_heartbeat_ack(&mut self, from: NodeId, ack: AckIn, out: &mut Vec<Command>) {
        let AckIn {
            term,
            beat,
            promise_ms,
            holds,
            endorsement,
            certified,
        } = ack;
        // Only an admin asked, and only for beats it sent in its term.
        let asked = match &self.admin_state {
            Some(admin) if self.role == Role::Admin => {
                (admin.first_beat..=self.beat).contains(&beat)
            }
            _ => false,
        };
        if !asked {
            let reason = if term <= self.term && beat <= self.beat {
                Refusal::Stale
            } else {
                Refusal::Unsolicited
            };
            return self.refuse(from, "heartbeat_ack", reason, out);
        }
        if term < self.term {
            return self.refuse(from, "heartbeat_ack", Refusal::Stale, out);
        }
        if self.observe_term(term, out) {
            return;
        }
        if certified > self.certified() {
            self.ask_chain(from.clone(), true, out);
        }
        let voter = self.counts_as_voter(&from);
        let now = self.now_ms;
        let current = self.electorate_version_key();
        let Some(admin) = &mut self.admin_state else {
            return;
        };
        let Some(round) = admin.beats.iter().find(|r| r.beat == beat).cloned() else {
            // Older than the rounds kept: it can renew nothing the newer ones do not.
            if !voter || admin.voters.get(&from).is_some_and(|v| v.beat >= beat) {
                return;
            }
            return self.refuse(from, "heartbeat_ack", Refusal::Stale, out);
        };
        let holds = holds.then_some(round.names);
        if !voter {
            // A standby following this admin; autopilot counts it as following only while it
            // holds the admin's electorate.
            if holds == Some(current) {
                let seen = admin.standbys.entry(from).or_insert((now, now));
                seen.1 = now;
            }
            return;
        }
        // The links a voter holds only grow, so any acknowledgement of this term says at least
        // that much, late ones too: a follower that caught up on a link acknowledges the beat
        // again to say so (`catchup.rs`), and the change waiting for it commits.
        let links_grew = match admin.voters.get_mut(&from) {
            Some(v) if certified > v.certified => {
                v.certified = certified;
                true
            }
            _ => false,
        };
        // A voter's newest ack stands for every beat up to it: it promised on receipt, and
        // every earlier beat was sent no later. A late or duplicated ack never counts twice.
        let previous = admin.voters.get(&from);
        // A second acknowledgement of the newest beat brings only the endorsement its sender
        // signed after the first (`catchup.rs`): taken, nothing else of it.
        let late_endorsement = previous.is_some_and(|v| {
            v.beat == beat && v.holds == holds && v.endorsement.is_none() && endorsement.is_some()
        });
        if previous.is_some_and(|v| v.beat >= beat) && !late_endorsement {
            if links_grew {
                self.check_commit(out);
            }
            return;
        }
        // An endorsement of the electorate this admin holds, checked once per voter and
        // electorate (`catchup.rs`): a bad one is refused and the ack counts without it.
        let endorsement = endorsement.filter(|_| holds == Some(current));
        let known = previous
            .filter(|v| v.holds == holds)
            .and_then(|v| v.endorsement.clone());
        let endorsement = match endorsement {
            Some(sig) if known.as_ref() == Some(&sig) => Some(sig),
            Some(sig) if self.endorses_mine(&from, &sig) => Some(sig),
            Some(_) => {
                self.refuse(from.clone(), "heartbeat_ack", Refusal::BadCertificate, out);
                None
            }
            None => None,
        };
        let Some(admin) = &mut self.admin_state else {
            return;
        };
        if late_endorsement {
            if let Some(v) = admin.voters.get_mut(&from) {
                v.endorsement = endorsement;
            }
            return self.after_acks(out);
        }
        let certified = admin
            .voters
            .get(&from)
            .map_or(certified, |v| v.certified.max(certified));
        admin.voters.insert(
            from,
            VoterAck {
                beat,
                sent_at_ms: round.sent_at_ms,
                promise_ms,
                holds,
                endorsement,
                certified,
            },
        );
        self.after_acks(out);
    }

    /// The lease and check-quorum base that the promises on record support, or `None` when no
    /// majority has promised anything yet.
    ///
    /// Voter `v` promised, on receipt of a beat sent at `s_v`, to vote for nobody else for
    /// `p_v` of its own clock; on the admin's clock (drift-corrected, and never longer than the
    /// admin's own timeout) that covers up to `c_v = s_v + lease(p_v)`. Another node needs a
    /// majority to win, so while at least a majority's promises run nobody else can: the lease
    /// is the quorum-th largest `c_v`. During a membership change both the old and the new
    /// electorate must have such a majority, so it is the smaller of the two.
    pub(crate) fn tally(&self) -> Option<Tally> {
        let admin = self.admin_state.as_ref()?;
        let own = self.config.election_timeout_min_ms;
        // Established: a majority holds this admin's electorate stamped with its term (Raft's
        // leader with an entry of its own term committed).
        let current = self.electorate_version_key();
        let one = |e: &Electorate| -> Option<Tally> {
            let mut covers = Vec::with_capacity(e.len());
            let mut sent = Vec::with_capacity(e.len());
            let mut holding = 0;
            // Both sorted by id: a merge walk, not a map lookup per member (this runs on every
            // ack, so an electorate of n costs O(n) per ack).
            let mut acks = admin.voters.iter().peekable();
            for m in e.members() {
                while acks.next_if(|(id, _)| *id < m).is_some() {}
                if let Some((_, v)) = acks.next_if(|(id, _)| *id == m) {
                    covers.push(v.sent_at_ms + self.config.lease_for(v.promise_ms.min(own)));
                    sent.push(v.sent_at_ms);
                    if v.holds == Some(current) {
                        holding += 1;
                    }
                }
            }
            let q = e.quorum();
            if covers.len() < q {
                return None;
            }
            // The q-th largest of each: a selection, not a sort.
            let (_, lease_until_ms, _) = covers.select_nth_unstable_by(q - 1, |a, b| b.cmp(a));
            let (_, quorum_at_ms, _) = sent.select_nth_unstable_by(q - 1, |a, b| b.cmp(a));
            Some(Tally {
                lease_until_ms: *lease_until_ms,
                quorum_at_ms: *quorum_at_ms,
                established: holding >= q,
            })
        };
        let new = one(self.electorate.as_deref()?)?;
        match &admin.change {
            None => Some(new),
            Some(c) => {
                let old = one(&c.old)?;
                Some(Tally {
                    lease_until_ms: new.lease_until_ms.min(old.lease_until_ms),
                    quorum_at_ms: new.quorum_at_ms.min(old.quorum_at_ms),
                    established: new.established && old.established,
                })
            }
        }
    }

    /// Applies what the promises on record now support: a longer lease, a later check-quorum
    /// base, an established term, a committed membership change.
    pub(crate) fn after_acks(&mut self, out: &mut Vec<Command>) {
        let Some(t) = self.tally() else {
            return;
        };
        let term = self.term;
        let now = self.now_ms;
        let Some(admin) = &mut self.admin_state else {
            return;
        };
        admin.quorum_at_ms = admin.quorum_at_ms.max(t.quorum_at_ms);
        admin.established |= t.established;
        // Promises that end before now renew check-quorum, not the lease.
        if t.lease_until_ms > admin.lease_until_ms && t.lease_until_ms > now {
            admin.lease_until_ms = t.lease_until_ms;
            out.push(Command::Notice(Notice::LeaseRenewed {
                term,
                lease_until_ms: t.lease_until_ms,
            }));
            self.timers.set(Timer::Lease, t.lease_until_ms, out);
        }
        self.check_commit(out);
    }

    pub(crate) fn on_step_down(
        &mut self,
        from: NodeId,
        term: u64,
        successor: Option<NodeId>,
        out: &mut Vec<Command>,
    ) {
        // A second copy of a step-down already heard (broadcast and direct both arrive, and
        // `timeout_now` says the same): nothing new.
        if term <= self.term && self.resigned(term) == Some(&from) {
            return;
        }
        if term != self.term || self.admin.as_ref() != Some(&from) {
            let reason = match term.cmp(&self.term) {
                std::cmp::Ordering::Less => Refusal::Stale,
                std::cmp::Ordering::Equal if self.admin.is_some() || self.role == Role::Admin => {
                    Refusal::ConflictingAdmin
                }
                _ => Refusal::Unsolicited,
            };
            return self.refuse(from, "step_down", reason, out);
        }
        // The admin gave its lease up first, so our promise to it can end now.
        self.admin = None;
        if self.promised_to.as_ref() == Some(&from) {
            self.promise_until_ms = self.now_ms;
        }
        let deferred = self.heard_step_down(from);
        match successor {
            // This node is the successor: the step-down says what `timeout_now` says, and
            // whichever arrives first starts the vote (`transfer.rs` rule 3).
            Some(s) if s == self.id && self.can_stand() => self.start_vote(true, out),
            // Another voter was asked to stand at once: give it a timeout to win (rule 5).
            Some(_) => self.arm_suspect(self.now_ms + self.config.election_timeout_min_ms, out),
            None if self.can_stand() => self.arm_stand(out),
            None => self.arm_suspect(self.now_ms, out),
        }
        if let Some(d) = deferred {
            self.answer_deferred(d, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::*;
    use crate::{Command, Event, Message, Notice, Role, StepDownReason, Timer};

    const ABCDE: &[&str] = &["a", "b", "c", "d", "e"];

    fn beat_of(out: &[Command]) -> u64 {
        match broadcasts(out).as_slice() {
            [Message::Heartbeat { beat, .. }] => *beat,
            other => panic!("expected one heartbeat, got {other:?}"),
        }
    }

    #[test]
    fn admin_without_majority_of_acks_loses_duties_then_steps_down() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let lease = a.lease_until_ms().unwrap();
        let won_at = a.now_ms();
        // Heartbeats go out but only one voter answers: no majority, no renewal.
        let out = fire(&mut a, Timer::Heartbeat);
        let beat = beat_of(&out);
        a.step_vec(
            a.now_ms(),
            from(
                "b",
                Message::HeartbeatAck {
                    term: 1,
                    beat,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!(a.lease_until_ms(), Some(lease));
        let out = a.step_vec(
            lease,
            Event::TimerFired {
                timer: Timer::Lease,
            },
        );
        assert!(out.contains(&Command::Notice(Notice::LeaseExpired { term: 1 })));
        assert_eq!(a.role(), Role::Admin, "duties stop, the role stays");
        assert!(!a.holds_lease(lease));
        // Heartbeats continue until a full maximum election timeout without a majority.
        let deadline = won_at + a.config().election_timeout_max_ms;
        while a.role() == Role::Admin {
            let out = fire(&mut a, Timer::Heartbeat);
            if a.role() == Role::Admin {
                assert!(a.now_ms() < deadline);
                assert_eq!(broadcasts(&out).len(), 1);
            } else {
                assert!(a.now_ms() >= deadline);
                assert!(out.contains(&Command::Notice(Notice::SteppedDown {
                    term: 1,
                    reason: StepDownReason::CheckQuorum
                })));
            }
        }
    }

    /// Finding 3 of issue 32: voters configured with shorter timeouts than the admin's
    /// interval. a beats every 10 s by its settings; b and c promised 6 s (their minimum
    /// election timeout) when they voted, so a beats every 3 s instead — and never faster than
    /// a tenth of its setting, whatever a member states.
    #[test]
    fn the_admin_beats_within_half_the_shortest_promise_it_hears() {
        let config = crate::Config {
            heartbeat_interval_ms: 10_000,
            ..crate::Config::default()
        };
        let mut a = node_with("a", ABCDE, vec![crate::ADMIN_ELECTION.into()], config);
        fire(&mut a, Timer::Discovery);
        fire(&mut a, Timer::Election);
        let t = a.now_ms();
        for v in ["b", "c"] {
            a.step_vec(
                t,
                from(
                    v,
                    Message::PreVoteReply {
                        term: 1,
                        granted: true,
                    },
                ),
            );
        }
        for (v, promise_ms) in [("b", 6_000), ("c", 6_000)] {
            let reply = Message::VoteReply {
                term: 1,
                granted: true,
                promise_ms,
            };
            a.step_vec(t, from(v, reply));
        }
        assert_eq!(a.role(), Role::Admin);
        assert_eq!(a.timers.deadline(Timer::Heartbeat), Some(t + 3_000));
        let out = fire(&mut a, Timer::Heartbeat);
        let beat = beat_of(&out);
        let tiny = Message::HeartbeatAck {
            term: 1,
            beat,
            promise_ms: 3,
            holds: true,
            endorsement: None,
            certified: 0,
        };
        a.step_vec(a.now_ms(), from("d", tiny));
        fire(&mut a, Timer::Heartbeat);
        assert_eq!(
            a.timers.deadline(Timer::Heartbeat),
            Some(a.now_ms() + 1_000),
            "a tenth of the setting at most"
        );
    }

    #[test]
    fn majority_of_acks_renews_from_send_time_and_duplicates_do_not_count() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = fire(&mut a, Timer::Heartbeat);
        let (beat, sent) = (beat_of(&out), a.now_ms());
        let ack = Message::HeartbeatAck {
            term: 1,
            beat,
            promise_ms: 30_000,
            holds: false,
            endorsement: None,
            certified: 0,
        };
        a.step_vec(sent + 5, from("b", ack.clone()));
        a.step_vec(sent + 6, from("b", ack.clone()));
        assert_ne!(
            a.lease_until_ms(),
            Some(sent + a.config().lease_ms()),
            "b counted once"
        );
        let out = a.step_vec(sent + 7, from("c", ack.clone()));
        let until = sent + a.config().lease_ms();
        assert_eq!(a.lease_until_ms(), Some(until));
        assert!(out.contains(&Command::Notice(Notice::LeaseRenewed {
            term: 1,
            lease_until_ms: until
        })));
        // A further ack of the same round renews nothing new, and says nothing.
        let out = a.step_vec(sent + 8, from("d", ack));
        assert_eq!(a.lease_until_ms(), Some(until));
        assert!(out.is_empty(), "{out:?}");
    }

    fn step_down_refusal(c: &mut crate::Core, t: u64, sender: &str, term: u64) -> crate::Refusal {
        match c
            .step_vec(
                t,
                from(
                    sender,
                    Message::StepDown {
                        term,
                        successor: None,
                    },
                ),
            )
            .as_slice()
        {
            [Command::Notice(Notice::Refused { reason, .. })] => *reason,
            other => panic!("one refusal expected, got {other:?}"),
        }
    }

    #[test]
    fn step_downs_not_from_the_terms_admin_are_refused_by_reason() {
        use crate::Refusal::{ConflictingAdmin, Stale, Unsolicited};
        let mut b = voter("b", ABCDE);
        // No admin known for the term: nothing was asked of anyone.
        assert_eq!(step_down_refusal(&mut b, 1, "a", 0), Unsolicited);
        assert_eq!(step_down_refusal(&mut b, 2, "a", 3), Unsolicited);
        let hb = Message::Heartbeat {
            term: 2,
            beat: 1,
            membership_version: 1,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        };
        b.step_vec(3, from("a", hb));
        assert_eq!(step_down_refusal(&mut b, 4, "a", 1), Stale);
        assert_eq!(step_down_refusal(&mut b, 5, "c", 2), ConflictingAdmin);
    }

    #[test]
    fn a_follower_behind_on_membership_asks_the_admin_and_only_then() {
        let hb = |v| Message::Heartbeat {
            term: 1,
            beat: 1,
            membership_version: v,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        };
        let whoami = Message::Whoami {
            electorate_version: 1,
            electorate_term: 0,
            electorate_stamp: 0,
        };
        let mut b = voter("b", ABCDE);
        let out = b.step_vec(5, from("a", hb(2)));
        assert!(sent_to(&out, "a").contains(&&whoami), "{out:?}");
        for v in [0, 1] {
            let out = b.step_vec(6, from("a", hb(v)));
            assert!(
                !sent_to(&out, "a").contains(&&whoami),
                "version {v}: {out:?}"
            );
        }
    }

    #[test]
    fn a_late_ack_after_stepping_down_is_stale_and_one_beyond_is_unsolicited() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        // No acks: check-quorum retires the admin, still in term 1.
        while a.role() == Role::Admin {
            fire(&mut a, Timer::Heartbeat);
        }
        let beat = a.beat();
        assert_eq!(a.term(), 1);
        let refused = |out: &[Command]| match out {
            [Command::Notice(Notice::Refused { reason, .. })] => *reason,
            other => panic!("one refusal expected, got {other:?}"),
        };
        let late = a.step_vec(
            a.now_ms(),
            from(
                "b",
                Message::HeartbeatAck {
                    term: 1,
                    beat,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!(refused(&late), crate::Refusal::Stale);
        let beyond = Message::HeartbeatAck {
            term: 1,
            beat: beat + 1,
            promise_ms: 30_000,
            holds: false,
            endorsement: None,
            certified: 0,
        };
        assert_eq!(
            refused(&a.step_vec(a.now_ms(), from("b", beyond))),
            crate::Refusal::Unsolicited
        );
        let higher = Message::HeartbeatAck {
            term: 2,
            beat,
            promise_ms: 30_000,
            holds: false,
            endorsement: None,
            certified: 0,
        };
        assert_eq!(
            refused(&a.step_vec(a.now_ms(), from("b", higher))),
            crate::Refusal::Unsolicited
        );
    }

    // Issue 9, case 4: under loss and reordering voters ack different beats; a majority that
    // acknowledged *some* beat at or after a round renews from that round's send time.
    #[test]
    fn acks_of_different_beats_add_up_and_late_acks_still_count() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = fire(&mut a, Timer::Heartbeat);
        let (b2, sent2) = (beat_of(&out), a.now_ms());
        let out = fire(&mut a, Timer::Heartbeat);
        let (b3, sent3) = (beat_of(&out), a.now_ms());
        assert_eq!((b2 + 1, sent2 < sent3), (b3, true));
        let before = a.lease_until_ms().unwrap();
        a.step_vec(
            sent3 + 1,
            from(
                "b",
                Message::HeartbeatAck {
                    term: 1,
                    beat: b2,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!(a.lease_until_ms(), Some(before), "a and b: no majority yet");
        let out = a.step_vec(
            sent3 + 2,
            from(
                "c",
                Message::HeartbeatAck {
                    term: 1,
                    beat: b3,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        // a, b and c all promised at or after beat b2 was sent; only a and c after b3.
        let until = sent2 + a.config().lease_ms();
        assert_eq!(a.lease_until_ms(), Some(until));
        assert!(out.contains(&Command::Notice(Notice::LeaseRenewed {
            term: 1,
            lease_until_ms: until
        })));
        // A late ack of the older beat from d adds nothing past what d acknowledged...
        a.step_vec(
            sent3 + 3,
            from(
                "d",
                Message::HeartbeatAck {
                    term: 1,
                    beat: b2,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!(a.lease_until_ms(), Some(until));
        // ...but d's later ack of b3 completes a majority for b3.
        a.step_vec(
            sent3 + 4,
            from(
                "d",
                Message::HeartbeatAck {
                    term: 1,
                    beat: b3,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!(a.lease_until_ms(), Some(sent3 + a.config().lease_ms()));
    }

    #[test]
    fn a_renewal_that_comes_back_after_the_lease_ended_renews_no_lease() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = fire(&mut a, Timer::Heartbeat);
        let (beat, sent) = (beat_of(&out), a.now_ms());
        // Exactly when the lease it would renew ends: too late to renew anything.
        let late = sent + a.config().lease_ms();
        a.step_vec(
            late,
            from(
                "b",
                Message::HeartbeatAck {
                    term: 1,
                    beat,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        let out = a.step_vec(
            late,
            from(
                "c",
                Message::HeartbeatAck {
                    term: 1,
                    beat,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert!(!a.holds_lease(late));
        assert!(!out
            .iter()
            .any(|c| matches!(c, Command::Notice(Notice::LeaseRenewed { .. }))));
        // Check-quorum did count it: the admin is still in touch with a majority.
        assert_eq!(a.admin_state.as_ref().unwrap().quorum_at_ms, sent);
    }

    #[test]
    fn the_lease_ends_before_any_voter_promise() {
        let c = crate::Config::default();
        assert!(c.lease_ms() < c.election_timeout_min_ms);
        let drift = f64::from(c.max_clock_drift_ppm) / 1e6;
        // A slow admin clock stretches the lease; a fast voter clock shrinks the promise.
        assert!(
            c.lease_ms() as f64 / (1.0 - drift) <= c.election_timeout_min_ms as f64 / (1.0 + drift)
        );
    }

    #[test]
    fn stale_admin_steps_down_on_a_higher_term_ack() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = a.step_vec(
            a.now_ms(),
            from(
                "d",
                Message::HeartbeatAck {
                    term: 2,
                    beat: 1,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!((a.role(), a.term()), (Role::Follower, 2));
        assert!(out.contains(&Command::Notice(Notice::SteppedDown {
            term: 1,
            reason: StepDownReason::HigherTerm
        })));
    }

    #[test]
    fn follower_answers_a_stale_heartbeat_with_its_term() {
        let mut b = voter("b", ABCDE);
        b.step_vec(0, from("c", vote_req(&b, 3)));
        let out = b.step_vec(
            1,
            from(
                "a",
                Message::Heartbeat {
                    term: 2,
                    beat: 4,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            ),
        );
        assert_eq!(
            sent_to(&out, "a"),
            [&Message::HeartbeatAck {
                term: 3,
                beat: 4,
                promise_ms: 0,
                holds: false,
                endorsement: None,
                certified: 0,
            }],
            "a stale admin gets no promise"
        );
        assert_eq!(b.admin(), None);
    }

    #[test]
    fn heartbeat_makes_the_admin_known_and_is_acked() {
        let mut b = voter("b", ABCDE);
        let out = b.step_vec(
            5,
            from(
                "a",
                Message::Heartbeat {
                    term: 1,
                    beat: 9,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            ),
        );
        assert!(out.contains(&Command::Notice(Notice::AdminKnown {
            admin: "a".into(),
            term: 1
        })));
        // Holding the electorate, b sends its endorsement of it (`catchup.rs`), and says which
        // version it can vouch for: its first electorate, version 1.
        let statement = b.electorate().unwrap().statement();
        assert_eq!(
            sent_to(&out, "a"),
            [&Message::HeartbeatAck {
                term: 1,
                beat: 9,
                promise_ms: 30_000,
                holds: true,
                endorsement: Some(crate::certificate::simulated_signature(
                    &"b".into(),
                    &statement
                )),
                certified: 1,
            }]
        );
        assert_eq!((b.term(), b.beat()), (1, 9));
        assert_eq!(b.stamp(), 1, "b holds a's electorate, confirmed in term 1");
        assert_eq!(b.timers.deadline(Timer::Election), Some(5 + MIN));
    }

    /// A voter endorses the electorate it holds only while the admin's heartbeat says the
    /// admin lacks a link to it (its `certified` below its electorate's version, 0 = unsaid):
    /// an idle cluster's acknowledgements carry no signature (issue 54, item 10). Fails on
    /// endorsing at every acknowledgement (the idle ack is then 274 bytes instead of 129).
    #[test]
    fn a_voter_endorses_only_while_its_admin_wants_a_link() {
        for (certified, endorses) in [(0, true), (1, false), (2, false)] {
            let mut b = voter("b", ABCDE);
            let statement = b.electorate().unwrap().statement();
            let out = b.step_vec(
                5,
                from(
                    "a",
                    Message::Heartbeat {
                        term: 1,
                        beat: 9,
                        membership_version: 1,
                        genesis: 0,
                        electorate: None,
                        membership_term: 0,
                        certified,
                    },
                ),
            );
            let want =
                endorses.then(|| crate::certificate::simulated_signature(&"b".into(), &statement));
            let acks: Vec<_> = sent_to(&out, "a")
                .into_iter()
                .filter_map(|m| match m {
                    Message::HeartbeatAck {
                        holds, endorsement, ..
                    } => Some((*holds, endorsement.clone())),
                    _ => None,
                })
                .collect();
            assert_eq!(acks, [(true, want)], "admin's certified {certified}");
        }
        // While a change commits (the heartbeat names version 2, its admin certified up to 1)
        // the voter endorses: `membership::a_voter_asleep_through_a_whole_roll_rejoins_the_rolled_cluster`
        // (core suite) fails when it never does.
    }

    #[test]
    fn graceful_shutdown_hands_over_at_once() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let out = a.step_vec(a.now_ms(), Event::Shutdown);
        assert!(broadcasts(&out).contains(&&Message::StepDown {
            term: 1,
            successor: None
        }));
        assert!(out.contains(&Command::Notice(Notice::SteppedDown {
            term: 1,
            reason: StepDownReason::Shutdown
        })));
        let mut b = voter("b", ABCDE);
        b.step_vec(
            100,
            from(
                "a",
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
        b.step_vec(
            200,
            from(
                "a",
                Message::StepDown {
                    term: 1,
                    successor: None,
                },
            ),
        );
        assert_eq!(b.admin(), None);
        // b stands within the election window rather than after a full timeout.
        assert!(b.timers.deadline(Timer::Election).unwrap() <= 200 + 15_000);
        // The promise to a is released: b can support another candidate right away, and then
        // leaves that candidate time to win instead of standing against it.
        let out = b.step_vec(201, from("c", pre_vote_req(&b, 2)));
        assert_eq!(
            sent_to(&out, "c"),
            [&Message::PreVoteReply {
                term: 2,
                granted: true
            }]
        );
        assert_eq!(b.timers.deadline(Timer::Election), Some(201 + MIN));
    }

    #[test]
    fn restarted_admin_holds_no_lease() {
        let mut a = elect("a", ABCDE, &["b", "c"]);
        let t = a.now_ms() + 1;
        a.step_vec(t, Event::Started);
        assert_eq!(
            (a.role(), a.term(), a.lease_until_ms()),
            (Role::Follower, 1, None)
        );
        assert!(!a.holds_lease(t));
    }
}

#[cfg(test)]
mod config_change {
    use crate::testutil::*;
    use crate::{Config, Event, Timer};

    #[test]
    fn new_timings_apply_from_the_next_timer_and_survive_replay() {
        let mut b = voter("b", &["a", "b", "c"]);
        let faster = Config {
            heartbeat_interval_ms: 1_000,
            election_timeout_min_ms: 3_000,
            election_timeout_max_ms: 4_500,
            discovery_timeout_ms: 1_000,
            ..Config::default()
        };
        b.step_vec(
            10,
            Event::ConfigChanged {
                config: faster.clone(),
            },
        );
        assert_eq!(b.config(), &faster);
        b.step_vec(
            20,
            from(
                "a",
                crate::Message::Heartbeat {
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
        assert_eq!(b.timers.deadline(Timer::Election), Some(20 + 3_000));
        // Another cluster's id or an invalid config is ignored.
        let other = Config {
            cluster_id: "other".into(),
            ..faster.clone()
        };
        b.step_vec(30, Event::ConfigChanged { config: other });
        let broken = Config {
            election_timeout_max_ms: 1,
            ..faster.clone()
        };
        b.step_vec(31, Event::ConfigChanged { config: broken });
        assert_eq!(b.config(), &faster);
    }
}
