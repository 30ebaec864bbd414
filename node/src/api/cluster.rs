//! `GET /cluster`: this node's view of every node it knows, with the HTTP address each
//! advertised (`chorus status --cluster` asks each of them for its own `/status`).

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::NodeId;
use serde::Serialize;

use crate::daemon::shared::{Shared, SharedState};

/// The `/cluster` document: one node's view of every node it knows.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ClusterView {
    /// The node answering.
    pub node_id: String,
    /// Its term.
    pub term: u64,
    /// The admin it knows.
    pub admin: Option<String>,
    /// Itself first, then the others in id order.
    pub members: Vec<Member>,
}

/// One node as another sees it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Member {
    pub node_id: String,
    /// The HTTP API it advertised (its own `/status` has its role, term and lease).
    pub http: Option<String>,
    /// A member of the electorate.
    pub voter: bool,
    /// Connected to the answering node right now.
    pub connected: bool,
    /// Milliseconds since the answering node last heard from it.
    pub last_contact_ms: Option<u64>,
}

impl Shared {
    /// This node's view of the cluster: itself, every connected peer and every member of the
    /// electorate, with the HTTP address each advertised and when it was last heard from.
    pub fn cluster(&self, http: &str) -> Option<ClusterView> {
        let core = self.core.as_ref()?;
        let advertised = self
            .transport_stats
            .as_ref()
            .map(|t| t.peer_http())
            .unwrap_or_default();
        let electorate: Vec<String> = core
            .electorate()
            .map(|e| e.members().iter().map(NodeId::to_string).collect())
            .unwrap_or_default();
        let mut ids: std::collections::BTreeSet<String> =
            core.peers().ids().map(NodeId::to_string).collect();
        ids.extend(electorate.iter().cloned());
        ids.remove(&self.node_id);
        let mut members = vec![Member {
            node_id: self.node_id.clone(),
            http: Some(if self.http_url.is_empty() {
                http.to_owned()
            } else {
                self.http_url.clone()
            }),
            voter: electorate.contains(&self.node_id),
            connected: true,
            last_contact_ms: Some(0),
        }];
        for id in ids {
            let connected = core.peers().contains(&NodeId::from(id.as_str()));
            members.push(Member {
                http: advertised.get(&id).cloned(),
                voter: electorate.contains(&id),
                connected,
                last_contact_ms: self
                    .last_contact
                    .get(&id)
                    .map(|t| t.elapsed().as_millis() as u64),
                node_id: id,
            });
        }
        Some(ClusterView {
            node_id: self.node_id.clone(),
            term: core.term(),
            admin: core.admin().map(NodeId::to_string),
            members,
        })
    }
}

/// `GET /cluster`.
#[utoipa::path(
    get,
    path = "/cluster",
    tag = "cluster",
    summary = "Every node this node knows",
    description = "This node's view of the cluster: itself, every connected peer and every \
        member of the electorate, with the HTTP address each advertised and when it was last \
        heard from.",
    responses(
        (status = 200, description = "The view", body = ClusterView),
        (status = 503, description = "`starting`", body = String, content_type = "text/plain"),
    )
)]
pub(super) async fn cluster(State((shared, bound)): State<(SharedState, SocketAddr)>) -> Response {
    match shared.lock().cluster(&bound.to_string()) {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}
