//! `/sandboxes`: live sandboxes — kept across many calls — anywhere in the cluster (issue 53;
//! docs/design.md §4.8). A sandbox is a live task of the core: placed by the admin, made at its
//! worker (`chorus_io::sandbox::tasks` `live_placements`) in the worker's registry
//! (`chorus_io::sandbox::live`, whose rules it keeps), ended there. This file is the HTTP face:
//!
//! | route | what |
//! |---|---|
//! | `POST /sandboxes` | create: `{image?, env?, memory_mb?, cpu_millis?, pids?, network?, requires?, repo?, idle_timeout_ms?, lifetime_ms?, key?, wait_ms?}` → 201 once made (200 for a known key), 202 while it waits for a worker |
//! | `GET /sandboxes` | the caller's held here, and those made through here held elsewhere (an `operate` token: every one) |
//! | `GET /sandboxes/{id}` | one, with the time left (`?wait_ms=` waits for one being made) |
//! | `DELETE /sandboxes/{id}` | close |
//! | `POST /sandboxes/{id}/exec` | `{argv` or `shell, cwd?, env?, stdin?, timeout_ms?, stream?}` → the exit, or with `stream` NDJSON lines as output comes |
//! | `POST /sandboxes/{id}/exec` with `background: true` | starts it in its own session, output to a log file: `{pid, log}` |
//! | `GET /sandboxes/{id}/processes` | what runs in it: `{processes: [{pid, pgid, seconds, command}]}` |
//! | `DELETE /sandboxes/{id}/processes/{pid}` | kills that process's group |
//! | `POST /sandboxes/{id}/env` | `{env: {K: V}}`, kept for every later command |
//! | `PUT /sandboxes/{id}/files` | `{path, content` or `content_b64, mode?}`, or raw bytes with `?path=P&mode=644` |
//! | `GET /sandboxes/{id}/files?path=P` | the file's bytes |
//! | `DELETE /sandboxes/{id}/files?path=P` | `rm -rf` of it |
//! | `GET /sandboxes/{id}/ls?path=P` | the path and, for a folder, its entries |
//! | `GET`/`PUT /sandboxes/{id}/tree?path=DIR` | a folder's regular files as a tar archive, out or in |
//! | `POST /sandboxes/{id}/keepalive` | its idle clock starts again (its lifetime stays) |
//! | `POST /sandboxes/{id}/sync` | a read-write repository (`repo: {name, writable: true}` at create) carried back now; a close does it too |
//!
//! The file routes are in `sandbox_files.rs`.
//!
//! Every route needs a `submit` token; a sandbox is its token's, and any other token gets 404
//! (an `operate` token may list and close any). A sandbox that ended answers **410** with why.
//!
//! **Any node answers.** A sandbox's id is its live task's id (`ORIGIN-SEQ`); `sandbox_place`
//! finds its worker from its task's record. A call for a sandbox another worker holds is
//! forwarded to that worker's advertised API (pinned by its certificate's fingerprint, at the
//! IP its connection comes from) with a token delegated to that worker alone, for the caller's
//! role and id (`api::auth`); a forwarded call is never forwarded again, and ends at once
//! (503) when the worker's connection goes during it. What the caller sees when the worker is
//! not there:
//! - the worker's API refuses the connection (its process is down: its sandboxes ended with
//!   it, their supervisor ends when its end of their stdin closes) → **410** `lost`;
//! - the admin declared its worker down (one failure-detection interval), or a restarted
//!   worker reported it gone → its task ended `lost` → **410** `lost`, naming the worker;
//! - the worker is not connected to this node, or does not answer in time → **503**, naming
//!   it: it may be cut off from this node only; a close at the sandbox's node of record then
//!   cancels its task, and the cluster ends it (**202**).
//!
//! A forwarded streaming exec reaches the caller whole at its end (the node-to-node client
//! reads whole answers).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::extract::{Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use chorus_io::sandbox::image::SANDBOX_IMAGE;
use chorus_io::sandbox::live::{self, LiveError, LiveInfo};
use chorus_io::sandbox::tasks::{live_base_policy, live_sandbox_spec, TaskShape};
use chorus_io::sandbox::{ErrorCategory, ExecOutput, ExecRequest, SandboxPolicy, SandboxSpec};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::auth::{Auth, Caller, Role};
use super::cluster::Member;
pub(super) use super::sandbox_forward::{answer, bad, send_to, Refused};
use super::sandbox_forward::{reach, too_slow, unanswered, FORWARD_MARGIN, MAX_FORWARDED_BYTES};
use super::sandbox_place::{self, Found};
use crate::daemon::shared::SharedState;
use crate::http1;

pub use crate::daemon::sandboxes::Live;

/// The longest a command may run when the request names no timeout.
const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// The longest timeout a command may ask for.
const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Output chunks a streaming exec holds for a slow reader before the command waits.
const STREAM_BUFFER: usize = 64;

/// The body of `POST /sandboxes`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateSandbox)]
struct CreateBody {
    /// The image (default: the node's sandbox image).
    image: Option<String>,
    /// Environment variables for every command.
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    memory_mb: u32,
    #[serde(default)]
    cpu_millis: u32,
    #[serde(default)]
    pids: u32,
    /// Network access (default none: only loopback), as a task's: the worker's egress rules
    /// hold (no host, no cluster, no private ranges).
    #[serde(default)]
    network: bool,
    /// Capabilities its worker must offer (`gpu`, `repo:NAME`, …), as a task's `requires`.
    #[serde(default)]
    requires: Vec<String>,
    /// A repository of its worker's `[repos]` at the workspace, as a task's (the admin places
    /// it on a worker offering `repo:NAME`): read-only, or with `writable` a copy that
    /// `POST /sandboxes/{id}/sync` and the close carry back (never its `.git`).
    #[schema(value_type = Option<crate::wire_doc::RepoMountDoc>)]
    repo: Option<chorus_core::task::RepoMount>,
    /// Ends after this long without a call, ms (default and ceiling: the node's).
    idle_timeout_ms: Option<u64>,
    /// Ends this long after it was made, ms (default and ceiling: the node's).
    lifetime_ms: Option<u64>,
    /// An idempotency key: a retried create with it answers the same sandbox (200).
    key: Option<String>,
    /// How long to wait for the sandbox to be made, ms (default 30000, at most 120000); one
    /// still waiting for a worker then is answered 202.
    wait_ms: Option<u64>,
}

/// The body of `POST /sandboxes/{id}/exec`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ExecRequest)]
struct ExecBody {
    /// The command and its arguments (or `shell`).
    argv: Option<Vec<String>>,
    /// A script for `sh -c` (or `argv`).
    shell: Option<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    stdin: Option<String>,
    /// Default 600000 (10 min), at most 3600000.
    timeout_ms: Option<u64>,
    /// Answer NDJSON lines as output comes.
    #[serde(default)]
    stream: bool,
    /// Start it in a session of its own and answer its pid at once.
    #[serde(default)]
    background: bool,
}

/// Starts `"$@"` in a session of its own with its output in `/tmp/.chorus-bg/PID.log` (the
/// log is renamed once the pid is known; the process keeps writing to it), and prints the pid.
/// The log is opened here, before the process starts, and handed to it as a descriptor: a
/// process that opened it by name itself could do so after the rename (about one start in
/// ten failed so, renaming a file not made yet).
const BACKGROUND_SCRIPT: &str = r#"d=/tmp/.chorus-bg; mkdir -p "$d" && exec 3> "$d/start.$$" || exit 125
setsid "$@" >&3 2>&3 3>&- < /dev/null &
p=$!; exec 3>&-; mv "$d/start.$$" "$d/$p.log" && echo "$p""#;

/// Lists the sandbox's processes, one a line: pid, process group, seconds running, command.
const PROCESSES_SCRIPT: &str = "ps -eo pid=,pgid=,etimes=,args=";

/// The body of `POST /sandboxes/{id}/env`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SetEnv)]
struct EnvBody {
    env: BTreeMap<String, String>,
}

type ApiState = State<(SharedState, SocketAddr)>;

/// The caller's request sent on to `to` ([`reach`]); its answer relayed as it comes — a
/// streaming exec's lines as the worker sends them — at most [`MAX_FORWARDED_BYTES`], and cut
/// (an NDJSON answer with a last line saying why) when `to`'s connection to this node goes or
/// `wait` (beside [`FORWARD_MARGIN`]) runs out. Its failures name `to` as `who` (`the
/// sandbox's worker`, or `node` for a relayed call); the answer's `chorus-*` headers (a log's
/// position) are passed on.
#[allow(clippy::too_many_arguments)]
async fn forward(
    asked: &Asked,
    to: &Member,
    method: &str,
    path: &str,
    body: Option<Body>,
    wait: Duration,
    who: &str,
) -> Response {
    let shared = &asked.shared;
    let tunnels = shared.lock().tunnels.clone();
    let reach = match reach(&asked.auth, &asked.caller, to, tunnels) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    // Sent on as it comes, with its media type (JSON, or a file's raw bytes); the worker
    // judges it.
    let kind = asked.content_type.as_deref().unwrap_or("application/json");
    let bound = wait + FORWARD_MARGIN;
    let deadline = tokio::time::Instant::now() + bound;
    let body = body.map(|body| (kind, body));
    let opened = reach.open(method, path, body);
    let answer = match tokio::time::timeout_at(deadline, opened).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return unanswered(to, &e),
        Err(_) => return too_slow(to, bound),
    };
    let code = answer.status();
    let kind = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let length = answer.headers().get(header::CONTENT_LENGTH).cloned();
    let ours: Vec<(header::HeaderName, header::HeaderValue)> = answer
        .headers()
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("chorus-"))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let with_ours = |mut response: Response| {
        response.headers_mut().extend(ours.clone());
        response
    };
    let lines = kind.starts_with("application/x-ndjson");
    let raw = is_raw_kind(&kind);
    if !lines && !raw {
        // A whole answer (JSON): read, bounded, and sent on with its length. One wait around
        // the whole read (not one per chunk).
        let whole = axum::body::to_bytes(
            Body::new(answer.into_body()),
            usize::try_from(MAX_FORWARDED_BYTES).unwrap_or(usize::MAX),
        );
        return tokio::select! {
            whole = whole => match whole {
                Ok(whole) => with_ours((code, [(header::CONTENT_TYPE, kind)], whole).into_response()),
                Err(e) => Refused(
                    502,
                    format!(
                        "the answer of {} broke off, or is over {MAX_FORWARDED_BYTES} bytes: {e}",
                        to.node_id
                    ),
                )
                .into_response(),
            },
            () = vanished(shared, &to.node_id) => Refused(503, format!(
                "{who} {} went away during the call (its connection closed: \
                 down, or cut off)", to.node_id)).into_response(),
            () = tokio::time::sleep_until(deadline) => too_slow(to, bound),
        };
    }
    // Streamed on as it comes: an exec's lines, or a file's bytes (as long as a streamed
    // transfer may take, and as large).
    let (most, deadline, bound) = if raw {
        let bound = STREAM_WAIT;
        (
            MAX_STREAMED_BYTES,
            tokio::time::Instant::now() + bound,
            bound,
        )
    } else {
        (MAX_FORWARDED_BYTES, deadline, bound)
    };
    let mut data = Body::new(answer.into_body()).into_data_stream();
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(STREAM_BUFFER);
    let (shared, node, who) = (shared.clone(), to.node_id.clone(), who.to_owned());
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let gone = vanished(&shared, &node);
        tokio::pin!(gone);
        let mut relayed: u64 = 0;
        let cut = loop {
            let next = tokio::select! {
                next = data.next() => next,
                () = &mut gone => break Some(format!(
                    "{who} {node} went away during the call (its connection \
                     closed: down, or cut off)")),
                () = tokio::time::sleep_until(deadline) => break Some(format!(
                    "{who} {node} did not finish within {bound:?}")),
            };
            match next {
                None => break None,
                Some(Ok(piece)) => {
                    relayed += piece.len() as u64;
                    if relayed > most {
                        break Some(format!("the answer of {node} is over {most} bytes"));
                    }
                    if tx.send(Ok(piece)).await.is_err() {
                        // The caller left.
                        break None;
                    }
                }
                Some(Err(e)) => break Some(format!("the answer of {node} broke off: {e}")),
            }
        };
        if let Some(why) = cut {
            // Lines end with one saying why; bytes break off, so the caller never takes a
            // part for the whole.
            let last = if raw {
                Err(std::io::Error::other(why))
            } else {
                Ok(ndjson(&json!({ "error": why, "status": 503 })))
            };
            let _ = tx.send(last).await;
        }
    });
    let mut response =
        with_ours((code, [(header::CONTENT_TYPE, kind)], body_of(rx)).into_response());
    if let Some(length) = length.filter(|_| raw) {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, length);
    }
    response
}

/// Whether a media type is a file's or an archive's bytes (streamed, not read whole).
pub(super) fn is_raw_kind(kind: &str) -> bool {
    let kind = kind.split(';').next().unwrap_or_default().trim();
    kind.eq_ignore_ascii_case("application/octet-stream")
        || kind.eq_ignore_ascii_case("application/x-tar")
}

/// The most a streamed file answer carries through a node: the worker's stream bound
/// (`LiveLimits::max_stream_bytes`, 1 GiB) and the one byte past it that says "larger".
pub(super) const MAX_STREAMED_BYTES: u64 = live::DEFAULT_MAX_STREAM_BYTES + 1;

/// How long a streamed file transfer may take, end to end (as long as the worker lets it).
pub(super) const STREAM_WAIT: Duration = chorus_io::sandbox::STREAM_WAIT;

/// A body sent as its pieces come from `rx`; an `Err` piece breaks it off.
pub(super) fn body_of(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|piece| (piece, rx))
    });
    Body::from_stream(stream)
}

/// A node's whole answer, passed on as it came.
fn relay(answer: http1::RawAnswer) -> Response {
    let code = StatusCode::from_u16(answer.code).unwrap_or(StatusCode::BAD_GATEWAY);
    let kind = answer
        .header("content-type")
        .unwrap_or("application/json")
        .to_string();
    (code, [(header::CONTENT_TYPE, kind)], answer.body).into_response()
}

/// Resolves once `node` is no longer connected to this node (checked every
/// [`VANISHED_CHECK`]): a call forwarded to it then ends at once, not at its timeout.
async fn vanished(shared: &SharedState, node: &str) {
    loop {
        tokio::time::sleep(VANISHED_CHECK).await;
        let connected = shared
            .lock()
            .core
            .as_ref()
            .is_some_and(|c| c.peers().ids().any(|p| p.as_str() == node));
        if !connected {
            return;
        }
    }
}

/// How often a forwarded call checks that its worker is still connected.
const VANISHED_CHECK: Duration = Duration::from_millis(250);

/// What every call for one sandbox needs: the node's state, who asks, and what they asked.
pub(super) struct Asked {
    shared: SharedState,
    bound: SocketAddr,
    auth: Arc<Auth>,
    pub(super) caller: Caller,
    method: Method,
    uri: Uri,
    /// The request's `Content-Type`, if it said one.
    pub(super) content_type: Option<String>,
}

impl FromRequestParts<(SharedState, SocketAddr)> for Asked {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &(SharedState, SocketAddr),
    ) -> Result<Self, Response> {
        // The gatekeeper put both there for every route that needs a token.
        let (Some(caller), Some(auth)) = (
            parts.extensions.get::<Caller>().cloned(),
            parts.extensions.get::<Arc<Auth>>().cloned(),
        ) else {
            return Err(answer(401, json!({ "error": "a token is needed" })));
        };
        Ok(Asked {
            shared: state.0.clone(),
            bound: state.1,
            auth,
            caller,
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        })
    }
}

/// Where a call for one sandbox is answered.
pub(super) enum Route {
    /// Here: this node holds it.
    Here(Arc<Live>, String),
    /// Already: sent on to the node that holds it, or refused.
    Answered(Response),
}

impl Asked {
    /// The registry holding sandbox `id`, or the answer of the worker that holds it (the
    /// request sent on as it came, with `body`, given `wait` there; ended at once when that
    /// worker's connection goes during the call), or what its task's record says
    /// (`sandbox_place`).
    pub(super) async fn route(&self, id: &str, body: Option<&[u8]>, wait: Duration) -> Route {
        self.route_sending(id, || body.map(|b| Body::from(b.to_vec())), wait)
            .await
    }

    /// [`Asked::route`] for an upload sent on as it comes: the registry and the body, not yet
    /// read, when the sandbox is here; else the answer given.
    pub(super) async fn route_streaming(
        &self,
        id: &str,
        body: Body,
        wait: Duration,
    ) -> Result<(Arc<Live>, Body), Response> {
        let mut kept = Some(body);
        match self.route_sending(id, || kept.take(), wait).await {
            Route::Here(live, _) => Ok((live, kept.take().unwrap_or_else(Body::empty))),
            Route::Answered(r) => Err(r),
        }
    }

    /// Whether `node` is this node's id.
    pub(super) fn is_this_node(&self, node: &str) -> bool {
        self.shared.lock().node_id == node
    }

    /// The request's path, as it came (not decoded).
    pub(super) fn path(&self) -> &str {
        self.uri.path()
    }

    /// The request's query string, if it had one.
    pub(super) fn query(&self) -> Option<&str> {
        self.uri.query()
    }

    /// The call relayed to node `node` as `path` (with its query), `body` sent as it comes,
    /// through an API tunnel of the cluster transport (`relay.rs`); its answer relayed as it
    /// comes, within `wait` (beside [`FORWARD_MARGIN`]).
    pub(super) async fn relay_to(
        &self,
        node: &str,
        path: &str,
        body: Body,
        wait: Duration,
    ) -> Response {
        let bound = self.bound.to_string();
        let Some(mut to) = sandbox_place::member(&self.shared, &bound, node) else {
            return Refused(
                503,
                format!("node {node} is not connected to this node now (down, or cut off)"),
            )
            .into_response();
        };
        // Through the tunnel whatever it advertised: a relay is for the node the caller
        // cannot reach, and a failure then never reads as a sandbox lost (`unanswered`).
        to.http = None;
        let method = self.method.as_str();
        forward(self, &to, method, path, Some(body), wait, "node").await
    }

    /// Finds sandbox `id`, and sends the call on with `body()` when another node holds it.
    async fn route_sending(
        &self,
        id: &str,
        body: impl FnOnce() -> Option<Body>,
        wait: Duration,
    ) -> Route {
        let bound = self.bound.to_string();
        match sandbox_place::find(&self.shared, &bound, &self.auth, &self.caller, id).await {
            Found::Here(live, node) => Route::Here(live, node),
            Found::At(to) => {
                let path = path_of(&self.uri);
                let method = self.method.as_str();
                let who = "the sandbox's worker";
                let sent = forward(self, &to, method, path, body(), wait, who);
                let answer = tokio::select! {
                    answer = sent => answer,
                    () = vanished(&self.shared, &to.node_id) => Refused(
                        503,
                        format!(
                            "the sandbox's worker {} went away during the call (its connection \
                             closed: down, or cut off); if it is down the sandbox is declared \
                             lost within a failure detection interval",
                            to.node_id
                        ),
                    )
                    .into_response(),
                };
                Route::Answered(answer)
            }
            Found::Told(code, body) => Route::Answered(answer(code, body)),
            Found::Sent(response) => Route::Answered(response),
        }
    }
}

/// Runs one of the node's own commands (a listing, a kill, `rm`) in sandbox `id` for the
/// caller: its output whole, nothing streamed, within [`CALL_WAIT`].
pub(super) async fn run_helper(
    live: &Live,
    asked: &Asked,
    id: &str,
    request: ExecRequest,
) -> Result<ExecOutput, LiveError> {
    let (sink, _) = mpsc::channel(1);
    let request = request.timeout(CALL_WAIT);
    live.exec(&live_caller(&asked.caller), id, request, sink)
        .await
}

pub(super) fn live_caller(caller: &Caller) -> live::Caller {
    live::Caller {
        owner: caller.id.clone(),
        any: caller.role >= Role::Operate,
    }
}

/// How long a forwarded call other than an exec may take at its node.
pub(super) const CALL_WAIT: Duration = Duration::from_secs(30);

/// The request's path and query, to send on as they came.
fn path_of(uri: &Uri) -> &str {
    uri.path_and_query().map_or(uri.path(), |p| p.as_str())
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Refused> {
    serde_json::from_slice(body)
        .map_err(|e| Refused(400, format!("the body is not what this route takes: {e}")))
}

fn info_json(info: &LiveInfo, worker: &str) -> Value {
    json!({
        "id": info.id,
        "worker": worker,
        "sandbox": info.sandbox,
        "idle_left_ms": info.idle_left.as_millis() as u64,
        "lifetime_left_ms": info.lifetime_left.as_millis() as u64,
    })
}

/// A refusal or failure as the HTTP answer a client acts on.
pub(super) fn error_answer(e: &LiveError) -> Response {
    match e {
        LiveError::NotFound => answer(404, json!({ "error": "no such sandbox" })),
        LiveError::Gone { why, ago } => {
            let kind = why.kind();
            answer(
                410,
                json!({
                    "error": format!("the sandbox is gone: {why}"),
                    "gone": { "reason": kind, "detail": why.to_string(),
                              "ago_ms": ago.as_millis() as u64 },
                }),
            )
        }
        LiveError::Refused { reason, detail } => {
            let code = if matches!(*reason, "per_owner" | "worker_full") {
                429
            } else {
                400
            };
            answer(code, json!({ "error": detail, "reason": reason }))
        }
        LiveError::Sandbox(s) => {
            let code = match s.category {
                ErrorCategory::PolicyViolation | ErrorCategory::Exec => 400,
                ErrorCategory::Io => 422,
                ErrorCategory::Timeout => 504,
                ErrorCategory::Unsupported => 409,
                _ => 502,
            };
            answer(
                code,
                json!({ "error": s.to_string(), "category": s.category }),
            )
        }
    }
}

/// `POST /sandboxes`: a live task submitted here, placed by the admin, made at its worker
/// (`sandbox_place`); answered once it is made, or 202 while it waits for a worker.
#[utoipa::path(
    post,
    path = "/sandboxes",
    tag = "sandboxes",
    summary = "Make a live sandbox",
    description = "A sandbox kept across calls, the caller's token's own. It is a live task: \
        submitted at this node, placed by the admin on a worker with a free task slot (it holds \
        the slot while it lives), and made there. The answer comes once it is made (within \
        `wait_ms`, default 30 s) and names its worker; a sandbox still waiting for a worker \
        then is answered 202 with why. Limits above this node's ceilings are refused. A \
        retried create with the same `key` answers the same sandbox (200). One lost before it \
        was made (its worker went down, or the admin that placed it lost its lease first) is \
        made again, as a new sandbox, up to 3 tries within `wait_ms`.",
    request_body = CreateBody,
    responses(
        (status = 201, description = "Made", body = crate::api::openapi::SandboxInfo),
        (status = 200, description = "The key names a sandbox made before", body = crate::api::openapi::SandboxInfo),
        (status = 202, description = "Submitted, still waiting for a worker: `{id, state: \"waiting\", why}`", body = crate::api::openapi::SandboxWaiting),
        (status = 400, description = "Not a body this route takes, or above a ceiling", body = crate::api::openapi::SandboxRefusal),
        (status = 410, description = "It ended before it was made (why)", body = crate::api::openapi::SandboxGone),
        (status = 502, description = "The sandbox could not be made", body = crate::api::openapi::SandboxRefusal),
        (status = 503, description = "The node is not running, or the sandbox's worker cannot be reached from here", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn create(
    State((shared, bound)): ApiState,
    Extension(caller): Extension<Caller>,
    Extension(auth): Extension<Arc<Auth>>,
    body: Bytes,
) -> Response {
    let req: CreateBody = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let (spec, wait) = match live_task(&shared, &req) {
        Ok(made) => made,
        Err(r) => return r.into_response(),
    };
    if let Some(why) = no_worker(&shared) {
        return Refused(503, why).into_response();
    }
    let until = tokio::time::Instant::now() + wait;
    let mut tries = 1;
    loop {
        let key = try_key(req.key.as_deref(), tries);
        let (code, submitted) =
            super::tasks::submit(&shared, spec.clone(), key, Some(caller.id.clone())).await;
        if code != 200 && code != 201 {
            return answer(code, submitted);
        }
        let Some(id) = submitted["task"].as_str().map(str::to_string) else {
            return Refused(500, "the core answered no task id".into()).into_response();
        };
        let made = if code == 201 { 201 } else { 200 };
        let lost = match made_at(&shared, &bound, &auth, &caller, &id, until).await {
            Ok(info) => return answer(made, info),
            Err(Placement::Answer(response)) => return response,
            Err(Placement::Lost(body)) => body,
        };
        // Lost before it was made: made again, unless the key names a sandbox an earlier call
        // saw made and this call has no later try to follow.
        let next = try_key(req.key.as_deref(), tries + 1);
        if tries == CREATE_TRIES
            || (made == 200 && !next.as_deref().is_some_and(|k| key_used(&shared, k)))
        {
            return answer(410, lost);
        }
        tracing::info!(sandbox = %id, "a sandbox was lost before it was made; making it again");
        tries += 1;
    }
}

/// The sandbox of live task `id`, once its worker has made it (its `GET /sandboxes/{id}`
/// body), waited for until `until`: at this node, or at its worker through the cluster. A
/// record that ends `lost` meanwhile ends the wait (a worker that never answers, or refused
/// the placement, makes nothing).
async fn made_at(
    shared: &SharedState,
    bound: &SocketAddr,
    auth: &Auth,
    caller: &Caller,
    id: &str,
    until: tokio::time::Instant,
) -> Result<Value, Placement> {
    let worker = placement(shared, id, caller, until).await?;
    let (live, node) = {
        let s = shared.lock();
        (s.live.clone(), s.node_id.clone())
    };
    let made = async {
        if worker == node {
            let Some(live) = live else {
                let why = "placed on this node, which keeps no live sandboxes";
                return Err(Placement::Answer(Refused(503, why.into()).into_response()));
            };
            return match live.wait_for(&live_caller(caller), id, until).await {
                Ok(info) => Ok(info_json(&info, &node)),
                Err(e) => Err(Placement::Answer(error_answer(&e))),
            };
        }
        let Some(to) = sandbox_place::member(shared, &bound.to_string(), &worker) else {
            let why = format!(
                "sandbox {id} is placed on {worker}, which is not connected to this node now: \
                 ask again (with the same key) or at another node"
            );
            return Err(Placement::Answer(Refused(503, why).into_response()));
        };
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let path = format!("/sandboxes/{id}?wait_ms={}", left.as_millis());
        match send_to(shared, auth, caller, &to, "GET", &path, None, left).await {
            Ok(a) if a.code == 200 => Ok(serde_json::from_slice(&a.body).unwrap_or_default()),
            Ok(a) if a.code == 410 => {
                let body: Value = serde_json::from_slice(&a.body).unwrap_or_default();
                if body["gone"]["reason"] == "lost" {
                    return Err(Placement::Lost(body));
                }
                Err(Placement::Answer(relay(a)))
            }
            Ok(a) => Err(Placement::Answer(relay(a))),
            Err(response) => Err(Placement::Answer(response)),
        }
    };
    tokio::select! {
        made = made => made,
        body = lost_record(shared, id, caller, until) => Err(Placement::Lost(body)),
    }
}

/// The 410 body of live task `id` once its record ends `lost` before `until`; pending for ever
/// otherwise (an end of another kind the worker answers, and the wait beside this one ends
/// by `until`).
async fn lost_record(
    shared: &SharedState,
    id: &str,
    caller: &Caller,
    until: tokio::time::Instant,
) -> Value {
    let ended = watch_record(shared, id, caller, until, |code, view| {
        match (code, sandbox_place::record_of(&view, caller)) {
            (200, sandbox_place::Record::Ended(mut body)) => {
                Some((body["gone"]["reason"] == "lost").then(|| {
                    body["id"] = json!(id);
                    body
                }))
            }
            _ => None,
        }
    })
    .await;
    match ended {
        Some(Some(lost)) => lost,
        _ => std::future::pending().await,
    }
}

/// Watches live task `id`'s record at this node, step by step of the core, until `decide`
/// (given the task view's status and body) says what it is, or `until` passes (`None`).
async fn watch_record<T>(
    shared: &SharedState,
    id: &str,
    caller: &Caller,
    until: tokio::time::Instant,
    mut decide: impl FnMut(u16, Value) -> Option<T>,
) -> Option<T> {
    let stepped = shared.lock().stepped.clone();
    loop {
        let next = stepped.notified();
        tokio::pin!(next);
        next.as_mut().enable();
        let (code, view) = super::tasks::get(&shared.lock(), id, Some(&caller.id));
        if let Some(seen) = decide(code, view) {
            return Some(seen);
        }
        if tokio::time::timeout_at(until, next).await.is_err() {
            return None;
        }
    }
}

/// The live task spec of a create, and how long the create waits for its sandbox; or why it
/// is refused (its bounds are the registry's defaults, which every worker keeps, and this
/// node's ceilings).
fn live_task(
    shared: &SharedState,
    req: &CreateBody,
) -> Result<(chorus_core::TaskSpec, Duration), Refused> {
    if req
        .key
        .as_ref()
        .is_some_and(|k| k.is_empty() || k.len() > 128)
    {
        return Err(Refused(400, "key: 1 to 128 bytes".into()));
    }
    check_env(&req.env)?;
    let limits = live::LiveLimits::default();
    let lifetime = req
        .lifetime_ms
        .unwrap_or(limits.max_lifetime.as_millis() as u64);
    if lifetime == 0 || lifetime > limits.max_lifetime.as_millis() as u64 {
        return Err(Refused(
            400,
            format!("lifetime_ms: 1 to {}", limits.max_lifetime.as_millis()),
        ));
    }
    let idle = req.idle_timeout_ms.unwrap_or(0);
    if req.idle_timeout_ms == Some(0) || idle > (limits.max_idle.as_millis() as u64).min(lifetime) {
        return Err(Refused(
            400,
            format!(
                "idle_timeout_ms: 1 to {} and at most lifetime_ms",
                limits.max_idle.as_millis()
            ),
        ));
    }
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(CREATE_WAIT.as_millis() as u64));
    if wait > MAX_CREATE_WAIT {
        return Err(Refused(
            400,
            format!("wait_ms: at most {}", MAX_CREATE_WAIT.as_millis()),
        ));
    }
    let spec = live_spec(req, lifetime, idle);
    if let Err(why) = spec.check() {
        return Err(Refused(400, why.to_string()));
    }
    // The worker's ceilings, as for a task (a live sandbox's command timeouts are its own).
    let ceilings = shared.lock().ceilings;
    let asked = chorus_core::TaskSpec {
        timeout_ms: 1,
        ..spec.clone()
    };
    if let Err(why) = ceilings.check(&asked) {
        return Err(Refused(
            400,
            why.replace("the task asks", "the sandbox asks"),
        ));
    }
    Ok((spec, wait))
}

/// The live task a create asks for: a sandbox of its image, limits, network and capabilities,
/// for `lifetime_ms`, idling out after `idle_ms`.
fn live_spec(req: &CreateBody, lifetime_ms: u64, idle_ms: u64) -> chorus_core::TaskSpec {
    chorus_core::TaskSpec {
        image: req
            .image
            .clone()
            .unwrap_or_else(|| SANDBOX_IMAGE.to_string()),
        env: req.env.clone(),
        memory_mb: req.memory_mb,
        cpu_millis: req.cpu_millis,
        pids: req.pids,
        network: req.network,
        requires: req.requires.clone(),
        repo: req.repo.clone(),
        timeout_ms: lifetime_ms,
        idle_ms,
        live: true,
        ..chorus_core::TaskSpec::default()
    }
}

/// Why no sandbox can be made now, where neither this node nor any connected one runs them
/// (no task slots): nothing is submitted then, rather than a task queued for nothing.
fn no_worker(shared: &SharedState) -> Option<String> {
    let s = shared.lock();
    if s.live.is_some() {
        return None;
    }
    let core = s.core.as_ref()?;
    let any = core
        .peers()
        .iter()
        .any(|(_, p)| p.resources().task_slots > 0);
    (!any).then(|| {
        "neither this node nor any node connected to it runs sandboxes: start a worker with \
         --docker and task slots (`[tasks] slots`)"
            .to_string()
    })
}

/// How long a create waits for its sandbox when it names no `wait_ms`.
const CREATE_WAIT: Duration = Duration::from_secs(30);

/// The longest `wait_ms` a create may name.
const MAX_CREATE_WAIT: Duration = Duration::from_secs(120);

/// The worker sandbox `id` (a task this node holds) is placed on, waited for until `until`
/// step by step of the core; or the answer: 202 while it still waits for a worker then, 410
/// when it ended first.
async fn placement(
    shared: &SharedState,
    id: &str,
    caller: &Caller,
    until: tokio::time::Instant,
) -> Result<String, Placement> {
    let mut why = String::new();
    let seen = watch_record(shared, id, caller, until, |code, view| {
        if code != 200 {
            return Some(Err(Placement::Answer(answer(code, view))));
        }
        match sandbox_place::record_of(&view, caller) {
            sandbox_place::Record::Placed(worker) => Some(Ok(worker)),
            sandbox_place::Record::Ended(mut body) => {
                body["id"] = json!(id);
                Some(Err(if body["gone"]["reason"] == "lost" {
                    Placement::Lost(body)
                } else {
                    Placement::Answer(answer(410, body))
                }))
            }
            sandbox_place::Record::Unknown => {
                let refused = Refused(500, format!("task {id} is not a live sandbox"));
                Some(Err(Placement::Answer(refused.into_response())))
            }
            sandbox_place::Record::Waiting(now) => {
                why = now;
                None
            }
        }
    })
    .await;
    match seen {
        Some(seen) => seen,
        None => {
            let waiting = json!({ "id": id, "state": "waiting", "why": why });
            Err(Placement::Answer(answer(202, waiting)))
        }
    }
}

/// Why a create has no worker to go to.
enum Placement {
    /// Its task ended `lost` before a worker held it for the admin (the 410 body): a worker
    /// that went down, or a placement of an admin that lost its lease on the way, which the
    /// next admin cannot find on any worker (core `task::place` rule 14).
    Lost(Value),
    /// Anything else, answered as it is.
    Answer(Response),
}

/// Tries a create makes in all: a sandbox lost before it was made is made again (a new live
/// task), within the create's wait. The admin never places a lost one again (it may still run
/// on a worker cut off from it, which stops it when it hears), so only a new one gets the
/// caller a sandbox; the caller had none of the lost one yet.
const CREATE_TRIES: u32 = 3;

/// The idempotency key of a create's `tries`-th try: the caller's for the first, then derived
/// from it (`KEY#2`, `KEY#3`), so a create retried with the caller's key follows to the same
/// sandbox its earlier call made again. Within the core's bound: the caller's is at most 128
/// bytes.
fn try_key(key: Option<&str>, tries: u32) -> Option<String> {
    let key = key?;
    Some(if tries <= 1 {
        key.to_string()
    } else {
        format!("{key}#{tries}")
    })
}

/// Whether `key` names a task submitted at this node.
fn key_used(shared: &SharedState, key: &str) -> bool {
    let s = shared.lock();
    s.core.as_ref().is_some_and(|c| {
        c.owned_tasks()
            .values()
            .any(|t| t.key.as_deref() == Some(key))
    })
}

/// The spec and policy of a create that asks for nothing but defaults (the sandbox image,
/// default limits), which the node keeps warm sandboxes of: what `live_placements` makes for
/// such a placement.
pub(crate) fn default_shape(node: &str) -> (SandboxSpec, SandboxPolicy) {
    let shape = TaskShape::default_of(SANDBOX_IMAGE);
    let spec = live_sandbox_spec(node, "live-warm", &shape.image);
    (spec, shape.policy(&live_base_policy()))
}

/// `GET /sandboxes`: the caller's sandboxes this node holds, and those made through this node
/// that another worker holds or that wait for one; with `?cluster=true`, every connected
/// node's such list too, merged.
#[utoipa::path(
    get,
    path = "/sandboxes",
    tag = "sandboxes",
    summary = "The caller's sandboxes",
    description = "The caller's live sandboxes that this node holds (`state: live`, with the \
        time each has left; every one, for an `operate` token), then those made through this \
        node that another worker holds (`placed`, naming it) or that still wait for one \
        (`waiting`). With `cluster=true`, every node connected to this one is asked for its \
        own list too (with a token delegated to it alone), and one entry is kept per sandbox, \
        its worker's when it answered; the nodes that did not answer are in `unreached`.",
    params(("cluster" = Option<bool>, Query, description = "Ask every connected node too")),
    responses((status = 200, description = "The sandboxes", body = crate::api::openapi::SandboxList))
)]
pub(super) async fn list(
    State((shared, bound)): ApiState,
    Extension(caller): Extension<Caller>,
    Extension(auth): Extension<Arc<Auth>>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let here = match listed_here(&shared, &caller) {
        Ok(h) => h,
        Err(r) => return r.into_response(),
    };
    if query.get("cluster").map(String::as_str) != Some("true") {
        return answer(200, json!({ "sandboxes": here }));
    }
    let others: Vec<Member> = {
        let s = shared.lock();
        let me = s.node_id.clone();
        s.cluster(&bound.to_string())
            .map(|v| v.members)
            .unwrap_or_default()
            .into_iter()
            // Each asked at its API or through a tunnel (`sandbox_forward::reach`).
            .filter(|m| m.node_id != me && m.connected)
            .collect()
    };
    let asked = futures_util::future::join_all(others.iter().map(|m| {
        send_to(
            &shared,
            &auth,
            &caller,
            m,
            "GET",
            "/sandboxes",
            None,
            LIST_WAIT,
        )
    }))
    .await;
    let mut lists = vec![here];
    let mut unreached = Vec::new();
    for (m, a) in others.iter().zip(asked) {
        match a {
            Ok(a) if a.code == 200 => {
                let v: Value = serde_json::from_slice(&a.body).unwrap_or_default();
                lists.push(v["sandboxes"].as_array().cloned().unwrap_or_default());
            }
            Ok(a) => unreached
                .push(json!({ "node": m.node_id, "error": format!("answered {}", a.code) })),
            Err(r) => unreached
                .push(json!({ "node": m.node_id, "error": format!("answered {}", r.status()) })),
        }
    }
    answer(
        200,
        json!({ "sandboxes": merge_lists(lists), "unreached": unreached }),
    )
}

/// How long `GET /sandboxes?cluster=true` waits for each node's list.
const LIST_WAIT: Duration = Duration::from_secs(5);

/// One entry per sandbox, by id: the one its worker gave (`live`, with its times) over what a
/// node of record knows (`placed`, `waiting`).
fn merge_lists(lists: Vec<Vec<Value>>) -> Vec<Value> {
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    for entry in lists.into_iter().flatten() {
        let Some(id) = entry["id"].as_str().map(str::to_string) else {
            continue;
        };
        let held = entry["state"] == "live";
        match by_id.get(&id) {
            Some(kept) if kept["state"] == "live" || !held => {}
            _ => {
                by_id.insert(id, entry);
            }
        }
    }
    by_id.into_values().collect()
}

/// This node's part of `GET /sandboxes` for `caller`.
fn listed_here(shared: &SharedState, caller: &Caller) -> Result<Vec<Value>, Refused> {
    let (live, node) = {
        let s = shared.lock();
        (s.live.clone(), s.node_id.clone())
    };
    let mut all: Vec<Value> = live
        .as_ref()
        .map(|l| {
            l.list(&live_caller(caller))
                .iter()
                .map(|i| {
                    let mut v = info_json(i, &node);
                    v["state"] = json!("live");
                    v
                })
                .collect()
        })
        .unwrap_or_default();
    let elsewhere: Vec<Value> = {
        let s = shared.lock();
        let Some(core) = s.core.as_ref() else {
            return Err(Refused(503, "starting".into()));
        };
        core.owned_tasks()
            .iter()
            .filter(|(_, t)| t.spec.live && t.result.is_none())
            .filter(|(_, t)| {
                caller.role >= Role::Operate || t.owner.as_deref() == Some(caller.id.as_str())
            })
            .filter(|(id, _)| !live.as_ref().is_some_and(|l| l.knows(&id.to_string())))
            .map(|(id, t)| match &t.phase {
                chorus_core::TaskPhase::Placed { worker, .. } => {
                    json!({ "id": id.to_string(), "worker": worker.to_string(), "state": "placed" })
                }
                _ => json!({ "id": id.to_string(), "state": "waiting" }),
            })
            .collect()
    };
    all.extend(elsewhere);
    Ok(all)
}

/// `GET /sandboxes/{id}`.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}",
    tag = "sandboxes",
    summary = "A sandbox",
    description = "The sandbox, with the time it has left. Any node answers: a call for a \
        sandbox another worker holds is forwarded to it. With `wait_ms`, a sandbox placed on \
        this node and still being made is waited for that long.",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("wait_ms" = Option<u64>, Query, description = "Wait this long (at most 120000) for a sandbox being made"),
    ),
    responses(
        (status = 200, description = "The sandbox", body = crate::api::openapi::SandboxInfo),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 409, description = "Not made yet: waiting for a worker (why)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's worker (or its node of record) is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn get(
    asked: Asked,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let wait = match query.get("wait_ms").map(|w| w.parse::<u64>()) {
        None => Duration::ZERO,
        Some(Ok(ms)) if ms <= MAX_CREATE_WAIT.as_millis() as u64 => Duration::from_millis(ms),
        Some(_) => return bad(format!("wait_ms: 0 to {}", MAX_CREATE_WAIT.as_millis())),
    };
    let (live, node) = match asked.route(&id, None, CALL_WAIT + wait).await {
        Route::Here(live, node) => (live, node),
        Route::Answered(r) => return r,
    };
    let until = tokio::time::Instant::now() + wait;
    match live.wait_for(&live_caller(&asked.caller), &id, until).await {
        Ok(info) => answer(200, info_json(&info, &node)),
        Err(e) => error_answer(&e),
    }
}

/// `DELETE /sandboxes/{id}`.
#[utoipa::path(
    delete,
    path = "/sandboxes/{id}",
    tag = "sandboxes",
    summary = "Close a sandbox",
    description = "Ends the sandbox and everything running in it (an `operate` token closes \
        any), at its worker. When its worker cannot be reached from here and this node is its \
        node of record, its live task is cancelled instead: the cluster ends it (202).",
    params(("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)")),
    responses(
        (status = 200, description = "Closed", body = crate::api::openapi::SandboxClosed),
        (status = 202, description = "Its worker is out of reach: its task is cancelled, and the cluster ends it", body = crate::api::openapi::SandboxClosed),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's worker is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn close(asked: Asked, Path(id): Path<String>) -> Response {
    let live = match asked.route(&id, None, SYNC_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
            return cancel_instead(&asked, &id).await.unwrap_or(r)
        }
        Route::Answered(r) => return r,
    };
    match live.close(&live_caller(&asked.caller), &id).await {
        Ok(None) => answer(200, json!({ "id": id, "closed": true })),
        Ok(Some(Ok(report))) => answer(
            200,
            json!({ "id": id, "closed": true, "sync": sync_json(&report) }),
        ),
        Ok(Some(Err(why))) => answer(200, json!({ "id": id, "closed": true, "sync_error": why })),
        Err(e) => error_answer(&e),
    }
}

/// A close whose worker is out of reach, at the sandbox's node of record: its live task is
/// cancelled (the admin stops the placement; the worker ends it once it hears). `None` where
/// this node is not its node of record, or the caller may not close it.
async fn cancel_instead(asked: &Asked, id: &str) -> Option<Response> {
    let task: chorus_core::TaskId = id.parse().ok()?;
    {
        let s = asked.shared.lock();
        let core = s.core.as_ref()?;
        if task.origin.as_str() != s.node_id {
            return None;
        }
        let t = core.owned_tasks().get(&task)?;
        let mine = t.owner.as_deref() == Some(asked.caller.id.as_str());
        if !t.spec.live || !(mine || asked.caller.role >= Role::Operate) {
            return None;
        }
    }
    let (code, body) = super::tasks::cancel(&asked.shared, task).await;
    Some(if code == 202 {
        answer(
            202,
            json!({ "id": id, "closed": true, "note": "its worker is out of reach from here: its task is cancelled, and the cluster ends it" }),
        )
    } else {
        answer(code, body)
    })
}

/// What a sync back did, as JSON.
fn sync_json(r: &chorus_io::sandbox::repo::SyncReport) -> Value {
    json!({
        "written": r.written,
        "deleted": r.deleted,
        "refused": r.refused,
        "kept": r.kept,
        "incomplete": r.incomplete,
        "complete": r.summary().is_none(),
    })
}

/// `POST /sandboxes/{id}/sync`.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/sync",
    tag = "sandboxes",
    summary = "Carry a read-write repository back",
    description = "Applies the sandbox's working tree to its read-write repository on its \
        worker now (as its close does): changed and new files written, files gone from the \
        sandbox deleted, nothing under a `.git` carried, no symlink followed. Later syncs \
        start from what this one left. 409 for a sandbox without a read-write repository.",
    params(("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)")),
    responses(
        (status = 200, description = "Synced: what was carried and what was not", body = crate::api::openapi::SandboxSynced),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 409, description = "It has no read-write repository", body = crate::api::openapi::SandboxRefusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn sync(asked: Asked, Path(id): Path<String>, body: Bytes) -> Response {
    let live = match asked.route(&id, Some(&body), SYNC_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    match live.sync(&live_caller(&asked.caller), &id).await {
        Ok(report) => {
            let mut body = sync_json(&report);
            body["id"] = json!(id);
            answer(200, body)
        }
        Err(e) => error_answer(&e),
    }
}

/// The longest a forwarded sync (or a close, which syncs) waits for its worker: a workspace
/// of its size bound (256 MiB by default) read back at a slow 4 MB/s.
const SYNC_WAIT: Duration = Duration::from_secs(120);

/// `POST /sandboxes/{id}/keepalive`.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/keepalive",
    tag = "sandboxes",
    summary = "Keep a sandbox from idling out",
    description = "Its idle clock starts again now (as any call does); its absolute end stays. \
        Answers the sandbox with the time left.",
    params(("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)")),
    responses(
        (status = 200, description = "Kept", body = crate::api::openapi::SandboxInfo),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn keep_alive(asked: Asked, Path(id): Path<String>, body: Bytes) -> Response {
    // Its body (none is needed) goes on with it: the worker's gatekeeper asks for its type.
    let (live, node) = match asked.route(&id, Some(&body), CALL_WAIT).await {
        Route::Here(live, node) => (live, node),
        Route::Answered(r) => return r,
    };
    match live.keep_alive(&live_caller(&asked.caller), &id) {
        Ok(info) => answer(200, info_json(&info, &node)),
        Err(e) => error_answer(&e),
    }
}

/// `POST /sandboxes/{id}/env`.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/env",
    tag = "sandboxes",
    summary = "Set environment variables",
    description = "Kept for every later command in the sandbox.",
    params(("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)")),
    request_body = EnvBody,
    responses(
        (status = 200, description = "Set", body = crate::api::openapi::EnvSet),
        (status = 400, description = "Not a body this route takes, or not a variable name", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn set_env(asked: Asked, Path(id): Path<String>, body: Bytes) -> Response {
    let live = match asked.route(&id, Some(&body), CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    let req: EnvBody = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = check_env(&req.env) {
        return r.into_response();
    }
    let who = live_caller(&asked.caller);
    for (k, v) in &req.env {
        if let Err(e) = live.set_env(&who, &id, k, v) {
            return error_answer(&e);
        }
    }
    answer(
        200,
        json!({ "id": id, "set": req.env.keys().collect::<Vec<_>>() }),
    )
}

/// `POST /sandboxes/{id}/exec`.
#[utoipa::path(
    post,
    path = "/sandboxes/{id}/exec",
    tag = "sandboxes",
    summary = "Run a command",
    description = "Runs `argv` (or `shell`, a script for `sh -c`) in the sandbox, in `cwd`, \
        with the sandbox's environment and `env`. Answers how it ended once it did; with \
        `stream: true`, NDJSON lines as output comes (one `ExecLine` a line: `stdout`/`stderr` \
        chunks, then `exit` or `error`); with `background: true`, its pid at once, its output \
        going to a log file in the sandbox. A timeout or an OOM kill is an ending like an exit \
        (200, `timed_out` or `oom`). A call forwarded to another node reaches the caller whole \
        at its end, streamed or not.",
    params(("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)")),
    request_body = ExecBody,
    responses(
        (status = 200, description = "How it ended; its pid (`background`); or the stream of lines (`stream`)", content(
            (crate::api::openapi::ExecAnswer = "application/json"),
            (crate::api::openapi::ExecLine = "application/x-ndjson"),
        )),
        (status = 400, description = "Not a body this route takes (a bad argv, path, variable name or timeout)", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "A background command that did not start", body = crate::api::openapi::BackgroundFailed),
        (status = 504, description = "The sandbox did not answer in time", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn exec(asked: Asked, Path(id): Path<String>, body: Bytes) -> Response {
    let live = match asked.route(&id, Some(&body), MAX_EXEC_TIMEOUT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    let req: ExecBody = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let mut argv = match (req.argv, req.shell) {
        (Some(argv), None) if !argv.is_empty() => argv,
        (None, Some(script)) => vec!["sh".into(), "-c".into(), script],
        _ => return bad("give one of argv (a non-empty list) and shell (a script)"),
    };
    if req.background {
        if req.stream {
            return bad("a background command's output goes to its log: no stream");
        }
        let wrapper = ["sh", "-c", BACKGROUND_SCRIPT, "chorus-bg"].map(String::from);
        argv.splice(0..0, wrapper);
    }
    if let Err(r) = check_env(&req.env) {
        return r.into_response();
    }
    let timeout = req
        .timeout_ms
        .map_or(DEFAULT_EXEC_TIMEOUT, Duration::from_millis);
    if timeout.is_zero() || timeout > MAX_EXEC_TIMEOUT {
        return bad(format!("timeout_ms: 1 to {}", MAX_EXEC_TIMEOUT.as_millis()));
    }
    let mut request = ExecRequest {
        argv,
        env: req.env,
        stdin: req.stdin.map(String::into_bytes),
        timeout: Some(timeout),
        ..ExecRequest::default()
    };
    if let Some(cwd) = req.cwd {
        match sandbox_path(&cwd) {
            Ok(p) => request.working_dir = Some(p),
            Err(r) => return r.into_response(),
        }
    }
    let who = live_caller(&asked.caller);
    if req.background {
        let (sink, _) = mpsc::channel(1);
        return match live.exec(&who, &id, request, sink).await {
            Ok(out) => match String::from_utf8_lossy(&out.stdout).trim().parse::<u32>() {
                Ok(pid) if out.exit_code == 0 => answer(
                    200,
                    json!({ "pid": pid, "log": format!("/tmp/.chorus-bg/{pid}.log") }),
                ),
                _ => answer(
                    422,
                    json!({ "error": "the command did not start in the background",
                            "exit_code": out.exit_code,
                            "stderr": String::from_utf8_lossy(&out.stderr) }),
                ),
            },
            Err(e) => error_answer(&e),
        };
    }
    if !req.stream {
        let (sink, _) = mpsc::channel(1);
        let out = live.exec(&who, &id, request, sink).await;
        return match exit_json(out) {
            Ok(v) => answer(200, v),
            Err(e) => error_answer(&e),
        };
    }
    // Streaming: output lines as they come, then the exit; an error before any output is an
    // ordinary error answer, one after it the last line.
    let (chunks_tx, mut chunks_rx) = mpsc::channel(STREAM_BUFFER);
    let (lines_tx, lines_rx) = mpsc::channel::<Bytes>(STREAM_BUFFER);
    tokio::spawn(async move {
        let running = live.exec(&who, &id, request, chunks_tx);
        tokio::pin!(running);
        let out = loop {
            tokio::select! {
                out = &mut running => break out,
                Some(chunk) = chunks_rx.recv() => {
                    let line = json!({ chunk.stream.name(): String::from_utf8_lossy(&chunk.data) });
                    // A client that left does not stop the command (it runs to its end or
                    // timeout, as a detached one would).
                    let _ = lines_tx.send(ndjson(&line)).await;
                }
            }
        };
        while let Ok(chunk) = chunks_rx.try_recv() {
            let line = json!({ chunk.stream.name(): String::from_utf8_lossy(&chunk.data) });
            let _ = lines_tx.send(ndjson(&line)).await;
        }
        let last = match exit_json(out) {
            Ok(mut v) => {
                // The output went as it came: the end carries the exit only.
                if let Some(o) = v.as_object_mut() {
                    o.remove("stdout");
                    o.remove("stderr");
                }
                json!({ "exit": v })
            }
            Err(e) => {
                let resp = error_answer(&e);
                json!({ "error": e.to_string(), "status": resp.status().as_u16() })
            }
        };
        let _ = lines_tx.send(ndjson(&last)).await;
    });
    let stream = futures_util::stream::unfold(lines_rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// `GET /sandboxes/{id}/processes`.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/processes",
    tag = "sandboxes",
    summary = "What runs in a sandbox",
    params(("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)")),
    responses(
        (status = 200, description = "Its processes", body = crate::api::openapi::ProcessList),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn processes(asked: Asked, Path(id): Path<String>) -> Response {
    let live = match asked.route(&id, None, CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    match run_helper(&live, &asked, &id, ExecRequest::shell(PROCESSES_SCRIPT)).await {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let list: Vec<Value> = text
                .lines()
                .filter_map(|line| {
                    let mut f = line.split_whitespace();
                    let pid: u32 = f.next()?.parse().ok()?;
                    let pgid: u32 = f.next()?.parse().ok()?;
                    let seconds: u64 = f.next()?.parse().ok()?;
                    let command = f.collect::<Vec<_>>().join(" ");
                    // The sandbox's own: its supervisor (1) and this listing.
                    (pid != 1 && !command.starts_with("ps -eo ") && !command.contains(PROCESSES_SCRIPT))
                        .then(|| json!({ "pid": pid, "pgid": pgid, "seconds": seconds, "command": command }))
                })
                .collect();
            answer(200, json!({ "processes": list }))
        }
        Err(e) => error_answer(&e),
    }
}

/// `DELETE /sandboxes/{id}/processes/{pid}`: SIGKILL to its process group (a background
/// command is its group's leader), or to it alone when it leads none.
#[utoipa::path(
    delete,
    path = "/sandboxes/{id}/processes/{pid}",
    tag = "sandboxes",
    summary = "Kill a process",
    description = "SIGKILL to the process's group (a background command leads its own), or to \
        it alone when it leads none.",
    params(
        ("id" = String, Path, description = "The sandbox's id (its live task's, `ORIGIN-SEQ`)"),
        ("pid" = u32, Path, description = "The process id (above 1)"),
    ),
    responses(
        (status = 200, description = "Killed", body = crate::api::openapi::ProcessKilled),
        (status = 400, description = "Not a process id above 1", body = crate::api::openapi::Refusal),
        (status = 404, description = "No such sandbox, or no such process", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn kill_process(
    asked: Asked,
    Path((id, pid)): Path<(String, String)>,
) -> Response {
    let pid: u32 = match pid.parse() {
        Ok(p) if p > 1 => p,
        _ => return bad("pid: a process id above 1"),
    };
    let live = match asked.route(&id, None, CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    let script = format!("kill -KILL -- -{pid} 2>/dev/null || kill -KILL {pid}");
    match run_helper(&live, &asked, &id, ExecRequest::shell(script)).await {
        Ok(out) if out.exit_code == 0 => answer(200, json!({ "pid": pid, "killed": true })),
        Ok(_) => answer(404, json!({ "error": format!("no process {pid} to kill") })),
        Err(e) => error_answer(&e),
    }
}

fn ndjson(v: &Value) -> Bytes {
    let mut line = serde_json::to_vec(v).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// A finished command as JSON; a timeout or an OOM kill is an ending like an exit.
fn exit_json(out: Result<ExecOutput, LiveError>) -> Result<Value, LiveError> {
    match out {
        Ok(o) => Ok(json!({
            "exit_code": o.exit_code,
            "stdout": String::from_utf8_lossy(&o.stdout),
            "stderr": String::from_utf8_lossy(&o.stderr),
            "stdout_truncated": o.stdout_truncated,
            "stderr_truncated": o.stderr_truncated,
            "duration_ms": o.duration.as_millis() as u64,
        })),
        Err(LiveError::Sandbox(e)) if e.category == ErrorCategory::Timeout => {
            Ok(json!({ "exit_code": null, "signal": 9, "timed_out": true, "error": e.to_string() }))
        }
        Err(LiveError::Sandbox(e)) if e.category == ErrorCategory::ResourceLimit => {
            Ok(json!({ "exit_code": 137, "signal": 9, "oom": true, "error": e.to_string() }))
        }
        Err(e) => Err(e),
    }
}

/// A path inside the sandbox as given: absolute, no NUL, no `..` (resolved in the sandbox,
/// never on the host).
pub(super) fn sandbox_path(path: &str) -> Result<String, Refused> {
    if !path.starts_with('/')
        || path.contains('\0')
        || path.split('/').any(|c| c == "..")
        || path.len() > 4096
    {
        return Err(Refused(
            400,
            "path: an absolute path inside the sandbox, without `..`".into(),
        ));
    }
    Ok(path.to_string())
}

/// Every name of `env` a variable name; the first that is not, refused (quoted and escaped).
fn check_env(env: &BTreeMap<String, String>) -> Result<(), Refused> {
    match env.keys().find(|k| !valid_env_name(k)) {
        Some(name) => Err(Refused(
            400,
            format!("env: {name:?} is not a variable name"),
        )),
        None => Ok(()),
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_io::sandbox::live::GoneWhy;

    /// A create's network and capabilities reach its live task (the worker's shape and the
    /// admin's placement read them there), and nothing else turns network on.
    #[test]
    fn a_create_asks_its_live_task_for_network_and_capabilities() {
        let req: CreateBody =
            parse(br#"{"network": true, "requires": ["gpu"], "memory_mb": 256}"#).unwrap();
        let spec = live_spec(&req, 60_000, 1_000);
        assert!(spec.live && spec.network, "{spec:?}");
        assert_eq!(spec.requires, ["gpu"]);
        assert_eq!(
            (spec.memory_mb, spec.timeout_ms, spec.idle_ms),
            (256, 60_000, 1_000)
        );
        assert!(spec.command.is_empty());
        let plain = live_spec(&parse(b"{}").unwrap(), 60_000, 0);
        assert!(!plain.network && plain.requires.is_empty());
        assert_eq!(plain.image, SANDBOX_IMAGE);
        let shape = TaskShape::of(&spec).policy(&live_base_policy());
        assert!(
            shape.network.enabled,
            "the worker's sandbox gets the network"
        );
        assert!(parse::<CreateBody>(br#"{"network": "yes"}"#).is_err());
    }

    #[test]
    fn paths_and_names_are_checked_before_anything_runs() {
        for ok in ["/workspace/a.txt", "/tmp", "/"] {
            assert!(sandbox_path(ok).is_ok(), "{ok}");
        }
        for refused in ["workspace/a", "/a/../etc", "/a\0b", ""] {
            assert!(sandbox_path(refused).is_err(), "{refused:?}");
        }
        for ok in ["PATH", "_x", "A1"] {
            assert!(valid_env_name(ok), "{ok}");
        }
        for refused in ["", "1A", "A-B", "A=B", "A\nB"] {
            assert!(!valid_env_name(refused), "{refused:?}");
        }
    }

    #[test]
    fn a_create_made_again_tries_under_keys_derived_from_the_callers() {
        assert_eq!(try_key(None, 1), None);
        assert_eq!(try_key(None, 3), None);
        assert_eq!(try_key(Some("k"), 1).as_deref(), Some("k"));
        assert_eq!(try_key(Some("k"), 2).as_deref(), Some("k#2"));
        assert_eq!(try_key(Some("k"), CREATE_TRIES).as_deref(), Some("k#3"));
        // The longest key a caller may give still fits the core's bound once derived.
        let longest = "k".repeat(128);
        let derived = try_key(Some(&longest), CREATE_TRIES).unwrap();
        assert!(
            derived.len() <= chorus_core::task::bounds::NAME,
            "{}",
            derived.len()
        );
    }

    #[test]
    fn a_cluster_list_keeps_one_entry_per_sandbox_its_worker_s_first() {
        let placed = json!({ "id": "a-1", "worker": "w", "state": "placed" });
        let held = json!({ "id": "a-1", "worker": "w", "state": "live", "idle_left_ms": 5 });
        let waiting = json!({ "id": "a-2", "state": "waiting" });
        for lists in [
            vec![vec![placed.clone(), waiting.clone()], vec![held.clone()]],
            vec![vec![held.clone()], vec![placed.clone(), waiting.clone()]],
        ] {
            assert_eq!(merge_lists(lists), vec![held.clone(), waiting.clone()]);
        }
        assert_eq!(
            merge_lists(vec![vec![json!({ "state": "live" })]]),
            Vec::<Value>::new()
        );
    }

    #[test]
    fn a_gone_sandbox_answers_410_with_its_reason() {
        let gone = LiveError::Gone {
            why: GoneWhy::Lost {
                why: "exited".into(),
            },
            ago: Duration::from_millis(1500),
        };
        assert_eq!(error_answer(&gone).status(), StatusCode::GONE);
        assert_eq!(
            error_answer(&LiveError::NotFound).status(),
            StatusCode::NOT_FOUND
        );
        let full = LiveError::Refused {
            reason: "per_owner",
            detail: "8 of 8".into(),
        };
        assert_eq!(error_answer(&full).status(), StatusCode::TOO_MANY_REQUESTS);
    }
}
