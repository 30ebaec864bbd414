//! Fuzz target: wire bytes → `codec::decode` → `Core::step`, from members, workers, strangers
//! and the node itself, mixed with timers, peers coming and going and restarts (issue 9).
//!
//! Input: one byte choosing the start state (worker, voter, elected admin), then operations:
//! a tag byte, and for messages a gap byte, a little-endian u16 length and that many wire bytes.
//! Checked on every step: no panic, the term never falls and stays in range, and at most one
//! candidate per term gets a vote — from the `Voted` notices and from granted replies sent.

#![no_main]

use std::collections::BTreeMap;

use chorus_core::codec::decode;
use chorus_core::{
    Command, Config, Core, Electorate, Event, Message, NodeId, Notice, PeerInfo, Timer,
    ADMIN_ELECTION, MAX_WIRE_INT,
};
use libfuzzer_sys::fuzz_target;

const CLUSTER: &str = "c1";
const SENDERS: [&str; 6] = ["b", "c", "d", "w", "z", "a"];

fn config() -> Config {
    Config {
        cluster_id: CLUSTER.into(),
        heartbeat_interval_ms: 1_000,
        election_timeout_min_ms: 3_000,
        election_timeout_max_ms: 4_500,
        discovery_timeout_ms: 1_000,
        bootstrap_expect: 4,
        ..Config::default()
    }
}

fn start(kind: u8) -> (Core, u64) {
    let eligible = kind % 3 != 0;
    let caps = if eligible { ADMIN_ELECTION } else { "docker" };
    let mut core = Core::new("a".into(), config(), vec![caps.to_owned()], 9).unwrap();
    if eligible {
        let members = ["a", "b", "c", "d"].map(NodeId::from).to_vec();
        core.set_electorate_for_test(Electorate::new(1, members));
    }
    core.step_vec(0, Event::Started);
    let mut now = 0;
    if kind % 3 == 2 {
        for _ in 0..2 {
            let (at, timer) = core.next_deadline().unwrap();
            now = at;
            core.step_vec(now, Event::TimerFired { timer });
        }
        for msg in [
            Message::PreVoteReply { term: 1, granted: true },
            Message::VoteReply { term: 1, granted: true, promise_ms: 30_000 },
        ] {
            for p in ["b", "c"] {
                core.step_vec(now, Event::Message { from: p.into(), msg: msg.clone() });
            }
        }
    }
    (core, now)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let (mut core, mut now) = start(first);
    let mut voted: BTreeMap<u64, NodeId> = BTreeMap::new();
    let mut granted: BTreeMap<u64, NodeId> = BTreeMap::new();
    let mut out = Vec::new();
    while let Some((&tag, tail)) = rest.split_first() {
        rest = tail;
        let sender = NodeId::from(SENDERS[usize::from(tag >> 3) % SENDERS.len()]);
        let event = match tag % 8 {
            0..=3 => {
                if rest.len() < 3 {
                    return;
                }
                now += u64::from(rest[0]) * 16;
                let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
                let bytes = &rest[3..3 + len];
                rest = &rest[3 + len..];
                match decode(CLUSTER, bytes) {
                    Ok(msg) => Event::Message { from: sender, msg },
                    Err(_) => continue,
                }
            }
            4 => match core.next_deadline() {
                Some((at, timer)) => {
                    now = now.max(at);
                    Event::TimerFired { timer }
                }
                None => Event::TimerFired { timer: Timer::Election },
            },
            5 => {
                let info = PeerInfo {
                    capabilities: vec![if tag & 0x80 != 0 { ADMIN_ELECTION } else { "docker" }
                        .to_owned()]
                    .into(),
                    uptime_s: u64::from(tag) << 40,
                    ..Default::default()
                };
                Event::peer_up(sender, info)
            }
            6 => Event::PeerDown { peer: sender },
            _ => {
                now += 5_000;
                Event::Started
            }
        };
        let term_before = core.term();
        out.clear();
        core.step(now, event, &mut out);
        assert!(core.term() >= term_before, "term fell");
        assert!(core.term() <= MAX_WIRE_INT && core.beat() <= MAX_WIRE_INT, "out of range");
        for c in &out {
            match c {
                Command::Notice(Notice::Voted { term, candidate }) => {
                    assert_eq!(voted.entry(*term).or_insert_with(|| candidate.clone()), candidate);
                }
                Command::Send { to, msg: Message::VoteReply { term, granted: true, promise_ms: 30_000 } } => {
                    assert_eq!(granted.entry(*term).or_insert_with(|| to.clone()), to);
                }
                _ => {}
            }
        }
    }
});
