//! The turmoil engine: every host `n{i}` runs the real runtime loop
//! ([`chorus_io::runtime::Runtime`]) over simulated UDP ([`transport`]), with a
//! [`MemoryLog`] kept outside the host so it survives crashes, and the tokio clock (virtual time
//! under turmoil). Tens of nodes: a turmoil tick costs about N³ (DESIGN §2).
//!
//! Time is driven here, tick by tick, with `Sim::step` (`Sim::run` returns at once when only
//! hosts are registered). After each tick the nodes' buffered outputs are sorted by (time, node,
//! sequence) and written, then the scenario's due actions fire at the tick boundary. Network
//! delivery happens at tick boundaries, so latencies are rounded up to the tick.
//!
//! Connection events: when a node starts, it gets `PeerUp` for every live node and every live
//! node gets `PeerUp` for it; when it crashes, every live node gets `PeerDown` (as connection
//! resets would tell them). Partitions cause no peer events.
//!
//! Clocks: without drift, each node runs on [`TokioClock`]; with `network.drift_ppm`, on a
//! [`clock::DriftClock`] at `1 + d/1e6` of the simulated rate (`d` drawn as the discrete-event
//! engine draws it), and its times are converted back to global time for the trace.

mod clock;
mod observer;
mod transport;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use chorus_core::{Command, Core, Event, NodeId, Notice, Role};
use chorus_io::runtime::{Clock, MemoryLog, Runtime, TokioClock};
use tokio::sync::mpsc::{self, UnboundedSender};
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
        .unwrap_or(if scenario.config.election_timeout_min_ms >= 1_000 {
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
        if driver.next_at().is_some_and(|t| t <= now) {
            sink.at(now);
            driver.fire_due(now, &mut cluster, sink);
        }
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
    incarnations: Rc<RefCell<Vec<u64>>>,
    steps: bool,
    drift_ppm: i64,
}

impl NodeSpec {
    /// The host software: called by turmoil at the first start and at every bounce.
    fn software(&self) -> impl std::future::Future<Output = turmoil::Result> + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.control.borrow_mut()[self.index] = Some(tx);
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
            let observer = SimObserver {
                node: spec.index,
                outputs: spec.outputs.clone(),
                steps: spec.steps,
            };
            if spec.drift_ppm == 0 {
                spec.run(transport, observer, TokioClock::new()).await?;
            } else {
                let clock = clock::DriftClock::new(spec.drift_ppm);
                spec.run(transport, observer, clock).await?;
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
    ) -> Result<Core, chorus_io::runtime::RuntimeError> {
        Runtime::new(
            self.core.clone(),
            transport,
            self.log.clone(),
            clock,
            observer,
        )
        .with_start_events(self.start_events.clone())
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
    scores: Vec<u32>,
    drifts: Vec<i64>,
    voters: usize,
    outputs: Rc<RefCell<Outputs>>,
    net: Rc<RefCell<NetShared>>,
    control: Rc<RefCell<Vec<Option<UnboundedSender<Control>>>>>,
}

impl TurmoilCluster {
    fn new(sim: Sim<'static>, scenario: &Scenario, seed: u64, steps: bool) -> TurmoilCluster {
        let n = scenario.nodes;
        // Pin every address now, in index order, so late joiners' addresses do not depend on
        // when they start.
        let ids: Vec<NodeId> = (0..n).map(|i| NodeId::from(name(i))).collect();
        let ips: Vec<_> = (0..n).map(|i| sim.lookup(name(i))).collect();
        let profiles: Vec<_> = (0..n).map(|i| node_profile(scenario, seed, i)).collect();
        let dir = Rc::new(Directory {
            cluster_id: scenario.config.cluster_id.clone(),
            addrs: ips.iter().map(|ip| SocketAddr::new(*ip, PORT)).collect(),
            by_ip: ips.iter().enumerate().map(|(i, ip)| (*ip, i)).collect(),
            by_id: ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), i))
                .collect(),
            ids,
            profiles: profiles.clone(),
        });
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
        let incarnations = Rc::new(RefCell::new(vec![0; n]));
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
                    incarnations: incarnations.clone(),
                    steps,
                    drift_ppm: drifts[i],
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
            scores,
            drifts,
            voters: scenario.voter_count(),
            outputs,
            net,
            control,
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
        self.sim.crash(name(i));
        self.live[i] = false;
        self.roles[i] = None;
        self.control.borrow_mut()[i] = None;
        for j in 0..self.live.len() {
            if self.live[j] {
                self.tell(j, Control::Down(i));
            }
        }
    }

    fn restart(&mut self, i: usize, _sink: &mut Sink) {
        if self.live[i] {
            return;
        }
        if self.registered[i] {
            self.sim.bounce(name(i));
        } else {
            let spec = self.specs[i].clone();
            self.sim.host(name(i), move || spec.software());
            self.registered[i] = true;
            let cuts: Vec<(usize, usize)> = self
                .cuts
                .iter()
                .filter(|(a, b)| (*a == i || *b == i) && self.registered[*a] && self.registered[*b])
                .copied()
                .collect();
            for (a, b) in cuts {
                self.sim.partition_oneway(name(a), name(b));
            }
        }
        self.live[i] = true;
        self.roles[i] = Some((Role::Follower, 0));
        for j in 0..self.live.len() {
            if j != i && self.live[j] {
                self.tell(i, Control::Up(j));
                self.tell(j, Control::Up(i));
            }
        }
    }

    fn cut(&mut self, from: usize, to: usize) {
        if from == to || !self.cuts.insert((from, to)) {
            return;
        }
        if self.registered[from] && self.registered[to] {
            self.sim.partition_oneway(name(from), name(to));
        }
    }

    fn heal(&mut self) {
        for (a, b) in std::mem::take(&mut self.cuts) {
            if self.registered[a] && self.registered[b] {
                self.sim.repair_oneway(name(a), name(b));
            }
        }
    }

    fn set_network(&mut self, loss_ppm: u32, duplicate_ppm: u32, reorder_ppm: u32) {
        let mut net = self.net.borrow_mut();
        net.net.loss_ppm = loss_ppm;
        net.net.duplicate_ppm = duplicate_ppm;
        net.net.reorder_ppm = reorder_ppm;
    }
}
