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

use super::container::Container;

/// `$1`: the commands' uid; then `DIR:MODE` for each place to empty (MODE in octal, `-` to
/// leave the root's mode alone). Prints `clean`, or the first thing it could not undo.
/// Only shell builtins run while processes are checked (a fork of this shell would be one of
/// the user's processes itself) and while places are checked empty (a fork that fails must not
/// read as "nothing there"); the mode check's `stat` fails closed.
const RESET_SCRIPT: &str = r#"self=$$; me=$1; shift
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
round=0
until alive kill; do
  round=$((round+1))
  [ $round -ge 20 ] && { echo "processes survive 20 rounds of kills"; exit 0; }
done
for spec in "$@"; do
  dir=${spec%:*}; mode=${spec##*:}
  [ -d "$dir" ] || continue
  chmod -R u+rwX "$dir" 2>/dev/null
  rm -rf "$dir"/* "$dir"/.[!.]* "$dir"/..?* 2>/dev/null
  [ "$mode" = - ] || chmod "$mode" "$dir" 2>/dev/null
  for f in "$dir"/* "$dir"/.[!.]* "$dir"/..?*; do
    { [ -e "$f" ] || [ -L "$f" ]; } && { echo "files are left in $dir"; exit 0; }
  done
  if [ "$mode" != - ] && [ "$(stat -c %a "$dir")" != "${mode#0}" ]; then
    echo "$dir has mode $(stat -c %a "$dir"), not $mode"; exit 0
  fi
done
for f in /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem; do
  [ -r "$f" ] || continue
  lines=0
  while read -r line; do lines=$((lines+1)); done < "$f"
  [ $lines -le 1 ] || { echo "System V IPC objects are left ($f)"; exit 0; }
done
for f in /dev/mqueue/* /dev/mqueue/.[!.]*; do
  { [ -e "$f" ] || [ -L "$f" ]; } && { echo "POSIX message queues are left"; exit 0; }
done
alive check || { echo "a process of the commands' user is left"; exit 0; }
echo clean"#;

impl Container {
    /// Resets the sandbox for another run (see the module notes). `places`: each writable place
    /// and the mode its root had when made (`None`: a root the commands' user does not own).
    pub(super) async fn reset(&self, places: &[(String, Option<u32>)]) -> SandboxResult<()> {
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
        let mut argv: Vec<String> = ["sh", "-c", RESET_SCRIPT, "chorus-reset"]
            .map(String::from)
            .to_vec();
        argv.push(uid.to_string());
        for (dir, mode) in places {
            if !dir.starts_with('/') || dir.contains(':') || dir == "/" {
                return refuse(format!("{dir:?} is not a place it can empty"));
            }
            argv.push(format!(
                "{dir}:{}",
                mode.map_or_else(|| "-".to_owned(), |m| format!("{m:o}"))
            ));
        }
        let out = self.helper(argv).await?;
        let said = String::from_utf8_lossy(&out);
        match said.trim() {
            "clean" => Ok(()),
            why => Err(SandboxError::new(
                ErrorCategory::Exec,
                format!("sandbox {} was not left clean: {why}", self.name),
            )),
        }
    }
}
