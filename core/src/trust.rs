//! Admission of network input: the bound on every number a peer sends, who may send what, and
//! the refusals a node counts and reports instead of acting.
//!
//! Peers are authenticated but not trusted (docs/design.md §9.1): a peer may be buggy,
//! misconfigured or hostile. The rules, each checked by a test in this file:
//! 1. Every number from the wire is bounded: terms, beats and versions by [`MAX_WIRE_INT`]
//!    (2⁵³ − 1, the largest integer every JSON implementation holds exactly), uptimes by
//!    [`MAX_UPTIME_S`]. A message with a number out of range is refused whole.
//! 2. Only members of this node's electorate speak for it: a message that carries a term from
//!    anyone else is refused, and so is every such message while this node knows no electorate.
//! 3. A heartbeat counts only from the admin of its term: never while this node is that term's
//!    admin, never from another node once the term's admin is known.
//! 4. Replies nobody asked for are refused: vote and pre-vote replies outside a round of this
//!    node, heartbeat acks for beats this admin did not send, WHOAMI replies from peers not
//!    asked.
//!
//! A refusal changes no state; it becomes a [`Notice::Refused`] for logs and metrics.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::{Command, Core, Message, NodeId, Notice};

/// The largest term, beat or electorate version accepted from the wire or reached locally.
pub const MAX_WIRE_INT: u64 = (1 << 53) - 1;

/// The largest uptime a peer may claim (a century). The score saturates after a day anyway.
pub const MAX_UPTIME_S: u64 = 100 * 365 * 86_400;

/// At most this many advertised capabilities are kept for a peer (the score counts ten).
pub const MAX_CAPABILITIES: usize = 64;

/// Why a message was refused. A refusal changes no state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// A message that carries a term, from a peer outside this node's electorate (or while this
    /// node knows no electorate).
    NotMember,
    /// A number beyond its bound (see [`MAX_WIRE_INT`], [`MAX_UPTIME_S`]).
    OutOfRange,
    /// A reply to nothing this node asked.
    Unsolicited,
    /// A heartbeat or step-down for a term whose admin is another node, or this node.
    ConflictingAdmin,
    /// A reply that arrived after its round ended: normal under delay and duplication.
    Stale,
    /// A bootstrap message from a peer that does not advertise `admin_election`.
    NotEligible,
    /// A peer of another cluster: its electorate descends from another bootstrap. An
    /// operator's mistake (two clusters founded); neither takes over the other's nodes.
    ForeignCluster,
    /// A peer whose settings cannot work with this node's (another `bootstrap_expect`, or an
    /// electorate of another size at bootstrap). An operator's mistake, reported loudly.
    SettingsMismatch,
    /// A task message about a task the sender does not own: an offer or an acknowledgement
    /// from a node other than the task's origin, or a result for a task another node owns.
    NotOwner,
    /// A link of electorates whose signatures do not check (not a majority of the electorate
    /// before it, a signer outside it, a bad signature), or an endorsement that does not.
    BadCertificate,
}

impl Refusal {
    /// Every reason, for metrics that list them all.
    pub const ALL: [Refusal; 10] = [
        Refusal::NotMember,
        Refusal::OutOfRange,
        Refusal::Unsolicited,
        Refusal::ConflictingAdmin,
        Refusal::Stale,
        Refusal::NotEligible,
        Refusal::ForeignCluster,
        Refusal::SettingsMismatch,
        Refusal::NotOwner,
        Refusal::BadCertificate,
    ];

    /// The snake_case name used in metrics, logs and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotMember => "not_member",
            Refusal::OutOfRange => "out_of_range",
            Refusal::Unsolicited => "unsolicited",
            Refusal::ConflictingAdmin => "conflicting_admin",
            Refusal::Stale => "stale",
            Refusal::NotEligible => "not_eligible",
            Refusal::ForeignCluster => "foreign_cluster",
            Refusal::SettingsMismatch => "settings_mismatch",
            Refusal::NotOwner => "not_owner",
            Refusal::BadCertificate => "bad_certificate",
        }
    }

    /// Whether honest peers on a lossy, reordering network cause this refusal too (so it says
    /// nothing about the sender and is not worth a warning).
    pub fn is_benign(self) -> bool {
        self == Refusal::Stale
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most members an electorate may have. A message that carries more than about a thousand
/// travels in parts (`codec::encode_parts`); every election then needs tens of thousands of
/// replies, which is as far as a majority protocol sensibly goes.
pub const MAX_MEMBERS: usize = 65_536;

/// The longest node id accepted from the wire, in bytes (a libp2p peer id is 46–53).
pub const MAX_ID_BYTES: usize = 96;

fn check_id(id: &NodeId) -> Result<(), Refusal> {
    if id.as_str().len() > MAX_ID_BYTES {
        return Err(Refusal::OutOfRange);
    }
    Ok(())
}

fn promise_in_range(ms: u64) -> Result<(), Refusal> {
    if ms <= crate::MAX_TIMING_MS {
        Ok(())
    } else {
        Err(Refusal::OutOfRange)
    }
}

fn check_task_id(t: &crate::TaskId) -> Result<(), Refusal> {
    if t.seq == 0 || t.origin.as_str().is_empty() {
        return Err(Refusal::OutOfRange);
    }
    in_range(t.seq)
}

fn check_ballot(b: &crate::Ballot) -> Result<(), Refusal> {
    if b.round == 0 {
        return Err(Refusal::OutOfRange);
    }
    check_id(&b.node)?;
    in_range(b.round)
}

/// An electorate from the wire: a version and proposing term in range, 1 to [`MAX_MEMBERS`]
/// members and at most `MAX_RETIRED` removed ids, each id at most [`MAX_ID_BYTES`].
fn check_electorate(e: &crate::Electorate) -> Result<(), Refusal> {
    if e.version == 0 || e.is_empty() || e.len() > MAX_MEMBERS {
        return Err(Refusal::OutOfRange);
    }
    if e.retired().len() > crate::MAX_RETIRED {
        return Err(Refusal::OutOfRange);
    }
    in_range(e.version)?;
    in_range(e.term)?;
    e.members().iter().try_for_each(check_id)?;
    e.retired().iter().try_for_each(check_id)
}

/// A bootstrap proposal is always version 1, proposed in no term.
fn check_bootstrap_electorate(e: &crate::Electorate) -> Result<(), Refusal> {
    check_electorate(e)?;
    if e.version != 1 || e.term != 0 || !e.retired().is_empty() {
        return Err(Refusal::OutOfRange);
    }
    Ok(())
}

fn in_range(n: u64) -> Result<(), Refusal> {
    if n <= MAX_WIRE_INT {
        Ok(())
    } else {
        Err(Refusal::OutOfRange)
    }
}

impl Message {
    /// Checks every number in the message against its bound.
    pub fn check_bounds(&self) -> Result<(), Refusal> {
        use Message as M;
        match self {
            M::Whoami {
                electorate_version,
                electorate_term,
                electorate_stamp,
            } => {
                in_range(*electorate_version)?;
                in_range(*electorate_stamp)?;
                in_range(*electorate_term)
            }
            M::WhoamiReply {
                admin,
                term,
                membership_version,
                beat,
                uptime_s,
                electorate,
                electorate_stamp,
                ..
            } => {
                admin.as_ref().map_or(Ok(()), check_id)?;
                in_range(*term)?;
                // A stamp is a term the replier lived through.
                if electorate_stamp > term {
                    return Err(Refusal::OutOfRange);
                }
                in_range(*membership_version)?;
                in_range(*beat)?;
                if *uptime_s > MAX_UPTIME_S {
                    return Err(Refusal::OutOfRange);
                }
                electorate.as_deref().map_or(Ok(()), check_electorate)
            }
            M::PreVoteRequest {
                term,
                electorate_version,
                electorate_term,
                electorate_stamp,
                ..
            }
            | M::VoteRequest {
                term,
                electorate_version,
                electorate_term,
                electorate_stamp,
                ..
            } => {
                in_range(*term)?;
                in_range(*electorate_term)?;
                // A stamp is a term the candidate lived through: never above the one it asks
                // for (a member inflating it would outrank every honest candidate).
                if electorate_stamp > term {
                    return Err(Refusal::OutOfRange);
                }
                in_range(*electorate_version)
            }
            M::PreVoteReply { term, .. } | M::TimeoutNow { term } => in_range(*term),
            M::StepDown { term, successor } => {
                successor.as_ref().map_or(Ok(()), check_id)?;
                in_range(*term)
            }
            M::VoteReply {
                term, promise_ms, ..
            } => {
                in_range(*term)?;
                promise_in_range(*promise_ms)
            }
            M::Heartbeat {
                term,
                beat,
                membership_version,
                membership_term,
                electorate,
                certified,
                ..
            } => {
                in_range(*term)?;
                in_range(*beat)?;
                in_range(*certified)?;
                in_range(*membership_version)?;
                in_range(*membership_term)?;
                electorate.as_deref().map_or(Ok(()), check_electorate)
            }
            M::HeartbeatAck {
                term,
                beat,
                promise_ms,
                holds: _,
                endorsement: _,
                certified,
            } => {
                in_range(*term)?;
                in_range(*beat)?;
                in_range(*certified)?;
                promise_in_range(*promise_ms)
            }
            M::ChainRequest { after } => in_range(*after),
            M::Chain { links } => {
                if links.len() > crate::certificate::MAX_LINKS_PER_MESSAGE {
                    return Err(Refusal::OutOfRange);
                }
                links.iter().try_for_each(|l| {
                    check_electorate(&l.electorate)?;
                    if l.electorate.version < 2 || l.signers.len() > MAX_MEMBERS {
                        return Err(Refusal::OutOfRange);
                    }
                    l.signers.iter().try_for_each(|(id, _)| check_id(id))
                })
            }
            M::BootstrapPrepare { ballot, expect } => {
                check_ballot(ballot)?;
                if *expect == 0 || *expect as usize > MAX_MEMBERS {
                    return Err(Refusal::OutOfRange);
                }
                Ok(())
            }
            M::BootstrapPromise { ballot, accepted } => {
                check_ballot(ballot)?;
                if let Some((b, e)) = accepted {
                    check_ballot(b)?;
                    check_bootstrap_electorate(e)?;
                }
                Ok(())
            }
            M::BootstrapAccept { ballot, electorate } => {
                check_ballot(ballot)?;
                check_bootstrap_electorate(electorate)
            }
            M::BootstrapAccepted { ballot } => check_ballot(ballot),
            M::BootstrapRefused {
                ballot, promised, ..
            } => {
                check_ballot(ballot)?;
                promised.as_ref().map_or(Ok(()), check_ballot)
            }
            M::BootstrapChosen { electorate } => check_bootstrap_electorate(electorate),
            M::ChangeRequest { .. } => Ok(()),
            M::ChangeResult { outcome, .. } => match outcome {
                crate::ChangeOutcome::Proposed { version }
                | crate::ChangeOutcome::Committed { version } => in_range(*version),
                _ => Ok(()),
            },
            // Specs, results and report lists are checked by their handlers (`task/`), which
            // know what each bound means; here only the numbers every task message carries.
            M::TaskOffer { task, .. }
            | M::TaskState { task, .. }
            | M::TaskResult { task, .. }
            | M::TaskResultAck { task, worker: None }
            | M::TaskCancelAsk { task }
            | M::TaskCancelAsked { task } => check_task_id(task),
            M::TaskResultAck {
                task,
                worker: Some(worker),
            } => {
                check_id(worker)?;
                check_task_id(task)
            }
            M::TaskPlace {
                term, task, seq, ..
            } => {
                in_range(*term)?;
                in_range(*seq)?;
                check_task_id(task)
            }
            M::TaskCancel { term, task } => {
                in_range(*term)?;
                check_task_id(task)
            }
            M::WorkerReport { term, seen, .. } => {
                in_range(*term)?;
                in_range(*seen)
            }
        }
    }

    /// Whether the message carries a term, so only a member of the electorate may send it.
    /// (Bootstrap messages carry none: they come before any electorate, from eligible peers.
    /// A change request may come from a standby; `change_result` comes from the admin, so it
    /// is gated like the messages that carry a term.)
    pub fn carries_term(&self) -> bool {
        !matches!(
            self,
            Message::Whoami { .. }
                | Message::WhoamiReply { .. }
                | Message::BootstrapPrepare { .. }
                | Message::BootstrapPromise { .. }
                | Message::BootstrapAccept { .. }
                | Message::BootstrapAccepted { .. }
                | Message::BootstrapRefused { .. }
                | Message::BootstrapChosen { .. }
                | Message::ChangeRequest { .. }
                // Public, and checked link by link (`catchup.rs`): a voter that missed every
                // change asks a node outside the electorate it knows.
                | Message::ChainRequest { .. }
                | Message::Chain { .. }
                // Judged by their own rules (`task/`): submitters, workers and results come
                // from any node of the cluster, members or not.
                | Message::TaskOffer { .. }
                | Message::TaskState { .. }
                | Message::WorkerReport { .. }
                | Message::TaskResult { .. }
                | Message::TaskResultAck { .. }
                | Message::TaskCancelAsk { .. }
                | Message::TaskCancelAsked { .. }
        )
    }
}

impl Core {
    /// Rules 1 and 2: the checks every message passes before its handler sees it.
    pub(crate) fn admit(&self, from: &NodeId, msg: &Message) -> Result<(), Refusal> {
        msg.check_bounds()?;
        // A standby acknowledges its admin's heartbeats too (autopilot's evidence).
        let standby_ack = matches!(msg, Message::HeartbeatAck { .. })
            && self.role == crate::Role::Admin
            && self.peers.get(from).is_some_and(|p| p.eligible());
        if msg.carries_term()
            && !self.speaks_for_cluster(from)
            && !standby_ack
            && !self.may_be_a_newer_member(from, msg)
        {
            return Err(Refusal::NotMember);
        }
        Ok(())
    }

    /// A (pre-)vote request from an eligible peer outside this node's electorate that names a
    /// position ahead of this node's: a member added by a change this node missed. Its
    /// electorate decides whose grants count, and a voter grants only to positions at least
    /// its own (`membership.rs`), so admitting it is Raft's "vote for any up-to-date log".
    /// Refusing it left a cut-short change without an admin when the new member ranked first
    /// and a voter that missed the change would not hear it. A worker is never admitted here.
    fn may_be_a_newer_member(&self, from: &NodeId, msg: &Message) -> bool {
        let (stamp, version) = match msg {
            Message::PreVoteRequest {
                electorate_stamp,
                electorate_version,
                ..
            }
            | Message::VoteRequest {
                electorate_stamp,
                electorate_version,
                ..
            } => (*electorate_stamp, *electorate_version),
            _ => return false,
        };
        self.peers.get(from).is_some_and(|p| p.eligible()) && (stamp, version) > self.position()
    }

    /// Who may send messages that carry a term: members of this node's electorate; while an
    /// admin commits a change, the members of the electorate before it too; the admin this
    /// node knows for its term (which may be committing its own removal); and the candidate
    /// it voted for in its term (admitted as a member of a later electorate, it must be heard
    /// once elected, or the node that elected it refuses its heartbeats: `chorus-sim fuzz`
    /// seed 14151).
    pub(crate) fn speaks_for_cluster(&self, id: &NodeId) -> bool {
        self.counts_as_voter(id)
            || self.admin.as_ref() == Some(id)
            || self.voted_for.as_ref() == Some(id)
    }

    /// Whether `id` is a member of this node's electorate.
    pub(crate) fn is_member(&self, id: &NodeId) -> bool {
        self.electorate.as_ref().is_some_and(|e| e.contains(id))
    }

    /// Reports a refused message. No state changes.
    pub(crate) fn refuse(
        &self,
        from: NodeId,
        kind: &'static str,
        reason: Refusal,
        out: &mut Vec<Command>,
    ) {
        out.push(Command::Notice(Notice::Refused {
            from,
            message: Cow::Borrowed(kind),
            reason,
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testutil::*;
    use crate::{Ballot, Electorate, Event, PeerInfo, Role, Timer};

    const ABC: &[&str] = &["a", "b", "c"];

    fn refusals(out: &[Command]) -> Vec<(String, Refusal)> {
        out.iter()
            .filter_map(|c| match c {
                Command::Notice(Notice::Refused { from, reason, .. }) => {
                    Some((from.to_string(), *reason))
                }
                _ => None,
            })
            .collect()
    }

    /// Whether `out` does nothing but report refusals.
    fn only_refusals(out: &[Command]) -> bool {
        !out.is_empty()
            && out
                .iter()
                .all(|c| matches!(c, Command::Notice(Notice::Refused { .. })))
    }

    fn heartbeat(term: u64, beat: u64) -> Message {
        Message::Heartbeat {
            term,
            beat,
            membership_version: 1,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        }
    }

    // Issue 9, case 1: a heartbeat for the admin's own term from any peer used to reach an
    // `assert!` ("two admins in term …"), and the logged event crashed every restart. From a
    // non-member it is refused and nothing else; from a member it means two admins of one
    // term (issue 32), so the admin also steps down and a higher term decides.
    #[test]
    fn a_heartbeat_for_the_admins_own_term_is_refused_not_a_crash() {
        for sender in ["c", "w"] {
            let mut a = elect("a", ABC, &["b"]);
            let before = a.clone();
            let out = a.step_vec(a.now_ms(), from(sender, heartbeat(1, 99)));
            let reason = if sender == "c" {
                Refusal::ConflictingAdmin
            } else {
                Refusal::NotMember
            };
            assert_eq!(refusals(&out), [(sender.to_owned(), reason)]);
            assert_eq!((a.term(), a.beat()), (1, before.beat()));
            if sender == "c" {
                assert_eq!(a.role(), Role::Follower);
                assert!(out.contains(&Command::Notice(Notice::SteppedDown {
                    term: 1,
                    reason: crate::StepDownReason::ConflictingAdmin
                })));
            } else {
                assert!(only_refusals(&out));
                assert_eq!(a.role(), Role::Admin);
            }
        }
    }

    #[test]
    fn a_follower_refuses_a_second_admin_for_a_term() {
        let mut b = voter("b", ABC);
        b.step_vec(1, from("a", heartbeat(1, 1)));
        let out = b.step_vec(2, from("c", heartbeat(1, 50)));
        assert_eq!(
            refusals(&out),
            [("c".to_owned(), Refusal::ConflictingAdmin)]
        );
        assert!(only_refusals(&out));
        assert_eq!((b.admin().unwrap().as_str(), b.beat()), ("a", 1));
        // A step-down from the impostor is refused too; the real admin's is not.
        let out = b.step_vec(
            3,
            from(
                "c",
                Message::StepDown {
                    term: 1,
                    successor: None,
                },
            ),
        );
        assert_eq!(
            refusals(&out),
            [("c".to_owned(), Refusal::ConflictingAdmin)]
        );
        assert_eq!(b.admin().unwrap().as_str(), "a");
    }

    // Issue 9, case 2: u64::MAX in any term field used to be adopted and wrapped `term + 1`.
    #[test]
    fn terms_beyond_the_wire_bound_are_refused_from_anyone() {
        let huge = [MAX_WIRE_INT + 1, u64::MAX];
        for term in huge {
            let msgs = [
                heartbeat(term, 1),
                Message::HeartbeatAck {
                    term,
                    beat: 1,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
                Message::VoteReply {
                    term,
                    granted: false,
                    promise_ms: 0,
                },
                Message::PreVoteReply {
                    term,
                    granted: false,
                },
                Message::StepDown {
                    term,
                    successor: None,
                },
                Message::WhoamiReply {
                    admin: Some("b".into()),
                    term,
                    membership_version: 1,
                    beat: 1,
                    eligible: true,
                    uptime_s: 0,
                    resources: Default::default(),
                    electorate: None,
                    genesis: 0,
                    electorate_stamp: 0,
                },
            ];
            for msg in msgs {
                let mut a = elect("a", ABC, &["b"]);
                let out = a.step_vec(a.now_ms(), from("b", msg.clone()));
                assert_eq!(
                    refusals(&out),
                    [("b".to_owned(), Refusal::OutOfRange)],
                    "{msg:?}"
                );
                assert_eq!((a.role(), a.term()), (Role::Admin, 1), "{msg:?}");
            }
        }
        let mut b = voter("b", ABC);
        let out = b.step_vec(1, from("a", heartbeat(1, u64::MAX)));
        assert_eq!(refusals(&out), [("a".to_owned(), Refusal::OutOfRange)]);
        assert_eq!((b.beat(), b.admin()), (0, None));
    }

    #[test]
    fn a_node_at_the_top_of_the_term_range_does_not_stand() {
        let mut a = voter("a", ABC);
        a.step_vec(1, from("b", heartbeat(MAX_WIRE_INT, 1)));
        assert_eq!(a.term(), MAX_WIRE_INT, "the largest term is still a term");
        let t = a.timers.deadline(Timer::Election).unwrap();
        a.step_vec(
            t,
            Event::TimerFired {
                timer: Timer::Election,
            },
        );
        assert!(!a.can_stand());
        assert_eq!(a.timers.deadline(Timer::Election), None);
        assert_eq!((a.role(), a.term()), (Role::Follower, MAX_WIRE_INT));
        // And it grants no pre-vote it could never follow with a vote.
        let out = a.step_vec(t + 1, from("c", pre_vote_req(&a, MAX_WIRE_INT)));
        assert_eq!(
            sent_to(&out, "c"),
            [&Message::PreVoteReply {
                term: MAX_WIRE_INT,
                granted: false
            }]
        );
    }

    /// The beat counter has a top too: a node that has seen beat `MAX_WIRE_INT` does not stand,
    /// since as admin it could send no next beat. Fails on `can_stand`: `beat <` → `<=`.
    #[test]
    fn a_node_at_the_top_of_the_beat_range_does_not_stand() {
        let mut a = voter("a", ABC);
        a.step_vec(1, from("b", heartbeat(1, MAX_WIRE_INT)));
        assert_eq!(a.beat(), MAX_WIRE_INT, "the largest beat is still a beat");
        assert!(!a.can_stand());
        let t = a.timers.deadline(Timer::Election).unwrap();
        let out = a.step_vec(
            t,
            Event::TimerFired {
                timer: Timer::Election,
            },
        );
        assert_eq!(a.timers.deadline(Timer::Election), None, "{out:?}");
        assert_eq!(a.role(), Role::Follower);
        // One beat below the top it stands as usual.
        let mut b = voter("b", ABC);
        b.step_vec(1, from("c", heartbeat(1, MAX_WIRE_INT - 1)));
        assert!(b.can_stand());
    }

    // Issue 9, case 3: an unsolicited whoami reply replaced the electorate.
    #[test]
    fn an_unsolicited_whoami_reply_changes_nothing() {
        let mut a = voter("a", ABC);
        let before = a.clone();
        let fake = Arc::new(Electorate::new(2, vec!["w".into()]));
        let reply = Message::WhoamiReply {
            admin: Some("w".into()),
            term: 7,
            membership_version: 2,
            beat: 1_000,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: Some(fake.clone()),
            genesis: 0,
            electorate_stamp: 0,
        };
        let out = a.step_vec(5, from("w", reply.clone()));
        assert_eq!(refusals(&out), [("w".to_owned(), Refusal::Unsolicited)]);
        assert_eq!(
            (a.electorate(), a.term(), a.beat(), a.admin()),
            (before.electorate(), 0, 0, None)
        );
        // Asked, the worker's reply is heard — but a newer electorate from a reply alone does
        // not replace the committed one, and a non-member's report does not make an admin.
        let up = Event::peer_up(
            "w".into(),
            PeerInfo {
                capabilities: vec!["docker".to_owned()].into(),
                ..Default::default()
            },
        );
        a.step_vec(6, up);
        let out = a.step_vec(7, from("w", reply));
        assert!(refusals(&out).is_empty());
        assert_eq!(
            (a.electorate(), a.term(), a.beat(), a.admin()),
            (before.electorate(), 0, 0, None)
        );
    }

    #[test]
    fn a_node_without_an_electorate_adopts_one_only_from_eligible_peers() {
        let mut n = Core::new("n".into(), Default::default(), vec!["docker".into()], 1).unwrap();
        n.step_vec(0, Event::Started);
        let e = |members: &[&str]| {
            Arc::new(Electorate::new(
                1,
                members.iter().map(|m| NodeId::from(*m)).collect(),
            ))
        };
        let reply = |e: Arc<Electorate>| Message::WhoamiReply {
            admin: None,
            term: 0,
            membership_version: 1,
            beat: 0,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: Some(e),
            genesis: 0,
            electorate_stamp: 0,
        };
        for p in ["a", "b", "c", "w"] {
            n.step_vec(0, up(p, p != "w"));
        }
        let out = n.step_vec(1, from("w", reply(e(&["w"]))));
        assert_eq!(refusals(&out), [("w".to_owned(), Refusal::NotEligible)]);
        assert_eq!(n.electorate(), None);
        n.step_vec(2, from("a", reply(e(&["a", "b"]))));
        assert_eq!(
            n.electorate(),
            Some(&*e(&["a", "b"])),
            "an eligible peer is heard"
        );
    }

    #[test]
    fn confirmations_are_capped_by_the_peers_that_know_a_cluster() {
        let mut n = Core::new("n".into(), Default::default(), vec!["docker".into()], 1).unwrap();
        n.step_vec(0, Event::Started);
        for p in ["a", "j"] {
            n.step_vec(0, up(p, true));
        }
        // a is the only peer that knows a cluster: its word is enough (a late node that met
        // one member and another late node must still join the cluster).
        let e = Arc::new(Electorate::new(
            1,
            ["a", "b", "c"].map(NodeId::from).to_vec(),
        ));
        let reply = Message::WhoamiReply {
            admin: None,
            term: 0,
            membership_version: 1,
            beat: 0,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: Some(e.clone()),
            genesis: e.genesis,
            electorate_stamp: 0,
        };
        n.step_vec(1, from("a", reply));
        assert_eq!(n.electorate(), Some(&*e));
    }

    // Issue 9, case 5: a worker forged heartbeats for term + 1 and acks with a higher term.
    #[test]
    fn a_worker_cannot_make_itself_admin_or_force_an_election() {
        let mut b = voter("b", ABC);
        b.step_vec(1, from("a", heartbeat(1, 1)));
        let out = b.step_vec(2, from("w", heartbeat(2, 2)));
        assert_eq!(refusals(&out), [("w".to_owned(), Refusal::NotMember)]);
        assert!(only_refusals(&out), "no ack goes to the forger");
        assert_eq!((b.term(), b.admin().unwrap().as_str()), (1, "a"));

        let mut a = elect("a", ABC, &["b"]);
        let out = a.step_vec(
            a.now_ms(),
            from(
                "w",
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
        assert_eq!(refusals(&out), [("w".to_owned(), Refusal::NotMember)]);
        assert_eq!((a.role(), a.term()), (Role::Admin, 1));
    }

    #[test]
    fn replies_nobody_asked_for_are_refused() {
        // A follower that never stood: vote and pre-vote replies with higher terms.
        let mut b = voter("b", ABC);
        for msg in [
            Message::VoteReply {
                term: 9,
                granted: false,
                promise_ms: 0,
            },
            Message::PreVoteReply {
                term: 9,
                granted: false,
            },
            Message::VoteReply {
                term: 9,
                granted: true,
                promise_ms: 30_000,
            },
        ] {
            let out = b.step_vec(1, from("c", msg.clone()));
            assert_eq!(
                refusals(&out),
                [("c".to_owned(), Refusal::Unsolicited)],
                "{msg:?}"
            );
            assert_eq!((b.term(), b.role()), (0, Role::Follower), "{msg:?}");
        }
        // An admin: an ack for a beat it never sent.
        let mut a = elect("a", ABC, &["b"]);
        let lease = a.lease_until_ms();
        let out = a.step_vec(
            a.now_ms(),
            from(
                "b",
                Message::HeartbeatAck {
                    term: 1,
                    beat: 77,
                    promise_ms: 30_000,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                },
            ),
        );
        assert_eq!(refusals(&out), [("b".to_owned(), Refusal::Unsolicited)]);
        assert_eq!(a.lease_until_ms(), lease);
        // A late grant after the round is won is stale, not hostile.
        let out = a.step_vec(
            a.now_ms(),
            from(
                "c",
                Message::VoteReply {
                    term: 1,
                    granted: true,
                    promise_ms: 30_000,
                },
            ),
        );
        assert_eq!(refusals(&out), [("c".to_owned(), Refusal::Stale)]);
    }

    /// The bounds and names are a contract with other implementations and with dashboards.
    #[test]
    fn bounds_and_names_are_the_documented_ones() {
        assert_eq!(MAX_WIRE_INT, 9_007_199_254_740_991);
        assert_eq!(MAX_UPTIME_S, 3_153_600_000);
        assert_eq!(MAX_CAPABILITIES, 64);
        let names: Vec<String> = Refusal::ALL.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            names,
            [
                "not_member",
                "out_of_range",
                "unsolicited",
                "conflicting_admin",
                "stale",
                "not_eligible",
                "foreign_cluster",
                "settings_mismatch",
                "not_owner",
                "bad_certificate"
            ]
        );
        for r in Refusal::ALL {
            assert_eq!(r.as_str(), r.to_string());
            assert_eq!(r.is_benign(), r == Refusal::Stale, "{r}");
        }
    }

    /// Every number of every message, at its bound and one past it.
    #[test]
    fn every_bound_is_checked_at_its_edge() {
        let e = |version, members: &[&str]| {
            Some(Arc::new(Electorate::new(
                version,
                members.iter().map(|m| NodeId::from(*m)).collect(),
            )))
        };
        let reply = |term, version, beat, uptime_s, electorate| Message::WhoamiReply {
            admin: None,
            term,
            membership_version: version,
            beat,
            uptime_s,
            resources: Default::default(),
            eligible: true,
            electorate,
            genesis: 0,
            electorate_stamp: 0,
        };
        let ok = MAX_WIRE_INT;
        let bad = MAX_WIRE_INT + 1;
        let mut cases: Vec<(Message, Message)> = vec![
            (
                Message::Whoami {
                    electorate_version: ok,
                    electorate_term: 0,
                    electorate_stamp: 0,
                },
                Message::Whoami {
                    electorate_version: bad,
                    electorate_term: 0,
                    electorate_stamp: 0,
                },
            ),
            (reply(ok, 1, 1, 0, None), reply(bad, 1, 1, 0, None)),
            (reply(1, ok, 1, 0, None), reply(1, bad, 1, 0, None)),
            (reply(1, 1, ok, 0, None), reply(1, 1, bad, 0, None)),
            (
                reply(1, 1, 1, MAX_UPTIME_S, None),
                reply(1, 1, 1, MAX_UPTIME_S + 1, None),
            ),
            (
                reply(1, 1, 1, 0, e(ok, &["a"])),
                reply(1, 1, 1, 0, e(bad, &["a"])),
            ),
            (
                reply(1, 1, 1, 0, e(1, &["a"])),
                reply(1, 1, 1, 0, e(0, &["a"])),
            ),
            (
                reply(1, 1, 1, 0, e(1, &["a"])),
                reply(1, 1, 1, 0, e(1, &[])),
            ),
        ];
        let request = |pre, term, v| {
            if pre {
                Message::PreVoteRequest {
                    term,
                    electorate_version: v,
                    electorate_hash: u64::MAX,
                    electorate_term: 0,
                    electorate_stamp: 0,
                }
            } else {
                Message::VoteRequest {
                    term,
                    electorate_version: v,
                    electorate_hash: u64::MAX,
                    electorate_term: 0,
                    electorate_stamp: 0,
                    transfer: false,
                }
            }
        };
        for pre in [true, false] {
            cases.push((request(pre, ok, 1), request(pre, bad, 1)));
            cases.push((request(pre, 1, ok), request(pre, 1, bad)));
        }
        let term_only = |term| {
            [
                Message::PreVoteReply {
                    term,
                    granted: true,
                },
                Message::VoteReply {
                    term,
                    granted: true,
                    promise_ms: 30_000,
                },
                Message::StepDown {
                    term,
                    successor: None,
                },
            ]
        };
        for (a, b) in term_only(ok).into_iter().zip(term_only(bad)) {
            cases.push((a, b));
        }
        let hb = |term, beat, v| Message::Heartbeat {
            term,
            beat,
            membership_version: v,
            genesis: 0,
            electorate: None,
            membership_term: 0,
            certified: 0,
        };
        cases.push((hb(ok, 1, 1), hb(bad, 1, 1)));
        cases.push((hb(1, ok, 1), hb(1, bad, 1)));
        cases.push((hb(1, 1, ok), hb(1, 1, bad)));
        let ack = |term, beat| Message::HeartbeatAck {
            term,
            beat,
            promise_ms: 0,
            holds: false,
            endorsement: None,
            certified: 0,
        };
        cases.push((ack(ok, 1), ack(bad, 1)));
        cases.push((ack(1, ok), ack(1, bad)));
        for (inside, outside) in cases {
            assert_eq!(inside.check_bounds(), Ok(()), "{inside:?}");
            assert_eq!(
                outside.check_bounds(),
                Err(Refusal::OutOfRange),
                "{outside:?}"
            );
        }
    }

    /// The operator-removed ids an electorate carries (`retired`): at most `MAX_RETIRED`, each
    /// id at most `MAX_ID_BYTES`, and none in a bootstrap electorate (version 1 of no term).
    #[test]
    fn retired_lists_are_checked_at_their_edge() {
        let ids =
            |n: usize| -> Vec<NodeId> { (0..n).map(|i| NodeId::from(format!("r{i}"))).collect() };
        let abc = vec![NodeId::from("a"), NodeId::from("b"), NodeId::from("c")];
        let later = |retired: Vec<NodeId>| {
            Arc::new(
                Electorate::new(1, abc.clone())
                    .successor(2, abc.clone())
                    .with_retired(retired),
            )
        };
        let beat = |e: Arc<Electorate>| Message::Heartbeat {
            term: 2,
            beat: 1,
            membership_version: e.version,
            membership_term: e.term,
            genesis: e.genesis,
            electorate: Some(e),
            certified: 0,
        };
        let long = |n: usize| NodeId::from("x".repeat(n).as_str());
        let cases = [
            (
                later(ids(crate::MAX_RETIRED)),
                later(ids(crate::MAX_RETIRED + 1)),
            ),
            (
                later(vec![long(MAX_ID_BYTES)]),
                later(vec![long(MAX_ID_BYTES + 1)]),
            ),
        ];
        for (inside, outside) in cases {
            assert_eq!(beat(inside).check_bounds(), Ok(()));
            assert_eq!(beat(outside).check_bounds(), Err(Refusal::OutOfRange));
        }
        let genesis = Arc::new(Electorate::new(1, abc.clone()));
        let retired_genesis = Arc::new(Electorate::new(1, abc.clone()).with_retired(ids(1)));
        let chosen = |electorate| Message::BootstrapChosen { electorate };
        assert_eq!(chosen(genesis).check_bounds(), Ok(()));
        assert_eq!(
            chosen(retired_genesis).check_bounds(),
            Err(Refusal::OutOfRange)
        );
    }

    /// Sizes at their bound and one past it: members of an electorate (in every message that
    /// carries one), the length of each id, `bootstrap_expect`.
    #[test]
    fn electorate_sizes_and_id_lengths_are_checked_at_their_edge() {
        let ids = |n: usize| (0..n).map(|i| NodeId::from(format!("n{i}"))).collect();
        let full = Arc::new(Electorate::new(1, ids(MAX_MEMBERS)));
        let over = Arc::new(Electorate::new(1, ids(MAX_MEMBERS + 1)));
        let long = |n: usize| NodeId::from("x".repeat(n).as_str());
        let with_id = |id| Arc::new(Electorate::new(1, vec![NodeId::from("a"), id]));
        let ballot = |node| Ballot { round: 1, node };
        let carriers = |e: Arc<Electorate>| {
            [
                Message::WhoamiReply {
                    admin: None,
                    term: 1,
                    membership_version: 1,
                    beat: 1,
                    uptime_s: 0,
                    resources: Default::default(),
                    eligible: true,
                    genesis: e.genesis,
                    electorate: Some(e.clone()),
                    electorate_stamp: 0,
                },
                Message::Heartbeat {
                    term: 1,
                    beat: 1,
                    membership_version: 1,
                    membership_term: 0,
                    genesis: e.genesis,
                    electorate: Some(e.clone()),
                    certified: 0,
                },
                Message::BootstrapPromise {
                    ballot: ballot(NodeId::from("a")),
                    accepted: Some((ballot(NodeId::from("a")), e.clone())),
                },
                Message::BootstrapAccept {
                    ballot: ballot(NodeId::from("a")),
                    electorate: e.clone(),
                },
                Message::BootstrapChosen { electorate: e },
            ]
        };
        let mut cases: Vec<(Message, Message)> = carriers(full)
            .into_iter()
            .zip(carriers(over))
            .chain(
                carriers(with_id(long(MAX_ID_BYTES)))
                    .into_iter()
                    .zip(carriers(with_id(long(MAX_ID_BYTES + 1)))),
            )
            .collect();
        let admin = |id| Message::WhoamiReply {
            admin: Some(id),
            term: 1,
            membership_version: 1,
            beat: 1,
            uptime_s: 0,
            resources: Default::default(),
            eligible: true,
            electorate: None,
            genesis: 0,
            electorate_stamp: 0,
        };
        cases.push((admin(long(MAX_ID_BYTES)), admin(long(MAX_ID_BYTES + 1))));
        let accepted = |id| Message::BootstrapAccepted { ballot: ballot(id) };
        cases.push((
            accepted(long(MAX_ID_BYTES)),
            accepted(long(MAX_ID_BYTES + 1)),
        ));
        let prepare = |expect| Message::BootstrapPrepare {
            ballot: ballot(NodeId::from("a")),
            expect,
        };
        cases.push((prepare(MAX_MEMBERS as u32), prepare(MAX_MEMBERS as u32 + 1)));
        for (inside, outside) in cases {
            assert_eq!(inside.check_bounds(), Ok(()), "{}", inside.kind());
            assert_eq!(
                outside.check_bounds(),
                Err(Refusal::OutOfRange),
                "{}",
                outside.kind()
            );
        }
    }

    #[test]
    fn peer_advertisements_are_bounded() {
        let mut a = voter("a", ABC);
        let caps: Vec<String> = (0..1_000).map(|i| format!("cap{i}")).collect();
        a.step_vec(
            0,
            Event::peer_up(
                "b".into(),
                PeerInfo {
                    capabilities: caps.into(),
                    uptime_s: u64::MAX,
                    resources: Default::default(),
                },
            ),
        );
        let p = &a.peers()[&NodeId::from("b")];
        assert_eq!(
            (p.uptime_s(), p.capabilities().len()),
            (MAX_UPTIME_S, MAX_CAPABILITIES)
        );
        // Extrapolating the uptime far into the future saturates instead of wrapping.
        assert!(p.score_at(u64::MAX) <= crate::score::SCORE_MAX);
    }
}
