//! `POST /acl/tokens` (role `manage`): makes a token of a role, as `chorus acl token create`
//! asks. Tokens are not stored (see [`super::auth`]): the answer is the only copy.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::{Auth, Role};

/// The body of `POST /acl/tokens`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateToken {
    role: Role,
}

/// The answer: the token (shown once), its id and role.
#[derive(Debug, Serialize, Deserialize)]
pub struct NewToken {
    pub token: String,
    pub id: String,
    pub role: Role,
}

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
