//! What appears at the workspace path: an empty tmpfs, a repository bind-mounted read-only, a
//! filtered copy of one, or a read-write repository's copy in a tmpfs that is synced back
//! ([`stage_workspace`], `DockerSandbox::sync_workspace`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::container::Container;
use super::exec::Piece;
use super::host_config::WorkspaceMount;
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::repo::SyncReport;
use crate::sandbox::RepoMount;

/// The result of [`stage_workspace`].
#[derive(Debug, Clone)]
pub struct StagedWorkspace {
    /// What appears at the workspace path.
    pub mount: WorkspaceMount,
    /// The host directory made for it, to delete with the sandbox (`None`: nothing on the host).
    pub staging_dir: Option<PathBuf>,
    /// A tar archive to unpack into the workspace when the sandbox starts (read-write
    /// repositories).
    pub copy_in: Option<Vec<u8>>,
    /// Where a read-write workspace is synced back to.
    pub sync: Option<SyncTarget>,
}

impl StagedWorkspace {
    /// The default empty workspace: a tmpfs, nothing on the host.
    fn tmpfs() -> Self {
        StagedWorkspace {
            mount: WorkspaceMount::Tmpfs,
            staging_dir: None,
            copy_in: None,
            sync: None,
        }
    }
}

/// A read-write repository and the files copied from it, for the sync back.
#[derive(Debug, Clone)]
pub struct SyncTarget {
    /// The repository on the host.
    pub repo: PathBuf,
    /// The regular files copied in (a file among them that is gone is deleted on sync).
    pub copied_in: BTreeSet<PathBuf>,
}

/// Prepares what is mounted at the workspace path. `repo` is the mount and its path as already
/// confined by [`RepoRoots::confine`](crate::sandbox::repo::RepoRoots::confine).
///
/// - No repository: a sized tmpfs owned by the sandbox user; nothing on the host's disk.
/// - A read-only repository without filters: the repository itself, bind-mounted read-only and
///   non-recursively.
/// - A read-only repository with include/exclude patterns: a **copy** of the files that pass
///   the filters, mounted read-only. Masking excluded files with empty mounts would still show
///   their names, need one mount per file, and miss files created later; a copy shows exactly
///   the filtered tree. Symlinks are copied as links, never followed.
/// - A read-write repository: a sized tmpfs, into which the (filtered) repository is copied
///   when the sandbox starts, without `.git/hooks`; `DockerSandbox::sync_workspace` (and
///   `remove`) carries the changes back. The sandbox never writes to a host directory, so its
///   writes are bounded by the tmpfs size and it cannot plant symlinks on the host.
pub fn stage_workspace(
    staging_root: &Path,
    name: &str,
    repo: Option<(&RepoMount, &Path)>,
    policy: &SandboxPolicy,
) -> SandboxResult<StagedWorkspace> {
    let Some((repo, repo_path)) = repo else {
        return Ok(StagedWorkspace::tmpfs());
    };
    let include = build_globs(&repo.include)?;
    let exclude = build_globs(&repo.exclude)?;
    if !repo.read_only {
        stage_read_write(repo, repo_path, &include, &exclude, policy)
    } else if !repo.is_filtered() {
        stage_read_only(repo, repo_path)
    } else {
        stage_filtered_copy(
            &staging_root.join(name),
            repo,
            repo_path,
            &include,
            &exclude,
        )
    }
}

/// A read-write repository: packed now, unpacked into the workspace tmpfs on start.
fn stage_read_write(
    repo: &RepoMount,
    repo_path: &Path,
    include: &Option<globset::GlobSet>,
    exclude: &Option<globset::GlobSet>,
    policy: &SandboxPolicy,
) -> SandboxResult<StagedWorkspace> {
    let owner = repo
        .owner
        .or_else(|| policy.numeric_user())
        .unwrap_or((0, 0));
    let (archive, copied_in) =
        crate::sandbox::repo::pack_repo(repo_path, include.as_ref(), exclude.as_ref(), owner)?;
    Ok(StagedWorkspace {
        copy_in: Some(archive),
        sync: Some(SyncTarget {
            repo: repo_path.to_path_buf(),
            copied_in,
        }),
        ..StagedWorkspace::tmpfs()
    })
}

/// An unfiltered read-only repository: the repository itself, bind-mounted.
fn stage_read_only(repo: &RepoMount, repo_path: &Path) -> SandboxResult<StagedWorkspace> {
    if repo.owner.is_some() || repo.mode.is_some() {
        set_owner_and_mode(repo_path, repo.owner, repo.mode)?;
    }
    Ok(StagedWorkspace {
        mount: WorkspaceMount::Bind {
            source: repo_path.to_path_buf(),
            read_only: true,
        },
        ..StagedWorkspace::tmpfs()
    })
}

/// A filtered read-only repository: a copy in `dir`, bind-mounted. A failed copy leaves
/// nothing behind.
fn stage_filtered_copy(
    dir: &Path,
    repo: &RepoMount,
    repo_path: &Path,
    include: &Option<globset::GlobSet>,
    exclude: &Option<globset::GlobSet>,
) -> SandboxResult<StagedWorkspace> {
    make_dir(dir)?;
    let result = copy_filtered(repo_path, dir, Path::new(""), include, exclude, repo.owner)
        .and_then(|()| set_owner_and_mode(dir, repo.owner, repo.mode.or(Some(0o755))));
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(dir);
        return Err(e);
    }
    Ok(StagedWorkspace {
        mount: WorkspaceMount::Bind {
            source: dir.to_path_buf(),
            read_only: true,
        },
        staging_dir: Some(dir.to_path_buf()),
        ..StagedWorkspace::tmpfs()
    })
}

fn make_dir(dir: &Path) -> SandboxResult<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| SandboxError::io(format!("creating staging dir {}", dir.display()), e))
}

fn build_globs(patterns: &[String]) -> SandboxResult<Option<globset::GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut builder = globset::GlobSetBuilder::new();
    for p in patterns {
        let glob = globset::Glob::new(p).map_err(|e| {
            SandboxError::new(
                ErrorCategory::PolicyViolation,
                format!("bad pattern {p:?}: {e}"),
            )
        })?;
        builder.add(glob);
    }
    builder.build().map(Some).map_err(|e| {
        SandboxError::new(ErrorCategory::PolicyViolation, format!("bad patterns: {e}"))
    })
}

fn copy_filtered(
    src_root: &Path,
    dst_root: &Path,
    rel: &Path,
    include: &Option<globset::GlobSet>,
    exclude: &Option<globset::GlobSet>,
    owner: Option<(u32, u32)>,
) -> SandboxResult<()> {
    let src_dir = src_root.join(rel);
    let entries = std::fs::read_dir(&src_dir)
        .map_err(|e| SandboxError::io(format!("reading {}", src_dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SandboxError::io("reading a directory entry", e))?;
        let rel_path = rel.join(entry.file_name());
        // An excluded directory hides its whole subtree; an excluded file just itself.
        if exclude.as_ref().is_some_and(|g| g.is_match(&rel_path)) {
            continue;
        }
        let src = entry.path();
        let dst = dst_root.join(&rel_path);
        let file_type = entry
            .file_type()
            .map_err(|e| SandboxError::io(format!("stat {}", src.display()), e))?;
        if file_type.is_dir() {
            std::fs::create_dir_all(&dst)
                .map_err(|e| SandboxError::io(format!("creating {}", dst.display()), e))?;
            copy_filtered(src_root, dst_root, &rel_path, include, exclude, owner)?;
            set_owner_and_mode(&dst, owner, None)?;
            continue;
        }
        if include.as_ref().is_some_and(|g| !g.is_match(&rel_path)) {
            continue;
        }
        if file_type.is_symlink() {
            let target = std::fs::read_link(&src)
                .map_err(|e| SandboxError::io(format!("readlink {}", src.display()), e))?;
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| SandboxError::io(format!("symlink {}", dst.display()), e))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::lchown(&dst, Some(uid), Some(gid))
                    .map_err(|e| SandboxError::io(format!("lchown {}", dst.display()), e))?;
            }
        } else if file_type.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| {
                SandboxError::io(format!("copying {} to {}", src.display(), dst.display()), e)
            })?;
            set_owner_and_mode(&dst, owner, None)?;
        }
        // Sockets, fifos and devices are never staged.
    }
    Ok(())
}

fn set_owner_and_mode(
    path: &Path,
    owner: Option<(u32, u32)>,
    mode: Option<u32>,
) -> SandboxResult<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some((uid, gid)) = owner {
        if let Err(e) = std::os::unix::fs::chown(path, Some(uid), Some(gid)) {
            // Not running as root: make a staged directory writable for everyone instead, so the
            // sandbox user can still use it (it is private to this sandbox anyway).
            if e.kind() == std::io::ErrorKind::PermissionDenied && path.is_dir() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
                    .map_err(|e| SandboxError::io(format!("chmod {}", path.display()), e))?;
                return Ok(());
            }
            return Err(SandboxError::io(format!("chown {}", path.display()), e));
        }
    }
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| SandboxError::io(format!("chmod {}", path.display()), e))?;
    }
    Ok(())
}

/// How many pieces of the workspace's stream (the Engine's output frames, 32 KiB as Docker
/// sends them) wait between the Engine and the sync at most.
const PIECES_IN_FLIGHT: usize = 8;

/// Carries a read-write workspace's changes back to its repository `target` (see
/// [`crate::sandbox::repo::sync_back`] for what is and is not carried). The workspace comes as
/// a tar stream from `tar -c` in the sandbox, applied entry by entry as it arrives (issue 51,
/// finding 7: it was collected whole in the node's memory first); at most the workspace's
/// size bound and 1 MiB (tar's headers) is read. Errors with [`ErrorCategory::Unsupported`]
/// without a target.
pub(super) async fn sync_workspace(
    container: &Container,
    target: Option<&tokio::sync::Mutex<SyncTarget>>,
) -> SandboxResult<SyncReport> {
    let Some(target) = target else {
        return Err(SandboxError::new(
            ErrorCategory::Unsupported,
            "this sandbox has no read-write repository to sync back",
        ));
    };
    // One sync at a time: each starts from what the one before left on the host.
    let mut target = target.lock().await;
    let max_bytes = container
        .policy
        .workspace_size_bytes
        .saturating_add(1024 * 1024);
    let (tx, rx) = tokio::sync::mpsc::channel(PIECES_IN_FLIGHT);
    let held = target.clone();
    let apply = tokio::task::spawn_blocking(move || {
        let reader = PieceReader {
            rx,
            piece: Vec::new(),
            at: 0,
            end: None,
        };
        crate::sandbox::repo::sync_back_tracked(&held.repo, reader, &held.copied_in, max_bytes)
    });
    let argv = ["tar", "-c", "-f", "-", "-C", &container.workspace_path, "."]
        .map(String::from)
        .to_vec();
    container
        .stream_stdout(argv, container.policy.default_timeout, tx)
        .await;
    let (report, next) = apply
        .await
        .map_err(|e| SandboxError::new(ErrorCategory::Io, format!("sync task: {e}")))??;
    // A live sandbox syncs again later: what this one carried back counts as copied in.
    target.copied_in = next;
    Ok(report)
}

/// The workspace's stream as the sync reads it (on a blocking thread): the pieces the Engine
/// sends, then the end the command reached (a failure is a read error, so the sync stops and
/// deletes nothing).
struct PieceReader {
    rx: tokio::sync::mpsc::Receiver<Piece>,
    piece: Vec<u8>,
    at: usize,
    end: Option<Result<(), String>>,
}

impl std::io::Read for PieceReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.at < self.piece.len() {
                let n = buf.len().min(self.piece.len() - self.at);
                buf[..n].copy_from_slice(&self.piece[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            match &self.end {
                Some(Ok(())) => return Ok(0),
                Some(Err(why)) => {
                    return Err(std::io::Error::other(format!(
                        "tar in the sandbox did not finish: {why}"
                    )))
                }
                None => {}
            }
            match self.rx.blocking_recv() {
                Some(Piece::Data(data)) => {
                    self.piece = data;
                    self.at = 0;
                }
                Some(Piece::End(end)) => self.end = Some(end),
                None => self.end = Some(Err("its stream ended without an end".into())),
            }
        }
    }
}

/// Unpacks a read-write repository's archive (taken from `copy_in`) into the workspace, once
/// (on the first start).
pub(super) async fn copy_repository_in(
    container: &Container,
    copy_in: &Mutex<Option<Vec<u8>>>,
) -> SandboxResult<()> {
    let copy_in = copy_in.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(archive) = copy_in else {
        return Ok(());
    };
    let mut req = container.file_request(
        ["tar", "-x", "-f", "-", "-C", &container.workspace_path]
            .map(String::from)
            .to_vec(),
    );
    req.stdin = Some(archive);
    container
        .file_command("copying the repository into the workspace", req)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filtered_workspace_is_a_copy_without_excluded_files() {
        let repo = tempfile::tempdir().unwrap();
        let staging = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join("src")).unwrap();
        std::fs::create_dir_all(repo.path().join("secrets")).unwrap();
        std::fs::write(repo.path().join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(repo.path().join("secrets/key"), "k").unwrap();
        std::fs::write(repo.path().join(".env"), "TOKEN=1").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", repo.path().join("link")).unwrap();
        let mount = RepoMount::read_only(repo.path())
            .exclude("secrets")
            .exclude("**/.env");
        let repo_path = repo.path().canonicalize().unwrap();
        let staged = stage_workspace(
            staging.path(),
            "sb1",
            Some((&mount, &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        let dir = staged.staging_dir.unwrap();
        assert!(dir.join("src/main.rs").is_file());
        assert!(!dir.join("secrets").exists());
        assert!(!dir.join(".env").exists());
        // Links are copied as links, not followed.
        assert_eq!(
            std::fs::read_link(dir.join("link")).unwrap(),
            PathBuf::from("/etc/passwd")
        );

        let only_src = RepoMount::read_only(repo.path()).include("src/**");
        let staged = stage_workspace(
            staging.path(),
            "sb2",
            Some((&only_src, &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        let dir = staged.staging_dir.unwrap();
        assert!(dir.join("src/main.rs").is_file());
        assert!(!dir.join(".env").exists() && !dir.join("secrets/key").exists());

        // Unfiltered mounts use the repository itself.
        let direct = stage_workspace(
            staging.path(),
            "sb3",
            Some((&RepoMount::read_only(repo.path()), &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        assert!(direct.staging_dir.is_none());
        assert_eq!(
            direct.mount,
            WorkspaceMount::Bind {
                source: repo_path.clone(),
                read_only: true
            }
        );

        // A read-write repository is a copy for a tmpfs: nothing staged on the host.
        let rw = stage_workspace(
            staging.path(),
            "sb5",
            Some((&RepoMount::read_write(repo.path()), &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap();
        assert_eq!(rw.mount, WorkspaceMount::Tmpfs);
        assert!(rw.staging_dir.is_none() && rw.copy_in.is_some());
        assert!(rw
            .sync
            .unwrap()
            .copied_in
            .contains(Path::new("src/main.rs")));

        let bad = RepoMount::read_only(repo.path()).exclude("[");
        let err = stage_workspace(
            staging.path(),
            "sb4",
            Some((&bad, &repo_path)),
            &SandboxPolicy::default(),
        )
        .unwrap_err();
        assert_eq!(err.category, ErrorCategory::PolicyViolation);
    }
}
