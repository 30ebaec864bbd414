//! [`Container`]: one Docker container as the parts that run things in it see it — the Engine
//! client, its name and id, the policy, the environment, and the bookkeeping its commands share
//! (the exec gate and counter, OOM and CPU readings). `exec`, `files` and `stats` work on it
//! and `workspace` through it; [`DockerSandbox`](super::DockerSandbox) owns one and adds the
//! workspace and the lifecycle, so none of those parts imports the sandbox type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use bollard::models::ContainerStateStatusEnum;
use bollard::query_parameters::{RemoveContainerOptions, RemoveContainerOptionsBuilder};
use bollard::Docker;

use super::cgroup::{self, CgroupLayout};
use crate::sandbox::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::{SandboxState, UsageTotals};

/// A created container and what its commands share.
#[derive(Debug)]
pub(super) struct Container {
    pub(super) docker: Docker,
    pub(super) name: String,
    pub(super) container_id: String,
    pub(super) policy: SandboxPolicy,
    pub(super) workspace_path: String,
    pub(super) env: Mutex<BTreeMap<String, String>>,
    pub(super) last_cpu: Mutex<Option<CpuSample>>,
    /// The in-sandbox OOM counter as the post-exec cleanup last read it.
    pub(super) oom_kills_seen: Mutex<u64>,
    /// How the Engine lays out cgroups, for finding this container's from the host.
    pub(super) cgroup_layout: Option<CgroupLayout>,
    /// The host's OOM counter file of this container, once found.
    pub(super) oom_counter: Mutex<Option<PathBuf>>,
    /// The cgroup's totals as the last post-exec cleanup read them (the Engine's stats answer
    /// only at their once-a-second collection).
    pub(super) last_totals: Mutex<Option<UsageTotals>>,
    /// Every exec holds it shared; the post-exec cleanup takes it exclusively to kill all of the
    /// commands' user's processes, and falls back to killing only its own exec's when another
    /// exec is in flight.
    pub(super) exec_gate: tokio::sync::RwLock<()>,
    pub(super) exec_counter: AtomicU64,
    pub(super) removed: AtomicBool,
    /// Its main process is the supervisor of `end.rs`, attached to at the start.
    pub(super) supervised: bool,
    /// The supervisor's stdin and stdout once attached; the sandbox ends when this goes.
    pub(super) supervisor: tokio::sync::Mutex<Option<Supervisor>>,
    /// The command agent of a live sandbox (`agent.rs`), started at its first command.
    pub(super) agent: tokio::sync::Mutex<super::agent::AgentSlot>,
}

/// The node's end of the supervisor's stdin and stdout (see `end.rs`).
pub(super) struct Supervisor {
    pub(super) input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub(super) output: std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<bollard::container::LogOutput, bollard::errors::Error>,
                > + Send,
        >,
    >,
    /// Armings sent so far: each carries its number, so an answer can only match its own (a
    /// late answer to an arming that timed out is skipped).
    pub(super) armings: u64,
    /// The output's unfinished line, kept across armings (a chunk may end mid-line).
    pub(super) partial: Vec<u8>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Supervisor")
    }
}

/// A CPU sample for the docker CLI's CPU-percent formula (see `stats`).
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuSample {
    pub(super) total_ns: u64,
    pub(super) system_ns: u64,
    pub(super) online_cpus: u32,
}

impl Container {
    /// A freshly created container.
    pub(super) fn new(
        docker: Docker,
        name: String,
        container_id: String,
        policy: SandboxPolicy,
        workspace_path: String,
        cgroup_layout: Option<CgroupLayout>,
        supervised: bool,
    ) -> Self {
        Container {
            docker,
            name,
            container_id,
            policy,
            workspace_path,
            env: Mutex::new(BTreeMap::new()),
            last_cpu: Mutex::new(None),
            oom_kills_seen: Mutex::new(0),
            cgroup_layout,
            oom_counter: Mutex::new(None),
            last_totals: Mutex::new(None),
            exec_gate: tokio::sync::RwLock::new(()),
            exec_counter: AtomicU64::new(0),
            removed: AtomicBool::new(false),
            supervised,
            supervisor: tokio::sync::Mutex::new(None),
            agent: tokio::sync::Mutex::default(),
        }
    }

    /// The container's OOM-kill count as the host's cgroup file says it, when it can be read:
    /// the file is looked for once the container runs (its cgroup exists from its start) and
    /// again after a failed read.
    pub(super) fn host_oom_kills(&self) -> Option<u64> {
        let mut counter = self.oom_counter.lock().unwrap_or_else(|p| p.into_inner());
        if counter.is_none() {
            *counter = cgroup::find_counter(
                Path::new(cgroup::CGROUP_ROOT),
                self.cgroup_layout,
                &self.container_id,
            );
        }
        let count = cgroup::read_oom_kills(counter.as_deref()?);
        if count.is_none() {
            *counter = None;
        }
        count
    }

    /// The container's usage totals read from its cgroup on the host (where its OOM counter
    /// was found), if they can be.
    pub(super) fn host_totals(&self) -> Option<UsageTotals> {
        let counter = self.oom_counter.lock().unwrap_or_else(|p| p.into_inner());
        cgroup::read_totals(Path::new(cgroup::CGROUP_ROOT), counter.as_deref()?)
    }

    pub(super) fn lock_env(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        // A poisoned lock only means a panic elsewhere while holding a plain map; the map is
        // still consistent.
        self.env.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error for a command that met a main process already gone.
    pub(super) fn exited_error(&self, exit_code: i64, oom_killed: bool) -> SandboxError {
        if oom_killed {
            SandboxError::new(
                ErrorCategory::ResourceLimit,
                format!(
                    "sandbox {} main process was OOM-killed (exit code {exit_code})",
                    self.name
                ),
            )
        } else {
            SandboxError::new(
                ErrorCategory::Exited,
                format!(
                    "sandbox {} main process exited with code {exit_code}",
                    self.name
                ),
            )
        }
    }

    /// The container's state as the Engine reports it (removed once removed here).
    pub(super) async fn state(&self) -> SandboxResult<SandboxState> {
        if self.removed.load(Ordering::Relaxed) {
            return Ok(SandboxState::Removed);
        }
        let Some(info) = unless_answered(
            self.docker.inspect_container(&self.name, None).await,
            &[404],
            ErrorCategory::NotFound,
            "inspect",
        )?
        else {
            return Ok(SandboxState::Removed);
        };
        let state = info.state.unwrap_or_default();
        Ok(match state.status {
            Some(ContainerStateStatusEnum::CREATED) => SandboxState::Created,
            Some(
                ContainerStateStatusEnum::RUNNING
                | ContainerStateStatusEnum::PAUSED
                | ContainerStateStatusEnum::RESTARTING,
            ) => SandboxState::Running,
            Some(ContainerStateStatusEnum::REMOVING) => SandboxState::Removed,
            _ => SandboxState::Exited {
                exit_code: state.exit_code.unwrap_or(-1),
                oom_killed: state.oom_killed.unwrap_or(false),
            },
        })
    }
}

/// Remove options that also kill a running container and drop its anonymous volumes.
pub(super) fn force_remove() -> RemoveContainerOptions {
    RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build()
}
