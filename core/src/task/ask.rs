//! Cancels asked for at a node that does not own the task: its origin is out of reach (down,
//! or cut off), so the operator asks another node (docs/tasks.md, "A down node's tasks").
//!
//! Ownership does not pass on. The origin alone ever ends its task (takes its result), so a
//! cancel asked elsewhere can only stop the run and make sure the origin ends the task as
//! cancelled once it is back; it cannot give the task a second result (invariant 7).
//!
//! Rules:
//! 1. A cancel asked at this node for another node's task is kept (durable: a fold of the
//!    log), up to [`MAX_ASKS`], for at most [`ASK_TTL_MS`]. The node's API asks only for an
//!    `operate` token, and only while the origin is out of reach (else the client asks there).
//! 2. While kept, it goes every tick to the task's origin when this node is connected to it.
//!    The origin cancels as if asked at its own API (`submit.rs`: a queued task ends
//!    cancelled, a placed one is stopped through the admin) and answers `task_cancel_asked`,
//!    for any task, known or not, finished or not: that answer ends the ask.
//! 3. It also goes to the admin of the moment: at once, whenever the (admin, term) this node
//!    follows changes, and every [`super::submit::REOFFER_TICKS`] ticks. The admin stops a
//!    placed run (`task_cancel` to its worker, whose `cancelled` result waits for the origin
//!    like any other), drops the task from its queue, and remembers it (volatile, up to 4,096)
//!    so that the origin's next offer — made when it is back, before this ask reached it — is
//!    answered with a `cancelled` result rather than a placement (`place.rs`, rule 12).
//! 4. A run that ends anyway (it finished before the cancel reached its worker) keeps its
//!    result: a cancel is a request, as it is at the origin's own API.
//!
//! Any admitted node may ask, as any may offer, report or relay: the operator's authority is
//! checked by the API of the node asked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::submit::REOFFER_TICKS;
use super::TaskId;
use crate::{Command, Core, Message, NodeId, Notice, Refusal, Role};

/// Cancels one node keeps for other nodes' tasks at once; one more is refused.
pub const MAX_ASKS: usize = 1_024;

/// How long a cancel is kept for an origin that never answers (a day: the longest timeout).
pub const ASK_TTL_MS: u64 = super::bounds::TIMEOUT_MS;

/// Tasks an admin remembers as cancelled by another node's ask (rule 3).
pub(crate) const MAX_ASKED_AT_ADMIN: usize = 4_096;

/// One cancel kept for another node's task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    /// When it was asked (this node's clock).
    pub at_ms: u64,
    /// When it last went to the admin (volatile in effect: rule 3 sends it again on a new view).
    #[serde(default)]
    pub sent_ms: u64,
}

/// The cancels this node keeps for tasks other nodes own (durable).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelAsks {
    pub(crate) asks: BTreeMap<TaskId, Ask>,
    /// The (admin, term) every ask was last sent to (volatile: cleared by a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sent_view: Option<(NodeId, u64)>,
}

impl CancelAsks {
    pub(crate) fn is_empty(&self) -> bool {
        self.asks.is_empty()
    }
}

impl Core {
    /// Cancels this node keeps for other nodes' tasks (rule 1).
    pub fn cancel_asks(&self) -> &BTreeMap<TaskId, Ask> {
        &self.tasks.asks.asks
    }

    /// Rule 1: a user asks here to cancel a task another node owns.
    pub(crate) fn on_cancel_foreign(&mut self, task: TaskId, request: u64, out: &mut Vec<Command>) {
        let asks = &mut self.tasks.asks.asks;
        if !asks.contains_key(&task) && asks.len() >= MAX_ASKS {
            let reason = format!(
                "this node already holds {MAX_ASKS} cancels for other nodes' tasks; ask again \
                 once their nodes are back"
            );
            return out.push(Command::Notice(Notice::TaskRefused { request, reason }));
        }
        let now = self.now_ms;
        asks.entry(task.clone()).or_insert(Ask {
            at_ms: now,
            sent_ms: 0,
        });
        out.push(Command::Notice(Notice::TaskCancelRequested {
            task: task.clone(),
            request,
        }));
        // Under a view the asks have not gone to yet, `asks_after_step` sends them all.
        let view = self.admin.clone().map(|a| (a, self.term));
        if view.is_none() || self.tasks.asks.sent_view == view {
            self.send_ask(&task, out);
        }
    }

    /// Rules 2 and 3: sends the ask to the origin (when connected) and the admin (if known).
    fn send_ask(&mut self, task: &TaskId, out: &mut Vec<Command>) {
        let now = self.now_ms;
        let admin = self.admin.clone();
        if let Some(ask) = self.tasks.asks.asks.get_mut(task) {
            if admin.is_some() {
                ask.sent_ms = now.max(1);
            }
        }
        if self.peers.contains(&task.origin) {
            let msg = Message::TaskCancelAsk { task: task.clone() };
            out.push(Command::Send {
                to: task.origin.clone(),
                msg,
            });
        }
        if let Some(admin) = admin.filter(|a| *a != task.origin) {
            self.deliver(admin, Message::TaskCancelAsk { task: task.clone() }, out);
        }
    }

    /// After each step (rule 3): every ask goes to a new admin at once.
    pub(crate) fn asks_after_step(&mut self, out: &mut Vec<Command>) {
        if self.tasks.asks.asks.is_empty() {
            return;
        }
        let view = self.admin.clone().map(|a| (a, self.term));
        if view.is_none() || self.tasks.asks.sent_view == view {
            return;
        }
        self.tasks.asks.sent_view = view;
        let all: Vec<TaskId> = self.tasks.asks.asks.keys().cloned().collect();
        for task in all {
            self.send_ask(&task, out);
        }
    }

    /// The tick (rules 1–3): forget asks past their time; send again to origins now reached,
    /// and to the admin every re-offer period.
    pub(crate) fn asks_tick(&mut self, out: &mut Vec<Command>) {
        if self.tasks.asks.asks.is_empty() {
            return;
        }
        let now = self.now_ms;
        self.tasks
            .asks
            .asks
            .retain(|_, a| now.saturating_sub(a.at_ms) < ASK_TTL_MS);
        let every = self.task_tick_ms() * REOFFER_TICKS;
        let origin_up = |t: &TaskId| self.peers.contains(&t.origin);
        let due: Vec<TaskId> = self
            .tasks
            .asks
            .asks
            .iter()
            .filter(|(t, a)| origin_up(t) || now.saturating_sub(a.sent_ms) >= every)
            .map(|(t, _)| t.clone())
            .collect();
        for task in due {
            self.send_ask(&task, out);
        }
    }

    pub(crate) fn asks_pending(&self) -> bool {
        !self.tasks.asks.asks.is_empty()
    }

    /// A `task_cancel_ask` arrives: at the task's origin (rule 2) or at the admin (rule 3).
    pub(crate) fn on_task_cancel_ask(
        &mut self,
        from: NodeId,
        task: TaskId,
        out: &mut Vec<Command>,
    ) {
        if task.origin == self.id {
            // Once: the asker sends again until it hears back.
            if self
                .owned_tasks()
                .get(&task)
                .is_some_and(|t| t.phase != super::TaskPhase::Done && !t.cancel)
            {
                self.on_cancel_task(task.clone(), 0, out);
            }
            return self.deliver(from, Message::TaskCancelAsked { task }, out);
        }
        if self.role != Role::Admin {
            // Sent again to the admin the asker follows next.
            return self.refuse(from, "task_cancel_ask", Refusal::Stale, out);
        }
        self.admin_cancel_asked(task, out);
    }

    /// The origin has the cancel (rule 2): the ask ends.
    pub(crate) fn on_task_cancel_asked(
        &mut self,
        from: NodeId,
        task: TaskId,
        out: &mut Vec<Command>,
    ) {
        if from != task.origin {
            return self.refuse(from, "task_cancel_asked", Refusal::NotOwner, out);
        }
        self.tasks.asks.asks.remove(&task);
    }
}
