//! `/sandboxes/{id}/files`, `/ls` and `/tree` (issue 53): a live sandbox's files, read,
//! written, listed and removed one at a time, and whole folders moved as tar archives.
//!
//! Every path is the caller's, checked by [`sandbox_path`] (absolute, no `..`) and resolved in
//! the sandbox by its own commands — never on the host. A file's raw bytes and a folder's tar
//! archive stream (read as they come from the sandbox, written as they arrive, through a
//! forwarding node too), never held whole, up to the worker's `max_stream_bytes` (1 GiB of
//! file bytes) per call; a JSON write moves whole, at most the worker's `max_file_bytes`
//! (64 MiB), in a request body of at most [`MAX_FILE_BODY`] (a file's base64 in JSON is a
//! third larger). A tree passes through `chorus_io::sandbox::tree_stream::filter` both ways:
//! folders, regular files and hard links to a file earlier in the archive are kept; symbolic
//! links, devices, names that are not UTF-8 and names that leave the folder are left out, and
//! the answer to an upload lists them — so the archive a caller gets holds no symbolic link
//! either.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chorus_io::sandbox::live::LiveError;
use chorus_io::sandbox::ExecRequest;
use serde::Deserialize;
use serde_json::{json, Value};

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::sandboxes::{
    answer, bad, body_of, error_answer, live_caller, parse, run_helper, sandbox_path, Asked,
    Refused, Route, CALL_WAIT, STREAM_WAIT,
};
use crate::daemon::sandboxes::Live;

/// The largest request body a file or tree route takes: a 64 MiB file as base64 in JSON.
pub(super) const MAX_FILE_BODY: usize = 96 << 20;

/// Entries `ls` lists at most; past it the answer says `truncated`.
const MAX_LISTED: usize = 10_000;

/// A request body read whole, at most [`MAX_FILE_BODY`] bytes (413 past it).
async fn bounded(body: Body) -> Result<Bytes, Refused> {
    axum::body::to_bytes(body, MAX_FILE_BODY)
        .await
        .map_err(|_| {
            let most = MAX_FILE_BODY >> 20;
            Refused(
                413,
                format!(
                    "the body is over {most} MiB, the most one call moves: write a larger file in \
                 parts (or fetch it from inside the sandbox)"
                ),
            )
        })
}

/// Whether the body is raw bytes (a file's, or a tar archive), not JSON.
fn is_raw(asked: &Asked) -> bool {
    asked.content_type.as_deref().is_some_and(|k| {
        let k = k.split(';').next().unwrap_or_default().trim();
        k.eq_ignore_ascii_case("application/octet-stream")
            || k.eq_ignore_ascii_case("application/x-tar")
    })
}

/// The registry holding sandbox `id` here and its checked `?path=`; or the answer already
/// given (forwarded to its worker, or refused).
async fn at_path(
    asked: &Asked,
    id: &str,
    query: &BTreeMap<String, String>,
) -> Result<(std::sync::Arc<crate::daemon::sandboxes::Live>, String), Response> {
    let live = match asked.route(id, None, CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return Err(r),
    };
    let path = path_in(query).map_err(IntoResponse::into_response)?;
    Ok((live, path))
}

/// `?path=` checked, or the 400 that says what is wrong.
fn path_in(query: &BTreeMap<String, String>) -> Result<String, Refused> {
    let Some(path) = query.get("path") else {
        return Err(Refused(400, "give ?path=/absolute/path".into()));
    };
    sandbox_path(path)
}

/// The body of `PUT /sandboxes/{id}/files`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WriteFile)]
struct FileBody {
    /// An absolute path in the sandbox, without `..`.
    path: String,
    /// The content as text (or `content_b64`).
    content: Option<String>,
    /// The content in base64 (or `content`).
    content_b64: Option<String>,
    /// Permission bits (default 0o644 = 420).
    mode: Option<u32>,
}

/// `PUT /sandboxes/{id}/files`.
#[utoipa::path(
    put,
    path = "/sandboxes/{id}/files",
    tag = "sandboxes",
    summary = "Write a file",
    description = "Writes the file at an absolute path in the sandbox, making its folders: a JSON \
        body (`path`, text `content` or `content_b64`, `mode`; at most 64 MiB of file), or the \
        file's raw bytes (`Content-Type: application/octet-stream`) with `?path=` and an \
        optional octal `&mode=644`, streamed into the sandbox as they arrive (at most 1 GiB; \
        an upload that breaks off leaves no file at the path).",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("path" = Option<String>, Query, description = "With a raw body: an absolute path in the sandbox, without `..`"),
        ("mode" = Option<String>, Query, description = "With a raw body: permission bits in octal (default 644)"),
    ),
    request_body(content(
        (FileBody = "application/json"),
        (Vec<u8> = "application/octet-stream"),
    )),
    responses(
        (status = 200, description = "Written", body = crate::api::openapi::FileWritten),
        (status = 400, description = "Not a body this route takes, a bad path or mode", body = crate::api::openapi::SandboxRefusal),
        (status = 413, description = "A JSON body over 96 MiB, or raw bytes over 1 GiB", body = crate::api::openapi::Refusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "The sandbox could not write it (no room in its workspace, a folder at the path…)", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn write_file(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    body: Body,
) -> Response {
    if is_raw(&asked) {
        return write_streamed(asked, id, query, body).await;
    }
    let body = match bounded(body).await {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    let live = match asked.route(&id, Some(&body), CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    let req: FileBody = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let data = match (req.content, req.content_b64) {
        (Some(text), None) => text.into_bytes(),
        (None, Some(b64)) => match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(d) => d,
            Err(e) => return bad(format!("content_b64: {e}")),
        },
        _ => return bad("give one of content (text) and content_b64"),
    };
    let (path, mode) = match checked(&req.path, req.mode) {
        Ok(at) => at,
        Err(r) => return r.into_response(),
    };
    let size = data.len();
    match live
        .write_file(&live_caller(&asked.caller), &id, &path, &data, mode)
        .await
    {
        Ok(()) => answer(200, json!({ "path": path, "size": size })),
        Err(e) => error_answer(&e),
    }
}

/// A write's path and permission bits checked (0o644 when not given).
fn checked(path: &str, mode: Option<u32>) -> Result<(String, u32), Refused> {
    let path = sandbox_path(path)?;
    let mode = mode.unwrap_or(0o644);
    if mode > 0o777 {
        return Err(Refused(
            400,
            "mode: permission bits only (at most 0o777)".into(),
        ));
    }
    Ok((path, mode))
}

/// `PUT /sandboxes/{id}/files?path=P` with the file's raw bytes: sent on to the sandbox as they
/// come (to its node, then into the sandbox), never held whole; at most the worker's stream
/// bound (1 GiB, 413 past it, counted). A body that breaks off leaves no file at the path.
async fn write_streamed(
    asked: Asked,
    id: String,
    query: BTreeMap<String, String>,
    body: Body,
) -> Response {
    // The bytes as they come; where and how in the query.
    let Some(path) = query.get("path") else {
        return bad("give ?path=/absolute/path (a raw body says only the file's bytes)");
    };
    let mode = match query.get("mode").map(|m| u32::from_str_radix(m, 8)) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(_)) => return bad("mode: octal permission bits, as chmod takes them (644)"),
    };
    let (path, mode) = match checked(path, mode) {
        Ok(at) => at,
        Err(r) => return r.into_response(),
    };
    let (live, body) = match asked.route_streaming(&id, body, STREAM_WAIT).await {
        Ok(here) => here,
        Err(r) => return r,
    };
    let most = live.limits().max_stream_bytes;
    let (tx, rx) = mpsc::channel::<Vec<u8>>(4);
    let caller = live_caller(&asked.caller);
    let write = live.write_file_streaming(&caller, &id, &path, mode, rx);
    match tokio::join!(write, pump(body, tx, most)) {
        (_, Err(moved)) => {
            let refused = live.refuse_stream_size(moved);
            answer(
                413,
                json!({ "error": format!("{refused}: write a larger file in parts"),
                    "reason": "file_size" }),
            )
        }
        (Ok(size), Ok(())) => answer(200, json!({ "path": path, "size": size })),
        (Err(e), Ok(())) => error_answer(&e),
    }
}

/// Sends a request body on to `tx` as it comes: its chunks, then an empty one for its end;
/// over `most` bytes (`Err` with how many came), or broken, no end is sent and the write
/// fails. A write that ended early (no room left …) takes no more, and the rest of the body
/// is read and dropped: the caller then reads the answer, not a connection reset under its
/// upload.
async fn pump(body: Body, tx: mpsc::Sender<Vec<u8>>, most: u64) -> Result<(), u64> {
    let mut data = body.into_data_stream();
    let mut moved: u64 = 0;
    let mut open = true;
    while let Some(piece) = data.next().await {
        let Ok(piece) = piece else { return Ok(()) };
        moved = moved.saturating_add(piece.len() as u64);
        if moved > most {
            return Err(moved);
        }
        if open && !piece.is_empty() && tx.send(piece.to_vec()).await.is_err() {
            open = false;
        }
    }
    if open {
        let _ = tx.send(Vec::new()).await;
    }
    Ok(())
}

/// `GET /sandboxes/{id}/files?path=P`.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/files",
    tag = "sandboxes",
    summary = "Read a file",
    description = "The file's bytes, streamed as they come from the sandbox (at most 1 GiB). \
        What goes wrong before the first byte is answered with its status; a file over the \
        bound, or a read that fails part way, breaks the answer off, so a client never takes a \
        part for the whole.",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("path" = String, Query, description = "An absolute path in the sandbox, without `..`"),
    ),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "No path, or a bad one", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "The sandbox could not read it (missing, a folder, too large)", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn read_file(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let live = match asked.route(&id, None, CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    let Some(path) = query.get("path") else {
        return bad("give ?path=/absolute/path");
    };
    let path = match sandbox_path(path) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let caller = live_caller(&asked.caller);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(4);
    let reader = live.clone();
    let read =
        tokio::spawn(async move { reader.read_file_streaming(&caller, &id, &path, tx).await });
    read_streamed(live, read, rx, "application/octet-stream").await
}

/// Bytes as they come from the sandbox (`rx`, fed by the spawned `read`), never held whole:
/// at most the worker's stream bound (1 GiB). What went wrong before the first byte is said
/// (422, 410 …); after it the answer breaks off, so a caller never takes a part for the
/// whole. Empty chunks (a tree's end) carry nothing.
async fn read_streamed(
    live: Arc<Live>,
    mut read: tokio::task::JoinHandle<Result<(), chorus_io::sandbox::live::LiveError>>,
    mut rx: mpsc::Receiver<Vec<u8>>,
    content_type: &'static str,
) -> Response {
    let most = live.limits().max_stream_bytes;
    let first = loop {
        match rx.recv().await {
            Some(c) if c.is_empty() => continue,
            other => break other,
        }
    };
    let Some(first) = first else {
        // Nothing came: an empty file, or the read failed before its first byte.
        return match (&mut read).await {
            Ok(Ok(())) => ([(header::CONTENT_TYPE, content_type)], Vec::new()).into_response(),
            Ok(Err(e)) => error_answer(&e),
            Err(e) => Refused(500, format!("the read ended: {e}")).into_response(),
        };
    };
    let (out, body) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut moved = first.len() as u64;
        let mut next = Some(first);
        while let Some(data) = next {
            if moved > most {
                let refused = live.refuse_stream_size(moved);
                let _ = out
                    .send(Err(std::io::Error::other(refused.to_string())))
                    .await;
                read.abort();
                return;
            }
            if out.send(Ok(Bytes::from(data))).await.is_err() {
                read.abort();
                return;
            }
            next = loop {
                match rx.recv().await {
                    Some(c) if c.is_empty() => continue,
                    other => break other,
                }
            };
            moved = moved.saturating_add(next.as_ref().map_or(0, |d| d.len() as u64));
        }
        let ended = match read.await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        let _ = out.send(Err(std::io::Error::other(ended))).await;
    });
    ([(header::CONTENT_TYPE, content_type)], body_of(body)).into_response()
}

/// `DELETE /sandboxes/{id}/files?path=P`: `rm -rf` of a file or a folder.
#[utoipa::path(
    delete,
    path = "/sandboxes/{id}/files",
    tag = "sandboxes",
    summary = "Remove a file or a folder",
    description = "Removes the path and, for a folder, everything under it (`rm -rf`, in the \
        sandbox). A path that does not exist is removed already (200). `/` is refused.",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("path" = String, Query, description = "An absolute path in the sandbox, without `..`"),
    ),
    responses(
        (status = 200, description = "Removed", body = crate::api::openapi::FileRemoved),
        (status = 400, description = "No path, a bad one, or `/`", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "The sandbox could not remove it", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn remove_file(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let (live, path) = match at_path(&asked, &id, &query).await {
        Ok(at) => at,
        Err(r) => return r,
    };
    if path.trim_end_matches('/').is_empty() {
        return bad("path: not / (remove what is under it by name)");
    }
    let request = ExecRequest::new(["rm", "-rf", "--", path.as_str()]);
    match run_helper(&live, &asked, &id, request).await {
        Ok(out) if out.exit_code == 0 => answer(200, json!({ "path": path, "removed": true })),
        Ok(out) => answer(
            422,
            json!({
                "error": format!("rm -rf {path} failed (exit {}): {}", out.exit_code,
                    String::from_utf8_lossy(&out.stderr).trim()),
                "reason": "sandbox",
            }),
        ),
        Err(e) => error_answer(&e),
    }
}

/// One entry as `find -printf` says it, six fields each ended by NUL (`\0` is find's escape
/// for it): kind, size, mode, modified (seconds), link target, name.
const LS_FORMAT: &str = "%y\\0%s\\0%m\\0%T@\\0%l\\0%P\\0";

/// `GET /sandboxes/{id}/ls?path=P`: a folder's entries, or one file's.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/ls",
    tag = "sandboxes",
    summary = "List a folder, or stat a file",
    description = "The path itself (`kind` `file`, `dir`, `symlink`, `other`; its size, \
        permission bits and modification time) and, for a folder, its entries one level down, \
        by name (at most 10,000: `truncated` past it). A symlink is listed, not followed.",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("path" = String, Query, description = "An absolute path in the sandbox, without `..`"),
    ),
    responses(
        (status = 200, description = "The path and its entries", body = crate::api::openapi::Listing),
        (status = 400, description = "No path, or a bad one", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "No such path in the sandbox, or it could not be read", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn list_dir(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let (live, path) = match at_path(&asked, &id, &query).await {
        Ok(at) => at,
        Err(r) => return r,
    };
    let request = ExecRequest::new([
        "find",
        path.as_str(),
        "-maxdepth",
        "1",
        "-printf",
        LS_FORMAT,
    ]);
    let out = match run_helper(&live, &asked, &id, request).await {
        Ok(out) => out,
        Err(e) => return error_answer(&e),
    };
    let mut entries = parse_listing(&out.stdout);
    if entries.is_empty() {
        return answer(
            422,
            json!({
                "error": format!("{path}: {}", String::from_utf8_lossy(&out.stderr).trim()),
                "reason": "sandbox",
            }),
        );
    }
    let mut itself = entries.remove(0);
    let truncated = out.stdout_truncated || entries.len() > MAX_LISTED;
    entries.truncate(MAX_LISTED);
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    itself["path"] = json!(path);
    if let Some(o) = itself.as_object_mut() {
        o.remove("name");
    }
    if itself["kind"] == "dir" {
        itself["entries"] = json!(entries);
        itself["truncated"] = json!(truncated);
    }
    answer(200, itself)
}

/// `find -printf LS_FORMAT`'s output as entries, the path itself first; a last entry cut short
/// (the output cap) is dropped.
fn parse_listing(raw: &[u8]) -> Vec<Value> {
    let fields: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
    fields
        .chunks_exact(6)
        .map(|f| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let kind = match f[0] {
                b"f" => "file",
                b"d" => "dir",
                b"l" => "symlink",
                _ => "other",
            };
            let mut entry = json!({
                "name": text(f[5]),
                "kind": kind,
                "size": text(f[1]).parse::<u64>().unwrap_or(0),
                "mode": u32::from_str_radix(&text(f[2]), 8).unwrap_or(0),
                "modified_unix": text(f[3]).split('.').next().and_then(|s| s.parse::<i64>().ok()),
            });
            if kind == "symlink" {
                entry["target"] = json!(text(f[4]));
            }
            entry
        })
        .collect()
}

/// `GET /sandboxes/{id}/tree?path=DIR`: a folder's regular files as a tar archive.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/tree",
    tag = "sandboxes",
    summary = "Download a folder (tar)",
    description = "The folders and regular files under the folder, with their permission \
        bits, as a tar archive (paths relative to it), streamed as the sandbox's `tar` writes \
        it. A file's second name is a hard link to its first; symbolic links, devices and the \
        like are left out. At most the worker's stream bound (1 GiB) of file bytes: a larger \
        folder, or a read that fails part way, breaks the answer off.",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("path" = String, Query, description = "An absolute path of a folder in the sandbox, without `..`"),
    ),
    responses(
        (status = 200, description = "The archive", content_type = "application/x-tar", body = Vec<u8>),
        (status = 400, description = "No path, or a bad one", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "The sandbox could not read it (missing, not a folder, too large)", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn read_tree(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let (live, path) = match at_path(&asked, &id, &query).await {
        Ok(at) => at,
        Err(r) => return r,
    };
    let caller = live_caller(&asked.caller);
    let (tx, rx) = mpsc::channel::<Vec<u8>>(4);
    let reader = live.clone();
    let read =
        tokio::spawn(async move { reader.read_tree_streaming(&caller, &id, &path, tx).await });
    read_streamed(live, read, rx, "application/x-tar").await
}

/// `PUT /sandboxes/{id}/tree?path=DIR`: a tar archive unpacked under a folder.
#[utoipa::path(
    put,
    path = "/sandboxes/{id}/tree",
    tag = "sandboxes",
    summary = "Upload a folder (tar)",
    description = "Unpacks the archive's folders and regular files (with their permission \
        bits) under the folder as the body arrives, making it and the folders they name; files \
        already there are replaced, others kept. Hard links to a file earlier in the archive \
        are kept; symbolic links, devices, names that are not UTF-8 and names with `..` are \
        left out and listed in `skipped`. The body is the archive (`Content-Type: \
        application/x-tar` or `application/octet-stream`), at most the worker's stream bound \
        (1 GiB) of file bytes (413 past it: what came before it is written).",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("path" = String, Query, description = "An absolute path of a folder in the sandbox, without `..`"),
    ),
    request_body(content = Vec<u8>, content_type = "application/x-tar"),
    responses(
        (status = 200, description = "Written", body = crate::api::openapi::TreeWritten),
        (status = 400, description = "No path, a bad one, not a tar archive, or one broken off", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 413, description = "Files over the worker's stream bound (1 GiB), or over a million entries", body = crate::api::openapi::Refusal),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "The sandbox could not write it", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn write_tree(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    body: Body,
) -> Response {
    if !is_raw(&asked) {
        return bad("the body is a tar archive: Content-Type: application/x-tar");
    }
    let path = match path_in(&query) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let (live, body) = match asked.route_streaming(&id, body, STREAM_WAIT).await {
        Ok(here) => here,
        Err(r) => return r,
    };
    // The filter bounds the files' bytes; the archive's own is bounded by its entries.
    let most = u64::MAX;
    let (tx, rx) = mpsc::channel::<Vec<u8>>(4);
    let caller = live_caller(&asked.caller);
    let write = live.write_tree_streaming(&caller, &id, &path, rx);
    match tokio::join!(write, pump(body, tx, most)) {
        (Ok(done), _) => answer(
            200,
            json!({ "path": path, "files": done.files, "bytes": done.bytes,
                "skipped": done.skipped, "skipped_more": done.skipped_more }),
        ),
        (Err(LiveError::Refused { reason, detail }), _) if reason == "file_size" => answer(
            413,
            json!({ "error": format!("{detail}: send the folder in parts"), "reason": reason }),
        ),
        (Err(e), _) => error_answer(&e),
    }
}
