//! Operator requests into the runtime loop (`POST /members`, `POST /tasks`, `DELETE
//! /tasks/{id}`): where they go in, the request ids they carry, and who waits for which answer.
//!
//! A request is an event handed to the loop, so it is logged and replayed like every other
//! input. The core's notices about it carry its request id back; [`OperatorInputs::deliver`]
//! hands each to the request waiting for it. Request ids start from the wall clock at start, so
//! an answer to a request of an earlier run of this node never settles a new one.

use std::collections::BTreeMap;

use chorus_core::{ChangeOutcome, Event, Notice, TaskId};
use tokio::sync::{mpsc, oneshot};

/// The operator side of the runtime loop: where changes go in, and who waits for their
/// outcome.
#[derive(Debug)]
pub struct OperatorInputs {
    /// Events for the runtime loop.
    pub tx: mpsc::Sender<Event>,
    /// The next request id.
    pub next_request: u64,
    /// Open requests: the outcomes of each are sent here until it settles.
    pub waiters: BTreeMap<u64, mpsc::UnboundedSender<ChangeOutcome>>,
    /// Open task requests (submit, cancel): the core's answer is sent here.
    pub task_waiters: TaskWaiters,
    /// Open handover requests (`POST /members/transfer`): the core's answer is sent here.
    pub handover_waiters: BTreeMap<u64, oneshot::Sender<HandoverAnswer>>,
}

impl OperatorInputs {
    /// Inputs into `tx`, with request ids starting at `first_request` (nonzero).
    pub fn new(tx: mpsc::Sender<Event>, first_request: u64) -> Self {
        OperatorInputs {
            tx,
            next_request: first_request.max(1),
            waiters: BTreeMap::new(),
            task_waiters: BTreeMap::new(),
            handover_waiters: BTreeMap::new(),
        }
    }

    /// Hands a notice to the request waiting for it: a membership change's outcome (a settled
    /// request stops waiting) or the core's answer to a task request.
    pub fn deliver(&mut self, notice: &Notice) {
        self.deliver_change_outcome(notice);
        self.deliver_task_answer(notice);
        self.deliver_handover_answer(notice);
    }

    fn deliver_handover_answer(&mut self, notice: &Notice) {
        let (request, answer) = match notice {
            Notice::HandingOver {
                request,
                target,
                term,
            } => (
                *request,
                HandoverAnswer::Started {
                    term: *term,
                    target: target.clone(),
                },
            ),
            Notice::HandoverRefused {
                request,
                reason,
                admin,
            } => (
                *request,
                HandoverAnswer::Refused {
                    reason: *reason,
                    admin: admin.clone(),
                },
            ),
            _ => return,
        };
        if request == 0 {
            return;
        }
        if let Some(waiter) = self.handover_waiters.remove(&request) {
            let _ = waiter.send(answer);
        }
    }

    fn deliver_change_outcome(&mut self, notice: &Notice) {
        let Notice::MembershipChange {
            outcome, request, ..
        } = notice
        else {
            return;
        };
        if *request == 0 {
            return;
        }
        let Some(waiter) = self.waiters.get(request) else {
            return;
        };
        let gone = waiter.send(outcome.clone()).is_err();
        if gone || settles(outcome) {
            self.waiters.remove(request);
        }
    }

    fn deliver_task_answer(&mut self, notice: &Notice) {
        let (request, answer) = match notice {
            Notice::TaskSubmitted {
                task,
                request,
                existing,
            } => (
                *request,
                TaskAnswer::Submitted {
                    task: task.clone(),
                    existing: *existing,
                },
            ),
            Notice::TaskCancelRequested { request, .. } => (*request, TaskAnswer::CancelRequested),
            Notice::TaskRefused { request, reason } => (
                *request,
                TaskAnswer::Refused {
                    reason: reason.clone(),
                },
            ),
            _ => return,
        };
        if request == 0 {
            return;
        }
        if let Some(waiter) = self.task_waiters.remove(&request) {
            // The asker may have given up: nothing to do then.
            let _ = waiter.send(answer);
        }
    }
}

/// A first request id for this run: the wall clock in microseconds, kept below 2⁵³ so that
/// any JSON reader holds it exactly.
pub fn first_request_id() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64);
    (micros % (1 << 52)).max(1)
}

/// Whether an outcome is final for the operator who asked.
fn settles(outcome: &ChangeOutcome) -> bool {
    matches!(
        outcome,
        ChangeOutcome::Committed { .. } | ChangeOutcome::Refused { .. }
    )
}

/// The core's answer to a task request.
#[derive(Debug)]
pub enum TaskAnswer {
    /// Accepted (or, for a known idempotency key, the task it made).
    Submitted {
        /// The task.
        task: TaskId,
        /// The key named an earlier task.
        existing: bool,
    },
    /// Cancellation was asked for.
    CancelRequested,
    /// Refused, with the core's reason.
    Refused {
        /// Why.
        reason: String,
    },
}

/// The core's answer to a handover request.
#[derive(Debug)]
pub enum HandoverAnswer {
    /// The admin stepped down from `term` and asked `target` to stand.
    Started {
        /// The term left.
        term: u64,
        /// The voter asked (none: no voter was up to date).
        target: Option<chorus_core::NodeId>,
    },
    /// Refused.
    Refused {
        /// Why.
        reason: chorus_core::HandoverRefusal,
        /// The admin this node follows, when it is not the admin.
        admin: Option<chorus_core::NodeId>,
    },
}

/// Open task requests, by request id.
pub type TaskWaiters = BTreeMap<u64, oneshot::Sender<TaskAnswer>>;
