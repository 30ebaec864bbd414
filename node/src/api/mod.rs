//! The HTTP API (127.0.0.1 by default), one file per resource: `status` (`/healthz`,
//! `/readyz`, `/status`, `/metrics`), `cluster` (this node's view of every node it knows, with
//! their HTTP addresses), `members` and `tasks`. Handlers read the daemon's shared state and
//! hand operator requests to its runtime loop; they never call the command-line clients.

pub mod cluster;
pub mod members;
pub mod status;
pub mod tasks;

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::daemon::shared::SharedState;

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
        .route("/healthz", get(status::healthz))
        .route("/readyz", get(status::readyz))
        .route("/status", get(status::status))
        .route("/metrics", get(status::metrics))
        .route("/cluster", get(cluster::cluster))
        .route(
            "/members",
            get(members::members).post(members::change_members),
        )
        .route("/tasks", get(tasks::list_tasks).post(tasks::submit_task))
        .route(
            "/tasks/{id}",
            get(tasks::get_task).delete(tasks::cancel_task),
        )
        .with_state((shared, bound));
    let server = async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP API stopped");
        }
    };
    Ok((bound, server))
}
