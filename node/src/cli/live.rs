//! `chorus sandbox create|exec|ps|kill|cp|env|list|close`: live sandboxes through a node's HTTP API
//! (`/sandboxes`, `node/src/api/sandboxes.rs`). A live sandbox is kept across commands until
//! it is closed, idles out or reaches its lifetime; `exec` exits with the command's code, and
//! the other endings have the codes of `chorus task submit --wait` (`crate::exit`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::http::request_bytes;
use crate::exit::{EXIT_ERROR, EXIT_OUT_OF_MEMORY, EXIT_REFUSED, EXIT_TIMED_OUT};

/// Where a `cp` copies from or to: a local file, or `ID:/path` in a live sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Local(PathBuf),
    Sandbox { id: String, path: String },
}

impl Place {
    /// `ID:/abs/path` is in a sandbox (ids hold no `:`); anything else is a local path.
    pub fn parse(s: &str) -> Place {
        match s.split_once(':') {
            Some((id, path)) if !id.is_empty() && !id.contains('/') && path.starts_with('/') => {
                Place::Sandbox {
                    id: id.to_string(),
                    path: path.to_string(),
                }
            }
            _ => Place::Local(PathBuf::from(s)),
        }
    }
}

/// What `create` asks for.
#[derive(Debug, Default)]
pub struct CreateOpts {
    pub image: Option<String>,
    pub env: Vec<(String, String)>,
    pub idle_s: Option<u64>,
    pub lifetime_s: Option<u64>,
    pub key: Option<String>,
    pub memory_mb: u32,
    pub cpu_millis: u32,
    pub network: bool,
    pub requires: Vec<String>,
    pub repo: Option<chorus_core::task::RepoMount>,
    pub json: bool,
}

/// A node's answer other than 2xx to a call: who answered, its status and its body (the
/// reason a client acts on: `error`, and for a gone sandbox `gone.reason`).
#[derive(Debug)]
pub struct Refusal {
    /// The address asked.
    pub addr: String,
    pub code: u16,
    /// The body as JSON (`Null` when it is not).
    pub body: Value,
    /// The body as text.
    pub text: String,
}

impl Refusal {
    /// The answer `a` from `addr`.
    pub fn of(addr: &str, a: &super::http::RawAnswer) -> Refusal {
        Refusal {
            addr: addr.to_string(),
            code: a.code,
            body: serde_json::from_slice(&a.body).unwrap_or(Value::Null),
            text: String::from_utf8_lossy(&a.body).trim().to_string(),
        }
    }

    /// The node's reason: the body's `error`, else the body.
    pub fn why(&self) -> &str {
        self.body["error"].as_str().unwrap_or(&self.text)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} answered {}: {}", self.addr, self.code, self.why())
    }
}

impl std::error::Error for Refusal {}

/// One call, its 2xx answer whole; another answer is a [`Refusal`] naming the node's reason (a
/// gone sandbox says why).
pub(super) async fn answer(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<super::http::RawAnswer> {
    let text = body.map(Value::to_string);
    accepted(
        addr,
        request_bytes(addr, method, path, text.as_deref()).await,
    )
}

/// A 2xx answer from `addr`; any other is a [`Refusal`], and none at all says where it went.
fn accepted(
    addr: &str,
    sent: anyhow::Result<super::http::RawAnswer>,
) -> anyhow::Result<super::http::RawAnswer> {
    let answer = sent.with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    if (200..300).contains(&answer.code) {
        return Ok(answer);
    }
    Err(Refusal::of(addr, &answer).into())
}

/// [`answer`]'s body.
pub(super) async fn call(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<Vec<u8>> {
    Ok(answer(addr, method, path, body).await?.body)
}

pub(super) fn id_path(id: &str) -> anyhow::Result<String> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
    {
        bail!("{id:?} is not a sandbox id");
    }
    Ok(format!("/sandboxes/{id}"))
}

/// `create`: prints the id (or the JSON).
pub async fn create(addr: &str, o: CreateOpts) -> anyhow::Result<ExitCode> {
    let body = json!({
        "image": o.image,
        "env": o.env.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "idle_timeout_ms": o.idle_s.map(|s| s.saturating_mul(1000)),
        "lifetime_ms": o.lifetime_s.map(|s| s.saturating_mul(1000)),
        "key": o.key,
        "memory_mb": o.memory_mb,
        "cpu_millis": o.cpu_millis,
        "network": o.network,
        "requires": o.requires,
        "repo": o.repo,
    });
    let out: Value = serde_json::from_slice(&call(addr, "POST", "/sandboxes", Some(&body)).await?)?;
    if o.json {
        println!("{out}");
    } else {
        println!("{}", out["id"].as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

/// A command for `exec`.
#[derive(Debug, Default)]
pub struct Run {
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: Vec<(String, String)>,
    pub timeout_s: Option<u64>,
    pub background: bool,
}

/// `exec`: the command's output on stdout and stderr, then its exit code; a background one's
/// pid and log.
pub async fn exec(addr: &str, id: &str, run: Run, json_out: bool) -> anyhow::Result<ExitCode> {
    let body = json!({
        "argv": run.argv,
        "cwd": run.cwd,
        "env": run.env.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "timeout_ms": run.timeout_s.map(|s| s.saturating_mul(1000)),
        "background": run.background,
    });
    let path = format!("{}/exec", id_path(id)?);
    let out: Value = serde_json::from_slice(&call(addr, "POST", &path, Some(&body)).await?)?;
    if json_out {
        println!("{out}");
    } else if run.background {
        println!("{} {}", out["pid"], out["log"].as_str().unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    } else {
        use std::io::Write;
        let _ = std::io::stdout().write_all(out["stdout"].as_str().unwrap_or_default().as_bytes());
        let _ = std::io::stderr().write_all(out["stderr"].as_str().unwrap_or_default().as_bytes());
    }
    Ok(exit_of(&out))
}

/// `ps ID`: one line a process.
pub async fn ps(addr: &str, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let path = format!("{}/processes", id_path(id)?);
    let out: Value = serde_json::from_slice(&call(addr, "GET", &path, None).await?)?;
    if json_out {
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:>7} {:>7} {:>8}  COMMAND", "PID", "PGID", "SECONDS");
    for p in out["processes"].as_array().into_iter().flatten() {
        println!(
            "{:>7} {:>7} {:>8}  {}",
            p["pid"],
            p["pgid"],
            p["seconds"],
            super::outcome::escape_controls(p["command"].as_str().unwrap_or_default())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `kill ID PID`.
pub async fn kill(addr: &str, id: &str, pid: u32) -> anyhow::Result<ExitCode> {
    call(
        addr,
        "DELETE",
        &format!("{}/processes/{pid}", id_path(id)?),
        None,
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// The exit code for an exec's answer (the codes of `task submit --wait`).
pub fn exit_of(out: &Value) -> ExitCode {
    if out["timed_out"].as_bool() == Some(true) {
        eprintln!("chorus: the command timed out: it ran past its timeout and was killed");
        return ExitCode::from(EXIT_TIMED_OUT);
    }
    if out["oom"].as_bool() == Some(true) {
        eprintln!("chorus: the command ran out of memory: the kernel killed it at its limit");
        return ExitCode::from(EXIT_OUT_OF_MEMORY);
    }
    match out["exit_code"].as_i64() {
        Some(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(EXIT_ERROR)),
        None => ExitCode::from(EXIT_ERROR),
    }
}

/// A file call whose body and answer move as they come, never held whole: its 2xx answer, or
/// the node's refusal.
async fn streaming_call(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<(&str, axum::body::Body)>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    let sent = super::http::request_streaming(addr, method, path, body)
        .await
        .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    if sent.status().is_success() {
        return Ok(sent);
    }
    let code = sent.status().as_u16();
    let body = axum::body::Body::new(sent.into_body());
    let body = axum::body::to_bytes(body, 4 << 20)
        .await
        .unwrap_or_default();
    let answer = super::http::RawAnswer {
        code,
        headers: Vec::new(),
        body: body.to_vec(),
    };
    Err(Refusal::of(addr, &answer).into())
}

/// A local file's bytes as a stream of chunks (an upload sent as it is read).
fn file_chunks(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<axum::body::Bytes>> {
    futures_util::stream::unfold(Some(file), |file| async move {
        use tokio::io::AsyncReadExt;
        let mut file = file?;
        let mut buf = vec![0u8; 256 << 10];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(axum::body::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
}

/// Writes an answer's body to `to` (`-`: stdout) as it comes. A body that breaks off is an
/// error, and the part of it written to a file is removed: a part never passes for the whole.
async fn download(
    addr: &str,
    answer: hyper::Response<hyper::body::Incoming>,
    to: &std::path::Path,
) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    use std::io::Write;
    let stdout = to.as_os_str() == "-";
    let mut out: Box<dyn Write> = if stdout {
        Box::new(std::io::stdout().lock())
    } else {
        let file =
            std::fs::File::create(to).with_context(|| format!("cannot write {}", to.display()))?;
        Box::new(std::io::BufWriter::new(file))
    };
    let mut data = axum::body::Body::new(answer.into_body()).into_data_stream();
    let copied: anyhow::Result<()> = async {
        while let Some(piece) = data.next().await {
            let piece =
                piece.map_err(|e| anyhow::anyhow!("the answer of {addr} broke off: {e}"))?;
            out.write_all(&piece)
                .with_context(|| format!("cannot write {}", to.display()))?;
        }
        out.flush()
            .with_context(|| format!("cannot write {}", to.display()))?;
        Ok(())
    }
    .await;
    drop(out);
    if copied.is_err() && !stdout {
        let _ = std::fs::remove_file(to);
    }
    copied
}

/// `cp SRC DST`: a file into or out of a live sandbox (its bytes as they are; into it with its
/// permission bits), a local folder into one (its regular files, as a tar archive), or with
/// `tar` a folder of the sandbox out as a tar archive (`-` for stdout) or an archive in.
pub async fn cp(addr: &str, src: &str, dst: &str, tar: bool) -> anyhow::Result<ExitCode> {
    match (Place::parse(src), Place::parse(dst)) {
        (Place::Local(from), Place::Sandbox { id, path }) => {
            let meta = std::fs::metadata(&from)
                .with_context(|| format!("cannot read {}", from.display()))?;
            let at = |route: &str| -> anyhow::Result<String> {
                Ok(format!(
                    "{}/{route}?path={}",
                    id_path(&id)?,
                    percent_encode(&path)
                ))
            };
            if meta.is_dir() || tar {
                // Sent as it is read (a folder packed as it is walked): any size up to the
                // worker's bound.
                let (body, packing) = if meta.is_dir() {
                    let (body, packing) = local_tree(from.clone());
                    (body, Some(packing))
                } else {
                    let file = tokio::fs::File::open(&from)
                        .await
                        .with_context(|| format!("cannot read {}", from.display()))?;
                    (axum::body::Body::from_stream(file_chunks(file)), None)
                };
                let sent =
                    streaming_call(addr, "PUT", &at("tree")?, Some(("application/x-tar", body)))
                        .await;
                // A folder that could not be read says so, rather than what the node made of
                // the archive broken off; a node that stopped taking it says why.
                if let Some(packing) = packing {
                    match packing.await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) if !is_stopped(&e) || sent.is_ok() => return Err(e),
                        Ok(Err(_)) => {}
                        Err(e) => bail!("packing {}: {e}", from.display()),
                    }
                }
                let body = axum::body::Body::new(sent?.into_body());
                let out = axum::body::to_bytes(body, 4 << 20)
                    .await
                    .map_err(|e| anyhow::anyhow!("the answer of {addr} broke off: {e}"))?;
                let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
                for (name, what) in v["skipped"].as_object().into_iter().flatten() {
                    eprintln!("chorus: left out {name}: {}", what.as_str().unwrap_or("?"));
                }
            } else {
                use std::os::unix::fs::PermissionsExt;
                let file = tokio::fs::File::open(&from)
                    .await
                    .with_context(|| format!("cannot read {}", from.display()))?;
                let mode = meta.permissions().mode() & 0o777;
                let path = format!("{}&mode={mode:o}", at("files")?);
                // Sent as it is read: a file of any size up to the worker's bound.
                let body = axum::body::Body::from_stream(file_chunks(file));
                let answer =
                    streaming_call(addr, "PUT", &path, Some(("application/octet-stream", body)))
                        .await?;
                let body = axum::body::Body::new(answer.into_body());
                axum::body::to_bytes(body, 1 << 20)
                    .await
                    .map_err(|e| anyhow::anyhow!("the answer of {addr} broke off: {e}"))?;
            }
        }
        (Place::Sandbox { id, path }, Place::Local(to)) => {
            let route = if tar { "tree" } else { "files" };
            let query = format!("{}/{route}?path={}", id_path(&id)?, percent_encode(&path));
            let answer = streaming_call(addr, "GET", &query, None).await?;
            download(addr, answer, &to).await?;
        }
        _ => {
            eprintln!(
                "chorus: one side must be ID:/path in a sandbox, the other a local file or folder"
            );
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A local folder's folders and regular files (with their permission bits) as a tar archive,
/// names relative to it, packed on a blocking thread as the body is sent; links are not
/// followed (said, and left out), nor anything but files and folders. The handle says whether
/// the folder could be read whole (a body broken off by it fails the upload at the node too).
fn local_tree(
    root: std::path::PathBuf,
) -> (
    axum::body::Body,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<axum::body::Bytes>>(4);
    let packing = tokio::task::spawn_blocking(move || {
        let sink = ChunkSink {
            tx: tx.clone(),
            buf: Vec::new(),
        };
        let packed = pack_tree(&root, sink);
        if let Err(e) = &packed {
            let _ = tx.blocking_send(Err(std::io::Error::other(format!("{e:#}"))));
        }
        packed
    });
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (axum::body::Body::from_stream(stream), packing)
}

/// Walks `root` into a tar archive written to `sink`.
fn pack_tree(root: &std::path::Path, sink: ChunkSink) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut tar = tar::Builder::new(sink);
    let mut todo = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = todo.pop() {
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("cannot read {}", dir.display()))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                eprintln!(
                    "chorus: left out {}: a name that is not UTF-8",
                    entry.path().display()
                );
                continue;
            };
            let name = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let meta = entry.metadata()?; // the entry itself: a link is not followed
            let mut header = tar::Header::new_gnu();
            header.set_mode(meta.permissions().mode() & 0o777);
            header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
            if meta.is_dir() {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, &name, std::io::empty())?;
                todo.push((entry.path(), name));
            } else if meta.is_file() {
                let file = std::fs::File::open(entry.path())
                    .with_context(|| format!("cannot read {}", entry.path().display()))?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(meta.len());
                // A file that grows while it is sent is cut at the size said.
                tar.append_data(&mut header, &name, std::io::Read::take(file, meta.len()))
                    .with_context(|| format!("cannot read {}", entry.path().display()))?;
            } else {
                eprintln!(
                    "chorus: left out {}: not a file or a folder",
                    entry.path().display()
                );
            }
        }
    }
    let mut sink = tar.into_inner().context("packing the folder")?;
    sink.flush_chunk()?;
    Ok(())
}

/// What packing says when the request's body was dropped (the node answered, or the
/// connection went): the answer, not this, says why.
const STOPPED: &str = "the node stopped taking the folder";

fn is_stopped(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.to_string() == STOPPED)
}

/// A tar archive's bytes, sent on in chunks of 256 KiB as the request's body.
struct ChunkSink {
    tx: tokio::sync::mpsc::Sender<std::io::Result<axum::body::Bytes>>,
    buf: Vec<u8>,
}

impl ChunkSink {
    fn flush_chunk(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = axum::body::Bytes::from(std::mem::take(&mut self.buf));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::other(STOPPED))
    }
}

impl std::io::Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 256 << 10 {
            self.flush_chunk()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `ls ID:/path`: the path and, for a folder, its entries (or the JSON).
pub async fn ls(addr: &str, target: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let Place::Sandbox { id, path } = Place::parse(target) else {
        eprintln!("chorus: name a path in a sandbox: ID:/path");
        return Ok(ExitCode::from(EXIT_REFUSED));
    };
    let query = format!("{}/ls?path={}", id_path(&id)?, percent_encode(&path));
    let out: Value = serde_json::from_slice(&call(addr, "GET", &query, None).await?)?;
    if json_out {
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    let line = |e: &Value, name: &str| {
        let target = e["target"]
            .as_str()
            .map(|t| format!(" -> {t}"))
            .unwrap_or_default();
        println!(
            "{:<7} {:>4o} {:>12} {name}{target}",
            e["kind"].as_str().unwrap_or("?"),
            e["mode"].as_u64().unwrap_or(0),
            e["size"].as_u64().unwrap_or(0),
        );
    };
    match out["entries"].as_array() {
        Some(entries) => {
            for e in entries {
                line(e, e["name"].as_str().unwrap_or("?"));
            }
            if out["truncated"] == true {
                eprintln!("chorus: more entries than one listing holds (10,000): listed the first");
            }
        }
        None => line(&out, &path),
    }
    Ok(ExitCode::SUCCESS)
}

/// `rm ID:/path`: a file or a folder with what is under it.
pub async fn rm(addr: &str, target: &str) -> anyhow::Result<ExitCode> {
    let Place::Sandbox { id, path } = Place::parse(target) else {
        eprintln!("chorus: name a path in a sandbox: ID:/path");
        return Ok(ExitCode::from(EXIT_REFUSED));
    };
    let query = format!("{}/files?path={}", id_path(&id)?, percent_encode(&path));
    call(addr, "DELETE", &query, None).await?;
    Ok(ExitCode::SUCCESS)
}

/// `keepalive ID`: its idle clock starts again; prints the time left.
pub async fn keep_alive(addr: &str, id: &str) -> anyhow::Result<ExitCode> {
    let out: Value = serde_json::from_slice(
        &call(
            addr,
            "POST",
            &format!("{}/keepalive", id_path(id)?),
            Some(&json!({})),
        )
        .await?,
    )?;
    let secs = |k: &str| out[k].as_u64().unwrap_or(0) / 1000;
    println!(
        "idle left {}s, lifetime left {}s",
        secs("idle_left_ms"),
        secs("lifetime_left_ms")
    );
    Ok(ExitCode::SUCCESS)
}

/// `env ID K=V…`: kept for every later command.
pub async fn env(addr: &str, id: &str, vars: Vec<(String, String)>) -> anyhow::Result<ExitCode> {
    let body = json!({ "env": vars.into_iter().collect::<std::collections::BTreeMap<_, _>>() });
    call(addr, "POST", &format!("{}/env", id_path(id)?), Some(&body)).await?;
    Ok(ExitCode::SUCCESS)
}

/// `list`: one line a sandbox (or the JSON).
pub async fn list(addr: &str, cluster: bool, json_out: bool) -> anyhow::Result<ExitCode> {
    let path = if cluster {
        "/sandboxes?cluster=true"
    } else {
        "/sandboxes"
    };
    let out: Value = serde_json::from_slice(&call(addr, "GET", path, None).await?)?;
    if json_out {
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<56} {:<8} {:>10} {:>14}  WORKER",
        "ID", "STATE", "IDLE LEFT", "LIFETIME LEFT"
    );
    for s in out["sandboxes"].as_array().into_iter().flatten() {
        let secs = |k: &str| {
            s[k].as_u64()
                .map_or_else(|| "-".to_string(), |ms| format!("{}s", ms / 1000))
        };
        println!(
            "{:<56} {:<8} {:>10} {:>14}  {}",
            s["id"].as_str().unwrap_or_default(),
            s["state"].as_str().unwrap_or("?"),
            secs("idle_left_ms"),
            secs("lifetime_left_ms"),
            s["worker"].as_str().unwrap_or("-"),
        );
    }
    for u in out["unreached"].as_array().into_iter().flatten() {
        eprintln!(
            "chorus: {} did not answer ({}): its sandboxes are not listed",
            u["node"].as_str().unwrap_or("?"),
            u["error"].as_str().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `close ID`.
pub async fn close(addr: &str, id: &str) -> anyhow::Result<ExitCode> {
    let out: Value = serde_json::from_slice(&call(addr, "DELETE", &id_path(id)?, None).await?)?;
    if let Some(why) = out["sync_error"].as_str() {
        eprintln!("closed, but its repository was not synced back: {why}");
        return Ok(ExitCode::FAILURE);
    }
    if out["sync"].is_object() {
        return Ok(print_sync(&out["sync"]));
    }
    Ok(ExitCode::SUCCESS)
}

/// `sync ID`: what came back to the repository, and what did not.
pub async fn sync(addr: &str, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let out: Value = serde_json::from_slice(
        &call(
            addr,
            "POST",
            &format!("{}/sync", id_path(id)?),
            Some(&json!({})),
        )
        .await?,
    )?;
    if json_out {
        println!("{out}");
        return Ok(if out["complete"] == true {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    Ok(print_sync(&out))
}

/// A sync's report on stdout (what was not carried on stderr); failure when something was not.
fn print_sync(r: &Value) -> ExitCode {
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    println!("synced: {} written, {} deleted", n("written"), n("deleted"));
    for (key, what) in [("refused", "refused"), ("kept", "kept as on the host")] {
        for path in r[key].as_array().into_iter().flatten() {
            eprintln!("  {what}: {}", path.as_str().unwrap_or_default());
        }
    }
    if let Some(why) = r["incomplete"].as_str() {
        eprintln!("  stopped early (nothing deleted): {why}");
    }
    if r["complete"] == true {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every byte outside unreserved characters and `/` as `%XX`.
pub(super) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `K=V` as given on the command line.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?}: expected NAME=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_in_a_sandbox_are_id_colon_absolute_path() {
        assert_eq!(
            Place::parse("n1.ab12:/workspace/a.txt"),
            Place::Sandbox {
                id: "n1.ab12".into(),
                path: "/workspace/a.txt".into()
            }
        );
        for local in ["a.txt", "./x:/y", "C:relative", "/abs/file"] {
            assert_eq!(
                Place::parse(local),
                Place::Local(PathBuf::from(local)),
                "{local}"
            );
        }
        assert_eq!(percent_encode("/a b/ü?"), "/a%20b/%C3%BC%3F");
        assert!(id_path("../acl").is_err());
        assert_eq!(key_value("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(key_value("=x").is_err());
    }
}
