//! What one task may ask of a worker at most (issue 33): the node's `[tasks]` ceilings on a
//! spec's memory, CPUs, processes and timeout. A task author picks its limits; the worker —
//! whose host they would exhaust — decides how far it goes along. Checked at submit (the
//! submitting node's ceilings, so a spec no node of a uniformly configured cluster would run is
//! refused at once, naming the ceiling) and again by the worker before it makes a sandbox (its
//! own, which are the ones that protect its host).

use chorus_core::{TaskCapacity, TaskSpec};

use super::super::SandboxPolicy;

/// Ceilings on one task's limits; `None`: no ceiling of its own (the spec's bounds hold).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ceilings {
    /// Memory, MiB (`[tasks] max_memory_mb`).
    pub memory_mb: Option<u32>,
    /// CPU, millicores (`[tasks] max_cpu_millis`).
    pub cpu_millis: Option<u32>,
    /// Processes (`[tasks] max_pids`).
    pub pids: Option<u32>,
    /// Timeout, ms (`[tasks] max_timeout_ms`).
    pub timeout_ms: Option<u64>,
}

impl Ceilings {
    /// The first limit of `spec` above its ceiling, said with both numbers and the key that
    /// sets the ceiling. A spec's 0 (the worker's default) is never above.
    pub fn check(&self, spec: &TaskSpec) -> Result<(), String> {
        let over =
            |what: &str, asked: u64, ceiling: Option<u64>, unit: &str, key: &str| match ceiling {
                Some(c) if asked > c => Err(format!(
                    "the task asks for {what} {asked}{unit}, above this node's ceiling of \
                     {c}{unit} (`[tasks] {key}`)"
                )),
                _ => Ok(()),
            };
        let mb = |v: Option<u32>| v.map(u64::from);
        over(
            "memory",
            spec.memory_mb.into(),
            mb(self.memory_mb),
            " MiB",
            "max_memory_mb",
        )?;
        over(
            "CPU",
            spec.cpu_millis.into(),
            mb(self.cpu_millis),
            " millicores",
            "max_cpu_millis",
        )?;
        over("processes", spec.pids.into(), mb(self.pids), "", "max_pids")?;
        over(
            "a timeout of",
            spec.timeout_ms,
            self.timeout_ms,
            " ms",
            "max_timeout_ms",
        )
    }
}

impl Ceilings {
    /// What a worker with these ceilings offers its tasks, for the admin's placement (issue 33):
    /// each ceiling as the most one task may ask and as the total for all its tasks together
    /// (the node's ceilings are its budget), and the limits of `base` — what a task naming none
    /// gets — as the defaults such a task is counted at. A ceiling not set says nothing: that
    /// resource is not counted.
    pub fn capacity(&self, base: &SandboxPolicy) -> TaskCapacity {
        const MIB: i64 = 1024 * 1024;
        let clamp = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        let memory = self.memory_mb.unwrap_or(0);
        let cpu = self.cpu_millis.unwrap_or(0);
        TaskCapacity {
            memory_mb: memory,
            cpu_millis: cpu,
            task_memory_mb: memory,
            task_cpu_millis: cpu,
            default_memory_mb: base.limits.memory_bytes.map_or(0, |b| clamp(b / MIB)),
            default_cpu_millis: base.limits.nano_cpus.map_or(0, |n| clamp(n / 1_000_000)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_above_a_ceiling_is_refused_naming_it_and_zeros_pass() {
        let ceilings = Ceilings {
            memory_mb: Some(4_096),
            cpu_millis: Some(2_000),
            pids: Some(1_024),
            timeout_ms: Some(3_600_000),
        };
        let spec = |memory_mb, cpu_millis, pids, timeout_ms| TaskSpec {
            image: "i".into(),
            command: vec!["true".into()],
            memory_mb,
            cpu_millis,
            pids,
            timeout_ms,
            ..TaskSpec::default()
        };
        ceilings.check(&spec(0, 0, 0, 1)).unwrap();
        ceilings
            .check(&spec(4_096, 2_000, 1_024, 3_600_000))
            .unwrap();
        for (s, key) in [
            (spec(1_048_576, 0, 0, 1), "max_memory_mb"),
            (spec(0, 2_001, 0, 1), "max_cpu_millis"),
            (spec(0, 0, 1_048_576, 1), "max_pids"),
            (spec(0, 0, 0, 3_600_001), "max_timeout_ms"),
        ] {
            let why = ceilings.check(&s).unwrap_err();
            assert!(why.contains(key), "{why}");
        }
        Ceilings::default()
            .check(&spec(1_048_576, 64_000, 1_048_576, 1))
            .unwrap();
    }

    /// A worker offers its ceilings as its totals and as the most one task may ask, and counts a
    /// task that names no limit at the base policy's (512 MiB, one CPU by default).
    #[test]
    fn a_worker_offers_its_ceilings_and_counts_defaults_at_the_base_policy() {
        let ceilings = Ceilings {
            memory_mb: Some(4_096),
            cpu_millis: Some(2_000),
            ..Ceilings::default()
        };
        let c = ceilings.capacity(&SandboxPolicy::default());
        assert_eq!(
            c,
            TaskCapacity {
                memory_mb: 4_096,
                cpu_millis: 2_000,
                task_memory_mb: 4_096,
                task_cpu_millis: 2_000,
                default_memory_mb: 512,
                default_cpu_millis: 1_000,
            }
        );
        let none = Ceilings::default().capacity(&SandboxPolicy::default());
        assert_eq!((none.memory_mb, none.cpu_millis), (0, 0));
    }
}
