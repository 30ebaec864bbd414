//! The HTTP API (127.0.0.1 by default), one file per resource: `status` (`/healthz`,
//! `/readyz`, `/status`, `/metrics`), `history` (`/status/history`, what this node saw lately),
//! `cluster` (this node's view of every node it knows, with their HTTP addresses),
//! `cluster_status` (`/cluster/status`, each node's own view, asked of it), `members`, `tasks`,
//! `logs` (a run's output, at its worker), `sandboxes` (live sandboxes, kept across calls),
//! `acl` (tokens) and `ui` (the web console, pages
//! that read the other routes from the browser).
//! Handlers read the daemon's
//! shared state and hand operator requests to its runtime loop; they never call the
//! command-line clients. Every request passes `auth` first: who may do what is decided there.

pub mod acl;
pub mod auth;
pub mod cluster;
pub mod cluster_status;
pub mod connections;
pub mod history;
pub mod logs;
pub mod members;
pub mod sandboxes;
pub mod status;
pub mod tasks;
pub mod transfer;
pub mod ui;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Extension, Router};
use tokio::net::TcpListener;

use crate::daemon::shared::SharedState;

/// Binds `addr` (failing early, with the address in the error) and returns the server future.
/// `auth` decides who may call what; with `tls` every connection speaks TLS; with `ui` the
/// web console is served at `/ui` and a browser asking for `/` is sent there. Connections are
/// bounded in time and number per peer (`connections`).
pub async fn serve(
    addr: SocketAddr,
    shared: SharedState,
    auth: Arc<auth::Auth>,
    tls: Option<Arc<rustls::ServerConfig>>,
    ui: bool,
) -> anyhow::Result<(SocketAddr, impl std::future::Future<Output = ()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the HTTP API on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let app = router(shared, auth, bound, ui);
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    Ok((bound, connections::serve(listener, tls, app)))
}

/// Every route, behind the gatekeeper; `bound` is the address the API listens on.
fn router(shared: SharedState, auth: Arc<auth::Auth>, bound: SocketAddr, ui: bool) -> Router {
    let app = if ui {
        Router::new()
            .route("/", get(ui::root))
            .route(ui::PAGE, get(ui::page))
            .route(ui::SCRIPT, get(ui::script))
            .route(ui::STYLE, get(ui::style))
    } else {
        Router::new().route("/", get(status::index))
    };
    app.route("/healthz", get(status::healthz))
        .route("/readyz", get(status::readyz))
        .route("/status", get(status::status))
        .route("/status/history", get(history::history))
        .route("/metrics", get(status::metrics))
        .route("/cluster", get(cluster::cluster))
        .route("/cluster/status", get(cluster_status::cluster_status))
        .route(
            "/members",
            get(members::members).post(members::change_members),
        )
        .route("/members/transfer", post(transfer::transfer))
        .route("/tasks", get(tasks::list_tasks).post(tasks::submit_task))
        .route(
            "/tasks/{id}",
            get(tasks::get_task).delete(tasks::cancel_task),
        )
        .route("/tasks/{id}/logs", get(logs::task_logs))
        .route("/sandboxes", get(sandboxes::list).post(sandboxes::create))
        .route(
            "/sandboxes/{id}",
            get(sandboxes::get).delete(sandboxes::close),
        )
        .route("/sandboxes/{id}/exec", post(sandboxes::exec))
        .route("/sandboxes/{id}/env", post(sandboxes::set_env))
        .route("/sandboxes/{id}/processes", get(sandboxes::processes))
        .route(
            "/sandboxes/{id}/processes/{pid}",
            axum::routing::delete(sandboxes::kill_process),
        )
        .route(
            "/sandboxes/{id}/files",
            get(sandboxes::read_file).put(sandboxes::write_file),
        )
        .route("/acl/tokens", post(acl::create_token))
        .route("/acl/delegate", post(acl::delegate))
        .layer(Extension(auth.clone()))
        .layer(Extension(Arc::new(cluster_status::Asker::default())))
        .layer(axum::middleware::from_fn_with_state(
            (shared.clone(), auth),
            auth::guard,
        ))
        .with_state((shared, bound))
}
