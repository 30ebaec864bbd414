//! The event log: every input of the core, with its `now`, made durable before the step's
//! commands are carried out; plus state snapshots that bound replay.

use chorus_core::{Core, Event};

/// Why the event log failed. The runtime loop stops on any of these: a node that cannot make its
/// inputs durable must not act on them (it could vote twice in a term after a restart).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The storage underneath failed (disk full, I/O error, closed database).
    #[error("event log storage failed: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Stored data does not read back (a torn record, a snapshot of another node or version).
    #[error("event log is corrupt: {0}")]
    Corrupt(String),
}

/// What a log holds for a restarting node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovery {
    /// The latest snapshot ([`Core::snapshot`] bytes), if one was taken.
    pub snapshot: Option<Vec<u8>>,
    /// Durable events after that snapshot (all of them without one), oldest first, each with
    /// the `now` it was stepped at. The `now`s never decrease.
    pub tail: Vec<(u64, Event)>,
}

impl Recovery {
    /// Whether the log held anything at all (the node has run before).
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none() && self.tail.is_empty()
    }
}

/// A durable, append-only log of core inputs.
///
/// The runtime loop calls, per batch of ready events: `append` for each, then one `sync`, and
/// only then carries out the batch's commands. An event that was appended but not synced may be
/// lost by a crash; a synced one must not be. Implementations may buffer `append`.
pub trait EventLog {
    /// Appends one event with the time it is stepped at.
    fn append(&mut self, now_ms: u64, event: &Event) -> Result<(), LogError>;

    /// Makes every appended event durable.
    fn sync(&mut self) -> Result<(), LogError>;

    /// Durably stores a snapshot of `core`, which has folded in every event appended so far
    /// (implementations sync pending events first). Replay then starts from it.
    fn snapshot(&mut self, core: &Core) -> Result<(), LogError>;

    /// Reads back the latest snapshot and the durable events after it.
    fn recover(&mut self) -> Result<Recovery, LogError>;

    /// The position the next appended event takes, for error messages (`None` if the log does
    /// not number its events).
    fn next_position(&self) -> Option<u64> {
        None
    }
}
