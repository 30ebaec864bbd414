//! The Docker implementation of the sandbox (bollard, Engine API ≥ 1.41): policy → container
//! configuration, exec with enforced timeouts, file transfer, stats, and reaping by label.
//!
//! One concern a file:
//! - `provider.rs`: [`DockerProvider`] — connecting, creating sandboxes, reaping by label.
//! - `host_config.rs`: the policy mapped to the create request ([`container_config`]).
//! - `workspace.rs`: what appears at the workspace path ([`stage_workspace`]) and the sync back.
//! - `container.rs`: one container as the parts below see it (client, name, policy, exec
//!   bookkeeping): exec, files, stats and workspace work on it, not on the sandbox type.
//! - `sandbox.rs`: [`DockerSandbox`] (a container and its workspace) and its lifecycle (start,
//!   state, stop, remove).
//! - `exec.rs`: running one command — timeouts, the post-exec cleanup, OOM detection.
//! - `cgroup.rs`: the container's OOM-kill counter, read from the host.
//! - `end.rs`: the sandbox's supervisor (its main process) and its own end, armed through the
//!   supervisor's stdin (`end_after`); the sandbox ends when its node lets go of that stdin.
//! - `reset.rs`: a sandbox made ready for another run of its submitter, and checked (`reset`,
//!   or first in the next command's own exec, which then carries the command on stdin).
//! - `files.rs`: files and trees moved through exec ([`tree_to_tar`], [`tar_to_tree`]).
//! - `stats.rs`: live resource usage, with the docker CLI's formulas ([`cpu_percent`]).
//!
//! Design notes (why it is built this way):
//! - **Files go through exec**, not the archive API: Docker refuses archive uploads into a
//!   read-only root filesystem and cannot see tmpfs mounts from the host side. Writing with
//!   `cat`/`tar` inside the sandbox works for every writable place and gives files the sandbox
//!   user's ownership. It needs `sh`, `cat`, `mkdir`, `chmod` and `tar` in the image (the
//!   project's own image has them, see [`super::image`]).
//! - **Timeouts kill the process group inside the sandbox.** Docker cannot kill an exec. Each
//!   command runs as `sh -c 'echo $$; exec "$@"'`: Docker starts exec processes as session (and
//!   so process-group) leaders, the shell reports that pid on the first stdout line (stripped
//!   before the caller sees output), and on timeout a second exec runs the shell's `kill -9
//!   -<pgid>` as the same user (root without `CAP_KILL` could not). If the command's output does not end within
//!   a grace period after that (a child escaped the group), the whole container is killed.
//! - **Filtered repository mounts are staged copies** (see [`stage_workspace`]).
//! - **OOM is detected from the cgroup's `oom_kill` counter**, read from the host before and
//!   after each command (a container whose memory stays full cannot run a check of its own),
//!   else by the post-exec cleanup inside, else from the Engine's `State.OOMKilled` (Docker
//!   20.10 sets it only when the *main* process is killed); when none answers the result says
//!   the OOM state is unknown, never "no OOM".

mod agent;
mod agent_run;
mod cgroup;
mod container;
mod end;
mod exec;
mod files;
mod host_config;
mod provider;
mod reset;
mod sandbox;
mod stats;
mod workspace;

pub use cgroup::CgroupLayout;
pub use files::{tar_to_tree, tar_to_workspace, tree_to_tar, WorkspaceArchive};
pub use host_config::{container_config, host_config, ResolvedInputs, WorkspaceMount};
pub use provider::{is_stale, DockerProvider};
pub use sandbox::DockerSandbox;
pub use stats::{cpu_percent, memory_in_use};
pub use workspace::{stage_workspace, StagedWorkspace, SyncTarget};

/// The prefix of every label CHORUS puts on containers.
pub const LABEL_PREFIX: &str = "io.chorus.";
/// Label: the id of the node that owns the container.
pub const LABEL_NODE: &str = "io.chorus.node";
/// Label: the task the container runs.
pub const LABEL_TASK: &str = "io.chorus.task";
/// Label: creation time, seconds since the Unix epoch.
pub const LABEL_CREATED: &str = "io.chorus.created";
/// Label: marks a container as a CHORUS sandbox.
pub const LABEL_SANDBOX: &str = "io.chorus.sandbox";
/// Label: the host staging directory to delete with the container.
pub const LABEL_STAGING: &str = "io.chorus.staging";
/// Label: the owning process, `<pid>.<start ticks>` (see [`super::owner::Owner`]).
pub const LABEL_OWNER: &str = "io.chorus.owner";
/// Label: the boot id of the owner's host.
pub const LABEL_BOOT: &str = "io.chorus.boot";
/// Label: the inode of the owner's pid namespace (liveness is judged only from inside it).
pub const LABEL_PIDNS: &str = "io.chorus.pidns";
/// Label: the deadline, seconds since the Unix epoch; the main process ends then.
pub const LABEL_DEADLINE: &str = "io.chorus.deadline";
/// Environment variable marking every process of one exec (inherited by its children), so the
/// post-exec cleanup can tell them from a concurrent exec's.
pub const EXEC_ID_ENV: &str = "CHORUS_EXEC_ID";
