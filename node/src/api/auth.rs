//! Who may call the HTTP API for what (issue 33). Every request passes [`guard`] before any
//! handler runs; a refusal is counted by reason in `/metrics` (`chorus_http_refused_total`).
//!
//! The trust model:
//! - **Anyone who reaches the port** may read the node's health and public state: `/healthz`,
//!   `/readyz`, `/status`, `/status/history`, `/metrics`, `/cluster`, `/cluster/status` (the
//!   peers' own public status, asked by this node within bounds) and `GET /members` — what
//!   Consul's and Nomad's status endpoints show without a token. No task, no environment, no
//!   output. So may the API's own description, `/openapi.json` (like `/`, it holds no node
//!   data).
//! - **Everything else needs a token** (`Authorization: Bearer chorus_v1_…`), whose role says
//!   what it may do; roles are ordered, each allows what the ones before it do:
//!   `read` (list and read tasks, secrets redacted), `submit` (submit tasks, cancel one's own),
//!   `operate` (change the membership, cancel any task), `manage` (make tokens).
//! - **A web page in an operator's browser** can make it send requests it did not mean to: a
//!   request whose `Host` is a name this node does not answer to (DNS rebinding) is refused, so
//!   is one whose `Origin` is not this node's; a request that changes anything must say
//!   `Content-Type: application/json` (or raw bytes, `application/octet-stream` or
//!   `application/x-tar`, to `PUT /sandboxes/{id}/files` and `/tree` alone), which a page can
//!   only send after a CORS preflight, and no route answers preflights. A page never holds a token (none is kept in a cookie).
//!
//! A token is `chorus_v1_<role>_<id>_<mac>`: the mac is HMAC-SHA256 of the role and id under the
//! node's ACL key (`acl.key` in the data directory, or the shared `acl_key_file` that makes
//! tokens good on every node of a cluster). Nothing about tokens is stored, so any node holding
//! the key checks any token; revoking one means changing the key (every token goes with it).
//!
//! **Peers are not trusted with an operator's token.** The network key (`psk_file`) admits a
//! machine to the cluster's peer-to-peer network; only the ACL key makes and checks tokens, and
//! a machine may hold the first without the second. The CLI sends the operator's token only to
//! the address the operator named. Where it must follow a peer's advertised address (the node
//! holding a task, the worker streaming its output, the admin), it first asks the named node for
//! a **delegated token** (`POST /acl/delegate`): `chorus_v1d_<role>_<id>_<node>_<expiry>_<mac>`,
//! the caller's role and id, good only at that one node and for [`DELEGATION_TTL_S`] seconds.
//! A peer that is not what it claims learns a token it can spend only on itself, briefly.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::daemon::shared::SharedState;

pub use crate::access::{
    unix_now, AclKey, Caller, HttpRefusal, Role, DELEGATION_TTL_S, MANAGEMENT_ID,
};

/// The API's gatekeeper: the key and the names this node answers to.
#[derive(Debug)]
pub struct Auth {
    key: AclKey,
    /// Host names (besides IP literals and `localhost`) a request's `Host` may carry.
    names: Vec<String>,
    /// This node's id: the audience a delegated token must name.
    node: String,
}

impl Auth {
    pub fn new(key: AclKey, names: Vec<String>) -> Self {
        let names = names.into_iter().map(|n| n.to_ascii_lowercase()).collect();
        Auth {
            key,
            names,
            node: String::new(),
        }
    }

    /// The gatekeeper of node `node`, which accepts tokens delegated to it.
    pub fn for_node(mut self, node: &str) -> Self {
        self.node = node.to_owned();
        self
    }

    pub fn key(&self) -> &AclKey {
        &self.key
    }

    /// Whether a `Host` (or an `Origin`'s host) names this node: an IP literal, `localhost`, or
    /// a configured name. A name an attacker controls that resolves here is none of these.
    fn known_host(&self, host: &str) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<IpAddr>().is_ok() || name == "localhost" || self.names.contains(&name)
    }

    /// Checks a request's head; `Ok(None)` for an anonymous route, `Ok(Some(caller))` for a
    /// token that allows it.
    pub fn admit(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Option<Caller>, HttpRefusal> {
        let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let host = text(header::HOST).ok_or(HttpRefusal::BadHost)?;
        if !self.known_host(host) {
            return Err(HttpRefusal::BadHost);
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            // A browser sends Origin on every request but a same-origin GET; the only pages
            // that may talk to the API are its own (the console at `/ui`, same origin).
            let origin_host = origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .map(|(_, h)| h);
            if origin_host.is_none_or(|h| !h.eq_ignore_ascii_case(host)) {
                return Err(HttpRefusal::CrossOrigin);
            }
        }
        let Some(needed) = required_role(method, path) else {
            return Ok(None);
        };
        if matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
            let kind = text(header::CONTENT_TYPE)
                .and_then(|ct| ct.split(';').next())
                .map(str::trim);
            let is = |want: &str| kind.is_some_and(|k| k.eq_ignore_ascii_case(want));
            // Neither is a type a page may send without a preflight.
            let allowed = is("application/json")
                || (*method == Method::PUT
                    && (is("application/octet-stream") || is("application/x-tar"))
                    && takes_raw_bytes(path));
            if !allowed {
                return Err(HttpRefusal::ContentType);
            }
        }
        let token = text(header::AUTHORIZATION)
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(HttpRefusal::NoToken)?;
        let caller = self
            .key
            .check_at(token, &self.node, unix_now())
            .ok_or(HttpRefusal::BadToken)?;
        if caller.role < needed {
            return Err(HttpRefusal::Role);
        }
        Ok(Some(caller))
    }
}

/// `host:port`, `[v6]:port` or a bare host → the host.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(h, _)| h);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// The role a request needs; `None`: anyone may (health and public state).
pub fn required_role(method: &Method, path: &str) -> Option<Role> {
    // A call relayed to another node (`relay.rs`) needs what the call needs there, and a token
    // even for a public route: the relaying node works on the caller's behalf.
    if let Some((_, inner)) = relayed(path) {
        return Some(required_role(method, inner).map_or(Role::Read, |r| r.max(Role::Read)));
    }
    let public = [
        "/",
        "/healthz",
        "/readyz",
        "/status",
        "/status/history",
        "/metrics",
        "/cluster",
        "/cluster/status",
        "/members",
        "/openapi.json",
    ];
    let read = *method == Method::GET || *method == Method::HEAD;
    // The web console's page, script and style sheet hold no node data and no secret: the
    // page's script reads the routes above like any client, with the operator's token.
    let console = path == super::ui::PAGE || path.starts_with("/ui/");
    if read && (public.contains(&path) || console) {
        return None;
    }
    let tasks = path == "/tasks" || path.starts_with("/tasks/");
    // Live sandboxes: every call runs or reads what a token made (`api/sandboxes.rs`); the
    // handler keeps each to its owner, and lets `operate` list and close any.
    let sandboxes = path == "/sandboxes" || path.starts_with("/sandboxes/");
    if sandboxes {
        return Some(Role::Submit);
    }
    Some(match (method, path) {
        (&Method::POST, "/members" | "/members/transfer" | "/members/leave") => Role::Operate,
        // Any token may ask for a delegated copy of itself (the handler refuses a delegated
        // one).
        (&Method::POST, "/acl/delegate") => Role::Read,
        (&Method::POST, "/tasks") => Role::Submit,
        (&Method::DELETE, _) if tasks => Role::Submit,
        _ if read => Role::Read,
        // Any other change (making tokens, `/acl/tokens`), and any to a route that does not
        // exist: as much as the most a token can.
        _ => Role::Manage,
    })
}

/// The axum middleware: refuses (counted) or hands the request on with its [`Caller`].
pub async fn guard(
    State((shared, auth)): State<(SharedState, Arc<Auth>)>,
    mut request: Request,
    next: Next,
) -> Response {
    match auth.admit(request.method(), request.uri().path(), request.headers()) {
        Ok(caller) => {
            if let Some(caller) = caller {
                request.extensions_mut().insert(caller);
            }
            next.run(request).await
        }
        Err(why) => {
            *shared
                .lock()
                .metrics
                .http_refused
                .entry(why.as_str())
                .or_default() += 1;
            let body = serde_json::json!({ "error": refusal_text(why, request.method()) });
            (why.status(), axum::Json(body)).into_response()
        }
    }
}

/// `/nodes/{node}/api/{path}` (a call for node `node`, relayed by the node asked: `relay.rs`)
/// → the node and `/{path}`.
pub fn relayed(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/nodes/")?;
    let (node, inner) = rest.split_once('/')?;
    let inner = inner.strip_prefix("api")?;
    (!node.is_empty() && inner.starts_with('/')).then_some((node, inner))
}

/// Whether `path` is `/sandboxes/{id}/files` or `/sandboxes/{id}/tree`, the routes that take
/// a raw body (a file's bytes, a tar archive) — itself or relayed to another node.
fn takes_raw_bytes(path: &str) -> bool {
    let path = relayed(path).map_or(path, |(_, inner)| inner);
    path.strip_prefix("/sandboxes/")
        .and_then(|rest| {
            rest.strip_suffix("/files")
                .or_else(|| rest.strip_suffix("/tree"))
        })
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// What a refused caller is told.
fn refusal_text(why: HttpRefusal, method: &Method) -> String {
    match why {
        HttpRefusal::BadHost => "the Host header names no address of this node (configure \
                                 `http_names` to answer to a DNS name)"
            .into(),
        HttpRefusal::CrossOrigin => "cross-origin requests are refused".into(),
        HttpRefusal::ContentType => format!(
            "{method} needs Content-Type: application/json (raw bytes to PUT \
             /sandboxes/ID/files or /tree: application/octet-stream or application/x-tar)"
        ),
        HttpRefusal::NoToken => "this route needs a token: Authorization: Bearer <token> (the \
                                 CLI reads --token, CHORUS_TOKEN or --token-file)"
            .into(),
        HttpRefusal::BadToken => "the token was not made with this node's ACL key".into(),
        HttpRefusal::Role => "the token's role does not allow this".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{DELEGATION_SKEW_S, MAC_BYTES};
    use axum::http::{HeaderValue, StatusCode};

    fn key() -> AclKey {
        AclKey::from_hex(&"ab".repeat(32)).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn tokens_check_under_their_key_only() {
        let k = key();
        let t = k.mint(Role::Submit, "0123456789abcdef");
        let caller = k.check(&t).unwrap();
        assert_eq!(caller.role, Role::Submit);
        assert_eq!(caller.id, "0123456789abcdef");
        let other = AclKey::from_hex(&"cd".repeat(32)).unwrap();
        assert!(other.check(&t).is_none(), "another key's token");
        // The role is bound by the mac: raising it breaks the token.
        let raised = t.replace("_submit_", "_manage_");
        assert!(k.check(&raised).is_none());
        for bad in [
            "",
            "chorus_v1_",
            "chorus_v1_submit_0123456789abcdef",
            &format!("{t}_x"),
            &t[..t.len() - 2],
            &t.replace("0123456789abcdef", "0123456789ABCDEF"),
        ] {
            assert!(k.check(bad).is_none(), "{bad:?}");
        }
        let (fresh, id) = k.mint_new(Role::Read).unwrap();
        assert_eq!(k.check(&fresh).unwrap().id, id);
        assert_eq!(k.check(&k.management_token()).unwrap().role, Role::Manage);
    }

    /// A delegated token speaks for its caller at its one node, until it expires; it is
    /// nothing elsewhere, later, under another key, or with any field changed.
    #[test]
    fn a_delegated_token_is_good_only_at_its_node_and_only_briefly() {
        let k = key();
        let me = "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B";
        let other = "12D3KooWKdbNffbteB6S1nzaAJLDLc6VJh4BJhNfze12Ld1U8GZa";
        let caller = k.check(&k.mint(Role::Submit, "0123456789abcdef")).unwrap();
        let now = 1_800_000_000;
        let t = k.delegate(&caller, me, now + DELEGATION_TTL_S).unwrap();
        let got = k.check_at(&t, me, now).unwrap();
        assert_eq!(
            (got.role, got.id.as_str(), got.delegated),
            (Role::Submit, "0123456789abcdef", true)
        );
        assert!(
            k.check_at(&t, me, now + DELEGATION_TTL_S).is_some(),
            "good to its expiry"
        );
        assert!(
            k.check_at(&t, me, now + DELEGATION_TTL_S + 1).is_none(),
            "expired"
        );
        assert!(k.check_at(&t, other, now).is_none(), "another node's");
        assert!(k.check(&t).is_none(), "not a plain token");
        let other_key = AclKey::from_hex(&"cd".repeat(32)).unwrap();
        assert!(other_key.check_at(&t, me, now).is_none());
        // The issuing node's clock may run ahead, but not by more than the skew allowed.
        let far = k
            .delegate(&caller, me, now + DELEGATION_SKEW_S + 1)
            .unwrap();
        assert!(k.check_at(&far, me, now).is_none(), "expiry too far ahead");
        // Any field changed breaks the mac.
        for (from, to) in [
            ("_submit_", "_manage_"),
            ("0123456789abcdef", "0123456789abcdee"),
            (me, other),
        ] {
            let forged = t.replacen(from, to, 1);
            assert!(k.check_at(&forged, me, now).is_none(), "{forged}");
            assert!(k.check_at(&forged, other, now).is_none(), "{forged}");
        }
        let later = t.replacen(
            &(now + DELEGATION_TTL_S).to_string(),
            &(now + DELEGATION_TTL_S + 60).to_string(),
            1,
        );
        assert!(k.check_at(&later, me, now).is_none(), "{later}");
        // Only a plain node id may be named (no `_`, nothing empty), and a node without an id
        // accepts no delegated token.
        assert!(k.delegate(&caller, "a_b", now + 60).is_none());
        assert!(k.delegate(&caller, "", now + 60).is_none());
        assert!(k.check_at(&t, "", now).is_none());
        // Plain tokens are checked as before.
        assert!(k
            .check_at(&k.management_token(), me, now)
            .is_some_and(|c| !c.delegated));
    }

    /// The roles are ordered read < submit < operate < manage, and a token is admitted to a
    /// route exactly when its role is the route's or above: `operate` changes the membership
    /// but may not make tokens, `manage` does both. The table is written out, not derived
    /// from the order, so swapping two roles (or admitting a role just below the one needed)
    /// fails it.
    #[test]
    fn each_role_allows_what_the_roles_below_it_do_and_no_more() {
        assert_eq!(
            Role::ALL,
            [Role::Read, Role::Submit, Role::Operate, Role::Manage]
        );
        assert!(Role::Read < Role::Submit && Role::Submit < Role::Operate);
        assert!(Role::Operate < Role::Manage, "operate is below manage");
        let auth = Auth::new(key(), vec![]);
        // (method, path, admitted for read, submit, operate, manage)
        let table: &[(Method, &str, [bool; 4])] = &[
            (Method::GET, "/tasks", [true; 4]),
            (Method::POST, "/acl/delegate", [true; 4]),
            (Method::POST, "/tasks", [false, true, true, true]),
            (Method::DELETE, "/tasks/a-1", [false, true, true, true]),
            (Method::POST, "/members", [false, false, true, true]),
            (
                Method::POST,
                "/members/transfer",
                [false, false, true, true],
            ),
            (Method::POST, "/members/leave", [false, false, true, true]),
            (Method::POST, "/acl/tokens", [false, false, false, true]),
            (Method::PUT, "/nosuch", [false, false, false, true]),
        ];
        for (method, path, by_role) in table {
            for (role, admitted) in Role::ALL.into_iter().zip(by_role) {
                let token = format!("Bearer {}", auth.key().mint(role, "0123456789abcdef"));
                let h = headers(&[
                    ("host", "localhost"),
                    ("content-type", "application/json"),
                    ("authorization", &token),
                ]);
                let got = auth.admit(method, path, &h);
                let want = if *admitted {
                    Ok(Some(Caller {
                        role,
                        id: "0123456789abcdef".into(),
                        delegated: false,
                    }))
                } else {
                    Err(HttpRefusal::Role)
                };
                assert_eq!(got, want, "{method} {path} with a {role} token");
            }
        }
    }

    /// A token's mac is checked whole: its own tag cut to any shorter length, or padded, is
    /// refused — a check of only the bytes given would take a 1-byte tag, forged in 256 tries.
    /// For delegated tokens and plain ones alike.
    #[test]
    fn a_token_with_its_tag_cut_short_or_padded_is_refused() {
        let k = key();
        let me = "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B";
        let now = 1_800_000_000;
        let plain = k.mint(Role::Manage, "0123456789abcdef");
        let caller = k.check(&plain).unwrap();
        let delegated = k.delegate(&caller, me, now + DELEGATION_TTL_S).unwrap();
        assert!(k.check_at(&delegated, me, now).is_some());
        for (what, token) in [("plain", &plain), ("delegated", &delegated)] {
            let (head, tag) = token.rsplit_once('_').unwrap();
            assert_eq!(tag.len(), 2 * MAC_BYTES, "{what}");
            let mut forms: Vec<String> = (1..MAC_BYTES)
                .map(|n| format!("{head}_{}", &tag[..2 * n]))
                .collect();
            forms.push(format!("{token}00"));
            forms.push(format!("{head}_"));
            for cut in &forms {
                assert!(k.check_at(cut, me, now).is_none(), "{what}: {cut}");
                assert!(k.check(cut).is_none(), "{what}: {cut}");
            }
        }
    }

    /// `POST /acl/delegate`: a plain token is delegated to the node named; a delegated token
    /// — one the CLI handed to a peer's advertised address — is refused, whatever its role,
    /// so a peer that learnt one cannot stretch it to other nodes or past its expiry.
    #[tokio::test]
    async fn a_delegated_token_cannot_be_delegated_again() {
        use axum::body::Bytes;
        use axum::Extension;
        let me = "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B";
        let other = "12D3KooWKdbNffbteB6S1nzaAJLDLc6VJh4BJhNfze12Ld1U8GZa";
        let auth = Arc::new(Auth::new(key(), vec![]).for_node(me));
        let body = || Bytes::from(format!(r#"{{"audience":"{other}"}}"#));
        for role in Role::ALL {
            let plain = auth.key().mint(role, "0123456789abcdef");
            let caller = auth.key().check_at(&plain, me, unix_now()).unwrap();
            let answer = super::super::acl::delegate(
                Extension(auth.clone()),
                Some(Extension(caller)),
                body(),
            )
            .await;
            assert_eq!(answer.status(), StatusCode::OK, "a plain {role} token");
            let bytes = axum::body::to_bytes(answer.into_body(), 1 << 16)
                .await
                .unwrap();
            let got: super::super::acl::Delegated = serde_json::from_slice(&bytes).unwrap();
            let again = auth.key().check_at(&got.token, other, unix_now()).unwrap();
            assert_eq!((again.role, again.delegated), (role, true), "{role}");

            // The delegated token, presented at its node (`other`), asks for another.
            let at_other = Arc::new(Auth::new(key(), vec![]).for_node(other));
            let answer = super::super::acl::delegate(
                Extension(at_other),
                Some(Extension(again)),
                Bytes::from(format!(r#"{{"audience":"{me}"}}"#)),
            )
            .await;
            assert_eq!(
                answer.status(),
                StatusCode::FORBIDDEN,
                "a delegated {role} token"
            );
        }
    }

    #[test]
    fn keys_round_trip_and_bad_files_say_why() {
        let k = AclKey::generate().unwrap();
        assert_eq!(AclKey::from_hex(&k.to_hex()).unwrap().to_hex(), k.to_hex());
        assert!(AclKey::from_hex("abcd").unwrap_err().contains("2 bytes"));
        assert!(AclKey::from_hex("zz").unwrap_err().contains("hex"));
    }

    /// A relayed call (`/nodes/{node}/api/...`) needs what the call needs at that node, and a
    /// token even for a public route there; a path that only looks like one is no relay.
    #[test]
    fn a_relayed_call_needs_its_own_role_and_never_less_than_read() {
        let n = "/nodes/12D3KooWAYdx/api";
        for (method, inner, role) in [
            (Method::GET, "/status", Role::Read),
            (Method::GET, "/tasks/a-1/logs", Role::Read),
            (Method::POST, "/tasks", Role::Submit),
            (Method::POST, "/sandboxes/x/exec", Role::Submit),
            (Method::POST, "/members", Role::Operate),
            (Method::POST, "/acl/tokens", Role::Manage),
        ] {
            let path = format!("{n}{inner}");
            assert_eq!(required_role(&method, &path), Some(role), "{method} {path}");
            assert_eq!(relayed(&path), Some(("12D3KooWAYdx", inner)));
        }
        for not in [
            "/nodes//api/status",
            "/nodes/x/apistatus",
            "/nodes/x/status",
            "/nodes/x",
        ] {
            assert_eq!(relayed(not), None, "{not}");
        }
        // A raw upload is a raw upload when relayed too.
        assert!(takes_raw_bytes(&format!("{n}/sandboxes/x/files")));
        assert!(!takes_raw_bytes(&format!("{n}/sandboxes/x/exec")));
    }

    #[test]
    fn routes_need_the_roles_the_trust_model_states() {
        for p in [
            "/healthz",
            "/readyz",
            "/status",
            "/status/history",
            "/metrics",
            "/cluster",
            "/cluster/status",
            "/members",
            "/openapi.json",
        ] {
            assert_eq!(required_role(&Method::GET, p), None, "{p}");
        }
        assert_eq!(required_role(&Method::GET, "/tasks"), Some(Role::Read));
        assert_eq!(required_role(&Method::GET, "/tasks/a-1"), Some(Role::Read));
        // A run's output: what reading the task needs (`task get`), no less.
        assert_eq!(
            required_role(&Method::GET, "/tasks/a-1/logs"),
            Some(Role::Read)
        );
        assert_eq!(required_role(&Method::POST, "/tasks"), Some(Role::Submit));
        assert_eq!(
            required_role(&Method::DELETE, "/tasks/a-1"),
            Some(Role::Submit)
        );
        // A delete is a submitter's only for tasks (one's own: the handler checks); any other,
        // on routes that do not exist too, needs the most a token can.
        for p in ["/acl/tokens/x", "/members/x", "/tasksx", "/status"] {
            assert_eq!(required_role(&Method::DELETE, p), Some(Role::Manage), "{p}");
        }
        assert_eq!(
            required_role(&Method::POST, "/members"),
            Some(Role::Operate)
        );
        assert_eq!(
            required_role(&Method::POST, "/acl/tokens"),
            Some(Role::Manage)
        );
        assert_eq!(required_role(&Method::POST, "/status"), Some(Role::Manage));
        // The console's files hold no node data (its script reads the routes above).
        for p in ["/ui", "/ui/app.js", "/ui/style.css"] {
            assert_eq!(required_role(&Method::GET, p), None, "{p}");
        }
        assert_eq!(required_role(&Method::POST, "/ui"), Some(Role::Manage));
    }

    #[test]
    fn admit_refuses_rebinding_cross_origin_text_bodies_and_weak_tokens() {
        let auth = Auth::new(key(), vec!["Chorus.Example".into()]);
        let submit = auth.key().mint(Role::Submit, "0123456789abcdef");
        let read = auth.key().mint(Role::Read, "0123456789abcdef");
        let bearer = |t: &str| format!("Bearer {t}");
        let ok_submit = [
            ("host", "127.0.0.1:7070"),
            ("content-type", "application/json; charset=utf-8"),
        ];
        let admit = |m: Method, p: &str, h: &[(&str, &str)]| auth.admit(&m, p, &headers(h));
        // Public routes: any known host, no token.
        for host in [
            "127.0.0.1:7070",
            "localhost",
            "[::1]:7070",
            "chorus.example:80",
            // An IPv6 literal without brackets is no host:port: taken whole.
            "fe80::1",
        ] {
            assert_eq!(admit(Method::GET, "/status", &[("host", host)]), Ok(None));
        }
        // A port that is not a number is no port: the name is taken whole, and is not ours.
        assert_eq!(
            admit(Method::GET, "/status", &[("host", "localhost:x")]),
            Err(HttpRefusal::BadHost)
        );
        // DNS rebinding: a name that resolves here but is not ours.
        assert_eq!(
            admit(Method::GET, "/status", &[("host", "evil.example:7070")]),
            Err(HttpRefusal::BadHost)
        );
        assert_eq!(
            admit(Method::GET, "/status", &[]),
            Err(HttpRefusal::BadHost)
        );
        // A page's no-cors POST: text/plain, and an Origin of its own.
        let t = bearer(&submit);
        let mut h = ok_submit.to_vec();
        h.push(("authorization", &t));
        assert!(admit(Method::POST, "/tasks", &h).unwrap().is_some());
        let mut text = h.clone();
        text[1] = ("content-type", "text/plain");
        assert_eq!(
            admit(Method::POST, "/tasks", &text),
            Err(HttpRefusal::ContentType)
        );
        // Raw bytes: only a file's, to the one route that takes them.
        let mut raw = h.clone();
        raw[1] = ("content-type", "application/octet-stream");
        assert!(admit(Method::PUT, "/sandboxes/n-1/files", &raw)
            .unwrap()
            .is_some());
        let mut tar = h.clone();
        tar[1] = ("content-type", "application/x-tar");
        assert!(admit(Method::PUT, "/sandboxes/n-1/tree", &tar)
            .unwrap()
            .is_some());
        assert_eq!(
            admit(Method::POST, "/tasks", &tar),
            Err(HttpRefusal::ContentType)
        );
        for (method, path) in [
            (Method::POST, "/tasks"),
            (Method::POST, "/sandboxes/n-1/files"),
            (Method::PUT, "/sandboxes/n-1/files/x"),
            (Method::PUT, "/sandboxes//files"),
            (Method::POST, "/sandboxes"),
        ] {
            assert_eq!(
                admit(method.clone(), path, &raw),
                Err(HttpRefusal::ContentType),
                "{method} {path}"
            );
        }
        let mut page = h.clone();
        page.push(("origin", "https://evil.example"));
        assert_eq!(
            admit(Method::POST, "/tasks", &page),
            Err(HttpRefusal::CrossOrigin)
        );
        let mut same = h.clone();
        same.push(("origin", "http://127.0.0.1:7070"));
        assert!(admit(Method::POST, "/tasks", &same).is_ok());
        // Tokens: none, forged, too weak.
        assert_eq!(
            admit(Method::POST, "/tasks", &ok_submit),
            Err(HttpRefusal::NoToken)
        );
        let forged = bearer(
            &AclKey::generate()
                .unwrap()
                .mint(Role::Manage, MANAGEMENT_ID),
        );
        let mut f = ok_submit.to_vec();
        f.push(("authorization", &forged));
        assert_eq!(
            admit(Method::POST, "/tasks", &f),
            Err(HttpRefusal::BadToken)
        );
        let r = bearer(&read);
        let mut weak = ok_submit.to_vec();
        weak.push(("authorization", &r));
        assert_eq!(admit(Method::POST, "/tasks", &weak), Err(HttpRefusal::Role));
        assert_eq!(
            admit(Method::POST, "/members", &h),
            Err(HttpRefusal::Role),
            "submit may not change members"
        );
        assert_eq!(
            admit(
                Method::GET,
                "/tasks",
                &[("host", "localhost"), ("authorization", &r)]
            )
            .unwrap()
            .unwrap()
            .role,
            Role::Read
        );
        assert_eq!(
            admit(Method::GET, "/tasks", &[("host", "localhost")]),
            Err(HttpRefusal::NoToken)
        );
    }
}
