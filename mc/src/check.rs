//! The invariants, checked on every transition, and the ghost variables they need.
//!
//! Always (a state that breaks one is a counterexample):
//! * `election`: at most one node becomes admin in a term;
//! * `lease`: no two running nodes hold an unexpired lease at the same instant;
//! * `vote`: a node never votes for two candidates in one term, crashes included;
//! * `known`: a node follows as admin of term T only the node that won T;
//! * `chain`: at most one electorate commits per version, each one member from the last;
//! * `completeness`: every admin elected holds the newest committed electorate or a later one
//!   (what Raft calls leader completeness, for the electorate);
//! * `genesis`: bootstrap chooses at most one electorate — counted from the acceptors' own
//!   recorded acceptances (`bootstrap_expect` of them on one ballot) and from what nodes adopt;
//! * `paxos`: the acceptors keep Paxos's own invariants, so a broken rule shows at the step that
//!   breaks it rather than only when a second cluster is founded: a node's bootstrap promise
//!   never goes down (restarts included: it is durable state); a node never holds an acceptance
//!   above its promise (an accept raises the promise); and once a value is chosen at ballot b,
//!   every acceptance at b or above carries that value (a proposer accepts its own proposal
//!   first, so a proposal that ignores a chosen value breaks this at once); and every proposal
//!   (its first `bootstrap_accept`) carries, for some `bootstrap_expect` of the promises made to
//!   its ballot, the value of the highest-ballot acceptance they report, or any value when none
//!   reports one (Paxos's P2c, judged from the promises as they were sent).
//!
//! Sometimes (so a clean run is not clean because nothing happened): see [`Reached`].

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chorus_core::{Ballot, ChangeOutcome, NodeId, Notice};

use crate::node::{self, Node};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name (see the module doc).
    pub invariant: &'static str,
    /// What happened.
    pub message: String,
}

impl Violation {
    fn new(invariant: &'static str, message: String) -> Violation {
        Violation { invariant, message }
    }

    /// The model could not be set up.
    pub fn setup(message: String) -> Violation {
        Violation::new("setup", message)
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.message)
    }
}

/// Things a search should see happen at least once, or its clean result says little.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached(pub u32);

impl Reached {
    /// Bootstrap chose an electorate.
    pub const BOOTSTRAPPED: u32 = 1;
    /// A node became admin.
    pub const ELECTED: u32 = 2;
    /// A node became admin in a term above 1 (a failover or a re-election).
    pub const REELECTED: u32 = 4;
    /// A membership change committed.
    pub const COMMITTED: u32 = 8;
    /// Two membership changes committed.
    pub const TWO_COMMITTED: u32 = 16;
    /// A node behind the newest committed electorate took a later one.
    pub const CAUGHT_UP: u32 = 32;
    /// A crashed node restarted.
    pub const RESTARTED: u32 = 64;
    /// The voter an admin handed over to became admin.
    pub const HANDED_OVER: u32 = 128;

    /// Every flag with its name.
    pub const ALL: [(u32, &'static str); 8] = [
        (Self::BOOTSTRAPPED, "bootstrap chose an electorate"),
        (Self::ELECTED, "an admin was elected"),
        (Self::REELECTED, "an admin was elected in a later term"),
        (Self::COMMITTED, "a membership change committed"),
        (Self::TWO_COMMITTED, "two membership changes committed"),
        (
            Self::CAUGHT_UP,
            "a node behind the committed electorate caught up",
        ),
        (Self::RESTARTED, "a crashed node restarted"),
        (
            Self::HANDED_OVER,
            "an admin handed over and its successor won",
        ),
    ];

    /// Whether `flag` was reached.
    pub fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }
}

/// The acceptance a promise reports: (ballot, electorate members), if any.
type Reported = Option<(Ballot, Vec<NodeId>)>;

/// What the invariants remember of a path: part of the state (it decides future violations).
#[derive(Clone, Debug, Default)]
pub struct Ghost {
    admins: BTreeMap<u64, u8>,
    votes: BTreeMap<(u8, u64), NodeId>,
    committed: BTreeMap<u64, Arc<[NodeId]>>,
    geneses: BTreeSet<Vec<NodeId>>,
    /// The lowest ballot a bootstrap value was seen chosen at, and the value.
    chosen: Option<(Ballot, Vec<NodeId>)>,
    /// Per ballot, the promises made to it (the proposer's own included): promiser → the
    /// acceptance it reported. Not in the fingerprint: it only judges proposals (`paxos`), so
    /// a search that merges two paths to one state may miss a bad proposal on the second; walks
    /// judge every path they take.
    promises: BTreeMap<Ballot, BTreeMap<u8, Reported>>,
    /// The last handover seen: (the term left, the successor). Only marks `HANDED_OVER`: not in
    /// the fingerprint.
    handed: Option<(u64, u8)>,
    /// Not part of the state: read and cleared by the search after each transition.
    pub(crate) reached: Reached,
}

impl Ghost {
    pub(crate) fn hash(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.admins.hash(&mut h);
        for ((n, t), c) in &self.votes {
            (n, t, c.as_str()).hash(&mut h);
        }
        for (v, m) in &self.committed {
            v.hash(&mut h);
            for id in m.iter() {
                id.as_str().hash(&mut h);
            }
        }
        for g in &self.geneses {
            for id in g {
                id.as_str().hash(&mut h);
            }
        }
        if let Some((b, v)) = &self.chosen {
            (b.round, b.node.as_str()).hash(&mut h);
            for id in v {
                id.as_str().hash(&mut h);
            }
        }
        h.finish()
    }

    /// Judges one notice of node `i`, whose electorate version before the step was `before`.
    pub(crate) fn notice(
        &mut self,
        nodes: &[Arc<Node>],
        i: usize,
        before: Option<u64>,
        notice: &Notice,
    ) -> Result<(), Violation> {
        let me = node::id(i);
        let core = &nodes[i].core;
        match notice {
            Notice::BecameAdmin { term, .. } => {
                if let Some(&other) = self.admins.get(term) {
                    if other as usize != i {
                        return Err(Violation::new(
                            "election",
                            format!(
                                "{} and {me} both became admin in term {term}",
                                node::id(other as usize)
                            ),
                        ));
                    }
                }
                self.admins.insert(*term, i as u8);
                self.reached.0 |= Reached::ELECTED;
                if self.handed == Some((term - 1, i as u8)) {
                    self.reached.0 |= Reached::HANDED_OVER;
                }
                if *term > 1 {
                    self.reached.0 |= Reached::REELECTED;
                }
                let e = core.electorate();
                if let (Some((&v, members)), Some(e)) = (self.committed.last_key_value(), e) {
                    let behind = e.version < v;
                    let other = self
                        .committed
                        .get(&e.version)
                        .is_some_and(|m| **m != *e.members());
                    if behind || other {
                        return Err(Violation::new(
                            "completeness",
                            format!(
                                "{me} became admin of term {term} on electorate v{} {:?}, but v{v} {:?} had committed",
                                e.version,
                                names(e.members()),
                                names(members)
                            ),
                        ));
                    }
                }
            }
            Notice::Voted { term, candidate } => {
                if let Some(c) = self.votes.get(&(i as u8, *term)) {
                    if c != candidate {
                        return Err(Violation::new(
                            "vote",
                            format!("{me} voted for {c} and {candidate} in term {term}"),
                        ));
                    }
                }
                self.votes.insert((i as u8, *term), candidate.clone());
            }
            Notice::AdminKnown { admin, term } => {
                let winner = self.admins.get(term).map(|w| node::id(*w as usize));
                if winner.as_ref() != Some(admin) {
                    return Err(Violation::new(
                        "known",
                        format!(
                            "{me} follows {admin} as admin of term {term}, won by {}",
                            winner.map_or("nobody".into(), |w| w.to_string())
                        ),
                    ));
                }
            }
            Notice::MembershipChange {
                outcome: ChangeOutcome::Committed { version },
                ..
            } if self.admins.get(&core.term()) == Some(&(i as u8)) => {
                // Only the committing admin — the winner of the node's term, still admin or
                // just stepped down after its own removal — says Committed of its own
                // electorate. A forwarder relays its admin's answer, and its own electorate
                // may be an uncommitted sibling of the same version (walk seed 6453 of
                // `--nodes 5 --expect 4 … --autopilot --ask-followers`: e, still on a's
                // v2 {a, b, c, d, e}, relayed d's commit of v2 {a, b, d}; the old guard took
                // e's electorate for the committed one).
                let Some(e) = core.electorate().filter(|e| e.version == *version) else {
                    return Ok(());
                };
                let members: Arc<[NodeId]> = e.members().to_vec().into();
                if let Some(m) = self.committed.get(version) {
                    if *m != members {
                        return Err(Violation::new(
                            "chain",
                            format!(
                                "v{version} committed twice: {:?} and {:?}",
                                names(m),
                                names(&members)
                            ),
                        ));
                    }
                }
                if let Some(prev) = self.committed.get(&(version - 1)) {
                    if !one_apart(prev, &members) {
                        return Err(Violation::new(
                            "chain",
                            format!(
                                "v{version} {:?} committed after v{} {:?}: not one member apart",
                                names(&members),
                                version - 1,
                                names(prev)
                            ),
                        ));
                    }
                }
                self.committed.insert(*version, members);
                self.reached.0 |= Reached::COMMITTED;
                if self.committed.len() >= 2 {
                    self.reached.0 |= Reached::TWO_COMMITTED;
                }
            }
            Notice::ElectorateChanged {
                version, members, ..
            } => {
                if *version == 1 {
                    self.geneses.insert(members.to_vec());
                    self.reached.0 |= Reached::BOOTSTRAPPED;
                    if self.geneses.len() > 1 {
                        let all: Vec<Vec<&str>> = self.geneses.iter().map(|g| names(g)).collect();
                        return Err(Violation::new(
                            "genesis",
                            format!("nodes hold different bootstrap electorates: {all:?}"),
                        ));
                    }
                }
                let newest = self.committed.last_key_value().map(|(v, _)| *v);
                let behind = before.zip(newest).is_some_and(|(b, n)| b < n);
                if behind
                    && *version > before.unwrap_or(0)
                    && core.role() != chorus_core::Role::Admin
                {
                    self.reached.0 |= Reached::CAUGHT_UP;
                }
            }
            Notice::HandingOver {
                term,
                target: Some(t),
                ..
            } => {
                self.handed = node::index(nodes, t).map(|k| (*term, k as u8));
            }
            _ => {}
        }
        Ok(())
    }

    /// The lease check alone, for the world to call between the steps of one action (the
    /// ghost stays in place: only reads).
    pub(crate) fn check_leases_now(&self, nodes: &[Arc<Node>], now: u64) -> Result<(), Violation> {
        lease_holders(nodes, now)
    }

    /// After every transition: leases, and the bootstrap values the acceptors chose.
    pub(crate) fn check_leases(&mut self, nodes: &[Arc<Node>], now: u64) -> Result<(), Violation> {
        lease_holders(nodes, now)?;
        // Chosen: accepted on one ballot by as many acceptors as bootstrap needs.
        let mut by_ballot: BTreeMap<(u64, &str), (usize, &[NodeId])> = BTreeMap::new();
        let mut expect = usize::MAX;
        for n in nodes {
            expect = expect.min(n.core.config().bootstrap_expect as usize);
            if let Some((ballot, e)) = n.core.bootstrap_accepted() {
                let slot = by_ballot
                    .entry((ballot.round, ballot.node.as_str()))
                    .or_insert((0, e.members()));
                slot.0 += 1;
            }
        }
        for ((round, node), (count, members)) in &by_ballot {
            if *count >= expect {
                let ballot = Ballot {
                    round: *round,
                    node: NodeId::from(*node),
                };
                if self.chosen.as_ref().is_none_or(|(b, _)| ballot < *b) {
                    self.chosen = Some((ballot, members.to_vec()));
                }
                self.geneses.insert(members.to_vec());
                if self.geneses.len() > 1 {
                    let all: Vec<Vec<&str>> = self.geneses.iter().map(|g| names(g)).collect();
                    return Err(Violation::new(
                        "genesis",
                        format!("bootstrap chose two electorates: {all:?}"),
                    ));
                }
            }
        }
        // With one node expected a node founds alone, outside Paxos.
        if expect <= 1 {
            return Ok(());
        }
        for (i, n) in nodes.iter().enumerate() {
            let Some((ballot, e)) = n.core.bootstrap_accepted() else {
                continue;
            };
            let me = node::id(i);
            let promised = n.core.bootstrap_promised();
            if promised.is_none_or(|p| ballot > p) {
                return Err(Violation::new(
                    "paxos",
                    format!(
                        "{me} holds an acceptance of ballot {} above its promise {}",
                        show(ballot),
                        promised.map_or("none".into(), show)
                    ),
                ));
            }
            if let Some((b, v)) = &self.chosen {
                if ballot >= b && e.members() != v.as_slice() {
                    return Err(Violation::new(
                        "paxos",
                        format!(
                            "{me} accepted {:?} at ballot {}, but {:?} was chosen at ballot {}",
                            names(e.members()),
                            show(ballot),
                            names(v),
                            show(b)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Ghost {
    /// Node `i` promised `ballot`, reporting its acceptance `accepted`.
    pub(crate) fn promised(
        &mut self,
        i: usize,
        ballot: &Ballot,
        accepted: Option<(&Ballot, &chorus_core::Electorate)>,
    ) {
        // The first report stands: a later promise to the same ballot (a prepare delivered twice)
        // can only report the proposal's own value accepted since, which the proposer cannot
        // have heard before proposing it.
        let accepted = accepted.map(|(b, e)| (b.clone(), e.members().to_vec()));
        let made = self.promises.entry(ballot.clone()).or_default();
        made.entry(i as u8).or_insert(accepted);
    }

    /// Node `i` proposes `value` at `ballot`: P2c (see the module doc).
    pub(crate) fn proposes(
        &self,
        i: usize,
        ballot: &Ballot,
        value: &chorus_core::Electorate,
        expect: usize,
    ) -> Result<(), Violation> {
        let empty = BTreeMap::new();
        let made: Vec<&Reported> = self
            .promises
            .get(ballot)
            .unwrap_or(&empty)
            .values()
            .collect();
        // Some `expect` of the promises (at most 8 nodes: every subset is cheap to try).
        let fits = (0u32..1 << made.len())
            .filter(|set| set.count_ones() as usize == expect)
            .any(|set| {
                let highest = (0..made.len())
                    .filter(|k| set >> k & 1 == 1)
                    .filter_map(|k| made[k].as_ref())
                    .max_by(|a, b| a.0.cmp(&b.0));
                highest.is_none_or(|(_, v)| v.as_slice() == value.members())
            });
        if fits {
            return Ok(());
        }
        let heard: Vec<String> = (self.promises.get(ballot).unwrap_or(&empty).iter())
            .map(|(k, a)| match a {
                Some((b, v)) => {
                    format!("{}: {:?} at {}", node::id(*k as usize), names(v), show(b))
                }
                None => format!("{}: none", node::id(*k as usize)),
            })
            .collect();
        Err(Violation::new(
            "paxos",
            format!(
                "{} proposes {:?} at ballot {}, but no {expect} of the promises made to it report that value as their highest acceptance (promises: {})",
                node::id(i),
                names(value.members()),
                show(ballot),
                heard.join("; ")
            ),
        ))
    }
}

/// Node `i`'s bootstrap promise must not go down in a step (`before` is the promise before it).
pub(crate) fn promise_kept(
    nodes: &[Arc<Node>],
    i: usize,
    before: Option<&Ballot>,
) -> Result<(), Violation> {
    let after = nodes[i].core.bootstrap_promised();
    if after < before {
        return Err(Violation::new(
            "paxos",
            format!(
                "{}'s bootstrap promise went down from {} to {}",
                node::id(i),
                before.map_or("none".into(), show),
                after.map_or("none".into(), show)
            ),
        ));
    }
    Ok(())
}

fn show(b: &Ballot) -> String {
    format!("{}/{}", b.round, b.node)
}

/// No two running nodes hold an unexpired lease now.
fn lease_holders(nodes: &[Arc<Node>], now: u64) -> Result<(), Violation> {
    let holders: Vec<String> = (nodes.iter().enumerate())
        .filter(|(_, n)| n.up && n.core.holds_lease(now))
        .map(|(i, n)| format!("{} (term {})", node::id(i), n.core.term()))
        .collect();
    if holders.len() > 1 {
        return Err(Violation::new(
            "lease",
            format!("at t={} {} all hold a lease", now, holders.join(" and ")),
        ));
    }
    Ok(())
}

fn names(ids: &[NodeId]) -> Vec<&str> {
    ids.iter().map(|i| i.as_str()).collect()
}

fn one_apart(a: &[NodeId], b: &[NodeId]) -> bool {
    let only_a = a.iter().filter(|m| !b.contains(m)).count();
    let only_b = b.iter().filter(|m| !a.contains(m)).count();
    only_a + only_b == 1
}
