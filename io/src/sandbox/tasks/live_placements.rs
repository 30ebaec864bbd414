//! Live sandboxes the cluster placed on this worker (docs/design.md §4.8, issue 53): a
//! placement of a live spec is made in the worker's registry ([`LiveSandboxes`]) under the
//! task's id, for its submitter, and lives there until it ends; that end is the run's end the
//! core takes. Rules:
//!
//! 1. **Made once, under the task's id.** The sandbox's id is the task id's text, its owner
//!    the spec's submitter, its lifetime the spec's `timeout_ms` and its idle timeout
//!    `idle_ms` (0: the registry's default). A spec above this worker's ceilings, a secret it
//!    cannot open, or a sandbox that cannot be made ends the run failed, never retried (a
//!    live sandbox is placed at most once: `place.rs` rule 14), and later calls for the id
//!    answer gone with why. A repository the spec names is this worker's `[repos]` entry,
//!    as a task's: bind-mounted read-only, or a read-write copy in the sandbox's tmpfs that
//!    a sync, a close and the removal carry back (`repo` module's rules).
//! 2. **Its end is the run's.** Closed (by its owner, an operator, or the cluster) is an exit
//!    0 whose stderr says by whom; idle or expired is a timeout; lost (the sandbox died) is a
//!    failure, not retried.
//! 3. **A stop ends it** as closed by the cluster (the task was cancelled, or the cluster let
//!    the placement go), also when the stop comes while it is being made.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chorus_core::{Event, SandboxExit, SharedSpec, TaskId};
use tokio::sync::mpsc;

use super::super::live::{Caller, CreateLive, GoneWhy, LiveSandboxes};
use super::super::{RepoMount, SandboxPolicy, SandboxProvider, SandboxSpec};
use super::{secret, TaskRunnerConfig, TaskShape};

/// Who closes a sandbox whose placement the cluster stopped.
pub const BY_THE_CLUSTER: &str = "the cluster (its task was cancelled or let go)";

/// A live sandbox's spec on node `node`: `image`, labelled live (so a reap and an operator
/// can tell it from a task's).
pub fn live_sandbox_spec(node: &str, id: &str, image: &str) -> SandboxSpec {
    let mut spec = SandboxSpec::new(node, id, image);
    spec.labels.insert("live".into(), "true".into());
    spec
}

/// One placement being made or living.
struct Placed {
    task: TaskId,
    attempt: u32,
    made: Instant,
    /// A stop came (rule 3): end it as soon as it is made.
    stopped: bool,
}

type Runs = Arc<Mutex<BTreeMap<String, Placed>>>;

fn lock(runs: &Runs) -> MutexGuard<'_, BTreeMap<String, Placed>> {
    // A map of plain records: a panic elsewhere cannot leave it inconsistent.
    runs.lock().unwrap_or_else(|p| p.into_inner())
}

/// The live placements of one worker.
pub(super) struct LivePlacements<P: SandboxProvider + 'static> {
    registry: Arc<LiveSandboxes<P>>,
    runs: Runs,
    ended: mpsc::UnboundedSender<Event>,
}

impl<P: SandboxProvider + 'static> LivePlacements<P> {
    /// Placements made in `registry`, their ends sent to `ended` (rule 2). Spawns the watcher
    /// of the registry's ends on the current runtime; it ends with the registry.
    pub(super) fn new(
        registry: Arc<LiveSandboxes<P>>,
        ended: mpsc::UnboundedSender<Event>,
    ) -> Self {
        let runs: Runs = Arc::default();
        let mut ends = registry.watch_ends();
        let (watched, to) = (Arc::clone(&runs), ended.clone());
        tokio::spawn(async move {
            while let Some((id, why)) = ends.recv().await {
                let placed = lock(&watched).remove(&id);
                if let Some(placed) = placed {
                    let _ = to.send(end_event(placed, &why));
                }
            }
        });
        LivePlacements {
            registry,
            runs,
            ended,
        }
    }

    /// Makes the placement `attempt` of `task` (rule 1).
    pub(super) fn start(
        &self,
        config: &TaskRunnerConfig,
        task: &TaskId,
        attempt: u32,
        spec: &SharedSpec,
    ) {
        let id = task.to_string();
        lock(&self.runs).insert(
            id.clone(),
            Placed {
                task: task.clone(),
                attempt,
                made: Instant::now(),
                stopped: false,
            },
        );
        let owner = spec.submitter.clone().unwrap_or_default();
        let create = request(config, &id, spec);
        let (registry, runs, ended) = (
            Arc::clone(&self.registry),
            Arc::clone(&self.runs),
            self.ended.clone(),
        );
        tokio::spawn(async move {
            let made = match create {
                Ok(req) => registry
                    .create(&Caller::owner(owner.clone()), req)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Err(why) => Err(why),
            };
            match made {
                Ok(()) => {
                    // A stop that came while it was made (rule 3).
                    let stopped = lock(&runs).get(&id).is_some_and(|p| p.stopped);
                    if stopped {
                        let by = BY_THE_CLUSTER.to_string();
                        registry.end_by(&id, GoneWhy::Closed { by }).await;
                    }
                }
                Err(why) => {
                    let placed = lock(&runs).remove(&id);
                    registry.remember_failed(&id, &owner, why.clone());
                    if let Some(p) = placed {
                        tracing::warn!(task = %p.task, error = %why, "a live sandbox could not be made");
                        let _ = ended.send(Event::SandboxFailed {
                            task: p.task,
                            attempt: p.attempt,
                            error: format!("sandbox: {why}"),
                            retryable: false,
                        });
                    }
                }
            }
        });
    }

    /// Whether `attempt` of `task` is a live placement here; if so it is ended as closed by
    /// the cluster (rule 3).
    pub(super) fn stop(&self, task: &TaskId, attempt: u32) -> bool {
        let id = task.to_string();
        {
            let mut runs = lock(&self.runs);
            match runs.get_mut(&id) {
                Some(p) if p.attempt == attempt => p.stopped = true,
                _ => return false,
            }
        }
        let registry = Arc::clone(&self.registry);
        tokio::spawn(async move {
            let by = BY_THE_CLUSTER.to_string();
            registry.end_by(&id, GoneWhy::Closed { by }).await;
        });
        true
    }
}

/// The registry's create for the placement `id` of `spec`, or why it is refused (rule 1).
fn request(config: &TaskRunnerConfig, id: &str, spec: &SharedSpec) -> Result<CreateLive, String> {
    config
        .ceilings
        .check(spec)
        .map_err(|why| format!("policy_violation: {why}"))?;
    let env = secret::open_env(&spec.env, config.secret_key.as_ref())
        .map_err(|why| format!("policy_violation: {why}"))?;
    let mut sandbox = live_sandbox_spec(&config.node_id, id, &spec.image);
    sandbox.env = env;
    if let Some(repo) = &spec.repo {
        // The admin placed it on a worker offering `repo:NAME`; this one's config decides.
        let Some(path) = config.repos.get(&repo.name) else {
            return Err(format!(
                "policy_violation: this node has no repository `{}`",
                repo.name
            ));
        };
        sandbox = sandbox.with_workspace(if repo.writable {
            RepoMount::read_write(path)
        } else {
            RepoMount::read_only(path)
        });
    }
    Ok(CreateLive {
        id: id.to_string(),
        idempotency_key: None,
        spec: sandbox,
        policy: TaskShape::of(spec).policy(&live_base_policy()),
        idle: (spec.idle_ms > 0).then(|| Duration::from_millis(spec.idle_ms)),
        lifetime: Some(Duration::from_millis(spec.timeout_ms)),
    })
}

/// The policy every live sandbox starts from (its limits over it): the default, hardened one,
/// as the warm live pool's.
pub fn live_base_policy() -> SandboxPolicy {
    SandboxPolicy::default()
}

/// The core's event for a placement that ended so (rule 2).
fn end_event(placed: Placed, why: &GoneWhy) -> Event {
    let exit = |exit: SandboxExit| Event::SandboxExited {
        task: placed.task.clone(),
        attempt: placed.attempt,
        exit: SandboxExit {
            duration_ms: placed.made.elapsed().as_millis() as u64,
            stderr: format!("chorus: the live sandbox ended: {why}\n"),
            ..exit
        },
    };
    match why {
        GoneWhy::Closed { .. } => exit(SandboxExit {
            exit_code: Some(0),
            ..SandboxExit::default()
        }),
        GoneWhy::Idle | GoneWhy::Expired => exit(SandboxExit {
            signal: Some(9),
            timed_out: true,
            ..SandboxExit::default()
        }),
        GoneWhy::Lost { .. } | GoneWhy::Failed { .. } => Event::SandboxFailed {
            task: placed.task,
            attempt: placed.attempt,
            error: format!("sandbox: the live sandbox {why}"),
            retryable: false,
        },
    }
}
