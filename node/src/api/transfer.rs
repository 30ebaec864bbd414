//! `POST /members/transfer` (`chorus members transfer [ID]`): asks the admin to hand its office
//! to a voter (`core/src/transfer.rs`), as etcd's `move-leader` does, and waits until this node
//! follows the new admin.
//!
//! Only the admin can hand over. Any other node refuses with 409 `not_admin`, naming the admin
//! and, when this node is connected to it and it advertised one, the admin's HTTP address, where
//! the CLI asks again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::{Event, HandoverRefusal, NodeId};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::members::{parse_node_id, wait_of};
use crate::daemon::operator::HandoverAnswer;
use crate::daemon::shared::SharedState;

/// The body of `POST /members/transfer`: `{"to": "<id>"}`, or `{}` (or nothing) for the
/// admin's pick.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TransferRequest)]
struct TransferBody {
    /// The voter to hand over to (absent: the admin's pick).
    #[serde(default)]
    to: Option<String>,
}

/// What `POST /members/transfer` answers.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TransferAnswer {
    /// `handed_over`, `refused` or `timed_out`.
    pub result: String,
    /// The new admin, once this node follows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
    /// Its term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// From the request to this node following the new admin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
    /// The core's reason, when refused (`not_admin`, `not_a_voter`, `not_up_to_date`,
    /// `no_candidate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The admin's HTTP address, when this node is not the admin and knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_http: Option<String>,
    /// A sentence for people.
    pub message: String,
}

impl TransferAnswer {
    fn new(result: &str, message: String) -> TransferAnswer {
        TransferAnswer {
            result: result.to_owned(),
            message,
            ..Default::default()
        }
    }
}

/// `POST /members/transfer?wait_ms=N`.
#[utoipa::path(
    post,
    path = "/members/transfer",
    tag = "members",
    summary = "Hand the admin's office to a voter",
    description = "Asks the admin to hand over to the voter named (or, with `{}` or no body, to \
        the one it picks), and waits until this node follows the new admin. Only the admin \
        hands over: any other node refuses with 409 `not_admin`, naming the admin and, when it \
        knows it, the admin's HTTP address (`admin_http`), where to ask again.",
    params(("wait_ms" = Option<u64>, Query, description = "How long to wait, ms (default 10000, at most 300000)")),
    request_body(content = TransferBody, description = "`{\"to\": \"<node id>\"}`, or `{}` (or no body) for the admin's pick"),
    responses(
        (status = 200, description = "Handed over: this node follows the new admin", body = TransferAnswer),
        (status = 400, description = "Not a body this route takes, or not a node id", body = String, content_type = "text/plain"),
        (status = 409, description = "Refused (`not_admin`, `not_a_voter`, `not_up_to_date`, `no_candidate`)", body = TransferAnswer),
        (status = 503, description = "The node is not running", body = TransferAnswer),
        (status = 504, description = "No new admin seen in time", body = TransferAnswer),
    )
)]
pub(super) async fn transfer(
    State((shared, _)): State<(SharedState, SocketAddr)>,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let to = match parse_body(&body) {
        Ok(to) => to,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let wait = match wait_of(&query) {
        Ok(wait) => wait,
        Err(refused) => return refused.into_response(),
    };
    let (code, answer) = hand_over(&shared, to, wait).await;
    (code, Json(answer)).into_response()
}

fn parse_body(body: &[u8]) -> Result<Option<NodeId>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let b: TransferBody = serde_json::from_slice(body)
        .map_err(|e| format!("expected {{\"to\": \"<node id>\"}} or {{}}: {e}"))?;
    b.to.map(|id| parse_node_id(&id)).transpose()
}

async fn hand_over(
    shared: &SharedState,
    to: Option<NodeId>,
    wait: Duration,
) -> (StatusCode, TransferAnswer) {
    let started = tokio::time::Instant::now();
    let (tx, rx) = oneshot::channel();
    let queued = crate::daemon::shared::queue(
        shared,
        |request| Event::TransferAdmin { to, request },
        |ops, request| {
            ops.handover_waiters.insert(request, tx);
        },
    );
    let request = match queued {
        Ok(r) => r,
        Err(why) => {
            let a = TransferAnswer::new("refused", why.to_owned());
            return (StatusCode::SERVICE_UNAVAILABLE, a);
        }
    };
    let deadline = started + wait;
    let answer = match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(a)) => a,
        _ => {
            let mut s = shared.lock();
            if let Some(ops) = s.operator.as_mut() {
                ops.handover_waiters.remove(&request);
            }
            let msg = "the node did not take the request in time".to_owned();
            return (
                StatusCode::GATEWAY_TIMEOUT,
                TransferAnswer::new("timed_out", msg),
            );
        }
    };
    match answer {
        HandoverAnswer::Refused { reason, admin } => refused(shared, reason, admin),
        HandoverAnswer::Started { term, target } => {
            follow(shared, term, target, started, deadline).await
        }
    }
}

fn refused(
    shared: &SharedState,
    reason: HandoverRefusal,
    admin: Option<NodeId>,
) -> (StatusCode, TransferAnswer) {
    let s = shared.lock();
    let connected = |a: &NodeId| s.core.as_ref().is_some_and(|c| c.peers().contains(a));
    let admin_http = admin.as_ref().filter(|a| connected(a)).and_then(|a| {
        (s.transport_stats.as_ref()).and_then(|t| t.peer_http().get(a.as_str()).cloned())
    });
    let message = match (reason, &admin, &admin_http) {
        (HandoverRefusal::NotAdmin, Some(a), Some(h)) => {
            format!("this node is not the admin; the admin is {a}: ask it at {h}")
        }
        (HandoverRefusal::NotAdmin, Some(a), None) => {
            format!("this node is not the admin; the admin is {a}, ask it there")
        }
        (HandoverRefusal::NotAdmin, None, _) => {
            "this node is not the admin and knows of none: no election has finished".to_owned()
        }
        (HandoverRefusal::NotAVoter, ..) => {
            "the node named is not another voter of the electorate (`chorus members` lists them)"
                .to_owned()
        }
        (HandoverRefusal::NotUpToDate, ..) => {
            "the voter named has not acknowledged the admin's electorate lately (down, cut off \
             or behind); name another, or none for the admin's pick"
                .to_owned()
        }
        (HandoverRefusal::NoCandidate, ..) => {
            "no other voter is up to date and reachable: nobody to hand over to".to_owned()
        }
    };
    let answer = TransferAnswer {
        reason: Some(reason.as_str().to_owned()),
        admin: admin.map(|a| a.to_string()),
        admin_http,
        ..TransferAnswer::new("refused", message)
    };
    (StatusCode::CONFLICT, answer)
}

/// Waits until this node follows an admin of a later term than `left`.
async fn follow(
    shared: &SharedState,
    left: u64,
    target: Option<NodeId>,
    started: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> (StatusCode, TransferAnswer) {
    loop {
        let now_admin = {
            let s = shared.lock();
            // An admin is known only for the node's own term.
            (s.core.as_ref())
                .filter(|c| c.term() > left)
                .and_then(|c| Some((c.admin()?.clone(), c.term())))
        };
        if let Some((admin, term)) = now_admin {
            let took = started.elapsed().as_millis() as u64;
            let asked = match &target {
                Some(t) if *t != admin => format!(" ({t} was asked; it did not win)"),
                _ => String::new(),
            };
            let answer = TransferAnswer {
                admin: Some(admin.to_string()),
                term: Some(term),
                took_ms: Some(took),
                ..TransferAnswer::new(
                    "handed_over",
                    format!("{admin} is admin of term {term}, {took} ms after the request{asked}"),
                )
            };
            return (StatusCode::OK, answer);
        }
        if tokio::time::Instant::now() >= deadline {
            let msg = format!(
                "stepped down from term {left}{}; no new admin seen here yet: check `chorus \
                 status`",
                target.map_or(String::new(), |t| format!(" and asked {t} to stand"))
            );
            return (
                StatusCode::GATEWAY_TIMEOUT,
                TransferAnswer::new("timed_out", msg),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_bodies_are_checked() {
        let id = "12D3KooWLJu94BJSujZvmyLfAv2iiboi2skJPVNamQpZcUkLpuft";
        assert_eq!(parse_body(b""), Ok(None));
        assert_eq!(parse_body(b"{}"), Ok(None));
        let named = format!(r#"{{"to":"{id}"}}"#);
        assert_eq!(parse_body(named.as_bytes()), Ok(Some(NodeId::from(id))));
        for bad in [
            &br#"{"to":"foo"}"#[..],
            br#"{"node":"x"}"#,
            br#"{"to":""}"#,
            b"not json",
        ] {
            assert!(parse_body(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
