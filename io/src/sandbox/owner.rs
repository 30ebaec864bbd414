//! Who owns a sandbox, and whether that owner is still alive: the facts `reap` judges by.
//!
//! An owner is a process on this host, named by the host's boot id, its pid and its start time
//! (pids are reused; a pid with another start time is another process). These go into labels
//! on every sandbox, so any later process on the host can tell a live owner's sandbox (left
//! alone) from one whose owner is gone (reaped), without a shared registry.

use std::path::Path;

/// The identity of a sandbox's owning process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `/proc/sys/kernel/random/boot_id` of the host the owner runs on.
    pub boot_id: String,
    /// The owner's pid (in the host's pid namespace as this process sees it).
    pub pid: u32,
    /// The owner's start time, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
}

impl Owner {
    /// This process.
    pub fn this_process() -> Option<Self> {
        Self::of_process(std::process::id())
    }

    /// Process `pid` on this host, when it exists.
    pub fn of_process(pid: u32) -> Option<Self> {
        Some(Owner {
            boot_id: boot_id()?,
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// The owner label's value: `<pid>.<start_ticks>`.
    pub fn label(&self) -> String {
        format!("{}.{}", self.pid, self.start_ticks)
    }

    /// Parses a label written by [`label`](Self::label) plus the boot id label.
    pub fn from_labels(owner: &str, boot_id: &str) -> Option<Self> {
        let (pid, start) = owner.split_once('.')?;
        Some(Owner {
            boot_id: boot_id.to_string(),
            pid: pid.parse().ok()?,
            start_ticks: start.parse().ok()?,
        })
    }

    /// Whether the owner still runs: same boot, and its pid still names a process that started
    /// at the same tick. A different boot id means the host rebooted since, so the owner is gone.
    pub fn is_alive(&self) -> bool {
        boot_id().as_deref() == Some(self.boot_id.as_str())
            && start_ticks(self.pid) == Some(self.start_ticks)
    }
}

/// This host's boot id.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The start time of process `pid` in clock ticks since boot, when it exists and is not a zombie.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces; fields after it are
    // counted from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); field 22 is the start time.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_round_trips_through_labels() {
        let me = Owner::this_process().expect("a Linux /proc");
        assert!(me.is_alive());
        let back = Owner::from_labels(&me.label(), &me.boot_id).unwrap();
        assert_eq!(back, me);
    }

    #[test]
    fn a_dead_process_or_another_boot_is_not_alive() {
        // The child blocks on its stdin until it is read: one that exits at once can be gone
        // from /proc before `of_process` looks.
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let owner = Owner::of_process(child.id()).expect("a live child");
        assert!(owner.is_alive());
        drop(child.stdin.take());
        child.wait().unwrap();
        // Reaped: the pid names no process now (or, rarely, a new one with another start time).
        assert!(!owner.is_alive());
        let mut me = Owner::this_process().unwrap();
        me.boot_id = "another-boot".into();
        assert!(!me.is_alive());
        assert!(Owner::from_labels("garbage", "b").is_none());
    }
}
