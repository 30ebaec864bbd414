//! `/sandboxes`: live sandboxes — kept across many calls — on this node (issue 53, step 2;
//! docs/design.md §4.8). The registry and its rules are `chorus_io::sandbox::live`; this file
//! is the HTTP face of it:
//!
//! | route | what |
//! |---|---|
//! | `POST /sandboxes` | create: `{image?, env?, memory_mb?, cpu_millis?, pids?, idle_timeout_ms?, lifetime_ms?, key?}` → 201 (200 for a known key) |
//! | `GET /sandboxes` | the caller's (an `operate` token: every one) |
//! | `GET /sandboxes/{id}` | one, with the time left |
//! | `DELETE /sandboxes/{id}` | close |
//! | `POST /sandboxes/{id}/exec` | `{argv` or `shell, cwd?, env?, stdin?, timeout_ms?, stream?}` → the exit, or with `stream` NDJSON lines as output comes |
//! | `POST /sandboxes/{id}/exec` with `background: true` | starts it in its own session, output to a log file: `{pid, log}` |
//! | `GET /sandboxes/{id}/processes` | what runs in it: `{processes: [{pid, pgid, seconds, command}]}` |
//! | `DELETE /sandboxes/{id}/processes/{pid}` | kills that process's group |
//! | `POST /sandboxes/{id}/env` | `{env: {K: V}}`, kept for every later command |
//! | `PUT /sandboxes/{id}/files` | `{path, content` or `content_b64, mode?}` |
//! | `GET /sandboxes/{id}/files?path=P` | the file's bytes |
//!
//! Every route needs a `submit` token; a sandbox is its token's, and any other token gets 404
//! (an `operate` token may list and close any). A sandbox that ended answers **410** with why
//! and how long ago.
//!
//! **Any node answers.** A sandbox's id is `NODE.BOOT-RANDOM`: the node that holds it and that
//! node's process (a random tag drawn at its start). A call for another node's sandbox is
//! forwarded to that node's advertised API (pinned by its certificate's fingerprint, at the IP
//! its connection comes from) with a token delegated to that node alone, for the caller's role
//! and id (`api::auth`); a forwarded call is never forwarded again. A create at a node that runs
//! no sandboxes goes to a connected worker (most task slots first, ties by id). What the
//! caller sees when the worker is not there:
//! - the worker's API refuses the connection (its process is down: its sandboxes ended with
//!   it, their supervisor ends when its end of their stdin closes) → **410** `lost`;
//! - an id of this node's earlier process → **410** `lost` (the restart removed it);
//! - the worker is not connected to this node, or does not answer in time → **503**, naming
//!   it: it may be cut off from this node only, and nothing is decided for it here (the
//!   cluster-wide verdict, placed by the admin in the core, is the next step of issue 53).
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
use axum::{Extension, Json};
use base64::Engine;
use chorus_io::sandbox::image::SANDBOX_IMAGE;
use chorus_io::sandbox::live::{self, CreateLive, GoneWhy, LiveError, LiveInfo};
use chorus_io::sandbox::tasks::TaskShape;
use chorus_io::sandbox::{ErrorCategory, ExecOutput, ExecRequest, SandboxPolicy, SandboxSpec};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::auth::{unix_now, Auth, Caller, Role, DELEGATION_TTL_S};
use super::cluster::Member;
use crate::daemon::shared::SharedState;
use crate::http1::{self, Endpoint};

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
    /// Ends after this long without a call, ms (default and ceiling: the node's).
    idle_timeout_ms: Option<u64>,
    /// Ends this long after it was made, ms (default and ceiling: the node's).
    lifetime_ms: Option<u64>,
    /// An idempotency key: a retried create with it answers the same sandbox (200).
    key: Option<String>,
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

/// The body of `POST /sandboxes/{id}/env`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = SetEnv)]
struct EnvBody {
    env: BTreeMap<String, String>,
}

type ApiState = State<(SharedState, SocketAddr)>;

/// A request refused before it reached the registry: the status and the reason.
struct Refused(u16, String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        answer(self.0, json!({ "error": self.1 }))
    }
}

/// This node's registry, or the 503 that says how to get one.
fn registry(shared: &SharedState) -> Result<(Arc<Live>, String), Refused> {
    let s = shared.lock();
    match &s.live {
        Some(live) => Ok((live.clone(), s.node_id.clone())),
        None => Err(Refused(
            503,
            "this node runs no sandboxes: start it with --docker and task slots (`[tasks] \
             slots`), or ask a node that does"
                .into(),
        )),
    }
}

/// This process's tag in the ids it gives (a restarted node knows its old ids for lost).
fn boot() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| random_hex()[..8].to_string())
}

/// The most a forwarded answer may carry: a file of the registry's bound, in base64 and JSON.
const MAX_FORWARDED_BYTES: u64 = 96 << 20;

/// How long a forwarded call may take besides the command's own timeout.
const FORWARD_MARGIN: Duration = Duration::from_secs(30);

/// Where a call for sandbox `id` goes.
enum Located {
    Here(Arc<Live>, String),
    There(Member),
}

/// Finds the node that holds `id`: this one, or a connected peer with an API to ask.
fn locate(shared: &SharedState, bound: SocketAddr, id: &str) -> Result<Located, Refused> {
    let valid = !id.is_empty()
        && id.len() <= 256
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    let Some((node, tag)) = id.rsplit_once('.').filter(|_| valid) else {
        return Err(Refused(404, "no such sandbox".into()));
    };
    let s = shared.lock();
    if node == s.node_id {
        let this_boot = tag.split_once('-').is_some_and(|(b, _)| b == boot());
        // An id of this node's earlier process cannot be told from one never made: both are
        // gone for whoever asks, and the earlier process's sandboxes ended with it.
        return match &s.live {
            Some(live) if this_boot => Ok(Located::Here(live.clone(), s.node_id.clone())),
            Some(_) => Err(Refused(
                410,
                "the sandbox is gone: lost, its node restarted since it was made".into(),
            )),
            None => Err(Refused(404, "no such sandbox".into())),
        };
    }
    let view = s.cluster(&bound.to_string());
    match view.and_then(|v| v.members.into_iter().find(|m| m.node_id == node)) {
        Some(m) if m.connected && m.http.is_some() => Ok(Located::There(m)),
        // The core still counts the peer (failure detection takes a few beats) but the
        // transport holds no address for it: its connection just closed — it died or was cut
        // off — or it never advertised an API. Either way it cannot be asked now.
        Some(m) if m.connected => Err(Refused(
            503,
            format!(
                "the sandbox's node {node} is not connected to this node's API: its connection \
                 just closed (down, or cut off), or it advertised no API this node may ask"
            ),
        )),
        _ => Err(Refused(
            503,
            format!(
                "the sandbox's node {node} is not connected to this node: down, or cut off \
                 from this node"
            ),
        )),
    }
}

/// A connected worker to make a sandbox on, for a node that runs none: the most task slots,
/// ties by id.
fn pick_worker(shared: &SharedState, bound: SocketAddr) -> Option<Member> {
    let s = shared.lock();
    let core = s.core.as_ref()?;
    let slots: BTreeMap<String, u32> = core
        .peers()
        .iter()
        .map(|(id, p)| (id.to_string(), p.resources().task_slots))
        .filter(|(_, n)| *n > 0)
        .collect();
    let view = s.cluster(&bound.to_string())?;
    view.members
        .into_iter()
        .filter(|m| m.connected && m.http.is_some() && slots.contains_key(&m.node_id))
        .max_by(|a, b| {
            slots[&a.node_id]
                .cmp(&slots[&b.node_id])
                .then_with(|| b.node_id.cmp(&a.node_id))
        })
}

/// The caller's request, sent on to the node that holds the sandbox with a token delegated to
/// that node alone; its answer as it came. `wait` bounds it (beside [`FORWARD_MARGIN`]).
async fn forward(
    auth: &Auth,
    caller: &Caller,
    to: &Member,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    wait: Duration,
) -> Response {
    if caller.delegated {
        // A forwarded call stops at the node it was sent to: no chains, no loops.
        return Refused(
            503,
            format!(
                "a forwarded call is not forwarded again (to {})",
                to.node_id
            ),
        )
        .into_response();
    }
    let body = match body.map(std::str::from_utf8).transpose() {
        Ok(b) => b,
        Err(_) => return bad("the body is not UTF-8 JSON"),
    };
    let Some(token) = auth
        .key()
        .delegate(caller, &to.node_id, unix_now() + DELEGATION_TTL_S)
    else {
        return Refused(
            502,
            format!("{} is not a node id to delegate to", to.node_id),
        )
        .into_response();
    };
    let http = to.http.as_deref().unwrap_or_default();
    let endpoint = match Endpoint::parse(http) {
        Ok(e) => e,
        Err(_) => {
            return Refused(502, format!("{} advertised no usable API", to.node_id)).into_response()
        }
    };
    let tls = match (&endpoint.tls, &endpoint.pin) {
        (false, _) => None,
        (true, Some(pin)) => match http1::pinned(pin.clone()) {
            Ok(t) => Some(t),
            Err(e) => return Refused(502, e.to_string()).into_response(),
        },
        (true, None) => {
            return Refused(502, format!("{}'s API pins no certificate", to.node_id))
                .into_response()
        }
    };
    let sent = http1::send(
        &endpoint,
        tls,
        method,
        path,
        body,
        Some(&token),
        MAX_FORWARDED_BYTES,
    );
    let answer = match tokio::time::timeout(wait + FORWARD_MARGIN, sent).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => {
            let refused = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
            });
            if refused {
                // Its process is down, and its sandboxes ended with it.
                return answer(
                    410,
                    json!({
                        "error": format!("the sandbox is gone: lost, its node {} is down ({e})", to.node_id),
                        "gone": { "reason": "lost", "detail": format!("node {} is down", to.node_id) },
                    }),
                );
            }
            return Refused(
                503,
                format!("the sandbox's node {} did not answer: {e}", to.node_id),
            )
            .into_response();
        }
        Err(_) => {
            return Refused(
                503,
                format!(
                    "the sandbox's node {} did not answer within {:?}",
                    to.node_id,
                    wait + FORWARD_MARGIN
                ),
            )
            .into_response()
        }
    };
    let code = StatusCode::from_u16(answer.code).unwrap_or(StatusCode::BAD_GATEWAY);
    let kind = answer
        .header("content-type")
        .unwrap_or("application/json")
        .to_string();
    (code, [(header::CONTENT_TYPE, kind)], answer.body).into_response()
}

/// What every call for one sandbox needs: the node's state, who asks, and what they asked.
pub(super) struct Asked {
    shared: SharedState,
    bound: SocketAddr,
    auth: Arc<Auth>,
    caller: Caller,
    method: Method,
    uri: Uri,
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
        })
    }
}

/// Where a call for one sandbox is answered.
enum Route {
    /// Here: this node holds it.
    Here(Arc<Live>, String),
    /// Already: sent on to the node that holds it, or refused.
    Answered(Response),
}

impl Asked {
    /// The registry holding sandbox `id`, or the answer of the node that holds it (the
    /// request sent on as it came, with `body`, given `wait` there), or the refusal.
    async fn route(&self, id: &str, body: Option<&[u8]>, wait: Duration) -> Route {
        match locate(&self.shared, self.bound, id) {
            Ok(Located::Here(live, node)) => Route::Here(live, node),
            Ok(Located::There(to)) => {
                let path = path_of(&self.uri);
                let method = self.method.as_str();
                let answer = forward(&self.auth, &self.caller, &to, method, path, body, wait);
                Route::Answered(answer.await)
            }
            Err(r) => Route::Answered(r.into_response()),
        }
    }
}

fn live_caller(caller: &Caller) -> live::Caller {
    live::Caller {
        owner: caller.id.clone(),
        any: caller.role >= Role::Operate,
    }
}

/// How long a forwarded call other than an exec may take at its node.
const CALL_WAIT: Duration = Duration::from_secs(30);

/// The request's path and query, to send on as they came.
fn path_of(uri: &Uri) -> &str {
    uri.path_and_query().map_or(uri.path(), |p| p.as_str())
}

fn answer(code: u16, body: Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(body)).into_response()
}

fn bad(error: impl std::fmt::Display) -> Response {
    answer(400, json!({ "error": error.to_string() }))
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Refused> {
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
fn error_answer(e: &LiveError) -> Response {
    match e {
        LiveError::NotFound => answer(404, json!({ "error": "no such sandbox" })),
        LiveError::Gone { why, ago } => {
            let kind = match why {
                GoneWhy::Closed { .. } => "closed",
                GoneWhy::Idle => "idle",
                GoneWhy::Expired => "expired",
                GoneWhy::Lost { .. } => "lost",
            };
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
                _ => 502,
            };
            answer(
                code,
                json!({ "error": s.to_string(), "category": s.category }),
            )
        }
    }
}

/// `POST /sandboxes`: made here when this node runs sandboxes, else at a connected worker.
#[utoipa::path(
    post,
    path = "/sandboxes",
    tag = "sandboxes",
    summary = "Make a live sandbox",
    description = "A sandbox kept across calls, the caller's token's own; made here when this \
        node runs sandboxes, else at a connected worker (most task slots first). Limits above \
        the worker's ceilings are refused.",
    request_body = CreateBody,
    responses(
        (status = 201, description = "Made", body = crate::api::openapi::SandboxInfo),
        (status = 200, description = "The key names a sandbox made before", body = crate::api::openapi::SandboxInfo),
        (status = 400, description = "Not a body this route takes, or above a ceiling", body = crate::api::openapi::SandboxRefusal),
        (status = 429, description = "Too many sandboxes (`per_owner`, `worker_full`)", body = crate::api::openapi::SandboxRefusal),
        (status = 502, description = "The sandbox could not be made", body = crate::api::openapi::SandboxRefusal),
        (status = 503, description = "Neither this node nor a connected one runs sandboxes", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn create(
    State((shared, bound)): ApiState,
    Extension(caller): Extension<Caller>,
    Extension(auth): Extension<Arc<Auth>>,
    body: Bytes,
) -> Response {
    let (live, node) = match registry(&shared) {
        Ok(r) => r,
        Err(r) => {
            return match pick_worker(&shared, bound) {
                Some(worker) => {
                    forward(
                        &auth,
                        &caller,
                        &worker,
                        "POST",
                        "/sandboxes",
                        Some(&body),
                        CALL_WAIT,
                    )
                    .await
                }
                None => Refused(503, format!("{}; no connected node runs them either", r.1))
                    .into_response(),
            }
        }
    };
    let req: CreateBody = match parse(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    if req
        .key
        .as_ref()
        .is_some_and(|k| k.is_empty() || k.len() > 128)
    {
        return bad("key: 1 to 128 bytes");
    }
    if let Err(r) = check_env(&req.env) {
        return r.into_response();
    }
    let ceilings = shared.lock().ceilings;
    let shape = TaskShape {
        image: req
            .image
            .clone()
            .unwrap_or_else(|| SANDBOX_IMAGE.to_string()),
        memory_mb: req.memory_mb,
        cpu_millis: req.cpu_millis,
        pids: req.pids,
        network: false,
    };
    // The worker's ceilings, as for a task (a live sandbox's command timeouts are its own).
    let asked = chorus_core::TaskSpec {
        memory_mb: req.memory_mb,
        cpu_millis: req.cpu_millis,
        pids: req.pids,
        ..chorus_core::TaskSpec::default()
    };
    if let Err(why) = ceilings.check(&asked) {
        return bad(why.replace("the task asks", "the sandbox asks"));
    }
    let id = format!("{node}.{}-{}", boot(), random_hex());
    let mut spec = live_spec(&node, &id, &shape.image);
    spec.env = req.env;
    let made = live
        .create(
            &live_caller(&caller),
            CreateLive {
                id,
                idempotency_key: req.key.clone(),
                spec,
                policy: shape.policy(&SandboxPolicy::default()),
                idle: req.idle_timeout_ms.map(Duration::from_millis),
                lifetime: req.lifetime_ms.map(Duration::from_millis),
            },
        )
        .await;
    match made {
        Ok((info, new)) => answer(if new { 201 } else { 200 }, info_json(&info, &node)),
        Err(e) => error_answer(&e),
    }
}

/// A live sandbox's spec: `image` on node `node`, labelled live.
fn live_spec(node: &str, id: &str, image: &str) -> SandboxSpec {
    let mut spec = SandboxSpec::new(node, id, image);
    spec.labels.insert("live".into(), "true".into());
    spec
}

/// The spec and policy of a create that asks for nothing but defaults (the sandbox image,
/// default limits), which the node keeps warm sandboxes of.
pub(crate) fn default_shape(node: &str) -> (SandboxSpec, SandboxPolicy) {
    let shape = TaskShape {
        image: SANDBOX_IMAGE.to_string(),
        memory_mb: 0,
        cpu_millis: 0,
        pids: 0,
        network: false,
    };
    let spec = live_spec(node, "live-warm", &shape.image);
    (spec, shape.policy(&SandboxPolicy::default()))
}

/// `GET /sandboxes`: the ones this node holds (a cluster-wide list comes with placement in
/// the core).
#[utoipa::path(
    get,
    path = "/sandboxes",
    tag = "sandboxes",
    summary = "The caller's sandboxes on this node",
    description = "The caller's live sandboxes that this node holds (every one, for an \
        `operate` token); a node that runs none answers an empty list with a note.",
    responses((status = 200, description = "The sandboxes", body = crate::api::openapi::SandboxList))
)]
pub(super) async fn list(
    State((shared, _)): ApiState,
    Extension(caller): Extension<Caller>,
) -> Response {
    let Ok((live, node)) = registry(&shared) else {
        let note = "this node holds no sandboxes: list them at the nodes that run them";
        return answer(200, json!({ "sandboxes": [], "note": note }));
    };
    let all: Vec<Value> = live
        .list(&live_caller(&caller))
        .iter()
        .map(|i| info_json(i, &node))
        .collect();
    answer(200, json!({ "sandboxes": all }))
}

/// `GET /sandboxes/{id}`.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}",
    tag = "sandboxes",
    summary = "A sandbox",
    description = "The sandbox, with the time it has left. Any node answers: a call for another \
        node's sandbox is forwarded to it.",
    params(("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`")),
    responses(
        (status = 200, description = "The sandbox", body = crate::api::openapi::SandboxInfo),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn get(asked: Asked, Path(id): Path<String>) -> Response {
    let (live, node) = match asked.route(&id, None, CALL_WAIT).await {
        Route::Here(live, node) => (live, node),
        Route::Answered(r) => return r,
    };
    match live.get(&live_caller(&asked.caller), &id) {
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
    description = "Ends the sandbox and everything running in it (an `operate` token closes any).",
    params(("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`")),
    responses(
        (status = 200, description = "Closed", body = crate::api::openapi::SandboxClosed),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn close(asked: Asked, Path(id): Path<String>) -> Response {
    let live = match asked.route(&id, None, CALL_WAIT).await {
        Route::Here(live, _) => live,
        Route::Answered(r) => return r,
    };
    match live.close(&live_caller(&asked.caller), &id).await {
        Ok(()) => answer(200, json!({ "id": id, "closed": true })),
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
    params(("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`")),
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

/// `PUT /sandboxes/{id}/files`.
#[utoipa::path(
    put,
    path = "/sandboxes/{id}/files",
    tag = "sandboxes",
    summary = "Write a file",
    description = "Writes the file (text or base64) at an absolute path in the sandbox, making \
        its folders.",
    params(("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`")),
    request_body = FileBody,
    responses(
        (status = 200, description = "Written", body = crate::api::openapi::FileWritten),
        (status = 400, description = "Not a body this route takes, a bad path or mode", body = crate::api::openapi::SandboxRefusal),
        (status = 404, description = "No such sandbox (or another token's)", body = crate::api::openapi::Refusal),
        (status = 410, description = "The sandbox ended: why and how long ago", body = crate::api::openapi::SandboxGone),
        (status = 503, description = "The sandbox's node is not connected to this node, or did not answer", body = crate::api::openapi::Refusal),
        (status = 422, description = "The sandbox could not write it", body = crate::api::openapi::SandboxRefusal),
    )
)]
pub(super) async fn write_file(asked: Asked, Path(id): Path<String>, body: Bytes) -> Response {
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
    let path = match sandbox_path(&req.path) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let mode = req.mode.unwrap_or(0o644);
    if mode > 0o777 {
        return bad("mode: permission bits only (at most 0o777)");
    }
    let size = data.len();
    match live
        .write_file(&live_caller(&asked.caller), &id, &path, &data, mode)
        .await
    {
        Ok(()) => answer(200, json!({ "path": path, "size": size })),
        Err(e) => error_answer(&e),
    }
}

/// `GET /sandboxes/{id}/files?path=P`.
#[utoipa::path(
    get,
    path = "/sandboxes/{id}/files",
    tag = "sandboxes",
    summary = "Read a file",
    description = "The file's bytes.",
    params(
        ("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`"),
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
    match live
        .read_file(&live_caller(&asked.caller), &id, &path)
        .await
    {
        Ok(data) => ([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response(),
        Err(e) => error_answer(&e),
    }
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
    params(("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`")),
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
    params(("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`")),
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
    let request = ExecRequest::shell(PROCESSES_SCRIPT).timeout(CALL_WAIT);
    let (sink, _) = mpsc::channel(1);
    match live
        .exec(&live_caller(&asked.caller), &id, request, sink)
        .await
    {
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
        ("id" = String, Path, description = "The sandbox's id, `NODE.BOOT-RANDOM`"),
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
    let request = ExecRequest::shell(script).timeout(CALL_WAIT);
    let (sink, _) = mpsc::channel(1);
    match live
        .exec(&live_caller(&asked.caller), &id, request, sink)
        .await
    {
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
fn sandbox_path(path: &str) -> Result<String, Refused> {
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

fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS random source");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
