//! Tasks: submitted at any node, placed by the admin under its lease, run by a worker in a
//! sandbox, the result sent back to the submitter (docs/design.md §4.7, invariant 7).
//!
//! Three parts, one file each:
//! * [`submit`] — the submitter owns each task it accepted (durable: a fold of its log) and
//!   offers it to the admin of the moment until a result arrives, which it acknowledges;
//! * [`place`] — the admin queues offers and places each on a capable, least-loaded worker
//!   (ties: node id), only while it holds a valid lease; a lost worker's tasks are placed again;
//!   after a failover the new admin rebuilds its load table from the workers' reports;
//! * [`work`] — the worker starts a sandbox per placement (deduplicated by task id), turns the
//!   sandbox's exit into a result, and keeps that result (durable) until the submitter
//!   acknowledges it; retryable failures go back to the admin, which places them again after a
//!   backoff.
//!
//! Delivery is at least once: a task may run twice (an admin failover while it runs elsewhere, a
//! worker thought lost that was not), and the submitter keeps the first result it gets.
//!
//! Everything a peer sends is bounded ([`TaskSpec::check`], [`TaskResult::check`]) and judged by
//! who sent it: only the task's origin offers it, only the admin of this node's term places or
//! cancels, only a worker the admin named (or the admin) delivers a result. Every message that
//! carries a spec or a result fits a frame, measured on its encoded bytes (`task/wire.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::NodeId;

pub(crate) mod ask;
pub(crate) mod place;
pub(crate) mod submit;
pub(crate) mod wire;
pub(crate) mod work;

pub use ask::{Ask, ASK_TTL_MS, MAX_ASKS};
pub use place::{AdminTasks, AdminView};
pub use submit::{OwnedTask, TaskPhase};
pub use wire::{
    ENVELOPE_RESERVE_BYTES, MAX_ERROR_WIRE_BYTES, MAX_REPORT_LISTS_WIRE_BYTES,
    MAX_RESULT_WIRE_BYTES, MAX_SPEC_WIRE_BYTES, MAX_TAIL_WIRE_BYTES,
};
pub use work::{RunningTask, MAX_REPORTED};

/// The capability a node advertises when it runs tasks. A node with task slots but without it
/// is still placed on (slots are what count); it is for operators and `--require`.
pub const SANDBOX_CAPABILITY: &str = "sandbox";

/// The capability prefix of a repository a worker offers: `repo:NAME`.
pub const REPO_CAPABILITY_PREFIX: &str = "repo:";

/// A task runs at most this many times when its failures are retryable.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long a task may wait for its result once the cluster is healed, a majority of the
/// electorate is up and `liveness_bound_ms` has passed (an admin holds a lease and every node
/// knows it): every attempt runs to its end (`longest_run_ms`: the longest timeout), and the
/// submitter's offer and the worker's report are each lost once with an old admin and re-sent at
/// the next re-offer ([`submit`]'s `REOFFER_TICKS` task ticks). Queueing is not in it: a
/// cluster given more work than it has slots is late by design. Nor is a task no live worker
/// can run: the admin says so (`Notice::TaskUnplaceable`, a `task_unplaceable` trace record),
/// and from then [`unschedulable_bound_ms`] holds for it. The simulator's checker judges
/// invariant 7 by these bounds, for simulated runs and for real clusters' merged logs.
pub fn result_bound_ms(
    heartbeat_interval_ms: u64,
    liveness_bound_ms: u64,
    longest_run_ms: u64,
) -> u64 {
    let reoffer = heartbeat_interval_ms
        .clamp(10, 1_000)
        .saturating_mul(submit::REOFFER_TICKS);
    liveness_bound_ms
        .saturating_add(u64::from(MAX_ATTEMPTS).saturating_mul(longest_run_ms))
        .saturating_add(2 * reoffer)
}

/// How long after an admin first says no live worker can run a task (`Notice::TaskUnplaceable`)
/// its submitter may wait for the `unschedulable` result, while the cluster stays healed: the
/// count began at or before that notice and ends [`UNSCHEDULABLE_TICKS`] ticks on, judged at the
/// next tick (with at most 256 tasks queued: the admin judges 256 a tick); the result may be
/// lost once, and the submitter's next offer (a re-offer period on) carries a count at most a
/// re-offer period behind, so the task ends again within that much more.
pub fn unschedulable_bound_ms(heartbeat_interval_ms: u64) -> u64 {
    let tick = heartbeat_interval_ms.clamp(10, 1_000);
    tick.saturating_mul(UNSCHEDULABLE_TICKS + 1 + 2 * submit::REOFFER_TICKS)
}

/// Bytes of stdout and of stderr kept in a result: the tail, so a result fits a 64 KiB frame
/// (and at most [`MAX_TAIL_WIRE_BYTES`] of each once encoded: see `task/wire.rs`).
pub const MAX_TAIL_BYTES: usize = 8 * 1024;

/// Done tasks a submitter remembers (for `GET /tasks/{id}`); older ones are forgotten first.
pub const MAX_DONE_TASKS: usize = 1_024;

/// Tasks one node may own unfinished at once; a submit beyond is refused.
pub const MAX_OWNED_TASKS: usize = 4_096;

/// Unfinished tasks one owner (an API token) may have at a node: a quarter of
/// [`MAX_OWNED_TASKS`], so one caller cannot lock every other out.
pub const MAX_TASKS_PER_OWNER: usize = MAX_OWNED_TASKS / 4;

/// Bounds of a task spec. The spec encoded must also be at most [`MAX_SPEC_WIRE_BYTES`], so its
/// offer and placement fit a frame whatever its text (see `task/wire.rs`).
pub mod bounds {
    /// Bytes of the image name.
    pub const IMAGE: usize = 256;
    /// Arguments of the command.
    pub const ARGS: usize = 128;
    /// Bytes of the command and its arguments together.
    pub const COMMAND_BYTES: usize = 8 * 1024;
    /// Environment variables.
    pub const ENV: usize = 64;
    /// Bytes of the environment together.
    pub const ENV_BYTES: usize = 8 * 1024;
    /// Bytes of the working directory, a repository name, or a required capability.
    pub const NAME: usize = 256;
    /// Required capabilities.
    pub const REQUIRES: usize = 16;
    /// The longest timeout: a day.
    pub const TIMEOUT_MS: u64 = 86_400_000;
    /// The largest memory limit (MiB), CPU limit (millicores) and pids limit.
    pub const MEMORY_MB: u32 = 1 << 20;
    /// CPU limit in millicores.
    pub const CPU_MILLIS: u32 = 1 << 20;
    /// Pids limit.
    pub const PIDS: u32 = 1 << 20;
}

/// A task's identity: the node that accepted it and that node's sequence number. Written
/// `ORIGIN-SEQ` (PeerIds and simulator ids contain no `-`), on the wire too (a string, so it
/// can key a JSON map).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// The submitter, which owns the task.
    pub origin: NodeId,
    /// Its number at the submitter, from 1.
    pub seq: u64,
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.origin, self.seq)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl Serialize for TaskId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TaskId, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for TaskId {
    type Err = String;
    fn from_str(s: &str) -> Result<TaskId, String> {
        let (origin, seq) = s
            .rsplit_once('-')
            .ok_or_else(|| format!("`{s}` is not a task id (ORIGIN-SEQ)"))?;
        let seq: u64 = seq
            .parse()
            .map_err(|_| format!("`{s}` is not a task id: `{seq}` is not a number"))?;
        if origin.is_empty() || seq == 0 {
            return Err(format!("`{s}` is not a task id (ORIGIN-SEQ, SEQ from 1)"));
        }
        Ok(TaskId {
            origin: NodeId::new(origin),
            seq,
        })
    }
}

/// A repository from the worker's config, mounted into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoMount {
    /// Its name in the worker's `[repos]` table.
    pub name: String,
    /// Mounted read-write (else read-only).
    #[serde(default)]
    pub writable: bool,
}

/// What to run. Zero limits mean the worker's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The image (built or loaded on the worker; nothing is pulled).
    pub image: String,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (default: the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Wall-clock limit of one run.
    pub timeout_ms: u64,
    /// Memory limit in MiB (0: the worker's default).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub memory_mb: u32,
    /// CPU limit in millicores (0: the worker's default).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub cpu_millis: u32,
    /// Process limit (0: the worker's default).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub pids: u32,
    /// Whether the sandbox gets a (firewalled) network.
    #[serde(default, skip_serializing_if = "is_false")]
    pub network: bool,
    /// Capabilities the worker must advertise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// A repository from the worker's config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<RepoMount>,
    /// Who submitted it (an API token's id), as the node it was submitted to says: set there,
    /// whatever a request carried. A worker reuses a sandbox only between runs of tasks with
    /// the same origin and submitter (and shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter: Option<String>,
    /// A live sandbox (§4.8), not a command: the worker keeps a sandbox of this shape for its
    /// owner's calls until it is closed (cancelled), reaches `timeout_ms` (its absolute
    /// lifetime) or is lost. It has no command, and it is placed at most once: never given
    /// to a second worker behind its owner's back (`place.rs`, rule 14).
    #[serde(default, skip_serializing_if = "is_false")]
    pub live: bool,
    /// A live sandbox's idle timeout: with no call for this long its worker ends it
    /// (`timed_out`, like its lifetime). 0: the worker's default. Only for a live sandbox,
    /// and at most its lifetime (`timeout_ms`).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub idle_ms: u64,
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

/// Why a spec (or a result) is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(msg.into()))
}

/// A name of at most `max` bytes, without control characters (a newline in a name would forge
/// log lines wherever it is printed).
fn check_text(what: &str, s: &str, max: usize) -> Result<(), SpecError> {
    if s.is_empty() || s.len() > max || s.chars().any(char::is_control) {
        return err(format!(
            "{what} must be 1 to {max} bytes without control characters"
        ));
    }
    Ok(())
}

fn check_name(what: &str, s: &str) -> Result<(), SpecError> {
    check_text(what, s, bounds::NAME)
}

impl TaskSpec {
    /// Checks every bound; a spec from a user or a peer is used only after this passed.
    pub fn check(&self) -> Result<(), SpecError> {
        check_text("image", &self.image, bounds::IMAGE)?;
        if self.live && !self.command.is_empty() {
            return err("a live sandbox has no command: its commands come as calls");
        }
        if !self.live && (self.command.is_empty() || self.command.len() > bounds::ARGS) {
            return err(format!("command must have 1 to {} arguments", bounds::ARGS));
        }
        if self.command.iter().map(String::len).sum::<usize>() > bounds::COMMAND_BYTES {
            return err(format!(
                "command is longer than {} bytes",
                bounds::COMMAND_BYTES
            ));
        }
        if self.env.len() > bounds::ENV {
            return err(format!("at most {} environment variables", bounds::ENV));
        }
        let mut env_bytes = 0;
        for (k, v) in &self.env {
            if k.is_empty()
                || k.contains('=')
                || k.chars().any(char::is_control)
                || v.contains('\0')
            {
                return err(format!("environment variable `{k}` is not NAME=VALUE"));
            }
            env_bytes += k.len() + v.len();
        }
        if env_bytes > bounds::ENV_BYTES {
            return err(format!(
                "the environment is longer than {} bytes",
                bounds::ENV_BYTES
            ));
        }
        if let Some(w) = &self.workdir {
            check_name("workdir", w)?;
            if !w.starts_with('/') {
                return err("workdir must be an absolute path");
            }
        }
        if self.timeout_ms == 0 || self.timeout_ms > bounds::TIMEOUT_MS {
            return err(format!(
                "timeout must be 1 ms to {} s",
                bounds::TIMEOUT_MS / 1000
            ));
        }
        if self.idle_ms > 0 && (!self.live || self.idle_ms > self.timeout_ms) {
            return err("idle_ms is a live sandbox's, and at most its lifetime (timeout_ms)");
        }
        if self.memory_mb > bounds::MEMORY_MB
            || self.cpu_millis > bounds::CPU_MILLIS
            || self.pids > bounds::PIDS
        {
            return err("a limit is out of range");
        }
        if self.requires.len() > bounds::REQUIRES {
            return err(format!(
                "at most {} required capabilities",
                bounds::REQUIRES
            ));
        }
        for c in &self.requires {
            check_name("a required capability", c)?;
        }
        if let Some(who) = &self.submitter {
            check_name("submitter", who)?;
        }
        if let Some(r) = &self.repo {
            check_name("repo name", &r.name)?;
            if !r
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return err("repo name may hold only letters, digits, `-`, `_` and `.`");
            }
        }
        // Last: the bounds above keep this count cheap.
        let encoded = crate::codec::encoded_len(self);
        if encoded > MAX_SPEC_WIRE_BYTES {
            return err(format!(
                "the spec is {encoded} bytes encoded (JSON writes a control character as 6 \
                 bytes); at most {MAX_SPEC_WIRE_BYTES} fit, with the message around it, in a \
                 {}-byte frame",
                crate::codec::MAX_MESSAGE_BYTES
            ));
        }
        Ok(())
    }

    /// Whether a node with `capabilities` can run this task.
    pub fn fits(&self, capabilities: &[String]) -> bool {
        let has = |c: &str| capabilities.iter().any(|x| x == c);
        self.requires.iter().all(|c| has(c))
            && self.repo.as_ref().is_none_or(|r| {
                capabilities.iter().any(|x| {
                    x.strip_prefix(REPO_CAPABILITY_PREFIX)
                        .is_some_and(|n| n == r.name)
                })
            })
    }
}

/// What a worker offers its tasks besides slots (issue 33): memory and CPU for all of them
/// together, the most one task may ask for, and what a task that names no limit is given. A
/// worker says it in its reports; a field of 0 is not said, and a worker that says nothing (an
/// older build) is placed on by its slots alone. The admin believes what a worker claims
/// (`place.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCapacity {
    /// Memory (MiB) for its tasks together (0: memory is not counted).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub memory_mb: u32,
    /// CPU (millicores) for its tasks together (0: CPU is not counted).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub cpu_millis: u32,
    /// The most memory (MiB) one task may ask for (0: no ceiling besides the total).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub task_memory_mb: u32,
    /// The most CPU (millicores) one task may ask for (0: no ceiling besides the total).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub task_cpu_millis: u32,
    /// The memory (MiB) a task whose spec names none gets here, and is counted for.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub default_memory_mb: u32,
    /// The CPU (millicores) a task whose spec names none gets here, and is counted for.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub default_cpu_millis: u32,
}

impl TaskCapacity {
    /// Nothing said: slots alone count.
    pub fn is_unset(&self) -> bool {
        *self == TaskCapacity::default()
    }

    /// What one task of `spec` takes here, counted against the totals: (memory MiB, CPU
    /// millicores). A limit of 0 takes the worker's default (at most the total).
    pub fn demand(&self, spec: &TaskSpec) -> (u64, u64) {
        let take = |asked: u32, default: u32, total: u32| {
            u64::from(if asked > 0 { asked } else { default.min(total) })
        };
        (
            take(spec.memory_mb, self.default_memory_mb, self.memory_mb),
            take(spec.cpu_millis, self.default_cpu_millis, self.cpu_millis),
        )
    }

    /// Why a task of `spec` can never run here, even alone: a limit above the ceiling of one
    /// task, or above the total. `None`: it can, once there is room.
    pub fn refuses(&self, spec: &TaskSpec) -> Option<String> {
        let (memory, cpu) = self.demand(spec);
        let over = |what: &str, unit: &str, asked: u64, ceiling: u32, total: u32| {
            if ceiling > 0 && asked > u64::from(ceiling) {
                Some(format!(
                    "it asks for {asked}{unit} of {what}, above the ceiling of {ceiling}{unit} \
                     a task"
                ))
            } else if total > 0 && asked > u64::from(total) {
                Some(format!(
                    "it asks for {asked}{unit} of {what}, more than the {total}{unit} for tasks"
                ))
            } else {
                None
            }
        };
        over(
            "memory",
            " MiB",
            memory,
            self.task_memory_mb,
            self.memory_mb,
        )
        .or_else(|| {
            over(
                "CPU",
                " millicores",
                cpu,
                self.task_cpu_millis,
                self.cpu_millis,
            )
        })
    }

    /// Whether a task of `spec` fits beside what is placed already (`used`: memory MiB, CPU
    /// millicores), within both totals (a total of 0 is not counted).
    pub fn has_room(&self, used: (u64, u64), spec: &TaskSpec) -> bool {
        let (memory, cpu) = self.demand(spec);
        let within = |used: u64, more: u64, total: u32| {
            total == 0 || used.saturating_add(more) <= u64::from(total)
        };
        self.refuses(spec).is_none()
            && within(used.0, memory, self.memory_mb)
            && within(used.1, cpu, self.cpu_millis)
    }
}

/// How a task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The command exited 0.
    Succeeded,
    /// The command exited non-zero or was killed by a signal.
    Failed,
    /// The sandbox ran out of memory and the kernel killed the command.
    OutOfMemory,
    /// The command ran past its timeout and was killed.
    TimedOut,
    /// Cancelled before it finished.
    Cancelled,
    /// The sandbox could not run it (a bad image, a missing repository, retries used up).
    Error,
    /// No live worker could run it — none offers what it requires, or its limits are above
    /// what every worker offers — for [`UNSCHEDULABLE_TICKS`] ticks: the admin ended it
    /// (`place.rs`, rule 10). Not retried; the result's `error` says why.
    Unschedulable,
    /// A live sandbox (§4.8) its worker no longer holds for the cluster: the worker went down
    /// or was cut off from the admin, or restarted. Never placed again; the result's `error`
    /// says why and `worker` names the worker.
    Lost,
}

impl TaskStatus {
    /// Every status, for metrics.
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::OutOfMemory,
        TaskStatus::TimedOut,
        TaskStatus::Cancelled,
        TaskStatus::Error,
        TaskStatus::Unschedulable,
        TaskStatus::Lost,
    ];

    /// The snake_case name used in the API, metrics and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::OutOfMemory => "out_of_memory",
            TaskStatus::TimedOut => "timed_out",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Error => "error",
            TaskStatus::Unschedulable => "unschedulable",
            TaskStatus::Lost => "lost",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resources a run used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time in milliseconds.
    #[serde(default)]
    pub cpu_ms: u64,
    /// Peak memory in KiB.
    #[serde(default)]
    pub peak_memory_kb: u64,
}

/// Where a run's time went at its worker, in milliseconds of the worker's clock: the stages a
/// task spends on its worker, so a slow task says which of them was slow (`chorus task get
/// --timings`, `chorus_task_stage_seconds` in `/metrics`). All zero: not measured (a result
/// without a run, or from an older worker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTimings {
    /// Taking a sandbox: a warm one from the pool (next to nothing), else one created and
    /// started for the run.
    #[serde(default)]
    pub acquire_ms: u64,
    /// Arming the sandbox's own end at the run's timeout, before the command (a pooled
    /// sandbox: a line to its supervisor).
    #[serde(default)]
    pub arm_ms: u64,
    /// The command: from its exec's creation to the end of its output.
    #[serde(default)]
    pub exec_ms: u64,
    /// After the output ended: what the command left is killed, its exit code, OOM state and
    /// the sandbox's usage read.
    #[serde(default)]
    pub cleanup_ms: u64,
    /// Giving the sandbox back: a pooled one is removed in the background (next to nothing);
    /// a fresh one is removed now, a read-write repository synced back first.
    #[serde(default)]
    pub release_ms: u64,
}

impl RunTimings {
    /// The stages' names, in the order a run goes through them (and [`RunTimings::stages`]
    /// gives them).
    pub const STAGES: [&'static str; 5] = ["acquire", "arm", "exec", "cleanup", "release"];

    /// Whether nothing was measured.
    pub fn is_empty(&self) -> bool {
        *self == RunTimings::default()
    }

    /// The stages as (name, ms), in the order a run goes through them.
    pub fn stages(&self) -> [(&'static str, u64); 5] {
        let ms = [
            self.acquire_ms,
            self.arm_ms,
            self.exec_ms,
            self.cleanup_ms,
            self.release_ms,
        ];
        std::array::from_fn(|i| (Self::STAGES[i], ms[i]))
    }

    /// Every stage at most `max` (a worker's numbers are bounded like any on the wire).
    pub fn clamped(self, max: u64) -> RunTimings {
        RunTimings {
            acquire_ms: self.acquire_ms.min(max),
            arm_ms: self.arm_ms.min(max),
            exec_ms: self.exec_ms.min(max),
            cleanup_ms: self.cleanup_ms.min(max),
            release_ms: self.release_ms.min(max),
        }
    }

    /// The run's time at its worker: the stages in turn.
    pub fn total_ms(&self) -> u64 {
        self.acquire_ms
            .saturating_add(self.arm_ms)
            .saturating_add(self.exec_ms)
            .saturating_add(self.cleanup_ms)
            .saturating_add(self.release_ms)
    }
}

/// What the sandbox reported when a run ended (the runtime fills it in; the core bounds it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxExit {
    /// The exit code, when the command exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The kernel's OOM killer ended it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub oom: bool,
    /// It ran past its timeout.
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// How long it ran.
    #[serde(default)]
    pub duration_ms: u64,
    /// What it used.
    #[serde(default)]
    pub usage: Usage,
    /// The tail of its stdout.
    #[serde(default)]
    pub stdout: String,
    /// The tail of its stderr.
    #[serde(default)]
    pub stderr: String,
    /// Bytes of stdout the runtime dropped before `stdout` (it keeps a tail).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub stdout_truncated_bytes: u64,
    /// Bytes of stderr the runtime dropped before `stderr`.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub stderr_truncated_bytes: u64,
    /// Where the run's time went.
    #[serde(default, skip_serializing_if = "RunTimings::is_empty")]
    pub timings: RunTimings,
}

/// The result of a task, sent by the worker to the submitter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    /// How it ended.
    pub status: TaskStatus,
    /// The exit code, when the command exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The node that ran it (the admin, for a task cancelled before it was placed).
    pub worker: NodeId,
    /// Which run this was (from 1).
    pub attempt: u32,
    /// How long the run took.
    #[serde(default)]
    pub duration_ms: u64,
    /// What it used.
    #[serde(default)]
    pub usage: Usage,
    /// The tail of stdout: its last [`MAX_TAIL_BYTES`], fewer when they encode to more than
    /// [`MAX_TAIL_WIRE_BYTES`].
    #[serde(default)]
    pub stdout: String,
    /// The tail of stderr, bounded as `stdout`.
    #[serde(default)]
    pub stderr: String,
    /// Bytes of stdout left out before `stdout` (0: `stdout` is all of it): those the runtime
    /// dropped while the run streamed, and those the worker cut so the result fits its frame.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub stdout_truncated_bytes: u64,
    /// Bytes of stderr left out before `stderr`, counted as for stdout.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub stderr_truncated_bytes: u64,
    /// For [`TaskStatus::Error`]: the sandbox's error category and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the run's time went at its worker (all zero: not measured).
    #[serde(default, skip_serializing_if = "RunTimings::is_empty")]
    pub timings: RunTimings,
}

impl TaskResult {
    /// Checks the bounds of a result from the wire.
    pub fn check(&self) -> Result<(), SpecError> {
        if self.stdout.len() > MAX_TAIL_BYTES || self.stderr.len() > MAX_TAIL_BYTES {
            return err(format!(
                "an output tail is longer than {MAX_TAIL_BYTES} bytes"
            ));
        }
        if self
            .error
            .as_ref()
            .is_some_and(|e| e.len() > MAX_TAIL_BYTES)
        {
            return err("the error message is too long");
        }
        // A relayed result keeps the name its admin gave it (`place.rs`, rule 11).
        if self.worker.as_str().is_empty() || self.worker.as_str().len() > crate::MAX_ID_BYTES {
            return err("the worker's name is out of range");
        }
        if self.attempt == 0
            || self.duration_ms > crate::MAX_WIRE_INT
            || self.stdout_truncated_bytes > crate::MAX_WIRE_INT
            || self.stderr_truncated_bytes > crate::MAX_WIRE_INT
            || self
                .timings
                .stages()
                .iter()
                .any(|(_, ms)| *ms > crate::MAX_WIRE_INT)
        {
            return err("a number is out of range");
        }
        let encoded = crate::codec::encoded_len(self);
        if encoded > MAX_RESULT_WIRE_BYTES {
            return err(format!(
                "the result is {encoded} bytes encoded; at most {MAX_RESULT_WIRE_BYTES} fit a frame"
            ));
        }
        Ok(())
    }

    /// A live sandbox `worker` no longer holds (§4.8): `lost`, saying `why`, fitted to a frame.
    pub(crate) fn lost(worker: NodeId, attempt: u32, why: String) -> TaskResult {
        let mut result = TaskResult::without_run(TaskStatus::Lost, worker, attempt);
        result.error = Some(why);
        wire::fit_result(&mut result);
        result
    }

    /// A result without a run: cancelled before placement, or an error.
    pub(crate) fn without_run(status: TaskStatus, worker: NodeId, attempt: u32) -> TaskResult {
        TaskResult {
            status,
            exit_code: None,
            signal: None,
            worker,
            attempt: attempt.max(1),
            duration_ms: 0,
            usage: Usage::default(),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated_bytes: 0,
            stderr_truncated_bytes: 0,
            error: None,
            timings: RunTimings::default(),
        }
    }
}

/// The admin's answer to an offer: where the task stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OfferState {
    /// Queued for placement; `pending` says why it waits, once the admin judged it.
    Queued {
        /// Absent: not judged yet (a new admin waits for the workers' reports), or an older
        /// admin.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending: Option<Pending>,
    },
    /// Placed on `worker` for run `attempt`.
    Placed {
        /// The worker.
        worker: NodeId,
        /// The run.
        attempt: u32,
    },
    /// `worker` finished it; its result is on the way (the worker resends until acknowledged).
    Finished {
        /// The worker.
        worker: NodeId,
    },
    /// The queue is full, or holds as many of its owner's or its origin's tasks as it takes
    /// (`place.rs`, rule 13): offer again later.
    Busy {
        /// Which bound (absent from an older admin).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// Why a queued task waits, as the admin judged it (`place.rs`, rule 10).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Pending {
    /// A live worker could run it: it waits for room (a free slot, memory, CPU).
    Room,
    /// No live worker can run it, for `reason`; for `for_ms` so far (counted on from earlier
    /// admins). The admin ends it `unschedulable` after [`UNSCHEDULABLE_TICKS`] ticks.
    Unplaceable {
        /// Why, e.g. `no worker offers repo:nosuch (3 workers checked)`; at most
        /// [`MAX_PENDING_BYTES`].
        reason: String,
        /// How long no live worker could run it, ms.
        for_ms: u64,
    },
    /// A live worker could run it, but its owner has `limit` tasks placed already, the most one
    /// owner may (`max_running_per_owner`, `place.rs` rule 13): it waits for one of them to end.
    OwnerLimit {
        /// The admin's `max_running_per_owner`.
        limit: u32,
    },
}

impl Pending {
    /// Why a task waits for its owner's turn, in words (the submitter keeps this).
    pub fn owner_limit_reason(limit: u32) -> String {
        format!(
            "its owner has {limit} tasks placed already, the most one owner may at once \
             (max_running_per_owner)"
        )
    }
}

/// The longest pending reason accepted from the wire.
pub const MAX_PENDING_BYTES: usize = 1_024;

/// Ticks a task may wait with no live worker able to run it before the admin ends it
/// `unschedulable`: 60 s at the default tick (1 s). The count goes on across admins (the
/// submitter carries it in its offers, `place.rs` rule 10), so a failover does not start it
/// again.
pub const UNSCHEDULABLE_TICKS: u64 = 60;

/// A new admin judges no task until this many ticks after it won: the workers that heard its
/// first heartbeat have reported by then.
pub const JUDGE_AFTER_TICKS: u64 = 3;

/// A new admin ends a task `unschedulable` only once it has itself found no worker for it
/// during this many heartbeat intervals (at most the whole bound), whatever count the
/// submitter carried: a live worker whose first report to it was lost (a heartbeat lost on the
/// way) reports within that, and a task it could run is not ended for want of its report.
pub const FRESH_BEATS: u64 = 2;

/// A shared spec (cloned into offers and placements without copying the strings).
pub type SharedSpec = Arc<TaskSpec>;

/// A node's durable task state: what it submitted and what it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeTasks {
    #[serde(default)]
    pub(crate) submit: submit::SubmitterTasks,
    #[serde(default)]
    pub(crate) work: work::WorkerTasks,
    /// Cancels kept for other nodes' tasks (`ask.rs`).
    #[serde(default, skip_serializing_if = "ask::CancelAsks::is_empty")]
    pub(crate) asks: ask::CancelAsks,
}

impl crate::Core {
    /// How often the task duties wake up: resends, re-offers, backoffs.
    pub(crate) fn task_tick_ms(&self) -> u64 {
        self.config.heartbeat_interval_ms.clamp(10, 1_000)
    }

    /// Sends `msg` to `to`, or handles it at once when `to` is this node (the admin places on
    /// itself, a worker delivers its own submission's result).
    pub(crate) fn deliver(
        &mut self,
        to: crate::NodeId,
        msg: crate::Message,
        out: &mut Vec<crate::Command>,
    ) {
        if to == self.id {
            let me = self.id.clone();
            self.on_task_message(me, msg, out);
        } else {
            out.push(crate::Command::Send { to, msg });
        }
    }

    /// Dispatches a task message (already admitted).
    pub(crate) fn on_task_message(
        &mut self,
        from: crate::NodeId,
        msg: crate::Message,
        out: &mut Vec<crate::Command>,
    ) {
        use crate::Message as M;
        match msg {
            M::TaskOffer {
                task,
                spec,
                cancel,
                attempt,
                unplaceable_ms,
            } => {
                let offer = place::OfferIn {
                    cancel,
                    attempt,
                    unplaceable_ms,
                };
                self.on_task_offer(from, task, spec, offer, out)
            }
            M::TaskState { task, state } => self.on_task_state(from, task, state, out),
            M::TaskPlace {
                term,
                task,
                attempt,
                seq,
                spec,
            } => self.on_task_place(from, term, (task, attempt, seq), spec, out),
            M::TaskCancel { term, task } => self.on_task_cancel(from, term, task, out),
            M::WorkerReport {
                term,
                seen,
                slots,
                capacity,
                running,
                finished,
                released,
                partial,
            } => {
                let report = place::WorkerReportIn {
                    term,
                    seen,
                    slots,
                    capacity,
                    running,
                    finished,
                    released,
                    partial,
                };
                self.on_worker_report(from, report, out)
            }
            M::TaskResult { task, result } => self.on_task_result(from, task, *result, out),
            M::TaskResultAck { task, worker } => self.on_task_result_ack(from, task, worker, out),
            M::TaskCancelAsk { task } => self.on_task_cancel_ask(from, task, out),
            M::TaskCancelAsked { task } => self.on_task_cancel_asked(from, task, out),
            _ => {}
        }
    }

    /// After every step of a running node: offers, reports, placement, and the tick timer.
    pub(crate) fn tasks_after_step(&mut self, out: &mut Vec<crate::Command>) {
        self.submitter_after_step(out);
        self.worker_after_step(out);
        self.asks_after_step(out);
        if self.admin_has_pending() {
            self.place_tasks(out);
        }
        let pending = self.submitter_has_pending()
            || self.worker_has_pending()
            || self.admin_has_pending()
            || self.asks_pending();
        if pending && self.timers.deadline(crate::Timer::Tasks).is_none() {
            let at = self.now_ms + self.task_tick_ms();
            self.timers.set(crate::Timer::Tasks, at, out);
        }
    }

    /// The tick timer fired.
    pub(crate) fn on_tasks_tick(&mut self, out: &mut Vec<crate::Command>) {
        self.submitter_tick(out);
        self.worker_tick(out);
        self.admin_tick(out);
        self.asks_tick(out);
    }
}

#[cfg(test)]
mod tests;
