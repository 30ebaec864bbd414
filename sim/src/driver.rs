//! The scenario driver shared by both engines: it fires the scenario's actions at their times,
//! resolves targets with its own seeded RNG, writes the fault records, and asks the engine (a
//! [`Cluster`]) to carry them out.

use std::collections::{BTreeMap, BTreeSet};

use chorus_core::rng::below;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::scenario::{Action, Scenario, Target};
use crate::sink::Sink;
use crate::trace::Record;

/// What an engine must offer the driver. Node `i` is `n{i}`.
pub trait Cluster {
    /// Whether node `i` is running.
    fn is_live(&self, i: usize) -> bool;
    /// The live node in the admin role with the highest term, if any (with or without a valid
    /// lease: that is what "kill the admin" means to an operator).
    fn admin(&self) -> Option<usize>;
    /// Stop node `i` abruptly; its event log survives.
    fn crash(&mut self, i: usize, sink: &mut Sink);
    /// Start node `i` (first start or recovery from its log).
    fn restart(&mut self, i: usize, sink: &mut Sink);
    /// Drop everything sent from `from` to `to`.
    fn cut(&mut self, from: usize, to: usize);
    /// Split the nodes into groups that cannot reach each other (both ways). Engines with a
    /// cheaper representation than pairwise cuts override this.
    fn partition(&mut self, groups: &[Vec<usize>]) {
        for (i, a) in groups.iter().enumerate() {
            for (j, b) in groups.iter().enumerate() {
                if i != j {
                    for &x in a {
                        for &y in b {
                            self.cut(x, y);
                        }
                    }
                }
            }
        }
    }
    /// Keep the nodes of different groups apart from the start: no connection, no messages,
    /// until [`Cluster::heal`]. Called before any node starts.
    fn set_apart(&mut self, groups: &[Vec<usize>]);
    /// Keep the nodes of different groups apart from now on, in place of the groups kept apart
    /// so far (`apart_at_start` or an earlier split): the pairs newly apart lose their
    /// connection (both ends get `PeerDown`), the pairs no longer apart connect again (if both
    /// ends are up), messages between nodes apart are dropped, in flight too.
    fn split(&mut self, groups: &[Vec<usize>], sink: &mut Sink);
    /// Restore every link, and connect the pairs kept apart (if both ends are up).
    fn heal(&mut self, sink: &mut Sink);
    /// Change loss, duplication and reordering (ppm).
    fn set_network(&mut self, loss_ppm: u32, duplicate_ppm: u32, reorder_ppm: u32);
    /// Ask live node `i` for a membership change, as its operator would: the node steps
    /// [`chorus_core::Event::ChangeMembers`] with `request`.
    fn change_members(
        &mut self,
        i: usize,
        change: chorus_core::MemberChange,
        request: u64,
        sink: &mut Sink,
    );
    /// Ask live node `i` to hand the admin's office over, as its operator would: the node steps
    /// [`chorus_core::Event::TransferAdmin`] with `request`.
    fn transfer_admin(
        &mut self,
        i: usize,
        to: Option<chorus_core::NodeId>,
        request: u64,
        sink: &mut Sink,
    );
    /// Begin a graceful stop of live node `i`: it steps [`chorus_core::Event::Shutdown`] (the
    /// driver crashes it [`STOP_GRACE_MS`] later, once what it sent has left).
    fn shut_down(&mut self, i: usize, sink: &mut Sink);
    /// Submit a task at live node `i`, as a user would (`POST /tasks`): the node steps
    /// [`chorus_core::Event::SubmitTask`].
    fn submit_task(
        &mut self,
        i: usize,
        spec: chorus_core::SharedSpec,
        key: Option<String>,
        request: u64,
        sink: &mut Sink,
    );
    /// Cancel a task at node `i` (`DELETE /tasks/{id}`): its submitter, or another node that
    /// keeps the cancel while the submitter is out of reach (`chorus_core::task::ask`). The
    /// node steps [`chorus_core::Event::CancelTask`].
    fn cancel_task(&mut self, i: usize, task: chorus_core::TaskId, request: u64, sink: &mut Sink);
}

/// How long a gracefully stopping node lives on after its shutdown step, so its last messages
/// (a step-down, a `timeout_now`) leave, as `chorus run` flushes them before it exits.
pub const STOP_GRACE_MS: u64 = 20;

/// How often a script waiting for a commit (`stop_after_commit`) looks, and how many times
/// before it gives up: 10 ms, for 5 simulated minutes.
const AFTER_COMMIT_LOOK_MS: u64 = 10;
const AFTER_COMMIT_LOOKS: u32 = 30_000;

/// What a change's `stop_after_commit` / `crash_after_commit` ask for: (crash, after ms); a
/// crash when both are given.
fn after_commit(stop: Option<u64>, crash: Option<u64>) -> Option<(bool, u64)> {
    crash.map(|ms| (true, ms)).or(stop.map(|ms| (false, ms)))
}

#[derive(Clone, Debug)]
enum Pending {
    Act(Action),
    /// Second half of a bounce: restart exactly these nodes.
    RestartNodes(Vec<usize>),
    /// Second half of a graceful stop: crash exactly these nodes.
    CrashNodes(Vec<usize>),
    /// The delayed first start of a node (`start_spread`).
    Start(usize),
    /// An operator's script waiting for a change it asked `node` for to commit: then, after
    /// `then.1` ms, it stops (`then.0` false) or crashes that node. Looks every
    /// [`AFTER_COMMIT_LOOK_MS`], at most [`AFTER_COMMIT_LOOKS`] times.
    AfterCommit {
        node: usize,
        request: u64,
        then: (bool, u64),
        looks: u32,
    },
    /// A task arrives (`[tasks]`); with a rate, the next arrival is drawn when it fires.
    Submit,
    /// A look at a submitted task: cancel it if the workload chose to (`cancel`) or if it
    /// hangs, unless its result is in; looked at again while it has none.
    FollowUp {
        node: usize,
        request: u64,
        cancel: bool,
        /// Looks so far at a submission not (yet) accepted.
        unknown: u32,
    },
    /// Remaining toggles of a flap: (link, currently cut, toggles left, period).
    Flap {
        link: (usize, usize),
        cut: bool,
        left: u32,
        period: u64,
    },
}

/// Fires a scenario's actions in order.
pub struct Driver {
    pending: BTreeMap<(u64, u64), Pending>,
    seq: u64,
    rng: ChaCha8Rng,
    nodes: usize,
    /// Late joiners not started yet.
    waiting: Vec<usize>,
    /// Nodes not started yet: late joiners and nodes whose spread start is still due.
    unstarted: BTreeSet<usize>,
    /// `apart_at_start`, as indices.
    apart: Vec<Vec<usize>>,
    /// The last operator request id handed out (`add` and `remove` actions).
    request: u64,
    /// The task workload, if the scenario has one.
    tasks: Option<Workload>,
}

/// The driver's side of a task workload: arrivals, submitters, cancels.
struct Workload {
    spec: chorus_core::SharedSpec,
    settings: crate::scenario::TaskWorkload,
    model: crate::sandbox::SandboxModel,
    /// Arrivals, submitters and cancels: a stream of its own, so a workload leaves the
    /// scenario's other draws as they were.
    rng: ChaCha8Rng,
    /// The last task request id handed out (submits and cancels).
    request: u64,
    /// The last time a submission may arrive.
    until: u64,
}

impl Driver {
    /// A driver for `scenario` (with `nodes` as run), seeded apart from the engine's own RNG.
    pub fn new(scenario: &Scenario, seed: u64) -> Driver {
        let waiting = scenario.late_nodes();
        let mut d = Driver {
            pending: BTreeMap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5ce7_a810_d21e_c70f),
            nodes: scenario.nodes,
            unstarted: waiting.iter().copied().collect(),
            waiting,
            apart: scenario.apart_groups(),
            request: 0,
            tasks: scenario.tasks.as_ref().map(|w| Workload {
                spec: std::sync::Arc::new(crate::sandbox::task_spec(w)),
                settings: w.clone(),
                model: crate::sandbox::SandboxModel::new(seed, w),
                rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7a5c_5eed_0000_0005),
                request: 0,
                until: w
                    .until
                    .unwrap_or(scenario.duration_ms)
                    .min(scenario.duration_ms),
            }),
        };
        if scenario.start_spread > 0 {
            // A stream of its own, so runs without a spread draw exactly as before.
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x57a2_75b2_ead0_0003);
            for i in 0..scenario.nodes {
                if d.unstarted.contains(&i) {
                    continue;
                }
                let at = below(&mut rng, scenario.start_spread + 1);
                if at > 0 {
                    d.unstarted.insert(i);
                    d.push(at, Pending::Start(i));
                }
            }
        }
        for (t, a) in scenario.timeline() {
            d.push(t, Pending::Act(a));
        }
        d.schedule_arrivals();
        d
    }

    /// The first arrival (with a rate) or every arrival (with a count).
    fn schedule_arrivals(&mut self) {
        let Some(w) = self.tasks.as_mut() else {
            return;
        };
        let (start, until) = (w.settings.start, w.until);
        if start > until {
            return;
        }
        let times: Vec<u64> = match (w.settings.count, w.settings.mean_gap_ms()) {
            (Some(n), _) => (0..n)
                .map(|_| start + below(&mut w.rng, until - start + 1))
                .collect(),
            (None, Some(gap)) => vec![start + below(&mut w.rng, 2 * gap + 1)],
            (None, None) => Vec::new(),
        };
        for t in times {
            self.push(t, Pending::Submit);
        }
    }

    /// Nodes that start at time zero.
    pub fn initial_nodes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes).filter(|i| !self.unstarted.contains(i))
    }

    fn push(&mut self, t: u64, p: Pending) {
        self.seq += 1;
        self.pending.insert((t, self.seq), p);
    }

    /// When the next action is due.
    pub fn next_at(&self) -> Option<u64> {
        self.pending.keys().next().map(|(t, _)| *t)
    }

    /// Carries out every action due at or before `now`.
    pub fn fire_due(&mut self, now: u64, cluster: &mut dyn Cluster, sink: &mut Sink) {
        while let Some(entry) = self.pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let p = entry.remove();
            self.fire(now, p, cluster, sink);
        }
    }

    fn resolve(&mut self, target: &Target, cluster: &dyn Cluster) -> Vec<usize> {
        resolve(target, cluster, &mut self.rng, self.nodes, &self.unstarted)
    }
}

fn pick(rng: &mut ChaCha8Rng, from: &[usize]) -> Option<usize> {
    (!from.is_empty()).then(|| from[below(rng, from.len() as u64) as usize])
}

/// The nodes `target` names now, random choices drawn from `rng`.
fn resolve(
    target: &Target,
    cluster: &dyn Cluster,
    rng: &mut ChaCha8Rng,
    nodes: usize,
    unstarted: &BTreeSet<usize>,
) -> Vec<usize> {
    {
        let live: Vec<usize> = (0..nodes).filter(|i| cluster.is_live(*i)).collect();
        match target {
            Target::Admin => cluster.admin().into_iter().collect(),
            Target::Random => pick(rng, &live).into_iter().collect(),
            Target::RandomFollower => {
                let admin = cluster.admin();
                let followers: Vec<usize> =
                    live.into_iter().filter(|i| Some(*i) != admin).collect();
                pick(rng, &followers).into_iter().collect()
            }
            Target::All => live,
            Target::Followers => {
                let admin = cluster.admin();
                live.into_iter().filter(|i| Some(*i) != admin).collect()
            }
            Target::Crashed => (0..nodes)
                .filter(|i| !cluster.is_live(*i) && !unstarted.contains(i))
                .collect(),
            Target::Percent(p) => {
                let want = ((live.len() as u64 * u64::from(*p)).div_ceil(100)).max(1) as usize;
                let mut pool = live;
                let mut chosen = Vec::new();
                while chosen.len() < want && !pool.is_empty() {
                    let k = below(rng, pool.len() as u64) as usize;
                    chosen.push(pool.swap_remove(k));
                }
                chosen.sort_unstable();
                chosen
            }
            Target::Node(i) => vec![*i],
            Target::Nodes(a, b) => (*a..=*b).collect(),
        }
    }
}

impl Driver {
    fn crash(&mut self, nodes: &[usize], cluster: &mut dyn Cluster, sink: &mut Sink) {
        for &i in nodes {
            if cluster.is_live(i) {
                sink.record(Record::Crash { node: name(i) });
                cluster.crash(i, sink);
            }
        }
    }

    fn restart(&mut self, nodes: &[usize], cluster: &mut dyn Cluster, sink: &mut Sink) {
        for &i in nodes {
            if !cluster.is_live(i) && !self.unstarted.contains(&i) {
                sink.record(Record::Restart { node: name(i) });
                cluster.restart(i, sink);
            }
        }
    }

    /// Asks each live node `target` names for `change`, each with a request id of its own;
    /// `then`, once that node reports it committed, stops or crashes it (see
    /// [`after_commit`]).
    fn change_members(
        &mut self,
        now: u64,
        target: &Target,
        change: chorus_core::MemberChange,
        then: Option<(bool, u64)>,
        cluster: &mut dyn Cluster,
        sink: &mut Sink,
    ) {
        for i in self.resolve(target, cluster) {
            if cluster.is_live(i) {
                self.request += 1;
                cluster.change_members(i, change.clone(), self.request, sink);
                if let Some(then) = then {
                    let look = Pending::AfterCommit {
                        node: i,
                        request: self.request,
                        then,
                        looks: 0,
                    };
                    self.push(now + AFTER_COMMIT_LOOK_MS, look);
                }
            }
        }
    }

    fn fire(&mut self, now: u64, p: Pending, cluster: &mut dyn Cluster, sink: &mut Sink) {
        match p {
            Pending::Act(Action::Crash { target }) => {
                let nodes = self.resolve(&target, cluster);
                self.crash(&nodes, cluster, sink);
            }
            Pending::Act(Action::Restart { target }) => {
                let nodes = self.resolve(&target, cluster);
                self.restart(&nodes, cluster, sink);
            }
            Pending::Act(Action::Bounce { target, down_for }) => {
                let nodes = self.resolve(&target, cluster);
                self.crash(&nodes, cluster, sink);
                self.push(now + down_for, Pending::RestartNodes(nodes));
            }
            Pending::RestartNodes(nodes) => self.restart(&nodes, cluster, sink),
            Pending::Act(Action::Stop { target }) => {
                let nodes: Vec<usize> = (self.resolve(&target, cluster).into_iter())
                    .filter(|&i| cluster.is_live(i))
                    .collect();
                for &i in &nodes {
                    cluster.shut_down(i, sink);
                }
                self.push(now + STOP_GRACE_MS, Pending::CrashNodes(nodes));
            }
            Pending::CrashNodes(nodes) => self.crash(&nodes, cluster, sink),
            Pending::Act(Action::Transfer { to, target }) => {
                let to = to.map(|n| chorus_core::NodeId::from(name(*n.indices().start())));
                for i in self.resolve(&target, cluster) {
                    if cluster.is_live(i) {
                        self.request += 1;
                        cluster.transfer_admin(i, to.clone(), self.request, sink);
                    }
                }
            }
            Pending::Submit => self.submit(now, cluster, sink),
            Pending::FollowUp {
                node,
                request,
                cancel,
                unknown,
            } => self.follow_up(now, (node, request), cancel, unknown, cluster, sink),
            Pending::Start(i) => self.start(&[i], cluster, sink),
            Pending::Act(Action::Partition {
                minority,
                with_admin,
            }) => {
                let max_minority = (self.nodes - 1) / 2;
                let size = minority
                    .unwrap_or(max_minority)
                    .clamp(1, self.nodes.saturating_sub(1).max(1));
                let mut pool: Vec<usize> = (0..self.nodes).collect();
                let mut small = Vec::new();
                if with_admin {
                    if let Some(a) = cluster.admin() {
                        pool.retain(|i| *i != a);
                        small.push(a);
                    }
                }
                while small.len() < size && !pool.is_empty() {
                    let k = below(&mut self.rng, pool.len() as u64) as usize;
                    small.push(pool.swap_remove(k));
                }
                small.sort_unstable();
                pool.sort_unstable();
                sink.record(Record::Partition {
                    groups: vec![names(&pool), names(&small)],
                });
                for &a in &small {
                    for &b in &pool {
                        cluster.cut(a, b);
                        cluster.cut(b, a);
                    }
                }
            }
            Pending::Act(Action::OneWay { from, to }) => {
                let from = self.resolve(&from, cluster);
                let to = self.resolve(&to, cluster);
                if from.is_empty() || to.is_empty() {
                    return;
                }
                sink.record(Record::Cut {
                    from: names(&from),
                    to: names(&to),
                });
                for &a in &from {
                    for &b in &to {
                        if a != b {
                            cluster.cut(a, b);
                        }
                    }
                }
            }
            Pending::Act(Action::Flap { period, times }) => {
                if self.nodes < 2 {
                    return;
                }
                let a = below(&mut self.rng, self.nodes as u64) as usize;
                let b = (a + 1 + below(&mut self.rng, self.nodes as u64 - 1) as usize) % self.nodes;
                self.fire(
                    now,
                    Pending::Flap {
                        link: (a, b),
                        cut: false,
                        left: times,
                        period,
                    },
                    cluster,
                    sink,
                );
            }
            Pending::Flap {
                link: (a, b),
                cut,
                left,
                period,
            } => {
                if left == 0 {
                    return;
                }
                if cut {
                    sink.record(Record::Heal);
                    cluster.heal(sink);
                } else {
                    sink.record(Record::Partition {
                        groups: vec![vec![name(a)], vec![name(b)]],
                    });
                    cluster.cut(a, b);
                    cluster.cut(b, a);
                }
                self.push(
                    now + period,
                    Pending::Flap {
                        link: (a, b),
                        cut: !cut,
                        left: left - 1,
                        period,
                    },
                );
            }
            Pending::Act(Action::Split { groups }) => {
                let groups: Vec<Vec<usize>> =
                    groups.iter().map(|g| crate::scenario::expand(g)).collect();
                sink.record(Record::Partition {
                    groups: groups.iter().map(|g| names(g)).collect(),
                });
                cluster.split(&groups, sink);
            }
            Pending::Act(Action::Heal) => {
                sink.record(Record::Heal);
                cluster.heal(sink);
            }
            Pending::Act(Action::Network {
                loss_ppm,
                duplicate_ppm,
                reorder_ppm,
            }) => {
                sink.record(Record::Network {
                    loss_ppm,
                    duplicate_ppm,
                    reorder_ppm,
                });
                cluster.set_network(loss_ppm, duplicate_ppm, reorder_ppm);
            }
            Pending::Act(Action::Add {
                node,
                target,
                stop_after_commit,
                crash_after_commit,
            }) => {
                let change = chorus_core::MemberChange::Add {
                    node: name(*node.indices().start()).into(),
                };
                let then = after_commit(stop_after_commit, crash_after_commit);
                self.change_members(now, &target, change, then, cluster, sink);
            }
            Pending::Act(Action::Remove {
                node,
                target,
                stop_after_commit,
                crash_after_commit,
            }) => {
                let change = chorus_core::MemberChange::Remove {
                    node: name(*node.indices().start()).into(),
                };
                let then = after_commit(stop_after_commit, crash_after_commit);
                self.change_members(now, &target, change, then, cluster, sink);
            }
            Pending::AfterCommit {
                node,
                request,
                then,
                looks,
            } => {
                if sink.stats.change_committed(&name(node), request) {
                    let (crash, after) = then;
                    let act = if crash {
                        Pending::CrashNodes(vec![node])
                    } else {
                        Pending::Act(Action::Stop {
                            target: Target::Node(node),
                        })
                    };
                    self.push(now + after, act);
                } else if looks < AFTER_COMMIT_LOOKS {
                    self.push(
                        now + AFTER_COMMIT_LOOK_MS,
                        Pending::AfterCommit {
                            node,
                            request,
                            then,
                            looks: looks + 1,
                        },
                    );
                }
            }
            Pending::Act(Action::Join { count, nodes }) => {
                let joining: Vec<usize> = if nodes.is_empty() {
                    self.waiting
                        .drain(..count.min(self.waiting.len()))
                        .collect()
                } else {
                    let named = crate::scenario::expand(&nodes);
                    self.waiting.retain(|i| !named.contains(i));
                    named
                };
                self.start(&joining, cluster, sink);
            }
        }
    }
}

impl Driver {
    /// A task arrives: at one live node the workload's target names, drawn at random (a
    /// submission with no live node to take it is lost, as a failed request is). The next
    /// arrival is drawn (with a rate), and the cancels the workload wants are scheduled.
    fn submit(&mut self, now: u64, cluster: &mut dyn Cluster, sink: &mut Sink) {
        let (nodes, unstarted) = (self.nodes, &self.unstarted);
        let Some(w) = self.tasks.as_mut() else {
            return;
        };
        let live: Vec<usize> =
            resolve(&w.settings.submit_at, cluster, &mut w.rng, nodes, unstarted)
                .into_iter()
                .filter(|i| cluster.is_live(*i))
                .collect();
        let chosen = pick(&mut w.rng, &live);
        let next = w
            .settings
            .mean_gap_ms()
            .filter(|_| w.settings.count.is_none())
            .map(|gap| now + below(&mut w.rng, 2 * gap + 1))
            .filter(|t| *t <= w.until);
        let cancel = below(&mut w.rng, 1_000_000) < u64::from(w.settings.cancel_ppm);
        let cancel_at = now + 1 + below(&mut w.rng, w.settings.cancel_within.max(1));
        let hang_check = (w.settings.hang_ppm > 0).then(|| now + w.settings.hang_cancel_after);
        // Drawn only when asked for, so other workloads draw as they did.
        let unplaceable = w.settings.unplaceable_ppm > 0
            && below(&mut w.rng, 1_000_000) < u64::from(w.settings.unplaceable_ppm);
        // Live sandboxes too (drawn only when asked for): three in four are closed by their
        // owner, the rest expire at their lifetime.
        let live = w.settings.live_ppm > 0
            && below(&mut w.rng, 1_000_000) < u64::from(w.settings.live_ppm);
        let cancel = cancel || (live && below(&mut w.rng, 4) != 0);
        let spec = if unplaceable || live {
            let mut spec = (*w.spec).clone();
            if unplaceable {
                spec.requires = vec![crate::sandbox::NOWHERE.to_owned()];
            }
            if live {
                spec.live = true;
                spec.command.clear();
            }
            std::sync::Arc::new(spec)
        } else {
            w.spec.clone()
        };
        let submitted = chosen.map(|i| {
            w.request += 1;
            (i, w.request)
        });
        if let Some(t) = next {
            self.push(t, Pending::Submit);
        }
        let Some((i, request)) = submitted else {
            return;
        };
        cluster.submit_task(i, spec, Some(format!("sim-{request}")), request, sink);
        let follow = |cancel| Pending::FollowUp {
            node: i,
            request,
            cancel,
            unknown: 0,
        };
        if cancel {
            self.push(cancel_at, follow(true));
        } else if let Some(t) = hang_check {
            self.push(t, follow(false));
        }
    }

    /// Cancels a submitted task if the workload chose to or it hangs, unless its result is
    /// in; looks again later while it has none (a submitter that was down missed the cancel).
    fn follow_up(
        &mut self,
        now: u64,
        (node, request): (usize, u64),
        cancel: bool,
        unknown: u32,
        cluster: &mut dyn Cluster,
        sink: &mut Sink,
    ) {
        let Some(w) = self.tasks.as_mut() else {
            return;
        };
        let again = now + w.settings.hang_cancel_after.max(1_000);
        let Some((task, done)) = sink.stats.task_of_request(&name(node), request) else {
            // Not accepted (yet: turmoil steps a submit at the next tick). Refused, or lost
            // with a node that was down, after a few looks.
            if unknown < 3 {
                self.push(
                    now + 1_000,
                    Pending::FollowUp {
                        node,
                        request,
                        cancel,
                        unknown: unknown + 1,
                    },
                );
            }
            return;
        };
        if done {
            return;
        }
        let Ok(task) = task.parse::<chorus_core::TaskId>() else {
            return;
        };
        if !cancel && !w.model.hangs(&task) {
            return;
        }
        // At the submitter while it is up; while it is down, at another live node, which keeps
        // the cancel for it (`task/ask.rs`) — and now and then there even while it is up, as an
        // operator cut off from the submitter would.
        let nodes = self.nodes as u64;
        let at = if !cluster.is_live(node) || below(&mut w.rng, 4) == 0 {
            // Drawn, not listed: a simulation may have a million nodes.
            (0..16)
                .map(|_| below(&mut w.rng, nodes) as usize)
                .find(|i| *i != node && cluster.is_live(*i))
        } else {
            Some(node)
        };
        if let Some(at) = at {
            w.request += 1;
            let r = w.request;
            cluster.cancel_task(at, task, r, sink);
        }
        self.push(
            again,
            Pending::FollowUp {
                node,
                request,
                cancel,
                unknown,
            },
        );
    }
}

/// The trace name of node `i`.
pub fn name(i: usize) -> String {
    format!("n{i}")
}

fn names(nodes: &[usize]) -> Vec<String> {
    nodes.iter().map(|i| name(*i)).collect()
}

impl Driver {
    /// Starts the nodes that start at time zero, recording a `restart` for each (after the
    /// `partition` that keeps `apart_at_start` groups apart, if any).
    pub fn start_initial(&mut self, cluster: &mut dyn Cluster, sink: &mut Sink) {
        if !self.apart.is_empty() {
            sink.record(Record::Partition {
                groups: self.apart.iter().map(|g| names(g)).collect(),
            });
            cluster.set_apart(&self.apart);
        }
        let initial: Vec<usize> = self.initial_nodes().collect();
        for i in initial {
            sink.record(Record::Restart { node: name(i) });
            cluster.restart(i, sink);
        }
    }

    /// First starts of nodes not started yet (a node already started is left alone).
    fn start(&mut self, nodes: &[usize], cluster: &mut dyn Cluster, sink: &mut Sink) {
        for &i in nodes {
            if self.unstarted.remove(&i) {
                sink.record(Record::Restart { node: name(i) });
                cluster.restart(i, sink);
            }
        }
    }
}

/// What node `i` advertises: voters carry `admin_election`; free resources are drawn from the
/// seed (the same for both engines), or equal for every node when the scenario asks for it.
pub fn node_profile(scenario: &Scenario, seed: u64, i: usize) -> chorus_core::PeerInfo {
    let mut capabilities = vec!["docker".to_owned()];
    if i < scenario.voter_count() {
        capabilities.push(chorus_core::ADMIN_ELECTION.to_owned());
    }
    let task_slots = scenario
        .tasks
        .as_ref()
        .filter(|w| w.runs_tasks(i))
        .map_or(0, |w| w.slots);
    let resources = if scenario.equal_scores {
        chorus_core::Resources {
            cpu_millicores: 4_000,
            mem_free_mb: 8_192,
            task_slots,
            task_capacity: Default::default(),
        }
    } else {
        let mut rng = chorus_core::rng::node_rng(seed ^ 0x9e50_12ce_5eed_0001, &name(i).into());
        chorus_core::Resources {
            cpu_millicores: 500 + below(&mut rng, 15_500) as u32,
            mem_free_mb: 256 + below(&mut rng, 32_512) as u32,
            task_slots,
            task_capacity: Default::default(),
        }
    };
    chorus_core::PeerInfo {
        capabilities: capabilities.into(),
        uptime_s: 0,
        resources,
    }
}

/// Each node's clock rate offset in ppm, the same for both engines: at the bound, alternating
/// fast and slow, or drawn uniformly in `[-bound, bound]` from the seed in node order.
pub fn clock_drifts(scenario: &Scenario, seed: u64) -> Vec<i64> {
    let bound = i64::from(scenario.network.drift_ppm);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd81f_7c10_c4a1_0002);
    (0..scenario.nodes)
        .map(|i| match (scenario.network.drift_at_bound, i % 2 == 0) {
            (true, true) => bound,
            (true, false) => -bound,
            (false, _) if bound > 0 => below(&mut rng, 2 * bound as u64 + 1) as i64 - bound,
            (false, _) => 0,
        })
        .collect()
}
