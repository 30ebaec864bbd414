//! The sandbox's own end ([`ExecutionSandbox::end_after`](crate::sandbox::ExecutionSandbox)).
//!
//! A sandbox for commands runs a **supervisor** as its main process (under the init, as the
//! supervisor user): it ends the sandbox at its lifetime, at the end its node armed last, or
//! as soon as its stdin closes. The node holds that stdin — attached before the start, with
//! the Engine told to close it when that one client goes (`StdinOnce`) — so a node killed with
//! `kill -9` takes its sandboxes with it at once, and arming an end is a line written to the
//! supervisor and its `armed` read back: no exec, a millisecond or so, before the command.
//!
//! Ending the sandbox is a SIGKILL to every process of the supervisor user, the supervisor
//! among them, so the init exits and the kernel kills whatever is left in the container.
//!
//! Why this shape: the commands' user cannot signal the supervisor or its sleepers (another
//! uid, no `CAP_KILL`) nor reach its stdin, so a task cannot disarm it; when it fires it forks
//! nothing (`sleep` was forked at arming, `kill` is the shell's builtin), so a fork bomb at the
//! pids limit cannot stop it; and it ends the sandbox whoever is left on the host. It needs an
//! init: without one the main process is pid 1, which no signal from inside the container
//! reaches.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::query_parameters::AttachContainerOptionsBuilder;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::container::{Container, Supervisor};
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};

/// How long arming may take (a line each way).
const ARM_BOUND: Duration = Duration::from_secs(10);

/// The supervisor. `$1`: the lifetime in seconds. Reads `end SEQ N` lines (only the node can
/// write to its stdin), each replacing the end armed before it with one N seconds away, and
/// answers `armed SEQ`; at the end of its input — its node let go — it ends the sandbox. A
/// replaced sleeper is stopped with TERM, which its trap turns into killing its own `sleep`, so
/// re-arming a reused sandbox leaves no process behind to count against the pids limit. The
/// sleeper says `armed` itself, once its `sleep` and trap are in place: the node arms one at a
/// time and waits for that, so a TERM finds the sleeper in `wait`, never between its fork and
/// its bookkeeping.
const SUPERVISOR_SCRIPT: &str = r#"{ sleep "$1"; kill -9 -1; } &
w=
while read -r what seq secs; do
  [ "$what" = end ] || continue
  case "$seq" in ''|*[!0-9]*) continue;; esac
  case "$secs" in ''|*[!0-9]*) continue;; esac
  [ -n "$w" ] && kill -TERM "$w" 2>/dev/null
  { trap 'kill -9 $s 2>/dev/null; exit 0' TERM; sleep "$secs" & s=$!; echo "armed $seq"; wait $s && kill -9 -1; } &
  w=$!
done
kill -9 -1
exit 0"#;

/// The supervisor's command line for a sandbox that lives `lifetime_s` seconds.
pub(super) fn supervisor_command(lifetime_s: &str) -> Vec<String> {
    [
        "/bin/sh",
        "-c",
        SUPERVISOR_SCRIPT,
        "chorus-main",
        lifetime_s,
    ]
    .map(String::from)
    .to_vec()
}

impl Container {
    /// Attaches to the supervisor's stdin and stdout; called before the container starts (the
    /// Engine holds the output until then), and the sandbox lives only as long as this
    /// attachment does.
    pub(super) async fn attach_supervisor(&self) -> SandboxResult<()> {
        let options = AttachContainerOptionsBuilder::new()
            .stream(true)
            .stdin(true)
            .stdout(true)
            .build();
        let attached = self
            .docker
            .attach_container(&self.name, Some(options))
            .await
            .map_err(|e| self.exec_error("attach to the supervisor", e))?;
        *self.supervisor.lock().await = Some(Supervisor {
            input: attached.input,
            output: attached.output,
            armings: 0,
            partial: Vec::new(),
        });
        Ok(())
    }

    /// Arms the sandbox's end `after` from now (rounded up to whole seconds), replacing the
    /// end armed before.
    pub(super) async fn end_after(&self, after: Duration) -> SandboxResult<()> {
        let secs = after
            .as_secs()
            .saturating_add(u64::from(after.subsec_nanos() > 0))
            .max(1);
        let mut held = self.supervisor.lock().await;
        let Some(supervisor) = held.as_mut() else {
            return Err(SandboxError::new(
                ErrorCategory::Unsupported,
                format!(
                    "sandbox {} has no supervisor to end it (it runs without an init, or its \
                     policy has no exec wrapper, so its image may lack a shell)",
                    self.name
                ),
            ));
        };
        let said = tokio::time::timeout(ARM_BOUND, supervisor.arm(secs))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer in {ARM_BOUND:?} (is the sandbox still running?)"
                ))
            });
        said.map_err(|why| {
            SandboxError::new(
                ErrorCategory::Exec,
                format!("arming the end of sandbox {}: {why}", self.name),
            )
        })
    }
}

impl Supervisor {
    /// Writes `end SEQ SECS` and reads lines until its own `armed SEQ`.
    async fn arm(&mut self, secs: u64) -> Result<(), String> {
        self.armings += 1;
        let seq = self.armings;
        self.input
            .write_all(format!("end {seq} {secs}\n").as_bytes())
            .await
            .map_err(|e| format!("the supervisor's stdin is gone: {e}"))?;
        self.input
            .flush()
            .await
            .map_err(|e| format!("the supervisor's stdin is gone: {e}"))?;
        let want = format!("armed {seq}");
        loop {
            let message = match self.output.next().await {
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => message,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("reading the supervisor: {e}")),
                None => return Err("the supervisor ended".into()),
            };
            // Lines after ours in the same chunk are answers to nothing: one arming at a time.
            for byte in message {
                if byte != b'\n' {
                    // Bounded: the supervisor prints short lines only.
                    if self.partial.len() < 256 {
                        self.partial.push(byte);
                    }
                    continue;
                }
                let ours = self.partial == want.as_bytes();
                self.partial.clear();
                if ours {
                    return Ok(());
                }
            }
        }
    }
}
