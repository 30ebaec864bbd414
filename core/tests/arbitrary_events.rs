//! Any sequence of events, however hostile (issue 9): arbitrary messages with arbitrary and
//! extreme numbers from members, workers, strangers and the node itself, timers, peers coming
//! and going, restarts. The core must never panic, never lower its term, and never grant two
//! candidates a vote in one term — judged both from its `Voted` notices and from the
//! `vote_reply { granted: true }` messages it actually sends.

use std::collections::BTreeMap;
use std::sync::Arc;

use chorus_core::{
    Ballot, Command, Config, Core, Electorate, Event, Link, Message, NodeId, Notice, PeerInfo,
    Resources, Signature, Timer, VoteLedger, ADMIN_ELECTION, MAX_WIRE_INT,
};
use proptest::prelude::*;

const PEERS: [&str; 5] = ["b", "c", "d", "w", "z"];

fn peer() -> impl Strategy<Value = NodeId> {
    prop_oneof![
        4 => (0..PEERS.len()).prop_map(|i| NodeId::from(PEERS[i])),
        1 => Just(NodeId::from("a")),
    ]
}

/// Numbers that matter: small ones near the live term, and the edges of every range.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0u64..6,
        1 => Just(MAX_WIRE_INT - 1),
        1 => Just(MAX_WIRE_INT),
        1 => Just(MAX_WIRE_INT + 1),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

fn electorate() -> impl Strategy<Value = Option<Arc<Electorate>>> {
    prop::option::of(
        (number(), prop::collection::vec(peer(), 0..4))
            .prop_map(|(v, m)| Arc::new(Electorate::new(v, m))),
    )
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        number().prop_map(|electorate_version| Message::Whoami {
            electorate_version,
            electorate_term: 0,
            electorate_stamp: 0,
        }),
        (
            prop::option::of(peer()),
            number(),
            number(),
            number(),
            number(),
            any::<bool>(),
            electorate()
        )
            .prop_map(
                |(admin, term, membership_version, beat, uptime_s, eligible, electorate)| {
                    Message::WhoamiReply {
                        admin,
                        term,
                        membership_version,
                        beat,
                        uptime_s,
                        resources: Resources::default(),
                        eligible,
                        electorate,
                        genesis: 0,
                        electorate_stamp: 0,
                    }
                }
            ),
        (number(), number(), any::<u64>(), any::<bool>()).prop_map(|(term, v, h, pre)| {
            // Half the requests carry the real electorate key, so grants are reachable.
            let (electorate_version, electorate_hash) = if h % 2 == 0 { key() } else { (v, h) };
            if pre {
                Message::PreVoteRequest {
                    term,
                    electorate_version,
                    electorate_term: h % 3,
                    electorate_hash,
                    electorate_stamp: h % 4,
                }
            } else {
                Message::VoteRequest {
                    term,
                    electorate_version,
                    electorate_term: h % 3,
                    electorate_hash,
                    electorate_stamp: h % 4,
                    transfer: false,
                }
            }
        }),
        (number(), any::<bool>())
            .prop_map(|(term, granted)| Message::PreVoteReply { term, granted }),
        (number(), any::<bool>(), number()).prop_map(|(term, granted, promise_ms)| {
            Message::VoteReply {
                term,
                granted,
                promise_ms,
            }
        }),
        (number(), number(), number(), electorate()).prop_map(
            |(term, beat, membership_version, electorate)| Message::Heartbeat {
                term,
                beat,
                membership_version,
                genesis: electorate.as_ref().map_or(0, |e| e.genesis),
                electorate,
                membership_term: 0,
                certified: beat % 7,
            }
        ),
        (number(), number(), number(), any::<bool>(), number()).prop_map(
            |(term, beat, promise_ms, holds, certified)| Message::HeartbeatAck {
                term,
                beat,
                promise_ms,
                holds,
                endorsement: holds.then(|| Signature::from_bytes(&beat.to_be_bytes())),
                certified,
            }
        ),
        number().prop_map(|after| Message::ChainRequest { after }),
        prop::collection::vec((electorate(), prop::collection::vec(peer(), 0..4)), 0..3).prop_map(
            |links| Message::Chain {
                links: links
                    .into_iter()
                    .filter_map(|(e, signers)| {
                        let electorate = e?;
                        let st = electorate.statement();
                        let mut signers: Vec<_> = signers
                            .into_iter()
                            .map(|s| {
                                let sig = chorus_core::certificate::simulated_signature(&s, &st);
                                (s, sig)
                            })
                            .collect();
                        signers.sort();
                        signers.dedup_by(|a, b| a.0 == b.0);
                        Some(Arc::new(Link {
                            electorate,
                            signers,
                        }))
                    })
                    .collect(),
            }
        ),
        number().prop_map(|term| Message::StepDown {
            term,
            successor: None
        }),
        (number(), peer(), 0u32..6).prop_map(|(round, node, expect)| {
            Message::BootstrapPrepare {
                ballot: Ballot { round, node },
                expect,
            }
        }),
        (number(), peer(), electorate()).prop_map(|(round, node, e)| {
            let ballot = Ballot { round, node };
            match e {
                Some(electorate) if round % 2 == 0 => {
                    Message::BootstrapAccept { ballot, electorate }
                }
                Some(e) => Message::BootstrapPromise {
                    accepted: Some((ballot.clone(), e)),
                    ballot,
                },
                None => Message::BootstrapAccepted { ballot },
            }
        }),
        (number(), peer(), any::<bool>()).prop_map(|(round, node, formed)| {
            Message::BootstrapRefused {
                promised: formed.then(|| Ballot {
                    round: round.saturating_add(1),
                    node: node.clone(),
                }),
                ballot: Ballot { round, node },
                formed,
            }
        }),
        (number(), peer(), 0u8..7, number(), any::<bool>()).prop_map(task_message),
        electorate().prop_map(|e| match e {
            Some(electorate) => Message::BootstrapChosen { electorate },
            None => Message::Whoami {
                electorate_version: 0,
                electorate_term: 0,
                electorate_stamp: 0,
            },
        }),
    ]
}

/// A small spec; odd `n` makes it break its bounds.
fn spec(n: u64) -> chorus_core::SharedSpec {
    chorus_core::TaskSpec {
        image: if n % 2 == 1 {
            String::new()
        } else {
            "img".into()
        },
        command: vec!["true".into()],
        timeout_ms: n.max(1),
        ..Default::default()
    }
    .into()
}

/// Any of the seven task messages, about a task of any origin and number (0 and the edges
/// included), from any sender.
fn task_message((n, origin, kind, m, flag): (u64, NodeId, u8, u64, bool)) -> Message {
    let task = chorus_core::TaskId { origin, seq: n };
    let worker: NodeId = if flag { "b".into() } else { "a".into() };
    match kind {
        0 => Message::TaskOffer {
            task,
            spec: spec(m),
            cancel: flag,
            attempt: m as u32,
            unplaceable_ms: m,
        },
        1 => Message::TaskState {
            task,
            state: if flag {
                chorus_core::OfferState::Placed {
                    worker,
                    attempt: m as u32,
                }
            } else {
                chorus_core::OfferState::Finished { worker }
            },
        },
        2 => Message::TaskPlace {
            term: m % 4,
            task,
            attempt: m as u32,
            seq: m,
            spec: spec(n),
        },
        3 => Message::TaskCancel { term: m % 4, task },
        4 => Message::WorkerReport {
            term: m % 4,
            seen: m,
            slots: m as u32,
            capacity: chorus_core::TaskCapacity {
                memory_mb: m as u32,
                ..Default::default()
            },
            running: vec![(task.clone(), m as u32)],
            finished: vec![task],
            released: vec![],
            partial: false,
        },
        5 => Message::TaskResult {
            task,
            result: Box::new(chorus_core::TaskResult {
                status: chorus_core::TaskStatus::Failed,
                exit_code: Some(m as i32),
                signal: None,
                worker,
                attempt: m as u32,
                duration_ms: m,
                usage: Default::default(),
                stdout: "x".repeat((m % 20_000) as usize),
                stderr: String::new(),
                stdout_truncated_bytes: m,
                stderr_truncated_bytes: 0,
                error: None,
                timings: Default::default(),
            }),
        },
        _ => Message::TaskResultAck {
            task,
            worker: (m % 2 == 0).then_some(worker),
        },
    }
}

fn members() -> Electorate {
    Electorate::new(1, ["a", "b", "c", "d"].map(NodeId::from).to_vec())
}

fn key() -> (u64, u64) {
    let e = members();
    (e.version, e.fingerprint())
}

#[derive(Clone, Debug)]
enum Input {
    /// A message after `gap` ms.
    Message(u64, NodeId, Message),
    /// The earliest armed timer fires at its deadline.
    Timer,
    PeerUp(NodeId, bool, u64),
    PeerDown(NodeId),
    Restart(u64),
    /// A local task input: a submit, a cancel, a sandbox's end (of a run that may not exist), or
    /// a start's capabilities (a voter may become a worker, sets may be oversized).
    Task(u8, u64, NodeId),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        8 => (0u64..3_000, peer(), message()).prop_map(|(g, p, m)| Input::Message(g, p, m)),
        4 => Just(Input::Timer),
        1 => (peer(), any::<bool>(), number()).prop_map(|(p, e, u)| Input::PeerUp(p, e, u)),
        1 => peer().prop_map(Input::PeerDown),
        1 => (0u64..100_000).prop_map(Input::Restart),
        2 => (0u8..5, number(), peer()).prop_map(|(k, n, p)| Input::Task(k, n, p)),
    ]
}

/// A worker (no electorate) or a voter of `members()`, started at 0.
fn started(eligible: bool) -> (Core, u64) {
    let caps = if eligible {
        vec![ADMIN_ELECTION.to_owned()]
    } else {
        vec!["docker".to_owned()]
    };
    let mut core = Core::new("a".into(), config(), caps, 3).unwrap();
    if eligible {
        core.set_electorate_for_test(members());
    }
    core.step_vec(0, Event::Started);
    (core, 0)
}

/// A voter that won term 1 with the votes of b and c.
fn elected() -> (Core, u64) {
    let (mut core, _) = started(true);
    let mut now = 0;
    for _ in 0..2 {
        let (at, timer) = core.next_deadline().expect("discovery, then election");
        now = at;
        core.step_vec(now, Event::TimerFired { timer });
    }
    for granted in [
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
        for p in ["b", "c"] {
            core.step_vec(
                now,
                Event::Message {
                    from: p.into(),
                    msg: granted.clone(),
                },
            );
        }
    }
    assert_eq!(core.role(), chorus_core::Role::Admin);
    (core, now)
}

fn config() -> Config {
    Config {
        heartbeat_interval_ms: 1_000,
        election_timeout_min_ms: 3_000,
        election_timeout_max_ms: 4_500,
        discovery_timeout_ms: 1_000,
        bootstrap_expect: 4,
        ..Config::default()
    }
}

/// Checks one step's output against everything promised before it: one vote per term, judged
/// from the notices and, separately, from the granted replies on the wire.
#[derive(Default)]
struct Judge {
    voted: BTreeMap<u64, NodeId>,
    wire: VoteLedger,
}

impl Judge {
    fn observe(&mut self, me: &NodeId, out: &[Command]) -> Result<(), TestCaseError> {
        for c in out {
            if let Command::Notice(Notice::Voted { term, candidate }) = c {
                let prev = self.voted.entry(*term).or_insert_with(|| candidate.clone());
                prop_assert_eq!(&*prev, candidate, "two Voted notices in term {}", term);
            }
            if let Err(e) = self.wire.observe(me, c) {
                return Err(TestCaseError::fail(e));
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn no_panic_no_lower_term_one_vote_per_term(
        start in 0..3u8,
        inputs in prop::collection::vec(input(), 1..120),
    ) {
        let (mut core, mut now) = match start {
            0 => started(false),
            1 => started(true),
            _ => elected(),
        };
        let mut judge = Judge::default();
        let mut out = Vec::new();
        for input in inputs {
            let term_before = core.term();
            out.clear();
            let event = match input {
                Input::Message(gap, from, msg) => {
                    now += gap;
                    Event::Message { from, msg }
                }
                Input::Timer => match core.next_deadline() {
                    Some((at, timer)) => {
                        now = now.max(at);
                        Event::TimerFired { timer }
                    }
                    None => Event::TimerFired { timer: Timer::Election },
                },
                Input::PeerUp(peer, eligible, uptime_s) => {
                    let capabilities: Vec<String> = if eligible {
                        vec![ADMIN_ELECTION.into()]
                    } else {
                        vec!["docker".into()]
                    };
                    Event::peer_up(peer, PeerInfo { capabilities: capabilities.into(), uptime_s, resources: Resources::default() })
                }
                Input::PeerDown(peer) => Event::PeerDown { peer },
                Input::Restart(gap) => {
                    now += gap;
                    Event::Started
                }
                Input::Task(kind, n, origin) => {
                    let task = chorus_core::TaskId { origin, seq: n.max(1) };
                    match kind {
                        0 => Event::SubmitTask { spec: spec(n), key: (n % 3 == 0).then(|| "k".into()), owner: None, request: n },
                        1 => Event::CancelTask { task, request: n },
                        2 => Event::SandboxExited { task, attempt: n as u32, exit: Default::default() },
                        3 => Event::CapabilitiesChanged {
                            capabilities: (0..n % 80).map(|k| if k == 0 && n % 2 == 0 { ADMIN_ELECTION.to_owned() } else { format!("c{k}") }).collect(),
                        },
                        _ => Event::SandboxFailed { task, attempt: n as u32, error: "e".repeat((n % 20_000) as usize), retryable: n % 2 == 0 },
                    }
                }
            };
            core.step(now, event, &mut out);
            prop_assert!(core.term() >= term_before, "term fell from {} to {}", term_before, core.term());
            prop_assert!(core.term() <= MAX_WIRE_INT);
            prop_assert!(core.beat() <= MAX_WIRE_INT);
            judge.observe(core.id(), &out)?;
        }
    }
}
