//! [`SledLog`]: the event log on sled 0.34.
//!
//! Layout (one sled database per data directory, five trees):
//!
//! * `meta` — `"meta"`: the [`LogMeta`] version marker (format version, node id, the core
//!   configuration the log was created with); `"pruned_through"`: the last event sequence deleted
//!   by pruning (big-endian u64; absent until something was pruned).
//! * `events` — big-endian u64 sequence (from 1) → JSON `[now_ms, event]`.
//! * `snapshots` — big-endian u64 sequence of the last event the snapshot covers → the
//!   [`Core::snapshot`] bytes.
//! * `notices` — big-endian (u64 event sequence, u32 index) → JSON [`RecordedNotice`]: the
//!   decisions the node announced as it ran, kept so `chorus replay` can compare its own.
//! * `clocks` — big-endian u64 sequence of a `Started` event → JSON [`ClockAnchor`]: where that
//!   run's node clock sat on the host's clocks, so `chorus replay` can put several nodes' logs on
//!   one time line. Never pruned (one per start).
//!
//! Appends go straight into sled (which buffers them); `sync` is `flush`, so the runtime's batches
//! cost one flush each. A snapshot keeps the newest `keep_snapshots` snapshots and deletes the
//! events (and notices) the oldest kept one covers: recovery starts from the newest snapshot,
//! while replay can still start from the oldest and show the decisions made since.
//!
//! Anything that does not read back — a record that does not decode, a gap in the sequence, a
//! missing or foreign version marker — is a [`LogError::Corrupt`] naming the path; sled failures
//! are [`LogError::Storage`] naming the path. A node never silently starts afresh over a log it
//! cannot read.

use std::fmt;
use std::path::{Path, PathBuf};

use chorus_core::{Config, Core, Event, NodeId, Notice};
use serde::{Deserialize, Serialize};

use crate::runtime::{EventLog, LogError, Recovery};

/// The on-disk format this build writes and reads. Bump it on any incompatible change: a log of
/// another format is refused with a clear error, never misread.
pub const FORMAT_VERSION: u32 = 1;

const META_KEY: &[u8] = b"meta";
/// A copy of the version marker outside sled. Its presence says a log was created here, so a
/// store that lost its contents is reported as damaged instead of being taken for a new log.
pub const MARKER_FILE: &str = "CHORUS_LOG";
const PRUNED_KEY: &[u8] = b"pruned_through";

/// The version marker and creation record of a log, written once when the log is created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// The on-disk format ([`FORMAT_VERSION`] when written by this build).
    pub format: u32,
    /// The node whose inputs the log holds.
    pub node_id: NodeId,
    /// The core configuration the node was created with (replay builds a fresh core from it).
    pub config: Config,
    /// The node's capabilities at creation.
    pub capabilities: Vec<String>,
    /// The cluster seed its RNG was seeded with.
    pub cluster_seed: u64,
    /// Wall-clock creation time (Unix ms), for people reading the log; never used in decisions.
    pub created_unix_ms: u64,
}

impl LogMeta {
    /// The marker for a new log of `node_id` in this build's format.
    pub fn new(
        node_id: NodeId,
        config: Config,
        capabilities: Vec<String>,
        cluster_seed: u64,
    ) -> LogMeta {
        let created_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        LogMeta {
            format: FORMAT_VERSION,
            node_id,
            config,
            capabilities,
            cluster_seed,
            created_unix_ms,
        }
    }

    /// A fresh core as the node was created (the start of a full replay).
    pub fn fresh_core(&self) -> Result<Core, chorus_core::ConfigError> {
        Core::new(
            self.node_id.clone(),
            self.config.clone(),
            self.capabilities.clone(),
            self.cluster_seed,
        )
    }
}

/// Tuning of a [`SledLog`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SledLogOptions {
    /// Snapshots kept (at least 1). Events covered by the oldest kept snapshot are deleted.
    pub keep_snapshots: usize,
    /// sled's page cache bound, bytes. The log is written far more than read, so a small cache
    /// keeps the node's memory small.
    pub cache_capacity_bytes: u64,
}

impl Default for SledLogOptions {
    fn default() -> Self {
        SledLogOptions {
            keep_snapshots: 2,
            cache_capacity_bytes: 8 << 20,
        }
    }
}

/// A decision the node announced while it ran, recorded next to the event that caused it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedNotice {
    /// The sequence of the event whose step produced it.
    pub seq: u64,
    /// The `now` of that step.
    pub now_ms: u64,
    /// The notice.
    pub notice: Notice,
}

/// Where one run of the node (from a `Started` event to the next) sat on the host's clocks: at
/// node time `node_ms`, the host's `CLOCK_MONOTONIC` read `monotonic_ms` and its wall clock
/// `unix_ms`. The node clock is monotonic too, so within a run node time and host monotonic
/// time advance together (a paused process included). Never used in a decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockAnchor {
    /// Node (core) time, ms.
    pub node_ms: u64,
    /// The host's monotonic clock at that moment, ms (shared by every process of one boot).
    pub monotonic_ms: u64,
    /// The host's wall clock at that moment, Unix ms.
    pub unix_ms: u64,
    /// The host's boot id (`/proc/sys/kernel/random/boot_id`; empty where unknown): monotonic
    /// times compare only within one boot of one host.
    pub boot_id: String,
}

/// Everything a replay needs: where to start and the events after it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayBasis {
    /// The snapshot to start from and the last sequence it covers; `None` means a fresh core
    /// from the [`LogMeta`] (nothing was pruned).
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// Every retained event after it: (sequence, now, event), oldest first.
    pub events: Vec<(u64, u64, Event)>,
}

/// A sled failure, with the path of the log it happened on.
#[derive(Debug)]
struct PathError {
    path: PathBuf,
    what: &'static str,
    source: sled::Error,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.path.display(),
            self.what,
            self.source
        )
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The production event log: a sled database in the node's data directory.
pub struct SledLog {
    path: PathBuf,
    db: sled::Db,
    meta_tree: sled::Tree,
    events: sled::Tree,
    snapshots: sled::Tree,
    notices: sled::Tree,
    clocks: sled::Tree,
    meta: LogMeta,
    options: SledLogOptions,
    /// The sequence the next appended event gets.
    next_seq: u64,
}

impl fmt::Debug for SledLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledLog")
            .field("path", &self.path)
            .field("node_id", &self.meta.node_id)
            .field("next_seq", &self.next_seq)
            .finish()
    }
}

impl SledLog {
    /// Opens the log of `meta.node_id` at `path`, creating it (and writing `meta` as its version
    /// marker) when the directory holds no log yet. An existing log must carry this build's
    /// format and the same node id.
    pub fn open(
        path: impl AsRef<Path>,
        meta: LogMeta,
        options: SledLogOptions,
    ) -> Result<SledLog, LogError> {
        let path = path.as_ref().to_path_buf();
        let db = open_db(&path, &options)?;
        let meta_tree = tree(&path, &db, "meta")?;
        let stored = read_meta(&path, &meta_tree)?;
        let meta = match stored {
            Some(stored) => {
                if stored.node_id != meta.node_id {
                    return Err(LogError::Corrupt(format!(
                        "{}: the event log belongs to node {}, not {} (another node's data \
                         directory?)",
                        path.display(),
                        stored.node_id,
                        meta.node_id
                    )));
                }
                stored
            }
            None => {
                if path.join(MARKER_FILE).exists() {
                    return Err(LogError::Corrupt(format!(
                        "{}: the event log was created here ({MARKER_FILE} exists) but its \
                         store holds no version marker: the store is damaged",
                        path.display()
                    )));
                }
                let events = tree(&path, &db, "events")?;
                if !events.is_empty() {
                    return Err(LogError::Corrupt(format!(
                        "{}: the event log holds events but no version marker",
                        path.display()
                    )));
                }
                let bytes = serde_json::to_vec(&meta).expect("log metadata serializes");
                meta_tree
                    .insert(META_KEY, bytes)
                    .map_err(|e| storage(&path, "write version marker", e))?;
                db.flush()
                    .map_err(|e| storage(&path, "flush version marker", e))?;
                write_marker_file(&path, &meta)?;
                meta
            }
        };
        SledLog::finish_open(path, db, meta_tree, meta, options)
    }

    /// Opens an existing log without knowing whose it is (for `chorus replay`). Fails when the
    /// directory holds no log.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<SledLog, LogError> {
        let path = path.as_ref().to_path_buf();
        if !path.join("conf").exists() && !path.join("db").exists() {
            return Err(LogError::Corrupt(format!(
                "{}: no event log here",
                path.display()
            )));
        }
        let options = SledLogOptions::default();
        let db = open_db(&path, &options)?;
        let meta_tree = tree(&path, &db, "meta")?;
        let meta = read_meta(&path, &meta_tree)?
            .ok_or_else(|| LogError::Corrupt(format!("{}: no version marker", path.display())))?;
        SledLog::finish_open(path, db, meta_tree, meta, options)
    }

    fn finish_open(
        path: PathBuf,
        db: sled::Db,
        meta_tree: sled::Tree,
        meta: LogMeta,
        options: SledLogOptions,
    ) -> Result<SledLog, LogError> {
        let events = tree(&path, &db, "events")?;
        let snapshots = tree(&path, &db, "snapshots")?;
        let notices = tree(&path, &db, "notices")?;
        let clocks = tree(&path, &db, "clocks")?;
        let last_event = last_key(&path, &events, "events")?;
        let last_snapshot = last_key(&path, &snapshots, "snapshots")?;
        let pruned = match meta_tree
            .get(PRUNED_KEY)
            .map_err(|e| storage(&path, "read", e))?
        {
            Some(v) => Some(be_u64(&path, "pruned_through", &v)?),
            None => None,
        };
        // The next sequence follows whatever was ever written: events, or a snapshot/prune
        // that covered them.
        let next_seq = 1 + last_event.max(last_snapshot).max(pruned).unwrap_or(0);
        Ok(SledLog {
            path,
            db,
            meta_tree,
            events,
            snapshots,
            notices,
            clocks,
            meta,
            options,
            next_seq,
        })
    }

    /// The log's version marker.
    pub fn meta(&self) -> &LogMeta {
        &self.meta
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence the next appended event gets (events are numbered from 1).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// A handle that records notices into this log's `notices` tree.
    pub fn notice_recorder(&self) -> NoticeRecorder {
        NoticeRecorder {
            path: self.path.clone(),
            tree: self.notices.clone(),
            clocks: self.clocks.clone(),
        }
    }

    /// The clock anchors the node recorded at its starts: (sequence of the `Started` event,
    /// anchor), oldest first.
    pub fn clock_anchors(&self) -> Result<Vec<(u64, ClockAnchor)>, LogError> {
        let mut out = Vec::new();
        for item in self.clocks.iter() {
            let (key, value) = item.map_err(|e| self.storage("read clock anchors", e))?;
            let seq = be_u64(&self.path, "clock anchor key", &key)?;
            let anchor: ClockAnchor = serde_json::from_slice(&value).map_err(|e| {
                LogError::Corrupt(format!(
                    "{}: clock anchor {seq} does not decode: {e}",
                    self.path.display()
                ))
            })?;
            out.push((seq, anchor));
        }
        Ok(out)
    }

    /// Where a full replay of the retained history starts, and the events after it.
    pub fn replay_basis(&self) -> Result<ReplayBasis, LogError> {
        let pruned = match self
            .meta_tree
            .get(PRUNED_KEY)
            .map_err(|e| self.storage("read", e))?
        {
            Some(v) => Some(be_u64(&self.path, "pruned_through", &v)?),
            None => None,
        };
        let snapshot = match pruned {
            None => None,
            Some(seq) => {
                let bytes = self
                    .snapshots
                    .get(seq.to_be_bytes())
                    .map_err(|e| self.storage("read snapshot", e))?
                    .ok_or_else(|| {
                        LogError::Corrupt(format!(
                            "{}: events up to {seq} were pruned but their snapshot is missing",
                            self.path.display()
                        ))
                    })?;
                Some((seq, bytes.to_vec()))
            }
        };
        let from = snapshot.as_ref().map_or(0, |(s, _)| *s) + 1;
        let events = self.read_events(from)?;
        Ok(ReplayBasis { snapshot, events })
    }

    /// The notices the node recorded as it ran, in order.
    pub fn notices(&self) -> Result<Vec<RecordedNotice>, LogError> {
        let mut out = Vec::new();
        for item in self.notices.iter() {
            let (key, value) = item.map_err(|e| self.storage("read notices", e))?;
            let notice: RecordedNotice = serde_json::from_slice(&value).map_err(|e| {
                LogError::Corrupt(format!(
                    "{}: recorded notice {:?} does not decode: {e}",
                    self.path.display(),
                    &key[..]
                ))
            })?;
            out.push(notice);
        }
        Ok(out)
    }

    /// The snapshots held: (last covered sequence, bytes), oldest first.
    pub fn snapshots(&self) -> Result<Vec<(u64, Vec<u8>)>, LogError> {
        let mut out = Vec::new();
        for item in self.snapshots.iter() {
            let (key, value) = item.map_err(|e| self.storage("read snapshots", e))?;
            out.push((be_u64(&self.path, "snapshot key", &key)?, value.to_vec()));
        }
        Ok(out)
    }

    /// Reads events from sequence `from` on, checking that each decodes, that the sequence has no
    /// gap and that time never goes backwards.
    fn read_events(&self, from: u64) -> Result<Vec<(u64, u64, Event)>, LogError> {
        let mut out: Vec<(u64, u64, Event)> = Vec::new();
        for (expected, item) in (from..).zip(self.events.range(from.to_be_bytes()..)) {
            let (key, value) = item.map_err(|e| self.storage("read events", e))?;
            let seq = be_u64(&self.path, "event key", &key)?;
            if seq != expected {
                return Err(LogError::Corrupt(format!(
                    "{}: event {expected} is missing (next is {seq})",
                    self.path.display()
                )));
            }
            let (now_ms, event): (u64, Event) = serde_json::from_slice(&value).map_err(|e| {
                LogError::Corrupt(format!(
                    "{}: event {seq} does not decode: {e}",
                    self.path.display()
                ))
            })?;
            if let Some((_, last, _)) = out.last() {
                if now_ms < *last {
                    return Err(LogError::Corrupt(format!(
                        "{}: event {seq} goes back in time ({now_ms} ms after {last} ms)",
                        self.path.display()
                    )));
                }
            }
            out.push((seq, now_ms, event));
        }
        Ok(out)
    }

    fn storage(&self, what: &'static str, e: sled::Error) -> LogError {
        storage(&self.path, what, e)
    }
}

impl EventLog for SledLog {
    fn next_position(&self) -> Option<u64> {
        Some(self.next_seq)
    }

    fn append(&mut self, now_ms: u64, event: &Event) -> Result<(), LogError> {
        let value = serde_json::to_vec(&(now_ms, event)).expect("events serialize");
        self.events
            .insert(self.next_seq.to_be_bytes(), value)
            .map_err(|e| self.storage("append", e))?;
        self.next_seq += 1;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), LogError> {
        self.db.flush().map_err(|e| self.storage("flush", e))?;
        Ok(())
    }

    fn snapshot(&mut self, core: &Core) -> Result<(), LogError> {
        let covered = self.next_seq - 1;
        self.snapshots
            .insert(covered.to_be_bytes(), core.snapshot())
            .map_err(|e| self.storage("write snapshot", e))?;
        // Keep the newest `keep_snapshots`; the oldest kept one becomes the replay basis and
        // everything it covers goes.
        let keep = self.options.keep_snapshots.max(1);
        let held = self.snapshots.len();
        if held > keep {
            let mut drop_snapshots = Vec::new();
            for item in self.snapshots.iter().take(held - keep) {
                let (key, _) = item.map_err(|e| self.storage("read snapshots", e))?;
                drop_snapshots.push(key);
            }
            for key in drop_snapshots {
                self.snapshots
                    .remove(key)
                    .map_err(|e| self.storage("prune snapshots", e))?;
            }
        }
        if held >= keep {
            let oldest = match self.snapshots.first() {
                Ok(Some((key, _))) => be_u64(&self.path, "snapshot key", &key)?,
                Ok(None) => unreachable!("a snapshot was just written"),
                Err(e) => return Err(self.storage("read snapshots", e)),
            };
            self.prune_through(oldest)?;
        }
        self.sync()
    }

    fn recover(&mut self) -> Result<Recovery, LogError> {
        let snapshot = self
            .snapshots
            .last()
            .map_err(|e| self.storage("read snapshots", e))?;
        let (from, snapshot) = match snapshot {
            Some((key, value)) => (
                be_u64(&self.path, "snapshot key", &key)? + 1,
                Some(value.to_vec()),
            ),
            None => {
                let pruned = self
                    .meta_tree
                    .get(PRUNED_KEY)
                    .map_err(|e| self.storage("read", e))?;
                if pruned.is_some() {
                    return Err(LogError::Corrupt(format!(
                        "{}: events were pruned but no snapshot is left",
                        self.path.display()
                    )));
                }
                (1, None)
            }
        };
        // Check the retained events the snapshot covers too (at most a snapshot interval or
        // two): a damaged record must stop the node now, not surprise a later replay.
        let checked_from = match self
            .meta_tree
            .get(PRUNED_KEY)
            .map_err(|e| self.storage("read", e))?
        {
            Some(v) => be_u64(&self.path, "pruned_through", &v)? + 1,
            None => 1,
        };
        let tail = self
            .read_events(checked_from.min(from))?
            .into_iter()
            .filter(|(seq, _, _)| *seq >= from)
            .map(|(_, now, event)| (now, event))
            .collect();
        Ok(Recovery { snapshot, tail })
    }
}

impl SledLog {
    /// Deletes events and notices up to and including `seq`.
    fn prune_through(&mut self, seq: u64) -> Result<(), LogError> {
        let mut batch = sled::Batch::default();
        for item in self.events.range(..=seq.to_be_bytes()) {
            let (key, _) = item.map_err(|e| self.storage("read events", e))?;
            batch.remove(key);
        }
        self.events
            .apply_batch(batch)
            .map_err(|e| self.storage("prune events", e))?;
        let mut batch = sled::Batch::default();
        let end = notice_key(seq, u32::MAX);
        for item in self.notices.range(..=end) {
            let (key, _) = item.map_err(|e| self.storage("read notices", e))?;
            batch.remove(key);
        }
        self.notices
            .apply_batch(batch)
            .map_err(|e| self.storage("prune notices", e))?;
        self.meta_tree
            .insert(PRUNED_KEY, &seq.to_be_bytes())
            .map_err(|e| self.storage("write prune mark", e))?;
        Ok(())
    }
}

/// Records the node's notices into its log's `notices` tree (see [`SledLog::notice_recorder`]).
/// Records become durable with the log's next `sync`, or with [`NoticeRecorder::flush`].
#[derive(Clone)]
pub struct NoticeRecorder {
    path: PathBuf,
    tree: sled::Tree,
    clocks: sled::Tree,
}

impl fmt::Debug for NoticeRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoticeRecorder")
            .field("path", &self.path)
            .finish()
    }
}

impl NoticeRecorder {
    /// Records the `index`-th notice of the step of event `seq`.
    pub fn record(&self, index: u32, notice: &RecordedNotice) -> Result<(), LogError> {
        let value = serde_json::to_vec(notice).expect("notices serialize");
        self.tree
            .insert(notice_key(notice.seq, index), value)
            .map_err(|e| storage(&self.path, "record notice", e))?;
        Ok(())
    }

    /// Records where the run that starts with event `seq` (a `Started`) sits on the host's
    /// clocks, durably at once (once per start).
    pub fn record_clock(&self, seq: u64, anchor: &ClockAnchor) -> Result<(), LogError> {
        let value = serde_json::to_vec(anchor).expect("clock anchors serialize");
        self.clocks
            .insert(seq.to_be_bytes(), value)
            .map_err(|e| storage(&self.path, "record clock anchor", e))?;
        self.clocks
            .flush()
            .map_err(|e| storage(&self.path, "flush clock anchor", e))?;
        Ok(())
    }

    /// Makes recorded notices durable.
    pub fn flush(&self) -> Result<(), LogError> {
        self.tree
            .flush()
            .map_err(|e| storage(&self.path, "flush notices", e))?;
        Ok(())
    }
}

fn notice_key(seq: u64, index: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&seq.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

/// How long an open waits for the file lock of a log this process closed a moment ago.
const RELOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

fn open_db(path: &Path, options: &SledLogOptions) -> Result<sled::Db, LogError> {
    let open = || {
        sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_capacity_bytes)
            .open()
    };
    // sled lets its file lock go from a background thread after the last handle is dropped, so
    // a log reopened in the same process right after it was closed (a replay, a test; on a
    // loaded machine) can find the lock still held for a moment. Another process holding it
    // is still refused, after the wait.
    let deadline = std::time::Instant::now() + RELOCK_WAIT;
    let mut opened = open();
    while matches!(&opened, Err(sled::Error::Io(e)) if e.to_string().contains("acquire lock"))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
        opened = open();
    }
    opened.map_err(|e| match e {
        sled::Error::Corruption { .. } => {
            LogError::Corrupt(format!("{}: sled reports corruption: {e}", path.display()))
        }
        e => storage(path, "open", e),
    })
}

fn write_marker_file(path: &Path, meta: &LogMeta) -> Result<(), LogError> {
    use std::io::Write;
    let io = |e: std::io::Error| {
        LogError::Storage(format!("{}: cannot write {MARKER_FILE}: {e}", path.display()).into())
    };
    let mut file = std::fs::File::create(path.join(MARKER_FILE)).map_err(io)?;
    let text = serde_json::to_string_pretty(meta).expect("log metadata serializes");
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

fn tree(path: &Path, db: &sled::Db, name: &'static str) -> Result<sled::Tree, LogError> {
    db.open_tree(name)
        .map_err(|e| storage(path, "open tree", e))
}

fn read_meta(path: &Path, meta_tree: &sled::Tree) -> Result<Option<LogMeta>, LogError> {
    let Some(bytes) = meta_tree
        .get(META_KEY)
        .map_err(|e| storage(path, "read version marker", e))?
    else {
        return Ok(None);
    };
    // Read the format first, so a future format with other fields is reported as such rather
    // than as an undecodable marker.
    #[derive(Deserialize)]
    struct Format {
        format: u32,
    }
    let format: Format = serde_json::from_slice(&bytes).map_err(|e| {
        LogError::Corrupt(format!(
            "{}: the version marker does not decode: {e}",
            path.display()
        ))
    })?;
    if format.format != FORMAT_VERSION {
        return Err(LogError::Corrupt(format!(
            "{}: event log format {} is not the format this build reads ({FORMAT_VERSION})",
            path.display(),
            format.format
        )));
    }
    let meta = serde_json::from_slice(&bytes).map_err(|e| {
        LogError::Corrupt(format!(
            "{}: the version marker does not decode: {e}",
            path.display()
        ))
    })?;
    Ok(Some(meta))
}

fn last_key(path: &Path, tree: &sled::Tree, what: &'static str) -> Result<Option<u64>, LogError> {
    match tree.last() {
        Ok(Some((key, _))) => Ok(Some(be_u64(path, what, &key)?)),
        Ok(None) => Ok(None),
        Err(e) => Err(storage(path, "read", e)),
    }
}

fn be_u64(path: &Path, what: &str, bytes: &[u8]) -> Result<u64, LogError> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        LogError::Corrupt(format!(
            "{}: {what} is {} bytes, not 8",
            path.display(),
            bytes.len()
        ))
    })?;
    Ok(u64::from_be_bytes(array))
}

fn storage(path: &Path, what: &'static str, source: sled::Error) -> LogError {
    LogError::Storage(Box::new(PathError {
        path: path.to_path_buf(),
        what,
        source,
    }))
}
