//! A container's memory cgroup read from the host: its OOM-kill counter, found without running
//! anything inside the container. A container whose memory stays full (a filled tmpfs, thousands
//! of processes) cannot run a check of its own: the check is OOM-killed too.
//!
//! Where the cgroup is depends on the Engine's cgroup driver and version (`docker info`):
//! cgroupfs puts a container at `docker/<id>`, systemd at `system.slice/docker-<id>.scope`;
//! cgroup v1 has the memory controller's own hierarchy (`memory/…`, counter in
//! `memory.oom_control`), v2 one hierarchy (counter in `memory.events`). The reported layout's
//! place is tried first, then the others (a daemon whose report and reality differ).

use std::path::{Path, PathBuf};

/// Where the host's cgroup hierarchies are mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// How the Engine lays out its containers' cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The systemd cgroup driver (else cgroupfs).
    pub systemd: bool,
    /// cgroup v2 (else v1).
    pub v2: bool,
}

impl CgroupLayout {
    /// The layout `docker info` reports (`CgroupDriver`, `CgroupVersion`); `None` for one it
    /// does not name.
    pub fn from_info(driver: Option<&str>, version: Option<&str>) -> Option<Self> {
        let systemd = match driver? {
            "cgroupfs" => false,
            "systemd" => true,
            _ => return None,
        };
        let v2 = match version? {
            "1" => false,
            "2" => true,
            _ => return None,
        };
        Some(CgroupLayout { systemd, v2 })
    }

    /// The counter file of container `id` under `root` in this layout.
    fn counter(self, root: &Path, id: &str) -> PathBuf {
        let dir = if self.systemd {
            format!("system.slice/docker-{id}.scope")
        } else {
            format!("docker/{id}")
        };
        if self.v2 {
            root.join(dir).join("memory.events")
        } else {
            root.join("memory").join(dir).join("memory.oom_control")
        }
    }
}

/// The places container `id`'s counter file may be, `layout`'s first.
pub fn counter_candidates(root: &Path, layout: Option<CgroupLayout>, id: &str) -> Vec<PathBuf> {
    let all = [false, true].into_iter().flat_map(|v2| {
        [false, true]
            .into_iter()
            .map(move |systemd| CgroupLayout { systemd, v2 })
    });
    layout
        .into_iter()
        .chain(all.filter(|l| Some(*l) != layout))
        .map(|l| l.counter(root, id))
        .collect()
}

/// Container `id`'s counter file under `root`, if one of the candidate places has it. A
/// container id is hex; anything else (a name a label could carry) is refused, so no path is
/// built from it.
pub fn find_counter(root: &Path, layout: Option<CgroupLayout>, id: &str) -> Option<PathBuf> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    counter_candidates(root, layout, id)
        .into_iter()
        .find(|p| p.is_file())
}

/// The `oom_kill` count in a v1 `memory.oom_control` or v2 `memory.events` text.
pub fn parse_oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// The count in the counter file at `path`, if it can be read.
pub fn read_oom_kills(path: &Path) -> Option<u64> {
    parse_oom_kills(&std::fs::read_to_string(path).ok()?)
}

/// The cgroup's totals next to its OOM counter at `counter` (as [`find_counter`] found it):
/// CPU time (v2 `cpu.stat` `usage_usec`, v1 `cpuacct.usage` in the `cpuacct` hierarchy) and
/// the memory peak (v2 `memory.peak`, or `memory.current` on kernels without it; v1
/// `memory.max_usage_in_bytes`). `None` when the CPU time cannot be read.
pub fn read_totals(root: &Path, counter: &Path) -> Option<crate::sandbox::UsageTotals> {
    let dir = counter.parent()?;
    let read = |p: PathBuf| std::fs::read_to_string(p).ok();
    let number = |text: Option<String>| text.and_then(|t| t.trim().parse::<u64>().ok());
    if counter.file_name()? == "memory.events" {
        let cpu_us = read(dir.join("cpu.stat"))?
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|n| n.trim().parse::<u64>().ok())?;
        let peak = number(read(dir.join("memory.peak")))
            .or_else(|| number(read(dir.join("memory.current"))));
        return Some(crate::sandbox::UsageTotals {
            cpu_ns: cpu_us.saturating_mul(1_000),
            memory_peak_bytes: peak.unwrap_or(0),
        });
    }
    let rel = dir.strip_prefix(root.join("memory")).ok()?;
    let cpu_ns = number(read(root.join("cpuacct").join(rel).join("cpuacct.usage")))?;
    Some(crate::sandbox::UsageTotals {
        cpu_ns,
        memory_peak_bytes: number(read(dir.join("memory.max_usage_in_bytes"))).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "51d8a2e82012549628fed7b593effb95d48484c4c5cff8275110c5b0888fa5fb";

    #[test]
    fn totals_are_read_beside_the_counter_in_either_version() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        // v2: one directory.
        let v2 = root.join(format!("system.slice/docker-{ID}.scope"));
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.events"), "oom 0\noom_kill 0\n").unwrap();
        std::fs::write(v2.join("cpu.stat"), "usage_usec 2500\nuser_usec 2000\n").unwrap();
        std::fs::write(v2.join("memory.current"), "4096\n").unwrap();
        let counter = v2.join("memory.events");
        let t = read_totals(root, &counter).unwrap();
        assert_eq!((t.cpu_ns, t.memory_peak_bytes), (2_500_000, 4096));
        // The peak wins over the current use where the kernel keeps it.
        std::fs::write(v2.join("memory.peak"), "8192\n").unwrap();
        assert_eq!(read_totals(root, &counter).unwrap().memory_peak_bytes, 8192);
        // No CPU time: nothing (the clean-up inside reads it instead).
        std::fs::remove_file(v2.join("cpu.stat")).unwrap();
        assert_eq!(read_totals(root, &counter), None);

        // v1: the memory and cpuacct hierarchies apart.
        let mem = root.join(format!("memory/docker/{ID}"));
        let cpu = root.join(format!("cpuacct/docker/{ID}"));
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(mem.join("memory.oom_control"), "oom_kill 0\n").unwrap();
        std::fs::write(mem.join("memory.max_usage_in_bytes"), "65536\n").unwrap();
        std::fs::write(cpu.join("cpuacct.usage"), "123456789\n").unwrap();
        let t = read_totals(root, &mem.join("memory.oom_control")).unwrap();
        assert_eq!((t.cpu_ns, t.memory_peak_bytes), (123_456_789, 65_536));
        // A counter outside the memory hierarchy is not guessed at.
        assert_eq!(
            read_totals(root, &root.join("elsewhere/memory.oom_control")),
            None
        );
    }

    #[test]
    fn the_reported_layout_is_tried_first_then_the_others() {
        let root = Path::new("/sys/fs/cgroup");
        let v1 = CgroupLayout::from_info(Some("cgroupfs"), Some("1"));
        let places = counter_candidates(root, v1, ID);
        assert_eq!(places.len(), 4);
        assert_eq!(
            places[0],
            root.join(format!("memory/docker/{ID}/memory.oom_control"))
        );
        let v2 = CgroupLayout::from_info(Some("systemd"), Some("2"));
        let places = counter_candidates(root, v2, ID);
        assert_eq!(
            places[0],
            root.join(format!("system.slice/docker-{ID}.scope/memory.events"))
        );
        assert!(places.contains(&root.join(format!("docker/{ID}/memory.events"))));
        assert!(places.contains(&root.join(format!(
            "memory/system.slice/docker-{ID}.scope/memory.oom_control"
        ))));
        assert_eq!(CgroupLayout::from_info(Some("other"), Some("1")), None);
        assert_eq!(counter_candidates(root, None, ID).len(), 4);
    }

    #[test]
    fn the_counter_is_found_and_read_from_either_version() {
        let root = tempfile::tempdir().unwrap();
        let v2 = root.path().join(format!("docker/{ID}"));
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(
            v2.join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        // Reported as v1, found where v2 keeps it.
        let layout = CgroupLayout::from_info(Some("cgroupfs"), Some("1"));
        let found = find_counter(root.path(), layout, ID).unwrap();
        assert_eq!(read_oom_kills(&found), Some(2));
        assert_eq!(
            parse_oom_kills("oom_kill_disable 0\nunder_oom 1\noom_kill 7\n"),
            Some(7)
        );
        assert_eq!(parse_oom_kills("oom_kill_disable 0\n"), None);
        // Not a container id: no path is made from it.
        assert_eq!(find_counter(root.path(), layout, "../../etc"), None);
        assert_eq!(find_counter(root.path(), layout, "abc"), None, "absent");
    }
}
