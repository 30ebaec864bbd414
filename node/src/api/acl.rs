//! `POST /acl/tokens` (role `manage`): makes a token of a role, as `chorus acl token create`
//! asks. Tokens are not stored (see [`super::auth`]): the answer is the only copy.
//!
//! `POST /acl/delegate` (any token): the caller's token, delegated to one node for a short
//! while, for the CLI to send to a peer's advertised address instead of the token itself.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::{unix_now, Auth, Caller, Role, DELEGATION_TTL_S};

/// The body of `POST /acl/tokens`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    /// The new token's role.
    role: Role,
}

/// The answer: the token (shown once), its id and role.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewToken {
    pub token: String,
    pub id: String,
    pub role: Role,
}

/// `POST /acl/tokens`.
#[utoipa::path(
    post,
    path = "/acl/tokens",
    tag = "acl",
    summary = "Make a token",
    description = "Makes a token of the role asked (what `chorus acl token create` asks). Tokens \
        are not stored: the answer is the only copy. Any node holding the same ACL key accepts \
        it; revoking it means changing the key.",
    request_body = CreateToken,
    responses(
        (status = 201, description = "The token", body = NewToken),
        (status = 400, description = "Not `{\"role\": …}`", body = crate::api::openapi::Refusal),
        (status = 500, description = "No randomness", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn create_token(Extension(auth): Extension<Arc<Auth>>, body: Bytes) -> Response {
    let ask: CreateToken = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            let error = format!("expected {{\"role\": \"read|submit|operate|manage\"}}: {e}");
            return (
                StatusCode::BAD_REQUEST,
                Json(serde_json::json!({ "error": error })),
            )
                .into_response();
        }
    };
    match auth.key().mint_new(ask.role) {
        Ok((token, id)) => {
            tracing::info!(role = %ask.role, id, "API token made");
            let answer = NewToken {
                token,
                id,
                role: ask.role,
            };
            (StatusCode::CREATED, Json(answer)).into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// The body of `POST /acl/delegate`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DelegateRequest)]
struct Delegate {
    /// The node (its id) the delegated token is for.
    audience: String,
}

/// The answer: the delegated token and when it expires (Unix seconds).
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Delegated {
    pub token: String,
    pub expires_unix: u64,
}

/// `POST /acl/delegate`.
#[utoipa::path(
    post,
    path = "/acl/delegate",
    tag = "acl",
    summary = "Delegate the caller's token to one node",
    description = "The caller's token, delegated to the node named for 120 s: what a client \
        sends to a peer's advertised address instead of the token itself (a peer that is not \
        what it claims learns a token it can spend only on itself, briefly). A delegated token \
        cannot be delegated again.",
    request_body = Delegate,
    responses(
        (status = 200, description = "The delegated token", body = Delegated),
        (status = 400, description = "Not `{\"audience\": …}`, or not a node id", body = crate::api::openapi::Refusal),
        (status = 403, description = "A delegated token cannot be delegated again", body = crate::api::openapi::Refusal),
    )
)]
pub(super) async fn delegate(
    Extension(auth): Extension<Arc<Auth>>,
    caller: Option<Extension<Caller>>,
    body: Bytes,
) -> Response {
    let refuse = |code: StatusCode, error: String| {
        (code, Json(serde_json::json!({ "error": error }))).into_response()
    };
    // The guard lets no request here without a token; a missing caller is a bug, refused.
    let Some(Extension(caller)) = caller else {
        return refuse(StatusCode::UNAUTHORIZED, "this route needs a token".into());
    };
    if caller.delegated {
        return refuse(
            StatusCode::FORBIDDEN,
            "a delegated token cannot be delegated again".into(),
        );
    }
    let ask: Delegate = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"audience\": \"<node id>\"}}: {e}"),
            )
        }
    };
    let expires_unix = unix_now() + DELEGATION_TTL_S;
    match auth.key().delegate(&caller, &ask.audience, expires_unix) {
        Some(token) => Json(Delegated {
            token,
            expires_unix,
        })
        .into_response(),
        None => refuse(
            StatusCode::BAD_REQUEST,
            format!("{:?} is not a node id", ask.audience),
        ),
    }
}
