//! A sandbox made ready for another run ([`ExecutionSandbox::reset`](crate::sandbox)): every
//! process of the commands' user killed, every place that user can write emptied and given its
//! first mode back, then checked — and "clean" said only when the check found nothing. What the
//! check cannot vouch for makes the reset fail, and the caller removes the sandbox instead.
//!
//! What a run can leave in a sandbox, and how each is undone or refused:
//! - processes: killed (the commands' user's only; the supervisor's watchdog and main process
//!   are another uid, which the next arming deals with), then none may be left but zombies;
//! - files: the root filesystem is read-only (a policy where it is not is refused), so only the
//!   tmpfs mounts, the workspace and `/dev/shm` can hold any; each is emptied, its root's mode
//!   set back where the commands' user owns it, and checked empty with that mode;
//! - System V IPC objects and POSIX message queues (the sandbox's IPC namespace is its own, but
//!   lives as long as it does): any left makes the reset fail;
//! - environment: every exec gets its own environment from the node; nothing a command does
//!   changes the next exec's (a file that a shell would read is in an emptied place).
//!
//! Left unchecked, and so why reuse is only between runs of one submitter and shape: extended
//! attributes on the writable roots themselves, and the memory cgroup's peak (a reused
//! sandbox's peak is its whole life's).

use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::ExecRequest;

use super::container::Container;

/// `$1`: the commands' uid; then `DIR:MODE` for each place to empty (MODE in octal, `-` to
/// leave the root's mode alone). Calls `refuse WHY` with the first thing it could not undo, and
/// goes on past its end only when everything is clean.
/// Only shell builtins run while processes are checked (a fork of this shell would be one of
/// the user's processes itself) and while places are checked empty (a fork that fails must not
/// read as "nothing there"); the mode check's `stat` fails closed. It runs in this shell, never
/// a subshell (whose processes it would count, and kill).
const RESET_CORE: &str = r#"self=$$; me=$1; shift
alive() {
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] && continue
    [ "$p" = 1 ] && continue
    u=; s=
    while read -r k v rest; do
      case "$k" in State:) s=$v;; Uid:) u=$v; break;; esac
    done 2>/dev/null < "$d/status"
    [ "$u" = "$me" ] || continue
    case "$s" in Z|X) continue;; esac
    [ "$1" = kill ] && kill -9 "$p" 2>/dev/null
    n=$((n+1))
  done
  [ "$n" -eq 0 ]
}
any() {
  for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    { [ -e "$f" ] || [ -L "$f" ]; } && return 0
  done
  return 1
}
round=0
until alive kill; do
  round=$((round+1))
  [ $round -ge 20 ] && refuse "processes survive 20 rounds of kills"
done
for spec in "$@"; do
  dir=${spec%:*}; mode=${spec##*:}
  [ -d "$dir" ] || continue
  if any "$dir"; then
    chmod -R u+rwX "$dir" 2>/dev/null
    rm -rf "$dir"/* "$dir"/.[!.]* "$dir"/..?* 2>/dev/null
  fi
  [ "$mode" = - ] || chmod "$mode" "$dir" 2>/dev/null
  any "$dir" && refuse "files are left in $dir"
  if [ "$mode" != - ] && [ "$(stat -c %a "$dir")" != "${mode#0}" ]; then
    refuse "$dir has mode $(stat -c %a "$dir"), not $mode"
  fi
done
for f in /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem; do
  [ -r "$f" ] || continue
  lines=0
  while read -r line; do lines=$((lines+1)); done < "$f"
  [ $lines -le 1 ] || refuse "System V IPC objects are left ($f)"
done
any /dev/mqueue && refuse "POSIX message queues are left"
alive check || refuse "a process of the commands' user is left"
"#;

/// A reset on its own: prints `clean`, or what it could not undo.
fn reset_script() -> String {
    format!("refuse() {{ echo \"$1\"; exit 0; }}\n{RESET_CORE}echo clean")
}

/// A reset, then the command (see [`command_script`]): the first line of stdout is this
/// shell's pid once the sandbox is clean (the exec wrapper's pid line), or `reset: WHY` and
/// exit 125 without reading the command. The command, its environment and its working
/// directory come on stdin, so nothing of them is in the sandbox before the reset is done.
pub(super) fn reset_then_run_script() -> String {
    format!("refuse() {{ echo \"reset: $1\"; exit 125; }}\n{RESET_CORE}echo $$\n. /dev/stdin")
}

/// The first stdout line by which [`reset_then_run_script`] refuses.
pub(super) const REFUSED_PREFIX: &str = "reset: ";

/// Whether `request` can go to the sandbox as [`command_script`]: its stdin is free to carry
/// it, and every environment name is one the shell can export.
pub(super) fn can_run_after_reset(request: &ExecRequest) -> bool {
    let name = |k: &str| {
        let mut chars = k.chars();
        chars
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
    };
    request.stdin.is_none() && request.env.keys().all(|k| name(k))
}

/// The shell that [`reset_then_run_script`] reads once the sandbox is clean: the request's
/// environment and `marker` exported, its working directory entered (126, as the Engine's own
/// refusal, when it cannot be), and its argv exec'd with an empty stdin.
pub(super) fn command_script(request: &ExecRequest, working_dir: &str, marker: &str) -> String {
    let mut out = String::new();
    for (k, v) in &request.env {
        out.push_str(&format!("export {k}={}\n", quote(v)));
    }
    out.push_str(&format!("export {}\n", quote(marker)));
    out.push_str(&format!(
        "cd -- {} 2>/dev/null || exit 126\n",
        quote(working_dir)
    ));
    out.push_str("set --");
    for arg in &request.argv {
        out.push(' ');
        out.push_str(&quote(arg));
    }
    out.push_str("\nexec \"$@\" </dev/null\n");
    out
}

/// `s` as one single-quoted shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Container {
    /// The reset's arguments after the script: the commands' uid and each place to empty
    /// with the mode its root had when made (`None`: a root the commands' user does not own).
    /// Refused where a reset cannot vouch for the sandbox (see the module notes).
    pub(super) fn reset_args(
        &self,
        places: &[(String, Option<u32>)],
    ) -> SandboxResult<Vec<String>> {
        let refuse = |why: String| {
            Err(SandboxError::new(
                ErrorCategory::Unsupported,
                format!("sandbox {} cannot be reset: {why}", self.name),
            ))
        };
        if !self.policy.read_only_rootfs {
            return refuse("its root filesystem is writable".into());
        }
        let Some((uid, _)) = self.policy.numeric_user() else {
            return refuse("its commands' user is not numeric".into());
        };
        let supervisor = crate::sandbox::policy::SUPERVISOR_USER
            .split(':')
            .next()
            .unwrap_or_default();
        if uid == 0 || uid.to_string() == supervisor {
            return refuse(format!("its commands run as uid {uid}"));
        }
        let mut args = vec![uid.to_string()];
        for (dir, mode) in places {
            if !dir.starts_with('/') || dir.contains(':') || dir == "/" {
                return refuse(format!("{dir:?} is not a place it can empty"));
            }
            args.push(format!(
                "{dir}:{}",
                mode.map_or_else(|| "-".to_owned(), |m| format!("{m:o}"))
            ));
        }
        Ok(args)
    }

    /// Resets the sandbox for another run with an exec of its own (see the module notes).
    pub(super) async fn reset(&self, places: &[(String, Option<u32>)]) -> SandboxResult<()> {
        let mut argv: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            reset_script(),
            "chorus-reset".into(),
        ];
        argv.extend(self.reset_args(places)?);
        let out = self.helper(argv).await?;
        let said = String::from_utf8_lossy(&out);
        match said.trim() {
            "clean" => Ok(()),
            why => Err(SandboxError::not_clean(&self.name, why)),
        }
    }
}
