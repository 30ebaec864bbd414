//! Election rules that the first `cargo mutants` run over `core/src/election.rs` (issue 15,
//! 2026-11-23) found unchecked: each test was seen to fail, for the rule's own reason, on the
//! mutant its doc comment names (the mutant's diff applied by hand), and to pass once it was
//! reverted. "Kills" names survivors of the run; "fails on" names mutants the run caught
//! anyway or did not reach (tests written ahead of it). `docs/mutants.md` has the table.
//!
//! Only the public API is used, and every peer is an honest member of the electorate (known
//! through `PeerUp`, answering only what it was asked), as in `narrow_rules.rs`.

use chorus_core::{Command, Config, Core, Electorate, Event, Message, NodeId, PeerInfo, Role};
use chorus_core::{Notice, Refusal, Resources, Timer, ADMIN_ELECTION};

use crate::one_core;
use one_core::{from, refusals, stand, voter, voter_info, voter_with, win};

const MIN: u64 = 30_000;
const ABC: &[&str] = &["a", "b", "c"];

// ---- Rank ----------------------------------------------------------------------------------------

/// Rule 1 and the rank-biased delay: a node ranks itself only among the live peers that could
/// stand — eligible *and* in its electorate. A standby (eligible, not a voter) that outscores it
/// and a voter that does not advertise `admin_election` are both left out.
///
/// Kills `rank`: `!peer.eligible || !member` → `&&` (either kind of peer counted).
#[test]
fn rank_counts_only_eligible_members_of_the_electorate() {
    let mut a = voter("a", ABC);
    assert_eq!(a.rank(), (0, 3), "equal scores: a ranks first of a, b, c");
    let strong = Resources {
        cpu_millicores: 16_000,
        mem_free_mb: 65_536,
        ..Default::default()
    };
    // An eligible standby, outside the electorate, that outscores everyone.
    a.step_vec(
        1,
        Event::peer_up(
            "s".into(),
            PeerInfo {
                resources: strong,
                ..voter_info()
            },
        ),
    );
    assert!(a.peers()[&NodeId::from("s")].eligible());
    assert_eq!(a.rank(), (0, 3), "a standby is not ranked");
    // A member that does not advertise admin_election (it cannot stand) and outscores a.
    let mut b = voter("b", ABC);
    b.step_vec(
        1,
        Event::peer_up(
            "a".into(),
            PeerInfo {
                capabilities: vec!["docker".to_owned()].into(),
                resources: strong,
                ..Default::default()
            },
        ),
    );
    assert!(!b.peers()[&NodeId::from("a")].eligible());
    assert_eq!(b.rank(), (0, 2), "a member that cannot stand is not ranked");
}

fn strong() -> Resources {
    Resources {
        cpu_millicores: 16_000,
        mem_free_mb: 65_536,
        ..Default::default()
    }
}

fn pre_vote_req(c: &Core, term: u64) -> Message {
    let e = c.electorate().expect("electorate fixed");
    Message::PreVoteRequest {
        term,
        electorate_version: e.version,
        electorate_term: e.term,
        electorate_hash: e.fingerprint(),
        electorate_stamp: c.stamp(),
    }
}

/// The one pre-vote reply sent to `to` in `out`: (term, granted).
fn pre_vote_reply(out: &[Command], to: &str) -> (u64, bool) {
    let replies: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Send {
                to: t,
                msg: Message::PreVoteReply { term, granted },
            } if t.as_str() == to => Some((*term, *granted)),
            _ => None,
        })
        .collect();
    match replies.as_slice() {
        [one] => *one,
        other => panic!("expected one pre-vote reply to {to}, got {other:?} in {out:?}"),
    }
}

/// Rule 2: of two pre-candidates on one electorate, the lower-ranked stands back — by score
/// first, the node id only breaking ties. Here `b` outscores `a` although `a` has the lower id,
/// so `a` grants `b` its pre-vote and follows; `b` refuses `a`'s and goes on.
///
/// Kills `ranks_above`: `mine > theirs` → `mine < theirs` (the existing test has equal scores,
/// where only the id decides).
#[test]
fn of_two_pre_candidates_the_lower_score_stands_back_whatever_the_ids() {
    let mut a = voter("a", ABC);
    a.step_vec(
        0,
        Event::peer_up(
            "b".into(),
            PeerInfo {
                resources: strong(),
                ..voter_info()
            },
        ),
    );
    stand(&mut a);
    let out = a.step_vec(a.now_ms(), from("b", pre_vote_req(&a, 1)));
    assert_eq!(pre_vote_reply(&out, "b"), (1, true), "a stands back for b");
    assert_eq!(a.role(), Role::Follower);

    let mut b = Core::new(
        "b".into(),
        Config::default(),
        vec![ADMIN_ELECTION.to_owned()],
        42,
    )
    .unwrap();
    b.set_electorate_for_test(Electorate::new(1, vec!["a".into(), "b".into(), "c".into()]));
    b.step_vec(0, Event::Started);
    b.step_vec(
        0,
        Event::ResourcesSampled {
            resources: strong(),
        },
    );
    for p in ["a", "c"] {
        b.step_vec(0, Event::peer_up(p.into(), voter_info()));
    }
    assert!(b.score() > b.peers()[&NodeId::from("a")].score_at(0));
    stand(&mut b);
    let out = b.step_vec(b.now_ms(), from("a", pre_vote_req(&b, 1)));
    assert_eq!(pre_vote_reply(&out, "a"), (0, false), "b goes on");
    assert_eq!(b.role(), Role::PreCandidate);
}

// ---- The stand delay -----------------------------------------------------------------------------

/// Fires the discovery timer of a node that knows no admin and returns how long after that it
/// will stand (its election timer).
fn stand_delay(c: &mut Core) -> u64 {
    let (at, timer) = c.next_deadline().expect("discovery armed");
    assert_eq!(timer, Timer::Discovery);
    let out = c.step_vec(at, Event::TimerFired { timer });
    let stand_at = out
        .iter()
        .find_map(|cmd| match cmd {
            Command::SetTimer {
                timer: Timer::Election,
                at_ms,
            } => Some(*at_ms),
            _ => None,
        })
        .expect("the election timer is armed");
    stand_at - at
}

/// docs/design.md §4.4, Score: the window `[min, max]` is cut into one slot per live eligible voter, best
/// first, and a node draws its delay in the first quarter of its own slot. Five equal voters and
/// the default 15 s window: slots of 3 s, so node `i` stands `3 s × i` plus less than 750 ms
/// after its discovery timeout — and the draws are not all zero.
///
/// Kills the survivor `election_delay`: `width / 4` → `width % 4` (no jitter at all). Also
/// fails on `max − min` → `max + min` and `width / 4` → `width × 4`, which broader tests caught
/// in the run.
#[test]
fn each_voter_stands_in_the_first_quarter_of_its_rank_slot() {
    let members: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = members.iter().map(String::as_str).collect();
    let config = Config::default();
    let window = config.election_timeout_max_ms - config.election_timeout_min_ms;
    assert_eq!(window, 15_000);
    let width = window / 5;
    let mut jitters = Vec::new();
    for (rank, id) in refs.iter().enumerate() {
        let mut c = voter(id, &refs);
        assert_eq!(c.rank(), (rank, 5));
        let delay = stand_delay(&mut c);
        let start = rank as u64 * width;
        assert!(
            (start..start + width / 4).contains(&delay),
            "{id} (rank {rank}) stands {delay} ms after discovery, outside [{start}, {})",
            start + width / 4
        );
        jitters.push(delay - start);
    }
    assert!(
        jitters.iter().any(|j| *j > 0),
        "no jitter at all: {jitters:?}"
    );
}

/// With score bias off a node draws its delay uniformly from the whole window, both ends
/// included. A window of 1 ms: across twenty nodes both 0 and 1 are drawn.
///
/// Kills `election_delay`: `below(window + 1)` → `below(window − 1)` or `below(window × 1)`
/// (the window's end never drawn).
#[test]
fn without_score_bias_the_delay_covers_the_whole_window_ends_included() {
    let config = Config {
        score_bias: false,
        heartbeat_interval_ms: 50,
        election_timeout_min_ms: 150,
        election_timeout_max_ms: 151,
        discovery_timeout_ms: 100,
        ..Config::default()
    };
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..20 {
        let id = format!("n{i}");
        let mut c = voter_with(&id, &[id.as_str(), "x", "y"], config.clone());
        seen.insert(stand_delay(&mut c));
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [0, 1],
        "delays drawn from [0, 1]"
    );
}

// ---- Rounds that get no answer -------------------------------------------------------------------

const ABCDE: &[&str] = &["a", "b", "c", "d", "e"];

/// As [`stand`], returning the commands of the step in which the node stood.
fn stand_out(c: &mut Core) -> Vec<Command> {
    for _ in 0..8 {
        let (at, timer) = c.next_deadline().expect("a timer is armed");
        let out = c.step_vec(at, Event::TimerFired { timer });
        if c.role() == Role::PreCandidate {
            return out;
        }
    }
    panic!("{} never stood: {:?}", c.id(), c.role());
}

fn election_timer_at(out: &[Command]) -> Option<u64> {
    out.iter().rev().find_map(|cmd| match cmd {
        Command::SetTimer {
            timer: Timer::Election,
            at_ms,
        } => Some(*at_ms),
        _ => None,
    })
}

/// Rule 1 and the promise of rule 4, on the candidate itself: each phase of a round (pre-vote,
/// vote) falls back after exactly one maximum election timeout if it gets no majority, and a
/// candidate's vote for itself is a promise for one minimum election timeout — it grants no
/// pre-vote to another before that, and does once it has passed.
///
/// Kills the survivor `start_vote`: the fallback `now + max` → `now × max`. Also fails on
/// `start_pre_vote`'s fallback `now + max` → `now − max` / `now × max` and `start_vote`'s own
/// promise `now + min` → `now − min` / `now × min`, which broader tests caught in the run.
#[test]
fn each_round_phase_falls_back_after_a_maximum_timeout_and_the_candidate_promises_itself() {
    let max = Config::default().election_timeout_max_ms;
    let mut a = voter("a", ABCDE);
    let out = stand_out(&mut a);
    let pre_vote_at = a.now_ms();
    assert_eq!(election_timer_at(&out), Some(pre_vote_at + max), "{out:?}");

    // Two pre-votes (a majority of five with a's own): a stands for term 1 at `vote_at`.
    let vote_at = pre_vote_at + 20;
    let mut out = Vec::new();
    for v in ["b", "c"] {
        let granted = Message::PreVoteReply {
            term: 1,
            granted: true,
        };
        out.extend(a.step_vec(vote_at, from(v, granted)));
    }
    assert_eq!((a.role(), a.term()), (Role::Candidate, 1));
    assert_eq!(election_timer_at(&out), Some(vote_at + max), "{out:?}");

    // d stands for term 2 while a's round for term 1 is still open.
    let early = a.step_vec(vote_at + MIN - 1, from("d", pre_vote_req(&a, 2)));
    assert_eq!(
        pre_vote_reply(&early, "d"),
        (1, false),
        "a's promise to itself"
    );
    let late = a.step_vec(vote_at + MIN, from("d", pre_vote_req(&a, 2)));
    assert_eq!(
        pre_vote_reply(&late, "d"),
        (2, true),
        "the promise has run out"
    );
    assert_eq!(a.role(), Role::Candidate, "a pre-vote moves nothing");
}

// ---- Pre-vote ------------------------------------------------------------------------------------

fn heartbeat(term: u64) -> Message {
    Message::Heartbeat {
        term,
        beat: 1,
        membership_version: 1,
        genesis: 0,
        electorate: None,
        membership_term: 0,
        certified: 0,
    }
}

/// Rule 2: a voter says yes to a pre-vote only for a term *above* its own. A voter that learned
/// term 3 from an admin, whose promise to it has long run out, refuses a pre-vote for term 3
/// (the candidate would not raise the term) and grants one for term 4.
///
/// Fails on `on_pre_vote_request`: `term > self.term` → `term >= self.term` (written ahead:
/// the run stopped before this line).
#[test]
fn pre_vote_for_a_term_not_above_the_voters_is_refused() {
    let mut a = voter("a", ABC);
    a.step_vec(100, from("b", heartbeat(3)));
    assert_eq!(a.term(), 3);
    let at = 100 + 2 * MIN;
    let out = a.step_vec(at, from("c", pre_vote_req(&a, 3)));
    assert_eq!(pre_vote_reply(&out, "c"), (3, false));
    let out = a.step_vec(at, from("c", pre_vote_req(&a, 4)));
    assert_eq!(pre_vote_reply(&out, "c"), (4, true));
    assert_eq!(a.term(), 3, "a pre-vote moves no term");
}

/// A voter that refuses a pre-vote changes nothing, its election timer included: only a granted
/// pre-vote makes a follower wait a minimum election timeout for the candidate.
///
/// Fails on `on_pre_vote_request`: `granted && role == Follower` → `||` (a refusal re-armed
/// the follower's election timer; written ahead: the run stopped before this line).
#[test]
fn a_refused_pre_vote_does_not_touch_the_election_timer() {
    let mut a = voter("a", ABC);
    a.step_vec(100, from("b", heartbeat(1)));
    let before = a.next_deadline();
    // b's heartbeat promise is live: c is refused.
    let out = a.step_vec(200, from("c", pre_vote_req(&a, 2)));
    assert_eq!(pre_vote_reply(&out, "c"), (1, false));
    assert_eq!(election_timer_at(&out), None, "{out:?}");
    assert_eq!(a.next_deadline(), before);
}

/// A pre-candidate counts only the granted replies for its own round's term; one for another
/// term is refused and not counted — `stale` when below (a reply to an earlier round of its
/// own, an honest network's delay), `unsolicited` when above (never asked: a lying peer).
///
/// Kills `on_pre_vote_reply`: the guard `t == term` → `true`; the guard `term < t` → `true`,
/// `false`, `term == t` or `term > t` (the two refusals swapped).
#[test]
fn a_pre_vote_reply_for_another_term_is_not_counted_and_refused_for_what_it_is() {
    // Round for term 1 in {a, b, c}: one grant would win the pre-vote.
    let mut a = voter("a", ABC);
    stand(&mut a);
    let granted = |term| Message::PreVoteReply {
        term,
        granted: true,
    };
    let out = a.step_vec(a.now_ms(), from("b", granted(7)));
    assert_eq!(
        refusals(&out),
        [("b".into(), "pre_vote_reply".into(), Refusal::Unsolicited)]
    );
    assert_eq!((a.role(), a.term()), (Role::PreCandidate, 0), "not counted");

    // Round for term 2 (a learned term 1 from b, which then fell silent): a grant of term 1
    // is a late answer to an earlier round.
    let mut a = voter("a", ABC);
    a.step_vec(100, from("b", heartbeat(1)));
    stand(&mut a);
    assert_eq!(a.term(), 1);
    let out = a.step_vec(a.now_ms(), from("c", granted(1)));
    assert_eq!(
        refusals(&out),
        [("c".into(), "pre_vote_reply".into(), Refusal::Stale)]
    );
    assert_eq!((a.role(), a.term()), (Role::PreCandidate, 1), "not counted");
    // The grant for the round's own term is counted.
    a.step_vec(a.now_ms(), from("c", granted(2)));
    assert_eq!((a.role(), a.term()), (Role::Candidate, 2));
}

// ---- Vote ----------------------------------------------------------------------------------------

fn vote_req(c: &Core, term: u64) -> Message {
    let e = c.electorate().expect("electorate fixed");
    Message::VoteRequest {
        term,
        electorate_version: e.version,
        electorate_term: e.term,
        electorate_hash: e.fingerprint(),
        electorate_stamp: c.stamp(),
        transfer: false,
    }
}

/// The one vote reply sent to `to` in `out`: (term, granted, promise_ms).
fn vote_reply(out: &[Command], to: &str) -> (u64, bool, u64) {
    let replies: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Send {
                to: t,
                msg:
                    Message::VoteReply {
                        term,
                        granted,
                        promise_ms,
                    },
            } if t.as_str() == to => Some((*term, *granted, *promise_ms)),
            _ => None,
        })
        .collect();
    match replies.as_slice() {
        [one] => *one,
        other => panic!("expected one vote reply to {to}, got {other:?} in {out:?}"),
    }
}

fn voted(out: &[Command]) -> usize {
    out.iter()
        .filter(|c| matches!(c, Command::Notice(Notice::Voted { .. })))
        .count()
}

/// Rules 3 and 4: a vote is cast once. Granting it records it (`Voted`), promises the
/// candidate a minimum election timeout, and makes the voter wait that long before it suspects
/// the round failed. The same candidate asking again (a lost reply) gets the same answer, but
/// nothing is cast again: no second `Voted`, no new promise, no new timer.
///
/// Fails on `on_vote_request`: `granted && voted_for.is_none()` → `||` (the vote cast again);
/// the voter's election timer `now + min` → `now × min` (written ahead: not reached by the
/// run).
#[test]
fn a_vote_is_cast_once_and_the_voter_then_waits_a_minimum_timeout() {
    let mut a = voter("a", ABC);
    let out = a.step_vec(1_000, from("b", vote_req(&a, 1)));
    assert_eq!(vote_reply(&out, "b"), (1, true, MIN));
    assert_eq!(voted(&out), 1);
    assert_eq!(election_timer_at(&out), Some(1_000 + MIN), "{out:?}");

    let out = a.step_vec(2_000, from("b", vote_req(&a, 1)));
    assert_eq!(vote_reply(&out, "b"), (1, true, MIN), "the same answer");
    assert_eq!(voted(&out), 0, "the vote is not cast twice: {out:?}");
    assert_eq!(election_timer_at(&out), None, "{out:?}");
    // The promise still runs from the vote, not from the repeated request.
    let out = a.step_vec(1_000 + MIN, from("c", vote_req(&a, 2)));
    assert_eq!(vote_reply(&out, "c"), (2, true, MIN));
}

/// A candidate counts only the granted votes of its own term: a grant for an earlier term is a
/// late answer to an earlier round (`stale`), one for a later term was never asked for
/// (`unsolicited`); neither is counted.
///
/// Kills `on_vote_reply`: the guard `term < self.term` → `false` or `term > self.term`; the
/// guard `term > self.term` → `false` or `term < self.term` (a grant of another term counted).
#[test]
fn a_granted_vote_of_another_term_is_not_counted() {
    let granted = |term| Message::VoteReply {
        term,
        granted: true,
        promise_ms: MIN,
    };
    // A candidate for term 2 in {a, b, c} (it learned term 1 from b, which fell silent).
    let candidate = || {
        let mut a = voter("a", ABC);
        a.step_vec(100, from("b", heartbeat(1)));
        stand(&mut a);
        let now = a.now_ms();
        let pre_vote = Message::PreVoteReply {
            term: 2,
            granted: true,
        };
        a.step_vec(now, from("c", pre_vote));
        assert_eq!((a.role(), a.term()), (Role::Candidate, 2));
        a
    };
    for (term, reason) in [(1, Refusal::Stale), (3, Refusal::Unsolicited)] {
        let mut a = candidate();
        let out = a.step_vec(a.now_ms(), from("c", granted(term)));
        assert_eq!(
            refusals(&out),
            [("c".into(), "vote_reply".into(), reason)],
            "a grant of term {term}"
        );
        assert_eq!(
            (a.role(), a.term()),
            (Role::Candidate, 2),
            "term {term} counted"
        );
    }
    let mut a = candidate();
    a.step_vec(a.now_ms(), from("c", granted(2)));
    assert_eq!((a.role(), a.term()), (Role::Admin, 2));
}

// ---- When a node asks its peers again ------------------------------------------------------------

fn discovery_armed(out: &[Command]) -> bool {
    out.iter().any(|c| {
        matches!(
            c,
            Command::SetTimer {
                timer: Timer::Discovery,
                ..
            }
        )
    })
}

/// docs/design.md §4.2, Discovery: while no admin is known a node keeps asking its peers — after its own
/// round failed, it asks again (WHOAMI, discovery timer) as well as standing again. When the
/// admin it knew just went quiet it only stands: the members that have not suspected the admin
/// yet would still report it.
///
/// Fails on `on_election_timeout`: `(!can_stand || knew_none) && no discovery timer` with `!`
/// deleted, `||` → `&&`, or `&&` → `||` — all three caught by broader tests in the run; this
/// test pins the rule on its own.
#[test]
fn a_node_asks_its_peers_again_after_a_failed_round_but_not_when_its_admin_just_went_quiet() {
    // The admin b went quiet: a suspects it after its promise, and stands without asking.
    let mut a = voter("a", ABC);
    a.step_vec(100, from("b", heartbeat(1)));
    assert_eq!(a.admin(), Some(&NodeId::from("b")));
    let (at, timer) = a.next_deadline().unwrap();
    assert_eq!((at, timer), (100 + MIN, Timer::Election));
    let out = a.step_vec(at, Event::TimerFired { timer });
    assert_eq!(a.admin(), None);
    assert!(election_timer_at(&out).is_some(), "a stands: {out:?}");
    assert!(!discovery_armed(&out), "{out:?}");
    assert!(
        !out.iter().any(|c| matches!(
            c,
            Command::Send {
                msg: Message::Whoami { .. },
                ..
            }
        )),
        "{out:?}"
    );

    // a's own pre-vote round gets no answer: when it falls back, a asks again and stands again.
    stand(&mut a);
    let (at, timer) = a.next_deadline().unwrap();
    assert_eq!(timer, Timer::Election);
    let out = a.step_vec(at, Event::TimerFired { timer });
    assert_eq!(a.role(), Role::Follower);
    assert!(discovery_armed(&out), "{out:?}");
    assert!(election_timer_at(&out).is_some(), "{out:?}");
}

// ---- The admin's heartbeat rounds ----------------------------------------------------------------

/// Fires the admin's timers in deadline order up to its next heartbeat timer; returns that
/// step's commands.
fn heartbeat_timer(a: &mut Core) -> Vec<Command> {
    for _ in 0..4 {
        let (at, timer) = a.next_deadline().expect("a timer is armed");
        let out = a.step_vec(at, Event::TimerFired { timer });
        if timer == Timer::Heartbeat {
            return out;
        }
    }
    panic!("no heartbeat timer");
}

/// The admin keeps its eight most recent heartbeat rounds (`MAX_BEAT_ROUNDS`), so a voter's
/// acknowledgement of the eighth-newest still counts; an older one is refused as stale.
///
/// Fails on `send_heartbeat`: `beats.len() > MAX_BEAT_ROUNDS` → `>=` (seven rounds kept;
/// written ahead: not reached by the run).
#[test]
fn the_admin_counts_acks_of_its_eight_most_recent_heartbeats() {
    let config = Config {
        heartbeat_interval_ms: 1_000,
        ..Config::default()
    };
    let mut a = voter_with("a", ABC, config);
    win(&mut a, &["b"]);
    assert_eq!(a.beat(), 1, "the first heartbeat goes out with the win");
    for _ in 0..8 {
        heartbeat_timer(&mut a);
    }
    assert_eq!(a.beat(), 9);
    let ack = |beat| Message::HeartbeatAck {
        term: 1,
        beat,
        promise_ms: MIN,
        holds: false,
        endorsement: None,
        certified: 0,
    };
    // c has acknowledged nothing yet: its ack of beat 1 (nine rounds back) is too old …
    let out = a.step_vec(a.now_ms(), from("c", ack(1)));
    assert_eq!(
        refusals(&out),
        [("c".into(), "heartbeat_ack".into(), Refusal::Stale)]
    );
    // … its ack of beat 2 (eight rounds back) counts.
    let out = a.step_vec(a.now_ms(), from("c", ack(2)));
    assert_eq!(refusals(&out), [], "{out:?}");
}

/// An admin out of beats (the counter at the wire's limit, 2⁵³ − 1, which only a lying member
/// can bring about) sends no heartbeat but keeps its heartbeat timer one interval ahead, so
/// check-quorum retires it on time.
///
/// Fails on `send_heartbeat`: the timer `now + interval` → `now − interval` or
/// `now × interval` (written ahead: not reached by the run).
#[test]
fn an_admin_out_of_beats_sends_nothing_and_rearms_its_heartbeat_timer() {
    let mut a = voter("a", ABC);
    let hb = Message::Heartbeat {
        term: 1,
        beat: chorus_core::MAX_WIRE_INT - 1,
        membership_version: 1,
        genesis: 0,
        electorate: None,
        membership_term: 0,
        certified: 0,
    };
    a.step_vec(100, from("b", hb));
    win(&mut a, &["c"]);
    assert_eq!((a.term(), a.beat()), (2, chorus_core::MAX_WIRE_INT));
    let out = heartbeat_timer(&mut a);
    let now = a.now_ms();
    assert!(
        !out.iter().any(|c| matches!(c, Command::Broadcast { .. })),
        "{out:?}"
    );
    assert!(
        out.contains(&Command::SetTimer {
            timer: Timer::Heartbeat,
            at_ms: now + Config::default().heartbeat_interval_ms,
        }),
        "{out:?}"
    );
}

/// An admin that steps down (here by check-quorum: no voter acknowledged it for a maximum
/// election timeout) waits a minimum election timeout before it may stand again, like any
/// follower whose admin went quiet.
///
/// Kills `step_down`: the suspect timer `now + election_timeout_min_ms` → `now * …`.
#[test]
fn an_admin_that_steps_down_suspects_again_after_a_minimum_timeout() {
    let mut a = voter("a", ABC);
    win(&mut a, &["b"]);
    for _ in 0..64 {
        let (at, timer) = a.next_deadline().expect("a timer is armed");
        let out = a.step_vec(at, Event::TimerFired { timer });
        let stepped = out
            .iter()
            .any(|c| matches!(c, Command::Notice(Notice::SteppedDown { .. })));
        if stepped {
            assert_eq!(a.role(), Role::Follower);
            assert!(
                out.contains(&Command::SetTimer {
                    timer: Timer::Election,
                    at_ms: at + MIN,
                }),
                "{out:?}"
            );
            return;
        }
    }
    panic!("the admin never stepped down without acks");
}

// ---- Positions -----------------------------------------------------------------------------------

/// Voter c of {a, b, c} that followed the admin of term 3 onto version 2 = {a, b, c, d}
/// (proposed in term 1): its position is (stamp 3, version 2). Its promise to that admin has
/// run out by [`LATER`].
fn at_stamp_3_version_2() -> (Core, Electorate) {
    let mut c = voter("c", ABC);
    let v1 = c.electorate().unwrap().clone();
    let v2 = v1.successor(1, ["a", "b", "c", "d"].map(NodeId::from).to_vec());
    let carrying = Message::Heartbeat {
        term: 3,
        beat: 1,
        membership_version: 2,
        genesis: v1.genesis,
        electorate: Some(std::sync::Arc::new(v2.clone())),
        membership_term: v2.term,
        certified: 0,
    };
    c.step_vec(10, from("a", carrying));
    assert_eq!((c.electorate(), c.stamp(), c.term()), (Some(&v2), 3, 3));
    (c, v2)
}

const LATER: u64 = 10 + 2 * MIN;

/// Electorates at every position the table needs, of c's cluster: `(stamp, electorate)`.
fn positions(v2: &Electorate) -> Vec<(u64, Electorate, bool)> {
    let members = |names: &[&str]| names.iter().map(|n| NodeId::from(*n)).collect::<Vec<_>>();
    let v1 = Electorate::new(1, members(ABC));
    // Version 2 proposed in another term (a sibling of c's, never committed), and versions 3
    // and 4 built on it by the admin of term 2.
    let sibling = v1.successor(2, members(&["a", "b", "c", "e"]));
    let v3_of_term_2 = sibling.successor(2, members(&["a", "b", "c", "e", "f"]));
    let v4_of_term_2 = v3_of_term_2.successor(2, members(&["a", "b", "c", "f"]));
    let v3_of_term_3 = v2.successor(3, members(ABC));
    // (stamp, electorate, whether it is at least c's (3, 2) — the same electorate if equal).
    vec![
        // A later stamp wins whatever the version (version-first says older).
        (4, v1.clone(), true),
        (4, sibling.clone(), true),
        (5, v1.clone(), true),
        // An earlier stamp loses whatever the version (version-first says later).
        (2, v3_of_term_2.clone(), false),
        (2, v4_of_term_2, false),
        (0, v3_of_term_2, false),
        // The same stamp: the version decides; at the same version, only the same electorate.
        (3, v3_of_term_3, true),
        (3, v1, false),
        (3, v2.clone(), true),
        (3, sibling, false),
    ]
}

/// Positions are ordered by stamp first, then version — Raft's (last log term, last index) —
/// not by version first (the order issue 32 replaced, under which a candidate on an
/// uncommitted sibling of an older term outranked the majority that held a newer term's
/// electorate, and two admins of one term were elected). Voter c at (3, 2) grants a (pre-)vote
/// for term 5 to a member whose position is later and refuses one whose position is earlier,
/// for every pair where the two orders disagree and a few where they agree.
///
/// Fails on `may_support` comparing `(version, stamp)` with `(self version, self stamp)`.
#[test]
fn a_voter_orders_positions_by_stamp_before_version() {
    let (c, v2) = at_stamp_3_version_2();
    for (stamp, e, later) in positions(&v2) {
        let row = format!("position ({stamp}, {}) of term {}", e.version, e.term);
        let pre_vote = Message::PreVoteRequest {
            term: 5,
            electorate_version: e.version,
            electorate_term: e.term,
            electorate_hash: e.fingerprint(),
            electorate_stamp: stamp,
        };
        let out = c.clone().step_vec(LATER, from("b", pre_vote));
        assert_eq!(pre_vote_reply(&out, "b").1, later, "pre-vote for {row}");
        let vote = Message::VoteRequest {
            term: 5,
            electorate_version: e.version,
            electorate_term: e.term,
            electorate_hash: e.fingerprint(),
            electorate_stamp: stamp,
            transfer: false,
        };
        let out = c.clone().step_vec(LATER, from("b", vote));
        assert_eq!(vote_reply(&out, "b").1, later, "vote for {row}");
    }
}

/// The same order where a member hands c an electorate (rule 5's second half, a `whoami`
/// reply): taken only at a later position by stamp first, so an electorate of a later version
/// but an older stamp is not taken and one of an older version but a later stamp is.
///
/// Fails on `take_later_position` comparing `(version, stamp)` with `(self version, self
/// stamp)`.
#[test]
fn a_member_hands_over_only_a_position_later_by_stamp_before_version() {
    let (c, v2) = at_stamp_3_version_2();
    for (stamp, e, later) in positions(&v2) {
        let row = format!("position ({stamp}, {}) of term {}", e.version, e.term);
        let reply = Message::WhoamiReply {
            admin: None,
            term: 5,
            membership_version: e.version,
            beat: 1,
            uptime_s: 0,
            resources: Default::default(),
            eligible: true,
            electorate: Some(std::sync::Arc::new(e.clone())),
            genesis: e.genesis,
            electorate_stamp: stamp,
        };
        let mut c = c.clone();
        let out = c.step_vec(LATER, from("b", reply));
        assert_eq!(refusals(&out), [], "{row}");
        let taken = if later { (&e, stamp) } else { (&v2, 3) };
        assert_eq!(
            (c.electorate().unwrap(), c.stamp()),
            taken,
            "{row}: {}",
            if later { "taken" } else { "not taken" }
        );
    }
}

/// The same order where an eligible peer outside c's electorate asks for a (pre-)vote: it is
/// heard only when it names a position later than c's by stamp first (a member added by a
/// change c missed, rule 6), and refused as `not_member` otherwise — also at c's own position.
///
/// Fails on `may_be_a_newer_member` (`trust.rs`) comparing `(version, stamp)` with `(self
/// version, self stamp)`.
#[test]
fn an_eligible_stranger_is_heard_only_at_a_later_position_by_stamp_before_version() {
    let (mut c, v2) = at_stamp_3_version_2();
    c.step_vec(LATER - 1, Event::peer_up("s".into(), voter_info()));
    for (stamp, e, later) in positions(&v2) {
        let row = format!("position ({stamp}, {}) of term {}", e.version, e.term);
        let strictly_later = later && (stamp, &e) != (3, &v2);
        let pre_vote = Message::PreVoteRequest {
            term: 5,
            electorate_version: e.version,
            electorate_term: e.term,
            electorate_hash: e.fingerprint(),
            electorate_stamp: stamp,
        };
        let out = c.clone().step_vec(LATER, from("s", pre_vote));
        if strictly_later {
            assert_eq!(refusals(&out), [], "{row}");
            assert_eq!(pre_vote_reply(&out, "s"), (5, true), "{row}");
        } else {
            assert_eq!(
                refusals(&out),
                [(
                    "s".to_owned(),
                    "pre_vote_request".to_owned(),
                    Refusal::NotMember
                )],
                "{row}"
            );
        }
    }
}

/// The same order between two pre-candidates: c, standing at (3, 2), stands back for one on a
/// later position by stamp first (granting its pre-vote) and goes on against one on an earlier
/// position, whatever their versions.
///
/// Fails on the pre-candidates' comparison in `on_pre_vote_request` taking `(version, stamp)`.
#[test]
fn a_pre_candidate_stands_back_only_for_a_later_position_by_stamp_before_version() {
    let (mut c, v2) = at_stamp_3_version_2();
    stand(&mut c);
    assert_eq!((c.stamp(), c.term()), (3, 3));
    for (stamp, e, later) in positions(&v2) {
        if (stamp, e.version) == (3, 2) {
            continue; // the same position: rank decides (tested above)
        }
        let row = format!("position ({stamp}, {}) of term {}", e.version, e.term);
        let pre_vote = Message::PreVoteRequest {
            term: 5,
            electorate_version: e.version,
            electorate_term: e.term,
            electorate_hash: e.fingerprint(),
            electorate_stamp: stamp,
        };
        let mut c = c.clone();
        let out = c.step_vec(c.now_ms(), from("b", pre_vote));
        let (granted, role) = (pre_vote_reply(&out, "b").1, c.role());
        if later {
            assert_eq!(
                (granted, role),
                (true, Role::Follower),
                "{row}: stands back"
            );
        } else {
            assert_eq!(
                (granted, role),
                (false, Role::PreCandidate),
                "{row}: goes on"
            );
        }
    }
}
