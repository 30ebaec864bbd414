//! The discrete-event engine: pure cores stepped directly from a priority queue of (time,
//! sequence) that jumps straight to the next event, as quinn-proto's test `Pair` does. It scales
//! to thousands of nodes because nothing happens between events.
//!
//! Modelled: per-link latency (a fixed per-link base plus uniform jitter), loss, duplication,
//! reordering, two-way partitions and one-way cuts (silent drops the transport does not notice),
//! crashes and restarts (a restart rebuilds the node from its own event log: a snapshot plus the
//! replayed tail), late joiners, and per-node clock drift (each node's clock runs at
//! `1 + d/1e6` of global time; every time written to the trace is converted to global time).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use chorus_core::rng::below;
use chorus_core::{Command, Core, Event, Message, NodeId, Notice, PeerInfo, Timer};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::driver::{name, node_profile, Cluster, Driver};
use crate::hostile::Liar;
use crate::scenario::{Peering, Scenario};
use crate::sink::Sink;
use crate::trace::Record;

/// Compact the event log into a snapshot once it holds this many events, which bounds both
/// memory and restart time, as the production log does.
const SNAPSHOT_EVERY: usize = 4_096;

#[derive(Debug)]
enum Item {
    Deliver {
        to: u32,
        from: u32,
        msg: Message,
    },
    Timer {
        node: u32,
        incarnation: u32,
        timer: Timer,
    },
    /// A hostile node's next burst of lies.
    Lie {
        node: u32,
        incarnation: u32,
    },
}

#[derive(Debug)]
struct Entry {
    at: u64,
    seq: u64,
    item: Item,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Node {
    id: NodeId,
    name: String,
    core: Option<Core>,
    incarnation: u32,
    /// The durable log: a snapshot (the state after some prefix) and the events since.
    snapshot: Option<Core>,
    log: Vec<(u64, Event)>,
    /// Clock rate offset in ppm.
    drift_ppm: i64,
    profile: PeerInfo,
    /// Global time of the current incarnation's start.
    started_at: u64,
    /// Partition group; messages cross only within a group.
    group: u32,
    /// The lying half of a hostile node.
    liar: Option<Liar>,
}

impl Node {
    /// The node's clock at global time `t`.
    fn local(&self, t: u64) -> u64 {
        ((u128::from(t) * (1_000_000 + self.drift_ppm) as u128) / 1_000_000) as u64
    }

    /// The first global instant at which the node's clock reads at least `local`.
    fn global(&self, local: u64) -> u64 {
        let rate = (1_000_000 + self.drift_ppm) as u128;
        (u128::from(local) * 1_000_000).div_ceil(rate) as u64
    }
}

/// The engine's state.
pub struct Des<'s> {
    scenario: &'s Scenario,
    seed: u64,
    nodes: Vec<Node>,
    queue: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    now: u64,
    rng: ChaCha8Rng,
    cuts: BTreeSet<(u32, u32)>,
    loss_ppm: u32,
    duplicate_ppm: u32,
    reorder_ppm: u32,
    out: Vec<Command>,
    voters: usize,
}

/// Runs `scenario` on the discrete-event engine, writing records to `sink`.
pub fn run(scenario: &Scenario, seed: u64, sink: &mut Sink) -> anyhow::Result<()> {
    let mut des = Des::new(scenario, seed);
    let mut driver = Driver::new(scenario, seed);
    sink.at(0);
    driver.start_initial(&mut des, sink);
    loop {
        let next_event = des.queue.peek().map(|Reverse(e)| e.at);
        let next_action = driver.next_at();
        let t = match (next_event, next_action) {
            (None, None) => break,
            (a, b) => a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)),
        };
        if t >= scenario.duration_ms || sink.stopped() {
            break;
        }
        des.now = t;
        sink.at(t);
        if next_action == Some(t) {
            driver.fire_due(t, &mut des, sink);
        } else if let Some(Reverse(entry)) = des.queue.pop() {
            des.process(entry.item, sink);
        }
    }
    Ok(())
}

impl<'s> Des<'s> {
    fn new(scenario: &'s Scenario, seed: u64) -> Des<'s> {
        let net = &scenario.network;
        let drifts = crate::driver::clock_drifts(scenario, seed);
        let nodes = (0..scenario.nodes)
            .map(|i| {
                let drift_ppm = drifts[i];
                Node {
                    id: NodeId::from(name(i)),
                    name: name(i),
                    core: None,
                    incarnation: 0,
                    snapshot: None,
                    log: Vec::new(),
                    drift_ppm,
                    profile: node_profile(scenario, seed, i),
                    started_at: 0,
                    group: 0,
                    liar: scenario.is_hostile(i).then(|| Liar::new(seed, i)),
                }
            })
            .collect();
        Des {
            scenario,
            seed,
            nodes,
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            cuts: BTreeSet::new(),
            loss_ppm: net.loss_ppm,
            duplicate_ppm: net.duplicate_ppm,
            reorder_ppm: net.reorder_ppm,
            out: Vec::new(),
            voters: scenario.voter_count(),
        }
    }

    fn push(&mut self, at: u64, item: Item) {
        self.seq += 1;
        self.queue.push(Reverse(Entry {
            at,
            seq: self.seq,
            item,
        }));
    }

    fn process(&mut self, item: Item, sink: &mut Sink) {
        match item {
            Item::Deliver { to, from, msg } => {
                let (to, from) = (to as usize, from as usize);
                // A link cut while the message was in flight drops it, like a real partition.
                if self.nodes[to].core.is_some() && self.reachable(from, to) {
                    if let Some(liar) = self.nodes[to].liar.as_mut() {
                        liar.hear(&msg);
                    }
                    let from = self.nodes[from].id.clone();
                    self.step(to, Event::Message { from, msg }, sink);
                }
            }
            Item::Timer {
                node,
                incarnation,
                timer,
            } => {
                let i = node as usize;
                if self.nodes[i].incarnation == incarnation && self.nodes[i].core.is_some() {
                    self.step(i, Event::TimerFired { timer }, sink);
                }
            }
            Item::Lie { node, incarnation } => {
                let i = node as usize;
                if self.nodes[i].incarnation == incarnation && self.nodes[i].core.is_some() {
                    self.lie(i, sink);
                }
            }
        }
    }

    /// Sends hostile node `i`'s next burst of lies to random nodes, and schedules the next.
    fn lie(&mut self, i: usize, sink: &mut Sink) {
        let n = self.nodes.len();
        let node = &mut self.nodes[i];
        let Some(liar) = node.liar.as_mut() else {
            return;
        };
        let lies: Vec<(usize, Message)> = (0..self.scenario.hostile.burst)
            .map(|_| {
                let to = match liar.pick(n) {
                    j if j == i => (i + 1) % n,
                    j => j,
                };
                (to, liar.lie(&node.id, n))
            })
            .collect();
        let incarnation = node.incarnation;
        for (to, msg) in lies {
            sink.count_message(msg.is_election());
            self.send(i, to, msg);
        }
        let next = self.now + self.scenario.hostile.every_ms;
        self.push(
            next,
            Item::Lie {
                node: i as u32,
                incarnation,
            },
        );
    }

    /// Whether `a` and `b` hold a connection (and so tell each other PeerUp/PeerDown).
    fn peered(&self, a: usize, b: usize) -> bool {
        match self.scenario.peering {
            Peering::Full => true,
            Peering::Voters => a < self.voters || b < self.voters,
        }
    }

    fn reachable(&self, from: usize, to: usize) -> bool {
        self.nodes[from].group == self.nodes[to].group
            && !self.cuts.contains(&(from as u32, to as u32))
    }

    /// Logs and steps node `i` with `event` at the current global time, then carries out the
    /// commands.
    fn step(&mut self, i: usize, event: Event, sink: &mut Sink) {
        let node = &mut self.nodes[i];
        let local = node.local(self.now);
        let Some(core) = node.core.as_mut() else {
            return;
        };
        let step_event = sink.wants_steps().then(|| event.clone());
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        // The event is durable before its commands are carried out.
        node.log.push((local, event.clone()));
        core.step(local, event, &mut out);
        if node.log.len() >= SNAPSHOT_EVERY {
            node.snapshot = Some(core.clone());
            node.log.clear();
        }
        if let Some(event) = step_event {
            sink.record(Record::Step {
                node: node.name.clone(),
                event: serde_json::to_value(&event).unwrap_or_default(),
                commands: serde_json::to_value(&out).unwrap_or_default(),
            });
        }
        for c in &out {
            self.execute(i, c, sink);
        }
        self.out = out;
    }

    fn execute(&mut self, i: usize, c: &Command, sink: &mut Sink) {
        match c {
            Command::Send { to, msg } => {
                let Some(j) = index(to, self.nodes.len()) else {
                    return;
                };
                sink.count_message(msg.is_election());
                if Sink::traced(c) {
                    let node = &self.nodes[i];
                    sink.core_output(&node.name, c, |local| node.global(local));
                }
                self.send(i, j, msg.clone());
            }
            Command::Broadcast { msg } => {
                for j in 0..self.nodes.len() {
                    if j != i && self.nodes[j].core.is_some() {
                        sink.count_message(msg.is_election());
                        self.send(i, j, msg.clone());
                    }
                }
            }
            Command::SetTimer { timer, at_ms } => {
                let node = &self.nodes[i];
                let at = node.global(*at_ms).max(self.now);
                let incarnation = node.incarnation;
                self.push(
                    at,
                    Item::Timer {
                        node: i as u32,
                        incarnation,
                        timer: *timer,
                    },
                );
            }
            Command::CancelTimer { .. } => {}
            Command::RoleChanged { .. } | Command::Notice(_) => {
                let node = &self.nodes[i];
                let name = node.name.clone();
                sink.core_output(&name, c, |local| node.global(local));
                if matches!(c, Command::Notice(Notice::BecameAdmin { .. })) {
                    let best = self.best_live_voter() == Some(i);
                    sink.election_winner(best);
                }
            }
        }
    }

    /// Per-link base latency (fixed per seed and link) plus uniform jitter, both within the
    /// scenario's latency range.
    fn latency(&mut self, from: usize, to: usize) -> u64 {
        let (lo, hi) = self.scenario.network.latency_ms;
        let span = hi - lo;
        let link = (from as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (to as u64) ^ self.seed;
        let base = splitmix(link) % (span / 2 + 1);
        lo + base + below(&mut self.rng, span - span / 2 + 1)
    }

    fn send(&mut self, from: usize, to: usize, msg: Message) {
        if !self.reachable(from, to) || below(&mut self.rng, 1_000_000) < u64::from(self.loss_ppm) {
            return;
        }
        let mut delay = self.latency(from, to);
        if below(&mut self.rng, 1_000_000) < u64::from(self.reorder_ppm) {
            delay += self.scenario.network.latency_ms.1;
        }
        if below(&mut self.rng, 1_000_000) < u64::from(self.duplicate_ppm) {
            let again = self.latency(from, to);
            let (f, t) = (from as u32, to as u32);
            self.push(
                self.now + again,
                Item::Deliver {
                    to: t,
                    from: f,
                    msg: msg.clone(),
                },
            );
        }
        self.push(
            self.now + delay,
            Item::Deliver {
                to: to as u32,
                from: from as u32,
                msg,
            },
        );
    }

    fn profile_at(&self, j: usize) -> PeerInfo {
        let node = &self.nodes[j];
        PeerInfo {
            uptime_s: (self.now - node.started_at) / 1_000,
            ..node.profile.clone()
        }
    }

    /// The live voter with the best score now (ties: lowest id), as every node ranks them.
    fn best_live_voter(&self) -> Option<usize> {
        (0..self.voters)
            .filter(|j| self.nodes[*j].core.is_some())
            .map(|j| {
                let p = self.profile_at(j);
                let s = chorus_core::score::score(p.uptime_s, p.capabilities.len(), p.resources);
                (Reverse(s), self.nodes[j].id.clone(), j)
            })
            .min()
            .map(|(_, _, j)| j)
    }
}

impl Cluster for Des<'_> {
    fn is_live(&self, i: usize) -> bool {
        self.nodes[i].core.is_some()
    }

    fn admin(&self) -> Option<usize> {
        (0..self.nodes.len())
            .filter_map(|i| {
                let core = self.nodes[i].core.as_ref()?;
                (core.role() == chorus_core::Role::Admin).then_some((core.term(), Reverse(i)))
            })
            .max()
            .map(|(_, Reverse(i))| i)
    }

    fn crash(&mut self, i: usize, sink: &mut Sink) {
        let node = &mut self.nodes[i];
        if node.core.take().is_none() {
            return;
        }
        node.incarnation += 1;
        let gone = node.id.clone();
        for j in 0..self.nodes.len() {
            if j != i && self.nodes[j].core.is_some() && self.peered(i, j) {
                self.step(j, Event::PeerDown { peer: gone.clone() }, sink);
            }
        }
    }

    fn restart(&mut self, i: usize, sink: &mut Sink) {
        if self.nodes[i].core.is_some() {
            return;
        }
        // Recovery: the snapshot, then the tail of the log replayed through the core.
        let node = &mut self.nodes[i];
        let mut core = match &node.snapshot {
            Some(s) => s.clone(),
            None => Core::new(
                node.id.clone(),
                self.scenario.node_config(),
                node.profile.capabilities.to_vec(),
                self.seed,
            )
            .map_err(|e| e.to_string())
            .expect("scenario config was validated"),
        };
        let mut sinkhole = Vec::new();
        for (t, e) in &node.log {
            core.step(*t, e.clone(), &mut sinkhole);
            sinkhole.clear();
        }
        node.core = Some(core);
        node.incarnation += 1;
        node.started_at = self.now;
        let resources = node.profile.resources;
        if node.liar.is_some() {
            let (every, incarnation) = (self.scenario.hostile.every_ms, node.incarnation);
            self.push(
                self.now + every,
                Item::Lie {
                    node: i as u32,
                    incarnation,
                },
            );
        }
        self.step(i, Event::Started, sink);
        self.step(i, Event::ResourcesSampled { resources }, sink);
        let me = self.nodes[i].id.clone();
        for j in 0..self.nodes.len() {
            if j != i && self.nodes[j].core.is_some() && self.peered(i, j) {
                let theirs = self.profile_at(j);
                let peer = self.nodes[j].id.clone();
                self.step(i, Event::PeerUp { peer, info: theirs }, sink);
                let mine = self.profile_at(i);
                self.step(
                    j,
                    Event::PeerUp {
                        peer: me.clone(),
                        info: mine,
                    },
                    sink,
                );
            }
        }
    }

    fn cut(&mut self, from: usize, to: usize) {
        self.cuts.insert((from as u32, to as u32));
    }

    fn partition(&mut self, groups: &[Vec<usize>]) {
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                self.nodes[i].group = g as u32 + 1;
            }
        }
    }

    fn heal(&mut self) {
        self.cuts.clear();
        for n in &mut self.nodes {
            n.group = 0;
        }
    }

    fn set_network(&mut self, loss_ppm: u32, duplicate_ppm: u32, reorder_ppm: u32) {
        self.loss_ppm = loss_ppm;
        self.duplicate_ppm = duplicate_ppm;
        self.reorder_ppm = reorder_ppm;
    }
}

/// `n<i>` → `i`, if in range.
fn index(id: &NodeId, n: usize) -> Option<usize> {
    id.as_str()
        .strip_prefix('n')?
        .parse()
        .ok()
        .filter(|i| *i < n)
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
