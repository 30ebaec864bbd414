//! `/tasks` for users: `POST /tasks` (submit, with an idempotency key), `GET /tasks/{id}`,
//! `GET /tasks?state=…` and `DELETE /tasks/{id}` (cancel), over the tasks this node owns.
//!
//! A submit or a cancel is an [`Event::SubmitTask`] or [`Event::CancelTask`] handed to the
//! runtime loop (logged and replayed like every input), with a request id; the handler waits
//! for the notice that answers that id (`Notice::TaskSubmitted`, `TaskCancelRequested` or
//! `TaskRefused`, see [`crate::daemon::operator`]). Reads come from the node's shadow core, so they show exactly what the log
//! holds. Delivery is at least once: a task may run more than once (a failover while it ran,
//! a worker taken for lost that was not); its submitter keeps the first result.

use crate::wire::STATES;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chorus_core::{Event, OwnedTask, TaskId, TaskPhase, TaskSpec};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use chorus_io::sandbox::tasks::secret::{is_sealed, SecretKey, SEALED_PREFIX};

use super::auth::{Caller, Role};
use crate::daemon::operator::TaskAnswer;
use crate::daemon::shared::{Shared, SharedState};
use crate::wire::{TaskRow, TaskTimings, TaskView};

/// The timeout of a task whose spec names none: 10 minutes.
pub const DEFAULT_TIMEOUT_MS: u64 = 600_000;

/// How long a submit or cancel waits for the core's answer (it comes in the same step, so
/// only a stopped or swamped loop takes long).
const ANSWER_BOUND: Duration = Duration::from_secs(10);

/// The keys of a task spec in JSON: anything else in a submit is a mistake, said as one.
pub(super) const SPEC_KEYS: [&str; 12] = [
    "image",
    "command",
    "env",
    "secret_env",
    "workdir",
    "timeout_ms",
    "memory_mb",
    "cpu_millis",
    "pids",
    "network",
    "requires",
    "repo",
];

/// The answer to a submit.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Submitted {
    /// The task's id (`ORIGIN-SEQ`).
    pub task: String,
    /// The idempotency key named a task submitted before (this one).
    pub existing: bool,
}

/// The answer of `GET /tasks`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TaskList {
    /// The node answering (which owns these tasks).
    pub node_id: String,
    /// In id order.
    pub tasks: Vec<TaskRow>,
}

/// The answer to a cancel (202).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelAsked {
    pub task: String,
    /// `requested` (the task is this node's), or `forwarded` (its node is out of reach: this
    /// node keeps the cancel and gives it to the admin and, once it is back, to its node).
    pub cancel: &'static str,
    /// The task's node, when forwarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// What happens next, when forwarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A cancel the core refused (409): the task is finished already, or this node holds too many
/// forwarded cancels.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelRefused {
    pub task: String,
    /// The core's reason.
    pub error: String,
}

/// `POST /tasks` with a task spec (JSON; `key` or the `Idempotency-Key` header makes a retried
/// submit name the same task): 201 new, 200 known key, 400 refused (with the reason).
#[utoipa::path(
    post,
    path = "/tasks",
    tag = "tasks",
    summary = "Submit a task",
    description = "Submits a task to run once on a worker the admin picks. Delivery is at least \
        once (a failover may run it again); the submitter keeps the first result. A key (the \
        body's `key` or the `Idempotency-Key` header) makes a retried submit name the same \
        task. The node refuses a spec above its own ceilings (a cluster configured alike would \
        run it nowhere).",
    params(("Idempotency-Key" = Option<String>, Header, description = "The idempotency key (instead of the body's `key`)")),
    request_body = crate::api::openapi::SubmitTaskDoc,
    responses(
        (status = 201, description = "Submitted: a new task", body = Submitted),
        (status = 200, description = "The key names a task submitted before", body = Submitted),
        (status = 400, description = "Not a task spec, or refused (the reason says why)", body = crate::api::openapi::Refusal),
        (status = 503, description = "The node is not running, or is busy with other requests", body = crate::api::openapi::Refusal),
        (status = 504, description = "The node did not answer in time", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn submit_task(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header_key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) => Some(k),
        Some(Err(_)) => {
            let error = "the Idempotency-Key header is not text";
            return json_answer(400, serde_json::json!({ "error": error }));
        }
    };
    let secret_key = shared.lock().secret_key.clone();
    let (spec, key) = match parse_submit(&body, header_key, secret_key.as_ref()) {
        Ok(parsed) => parsed,
        Err(error) => return json_answer(400, serde_json::json!({ "error": error })),
    };
    // This node's ceilings: a cluster configured alike would run it nowhere (issue 33).
    let ceilings = shared.lock().ceilings;
    if let Err(error) = ceilings.check(&spec) {
        return json_answer(400, serde_json::json!({ "error": error }));
    }
    let (code, body) = submit(&shared, spec, key, Some(caller.id)).await;
    json_answer(code, body)
}

/// `GET /tasks/{id}`: the task as its submitter (this node) knows it; the environment's
/// values only to the token that submitted it.
#[utoipa::path(
    get,
    path = "/tasks/{id}",
    tag = "tasks",
    summary = "A task",
    description = "The task as the node it was submitted to knows it: phase, worker, spec (the \
        environment's values only to the token that submitted it), result once done. A task \
        of another node is answered 404 naming that node and where to ask it.",
    params(("id" = String, Path, description = "The task's id, `ORIGIN-SEQ`")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 400, description = "Not a task id", body = crate::api::openapi::Refusal),
        (status = 404, description = "Not held here", body = crate::api::openapi::TaskNotHere),
        (status = 503, description = "`starting`", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn get_task(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let (code, body) = get(&shared.lock(), &id, Some(&caller.id));
    json_answer(code, body)
}

/// `GET /tasks?state=S`: the tasks this node owns.
#[utoipa::path(
    get,
    path = "/tasks",
    tag = "tasks",
    summary = "The tasks this node owns",
    description = "The tasks submitted to this node, in id order, filtered by `state`.",
    params(("state" = Option<String>, Query, description = "`all` (default), `unfinished`, a phase (`submitted`, `queued`, `placed`, `finished`, `done`) or a result's status (`succeeded`, `failed`, `out_of_memory`, `timed_out`, `cancelled`, `error`, `unschedulable`)")),
    responses(
        (status = 200, description = "The tasks", body = TaskList),
        (status = 400, description = "Not a state", body = crate::api::openapi::Refusal),
        (status = 503, description = "`starting`", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn list_tasks(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let (code, body) = list(&shared.lock(), query.get("state").map(String::as_str));
    json_answer(code, body)
}

/// `DELETE /tasks/{id}`: cancel (202 asked for, 404 not owned here, 409 finished already,
/// 403 another caller's task and a token below `operate`). A task of another node that this
/// node cannot reach now is cancelled from here for an `operate` token (202, `"cancel":
/// "forwarded"`: `chorus_core::task::ask`); a lower token is refused 403, as it cannot be
/// told whose task it is.
#[utoipa::path(
    delete,
    path = "/tasks/{id}",
    tag = "tasks",
    summary = "Cancel a task",
    description = "Asks for the task to be cancelled (a run is stopped; a result that came \
        first stays). A token below `operate` cancels only the tasks it submitted. A task of \
        another node that this node cannot reach now is cancelled from here for an `operate` \
        token (`\"cancel\": \"forwarded\"`).",
    params(("id" = String, Path, description = "The task's id, `ORIGIN-SEQ`")),
    responses(
        (status = 202, description = "Cancel asked for", body = CancelAsked),
        (status = 400, description = "Not a task id", body = crate::api::openapi::Refusal),
        (status = 403, description = "Another caller's task (or an unreachable node's) and a token below `operate`", body = crate::api::openapi::Refusal),
        (status = 404, description = "Not held here", body = crate::api::openapi::TaskNotHere),
        (status = 409, description = "Refused by the core: finished already", body = CancelRefused),
        (status = 503, description = "The node is not running", body = crate::api::openapi::Refusal),
        (status = 504, description = "The node did not answer in time", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn cancel_task(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let task: TaskId = match id.parse() {
        Ok(t) => t,
        Err(error) => return json_answer(400, serde_json::json!({ "error": error })),
    };
    let forward = match may_cancel(&caller, &task, &where_is(&shared.lock(), &task)) {
        Ok(forward) => forward,
        Err(error) => return json_answer(403, serde_json::json!({ "error": error })),
    };
    let (code, body) = if forward {
        cancel_elsewhere(&shared, task).await
    } else {
        cancel(&shared, task).await
    };
    json_answer(code, body)
}

/// Whether `caller` may cancel `task`, which lives where `whereabouts` says: `Ok(false)` to
/// cancel it here (its submitter's answer says the rest: 404, 409), `Ok(true)` to hand the
/// cancel to the admin (`cancel_elsewhere`), `Err` why not (403). A token below `operate`
/// cancels only the tasks it submitted: not another caller's, not one submitted without a
/// token, and not another node's task while that node is out of reach (whose it is cannot
/// be told from here).
fn may_cancel(caller: &Caller, task: &TaskId, whereabouts: &Whereabouts) -> Result<bool, String> {
    match whereabouts {
        Whereabouts::Here(owner) => {
            if caller.role < Role::Operate {
                if let Some(owner) = owner
                    .as_ref()
                    .filter(|o| o.as_deref() != Some(caller.id.as_str()))
                {
                    return Err(format!(
                        "task {task} was submitted by another caller ({}); cancelling it needs \
                         a token of role operate",
                        owner.as_deref().unwrap_or("unknown")
                    ));
                }
            }
            Ok(false)
        }
        Whereabouts::Elsewhere { reachable: true } | Whereabouts::Unknown => Ok(false),
        Whereabouts::Elsewhere { reachable: false } => {
            if caller.role < Role::Operate {
                return Err(format!(
                    "task {task} belongs to node {}, which this node cannot reach now; \
                     cancelling another node's task here needs a token of role operate (or \
                     cancel it at its node once that is back)",
                    task.origin
                ));
            }
            Ok(true)
        }
    }
}

/// Where a task lives, as this node sees it.
enum Whereabouts {
    /// Owned here, by this caller id (`None`: submitted without a token).
    Here(Option<Option<String>>),
    /// Another node's; whether this node is connected to it.
    Elsewhere { reachable: bool },
    /// The node is not running.
    Unknown,
}

fn where_is(shared: &Shared, task: &TaskId) -> Whereabouts {
    let Some(core) = shared.core.as_ref() else {
        return Whereabouts::Unknown;
    };
    if task.origin.as_str() == shared.node_id {
        return Whereabouts::Here(core.owned_tasks().get(task).map(|t| t.owner.clone()));
    }
    Whereabouts::Elsewhere {
        reachable: core.peers().contains(&task.origin),
    }
}

/// A JSON answer with `code`.
fn json_answer(code: u16, body: serde_json::Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(body)).into_response()
}

/// Parses the body of `POST /tasks`: a task spec (`timeout_ms` defaults to
/// [`DEFAULT_TIMEOUT_MS`]) and an optional `key`, which the `Idempotency-Key` header may give
/// instead (both: they must agree). `secret_env` (name → value) is sealed with `secret_key`
/// into the spec's `env`, so the value never reaches the log in plain text.
pub fn parse_submit(
    body: &[u8],
    header_key: Option<&str>,
    secret_key: Option<&SecretKey>,
) -> Result<(TaskSpec, Option<String>), String> {
    let mut value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Some(obj) = value.as_object_mut() else {
        return Err("the body must be a JSON object: a task spec".into());
    };
    let body_key = match obj.remove("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k),
        Some(_) => return Err("`key` must be a string".into()),
    };
    let secrets: BTreeMap<String, String> = match obj.remove("secret_env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(v) => serde_json::from_value(v)
            .map_err(|_| "`secret_env` must be an object of names to string values")?,
    };
    if let Some(unknown) = obj.keys().find(|k| !SPEC_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field `{unknown}`; a task spec has {}",
            SPEC_KEYS.join(", ")
        ));
    }
    obj.entry("timeout_ms")
        .or_insert_with(|| DEFAULT_TIMEOUT_MS.into());
    let mut spec: TaskSpec =
        serde_json::from_value(value).map_err(|e| format!("not a task spec: {e}"))?;
    // A sealed value copied from elsewhere would be opened into this task: only this node
    // seals.
    if let Some(name) = spec.env.iter().find(|(_, v)| is_sealed(v)).map(|(k, _)| k) {
        return Err(format!(
            "environment variable `{name}`: a value may not start with {SEALED_PREFIX} (give \
             secrets in `secret_env`)"
        ));
    }
    if !secrets.is_empty() {
        let Some(seal) = secret_key else {
            return Err(
                "`secret_env` needs the cluster's pre-shared key (psk_file) on this \
                        node and the workers: it seals the values; this node has none"
                    .into(),
            );
        };
        for (name, value) in secrets {
            if spec.env.contains_key(&name) {
                return Err(format!(
                    "environment variable `{name}` is given both in `env` and in `secret_env`"
                ));
            }
            // Checked as the spec checks names: the seal is made over it.
            if name.is_empty() || name.contains('=') || name.chars().any(char::is_control) {
                return Err(format!(
                    "secret environment variable `{name}` is not NAME=VALUE"
                ));
            }
            let sealed = seal.seal(&name, &value);
            spec.env.insert(name, sealed);
        }
    }
    let key = match (header_key, body_key) {
        (Some(h), Some(b)) if h != b => {
            return Err(format!(
                "the Idempotency-Key header ({h:?}) and the body's `key` ({b:?}) differ"
            ))
        }
        (Some(h), _) => Some(h.to_owned()),
        (None, b) => b,
    };
    Ok((spec, key))
}

/// Hands `event(request)` to the runtime loop and waits for the core's answer. `Err` carries
/// the HTTP status and message when there is none.
async fn ask(
    shared: &SharedState,
    event: impl FnOnce(u64) -> Event,
) -> Result<TaskAnswer, (u16, String)> {
    let (tx, rx) = oneshot::channel();
    let request = crate::daemon::shared::queue(shared, event, |ops, request| {
        ops.task_waiters.insert(request, tx);
    })
    .map_err(|why| (503, why.to_owned()))?;
    match tokio::time::timeout(ANSWER_BOUND, rx).await {
        Ok(Ok(answer)) => Ok(answer),
        _ => {
            if let Some(ops) = shared.lock().operator.as_mut() {
                ops.task_waiters.remove(&request);
            }
            Err((
                504,
                format!(
                    "the node did not answer within {} s",
                    ANSWER_BOUND.as_secs()
                ),
            ))
        }
    }
}

/// Submits a task. Returns the HTTP status and body: 201 `{"task", "existing": false}`, 200
/// for a known idempotency key, 400 `{"error"}` with the core's reason, 503/504.
pub async fn submit(
    shared: &SharedState,
    spec: TaskSpec,
    key: Option<String>,
    owner: Option<String>,
) -> (u16, Value) {
    let spec = Arc::new(spec);
    let event = |request| Event::SubmitTask {
        spec,
        key,
        owner,
        request,
    };
    match ask(shared, event).await {
        Ok(TaskAnswer::Submitted { task, existing }) => (
            if existing { 200 } else { 201 },
            json!(Submitted {
                task: task.to_string(),
                existing
            }),
        ),
        Ok(TaskAnswer::Refused { reason }) => (400, json!({ "error": reason })),
        Ok(TaskAnswer::CancelRequested) => (500, json!({ "error": "unexpected answer" })),
        Err((code, error)) => (code, json!({ "error": error })),
    }
}

/// Cancels a task owned here: 202 when asked for, 404 when this node does not own it, 409
/// when the core refuses (it is finished already).
pub async fn cancel(shared: &SharedState, task: TaskId) -> (u16, Value) {
    {
        let s = shared.lock();
        if s.core
            .as_ref()
            .is_some_and(|c| !c.owned_tasks().contains_key(&task))
        {
            return (404, not_here(&s, &task));
        }
    }
    let id = task.to_string();
    match ask(shared, |request| Event::CancelTask { task, request }).await {
        Ok(TaskAnswer::CancelRequested) => (
            202,
            json!(CancelAsked {
                task: id,
                cancel: "requested",
                owner: None,
                message: None,
            }),
        ),
        Ok(TaskAnswer::Refused { reason }) => (
            409,
            json!(CancelRefused {
                task: id,
                error: reason
            }),
        ),
        Ok(TaskAnswer::Submitted { .. }) => (500, json!({ "error": "unexpected answer" })),
        Err((code, error)) => (code, json!({ "error": error })),
    }
}

/// Cancels another node's task from here while that node is out of reach: this node keeps the
/// cancel (durable) and gives it to the admin, which stops the run, and to the task's node
/// once it is back, which ends the task cancelled (`chorus_core::task::ask`). 202, or 409 when
/// this node holds too many such cancels already.
pub async fn cancel_elsewhere(shared: &SharedState, task: TaskId) -> (u16, Value) {
    let id = task.to_string();
    let owner = task.origin.to_string();
    match ask(shared, |request| Event::CancelTask { task, request }).await {
        Ok(TaskAnswer::CancelRequested) => (
            202,
            json!(CancelAsked {
                task: id,
                cancel: "forwarded",
                message: Some(format!(
                    "its node {owner} is out of reach: this node keeps the cancel, the admin \
                     stops its run, and {owner} ends the task cancelled once it is back (a run \
                     that ended first keeps its result)"
                )),
                owner: Some(owner),
            }),
        ),
        Ok(TaskAnswer::Refused { reason }) => (
            409,
            json!(CancelRefused {
                task: id,
                error: reason
            }),
        ),
        Ok(TaskAnswer::Submitted { .. }) => (500, json!({ "error": "unexpected answer" })),
        Err((code, error)) => (code, json!({ "error": error })),
    }
}

/// The 404 for a task this node does not hold. A task lives at the node it was submitted to
/// (its origin, the first part of its id): for another node's, the answer names it, with the
/// HTTP address it advertised and whether this node is connected to it, so a client can ask
/// it there (`chorus task get|cancel` does; `owner_http` is absent when this node has no
/// connection to it, as the address came with the connection).
fn not_here(shared: &Shared, task: &TaskId) -> Value {
    let origin = task.origin.to_string();
    if origin == shared.node_id {
        return json!({ "error": format!(
            "no task {task} here: this node numbered it, but holds no such task (finished \
             tasks are forgotten after {} more)", chorus_core::task::MAX_DONE_TASKS) });
    }
    let connected = shared
        .core
        .as_ref()
        .is_some_and(|c| c.peers().contains(&task.origin));
    let http = shared
        .transport_stats
        .as_ref()
        .and_then(|t| t.peer_http().get(&origin).cloned())
        .filter(|_| connected);
    let whereabouts = match &http {
        Some(h) => format!("ask it at {h}"),
        None if connected => "it advertised no HTTP API this node can reach (an API bound to its \
                              own loopback answers its own host only): ask through a node on its host"
            .to_owned(),
        None => "this node is not connected to it now (down, or cut off): its result, once \
                 run, waits at its worker; the admin knows where it stands; a cancel asked here \
                 (role operate) is kept until it is back"
            .to_owned(),
    };
    // A worker keeps a result until its submitter acknowledges it: while that node is away,
    // the result can still be read here (only its node takes it for the task's result).
    let held = shared
        .core
        .as_ref()
        .and_then(|c| c.unacknowledged_results().get(task).cloned());
    // The admin's queue holds a task that never ran; this node may hold a cancel for it.
    let admin_view = shared
        .core
        .as_ref()
        .and_then(|c| c.admin_tasks().and_then(|a| a.view(task, c.now_ms())));
    let cancel_kept = shared
        .core
        .as_ref()
        .is_some_and(|c| c.cancel_asks().contains_key(task));
    json!({
        "error": format!(
            "task {task} is held by the node it was submitted to, {origin}: {whereabouts}"
        ),
        "owner": origin,
        "owner_http": http,
        "owner_connected": connected,
        "held_result": held,
        "admin_view": admin_view,
        "cancel_kept": cancel_kept,
    })
}

/// What `GET /tasks/{id}` shows of an environment value to anyone but the task's submitter.
pub const REDACTED: &str = "<redacted>";

/// What `GET /tasks/{id}` shows of a secret value, to everyone.
pub const SECRET: &str = "<secret>";

/// A task as `GET /tasks/{id}` shows it to `reader` (a token id): the environment's values
/// only when the reader submitted it.
fn task_view(task: &TaskId, t: &OwnedTask, reader: Option<&str>) -> TaskView {
    let mut spec = (*t.spec).clone();
    let submitter = reader.is_some() && t.owner.as_deref() == reader;
    for value in spec.env.values_mut() {
        if is_sealed(value) {
            *value = SECRET.to_owned();
        } else if !submitter {
            *value = REDACTED.to_owned();
        }
    }
    let (worker, attempt) = match &t.phase {
        TaskPhase::Placed { worker, attempt } => (Some(worker.to_string()), Some(*attempt)),
        TaskPhase::Finished { worker } => (Some(worker.to_string()), None),
        // A task cancelled before it ran has no worker: its result is the admin's (or the
        // submitter's) word, not a run's.
        _ => (
            t.result
                .as_ref()
                .filter(|r| !crate::wire::cancelled_before_it_ran(r))
                .map(|r| r.worker.to_string()),
            None,
        ),
    };
    TaskView {
        task: task.to_string(),
        phase: t.phase.as_str().to_owned(),
        worker,
        attempt,
        cancel: t.cancel,
        pending: t.pending.clone(),
        pending_ms: t.pending.as_ref().map(|_| t.unplaceable_ms),
        key: t.key.clone(),
        submitted_at_ms: t.submitted_at_ms,
        spec,
        result: t.result.clone(),
        timings: Some(TaskTimings {
            placed_ms: (t.placed_at_ms > 0)
                .then(|| t.placed_at_ms.saturating_sub(t.submitted_at_ms)),
            result_ms: t
                .result
                .is_some()
                .then(|| t.done_at_ms.saturating_sub(t.submitted_at_ms)),
        }),
    }
}

/// `GET /tasks/{id}`: 200 with the task, 404 when this node does not own it, 503 starting.
pub fn get(shared: &Shared, id: &str, reader: Option<&str>) -> (u16, Value) {
    let task: TaskId = match id.parse() {
        Ok(t) => t,
        Err(e) => return (400, json!({ "error": e })),
    };
    let Some(core) = shared.core.as_ref() else {
        return (503, json!({ "error": "starting" }));
    };
    match core.owned_tasks().get(&task) {
        Some(t) => (200, json!(task_view(&task, t, reader))),
        None => (404, not_here(shared, &task)),
    }
}

/// `GET /tasks?state=S`: the tasks this node owns in state `S` (default `all`), in id order.
pub fn list(shared: &Shared, state: Option<&str>) -> (u16, Value) {
    let state = state.unwrap_or("all");
    if !STATES.contains(&state) {
        return (
            400,
            json!({ "error": format!("unknown state `{state}`; one of {}", STATES.join(", ")) }),
        );
    }
    let Some(core) = shared.core.as_ref() else {
        return (503, json!({ "error": "starting" }));
    };
    let rows: Vec<TaskRow> = core
        .owned_tasks()
        .iter()
        .filter(|(_, t)| {
            let phase = t.phase.as_str();
            let status = t.result.as_ref().map(|r| r.status.as_str());
            match state {
                "all" => true,
                "unfinished" => phase != "done",
                s => phase == s || status == Some(s),
            }
        })
        .map(|(id, t)| {
            let view = task_view(id, t, None);
            TaskRow {
                task: view.task,
                phase: view.phase,
                status: t.result.as_ref().map(|r| r.status),
                exit_code: t.result.as_ref().and_then(|r| r.exit_code),
                worker: view.worker,
                pending: view.pending,
            }
        })
        .collect();
    (
        200,
        json!(TaskList {
            node_id: core.id().to_string(),
            tasks: rows
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `DELETE /tasks/{id}`: a token below `operate` cancels only what it submitted here —
    /// not another caller's task, not one submitted without a token, not another node's task
    /// while that node is out of reach; `operate` and `manage` cancel any, and hand the cancel
    /// of an unreachable node's task to the admin. A task not held here (a reachable node's,
    /// or a node not running) is left to the submitter's answer (404).
    #[test]
    fn a_token_below_operate_cancels_only_its_own_tasks() {
        let here_mine = Whereabouts::Here(Some(Some("0123456789abcdef".into())));
        let here_theirs = Whereabouts::Here(Some(Some("fedcba9876543210".into())));
        let here_anonymous = Whereabouts::Here(Some(None));
        let not_here = Whereabouts::Here(None);
        let reachable = Whereabouts::Elsewhere { reachable: true };
        let unreachable = Whereabouts::Elsewhere { reachable: false };
        // (where, what read, submit, operate and manage tokens get: Some(forward), None: 403)
        let table: &[(&str, &Whereabouts, [Option<bool>; 4])] = &[
            ("mine", &here_mine, [Some(false); 4]),
            (
                "another caller's",
                &here_theirs,
                [None, None, Some(false), Some(false)],
            ),
            (
                "submitted without a token",
                &here_anonymous,
                [None, None, Some(false), Some(false)],
            ),
            ("not owned here", &not_here, [Some(false); 4]),
            ("a reachable node's", &reachable, [Some(false); 4]),
            ("not running", &Whereabouts::Unknown, [Some(false); 4]),
            (
                "an unreachable node's",
                &unreachable,
                [None, None, Some(true), Some(true)],
            ),
        ];
        let task: TaskId = "n-1".parse().unwrap();
        for (what, whereabouts, by_role) in table {
            for (role, want) in Role::ALL.into_iter().zip(by_role) {
                let caller = Caller {
                    role,
                    id: "0123456789abcdef".into(),
                    delegated: false,
                };
                let got = may_cancel(&caller, &task, whereabouts);
                assert_eq!(
                    got.as_ref().ok(),
                    want.as_ref(),
                    "{what} by {role}: {got:?}"
                );
                if let Err(error) = got {
                    assert!(error.contains("role operate"), "{error}");
                    assert!(!error.contains("  "), "{error}");
                }
            }
        }
    }

    #[test]
    fn a_submit_body_is_a_spec_with_a_default_timeout_and_an_optional_key() {
        let (spec, key) = parse_submit(
            br#"{"image":"i","command":["true"],"key":"k1"}"#,
            None,
            None,
        )
        .unwrap();
        assert_eq!(spec.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert_eq!(key.as_deref(), Some("k1"));
        let (_, key) =
            parse_submit(br#"{"image":"i","command":["true"]}"#, Some("h"), None).unwrap();
        assert_eq!(key.as_deref(), Some("h"));
        let err = parse_submit(
            br#"{"image":"i","command":["true"],"key":"a"}"#,
            Some("b"),
            None,
        )
        .unwrap_err();
        assert!(err.contains("differ"), "{err}");
        let err = parse_submit(
            br#"{"image":"i","command":["true"],"memroy_mb":5}"#,
            None,
            None,
        )
        .unwrap_err();
        assert!(err.contains("`memroy_mb`"), "{err}");
        assert!(parse_submit(b"[1]", None, None).is_err());
        assert!(parse_submit(br#"{"image":"i"}"#, None, None).is_err());
    }

    #[test]
    fn secret_values_are_sealed_at_submit_and_shown_to_no_one() {
        let key = SecretKey::from_psk("cluster");
        let body =
            br#"{"image":"i","command":["true"],"env":{"A":"1"},"secret_env":{"S":"hunter2"}}"#;
        let (spec, _) = parse_submit(body, None, Some(&key)).unwrap();
        assert!(is_sealed(&spec.env["S"]) && !spec.env["S"].contains("hunter2"));
        assert_eq!(key.open("S", &spec.env["S"]).unwrap(), "hunter2");
        // The same submit seals to the same spec (its idempotency key still matches).
        assert_eq!(parse_submit(body, None, Some(&key)).unwrap().0, spec);
        // Not even the submitter reads it back; plain values only the submitter.
        let task: OwnedTask = serde_json::from_value(json!({
            "spec": spec, "owner": "me", "submitted_at_ms": 0, "phase": {"phase": "submitted"}
        }))
        .unwrap();
        let id: TaskId = "n-1".parse().unwrap();
        let mine = task_view(&id, &task, Some("me"));
        assert_eq!(
            (mine.spec.env["S"].as_str(), mine.spec.env["A"].as_str()),
            (SECRET, "1")
        );
        let theirs = task_view(&id, &task, Some("other"));
        assert_eq!(theirs.spec.env["A"], REDACTED);

        let err = parse_submit(body, None, None).unwrap_err();
        assert!(err.contains("psk_file"), "{err}");
        let copied = format!(
            r#"{{"image":"i","command":["true"],"env":{{"S":"{}"}}}}"#,
            key.seal("S", "theirs")
        );
        let err = parse_submit(copied.as_bytes(), None, Some(&key)).unwrap_err();
        assert!(err.contains("may not start with"), "{err}");
        let both = br#"{"image":"i","command":["true"],"env":{"S":"1"},"secret_env":{"S":"2"}}"#;
        assert!(parse_submit(both, None, Some(&key))
            .unwrap_err()
            .contains("both"));
    }
}
