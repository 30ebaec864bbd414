//! The submitter: owns the tasks it accepted and offers each to the admin until its result is in.
//!
//! Rules:
//! 1. A submit is checked ([`TaskSpec::check`]: its bounds, and that its offer fits a frame)
//!    and, with an idempotency key already used, answered with the task that key made (a
//!    different spec under the same key is refused). A task kept from an older build whose spec
//!    fails the check ends at the next restart, as an error.
//! 2. An unfinished task is offered to the admin of the moment: at once, again whenever the
//!    (admin, term) this node follows changes (a new admin starts with an empty queue), every
//!    tick while no admin answered, and every [`REOFFER_TICKS`] ticks in any case (an admin may
//!    have lost track: a worker it placed on went silent and took the task along).
//! 3. A result counts only from a worker the admin named for the task, or from the admin; the
//!    first one is kept, and every copy is acknowledged so the worker can forget it. A result
//!    the admin relays for a worker that cannot reach this node (`place.rs`, rule 11) keeps
//!    the worker's name, and is acknowledged to the admin naming that worker.
//! 4. Owned tasks are durable (the log folds into them); done ones are remembered up to
//!    [`MAX_DONE_TASKS`], the oldest forgotten first.
//! 5. When the admin says a task whose result is in is placed (a run it adopted from a
//!    worker's report: a duplicate, or a run cancelled at an admin that did not know of it), the
//!    task is offered once more, cancelled, so that run stops; at most once a tick.
//! 6. Run numbers go on across admins: the submitter keeps the latest run an admin named for
//!    a task (durable) and offers it along; an admin that queues the task numbers its next run
//!    after it. (A new admin starts empty: without this, every failover began again at run 1.)
//! 7. When the admin says no live worker can run a task, the submitter keeps why (the API shows
//!    it) and for how long (durable), and offers that along: a new admin counts on from there
//!    towards ending it `unschedulable` instead of starting again. A placement, or the admin
//!    saying a worker could run it, clears both. The admin's `unschedulable` result ends the
//!    task like any other. When the admin says the task waits for its owner's turn (its owner
//!    has as many tasks placed as one may: `place.rs`, rule 13), or answers `busy` with a
//!    reason, the submitter keeps that reason too (the first clears the count: a worker could
//!    run the task).
//! 8. A live sandbox (`TaskSpec::live`, docs/design.md §4.8) is placed only by the first
//!    admin (and term) it was offered to: offered to any later one, it carries run 1 at
//!    least, as a task that may have been placed — so that admin adopts it from a worker's
//!    report or ends it `lost`, and never makes a second one (`place.rs` rule 14). The first
//!    admin may have placed it on a worker now cut off, with word of it lost on the way (the
//!    simulator found this: seed 1954 of `chorus-sim fuzz`); a create that races a failover
//!    so ends `lost`, and its caller makes another.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{
    OfferState, Pending, SharedSpec, TaskId, TaskResult, TaskStatus, MAX_DONE_TASKS,
    MAX_OWNED_TASKS, MAX_PENDING_BYTES, MAX_TASKS_PER_OWNER,
};
use crate::{Command, Core, Message, NodeId, Notice, Refusal};

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

/// An unfinished task is offered again after this many ticks even when the admin answered.
pub(crate) const REOFFER_TICKS: u64 = 10;

/// At most this many workers are remembered per task (results are accepted from them).
const MAX_NAMED_WORKERS: usize = 8;

/// Where a task stands as its submitter knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum TaskPhase {
    /// Accepted here; no admin has queued it yet.
    Submitted,
    /// The admin queued it.
    Queued,
    /// The admin placed it on `worker`.
    Placed {
        /// The worker.
        worker: NodeId,
        /// The run.
        attempt: u32,
    },
    /// The worker finished; its result is on the way.
    Finished {
        /// The worker.
        worker: NodeId,
    },
    /// The result is in.
    Done,
}

impl TaskPhase {
    /// The snake_case name used in the API and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskPhase::Submitted => "submitted",
            TaskPhase::Queued => "queued",
            TaskPhase::Placed { .. } => "placed",
            TaskPhase::Finished { .. } => "finished",
            TaskPhase::Done => "done",
        }
    }
}

/// A task this node accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedTask {
    /// What to run.
    pub spec: SharedSpec,
    /// The idempotency key it was submitted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Who submitted it (an API token's id), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When it was accepted (this node's clock).
    pub submitted_at_ms: u64,
    /// Where it stands.
    pub phase: TaskPhase,
    /// Cancellation was asked for.
    #[serde(default)]
    pub cancel: bool,
    /// Workers the admin named for it: results are accepted from these (and the admin).
    #[serde(default)]
    pub workers: Vec<NodeId>,
    /// When it was last offered (0: never).
    #[serde(default)]
    pub offered_at_ms: u64,
    /// The latest run an admin named for it (0: none yet), offered along so the next admin
    /// numbers its run after it (rule 6).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub last_attempt: u32,
    /// Why it waits, when the admin said: no live worker can run it, its owner has as many
    /// tasks placed as one owner may, or the admin's queue holds as many of its owner's tasks
    /// as it takes (rule 7): shown by the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
    /// For how long no live worker could run it, as the admin last said (ms): offered along,
    /// so the next admin counts on from there (rule 7).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub unplaceable_ms: u64,
    /// The result, once in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    /// When the result came in.
    #[serde(default)]
    pub done_at_ms: u64,
    /// When this node heard its latest run was placed (0: not heard; a short run's result can
    /// come before the admin's word).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub placed_at_ms: u64,
    /// For a live sandbox: the (admin, term) it was first offered to (rule 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_offered: Option<(NodeId, u64)>,
}

/// The submitter's part of a node's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitterTasks {
    /// The last sequence number given out.
    pub(crate) last_seq: u64,
    /// Tasks owned, done ones included (up to [`MAX_DONE_TASKS`]).
    pub(crate) owned: BTreeMap<TaskId, OwnedTask>,
    /// Unfinished tasks.
    pub(crate) unfinished: usize,
    /// Idempotency keys of owned tasks.
    pub(crate) keys: BTreeMap<String, TaskId>,
    /// Done tasks, oldest first (forgotten in this order).
    pub(crate) done: VecDeque<TaskId>,
    /// The (admin, term) every unfinished task was last offered to (volatile).
    pub(crate) offered_view: Option<(NodeId, u64)>,
}

impl Core {
    /// Tasks this node owns, done ones included.
    pub fn owned_tasks(&self) -> &BTreeMap<TaskId, OwnedTask> {
        &self.tasks.submit.owned
    }

    pub(crate) fn on_submit_task(
        &mut self,
        spec: SharedSpec,
        key: Option<String>,
        owner: Option<String>,
        request: u64,
        out: &mut Vec<Command>,
    ) {
        let refuse = |reason: String, out: &mut Vec<Command>| {
            out.push(Command::Notice(Notice::TaskRefused { request, reason }));
        };
        if owner
            .as_ref()
            .is_some_and(|o| o.is_empty() || o.len() > super::bounds::NAME)
        {
            return refuse(
                format!("owner must be 1 to {} bytes", super::bounds::NAME),
                out,
            );
        }
        // The submitter is this node's word, never the request's; checked with the rest, so
        // the spec as offered fits its frame.
        let spec = if spec.submitter != owner {
            let mut s = (*spec).clone();
            s.submitter.clone_from(&owner);
            SharedSpec::new(s)
        } else {
            spec
        };
        if let Err(e) = spec.check() {
            return refuse(format!("bad task spec: {e}"), out);
        }
        if let Some(k) = &key {
            if k.is_empty() || k.len() > super::bounds::NAME {
                return refuse(
                    format!("idempotency key must be 1 to {} bytes", super::bounds::NAME),
                    out,
                );
            }
            if let Some(task) = self.tasks.submit.keys.get(k) {
                let known = self.tasks.submit.owned.get(task);
                if known.is_some_and(|t| t.owner != owner) {
                    return refuse(
                        format!("idempotency key `{k}` belongs to another caller"),
                        out,
                    );
                }
                let same = known.map(|t| &t.spec) == Some(&spec);
                if !same {
                    return refuse(
                        format!("idempotency key `{k}` was used for task {task} with another spec"),
                        out,
                    );
                }
                out.push(Command::Notice(Notice::TaskSubmitted {
                    task: task.clone(),
                    request,
                    existing: true,
                }));
                return;
            }
        }
        let s = &mut self.tasks.submit;
        if s.unfinished >= MAX_OWNED_TASKS {
            return refuse(
                format!("this node owns {MAX_OWNED_TASKS} unfinished tasks already"),
                out,
            );
        }
        if let Some(o) = &owner {
            let theirs = s
                .owned
                .values()
                .filter(|t| t.owner.as_ref() == Some(o) && !matches!(t.phase, TaskPhase::Done))
                .count();
            if theirs >= MAX_TASKS_PER_OWNER {
                return refuse(
                    format!(
                        "this caller has {MAX_TASKS_PER_OWNER} unfinished tasks here already; \
                         wait for some to finish"
                    ),
                    out,
                );
            }
        }
        if s.last_seq >= crate::MAX_WIRE_INT {
            return refuse("task numbers are used up on this node".into(), out);
        }
        s.last_seq += 1;
        let task = TaskId {
            origin: self.id.clone(),
            seq: s.last_seq,
        };
        if let Some(k) = &key {
            s.keys.insert(k.clone(), task.clone());
        }
        s.owned.insert(
            task.clone(),
            OwnedTask {
                spec,
                key,
                owner,
                submitted_at_ms: self.now_ms,
                phase: TaskPhase::Submitted,
                cancel: false,
                workers: Vec::new(),
                offered_at_ms: 0,
                last_attempt: 0,
                pending: None,
                unplaceable_ms: 0,
                result: None,
                done_at_ms: 0,
                placed_at_ms: 0,
                first_offered: None,
            },
        );
        s.unfinished += 1;
        out.push(Command::Notice(Notice::TaskSubmitted {
            task: task.clone(),
            request,
            existing: false,
        }));
        self.offer(&task, out);
    }

    pub(crate) fn on_cancel_task(&mut self, task: TaskId, request: u64, out: &mut Vec<Command>) {
        let reason = match self.tasks.submit.owned.get_mut(&task) {
            None => format!("no task {task} here (cancel it at the node it was submitted to)"),
            Some(t) if t.phase == TaskPhase::Done => format!("task {task} is finished already"),
            Some(t) => {
                t.cancel = true;
                out.push(Command::Notice(Notice::TaskCancelRequested {
                    task: task.clone(),
                    request,
                }));
                self.offer(&task, out);
                return;
            }
        };
        out.push(Command::Notice(Notice::TaskRefused { request, reason }));
    }

    /// Offers `task` to the admin this node follows, if it knows one.
    fn offer(&mut self, task: &TaskId, out: &mut Vec<Command>) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        let Some(t) = self.tasks.submit.owned.get_mut(task) else {
            return;
        };
        t.offered_at_ms = self.now_ms.max(1);
        let mut attempt = t.last_attempt;
        if t.spec.live {
            // Rule 8: offered to another admin before, it may have been placed there.
            let view = (admin.clone(), self.term);
            match &t.first_offered {
                None => t.first_offered = Some(view),
                Some(first) if *first != view => attempt = attempt.max(1),
                Some(_) => {}
            }
        }
        let msg = Message::TaskOffer {
            task: task.clone(),
            spec: t.spec.clone(),
            // A done task is offered only to stop a stray run of it (rule 5).
            cancel: t.cancel || t.phase == TaskPhase::Done,
            attempt,
            unplaceable_ms: t.unplaceable_ms,
        };
        self.deliver(admin, msg, out);
    }

    /// After each step: offer everything again when the admin (or its term) changed.
    pub(crate) fn submitter_after_step(&mut self, out: &mut Vec<Command>) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        let view = Some((admin, self.term));
        if self.tasks.submit.offered_view == view {
            return;
        }
        self.tasks.submit.offered_view = view;
        for task in self.unfinished_tasks() {
            if let Some(t) = self.tasks.submit.owned.get_mut(&task) {
                if t.phase != TaskPhase::Done {
                    t.phase = TaskPhase::Submitted;
                }
            }
            self.offer(&task, out);
        }
    }

    /// The tick: offer what no admin answered, and everything now and then.
    pub(crate) fn submitter_tick(&mut self, out: &mut Vec<Command>) {
        let tick = self.task_tick_ms();
        let now = self.now_ms;
        let due: Vec<TaskId> = self
            .tasks
            .submit
            .owned
            .iter()
            .filter(|(_, t)| {
                let waited = now.saturating_sub(t.offered_at_ms);
                match t.phase {
                    TaskPhase::Done => false,
                    TaskPhase::Submitted => waited >= tick,
                    _ => waited >= tick * REOFFER_TICKS,
                }
            })
            .map(|(id, _)| id.clone())
            .collect();
        for task in due {
            self.offer(&task, out);
        }
    }

    fn unfinished_tasks(&self) -> Vec<TaskId> {
        self.tasks
            .submit
            .owned
            .iter()
            .filter(|(_, t)| t.phase != TaskPhase::Done)
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub(crate) fn submitter_has_pending(&self) -> bool {
        self.tasks.submit.unfinished > 0
    }

    /// The admin says where a task stands.
    pub(crate) fn on_task_state(
        &mut self,
        from: NodeId,
        task: TaskId,
        state: OfferState,
        out: &mut Vec<Command>,
    ) {
        if self.admin.as_ref() != Some(&from) {
            return self.refuse(from, "task_state", Refusal::Unsolicited, out);
        }
        let tick = self.task_tick_ms();
        if let OfferState::Queued {
            pending: Some(Pending::Unplaceable { reason, for_ms }),
        } = &state
        {
            if reason.len() > MAX_PENDING_BYTES || *for_ms > crate::MAX_WIRE_INT {
                return self.refuse(from, "task_state", Refusal::OutOfRange, out);
            }
        }
        if let OfferState::Busy {
            reason: Some(reason),
        } = &state
        {
            if reason.len() > MAX_PENDING_BYTES {
                return self.refuse(from, "task_state", Refusal::OutOfRange, out);
            }
        }
        let Some(t) = self.tasks.submit.owned.get_mut(&task) else {
            return self.refuse(from, "task_state", Refusal::Unsolicited, out);
        };
        if t.phase == TaskPhase::Done {
            // Rule 5: a run of a task whose result is in is stray; have it stopped.
            let due = self.now_ms.saturating_sub(t.offered_at_ms) >= tick;
            if due && matches!(state, OfferState::Placed { .. }) {
                self.offer(&task, out);
            }
            return;
        }
        let name = |w: &NodeId, t: &mut OwnedTask| {
            if !t.workers.contains(w) {
                if t.workers.len() == MAX_NAMED_WORKERS {
                    t.workers.remove(0);
                }
                t.workers.push(w.clone());
            }
        };
        // Rule 7: what the admin says of why it waits; a placement shows a worker could run it.
        match &state {
            OfferState::Queued {
                pending: Some(Pending::Unplaceable { reason, for_ms }),
            } => {
                t.pending = Some(reason.clone());
                t.unplaceable_ms = *for_ms;
            }
            OfferState::Queued {
                pending: Some(Pending::OwnerLimit { limit }),
            } => {
                t.pending = Some(Pending::owner_limit_reason(*limit));
                t.unplaceable_ms = 0;
            }
            OfferState::Busy {
                reason: Some(reason),
            } => {
                t.pending = Some(reason.clone());
            }
            OfferState::Queued {
                pending: Some(Pending::Room),
            }
            | OfferState::Placed { .. }
            | OfferState::Finished { .. } => {
                t.pending = None;
                t.unplaceable_ms = 0;
            }
            OfferState::Queued { pending: None } | OfferState::Busy { .. } => {}
        }
        t.phase = match state {
            OfferState::Queued { .. } => TaskPhase::Queued,
            OfferState::Placed { worker, attempt } => {
                name(&worker, t);
                let heard =
                    matches!(&t.phase, TaskPhase::Placed { attempt: a, .. } if *a == attempt);
                if !heard {
                    t.placed_at_ms = self.now_ms;
                }
                t.last_attempt = t.last_attempt.max(attempt);
                TaskPhase::Placed { worker, attempt }
            }
            OfferState::Finished { worker } => {
                name(&worker, t);
                TaskPhase::Finished { worker }
            }
            // Offered again at the next tick.
            OfferState::Busy { .. } => TaskPhase::Submitted,
        };
    }

    /// A result arrives (from a worker, or from the admin for a task cancelled in its queue).
    pub(crate) fn on_task_result(
        &mut self,
        from: NodeId,
        task: TaskId,
        mut result: TaskResult,
        out: &mut Vec<Command>,
    ) {
        if task.origin != self.id {
            // Another node's task: the admin relays it (`place.rs`, rule 11), or refuses.
            return self.relay_result(from, task, result, out);
        }
        if result.check().is_err() {
            return self.refuse(from, "task_result", Refusal::OutOfRange, out);
        }
        let admin = self.admin.clone();
        // The admin's own results (a task cancelled or ended unschedulable in its queue, a run
        // of its own) name it; any other worker it names, it relays.
        let worker = result.worker.clone();
        let relayed = admin.as_ref() == Some(&from) && worker != from && from != self.id;
        let named = match self.tasks.submit.owned.get(&task) {
            Some(t) if t.phase != TaskPhase::Done => {
                Some(t.workers.contains(&from) || admin.as_ref() == Some(&from) || from == self.id)
            }
            // A copy of a result already in, or of a task done long ago: acknowledged so the
            // worker stops sending it.
            _ => None,
        };
        match named {
            // Not acknowledged: the worker sends it again, and by then the admin will have
            // named it.
            Some(false) => return self.refuse(from, "task_result", Refusal::Unsolicited, out),
            Some(true) => {
                if !relayed {
                    result.worker = from.clone();
                }
                self.complete(&task, result, out);
            }
            None => {}
        }
        let worker = relayed.then_some(worker);
        self.deliver(from, Message::TaskResultAck { task, worker }, out);
    }

    /// Records the result of an unfinished task: done, counted, announced.
    fn complete(&mut self, task: &TaskId, result: TaskResult, out: &mut Vec<Command>) {
        let Some(t) = self.tasks.submit.owned.get_mut(task) else {
            return;
        };
        let status = result.status;
        t.phase = TaskPhase::Done;
        t.pending = None;
        t.result = Some(result);
        t.done_at_ms = self.now_ms;
        self.tasks.submit.unfinished -= 1;
        self.tasks.submit.done.push_back(task.clone());
        out.push(Command::Notice(Notice::TaskCompleted {
            task: task.clone(),
            status,
        }));
        self.forget_old_done_tasks();
    }

    /// At a restart: an unfinished task whose spec fails today's check — one an older build
    /// accepted though its offer could not fit a frame — could never be offered, so would wait
    /// for ever (and could not be cancelled). It ends here, as an error that says why.
    pub(crate) fn submitter_restarted(&mut self, out: &mut Vec<Command>) {
        let unfit: Vec<(TaskId, String)> = self
            .tasks
            .submit
            .owned
            .iter()
            .filter(|(_, t)| t.phase != TaskPhase::Done)
            .filter_map(|(id, t)| t.spec.check().err().map(|e| (id.clone(), e.0)))
            .collect();
        for (task, why) in unfit {
            let mut result = TaskResult::without_run(TaskStatus::Error, self.id.clone(), 1);
            result.error = Some(format!("submitter: the task can never be offered: {why}"));
            super::wire::fit_result(&mut result);
            self.complete(&task, result, out);
        }
    }

    fn forget_old_done_tasks(&mut self) {
        let s = &mut self.tasks.submit;
        while s.done.len() > MAX_DONE_TASKS {
            if let Some(old) = s.done.pop_front() {
                if let Some(t) = s.owned.remove(&old) {
                    if let Some(k) = t.key {
                        s.keys.remove(&k);
                    }
                }
            }
        }
    }

    /// Counts of owned tasks by phase name, and done ones by status (for metrics).
    pub fn task_counts(&self) -> (BTreeMap<&'static str, u64>, BTreeMap<TaskStatus, u64>) {
        let mut phases = BTreeMap::new();
        let mut statuses = BTreeMap::new();
        for t in self.tasks.submit.owned.values() {
            *phases.entry(t.phase.as_str()).or_insert(0) += 1;
            if let Some(r) = &t.result {
                *statuses.entry(r.status).or_insert(0) += 1;
            }
        }
        (phases, statuses)
    }
}
