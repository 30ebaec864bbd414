//! Helpers for tests that drive one core by hand (the `*_rules.rs` files): a voter of a fixed
//! electorate, started and connected; inputs from a peer; what it sent and refused.

#![allow(dead_code)]

use chorus_core::{
    Command, Config, Core, Electorate, Event, Message, NodeId, Notice, PeerInfo, Refusal, Role,
    ADMIN_ELECTION,
};

/// What an eligible (voter) peer advertises.
pub fn voter_info() -> PeerInfo {
    PeerInfo {
        capabilities: vec![ADMIN_ELECTION.to_owned()].into(),
        ..Default::default()
    }
}

/// An eligible node of electorate version 1 `members`, started at t=0 and connected to every
/// other member.
pub fn voter(id: &str, members: &[&str]) -> Core {
    voter_with(id, members, Config::default())
}

/// [`voter`] with its own settings.
pub fn voter_with(id: &str, members: &[&str], config: Config) -> Core {
    let mut c = Core::new(id.into(), config, vec![ADMIN_ELECTION.to_owned()], 42).unwrap();
    c.set_electorate_for_test(Electorate::new(
        1,
        members.iter().map(|m| NodeId::from(*m)).collect(),
    ));
    c.step_vec(0, Event::Started);
    connect(&mut c, 0, members);
    c
}

/// Tells `c` at `now` that every other member (all voters) is connected.
pub fn connect(c: &mut Core, now: u64, members: &[&str]) {
    let me = c.id().clone();
    for m in members.iter().filter(|m| **m != me.as_str()) {
        c.step_vec(now, Event::peer_up((*m).into(), voter_info()));
    }
}

/// `msg` arriving from `peer`.
pub fn from(peer: &str, msg: Message) -> Event {
    Event::Message {
        from: peer.into(),
        msg,
    }
}

/// The messages in `out` sent to `to`.
pub fn sent_to<'a>(out: &'a [Command], to: &str) -> Vec<&'a Message> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send { to: t, msg } if t.as_str() == to => Some(msg),
            _ => None,
        })
        .collect()
}

/// The refusals in `out`: (from, message kind, reason).
pub fn refusals(out: &[Command]) -> Vec<(String, String, Refusal)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Notice(Notice::Refused {
                from,
                message,
                reason,
            }) => Some((from.as_str().to_owned(), message.to_string(), *reason)),
            _ => None,
        })
        .collect()
}

/// Fires the node's timers in deadline order until it is a pre-candidate (bounded).
pub fn stand(c: &mut Core) {
    for _ in 0..8 {
        if c.role() == Role::PreCandidate {
            return;
        }
        let (at, timer) = c.next_deadline().expect("a timer is armed");
        c.step_vec(at, Event::TimerFired { timer });
    }
    panic!("{} never stood: {:?}", c.id(), c.role());
}

/// `a` of `members`, elected in term `term` + 1 with the grants of `voters` at the instant it
/// stood; returns the commands of the winning step.
pub fn win(a: &mut Core, voters: &[&str]) -> Vec<Command> {
    stand(a);
    let (now, term) = (a.now_ms(), a.term() + 1);
    let mut out = Vec::new();
    for v in voters {
        let pre_vote = Message::PreVoteReply {
            term,
            granted: true,
        };
        out.extend(a.step_vec(now, from(v, pre_vote)));
    }
    for v in voters {
        let vote = Message::VoteReply {
            term,
            granted: true,
            promise_ms: a.config().election_timeout_min_ms,
        };
        out.extend(a.step_vec(now, from(v, vote)));
    }
    assert_eq!(a.role(), Role::Admin);
    out
}

/// A heartbeat of the admin of `term` (electorate version 1), at `beat`.
pub fn heartbeat(term: u64, beat: u64) -> Message {
    Message::Heartbeat {
        term,
        beat,
        membership_version: 1,
        genesis: 0,
        electorate: None,
        membership_term: 0,
        certified: 0,
    }
}
