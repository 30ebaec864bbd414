//! The discrete-event engine: pure cores stepped directly from a queue ordered by (time, arrival)
//! that jumps straight to the next event, as quinn-proto's test `Pair` does. It scales to a
//! million nodes because nothing happens between events.
//!
//! Modelled: per-link latency (a fixed per-link base plus uniform jitter), loss, duplication,
//! reordering, two-way partitions and one-way cuts (silent drops the transport does not notice),
//! crashes and restarts (in debug builds a restart rebuilds the node from its own event log, a
//! snapshot plus the replayed tail, and checks it against the state the node crashed in; in
//! release it takes that state, which is the same), late joiners, per-node clock drift (each
//! node's clock runs at `1 + d/1e6` of global time; every time written to the trace is converted to global time),
//! per-node settings (a restart with new ones steps `ConfigChanged` after `Started`, as
//! `chorus run` does), connections that come up after a per-pair delay (`link_spread`), and
//! groups kept apart from the start or by a `split` until a heal.

use chorus_core::certificate::simulated_signature;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use chorus_core::rng::below;
use chorus_core::{
    Advert, Command, Config, Core, Event, Message, NodeId, Notice, PeerInfo, TaskId, TaskSpec,
    Timer,
};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::driver::{name, node_profile, Cluster, Driver};
use crate::hostile::Liar;
use crate::sandbox::SandboxModel;
use crate::scenario::{Peering, Scenario};
use crate::sink::Sink;
use crate::timequeue::TimeQueue;
use crate::trace::Record;

/// Compact the event log into a snapshot once it holds this many events (or as many as the node
/// has peers, if more), which bounds both memory and restart time, as the production log does.
const SNAPSHOT_EVERY: usize = 4_096;

/// How many items ahead [`Des::hint_ahead`] looks: far enough for the load to land before the
/// item's turn, near enough that few items are queued in between.
const HINT_AHEAD: usize = 8;

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
    /// A simulated sandbox run ends: by itself (if `token` is still the node's run of the
    /// task), or stopped (`stopped`: its run was taken off the node at the stop).
    Sandbox {
        node: u32,
        incarnation: u32,
        token: u64,
        stopped: bool,
        event: Box<Event>,
    },
    /// A connection delayed by `link_spread` comes up (if `token` is still the pair's).
    Connect {
        a: u32,
        b: u32,
        token: u64,
    },
}

/// What delivering a message reads of both ends besides the receiver's core, kept apart from
/// the 2 KB [`Node`]s: at 100,000 nodes, reading the sender's `Node` for these was a cache miss
/// per message.
struct Place {
    id: NodeId,
    /// Partition group; messages cross only within a group.
    group: u32,
    /// `apart_at_start` group (0: none); nodes of different groups neither connect nor talk.
    apart: u32,
    /// Global time of the current incarnation's start.
    started_at: u64,
    /// Clock rate offset in ppm (read at every step: here, a step's first read of the
    /// receiver's 2 KB node was this).
    drift_ppm: i64,
    /// The node's advertisement as last handed out: every node that connects to it within the
    /// same second of its uptime gets this one value, as a real node's peers would each decode
    /// an equal one (a full-peering cold start hands out n² of them). Here rather than in the
    /// node, whose lines a cold start would otherwise read once more per connection.
    advert: Option<Advert>,
}

struct Node {
    name: String,
    core: Option<Core>,
    incarnation: u32,
    /// The durable log: a snapshot (the state after some prefix) and the events since, by
    /// the node's clock. Boxed: most nodes of a short run never take one. Kept only when the
    /// engine replays logs (see [`Des::replay_logs`]).
    snapshot: Option<Box<Core>>,
    log: Vec<(u64, Logged)>,
    /// While the node is down: the state it crashed in, which is what replaying its durable
    /// log gives (the core is deterministic).
    down: Option<Box<Core>>,
    profile: PeerInfo,
    /// The configuration of the node's first start; restarts rebuild the core from it and
    /// the log.
    first_config: Option<Config>,
    /// The lying half of a hostile node (boxed: few nodes lie, and inline it was a sixth of
    /// every node's size).
    liar: Option<Box<Liar>>,
    /// Sandbox runs going on: task → (attempt, global start, token). A crash ends them all.
    runs: BTreeMap<TaskId, (u32, u64, u64)>,
}

/// An event of a node's log, in little room: a connection that came up is most of a log (one
/// per peer) and is written as the peer's index and advertised uptime — the rest of what the
/// peer advertised is its fixed profile. 24 bytes instead of an `Event`'s 176.
enum Logged {
    PeerUp { peer: u32, uptime_s: u64 },
    Other(Box<Event>),
}

impl Logged {
    fn new(event: &Event, places: &[Place], nodes: &[Node]) -> Logged {
        if let Event::PeerUp(advert) = event {
            if let Some(j) = index(advert.peer(), nodes.len()) {
                let (info, profile) = (advert.info(), &nodes[j].profile);
                // Only when the event is exactly what the compact form gives back.
                if *advert.peer() == places[j].id
                    && info.capabilities == profile.capabilities
                    && info.resources == profile.resources
                {
                    return Logged::PeerUp {
                        peer: j as u32,
                        uptime_s: info.uptime_s,
                    };
                }
            }
        }
        Logged::Other(Box::new(event.clone()))
    }

    fn event(&self, places: &[Place], nodes: &[Node]) -> Event {
        match self {
            Logged::PeerUp { peer, uptime_s } => {
                let node = &nodes[*peer as usize];
                let info = PeerInfo {
                    uptime_s: *uptime_s,
                    ..node.profile.clone()
                };
                Event::peer_up(places[*peer as usize].id.clone(), info)
            }
            Logged::Other(e) => (**e).clone(),
        }
    }
}

impl Place {
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
    /// Ids and partition groups, by node index (beside `nodes`, see [`Place`]).
    places: Vec<Place>,
    nodes: Vec<Node>,
    queue: TimeQueue<Item>,
    /// Whether nodes keep their event logs and a restart replays them (checked against the
    /// state the node crashed in). On in debug builds, so every test exercises recovery by
    /// replay as a real node does it; off in release, where a restart takes the crashed state
    /// itself — the same state, without a log that would cost a copy of every event (a quarter
    /// of the time and almost half the memory of a cold start of 100,000 nodes).
    replay_logs: bool,
    now: u64,
    rng: ChaCha8Rng,
    cuts: BTreeSet<(u32, u32)>,
    loss_ppm: u32,
    duplicate_ppm: u32,
    reorder_ppm: u32,
    out: Vec<Command>,
    voters: usize,
    /// Connections waiting out their `link_spread` delay: (lower, higher index) → token.
    pending_links: BTreeMap<(u32, u32), u64>,
    link_token: u64,
    /// Draws the `link_spread` delays: a stream of its own, so runs without one draw as before.
    link_rng: ChaCha8Rng,
    /// The simulated sandbox, when the scenario has a task workload.
    sandbox: Option<SandboxModel>,
    run_token: u64,
}

/// Runs `scenario` on the discrete-event engine, writing records to `sink`.
pub fn run(scenario: &Scenario, seed: u64, sink: &mut Sink) -> anyhow::Result<()> {
    let mut des = Des::new(scenario, seed);
    let mut driver = Driver::new(scenario, seed);
    des.drive(&mut driver, sink, scenario.duration_ms);
    if scenario.tasks.is_some() {
        // Invariant 7 at the end: what each live submitter still owns.
        for node in &des.nodes {
            if let Some(core) = &node.core {
                let unfinished = core
                    .owned_tasks()
                    .iter()
                    .filter(|(_, t)| t.phase != chorus_core::TaskPhase::Done)
                    .map(|(id, _)| id.to_string())
                    .collect();
                sink.owned_at_end(&node.name, &unfinished);
            }
        }
    }
    if sink.exits_after_run() {
        std::mem::forget(des);
    }
    Ok(())
}

/// The nodes' cores (`None` for a node that is down or not started) once `scenario` has run
/// up to global time `until`: for tests and tools that need a node's state, not its trace.
pub fn cores_at(scenario: &Scenario, seed: u64, until: u64) -> anyhow::Result<Vec<Option<Core>>> {
    scenario.validate().map_err(anyhow::Error::msg)?;
    let header = crate::trace::Header::new(scenario, seed, "des", false);
    let mut sink = Sink::new(&header, None)?;
    let mut des = Des::new(scenario, seed);
    let mut driver = Driver::new(scenario, seed);
    des.drive(&mut driver, &mut sink, until.min(scenario.duration_ms));
    Ok(des.nodes.into_iter().map(|n| n.core).collect())
}

impl<'s> Des<'s> {
    /// Runs the scenario's actions and the queued events in time order until `until`.
    fn drive(&mut self, driver: &mut Driver, sink: &mut Sink, until: u64) {
        sink.at(0);
        driver.start_initial(self, sink);
        loop {
            let next_event = self.queue.next_at();
            let next_action = driver.next_at();
            let t = match (next_event, next_action) {
                (None, None) => break,
                (a, b) => a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)),
            };
            if t >= until || sink.stopped() {
                break;
            }
            self.now = t;
            sink.at(t);
            if next_action == Some(t) {
                driver.fire_due(t, self, sink);
            } else if let Some((_, item)) = self.queue.pop() {
                self.hint_ahead();
                self.process(item, sink);
            }
        }
    }

    fn new(scenario: &'s Scenario, seed: u64) -> Des<'s> {
        let net = &scenario.network;
        let drifts = crate::driver::clock_drifts(scenario, seed);
        let nodes = (0..scenario.nodes)
            .map(|i| Node {
                name: name(i),
                core: None,
                incarnation: 0,
                snapshot: None,
                log: Vec::new(),
                down: None,
                profile: node_profile(scenario, seed, i),
                first_config: None,
                liar: scenario.is_hostile(i).then(|| Box::new(Liar::new(seed, i))),
                runs: BTreeMap::new(),
            })
            .collect();
        let places = (0..scenario.nodes)
            .map(|i| Place {
                id: NodeId::from(name(i)),
                group: 0,
                apart: 0,
                started_at: 0,
                drift_ppm: drifts[i],
                advert: None,
            })
            .collect();
        Des {
            scenario,
            seed,
            places,
            nodes,
            queue: TimeQueue::default(),
            replay_logs: cfg!(debug_assertions),
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            cuts: BTreeSet::new(),
            loss_ppm: net.loss_ppm,
            duplicate_ppm: net.duplicate_ppm,
            reorder_ppm: net.reorder_ppm,
            out: Vec::new(),
            voters: scenario.voter_count(),
            pending_links: BTreeMap::new(),
            link_token: 0,
            link_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x11c5_9e4d_0000_0004),
            sandbox: scenario.tasks.as_ref().map(|w| SandboxModel::new(seed, w)),
            run_token: 0,
        }
    }

    /// Starts loading what the items a few places on will read: at 100,000 nodes nearly every
    /// step's first read of its node was a cache miss, paid one at a time.
    fn hint_ahead(&self) {
        let [next, near, far, item] =
            (self.queue).ahead([HINT_AHEAD / 2, HINT_AHEAD, 2 * HINT_AHEAD, 4 * HINT_AHEAD]);
        if let Some(item) = item {
            crate::prefetch::prefetch(item);
        }
        if let Some((to, from)) = far.and_then(Self::ends) {
            self.hint_node(to, from);
        }
        if let Some((to, from)) = near.and_then(Self::ends) {
            self.hint_core(to, from);
        }
        if let Some((to, from)) = next.and_then(Self::ends) {
            self.hint_behind(to, from);
        }
    }

    /// Starts loading the peers a starting node `i` connects to a few places after `j` (below
    /// `end`), as [`Des::hint_ahead`] does for queued items: a node of a fully peered cold start
    /// meets every node that started before it, each one last touched long ago.
    fn hint_peer(&self, i: usize, j: usize, end: usize) {
        let at = |k: usize| (j + k < end).then_some(j + k);
        if let Some(m) = at(2 * HINT_AHEAD) {
            self.hint_node(m, Some(i));
        }
        if let Some(m) = at(HINT_AHEAD) {
            self.hint_core(m, Some(i));
            // What `i` is handed when it meets `m`.
            if let Some(advert) = &self.places[m].advert {
                advert.parts(&mut crate::prefetch::Prefetcher);
            }
        }
        if let Some(m) = at(HINT_AHEAD / 2) {
            self.hint_behind(m, Some(i));
        }
    }

    // The stages of loading what node `to` reads when it hears from `from` (a message's
    // sender, a peer it meets), each reading only what the one before loaded.

    /// First: the node and both ends' places.
    fn hint_node(&self, to: usize, from: Option<usize>) {
        use crate::prefetch::prefetch;
        prefetch(&self.nodes[to]);
        prefetch(&self.places[to]);
        if let Some(from) = from {
            prefetch(&self.places[from]);
        }
    }

    /// Then: every part of the node's core, and the sender's id.
    fn hint_core(&self, to: usize, from: Option<usize>) {
        use crate::prefetch::Prefetcher;
        if let Some(core) = &self.nodes[to].core {
            core.parts(&mut Prefetcher);
        }
        if let Some(from) = from {
            self.places[from].id.parts(&mut Prefetcher);
        }
    }

    /// Last: what the core's parts point to for that sender.
    fn hint_behind(&self, to: usize, from: Option<usize>) {
        if let (Some(core), Some(from)) = (&self.nodes[to].core, from) {
            core.parts_behind(&self.places[from].id, &mut crate::prefetch::Prefetcher);
        }
    }

    /// The node a queued item steps and, for a message, its sender.
    fn ends(item: &Item) -> Option<(usize, Option<usize>)> {
        match item {
            Item::Deliver { to, from, .. } => Some((*to as usize, Some(*from as usize))),
            Item::Timer { node, .. } => Some((*node as usize, None)),
            _ => None,
        }
    }

    fn push(&mut self, at: u64, item: Item) {
        self.queue.push(at, item);
    }

    fn process(&mut self, item: Item, sink: &mut Sink) {
        match item {
            Item::Deliver { to, from, msg } => {
                let (to, from) = (to as usize, from as usize);
                // A link cut while the message was in flight drops it, like a real partition.
                if self.nodes[to].core.is_some() && self.reachable(from, to) {
                    if let Some(liar) = self.nodes[to].liar.as_mut() {
                        liar.hear(from, &msg);
                    }
                    let from = self.places[from].id.clone();
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
            Item::Sandbox {
                node,
                incarnation,
                token,
                stopped,
                event,
            } => {
                let i = node as usize;
                let n = &mut self.nodes[i];
                if n.incarnation != incarnation || n.core.is_none() {
                    return;
                }
                if !stopped {
                    let (Event::SandboxExited { task, .. } | Event::SandboxFailed { task, .. }) =
                        event.as_ref()
                    else {
                        return;
                    };
                    if n.runs.get(task).map(|r| r.2) != Some(token) {
                        return; // stopped meanwhile
                    }
                    n.runs.remove(task);
                }
                self.step(i, *event, sink);
            }
            Item::Connect { a, b, token } => {
                let key = (a.min(b), a.max(b));
                if self.pending_links.get(&key) == Some(&token) {
                    self.pending_links.remove(&key);
                    self.peer_up(a as usize, b as usize, sink);
                }
            }
        }
    }

    /// Both ends of a new connection learn of each other: `a` first.
    fn peer_up(&mut self, a: usize, b: usize, sink: &mut Sink) {
        if self.nodes[a].core.is_none() || self.nodes[b].core.is_none() {
            return;
        }
        let advert = self.advert_at(b);
        self.step(a, Event::PeerUp(advert), sink);
        let advert = self.advert_at(a);
        self.step(b, Event::PeerUp(advert), sink);
    }

    /// Brings the connection of `a` and `b` up: at once, or after a `link_spread` delay.
    fn connect(&mut self, a: usize, b: usize, sink: &mut Sink) {
        let spread = self.scenario.link_spread;
        if spread == 0 {
            return self.peer_up(a, b, sink);
        }
        let delay = below(&mut self.link_rng, spread + 1);
        self.link_token += 1;
        let token = self.link_token;
        self.pending_links
            .insert((a.min(b) as u32, a.max(b) as u32), token);
        let (a, b) = (a as u32, b as u32);
        self.push(self.now + delay, Item::Connect { a, b, token });
    }

    /// Whether `a` and `b` belong to different groups kept apart (`apart_at_start`, a
    /// `split`) not yet healed.
    fn apart(&self, a: usize, b: usize) -> bool {
        let (x, y) = (self.places[a].apart, self.places[b].apart);
        x != 0 && y != 0 && x != y
    }

    /// Whether `a` and `b` hold a connection now.
    fn connected(&self, a: usize, b: usize) -> bool {
        self.nodes[a].core.is_some()
            && self.nodes[b].core.is_some()
            && self.peered(a, b)
            && !self.apart(a, b)
            && !self
                .pending_links
                .contains_key(&(a.min(b) as u32, a.max(b) as u32))
    }

    /// Sends hostile node `i`'s next burst of lies to random nodes, and schedules the next.
    fn lie(&mut self, i: usize, sink: &mut Sink) {
        let n = self.nodes.len();
        let node = &mut self.nodes[i];
        let Some(liar) = node.liar.as_mut() else {
            return;
        };
        let answers: Vec<_> = std::iter::from_fn(|| liar.answer(&self.places[i].id, n)).collect();
        let lies: Vec<(usize, Message)> = (0..self.scenario.hostile.burst)
            .map(|_| {
                let to = match liar.pick(n) {
                    j if j == i => (i + 1) % n,
                    j => j,
                };
                (to, liar.lie(&self.places[i].id, n))
            })
            .chain(answers)
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
    /// The nodes `i` may hold a connection with (itself included): a worker under `voters`
    /// peering connects to voters only, and looking at those alone keeps a cold start, or a
    /// bounce of every node, linear in the nodes rather than quadratic.
    fn peer_candidates(&self, i: usize) -> std::ops::Range<usize> {
        match self.scenario.peering {
            Peering::Voters if i >= self.voters => 0..self.voters.min(self.nodes.len()),
            _ => 0..self.nodes.len(),
        }
    }

    fn peered(&self, a: usize, b: usize) -> bool {
        match self.scenario.peering {
            Peering::Full => true,
            Peering::Voters => a < self.voters || b < self.voters,
        }
    }

    fn reachable(&self, from: usize, to: usize) -> bool {
        self.places[from].group == self.places[to].group
            && !self.apart(from, to)
            && !self.cuts.contains(&(from as u32, to as u32))
    }

    /// Logs and steps node `i` with `event` at the current global time, then carries out the
    /// commands.
    fn step(&mut self, i: usize, event: Event, sink: &mut Sink) {
        if self.nodes[i].core.is_none() {
            return;
        }
        // The event is durable before its commands are carried out.
        let logged = self
            .replay_logs
            .then(|| Logged::new(&event, &self.places, &self.nodes));
        let local = self.places[i].local(self.now);
        let node = &mut self.nodes[i];
        let Some(core) = node.core.as_mut() else {
            return;
        };
        let step_event = sink.wants_steps().then(|| event.clone());
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        if let Some(logged) = logged {
            node.log.push((local, logged));
        }
        // Signing is the runtime's: answered at once, and logged as the runtime logs it.
        let signed = core.step_signing(local, event, &mut out, simulated_signature);
        if self.replay_logs {
            for e in signed {
                node.log.push((local, Logged::Other(Box::new(e))));
            }
        }
        // A snapshot copies the whole state, peer table included: taken at most once per as
        // many events as the node has peers, its cost stays constant per event however large
        // the cluster (a voter with 100,000 peers would otherwise copy them every 4,096 events).
        if !node.log.is_empty() && node.log.len() >= SNAPSHOT_EVERY.max(core.peers().len()) {
            node.snapshot = Some(Box::new(core.clone()));
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
            Command::Sign { .. } => {} // answered in `step`
            Command::Send { to, msg } => {
                let Some(j) = index(to, self.nodes.len()) else {
                    return;
                };
                sink.count_message(msg.is_election());
                if Sink::traced(c) {
                    let place = &self.places[i];
                    sink.core_output(&self.nodes[i].name, c, |local| place.global(local));
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
                let at = self.places[i].global(*at_ms).max(self.now);
                let incarnation = self.nodes[i].incarnation;
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
            Command::StartSandbox {
                task,
                attempt,
                spec,
            } => self.start_sandbox(i, task, *attempt, spec),
            Command::StopSandbox { task, attempt } => self.stop_sandbox(i, task, *attempt),
            Command::RoleChanged { .. } | Command::Notice(_) => {
                let place = &self.places[i];
                sink.core_output(&self.nodes[i].name, c, |local| place.global(local));
                if matches!(c, Command::Notice(Notice::BecameAdmin { .. })) {
                    let best = self.best_live_voter() == Some(i);
                    sink.election_winner(best);
                }
            }
        }
    }

    /// Starts a simulated run on node `i`; its end is queued unless it hangs.
    fn start_sandbox(&mut self, i: usize, task: &TaskId, attempt: u32, spec: &TaskSpec) {
        let Some(model) = &self.sandbox else {
            return;
        };
        let plan = model.plan(task, attempt, spec);
        let end = plan
            .after_ms
            .map(|after| (after, model.end_event(task, attempt, &plan)));
        self.run_token += 1;
        let token = self.run_token;
        let node = &mut self.nodes[i];
        node.runs.insert(task.clone(), (attempt, self.now, token));
        let incarnation = node.incarnation;
        if let Some((after, event)) = end {
            self.push(
                self.now + after,
                Item::Sandbox {
                    node: i as u32,
                    incarnation,
                    token,
                    stopped: false,
                    event: Box::new(event),
                },
            );
        }
    }

    /// Stops run `attempt` of `task` on node `i` at once: it ends with SIGTERM.
    fn stop_sandbox(&mut self, i: usize, task: &TaskId, attempt: u32) {
        let node = &mut self.nodes[i];
        if node.runs.get(task).map(|r| r.0) != Some(attempt) {
            return;
        }
        let Some((_, started, token)) = node.runs.remove(task) else {
            return;
        };
        let incarnation = node.incarnation;
        let event = SandboxModel::stopped_event(task, attempt, self.now - started);
        self.push(
            self.now,
            Item::Sandbox {
                node: i as u32,
                incarnation,
                token,
                stopped: true,
                event: Box::new(event),
            },
        );
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

    /// Node `j`'s advertisement now: the one handed out last if its uptime still reads the same.
    fn advert_at(&mut self, j: usize) -> Advert {
        let place = &mut self.places[j];
        let uptime_s = (self.now - place.started_at) / 1_000;
        match &place.advert {
            Some(advert) if advert.info().uptime_s == uptime_s => advert.clone(),
            _ => {
                let info = PeerInfo {
                    uptime_s,
                    ..self.nodes[j].profile.clone()
                };
                let advert = Advert::new(place.id.clone(), info);
                place.advert = Some(advert.clone());
                advert
            }
        }
    }

    fn profile_at(&self, j: usize) -> PeerInfo {
        let node = &self.nodes[j];
        PeerInfo {
            uptime_s: (self.now - self.places[j].started_at) / 1_000,
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
                (Reverse(s), self.places[j].id.clone(), j)
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
        if self.nodes[i].core.is_none() {
            return;
        }
        // Only the peers that saw the connection come up see it go down.
        let peers: Vec<usize> = self
            .peer_candidates(i)
            .filter(|j| *j != i && self.connected(i, *j))
            .collect();
        let i32 = i as u32;
        self.pending_links
            .retain(|(a, b), _| *a != i32 && *b != i32);
        let node = &mut self.nodes[i];
        node.down = node.core.take().map(Box::new);
        node.incarnation += 1;
        // Its sandbox runs die with it; no exit reaches the old incarnation.
        node.runs.clear();
        let gone = self.places[i].id.clone();
        for j in peers {
            self.step(j, Event::PeerDown { peer: gone.clone() }, sink);
        }
    }

    fn restart(&mut self, i: usize, sink: &mut Sink) {
        if self.nodes[i].core.is_some() {
            return;
        }
        let wanted = self.scenario.node_config_at(i, self.now);
        let node = &mut self.nodes[i];
        let first = node.first_config.get_or_insert_with(|| wanted.clone());
        let down = node.down.take();
        let core = match down {
            Some(core) if !self.replay_logs => *core,
            down => {
                // Recovery: the snapshot, then the tail of the log replayed through the core.
                let mut core = match &node.snapshot {
                    Some(s) => (**s).clone(),
                    None => Core::new(
                        self.places[i].id.clone(),
                        first.clone(),
                        node.profile.capabilities.to_vec(),
                        self.seed,
                    )
                    .map_err(|e| e.to_string())
                    .expect("scenario config was validated"),
                };
                let mut sinkhole = Vec::new();
                let log = std::mem::take(&mut node.log);
                for (t, e) in &log {
                    core.step(*t, e.event(&self.places, &self.nodes), &mut sinkhole);
                    sinkhole.clear();
                }
                self.nodes[i].log = log;
                if let Some(down) = down {
                    assert!(
                        core == *down,
                        "n{i}: replaying its log did not give the state it crashed in"
                    );
                }
                core
            }
        };
        let node = &mut self.nodes[i];
        node.core = Some(core);
        node.incarnation += 1;
        self.places[i].started_at = self.now;
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
        let changed = self.nodes[i]
            .core
            .as_ref()
            .is_some_and(|c| *c.config() != wanted);
        if changed {
            self.step(i, Event::ConfigChanged { config: wanted }, sink);
        }
        let candidates = self.peer_candidates(i);
        for j in candidates.clone() {
            self.hint_peer(i, j, candidates.end);
            if j != i && self.nodes[j].core.is_some() && self.peered(i, j) && !self.apart(i, j) {
                self.connect(i, j, sink);
            }
        }
    }

    fn cut(&mut self, from: usize, to: usize) {
        self.cuts.insert((from as u32, to as u32));
    }

    fn partition(&mut self, groups: &[Vec<usize>]) {
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                self.places[i].group = g as u32 + 1;
            }
        }
    }

    fn set_apart(&mut self, groups: &[Vec<usize>]) {
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                self.places[i].apart = g as u32 + 1;
            }
        }
    }

    fn split(&mut self, groups: &[Vec<usize>], sink: &mut Sink) {
        // Only pairs with a node in a group, before or after, change.
        let before: Vec<u32> = self.places.iter().map(|p| p.apart).collect();
        for p in &mut self.places {
            p.apart = 0;
        }
        self.set_apart(groups);
        let involved: Vec<usize> = (0..self.nodes.len())
            .filter(|i| before[*i] != 0 || self.places[*i].apart != 0)
            .collect();
        let was_apart =
            |a: usize, b: usize| before[a] != 0 && before[b] != 0 && before[a] != before[b];
        for (k, &a) in involved.iter().enumerate() {
            for &b in &involved[k + 1..] {
                match (was_apart(a, b), self.apart(a, b)) {
                    (false, true) => {
                        // A connection still waiting out its delay never comes up; one that is
                        // up goes down at both ends.
                        let key = (a as u32, b as u32);
                        let up = self.pending_links.remove(&key).is_none()
                            && self.nodes[a].core.is_some()
                            && self.nodes[b].core.is_some()
                            && self.peered(a, b);
                        if up {
                            let (ida, idb) = (self.places[a].id.clone(), self.places[b].id.clone());
                            self.step(a, Event::PeerDown { peer: idb }, sink);
                            self.step(b, Event::PeerDown { peer: ida }, sink);
                        }
                    }
                    (true, false) if self.connected(a, b) => self.connect(a, b, sink),
                    _ => {}
                }
            }
        }
    }

    fn heal(&mut self, sink: &mut Sink) {
        self.cuts.clear();
        for p in &mut self.places {
            p.group = 0;
        }
        if self.places.iter().all(|p| p.apart == 0) {
            return;
        }
        // The pairs kept apart connect now, in index order.
        let n = self.nodes.len();
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .filter(|&(a, b)| self.apart(a, b))
            .collect();
        for p in &mut self.places {
            p.apart = 0;
        }
        for (a, b) in pairs {
            if self.connected(a, b) {
                self.connect(a, b, sink);
            }
        }
    }

    fn set_network(&mut self, loss_ppm: u32, duplicate_ppm: u32, reorder_ppm: u32) {
        self.loss_ppm = loss_ppm;
        self.duplicate_ppm = duplicate_ppm;
        self.reorder_ppm = reorder_ppm;
    }

    fn change_members(
        &mut self,
        i: usize,
        change: chorus_core::MemberChange,
        request: u64,
        sink: &mut Sink,
    ) {
        // Logged and stepped like any input; a node that is down ignores it (`step`).
        self.step(i, Event::ChangeMembers { change, request }, sink);
    }

    fn transfer_admin(
        &mut self,
        i: usize,
        to: Option<chorus_core::NodeId>,
        request: u64,
        sink: &mut Sink,
    ) {
        self.step(i, Event::TransferAdmin { to, request }, sink);
    }

    fn shut_down(&mut self, i: usize, sink: &mut Sink) {
        self.step(i, Event::Shutdown, sink);
    }

    fn submit_task(
        &mut self,
        i: usize,
        spec: chorus_core::SharedSpec,
        key: Option<String>,
        request: u64,
        sink: &mut Sink,
    ) {
        self.step(
            i,
            Event::SubmitTask {
                spec,
                key,
                owner: None,
                request,
            },
            sink,
        );
    }

    fn cancel_task(&mut self, i: usize, task: TaskId, request: u64, sink: &mut Sink) {
        self.step(i, Event::CancelTask { task, request }, sink);
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
