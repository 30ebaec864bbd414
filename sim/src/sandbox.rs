//! The simulated sandbox, shared by both engines: what a run of a task does, drawn from the
//! seed per (task, attempt) so the discrete-event and the turmoil engine agree on every run.
//!
//! A run ends by itself after its drawn duration — succeeded (exit 0), failed (a non-zero
//! exit), killed by the OOM killer (after part of its duration), or killed at the spec's
//! timeout — or fails: retryably (`SandboxFailed { retryable: true }`, soon after its start)
//! or for good. A task drawn to hang hangs on every run: it never ends by itself, only when
//! stopped (`StopSandbox`, which ends it at once with SIGTERM) or when its node crashes (the
//! run dies with the node and no event reaches the old incarnation; the core's restart counts
//! it as a retryable failure). The engines keep the runs; this module only decides them.

use chorus_core::rng::{below, node_rng};
use chorus_core::{Event, NodeId, SandboxExit, TaskId, TaskSpec};
use rand_chacha::ChaCha8Rng;

use crate::scenario::TaskWorkload;

/// The signal a stopped run reports (SIGTERM).
pub const STOP_SIGNAL: i32 = 15;

/// The signal the OOM killer and the timeout send (SIGKILL).
pub const KILL_SIGNAL: i32 = 9;

/// How a run ends by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Succeeded,
    /// A non-zero exit code.
    Failed(i32),
    /// The OOM killer ended it.
    OutOfMemory,
    /// It ran into the spec's timeout and was killed there.
    TimedOut,
    /// The sandbox failed; another try may succeed.
    Retryable,
    /// The sandbox cannot run it (a missing image, a bad mount).
    Error,
    /// It never ends by itself.
    Hang,
}

/// One run as drawn: how it ends and after how long (`None`: it hangs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// How it ends.
    pub outcome: Outcome,
    /// When it ends, in ms after its start (`None` for a hang).
    pub after_ms: Option<u64>,
}

/// Decides runs for one simulation.
#[derive(Clone, Debug)]
pub struct SandboxModel {
    seed: u64,
    workload: TaskWorkload,
}

impl SandboxModel {
    /// The model of a run with `seed` and `workload`.
    pub fn new(seed: u64, workload: &TaskWorkload) -> SandboxModel {
        SandboxModel {
            seed,
            workload: workload.clone(),
        }
    }

    fn rng(&self, salt: u64, what: &str) -> ChaCha8Rng {
        node_rng(self.seed ^ salt, &NodeId::from(what.to_owned()))
    }

    /// Whether every run of `task` hangs.
    pub fn hangs(&self, task: &TaskId) -> bool {
        let mut rng = self.rng(0x4a46_0000_5a4d_0001, &task.to_string());
        below(&mut rng, 1_000_000) < u64::from(self.workload.hang_ppm)
    }

    /// What run `attempt` of `task` does.
    pub fn plan(&self, task: &TaskId, attempt: u32, spec: &TaskSpec) -> Plan {
        if self.hangs(task) {
            return Plan {
                outcome: Outcome::Hang,
                after_ms: None,
            };
        }
        let w = &self.workload;
        let mut rng = self.rng(0x5a4d_b0c5_0000_0002, &format!("{task}#{attempt}"));
        let duration = w.duration_min + below(&mut rng, w.duration_max - w.duration_min + 1);
        let roll = below(&mut rng, 1_000_000);
        let mut edge = 0u64;
        let mut next = |ppm: u32| {
            edge += u64::from(ppm);
            roll < edge
        };
        let timeout = spec.timeout_ms;
        let (outcome, after) = if next(w.fail_ppm) {
            let code = 1 + below(&mut rng, 125) as i32;
            (Outcome::Failed(code), duration)
        } else if next(w.oom_ppm) {
            (Outcome::OutOfMemory, (duration / 2).max(1))
        } else if next(w.timeout_ppm) {
            (Outcome::TimedOut, timeout)
        } else if next(w.retryable_ppm) {
            (Outcome::Retryable, (duration / 10).max(1))
        } else if next(w.error_ppm) {
            (Outcome::Error, (duration / 10).max(1))
        } else {
            (Outcome::Succeeded, duration)
        };
        // A live sandbox runs no command: it is made (or fails to be) and then lives until it
        // is closed, or expires at its lifetime.
        let (outcome, after) = match outcome {
            Outcome::Retryable | Outcome::Error => (outcome, after),
            _ if spec.live => (Outcome::TimedOut, timeout),
            _ => (outcome, after),
        };
        // Whatever runs longer than the timeout is killed at it.
        let (outcome, after) = match outcome {
            Outcome::Succeeded | Outcome::Failed(_) | Outcome::OutOfMemory if after > timeout => {
                (Outcome::TimedOut, timeout)
            }
            o => (o, after.min(timeout)),
        };
        Plan {
            outcome,
            after_ms: Some(after),
        }
    }

    /// The event that reports a run's own end (`plan.after_ms` after its start).
    pub fn end_event(&self, task: &TaskId, attempt: u32, plan: &Plan) -> Event {
        let ran = plan.after_ms.unwrap_or(0);
        let exit =
            |exit_code: Option<i32>, signal: Option<i32>, oom, timed_out| Event::SandboxExited {
                task: task.clone(),
                attempt,
                exit: SandboxExit {
                    exit_code,
                    signal,
                    oom,
                    timed_out,
                    duration_ms: ran,
                    stdout: format!("{task} attempt {attempt}\n"),
                    ..SandboxExit::default()
                },
            };
        let failed = |error: &str, retryable| Event::SandboxFailed {
            task: task.clone(),
            attempt,
            error: error.to_owned(),
            retryable,
        };
        match plan.outcome {
            Outcome::Succeeded => exit(Some(0), None, false, false),
            Outcome::Failed(code) => exit(Some(code), None, false, false),
            Outcome::OutOfMemory => exit(Some(128 + KILL_SIGNAL), Some(KILL_SIGNAL), true, false),
            Outcome::TimedOut => exit(None, Some(KILL_SIGNAL), false, true),
            Outcome::Retryable => failed("sim: the sandbox could not start (retryable)", true),
            Outcome::Error | Outcome::Hang => failed("sim: the image does not exist", false),
        }
    }

    /// The event that reports a run stopped by `StopSandbox` after `ran_ms`.
    pub fn stopped_event(task: &TaskId, attempt: u32, ran_ms: u64) -> Event {
        Event::SandboxExited {
            task: task.clone(),
            attempt,
            exit: SandboxExit {
                signal: Some(STOP_SIGNAL),
                duration_ms: ran_ms,
                ..SandboxExit::default()
            },
        }
    }
}

/// The capability a task of `unplaceable_ppm` requires: no simulated node offers it.
pub const NOWHERE: &str = "sim-nowhere";

/// The spec every simulated task carries.
pub fn task_spec(workload: &TaskWorkload) -> TaskSpec {
    TaskSpec {
        image: "chorus/sandbox:latest".into(),
        command: vec!["sim-task".into()],
        timeout_ms: workload.timeout,
        ..TaskSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(seq: u64) -> TaskId {
        TaskId {
            origin: NodeId::from("n1"),
            seq,
        }
    }

    #[test]
    fn plans_depend_only_on_seed_task_and_attempt() {
        let w = TaskWorkload {
            fail_ppm: 300_000,
            retryable_ppm: 300_000,
            ..TaskWorkload::default()
        };
        let spec = task_spec(&w);
        let a = SandboxModel::new(7, &w);
        let b = SandboxModel::new(7, &w);
        for seq in 1..50 {
            assert_eq!(a.plan(&task(seq), 1, &spec), b.plan(&task(seq), 1, &spec));
        }
        let c = SandboxModel::new(8, &w);
        assert!((1..50).any(|s| a.plan(&task(s), 1, &spec) != c.plan(&task(s), 1, &spec)));
        assert!((1..50).any(|s| a.plan(&task(s), 1, &spec) != a.plan(&task(s), 2, &spec)));
    }

    #[test]
    fn the_mix_shows_in_the_outcomes() {
        let w = TaskWorkload {
            fail_ppm: 200_000,
            oom_ppm: 100_000,
            timeout_ppm: 100_000,
            retryable_ppm: 100_000,
            error_ppm: 100_000,
            hang_ppm: 100_000,
            duration_min: 100,
            duration_max: 1_000,
            timeout: 800,
            ..TaskWorkload::default()
        };
        let spec = task_spec(&w);
        let m = SandboxModel::new(1, &w);
        let mut counts = std::collections::BTreeMap::new();
        for seq in 1..=2_000 {
            let p = m.plan(&task(seq), 1, &spec);
            match p.after_ms {
                Some(after) => assert!(after <= 800, "{p:?}"),
                None => assert_eq!(p.outcome, Outcome::Hang),
            }
            let name = format!("{:?}", p.outcome);
            let key = name.split('(').next().unwrap().to_owned();
            *counts.entry(key).or_insert(0u32) += 1;
        }
        for k in [
            "Succeeded",
            "Failed",
            "OutOfMemory",
            "TimedOut",
            "Retryable",
            "Error",
            "Hang",
        ] {
            assert!(counts.get(k).copied().unwrap_or(0) > 50, "{k}: {counts:?}");
        }
        // Runs drawn longer than the 800 ms timeout time out as well.
        assert!(counts["TimedOut"] > counts["Retryable"], "{counts:?}");
    }

    #[test]
    fn events_say_how_the_run_ended() {
        let w = TaskWorkload::default();
        let m = SandboxModel::new(1, &w);
        let t = task(1);
        let ev = m.end_event(
            &t,
            2,
            &Plan {
                outcome: Outcome::TimedOut,
                after_ms: Some(60_000),
            },
        );
        match ev {
            Event::SandboxExited { attempt, exit, .. } => {
                assert_eq!(attempt, 2);
                assert!(exit.timed_out);
                assert_eq!(exit.signal, Some(KILL_SIGNAL));
                assert_eq!(exit.duration_ms, 60_000);
            }
            other => panic!("{other:?}"),
        }
        let ev = m.end_event(
            &t,
            1,
            &Plan {
                outcome: Outcome::Retryable,
                after_ms: Some(5),
            },
        );
        assert!(matches!(
            ev,
            Event::SandboxFailed {
                retryable: true,
                ..
            }
        ));
        match SandboxModel::stopped_event(&t, 1, 42) {
            Event::SandboxExited { exit, .. } => {
                assert_eq!(exit.signal, Some(STOP_SIGNAL));
                assert_eq!(exit.exit_code, None);
                assert_eq!(exit.duration_ms, 42);
            }
            other => panic!("{other:?}"),
        }
    }
}
