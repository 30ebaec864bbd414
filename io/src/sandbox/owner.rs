//! Who owns a sandbox, and whether that owner is still alive: the facts `reap` judges by.
//!
//! An owner is a process on this host, named by the host's boot id, its pid and its start time
//! (pids are reused; a pid with another start time is another process). These go into labels
//! on every sandbox, so any later process on the host can tell a live owner's sandbox (left
//! alone) from one whose owner is gone (reaped), without a shared registry.
//!
//! Liveness is read from `/proc`, which shows only the reader's pid namespace. So an owner also
//! names its pid namespace, and a reaper in another one says it cannot tell rather than
//! "gone": every node on a host reaps every owner's stale sandboxes, and a node in a container
//! sharing the host's Docker socket must not take the host's live owners for dead.

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
    /// The inode of the owner's pid namespace (`/proc/<pid>/ns/pid`), when it could be read;
    /// `None` in labels made before it was recorded.
    pub pid_ns: Option<u64>,
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
            pid_ns: pid_namespace(&pid.to_string()),
        })
    }

    /// The owner label's value: `<pid>.<start_ticks>`.
    pub fn label(&self) -> String {
        format!("{}.{}", self.pid, self.start_ticks)
    }

    /// The pid namespace label's value, when known.
    pub fn pid_ns_label(&self) -> Option<String> {
        self.pid_ns.map(|ns| ns.to_string())
    }

    /// Parses a label written by [`label`](Self::label) plus the boot id label (the pid
    /// namespace is left unknown; see [`with_pid_ns_label`](Self::with_pid_ns_label)).
    pub fn from_labels(owner: &str, boot_id: &str) -> Option<Self> {
        let (pid, start) = owner.split_once('.')?;
        Some(Owner {
            boot_id: boot_id.to_string(),
            pid: pid.parse().ok()?,
            start_ticks: start.parse().ok()?,
            pid_ns: None,
        })
    }

    /// The same owner in the pid namespace a label names; a label that does not parse is
    /// ignored (the namespace stays unknown, as for labels made before it was recorded).
    pub fn with_pid_ns_label(mut self, label: Option<&str>) -> Self {
        self.pid_ns = label.and_then(|l| l.parse().ok());
        self
    }

    /// Whether the owner still runs: same boot, and its pid still names a process that started
    /// at the same tick. A different boot id means the host rebooted since, so the owner is gone.
    pub fn is_alive(&self) -> bool {
        boot_id().as_deref() == Some(self.boot_id.as_str())
            && start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// Whether the owner is known to be gone, as this process can tell: another boot, or no
    /// process with its pid and start time — judged only in the owner's own pid namespace.
    /// An owner in another pid namespace is not judged (`false`): this `/proc` does not show it.
    pub fn is_gone(&self) -> bool {
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return true;
        }
        let judgeable = match self.pid_ns {
            Some(ns) => pid_namespace("self") == Some(ns),
            None => true,
        };
        judgeable && start_ticks(self.pid) != Some(self.start_ticks)
    }
}

/// The inode of the pid namespace of process `pid` (`self` for this one), from the
/// `pid:[N]` link `/proc/<pid>/ns/pid` points to.
fn pid_namespace(pid: &str) -> Option<u64> {
    let link = std::fs::read_link(Path::new("/proc").join(pid).join("ns/pid")).ok()?;
    link.to_str()?
        .strip_prefix("pid:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
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
        let back = Owner::from_labels(&me.label(), &me.boot_id)
            .unwrap()
            .with_pid_ns_label(me.pid_ns_label().as_deref());
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

    #[test]
    fn an_owner_in_another_pid_namespace_is_not_judged_from_here() {
        let me = Owner::this_process().unwrap();
        assert!(me.pid_ns.is_some(), "a Linux /proc shows the namespace");
        assert!(!me.is_gone());
        let back = Owner::from_labels(&me.label(), &me.boot_id)
            .unwrap()
            .with_pid_ns_label(me.pid_ns_label().as_deref());
        assert_eq!(back, me);
        // A pid that names no process here, in this namespace: gone; in another: not judged.
        let absent = Owner {
            pid: u32::MAX,
            ..me.clone()
        };
        assert!(absent.is_gone());
        let elsewhere = Owner {
            pid_ns: me.pid_ns.map(|ns| ns + 1),
            ..absent.clone()
        };
        assert!(!elsewhere.is_gone());
        // Another boot is gone wherever it ran.
        let rebooted = Owner {
            boot_id: "another-boot".into(),
            ..elsewhere
        };
        assert!(rebooted.is_gone());
        // Labels from before the namespace was recorded: judged here, as before.
        assert!(absent.with_pid_ns_label(None).is_gone());
    }
}
