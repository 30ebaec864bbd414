//! The invariant checker (docs/design.md §5), run over every trace line of every simulation.
//!
//! 1. election safety — at most one admin per term;
//! 2. lease safety — no two nodes hold an unexpired lease at the same instant;
//! 3. vote safety — no node votes for two candidates in one term, restarts included, judged from
//!    the granted vote replies a node sent (`vote_granted`) together with its `voted` notices, so
//!    a node that grants twice but reports once is caught;
//! 4. liveness — once the network is healed and a majority of the electorate is up, within the
//!    bound an admin holds a lease and every live node knows it; an admin whose own removal
//!    committed starts the clock again (it steps down on purpose, so the next admin must follow
//!    within the bound);
//! 5. term stability — after a heal, if the majority side had a leased admin (the admin and
//!    the members of its partition group it exchanged messages with directly, both ways, under
//!    every cut in force — nothing relays — up and a majority of the electorate), no term above
//!    its term appears until the next fault (a node back from a minority raised nothing) or
//!    until that admin steps down on purpose — its own removal committed, a handover, a
//!    graceful stop (the next election then raises the term as designed).
//!
//! 7. tasks — every accepted task (`task_submitted`) gets a result at its submitter or is
//!    still owned, unfinished, by its submitter: while the cluster is healed with a majority of
//!    the electorate up, a task accepted at a live submitter has its `task_result` within the
//!    task bound (header `task_bound_ms`) of its acceptance or of the period's start, whichever
//!    is later — or, once an admin said no live worker can run it (`task_unplaceable`), within
//!    `unschedulable_bound_ms` of that record (or of the period's start, after a fault), when
//!    that is later: such a task ends `unschedulable` after its own bound; at the end of a run a task without a result must still be owned by its live
//!    submitter (the discrete-event engine reports what each live core owns; a submitter down
//!    at the end keeps its tasks in its log). A submitter records at most one `task_result` per
//!    task, only for a task it accepted. And placement only under a valid lease: every
//!    `task_placed` at node N at time t falls within N's lease (t before the `lease_until` of
//!    its latest `became_admin`/`lease_renewed`, with no `stepped_down` or crash since).
//!    A real node's log may be pruned (header `pruned`): what it recorded before its snapshot
//!    is not in the trace, so a result for one of its tasks never seen accepted, and its
//!    placements before any record of its lease state (a lease, a step-down, a crash), are
//!    not judged.
//!
//! 8. genesis — at most one bootstrap electorate is ever accepted by a quorum, judged from the
//!    acceptances themselves (`bootstrap_accepted`), not only through one admin per term: all
//!    acceptances at one ballot carry one value; a value is chosen once as many distinct nodes
//!    accepted it at one ballot as it has members (an acceptor accepts only an electorate of
//!    its own `bootstrap_expect` members, and a proposer declares it chosen at that count);
//!    no two values are chosen; and every acceptance at a ballot above one where a value was
//!    chosen carries that value (Paxos's P2, which the proposer's "highest accepted value"
//!    rule keeps, and which a wrong proposal breaks before a second quorum ever forms). These
//!    hold where the operator kept bootstrap's promise (`bootstrap_expect` more than half the
//!    eligible nodes that start), as every simulated scenario does.
//! 9. live sandboxes — a live sandbox (`task_started` with `live`) is on one worker at a time:
//!    it is never made on a second node while the first still holds it (its run has not ended
//!    there and that node has not crashed). That it is never silently gone is invariant 7: its
//!    owner gets a result (closed: `cancelled`, expired: `timed_out`, `lost`) within the bound.
//!
//! 10. operator intent — once an operator saw its removal of X commit (a `membership_change`
//!     with a request id), no admin proposes adding X back unless an operator asked to add X
//!     after asking to remove it: autopilot never undoes an operator's removal, at any admin.
//!
//! Invariant 6 (determinism) is checked by running twice and comparing bytes (see `run`).
//!
//! "The electorate" is the one in force at that moment, learned from the trace: the bootstrap
//! electorate (the first `electorate_changed`), then the electorate of each newly elected admin,
//! and while that admin commits a change both the old and the new one (a majority of each must
//! be up, as the protocol needs a majority of each). Before any electorate is known, the
//! admin-eligible nodes stand in for it. A voter that died for good therefore counts against
//! the majority until a committed change removes it, and a standby counts once it is added: the
//! checker demands liveness only when the electorate of that moment can elect.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use chorus_core::{Ballot, ChangeOutcome};

use crate::trace::{Header, Line, Record};

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Invariant number, docs/design.md §5.
    pub invariant: u8,
    /// Simulated time.
    pub t: u64,
    /// The trace line (1 = header) where it was detected.
    pub line: usize,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.invariant {
            1 => "election safety",
            2 => "lease safety",
            3 => "vote safety",
            4 => "liveness",
            5 => "term stability",
            6 => "determinism",
            7 => "tasks",
            8 => "genesis",
            9 => "live sandboxes",
            10 => "operator intent",
            _ => "invariant",
        };
        write!(
            f,
            "invariant {} ({name}) violated at t={} ms (trace line {}): {}",
            self.invariant, self.t, self.line, self.message
        )
    }
}

/// Sets and maps keyed by node name that are looked up on every line of a cold start (one
/// per node) and never walked in an order that shows: hashed (by a seedless hash), where a
/// `BTree` of 100,000 names cost a dozen string comparisons, each a cache miss, per lookup.
type NameSet = rustc_hash::FxHashSet<String>;
type NameMap<V> = rustc_hash::FxHashMap<String, V>;

/// An electorate as a trace reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Voters {
    version: u64,
    term: u64,
    members: NameSet,
}

impl Voters {
    /// Whether a strict majority of the members is in `up`.
    fn majority_in(&self, up: impl Fn(&str) -> bool) -> bool {
        let count = self.members.iter().filter(|m| up(m)).count();
        count > self.members.len() / 2
    }
}

/// How many distinct electorates the checker remembers to share among the nodes that report
/// them: a cold start of n voters reports one electorate n times, and a copy per node was n²
/// strings.
const SHARED_ELECTORATES: usize = 8;

/// Streaming checker: feed lines in order, then `finish`.
pub struct Checker {
    /// The admin-eligible nodes: the electorate until one is known.
    eligible: NameSet,
    /// How many eligible nodes bootstrap needs up before there is any electorate
    /// (`bootstrap_expect`; 0 when the trace does not say): until a cluster is founded, no
    /// admin can be owed while fewer are up, majority or not.
    founding: usize,
    /// How many of `eligible` are live.
    live_eligible: usize,
    /// Each node's electorate as it last reported it, and the one it held before; nodes that
    /// report the same electorate share one copy (`shared`).
    held: NameMap<Arc<Voters>>,
    held_before: NameMap<Arc<Voters>>,
    /// The electorates reported last, newest at the back.
    shared: VecDeque<(Arc<[String]>, Arc<Voters>)>,
    /// The electorates of which a majority must be up (see the module comment); empty until
    /// the first one is reported.
    in_force: Vec<Arc<Voters>>,
    /// How many members of each electorate in force are live: whether the cluster is healthy
    /// is then one comparison per electorate, not a walk over its members at each crash and
    /// start (quadratic in a cold start of many voters).
    live_in_force: Vec<usize>,
    /// The admin of the latest election, until it steps down or crashes.
    admin_now: Option<String>,
    /// Hostile nodes: their own records are not judged, and they need not know the admin.
    hostile: BTreeSet<String>,
    bound_ms: u64,
    admins_by_term: BTreeMap<u64, String>,
    /// Unexpired leases as last announced: node → (term, lease end).
    leases: BTreeMap<String, (u64, u64)>,
    votes: BTreeMap<(String, u64), String>,
    live: NameSet,
    known: NameMap<(String, u64)>,
    /// How many live nodes know each (admin, term) in `known`: agreement is then one lookup
    /// per line, not a walk over every live node (quadratic in a cold start of many nodes).
    known_live: BTreeMap<String, BTreeMap<u64, usize>>,
    /// Directed cuts in force, and the groups of the last partition.
    cuts: BTreeSet<(String, String)>,
    groups: Vec<Vec<String>>,
    /// Liveness: when the current fault-free period began, and whether it was satisfied.
    stable_since: Option<u64>,
    satisfied: bool,
    /// Term stability: (term of the majority's admin at heal, guard end).
    term_guard: Option<(u64, u64)>,
    /// Invariant 7's bound, when the run has a task workload.
    task_bound_ms: Option<u64>,
    /// Invariant 7's bound from an admin's `task_unplaceable` record on.
    unschedulable_bound_ms: Option<u64>,
    /// Accepted tasks by id.
    tasks: BTreeMap<String, TaskRecord>,
    /// Invariant 9: each live sandbox running now, with its worker and run.
    live_runs: BTreeMap<String, (String, u32)>,
    /// Since when results are owed (the cluster healed with a majority up), if it is.
    tasks_owed_since: Option<u64>,
    /// Unfinished tasks by the time their result is owed, in this fault-free period.
    task_deadlines: BTreeSet<(u64, String)>,
    /// Invariant 8: per bootstrap ballot, the value accepted (the first acceptance's) and the
    /// nodes that accepted it.
    ballots: BTreeMap<Ballot, (Arc<[String]>, BTreeSet<String>)>,
    /// Invariant 8: the ballots at which a value was chosen, with the value, in the order found.
    chosen: Vec<(Ballot, Arc<[String]>)>,
    /// Invariant 8: the ballots already reported, by rule, so that one broken ballot is
    /// reported once for each rule it breaks.
    genesis_reported: BTreeSet<(Ballot, Genesis)>,
    /// Nodes whose log was pruned, with the time their retained history starts (header
    /// `pruned`).
    pruned: BTreeMap<String, u64>,
    /// Pruned nodes with no record since that start of whether they hold a lease.
    lease_unknown: BTreeMap<String, u64>,
    /// Invariant 10: when an operator last asked to remove each node, and to add it.
    remove_asked: NameMap<u64>,
    add_asked: NameMap<u64>,
    /// Invariant 10: nodes whose removal an operator asked for and saw committed, and no
    /// operator's add committed since, with when that removal was asked.
    operator_removed: BTreeMap<String, u64>,
    violations: Vec<Violation>,
}

impl Checker {
    /// A checker for the run described by `header`.
    pub fn new(header: &Header) -> Checker {
        Checker {
            eligible: match &header.eligible {
                Some(ids) => ids.iter().cloned().collect(),
                None => (0..header.voters).map(|i| format!("n{i}")).collect(),
            },
            founding: match header.spec.bootstrap_expect {
                Some(k) => k as usize,
                // The simulator's default: every voter founds the cluster.
                None if matches!(header.engine.as_str(), "des" | "turmoil") => header.voters,
                None => 0,
            },
            live_eligible: 0,
            held: NameMap::default(),
            held_before: NameMap::default(),
            shared: VecDeque::new(),
            in_force: Vec::new(),
            live_in_force: Vec::new(),
            admin_now: None,
            hostile: (0..header.nodes)
                .filter(|i| header.spec.is_hostile(*i))
                .map(|i| format!("n{i}"))
                .collect(),
            bound_ms: header.liveness_bound_ms,
            admins_by_term: BTreeMap::new(),
            leases: BTreeMap::new(),
            votes: BTreeMap::new(),
            live: NameSet::default(),
            known: NameMap::default(),
            known_live: BTreeMap::new(),
            cuts: BTreeSet::new(),
            groups: Vec::new(),
            stable_since: None,
            satisfied: false,
            term_guard: None,
            task_bound_ms: header.task_bound_ms,
            unschedulable_bound_ms: header.unschedulable_bound_ms,
            tasks: BTreeMap::new(),
            live_runs: BTreeMap::new(),
            tasks_owed_since: None,
            task_deadlines: BTreeSet::new(),
            ballots: BTreeMap::new(),
            chosen: Vec::new(),
            genesis_reported: BTreeSet::new(),
            pruned: header.pruned.clone().unwrap_or_default(),
            lease_unknown: header.pruned.clone().unwrap_or_default(),
            remove_asked: NameMap::default(),
            add_asked: NameMap::default(),
            operator_removed: BTreeMap::new(),
            violations: Vec::new(),
        }
    }

    /// Whether `node`'s lease state is unknown: its log was pruned and nothing since said
    /// whether it holds a lease.
    fn lease_unknown(&self, node: &str) -> bool {
        self.lease_unknown.contains_key(node)
    }

    /// A record at `t` says whether `node` holds a lease: known from then on, if `t` is
    /// within its retained history.
    fn lease_known(&mut self, node: &str, t: u64) {
        if self.lease_unknown.get(node).is_some_and(|from| t >= *from) {
            self.lease_unknown.remove(node);
        }
    }

    /// Violations found so far, in detection order.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    fn fail(&mut self, invariant: u8, t: u64, line: usize, message: String) {
        self.violations.push(Violation {
            invariant,
            t,
            line,
            message,
        });
    }

    /// Checks one line (`line_no` counts the header as 1).
    pub fn observe(&mut self, line_no: usize, line: &Line) {
        let t = line.t;
        self.check_deadline(t, line_no);
        self.check_task_deadlines(t, line_no);
        if subject(&line.record).is_some_and(|n| self.hostile.contains(n)) {
            return;
        }
        match &line.record {
            Record::TaskSubmitted {
                node,
                task,
                existing: false,
                ..
            } => self.task_accepted(node, task, t, line_no),
            Record::TaskPlaced {
                node, task, worker, ..
            } => {
                let valid = self.leases.get(node).is_some_and(|(_, end)| t < *end);
                if !valid && !self.lease_unknown(node) {
                    let msg = match self.leases.get(node) {
                        Some((term, end)) => format!(
                            "{node} placed {task} on {worker} at t={t}, but its lease (term {term}) ended at {end}"
                        ),
                        None => format!(
                            "{node} placed {task} on {worker} at t={t} without holding a lease"
                        ),
                    };
                    self.fail(7, t, line_no, msg);
                }
            }
            Record::TaskResult { node, task, .. } => self.task_result(node, task, t, line_no),
            Record::TaskUnplaceable { task, .. } => self.task_unplaceable(task, t),
            Record::TaskStarted {
                node,
                task,
                attempt,
                live: true,
            } => self.live_started(node, task, *attempt, t, line_no),
            Record::TaskFinished {
                node,
                task,
                attempt,
                ..
            } if self.live_runs.get(task) == Some(&(node.clone(), *attempt)) => {
                self.live_runs.remove(task);
            }
            _ => {}
        }
        if matches!(
            line.record,
            Record::Crash { .. }
                | Record::Restart { .. }
                | Record::Partition { .. }
                | Record::Cut { .. }
                | Record::Heal
                | Record::Network { .. }
        ) {
            self.tasks_period_ends(t, line_no);
        }
        match &line.record {
            Record::BecameAdmin {
                node,
                term,
                lease_until,
            } => {
                if let Some(other) = self.admins_by_term.get(term) {
                    if other != node {
                        let msg = format!("{other} and {node} both became admin in term {term}");
                        self.fail(1, t, line_no, msg);
                    }
                } else {
                    self.admins_by_term.insert(*term, node.clone());
                }
                self.take_lease(node, *term, *lease_until, t, line_no);
                self.admin_now = Some(node.clone());
                // The electorate it was elected with is the cluster's from now on.
                if let Some(e) = self.held.get(node).cloned() {
                    self.set_in_force(vec![e], t);
                }
            }
            Record::LeaseRenewed {
                node,
                term,
                lease_until,
            } => self.take_lease(node, *term, *lease_until, t, line_no),
            Record::SteppedDown { node, reason, .. } => {
                self.leases.remove(node);
                self.lease_known(node, t);
                if self.admin_now.as_ref() == Some(node) {
                    self.admin_now = None;
                }
                if matches!(reason.as_ref(), "removed" | "transfer" | "shutdown") {
                    // Its own removal committed, an operator asked it to hand over, or it is
                    // stopping: a leadership change on purpose, which the next admin must
                    // complete within the bound. That election raises the term as designed, so
                    // the term its lease held after a heal is no longer the one to guard
                    // (issue 32, finding 4; `core/src/transfer.rs`).
                    self.term_guard = None;
                    self.restart_liveness_clock(t);
                }
            }
            Record::Voted {
                node,
                term,
                candidate,
            } => {
                self.vote(node, *term, candidate, t, line_no);
                self.check_term(*term, t, line_no, node);
            }
            Record::VoteGranted { node, term, to } => self.vote(node, *term, to, t, line_no),
            Record::AdminKnown { node, admin, term } => {
                self.learn_known(node, admin, *term);
            }
            Record::Role { node, term, .. } => self.check_term(*term, t, line_no, node),
            Record::ElectorateChanged {
                node,
                version,
                term,
                members,
            } => {
                let e = self.share(*version, *term, members);
                if let Some(before) = self.held.insert(node.clone(), e.clone()) {
                    self.held_before.insert(node.clone(), before);
                }
                if self.in_force.is_empty() {
                    // The bootstrap electorate.
                    self.set_in_force(vec![e], t);
                }
            }
            Record::BootstrapAccepted {
                node,
                ballot,
                members,
            } => self.bootstrap_accepted(node, ballot, members, t, line_no),
            Record::MembershipChange {
                node,
                change,
                outcome,
                request,
            } => {
                self.membership_change(node, outcome, t);
                self.operator_intent(node, change, outcome, *request, t, line_no);
            }
            Record::Crash { node } => {
                // Invariant 9: a live sandbox dies with its worker's process.
                self.live_runs.retain(|_, (w, _)| w != node);
                self.lease_known(node, t);
                if self.admin_now.as_ref() == Some(node) {
                    self.admin_now = None;
                }
                self.forget_known(node);
                if self.live.remove(node) {
                    self.count_live(node, false);
                }
                self.leases.remove(node);
                self.topology_changed(t);
            }
            Record::Restart { node } => {
                self.lease_known(node, t);
                self.forget_known(node);
                if self.live.insert(node.clone()) {
                    self.count_live(node, true);
                }
                self.topology_changed(t);
            }
            Record::Partition { groups } => {
                self.groups = groups.clone();
                for (i, a) in groups.iter().enumerate() {
                    for (j, b) in groups.iter().enumerate() {
                        if i != j {
                            for x in a {
                                for y in b {
                                    self.cuts.insert((x.clone(), y.clone()));
                                }
                            }
                        }
                    }
                }
                self.topology_changed(t);
            }
            Record::Cut { from, to } => {
                for x in from {
                    for y in to {
                        if x != y {
                            self.cuts.insert((x.clone(), y.clone()));
                        }
                    }
                }
                self.topology_changed(t);
            }
            Record::Heal => {
                let last = std::mem::take(&mut self.groups);
                let sides = self.lease_sides(&last, t);
                self.cuts.clear();
                self.topology_changed(t);
                self.guard_terms_after_heal(&sides, t);
            }
            Record::Network { .. } => self.topology_changed(t),
            Record::LeaseExpired { node, .. } => {
                // Its lease ends now (it ran out, or a membership change cut it).
                if let Some((_, end)) = self.leases.get_mut(node) {
                    *end = (*end).min(t);
                }
            }
            Record::Step { .. }
            | Record::TaskSubmitted { .. }
            | Record::TaskRefused { .. }
            | Record::TaskCancelRequested { .. }
            | Record::TaskPlaced { .. }
            | Record::TaskUnplaceable { .. }
            | Record::TaskStarted { .. }
            | Record::TaskFinished { .. }
            | Record::TaskResult { .. } => {}
        }
        self.check_agreement(t);
    }

    /// Call at the end of the run with the final simulated time.
    pub fn finish(&mut self, end_t: u64, line_no: usize) {
        self.check_deadline(end_t, line_no);
        self.check_task_deadlines(end_t, line_no);
    }

    /// At the end of a run (before [`Checker::finish`]): the tasks live node `node` still owns
    /// unfinished. Every task it accepted without a result in the trace must be among them.
    pub fn owned_at_end(
        &mut self,
        node: &str,
        unfinished: &BTreeSet<String>,
        t: u64,
        line_no: usize,
    ) {
        if self.hostile.contains(node) {
            return;
        }
        let lost: Vec<(String, u64)> = self
            .tasks
            .iter()
            .filter(|(id, r)| r.submitter == node && !r.result && !unfinished.contains(*id))
            .map(|(id, r)| (id.clone(), r.accepted_at))
            .collect();
        for (task, at) in lost {
            let msg = format!(
                "{task}, accepted by {node} at t={at}, has no result, and {node} no longer owns it: lost"
            );
            self.fail(7, t, line_no, msg);
        }
    }

    fn task_accepted(&mut self, node: &str, task: &str, t: u64, line_no: usize) {
        if task_origin(task) != Some(node) {
            let msg = format!("{node} accepted {task}, a task id of another node");
            self.fail(7, t, line_no, msg);
        }
        if self.tasks.contains_key(task) {
            let msg = format!("{node} accepted {task} twice (a task id used again)");
            return self.fail(7, t, line_no, msg);
        }
        self.tasks.insert(
            task.to_owned(),
            TaskRecord {
                submitter: node.to_owned(),
                accepted_at: t,
                result: false,
                unplaceable: false,
            },
        );
        if let (Some(since), Some(bound)) = (self.tasks_owed_since, self.task_bound_ms) {
            self.task_deadlines
                .insert((t.max(since) + bound, task.to_owned()));
        }
    }

    fn task_result(&mut self, node: &str, task: &str, t: u64, line_no: usize) {
        let Some(r) = self.tasks.get_mut(task) else {
            if task_origin(task).is_some_and(|o| self.pruned.contains_key(o)) {
                // Accepted before its submitter's snapshot: not in the trace.
                return;
            }
            let msg = format!("{node} has a result for {task}, which no node accepted");
            return self.fail(7, t, line_no, msg);
        };
        if r.submitter != node {
            let msg = format!(
                "{node} has a result for {task}, which {} accepted",
                r.submitter
            );
            return self.fail(7, t, line_no, msg);
        }
        if r.result {
            let msg = format!("{node} has a second result for {task}");
            return self.fail(7, t, line_no, msg);
        }
        r.result = true;
    }

    /// Invariant 9: a live sandbox is on one worker at a time — never made on a second while
    /// the first still holds it (its run has not ended there and that node has not crashed).
    fn live_started(&mut self, node: &str, task: &str, attempt: u32, t: u64, line_no: usize) {
        if let Some((other, run)) = self.live_runs.get(task) {
            if other != node {
                let msg = format!(
                    "live sandbox {task} was made on {node} (run {attempt}) while {other} still \
                     holds it (run {run})"
                );
                return self.fail(9, t, line_no, msg);
            }
        }
        self.live_runs
            .insert(task.to_owned(), (node.to_owned(), attempt));
    }

    /// An admin said no live worker can run `task`: its result is owed within the unschedulable
    /// bound from now, if that is later than it was owed.
    fn task_unplaceable(&mut self, task: &str, t: u64) {
        let Some(r) = self.tasks.get_mut(task) else {
            return;
        };
        r.unplaceable = true;
        let Some(bound) = self.unschedulable_bound_ms else {
            return;
        };
        if let Some(entry) = self
            .task_deadlines
            .iter()
            .find(|(_, id)| id == task)
            .cloned()
        {
            if entry.0 < t + bound {
                self.task_deadlines.remove(&entry);
                self.task_deadlines.insert((t + bound, entry.1));
            }
        }
    }

    /// A fault-free period ends (a fault, or the end): tasks owed by now are judged first.
    fn tasks_period_ends(&mut self, t: u64, line_no: usize) {
        self.check_task_deadlines(t, line_no);
        self.tasks_owed_since = None;
        self.task_deadlines.clear();
    }

    /// Results are owed from `t` on, if the cluster is healthy now.
    fn tasks_period_starts(&mut self, t: u64) {
        let Some(bound) = self.task_bound_ms else {
            return;
        };
        if !self.healthy() || self.tasks_owed_since.is_some() {
            return;
        }
        self.tasks_owed_since = Some(t);
        self.task_deadlines = self
            .tasks
            .iter()
            .filter(|(_, r)| !r.result)
            .map(|(id, r)| {
                // An admin of an earlier period said no worker can run it: it may end
                // unschedulable only its own bound on (the admin may be the same).
                let unplaceable = self
                    .unschedulable_bound_ms
                    .filter(|_| r.unplaceable)
                    .unwrap_or(0);
                (r.accepted_at.max(t) + bound.max(unplaceable), id.clone())
            })
            .collect();
    }

    /// Every task whose result was owed before `t` and is not in, at a live submitter, fails.
    fn check_task_deadlines(&mut self, t: u64, line_no: usize) {
        while let Some((due, task)) = self.task_deadlines.first().cloned() {
            if due >= t {
                break;
            }
            self.task_deadlines.pop_first();
            let Some(r) = self.tasks.get(&task) else {
                continue;
            };
            if r.result || !self.live.contains(&r.submitter) {
                continue;
            }
            let unplaceable = if r.unplaceable {
                format!(
                    " ({} ms from an admin's task_unplaceable)",
                    self.unschedulable_bound_ms.unwrap_or(0)
                )
            } else {
                String::new()
            };
            let msg = format!(
                "{task}, accepted by {} at t={}, has no result by t={due}: healed with a majority up since t={}, and the task bound is {} ms{unplaceable}",
                r.submitter,
                r.accepted_at,
                self.tasks_owed_since.unwrap_or(0),
                self.task_bound_ms.unwrap_or(0)
            );
            self.fail(7, due, line_no, msg);
        }
    }

    /// One vote of `node` in `term`, from its notice or from a granted reply on the wire: the
    /// same candidate again is a re-sent reply, another candidate a second vote.
    fn vote(&mut self, node: &str, term: u64, candidate: &str, t: u64, line_no: usize) {
        match self.votes.get(&(node.to_owned(), term)) {
            Some(prev) if prev != candidate => {
                let msg = format!("{node} voted for {prev} and for {candidate} in term {term}");
                self.fail(3, t, line_no, msg);
            }
            Some(_) => {}
            None => {
                self.votes
                    .insert((node.to_owned(), term), candidate.to_owned());
            }
        }
    }

    /// Invariant 8: `node` accepted the genesis electorate `members` at `ballot`.
    fn bootstrap_accepted(
        &mut self,
        node: &str,
        ballot: &Ballot,
        members: &Arc<[String]>,
        t: u64,
        line_no: usize,
    ) {
        let (value, by) = self
            .ballots
            .entry(ballot.clone())
            .or_insert_with(|| (members.clone(), BTreeSet::new()));
        if value != members {
            let msg = format!(
                "{node} accepted {} at ballot {}, where {} accepted {}",
                list(members),
                show(ballot),
                by.iter().cloned().collect::<Vec<_>>().join(", "),
                list(value),
            );
            return self.genesis_fail(ballot, Genesis::OneValue, t, line_no, msg);
        }
        // A second acceptance by one node (a resent accept) counts once.
        let newly_chosen = by.insert(node.to_owned()) && by.len() == members.len();
        // Above a ballot where a value was chosen, only that value may be accepted.
        let below = (self.chosen.iter())
            .find(|(b, v)| b < ballot && v != members)
            .cloned();
        if let Some((b, v)) = below {
            let msg = format!(
                "{node} accepted {} at ballot {}, above ballot {} at which a quorum accepted {}",
                list(members),
                show(ballot),
                show(&b),
                list(&v),
            );
            self.genesis_fail(ballot, Genesis::AboveChosen, t, line_no, msg);
        }
        if !newly_chosen {
            return;
        }
        // Named only for a report: a cold start of n voters makes n acceptances of n members.
        let acceptors = |c: &Checker| match c.ballots.get(ballot) {
            Some((_, by)) => by.iter().cloned().collect::<Vec<_>>().join(", "),
            None => String::new(),
        };
        let other = (self.chosen.iter()).find(|(_, v)| v != members).cloned();
        if let Some((b, v)) = other {
            let acceptors = acceptors(self);
            let msg = format!(
                "two genesis electorates were each accepted by a quorum: {} at ballot {}, and {} at ballot {} (by {acceptors})",
                list(&v),
                show(&b),
                list(members),
                show(ballot),
            );
            self.genesis_fail(ballot, Genesis::TwoChosen, t, line_no, msg);
        } else {
            // Acceptances already made above this ballot must carry its value too.
            let above = (self.ballots.range(ballot.clone()..))
                .find(|(b, (v, _))| *b != ballot && v != members)
                .map(|(b, (v, who))| (b.clone(), v.clone(), who.clone()));
            if let Some((b, v, who)) = above {
                let acceptors = acceptors(self);
                let who = who.into_iter().collect::<Vec<_>>().join(", ");
                let msg = format!(
                    "a quorum ({acceptors}) accepted {} at ballot {}, but {who} had accepted {} at the higher ballot {}",
                    list(members),
                    show(ballot),
                    list(&v),
                    show(&b),
                );
                self.genesis_fail(&b, Genesis::AboveChosen, t, line_no, msg);
            }
        }
        self.chosen.push((ballot.clone(), members.clone()));
    }

    /// Reports a break of invariant 8's `rule` at `ballot`, once.
    fn genesis_fail(
        &mut self,
        ballot: &Ballot,
        rule: Genesis,
        t: u64,
        line_no: usize,
        msg: String,
    ) {
        if self.genesis_reported.insert((ballot.clone(), rule)) {
            self.fail(8, t, line_no, msg);
        }
    }

    fn take_lease(&mut self, node: &str, term: u64, until: u64, t: u64, line_no: usize) {
        let holders: Vec<(String, u64)> = self
            .leases
            .iter()
            .filter(|(n, (_, end))| n.as_str() != node && *end > t)
            .map(|(n, (_, end))| (n.clone(), *end))
            .collect();
        for (other, end) in holders {
            let msg =
                format!("{node} holds a lease (term {term}) while {other} holds one until {end}");
            self.fail(2, t, line_no, msg);
        }
        self.leases.insert(node.to_owned(), (term, until));
        self.lease_known(node, t);
    }

    /// A change proposed or committed by the current admin changes the electorate in force;
    /// the same outcome elsewhere (a forwarded request answered, or a stale admin) does not.
    fn membership_change(&mut self, node: &str, outcome: &ChangeOutcome, t: u64) {
        if self.admin_now.as_deref() != Some(node) {
            return;
        }
        let Some(now) = self.held.get(node).cloned() else {
            return;
        };
        match outcome {
            ChangeOutcome::Proposed { version } if *version == now.version => {
                // Until it commits, a majority of the old electorate is needed too.
                let old = self.held_before.get(node).cloned();
                self.set_in_force(old.into_iter().chain([now]).collect(), t);
            }
            ChangeOutcome::Committed { version } if *version == now.version => {
                self.set_in_force(vec![now], t);
            }
            _ => {}
        }
    }

    /// Invariant 10: an operator's removal stands until an operator adds the node back. A
    /// record with a request id is the operator's (at the node asked); an admin's proposal
    /// without one is autopilot's or a request forwarded by another node, which recorded the
    /// operator's ask first. So once an operator saw the removal of X committed, an admin may
    /// propose adding X only if an operator asked to add X after asking to remove it.
    fn operator_intent(
        &mut self,
        node: &str,
        change: &chorus_core::MemberChange,
        outcome: &ChangeOutcome,
        request: Option<u64>,
        t: u64,
        line_no: usize,
    ) {
        use chorus_core::MemberChange;
        let x = change.node().as_str();
        let asked = request.is_some();
        match (change, outcome) {
            (MemberChange::Remove { .. }, ChangeOutcome::Committed { .. }) if asked => {
                let removed_at = self.remove_asked.get(x).copied().unwrap_or(0);
                self.operator_removed.insert(x.to_owned(), removed_at);
            }
            (MemberChange::Add { .. }, ChangeOutcome::Committed { .. }) if asked => {
                self.operator_removed.remove(x);
            }
            (MemberChange::Add { .. }, ChangeOutcome::Proposed { .. })
                if !asked && self.operator_removed.contains_key(x) =>
            {
                // Measured from the removal the operator saw committed: a later removal still
                // in flight does not undo an add asked before it (two concurrent asks; the
                // admin takes them in the order they reach it — `chorus-sim fuzz` seed 400827).
                let removed_at = self.operator_removed.get(x).copied().unwrap_or(0);
                let added_since = self.add_asked.get(x).is_some_and(|a| *a >= removed_at);
                if !added_since {
                    self.fail(
                        10,
                        t,
                        line_no,
                        format!(
                            "{node} proposed adding {x} back, which an operator removed \
                             (asked at t={removed_at}) and nobody asked to add since"
                        ),
                    );
                }
            }
            _ => {}
        }
        if asked {
            let when = match change {
                MemberChange::Remove { .. } => &mut self.remove_asked,
                MemberChange::Add { .. } => &mut self.add_asked,
            };
            // The ask is the request's record that forwards or proposes it.
            if matches!(
                outcome,
                ChangeOutcome::Forwarded { .. } | ChangeOutcome::Proposed { .. }
            ) {
                when.insert(x.to_owned(), t);
            }
        }
    }

    /// Whether `n` is up (for majorities).
    fn is_up(&self, n: &str) -> bool {
        self.live.contains(n)
    }

    /// Whether a majority of every electorate in force (or of the eligible nodes, before one is
    /// known) is in the set `up`.
    fn majority_of_electorate(&self, up: impl Fn(&str) -> bool) -> bool {
        if self.in_force.is_empty() {
            let count = self.eligible.iter().filter(|v| up(v)).count();
            return count > self.eligible.len() / 2;
        }
        self.in_force.iter().all(|e| e.majority_in(&up))
    }

    /// `majority_of_electorate(is_up)` without the walk: from the live counts.
    fn healthy(&self) -> bool {
        debug_assert_eq!(self.live_eligible, self.live_in(&self.eligible));
        debug_assert_eq!(self.live_in_force, self.live_in_force_now());
        let majority = if self.in_force.is_empty() {
            self.live_eligible > self.eligible.len() / 2 && self.live_eligible >= self.founding
        } else {
            (self.in_force.iter())
                .zip(&self.live_in_force)
                .all(|(e, live)| *live > e.members.len() / 2)
        };
        self.cuts.is_empty() && majority
    }

    /// How many of `set` are live, counted afresh.
    fn live_in(&self, set: &NameSet) -> usize {
        set.iter().filter(|n| self.is_up(n)).count()
    }

    /// How many members of each electorate in force are live, counted afresh.
    fn live_in_force_now(&self) -> Vec<usize> {
        self.in_force
            .iter()
            .map(|e| self.live_in(&e.members))
            .collect()
    }

    /// `node` came up (`up`) or went down: keeps the live counts.
    fn count_live(&mut self, node: &str, up: bool) {
        let step = |n: &mut usize| {
            if up {
                *n += 1;
            } else {
                *n -= 1;
            }
        };
        if self.eligible.contains(node) {
            step(&mut self.live_eligible);
        }
        for (e, live) in self.in_force.iter().zip(&mut self.live_in_force) {
            if e.members.contains(node) {
                step(live);
            }
        }
    }

    /// The electorate a node reported, shared with the nodes that reported the same one.
    fn share(&mut self, version: u64, term: u64, members: &Arc<[String]>) -> Arc<Voters> {
        // The engines hand every node that reports one list the same pointer.
        let same = |(list, v): &(Arc<[String]>, Arc<Voters>)| {
            v.version == version
                && v.term == term
                && (Arc::ptr_eq(list, members) || list == members)
        };
        if let Some((_, v)) = self.shared.iter().rev().find(|e| same(e)) {
            return v.clone();
        }
        let v = Arc::new(Voters {
            version,
            term,
            members: members.iter().cloned().collect(),
        });
        if self.shared.len() == SHARED_ELECTORATES {
            self.shared.pop_front();
        }
        self.shared.push_back((members.clone(), v.clone()));
        v
    }

    fn topology_changed(&mut self, t: u64) {
        self.term_guard = None;
        self.restart_liveness_clock(t);
        self.tasks_period_starts(t);
    }

    /// Liveness is owed anew from `t`, if the cluster is healthy now.
    fn restart_liveness_clock(&mut self, t: u64) {
        self.stable_since = self.healthy().then_some(t);
        self.satisfied = false;
    }

    /// Another electorate is in force: a fault-free period goes on (an admin changing the
    /// electorate keeps its lease), but it ends if no majority of the new one is up, and one
    /// begins if only the new one made the cluster healthy.
    fn set_in_force(&mut self, electorates: Vec<Arc<Voters>>, t: u64) {
        // `Arc` of an `Eq` type compares the pointers first: a shared electorate is one check.
        if self.in_force == electorates {
            return;
        }
        self.in_force = electorates;
        self.live_in_force = self.live_in_force_now();
        match (self.stable_since, self.healthy()) {
            (Some(_), false) => {
                self.stable_since = None;
                self.satisfied = false;
            }
            (None, true) => self.restart_liveness_clock(t),
            _ => {}
        }
        if !self.healthy() {
            self.tasks_owed_since = None;
            self.task_deadlines.clear();
        } else {
            self.tasks_period_starts(t);
        }
    }

    /// Whether some live node holds a lease and every live node knows it as admin.
    fn agreement(&self, t: u64) -> bool {
        self.leases.iter().any(|(admin, (term, end))| {
            *end > t
                && self.live.contains(admin)
                && self
                    .known_live
                    .get(admin)
                    .and_then(|terms| terms.get(term))
                    .is_some_and(|n| *n == self.live.len())
        })
    }

    /// `node` now knows `admin` of `term` (counted while it is live).
    fn learn_known(&mut self, node: &str, admin: &str, term: u64) {
        self.forget_known(node);
        if self.live.contains(node) {
            let terms = match self.known_live.get_mut(admin) {
                Some(terms) => terms,
                None => self.known_live.entry(admin.to_owned()).or_default(),
            };
            *terms.entry(term).or_default() += 1;
        }
        self.known.insert(node.to_owned(), (admin.to_owned(), term));
    }

    /// `node` knows no admin any more (call before it leaves or joins `live`).
    fn forget_known(&mut self, node: &str) {
        let Some((admin, term)) = self.known.remove(node) else {
            return;
        };
        if !self.live.contains(node) {
            return;
        }
        if let Some(terms) = self.known_live.get_mut(&admin) {
            if let Some(n) = terms.get_mut(&term) {
                *n -= 1;
                if *n == 0 {
                    terms.remove(&term);
                }
            }
            if terms.is_empty() {
                self.known_live.remove(&admin);
            }
        }
    }

    fn check_agreement(&mut self, t: u64) {
        if self.stable_since.is_some() && !self.satisfied && self.agreement(t) {
            self.satisfied = true;
        }
    }

    fn check_deadline(&mut self, t: u64, line_no: usize) {
        let Some(since) = self.stable_since else {
            return;
        };
        if !self.satisfied && t > since + self.bound_ms {
            let msg = format!(
                "healed with a majority up since t={since}, but no admin known to every live node within {} ms",
                self.bound_ms
            );
            self.fail(4, since + self.bound_ms, line_no, msg);
            // Report each fault-free period once.
            self.satisfied = true;
        }
    }

    /// At a heal, each lease holder of the last partition with its side: the members of its
    /// group that exchange messages with it directly, both ways, under the cuts in force.
    ///
    /// What invariant 5 rests on: an admin whose lease runs keeps it while a majority of the
    /// electorate hears its heartbeats and it hears their acknowledgements, and each of them,
    /// holding a live promise, refuses every pre-vote — so the nodes outside, a minority,
    /// cannot raise a term. That needs a direct link to the admin in both directions: the
    /// simulator (like a real node) relays nothing, so a member that reaches the admin only
    /// through a third node hears no heartbeat and is as good as in the minority (a one-way cut
    /// from the admin to one member of its side, the rest linked: that member stood after the
    /// heal with the returning minority's pre-votes, and the checker of 6c4e8a8, which took
    /// reachability as transitive, reported invariant 5). Links between two members other than
    /// the admin do not matter: each follows the admin by itself. Another fault still in force —
    /// a flap, a one-way cut, an earlier split — may so leave the admin's side smaller than its
    /// group, and no majority.
    fn lease_sides(&self, groups: &[Vec<String>], t: u64) -> Vec<(u64, NameSet)> {
        let cut = |a: &str, b: &str| self.cuts.contains(&(a.to_owned(), b.to_owned()));
        let mut out = Vec::new();
        for (admin, &(term, end)) in &self.leases {
            if end <= t {
                continue;
            }
            let Some(group) = groups.iter().find(|g| g.contains(admin)) else {
                continue;
            };
            let side: NameSet = group
                .iter()
                .filter(|m| *m == admin || !(cut(admin, m) || cut(m, admin)))
                .cloned()
                .collect();
            out.push((term, side));
        }
        out
    }

    fn guard_terms_after_heal(&mut self, sides: &[(u64, NameSet)], t: u64) {
        // A side whose *live* members are a majority: an admin that lost its majority to a
        // crash during the partition steps down whatever the heal brings, and the election
        // after it raises the term as designed (`chorus-sim fuzz` seeds 55680 and 86113).
        let leased = sides
            .iter()
            .filter(|(_, side)| self.majority_of_electorate(|n| self.is_up(n) && side.contains(n)))
            .map(|(term, _)| *term)
            .max();
        if let Some(term) = leased {
            self.term_guard = Some((term, t + self.bound_ms));
        }
    }

    fn check_term(&mut self, term: u64, t: u64, line_no: usize, node: &str) {
        if let Some((guard, until)) = self.term_guard {
            if t <= until && term > guard {
                let msg = format!(
                    "{node} reached term {term} after a heal although the majority's admin held term {guard}"
                );
                self.fail(5, t, line_no, msg);
                self.term_guard = None;
            }
        }
    }
}

/// An accepted task as the checker follows it.
#[derive(Clone, Debug)]
struct TaskRecord {
    submitter: String,
    accepted_at: u64,
    result: bool,
    /// An admin said no live worker can run it (`task_unplaceable`).
    unplaceable: bool,
}

/// The rules of invariant 8 (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Genesis {
    /// All acceptances at one ballot carry one value.
    OneValue,
    /// Acceptances above a ballot where a value was chosen carry that value.
    AboveChosen,
    /// At most one value is chosen.
    TwoChosen,
}

/// A member list as a violation names it: `[n0, n1, n2]`.
fn list(members: &[String]) -> String {
    format!("[{}]", members.join(", "))
}

/// A ballot as a violation names it: `round/proposer`.
fn show(ballot: &Ballot) -> String {
    format!("{}/{}", ballot.round, ballot.node)
}

/// The submitter named in a task id `ORIGIN-SEQ`.
fn task_origin(task: &str) -> Option<&str> {
    task.rsplit_once('-').map(|(origin, _)| origin)
}

/// The node a record is about, if it is about one node.
fn subject(record: &Record) -> Option<&str> {
    match record {
        Record::BecameAdmin { node, .. }
        | Record::LeaseRenewed { node, .. }
        | Record::LeaseExpired { node, .. }
        | Record::SteppedDown { node, .. }
        | Record::Voted { node, .. }
        | Record::VoteGranted { node, .. }
        | Record::AdminKnown { node, .. }
        | Record::ElectorateChanged { node, .. }
        | Record::BootstrapAccepted { node, .. }
        | Record::MembershipChange { node, .. }
        | Record::Role { node, .. }
        | Record::Crash { node }
        | Record::Restart { node }
        | Record::Step { node, .. }
        | Record::TaskSubmitted { node, .. }
        | Record::TaskRefused { node, .. }
        | Record::TaskCancelRequested { node, .. }
        | Record::TaskPlaced { node, .. }
        | Record::TaskUnplaceable { node, .. }
        | Record::TaskStarted { node, .. }
        | Record::TaskFinished { node, .. }
        | Record::TaskResult { node, .. } => Some(node),
        Record::Partition { .. } | Record::Cut { .. } | Record::Heal | Record::Network { .. } => {
            None
        }
    }
}

/// What [`check_file`] found.
pub struct Checked {
    pub header: Header,
    /// Lines after the header.
    pub lines: usize,
    /// The last time in the trace.
    pub end_ms: u64,
    pub violations: Vec<Violation>,
    /// The text of each line a violation names.
    pub quoted: BTreeMap<usize, String>,
    /// Failovers read off the trace (see [`crate::failover`]).
    pub failovers: crate::failover::FailoverMeter,
}

/// Checks a trace file line by line (memory bounded by the checker's state, not the trace),
/// with the header's liveness bound or `bound_ms` (a real run over slow links needs more).
pub fn check_file(path: &std::path::Path, bound_ms: Option<u64>) -> anyhow::Result<Checked> {
    use anyhow::Context;
    use std::io::BufRead;
    let open = || {
        std::fs::File::open(path)
            .map(std::io::BufReader::new)
            .with_context(|| format!("cannot read {}", path.display()))
    };
    let mut lines = open()?.lines();
    let first = lines
        .next()
        .transpose()?
        .ok_or_else(|| anyhow::anyhow!("{}: empty trace", path.display()))?;
    let mut header: Header = serde_json::from_str(&first)
        .with_context(|| format!("{} line 1 (header)", path.display()))?;
    if let Some(b) = bound_ms {
        header.liveness_bound_ms = b;
    }
    let mut c = Checker::new(&header);
    let mut failovers = crate::failover::FailoverMeter::default();
    let (mut n, mut end) = (0, 0);
    for (i, text) in lines.enumerate() {
        let text = text?;
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(&text)
            .with_context(|| format!("{} line {}", path.display(), i + 2))?;
        end = end.max(line.t);
        c.observe(i + 2, &line);
        failovers.observe(line.t, &line.record);
        n = i + 1;
    }
    let end = end.max(header.duration_ms);
    c.finish(end, n + 1);
    let wanted: BTreeSet<usize> = c.violations.iter().map(|v| v.line).collect();
    let mut quoted = BTreeMap::new();
    if !wanted.is_empty() {
        for (i, text) in open()?.lines().enumerate() {
            if wanted.contains(&(i + 1)) {
                quoted.insert(i + 1, text?);
            }
        }
    }
    Ok(Checked {
        header,
        lines: n,
        end_ms: end,
        violations: c.violations,
        quoted,
        failovers,
    })
}

/// Checks a whole trace.
pub fn check(header: &Header, lines: &[Line]) -> Vec<Violation> {
    let mut c = Checker::new(header);
    for (i, l) in lines.iter().enumerate() {
        c.observe(i + 2, l);
    }
    let end = header.duration_ms.max(lines.last().map_or(0, |l| l.t));
    c.finish(end, lines.len() + 1);
    c.violations
}
