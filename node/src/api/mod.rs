//! The HTTP API (127.0.0.1 by default), one file per resource: `status` (`/healthz`,
//! `/readyz`, `/status`, `/metrics`), `history` (`/status/history`, what this node saw lately),
//! `cluster` (this node's view of every node it knows, with their HTTP addresses),
//! `cluster_status` (`/cluster/status`, each node's own view, asked of it), `members`, `tasks`,
//! `logs` (a run's output, at its worker), `sandboxes` (live sandboxes, kept across calls),
//! `acl` (tokens) and `ui` (the web console, pages
//! that read the other routes from the browser); `openapi`, the OpenAPI document of them all
//! (`/openapi.json`).
//! Handlers read the daemon's
//! shared state and hand operator requests to its runtime loop; they never call the
//! command-line clients. Every request passes `auth` first: who may do what is decided there.

pub mod acl;
pub mod auth;
pub mod cluster;
pub mod cluster_status;
pub mod connections;
pub mod history;
pub mod leave;
pub mod logs;
pub mod members;
pub mod openapi;
mod relay;
mod sandbox_files;
mod sandbox_forward;
mod sandbox_place;
pub mod sandboxes;
pub mod status;
pub mod tasks;
pub mod transfer;
pub mod ui;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::{Extension, Router};
use tokio::net::TcpListener;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::daemon::shared::SharedState;

/// Binds `addr` (failing early, with the address in the error) and returns the server future
/// and the router it serves (which [`serve_tunnels`] serves too).
/// `auth` decides who may call what; with `tls` every connection speaks TLS; with `ui` the
/// web console is served at `/ui` and a browser asking for `/` is sent there. Connections are
/// bounded in time and number per peer (`connections`).
pub async fn serve(
    addr: SocketAddr,
    shared: SharedState,
    auth: Arc<auth::Auth>,
    tls: Option<Arc<rustls::ServerConfig>>,
    ui: bool,
) -> anyhow::Result<(SocketAddr, impl std::future::Future<Output = ()>, Router)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the HTTP API on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let app = router(shared, auth, bound, ui);
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    Ok((bound, connections::serve(listener, tls, app.clone()), app))
}

/// Serves `app` (the router [`serve`] answers with) on the API tunnels other nodes open to this
/// one over the cluster transport. Runs until the transport stops.
pub async fn serve_tunnels(listener: chorus_io::transport::libp2p::TunnelListener, app: Router) {
    connections::serve_tunnels(listener, app).await
}

/// The state every handler reads: the daemon's shared state and the address the API listens
/// on.
type ApiState = (SharedState, SocketAddr);

/// The routes of the API, each registered with its OpenAPI operation (`#[utoipa::path]` next
/// to its handler): the router and the document (`openapi`) come from this one list. Not here:
/// `/` and the web console's files (`router`), which `/` documents by hand.
fn api_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(status::healthz))
        .routes(routes!(status::readyz))
        .routes(routes!(status::status))
        .routes(routes!(history::history))
        .routes(routes!(status::metrics))
        .routes(routes!(cluster::cluster))
        .routes(routes!(cluster_status::cluster_status))
        .routes(routes!(members::members, members::change_members))
        .routes(routes!(transfer::transfer))
        .routes(routes!(leave::leave))
        .routes(routes!(tasks::list_tasks, tasks::submit_task))
        .routes(routes!(tasks::get_task, tasks::cancel_task))
        .routes(routes!(logs::task_logs))
        .routes(routes!(sandboxes::list, sandboxes::create))
        .routes(routes!(sandboxes::get, sandboxes::close))
        .routes(routes!(sandboxes::exec))
        .routes(routes!(sandboxes::set_env))
        .routes(routes!(sandboxes::processes))
        .routes(routes!(sandboxes::kill_process))
        .routes(routes!(sandboxes::keep_alive))
        .routes(routes!(sandboxes::sync))
        .routes(routes!(
            sandbox_files::read_file,
            sandbox_files::write_file,
            sandbox_files::remove_file
        ))
        .routes(routes!(sandbox_files::list_dir))
        .routes(routes!(sandbox_files::read_tree, sandbox_files::write_tree))
        .routes(routes!(acl::create_token))
        .routes(routes!(acl::delegate))
        .routes(routes!(relay::relay))
        .routes(routes!(openapi::openapi_json))
}

/// Every route, behind the gatekeeper; `bound` is the address the API listens on.
fn router(shared: SharedState, auth: Arc<auth::Auth>, bound: SocketAddr, ui: bool) -> Router {
    let (api, _) = api_routes().split_for_parts();
    // `/` (documented in `openapi`) and the console: served outside the document's list, as
    // they are no API (the coverage test in `openapi` names them).
    let app = if ui {
        api.route("/", get(ui::root))
            .route(ui::PAGE, get(ui::page))
            .route(ui::SCRIPT, get(ui::script))
            .route(ui::STYLE, get(ui::style))
    } else {
        api.route("/", get(status::index))
    };
    app.layer(Extension(auth.clone()))
        .layer(Extension(Arc::new(cluster_status::Asker::default())))
        .layer(axum::middleware::from_fn_with_state(
            (shared.clone(), auth),
            auth::guard,
        ))
        .with_state((shared, bound))
}
