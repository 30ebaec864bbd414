//! The sandbox adapter a runtime loop carries tasks out through: it starts and stops runs for
//! the core's [`Command::StartSandbox`](chorus_core::Command::StartSandbox) and
//! [`Command::StopSandbox`](chorus_core::Command::StopSandbox), and hands each run's end back as
//! the event the core takes ([`Event::SandboxExited`] or [`Event::SandboxFailed`]), which the
//! loop logs and steps like any other input.

use std::collections::VecDeque;
use std::future::Future;

use chorus_core::{Core, Event, SharedSpec, TaskId};

/// Runs tasks for a runtime loop.
///
/// `start` and `stop` never block the loop: the work happens elsewhere (a tokio task, a
/// simulated clock), and its end comes out of [`TaskSandboxes::next_exit`]. Every started run
/// ends exactly once there — exited, failed, or stopped — unless the process dies first; after
/// a restart the core counts the runs its log says were going as retryable failures, and
/// [`TaskSandboxes::recovered`] removes what they left behind.
pub trait TaskSandboxes {
    /// Called once after recovery, before the node steps `Started`: remove sandboxes an earlier
    /// process of this node left (the core's [`Core::running_tasks`] says which runs it
    /// believed were going).
    fn recovered(&mut self, core: &Core) -> impl Future<Output = ()>;

    /// Starts run `attempt` of `task` without waiting.
    fn start(&mut self, task: &TaskId, attempt: u32, spec: &SharedSpec);

    /// Stops run `attempt` of `task` (cancelled); its end still comes from `next_exit`.
    fn stop(&mut self, task: &TaskId, attempt: u32);

    /// Waits for the next end of a run. Cancel safe: the loop drops this future whenever
    /// another input wins, and an end must not be lost then.
    fn next_exit(&mut self) -> impl Future<Output = Event>;
}

/// A node without sandboxes: every run fails at once (not retryable on this node, so the task
/// ends with an error rather than circling). The core places nothing on a node that offers no
/// task slots, so this is only reached by a misconfiguration.
#[derive(Debug, Default)]
pub struct NoSandboxes {
    ended: VecDeque<Event>,
}

impl TaskSandboxes for NoSandboxes {
    async fn recovered(&mut self, _core: &Core) {}

    fn start(&mut self, task: &TaskId, attempt: u32, _spec: &SharedSpec) {
        self.ended.push_back(Event::SandboxFailed {
            task: task.clone(),
            attempt,
            error: "config: this node runs no sandboxes".into(),
            retryable: false,
        });
    }

    fn stop(&mut self, _task: &TaskId, _attempt: u32) {}

    async fn next_exit(&mut self) -> Event {
        match self.ended.pop_front() {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }
}
