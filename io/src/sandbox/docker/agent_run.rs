//! A live sandbox's commands through its agent (`agent.rs`): the container starts its agent at
//! the first command and runs each command on it as [`Container::run`] would through the
//! Engine. Here, not in `agent.rs`, so the agent's protocol needs nothing of the container or
//! of the Engine path's output handling (the two files no longer import each other).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use tokio::sync::mpsc;

use super::agent::{Agent, AgentSlot, Event, Feed, Run};
use super::container::Container;
use super::exec::{timeout_error, Cleanup, OutputCollector, KILL_GRACE};
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::{ExecOutput, ExecRequest, OutputChunk, OutputStream, SandboxState};

/// The signal a timed-out command's process group gets.
const SIGKILL: u32 = 9;

impl Container {
    /// The sandbox's agent, started at its first command (and again after one ended); `None`
    /// when this sandbox has none.
    async fn agent(&self) -> Option<Arc<Agent>> {
        let mut slot = self.agent.lock().await;
        match &*slot {
            AgentSlot::Running(agent) if agent.is_alive() => return Some(agent.clone()),
            AgentSlot::Unavailable => return None,
            AgentSlot::Running(_) | AgentSlot::Untried => {}
        }
        match Agent::start(&self.docker, &self.name, self.policy.user.clone()).await {
            Some(agent) => {
                let agent = Arc::new(agent);
                *slot = AgentSlot::Running(agent.clone());
                Some(agent)
            }
            None => {
                *slot = AgentSlot::Unavailable;
                None
            }
        }
    }

    /// Whether an agent runs here (a live sandbox's, once started).
    pub(super) async fn has_agent(&self) -> bool {
        matches!(&*self.agent.lock().await, AgentSlot::Running(agent) if agent.is_alive())
    }

    /// Runs a live sandbox's command through its agent, as [`Container::run`] would through
    /// the Engine (same environment, working directory, output caps, timeout and OOM verdict;
    /// nothing it leaves running is cleaned up). `Ok(None)` when the agent took nothing (this
    /// sandbox has none, or it ended before the command was sent): the caller runs it through
    /// the Engine.
    pub(super) async fn run_by_agent(
        &self,
        request: &ExecRequest,
        sink: Option<&mpsc::Sender<OutputChunk>>,
    ) -> SandboxResult<Option<ExecOutput>> {
        self.run_by_agent_fed(request, sink, None).await
    }

    /// [`Container::run_by_agent`], its stdin fed from `feed` as the command runs; a feed that
    /// fails kills the command (a write the agent makes itself ends, `agent.c`).
    pub(super) async fn run_by_agent_fed(
        &self,
        request: &ExecRequest,
        sink: Option<&mpsc::Sender<OutputChunk>>,
        mut feed: Option<&mut Feed>,
    ) -> SandboxResult<Option<ExecOutput>> {
        let Some(agent) = self.agent().await else {
            return Ok(None);
        };
        let gate = self.exec_gate.read().await;
        let marker = self.next_marker();
        let timeout = request.timeout_under(&self.policy);
        let cap = request.output_cap_under(&self.policy);
        let env = self.command_env(request.env.clone(), &marker);
        let cwd = self.working_dir_of(request);
        let host_oom_before = self.host_oom_kills();
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + timeout;
        let run = Run {
            argv: &request.argv,
            env: &env,
            cwd: &cwd,
            stdin: request.stdin.as_deref(),
            fed: feed.is_some(),
        };
        let Some(mut running) = agent.run(run).await else {
            return Ok(None);
        };
        let mut collected = OutputCollector::new(cap, false);
        let mut sink = sink;
        let exit = loop {
            let next = tokio::time::timeout_at(deadline, running.events.recv());
            let waited = match feed.as_deref_mut().filter(|f| f.wants_more()) {
                None => next.await,
                Some(f) => tokio::select! {
                    waited = next => waited,
                    chunk = f.source.recv() => {
                        if let Err(e) = f.take(chunk, &agent, running.id).await {
                            agent.kill(running.id, SIGKILL).await;
                            return Err(e);
                        }
                        continue;
                    }
                },
            };
            let Ok(event) = waited else {
                agent.kill(running.id, SIGKILL).await;
                let ended = tokio::time::timeout(KILL_GRACE, async {
                    while let Some(event) = running.events.recv().await {
                        if matches!(event, Event::Exit { .. }) {
                            return true;
                        }
                    }
                    false
                })
                .await
                .unwrap_or(false);
                let how = if ended {
                    "process group killed"
                } else {
                    "process group signalled; it had not ended after the grace"
                };
                return Err(timeout_error(
                    request,
                    timeout,
                    how,
                    Cleanup::default(),
                    &collected,
                ));
            };
            match event {
                None => break None,
                Some(Event::Started { .. }) => {}
                Some(Event::Taken(n)) => {
                    if let Some(f) = feed.as_deref_mut() {
                        f.taken(n);
                    }
                }
                Some(Event::Output(stream, data)) => {
                    let message = data.into();
                    let item = match stream {
                        OutputStream::Stdout => LogOutput::StdOut { message },
                        OutputStream::Stderr => LogOutput::StdErr { message },
                    };
                    let (Some(chunk), Some(tx)) = (collected.push(item), sink) else {
                        continue;
                    };
                    if tx.send(chunk).await.is_err() {
                        sink = None; // receiver gone; keep collecting
                    }
                }
                Some(Event::Exit { code, .. }) => break Some(code),
                Some(Event::Failed { stage, errno }) => {
                    return Err(not_started(request, &cwd, stage, errno));
                }
            }
        };
        drop(gate);
        let Some(exit_code) = exit else {
            if let Ok(SandboxState::Exited {
                exit_code,
                oom_killed,
            }) = self.state().await
            {
                return Err(self.exited_error(exit_code, oom_killed));
            }
            return Err(SandboxError::new(
                ErrorCategory::Exec,
                format!(
                    "command {:?}: the sandbox's command agent ended before the command did \
                     (a command may have killed it; the next command starts another)",
                    request.argv
                ),
            ));
        };
        let duration = started.elapsed();
        let host_oom_kills = host_oom_before
            .zip(self.host_oom_kills())
            .map(|(before, after)| after.saturating_sub(before));
        let oom = self.oom_verdict(exit_code, None, host_oom_kills).await;
        self.check_oom_and_main_process(request, exit_code, oom)
            .await?;
        Ok(Some(ExecOutput {
            exit_code,
            stdout: collected.stdout.data,
            stderr: collected.stderr.data,
            stdout_truncated: collected.stdout.truncated,
            stderr_truncated: collected.stderr.truncated,
            duration,
            stray_processes_killed: 0,
            after_output: Duration::ZERO,
        }))
    }
}

/// The error for a command the agent could not start: its working directory (`stage` 1, said
/// as the Engine path's check says it), or no room (3).
fn not_started(request: &ExecRequest, cwd: &str, stage: u8, errno: u32) -> SandboxError {
    const ENOENT: u32 = 2;
    const EACCES: u32 = 13;
    const ENOTDIR: u32 = 20;
    const EAGAIN: u32 = 11;
    let why = match (stage, errno) {
        (1, ENOENT) => format!(
            "workdir {} does not exist in the sandbox",
            cwd.escape_debug()
        ),
        (1, ENOTDIR) => format!(
            "workdir {} is not a directory in the sandbox",
            cwd.escape_debug()
        ),
        (1, EACCES) => format!(
            "workdir {} cannot be entered by the commands' user in the sandbox",
            cwd.escape_debug()
        ),
        (1, e) => format!(
            "workdir {} cannot be entered (errno {e})",
            cwd.escape_debug()
        ),
        (_, EAGAIN) => format!(
            "command {:?} not started: 64 commands already run at once in this sandbox",
            request.argv
        ),
        (_, e) => format!("command {:?} not started (errno {e})", request.argv),
    };
    SandboxError::new(ErrorCategory::Exec, why)
}
