//! The sandbox's own end ([`ExecutionSandbox::end_after`](crate::sandbox::ExecutionSandbox)):
//! a watchdog exec'd as the supervisor user sleeps, then SIGKILLs every process of that user but
//! itself — the main process among them — so the init exits and the kernel kills whatever is
//! left in the container.
//!
//! Why this shape: the commands' user cannot signal the watchdog (another uid, no `CAP_KILL`),
//! so a task cannot disarm it; when it fires it forks nothing (`sleep` was forked at arming,
//! `kill` is the shell's builtin), so a fork bomb at the pids limit cannot stop it; and it ends
//! the sandbox whoever is left on the host. It needs an init: without one the main process is
//! pid 1, which no signal from inside the container reaches.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use futures_util::StreamExt;

use super::container::Container;
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::policy::SUPERVISOR_USER;
use crate::sandbox::CappedBuffer;

/// How long arming may take (an exec that prints one line).
const ARM_BOUND: Duration = Duration::from_secs(10);

/// `$1`: seconds to wait. An earlier watchdog (a sandbox reused for another run of its
/// submitter) is ended first: the latest arming wins. Only the supervisor's own processes can
/// be signalled from here, so a command's process named like one is no matter; its `sleep` is
/// left to run out, harmless without the shell that would act on it. Says `armed` once it can
/// end the sandbox, then lets go of the exec's output (nothing it runs can block on a pipe
/// nobody reads). `sleep` is checked first: an image without it must not end the sandbox at
/// once.
const END_SCRIPT: &str = r#"command -v sleep >/dev/null 2>&1 || { echo "no sleep in the image"; exit 3; }
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  case "$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" in *" chorus-end "*) kill -9 "$p" 2>/dev/null;; esac
done
echo armed
exec </dev/null >/dev/null 2>&1
sleep "$1" && kill -9 -1"#;

impl Container {
    /// Arms the sandbox's end `after` from now (rounded up to whole seconds).
    pub(super) async fn end_after(&self, after: Duration) -> SandboxResult<()> {
        if !self.policy.init {
            return Err(SandboxError::new(
                ErrorCategory::Unsupported,
                format!(
                    "sandbox {} runs without an init: its main process is pid 1, which nothing \
                     inside the container can end",
                    self.name
                ),
            ));
        }
        let secs = after
            .as_secs()
            .saturating_add(u64::from(after.subsec_nanos() > 0));
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(
                [
                    "/bin/sh",
                    "-c",
                    END_SCRIPT,
                    "chorus-end",
                    &secs.max(1).to_string(),
                ]
                .map(String::from)
                .to_vec(),
            ),
            user: Some(SUPERVISOR_USER.to_string()),
            ..Default::default()
        };
        let said = tokio::time::timeout(ARM_BOUND, self.first_line_of(config))
            .await
            .unwrap_or_else(|_| {
                Err(SandboxError::new(
                    ErrorCategory::Timeout,
                    format!(
                        "arming the end of sandbox {} took over {ARM_BOUND:?}",
                        self.name
                    ),
                ))
            })?;
        if said.trim() == "armed" {
            return Ok(());
        }
        Err(SandboxError::new(
            ErrorCategory::Unsupported,
            format!(
                "sandbox {} cannot end by itself: its watchdog said {:?}",
                self.name,
                said.trim()
            ),
        ))
    }

    /// Starts an exec and reads its output up to the end of its first line (or of the output),
    /// then lets go of it. The Engine ends an exec's output only when the process exits, and
    /// never kills an exec whose reader went away, so the watchdog lives on.
    async fn first_line_of(&self, config: ExecConfig) -> SandboxResult<String> {
        let exec = self
            .docker
            .create_exec(&self.name, config)
            .await
            .map_err(|e| self.exec_error("create the end's exec", e))?;
        let started = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| self.exec_error("start the end's exec", e))?;
        let mut out = CappedBuffer::new(4 * 1024);
        if let StartExecResults::Attached { mut output, .. } = started {
            while !out.data.contains(&b'\n') && !out.truncated {
                match output.next().await {
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::StdErr { message })) => {
                        out.push(&message)
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(self.exec_error("read the end's exec", e)),
                    None => break,
                }
            }
        }
        let line = out.data.split(|b| *b == b'\n').next().unwrap_or_default();
        Ok(String::from_utf8_lossy(line).into_owned())
    }
}
