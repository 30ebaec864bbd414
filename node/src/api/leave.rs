//! `POST /members/leave` (`chorus members leave`): the node asked retires itself, as Consul's
//! `leave` or an etcd member removing itself. A voter asks the admin to remove it (the admin,
//! asked of itself, proposes its own removal and hands over once it commits, as a graceful
//! stop does), waits for the commit, answers, and stops. The removal is an operator's, so the
//! electorate records it and autopilot never makes the node a voter again, whoever the admin
//! is (`core/src/membership.rs`), until an operator's `chorus members add`.
//!
//! A node that is no voter (a standby, a worker) has nothing to remove: it just stops.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::MemberChange;

use super::members::{submit, wait_of, ChangeAnswer};
use crate::daemon::shared::SharedState;

/// How long after answering the node stops: the answer leaves first.
const STOP_AFTER: Duration = Duration::from_millis(200);

/// `POST /members/leave?wait_ms=N`.
#[utoipa::path(
    post,
    path = "/members/leave",
    tag = "members",
    summary = "Retire this node from the cluster",
    description = "The node asked removes itself from the electorate (an operator's removal: \
        autopilot will not make it a voter again until `POST /members` adds it), waits for the \
        change to commit, answers, and then stops as on SIGTERM. A node that is no voter has \
        nothing to remove and just stops (`result` `stopped`).",
    params(("wait_ms" = Option<u64>, Query, description = "How long to wait for the removal to commit, ms (default 10000, at most 300000)")),
    responses(
        (status = 200, description = "Removed (or not a voter); the node stops now", body = ChangeAnswer),
        (status = 400, description = "`wait_ms` is not a number", body = String, content_type = "text/plain"),
        (status = 409, description = "Refused, with the core's reason; the node keeps running", body = ChangeAnswer),
        (status = 503, description = "The node is not running (starting or stopping)", body = ChangeAnswer),
        (status = 504, description = "Not committed in time; the node keeps running (the removal may still commit)", body = ChangeAnswer),
    )
)]
pub(super) async fn leave(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let wait = match wait_of(&query) {
        Ok(wait) => wait,
        Err(refused) => return refused.into_response(),
    };
    let (code, answer) = retire(&shared, wait).await;
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(answer)).into_response()
}

/// Removes this node from the electorate if it is a voter, and stops it once that commits (or
/// at once, if it is no voter). Returns the status code and the answer.
pub async fn retire(shared: &SharedState, wait: Duration) -> (u16, ChangeAnswer) {
    let seen = {
        let s = shared.lock();
        s.core.as_ref().map(|c| {
            let me = c.id().clone();
            let voter = c.electorate().is_some_and(|e| e.contains(&me));
            (me, voter)
        })
    };
    let Some((me, voter)) = seen else {
        let change = MemberChange::Remove {
            node: shared.lock().node_id.as_str().into(),
        };
        let msg = "the node is not running (starting or stopping)".to_owned();
        return (503, answer("refused", change, None, msg));
    };
    let change = MemberChange::Remove { node: me };
    if !voter {
        stop_soon(shared);
        let msg = "this node is not a voter (a standby or a worker): nothing to remove; it \
                   stops now"
            .to_owned();
        return (200, answer("stopped", change, None, msg));
    }
    let (code, mut answer) = submit(shared, change, wait).await;
    if code == 200 {
        answer.message = format!(
            "left the cluster ({}); this node stops now, and autopilot will not make it a \
             voter again until `chorus members add {}`",
            answer.message,
            answer.change.node()
        );
        stop_soon(shared);
    } else {
        answer.message = format!("{}; this node keeps running", answer.message);
    }
    (code, answer)
}

/// Stops the node as SIGTERM does, once the answer has had time to leave.
fn stop_soon(shared: &SharedState) {
    let leave = shared.lock().leave.clone();
    tokio::spawn(async move {
        tokio::time::sleep(STOP_AFTER).await;
        leave.notify_one();
    });
}

fn answer(
    result: &str,
    change: MemberChange,
    version: Option<u64>,
    message: String,
) -> ChangeAnswer {
    ChangeAnswer {
        result: result.to_owned(),
        change,
        version,
        reason: None,
        message,
    }
}
