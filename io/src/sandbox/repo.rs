//! Repository sources for sandbox workspaces: which host paths may be mounted at all, and the
//! staged copy a read-write workspace works on (copied in, synced back). Pure host-side file
//! logic; how the copy reaches the container is the implementation's business.
//!
//! Rules (issue 16):
//! - a repository must lie inside one of the configured roots ([`RepoRoots`]);
//! - the given path must be absolute and already resolved: its canonical form must equal it, so
//!   a symlink anywhere in it (`chain/src -> /`) or a `..` is refused, not followed;
//! - `.git/hooks` is never carried into a sandbox nor back out of it (a sandbox must not get to
//!   run code on the host's next `git commit`), and symlinks, devices, fifos and sockets made in
//!   the sandbox are not carried back.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::error::{ErrorCategory, SandboxError, SandboxResult};
use super::FileTree;

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

/// Whether `rel` (relative, `/`-separated) is inside `.git/hooks`, at any depth (submodules keep
/// their own `.git` directories).
pub fn is_git_hook(rel: &Path) -> bool {
    let parts: Vec<_> = rel.components().collect();
    parts
        .windows(2)
        .any(|w| w[0].as_os_str() == ".git" && w[1].as_os_str() == "hooks")
}

/// The regular files, symlinks and directories of `repo` that pass the filters, as a tar
/// archive to unpack at the workspace path, plus the set of regular files it holds (what a
/// later sync may delete). Symlinks are stored as links, never followed; `.git/hooks` is left
/// out. `owner` sets the entries' uid/gid.
pub fn pack_repo(
    repo: &Path,
    include: Option<&globset::GlobSet>,
    exclude: Option<&globset::GlobSet>,
    owner: (u32, u32),
) -> SandboxResult<(Vec<u8>, BTreeSet<PathBuf>)> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut files = BTreeSet::new();
    pack_dir(
        repo,
        Path::new(""),
        include,
        exclude,
        owner,
        &mut tar,
        &mut files,
    )?;
    let bytes = tar
        .into_inner()
        .map_err(|e| SandboxError::io("finishing the repository archive", e))?;
    Ok((bytes, files))
}

fn pack_dir(
    root: &Path,
    rel: &Path,
    include: Option<&globset::GlobSet>,
    exclude: Option<&globset::GlobSet>,
    owner: (u32, u32),
    tar: &mut tar::Builder<Vec<u8>>,
    files: &mut BTreeSet<PathBuf>,
) -> SandboxResult<()> {
    let dir = root.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| SandboxError::io(format!("reading {}", dir.display()), e))?
        .collect::<Result<_, _>>()
        .map_err(|e| SandboxError::io("reading a directory entry", e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel_path = rel.join(entry.file_name());
        if is_git_hook(&rel_path) || exclude.is_some_and(|g| g.is_match(&rel_path)) {
            continue;
        }
        let src = entry.path();
        let meta = std::fs::symlink_metadata(&src)
            .map_err(|e| SandboxError::io(format!("stat {}", src.display()), e))?;
        let mut header = tar::Header::new_gnu();
        header.set_uid(u64::from(owner.0));
        header.set_gid(u64::from(owner.1));
        header.set_mtime(0);
        let ft = meta.file_type();
        if ft.is_dir() {
            use std::os::unix::fs::PermissionsExt;
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(meta.permissions().mode() & 0o7777 | 0o700);
            header.set_size(0);
            tar.append_data(&mut header, &rel_path, std::io::empty())
                .map_err(|e| SandboxError::io("archiving a directory", e))?;
            pack_dir(root, &rel_path, include, exclude, owner, tar, files)?;
            continue;
        }
        if include.is_some_and(|g| !g.is_match(&rel_path)) {
            continue;
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(&src)
                .map_err(|e| SandboxError::io(format!("readlink {}", src.display()), e))?;
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            tar.append_link(&mut header, &rel_path, &target)
                .map_err(|e| SandboxError::io("archiving a symlink", e))?;
        } else if ft.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let data = std::fs::read(&src)
                .map_err(|e| SandboxError::io(format!("reading {}", src.display()), e))?;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(meta.permissions().mode() & 0o777);
            header.set_size(data.len() as u64);
            tar.append_data(&mut header, &rel_path, data.as_slice())
                .map_err(|e| SandboxError::io("archiving a file", e))?;
            files.insert(rel_path);
        }
        // Sockets, fifos and devices never go in.
    }
    Ok(())
}

/// What a sync back changed in the repository.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Files written (new or changed).
    pub written: usize,
    /// Files deleted (they were copied in and are gone from the sandbox).
    pub deleted: usize,
    /// Paths not carried back: `.git/hooks`, or a place in the repository that is a symlink.
    pub refused: Vec<String>,
}

/// Applies the sandbox's workspace `tree` (regular files only, as read back) to `repo`: new and
/// changed files are written, files from `copied_in` that are gone are deleted. Nothing is
/// written through a symlink in the repository, nothing into `.git/hooks`; modes keep only the
/// permission bits (no setuid/setgid/sticky).
pub fn sync_back(
    repo: &Path,
    tree: &FileTree,
    copied_in: &BTreeSet<PathBuf>,
) -> SandboxResult<SyncReport> {
    use std::os::unix::fs::PermissionsExt;
    let mut report = SyncReport::default();
    for (rel, entry) in tree {
        let rel_path = PathBuf::from(rel);
        let safe = rel_path
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !safe || is_git_hook(&rel_path) || !no_symlink_on_the_way(repo, &rel_path) {
            report.refused.push(rel.clone());
            continue;
        }
        let dst = repo.join(&rel_path);
        if std::fs::read(&dst).ok().as_deref() == Some(entry.data.as_slice()) {
            let mode = entry.mode & 0o777;
            let _ = std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode));
            continue;
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| SandboxError::io(format!("creating {}", parent.display()), e))?;
        }
        // Replace rather than write in place, so a hard link in the repository is not written
        // through either.
        let tmp = dst.with_file_name(format!(
            ".chorus-sync-{}",
            dst.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        std::fs::write(&tmp, &entry.data)
            .and_then(|()| {
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(entry.mode & 0o777))
            })
            .and_then(|()| std::fs::rename(&tmp, &dst))
            .map_err(|e| SandboxError::io(format!("writing {}", dst.display()), e))?;
        report.written += 1;
    }
    for rel in copied_in {
        let key = rel.to_string_lossy();
        if tree.contains_key(key.as_ref()) || !no_symlink_on_the_way(repo, rel) {
            continue;
        }
        let dst = repo.join(rel);
        if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_file()) {
            std::fs::remove_file(&dst)
                .map_err(|e| SandboxError::io(format!("deleting {}", dst.display()), e))?;
            report.deleted += 1;
        }
    }
    Ok(report)
}

/// Whether no existing component of `repo/rel` (the file itself included) is a symlink.
fn no_symlink_on_the_way(repo: &Path, rel: &Path) -> bool {
    let mut at = repo.to_path_buf();
    for c in rel.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return false,
            Ok(_) => {}
            Err(_) => return true, // the rest does not exist yet
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::FileEntry;

    fn entry(data: &[u8], mode: u32) -> FileEntry {
        FileEntry {
            data: data.to_vec(),
            mode,
        }
    }

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
    }

    #[test]
    fn pack_leaves_out_hooks_and_keeps_links_as_links() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".git/hooks")).unwrap();
        std::fs::write(repo.path().join(".git/hooks/pre-commit"), "evil").unwrap();
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

    #[test]
    fn sync_back_writes_deletes_and_refuses_hooks_and_symlinked_places() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("keep.txt"), "same").unwrap();
        std::fs::write(repo.path().join("gone.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), repo.path().join("out")).unwrap();
        let copied_in: BTreeSet<PathBuf> = ["keep.txt", "gone.txt"].map(PathBuf::from).into();
        let mut tree = FileTree::new();
        tree.insert("keep.txt".into(), entry(b"same", 0o644));
        tree.insert("new/dir/file.txt".into(), entry(b"new", 0o4755));
        tree.insert(".git/hooks/post-checkout".into(), entry(b"evil", 0o755));
        tree.insert("out/escape.txt".into(), entry(b"escape", 0o644));
        let report = sync_back(repo.path(), &tree, &copied_in).unwrap();
        assert_eq!(report.written, 1);
        assert_eq!(report.deleted, 1);
        assert_eq!(report.refused.len(), 2, "{report:?}");
        assert!(!repo.path().join("gone.txt").exists());
        assert!(!repo.path().join(".git/hooks").exists());
        assert!(!outside.path().join("escape.txt").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(repo.path().join("new/dir/file.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "setuid bit dropped");
    }
}
