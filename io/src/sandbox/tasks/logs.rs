//! The whole output of each run on this worker, kept on disk up to a cap, for `GET
//! /tasks/{id}/logs` while the run goes and after it ended (a result carries only tails).
//!
//! Rules:
//! 1. **Two files a run, one a stream**: `DATA_DIR/task-logs/<task>.<attempt>.stdout` and
//!    `<task>.<attempt>.stderr`, each the bytes the command wrote to that stream, in the order
//!    it wrote them (the order between the two streams is not kept). When the run ends a small
//!    `<task>.<attempt>.end` says, for each stream, how many bytes were kept and how many were
//!    not.
//! 2. **The first `cap` bytes of each stream are kept** (the cap is per stream: a chatty stderr
//!    never crowds out stdout), the rest counted, never stored (append-only files: an offset
//!    into a stream read once stays good). A write that fails (a full disk) cuts that stream
//!    there.
//! 3. **No link is followed.** The directory is opened once (`O_DIRECTORY | O_NOFOLLOW`) and
//!    every file is opened relative to it with `O_NOFOLLOW`; a run's files are made with
//!    `O_EXCL`, so anything already at their names (a symbolic link among others) is refused,
//!    never written through (and the one file already made is removed: a run has both or
//!    neither). A task id becomes a file name only after [`file_stem`] checked it.
//! 4. **Old logs are pruned by count:** when a log is made (and when the store opens) every
//!    finished run's files but those of the `keep` most recently written runs are removed; a
//!    run going is never pruned. The disk holds at most `keep + runs going` runs of at most
//!    `2 × cap` bytes each.
//! 5. A log whose run this process did not finish (the node was killed during it) counts as
//!    finished; how many bytes a stream did not keep is unknown when it reached the cap.
//! 6. A `<task>.<attempt>.log` of earlier versions (both streams in one file, interleaved) is
//!    removed when the store opens: its streams cannot be told apart.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use chorus_core::TaskId;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use tokio::sync::watch;

use crate::sandbox::OutputStream;

/// The directory under the data directory that holds the logs.
pub const LOG_DIR: &str = "task-logs";

/// Bytes of each stream kept per run unless configured otherwise: 16 MiB.
pub const DEFAULT_LOG_CAP_BYTES: u64 = 16 << 20;

/// Finished logs kept unless configured otherwise.
pub const DEFAULT_LOGS_KEPT: usize = 64;

/// The longest task id that becomes a file name (a peer id is ~52 characters).
const MAX_ID_LEN: usize = 200;

/// The suffix of the one-file logs of earlier versions (rule 6).
const LEGACY_SUFFIX: &str = ".log";

/// Where one stream of a run's log stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Progress {
    /// Bytes in the stream's file.
    pub kept_bytes: u64,
    /// Bytes not kept after the cut; `None`: not known (the run's node was killed while the
    /// stream was full).
    pub dropped_bytes: Option<u64>,
    /// The run ended (or its node did).
    pub finished: bool,
}

impl Progress {
    /// Where the stream was cut, if it was: its length.
    pub fn cut_at(&self) -> Option<u64> {
        (self.dropped_bytes != Some(0)).then_some(self.kept_bytes)
    }
}

/// Where both streams of a run being written stand: what a reader waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RunProgress {
    streams: [Progress; 2],
}

impl RunProgress {
    /// The progress of `stream`.
    pub fn of(&self, stream: OutputStream) -> Progress {
        self.streams[stream.index()]
    }

    /// The run ended.
    pub fn finished(&self) -> bool {
        self.streams[0].finished
    }
}

/// Bytes read from one stream of a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogChunk {
    /// The run the log is of.
    pub attempt: u32,
    /// The stream read.
    pub stream: OutputStream,
    /// The offset of the first byte, in the stream.
    pub offset: u64,
    /// At most the asked number of bytes from `offset`.
    pub data: Vec<u8>,
    /// The stream as it stands.
    pub progress: Progress,
}

/// Why a log cannot be read or made.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Not a task id, or one that cannot be a file name.
    #[error("{0}")]
    BadId(String),
    /// No log of that task (or run) here.
    #[error("no output of task {0} is kept on this node")]
    NotFound(String),
    /// An offset past the end of the log.
    #[error("offset {offset} is past the {kept} bytes of the log")]
    BadOffset {
        /// The offset asked.
        offset: u64,
        /// The log's length.
        kept: u64,
    },
    /// Something at the log's name that is not a log (a link, a directory) or already there.
    #[error("{0}: refused (not a regular file made by this node)")]
    Refused(String),
    /// The file system said no.
    #[error("task log {name}: {source}")]
    Io {
        /// The file.
        name: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The file stem of `attempt` of `task`, after checking the id: a task id
/// (`ORIGIN-SEQ`) of letters, digits and `-` only, at most 200 bytes.
pub fn file_stem(task: &str, attempt: u32) -> Result<String, LogError> {
    Ok(format!("{}.{attempt}", checked_id(task)?))
}

fn checked_id(task: &str) -> Result<&str, LogError> {
    let parsed: TaskId = task.parse().map_err(LogError::BadId)?;
    let plain = task.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !plain || task.len() > MAX_ID_LEN || parsed.to_string() != task {
        return Err(LogError::BadId(format!(
            "`{}` is not a task id this node keeps output for",
            task.escape_debug()
        )));
    }
    Ok(task)
}

/// The file of `stream` of the run `stem`.
fn stream_file(stem: &str, stream: OutputStream) -> String {
    format!("{stem}.{}", stream.name())
}

/// The run stem and stream of a stream file's name.
fn parse_stream_file(name: &str) -> Option<(&str, OutputStream)> {
    let (stem, suffix) = name.rsplit_once('.')?;
    Some((stem, OutputStream::from_name(suffix)?))
}

/// The logs of this worker's runs. See the [module docs](self).
pub struct LogStore {
    dir: OwnedFd,
    path: PathBuf,
    cap_bytes: u64,
    keep: usize,
    /// Runs being written: file stem → progress, for readers to wait on.
    live: Mutex<BTreeMap<String, watch::Sender<RunProgress>>>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("path", &self.path)
            .field("cap_bytes", &self.cap_bytes)
            .field("keep", &self.keep)
            .finish()
    }
}

fn io_err(name: &str, e: impl Into<std::io::Error>) -> LogError {
    LogError::Io {
        name: name.to_owned(),
        source: e.into(),
    }
}

impl LogStore {
    /// Opens (making it, mode 0700) `data_dir/task-logs`, refusing it when it is a link, and
    /// prunes it.
    pub fn open(data_dir: &Path, cap_bytes: u64, keep: usize) -> Result<LogStore, LogError> {
        let path = data_dir.join(LOG_DIR);
        let shown = path.display().to_string();
        let data = rustix::fs::open(
            data_dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(&data_dir.display().to_string(), e))?;
        match rustix::fs::mkdirat(&data, LOG_DIR, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io_err(&shown, e)),
        }
        let dir = rustix::fs::openat(
            &data,
            LOG_DIR,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => LogError::Refused(shown.clone()),
            e => io_err(&shown, e),
        })?;
        let store = LogStore {
            dir,
            path,
            cap_bytes,
            keep,
            live: Mutex::new(BTreeMap::new()),
        };
        store.remove_legacy();
        store.prune();
        Ok(store)
    }

    /// The directory the logs are in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes kept per stream of a run.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    fn lock_live(&self) -> MutexGuard<'_, BTreeMap<String, watch::Sender<RunProgress>>> {
        // A map of senders: a panic elsewhere cannot leave it inconsistent.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the log of `attempt` of `task` (after pruning old ones). Anything already at its
    /// files' names is refused.
    pub fn create(self: &Arc<Self>, task: &TaskId, attempt: u32) -> Result<LogWriter, LogError> {
        let stem = file_stem(&task.to_string(), attempt)?;
        self.prune();
        // An end left by an earlier log of this name (one whose removal was cut short) would
        // describe this one; removing a link removes the link, never its target.
        let _ = rustix::fs::unlinkat(&self.dir, format!("{stem}.end"), AtFlags::empty());
        let stdout = self.make(&stream_file(&stem, OutputStream::Stdout))?;
        let stderr = match self.make(&stream_file(&stem, OutputStream::Stderr)) {
            Ok(f) => f,
            Err(e) => {
                // Made just now, with O_EXCL: ours to remove. A run has both files or none.
                let _ = rustix::fs::unlinkat(
                    &self.dir,
                    stream_file(&stem, OutputStream::Stdout),
                    AtFlags::empty(),
                );
                return Err(e);
            }
        };
        let going = Progress {
            dropped_bytes: Some(0),
            ..Progress::default()
        };
        let (tx, _) = watch::channel(RunProgress {
            streams: [going; 2],
        });
        self.lock_live().insert(stem.clone(), tx.clone());
        Ok(LogWriter {
            store: Arc::clone(self),
            stem,
            files: [Some(stdout), Some(stderr)],
            progress: tx,
            kept: [0; 2],
            dropped: [0; 2],
            done: false,
        })
    }

    /// Makes the new file `name` (rule 3).
    fn make(&self, name: &str) -> Result<std::fs::File, LogError> {
        let fd = rustix::fs::openat(
            &self.dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|e| match e {
            Errno::EXIST | Errno::LOOP => LogError::Refused(name.to_owned()),
            e => io_err(name, e),
        })?;
        Ok(std::fs::File::from(fd))
    }

    /// Waits-for-more handle of a run being written (`None`: it is not, or no longer). It
    /// changes when either stream grows and when the run ends.
    pub fn watch(&self, task: &str, attempt: u32) -> Option<watch::Receiver<RunProgress>> {
        let stem = file_stem(task, attempt).ok()?;
        self.lock_live().get(&stem).map(watch::Sender::subscribe)
    }

    /// The latest run of `task` this node has a log of.
    pub fn latest_attempt(&self, task: &str) -> Result<u32, LogError> {
        let prefix = format!("{}.", checked_id(task)?);
        let mut latest = None;
        for (stem, _) in self.runs()? {
            let attempt = stem
                .strip_prefix(&prefix)
                .and_then(|n| n.parse::<u32>().ok());
            latest = latest.max(attempt);
        }
        latest.ok_or_else(|| LogError::NotFound(task.to_owned()))
    }

    /// At most `max` bytes of `stream` of the log of `attempt` (default: the latest) of
    /// `task`, from `offset` in that stream.
    pub fn read(
        &self,
        task: &str,
        attempt: Option<u32>,
        stream: OutputStream,
        offset: u64,
        max: usize,
    ) -> Result<LogChunk, LogError> {
        let attempt = match attempt {
            Some(a) => a,
            None => self.latest_attempt(task)?,
        };
        let stem = file_stem(task, attempt)?;
        // Read before the file, so the bytes read are at least those it counts.
        let live = self.lock_live().get(&stem).map(|tx| tx.borrow().of(stream));
        let name = stream_file(&stem, stream);
        let mut file = self
            .open_regular(&name)?
            .ok_or_else(|| LogError::NotFound(format!("{task} (run {attempt})")))?;
        let progress = match live {
            Some(p) => p,
            None => self.ended(&stem, stream, &file)?,
        };
        if offset > progress.kept_bytes {
            return Err(LogError::BadOffset {
                offset,
                kept: progress.kept_bytes,
            });
        }
        let n = (progress.kept_bytes - offset).min(max as u64);
        let mut data = Vec::with_capacity(n as usize);
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io_err(&name, e))?;
        file.take(n)
            .read_to_end(&mut data)
            .map_err(|e| io_err(&name, e))?;
        Ok(LogChunk {
            attempt,
            stream,
            offset,
            data,
            progress,
        })
    }

    /// A finished stream's progress: from its run's `.end`, or (its run's node was killed)
    /// its length.
    fn ended(
        &self,
        stem: &str,
        stream: OutputStream,
        log: &std::fs::File,
    ) -> Result<Progress, LogError> {
        let name = format!("{stem}.end");
        let len = log.metadata().map_err(|e| io_err(stem, e))?.len();
        let Some(mut end) = self.open_regular(&name)? else {
            return Ok(Progress {
                kept_bytes: len,
                dropped_bytes: (len < self.cap_bytes).then_some(0),
                finished: true,
            });
        };
        let mut text = String::new();
        (&mut end)
            .take(4096)
            .read_to_string(&mut text)
            .map_err(|e| io_err(&name, e))?;
        // `kept dropped` of stdout, then of stderr.
        let fields: Vec<u64> = text
            .split_whitespace()
            .map(str::parse::<u64>)
            .collect::<Result<_, _>>()
            .map_err(|_| LogError::Refused(name.clone()))?;
        let at = 2 * stream.index();
        match fields.get(at..at + 2) {
            Some(&[kept, dropped]) if fields.len() == 4 => Ok(Progress {
                kept_bytes: kept.min(len),
                dropped_bytes: Some(dropped),
                finished: true,
            }),
            _ => Err(LogError::Refused(name)),
        }
    }

    /// Opens `name` for reading without following a link; `None` when nothing is there.
    /// Anything but a regular file is refused (a FIFO would block, a device is not ours).
    fn open_regular(&self, name: &str) -> Result<Option<std::fs::File>, LogError> {
        let fd = match rustix::fs::openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(LogError::Refused(name.to_owned())),
            Err(e) => return Err(io_err(name, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| io_err(name, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(LogError::Refused(name.to_owned()));
        }
        Ok(Some(std::fs::File::from(fd)))
    }

    /// Every name in the directory, with whether it is a regular file and its modification
    /// time in ns. Not following links.
    fn names(&self) -> Result<Vec<(String, bool, i128)>, LogError> {
        let shown = self.path.display().to_string();
        let dup = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(&shown, e))?;
        let dir = rustix::fs::Dir::new(dup).map_err(|e| io_err(&shown, e))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| io_err(&shown, e))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            out.push((
                name.to_owned(),
                FileType::from_raw_mode(st.st_mode) == FileType::RegularFile,
                i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ));
        }
        Ok(out)
    }

    /// Every run with a stream file (a regular one), with when either of its streams was last
    /// written, in ns.
    fn runs(&self) -> Result<BTreeMap<String, i128>, LogError> {
        let mut runs = BTreeMap::new();
        for (name, regular, mtime) in self.names()? {
            if let (Some((stem, _)), true) = (parse_stream_file(&name), regular) {
                let last = runs.entry(stem.to_owned()).or_insert(mtime);
                *last = (*last).max(mtime);
            }
        }
        Ok(runs)
    }

    /// Removes `stem`'s files: its streams, then its end.
    fn remove_run(&self, stem: &str) {
        for stream in OutputStream::BOTH {
            let name = stream_file(stem, stream);
            match rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => tracing::warn!(log = name, error = %e, "cannot remove an old task log"),
            }
        }
        let _ = rustix::fs::unlinkat(&self.dir, format!("{stem}.end"), AtFlags::empty());
    }

    /// Removes every finished run but the `keep` most recently written (rule 4).
    fn prune(&self) {
        let Ok(runs) = self.runs() else {
            return;
        };
        let live: Vec<String> = self.lock_live().keys().cloned().collect();
        let mut done: Vec<(String, i128)> = runs
            .into_iter()
            .filter(|(stem, _)| !live.contains(stem))
            .collect();
        done.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        for (stem, _) in done.iter().skip(self.keep) {
            self.remove_run(stem);
        }
    }

    /// Removes the one-file logs of earlier versions and their ends (rule 6).
    fn remove_legacy(&self) {
        let Ok(names) = self.names() else {
            return;
        };
        for (name, _, _) in names {
            if let Some(stem) = name.strip_suffix(LEGACY_SUFFIX) {
                // Removing a link removes the link; a directory is left (unlinkat refuses it).
                let _ = rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty());
                let _ = rustix::fs::unlinkat(&self.dir, format!("{stem}.end"), AtFlags::empty());
            }
        }
    }
}

/// Writes one run's log; dropping it finishes the log.
pub struct LogWriter {
    store: Arc<LogStore>,
    stem: String,
    /// Each stream's file, by [`OutputStream::index`]; `None` once a write to it failed.
    files: [Option<std::fs::File>; 2],
    progress: watch::Sender<RunProgress>,
    kept: [u64; 2],
    dropped: [u64; 2],
    done: bool,
}

impl LogWriter {
    /// Appends output of `stream`, up to the cap of that stream (rule 2). A small write to a
    /// local file: done in place.
    pub fn push(&mut self, stream: OutputStream, data: &[u8]) {
        let i = stream.index();
        let room = self.store.cap_bytes.saturating_sub(self.kept[i]);
        let take = (data.len() as u64).min(room) as usize;
        if let (Some(file), true) = (self.files[i].as_mut(), take > 0) {
            if let Err(e) = file.write_all(&data[..take]) {
                tracing::warn!(log = %self.stem, stream = stream.name(), error = %e,
                    "cannot write a task log; the rest of the stream is not kept");
                self.files[i] = None;
            }
        }
        if self.files[i].is_some() {
            self.kept[i] += take as u64;
            self.dropped[i] += (data.len() - take) as u64;
        } else {
            self.dropped[i] += data.len() as u64;
        }
        self.progress.send_replace(self.progress(false));
    }

    fn progress(&self, finished: bool) -> RunProgress {
        let of = |i: usize| Progress {
            kept_bytes: self.kept[i],
            dropped_bytes: Some(self.dropped[i]),
            finished,
        };
        RunProgress {
            streams: [of(0), of(1)],
        }
    }

    /// Ends the log: writes its `.end` and wakes its readers.
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        self.files = [None, None];
        let name = format!("{}.end", self.stem);
        let [out, err] = self.kept;
        let [out_dropped, err_dropped] = self.dropped;
        let made = rustix::fs::openat(
            &self.store.dir,
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(std::io::Error::from)
        .and_then(|fd| {
            std::fs::File::from(fd)
                .write_all(format!("{out} {out_dropped} {err} {err_dropped}\n").as_bytes())
        });
        if let Err(e) = made {
            tracing::warn!(log = %name, error = %e, "cannot write the end of a task log");
        }
        self.store.lock_live().remove(&self.stem);
        self.progress.send_replace(self.progress(true));
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutputStream::{Stderr, Stdout};

    const TASK: &str = "n1-7";

    fn store(dir: &Path, cap: u64, keep: usize) -> Arc<LogStore> {
        Arc::new(LogStore::open(dir, cap, keep).unwrap())
    }

    fn id(s: &str) -> TaskId {
        s.parse().unwrap()
    }

    /// A run writing to both streams, in turns: each stream reads back alone, its bytes in the
    /// order written to it, and none of the other's.
    #[test]
    fn each_stream_is_kept_apart_and_read_back_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20, 8);
        let mut w = s.create(&id(TASK), 1).unwrap();
        w.push(Stdout, b"out1\n");
        w.push(Stderr, b"err1\n");
        w.push(Stdout, b"out2\n");
        w.push(Stderr, b"err2\n");
        let out = s.read(TASK, None, Stdout, 0, 100).unwrap();
        let err = s.read(TASK, None, Stderr, 0, 100).unwrap();
        assert_eq!(
            (out.stream, out.data.as_slice()),
            (Stdout, &b"out1\nout2\n"[..])
        );
        assert_eq!(
            (err.stream, err.data.as_slice()),
            (Stderr, &b"err1\nerr2\n"[..])
        );
        assert_eq!((out.progress.kept_bytes, err.progress.kept_bytes), (10, 10));
        // Offsets are per stream.
        assert_eq!(s.read(TASK, None, Stderr, 5, 100).unwrap().data, b"err2\n");
        w.finish();
        let again = store(tmp.path(), 1 << 20, 8);
        for stream in OutputStream::BOTH {
            let c = again.read(TASK, Some(1), stream, 0, 100).unwrap();
            assert!(c.progress.finished && c.progress.cut_at().is_none());
        }
        assert_eq!(
            again.read(TASK, Some(1), Stderr, 0, 100).unwrap().data,
            b"err1\nerr2\n",
            "the same after a restart"
        );
    }

    /// The cap is per stream: stdout past it is cut and counted, stderr is not touched.
    #[test]
    fn each_stream_is_kept_up_to_its_own_cap_and_its_cut_is_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 10, 8);
        let mut w = s.create(&id(TASK), 1).unwrap();
        w.push(Stdout, b"hello ");
        let c = s.read(TASK, None, Stdout, 0, 100).unwrap();
        assert_eq!((c.attempt, c.data.as_slice()), (1, &b"hello "[..]));
        assert!(!c.progress.finished && c.progress.cut_at().is_none());
        w.push(Stdout, b"\x1b[2Jworld\xff!");
        w.push(Stderr, b"0123456789");
        w.finish();
        let c = s.read(TASK, Some(1), Stdout, 0, 100).unwrap();
        assert_eq!(c.data, b"hello \x1b[2J", "the first 10 bytes, as written");
        assert_eq!(c.progress.dropped_bytes, Some(7));
        assert_eq!(c.progress.cut_at(), Some(10));
        assert!(c.progress.finished);
        let e = s.read(TASK, Some(1), Stderr, 0, 100).unwrap();
        assert_eq!(e.data, b"0123456789", "stderr has its own 10 bytes");
        assert_eq!(e.progress.cut_at(), None);
        // The same after a restart (a new store over the same directory).
        let again = store(tmp.path(), 10, 8);
        assert_eq!(again.read(TASK, None, Stdout, 0, 100).unwrap(), c);
        assert_eq!(again.read(TASK, None, Stderr, 0, 100).unwrap(), e);
    }

    /// A run its node did not finish (no `.end`): finished, each stream as long as its file,
    /// what a full stream did not keep unknown.
    #[test]
    fn a_run_whose_node_was_killed_reads_as_finished() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 4, 8);
        let mut w = s.create(&id(TASK), 1).unwrap();
        w.push(Stdout, b"abcdef");
        w.push(Stderr, b"x");
        std::mem::forget(w);
        let again = store(tmp.path(), 4, 8);
        let out = again.read(TASK, None, Stdout, 0, 100).unwrap().progress;
        let err = again.read(TASK, None, Stderr, 0, 100).unwrap().progress;
        assert_eq!(
            (out.kept_bytes, out.dropped_bytes, out.finished),
            (4, None, true)
        );
        assert_eq!(
            (err.kept_bytes, err.dropped_bytes, err.finished),
            (1, Some(0), true)
        );
    }

    #[test]
    fn reads_resume_at_any_offset_and_refuse_one_past_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20, 8);
        let mut w = s.create(&id(TASK), 2).unwrap();
        w.push(Stdout, b"0123456789");
        let c = s.read(TASK, None, Stdout, 4, 3).unwrap();
        assert_eq!((c.offset, c.data.as_slice()), (4, &b"456"[..]));
        assert_eq!(s.read(TASK, None, Stdout, 10, 3).unwrap().data, b"");
        assert!(matches!(
            s.read(TASK, None, Stdout, 11, 3),
            Err(LogError::BadOffset {
                offset: 11,
                kept: 10
            })
        ));
        assert!(matches!(
            s.read(TASK, None, Stderr, 1, 3),
            Err(LogError::BadOffset { offset: 1, kept: 0 })
        ));
        assert!(matches!(
            s.read(TASK, Some(1), Stdout, 0, 3),
            Err(LogError::NotFound(_))
        ));
        assert!(matches!(
            s.read("n1-8", None, Stdout, 0, 3),
            Err(LogError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_reader_is_woken_by_new_output_on_either_stream_and_by_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20, 8);
        let mut w = s.create(&id(TASK), 1).unwrap();
        let mut rx = s.watch(TASK, 1).unwrap();
        w.push(Stdout, b"a");
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow_and_update().of(Stdout).kept_bytes, 1);
        w.push(Stderr, b"bc");
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow_and_update().of(Stderr).kept_bytes, 2);
        drop(w);
        rx.changed().await.unwrap();
        assert!(rx.borrow().finished());
        assert!(s.watch(TASK, 1).is_none(), "no longer being written");
    }

    #[test]
    fn ids_that_are_not_plain_task_ids_never_become_file_names() {
        for bad in [
            "../x-1", "a/b-1", "x-0", "x", "", "x-1\n", "x.y-1", "x-01", "x -1", "x-1/..",
        ] {
            assert!(
                matches!(file_stem(bad, 1), Err(LogError::BadId(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            file_stem(&format!("{}-1", "a".repeat(300)), 1),
            Err(LogError::BadId(_))
        ));
        assert_eq!(file_stem("12D3KooWabc-3", 2).unwrap(), "12D3KooWabc-3.2");
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 10, 8);
        assert!(matches!(
            s.read("../../etc/passwd-1", None, Stdout, 0, 10),
            Err(LogError::BadId(_))
        ));
    }

    /// A link at either stream's name: the run gets no log (nor half of one), nothing is
    /// written through, and reading refuses the link.
    #[test]
    fn a_link_where_a_log_would_go_is_refused_and_not_followed() {
        for stream in OutputStream::BOTH {
            let tmp = tempfile::tempdir().unwrap();
            let s = store(tmp.path(), 1 << 20, 8);
            let target = tmp.path().join("victim");
            std::fs::write(&target, b"precious").unwrap();
            let link = s.path().join(format!("{TASK}.1.{}", stream.name()));
            std::os::unix::fs::symlink(&target, &link).unwrap();
            assert!(matches!(s.create(&id(TASK), 1), Err(LogError::Refused(_))));
            assert!(matches!(
                s.read(TASK, Some(1), stream, 0, 100),
                Err(LogError::Refused(_))
            ));
            assert_eq!(
                std::fs::read(&target).unwrap(),
                b"precious",
                "not written through"
            );
            let left: Vec<String> = s.names().unwrap().into_iter().map(|n| n.0).collect();
            assert_eq!(left, [format!("{TASK}.1.{}", stream.name())], "{stream:?}");
        }
        // A link as the log directory itself is refused too.
        let tmp = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(tmp.path(), other.path().join(LOG_DIR)).unwrap();
        assert!(matches!(
            LogStore::open(other.path(), 10, 8),
            Err(LogError::Refused(_))
        ));
    }

    #[test]
    fn old_finished_logs_are_pruned_by_count_and_runs_going_never() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path(), 1 << 20, 2);
        let going = s.create(&id("n1-1"), 1).unwrap();
        for seq in 2..=5 {
            s.create(&id(&format!("n1-{seq}")), 1).unwrap().finish();
        }
        s.create(&id("n1-6"), 1).unwrap().finish();
        let left: Vec<String> = s.runs().unwrap().into_keys().collect();
        assert!(
            left.contains(&"n1-1.1".to_owned()),
            "the run going stays: {left:?}"
        );
        assert_eq!(
            left.len(),
            1 + 2 + 1,
            "two finished kept, plus the newest: {left:?}"
        );
        drop(going);
        assert!(s.read("n1-6", None, Stderr, 0, 1).is_ok());
        assert!(matches!(
            s.read("n1-2", None, Stdout, 0, 1),
            Err(LogError::NotFound(_))
        ));
        let files = s.names().unwrap();
        assert!(
            !files.iter().any(|f| f.0.starts_with("n1-2.")),
            "every file of a pruned run goes: {files:?}"
        );
    }

    /// Rule 6: a one-file log of an earlier version, and its end, go when the store opens.
    #[test]
    fn an_interleaved_log_of_an_earlier_version_is_removed_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(LOG_DIR);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("n1-1.1.log"), b"out and err").unwrap();
        std::fs::write(dir.join("n1-1.1.end"), b"11 0\n").unwrap();
        let s = store(tmp.path(), 1 << 20, 8);
        assert!(s.names().unwrap().is_empty());
        assert!(matches!(
            s.read("n1-1", None, Stdout, 0, 1),
            Err(LogError::NotFound(_))
        ));
    }
}
