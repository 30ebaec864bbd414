//! The OpenAPI 3.1 document of the HTTP API (issue 55), served at `GET /openapi.json` and kept
//! in `docs/openapi.json`.
//!
//! Each operation is written next to its handler (`#[utoipa::path]`), and the router registers
//! those handlers through `utoipa_axum`'s [`OpenApiRouter`](utoipa_axum::router::OpenApiRouter)
//! (`super::api_routes`): a route and its operation come from the same line, so the router
//! cannot serve a route the document lacks. Who may call a route is not written per handler:
//! [`document`] asks the gatekeeper ([`super::auth::required_role`]) for every operation and
//! writes the role needed, the bearer-token requirement and the gatekeeper's refusals into it.
//!
//! The answers' schemas are the types the handlers serialize wherever the node defines them
//! (`wire`, `status`, `cluster`, …). The types of `chorus-core` (a task's spec and result, a
//! membership change) are mirrored here, field for field — core does not depend on utoipa —
//! and a test checks each mirror against a fully filled value of the type it mirrors. The
//! answers a handler builds with `json!` (most of `/sandboxes`) are described here by
//! documentation types; the tests validate real answers against them.
//!
//! `docs/openapi.json` is this document; a test fails when it is stale
//! (`UPDATE_OPENAPI=1 cargo test -p chorus-node --lib openapi` writes it).

use std::sync::OnceLock;

use axum::http::{header, Method};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::{Response as ApiResponse, ResponseBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement};
use utoipa::openapi::{ContentBuilder, RefOr};
use utoipa::{OpenApi, ToSchema};

use super::auth::{required_role, Role};

/// The name of the bearer-token security scheme.
pub const BEARER: &str = "bearer";

/// The parts of the document not written next to a handler.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "CHORUS node HTTP API",
        description = "The HTTP API of a CHORUS node (`chorus run`): health, status and metrics; \
            the cluster's membership; tasks and their output; live sandboxes; API tokens.\n\n\
            Any node answers for the cluster: a request about another node's task or sandbox \
            names that node or is forwarded to it.\n\n\
            **Tokens.** Public routes need none. Every other route needs \
            `Authorization: Bearer <token>`, a token made with the node's ACL key \
            (`chorus acl token create`), whose role allows the route: roles are ordered \
            `read` < `submit` < `operate` < `manage`, each allowing what those below it do. \
            Each operation says the role it needs. A request whose `Host` is not a name of \
            the node, or whose `Origin` is another site, is refused (403); one that changes \
            something must say `Content-Type: application/json` (else 415).\n\n\
            **Errors.** A refusal is JSON `{\"error\": \"…\"}` (some routes add fields), except \
            where an operation says `text/plain`."
    ),
    paths(super::status::index),
    components(schemas(Refusal)),
    tags(
        (name = "health", description = "Liveness, readiness, the node's own state and metrics (public)."),
        (name = "cluster", description = "The cluster as this node sees it, and each node's own view (public)."),
        (name = "members", description = "The electorate: voters and standbys, changes, admin handover."),
        (name = "tasks", description = "Tasks: submit, read, list, cancel, and a run's output."),
        (name = "sandboxes", description = "Live sandboxes kept across calls: run commands, read and write files."),
        (name = "acl", description = "API tokens."),
        (name = "meta", description = "This document."),
    )
)]
pub struct ApiDoc;

/// The document of every route: the operations registered with the router, then the
/// gatekeeper's part ([`gatekeeper`]).
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = super::api_routes().into_openapi();
    // A route's tail taken whole (`{*path}`, the router's syntax) is a parameter like any other
    // to a client of the document.
    let tails: Vec<String> = (doc.paths.paths.keys())
        .filter(|k| k.contains("{*"))
        .cloned()
        .collect();
    for key in tails {
        if let Some(mut item) = doc.paths.paths.remove(&key) {
            // One handler serves every method there: each operation gets an id of its own.
            for (method, op) in [
                ("get", &mut item.get),
                ("post", &mut item.post),
                ("put", &mut item.put),
                ("delete", &mut item.delete),
            ] {
                if let Some(op) = op.as_mut() {
                    let id = op.operation_id.take().unwrap_or_default();
                    op.operation_id = Some(format!("{id}_{method}"));
                }
            }
            doc.paths.paths.insert(key.replace("{*", "{"), item);
        }
    }
    gatekeeper(&mut doc);
    doc
}

/// [`document`] as JSON text, made once.
pub fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut text = document().to_pretty_json().expect("the document is JSON");
        text.push('\n');
        text
    })
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    summary = "This document",
    description = "The OpenAPI 3.1 document of this node's HTTP API (`docs/openapi.json` in \
        the repository is the same document). Public, like `/`: it describes the routes and \
        holds no node data and no secret.",
    responses((status = 200, description = "The document", body = Object))
)]
pub(super) async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}

/// Writes into every operation who may call it, as [`required_role`] decides for its method
/// and path: the role (in the description), the bearer-token requirement, and the answers the
/// gatekeeper gives before any handler runs (401, 403, 415), beside the handler's own.
fn gatekeeper(doc: &mut utoipa::openapi::OpenApi) {
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme(
            BEARER,
            utoipa::openapi::security::SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("chorus_v1_<role>_<id>_<mac>")
                    .description(Some(
                        "An API token made with the node's ACL key (`chorus acl token create`); \
                         its role says what it may do.",
                    ))
                    .build(),
            ),
        );
    for (path, item) in doc.paths.paths.iter_mut() {
        let operations = [
            (Method::GET, &mut item.get),
            (Method::POST, &mut item.post),
            (Method::PUT, &mut item.put),
            (Method::DELETE, &mut item.delete),
            (Method::PATCH, &mut item.patch),
        ];
        for (method, operation) in operations {
            if let Some(operation) = operation.as_mut() {
                let changes = matches!(method, Method::POST | Method::PUT | Method::PATCH);
                // A relayed call needs its own role there, at least `read` (its description).
                let role = match super::auth::relayed(path) {
                    Some(_) => Some(Role::Read),
                    None => required_role(&method, path),
                };
                guard_operation(operation, role, changes);
            }
        }
    }
}

fn guard_operation(operation: &mut Operation, role: Option<Role>, changes: bool) {
    let note = match role {
        None => "**Token:** none (public).".to_owned(),
        Some(role) => format!(
            "**Token:** role `{role}` or above (`Authorization: Bearer <token>`{}).",
            if changes {
                ", `Content-Type: application/json`"
            } else {
                ""
            }
        ),
    };
    operation.description = Some(match operation.description.take() {
        Some(d) if !d.is_empty() => format!("{d}\n\n{note}"),
        _ => note,
    });
    let mut refusals = vec![(
        "403",
        "Refused by the gatekeeper: the `Host` header names no address of this node, or \
         `Origin` is another site",
    )];
    if role.is_some() {
        operation.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        refusals = vec![
            ("401", "No token, or one not made with this node's ACL key"),
            (
                "403",
                "Refused by the gatekeeper: the token's role does not allow this, the `Host` \
                 header names no address of this node, or `Origin` is another site",
            ),
        ];
        if changes {
            refusals.push(("415", "The body is not `Content-Type: application/json`"));
        }
    }
    for (code, why) in refusals {
        let responses = &mut operation.responses.responses;
        match responses.get_mut(code) {
            // The handler's own answer with this code: the gatekeeper's reasons added.
            Some(RefOr::T(own)) => {
                own.description = format!("{}; or: {why}", own.description);
            }
            Some(RefOr::Ref(_)) => {}
            None => {
                responses.insert(code.to_owned(), RefOr::T(refusal(why)));
            }
        }
    }
}

/// A refusal answer: [`Refusal`] as JSON.
fn refusal(description: &str) -> ApiResponse {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "Refusal",
                ))))
                .build(),
        )
        .build()
}

/// Why a request was refused: every refusal of the API has `error`; some routes add fields
/// (their own schemas say which).
#[derive(ToSchema)]
pub struct Refusal {
    /// A sentence for people.
    pub error: String,
}

pub use crate::wire_doc::{
    MemberChangeDoc, RepoMountDoc, RunTimingsDoc, SubmitTaskDoc, TaskNotHere, TaskResultDoc,
    TaskSpecDoc, TaskStatusDoc, UsageDoc,
};

// ---- /sandboxes: the answers its handlers build with `json!` ----

/// A live sandbox.
#[derive(ToSchema)]
pub struct SandboxInfo {
    /// Its id: the id of its live task, `ORIGIN-SEQ` (the node it was made through, and that
    /// node's number for it).
    pub id: String,
    /// The worker that holds it.
    pub worker: String,
    /// The sandbox's own id (the container's name).
    pub sandbox: String,
    /// Time left before it idles out (from its last call), ms.
    pub idle_left_ms: u64,
    /// Time left before its absolute end, ms.
    pub lifetime_left_ms: u64,
}

/// A create still waiting for a worker (202).
#[derive(ToSchema)]
pub struct SandboxWaiting {
    /// Its id: call it later (`GET /sandboxes/{id}`) once placed.
    pub id: String,
    /// `waiting`.
    pub state: String,
    /// Why it waits, as the admin said.
    pub why: String,
}

/// `GET /sandboxes`.
#[derive(ToSchema)]
pub struct SandboxList {
    /// The caller's sandboxes this node holds (every one, for an `operate` token), then those
    /// made through this node that another worker holds or that wait for one.
    pub sandboxes: Vec<SandboxListed>,
    /// With `cluster=true`: the connected nodes that did not answer, and how.
    #[schema(required = false)]
    pub unreached: Vec<ListUnreached>,
}

/// A node `GET /sandboxes?cluster=true` could not ask.
#[derive(ToSchema)]
pub struct ListUnreached {
    pub node: String,
    pub error: String,
}

/// A sandbox in a list: one this node holds has every field; one held elsewhere its id, its
/// worker and its state; one waiting for a worker its id and state.
#[derive(ToSchema)]
pub struct SandboxListed {
    pub id: String,
    /// `live` (held here), `placed` (held by `worker`) or `waiting` (for a worker).
    pub state: String,
    /// Its worker, once placed.
    #[schema(required = false)]
    pub worker: String,
    #[schema(required = false)]
    pub sandbox: String,
    #[schema(required = false)]
    pub idle_left_ms: u64,
    #[schema(required = false)]
    pub lifetime_left_ms: u64,
}

/// `DELETE /sandboxes/{id}`.
#[derive(ToSchema)]
pub struct SandboxClosed {
    pub id: String,
    pub closed: bool,
    /// A sandbox with a read-write repository: what the sync back at its close did.
    #[schema(required = false)]
    pub sync: Option<SyncDone>,
    /// A sandbox with a read-write repository whose sync back failed: why.
    #[schema(required = false)]
    pub sync_error: Option<String>,
    /// A close by cancelling its live task (202): why.
    #[schema(required = false)]
    pub note: Option<String>,
}

/// What a sync back of a read-write repository did.
#[derive(ToSchema)]
pub struct SyncDone {
    /// Files written on the host (new or changed).
    pub written: u64,
    /// Files deleted on the host (gone from the sandbox).
    pub deleted: u64,
    /// Paths not carried: anything under a `.git`, a symlinked or non-directory place, another
    /// mount.
    pub refused: Vec<String>,
    /// Files the sandbox holds as something not carried (a symlink, a folder, …): left on the
    /// host as they were.
    pub kept: Vec<String>,
    /// Why it stopped early (nothing was deleted then).
    pub incomplete: Option<String>,
    /// Everything was carried.
    pub complete: bool,
}

/// `POST /sandboxes/{id}/sync`.
#[derive(ToSchema)]
pub struct SandboxSynced {
    pub id: String,
    pub written: u64,
    pub deleted: u64,
    pub refused: Vec<String>,
    pub kept: Vec<String>,
    pub incomplete: Option<String>,
    pub complete: bool,
}

/// `POST /sandboxes/{id}/env`.
#[derive(ToSchema)]
pub struct EnvSet {
    pub id: String,
    /// The names set.
    pub set: Vec<String>,
}

/// How a command ended. A timeout or an out-of-memory kill is an ending like an exit
/// (`timed_out` or `oom`, with `signal` and `error`).
#[derive(ToSchema)]
pub struct ExecExit {
    /// The exit code; null when the command timed out.
    #[schema(required = true)]
    pub exit_code: Option<i64>,
    /// Its standard output, up to the cap (absent from a stream's last line: it went as it
    /// came).
    #[schema(required = false)]
    pub stdout: String,
    /// Its standard error, up to the cap.
    #[schema(required = false)]
    pub stderr: String,
    /// Whether stdout was longer than the cap (the rest was dropped).
    #[schema(required = false)]
    pub stdout_truncated: bool,
    /// Whether stderr was longer than the cap.
    #[schema(required = false)]
    pub stderr_truncated: bool,
    /// Wall-clock time from start to exit.
    #[schema(required = false)]
    pub duration_ms: u64,
    /// The signal that ended it (9 for a timeout or an OOM kill).
    #[schema(required = false)]
    pub signal: i32,
    /// It ran past its timeout and was killed.
    #[schema(required = false)]
    pub timed_out: bool,
    /// The kernel's OOM killer ended it.
    #[schema(required = false)]
    pub oom: bool,
    /// What ended it, for a timeout or an OOM kill.
    #[schema(required = false)]
    pub error: String,
}

/// The JSON answer of `POST /sandboxes/{id}/exec`: how the command ended, or, with
/// `background: true`, its pid.
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ExecAnswer {
    Exit(ExecExit),
    Background(BackgroundStarted),
}

/// `POST /sandboxes/{id}/exec` with `background: true`: the command runs on in a session of
/// its own, its output in `log`.
#[derive(ToSchema)]
pub struct BackgroundStarted {
    pub pid: u32,
    /// The file (in the sandbox) its output goes to.
    pub log: String,
}

/// A background command that did not start.
#[derive(ToSchema)]
pub struct BackgroundFailed {
    pub error: String,
    pub exit_code: i64,
    pub stderr: String,
}

/// One line of a streaming exec (`stream: true`, `application/x-ndjson`): output as it
/// comes (`stdout` or `stderr`), then one last line, `exit` or `error`.
#[derive(ToSchema)]
pub struct ExecLine {
    /// Output on stdout.
    #[schema(required = false)]
    pub stdout: String,
    /// Output on stderr.
    #[schema(required = false)]
    pub stderr: String,
    /// The last line: how the command ended.
    #[schema(required = false)]
    pub exit: ExecExit,
    /// The last line, when the call failed after output began.
    #[schema(required = false)]
    pub error: String,
    /// The status the failure would have had as an answer.
    #[schema(required = false)]
    pub status: u16,
}

/// `GET /sandboxes/{id}/processes`.
#[derive(ToSchema)]
pub struct ProcessList {
    /// What runs in the sandbox (its supervisor left out).
    pub processes: Vec<SandboxProcess>,
}

/// A process in a sandbox.
#[derive(ToSchema)]
pub struct SandboxProcess {
    pub pid: u32,
    /// Its process group (a background command leads its own).
    pub pgid: u32,
    /// Seconds it has run.
    pub seconds: u64,
    pub command: String,
}

/// `DELETE /sandboxes/{id}/processes/{pid}`.
#[derive(ToSchema)]
pub struct ProcessKilled {
    pub pid: u32,
    pub killed: bool,
}

/// `PUT /sandboxes/{id}/files`.
#[derive(ToSchema)]
pub struct FileWritten {
    /// Where it was written.
    pub path: String,
    /// Bytes written.
    pub size: u64,
}

/// `DELETE /sandboxes/{id}/files`.
#[derive(ToSchema)]
pub struct FileRemoved {
    pub path: String,
    pub removed: bool,
}

/// One entry of `GET /sandboxes/{id}/ls`.
#[derive(ToSchema)]
pub struct ListedEntry {
    /// Its name in the folder (lossy where it is not UTF-8).
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    /// Bytes.
    pub size: u64,
    /// Permission bits (0o644 = 420).
    pub mode: u32,
    /// Last modified, seconds since the Unix epoch.
    pub modified_unix: Option<i64>,
    /// Where a symlink points.
    #[schema(required = false)]
    pub target: String,
}

/// `GET /sandboxes/{id}/ls`: the path itself and, for a folder, its entries.
#[derive(ToSchema)]
pub struct Listing {
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub modified_unix: Option<i64>,
    /// Where a symlink points.
    #[schema(required = false)]
    pub target: String,
    /// A folder's entries one level down, by name.
    #[schema(required = false)]
    pub entries: Vec<ListedEntry>,
    /// Entries were left out (past 10,000).
    #[schema(required = false)]
    pub truncated: bool,
}

/// `PUT /sandboxes/{id}/tree`.
#[derive(ToSchema)]
pub struct TreeWritten {
    /// The folder written under.
    pub path: String,
    /// Regular files (and hard links among them) written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Entries not written (a symbolic link, a device, a name that is not UTF-8 or that
    /// leaves the folder) → what each was; at most 1,000, names cut to 512 bytes.
    pub skipped: std::collections::BTreeMap<String, String>,
    /// Entries not written past the 1,000 listed.
    pub skipped_more: u64,
}

/// A refused sandbox call: `reason` for a refusal by a ceiling (`per_owner`, `worker_full`, …),
/// `category` for a failure of the sandbox itself.
#[derive(ToSchema)]
pub struct SandboxRefusal {
    pub error: String,
    /// Which ceiling refused (429 for `per_owner` and `worker_full`).
    #[schema(required = false)]
    pub reason: String,
    /// What failed in the sandbox (`exec`, `io`, `timeout`, `policy_violation`, …).
    #[schema(required = false)]
    pub category: String,
}

/// A sandbox that ended (410): why and how long ago.
#[derive(ToSchema)]
pub struct SandboxGone {
    pub error: String,
    pub gone: GoneDetail,
}

/// Why a sandbox ended.
#[derive(ToSchema)]
pub struct GoneDetail {
    pub reason: GoneReason,
    /// A sentence for people.
    pub detail: String,
    /// How long ago, ms (absent when told from its task's record, not its worker).
    #[schema(required = false)]
    pub ago_ms: u64,
    /// Its worker (when told from its task's record).
    #[schema(required = false)]
    pub worker: String,
}

/// `closed` (by its owner, an operator or the cluster), `idle` (no call for its idle
/// timeout), `expired` (its lifetime ran out), `lost` (it died, or its worker did) or `failed`
/// (it could not be made).
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum GoneReason {
    Closed,
    Idle,
    Expired,
    Lost,
    Failed,
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use std::time::Instant;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::Router;
    use chorus_core::{Command, Config, Core, Event, ADMIN_ELECTION};
    use serde_json::{json, Value};
    use tower::ServiceExt;

    use super::*;
    use crate::api::auth::{AclKey, Auth};
    use crate::daemon::operator::OperatorInputs;
    use crate::daemon::shared::{deliver, SharedState};

    /// Every route the router serves, as `(method, path)`; a test below asks the real router
    /// for each (so a route taken out of the router fails it), and the document must have
    /// exactly these (so a route registered without its operation fails it, naming it).
    const ROUTES: &[(&str, &str)] = &[
        ("GET", "/"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/status"),
        ("GET", "/status/history"),
        ("GET", "/metrics"),
        ("GET", "/cluster"),
        ("GET", "/cluster/status"),
        ("GET", "/members"),
        ("POST", "/members"),
        ("POST", "/members/transfer"),
        ("POST", "/members/leave"),
        ("GET", "/tasks"),
        ("POST", "/tasks"),
        ("GET", "/tasks/{id}"),
        ("DELETE", "/tasks/{id}"),
        ("GET", "/tasks/{id}/logs"),
        ("GET", "/sandboxes"),
        ("POST", "/sandboxes"),
        ("GET", "/sandboxes/{id}"),
        ("DELETE", "/sandboxes/{id}"),
        ("POST", "/sandboxes/{id}/exec"),
        ("POST", "/sandboxes/{id}/env"),
        ("GET", "/sandboxes/{id}/processes"),
        ("DELETE", "/sandboxes/{id}/processes/{pid}"),
        ("GET", "/sandboxes/{id}/files"),
        ("PUT", "/sandboxes/{id}/files"),
        ("DELETE", "/sandboxes/{id}/files"),
        ("GET", "/sandboxes/{id}/ls"),
        ("GET", "/sandboxes/{id}/tree"),
        ("PUT", "/sandboxes/{id}/tree"),
        ("POST", "/sandboxes/{id}/keepalive"),
        ("POST", "/sandboxes/{id}/sync"),
        ("POST", "/acl/tokens"),
        ("POST", "/acl/delegate"),
        ("GET", "/nodes/{node}/api/{path}"),
        ("POST", "/nodes/{node}/api/{path}"),
        ("PUT", "/nodes/{node}/api/{path}"),
        ("DELETE", "/nodes/{node}/api/{path}"),
        ("GET", "/openapi.json"),
    ];

    /// Routes served but deliberately not in the document: the web console's page, script and
    /// style sheet (for a browser, no API; served unless `http_ui = false`).
    const NOT_DOCUMENTED: &[(&str, &str)] = &[
        ("GET", "/ui"),
        ("GET", "/ui/app.js"),
        ("GET", "/ui/style.css"),
    ];

    const ME: &str = "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B";
    const OTHER: &str = "12D3KooWKdbNffbteB6S1nzaAJLDLc6VJh4BJhNfze12Ld1U8GZa";

    fn key() -> AclKey {
        AclKey::from_hex(&"ab".repeat(32)).unwrap()
    }

    fn app(shared: &SharedState, ui: bool) -> Router {
        let auth = Arc::new(Auth::new(key(), Vec::new()).for_node(ME));
        super::super::router(shared.clone(), auth, "127.0.0.1:7070".parse().unwrap(), ui)
    }

    /// An answer: its status, content type and body.
    struct Answer {
        status: StatusCode,
        content_type: String,
        body: Vec<u8>,
    }

    impl Answer {
        fn json(&self) -> Value {
            serde_json::from_slice(&self.body).unwrap_or(Value::Null)
        }
    }

    async fn call(
        app: &Router,
        method: &str,
        path: &str,
        token: Option<Role>,
        body: Option<&str>,
    ) -> Answer {
        let body = body.map(|b| ("application/json", b.as_bytes()));
        call_as(app, method, path, token, body).await
    }

    /// [`call`] with a body of another media type (`(content type, bytes)`).
    async fn call_as(
        app: &Router,
        method: &str,
        path: &str,
        token: Option<Role>,
        body: Option<(&str, &[u8])>,
    ) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1:7070");
        if let Some(role) = token {
            let token = key().mint(role, "0123456789abcdef");
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some((kind, _)) = body {
            request = request.header("content-type", kind);
        }
        let body = body.map_or_else(Body::empty, |(_, b)| Body::from(b.to_vec()));
        let r = app
            .clone()
            .oneshot(request.body(body).unwrap())
            .await
            .unwrap();
        let status = r.status();
        let content_type = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = axum::body::to_bytes(r.into_body(), 16 << 20)
            .await
            .unwrap()
            .to_vec();
        Answer {
            status,
            content_type,
            body,
        }
    }

    fn doc() -> Value {
        serde_json::from_str(json()).unwrap()
    }

    fn operations(doc: &Value) -> BTreeSet<(String, String)> {
        let mut ops = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in ["get", "post", "put", "delete", "patch", "head", "options"] {
                if item.get(method).is_some() {
                    ops.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        ops
    }

    /// A concrete path for a template.
    fn concrete(template: &str) -> String {
        template.replace("{id}", "x").replace("{pid}", "2")
    }

    #[tokio::test]
    async fn every_route_of_the_router_is_documented_and_nothing_else() {
        let documented = operations(&doc());
        let routes: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        let missing: Vec<_> = routes.difference(&documented).collect();
        assert!(
            missing.is_empty(),
            "routes of the router missing from the OpenAPI document: {missing:?}"
        );
        let extra: Vec<_> = documented.difference(&routes).collect();
        assert!(
            extra.is_empty(),
            "operations in the document that ROUTES does not list: {extra:?}"
        );
        // Each listed route is served by the real router (a node not yet started: every
        // handler answers at once). The router's own 404 has no body; a handler's has one.
        let shared = SharedState::default();
        for ui in [true, false] {
            let app = app(&shared, ui);
            for (method, path) in ROUTES.iter().chain(if ui { NOT_DOCUMENTED } else { &[] }) {
                let body = matches!(*method, "POST" | "PUT").then_some("{}");
                let a = call(&app, method, &concrete(path), Some(Role::Manage), body).await;
                let routed = a.status != StatusCode::METHOD_NOT_ALLOWED
                    && !(a.status == StatusCode::NOT_FOUND && a.body.is_empty());
                assert!(routed, "{method} {path} (console {ui}): {}", a.status);
            }
            // What the router does not serve is its own 404 (which the probe above tells).
            let a = call(&app, "GET", "/nosuch", Some(Role::Manage), None).await;
            assert!(a.status == StatusCode::NOT_FOUND && a.body.is_empty());
        }
        let off = app(&shared, false);
        let a = call(&off, "GET", "/ui", Some(Role::Manage), None).await;
        assert!(a.body.is_empty(), "no console with http_ui = false");
    }

    /// A relayed call (`relay.rs`) needs a token even for a route public at the other node,
    /// the role the call needs there, and a node this one is connected to; this node itself is
    /// not relayed to.
    #[tokio::test]
    async fn a_relayed_call_needs_a_token_its_role_and_a_connected_node() {
        let shared = SharedState::default();
        shared.lock().node_id = ME.to_owned();
        let app = app(&shared, false);
        let status = format!("/nodes/{OTHER}/api/status");
        let a = call(&app, "GET", &status, None, None).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        // The refusal says why (and how to give a token), and is counted by its reason
        // (`chorus_http_refused_total`).
        let why = a.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(
            why.contains("needs a token") && why.contains("CHORUS_TOKEN"),
            "{why}"
        );
        assert_eq!(shared.lock().metrics.http_refused.get("no_token"), Some(&1));
        let _ = call(&app, "GET", &status, None, None).await;
        assert_eq!(shared.lock().metrics.http_refused.get("no_token"), Some(&2));
        let a = call(&app, "GET", &status, Some(Role::Read), None).await;
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            a.json()["error"]
                .as_str()
                .unwrap()
                .contains("not connected"),
            "{}",
            a.json()
        );
        let members = format!("/nodes/{OTHER}/api/members");
        let a = call(&app, "POST", &members, Some(Role::Submit), Some("{}")).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "operate's call, relayed");
        let own = format!("/nodes/{ME}/api/status");
        let a = call(&app, "GET", &own, Some(Role::Read), None).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.json());
    }

    /// Clients name their methods after operation ids: one id, one operation (the relay
    /// serves four methods from one handler).
    #[test]
    fn every_operation_has_an_id_of_its_own() {
        let doc = doc();
        let mut seen = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                    assert!(seen.insert(id.to_owned()), "{method} {path}: {id} again");
                }
            }
        }
        assert!(seen.contains("relay_post"), "{seen:?}");
    }

    /// `schema`'s object properties (through `$ref`, `allOf`, `oneOf` and `anyOf`), and the
    /// schema of a map's values.
    fn properties(
        doc: &Value,
        schema: &Value,
        props: &mut BTreeMap<String, Value>,
    ) -> Option<Value> {
        let schema = resolve(doc, schema);
        let mut values = None;
        if let Some(p) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in p {
                props.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            values = Some(a.clone());
        }
        for key in ["allOf", "oneOf", "anyOf"] {
            for s in schema
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                values = values.or(properties(doc, s, props));
            }
        }
        values
    }

    fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => resolve(doc, doc.pointer(r.trim_start_matches('#')).expect(r)),
            None => schema,
        }
    }

    /// Every field of `value` that `schema` does not name, as `at.field` paths: a field the
    /// server sends must be in the document, which JSON Schema alone (open objects) does not
    /// check.
    fn undocumented(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                let mut props = BTreeMap::new();
                let values = properties(doc, schema, &mut props);
                // A free-form object (`body = Object`: this document itself) names none.
                let free = |s: &Value| {
                    [
                        "properties",
                        "allOf",
                        "oneOf",
                        "anyOf",
                        "additionalProperties",
                    ]
                    .iter()
                    .all(|k| s.get(*k).is_none())
                };
                if free(resolve(doc, schema)) {
                    return;
                }
                for (k, v) in fields {
                    match props.get(k).or(values.as_ref()) {
                        Some(s) => undocumented(doc, s, v, &format!("{at}.{k}"), out),
                        None => out.push(format!("{at}.{k}")),
                    }
                }
            }
            Value::Array(items) => {
                let schema = resolve(doc, schema);
                let item = schema.get("items").cloned().or_else(|| {
                    // `[T, null]`-style unions: the branch that has items.
                    ["oneOf", "anyOf"].iter().find_map(|k| {
                        schema
                            .get(*k)?
                            .as_array()?
                            .iter()
                            .find_map(|s| resolve(doc, s).get("items").cloned())
                    })
                });
                for (i, v) in items.iter().enumerate() {
                    match &item {
                        Some(s) => undocumented(doc, s, v, &format!("{at}[{i}]"), out),
                        None => out.push(format!("{at}[{i}] (no item schema)")),
                    }
                }
            }
            _ => {}
        }
    }

    /// Checks `value` against `schema` (a schema of the document): valid, and no field left
    /// out of it.
    fn conforms(doc: &Value, schema: &Value, value: &Value) -> Result<(), String> {
        let wrapped = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "allOf": [schema],
            "components": doc["components"],
        });
        let validator = jsonschema::draft202012::new(&wrapped).map_err(|e| e.to_string())?;
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        let mut out = Vec::new();
        undocumented(doc, schema, value, "", &mut out);
        if !out.is_empty() {
            return Err(format!("fields not in the schema: {out:?}"));
        }
        Ok(())
    }

    /// Checks a real answer against the document: its status is documented for the route,
    /// with its content type, and a JSON body conforms to the schema.
    fn check(doc: &Value, method: &str, template: &str, a: &Answer) -> Result<(), String> {
        let op = &doc["paths"][template][method.to_lowercase()];
        let response = op["responses"]
            .get(a.status.as_str())
            .ok_or_else(|| format!("status {} is not documented", a.status))?;
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            return match a.body.is_empty() {
                true => Ok(()),
                false => Err("a body where the document says none".into()),
            };
        };
        let essence = |t: &str| t.split(';').next().unwrap_or_default().trim().to_owned();
        let (_, media) = content
            .iter()
            .find(|(t, _)| essence(t) == essence(&a.content_type))
            .ok_or_else(|| format!("content type {:?} is not documented", a.content_type))?;
        let schema = &media["schema"];
        if essence(&a.content_type) == "application/x-ndjson" {
            // Each line is one value of the schema.
            for line in a.body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let value: Value =
                    serde_json::from_slice(line).map_err(|e| format!("a line not JSON: {e}"))?;
                conforms(doc, schema, &value).map_err(|e| format!("{e}\n{value:#}"))?;
            }
            return Ok(());
        }
        if essence(&a.content_type) != "application/json" {
            return Ok(());
        }
        let value: Value = serde_json::from_slice(&a.body).map_err(|e| format!("not JSON: {e}"))?;
        conforms(doc, schema, &value).map_err(|e| format!("{e}\n{value:#}"))
    }

    /// A node of one voter, admin, with the part of the runtime loop the API needs: operator
    /// requests are stepped through its real core and the notices handed back.
    fn node() -> SharedState {
        let config = Config {
            discovery_timeout_ms: 100,
            bootstrap_expect: 1,
            ..Config::default()
        };
        let mut core = Core::new(ME.into(), config, vec![ADMIN_ELECTION.into()], 1).unwrap();
        core.step(0, Event::Started, &mut Vec::new());
        for _ in 0..2_000 {
            if core.role() == chorus_core::Role::Admin {
                break;
            }
            let (at, timer) = core.next_deadline().expect("a timer is armed");
            core.step(at, Event::TimerFired { timer }, &mut Vec::new());
        }
        assert_eq!(core.role(), chorus_core::Role::Admin);
        let shared = SharedState::default();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        {
            let mut s = shared.lock();
            s.node_id = ME.into();
            s.capabilities = vec![ADMIN_ELECTION.into()];
            s.timeline = crate::daemon::timeline::Timeline::begin(1, core.now_ms(), &core);
            s.core = Some(core);
            s.operator = Some(OperatorInputs::new(tx, 1));
            s.started_at = Some(Instant::now());
            s.stepped_at = Some(Instant::now());
        }
        let looping = shared.clone();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let mut s = looping.lock();
                let Some(core) = s.core.as_mut() else { break };
                let mut out = Vec::new();
                let now = core.now_ms();
                core.step(now, event, &mut out);
                for command in out {
                    if let Command::Notice(notice) = command {
                        deliver(&mut s, &notice);
                    }
                }
            }
        });
        shared
    }

    /// Real answers of a node — public state, tasks submitted, read, listed, cancelled and
    /// refused, membership changes refused, tokens, the gatekeeper's refusals — each checked
    /// against the document: its status documented, its body valid against the schema, and
    /// no field missing from it.
    #[tokio::test]
    async fn the_answers_of_a_real_node_validate_against_the_document() {
        let doc = doc();
        let shared = node();
        let app = app(&shared, true);
        let mut failures = Vec::new();
        let mut seen = BTreeSet::new();
        macro_rules! expect {
            ($method:expr, $template:expr, $path:expr, $token:expr, $body:expr, $status:expr) => {{
                let path: &str = &$path;
                let a = call(&app, $method, path, $token, $body).await;
                assert_eq!(
                    a.status,
                    $status,
                    "{} {}: {}",
                    $method,
                    path,
                    String::from_utf8_lossy(&a.body)
                );
                if let Err(e) = check(&doc, $method, $template, &a) {
                    failures.push(format!("{} {} ({}): {e}", $method, path, a.status));
                }
                seen.insert(format!("{} {} {}", $method, $template, a.status.as_u16()));
                a
            }};
        }
        use Role::{Manage, Operate, Read, Submit};
        let (ok, created) = (StatusCode::OK, StatusCode::CREATED);

        for path in [
            "/",
            "/healthz",
            "/readyz",
            "/status",
            "/status/history",
            "/metrics",
        ] {
            expect!("GET", path, path, None, None, ok);
        }
        expect!(
            "GET",
            "/status/history",
            "/status/history?epoch=1&after=1",
            None,
            None,
            ok
        );
        for path in ["/cluster", "/cluster/status", "/members", "/openapi.json"] {
            expect!("GET", path, path, None, None, ok);
        }

        // Tasks: submitted (and again, by key), refused, read, listed, cancelled.
        let spec = r#"{"image":"chorus-sandbox","command":["true"],"env":{"A":"1"},"key":"k1","requires":["sandbox"]}"#;
        let t = expect!(
            "POST",
            "/tasks",
            "/tasks",
            Some(Submit),
            Some(spec),
            created
        );
        let task = t.json()["task"].as_str().unwrap().to_owned();
        expect!("POST", "/tasks", "/tasks", Some(Submit), Some(spec), ok);
        let unknown = r#"{"image":"i","command":["true"],"memroy_mb":5}"#;
        expect!(
            "POST",
            "/tasks",
            "/tasks",
            Some(Submit),
            Some(unknown),
            StatusCode::BAD_REQUEST
        );
        expect!(
            "POST",
            "/tasks",
            "/tasks",
            None,
            Some(spec),
            StatusCode::UNAUTHORIZED
        );
        expect!(
            "POST",
            "/tasks",
            "/tasks",
            Some(Read),
            Some(spec),
            StatusCode::FORBIDDEN
        );
        expect!("GET", "/tasks", "/tasks", Some(Read), None, ok);
        expect!(
            "GET",
            "/tasks",
            "/tasks?state=nosuch",
            Some(Read),
            None,
            StatusCode::BAD_REQUEST
        );
        let path = format!("/tasks/{task}");
        expect!("GET", "/tasks/{id}", path, Some(Read), None, ok);
        expect!(
            "GET",
            "/tasks/{id}",
            "/tasks/nosuch",
            Some(Read),
            None,
            StatusCode::BAD_REQUEST
        );
        expect!(
            "GET",
            "/tasks/{id}",
            format!("/tasks/{ME}-99"),
            Some(Read),
            None,
            StatusCode::NOT_FOUND
        );
        expect!(
            "GET",
            "/tasks/{id}",
            format!("/tasks/{OTHER}-1"),
            Some(Read),
            None,
            StatusCode::NOT_FOUND
        );
        expect!(
            "DELETE",
            "/tasks/{id}",
            format!("/tasks/{task}"),
            Some(Operate),
            None,
            StatusCode::ACCEPTED
        );
        let done = expect!(
            "GET",
            "/tasks/{id}",
            format!("/tasks/{task}"),
            Some(Submit),
            None,
            ok
        );
        expect!(
            "DELETE",
            "/tasks/{id}",
            format!("/tasks/{OTHER}-1"),
            Some(Submit),
            None,
            StatusCode::FORBIDDEN
        );
        expect!(
            "DELETE",
            "/tasks/{id}",
            format!("/tasks/{ME}-99"),
            Some(Submit),
            None,
            StatusCode::NOT_FOUND
        );
        if done.json().get("result").is_some() {
            expect!(
                "DELETE",
                "/tasks/{id}",
                format!("/tasks/{task}"),
                Some(Operate),
                None,
                StatusCode::CONFLICT
            );
        }
        expect!("GET", "/tasks", "/tasks?state=all", Some(Read), None, ok);
        expect!(
            "GET",
            "/tasks/{id}/logs",
            format!("/tasks/{task}/logs"),
            Some(Read),
            None,
            StatusCode::NOT_FOUND
        );
        expect!(
            "GET",
            "/tasks/{id}/logs",
            format!("/tasks/{task}/logs?stream=nosuch"),
            Some(Read),
            None,
            StatusCode::BAD_REQUEST
        );

        // Membership: a change refused by the core, one that is no change, a handover refused.
        let add = format!(r#"{{"op":"add","node":"{OTHER}"}}"#);
        expect!(
            "POST",
            "/members",
            "/members?wait_ms=2000",
            Some(Operate),
            Some(&add),
            StatusCode::CONFLICT
        );
        expect!(
            "POST",
            "/members",
            "/members",
            Some(Operate),
            Some(r#"{"op":"promote"}"#),
            StatusCode::BAD_REQUEST
        );
        expect!(
            "POST",
            "/members",
            "/members",
            Some(Submit),
            Some(&add),
            StatusCode::FORBIDDEN
        );
        expect!(
            "POST",
            "/members/transfer",
            "/members/transfer?wait_ms=2000",
            Some(Operate),
            Some("{}"),
            StatusCode::CONFLICT
        );
        expect!(
            "POST",
            "/members/transfer",
            "/members/transfer",
            Some(Operate),
            Some(r#"{"to":"x"}"#),
            StatusCode::BAD_REQUEST
        );
        // Leave: a wait that is no number is refused before anything is asked; it needs
        // `operate`.
        expect!(
            "POST",
            "/members/leave",
            "/members/leave?wait_ms=soon",
            Some(Operate),
            Some("{}"),
            StatusCode::BAD_REQUEST
        );
        expect!(
            "POST",
            "/members/leave",
            "/members/leave",
            Some(Submit),
            Some("{}"),
            StatusCode::FORBIDDEN
        );

        // Sandboxes, on a node that runs none.
        expect!("GET", "/sandboxes", "/sandboxes", Some(Submit), None, ok);
        expect!(
            "POST",
            "/sandboxes",
            "/sandboxes",
            Some(Submit),
            Some("{}"),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let id = format!("{ME}-12");
        expect!(
            "GET",
            "/sandboxes/{id}",
            format!("/sandboxes/{id}"),
            Some(Submit),
            None,
            StatusCode::NOT_FOUND
        );
        expect!(
            "DELETE",
            "/sandboxes/{id}",
            format!("/sandboxes/{OTHER}-3"),
            Some(Submit),
            None,
            StatusCode::SERVICE_UNAVAILABLE
        );
        expect!(
            "POST",
            "/sandboxes/{id}/exec",
            format!("/sandboxes/{id}/exec"),
            Some(Submit),
            Some(r#"{"argv":["true"]}"#),
            StatusCode::NOT_FOUND
        );
        expect!(
            "DELETE",
            "/sandboxes/{id}/processes/{pid}",
            format!("/sandboxes/{id}/processes/1"),
            Some(Submit),
            None,
            StatusCode::BAD_REQUEST
        );
        expect!(
            "GET",
            "/sandboxes",
            "/sandboxes",
            None,
            None,
            StatusCode::UNAUTHORIZED
        );

        // Tokens.
        expect!(
            "POST",
            "/acl/tokens",
            "/acl/tokens",
            Some(Manage),
            Some(r#"{"role":"read"}"#),
            created
        );
        expect!(
            "POST",
            "/acl/tokens",
            "/acl/tokens",
            Some(Manage),
            Some(r#"{"role":"king"}"#),
            StatusCode::BAD_REQUEST
        );
        expect!(
            "POST",
            "/acl/tokens",
            "/acl/tokens",
            Some(Operate),
            Some(r#"{"role":"read"}"#),
            StatusCode::FORBIDDEN
        );
        let audience = format!(r#"{{"audience":"{OTHER}"}}"#);
        expect!(
            "POST",
            "/acl/delegate",
            "/acl/delegate",
            Some(Read),
            Some(&audience),
            ok
        );
        expect!(
            "POST",
            "/acl/delegate",
            "/acl/delegate",
            Some(Read),
            Some(r#"{"audience":"a_b"}"#),
            StatusCode::BAD_REQUEST
        );

        assert!(
            failures.is_empty(),
            "answers that do not match the document:\n{}",
            failures.join("\n")
        );
        eprintln!("validated {} answers: {seen:#?}", seen.len());
    }

    #[test]
    fn docs_openapi_json_is_this_document() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
        if std::env::var_os("UPDATE_OPENAPI").is_some() {
            std::fs::write(path, json()).unwrap();
            return;
        }
        let kept = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            kept == json(),
            "docs/openapi.json is not the API's document: refresh it with \
             `UPDATE_OPENAPI=1 cargo test -p chorus-node --lib openapi`"
        );
    }

    /// The mirrors of core's types have exactly the fields the types serialize, filled in
    /// (a field added to core and not here, or the other way round, fails), and the body of
    /// `POST /tasks` exactly the keys the handler takes.
    #[test]
    fn the_mirrors_of_core_types_have_exactly_their_fields() {
        use chorus_core::{
            MemberChange, RepoMount, RunTimings, TaskResult, TaskSpec, TaskStatus, Usage,
        };
        let doc = doc();
        let spec = TaskSpec {
            image: "i".into(),
            command: vec!["true".into()],
            env: [("A".to_owned(), "1".to_owned())].into(),
            workdir: Some("/w".into()),
            timeout_ms: 1,
            memory_mb: 1,
            cpu_millis: 1,
            pids: 1,
            network: true,
            requires: vec!["sandbox".into()],
            repo: Some(RepoMount {
                name: "r".into(),
                writable: true,
            }),
            submitter: Some("0123456789abcdef".into()),
            // Not sent by the API yet: `/tasks` refuses it, `/sandboxes` does not use it.
            live: false,
            idle_ms: 0,
        };
        let result = TaskResult {
            status: TaskStatus::Error,
            exit_code: Some(1),
            signal: Some(9),
            worker: ME.into(),
            attempt: 1,
            duration_ms: 1,
            usage: Usage {
                cpu_ms: 1,
                peak_memory_kb: 1,
            },
            stdout: "o".into(),
            stderr: "e".into(),
            stdout_truncated_bytes: 1,
            stderr_truncated_bytes: 1,
            error: Some("x".into()),
            timings: RunTimings {
                acquire_ms: 1,
                arm_ms: 1,
                exec_ms: 1,
                cleanup_ms: 1,
                release_ms: 1,
            },
        };
        let add = MemberChange::Add { node: ME.into() };
        let remove = MemberChange::Remove { node: ME.into() };
        let mut values = vec![
            ("TaskSpec", json!(spec)),
            ("TaskResult", json!(result)),
            ("MemberChange", json!(add)),
            ("MemberChange", json!(remove)),
        ];
        values.extend(TaskStatus::ALL.iter().map(|s| ("TaskStatus", json!(s))));
        for (name, value) in values {
            let schema = json!({ "$ref": format!("#/components/schemas/{name}") });
            if let Err(e) = conforms(&doc, &schema, &value) {
                panic!("{name}: {e}: {value}");
            }
            let Some(fields) = value.as_object() else {
                continue;
            };
            let mut props = BTreeMap::new();
            properties(&doc, &schema, &mut props);
            let documented: BTreeSet<&String> = props.keys().collect();
            let filled: BTreeSet<&String> = fields.keys().collect();
            assert_eq!(
                documented, filled,
                "{name}: the mirror's fields and the type's"
            );
        }
        let mut props = BTreeMap::new();
        properties(
            &doc,
            &json!({ "$ref": "#/components/schemas/SubmitTask" }),
            &mut props,
        );
        let mut taken: Vec<&str> = super::super::tasks::SPEC_KEYS.to_vec();
        taken.push("key");
        assert_eq!(
            props.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            taken.into_iter().collect::<BTreeSet<_>>(),
            "SubmitTask: the keys POST /tasks takes"
        );
    }

    /// With Docker, a node that runs sandboxes: an id of its earlier process (410), then, when
    /// the sandbox image is there, a sandbox's whole life — made, read, its environment set,
    /// a file written and read, commands run (plain, timed out, streamed, in the background),
    /// its processes listed and one killed, closed, gone (410) — each answer checked against
    /// the document. Needs the Docker Engine (and fails, never skips, without it).
    #[tokio::test]
    async fn the_answers_of_a_node_with_sandboxes_validate() {
        let provider = chorus_io::sandbox::docker::DockerProvider::connect()
            .await
            .expect("this test needs the Docker Engine");
        chorus_io::sandbox::image::ensure_sandbox_image(provider.docker())
            .await
            .expect("the sandbox image builds");
        let doc = doc();
        let shared = node();
        shared.lock().live = Some(Arc::new(chorus_io::sandbox::live::LiveSandboxes::new(
            provider,
            chorus_io::sandbox::live::LiveLimits::default(),
        )));
        let app = app(&shared, true);
        let mut failures = Vec::new();
        let mut run = async |method: &str, template: &str, path: &str, body: Option<&str>| {
            let a = call(&app, method, path, Some(Role::Submit), body).await;
            if let Err(e) = check(&doc, method, template, &a) {
                failures.push(format!("{method} {path} ({}): {e}", a.status));
            }
            a
        };
        // An id no live task of this node has: not found, wherever asked.
        let never = format!("/sandboxes/{ME}-77");
        for (method, template, path) in [
            ("GET", "/sandboxes/{id}", never.clone()),
            ("DELETE", "/sandboxes/{id}", never.clone()),
            (
                "GET",
                "/sandboxes/{id}/processes",
                format!("{never}/processes"),
            ),
        ] {
            let a = run(method, template, &path, None).await;
            assert_eq!(a.status, StatusCode::NOT_FOUND, "{method} {path}");
        }
        // A create goes through the core; no worker places it here (202 once its wait is over,
        // or 503 where the node takes no requests), as documented. The sandbox is made as its
        // placement would make it (`live_placements`), under a task id.
        let made = run(
            "POST",
            "/sandboxes",
            "/sandboxes",
            Some(r#"{"env":{"A":"1"},"wait_ms":50}"#),
        )
        .await;
        assert!(
            [StatusCode::ACCEPTED, StatusCode::SERVICE_UNAVAILABLE].contains(&made.status),
            "{}",
            String::from_utf8_lossy(&made.body)
        );
        let id = format!("{ME}-1");
        let registry = shared.lock().live.clone().unwrap();
        let (spec, policy) = crate::api::sandboxes::default_shape(ME);
        registry
            .create(
                &chorus_io::sandbox::live::Caller::owner("0123456789abcdef"),
                chorus_io::sandbox::live::CreateLive {
                    id: id.clone(),
                    idempotency_key: None,
                    spec: chorus_io::sandbox::SandboxSpec {
                        task_id: id.clone(),
                        env: [("A".to_string(), "1".to_string())].into(),
                        ..spec
                    },
                    policy,
                    idle: None,
                    lifetime: None,
                },
            )
            .await
            .expect("made");
        let at = format!("/sandboxes/{id}");
        let steps: &[(&str, &str, String, Option<&str>)] = &[
            ("GET", "/sandboxes", "/sandboxes".into(), None),
            ("GET", "/sandboxes/{id}", at.clone(), None),
            (
                "POST",
                "/sandboxes/{id}/env",
                format!("{at}/env"),
                Some(r#"{"env":{"B":"2"}}"#),
            ),
            (
                "PUT",
                "/sandboxes/{id}/files",
                format!("{at}/files"),
                Some(r#"{"path":"/tmp/a.txt","content":"hi"}"#),
            ),
            (
                "GET",
                "/sandboxes/{id}/files",
                format!("{at}/files?path=/tmp/a.txt"),
                None,
            ),
            (
                "GET",
                "/sandboxes/{id}/files",
                format!("{at}/files?path=/nosuch"),
                None,
            ),
            (
                "POST",
                "/sandboxes/{id}/exec",
                format!("{at}/exec"),
                Some(r#"{"shell":"echo $A$B; echo e >&2; exit 3"}"#),
            ),
            (
                "POST",
                "/sandboxes/{id}/exec",
                format!("{at}/exec"),
                Some(r#"{"argv":["sleep","5"],"timeout_ms":300}"#),
            ),
            (
                "POST",
                "/sandboxes/{id}/exec",
                format!("{at}/exec"),
                Some(r#"{"shell":"echo hi; echo bye >&2","stream":true}"#),
            ),
            (
                "POST",
                "/sandboxes/{id}/exec",
                format!("{at}/exec"),
                Some(r#"{"argv":[]}"#),
            ),
            (
                "POST",
                "/sandboxes/{id}/exec",
                format!("{at}/exec"),
                Some(r#"{"argv":["sleep","60"],"background":true}"#),
            ),
            (
                "GET",
                "/sandboxes/{id}/processes",
                format!("{at}/processes"),
                None,
            ),
        ];
        let mut answers = Vec::new();
        for (method, template, path, body) in steps {
            answers.push(run(method, template, path, *body).await);
        }
        assert_eq!(answers[4].body, b"hi", "the file read back");
        assert_eq!(answers[8].content_type, "application/x-ndjson");
        let pid = answers[10].json()["pid"].as_u64();
        let pid = pid.unwrap_or_else(|| {
            panic!(
                "a background command started: {}",
                String::from_utf8_lossy(&answers[10].body)
            )
        });
        let path = format!("{at}/processes/{pid}");
        run("DELETE", "/sandboxes/{id}/processes/{pid}", &path, None).await;
        // (Checked apart: `run` holds `failures`.)
        let mut raw_failures = Vec::new();
        // Files beyond one: raw bytes in, a folder listed, downloaded and uploaded as tar (a
        // link in it left out), a folder removed (never /); the idle clock started again.
        let raw = call_as(
            &app,
            "PUT",
            &format!("{at}/files?path=/tmp/t/raw.bin&mode=600"),
            Some(Role::Submit),
            Some(("application/octet-stream", b"\x00\x01raw")),
        )
        .await;
        if let Err(e) = check(&doc, "PUT", "/sandboxes/{id}/files", &raw) {
            raw_failures.push(format!("PUT raw ({}): {e}", raw.status));
        }
        assert_eq!(raw.status, StatusCode::OK, "{}", raw.json());
        let listed = run(
            "GET",
            "/sandboxes/{id}/ls",
            &format!("{at}/ls?path=/tmp/t"),
            None,
        )
        .await;
        let dir = listed.json();
        assert_eq!(
            (dir["kind"].as_str(), dir["path"].as_str()),
            (Some("dir"), Some("/tmp/t")),
            "{dir}"
        );
        let entry = &dir["entries"][0];
        assert_eq!(
            (
                entry["name"].as_str(),
                entry["kind"].as_str(),
                entry["size"].as_u64(),
                entry["mode"].as_u64()
            ),
            (Some("raw.bin"), Some("file"), Some(5), Some(0o600)),
            "{dir}"
        );
        let one = run(
            "GET",
            "/sandboxes/{id}/ls",
            &format!("{at}/ls?path=/tmp/t/raw.bin"),
            None,
        )
        .await;
        assert_eq!(one.json()["kind"], "file", "{}", one.json());
        assert!(one.json().get("entries").is_none(), "a file has no entries");
        let missing = run(
            "GET",
            "/sandboxes/{id}/ls",
            &format!("{at}/ls?path=/nosuch"),
            None,
        )
        .await;
        assert_eq!(missing.status, StatusCode::UNPROCESSABLE_ENTITY);
        let tree = run(
            "GET",
            "/sandboxes/{id}/tree",
            &format!("{at}/tree?path=/tmp/t"),
            None,
        )
        .await;
        assert_eq!(tree.content_type, "application/x-tar");
        let files = chorus_io::sandbox::docker::tar_to_tree(&tree.body).expect("a tar archive");
        assert_eq!(files["raw.bin"].data, b"\x00\x01raw");
        assert_eq!(files["raw.bin"].mode & 0o777, 0o600);
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o640);
        archive
            .append_data(&mut header, "up/a.txt", &b"A"[..])
            .unwrap();
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        archive
            .append_link(&mut link, "up/l", "/etc/passwd")
            .unwrap();
        let archive = archive.into_inner().unwrap();
        let up = call_as(
            &app,
            "PUT",
            &format!("{at}/tree?path=/tmp/u"),
            Some(Role::Submit),
            Some(("application/x-tar", &archive)),
        )
        .await;
        if let Err(e) = check(&doc, "PUT", "/sandboxes/{id}/tree", &up) {
            raw_failures.push(format!("PUT tree ({}): {e}", up.status));
        }
        let written = up.json();
        assert_eq!(written["files"], 1, "{written}");
        assert_eq!(written["skipped"]["up/l"], "a symlink", "{written}");
        let back = run(
            "GET",
            "/sandboxes/{id}/files",
            &format!("{at}/files?path=/tmp/u/up/a.txt"),
            None,
        )
        .await;
        assert_eq!(back.body, b"A");
        let removed = run(
            "DELETE",
            "/sandboxes/{id}/files",
            &format!("{at}/files?path=/tmp/u"),
            None,
        )
        .await;
        assert_eq!(removed.status, StatusCode::OK);
        let after = run(
            "GET",
            "/sandboxes/{id}/ls",
            &format!("{at}/ls?path=/tmp/u"),
            None,
        )
        .await;
        assert_eq!(
            after.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "removed: {}",
            after.json()
        );
        let root = run(
            "DELETE",
            "/sandboxes/{id}/files",
            &format!("{at}/files?path=/"),
            None,
        )
        .await;
        assert_eq!(root.status, StatusCode::BAD_REQUEST);
        // Its workspace is its own tmpfs: nothing to carry back (409, as documented).
        let synced = run(
            "POST",
            "/sandboxes/{id}/sync",
            &format!("{at}/sync"),
            Some("{}"),
        )
        .await;
        assert_eq!(synced.status, StatusCode::CONFLICT, "{}", synced.json());
        let kept = run(
            "POST",
            "/sandboxes/{id}/keepalive",
            &format!("{at}/keepalive"),
            Some("{}"),
        )
        .await;
        assert_eq!(kept.status, StatusCode::OK, "{}", kept.json());
        let closed = run("DELETE", "/sandboxes/{id}", &at, None).await;
        assert_eq!(closed.status, StatusCode::OK);
        let gone = run("GET", "/sandboxes/{id}", &at, None).await;
        assert_eq!(gone.status, StatusCode::GONE);
        assert!(gone.json()["gone"]["reason"] == "closed", "{}", gone.json());
        let statuses: Vec<u16> = answers.iter().map(|a| a.status.as_u16()).collect();
        eprintln!(
            "a sandbox's life: {statuses:?}; background: {}",
            String::from_utf8_lossy(&answers[10].body)
        );
        failures.extend(raw_failures);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// The check itself: a field the document does not name, a value of another type, and a
    /// status it does not list are each caught.
    #[tokio::test]
    async fn the_check_catches_what_the_document_does_not_say() {
        let doc = doc();
        let app = app(&node(), false);
        let mut a = call(&app, "GET", "/status", None, None).await;
        check(&doc, "GET", "/status", &a).unwrap();
        let good = a.json();
        let mut extra = good.clone();
        extra["build"]["bogus"] = json!(1);
        a.body = serde_json::to_vec(&extra).unwrap();
        let e = check(&doc, "GET", "/status", &a).unwrap_err();
        assert!(e.contains(".build.bogus"), "{e}");
        let mut wrong = good.clone();
        wrong["term"] = json!("one");
        a.body = serde_json::to_vec(&wrong).unwrap();
        assert!(check(&doc, "GET", "/status", &a).is_err());
        let mut missing = good;
        missing.as_object_mut().unwrap().remove("node_id");
        a.body = serde_json::to_vec(&missing).unwrap();
        assert!(check(&doc, "GET", "/status", &a).is_err());
        a.status = StatusCode::IM_A_TEAPOT;
        let e = check(&doc, "GET", "/status", &a).unwrap_err();
        assert!(e.contains("not documented"), "{e}");
    }
}
