//! [`DockerSandbox`]: one container, and its lifecycle — start, state, stop, remove. Commands,
//! files and stats are in their own files (`exec`, `files`, `stats`); this file ties them into
//! the [`ExecutionSandbox`] trait.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use bollard::models::ContainerStateStatusEnum;
use bollard::query_parameters::StopContainerOptionsBuilder;
use bollard::Docker;
use tokio::sync::mpsc;

use super::provider::force_remove;
use super::stats::CpuSample;
use super::workspace::{StagedWorkspace, SyncTarget};
use crate::sandbox::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::{
    ExecOutput, ExecRequest, ExecutionSandbox, FileTree, OutputChunk, ResourceUsage, SandboxState,
    UsageTotals,
};

/// A sandbox backed by a Docker container.
///
/// Dropping it does **not** remove the container (that would need an async call in `Drop`);
/// call [`remove`](ExecutionSandbox::remove), and
/// [`SandboxProvider::reap`](crate::sandbox::SandboxProvider::reap) after a crash.
#[derive(Debug)]
pub struct DockerSandbox {
    pub(super) docker: Docker,
    pub(super) name: String,
    pub(super) container_id: String,
    pub(super) policy: SandboxPolicy,
    pub(super) workspace_path: String,
    pub(super) env: Mutex<BTreeMap<String, String>>,
    pub(super) staging_dir: Option<PathBuf>,
    /// The read-write repository's archive, unpacked into the workspace on the first start.
    pub(super) copy_in: Mutex<Option<Vec<u8>>>,
    /// Where a read-write workspace syncs back to.
    pub(super) sync: Option<SyncTarget>,
    pub(super) last_cpu: Mutex<Option<CpuSample>>,
    pub(super) oom_kills_seen: Mutex<u64>,
    /// The cgroup's totals as the last post-exec cleanup read them (the Engine's stats answer
    /// only at their once-a-second collection).
    pub(super) last_totals: Mutex<Option<UsageTotals>>,
    /// Every exec holds it shared; the post-exec cleanup takes it exclusively to kill all of the
    /// commands' user's processes, and falls back to killing only its own exec's when another
    /// exec is in flight.
    pub(super) exec_gate: tokio::sync::RwLock<()>,
    pub(super) exec_counter: AtomicU64,
    pub(super) removed: AtomicBool,
}

impl DockerSandbox {
    /// The sandbox for a freshly created container.
    pub(super) fn new(
        docker: Docker,
        name: String,
        container_id: String,
        policy: SandboxPolicy,
        workspace_path: String,
        staged: StagedWorkspace,
    ) -> Self {
        DockerSandbox {
            docker,
            name,
            container_id,
            policy,
            workspace_path,
            env: Mutex::new(BTreeMap::new()),
            staging_dir: staged.staging_dir,
            copy_in: Mutex::new(staged.copy_in),
            sync: staged.sync,
            last_cpu: Mutex::new(None),
            oom_kills_seen: Mutex::new(0),
            last_totals: Mutex::new(None),
            exec_gate: tokio::sync::RwLock::new(()),
            exec_counter: AtomicU64::new(0),
            removed: AtomicBool::new(false),
        }
    }

    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    /// The host directory mounted at the workspace path, when one was staged for this sandbox.
    pub fn staging_dir(&self) -> Option<&Path> {
        self.staging_dir.as_deref()
    }

    /// The policy the sandbox was created with.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
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

    /// Deletes the staging directory, if one was made (gone already is fine).
    fn remove_staging_dir(&self) -> SandboxResult<()> {
        let Some(dir) = &self.staging_dir else {
            return Ok(());
        };
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(SandboxError::io(
                format!("removing staging dir {}", dir.display()),
                e,
            )),
            _ => Ok(()),
        }
    }
}

impl ExecutionSandbox for DockerSandbox {
    fn id(&self) -> &str {
        &self.name
    }

    async fn start(&self) -> SandboxResult<()> {
        // 304: already running.
        unless_answered(
            self.docker.start_container(&self.name, None).await,
            &[304],
            ErrorCategory::Start,
            "start",
        )?;
        self.copy_repository_in().await
    }

    async fn exec(&self, request: ExecRequest) -> SandboxResult<ExecOutput> {
        self.run(request, None, true).await
    }

    async fn exec_streaming(
        &self,
        request: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> SandboxResult<ExecOutput> {
        self.run(request, Some(&sink), true).await
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> SandboxResult<()> {
        self.put_file(path, data, mode).await
    }

    async fn read_file(&self, path: &str) -> SandboxResult<Vec<u8>> {
        self.get_file(path).await
    }

    async fn write_tree(&self, dir: &str, tree: &FileTree) -> SandboxResult<()> {
        self.put_tree(dir, tree).await
    }

    async fn read_tree(&self, dir: &str) -> SandboxResult<FileTree> {
        self.get_tree(dir).await
    }

    fn set_env(&self, key: &str, value: &str) {
        self.lock_env().insert(key.to_string(), value.to_string());
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.lock_env().clone()
    }

    async fn usage(&self) -> SandboxResult<ResourceUsage> {
        self.sample_usage().await
    }

    async fn totals(&self) -> SandboxResult<UsageTotals> {
        let read = *self.last_totals.lock().unwrap_or_else(|p| p.into_inner());
        match read {
            Some(totals) => Ok(totals),
            None => self.sample_totals().await,
        }
    }

    async fn state(&self) -> SandboxResult<SandboxState> {
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

    async fn stop(&self) -> SandboxResult<()> {
        let options = StopContainerOptionsBuilder::new().t(1).build();
        // 304: stopped already; 404: gone.
        unless_answered(
            self.docker.stop_container(&self.name, Some(options)).await,
            &[304, 404],
            ErrorCategory::Start,
            "stop",
        )?;
        Ok(())
    }

    async fn remove(&self) -> SandboxResult<()> {
        // A read-write workspace goes back to its repository first (while the tmpfs exists).
        let synced = match &self.sync {
            Some(_) if !self.removed.load(Ordering::Relaxed) => Some(self.sync_workspace().await),
            _ => None,
        };
        unless_answered(
            self.docker
                .remove_container(&self.name, Some(force_remove()))
                .await,
            &[404],
            ErrorCategory::NotFound,
            "remove",
        )?;
        self.remove_staging_dir()?;
        self.removed.store(true, Ordering::Relaxed);
        if let Some(Err(e)) = synced {
            return Err(SandboxError::new(
                e.category,
                format!("the sandbox was removed, but its workspace was not synced back: {e}"),
            ));
        }
        Ok(())
    }
}
