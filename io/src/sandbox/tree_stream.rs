//! Folders moved as tar archives as they come, never held whole (issue 53): an archive passes
//! through [`filter`] on its way into a sandbox and on its way out, which keeps what a folder
//! of plain files needs and leaves the rest out, said by name.
//!
//! Kept: folders, regular files (their permission bits, not set-id bits) and hard links to a
//! regular file kept earlier in the same archive (`tar` sends a file's second name so; the
//! target is then inside the folder already). Left out, listed in [`Filtered::skipped`]:
//! symbolic links, devices, fifos, names that are not UTF-8, names that leave the folder
//! (`..`), hard links to anything else. So an archive written into a sandbox cannot make a
//! link that a later entry (or a later call) writes through, and an archive read out holds no
//! symbolic link for the caller's own `tar` to follow.
//!
//! Who is trusted: nobody. The archive comes from an API caller (in) or from the sandbox's own
//! `tar` (out), which a command may have replaced; both are parsed the same way, with the
//! file bytes bounded by the caller's limit and the entries by [`MAX_ENTRIES`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

/// The most entries one archive may hold (a million folders and files; a tar header is 512
/// bytes or a few of them, so this bounds what the headers alone can make a sandbox write).
pub const MAX_ENTRIES: u64 = 1_000_000;

/// The chunks the filter writes: as large as the agent's stdin frames.
const CHUNK: usize = 64 * 1024;

/// The most bytes an archive may spend on what describes one entry — its header and the long
/// name, long link and pax records before it, which the parser holds whole — so an archive
/// cannot make the node hold a gigabyte "name".
pub const MAX_ENTRY_META: u64 = 256 * 1024;

/// Names listed in [`Filtered::skipped`] at most (the rest counted in
/// [`Filtered::skipped_more`]), each cut to [`MAX_LISTED_NAME`] bytes.
pub const MAX_SKIPPED_LISTED: usize = 1000;

/// The longest name listed as skipped, in bytes (a longer one is cut, `…` at its end).
const MAX_LISTED_NAME: usize = 512;

/// What went through.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// Regular files and hard links kept.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// What was left out: name → what it is (at most [`MAX_SKIPPED_LISTED`]).
    pub skipped: BTreeMap<String, &'static str>,
    /// Left out past those listed.
    pub skipped_more: u64,
}

impl Filtered {
    /// Lists `name` as left out, being `what`, within the bounds.
    fn skip(&mut self, name: &str, what: &'static str) {
        if self.skipped.len() >= MAX_SKIPPED_LISTED {
            self.skipped_more += 1;
            return;
        }
        let name = if name.len() > MAX_LISTED_NAME {
            // Cut at the last character boundary within the bound.
            let cut = (0..=MAX_LISTED_NAME)
                .rev()
                .find(|at| name.is_char_boundary(*at))
                .unwrap_or(0);
            format!("{}…", &name[..cut])
        } else {
            name.to_string()
        };
        self.skipped.insert(name, what);
    }
}

/// Why an archive did not go through.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// Its files hold more than the limit.
    #[error("the folder's files hold more than {0} bytes, the most one call moves")]
    TooLarge(u64),
    /// More entries than [`MAX_ENTRIES`].
    #[error("the archive holds more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    /// An entry described by more than [`MAX_ENTRY_META`] bytes (a huge long name).
    #[error("an entry's header and long name take more than {MAX_ENTRY_META} bytes")]
    MetaTooLarge,
    /// Not a tar archive (or a damaged one).
    #[error("not a tar archive: {0}")]
    NotTar(String),
    /// The source closed before its end (an upload broken off, a read that failed).
    #[error("the archive broke off before its end")]
    BrokenOff,
    /// The sink went away (the sandbox's side ended the call).
    #[error("the other side stopped taking the archive")]
    SinkGone,
}

/// Copies the archive `source` yields to `sink`, keeping what the module says, and counting
/// it. `source`: chunks, an empty one at its end (closed before it: [`TreeError::BrokenOff`]).
/// `sink`: the kept archive in chunks, then an empty one at its end — sent only when all went
/// through, so a consumer that waits for it never takes a part for the whole. At most
/// `limit` bytes of files. The parsing runs on a blocking thread.
pub async fn filter(
    source: mpsc::Receiver<Vec<u8>>,
    sink: mpsc::Sender<Vec<u8>>,
    limit: u64,
) -> Result<Filtered, TreeError> {
    let run = tokio::task::spawn_blocking(move || {
        let mut out = Sink {
            to: sink,
            buf: Vec::with_capacity(CHUNK),
        };
        let filtered = filter_blocking(
            Source {
                from: source,
                chunk: Vec::new(),
                at: 0,
                ended: false,
                read: Arc::new(AtomicU64::new(0)),
                allowed: Arc::new(AtomicU64::new(MAX_ENTRY_META)),
            },
            &mut out,
            limit,
        )?;
        out.end()?;
        Ok(filtered)
    });
    match run.await {
        Ok(done) => done,
        Err(e) => Err(TreeError::NotTar(format!("the filter ended: {e}"))),
    }
}

fn filter_blocking(source: Source, sink: &mut Sink, limit: u64) -> Result<Filtered, TreeError> {
    use tar::EntryType;
    let (read, allowed) = (source.read.clone(), source.allowed.clone());
    let mut archive = tar::Archive::new(source);
    let mut builder = tar::Builder::new(sink);
    let mut done = Filtered::default();
    let mut kept_files: BTreeSet<String> = BTreeSet::new();
    let mut entries_seen: u64 = 0;
    let entries = archive.entries().map_err(|e| tree_error(&e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| tree_error(&e))?;
        entries_seen += 1;
        if entries_seen > MAX_ENTRIES {
            return Err(TreeError::TooManyEntries);
        }
        // The parser stands just past this entry's header: it may read the entry's bytes (in
        // whole blocks) and what describes the next one, no more.
        let blocks = entry.size().div_ceil(512).saturating_mul(512);
        let next = read.load(Ordering::Relaxed).saturating_add(blocks);
        allowed.store(next.saturating_add(MAX_ENTRY_META), Ordering::Relaxed);
        let raw = entry.path_bytes().into_owned();
        let Some(name) = clean_name(&raw) else {
            let shown = String::from_utf8_lossy(&raw).into_owned();
            let why = match std::str::from_utf8(&raw) {
                Err(_) => "a name that is not UTF-8",
                Ok(_) => "a name that leaves the folder",
            };
            done.skip(&shown, why);
            continue;
        };
        if name.is_empty() {
            continue; // `.` itself
        }
        let header = entry.header();
        // A mode left blank (a link's, by some writers) is the usual one.
        let mode = header.mode().unwrap_or(0o644) & 0o777;
        let mtime = header.mtime().unwrap_or(0);
        let kind = header.entry_type();
        let mut out = tar::Header::new_gnu();
        out.set_mode(mode);
        out.set_mtime(mtime);
        let what = match kind {
            k if k.is_file() => {
                let size = entry.size();
                done.bytes = done.bytes.saturating_add(size);
                if done.bytes > limit {
                    return Err(TreeError::TooLarge(limit));
                }
                out.set_entry_type(EntryType::Regular);
                out.set_size(size);
                builder
                    .append_data(&mut out, &name, &mut entry)
                    .map_err(|e| tree_error(&e))?;
                done.files += 1;
                kept_files.insert(name);
                continue;
            }
            EntryType::Directory => {
                out.set_entry_type(EntryType::Directory);
                out.set_size(0);
                builder
                    .append_data(&mut out, &name, std::io::empty())
                    .map_err(|e| tree_error(&e))?;
                continue;
            }
            EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .and_then(|t| clean_name(&t))
                    .filter(|t| kept_files.contains(t));
                match target {
                    Some(target) => {
                        out.set_entry_type(EntryType::Link);
                        out.set_size(0);
                        builder
                            .append_link(&mut out, &name, &target)
                            .map_err(|e| tree_error(&e))?;
                        done.files += 1;
                        kept_files.insert(name);
                        continue;
                    }
                    None => "a hard link to something not carried",
                }
            }
            EntryType::Symlink => "a symlink",
            EntryType::Char | EntryType::Block => "a device",
            EntryType::Fifo => "a fifo",
            _ => "an entry of another kind",
        };
        done.skip(&name, what);
    }
    builder.finish().map_err(|e| tree_error(&e))?;
    drop(builder);
    // What follows the archive's end (`tar` pads it to a whole record, 10 KiB) is read to the
    // source's own end, so an upload is never cut under its sender; at most [`MAX_TRAILER`].
    let mut source = archive.into_inner();
    source.allowed.store(u64::MAX, Ordering::Relaxed);
    let mut rest = [0u8; 8192];
    let mut trailer: u64 = 0;
    while trailer <= MAX_TRAILER {
        match source.read(&mut rest) {
            Ok(0) => break,
            Ok(n) => trailer += n as u64,
            Err(e) => return Err(tree_error(&e)),
        }
    }
    Ok(done)
}

/// The most bytes read past an archive's end before the filter stops reading.
const MAX_TRAILER: u64 = 1 << 20;

/// A name inside the folder: relative, `./` and `/` in front dropped, no `..`, UTF-8; `""`
/// for the folder itself. `None`: not UTF-8, or it leaves the folder.
fn clean_name(raw: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(raw).ok()?;
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// What an I/O error of the filter means: one of the source's or the sink's own ends
/// ([`Ended`]), or else a fault of the archive (reading a header, or an entry's bytes under a
/// write).
fn tree_error(e: &std::io::Error) -> TreeError {
    match e.get_ref().and_then(|i| i.downcast_ref::<Ended>()) {
        Some(Ended::BrokenOff) => TreeError::BrokenOff,
        Some(Ended::SinkGone) => TreeError::SinkGone,
        Some(Ended::MetaTooLarge) => TreeError::MetaTooLarge,
        None => TreeError::NotTar(e.to_string()),
    }
}

#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("broken off")]
    BrokenOff,
    #[error("sink gone")]
    SinkGone,
    #[error("an entry's description is too large")]
    MetaTooLarge,
}

/// The source's chunks as a blocking reader, which refuses to be read past `allowed` (the
/// filter moves it on at each entry: see [`MAX_ENTRY_META`]).
struct Source {
    from: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    ended: bool,
    /// Bytes read so far, and how far they may go: shared with the filter's loop.
    read: Arc<AtomicU64>,
    allowed: Arc<AtomicU64>,
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.read.load(Ordering::Relaxed);
        let room = self.allowed.load(Ordering::Relaxed).saturating_sub(read);
        if room == 0 {
            return Err(std::io::Error::other(Ended::MetaTooLarge));
        }
        let buf_len = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let buf = &mut buf[..buf_len];
        while self.at == self.chunk.len() {
            if self.ended {
                return Ok(0);
            }
            match self.from.blocking_recv() {
                Some(c) if c.is_empty() => self.ended = true,
                Some(c) => {
                    self.chunk = c;
                    self.at = 0;
                }
                None => return Err(std::io::Error::other(Ended::BrokenOff)),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        self.read.store(read + n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The sink as a blocking writer, in chunks of [`CHUNK`].
struct Sink {
    to: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
}

impl Sink {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.to
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::other(Ended::SinkGone))
    }

    /// The rest, then the end (an empty chunk).
    fn end(&mut self) -> Result<(), TreeError> {
        self.send().map_err(|_| TreeError::SinkGone)?;
        self.to
            .blocking_send(Vec::new())
            .map_err(|_| TreeError::SinkGone)
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive with one of each kind of entry.
    fn archive() -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, "./src", std::io::empty()).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o4755);
        h.set_size(5);
        b.append_data(&mut h, "./src/run.sh", &b"hello"[..])
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        b.append_link(&mut h, "src/again.sh", "./src/run.sh")
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        b.append_link(&mut h, "src/outside", "/etc/passwd").unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "src/etc", "/etc").unwrap();
        // `append_data` refuses `..`: write the name into the header by hand.
        let mut h = tar::Header::new_old();
        h.set_size(3);
        h.set_mode(0o644);
        h.as_old_mut().name[..13].copy_from_slice(b"../escape.txt");
        h.set_cksum();
        b.append(&h, &b"bad"[..]).unwrap();
        b.into_inner().unwrap()
    }

    async fn run(input: Vec<u8>, limit: u64, end: bool) -> (Result<Filtered, TreeError>, Vec<u8>) {
        let (in_tx, in_rx) = mpsc::channel(4);
        let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(4);
        // (A filter that refused stops reading: the rest is not sent.)
        let feed = async move {
            for c in input.chunks(1000) {
                if in_tx.send(c.to_vec()).await.is_err() {
                    return;
                }
            }
            if end {
                let _ = in_tx.send(Vec::new()).await;
            }
        };
        let collect = async move {
            let mut all = Vec::new();
            let mut ended = false;
            while let Some(c) = out_rx.recv().await {
                ended = c.is_empty();
                all.extend(c);
            }
            (all, ended)
        };
        let (done, (), (out, ended)) = tokio::join!(filter(in_rx, out_tx, limit), feed, collect);
        assert_eq!(
            ended,
            done.is_ok(),
            "the end is sent exactly when all went through"
        );
        (done, out)
    }

    /// Folders, files (without set-id bits) and a hard link to a kept file go through; a
    /// symlink, a hard link out of the archive and a name with `..` are left out, said why.
    #[tokio::test]
    async fn a_folder_goes_through_without_links_out_or_names_that_leave_it() {
        let (done, out) = run(archive(), 1 << 20, true).await;
        let done = done.unwrap();
        assert_eq!(done.files, 2);
        assert_eq!(done.bytes, 5);
        let skipped: Vec<(&str, &str)> =
            done.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            skipped,
            [
                ("../escape.txt", "a name that leaves the folder"),
                ("src/etc", "a symlink"),
                ("src/outside", "a hard link to something not carried"),
            ]
        );
        let mut back = tar::Archive::new(out.as_slice());
        let kept: Vec<(String, tar::EntryType, u32)> = back
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.entry_type(),
                    h.mode().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                ("src".into(), tar::EntryType::Directory, 0o755),
                ("src/run.sh".into(), tar::EntryType::Regular, 0o755),
                ("src/again.sh".into(), tar::EntryType::Link, 0o644),
            ]
        );
    }

    /// Past the limit of file bytes, a source that breaks off, and garbage: refused, and no
    /// end is sent on (the `run` helper checks that).
    #[tokio::test]
    async fn too_large_broken_off_and_garbage_are_refused_without_an_end() {
        let (done, _) = run(archive(), 4, true).await;
        assert!(matches!(done, Err(TreeError::TooLarge(4))), "{done:?}");
        let (done, _) = run(archive()[..1500].to_vec(), 1 << 20, false).await;
        assert!(matches!(done, Err(TreeError::BrokenOff)), "{done:?}");
        let (done, _) = run(vec![b'x'; 2048], 1 << 20, true).await;
        assert!(matches!(done, Err(TreeError::NotTar(_))), "{done:?}");
    }

    /// A long name is read whole by the parser, so its size is bounded: one of 300 KiB is
    /// refused before it is held; and at most 1,000 names left out are listed, the rest
    /// counted, each cut to 512 bytes.
    #[tokio::test]
    async fn long_names_are_bounded_and_so_is_the_list_of_what_was_left_out() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        let long = format!("{}f", "a/".repeat(150_000));
        b.append_data(&mut h, &long, &b"x"[..]).unwrap();
        let (done, _) = run(b.into_inner().unwrap(), 1 << 20, true).await;
        assert!(matches!(done, Err(TreeError::MetaTooLarge)), "{done:?}");

        let mut b = tar::Builder::new(Vec::new());
        for i in 0..1001 {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            let name = if i == 0 {
                "b".repeat(600)
            } else {
                format!("l{i}")
            };
            b.append_link(&mut h, &name, "/").unwrap();
        }
        let (done, _) = run(b.into_inner().unwrap(), 1 << 20, true).await;
        let done = done.unwrap();
        assert_eq!(done.skipped.len(), 1000);
        assert_eq!(done.skipped_more, 1);
        let cut = format!("{}…", "b".repeat(512));
        assert_eq!(
            done.skipped.get(&cut),
            Some(&"a symlink"),
            "{:?}",
            done.skipped.keys().next()
        );
    }

    #[test]
    fn names_are_made_relative_and_never_leave_the_folder() {
        assert_eq!(clean_name(b"./a//b/"), Some("a/b".into()));
        assert_eq!(clean_name(b"/etc/x"), Some("etc/x".into()));
        assert_eq!(clean_name(b"."), Some(String::new()));
        assert_eq!(clean_name(b"a/../../b"), None);
        assert_eq!(clean_name(b"\xff"), None);
    }
}
