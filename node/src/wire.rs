//! The JSON documents of the HTTP API that both sides read: the server (`api/`) builds them,
//! the command line (`cli/`) parses them — one definition, so the two cannot drift apart.

use chorus_core::{TaskResult, TaskSpec, TaskStatus};
use serde::{Deserialize, Serialize};

/// One node in `GET /members`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemberRow {
    /// The node.
    pub node_id: String,
    /// `voter` (a member of the electorate) or `standby` (admin-eligible, not a member).
    pub role: String,
    /// The admin of the answering node's term.
    pub admin: bool,
    /// Connected to the answering node (always true for itself).
    pub reachable: bool,
    /// Milliseconds since the answering node last heard from it (0 for itself).
    pub last_contact_ms: Option<u64>,
    /// Its score as the answering node computes it (uptime, capabilities, free resources).
    pub score: Option<u32>,
}

/// The `GET /members` document.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MembersView {
    /// The node answering.
    pub node_id: String,
    /// Its term and the admin it follows.
    pub term: u64,
    pub admin: Option<String>,
    /// The electorate's version and the term that proposed it (0 at bootstrap); 0 and 0
    /// before the cluster formed.
    pub version: u64,
    pub version_term: u64,
    /// Voters first, then standbys, each in id order.
    pub members: Vec<MemberRow>,
    /// Nodes an operator removed (`members remove`, `leave`), oldest first: autopilot leaves
    /// them out until an operator adds them back.
    #[serde(default)]
    pub removed: Vec<String>,
}

/// A task as `GET /tasks/{id}` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskView {
    /// Its id (`ORIGIN-SEQ`).
    pub task: String,
    /// `submitted`, `queued`, `placed`, `finished` or `done` (the result's `status` says how it
    /// ended: `succeeded`, `failed`, `out_of_memory`, `timed_out`, `cancelled`, `error` or
    /// `unschedulable`).
    pub phase: String,
    /// The worker it is placed on or finished at (the result's worker once done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The run, while placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Cancellation was asked for.
    pub cancel: bool,
    /// Why it waits, when the admin said no live worker can run it (e.g. `no worker offers
    /// repo:nosuch (3 workers checked)`); it ends `unschedulable` if none can for 60 ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
    /// How long no live worker could run it, as the admin last said (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_ms: Option<u64>,
    /// The idempotency key it was submitted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it was accepted, on this node's clock (ms).
    pub submitted_at_ms: u64,
    /// What it runs.
    #[schema(value_type = crate::wire_doc::TaskSpecDoc)]
    pub spec: TaskSpec,
    /// The result, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::wire_doc::TaskResultDoc>)]
    pub result: Option<TaskResult>,
    /// Where its time went, as this node saw it (the worker's part is the result's `timings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<TaskTimings>,
}

/// When a task's milestones came, in ms after it was submitted, on its node's clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskTimings {
    /// This node heard the admin placed its latest run (absent: not heard; a short run's result
    /// can come first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_ms: Option<u64>,
    /// Its result came in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ms: Option<u64>,
}

/// Whether a run of the task made `r`: false for a result written without starting the
/// command — cancelled before it ran, unschedulable — which has no exit, no signal, no time
/// and no usage.
pub fn ran(r: &TaskResult) -> bool {
    r.exit_code.is_some()
        || r.signal.is_some()
        || r.duration_ms > 0
        || r.usage != Default::default()
}

/// Whether `r` is a task cancelled before any run of it started.
pub fn cancelled_before_it_ran(r: &TaskResult) -> bool {
    r.status == TaskStatus::Cancelled && !ran(r)
}

/// One task in `GET /tasks`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskRow {
    /// Its id.
    pub task: String,
    /// Its phase.
    pub phase: String,
    /// The result's status, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::wire_doc::TaskStatusDoc>)]
    pub status: Option<TaskStatus>,
    /// The exit code, once done (when the command exited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Where it runs or ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Why it waits, when no live worker can run it (see [`TaskView::pending`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
}

/// The states `GET /tasks?state=` takes: a phase, a result's status, `unfinished`, or `all`.
pub const STATES: [&str; 14] = [
    "all",
    "unfinished",
    "submitted",
    "queued",
    "placed",
    "finished",
    "done",
    "succeeded",
    "failed",
    "out_of_memory",
    "timed_out",
    "cancelled",
    "error",
    "unschedulable",
];
