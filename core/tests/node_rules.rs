//! Rules of the step loop itself (`node.rs`), on one core driven by hand: a stopped node is
//! inert, and what the runtime samples (slots, capabilities) reaches the admin as it changes.

use crate::one_core;

use chorus_core::{
    Command, Config, Core, Event, Message, Resources, ADMIN_ELECTION, MAX_CAPABILITIES,
};
use one_core::{from, heartbeat, sent_to, voter, voter_info};

const MEMBERS: [&str; 3] = ["a", "b", "c"];

fn slots(n: u32) -> Event {
    Event::ResourcesSampled {
        resources: Resources {
            task_slots: n,
            ..Default::default()
        },
    }
}

fn reports(out: &[Command], to: &str) -> Vec<u32> {
    sent_to(out, to)
        .into_iter()
        .filter_map(|m| match m {
            Message::WorkerReport { slots, .. } => Some(*slots),
            _ => None,
        })
        .collect()
}

/// A node that shut down acts on nothing until it starts again: no message is answered, no
/// peer is taken in, no timer runs (only `Started` and an operator's forced recovery count).
///
/// Fails on `step`: the match guard `!self.running` → `false`.
#[test]
fn a_stopped_node_answers_nothing_and_takes_in_no_peer() {
    let mut a = voter("a", &MEMBERS);
    a.step_vec(10, Event::Shutdown);
    let peers = a.peers().len();
    let vote = Message::VoteRequest {
        term: 5,
        electorate_version: 1,
        electorate_term: 0,
        electorate_hash: 0,
        electorate_stamp: 0,
        transfer: false,
    };
    for (t, ev) in [
        (20, from("b", vote)),
        (
            30,
            from(
                "b",
                Message::Whoami {
                    electorate_version: 0,
                    electorate_term: 0,
                    electorate_stamp: 0,
                },
            ),
        ),
        (40, Event::peer_up("d".into(), voter_info())),
        (50, Event::PeerDown { peer: "b".into() }),
    ] {
        let out = a.step_vec(t, ev);
        assert!(out.is_empty(), "a stopped node acted at {t}: {out:?}");
    }
    assert_eq!(a.term(), 0, "no term adopted while stopped");
    assert_eq!(
        a.peers().len(),
        peers,
        "the peer table unchanged while stopped"
    );
    // Started again, it answers.
    a.step_vec(60, Event::Started);
    let out = a.step_vec(
        70,
        from(
            "b",
            Message::Whoami {
                electorate_version: 0,
                electorate_term: 0,
                electorate_stamp: 0,
            },
        ),
    );
    assert!(!sent_to(&out, "b").is_empty(), "a running node answers");
}

/// A worker's slots reach its admin when they change — at once, not at the next periodic
/// report — and a sample that changes nothing sends nothing.
///
/// Fails on `step`: `resources.task_slots != self.resources.task_slots` → `==`.
#[test]
fn a_change_of_slots_is_reported_to_the_admin_at_once_and_no_change_is_not() {
    let mut a = voter("a", &MEMBERS);
    a.step_vec(5, slots(2));
    let out = a.step_vec(10, from("b", heartbeat(1, 1)));
    assert_eq!(a.admin().map(|n| n.as_str()), Some("b"));
    assert_eq!(reports(&out, "b"), [2], "the first report to a new admin");
    // The same slots sampled again: nothing to say before the periodic report.
    let out = a.step_vec(20, slots(2));
    assert_eq!(reports(&out, "b"), Vec::<u32>::new());
    // Fewer slots: said at once.
    let out = a.step_vec(30, slots(1));
    assert_eq!(reports(&out, "b"), [1]);
    // None left: said too (the admin must stop placing here).
    let out = a.step_vec(40, slots(0));
    assert_eq!(reports(&out, "b"), [0]);
}

/// A node's capabilities may change at run time up to [`MAX_CAPABILITIES`] (sorted, without
/// duplicates); a larger set, possible only in an old log, is skipped whole.
///
/// Fails on `on_capabilities_changed`: `capabilities.len() > MAX_CAPABILITIES` → `>=`.
#[test]
fn capabilities_change_up_to_their_bound_and_a_larger_set_is_skipped() {
    let mut a = voter("a", &MEMBERS);
    let set = |n: usize| -> Vec<String> {
        std::iter::once(ADMIN_ELECTION.to_owned())
            .chain((1..n).map(|i| format!("cap{i:03}")))
            .collect()
    };
    a.step_vec(
        10,
        Event::CapabilitiesChanged {
            capabilities: set(MAX_CAPABILITIES),
        },
    );
    assert_eq!(
        a.capabilities().len(),
        MAX_CAPABILITIES,
        "exactly the bound"
    );
    a.step_vec(
        20,
        Event::CapabilitiesChanged {
            capabilities: set(MAX_CAPABILITIES + 1),
        },
    );
    assert_eq!(
        a.capabilities().len(),
        MAX_CAPABILITIES,
        "one past it: skipped"
    );
    // Duplicates collapse and the order is the core's own.
    a.step_vec(
        30,
        Event::CapabilitiesChanged {
            capabilities: vec!["gpu".into(), ADMIN_ELECTION.into(), "gpu".into()],
        },
    );
    let mut want = vec![ADMIN_ELECTION.to_owned(), "gpu".to_owned()];
    want.sort();
    assert_eq!(a.capabilities(), want);
}

/// A node without an admin asks peers as they come up, at most `discovery_fanout` of them per
/// discovery round; once it knows an admin it asks nobody.
///
/// Fails on `on_peer_up`: `whoami_sent < discovery_fanout` → `<=`.
#[test]
fn peers_coming_up_are_asked_up_to_the_fanout() {
    let config = Config {
        discovery_fanout: 2,
        ..Config::default()
    };
    let mut a = Core::new("a".into(), config, vec![ADMIN_ELECTION.to_owned()], 1).unwrap();
    a.step_vec(0, Event::Started);
    let asked = |out: &[Command]| {
        out.iter()
            .filter(|c| {
                matches!(
                    c,
                    Command::Send {
                        msg: Message::Whoami { .. },
                        ..
                    }
                )
            })
            .count()
    };
    let mut total = 0;
    for (t, p) in ["p1", "p2", "p3", "p4"].into_iter().enumerate() {
        let out = a.step_vec(t as u64 + 1, Event::peer_up(p.into(), voter_info()));
        total += asked(&out);
    }
    assert_eq!(total, 2, "two of the four peers asked");
}

/// A node's uptime counts whole seconds since its last start (a restart starts it again), and
/// it is what a WHOAMI reply tells and what its score counts.
///
/// Fails on `uptime_s`: → `0`, → `1`, `now − started` → `now + started`.
#[test]
fn uptime_counts_whole_seconds_since_the_last_start() {
    let mut a = voter("a", &MEMBERS);
    let score_at_start = a.score();
    let whoami = || {
        from(
            "b",
            Message::Whoami {
                electorate_version: 1,
                electorate_term: 0,
                electorate_stamp: 0,
            },
        )
    };
    let told = |out: &[Command]| {
        sent_to(out, "b")
            .into_iter()
            .find_map(|m| match m {
                Message::WhoamiReply { uptime_s, .. } => Some(*uptime_s),
                _ => None,
            })
            .expect("a whoami reply")
    };
    let out = a.step_vec(172_799_999, whoami());
    assert_eq!(a.uptime_s(), 172_799);
    assert_eq!(told(&out), 172_799);
    // A day up is worth 3,000 points more than none.
    assert_eq!(a.score(), score_at_start + 3_000);
    a.step_vec(172_800_000, Event::Shutdown);
    a.step_vec(180_000_000, Event::Started);
    assert_eq!(a.uptime_s(), 0, "a restart starts the count again");
    let out = a.step_vec(180_002_500, whoami());
    assert_eq!((a.uptime_s(), told(&out)), (2, 2));
}
