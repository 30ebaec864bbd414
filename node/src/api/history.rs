//! `GET /status/history`: what this node saw lately — its role and term, the admin it knew,
//! its lease, its peers coming and going — as the daemon's bounded timeline keeps it
//! ([`crate::daemon::timeline`]). The console draws its election timeline from it: the whole
//! kept history when a page opens (`full`), then, asked with `?epoch=E&after=SEQ`, only the
//! changes since. Public like `/status`, and as bounded: at most
//! [`MAX_CHANGES`](crate::daemon::timeline::MAX_CHANGES) changes in an answer.

use std::net::SocketAddr;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::daemon::shared::SharedState;
use crate::daemon::timeline::{History, Since, WINDOW_MS};

/// The query: both absent for the whole history.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct Ask {
    /// The history the reader holds (`epoch` of an earlier answer); another one (the node
    /// restarted) is answered whole.
    epoch: Option<u64>,
    /// The last change the reader holds (`last_seq` of an earlier answer).
    after: Option<u64>,
}

/// The answer: the node, its clock now (the changes' times are on it), and the history.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = StatusHistory)]
pub struct Answer {
    pub node_id: String,
    pub now_ms: u64,
    /// How far back the node keeps changes.
    pub window_ms: u64,
    #[serde(flatten)]
    pub history: History,
}

/// `GET /status/history`.
#[utoipa::path(
    get,
    path = "/status/history",
    tag = "health",
    params(Ask),
    summary = "What this node saw lately",
    description = "Its role and term, the admin it knew, its lease, its peers coming and going, \
        as a bounded timeline: the whole kept history (`full`), or, asked with `epoch` and \
        `after`, only the changes since.",
    responses(
        (status = 200, description = "The history", body = Answer),
        (status = 503, description = "`starting`", body = String, content_type = "text/plain"),
    )
)]
pub(super) async fn history(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(ask): Query<Ask>,
) -> Response {
    let s = shared.lock();
    let Some(now_ms) = s.now_ms() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response();
    };
    let answer = Answer {
        node_id: s.node_id.clone(),
        now_ms,
        window_ms: WINDOW_MS,
        history: s.timeline.since(Since {
            epoch: ask.epoch,
            after: ask.after,
        }),
    };
    // Written out after the lock is let go: the runtime loop waits on it.
    drop(s);
    Json(answer).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use chorus_core::{Config, Core, Event, ADMIN_ELECTION};
    use serde_json::Value;
    use std::sync::Arc;
    use tower::ServiceExt;

    /// `path` through the whole router (the gatekeeper included), with no token.
    async fn get(shared: &SharedState, path: &str) -> (StatusCode, Value) {
        let key = super::super::auth::AclKey::from_hex(&"ab".repeat(32)).unwrap();
        let auth = Arc::new(super::super::auth::Auth::new(key, Vec::new()));
        let app = super::super::router(
            shared.clone(),
            auth,
            "127.0.0.1:7070".parse().unwrap(),
            true,
        );
        let request = Request::get(path).header("host", "127.0.0.1:7070");
        let r = app
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn the_history_is_public_whole_at_first_then_what_followed() {
        let shared = SharedState::default();
        assert_eq!(
            get(&shared, "/status/history").await.0,
            StatusCode::SERVICE_UNAVAILABLE,
            "nothing before recovery"
        );
        let mut core = Core::new(
            "me".into(),
            Config::default(),
            vec![ADMIN_ELECTION.into()],
            1,
        )
        .unwrap();
        core.step(5, Event::Started, &mut Vec::new());
        {
            let mut s = shared.lock();
            s.timeline = crate::daemon::timeline::Timeline::begin(42, 5, &core);
            s.core = Some(core);
            s.timeline.record(
                5,
                crate::daemon::timeline::Change::Peer {
                    node: "other".into(),
                    up: true,
                },
            );
        }
        let (code, whole) = get(&shared, "/status/history").await;
        assert_eq!(code, StatusCode::OK, "no token needed");
        assert_eq!(whole["full"], true);
        assert_eq!(whole["epoch"], 42);
        assert_eq!(whole["start"]["role"], "follower");
        assert_eq!(whole["changes"][0]["kind"], "peer");
        assert_eq!(whole["changes"][0]["node"], "other");
        assert_eq!(
            whole["now_ms"], 5,
            "the node's clock, that the changes' times are on"
        );
        let last = whole["last_seq"].as_u64().unwrap();
        let (_, next) = get(&shared, &format!("/status/history?epoch=42&after={last}")).await;
        assert_eq!(next["full"], false);
        assert!(next.get("start").is_none());
        assert_eq!(next["changes"], serde_json::json!([]));
    }
}
