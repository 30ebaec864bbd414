//! Repository sources for sandbox workspaces: which host paths may be mounted at all, and the
//! staged copy a read-write workspace works on (copied in, synced back). Pure host-side file
//! logic; how the copy reaches the container is the implementation's business. The sync back
//! itself, a tar stream applied entry by entry through a directory handle, with a bound on the
//! memory it holds and on what it reads, is [`sync_back`].
//!
//! Rules (issues 16 and 33):
//! - a repository must lie inside one of the configured roots ([`RepoRoots`]);
//! - the given path must be absolute and already resolved: its canonical form must equal it, so
//!   a symlink anywhere in it (`chain/src -> /`) or a `..` is refused, not followed;
//! - `.git/hooks` (at any depth) is never carried into a sandbox; the rest of `.git` is, so a
//!   task can run `git log`, `git diff` and even commit in its copy;
//! - **nothing under a `.git` is carried back**, at any depth and whatever it is (the directory,
//!   a submodule's `.git` file pointing at another gitdir, `.git/modules/*/...`). A `.git` is
//!   where git takes its orders from, and the host runs git in the repository, often as root:
//!   `core.fsmonitor`, `core.hooksPath`, `core.sshCommand`, filter and diff drivers in
//!   `config`, `info/attributes` naming them, hooks, each submodule's own `config` and `hooks`
//!   under `modules/`, a `gitdir:` redirect. Filtering that list is a race against git's next
//!   feature, so the whole of it stays on the host: what comes back is the **working tree**, as
//!   files, and the task's commits stay in the sandbox (the operator reviews the changed files
//!   and commits them). A `.git` path the task changed, made or deleted is listed in
//!   [`SyncReport::refused`]; one it left as it was is not;
//! - every write and delete goes through a handle on the repository's root directory, opened
//!   once: each path component is opened with `O_NOFOLLOW | O_DIRECTORY` from the previous one
//!   (a missing one made with `mkdirat`), a file is written to a fresh, randomly named
//!   temporary (`O_CREAT | O_EXCL | O_NOFOLLOW`, so a planted `.chorus-sync-*` link is never
//!   opened), owned and moded through its descriptor, `fsync`ed and renamed over the target in
//!   the same directory; a delete is an `unlinkat` of a name seen to be a regular file. No
//!   symlink in the repository is followed, checked-then-swapped or not (a name that is a
//!   symlink is refused), and a file is replaced, never written in place, so a hard link is
//!   not written through;
//! - what is written lands owned by the repository root directory's owner (not the node's user,
//!   often root), with permission bits only and no group or other write (`mode & 0o755`: no
//!   setuid, setgid or sticky bit; the executable bit is kept); directories made are `0o755`;
//! - mounts nested in the repository are skipped both ways, as the read-only mount (a
//!   non-recursive bind) skips them: a directory on another mount (another mount id, or another
//!   device where the kernel gives no mount id) is packed as an empty directory and nothing is
//!   written or deleted below it, a file on another mount is neither packed nor replaced;
//! - symlinks, devices, fifos and sockets made in the sandbox are not carried back;
//! - names are bytes from the tar stream to the host (`OsStr`), never decoded (issue 51).
//!
//! The working tree still carries what the task wrote, which the operator should read before
//! committing: a repository whose own configuration points git at working-tree hooks
//! (`core.hooksPath = .husky`) or filters will run what a task put there.

mod gitdir;
mod sync;

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, StatxFlags};

use super::error::{ErrorCategory, SandboxError, SandboxResult};

pub use sync::{sync_back, sync_back_tracked, SyncReport};

/// The directories repositories may come from. Empty: no repository may be mounted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoRoots {
    roots: Vec<PathBuf>,
}

impl RepoRoots {
    /// Roots from `paths`; each must exist and is resolved once here.
    pub fn new<I, P>(paths: I) -> SandboxResult<Self>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut roots = Vec::new();
        for p in paths {
            let p = p.as_ref();
            let canonical = p.canonicalize().map_err(|e| {
                SandboxError::new(
                    ErrorCategory::PolicyViolation,
                    format!("repository root {}: {e}", p.display()),
                )
            })?;
            roots.push(canonical);
        }
        Ok(RepoRoots { roots })
    }

    /// The resolved roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Checks that `path` may be used as a repository: absolute, free of `..`, equal to its own
    /// resolved form (no symlink anywhere in it), a directory, and inside a root. Returns it.
    pub fn confine(&self, path: &Path) -> SandboxResult<PathBuf> {
        let refuse = |why: String| {
            Err(SandboxError::new(
                ErrorCategory::PolicyViolation,
                format!("repository {}: {why}", path.display()),
            ))
        };
        if !path.is_absolute() {
            return refuse("must be an absolute path".into());
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return refuse("must not contain `..`".into());
        }
        let resolved = match path.canonicalize() {
            Ok(p) => p,
            Err(e) => return refuse(e.to_string()),
        };
        if resolved != path {
            return refuse(format!(
                "resolves to {} (a symlink in the path); give the resolved path",
                resolved.display()
            ));
        }
        if !resolved.is_dir() {
            return refuse("not a directory".into());
        }
        if !self.roots.iter().any(|r| resolved.starts_with(r)) {
            return refuse(format!(
                "outside the allowed repository roots {:?}",
                self.roots
            ));
        }
        Ok(resolved)
    }
}

/// Whether `rel` (relative, `/`-separated) is a git hooks directory or inside one, at any
/// depth: `.git/hooks`, and a submodule's `.git/modules/<name>/hooks` (`<name>` may hold
/// slashes; a branch or log named `hooks` under `refs/` or `logs/` is not one). Never packed.
pub fn is_git_hook(rel: &Path) -> bool {
    let parts: Vec<_> = rel.components().map(|c| c.as_os_str()).collect();
    parts.iter().enumerate().any(|(i, part)| {
        if !is_dot_git(part) {
            return false;
        }
        let gitdir = &parts[i + 1..];
        match gitdir {
            [first, ..] if *first == "hooks" => true,
            [first, rest @ ..] if *first == "modules" => rest
                .iter()
                .take_while(|p| **p != "refs" && **p != "logs" && **p != "objects")
                .skip(1)
                .any(|p| *p == "hooks"),
            _ => false,
        }
    })
}

/// Whether `rel` is a `.git` or lies under one, at any depth: never synced back. The name is
/// compared without regard to ASCII case, as git does on case-insensitive file systems.
pub fn is_git_path(rel: &Path) -> bool {
    rel.components().any(|c| is_dot_git(c.as_os_str()))
}

fn is_dot_git(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().eq_ignore_ascii_case(b".git")
}

/// Which mount a file is on: what a non-recursive bind mount of the repository shows is the
/// files of the root's mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MountId {
    dev: (u32, u32),
    /// The mount id (Linux 5.8 on); without it, the device alone decides.
    mnt: Option<u64>,
}

/// What the repository's rules need to know of a file, from one `statx` that never follows a
/// symlink.
#[derive(Debug, Clone, Copy)]
struct Meta {
    kind: FileType,
    /// Permission bits (and setuid/setgid/sticky).
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mount: MountId,
}

impl Meta {
    /// `path` relative to `dir` (`""`: `dir` itself), not following a final symlink.
    fn at(dir: impl AsFd, path: &Path) -> std::io::Result<Meta> {
        let flags = if path.as_os_str().is_empty() {
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW
        } else {
            AtFlags::SYMLINK_NOFOLLOW
        };
        let want = StatxFlags::TYPE
            | StatxFlags::MODE
            | StatxFlags::UID
            | StatxFlags::GID
            | StatxFlags::SIZE
            | StatxFlags::MNT_ID;
        let st = rustix::fs::statx(dir, path, flags, want)?;
        let has_mnt = st.stx_mask & StatxFlags::MNT_ID.bits() != 0;
        Ok(Meta {
            kind: FileType::from_raw_mode(st.stx_mode.into()),
            mode: u32::from(st.stx_mode) & 0o7777,
            uid: st.stx_uid,
            gid: st.stx_gid,
            size: st.stx_size,
            mount: MountId {
                dev: (st.stx_dev_major, st.stx_dev_minor),
                mnt: has_mnt.then_some(st.stx_mnt_id),
            },
        })
    }

    /// `path` (absolute, or relative to the working directory), not following a final symlink.
    fn of(path: &Path) -> std::io::Result<Meta> {
        Meta::at(rustix::fs::CWD, path)
    }
}

/// The regular files, symlinks and directories of `repo` that pass the filters, as a tar
/// archive to unpack at the workspace path, plus the set of regular files it holds (what a
/// later sync may delete). Symlinks are stored as links, never followed; `.git/hooks` is left
/// out; a directory on another mount than `repo` is stored empty and a file on one not at all
/// (as the read-only mount shows them). `owner` sets the entries' uid/gid.
pub fn pack_repo(
    repo: &Path,
    include: Option<&globset::GlobSet>,
    exclude: Option<&globset::GlobSet>,
    owner: (u32, u32),
) -> SandboxResult<(Vec<u8>, BTreeSet<PathBuf>)> {
    let root =
        Meta::of(repo).map_err(|e| SandboxError::io(format!("stat {}", repo.display()), e))?;
    let mut pack = Pack {
        root: repo,
        mount: root.mount,
        include,
        exclude,
        owner,
        tar: tar::Builder::new(Vec::new()),
        files: BTreeSet::new(),
    };
    pack.dir(Path::new(""))?;
    let bytes = pack
        .tar
        .into_inner()
        .map_err(|e| SandboxError::io("finishing the repository archive", e))?;
    Ok((bytes, pack.files))
}

/// A repository being packed.
struct Pack<'a> {
    root: &'a Path,
    mount: MountId,
    include: Option<&'a globset::GlobSet>,
    exclude: Option<&'a globset::GlobSet>,
    owner: (u32, u32),
    tar: tar::Builder<Vec<u8>>,
    files: BTreeSet<PathBuf>,
}

impl Pack<'_> {
    fn dir(&mut self, rel: &Path) -> SandboxResult<()> {
        let dir = self.root.join(rel);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| SandboxError::io(format!("reading {}", dir.display()), e))?
            .collect::<Result<_, _>>()
            .map_err(|e| SandboxError::io("reading a directory entry", e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let rel_path = rel.join(entry.file_name());
            if is_git_hook(&rel_path) || self.exclude.is_some_and(|g| g.is_match(&rel_path)) {
                continue;
            }
            let src = entry.path();
            let meta = Meta::of(&src)
                .map_err(|e| SandboxError::io(format!("stat {}", src.display()), e))?;
            let mut header = tar::Header::new_gnu();
            header.set_uid(u64::from(self.owner.0));
            header.set_gid(u64::from(self.owner.1));
            header.set_mtime(0);
            let nested_mount = meta.mount != self.mount;
            if meta.kind == FileType::Directory {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(meta.mode | 0o700);
                header.set_size(0);
                self.tar
                    .append_data(&mut header, &rel_path, std::io::empty())
                    .map_err(|e| SandboxError::io("archiving a directory", e))?;
                if !nested_mount {
                    self.dir(&rel_path)?;
                }
                continue;
            }
            if nested_mount || self.include.is_some_and(|g| !g.is_match(&rel_path)) {
                continue;
            }
            if meta.kind == FileType::Symlink {
                let target = std::fs::read_link(&src)
                    .map_err(|e| SandboxError::io(format!("readlink {}", src.display()), e))?;
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                self.tar
                    .append_link(&mut header, &rel_path, &target)
                    .map_err(|e| SandboxError::io("archiving a symlink", e))?;
            } else if meta.kind == FileType::RegularFile {
                let data = std::fs::read(&src)
                    .map_err(|e| SandboxError::io(format!("reading {}", src.display()), e))?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(meta.mode & 0o777);
                header.set_size(data.len() as u64);
                self.tar
                    .append_data(&mut header, &rel_path, data.as_slice())
                    .map_err(|e| SandboxError::io("archiving a file", e))?;
                self.files.insert(rel_path);
            }
            // Sockets, fifos and devices never go in.
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confine_refuses_symlinks_dotdot_relative_and_outside_paths() {
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().canonicalize().unwrap();
        let roots = RepoRoots::new([&root_path]).unwrap();
        let repo = root_path.join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::os::unix::fs::symlink("/", root_path.join("src")).unwrap();
        std::os::unix::fs::symlink(&repo, root_path.join("alias")).unwrap();
        assert_eq!(roots.confine(&repo).unwrap(), repo);
        for bad in [
            root_path.join("src"),
            root_path.join("alias"),
            repo.join(".."),
            repo.join("../repo"),
            PathBuf::from("repo"),
            PathBuf::from("/etc"),
            root_path.join("missing"),
        ] {
            let err = roots.confine(&bad).unwrap_err();
            assert_eq!(err.category, ErrorCategory::PolicyViolation, "{bad:?}");
        }
        let none = RepoRoots::default();
        assert!(none.confine(&repo).is_err(), "no roots: nothing allowed");
    }

    #[test]
    fn git_hooks_are_recognised_at_any_depth() {
        assert!(is_git_hook(Path::new(".git/hooks/pre-commit")));
        assert!(is_git_hook(Path::new("sub/.git/hooks")));
        assert!(!is_git_hook(Path::new(".git/config")));
        assert!(!is_git_hook(Path::new("hooks/.git")));
        assert!(is_git_hook(Path::new(
            ".git/modules/sub/hooks/post-checkout"
        )));
    }

    #[test]
    fn git_paths_are_anything_under_a_dot_git_at_any_depth() {
        for git in [
            ".git",
            ".git/config",
            ".git/info/attributes",
            ".git/modules/sub/hooks/post-checkout",
            "sub/.git",
            "vendor/lib/.git/config",
            ".GIT/config",
        ] {
            assert!(is_git_path(Path::new(git)), "{git}");
        }
        for not in [
            ".gitignore",
            ".gitattributes",
            ".github/ci.yml",
            "src/git/x",
            "a.git",
        ] {
            assert!(!is_git_path(Path::new(not)), "{not}");
        }
    }

    /// A mount below the repository is skipped as the read-only mount (non-recursive) skips
    /// it: its directory is there, empty, and nothing in it is packed or counted as copied in.
    #[test]
    fn pack_skips_nested_mounts() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("top.txt"), "top").unwrap();
        let sub = repo.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let Some(_mounted) = TmpfsGuard::mount(&sub) else {
            return;
        };
        std::fs::write(sub.join("below.txt"), "below").unwrap();
        let (tar, files) = pack_repo(repo.path(), None, None, (0, 0)).unwrap();
        let mut names = Vec::new();
        for e in tar::Archive::new(tar.as_slice()).entries().unwrap() {
            names.push(e.unwrap().path().unwrap().display().to_string());
        }
        assert_eq!(names, ["sub", "top.txt"]);
        assert_eq!(files, BTreeSet::from([PathBuf::from("top.txt")]));
    }

    /// A tmpfs mounted on `path` for a test, unmounted on drop; `None` (and a note) when not
    /// root, who alone may mount.
    pub(super) struct TmpfsGuard(PathBuf);

    impl TmpfsGuard {
        pub(super) fn mount(path: &Path) -> Option<TmpfsGuard> {
            if !rustix::process::geteuid().is_root() {
                eprintln!("not root: cannot mount a tmpfs, nested-mount case not checked");
                return None;
            }
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=1m,mode=0755", "chorus-test"])
                .arg(path)
                .status()
                .expect("running mount");
            assert!(status.success(), "mount tmpfs on {}", path.display());
            Some(TmpfsGuard(path.to_path_buf()))
        }
    }

    impl Drop for TmpfsGuard {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }

    #[test]
    fn pack_leaves_out_hooks_and_keeps_links_as_links() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".git/hooks")).unwrap();
        std::fs::write(repo.path().join(".git/hooks/pre-commit"), "evil").unwrap();
        std::fs::create_dir_all(repo.path().join(".git/modules/sub/hooks")).unwrap();
        std::fs::write(
            repo.path().join(".git/modules/sub/hooks/post-checkout"),
            "evil",
        )
        .unwrap();
        std::fs::write(repo.path().join(".git/config"), "[core]").unwrap();
        std::fs::write(repo.path().join("a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", repo.path().join("link")).unwrap();
        let (tar, files) = pack_repo(repo.path(), None, None, (1, 2)).unwrap();
        let mut names = Vec::new();
        let mut archive = tar::Archive::new(tar.as_slice());
        for e in archive.entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(e.header().uid().unwrap(), 1);
            names.push((
                e.path().unwrap().display().to_string(),
                e.header().entry_type(),
            ));
        }
        assert!(names.iter().all(|(n, _)| !n.contains("hooks")), "{names:?}");
        assert!(names.contains(&("link".into(), tar::EntryType::Symlink)));
        assert!(files.contains(Path::new("a.txt")) && files.contains(Path::new(".git/config")));
        assert!(!files.contains(Path::new("link")));
    }
}
