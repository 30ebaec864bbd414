//! A warm pool of created-and-started sandboxes for one (image, policy) pair, so that creating
//! and starting a container (≈ 290 ms on fuse-overlayfs) and removing it (≈ 100 ms) are off a
//! task's critical path: [`SandboxPool::acquire`] hands out a running sandbox at once and
//! [`PooledSandbox::release`] removes it in the background.
//!
//! Rules:
//! - **One task per sandbox, unless given back for its submitter.** A sandbox leaves the pool
//!   for exactly one task and is removed when that task releases (or drops) it. A holder may
//!   instead [`give it back`](PooledSandbox::give_back) under an owner key (a submitter and
//!   shape) to wait for the next [`acquire_for`](SandboxPool::acquire_for) with the same key —
//!   never for anyone else's. Where the sandbox can reset in its next command's exec
//!   ([`ExecutionSandbox::resets_in_exec`]) only what its run left running is killed in the
//!   background ([`ExecutionSandbox::end_leftovers`]: nothing runs in a kept sandbox on
//!   nobody's account), then it waits and its next holder must run after the reset
//!   ([`PooledSandbox::needs_reset`]); else it is [`reset`](ExecutionSandbox::reset) in the
//!   background. Either way it waits only when that vouches (else it is removed). At most
//!   `size` such sandboxes wait (the oldest goes first), each until its `usable_until` or
//!   `max_idle_age` after it was first made, whichever comes first — and one kept unreset
//!   at most `max_dirty_keep` after it was given back.
//! - **Bounded.** Idle sandboxes plus creations in flight (the background fill and on-demand
//!   creations by [`acquire`](SandboxPool::acquire)) never exceed `size`. An `acquire` that finds
//!   the pool empty creates its own sandbox when that bound allows, and otherwise waits for the
//!   next one to become ready. `size == 0` is a pass-through: every `acquire` creates on demand.
//! - **Labels are fixed at create time**, before the pool knows the task: pooled containers carry
//!   `io.chorus.task=pool` ([`POOL_TASK`]) and `io.chorus.pool=<pool id>` ([`LABEL_POOL`]) besides
//!   `io.chorus.node`, so [`SandboxProvider::reap`] by node still finds them. The task id lives in
//!   the [`PooledSandbox`], in [`SandboxPool::leases`] (sandbox id → task id), and in the
//!   sandbox's environment as `CHORUS_TASK_ID` ([`TASK_ENV`]) for every later command.
//! - **Workspaces.** A sandbox's mounts are fixed when it is created, before its task is known,
//!   so a pool serves tasks **without a per-task repository mount**: the template's workspace is
//!   `None` (an empty, writable `/workspace`; copy files in with `write_tree`) or one directory
//!   shared by every pooled sandbox. A filtered (staged) template mount is copied when each
//!   sandbox is pre-created, so it can be up to `max_idle_age` old. Tasks that need their own
//!   repository mount should use the provider directly.
//! - **Recycling.** Idle sandboxes older than `max_idle_age` are removed and replaced. With
//!   `verify_on_acquire` (the default) `acquire` also checks the sandbox is still running (one
//!   inspect, a few ms on Docker) and replaces one that died while idle.
//! - **Failures are loud.** A failed background creation is logged (`tracing::warn!`), counted in
//!   [`PoolStatus`], and retried with exponential backoff; [`SandboxPool::wait_full`] returns the
//!   last error rather than waiting forever, and an `acquire` on an empty pool falls back to
//!   creating its own sandbox, returning that error if it fails too.
//! - **Shutdown.** [`SandboxPool::shutdown`] removes idle and leased sandboxes and waits for
//!   creations and removals in flight. Dropping the pool without `shutdown` removes idle ones in
//!   the background and leaves leased ones to their holders. A crash leaves containers behind
//!   that `reap(node_id)` removes, as for unpooled sandboxes.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{
    ErrorCategory, ExecutionSandbox, SandboxError, SandboxPolicy, SandboxProvider, SandboxResult,
    SandboxSpec, SandboxState, UsageTotals,
};

/// The label (under `io.chorus.`) that names the pool a container was made for.
pub const LABEL_POOL: &str = "io.chorus.pool";
/// What `io.chorus.task` says on a pooled container: the task is not known at create time.
pub const POOL_TASK: &str = "pool";
/// The environment variable that tells commands in a pooled sandbox which task they serve.
pub const TASK_ENV: &str = "CHORUS_TASK_ID";

/// How a [`SandboxPool`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Ready sandboxes to keep; also the bound on idle + in-flight creations.
    pub size: usize,
    /// Idle sandboxes older than this are removed and replaced.
    pub max_idle_age: Duration,
    /// Longest a sandbox given back *as it is* waits for its owner (its reset goes with the
    /// next command, so what its last run left running goes on until then): bounds the CPU
    /// and memory a run can keep using, unaccounted, after its result.
    pub max_dirty_keep: Duration,
    /// Check that a sandbox is still running before handing it out.
    pub verify_on_acquire: bool,
    /// The first wait after a failed background creation; it doubles per consecutive failure.
    pub retry_initial: Duration,
    /// The longest wait between background retries.
    pub retry_max: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            size: 2,
            max_idle_age: Duration::from_secs(600),
            max_dirty_keep: Duration::from_secs(30),
            verify_on_acquire: true,
            retry_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
        }
    }
}

impl PoolConfig {
    /// The default configuration keeping `size` sandboxes ready.
    pub fn with_size(size: usize) -> Self {
        PoolConfig {
            size,
            ..PoolConfig::default()
        }
    }

    /// The wait before the next background retry after `consecutive` failures in a row (≥ 1).
    pub fn backoff(&self, consecutive: u32) -> Duration {
        let factor = 1u32 << consecutive.saturating_sub(1).min(16);
        self.retry_initial
            .saturating_mul(factor)
            .min(self.retry_max)
    }
}

/// A snapshot of the pool's state and counters.
#[derive(Debug, Clone)]
pub struct PoolStatus {
    /// Ready sandboxes waiting for a task.
    pub idle: usize,
    /// Creations in flight (background and on demand).
    pub creating: usize,
    /// Sandboxes handed out and not yet released.
    pub leased: usize,
    /// Removals in flight.
    pub removing: usize,
    /// Sandboxes created and started by the pool (background and on demand).
    pub created: u64,
    /// Sandboxes removed by the pool.
    pub removed: u64,
    /// Acquires served from an idle sandbox.
    pub hits: u64,
    /// Acquires that had to create (or wait for) a sandbox.
    pub misses: u64,
    /// Idle sandboxes removed for age or because they had stopped running.
    pub recycled: u64,
    /// Acquires served with a sandbox given back for the same owner key.
    pub reuses: u64,
    /// Sandboxes given back whose reset failed (they were removed instead).
    pub failed_resets: u64,
    /// Failed creations (background and on demand).
    pub failed_creations: u64,
    /// Failed removals (the container may be left behind; `reap` finds it).
    pub failed_removals: u64,
    /// Background creation failures since the last success; > 0 means the pool is backing off.
    pub consecutive_failures: u32,
    /// The most recent creation error, cleared by a success.
    pub last_error: Option<SandboxError>,
    /// Whether [`SandboxPool::shutdown`] ran (or the pool was dropped).
    pub shut_down: bool,
}

struct Idle<S> {
    sandbox: Arc<S>,
    ready_at: Instant,
}

/// A sandbox given back and reset, waiting for its owner key's next acquire.
struct Kept<S> {
    sandbox: Arc<S>,
    owner: String,
    /// When it was first made ready (its age bounds it as a fresh one's does).
    born: Instant,
    /// Taken no later than this: the holder's `usable_until`, or `max_idle_age` after `born`.
    until: Instant,
    /// Its usage totals when given back.
    totals: Option<UsageTotals>,
    /// Not reset yet: its next command goes after a reset in the same exec
    /// ([`ExecutionSandbox::resets_in_exec`]).
    dirty: bool,
}

struct State<S> {
    idle: VecDeque<Idle<S>>,
    kept: Vec<Kept<S>>,
    /// The owner keys of sandboxes given back and being reset or cleared before they are
    /// kept: that owner's next acquire waits for its own rather than taking another.
    resetting: Vec<String>,
    reuses: u64,
    failed_resets: u64,
    creating: usize,
    leased: BTreeMap<String, (String, Arc<S>)>,
    removing: usize,
    shut_down: bool,
    retry_at: Option<Instant>,
    consecutive_failures: u32,
    last_error: Option<SandboxError>,
    last_removal_error: Option<SandboxError>,
    created: u64,
    removed: u64,
    hits: u64,
    misses: u64,
    recycled: u64,
    failed_creations: u64,
    failed_removals: u64,
}

struct Shared<P: SandboxProvider> {
    provider: P,
    spec: SandboxSpec,
    policy: SandboxPolicy,
    config: PoolConfig,
    pool_id: String,
    runtime: Handle,
    state: Mutex<State<P::Sandbox>>,
    /// Signalled (`notify_waiters`) on every change the filler, waiting acquirers or shutdown
    /// may care about; waiters `enable()` before looking at the state, so none is missed.
    changed: Notify,
}

impl<P: SandboxProvider + 'static> Shared<P> {
    fn lock(&self) -> MutexGuard<'_, State<P::Sandbox>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates and starts one sandbox from the template, removing it if it will not start.
    async fn make(&self) -> SandboxResult<P::Sandbox> {
        let sandbox = self.provider.create(&self.spec, &self.policy).await?;
        if let Err(e) = sandbox.start().await {
            let _ = sandbox.remove().await;
            return Err(e);
        }
        Ok(sandbox)
    }

    /// Whether a sandbox about to be handed out still runs (checked only with
    /// `verify_on_acquire`); one that stopped is recycled.
    async fn still_running(self: &Arc<Self>, sandbox: &Arc<P::Sandbox>) -> bool {
        if !self.config.verify_on_acquire {
            return true;
        }
        let state = sandbox.state().await;
        if matches!(state, Ok(SandboxState::Running)) {
            return true;
        }
        tracing::warn!(pool = %self.pool_id, sandbox = sandbox.id(),
            ?state, "an idle pooled sandbox stopped running; replacing it");
        let mut st = self.lock();
        st.recycled += 1;
        self.spawn_removal(&mut st, Arc::clone(sandbox));
        false
    }

    /// Keeps a sandbox given back for its owner's next acquire, until its `until` (removed
    /// instead when that has passed or the pool is shut down); the oldest kept one goes when
    /// `size` are kept already.
    fn keep(self: &Arc<Self>, st: &mut State<P::Sandbox>, kept: Kept<P::Sandbox>) {
        if st.shut_down || Instant::now() >= kept.until {
            self.spawn_removal(st, kept.sandbox);
            return;
        }
        if st.kept.len() >= self.config.size.max(1) {
            let oldest = st.kept.remove(0);
            self.spawn_removal(st, oldest.sandbox);
        }
        st.kept.push(kept);
    }

    /// Removes `sandbox` in a background task, counted in `removing` until it is done.
    fn spawn_removal(self: &Arc<Self>, state: &mut State<P::Sandbox>, sandbox: Arc<P::Sandbox>) {
        state.removing += 1;
        let shared = Arc::clone(self);
        self.runtime.spawn(async move {
            let result = sandbox.remove().await;
            {
                let mut st = shared.lock();
                st.removing -= 1;
                match result {
                    Ok(()) => st.removed += 1,
                    Err(e) => {
                        tracing::warn!(pool = %shared.pool_id, sandbox = sandbox.id(), error = %e,
                            "removing a pooled sandbox failed");
                        st.failed_removals += 1;
                        st.last_removal_error = Some(e);
                    }
                }
            }
            shared.changed.notify_waiters();
        });
    }

    /// One background creation; its slot in `creating` was taken by the caller.
    async fn fill_one(self: Arc<Self>) {
        let result = self.make().await;
        {
            let mut st = self.lock();
            st.creating -= 1;
            match result {
                Ok(sandbox) => {
                    st.created += 1;
                    st.consecutive_failures = 0;
                    st.retry_at = None;
                    st.last_error = None;
                    let sandbox = Arc::new(sandbox);
                    if st.shut_down {
                        self.spawn_removal(&mut st, sandbox);
                    } else {
                        st.idle.push_back(Idle {
                            sandbox,
                            ready_at: Instant::now(),
                        });
                    }
                }
                Err(e) => {
                    st.failed_creations += 1;
                    st.consecutive_failures = st.consecutive_failures.saturating_add(1);
                    let wait = self.config.backoff(st.consecutive_failures);
                    st.retry_at = Some(Instant::now() + wait);
                    tracing::warn!(pool = %self.pool_id, error = %e,
                        failures = st.consecutive_failures, retry_in_ms = wait.as_millis() as u64,
                        "pre-creating a pooled sandbox failed; retrying with backoff");
                    st.last_error = Some(e);
                }
            }
        }
        self.changed.notify_waiters();
    }

    /// Moves idle sandboxes past `max_idle_age` (kept ones also past their `usable_until`) to
    /// removal.
    fn recycle_expired(self: &Arc<Self>, st: &mut State<P::Sandbox>, now: Instant) {
        let (live, old): (Vec<_>, Vec<_>) = std::mem::take(&mut st.kept)
            .into_iter()
            .partition(|k| now < k.until);
        st.kept = live;
        for k in old {
            st.recycled += 1;
            self.spawn_removal(st, k.sandbox);
        }
        while let Some(front) = st.idle.front() {
            // `idle` is in ready order, so the oldest is at the front.
            if now.duration_since(front.ready_at) < self.config.max_idle_age {
                break;
            }
            if let Some(old) = st.idle.pop_front() {
                st.recycled += 1;
                self.spawn_removal(st, old.sandbox);
            }
        }
    }

    /// The background task: recycles old sandboxes and keeps `idle + creating` at `size`,
    /// honouring the retry backoff.
    async fn filler(self: Arc<Self>) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut st = self.lock();
                if st.shut_down {
                    return;
                }
                let now = Instant::now();
                self.recycle_expired(&mut st, now);
                let backing_off = st.retry_at.filter(|t| *t > now);
                if backing_off.is_none() {
                    let need = self.config.size.saturating_sub(st.idle.len() + st.creating);
                    st.creating += need;
                    for _ in 0..need {
                        self.runtime.spawn(Arc::clone(&self).fill_one());
                    }
                }
                let next_expiry = st
                    .idle
                    .front()
                    .map(|i| i.ready_at + self.config.max_idle_age)
                    .into_iter()
                    .chain(st.kept.iter().map(|k| k.until))
                    .min();
                match (backing_off, next_expiry) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at.into()) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    fn shut_down_error(&self) -> SandboxError {
        SandboxError::new(
            ErrorCategory::NotFound,
            format!("sandbox pool {} is shut down", self.pool_id),
        )
    }
}

/// A pool of warm sandboxes for one (image, policy) pair. See the [module docs](self).
///
/// Not `Clone`: share it in an `Arc`. Must be created inside a Tokio runtime (it spawns its
/// fill task there).
pub struct SandboxPool<P: SandboxProvider + 'static> {
    shared: Arc<Shared<P>>,
    filler: Mutex<Option<JoinHandle<()>>>,
}

impl<P: SandboxProvider + 'static> std::fmt::Debug for SandboxPool<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxPool")
            .field("pool_id", &self.shared.pool_id)
            .field("config", &self.shared.config)
            .field("status", &self.status())
            .finish()
    }
}

enum Next<S> {
    Take(Arc<S>, Instant),
    Reuse(Kept<S>),
    Create { counted: bool },
    Wait,
}

impl<P: SandboxProvider + 'static> SandboxPool<P> {
    /// A pool of sandboxes made from `template` (its `task_id` is replaced by [`POOL_TASK`] and
    /// a [`LABEL_POOL`] label is added) under `policy`. Starts filling at once, in the
    /// background.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        provider: P,
        template: SandboxSpec,
        policy: SandboxPolicy,
        config: PoolConfig,
    ) -> Self {
        let pool_id =
            super::sanitize_name(&format!("{}-{}", template.node_id, super::unique_suffix()));
        let mut spec = template;
        spec.task_id = POOL_TASK.into();
        spec.labels.insert(
            LABEL_POOL
                .trim_start_matches(super::docker::LABEL_PREFIX)
                .into(),
            pool_id.clone(),
        );
        let runtime = Handle::current();
        let shared = Arc::new(Shared {
            provider,
            spec,
            policy,
            config,
            pool_id,
            runtime: runtime.clone(),
            state: Mutex::new(State {
                idle: VecDeque::new(),
                kept: Vec::new(),
                resetting: Vec::new(),
                reuses: 0,
                failed_resets: 0,
                creating: 0,
                leased: BTreeMap::new(),
                removing: 0,
                shut_down: false,
                retry_at: None,
                consecutive_failures: 0,
                last_error: None,
                last_removal_error: None,
                created: 0,
                removed: 0,
                hits: 0,
                misses: 0,
                recycled: 0,
                failed_creations: 0,
                failed_removals: 0,
            }),
            changed: Notify::new(),
        });
        let filler = runtime.spawn(Arc::clone(&shared).filler());
        SandboxPool {
            shared,
            filler: Mutex::new(Some(filler)),
        }
    }

    /// The pool's id: the value of its containers' [`LABEL_POOL`] label.
    pub fn pool_id(&self) -> &str {
        &self.shared.pool_id
    }

    /// The spec pooled sandboxes are created from (after the pool's changes).
    pub fn spec(&self) -> &SandboxSpec {
        &self.shared.spec
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.shared.config
    }

    /// The provider.
    pub fn provider(&self) -> &P {
        &self.shared.provider
    }

    /// Counters and current sizes.
    pub fn status(&self) -> PoolStatus {
        let st = self.shared.lock();
        PoolStatus {
            idle: st.idle.len() + st.kept.len(),
            creating: st.creating,
            leased: st.leased.len(),
            removing: st.removing,
            created: st.created,
            removed: st.removed,
            hits: st.hits,
            misses: st.misses,
            recycled: st.recycled,
            reuses: st.reuses,
            failed_resets: st.failed_resets,
            failed_creations: st.failed_creations,
            failed_removals: st.failed_removals,
            consecutive_failures: st.consecutive_failures,
            last_error: st.last_error.clone(),
            shut_down: st.shut_down,
        }
    }

    /// Which task holds each leased sandbox: sandbox id → task id.
    pub fn leases(&self) -> BTreeMap<String, String> {
        self.shared
            .lock()
            .leased
            .iter()
            .map(|(id, (task, _))| (id.clone(), task.clone()))
            .collect()
    }

    /// Waits until `size` sandboxes are idle. Fails with the last creation error as soon as a
    /// background creation fails (the pool keeps retrying), or with
    /// [`ErrorCategory::Timeout`] after `timeout`.
    pub async fn wait_full(&self, timeout: Duration) -> SandboxResult<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.shared.lock();
                if st.shut_down {
                    return Err(self.shared.shut_down_error());
                }
                if st.idle.len() >= self.shared.config.size {
                    return Ok(());
                }
                if let Some(e) = &st.last_error {
                    return Err(e.clone());
                }
            }
            if tokio::time::timeout_at(deadline.into(), notified)
                .await
                .is_err()
            {
                let st = self.shared.status_line();
                return Err(SandboxError::new(
                    ErrorCategory::Timeout,
                    format!("sandbox pool not full after {timeout:?}: {st}"),
                ));
            }
        }
    }

    /// A running sandbox for `task_id`, used by that task only.
    ///
    /// Takes the oldest idle sandbox when there is one (skipping and recycling any past
    /// `max_idle_age` or, with `verify_on_acquire`, no longer running); otherwise creates one on
    /// demand, or waits for the next ready one when idle + in-flight creations are already at
    /// `size`. Every acquire wakes the background fill. Sets [`TASK_ENV`] in the sandbox.
    ///
    /// Errors: the on-demand creation's error, or [`ErrorCategory::NotFound`] after shutdown.
    pub async fn acquire(&self, task_id: &str) -> SandboxResult<PooledSandbox<P>> {
        self.acquire_for(task_id, None).await
    }

    /// As [`acquire`](Self::acquire), but first takes a sandbox given back under `owner` (see
    /// [`PooledSandbox::give_back`]), when one waits.
    pub async fn acquire_for(
        &self,
        task_id: &str,
        owner: Option<&str>,
    ) -> SandboxResult<PooledSandbox<P>> {
        let shared = &self.shared;
        let begun = Instant::now();
        let mut missed = false;
        loop {
            let notified = shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = {
                let mut st = shared.lock();
                if st.shut_down {
                    return Err(shared.shut_down_error());
                }
                shared.recycle_expired(&mut st, Instant::now());
                let mine = owner.and_then(|o| st.kept.iter().position(|k| k.owner == o));
                if let Some(i) = mine {
                    Next::Reuse(st.kept.remove(i))
                } else if owner.is_some_and(|o| st.resetting.iter().any(|r| r == o)) {
                    // Its own is being cleared (a helper exec): sooner than a fresh one.
                    Next::Wait
                } else if let Some(idle) = st.idle.pop_front() {
                    Next::Take(idle.sandbox, idle.ready_at)
                } else if shared.config.size == 0 {
                    Next::Create { counted: false }
                } else if st.creating < shared.config.size {
                    st.creating += 1;
                    Next::Create { counted: true }
                } else {
                    Next::Wait
                }
            };
            match next {
                Next::Take(sandbox, ready_at) => {
                    shared.changed.notify_waiters(); // refill
                    if !shared.still_running(&sandbox).await {
                        continue;
                    }
                    return Ok(self.lease(sandbox, task_id, !missed, begun, ready_at, None));
                }
                Next::Reuse(kept) => {
                    if !shared.still_running(&kept.sandbox).await {
                        continue;
                    }
                    shared.lock().reuses += 1;
                    let reused = Some(kept.totals.unwrap_or_default());
                    let mut leased =
                        self.lease(kept.sandbox, task_id, true, begun, kept.born, reused);
                    leased.dirty = kept.dirty;
                    return Ok(leased);
                }
                Next::Create { counted } => {
                    if counted {
                        shared.changed.notify_waiters(); // the filler sees the slot taken
                    }
                    let result = shared.make().await;
                    let mut st = shared.lock();
                    if counted {
                        st.creating -= 1;
                    }
                    let outcome = match result {
                        Ok(sandbox) => {
                            st.created += 1;
                            let sandbox = Arc::new(sandbox);
                            if st.shut_down {
                                shared.spawn_removal(&mut st, sandbox);
                                Err(shared.shut_down_error())
                            } else {
                                Ok(sandbox)
                            }
                        }
                        Err(e) => {
                            st.failed_creations += 1;
                            Err(e)
                        }
                    };
                    drop(st);
                    shared.changed.notify_waiters();
                    return outcome.map(|sandbox| {
                        self.lease(sandbox, task_id, false, begun, Instant::now(), None)
                    });
                }
                Next::Wait => {
                    missed = true;
                    notified.await;
                }
            }
        }
    }

    /// Hands `sandbox` to `task_id`: `born` when it was first made ready, `reused` its totals
    /// when given back by an earlier task of its owner key.
    fn lease(
        &self,
        sandbox: Arc<P::Sandbox>,
        task_id: &str,
        hit: bool,
        begun: Instant,
        born: Instant,
        reused: Option<UsageTotals>,
    ) -> PooledSandbox<P> {
        sandbox.set_env(TASK_ENV, task_id);
        let mut st = self.shared.lock();
        if hit {
            st.hits += 1;
        } else {
            st.misses += 1;
        }
        st.leased.insert(
            sandbox.id().to_string(),
            (task_id.to_string(), Arc::clone(&sandbox)),
        );
        PooledSandbox {
            sandbox,
            task_id: task_id.to_string(),
            shared: Arc::clone(&self.shared),
            from_pool: hit,
            waited: begun.elapsed(),
            released: false,
            born,
            reused,
            dirty: false,
        }
    }

    /// Stops filling and removes every sandbox the pool made: idle ones, leased ones (their
    /// holders' later commands fail), and ones still being created; returns when all removals
    /// are done. Later `acquire`s fail. Returns the last removal error, if any failed.
    pub async fn shutdown(&self) -> SandboxResult<()> {
        let shared = &self.shared;
        {
            let mut st = shared.lock();
            st.shut_down = true;
            st.last_removal_error = None;
            let mut idle: Vec<_> = st.idle.drain(..).map(|i| i.sandbox).collect();
            idle.extend(st.kept.drain(..).map(|k| k.sandbox));
            let leased: Vec<_> = std::mem::take(&mut st.leased)
                .into_values()
                .map(|(_, sb)| sb)
                .collect();
            for sandbox in idle.into_iter().chain(leased) {
                shared.spawn_removal(&mut st, sandbox);
            }
        }
        shared.changed.notify_waiters();
        let filler = self.filler.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(filler) = filler {
            let _ = filler.await;
        }
        loop {
            let notified = shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = shared.lock();
                if st.creating == 0 && st.removing == 0 && st.resetting.is_empty() {
                    return match &st.last_removal_error {
                        Some(e) => Err(e.clone()),
                        None => Ok(()),
                    };
                }
            }
            notified.await;
        }
    }
}

impl<P: SandboxProvider + 'static> Shared<P> {
    fn status_line(&self) -> String {
        let st = self.lock();
        format!(
            "{} idle, {} creating, {} failed creations{}",
            st.idle.len(),
            st.creating,
            st.failed_creations,
            st.last_error
                .as_ref()
                .map(|e| format!(", last error: {e}"))
                .unwrap_or_default()
        )
    }
}

impl<P: SandboxProvider + 'static> Drop for SandboxPool<P> {
    /// Stops filling and removes idle sandboxes in the background; leased ones stay with their
    /// holders, who remove them on release.
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.shut_down {
            return;
        }
        st.shut_down = true;
        let mut idle: Vec<_> = st.idle.drain(..).map(|i| i.sandbox).collect();
        idle.extend(st.kept.drain(..).map(|k| k.sandbox));
        for sandbox in idle {
            self.shared.spawn_removal(&mut st, sandbox);
        }
        drop(st);
        self.shared.changed.notify_waiters();
    }
}

/// A sandbox leased from a [`SandboxPool`] for one task. Use it through `Deref` as the
/// provider's sandbox; [`release`](Self::release) it (or drop it) when the task is done, and it
/// is removed in the background.
pub struct PooledSandbox<P: SandboxProvider + 'static> {
    sandbox: Arc<P::Sandbox>,
    task_id: String,
    shared: Arc<Shared<P>>,
    from_pool: bool,
    waited: Duration,
    released: bool,
    /// When it was first made ready (for a reused one: before its first run).
    born: Instant,
    /// For a sandbox given back and reused: its usage totals then.
    reused: Option<UsageTotals>,
    /// Given back and not reset yet: its next command must go after a reset.
    dirty: bool,
}

impl<P: SandboxProvider + 'static> std::fmt::Debug for PooledSandbox<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledSandbox")
            .field("id", &self.sandbox.id())
            .field("task_id", &self.task_id)
            .field("from_pool", &self.from_pool)
            .field("waited", &self.waited)
            .finish()
    }
}

impl<P: SandboxProvider + 'static> PooledSandbox<P> {
    /// The task it serves.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// Whether it came ready from the pool (`false`: created on demand or waited for).
    pub fn from_pool(&self) -> bool {
        self.from_pool
    }

    /// How long [`SandboxPool::acquire`] took.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The sandbox.
    pub fn sandbox(&self) -> &P::Sandbox {
        &self.sandbox
    }

    /// For a sandbox that ran an earlier task of its owner key: its usage totals when it was
    /// given back (subtract them for this run's); `None` for a fresh one.
    pub fn reused(&self) -> Option<UsageTotals> {
        self.reused
    }

    /// Whether its next command must go after a reset ([`ExecRequest::after_reset`]): it
    /// was given back and kept without one.
    ///
    /// [`ExecRequest::after_reset`]: crate::sandbox::ExecRequest::after_reset
    pub fn needs_reset(&self) -> bool {
        self.dirty
    }

    /// Counts a reset before this run that refused the sandbox ([`ErrorCategory::NotClean`])
    /// among the pool's failed resets; the holder then releases it.
    pub fn count_failed_reset(&self) {
        self.shared.lock().failed_resets += 1;
    }

    /// Ends the lease, giving the sandbox back for the next task of `owner` (a submitter and
    /// shape), kept until `usable_until` (or until its age runs out). Where its reset can go
    /// with the next command ([`ExecutionSandbox::resets_in_exec`]) it is kept as it is, and
    /// its next holder's command goes after the reset; else it is reset in the background
    /// now, and kept only when the reset vouches for it. `totals`: its usage totals now.
    pub fn give_back(mut self, owner: String, usable_until: Instant, totals: Option<UsageTotals>) {
        self.released = true;
        let shared = Arc::clone(&self.shared);
        let sandbox = Arc::clone(&self.sandbox);
        // Dirty where the reset goes with the next command; else reset below first.
        let dirty = sandbox.resets_in_exec();
        let mut until = usable_until.min(self.born + shared.config.max_idle_age);
        if dirty {
            until = until.min(Instant::now() + shared.config.max_dirty_keep);
        }
        let kept = Kept {
            dirty,
            sandbox,
            owner,
            born: self.born,
            until,
            totals,
        };
        {
            let mut st = shared.lock();
            // After `shutdown` the pool has removed it already.
            if st.leased.remove(kept.sandbox.id()).is_none() {
                return;
            }
            st.resetting.push(kept.owner.clone());
        }
        let runtime = shared.runtime.clone();
        runtime.spawn(async move {
            // A dirty one's reset goes with its next command, but what its run left running
            // is killed now: it would run on nobody's account until then (issue 51, finding 8).
            let reset = if kept.dirty {
                kept.sandbox.end_leftovers().await
            } else {
                kept.sandbox.reset().await
            };
            let mut st = shared.lock();
            if let Some(i) = st.resetting.iter().position(|o| *o == kept.owner) {
                st.resetting.swap_remove(i);
            }
            match reset {
                Ok(()) => shared.keep(&mut st, kept),
                Err(e) => {
                    tracing::debug!(pool = %shared.pool_id, sandbox = kept.sandbox.id(), error = %e,
                        "a sandbox given back could not be reset or cleared; removing it");
                    st.failed_resets += 1;
                    shared.spawn_removal(&mut st, kept.sandbox);
                }
            }
            drop(st);
            shared.changed.notify_waiters();
        });
    }

    /// Ends the lease: the sandbox is removed in the background (never reused; see
    /// [`give_back`](Self::give_back) for the other way).
    pub fn release(mut self) {
        self.release_inner();
    }

    fn release_inner(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let mut st = self.shared.lock();
        // After `shutdown` the pool has removed it already.
        if st.leased.remove(self.sandbox.id()).is_some() {
            self.shared
                .spawn_removal(&mut st, Arc::clone(&self.sandbox));
        }
        drop(st);
        self.shared.changed.notify_waiters();
    }
}

impl<P: SandboxProvider + 'static> Deref for PooledSandbox<P> {
    type Target = P::Sandbox;

    fn deref(&self) -> &P::Sandbox {
        &self.sandbox
    }
}

impl<P: SandboxProvider + 'static> Drop for PooledSandbox<P> {
    fn drop(&mut self) {
        self.release_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let c = PoolConfig {
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(1),
            ..PoolConfig::default()
        };
        assert_eq!(c.backoff(1), Duration::from_millis(100));
        assert_eq!(c.backoff(2), Duration::from_millis(200));
        assert_eq!(c.backoff(4), Duration::from_millis(800));
        assert_eq!(c.backoff(5), Duration::from_secs(1));
        assert_eq!(c.backoff(u32::MAX), Duration::from_secs(1));
    }
}
