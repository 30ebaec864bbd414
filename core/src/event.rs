//! Inputs to the core. The runtime logs each one (with its `now`) before acting on the output.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Config, Message, NodeId, Timer};

/// One input to [`crate::Core::step`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The process started. On a state that has run before this is a restart: role, lease and
    /// peers are forgotten, while term, vote, electorate and beat survive.
    Started,
    /// A timer set by a [`crate::Command::SetTimer`] fired. Stale firings are ignored.
    TimerFired {
        /// Which timer.
        timer: Timer,
    },
    /// A message arrived from an authenticated peer.
    Message {
        /// The authenticated sender.
        from: NodeId,
        /// The decoded message.
        msg: Message,
    },
    /// A peer became reachable, with what it advertises about itself.
    PeerUp {
        /// The peer.
        peer: NodeId,
        /// Its capabilities and score inputs.
        info: PeerInfo,
    },
    /// A peer became unreachable.
    PeerDown {
        /// The peer.
        peer: NodeId,
    },
    /// The node sampled its own free resources.
    ResourcesSampled {
        /// The sample.
        resources: Resources,
    },
    /// Graceful shutdown: an admin steps down and tells the cluster first.
    Shutdown,
    /// An operator asks for a membership change (`chorus members add|remove`). The admin
    /// proposes it; any other node forwards it to the admin it follows. Notices
    /// [`crate::Notice::MembershipChange`] carrying the same `request` say what became of it.
    ChangeMembers {
        /// The change.
        change: crate::MemberChange,
        /// The caller's id for this request, echoed in the notices about it (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// Operator recovery of a cluster that lost its quorum for good (`chorus recover
    /// --force-new-cluster`, on one stopped survivor): this node's electorate becomes itself
    /// alone, one version later and in a new term, so it elects itself and voters can be added
    /// back with membership changes. Unsafe if the other voters are not gone: they could still
    /// elect among themselves. Ignored unless [`crate::Core::check_force_new_electorate`] passes.
    ForceNewElectorate,
    /// A user submits a task here (`POST /tasks`); this node owns it until its result is in.
    /// [`crate::Notice::TaskSubmitted`] (or `TaskRefused`) with the same `request` answers.
    SubmitTask {
        /// What to run.
        spec: crate::SharedSpec,
        /// An idempotency key: a retried submit with the same key and spec names the same task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The caller's id for this request (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// A user cancels a task this node owns.
    CancelTask {
        /// The task.
        task: crate::TaskId,
        /// The caller's id for this request (0: none).
        #[serde(default, skip_serializing_if = "crate::message::is_zero")]
        request: u64,
    },
    /// A sandbox started by [`crate::Command::StartSandbox`] ended.
    SandboxExited {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// What the sandbox reported.
        exit: crate::SandboxExit,
    },
    /// A sandbox could not be started or run to its end.
    SandboxFailed {
        /// The task.
        task: crate::TaskId,
        /// The run.
        attempt: u32,
        /// The sandbox error's category and message.
        error: String,
        /// Whether another try (perhaps elsewhere) may succeed.
        retryable: bool,
    },
    /// The operator changed the protocol settings; the runtime logs this at start when the
    /// configured settings differ from the recovered ones, so the change is part of the fold.
    /// Invalid settings, or another cluster id, are ignored (a node never changes cluster).
    ConfigChanged {
        /// The new settings.
        config: Config,
    },
    /// The node's capabilities as it advertises them now; the runtime logs this at every start,
    /// so a capability added or dropped in the configuration (a repository, a voter's
    /// `admin_election`) reaches a core restored from its log, and replays. Ignored when equal
    /// to the current set, or beyond [`crate::MAX_CAPABILITIES`] names.
    CapabilitiesChanged {
        /// The capability names (order and duplicates do not matter).
        capabilities: Vec<String>,
    },
}

/// What a peer advertises about itself when it connects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Capability names, e.g. `admin_election`, `docker`, `gpu`.
    pub capabilities: Arc<[String]>,
    /// Seconds since the peer started.
    pub uptime_s: u64,
    /// The peer's free resources.
    pub resources: Resources,
}

/// Free resources of a node, the resource part of the score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Free CPU in millicores.
    pub cpu_millicores: u32,
    /// Free memory in MiB.
    pub mem_free_mb: u32,
    /// Task slots this node offers (0: it runs no tasks). Not part of the score.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub task_slots: u32,
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node without task slots sends the resources an older node knows (no `task_slots`), and
    /// one with slots sends them: a worker's slots must reach the admin through the wire.
    #[test]
    fn resources_carry_task_slots_only_when_there_are_some() {
        let none = Resources {
            cpu_millicores: 1_000,
            mem_free_mb: 512,
            task_slots: 0,
        };
        let text = serde_json::to_string(&none).unwrap();
        assert_eq!(text, r#"{"cpu_millicores":1000,"mem_free_mb":512}"#);
        let some = Resources {
            task_slots: 3,
            ..none
        };
        let text = serde_json::to_string(&some).unwrap();
        assert_eq!(
            text,
            r#"{"cpu_millicores":1000,"mem_free_mb":512,"task_slots":3}"#
        );
        assert_eq!(serde_json::from_str::<Resources>(&text).unwrap(), some);
    }
}
