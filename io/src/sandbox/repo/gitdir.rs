//! Which directories of a repository git would take for a repository of their own once a sync
//! back is applied (issue 51, finding 1).
//!
//! Git does not recognise a repository by the name `.git` only. Discovery (`setup.c`,
//! `setup_git_directory_gently_1`) walks up from the working directory and, at each level `D`,
//! takes `D/.git` (a directory, or a file saying `gitdir: X`) and then `D` itself as a bare
//! repository when `is_git_directory(D)` holds:
//!
//! - `D/HEAD` validates (`validate_headref`): a symlink whose target starts with `refs/`, or a
//!   file whose first bytes are `ref:` (then blanks and `refs/`) or a hexadecimal object id;
//! - the common directory (`D`, or what `D/commondir` names) has `objects` and `refs` that
//!   `access(X_OK)` accepts (a directory, or even an executable file).
//!
//! Such a `D` inside the working tree is as good as a `.git`: its `config` is read
//! (`core.fsmonitor`, `core.worktree`, hooks, filters) by any git run at or below it, on the
//! host, often as root. So the rule here is git's own, evaluated on the repository as it would
//! be **after** the sync (the host's files, with the task's files written over them), and
//! conservatively: any `HEAD` starting `ref:`, any `commondir`, anything named `objects` or
//! `refs`, names compared without regard to ASCII case (a case-insensitive file system).
//!
//! - A directory that is a git directory on the host already (a bare repository the project
//!   keeps as a fixture) is treated as a `.git`: nothing under it is written or deleted.
//! - A directory the task's files would make one: the task's ingredients there — its `HEAD`,
//!   `commondir`, and anything at or under `objects` and `refs` — are refused, which leaves
//!   the host's own (not a git directory, or it would be in the first case); the rest of the
//!   directory's files are ordinary files and come back.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::is_git_path;

/// What the host holds at a path, as far as git's test goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HostEntry {
    Absent,
    /// A regular file and its first bytes (at most [`HEAD_PREFIX`]).
    File(Vec<u8>),
    /// A symlink and its target.
    Symlink(Vec<u8>),
    /// A directory, device, fifo or socket.
    Other,
}

/// How much of a `HEAD` git reads (`validate_headref`'s buffer).
pub(super) const HEAD_PREFIX: usize = 255;

/// The names git's test reads, lower-cased (names are bytes: one that is not UTF-8 is
/// compared as it is).
const HEAD: &[u8] = b"head";
const COMMONDIR: &[u8] = b"commondir";
const OBJECTS: &[u8] = b"objects";
const REFS: &[u8] = b"refs";

/// A path component, lower-cased as bytes.
fn lower(part: &std::ffi::OsStr) -> Vec<u8> {
    part.as_bytes().to_ascii_lowercase()
}

/// Whether `rel` could be an ingredient of some directory's git test: its last component is
/// a `HEAD` or a `commondir`, or one of its components is an `objects` or a `refs` (any letter
/// case). Only such a path can make a directory a git directory; the streaming sync holds
/// these back until it has seen the whole change.
pub(super) fn is_ingredient(rel: &Path) -> bool {
    let parts: Vec<Vec<u8>> = rel.components().map(|c| lower(c.as_os_str())).collect();
    let last = parts.len().saturating_sub(1);
    parts
        .iter()
        .enumerate()
        .any(|(i, p)| p == OBJECTS || p == REFS || (i == last && (p == HEAD || p == COMMONDIR)))
}

/// Whether `dir` is a git directory on the host as it is (the first case of the module
/// docs).
pub(super) fn is_git_dir_on_host<E>(
    dir: &Path,
    host: &mut impl FnMut(&Path) -> Result<HostEntry, E>,
) -> Result<bool, E> {
    is_git_dir(dir, &Written::default(), host)
}

/// The git directories a sync must keep out of (module docs), among the directories
/// (relative to the repository root; `""` is the root) the change reaches.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct GitDirs {
    /// Git directories on the host already.
    pub existing: BTreeSet<PathBuf>,
    /// Directories the change would make git directories.
    pub made: BTreeSet<PathBuf>,
}

impl GitDirs {
    /// Whether the sync must not write or delete `rel`: it lies under an existing git
    /// directory, or it is an ingredient the change adds to one it would make.
    pub fn refuses(&self, rel: &Path) -> bool {
        if self.existing.iter().any(|d| rel.starts_with(d) && rel != d) {
            return true;
        }
        self.made.iter().any(|d| {
            let Ok(inside) = rel.strip_prefix(d) else {
                return false;
            };
            let mut parts = inside.components().map(|c| lower(c.as_os_str()));
            match (parts.next(), parts.next()) {
                (Some(first), None) if first == HEAD || first == COMMONDIR => true,
                (Some(first), _) => first == OBJECTS || first == REFS,
                _ => false,
            }
        })
    }
}

/// The git directories (module docs) among the ancestors of `written` (relative path → its
/// first bytes, at least [`HEAD_PREFIX`] of a `HEAD`; written over the host) and of `deleted`. `host` tells what the host holds at a
/// relative path, never following a symlink. Directories under a `.git` are not listed (the
/// sync refuses them already).
pub(super) fn git_dirs_after<'a, E>(
    written: impl IntoIterator<Item = (&'a Path, &'a [u8])>,
    deleted: impl IntoIterator<Item = &'a Path>,
    mut host: impl FnMut(&Path) -> Result<HostEntry, E>,
) -> Result<GitDirs, E> {
    // Each directory the change reaches, with the names (lower-cased) the change puts in it
    // and the contents of the `HEAD` it writes there.
    let mut dirs: BTreeMap<PathBuf, Written<'_>> = BTreeMap::new();
    for (rel, data) in written {
        let parts: Vec<&std::ffi::OsStr> = rel.components().map(|c| c.as_os_str()).collect();
        let mut dir = PathBuf::new();
        for (i, part) in parts.iter().enumerate() {
            let at = dirs.entry(dir.clone()).or_default();
            let name = lower(part);
            if i + 1 == parts.len() && name == HEAD {
                at.head = Some(data);
            }
            at.names.insert(name);
            dir.push(part);
        }
    }
    for rel in deleted {
        let mut dir = PathBuf::new();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            dirs.entry(dir.clone()).or_default();
            dir.push(part);
        }
        dirs.entry(dir).or_default();
    }
    let mut found = GitDirs::default();
    for (dir, written) in &dirs {
        if is_git_path(dir) {
            continue;
        }
        if is_git_dir(dir, &Written::default(), &mut host)? {
            found.existing.insert(dir.clone());
        } else if is_git_dir(dir, written, &mut host)? {
            found.made.insert(dir.clone());
        }
    }
    Ok(found)
}

/// What the change writes in one directory.
#[derive(Default)]
struct Written<'a> {
    /// Lower-cased names of the files and directories it writes there.
    names: BTreeSet<Vec<u8>>,
    /// The contents of the `HEAD` it writes there.
    head: Option<&'a [u8]>,
}

/// `is_git_directory(dir)` after the change, erring towards yes.
fn is_git_dir<E>(
    dir: &Path,
    written: &Written<'_>,
    host: &mut impl FnMut(&Path) -> Result<HostEntry, E>,
) -> Result<bool, E> {
    let head = match written.head {
        Some(data) => head_validates(data),
        None => match host(&dir.join("HEAD"))? {
            HostEntry::File(data) => head_validates(&data),
            HostEntry::Symlink(target) => target.starts_with(b"refs/"),
            HostEntry::Absent | HostEntry::Other => false,
        },
    };
    if !head {
        return Ok(false);
    }
    let mut present = |name: &[u8]| -> Result<bool, E> {
        let on_host = dir.join(std::ffi::OsStr::from_bytes(name));
        Ok(written.names.contains(name) || host(&on_host)? != HostEntry::Absent)
    };
    // A `commondir` may name any directory, the repository's own `.git` among them: its
    // `objects` and `refs` are then taken for granted.
    if present(COMMONDIR)? {
        return Ok(true);
    }
    Ok(present(OBJECTS)? && present(REFS)?)
}

/// Whether a `HEAD` holding `data` would pass git's `validate_headref`, erring towards yes:
/// anything starting `ref:`, or a hexadecimal object id (40 digits for SHA-1; SHA-256's 64
/// start with 40).
fn head_validates(data: &[u8]) -> bool {
    data.starts_with(b"ref:") || (data.len() >= 40 && data[..40].iter().all(u8::is_ascii_hexdigit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_of(entries: &[(&str, HostEntry)]) -> impl FnMut(&Path) -> Result<HostEntry, ()> {
        let map: BTreeMap<PathBuf, HostEntry> = entries
            .iter()
            .map(|(p, e)| (PathBuf::from(p), e.clone()))
            .collect();
        move |p: &Path| Ok(map.get(p).cloned().unwrap_or(HostEntry::Absent))
    }

    /// The directories found, existing ones marked `=`.
    fn found(written: &[(&str, &[u8])], host: &[(&str, HostEntry)]) -> Vec<String> {
        let written = written.iter().map(|(p, d)| (Path::new(*p), *d));
        let dirs = git_dirs_after(written, [], host_of(host)).unwrap();
        let existing = dirs.existing.iter().map(|p| format!("={}", p.display()));
        let made = dirs.made.iter().map(|p| p.display().to_string());
        existing.chain(made).collect()
    }

    const REF: &[u8] = b"ref: refs/heads/main\n";

    /// Git's test, row by row: what makes a directory a repository, and what does not.
    #[test]
    fn a_directory_is_a_git_directory_by_git_s_own_test() {
        let dir = || HostEntry::Other;
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, &'a [u8])],
            &'a [(&'a str, HostEntry)],
            &'a [&'a str],
        );
        let cases: &[Case<'_>] = &[
            (
                "HEAD, objects and refs all written",
                &[
                    ("lib/HEAD", REF),
                    ("lib/objects/x", b""),
                    ("lib/refs/heads/x", b""),
                ],
                &[],
                &["lib"],
            ),
            (
                "only HEAD written, objects and refs already on the host",
                &[("lib/HEAD", REF), ("lib/config", b"[core]")],
                &[("lib/objects", dir()), ("lib/refs", dir())],
                &["lib"],
            ),
            (
                "HEAD and commondir written (objects and refs of the named directory)",
                &[("lib/HEAD", REF), ("lib/commondir", b"../.git\n")],
                &[],
                &["lib"],
            ),
            (
                "a detached HEAD",
                &[
                    ("a/HEAD", b"0123456789abcdef0123456789ABCDEF01234567\n"),
                    ("a/objects/x", b""),
                    ("a/refs/x", b""),
                ],
                &[],
                &["a"],
            ),
            (
                "names in another letter case",
                &[("a/head", REF), ("a/Objects/x", b""), ("a/REFS/x", b"")],
                &[],
                &["a"],
            ),
            (
                "a bare repository already on the host, a file written in it",
                &[("fixtures/bare.git/config", b"[core]")],
                &[
                    ("fixtures/bare.git/HEAD", HostEntry::File(REF.to_vec())),
                    ("fixtures/bare.git/objects", dir()),
                    ("fixtures/bare.git/refs", dir()),
                ],
                &["=fixtures/bare.git"],
            ),
            (
                "the host's HEAD a symlink into refs/",
                &[("a/objects/x", b""), ("a/refs/x", b"")],
                &[("a/HEAD", HostEntry::Symlink(b"refs/heads/main".to_vec()))],
                &["a"],
            ),
            (
                "an executable file passes access(X_OK) as objects",
                &[
                    ("a/HEAD", REF),
                    ("a/objects", b"#!/bin/sh"),
                    ("a/refs/x", b""),
                ],
                &[],
                &["a"],
            ),
            ("HEAD alone", &[("a/HEAD", REF)], &[], &[]),
            (
                "no refs",
                &[("a/HEAD", REF), ("a/objects/x", b"")],
                &[],
                &[],
            ),
            (
                "a HEAD git would not take",
                &[
                    ("a/HEAD", b"main\n"),
                    ("a/objects/x", b""),
                    ("a/refs/x", b""),
                ],
                &[],
                &[],
            ),
            (
                "a HEAD symlink elsewhere",
                &[("a/objects/x", b""), ("a/refs/x", b"")],
                &[("a/HEAD", HostEntry::Symlink(b"/etc/passwd".to_vec()))],
                &[],
            ),
            (
                "objects and refs in different directories",
                &[("a/HEAD", REF), ("a/objects/x", b""), ("b/refs/x", b"")],
                &[],
                &[],
            ),
            (
                "the root itself",
                &[("HEAD", REF), ("objects/x", b""), ("refs/x", b"")],
                &[],
                &[""],
            ),
            (
                "inside a .git: the sync refuses it already",
                &[
                    (".git/modules/m/HEAD", REF),
                    (".git/modules/m/objects/x", b""),
                    (".git/modules/m/refs/x", b""),
                ],
                &[],
                &[],
            ),
        ];
        for (what, written, host, want) in cases {
            assert_eq!(found(written, host), *want, "{what}");
        }
    }

    /// A directory the change only deletes in is judged too (a fixture repository on the host
    /// keeps its files).
    #[test]
    fn directories_the_change_deletes_in_are_judged() {
        let host = [
            ("f/HEAD", HostEntry::File(REF.to_vec())),
            ("f/objects", HostEntry::Other),
            ("f/refs", HostEntry::Other),
        ];
        let deleted = [Path::new("f/objects/pack/p.pack")];
        let got = git_dirs_after([], deleted, host_of(&host)).unwrap();
        assert_eq!(got.existing, BTreeSet::from([PathBuf::from("f")]));
        assert!(got.refuses(Path::new("f/objects/pack/p.pack")));
        assert!(got.refuses(Path::new("f/config")));
    }

    /// In a directory the change would make a git directory, only the change's ingredients
    /// are refused; under an existing one, everything.
    #[test]
    fn what_is_refused_in_a_made_and_in_an_existing_git_directory() {
        let dirs = GitDirs {
            existing: BTreeSet::from([PathBuf::from("fixtures/bare.git")]),
            made: BTreeSet::from([PathBuf::from("lib")]),
        };
        for refused in [
            "lib/HEAD",
            "lib/head",
            "lib/commondir",
            "lib/objects",
            "lib/Objects/info/packs",
            "lib/refs/heads/main",
            "fixtures/bare.git/config",
            "fixtures/bare.git/hooks/x",
        ] {
            assert!(dirs.refuses(Path::new(refused)), "{refused}");
        }
        for written in [
            "lib/config",
            "lib/code.rs",
            "lib/sub/HEAD",
            "libx/HEAD",
            "fixtures/other",
            "fixtures/bare.git",
        ] {
            assert!(!dirs.refuses(Path::new(written)), "{written}");
        }
    }
}
