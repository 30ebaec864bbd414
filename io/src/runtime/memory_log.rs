//! An in-memory [`EventLog`] for tests and the simulator. Handles share storage, so a simulated
//! crash (dropping the node's handle) keeps what was synced and loses what was not.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chorus_core::{Core, Event};

use super::{EventLog, LogError, Recovery};

#[derive(Debug, Default)]
struct Stored {
    /// Every durable event, oldest first (kept whole: tests and replay tools read it).
    events: Vec<(u64, Event)>,
    /// The latest snapshot and how many of `events` it covers.
    snapshot: Option<(usize, Vec<u8>)>,
    syncs: u64,
    snapshots: u64,
}

/// An in-memory event log. Clones are handles on the same storage; each handle buffers its own
/// appended-but-unsynced events, which die with it, as with a crashed process.
#[derive(Debug, Default)]
pub struct MemoryLog {
    stored: Arc<Mutex<Stored>>,
    pending: Vec<(u64, Event)>,
}

impl Clone for MemoryLog {
    /// Another handle on the same durable storage, with nothing pending.
    fn clone(&self) -> Self {
        MemoryLog {
            stored: Arc::clone(&self.stored),
            pending: Vec::new(),
        }
    }
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> MemoryLog {
        MemoryLog::default()
    }

    fn lock(&self) -> MutexGuard<'_, Stored> {
        // The stored data is plain values; a panic elsewhere cannot leave it half-written.
        self.stored.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every durable event, oldest first.
    pub fn events(&self) -> Vec<(u64, Event)> {
        self.lock().events.clone()
    }

    /// Number of durable events.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// Whether no event is durable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times `sync` made something durable, and how many snapshots were taken.
    pub fn counts(&self) -> (u64, u64) {
        let s = self.lock();
        (s.syncs, s.snapshots)
    }

    /// Events appended through this handle but not yet synced.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

impl EventLog for MemoryLog {
    fn append(&mut self, now_ms: u64, event: &Event) -> Result<(), LogError> {
        self.pending.push((now_ms, event.clone()));
        Ok(())
    }

    fn sync(&mut self) -> Result<(), LogError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let mut s = self.lock();
        s.events.extend(pending);
        s.syncs += 1;
        Ok(())
    }

    fn snapshot(&mut self, core: &Core) -> Result<(), LogError> {
        self.sync()?;
        let bytes = core.snapshot();
        let mut s = self.lock();
        let covered = s.events.len();
        s.snapshot = Some((covered, bytes));
        s.snapshots += 1;
        Ok(())
    }

    fn recover(&mut self) -> Result<Recovery, LogError> {
        let s = self.lock();
        let (from, snapshot) = match &s.snapshot {
            Some((covered, bytes)) => (*covered, Some(bytes.clone())),
            None => (0, None),
        };
        Ok(Recovery {
            snapshot,
            tail: s.events[from..].to_vec(),
        })
    }
}
