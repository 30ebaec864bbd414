//! One-voter membership changes (`core/src/membership.rs`, rules 1–5 and autopilot).
//!
//! The first half drives single cores through the public API, so each rule can be reached on
//! its own: every refusal is shown with a twin state, differing only in the condition the rule
//! checks, in which the same request is proposed. The second half runs the acceptance scenarios
//! on the in-test network (`support`), which checks one admin per term, no overlapping leases and
//! one vote per term on every step.

use crate::support;

use std::sync::Arc;

use chorus_core::certificate::simulated_signature;
use chorus_core::{
    ChangeOutcome, ChangeRefusal, Command, Config, Core, Electorate, Event, MemberChange, Message,
    NodeId, Notice, PeerInfo, Refusal, Role, Signature, StepDownReason, Timer, ADMIN_ELECTION,
    MAX_WIRE_INT,
};
use support::{election_bound_ms, fast_config, Clocks, Net, Start};

// ---- Single cores ------------------------------------------------------------------------------

const ABC: &[&str] = &["a", "b", "c"];
const ABCD: &[&str] = &["a", "b", "c", "d"];

fn info(eligible: bool) -> PeerInfo {
    let caps = if eligible {
        vec![ADMIN_ELECTION.to_owned()]
    } else {
        vec!["docker".to_owned()]
    };
    PeerInfo {
        capabilities: caps.into(),
        ..Default::default()
    }
}

fn up(peer: &str, eligible: bool) -> Event {
    Event::peer_up(peer.into(), info(eligible))
}

fn from(peer: &str, msg: Message) -> Event {
    Event::Message {
        from: peer.into(),
        msg,
    }
}

fn ids(names: &[&str]) -> Vec<NodeId> {
    names.iter().map(|n| NodeId::from(*n)).collect()
}

fn add(node: &str) -> MemberChange {
    MemberChange::Add { node: node.into() }
}

fn remove(node: &str) -> MemberChange {
    MemberChange::Remove { node: node.into() }
}

/// An eligible node of electorate version 1 `members`, started at t=0, connected to the other
/// members and to `d` (an eligible standby) and `w` (a worker).
fn node(id: &str, members: &[&str]) -> Core {
    let mut c = Core::new(
        id.into(),
        Config::default(),
        vec![ADMIN_ELECTION.to_owned()],
        7,
    )
    .unwrap();
    c.set_electorate_for_test(Electorate::new(1, ids(members)));
    c.step_vec(0, Event::Started);
    for m in members.iter().chain(&["d"]).filter(|m| **m != id) {
        c.step_vec(0, up(m, true));
    }
    c.step_vec(0, up("w", false));
    c
}

/// Fires the node's timers in deadline order until it stands (bounded).
fn stand(c: &mut Core) {
    for _ in 0..8 {
        if c.role() != Role::Follower {
            return;
        }
        let (at, timer) = c.next_deadline().expect("a timer is armed");
        c.step_vec(at, Event::TimerFired { timer });
    }
    panic!("{} never stood", c.id());
}

/// Node `id` of `members`, elected admin in term 1 with the votes of `voters`; no heartbeat of
/// its term acknowledged yet.
fn elect(id: &str, members: &[&str], voters: &[&str]) -> Core {
    let mut c = node(id, members);
    stand(&mut c);
    let now = c.now_ms();
    for v in voters {
        let granted = Message::PreVoteReply {
            term: 1,
            granted: true,
        };
        c.step_vec(now, from(v, granted));
    }
    for v in voters {
        let granted = Message::VoteReply {
            term: 1,
            granted: true,
            promise_ms: 30_000,
        };
        c.step_vec(now, from(v, granted));
    }
    assert_eq!(c.role(), Role::Admin, "{} elected", c.id());
    c
}

fn ack(c: &mut Core, peer: &str, beat: u64) -> Vec<Command> {
    // An honest voter holding the admin's electorate endorses it (rule 7).
    let statement = c.electorate().map(|e| e.statement());
    let endorsement = statement.map(|s| simulated_signature(&peer.into(), &s));
    ack_with(c, peer, beat, endorsement)
}

fn ack_with(c: &mut Core, peer: &str, beat: u64, endorsement: Option<Signature>) -> Vec<Command> {
    let msg = Message::HeartbeatAck {
        term: c.term(),
        beat,
        promise_ms: 30_000,
        holds: true,
        endorsement,
        // An honest voter holds every link its admin named (it asks for each one named).
        certified: c.certified_version(),
    };
    c.step_vec(c.now_ms(), from(peer, msg))
}

/// The admin made a change's link (a majority of the old electorate endorsed it, a majority of
/// the new one holds it) and named it in a heartbeat: `voters` fetch it and acknowledge the
/// newest beat again, holding it. A change commits once a majority of the new electorate
/// holds its link (rule 7).
fn spread_link(c: &mut Core, voters: &[&str]) -> Vec<Command> {
    let beat = c.beat();
    voters.iter().flat_map(|v| ack(c, v, beat)).collect()
}

/// `a` of `members` (listed first), elected by the fewest others that make a majority, in list
/// order, and established by their acks of its first heartbeat.
fn established(members: &[&str]) -> Core {
    assert_eq!(members[0], "a");
    let others = &members[1..members.len() / 2 + 1];
    let mut a = elect("a", members, others);
    let beat = a.beat();
    for v in others {
        ack(&mut a, v, beat);
    }
    a
}

/// Fires the admin's timers in deadline order up to its next heartbeat, and returns the
/// heartbeat's commands.
fn next_heartbeat(c: &mut Core) -> Vec<Command> {
    for _ in 0..4 {
        let (at, timer) = c.next_deadline().expect("a timer is armed");
        let out = c.step_vec(at, Event::TimerFired { timer });
        if timer == Timer::Heartbeat {
            return out;
        }
    }
    panic!("no heartbeat from {}", c.id());
}

/// The operator asks `c` for `change` now.
fn ask(c: &mut Core, change: MemberChange, request: u64) -> Vec<Command> {
    c.step_vec(c.now_ms(), Event::ChangeMembers { change, request })
}

/// The membership notices in `out`: (change, outcome, request).
fn outcomes(out: &[Command]) -> Vec<(MemberChange, ChangeOutcome, u64)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Notice(Notice::MembershipChange {
                change,
                outcome,
                request,
            }) => Some((change.clone(), outcome.clone(), *request)),
            _ => None,
        })
        .collect()
}

/// The one outcome in `out`.
fn outcome(out: &[Command]) -> ChangeOutcome {
    match outcomes(out).as_slice() {
        [(_, o, _)] => o.clone(),
        other => panic!("one membership notice expected, got {other:?} in {out:?}"),
    }
}

fn refused(reason: ChangeRefusal) -> ChangeOutcome {
    ChangeOutcome::Refused { reason }
}

fn proposed(version: u64) -> ChangeOutcome {
    ChangeOutcome::Proposed { version }
}

fn committed(out: &[Command]) -> bool {
    outcomes(out)
        .iter()
        .any(|(_, o, _)| matches!(o, ChangeOutcome::Committed { .. }))
}

/// The one heartbeat broadcast in `out`: (beat, carried electorate).
fn heartbeat(out: &[Command]) -> (u64, Option<Arc<Electorate>>) {
    let beats: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Broadcast {
                msg: Message::Heartbeat {
                    beat, electorate, ..
                },
            } => Some((*beat, electorate.clone())),
            _ => None,
        })
        .collect();
    match beats.as_slice() {
        [one] => one.clone(),
        other => panic!("one heartbeat expected, got {other:?}"),
    }
}

fn sent_to<'a>(out: &'a [Command], to: &str) -> Vec<&'a Message> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send { to: t, msg } if t.as_str() == to => Some(msg),
            _ => None,
        })
        .collect()
}

fn members_of(c: &Core) -> Vec<&str> {
    let e = c.electorate().expect("an electorate");
    e.members().iter().map(NodeId::as_str).collect()
}

// ---- Rule 1: who proposes, and when ------------------------------------------------------------

/// A node asked directly (a `change_request`) that is not the admin refuses with `not_admin`:
/// a follower, and an admin that has just stepped down. The same request at the admin is
/// proposed.
#[test]
fn refused_not_admin_by_a_follower_and_by_an_admin_that_stepped_down() {
    let request = Message::ChangeRequest {
        request: 5,
        change: add("d"),
    };
    let answer = |out: &[Command]| -> Vec<Message> {
        sent_to(out, "c")
            .into_iter()
            .filter(|m| matches!(m, Message::ChangeResult { .. }))
            .cloned()
            .collect()
    };
    let not_admin = Message::ChangeResult {
        request: 5,
        change: add("d"),
        outcome: refused(ChangeRefusal::NotAdmin),
    };

    // A follower that knows its admin.
    let mut b = node("b", ABC);
    let hb = Message::Heartbeat {
        term: 1,
        beat: 1,
        membership_version: 1,
        genesis: b.electorate().unwrap().genesis,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    b.step_vec(10, from("a", hb));
    assert_eq!(b.admin().map(NodeId::as_str), Some("a"));
    let out = b.step_vec(11, from("c", request.clone()));
    assert_eq!(answer(&out), std::slice::from_ref(&not_admin));
    assert_eq!(b.electorate().unwrap().version, 1);

    // An admin, then the same admin after a higher term made it step down.
    let a = established(ABC);
    let mut twin = a.clone();
    let out = twin.step_vec(a.now_ms(), from("c", request.clone()));
    assert_eq!(outcome(&out), proposed(2), "the admin proposes");
    let mut a = a;
    let higher = Message::HeartbeatAck {
        term: 2,
        beat: a.beat(),
        promise_ms: 0,
        holds: false,
        endorsement: None,
        certified: 0,
    };
    a.step_vec(a.now_ms(), from("b", higher));
    assert_eq!(a.role(), Role::Follower);
    let out = a.step_vec(a.now_ms(), from("c", request));
    assert_eq!(answer(&out), [not_admin]);
    assert_eq!(a.electorate().unwrap().version, 1);
}

/// A follower with no admin to forward to refuses its operator's request with `no_admin`; the
/// same follower once it knows its admin forwards it, request id and all.
#[test]
fn refused_no_admin_by_a_follower_that_knows_none_and_forwarded_once_it_does() {
    let mut b = node("b", ABC);
    let out = ask(&mut b, add("d"), 11);
    assert_eq!(
        outcomes(&out),
        [(add("d"), refused(ChangeRefusal::NoAdmin), 11)]
    );
    assert!(sent_to(&out, "a").is_empty());

    let hb = Message::Heartbeat {
        term: 1,
        beat: 1,
        membership_version: 1,
        genesis: b.electorate().unwrap().genesis,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    b.step_vec(10, from("a", hb));
    let out = ask(&mut b, add("d"), 12);
    assert_eq!(
        outcomes(&out),
        [(add("d"), ChangeOutcome::Forwarded { admin: "a".into() }, 12)]
    );
    assert_eq!(
        sent_to(&out, "a"),
        [&Message::ChangeRequest {
            request: 12,
            change: add("d")
        }]
    );
}

/// A worker that follows an admin does not forward (the admin would refuse it silently): it
/// tells its operator to ask a voter. An eligible follower in the same state forwards.
#[test]
fn a_worker_tells_its_operator_to_ask_a_voter() {
    let follow = |c: &mut Core| {
        let hb = Message::Heartbeat {
            term: 1,
            beat: 1,
            membership_version: 1,
            genesis: c.electorate().unwrap().genesis,
            electorate: None,
            membership_term: 0,
            certified: 0,
        };
        c.step_vec(10, from("a", hb));
        assert_eq!(c.admin(), Some(&"a".into()));
    };
    let mut w = Core::new("w".into(), Config::default(), vec!["docker".to_owned()], 7).unwrap();
    w.set_electorate_for_test(Electorate::new(1, ids(ABC)));
    w.step_vec(0, Event::Started);
    for m in ABC {
        w.step_vec(0, up(m, true));
    }
    follow(&mut w);
    let out = ask(&mut w, add("d"), 5);
    assert_eq!(
        outcomes(&out),
        [(add("d"), refused(ChangeRefusal::AskAVoter), 5)]
    );
    assert!(sent_to(&out, "a").is_empty(), "nothing forwarded");

    let mut b = node("b", ABC);
    follow(&mut b);
    let out = ask(&mut b, add("d"), 5);
    assert_eq!(
        outcomes(&out),
        [(add("d"), ChangeOutcome::Forwarded { admin: "a".into() }, 5)]
    );
}

/// The other side of the same rule: only a node that is neither a voter nor admin-eligible is
/// told to ask a voter. An eligible standby (not a voter) and a voter that does not advertise
/// `admin_election` both forward the request to their admin, who takes it from either
/// (`trust.rs`).
///
/// Kills `on_change_members`: `!eligible && !member` → `||` (either one told to ask a voter).
#[test]
fn a_standby_and_a_voter_without_admin_election_forward_requests() {
    let hb = |c: &Core| Message::Heartbeat {
        term: 1,
        beat: 1,
        membership_version: 1,
        genesis: c.electorate().unwrap().genesis,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    // d: eligible, outside {a, b, c}.
    let mut d = node("d", ABC);
    let msg = hb(&d);
    d.step_vec(10, from("a", msg));
    assert_eq!(d.admin(), Some(&"a".into()));
    let out = ask(&mut d, add("e"), 5);
    assert_eq!(
        outcomes(&out),
        [(add("e"), ChangeOutcome::Forwarded { admin: "a".into() }, 5)]
    );
    // v: a voter of {a, b, v} that advertises only docker.
    let mut v = Core::new("v".into(), Config::default(), vec!["docker".to_owned()], 7).unwrap();
    v.set_electorate_for_test(Electorate::new(1, ids(&["a", "b", "v"])));
    v.step_vec(0, Event::Started);
    for m in ["a", "b"] {
        v.step_vec(0, up(m, true));
    }
    let msg = hb(&v);
    v.step_vec(10, from("a", msg));
    assert_eq!(v.admin(), Some(&"a".into()));
    let out = ask(&mut v, add("d"), 6);
    assert_eq!(
        outcomes(&out),
        [(add("d"), ChangeOutcome::Forwarded { admin: "a".into() }, 6)]
    );
}

/// A `change_result` counts only as the answer to a request this node forwarded, from the
/// admin it was forwarded to, once: one nobody asked for, one from another member, and a
/// second copy are refused as unsolicited, and no notice reaches the operator.
#[test]
fn a_change_result_nobody_asked_for_is_refused() {
    let mut b = node("b", ABC);
    let hb = Message::Heartbeat {
        term: 1,
        beat: 1,
        membership_version: 1,
        membership_term: 0,
        genesis: b.electorate().unwrap().genesis,
        electorate: None,
        certified: 0,
    };
    b.step_vec(10, from("a", hb));
    let result = |request| Message::ChangeResult {
        request,
        change: add("d"),
        outcome: ChangeOutcome::Committed { version: 2 },
    };
    let unsolicited = |out: &[Command], sender: &str| {
        out == [Command::Notice(Notice::Refused {
            from: sender.into(),
            message: "change_result".into(),
            reason: Refusal::Unsolicited,
        })]
    };
    let out = b.step_vec(11, from("a", result(9)));
    assert!(unsolicited(&out, "a"), "nothing was forwarded: {out:?}");

    ask(&mut b, add("d"), 9);
    let out = b.step_vec(12, from("c", result(9)));
    assert!(unsolicited(&out, "c"), "forwarded to a, not c: {out:?}");
    let out = b.step_vec(13, from("a", result(9)));
    assert_eq!(
        outcomes(&out),
        [(add("d"), ChangeOutcome::Committed { version: 2 }, 9)]
    );
    let out = b.step_vec(14, from("a", result(9)));
    assert!(unsolicited(&out, "a"), "answered already: {out:?}");
}

/// An admin whose lease has run out (no acknowledgements, check-quorum not yet due) refuses
/// with `no_lease`, though it is still admin and established; one instant earlier it proposes.
#[test]
fn refused_no_lease_at_the_lease_end_and_proposed_just_before() {
    let a = established(ABC);
    let lease_end = a.lease_until_ms().unwrap();
    assert!(lease_end > a.now_ms());

    let mut before = a.clone();
    let out = before.step_vec(
        lease_end - 1,
        Event::ChangeMembers {
            change: add("d"),
            request: 1,
        },
    );
    assert_eq!(outcome(&out), proposed(2));

    let mut at_end = a;
    let out = at_end.step_vec(
        lease_end,
        Event::ChangeMembers {
            change: add("d"),
            request: 1,
        },
    );
    assert_eq!(outcome(&out), refused(ChangeRefusal::NoLease));
    assert_eq!(
        at_end.role(),
        Role::Admin,
        "still admin: only the lease ended"
    );
    assert_eq!(at_end.electorate().unwrap().version, 1);
}

/// A freshly elected admin (its lease valid from the votes) refuses with `not_established`
/// until a majority acknowledged a heartbeat of its term; after one ack it proposes.
#[test]
fn refused_not_established_until_a_majority_acknowledged_this_term() {
    let mut a = elect("a", ABC, &["b"]);
    assert!(a.holds_lease(a.now_ms()), "the lease is not what refuses");
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::NotEstablished));
    assert_eq!(a.electorate().unwrap().version, 1);

    let beat = a.beat();
    ack(&mut a, "b", beat);
    let out = ask(&mut a, add("d"), 2);
    assert_eq!(outcome(&out), proposed(2));
}

/// One change at a time: a second request while the first is uncommitted is refused with
/// `change_pending`; once the first commits, the same second request is proposed.
#[test]
fn refused_change_pending_until_the_first_change_commits() {
    let mut a = established(ABC);
    // c has promised too: the lease stands on a majority of {a, b, c, d} once d is proposed.
    let beat = a.beat();
    ack(&mut a, "c", beat);
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, _) = heartbeat(&out);
    let out = ask(&mut a, remove("c"), 2);
    assert_eq!(outcome(&out), refused(ChangeRefusal::ChangePending));
    assert_eq!(members_of(&a), ABCD);

    ack(&mut a, "b", beat);
    let out = ack(&mut a, "d", beat);
    assert!(!committed(&out), "{out:?}");
    // The link is made and held by a alone: still pending, for the next change too.
    let out = ask(&mut a, remove("c"), 3);
    assert_eq!(outcome(&out), refused(ChangeRefusal::ChangePending));
    let out = spread_link(&mut a, &["b", "d"]);
    assert!(committed(&out), "{out:?}");
    let out = ask(&mut a, remove("c"), 4);
    assert_eq!(outcome(&out), proposed(3));
}

/// `add` of a voter is refused with `already_voter`; of a connected eligible non-voter it is
/// proposed.
#[test]
fn refused_already_voter() {
    let a = established(ABC);
    let out = ask(&mut a.clone(), add("b"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::AlreadyVoter));
    let out = ask(&mut a.clone(), add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
}

/// `remove` of a connected, eligible node that is not a voter is refused with `not_voter`; of a
/// voter it is proposed.
#[test]
fn refused_not_voter() {
    let a = established(ABC);
    let out = ask(&mut a.clone(), remove("d"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::NotVoter));
    let out = ask(&mut a.clone(), remove("c"), 1);
    assert_eq!(outcome(&out), proposed(2));
}

/// etcd's strict reconfiguration check: a change whose new electorate's majority is not
/// following the admin now is refused (`new_majority_not_following`), so it can never stall
/// the cluster. In {a, b, c, d, e} with b and c following a, removing c leaves {a, b, d, e}
/// needing three followers; once d follows too it is proposed. An `add` counts the node added
/// as following, as etcd does.
#[test]
fn refused_new_majority_not_following_until_it_follows() {
    let mut a = established(&["a", "b", "c", "d", "e"]);
    let beat = a.beat();
    let out = ask(&mut a.clone(), remove("c"), 1);
    assert_eq!(
        outcome(&out),
        refused(ChangeRefusal::NewMajorityNotFollowing)
    );
    ack(&mut a, "d", beat);
    let out = ask(&mut a.clone(), remove("c"), 1);
    assert_eq!(outcome(&out), proposed(2));
    assert!(!ChangeRefusal::NewMajorityNotFollowing.explain().is_empty());
}

/// The strict reconfiguration check counts a voter as following only on an ack of a beat sent
/// within the last election timeout, however well that ack once matched: in {a, b, c, d, e},
/// with b and c acknowledging every beat and d only one beat at `sent`, removing c (leaving
/// {a, b, d, e}, three needed) is proposed an election timeout after `sent` and refused a
/// millisecond later; d acknowledging the newest beat makes it proposed again.
///
/// Fails on the recency dropped from the count (`&& v.sent_at_ms >= recent` removed: an ack
/// however old counts), and on `>=` → `>` there.
#[test]
fn a_voter_counts_as_following_only_on_an_ack_of_the_last_election_timeout() {
    let mut a = established(&["a", "b", "c", "d", "e"]);
    let (beat, _) = heartbeat(&next_heartbeat(&mut a));
    let sent = a.now_ms();
    for v in ["b", "c", "d"] {
        ack(&mut a, v, beat);
    }
    // b and c go on acknowledging; d falls silent.
    let (beat, _) = heartbeat(&next_heartbeat(&mut a));
    for v in ["b", "c"] {
        ack(&mut a, v, beat);
    }
    let timeout = a.config().election_timeout_min_ms;
    assert!(a.now_ms() < sent + timeout);
    let at = |a: &Core, t: u64| {
        let mut a = a.clone();
        assert!(a.holds_lease(t), "a holds its lease at {t}");
        let out = a.step_vec(
            t,
            Event::ChangeMembers {
                change: remove("c"),
                request: 1,
            },
        );
        outcome(&out)
    };
    assert_eq!(
        at(&a, sent + timeout),
        proposed(2),
        "d's ack is one timeout old"
    );
    assert_eq!(
        at(&a, sent + timeout + 1),
        refused(ChangeRefusal::NewMajorityNotFollowing),
        "d's ack is older than an election timeout"
    );
    assert_eq!(
        at(&a, sent + timeout + 5_000),
        refused(ChangeRefusal::NewMajorityNotFollowing),
        "d's ack is five seconds older than an election timeout"
    );
    ack(&mut a, "d", beat);
    assert_eq!(
        at(&a, sent + timeout + 1),
        proposed(2),
        "d acknowledged lately"
    );
}

/// A voter just promoted from standby counts as following, for the next change's strict
/// reconfiguration check, on its acknowledgements as a standby while they are recent — and not
/// once they are older than an election timeout. In {a, b, c, z}, c falls silent after
/// electing a; d acknowledges as a standby and `add d` commits on a, b and z without d ever
/// acknowledging as a voter. `remove z` (leaving {a, b, c, d}, three needed) is proposed while
/// d's last standby acknowledgement is within the timeout, and refused an election timeout
/// later, when only a and b follow (the lease still held on a, b and z).
///
/// Fails on the standby clause's `*last >= recent` as `<` (the stale standby counted, the fresh
/// one not), and on the clause removed.
#[test]
fn a_voter_promoted_from_standby_follows_on_its_recent_standby_acknowledgements_only() {
    let mut a = established(&["a", "b", "c", "z"]);
    beat_acked_by(&mut a, &["b", "z", "d"]);
    let standby_acked = a.now_ms();
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, _) = heartbeat(&out);
    for v in ["b", "z"] {
        ack(&mut a, v, beat);
    }
    assert_eq!(a.certified_version(), 2, "the link is made on a, b and z");
    let out = spread_link(&mut a, &["b", "z"]);
    assert_eq!(
        outcomes(&out),
        [(add("d"), ChangeOutcome::Committed { version: 2 }, 1)]
    );
    let timeout = a.config().election_timeout_min_ms;
    assert!(a.now_ms() <= standby_acked + timeout);
    assert_eq!(
        outcome(&ask(&mut a.clone(), remove("z"), 2)),
        proposed(3),
        "d followed as a standby lately: a, b and d follow"
    );
    while a.now_ms() <= standby_acked + timeout {
        beat_acked_by(&mut a, &["b", "z"]);
    }
    assert!(a.holds_lease(a.now_ms()));
    assert_eq!(
        outcome(&ask(&mut a, remove("z"), 2)),
        refused(ChangeRefusal::NewMajorityNotFollowing),
        "d's standby acknowledgement is older than an election timeout"
    );
}

/// `add` of a connected worker, or of an eligible node that is not connected (any more), is
/// refused with `not_eligible`; of a connected eligible node it is proposed.
#[test]
fn refused_not_eligible_for_a_worker_and_for_a_node_not_connected() {
    let a = established(ABC);
    let out = ask(&mut a.clone(), add("w"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::NotEligible));
    let out = ask(&mut a.clone(), add("x"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::NotEligible));
    let mut gone = a.clone();
    gone.step_vec(a.now_ms(), Event::PeerDown { peer: "d".into() });
    let out = ask(&mut gone, add("d"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::NotEligible));
    let out = ask(&mut a.clone(), add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
}

/// The only voter cannot remove itself (`last_voter`); one of two can.
#[test]
fn refused_last_voter() {
    let mut solo = elect("a", &["a"], &[]);
    let t = solo.now_ms();
    assert!(solo.holds_lease(t));
    let out = ask(&mut solo, remove("a"), 1);
    assert_eq!(outcome(&out), refused(ChangeRefusal::LastVoter));
    assert_eq!(members_of(&solo), ["a"]);

    let mut pair = established(&["a", "b"]);
    let out = ask(&mut pair, remove("a"), 1);
    assert_eq!(outcome(&out), proposed(2));
}

/// A worker may not ask the admin directly: its `change_request` is refused (`not_eligible`,
/// a trust refusal), nothing is proposed and nothing is answered. An eligible standby's same
/// request is proposed.
#[test]
fn a_workers_change_request_is_refused_and_an_eligible_peers_proposed() {
    let a = established(ABC);
    let request = Message::ChangeRequest {
        request: 3,
        change: add("d"),
    };
    let mut worker_asks = a.clone();
    let out = worker_asks.step_vec(a.now_ms(), from("w", request.clone()));
    assert_eq!(
        out,
        [Command::Notice(Notice::Refused {
            from: "w".into(),
            message: "change_request".into(),
            reason: Refusal::NotEligible,
        })]
    );
    assert_eq!(worker_asks.electorate().unwrap().version, 1);

    let mut standby_asks = a;
    let out = standby_asks.step_vec(standby_asks.now_ms(), from("d", request));
    assert_eq!(outcome(&out), proposed(2));
}

/// Every refusal has its own sentence for the operator (`chorus members` prints it): none is
/// empty and no two are the same, so an operator can tell "retry" from "cannot be done".
///
/// Kills `ChangeRefusal::explain` → `""` and → `"xyzzy"` (no test read the sentences).
#[test]
fn every_change_refusal_explains_itself_in_its_own_words() {
    use ChangeRefusal::*;
    let all = [
        NotAdmin,
        NoAdmin,
        AskAVoter,
        NoLease,
        NotEstablished,
        ChangePending,
        AlreadyVoter,
        NotVoter,
        NotEligible,
        LastVoter,
        VersionExhausted,
        NewMajorityNotFollowing,
    ];
    // Exhaustive: a new refusal fails to compile here until it is listed above.
    for r in all {
        match r {
            NotAdmin
            | NoAdmin
            | AskAVoter
            | NoLease
            | NotEstablished
            | ChangePending
            | AlreadyVoter
            | NotVoter
            | NotEligible
            | LastVoter
            | VersionExhausted
            | NewMajorityNotFollowing => {}
        }
    }
    let mut sentences: Vec<&str> = all.iter().map(|r| r.explain()).collect();
    assert!(sentences.iter().all(|s| s.len() > 10), "{sentences:?}");
    assert!(NotAdmin.explain().contains("retry"));
    assert!(LastVoter.explain().contains("last voter"));
    sentences.sort();
    sentences.dedup();
    assert_eq!(sentences.len(), all.len(), "two refusals share a sentence");
}

// ---- Rules 2 and 3: carrying and committing ----------------------------------------------------

/// `add d` to {a, b, c}: the old majority (2 of 3) alone does not commit, the new one (3 of 4)
/// is needed too; acknowledgements of beats sent before the change do not count.
#[test]
fn an_add_commits_only_with_a_majority_of_the_new_electorate_too() {
    let mut a = established(ABC);
    let before = a.beat();
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, carried) = heartbeat(&out);
    let carried = carried.expect("the heartbeat carries the new electorate");
    assert_eq!((carried.version, carried.term), (2, 1));
    assert_eq!(carried.members(), ids(ABCD).as_slice());

    // b holds the new electorate: {a, b} is a majority of the old one, not of the new.
    let out = ack(&mut a, "b", beat);
    assert!(
        !committed(&out),
        "committed on the old majority alone: {out:?}"
    );
    // c acknowledges a beat from before the change: it does not hold the new electorate.
    let out = ack(&mut a, "c", before);
    assert!(!committed(&out), "committed on a pre-change ack: {out:?}");
    // The next heartbeat still carries it.
    let (_, again) = heartbeat(&next_heartbeat(&mut a));
    assert_eq!(again.as_deref(), Some(&*carried));
    // d, the new voter, completes the new majority: the admin makes the link and names it at
    // once in a heartbeat, but the change commits only once a majority of {a, b, c, d} holds
    // the link (issue 51, finding 9): a with b is not one, a with b and d is.
    let out = ack(&mut a, "d", beat);
    assert!(
        !committed(&out),
        "committed on the admin's link alone: {out:?}"
    );
    assert_eq!(a.certified_version(), 2, "the link is made");
    heartbeat(&out);
    let out = spread_link(&mut a, &["b"]);
    assert!(
        !committed(&out),
        "committed with the link at 2 of 4: {out:?}"
    );
    let out = spread_link(&mut a, &["d"]);
    assert_eq!(
        outcomes(&out),
        [(add("d"), ChangeOutcome::Committed { version: 2 }, 1)]
    );
    let (_, after) = heartbeat(&next_heartbeat(&mut a));
    assert_eq!(after, None, "committed: heartbeats stop carrying it");
}

/// Only acknowledgements that hold the new electorate count toward its link: `add d` to
/// {a, b, c}, b holds it and endorses, c and d acknowledge the proposal's beat without holding
/// it (they have not taken it yet) — a, b is a majority of the old electorate's signers but not
/// of the new one's holders, so no link is made; d holding it at the next beat makes one.
///
/// Fails on `endorsed_link`'s `v.beat >= from_beat && v.holds == Some(key)` as `||` (an
/// acknowledgement of a beat after the proposal counted whatever it holds).
#[test]
fn an_acknowledgement_without_the_new_electorate_makes_no_link() {
    let mut a = established(ABC);
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, _) = heartbeat(&out);
    ack(&mut a, "b", beat);
    for v in ["c", "d"] {
        let msg = Message::HeartbeatAck {
            term: a.term(),
            beat,
            promise_ms: 30_000,
            holds: false,
            endorsement: None,
            certified: a.certified_version(),
        };
        a.step_vec(a.now_ms(), from(v, msg));
    }
    assert_eq!(
        a.certified_version(),
        1,
        "a link on a, b and two that lack it"
    );
    let (beat, _) = heartbeat(&next_heartbeat(&mut a));
    ack(&mut a, "d", beat);
    assert_eq!(a.certified_version(), 2, "a, b and d hold it");
}

/// `remove d` from {a, b, c, d}: the new majority (2 of 3) alone does not commit, the old one
/// (3 of 4) is needed too, and the removed voter's ack counts for it.
#[test]
fn a_removal_commits_only_with_a_majority_of_the_old_electorate_too() {
    let mut a = established(ABCD);
    let out = ask(&mut a, remove("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, _) = heartbeat(&out);
    assert!(a.holds_lease(a.now_ms()));
    let out = ack(&mut a, "b", beat);
    assert!(
        !committed(&out),
        "committed on the new majority alone: {out:?}"
    );
    let out = ack(&mut a, "d", beat);
    assert!(
        !committed(&out),
        "committed before the link spread: {out:?}"
    );
    // The removed voter holding the link counts for nothing: {a, b, c} is the electorate.
    let out = spread_link(&mut a, &["d"]);
    assert!(
        !committed(&out),
        "committed with the link at a and d: {out:?}"
    );
    let out = spread_link(&mut a, &["b"]);
    assert_eq!(
        outcomes(&out),
        [(remove("d"), ChangeOutcome::Committed { version: 2 }, 1)]
    );
    assert_eq!(members_of(&a), ABC);
}

/// Rule 7 at the admin: a voter's endorsement counts for the link only once it checks — the
/// voter's own signature over the statement of the electorate the admin holds. `add d` to
/// {a, b, c}: d and b hold the new electorate (a majority of both), and a's own endorsement
/// needs b's to make a majority of {a, b, c}. b's that does not check (another voter's, over
/// the old electorate, over a sibling of another term, garbage) is refused as
/// `bad_certificate` and commits nothing; b's good one, sent after, commits, and the link the
/// admin then hands on checks from version 1 (a stale voter takes it).
///
/// Fails on the admin keeping an endorsement without checking it (`Some(sig) if
/// self.endorses_mine(&from, &sig) => Some(sig)` → `Some(sig) => Some(sig)` in `heartbeat.rs`):
/// the change commits with a link every stale node refuses.
#[test]
fn an_endorsement_that_does_not_check_is_refused_and_commits_nothing() {
    let v1 = Electorate::new(1, ids(ABC));
    let sibling = v1.successor(7, ids(ABCD));
    // What a proposes in term 1: the statement b should sign.
    let new = v1.successor(1, ids(ABCD));
    let forgeries = [
        (
            "c's signature under b's name",
            simulated_signature(&"c".into(), &new.statement()),
        ),
        (
            "over the old electorate",
            simulated_signature(&"b".into(), &v1.statement()),
        ),
        (
            "over a sibling of another term",
            simulated_signature(&"b".into(), &sibling.statement()),
        ),
        ("garbage", Signature::from_bytes(&[7; 8])),
        ("empty", Signature::from_bytes(&[])),
    ];
    for (name, forge) in forgeries {
        let mut a = established(ABC);
        let out = ask(&mut a, add("d"), 1);
        assert_eq!(outcome(&out), proposed(2));
        let (beat, carried) = heartbeat(&out);
        assert_eq!(carried.as_deref(), Some(&new), "{name}");
        assert_ne!(forge, simulated_signature(&"b".into(), &new.statement()));
        let out = ack(&mut a, "d", beat);
        assert!(!committed(&out), "{name}: committed on d alone");
        let out = ack_with(&mut a, "b", beat, Some(forge));
        assert!(
            out.contains(&Command::Notice(Notice::Refused {
                from: "b".into(),
                message: "heartbeat_ack".into(),
                reason: Refusal::BadCertificate,
            })),
            "{name}: not refused: {out:?}"
        );
        assert!(
            !committed(&out),
            "{name}: committed on a forged endorsement"
        );
        // b's own endorsement, in a second acknowledgement of the beat: the link is made, and
        // the change commits once b and d hold it too.
        let out = ack(&mut a, "b", beat);
        assert!(!committed(&out), "{name}: before the link spread");
        assert_eq!(a.certified_version(), 2, "{name}: the link is made");
        let out = spread_link(&mut a, &["b", "d"]);
        assert_eq!(
            outcomes(&out),
            [(add("d"), ChangeOutcome::Committed { version: 2 }, 1)],
            "{name}"
        );
        let asked = a.step_vec(a.now_ms(), from("z", Message::ChainRequest { after: 1 }));
        let [Message::Chain { links }] = sent_to(&asked, "z").as_slice() else {
            panic!("{name}: no chain served: {asked:?}");
        };
        assert_eq!(links.len(), 1);
        assert_eq!(*links[0].electorate, new);
        assert_eq!(
            links[0].check(&v1, chorus_core::certificate::verify),
            Ok(()),
            "{name}: the committed link checks"
        );
    }
}

/// Rule 2 at the receiver: the electorate a heartbeat carries is adopted before the ack is
/// written, so a standby that the change makes a voter acks as a voter (with a promise), and a
/// voter the change removes still acks (its ack counts for the old majority).
#[test]
fn a_receiver_adopts_the_carried_electorate_before_it_acknowledges() {
    let mut a = established(ABC);
    let out = ask(&mut a, add("d"), 1);
    let (beat, carried) = heartbeat(&out);
    let carried = carried.unwrap();
    let hb = Message::Heartbeat {
        term: 1,
        beat,
        membership_version: 2,
        genesis: carried.genesis,
        electorate: Some(carried.clone()),
        membership_term: carried.term,
        certified: 0,
    };

    // d: an eligible standby of {a, b, c}.
    let mut d = node("d", ABC);
    let out = d.step_vec(10, from("a", hb.clone()));
    let changed = out
        .iter()
        .position(|c| {
            matches!(
                c,
                Command::Notice(Notice::ElectorateChanged { version: 2, .. })
            )
        })
        .expect("d adopts version 2");
    let acked = out
        .iter()
        .position(|c| {
            matches!(
                c,
                Command::Send {
                    msg: Message::HeartbeatAck { .. },
                    ..
                }
            )
        })
        .expect("d acknowledges");
    assert!(changed < acked, "adopted after acking: {out:?}");
    assert_eq!(
        sent_to(&out, "a"),
        [
            &Message::HeartbeatAck {
                term: 1,
                beat,
                promise_ms: d.config().election_timeout_min_ms,
                holds: true,
                endorsement: None,
                certified: 1,
            },
            &Message::HeartbeatAck {
                // Signed once it holds it, d endorses the new electorate with a second ack of the
                // beat (rule 7); it can vouch for version 1 only.
                term: 1,
                beat,
                promise_ms: 0,
                holds: true,
                endorsement: Some(simulated_signature(&"d".into(), &carried.statement())),
                certified: 1,
            }
        ],
        "d acknowledges as a voter of the new electorate"
    );
    assert_eq!(d.electorate(), Some(&*carried));

    // c, removed by the change: it adopts the new electorate and still acknowledges.
    let mut a2 = established(ABC);
    let out = ask(&mut a2, remove("c"), 1);
    let (beat, carried) = heartbeat(&out);
    let carried = carried.unwrap();
    let mut c = node("c", ABC);
    let out = c.step_vec(
        10,
        from(
            "a",
            Message::Heartbeat {
                term: 1,
                beat,
                membership_version: 2,
                genesis: carried.genesis,
                electorate: Some(carried.clone()),
                membership_term: carried.term,
                certified: 0,
            },
        ),
    );
    assert_eq!(c.electorate(), Some(&*carried));
    assert_eq!(
        sent_to(&out, "a"),
        [
            &Message::HeartbeatAck {
                term: 1,
                beat,
                promise_ms: c.config().election_timeout_min_ms,
                holds: true,
                endorsement: None,
                certified: 1,
            },
            &Message::HeartbeatAck {
                term: 1,
                beat,
                promise_ms: 0,
                holds: true,
                endorsement: Some(simulated_signature(&"c".into(), &carried.statement())),
                certified: 1,
            }
        ]
    );
}

/// A lease stands only on promises of the electorates in force: a voter alone holds a lease on
/// its own promise, and once it proposes to add `d` (who promised nothing yet) the lease is
/// cut to now; d's acknowledgement, promising, renews it. Without the cut, a lease granted by
/// the founder alone outlived two changes and {n1, n2} elected another admin under it
/// (`chorus-sim fuzz` seed 341872, `sim/reproducers/grown-lease-outlives-changes.toml`).
#[test]
fn a_proposal_cuts_the_lease_to_what_the_electorates_in_force_promised() {
    let mut a = established(&["a"]);
    assert!(a.holds_lease(a.now_ms()), "alone, on its own promise");
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    assert!(
        out.contains(&Command::Notice(Notice::LeaseExpired { term: 1 })),
        "{out:?}"
    );
    assert!(!a.holds_lease(a.now_ms()), "d promised nothing yet");
    let (beat, _) = heartbeat(&out);
    let out = ack(&mut a, "d", beat);
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::Notice(Notice::LeaseRenewed { .. }))),
        "{out:?}"
    );
    assert!(a.holds_lease(a.now_ms()));
}

/// The cut of a proposal that leaves some lease is a renewal to the earlier end, with the
/// lease timer set there, not an expiry: in {a, b, c}, b acknowledged the first beat and c
/// only the next, 15 s later; `add d` needs three of {a, b, c, d}, so the lease ends where b's
/// promise does, still ahead.
///
/// Fails on `cut_lease_to_promises`'s `supported > now` as `<` (a lease still held reported
/// expired and its timer cancelled).
#[test]
fn a_proposal_that_leaves_some_lease_reports_it_renewed_to_its_earlier_end() {
    let mut a = established(ABC);
    let b_sent = a.now_ms();
    beat_acked_by(&mut a, &["c"]);
    let b_ends = b_sent + a.config().lease_for(30_000);
    assert!(a.now_ms() < b_ends);
    let out = ask(&mut a, add("d"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let lease: Vec<_> = out
        .iter()
        .filter(|c| {
            matches!(
                c,
                Command::Notice(Notice::LeaseRenewed { .. } | Notice::LeaseExpired { .. })
            )
        })
        .collect();
    assert_eq!(
        lease,
        [&Command::Notice(Notice::LeaseRenewed {
            term: 1,
            lease_until_ms: b_ends
        })]
    );
    assert!(a.holds_lease(b_ends - 1) && !a.holds_lease(b_ends));
    assert!(
        out.contains(&Command::SetTimer {
            timer: Timer::Lease,
            at_ms: b_ends
        }),
        "{out:?}"
    );
}

/// Issue 51, finding 9: the admin that made the link of `add d` died before any follower held
/// it (killed within a heartbeat of the link). b took {a, b, c, d} from its heartbeat and
/// holds the link of version 1 only; elected next by c and d, it makes version 2's link from
/// their endorsements, as a would have — it checks from version 1 and b hands it to a stale
/// voter — and proposes nothing until a majority holds it.
///
/// Fails on a new admin that never makes a missing link: its next link jumps the gap, and a
/// voter anchored at version 1 can never check past it.
#[test]
fn a_new_admin_makes_the_link_its_dead_predecessor_took_with_it() {
    let mut a = established(ABC);
    let out = ask(&mut a, add("d"), 1);
    let carried = out
        .iter()
        .find_map(|c| match c {
            Command::Broadcast {
                msg: m @ Message::Heartbeat { .. },
            } => Some(m.clone()),
            _ => None,
        })
        .expect("a heartbeat carrying {a, b, c, d}");
    let mut b = node("b", ABC);
    b.step_vec(a.now_ms(), from("a", carried));
    assert_eq!(members_of(&b), ABCD);
    assert_eq!(b.certified_version(), 1);
    // a is gone; b stands and c and d elect it.
    stand(&mut b);
    let (now, term) = (b.now_ms(), b.term() + 1);
    for v in ["c", "d"] {
        b.step_vec(
            now,
            from(
                v,
                Message::PreVoteReply {
                    term,
                    granted: true,
                },
            ),
        );
    }
    for v in ["c", "d"] {
        let granted = Message::VoteReply {
            term,
            granted: true,
            promise_ms: 30_000,
        };
        b.step_vec(now, from(v, granted));
    }
    assert_eq!(b.role(), Role::Admin);
    let beat = b.beat();
    ack(&mut b, "c", beat);
    assert_eq!(
        b.certified_version(),
        1,
        "one endorsement of {{a, b, c}} is not enough"
    );
    let out = ack(&mut b, "d", beat);
    assert_eq!(
        b.certified_version(),
        2,
        "the missing link is made: {out:?}"
    );
    let asked = b.step_vec(b.now_ms(), from("z", Message::ChainRequest { after: 1 }));
    let [Message::Chain { links }] = sent_to(&asked, "z").as_slice() else {
        panic!("no chain served: {asked:?}");
    };
    let v1 = Electorate::new(1, ids(ABC));
    assert_eq!(
        links[0].check(&v1, chorus_core::certificate::verify),
        Ok(())
    );
    // Held by b alone, it is not settled: the next change waits for c and d to hold it.
    let out = ask(&mut b, remove("a"), 2);
    assert_eq!(outcome(&out), refused(ChangeRefusal::ChangePending));
    spread_link(&mut b, &["c", "d"]);
    let out = ask(&mut b, remove("a"), 3);
    assert_eq!(outcome(&out), proposed(3));
}

/// Rule 3, last sentence: an admin that removes itself keeps its duties until the change
/// commits (with majorities of {a, b, c} and {b, c}), then steps down with `removed` and tells
/// the cluster.
#[test]
fn the_removed_admin_steps_down_once_its_removal_commits() {
    let mut a = established(ABC);
    // c follows too: {b, c} must be following for the removal to be proposed at all.
    let beat = a.beat();
    ack(&mut a, "c", beat);
    let out = ask(&mut a, remove("a"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, _) = heartbeat(&out);
    let out = ack(&mut a, "b", beat);
    assert!(!committed(&out));
    assert_eq!(a.role(), Role::Admin, "not before the commit");
    assert!(a.holds_lease(a.now_ms()));
    let out = ack(&mut a, "c", beat);
    assert!(
        !committed(&out),
        "committed on the admin's link alone: {out:?}"
    );
    // The link of its own removal is at a alone, which is no member of {b, c}: it stays in
    // office, naming the link, until both hold it (issue 51, finding 9: a retiring admin
    // stopped right after the commit took the only copy with it).
    assert_eq!(a.role(), Role::Admin, "not before the link spread");
    let out = spread_link(&mut a, &["b"]);
    assert!(
        !committed(&out),
        "committed with the link at 1 of {{b, c}}: {out:?}"
    );
    let out = spread_link(&mut a, &["c"]);
    assert!(committed(&out));
    assert!(out.contains(&Command::Notice(Notice::SteppedDown {
        term: 1,
        reason: StepDownReason::Removed,
    })));
    assert!(out.contains(&Command::Broadcast {
        msg: Message::StepDown {
            term: 1,
            successor: None
        }
    }));
    assert_eq!(a.role(), Role::Follower);
    assert!(!a.holds_lease(a.now_ms()));
    assert_eq!(members_of(&a), ["b", "c"]);
    // Out of the electorate, it never stands again.
    for _ in 0..6 {
        let Some((at, timer)) = a.next_deadline() else {
            break;
        };
        a.step_vec(at, Event::TimerFired { timer });
        assert_eq!(a.role(), Role::Follower);
    }
}

// ---- Rule 4: electorate order in votes -----------------------------------------------------------

/// A voter on version 2 refuses (pre-)votes to a candidate on version 1, and to one on a
/// version 2 proposed in an earlier term; it grants them to a candidate on its own electorate
/// or a later one.
#[test]
fn a_voter_refuses_candidates_with_an_older_electorate() {
    let v1 = Electorate::new(1, ids(ABC));
    let v2_t1 = v1.successor(1, ids(ABCD));
    let v2_t3 = v1.successor(3, ids(&["a", "b", "c", "w"]));
    let v3 = v2_t3.successor(4, ids(ABC));
    let key = |e: &Electorate| (e.version, e.term, e.fingerprint());

    let mut b = node("b", ABC);
    b.set_electorate_for_test(v2_t3.clone());
    let at = 100_000; // long past any promise
    let vote =
        |term, (electorate_version, electorate_term, electorate_hash)| Message::VoteRequest {
            term,
            electorate_version,
            electorate_term,
            electorate_hash,
            electorate_stamp: 0,
            transfer: false,
        };
    let pre_vote =
        |term, (electorate_version, electorate_term, electorate_hash)| Message::PreVoteRequest {
            term,
            electorate_version,
            electorate_term,
            electorate_hash,
            electorate_stamp: 0,
        };
    let granted = |out: &[Command]| match sent_to(out, "c").as_slice() {
        [Message::VoteReply { granted, .. }] | [Message::PreVoteReply { granted, .. }] => *granted,
        other => panic!("one reply expected, got {other:?}"),
    };
    for (e, expected) in [(&v1, false), (&v2_t1, false), (&v2_t3, true), (&v3, true)] {
        let mut twin = b.clone();
        let out = twin.step_vec(at, from("c", pre_vote(5, key(e))));
        assert_eq!(granted(&out), expected, "pre-vote on {:?}", e.key());
        let mut twin = b.clone();
        let out = twin.step_vec(at, from("c", vote(5, key(e))));
        assert_eq!(granted(&out), expected, "vote on {:?}", e.key());
        assert_eq!(twin.voted_for().is_some(), expected);
    }
}

/// Of two pre-candidates, the one on the later electorate goes on whatever their ranks: voters
/// on the later electorate refuse the older one, so a better-ranked pre-candidate on the older
/// one that turned the other away would block the only one that can win (after a change that
/// reached some voters before its admin died, they livelocked). On one electorate, rank decides.
#[test]
fn of_two_pre_candidates_the_one_on_the_later_electorate_goes_on() {
    let v1 = Electorate::new(1, ids(ABCD));
    let v2 = v1.successor(1, ids(ABC));
    let pre_vote = |e: &Electorate| Message::PreVoteRequest {
        term: 1,
        electorate_version: e.version,
        electorate_term: e.term,
        electorate_hash: e.fingerprint(),
        electorate_stamp: 0,
    };
    let reply = |out: &[Command]| match sent_to(out, "c").as_slice() {
        [Message::PreVoteReply { granted, .. }] => *granted,
        other => panic!("one pre-vote reply expected, got {other:?}"),
    };
    // b (on version 1) stands; c ranks below it (same score, later id).
    let mut b = node("b", ABCD);
    stand(&mut b);
    assert_eq!(b.role(), Role::PreCandidate);
    let now = b.now_ms();

    let mut same = b.clone();
    let out = same.step_vec(now, from("c", pre_vote(&v1)));
    assert!(!reply(&out), "on one electorate the better-ranked goes on");
    assert_eq!(same.role(), Role::PreCandidate);

    let mut later = b.clone();
    let out = later.step_vec(now, from("c", pre_vote(&v2)));
    assert!(reply(&out), "c is on a later electorate: {out:?}");
    assert_eq!(later.role(), Role::Follower);

    // And the other way round: c, on version 2, goes on against b's older electorate.
    let mut c = node("c", ABCD);
    c.set_electorate_for_test(v2.clone());
    stand(&mut c);
    assert_eq!(c.role(), Role::PreCandidate);
    let out = c.step_vec(c.now_ms(), from("b", pre_vote(&v1)));
    assert_eq!(
        sent_to(&out, "b"),
        [&Message::PreVoteReply {
            term: 0,
            granted: false
        }]
    );
    assert_eq!(c.role(), Role::PreCandidate, "c goes on");
}

// ---- Rule 5: following the admin's electorate ----------------------------------------------------

/// Rule 5 through discovery: a follower whose electorate version differs from its admin's asks
/// the admin (WHOAMI) and takes the electorate of the reply when it is later than its own, or
/// when its own was proposed in an earlier term (a change whose admin died before committing);
/// never from another peer, and never an older one when its own was proposed in this term.
#[test]
fn a_follower_takes_its_admins_electorate_from_a_whoami_reply() {
    let v1 = Electorate::new(1, ids(ABC));
    let genesis = v1.genesis;
    let heartbeat = |version| Message::Heartbeat {
        term: 2,
        beat: 5,
        membership_version: version,
        genesis,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    let reply = |e: &Electorate| Message::WhoamiReply {
        admin: Some("c".into()),
        term: 2,
        membership_version: e.version,
        beat: 5,
        uptime_s: 0,
        resources: Default::default(),
        eligible: true,
        electorate: Some(Arc::new(e.clone())),
        genesis,
        electorate_stamp: 0,
    };

    // b holds version 2 proposed in term 1 (its admin died before committing it); c was
    // elected in term 2 on version 1.
    // (b asked every peer when it connected; the replies come after the heartbeat.)
    let v2_t1 = v1.successor(1, ids(ABCD));
    let mut b = node("b", ABC);
    b.set_electorate_for_test(v2_t1.clone());
    b.step_vec(10, from("c", heartbeat(1)));
    assert_eq!(b.admin().map(NodeId::as_str), Some("c"));
    // A member that is not the admin does not speak for the electorate.
    b.step_vec(11, from("a", reply(&v1)));
    assert_eq!(b.electorate(), Some(&v2_t1));
    let out = b.step_vec(12, from("c", reply(&v1)));
    assert_eq!(b.electorate(), Some(&v1), "b takes its admin's: {out:?}");
    assert!(out.contains(&Command::Notice(Notice::ElectorateChanged {
        version: 1,
        term: 0,
        members: ids(ABC).into(),
    })));

    // b is behind: its admin's electorate is later.
    let v2_t2 = v1.successor(2, ids(ABCD));
    let mut b = node("b", ABC);
    b.step_vec(10, from("c", heartbeat(2)));
    b.step_vec(12, from("c", reply(&v2_t2)));
    assert_eq!(b.electorate(), Some(&v2_t2));

    // b took version 2 from its admin in this term (so stamped it 2): an older one from the
    // same admin is a delayed message.
    let mut b = node("b", ABC);
    let carrying = Message::Heartbeat {
        term: 2,
        beat: 6,
        membership_version: 2,
        membership_term: 2,
        genesis,
        electorate: Some(Arc::new(v2_t2.clone())),
        certified: 0,
    };
    b.step_vec(10, from("c", carrying));
    assert_eq!((b.electorate(), b.stamp()), (Some(&v2_t2), 2));
    b.step_vec(12, from("c", reply(&v1)));
    assert_eq!(b.electorate(), Some(&v2_t2));
}

/// Sibling electorates: b holds version 2 proposed in term 1 (never committed), its admin c
/// holds a version 2 it proposed and committed in term 2 while b was away. The versions are
/// equal, so only the proposing term in the heartbeat tells b to ask; the reply then carries
/// c's electorate (the keys differ) and b takes it.
#[test]
fn a_follower_on_a_sibling_of_the_same_version_asks_and_takes_its_admins() {
    let v1 = Electorate::new(1, ids(ABC));
    let v2_t1 = v1.successor(1, ids(ABCD));
    let v2_t2 = v1.successor(2, ids(&["a", "b", "c", "e"]));
    let mut b = node("b", ABC);
    b.set_electorate_for_test(v2_t1.clone());
    let hb = Message::Heartbeat {
        term: 2,
        beat: 5,
        membership_version: 2,
        membership_term: 2,
        genesis: v1.genesis,
        electorate: None,
        certified: 0,
    };
    let out = b.step_vec(10, from("c", hb));
    assert_eq!(b.admin().map(NodeId::as_str), Some("c"));
    assert_eq!(
        sent_to(&out, "c")
            .into_iter()
            .filter(|m| matches!(m, Message::Whoami { .. }))
            .collect::<Vec<_>>(),
        [&Message::Whoami {
            electorate_version: 2,
            electorate_term: 1,
            electorate_stamp: 0,
        }],
        "b asks its admin: {out:?}"
    );

    // c answers with its electorate because the (version, term) keys differ.
    let mut c = node("c", &["a", "b", "c", "e"]);
    c.set_electorate_for_test(v2_t2.clone());
    let out = c.step_vec(
        11,
        from(
            "b",
            Message::Whoami {
                electorate_version: 2,
                electorate_term: 1,
                electorate_stamp: 0,
            },
        ),
    );
    let reply = sent_to(&out, "b")
        .into_iter()
        .find(|m| matches!(m, Message::WhoamiReply { .. }))
        .expect("a reply")
        .clone();
    let Message::WhoamiReply { electorate, .. } = &reply else {
        unreachable!()
    };
    assert_eq!(electorate.as_deref(), Some(&v2_t2));
    // On the same key, nothing is carried.
    let out = c.step_vec(
        12,
        from(
            "b",
            Message::Whoami {
                electorate_version: 2,
                electorate_term: 2,
                electorate_stamp: 0,
            },
        ),
    );
    assert!(sent_to(&out, "b").iter().all(|m| !matches!(
        m,
        Message::WhoamiReply {
            electorate: Some(_),
            ..
        }
    )));

    // b, with c's answer (as c's term-2 reply), takes the later sibling.
    let Message::WhoamiReply {
        electorate,
        genesis,
        ..
    } = reply
    else {
        unreachable!()
    };
    let answer = Message::WhoamiReply {
        admin: Some("c".into()),
        term: 2,
        membership_version: 2,
        beat: 5,
        uptime_s: 0,
        resources: Default::default(),
        eligible: true,
        electorate,
        genesis,
        electorate_stamp: 0,
    };
    b.step_vec(13, from("c", answer));
    assert_eq!(b.electorate(), Some(&v2_t2));
}

/// A change cut short: its admin died after the new electorate reached some nodes only. A
/// member of a node's electorate hands it an electorate at a later position (stamp, version)
/// and the node takes it with that stamp (rule 5, MongoRaftReconfig's SendConfig), moving to
/// the stamp's term if it is behind; nothing at an earlier or equal position, nothing of
/// another cluster, nothing from a non-member, no stamp above the replier's term. (Taking "the next electorate" by version alone, the rule
/// this replaces, let a pre-candidate take one that removed it and win beside the rightful
/// admin: `chorus-mc` found it in 320 walks.)
#[test]
fn a_member_hands_over_a_later_position_and_nobody_else_does() {
    let v1 = Electorate::new(1, ids(ABC));
    let v2 = Arc::new(v1.successor(1, ids(ABCD)));
    let reply = |e: &Arc<Electorate>, stamp| Message::WhoamiReply {
        admin: None,
        term: 1,
        membership_version: e.version,
        beat: 5,
        uptime_s: 0,
        resources: Default::default(),
        eligible: true,
        electorate: Some(e.clone()),
        genesis: v1.genesis,
        electorate_stamp: stamp,
    };
    // c is at term 1 with v1 unstamped, and asked everyone when it started.
    let fresh = || {
        let mut c = node("c", ABC);
        c.step_vec(1, from("a", vote_req_for(1)));
        c
    };
    let mut c = fresh();
    let out = c.step_vec(10, from("b", reply(&v2, 1)));
    assert_eq!((c.electorate(), c.stamp()), (Some(&*v2), 1), "{out:?}");

    // d, the member being added, is not a member of c's electorate: it does not speak for it.
    let mut c = fresh();
    c.step_vec(10, from("d", reply(&v2, 1)));
    assert_eq!(c.electorate(), Some(&v1));

    // Another cluster's: not taken.
    let foreign = Arc::new(Electorate::new(1, ids(&["a", "b", "x"])).successor(1, ids(ABCD)));
    let mut c = fresh();
    c.step_vec(10, from("b", reply(&foreign, 1)));
    assert_eq!(c.electorate(), Some(&v1));
    // A stamp from a term c has not reached: c moves to that term first.
    let mut c = fresh();
    let mut ahead = reply(&v2, 2);
    if let Message::WhoamiReply { term, .. } = &mut ahead {
        *term = 2;
    }
    c.step_vec(10, from("b", ahead));
    assert_eq!((c.electorate(), c.stamp(), c.term()), (Some(&*v2), 2, 2));
    // A stamp above the replier's own term is a lie, refused at the boundary.
    let mut c = fresh();
    c.step_vec(10, from("b", reply(&v2, 3)));
    assert_eq!((c.electorate(), c.term()), (Some(&v1), 1));

    // An earlier position than c's: c holds v2 stamped 1; v1 stamped 1 is behind it.
    let mut c = fresh();
    c.step_vec(10, from("b", reply(&v2, 1)));
    c.step_vec(11, from("a", reply(&Arc::new(v1.clone()), 1)));
    assert_eq!(c.electorate(), Some(&*v2));
}

/// A vote request of `term` for a candidate on a fresh `ABC` electorate (only its term matters
/// to the tests that use it).
fn vote_req_for(term: u64) -> Message {
    let v1 = Electorate::new(1, ids(ABC));
    Message::VoteRequest {
        term,
        electorate_version: 1,
        electorate_term: 0,
        electorate_hash: v1.fingerprint(),
        electorate_stamp: 0,
        transfer: false,
    }
}

/// A follower behind its admin asks again at every heartbeat until it has caught up: a question
/// or an answer that was lost does not leave it on its old electorate for good.
#[test]
fn a_follower_behind_its_admin_asks_again_until_answered() {
    let v1 = Electorate::new(1, ids(ABC));
    let v2 = v1.successor(1, ids(ABCD));
    let mut b = node("b", ABC);
    let heartbeat = |beat| Message::Heartbeat {
        term: 1,
        beat,
        membership_version: 2,
        genesis: v1.genesis,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    let whoami = Message::Whoami {
        electorate_version: 1,
        electorate_term: 0,
        electorate_stamp: 0,
    };
    for (t, beat) in [(10, 1), (20, 2), (30, 3)] {
        let out = b.step_vec(t, from("a", heartbeat(beat)));
        assert!(
            sent_to(&out, "a").contains(&&whoami),
            "no question at beat {beat}: {out:?}"
        );
    }
    let reply = Message::WhoamiReply {
        admin: Some("a".into()),
        term: 1,
        membership_version: 2,
        beat: 3,
        uptime_s: 0,
        resources: Default::default(),
        eligible: true,
        electorate: Some(Arc::new(v2.clone())),
        genesis: v1.genesis,
        electorate_stamp: 0,
    };
    b.step_vec(31, from("a", reply));
    assert_eq!(b.electorate(), Some(&v2));
    let out = b.step_vec(40, from("a", heartbeat(4)));
    assert!(!sent_to(&out, "a").contains(&&whoami), "caught up: {out:?}");
}

/// A node whose electorate lacks the cluster's admin — it holds a change that removed that node
/// and never committed (here), or missed the change that added it — refuses the admin's
/// heartbeats (not a member), so only its members can lead it there: once its own round has
/// failed it asks its peers again, takes the admin that members report although that admin is
/// not a member of its electorate, and then takes the admin's electorate (rule 5).
#[test]
fn a_node_whose_electorate_lacks_the_admin_finds_it_through_its_members() {
    let v1 = Electorate::new(1, ids(ABCD));
    let genesis = v1.genesis;
    // a, admin in term 1, proposed removing c, reached only b, and died.
    let v2 = v1.successor(1, ids(&["a", "b", "d"]));
    let mut b = node("b", ABCD);
    let carrying = Message::Heartbeat {
        term: 1,
        beat: 3,
        membership_version: 2,
        genesis,
        electorate: Some(Arc::new(v2.clone())),
        membership_term: v2.term,
        certified: 0,
    };
    b.step_vec(10, from("a", carrying));
    assert_eq!(b.electorate(), Some(&v2));
    b.step_vec(20, Event::PeerDown { peer: "a".into() });
    // c was elected in term 2 on version 1; b refuses its heartbeats.
    let heartbeat = Message::Heartbeat {
        term: 2,
        beat: 9,
        membership_version: 1,
        genesis,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    let out = b.step_vec(30, from("c", heartbeat.clone()));
    assert!(out.contains(&Command::Notice(Notice::Refused {
        from: "c".into(),
        message: "heartbeat".into(),
        reason: Refusal::NotMember,
    })));
    // b suspects a, stands, finds no support (d follows c), and asks its peers again.
    let mut asked = false;
    for _ in 0..6 {
        let (at, timer) = b.next_deadline().expect("a timer is armed");
        let out = b.step_vec(at, Event::TimerFired { timer });
        if sent_to(&out, "d").contains(&&Message::Whoami {
            electorate_version: 2,
            electorate_term: 1,
            electorate_stamp: 1,
        }) {
            asked = true;
            break;
        }
    }
    assert!(asked, "b never asked its peers who the admin is");
    let reply = |e: &Electorate| Message::WhoamiReply {
        admin: Some("c".into()),
        term: 2,
        membership_version: e.version,
        beat: 9,
        uptime_s: 0,
        resources: Default::default(),
        eligible: true,
        electorate: Some(Arc::new(e.clone())),
        genesis,
        electorate_stamp: 0,
    };
    // d is the only member of b's electorate still up: its report is enough.
    let t = b.now_ms();
    b.step_vec(t, from("d", reply(&v1)));
    assert_eq!(b.admin().map(NodeId::as_str), Some("c"), "b follows c");
    let out = b.step_vec(t + 1, from("c", heartbeat));
    assert!(sent_to(&out, "c").contains(&&Message::HeartbeatAck {
        term: 2,
        beat: 9,
        promise_ms: b.config().election_timeout_min_ms,
        holds: false,
        endorsement: None,
        certified: 1,
    }));
    b.step_vec(t + 2, from("c", reply(&v1)));
    assert_eq!(b.electorate(), Some(&v1), "b takes its admin's electorate");
}

/// A pre-candidate that members report an admin of its own term to stands back and follows it,
/// as that admin's heartbeat would make it (a node whose electorate lacks the admin refuses the
/// heartbeats, so the reports are all it gets; it is a pre-candidate most of the time).
#[test]
fn a_pre_candidate_follows_an_admin_of_its_term_that_members_report() {
    let mut b = node("b", ABCD);
    let genesis = b.electorate().unwrap().genesis;
    let e = b.electorate().unwrap().clone();
    let vote = Message::VoteRequest {
        term: 2,
        electorate_version: e.version,
        electorate_term: e.term,
        electorate_hash: e.fingerprint(),
        electorate_stamp: 0,
        transfer: false,
    };
    b.step_vec(10, from("a", vote));
    assert_eq!(
        (b.term(), b.voted_for().map(NodeId::as_str)),
        (2, Some("a"))
    );
    // a won, but b heard none of its heartbeats: b stands.
    stand(&mut b);
    assert_eq!(b.role(), Role::PreCandidate);
    let report = Message::WhoamiReply {
        admin: Some("a".into()),
        term: 2,
        membership_version: 1,
        beat: 4,
        uptime_s: 0,
        resources: Default::default(),
        eligible: true,
        electorate: None,
        genesis,
        electorate_stamp: 0,
    };
    let t = b.now_ms();
    for member in ["c", "d"] {
        b.step_vec(t, from(member, report.clone()));
    }
    assert_eq!(
        (b.role(), b.admin().map(NodeId::as_str)),
        (Role::Follower, Some("a"))
    );
}

// ---- Forwarding and forced recovery, at their bounds ----------------------------------------

/// A node remembers up to 64 forwarded requests awaiting their answer (`MAX_FORWARDED`),
/// forgetting the oldest beyond that: with 65 forwarded, the answer to the first is refused as
/// unsolicited and the answers to the second and the last are taken.
///
/// Kills `on_change_members`: `forwarded.len() >= MAX_FORWARDED` → `<` (every new request
/// evicted the one before, so two outstanding requests could not both be answered).
#[test]
fn forwarded_requests_are_remembered_up_to_sixty_four_oldest_forgotten_first() {
    let mut b = node("b", ABC);
    let hb = Message::Heartbeat {
        term: 1,
        beat: 1,
        membership_version: 1,
        membership_term: 0,
        genesis: b.electorate().unwrap().genesis,
        electorate: None,
        certified: 0,
    };
    b.step_vec(10, from("a", hb));
    for request in 1..=65 {
        let out = ask(&mut b, add("d"), request);
        assert_eq!(
            outcome(&out),
            ChangeOutcome::Forwarded { admin: "a".into() }
        );
    }
    let result = |request| Message::ChangeResult {
        request,
        change: add("d"),
        outcome: ChangeOutcome::Committed { version: 2 },
    };
    let out = b.step_vec(11, from("a", result(1)));
    assert_eq!(
        out,
        [Command::Notice(Notice::Refused {
            from: "a".into(),
            message: "change_result".into(),
            reason: Refusal::Unsolicited,
        })],
        "the 65th request evicted the first"
    );
    for request in [2, 65] {
        let out = b.step_vec(12, from("a", result(request)));
        assert_eq!(
            outcomes(&out),
            [(add("d"), ChangeOutcome::Committed { version: 2 }, request)]
        );
    }
}

/// Forced recovery is refused at the top of either range — the electorate version or the term
/// at the wire's limit (2⁵³ − 1) — each on its own, since `version + 1` or `term + 1` would
/// leave it.
///
/// Kills `check_force_new_electorate`: `version >= MAX || term >= MAX` → `&&`.
#[test]
fn forced_recovery_is_refused_at_the_top_of_the_version_or_the_term_range() {
    let mut at_max_version = node("a", ABC);
    at_max_version.set_electorate_for_test(Electorate::new(MAX_WIRE_INT, ids(ABC)));
    assert!(at_max_version.check_force_new_electorate().is_err());

    let mut at_max_term = node("a", ABC);
    let hb = Message::Heartbeat {
        term: MAX_WIRE_INT,
        beat: 1,
        membership_version: 1,
        membership_term: 0,
        genesis: at_max_term.electorate().unwrap().genesis,
        electorate: None,
        certified: 0,
    };
    at_max_term.step_vec(10, from("b", hb));
    assert_eq!(at_max_term.term(), MAX_WIRE_INT);
    assert!(at_max_term.check_force_new_electorate().is_err());

    let mut fine = node("a", ABC);
    fine.step_vec(10, Event::Shutdown);
    assert!(fine.check_force_new_electorate().is_ok());
}

// ---- Autopilot on a single core ----------------------------------------------------------------

/// Fires the admin's next heartbeat (see [`next_heartbeat`]), has `ackers` acknowledge it at
/// once, and returns the heartbeat step's commands.
fn beat_acked_by(a: &mut Core, ackers: &[&str]) -> Vec<Command> {
    let out = next_heartbeat(a);
    let (beat, _) = heartbeat(&out);
    for v in ackers {
        ack(a, v, beat);
    }
    out
}

/// Autopilot promotes a standby once it has followed this admin for `stabilization_time_ms`
/// (its first acknowledgement that long ago) and still follows it (an acknowledgement within
/// the last two heartbeat intervals) — both at their boundaries here: `d` acknowledges one
/// heartbeat, H0, and falls silent; at H0 + 15 s it has not followed long enough, at H0 + 30 s
/// (= H0 + stabilization = two intervals after its last ack) it is promoted.
///
/// Fails on `autopilot`: `first + stab <= now` → `>`, `first − stab`, `first × stab`;
/// `last >= recent` → `<`; `recent = now − 2 × interval` → `now − (2 + interval)` or
/// `now − 2 / interval`; `max == 0 || len < max` → `&&`; `!e.contains(id)` → `e.contains(id)`;
/// either `&&` of the standby filter → `||` (written ahead: the run stopped before them).
#[test]
fn autopilot_promotes_a_standby_that_followed_for_the_stabilization_time_and_still_follows() {
    let config = Config::default();
    assert_eq!(
        (config.heartbeat_interval_ms, config.stabilization_time_ms),
        (15_000, 30_000)
    );
    let mut a = established(ABC);
    beat_acked_by(&mut a, &["b", "c", "d"]);
    let h0 = a.now_ms();
    let out = beat_acked_by(&mut a, &["b", "c"]);
    assert_eq!(a.now_ms(), h0 + 15_000);
    assert_eq!(outcomes(&out), [], "followed for 15 s only");
    let out = beat_acked_by(&mut a, &["b", "c"]);
    assert_eq!(a.now_ms(), h0 + 30_000);
    assert_eq!(outcomes(&out), [(add("d"), proposed(2), 0)]);
}

/// The same standby, but it reconnected 1 ms after its first acknowledgement: autopilot counts
/// the stabilization time from the connection too, so it is promoted one heartbeat later.
///
/// Fails on `autopilot`: `eligible && up_since + stab <= now` → `||`; `up_since + stab` →
/// `up_since − stab` or `up_since × stab`; `<=` → `>` (written ahead: not reached by the run).
#[test]
fn autopilot_counts_a_standbys_stabilization_from_its_latest_connection_too() {
    let mut a = established(ABC);
    beat_acked_by(&mut a, &["b", "c", "d"]);
    let h0 = a.now_ms();
    a.step_vec(h0, Event::PeerDown { peer: "d".into() });
    a.step_vec(h0 + 1, up("d", true));
    let out = beat_acked_by(&mut a, &["b", "c", "d"]);
    assert_eq!(outcomes(&out), []);
    let out = beat_acked_by(&mut a, &["b", "c", "d"]);
    assert_eq!(a.now_ms(), h0 + 30_000);
    assert_eq!(
        outcomes(&out),
        [],
        "connected for 1 ms less than stabilization"
    );
    let out = beat_acked_by(&mut a, &["b", "c", "d"]);
    assert_eq!(outcomes(&out), [(add("d"), proposed(2), 0)]);
}

/// With autopilot off (`autopilot = false`) the admin promotes nobody, however long a standby
/// has followed: the same standby and heartbeats as above, and nothing is proposed.
///
/// Kills `autopilot`: `!config.autopilot || role != Admin` → `&&` (an admin ran autopilot with
/// it switched off).
#[test]
fn autopilot_switched_off_promotes_nobody() {
    let mut a = established(ABC);
    let off = Config {
        autopilot: false,
        ..Config::default()
    };
    a.step_vec(a.now_ms(), Event::ConfigChanged { config: off });
    assert!(!a.config().autopilot);
    for _ in 0..4 {
        let out = beat_acked_by(&mut a, &["b", "c", "d"]);
        assert_eq!(outcomes(&out), []);
    }
    assert_eq!(a.electorate().unwrap().len(), 3);
}

/// Autopilot promotes only while the electorate is below `max_voters` (5 by default): with five
/// voters, a standby that has followed for as long as it takes is never promoted.
///
/// Fails on `autopilot`: `len < max` → `len <= max`; `max == 0` → `max != 0` (written ahead:
/// not reached by the run).
#[test]
fn autopilot_promotes_no_standby_into_an_electorate_of_max_voters() {
    let five = &["a", "b", "c", "e", "f"];
    assert_eq!(Config::default().max_voters, 5);
    let mut a = established(five);
    for _ in 0..6 {
        let out = beat_acked_by(&mut a, &["b", "c", "d", "e", "f"]);
        assert_eq!(outcomes(&out), []);
    }
    assert_eq!(a.electorate().unwrap().len(), 5);
}

/// While a change is pending, autopilot proposes nothing — not even a refused change: a second
/// standby as stable as the first is left alone. Heartbeats every 5 s, so the lease of the
/// acks before the proposal still runs at the next heartbeat, and nobody has acknowledged the
/// heartbeat that carries the change yet.
///
/// Kills `autopilot`'s early return `change.is_some() || !established || lease_until <= now`
/// with either `||` → `&&` (the mutants ran on, proposed the other standby, and announced a
/// `change_pending` refusal at every heartbeat).
#[test]
fn autopilot_proposes_nothing_while_a_change_is_pending() {
    let mut a = established(ABC);
    let fast = Config {
        heartbeat_interval_ms: 5_000,
        ..Config::default()
    };
    a.step_vec(a.now_ms(), Event::ConfigChanged { config: fast });
    a.step_vec(a.now_ms(), up("s", true));
    let mut promoted = None;
    for _ in 0..16 {
        let out = next_heartbeat(&mut a);
        if let [(change, outcome, 0)] = outcomes(&out).as_slice() {
            assert_eq!(*outcome, proposed(2));
            promoted = Some(change.clone());
            break;
        }
        let (beat, _) = heartbeat(&out);
        for v in ["b", "c", "d", "s"] {
            ack(&mut a, v, beat);
        }
    }
    let promoted = promoted.expect("autopilot promoted a standby");
    // Nobody acknowledges the carrying heartbeat: the change stays pending, the lease of the
    // earlier acks runs on, and the other standby still follows.
    let out = next_heartbeat(&mut a);
    assert!(
        a.holds_lease(a.now_ms()),
        "the earlier acks' lease still runs"
    );
    assert_eq!(a.electorate().unwrap().len(), 4, "{promoted:?} pending");
    assert_eq!(outcomes(&out), [], "nothing proposed, nothing refused");
}

/// Nor does autopilot propose (or announce a refusal) while the admin's lease has run out: the
/// standby `d` keeps following, but the voters fell silent, so at the heartbeat where `d` has
/// followed long enough the lease of their last acks has just ended.
///
/// Kills `autopilot`'s early return with `!established || lease_until <= now` → `&&` (the
/// mutant ran on and announced a `no_lease` refusal).
#[test]
fn autopilot_proposes_nothing_without_a_lease() {
    let mut a = established(ABC);
    beat_acked_by(&mut a, &["b", "c", "d"]);
    let h0 = a.now_ms();
    beat_acked_by(&mut a, &["d"]);
    let out = beat_acked_by(&mut a, &["d"]);
    assert_eq!(a.now_ms(), h0 + 30_000);
    assert_eq!(
        a.role(),
        Role::Admin,
        "check-quorum has not stepped it down yet"
    );
    assert!(
        !a.holds_lease(a.now_ms()),
        "the voters' last acks were 30 s ago"
    );
    assert_eq!(outcomes(&out), [], "nothing proposed, nothing refused");
}

/// An operator's removal of a live voter stands (issue 54): `c`, removed while it still runs,
/// keeps following the admin as a standby for eight heartbeats (four times the stabilization
/// time) and autopilot never promotes it; the committed electorate names it as retired. An
/// operator's `add` brings it back and takes it off the list.
///
/// Fails on the old `autopilot`, which promoted `c` at the second heartbeat after the removal.
#[test]
fn autopilot_never_promotes_a_voter_the_operator_removed_until_an_operator_adds_it() {
    let mut a = established(ABC);
    let beat = a.beat();
    ack(&mut a, "c", beat);
    let out = ask(&mut a, remove("c"), 1);
    assert_eq!(outcome(&out), proposed(2));
    let (beat, carried) = heartbeat(&out);
    assert_eq!(carried.expect("carried").retired(), [NodeId::from("c")]);
    ack(&mut a, "b", beat);
    let out = spread_link(&mut a, &["b"]);
    assert!(committed(&out));
    assert_eq!(members_of(&a), ["a", "b"]);
    assert_eq!(a.electorate().unwrap().retired(), [NodeId::from("c")]);
    for _ in 0..8 {
        let out = beat_acked_by(&mut a, &["b", "c"]);
        assert_eq!(outcomes(&out), [], "autopilot left the removed voter out");
    }
    assert_eq!(members_of(&a), ["a", "b"]);

    let out = ask(&mut a, add("c"), 2);
    assert_eq!(outcome(&out), proposed(3));
    let e = a.electorate().unwrap();
    assert_eq!((e.len(), e.retired().len()), (3, 0), "{e:?}");
}

/// Autopilot's own removal of a dead voter retires nobody: the voter, back and following, is
/// promoted again once stable (the behaviour an operator relies on after an outage). The same
/// removal asked by an operator would have kept it out (above).
#[test]
fn a_dead_voter_autopilot_removed_is_promoted_again_when_it_comes_back() {
    let mut a = established(ABCD);
    // `d` falls silent: autopilot removes it after `dead_voter_timeout_ms`.
    let mut removed = false;
    for _ in 0..40 {
        let out = beat_acked_by(&mut a, &["b", "c"]);
        if outcomes(&out)
            .iter()
            .any(|(c, o, r)| *c == remove("d") && *o == proposed(2) && *r == 0)
        {
            removed = true;
            break;
        }
    }
    assert!(removed, "autopilot removed the dead voter");
    beat_acked_by(&mut a, &["b", "c"]);
    assert_eq!(members_of(&a), ["a", "b", "c"]);
    assert!(a.electorate().unwrap().retired().is_empty());
    let mut promoted = false;
    for _ in 0..6 {
        let out = beat_acked_by(&mut a, &["b", "c", "d"]);
        promoted |= outcomes(&out).contains(&(add("d"), proposed(3), 0));
    }
    assert!(promoted, "autopilot promoted it again");
}

// ---- On the network ------------------------------------------------------------------------------

/// Fast timings, a cluster founded by `founders` voters, autopilot on or off.
fn settings(founders: u32, autopilot: bool) -> Config {
    Config {
        bootstrap_expect: founders,
        autopilot,
        ..fast_config()
    }
}

/// `founders` eligible nodes (n0…) that found the cluster and `newcomers` eligible nodes after
/// them that have not started yet (`Net::start` brings each up, as a standby of the cluster).
fn cluster(seed: u64, founders: usize, newcomers: usize, config: &Config) -> Net {
    let n = founders + newcomers;
    let start = Start {
        configs: vec![Some(config.clone()); n],
        link_spread_ms: 0,
        late: (founders..n).collect(),
    };
    Net::build_with(seed, n, 0, config.clone(), Clocks::Shared, start)
}

fn n(i: usize) -> NodeId {
    NodeId::from(format!("n{i}"))
}

fn add_n(i: usize) -> MemberChange {
    MemberChange::Add { node: n(i) }
}

fn remove_n(i: usize) -> MemberChange {
    MemberChange::Remove { node: n(i) }
}

/// Runs a network in 5 ms steps, noting the longest time without a lease holder since the
/// first admin, and answers for operator requests.
struct Driver {
    net: Net,
    /// The election bound of `support` for these settings.
    bound_ms: u64,
    request: u64,
    admin_seen_at: Option<u64>,
    max_gap_ms: u64,
}

impl Driver {
    fn new(net: Net, config: &Config) -> Driver {
        Driver {
            net,
            bound_ms: election_bound_ms(std::slice::from_ref(config)),
            request: 0,
            admin_seen_at: None,
            max_gap_ms: 0,
        }
    }

    fn now(&self) -> u64 {
        self.net.now
    }

    fn run(&mut self, ms: u64) {
        let until = self.net.now + ms;
        while self.net.now < until {
            let next = (self.net.now + 5).min(until);
            self.net.run_until(next);
            if self.net.lease_holder().is_some() {
                self.admin_seen_at = Some(self.net.now);
            }
            if let Some(seen) = self.admin_seen_at {
                self.max_gap_ms = self.max_gap_ms.max(self.net.now - seen);
            }
        }
    }

    /// What every node thinks: (id, role, term, admin, electorate version and members).
    fn views(&self) -> Vec<String> {
        self.net
            .live()
            .map(|c| {
                let e = c
                    .electorate()
                    .map(|e| (e.version, e.term, e.members().to_vec()));
                format!(
                    "{} {} t{} admin={:?} e={e:?}",
                    c.id(),
                    c.role(),
                    c.term(),
                    c.admin().map(NodeId::as_str)
                )
            })
            .collect()
    }

    /// Runs until a node holds its lease and every live node knows it as admin; fails if that
    /// takes longer than the election bound. Returns the admin.
    fn settle(&mut self, what: &str) -> usize {
        let everyone: Vec<usize> = (0..self.net.ids.len()).collect();
        self.settle_in(&everyone, what)
    }

    /// As [`Driver::settle`], among the live nodes of `group` only.
    fn settle_in(&mut self, group: &[usize], what: &str) -> usize {
        let deadline = self.now() + self.bound_ms;
        loop {
            if let Some(i) = self.net.lease_holder().filter(|i| group.contains(i)) {
                let id = &self.net.ids[i];
                let known = group.iter().all(|&j| {
                    self.net.nodes[j]
                        .as_ref()
                        .is_none_or(|c| c.admin() == Some(id))
                });
                if known {
                    return i;
                }
            }
            assert!(
                self.now() < deadline,
                "seed {}: {what}: no admin known to all within {} ms: {:#?}",
                self.net.seed,
                self.bound_ms,
                self.views()
            );
            self.run(5);
        }
    }

    /// The operator asks the lease holder for `change` (again while it is just elected) and
    /// waits for the commit. Returns the committed version.
    fn commit(&mut self, change: MemberChange) -> u64 {
        let deadline = self.now() + 3 * self.bound_ms;
        loop {
            assert!(
                self.now() < deadline,
                "seed {}: {change:?} not committed: {:#?}",
                self.net.seed,
                self.views()
            );
            let Some(admin) = self.net.lease_holder() else {
                self.run(5);
                continue;
            };
            self.request += 1;
            let request = self.request;
            let mark = self.net.history.len();
            let asked = Event::ChangeMembers {
                change: change.clone(),
                request,
            };
            self.net.apply(admin, asked);
            match self.outcomes(mark, admin, request).first() {
                Some(ChangeOutcome::Proposed { version }) => {
                    let version = *version;
                    while self.now() < deadline {
                        let done = ChangeOutcome::Committed { version };
                        if self.outcomes(mark, admin, request).contains(&done) {
                            return version;
                        }
                        self.run(5);
                    }
                }
                // Just elected, or the last change's link still on its way to a majority.
                Some(ChangeOutcome::Refused {
                    reason: ChangeRefusal::NotEstablished | ChangeRefusal::ChangePending,
                }) => self.run(10),
                other => panic!("seed {}: {change:?}: {other:?}", self.net.seed),
            }
        }
    }

    /// The outcomes node `i` reported for `request` since step `mark`, in order.
    fn outcomes(&self, mark: usize, i: usize, request: u64) -> Vec<ChangeOutcome> {
        self.net
            .notices_since(mark, i)
            .into_iter()
            .filter_map(|(_, notice)| match notice {
                Notice::MembershipChange {
                    outcome,
                    request: r,
                    ..
                } if r == request => Some(outcome),
                _ => None,
            })
            .collect()
    }

    /// The distinct electorates the live nodes hold: (version, term, members).
    fn electorates(&self) -> Vec<(u64, u64, Vec<NodeId>)> {
        let mut all: Vec<_> = self
            .net
            .live()
            .map(|c| {
                c.electorate().map_or((0, 0, vec![]), |e| {
                    (e.version, e.term, e.members().to_vec())
                })
            })
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// Asserts that every live node holds the electorate `members`, and returns its version.
    fn all_hold(&self, members: &[usize], what: &str) -> u64 {
        let members: Vec<NodeId> = members.iter().map(|&i| n(i)).collect();
        let all = self.electorates();
        assert!(
            all.len() == 1 && all[0].2 == members,
            "seed {}: {what}: expected every node on {members:?}: {:#?}",
            self.net.seed,
            self.views()
        );
        all[0].0
    }
}

/// A follower's operator request reaches the admin; the follower reports it forwarded and then
/// committed, under its own request id. A request the admin refuses comes back refused, with
/// the reason, under its id.
#[test]
fn a_followers_request_is_forwarded_and_answered_under_its_request_id() {
    for seed in 0..10 {
        let config = settings(3, false);
        let mut d = Driver::new(cluster(seed, 3, 1, &config), &config);
        d.settle("bootstrap");
        d.net.start(3);
        d.run(200);
        let admin = d.settle("with the newcomer");
        let f = (admin + 1) % 3;
        let forwarded = ChangeOutcome::Forwarded { admin: n(admin) };

        let mark = d.net.history.len();
        d.net.apply(
            f,
            Event::ChangeMembers {
                change: add_n(3),
                request: 41,
            },
        );
        d.run(d.bound_ms);
        assert_eq!(
            d.outcomes(mark, f, 41),
            [forwarded.clone(), ChangeOutcome::Committed { version: 2 }],
            "seed {seed}"
        );
        d.all_hold(&[0, 1, 2, 3], "after the add");

        let mark = d.net.history.len();
        d.net.apply(
            f,
            Event::ChangeMembers {
                change: add_n(3),
                request: 42,
            },
        );
        d.run(100);
        assert_eq!(
            d.outcomes(mark, f, 42),
            [forwarded, refused(ChangeRefusal::AlreadyVoter)],
            "seed {seed}"
        );
    }
}

/// Acceptance (a): of three voters one is lost for good; the operator removes it and adds a new
/// eligible node; then a second original voter (the admin) is lost, and the survivor and the new
/// node still elect an admin within the bound.
#[test]
fn scenario_a_operator_replaces_a_lost_voter_and_a_second_loss_still_elects() {
    for seed in 0..60 {
        let config = settings(3, false);
        let mut d = Driver::new(cluster(seed, 3, 1, &config), &config);
        d.settle("bootstrap");
        let lost = (seed % 3) as usize;
        d.net.crash(lost);
        d.net.start(3);
        d.settle("after the first loss");
        assert_eq!(d.commit(remove_n(lost)), 2);
        assert_eq!(d.commit(add_n(3)), 3);
        // The commit needs majorities only; the last node hears of it within a heartbeat.
        d.run(config.heartbeat_interval_ms);
        let mut members: Vec<usize> = (0..4).filter(|&i| i != lost).collect();
        assert_eq!(d.all_hold(&members, "after the replacement"), 3);

        let admin = d.settle("after the replacement");
        assert!(admin < 3, "seed {seed}: the admin is an original voter");
        d.net.crash(admin);
        let electorate = members.clone();
        members.retain(|&i| i != admin);
        let elected = d.settle("after the second loss");
        assert!(
            members.contains(&elected),
            "seed {seed}: n{elected} is not one of {members:?}"
        );
        // The quorum is the survivor and the new node, of the electorate the change made.
        assert_eq!(d.all_hold(&electorate, "after the second loss"), 3);
    }
}

/// Acceptance (b): the same by autopilot alone. `min_quorum` 3 keeps three voters: autopilot
/// first promotes the new node once it has been stable for `stabilization_time_ms` (the
/// electorate is below `max_voters`), then removes the voter silent for `dead_voter_timeout_ms`
/// (four voters are above `min_quorum`). No operator request is made.
#[test]
fn scenario_b_autopilot_replaces_a_lost_voter_and_a_second_loss_still_elects() {
    for seed in 0..60 {
        let config = Config {
            dead_voter_timeout_ms: 800,
            stabilization_time_ms: 200,
            min_quorum: 3,
            max_voters: 5,
            ..settings(3, true)
        };
        let mut d = Driver::new(cluster(seed, 3, 1, &config), &config);
        d.settle("bootstrap");
        let lost = (seed % 3) as usize;
        d.net.crash(lost);
        d.net.start(3);
        let (crashed_at, mark) = (d.now(), d.net.history.len());
        let mut members: Vec<usize> = (0..4).filter(|&i| i != lost).collect();
        // Both changes are autopilot's, committed by an admin: no request id.
        let commits = |d: &Driver| -> Vec<(MemberChange, u64)> {
            (0..4)
                .flat_map(|i| d.net.notices(i))
                .filter_map(|(_, notice)| match notice {
                    Notice::MembershipChange {
                        change,
                        outcome: ChangeOutcome::Committed { .. },
                        request,
                    } => Some((change, request)),
                    _ => None,
                })
                .collect()
        };
        let give_up = d.now() + 4 * d.bound_ms;
        while commits(&d).len() < 2 {
            assert!(
                d.now() < give_up,
                "seed {seed}: autopilot did not replace n{lost}: {:#?}",
                d.views()
            );
            d.run(10);
        }
        assert_eq!(
            commits(&d),
            [(add_n(3), 0), (remove_n(lost), 0)],
            "seed {seed}"
        );
        // Neither came before its time: the new node was stable, the lost one silent long
        // enough (counted from the send time of the last beat it acknowledged: at most a
        // heartbeat interval and a delivery before the crash).
        let proposed_at = |change: &MemberChange| -> u64 {
            (0..4)
                .flat_map(|i| d.net.notices_since(mark, i))
                .find_map(|(t, notice)| match notice {
                    Notice::MembershipChange {
                        change: c,
                        outcome: ChangeOutcome::Proposed { .. },
                        ..
                    } if c == *change => Some(t),
                    _ => None,
                })
                .expect("proposed")
        };
        assert!(proposed_at(&add_n(3)) >= crashed_at + config.stabilization_time_ms);
        let last_heard = crashed_at - config.heartbeat_interval_ms - d.net.delay_ms.1;
        assert!(proposed_at(&remove_n(lost)) >= last_heard + config.dead_voter_timeout_ms);
        d.run(config.heartbeat_interval_ms);
        assert_eq!(d.all_hold(&members, "after autopilot"), 3);

        let admin = d.settle("after autopilot");
        assert!(admin < 3, "seed {seed}: the admin is an original voter");
        d.net.crash(admin);
        members.retain(|&i| i != admin);
        let elected = d.settle("after the second loss");
        assert!(members.contains(&elected), "seed {seed}");
        // Autopilot removes nothing more: three voters is `min_quorum`.
        d.run(2 * config.dead_voter_timeout_ms);
        let e = d.electorates();
        assert_eq!(e.len(), 1, "seed {seed}: {e:?}");
        assert_eq!(e[0].2.len(), 3, "seed {seed}: {e:?}");
    }
}

/// Acceptance (c): five voters rolled to five new ones, one voter at a time (add a new one,
/// remove an old one; the admin is the first removed). The cluster is never without a lease
/// holder for longer than the election bound, and ends with only new voters and an admin.
#[test]
fn scenario_c_five_voters_rolled_to_five_new_ones_never_long_without_an_admin() {
    for seed in 0..40 {
        let config = settings(5, false);
        let mut d = Driver::new(cluster(seed, 5, 5, &config), &config);
        let first = d.settle("bootstrap");
        for i in 5..10 {
            d.net.start(i);
        }
        d.run(200);
        let first = {
            let now = d.settle("with the newcomers");
            assert_eq!(now, first, "seed {seed}: newcomers disturbed the admin");
            now
        };
        let mark = d.net.history.len();
        let mut old: Vec<usize> = vec![first];
        old.extend((0..5).filter(|&i| i != first));
        for (k, &gone) in old.iter().enumerate() {
            assert_eq!(d.commit(add_n(5 + k)), 2 + 2 * k as u64);
            assert_eq!(d.commit(remove_n(gone)), 3 + 2 * k as u64);
        }
        let admin = d.settle("after the roll");
        assert!(admin >= 5, "seed {seed}: admin n{admin}");
        assert_eq!(d.all_hold(&[5, 6, 7, 8, 9], "after the roll"), 11);
        assert!(
            d.net
                .notices_since(mark, first)
                .iter()
                .any(|(_, n)| matches!(
                    n,
                    Notice::SteppedDown {
                        reason: StepDownReason::Removed,
                        ..
                    }
                )),
            "seed {seed}: the first admin stepped down as removed"
        );
        assert!(
            d.max_gap_ms <= d.bound_ms,
            "seed {seed}: {} ms without an admin (bound {} ms)",
            d.max_gap_ms,
            d.bound_ms
        );
    }
}

/// The admin proposes `change` and crashes at once: its heartbeat carrying the new electorate
/// reaches exactly the nodes of `reached`.
fn propose_and_crash(d: &mut Driver, admin: usize, change: MemberChange, reached: &[usize]) {
    let mark = d.net.history.len();
    d.request += 1;
    let request = d.request;
    d.net.apply(admin, Event::ChangeMembers { change, request });
    assert_eq!(
        d.outcomes(mark, admin, request),
        [proposed(2)],
        "seed {}",
        d.net.seed
    );
    let missed: Vec<usize> = (0..d.net.ids.len())
        .filter(|i| !reached.contains(i))
        .collect();
    d.net.drop_in_flight(admin, &missed);
    d.net.crash(admin);
}

/// Acceptance (d): the admin crashes right after proposing a change, before it commits; its
/// heartbeat reached every other node, none, or some. The others still elect within the bound,
/// and every live node — the old admin too, once it restarts — ends on one electorate: the old
/// or the new one, the same everywhere. The network checks one admin per term and no
/// overlapping leases throughout.
#[test]
fn scenario_d_an_admin_crashing_mid_change_leaves_one_electorate() {
    for seed in 0..400 {
        let config = settings(5, false);
        let mut d = Driver::new(cluster(seed, 5, 1, &config), &config);
        d.settle("bootstrap");
        d.net.start(5);
        d.run(200);
        let admin = d.settle("with the newcomer");
        let follower = (admin + 1) % 5;
        let (change, old, new): (MemberChange, Vec<usize>, Vec<usize>) = match seed % 3 {
            0 => (add_n(5), (0..5).collect(), (0..6).collect()),
            1 => (
                remove_n(follower),
                (0..5).collect(),
                (0..5).filter(|&i| i != follower).collect(),
            ),
            _ => (
                remove_n(admin),
                (0..5).collect(),
                (0..5).filter(|&i| i != admin).collect(),
            ),
        };
        let others: Vec<usize> = (0..6).filter(|&i| i != admin).collect();
        let reached: Vec<usize> = match (seed / 3) % 3 {
            0 => others.clone(),
            1 => vec![],
            _ => others
                .iter()
                .copied()
                .filter(|_| d.net.rand(2) == 0)
                .collect(),
        };
        propose_and_crash(&mut d, admin, change.clone(), &reached);
        d.settle(&format!(
            "after the admin crashed proposing {change:?} to {reached:?}"
        ));
        d.run(d.bound_ms);
        let what = format!("{change:?} reached {reached:?}");
        let one = d.electorates();
        assert_eq!(one.len(), 1, "seed {seed}: {what}: {:#?}", d.views());
        let members: Vec<usize> = one[0].2.iter().map(|m| d.net.index_of(m)).collect();
        assert!(
            members == old || members == new,
            "seed {seed}: {what}: {members:?}"
        );
        // The crashed admin returns, holding the proposal in its log.
        d.net.restart(admin);
        d.run(d.bound_ms);
        d.settle(&format!("{what}, after the old admin returned"));
        d.all_hold(&members, &format!("{what}, after the old admin returned"));
    }
}

/// Acceptance (e): the admin and the node it adds (a minority of the new electorate: 2 of 6) are
/// cut off from the rest just after the proposal — before the heartbeat carrying it arrived, or
/// after it arrived but before any ack came back. The cut-off admin cannot commit and loses its
/// lease; the other four (a majority of the old and of the new electorate) elect within the
/// bound. After the heal every node ends on one electorate, with one admin.
#[test]
fn scenario_e_a_partition_during_a_change_cuts_off_the_admin_with_a_minority() {
    for seed in 0..20 {
        let config = settings(5, false);
        let mut d = Driver::new(cluster(seed, 5, 1, &config), &config);
        d.settle("bootstrap");
        d.net.start(5);
        d.run(200);
        let admin = d.settle("with the newcomer");
        let rest: Vec<usize> = (0..5).filter(|&i| i != admin).collect();
        let arrived = seed % 2 == 1;
        if arrived {
            // The acks will not come back.
            for &i in &rest {
                d.net.cut_link(i, admin);
            }
        }
        let mark = d.net.history.len();
        d.net.apply(
            admin,
            Event::ChangeMembers {
                change: add_n(5),
                request: 1,
            },
        );
        assert_eq!(d.outcomes(mark, admin, 1), [proposed(2)], "seed {seed}");
        if arrived {
            d.run(20);
        }
        d.net.partition(&[admin, 5]);
        let cut_at = d.now();
        let elected = d.settle_in(&rest, "in the majority");
        assert!(rest.contains(&elected), "seed {seed}: n{elected}");
        assert!(d.now() - cut_at <= d.bound_ms);
        let old_admin = d.net.nodes[admin].as_ref().unwrap();
        assert!(!old_admin.holds_lease(d.now()), "seed {seed}");
        assert!(
            !d.outcomes(mark, admin, 1)
                .iter()
                .any(|o| matches!(o, ChangeOutcome::Committed { .. })),
            "seed {seed}: committed without the majority"
        );
        d.run(d.bound_ms);
        d.net.heal();
        d.run(d.bound_ms);
        d.settle("after the heal");
        let expected: Vec<usize> = if arrived {
            (0..6).collect()
        } else {
            (0..5).collect()
        };
        d.all_hold(&expected, &format!("after the heal (arrived: {arrived})"));
    }
}

/// Acceptance (d) on a lossy network: one message in ten is lost while the cluster recovers
/// from the admin's crash mid-change. Once the loss stops, every node ends on one electorate,
/// with one admin known to all within the bound.
#[test]
fn scenario_d_under_message_loss_still_leaves_one_electorate() {
    for seed in 0..100 {
        let config = settings(5, false);
        let mut d = Driver::new(cluster(seed, 5, 1, &config), &config);
        d.settle("bootstrap");
        d.net.start(5);
        d.run(200);
        let admin = d.settle("with the newcomer");
        let follower = (admin + 1) % 5;
        let change = match seed % 3 {
            0 => add_n(5),
            1 => remove_n(follower),
            _ => remove_n(admin),
        };
        let others: Vec<usize> = (0..6).filter(|&i| i != admin).collect();
        let reached: Vec<usize> = others
            .iter()
            .copied()
            .filter(|_| d.net.rand(2) == 0)
            .collect();
        d.net.loss_pct = 10;
        propose_and_crash(&mut d, admin, change.clone(), &reached);
        d.run(3 * d.bound_ms);
        d.net.loss_pct = 0;
        d.settle(&format!("{change:?} reached {reached:?}, after the loss"));
        d.run(d.bound_ms);
        let one = d.electorates();
        assert_eq!(
            one.len(),
            1,
            "seed {seed}: {change:?} reached {reached:?}: {:#?}",
            d.views()
        );
    }
}

/// A voter asleep (crashed) through a whole roll of the electorate, on drifting clocks with 5 %
/// loss: when it wakes, every member of its electorate is a standby and the admin is a node it
/// has never heard of as a voter. It finds the admin through its old electorate's members,
/// takes the current electorate, and every node ends on it.
#[test]
fn a_voter_asleep_through_a_whole_roll_rejoins_the_rolled_cluster() {
    for seed in 0..40 {
        let config = settings(5, false);
        let start = Start {
            configs: vec![Some(config.clone()); 10],
            link_spread_ms: 0,
            late: (5..10).collect(),
        };
        let net = Net::build_with(seed, 10, 0, config.clone(), Clocks::Drifting, start);
        let mut d = Driver::new(net, &config);
        d.settle("bootstrap");
        for i in 5..10 {
            d.net.start(i);
        }
        d.run(200);
        let first = d.settle("with the newcomers");
        d.net.loss_pct = 5;
        let sleeper = (first + 1) % 5;
        d.net.crash(sleeper);
        let mut old: Vec<usize> = vec![first];
        old.extend((0..5).filter(|&i| i != first && i != sleeper));
        old.push(sleeper);
        for (k, &gone) in old.iter().enumerate() {
            d.commit(add_n(5 + k));
            d.commit(remove_n(gone));
        }
        d.net.loss_pct = 0;
        d.net.restart(sleeper);
        d.run(d.bound_ms);
        let admin = d.settle("after the sleeper woke");
        assert!(admin >= 5, "seed {seed}");
        d.all_hold(&[5, 6, 7, 8, 9], "after the sleeper woke");
    }
}

/// Autopilot under random faults (crashes, restarts, partitions, up to 20 % loss, drifting
/// clocks) with three founders and four nodes that join later: it promotes and removes voters
/// while the network checks one admin per term, no overlapping leases and one vote per term on
/// every step. Once everything is healed and up, every node ends on one electorate and knows
/// one admin.
#[test]
fn autopilot_under_random_faults_ends_on_one_electorate_and_one_admin() {
    for seed in 0..100 {
        let config = Config {
            dead_voter_timeout_ms: 300,
            stabilization_time_ms: 200,
            min_quorum: 3,
            max_voters: 5,
            ..settings(3, true)
        };
        let n = 7;
        let start = Start {
            configs: vec![Some(config.clone()); n],
            link_spread_ms: 0,
            late: (3..n).collect(),
        };
        let net = Net::build_with(seed, n, 0, config.clone(), Clocks::Drifting, start);
        let mut d = Driver::new(net, &config);
        d.settle("bootstrap");
        for i in 3..n {
            d.net.start(i);
        }
        for _ in 0..12 {
            let gap = 50 + d.net.rand(500);
            d.run(gap);
            let i = d.net.rand(n as u64) as usize;
            match d.net.rand(6) {
                0 => d.net.crash(i),
                1 => d.net.restart(i),
                2 => {
                    let group: Vec<usize> = (0..n).filter(|_| d.net.rand(2) == 0).collect();
                    d.net.partition(&group);
                }
                3 => d.net.heal(),
                4 => d.net.loss_pct = d.net.rand(20),
                _ => {}
            }
        }
        d.net.heal();
        d.net.loss_pct = 0;
        for i in 0..n {
            d.net.restart(i);
        }
        // Autopilot may still be promoting and removing: give it time to settle too.
        d.run(3 * d.bound_ms);
        d.settle("after the heal");
        let e = d.electorates();
        assert_eq!(e.len(), 1, "seed {seed}: {:#?}", d.views());
        assert!((3..=5).contains(&e[0].2.len()), "seed {seed}: {e:?}");
    }
}

// ---- Lease and check-quorum during a change (issue 38, semantic mutants) -----------------------

/// During a change the lease and check-quorum rest on a majority of the old electorate and of
/// the new one. `a`, admin of a, b, c, d, adds `e`; from then on only `b` and `e` acknowledge:
/// with `a` itself a majority of the new five, but two of the old four. The lease is not
/// extended past what the old majority's last promises cover, the change does not commit, and
/// once no old majority has answered for a full maximum election timeout the admin steps down
/// (it must: its change cannot commit, and a cut-off admin that kept its term for ever would
/// keep the old electorate's other side from electing anyone).
///
/// Kills the hand-made semantic mutant "`tally` during a change takes the lease and the
/// check-quorum base from the new electorate alone" (docs/mutants.md, semantic mutants): it
/// extended the lease at each beat and never stepped down.
#[test]
fn during_a_change_the_lease_and_check_quorum_need_the_old_majority_too() {
    let mut a = established(ABCD);
    a.step_vec(a.now_ms(), up("e", true));
    assert_eq!(outcome(&ask(&mut a, add("e"), 1)), proposed(2));
    let lease_before = a.lease_until_ms().expect("admin");
    let max_ms = Config::default().election_timeout_max_ms;
    let started = a.now_ms();
    let mut stepped_down = false;
    while a.now_ms() < started + 3 * max_ms {
        let out = next_heartbeat(&mut a);
        if a.role() != Role::Admin {
            stepped_down = true;
            break;
        }
        let (beat, _) = heartbeat(&out);
        for v in ["b", "e"] {
            let out = ack(&mut a, v, beat);
            assert!(!committed(&out), "two of the old four hold it: {out:?}");
        }
        assert!(
            a.lease_until_ms().is_some_and(|l| l <= lease_before),
            "lease extended on the new majority alone: {:?} > {lease_before}",
            a.lease_until_ms()
        );
    }
    assert!(stepped_down, "check-quorum counted the new majority alone");
    assert!(a.now_ms() >= started + max_ms, "not before a full timeout");
}

/// An operator's removal of a live voter survives admin failovers (issue 54): of four founders
/// the operator removes a live follower; autopilot (promoting anyone stable while below
/// `max_voters`) leaves it out for ten stabilization times, through a crash of the admin and
/// the election that follows, and through a restart of the removed node itself. Only the
/// operator's `add` brings it back.
///
/// Fails on the old core: autopilot promoted the removed node within the first wait.
#[test]
fn an_operators_removal_survives_admin_failovers_until_an_operators_add() {
    for seed in 0..20 {
        let config = Config {
            dead_voter_timeout_ms: 800,
            stabilization_time_ms: 200,
            min_quorum: 3,
            max_voters: 5,
            ..settings(4, true)
        };
        let mut d = Driver::new(cluster(seed, 4, 0, &config), &config);
        let admin = d.settle("bootstrap");
        let gone = (admin + 1 + seed as usize % 3) % 4;
        d.commit(remove_n(gone));
        let stays: Vec<usize> = (0..4).filter(|&i| i != gone).collect();
        d.run(10 * config.stabilization_time_ms);
        d.all_hold(&stays, "the removed node stays out");

        d.net.crash(admin);
        let next = d.settle("after the admin crashed");
        assert!(next != admin && next != gone, "seed {seed}");
        d.net.crash(gone);
        d.net.restart(gone);
        d.run(10 * config.stabilization_time_ms);
        d.net.restart(admin);
        d.run(10 * config.stabilization_time_ms);
        d.settle("everyone back");
        d.all_hold(&stays, "the removal survived the failover and a restart");
        let e = d.net.nodes[next].as_ref().unwrap().electorate().unwrap();
        assert_eq!(e.retired(), [n(gone)], "seed {seed}");

        d.commit(add_n(gone));
        d.run(config.heartbeat_interval_ms);
        d.all_hold(&[0, 1, 2, 3], "an operator added it back");
    }
}
