//! A node's recorded history, read after the fact: `chorus replay` re-runs one node's event log
//! and checks its decisions (`replay`), puts several nodes' on one time line (`merge`) in the
//! docs/design.md §6 trace format (`trace`); `hostclock` is where a node's clock sat on the host's, as
//! the daemon records it at every start for the merge; `source` opens a stopped node's log.

pub mod hostclock;
pub mod merge;
pub mod replay;
pub mod source;
pub mod trace;

/// The event log directory inside a node's data directory.
pub const LOG_DIR: &str = "log";
