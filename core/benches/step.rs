//! Core step rate: heartbeat handling and vote handling in a 100-node view, and an admin's
//! heartbeat round (one heartbeat, every voter's ack) with 5, 100 and 1,000 voters.
//!
//! Task placement: an admin with 5,000 workers takes an offer and places it (and hears the
//! worker's report of the result, which frees the slot).
//!
//! `cargo bench -p chorus-core --bench step`

use chorus_core::{
    Command, Config, Core, Electorate, Event, Message, NodeId, PeerInfo, ADMIN_ELECTION,
};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

const N: usize = 100;

fn ids() -> Vec<NodeId> {
    ids_n(N)
}

fn ids_n(n: usize) -> Vec<NodeId> {
    (0..n)
        .map(|i| NodeId::from(format!("12D3KooWnode{i:040}")))
        .collect()
}

/// A started voter that knows all 100 peers and the 100-member electorate.
fn follower(ids: &[NodeId]) -> Core {
    let mut c = Core::new(
        ids[1].clone(),
        Config::default(),
        vec![ADMIN_ELECTION.into()],
        1,
    )
    .unwrap();
    c.set_electorate_for_test(Electorate::new(1, ids.to_vec()));
    let mut out = Vec::new();
    c.step(0, Event::Started, &mut out);
    let info = PeerInfo {
        capabilities: vec![ADMIN_ELECTION.to_owned()].into(),
        ..Default::default()
    };
    for id in ids {
        c.step(0, Event::peer_up(id.clone(), info.clone()), &mut out);
    }
    c
}

fn heartbeats(c: &mut Criterion) {
    let ids = ids();
    let mut g = c.benchmark_group("step");
    g.throughput(Throughput::Elements(1));
    let mut core = follower(&ids);
    let admin = ids[0].clone();
    let mut out: Vec<Command> = Vec::with_capacity(8);
    let mut t = 1_000u64;
    g.bench_function("heartbeat_100_nodes", |b| {
        b.iter(|| {
            t += 1;
            out.clear();
            let msg = Message::Heartbeat {
                term: 1,
                beat: t,
                membership_version: 1,
                genesis: 0,
                electorate: None,
                membership_term: 0,
                certified: 0,
            };
            core.step(
                t,
                Event::Message {
                    from: admin.clone(),
                    msg,
                },
                &mut out,
            );
        })
    });

    let mut core = follower(&ids);
    let mut term = 0u64;
    let mut now = 0u64;
    let (version, hash) = {
        let e = core.electorate().unwrap();
        (e.version, e.fingerprint())
    };
    g.bench_function("vote_request_100_nodes", |b| {
        b.iter(|| {
            // A new term, well past the last promise, from a rotating candidate.
            term += 1;
            now += 30_000;
            out.clear();
            let msg = Message::VoteRequest {
                term,
                electorate_version: version,
                electorate_hash: hash,
                electorate_term: 0,
                electorate_stamp: 0,
                transfer: false,
            };
            let from = ids[(term as usize % (N - 2)) + 2].clone();
            core.step(now, Event::Message { from, msg }, &mut out);
        })
    });

    // A candidate collecting the 50 votes it needs from a 100-member electorate.
    g.throughput(Throughput::Elements(50));
    g.bench_function("win_election_100_nodes_50_votes", |b| {
        b.iter_batched(
            || {
                let mut c = follower(&ids);
                let mut out = Vec::new();
                for (t, timer) in [
                    (15_000, chorus_core::Timer::Discovery),
                    (60_000, chorus_core::Timer::Election),
                ] {
                    c.step(t, Event::TimerFired { timer }, &mut out);
                }
                for v in &ids[2..N / 2 + 2] {
                    let msg = Message::PreVoteReply {
                        term: 1,
                        granted: true,
                    };
                    c.step(
                        60_000,
                        Event::Message {
                            from: v.clone(),
                            msg,
                        },
                        &mut out,
                    );
                }
                assert_eq!(c.role(), chorus_core::Role::Candidate);
                c
            },
            |mut c| {
                let mut out = Vec::new();
                for v in &ids[2..N / 2 + 2] {
                    let msg = Message::VoteReply {
                        term: 1,
                        granted: true,
                        promise_ms: 30_000,
                    };
                    c.step(
                        60_001,
                        Event::Message {
                            from: v.clone(),
                            msg,
                        },
                        &mut out,
                    );
                }
                assert_eq!(c.role(), chorus_core::Role::Admin);
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// `ids[1]` elected admin of the electorate `ids` by every other member.
fn admin_of(ids: &[NodeId]) -> Core {
    let mut c = follower(ids);
    let mut out = Vec::new();
    for (t, timer) in [
        (15_000, chorus_core::Timer::Discovery),
        (60_000, chorus_core::Timer::Election),
    ] {
        c.step(t, Event::TimerFired { timer }, &mut out);
    }
    let others: Vec<&NodeId> = ids.iter().filter(|v| *v != &ids[1]).collect();
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
        for v in &others {
            if c.role() == chorus_core::Role::Admin {
                break;
            }
            let msg = granted.clone();
            let from = (*v).clone();
            c.step(60_000, Event::Message { from, msg }, &mut out);
        }
    }
    assert_eq!(c.role(), chorus_core::Role::Admin);
    c
}

/// One heartbeat round at the admin: the heartbeat timer fires, every other voter acks it.
/// Each ack re-tallies the lease over the electorate, so this is where electorate size costs.
fn ack_rounds(c: &mut Criterion) {
    let mut g = c.benchmark_group("admin");
    for n in [5usize, 100, 1_000] {
        let ids = ids_n(n);
        let mut core = admin_of(&ids);
        let mut out: Vec<Command> = Vec::with_capacity(8);
        let interval = core.config().heartbeat_interval_ms;
        let mut t = 60_000u64;
        g.throughput(Throughput::Elements(n as u64 - 1));
        g.bench_function(format!("heartbeat_round_{n}_voters"), |b| {
            b.iter(|| {
                t += interval;
                out.clear();
                let timer = chorus_core::Timer::Heartbeat;
                core.step(t, Event::TimerFired { timer }, &mut out);
                let beat = core.beat();
                for v in ids.iter().filter(|v| *v != &ids[1]) {
                    let msg = Message::HeartbeatAck {
                        term: 1,
                        beat,
                        promise_ms: 30_000,
                        holds: false,
                        endorsement: None,
                        certified: 0,
                    };
                    let from = v.clone();
                    core.step(t + 1, Event::Message { from, msg }, &mut out);
                }
                assert_eq!(core.role(), chorus_core::Role::Admin);
            })
        });
    }
    g.finish();
}

/// One task through the admin of 5 voters with 5,000 workers of 4 slots each: the offer (queued
/// and placed at once on the least-loaded worker) and that worker's report of it finished.
fn placement(c: &mut Criterion) {
    let mut g = c.benchmark_group("admin");
    let voters = ids_n(5);
    let mut core = admin_of(&voters);
    let now = 60_001;
    let workers: Vec<NodeId> = (0..5_000)
        .map(|i| NodeId::from(format!("12D3KooWwork{i:040}")))
        .collect();
    let mut out: Vec<Command> = Vec::with_capacity(8);
    let info = PeerInfo {
        capabilities: vec!["sandbox".to_owned()].into(),
        ..Default::default()
    };
    for w in &workers {
        let peer = w.clone();
        let info = info.clone();
        core.step(now, Event::peer_up(peer, info), &mut out);
        let msg = Message::WorkerReport {
            term: 1,
            seen: 0,
            slots: 4,
            capacity: Default::default(),
            running: vec![],
            finished: vec![],
            released: vec![],
            partial: false,
        };
        core.step(
            now,
            Event::Message {
                from: w.clone(),
                msg,
            },
            &mut out,
        );
    }
    let spec: chorus_core::SharedSpec = chorus_core::TaskSpec {
        image: "chorus/sandbox:latest".into(),
        command: vec!["true".into()],
        timeout_ms: 10_000,
        ..Default::default()
    }
    .into();
    let origin = voters[0].clone();
    let mut seq = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("place_5000_workers", |b| {
        b.iter(|| {
            seq += 1;
            let task = chorus_core::TaskId {
                origin: origin.clone(),
                seq,
            };
            out.clear();
            let msg = Message::TaskOffer {
                task: task.clone(),
                spec: spec.clone(),
                cancel: false,
                attempt: 0,
                unplaceable_ms: 0,
            };
            core.step(
                now,
                Event::Message {
                    from: origin.clone(),
                    msg,
                },
                &mut out,
            );
            let worker = out
                .iter()
                .find_map(|c| match c {
                    Command::Send {
                        to,
                        msg: Message::TaskPlace { .. },
                    } => Some(to.clone()),
                    _ => None,
                })
                .expect("placed");
            let msg = Message::WorkerReport {
                term: 1,
                seen: seq,
                slots: 4,
                capacity: Default::default(),
                running: vec![],
                finished: vec![task],
                released: vec![],
                partial: false,
            };
            core.step(now, Event::Message { from: worker, msg }, &mut out);
        })
    });
    g.finish();
}

criterion_group!(benches, heartbeats, ack_rounds, placement);
criterion_main!(benches);
