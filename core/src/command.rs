//! Outputs of the core: data only. Adapters carry them out after the step's event is durable.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Message, NodeId, Refusal, Timer};

/// One output of [`crate::Core::step`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Command {
    /// Send a message to one peer.
    Send {
        /// Recipient.
        to: NodeId,
        /// The message.
        msg: Message,
    },
    /// Send a message to every peer.
    Broadcast {
        /// The message.
        msg: Message,
    },
    /// (Re)arm a timer to fire at `at_ms`, replacing any earlier deadline of the same timer.
    SetTimer {
        /// Which timer.
        timer: Timer,
        /// Deadline on the node's clock.
        at_ms: u64,
    },
    /// Disarm a timer.
    CancelTimer {
        /// Which timer.
        timer: Timer,
    },
    /// The node's role changed. Admin duties run only while `role` is `Admin`, and only until
    /// `lease_until_ms` unless a later `Notice::LeaseRenewed` extends it.
    RoleChanged {
        /// The new role.
        role: Role,
        /// The term of the new role.
        term: u64,
        /// The lease end when the new role is `Admin`.
        lease_until_ms: Option<u64>,
    },
    /// Start a sandbox for run `attempt` of `task`; its end comes back as
    /// [`crate::Event::SandboxExited`] or [`crate::Event::SandboxFailed`].
    StartSandbox {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// What to run.
        spec: crate::SharedSpec,
    },
    /// Stop the sandbox of run `attempt` of `task` (cancelled); its end still comes back as an
    /// event.
    StopSandbox {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
    },
    /// Sign `digest` with this node's key and step [`crate::Event::Signed`] with it at once
    /// (the core holds no key; see `certificate.rs`).
    Sign {
        /// The statement of the electorate this node holds.
        digest: crate::Digest,
    },
    /// Something an observer wants to know (these become trace lines, docs/design.md §6).
    Notice(Notice),
}

/// Observable decisions, matching the trace kinds of docs/design.md §6.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Notice {
    /// This node won the election for `term`.
    BecameAdmin {
        /// The term.
        term: u64,
        /// Lease end (node clock).
        lease_until_ms: u64,
    },
    /// The lease ran out unrenewed (or a membership change cut it to now: the new electorate
    /// promised nothing yet): admin duties stop until a renewal, though the node stays admin
    /// until check-quorum or a higher term removes it.
    LeaseExpired {
        /// The term.
        term: u64,
    },
    /// A majority acknowledged a heartbeat; the lease now ends later. Also sent when a
    /// membership change cuts the lease to what the electorates in force promised: the end
    /// is then earlier.
    LeaseRenewed {
        /// The term.
        term: u64,
        /// New lease end (node clock).
        lease_until_ms: u64,
    },
    /// This node stopped being admin.
    SteppedDown {
        /// The term it held.
        term: u64,
        /// Why.
        reason: StepDownReason,
    },
    /// This node cast its (single) vote of `term`.
    Voted {
        /// The term.
        term: u64,
        /// The candidate voted for.
        candidate: NodeId,
    },
    /// This node now knows `admin` as the admin of `term`.
    AdminKnown {
        /// The admin.
        admin: NodeId,
        /// Its term.
        term: u64,
    },
    /// This node, as a bootstrap acceptor, accepted the genesis electorate `members` at
    /// `ballot` (a proposer's own acceptance included). The simulator judges bootstrap from
    /// these: at most one value per ballot, and at most one value ever accepted by a quorum.
    BootstrapAccepted {
        /// The ballot of the proposal accepted.
        ballot: crate::Ballot,
        /// The proposed electorate's voters, in id order (its own list, shared).
        members: Arc<[NodeId]>,
    },
    /// This node's electorate changed: agreed at bootstrap, adopted from its cluster, or a
    /// membership change.
    ElectorateChanged {
        /// The new version.
        version: u64,
        /// The term that proposed it (0 at bootstrap).
        term: u64,
        /// The voters, in id order (the electorate's own list, shared).
        members: Arc<[NodeId]>,
    },
    /// What became of a membership change: proposed, committed, or refused with a reason.
    MembershipChange {
        /// The change.
        change: crate::MemberChange,
        /// Its outcome.
        outcome: crate::ChangeOutcome,
        /// The `request` of the [`crate::Event::ChangeMembers`] at this node that asked for it
        /// (0: not asked for here — autopilot, or another node's request).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// This admin stepped down to hand its office to `target` (none: no voter was up to date,
    /// so it only stepped down). `request`: the operator's, 0 for a graceful stop.
    HandingOver {
        /// The term left.
        term: u64,
        /// The voter asked to stand at once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<NodeId>,
        /// The `request` of the [`crate::Event::TransferAdmin`] (0: a graceful stop).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// An operator's handover was refused.
    HandoverRefused {
        /// The `request` refused.
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
        /// Why.
        reason: crate::HandoverRefusal,
        /// The admin this node follows, when it is not the admin itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        admin: Option<NodeId>,
    },
    /// This node accepted a task (or, for a repeated idempotency key, named the one it has).
    TaskSubmitted {
        /// The task.
        task: crate::TaskId,
        /// The `request` of the submit.
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
        /// The idempotency key named a task accepted before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        existing: bool,
    },
    /// A submit or a cancel was refused.
    TaskRefused {
        /// The `request` refused.
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
        /// Why, for the user.
        reason: String,
    },
    /// Cancellation of a task owned here was asked for; the admin is told.
    TaskCancelRequested {
        /// The task.
        task: crate::TaskId,
        /// The `request` of the cancel.
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// The admin placed a task on a worker (always under a valid lease).
    TaskPlaced {
        /// The task.
        task: crate::TaskId,
        /// The worker.
        worker: NodeId,
        /// The run.
        attempt: u32,
    },
    /// The admin found that no live worker can run a queued task (at its first judgement, or
    /// for another reason than before): it tells the submitter why, and ends the task
    /// `unschedulable` once none could for
    /// [`UNSCHEDULABLE_TICKS`](crate::task::UNSCHEDULABLE_TICKS) ticks (`task/place.rs`, rule
    /// 10). From this notice on, [`crate::task::unschedulable_bound_ms`] bounds its result.
    TaskUnplaceable {
        /// The task.
        task: crate::TaskId,
        /// Why, e.g. `no worker offers repo:nosuch (3 workers checked)`.
        reason: String,
    },
    /// This worker started a run.
    TaskStarted {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// A live sandbox (§4.8): the checker holds it to one worker at a time (invariant 9).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        live: bool,
    },
    /// A run ended here: with a result (`status`), or given back to the admin to place again
    /// (`status` none: a retryable failure).
    TaskFinished {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// The result's status; none when the run is to be retried.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<crate::TaskStatus>,
        /// The sandbox error, when there was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The submitter has a task's result.
    TaskCompleted {
        /// The task.
        task: crate::TaskId,
        /// How it ended.
        status: crate::TaskStatus,
    },
    /// A message was refused and dropped without changing any state (see `trust.rs`).
    Refused {
        /// The authenticated sender.
        from: NodeId,
        /// The message's kind ([`Message::kind`]).
        message: Cow<'static, str>,
        /// Why.
        reason: Refusal,
    },
}

impl Notice {
    /// The trace kind of the notice (docs/design.md §6).
    pub fn kind(&self) -> &'static str {
        match self {
            Notice::BecameAdmin { .. } => "became_admin",
            Notice::LeaseExpired { .. } => "lease_expired",
            Notice::LeaseRenewed { .. } => "lease_renewed",
            Notice::SteppedDown { .. } => "stepped_down",
            Notice::Voted { .. } => "voted",
            Notice::AdminKnown { .. } => "admin_known",
            Notice::Refused { .. } => "refused",
            Notice::BootstrapAccepted { .. } => "bootstrap_accepted",
            Notice::ElectorateChanged { .. } => "electorate_changed",
            Notice::MembershipChange { .. } => "membership_change",
            Notice::HandingOver { .. } => "handing_over",
            Notice::HandoverRefused { .. } => "handover_refused",
            Notice::TaskSubmitted { .. } => "task_submitted",
            Notice::TaskRefused { .. } => "task_refused",
            Notice::TaskCancelRequested { .. } => "task_cancel_requested",
            Notice::TaskPlaced { .. } => "task_placed",
            Notice::TaskUnplaceable { .. } => "task_unplaceable",
            Notice::TaskStarted { .. } => "task_started",
            Notice::TaskFinished { .. } => "task_finished",
            Notice::TaskCompleted { .. } => "task_result",
        }
    }
}

/// Why an admin stepped down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepDownReason {
    /// It learned of a higher term.
    HigherTerm,
    /// No majority acknowledged it for a full maximum election timeout (check-quorum).
    CheckQuorum,
    /// Graceful shutdown.
    Shutdown,
    /// A membership change that removed it committed.
    Removed,
    /// Another node sent heartbeats for the same term: two admins of one term can only come
    /// of a bug or of broken clocks, and both step down so that a higher term decides.
    ConflictingAdmin,
    /// An operator asked it to hand its office over (`transfer.rs`).
    Transfer,
}

impl StepDownReason {
    /// The snake_case name used in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            StepDownReason::HigherTerm => "higher_term",
            StepDownReason::CheckQuorum => "check_quorum",
            StepDownReason::Shutdown => "shutdown",
            StepDownReason::Removed => "removed",
            StepDownReason::ConflictingAdmin => "conflicting_admin",
            StepDownReason::Transfer => "transfer",
        }
    }
}

impl fmt::Display for StepDownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Follows an admin, or waits for one.
    Follower,
    /// Asking for pre-votes; its term is unchanged.
    PreCandidate,
    /// Asking for votes in a new term.
    Candidate,
    /// Elected; runs admin duties while its lease is valid.
    Admin,
}

impl Role {
    /// The snake_case name used in status and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Follower => "follower",
            Role::PreCandidate => "pre_candidate",
            Role::Candidate => "candidate",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskId;

    /// A notice's trace kind is the name docs/design.md §6 gives it (the node's metrics count notices
    /// by it); a task's result is `task_result` in traces though its variant is `TaskCompleted`.
    #[test]
    fn each_notice_has_its_trace_kind() {
        let (a, task) = (NodeId::from("a"), "a-1".parse::<TaskId>().unwrap());
        let kinds = [
            (
                Notice::BecameAdmin {
                    term: 1,
                    lease_until_ms: 2,
                },
                "became_admin",
            ),
            (Notice::LeaseExpired { term: 1 }, "lease_expired"),
            (
                Notice::BootstrapAccepted {
                    ballot: crate::Ballot {
                        round: 1,
                        node: a.clone(),
                    },
                    members: [a.clone()].into(),
                },
                "bootstrap_accepted",
            ),
            (
                Notice::SteppedDown {
                    term: 1,
                    reason: StepDownReason::Shutdown,
                },
                "stepped_down",
            ),
            (
                Notice::Voted {
                    term: 1,
                    candidate: a.clone(),
                },
                "voted",
            ),
            (
                Notice::TaskPlaced {
                    task: task.clone(),
                    worker: a,
                    attempt: 1,
                },
                "task_placed",
            ),
            (
                Notice::TaskUnplaceable {
                    task: task.clone(),
                    reason: "no worker offers gpu (1 worker checked)".into(),
                },
                "task_unplaceable",
            ),
            (
                Notice::TaskCompleted {
                    task,
                    status: crate::TaskStatus::Succeeded,
                },
                "task_result",
            ),
        ];
        for (notice, kind) in kinds {
            assert_eq!(notice.kind(), kind, "{notice:?}");
        }
    }

    /// Why an admin stepped down, as traces and `--help` name it.
    #[test]
    fn step_down_reasons_have_their_trace_names() {
        let names = [
            (StepDownReason::HigherTerm, "higher_term"),
            (StepDownReason::CheckQuorum, "check_quorum"),
            (StepDownReason::Shutdown, "shutdown"),
            (StepDownReason::Removed, "removed"),
            (StepDownReason::Transfer, "transfer"),
        ];
        assert_names(&names, StepDownReason::as_str);
    }

    /// A node's role, as status, metrics and traces name it.
    #[test]
    fn roles_have_their_trace_names() {
        let names = [
            (Role::Follower, "follower"),
            (Role::PreCandidate, "pre_candidate"),
            (Role::Candidate, "candidate"),
            (Role::Admin, "admin"),
        ];
        assert_names(&names, Role::as_str);
    }

    /// Each value's `as_str` and `Display` give its name.
    fn assert_names<T: Copy + fmt::Debug + fmt::Display>(
        names: &[(T, &str)],
        as_str: fn(T) -> &'static str,
    ) {
        for &(value, name) in names {
            let got = (as_str(value), value.to_string());
            assert_eq!(got, (name, name.to_owned()), "{value:?}");
        }
    }
}
