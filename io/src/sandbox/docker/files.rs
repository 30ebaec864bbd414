//! Files and trees moved in and out of a sandbox through exec (`cat`, `tar` inside the
//! sandbox; see the module notes in [`super`] for why not the archive API), and the tar
//! conversions they use.

use tokio::sync::mpsc;

use super::agent::{agent_ended, Feed};
use super::container::Container;
use crate::sandbox::error::{ErrorCategory, SandboxError, SandboxResult};
use crate::sandbox::{ExecOutput, ExecRequest, FileEntry, FileTree, OutputChunk, OutputStream};

/// What a streamed read keeps of its command's output besides the stream (stderr's start, for
/// the error).
const STREAM_KEPT: usize = 64 * 1024;

impl Container {
    /// Writes `data` to `path` with permission bits `mode`, making parent directories.
    pub(super) async fn put_file(&self, path: &str, data: &[u8], mode: u32) -> SandboxResult<()> {
        check_path(path)?;
        let what = format!("writing {path}");
        let mode = format!("{mode:o}");
        // A live sandbox's agent writes it itself (no process started: `agent.c`).
        let mut req = self.file_request(
            ["chorus-agent:write", &mode, path]
                .map(String::from)
                .to_vec(),
        );
        req.stdin = Some(data.to_vec());
        if let Some(out) = self.by_agent(&req).await? {
            judged(&what, out)?;
            return Ok(());
        }
        // One process: `install` makes the folders (-D), takes the path as the file's even
        // where a folder is (-T: that fails, as a write there should) and sets the bits
        // whatever the umask. Each process started in the sandbox is on the caller's time
        // (a shell with `mkdir`, `cat` and `chmod` cost ~5 ms more per write).
        req.argv = ["install", "-D", "-T", "-m", &mode, "/dev/stdin", path]
            .map(String::from)
            .to_vec();
        self.file_command(&what, req).await?;
        Ok(())
    }

    /// Reads `path`, refusing a file larger than the policy's file limit.
    pub(super) async fn get_file(&self, path: &str) -> SandboxResult<Vec<u8>> {
        check_path(path)?;
        let what = format!("reading {path}");
        // The agent reads a regular file itself, one byte past what the output keeps, so an
        // overlong file shows as truncated as `cat`'s would.
        let past = self.policy.file_limit_bytes.saturating_add(2).to_string();
        let mut req = self.file_request(
            ["chorus-agent:read", path, &past]
                .map(String::from)
                .to_vec(),
        );
        let out = match self.by_agent(&req).await? {
            Some(out) => judged(&what, out)?,
            None => {
                req.argv = vec!["cat".into(), "--".into(), path.into()];
                self.file_command(&what, req).await?
            }
        };
        if out.stdout_truncated {
            return Err(SandboxError::new(
                ErrorCategory::Io,
                format!(
                    "{path} is larger than the policy's file limit of {} bytes",
                    self.policy.file_limit_bytes
                ),
            ));
        }
        Ok(out.stdout)
    }

    /// Reads `path` into `sink` as it comes, at most `limit` bytes and one past it (see
    /// `ExecutionSandbox::read_file_streaming`): the agent's read, or `cat` where none runs.
    pub(super) async fn stream_file_out(
        &self,
        path: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> SandboxResult<()> {
        check_path(path)?;
        let past = limit.saturating_add(1);
        let req = self.stream_request(
            ["chorus-agent:read", path, &past.to_string()]
                .map(String::from)
                .to_vec(),
        );
        let cat = ["cat", "--", path].map(String::from).to_vec();
        let what = format!("reading {path}");
        self.stream_out(req, Some(cat), &what, limit, sink).await
    }

    /// Runs `req` with its stdout passed on to `sink` as it comes (at most `limit` bytes and
    /// one past them), only the start of stderr kept for the error, and judges it. `instead`:
    /// `req` is one of the agent's own commands, and this argv stands for it where no agent
    /// runs; `None`: `req` runs as it is.
    async fn stream_out(
        &self,
        mut req: ExecRequest,
        instead: Option<Vec<String>>,
        what: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> SandboxResult<()> {
        // What goes to the sink is not the output: only the start of stderr is kept.
        req.output_limit_bytes = Some(STREAM_KEPT);
        let (tx, rx) = mpsc::channel::<OutputChunk>(4);
        let run = async {
            let tx = tx;
            let by_agent = match instead {
                Some(argv) => match self.by_agent_with(&req, Some(&tx)).await? {
                    Some(out) => Some(out),
                    None => {
                        req.argv = argv;
                        None
                    }
                },
                None => None,
            };
            let out = match by_agent {
                Some(out) => out,
                None => self.run(req, Some(&tx), false, None).await?,
            };
            drop(tx);
            judged(what, out).map(drop)
        };
        let (read, ()) = tokio::join!(run, pump_stdout(rx, limit, sink));
        read
    }

    /// Writes `path` from the chunks `source` yields, as they come (see
    /// `ExecutionSandbox::write_file_streaming`); what a write that failed part way left is
    /// removed. Where no agent runs, the file is gathered and written whole.
    pub(super) async fn stream_file_in(
        &self,
        path: &str,
        mode: u32,
        limit: u64,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> SandboxResult<u64> {
        check_path(path)?;
        if !self.has_agent().await {
            let data = crate::sandbox::gather_upload(path, limit, source).await?;
            self.put_file(path, &data, mode).await?;
            return Ok(data.len() as u64);
        }
        let what = format!("writing {path}");
        let req = self.stream_request(
            ["chorus-agent:write", &format!("{mode:o}"), path]
                .map(String::from)
                .to_vec(),
        );
        let mut feed = Feed::new(source, limit, what);
        let written = self
            .run_fed(
                &req,
                &mut feed,
                "the file was closed before the upload ended",
            )
            .await;
        if let Err(e) = written {
            let rm = self.file_request(["rm", "-f", "--", path].map(String::from).to_vec());
            let _ = self.run(rm, None, false, None).await;
            return Err(e);
        }
        Ok(feed.fed)
    }

    /// Unpacks the archive `source` yields under `dir` as it comes (see
    /// `ExecutionSandbox::write_tree_streaming`): the sandbox's own `tar`, its stdin fed
    /// through the agent within its window; without an agent, gathered and sent whole.
    pub(super) async fn stream_tree_in(
        &self,
        dir: &str,
        limit: u64,
        source: mpsc::Receiver<Vec<u8>>,
    ) -> SandboxResult<()> {
        check_path(dir)?;
        let what = format!("writing tree {dir}");
        let argv = ["sh", "-c", WRITE_TREE, "chorus-write-tree", dir].map(String::from);
        if !self.has_agent().await {
            let archive = crate::sandbox::gather_upload(dir, limit, source).await?;
            let mut req = self.stream_request(argv.to_vec());
            req.stdin = Some(archive);
            self.file_command(&what, req).await?;
            return Ok(());
        }
        let req = self.stream_request(argv.to_vec());
        let mut feed = Feed::new(source, limit, what);
        self.run_fed(&req, &mut feed, "tar ended before the archive did")
            .await
    }

    /// Runs `req` through the agent, its stdin fed from `feed`, and judges it; a command that
    /// ended before the feed did fails with `cut`, and one that ended early says why (no room
    /// left …) where it can.
    async fn run_fed(&self, req: &ExecRequest, feed: &mut Feed, cut: &str) -> SandboxResult<()> {
        match self.run_by_agent_fed(req, None, Some(feed)).await? {
            Some(out) => judged(&feed.what, out).and_then(|_| match feed.done {
                true => Ok(()),
                false => Err(SandboxError::new(
                    ErrorCategory::Io,
                    format!("{}: {cut}", feed.what),
                )),
            }),
            None => Err(agent_ended(&feed.what)),
        }
    }

    /// The folder `dir` as a tar archive into `sink` as the sandbox's `tar` writes it, at
    /// most `limit` bytes and one past them (see `ExecutionSandbox::read_tree_streaming`).
    pub(super) async fn stream_tree_out(
        &self,
        dir: &str,
        limit: u64,
        sink: mpsc::Sender<Vec<u8>>,
    ) -> SandboxResult<()> {
        check_path(dir)?;
        let req = self.stream_request(
            ["tar", "-c", "-f", "-", "-C", dir, "."]
                .map(String::from)
                .to_vec(),
        );
        let what = format!("reading tree {dir}");
        self.stream_out(req, None, &what, limit, sink).await
    }

    /// Unpacks `tree` under `dir`, making it first.
    pub(super) async fn put_tree(&self, dir: &str, tree: &FileTree) -> SandboxResult<()> {
        check_path(dir)?;
        let archive = tree_to_tar(tree).map_err(|e| SandboxError::io("building a tar", e))?;
        let mut req = self.file_request(
            ["sh", "-c", WRITE_TREE, "chorus-write-tree", dir]
                .map(String::from)
                .to_vec(),
        );
        req.stdin = Some(archive);
        self.file_command(&format!("writing tree {dir}"), req)
            .await?;
        Ok(())
    }

    /// The regular files under `dir`, refusing a tree larger than the policy's file limit.
    pub(super) async fn get_tree(&self, dir: &str) -> SandboxResult<FileTree> {
        check_path(dir)?;
        let req = self.file_request(
            ["tar", "-c", "-f", "-", "-C", dir, "."]
                .map(String::from)
                .to_vec(),
        );
        let out = self
            .file_command(&format!("reading tree {dir}"), req)
            .await?;
        if out.stdout_truncated {
            return Err(SandboxError::new(
                ErrorCategory::Io,
                format!(
                    "tree {dir} is larger than the policy's file limit of {} bytes",
                    self.policy.file_limit_bytes
                ),
            ));
        }
        tar_to_tree(&out.stdout).map_err(|e| SandboxError::io(format!("parsing tar of {dir}"), e))
    }

    /// Runs an internal file command, turning failures into [`ErrorCategory::Io`].
    pub(super) async fn file_command(
        &self,
        what: &str,
        request: ExecRequest,
    ) -> SandboxResult<ExecOutput> {
        judged(what, self.run(request, None, false, None).await?)
    }

    /// One of the agent's own file commands (`chorus-agent:read`, `:write`), where this
    /// sandbox has an agent running; `None`: run the command it stands for instead.
    async fn by_agent(&self, request: &ExecRequest) -> SandboxResult<Option<ExecOutput>> {
        self.by_agent_with(request, None).await
    }

    /// [`Container::by_agent`], its output also sent to `sink`.
    async fn by_agent_with(
        &self,
        request: &ExecRequest,
        sink: Option<&mpsc::Sender<OutputChunk>>,
    ) -> SandboxResult<Option<ExecOutput>> {
        if !self.has_agent().await {
            return Ok(None);
        }
        self.run_by_agent(request, sink).await
    }

    /// A streamed file command: a [`Container::file_request`] that may take
    /// [`crate::sandbox::STREAM_WAIT`] when the policy's timeout is shorter.
    fn stream_request(&self, argv: Vec<String>) -> ExecRequest {
        let mut req = self.file_request(argv);
        let wait = crate::sandbox::STREAM_WAIT;
        req.timeout = Some(req.timeout.map_or(wait, |t| t.max(wait)));
        req
    }

    /// A file command: from `/`, with the policy's timeout, its output capped one byte past
    /// the file limit (so an overlong file shows as truncated).
    pub(super) fn file_request(&self, argv: Vec<String>) -> ExecRequest {
        ExecRequest {
            argv,
            working_dir: Some("/".into()),
            timeout: Some(self.policy.default_timeout),
            output_limit_bytes: Some(self.policy.file_limit_bytes.saturating_add(1)),
            ..ExecRequest::default()
        }
    }
}

/// A file command's output, or its failure as [`ErrorCategory::Io`].
fn judged(what: &str, out: ExecOutput) -> SandboxResult<ExecOutput> {
    if out.success() {
        Ok(out)
    } else {
        Err(SandboxError::new(
            ErrorCategory::Io,
            format!(
                "{what} failed (exit {}): {}",
                out.exit_code,
                out.stderr_text().trim()
            ),
        ))
    }
}

/// The script that unpacks a tree from stdin under `$1`, making it.
const WRITE_TREE: &str = "mkdir -p \"$1\" && tar -x -f - -C \"$1\"";

/// Passes a command's stdout on to `sink`, at most one byte past `limit` (`cat` and `tar`
/// stop at no limit); a sink that went away takes nothing more.
async fn pump_stdout(mut rx: mpsc::Receiver<OutputChunk>, limit: u64, sink: mpsc::Sender<Vec<u8>>) {
    let mut room = limit.saturating_add(1);
    while let Some(chunk) = rx.recv().await {
        if chunk.stream != OutputStream::Stdout || room == 0 {
            continue;
        }
        let mut data = chunk.data;
        data.truncate(usize::try_from(room).unwrap_or(usize::MAX));
        room -= data.len() as u64;
        if sink.send(data).await.is_err() {
            return;
        }
    }
}

fn check_path(path: &str) -> SandboxResult<()> {
    if path.starts_with('/') && !path.contains('\0') {
        Ok(())
    } else {
        Err(SandboxError::new(
            ErrorCategory::Io,
            format!("sandbox paths must be absolute: {path:?}"),
        ))
    }
}

/// Packs a [`FileTree`] as a tar archive.
pub fn tree_to_tar(tree: &FileTree) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in tree {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() || rel.split('/').any(|c| c == "..") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad tree path {path:?}"),
            ));
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(entry.data.len() as u64);
        header.set_mode(entry.mode);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, rel, entry.data.as_slice())?;
    }
    tar.into_inner()
}

/// Unpacks the regular files of a tar archive into a [`FileTree`] (paths without `./`); a hard
/// link comes back as a copy of the file it links to.
pub fn tar_to_tree(archive: &[u8]) -> std::io::Result<FileTree> {
    Ok(tar_to_workspace(archive)?.files)
}

/// A workspace read back as a tar archive: its regular files, and what else it holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkspaceArchive {
    /// The regular files, hard links resolved to copies of the file they link to.
    pub files: FileTree,
    /// Everything else (relative path, lossy for a name that is not UTF-8 → what it is).
    /// [`FileTree`] names are strings, so this is for `read_tree`; the read-write sync back
    /// reads the stream itself, names as bytes (`repo::sync_back`).
    pub others: std::collections::BTreeMap<String, &'static str>,
}

/// Unpacks a workspace's tar archive. A hard link (tar sends a file's second name as a link
/// to its first) is a regular file with its target's contents and mode; a name that is not
/// UTF-8 is never turned into another name (it is listed in `others`).
pub fn tar_to_workspace(archive: &[u8]) -> std::io::Result<WorkspaceArchive> {
    use std::io::Read;
    use tar::EntryType;
    let mut out = WorkspaceArchive::default();
    let mut archive = tar::Archive::new(archive);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw = entry.path()?;
        let lossy = raw.to_string_lossy();
        let path = lossy
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        if path.is_empty() || path == "." {
            continue;
        }
        if raw.to_str().is_none() {
            out.others.insert(path, "a name that is not UTF-8");
            continue;
        }
        let kind = entry.header().entry_type();
        let what = match kind {
            k if k.is_file() => {
                let mode = entry.header().mode()?;
                let mut data = Vec::new();
                entry.read_to_end(&mut data)?;
                out.files.insert(path, FileEntry { data, mode });
                continue;
            }
            EntryType::Link => {
                let target = entry.link_name()?.map(|t| {
                    let t = t.to_string_lossy();
                    t.trim_start_matches("./").to_string()
                });
                match target.and_then(|t| out.files.get(&t).cloned()) {
                    Some(file) => {
                        out.files.insert(path, file);
                        continue;
                    }
                    None => "a hard link to something not carried back",
                }
            }
            EntryType::Symlink => "a symlink",
            EntryType::Directory => "a directory",
            EntryType::Char | EntryType::Block => "a device",
            EntryType::Fifo => "a fifo",
            _ => "an entry of another kind",
        };
        out.others.insert(path, what);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_round_trip_through_tar() {
        let mut tree = FileTree::new();
        tree.insert(
            "a/b.txt".into(),
            FileEntry {
                data: b"hello".to_vec(),
                mode: 0o640,
            },
        );
        tree.insert(
            "c".into(),
            FileEntry {
                data: vec![0, 1, 2],
                mode: 0o755,
            },
        );
        let back = tar_to_tree(&tree_to_tar(&tree).unwrap()).unwrap();
        assert_eq!(back, tree);
        let mut bad = FileTree::new();
        bad.insert(
            "../escape".into(),
            FileEntry {
                data: vec![],
                mode: 0o644,
            },
        );
        assert!(tree_to_tar(&bad).is_err());
    }

    /// Issue 51, finding 2: GNU tar (what the sandbox runs) sends a file's second name as a
    /// link to its first; it comes back as a file of its own, never as nothing (a sync back
    /// then deleted the original on the host). What is not a file is listed, and a name that
    /// is not UTF-8 is never turned into another.
    #[test]
    fn hard_links_come_back_as_files_and_other_entries_are_listed() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("README.md"), "hello\n").unwrap();
        std::fs::hard_link(d.join("README.md"), d.join("README.bak")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::hard_link(d.join("README.md"), d.join("sub/again")).unwrap();
        std::os::unix::fs::symlink("README.md", d.join("link")).unwrap();
        std::fs::write(d.join(std::ffi::OsStr::from_bytes(b"orig\xff.txt")), "x").unwrap();
        let out = std::process::Command::new("tar")
            .args(["-c", "-f", "-", "-C"])
            .arg(d)
            .arg(".")
            .output()
            .expect("running tar");
        assert!(out.status.success(), "{out:?}");
        let got = tar_to_workspace(&out.stdout).unwrap();
        let names: Vec<&str> = got.files.keys().map(String::as_str).collect();
        assert_eq!(names, ["README.bak", "README.md", "sub/again"]);
        for file in got.files.values() {
            assert_eq!(file.data, b"hello\n");
        }
        let others: Vec<(&str, &str)> = got.others.iter().map(|(p, w)| (p.as_str(), *w)).collect();
        assert_eq!(
            others,
            [
                ("link", "a symlink"),
                ("orig\u{FFFD}.txt", "a name that is not UTF-8"),
                ("sub", "a directory")
            ]
        );
    }
}
