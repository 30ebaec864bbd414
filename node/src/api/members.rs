//! `GET /members` (this node's view of voters and standbys) and `POST /members` (add or remove
//! a voter; any node forwards to the admin).
//!
//! A change is an [`Event::ChangeMembers`] handed to the runtime loop (see
//! [`crate::daemon::operator`]); the handler waits for the notice that settles it: committed,
//! or refused with the core's reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::{ChangeOutcome, Event, MemberChange, NodeId, ADMIN_ELECTION};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::daemon::shared::{Shared, SharedState};
use crate::wire::{MemberRow, MembersView};

/// How long `POST /members` waits for the change to commit unless the request says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The longest wait a request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// The `wait_ms` of a membership request (`POST /members`, `/members/transfer`,
/// `/members/leave`): [`DEFAULT_WAIT`] when absent, at most [`MAX_WAIT`]; a 400 when it is not a
/// number.
pub(super) fn wait_of(
    query: &BTreeMap<String, String>,
) -> Result<Duration, (StatusCode, &'static str)> {
    match query.get("wait_ms").map(|w| w.parse::<u64>()) {
        None => Ok(DEFAULT_WAIT),
        Some(Ok(ms)) => Ok(Duration::from_millis(ms).min(MAX_WAIT)),
        Some(Err(_)) => Err((
            StatusCode::BAD_REQUEST,
            "wait_ms: not a number of milliseconds\n",
        )),
    }
}

/// The longest node id accepted from an operator (a libp2p PeerId is about 52 characters).
const MAX_ID_LEN: usize = 128;

impl Shared {
    /// This node's view of the membership, or `None` before recovery finished.
    pub fn members(&self) -> Option<MembersView> {
        let core = self.core.as_ref()?;
        let now = self.now_ms()?;
        let me = core.id();
        let electorate = core.electorate();
        let row = |id: &NodeId, role: &str| {
            let peer = core.peers().get(id);
            let own = id == me;
            MemberRow {
                node_id: id.to_string(),
                role: role.to_owned(),
                admin: core.admin() == Some(id),
                reachable: own || peer.is_some(),
                last_contact_ms: if own {
                    Some(0)
                } else {
                    self.last_contact
                        .get(id.as_str())
                        .map(|t| t.elapsed().as_millis() as u64)
                },
                score: if own {
                    Some(core.score())
                } else {
                    peer.map(|p| p.score_at(now))
                },
            }
        };
        let mut members: Vec<MemberRow> = electorate
            .map(|e| e.members().iter().map(|m| row(m, "voter")).collect())
            .unwrap_or_default();
        let is_voter = |id: &NodeId| electorate.is_some_and(|e| e.contains(id));
        if !is_voter(me) && self.capabilities.iter().any(|c| c == ADMIN_ELECTION) {
            members.push(row(me, "standby"));
        }
        for (id, peer) in core.peers().iter() {
            if peer.eligible() && !is_voter(id) {
                members.push(row(id, "standby"));
            }
        }
        members[electorate.map_or(0, |e| e.len())..].sort_by(|a, b| a.node_id.cmp(&b.node_id));
        Some(MembersView {
            node_id: me.to_string(),
            term: core.term(),
            admin: core.admin().map(NodeId::to_string),
            version: electorate.map_or(0, |e| e.version),
            version_term: electorate.map_or(0, |e| e.term),
            members,
            removed: electorate
                .map(|e| e.retired().iter().map(NodeId::to_string).collect())
                .unwrap_or_default(),
        })
    }
}

/// `GET /members`.
#[utoipa::path(
    get,
    path = "/members",
    tag = "members",
    summary = "Voters and standbys",
    description = "This node's view of the membership: the electorate's voters (first), then the \
        admin-eligible standbys, each with whether it is reachable and its score.",
    responses(
        (status = 200, description = "The membership", body = MembersView),
        (status = 503, description = "`starting`", body = String, content_type = "text/plain"),
    )
)]
pub(super) async fn members(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    match shared.lock().members() {
        Some(view) => Json(view).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

/// `POST /members?wait_ms=N` with `{"op": "add"|"remove", "node": "<id>"}`: waits until the
/// change commits (200), is refused (409, with the reason) or `wait_ms` passes (504).
#[utoipa::path(
    post,
    path = "/members",
    tag = "members",
    summary = "Add or remove a voter",
    description = "Any node forwards the change to the admin. Waits until the change commits \
        (200), is refused (409, with the core's reason) or `wait_ms` passes (504: it may still \
        commit).",
    params(("wait_ms" = Option<u64>, Query, description = "How long to wait for the change to settle, ms (default 10000, at most 300000)")),
    request_body = crate::api::openapi::MemberChangeDoc,
    responses(
        (status = 200, description = "Committed", body = ChangeAnswer),
        (status = 400, description = "Not a change, or not a node id", body = String, content_type = "text/plain"),
        (status = 409, description = "Refused, with the core's reason", body = ChangeAnswer),
        (status = 503, description = "The node is not running (starting or stopping)", body = ChangeAnswer),
        (status = 504, description = "Not settled in time; it may still commit", body = ChangeAnswer),
    )
)]
pub(super) async fn change_members(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let change = match parse_change(&body) {
        Ok(c) => c,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let wait = match wait_of(&query) {
        Ok(wait) => wait,
        Err(refused) => return refused.into_response(),
    };
    let (code, answer) = submit(&shared, change, wait).await;
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(answer)).into_response()
}

/// The body of `POST /members`: `{"op": "add"|"remove", "node": "<id>"}`.
pub fn parse_change(body: &[u8]) -> Result<MemberChange, String> {
    let change: MemberChange = serde_json::from_slice(body).map_err(|e| {
        format!("expected {{\"op\": \"add\" or \"remove\", \"node\": \"<node id>\"}}: {e}")
    })?;
    parse_node_id(change.node().as_str())?;
    Ok(change)
}

/// A node id from an operator: a peer id, as `chorus status` and `chorus members` print it.
pub fn parse_node_id(id: &str) -> Result<NodeId, String> {
    if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(|c| c.is_whitespace()) {
        return Err(format!(
            "not a node id: {id:?} (1 to {MAX_ID_LEN} characters, no spaces)"
        ));
    }
    if id.parse::<libp2p::PeerId>().is_err() {
        return Err(format!(
            "not a node id: {id:?} (a node id is a peer id such as 12D3KooW…, as `chorus \
             status` and `chorus members` print it)"
        ));
    }
    Ok(NodeId::from(id))
}

/// What `POST /members` answers.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChangeAnswer {
    /// `committed`, `refused` or `timed_out`.
    pub result: String,
    /// The change asked for.
    #[schema(value_type = crate::api::openapi::MemberChangeDoc)]
    pub change: MemberChange,
    /// The committed electorate version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// The core's reason, when refused (snake_case, stable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A sentence for people.
    pub message: String,
}

/// Submits `change` and waits up to `wait` for it to settle. Returns the HTTP status code
/// and the answer: 200 committed, 409 refused, 504 not settled in time, 503 the node is not
/// running (starting, or stopping).
pub async fn submit(
    shared: &SharedState,
    change: MemberChange,
    wait: Duration,
) -> (u16, ChangeAnswer) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let queued = crate::daemon::shared::queue(
        shared,
        |request| Event::ChangeMembers {
            change: change.clone(),
            request,
        },
        |ops, request| {
            ops.waiters.insert(request, tx);
        },
    );
    let request = match queued {
        Ok(r) => r,
        Err(why) => return (503, answer("refused", change, None, None, why.to_owned())),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(ChangeOutcome::Committed { version })) => {
                let msg = format!("committed: the electorate is now version {version}");
                return (200, answer("committed", change, Some(version), None, msg));
            }
            Ok(Some(ChangeOutcome::Refused { reason })) => {
                let name = serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned));
                let msg = format!("refused: {}", reason.explain());
                return (409, answer("refused", change, None, name, msg));
            }
            Ok(Some(other)) => last = Some(other),
            Ok(None) | Err(_) => break,
        }
    }
    shared
        .lock()
        .operator
        .as_mut()
        .map(|ops| ops.waiters.remove(&request));
    let so_far = match last {
        Some(ChangeOutcome::Forwarded { admin }) => {
            format!("forwarded to the admin {admin}, which has not answered")
        }
        Some(ChangeOutcome::Proposed { version }) => {
            format!("proposed as version {version}, not yet acknowledged by majorities")
        }
        _ => "not yet handled".to_owned(),
    };
    let msg = format!(
        "not settled within {} ms ({so_far}); it may still commit: check `chorus members`",
        wait.as_millis()
    );
    (504, answer("timed_out", change, None, None, msg))
}

fn answer(
    result: &str,
    change: MemberChange,
    version: Option<u64>,
    reason: Option<String>,
    message: String,
) -> ChangeAnswer {
    ChangeAnswer {
        result: result.to_owned(),
        change,
        version,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_bodies_are_checked() {
        let id = "12D3KooWLJu94BJSujZvmyLfAv2iiboi2skJPVNamQpZcUkLpuft";
        let ok = parse_change(format!(r#"{{"op":"add","node":"{id}"}}"#).as_bytes()).unwrap();
        assert_eq!(
            ok,
            MemberChange::Add {
                node: NodeId::from(id)
            }
        );
        let err = parse_change(br#"{"op":"add","node":"foo"}"#).unwrap_err();
        assert!(err.contains("\"foo\"") && err.contains("peer id"), "{err}");
        for bad in [
            &br#"{"op":"promote","node":"a"}"#[..],
            br#"{"op":"add"}"#,
            br#"{"op":"add","node":""}"#,
            br#"{"op":"remove","node":"a b"}"#,
            b"not json",
        ] {
            assert!(
                parse_change(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = format!(r#"{{"op":"add","node":"{}"}}"#, "x".repeat(MAX_ID_LEN + 1));
        assert!(parse_change(long.as_bytes()).is_err());
    }
}
