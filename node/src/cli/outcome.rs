//! How a task's ending reaches a script and a person: the exit code `task submit --wait` and
//! `task logs --follow` end with, the sentence they print for an ending other than an exit, and
//! the escaping of whatever a task wrote. Shared by [`super::task`] and [`super::logs`].

use chorus_core::{TaskResult, TaskStatus};

use crate::exit::{
    EXIT_CANCELLED, EXIT_ERROR, EXIT_OUT_OF_MEMORY, EXIT_TIMED_OUT, EXIT_UNSCHEDULABLE,
};
use crate::names::short_id;
use crate::wire::cancelled_before_it_ran;

/// The exit code `submit --wait` ends with for `result`.
pub fn exit_code(result: &TaskResult) -> u8 {
    match result.status {
        TaskStatus::Succeeded => 0,
        TaskStatus::Failed => match (result.exit_code, result.signal) {
            (Some(code), _) => u8::try_from(code.clamp(0, 255)).unwrap_or(1).max(1),
            (None, Some(sig)) => u8::try_from((128 + sig).clamp(1, 255)).unwrap_or(1),
            (None, None) => 1,
        },
        TaskStatus::TimedOut => EXIT_TIMED_OUT,
        TaskStatus::OutOfMemory => EXIT_OUT_OF_MEMORY,
        TaskStatus::Cancelled => EXIT_CANCELLED,
        // A lost live sandbox is a sandbox error to a script: it must make another.
        TaskStatus::Error | TaskStatus::Lost => EXIT_ERROR,
        TaskStatus::Unschedulable => EXIT_UNSCHEDULABLE,
    }
}

/// What `submit --wait` says on stderr about an ending other than an exit.
pub fn plain_words(task: &str, r: &TaskResult) -> Option<String> {
    let on = format!(
        "on {} (run {}, {} ms)",
        short_id(r.worker.as_str()),
        r.attempt,
        r.duration_ms
    );
    match r.status {
        TaskStatus::Succeeded => None,
        TaskStatus::Failed => match (r.exit_code, r.signal) {
            (None, Some(sig)) => Some(format!("task {task} was killed by signal {sig} {on}")),
            _ => None,
        },
        TaskStatus::TimedOut => Some(format!(
            "task {task} timed out {on}: it ran past its timeout and was killed"
        )),
        TaskStatus::OutOfMemory => Some(format!(
            "task {task} ran out of memory {on}: the kernel killed it at its memory limit"
        )),
        TaskStatus::Cancelled if cancelled_before_it_ran(r) => {
            Some(format!("task {task} was cancelled before it ran"))
        }
        TaskStatus::Cancelled => Some(format!("task {task} was cancelled {on}")),
        TaskStatus::Error => Some(format!(
            "task {task} could not run {on}: {}",
            r.error.as_deref().unwrap_or("no reason given")
        )),
        TaskStatus::Unschedulable => Some(format!(
            "task {task} is unschedulable: {}",
            r.error.as_deref().unwrap_or("no live worker could run it")
        )),
        TaskStatus::Lost => Some(format!(
            "live sandbox {task} was lost {on}: {}",
            r.error
                .as_deref()
                .unwrap_or("its worker no longer holds it")
        )),
    }
}

/// `text` with every control character but newline and tab shown as an escape (`\x1b`,
/// `\u{9b}`): what a task wrote reaches an operator's terminal as text, never as commands
/// (the project's one escaping function, [`chorus_io::log_fields::escape_controls`]).
pub fn escape_controls(text: &str) -> String {
    chorus_io::log_fields::escape_controls(text, true)
}
