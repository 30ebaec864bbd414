//! A scripted test double of the sandbox: commands return pre-recorded results, files and env
//! live in memory, every call is recorded, and any operation can be made to fail. For the core
//! and the simulator, which must be deterministic and must not need Docker.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;

use super::error::{ErrorCategory, SandboxError, SandboxResult};
use super::{
    ExecOutput, ExecRequest, ExecutionSandbox, FileEntry, FileTree, OutputChunk, OutputStream,
    ResourceUsage, SandboxPolicy, SandboxProvider, SandboxSpec, SandboxState, UsageTotals,
};

/// An operation of the sandbox, for recording calls and injecting failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// [`SandboxProvider::create`].
    Create,
    /// [`ExecutionSandbox::start`].
    Start,
    /// [`ExecutionSandbox::exec`] and [`ExecutionSandbox::exec_streaming`].
    Exec,
    /// [`ExecutionSandbox::write_file`] and [`ExecutionSandbox::write_tree`].
    Write,
    /// [`ExecutionSandbox::read_file`] and [`ExecutionSandbox::read_tree`].
    Read,
    /// [`ExecutionSandbox::usage`].
    Usage,
    /// [`ExecutionSandbox::end_after`].
    EndAfter,
    /// [`ExecutionSandbox::reset`].
    Reset,
    /// [`ExecutionSandbox::end_leftovers`].
    EndLeftovers,
    /// [`ExecutionSandbox::stop`].
    Stop,
    /// [`ExecutionSandbox::remove`].
    Remove,
}

/// One scripted answer to a command.
#[derive(Debug, Clone)]
pub struct ScriptedExec {
    /// When set, the command's argv must start with these words, or the exec fails with
    /// [`ErrorCategory::Exec`] ("unexpected command") — a test bug caught early.
    pub expect_prefix: Option<Vec<String>>,
    /// The answer.
    pub result: Result<ExecOutput, SandboxError>,
}

impl ScriptedExec {
    /// A command that exits with `exit_code` printing `stdout`.
    pub fn output(exit_code: i64, stdout: impl Into<Vec<u8>>) -> Self {
        ScriptedExec {
            expect_prefix: None,
            result: Ok(ExecOutput {
                exit_code,
                stdout: stdout.into(),
                duration: Duration::from_millis(1),
                ..ExecOutput::default()
            }),
        }
    }

    /// A command that fails with `category`.
    pub fn error(category: ErrorCategory, message: impl Into<String>) -> Self {
        ScriptedExec {
            expect_prefix: None,
            result: Err(SandboxError::new(category, message)),
        }
    }

    /// The same answer, given only to a command starting with `prefix`.
    pub fn expecting<I, S>(mut self, prefix: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.expect_prefix = Some(prefix.into_iter().map(Into::into).collect());
        self
    }
}

/// A recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Which operation.
    pub op: Op,
    /// Its main argument: the argv joined with spaces, or the path.
    pub detail: String,
}

#[derive(Debug, Default)]
struct Inner {
    state: Option<SandboxState>,
    script: VecDeque<ScriptedExec>,
    failures: BTreeMap<Op, VecDeque<SandboxError>>,
    files: BTreeMap<String, FileEntry>,
    env: BTreeMap<String, String>,
    usage: ResourceUsage,
    totals: UsageTotals,
    calls: Vec<Call>,
    /// Its owner is gone (a test says so): `reap_stale` removes it.
    orphaned: bool,
    /// Its reset goes with the next command ([`ExecutionSandbox::resets_in_exec`]).
    resets_in_exec: bool,
}

/// The scripted sandbox. Clones share state, so a test can keep a handle to script and inspect
/// a sandbox that the code under test owns.
#[derive(Debug, Clone)]
pub struct ScriptedSandbox {
    id: String,
    inner: Arc<Mutex<Inner>>,
}

impl ScriptedSandbox {
    /// A created (not started) sandbox with an empty script. Unscripted commands exit 0 with no
    /// output.
    pub fn new(id: impl Into<String>) -> Self {
        ScriptedSandbox {
            id: id.into(),
            inner: Arc::new(Mutex::new(Inner {
                state: Some(SandboxState::Created),
                ..Inner::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Poisoning only follows a panic in a test; the data is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues the answer to the next unanswered command.
    pub fn push_exec(&self, exec: ScriptedExec) -> &Self {
        self.lock().script.push_back(exec);
        self
    }

    /// Marks it as left by an owner that is gone, as a crashed process leaves its sandboxes:
    /// [`SandboxProvider::reap_stale`] removes it.
    pub fn orphan(&self) -> &Self {
        self.lock().orphaned = true;
        self
    }

    /// Makes the next call of `op` fail with `error`.
    pub fn fail_next(&self, op: Op, error: SandboxError) -> &Self {
        self.lock().failures.entry(op).or_default().push_back(error);
        self
    }

    /// Sets what [`ExecutionSandbox::usage`] reports.
    pub fn set_usage(&self, usage: ResourceUsage) {
        self.lock().usage = usage;
    }

    /// Sets what [`ExecutionSandbox::totals`] reports.
    pub fn set_totals(&self, totals: UsageTotals) {
        self.lock().totals = totals;
    }

    /// Forces the state (e.g. to simulate the main process dying).
    pub fn set_state(&self, state: SandboxState) {
        self.lock().state = Some(state);
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// How many scripted answers are still unused.
    pub fn remaining_script(&self) -> usize {
        self.lock().script.len()
    }

    fn begin(&self, op: Op, detail: String) -> SandboxResult<()> {
        let mut inner = self.lock();
        inner.calls.push(Call { op, detail });
        if let Some(err) = inner.failures.get_mut(&op).and_then(VecDeque::pop_front) {
            return Err(err);
        }
        match inner.state {
            Some(SandboxState::Removed) if op != Op::Remove && op != Op::Stop => {
                Err(SandboxError::new(
                    ErrorCategory::NotFound,
                    format!("sandbox {} was removed", self.id),
                ))
            }
            _ => Ok(()),
        }
    }

    fn require_running(&self) -> SandboxResult<()> {
        match self.lock().state {
            Some(SandboxState::Running) => Ok(()),
            Some(SandboxState::Exited {
                exit_code,
                oom_killed: true,
            }) => Err(SandboxError::new(
                ErrorCategory::ResourceLimit,
                format!("sandbox main process was OOM-killed ({exit_code})"),
            )),
            other => Err(SandboxError::new(
                ErrorCategory::Exited,
                format!("sandbox {} is not running ({other:?})", self.id),
            )),
        }
    }

    fn answer(&self, request: &ExecRequest) -> SandboxResult<ExecOutput> {
        self.begin(Op::Exec, request.argv.join(" "))?;
        if request.argv.is_empty() {
            return Err(SandboxError::new(ErrorCategory::Exec, "empty command"));
        }
        self.require_running()?;
        // A reset first, in the same exec (recorded as a reset "in exec"; fails as scripted,
        // and then nothing of the request runs).
        if request.after_reset {
            if let Err(e) = self.begin(Op::Reset, "in exec".into()) {
                return Err(SandboxError::not_clean(&self.id, e.message));
            }
            self.lock().files.clear();
        }
        let Some(next) = self.lock().script.pop_front() else {
            return Ok(ExecOutput::default());
        };
        if let Some(prefix) = &next.expect_prefix {
            if !request.argv.starts_with(prefix) {
                return Err(SandboxError::new(
                    ErrorCategory::Exec,
                    format!(
                        "unexpected command {:?}; the script expected {prefix:?}",
                        request.argv
                    ),
                ));
            }
        }
        let mut result = next.result;
        // Apply the request's output cap as a real sandbox would.
        if let (Ok(out), Some(cap)) = (&mut result, request.output_limit_bytes) {
            if out.stdout.len() > cap {
                out.stdout.truncate(cap);
                out.stdout_truncated = true;
            }
            if out.stderr.len() > cap {
                out.stderr.truncate(cap);
                out.stderr_truncated = true;
            }
        }
        result
    }
}

impl ExecutionSandbox for ScriptedSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    async fn start(&self) -> SandboxResult<()> {
        self.begin(Op::Start, String::new())?;
        self.lock().state = Some(SandboxState::Running);
        Ok(())
    }

    async fn exec(&self, request: ExecRequest) -> SandboxResult<ExecOutput> {
        self.answer(&request)
    }

    async fn exec_streaming(
        &self,
        request: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> SandboxResult<ExecOutput> {
        let out = self.answer(&request)?;
        for (stream, data) in [
            (OutputStream::Stdout, &out.stdout),
            (OutputStream::Stderr, &out.stderr),
        ] {
            if !data.is_empty() {
                let _ = sink
                    .send(OutputChunk {
                        stream,
                        data: data.clone(),
                    })
                    .await;
            }
        }
        Ok(out)
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> SandboxResult<()> {
        self.begin(Op::Write, path.to_string())?;
        self.require_running()?;
        self.lock().files.insert(
            path.to_string(),
            FileEntry {
                data: data.to_vec(),
                mode,
            },
        );
        Ok(())
    }

    async fn read_file(&self, path: &str) -> SandboxResult<Vec<u8>> {
        self.begin(Op::Read, path.to_string())?;
        self.require_running()?;
        self.lock()
            .files
            .get(path)
            .map(|f| f.data.clone())
            .ok_or_else(|| SandboxError::new(ErrorCategory::Io, format!("{path}: no such file")))
    }

    async fn write_tree(&self, dir: &str, tree: &FileTree) -> SandboxResult<()> {
        self.begin(Op::Write, dir.to_string())?;
        self.require_running()?;
        let dir = dir.trim_end_matches('/');
        let mut inner = self.lock();
        for (rel, entry) in tree {
            inner.files.insert(format!("{dir}/{rel}"), entry.clone());
        }
        Ok(())
    }

    async fn read_tree(&self, dir: &str) -> SandboxResult<FileTree> {
        self.begin(Op::Read, dir.to_string())?;
        self.require_running()?;
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        Ok(self
            .lock()
            .files
            .iter()
            .filter_map(|(path, entry)| {
                path.strip_prefix(&prefix)
                    .map(|rel| (rel.to_string(), entry.clone()))
            })
            .collect())
    }

    fn set_env(&self, key: &str, value: &str) {
        self.lock().env.insert(key.to_string(), value.to_string());
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.lock().env.clone()
    }

    async fn usage(&self) -> SandboxResult<ResourceUsage> {
        self.begin(Op::Usage, String::new())?;
        Ok(self.lock().usage)
    }

    async fn totals(&self) -> SandboxResult<UsageTotals> {
        self.begin(Op::Usage, String::new())?;
        Ok(self.lock().totals)
    }

    async fn state(&self) -> SandboxResult<SandboxState> {
        Ok(self.lock().state.unwrap_or(SandboxState::Removed))
    }

    /// Recorded (detail: the delay in ms); the double ends nothing by itself (a test moves its
    /// state with `set_state`).
    async fn end_after(&self, after: Duration) -> SandboxResult<()> {
        self.begin(Op::EndAfter, format!("{}ms", after.as_millis()))?;
        self.require_running()
    }

    fn resets_in_exec(&self) -> bool {
        self.lock().resets_in_exec
    }

    /// Recorded; a running double is reset by forgetting its files (fails as scripted).
    async fn reset(&self) -> SandboxResult<()> {
        self.begin(Op::Reset, String::new())?;
        self.require_running()?;
        self.lock().files.clear();
        Ok(())
    }

    /// Recorded; fails as scripted, or when the double is not running.
    async fn end_leftovers(&self) -> SandboxResult<()> {
        self.begin(Op::EndLeftovers, String::new())?;
        self.require_running()
    }

    async fn stop(&self) -> SandboxResult<()> {
        self.begin(Op::Stop, String::new())?;
        let mut inner = self.lock();
        if inner.state == Some(SandboxState::Running) {
            inner.state = Some(SandboxState::Exited {
                exit_code: 137,
                oom_killed: false,
            });
        }
        Ok(())
    }

    async fn remove(&self) -> SandboxResult<()> {
        self.begin(Op::Remove, String::new())?;
        let mut inner = self.lock();
        inner.state = Some(SandboxState::Removed);
        inner.files.clear();
        Ok(())
    }
}

/// Makes [`ScriptedSandbox`]es, keeping a handle to each so tests can script them, and
/// implementing `reap` over the ones not yet removed.
#[derive(Debug, Clone, Default)]
pub struct ScriptedProvider {
    made: Arc<Mutex<Vec<(String, ScriptedSandbox)>>>,
    create_failures: Arc<Mutex<VecDeque<SandboxError>>>,
    resets_in_exec: Arc<std::sync::atomic::AtomicBool>,
}

impl ScriptedProvider {
    /// A provider that has made nothing yet.
    pub fn new() -> Self {
        ScriptedProvider::default()
    }

    /// Every sandbox made so far (shared handles).
    pub fn sandboxes(&self) -> Vec<ScriptedSandbox> {
        self.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// Sandboxes made from now on reset in their next command's exec
    /// ([`ExecutionSandbox::resets_in_exec`]), as Docker ones do.
    pub fn reset_in_exec(&self) {
        self.resets_in_exec
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes the next `create` fail with `error`.
    pub fn fail_next_create(&self, error: SandboxError) {
        self.create_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(error);
    }
}

impl SandboxProvider for ScriptedProvider {
    type Sandbox = ScriptedSandbox;

    async fn create(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
    ) -> SandboxResult<ScriptedSandbox> {
        policy.validate()?;
        if let Some(err) = self
            .create_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
        {
            return Err(err);
        }
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        // Deterministic ids: the simulator replays them.
        let sandbox = ScriptedSandbox::new(format!(
            "scripted-{}-{}-{}",
            spec.node_id,
            spec.task_id,
            made.len()
        ));
        {
            let mut inner = sandbox.lock();
            inner.env = spec.base_env();
            inner.resets_in_exec = self
                .resets_in_exec
                .load(std::sync::atomic::Ordering::Relaxed);
            inner.calls.push(Call {
                op: Op::Create,
                detail: spec.image.clone(),
            });
        }
        made.push((spec.node_id.clone(), sandbox.clone()));
        Ok(sandbox)
    }

    async fn reap(&self, node_id: &str) -> SandboxResult<usize> {
        let made = self.made.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut removed = 0;
        for (owner, sandbox) in made {
            if owner == node_id && sandbox.lock().state != Some(SandboxState::Removed) {
                sandbox.remove().await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    async fn reap_all(&self, node_id: &str) -> SandboxResult<usize> {
        // The double's `reap` removes every one of the node's already.
        self.reap(node_id).await
    }

    async fn reap_stale(&self) -> SandboxResult<usize> {
        let made = self.made.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut removed = 0;
        for (_, sandbox) in made {
            let stale = {
                let inner = sandbox.lock();
                inner.orphaned && inner.state != Some(SandboxState::Removed)
            };
            if stale {
                sandbox.remove().await?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn running() -> ScriptedSandbox {
        let provider = ScriptedProvider::new();
        let sb = provider
            .create(
                &SandboxSpec::new("n1", "t1", "img"),
                &SandboxPolicy::default(),
            )
            .await
            .unwrap();
        sb.start().await.unwrap();
        sb
    }

    #[tokio::test]
    async fn scripted_answers_come_in_order_and_are_checked() {
        let sb = running().await;
        sb.push_exec(ScriptedExec::output(0, "hi\n").expecting(["echo"]))
            .push_exec(ScriptedExec::error(ErrorCategory::Timeout, "slow"));
        let out = sb.exec(ExecRequest::new(["echo", "hi"])).await.unwrap();
        assert_eq!(out.stdout, b"hi\n");
        let err = sb.exec(ExecRequest::new(["sleep", "9"])).await.unwrap_err();
        assert_eq!(err.category, ErrorCategory::Timeout);
        // Unscripted: success, empty.
        assert!(sb.exec(ExecRequest::new(["true"])).await.unwrap().success());
        sb.push_exec(ScriptedExec::output(0, "").expecting(["make"]));
        let err = sb.exec(ExecRequest::new(["cargo"])).await.unwrap_err();
        assert_eq!(err.category, ErrorCategory::Exec);
        let ops: Vec<_> = sb.calls().iter().map(|c| c.op).collect();
        assert_eq!(ops[0], Op::Create);
        assert_eq!(ops[1], Op::Start);
    }

    #[tokio::test]
    async fn output_cap_and_streaming_behave_like_the_real_thing() {
        let sb = running().await;
        sb.push_exec(ScriptedExec::output(0, "abcdef"));
        let (tx, mut rx) = mpsc::channel(4);
        let out = sb
            .exec_streaming(ExecRequest::new(["x"]).output_limit(3), tx)
            .await
            .unwrap();
        assert_eq!(out.stdout, b"abc");
        assert!(out.stdout_truncated);
        assert_eq!(rx.recv().await.unwrap().data, b"abc");
    }

    #[tokio::test]
    async fn files_env_state_and_injected_failures() {
        let sb = running().await;
        sb.write_file("/workspace/a.txt", b"A", 0o644)
            .await
            .unwrap();
        assert_eq!(sb.read_file("/workspace/a.txt").await.unwrap(), b"A");
        assert_eq!(
            sb.read_file("/nope").await.unwrap_err().category,
            ErrorCategory::Io
        );
        let mut tree = FileTree::new();
        tree.insert(
            "d/e".into(),
            FileEntry {
                data: b"E".to_vec(),
                mode: 0o600,
            },
        );
        sb.write_tree("/workspace/t", &tree).await.unwrap();
        assert_eq!(sb.read_tree("/workspace/t").await.unwrap(), tree);

        sb.set_env("K", "V");
        assert_eq!(sb.env()["K"], "V");

        sb.fail_next(
            Op::Usage,
            SandboxError::new(ErrorCategory::DaemonUnavailable, "down"),
        );
        assert!(sb.usage().await.unwrap_err().retryable);
        assert_eq!(sb.usage().await.unwrap(), ResourceUsage::default());

        sb.set_state(SandboxState::Exited {
            exit_code: 137,
            oom_killed: true,
        });
        assert_eq!(
            sb.exec(ExecRequest::new(["true"]))
                .await
                .unwrap_err()
                .category,
            ErrorCategory::ResourceLimit
        );
        sb.remove().await.unwrap();
        assert_eq!(
            sb.exec(ExecRequest::new(["true"]))
                .await
                .unwrap_err()
                .category,
            ErrorCategory::NotFound
        );
        assert_eq!(sb.state().await.unwrap(), SandboxState::Removed);
    }

    #[tokio::test]
    async fn reap_removes_only_the_nodes_sandboxes() {
        let provider = ScriptedProvider::new();
        let policy = SandboxPolicy::default();
        let a = provider
            .create(&SandboxSpec::new("a", "1", "img"), &policy)
            .await
            .unwrap();
        let b = provider
            .create(&SandboxSpec::new("b", "2", "img"), &policy)
            .await
            .unwrap();
        assert_eq!(provider.reap("a").await.unwrap(), 1);
        assert_eq!(provider.reap("a").await.unwrap(), 0);
        assert_eq!(a.state().await.unwrap(), SandboxState::Removed);
        assert_eq!(b.state().await.unwrap(), SandboxState::Created);
        provider.fail_next_create(SandboxError::new(ErrorCategory::Image, "no image"));
        let err = provider
            .create(&SandboxSpec::new("a", "3", "img"), &policy)
            .await
            .unwrap_err();
        assert_eq!(err.category, ErrorCategory::Image);
    }

    #[tokio::test]
    async fn reap_stale_removes_the_orphaned_sandboxes_of_any_node() {
        let provider = ScriptedProvider::new();
        let policy = SandboxPolicy::default();
        let left = provider
            .create(&SandboxSpec::new("a", "1", "img"), &policy)
            .await
            .unwrap();
        let live = provider
            .create(&SandboxSpec::new("b", "2", "img"), &policy)
            .await
            .unwrap();
        assert_eq!(provider.reap_stale().await.unwrap(), 0);
        left.orphan();
        assert_eq!(provider.reap_stale().await.unwrap(), 1);
        assert_eq!(provider.reap_stale().await.unwrap(), 0);
        assert_eq!(left.state().await.unwrap(), SandboxState::Removed);
        assert_eq!(live.state().await.unwrap(), SandboxState::Created);
    }
}
