//! The core test network judges vote safety from the wire: a node that grants two candidates a
//! vote in one term but reports only one `Voted` notice is caught.

use crate::support;

use chorus_core::{Command, Config, Core, Electorate, Event, Message, NodeId, Notice};
use support::{fast_config, Net, VoteLedger};

fn granted(to: &str, term: u64) -> Command {
    Command::Send {
        to: to.into(),
        msg: Message::VoteReply {
            term,
            granted: true,
            promise_ms: 30_000,
        },
    }
}

fn voted(term: u64, candidate: &str) -> Command {
    Command::Notice(Notice::Voted {
        term,
        candidate: candidate.into(),
    })
}

#[test]
fn ledger_catches_a_second_grant_that_was_never_reported() {
    let a = NodeId::from("a");
    let mut ledger = VoteLedger::default();
    // The honest first vote: notice and reply.
    for c in [voted(1, "b"), granted("b", 1)] {
        ledger.observe(&a, &c).unwrap();
    }
    // A lost reply re-requested: the same candidate again is fine; a refusal is no vote.
    ledger.observe(&a, &granted("b", 1)).unwrap();
    let refused = Command::Send {
        to: "c".into(),
        msg: Message::VoteReply {
            term: 1,
            granted: false,
            promise_ms: 0,
        },
    };
    ledger.observe(&a, &refused).unwrap();
    // A different term is a different vote.
    ledger.observe(&a, &granted("c", 2)).unwrap();
    // The lie: a second grant in term 1, with no notice at all.
    let err = ledger.observe(&a, &granted("c", 1)).unwrap_err();
    assert!(err.contains("to b and to c"), "{err}");
}

#[test]
fn ledger_counts_a_candidates_own_vote() {
    let a = NodeId::from("a");
    let mut ledger = VoteLedger::default();
    ledger.observe(&a, &voted(3, "a")).unwrap();
    assert!(ledger.observe(&a, &granted("b", 3)).is_err());
    // Another node's notice for someone else carries no vote of its own: only the wire does.
    ledger.observe(&a, &voted(4, "b")).unwrap();
    ledger.observe(&a, &granted("c", 4)).unwrap();
}

/// A test double for a broken core: a real voter, whose second-candidate refusal is rewritten
/// into a grant on the wire while its notices stay honest.
#[test]
fn ledger_catches_a_double_that_grants_twice_and_reports_once() {
    let mut core = Core::new(
        "a".into(),
        Config::default(),
        vec![chorus_core::ADMIN_ELECTION.into()],
        1,
    )
    .unwrap();
    core.set_electorate_for_test(Electorate::new(
        1,
        ["a", "b", "c"].into_iter().map(NodeId::from).collect(),
    ));
    core.step_vec(0, Event::Started);
    let e = core.electorate().unwrap();
    let req = Message::VoteRequest {
        term: 1,
        electorate_version: e.version,
        electorate_hash: e.fingerprint(),
        electorate_term: 0,
        electorate_stamp: 0,
        transfer: false,
    };
    let lie = |out: Vec<Command>| -> Vec<Command> {
        out.into_iter()
            .map(|c| match c {
                Command::Send {
                    to,
                    msg: Message::VoteReply { term, .. },
                } => Command::Send {
                    to,
                    msg: Message::VoteReply {
                        term,
                        granted: true,
                        promise_ms: 30_000,
                    },
                },
                c => c,
            })
            .collect()
    };
    let mut ledger = VoteLedger::default();
    let mut notices = 0;
    let mut verdict = Ok(());
    for (t, candidate) in [(10, "b"), (20, "c")] {
        let out = lie(core.step_vec(
            t,
            Event::Message {
                from: candidate.into(),
                msg: req.clone(),
            },
        ));
        notices += out
            .iter()
            .filter(|c| matches!(c, Command::Notice(Notice::Voted { .. })))
            .count();
        for c in &out {
            verdict = verdict.and(ledger.observe(core.id(), c));
        }
    }
    assert_eq!(notices, 1, "the double reports one vote");
    assert!(verdict.is_err(), "and the ledger sees two on the wire");
}

/// The network feeds every command through the ledger: an ordinary election records votes.
#[test]
fn network_records_the_votes_it_sees_on_the_wire() {
    let mut net = Net::new(5, 5, fast_config());
    net.run_until(2_000);
    assert!(net.agreed_admin().is_some());
    assert!(
        net.votes.len() >= 3,
        "a 5-voter election needs 3 votes: {}",
        net.votes.len()
    );
}
