//! Tasks on sandboxes: [`TaskRunner`] is the runtime loop's [`TaskSandboxes`] over any
//! [`SandboxProvider`] — the Docker provider on a node, the scripted double in tests.
//!
//! Rules:
//! 1. **A sandbox is one submitter's.** A run takes a running sandbox from the warm pool of its
//!    [`TaskShape`] (image, limits, network) when its timeout fits the pooled sandboxes'
//!    lifetime, else (a repository mount, a very long timeout, pools off) a fresh sandbox made
//!    for it alone. A fresh one is removed after its run. A pooled one is too, unless `reuse`
//!    is on and the run's command exited by itself (not stopped, timed out, killed or failed):
//!    then it is given back to its pool under the key (task origin, submitter), reset in the
//!    background (`ExecutionSandbox::reset`: every process of the commands' user killed, every
//!    writable place emptied, checked), and taken only by a later run with the same key and
//!    shape — before the watchdog its run armed could fire ([`REUSE_MARGIN`]).
//! 2. **A run's sandbox ends by itself at the run's timeout plus `run_grace`**, enforced inside
//!    it, so nothing a run started outlives that even when no node is left on the host to reap:
//!    a fresh sandbox lives `timeout + run_grace` from its start (its deadline label says the
//!    same, from its creation), and a pooled one (made before the run, for an hour) is armed,
//!    before the command starts, to end `timeout + run_grace` later
//!    (`ExecutionSandbox::end_after`: a line to the sandbox's supervisor, which also ends the
//!    sandbox at once when the node holding its stdin goes, `kill -9` included; see
//!    `io/src/sandbox/docker/end.rs`). Where the end cannot be armed (a policy without init or
//!    exec wrapper) the run goes on, with a warning, bounded by the pooled sandbox's own
//!    lifetime and the periodic reap (and the node's own reap of its sandboxes when it starts
//!    again).
//! 3. **Pools are made on demand and bounded.** The first run of a shape makes its pool (and
//!    waits like a cold start); `warm_images` are pooled at recovery. At most `max_pools`
//!    shapes are kept (the least recently used is dropped); a pool whose sandboxes cannot be
//!    made for a reason that will not go away (a missing image) is dropped at once, so it does
//!    not retry in the background for ever.
//! 4. **Every run ends once** on the channel [`TaskRunner::next_exit`] reads (cancel safe): as
//!    [`Event::SandboxExited`] (exit code, OOM, timeout, output tails of at most
//!    `chorus_core::MAX_TAIL_BYTES` each and the bytes dropped before them, duration) or
//!    [`Event::SandboxFailed`] (the sandbox error's category and message, and its `retryable`
//!    flag). The core cuts the tails further if their encoding would not fit a frame.
//! 5. **Stop kills the run:** its command is abandoned and its sandbox removed (forced), and the
//!    end is an exit by signal 9, which the core records as cancelled.
//! 6. **A graceful stop stops every run** ([`ShutdownHandle::shutdown`]): each removes its
//!    sandbox as a cancellation does, so no run outlives its node's graceful stop.
//! 7. **Recovery reaps, and so does every period after it.** [`TaskSandboxes::recovered`]
//!    removes this node's sandboxes that an earlier process left (owner gone or deadline passed:
//!    `SandboxProvider::reap`), before the core steps `Started` and counts those runs as
//!    retryable failures; then every `reap_period` it removes the stale sandboxes of any owner
//!    on the host (`SandboxProvider::reap_stale`), so a node killed with `kill -9` leaves
//!    nothing behind for longer than a period while any node runs on its host.
//! 8. **A run's whole output goes to its log** when the runner has a [`LogStore`]
//!    (`TaskRunnerConfig::logs`): stdout and stderr apart, the first `cap` bytes of each, ended
//!    before the run's end is sent, so whoever sees the result finds the log finished. A log
//!    that cannot be made (a link at its name) is warned about; the run goes on without it.

mod ceilings;
mod live_placements;
pub mod logs;
mod reaper;
mod run;
pub mod secret;
mod shape;
mod stats;
mod tail;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chorus_core::{Core, Event, SharedSpec, TaskId};
use tokio::sync::{mpsc, oneshot};

use super::{PoolConfig, SandboxPolicy, SandboxPool, SandboxProvider, SandboxSpec};
use crate::runtime::TaskSandboxes;

pub use ceilings::Ceilings;
pub use live_placements::{live_base_policy, live_sandbox_spec, BY_THE_CLUSTER};
pub use logs::{LogStore, LogWriter};
pub use reaper::REAP_PERIOD;
pub use secret::SecretKey;
pub use shape::{lifetime_for, TaskShape};
pub use stats::{Observed, RunnerCounts, RunnerStats, START_BUCKETS_S};
pub use tail::Tails;

/// How long a graceful stop waits for the runs it stopped to remove their sandboxes.
pub const STOP_RUNS_BOUND: Duration = Duration::from_secs(30);

/// How long after a run's timeout its sandbox ends by itself at the latest, unless configured
/// otherwise: what the node does after the timeout (kill the command, clean up, read the usage,
/// remove the sandbox, sync a read-write repository back) must fit in it.
pub const RUN_GRACE: Duration = Duration::from_secs(30);

/// A sandbox given back is taken again only this long before the watchdog its last run armed
/// would end it (`timeout + run_grace` after that run's start): room for the next run's arming,
/// which replaces that watchdog, to finish first.
pub const REUSE_MARGIN: Duration = Duration::from_secs(15);

/// How a [`TaskRunner`] runs tasks.
#[derive(Clone, Debug)]
pub struct TaskRunnerConfig {
    /// The node id its sandboxes are labelled with (and reaped by).
    pub node_id: String,
    /// Repositories by name → resolved host directory (`[repos]` in the node's config). The
    /// provider must accept them (its repository roots).
    pub repos: BTreeMap<String, PathBuf>,
    /// Warm sandboxes kept per shape; 0: every run makes its own sandbox.
    pub pool_size: usize,
    /// Shapes pooled at once.
    pub max_pools: usize,
    /// Images whose default shape is pooled from the start.
    pub warm_images: Vec<String>,
    /// The policy every task starts from; its limits are the defaults a spec's zeros keep.
    pub base_policy: SandboxPolicy,
    /// Pooled sandboxes live this long (their deadline); a run whose timeout does not fit in
    /// what is left after `max_idle_age` gets a fresh sandbox.
    pub pool_lifetime: Duration,
    /// Idle pooled sandboxes older than this are replaced.
    pub max_idle_age: Duration,
    /// The most one task may ask for; a spec above them fails without a sandbox (not retried).
    pub ceilings: Ceilings,
    /// Opens secret environment values (the cluster's pre-shared key); none: a task with
    /// one fails, not retried.
    pub secret_key: Option<SecretKey>,
    /// How often the stale sandboxes of any owner on this host are removed, from recovery on
    /// ([`REAP_PERIOD`]); zero: never (only this node's, at recovery).
    pub reap_period: Duration,
    /// How long after its timeout a run's sandbox ends by itself ([`RUN_GRACE`]; rule 2).
    pub run_grace: Duration,
    /// Where each run's whole output is kept (up to its cap) for `chorus task logs`; none:
    /// only the result's tails.
    pub logs: Option<Arc<LogStore>>,
    /// Give a pooled sandbox back for the next run of the same submitter and shape after a
    /// run that exited by itself (rule 1).
    pub reuse: bool,
}

impl TaskRunnerConfig {
    /// Defaults for node `node_id`: pools of 2, at most 8 shapes, pooled sandboxes living an
    /// hour and replaced after 10 idle minutes (so tasks with timeouts up to 48½ minutes use
    /// them), runs ending by themselves 30 s after their timeout, a reap every 15 s, the default
    /// (hardened) policy, no repositories.
    pub fn new(node_id: impl Into<String>) -> Self {
        TaskRunnerConfig {
            node_id: node_id.into(),
            repos: BTreeMap::new(),
            pool_size: 2,
            max_pools: 8,
            warm_images: Vec::new(),
            base_policy: SandboxPolicy::default(),
            pool_lifetime: Duration::from_secs(3_600),
            max_idle_age: Duration::from_secs(600),
            ceilings: Ceilings::default(),
            secret_key: None,
            reap_period: REAP_PERIOD,
            run_grace: RUN_GRACE,
            logs: None,
            reuse: false,
        }
    }

    /// The longest timeout a pooled sandbox can serve: one taken at the oldest idle age still
    /// lives past the run's own end (timeout + grace), with a minute to spare.
    pub fn max_pooled_timeout(&self) -> Duration {
        self.pool_lifetime
            .saturating_sub(self.max_idle_age)
            .saturating_sub(self.run_grace)
            .saturating_sub(Duration::from_secs(60))
    }
}

/// A pool and when it was last used (for dropping the least recently used).
struct PoolEntry<P: SandboxProvider + 'static> {
    pool: Arc<SandboxPool<P>>,
    used: u64,
}

/// What the runs share with the runner.
struct Shared<P: SandboxProvider + 'static> {
    provider: P,
    config: TaskRunnerConfig,
    stats: Arc<RunnerStats>,
    pools: Mutex<(u64, BTreeMap<TaskShape, PoolEntry<P>>)>,
    /// Runs going: how to stop each (here, not in the runner, so a node stopping after its
    /// runtime loop returned can still stop them).
    runs: Mutex<BTreeMap<(TaskId, u32), oneshot::Sender<()>>>,
    /// Spawned runs not yet ended (their sandboxes may still exist).
    active: AtomicUsize,
    /// The periodic reap, once recovery started it.
    reaper: Mutex<Option<tokio::task::AbortHandle>>,
}

impl<P: SandboxProvider + Clone + 'static> Shared<P> {
    fn lock_runs(&self) -> MutexGuard<'_, BTreeMap<(TaskId, u32), oneshot::Sender<()>>> {
        // A map of senders: a panic elsewhere cannot leave it inconsistent.
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_pools(&self) -> MutexGuard<'_, (u64, BTreeMap<TaskShape, PoolEntry<P>>)> {
        // A map of handles: a panic elsewhere cannot leave it inconsistent.
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool of `shape`, made (and the least recently used one dropped) if needed.
    fn pool(&self, shape: &TaskShape) -> Arc<SandboxPool<P>> {
        let mut guard = self.lock_pools();
        let (clock, pools) = &mut *guard;
        *clock += 1;
        if let Some(entry) = pools.get_mut(shape) {
            entry.used = *clock;
            return Arc::clone(&entry.pool);
        }
        while pools.len() >= self.config.max_pools.max(1) {
            let oldest = pools
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(s, _)| s.clone());
            match oldest {
                // Dropping the pool removes its idle sandboxes; leased ones stay with their runs.
                Some(s) => {
                    pools.remove(&s);
                }
                None => break,
            }
        }
        let mut template = SandboxSpec::new(&self.config.node_id, "pool", &shape.image);
        template.lifetime = self.config.pool_lifetime;
        let config = PoolConfig {
            size: self.config.pool_size,
            max_idle_age: self.config.max_idle_age,
            ..PoolConfig::default()
        };
        let pool = Arc::new(SandboxPool::new(
            self.provider.clone(),
            template,
            shape.policy(&self.config.base_policy),
            config,
        ));
        tracing::info!(image = %shape.image, memory_mb = shape.memory_mb,
            cpu_millis = shape.cpu_millis, pids = shape.pids, network = shape.network,
            size = self.config.pool_size, "warm sandbox pool started");
        pools.insert(
            shape.clone(),
            PoolEntry {
                pool: Arc::clone(&pool),
                used: *clock,
            },
        );
        pool
    }

    /// Drops the pool of `shape` if it is still `pool` (its sandboxes cannot be made).
    fn drop_pool(&self, shape: &TaskShape, pool: &Arc<SandboxPool<P>>) {
        let mut guard = self.lock_pools();
        if guard
            .1
            .get(shape)
            .is_some_and(|e| Arc::ptr_eq(&e.pool, pool))
        {
            guard.1.remove(shape);
            tracing::warn!(image = %shape.image, "dropped a warm sandbox pool whose sandboxes cannot be made");
        }
    }
}

/// Runs the core's tasks in sandboxes of one provider. See the [module docs](self).
pub struct TaskRunner<P: SandboxProvider + Clone + 'static> {
    shared: Arc<Shared<P>>,
    ended_tx: mpsc::UnboundedSender<Event>,
    ended_rx: mpsc::UnboundedReceiver<Event>,
    /// Live sandboxes the cluster places here, when this worker keeps a registry of them.
    live: Option<live_placements::LivePlacements<P>>,
}

impl<P: SandboxProvider + Clone + 'static> std::fmt::Debug for TaskRunner<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskRunner")
            .field("node_id", &self.shared.config.node_id)
            .field("runs", &self.running())
            .finish()
    }
}

impl<P: SandboxProvider + Clone + 'static> TaskRunner<P> {
    /// A runner over `provider`. Runs are spawned on the current Tokio runtime.
    pub fn new(provider: P, config: TaskRunnerConfig) -> Self {
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        TaskRunner {
            shared: Arc::new(Shared {
                provider,
                config,
                stats: Arc::new(RunnerStats::default()),
                pools: Mutex::new((0, BTreeMap::new())),
                runs: Mutex::new(BTreeMap::new()),
                active: AtomicUsize::new(0),
                reaper: Mutex::new(None),
            }),
            ended_tx,
            ended_rx,
            live: None,
        }
    }

    /// Makes the live sandboxes the cluster places here in `registry` (`live_placements`),
    /// and reports their ends as the runs' ends. Without it a live placement fails at once.
    /// Call within a Tokio runtime.
    pub fn with_live(mut self, registry: Arc<super::live::LiveSandboxes<P>>) -> Self {
        self.live = Some(live_placements::LivePlacements::new(
            registry,
            self.ended_tx.clone(),
        ));
        self
    }

    /// The counters (shared: they keep counting).
    pub fn stats(&self) -> Arc<RunnerStats> {
        Arc::clone(&self.shared.stats)
    }

    /// A handle that shuts the runner's warm pools down (for a node stopping gracefully,
    /// after the runtime loop that owns the runner has returned).
    pub fn shutdown_handle(&self) -> ShutdownHandle<P> {
        ShutdownHandle(Arc::clone(&self.shared))
    }

    /// Runs going now.
    pub fn running(&self) -> usize {
        self.shared.lock_runs().len()
    }

    /// The state of the warm pool of `shape`, if there is one.
    pub fn pool_status(&self, shape: &TaskShape) -> Option<super::PoolStatus> {
        self.shared
            .lock_pools()
            .1
            .get(shape)
            .map(|e| e.pool.status())
    }

    /// Pools the default shape of every `warm_images` entry.
    pub fn warm_up(&self) {
        for image in &self.shared.config.warm_images {
            self.shared.pool(&TaskShape::default_of(image.clone()));
        }
    }

    /// Starts the periodic reap (see [`reaper`]) unless it runs or its period is zero; it ends
    /// with the runner or its shutdown.
    fn start_reaper(&self) {
        let period = self.shared.config.reap_period;
        let mut reaper = self.shared.reaper.lock().unwrap_or_else(|p| p.into_inner());
        if period.is_zero() || reaper.is_some() {
            return;
        }
        let task = tokio::spawn(reaper::reap_periodically(
            Arc::downgrade(&self.shared),
            period,
        ));
        *reaper = Some(task.abort_handle());
    }
}

/// Shuts a [`TaskRunner`]'s warm pools down: see [`TaskRunner::shutdown_handle`].
pub struct ShutdownHandle<P: SandboxProvider + Clone + 'static>(Arc<Shared<P>>);

impl<P: SandboxProvider + Clone + 'static> ShutdownHandle<P> {
    /// Stops the periodic reap, then every run still going — each removes its sandbox, as a
    /// cancellation does (rule 5) — and waits for them (at most [`STOP_RUNS_BOUND`]; what is left then goes to the
    /// next start's reap), then removes every pooled sandbox and waits for the removals, then
    /// every other sandbox labelled with this node ([`SandboxProvider::reap_all`]). Returns how
    /// many pools there were. A run never outlives its node's graceful stop.
    pub async fn shutdown(&self) -> usize {
        if let Some(reaper) = self
            .0
            .reaper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            reaper.abort();
        }
        let stops: Vec<_> = std::mem::take(&mut *self.0.lock_runs())
            .into_values()
            .collect();
        let asked = stops.len();
        for stop in stops {
            let _ = stop.send(());
        }
        let deadline = tokio::time::Instant::now() + STOP_RUNS_BOUND;
        while self.0.active.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = self.0.active.load(Ordering::SeqCst);
        if asked > 0 || left > 0 {
            tracing::info!(stopped = asked, left, "stopped the task runs still going");
        }
        let pools: Vec<_> = std::mem::take(&mut self.0.lock_pools().1)
            .into_values()
            .map(|e| e.pool)
            .collect();
        for pool in &pools {
            if let Err(e) = pool.shutdown().await {
                tracing::warn!(error = %e, "removing a warm sandbox pool failed");
            }
        }
        // Last, by label, whatever of this node's is left: a run past the bound, a removal
        // that failed, or a creation an earlier killed process had in flight that landed
        // after this process's start-up reap (found by the real-fault soak: one container
        // left after a graceful stop).
        let node = &self.0.config.node_id;
        match tokio::time::timeout(STOP_RUNS_BOUND, self.0.provider.reap_all(node)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => tracing::info!(
                removed,
                "removed {removed} sandbox(es) of this node that no run or pool held"
            ),
            Ok(Err(e)) => tracing::warn!(error = %e,
                "removing this node's last sandboxes failed; the next start's reap will"),
            Err(_) => tracing::warn!(
                "removing this node's last sandboxes took longer than {STOP_RUNS_BOUND:?}; the \
                 next start's reap will"
            ),
        }
        pools.len()
    }
}

impl<P: SandboxProvider + Clone + 'static> TaskSandboxes for TaskRunner<P> {
    async fn recovered(&mut self, core: &Core) {
        let node = self.shared.config.node_id.clone();
        let were_running = core.running_tasks().len();
        match self.shared.provider.reap(&node).await {
            Ok(removed) => {
                tracing::info!(removed, were_running,
                "task sandboxes: removed {removed} sandbox(es) an earlier run of this node left \
                 ({were_running} run(s) the log says were going count as retryable failures)")
            }
            Err(e) => tracing::warn!(error = %e,
                "task sandboxes: could not remove what an earlier run of this node left; \
                 `chorus sandbox reap` or the next start will"),
        }
        self.warm_up();
        self.start_reaper();
    }

    fn start(&mut self, task: &TaskId, attempt: u32, spec: &SharedSpec) {
        if spec.live {
            match &self.live {
                Some(live) => live.start(&self.shared.config, task, attempt, spec),
                // A worker without a registry never runs an empty command for one.
                None => {
                    let _ = self.ended_tx.send(Event::SandboxFailed {
                        task: task.clone(),
                        attempt,
                        error: "sandbox: this worker keeps no live sandboxes".into(),
                        retryable: false,
                    });
                }
            }
            return;
        }
        let (stop_tx, stop_rx) = oneshot::channel();
        self.shared
            .lock_runs()
            .insert((task.clone(), attempt), stop_tx);
        let shared = Arc::clone(&self.shared);
        let ended = self.ended_tx.clone();
        let (task, spec) = (task.clone(), Arc::clone(spec));
        shared.active.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let event = run::run(&shared, &task, attempt, &spec, stop_rx).await;
            shared.active.fetch_sub(1, Ordering::SeqCst);
            // The runner is gone only when the node stops; the end is then moot.
            let _ = ended.send(event);
        });
    }

    fn stop(&mut self, task: &TaskId, attempt: u32) {
        if self.live.as_ref().is_some_and(|l| l.stop(task, attempt)) {
            return;
        }
        let stop = self.shared.lock_runs().remove(&(task.clone(), attempt));
        if let Some(stop) = stop {
            // The run may have ended a moment ago: its end is on the channel either way.
            let _ = stop.send(());
        }
    }

    async fn next_exit(&mut self) -> Event {
        // `recv` is cancel safe, and the bookkeeping below runs only once an end was taken.
        let Some(event) = self.ended_rx.recv().await else {
            return std::future::pending().await;
        };
        if let Event::SandboxExited { task, attempt, .. }
        | Event::SandboxFailed { task, attempt, .. } = &event
        {
            self.shared.lock_runs().remove(&(task.clone(), *attempt));
        }
        event
    }
}

#[cfg(test)]
mod tests;
