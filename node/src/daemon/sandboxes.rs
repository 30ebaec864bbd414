//! The node's task sandboxes: Docker when it has task slots (a [`TaskRunner`] with warm pools,
//! which from recovery on also removes every node's stale sandboxes on this host every 15 s),
//! none otherwise; and, for a node that uses Docker, the reap at start of what its earlier runs
//! left behind.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chorus_core::{Core, Event, SharedSpec, TaskId};
use chorus_io::runtime::{NoSandboxes, TaskSandboxes};
use chorus_io::sandbox::docker::DockerProvider;
use chorus_io::sandbox::live::LiveSandboxes;
use chorus_io::sandbox::repo::RepoRoots;
use chorus_io::sandbox::tasks::{Ceilings, LogStore, TaskRunner, TaskRunnerConfig};
use chorus_io::sandbox::SandboxProvider;

use super::config::{
    NodeConfig, DEFAULT_LOGS_KEPT, DEFAULT_LOG_CAP_MB, DEFAULT_POOL_SIZE, DEFAULT_REAP_PERIOD_S,
};

/// The live sandboxes (`/sandboxes`) of a node with Docker task slots.
pub type Live = LiveSandboxes<DockerProvider>;

/// How long a starting node waits for the Docker Engine to answer.
const CONNECT_BOUND: Duration = Duration::from_secs(10);

/// How long a starting node's reap may take (a list and one removal per leftover sandbox).
const REAP_BOUND: Duration = Duration::from_secs(60);

/// For a node that uses Docker, at start: connects to the Engine and removes the sandboxes that
/// earlier runs of `node_id` left behind — those whose owner is gone or whose deadline passed
/// (`DockerProvider::reap`). A live owner's sandboxes and every other node's (CLI runs are
/// node `chorus-cli`) are left alone. Returns how many were removed. An Engine that does not
/// answer is an error saying so and what to do.
pub async fn reap_on_start(node_id: &str) -> anyhow::Result<usize> {
    let unreachable = |reason: String| {
        anyhow::anyhow!(
            "this node is configured to use Docker (--docker, or `docker = true` in \
             `[sandbox]`), but the Docker Engine does not answer: {reason}. Start Docker (or \
             point DOCKER_HOST at it), or run the node without --docker"
        )
    };
    let provider = tokio::time::timeout(CONNECT_BOUND, DockerProvider::connect())
        .await
        .map_err(|_| unreachable(format!("no answer within {CONNECT_BOUND:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    tokio::time::timeout(REAP_BOUND, provider.reap(node_id))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "removing this node's leftover Docker sandboxes took longer than {REAP_BOUND:?}"
            )
        })?
        .context("cannot remove this node's leftover Docker sandboxes")
}

/// The Docker Engine, taking repositories from `[repos]` alone (each the only place its mount
/// may come from), for what runs there: tasks and live sandboxes alike.
pub(super) async fn docker_provider(
    config: &NodeConfig,
    what: &str,
) -> anyhow::Result<DockerProvider> {
    let roots = RepoRoots::new(config.repos.values())
        .context("a repository of `[repos]` cannot be used")?;
    Ok(DockerProvider::connect()
        .await
        .with_context(|| format!("{what}, but the Docker Engine does not answer"))?
        .with_repo_roots(roots))
}

/// The Docker-backed task runner of a node with task slots: repositories from `[repos]` (each
/// the only place its mount may come from), warm pools as `[tasks]` says, and `ceilings` on
/// what one task may ask for.
pub(super) async fn task_runner(
    config: &NodeConfig,
    node_id: &str,
    ceilings: Ceilings,
    secret_key: Option<chorus_io::sandbox::tasks::SecretKey>,
    logs: Option<Arc<LogStore>>,
) -> anyhow::Result<TaskRunner<DockerProvider>> {
    let provider = docker_provider(config, "tasks run in Docker sandboxes").await?;
    let mut runner = TaskRunnerConfig::new(node_id);
    runner.repos = config.repos.clone();
    runner.pool_size = config.tasks.pool_size.unwrap_or(DEFAULT_POOL_SIZE) as usize;
    runner.reuse = config.tasks.reuse_sandboxes.unwrap_or(true);
    runner.warm_images = config.tasks.warm_images.clone();
    runner.ceilings = ceilings;
    runner.secret_key = secret_key;
    runner.logs = logs;
    runner.reap_period = Duration::from_secs(u64::from(
        config.tasks.reap_period_s.unwrap_or(DEFAULT_REAP_PERIOD_S),
    ));
    Ok(TaskRunner::new(provider, runner))
}

/// The store of the runs' whole output (`DATA_DIR/task-logs`, `[tasks] log_cap_mb` and
/// `logs_kept`); none when `log_cap_mb` is 0.
pub(super) fn task_logs(config: &NodeConfig) -> anyhow::Result<Option<Arc<LogStore>>> {
    let cap_mb = config.tasks.log_cap_mb.unwrap_or(DEFAULT_LOG_CAP_MB);
    if cap_mb == 0 {
        return Ok(None);
    }
    let kept = config.tasks.logs_kept.unwrap_or(DEFAULT_LOGS_KEPT);
    let store = LogStore::open(&config.data_dir, u64::from(cap_mb) << 20, kept as usize)
        .context("cannot keep the output of task runs")?;
    Ok(Some(Arc::new(store)))
}

/// The node's sandboxes: Docker when it has task slots, none otherwise.
pub(super) enum NodeSandboxes {
    Off(NoSandboxes),
    Docker(Box<TaskRunner<DockerProvider>>),
}

impl TaskSandboxes for NodeSandboxes {
    async fn recovered(&mut self, core: &Core) {
        match self {
            NodeSandboxes::Off(s) => s.recovered(core).await,
            NodeSandboxes::Docker(r) => r.recovered(core).await,
        }
    }

    fn start(&mut self, task: &TaskId, attempt: u32, spec: &SharedSpec) {
        match self {
            NodeSandboxes::Off(s) => s.start(task, attempt, spec),
            NodeSandboxes::Docker(r) => r.start(task, attempt, spec),
        }
    }

    fn stop(&mut self, task: &TaskId, attempt: u32) {
        match self {
            NodeSandboxes::Off(s) => s.stop(task, attempt),
            NodeSandboxes::Docker(r) => r.stop(task, attempt),
        }
    }

    async fn next_exit(&mut self) -> Event {
        match self {
            NodeSandboxes::Off(s) => s.next_exit().await,
            NodeSandboxes::Docker(r) => r.next_exit().await,
        }
    }
}
