//! Live sandboxes on one worker: a sandbox an owner keeps across many commands (create,
//! exec, files, environment, close), the worker-side half of issue 53 (docs/design.md §4.8).
//!
//! The registry holds each live sandbox under the id its caller gave (the cluster assigns ids;
//! this module never invents one), with its owner, an idle timeout and an absolute end. Rules:
//!
//! 1. **Ownership.** Every call names who asks. A sandbox is its owner's: anyone else gets
//!    [`LiveError::NotFound`] — the same answer as for an id that never existed, so nothing
//!    leaks — unless the caller may act on any ([`Caller::any`], the `operate` role).
//! 2. **Bounded.** At most [`LiveLimits::per_owner`] live sandboxes per owner and
//!    [`LiveLimits::total`] on the worker; past either, the create is refused with a counted
//!    reason and nothing is made. Output per command and file sizes per call are capped.
//! 3. **Idempotent create.** A create repeated with the same owner and idempotency key answers
//!    the sandbox the first made, never a second one, while it lives; after it is gone, the
//!    same answer (gone, and why) as any later call.
//! 4. **Ends are named.** A sandbox ends when its owner closes it, when it was idle (no call
//!    under way, none begun) for its idle timeout, or at its absolute end, whatever it is
//!    doing; the sandbox itself is armed to end at that absolute end too (so a worker killed
//!    with `kill -9` leaves nothing running past it). Every later call answers
//!    [`LiveError::Gone`] with the reason and when, for the last [`GONE_KEPT`] ended. The end
//!    is recorded (and answered) at once; its container is removed by a task of its own, so a
//!    close costs its caller no Engine round trip, and [`LiveSandboxes::shutdown`] waits for
//!    every removal under way.
//! 5. **A call under way keeps it from idling out**, never from its absolute end.
//! 6. **A warm pool.** Given a shape ([`LiveSandboxes::keep_warm`]), the registry keeps up to
//!    [`LiveLimits::warm`] sandboxes of it started (their command agent too), made one at a
//!    time by [`LiveSandboxes::reap`]'s tick and replaced after [`WARM_MAX_AGE`]; a create of
//!    that shape takes one (its environment set, its absolute end armed) instead of starting a
//!    container on the caller's time. They are no one's and count in no bound until taken.
//!
//! Time is the tokio clock ([`tokio::time::Instant`]), so tests run on paused time.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::repo::SyncReport;
use super::{
    ExecOutput, ExecRequest, ExecutionSandbox, OutputChunk, SandboxError, SandboxPolicy,
    SandboxProvider, SandboxSpec,
};

/// How many ended sandboxes the registry remembers, to answer "gone, and why".
pub const GONE_KEPT: usize = 4096;

/// A warm sandbox older than this is replaced (rule 6): one that waited long may have missed
/// a change of the image, and its main process's own deadline runs from its start.
pub const WARM_MAX_AGE: Duration = Duration::from_secs(10 * 60);

/// After a warm sandbox could not be made, the next try waits this long.
pub const WARM_RETRY: Duration = Duration::from_secs(30);

/// [`LiveLimits::max_stream_bytes`] unless said otherwise: 1 GiB.
pub const DEFAULT_MAX_STREAM_BYTES: u64 = 1 << 30;

/// The registry's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveLimits {
    /// Live sandboxes one owner may hold on this worker.
    pub per_owner: usize,
    /// Live sandboxes on this worker.
    pub total: usize,
    /// The longest idle timeout a create may ask for (and the default).
    pub max_idle: Duration,
    /// The longest absolute lifetime a create may ask for (and the default).
    pub max_lifetime: Duration,
    /// Bytes of stdout, and of stderr, one command may return.
    pub max_output_bytes: usize,
    /// Bytes one file read or write may move whole.
    pub max_file_bytes: usize,
    /// Bytes one streamed file read or write may move (held a chunk at a time; the sandbox's
    /// own disk bounds what it keeps).
    pub max_stream_bytes: u64,
    /// Started sandboxes kept ready for creates (rule 6; 0: none).
    pub warm: usize,
}

impl Default for LiveLimits {
    fn default() -> Self {
        LiveLimits {
            per_owner: 8,
            total: 64,
            max_idle: Duration::from_secs(10 * 60),
            max_lifetime: Duration::from_secs(4 * 60 * 60),
            max_output_bytes: 4 * 1024 * 1024,
            max_file_bytes: 64 * 1024 * 1024,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            warm: 2,
        }
    }
}

/// Who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The owner a sandbox made by this caller belongs to (a token's identity).
    pub owner: String,
    /// May act on any owner's sandbox (list, close).
    pub any: bool,
}

impl Caller {
    /// An ordinary caller.
    pub fn owner(owner: impl Into<String>) -> Self {
        Caller {
            owner: owner.into(),
            any: false,
        }
    }
}

/// A create.
#[derive(Debug, Clone)]
pub struct CreateLive {
    /// The id the cluster gave it.
    pub id: String,
    /// Repeats with the same owner and key answer the same sandbox (rule 3).
    pub idempotency_key: Option<String>,
    /// What to make.
    pub spec: SandboxSpec,
    /// Under which policy (limits within the worker's ceilings, checked by the caller).
    pub policy: SandboxPolicy,
    /// Idle timeout; `None`: [`LiveLimits::max_idle`].
    pub idle: Option<Duration>,
    /// Absolute lifetime from now; `None`: [`LiveLimits::max_lifetime`].
    pub lifetime: Option<Duration>,
}

/// What a caller learns of a live sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveInfo {
    pub id: String,
    pub owner: String,
    /// The sandbox's own id (the container's name).
    pub sandbox: String,
    /// Time left before it idles out (from its last call), as of the answer.
    pub idle_left: Duration,
    /// Time left before its absolute end, as of the answer.
    pub lifetime_left: Duration,
}

/// Why a live sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoneWhy {
    /// Its owner (or an operator: `by`) closed it.
    Closed { by: String },
    /// No call for its idle timeout.
    Idle,
    /// Its absolute lifetime ran out.
    Expired,
    /// The sandbox itself died or could not be reached (`why`).
    Lost { why: String },
    /// It could not be made (`why`): a create the cluster placed here that failed.
    Failed { why: String },
}

impl GoneWhy {
    /// Its one-word name (counters, the `gone.reason` of an answer).
    pub fn kind(&self) -> &'static str {
        match self {
            GoneWhy::Closed { .. } => "closed",
            GoneWhy::Idle => "idle",
            GoneWhy::Expired => "expired",
            GoneWhy::Lost { .. } => "lost",
            GoneWhy::Failed { .. } => "failed",
        }
    }
}

impl std::fmt::Display for GoneWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoneWhy::Closed { by } => write!(f, "closed by {by}"),
            GoneWhy::Idle => f.write_str("idle for its whole idle timeout"),
            GoneWhy::Expired => f.write_str("its lifetime ran out"),
            GoneWhy::Lost { why } => write!(f, "lost: {why}"),
            GoneWhy::Failed { why } => write!(f, "could not be made: {why}"),
        }
    }
}

/// Why a call was not done.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LiveError {
    /// No such sandbox for this caller (rule 1).
    #[error("no such live sandbox")]
    NotFound,
    /// It ended: why, and how long ago.
    #[error("the live sandbox is gone ({why}, {ago:?} ago)")]
    Gone { why: GoneWhy, ago: Duration },
    /// A bound refused it (rule 2); `reason` is the counted name.
    #[error("refused ({reason}): {detail}")]
    Refused {
        reason: &'static str,
        detail: String,
    },
    /// The sandbox failed the call.
    #[error("{0}")]
    Sandbox(SandboxError),
}

/// Refusals counted by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCounters {
    pub created: u64,
    /// Creates served from the warm pool (rule 6).
    pub from_pool: u64,
    pub ended: BTreeMap<&'static str, u64>,
    pub refused: BTreeMap<&'static str, u64>,
}

struct Live<S> {
    owner: String,
    key: Option<String>,
    sandbox: Arc<S>,
    idle: Duration,
    ends: Instant,
    last_used: Instant,
    /// Calls under way (rule 5).
    busy: usize,
}

struct Ended {
    id: String,
    owner: String,
    key: Option<String>,
    why: GoneWhy,
    at: Instant,
}

/// The warm pool (rule 6).
struct Pool<S> {
    /// The spec and policy a create must have (but for its id, environment and lifetime) to
    /// be served from the pool; `None`: no pool.
    shape: Option<(SandboxSpec, SandboxPolicy)>,
    /// Started sandboxes, oldest first, with when each was made.
    ready: VecDeque<(S, Instant)>,
    /// One is being made.
    filling: bool,
    /// After a failed make, none is tried before this (a missing image fails every time).
    retry_at: Option<Instant>,
}

struct State<S> {
    live: BTreeMap<String, Live<S>>,
    pool: Pool<S>,
    /// Oldest first (rule 4).
    gone: VecDeque<Ended>,
    counters: LiveCounters,
}

/// The live sandboxes of one worker.
pub struct LiveSandboxes<P: SandboxProvider> {
    provider: P,
    limits: LiveLimits,
    state: Mutex<State<P::Sandbox>>,
    /// Told when a warm sandbox was taken, so the pool refills at once (rule 6).
    taken: tokio::sync::Notify,
    /// Told when a sandbox was made or ended (for [`LiveSandboxes::wait_for`]).
    changed: tokio::sync::Notify,
    /// Where each end goes, once someone watches ([`LiveSandboxes::watch_ends`]).
    ends: Mutex<Option<mpsc::UnboundedSender<(String, GoneWhy)>>>,
    /// Removals of ended sandboxes under way (rule 4).
    removing: Mutex<tokio::task::JoinSet<()>>,
}

impl<P: SandboxProvider> std::fmt::Debug for LiveSandboxes<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("LiveSandboxes")
            .field("live", &st.live.keys().collect::<Vec<_>>())
            .field("gone", &st.gone.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl<P: SandboxProvider> LiveSandboxes<P> {
    /// An empty registry over `provider`.
    pub fn new(provider: P, limits: LiveLimits) -> Self {
        LiveSandboxes {
            provider,
            limits,
            state: Mutex::new(State {
                live: BTreeMap::new(),
                pool: Pool {
                    shape: None,
                    ready: VecDeque::new(),
                    filling: false,
                    retry_at: None,
                },
                gone: VecDeque::new(),
                counters: LiveCounters::default(),
            }),
            taken: tokio::sync::Notify::new(),
            changed: tokio::sync::Notify::new(),
            ends: Mutex::new(None),
            removing: Mutex::new(tokio::task::JoinSet::new()),
        }
    }

    /// Every end from now on, as (id, why) — the worker's runtime reports those of the
    /// sandboxes the cluster placed here. A second call takes over from the first.
    pub fn watch_ends(&self) -> mpsc::UnboundedReceiver<(String, GoneWhy)> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.ends.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        rx
    }

    /// Remembers that `id`, `owner`'s, could not be made (`why`): later calls answer gone
    /// with it (rule 4), as for any ended sandbox.
    pub fn remember_failed(&self, id: &str, owner: &str, why: String) {
        let mut st = self.lock();
        if st.live.contains_key(id) || st.gone.iter().any(|e| e.id == id) {
            return;
        }
        *st.counters.ended.entry("failed").or_default() += 1;
        push_gone(
            &mut st,
            Ended {
                id: id.to_string(),
                owner: owner.to_string(),
                key: None,
                why: GoneWhy::Failed { why },
                at: Instant::now(),
            },
        );
        drop(st);
        self.changed.notify_waiters();
    }

    /// What `caller` may see of `id`, waiting until `until` while there is no such sandbox
    /// yet (the cluster placed it here and it is being made, or its placement is on its way).
    pub async fn wait_for(
        &self,
        caller: &Caller,
        id: &str,
        until: Instant,
    ) -> Result<LiveInfo, LiveError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.get(caller, id) {
                Err(LiveError::NotFound) if Instant::now() < until => {}
                other => return other,
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return self.get(caller, id);
            }
        }
    }

    /// Ends `id` for the cluster (its placement was stopped: closed or lost there), saying
    /// `why`. Whether it was live.
    pub async fn end_by(&self, id: &str, why: GoneWhy) -> bool {
        self.end(id, why).await
    }

    fn lock(&self) -> MutexGuard<'_, State<P::Sandbox>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bounds in force.
    pub fn limits(&self) -> &LiveLimits {
        &self.limits
    }

    /// What was made, ended and refused so far.
    pub fn counters(&self) -> LiveCounters {
        self.lock().counters.clone()
    }

    /// Makes a live sandbox for `caller` (rules 2 and 3): started, armed to end at its
    /// lifetime. With whether it is new (`false`: the one its idempotency key made before).
    pub async fn create(
        &self,
        caller: &Caller,
        req: CreateLive,
    ) -> Result<(LiveInfo, bool), LiveError> {
        let idle = req.idle.unwrap_or(self.limits.max_idle);
        let lifetime = req.lifetime.unwrap_or(self.limits.max_lifetime);
        {
            let mut st = self.lock();
            if let Some(key) = &req.idempotency_key {
                let now = Instant::now();
                if let Some((id, live)) = st
                    .live
                    .iter()
                    .find(|(_, l)| l.owner == caller.owner && l.key.as_ref() == Some(key))
                {
                    return Ok((info(id, live, now), false));
                }
                if let Some(e) = st
                    .gone
                    .iter()
                    .rev()
                    .find(|e| e.owner == caller.owner && e.key.as_ref() == Some(key))
                {
                    return Err(gone(e, now));
                }
            }
            if st.live.contains_key(&req.id) || st.gone.iter().any(|e| e.id == req.id) {
                return Err(refuse(
                    &mut st,
                    "duplicate_id",
                    format!("id {} is taken", req.id),
                ));
            }
            if idle.is_zero() || idle > self.limits.max_idle {
                let detail = format!("idle timeout {idle:?}: 1 ms to {:?}", self.limits.max_idle);
                return Err(refuse(&mut st, "idle_timeout", detail));
            }
            if lifetime.is_zero() || lifetime > self.limits.max_lifetime {
                let detail = format!(
                    "lifetime {lifetime:?}: 1 ms to {:?}",
                    self.limits.max_lifetime
                );
                return Err(refuse(&mut st, "lifetime", detail));
            }
            let mine = st.live.values().filter(|l| l.owner == caller.owner).count();
            if mine >= self.limits.per_owner {
                let detail = format!(
                    "{mine} live sandboxes of this owner, at most {}",
                    self.limits.per_owner
                );
                return Err(refuse(&mut st, "per_owner", detail));
            }
            if st.live.len() >= self.limits.total {
                let detail = format!(
                    "{} live sandboxes on this worker, at most {}",
                    st.live.len(),
                    self.limits.total
                );
                return Err(refuse(&mut st, "worker_full", detail));
            }
            // Checked again once the sandbox runs: of two creates that raced past these
            // bounds, the second is removed.
        }
        let sandbox = match self.take_warm(&req) {
            Some(warm) => {
                // Made without the create's environment (fresh ones get it in their spec).
                for (k, v) in &req.spec.env {
                    warm.set_env(k, v);
                }
                // A warm one that cannot be armed (it died waiting) gives way to a fresh one.
                match arm_end(&warm, lifetime).await {
                    Ok(()) => warm,
                    Err(e) => {
                        tracing::warn!(error = %e, "a warm live sandbox failed; starting another");
                        let _ = warm.remove().await;
                        self.start_fresh(&req, lifetime).await?
                    }
                }
            }
            None => self.start_fresh(&req, lifetime).await?,
        };
        let now = Instant::now();
        let live = Live {
            owner: caller.owner.clone(),
            key: req.idempotency_key.clone(),
            sandbox: Arc::new(sandbox),
            idle,
            ends: now + lifetime,
            last_used: now,
            busy: 0,
        };
        // Two creates of one key raced: the first to finish keeps its sandbox (rule 3); two
        // creates that raced past the bounds: the second is removed.
        let (extra, raced) = {
            let mut st = self.lock();
            let raced = req.idempotency_key.as_ref().and_then(|key| {
                st.live
                    .iter()
                    .find(|(_, l)| l.owner == caller.owner && l.key.as_ref() == Some(key))
                    .map(|(id, l)| info(id, l, now))
            });
            let over = st.live.values().filter(|l| l.owner == caller.owner).count()
                >= self.limits.per_owner
                || st.live.len() >= self.limits.total;
            if raced.is_none() && !over && !st.live.contains_key(&req.id) {
                let out = info(&req.id, &live, now);
                st.live.insert(req.id, live);
                st.counters.created += 1;
                drop(st);
                self.changed.notify_waiters();
                return Ok((out, true));
            }
            (live.sandbox, raced)
        };
        let _ = extra.remove().await;
        match raced {
            Some(info) => Ok((info, false)),
            None => Err(refuse(
                &mut self.lock(),
                "worker_full",
                "filled while this one started".into(),
            )),
        }
    }

    /// A new sandbox for `req`, started and armed to end after `lifetime`.
    async fn start_fresh(
        &self,
        req: &CreateLive,
        lifetime: Duration,
    ) -> Result<P::Sandbox, LiveError> {
        // The main process ends at the absolute end too, and a reap honours it.
        let mut spec = req.spec.clone();
        spec.lifetime = lifetime;
        let sandbox = self
            .provider
            .create(&spec, &req.policy)
            .await
            .map_err(LiveError::Sandbox)?;
        let started = async {
            sandbox.start().await?;
            arm_end(&sandbox, lifetime).await
        }
        .await;
        if let Err(e) = started {
            let _ = sandbox.remove().await;
            return Err(LiveError::Sandbox(e));
        }
        // Ready means ready: its first command costs what every later one does.
        start_agent(&sandbox).await;
        Ok(sandbox)
    }

    /// Live sandboxes held, and warm ones ready (rule 6).
    pub fn gauges(&self) -> (usize, usize) {
        let st = self.lock();
        (st.live.len(), st.pool.ready.len())
    }

    /// Keeps up to [`LiveLimits::warm`] sandboxes of this shape started (rule 6): `spec` and
    /// `policy` as a create of the default shape would give them (its id, environment and
    /// lifetime do not matter).
    pub fn keep_warm(&self, spec: SandboxSpec, policy: SandboxPolicy) {
        self.lock().pool.shape = Some((spec, policy));
    }

    /// A warm sandbox for `req` if it has the pool's shape and one is ready.
    fn take_warm(&self, req: &CreateLive) -> Option<P::Sandbox> {
        let mut st = self.lock();
        let (spec, policy) = st.pool.shape.as_ref()?;
        if !same_shape(spec, &req.spec) || policy != &req.policy {
            return None;
        }
        let (sandbox, _) = st.pool.ready.pop_front()?;
        st.counters.from_pool += 1;
        self.taken.notify_one();
        Some(sandbox)
    }

    /// Waits until a create took a warm sandbox; the caller then [`LiveSandboxes::fill`]s.
    pub async fn taken(&self) {
        self.taken.notified().await;
    }

    /// Makes one warm sandbox if the pool is short, after removing one past [`WARM_MAX_AGE`]
    /// (rule 6); one at a time, on the reaper's tick and when one was [`LiveSandboxes::taken`].
    pub async fn fill(&self) {
        let now = Instant::now();
        let (stale, shape) = {
            let mut st = self.lock();
            let stale = match st.pool.ready.front() {
                Some((_, made)) if now >= *made + WARM_MAX_AGE => st.pool.ready.pop_front(),
                _ => None,
            };
            let short = st.pool.ready.len() < self.limits.warm
                && !st.pool.filling
                && st.pool.retry_at.is_none_or(|at| now >= at);
            let shape = st.pool.shape.clone().filter(|_| short);
            if shape.is_some() {
                st.pool.filling = true;
            }
            (stale, shape)
        };
        if let Some((sandbox, _)) = stale {
            let _ = sandbox.remove().await;
        }
        let Some((mut spec, policy)) = shape else {
            return;
        };
        // Its own deadline is the longest a live one may have; a create arms the real end.
        spec.lifetime = self.limits.max_lifetime;
        let made = async {
            let sandbox = self.provider.create(&spec, &policy).await?;
            if let Err(e) = sandbox.start().await {
                let _ = sandbox.remove().await;
                return Err(e);
            }
            start_agent(&sandbox).await;
            Ok(sandbox)
        }
        .await;
        let unwanted = {
            let mut st = self.lock();
            st.pool.filling = false;
            match made {
                // Made while the worker shut down (the pool gone): removed, not kept.
                Ok(sandbox) if st.pool.shape.is_none() => Some(sandbox),
                Ok(sandbox) => {
                    st.pool.ready.push_back((sandbox, Instant::now()));
                    None
                }
                Err(e) => {
                    st.pool.retry_at = Some(Instant::now() + WARM_RETRY);
                    tracing::warn!(error = %e, retry_in = ?WARM_RETRY, "cannot make a warm live sandbox");
                    None
                }
            }
        };
        if let Some(sandbox) = unwanted {
            let _ = sandbox.remove().await;
        }
    }

    /// The sandbox `id` for `caller`, marked busy until the guard drops (rule 5).
    fn take(&self, caller: &Caller, id: &str) -> Result<Busy<'_, P>, LiveError> {
        let mut st = self.lock();
        let now = Instant::now();
        let Some(live) = st.live.get_mut(id) else {
            return Err(match st.gone.iter().rev().find(|e| e.id == id) {
                Some(e) if e.owner == caller.owner || caller.any => gone(e, now),
                _ => LiveError::NotFound,
            });
        };
        if live.owner != caller.owner && !caller.any {
            return Err(LiveError::NotFound);
        }
        live.busy += 1;
        live.last_used = now;
        Ok(Busy {
            registry: self,
            id: id.to_string(),
            sandbox: live.sandbox.clone(),
        })
    }

    /// Whether `id` is here: live, or ended and still remembered.
    pub fn knows(&self, id: &str) -> bool {
        let st = self.lock();
        st.live.contains_key(id) || st.gone.iter().any(|e| e.id == id)
    }

    /// What `caller` may see of `id`.
    pub fn get(&self, caller: &Caller, id: &str) -> Result<LiveInfo, LiveError> {
        let busy = self.take(caller, id)?;
        let st = self.lock();
        let now = Instant::now();
        let live = st.live.get(&busy.id).ok_or(LiveError::NotFound)?;
        Ok(info(&busy.id, live, now))
    }

    /// The live sandboxes `caller` may see: its own, or all for [`Caller::any`]; by id.
    pub fn list(&self, caller: &Caller) -> Vec<LiveInfo> {
        let st = self.lock();
        let now = Instant::now();
        st.live
            .iter()
            .filter(|(_, l)| caller.any || l.owner == caller.owner)
            .map(|(id, l)| info(id, l, now))
            .collect()
    }

    /// Runs a command in `id`, sending its output to `sink` as it comes; the output it returns
    /// is capped at [`LiveLimits::max_output_bytes`] per stream. A sandbox that is no longer
    /// running ends as lost.
    pub async fn exec(
        &self,
        caller: &Caller,
        id: &str,
        mut req: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> Result<ExecOutput, LiveError> {
        let busy = self.take(caller, id)?;
        let cap = self.limits.max_output_bytes;
        req.output_limit_bytes = Some(req.output_limit_bytes.map_or(cap, |n| n.min(cap)));
        req.last_in_sandbox = false;
        req.after_reset = false;
        // The owner's sandbox for many commands: what one starts in the background stays.
        req.keep_processes = true;
        let out = busy.sandbox.exec_streaming(req, sink).await;
        self.judge(busy, out).await
    }

    /// Sets an environment variable for every later command in `id`.
    pub fn set_env(
        &self,
        caller: &Caller,
        id: &str,
        key: &str,
        value: &str,
    ) -> Result<(), LiveError> {
        let busy = self.take(caller, id)?;
        busy.sandbox.set_env(key, value);
        Ok(())
    }

    /// Writes one file in `id` (at most [`LiveLimits::max_file_bytes`]).
    pub async fn write_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        data: &[u8],
        mode: u32,
    ) -> Result<(), LiveError> {
        self.within_file_bound(data.len())?;
        let busy = self.take(caller, id)?;
        let out = busy.sandbox.write_file(path, data, mode).await;
        self.judge(busy, out).await
    }

    /// Reads one file of `id` (refused past [`LiveLimits::max_file_bytes`]).
    pub async fn read_file(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
    ) -> Result<Vec<u8>, LiveError> {
        let busy = self.take(caller, id)?;
        let out = busy.sandbox.read_file(path).await;
        let data = self.judge(busy, out).await?;
        self.within_file_bound(data.len())?;
        Ok(data)
    }

    /// Reads one file of `id` into `sink` as it comes, at most
    /// [`LiveLimits::max_stream_bytes`] of it and one byte past them for a larger file (the
    /// caller breaks its answer off: see `ExecutionSandbox::read_file_streaming`).
    pub async fn read_file_streaming(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> Result<(), LiveError> {
        let busy = self.take(caller, id)?;
        let limit = self.limits.max_stream_bytes;
        let out = busy.sandbox.read_file_streaming(path, limit, sink).await;
        self.judge(busy, out).await
    }

    /// Writes one file of `id` from `source` as it comes, at most
    /// [`LiveLimits::max_stream_bytes`] (see `ExecutionSandbox::write_file_streaming`); the
    /// bytes written.
    pub async fn write_file_streaming(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        mode: u32,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> Result<u64, LiveError> {
        let busy = self.take(caller, id)?;
        let limit = self.limits.max_stream_bytes;
        let out = busy
            .sandbox
            .write_file_streaming(path, mode, limit, source)
            .await;
        self.judge(busy, out).await
    }

    /// Unpacks the tar archive `source` yields (chunks, an empty one at its end) under the
    /// folder `dir` of `id` as it comes, through `tree_stream::filter` (what it keeps and
    /// leaves out); at most [`LiveLimits::max_stream_bytes`] of files. What went through.
    pub async fn write_tree_streaming(
        &self,
        caller: &Caller,
        id: &str,
        dir: &str,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> Result<super::tree_stream::Filtered, LiveError> {
        let busy = self.take(caller, id)?;
        let limit = self.limits.max_stream_bytes;
        let (tx, rx) = mpsc::channel(4);
        let filter = super::tree_stream::filter(source, tx, limit);
        // The archive the filter writes: its files' bytes and at most a header or three per
        // entry past them.
        let raw = limit.saturating_add(super::tree_stream::MAX_ENTRIES.saturating_mul(1536));
        let write = busy.sandbox.write_tree_streaming(dir, raw, rx);
        let (filtered, written) = tokio::join!(filter, write);
        match filtered {
            Ok(f) => self.judge(busy, written).await.map(|()| f),
            // The write ended first (no room left …): its error says why.
            Err(e @ super::tree_stream::TreeError::SinkGone) => {
                self.judge(busy, written).await?;
                Err(self.refuse_tree(e))
            }
            // The filter's refusal says more than the write it broke off.
            Err(e) => {
                drop(busy);
                Err(self.refuse_tree(e))
            }
        }
    }

    /// The folder `dir` of `id` as a tar archive into `sink` as it is read, through
    /// `tree_stream::filter`: chunks, then an empty one at its end, sent only when all went
    /// through. At most [`LiveLimits::max_stream_bytes`] of files.
    pub async fn read_tree_streaming(
        &self,
        caller: &Caller,
        id: &str,
        dir: &str,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> Result<(), LiveError> {
        let busy = self.take(caller, id)?;
        let limit = self.limits.max_stream_bytes;
        let raw = limit.saturating_add(super::tree_stream::MAX_ENTRIES.saturating_mul(1536));
        let (tx, rx) = mpsc::channel(4);
        let end = tx.clone();
        let filter = super::tree_stream::filter(rx, sink, limit);
        let read = async move {
            let read = busy.sandbox.read_tree_streaming(dir, raw, tx).await;
            // The archive's end for the filter, only when the read went through.
            if read.is_ok() {
                let _ = end.send(Vec::new()).await;
            }
            drop(end);
            (busy, read)
        };
        let (filtered, (busy, read)) = tokio::join!(filter, read);
        self.judge(busy, read).await?;
        match filtered {
            Ok(_) => Ok(()),
            Err(e) => Err(self.refuse_tree(e)),
        }
    }

    /// A tree the filter refused, counted: too large (`file_size`), or not a tar archive that
    /// can be moved (`bad_tree`).
    fn refuse_tree(&self, e: super::tree_stream::TreeError) -> LiveError {
        use super::tree_stream::TreeError;
        let reason = match e {
            TreeError::TooLarge(_) | TreeError::TooManyEntries => "file_size",
            _ => "bad_tree",
        };
        refuse(&mut self.lock(), reason, e.to_string())
    }

    /// Refuses (counted) a streamed file found past [`LiveLimits::max_stream_bytes`].
    pub fn refuse_stream_size(&self, len: u64) -> LiveError {
        let detail = format!("over {len} bytes, at most {}", self.limits.max_stream_bytes);
        refuse(&mut self.lock(), "file_size", detail)
    }

    /// Keeps `id` from idling out: its idle clock starts again now (its absolute end stays).
    /// Any call does that (rule 5); this one asks nothing else, and answers the time left.
    pub fn keep_alive(&self, caller: &Caller, id: &str) -> Result<LiveInfo, LiveError> {
        self.get(caller, id)
    }

    /// Refuses (counted) a file of `len` bytes past [`LiveLimits::max_file_bytes`].
    fn within_file_bound(&self, len: usize) -> Result<(), LiveError> {
        if len <= self.limits.max_file_bytes {
            return Ok(());
        }
        let detail = format!("{len} bytes, at most {}", self.limits.max_file_bytes);
        Err(refuse(&mut self.lock(), "file_size", detail))
    }

    /// A call's answer; a sandbox found not running (or gone from under us) ends as lost, and
    /// the call answers gone.
    async fn judge<T>(
        &self,
        busy: Busy<'_, P>,
        out: super::SandboxResult<T>,
    ) -> Result<T, LiveError> {
        use super::ErrorCategory::{Exited, NotFound};
        match out {
            Ok(v) => Ok(v),
            Err(e) if matches!(e.category, Exited | NotFound) => {
                let id = busy.id.clone();
                drop(busy);
                self.end(&id, GoneWhy::Lost { why: e.to_string() }).await;
                let st = self.lock();
                let now = Instant::now();
                Err(st
                    .gone
                    .iter()
                    .rev()
                    .find(|g| g.id == id)
                    .map_or(LiveError::Sandbox(e), |g| gone(g, now)))
            }
            Err(e) => Err(LiveError::Sandbox(e)),
        }
    }

    /// Carries `id`'s read-write repository back to the host now (what a close does too);
    /// refused as unsupported for a sandbox without one.
    pub async fn sync(&self, caller: &Caller, id: &str) -> Result<SyncReport, LiveError> {
        let busy = self.take(caller, id)?;
        let out = busy.sandbox.sync_workspace().await;
        self.judge(busy, out).await
    }

    /// Closes `id` for `caller` (the owner, or [`Caller::any`]). A sandbox with a read-write
    /// repository is synced back before the answer, which carries what the sync did (or why
    /// it failed): a caller that closes and then reads the repository on the host finds the
    /// sandbox's work there. Any other is removed after the answer.
    pub async fn close(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Option<Result<SyncReport, String>>, LiveError> {
        // The sandbox says whether it has a read-write repository: one without answers the
        // sync at once as unsupported.
        let synced = match self.sync(caller, id).await {
            Ok(report) => Some(Ok(report)),
            Err(LiveError::Sandbox(e)) if e.category == super::ErrorCategory::Unsupported => None,
            // Not its caller's, or it died under the sync: the caller hears so, and why.
            Err(e @ (LiveError::Gone { .. } | LiveError::NotFound)) => return Err(e),
            Err(e) => Some(Err(e.to_string())),
        };
        self.end(
            id,
            GoneWhy::Closed {
                by: caller.owner.clone(),
            },
        )
        .await;
        Ok(synced)
    }

    /// Ends what is due at `now` (rule 4): idle ones with no call under way, and every one past
    /// its absolute end. Returns the ids ended, by id.
    pub async fn reap(&self) -> Vec<String> {
        let now = Instant::now();
        let due: Vec<(String, GoneWhy)> = {
            let st = self.lock();
            st.live
                .iter()
                .filter_map(|(id, l)| {
                    if now >= l.ends {
                        Some((id.clone(), GoneWhy::Expired))
                    } else if l.busy == 0 && now >= l.last_used + l.idle {
                        Some((id.clone(), GoneWhy::Idle))
                    } else {
                        None
                    }
                })
                .collect()
        };
        let mut ended = Vec::with_capacity(due.len());
        for (id, why) in due {
            if self.end(&id, why).await {
                ended.push(id);
            }
        }
        self.fill().await;
        ended
    }

    /// Ends every live sandbox (the worker stops): each removed, remembered as closed by
    /// `by`.
    pub async fn shutdown(&self, by: &str) {
        let ids: Vec<String> = self.lock().live.keys().cloned().collect();
        for id in ids {
            self.end(&id, GoneWhy::Closed { by: by.to_string() }).await;
        }
        let warm: Vec<P::Sandbox> = {
            let mut st = self.lock();
            st.pool.shape = None;
            st.pool.ready.drain(..).map(|(s, _)| s).collect()
        };
        for sandbox in warm {
            let _ = sandbox.remove().await;
        }
        self.removed().await;
    }

    /// Waits until every removal under way has finished.
    pub async fn removed(&self) {
        let mut under_way =
            std::mem::take(&mut *self.removing.lock().unwrap_or_else(|p| p.into_inner()));
        while under_way.join_next().await.is_some() {}
    }

    /// Takes `id` out of the registry, remembers why, and starts removing its sandbox (a task
    /// of its own: the end holds for every caller from here on). Whether it was live.
    async fn end(&self, id: &str, why: GoneWhy) -> bool {
        let (sandbox, kind) = {
            let mut st = self.lock();
            let Some(live) = st.live.remove(id) else {
                return false;
            };
            let kind = why.kind();
            *st.counters.ended.entry(kind).or_default() += 1;
            push_gone(
                &mut st,
                Ended {
                    id: id.to_string(),
                    owner: live.owner,
                    key: live.key,
                    why: why.clone(),
                    at: Instant::now(),
                },
            );
            (live.sandbox, kind)
        };
        self.changed.notify_waiters();
        if let Some(ends) = self.ends.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = ends.send((id.to_string(), why));
        }
        let id = id.to_string();
        let mut removing = self.removing.lock().unwrap_or_else(|p| p.into_inner());
        while removing.try_join_next().is_some() {}
        removing.spawn(async move {
            if let Err(e) = sandbox.remove().await {
                tracing::warn!(live = id, sandbox = sandbox.id(), ended = kind, error = %e,
                    "removing an ended live sandbox failed (its armed end still ends it)");
            }
        });
        true
    }
}

/// Starts `sandbox`'s command agent, which otherwise starts at its first live command (a
/// Docker exec, tens of ms): a command that keeps its processes (`true`), whose failure says
/// nothing the first real command would not say again.
async fn start_agent<S: ExecutionSandbox>(sandbox: &S) {
    let mut warm_up = ExecRequest::new(["true"]);
    warm_up.keep_processes = true;
    let _ = sandbox.exec(warm_up).await;
}

/// A sandbox taken for one call.
struct Busy<'a, P: SandboxProvider> {
    registry: &'a LiveSandboxes<P>,
    id: String,
    sandbox: Arc<P::Sandbox>,
}

impl<P: SandboxProvider> Drop for Busy<'_, P> {
    fn drop(&mut self) {
        let mut st = self.registry.lock();
        if let Some(live) = st.live.get_mut(&self.id) {
            live.busy = live.busy.saturating_sub(1);
            live.last_used = Instant::now();
        }
    }
}

/// Remembers an end, forgetting the oldest past [`GONE_KEPT`].
fn push_gone<S>(st: &mut State<S>, ended: Ended) {
    if st.gone.len() >= GONE_KEPT {
        st.gone.pop_front();
    }
    st.gone.push_back(ended);
}

fn info<S: ExecutionSandbox>(id: &str, live: &Live<S>, now: Instant) -> LiveInfo {
    LiveInfo {
        id: id.to_string(),
        owner: live.owner.clone(),
        sandbox: live.sandbox.id().to_string(),
        idle_left: (live.last_used + live.idle).saturating_duration_since(now),
        lifetime_left: live.ends.saturating_duration_since(now),
    }
}

/// Arms a started sandbox to end after `lifetime` (rule 4), where its kind can be armed.
async fn arm_end<S: ExecutionSandbox>(sandbox: &S, lifetime: Duration) -> Result<(), SandboxError> {
    match sandbox.end_after(lifetime).await {
        Err(e) if e.category == super::ErrorCategory::Unsupported => Ok(()),
        other => other,
    }
}

/// Whether a create of `asked` may take a warm sandbox made from `pool`: the same but for the
/// id, the environment (set on the sandbox when taken) and the lifetime (armed when taken).
fn same_shape(pool: &SandboxSpec, asked: &SandboxSpec) -> bool {
    let bare = |s: &SandboxSpec| SandboxSpec {
        task_id: String::new(),
        env: BTreeMap::new(),
        lifetime: Duration::ZERO,
        ..s.clone()
    };
    bare(pool) == bare(asked)
}

fn gone(e: &Ended, now: Instant) -> LiveError {
    LiveError::Gone {
        why: e.why.clone(),
        ago: now.saturating_duration_since(e.at),
    }
}

fn refuse<S>(st: &mut State<S>, reason: &'static str, detail: String) -> LiveError {
    *st.counters.refused.entry(reason).or_default() += 1;
    LiveError::Refused { reason, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::double::{Op, ScriptedExec, ScriptedProvider};
    use crate::sandbox::{ErrorCategory, FileTree, SandboxState};

    fn registry(limits: LiveLimits) -> (ScriptedProvider, LiveSandboxes<ScriptedProvider>) {
        let provider = ScriptedProvider::new();
        (provider.clone(), LiveSandboxes::new(provider, limits))
    }

    fn create(id: &str, key: Option<&str>) -> CreateLive {
        CreateLive {
            id: id.into(),
            idempotency_key: key.map(Into::into),
            spec: SandboxSpec::new("n1", id, "chorus-sandbox:test"),
            policy: SandboxPolicy::default(),
            idle: Some(Duration::from_secs(60)),
            lifetime: Some(Duration::from_secs(600)),
        }
    }

    /// The counted reason of a refusal, `None` for any other error.
    fn refused_for(err: &LiveError) -> Option<&'static str> {
        match err {
            LiveError::Refused { reason, .. } => Some(reason),
            _ => None,
        }
    }

    fn sink() -> mpsc::Sender<OutputChunk> {
        mpsc::channel(16).0
    }

    /// A streamed write lands only when its end came: chunks then the empty end write the
    /// file, read back as it comes; a source that closes before its end, or that brings more
    /// than the stream bound, writes nothing.
    #[tokio::test(start_paused = true)]
    async fn a_streamed_write_lands_only_whole_and_within_the_bound() {
        let limits = LiveLimits {
            max_stream_bytes: 8,
            ..LiveLimits::default()
        };
        let (_, reg) = registry(limits);
        let alice = Caller::owner("alice");
        reg.create(&alice, create("s1", None)).await.unwrap();
        let send = |chunks: &[&[u8]], end: bool| {
            let (tx, rx) = mpsc::channel(8);
            for c in chunks {
                tx.try_send(c.to_vec()).unwrap();
            }
            if end {
                tx.try_send(Vec::new()).unwrap();
            }
            rx
        };
        let written = reg
            .write_file_streaming(&alice, "s1", "/w/a", 0o644, send(&[b"ab", b"cd"], true))
            .await;
        assert_eq!(written.unwrap(), 4);
        let (tx, mut rx) = mpsc::channel(8);
        reg.read_file_streaming(&alice, "s1", "/w/a", tx)
            .await
            .unwrap();
        assert_eq!(rx.recv().await.unwrap(), b"abcd");
        let broken = reg
            .write_file_streaming(&alice, "s1", "/w/b", 0o644, send(&[b"ab"], false))
            .await;
        assert!(broken.is_err(), "{broken:?}");
        let over = reg
            .write_file_streaming(
                &alice,
                "s1",
                "/w/c",
                0o644,
                send(&[b"abcde", b"fghi"], true),
            )
            .await;
        assert!(over.is_err(), "{over:?}");
        for path in ["/w/b", "/w/c"] {
            assert!(reg.read_file(&alice, "s1", path).await.is_err(), "{path}");
        }
    }

    /// Many steps in one sandbox: a file written is read by a later command's sandbox, an
    /// environment set is seen by later commands, and another owner sees nothing of it.
    #[tokio::test(start_paused = true)]
    async fn one_sandbox_serves_many_steps_of_its_owner_only() {
        let (provider, reg) = registry(LiveLimits::default());
        let alice = Caller::owner("alice");
        let bob = Caller::owner("bob");
        let (made, new) = reg.create(&alice, create("s1", None)).await.unwrap();
        assert_eq!((made.owner.as_str(), new), ("alice", true));
        reg.write_file(&alice, "s1", "/workspace/a.txt", b"hi", 0o644)
            .await
            .unwrap();
        assert_eq!(
            reg.read_file(&alice, "s1", "/workspace/a.txt")
                .await
                .unwrap(),
            b"hi"
        );
        reg.set_env(&alice, "s1", "MODE", "test").unwrap();
        let sb = provider.sandboxes().pop().unwrap();
        sb.push_exec(ScriptedExec::output(0, "ok\n"));
        let out = reg
            .exec(&alice, "s1", ExecRequest::new(["true"]), sink())
            .await
            .unwrap();
        assert_eq!(out.stdout, b"ok\n");
        assert_eq!(provider.sandboxes().len(), 1, "one sandbox for every step");
        assert_eq!(sb_env(&sb, "MODE"), Some("test".to_string()));
        for err in [
            reg.read_file(&bob, "s1", "/workspace/a.txt")
                .await
                .unwrap_err(),
            reg.close(&bob, "s1").await.unwrap_err(),
            reg.get(&bob, "s1").unwrap_err(),
        ] {
            assert!(matches!(err, LiveError::NotFound), "{err}");
        }
        assert!(reg.list(&bob).is_empty());
        assert_eq!(reg.list(&alice).len(), 1);
        let operator = Caller {
            owner: "op".into(),
            any: true,
        };
        assert_eq!(reg.list(&operator).len(), 1);
        reg.close(&alice, "s1").await.unwrap();
        assert!(matches!(
            reg.exec(&alice, "s1", ExecRequest::new(["true"]), sink())
                .await,
            Err(LiveError::Gone {
                why: GoneWhy::Closed { .. },
                ..
            })
        ));
        assert!(
            matches!(reg.get(&bob, "s1"), Err(LiveError::NotFound)),
            "bob learns nothing"
        );
        // The close answered before its container went; the removal follows on its own.
        reg.removed().await;
        assert_eq!(sb.calls().last().unwrap().op, Op::Remove);
    }

    fn sb_env(sb: &crate::sandbox::double::ScriptedSandbox, key: &str) -> Option<String> {
        sb.env().get(key).cloned()
    }

    /// Rule 6: a create of the pool's shape takes a warm sandbox (no container made on its
    /// time; its environment set), one of another shape starts its own, the reaper's tick
    /// refills the pool one at a time, replaces one past its age, and a warm one that died
    /// gives way to a fresh one; a shutdown removes the pool.
    #[tokio::test(start_paused = true)]
    async fn a_create_of_the_pools_shape_takes_a_warm_sandbox_and_the_tick_refills_it() {
        let (provider, reg) = registry(LiveLimits {
            warm: 2,
            ..LiveLimits::default()
        });
        let alice = Caller::owner("alice");
        let shape = create("warm", None);
        reg.keep_warm(shape.spec.clone(), shape.policy.clone());
        reg.reap().await;
        assert_eq!(provider.sandboxes().len(), 1, "one at a time");
        reg.reap().await;
        reg.reap().await;
        assert_eq!(provider.sandboxes().len(), 2, "up to the pool's size");
        let warm_ids: Vec<String> = provider
            .sandboxes()
            .iter()
            .map(|s| s.id().to_string())
            .collect();

        let mut asked = create("s1", None);
        asked.spec.env.insert("STAGE".into(), "one".into());
        let (made, _) = reg.create(&alice, asked).await.unwrap();
        assert_eq!(
            provider.sandboxes().len(),
            2,
            "nothing made on the caller's time"
        );
        assert_eq!(made.sandbox, warm_ids[0], "the oldest warm one");
        let taken = provider
            .sandboxes()
            .into_iter()
            .find(|s| s.id() == made.sandbox)
            .unwrap();
        assert_eq!(sb_env(&taken, "STAGE"), Some("one".into()));
        assert_eq!(reg.counters().from_pool, 1);

        // Another image: its own sandbox.
        let mut other = create("s2", None);
        other.spec.image = "other:image".into();
        let (made, _) = reg.create(&alice, other).await.unwrap();
        assert!(!warm_ids.contains(&made.sandbox));
        assert_eq!(provider.sandboxes().len(), 3);
        assert_eq!(reg.counters().from_pool, 1);

        reg.reap().await;
        assert_eq!(provider.sandboxes().len(), 4, "refilled");
        // Past its age, the oldest warm one is replaced.
        tokio::time::advance(WARM_MAX_AGE).await;
        reg.reap().await;
        let old = provider
            .sandboxes()
            .into_iter()
            .find(|s| s.id() == warm_ids[1])
            .unwrap();
        assert_eq!(old.state().await.unwrap(), SandboxState::Removed);
        assert_eq!(provider.sandboxes().len(), 5);

        // A warm one that cannot be armed is removed, and the create starts a fresh one.
        let next = provider.sandboxes()[3].clone();
        next.fail_next(Op::EndAfter, SandboxError::new(ErrorCategory::Exec, "gone"));
        let (made, _) = reg.create(&alice, create("s3", None)).await.unwrap();
        assert_eq!(next.state().await.unwrap(), SandboxState::Removed);
        assert_ne!(made.sandbox, next.id());
        reg.reap().await;
        reg.shutdown("test").await;
        let left: Vec<_> = provider
            .sandboxes()
            .into_iter()
            .map(|s| s.id().to_string())
            .collect();
        for sb in provider.sandboxes() {
            assert_eq!(sb.state().await.unwrap(), SandboxState::Removed, "{left:?}");
        }
    }

    /// Rule 6: a warm sandbox that cannot be made (a missing image) is tried again only after
    /// [`WARM_RETRY`], not at every tick.
    #[tokio::test(start_paused = true)]
    async fn a_failed_warm_make_waits_before_the_next_try() {
        let (provider, reg) = registry(LiveLimits {
            warm: 1,
            ..LiveLimits::default()
        });
        let shape = create("warm", None);
        reg.keep_warm(shape.spec, shape.policy);
        provider.fail_next_create(SandboxError::new(ErrorCategory::Create, "no image"));
        reg.reap().await;
        tokio::time::advance(WARM_RETRY - Duration::from_secs(1)).await;
        reg.reap().await;
        assert_eq!(provider.sandboxes().len(), 0, "not tried again yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        reg.reap().await;
        assert_eq!(provider.sandboxes().len(), 1);
    }

    /// Rule 3: the same key gives the same sandbox, once.
    #[tokio::test(start_paused = true)]
    async fn a_create_repeated_with_its_key_gives_the_same_sandbox_once() {
        let (provider, reg) = registry(LiveLimits::default());
        let alice = Caller::owner("alice");
        let (first, new) = reg.create(&alice, create("s1", Some("k"))).await.unwrap();
        let (again, again_new) = reg.create(&alice, create("s2", Some("k"))).await.unwrap();
        assert_eq!((first.id.as_str(), new), (again.id.as_str(), !again_new));
        assert_eq!(provider.sandboxes().len(), 1);
        // Another owner's key is another key.
        let (other, _) = reg
            .create(&Caller::owner("bob"), create("s3", Some("k")))
            .await
            .unwrap();
        assert_eq!(other.id, "s3");
        reg.close(&alice, "s1").await.unwrap();
        assert!(matches!(
            reg.create(&alice, create("s4", Some("k"))).await,
            Err(LiveError::Gone { .. })
        ));
        assert_eq!(provider.sandboxes().len(), 2);
    }

    /// Rule 2: bounds per owner and per worker refuse, counted, and make nothing.
    #[tokio::test(start_paused = true)]
    async fn bounds_refuse_with_counted_reasons() {
        let limits = LiveLimits {
            per_owner: 2,
            total: 3,
            ..LiveLimits::default()
        };
        let (provider, reg) = registry(limits);
        let alice = Caller::owner("alice");
        reg.create(&alice, create("a1", None)).await.unwrap();
        reg.create(&alice, create("a2", None)).await.unwrap();
        let err = reg.create(&alice, create("a3", None)).await.unwrap_err();
        assert_eq!(refused_for(&err), Some("per_owner"), "{err}");
        reg.create(&Caller::owner("bob"), create("b1", None))
            .await
            .unwrap();
        let err = reg
            .create(&Caller::owner("carol"), create("c1", None))
            .await
            .unwrap_err();
        assert_eq!(refused_for(&err), Some("worker_full"), "{err}");
        let mut too_long = create("c2", None);
        too_long.lifetime = Some(Duration::from_secs(24 * 3600));
        let err = reg
            .create(&Caller::owner("carol"), too_long)
            .await
            .unwrap_err();
        assert_eq!(refused_for(&err), Some("lifetime"), "{err}");
        let err = reg.create(&alice, create("a1", None)).await.unwrap_err();
        assert_eq!(refused_for(&err), Some("duplicate_id"), "{err}");
        let c = reg.counters();
        assert_eq!(
            c.refused,
            BTreeMap::from([
                ("duplicate_id", 1),
                ("lifetime", 1),
                ("per_owner", 1),
                ("worker_full", 1)
            ])
        );
        assert_eq!((c.created, provider.sandboxes().len()), (3, 3));
        let big = vec![0u8; reg.limits().max_file_bytes + 1];
        let err = reg
            .write_file(&alice, "a1", "/workspace/big", &big, 0o644)
            .await
            .unwrap_err();
        assert_eq!(refused_for(&err), Some("file_size"), "{err}");
    }

    /// Rules 4 and 5: idle ones end after their idle timeout unless a call is under way;
    /// every one ends at its absolute end; later calls say why.
    #[tokio::test(start_paused = true)]
    async fn idle_and_expired_sandboxes_end_and_say_why() {
        let (_provider, reg) = registry(LiveLimits::default());
        let alice = Caller::owner("alice");
        reg.create(&alice, create("idle", None)).await.unwrap();
        reg.create(&alice, create("used", None)).await.unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        reg.set_env(&alice, "used", "A", "1").unwrap();
        assert!(reg.reap().await.is_empty());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(reg.reap().await, ["idle"]);
        // Kept busy past its idle timeout, it still ends at its absolute end.
        let held = reg.take(&alice, "used").unwrap();
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(reg.reap().await, ["used"]);
        drop(held);
        assert!(matches!(
            reg.get(&alice, "idle"),
            Err(LiveError::Gone {
                why: GoneWhy::Idle,
                ..
            })
        ));
        assert!(matches!(
            reg.get(&alice, "used"),
            Err(LiveError::Gone {
                why: GoneWhy::Expired,
                ..
            })
        ));
        let ended = reg.counters().ended;
        assert_eq!(ended, BTreeMap::from([("expired", 1), ("idle", 1)]));
    }

    /// A keep-alive starts the idle clock again, never past the absolute end; a tree counts
    /// its files' bytes together against the stream bound (refused, counted, nothing written).
    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_holds_off_the_idle_end_only_and_trees_are_bounded() {
        let limits = LiveLimits {
            max_stream_bytes: 10,
            ..LiveLimits::default()
        };
        let (provider, reg) = registry(limits);
        let alice = Caller::owner("alice");
        reg.create(&alice, create("kept", None)).await.unwrap();
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(50)).await;
            let info = reg.keep_alive(&alice, "kept").unwrap();
            assert_eq!(info.idle_left, Duration::from_secs(60));
            assert!(reg.reap().await.is_empty());
        }
        assert!(matches!(
            reg.keep_alive(&Caller::owner("bob"), "kept"),
            Err(LiveError::NotFound)
        ));
        let file = |n: usize| crate::sandbox::FileEntry {
            data: vec![b'x'; n],
            mode: 0o644,
        };
        // A tree as a caller sends it: its archive in chunks, then the end.
        let archive = |tree: &FileTree| {
            let (tx, rx) = mpsc::channel(4);
            let bytes = crate::sandbox::docker::tree_to_tar(tree).unwrap();
            tokio::spawn(async move {
                for part in bytes.chunks(700) {
                    let _ = tx.send(part.to_vec()).await;
                }
                let _ = tx.send(Vec::new()).await;
            });
            rx
        };
        let small = FileTree::from([("a".to_string(), file(5)), ("b/c".to_string(), file(5))]);
        let went = reg
            .write_tree_streaming(&alice, "kept", "/workspace", archive(&small))
            .await
            .unwrap();
        assert_eq!((went.files, went.bytes), (2, 10));
        let big = FileTree::from([("a".to_string(), file(6)), ("b".to_string(), file(5))]);
        let writes = provider.sandboxes()[0].calls().len();
        let err = reg
            .write_tree_streaming(&alice, "kept", "/workspace", archive(&big))
            .await
            .unwrap_err();
        assert_eq!(refused_for(&err), Some("file_size"), "{err}");
        assert_eq!(
            provider.sandboxes()[0].calls().len(),
            writes,
            "nothing written"
        );
        assert_eq!(reg.counters().refused.get("file_size"), Some(&1));
        // Its absolute end holds whatever keeps it alive.
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(reg.reap().await, ["kept"]);
    }

    /// A sandbox whose main process died is lost: the call and every later one say so.
    #[tokio::test(start_paused = true)]
    async fn a_dead_sandbox_is_reported_lost() {
        let (provider, reg) = registry(LiveLimits::default());
        let alice = Caller::owner("alice");
        reg.create(&alice, create("s1", None)).await.unwrap();
        let sb = provider.sandboxes().pop().unwrap();
        sb.set_state(SandboxState::Exited {
            exit_code: 137,
            oom_killed: false,
        });
        let err = reg
            .exec(&alice, "s1", ExecRequest::new(["true"]), sink())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LiveError::Gone {
                    why: GoneWhy::Lost { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(matches!(reg.get(&alice, "s1"), Err(LiveError::Gone { .. })));
        // A create that fails to start leaves nothing behind.
        provider.fail_next_create(SandboxError::new(ErrorCategory::Create, "no"));
        assert!(matches!(
            reg.create(&alice, create("s2", None)).await,
            Err(LiveError::Sandbox(_))
        ));
        assert!(reg.list(&alice).is_empty());
    }
}
