//! Helpers for the rule tests: build nodes in a known state and pick commands out of a step.

use crate::{Command, Config, Core, Electorate, Event, Message, NodeId, ADMIN_ELECTION};

pub(crate) const MIN: u64 = 30_000;

/// An eligible node of electorate `members`, started at t=0.
pub(crate) fn voter(id: &str, members: &[&str]) -> Core {
    node_with(
        id,
        members,
        vec![ADMIN_ELECTION.to_owned()],
        Config::default(),
    )
}

pub(crate) fn node_with(id: &str, members: &[&str], caps: Vec<String>, config: Config) -> Core {
    let mut c = Core::new(id.into(), config, caps, 42).unwrap();
    c.set_electorate_for_test(Electorate::new(
        1,
        members.iter().map(|m| NodeId::from(*m)).collect(),
    ));
    c.step_vec(0, Event::Started);
    c
}

/// `peer` connects, advertising `admin_election` when `eligible` (else only `docker`).
pub(crate) fn up(peer: &str, eligible: bool) -> Event {
    let caps: Vec<String> = if eligible {
        vec![ADMIN_ELECTION.into()]
    } else {
        vec!["docker".into()]
    };
    Event::peer_up(
        peer.into(),
        crate::PeerInfo {
            capabilities: caps.into(),
            ..Default::default()
        },
    )
}

pub(crate) fn from(peer: &str, msg: Message) -> Event {
    Event::Message {
        from: peer.into(),
        msg,
    }
}

/// Messages sent to `to` in `out`.
pub(crate) fn sent_to<'a>(out: &'a [Command], to: &str) -> Vec<&'a Message> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send { to: t, msg } if t.as_str() == to => Some(msg),
            _ => None,
        })
        .collect()
}

/// Every message sent in `out`, as (peer, message kind), in order.
pub(crate) fn sends(out: &[Command]) -> Vec<(String, &'static str)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send { to, msg } => Some((to.as_str().to_owned(), msg.kind())),
            _ => None,
        })
        .collect()
}

pub(crate) fn broadcasts(out: &[Command]) -> Vec<&Message> {
    out.iter()
        .filter_map(|c| match c {
            Command::Broadcast { msg } => Some(msg),
            _ => None,
        })
        .collect()
}

pub(crate) fn key(c: &Core) -> (u64, u64, u64) {
    let e = c.electorate().unwrap();
    (e.version, e.term, e.fingerprint())
}

pub(crate) fn vote_req(c: &Core, term: u64) -> Message {
    let (electorate_version, electorate_term, electorate_hash) = key(c);
    Message::VoteRequest {
        term,
        electorate_version,
        electorate_term,
        electorate_hash,
        electorate_stamp: c.stamp(),
        transfer: false,
    }
}

pub(crate) fn pre_vote_req(c: &Core, term: u64) -> Message {
    let (electorate_version, electorate_term, electorate_hash) = key(c);
    Message::PreVoteRequest {
        term,
        electorate_version,
        electorate_term,
        electorate_hash,
        electorate_stamp: c.stamp(),
    }
}

/// Fires `timer` at its own deadline and returns the commands.
pub(crate) fn fire(c: &mut Core, timer: crate::Timer) -> Vec<Command> {
    let at = c.timers.deadline(timer).expect("timer armed");
    c.step_vec(at, Event::TimerFired { timer })
}

/// Drives a node of electorate `members` to admin in term 1 with the votes of `voters`.
pub(crate) fn elect(id: &str, members: &[&str], voters: &[&str]) -> Core {
    let mut c = voter(id, members);
    fire(&mut c, crate::Timer::Discovery);
    fire(&mut c, crate::Timer::Election);
    let now = c.now_ms();
    for v in voters {
        c.step_vec(
            now,
            from(
                v,
                Message::PreVoteReply {
                    term: 1,
                    granted: true,
                },
            ),
        );
    }
    for v in voters {
        c.step_vec(
            now,
            from(
                v,
                Message::VoteReply {
                    term: 1,
                    granted: true,
                    promise_ms: 30_000,
                },
            ),
        );
    }
    assert_eq!(c.role(), crate::Role::Admin);
    c
}
