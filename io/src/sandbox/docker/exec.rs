//! Running one command in a sandbox: the exec request, output collection with a hard timeout,
//! killing a timed-out command's process group, the post-exec cleanup of what a command left
//! running, and OOM detection from the cgroup's counter — read from the host before and after
//! the command, else by the cleanup inside, else from the Engine; unknown when none answers
//! (see the module notes in [`super`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::KillContainerOptionsBuilder;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::cgroup;
use super::container::Container;
use super::EXEC_ID_ENV;
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::{
    CappedBuffer, ExecOutput, ExecRequest, OutputChunk, OutputStream, SandboxState, UsageTotals,
};

/// How long a timed-out command gets to finish after its process group was killed before the
/// whole container is killed.
pub(super) const KILL_GRACE: Duration = Duration::from_secs(2);
/// Time limit for the sandbox's own helper commands (kill, OOM check).
const HELPER_TIMEOUT: Duration = Duration::from_secs(5);

/// The post-exec cleanup, run as the commands' user (so it can signal exactly their processes,
/// never the main process, which runs as [`SUPERVISOR_USER`]). `$1` is `all` or `marked`; with
/// `marked` only processes whose environment holds `$2` (`CHORUS_EXEC_ID=<n>`) are killed.
/// Repeats until a round finds nothing new (a forking process may spawn between rounds;
/// bounded). A process killed in an earlier round that is still dying is signalled again but
/// not counted again (a slow machine showed one `sleep` counted twice). Prints `killed N`, then
/// the memory cgroup's OOM counter (v1 `memory.oom_control`, v2 `memory.events`), then the
/// cgroup's totals: CPU time (v1 `cpu_ns` from `cpuacct.usage`, v2 `usage_usec` from
/// `cpu.stat`) and the memory peak (v1 `max_usage_in_bytes`, v2 `memory.peak`, or
/// `memory.current` on kernels without it).
const CLEANUP_SCRIPT: &str = r#"self=$$; n=0; round=0; seen=" "
while [ $round -lt 20 ]; do
  found=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] && continue
    [ "$p" = 1 ] && continue
    read -r st 2>/dev/null < "$d/stat" || continue
    case "$st" in *") Z "*|*") X "*) continue;; esac
    kill -0 "$p" 2>/dev/null || continue
    if [ "$1" = marked ]; then
      tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$2" || continue
    fi
    kill -9 "$p" 2>/dev/null || continue
    case "$seen" in *" $p "*) continue;; esac
    seen="$seen$p "; found=$((found+1))
  done
  [ $found -eq 0 ] && break
  n=$((n+found)); round=$((round+1))
done
echo "killed $n"
cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null
c=$(cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null) && echo "cpu_ns $c"
grep '^usage_usec ' /sys/fs/cgroup/cpu.stat 2>/dev/null
m=$(cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.peak 2>/dev/null || cat /sys/fs/cgroup/memory.current 2>/dev/null) && echo "memory_peak $m"
exit 0"#;

/// Why a working directory cannot be entered (`$1`): one word, always exit 0.
const WORKDIR_CHECK: &str = r#"if [ ! -e "$1" ]; then echo missing
elif [ ! -d "$1" ]; then echo not-a-directory
elif ! cd "$1" 2>/dev/null; then echo no-access
else echo ok; fi"#;

/// The exit code the Engine gives an exec its runtime could not start.
const NOT_STARTED: i64 = 126;

/// What the post-exec cleanup found.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cleanup {
    killed: u32,
    /// New kills on the in-sandbox OOM counter; `None` when the cleanup could not read it (it
    /// did not run, or was killed itself: a full container has no room for it).
    new_oom_kills: Option<u64>,
}

/// What is known of the OOM kills during one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Oom {
    /// `kills` new kills, as `from` says.
    Known { kills: u64, from: &'static str },
    /// No way of telling answered.
    Unknown,
}

/// The exit code of a process killed by SIGKILL (the OOM killer's signal).
const KILLED: i64 = 137;

/// How a command's output stream ended.
enum StreamEnd {
    Finished,
    TimedOut,
}

/// An exec's output as the daemon sends it.
type OutputStreamOf =
    std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// A started exec: its id, its output, and the task feeding its stdin.
struct Attached {
    exec_id: String,
    output: OutputStreamOf,
    stdin_task: Option<JoinHandle<()>>,
}

/// Collects a command's output under the caps, and takes the wrapper's pid line off stdout.
pub(super) struct OutputCollector {
    pub(super) stdout: CappedBuffer,
    pub(super) stderr: CappedBuffer,
    /// The wrapper's first stdout line (its pid) while it is still being read; `None` once
    /// read, or when the command is not wrapped.
    pid_line: Option<Vec<u8>>,
    /// The command's process group, from the pid line.
    pgid: Option<u32>,
    /// What a reset before the command could not undo, said in place of the pid line.
    refused: Option<String>,
}

impl OutputCollector {
    pub(super) fn new(cap: usize, wrapped: bool) -> Self {
        OutputCollector {
            stdout: CappedBuffer::new(cap),
            stderr: CappedBuffer::new(cap),
            pid_line: wrapped.then(Vec::new),
            pgid: None,
            refused: None,
        }
    }

    /// Takes one item of output; returns what the caller should see of it, if anything.
    pub(super) fn push(&mut self, item: LogOutput) -> Option<OutputChunk> {
        match item {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                let bytes = self.strip_pid_line(&message)?;
                if bytes.is_empty() {
                    return None;
                }
                self.stdout.push(bytes);
                Some(OutputChunk {
                    stream: OutputStream::Stdout,
                    data: bytes.to_vec(),
                })
            }
            LogOutput::StdErr { message } => {
                self.stderr.push(&message);
                Some(OutputChunk {
                    stream: OutputStream::Stderr,
                    data: message.to_vec(),
                })
            }
            LogOutput::StdIn { .. } => None,
        }
    }

    /// The wrapper's first stdout line is its pid; hide it from the caller. Returns the rest of
    /// `bytes`, or `None` while the line is not complete yet.
    fn strip_pid_line<'a>(&mut self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        let Some(line) = self.pid_line.as_mut() else {
            return Some(bytes);
        };
        match bytes.iter().position(|b| *b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&bytes[..i]);
                let text = String::from_utf8_lossy(line);
                self.pgid = text.trim().parse().ok();
                self.refused = text
                    .strip_prefix(super::reset::REFUSED_PREFIX)
                    .map(str::to_owned);
                self.pid_line = None;
                Some(&bytes[i + 1..])
            }
            None => {
                // Bounded: a pid is a few digits, a reset's refusal one short line.
                if line.len() < 256 {
                    line.extend_from_slice(bytes);
                }
                None
            }
        }
    }

    /// Reads the output until it ends or `deadline` passes, forwarding chunks to `sink` while
    /// its receiver listens.
    async fn drain(
        &mut self,
        output: &mut OutputStreamOf,
        deadline: tokio::time::Instant,
        mut sink: Option<&mpsc::Sender<OutputChunk>>,
    ) -> Result<StreamEnd, bollard::errors::Error> {
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Err(_) => return Ok(StreamEnd::TimedOut),
                Ok(None) => return Ok(StreamEnd::Finished),
                Ok(Some(Err(e))) => return Err(e),
                Ok(Some(Ok(item))) => {
                    let (Some(chunk), Some(tx)) = (self.push(item), sink) else {
                        continue;
                    };
                    if tx.send(chunk).await.is_err() {
                        sink = None; // receiver gone; keep collecting
                    }
                }
            }
        }
    }
}

/// A piece of a streamed command's stdout, or how the command ended.
#[derive(Debug)]
pub(super) enum Piece {
    Data(Vec<u8>),
    /// The last piece: `Ok` when the command exited 0 having sent everything, else why not.
    End(Result<(), String>),
}

/// How much of a streamed command's stderr is kept for its error.
const STREAM_STDERR_KEPT: usize = 4096;

impl Container {
    /// Runs one of the sandbox's own commands through the Engine (never through the agent)
    /// and sends its stdout to `tx` as it comes: at most `tx`'s capacity of pieces (the
    /// Engine's output frames) are in flight, so the receiver's reading paces the command and
    /// nothing is collected. The last piece says how it ended. Past `timeout`, or when the
    /// receiver is gone, the command's process group is killed.
    pub(super) async fn stream_stdout(
        &self,
        argv: Vec<String>,
        timeout: Duration,
        tx: mpsc::Sender<Piece>,
    ) {
        let end = self.stream_to(argv, timeout, &tx).await;
        let _ = tx.send(Piece::End(end)).await;
    }

    async fn stream_to(
        &self,
        argv: Vec<String>,
        timeout: Duration,
        tx: &mpsc::Sender<Piece>,
    ) -> Result<(), String> {
        let request = ExecRequest {
            argv,
            working_dir: Some("/".into()),
            ..ExecRequest::default()
        };
        let gate = self.exec_gate.read().await;
        let marker = self.next_marker();
        let config = self.exec_config(&request, &marker);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut attached = self.attach(config, None).await.map_err(|e| e.to_string())?;
        let mut collected = OutputCollector::new(STREAM_STDERR_KEPT, self.policy.exec_wrapper);
        loop {
            let item = match tokio::time::timeout_at(deadline, attached.output.next()).await {
                Err(_) => {
                    let how = self
                        .kill_timed_out(collected.pgid, &mut attached.output)
                        .await;
                    return Err(format!("timed out after {timeout:?} ({how})"));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(format!("the Engine's stream failed: {e}")),
                Ok(Some(Ok(item))) => item,
            };
            let Some(OutputChunk {
                stream: OutputStream::Stdout,
                data,
            }) = collected.push(item)
            else {
                continue;
            };
            // The stdout kept for errors is not wanted: it is passed on.
            collected.stdout.data.clear();
            match tokio::time::timeout_at(deadline, tx.send(Piece::Data(data))).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    self.kill_timed_out(collected.pgid, &mut attached.output)
                        .await;
                    return Err("the reader stopped".into());
                }
                Err(_) => {
                    let how = self
                        .kill_timed_out(collected.pgid, &mut attached.output)
                        .await;
                    return Err(format!("timed out after {timeout:?} ({how})"));
                }
            }
        }
        drop(gate);
        let code = self
            .exec_exit_code(&attached.exec_id)
            .await
            .map_err(|e| e.to_string())?;
        if code == 0 {
            Ok(())
        } else {
            Err(format!(
                "exit {code}: {}",
                String::from_utf8_lossy(&collected.stderr.data).trim()
            ))
        }
    }

    /// Runs one command. `clean_up`: afterwards kill what it left running and check the OOM
    /// counter (for callers' commands; the sandbox's own file commands skip it). `reset`: the
    /// reset's arguments when it goes first in the same exec (`reset.rs`); the command then
    /// reaches the sandbox on stdin, only once the reset vouched for it.
    pub(super) async fn run(
        &self,
        mut request: ExecRequest,
        sink: Option<&mpsc::Sender<OutputChunk>>,
        clean_up: bool,
        reset: Option<Vec<String>>,
    ) -> SandboxResult<ExecOutput> {
        if request.argv.is_empty() {
            return Err(SandboxError::new(ErrorCategory::Exec, "empty command"));
        }
        // A live sandbox's command goes through its agent when it has one (`agent.rs`).
        // So do the sandbox's own file commands once it has one running.
        if !clean_up && reset.is_none() && (request.keep_processes || self.has_agent().await) {
            if let Some(out) = self.run_by_agent(&request, sink).await? {
                return Ok(out);
            }
        }
        let gate = self.exec_gate.read().await;
        let marker = self.next_marker();
        let timeout = request.timeout_under(&self.policy);
        let cap = request.output_cap_under(&self.policy);
        let (config, stdin) = match &reset {
            Some(args) => self.reset_then_run_config(&request, &marker, args),
            None => (self.exec_config(&request, &marker), request.stdin.take()),
        };

        // The host's counter before the command: kills from now on are this command's (and,
        // with concurrent commands, every one's that runs then).
        let host_oom_before = self.host_oom_kills();
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut attached = self.attach(config, stdin).await?;
        let mut collected = OutputCollector::new(cap, self.policy.exec_wrapper || reset.is_some());
        let end = collected
            .drain(&mut attached.output, deadline, sink)
            .await
            .map_err(|e| self.exec_error("reading exec output", e))?;
        if let Some(task) = attached.stdin_task {
            task.abort();
        }
        if let Some(why) = collected.refused.take() {
            return Err(SandboxError::not_clean(&self.name, why));
        }
        let timed_out = match end {
            StreamEnd::TimedOut => Some(
                self.kill_timed_out(collected.pgid, &mut attached.output)
                    .await,
            ),
            StreamEnd::Finished => None,
        };
        drop(gate);
        let output_ended = Instant::now();

        // The sandbox's last command, where the host shows its cgroup (its OOM counter and its
        // totals both): nothing to clean up in place (the removal, or a reset, ends what the
        // command left), and the counter and the totals are read on the host, which saves an
        // exec per run. Where either cannot be read, the clean-up inside reads them as before.
        let on_the_host = (clean_up && request.last_in_sandbox && host_oom_before.is_some())
            .then(|| self.host_totals())
            .flatten();
        let cleanup = if clean_up && on_the_host.is_none() {
            self.clean_up_after(&marker).await
        } else {
            Cleanup::default()
        };
        if let Some(totals) = on_the_host {
            *self.last_totals.lock().unwrap_or_else(|p| p.into_inner()) = Some(totals);
        }
        if let Some(how) = timed_out {
            return Err(timeout_error(&request, timeout, how, cleanup, &collected));
        }
        let exit_code = self.exec_exit_code(&attached.exec_id).await?;
        let duration = started.elapsed();
        if exit_code == NOT_STARTED && collected.stdout.data.is_empty() {
            self.check_working_dir(&request, &collected).await?;
        }
        let host_oom_kills = host_oom_before
            .zip(self.host_oom_kills())
            .map(|(before, after)| after.saturating_sub(before));
        let oom = self
            .oom_verdict(exit_code, clean_up.then_some(cleanup), host_oom_kills)
            .await;
        self.check_oom_and_main_process(&request, exit_code, oom)
            .await?;
        Ok(ExecOutput {
            exit_code,
            stdout: collected.stdout.data,
            stderr: collected.stderr.data,
            stdout_truncated: collected.stdout.truncated,
            stderr_truncated: collected.stderr.truncated,
            duration,
            stray_processes_killed: cleanup.killed,
            after_output: output_ended.elapsed(),
        })
    }

    /// The exec request of a reset and then the command (`reset.rs`), and the stdin that
    /// carries the command: the exec itself holds only the sandbox's environment and `marker`,
    /// and starts at the root (the command's working directory is entered after the reset).
    fn reset_then_run_config(
        &self,
        request: &ExecRequest,
        marker: &str,
        args: &[String],
    ) -> (ExecConfig, Option<Vec<u8>>) {
        let mut cmd: Vec<String> = vec![
            "/bin/sh".into(),
            "-c".into(),
            super::reset::reset_then_run_script(),
            "chorus-exec".into(),
        ];
        cmd.extend(args.iter().cloned());
        let script = super::reset::command_script(request, &self.working_dir_of(request), marker);
        let config = self.config_of(cmd, BTreeMap::new(), marker, "/".into(), true);
        (config, Some(script.into_bytes()))
    }

    /// The exec request: the command (wrapped to report its process group, when the policy
    /// says so), the sandbox's and the request's environment plus this exec's `marker`, the
    /// policy's user and the working directory.
    fn exec_config(&self, request: &ExecRequest, marker: &str) -> ExecConfig {
        let mut cmd = Vec::with_capacity(request.argv.len() + 4);
        if self.policy.exec_wrapper {
            cmd.extend(["/bin/sh", "-c", "echo $$; exec \"$@\"", "chorus-exec"].map(String::from));
        }
        cmd.extend(request.argv.iter().cloned());
        self.config_of(
            cmd,
            request.env.clone(),
            marker,
            self.working_dir_of(request),
            request.stdin.is_some(),
        )
    }

    /// This exec's marker: `CHORUS_EXEC_ID=` and a number no other exec here had.
    pub(super) fn next_marker(&self) -> String {
        let n = self.exec_counter.fetch_add(1, Ordering::Relaxed);
        format!("{EXEC_ID_ENV}={n}")
    }

    /// A command's environment: the sandbox's, `env` over it and this exec's `marker` over
    /// both.
    pub(super) fn command_env(
        &self,
        env: BTreeMap<String, String>,
        marker: &str,
    ) -> BTreeMap<String, String> {
        let mut all = self.lock_env().clone();
        all.extend(env);
        if let Some((k, v)) = marker.split_once('=') {
            all.insert(k.to_string(), v.to_string());
        }
        all
    }

    /// The request's working directory, else the workspace.
    pub(super) fn working_dir_of(&self, request: &ExecRequest) -> String {
        request
            .working_dir
            .clone()
            .unwrap_or_else(|| self.workspace_path.clone())
    }

    /// An exec of `cmd` as the policy's user in `working_dir`, with the sandbox's environment,
    /// `env` over it and this exec's `marker` over both.
    fn config_of(
        &self,
        cmd: Vec<String>,
        env: BTreeMap<String, String>,
        marker: &str,
        working_dir: String,
        stdin: bool,
    ) -> ExecConfig {
        let all = self.command_env(env, marker);
        ExecConfig {
            attach_stdin: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(all.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            cmd: Some(cmd),
            user: self.policy.user.clone(),
            working_dir: Some(working_dir),
            ..Default::default()
        }
    }

    /// Creates and starts the exec, attached, and starts feeding `stdin`.
    async fn attach(&self, config: ExecConfig, stdin: Option<Vec<u8>>) -> SandboxResult<Attached> {
        let exec = self
            .docker
            .create_exec(&self.name, config)
            .await
            .map_err(|e| self.exec_error("create exec", e))?;
        let attached = self
            .docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| self.exec_error("start exec", e))?;
        let StartExecResults::Attached { output, mut input } = attached else {
            return Err(SandboxError::new(
                ErrorCategory::Exec,
                "daemon started the exec detached",
            ));
        };
        // Feed stdin from its own task so a command that writes before it reads cannot
        // deadlock against us; closing our write half closes the command's stdin.
        let stdin_task = stdin.map(|data| {
            tokio::spawn(async move {
                let _ = input.write_all(&data).await;
                let _ = input.shutdown().await;
            })
        });
        Ok(Attached {
            exec_id: exec.id,
            output,
            stdin_task,
        })
    }

    /// What is known of the OOM kills during a finished command, from the first source that
    /// answers: the host's cgroup counter (`host_kills`: after minus before), the post-exec
    /// cleanup's reading inside (`cleanup`, when it ran), a reading inside now (a killed file
    /// command), the Engine's `OOMKilled` flag (only for a killed command: it stays set once any
    /// kill set it, and is set only for the main process on Docker 20.10, so it can confirm a
    /// kill but never deny one). The sandbox's own file commands (no cleanup) are judged only
    /// when killed, as before: a command running beside them may be what was killed.
    pub(super) async fn oom_verdict(
        &self,
        exit_code: i64,
        cleanup: Option<Cleanup>,
        host_kills: Option<u64>,
    ) -> Oom {
        if cleanup.is_none() && exit_code != KILLED {
            return Oom::Known {
                kills: 0,
                from: "nothing: a file command that was not killed is not judged",
            };
        }
        if let Some(kills) = host_kills {
            return Oom::Known {
                kills,
                from: "the host's cgroup counter",
            };
        }
        let inside = match cleanup {
            Some(cleanup) => cleanup.new_oom_kills,
            None => self.new_oom_kills().await,
        };
        if let Some(kills) = inside {
            return Oom::Known {
                kills,
                from: "the sandbox's cgroup counter, read inside",
            };
        }
        if exit_code == KILLED && self.engine_says_oom_killed().await {
            return Oom::Known {
                kills: 1,
                from: "the Engine's OOMKilled flag",
            };
        }
        Oom::Unknown
    }

    /// Fails a command the runtime could not start because of its working directory. The
    /// Engine says only "exit code 126, no output" then; a directory check (a helper exec, only
    /// in this case) tells whether that is why.
    async fn check_working_dir(
        &self,
        request: &ExecRequest,
        collected: &OutputCollector,
    ) -> SandboxResult<()> {
        let Some(dir) = request.working_dir.as_deref() else {
            return Ok(());
        };
        if !collected.stderr.data.is_empty() {
            return Ok(());
        }
        let argv = ["sh", "-c", WORKDIR_CHECK, "chorus-workdir", dir].map(String::from);
        let Ok(out) = self.helper(argv.to_vec()).await else {
            return Ok(());
        };
        let why = match String::from_utf8_lossy(&out).trim() {
            "missing" => "does not exist",
            "not-a-directory" => "is not a directory",
            "no-access" => "cannot be entered by the commands' user",
            _ => return Ok(()),
        };
        Err(SandboxError::new(
            ErrorCategory::Exec,
            format!("workdir {} {why} in the sandbox", dir.escape_debug()),
        ))
    }

    /// Whether the Engine flags the container as OOM-killed.
    async fn engine_says_oom_killed(&self) -> bool {
        let inspected = self.docker.inspect_container(&self.name, None).await;
        inspected
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.oom_killed)
            .unwrap_or(false)
    }

    /// Fails a finished command that met the OOM killer, whose exit by SIGKILL came from the
    /// main process ending, or that was killed by SIGKILL when nothing could tell whether the
    /// OOM killer did it (that is said, never taken for "no OOM"). A command that exited by
    /// itself while the OOM state is unknown keeps its result, with a warning in the log.
    pub(super) async fn check_oom_and_main_process(
        &self,
        request: &ExecRequest,
        exit_code: i64,
        oom: Oom,
    ) -> SandboxResult<()> {
        // Judged from the cgroup's counter whatever the exit code: a pipeline or a shell can
        // exit 0 after one of its processes was OOM-killed.
        if let Oom::Known { kills, from } = oom {
            if kills > 0 {
                return Err(SandboxError::new(
                    ErrorCategory::ResourceLimit,
                    format!(
                        "command {:?} (exit code {exit_code}) met the out-of-memory killer \
                         ({kills} new OOM kill(s), from {from}; {})",
                        request.argv,
                        memory_limit_words(self.policy.limits.memory_bytes)
                    ),
                ));
            }
        }
        if exit_code == KILLED {
            if let Ok(SandboxState::Exited {
                exit_code,
                oom_killed,
            }) = self.state().await
            {
                return Err(self.exited_error(exit_code, oom_killed));
            }
        }
        if oom == Oom::Unknown {
            if exit_code == KILLED {
                return Err(SandboxError::new(
                    ErrorCategory::Exec,
                    format!(
                        "command {:?} was killed by SIGKILL (exit code {KILLED}), and whether \
                         the out-of-memory killer did it is unknown: neither the host's cgroup \
                         counter, nor a check inside the sandbox, nor the Engine could tell \
                         ({})",
                        request.argv,
                        memory_limit_words(self.policy.limits.memory_bytes)
                    ),
                ));
            }
            tracing::warn!(sandbox = %self.name,
                command = %crate::log_fields::quoted(&request.argv), exit_code,
                "OOM state of the command unknown: neither the host's cgroup counter nor a \
                 check inside the sandbox could be read");
        }
        Ok(())
    }

    pub(super) fn exec_error(&self, op: &str, e: bollard::errors::Error) -> SandboxError {
        SandboxError::from_bollard(ErrorCategory::Exec, &format!("{op} in {}", self.name), e)
    }

    /// The exit code of a finished exec. The output stream can end a moment before the daemon
    /// records the exit, so poll briefly (bounded).
    async fn exec_exit_code(&self, exec_id: &str) -> SandboxResult<i64> {
        for attempt in 0..50u32 {
            let info = self
                .docker
                .inspect_exec(exec_id)
                .await
                .map_err(|e| self.exec_error("inspect exec", e))?;
            if info.running != Some(true) {
                if let Some(code) = info.exit_code {
                    return Ok(code);
                }
            }
            tokio::time::sleep(Duration::from_millis(2 * u64::from(attempt + 1))).await;
        }
        Err(SandboxError::new(
            ErrorCategory::Exec,
            format!("exec {exec_id} output ended but it never reported an exit code"),
        ))
    }

    /// Stops a timed-out command: its process group first, the whole container if that does
    /// not end it. Returns what was done, for the error message.
    async fn kill_timed_out(&self, pgid: Option<u32>, output: &mut OutputStreamOf) -> &'static str {
        if let Some(pgid) = pgid.filter(|p| *p > 1) {
            // The shell's own `kill`: procps' (4.0) exits 1 after killing a group, which would
            // look like a failed kill and take the whole sandbox down.
            let kill = self
                .helper(
                    [
                        "sh",
                        "-c",
                        "kill -9 -\"$1\"",
                        "chorus-kill",
                        &pgid.to_string(),
                    ]
                    .map(String::from)
                    .to_vec(),
                )
                .await;
            if kill.is_ok() {
                // The stream ends once every process holding the output pipes is gone.
                let drained = tokio::time::timeout(KILL_GRACE, async {
                    while output.next().await.is_some() {}
                })
                .await;
                if drained.is_ok() {
                    return "process group killed";
                }
            }
        }
        tracing::warn!(sandbox = %self.name, "timed-out command survived a group kill; killing the sandbox");
        let _ = self
            .docker
            .kill_container(
                &self.name,
                Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build()),
            )
            .await;
        "sandbox killed: the process group could not be killed"
    }

    /// Runs a helper command (no wrapper, no stdin) and returns its stdout when it exits 0.
    pub(super) async fn helper(&self, argv: Vec<String>) -> SandboxResult<Vec<u8>> {
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv.clone()),
            user: self.policy.user.clone(),
            ..Default::default()
        };
        let work = async {
            let exec = self
                .docker
                .create_exec(&self.name, config)
                .await
                .map_err(|e| self.exec_error("create helper exec", e))?;
            let started = self
                .docker
                .start_exec(&exec.id, None)
                .await
                .map_err(|e| self.exec_error("start helper exec", e))?;
            let mut out = CappedBuffer::new(64 * 1024);
            if let StartExecResults::Attached { mut output, .. } = started {
                while let Some(item) = output.next().await {
                    if let Ok(LogOutput::StdOut { message }) = item {
                        out.push(&message);
                    }
                }
            }
            let code = self.exec_exit_code(&exec.id).await?;
            if code == 0 {
                Ok(out.data)
            } else {
                Err(SandboxError::new(
                    ErrorCategory::Exec,
                    format!("helper {argv:?} exited with {code}"),
                ))
            }
        };
        tokio::time::timeout(HELPER_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(SandboxError::new(
                    ErrorCategory::Timeout,
                    "sandbox helper command timed out",
                ))
            })
    }

    /// Reads the memory cgroup's OOM-kill counter inside the sandbox (v1 `memory.oom_control`,
    /// v2 `memory.events`) and returns how many kills happened since the last look; `None`
    /// when it cannot be read.
    async fn new_oom_kills(&self) -> Option<u64> {
        let out = self
            .helper(vec![
                "sh".into(),
                "-c".into(),
                "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null \
                 || cat /sys/fs/cgroup/memory.events"
                    .into(),
            ])
            .await
            .ok()?;
        self.note_oom_count(&String::from_utf8_lossy(&out))
    }

    /// Records the `oom_kill` count found in `text`; returns how many are new since last time.
    fn note_oom_count(&self, text: &str) -> Option<u64> {
        let count = cgroup::parse_oom_kills(text)?;
        let mut seen = self
            .oom_kills_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let new = count.saturating_sub(*seen);
        *seen = count.max(*seen);
        Some(new)
    }

    /// Kills every process of the commands' user, now (a sandbox given back to be kept:
    /// [`ExecutionSandbox::end_leftovers`](crate::sandbox::ExecutionSandbox::end_leftovers)).
    /// Fails when the helper cannot run (the sandbox died), so the pool removes it.
    pub(super) async fn end_leftovers(&self) -> SandboxResult<()> {
        let out = self
            .helper(
                ["sh", "-c", CLEANUP_SCRIPT, "chorus-cleanup", "all", ""]
                    .map(String::from)
                    .to_vec(),
            )
            .await?;
        let text = String::from_utf8_lossy(&out);
        let killed: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("killed "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if killed > 0 {
            tracing::debug!(sandbox = %self.name, killed,
                "killed what a finished run left running in a kept sandbox");
        }
        Ok(())
    }

    /// After a command: kills every process it left (all of the commands' user's processes
    /// when no other exec is in flight, else those carrying its `marker`), and reads the OOM
    /// counter. A cleanup that cannot run (the sandbox died) finds nothing.
    async fn clean_up_after(&self, marker: &str) -> Cleanup {
        let exclusive = self.exec_gate.try_write();
        let mode = if exclusive.is_ok() { "all" } else { "marked" };
        let out = self
            .helper(
                ["sh", "-c", CLEANUP_SCRIPT, "chorus-cleanup", mode, marker]
                    .map(String::from)
                    .to_vec(),
            )
            .await;
        drop(exclusive);
        let Ok(out) = out else {
            return Cleanup::default();
        };
        let text = String::from_utf8_lossy(&out);
        let killed = text
            .lines()
            .find_map(|l| l.strip_prefix("killed "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if killed > 0 {
            tracing::debug!(sandbox = %self.name, killed, "killed processes a command left");
        }
        if let Some(totals) = parse_totals(&text) {
            *self.last_totals.lock().unwrap_or_else(|p| p.into_inner()) = Some(totals);
        }
        Cleanup {
            killed,
            new_oom_kills: self.note_oom_count(&text),
        }
    }
}

/// The cgroup totals the cleanup printed, if it found the CPU counter.
fn parse_totals(text: &str) -> Option<UsageTotals> {
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    let cpu_ns =
        value("cpu_ns ").or_else(|| value("usage_usec ").map(|us| us.saturating_mul(1_000)))?;
    Some(UsageTotals {
        cpu_ns,
        memory_peak_bytes: value("memory_peak ").unwrap_or(0),
    })
}

/// The error for a command that ran past its timeout.
pub(super) fn timeout_error(
    request: &ExecRequest,
    timeout: Duration,
    how: &str,
    cleanup: Cleanup,
    collected: &OutputCollector,
) -> SandboxError {
    SandboxError::new(
        ErrorCategory::Timeout,
        format!(
            "command {:?} ran past its {timeout:?} timeout and was killed ({how}; {} \
             stray process(es) killed after it); {} bytes of stdout, {} of stderr \
             before that",
            request.argv,
            cleanup.killed,
            collected.stdout.data.len(),
            collected.stderr.data.len()
        ),
    )
}

/// A memory limit for people: `memory limit 64 MiB (67108864 bytes)`, or `no memory limit`
/// (never Rust's `Some(67108864)`).
fn memory_limit_words(limit_bytes: Option<i64>) -> String {
    match limit_bytes {
        Some(b) if b % (1024 * 1024) == 0 => {
            format!("memory limit {} MiB ({b} bytes)", b / (1024 * 1024))
        }
        Some(b) => format!("memory limit {b} bytes"),
        None => "no memory limit".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: an out-of-memory error says its limit in words, not `Some(…)`.
    #[test]
    fn a_memory_limit_is_said_plainly() {
        assert_eq!(
            memory_limit_words(Some(64 * 1024 * 1024)),
            "memory limit 64 MiB (67108864 bytes)"
        );
        assert_eq!(memory_limit_words(Some(1_000)), "memory limit 1000 bytes");
        assert_eq!(memory_limit_words(None), "no memory limit");
    }
    use crate::sandbox::SandboxPolicy;

    /// A container on an Engine that does not answer: what the verdict does when the Engine
    /// cannot tell either.
    fn unreachable_container() -> Container {
        let dir = tempfile::tempdir().unwrap();
        // A plain file where the socket should be: connecting to it is refused.
        let socket = dir.path().join("no-engine.sock");
        std::fs::write(&socket, b"").unwrap();
        let docker = bollard::Docker::connect_with_unix(
            socket.to_str().unwrap(),
            5,
            bollard::API_DEFAULT_VERSION,
        )
        .unwrap();
        Container::new(
            docker,
            "chorus-test".into(),
            "0123abcd".into(),
            SandboxPolicy::default(),
            "/workspace".into(),
            None,
            false,
        )
    }

    /// Issue 36: a command that goes after a reset reaches the sandbox only on stdin: the exec
    /// the Engine makes (and any process of the run before could see) holds the reset's
    /// arguments and the sandbox's environment, none of the request's argv, environment or
    /// working directory.
    #[test]
    fn a_command_after_a_reset_is_not_in_its_execs_argv_or_environment() {
        let container = unreachable_container();
        container
            .lock_env()
            .insert("FROM_SANDBOX".into(), "s".into());
        let request = ExecRequest::new(["run-me", "ARG_VALUE_1"])
            .env("SECRET", "TOKEN_VALUE_9")
            .working_dir("/workspace/WD_VALUE_2")
            .after_reset();
        let (config, stdin) = container.reset_then_run_config(
            &request,
            "CHORUS_EXEC_ID=4",
            &["65534".into(), "/tmp:1777".into()],
        );
        let exec = format!("{:?} {:?} {:?}", config.cmd, config.env, config.working_dir);
        for value in ["ARG_VALUE_1", "TOKEN_VALUE_9", "WD_VALUE_2", "run-me"] {
            assert!(!exec.contains(value), "{value} in {exec}");
        }
        assert!(exec.contains("FROM_SANDBOX=s") && exec.contains("CHORUS_EXEC_ID=4"));
        assert_eq!(config.working_dir.as_deref(), Some("/"));
        let script = String::from_utf8(stdin.unwrap()).unwrap();
        for value in ["ARG_VALUE_1", "TOKEN_VALUE_9", "WD_VALUE_2", "'run-me'"] {
            assert!(script.contains(value), "{value} not in {script}");
        }
    }

    /// Issue 33: an OOM state nobody could read is never taken for "no OOM": a command killed
    /// by SIGKILL is an error saying it is unknown; one that exited by itself keeps its result
    /// (with a warning in the log). A known kill is an OOM whatever the exit code.
    #[tokio::test]
    async fn an_unknown_oom_state_is_said_never_taken_for_none() {
        let container = unreachable_container();
        let request = ExecRequest::new(["hog"]);
        let err = container
            .check_oom_and_main_process(&request, KILLED, Oom::Unknown)
            .await
            .unwrap_err();
        assert_eq!(err.category, ErrorCategory::Exec, "{err}");
        assert!(err.message.contains("is unknown"), "{err}");
        assert!(!err.retryable);
        container
            .check_oom_and_main_process(&request, 0, Oom::Unknown)
            .await
            .unwrap();
        let known = Oom::Known {
            kills: 1,
            from: "the host's cgroup counter",
        };
        let err = container
            .check_oom_and_main_process(&request, 0, known)
            .await
            .unwrap_err();
        assert_eq!(err.category, ErrorCategory::ResourceLimit, "{err}");
        assert!(err.message.contains("host's cgroup counter"), "{err}");
        // With neither a host counter, a cleanup reading, nor an Engine: unknown.
        assert_eq!(
            container
                .oom_verdict(KILLED, Some(Cleanup::default()), None)
                .await,
            Oom::Unknown
        );
        // A file command that exited by itself is not judged; a host reading wins.
        assert!(matches!(
            container.oom_verdict(0, None, None).await,
            Oom::Known { kills: 0, .. }
        ));
        assert!(matches!(
            container.oom_verdict(KILLED, None, Some(2)).await,
            Oom::Known { kills: 2, .. }
        ));
    }

    #[test]
    fn the_cleanups_totals_parse_from_either_cgroup_version() {
        let v1 = "killed 0\noom_kill_disable 0\nunder_oom 0\noom_kill 0\ncpu_ns 47628578\n\
                  memory_peak 4493312\n";
        assert_eq!(
            parse_totals(v1),
            Some(UsageTotals {
                cpu_ns: 47_628_578,
                memory_peak_bytes: 4_493_312
            })
        );
        let v2 = "killed 2\noom 0\noom_kill 0\nusage_usec 1500\nmemory_peak 8192\n";
        assert_eq!(
            parse_totals(v2),
            Some(UsageTotals {
                cpu_ns: 1_500_000,
                memory_peak_bytes: 8_192
            })
        );
        // No CPU counter readable: no totals (the Engine's stats are asked instead).
        assert_eq!(parse_totals("killed 0\n"), None);
    }
}
