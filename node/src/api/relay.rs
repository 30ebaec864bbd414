//! `/nodes/{node}/api/{path}`: a call for another node's API, relayed by the node asked, for a
//! node whose API the caller cannot reach — bound to its own loopback on another host, as
//! docs/operations.md suggests (issue 54, item 8). The CLI takes this way when a node advertised
//! no API it can reach (`task logs` from a worker, a peer's `/status`).
//!
//! Trust: the caller's token is checked here for what the call needs at `node`, and at least
//! `read` even for a route public there (`auth::required_role`): the relaying node works on the
//! caller's behalf. The call goes on over an API tunnel of the cluster transport with a token
//! delegated to `node` alone, which `node` checks again; a delegated token is never relayed
//! again, so there are no chains and no loops.

use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};

use super::auth::relayed;
use super::sandbox_forward::Refused;
use super::sandboxes::Asked;

/// How long a relayed call may take (beside the forwarding margin): a log read that follows
/// waits up to 20 s for news.
const RELAY_WAIT: Duration = Duration::from_secs(30);

/// `GET|POST|PUT|DELETE /nodes/{node}/api/{path}`.
#[utoipa::path(
    method(get, post, put, delete),
    path = "/nodes/{node}/api/{*path}",
    tag = "cluster",
    summary = "A call relayed to another node",
    description = "The call `/{path}` (with its query and body) made at node `node` on the \
        caller's behalf, through the cluster transport, with a token delegated to that node \
        alone: for a node whose API the caller cannot reach (bound to its own loopback). \
        Needs what the call needs there, and at least `read`. Its answer comes back as that \
        node gave it, streamed as it comes. A relayed call is not relayed again.",
    params(
        ("node" = String, Path, description = "The node's id"),
        ("path" = String, Path, description = "The call's path at that node, without its leading `/`"),
    ),
    responses(
        (status = 200, description = "That node's answer, as it gave it"),
        (status = 400, description = "This node itself is named", body = crate::api::openapi::Refusal),
        (status = 503, description = "That node is not connected to this one now, did not answer in time, or the call was itself relayed", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn relay(asked: Asked, body: Body) -> Response {
    // The path as it came, not as the router decoded it: the gatekeeper judged this one, and
    // the node called gets it as the caller wrote it.
    let Some((node, inner)) = relayed(asked.path()) else {
        return Refused(400, "not a relayed call".into()).into_response();
    };
    if asked.is_this_node(node) {
        return Refused(
            400,
            format!("node {node} is the node asked: call {inner} at its own API"),
        )
        .into_response();
    }
    let target = match asked.query() {
        Some(q) => format!("{inner}?{q}"),
        None => inner.to_owned(),
    };
    asked.relay_to(node, &target, body, RELAY_WAIT).await
}
