//! `GET /healthz`, `/readyz`, `/status` (the node's own state, for people and for `chorus
//! status`) and `/metrics` (Prometheus text).

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::{NodeId, Refusal, Role};
use serde::Serialize;

use crate::daemon::metrics::role_name;
use crate::daemon::shared::{Shared, SharedState};

/// The `/status` document.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Status {
    pub node_id: String,
    /// `admin`, `follower`, `pre_candidate` or `candidate` — the same label as `chorus_role`
    /// in `/metrics`.
    pub role: &'static str,
    pub term: u64,
    pub admin: Option<String>,
    /// A follower's: milliseconds since it last heard from its admin (absent on the admin, or
    /// with none known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_heard_ms: Option<u64>,
    /// A follower whose admin has not been heard for more than two heartbeat intervals: its
    /// heartbeats stopped (it is down or cut off from here), and an election follows once this
    /// node's timeout runs out; until then `admin` still names it (issue 54, item 6).
    pub admin_silent: bool,
    pub voted_for: Option<String>,
    pub lease_until_ms: Option<u64>,
    /// The node's clock at the time of the request (the lease is on this clock).
    pub now_ms: u64,
    /// Milliseconds of lease left at the time of the request (admin only).
    pub lease_left_ms: Option<u64>,
    pub peers: Vec<String>,
    pub beat: u64,
    pub electorate: Vec<String>,
    /// The electorate's version and the term that proposed it (0 at bootstrap; both 0 before
    /// the cluster formed).
    pub electorate_version: u64,
    pub electorate_term: u64,
    /// How many of the electorate's other members this node is connected to, of how many
    /// (absent before there is an electorate, or when this node is its only member): fewer
    /// than half means an election could not be won from here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub voters_connected: Option<VotersConnected>,
    /// Messages refused because their sender belongs to another cluster (an operator's
    /// mistake: two clusters founded where one was meant; see `foreign_cluster` in `/metrics`).
    pub foreign_cluster_refusals: u64,
    pub listen_addrs: Vec<String>,
    /// SHA-256 of the HTTP API's TLS certificate (what `--tls-fingerprint` pins), when it
    /// speaks TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_tls_fingerprint: Option<String>,
    pub capabilities: Vec<String>,
    /// Seconds since the process started, at the time of the request.
    pub uptime_s: u64,
    pub shutting_down: bool,
    /// What the node waits for while it knows no admin (peers, a discovery, an election), as
    /// its log says it every few seconds; absent once an admin is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// The build this node runs.
    pub build: crate::build_info::BuildInfo,
}

/// `connected` of the `others` members of the electorate (this node left out).
#[derive(Clone, Copy, Debug, Serialize, utoipa::ToSchema)]
pub struct VotersConnected {
    pub connected: usize,
    pub others: usize,
}

impl Shared {
    /// What this node listens on now, each with `/p2p/<id>`: the transport's live list (a
    /// listener on `0.0.0.0` has an address per interface, issue 54), else what it reported
    /// at start.
    fn listen_addrs_now(&self) -> Vec<String> {
        match self.transport_stats.as_ref().map(|t| t.listen_addrs()) {
            Some(now) if !now.is_empty() => now
                .iter()
                .map(|a| format!("{a}/p2p/{}", self.node_id))
                .collect(),
            _ => self.listen_addrs.clone(),
        }
    }

    /// The status document, or `None` before recovery finished.
    pub fn status(&self) -> Option<Status> {
        let core = self.core.as_ref()?;
        let now_ms = self.now_ms()?;
        let lease_until_ms = core.lease_until_ms().filter(|_| core.role() == Role::Admin);
        let admin_heard_ms = core
            .admin()
            .filter(|a| *a != core.id())
            .and_then(|a| self.last_contact.get(a.as_str()))
            .map(|t| t.elapsed().as_millis() as u64);
        let silent_after = core.config().heartbeat_interval_ms.saturating_mul(2);
        Some(Status {
            node_id: self.node_id.clone(),
            role: role_name(core.role()),
            term: core.term(),
            admin: core.admin().map(NodeId::to_string),
            admin_heard_ms,
            admin_silent: admin_heard_ms.is_some_and(|ms| ms > silent_after),
            voted_for: core.voted_for().map(NodeId::to_string),
            lease_until_ms,
            now_ms,
            lease_left_ms: lease_until_ms.map(|l| l.saturating_sub(now_ms)),
            peers: core.peers().ids().map(NodeId::to_string).collect(),
            beat: core.beat(),
            electorate: core
                .electorate()
                .map(|e| e.members().iter().map(NodeId::to_string).collect())
                .unwrap_or_default(),
            electorate_version: core.electorate().map_or(0, |e| e.version),
            electorate_term: core.electorate().map_or(0, |e| e.term),
            voters_connected: crate::daemon::progress::voters_connected(core)
                .map(|(connected, others)| VotersConnected { connected, others }),
            foreign_cluster_refusals: self
                .metrics
                .refused
                .get(Refusal::ForeignCluster.as_str())
                .copied()
                .unwrap_or(0),
            listen_addrs: self.listen_addrs_now(),
            http_tls_fingerprint: self.http_tls_fingerprint.clone(),
            capabilities: self.capabilities.clone(),
            uptime_s: self
                .started_at
                .map_or_else(|| core.uptime_s(), |t| t.elapsed().as_secs()),
            shutting_down: self.shutting_down,
            waiting: crate::daemon::progress::waiting_line(core, &self.capabilities, now_ms),
            build: crate::build_info::BUILD,
        })
    }
}

/// `GET /`: what this is and where to go (a browser or `curl` pointed at the port finds out).
#[utoipa::path(
    get,
    path = "/",
    tag = "health",
    summary = "What this is",
    description = "The node's version and its routes, as text for people. With the web console \
        on (`http_ui`, the default), a browser (`Accept: text/html`) is sent to `/ui` instead.",
    responses(
        (status = 200, description = "The list of routes", body = String, content_type = "text/plain"),
        (status = 303, description = "To the web console at `/ui` (a browser, with the console on)"),
    )
)]
pub(super) async fn index() -> &'static str {
    concat!(
        "CHORUS node ",
        env!("CARGO_PKG_VERSION"),
        ": the HTTP API.\n\n",
        "Public:        GET /healthz /readyz /status /status/history /metrics\n",
        "               GET /cluster /cluster/status /members /openapi.json\n",
        "With a token:  GET /tasks /tasks/ID, POST /tasks, DELETE /tasks/ID (submit),\n",
        "               POST /members (operate), POST /acl/tokens (manage)\n",
        "               (Authorization: Bearer TOKEN; `chorus acl token create --help`)\n\n",
        "From a shell:  chorus status | chorus status --cluster | chorus task --help\n",
        "In a browser:  /ui, the web console (unless the node runs with http_ui = false)\n",
    )
}

/// `GET /healthz`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    summary = "Liveness",
    description = "`ok` while the process serves its API.",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain"))
)]
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once an admin is known (this node or another).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    summary = "Readiness",
    description = "Ready once an admin is known (this node or another).",
    responses(
        (status = 200, description = "`ready: admin <id>`", body = String, content_type = "text/plain"),
        (status = 503, description = "`no admin known`", body = String, content_type = "text/plain"),
    )
)]
pub(super) async fn readyz(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    let admin = shared.lock().core.as_ref().and_then(|c| c.admin().cloned());
    match admin {
        Some(admin) => (StatusCode::OK, format!("ready: admin {admin}\n")).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no admin known\n").into_response(),
    }
}

/// `GET /status`.
#[utoipa::path(
    get,
    path = "/status",
    tag = "health",
    summary = "This node's own state",
    description = "Its role, term, the admin it knows, its lease, peers, electorate, build \
        (what `chorus status` prints).",
    responses(
        (status = 200, description = "The node's state", body = Status),
        (status = 503, description = "`starting` (before recovery finished)", body = String, content_type = "text/plain"),
    )
)]
pub(super) async fn status(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    match shared.lock().status() {
        Some(status) => Json(status).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    summary = "Prometheus metrics",
    description = "The node's metrics in the Prometheus text format (version 0.0.4).",
    responses((status = 200, description = "The metrics", body = String, content_type = "text/plain; version=0.0.4; charset=utf-8"))
)]
pub(super) async fn metrics(State((shared, _)): State<(SharedState, SocketAddr)>) -> Response {
    let body = shared.lock().metrics_text();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Config, Core, Event, ADMIN_ELECTION};
    use std::time::{Duration, Instant};

    /// The role `/metrics` reports with value 1.
    fn metrics_role(text: &str) -> String {
        let ones: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("chorus_role{") && l.ends_with(" 1"))
            .collect();
        assert_eq!(ones.len(), 1, "exactly one role is 1: {ones:?}");
        ones[0]
            .split('"')
            .nth(1)
            .expect("a quoted role label")
            .to_owned()
    }

    /// Fires the core's timers until `until` holds, checking at every state that `/status`
    /// and `/metrics` name the same role; returns the roles seen, in order.
    fn walk(core: &mut Core, until: impl Fn(&Core) -> bool) -> Vec<&'static str> {
        let mut shared = Shared::default();
        let mut seen = Vec::new();
        let mut out = Vec::new();
        // Bounded: discovery re-arms every 100 ms, the election within 45 s.
        for _ in 0..2_000 {
            shared.core = Some(core.clone());
            let status = shared.status().unwrap();
            assert_eq!(status.role, metrics_role(&shared.metrics_text()));
            if seen.last() != Some(&status.role) {
                seen.push(status.role);
            }
            if until(core) {
                return seen;
            }
            let (at, timer) = core.next_deadline().expect("a timer is armed");
            out.clear();
            core.step(at, Event::TimerFired { timer }, &mut out);
        }
        panic!("the condition never held; roles seen: {seen:?}");
    }

    fn voter(bootstrap_expect: u32) -> Core {
        let config = Config {
            discovery_timeout_ms: 100,
            bootstrap_expect,
            ..Config::default()
        };
        let mut core = Core::new("me".into(), config, vec![ADMIN_ELECTION.into()], 1).unwrap();
        core.step(0, Event::Started, &mut Vec::new());
        core
    }

    #[test]
    fn status_and_metrics_agree_on_a_pre_candidate() {
        let mut core = voter(2);
        let info = chorus_core::PeerInfo {
            capabilities: vec![ADMIN_ELECTION.to_owned()].into(),
            ..chorus_core::PeerInfo::default()
        };
        core.step(1, Event::peer_up("other".into(), info), &mut Vec::new());
        core.set_electorate_for_test(chorus_core::Electorate::new(
            1,
            vec!["me".into(), "other".into()],
        ));
        // The other voter never answers: this node stays a pre-candidate.
        let seen = walk(&mut core, |c| c.role() != Role::Follower);
        assert_eq!(seen, ["follower", "pre_candidate"]);
    }

    #[test]
    fn status_and_metrics_agree_on_an_admin() {
        let mut core = voter(1);
        let seen = walk(&mut core, |c| c.role() == Role::Admin);
        assert_eq!(seen.first(), Some(&"follower"), "{seen:?}");
        assert_eq!(seen.last(), Some(&"admin"), "{seen:?}");
    }

    /// Issue 35: `/status` of a node without an admin says what it waits for.
    #[test]
    fn status_says_what_a_waiting_node_waits_for() {
        let mut shared = Shared {
            core: Some(voter(3)),
            capabilities: vec![ADMIN_ELECTION.into()],
            ..Shared::default()
        };
        let waiting = shared.status().unwrap().waiting.expect("it waits");
        assert!(
            waiting.starts_with("waiting for peers: 1 of 3 voter(s) known"),
            "{waiting}"
        );
        let mut core = voter(1);
        walk(&mut core, |c| c.role() == Role::Admin);
        shared.core = Some(core);
        assert_eq!(shared.status().unwrap().waiting, None);
    }

    #[test]
    fn status_time_and_lease_are_those_of_the_request() {
        let mut core = Core::new(
            "me".into(),
            Config::default(),
            vec![ADMIN_ELECTION.into()],
            1,
        )
        .unwrap();
        let mut out = Vec::new();
        core.step(5_000, Event::Started, &mut out);
        let shared = Shared {
            core: Some(core),
            stepped_at: Some(Instant::now() - Duration::from_secs(10)),
            started_at: Some(Instant::now() - Duration::from_secs(26)),
            ..Shared::default()
        };
        let status = shared.status().unwrap();
        assert!(status.now_ms >= 15_000, "{}", status.now_ms);
        assert!(status.uptime_s >= 26, "{}", status.uptime_s);
    }
}
