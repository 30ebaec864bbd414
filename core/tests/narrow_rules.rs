//! Narrow election rules, each tested where no broader rule can refuse in its place.
//!
//! Every test here was written against a hand-made mutant of `chorus-core` that the rule tests
//! next to the code let survive (issue 15), and was seen to fail on it:
//!
//! | rule (docs/design.md §4) | mutant it kills |
//! |---|---|
//! | one vote per voter per term, after the promise has expired | `Some(v) => *v == from` → any |
//! | vote requests for a stale term are refused | the `term < self.term` check dropped |
//! | a won lease is measured from the vote round's start | measured from the win |
//! | a restarted voter grants nothing for a minimum election timeout | `on_started` keeps no promise |
//!
//! and pins the boundaries of the lease timer and check-quorum, which each hung on one test.
//!
//! Only the public API is used, and every peer is an honest member of the electorate (known
//! through `PeerUp`, answering only what it was asked), so the tests stay valid under the
//! hostile-peer hardening of the core.

use chorus_core::{
    Command, Config, Core, Electorate, Event, Message, NodeId, Notice, Role, StepDownReason, Timer,
    ADMIN_ELECTION,
};

use crate::one_core;
use one_core::{connect, from, stand, voter_with};

const MIN: u64 = 30_000;
const ABC: &[&str] = &["a", "b", "c"];
const ABCDE: &[&str] = &["a", "b", "c", "d", "e"];

/// An eligible node of electorate `members`, started at t=0 and connected to every other member.
fn voter(id: &str, members: &[&str]) -> Core {
    let config = Config::default();
    assert_eq!(config.election_timeout_min_ms, MIN);
    voter_with(id, members, config)
}

fn vote_req(c: &Core, term: u64) -> Message {
    let e = c.electorate().expect("electorate fixed");
    Message::VoteRequest {
        term,
        electorate_version: e.version,
        electorate_hash: e.fingerprint(),
        electorate_term: 0,
        electorate_stamp: 0,
        transfer: false,
    }
}

/// The one vote reply sent to `to` in `out`: (term, granted).
fn vote_reply(out: &[Command], to: &str) -> (u64, bool) {
    let replies: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Send {
                to: t,
                msg: Message::VoteReply { term, granted, .. },
            } if t.as_str() == to => Some((*term, *granted)),
            _ => None,
        })
        .collect();
    match replies.as_slice() {
        [one] => *one,
        other => panic!("expected one vote reply to {to}, got {other:?} in {out:?}"),
    }
}

fn voted(out: &[Command]) -> Vec<(u64, String)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Notice(Notice::Voted { term, candidate }) => {
                Some((*term, candidate.as_str().to_owned()))
            }
            _ => None,
        })
        .collect()
}

// ---- One vote per term ---------------------------------------------------------------------------

/// Rule 3 on its own: once the promise to `b` has expired, no promise refuses `c` any more; only
/// the vote already cast in term 1 does. (The vote is refused on the wire, and no second `Voted`
/// is reported: a core that granted here but reported once would be invisible to any checker
/// that reads notices.)
#[test]
fn second_candidate_refused_in_the_same_term_after_the_promise_expired() {
    let mut a = voter("a", ABC);
    let out = a.step_vec(10, from("b", vote_req(&a, 1)));
    assert_eq!(vote_reply(&out, "b"), (1, true));
    assert_eq!(voted(&out), [(1, "b".to_owned())]);

    for at in [10 + MIN, 10 + MIN + 1, 10 + 5 * MIN] {
        let out = a.step_vec(at, from("c", vote_req(&a, 1)));
        assert_eq!(
            vote_reply(&out, "c"),
            (1, false),
            "a second vote in term 1 at t={at}, promise to b long expired"
        );
        assert!(voted(&out).is_empty());
    }
    assert_eq!(a.voted_for().map(NodeId::as_str), Some("b"));
    // The same candidate asking again (a lost reply) still gets its vote: the rule is about
    // candidates, not requests.
    let out = a.step_vec(10 + 5 * MIN, from("b", vote_req(&a, 1)));
    assert_eq!(vote_reply(&out, "b"), (1, true));
}

// ---- Stale terms ---------------------------------------------------------------------------------

/// A vote request for a term below the voter's is refused, with the voter's term in the reply,
/// even where neither a promise nor an earlier vote would refuse it.
#[test]
fn vote_request_for_a_stale_term_refused_by_the_term_alone() {
    // 1. Delayed on the wire: b asked for term 2, then for term 3 (granted); the term-2 request
    //    arrives late, after the promise to b has expired. b is the candidate a voted for, so
    //    only the term refuses it.
    let mut a = voter("a", ABC);
    let out = a.step_vec(10, from("b", vote_req(&a, 3)));
    assert_eq!(vote_reply(&out, "b"), (3, true));
    let out = a.step_vec(10 + MIN + 1, from("b", vote_req(&a, 2)));
    assert_eq!(vote_reply(&out, "b"), (3, false), "stale request from b");
    assert!(voted(&out).is_empty());

    // 2. A voter that learned term 3 from the elected admin's heartbeat and cast no vote in it
    //    (it missed the election): once the admin falls silent, c's old term-2 request arrives.
    let mut a = voter("a", ABCDE);
    a.step_vec(
        100,
        from(
            "b",
            Message::Heartbeat {
                term: 3,
                beat: 1,
                membership_version: 1,
                genesis: 0,
                electorate: None,
                membership_term: 0,
                certified: 0,
            },
        ),
    );
    assert_eq!((a.term(), a.voted_for()), (3, None));
    let out = a.step_vec(100 + MIN + 1, from("c", vote_req(&a, 2)));
    assert_eq!(vote_reply(&out, "c"), (3, false), "stale request from c");
    assert!(voted(&out).is_empty());
    assert_eq!((a.term(), a.voted_for()), (3, None));
}

// ---- The lease of a won election ---------------------------------------------------------------

/// Every granting voter promised when the request reached it, at or after the vote round
/// started, so the lease counts from the round's start, never from the (later) win. Replies here
/// arrive well after the requests left, as they do on a real network.
#[test]
fn lease_of_a_won_election_counts_from_the_vote_round_start_not_the_win() {
    let mut a = voter("a", ABCDE);
    stand(&mut a);
    let pre_vote_at = a.now_ms();
    // The pre-votes come back 40 ms later: the vote round starts then.
    let round_start = pre_vote_at + 40;
    for v in ["b", "c"] {
        a.step_vec(
            round_start,
            from(
                v,
                Message::PreVoteReply {
                    term: 1,
                    granted: true,
                },
            ),
        );
    }
    assert_eq!((a.role(), a.term()), (Role::Candidate, 1));
    // The votes come back 250 ms after the round started.
    let won_at = round_start + 250;
    let mut outs = Vec::new();
    for v in ["b", "c"] {
        outs.extend(a.step_vec(
            won_at,
            from(
                v,
                Message::VoteReply {
                    term: 1,
                    granted: true,
                    promise_ms: 30_000,
                },
            ),
        ));
    }
    assert_eq!(a.role(), Role::Admin);
    let lease_ms = a.config().lease_ms();
    let expected = round_start + lease_ms;
    assert!(outs.contains(&Command::Notice(Notice::BecameAdmin {
        term: 1,
        lease_until_ms: expected,
    })));
    assert_eq!(a.lease_until_ms(), Some(expected));
    assert!(a.holds_lease(expected - 1));
    assert!(
        !a.holds_lease(expected),
        "the lease ends at round start + lease"
    );
    assert!(
        outs.contains(&Command::SetTimer {
            timer: Timer::Lease,
            at_ms: expected,
        }),
        "the lease timer matches the lease: {outs:?}"
    );
}

// ---- Restarts ------------------------------------------------------------------------------------

/// A restarted voter makes a fresh promise: whatever it acknowledged before the crash may not be
/// in its log yet, so for a full minimum election timeout after the restart it grants no vote —
/// even when every promise it made before the crash has long expired.
#[test]
fn restarted_voter_grants_no_vote_for_a_minimum_timeout_after_restart() {
    let mut a = voter("a", ABC);
    let out = a.step_vec(10, from("b", vote_req(&a, 1)));
    assert_eq!(vote_reply(&out, "b"), (1, true));
    // Crash, and come back long after the promise to b ran out. The restarted process replays
    // its log (here: keeps the state) and starts.
    let restart_at = 10 + 3 * MIN;
    a.step_vec(restart_at - 1, Event::Shutdown);
    a.step_vec(restart_at, Event::Started);
    connect(&mut a, restart_at, ABC);
    assert_eq!(
        (a.term(), a.voted_for().map(NodeId::as_str)),
        (1, Some("b"))
    );
    for at in [restart_at, restart_at + 1, restart_at + MIN - 1] {
        let out = a.step_vec(at, from("c", vote_req(&a, 2)));
        assert_eq!(
            vote_reply(&out, "c"),
            (1, false),
            "vote granted {} ms after a restart",
            at - restart_at
        );
        assert!(voted(&out).is_empty());
    }
    // The fresh promise names nobody: not even the candidate voted for before the crash.
    let out = a.step_vec(restart_at + MIN - 1, from("b", vote_req(&a, 2)));
    assert_eq!(vote_reply(&out, "b"), (1, false));
    let out = a.step_vec(restart_at + MIN, from("c", vote_req(&a, 2)));
    assert_eq!(vote_reply(&out, "c"), (2, true));
    assert_eq!(voted(&out), [(2, "c".to_owned())]);
}

/// The same through a crash without a clean shutdown: a fresh core replays the event log with
/// the original times, then starts.
#[test]
fn restart_from_the_replayed_log_renews_the_promise() {
    let mut log: Vec<(u64, Event)> = Vec::new();
    let mut a = voter("a", ABC);
    let req = vote_req(&a, 1);
    log.push((10, from("b", req.clone())));
    a.step_vec(10, from("b", req));

    let mut b = Core::new(
        "a".into(),
        Config::default(),
        vec![ADMIN_ELECTION.into()],
        42,
    )
    .unwrap();
    b.set_electorate_for_test(Electorate::new(
        1,
        ABC.iter().map(|m| NodeId::from(*m)).collect(),
    ));
    b.step_vec(0, Event::Started);
    for (t, e) in log {
        b.step_vec(t, e);
    }
    let restart_at = 10 + 2 * MIN;
    b.step_vec(restart_at, Event::Started);
    connect(&mut b, restart_at, ABC);
    let out = b.step_vec(restart_at + MIN / 2, from("c", vote_req(&b, 2)));
    assert_eq!(vote_reply(&out, "c"), (1, false));
    let out = b.step_vec(restart_at + MIN, from("c", vote_req(&b, 2)));
    assert_eq!(vote_reply(&out, "c"), (2, true));
}

// ---- Lease timer and check-quorum boundaries ----------------------------------------------------

/// Check-quorum counts from the send time of the newest heartbeat a majority acknowledged (not
/// from the win, not from when the acknowledgement arrived), and fires at exactly a maximum
/// election timeout after it; the lease from that heartbeat ends at exactly its send time plus
/// the lease, and the lease timer says so at that instant.
#[test]
fn check_quorum_and_lease_count_from_the_acknowledged_heartbeat_send_time() {
    // Heartbeats every 9 s: the 6th after the win lands exactly on the check-quorum deadline.
    let config = Config {
        heartbeat_interval_ms: 9_000,
        election_timeout_min_ms: 30_000,
        election_timeout_max_ms: 45_000,
        ..Config::default()
    };
    let mut a = voter_with("a", ABC, config.clone());
    stand(&mut a);
    let won_at = a.now_ms();
    for msg in [
        Message::PreVoteReply {
            term: 1,
            granted: true,
        },
        Message::VoteReply {
            term: 1,
            granted: true,
            promise_ms: 30_000,
        },
    ] {
        a.step_vec(won_at, from("b", msg));
    }
    assert_eq!(a.role(), Role::Admin);

    // The first timed heartbeat; b acknowledges it 2 s late.
    let (sent_at, timer) = a.next_deadline().unwrap();
    assert_eq!((sent_at, timer), (won_at + 9_000, Timer::Heartbeat));
    let out = a.step_vec(sent_at, Event::TimerFired { timer });
    let beat = out
        .iter()
        .find_map(|c| match c {
            Command::Broadcast {
                msg: Message::Heartbeat { beat, .. },
            } => Some(*beat),
            _ => None,
        })
        .expect("a heartbeat");
    let out = a.step_vec(
        sent_at + 2_000,
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
    let lease_end = sent_at + config.lease_ms();
    assert!(
        out.contains(&Command::Notice(Notice::LeaseRenewed {
            term: 1,
            lease_until_ms: lease_end,
        })),
        "lease from the heartbeat's send time: {out:?}"
    );

    // No more acknowledgements: fire every timer in order and note what happens when.
    let quorum_deadline = sent_at + config.election_timeout_max_ms;
    let mut expired_at = None;
    let mut stepped_down_at = None;
    for _ in 0..20 {
        let Some((at, timer)) = a.next_deadline() else {
            break;
        };
        if at > quorum_deadline + config.heartbeat_interval_ms {
            break;
        }
        let out = a.step_vec(at, Event::TimerFired { timer });
        if out.contains(&Command::Notice(Notice::LeaseExpired { term: 1 })) {
            expired_at.get_or_insert(at);
        }
        if out.contains(&Command::Notice(Notice::SteppedDown {
            term: 1,
            reason: StepDownReason::CheckQuorum,
        })) {
            stepped_down_at = Some(at);
            break;
        }
        if a.role() == Role::Admin {
            assert_eq!(a.holds_lease(at), at < lease_end, "duties at {at}");
        }
    }
    assert_eq!(
        expired_at,
        Some(lease_end),
        "the lease timer fires at the lease end"
    );
    assert!(!a.holds_lease(lease_end));
    assert_eq!(
        stepped_down_at,
        Some(quorum_deadline),
        "check-quorum: a full maximum timeout after the acknowledged heartbeat left \
         (won at {won_at}, heartbeat sent at {sent_at})"
    );
}
