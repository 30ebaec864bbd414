//! A world: the cores, the network between them, the partition, the clock and the ghost
//! variables; the adversary's actions and what each does.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chorus_core::{
    Advert, Command, Config, Core, Event, MemberChange, Message, NodeId, PeerInfo, Role,
    ADMIN_ELECTION,
};

use crate::check::{Ghost, Violation};
use crate::node::hash_bytes;
pub use crate::node::Node;

/// Where a search starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every node just started, knowing every other: bootstrap and the first election are
    /// explored.
    Cold,
    /// After a fault-free run from a cold start to the point where every node follows one
    /// established admin and nothing is in flight.
    Elected,
}

/// How much of each fault the adversary may use on one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Crashes (each crashed node may restart any time after).
    pub crashes: u8,
    /// Messages dropped one by one (a partition drops whole groups' messages besides).
    pub drops: u8,
    /// Messages delivered twice.
    pub dups: u8,
    /// Membership changes an operator asks the admin for.
    pub changes: u8,
    /// Partitions set (heals are free).
    pub splits: u8,
    /// Timer firings: time is the one unbounded resource, so it gets a budget too.
    pub fires: u8,
    /// Handovers: an operator's `members transfer` asked of the admin, or a graceful stop
    /// (the node steps down, hands over, and is gone; it may restart any time after).
    pub handovers: u8,
}

/// The cluster checked and how.
#[derive(Clone, Debug)]
pub struct Model {
    /// Number of nodes, every one admin-eligible (named `a`, `b`, …).
    pub nodes: usize,
    /// `bootstrap_expect`: the first electorate's size; the others start as standbys.
    pub expect: u32,
    /// Protocol settings for every node (`bootstrap_expect` is set from `expect`).
    pub config: Config,
    /// Where to start.
    pub start: Start,
    /// The adversary's budgets.
    pub limits: Limits,
    /// Operator changes may also be asked at followers (which forward them), not only at the
    /// admin.
    pub ask_followers: bool,
    /// Offer [`Action::Settle`] besides single deliveries.
    pub settle: bool,
}

impl Model {
    /// A small cluster with short timings: `nodes` eligible nodes of which `expect` form the
    /// first electorate. Autopilot off (turn it on in `config`).
    pub fn small(nodes: usize, expect: u32) -> Model {
        let config = Config {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 450,
            discovery_timeout_ms: 150,
            election_slot_min_ms: 10,
            bootstrap_expect: expect,
            autopilot: false,
            stabilization_time_ms: 200,
            dead_voter_timeout_ms: 600,
            min_quorum: 1,
            max_voters: 5,
            ..Config::default()
        };
        Model {
            nodes,
            expect,
            config,
            start: Start::Elected,
            limits: Limits {
                crashes: 0,
                drops: 0,
                dups: 0,
                changes: 1,
                splits: 1,
                fires: 8,
                handovers: 0,
            },
            ask_followers: false,
            settle: true,
        }
    }

    /// Node `i`'s id.
    pub fn id(i: usize) -> NodeId {
        crate::node::id(i)
    }
}

/// One message on its way: kept with its serialized form, which orders and hashes it.
#[derive(Clone, Debug)]
pub struct Packet {
    /// Sender index.
    pub from: u8,
    /// Receiver index.
    pub to: u8,
    /// The message.
    pub msg: Message,
    bytes: Arc<[u8]>,
}

impl Packet {
    fn new(from: usize, to: usize, msg: Message) -> Packet {
        // Plain data with string keys: serializing cannot fail.
        let bytes = serde_json::to_vec(&msg).expect("messages serialize");
        Packet {
            from: from as u8,
            to: to as u8,
            msg,
            bytes: bytes.into(),
        }
    }

    fn key(&self) -> (u8, u8, &[u8]) {
        (self.from, self.to, &self.bytes)
    }
}

/// What the adversary (or the operator) does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Deliver the `n`-th distinct message in flight.
    Deliver(usize),
    /// Deliver it and keep a copy in flight.
    Duplicate(usize),
    /// Lose it.
    Drop(usize),
    /// Fire node `i`'s earliest timer (the clock moves to its deadline if that is later).
    Fire(usize),
    /// Fire the earliest timer of all: time passes as it does on a cluster without pauses.
    Advance,
    /// Crash node `i`.
    Crash(usize),
    /// Restart node `i`.
    Restart(usize),
    /// Split the nodes into those whose bit is set in the mask and the rest.
    Split(u32),
    /// Every link works again.
    Heal,
    /// Deliver everything in flight, lowest first, and what that sends, until nothing is
    /// left (at most 500 deliveries): the connected groups talk until quiet. A sequence of
    /// real steps taken as one action, so searches reach deeper.
    Settle,
    /// The operator asks node `at` to hand the office to `to` (none: the best voter).
    Transfer {
        /// Where it is asked.
        at: usize,
        /// The voter named.
        to: Option<usize>,
    },
    /// Node `i` stops gracefully: an admin hands over first; then it is down.
    Stop(usize),
    /// The operator asks node `at` for `change`.
    Change {
        /// Where it is asked.
        at: usize,
        /// What.
        change: MemberChange,
    },
}

/// The whole state a search explores.
#[derive(Clone, Debug)]
pub struct World {
    /// Global time (ms); every node's clock reads it (no drift).
    pub now: u64,
    /// The nodes, shared between worlds until one steps (a transition changes one or two of
    /// them, and a breadth-first frontier holds millions of worlds).
    pub nodes: Vec<Arc<Node>>,
    /// Messages in flight, sorted (a multiset: the order of delivery is the adversary's).
    pub net: Vec<Packet>,
    /// Partition: bit `i` set puts node `i` on the other side. 0: healed.
    pub split: u32,
    /// Budgets left.
    pub left: Limits,
    /// What the invariants remember.
    pub ghost: Ghost,
    /// Operator request ids handed out.
    requests: u64,
}

impl World {
    /// The start state of `model`.
    pub fn start(model: &Model) -> Result<World, Violation> {
        let config = Config {
            bootstrap_expect: model.expect,
            ..model.config.clone()
        };
        let caps = vec![ADMIN_ELECTION.to_owned()];
        let mut w = World {
            now: 0,
            nodes: Vec::new(),
            net: Vec::new(),
            split: 0,
            left: model.limits,
            ghost: Ghost::default(),
            requests: 0,
        };
        for i in 0..model.nodes {
            // Validated configs only: a model with bad timings is the caller's error.
            let core = Core::new(Model::id(i), config.clone(), caps.clone(), 1)
                .map_err(|e| Violation::setup(e.to_string()))?;
            w.nodes.push(Arc::new(Node::new(core)));
        }
        for i in 0..model.nodes {
            w.step(i, Event::Started)?;
        }
        for i in 0..model.nodes {
            for j in 0..model.nodes {
                if i != j {
                    let advert = w.advert(j);
                    w.step(i, Event::PeerUp(advert))?;
                }
            }
        }
        if model.start == Start::Elected {
            w.settle(10_000)?;
            if w.agreed_admin().is_none() {
                return Err(Violation::setup(
                    "the fault-free start elected no admin that every node follows".into(),
                ));
            }
        }
        w.left = model.limits;
        Ok(w)
    }

    /// Runs fault-free (lowest message first, else the earliest timer) until every node
    /// follows one admin with nothing in flight, or `max_steps`.
    pub fn settle(&mut self, max_steps: usize) -> Result<(), Violation> {
        for _ in 0..max_steps {
            if !self.net.is_empty() {
                self.deliver(0, false)?;
                continue;
            }
            if self.agreed_admin().is_some() {
                return Ok(());
            }
            match self.earliest() {
                Some(i) => self.fire(i)?,
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// The running node whose timer is due first (ties: lowest index).
    fn earliest(&self) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].up)
            .filter_map(|i| self.nodes[i].core.next_deadline().map(|(at, _)| (at, i)))
            .min()
            .map(|(_, i)| i)
    }

    /// The admin every running node follows, with nothing in flight, if there is one.
    pub fn agreed_admin(&self) -> Option<usize> {
        let admin = (0..self.nodes.len()).find(|i| self.nodes[*i].core.role() == Role::Admin)?;
        let id = Model::id(admin);
        let all = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .all(|n| n.core.admin() == Some(&id));
        (all && self.net.is_empty()).then_some(admin)
    }

    /// Every action possible here, in a fixed order.
    pub fn actions(&self, model: &Model) -> Vec<Action> {
        let mut acts = Vec::new();
        let distinct = self.distinct();
        for (n, _) in distinct.iter().enumerate() {
            acts.push(Action::Deliver(n));
            if self.left.dups > 0 {
                acts.push(Action::Duplicate(n));
            }
            if self.left.drops > 0 {
                acts.push(Action::Drop(n));
            }
        }
        let n = self.nodes.len();
        if self.left.fires > 0 && self.earliest().is_some() {
            acts.push(Action::Advance);
        }
        if self.left.fires > 0 {
            for i in 0..n {
                if self.nodes[i].up && self.nodes[i].core.next_deadline().is_some() {
                    acts.push(Action::Fire(i));
                }
            }
        }
        for i in 0..n {
            if !self.nodes[i].up {
                acts.push(Action::Restart(i));
            } else if self.left.crashes > 0 {
                acts.push(Action::Crash(i));
            }
        }
        if self.left.splits > 0 {
            // Every two-sided split once: masks whose top node is on side 0.
            let top = 1u32 << (n - 1);
            for mask in 1..top {
                if mask != self.split {
                    acts.push(Action::Split(mask));
                }
            }
        }
        if self.split != 0 {
            acts.push(Action::Heal);
        }
        if model.settle && self.net.len() > 1 {
            acts.push(Action::Settle);
        }
        if self.left.handovers > 0 {
            for i in 0..n {
                if !self.nodes[i].up {
                    continue;
                }
                acts.push(Action::Stop(i));
                if self.nodes[i].core.role() == Role::Admin {
                    acts.push(Action::Transfer { at: i, to: None });
                    for k in (0..n).filter(|&k| k != i) {
                        acts.push(Action::Transfer { at: i, to: Some(k) });
                    }
                }
            }
        }
        if self.left.changes > 0 {
            for at in 0..n {
                let c = &self.nodes[at].core;
                let asked = c.role() == Role::Admin || (model.ask_followers && c.admin().is_some());
                if !self.nodes[at].up || !asked {
                    continue;
                }
                let Some(e) = c.electorate() else { continue };
                for k in 0..n {
                    let node = Model::id(k);
                    let change = if e.contains(&node) {
                        MemberChange::Remove { node }
                    } else {
                        MemberChange::Add { node }
                    };
                    acts.push(Action::Change { at, change });
                }
            }
        }
        acts
    }

    /// Indices into `net` of its distinct packets (equal copies are one choice).
    fn distinct(&self) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for (k, p) in self.net.iter().enumerate() {
            if out.last().is_none_or(|&l| self.net[l].key() != p.key()) {
                out.push(k);
            }
        }
        out
    }

    /// Carries out `action`; a broken invariant is returned as the error.
    pub fn apply(&mut self, action: &Action) -> Result<(), Violation> {
        match action {
            Action::Deliver(n) | Action::Duplicate(n) | Action::Drop(n) => {
                let Some(&k) = self.distinct().get(*n) else {
                    return Ok(());
                };
                match action {
                    Action::Deliver(_) => self.deliver(k, false)?,
                    Action::Duplicate(_) => {
                        self.left.dups = self.left.dups.saturating_sub(1);
                        self.deliver(k, true)?
                    }
                    _ => {
                        self.left.drops = self.left.drops.saturating_sub(1);
                        self.net.remove(k);
                    }
                }
            }
            Action::Fire(i) => {
                self.left.fires = self.left.fires.saturating_sub(1);
                self.fire(*i)?
            }
            Action::Advance => {
                self.left.fires = self.left.fires.saturating_sub(1);
                if let Some(i) = self.earliest() {
                    self.fire(i)?
                }
            }
            Action::Crash(i) if self.nodes[*i].up => {
                self.left.crashes = self.left.crashes.saturating_sub(1);
                self.crash(*i)?
            }
            Action::Restart(i) if !self.nodes[*i].up => self.restart(*i)?,
            Action::Crash(_) | Action::Restart(_) => {}
            Action::Split(mask) => {
                self.left.splits = self.left.splits.saturating_sub(1);
                self.split = *mask;
                let side = |n: u8| self.split >> n & 1;
                self.net.retain(|p| side(p.from) == side(p.to));
            }
            Action::Heal => self.split = 0,
            Action::Settle => {
                for _ in 0..500 {
                    if self.net.is_empty() {
                        break;
                    }
                    self.deliver(0, false)?;
                    self.ghost.check_leases_now(&self.nodes, self.now)?;
                }
            }
            Action::Transfer { at, to } => {
                if !self.nodes[*at].up {
                    return Ok(());
                }
                self.left.handovers = self.left.handovers.saturating_sub(1);
                self.requests += 1;
                let event = Event::TransferAdmin {
                    to: to.map(Model::id),
                    request: self.requests,
                };
                self.step(*at, event)?;
            }
            Action::Stop(i) => {
                if !self.nodes[*i].up {
                    return Ok(());
                }
                self.left.handovers = self.left.handovers.saturating_sub(1);
                // What it sends on the way out leaves before the connections close.
                self.step(*i, Event::Shutdown)?;
                self.crash(*i)?;
            }
            Action::Change { at, change } => {
                if !self.nodes[*at].up {
                    return Ok(());
                }
                self.left.changes = self.left.changes.saturating_sub(1);
                self.requests += 1;
                let event = Event::ChangeMembers {
                    change: change.clone(),
                    request: self.requests,
                };
                self.step(*at, event)?;
            }
        }
        self.ghost.check_leases(&self.nodes, self.now)
    }

    fn deliver(&mut self, k: usize, keep: bool) -> Result<(), Violation> {
        let p = if keep {
            self.net[k].clone()
        } else {
            self.net.remove(k)
        };
        let from = Model::id(p.from as usize);
        self.step(p.to as usize, Event::Message { from, msg: p.msg })
    }

    fn fire(&mut self, i: usize) -> Result<(), Violation> {
        let Some((at, timer)) = self.nodes[i].core.next_deadline() else {
            return Ok(());
        };
        self.now = self.now.max(at);
        self.step(i, Event::TimerFired { timer })
    }

    fn crash(&mut self, i: usize) -> Result<(), Violation> {
        Arc::make_mut(&mut self.nodes[i]).up = false;
        self.net.retain(|p| p.to as usize != i);
        let gone = Model::id(i);
        for j in 0..self.nodes.len() {
            if j != i && self.nodes[j].up {
                self.step(j, Event::PeerDown { peer: gone.clone() })?;
            }
        }
        Ok(())
    }

    fn restart(&mut self, i: usize) -> Result<(), Violation> {
        let node = Arc::make_mut(&mut self.nodes[i]);
        node.up = true;
        // The node comes back from its durable state as a snapshot keeps it (its log compacted
        // just before the crash): state a snapshot leaves out is lost, as it would be.
        let promised = node.core.bootstrap_promised().cloned();
        node.core = Core::restore(&node.core.snapshot())
            .map_err(|e| Violation::setup(format!("a snapshot does not restore: {e}")))?;
        crate::check::promise_kept(&self.nodes, i, promised.as_ref())?;
        self.ghost.reached.0 |= crate::check::Reached::RESTARTED;
        self.step(i, Event::Started)?;
        for j in 0..self.nodes.len() {
            if j != i && self.nodes[j].up {
                let advert = self.advert(j);
                self.step(i, Event::PeerUp(advert))?;
                let advert = self.advert(i);
                self.step(j, Event::PeerUp(advert))?;
            }
        }
        Ok(())
    }

    fn advert(&self, i: usize) -> Advert {
        let core = &self.nodes[i].core;
        Advert::new(
            Model::id(i),
            PeerInfo {
                capabilities: core.capabilities().to_vec().into(),
                uptime_s: core.uptime_s(),
                resources: Default::default(),
            },
        )
    }

    /// Steps node `i` at the current time and carries out its commands.
    fn step(&mut self, i: usize, event: Event) -> Result<(), Violation> {
        let now = self.now;
        let node = Arc::make_mut(&mut self.nodes[i]);
        let before = node.core.electorate().map(|e| e.version);
        let promised = node.core.bootstrap_promised().cloned();
        let out = node.core.step_vec(now, event);
        node.rehash();
        crate::check::promise_kept(&self.nodes, i, promised.as_ref())?;
        let me = Model::id(i);
        for c in out {
            match c {
                Command::Send { to, msg } => {
                    self.judge_bootstrap(i, &me, &msg)?;
                    if let Some(j) = self.index(&to) {
                        self.send(i, j, msg);
                    }
                }
                Command::Broadcast { msg } => {
                    for j in 0..self.nodes.len() {
                        if j != i {
                            self.send(i, j, msg.clone());
                        }
                    }
                }
                Command::Notice(notice) => {
                    self.ghost.notice(&self.nodes, i, before, &notice)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Records the promises node `i` makes and judges the proposals it makes (`paxos`).
    fn judge_bootstrap(&mut self, i: usize, me: &NodeId, msg: &Message) -> Result<(), Violation> {
        match msg {
            Message::BootstrapPromise { ballot, accepted } => {
                let accepted = accepted.as_ref().map(|(b, e)| (b, &**e));
                self.ghost.promised(i, ballot, accepted);
            }
            // A proposer is its own first promiser, with what it had accepted then.
            Message::BootstrapPrepare { ballot, .. } if ballot.node == *me => {
                let accepted = self.nodes[i].core.bootstrap_accepted();
                let accepted = accepted.map(|(b, e)| (b.clone(), e.clone()));
                let accepted = accepted.as_ref().map(|(b, e)| (b, e));
                self.ghost.promised(i, ballot, accepted);
            }
            Message::BootstrapAccept { ballot, electorate } if ballot.node == *me => {
                let expect = self.nodes[i].core.config().bootstrap_expect as usize;
                self.ghost.proposes(i, ballot, electorate, expect)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn send(&mut self, from: usize, to: usize, msg: Message) {
        let side = |n: usize| self.split >> n & 1;
        if !self.nodes[to].up || side(from) != side(to) {
            return;
        }
        let p = Packet::new(from, to, msg);
        let at = self.net.partition_point(|q| q.key() <= p.key());
        self.net.insert(at, p);
    }

    pub(crate) fn index(&self, id: &NodeId) -> Option<usize> {
        crate::node::index(&self.nodes, id)
    }

    /// A 128-bit fingerprint of everything that decides the future: equal fingerprints are
    /// taken for equal states.
    pub fn fingerprint(&self) -> u128 {
        let mut parts: Vec<u64> = Vec::with_capacity(self.nodes.len() + self.net.len() + 4);
        parts.push(self.now);
        for n in &self.nodes {
            parts.push(n.hash ^ u64::from(n.up));
        }
        for p in &self.net {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            p.key().hash(&mut h);
            parts.push(h.finish());
        }
        parts.push(u64::from(self.split));
        let l = self.left;
        parts.push(u64::from_le_bytes([
            l.crashes,
            l.drops,
            l.dups,
            l.changes,
            l.splits,
            l.fires,
            l.handovers,
            0,
        ]));
        parts.push(self.ghost.hash());
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.to_le_bytes()).collect();
        u128::from(hash_bytes(1, &bytes)) << 64 | u128::from(hash_bytes(2, &bytes))
    }

    /// One line describing `action` in this state (before it is applied).
    pub fn describe(&self, action: &Action) -> String {
        let name = |i: usize| Model::id(i).to_string();
        match action {
            Action::Deliver(n) | Action::Duplicate(n) | Action::Drop(n) => {
                let verb = match action {
                    Action::Deliver(_) => "deliver",
                    Action::Duplicate(_) => "duplicate",
                    _ => "drop",
                };
                match self.distinct().get(*n).map(|&k| &self.net[k]) {
                    Some(p) => format!(
                        "{verb} {}→{} {}",
                        name(p.from as usize),
                        name(p.to as usize),
                        String::from_utf8_lossy(&p.bytes)
                    ),
                    None => format!("{verb} #{n} (gone)"),
                }
            }
            Action::Advance => match self.earliest() {
                Some(i) => format!("advance: {}", self.describe(&Action::Fire(i))),
                None => "advance (no timer)".into(),
            },
            Action::Fire(i) => match self.nodes[*i].core.next_deadline() {
                Some((at, t)) => format!("fire {} {t:?} at {}", name(*i), self.now.max(at)),
                None => format!("fire {} (no timer)", name(*i)),
            },
            Action::Crash(i) => format!("crash {}", name(*i)),
            Action::Restart(i) => format!("restart {}", name(*i)),
            Action::Split(mask) => {
                let side = |s: u32| -> String {
                    (0..self.nodes.len())
                        .filter(|i| (mask >> i & 1) == s)
                        .map(name)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                format!("split {{{}}} | {{{}}}", side(0), side(1))
            }
            Action::Heal => "heal".into(),
            Action::Settle => format!("settle ({} in flight)", self.net.len()),
            Action::Change { at, change } => format!("ask {} for {change:?}", name(*at)),
            Action::Transfer { at, to } => match to {
                Some(k) => format!("ask {} to hand over to {}", name(*at), name(*k)),
                None => format!("ask {} to hand over", name(*at)),
            },
            Action::Stop(i) => format!("stop {} gracefully", name(*i)),
        }
    }

    /// A short summary of each node: role, term, admin followed, electorate.
    pub fn summary(&self) -> String {
        let mut s = format!("t={}", self.now);
        for (i, n) in self.nodes.iter().enumerate() {
            let c = &n.core;
            let e = c
                .electorate()
                .map(|e| {
                    let m: Vec<&str> = e.members().iter().map(|m| m.as_str()).collect();
                    format!("v{}/t{}{{{}}}", e.version, e.term, m.join(","))
                })
                .unwrap_or_else(|| "-".into());
            s += &format!(
                " | {}:{}{} t{} adm={} {}",
                Model::id(i),
                if n.up { "" } else { "DOWN " },
                c.role(),
                c.term(),
                c.admin().map_or("-", |a| a.as_str()),
                e
            );
        }
        s
    }
}
