//! The sync back of a read-write repository: the sandbox's working tree, read as a tar stream
//! entry by entry, applied to the host repository through one handle on its root directory,
//! never following a symlink and never touching a `.git` (the rules are the parent module's).
//!
//! Memory (issue 51, finding 7): the stream is never collected. What the sync holds at once is
//! one buffer of [`SMALL_FILE`] bytes (a file up to that size is read whole and compared with
//! the host's; a larger one is copied through the buffer into a temporary file beside its
//! target, then renamed over it), an entry's headers (at most [`HEADER_BUDGET`]: a long name,
//! pax extensions), and a few words per entry (its name and what became of it, to tell what
//! is gone at the end). Files that could make a directory a git directory (`gitdir.rs`'s
//! ingredients: a `HEAD`, a `commondir`, anything under an `objects` or `refs`) wait in an
//! unnamed spool file on the repository's file system until the whole change is seen. The
//! stream as a whole may bring back at most the caller's bound; past it, or when the stream
//! fails, the sync stops, deletes nothing, and says so in its report.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::gitdir::{git_dirs_after, is_git_dir_on_host, is_ingredient, HostEntry, HEAD_PREFIX};
use super::{is_git_path, Meta, MountId};
use crate::sandbox::error::{SandboxError, SandboxResult};

/// The permission bits a synced file may keep: no setuid/setgid/sticky, no group or other
/// write.
const FILE_MODE_MASK: u32 = 0o777 & !0o022;

/// The mode of a directory the sync makes.
const DIR_MODE: u32 = 0o755;

/// How many random temporary names to try before giving up (each is 128 random bits: a clash
/// means someone is planting names, not bad luck).
const TEMP_NAME_TRIES: usize = 4;

/// The largest file the sync reads whole into memory (and the buffer larger ones are copied
/// through): the one buffer a sync holds.
pub const SMALL_FILE: usize = 64 * 1024;

/// The most one entry's headers may take in the stream (a GNU long name or link, pax
/// extensions, the previous entry's padding): a Linux path is at most 4 KiB.
pub const HEADER_BUDGET: u64 = 64 * 1024;

/// What a sync back changed in the repository.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Files written (new or changed).
    pub written: usize,
    /// Files deleted (they were copied in and are gone from the sandbox).
    pub deleted: usize,
    /// Paths not carried back, written or deleted: anything under a `.git` that the task
    /// changed, made or deleted; a place in the repository that is a symlink, not a
    /// directory where the path needs one, not a regular file where a file is written or
    /// deleted, or on another mount; a path that is not plainly relative; anything in a
    /// directory git would take for a repository (`gitdir.rs`). Names as [`shown`] writes
    /// them.
    pub refused: Vec<String>,
    /// Files of the repository that the sandbox holds as something the sync does not carry
    /// (a symlink, a directory, a fifo, a hard link to something not carried), as `path
    /// (what)`: left on the host as they were, neither replaced nor deleted.
    pub kept: Vec<String>,
    /// Why the sync stopped before the end of the workspace (the stream failed, or passed its
    /// bound): what came before was applied, nothing was deleted.
    pub incomplete: Option<String>,
}

impl SyncReport {
    /// The most paths [`SyncReport::summary`] names of each kind.
    const NAMED: usize = 10;

    /// One line for the task's result when the sync did not carry everything back, `None`
    /// when it did.
    pub fn summary(&self) -> Option<String> {
        if self.refused.is_empty() && self.kept.is_empty() && self.incomplete.is_none() {
            return None;
        }
        let list = |paths: &[String]| {
            let mut s: Vec<String> = paths
                .iter()
                .take(Self::NAMED)
                // Quoted and escaped: a task chose these names.
                .map(|p| format!("{p:?}"))
                .collect();
            if paths.len() > Self::NAMED {
                s.push(format!("and {} more", paths.len() - Self::NAMED));
            }
            s.join(", ")
        };
        let mut parts = Vec::new();
        if let Some(why) = &self.incomplete {
            parts.push(format!(
                "it stopped early, so nothing was deleted and later files were not carried: \
                 {why:?}"
            ));
        }
        if !self.refused.is_empty() {
            parts.push(format!(
                "{} refused (a .git or git directory, a symlinked or non-directory place, \
                 another mount): {}",
                self.refused.len(),
                list(&self.refused)
            ));
        }
        if !self.kept.is_empty() {
            parts.push(format!(
                "{} kept as on the host (not a regular file in the sandbox): {}",
                self.kept.len(),
                list(&self.kept)
            ));
        }
        Some(format!(
            "the read-write repository was not synced back whole ({} written, {} deleted); {}",
            self.written,
            self.deleted,
            parts.join("; ")
        ))
    }
}

/// A repository path as the report shows it: bytes that are not UTF-8 as `\xNN` (the name on
/// the host is the bytes themselves; only the report escapes them).
pub fn shown(rel: &Path) -> String {
    let mut s = String::new();
    for chunk in rel.as_os_str().as_bytes().utf8_chunks() {
        s.push_str(chunk.valid());
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02X}"));
        }
    }
    s
}

/// Applies the sandbox's workspace, read from `archive` (a tar stream of the workspace, as
/// `tar -c -C <workspace> .` writes it), to `repo`: new and changed files are written, files
/// from `copied_in` that are gone are deleted, under the parent module's rules: nothing under
/// a `.git` or in a directory git would take for a repository after the sync, nothing through
/// a symlink or onto another mount, files owned by the repository root's owner with `mode &
/// 0o755`. A file whose contents and permission bits did not change is left alone. A hard
/// link comes back as a file with its target's contents. A copied-in file that the sandbox
/// holds as something else (a symlink, a directory) is kept, not deleted, and reported. Names
/// are bytes from the stream to the host, never decoded.
///
/// At most `max_bytes` of the stream are read; past them, or when reading the stream fails,
/// the sync stops: what came before stays applied, nothing is deleted, and
/// [`SyncReport::incomplete`] says why. Memory: the module docs. Errors only when the
/// repository cannot be opened or a write or delete on the host fails.
pub fn sync_back(
    repo: &Path,
    archive: impl Read,
    copied_in: &BTreeSet<PathBuf>,
    max_bytes: u64,
) -> SandboxResult<SyncReport> {
    sync_back_tracked(repo, archive, copied_in, max_bytes).map(|(report, _)| report)
}

/// [`sync_back`], also answering the files the host now holds as the sandbox does: the
/// `copied_in` of the next sync of the same workspace. A live sandbox syncs many times
/// (issue 53): a file one sync carried back and the sandbox deleted afterwards is deleted by
/// the next, as a file copied in would be; a file whose delete was refused is tried again.
pub fn sync_back_tracked(
    repo: &Path,
    archive: impl Read,
    copied_in: &BTreeSet<PathBuf>,
    max_bytes: u64,
) -> SandboxResult<(SyncReport, BTreeSet<PathBuf>)> {
    let root = RepoDir::open(repo)
        .map_err(|e| SandboxError::io(format!("opening {}", repo.display()), e))?;
    let bound = Rc::new(RefCell::new(Bound {
        left: max_bytes,
        max: max_bytes,
        step: HEADER_BUDGET,
        failed: None,
    }));
    let reader = Bounded {
        inner: archive,
        bound: bound.clone(),
    };
    let mut apply = Apply {
        repo,
        root,
        report: SyncReport::default(),
        seen: BTreeMap::new(),
        host_git_dirs: BTreeMap::new(),
        deferred: Vec::new(),
        spool: None,
        spool_len: 0,
        buf: Vec::with_capacity(SMALL_FILE),
    };
    let mut tar = tar::Archive::new(reader);
    let stopped = apply.entries(&mut tar, &bound)?;
    let stopped = match stopped {
        Some(why) => Some(why),
        // The rest of the stream after the archive's end: its end says whether the
        // workspace was read whole (the reading command's exit).
        None => {
            bound.borrow_mut().step = u64::MAX;
            match std::io::copy(&mut tar.into_inner(), &mut std::io::sink()) {
                Ok(_) => None,
                Err(e) => Some(stream_failure(&bound, e)),
            }
        }
    };
    apply.finish(copied_in, stopped)
}

/// The reading side of the stream's bounds, shared with the applier.
struct Bound {
    /// Bytes the stream may still bring.
    left: u64,
    /// The bound on the whole stream.
    max: u64,
    /// Bytes the current step (an entry's headers, or its data) may still take.
    step: u64,
    /// Why reading failed, once it did.
    failed: Option<String>,
}

/// The archive, read under [`Bound`]: fails past the whole stream's bound or the current
/// step's, and remembers why (and any error of the stream itself).
struct Bounded<R> {
    inner: R,
    bound: Rc<RefCell<Bound>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut b = self.bound.borrow_mut();
        if let Some(why) = &b.failed {
            return Err(std::io::Error::other(why.clone()));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let room = b.left.min(b.step);
        let got = if room == 0 {
            // Out of room: fine when the stream ends here, a failure when it goes on.
            let mut probe = [0u8; 1];
            match self.inner.read(&mut probe) {
                Ok(0) => return Ok(0),
                Ok(_) if b.left == 0 => Err(format!(
                    "the workspace is larger than the sync's bound of {} bytes",
                    b.max
                )),
                Ok(_) => Err(format!(
                    "an entry's headers are longer than {HEADER_BUDGET} bytes"
                )),
                Err(e) => Err(format!("reading the workspace: {e}")),
            }
        } else {
            let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            match self.inner.read(&mut buf[..want]) {
                Ok(n) => Ok(n),
                Err(e) => Err(format!("reading the workspace: {e}")),
            }
        };
        match got {
            Ok(n) => {
                b.left -= n as u64;
                b.step -= n as u64;
                Ok(n)
            }
            Err(why) => {
                b.failed = Some(why.clone());
                Err(std::io::Error::other(why))
            }
        }
    }
}

/// Why the stream stopped, from the error reading it gave.
fn stream_failure(bound: &Rc<RefCell<Bound>>, e: std::io::Error) -> String {
    bound
        .borrow()
        .failed
        .clone()
        .unwrap_or_else(|| format!("the workspace archive is malformed: {e}"))
}

/// What the stream held at a path.
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// A file the host now holds exactly (written, or the same already), with its mode.
    OnHost(u32),
    /// A file not carried (refused, or under a `.git` and left as it was).
    Held,
    /// A file waiting in the spool (its index in `deferred`).
    Deferred(usize),
    /// Something else (what it is).
    Other(&'static str),
}

/// A file held back in the spool until the whole change is seen.
struct Deferred {
    rel: PathBuf,
    mode: u32,
    offset: u64,
    len: u64,
    /// Its first [`HEAD_PREFIX`] bytes, for git's test.
    head: Vec<u8>,
}

/// Where an entry's contents come from.
enum Source<'a> {
    /// The stream itself.
    Stream(&'a mut dyn Read),
    /// A file the host holds already (a hard link's target, as written).
    Host(PathBuf),
    /// The spool, from this offset (the length is the entry's).
    Spool(u64),
}

/// An error applying one entry: of the stream (the sync stops and says so) or of the host
/// (the sync fails).
enum Failed {
    Stream(String),
    Host(SandboxError),
}

/// One sync in progress.
struct Apply<'a> {
    repo: &'a Path,
    root: RepoDir,
    report: SyncReport,
    seen: BTreeMap<PathBuf, Seen>,
    /// Directories checked against git's test on the host as it is.
    host_git_dirs: BTreeMap<PathBuf, bool>,
    deferred: Vec<Deferred>,
    /// The unnamed spool file (made at the first deferred file), and how much it holds.
    spool: Option<File>,
    spool_len: u64,
    /// The one buffer: a small file's contents, or a chunk of a larger one.
    buf: Vec<u8>,
}

impl Apply<'_> {
    /// Applies the archive's entries in stream order; `Some(why)` when the stream stopped
    /// before its end.
    fn entries<R: Read>(
        &mut self,
        tar: &mut tar::Archive<Bounded<R>>,
        bound: &Rc<RefCell<Bound>>,
    ) -> SandboxResult<Option<String>> {
        let mut entries = match tar.entries() {
            Ok(e) => e,
            Err(e) => return Ok(Some(stream_failure(bound, e))),
        };
        loop {
            bound.borrow_mut().step = HEADER_BUDGET;
            let mut entry = match entries.next() {
                None => return Ok(None),
                Some(Ok(entry)) => entry,
                Some(Err(e)) => return Ok(Some(stream_failure(bound, e))),
            };
            bound.borrow_mut().step = entry.size();
            let applied = self.entry(&mut entry);
            // Whatever the entry's handling left unread (the next header follows it).
            let drained = std::io::copy(&mut entry, &mut std::io::sink());
            // A failure of the stream says why in the bound's words when the bound saw it
            // (an error of the host's stays one).
            let failed = bound.borrow().failed.clone();
            match applied {
                Ok(()) => {}
                Err(Failed::Stream(why)) => return Ok(Some(failed.unwrap_or(why))),
                Err(Failed::Host(e)) => {
                    return match failed {
                        Some(why) => Ok(Some(why)),
                        None => Err(e),
                    }
                }
            }
            if let Err(e) = drained {
                return Ok(Some(stream_failure(bound, e)));
            }
        }
    }

    /// One entry of the stream.
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), Failed> {
        let Some(rel) = entry_path(&entry.path_bytes()) else {
            return Ok(());
        };
        let kind = entry.header().entry_type();
        let what = match kind {
            k if k.is_file() => {
                let mode = entry.header().mode().unwrap_or(0o644);
                let size = entry.size();
                return self.file(rel, mode, Source::Stream(entry), size);
            }
            tar::EntryType::Link => {
                let target = entry.link_name_bytes().and_then(|t| entry_path(&t));
                match target.and_then(|t| self.seen.get(&t).copied().map(|s| (t, s))) {
                    Some((t, Seen::OnHost(mode))) => {
                        let size = self.host_size(&t).map_err(Failed::Host)?;
                        if let Some(size) = size {
                            return self.file(rel, mode, Source::Host(t), size);
                        }
                        "a hard link to something not carried back"
                    }
                    Some((_, Seen::Deferred(i))) => {
                        let d = &self.deferred[i];
                        let (mode, offset, len) = (d.mode, d.offset, d.len);
                        return self.file(rel, mode, Source::Spool(offset), len);
                    }
                    _ => "a hard link to something not carried back",
                }
            }
            tar::EntryType::Symlink => "a symlink",
            tar::EntryType::Directory => "a directory",
            tar::EntryType::Char | tar::EntryType::Block => "a device",
            tar::EntryType::Fifo => "a fifo",
            _ => "an entry of another kind",
        };
        self.seen.insert(rel, Seen::Other(what));
        Ok(())
    }

    /// A regular file of `size` bytes at `rel`, from `source`.
    fn file(
        &mut self,
        rel: PathBuf,
        mode: u32,
        mut source: Source<'_>,
        size: u64,
    ) -> Result<(), Failed> {
        let Some((parents, name)) = split(&rel) else {
            self.report.refused.push(shown(&rel));
            self.seen.insert(rel, Seen::Held);
            return Ok(());
        };
        let under_git = is_git_path(&rel) || self.under_host_git_dir(&rel).map_err(Failed::Host)?;
        let seen = if under_git {
            // Never written; reported only when the task changed it.
            let same = self.holds(&parents, name, &mut source, size, &rel)?;
            if !same {
                self.report.refused.push(shown(&rel));
            }
            Seen::Held
        } else if is_ingredient(&rel) {
            Seen::Deferred(self.defer(&rel, mode, &mut source, size)?)
        } else {
            match self.write(&parents, name, &mut source, size, mode, &rel)? {
                Outcome::Done => {
                    self.report.written += 1;
                    Seen::OnHost(mode)
                }
                Outcome::Unchanged => Seen::OnHost(mode),
                Outcome::Refused => {
                    self.report.refused.push(shown(&rel));
                    Seen::Held
                }
            }
        };
        self.seen.insert(rel, seen);
        Ok(())
    }

    /// Whether some directory above `rel` (the root included) is a git directory on the host
    /// as it is. Each directory is judged once a sync.
    fn under_host_git_dir(&mut self, rel: &Path) -> SandboxResult<bool> {
        let mut dir = PathBuf::new();
        let parts: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
        for i in 0..parts.len() {
            if i > 0 {
                dir.push(parts[i - 1]);
            }
            let is = match self.host_git_dirs.get(&dir) {
                Some(is) => *is,
                None => {
                    let root = &self.root;
                    let is = is_git_dir_on_host(&dir, &mut |p| root.host_entry(p))
                        .map_err(|e| io_err("reading", self.repo, &dir, e))?;
                    self.host_git_dirs.insert(dir.clone(), is);
                    is
                }
            };
            if is {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Reads up to `len` bytes of `source` into the buffer (`len` at most [`SMALL_FILE`]).
    fn read_small(&mut self, source: &mut Source<'_>, len: u64) -> Result<(), Failed> {
        self.buf.clear();
        match source {
            Source::Stream(r) => r
                .take(len)
                .read_to_end(&mut self.buf)
                .map(drop)
                .map_err(|e| Failed::Stream(format!("reading the workspace: {e}"))),
            Source::Host(rel) => {
                let mut file = self.open_host(rel)?;
                (&mut file)
                    .take(len)
                    .read_to_end(&mut self.buf)
                    .map(drop)
                    .map_err(|e| Failed::Host(io_err("reading", self.repo, rel, e)))
            }
            Source::Spool(offset) => {
                let repo = self.repo;
                let at = *offset;
                self.spool_file()?;
                let spool = self.spool.as_ref().expect("made above");
                self.buf
                    .resize(usize::try_from(len).unwrap_or(SMALL_FILE), 0);
                spool.read_exact_at(&mut self.buf, at).map_err(|e| {
                    Failed::Host(io_err("reading the spool in", repo, Path::new(""), e))
                })
            }
        }
    }

    /// Copies `len` bytes of `source` to `out` through the buffer; `compare`: also whether they
    /// equal what `compare` holds (read alongside).
    fn copy(
        &mut self,
        source: &mut Source<'_>,
        len: u64,
        out: &mut dyn Write,
        mut compare: Option<&mut File>,
        rel: &Path,
    ) -> Result<bool, Failed> {
        let repo = self.repo;
        let mut host_src = match source {
            Source::Host(t) => Some(self.open_host(&t.clone())?),
            _ => None,
        };
        let mut spool_at = match source {
            Source::Spool(offset) => {
                self.spool_file()?;
                *offset
            }
            _ => 0,
        };
        self.buf.resize(SMALL_FILE, 0);
        let mut other = vec![0u8; if compare.is_some() { SMALL_FILE } else { 0 }];
        let mut same = compare.is_some();
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left.min(SMALL_FILE as u64)).unwrap_or(SMALL_FILE);
            let chunk = &mut self.buf[..want];
            let got = match (&mut *source, host_src.as_mut()) {
                (Source::Stream(r), _) => r
                    .read(chunk)
                    .map_err(|e| Failed::Stream(format!("reading the workspace: {e}")))?,
                (Source::Host(_), Some(f)) => f
                    .read(chunk)
                    .map_err(|e| Failed::Host(io_err("reading", repo, rel, e)))?,
                _ => {
                    let spool = self.spool.as_ref().expect("made above");
                    let n = spool.read_at(chunk, spool_at).map_err(|e| {
                        Failed::Host(io_err("reading the spool in", repo, Path::new(""), e))
                    })?;
                    spool_at += n as u64;
                    n
                }
            };
            if got == 0 {
                return Err(Failed::Stream(format!(
                    "the workspace ended inside {}",
                    shown(rel)
                )));
            }
            out.write_all(&self.buf[..got])
                .map_err(|e| Failed::Host(io_err("writing", repo, rel, e)))?;
            if let (true, Some(host)) = (same, compare.as_deref_mut()) {
                let theirs = &mut other[..got];
                same = host.read_exact(theirs).is_ok() && *theirs == self.buf[..got];
            }
            left -= got as u64;
        }
        Ok(same)
    }

    /// Opens the host's regular file `rel` for reading, as [`read_is`] opens files.
    fn open_host(&self, rel: &Path) -> Result<File, Failed> {
        let failed = |e: std::io::Error| Failed::Host(io_err("reading", self.repo, rel, e));
        let gone = || {
            Failed::Host(io_err(
                "reading",
                self.repo,
                rel,
                std::io::Error::other("changed on the host during the sync"),
            ))
        };
        let (parents, name) = split(rel).ok_or_else(gone)?;
        let Walk::Dir(dir) = self.root.walk(&parents, false).map_err(failed)? else {
            return Err(gone());
        };
        open_regular(&dir, name).map_err(failed)?.ok_or_else(gone)
    }

    /// The size of the host's regular file `rel` (a hard link's target the sync carried),
    /// `None` when it is no longer one.
    fn host_size(&self, rel: &Path) -> SandboxResult<Option<u64>> {
        let Some((parents, name)) = split(rel) else {
            return Ok(None);
        };
        let dir = match self.root.walk(&parents, false) {
            Ok(Walk::Dir(dir)) => dir,
            Ok(_) => return Ok(None),
            Err(e) => return Err(io_err("reading", self.repo, rel, e)),
        };
        match self.root.place(&dir, name) {
            Ok(Place::File(meta)) => Ok(Some(meta.size)),
            Ok(_) => Ok(None),
            Err(e) => Err(io_err("reading", self.repo, rel, e)),
        }
    }

    /// The spool, made (unnamed, in the repository's root directory) at first use.
    fn spool_file(&mut self) -> Result<&mut File, Failed> {
        if self.spool.is_none() {
            let repo = self.repo;
            let made = (|| {
                let (tmp, fd) = create_temp(&self.root.root, OFlags::RDWR)?;
                rustix::fs::unlinkat(&self.root.root, &tmp, AtFlags::empty())?;
                Ok::<_, std::io::Error>(File::from(fd))
            })();
            self.spool =
                Some(made.map_err(|e| {
                    Failed::Host(io_err("making a spool in", repo, Path::new(""), e))
                })?);
        }
        Ok(self.spool.as_mut().expect("just made"))
    }

    /// Holds a file back in the spool; returns its index.
    fn defer(
        &mut self,
        rel: &Path,
        mode: u32,
        source: &mut Source<'_>,
        size: u64,
    ) -> Result<usize, Failed> {
        let repo = self.repo;
        let offset = self.spool_len;
        // Another descriptor of the same spool: written at its end while `copy` may read an
        // earlier part of it (a hard link to a held-back file), each at its own offset.
        let file = self
            .spool_file()?
            .try_clone()
            .map_err(|e| Failed::Host(io_err("writing the spool in", repo, Path::new(""), e)))?;
        let mut out = SpoolWriter { file, at: offset };
        self.copy(source, size, &mut out, None, rel)?;
        self.spool_len = out.at;
        // Its first bytes, for git's test of a `HEAD`.
        let prefix = size.min(HEAD_PREFIX as u64);
        self.read_small(&mut Source::Spool(offset), prefix)?;
        self.deferred.push(Deferred {
            rel: rel.to_path_buf(),
            mode,
            offset,
            len: size,
            head: self.buf.clone(),
        });
        Ok(self.deferred.len() - 1)
    }

    /// Whether `parents/name` on the host holds exactly what `source` brings (read whole
    /// either way); nothing is made.
    fn holds(
        &mut self,
        parents: &[&OsStr],
        name: &OsStr,
        source: &mut Source<'_>,
        size: u64,
        rel: &Path,
    ) -> Result<bool, Failed> {
        let repo = self.repo;
        let host_err = |e| Failed::Host(io_err("reading", repo, rel, e));
        let mut host = match self.root.walk(parents, false).map_err(host_err)? {
            Walk::Dir(dir) => match self.root.place(&dir, name).map_err(host_err)? {
                Place::File(meta) if meta.size == size => {
                    open_regular(&dir, name).map_err(host_err)?
                }
                _ => None,
            },
            _ => None,
        };
        let same = self.copy(source, size, &mut std::io::sink(), host.as_mut(), rel)?;
        Ok(host.is_some() && same)
    }

    /// Writes what `source` brings as `parents/name` with permission bits from `mode`
    /// (masked), unless the file there already has these contents and bits.
    fn write(
        &mut self,
        parents: &[&OsStr],
        name: &OsStr,
        source: &mut Source<'_>,
        size: u64,
        mode: u32,
        rel: &Path,
    ) -> Result<Outcome, Failed> {
        let repo = self.repo;
        let host_err = |e| Failed::Host(io_err("writing", repo, rel, e));
        let Walk::Dir(dir) = self.root.walk(parents, true).map_err(host_err)? else {
            return Ok(Outcome::Refused);
        };
        if size <= SMALL_FILE as u64 {
            self.read_small(source, size)?;
            if self.buf.len() as u64 != size {
                return Err(Failed::Stream(format!(
                    "the workspace ended inside {}",
                    shown(rel)
                )));
            }
            return self
                .root
                .write_in(&dir, name, &self.buf, mode)
                .map_err(host_err);
        }
        // Larger: copied through the buffer into a temporary beside the target, compared
        // with the host's file on the way; renamed over it only when they differ.
        let masked = mode & FILE_MODE_MASK;
        let mut host = match self.root.place(&dir, name).map_err(host_err)? {
            Place::Other => return Ok(Outcome::Refused),
            Place::File(meta) => {
                let h = meta.mode & 0o777;
                let same_mode = h == mode & 0o777 || h == masked;
                if same_mode && meta.size == size {
                    open_regular(&dir, name).map_err(host_err)?
                } else {
                    None
                }
            }
            Place::Absent => None,
        };
        let (tmp, fd) = create_temp(&dir, OFlags::WRONLY).map_err(host_err)?;
        let mut file = File::from(fd);
        let copied = self.copy(source, size, &mut file, host.as_mut(), rel);
        let done = match copied {
            Ok(true) if host.is_some() => Ok(Outcome::Unchanged),
            Ok(_) => self
                .root
                .finish(&dir, &tmp, file, name, masked)
                .map(|()| Outcome::Done)
                .map_err(host_err),
            Err(e) => Err(e),
        };
        if !matches!(done, Ok(Outcome::Done)) {
            let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
        }
        done
    }

    /// After the stream: the held-back files written or refused by git's test over the whole
    /// change, and (when the stream was read whole) the files that are gone deleted.
    fn finish(
        mut self,
        copied_in: &BTreeSet<PathBuf>,
        stopped: Option<String>,
    ) -> SandboxResult<(SyncReport, BTreeSet<PathBuf>)> {
        // What the host holds as the sandbox does once this sync is applied (the next sync's
        // copied-in set): the files written or already the same, and what was copied in but
        // for what is deleted (or was already gone) below.
        let mut next: BTreeSet<PathBuf> = self
            .seen
            .iter()
            .filter(|(_, s)| matches!(s, Seen::OnHost(_)))
            .map(|(p, _)| p.clone())
            .collect();
        let gone: Vec<&Path> = match stopped {
            Some(_) => Vec::new(),
            None => copied_in
                .iter()
                .filter(|p| !self.seen.contains_key(p.as_path()))
                .map(PathBuf::as_path)
                .collect(),
        };
        let empty: &[u8] = &[];
        let mut heads: BTreeMap<&Path, &[u8]> = BTreeMap::new();
        for d in &self.deferred {
            heads.insert(&d.rel, &d.head);
        }
        let written = self.seen.iter().filter_map(|(p, s)| match s {
            Seen::Other(_) => None,
            _ => Some((
                p.as_path(),
                heads.get(p.as_path()).copied().unwrap_or(empty),
            )),
        });
        let root = &self.root;
        let git_dirs = git_dirs_after(written, gone.iter().copied(), |rel| root.host_entry(rel))
            .map_err(|e| SandboxError::io(format!("reading {}", self.repo.display()), e))?;
        let in_git = |rel: &Path| is_git_path(rel) || git_dirs.refuses(rel);
        let deferred = std::mem::take(&mut self.deferred);
        for d in &deferred {
            let Some((parents, name)) = split(&d.rel) else {
                continue;
            };
            let mut source = Source::Spool(d.offset);
            let outcome = if in_git(&d.rel) {
                match self.holds(&parents, name, &mut source, d.len, &d.rel) {
                    Ok(true) => Outcome::Unchanged,
                    Ok(false) => Outcome::Refused,
                    Err(Failed::Host(e)) => return Err(e),
                    Err(Failed::Stream(why)) => return Err(spool_short(why)),
                }
            } else {
                match self.write(&parents, name, &mut source, d.len, d.mode, &d.rel) {
                    Ok(o) => o,
                    Err(Failed::Host(e)) => return Err(e),
                    Err(Failed::Stream(why)) => return Err(spool_short(why)),
                }
            };
            match outcome {
                Outcome::Done => self.report.written += 1,
                Outcome::Unchanged => {}
                Outcome::Refused => self.report.refused.push(shown(&d.rel)),
            }
            if !in_git(&d.rel) && outcome != Outcome::Refused {
                next.insert(d.rel.clone());
            }
        }
        for rel in copied_in {
            if let Some(Seen::Other(what)) = self.seen.get(rel) {
                self.report.kept.push(format!("{} ({what})", shown(rel)));
            }
        }
        let mut gone_now: BTreeSet<&Path> = BTreeSet::new();
        for rel in gone {
            let outcome = match split(rel) {
                Some((parents, name)) if !in_git(rel) => self
                    .root
                    .delete(&parents, name)
                    .map_err(|e| io_err("deleting", self.repo, rel, e))?,
                _ => Outcome::Refused,
            };
            match outcome {
                Outcome::Done => self.report.deleted += 1,
                Outcome::Unchanged => {}
                Outcome::Refused => self.report.refused.push(shown(rel)),
            }
            if outcome != Outcome::Refused {
                gone_now.insert(rel);
            }
        }
        next.extend(
            copied_in
                .iter()
                .filter(|p| !gone_now.contains(p.as_path()))
                .cloned(),
        );
        self.report.refused.sort();
        self.report.kept.sort();
        self.report.incomplete = stopped;
        Ok((self.report, next))
    }
}

/// Writes at its own offset of the spool (`pwrite`).
struct SpoolWriter {
    file: File,
    at: u64,
}

impl Write for SpoolWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn spool_short(why: String) -> SandboxError {
    SandboxError::io("reading the sync's spool", std::io::Error::other(why))
}

/// A path of the stream as a repository path: bytes as they are, without the leading `./` and
/// a trailing `/`; `None` for the workspace itself.
fn entry_path(raw: &[u8]) -> Option<PathBuf> {
    let mut raw = raw;
    while let Some(rest) = raw.strip_prefix(b"./") {
        raw = rest;
    }
    while let Some(rest) = raw.strip_suffix(b"/") {
        raw = rest;
    }
    if raw.is_empty() || raw == b"." {
        return None;
    }
    Some(PathBuf::from(OsString::from_vec(raw.to_vec())))
}

fn io_err(what: &str, repo: &Path, rel: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::io(format!("{what} {}", repo.join(rel).display()), e)
}

/// The directories leading to `rel` and its name, when `rel` is plainly relative (no `..`,
/// no root, not empty) and holds no NUL (no file has one; a stream that says so is refused
/// for that path, not failed whole).
fn split(rel: &Path) -> Option<(Vec<&OsStr>, &OsStr)> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) if !p.as_bytes().contains(&0) => parts.push(p),
            _ => return None,
        }
    }
    let name = parts.pop()?;
    Some((parts, name))
}

/// What became of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Written or deleted.
    Done,
    /// Nothing to do: the same contents and mode, or already gone.
    Unchanged,
    /// Not carried back (reported).
    Refused,
}

/// A directory reached from the root, or why not.
enum Walk {
    Dir(OwnedFd),
    /// A component does not exist (only when not making them).
    Missing,
    /// A component is a symlink, not a directory, or on another mount.
    Refused,
}

/// What is at a name, for writing or deleting a file there.
enum Place {
    Absent,
    /// A regular file on the root's mount.
    File(Meta),
    /// A symlink, directory, device, fifo or socket, or a file on another mount.
    Other,
}

/// The repository, held by its root directory.
struct RepoDir {
    root: OwnedFd,
    mount: MountId,
    /// The root directory's uid and gid: who synced files belong to.
    owner: (u32, u32),
}

impl RepoDir {
    fn open(repo: &Path) -> std::io::Result<RepoDir> {
        let root = rustix::fs::open(
            repo,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let meta = Meta::at(&root, Path::new(""))?;
        Ok(RepoDir {
            root,
            mount: meta.mount,
            owner: (meta.uid, meta.gid),
        })
    }

    /// Opens the directory `parents` below the root one component at a time, never following
    /// a symlink nor entering another mount; `create`: makes the missing ones.
    fn walk(&self, parents: &[&OsStr], create: bool) -> std::io::Result<Walk> {
        let mut dir = self.root.try_clone()?;
        for &name in parents {
            let next = match open_dir(&dir, name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => self.make_dir(&dir, name)?,
                Err(Errno::NOENT) => return Ok(Walk::Missing),
                Err(Errno::LOOP | Errno::NOTDIR) => return Ok(Walk::Refused),
                Err(e) => return Err(e.into()),
            };
            if Meta::at(&next, Path::new(""))?.mount != self.mount {
                return Ok(Walk::Refused);
            }
            dir = next;
        }
        Ok(Walk::Dir(dir))
    }

    /// Makes directory `name` in `dir`, owned by the repository's owner, mode 0o755, and opens
    /// it. One made meanwhile by someone else is opened as it is.
    fn make_dir(&self, dir: &OwnedFd, name: &OsStr) -> std::io::Result<OwnedFd> {
        match rustix::fs::mkdirat(dir, name, Mode::RWXU) {
            Ok(()) => {
                let fd = open_dir(dir, name)?;
                self.own(&fd)?;
                rustix::fs::fchmod(&fd, Mode::from_bits_truncate(DIR_MODE))?;
                Ok(fd)
            }
            Err(Errno::EXIST) => Ok(open_dir(dir, name)?),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives the open file `fd` to the repository's owner. A node not running as root may not
    /// give files away; they then stay the node user's, which grants nothing.
    fn own(&self, fd: impl AsFd) -> std::io::Result<()> {
        let (uid, gid) = self.owner;
        match rustix::fs::fchown(
            fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        ) {
            Err(Errno::PERM) if !rustix::process::geteuid().is_root() => Ok(()),
            r => Ok(r?),
        }
    }

    /// What `name` in `dir` is, as far as writing or deleting a file there goes.
    fn place(&self, dir: &OwnedFd, name: &OsStr) -> std::io::Result<Place> {
        match Meta::at(dir, Path::new(name)) {
            Ok(m) if m.kind == FileType::RegularFile && m.mount == self.mount => Ok(Place::File(m)),
            Ok(_) => Ok(Place::Other),
            Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => Ok(Place::Absent),
            Err(e) => Err(e),
        }
    }

    /// Writes `data` as `name` in `dir` with permission bits from `mode` (masked), unless the
    /// file there already has these contents and bits.
    fn write_in(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        data: &[u8],
        mode: u32,
    ) -> std::io::Result<Outcome> {
        let masked = mode & FILE_MODE_MASK;
        match self.place(dir, name)? {
            Place::Other => return Ok(Outcome::Refused),
            Place::File(meta) => {
                // The bits the task left, or what masking them gives, count as unchanged: a
                // group-writable file the task did not touch keeps its mode.
                let host = meta.mode & 0o777;
                let same_mode = host == mode & 0o777 || host == masked;
                if same_mode && meta.size == data.len() as u64 && read_is(dir, name, data)? {
                    return Ok(Outcome::Unchanged);
                }
            }
            Place::Absent => {}
        }
        self.replace(dir, name, data, masked)?;
        Ok(Outcome::Done)
    }

    /// Writes a new file in `dir` under a random name, owns, modes and syncs it through its
    /// descriptor, and renames it to `name` (replacing what is there; a hard link to the old
    /// file is left alone).
    fn replace(&self, dir: &OwnedFd, name: &OsStr, data: &[u8], mode: u32) -> std::io::Result<()> {
        let (tmp, fd) = create_temp(dir, OFlags::WRONLY)?;
        let mut file = File::from(fd);
        let written = file
            .write_all(data)
            .and_then(|()| self.finish(dir, &tmp, file, name, mode));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
        }
        written
    }

    /// Owns, modes and syncs the temporary `tmp` in `dir` (written through `file`) and renames
    /// it to `name`. The caller removes `tmp` when this fails.
    fn finish(
        &self,
        dir: &OwnedFd,
        tmp: &str,
        file: File,
        name: &OsStr,
        mode: u32,
    ) -> std::io::Result<()> {
        self.own(&file)?;
        rustix::fs::fchmod(&file, Mode::from_bits_truncate(mode))?;
        file.sync_all()?;
        drop(file);
        rustix::fs::renameat(dir, tmp, dir, name)?;
        Ok(())
    }

    /// Deletes `parents/name` when it is a regular file on the root's mount.
    fn delete(&self, parents: &[&OsStr], name: &OsStr) -> std::io::Result<Outcome> {
        let dir = match self.walk(parents, false)? {
            Walk::Dir(dir) => dir,
            Walk::Missing => return Ok(Outcome::Unchanged),
            Walk::Refused => return Ok(Outcome::Refused),
        };
        match self.place(&dir, name)? {
            Place::Other => Ok(Outcome::Refused),
            Place::Absent => Ok(Outcome::Unchanged),
            // Unlinking a name removes that name only, whatever it became meanwhile.
            Place::File(_) => match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
                Ok(()) => Ok(Outcome::Done),
                Err(Errno::NOENT) => Ok(Outcome::Unchanged),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// What the repository holds at `rel` for git's test (`gitdir.rs`), never following a
    /// symlink: a place behind a symlink or on another mount counts as something there.
    fn host_entry(&self, rel: &Path) -> std::io::Result<HostEntry> {
        let Some((parents, name)) = split(rel) else {
            return Ok(HostEntry::Other);
        };
        let dir = match self.walk(&parents, false)? {
            Walk::Dir(dir) => dir,
            Walk::Missing => return Ok(HostEntry::Absent),
            Walk::Refused => return Ok(HostEntry::Other),
        };
        match Meta::at(&dir, Path::new(name)) {
            Ok(m) if m.kind == FileType::RegularFile => {
                Ok(HostEntry::File(read_prefix(&dir, name)?))
            }
            Ok(m) if m.kind == FileType::Symlink => Ok(HostEntry::Symlink(
                rustix::fs::readlinkat(&dir, name, Vec::new())?.into_bytes(),
            )),
            Ok(_) => Ok(HostEntry::Other),
            Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => {
                Ok(HostEntry::Absent)
            }
            Err(e) => Err(e),
        }
    }
}

fn open_dir(dir: impl AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Regular file `name` in `dir`, opened for reading without following a symlink and without
/// blocking (a fifo swapped in meanwhile does not hang the sync); `None` when it is not one.
fn open_regular(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Option<File>> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::fstat(&fd)?.st_mode & 0o170000 != 0o100000 {
        return Ok(None);
    }
    Ok(Some(File::from(fd)))
}

/// Whether regular file `name` in `dir` holds exactly `data` ([`open_regular`]).
fn read_is(dir: &OwnedFd, name: &OsStr, data: &[u8]) -> std::io::Result<bool> {
    let Some(file) = open_regular(dir, name)? else {
        return Ok(false);
    };
    let mut held = Vec::with_capacity(data.len());
    file.take(data.len() as u64 + 1).read_to_end(&mut held)?;
    Ok(held == data)
}

/// The first [`HEAD_PREFIX`] bytes of regular file `name` in `dir` (empty when it is no longer
/// one).
fn read_prefix(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Vec<u8>> {
    let Some(file) = open_regular(dir, name)? else {
        return Ok(Vec::new());
    };
    let mut held = Vec::with_capacity(HEAD_PREFIX);
    file.take(HEAD_PREFIX as u64).read_to_end(&mut held)?;
    Ok(held)
}

/// Creates a new file in `dir` under an unpredictable name, mode 0o600 until it is finished.
/// `O_EXCL` refuses an existing name, a symlink included, so nothing planted is opened.
fn create_temp(dir: &OwnedFd, access: OFlags) -> std::io::Result<(String, OwnedFd)> {
    let mut last = Errno::EXIST;
    for _ in 0..TEMP_NAME_TRIES {
        let mut random = [0u8; 16];
        let got = rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
        if got != random.len() {
            return Err(std::io::Error::other("getrandom returned too few bytes"));
        }
        let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!(".chorus-sync-{hex}");
        match rustix::fs::openat(
            dir,
            name.as_str(),
            access | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.into())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;
    use crate::sandbox::repo::tests::TmpfsGuard;
    use crate::sandbox::{FileEntry, FileTree};

    /// [`sync_back`] of a workspace holding `tree`'s files and `others` (a symlink or a
    /// directory each), streamed as a tar archive in name order, under a generous bound.
    fn sync_tree(
        repo: &Path,
        tree: &FileTree,
        others: &BTreeMap<String, &'static str>,
        copied_in: &BTreeSet<PathBuf>,
    ) -> SandboxResult<SyncReport> {
        sync_tree_tracked(repo, tree, others, copied_in).map(|(report, _)| report)
    }

    fn sync_tree_tracked(
        repo: &Path,
        tree: &FileTree,
        others: &BTreeMap<String, &'static str>,
        copied_in: &BTreeSet<PathBuf>,
    ) -> SandboxResult<(SyncReport, BTreeSet<PathBuf>)> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut all: Vec<&String> = tree.keys().chain(others.keys()).collect();
        all.sort();
        for path in all {
            let mut header = tar::Header::new_gnu();
            match (tree.get(path), others.get(path).copied()) {
                (Some(entry), _) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(entry.mode);
                    header.set_size(entry.data.len() as u64);
                    tar.append_data(&mut header, path, entry.data.as_slice())
                        .unwrap();
                }
                (None, Some("a symlink")) => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    tar.append_link(&mut header, path, "elsewhere").unwrap();
                }
                (None, _) => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(0o755);
                    header.set_size(0);
                    tar.append_data(&mut header, path, std::io::empty())
                        .unwrap();
                }
            }
        }
        let archive = tar.into_inner().unwrap();
        sync_back_tracked(repo, archive.as_slice(), copied_in, 1 << 30)
    }

    fn entry(data: &[u8], mode: u32) -> FileEntry {
        FileEntry {
            data: data.to_vec(),
            mode,
        }
    }

    fn tree<const N: usize>(files: [(&str, &[u8], u32); N]) -> FileTree {
        files
            .into_iter()
            .map(|(p, d, m)| (p.to_string(), entry(d, m)))
            .collect()
    }

    fn paths<const N: usize>(paths: [&str; N]) -> BTreeSet<PathBuf> {
        paths.into_iter().map(PathBuf::from).collect()
    }

    /// A repository with a `.git` as git makes it (config, HEAD, a submodule's gitdir) and a
    /// README; returns it with the set pack_repo would call copied in.
    fn git_repo() -> (tempfile::TempDir, BTreeSet<PathBuf>) {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::create_dir_all(r.join(".git/modules/sub")).unwrap();
        std::fs::create_dir_all(r.join(".git/info")).unwrap();
        std::fs::create_dir_all(r.join("sub")).unwrap();
        std::fs::write(r.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::write(r.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(r.join(".git/index"), "DIRC").unwrap();
        std::fs::write(r.join(".git/modules/sub/config"), "[core]\n").unwrap();
        std::fs::write(r.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        std::fs::write(r.join("README.md"), "hello\n").unwrap();
        let copied_in = paths([
            ".git/HEAD",
            ".git/config",
            ".git/index",
            ".git/modules/sub/config",
            "README.md",
            "sub/.git",
        ]);
        (repo, copied_in)
    }

    fn read(path: impl AsRef<Path>) -> Vec<u8> {
        std::fs::read(path).unwrap()
    }

    #[test]
    fn sync_back_writes_deletes_and_refuses_hooks_and_symlinked_places() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("keep.txt"), "same").unwrap();
        std::fs::write(repo.path().join("gone.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), repo.path().join("out")).unwrap();
        let copied_in = paths(["keep.txt", "gone.txt"]);
        let tree = tree([
            ("keep.txt", b"same", 0o644),
            ("new/dir/file.txt", b"new", 0o4755),
            (".git/hooks/post-checkout", b"evil", 0o755),
            ("out/escape.txt", b"escape", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
        assert_eq!(report.written, 1);
        assert_eq!(report.deleted, 1);
        assert_eq!(
            report.refused,
            [".git/hooks/post-checkout", "out/escape.txt"],
            "{report:?}"
        );
        assert!(!repo.path().join("gone.txt").exists());
        assert!(!repo.path().join(".git").exists());
        assert!(!outside.path().join("escape.txt").exists());
        let mode = std::fs::metadata(repo.path().join("new/dir/file.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "setuid bit dropped");
    }

    /// Issue 53: a live sandbox syncs many times, each from what the one before left. What
    /// the host then holds as the sandbox does is the next sync's copied-in set: the files
    /// written or already the same, and what was copied in but for what was deleted; never a
    /// file whose write was refused. So a file one sync brought back and the sandbox deleted
    /// later is deleted by the next sync.
    #[test]
    fn each_sync_starts_from_what_the_one_before_left() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("keep.txt"), "same").unwrap();
        std::fs::write(repo.path().join("gone.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), repo.path().join("out")).unwrap();
        let copied_in = paths(["keep.txt", "gone.txt"]);
        let first = tree([
            ("keep.txt", b"same", 0o644),
            ("new.txt", b"new", 0o644),
            ("out/escape.txt", b"escape", 0o644),
        ]);
        let (report, next) =
            sync_tree_tracked(repo.path(), &first, &BTreeMap::new(), &copied_in).unwrap();
        assert_eq!((report.written, report.deleted), (1, 1), "{report:?}");
        assert_eq!(next, paths(["keep.txt", "new.txt"]));
        // The sandbox deletes what the first sync brought back.
        let second = tree([("keep.txt", b"same", 0o644)]);
        let (report, next) =
            sync_tree_tracked(repo.path(), &second, &BTreeMap::new(), &next).unwrap();
        assert_eq!((report.written, report.deleted), (0, 1), "{report:?}");
        assert!(!repo.path().join("new.txt").exists());
        assert_eq!(next, paths(["keep.txt"]));
    }

    /// Issue 33, finding 1: `core.fsmonitor` would run on the host's next `git status`.
    #[test]
    fn git_config_with_fsmonitor_is_not_synced_back() {
        let (repo, copied_in) = git_repo();
        let before = read(repo.path().join(".git/config"));
        let mut config = before.clone();
        config.extend_from_slice(b"\tfsmonitor = \"touch /tmp/pwned\"\n");
        let tree = tree([
            (".git/config", &config, 0o644),
            (".git/HEAD", b"ref: refs/heads/main\n", 0o644),
            (".git/index", b"DIRC", 0o644),
            (".git/modules/sub/config", b"[core]\n", 0o644),
            ("README.md", b"hello\n", 0o644),
            ("sub/.git", b"gitdir: ../.git/modules/sub\n", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
        assert_eq!(read(repo.path().join(".git/config")), before);
        assert_eq!(
            report,
            SyncReport {
                refused: vec![".git/config".into()],
                ..SyncReport::default()
            },
            "unchanged .git files are not reported"
        );
    }

    /// Issue 33, finding 1: `core.hooksPath` pointing at the working tree, in the top-level
    /// config or in a submodule's (`.git/modules/sub/config`).
    #[test]
    fn git_config_with_hooks_path_is_not_synced_back() {
        let (repo, _) = git_repo();
        let before = read(repo.path().join(".git/config"));
        let before_sub = read(repo.path().join(".git/modules/sub/config"));
        let tree = tree([
            (".git/config", b"[core]\n\thooksPath = .githooks\n", 0o644),
            (
                ".git/modules/sub/config",
                b"[core]\n\thooksPath = /x\n",
                0o644,
            ),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert_eq!(read(repo.path().join(".git/config")), before);
        assert_eq!(
            read(repo.path().join(".git/modules/sub/config")),
            before_sub
        );
        assert_eq!(report.refused, [".git/config", ".git/modules/sub/config"]);
        assert_eq!(report.written, 0);
    }

    /// Issue 33, finding 1: a submodule's hook, and the submodule's `.git` file redirected to a
    /// gitdir of the task's choosing.
    #[test]
    fn submodule_hooks_and_gitdir_files_are_not_synced_back() {
        let (repo, _) = git_repo();
        let tree = tree([
            (
                ".git/modules/sub/hooks/post-checkout",
                b"#!/bin/sh\nevil\n",
                0o755,
            ),
            ("sub/.git", b"gitdir: /tmp/evil-gitdir\n", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert!(!repo.path().join(".git/modules/sub/hooks").exists());
        assert_eq!(
            read(repo.path().join("sub/.git")),
            b"gitdir: ../.git/modules/sub\n"
        );
        assert_eq!(
            report.refused,
            [".git/modules/sub/hooks/post-checkout", "sub/.git"]
        );
    }

    /// Issue 33, finding 1: `.git/info/attributes` naming a filter driver.
    #[test]
    fn git_info_attributes_are_not_synced_back() {
        let (repo, _) = git_repo();
        let tree = tree([(".git/info/attributes", b"* filter=evil\n", 0o644)]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert!(!repo.path().join(".git/info/attributes").exists());
        assert_eq!(report.refused, [".git/info/attributes"]);
    }

    /// Issue 52, class 6: a `.git` in another letter case is a `.git` (git on a
    /// case-insensitive file system takes `.GIT/config` for `.git/config`): never written.
    #[test]
    fn a_dot_git_in_another_letter_case_is_not_synced_back() {
        let (repo, _) = git_repo();
        let before = read(repo.path().join(".git/config"));
        let tree = tree([
            (
                ".GIT/config",
                b"[core]\n\tfsmonitor = \"touch /x\"\n",
                0o644,
            ),
            ("sub/.Git/hooks/post-checkout", b"#!/bin/sh\n", 0o755),
            ("lib/.gIT", b"gitdir: /tmp/evil\n", 0o644),
            ("README.md", b"changed\n", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert_eq!(
            report.refused,
            [".GIT/config", "lib/.gIT", "sub/.Git/hooks/post-checkout"]
        );
        assert_eq!(report.written, 1, "{report:?}");
        assert_eq!(read(repo.path().join(".git/config")), before);
        for planted in [".GIT", "sub/.Git", "lib/.gIT"] {
            let p = repo.path().join(planted);
            assert!(!p.exists(), "{planted} reached the host");
        }
    }

    /// A task deleting `.git` files (say `rm .git/index`, or `git gc` pruning objects) does
    /// not delete them on the host; it is reported.
    #[test]
    fn git_files_deleted_in_the_sandbox_stay_on_the_host() {
        let (repo, copied_in) = git_repo();
        let tree = tree([("README.md", b"hello\n", 0o644)]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
        assert!(repo.path().join(".git/index").is_file());
        assert!(repo.path().join("sub/.git").is_file());
        assert_eq!(report.deleted, 0);
        assert_eq!(
            report.refused,
            [
                ".git/HEAD",
                ".git/config",
                ".git/index",
                ".git/modules/sub/config",
                "sub/.git"
            ]
        );
    }

    /// Issue 33, finding 2: the old temporary name was predictable and written through a
    /// symlink; a hostile commit planting it made the node overwrite (and chmod) any file.
    #[test]
    fn a_planted_temporary_name_is_not_written_through() {
        let (repo, copied_in) = git_repo();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let planted = repo.path().join(".chorus-sync-README.md");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let tree = tree([("README.md", b"changed\n", 0o777)]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
        assert_eq!(read(&victim), b"precious\n");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o600, "the outside file was chmod'ed");
        assert_eq!(
            std::fs::read_link(&planted).unwrap(),
            victim,
            "link left alone"
        );
        assert_eq!(read(repo.path().join("README.md")), b"changed\n");
        assert_eq!(report.written, 1);
        let leftovers: Vec<_> = std::fs::read_dir(repo.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".chorus-sync-") && n != ".chorus-sync-README.md")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// A directory on the way that is a symlink (to outside the repository) is refused for
    /// writes and deletes alike.
    #[test]
    fn a_symlinked_directory_on_the_way_is_refused() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("old.txt"), "outside\n").unwrap();
        std::fs::create_dir(outside.path().join("deep")).unwrap();
        std::os::unix::fs::symlink(outside.path(), repo.path().join("sub")).unwrap();
        let copied_in = paths(["sub/old.txt"]);
        let tree = tree([
            ("sub/new.txt", b"x", 0o644),
            ("sub/deep/new.txt", b"x", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
        assert_eq!(
            report.refused,
            ["sub/deep/new.txt", "sub/new.txt", "sub/old.txt"]
        );
        assert_eq!(read(outside.path().join("old.txt")), b"outside\n");
        assert!(!outside.path().join("new.txt").exists());
        assert!(!outside.path().join("deep/new.txt").exists());
        assert_eq!((report.written, report.deleted), (0, 0));
    }

    /// A directory replaced by a symlink between the walk and the write: the write goes
    /// through the handle already open, into the directory that was checked, never through
    /// the new link.
    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_walk_is_not_followed() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join("sub")).unwrap();
        let root = RepoDir::open(repo.path()).unwrap();
        let Walk::Dir(dir) = root.walk(&[OsStr::new("sub")], false).unwrap() else {
            panic!("sub is a plain directory");
        };
        std::fs::rename(repo.path().join("sub"), repo.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), repo.path().join("sub")).unwrap();
        let outcome = root
            .write_in(&dir, OsStr::new("file.txt"), b"data", 0o644)
            .unwrap();
        assert_eq!(outcome, Outcome::Done);
        assert!(!outside.path().join("file.txt").exists());
        assert_eq!(read(repo.path().join("moved/file.txt")), b"data");
        // And a walk from now on refuses the link.
        assert!(matches!(
            root.walk(&[OsStr::new("sub")], true).unwrap(),
            Walk::Refused
        ));
    }

    /// Files and directories land owned by the repository root's owner, with group/other
    /// write and setuid/setgid/sticky dropped and the executable bit kept. As root the root
    /// directory is given to another user first; otherwise the owner is the current user.
    #[test]
    fn synced_files_belong_to_the_repository_owner_with_masked_modes() {
        let repo = tempfile::tempdir().unwrap();
        let root_uid = rustix::process::geteuid().is_root();
        if root_uid {
            std::os::unix::fs::chown(repo.path(), Some(1234), Some(5678)).unwrap();
        }
        let owner = std::fs::metadata(repo.path()).unwrap();
        let (uid, gid) = (owner.uid(), owner.gid());
        let tree = tree([
            ("bin/run.sh", b"#!/bin/sh\n", 0o6777),
            ("data.txt", b"d", 0o1666),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert_eq!(report.written, 2);
        for (path, mode) in [("bin", 0o755), ("bin/run.sh", 0o755), ("data.txt", 0o644)] {
            let m = std::fs::symlink_metadata(repo.path().join(path)).unwrap();
            assert_eq!(m.mode() & 0o7777, mode, "{path}");
            assert_eq!(m.uid(), uid, "{path}");
            if root_uid {
                assert_eq!(m.gid(), gid, "{path}");
            }
        }
    }

    /// A file the task did not touch keeps its mode even when it is one a sync would not
    /// give (group-writable); one whose mode the task changed is replaced, masked.
    #[test]
    fn untouched_files_keep_their_mode_and_changed_modes_are_masked() {
        let repo = tempfile::tempdir().unwrap();
        for name in ["shared.txt", "script.sh"] {
            let p = repo.path().join(name);
            std::fs::write(&p, "x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
        }
        let tree = tree([("shared.txt", b"x", 0o664), ("script.sh", b"x", 0o777)]);
        let report = sync_tree(
            repo.path(),
            &tree,
            &BTreeMap::new(),
            &paths(["shared.txt", "script.sh"]),
        )
        .unwrap();
        assert_eq!(report.written, 1, "{report:?}");
        let mode = |n: &str| std::fs::metadata(repo.path().join(n)).unwrap().mode() & 0o7777;
        assert_eq!(mode("shared.txt"), 0o664);
        assert_eq!(mode("script.sh"), 0o755);
    }

    /// A mount below the repository is neither written nor deleted in, as `:ro` does not show
    /// it.
    #[test]
    fn nested_mounts_are_not_synced_into() {
        let repo = tempfile::tempdir().unwrap();
        let sub = repo.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let Some(_mounted) = TmpfsGuard::mount(&sub) else {
            return;
        };
        std::fs::write(sub.join("below.txt"), "below\n").unwrap();
        let tree = tree([("sub/new.txt", b"x", 0o644), ("sub/below.txt", b"y", 0o644)]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert_eq!(report.refused, ["sub/below.txt", "sub/new.txt"]);
        assert_eq!(read(sub.join("below.txt")), b"below\n");
        assert!(!sub.join("new.txt").exists());
        let report = sync_tree(
            repo.path(),
            &FileTree::new(),
            &BTreeMap::new(),
            &paths(["sub/below.txt"]),
        )
        .unwrap();
        assert_eq!(report.refused, ["sub/below.txt"]);
        assert!(sub.join("below.txt").exists());
    }

    /// Places that are not regular files are refused, not replaced: a symlink, a directory,
    /// a fifo.
    #[test]
    fn names_that_are_not_regular_files_are_refused() {
        let repo = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/hostname", repo.path().join("link")).unwrap();
        std::fs::create_dir(repo.path().join("dir")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            repo.path().join("fifo"),
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let tree = tree([
            ("dir", b"x", 0o644),
            ("fifo", b"x", 0o644),
            ("link", b"x", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert_eq!(report.refused, ["dir", "fifo", "link"]);
        assert!(std::fs::symlink_metadata(repo.path().join("link"))
            .unwrap()
            .is_symlink());
    }

    /// Runs the real `git` with `args` in `dir`, isolated from the machine's configuration and
    /// never looking above `ceiling`; returns its stdout when it succeeded.
    fn git(dir: &Path, ceiling: &Path, args: &[&str]) -> Option<String> {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CEILING_DIRECTORIES", ceiling)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", ceiling)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .output()
            .expect("these tests need the git binary on PATH");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A task's files that make `lib/` a repository by its contents (no `.git` anywhere): a
    /// `HEAD`, `objects/` and `refs/`, and a `config` whose `core.fsmonitor` runs `touch
    /// MARKER` at the next `git status` from `lib/` (with `core.worktree = ..`).
    fn bare_repository_attack(marker: &Path) -> Vec<(String, Vec<u8>)> {
        let config = format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\t\
             fsmonitor = \"touch {}\"\n",
            marker.display()
        );
        vec![
            ("lib/HEAD".into(), b"ref: refs/heads/main\n".to_vec()),
            ("lib/config".into(), config.into_bytes()),
            ("lib/objects/info/packs".into(), Vec::new()),
            ("lib/refs/heads/.keep".into(), Vec::new()),
        ]
    }

    /// Issue 51, finding 1: a directory of the working tree made a repository by its contents
    /// ran the task's command as the host's user at `cd lib && git status`. Judged by the real
    /// git: first the attack is shown to work when its files are written as they are (so the
    /// test can fail), then after a sync back no directory of the repository is a git
    /// directory of its own and `git status` in each runs nothing. Variants: the host already
    /// has `objects` and `refs` there and the task adds `HEAD` and `config`; the task names a
    /// `commondir`; a detached `HEAD`; names in another letter case.
    #[test]
    fn a_directory_made_a_repository_by_its_contents_is_not_synced_back() {
        let base = tempfile::tempdir().unwrap();
        let base_path = base.path().canonicalize().unwrap();
        let marker = base_path.join("pwned");
        let attack = bare_repository_attack(&marker);

        // The attack, written as plain files: git takes lib/ for a repository and runs it.
        let control = base_path.join("control");
        std::fs::create_dir(&control).unwrap();
        git(&control, &base_path, &["init", "-q"]).expect("git init");
        for (rel, data) in &attack {
            let path = control.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, data).unwrap();
        }
        let _ = git(&control.join("lib"), &base_path, &["status"]);
        assert!(
            marker.exists(),
            "the attack does not work on this git: the test proves nothing"
        );
        std::fs::remove_file(&marker).unwrap();

        let config = attack[1].1.clone();
        let host_dirs: &[&str] = &["lib/objects", "lib/refs"];
        type Variant<'a> = (&'a str, Vec<(String, Vec<u8>)>, &'a [&'a str]);
        let variants: Vec<Variant<'_>> = vec![
            ("HEAD, config, objects and refs", attack.clone(), &[]),
            (
                "HEAD and config over objects and refs the host has",
                vec![
                    ("lib/HEAD".into(), b"ref: refs/heads/main\n".to_vec()),
                    ("lib/config".into(), config.clone()),
                ],
                host_dirs,
            ),
            (
                "a commondir",
                vec![
                    ("lib/HEAD".into(), b"ref: refs/heads/main\n".to_vec()),
                    ("lib/commondir".into(), b"../evil\n".to_vec()),
                    ("evil/config".into(), config.clone()),
                    ("evil/objects/x".into(), Vec::new()),
                    ("evil/refs/x".into(), Vec::new()),
                ],
                &[],
            ),
            (
                "a detached HEAD",
                vec![
                    (
                        "lib/HEAD".into(),
                        format!("{}\n", "ab".repeat(20)).into_bytes(),
                    ),
                    ("lib/config".into(), config.clone()),
                    ("lib/objects/x".into(), Vec::new()),
                    ("lib/refs/x".into(), Vec::new()),
                ],
                &[],
            ),
            (
                "another letter case",
                vec![
                    ("lib/head".into(), b"ref: refs/heads/main\n".to_vec()),
                    ("lib/HEAD".into(), b"ref: refs/heads/main\n".to_vec()),
                    ("lib/config".into(), config.clone()),
                    ("lib/Objects/x".into(), Vec::new()),
                    ("lib/objects/x".into(), Vec::new()),
                    ("lib/REFS/x".into(), Vec::new()),
                    ("lib/refs/x".into(), Vec::new()),
                ],
                &[],
            ),
        ];
        for (what, files, on_host) in variants {
            let repo = tempfile::tempdir_in(&base_path).unwrap();
            let root = repo.path();
            git(root, &base_path, &["init", "-q"]).expect("git init");
            std::fs::create_dir(root.join("lib")).unwrap();
            std::fs::write(root.join("lib/code.rs"), "fn f() {}\n").unwrap();
            for dir in on_host {
                std::fs::create_dir_all(root.join(dir)).unwrap();
                std::fs::write(root.join(dir).join("README"), "a project's own\n").unwrap();
            }
            let tree: FileTree = files
                .iter()
                .map(|(p, d)| (p.clone(), entry(d, 0o644)))
                .chain([("lib/code.rs".to_string(), entry(b"fn g() {}\n", 0o644))])
                .collect();
            let report = sync_tree(root, &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
            assert_eq!(read(root.join("lib/code.rs")), b"fn g() {}\n", "{what}");
            assert!(!report.refused.is_empty(), "{what}: {report:?}");
            let own_git = root.canonicalize().unwrap().join(".git");
            for dir in ["", "lib", "lib/objects", "lib/refs", "evil"] {
                let at = root.join(dir);
                if !at.is_dir() {
                    continue;
                }
                let gitdir = git(&at, &base_path, &["rev-parse", "--absolute-git-dir"]);
                assert_eq!(
                    gitdir.map(PathBuf::from),
                    Some(own_git.clone()),
                    "{what}: git takes {dir:?} for a repository of its own ({report:?})"
                );
                let _ = git(&at, &base_path, &["status"]);
                assert!(
                    !marker.exists(),
                    "{what}: git status in {dir:?} ran the task's command"
                );
            }
        }
    }

    /// A bare repository the project keeps in its working tree (a test fixture) is a git
    /// directory: the task's change to its `config` is refused, its files are not deleted.
    #[test]
    fn a_bare_repository_in_the_working_tree_is_kept_as_it_is() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("repo");
        std::fs::create_dir(&root).unwrap();
        git(&root, base.path(), &["init", "-q"]).expect("git init");
        git(
            &root,
            base.path(),
            &["init", "-q", "--bare", "fixtures/bare.git"],
        )
        .expect("git init --bare");
        let before = read(root.join("fixtures/bare.git/config"));
        let copied_in = paths(["fixtures/bare.git/HEAD", "fixtures/bare.git/description"]);
        let tree = tree([
            (
                "fixtures/bare.git/config",
                b"[core]\n\tfsmonitor = \"touch /x\"\n",
                0o644,
            ),
            ("fixtures/bare.git/HEAD", b"ref: refs/heads/master\n", 0o644),
        ]);
        let head = read(root.join("fixtures/bare.git/HEAD"));
        let report = sync_tree(&root, &tree, &BTreeMap::new(), &copied_in).unwrap();
        assert_eq!(read(root.join("fixtures/bare.git/config")), before);
        assert!(
            root.join("fixtures/bare.git/description").exists(),
            "not deleted"
        );
        assert_eq!(read(root.join("fixtures/bare.git/HEAD")), head);
        assert!(
            report
                .refused
                .contains(&"fixtures/bare.git/config".to_string()),
            "{report:?}"
        );
        assert!(
            report
                .refused
                .contains(&"fixtures/bare.git/description".to_string()),
            "{report:?}"
        );
        assert_eq!((report.written, report.deleted), (0, 0), "{report:?}");
    }

    /// Issue 51, finding 2: a repository file the sandbox holds as something the sync does not
    /// carry (a symlink, a directory, a name that is not UTF-8) stays on the host as it was and
    /// is reported — never deleted because no regular file of that name came back.
    #[test]
    fn files_that_are_not_regular_files_in_the_sandbox_are_kept_and_reported() {
        let repo = tempfile::tempdir().unwrap();
        for name in ["README.md", "made-a-dir", "linked"] {
            std::fs::write(repo.path().join(name), "precious\n").unwrap();
        }
        let copied_in = paths(["README.md", "made-a-dir", "linked"]);
        let others = BTreeMap::from([
            ("linked".to_string(), "a symlink"),
            ("made-a-dir".to_string(), "a directory"),
            ("new-link".to_string(), "a symlink"),
        ]);
        let tree = tree([
            ("README.md", b"precious\n", 0o644),
            ("README.bak", b"precious\n", 0o644),
            ("made-a-dir/inside", b"x", 0o644),
        ]);
        let report = sync_tree(repo.path(), &tree, &others, &copied_in).unwrap();
        for name in ["README.md", "made-a-dir", "linked", "README.bak"] {
            assert_eq!(read(repo.path().join(name)), b"precious\n", "{name}");
        }
        assert_eq!(
            report.kept,
            ["linked (a symlink)", "made-a-dir (a directory)"]
        );
        assert_eq!(report.refused, ["made-a-dir/inside"]);
        assert_eq!((report.written, report.deleted), (1, 0));
        let summary = report.summary().unwrap();
        assert!(summary.contains("\"linked (a symlink)\""), "{summary}");
        assert!(summary.contains("1 refused"), "{summary}");
        assert_eq!(
            SyncReport {
                written: 3,
                ..SyncReport::default()
            }
            .summary(),
            None
        );
    }

    // Issue 52, session 40: the trust rules the surviving mutants showed no test pinned.

    /// A tar archive of `(name, kind, contents)`, each name written into its header as the
    /// bytes given (no normalising, as any stream may hold them).
    fn raw_archive(entries: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..name.len()].copy_from_slice(name);
            header.set_entry_type(*kind);
            header.set_mode(0o644);
            header.set_size(data.len() as u64);
            header.set_cksum();
            tar.append(&header, *data).unwrap();
        }
        tar.into_inner().unwrap()
    }

    /// A repository file the sandbox holds as a device or a fifo is kept, and the report says
    /// which it is: not "an entry of another kind".
    #[test]
    fn a_device_or_a_fifo_in_the_sandbox_is_kept_and_named_as_such() {
        let repo = tempfile::tempdir().unwrap();
        for name in ["block", "char", "fifo"] {
            std::fs::write(repo.path().join(name), "precious\n").unwrap();
        }
        let tar = raw_archive(&[
            (b"./", tar::EntryType::Directory, b""),
            (b"./block", tar::EntryType::Block, b""),
            (b"./char", tar::EntryType::Char, b""),
            (b"./fifo", tar::EntryType::Fifo, b""),
        ]);
        let copied_in = paths(["block", "char", "fifo"]);
        let report = sync_back(repo.path(), tar.as_slice(), &copied_in, 1 << 20).unwrap();
        assert_eq!(
            report.kept,
            ["block (a device)", "char (a device)", "fifo (a fifo)"]
        );
        assert_eq!((report.written, report.deleted), (0, 0), "{report:?}");
        assert!(report.refused.is_empty(), "{report:?}");
        for name in ["block", "char", "fifo"] {
            assert_eq!(read(repo.path().join(name)), b"precious\n", "{name}");
        }
    }

    /// A `.git` file is never written; whether the task changed it (and the report says so) is
    /// judged by its bytes, not its size: the host's size with other bytes is a change, and so
    /// is the start of the host's file (or nothing at all). Only the host's own bytes are not.
    #[test]
    fn a_git_file_the_task_changed_is_reported_at_the_same_size_or_as_a_prefix() {
        let host: &[u8] = b"[core]\n\tbare = false\n";
        let rows: [(&str, &[u8], bool); 5] = [
            ("the host's bytes", host, false),
            (
                "the host's size, other bytes",
                b"[core]\n\tbare = FALSE\n",
                true,
            ),
            ("the start of the host's", b"[core]\n", true),
            ("nothing", b"", true),
            (
                "the host's and more",
                b"[core]\n\tbare = false\n\tx = 1\n",
                true,
            ),
        ];
        for (what, sandbox, changed) in rows {
            let repo = tempfile::tempdir().unwrap();
            std::fs::create_dir(repo.path().join(".git")).unwrap();
            std::fs::write(repo.path().join(".git/config"), host).unwrap();
            let tree = tree([(".git/config", sandbox, 0o644)]);
            let copied_in = paths([".git/config"]);
            let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
            let want: &[&str] = if changed { &[".git/config"] } else { &[] };
            assert_eq!(report.refused, want, "{what}: {report:?}");
            assert_eq!(report.written, 0, "{what}: {report:?}");
            assert_eq!(read(repo.path().join(".git/config")), host, "{what}");
        }
    }

    /// The small-file writer's "unchanged?" (`read_is`) reads one byte past what it expects: a
    /// host file holding those bytes and more (grown since its size was read) is not taken as
    /// holding them, nor is one holding their start.
    #[test]
    fn a_host_file_that_holds_the_bytes_and_more_is_not_taken_as_holding_them() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("file"), "hello, world\n").unwrap();
        let root = RepoDir::open(repo.path()).unwrap();
        let rows: [(&str, &[u8], bool); 5] = [
            ("its bytes", b"hello, world\n", true),
            ("their start (it holds them and more)", b"hello", false),
            ("nothing (it holds more)", b"", false),
            ("its bytes and more", b"hello, world\n!", false),
            ("other bytes", b"HELLO, WORLD\n", false),
        ];
        for (what, expected, holds) in rows {
            let got = read_is(&root.root, OsStr::new("file"), expected).unwrap();
            assert_eq!(got, holds, "{what}");
        }
    }

    /// The archive's entry for the workspace itself (`./`, as `tar -c -C <workspace> .` writes
    /// it, or `.` and their spellings) is the workspace, never an entry of the report —
    /// whatever kind the stream says it is.
    #[test]
    fn the_archive_s_root_entry_is_the_workspace_itself_never_an_entry_of_the_report() {
        for name in [&b"./"[..], b".", b".//", b"././", b"./."] {
            for (kind, data) in [
                (tar::EntryType::Directory, &b""[..]),
                (tar::EntryType::Regular, b"the root?\n"),
            ] {
                let repo = tempfile::tempdir().unwrap();
                let tar = raw_archive(&[
                    (name, kind, data),
                    (b"./a.txt", tar::EntryType::Regular, b"a\n"),
                ]);
                let report =
                    sync_back(repo.path(), tar.as_slice(), &BTreeSet::new(), 1 << 20).unwrap();
                let what = format!("{} as {kind:?}", String::from_utf8_lossy(name));
                assert_eq!(
                    report,
                    SyncReport {
                        written: 1,
                        ..SyncReport::default()
                    },
                    "{what}"
                );
                let names: Vec<_> = std::fs::read_dir(repo.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                assert_eq!(names, ["a.txt"], "{what}");
            }
        }
    }

    /// A directory whose `HEAD` is a symlink into `refs/` (as older gits made it), beside
    /// `objects` and `refs`, is a git directory on the host (git's `validate_headref` takes
    /// such a link): nothing under it is written. A `HEAD` that is a link elsewhere, or a
    /// folder, makes no git directory: the files come back.
    #[test]
    fn a_directory_whose_head_is_a_link_into_refs_is_a_git_directory_kept_as_it_is() {
        type MakeHead = fn(&Path);
        let rows: [(&str, MakeHead, bool); 4] = [
            (
                "a link into refs/",
                |head| std::os::unix::fs::symlink("refs/heads/main", head).unwrap(),
                true,
            ),
            (
                "a file saying ref:",
                |head| std::fs::write(head, "ref: refs/heads/main\n").unwrap(),
                true,
            ),
            (
                "a link elsewhere",
                |head| std::os::unix::fs::symlink("../elsewhere", head).unwrap(),
                false,
            ),
            ("a folder", |head| std::fs::create_dir(head).unwrap(), false),
        ];
        let config = b"[core]\n\tfsmonitor = \"touch /x\"\n";
        for (what, make_head, is_git_dir) in rows {
            let repo = tempfile::tempdir().unwrap();
            let bare = repo.path().join("fixtures/bare");
            std::fs::create_dir_all(bare.join("objects")).unwrap();
            std::fs::create_dir_all(bare.join("refs/heads")).unwrap();
            make_head(&bare.join("HEAD"));
            std::fs::write(bare.join("config"), "[core]\n\tbare = true\n").unwrap();
            let tree = tree([
                ("fixtures/README", b"fixtures\n", 0o644),
                ("fixtures/bare/config", config, 0o644),
                ("fixtures/bare/hooks/post-checkout", b"#!/bin/sh\n", 0o755),
            ]);
            let report = sync_tree(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
            assert_eq!(read(repo.path().join("fixtures/README")), b"fixtures\n");
            if is_git_dir {
                assert_eq!(
                    report.refused,
                    ["fixtures/bare/config", "fixtures/bare/hooks/post-checkout"],
                    "{what}"
                );
                assert_eq!(report.written, 1, "{what}: {report:?}");
                assert_eq!(
                    read(bare.join("config")),
                    b"[core]\n\tbare = true\n",
                    "{what}"
                );
                assert!(!bare.join("hooks").exists(), "{what}");
            } else {
                assert!(report.refused.is_empty(), "{what}: {report:?}");
                assert_eq!(report.written, 3, "{what}: {report:?}");
                assert_eq!(read(bare.join("config")), config, "{what}");
            }
        }
    }

    /// What the sync cannot look up on the host is an error, never "nothing there" (which a
    /// write takes as leave to create, and git's test as no `HEAD`): only an absent name is
    /// absent. A name longer than the host allows fails the lookup for any user; a directory
    /// the sync may not search fails it unless the sync runs as root (who may search any).
    #[test]
    fn a_host_name_that_cannot_be_looked_up_is_an_error_never_absent() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::create_dir(r.join("sub")).unwrap();
        std::fs::create_dir(r.join("locked")).unwrap();
        std::fs::write(r.join("locked/HEAD"), "ref: refs/heads/main\n").unwrap();
        let mode =
            |m| std::fs::set_permissions(r.join("locked"), std::fs::Permissions::from_mode(m));
        mode(0o600).unwrap();
        let root = RepoDir::open(r).unwrap();
        let long = "x".repeat(256);
        let mut rows = vec![
            ("an absent name", "absent".to_string(), true),
            ("an absent name, below", "sub/absent".to_string(), true),
            ("a name too long", long.clone(), false),
            ("a name too long, below", format!("sub/{long}"), false),
        ];
        if !rustix::process::geteuid().is_root() {
            rows.push(("a directory it may not search", "locked/HEAD".into(), false));
        }
        for (what, rel, absent) in rows {
            let rel = Path::new(&rel);
            let (parents, name) = split(rel).unwrap();
            let Walk::Dir(dir) = root.walk(&parents, false).unwrap() else {
                panic!("{what}: the walk to it");
            };
            let place = match root.place(&dir, name) {
                Ok(Place::Absent) => "absent",
                Ok(Place::File(_)) => "a file",
                Ok(Place::Other) => "something else",
                Err(_) => "an error",
            };
            let entry = root.host_entry(rel);
            if absent {
                assert_eq!(place, "absent", "{what}");
                assert_eq!(entry.unwrap(), HostEntry::Absent, "{what}");
            } else {
                assert_eq!(place, "an error", "{what}: place");
                assert!(entry.is_err(), "{what}: host_entry took it for {entry:?}");
            }
        }
        mode(0o700).unwrap();
    }

    /// `open_regular` opens a regular file only, whatever took the place of the one the sync
    /// saw there: never through a symlink, never a folder, and never waiting on a fifo nobody
    /// writes to (the sync would hang).
    #[test]
    fn open_regular_opens_a_regular_file_only_never_through_a_link_nor_waiting_on_a_fifo() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::write(r.join("file"), "data\n").unwrap();
        std::os::unix::fs::symlink("file", r.join("link")).unwrap();
        std::os::unix::fs::symlink("nowhere", r.join("dangling")).unwrap();
        std::fs::create_dir(r.join("folder")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            r.join("fifo"),
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let root = RepoDir::open(r).unwrap();
        for (name, opened) in [
            ("file", true),
            ("link", false),
            ("dangling", false),
            ("folder", false),
            ("fifo", false),
            ("absent", false),
        ] {
            // In a thread: an open that waits (a fifo) fails the test instead of hanging it.
            let (tx, rx) = std::sync::mpsc::channel();
            let dir = root.root.try_clone().unwrap();
            std::thread::spawn(move || {
                let got = open_regular(&dir, OsStr::new(name)).map(|f| f.is_some());
                let _ = tx.send(got);
            });
            match rx.recv_timeout(std::time::Duration::from_secs(10)) {
                Ok(got) => assert_eq!(got.unwrap(), opened, "{name}"),
                Err(_) => {
                    // Let the waiting open return (a writer arrives), then fail.
                    let _ = std::fs::OpenOptions::new().write(true).open(r.join(name));
                    panic!("open_regular waited on {name}");
                }
            }
        }
    }

    /// The host files the sync reads are opened close-on-exec: a process the node starts
    /// meanwhile (a task's shell in the process sandbox, `iptables`) never inherits one.
    #[test]
    fn the_host_files_the_sync_reads_are_closed_on_exec() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("file"), "data\n").unwrap();
        let root = RepoDir::open(repo.path()).unwrap();
        let file = open_regular(&root.root, OsStr::new("file"))
            .unwrap()
            .expect("a regular file");
        let flags = rustix::io::fcntl_getfd(&file).unwrap();
        assert!(
            flags.contains(rustix::io::FdFlags::CLOEXEC),
            "a child started now would inherit it: {flags:?}"
        );
    }
}

/// The streaming sync's own rules (issue 51, findings 6 and 7): names as bytes, files larger
/// than the buffer, hard links, and a stream that stops early.
#[cfg(test)]
mod stream_tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// What a test's workspace holds at a path.
    enum Item<'a> {
        File(&'a [u8], u32),
        /// A hard link to the named earlier entry.
        Link(&'a [u8]),
    }

    fn archive(items: &[(&[u8], Item<'_>)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, item) in items {
            let path = Path::new(OsStr::from_bytes(path));
            let mut header = tar::Header::new_gnu();
            match item {
                Item::File(data, mode) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(*mode);
                    header.set_size(data.len() as u64);
                    tar.append_data(&mut header, path, *data).unwrap();
                }
                Item::Link(target) => {
                    header.set_entry_type(tar::EntryType::Link);
                    header.set_mode(0o644);
                    header.set_size(0);
                    let target = Path::new(OsStr::from_bytes(target));
                    tar.append_link(&mut header, path, target).unwrap();
                }
            }
        }
        tar.into_inner().unwrap()
    }

    fn bytes_path(root: &Path, rel: &[u8]) -> PathBuf {
        root.join(OsStr::from_bytes(rel))
    }

    fn copied<const N: usize>(paths: [&[u8]; N]) -> BTreeSet<PathBuf> {
        paths
            .into_iter()
            .map(|p| PathBuf::from(OsStr::from_bytes(p)))
            .collect()
    }

    /// Issue 51, finding 6: a name that is not UTF-8 is written, changed and deleted under its
    /// own bytes; nothing decoded (`orig\u{FFFD}.txt`) is ever made.
    #[test]
    fn names_that_are_not_utf8_are_bytes_end_to_end() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::write(bytes_path(r, b"orig\xff.txt"), "old\n").unwrap();
        std::fs::write(bytes_path(r, b"gone\xfd.txt"), "gone\n").unwrap();
        let tar = archive(&[
            (b"./orig\xff.txt", Item::File(b"new\n", 0o644)),
            (b"./d\xfe/new\xfc.txt", Item::File(b"made\n", 0o644)),
        ]);
        let copied_in = copied([b"orig\xff.txt", b"gone\xfd.txt"]);
        let report = sync_back(r, tar.as_slice(), &copied_in, 1 << 20).unwrap();
        assert_eq!(
            report,
            SyncReport {
                written: 2,
                deleted: 1,
                ..SyncReport::default()
            }
        );
        assert_eq!(
            std::fs::read(bytes_path(r, b"orig\xff.txt")).unwrap(),
            b"new\n"
        );
        assert_eq!(
            std::fs::read(bytes_path(r, b"d\xfe/new\xfc.txt")).unwrap(),
            b"made\n"
        );
        let mut names: Vec<Vec<u8>> = std::fs::read_dir(r)
            .unwrap()
            .map(|e| e.unwrap().file_name().as_bytes().to_vec())
            .collect();
        names.sort();
        assert_eq!(names, [b"d\xfe".to_vec(), b"orig\xff.txt".to_vec()]);
        assert_eq!(shown(Path::new(OsStr::from_bytes(b"a\xffb"))), "a\\xFFb");
        assert!(split(Path::new(OsStr::from_bytes(b"a/b\0c"))).is_none());
    }

    /// Files larger than the buffer go through a temporary beside their target: a new one is
    /// written, a changed one replaced, an unchanged one left alone (the same inode), and no
    /// temporary is left.
    #[test]
    fn large_files_are_copied_through_the_buffer() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        let big = |seed: u8| -> Vec<u8> {
            (0..SMALL_FILE * 3 + 17)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect()
        };
        std::fs::write(r.join("same.bin"), big(1)).unwrap();
        std::fs::write(r.join("changed.bin"), big(1)).unwrap();
        let inode = |n: &str| std::fs::metadata(r.join(n)).unwrap().ino();
        let (same_before, changed_before) = (inode("same.bin"), inode("changed.bin"));
        let (one, two) = (big(1), big(2));
        let mut last_byte = big(1);
        *last_byte.last_mut().unwrap() ^= 1;
        let tar = archive(&[
            (b"same.bin", Item::File(&one, 0o644)),
            (b"changed.bin", Item::File(&last_byte, 0o644)),
            (b"sub/new.bin", Item::File(&two, 0o755)),
        ]);
        let report = sync_back(r, tar.as_slice(), &BTreeSet::new(), 1 << 30).unwrap();
        assert_eq!(report.written, 2, "{report:?}");
        assert_eq!(
            inode("same.bin"),
            same_before,
            "an unchanged file was rewritten"
        );
        assert_ne!(inode("changed.bin"), changed_before);
        assert_eq!(std::fs::read(r.join("changed.bin")).unwrap(), last_byte);
        assert_eq!(std::fs::read(r.join("sub/new.bin")).unwrap(), two);
        let mode = std::fs::metadata(r.join("sub/new.bin")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o755);
        for dir in [r.to_path_buf(), r.join("sub")] {
            for e in std::fs::read_dir(dir).unwrap() {
                let name = e.unwrap().file_name();
                assert!(!name.as_bytes().starts_with(b".chorus-sync-"), "{name:?}");
            }
        }
    }

    /// A hard link comes back as a file with its target's contents, whether the target was
    /// written (small or large) or held back (a `refs/` file, written at the end); a link to
    /// a file that was not carried is kept and reported, never a deletion.
    #[test]
    fn hard_links_come_back_as_files() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::create_dir(r.join(".git")).unwrap();
        std::fs::write(r.join("linked-git"), "host\n").unwrap();
        let large = vec![7u8; SMALL_FILE * 2];
        let tar = archive(&[
            (b"README.md", Item::File(b"hello\n", 0o644)),
            (b"README.bak", Item::Link(b"README.md")),
            (b"large", Item::File(&large, 0o644)),
            (b"large.bak", Item::Link(b"large")),
            (b"docs/refs/a.md", Item::File(b"a ref\n", 0o644)),
            (b"docs/refs/b.md", Item::Link(b"docs/refs/a.md")),
            (b"b-of-ref", Item::Link(b"docs/refs/a.md")),
            (b".git/config", Item::File(b"[core]\n", 0o644)),
            (b"linked-git", Item::Link(b".git/config")),
        ]);
        let copied_in = copied([b"linked-git"]);
        let report = sync_back(r, tar.as_slice(), &copied_in, 1 << 30).unwrap();
        for (name, want) in [
            ("README.bak", &b"hello\n"[..]),
            ("large.bak", &large[..]),
            ("docs/refs/b.md", b"a ref\n"),
            ("b-of-ref", b"a ref\n"),
            ("linked-git", b"host\n"),
        ] {
            assert_eq!(std::fs::read(r.join(name)).unwrap(), want, "{name}");
        }
        assert_eq!(report.written, 7, "{report:?}");
        assert_eq!(report.refused, [".git/config"]);
        assert_eq!(
            report.kept,
            ["linked-git (a hard link to something not carried back)"]
        );
    }

    /// Issue 51, finding 7: a stream past the sync's bound stops it: what came before is
    /// written, nothing is deleted, and the report says why, in the result's line.
    #[test]
    fn a_workspace_past_the_bound_stops_the_sync_and_deletes_nothing() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::write(r.join("old.txt"), "keep me\n").unwrap();
        let large = vec![1u8; 1 << 20];
        let tar = archive(&[
            (b"a.txt", Item::File(b"first\n", 0o644)),
            (b"large", Item::File(&large, 0o644)),
            (b"z.txt", Item::File(b"last\n", 0o644)),
        ]);
        let copied_in = copied([b"old.txt"]);
        let report = sync_back(r, tar.as_slice(), &copied_in, 512 * 1024).unwrap();
        assert_eq!(std::fs::read(r.join("a.txt")).unwrap(), b"first\n");
        assert!(!r.join("large").exists() && !r.join("z.txt").exists());
        assert!(
            r.join("old.txt").exists(),
            "deleted after an incomplete stream"
        );
        assert_eq!((report.written, report.deleted), (1, 0));
        let why = report.incomplete.clone().expect("stopped");
        assert!(why.contains("bound of 524288 bytes"), "{why}");
        let summary = report.summary().unwrap();
        assert!(summary.contains("stopped early"), "{summary}");
        let leftovers: Vec<_> = std::fs::read_dir(r)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.as_bytes().starts_with(b".chorus-sync-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// A stream that fails after the archive's end (the reading command did not exit 0:
    /// `tar` skipped a file it could not read) deletes nothing: a file missing from it may
    /// only be unreadable. An entry whose headers pass their budget (a long name of 100 KiB)
    /// stops the sync before anything of it is held.
    #[test]
    fn a_failed_or_overlong_stream_deletes_nothing() {
        struct Fails;
        impl Read for Fails {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other(
                    "exit 2: tar: secret: Permission denied",
                ))
            }
        }
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::write(r.join("secret"), "unreadable in the sandbox\n").unwrap();
        let tar = archive(&[(b"a.txt", Item::File(b"a\n", 0o644))]);
        let report = sync_back(
            r,
            tar.as_slice().chain(Fails),
            &copied([b"secret"]),
            1 << 20,
        )
        .unwrap();
        assert!(r.join("secret").exists());
        assert_eq!((report.written, report.deleted), (1, 0));
        assert!(
            report
                .incomplete
                .as_deref()
                .unwrap_or("")
                .contains("Permission denied"),
            "{report:?}"
        );

        let long = vec![b'x'; 100 * 1024];
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        tar.append_data(&mut header, OsStr::from_bytes(&long), &b"x"[..])
            .unwrap();
        let tar = tar.into_inner().unwrap();
        let report = sync_back(r, tar.as_slice(), &copied([b"secret"]), 1 << 30).unwrap();
        assert!(r.join("secret").exists());
        let why = report.incomplete.expect("stopped");
        assert!(why.contains("headers are longer"), "{why}");
    }
}
