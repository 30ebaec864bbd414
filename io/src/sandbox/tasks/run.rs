//! One run of a task: take a sandbox, run the command with the spec's env, working directory
//! and timeout while keeping the output's tails, stop early when asked, give the sandbox back,
//! and turn what happened into the event the core takes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::task::MAX_TAIL_BYTES;
use chorus_core::{Event, RunTimings, SandboxExit, TaskId, TaskSpec, Usage};
use tokio::sync::{mpsc, oneshot};

use super::super::{
    ErrorCategory, ExecOutput, ExecRequest, ExecutionSandbox, OutputChunk, OutputStream,
    PooledSandbox, RepoMount, SandboxError, SandboxPool, SandboxProvider, SandboxResult,
    SandboxSpec, UsageTotals,
};
use super::{lifetime_for, LogWriter, Shared, Tails, TaskShape, REUSE_MARGIN};

/// The signal a stopped or timed-out run reports: it was killed.
const SIGKILL: i32 = 9;

/// The longest a run's result waits for its usage (a sandbox without its own accounting asks
/// the Engine, which answers at its once-a-second collection).
const USAGE_WAIT: Duration = Duration::from_secs(2);

/// A sandbox held for one run.
enum Held<P: SandboxProvider + 'static> {
    /// From a pool; with the key it may be given back under (rule 1), when reuse is on.
    Pooled(PooledSandbox<P>, Option<String>),
    Fresh(P::Sandbox),
}

impl<P: SandboxProvider + 'static> Held<P> {
    fn sandbox(&self) -> &P::Sandbox {
        match self {
            Held::Pooled(s, _) => s,
            Held::Fresh(s) => s,
        }
    }

    /// Whether the run's command must go after a reset (a kept sandbox not reset yet).
    fn needs_reset(&self) -> bool {
        matches!(self, Held::Pooled(s, _) if s.needs_reset())
    }

    /// The usage totals the sandbox had before this run (a reused one's), to subtract.
    fn base_totals(&self) -> Option<UsageTotals> {
        match self {
            Held::Pooled(s, _) => s.reused(),
            Held::Fresh(_) => None,
        }
    }

    /// Gives the sandbox back: a pooled one is removed in the background; a fresh one is
    /// removed now (a read-write repository is synced back first, so the result comes after
    /// the changes landed, and says what of them did not: the line returned).
    async fn finish(self) -> SandboxResult<Option<String>> {
        match self {
            Held::Pooled(s, _) => {
                s.release();
                Ok(None)
            }
            Held::Fresh(s) => s.remove_reporting().await,
        }
    }

    /// Gives a pooled sandbox back under its key (rule 1) — kept, and reset before its next
    /// run — or, where it has none, finishes it as [`Held::finish`] does.
    async fn give_back(
        self,
        usable_until: Instant,
        totals: Option<UsageTotals>,
    ) -> SandboxResult<Option<String>> {
        match self {
            Held::Pooled(s, Some(key)) => {
                s.give_back(key, usable_until, totals);
                Ok(None)
            }
            other => other.finish().await,
        }
    }
}

/// How the command ended.
enum Outcome {
    Done(SandboxResult<ExecOutput>),
    Stopped,
}

/// Runs `attempt` of `task` and returns its end.
pub(super) async fn run<P: SandboxProvider + Clone + 'static>(
    shared: &Shared<P>,
    task: &TaskId,
    attempt: u32,
    spec: &TaskSpec,
    mut stop: oneshot::Receiver<()>,
) -> Event {
    let begun = Instant::now();
    let failed = |e: SandboxError| {
        shared.stats.failed();
        Event::SandboxFailed {
            task: task.clone(),
            attempt,
            error: format!("{}: {}", e.category, e.message),
            retryable: e.retryable,
        }
    };
    // A spec this worker will not run: refused before any sandbox, never retried.
    let refused = |why: String| {
        shared.stats.failed();
        Event::SandboxFailed {
            task: task.clone(),
            attempt,
            error: format!("policy_violation: {why}"),
            retryable: false,
        }
    };
    if let Err(why) = shared.config.ceilings.check(spec) {
        return refused(why);
    }
    // Secret values are opened here, for the exec's environment only (never a label, a log
    // line or the sandbox's own environment).
    let env = match super::secret::open_env(&spec.env, shared.config.secret_key.as_ref()) {
        Ok(env) => env,
        Err(why) => return refused(why),
    };
    // Taking the sandbox is not interrupted by a stop: a creation dropped half-way could leave
    // a container behind. A stop that came meanwhile is seen right after.
    let mut held = match take(shared, task, spec, shared.config.reuse).await {
        Ok(h) => h,
        Err(e) => return failed(e),
    };
    let mut acquired = begun.elapsed();
    let from_pool = matches!(&held, Held::Pooled(p, _) if p.from_pool());
    shared.stats.started(acquired, from_pool);
    tracing::debug!(%task, attempt, sandbox = held.sandbox().id(), from_pool,
        waited_ms = acquired.as_millis() as u64, "task run started");

    let mut tails = Tails::new(MAX_TAIL_BYTES);
    let mut log = open_log(shared, task, attempt);
    let (armed, commanded, outcome) = loop {
        // The sandbox's end is armed before the command (module rule 2): a line to its
        // supervisor, not an exec.
        let arming = Instant::now();
        arm_end(shared, &held, task, spec).await;
        let armed = arming.elapsed();
        let commanded = Instant::now();
        let outcome = if stop.try_recv().is_ok() {
            Outcome::Stopped
        } else {
            let mut req = request(spec);
            req.env = env.clone();
            // Rule 1: a sandbox kept for this submitter runs nothing of this run before its
            // reset vouched for it.
            req.after_reset = held.needs_reset();
            execute(held.sandbox(), req, &mut tails, log.as_mut(), &mut stop).await
        };
        match outcome {
            // Nothing of the run ran: a fresh sandbox instead (never a kept one, so once).
            Outcome::Done(Err(e))
                if e.category == ErrorCategory::NotClean && held.needs_reset() =>
            {
                tracing::warn!(%task, sandbox = held.sandbox().id(), error = %e,
                    "a kept sandbox could not be reset for the run; running it in another");
                if let Held::Pooled(s, _) = &held {
                    s.count_failed_reset();
                }
                // Removed in the background, as any pooled run's sandbox is.
                let _ = held.finish().await;
                held = match take(shared, task, spec, false).await {
                    Ok(h) => h,
                    Err(e) => return failed(e),
                };
                acquired = begun.elapsed();
            }
            outcome => break (armed, commanded, outcome),
        }
    };
    let executed = commanded.elapsed();
    // Ended before the result leaves: whoever reads the result finds the log finished.
    if let Some(log) = log {
        log.finish();
    }
    let duration_ms = executed.as_millis() as u64;
    let after_output = match &outcome {
        Outcome::Done(Ok(out)) => out.after_output.min(executed),
        _ => Duration::ZERO,
    };
    // Read before the sandbox goes: the run's sandbox is its own, so its totals are the run's
    // (the idle init it starts with adds next to nothing).
    let reading = Instant::now();
    let totals = match tokio::time::timeout(USAGE_WAIT, held.sandbox().totals()).await {
        Ok(Ok(t)) => Some(t),
        Ok(Err(e)) => {
            tracing::debug!(%task, error = %e, "no usage for the run");
            None
        }
        Err(_) => {
            tracing::debug!(%task, "no usage for the run: the sandbox did not answer in time");
            None
        }
    };
    // A reused sandbox's CPU time goes on from its earlier runs: this run's is the difference.
    // Its memory peak is its whole life's (the kernel keeps no per-run peak).
    let usage = totals.map_or_else(Usage::default, |t| {
        let base = held.base_totals().unwrap_or_default();
        Usage {
            cpu_ms: t.cpu_ns.saturating_sub(base.cpu_ns) / 1_000_000,
            peak_memory_kb: t.memory_peak_bytes / 1024,
        }
    });
    let read = reading.elapsed();
    let releasing = Instant::now();
    // Rule 1: only a command that exited by itself leaves a sandbox worth resetting.
    let exited = matches!(&outcome, Outcome::Done(Ok(_)));
    let finished = if exited {
        // The watchdog armed for this run fires `timeout + grace` after the command started.
        let fires = commanded + Duration::from_millis(spec.timeout_ms) + shared.config.run_grace;
        held.give_back(fires.checked_sub(REUSE_MARGIN).unwrap_or(commanded), totals)
            .await
    } else {
        held.finish().await
    };
    let timings = RunTimings {
        acquire_ms: ms(acquired),
        arm_ms: ms(armed),
        exec_ms: ms(executed - after_output),
        cleanup_ms: ms(after_output + read),
        release_ms: ms(releasing.elapsed()),
    };
    shared.stats.stages(&timings);
    // What the sync back left on the host goes to the end of stderr's tail, where the result
    // shows it (issue 51, finding 2: a sync that cannot apply everything says so).
    if let Ok(Some(note)) = &finished {
        tails.push(&OutputChunk {
            stream: OutputStream::Stderr,
            data: format!("\nchorus: {note}\n").into_bytes(),
        });
    }
    let exit = |exit: SandboxExit| Event::SandboxExited {
        task: task.clone(),
        attempt,
        exit: SandboxExit {
            duration_ms,
            usage,
            stdout: tails.stdout(),
            stderr: tails.stderr(),
            stdout_truncated_bytes: tails.stdout_dropped(),
            stderr_truncated_bytes: tails.stderr_dropped(),
            timings,
            ..exit
        },
    };
    let end = match outcome {
        Outcome::Stopped => exit(SandboxExit {
            signal: Some(SIGKILL),
            ..SandboxExit::default()
        }),
        Outcome::Done(Ok(out)) => exit(SandboxExit {
            exit_code: Some(i32::try_from(out.exit_code).unwrap_or(i32::MAX)),
            ..SandboxExit::default()
        }),
        Outcome::Done(Err(e)) if e.category == ErrorCategory::Timeout => exit(SandboxExit {
            signal: Some(SIGKILL),
            timed_out: true,
            ..SandboxExit::default()
        }),
        Outcome::Done(Err(e)) if e.category == ErrorCategory::ResourceLimit => exit(SandboxExit {
            exit_code: Some(128 + SIGKILL),
            signal: Some(SIGKILL),
            oom: true,
            ..SandboxExit::default()
        }),
        Outcome::Done(Err(e)) => return failed(e),
    };
    // A read-write repository whose changes did not come back: the run's work is lost, and the
    // result must not say it succeeded.
    if let (Err(e), Some(repo)) = (finished, &spec.repo) {
        if repo.writable {
            return failed(e);
        }
    }
    end
}

/// Whole milliseconds, rounded to the nearest (a stage of 0.6 ms shows as 1).
fn ms(d: Duration) -> u64 {
    (d.as_micros().saturating_add(500) / 1_000) as u64
}

/// A running sandbox for the run: from the warm pool of its shape, or fresh.
async fn take<P: SandboxProvider + Clone + 'static>(
    shared: &Shared<P>,
    task: &TaskId,
    spec: &TaskSpec,
    reuse: bool,
) -> SandboxResult<Held<P>> {
    let config = &shared.config;
    let shape = TaskShape::of(spec);
    let timeout = Duration::from_millis(spec.timeout_ms);
    let pooled =
        spec.repo.is_none() && config.pool_size > 0 && timeout <= config.max_pooled_timeout();
    if pooled {
        let pool: Arc<SandboxPool<P>> = shared.pool(&shape);
        // Rule 1: one key per (origin, submitter); the pool is the shape's.
        let key = reuse.then(|| {
            format!(
                "{}/{}",
                task.origin,
                spec.submitter.as_deref().unwrap_or("-")
            )
        });
        return match pool.acquire_for(&task.to_string(), key.as_deref()).await {
            Ok(s) => Ok(Held::Pooled(s, key)),
            Err(e) => {
                if !e.retryable {
                    shared.drop_pool(&shape, &pool);
                }
                Err(e)
            }
        };
    }
    let mut sandbox_spec = SandboxSpec::new(&config.node_id, task.to_string(), &spec.image);
    sandbox_spec.lifetime = lifetime_for(timeout, config.run_grace);
    if let Some(repo) = &spec.repo {
        let Some(path) = config.repos.get(&repo.name) else {
            return Err(SandboxError::new(
                ErrorCategory::PolicyViolation,
                format!("this node has no repository `{}`", repo.name),
            ));
        };
        sandbox_spec = sandbox_spec.with_workspace(if repo.writable {
            RepoMount::read_write(path)
        } else {
            RepoMount::read_only(path)
        });
    }
    let policy = shape.policy(&config.base_policy);
    let sandbox = shared.provider.create(&sandbox_spec, &policy).await?;
    if let Err(e) = sandbox.start().await {
        let _ = sandbox.remove().await;
        return Err(e);
    }
    Ok(Held::Fresh(sandbox))
}

/// Makes a pooled sandbox end by itself at the run's timeout plus the grace (module rule 2): it
/// was made before the run, to live an hour. A fresh sandbox's own lifetime says the same
/// already. Where it cannot be armed, the run goes on: its sandbox is bounded by its lifetime
/// and the periodic reap, and a warning says so.
async fn arm_end<P: SandboxProvider + Clone + 'static>(
    shared: &Shared<P>,
    held: &Held<P>,
    task: &TaskId,
    spec: &TaskSpec,
) {
    let Held::Pooled(sandbox, _) = held else {
        return;
    };
    let end = Duration::from_millis(spec.timeout_ms).saturating_add(shared.config.run_grace);
    if let Err(e) = sandbox.end_after(end).await {
        tracing::warn!(%task, sandbox = sandbox.id(), error = %e,
            "the run's sandbox cannot end by itself after the timeout and grace; the pool's \
             lifetime and the periodic reap bound it instead");
    }
}

/// The command of `spec` as an exec request; the head the sandbox keeps is cut to the tail's
/// size (the tails come from the stream).
fn request(spec: &TaskSpec) -> ExecRequest {
    let mut req = ExecRequest::new(spec.command.iter().cloned())
        .timeout(Duration::from_millis(spec.timeout_ms))
        .output_limit(MAX_TAIL_BYTES);
    // Rule 1: the sandbox goes after this command; one with a repository keeps its clean-up,
    // so nothing left running writes while the workspace is synced back.
    if spec.repo.is_none() {
        req = req.last_in_sandbox();
    }
    req.env = spec.env.clone();
    req.working_dir = spec.workdir.clone();
    req
}

/// The run's log, when the runner keeps logs and it can be made (module rule 8).
fn open_log<P: SandboxProvider + Clone + 'static>(
    shared: &Shared<P>,
    task: &TaskId,
    attempt: u32,
) -> Option<LogWriter> {
    let store = shared.config.logs.as_ref()?;
    match store.create(task, attempt) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(%task, attempt, error = %e,
                "the run's output is not kept (only its result's tails)");
            None
        }
    }
}

/// Runs the command, keeping the tails of its output (and all of it in `log`), until it ends
/// or a stop arrives.
async fn execute<S: ExecutionSandbox>(
    sandbox: &S,
    req: ExecRequest,
    tails: &mut Tails,
    mut log: Option<&mut LogWriter>,
    stop: &mut oneshot::Receiver<()>,
) -> Outcome {
    let mut keep = |chunk: &OutputChunk| {
        tails.push(chunk);
        if let Some(log) = log.as_deref_mut() {
            log.push(chunk.stream, &chunk.data);
        }
    };
    let (tx, mut rx) = mpsc::channel(64);
    let exec = sandbox.exec_streaming(req, tx);
    tokio::pin!(exec);
    let outcome = loop {
        tokio::select! {
            biased;
            Ok(()) = &mut *stop => break Outcome::Stopped,
            Some(chunk) = rx.recv() => keep(&chunk),
            result = &mut exec => break Outcome::Done(result),
        }
    };
    // What was sent before the end and not yet taken.
    while let Ok(chunk) = rx.try_recv() {
        keep(&chunk);
    }
    outcome
}
