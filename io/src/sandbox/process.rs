//! A process "sandbox" for machines without Docker: commands run as plain child processes of
//! this one, in a private working directory, with rlimits, a clean environment and a timeout.
//!
//! **It does not isolate anything.** Commands see the host's filesystem, network, processes and
//! user; a hostile command can do whatever this process can. Use it only for trusted commands or
//! development machines, and only by choosing it explicitly
//! ([`ProcessProvider::new_without_isolation`]); nothing falls back to it on its own.
//!
//! What the policy still means here:
//! - `limits.nofile`, `limits.memory_bytes` (as an address-space limit, `ulimit -v`, which is
//!   cruder than a cgroup: it counts mappings, not use) and `limits.nproc` (per uid, host-wide)
//!   are applied with the shell's `ulimit` before the command is `exec`ed. The shell is used
//!   because setting rlimits in the child directly needs `pre_exec`, which is `unsafe`, and the
//!   workspace forbids unsafe code.
//! - Timeouts kill the command's whole process group (each command is a group leader).
//! - File operations are confined to the sandbox's directory (the workspace path maps there).
//! - CPU, pids, network, capabilities, users and read-only roots are **not** enforced.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::error::{ErrorCategory, SandboxError, SandboxResult};
use super::{
    sanitize_name, unique_suffix, CappedBuffer, ExecOutput, ExecRequest, ExecutionSandbox,
    FileEntry, FileTree, OutputChunk, OutputStream, ResourceUsage, SandboxPolicy, SandboxProvider,
    SandboxSpec, SandboxState,
};

/// Makes [`ProcessSandbox`]es, each a directory under a root directory.
#[derive(Debug, Clone)]
pub struct ProcessProvider {
    root: PathBuf,
}

impl ProcessProvider {
    /// A provider keeping sandbox directories under `root`. The name says it: what it makes
    /// does not isolate commands from the host.
    pub fn new_without_isolation(root: impl Into<PathBuf>) -> Self {
        ProcessProvider { root: root.into() }
    }
}

impl SandboxProvider for ProcessProvider {
    type Sandbox = ProcessSandbox;

    async fn create(
        &self,
        spec: &SandboxSpec,
        policy: &SandboxPolicy,
    ) -> SandboxResult<ProcessSandbox> {
        policy.validate()?;
        let id = format!(
            "{}--{}--{}",
            sanitize_name(&spec.node_id),
            sanitize_name(&spec.task_id),
            unique_suffix()
        );
        let dir = self.root.join(&id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| SandboxError::io(format!("creating {}", dir.display()), e))?;
        if let Some(repo) = &spec.workspace {
            copy_dir(&repo.host_path, &dir).map_err(|e| {
                SandboxError::io(format!("copying {}", repo.host_path.display()), e)
            })?;
        }
        let mut env = spec.base_env();
        env.entry("HOME".into())
            .or_insert_with(|| dir.display().to_string());
        Ok(ProcessSandbox {
            id,
            dir,
            workspace_path: spec.workspace_path.clone(),
            policy: policy.clone(),
            env: Mutex::new(env),
            state: Mutex::new(SandboxState::Created),
            groups: Mutex::new(Vec::new()),
        })
    }

    async fn reap(&self, node_id: &str) -> SandboxResult<usize> {
        let prefix = format!("{}--", sanitize_name(node_id));
        let mut removed = 0;
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(SandboxError::io("listing sandboxes", e)),
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|e| SandboxError::io("removing a sandbox dir", e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    async fn reap_all(&self, node_id: &str) -> SandboxResult<usize> {
        // `reap` removes every one of the node's already: nothing tells whose is stale.
        self.reap(node_id).await
    }

    async fn reap_stale(&self) -> SandboxResult<usize> {
        // Its directories name a node but no owning process, so nothing tells a live owner's
        // sandbox from a dead one's.
        Err(SandboxError::new(
            ErrorCategory::Unsupported,
            "the process sandbox records no owner, so it cannot tell whose sandboxes are \
             stale; `reap(node)` removes one node's",
        ))
    }
}

/// A directory and child processes. See the module docs: **not isolating**.
#[derive(Debug)]
pub struct ProcessSandbox {
    id: String,
    dir: PathBuf,
    workspace_path: String,
    policy: SandboxPolicy,
    env: Mutex<BTreeMap<String, String>>,
    state: Mutex<SandboxState>,
    /// Process groups of commands still running, killed on stop.
    groups: Mutex<Vec<i32>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoning only follows a panic elsewhere; the guarded data are plain values.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ProcessSandbox {
    /// The host directory standing in for the workspace.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Maps a sandbox path to the host: the workspace path (and relative paths) to the
    /// sandbox's directory. Anything else, and `..`, is refused.
    fn host_path(&self, path: &str) -> SandboxResult<PathBuf> {
        let rel = if let Some(rest) = path.strip_prefix(&self.workspace_path) {
            if !(rest.is_empty() || rest.starts_with('/')) {
                return Err(self.outside(path));
            }
            rest.trim_start_matches('/')
        } else if path.starts_with('/') {
            return Err(self.outside(path));
        } else {
            path
        };
        let rel = Path::new(rel);
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(self.outside(path));
        }
        Ok(self.dir.join(rel))
    }

    fn outside(&self, path: &str) -> SandboxError {
        SandboxError::new(
            ErrorCategory::PolicyViolation,
            format!(
                "process sandbox file paths must be inside {}: {path:?}",
                self.workspace_path
            ),
        )
    }

    fn ulimit_script(&self) -> String {
        let l = &self.policy.limits;
        let mut script = String::new();
        if let Some(n) = l.nofile {
            script.push_str(&format!("ulimit -n {n} || exit 125; "));
        }
        if let Some(m) = l.memory_bytes {
            script.push_str(&format!("ulimit -v {} || exit 125; ", m / 1024));
        }
        if let Some(n) = l.nproc {
            // bash spells it -u, dash -p.
            script.push_str(&format!(
                "{{ ulimit -u {n} 2>/dev/null || ulimit -p {n}; }} || exit 125; "
            ));
        }
        script.push_str("exec \"$@\"");
        script
    }

    async fn run(
        &self,
        request: ExecRequest,
        sink: Option<&mpsc::Sender<OutputChunk>>,
    ) -> SandboxResult<ExecOutput> {
        if request.argv.is_empty() {
            return Err(SandboxError::new(ErrorCategory::Exec, "empty command"));
        }
        match *lock(&self.state) {
            SandboxState::Running => {}
            SandboxState::Removed => {
                return Err(SandboxError::new(
                    ErrorCategory::NotFound,
                    format!("sandbox {} was removed", self.id),
                ))
            }
            other => {
                return Err(SandboxError::new(
                    ErrorCategory::Exited,
                    format!("sandbox {} is not running ({other:?})", self.id),
                ))
            }
        }
        let cwd = match &request.working_dir {
            Some(dir) => self.host_path(dir)?,
            None => self.dir.clone(),
        };
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(self.ulimit_script())
            .arg("chorus-exec")
            .args(&request.argv)
            .current_dir(&cwd)
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .envs(lock(&self.env).iter())
            .envs(request.env.iter())
            .stdin(if request.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout can kill everything it started.
            .process_group(0)
            .kill_on_drop(true);
        // Resolved before the request's stdin is moved out.
        let cap = request.output_cap_under(&self.policy);
        let timeout = request.timeout_under(&self.policy);
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| SandboxError::new(ErrorCategory::Exec, format!("spawn: {e}")))?;
        let pgid = child.id().map(|p| p as i32);
        if let Some(p) = pgid {
            lock(&self.groups).push(p);
        }
        if let (Some(data), Some(mut stdin)) = (request.stdin, child.stdin.take()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
                let _ = stdin.shutdown().await;
            });
        }
        let (tx, mut rx) = mpsc::channel::<OutputChunk>(16);
        let readers = [
            child
                .stdout
                .take()
                .map(|r| spawn_reader(r, OutputStream::Stdout, tx.clone())),
            child
                .stderr
                .take()
                .map(|r| spawn_reader(r, OutputStream::Stderr, tx.clone())),
        ];
        drop(tx);
        let mut stdout = CappedBuffer::new(cap);
        let mut stderr = CappedBuffer::new(cap);
        let mut sink = sink;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timed_out = false;
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Err(_) => {
                    timed_out = true;
                    break;
                }
                Ok(None) => break,
                Ok(Some(chunk)) => {
                    match chunk.stream {
                        OutputStream::Stdout => stdout.push(&chunk.data),
                        OutputStream::Stderr => stderr.push(&chunk.data),
                    }
                    if let Some(s) = sink {
                        if s.send(chunk).await.is_err() {
                            sink = None;
                        }
                    }
                }
            }
        }
        let status = if timed_out {
            if let Some(p) = pgid {
                let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
            }
            let _ = child.wait().await;
            None
        } else {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(remaining, child.wait()).await {
                Ok(status) => Some(status.map_err(|e| SandboxError::io("waiting", e))?),
                Err(_) => {
                    if let Some(p) = pgid {
                        let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
                    }
                    let _ = child.wait().await;
                    None
                }
            }
        };
        // Whatever is left of the group (background children) goes too: a finished command
        // must not leave processes behind.
        if let Some(p) = pgid {
            let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
            lock(&self.groups).retain(|g| *g != p);
        }
        for reader in readers.into_iter().flatten() {
            reader.abort();
        }
        let Some(status) = status else {
            return Err(SandboxError::new(
                ErrorCategory::Timeout,
                format!(
                    "command {:?} ran past its {timeout:?} timeout; its process group was killed",
                    request.argv
                ),
            ));
        };
        use std::os::unix::process::ExitStatusExt;
        let exit_code = status
            .code()
            .map(i64::from)
            .or_else(|| status.signal().map(|s| 128 + i64::from(s)))
            .unwrap_or(-1);
        Ok(ExecOutput {
            exit_code,
            stdout: stdout.data,
            stderr: stderr.data,
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            duration: started.elapsed(),
            // Only the command's process group is killed (above); escapees are not counted.
            stray_processes_killed: 0,
            after_output: Duration::ZERO,
        })
    }
}

fn spawn_reader(
    mut reader: impl AsyncRead + Unpin + Send + 'static,
    stream: OutputStream,
    tx: mpsc::Sender<OutputChunk>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let chunk = OutputChunk {
                        stream,
                        data: buf[..n].to_vec(),
                    };
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
            }
        }
    })
}

fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if ty.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &to)?;
        } else if ty.is_file() {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

fn read_tree_into(
    root: &Path,
    rel: &Path,
    tree: &mut FileTree,
    budget: &mut usize,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let rel_path = rel.join(entry.file_name());
        if ty.is_dir() {
            read_tree_into(root, &rel_path, tree, budget)?;
        } else if ty.is_file() {
            let data = std::fs::read(entry.path())?;
            *budget = budget.checked_sub(data.len()).ok_or_else(|| {
                std::io::Error::other("tree is larger than the policy's file limit")
            })?;
            let mode = entry.metadata()?.permissions().mode() & 0o7777;
            tree.insert(rel_path.display().to_string(), FileEntry { data, mode });
        }
    }
    Ok(())
}

impl ExecutionSandbox for ProcessSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    async fn start(&self) -> SandboxResult<()> {
        let mut state = lock(&self.state);
        match *state {
            SandboxState::Removed => Err(SandboxError::new(
                ErrorCategory::NotFound,
                format!("sandbox {} was removed", self.id),
            )),
            _ => {
                *state = SandboxState::Running;
                Ok(())
            }
        }
    }

    async fn exec(&self, request: ExecRequest) -> SandboxResult<ExecOutput> {
        self.run(request, None).await
    }

    async fn exec_streaming(
        &self,
        request: ExecRequest,
        sink: mpsc::Sender<OutputChunk>,
    ) -> SandboxResult<ExecOutput> {
        self.run(request, Some(&sink)).await
    }

    async fn write_file(&self, path: &str, data: &[u8], mode: u32) -> SandboxResult<()> {
        use std::os::unix::fs::PermissionsExt;
        let host = self.host_path(path)?;
        if let Some(parent) = host.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| SandboxError::io(format!("creating dirs for {path}"), e))?;
        }
        tokio::fs::write(&host, data)
            .await
            .map_err(|e| SandboxError::io(format!("writing {path}"), e))?;
        tokio::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode))
            .await
            .map_err(|e| SandboxError::io(format!("chmod {path}"), e))
    }

    async fn read_file(&self, path: &str) -> SandboxResult<Vec<u8>> {
        let host = self.host_path(path)?;
        let data = tokio::fs::read(&host)
            .await
            .map_err(|e| SandboxError::io(format!("reading {path}"), e))?;
        if data.len() > self.policy.file_limit_bytes {
            return Err(SandboxError::new(
                ErrorCategory::Io,
                format!("{path} is larger than the policy's file limit"),
            ));
        }
        Ok(data)
    }

    async fn write_tree(&self, dir: &str, tree: &FileTree) -> SandboxResult<()> {
        for (rel, entry) in tree {
            let path = format!("{}/{}", dir.trim_end_matches('/'), rel);
            self.write_file(&path, &entry.data, entry.mode).await?;
        }
        Ok(())
    }

    async fn read_tree(&self, dir: &str) -> SandboxResult<FileTree> {
        let host = self.host_path(dir)?;
        let mut tree = FileTree::new();
        let mut budget = self.policy.file_limit_bytes;
        read_tree_into(&host, Path::new(""), &mut tree, &mut budget)
            .map_err(|e| SandboxError::io(format!("reading tree {dir}"), e))?;
        Ok(tree)
    }

    fn set_env(&self, key: &str, value: &str) {
        lock(&self.env).insert(key.to_string(), value.to_string());
    }

    fn env(&self) -> BTreeMap<String, String> {
        lock(&self.env).clone()
    }

    async fn usage(&self) -> SandboxResult<ResourceUsage> {
        // Without a cgroup there is no cheap per-sandbox accounting; report the live command
        // count and leave the rest at zero.
        Ok(ResourceUsage {
            pids: lock(&self.groups).len() as u64,
            ..ResourceUsage::default()
        })
    }

    async fn state(&self) -> SandboxResult<SandboxState> {
        Ok(*lock(&self.state))
    }

    async fn end_after(&self, _after: Duration) -> SandboxResult<()> {
        // Its commands are this process's children: nothing apart from this process could end
        // them, so there is no end to arm that outlives it.
        Err(SandboxError::new(
            ErrorCategory::Unsupported,
            "the process sandbox has no main process of its own to end; its commands end with \
             their timeouts, enforced by this process",
        ))
    }

    async fn stop(&self) -> SandboxResult<()> {
        for pgid in lock(&self.groups).drain(..) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let mut state = lock(&self.state);
        if *state == SandboxState::Running {
            *state = SandboxState::Exited {
                exit_code: 0,
                oom_killed: false,
            };
        }
        Ok(())
    }

    async fn remove(&self) -> SandboxResult<()> {
        self.stop().await?;
        match tokio::fs::remove_dir_all(&self.dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SandboxError::io("removing the sandbox dir", e)),
        }
        *lock(&self.state) = SandboxState::Removed;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn sandbox(root: &Path, policy: SandboxPolicy) -> ProcessSandbox {
        let provider = ProcessProvider::new_without_isolation(root);
        let sb = provider
            .create(&SandboxSpec::new("node-p", "task", "unused"), &policy)
            .await
            .unwrap();
        sb.start().await.unwrap();
        sb
    }

    #[tokio::test]
    async fn runs_commands_with_env_stdin_and_exit_codes() {
        let root = tempfile::tempdir().unwrap();
        let sb = sandbox(root.path(), SandboxPolicy::default()).await;
        sb.set_env("GREETING", "hello");
        let out = sb
            .exec(
                ExecRequest::shell("echo $GREETING $EXTRA; cat; echo err >&2; exit 3")
                    .env("EXTRA", "x")
                    .stdin("in"),
            )
            .await
            .unwrap();
        assert_eq!(out.stdout_text(), "hello x\nin");
        assert_eq!(out.stderr_text(), "err\n");
        assert_eq!(out.exit_code, 3);
        // A clean environment: nothing leaks from this process.
        let out = sb.exec(ExecRequest::shell("env")).await.unwrap();
        assert!(
            !out.stdout_text().contains("CARGO"),
            "{}",
            out.stdout_text()
        );
    }

    #[tokio::test]
    async fn rlimits_apply_and_output_is_capped() {
        let root = tempfile::tempdir().unwrap();
        let mut policy = SandboxPolicy::default();
        policy.limits.nofile = Some(77);
        let sb = sandbox(root.path(), policy).await;
        let out = sb.exec(ExecRequest::shell("ulimit -n")).await.unwrap();
        assert_eq!(out.stdout_text().trim(), "77");
        let out = sb
            .exec(ExecRequest::shell("head -c 5000 /dev/zero").output_limit(100))
            .await
            .unwrap();
        assert_eq!(out.stdout.len(), 100);
        assert!(out.stdout_truncated);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let root = tempfile::tempdir().unwrap();
        let sb = sandbox(root.path(), SandboxPolicy::default()).await;
        let marker = format!("chorus-proc-test-{}", unique_suffix());
        let started = Instant::now();
        let err = sb
            .exec(
                ExecRequest::new(["sh", "-c", "sleep 60 & sleep 61; : \"$0\"", &marker])
                    .timeout(Duration::from_millis(500)),
            )
            .await
            .unwrap_err();
        assert_eq!(err.category, ErrorCategory::Timeout);
        assert!(started.elapsed() < Duration::from_secs(3));
        let ps = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ps -eo args | grep -c '[{}]{}' || true",
                &marker[..1],
                &marker[1..]
            ))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), "0");
    }

    #[tokio::test]
    async fn files_stay_in_the_sandbox_dir() {
        let root = tempfile::tempdir().unwrap();
        let sb = sandbox(root.path(), SandboxPolicy::default()).await;
        sb.write_file("/workspace/a/b.txt", b"B", 0o600)
            .await
            .unwrap();
        assert_eq!(sb.read_file("a/b.txt").await.unwrap(), b"B");
        assert!(sb.dir().join("a/b.txt").is_file());
        let out = sb.exec(ExecRequest::new(["cat", "a/b.txt"])).await.unwrap();
        assert_eq!(out.stdout, b"B");
        let err = sb.write_file("/etc/x", b"", 0o600).await.unwrap_err();
        assert_eq!(err.category, ErrorCategory::PolicyViolation);
        let err = sb
            .read_file("/workspace/../../etc/passwd")
            .await
            .unwrap_err();
        assert_eq!(err.category, ErrorCategory::PolicyViolation);
        let tree = sb.read_tree("/workspace").await.unwrap();
        assert_eq!(tree["a/b.txt"].mode, 0o600);
        sb.write_tree("/workspace/t", &tree).await.unwrap();
        assert_eq!(sb.read_file("t/a/b.txt").await.unwrap(), b"B");
    }

    #[tokio::test]
    async fn lifecycle_and_reap() {
        let root = tempfile::tempdir().unwrap();
        let sb = sandbox(root.path(), SandboxPolicy::default()).await;
        let _left_behind = sandbox(root.path(), SandboxPolicy::default()).await;
        sb.stop().await.unwrap();
        let err = sb.exec(ExecRequest::new(["true"])).await.unwrap_err();
        assert_eq!(err.category, ErrorCategory::Exited);
        sb.remove().await.unwrap();
        assert_eq!(sb.state().await.unwrap(), SandboxState::Removed);
        assert_eq!(
            sb.exec(ExecRequest::new(["true"]))
                .await
                .unwrap_err()
                .category,
            ErrorCategory::NotFound
        );
        let provider = ProcessProvider::new_without_isolation(root.path());
        assert_eq!(provider.reap("node-p").await.unwrap(), 1);
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
