//! A small deterministic network of pure cores for property tests: a seeded queue of timed
//! deliveries with delays, loss, directed cuts, crashes and restarts (a restart replays the
//! node's own event log), and optionally a clock per node (offset and rate drift within the
//! configured bound). No tokio, no threads, no clock. The invariants of docs/design.md §5 (1, 2, 3)
//! are checked on every step, in global time, vote safety from the replies actually sent; a
//! violation panics with the seed.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use chorus_core::rng::below;
use chorus_core::{
    Command, Config, Core, Event, Message, NodeId, Notice, PeerInfo, Role, ADMIN_ELECTION,
};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Fast timings so a schedule covers many elections in little simulated time.
pub fn fast_config() -> Config {
    Config {
        heartbeat_interval_ms: 50,
        election_timeout_min_ms: 150,
        election_timeout_max_ms: 300,
        discovery_timeout_ms: 100,
        ..Config::default()
    }
}

/// The bound within which a cluster with a live, connected majority elects an admin known to
/// all: the slowest discovery timeout + 3 × the maximum election timeout + 2 × the heartbeat
/// interval, the bound the simulator's liveness checker uses (`sim/src/scenario.rs`).
pub fn election_bound_ms(configs: &[Config]) -> u64 {
    configs
        .iter()
        .map(|c| {
            c.discovery_timeout_ms + 3 * c.election_timeout_max_ms + 2 * c.heartbeat_interval_ms
        })
        .max()
        .unwrap_or(0)
}

#[derive(Clone, Debug)]
enum Item {
    Deliver {
        to: usize,
        from: usize,
        msg: Message,
    },
    Timer {
        node: usize,
        incarnation: u32,
        timer: chorus_core::Timer,
    },
    /// The connection between two live nodes comes up (uneven discovery).
    Link { a: usize, b: usize },
    /// A simulated sandbox run ends (dropped if the node restarted since it started).
    SandboxEnd {
        node: usize,
        incarnation: u32,
        event: Event,
    },
}

/// What a simulated run does, read from its command: `["sleep", MS]` exits 0 after MS,
/// `["exit", CODE, MS]` exits CODE after MS, `["oom", MS]` is OOM-killed after MS,
/// `["retry", MS]` fails retryably after MS, `["broken"]` fails for good at once, `["hang"]`
/// runs until stopped; anything else exits 0 after 20 ms. A run longer than its timeout is
/// killed at the timeout.
fn simulate_run(
    spec: &chorus_core::TaskSpec,
    task: &chorus_core::TaskId,
    attempt: u32,
) -> Option<(u64, Event)> {
    let arg = |i: usize| {
        spec.command
            .get(i)
            .and_then(|a| a.parse::<u64>().ok())
            .unwrap_or(20)
    };
    let exited = |ms: u64, code: i32, oom: bool| {
        let timed_out = ms > spec.timeout_ms;
        let ms = ms.min(spec.timeout_ms);
        (
            ms,
            Event::SandboxExited {
                task: task.clone(),
                attempt,
                exit: chorus_core::SandboxExit {
                    exit_code: (!timed_out && !oom).then_some(code),
                    signal: (timed_out || oom).then_some(9),
                    oom: oom && !timed_out,
                    timed_out,
                    duration_ms: ms,
                    stdout: format!("{task} attempt {attempt}"),
                    // A warm sandbox at once, the command's time, a little after it.
                    timings: chorus_core::RunTimings {
                        acquire_ms: 1,
                        arm_ms: 2,
                        exec_ms: ms,
                        cleanup_ms: 3,
                        release_ms: 0,
                    },
                    ..Default::default()
                },
            },
        )
    };
    let failed = |ms: u64, retryable: bool| {
        (
            ms,
            Event::SandboxFailed {
                task: task.clone(),
                attempt,
                error: "test: simulated failure".into(),
                retryable,
            },
        )
    };
    Some(match spec.command[0].as_str() {
        "sleep" => exited(arg(1), 0, false),
        "exit" => exited(arg(2), arg(1) as i32, false),
        "oom" => exited(arg(1), 137, true),
        "retry" => failed(arg(1), true),
        "broken" => failed(0, false),
        "hang" => {
            if spec.timeout_ms < u64::MAX {
                exited(u64::MAX, 0, false)
            } else {
                return None;
            }
        }
        _ => exited(20, 0, false),
    })
}

/// How a network starts, beyond the defaults of [`Net::build`]: settings per node, links
/// that come up at random times, nodes that start later.
#[derive(Clone, Debug, Default)]
pub struct Start {
    /// Each node's settings (default: the network's config, `bootstrap_expect` = voters).
    pub configs: Vec<Option<Config>>,
    /// Each pair's connection comes up at a seeded-random time in `[0, spread]` ms.
    pub link_spread_ms: u64,
    /// Nodes not started at once (see [`Net::start`]).
    pub late: Vec<usize>,
}

/// A node's clock: `local(t) = offset_ms + t × (1 + drift_ppm / 10⁶)` at global time `t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    pub offset_ms: u64,
    pub drift_ppm: i64,
}

impl Clock {
    /// The node's clock at global time `t`.
    pub fn local(self, t: u64) -> u64 {
        let rate = (1_000_000 + self.drift_ppm) as u128;
        self.offset_ms + (u128::from(t) * rate / 1_000_000) as u64
    }

    /// The first global instant at which the node's clock reads at least `local`.
    pub fn global(self, local: u64) -> u64 {
        let rate = (1_000_000 + self.drift_ppm) as u128;
        (u128::from(local.saturating_sub(self.offset_ms)) * 1_000_000).div_ceil(rate) as u64
    }
}

/// How the nodes' clocks relate to global time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clocks {
    /// Every node reads global time.
    Shared,
    /// Each node gets a seeded offset (up to an hour) and a rate drift within ±half the
    /// configured `max_clock_drift_ppm`, so any two clocks differ in rate by at most the bound.
    Drifting,
}

pub struct Net {
    pub seed: u64,
    pub ids: Vec<NodeId>,
    pub nodes: Vec<Option<Core>>,
    incarnation: Vec<u32>,
    /// Each node's durable event log: what a restart replays.
    pub logs: Vec<Vec<(u64, Event)>>,
    queue: BTreeMap<(u64, u64), Item>,
    seq: u64,
    pub now: u64,
    rng: ChaCha8Rng,
    /// Directed links that drop everything: (from, to).
    cut: BTreeSet<(usize, usize)>,
    pub loss_pct: u64,
    pub delay_ms: (u64, u64),
    configs: Vec<Config>,
    eligible: Vec<bool>,
    pub clocks: Vec<Clock>,
    // Observations for the invariants.
    /// The admin of each (cluster genesis, term): two clusters founded by mistake each have
    /// their own terms.
    pub admins_by_term: BTreeMap<(u64, u64), usize>,
    /// Vote safety, judged from what each node sent.
    pub votes: VoteLedger,
    /// Each admin's lease end in global time (its clock's reading converted).
    pub lease_until: Vec<Option<u64>>,
    /// Every step's commands, in order: the determinism fingerprint.
    pub history: Vec<(u64, usize, Vec<Command>)>,
    /// Tasks: each accepted task's submitter, each result's status at its submitter, and
    /// every run started (task, attempt, node). Invariant 7 is judged from these.
    pub accepted: BTreeMap<chorus_core::TaskId, usize>,
    pub results: BTreeMap<chorus_core::TaskId, chorus_core::TaskStatus>,
    pub runs: Vec<(chorus_core::TaskId, u32, usize)>,
}

impl Net {
    pub fn new(seed: u64, n: usize, config: Config) -> Net {
        Net::with_workers(seed, n, 0, config)
    }

    /// `voters` admin-eligible nodes plus `workers` that only follow.
    pub fn with_workers(seed: u64, voters: usize, workers: usize, config: Config) -> Net {
        Net::build(seed, voters, workers, config, Clocks::Shared)
    }

    /// As [`Net::with_workers`], with the nodes' clocks chosen by `clocks`.
    pub fn build(seed: u64, voters: usize, workers: usize, config: Config, clocks: Clocks) -> Net {
        Net::build_with(seed, voters, workers, config, clocks, Start::default())
    }

    /// As [`Net::build`], started as `start` says.
    pub fn build_with(
        seed: u64,
        voters: usize,
        workers: usize,
        config: Config,
        clocks: Clocks,
        start: Start,
    ) -> Net {
        let total = voters + workers;
        // Drawn from their own stream, so the network's draws do not depend on the clock mode.
        let mut clock_rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc10c_c10c_c10c_c10c);
        let half = u64::from(config.max_clock_drift_ppm / 2);
        let clocks: Vec<Clock> = (0..total)
            .map(|_| match clocks {
                Clocks::Shared => Clock::default(),
                Clocks::Drifting => Clock {
                    offset_ms: below(&mut clock_rng, 3_600_000),
                    drift_ppm: below(&mut clock_rng, 2 * half + 1) as i64 - half as i64,
                },
            })
            .collect();
        let ids: Vec<NodeId> = (0..total).map(|i| NodeId::from(format!("n{i}"))).collect();
        let config = Config {
            bootstrap_expect: voters as u32,
            ..config
        };
        let mut net = Net {
            seed,
            ids,
            nodes: vec![None; total],
            incarnation: vec![0; total],
            logs: vec![Vec::new(); total],
            queue: BTreeMap::new(),
            seq: 0,
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            cut: BTreeSet::new(),
            loss_pct: 0,
            delay_ms: (1, 10),
            configs: (0..total)
                .map(|i| {
                    start
                        .configs
                        .get(i)
                        .cloned()
                        .flatten()
                        .unwrap_or(config.clone())
                })
                .collect(),
            eligible: (0..total).map(|i| i < voters).collect(),
            clocks,
            admins_by_term: BTreeMap::new(),
            votes: VoteLedger::default(),
            lease_until: vec![None; total],
            history: Vec::new(),
            accepted: BTreeMap::new(),
            results: BTreeMap::new(),
            runs: Vec::new(),
        };
        for i in (0..total).filter(|i| !start.late.contains(i)) {
            net.boot(i);
        }
        for i in (0..total).filter(|i| !start.late.contains(i)) {
            if start.link_spread_ms == 0 {
                net.connect_all(i);
            } else {
                for j in (i + 1..total).filter(|j| !start.late.contains(j)) {
                    let at = below(&mut net.rng, start.link_spread_ms + 1);
                    net.push(at, Item::Link { a: i, b: j });
                }
            }
        }
        net
    }

    /// Starts a node that has not started yet (or restarts a crashed one).
    pub fn start(&mut self, i: usize) {
        self.restart(i);
    }

    /// Tells `a` and `b` that they see each other, if they can.
    fn link_up(&mut self, a: usize, b: usize) {
        if !self.connected(a, b) {
            return;
        }
        let info = self.peer_info(b);
        self.apply(a, Event::peer_up(self.ids[b].clone(), info));
        let info = self.peer_info(a);
        self.apply(b, Event::peer_up(self.ids[a].clone(), info));
    }

    fn caps(&self, i: usize) -> Vec<String> {
        if self.eligible[i] {
            vec![ADMIN_ELECTION.to_owned()]
        } else {
            vec!["docker".to_owned()]
        }
    }

    pub fn fresh_core(&self, i: usize) -> Core {
        Core::new(
            self.ids[i].clone(),
            self.configs[i].clone(),
            self.caps(i),
            self.seed,
        )
        .unwrap()
    }

    fn boot(&mut self, i: usize) {
        // Recovery: replay the durable log into a fresh core, then start.
        let mut core = self.fresh_core(i);
        let mut sink = Vec::new();
        for (t, e) in &self.logs[i] {
            core.step(*t, e.clone(), &mut sink);
            sink.clear();
        }
        self.incarnation[i] += 1;
        self.nodes[i] = Some(core);
        self.lease_until[i] = None;
        self.apply(i, Event::Started);
    }

    fn peer_info(&self, i: usize) -> PeerInfo {
        PeerInfo {
            capabilities: self.caps(i).into(),
            ..Default::default()
        }
    }

    fn connected(&self, a: usize, b: usize) -> bool {
        self.nodes[a].is_some()
            && self.nodes[b].is_some()
            && !self.cut.contains(&(a, b))
            && !self.cut.contains(&(b, a))
    }

    /// Tells `i` and everyone it can reach that they see each other.
    fn connect_all(&mut self, i: usize) {
        for j in (0..self.ids.len()).filter(|j| *j != i) {
            self.link_up(i, j);
        }
    }

    fn push(&mut self, at: u64, item: Item) {
        self.seq += 1;
        self.queue.insert((at, self.seq), item);
    }

    /// Steps node `i` with `event` now, logs it, checks invariants, and carries out commands.
    pub fn apply(&mut self, i: usize, event: Event) {
        let Some(core) = self.nodes[i].as_mut() else {
            return;
        };
        let local = self.clocks[i].local(self.now);
        self.logs[i].push((local, event.clone()));
        let mut out = Vec::new();
        core.step(local, event, &mut out);
        let role = core.role();
        for c in &out {
            self.observe(i, c);
        }
        if role != Role::Admin {
            self.lease_until[i] = None;
        }
        for c in out.iter().cloned() {
            self.execute(i, c);
        }
        // The runtime answers a request for a signature at once, with an event it logs.
        let signs: Vec<_> = out
            .iter()
            .filter_map(|c| match c {
                Command::Sign { digest } => Some(*digest),
                _ => None,
            })
            .collect();
        self.history.push((self.now, i, out));
        for digest in signs {
            let signature = chorus_core::certificate::simulated_signature(&self.ids[i], &digest);
            self.apply(i, Event::Signed { digest, signature });
        }
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "invariant violated (seed {}): {what} at t={}",
            self.seed, self.now
        )
    }

    fn observe(&mut self, i: usize, c: &Command) {
        if let Err(e) = self.votes.observe(&self.ids[i], c) {
            self.fail(e);
        }
        let Command::Notice(n) = c else { return };
        match n {
            Notice::BecameAdmin {
                term,
                lease_until_ms,
            } => {
                let genesis = self.nodes[i]
                    .as_ref()
                    .and_then(|c| c.electorate())
                    .map_or(0, |e| e.genesis);
                if let Some(other) = self.admins_by_term.insert((genesis, *term), i) {
                    if other != i {
                        self.fail(format!("two admins in term {term}: n{other} and n{i}"));
                    }
                }
                self.check_lease(i, self.clocks[i].global(*lease_until_ms));
            }
            Notice::LeaseRenewed { lease_until_ms, .. } => {
                self.check_lease(i, self.clocks[i].global(*lease_until_ms))
            }
            // Admin duties run only under a valid lease (docs/design.md §4.5).
            Notice::TaskPlaced { task, .. } => {
                let holds = self.nodes[i]
                    .as_ref()
                    .is_some_and(|c| c.holds_lease(self.clocks[i].local(self.now)));
                if !holds {
                    self.fail(format!("n{i} placed {task} without a valid lease"));
                }
            }
            Notice::TaskSubmitted {
                task,
                existing: false,
                ..
            } => {
                self.accepted.insert(task.clone(), i);
            }
            Notice::TaskCompleted { task, status } => {
                if self.accepted.get(task) != Some(&i) {
                    self.fail(format!(
                        "n{i} got a result for {task}, which it did not accept"
                    ));
                }
                if self.results.insert(task.clone(), *status).is_some() {
                    self.fail(format!("n{i} took a second result for {task}"));
                }
            }
            Notice::TaskStarted { task, attempt, .. } => {
                self.runs.push((task.clone(), *attempt, i))
            }
            _ => {}
        }
    }

    fn check_lease(&mut self, i: usize, until: u64) {
        let genesis = |c: &Core| c.electorate().map_or(0, |e| e.genesis);
        let mine = self.nodes[i].as_ref().map_or(0, genesis);
        for (j, l) in self.lease_until.iter().enumerate() {
            // Leases exclude each other within one cluster.
            let still_admin = self.nodes[j]
                .as_ref()
                .is_some_and(|c| c.role() == Role::Admin && genesis(c) == mine);
            if j != i && still_admin && l.is_some_and(|l| l > self.now) {
                self.fail(format!(
                    "n{i} took a lease while n{j} holds one until {l:?}"
                ));
            }
        }
        self.lease_until[i] = Some(until);
    }

    fn execute(&mut self, i: usize, c: Command) {
        match c {
            Command::Send { to, msg } => {
                let j = self.index(&to);
                self.send(i, j, msg);
            }
            Command::Broadcast { msg } => {
                for j in 0..self.ids.len() {
                    if j != i {
                        self.send(i, j, msg.clone());
                    }
                }
            }
            Command::SetTimer { timer, at_ms } => {
                let incarnation = self.incarnation[i];
                let at = self.clocks[i].global(at_ms).max(self.now);
                self.push(
                    at,
                    Item::Timer {
                        node: i,
                        incarnation,
                        timer,
                    },
                );
            }
            Command::CancelTimer { .. }
            | Command::RoleChanged { .. }
            | Command::Notice(_)
            | Command::Sign { .. } => {}
            Command::StartSandbox {
                task,
                attempt,
                spec,
            } => {
                if let Some((ms, event)) = simulate_run(&spec, &task, attempt) {
                    let incarnation = self.incarnation[i];
                    self.push(
                        self.now + ms,
                        Item::SandboxEnd {
                            node: i,
                            incarnation,
                            event,
                        },
                    );
                }
            }
            Command::StopSandbox { task, attempt } => {
                // The run ends at once, killed; its scheduled end (if any) is then stale.
                let incarnation = self.incarnation[i];
                let event = Event::SandboxExited {
                    task,
                    attempt,
                    exit: chorus_core::SandboxExit {
                        signal: Some(9),
                        ..Default::default()
                    },
                };
                self.push(
                    self.now + 1,
                    Item::SandboxEnd {
                        node: i,
                        incarnation,
                        event,
                    },
                );
            }
        }
    }

    fn index(&self, id: &NodeId) -> usize {
        id.as_str()[1..].parse().expect("simulated ids are n<i>")
    }

    /// The index of the node called `id` (`n<i>`).
    pub fn index_of(&self, id: &NodeId) -> usize {
        self.index(id)
    }

    fn send(&mut self, from: usize, to: usize, msg: Message) {
        if self.cut.contains(&(from, to)) || below(&mut self.rng, 100) < self.loss_pct {
            return;
        }
        let (lo, hi) = self.delay_ms;
        let delay = lo + below(&mut self.rng, hi - lo + 1);
        self.push(self.now + delay, Item::Deliver { to, from, msg });
    }

    /// Runs until `until` (inclusive), one queued item at a time.
    pub fn run_until(&mut self, until: u64) {
        while let Some(entry) = self.queue.first_entry() {
            let (at, _) = *entry.key();
            if at > until {
                break;
            }
            let item = entry.remove();
            self.now = at;
            match item {
                Item::Deliver { to, from, msg } => {
                    // Links can be cut while a message is in flight; crashed nodes hear nothing.
                    if self.nodes[to].is_some() && !self.cut.contains(&(from, to)) {
                        let from = self.ids[from].clone();
                        self.apply(to, Event::Message { from, msg });
                    }
                }
                Item::Timer {
                    node,
                    incarnation,
                    timer,
                } => {
                    if self.incarnation[node] == incarnation {
                        self.apply(node, Event::TimerFired { timer });
                    }
                }
                Item::Link { a, b } => self.link_up(a, b),
                Item::SandboxEnd {
                    node,
                    incarnation,
                    event,
                } => {
                    if self.incarnation[node] == incarnation {
                        self.apply(node, event);
                    }
                }
            }
        }
        self.now = until;
    }

    // ---- Faults --------------------------------------------------------------------------------

    pub fn crash(&mut self, i: usize) {
        if self.nodes[i].take().is_none() {
            return;
        }
        self.lease_until[i] = None;
        for j in 0..self.ids.len() {
            if j != i {
                self.apply(
                    j,
                    Event::PeerDown {
                        peer: self.ids[i].clone(),
                    },
                );
            }
        }
    }

    pub fn restart(&mut self, i: usize) {
        if self.nodes[i].is_some() {
            return;
        }
        self.boot(i);
        self.connect_all(i);
    }

    /// Restarts a crashed node whose clock comes back `jump_ms` ahead (a new process on another
    /// time base): time still never moves backwards for the core, but every promise the node
    /// made before the crash now looks expired to it — only its restart promise holds.
    pub fn restart_with_clock_jump(&mut self, i: usize, jump_ms: u64) {
        if self.nodes[i].is_some() {
            return;
        }
        self.clocks[i].offset_ms += jump_ms;
        self.restart(i);
    }

    /// Cuts every link between the two groups, both ways.
    pub fn partition(&mut self, group: &[usize]) {
        let others: Vec<usize> = (0..self.ids.len()).filter(|j| !group.contains(j)).collect();
        for &a in group {
            for &b in &others {
                self.cut_link(a, b);
                self.cut_link(b, a);
            }
        }
    }

    /// Cuts one direction of one link.
    pub fn cut_link(&mut self, from: usize, to: usize) {
        let was = self.connected(from, to);
        self.cut.insert((from, to));
        if was {
            self.apply(
                from,
                Event::PeerDown {
                    peer: self.ids[to].clone(),
                },
            );
            self.apply(
                to,
                Event::PeerDown {
                    peer: self.ids[from].clone(),
                },
            );
        }
    }

    /// Drops the messages from `from` to each of `to` that are still in flight, as if `from`
    /// had crashed before they left.
    pub fn drop_in_flight(&mut self, from: usize, to: &[usize]) {
        self.queue.retain(|_, item| {
            !matches!(item, Item::Deliver { from: f, to: t, .. } if *f == from && to.contains(t))
        });
    }

    pub fn heal(&mut self) {
        let cut: Vec<_> = std::mem::take(&mut self.cut).into_iter().collect();
        let mut reconnected = BTreeSet::new();
        for (a, b) in cut {
            let pair = (a.min(b), a.max(b));
            if self.connected(a, b) && reconnected.insert(pair) {
                self.link_up(a, b);
            }
        }
    }

    // ---- Views ---------------------------------------------------------------------------------

    pub fn live(&self) -> impl Iterator<Item = &Core> {
        self.nodes.iter().flatten()
    }

    /// The admin every live node agrees on, if they all do.
    pub fn agreed_admin(&self) -> Option<NodeId> {
        let mut admins = self.live().map(|c| c.admin().cloned());
        let first = admins.next()??;
        admins.all(|a| a.as_ref() == Some(&first)).then_some(first)
    }

    /// The live node that holds an unexpired admin lease now, if any (at most one can: the
    /// lease invariant is checked on every step).
    pub fn lease_holder(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| {
            self.nodes[i]
                .as_ref()
                .is_some_and(|c| c.holds_lease(self.clocks[i].local(self.now)))
        })
    }

    /// The notices node `i` emitted from step `since` of [`Net::history`] on, with their
    /// global times.
    pub fn notices_since(&self, since: usize, i: usize) -> Vec<(u64, Notice)> {
        self.history[since.min(self.history.len())..]
            .iter()
            .filter(|(_, node, _)| *node == i)
            .flat_map(|(t, _, out)| {
                out.iter().filter_map(move |c| match c {
                    Command::Notice(n) => Some((*t, n.clone())),
                    _ => None,
                })
            })
            .collect()
    }

    /// Every notice node `i` emitted, with its global time.
    pub fn notices(&self, i: usize) -> Vec<(u64, Notice)> {
        self.notices_since(0, i)
    }

    /// Gives node `i` `slots` task slots (a logged resource sample).
    pub fn set_slots(&mut self, i: usize, slots: u32) {
        self.apply(
            i,
            Event::ResourcesSampled {
                resources: chorus_core::Resources {
                    task_slots: slots,
                    ..Default::default()
                },
            },
        );
    }

    /// Submits a task running `command` at node `i`; returns its id if accepted.
    pub fn submit(
        &mut self,
        i: usize,
        command: &[&str],
        timeout_ms: u64,
    ) -> Option<chorus_core::TaskId> {
        let spec = chorus_core::TaskSpec {
            image: "test".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            timeout_ms,
            ..Default::default()
        };
        self.submit_spec(i, spec)
    }

    /// Submits `spec` at node `i`; returns its id if accepted.
    pub fn submit_spec(
        &mut self,
        i: usize,
        spec: chorus_core::TaskSpec,
    ) -> Option<chorus_core::TaskId> {
        let before = self.history.len();
        self.apply(
            i,
            Event::SubmitTask {
                spec: spec.into(),
                key: None,
                owner: None,
                request: 0,
            },
        );
        self.notices_since(before, i)
            .into_iter()
            .find_map(|(_, n)| match n {
                Notice::TaskSubmitted { task, .. } => Some(task),
                _ => None,
            })
    }

    /// Invariant 7: every accepted task has its result, or is still unfinished at a live
    /// submitter. With `all_done`, every accepted task must have its result.
    pub fn check_tasks(&self, all_done: bool) {
        for (task, &i) in &self.accepted {
            if self.results.contains_key(task) {
                continue;
            }
            if all_done {
                self.fail(format!("{task} (submitted at n{i}) has no result"));
            }
            let owned = self.nodes[i].as_ref().is_some_and(|c| {
                c.owned_tasks()
                    .get(task)
                    .is_some_and(|t| t.result.is_none())
            });
            if !owned && self.nodes[i].is_some() {
                self.fail(format!(
                    "{task} is lost: n{i} neither has its result nor owns it"
                ));
            }
        }
    }

    pub fn max_term(&self) -> u64 {
        self.live().map(Core::term).max().unwrap_or(0)
    }

    pub fn rand(&mut self, span: u64) -> u64 {
        below(&mut self.rng, span)
    }
}

pub use chorus_core::VoteLedger;
