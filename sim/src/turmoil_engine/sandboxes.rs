//! The turmoil engine's [`TaskSandboxes`]: the simulated sandbox of `sandbox.rs` (the same runs
//! as the discrete-event engine's, drawn per seed, task and attempt), timed by the tokio clock,
//! which is turmoil's simulated time. Runs live in the host: a crash drops them with the node,
//! and no end reaches the next incarnation.

use std::collections::{BTreeMap, VecDeque};

use chorus_core::{Core, Event, SharedSpec, TaskId};
use chorus_io::runtime::TaskSandboxes;
use tokio::time::Instant;

use crate::sandbox::SandboxModel;

/// One node's simulated sandboxes.
pub(crate) struct SimSandboxes {
    model: Option<SandboxModel>,
    /// Runs going on: task → (attempt, start, token).
    runs: BTreeMap<TaskId, (u32, Instant, u64)>,
    /// Runs' own ends, by (due time, token).
    due: BTreeMap<(Instant, u64), (TaskId, Event)>,
    /// Ends ready now (stopped runs).
    ready: VecDeque<Event>,
    token: u64,
}

impl SimSandboxes {
    /// Sandboxes deciding runs with `model` (none: the scenario has no tasks, and the core
    /// starts nothing on a node without slots).
    pub(crate) fn new(model: Option<SandboxModel>) -> SimSandboxes {
        SimSandboxes {
            model,
            runs: BTreeMap::new(),
            due: BTreeMap::new(),
            ready: VecDeque::new(),
            token: 0,
        }
    }
}

impl TaskSandboxes for SimSandboxes {
    async fn recovered(&mut self, _core: &Core) {
        // A new host: the runs of the old one died with it.
    }

    fn start(&mut self, task: &TaskId, attempt: u32, spec: &SharedSpec) {
        let Some(model) = &self.model else {
            self.ready.push_back(Event::SandboxFailed {
                task: task.clone(),
                attempt,
                error: "sim: this scenario has no sandbox".into(),
                retryable: false,
            });
            return;
        };
        let plan = model.plan(task, attempt, spec);
        self.token += 1;
        let now = Instant::now();
        self.runs.insert(task.clone(), (attempt, now, self.token));
        if let Some(after) = plan.after_ms {
            let event = model.end_event(task, attempt, &plan);
            let at = now + std::time::Duration::from_millis(after);
            self.due.insert((at, self.token), (task.clone(), event));
        }
    }

    fn stop(&mut self, task: &TaskId, attempt: u32) {
        if self.runs.get(task).map(|r| r.0) != Some(attempt) {
            return;
        }
        if let Some((_, started, token)) = self.runs.remove(task) {
            self.due.retain(|(_, t), _| *t != token);
            let ran = Instant::now().duration_since(started).as_millis() as u64;
            self.ready
                .push_back(SandboxModel::stopped_event(task, attempt, ran));
        }
    }

    async fn next_exit(&mut self) -> Event {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return e;
            }
            let Some((&(at, token), _)) = self.due.first_key_value() else {
                return std::future::pending().await;
            };
            // Cancel safe: the entry leaves the table only once its time has come.
            tokio::time::sleep_until(at).await;
            if let Some((task, event)) = self.due.remove(&(at, token)) {
                if self.runs.get(&task).map(|r| r.2) == Some(token) {
                    self.runs.remove(&task);
                    return event;
                }
            }
        }
    }
}
