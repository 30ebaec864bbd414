//! Isolated execution of untrusted task commands: the [`ExecutionSandbox`] trait, its request and
//! result types, and three implementations — Docker ([`docker::DockerSandbox`], the real one), a
//! scripted test double ([`double::ScriptedSandbox`]) and a non-isolating process sandbox
//! ([`process::ProcessSandbox`]) for machines without Docker.
//!
//! The security rules live in [`policy`] (pure data with secure defaults), apart from the Docker
//! mapping in [`docker`]. See `io/SANDBOX.md` for the user-facing overview.
//!
//! Lifecycle: a [`SandboxProvider`] creates a sandbox from a [`SandboxSpec`] (what to run: image,
//! task, workspace) and a [`policy::SandboxPolicy`] (how tightly); the caller then
//! [`start`](ExecutionSandbox::start)s it, runs commands and moves files, and finally
//! [`stop`](ExecutionSandbox::stop)s and [`remove`](ExecutionSandbox::remove)s it. A node that
//! crashed before removing its sandboxes calls [`SandboxProvider::reap`] with its node id on
//! restart.

pub mod docker;
pub mod double;
pub mod error;
pub mod image;
pub mod live;
pub mod network;
pub mod owner;
pub mod policy;
pub mod pool;
pub mod process;
pub mod repo;
pub mod tasks;
pub mod tree_stream;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

pub use error::{ErrorCategory, SandboxError, SandboxResult};
pub use policy::SandboxPolicy;
pub use pool::{PoolConfig, PoolStatus, PooledSandbox, SandboxPool};

/// The path inside the sandbox where the workspace (repository) is mounted by default.
pub const DEFAULT_WORKSPACE_PATH: &str = "/workspace";

/// The default [`SandboxSpec::lifetime`].
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(2 * 60 * 60);

/// What to run: everything about a sandbox that is specific to one task.
///
/// How it is confined is the separate [`SandboxPolicy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The id of the node that owns the sandbox; recorded as the `io.chorus.node` label and
    /// used by [`SandboxProvider::reap`].
    pub node_id: String,
    /// The task the sandbox runs; recorded as the `io.chorus.task` label.
    pub task_id: String,
    /// The image to run (never pulled: it must exist locally, see [`image`]).
    pub image: String,
    /// The main process. It only keeps the sandbox alive; commands run through `exec`.
    /// Default (empty): sleep until the deadline. A given command is killed at the deadline.
    pub command: Vec<String>,
    /// How long the sandbox may live at most: the main process ends at this deadline (enforced
    /// inside the container), and `reap` removes it after that whoever owns it. Default 2 h.
    pub lifetime: Duration,
    /// Environment for every command (merged under each request's own env).
    pub env: BTreeMap<String, String>,
    /// Where the workspace appears inside the sandbox.
    pub workspace_path: String,
    /// The host directory (repository) to show at `workspace_path`; `None` gives an empty,
    /// writable workspace.
    pub workspace: Option<RepoMount>,
    /// Git identity exported to commands (`GIT_AUTHOR_NAME` and friends).
    pub git_identity: Option<GitIdentity>,
    /// Extra labels, added under the `io.chorus.` prefix.
    pub labels: BTreeMap<String, String>,
}

impl SandboxSpec {
    /// A spec for `task_id` owned by `node_id`, running `image` with default settings.
    pub fn new(
        node_id: impl Into<String>,
        task_id: impl Into<String>,
        image: impl Into<String>,
    ) -> Self {
        SandboxSpec {
            node_id: node_id.into(),
            task_id: task_id.into(),
            image: image.into(),
            command: Vec::new(),
            lifetime: DEFAULT_LIFETIME,
            env: BTreeMap::new(),
            workspace_path: DEFAULT_WORKSPACE_PATH.into(),
            workspace: None,
            git_identity: None,
            labels: BTreeMap::new(),
        }
    }

    /// The same spec with `workspace` mounted.
    pub fn with_workspace(mut self, workspace: RepoMount) -> Self {
        self.workspace = Some(workspace);
        self
    }

    /// The same spec with one more environment variable.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// The environment every command starts from: the spec's env plus the git identity.
    pub fn base_env(&self) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        if let Some(id) = &self.git_identity {
            for (k, v) in id.env(&self.workspace_path) {
                env.entry(k).or_insert(v);
            }
        }
        env
    }
}

/// A host directory shown inside the sandbox at the workspace path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoMount {
    /// The directory on the host (the Docker daemon must run on the same host).
    pub host_path: PathBuf,
    /// Read-only (the default) or read-write.
    pub read_only: bool,
    /// Glob patterns (relative to `host_path`, `globset` syntax) of files to show; empty = all.
    pub include: Vec<String>,
    /// Glob patterns of files to hide; they are not visible inside at all.
    pub exclude: Vec<String>,
    /// `uid:gid` to give the files when they are staged (filtered mounts), or applied to the
    /// top directory of a direct mount. `None`: for a read-write filtered mount, the sandbox
    /// user; otherwise left as is.
    pub owner: Option<(u32, u32)>,
    /// Permission bits for the workspace's top directory, e.g. `0o755`.
    pub mode: Option<u32>,
}

impl RepoMount {
    /// A read-only mount of `host_path` with no filters.
    pub fn read_only(host_path: impl Into<PathBuf>) -> Self {
        RepoMount {
            host_path: host_path.into(),
            read_only: true,
            include: Vec::new(),
            exclude: Vec::new(),
            owner: None,
            mode: None,
        }
    }

    /// A read-write mount of `host_path` with no filters.
    pub fn read_write(host_path: impl Into<PathBuf>) -> Self {
        RepoMount {
            read_only: false,
            ..RepoMount::read_only(host_path)
        }
    }

    /// The same mount hiding files that match `pattern`.
    pub fn exclude(mut self, pattern: impl Into<String>) -> Self {
        self.exclude.push(pattern.into());
        self
    }

    /// The same mount showing only files that match `pattern` (and any other includes).
    pub fn include(mut self, pattern: impl Into<String>) -> Self {
        self.include.push(pattern.into());
        self
    }

    /// Whether files are filtered (and therefore staged as a copy rather than bind-mounted).
    pub fn is_filtered(&self) -> bool {
        !self.include.is_empty() || !self.exclude.is_empty()
    }
}

/// The git author/committer identity commands see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitIdentity {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
}

impl GitIdentity {
    /// The environment variables that make git use this identity without a config file, and
    /// trust the workspace even though it is owned by another uid.
    pub fn env(&self, workspace_path: &str) -> Vec<(String, String)> {
        vec![
            ("GIT_AUTHOR_NAME".into(), self.name.clone()),
            ("GIT_AUTHOR_EMAIL".into(), self.email.clone()),
            ("GIT_COMMITTER_NAME".into(), self.name.clone()),
            ("GIT_COMMITTER_EMAIL".into(), self.email.clone()),
            // git refuses repositories owned by other users unless marked safe; the env-only
            // config avoids needing a writable ~/.gitconfig in a read-only root.
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "safe.directory".into()),
            ("GIT_CONFIG_VALUE_0".into(), workspace_path.into()),
        ]
    }
}

/// One command to run in a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    /// Program and arguments (no shell is involved unless you run one).
    pub argv: Vec<String>,
    /// Extra environment, over the sandbox's.
    pub env: BTreeMap<String, String>,
    /// Working directory; default: the workspace path.
    pub working_dir: Option<String>,
    /// Bytes fed to standard input, which is then closed. `None`: empty stdin.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit; default: the policy's `default_timeout`.
    pub timeout: Option<Duration>,
    /// Per-stream output cap in bytes; default: the policy's `output_limit_bytes`.
    pub output_limit_bytes: Option<usize>,
    /// The sandbox is removed right after this command, with whatever it left running, so
    /// the post-exec clean-up inside (an exec of its own) is skipped where the host's cgroup
    /// files say what it would have read (OOM kills, usage). Never for a sandbox that is kept,
    /// or whose workspace is synced back at removal (a process left running could still write).
    pub last_in_sandbox: bool,
    /// Reset the sandbox first ([`ExecutionSandbox::reset`]), in the same exec where the
    /// sandbox can ([`ExecutionSandbox::resets_in_exec`]; the command and its environment then
    /// reach the sandbox only after the reset vouched for it), else by a reset of its own just
    /// before. When the reset cannot vouch, nothing of the request runs and the error is
    /// [`ErrorCategory::NotClean`].
    pub after_reset: bool,
    /// What the command leaves running stays running (a live sandbox's server started in the
    /// background): no post-exec clean-up, which also saves that exec. Only for a sandbox
    /// that is its owner's for many commands (`live.rs`); a task's sandbox is cleaned.
    pub keep_processes: bool,
}

impl ExecRequest {
    /// A request to run `argv`.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            ..ExecRequest::default()
        }
    }

    /// How long it may run: its own timeout, else `policy`'s default.
    pub fn timeout_under(&self, policy: &SandboxPolicy) -> Duration {
        self.timeout.unwrap_or(policy.default_timeout)
    }

    /// How many bytes of each output stream it keeps: its own cap, else `policy`'s.
    pub fn output_cap_under(&self, policy: &SandboxPolicy) -> usize {
        self.output_limit_bytes.unwrap_or(policy.output_limit_bytes)
    }

    /// The same request, run only after the sandbox was reset (see [`ExecRequest::after_reset`]).
    pub fn after_reset(mut self) -> Self {
        self.after_reset = true;
        self
    }

    /// A request to run `script` with `sh -c`.
    pub fn shell(script: impl Into<String>) -> Self {
        ExecRequest::new(["sh".to_string(), "-c".to_string(), script.into()])
    }

    /// The same request with one more environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// The same request with a working directory.
    pub fn working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// The same request with standard input.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// The same request with a timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The same request, marked as the sandbox's last (see [`ExecRequest::last_in_sandbox`]).
    pub fn last_in_sandbox(mut self) -> Self {
        self.last_in_sandbox = true;
        self
    }

    /// The same request with a per-stream output cap.
    pub fn output_limit(mut self, bytes: usize) -> Self {
        self.output_limit_bytes = Some(bytes);
        self
    }
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    /// Both, stdout first.
    pub const BOTH: [OutputStream; 2] = [OutputStream::Stdout, OutputStream::Stderr];

    /// `stdout` or `stderr`: its name in file names, queries and messages.
    pub const fn name(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }

    /// The stream named `name` (as [`OutputStream::name`] says it).
    pub fn from_name(name: &str) -> Option<OutputStream> {
        OutputStream::BOTH.into_iter().find(|s| s.name() == name)
    }

    /// Its place in a per-stream pair: 0 for stdout, 1 for stderr.
    pub const fn index(self) -> usize {
        match self {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        }
    }
}

/// A piece of output, as delivered by [`ExecutionSandbox::exec_streaming`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Where it came from.
    pub stream: OutputStream,
    /// The bytes (not necessarily whole lines or valid UTF-8).
    pub data: Vec<u8>,
}

/// The result of a command that ran to completion (whatever its exit code).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// The exit code; 128+N when killed by signal N.
    pub exit_code: i64,
    /// Standard output, up to the cap.
    pub stdout: Vec<u8>,
    /// Standard error, up to the cap.
    pub stderr: Vec<u8>,
    /// Whether stdout was longer than the cap (the rest was read and dropped).
    pub stdout_truncated: bool,
    /// Whether stderr was longer than the cap.
    pub stderr_truncated: bool,
    /// Wall-clock time from start to exit.
    pub duration: Duration,
    /// Processes the command left running (background jobs, `setsid` escapees) that were
    /// killed after it returned. 0 when it cleaned up after itself.
    pub stray_processes_killed: u32,
    /// Of `duration`, the part after the output ended: killing what the command left,
    /// reading its exit code and OOM state (zero where the sandbox has no such step).
    pub after_output: Duration,
}

impl ExecOutput {
    /// Whether the command exited with 0.
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }

    /// Stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (lossy).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Collects one output stream up to a cap, counting (and dropping) the rest so the producer is
/// never blocked by a full pipe.
#[derive(Debug, Clone, Default)]
pub(crate) struct CappedBuffer {
    pub(crate) data: Vec<u8>,
    pub(crate) truncated: bool,
    cap: usize,
}

impl CappedBuffer {
    pub(crate) fn new(cap: usize) -> Self {
        CappedBuffer {
            data: Vec::new(),
            truncated: false,
            cap,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.data.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        self.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// A file in a [`FileTree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// The contents.
    pub data: Vec<u8>,
    /// Permission bits, e.g. `0o644`.
    pub mode: u32,
}

/// A directory tree in memory: relative path (with `/` separators) → file. Directories are
/// implied by the paths.
pub type FileTree = BTreeMap<String, FileEntry>;

/// Live resource usage of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ResourceUsage {
    /// CPU use since the previous sample, in percent of one CPU (the docker CLI's formula:
    /// 200 means two CPUs fully busy).
    pub cpu_percent: f64,
    /// Memory in use, without the inactive file cache (as `docker stats` shows it).
    pub memory_bytes: u64,
    /// The memory limit in force.
    pub memory_limit_bytes: u64,
    /// Bytes received over all network interfaces but loopback.
    pub network_rx_bytes: u64,
    /// Bytes sent over all network interfaces but loopback.
    pub network_tx_bytes: u64,
    /// Processes (tasks) currently alive in the sandbox.
    pub pids: u64,
}

/// What a sandbox used since it started: the accounting of one task run (each run has its own
/// sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageTotals {
    /// CPU time of everything that ran in it, in nanoseconds.
    pub cpu_ns: u64,
    /// The highest memory use the kernel recorded (cgroup v1's `max_usage`, page cache
    /// included), or the use now where the kernel keeps no peak (cgroup v2): callers sample.
    pub memory_peak_bytes: u64,
}

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// Created, not started yet.
    Created,
    /// The main process runs; commands can be run.
    Running,
    /// The main process ended (stopped, crashed or killed).
    Exited {
        /// Its exit code (137 = killed).
        exit_code: i64,
        /// Whether the kernel OOM killer was involved.
        oom_killed: bool,
    },
    /// The sandbox no longer exists.
    Removed,
}

impl SandboxState {
    /// Whether commands can be run.
    pub fn is_running(self) -> bool {
        self == SandboxState::Running
    }
}

/// An isolated place to run untrusted commands.
///
/// Every method takes `&self` so a sandbox can be shared (e.g. in an `Arc`) between the task
/// runner and a usage monitor; futures are `Send` so a runtime loop can spawn them. Use it as a
/// generic bound (`S: ExecutionSandbox`); it is not object safe.
pub trait ExecutionSandbox: Send + Sync {
    /// A stable identifier (the container name for Docker).
    fn id(&self) -> &str;

    /// Starts the main process. Idempotent on a running sandbox.
    fn start(&self) -> impl Future<Output = SandboxResult<()>> + Send;

    /// Runs a command to completion and returns its output.
    ///
    /// A non-zero exit code is a normal result. Errors: [`ErrorCategory::Timeout`] when the
    /// timeout passed (the command's process group has been killed by then),
    /// [`ErrorCategory::ResourceLimit`] when the OOM killer ended it, [`ErrorCategory::Exited`]
    /// when the sandbox is not running.
    fn exec(&self, request: ExecRequest) -> impl Future<Output = SandboxResult<ExecOutput>> + Send;

    /// Like [`exec`](Self::exec), but also sends each piece of output to `sink` as it arrives.
    ///
    /// The sink is bounded: a slow receiver slows the command's output down rather than growing
    /// memory. A dropped receiver is ignored (output is still collected).
    fn exec_streaming(
        &self,
        request: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> impl Future<Output = SandboxResult<ExecOutput>> + Send;

    /// Writes one file (creating parent directories) with permission bits `mode`.
    fn write_file(
        &self,
        path: &str,
        data: &[u8],
        mode: u32,
    ) -> impl Future<Output = SandboxResult<()>> + Send;

    /// Reads one file. Errors with [`ErrorCategory::Io`] when it is missing or unreadable.
    fn read_file(&self, path: &str) -> impl Future<Output = SandboxResult<Vec<u8>>> + Send;

    /// Reads one file as it comes: its bytes to `sink` in chunks, at most `limit` of them and
    /// one past it for a larger file (the caller then knows it was cut). A receiver that goes
    /// away ends the read. Default: [`ExecutionSandbox::read_file`] whole, then sent.
    fn read_file_streaming(
        &self,
        path: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> impl Future<Output = SandboxResult<()>> + Send {
        async move {
            let mut data = self.read_file(path).await?;
            data.truncate(usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX));
            let _ = sink.send(data).await;
            Ok(())
        }
    }

    /// Writes one file (making its folders) from the chunks `source` yields as they come: an
    /// empty chunk ends it; a source that closes before one broke off, and the write fails
    /// (the path then holds no file). More than `limit` bytes are refused the same way.
    /// Default: gathered, then [`ExecutionSandbox::write_file`].
    fn write_file_streaming(
        &self,
        path: &str,
        mode: u32,
        limit: u64,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> impl Future<Output = SandboxResult<u64>> + Send {
        async move {
            let data = gather_upload(path, limit, source).await?;
            self.write_file(path, &data, mode).await?;
            Ok(data.len() as u64)
        }
    }

    /// Writes a directory tree under `dir` (created if needed), keeping other files there.
    fn write_tree(
        &self,
        dir: &str,
        tree: &FileTree,
    ) -> impl Future<Output = SandboxResult<()>> + Send;

    /// Reads every regular file under `dir`.
    fn read_tree(&self, dir: &str) -> impl Future<Output = SandboxResult<FileTree>> + Send;

    /// Unpacks the tar archive `source` yields (chunks, an empty one at its end; a source
    /// that closes before it broke off, and the call fails) under `dir`, making it, as it
    /// comes. The archive was filtered already (`tree_stream::filter`): folders, regular files
    /// and hard links to those. Default: gathered (at most `limit` bytes), then
    /// [`ExecutionSandbox::write_tree`].
    fn write_tree_streaming(
        &self,
        dir: &str,
        limit: u64,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> impl Future<Output = SandboxResult<()>> + Send {
        async move {
            let archive = gather_upload(dir, limit, source).await?;
            let tree = docker::tar_to_tree(&archive)
                .map_err(|e| SandboxError::io(format!("unpacking a tree into {dir}"), e))?;
            self.write_tree(dir, &tree).await
        }
    }

    /// The folder `dir` as a tar archive (paths relative to it) into `sink` as it is read, at
    /// most `limit` bytes of archive and one past them for a larger one (the caller then knows
    /// it was cut); the channel closes at its end. Default: [`ExecutionSandbox::read_tree`],
    /// then packed and sent.
    fn read_tree_streaming(
        &self,
        dir: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> impl Future<Output = SandboxResult<()>> + Send {
        async move {
            let tree = self.read_tree(dir).await?;
            let mut archive = docker::tree_to_tar(&tree)
                .map_err(|e| SandboxError::io(format!("packing {dir}"), e))?;
            archive.truncate(usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX));
            for part in archive.chunks(64 << 10) {
                if sink.send(part.to_vec()).await.is_err() {
                    break;
                }
            }
            Ok(())
        }
    }

    /// Sets an environment variable for all later commands.
    fn set_env(&self, key: &str, value: &str);

    /// The environment later commands start from.
    fn env(&self) -> BTreeMap<String, String>;

    /// Current resource usage.
    fn usage(&self) -> impl Future<Output = SandboxResult<ResourceUsage>> + Send;

    /// What it used since it started, from one quick sample (no rate to compute, unlike
    /// [`usage`](Self::usage)). Zero where the sandbox keeps no accounting.
    fn totals(&self) -> impl Future<Output = SandboxResult<UsageTotals>> + Send {
        std::future::ready(Ok(UsageTotals::default()))
    }

    /// Current state (the health check: is the main process still alive?).
    fn state(&self) -> impl Future<Output = SandboxResult<SandboxState>> + Send;

    /// Makes the sandbox end by itself (its main process, and with it every command) `after`
    /// from now, enforced inside it, so it cannot outlive that even when no process is left on
    /// the host to stop or reap it. It never lengthens the sandbox's life. Errors with
    /// [`ErrorCategory::Unsupported`] where the sandbox cannot (no init or no supervisor main
    /// process, or no main process at all); the sandbox is then as before.
    fn end_after(&self, after: Duration) -> impl Future<Output = SandboxResult<()>> + Send;

    /// Makes the sandbox ready for another run of the same submitter and shape: kills every
    /// process its commands left, empties every place they could write, and checks that
    /// nothing is left (see `docker/reset.rs`). An error means it could not vouch for that:
    /// remove the sandbox instead. Default: unsupported (never reused).
    fn reset(&self) -> impl Future<Output = SandboxResult<()>> + Send {
        std::future::ready(Err(SandboxError::new(
            ErrorCategory::Unsupported,
            "this sandbox cannot be reset for another run",
        )))
    }

    /// Whether a reset can go with the next command ([`ExecRequest::after_reset`]) at no
    /// exec of its own: a pool then keeps a sandbox given back without resetting it first.
    fn resets_in_exec(&self) -> bool {
        false
    }

    /// Kills every process the commands left running, now. A pool that keeps a sandbox for
    /// its next command's reset ([`resets_in_exec`](Self::resets_in_exec)) calls it when the
    /// sandbox is given back, so what a finished run left runs on nobody's account for no
    /// longer than this takes (issue 51, finding 8). An error means it could not: remove the
    /// sandbox instead. Default: a whole [`reset`](Self::reset).
    fn end_leftovers(&self) -> impl Future<Output = SandboxResult<()>> + Send {
        self.reset()
    }

    /// Carries a read-write workspace's changes back to its repository now (see
    /// [`repo::sync_back`] for what is and is not carried), as a removal does first; later
    /// syncs start from what this one left on the host. Default, and for a sandbox without
    /// a read-write repository: [`ErrorCategory::Unsupported`].
    fn sync_workspace(&self) -> impl Future<Output = SandboxResult<repo::SyncReport>> + Send {
        std::future::ready(Err(SandboxError::new(
            ErrorCategory::Unsupported,
            "this sandbox has no read-write repository to sync back",
        )))
    }

    /// Stops the main process (and with it every command). Idempotent.
    fn stop(&self) -> impl Future<Output = SandboxResult<()>> + Send;

    /// Removes the sandbox and everything it staged. Idempotent.
    fn remove(&self) -> impl Future<Output = SandboxResult<()>> + Send;

    /// Removes the sandbox as [`ExecutionSandbox::remove`] does and says, in one line for the
    /// run's result, what the sync back of its read-write workspace did not carry (`None`:
    /// everything, or it has no such workspace).
    fn remove_reporting(&self) -> impl Future<Output = SandboxResult<Option<String>>> + Send {
        async { self.remove().await.map(|()| None) }
    }
}

/// How long a streamed file transfer may take, whatever the policy's command timeout (a large
/// file over a slow link); a node relaying one waits as long.
pub const STREAM_WAIT: Duration = Duration::from_secs(10 * 60);

/// A streamed upload gathered whole: at most `limit` bytes, ended by an empty chunk (a source
/// that closes before it broke off). For sandboxes that write a file in one piece.
pub(crate) async fn gather_upload(
    path: &str,
    limit: u64,
    mut source: mpsc::Receiver<Vec<u8>>,
) -> SandboxResult<Vec<u8>> {
    let what = format!("writing {path}");
    let mut data = Vec::new();
    loop {
        match source.recv().await {
            Some(chunk) if chunk.is_empty() => return Ok(data),
            Some(chunk) => {
                data.extend_from_slice(&chunk);
                if data.len() as u64 > limit {
                    return Err(upload_over(&what, limit));
                }
            }
            None => return Err(upload_broken_off(&what)),
        }
    }
}

/// The error of a streamed upload (`what`: "writing PATH") that brought more than `limit`.
pub(crate) fn upload_over(what: &str, limit: u64) -> SandboxError {
    SandboxError::new(
        ErrorCategory::Io,
        format!("{what}: more than {limit} bytes"),
    )
}

/// The error of a streamed upload whose source closed before its end.
pub(crate) fn upload_broken_off(what: &str) -> SandboxError {
    SandboxError::new(
        ErrorCategory::Io,
        format!("{what}: the upload broke off before its end"),
    )
}

/// Makes sandboxes: the part of a sandbox implementation a runtime loop holds on to.
pub trait SandboxProvider: Send + Sync {
    /// The sandboxes it makes (owned: an ended one is removed by a task of its own).
    type Sandbox: ExecutionSandbox + 'static;

    /// Creates (but does not start) a sandbox for `spec`, confined by `policy`.
    fn create(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
    ) -> impl Future<Output = SandboxResult<Self::Sandbox>> + Send;

    /// Removes the sandboxes of node `node_id` that nobody can use any more — their owning
    /// process is gone (e.g. it crashed) or their deadline passed — and leaves the others alone;
    /// returns how many it removed.
    fn reap(&self, node_id: &str) -> impl Future<Output = SandboxResult<usize>> + Send;

    /// Like [`reap`](Self::reap), over every node's sandboxes on this host: what a node's
    /// periodic reap and `chorus sandbox reap` do. Errors with [`ErrorCategory::Unsupported`]
    /// where the sandboxes carry no owner to judge by.
    fn reap_stale(&self) -> impl Future<Output = SandboxResult<usize>> + Send;

    /// Removes every sandbox of node `node_id` on this host, its own process's included: the
    /// last step of a node's graceful stop, after its runs and pools are gone, for what they
    /// could not account for (a node id has one process per host: its data dir's lock).
    fn reap_all(&self, node_id: &str) -> impl Future<Output = SandboxResult<usize>> + Send;
}

/// Makes a name unique within this process and across processes started at different times:
/// `<prefix>-<unix-ms>-<pid>-<counter>`.
pub(crate) fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms:x}-{:x}-{n:x}", std::process::id())
}

/// Keeps only characters Docker allows in names (`[a-zA-Z0-9_.-]`).
pub(crate) fn sanitize_name(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_buffer_truncates_and_flags() {
        let mut b = CappedBuffer::new(4);
        b.push(b"ab");
        assert!(!b.truncated);
        b.push(b"cdef");
        assert_eq!(b.data, b"abcd");
        assert!(b.truncated);
        b.push(b"g");
        assert_eq!(b.data, b"abcd");
    }

    #[test]
    fn git_identity_is_in_the_base_env() {
        let mut spec = SandboxSpec::new("n1", "t1", "img");
        spec.git_identity = Some(GitIdentity {
            name: "Ada".into(),
            email: "ada@example.invalid".into(),
        });
        let env = spec.base_env();
        assert_eq!(env["GIT_AUTHOR_NAME"], "Ada");
        assert_eq!(env["GIT_COMMITTER_EMAIL"], "ada@example.invalid");
        assert_eq!(env["GIT_CONFIG_VALUE_0"], DEFAULT_WORKSPACE_PATH);
    }

    #[test]
    fn names_are_sanitized_and_unique() {
        assert_eq!(sanitize_name("node 1/task:2"), "node_1_task_2");
        assert_ne!(unique_suffix(), unique_suffix());
    }
}
