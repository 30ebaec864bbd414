//! How a call about a live sandbox reaches the node that holds it (issue 53): a request sent on
//! to that node's advertised API with a token delegated to it alone, pinned by its certificate
//! — or, when its API advertised no address this node reaches, through an API tunnel of the
//! cluster transport (issue 54, item 8) — never forwarded again; and what the caller hears
//! when it cannot be reached. Shared by the routes (`sandboxes`, `sandbox_files`, `relay`) and
//! the search for a sandbox's node (`sandbox_place`), which each build on it and not on one
//! another.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::auth::{unix_now, Auth, Caller, DELEGATION_TTL_S};
use super::cluster::Member;
use crate::daemon::shared::SharedState;
use crate::http1::{self, Endpoint};
use chorus_io::transport::libp2p::ApiTunnels;

/// A request refused before it reached the registry: the status and the reason.
#[derive(Debug)]
pub(super) struct Refused(pub(super) u16, pub(super) String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        answer(self.0, json!({ "error": self.1 }))
    }
}

/// The most a forwarded answer may carry: a file of the registry's bound, in base64 and JSON.
pub(super) const MAX_FORWARDED_BYTES: u64 = 96 << 20;

/// How long a forwarded call may take besides the command's own timeout.
pub(super) const FORWARD_MARGIN: Duration = Duration::from_secs(30);

/// The `Host` of a call through an API tunnel: the node at the other end, which answers to
/// `localhost` as any node does.
pub(super) const TUNNEL_HOST: &str = "localhost";

/// How a request reaches node `to` on the caller's behalf: the way there and a token delegated
/// to it alone ([`reach`]).
pub(super) struct Reach {
    way: Way,
    token: String,
}

/// The way to a node's API.
enum Way {
    /// Its advertised address, TLS pinned by the certificate the address names.
    Http(Endpoint, Option<Arc<rustls::ClientConfig>>),
    /// An API tunnel of the cluster transport (`chorus_io::transport::libp2p::ApiTunnels`): its
    /// API advertised no address this node reaches (bound to its own loopback, as the docs
    /// suggest; issue 54, item 8).
    Tunnel(ApiTunnels, String),
}

impl Reach {
    /// Sends the request (its body as it comes, `(media type, body)`) and answers once the head
    /// of the answer came.
    pub(super) async fn open(
        self,
        method: &str,
        path: &str,
        body: Option<(&str, axum::body::Body)>,
    ) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        let token = Some(self.token.as_str());
        match self.way {
            Way::Http(endpoint, tls) => {
                http1::open(&endpoint, tls, method, path, body, token).await
            }
            Way::Tunnel(tunnels, node) => {
                let stream = tunnels.open(&node).await?;
                http1::open_on(Box::new(stream), TUNNEL_HOST, method, path, body, token).await
            }
        }
    }

    /// Sends the request and reads its whole answer, at most `limit` bytes.
    pub(super) async fn send(
        self,
        method: &str,
        path: &str,
        body: Option<&str>,
        limit: u64,
    ) -> anyhow::Result<http1::RawAnswer> {
        let token = Some(self.token.as_str());
        match self.way {
            Way::Http(endpoint, tls) => {
                http1::send(&endpoint, tls, method, path, body, token, limit).await
            }
            Way::Tunnel(tunnels, node) => {
                let stream = tunnels.open(&node).await?;
                let stream = Box::new(stream);
                http1::send_on(stream, TUNNEL_HOST, method, path, body, token, limit).await
            }
        }
    }
}

/// How a request reaches node `to` on the caller's behalf: at its advertised API, or through an
/// API tunnel (`tunnels`) when it advertised none this node reaches; or the answer to give
/// when it cannot.
pub(super) fn reach(
    auth: &Auth,
    caller: &Caller,
    to: &Member,
    tunnels: Option<ApiTunnels>,
) -> Result<Reach, Refused> {
    if caller.delegated {
        // A forwarded call stops at the node it was sent to: no chains, no loops.
        return Err(Refused(
            503,
            format!(
                "a forwarded call is not forwarded again (to {})",
                to.node_id
            ),
        ));
    }
    let Some(token) = auth
        .key()
        .delegate(caller, &to.node_id, unix_now() + DELEGATION_TTL_S)
    else {
        return Err(Refused(
            502,
            format!("{} is not a node id to delegate to", to.node_id),
        ));
    };
    let endpoint = match to.http.as_deref().map(Endpoint::parse) {
        Some(Ok(e)) => e,
        _ => {
            return match tunnels {
                Some(t) => Ok(Reach {
                    way: Way::Tunnel(t, to.node_id.clone()),
                    token,
                }),
                None => Err(Refused(
                    503,
                    format!(
                        "the sandbox's node {} advertised no API this node can reach (an API \
                         bound to its own loopback answers its own host only), and this node \
                         has no cluster transport to tunnel through",
                        to.node_id
                    ),
                )),
            };
        }
    };
    let tls = match (&endpoint.tls, &endpoint.pin) {
        (false, _) => None,
        (true, Some(pin)) => match http1::pinned(pin.clone()) {
            Ok(t) => Some(t),
            Err(e) => return Err(Refused(502, e.to_string())),
        },
        (true, None) => {
            return Err(Refused(
                502,
                format!("{}'s API pins no certificate", to.node_id),
            ))
        }
    };
    Ok(Reach {
        way: Way::Http(endpoint, tls),
        token,
    })
}

/// What a request to `to` that failed answers: a refused connection is a node whose process
/// is down, its sandboxes ended with it (410 lost); anything else 503.
pub(super) fn unanswered(to: &Member, e: &anyhow::Error) -> Response {
    let refused = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    });
    if refused {
        return answer(
            410,
            json!({
                "error": format!("the sandbox is gone: lost, its node {} is down ({e})", to.node_id),
                "gone": { "reason": "lost", "detail": format!("node {} is down", to.node_id) },
            }),
        );
    }
    Refused(
        503,
        format!("the sandbox's node {} did not answer: {e}", to.node_id),
    )
    .into_response()
}

/// The 503 of a request to `to` that took longer than `bound`.
pub(super) fn too_slow(to: &Member, bound: Duration) -> Response {
    Refused(
        503,
        format!(
            "the sandbox's node {} did not answer within {bound:?}",
            to.node_id
        ),
    )
    .into_response()
}

/// A request sent to node `to` on the caller's behalf ([`reach`]) and its whole answer; or the
/// answer to give when it could not be sent or answered. `wait` bounds it (beside
/// [`FORWARD_MARGIN`]).
#[allow(clippy::too_many_arguments)]
pub(super) async fn send_to(
    shared: &SharedState,
    auth: &Auth,
    caller: &Caller,
    to: &Member,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    wait: Duration,
) -> Result<http1::RawAnswer, Response> {
    let tunnels = shared.lock().tunnels.clone();
    let reach = reach(auth, caller, to, tunnels).map_err(IntoResponse::into_response)?;
    let body = match body.map(std::str::from_utf8).transpose() {
        Ok(b) => b,
        Err(_) => return Err(bad("the body is not UTF-8 JSON")),
    };
    let sent = reach.send(method, path, body, MAX_FORWARDED_BYTES);
    match tokio::time::timeout(wait + FORWARD_MARGIN, sent).await {
        Ok(Ok(a)) => Ok(a),
        Ok(Err(e)) => Err(unanswered(to, &e)),
        Err(_) => Err(too_slow(to, wait + FORWARD_MARGIN)),
    }
}

pub(super) fn answer(code: u16, body: Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(body)).into_response()
}

pub(super) fn bad(error: impl std::fmt::Display) -> Response {
    answer(400, json!({ "error": error.to_string() }))
}
