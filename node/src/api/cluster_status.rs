//! `GET /cluster/status`: every node's own view — its role, term, the admin it knows, its lease
//! left, its electorate's version — as that node's `/status` says it, gathered by the node
//! asked, with whether each one could be reached. The console's cluster table reads it.
//!
//! Why the node asks its peers rather than use what the protocol already told it: the protocol
//! carries too little of it. The admin's heartbeats tell everyone its term; the acknowledgements
//! go to the admin alone; nothing a follower hears says another follower's role or term, a
//! candidate's standing, or anyone's lease or electorate version. Each node's public `/status`
//! does, and each node already knows its connected peers' API addresses (advertised with the
//! connection, a TLS one pinned by its `#sha256=`), which `chorus status --cluster` follows the
//! same way from the command line. A peer chooses only the port: the address asked is always
//! at the IP its connection comes from (the transport's `reachable_http`), so no peer can point
//! this node's requests at another host. A peer whose API advertised no address this node
//! reaches (bound to its own loopback) is asked through an API tunnel of the cluster
//! transport instead (issue 54, item 8).
//!
//! Bounded, so that no page can make a node flood its peers: at most [`MAX_ASKED`] peers (the
//! electorate first), all asked at once, each given [`PEER_TIMEOUT`]; one gathering at a time,
//! its answer kept [`FRESH`] for every caller. A peer's answer is read into a few typed fields
//! (at most [`MAX_ANSWER_BYTES`] of it) and checked to be that node's; nothing else of it is
//! passed on. A peer that is not connected is not asked (its address went with its
//! connection): it is shown unreachable at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::cluster::{ClusterView, Member};
use super::sandbox_forward::TUNNEL_HOST;
use super::status::Status;
use crate::daemon::shared::SharedState;
use crate::http1::{self, Endpoint};
use chorus_io::transport::libp2p::ApiTunnels;

/// Most peers asked in one gathering.
pub const MAX_ASKED: usize = 64;
/// How long a peer gets to answer.
pub const PEER_TIMEOUT: Duration = Duration::from_millis(1_000);
/// How long a gathering's answer is given to every caller before the next one starts.
pub const FRESH: Duration = Duration::from_millis(1_000);
/// The most of a peer's answer read (a status names its peers and electorate: a few KiB).
pub const MAX_ANSWER_BYTES: u64 = 256 << 10;

/// The document: every node the asked node knows, each with its own view or why not.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ClusterStatus {
    /// The node asked.
    pub node_id: String,
    /// It first, then the others in id order.
    pub nodes: Vec<NodeStatus>,
    /// How many were not asked (more than [`MAX_ASKED`]).
    pub not_asked: usize,
}

/// One node: as the asked node knows it, and as it reports itself.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct NodeStatus {
    #[serde(flatten)]
    pub member: Member,
    /// Its own view, when its API answered.
    pub status: Option<OwnView>,
    /// Why there is none.
    pub error: Option<String>,
}

/// What a node says of itself: the part of its `/status` the console shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OwnView {
    pub role: String,
    pub term: u64,
    pub admin: Option<String>,
    pub lease_left_ms: Option<u64>,
    pub electorate_size: usize,
    pub electorate_version: u64,
    pub electorate_term: u64,
    /// The version it runs.
    pub version: String,
}

impl From<&Status> for OwnView {
    fn from(s: &Status) -> Self {
        OwnView {
            role: s.role.to_owned(),
            term: s.term,
            admin: s.admin.clone(),
            lease_left_ms: s.lease_left_ms,
            electorate_size: s.electorate.len(),
            electorate_version: s.electorate_version,
            electorate_term: s.electorate_term,
            version: s.build.version.to_owned(),
        }
    }
}

/// A peer's `/status` as read: only the fields shown (the rest is not even kept).
#[derive(Deserialize)]
struct Reported {
    node_id: String,
    role: String,
    term: u64,
    admin: Option<String>,
    lease_left_ms: Option<u64>,
    #[serde(default)]
    electorate: Vec<String>,
    #[serde(default)]
    electorate_version: u64,
    #[serde(default)]
    electorate_term: u64,
    #[serde(default)]
    build: ReportedBuild,
}

#[derive(Default, Deserialize)]
struct ReportedBuild {
    #[serde(default)]
    version: String,
}

/// Longest id or version accepted from a peer (a node id is 52 characters).
const MAX_FIELD: usize = 128;

impl Reported {
    /// The view, if this is node `id`'s status and its fields are of the kinds a status has.
    fn check(self, id: &str) -> Result<OwnView, String> {
        if self.node_id != id {
            return Err(
                "another node answers at its advertised address (its API listens on \
                        its own machine's loopback?)"
                    .into(),
            );
        }
        let roles = ["admin", "follower", "pre_candidate", "candidate"];
        let fits = |s: &str| s.len() <= MAX_FIELD;
        if !roles.contains(&self.role.as_str())
            || !self.admin.as_deref().is_none_or(fits)
            || !fits(&self.build.version)
        {
            return Err("its answer is not a status".into());
        }
        Ok(OwnView {
            role: self.role,
            term: self.term,
            admin: self.admin,
            lease_left_ms: self.lease_left_ms,
            electorate_size: self.electorate.len(),
            electorate_version: self.electorate_version,
            electorate_term: self.electorate_term,
            version: self.build.version,
        })
    }
}

/// Node `id`'s own view, from its API at `http`, or through an API tunnel of the cluster
/// transport when it advertised no address this node reaches (no token: `/status` is public).
async fn ask(
    http: Option<&str>,
    tunnels: Option<&ApiTunnels>,
    id: &str,
) -> Result<OwnView, String> {
    let (stream, host, how): (Box<dyn http1::Connection>, String, &str) = match (http, tunnels) {
        (Some(http), _) => {
            let endpoint = Endpoint::parse(http)
                .map_err(|_| "its advertised API address is not one".to_owned())?;
            let tls = match (&endpoint.tls, &endpoint.pin) {
                (false, _) => None,
                (true, Some(pin)) => Some(http1::pinned(pin.clone()).map_err(|e| e.to_string())?),
                (true, None) => {
                    return Err("its API speaks TLS but its address pins no certificate".into())
                }
            };
            let stream = http1::connect(&endpoint, tls)
                .await
                .map_err(|e| format!("unreachable: {e}"))?;
            (stream, endpoint.host_port, "unreachable")
        }
        (None, Some(tunnels)) => {
            let how = "unreachable through the cluster transport";
            let stream = tunnels.open(id).await.map_err(|e| format!("{how}: {e}"))?;
            (Box::new(stream), TUNNEL_HOST.to_owned(), how)
        }
        (None, None) => return Err("it advertised no HTTP API this node may ask".into()),
    };
    let answer = http1::send_on(
        stream,
        &host,
        "GET",
        "/status",
        None,
        None,
        MAX_ANSWER_BYTES,
    )
    .await
    .map_err(|e| format!("{how}: {e}"))?;
    if answer.code != 200 {
        return Err(format!("its API answered {}", answer.code));
    }
    serde_json::from_slice::<Reported>(&answer.body)
        .map_err(|_| "its answer is not a status".to_owned())?
        .check(id)
}

/// Asks every connected peer of `view` (at most [`MAX_ASKED`], voters first) for its own view,
/// all at once, each for at most `timeout`, at its API or through `tunnels`; `own` is the
/// asked node's.
pub async fn gather(
    view: ClusterView,
    own: OwnView,
    tunnels: Option<ApiTunnels>,
    timeout: Duration,
) -> ClusterStatus {
    let mut nodes: Vec<NodeStatus> = view
        .members
        .into_iter()
        .map(|member| NodeStatus {
            member,
            status: None,
            error: None,
        })
        .collect();
    let mut askable: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].member.node_id != view.node_id)
        .filter(|&i| {
            let m = &nodes[i].member;
            m.connected && (m.http.is_some() || tunnels.is_some())
        })
        .collect();
    // Stable: voters first, each group in id order.
    askable.sort_by_key(|&i| !nodes[i].member.voter);
    let not_asked = askable.split_off(askable.len().min(MAX_ASKED));
    let mut asking = tokio::task::JoinSet::new();
    for &i in &askable {
        let m = &nodes[i].member;
        let (http, id, tunnels) = (m.http.clone(), m.node_id.clone(), tunnels.clone());
        asking.spawn(async move {
            let asked = ask(http.as_deref(), tunnels.as_ref(), &id);
            let answer = tokio::time::timeout(timeout, asked).await;
            let answer = answer
                .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())));
            (i, answer)
        });
    }
    while let Some(done) = asking.join_next().await {
        // A task that panicked leaves its row with the default error below.
        if let Ok((i, answer)) = done {
            match answer {
                Ok(v) => nodes[i].status = Some(v),
                Err(e) => nodes[i].error = Some(e),
            }
        }
    }
    for &i in &not_asked {
        nodes[i].error = Some(format!("not asked: more than {MAX_ASKED} peers"));
    }
    for n in &mut nodes {
        if n.member.node_id == view.node_id {
            n.status = Some(own.clone());
        } else if n.status.is_none() && n.error.is_none() {
            n.error = Some(
                if n.member.connected {
                    "connected, but it advertised no HTTP API this node may ask (an API bound to its own \
                     loopback answers its own host only)"
                } else {
                    "not connected: down, or cut off from this node"
                }
                .to_owned(),
            );
        }
    }
    ClusterStatus {
        node_id: view.node_id,
        nodes,
        not_asked: not_asked.len(),
    }
}

/// One gathering at a time, its answer shared while [`FRESH`].
#[derive(Debug)]
pub struct Asker {
    last: tokio::sync::Mutex<Option<(Instant, ClusterStatus)>>,
    timeout: Duration,
}

impl Default for Asker {
    fn default() -> Self {
        Asker::new(PEER_TIMEOUT)
    }
}

impl Asker {
    pub fn new(timeout: Duration) -> Self {
        Asker {
            last: tokio::sync::Mutex::new(None),
            timeout,
        }
    }

    /// The last gathering's answer while fresh, else a new one from what `now` says (the
    /// cluster view and this node's own); `None` while the node starts.
    pub async fn get(
        &self,
        now: impl FnOnce() -> Option<(ClusterView, OwnView, Option<ApiTunnels>)>,
    ) -> Option<ClusterStatus> {
        // Held through the gathering: a caller arriving meanwhile waits and takes its answer.
        let mut last = self.last.lock().await;
        if let Some((at, doc)) = last.as_ref() {
            if at.elapsed() < FRESH {
                return Some(doc.clone());
            }
        }
        let (view, own, tunnels) = now()?;
        let doc = gather(view, own, tunnels, self.timeout).await;
        *last = Some((Instant::now(), doc.clone()));
        Some(doc)
    }
}

/// `GET /cluster/status`.
#[utoipa::path(
    get,
    path = "/cluster/status",
    tag = "cluster",
    summary = "Every node's own view",
    description = "Each node's role, term, admin, lease and electorate version as its own \
        `/status` says it, asked by this node of its connected peers (at most 64, each given \
        1 s; one gathering a second serves every caller), with why a node could not be asked.",
    responses(
        (status = 200, description = "Every node", body = ClusterStatus),
        (status = 503, description = "`starting`", body = String, content_type = "text/plain"),
    )
)]
pub(super) async fn cluster_status(
    State((shared, bound)): State<(SharedState, SocketAddr)>,
    Extension(asker): Extension<Arc<Asker>>,
) -> Response {
    let now = || {
        let s = shared.lock();
        let view = s.cluster(&bound.to_string())?;
        Some((view, OwnView::from(&s.status()?), s.tunnels.clone()))
    };
    match asker.get(now).await {
        Some(doc) => Json(doc).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TIMEOUT: Duration = Duration::from_millis(400);

    /// A fake node API on loopback answering every request with `body` (no answer at all when
    /// `None`); counts the connections it took.
    async fn fake(body: Option<String>) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let taken = Arc::new(AtomicUsize::new(0));
        let count = taken.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    match body {
                        Some(body) => {
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = s.write_all(answer.as_bytes()).await;
                        }
                        // Silent: holds the connection open for longer than anyone waits.
                        None => tokio::time::sleep(Duration::from_secs(30)).await,
                    }
                });
            }
        });
        (addr, taken)
    }

    fn status_of(id: &str, role: &str, term: u64) -> String {
        serde_json::json!({
            "node_id": id, "role": role, "term": term, "admin": "a", "lease_left_ms": null,
            "electorate": ["a", "b", "c"], "electorate_version": 2, "electorate_term": 1,
            "build": { "version": "0.1.0", "git_rev": "x" }, "peers": ["a"],
        })
        .to_string()
    }

    fn member(id: &str, http: Option<&str>, connected: bool, voter: bool) -> Member {
        Member {
            node_id: id.into(),
            http: http.map(str::to_owned),
            voter,
            connected,
            last_contact_ms: Some(5),
        }
    }

    fn own() -> OwnView {
        OwnView {
            role: "admin".into(),
            term: 4,
            admin: Some("a".into()),
            lease_left_ms: Some(900),
            electorate_size: 3,
            electorate_version: 2,
            electorate_term: 1,
            version: "0.1.0".into(),
        }
    }

    fn view(members: Vec<Member>) -> ClusterView {
        ClusterView {
            node_id: "a".into(),
            term: 4,
            admin: Some("a".into()),
            members,
        }
    }

    fn by_id<'a>(doc: &'a ClusterStatus, id: &str) -> &'a NodeStatus {
        doc.nodes.iter().find(|n| n.member.node_id == id).unwrap()
    }

    #[tokio::test]
    async fn each_node_reports_itself_and_one_that_does_not_answer_is_unreachable_in_time() {
        let (ok, _) = fake(Some(status_of("b", "follower", 4))).await;
        let (silent, _) = fake(None).await;
        let (impostor, _) = fake(Some(status_of("x", "follower", 4))).await;
        let (garbage, _) = fake(Some("<html>hello</html>".into())).await;
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let members = vec![
            member("a", Some("127.0.0.1:1"), true, true),
            member("b", Some(&ok), true, true),
            member("c", Some(&silent), true, true),
            member("d", Some(&impostor), true, false),
            member("e", Some(&garbage), true, false),
            member("f", Some(&closed), true, false),
            member("g", None, false, true),
            member("h", None, true, false),
        ];
        let started = Instant::now();
        let doc = gather(view(members), own(), None, TIMEOUT).await;
        let took = started.elapsed();
        // All at once: the silent one costs one timeout, not one each.
        assert!(took < TIMEOUT + Duration::from_millis(1_500), "{took:?}");
        assert_eq!(by_id(&doc, "a").status, Some(own()), "itself, not asked");
        let b = by_id(&doc, "b").status.clone().expect("b answered");
        assert_eq!(
            (b.role.as_str(), b.term, b.electorate_size),
            ("follower", 4, 3)
        );
        assert_eq!(b.electorate_version, 2);
        let error = |id| by_id(&doc, id).error.clone().unwrap_or_default();
        assert!(
            error("c").starts_with("no answer within 400 ms"),
            "{}",
            error("c")
        );
        assert!(error("d").starts_with("another node"), "{}", error("d"));
        assert_eq!(error("e"), "its answer is not a status");
        assert!(error("f").starts_with("unreachable"), "{}", error("f"));
        assert!(error("g").starts_with("not connected"), "{}", error("g"));
        assert!(
            error("h").contains("advertised no HTTP API"),
            "{}",
            error("h")
        );
        for id in ["c", "d", "e", "f", "g", "h"] {
            assert!(by_id(&doc, id).status.is_none(), "{id}");
        }
    }

    #[tokio::test]
    async fn at_most_max_asked_peers_are_asked_voters_first() {
        let (addr, taken) = fake(Some(status_of("nobody", "follower", 1))).await;
        let mut members = vec![member("a", Some("127.0.0.1:1"), true, true)];
        for i in 0..MAX_ASKED + 5 {
            // The last three in id order are the voters.
            let voter = i >= MAX_ASKED + 2;
            members.push(member(&format!("p{i:03}"), Some(&addr), true, voter));
        }
        let doc = gather(view(members), own(), None, TIMEOUT).await;
        assert_eq!(taken.load(Ordering::SeqCst), MAX_ASKED);
        assert_eq!(doc.not_asked, 5);
        let not_asked: Vec<&str> = doc
            .nodes
            .iter()
            .filter(|n| {
                n.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("not asked"))
            })
            .map(|n| n.member.node_id.as_str())
            .collect();
        // The three voters were asked; of the others, the last five in id order were not.
        let expected: Vec<String> = (MAX_ASKED - 3..MAX_ASKED + 2)
            .map(|i| format!("p{i:03}"))
            .collect();
        assert_eq!(not_asked, expected);
    }

    #[tokio::test]
    async fn one_gathering_serves_every_caller_while_fresh() {
        let (addr, taken) = fake(Some(status_of("b", "follower", 4))).await;
        let asker = Arc::new(Asker::new(TIMEOUT));
        let now = || {
            Some((
                view(vec![
                    member("a", Some("127.0.0.1:1"), true, true),
                    member("b", Some(&addr), true, true),
                ]),
                own(),
                None,
            ))
        };
        let (first, second) = tokio::join!(asker.get(now), asker.get(now));
        assert_eq!(first.unwrap().nodes.len(), 2);
        assert!(second.unwrap().nodes[1].status.is_some());
        asker.get(now).await.unwrap();
        assert_eq!(
            taken.load(Ordering::SeqCst),
            1,
            "one request for three callers"
        );
        tokio::time::sleep(FRESH).await;
        asker.get(now).await.unwrap();
        assert_eq!(taken.load(Ordering::SeqCst), 2, "asked again once stale");
    }
}
