//! The HTTP API (127.0.0.1 by default): `/healthz`, `/readyz`, `/status`, `/metrics`, and
//! `/cluster` (this node's view of every node it knows, with their HTTP addresses).

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::{header, StatusCode};
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
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
