//! [`DockerSandbox`]: one container ([`Container`]) with its workspace, and its lifecycle —
//! start, state, stop, remove. Commands, files and stats run on the container (`exec`, `files`,
//! `stats`); this file ties them into the [`ExecutionSandbox`] trait.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use bollard::query_parameters::StopContainerOptionsBuilder;
use tokio::sync::mpsc;

use super::container::{force_remove, Container};
use super::host_config::WorkspaceMount;
use super::workspace::{copy_repository_in, sync_workspace, StagedWorkspace, SyncTarget};
use crate::sandbox::error::{unless_answered, ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::repo::SyncReport;
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
    container: Container,
    staging_dir: Option<PathBuf>,
    /// The read-write repository's archive, unpacked into the workspace on the first start.
    copy_in: Mutex<Option<Vec<u8>>>,
    /// Where a read-write workspace syncs back to, and what the host holds as it does (one
    /// sync at a time).
    sync: Option<tokio::sync::Mutex<SyncTarget>>,
    /// Its workspace is its own tmpfs (no repository in it): the condition for a reset.
    own_workspace: bool,
}

impl DockerSandbox {
    /// The sandbox for a freshly created container and its staged workspace.
    pub(super) fn new(container: Container, staged: StagedWorkspace) -> Self {
        DockerSandbox {
            container,
            own_workspace: matches!(staged.mount, WorkspaceMount::Tmpfs)
                && staged.staging_dir.is_none()
                && staged.copy_in.is_none()
                && staged.sync.is_none(),
            staging_dir: staged.staging_dir,
            copy_in: Mutex::new(staged.copy_in),
            sync: staged.sync.map(tokio::sync::Mutex::new),
        }
    }

    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.container.container_id
    }

    /// The host directory mounted at the workspace path, when one was staged for this sandbox.
    pub fn staging_dir(&self) -> Option<&Path> {
        self.staging_dir.as_deref()
    }

    /// The policy the sandbox was created with.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.container.policy
    }

    /// The places a reset empties, each with the mode its root had when made; refused for a
    /// sandbox with a repository in its workspace (never reused).
    fn reset_places(&self) -> SandboxResult<Vec<(String, Option<u32>)>> {
        if !self.own_workspace {
            return Err(SandboxError::new(
                ErrorCategory::Unsupported,
                "a sandbox with a repository in its workspace is never reused",
            ));
        }
        let policy = &self.container.policy;
        let workspace_mode = if policy.numeric_user().is_some() {
            0o755
        } else {
            0o1777
        };
        let mut places: Vec<(String, Option<u32>)> = policy
            .tmpfs
            .iter()
            .map(|t| (t.path.clone(), Some(t.mode)))
            .collect();
        places.push((self.container.workspace_path.clone(), Some(workspace_mode)));
        places.push(("/dev/shm".to_owned(), Some(0o1777)));
        Ok(places)
    }

    /// For a request to run after a reset: the reset's arguments where it goes in the
    /// command's exec, else `None` after a reset of its own. A sandbox that cannot be reset
    /// is [`ErrorCategory::NotClean`]: nothing of the request ran.
    async fn reset_for(&self, request: &ExecRequest) -> SandboxResult<Option<Vec<String>>> {
        if !request.after_reset {
            return Ok(None);
        }
        let not_clean = |e: SandboxError| SandboxError::not_clean(&self.container.name, e.message);
        let places = self.reset_places().map_err(not_clean)?;
        if self.container.policy.exec_wrapper && super::reset::can_run_after_reset(request) {
            return self
                .container
                .reset_args(&places)
                .map(Some)
                .map_err(not_clean);
        }
        self.container
            .reset(&places)
            .await
            .map_err(|e| match e.category {
                ErrorCategory::NotClean => e,
                _ => not_clean(e),
            })?;
        Ok(None)
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
        &self.container.name
    }

    async fn start(&self) -> SandboxResult<()> {
        // Before the start, as `docker run` attaches: the supervisor's first read must find
        // its stdin held.
        let container = &self.container;
        if container.supervised && container.supervisor.lock().await.is_none() {
            container.attach_supervisor().await?;
        }
        // 304: already running.
        unless_answered(
            self.container
                .docker
                .start_container(&self.container.name, None)
                .await,
            &[304],
            ErrorCategory::Start,
            "start",
        )?;
        copy_repository_in(&self.container, &self.copy_in).await
    }

    async fn exec(&self, request: ExecRequest) -> SandboxResult<ExecOutput> {
        let reset = self.reset_for(&request).await?;
        let clean_up = !request.keep_processes;
        self.container.run(request, None, clean_up, reset).await
    }

    async fn exec_streaming(
        &self,
        request: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> SandboxResult<ExecOutput> {
        let reset = self.reset_for(&request).await?;
        let clean_up = !request.keep_processes;
        self.container
            .run(request, Some(&sink), clean_up, reset)
            .await
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> SandboxResult<()> {
        self.container.put_file(path, data, mode).await
    }

    async fn read_file(&self, path: &str) -> SandboxResult<Vec<u8>> {
        self.container.get_file(path).await
    }

    async fn read_file_streaming(
        &self,
        path: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> SandboxResult<()> {
        self.container.stream_file_out(path, limit, sink).await
    }

    async fn write_file_streaming(
        &self,
        path: &str,
        mode: u32,
        limit: u64,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> SandboxResult<u64> {
        self.container
            .stream_file_in(path, mode, limit, source)
            .await
    }

    async fn write_tree(&self, dir: &str, tree: &FileTree) -> SandboxResult<()> {
        self.container.put_tree(dir, tree).await
    }

    async fn read_tree(&self, dir: &str) -> SandboxResult<FileTree> {
        self.container.get_tree(dir).await
    }

    async fn write_tree_streaming(
        &self,
        dir: &str,
        limit: u64,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> SandboxResult<()> {
        self.container.stream_tree_in(dir, limit, source).await
    }

    async fn read_tree_streaming(
        &self,
        dir: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> SandboxResult<()> {
        self.container.stream_tree_out(dir, limit, sink).await
    }

    fn set_env(&self, key: &str, value: &str) {
        self.container
            .lock_env()
            .insert(key.to_string(), value.to_string());
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.container.lock_env().clone()
    }

    async fn usage(&self) -> SandboxResult<ResourceUsage> {
        self.container.sample_usage().await
    }

    async fn totals(&self) -> SandboxResult<UsageTotals> {
        let read = *self
            .container
            .last_totals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match read {
            Some(totals) => Ok(totals),
            None => self.container.sample_totals().await,
        }
    }

    async fn state(&self) -> SandboxResult<SandboxState> {
        self.container.state().await
    }

    async fn end_after(&self, after: Duration) -> SandboxResult<()> {
        self.container.end_after(after).await
    }

    async fn reset(&self) -> SandboxResult<()> {
        self.container.reset(&self.reset_places()?).await
    }

    fn resets_in_exec(&self) -> bool {
        self.container.policy.exec_wrapper
            && self
                .reset_places()
                .and_then(|places| self.container.reset_args(&places))
                .is_ok()
    }

    async fn end_leftovers(&self) -> SandboxResult<()> {
        self.container.end_leftovers().await
    }

    async fn stop(&self) -> SandboxResult<()> {
        let options = StopContainerOptionsBuilder::new().t(1).build();
        // 304: stopped already; 404: gone.
        unless_answered(
            self.container
                .docker
                .stop_container(&self.container.name, Some(options))
                .await,
            &[304, 404],
            ErrorCategory::Start,
            "stop",
        )?;
        Ok(())
    }

    async fn sync_workspace(&self) -> SandboxResult<SyncReport> {
        sync_workspace(&self.container, self.sync.as_ref()).await
    }

    async fn remove(&self) -> SandboxResult<()> {
        self.remove_reporting().await.map(drop)
    }

    async fn remove_reporting(&self) -> SandboxResult<Option<String>> {
        let removed = &self.container.removed;
        // A read-write workspace goes back to its repository first (while the tmpfs exists).
        let synced = match &self.sync {
            Some(_) if !removed.load(Ordering::Relaxed) => Some(self.sync_workspace().await),
            _ => None,
        };
        unless_answered(
            self.container
                .docker
                .remove_container(&self.container.name, Some(force_remove()))
                .await,
            &[404],
            ErrorCategory::NotFound,
            "remove",
        )?;
        self.remove_staging_dir()?;
        removed.store(true, Ordering::Relaxed);
        match synced {
            Some(Err(e)) => {
                return Err(SandboxError::new(
                    e.category,
                    format!("the sandbox was removed, but its workspace was not synced back: {e}"),
                ))
            }
            Some(Ok(report)) if report.summary().is_some() => {
                // A `.git` change, a git directory or a symlinked place a task tried to carry
                // back, a file it left as something else, or a stream that stopped early:
                // worth a look.
                tracing::warn!(
                    sandbox = %self.container.name,
                    written = report.written,
                    deleted = report.deleted,
                    refused = report.refused.len(),
                    first_refused = %crate::log_fields::quoted(report.refused.iter().take(10)),
                    kept = report.kept.len(),
                    first_kept = %crate::log_fields::quoted(report.kept.iter().take(10)),
                    incomplete = %crate::log_fields::quoted(report.incomplete.iter()),
                    "sync back did not carry everything"
                );
                return Ok(report.summary());
            }
            _ => {}
        }
        Ok(None)
    }
}
