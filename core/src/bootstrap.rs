//! Bootstrap: how the eligible nodes of a new cluster agree on one initial electorate, whatever
//! the order and completeness of discovery.
//!
//! It is single-decree Paxos whose value is the electorate and whose quorum is *any*
//! `bootstrap_expect` (k) eligible nodes. The operator's promise is that k is more than half of
//! the eligible nodes that start, so any two quorums share a node, and Paxos guarantees that at
//! most one electorate is ever chosen. A proposer that gathers k promises proposes the highest
//! proposal any of them accepted before, or else exactly those k nodes. Rules, each checked by a
//! test in this file:
//! 1. An acceptor persists its promise and its acceptance (they are core state, so the event
//!    log holds them) and accepts nothing below its promise.
//! 2. Only eligible peers take part, and only with the same `bootstrap_expect`: a prepare with
//!    another is refused (`settings_mismatch`) and reported.
//! 3. A node that knows of an existing electorate — its own, or one reported by an eligible
//!    member of it — never proposes and never promises: a late node joins the existing cluster
//!    (by WHOAMI, `discovery.rs`) and never founds its own. It joins whatever `bootstrap_expect`
//!    the cluster was founded with: the setting is between founders (rule 2), and an electorate
//!    a node holds was chosen already, so a cluster founded alone (k = 1) grows by autopilot.
//! 4. A proposal is chosen once k nodes accepted it; the proposer adopts it and tells its
//!    eligible peers, who adopt it if it has exactly k members.
//!
//! With k = 1 the node's own acceptance is a quorum: a lone node founds its cluster at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{rng, Ballot, Command, Core, Electorate, Message, NodeId, Refusal, Timer};

/// A bootstrap proposal this node is running (volatile: a restart abandons it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Proposal {
    pub(crate) ballot: Ballot,
    /// Phase 1: promises so far, with what each promiser had accepted.
    pub(crate) promises: BTreeMap<NodeId, Option<(Ballot, Arc<Electorate>)>>,
    /// Phase 2: the value proposed, and who accepted it.
    pub(crate) value: Option<Arc<Electorate>>,
    pub(crate) accepted_by: BTreeSet<NodeId>,
    /// Resends so far of the current phase to the peers that have not answered.
    #[serde(default)]
    pub(crate) resends: u32,
}

/// A proposal resends its phase to silent peers this many times before it starts over higher:
/// on a lossy network each phase needs every one of k messages through, and a resend is far
/// cheaper than a new round.
const MAX_RESENDS: u32 = 8;

/// The durable acceptor state of bootstrap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Acceptor {
    /// The highest ballot promised.
    pub(crate) promised: Option<Ballot>,
    /// The highest-ballot proposal accepted.
    pub(crate) accepted: Option<(Ballot, Arc<Electorate>)>,
    /// The highest round this node has seen anywhere, so its next ballot is above it.
    pub(crate) highest_round: u64,
    /// Proposals of this node that yielded to a rival in a row: each doubles the window its
    /// next try is drawn from (see `arm_bootstrap_retry`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) yielded: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Core {
    fn expect(&self) -> usize {
        self.config.bootstrap_expect as usize
    }

    /// Eligible peers known now, in id order (picked, then sorted: a voter of 5 among 100,000
    /// peers sorted them all at every resend).
    fn eligible_peers(&self) -> Vec<NodeId> {
        let mut eligible: Vec<NodeId> = (self.peers.unordered())
            .filter(|(_, p)| p.eligible())
            .map(|(id, _)| id.clone())
            .collect();
        eligible.sort_unstable();
        eligible
    }

    /// Whether this node knows of an existing electorate (its own or a reported one): then it
    /// takes no part in founding one (rule 3).
    pub(crate) fn knows_a_cluster(&self) -> bool {
        self.electorate.is_some() || !self.electorate_reports.is_empty()
    }

    /// Arms the first proposal once `bootstrap_expect` eligible nodes are known. The lowest id
    /// goes first; the others wait a slot per rank, which also gives WHOAMI replies time to
    /// say a cluster exists already.
    pub(crate) fn maybe_bootstrap(&mut self, out: &mut Vec<Command>) {
        if self.knows_a_cluster() || !self.is_eligible() || self.proposal.is_some() {
            return;
        }
        let expect = self.expect();
        if expect <= 1 {
            // A quorum of one: this node alone founds the cluster.
            let e = Arc::new(Electorate::new(1, vec![self.id.clone()]));
            let ballot = Ballot {
                round: 1,
                node: self.id.clone(),
            };
            self.accept(ballot, e.clone(), out);
            return self.adopt_electorate(e, out);
        }
        // Counted, not walked: a node that hears of thousands of workers does not walk its peer
        // table at each (quadratic at a cold start).
        if self.timers.deadline(Timer::Bootstrap).is_some()
            || self.peers.eligible_count() + 1 < expect
        {
            return;
        }
        let rank = self
            .peers
            .unordered()
            .filter(|(id, p)| p.eligible() && **id < self.id)
            .count() as u64;
        let delay = self.config.election_slot_min_ms * (rank + 1);
        self.timers.set(Timer::Bootstrap, self.now_ms + delay, out);
    }

    pub(crate) fn on_bootstrap_timer(&mut self, out: &mut Vec<Command>) {
        if self.resend_phase(out) {
            return;
        }
        // A proposal that resent enough has failed (a rival, peers gone): start over higher.
        self.proposal = None;
        if self.knows_a_cluster() || !self.is_eligible() {
            return;
        }
        let eligible = self.eligible_peers();
        if eligible.len() + 1 < self.expect() || self.acceptor.highest_round >= crate::MAX_WIRE_INT
        {
            return;
        }
        let round = self.acceptor.highest_round + 1;
        let ballot = Ballot {
            round,
            node: self.id.clone(),
        };
        self.acceptor.highest_round = round;
        // This node is its own first acceptor.
        self.acceptor.promised = Some(ballot.clone());
        let mut promises = BTreeMap::new();
        promises.insert(self.id.clone(), self.acceptor.accepted.clone());
        self.proposal = Some(Proposal {
            ballot: ballot.clone(),
            promises,
            value: None,
            accepted_by: BTreeSet::new(),
            resends: 0,
        });
        let expect = self.config.bootstrap_expect;
        for peer in eligible {
            out.push(Command::Send {
                to: peer,
                msg: Message::BootstrapPrepare {
                    ballot: ballot.clone(),
                    expect,
                },
            });
        }
        self.arm_resend(out);
    }

    /// Resends back off: each waits twice as long as the one before, up to 16 times the first,
    /// so a proposal outlives slow round trips. At a fixed pace a proposal gave up after 1.6 s
    /// (with 2 s discovery), so on links whose round trips take longer — a TCP segment lost
    /// under load and retransmitted, 50–1,000 ms latencies — every proposal failed and the
    /// cluster never founded (found on real nodes under 20 % loss and 50–150 ms delay).
    fn arm_resend(&mut self, out: &mut Vec<Command>) {
        let base = (self.config.discovery_timeout_ms / 10).max(self.config.election_slot_min_ms);
        let doublings = self.proposal.as_ref().map_or(0, |p| p.resends).min(4);
        let every = base.saturating_mul(1 << doublings);
        self.timers.set(Timer::Bootstrap, self.now_ms + every, out);
    }

    /// Resends the running proposal's phase to the eligible peers that have not answered it.
    /// Returns false when there is nothing to resend or the resends are used up.
    fn resend_phase(&mut self, out: &mut Vec<Command>) -> bool {
        let peers = self.eligible_peers();
        let expect = self.config.bootstrap_expect;
        let Some(p) = self.proposal.as_mut() else {
            return false;
        };
        if p.resends >= MAX_RESENDS {
            return false;
        }
        p.resends += 1;
        for peer in peers {
            let msg = match &p.value {
                None if !p.promises.contains_key(&peer) => Message::BootstrapPrepare {
                    ballot: p.ballot.clone(),
                    expect,
                },
                Some(v) if !p.accepted_by.contains(&peer) => Message::BootstrapAccept {
                    ballot: p.ballot.clone(),
                    electorate: v.clone(),
                },
                _ => continue,
            };
            out.push(Command::Send { to: peer, msg });
        }
        self.arm_resend(out);
        true
    }

    /// Retries after a random wait, so duelling proposers draw apart. The window doubles with
    /// each proposal in a row that yielded (up to 32 times the discovery timeout): with a fixed
    /// window of one discovery timeout, proposers whose prepares took about as long as the window
    /// to arrive kept pre-empting each other for ever (a 50–2,500 ms latency in the simulator).
    fn arm_bootstrap_retry(&mut self, out: &mut Vec<Command>) {
        let window = self
            .config
            .discovery_timeout_ms
            .saturating_mul(1 << self.acceptor.yielded.min(5));
        self.acceptor.yielded = self.acceptor.yielded.saturating_add(1);
        let wait = self.config.discovery_timeout_ms + rng::below(&mut self.rng, window + 1);
        self.timers.set(Timer::Bootstrap, self.now_ms + wait, out);
    }

    /// Rule 2: bootstrap messages count only from eligible peers.
    fn bootstrap_sender_ok(
        &self,
        from: &NodeId,
        kind: &'static str,
        out: &mut Vec<Command>,
    ) -> bool {
        if self.peers.get(from).is_some_and(|p| p.eligible()) {
            return true;
        }
        self.refuse(from.clone(), kind, Refusal::NotEligible, out);
        false
    }

    fn reply(&self, to: NodeId, msg: Message, out: &mut Vec<Command>) {
        out.push(Command::Send { to, msg });
    }

    fn refusal(&self, ballot: Ballot) -> Message {
        Message::BootstrapRefused {
            ballot,
            promised: self.acceptor.promised.clone(),
            formed: self.knows_a_cluster(),
        }
    }

    /// Sees `round` in a peer's ballot: this node's next proposal goes above it.
    fn saw_round(&mut self, round: u64) {
        self.acceptor.highest_round = self.acceptor.highest_round.max(round);
    }

    /// A promise to a higher ballot than this node's own proposal ends that proposal: it could
    /// no longer accept it itself.
    fn yield_to(&mut self, ballot: &Ballot, out: &mut Vec<Command>) {
        if self.proposal.as_ref().is_some_and(|p| p.ballot < *ballot) {
            self.proposal = None;
            self.arm_bootstrap_retry(out);
        }
    }

    /// The acceptor's checks, shared by prepare and accept: an eligible sender proposing in its
    /// own name with this node's settings (else a counted refusal), and a ballot at least this
    /// node's promise while it knows no cluster (else a `bootstrap_refused` reply).
    fn may_promise(
        &mut self,
        from: &NodeId,
        ballot: &Ballot,
        kind: &'static str,
        same_settings: bool,
        out: &mut Vec<Command>,
    ) -> bool {
        if !self.bootstrap_sender_ok(from, kind, out) {
            return false;
        }
        if ballot.node != *from {
            self.refuse(from.clone(), kind, Refusal::Unsolicited, out);
            return false;
        }
        if !same_settings {
            self.refuse(from.clone(), kind, Refusal::SettingsMismatch, out);
            return false;
        }
        self.saw_round(ballot.round);
        let may = !self.knows_a_cluster()
            && self.is_eligible()
            && self.acceptor.promised.as_ref().is_none_or(|p| ballot >= p);
        if !may {
            let msg = self.refusal(ballot.clone());
            self.reply(from.clone(), msg, out);
        }
        may
    }

    pub(crate) fn on_bootstrap_prepare(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        expect: u32,
        out: &mut Vec<Command>,
    ) {
        let same_settings = expect == self.config.bootstrap_expect;
        if !self.may_promise(&from, &ballot, "bootstrap_prepare", same_settings, out) {
            return;
        }
        self.acceptor.promised = Some(ballot.clone());
        self.yield_to(&ballot, out);
        let msg = Message::BootstrapPromise {
            ballot,
            accepted: self.acceptor.accepted.clone(),
        };
        self.reply(from, msg, out);
    }

    pub(crate) fn on_bootstrap_promise(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        accepted: Option<(Ballot, Arc<Electorate>)>,
        out: &mut Vec<Command>,
    ) {
        if !self.bootstrap_sender_ok(&from, "bootstrap_promise", out) {
            return;
        }
        let expect = self.expect();
        let Some(p) = self.proposal.as_mut().filter(|p| p.ballot == ballot) else {
            return self.refuse_reply(from, "bootstrap_promise", &ballot, out);
        };
        if p.value.is_some() {
            return; // Phase 2 already: a late promise adds nothing.
        }
        p.promises.insert(from, accepted);
        if p.promises.len() < expect {
            return;
        }
        // k promises: propose the highest accepted proposal among them, or else these k.
        let value = p
            .promises
            .values()
            .flatten()
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| Arc::new(Electorate::new(1, p.promises.keys().cloned().collect())));
        p.value = Some(value.clone());
        p.accepted_by.insert(self.id.clone());
        self.accept(ballot.clone(), value.clone(), out);
        for peer in self.eligible_peers() {
            out.push(Command::Send {
                to: peer,
                msg: Message::BootstrapAccept {
                    ballot: ballot.clone(),
                    electorate: value.clone(),
                },
            });
        }
        self.check_chosen(out);
    }

    /// Records this node's acceptance of `value` at `ballot` (rule 1: durable with the core)
    /// and reports it, so that observers can judge bootstrap's safety from acceptances alone.
    fn accept(&mut self, ballot: Ballot, value: Arc<Electorate>, out: &mut Vec<Command>) {
        out.push(Command::Notice(crate::Notice::BootstrapAccepted {
            ballot: ballot.clone(),
            members: value.shared_members(),
        }));
        self.acceptor.accepted = Some((ballot, value));
    }

    /// A reply about a ballot this node is not running: stale if it was one of ours.
    fn refuse_reply(
        &self,
        from: NodeId,
        kind: &'static str,
        ballot: &Ballot,
        out: &mut Vec<Command>,
    ) {
        let ours = ballot.node == self.id && ballot.round <= self.acceptor.highest_round;
        let reason = if ours {
            Refusal::Stale
        } else {
            Refusal::Unsolicited
        };
        self.refuse(from, kind, reason, out);
    }

    pub(crate) fn on_bootstrap_accept(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        electorate: Arc<Electorate>,
        out: &mut Vec<Command>,
    ) {
        let same_settings = electorate.len() == self.expect();
        if !self.may_promise(&from, &ballot, "bootstrap_accept", same_settings, out) {
            return;
        }
        self.acceptor.promised = Some(ballot.clone());
        self.accept(ballot.clone(), electorate, out);
        self.yield_to(&ballot, out);
        self.reply(from, Message::BootstrapAccepted { ballot }, out);
    }

    pub(crate) fn on_bootstrap_accepted(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        out: &mut Vec<Command>,
    ) {
        if !self.bootstrap_sender_ok(&from, "bootstrap_accepted", out) {
            return;
        }
        match self.proposal.as_mut() {
            Some(p) if p.ballot == ballot && p.value.is_some() => {
                p.accepted_by.insert(from);
                self.check_chosen(out);
            }
            _ => self.refuse_reply(from, "bootstrap_accepted", &ballot, out),
        }
    }

    pub(crate) fn on_bootstrap_refused(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        promised: Option<Ballot>,
        formed: bool,
        out: &mut Vec<Command>,
    ) {
        if !self.bootstrap_sender_ok(&from, "bootstrap_refused", out) {
            return;
        }
        if self.proposal.as_ref().is_none_or(|p| p.ballot != ballot) {
            return self.refuse_reply(from, "bootstrap_refused", &ballot, out);
        }
        if let Some(p) = &promised {
            self.saw_round(p.round);
        }
        if formed {
            // A cluster exists: stop founding one and ask the replier for its electorate.
            self.proposal = None;
            self.timers.cancel(Timer::Bootstrap, out);
            if !self.whoami_pending.contains(&from) {
                self.send_whoami(from, out);
            }
        } else if promised.is_some_and(|p| p > ballot) {
            self.proposal = None;
            self.arm_bootstrap_retry(out);
        }
    }

    fn check_chosen(&mut self, out: &mut Vec<Command>) {
        let Some(p) = &self.proposal else { return };
        let Some(value) = &p.value else { return };
        if p.accepted_by.len() < self.expect() {
            return;
        }
        let value = value.clone();
        for peer in self.eligible_peers() {
            out.push(Command::Send {
                to: peer,
                msg: Message::BootstrapChosen {
                    electorate: value.clone(),
                },
            });
        }
        self.adopt_electorate(value, out);
    }

    pub(crate) fn on_bootstrap_chosen(
        &mut self,
        from: NodeId,
        electorate: Arc<Electorate>,
        out: &mut Vec<Command>,
    ) {
        if !self.bootstrap_sender_ok(&from, "bootstrap_chosen", out) {
            return;
        }
        if let Some(mine) = &self.electorate {
            if mine.genesis != electorate.genesis {
                self.refuse(from, "bootstrap_chosen", Refusal::ForeignCluster, out);
            }
            return;
        }
        // Chosen means accepted by k nodes; the proposer need not be one of the members.
        if electorate.len() != self.expect() {
            return self.refuse(from, "bootstrap_chosen", Refusal::SettingsMismatch, out);
        }
        self.adopt_electorate(electorate, out);
    }

    /// Takes `e` as this node's electorate: bootstrap ends, and the node may stand.
    pub(crate) fn adopt_electorate(&mut self, e: Arc<Electorate>, out: &mut Vec<Command>) {
        self.proposal = None;
        self.timers.cancel(Timer::Bootstrap, out);
        self.electorate_reports.clear();
        self.set_electorate(e, out);
        // The electorate was chosen just now and this node never held a term: no admin can be
        // around to be found, so stand (after its rank slot) instead of waiting out the
        // discovery timeout. Pre-vote still asks first; a voter that has not heard the choice
        // yet refuses, and the round waits for the others (issue 36: ~2 s of every cold start).
        let fresh = self.term == 0 && self.admin.is_none();
        if fresh && self.can_stand() && self.timers.deadline(Timer::Election).is_none() {
            self.arm_stand(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::*;
    use crate::{Command, Config, Core, Event, Message, Refusal, Timer, ADMIN_ELECTION};

    fn cfg(expect: u32) -> Config {
        Config {
            bootstrap_expect: expect,
            ..Config::default()
        }
    }

    fn fresh(id: &str, expect: u32) -> Core {
        let mut c = Core::new(id.into(), cfg(expect), vec![ADMIN_ELECTION.into()], 7).unwrap();
        c.step_vec(0, Event::Started);
        c
    }

    /// Duelling proposers draw apart: each proposal in a row that yields to a rival doubles the
    /// window its next try is drawn from, and the count survives a snapshot, so a restarted
    /// node does not duel at the narrowest window again.
    ///
    /// Kills `is_zero`'s `==` → `!=` (a non-zero count was left out of the snapshot), and
    /// `arm_bootstrap_retry`'s `1 << yielded` → `>>`, `window + 1` → `-`, `*`.
    #[test]
    fn each_yield_widens_the_retry_window_and_a_snapshot_keeps_it() {
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("c", true));
        let d = c.config.discovery_timeout_ms;
        for n in 0..3u32 {
            let at = c.timers.deadline(Timer::Bootstrap).expect("armed");
            c.step_vec(
                at,
                Event::TimerFired {
                    timer: Timer::Bootstrap,
                },
            );
            let round = c.proposal.as_ref().expect("proposing").ballot.round;
            let rival = Message::BootstrapPrepare {
                ballot: crate::Ballot {
                    round: round + 1,
                    node: "b".into(),
                },
                expect: 3,
            };
            let mut rng = c.rng.clone();
            c.step_vec(at, from("b", rival));
            assert!(c.proposal.is_none(), "yielded");
            assert_eq!(c.acceptor.yielded, n + 1);
            let wait = c.timers.deadline(Timer::Bootstrap).expect("retry armed") - at;
            assert!(
                wait >= d && wait <= d + (d << n),
                "yield {n}: waits {wait} ms"
            );
            // Exactly one draw, uniform over the whole window, both ends included.
            assert_eq!(
                wait,
                d + crate::rng::below(&mut rng, (d << n) + 1),
                "yield {n}"
            );
        }
        let restored = Core::restore(&c.snapshot()).unwrap();
        assert_eq!(restored.acceptor.yielded, 3);
        assert_eq!(restored, c);
    }

    /// The first proposal is staggered by rank: the lowest id goes first, each other a slot
    /// (`election_slot_min_ms`) per node ranked below it later.
    ///
    /// Kills `maybe_bootstrap`'s rank `p < id` → `==`, `>`; `slot × (rank + 1)` → `+`, `/`.
    /// (`<` → `<=` is equivalent: a node is never its own peer.)
    #[test]
    fn the_first_proposal_waits_one_slot_per_lower_ranked_node() {
        let slot = cfg(3).election_slot_min_ms;
        assert_eq!(slot, 100);
        for (id, slots) in [("a", 1), ("b", 2), ("c", 3)] {
            let mut c = fresh(id, 3);
            for peer in ["a", "b", "c"].into_iter().filter(|p| *p != id) {
                c.step_vec(0, up(peer, true));
            }
            assert_eq!(
                c.timers.deadline(Timer::Bootstrap),
                Some(slots * slot),
                "{id}"
            );
        }
    }

    /// A proposal nobody answers resends its phase to the silent peers at a pace that doubles,
    /// up to 16 times the first interval (a tenth of the discovery timeout), eight times, then
    /// starts over higher.
    ///
    /// Kills `arm_resend` → `()` and its doubling's mutants (`<<`, `min(4)`, `max`).
    #[test]
    fn an_unanswered_proposal_resends_at_a_doubling_pace_then_starts_over() {
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("c", true));
        let base = c.config.discovery_timeout_ms / 10;
        let mut at = c.timers.deadline(Timer::Bootstrap).expect("armed");
        let first = c.step_vec(
            at,
            Event::TimerFired {
                timer: Timer::Bootstrap,
            },
        );
        let round = c.proposal.as_ref().expect("proposing").ballot.round;
        assert_eq!(prepares_sent(&first), 2);
        let mut gaps = Vec::new();
        for _ in 0..8 {
            let next = c
                .timers
                .deadline(Timer::Bootstrap)
                .expect("a resend is armed");
            gaps.push(next - at);
            at = next;
            let out = c.step_vec(
                at,
                Event::TimerFired {
                    timer: Timer::Bootstrap,
                },
            );
            assert_eq!(prepares_sent(&out), 2, "resent to b and c");
            assert_eq!(c.proposal.as_ref().unwrap().ballot.round, round);
        }
        let x = |k: u64| k * base;
        assert_eq!(gaps, [x(1), x(2), x(4), x(8), x(16), x(16), x(16), x(16)]);
        // The resends are used up: the next firing starts a new, higher round.
        let next = c.timers.deadline(Timer::Bootstrap).expect("armed");
        c.step_vec(
            next,
            Event::TimerFired {
                timer: Timer::Bootstrap,
            },
        );
        assert_eq!(c.proposal.as_ref().unwrap().ballot.round, round + 1);
    }

    /// A resend goes only to the peers that have not answered the running phase: promised
    /// peers get no second prepare, accepting peers no second accept.
    ///
    /// Kills `resend_phase`'s `!promises.contains_key` → `true` and `!accepted_by.contains`
    /// → `true`, `false`, `contains`.
    #[test]
    fn a_resend_goes_only_to_the_peers_that_have_not_answered() {
        let mut c = fresh("a", 3);
        for p in ["b", "c", "d"] {
            c.step_vec(0, up(p, true));
        }
        let fire = |c: &mut Core| {
            let at = c.timers.deadline(Timer::Bootstrap).expect("armed");
            c.step_vec(
                at,
                Event::TimerFired {
                    timer: Timer::Bootstrap,
                },
            )
        };
        let prepare = |p: &str| (p.to_owned(), "bootstrap_prepare");
        let accept = |p: &str| (p.to_owned(), "bootstrap_accept");
        assert_eq!(
            sends(&fire(&mut c)),
            [prepare("b"), prepare("c"), prepare("d")]
        );
        let ballot = c.proposal.as_ref().expect("proposing").ballot.clone();
        let promise = Message::BootstrapPromise {
            ballot: ballot.clone(),
            accepted: None,
        };
        c.step_vec(c.now_ms, from("b", promise.clone()));
        assert_eq!(sends(&fire(&mut c)), [prepare("c"), prepare("d")]);
        // The third promise (with a's own) starts phase 2, to every eligible peer.
        let out = c.step_vec(c.now_ms, from("c", promise));
        assert_eq!(sends(&out), [accept("b"), accept("c"), accept("d")]);
        c.step_vec(c.now_ms, from("b", Message::BootstrapAccepted { ballot }));
        assert_eq!(sends(&fire(&mut c)), [accept("c"), accept("d")]);
    }

    /// Only eligible peers known now count towards `bootstrap_expect`: one that comes back
    /// without `admin_election`, or goes down, no longer does (the count is kept with the peer
    /// table, and a restored core counts again).
    ///
    /// Kills `PeerTable::connect`'s and `remove`'s `-=` → `+=` and deletion, the count rebuilt
    /// when a snapshot is read, and `on_started`'s clear → none.
    #[test]
    fn only_eligible_peers_known_now_count_towards_bootstrap_expect() {
        let armed = |c: &Core| c.timers.deadline(Timer::Bootstrap).is_some();
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("b", false));
        c.step_vec(0, up("c", true));
        assert!(!armed(&c), "b came back a worker: a and c are two of three");
        c.step_vec(0, up("d", true));
        assert!(armed(&c), "a, c and d");

        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, Event::PeerDown { peer: "b".into() });
        c.step_vec(0, up("c", true));
        assert!(!armed(&c), "b went down: a and c are two of three");
        let mut restored = Core::restore(&c.snapshot()).unwrap();
        assert_eq!(restored, c);
        restored.step_vec(0, up("d", true));
        assert!(armed(&restored), "restored: a, c and d");

        // A restart forgets the peers known before it.
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(1, Event::Started);
        c.step_vec(1, up("c", true));
        assert!(!armed(&c), "after the restart: a and c are two of three");
    }

    /// A refusal of the running proposal: one promised to a higher ballot ends it and retries
    /// later, above the round it names; one promised to this very ballot changes nothing; one
    /// saying a cluster exists ends founding and asks the replier who its admin is (once).
    ///
    /// Kills `on_bootstrap_refused` → `()`, its sender check's `!` deleted, the ballot check's
    /// `!=` → `==`, `promised > ballot` → `==`, `<`, `>=`, and the WHOAMI guard's `!` deleted.
    #[test]
    fn a_refused_proposal_yields_to_a_higher_promise_or_to_a_formed_cluster() {
        let start = |c: &mut Core| {
            c.step_vec(0, up("b", true));
            c.step_vec(0, up("c", true));
            let at = c.timers.deadline(Timer::Bootstrap).expect("armed");
            c.step_vec(
                at,
                Event::TimerFired {
                    timer: Timer::Bootstrap,
                },
            );
            c.proposal.as_ref().expect("proposing").ballot.clone()
        };
        let refused = |ballot: &crate::Ballot, promised: Option<crate::Ballot>, formed| {
            from(
                "b",
                Message::BootstrapRefused {
                    ballot: ballot.clone(),
                    promised,
                    formed,
                },
            )
        };
        // Promised to this same ballot: nothing changes.
        let mut c = fresh("a", 3);
        let mine = start(&mut c);
        c.step_vec(c.now_ms, refused(&mine, Some(mine.clone()), false));
        assert_eq!(c.proposal.as_ref().map(|p| &p.ballot), Some(&mine));

        // Promised higher: the proposal ends, a retry is armed, the next round goes above.
        let mut c = fresh("a", 3);
        let mine = start(&mut c);
        let higher = crate::Ballot {
            round: mine.round + 5,
            node: "c".into(),
        };
        c.step_vec(c.now_ms, refused(&mine, Some(higher), false));
        assert!(c.proposal.is_none(), "yielded");
        assert!(c.timers.deadline(Timer::Bootstrap).is_some(), "retry armed");
        assert_eq!(c.acceptor.highest_round, mine.round + 5);

        // A cluster exists: founding stops, and b is asked who its admin is.
        let mut c = fresh("a", 3);
        let mine = start(&mut c);
        let out = c.step_vec(c.now_ms, refused(&mine, None, true));
        assert!(c.proposal.is_none());
        assert_eq!(c.timers.deadline(Timer::Bootstrap), None, "timer cancelled");
        // b was asked at connect and has not answered yet: it is not asked twice.
        assert!(c.whoami_pending.contains(&crate::NodeId::from("b")));
        assert_eq!(sends(&out), []);
    }

    fn prepares_sent(out: &[Command]) -> usize {
        out.iter()
            .filter(|c| {
                matches!(
                    c,
                    Command::Send {
                        msg: Message::BootstrapPrepare { .. },
                        ..
                    }
                )
            })
            .count()
    }

    /// Rule 2 at the proposer: a node that no longer advertises `admin_election` when its
    /// bootstrap timer fires (its configuration dropped it) proposes nothing, though the timer
    /// was armed while it was eligible.
    ///
    /// Kills `on_bootstrap_timer`'s `knows_a_cluster() || !is_eligible()` → `&&`.
    #[test]
    fn a_node_no_longer_eligible_when_its_bootstrap_timer_fires_proposes_nothing() {
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("c", true));
        let at = c.timers.deadline(Timer::Bootstrap).expect("armed");
        c.step_vec(
            1,
            Event::CapabilitiesChanged {
                capabilities: vec!["docker".into()],
            },
        );
        let out = c.step_vec(
            at,
            Event::TimerFired {
                timer: Timer::Bootstrap,
            },
        );
        assert_eq!(prepares_sent(&out), 0, "{out:?}");
        assert!(c.proposal.is_none());
    }

    /// A proposal needs `bootstrap_expect` eligible nodes when it starts, not only when its
    /// timer was armed: a peer gone in between leaves the node waiting. And no ballot goes past
    /// the wire's integer range: a node whose rounds reached it proposes no more.
    ///
    /// Kills `on_bootstrap_timer`'s `eligible.len() + 1 < expect || highest_round >=
    /// MAX_WIRE_INT` → `&&` (both halves).
    #[test]
    fn no_proposal_starts_short_of_the_expected_nodes_or_at_the_top_round() {
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("c", true));
        let at = c.timers.deadline(Timer::Bootstrap).expect("armed");
        c.step_vec(1, Event::PeerDown { peer: "c".into() });
        let out = c.step_vec(
            at,
            Event::TimerFired {
                timer: Timer::Bootstrap,
            },
        );
        assert_eq!(prepares_sent(&out), 0, "c is gone: {out:?}");
        assert!(c.proposal.is_none());

        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("c", true));
        c.acceptor.highest_round = crate::MAX_WIRE_INT;
        let at = c.timers.deadline(Timer::Bootstrap).expect("armed");
        let out = c.step_vec(
            at,
            Event::TimerFired {
                timer: Timer::Bootstrap,
            },
        );
        assert_eq!(prepares_sent(&out), 0, "no round above the top: {out:?}");
        assert_eq!(c.acceptor.highest_round, crate::MAX_WIRE_INT);
    }

    /// Every acceptance is reported with its ballot and value, before the electorate it may
    /// found: a lone node's own, a proposer's own when it starts phase 2, and an acceptor's.
    /// The simulator judges bootstrap's safety from these notices alone.
    #[test]
    fn every_acceptance_is_reported_with_its_ballot_and_value() {
        let accepted = |out: &[Command]| -> Vec<(crate::Ballot, Vec<String>)> {
            out.iter()
                .filter_map(|c| match c {
                    Command::Notice(crate::Notice::BootstrapAccepted { ballot, members }) => {
                        Some((
                            ballot.clone(),
                            members.iter().map(|m| m.to_string()).collect(),
                        ))
                    }
                    _ => None,
                })
                .collect()
        };
        let ballot = |round, node: &str| crate::Ballot {
            round,
            node: node.into(),
        };
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        // A lone node accepts its own electorate as it founds it.
        let mut solo = Core::new("solo".into(), cfg(1), vec![ADMIN_ELECTION.into()], 7).unwrap();
        let out = solo.step_vec(0, Event::Started);
        assert_eq!(accepted(&out), [(ballot(1, "solo"), names(&["solo"]))]);
        let founded = out
            .iter()
            .position(|c| matches!(c, Command::Notice(crate::Notice::ElectorateChanged { .. })));
        let reported = out
            .iter()
            .position(|c| matches!(c, Command::Notice(crate::Notice::BootstrapAccepted { .. })));
        assert!(reported < founded, "{out:?}");

        // A proposer accepts its own value when its k-th promise comes in.
        let mut a = fresh("a", 3);
        for p in ["b", "c"] {
            a.step_vec(0, up(p, true));
        }
        fire(&mut a, Timer::Bootstrap);
        let mine = a.proposal.as_ref().expect("proposing").ballot.clone();
        let promise = Message::BootstrapPromise {
            ballot: mine.clone(),
            accepted: None,
        };
        let now = a.now_ms;
        assert_eq!(accepted(&a.step_vec(now, from("b", promise.clone()))), []);
        let out = a.step_vec(now, from("c", promise));
        assert_eq!(accepted(&out), [(mine, names(&["a", "b", "c"]))]);

        // An acceptor reports what it accepts, and nothing for what it refuses.
        let mut c = fresh("c", 3);
        for p in ["a", "b"] {
            c.step_vec(0, up(p, true));
        }
        let e = std::sync::Arc::new(crate::Electorate::new(
            1,
            vec!["a".into(), "b".into(), "c".into()],
        ));
        let accept = |round, node: &str| Message::BootstrapAccept {
            ballot: ballot(round, node),
            electorate: e.clone(),
        };
        let out = c.step_vec(1, from("b", accept(2, "b")));
        assert_eq!(accepted(&out), [(ballot(2, "b"), names(&["a", "b", "c"]))]);
        assert_eq!(accepted(&c.step_vec(2, from("a", accept(1, "a")))), []);
    }

    #[test]
    fn a_lone_node_founds_its_cluster_when_one_is_expected() {
        let c = fresh("solo", 1);
        let e = c.electorate().unwrap();
        assert_eq!((e.version, e.members().len()), (1, 1));
    }

    #[test]
    fn nobody_founds_before_k_eligible_nodes_are_known() {
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("w", false));
        assert_eq!(c.timers.deadline(Timer::Bootstrap), None);
        c.step_vec(0, up("c", true));
        assert!(c.timers.deadline(Timer::Bootstrap).is_some());
        assert!(c.electorate().is_none());
    }

    #[test]
    fn a_prepare_with_another_expect_or_from_a_worker_is_refused() {
        let mut c = fresh("a", 3);
        c.step_vec(0, up("b", true));
        c.step_vec(0, up("w", false));
        let prep = |node: &str, expect| Message::BootstrapPrepare {
            ballot: crate::Ballot {
                round: 1,
                node: node.into(),
            },
            expect,
        };
        let refused = |out: &[Command]| match out {
            [Command::Notice(crate::Notice::Refused { reason, .. })] => *reason,
            other => panic!("one refusal expected: {other:?}"),
        };
        assert_eq!(
            refused(&c.step_vec(1, from("b", prep("b", 5)))),
            Refusal::SettingsMismatch
        );
        assert_eq!(
            refused(&c.step_vec(1, from("w", prep("w", 3)))),
            Refusal::NotEligible
        );
        assert_eq!(
            refused(&c.step_vec(1, from("b", prep("x", 3)))),
            Refusal::Unsolicited
        );
        assert_eq!(c.acceptor.promised, None);
    }

    #[test]
    fn an_acceptor_never_goes_below_its_promise() {
        let mut c = fresh("a", 3);
        for p in ["b", "c"] {
            c.step_vec(0, up(p, true));
        }
        let ballot = |round, node: &str| crate::Ballot {
            round,
            node: node.into(),
        };
        let out = c.step_vec(
            1,
            from(
                "c",
                Message::BootstrapPrepare {
                    ballot: ballot(2, "c"),
                    expect: 3,
                },
            ),
        );
        assert!(matches!(
            sent_to(&out, "c").as_slice(),
            [Message::BootstrapPromise { .. }]
        ));
        let e = std::sync::Arc::new(crate::Electorate::new(
            1,
            vec!["a".into(), "b".into(), "c".into()],
        ));
        let out = c.step_vec(
            2,
            from(
                "b",
                Message::BootstrapAccept {
                    ballot: ballot(1, "b"),
                    electorate: e.clone(),
                },
            ),
        );
        assert!(
            matches!(
                sent_to(&out, "b").as_slice(),
                [Message::BootstrapRefused { promised: Some(p), formed: false, .. }] if *p == ballot(2, "c")
            ),
            "{out:?}"
        );
        assert_eq!(c.acceptor.accepted, None);
        // Its own next proposal goes above every round it has seen.
        fire(&mut c, Timer::Bootstrap);
        assert_eq!(c.proposal.as_ref().unwrap().ballot, ballot(3, "a"));
    }

    /// Rule 3: a node that has heard of an electorate neither proposes nor promises.
    #[test]
    fn a_node_that_knows_a_cluster_does_not_found_one() {
        let mut c = fresh("j", 3);
        let e = std::sync::Arc::new(crate::Electorate::new(
            1,
            vec!["a".into(), "b".into(), "c".into()],
        ));
        c.step_vec(0, up("a", true));
        let reply = Message::WhoamiReply {
            admin: None,
            term: 3,
            membership_version: 1,
            beat: 0,
            eligible: true,
            uptime_s: 0,
            resources: Default::default(),
            electorate: Some(e.clone()),
            genesis: e.genesis,
            electorate_stamp: 0,
        };
        c.step_vec(1, from("a", reply));
        assert_eq!(
            c.electorate(),
            Some(&*e),
            "one member's word is enough here"
        );
        c.step_vec(2, up("k", true));
        c.step_vec(2, up("l", true));
        assert_eq!(c.timers.deadline(Timer::Bootstrap), None);
        let out = c.step_vec(
            3,
            from(
                "k",
                Message::BootstrapPrepare {
                    ballot: crate::Ballot {
                        round: 1,
                        node: "k".into(),
                    },
                    expect: 3,
                },
            ),
        );
        assert!(matches!(
            sent_to(&out, "k").as_slice(),
            [Message::BootstrapRefused { formed: true, .. }]
        ));
    }
}
