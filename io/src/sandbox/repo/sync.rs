//! The sync back of a read-write repository: the sandbox's working tree applied to the host
//! repository through one handle on its root directory, never following a symlink and never
//! touching a `.git` (the rules are the parent module's).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::gitdir::{git_dirs_after, HostEntry, HEAD_PREFIX};
use super::{is_git_path, Meta, MountId};
use crate::sandbox::error::{SandboxError, SandboxResult};
use crate::sandbox::FileTree;

/// The permission bits a synced file may keep: no setuid/setgid/sticky, no group or other
/// write.
const FILE_MODE_MASK: u32 = 0o777 & !0o022;

/// The mode of a directory the sync makes.
const DIR_MODE: u32 = 0o755;

/// How many random temporary names to try before giving up (each is 128 random bits: a clash
/// means someone is planting names, not bad luck).
const TEMP_NAME_TRIES: usize = 4;

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
    /// directory git would take for a repository (`gitdir.rs`).
    pub refused: Vec<String>,
    /// Files of the repository that the sandbox holds as something the sync does not carry
    /// (a symlink, a directory, a fifo, a name that is not UTF-8), as `path (what)`: left on
    /// the host as they were, neither replaced nor deleted.
    pub kept: Vec<String>,
}

impl SyncReport {
    /// The most paths [`SyncReport::summary`] names of each kind.
    const NAMED: usize = 10;

    /// One line for the task's result when the sync did not carry everything back, `None`
    /// when it did.
    pub fn summary(&self) -> Option<String> {
        if self.refused.is_empty() && self.kept.is_empty() {
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

/// Applies the sandbox's workspace `tree` (regular files only, as read back) to `repo`: new and
/// changed files are written, files from `copied_in` that are gone are deleted, under the
/// parent module's rules: nothing under a `.git` or in a directory git would take for a
/// repository after the sync, nothing through a symlink or onto another mount, files owned by
/// the repository root's owner with `mode & 0o755`. A file whose contents and permission bits
/// did not change is left alone. `others` names what the sandbox holds that is not a regular
/// file (path → what it is): a copied-in file there is kept, not deleted, and reported.
/// Errors only when the repository cannot be opened or a write or delete fails; refusals are
/// in the report.
pub fn sync_back(
    repo: &Path,
    tree: &FileTree,
    others: &BTreeMap<String, &'static str>,
    copied_in: &BTreeSet<PathBuf>,
) -> SandboxResult<SyncReport> {
    let root = RepoDir::open(repo)
        .map_err(|e| SandboxError::io(format!("opening {}", repo.display()), e))?;
    let mut report = SyncReport::default();
    let gone: Vec<&Path> = copied_in
        .iter()
        .filter(|p| {
            let key = p.to_string_lossy();
            !tree.contains_key(key.as_ref()) && !others.contains_key(key.as_ref())
        })
        .map(PathBuf::as_path)
        .collect();
    let git_dirs = git_dirs_after(
        tree.iter().map(|(p, e)| (p.as_str(), e.data.as_slice())),
        gone.iter().copied(),
        |rel| root.host_entry(rel),
    )
    .map_err(|e| SandboxError::io(format!("reading {}", repo.display()), e))?;
    // Git's orders: a `.git`, a directory git takes for a repository, or what would make one.
    let in_git = |rel: &Path| is_git_path(rel) || git_dirs.refuses(rel);
    for (rel, entry) in tree {
        let rel_path = Path::new(rel);
        let Some((parents, name)) = split(rel_path) else {
            report.refused.push(rel.clone());
            continue;
        };
        let outcome = if in_git(rel_path) {
            // Never written; reported only when the task changed it.
            match root.holds(&parents, name, &entry.data) {
                Ok(true) => Outcome::Unchanged,
                Ok(false) => Outcome::Refused,
                Err(e) => return Err(io_err("reading", repo, rel, e)),
            }
        } else {
            root.write(&parents, name, &entry.data, entry.mode)
                .map_err(|e| io_err("writing", repo, rel, e))?
        };
        match outcome {
            Outcome::Done => report.written += 1,
            Outcome::Unchanged => {}
            Outcome::Refused => report.refused.push(rel.clone()),
        }
    }
    for rel in copied_in {
        let key = rel.to_string_lossy();
        if let Some(what) = others.get(key.as_ref()) {
            report.kept.push(format!("{key} ({what})"));
            continue;
        }
        if tree.contains_key(key.as_ref()) {
            continue;
        }
        let outcome = match split(rel) {
            Some((parents, name)) if !in_git(rel) => root
                .delete(&parents, name)
                .map_err(|e| io_err("deleting", repo, &key, e))?,
            _ => Outcome::Refused,
        };
        match outcome {
            Outcome::Done => report.deleted += 1,
            Outcome::Unchanged => {}
            Outcome::Refused => report.refused.push(key.into_owned()),
        }
    }
    Ok(report)
}

fn io_err(what: &str, repo: &Path, rel: &str, e: std::io::Error) -> SandboxError {
    SandboxError::io(format!("{what} {}", repo.join(rel).display()), e)
}

/// The directories leading to `rel` and its name, when `rel` is plainly relative (no `..`,
/// no root, not empty).
fn split(rel: &Path) -> Option<(Vec<&OsStr>, &OsStr)> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p),
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

    /// Writes `data` as `parents/name` with permission bits from `mode` (masked), unless the
    /// file there already has these contents and bits.
    fn write(
        &self,
        parents: &[&OsStr],
        name: &OsStr,
        data: &[u8],
        mode: u32,
    ) -> std::io::Result<Outcome> {
        let Walk::Dir(dir) = self.walk(parents, true)? else {
            return Ok(Outcome::Refused);
        };
        self.write_in(&dir, name, data, mode)
    }

    /// [`RepoDir::write`] once the directory is open.
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
        let (tmp, fd) = create_temp(dir)?;
        let written = (|| {
            let mut file = File::from(fd);
            file.write_all(data)?;
            self.own(&file)?;
            rustix::fs::fchmod(&file, Mode::from_bits_truncate(mode))?;
            file.sync_all()?;
            drop(file);
            rustix::fs::renameat(dir, &tmp, dir, name)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
        }
        written
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

    /// Whether `parents/name` is a regular file on the root's mount holding exactly `data`
    /// (read through the same handles; nothing is made).
    fn holds(&self, parents: &[&OsStr], name: &OsStr, data: &[u8]) -> std::io::Result<bool> {
        let Walk::Dir(dir) = self.walk(parents, false)? else {
            return Ok(false);
        };
        match self.place(&dir, name)? {
            Place::File(meta) if meta.size == data.len() as u64 => read_is(&dir, name, data),
            _ => Ok(false),
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

/// Whether regular file `name` in `dir` holds exactly `data`. Opened without following a
/// symlink and without blocking (a fifo swapped in meanwhile does not hang the sync).
fn read_is(dir: &OwnedFd, name: &OsStr, data: &[u8]) -> std::io::Result<bool> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOENT) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::fstat(&fd)?.st_mode & 0o170000 != 0o100000 {
        return Ok(false);
    }
    let mut held = Vec::with_capacity(data.len());
    File::from(fd)
        .take(data.len() as u64 + 1)
        .read_to_end(&mut held)?;
    Ok(held == data)
}

/// The first [`HEAD_PREFIX`] bytes of regular file `name` in `dir` (empty when it is no longer
/// one), opened as [`read_is`] opens it.
fn read_prefix(dir: &OwnedFd, name: &OsStr) -> std::io::Result<Vec<u8>> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::fstat(&fd)?.st_mode & 0o170000 != 0o100000 {
        return Ok(Vec::new());
    }
    let mut held = Vec::with_capacity(HEAD_PREFIX);
    File::from(fd)
        .take(HEAD_PREFIX as u64)
        .read_to_end(&mut held)?;
    Ok(held)
}

/// Creates a new file in `dir` under an unpredictable name, mode 0o600 until it is finished.
/// `O_EXCL` refuses an existing name, a symlink included, so nothing planted is opened.
fn create_temp(dir: &OwnedFd) -> std::io::Result<(String, OwnedFd)> {
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
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
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
    use crate::sandbox::FileEntry;

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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &copied_in).unwrap();
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
        let report = sync_back(
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
        assert_eq!(report.refused, ["sub/below.txt", "sub/new.txt"]);
        assert_eq!(read(sub.join("below.txt")), b"below\n");
        assert!(!sub.join("new.txt").exists());
        let report = sync_back(
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
        let report = sync_back(repo.path(), &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
            let report = sync_back(root, &tree, &BTreeMap::new(), &BTreeSet::new()).unwrap();
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
        let report = sync_back(&root, &tree, &BTreeMap::new(), &copied_in).unwrap();
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
        let report = sync_back(repo.path(), &tree, &others, &copied_in).unwrap();
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
}
