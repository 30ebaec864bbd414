//! The OpenAPI schemas of the wire types (`crate::wire`) and of chorus-core's types they carry,
//! mirrored here because chorus-core does not depend on utoipa. A leaf: the wire module and the
//! API's description (`crate::api::openapi`) both use it, and it uses neither.

use std::collections::BTreeMap;

use utoipa::ToSchema;

/// What a task runs (`chorus_core::TaskSpec`). Zero limits mean the worker's defaults.
#[derive(ToSchema)]
#[schema(as = TaskSpec)]
pub struct TaskSpecDoc {
    /// The image (built or loaded on the worker; nothing is pulled).
    pub image: String,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Environment variables; `GET /tasks/{id}` shows their values only to the token that
    /// submitted the task (`<redacted>` to others), and secret ones to no one (`<secret>`).
    #[schema(required = false)]
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (default: the workspace).
    #[schema(required = false)]
    pub workdir: Option<String>,
    /// Wall-clock limit of one run, ms.
    pub timeout_ms: u64,
    /// Memory limit in MiB (absent: the worker's default).
    #[schema(required = false)]
    pub memory_mb: u32,
    /// CPU limit in millicores (absent: the worker's default).
    #[schema(required = false)]
    pub cpu_millis: u32,
    /// Process limit (absent: the worker's default).
    #[schema(required = false)]
    pub pids: u32,
    /// Whether the sandbox gets a (firewalled) network.
    #[schema(required = false)]
    pub network: bool,
    /// Capabilities the worker must advertise.
    #[schema(required = false)]
    pub requires: Vec<String>,
    /// A repository from the worker's config, mounted into the sandbox.
    #[schema(required = false)]
    pub repo: Option<RepoMountDoc>,
    /// Who submitted it (an API token's id), as the node it was submitted to says.
    #[schema(required = false)]
    pub submitter: Option<String>,
}

/// A repository from the worker's config (`chorus_core::RepoMount`).
#[derive(ToSchema)]
#[schema(as = RepoMount)]
pub struct RepoMountDoc {
    /// Its name in the worker's `[repos]` table.
    pub name: String,
    /// Mounted read-write (else read-only).
    #[schema(required = false)]
    pub writable: bool,
}

/// How a task ended (`chorus_core::TaskStatus`).
#[derive(ToSchema)]
#[schema(as = TaskStatus)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum TaskStatusDoc {
    Succeeded,
    Failed,
    OutOfMemory,
    TimedOut,
    Cancelled,
    Error,
    Unschedulable,
    Lost,
}

/// What a run used (`chorus_core::Usage`).
#[derive(ToSchema)]
#[schema(as = Usage)]
pub struct UsageDoc {
    /// CPU time in milliseconds.
    pub cpu_ms: u64,
    /// Peak memory in KiB.
    pub peak_memory_kb: u64,
}

/// Where a run's time went at its worker, ms (`chorus_core::RunTimings`).
#[derive(ToSchema)]
#[schema(as = RunTimings)]
pub struct RunTimingsDoc {
    /// Taking a sandbox.
    pub acquire_ms: u64,
    /// Arming the sandbox's own end at the run's timeout.
    pub arm_ms: u64,
    /// The command, to the end of its output.
    pub exec_ms: u64,
    /// After the output ended: what the command left killed, its exit read.
    pub cleanup_ms: u64,
    /// Giving the sandbox back.
    pub release_ms: u64,
}

/// The result of a task (`chorus_core::TaskResult`).
#[derive(ToSchema)]
#[schema(as = TaskResult)]
pub struct TaskResultDoc {
    pub status: TaskStatusDoc,
    /// The exit code, when the command exited.
    #[schema(required = false)]
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    #[schema(required = false)]
    pub signal: Option<i32>,
    /// The node that ran it (the admin, for a task cancelled before it was placed).
    pub worker: String,
    /// Which run this was (from 1).
    pub attempt: u32,
    /// How long the run took, ms.
    pub duration_ms: u64,
    pub usage: UsageDoc,
    /// The tail of stdout.
    pub stdout: String,
    /// The tail of stderr.
    pub stderr: String,
    /// Bytes of stdout left out before `stdout`.
    #[schema(required = false)]
    pub stdout_truncated_bytes: u64,
    /// Bytes of stderr left out before `stderr`.
    #[schema(required = false)]
    pub stderr_truncated_bytes: u64,
    /// For `error`: the sandbox's error category and message.
    #[schema(required = false)]
    pub error: Option<String>,
    /// Where the run's time went at its worker (absent: not measured).
    #[schema(required = false)]
    pub timings: RunTimingsDoc,
}

/// A change of one voter (`chorus_core::MemberChange`).
#[derive(ToSchema)]
#[schema(as = MemberChange)]
#[serde(tag = "op", rename_all = "snake_case")]
#[allow(dead_code)]
pub enum MemberChangeDoc {
    /// Make an eligible node a voter.
    Add {
        /// The node (its id, `12D3KooW…`).
        node: String,
    },
    /// Make a voter a standby (or forget it, if it is gone).
    Remove {
        /// The node.
        node: String,
    },
}

/// The body of `POST /tasks`: a task spec, and an idempotency key.
#[derive(ToSchema)]
#[schema(as = SubmitTask)]
pub struct SubmitTaskDoc {
    /// The image (built or loaded on the worker; nothing is pulled).
    pub image: String,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Environment variables.
    #[schema(required = false)]
    pub env: BTreeMap<String, String>,
    /// Secret environment variables: sealed at this node under the cluster's pre-shared key,
    /// opened only in the sandbox, shown to no one.
    #[schema(required = false)]
    pub secret_env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (absolute).
    #[schema(required = false)]
    pub workdir: Option<String>,
    /// Wall-clock limit of one run, ms (default 600000).
    #[schema(required = false)]
    pub timeout_ms: u64,
    /// Memory limit in MiB (0: the worker's default).
    #[schema(required = false)]
    pub memory_mb: u32,
    /// CPU limit in millicores (0: the worker's default).
    #[schema(required = false)]
    pub cpu_millis: u32,
    /// Process limit (0: the worker's default).
    #[schema(required = false)]
    pub pids: u32,
    /// Whether the sandbox gets a (firewalled) network.
    #[schema(required = false)]
    pub network: bool,
    /// Capabilities the worker must advertise.
    #[schema(required = false)]
    pub requires: Vec<String>,
    /// A repository from the worker's config.
    #[schema(required = false)]
    pub repo: Option<RepoMountDoc>,
    /// An idempotency key: a retried submit with the same key names the same task (the
    /// `Idempotency-Key` header may give it instead; both must then agree).
    #[schema(required = false)]
    pub key: Option<String>,
}

/// A task this node does not hold (404). A task lives at the node it was submitted to (the
/// first part of its id): for another node's, the answer names it and where to ask it, with
/// what this node knows of it meanwhile.
#[derive(ToSchema)]
pub struct TaskNotHere {
    pub error: String,
    /// The node that holds it (another node's task).
    #[schema(required = false)]
    pub owner: String,
    /// The HTTP address it advertised; null when this node is not connected to it.
    #[schema(required = false)]
    pub owner_http: Option<String>,
    /// Whether this node is connected to it now.
    #[schema(required = false)]
    pub owner_connected: bool,
    /// A result this node ran for it and keeps until its node acknowledges it.
    #[schema(required = false)]
    pub held_result: Option<TaskResultDoc>,
    /// Where the task stands in the admin's queue, when this node is the admin: `{"state":
    /// "queued"|"placed"|"finished"|"unschedulable"|"cancelled", …}`.
    #[schema(required = false, value_type = Option<Object>)]
    pub admin_view: Option<()>,
    /// Whether this node keeps a cancel for it (asked here while its node was away).
    #[schema(required = false)]
    pub cancel_kept: bool,
}
