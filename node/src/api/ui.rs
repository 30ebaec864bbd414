//! `/ui`: the web console (issue 37) — one server-rendered page, its script and its style
//! sheet, all compiled into the binary (`ui/`), nothing fetched from anywhere else. The page
//! holds no node data and no secret: its script polls `/status`, `/cluster` and (with the
//! operator's read token, kept in the tab's `sessionStorage`) `/tasks` like any other client,
//! so the gatekeeper in [`super::auth`] decides what it sees. Everything it draws from node
//! data goes in as text (`textContent`, SVG attributes), never as markup.
//!
//! Every answer carries a strict Content-Security-Policy (`default-src 'self'`, no inline
//! script or style, no framing), `X-Content-Type-Options: nosniff` and no referrer.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::status;
use crate::daemon::shared::SharedState;
use crate::wire::STATES;

/// The console's page.
pub const PAGE: &str = "/ui";
/// Its script (a file of its own: the policy allows no inline script).
pub const SCRIPT: &str = "/ui/app.js";
/// Its style sheet.
pub const STYLE: &str = "/ui/style.css";

/// The policy every console answer carries: this origin only, for everything; no plugins, no
/// `<base>`, no form posts, no framing (clickjacking).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = include_str!("ui/index.html");
const JS: &str = include_str!("ui/app.js");
const CSS: &str = include_str!("ui/style.css");

/// `GET /` with the console on: a browser (its `Accept` names `text/html`) is sent to the
/// console; anything else (`curl`, scripts) gets the list of endpoints, as without it.
pub(super) async fn root(headers: HeaderMap) -> Response {
    if wants_html(&headers) {
        Redirect::to(PAGE).into_response()
    } else {
        status::index().await.into_response()
    }
}

/// `GET /ui`: the page, with this node's id and version filled in (escaped).
pub(super) async fn page(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    let node_id = shared.lock().node_id.clone();
    secured("text/html; charset=utf-8", render(&node_id))
}

/// `GET /ui/app.js`.
pub(super) async fn script() -> Response {
    secured("text/javascript; charset=utf-8", JS.to_owned())
}

/// `GET /ui/style.css`.
pub(super) async fn style() -> Response {
    secured("text/css; charset=utf-8", CSS.to_owned())
}

/// Whether a request's `Accept` asks for a web page.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|m| {
            m.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/html"))
        })
}

/// The page's text: the template with the node's id, the build and the task states (the
/// filter's choices, the same list `/tasks?state=` takes).
fn render(node_id: &str) -> String {
    let states: String = STATES
        .iter()
        .map(|s| format!("<option value=\"{s}\">{}</option>", s.replace('_', " ")))
        .collect();
    HTML.replace("{{NODE}}", &escape(node_id))
        .replace("{{VERSION}}", &escape(crate::build_info::BUILD.version))
        .replace("{{STATES}}", &states)
}

/// An answer with the console's security headers; never cached (the page names the node).
fn secured(content_type: &'static str, body: String) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Text for HTML: `&`, `<`, `>`, `"` and `'` escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use std::sync::Arc;
    use tower::ServiceExt;

    fn auth() -> Arc<super::super::auth::Auth> {
        let key = super::super::auth::AclKey::from_hex(&"ab".repeat(32)).unwrap();
        Arc::new(super::super::auth::Auth::new(key, Vec::new()))
    }

    /// One request through the whole router (the gatekeeper included).
    async fn call(ui: bool, path: &str, headers: &[(&str, &str)]) -> Response {
        let app = super::super::router(
            SharedState::default(),
            auth(),
            "127.0.0.1:7070".parse().unwrap(),
            ui,
        );
        let mut request = Request::get(path).header("host", "127.0.0.1:7070");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        app.oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    async fn text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn the_console_is_served_with_a_strict_policy_and_no_token() {
        for (path, kind) in [
            (PAGE, "text/html"),
            (SCRIPT, "text/javascript"),
            (STYLE, "text/css"),
        ] {
            let r = call(true, path, &[]).await;
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let h = r.headers();
            assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind));
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.starts_with("default-src 'self'"), "{csp}");
            assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
        let page = text(call(true, PAGE, &[]).await).await;
        // No inline script or style: the policy would refuse it, and the page must work.
        assert!(
            page.contains(&format!("<script src=\"{SCRIPT}\"")),
            "{page}"
        );
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "{page}"
        );
        assert!(page.contains("<option value=\"out_of_memory\">"), "{page}");
        assert!(!page.contains("{{"), "every placeholder filled: {page}");
    }

    #[tokio::test]
    async fn a_browser_asking_for_the_root_goes_to_the_console_others_get_the_list() {
        let browser = "text/html,application/xhtml+xml,*/*;q=0.8";
        let r = call(true, "/", &[("accept", browser)]).await;
        assert!(r.status().is_redirection(), "{}", r.status());
        assert_eq!(r.headers()[header::LOCATION], PAGE);
        for accept in [&[("accept", "*/*")][..], &[]] {
            let r = call(true, "/", accept).await;
            assert_eq!(r.status(), StatusCode::OK);
            assert!(text(r).await.contains("GET /healthz"));
        }
    }

    #[tokio::test]
    async fn with_the_console_off_there_is_no_page_and_the_root_lists() {
        assert_eq!(call(false, PAGE, &[]).await.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            call(false, SCRIPT, &[]).await.status(),
            StatusCode::NOT_FOUND
        );
        let r = call(false, "/", &[("accept", "text/html")]).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(text(r).await.contains("GET /healthz"));
    }

    #[tokio::test]
    async fn the_page_is_same_origin_only() {
        // Its own origin passes the gatekeeper; another site's page may not load it into its
        // requests (and the policy forbids framing it).
        let own = call(true, PAGE, &[("origin", "http://127.0.0.1:7070")]).await;
        assert_eq!(own.status(), StatusCode::OK);
        let foreign = call(true, PAGE, &[("origin", "http://evil.example")]).await;
        assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
        // Reading tasks still takes a token, from the console as from anyone.
        let tasks = call(true, "/tasks", &[("origin", "http://127.0.0.1:7070")]).await;
        assert_eq!(tasks.status(), StatusCode::UNAUTHORIZED);
    }

    /// Node data (ids, addresses, task output) must never be parsed as markup, and the script
    /// must reach nothing but this node.
    #[test]
    fn the_script_writes_text_only_and_fetches_only_from_its_node() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!JS.contains(sink), "app.js uses {sink}");
        }
        // The one absolute URL is the SVG namespace, a name that is never fetched.
        assert_eq!(JS.matches("://").count(), 1);
        assert!(JS.contains("const SVG = 'http://www.w3.org/2000/svg';"));
        assert!(!HTML.contains("://") && !CSS.contains("://"));
    }

    #[test]
    fn the_node_id_is_escaped_into_the_page() {
        let page = render("<img src=x onerror=alert(1)>");
        assert!(!page.contains("<img"), "{page}");
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    }
}
