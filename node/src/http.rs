//! The HTTP API (127.0.0.1 by default): `/healthz`, `/readyz`, `/status`, `/metrics`,
//! `/cluster` (this node's view of every node it knows, with their HTTP addresses),
//! `/members`, and `/tasks` (see [`crate::tasks`]).

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;

use crate::observe::SharedState;

/// Binds `addr` (failing early, with the address in the error) and returns the server future.
pub async fn serve(
    addr: SocketAddr,
    shared: SharedState,
) -> anyhow::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the HTTP API on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/cluster", get(cluster))
        .route("/members", get(members).post(change_members))
        .route("/tasks", get(list_tasks).post(submit_task))
        .route("/tasks/{id}", get(get_task).delete(cancel_task))
        .with_state((shared, bound));
    let server = async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP API stopped");
        }
    };
    Ok((bound, server))
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once an admin is known (this node or another).
async fn readyz(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    let admin = shared.lock().core.as_ref().and_then(|c| c.admin().cloned());
    match admin {
        Some(admin) => (StatusCode::OK, format!("ready: admin {admin}\n")).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no admin known\n").into_response(),
    }
}

async fn status(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    match shared.lock().status() {
        Some(status) => Json(status).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

async fn cluster(State((shared, bound)): State<(SharedState, SocketAddr)>) -> Response {
    match shared.lock().cluster(&bound.to_string()) {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

async fn members(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    match shared.lock().members() {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

/// `POST /members?wait_ms=N` with `{"op": "add"|"remove", "node": "<id>"}`: waits until the
/// change commits (200), is refused (409, with the reason) or `wait_ms` passes (504).
async fn change_members(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(query): Query<std::collections::BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let change = match crate::members::parse_change(&body) {
        Ok(c) => c,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let wait = match query.get("wait_ms").map(|w| w.parse::<u64>()) {
        None => crate::members::DEFAULT_WAIT,
        Some(Ok(ms)) => std::time::Duration::from_millis(ms).min(crate::members::MAX_WAIT),
        Some(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                "wait_ms: not a number of milliseconds\n",
            )
                .into_response()
        }
    };
    let (code, answer) = crate::members::submit(&shared, change, wait).await;
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(answer)).into_response()
}

/// A JSON answer with `code`.
fn json_answer(code: u16, body: serde_json::Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(body)).into_response()
}

/// `POST /tasks` with a task spec (JSON; `key` or the `Idempotency-Key` header makes a retried
/// submit name the same task): 201 new, 200 known key, 400 refused (with the reason).
async fn submit_task(
    State((shared, _)): State<(SharedState, SocketAddr)>,
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
    let (spec, key) = match crate::tasks::parse_submit(&body, header_key) {
        Ok(parsed) => parsed,
        Err(error) => return json_answer(400, serde_json::json!({ "error": error })),
    };
    let (code, body) = crate::tasks::submit(&shared, spec, key).await;
    json_answer(code, body)
}

/// `GET /tasks/{id}`: the task as its submitter (this node) knows it.
async fn get_task(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Path(id): Path<String>,
) -> Response {
    let (code, body) = crate::tasks::get(&shared.lock(), &id);
    json_answer(code, body)
}

/// `GET /tasks?state=S`: the tasks this node owns.
async fn list_tasks(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(query): Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    let (code, body) = crate::tasks::list(&shared.lock(), query.get("state").map(String::as_str));
    json_answer(code, body)
}

/// `DELETE /tasks/{id}`: cancel (202 asked for, 404 not owned here, 409 finished already).
async fn cancel_task(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Path(id): Path<String>,
) -> Response {
    let task = match id.parse() {
        Ok(t) => t,
        Err(error) => return json_answer(400, serde_json::json!({ "error": error })),
    };
    let (code, body) = crate::tasks::cancel(&shared, task).await;
    json_answer(code, body)
}

async fn metrics(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    let body = shared.lock().metrics_text();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// A minimal HTTP/1.1 GET for `chorus status` and `chorus devcluster` (no client library
/// needed for one loopback request). Returns (status code, body).
pub async fn get_text(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    request(addr, "GET", path, None).await
}

/// `GET path` from a chorus node's API: the body of a 200 answer, or an error naming the node
/// and what it answered.
pub async fn get_document(addr: &str, path: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let (code, body) = get_text(addr, path)
        .await
        .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    if code != 200 {
        anyhow::bail!("{addr} answered {code}: {}", body.trim());
    }
    Ok(body)
}

/// A minimal HTTP/1.1 request with an optional JSON body. Returns (status code, body).
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or_default());
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    // Bounded: status documents are small.
    stream.take(4 << 20).read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP response from {addr}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP status line from {addr}"))?;
    Ok((code, body.to_owned()))
}
