//! Hostile peers: authenticated workers that lie. Each hostile node runs an honest core (so it
//! connects, answers WHOAMI and follows like any worker) and, beside it, a [`Liar`] that sends
//! well-formed but arbitrary messages to random nodes: random and extreme terms, forged
//! heartbeats and step-downs for live terms, unsolicited votes, acks and WHOAMI replies with
//! made-up electorates, and old messages it heard, replayed as its own. It announces newer
//! certified electorates than anyone holds, and answers the nodes that ask it for the links with
//! forged ones: made-up electorates signed by itself, with made-up signatures for members, or
//! genuine links it heard with a member swapped in (`chorus_core::certificate`).
//!
//! What a liar cannot do, because the transport authenticates: send as anyone but itself; nor,
//! because members sign with keys it does not hold, sign for another node. What
//! it does not do: claim `admin_election` (it advertises a worker's capabilities), or collude
//! with other liars on one made-up electorate — a node adopts an electorate only when
//! `confirmations` peers report the same one, so that many colluding liars could mislead a node
//! that has none yet (the agreed electorate of the membership issue closes that).
//!
//! The checker judges the honest nodes only.

use std::collections::VecDeque;
use std::sync::Arc;

use chorus_core::certificate::simulated_signature;
use chorus_core::rng::below;
use chorus_core::{Electorate, Link, Message, NodeId, Resources, Signature, MAX_WIRE_INT};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How many heard messages a liar keeps for replaying.
const HEARD: usize = 32;

/// The lying half of a hostile node.
pub struct Liar {
    rng: ChaCha8Rng,
    heard: VecDeque<Message>,
    /// The highest term and beat heard, so forgeries can aim at live terms.
    term: u64,
    beat: u64,
    /// The newest genesis heard, so forged links aim at the cluster.
    genesis: u64,
    /// Nodes that asked it for links, with the version they asked after.
    askers: VecDeque<(usize, u64)>,
}

impl Liar {
    /// The liar of node `index`, seeded apart from everything else of the run.
    pub fn new(seed: u64, index: usize) -> Liar {
        let stream = seed ^ 0x4057_11e5_0000_0000 ^ (index as u64).wrapping_mul(0x9e37_79b9);
        Liar {
            rng: ChaCha8Rng::seed_from_u64(stream),
            heard: VecDeque::with_capacity(HEARD),
            term: 0,
            beat: 0,
            genesis: 0,
            askers: VecDeque::new(),
        }
    }

    /// Takes note of a message delivered to the hostile node by node `from`.
    pub fn hear(&mut self, from: usize, msg: &Message) {
        match msg {
            Message::ChainRequest { after } if self.askers.len() < HEARD => {
                self.askers.push_back((from, *after));
            }
            Message::Heartbeat { genesis, .. } if *genesis != 0 => self.genesis = *genesis,
            _ => {}
        }
        let (term, beat) = match msg {
            Message::Heartbeat { term, beat, .. } | Message::HeartbeatAck { term, beat, .. } => {
                (*term, *beat)
            }
            Message::WhoamiReply { term, beat, .. } => (*term, *beat),
            Message::PreVoteRequest { term, .. }
            | Message::VoteRequest { term, .. }
            | Message::PreVoteReply { term, .. }
            | Message::VoteReply { term, .. }
            | Message::StepDown { term, .. } => (*term, 0),
            _ => (0, 0),
        };
        // Only plausible values: a liar that believed another liar would aim at nothing.
        if term <= MAX_WIRE_INT {
            self.term = self.term.max(term);
        }
        if beat <= MAX_WIRE_INT {
            self.beat = self.beat.max(beat);
        }
        if self.heard.len() == HEARD {
            self.heard.pop_front();
        }
        self.heard.push_back(msg.clone());
    }

    /// A random index in `0..n`.
    pub fn pick(&mut self, n: usize) -> usize {
        below(&mut self.rng, n.max(1) as u64) as usize
    }

    fn flip(&mut self) -> bool {
        below(&mut self.rng, 2) == 1
    }

    /// A term a liar might claim: the live one, just above it, far above it, or extreme.
    fn term(&mut self) -> u64 {
        match below(&mut self.rng, 8) {
            0 => self.term,
            1 => self.term.saturating_add(1),
            2 => self.term.saturating_add(1 + below(&mut self.rng, 1_000)),
            3 => 0,
            4 => MAX_WIRE_INT,
            5 => MAX_WIRE_INT + 1,
            6 => u64::MAX,
            _ => self.rng.next_u64(),
        }
    }

    /// A beat or version: near the live one, or extreme.
    fn big(&mut self) -> u64 {
        match below(&mut self.rng, 5) {
            0 => self.beat,
            1 => self.beat.saturating_add(1 + below(&mut self.rng, 100)),
            2 => MAX_WIRE_INT,
            3 => u64::MAX,
            _ => self.rng.next_u64(),
        }
    }

    /// A made-up electorate that always contains the liar.
    fn electorate(&mut self, me: &NodeId, nodes: usize) -> Arc<Electorate> {
        let mut members = vec![me.clone()];
        for _ in 0..below(&mut self.rng, 4) {
            members.push(NodeId::from(format!("n{}", self.pick(nodes))));
        }
        let version = match below(&mut self.rng, 4) {
            0 => 1,
            1 => 2,
            2 => MAX_WIRE_INT,
            _ => 1 + below(&mut self.rng, 1_000),
        };
        Arc::new(Electorate::new(version, members))
    }

    /// A forged answer to a node that asked this liar for links, if one asked.
    pub fn answer(&mut self, me: &NodeId, nodes: usize) -> Option<(usize, Message)> {
        let (to, after) = self.askers.pop_front()?;
        let mut links = Vec::new();
        let heard = self.heard.iter().find_map(|m| match m {
            Message::Chain { links } => links.first().cloned(),
            _ => None,
        });
        match (below(&mut self.rng, 3), heard) {
            // A genuine link with a member swapped for the liar: the signatures no longer fit.
            (0, Some(link)) => {
                let mut members = link.electorate.members().to_vec();
                members[0] = me.clone();
                let prev_version = link.electorate.version - 1;
                let e = Electorate::new(prev_version, vec![me.clone()]);
                let mut forged = e.successor(link.electorate.term, members);
                forged.genesis = link.electorate.genesis;
                links.push(Arc::new(Link {
                    electorate: Arc::new(forged),
                    signers: link.signers.clone(),
                }));
            }
            // A made-up next electorate, signed by the liar and with made-up signatures for
            // members of every kind.
            _ => {
                let mut members = vec![me.clone()];
                members.extend((0..3).map(|_| NodeId::from(format!("n{}", self.pick(nodes)))));
                let before = Electorate::new(after.max(1), members.clone());
                let mut e = before.successor(self.term, members);
                e.genesis = self.genesis; // aimed at the cluster it heard
                let e = Arc::new(e);
                let statement = e.statement();
                let mut signers: Vec<(NodeId, Signature)> = (0..nodes)
                    .map(|j| {
                        let id = NodeId::from(format!("n{j}"));
                        let sig = if id == *me {
                            simulated_signature(me, &statement)
                        } else {
                            Signature::from_bytes(&self.rng.next_u64().to_be_bytes())
                        };
                        (id, sig)
                    })
                    .collect();
                signers.sort();
                links.push(Arc::new(Link {
                    electorate: e,
                    signers,
                }));
            }
        }
        Some((to, Message::Chain { links }))
    }

    /// The next lie of node `me` in a cluster of `nodes`.
    pub fn lie(&mut self, me: &NodeId, nodes: usize) -> Message {
        match below(&mut self.rng, 11) {
            0 => Message::Heartbeat {
                term: self.term(),
                beat: self.big(),
                membership_version: below(&mut self.rng, 4),
                genesis: self.genesis,
                electorate: None,
                membership_term: 0,
                // Newer links than anyone holds: every node that refuses it asks the liar.
                certified: 1 + below(&mut self.rng, 64),
            },
            1 => Message::HeartbeatAck {
                term: self.term(),
                beat: self.big(),
                promise_ms: 30_000,
                holds: false,
                endorsement: None,
                certified: 0,
            },
            2 => Message::VoteReply {
                term: self.term(),
                granted: true,
                promise_ms: 30_000,
            },
            3 => Message::PreVoteReply {
                term: self.term(),
                granted: self.flip(),
            },
            4 => Message::VoteRequest {
                term: self.term(),
                electorate_version: below(&mut self.rng, 3),
                electorate_hash: self.rng.next_u64(),
                electorate_term: 0,
                electorate_stamp: 0,
                transfer: false,
            },
            5 => Message::PreVoteRequest {
                term: self.term(),
                electorate_version: below(&mut self.rng, 3),
                electorate_hash: self.rng.next_u64(),
                electorate_term: 0,
                electorate_stamp: 0,
            },
            6 => Message::StepDown {
                term: self.term(),
                successor: None,
            },
            7 | 8 => {
                let admin = if self.flip() {
                    me.clone()
                } else {
                    NodeId::from(format!("n{}", self.pick(nodes)))
                };
                let uptime_s = if self.flip() {
                    u64::MAX
                } else {
                    below(&mut self.rng, 1 << 40)
                };
                Message::WhoamiReply {
                    admin: Some(admin),
                    term: self.term(),
                    membership_version: self.big(),
                    beat: self.big(),
                    eligible: true,
                    uptime_s,
                    resources: Resources {
                        cpu_millicores: u32::MAX,
                        mem_free_mb: u32::MAX,
                        ..Default::default()
                    },
                    electorate: Some(self.electorate(me, nodes)),
                    genesis: self.big(),
                    electorate_stamp: 0,
                }
            }
            9 => Message::Whoami {
                electorate_version: self.big(),
                electorate_term: 0,
                electorate_stamp: 0,
            },
            _ => match self.heard.len() {
                0 => Message::StepDown {
                    term: self.term,
                    successor: None,
                },
                n => {
                    let i = self.pick(n);
                    self.heard[i].clone()
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lies_are_deterministic_per_seed_and_varied() {
        let me = NodeId::from("n9");
        let run = |seed| {
            let mut l = Liar::new(seed, 9);
            l.hear(
                0,
                &Message::Heartbeat {
                    term: 4,
                    beat: 40,
                    membership_version: 1,
                    genesis: 0,
                    electorate: None,
                    membership_term: 0,
                    certified: 0,
                },
            );
            (0..200).map(|_| l.lie(&me, 10)).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let lies = run(1);
        let kinds: std::collections::BTreeSet<_> = lies.iter().map(Message::kind).collect();
        assert!(kinds.len() >= 9, "{kinds:?}");
        assert!(lies.iter().any(|m| m.check_bounds().is_err()), "extremes");
        assert!(lies
            .iter()
            .any(|m| matches!(m, Message::Heartbeat { term: 4 | 5, .. })));
    }
}
