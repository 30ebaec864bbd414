//! The turmoil engine: every host `n{i}` runs the real runtime loop
//! ([`chorus_io::runtime::Runtime`]) over simulated UDP ([`transport`]), with a
//! [`MemoryLog`] kept outside the host so it survives crashes, and the tokio clock (virtual time
//! under turmoil). Tens of nodes: a turmoil tick costs about N³ (docs/design.md §2).
//!
//! Time is driven here, tick by tick, with `Sim::step` (`Sim::run` returns at once when only
//! hosts are registered). After each tick the nodes' buffered outputs are sorted by (time, node,
//! sequence) and written, then the scenario's due actions fire at the tick boundary. Network
//! delivery happens at tick boundaries, so latencies are rounded up to the tick.
//!
//! Connection events: when a node starts, it gets `PeerUp` for every live node and every live
//! node gets `PeerUp` for it (with `link_spread`, each pair after its own seeded delay, at the
//! next tick boundary); when it crashes, every node connected to it gets `PeerDown` (as
//! connection resets would tell them). Partitions cause no peer events; `apart_at_start`
//! groups connect only at the first heal, and a `split` takes connections down between its
//! groups (`PeerDown` at both ends) and brings back those it no longer keeps apart.
//!
//! Operator requests (`add` and `remove` actions, task submits and cancels) reach a node's
//! runtime on its operator channel, as the HTTP API's do in production; the node steps them
//! during the next tick.
//!
//! Tasks run in the simulated sandbox (`sandbox.rs`, the runs the discrete-event engine draws)
//! through the runtime's `TaskSandboxes` adapter ([`sandboxes`]), on turmoil's clock.
//!
//! Settings: each node's core starts with its own configuration; a restart whose settings
//! differ (`node_settings` with `from`) logs `ConfigChanged` after `Started`, as `chorus run`
//! does.
//!
//! Clocks: without drift, each node runs on [`TokioClock`]; with `network.drift_ppm`, on a
//! [`clock::DriftClock`] at `1 + d/1e6` of the simulated rate (`d` drawn as the discrete-event
//! engine draws it), and its times are converted back to global time for the trace.

mod clock;
mod observer;
mod sandboxes;
mod transport;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use chorus_core::rng::below;
use chorus_core::{Command, Config, Core, Event, NodeId, Notice, Role};
use chorus_io::runtime::{Clock, EventLog, MemoryLog, Runtime, TokioClock};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc::{self, Sender, UnboundedSender};
use turmoil::Sim;

use crate::driver::{name, node_profile, Cluster, Driver};
use crate::scenario::Scenario;
use crate::sink::Sink;
use crate::trace::Record;
use observer::{Output, Outputs, SimObserver};
use transport::{Control, Directory, NetParams, NetShared, SimTransport, PORT};

/// Engine settings beyond the scenario.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The turmoil tick. Default: 10 ms for CHORUS-scale timings (minimum election timeout of a
    /// second or more), else 1 ms.
    pub tick_ms: Option<u64>,
}

/// A fixed epoch, so nothing in a run depends on the wall clock (2024-01-01T00:00:00Z).
const EPOCH_S: u64 = 1_704_067_200;

/// Operator requests a node's channel holds; a scenario asks a node a few times at most.
const OPERATOR_QUEUE: usize = 64;

/// Datagrams a socket queues before turmoil drops the excess silently (its default is 64). A
/// node receives at most a few messages per peer per tick, so this is never reached here.
const UDP_CAPACITY: usize = 1 << 16;

/// Runs `scenario` on turmoil.
pub fn run(scenario: &Scenario, seed: u64, sink: &mut Sink) -> anyhow::Result<()> {
    run_with(scenario, seed, sink, &Options::default())
}

/// The tick used for `scenario` under `options`.
pub fn tick_ms(scenario: &Scenario, options: &Options) -> u64 {
    options
        .tick_ms
        .unwrap_or(if scenario.shortest_election_timeout_min_ms() >= 1_000 {
            10
        } else {
            1
        })
}

/// [`run`] with explicit engine options.
pub fn run_with(
    scenario: &Scenario,
    seed: u64,
    sink: &mut Sink,
    options: &Options,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        scenario.peering == crate::scenario::Peering::Full,
        "the turmoil engine always peers every node with every other; `peering = \"voters\"` is for the discrete-event engine"
    );
    anyhow::ensure!(
        scenario.hostile.is_off(),
        "hostile nodes are simulated by the discrete-event engine only (--engine des)"
    );
    let tick_ms = tick_ms(scenario, options);
    anyhow::ensure!(tick_ms > 0, "the turmoil tick must be positive");
    let (latency_min, latency_max) = scenario.network.latency_ms;
    let sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(EPOCH_S))
        .tick_duration(Duration::from_millis(tick_ms))
        .simulation_duration(Duration::from_millis(scenario.duration_ms + tick_ms))
        .udp_capacity(UDP_CAPACITY)
        .min_message_latency(Duration::from_millis(latency_min))
        .max_message_latency(Duration::from_millis(latency_max))
        .build();
    let mut cluster = TurmoilCluster::new(sim, scenario, seed, sink.wants_steps());
    let mut driver = Driver::new(scenario, seed);

    sink.at(0);
    driver.start_initial(&mut cluster, sink);
    driver.fire_due(0, &mut cluster, sink);
    let mut now = 0;
    while now < scenario.duration_ms && !sink.stopped() {
        cluster
            .sim
            .step()
            .map_err(|e| anyhow::anyhow!("turmoil engine at {now} ms: {e}"))?;
        now = cluster.sim.elapsed().as_millis() as u64;
        cluster.drain(sink);
        cluster.release_links(now);
        if driver.next_at().is_some_and(|t| t <= now) {
            sink.at(now);
            driver.fire_due(now, &mut cluster, sink);
        }
    }
    if scenario.tasks.is_some() {
        cluster.check_owned_at_end(sink)?;
    }
    Ok(())
}

/// Everything one host needs to (re)start its node; cloned into the host closure.
#[derive(Clone)]
struct NodeSpec {
    index: usize,
    seed: u64,
    core: Core,
    start_events: Vec<Event>,
    log: MemoryLog,
    dir: Rc<Directory>,
    net: Rc<RefCell<NetShared>>,
    outputs: Rc<RefCell<Outputs>>,
    control: Rc<RefCell<Vec<Option<UnboundedSender<Control>>>>>,
    /// Each live node's operator channel (the HTTP API's, in production).
    operators: Rc<RefCell<Vec<Option<Sender<Event>>>>>,
    incarnations: Rc<RefCell<Vec<u64>>>,
    /// Settings the engine wants the next start of each node to log (`ConfigChanged`).
    new_config: Rc<RefCell<Vec<Option<Config>>>>,
    steps: bool,
    drift_ppm: i64,
    /// The simulated sandbox, when the scenario has a task workload.
    sandbox: Option<crate::sandbox::SandboxModel>,
}

impl NodeSpec {
    /// The host software: called by turmoil at the first start and at every bounce.
    fn software(&self) -> impl std::future::Future<Output = turmoil::Result> + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.control.borrow_mut()[self.index] = Some(tx);
        let (operator_tx, operator_rx) = mpsc::channel(OPERATOR_QUEUE);
        self.operators.borrow_mut()[self.index] = Some(operator_tx);
        let incarnation = {
            let mut inc = self.incarnations.borrow_mut();
            inc[self.index] += 1;
            inc[self.index]
        };
        let spec = self.clone();
        async move {
            let socket =
                turmoil::net::UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)))
                    .await?;
            let id = &spec.dir.ids[spec.index];
            let rng_id = NodeId::from(format!("{id}#{incarnation}"));
            let rng = chorus_core::rng::node_rng(spec.seed ^ 0x7e4b_0111_5eed_d47a, &rng_id);
            let transport = SimTransport::new(socket, spec.dir.clone(), spec.net.clone(), rx, rng);
            let mut start_events = spec.start_events.clone();
            if let Some(config) = spec.new_config.borrow_mut()[spec.index].take() {
                start_events.push(Event::ConfigChanged { config });
            }
            let observer = SimObserver {
                node: spec.index,
                outputs: spec.outputs.clone(),
                steps: spec.steps,
            };
            if spec.drift_ppm == 0 {
                let clock = TokioClock::new();
                spec.run(transport, observer, clock, start_events, operator_rx)
                    .await?;
            } else {
                let clock = clock::DriftClock::new(spec.drift_ppm);
                spec.run(transport, observer, clock, start_events, operator_rx)
                    .await?;
            }
            Ok(())
        }
    }

    /// The shared runtime loop, until the host is crashed.
    async fn run(
        &self,
        transport: SimTransport,
        observer: SimObserver,
        clock: impl Clock,
        start_events: Vec<Event>,
        operator: mpsc::Receiver<Event>,
    ) -> Result<Core, chorus_io::runtime::RuntimeError> {
        Runtime::new(
            self.core.clone(),
            transport,
            self.log.clone(),
            clock,
            observer,
        )
        .with_sandboxes(sandboxes::SimSandboxes::new(self.sandbox.clone()))
        .with_start_events(start_events)
        .with_operator_inputs(operator)
        .run(std::future::pending())
        .await
    }
}

/// The engine's view of the cluster, and the [`Cluster`] the scenario driver acts on.
struct TurmoilCluster {
    sim: Sim<'static>,
    specs: Vec<NodeSpec>,
    registered: Vec<bool>,
    live: Vec<bool>,
    /// Role and term last announced by each live node.
    roles: Vec<Option<(Role, u64)>>,
    /// Directed cuts in force (applied to turmoil once both ends exist).
    cuts: BTreeSet<(usize, usize)>,
    /// The directions turmoil drops now (cuts and groups kept apart, between registered hosts).
    applied: BTreeSet<(usize, usize)>,
    scores: Vec<u32>,
    drifts: Vec<i64>,
    voters: usize,
    outputs: Rc<RefCell<Outputs>>,
    net: Rc<RefCell<NetShared>>,
    control: Rc<RefCell<Vec<Option<UnboundedSender<Control>>>>>,
    operators: Rc<RefCell<Vec<Option<Sender<Event>>>>>,
    scenario: Scenario,
    seed: u64,
    /// The settings each node ran with at its latest start.
    configs: Vec<Option<Config>>,
    new_config: Rc<RefCell<Vec<Option<Config>>>>,
    /// `apart_at_start` group per node (0: none), until the first heal.
    apart: Vec<u32>,
    /// Connections waiting out their `link_spread` delay: pair → token, and by due time.
    pending_links: BTreeMap<(usize, usize), u64>,
    link_queue: BTreeMap<(u64, u64), (usize, usize)>,
    link_token: u64,
    link_rng: ChaCha8Rng,
}

impl TurmoilCluster {
    /// Invariant 7 at the end: what each live submitter still owns, from its state as its own
    /// log recovers it (what it logged is what it stepped: inputs are logged first).
    fn check_owned_at_end(&self, sink: &mut Sink) -> anyhow::Result<()> {
        for (i, spec) in self.specs.iter().enumerate() {
            if !self.live[i] {
                continue;
            }
            let recovery = spec.log.clone().recover()?;
            let core = chorus_io::runtime::restore(recovery, spec.core.clone())?;
            let unfinished = core
                .owned_tasks()
                .iter()
                .filter(|(_, t)| t.phase != chorus_core::TaskPhase::Done)
                .map(|(id, _)| id.to_string())
                .collect();
            sink.owned_at_end(&name(i), &unfinished);
        }
        Ok(())
    }

    fn new(sim: Sim<'static>, scenario: &Scenario, seed: u64, steps: bool) -> TurmoilCluster {
        let n = scenario.nodes;
        // Pin every address now, in index order, so late joiners' addresses do not depend on
        // when they start.
        let ids: Vec<NodeId> = (0..n).map(|i| NodeId::from(name(i))).collect();
        let ips: Vec<_> = (0..n).map(|i| sim.lookup(name(i))).collect();
        let profiles: Vec<_> = (0..n).map(|i| node_profile(scenario, seed, i)).collect();
        let dir = Rc::new(Directory::new(
            scenario.config.cluster_id.clone(),
            ids,
            &ips,
            profiles.clone(),
        ));
        let net = Rc::new(RefCell::new(NetShared {
            net: NetParams {
                loss_ppm: scenario.network.loss_ppm,
                duplicate_ppm: scenario.network.duplicate_ppm,
                reorder_ppm: scenario.network.reorder_ppm,
                reorder_hold_ms: scenario.network.latency_ms.1,
            },
            ..NetShared::default()
        }));
        let outputs = Rc::new(RefCell::new(Outputs::default()));
        let control = Rc::new(RefCell::new(vec![None; n]));
        let operators = Rc::new(RefCell::new(vec![None; n]));
        let incarnations = Rc::new(RefCell::new(vec![0; n]));
        let new_config = Rc::new(RefCell::new(vec![None; n]));
        // Replaced by the node's own settings at its first start.
        let config = scenario.node_config();
        let drifts = crate::driver::clock_drifts(scenario, seed);
        let specs = (0..n)
            .map(|i| {
                let profile = &profiles[i];
                let core = Core::new(
                    dir.ids[i].clone(),
                    config.clone(),
                    profile.capabilities.to_vec(),
                    seed,
                )
                // The scenario was validated, so its configuration is too.
                .expect("validated configuration");
                NodeSpec {
                    index: i,
                    seed,
                    core,
                    start_events: vec![Event::ResourcesSampled {
                        resources: profile.resources,
                    }],
                    log: MemoryLog::new(),
                    dir: dir.clone(),
                    net: net.clone(),
                    outputs: outputs.clone(),
                    control: control.clone(),
                    operators: operators.clone(),
                    incarnations: incarnations.clone(),
                    new_config: new_config.clone(),
                    steps,
                    drift_ppm: drifts[i],
                    sandbox: scenario
                        .tasks
                        .as_ref()
                        .map(|w| crate::sandbox::SandboxModel::new(seed, w)),
                }
            })
            .collect();
        let scores = profiles
            .iter()
            .map(|p| chorus_core::score::score(0, p.capabilities.len(), p.resources))
            .collect();
        TurmoilCluster {
            sim,
            specs,
            registered: vec![false; n],
            live: vec![false; n],
            roles: vec![None; n],
            cuts: BTreeSet::new(),
            applied: BTreeSet::new(),
            scores,
            drifts,
            voters: scenario.voter_count(),
            outputs,
            net,
            control,
            operators,
            scenario: scenario.clone(),
            seed,
            configs: vec![None; n],
            new_config,
            apart: vec![0; n],
            pending_links: BTreeMap::new(),
            link_queue: BTreeMap::new(),
            link_token: 0,
            // The discrete-event engine's stream for the same purpose, so both spread alike.
            link_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x11c5_9e4d_0000_0004),
        }
    }

    /// Whether messages from `a` to `b` are dropped: a cut, or groups kept apart.
    fn blocked(&self, a: usize, b: usize) -> bool {
        self.cuts.contains(&(a, b)) || self.apart_pair(a, b)
    }

    /// Brings turmoil's links between registered hosts in line with [`Self::blocked`],
    /// partitioning or repairing only the directions that change.
    fn apply_links(&mut self) {
        let n = self.apart.len();
        for a in 0..n {
            for b in 0..n {
                self.apply_link(a, b);
            }
        }
    }

    /// [`Self::apply_links`] for the direction from `a` to `b`.
    fn apply_link(&mut self, a: usize, b: usize) {
        if a == b || !self.registered[a] || !self.registered[b] {
            return;
        }
        let want = self.blocked(a, b);
        if want != self.applied.contains(&(a, b)) {
            if want {
                self.applied.insert((a, b));
                self.sim.partition_oneway(name(a), name(b));
            } else {
                self.applied.remove(&(a, b));
                self.sim.repair_oneway(name(a), name(b));
            }
        }
    }

    fn apart_pair(&self, a: usize, b: usize) -> bool {
        let (x, y) = (self.apart[a], self.apart[b]);
        x != 0 && y != 0 && x != y
    }

    /// Whether `a` and `b` hold a connection now.
    fn connected(&self, a: usize, b: usize) -> bool {
        self.live[a]
            && self.live[b]
            && !self.apart_pair(a, b)
            && !self.pending_links.contains_key(&(a.min(b), a.max(b)))
    }

    /// Brings the connection of `a` and `b` up now, or after a `link_spread` delay.
    fn connect(&mut self, a: usize, b: usize, now: u64) {
        let spread = self.scenario.link_spread;
        if spread == 0 {
            self.tell(a, Control::Up(b));
            self.tell(b, Control::Up(a));
            return;
        }
        let delay = below(&mut self.link_rng, spread + 1);
        self.link_token += 1;
        self.pending_links
            .insert((a.min(b), a.max(b)), self.link_token);
        self.link_queue
            .insert((now + delay, self.link_token), (a, b));
    }

    /// Connections whose delay is over by `now` come up (turmoil delivers at tick boundaries).
    fn release_links(&mut self, now: u64) {
        while let Some(entry) = self.link_queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let token = entry.key().1;
            let (a, b) = entry.remove();
            let key = (a.min(b), a.max(b));
            if self.pending_links.get(&key) == Some(&token) {
                self.pending_links.remove(&key);
                if self.live[a] && self.live[b] {
                    self.tell(a, Control::Up(b));
                    self.tell(b, Control::Up(a));
                }
            }
        }
    }

    fn tell(&self, node: usize, c: Control) {
        if let Some(tx) = &self.control.borrow()[node] {
            // A node that is down has dropped its receiver; it will hear at restart.
            let _ = tx.send(c);
        }
    }

    /// Whether `winner` has the best score among live voters (ties: lowest id).
    fn is_best(&self, winner: usize) -> bool {
        let best = (0..self.voters)
            .filter(|i| self.live[*i])
            .map(|i| (self.scores[i], std::cmp::Reverse(name(i)), i))
            .max()
            .map(|(_, _, i)| i);
        best == Some(winner)
    }

    /// Writes the tick's buffered outputs in (time, node, sequence) order, and the counts.
    fn drain(&mut self, sink: &mut Sink) {
        let mut buffered = std::mem::take(&mut self.outputs.borrow_mut().buffered);
        buffered.sort_by_key(|(t, node, seq, _)| (*t, *node, *seq));
        for (t, node, _, output) in buffered {
            sink.at(t.max(sink.now()));
            let name = name(node);
            match output {
                Output::Step { event, commands } => sink.record(Record::Step {
                    node: name,
                    event,
                    commands,
                }),
                Output::Core { command, local_ms } => {
                    match &command {
                        Command::RoleChanged { role, term, .. } => {
                            self.roles[node] = Some((*role, *term));
                        }
                        Command::Notice(Notice::BecameAdmin { .. }) => {
                            let best = self.is_best(node);
                            sink.election_winner(best);
                        }
                        _ => {}
                    }
                    // Node time `local_ms` was global `t`; later node times map through the
                    // node's clock rate (rounded up: a lease is over once the clock says so).
                    let drift = self.drifts[node];
                    sink.core_output(&name, &command, |local| {
                        let ahead_us = i128::from(local.saturating_sub(local_ms)) * 1_000;
                        t + (clock::real_us(ahead_us, drift) as u64).div_ceil(1_000)
                    });
                }
            }
        }
        let (all, election) = std::mem::take(&mut self.net.borrow_mut().sent);
        for k in 0..all {
            sink.count_message(k < election);
        }
    }
}

impl Cluster for TurmoilCluster {
    fn is_live(&self, i: usize) -> bool {
        self.live[i]
    }

    fn admin(&self) -> Option<usize> {
        (0..self.live.len())
            .filter(|i| self.live[*i])
            .filter_map(|i| match self.roles[i] {
                Some((Role::Admin, term)) => Some((term, std::cmp::Reverse(i))),
                _ => None,
            })
            .max()
            .map(|(_, std::cmp::Reverse(i))| i)
    }

    fn crash(&mut self, i: usize, _sink: &mut Sink) {
        if !self.live[i] {
            return;
        }
        let peers: Vec<usize> = (0..self.live.len())
            .filter(|j| *j != i && self.connected(i, *j))
            .collect();
        self.pending_links.retain(|(a, b), _| *a != i && *b != i);
        self.sim.crash(name(i));
        self.live[i] = false;
        self.roles[i] = None;
        self.control.borrow_mut()[i] = None;
        self.operators.borrow_mut()[i] = None;
        for j in peers {
            self.tell(j, Control::Down(i));
        }
    }

    fn restart(&mut self, i: usize, sink: &mut Sink) {
        if self.live[i] {
            return;
        }
        let now = sink.now();
        let wanted = self.scenario.node_config_at(i, now);
        match &self.configs[i] {
            // Logged at this start: the core takes it after `Started`, as `chorus run` does.
            Some(c) if *c != wanted => self.new_config.borrow_mut()[i] = Some(wanted.clone()),
            Some(_) => {}
            None => {
                let profile = &self.specs[i].dir.profiles[i];
                self.specs[i].core = Core::new(
                    self.specs[i].dir.ids[i].clone(),
                    wanted.clone(),
                    profile.capabilities.to_vec(),
                    self.seed,
                )
                .expect("validated configuration");
            }
        }
        self.configs[i] = Some(wanted);
        if self.registered[i] {
            self.sim.bounce(name(i));
        } else {
            let spec = self.specs[i].clone();
            self.sim.host(name(i), move || spec.software());
            self.registered[i] = true;
            self.apply_links();
        }
        self.live[i] = true;
        self.roles[i] = Some((Role::Follower, 0));
        for j in 0..self.live.len() {
            if j != i && self.live[j] && !self.apart_pair(i, j) {
                self.connect(i, j, now);
            }
        }
    }

    fn cut(&mut self, from: usize, to: usize) {
        if from == to || !self.cuts.insert((from, to)) {
            return;
        }
        self.apply_link(from, to);
    }

    fn set_apart(&mut self, groups: &[Vec<usize>]) {
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                self.apart[i] = g as u32 + 1;
            }
        }
        self.apply_links();
    }

    fn split(&mut self, groups: &[Vec<usize>], sink: &mut Sink) {
        let n = self.apart.len();
        let before = std::mem::replace(&mut self.apart, vec![0; n]);
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                self.apart[i] = g as u32 + 1;
            }
        }
        let was_apart =
            |a: usize, b: usize| before[a] != 0 && before[b] != 0 && before[a] != before[b];
        for a in 0..n {
            for b in a + 1..n {
                match (was_apart(a, b), self.apart_pair(a, b)) {
                    (false, true) => {
                        let pending = self.pending_links.remove(&(a, b)).is_some();
                        if !pending && self.live[a] && self.live[b] {
                            self.tell(a, Control::Down(b));
                            self.tell(b, Control::Down(a));
                        }
                    }
                    (true, false) if self.connected(a, b) => self.connect(a, b, sink.now()),
                    _ => {}
                }
            }
        }
        self.apply_links();
    }

    fn heal(&mut self, sink: &mut Sink) {
        let n = self.apart.len();
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .filter(|&(a, b)| self.apart_pair(a, b))
            .collect();
        self.cuts.clear();
        self.apart = vec![0; n];
        self.apply_links();
        for (a, b) in pairs {
            if self.connected(a, b) {
                self.connect(a, b, sink.now());
            }
        }
    }

    fn set_network(&mut self, loss_ppm: u32, duplicate_ppm: u32, reorder_ppm: u32) {
        let mut net = self.net.borrow_mut();
        net.net.loss_ppm = loss_ppm;
        net.net.duplicate_ppm = duplicate_ppm;
        net.net.reorder_ppm = reorder_ppm;
    }

    fn change_members(
        &mut self,
        i: usize,
        change: chorus_core::MemberChange,
        request: u64,
        _sink: &mut Sink,
    ) {
        if let Some(tx) = &self.operators.borrow()[i] {
            // The queue holds far more than a scenario asks of one node per tick; a node that
            // is down has dropped its receiver, and misses the request as its API would.
            let _ = tx.try_send(Event::ChangeMembers { change, request });
        }
    }

    fn transfer_admin(
        &mut self,
        i: usize,
        to: Option<chorus_core::NodeId>,
        request: u64,
        _sink: &mut Sink,
    ) {
        if let Some(tx) = &self.operators.borrow()[i] {
            // As for membership requests: a node that is down misses it, as its API would.
            let _ = tx.try_send(Event::TransferAdmin { to, request });
        }
    }

    fn shut_down(&mut self, i: usize, _sink: &mut Sink) {
        if let Some(tx) = &self.operators.borrow()[i] {
            // The runtime loop steps it like any operator input; the core then stops acting,
            // and the driver crashes the host once the grace is over.
            let _ = tx.try_send(Event::Shutdown);
        }
    }

    fn submit_task(
        &mut self,
        i: usize,
        spec: chorus_core::SharedSpec,
        key: Option<String>,
        request: u64,
        _sink: &mut Sink,
    ) {
        if let Some(tx) = &self.operators.borrow()[i] {
            // As for membership requests: a node that is down misses it, as its API would.
            let _ = tx.try_send(Event::SubmitTask {
                spec,
                key,
                owner: None,
                request,
            });
        }
    }

    fn cancel_task(&mut self, i: usize, task: chorus_core::TaskId, request: u64, _sink: &mut Sink) {
        if let Some(tx) = &self.operators.borrow()[i] {
            let _ = tx.try_send(Event::CancelTask { task, request });
        }
    }
}
