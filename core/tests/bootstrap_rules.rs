//! Bootstrap rules (`core/src/bootstrap.rs`) on a single core through the public API, written
//! for issue 15 (2026-11-23) ahead of the `cargo mutants` run over that file, which was cut
//! short (see `docs/mutants.md`): each test was seen to fail, for the rule's own reason, on the
//! mutant its doc comment names (the mutant's diff applied by hand) and to pass without it.
//! The network tests (`bootstrap.rs`) show that honest nodes agree; these pin the acceptor's
//! and proposer's checks that honest, timely messages never exercise.

use std::sync::Arc;

use chorus_core::{
    Ballot, Config, Core, Electorate, Event, Message, NodeId, PeerInfo, Refusal, ADMIN_ELECTION,
};

use crate::one_core;
use one_core::{from, refusals, sent_to};

fn cfg(expect: u32) -> Config {
    Config {
        bootstrap_expect: expect,
        ..Config::default()
    }
}

fn caps(eligible: bool) -> Vec<String> {
    if eligible {
        vec![ADMIN_ELECTION.to_owned()]
    } else {
        vec!["docker".to_owned()]
    }
}

/// A node that has never joined a cluster, expecting `expect`, started at t=0.
fn fresh(id: &str, expect: u32, eligible: bool) -> Core {
    let mut c = Core::new(id.into(), cfg(expect), caps(eligible), 7).unwrap();
    c.step_vec(0, Event::Started);
    c
}

fn up(peer: &str, eligible: bool) -> Event {
    Event::peer_up(
        peer.into(),
        PeerInfo {
            capabilities: caps(eligible).into(),
            ..Default::default()
        },
    )
}

fn ballot(round: u64, node: &str) -> Ballot {
    Ballot {
        round,
        node: node.into(),
    }
}

fn electorate(members: &[&str]) -> Arc<Electorate> {
    Arc::new(Electorate::new(
        1,
        members.iter().map(|m| NodeId::from(*m)).collect(),
    ))
}

/// Rule 2: only eligible nodes take part, as acceptors too. A worker asked to promise by an
/// eligible peer with its own settings refuses (`bootstrap_refused`, no promise), and is not
/// moved by an accept either.
///
/// Fails on `may_promise`: `!knows_a_cluster() && is_eligible()` → `||` (a worker promised;
/// the run caught it through the network tests too).
#[test]
fn a_worker_never_promises_or_accepts() {
    let mut w = fresh("w", 3, false);
    w.step_vec(0, up("b", true));
    let out = w.step_vec(
        1,
        from(
            "b",
            Message::BootstrapPrepare {
                ballot: ballot(1, "b"),
                expect: 3,
            },
        ),
    );
    assert!(
        matches!(
            sent_to(&out, "b").as_slice(),
            [Message::BootstrapRefused {
                promised: None,
                formed: false,
                ..
            }]
        ),
        "{out:?}"
    );
    let out = w.step_vec(
        2,
        from(
            "b",
            Message::BootstrapAccept {
                ballot: ballot(1, "b"),
                electorate: electorate(&["b", "c", "d"]),
            },
        ),
    );
    assert!(
        matches!(
            sent_to(&out, "b").as_slice(),
            [Message::BootstrapRefused { promised: None, .. }]
        ),
        "{out:?}"
    );
    assert!(w.electorate().is_none());
}

/// Rule 4, the receiving side: a node with no electorate adopts a chosen one only if it has
/// exactly `bootstrap_expect` members (else `settings_mismatch`); a node that has one ignores
/// another chosen electorate of its own cluster and refuses one of another cluster
/// (`foreign_cluster`).
///
/// Fails on `on_bootstrap_chosen`: `genesis !=` → `==` (the refusal given for its own cluster
/// instead of the foreign one) and `len() != expect` → `==` (not reached by the run).
#[test]
fn a_chosen_electorate_is_adopted_only_with_expect_members_and_never_over_one() {
    let mut c = fresh("a", 3, true);
    c.step_vec(0, up("b", true));
    let two = electorate(&["a", "b"]);
    let out = c.step_vec(1, from("b", Message::BootstrapChosen { electorate: two }));
    assert_eq!(
        refusals(&out),
        [(
            "b".into(),
            "bootstrap_chosen".into(),
            Refusal::SettingsMismatch
        )]
    );
    assert!(c.electorate().is_none());

    let three = electorate(&["a", "b", "c"]);
    let out = c.step_vec(
        2,
        from(
            "b",
            Message::BootstrapChosen {
                electorate: three.clone(),
            },
        ),
    );
    assert_eq!(refusals(&out), []);
    assert_eq!(c.electorate(), Some(&*three));

    // Its own cluster's chosen electorate again (a resend): nothing to say.
    let out = c.step_vec(
        3,
        from(
            "b",
            Message::BootstrapChosen {
                electorate: three.clone(),
            },
        ),
    );
    assert_eq!(refusals(&out), []);
    // Another cluster's: refused, and this node keeps its own.
    let other = electorate(&["b", "x", "y"]);
    assert_ne!(other.genesis, three.genesis);
    let out = c.step_vec(4, from("b", Message::BootstrapChosen { electorate: other }));
    assert_eq!(
        refusals(&out),
        [(
            "b".into(),
            "bootstrap_chosen".into(),
            Refusal::ForeignCluster
        )]
    );
    assert_eq!(c.electorate(), Some(&*three));
}

/// Rule 4, the proposer's count: a proposal is chosen once `bootstrap_expect` nodes accepted
/// *its value*. An `accepted` that comes before the value was sent (phase 1) or names another
/// ballot is refused and not counted, so it cannot make up the count.
///
/// Fails on `on_bootstrap_accepted`: the guard `p.ballot == ballot && p.value.is_some()` →
/// `true` or → `||` (not reached by the run).
#[test]
fn only_acceptances_of_the_proposed_value_count_towards_choosing_it() {
    let mut a = fresh("a", 3, true);
    a.step_vec(0, up("b", true));
    a.step_vec(0, up("c", true));
    let (at, timer) = a.next_deadline().expect("bootstrap armed");
    assert_eq!(timer, chorus_core::Timer::Bootstrap);
    let out = a.step_vec(at, Event::TimerFired { timer });
    let mine = ballot(1, "a");
    assert!(sent_to(&out, "b").contains(&&Message::BootstrapPrepare {
        ballot: mine.clone(),
        expect: 3
    }));
    let accepted = |b: &Ballot| Message::BootstrapAccepted { ballot: b.clone() };

    // Phase 1: b "accepted" a value a has not proposed yet.
    let out = a.step_vec(at + 1, from("b", accepted(&mine)));
    assert_eq!(
        refusals(&out),
        [("b".into(), "bootstrap_accepted".into(), Refusal::Stale)]
    );
    for p in ["b", "c"] {
        a.step_vec(
            at + 2,
            from(
                p,
                Message::BootstrapPromise {
                    ballot: mine.clone(),
                    accepted: None,
                },
            ),
        );
    }
    // Phase 2: an acceptance of another ballot.
    let out = a.step_vec(at + 3, from("b", accepted(&ballot(1, "b"))));
    assert_eq!(
        refusals(&out),
        [(
            "b".into(),
            "bootstrap_accepted".into(),
            Refusal::Unsolicited
        )]
    );
    // a's own acceptance and c's: two of three.
    a.step_vec(at + 4, from("c", accepted(&mine)));
    assert!(a.electorate().is_none(), "chosen with two acceptances");
    let out = a.step_vec(at + 5, from("b", accepted(&mine)));
    assert_eq!(
        a.electorate().map(|e| e.len()),
        Some(3),
        "chosen with three: {out:?}"
    );
}
