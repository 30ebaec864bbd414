//! The admin's duty: queue offered tasks and place them on workers.
//!
//! Rules:
//! 1. Placement happens only while this node holds a valid lease ([`Core::holds_lease`]).
//! 2. A task goes to a worker that fits it (its required capabilities and repository) and has a
//!    free slot, and — when the worker says what it offers its tasks ([`TaskCapacity`]) — room
//!    for the task's memory and CPU beside what this admin placed there (a limit of 0 counts as
//!    the worker's default), within the ceiling of one task; the least loaded first (running /
//!    slots), ties broken by node id. A worker that says nothing of memory or CPU (an older
//!    build) is placed on by its slots alone. Which queued task goes next is rule 13; tasks
//!    of one shape (required capabilities, repository, memory and CPU) fit the same workers,
//!    so a step tries each shape once, and passes over at most [`MAX_SKIPS_PER_STEP`] shapes
//!    no free worker fits and looks at [`MAX_LOOKED_PER_STEP`] in all; the next step goes on
//!    from where it stopped (round an owner's shapes), so tasks behind many unplaceable ones
//!    are still reached.
//! 3. An offer is answered with where the task stands (queued, placed, finished); an offer of a
//!    task already placed or finished never queues it again. Only a task's origin may offer it.
//! 4. Workers' reports are the load table: a new admin starts empty and learns what runs where
//!    from them; a run reported that this admin did not place is adopted (and leaves the queue).
//! 5. A placement the worker has seen (its report's `seen` covers the placement number) but does
//!    not list as running or finished is lost — refused, or given back after a retryable
//!    failure — and queued again after a backoff, as the next attempt. A worker that goes down
//!    loses all its placements, queued again at once. A `partial` report (its lists did not fit
//!    one frame: `work.rs`, rule 7) proves nothing of what it leaves out.
//! 6. Cancelling a queued task answers the submitter with a cancelled result; cancelling a
//!    placed one asks its worker to stop it, again at each of that worker's reports that still
//!    lists the run. A cancelled run that is lost (given back, or its worker gone) is never
//!    queued again: the submitter's next cancelling offer is answered with a cancelled result.
//! 7. An adopted run (rule 4) is told to its submitter at each report until the submitter
//!    offers it: that offer gives the spec, or — when the task's result is in already, a
//!    duplicate or a run cancelled at an admin that did not know of it — cancels the run, so a
//!    stray run never holds a slot until its timeout.
//! 8. A placement no report has confirmed (lost on the way, and the worker's reports are far
//!    apart or lost too) is sent again every [`RESEND_TICKS`] ticks while the lease holds; the
//!    worker deduplicates by task id.
//! 9. Run numbers go on across admins: an offer carries the latest run its submitter heard of,
//!    and a task this admin queues runs next as the one after it (so attempt 1 under one admin
//!    is followed by attempt 2 under the next, not by another attempt 1).
//! 10. A task no live node can run is never parked for ever. Every tick the admin judges
//!     queued tasks (up to [`MAX_JUDGED_PER_TICK`], going on round the queue at the next):
//!     could a worker that has reported slots run it — the capabilities and repository it
//!     requires, its limits within that worker's ceiling and totals — once it has room? If
//!     none can, the submitter is told why (`task_state` queued, `pending` unplaceable: e.g.
//!     `no worker offers repo:nosuch (3 workers checked)`; again when the reason changes, and in
//!     every answer to its offers, with how long so far), and once none could for
//!     [`UNSCHEDULABLE_TICKS`] ticks the admin ends it with an `unschedulable` result (not
//!     retried; its `error` says why). A task that becomes placeable before that (a worker
//!     that fits reports) is placed as any other, and its submitter told (`pending` room).
//!
//!     The count survives failovers, and stays bounded: the submitter keeps how long admins
//!     have said no worker can run the task (durable) and offers it along; a new admin counts
//!     on from there. A new admin judges nothing in its first [`JUDGE_AFTER_TICKS`] ticks (the
//!     workers that heard its first heartbeat report meanwhile), and ends a task only after it
//!     has itself found no worker for it during [`FRESH_BEATS`] heartbeat intervals — a worker
//!     whose first report to it was lost reports within that, so a task it can run is not
//!     ended for want of its report. So each failover adds at most the election, the grace, a
//!     re-offer period (the count the submitter carries lags by at most that) and the fresh
//!     window to the bound; and a task never ends before the bound. Keeping the count in the
//!     admin alone would start it again at each admin change, and an admin changing within
//!     every bound would park the task for ever.
//!
//!     The admin remembers the tasks it ended so (up to 4,096): a submitter whose result was
//!     lost offers the task again and gets the result again at once.
//! 11. The admin relays results. A worker whose result stays unacknowledged (it cannot reach
//!     the submitter: no route between them, an address it never learnt) sends it to the
//!     admin too (`work.rs`, rule 4). The admin passes it on to the task's origin under the
//!     name of the worker it came from — only from a worker it placed the task on or heard
//!     finished it; the submitter acknowledges to the admin naming that worker, and the admin
//!     passes the acknowledgement on. Nothing of it is kept: a relay lost to a failover is sent
//!     again at the worker's next tick, through the next admin. It adds no trust: the admin is
//!     already the one who names which worker's result counts (rule 3 of `submit.rs`).
//! 12. Another node may ask the admin to cancel a task whose origin is out of reach
//!     (`ask.rs`): a placed run is cancelled as by its submitter (rule 6), a queued task leaves
//!     the queue, and the task is remembered (up to 4,096): the origin's later offer of it —
//!     cancelling or not — is answered with a cancelled result unless it is placed or finished,
//!     and a run of it a worker reports is adopted cancelled and asked to stop. Only the origin
//!     takes that result, so the task still ends once.
//! 13. Slots are shared fairly between owners. A task's owner is its origin and the caller
//!     (API token) the origin names in its spec (`submitter`; none for a task without one):
//!     whenever a slot is free, the next task placed is the oldest that fits of the owner with
//!     the fewest placements (adopted runs included), ties going to the owner placed least
//!     recently, then to the one whose oldest task came first (never hash order). So with N
//!     owners queued and running alike, each gets one of the next N placements, an owner with
//!     fewer runs going first, and the runs of owners with tasks that fit stay within one of
//!     each other. Why: in arrival order, one caller's early backlog took every slot that
//!     freed (issue 51: nine long sleeps of one token kept another token's `echo` waiting for
//!     all of them); now it can keep another's task waiting only behind the runs already
//!     going, until the first of them ends (a placement is never taken back). With
//!     `max_running_per_owner` set, an owner with that many placements has none more placed,
//!     even on a free slot: its next task waits, its submitter told why (`pending`
//!     `owner_limit`, again when that changes), so slots stay free for others' tasks that come
//!     later. The queue takes at most
//!     [`MAX_QUEUED_PER_OWNER`] tasks of one owner and [`MAX_QUEUED_PER_ORIGIN`] of one origin
//!     (what an honest origin lets one caller, or itself, have unfinished), besides
//!     [`MAX_QUEUED`] in all; an offer beyond is answered `busy` with the bound it met.
//!
//!     The owner is the origin's word: the admin cannot check a caller's token (nor would a
//!     token id mean the same at another origin under another key), so it trusts the origin
//!     for it, as it trusts a worker for its slots. A hostile origin can name callers of its
//!     own at will, but never charge its tasks to another origin's callers, nor queue more
//!     than its own bound. (The same token submitting at two nodes is two owners.) The turn
//!     order is kept per owner with a task ready; an owner with nothing queued or placed is
//!     forgotten, so the state stays as bounded as the queue.
//!
//! 14. A live sandbox (`TaskSpec::live`, docs/design.md §4.8) is placed at most once: never
//!     on a second worker behind its owner's back. Its placement on a worker that goes down
//!     (or is cut off from this admin) is not queued again but ended `lost`, the result naming
//!     the worker and when; a worker that gives one back before making it (no free slot) lets
//!     it be placed elsewhere, as a task. An offer of one its origin heard was placed (it
//!     carries a run) that no report has shown this admin is not queued: within the first
//!     [`JUDGE_AFTER_TICKS`] ticks of this admin it waits for the workers' reports to adopt
//!     it, and after them it ends `lost` (no worker holds it for this admin). A new admin
//!     places no live sandbox in those first ticks either, so one placed by the admin before
//!     it is adopted from its worker's report instead of being made twice. A worker that
//!     reports running one this admin has placed elsewhere is asked to stop it.
//!
//! The admin's task state is volatile: it dies with the lease, and the submitters' offers and the
//! workers' reports rebuild it under the next admin.
//!
//! What a worker claims — its slots, its memory and CPU for tasks — is believed: a node
//! admitted to the cluster (authenticated, and allowed by its key and allowlist) is trusted
//! for this. A worker that claims more than it has is given more than it can hold: its own
//! checks still refuse a placement without a free slot (released, and placed elsewhere) and a
//! limit above its sandbox ceilings (an error result), but it may run more than its memory or
//! CPU allow, as any misconfigured node would. The numbers are 32-bit, summed in 64: a claim
//! cannot overflow a sum.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ask::MAX_ASKED_AT_ADMIN;
use super::wire::fit_result;
use super::work::MAX_REPORTED;
use super::{
    OfferState, Pending, SharedSpec, TaskCapacity, TaskId, TaskResult, TaskSpec, TaskStatus,
    FRESH_BEATS, JUDGE_AFTER_TICKS, MAX_OWNED_TASKS, MAX_PENDING_BYTES, MAX_TASKS_PER_OWNER,
    REPO_CAPABILITY_PREFIX, UNSCHEDULABLE_TICKS,
};
use crate::{Command, Core, Message, NodeId, Notice, Refusal, Role};

/// Tasks queued at once; an offer beyond is answered `busy`.
pub const MAX_QUEUED: usize = 100_000;

/// Finished tasks remembered (their results are on the way to their submitters).
const MAX_FINISHED: usize = 4_096;

/// Tasks of one owner queued at once (rule 13): what an honest origin lets one caller have
/// unfinished there. An offer beyond is answered `busy`.
pub const MAX_QUEUED_PER_OWNER: usize = MAX_TASKS_PER_OWNER;

/// Tasks of one origin queued at once (rule 13): what an honest origin owns unfinished at
/// most. An offer beyond is answered `busy`.
pub const MAX_QUEUED_PER_ORIGIN: usize = MAX_OWNED_TASKS;

/// Shapes of queued tasks tried per step that no free worker fits (bounds a step's work).
const MAX_SKIPS_PER_STEP: usize = 64;

/// Shapes of queued tasks looked at per step, those already found unfit in the step included
/// (bounds a step's work over many owners).
const MAX_LOOKED_PER_STEP: usize = 1_024;

/// Workers examined per task for a capability match.
const MAX_CANDIDATES: usize = 256;

/// Queued tasks judged per tick (rule 10); the next tick goes on from there.
const MAX_JUDGED_PER_TICK: usize = 256;

/// Ticks a placement waits for a report to confirm it before it is sent again (rule 8).
pub(crate) const RESEND_TICKS: u64 = 3;

/// A placement to send again: (task, attempt, placement number, spec).
type Resend = (TaskId, u32, u64, SharedSpec);

/// A queued task's key: (not before, arrival order).
type Key = (u64, u64);

/// Whom a task is charged to (rule 13): the node that accepted it and the caller (API token)
/// that node names in its spec (`None`: no token, or a run adopted before its spec is known).
pub(crate) type Owner = (NodeId, Option<String>);

fn owner_of(task: &TaskId, spec: Option<&TaskSpec>) -> Owner {
    (task.origin.clone(), spec.and_then(|s| s.submitter.clone()))
}

/// What decides which workers can take a task (rule 2): tasks of one shape fit the same
/// workers, so a step tries one task of each shape an owner has queued.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct Shape {
    requires: Vec<String>,
    repo: Option<String>,
    memory_mb: u32,
    cpu_millis: u32,
    /// Live sandboxes wait out a new admin's first ticks (rule 14); tasks do not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    live: bool,
}

impl Shape {
    fn of(spec: &TaskSpec) -> Shape {
        Shape {
            requires: spec.requires.clone(),
            repo: spec.repo.as_ref().map(|r| r.name.clone()),
            memory_mb: spec.memory_mb,
            cpu_millis: spec.cpu_millis,
            live: spec.live,
        }
    }
}

/// An owner's position in the turn order (rule 13): (placements, last turn, its oldest ready
/// task's key, owner), lowest first.
type Turn = (u32, u64, Key, Owner);

/// One owner's part of the admin's queue and placements (rule 13). Kept while it has a task
/// queued or placed, dropped once it has neither.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OwnerShare {
    /// Its queued tasks past their backoff, by shape, oldest first.
    #[serde(with = "pairs")]
    ready: BTreeMap<Shape, BTreeSet<(Key, TaskId)>>,
    /// The oldest ready task's key of each shape, with the shape: oldest first.
    heads: BTreeSet<(Key, Shape)>,
    /// Its queued tasks, ready or waiting for their backoff.
    queued: usize,
    /// Its placements (adopted runs included).
    running: u32,
    /// When it last had a task placed (`AdminTasks::last_turn`; 0: none since it is known).
    turn: u64,
    /// Where the last step stopped in its shapes at the step's bounds
    /// ([`MAX_SKIPS_PER_STEP`], [`MAX_LOOKED_PER_STEP`]): the next goes on from there, round
    /// its shapes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scan_after: Option<(Key, Shape)>,
}

impl OwnerShare {
    fn add_ready(&mut self, shape: Shape, key: Key, task: TaskId) {
        let set = self.ready.entry(shape.clone()).or_default();
        let old = set.first().map(|(k, _)| *k);
        set.insert((key, task));
        let new = set.first().map(|(k, _)| *k);
        if old != new {
            if let Some(k) = old {
                self.heads.remove(&(k, shape.clone()));
            }
            if let Some(k) = new {
                self.heads.insert((k, shape));
            }
        }
    }

    /// Takes a ready task out; false when it was not ready here.
    fn remove_ready(&mut self, shape: &Shape, key: Key, task: &TaskId) -> bool {
        let Some(set) = self.ready.get_mut(shape) else {
            return false;
        };
        let old = set.first().map(|(k, _)| *k);
        if !set.remove(&(key, task.clone())) {
            return false;
        }
        let new = set.first().map(|(k, _)| *k);
        if set.is_empty() {
            self.ready.remove(shape);
        }
        if old != new {
            if let Some(k) = old {
                self.heads.remove(&(k, shape.clone()));
            }
            if let Some(k) = new {
                self.heads.insert((k, shape.clone()));
            }
        }
        true
    }

    /// Its place in the turn order, while it has a task ready.
    fn turn_key(&self, owner: &Owner) -> Option<Turn> {
        let (oldest, _) = self.heads.first()?;
        Some((self.running, self.turn, *oldest, owner.clone()))
    }

    /// The oldest ready task of `shape`.
    fn head(&self, shape: &Shape) -> Option<&TaskId> {
        self.ready.get(shape)?.first().map(|(_, t)| t)
    }
}

/// A map whose keys are not strings, kept in JSON as a list of pairs.
mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub(super) fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

/// A task waiting for placement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Queued {
    spec: SharedSpec,
    attempt: u32,
    /// Its key in the queue: (not before, arrival order).
    key: Key,
    /// How long its submitter says earlier admins found no live worker to run it (rule 10).
    #[serde(default, skip_serializing_if = "is_zero")]
    carried_ms: u64,
    /// This admin's judgement (rule 10): `None` not judged yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verdict: Option<Verdict>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Whether a live worker could run a queued task (rule 10).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    /// One could: it waits for room.
    Room,
    /// None can, for `reason`, since `since_ms` (this admin's clock; the count its submitter
    /// carried comes on top).
    Unplaceable { since_ms: u64, reason: String },
    /// One could, but its owner has `limit` tasks placed already, the most one may (rule 13).
    OwnerLimit { limit: u32 },
}

impl Queued {
    /// What an answer to its offer says of why it waits.
    fn pending(&self, now: u64) -> Option<Pending> {
        self.verdict.as_ref().map(|v| match v {
            Verdict::Room => Pending::Room,
            Verdict::OwnerLimit { limit } => Pending::OwnerLimit { limit: *limit },
            Verdict::Unplaceable { since_ms, reason } => Pending::Unplaceable {
                reason: reason.clone(),
                for_ms: self
                    .carried_ms
                    .saturating_add(now.saturating_sub(*since_ms)),
            },
        })
    }
}

/// A task placed on a worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Placement {
    worker: NodeId,
    attempt: u32,
    /// The placement number (0: adopted from a report, never placed by this admin).
    seq: u64,
    /// Kept to place it again (unknown for an adopted run: its submitter offers it again).
    spec: Option<SharedSpec>,
    /// When it was placed, or last sent again (this admin's clock).
    #[serde(default)]
    at_ms: u64,
    /// Its submitter cancelled it: the worker is asked to stop it until it ends (rule 6).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cancelled: bool,
}

/// What the admin knows of one task: read through the API when its submitter is out of reach
/// (a task that never ran has no result at any worker; the admin's queue is where it waits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AdminView {
    /// Waiting for placement as run `attempt`; `pending` says why when the admin judged it.
    Queued {
        /// The run it will be.
        attempt: u32,
        /// Why it waits, once judged.
        #[serde(skip_serializing_if = "Option::is_none")]
        pending: Option<Pending>,
    },
    /// Run `attempt` is placed on `worker`; `cancelled` once a cancel reached this admin.
    Placed {
        /// Where.
        worker: NodeId,
        /// Which run.
        attempt: u32,
        /// Asked to stop.
        cancelled: bool,
    },
    /// `worker` finished it; the result waits there for the submitter.
    Finished {
        /// Where it ran.
        worker: NodeId,
    },
    /// This admin ended it `unschedulable`; the result waits for the submitter.
    Unschedulable,
    /// A live sandbox this admin recorded lost with `worker` (rule 14); the result waits for
    /// the submitter.
    Lost {
        /// The worker that held it.
        worker: NodeId,
    },
    /// Another node asked to cancel it (rule 12) before it was placed: it will not run, and
    /// its submitter's next offer is answered `cancelled`.
    Cancelled,
}

/// A worker as its reports describe it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WorkerLoad {
    slots: u32,
    running: u32,
    #[serde(default, skip_serializing_if = "TaskCapacity::is_unset")]
    capacity: TaskCapacity,
}

/// What this admin's placements on a worker take of its memory and CPU: the limits their
/// specs name, and how many are counted at the worker's defaults (a limit of 0, or an adopted
/// run whose spec this admin has not seen yet). Counted so, a default the worker changes in a
/// later report counts at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Used {
    memory_mb: u64,
    cpu_millis: u64,
    default_memory: u64,
    default_cpu: u64,
}

impl Used {
    /// Adds (or takes away) a placement of `spec`.
    fn charge(&mut self, spec: Option<&TaskSpec>, add: bool) {
        let (memory, cpu) = spec.map_or((0, 0), |s| (s.memory_mb, s.cpu_millis));
        let count = |named: &mut u64, defaults: &mut u64, limit: u32| {
            let (n, by) = if limit > 0 {
                (named, u64::from(limit))
            } else {
                (defaults, 1)
            };
            *n = if add {
                n.saturating_add(by)
            } else {
                n.saturating_sub(by)
            };
        };
        count(&mut self.memory_mb, &mut self.default_memory, memory);
        count(&mut self.cpu_millis, &mut self.default_cpu, cpu);
    }

    /// (memory MiB, CPU millicores) taken on a worker offering `capacity`.
    fn taken(&self, capacity: &TaskCapacity) -> (u64, u64) {
        let (memory, cpu) = capacity.demand(&TaskSpec::default());
        (
            self.memory_mb
                .saturating_add(self.default_memory.saturating_mul(memory)),
            self.cpu_millis
                .saturating_add(self.default_cpu.saturating_mul(cpu)),
        )
    }
}

impl WorkerLoad {
    /// Sort key of a worker with a free slot: lower is less loaded.
    fn load_key(&self) -> Option<u64> {
        (self.running < self.slots).then(|| ((self.running as u64) << 32) / self.slots as u64)
    }
}

/// The admin's task state (volatile; part of the admin state, gone with the lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminTasks {
    queued: BTreeMap<TaskId, Queued>,
    /// Queued tasks waiting for their backoff (rule 5), by when they may be placed; then they
    /// join their owner's ready tasks.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    delayed: BTreeSet<(Key, TaskId)>,
    /// Each owner with a task queued or placed (rule 13).
    #[serde(default, with = "pairs", skip_serializing_if = "BTreeMap::is_empty")]
    owners: BTreeMap<Owner, OwnerShare>,
    /// The owners with a ready task, in turn order (rule 13).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    turns: BTreeSet<Turn>,
    /// Queued tasks of each origin (rule 13).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    by_origin: BTreeMap<NodeId, usize>,
    /// Turns given (rule 13): an owner's `turn` is this count at its latest placement.
    #[serde(default)]
    last_turn: u64,
    placed: BTreeMap<TaskId, Placement>,
    /// `placed` by worker, so a report costs what that worker runs, not what all do.
    on_worker: BTreeMap<NodeId, BTreeSet<TaskId>>,
    /// Placements of this admin that no report has mentioned yet (rule 8).
    #[serde(default)]
    unconfirmed: BTreeSet<TaskId>,
    workers: BTreeMap<NodeId, WorkerLoad>,
    /// What `placed` takes of each worker's memory and CPU (rule 2).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    used: BTreeMap<NodeId, Used>,
    /// Workers with a free slot, least loaded first.
    free: BTreeSet<(u64, NodeId)>,
    finished: BTreeMap<TaskId, NodeId>,
    /// Tasks this admin ended itself, with their results: `unschedulable` (rule 10) and live
    /// sandboxes `lost` (rule 14); sent again to a submitter that offers one again (its result
    /// was lost). The name on the wire is the older one.
    #[serde(
        default,
        rename = "unschedulable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    ended: BTreeMap<TaskId, TaskResult>,
    /// Tasks another node asked this admin to cancel (rule 12); when full, the lowest id goes.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    asked_cancel: BTreeSet<TaskId>,
    last_seq: u64,
    last_order: u64,
    /// Where the last tick's judgement of the queue stopped (rule 10): the next goes on from
    /// there, round the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    judge_after: Option<TaskId>,
}

impl AdminTasks {
    /// What this admin knows of `task` at `now_ms` (its clock), if anything.
    pub fn view(&self, task: &TaskId, now_ms: u64) -> Option<AdminView> {
        if let Some(p) = self.placed.get(task) {
            return Some(AdminView::Placed {
                worker: p.worker.clone(),
                attempt: p.attempt,
                cancelled: p.cancelled,
            });
        }
        if let Some(q) = self.queued.get(task) {
            return Some(AdminView::Queued {
                attempt: q.attempt,
                pending: q.pending(now_ms),
            });
        }
        if let Some(w) = self.finished.get(task) {
            return Some(AdminView::Finished { worker: w.clone() });
        }
        if let Some(r) = self.ended.get(task) {
            return Some(match r.status {
                TaskStatus::Lost => AdminView::Lost {
                    worker: r.worker.clone(),
                },
                _ => AdminView::Unschedulable,
            });
        }
        self.asked_cancel
            .contains(task)
            .then_some(AdminView::Cancelled)
    }

    /// Tasks waiting for placement.
    pub fn queue_len(&self) -> usize {
        self.queued.len()
    }

    /// Tasks placed and not known to be finished.
    pub fn placed_len(&self) -> usize {
        self.placed.len()
    }

    /// Workers known from reports.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    fn place(&mut self, task: TaskId, p: Placement) {
        self.unplace(&task);
        self.with_owner(&owner_of(&task, p.spec.as_deref()), |o| o.running += 1);
        self.on_worker
            .entry(p.worker.clone())
            .or_default()
            .insert(task.clone());
        self.used
            .entry(p.worker.clone())
            .or_default()
            .charge(p.spec.as_deref(), true);
        if p.seq > 0 {
            self.unconfirmed.insert(task.clone());
        }
        self.placed.insert(task, p);
    }

    fn unplace(&mut self, task: &TaskId) -> Option<Placement> {
        let p = self.placed.remove(task)?;
        self.with_owner(&owner_of(task, p.spec.as_deref()), |o| {
            o.running = o.running.saturating_sub(1);
        });
        self.unindex(task, &p.worker);
        if let Some(used) = self.used.get_mut(&p.worker) {
            used.charge(p.spec.as_deref(), false);
            if *used == Used::default() {
                self.used.remove(&p.worker);
            }
        }
        self.unconfirmed.remove(task);
        Some(p)
    }

    fn unindex(&mut self, task: &TaskId, worker: &NodeId) {
        if let Some(set) = self.on_worker.get_mut(worker) {
            set.remove(task);
            if set.is_empty() {
                self.on_worker.remove(worker);
            }
        }
    }

    /// Whether `worker` has room for a task of `spec` beside what is placed there: memory and
    /// CPU, when it says what it offers (rule 2).
    fn has_room(&self, worker: &NodeId, spec: &TaskSpec) -> bool {
        let Some(load) = self.workers.get(worker) else {
            return true;
        };
        let used = self
            .used
            .get(worker)
            .map_or((0, 0), |u| u.taken(&load.capacity));
        load.capacity.has_room(used, spec)
    }

    /// Tasks placed on `worker`.
    fn placed_on(&self, worker: &NodeId) -> Vec<TaskId> {
        self.on_worker
            .get(worker)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Changes `owner`'s share with `f`, keeping the turn order in step (rule 13); an owner
    /// left with nothing queued or placed is forgotten.
    fn with_owner<R>(&mut self, owner: &Owner, f: impl FnOnce(&mut OwnerShare) -> R) -> R {
        let share = self.owners.entry(owner.clone()).or_default();
        if let Some(turn) = share.turn_key(owner) {
            self.turns.remove(&turn);
        }
        let r = f(share);
        if let Some(turn) = share.turn_key(owner) {
            self.turns.insert(turn);
        }
        if share.queued == 0 && share.running == 0 {
            self.owners.remove(owner);
        }
        r
    }

    /// Queues `task` as run `attempt`, to be placed from `not_before` on (`now` is this
    /// admin's clock).
    fn enqueue(&mut self, task: TaskId, spec: SharedSpec, attempt: u32, not_before: u64, now: u64) {
        self.last_order += 1;
        let key = (not_before, self.last_order);
        let owner = owner_of(&task, Some(&spec));
        *self.by_origin.entry(task.origin.clone()).or_default() += 1;
        if not_before > now {
            self.delayed.insert((key, task.clone()));
            self.with_owner(&owner, |o| o.queued += 1);
        } else {
            let shape = Shape::of(&spec);
            let t = task.clone();
            self.with_owner(&owner, |o| {
                o.queued += 1;
                o.add_ready(shape, key, t);
            });
        }
        let q = Queued {
            spec,
            attempt,
            key,
            carried_ms: 0,
            verdict: None,
        };
        self.queued.insert(task, q);
    }

    fn dequeue(&mut self, task: &TaskId) -> Option<Queued> {
        let q = self.queued.remove(task)?;
        let delayed = self.delayed.remove(&(q.key, task.clone()));
        let shape = (!delayed).then(|| Shape::of(&q.spec));
        self.with_owner(&owner_of(task, Some(&q.spec)), |o| {
            if let Some(shape) = &shape {
                o.remove_ready(shape, q.key, task);
            }
            o.queued = o.queued.saturating_sub(1);
        });
        if let Some(n) = self.by_origin.get_mut(&task.origin) {
            *n -= 1;
            if *n == 0 {
                self.by_origin.remove(&task.origin);
            }
        }
        Some(q)
    }

    /// Tasks whose backoff is over join their owners' ready tasks (rule 5).
    fn wake(&mut self, now: u64) {
        while let Some((key, task)) = self.delayed.first().cloned() {
            if key.0 > now {
                return;
            }
            self.delayed.pop_first();
            let Some(spec) = self.queued.get(&task).map(|q| q.spec.clone()) else {
                continue;
            };
            let shape = Shape::of(&spec);
            self.with_owner(&owner_of(&task, Some(&spec)), |o| {
                o.add_ready(shape, key, task)
            });
        }
    }

    /// Whether an offer of a new task of `owner` finds room in the queue (rule 13); `Some`
    /// says which bound it would pass.
    fn queue_full(&self, owner: &Owner) -> Option<String> {
        if self.queued.len() >= MAX_QUEUED {
            return Some(format!("the admin's queue holds {MAX_QUEUED} tasks"));
        }
        if self.owners.get(owner).map_or(0, |o| o.queued) >= MAX_QUEUED_PER_OWNER {
            return Some(format!(
                "the admin's queue holds {MAX_QUEUED_PER_OWNER} tasks of this caller at this node"
            ));
        }
        if self.by_origin.get(&owner.0).copied().unwrap_or(0) >= MAX_QUEUED_PER_ORIGIN {
            return Some(format!(
                "the admin's queue holds {MAX_QUEUED_PER_ORIGIN} tasks of this node"
            ));
        }
        None
    }

    /// Sets a worker's load, keeping the free set in step.
    fn set_load(&mut self, worker: &NodeId, load: WorkerLoad) {
        if let Some(old) = self.workers.get(worker).and_then(WorkerLoad::load_key) {
            self.free.remove(&(old, worker.clone()));
        }
        if let Some(k) = load.load_key() {
            self.free.insert((k, worker.clone()));
        }
        self.workers.insert(worker.clone(), load);
    }

    fn remove_worker(&mut self, worker: &NodeId) {
        if let Some(k) = self
            .workers
            .remove(worker)
            .as_ref()
            .and_then(WorkerLoad::load_key)
        {
            self.free.remove(&(k, worker.clone()));
        }
    }

    /// Records a result this admin gave itself (rules 10 and 14), bounded.
    fn end(&mut self, task: TaskId, result: TaskResult) {
        if self.ended.len() >= MAX_FINISHED {
            self.ended.pop_first();
        }
        self.ended.insert(task, result);
    }

    fn remember_finished(&mut self, task: TaskId, worker: NodeId) {
        if self.finished.len() >= MAX_FINISHED {
            self.finished.pop_first();
        }
        self.finished.insert(task, worker);
    }
}

/// The wait before attempt `attempt` (from 2): one tick, doubling, at most 64 ticks.
fn backoff_ms(tick_ms: u64, attempt: u32) -> u64 {
    tick_ms << attempt.saturating_sub(2).min(6)
}

impl Core {
    /// The admin's task state, while admin.
    pub fn admin_tasks(&self) -> Option<&AdminTasks> {
        self.admin_state.as_ref().map(|a| &a.tasks)
    }

    fn admin_tasks_mut(&mut self) -> Option<&mut AdminTasks> {
        self.admin_state.as_mut().map(|a| &mut a.tasks)
    }

    /// Rule 11: passes on a result for a task another node submitted, from a worker this
    /// admin placed it on or heard finished it.
    pub(crate) fn relay_result(
        &mut self,
        from: NodeId,
        task: TaskId,
        mut result: TaskResult,
        out: &mut Vec<Command>,
    ) {
        if self.role != Role::Admin {
            return self.refuse(from, "task_result", Refusal::NotOwner, out);
        }
        if result.check().is_err() {
            return self.refuse(from, "task_result", Refusal::OutOfRange, out);
        }
        let ran_it = self.admin_tasks().is_some_and(|a| {
            a.placed.get(&task).is_some_and(|p| p.worker == from)
                || a.finished.get(&task) == Some(&from)
        });
        if !ran_it {
            // Sent again at the worker's next tick, by when its report will have told us.
            return self.refuse(from, "task_result", Refusal::Unsolicited, out);
        }
        result.worker = from;
        let origin = task.origin.clone();
        let result = Box::new(result);
        self.deliver(origin, Message::TaskResult { task, result }, out);
    }

    /// Rule 12: another node asks to cancel a task whose origin it cannot reach.
    pub(crate) fn admin_cancel_asked(&mut self, task: TaskId, out: &mut Vec<Command>) {
        let term = self.term;
        let Some(a) = self.admin_tasks_mut() else {
            return;
        };
        if a.finished.contains_key(&task) || a.ended.contains_key(&task) {
            return; // its result is on the way to its origin
        }
        if !a.asked_cancel.contains(&task) && a.asked_cancel.len() >= MAX_ASKED_AT_ADMIN {
            a.asked_cancel.pop_first();
        }
        a.asked_cancel.insert(task.clone());
        a.dequeue(&task);
        let stop = a.placed.get_mut(&task).map(|p| {
            p.cancelled = true;
            p.worker.clone()
        });
        if let Some(worker) = stop {
            self.deliver(worker, Message::TaskCancel { term, task }, out);
        }
    }

    /// Rule 11: passes a submitter's acknowledgement of a relayed result on to its worker.
    pub(crate) fn relay_ack(
        &mut self,
        from: NodeId,
        task: TaskId,
        worker: NodeId,
        out: &mut Vec<Command>,
    ) {
        if self.role != Role::Admin {
            return self.refuse(from, "task_result_ack", Refusal::Stale, out);
        }
        self.deliver(worker, Message::TaskResultAck { task, worker: None }, out);
    }

    pub(crate) fn on_task_offer(
        &mut self,
        from: NodeId,
        task: TaskId,
        spec: SharedSpec,
        offer: OfferIn,
        out: &mut Vec<Command>,
    ) {
        let OfferIn {
            cancel,
            attempt: last_attempt,
            unplaceable_ms,
        } = offer;
        if task.origin != from {
            return self.refuse(from, "task_offer", Refusal::NotOwner, out);
        }
        if spec.check().is_err() || unplaceable_ms > crate::MAX_WIRE_INT {
            return self.refuse(from, "task_offer", Refusal::OutOfRange, out);
        }
        if self.role != Role::Admin {
            // The submitter follows an admin this node no longer is (or never was).
            return self.refuse(from, "task_offer", Refusal::Stale, out);
        }
        let now = self.now_ms;
        let term = self.term;
        // Rule 9: the next run comes after the latest the submitter heard of.
        let next_attempt = last_attempt.saturating_add(1);
        // Rule 10: the count carried, less the window this admin watches for itself.
        let bound = self.task_tick_ms() * UNSCHEDULABLE_TICKS;
        let fresh = self
            .config
            .heartbeat_interval_ms
            .saturating_mul(FRESH_BEATS)
            .min(bound);
        let carried_ms = unplaceable_ms.min(bound - fresh);
        let in_grace = self.in_admin_grace();
        let me = self.id.clone();
        let Some(a) = self.admin_tasks_mut() else {
            return;
        };
        let mut cancel_at: Option<(NodeId, TaskId)> = None;
        let mut ended: Option<TaskResult> = None;
        let answer = if let Some(p) = a.placed.get_mut(&task) {
            let mut owner_known = None;
            if p.spec.is_none() {
                // An adopted run: its submitter speaks (rule 7), and its limits now count, to
                // its owner too (rule 13).
                if let Some(used) = a.used.get_mut(&p.worker) {
                    used.charge(None, false);
                    used.charge(Some(&spec), true);
                }
                owner_known = Some((owner_of(&task, None), owner_of(&task, Some(&spec))));
                p.spec = Some(spec);
            }
            if cancel {
                p.cancelled = true;
                cancel_at = Some((p.worker.clone(), task.clone()));
            }
            let state = OfferState::Placed {
                worker: p.worker.clone(),
                attempt: p.attempt,
            };
            if let Some((was, is)) = owner_known.filter(|(was, is)| was != is) {
                a.with_owner(&was, |o| o.running = o.running.saturating_sub(1));
                a.with_owner(&is, |o| o.running += 1);
            }
            Some(state)
        } else if let Some(w) = a.finished.get(&task) {
            Some(OfferState::Finished { worker: w.clone() })
        } else if let Some(r) = a.ended.get(&task) {
            // Rule 10: ended here; its result was lost on the way.
            ended = Some(r.clone());
            None
        } else if cancel || a.asked_cancel.contains(&task) {
            // Rule 6, and rule 12: another node asked to cancel it while its origin was away.
            a.dequeue(&task);
            None
        } else if spec.live && last_attempt >= 1 {
            // Rule 14: placed before this admin, and no report has shown where. Never placed
            // again: the workers' reports may still adopt it in the first ticks, then it is lost.
            a.dequeue(&task);
            if in_grace {
                Some(OfferState::Queued { pending: None })
            } else {
                let why = "admin: it was placed under an earlier admin, and no worker has \
                           reported holding it to this one";
                let result = TaskResult::lost(me, last_attempt, why.into());
                a.end(task.clone(), result.clone());
                ended = Some(result);
                None
            }
        } else if let Some(q) = a.queued.get_mut(&task) {
            // Rule 9: the submitter heard of a later run than this queue knew of.
            q.attempt = q.attempt.max(next_attempt);
            Some(OfferState::Queued {
                pending: q.pending(now),
            })
        } else if let Some(reason) = a.queue_full(&owner_of(&task, Some(&spec))) {
            Some(OfferState::Busy {
                reason: Some(reason),
            })
        } else {
            a.enqueue(task.clone(), spec, next_attempt, now, now);
            if let Some(q) = a.queued.get_mut(&task) {
                // Rule 10: the count goes on from where earlier admins left it.
                q.carried_ms = carried_ms;
            }
            Some(OfferState::Queued { pending: None })
        };
        if let Some((worker, task)) = cancel_at {
            self.deliver(worker, Message::TaskCancel { term, task }, out);
        }
        match (answer, ended) {
            (Some(state), _) => self.deliver(from, Message::TaskState { task, state }, out),
            (None, Some(result)) => {
                let result = Box::new(result);
                self.deliver(from, Message::TaskResult { task, result }, out);
            }
            (None, None) => {
                // Cancelled before it ran: the admin answers in the worker's place.
                let result = TaskResult::without_run(TaskStatus::Cancelled, self.id.clone(), 1);
                let result = Box::new(result);
                self.deliver(from, Message::TaskResult { task, result }, out);
            }
        }
    }

    pub(crate) fn on_worker_report(
        &mut self,
        from: NodeId,
        report: WorkerReportIn,
        out: &mut Vec<Command>,
    ) {
        let WorkerReportIn {
            term,
            seen,
            slots,
            capacity,
            running,
            finished,
            released,
            partial,
        } = report;
        if running.len() > MAX_REPORTED
            || finished.len() > MAX_REPORTED
            || released.len() > MAX_REPORTED
            || slots as usize > MAX_REPORTED
            || seen > crate::MAX_WIRE_INT
        {
            return self.refuse(from, "worker_report", Refusal::OutOfRange, out);
        }
        if self.role != Role::Admin || term != self.term {
            return self.refuse(from, "worker_report", Refusal::Stale, out);
        }
        let now = self.now_ms;
        let tick = self.task_tick_ms();
        let Some(a) = self.admin_tasks_mut() else {
            return;
        };
        let running_set: BTreeSet<&TaskId> = running.iter().map(|(t, _)| t).collect();
        let finished_set: BTreeSet<&TaskId> = finished.iter().collect();
        // Rule 8: what the report mentions has arrived.
        for t in running_set.iter().chain(finished_set.iter()) {
            if a.placed.get(*t).is_some_and(|p| p.worker == from) {
                a.unconfirmed.remove(*t);
            }
        }
        // Rule 5: runs the worker released are placed again (an adopted one, whose spec this
        // admin never had, waits for its submitter's next offer).
        for (t, attempt) in released {
            let this_run = a
                .placed
                .get(&t)
                .is_some_and(|p| p.worker == from && p.attempt == attempt);
            if !this_run || running_set.contains(&t) {
                continue; // an older run's release, or the task runs here again
            }
            // A cancelled run is not run again: its submitter's next cancelling offer finds it
            // neither placed nor queued and is answered with a cancelled result (rule 6).
            if let Some(Placement {
                spec: Some(spec),
                attempt,
                cancelled: false,
                ..
            }) = a.unplace(&t)
            {
                let next = attempt.saturating_add(1);
                a.enqueue(t, spec, next, now + backoff_ms(tick, next), now);
            }
        }
        // Placements the worker does not mention though it saw a later one, or a tick has
        // passed: lost on the way (a cut link), or still on it (placements travel apart and may
        // overtake each other). Sent again; the worker deduplicates by task id. A partial
        // report (its lists did not fit a frame) leaves out some it holds: it proves nothing.
        let resend: Vec<Resend> = a
            .placed_on(&from)
            .into_iter()
            .filter(|_| !partial)
            .filter_map(|t| {
                let p = &a.placed[&t];
                let unmentioned = !running_set.contains(&t) && !finished_set.contains(&t);
                let seen_after = p.seq > 0 && (p.seq < seen || p.at_ms + tick <= now);
                let spec = p.spec.clone()?;
                (unmentioned && seen_after).then_some((t, p.attempt, p.seq, spec))
            })
            .collect();
        // Rule 6: cancelled runs still going are asked to stop again (a cancel may be lost).
        let stop: Vec<TaskId> = running
            .iter()
            .filter(|(t, _)| {
                a.placed
                    .get(t)
                    .is_some_and(|p| p.worker == from && p.cancelled)
            })
            .map(|(t, _)| t.clone())
            .collect();
        for t in finished {
            if a.placed.get(&t).is_some_and(|p| p.worker == from) {
                a.unplace(&t);
            }
            a.dequeue(&t);
            a.remember_finished(t, from.clone());
        }
        // Rule 4: adopt runs this admin did not place.
        let mut adopted_cancelled = Vec::new();
        for (t, attempt) in running {
            if let Some(p) = a.placed.get(&t) {
                // Rule 14: a live sandbox has one worker; another's copy is stopped.
                let live = p.spec.as_ref().is_some_and(|s| s.live);
                if live && p.worker != from {
                    adopted_cancelled.push(t);
                }
                continue;
            }
            if a.ended
                .get(&t)
                .is_some_and(|r| r.status == TaskStatus::Lost)
            {
                // Rule 14: its owner was told it is lost; a worker that still holds it (cut
                // off, then back) is asked to stop it rather than it being adopted.
                adopted_cancelled.push(t);
                continue;
            }
            let spec = a.dequeue(&t).map(|q| q.spec);
            // Rule 12: a run of a task another node asked to cancel is stopped.
            let cancelled = a.asked_cancel.contains(&t);
            if cancelled {
                adopted_cancelled.push(t.clone());
            }
            a.place(
                t,
                Placement {
                    worker: from.clone(),
                    attempt: attempt.max(1),
                    seq: 0,
                    spec,
                    at_ms: now,
                    cancelled,
                },
            );
        }
        // Rule 7: adopted runs whose submitter has not spoken yet are told to it.
        let adopted: Vec<(TaskId, u32)> = a
            .placed_on(&from)
            .into_iter()
            .filter_map(|t| {
                let p = &a.placed[&t];
                p.spec.is_none().then_some((t, p.attempt))
            })
            .collect();
        // The load counts what this admin believes runs there: the report's runs, and
        // placements the worker has not seen yet.
        let load = a.on_worker.get(&from).map_or(0, |s| s.len()) as u32;
        a.set_load(
            &from,
            WorkerLoad {
                slots,
                running: load,
                capacity,
            },
        );
        let term = self.term;
        self.send_placements_again(&from, resend, out);
        for task in stop.into_iter().chain(adopted_cancelled) {
            self.deliver(from.clone(), Message::TaskCancel { term, task }, out);
        }
        for (task, attempt) in adopted {
            let state = OfferState::Placed {
                worker: from.clone(),
                attempt,
            };
            self.deliver(task.origin.clone(), Message::TaskState { task, state }, out);
        }
    }

    /// The admin loses a worker: its placements are queued again at once, except cancelled
    /// ones and live sandboxes, which end `lost` (rule 14).
    pub(crate) fn admin_peer_down(&mut self, peer: &NodeId, out: &mut Vec<Command>) {
        let now = self.now_ms;
        let Some(a) = self.admin_tasks_mut() else {
            return;
        };
        a.remove_worker(peer);
        let mut lost = Vec::new();
        for t in a.placed_on(peer) {
            // A cancelled run went down with its worker: it is not run elsewhere (rule 6).
            if let Some(Placement {
                spec: Some(spec),
                attempt,
                cancelled: false,
                ..
            }) = a.unplace(&t)
            {
                if spec.live {
                    let why = format!(
                        "admin: its worker {peer} went down or was cut off from the admin at \
                         {now} ms (the admin's clock)"
                    );
                    let result = TaskResult::lost(peer.clone(), attempt, why);
                    a.end(t.clone(), result.clone());
                    lost.push((t, result));
                } else {
                    a.enqueue(t, spec, attempt.saturating_add(1), now, now);
                }
            }
        }
        a.finished.retain(|_, w| w != peer);
        for (task, result) in lost {
            let origin = task.origin.clone();
            let result = Box::new(result);
            self.deliver(origin, Message::TaskResult { task, result }, out);
        }
    }

    /// Whether this admin is in its first [`JUDGE_AFTER_TICKS`] ticks, while the workers that
    /// heard its first heartbeat report what they run (rules 10 and 14).
    fn in_admin_grace(&self) -> bool {
        let grace = self.task_tick_ms().saturating_mul(JUDGE_AFTER_TICKS);
        self.admin_state
            .as_ref()
            .is_some_and(|a| self.now_ms < a.elected_at_ms.saturating_add(grace))
    }

    pub(crate) fn admin_has_pending(&self) -> bool {
        self.admin_tasks()
            .is_some_and(|a| !a.queued.is_empty() || !a.unconfirmed.is_empty())
    }

    /// The tick (rule 8): placements no report confirmed within [`RESEND_TICKS`] ticks are sent
    /// again, at most [`MAX_REPORTED`] a tick.
    pub(crate) fn admin_tick(&mut self, out: &mut Vec<Command>) {
        let now = self.now_ms;
        if !self.holds_lease(now) {
            return;
        }
        let wait = self.task_tick_ms() * RESEND_TICKS;
        let Some(a) = self.admin_tasks() else {
            return;
        };
        let mut due: BTreeMap<NodeId, Vec<Resend>> = BTreeMap::new();
        let mut count = 0;
        for t in &a.unconfirmed {
            if count == MAX_REPORTED {
                break;
            }
            let Some(p) = a.placed.get(t) else { continue };
            if p.at_ms.saturating_add(wait) <= now {
                if let Some(spec) = &p.spec {
                    let again = (t.clone(), p.attempt, p.seq, spec.clone());
                    due.entry(p.worker.clone()).or_default().push(again);
                    count += 1;
                }
            }
        }
        for (worker, resend) in due {
            self.send_placements_again(&worker, resend, out);
        }
        self.judge_queue(out);
    }

    /// Rule 10: whether a live worker could run each of (up to [`MAX_JUDGED_PER_TICK`]) queued
    /// tasks; the submitter of one none can run is told why, and the task ends `unschedulable`
    /// once none could for [`UNSCHEDULABLE_TICKS`] ticks (the count its submitter carried
    /// included). Not before [`JUDGE_AFTER_TICKS`] ticks as admin: the workers report first.
    fn judge_queue(&mut self, out: &mut Vec<Command>) {
        let now = self.now_ms;
        if self.in_admin_grace() {
            return;
        }
        let Some(admin) = self.admin_state.as_ref() else {
            return;
        };
        let a = &admin.tasks;
        let mut batch: Vec<TaskId> = match &a.judge_after {
            Some(t) => a
                .queued
                .range((
                    std::ops::Bound::Excluded(t.clone()),
                    std::ops::Bound::Unbounded,
                ))
                .take(MAX_JUDGED_PER_TICK)
                .map(|(k, _)| k.clone())
                .collect(),
            None => Vec::new(),
        };
        // Round to the start of the queue (and up to where this round began).
        let room = MAX_JUDGED_PER_TICK - batch.len();
        let wrap = a
            .judge_after
            .as_ref()
            .map_or(std::ops::Bound::Unbounded, |t| {
                std::ops::Bound::Included(t.clone())
            });
        batch.extend(
            a.queued
                .range((std::ops::Bound::Unbounded, wrap))
                .take(room)
                .map(|(k, _)| k.clone()),
        );
        if batch.is_empty() {
            return;
        }
        let workers: Vec<(&NodeId, TaskCapacity)> = a
            .workers
            .iter()
            .filter(|(_, l)| l.slots > 0)
            .map(|(w, l)| (w, l.capacity))
            .collect();
        // Tasks alike are judged once.
        type Shape = (Vec<String>, Option<String>, u32, u32);
        let mut memo: BTreeMap<Shape, Option<String>> = BTreeMap::new();
        let verdicts: Vec<(TaskId, Option<String>)> = batch
            .iter()
            .map(|t| {
                let spec = &a.queued[t].spec;
                let shape = (
                    spec.requires.clone(),
                    spec.repo.as_ref().map(|r| r.name.clone()),
                    spec.memory_mb,
                    spec.cpu_millis,
                );
                let v = memo
                    .entry(shape)
                    .or_insert_with(|| self.unplaceable(spec, &workers).map(bounded_reason))
                    .clone();
                (t.clone(), v)
            })
            .collect();
        let bound = self.task_tick_ms().saturating_mul(UNSCHEDULABLE_TICKS);
        let limit = self.config.max_running_per_owner;
        let me = self.id.clone();
        let Some(a) = self.admin_tasks_mut() else {
            return;
        };
        a.judge_after = batch.last().cloned();
        let mut tell: Vec<(TaskId, Pending)> = Vec::new();
        let mut end: Vec<(TaskId, TaskResult)> = Vec::new();
        for (t, verdict) in verdicts {
            // Rule 13: its owner has as many placed as one may.
            let at_limit = limit > 0
                && a.queued
                    .get(&t)
                    .and_then(|q| a.owners.get(&owner_of(&t, Some(&q.spec))))
                    .is_some_and(|o| o.running >= limit);
            let Some(q) = a.queued.get_mut(&t) else {
                continue;
            };
            let Some(reason) = verdict else {
                // A live worker could run it: the count ends (and its submitter's with it).
                let (now_verdict, pending) = if at_limit {
                    (Verdict::OwnerLimit { limit }, Pending::OwnerLimit { limit })
                } else {
                    (Verdict::Room, Pending::Room)
                };
                let was = q.verdict.replace(now_verdict);
                let counted = matches!(was, Some(Verdict::Unplaceable { .. }))
                    || (was.is_none() && q.carried_ms > 0);
                let turned = at_limit != matches!(was, Some(Verdict::OwnerLimit { .. }));
                q.carried_ms = 0;
                if counted || turned {
                    tell.push((t, pending));
                }
                continue;
            };
            let since = match &q.verdict {
                Some(Verdict::Unplaceable { since_ms, .. }) => *since_ms,
                _ => now,
            };
            let waited = q.carried_ms.saturating_add(now.saturating_sub(since));
            if waited >= bound {
                let attempt = q.attempt;
                a.dequeue(&t);
                let mut result =
                    TaskResult::without_run(TaskStatus::Unschedulable, me.clone(), attempt);
                result.error = Some(format!(
                    "admin: no live worker could run it for {} s: {reason}",
                    waited / 1_000
                ));
                fit_result(&mut result);
                a.end(t.clone(), result.clone());
                end.push((t, result));
                continue;
            }
            let same =
                matches!(&q.verdict, Some(Verdict::Unplaceable { reason: r, .. }) if *r == reason);
            q.verdict = Some(Verdict::Unplaceable {
                since_ms: since,
                reason: reason.clone(),
            });
            if !same {
                tell.push((
                    t,
                    Pending::Unplaceable {
                        reason,
                        for_ms: waited,
                    },
                ));
            }
        }
        for (task, pending) in tell {
            if let Pending::Unplaceable { reason, .. } = &pending {
                out.push(Command::Notice(Notice::TaskUnplaceable {
                    task: task.clone(),
                    reason: reason.clone(),
                }));
            }
            let state = OfferState::Queued {
                pending: Some(pending),
            };
            self.deliver(task.origin.clone(), Message::TaskState { task, state }, out);
        }
        for (task, result) in end {
            let msg = Message::TaskResult {
                task: task.clone(),
                result: Box::new(result),
            };
            self.deliver(task.origin.clone(), msg, out);
        }
    }

    /// Why no live worker (of `workers`: those with slots, and what each offers) can run
    /// `spec`, or `None` when one can (now, or once it has room).
    fn unplaceable(&self, spec: &TaskSpec, workers: &[(&NodeId, TaskCapacity)]) -> Option<String> {
        let n = workers.len();
        if n == 0 {
            return Some("no worker has reported task slots to the admin".into());
        }
        let none: &[String] = &[];
        let caps = |w: &NodeId| -> &[String] {
            if *w == self.id {
                &self.capabilities
            } else {
                self.peers.get(w).map_or(none, |p| p.capabilities())
            }
        };
        let capable: Vec<&TaskCapacity> = workers
            .iter()
            .filter(|(w, _)| spec.fits(caps(w)))
            .map(|(_, c)| c)
            .collect();
        if capable.iter().any(|c| c.refuses(spec).is_none()) {
            return None;
        }
        let checked = format!("{n} worker{} checked", if n == 1 { "" } else { "s" });
        if capable.is_empty() {
            let needed: Vec<String> = spec
                .requires
                .iter()
                .cloned()
                .chain(
                    spec.repo
                        .as_ref()
                        .map(|r| format!("{REPO_CAPABILITY_PREFIX}{}", r.name)),
                )
                .collect();
            let missing = needed
                .iter()
                .find(|c| !workers.iter().any(|(w, _)| caps(w).contains(c)));
            return Some(match missing {
                Some(c) => format!("no worker offers {c} ({checked})"),
                None => format!(
                    "no worker offers {} together ({checked})",
                    needed.join(", ")
                ),
            });
        }
        // Each worker that offers what it requires refuses its limits.
        let most = |limit: fn(&TaskCapacity) -> Option<u32>| -> Option<u32> {
            capable
                .iter()
                .map(|c| limit(c))
                .try_fold(0, |m, l| l.map(|l| m.max(l)))
        };
        fn allowed(total: u32, one: u32) -> Option<u32> {
            match (total, one) {
                (0, 0) => None,
                (0, x) | (x, 0) => Some(x),
                (t, o) => Some(t.min(o)),
            }
        }
        let memory = most(|c| allowed(c.memory_mb, c.task_memory_mb));
        let cpu = most(|c| allowed(c.cpu_millis, c.task_cpu_millis));
        let ask = |what: &str, unit: &str, asked: u32, most: Option<u32>| {
            most.filter(|m| asked > *m).map(|m| {
                format!(
                    "it asks for {asked}{unit} of {what}; the most a worker that offers what it \
                     requires gives one task is {m}{unit} ({checked})"
                )
            })
        };
        ask("memory", " MiB", spec.memory_mb, memory)
            .or_else(|| ask("CPU", " millicores", spec.cpu_millis, cpu))
            .or_else(|| {
                Some(format!(
                    "no worker that offers what it requires has room for both its memory and its \
                     CPU ({checked})"
                ))
            })
    }

    /// Sends placements on `worker` again (rules 5 and 8), their clock restarted.
    fn send_placements_again(
        &mut self,
        worker: &NodeId,
        resend: Vec<Resend>,
        out: &mut Vec<Command>,
    ) {
        let now = self.now_ms;
        let term = self.term;
        for (task, attempt, seq, spec) in resend {
            if let Some(p) = self.admin_tasks_mut().and_then(|a| a.placed.get_mut(&task)) {
                p.at_ms = now;
            }
            let msg = Message::TaskPlace {
                term,
                task,
                attempt,
                seq,
                spec,
            };
            self.deliver(worker.clone(), msg, out);
        }
    }

    /// Places what the queue holds and the workers can take (rule 1: only under the lease),
    /// going round the owners (rule 13).
    pub(crate) fn place_tasks(&mut self, out: &mut Vec<Command>) {
        let now = self.now_ms;
        if !self.holds_lease(now) {
            return;
        }
        let term = self.term;
        let limit = self.config.max_running_per_owner;
        let in_grace = self.in_admin_grace();
        let Some(a) = self.admin_tasks_mut() else {
            return;
        };
        a.wake(now);
        // The step's bounds: shapes no free worker fits (tried once a step: the free workers
        // only fill up as it goes), and shapes looked at.
        let mut unfit: BTreeSet<Shape> = BTreeSet::new();
        let (mut skipped, mut looked) = (0, 0);
        // Owners passed over in this step (none of their shapes fits): always the first ones
        // in turn order, as an owner placed moves behind them.
        let mut passed: Option<Turn> = None;
        loop {
            let Some(a) = self.admin_state.as_ref().map(|a| &a.tasks) else {
                return;
            };
            if a.free.is_empty() || skipped >= MAX_SKIPS_PER_STEP || looked >= MAX_LOOKED_PER_STEP {
                return;
            }
            // Rule 13: the owner with the fewest placements, below the limit; of those, the one
            // placed least recently.
            let after = passed
                .clone()
                .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
            let Some(turn) = a
                .turns
                .range((after, std::ops::Bound::Unbounded))
                .next()
                .filter(|(running, ..)| limit == 0 || *running < limit)
                .cloned()
            else {
                return;
            };
            let owner = turn.3.clone();
            let share = &a.owners[&owner];
            // Its shapes, oldest first: from where the last step stopped, round to it.
            let heads: Box<dyn Iterator<Item = &(Key, Shape)>> = match &share.scan_after {
                Some(c) => Box::new(
                    share
                        .heads
                        .range((
                            std::ops::Bound::Excluded(c.clone()),
                            std::ops::Bound::Unbounded,
                        ))
                        .chain(share.heads.range(..=c.clone())),
                ),
                None => Box::new(share.heads.iter()),
            };
            let mut found: Option<(TaskId, NodeId)> = None;
            let mut stopped_at: Option<(Key, Shape)> = None;
            for head in heads {
                if skipped >= MAX_SKIPS_PER_STEP || looked >= MAX_LOOKED_PER_STEP {
                    break;
                }
                looked += 1;
                stopped_at = Some(head.clone());
                let shape = &head.1;
                if unfit.contains(shape) {
                    continue;
                }
                if in_grace && shape.live {
                    // Rule 14: one placed by the admin before may still be reported.
                    unfit.insert(shape.clone());
                    skipped += 1;
                    continue;
                }
                let Some(task) = share.head(shape) else {
                    continue;
                };
                let spec = &a.queued[task].spec;
                let worker = a
                    .free
                    .iter()
                    .take(MAX_CANDIDATES)
                    .map(|(_, w)| w)
                    .find(|w| self.worker_fits(w, spec) && a.has_room(w, spec));
                match worker {
                    Some(w) => {
                        found = Some((task.clone(), w.clone()));
                        break;
                    }
                    None => {
                        unfit.insert(shape.clone());
                        skipped += 1;
                    }
                }
            }
            let Some((task, worker)) = found else {
                let bounded = skipped >= MAX_SKIPS_PER_STEP || looked >= MAX_LOOKED_PER_STEP;
                if let Some(a) = self.admin_tasks_mut() {
                    if let Some(o) = a.owners.get_mut(&owner) {
                        // At a bound, the next step goes on from here; else from its oldest.
                        o.scan_after = if bounded { stopped_at } else { None };
                    }
                }
                passed = Some(turn);
                continue;
            };
            let Some(a) = self.admin_tasks_mut() else {
                return;
            };
            if let Some(o) = a.owners.get_mut(&owner) {
                o.scan_after = None;
            }
            let Some(q) = a.dequeue(&task) else {
                return;
            };
            a.last_seq += 1;
            let seq = a.last_seq;
            let mut load = a.workers.get(&worker).cloned().unwrap_or_default();
            load.running += 1;
            a.set_load(&worker, load);
            a.place(
                task.clone(),
                Placement {
                    worker: worker.clone(),
                    attempt: q.attempt,
                    seq,
                    spec: Some(q.spec.clone()),
                    at_ms: now,
                    cancelled: false,
                },
            );
            // Its turn: behind the owners with as many placements.
            a.last_turn += 1;
            let turn = a.last_turn;
            a.with_owner(&owner, |o| o.turn = turn);
            out.push(Command::Notice(Notice::TaskPlaced {
                task: task.clone(),
                worker: worker.clone(),
                attempt: q.attempt,
            }));
            let origin = task.origin.clone();
            let state = OfferState::Placed {
                worker: worker.clone(),
                attempt: q.attempt,
            };
            self.deliver(
                origin,
                Message::TaskState {
                    task: task.clone(),
                    state,
                },
                out,
            );
            self.deliver(
                worker,
                Message::TaskPlace {
                    term,
                    task,
                    attempt: q.attempt,
                    seq,
                    spec: q.spec,
                },
                out,
            );
        }
    }

    /// Whether `worker` (this node, or a connected peer) advertises what `spec` needs.
    fn worker_fits(&self, worker: &NodeId, spec: &super::TaskSpec) -> bool {
        if *worker == self.id {
            spec.fits(&self.capabilities)
        } else {
            self.peers
                .get(worker)
                .is_some_and(|p| spec.fits(p.capabilities()))
        }
    }
}

/// `reason` cut to [`MAX_PENDING_BYTES`] at a character boundary (`…` marks the cut): it names
/// capabilities of up to 256 bytes each, and a submitter refuses a longer one.
pub(crate) fn bounded_reason(mut reason: String) -> String {
    if reason.len() > MAX_PENDING_BYTES {
        let mut end = MAX_PENDING_BYTES - '…'.len_utf8();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// An offer's fields besides the task and its spec.
pub(crate) struct OfferIn {
    pub(crate) cancel: bool,
    pub(crate) attempt: u32,
    pub(crate) unplaceable_ms: u64,
}

/// A worker report's fields, as the message carries them.
pub(crate) struct WorkerReportIn {
    pub(crate) term: u64,
    pub(crate) seen: u64,
    pub(crate) slots: u32,
    pub(crate) capacity: TaskCapacity,
    pub(crate) running: Vec<(TaskId, u32)>,
    pub(crate) finished: Vec<TaskId>,
    pub(crate) released: Vec<(TaskId, u32)>,
    pub(crate) partial: bool,
}
