//! The worker: runs what the admin places on it and keeps each result until its submitter
//! acknowledges it.
//!
//! Rules:
//! 1. A placement counts only from the admin this node follows, in this node's term.
//! 2. A task already running (or finished and unacknowledged) here is not started twice: the
//!    worker only reports. A task that does not fit (no free slot, a capability missing) is not
//!    started either; the report tells the admin, which places it elsewhere.
//! 3. A run's end becomes a result: cancelled (the admin asked), timed out, out of memory,
//!    succeeded (exit 0) or failed. A retryable sandbox failure before the last attempt is given
//!    back to the admin (placed again after a backoff); otherwise it is an error result.
//! 4. Results are durable and sent to the submitter every tick until acknowledged. A result
//!    always fits its frame: its output tails are cut, from the front, until it does, and say
//!    how much was cut (`task/wire.rs`). One still unacknowledged after [`RELAY_AFTER_TICKS`]
//!    ticks goes to the admin too, which relays it (`place.rs`, rule 11): a worker that cannot
//!    reach the submitter (no route, a firewall, an address it never learnt) still delivers.
//!    An acknowledgement counts from the submitter, or from the admin this node follows (a
//!    relayed one).
//! 5. A restart ends every run the log says was going (the runtime reaps the containers): each
//!    counts as a retryable failure. Results held across it are fitted again (one an older
//!    build kept may not fit).
//! 6. The worker reports (slots, runs, finished tasks — unacknowledged results and the latest
//!    acknowledged ones —, the last placement seen) to its
//!    admin when the admin or its term changes, when its runs change, when a connection to
//!    the admin comes up after it reported there (that report may have left before the
//!    connection and been lost: a joining worker was otherwise unknown to the admin for
//!    [`REPORT_EVERY_BEATS`] beats, issue 54), and every [`REPORT_EVERY_BEATS`] beats.
//! 7. A report fits its frame, measured on the encoded bytes: its lists take at most
//!    [`MAX_REPORT_LISTS_WIRE_BYTES`] together. When they do not fit (up to 1,024 runs, 1,024
//!    finished tasks and 1,024 released placements: ~70 bytes each with ordinary peer ids,
//!    ~200 KB in all, and ~600 with the widest ids), the report takes entries from each list in
//!    turn — so a long
//!    list cannot crowd out the others — and says it is `partial`; the next one goes on from
//!    where each list was cut (round each list), and follow-ups go out every tick until every
//!    entry of the round has been reported once. The admin does not take a placement a
//!    partial report leaves out for lost.
//! 8. A live sandbox (`TaskSpec::live`, §4.8) is never given back once its placement was
//!    taken: a sandbox failure ends it with an error result, and a restart ends it `lost` —
//!    its owner may have been told where it is, and a second one made behind its back (what
//!    the admin would do with a run given back) is what §4.8 forbids. A placement refused for
//!    want of a slot is still given back: no sandbox was made.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::wire::{fit_result, MAX_REPORT_LISTS_WIRE_BYTES};
use super::{SandboxExit, SharedSpec, TaskId, TaskResult, TaskStatus, MAX_ATTEMPTS};
use crate::codec::encoded_len;
use crate::{Command, Core, Message, NodeId, Notice, Refusal};

/// A worker reports at least this often, in beats.
pub(crate) const REPORT_EVERY_BEATS: u64 = 4;

/// At most this many runs or results in one report (and slots a worker may claim).
pub const MAX_REPORTED: usize = 1_024;

/// Unacknowledged results resent per tick.
const RESENDS_PER_TICK: usize = 64;

/// A result unacknowledged at this many ticks is also sent to the admin to relay (rule 4): by
/// then the submitter had a whole tick to answer, so a reachable one rarely costs a relay.
pub(crate) const RELAY_AFTER_TICKS: u32 = 2;

/// A run in progress here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningTask {
    /// Which run.
    pub attempt: u32,
    /// What runs.
    pub spec: SharedSpec,
    /// When it started (this node's clock).
    pub started_at_ms: u64,
    /// The admin asked to cancel it; the sandbox is being stopped.
    #[serde(default)]
    pub stopping: bool,
}

/// The worker's part of a node's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerTasks {
    /// Runs in progress.
    pub(crate) running: BTreeMap<TaskId, RunningTask>,
    /// Results not yet acknowledged by their submitters.
    pub(crate) results: BTreeMap<TaskId, TaskResult>,
    /// The highest placement number seen from the admin of term `.0` (volatile).
    pub(crate) seen: (u64, u64),
    /// A report is owed to the admin (volatile).
    pub(crate) report_due: bool,
    /// The (admin, term) last reported to, and the beat of that report (volatile).
    pub(crate) reported: Option<(NodeId, u64, u64)>,
    /// Tasks whose results were acknowledged lately, newest last: still reported as finished,
    /// so an admin that missed the result does not take the task for lost (volatile).
    pub(crate) acked: VecDeque<TaskId>,
    /// Placements refused or given back lately, by task and attempt, newest last: reported so
    /// the admin places them again (volatile).
    pub(crate) released: VecDeque<(TaskId, u32)>,
    /// Where the last report cut each of its lists, when they did not fit one frame: the next
    /// report goes on from there (rule 7; volatile).
    #[serde(default, skip_serializing_if = "ReportCursor::is_start")]
    pub(crate) cursor: ReportCursor,
    /// Ticks each unacknowledged result has been resent at (rule 4; volatile).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) resent: BTreeMap<TaskId, u32>,
}

/// Where the next report starts each of its lists (rule 7): after the last entry the previous
/// report took of it (`None`: from the start, as the previous one took the whole list).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReportCursor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    running: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    results: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acked: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    released: Option<(TaskId, u32)>,
    /// Entries of each list (running, released, results, acknowledged) not reported yet in
    /// the round the first cut report began: a follow-up report goes out each tick while any
    /// list has some.
    #[serde(default, skip_serializing_if = "no_round")]
    left: [usize; 4],
}

fn no_round(left: &[usize; 4]) -> bool {
    left.iter().all(|n| *n == 0)
}

impl ReportCursor {
    fn is_start(&self) -> bool {
        *self == ReportCursor::default()
    }

    /// A round of reports is under way: the rest goes out at the next tick.
    pub(crate) fn more(&self) -> bool {
        !no_round(&self.left)
    }
}

/// `items` from just after `after` (when it is among them; else from the start), round to the
/// start.
fn rotated<T: PartialEq + Clone>(items: impl Iterator<Item = T>, after: Option<&T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    if let Some(i) = after.and_then(|a| v.iter().position(|x| x == a)) {
        v.rotate_left(i + 1);
    }
    v
}

/// The greatest key of `map` at or before `cursor`.
fn at_or_before<V>(map: &BTreeMap<TaskId, V>, cursor: Option<&TaskId>) -> Option<TaskId> {
    cursor.and_then(|t| map.range(..=t).next_back().map(|(k, _)| k.clone()))
}

/// A report's lists, cut to fit a frame (rule 7).
pub(crate) struct ReportLists {
    pub(crate) running: Vec<(TaskId, u32)>,
    pub(crate) finished: Vec<TaskId>,
    pub(crate) released: Vec<(TaskId, u32)>,
    pub(crate) partial: bool,
}

impl WorkerTasks {
    /// The lists of the next report: from each list in turn, one entry at a time, from where
    /// the last report cut it, while they fit [`MAX_REPORT_LISTS_WIRE_BYTES`] encoded (and
    /// [`MAX_REPORTED`] a list). Moves the cursor on.
    pub(crate) fn report_lists(&mut self) -> ReportLists {
        let c = &self.cursor;
        // A run or result named by the cursor may be gone since: its list goes on after the
        // entry that sorts just before it.
        let running = rotated(
            self.running.iter().map(|(t, r)| (t.clone(), r.attempt)),
            at_or_before(&self.running, c.running.as_ref())
                .map(|t| (t.clone(), self.running[&t].attempt))
                .as_ref(),
        );
        let results = rotated(
            self.results.keys().cloned(),
            at_or_before(&self.results, c.results.as_ref()).as_ref(),
        );
        // Newest first: an admin that missed a result hears of the latest acknowledgements.
        let acked = rotated(self.acked.iter().rev().cloned(), c.acked.as_ref());
        let released = rotated(self.released.iter().cloned(), c.released.as_ref());

        let lens = [running.len(), released.len(), results.len(), acked.len()];
        let mut taken = [0usize; 4];
        let mut open = [true; 4];
        let mut budget = MAX_REPORT_LISTS_WIRE_BYTES;
        while open.iter().any(|o| *o) {
            for k in 0..4 {
                if !open[k] {
                    continue;
                }
                let i = taken[k];
                let full = match k {
                    2 | 3 => taken[2] + taken[3] >= MAX_REPORTED,
                    _ => i >= MAX_REPORTED,
                };
                if i >= lens[k] || full {
                    open[k] = false;
                    continue;
                }
                // The entry and the comma before it.
                let cost = 1 + match k {
                    0 => encoded_len(&running[i]),
                    1 => encoded_len(&released[i]),
                    2 => encoded_len(&results[i]),
                    _ => encoded_len(&acked[i]),
                };
                if cost > budget {
                    open[k] = false;
                    continue;
                }
                budget -= cost;
                taken[k] += 1;
            }
        }
        let partial = taken != lens;
        // Where each list goes on next time: after its last entry taken, or from the start
        // when it was taken whole (and where it was when none of it was).
        fn next<T, K: Clone>(
            list: &[T],
            taken: usize,
            old: &Option<K>,
            key: impl Fn(&T) -> K,
        ) -> Option<K> {
            if taken == list.len() {
                None
            } else if taken == 0 {
                old.clone()
            } else {
                Some(key(&list[taken - 1]))
            }
        }
        let mut left = [0; 4];
        if partial {
            let fresh = !c.more();
            for k in 0..4 {
                left[k] = if fresh { lens[k] } else { c.left[k] }.saturating_sub(taken[k]);
            }
        }
        self.cursor = ReportCursor {
            running: next(&running, taken[0], &c.running, |(t, _)| t.clone()),
            released: next(&released, taken[1], &c.released, Clone::clone),
            results: next(&results, taken[2], &c.results, Clone::clone),
            acked: next(&acked, taken[3], &c.acked, Clone::clone),
            left,
        };
        let mut finished = results;
        finished.truncate(taken[2]);
        finished.extend(acked.into_iter().take(taken[3]));
        ReportLists {
            running: running.into_iter().take(taken[0]).collect(),
            finished,
            released: released.into_iter().take(taken[1]).collect(),
            partial,
        }
    }
}

impl WorkerTasks {
    fn release(&mut self, task: TaskId, attempt: u32) {
        if self.released.len() == MAX_REPORTED {
            self.released.pop_front();
        }
        self.released.push_back((task, attempt));
        self.report_due = true;
    }
}

impl Core {
    /// Runs in progress on this node.
    pub fn running_tasks(&self) -> &BTreeMap<TaskId, RunningTask> {
        &self.tasks.work.running
    }

    /// Results this node holds until their submitters acknowledge them.
    pub fn unacknowledged_results(&self) -> &BTreeMap<TaskId, TaskResult> {
        &self.tasks.work.results
    }

    /// Task slots this node offers (from its sampled resources).
    pub fn task_slots(&self) -> u32 {
        self.resources.task_slots
    }

    pub(crate) fn on_task_place(
        &mut self,
        from: NodeId,
        term: u64,
        placement: (TaskId, u32, u64),
        spec: SharedSpec,
        out: &mut Vec<Command>,
    ) {
        let (task, attempt, seq) = placement;
        if let Err(r) = self.check_my_admin(&from, term) {
            return self.refuse(from, "task_place", r, out);
        }
        if spec.check().is_err() || attempt == 0 {
            return self.refuse(from, "task_place", Refusal::OutOfRange, out);
        }
        let w = &mut self.tasks.work;
        w.seen = if w.seen.0 == term {
            (term, w.seen.1.max(seq))
        } else {
            (term, seq)
        };
        w.report_due = true;
        if w.running.contains_key(&task) || w.results.contains_key(&task) {
            return;
        }
        let free = (self.resources.task_slots as usize).saturating_sub(w.running.len());
        if free == 0 || !spec.fits(&self.capabilities) {
            w.release(task, attempt);
            return;
        }
        w.running.insert(
            task.clone(),
            RunningTask {
                attempt,
                spec: spec.clone(),
                started_at_ms: self.now_ms,
                stopping: false,
            },
        );
        let live = spec.live;
        out.push(Command::StartSandbox {
            task: task.clone(),
            attempt,
            spec,
        });
        out.push(Command::Notice(Notice::TaskStarted {
            task,
            attempt,
            live,
        }));
    }

    pub(crate) fn on_task_cancel(
        &mut self,
        from: NodeId,
        term: u64,
        task: TaskId,
        out: &mut Vec<Command>,
    ) {
        if let Err(r) = self.check_my_admin(&from, term) {
            return self.refuse(from, "task_cancel", r, out);
        }
        if let Some(run) = self.tasks.work.running.get_mut(&task) {
            if !run.stopping {
                run.stopping = true;
                out.push(Command::StopSandbox {
                    task,
                    attempt: run.attempt,
                });
            }
        }
    }

    /// Placements and cancellations count only from the admin of this node's term.
    fn check_my_admin(&self, from: &NodeId, term: u64) -> Result<(), Refusal> {
        if term < self.term {
            Err(Refusal::Stale)
        } else if term > self.term || self.admin.as_ref() != Some(from) {
            Err(Refusal::Unsolicited)
        } else {
            Ok(())
        }
    }

    pub(crate) fn on_sandbox_exited(
        &mut self,
        task: TaskId,
        attempt: u32,
        exit: SandboxExit,
        out: &mut Vec<Command>,
    ) {
        let Some(run) = self.take_run(&task, attempt) else {
            return;
        };
        let status = if run.stopping {
            TaskStatus::Cancelled
        } else if exit.timed_out {
            TaskStatus::TimedOut
        } else if exit.oom {
            TaskStatus::OutOfMemory
        } else if exit.exit_code == Some(0) && exit.signal.is_none() {
            TaskStatus::Succeeded
        } else {
            TaskStatus::Failed
        };
        let mut result = TaskResult {
            status,
            exit_code: exit.exit_code,
            signal: exit.signal,
            worker: self.id.clone(),
            attempt,
            duration_ms: exit.duration_ms.min(crate::MAX_WIRE_INT),
            usage: exit.usage,
            stdout: exit.stdout,
            stderr: exit.stderr,
            stdout_truncated_bytes: exit.stdout_truncated_bytes,
            stderr_truncated_bytes: exit.stderr_truncated_bytes,
            error: None,
            timings: exit.timings.clamped(crate::MAX_WIRE_INT),
        };
        fit_result(&mut result);
        self.finish(task, result, out);
    }

    pub(crate) fn on_sandbox_failed(
        &mut self,
        task: TaskId,
        attempt: u32,
        error: String,
        retryable: bool,
        out: &mut Vec<Command>,
    ) {
        let Some(run) = self.take_run(&task, attempt) else {
            return;
        };
        // A live sandbox is never given back to be made again (rule 8): its owner may have
        // been told it exists, and a second one behind its back is what §4.8 forbids.
        let retryable = retryable && !run.spec.live;
        self.run_failed(task, attempt, run.stopping, error, retryable, out);
    }

    fn run_failed(
        &mut self,
        task: TaskId,
        attempt: u32,
        stopping: bool,
        error: String,
        retryable: bool,
        out: &mut Vec<Command>,
    ) {
        if retryable && !stopping && attempt < MAX_ATTEMPTS {
            // Given back: the report says so, and the admin places it again after a backoff.
            self.tasks.work.release(task.clone(), attempt);
            out.push(Command::Notice(Notice::TaskFinished {
                task,
                attempt,
                status: None,
                error: Some(error),
            }));
            return;
        }
        let status = if stopping {
            TaskStatus::Cancelled
        } else {
            TaskStatus::Error
        };
        let mut result = TaskResult::without_run(status, self.id.clone(), attempt);
        if status == TaskStatus::Error {
            result.error = Some(error);
        }
        fit_result(&mut result);
        self.finish(task, result, out);
    }

    fn take_run(&mut self, task: &TaskId, attempt: u32) -> Option<RunningTask> {
        let w = &mut self.tasks.work;
        if w.running.get(task).map(|r| r.attempt) != Some(attempt) {
            return None; // a stale exit (an earlier run, or a run this node forgot)
        }
        w.report_due = true;
        w.running.remove(task)
    }

    fn finish(&mut self, task: TaskId, result: TaskResult, out: &mut Vec<Command>) {
        out.push(Command::Notice(Notice::TaskFinished {
            task: task.clone(),
            attempt: result.attempt,
            status: Some(result.status),
            error: result.error.clone(),
        }));
        self.tasks.work.results.insert(task.clone(), result.clone());
        self.tasks.work.report_due = true;
        self.send_result(task, result, out);
    }

    /// Sends `task`'s result to its submitter (again, until acknowledged).
    fn send_result(&mut self, task: TaskId, result: TaskResult, out: &mut Vec<Command>) {
        let origin = task.origin.clone();
        let result = Box::new(result);
        self.deliver(origin, Message::TaskResult { task, result }, out);
    }

    pub(crate) fn on_task_result_ack(
        &mut self,
        from: NodeId,
        task: TaskId,
        worker: Option<NodeId>,
        out: &mut Vec<Command>,
    ) {
        let relayed = self.admin.as_ref() == Some(&from) && worker.is_none();
        if task.origin != from && !relayed {
            return self.refuse(from, "task_result_ack", Refusal::NotOwner, out);
        }
        // The submitter acknowledges a result the admin relayed to the admin, naming whose.
        if let Some(worker) = worker.filter(|w| *w != self.id) {
            return self.relay_ack(from, task, worker, out);
        }
        let w = &mut self.tasks.work;
        w.resent.remove(&task);
        if w.results.remove(&task).is_some() {
            if w.acked.len() == MAX_REPORTED {
                w.acked.pop_front();
            }
            w.acked.push_back(task);
        }
    }

    /// A restart ended every run this node had going: each is a retryable failure.
    pub(crate) fn worker_restarted(&mut self, out: &mut Vec<Command>) {
        let w = &mut self.tasks.work;
        w.seen = (0, 0);
        w.report_due = false;
        w.reported = None;
        w.acked.clear();
        w.released.clear();
        w.cursor = ReportCursor::default();
        w.results.values_mut().for_each(fit_result);
        let runs = std::mem::take(&mut w.running);
        for (task, run) in runs {
            if run.spec.live && !run.stopping {
                // Rule 8: the restart removed it; it is lost, not made again.
                let why = "worker: the node restarted and its live sandboxes with it";
                let result = TaskResult::lost(self.id.clone(), run.attempt, why.into());
                self.finish(task, result, out);
                continue;
            }
            self.run_failed(
                task,
                run.attempt,
                run.stopping,
                "worker: the node restarted while the task ran".into(),
                true,
                out,
            );
        }
    }

    /// A connection to the admin this node follows came up: a report sent to it before (by
    /// request-response, perhaps to an address it could not dial) may be lost, so the next
    /// step reports again (rule 6) — once per connection. A node that never reported to
    /// this admin reports anyway (rule 6), or has nothing to say.
    pub(crate) fn worker_admin_connected(&mut self) {
        let w = &mut self.tasks.work;
        if w.reported
            .as_ref()
            .is_some_and(|(a, _, _)| self.admin.as_ref() == Some(a))
        {
            w.report_due = true;
        }
    }

    /// The tick: send every unacknowledged result again, and the rest of a report that did
    /// not fit one frame (rule 7).
    pub(crate) fn worker_tick(&mut self, out: &mut Vec<Command>) {
        if self.tasks.work.cursor.more() {
            self.tasks.work.report_due = true;
        }
        let w = &mut self.tasks.work;
        let results = &w.results;
        w.resent.retain(|t, _| results.contains_key(t));
        let resend: Vec<(TaskId, TaskResult)> = results
            .iter()
            .take(RESENDS_PER_TICK)
            .map(|(t, r)| (t.clone(), r.clone()))
            .collect();
        for (task, result) in resend {
            let ticks = self.tasks.work.resent.entry(task.clone()).or_insert(0);
            *ticks = ticks.saturating_add(1);
            let relay = *ticks >= RELAY_AFTER_TICKS;
            // Rule 4: through the admin too, unless it is the submitter or this node.
            let admin = self
                .admin
                .clone()
                .filter(|a| relay && *a != task.origin && *a != self.id);
            if let Some(admin) = admin {
                let msg = Message::TaskResult {
                    task: task.clone(),
                    result: Box::new(result.clone()),
                };
                self.deliver(admin, msg, out);
            }
            self.send_result(task, result, out);
        }
    }

    pub(crate) fn worker_has_pending(&self) -> bool {
        !self.tasks.work.results.is_empty() || self.tasks.work.cursor.more()
    }

    /// After each step: report to the admin when something changed or a report is due.
    pub(crate) fn worker_after_step(&mut self, out: &mut Vec<Command>) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        let w = &self.tasks.work;
        // A node without slots reports only when something changed (its slots went to 0, or
        // a placement it could not take): the admin must hear it.
        let active = self.resources.task_slots > 0
            || w.report_due
            || !w.running.is_empty()
            || !w.results.is_empty();
        if !active {
            return;
        }
        let due = match &w.reported {
            Some((a, term, beat)) => {
                w.report_due
                    || *a != admin
                    || *term != self.term
                    || self.beat >= beat.saturating_add(REPORT_EVERY_BEATS)
            }
            None => true,
        };
        if !due {
            return;
        }
        let w = &mut self.tasks.work;
        w.report_due = false;
        if w.reported
            .as_ref()
            .is_none_or(|(a, term, _)| *a != admin || *term != self.term)
        {
            // A new admin hears everything from the start (rule 7).
            w.cursor = ReportCursor::default();
        }
        w.reported = Some((admin.clone(), self.term, self.beat));
        // Unacknowledged results first, then the latest acknowledged ones; cut to fit a frame.
        let lists = w.report_lists();
        let msg = Message::WorkerReport {
            term: self.term,
            seen: if w.seen.0 == self.term { w.seen.1 } else { 0 },
            slots: self.resources.task_slots.min(MAX_REPORTED as u32),
            capacity: self.resources.task_capacity,
            running: lists.running,
            finished: lists.finished,
            released: lists.released,
            partial: lists.partial,
        };
        self.deliver(admin, msg, out);
    }
}
