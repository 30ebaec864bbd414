//! devcluster's temporary directories: each names its owner (the devcluster's pid, in
//! [`OWNER_FILE`]), so a later run can remove the ones whose owner was killed (SIGKILL) before
//! it could clean up. A directory without an owner file (a `--keep` run's, which never names
//! one, or one still being set up) is never touched.

use std::path::{Path, PathBuf};

/// The prefix of every devcluster temporary directory, in the system's temporary directory.
pub(super) const PREFIX: &str = "chorus-devcluster-";
/// The file in a devcluster directory that holds its owner's pid.
pub(super) const OWNER_FILE: &str = "owner.pid";

/// Who owns a devcluster directory.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// No owner file (kept, or just being made): left alone.
    Unknown,
    /// A devcluster that is still running.
    Running(i32),
    /// A pid that no devcluster holds any more: the directory is stale.
    Gone(i32),
}

/// Writes this process's pid into `dir`.
pub(super) fn claim(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(OWNER_FILE), format!("{}\n", std::process::id()))
}

/// The owner of the devcluster directory `dir`; `running` says whether a pid is a devcluster
/// still running.
pub(super) fn owner(dir: &Path, running: impl Fn(i32) -> bool) -> Owner {
    let Ok(text) = std::fs::read_to_string(dir.join(OWNER_FILE)) else {
        return Owner::Unknown;
    };
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 0 && running(pid) => Owner::Running(pid),
        Ok(pid) if pid > 0 => Owner::Gone(pid),
        // A torn or foreign file: not ours to judge.
        _ => Owner::Unknown,
    }
}

/// The devcluster directories in `tmp` whose owner is gone, oldest name first.
pub(super) fn stale(tmp: &Path, running: impl Fn(i32) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
        .map(|e| e.path())
        .filter(|p| p.is_dir() && matches!(owner(p, &running), Owner::Gone(_)))
        .collect();
    dirs.sort();
    dirs
}

/// Whether `pid` is a running devcluster: the process exists and (where its command line can be
/// read) is a devcluster, so a pid reused by another program does not keep a stale directory.
pub(super) fn devcluster_running(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return false,
    }
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => String::from_utf8_lossy(&cmdline).contains("devcluster"),
        // Another user's process, or no /proc: assume it is one, and leave its directory be.
        Err(_) => true,
    }
}

/// Removes the stale devcluster directories in `tmp`; one message per directory found.
pub(super) fn clean(tmp: &Path) -> Vec<String> {
    stale(tmp, devcluster_running)
        .into_iter()
        .map(|dir| match std::fs::remove_dir_all(&dir) {
            Ok(()) => format!(
                "devcluster: removed {} (left by an earlier devcluster that was killed)",
                dir.display()
            ),
            Err(e) => format!(
                "devcluster: {} was left by an earlier devcluster that was killed, but cannot \
                 be removed: {e}",
                dir.display()
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with_owner(tmp: &Path, name: &str, owner: Option<&str>) -> PathBuf {
        let dir = tmp.join(name);
        std::fs::create_dir(&dir).unwrap();
        if let Some(text) = owner {
            std::fs::write(dir.join(OWNER_FILE), text).unwrap();
        }
        dir
    }

    #[test]
    fn only_directories_whose_owner_is_gone_are_stale() {
        let tmp = tempfile::tempdir().unwrap();
        let running = |pid: i32| pid == 100;
        let live = dir_with_owner(tmp.path(), "chorus-devcluster-live", Some("100\n"));
        let dead = dir_with_owner(tmp.path(), "chorus-devcluster-dead", Some("200\n"));
        let kept = dir_with_owner(tmp.path(), "chorus-devcluster-kept", None);
        let torn = dir_with_owner(tmp.path(), "chorus-devcluster-torn", Some("2"));
        std::fs::write(torn.join(OWNER_FILE), "").unwrap();
        let other = dir_with_owner(tmp.path(), "something-else", Some("300\n"));
        assert_eq!(owner(&live, running), Owner::Running(100));
        assert_eq!(owner(&dead, running), Owner::Gone(200));
        assert_eq!(owner(&kept, running), Owner::Unknown);
        assert_eq!(owner(&torn, running), Owner::Unknown);
        assert_eq!(owner(&other, running), Owner::Gone(300));
        // Only devcluster's own directories are considered.
        assert_eq!(stale(tmp.path(), running), vec![dead]);
    }

    #[test]
    fn a_claimed_directory_is_owned_by_this_process() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_with_owner(tmp.path(), "chorus-devcluster-mine", None);
        claim(&dir).unwrap();
        // The test binary's command line does not say devcluster, so ask only for the pid.
        let me = std::process::id() as i32;
        assert_eq!(owner(&dir, |pid| pid == me), Owner::Running(me));
        assert_eq!(owner(&dir, |_| false), Owner::Gone(me));
    }

    #[test]
    fn an_exited_process_runs_no_devcluster() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!devcluster_running(pid));
    }
}
