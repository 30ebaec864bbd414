//! The one HTTP client every command uses to talk to a node's API (and devcluster to its
//! nodes): the operator's token, delegated tokens for peers, and how certificates are checked,
//! over [`crate::http1`]'s one request per connection.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;

pub use crate::http1::RawAnswer;
use crate::http1::{self, normalize_fingerprint, Endpoint};

/// The API token every request of this process carries to the address the operator named (see
/// [`set_token`]); a peer's advertised address gets a delegated one ([`request_peer`]).
static TOKEN: Mutex<Option<String>> = Mutex::new(None);

/// Whether this process has a token to send ([`set_token`]).
pub fn has_token() -> bool {
    TOKEN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some()
}

/// Where the CLI looks for a token when none is given: the management token of a node run with
/// the default data directory in the current directory (the local demo).
pub const DEFAULT_TOKEN_FILE: &str = "chorus-data/management.token";

/// Chooses the token this process sends: `token` (`--token` or `CHORUS_TOKEN`), else the file
/// `token_file` (`--token-file` or `CHORUS_TOKEN_FILE`), else [`DEFAULT_TOKEN_FILE`] when it
/// exists, else none (the public routes still answer). A later call replaces the token.
pub fn set_token(token: Option<String>, token_file: Option<&Path>) -> anyhow::Result<()> {
    let token = token.filter(|t| !t.trim().is_empty());
    let chosen = match (token, token_file) {
        (Some(t), _) => Some(t),
        (None, Some(file)) => Some(
            std::fs::read_to_string(file)
                .with_context(|| format!("cannot read the token file {}", file.display()))?,
        ),
        (None, None) => std::fs::read_to_string(DEFAULT_TOKEN_FILE).ok(),
    };
    let chosen = chosen
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    if let Some(t) = &chosen {
        // It goes into a header line: a newline would end the header.
        if t.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            anyhow::bail!("the token holds spaces or control characters");
        }
    }
    *TOKEN.lock().unwrap_or_else(PoisonError::into_inner) = chosen;
    Ok(())
}

/// `text` with every token this process holds — the operator's and those delegated to it —
/// replaced by `[token]`: for what goes back to someone who must never see them (`chorus mcp`'s
/// tools' output, whatever a node or a sandbox echoed).
pub fn redact(text: &str) -> String {
    let mut secrets: Vec<String> = DELEGATED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .map(|(t, _)| t.clone())
        .collect();
    secrets.extend(TOKEN.lock().unwrap_or_else(PoisonError::into_inner).clone());
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 8) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "[token]");
        }
    }
    out
}

/// A minimal HTTP/1.1 GET for `chorus status` and `chorus devcluster` (no client library
/// needed for one loopback request). Returns (status code, body).
pub async fn get_text(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    request(addr, "GET", path, None).await
}

/// `GET path` from a chorus node's API: the body of a 200 answer, or an error naming the node
/// and what it answered.
pub async fn get_document(addr: &str, path: &str) -> anyhow::Result<String> {
    let (code, body) = get_text(addr, path)
        .await
        .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    if code != 200 {
        anyhow::bail!("{addr} answered {code}: {}", body.trim());
    }
    Ok(body)
}

/// A minimal HTTP/1.1 request with an optional JSON body to the API at `addr` (see
/// [`Endpoint::parse`]). Returns (status code, body).
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let answer = request_bytes(addr, method, path, body).await?;
    Ok((
        answer.code,
        String::from_utf8_lossy(&answer.body).into_owned(),
    ))
}

/// [`request`], keeping the headers and the body's bytes as they are (a task's output).
pub async fn request_bytes(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<RawAnswer> {
    let token = TOKEN.lock().unwrap_or_else(PoisonError::into_inner).clone();
    request_bytes_with(addr, method, path, body, token.as_deref()).await
}

/// Node `node`, at `http`: an address a peer advertised, which the operator did not name.
/// `via` is the address the operator named (or `http` itself, when the operator named it).
/// A `relayed` peer advertised no API the node at `via` reaches (bound to its own loopback):
/// it is asked through that node (`/nodes/{node}/api/...`, with the operator's token, which
/// goes to the node the operator named and no further).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub via: String,
    pub node: String,
    pub http: String,
    pub relayed: bool,
}

impl Peer {
    /// Node `node`, asked through the node at `via`.
    pub fn relayed(via: &str, node: &str) -> Peer {
        Peer {
            via: via.to_owned(),
            node: node.to_owned(),
            http: via.to_owned(),
            relayed: true,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.relayed {
            let node = crate::names::short_id(&self.node);
            return write!(f, "node {node} through {}", self.via);
        }
        f.write_str(&self.http)
    }
}

/// [`request_bytes`] to a peer, never with the operator's token (see `api::auth`: a machine on
/// the cluster's network is not trusted with it): with a token delegated to that node alone, by
/// the node the operator named — or none, for the public routes (`token: false`).
pub async fn request_peer(
    peer: &Peer,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: bool,
) -> anyhow::Result<RawAnswer> {
    if peer.relayed {
        let relayed = format!("/nodes/{}/api{path}", peer.node);
        return request_bytes(&peer.via, method, &relayed, body)
            .await
            .with_context(|| format!("cannot reach {peer}"));
    }
    if peer.http == peer.via {
        return request_bytes(&peer.http, method, path, body).await;
    }
    let delegated = match token {
        true => delegated_token(&peer.via, &peer.node).await?,
        false => None,
    };
    request_bytes_with(&peer.http, method, path, body, delegated.as_deref())
        .await
        .with_context(|| {
            format!(
                "cannot reach node {}'s API at {} (the address {} knows it by)",
                crate::names::short_id(&peer.node),
                peer.http,
                peer.via
            )
        })
}

/// Delegated tokens already made, by (node asked, audience): (token, expiry).
static DELEGATED: Mutex<BTreeMap<(String, String), (String, u64)>> = Mutex::new(BTreeMap::new());

/// A token for node `node` alone, delegated by the node at `via` from the operator's token
/// (none when the operator gave none).
async fn delegated_token(via: &str, node: &str) -> anyhow::Result<Option<String>> {
    let operator = TOKEN.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if operator.is_none() {
        return Ok(None);
    }
    let key = (via.to_owned(), node.to_owned());
    let now = crate::api::auth::unix_now();
    if let Some((token, expiry)) = DELEGATED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        // Renewed well before it runs out: a long `task logs -f` keeps following.
        if *expiry > now + 30 {
            return Ok(Some(token.clone()));
        }
    }
    let body = serde_json::json!({ "audience": node }).to_string();
    let (code, answer) = request(via, "POST", "/acl/delegate", Some(&body)).await?;
    let value: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
    let (Some(token), Some(expiry), 200) = (
        value["token"].as_str(),
        value["expires_unix"].as_u64(),
        code,
    ) else {
        anyhow::bail!(
            "{via} did not delegate a token for node {node} ({code}: {}); the operator's own \
             token is never sent to an address a peer advertised",
            answer.trim()
        );
    };
    DELEGATED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, (token.to_owned(), expiry));
    Ok(Some(token.to_owned()))
}

/// A request whose body, if any, is sent as it comes (`(media type, body)`), answered once the
/// answer's head came: its body is read as it comes too. A large file in or out.
pub async fn request_streaming(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<(&str, axum::body::Body)>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    let token = TOKEN.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let (endpoint, tls) = reached(addr)?;
    http1::open(&endpoint, tls, method, path, body, token.as_deref()).await
}

/// [`request_bytes`] with `token` (or none) as the bearer.
async fn request_bytes_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<RawAnswer> {
    let body = body.map(http1::Payload::json);
    send_with(addr, method, path, body, token, MAX_ANSWER_BYTES).await
}

/// One request to the API at `addr`, checked by this process's TLS settings where it speaks
/// TLS, its answer kept up to `limit` bytes.
async fn send_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<http1::Payload<'_>>,
    token: Option<&str>,
    limit: u64,
) -> anyhow::Result<RawAnswer> {
    let (endpoint, tls) = reached(addr)?;
    http1::send_payload(&endpoint, tls, method, path, body, token, limit).await
}

/// The API at `addr`, and how this process checks its TLS certificate where it speaks TLS.
fn reached(addr: &str) -> anyhow::Result<(Endpoint, Option<Arc<rustls::ClientConfig>>)> {
    let endpoint = Endpoint::parse(addr)?;
    let tls = match endpoint.tls {
        true => Some(client_config(&endpoint)?),
        false => None,
    };
    Ok((endpoint, tls))
}

/// The most of an answer the CLI keeps (status documents and task output tails are far
/// smaller).
const MAX_ANSWER_BYTES: u64 = 4 << 20;

/// How this process checks a node's TLS certificate: `--tls-fingerprint` /
/// `CHORUS_TLS_FINGERPRINT` (SHA-256 of the certificate), `--ca-cert` / `CHORUS_CA_CERT` (a CA
/// that signed it), or the fingerprint an address names.
#[derive(Clone, Debug, Default)]
struct ClientTls {
    fingerprint: Option<String>,
    ca_cert: Option<std::path::PathBuf>,
}

static CLIENT_TLS: Mutex<Option<ClientTls>> = Mutex::new(None);

/// Sets how TLS certificates are checked (see [`ClientTls`]); checks the fingerprint's form.
pub fn set_tls(fingerprint: Option<&str>, ca_cert: Option<&Path>) -> anyhow::Result<()> {
    let fingerprint = fingerprint
        .filter(|f| !f.trim().is_empty())
        .map(normalize_fingerprint)
        .transpose()?;
    *CLIENT_TLS.lock().unwrap_or_else(PoisonError::into_inner) = Some(ClientTls {
        fingerprint,
        ca_cert: ca_cert.map(Path::to_path_buf),
    });
    Ok(())
}

/// The TLS client settings for `endpoint`: a pinned fingerprint (the address's own, else
/// `--tls-fingerprint`), else the CA of `--ca-cert`; never the system's roots and never no
/// check at all — a node's certificate is its own or its operator's CA's.
fn client_config(endpoint: &Endpoint) -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
    let settings = CLIENT_TLS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default();
    if let Some(pin) = endpoint.pin.clone().or(settings.fingerprint) {
        http1::pinned(pin)
    } else if let Some(ca) = &settings.ca_cert {
        http1::signed_by(ca)
    } else {
        anyhow::bail!(
            "{} speaks TLS: pass --tls-fingerprint FP (the node prints it at its first start \
             and in its log; or `openssl x509 -noout -fingerprint -sha256 -in \
             DATA_DIR/http-tls/cert.pem`) or --ca-cert FILE",
            endpoint.host_port
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 54, item 8: a peer's API that refuses the connection is named in the error — its
    /// node, the address and which node gave it — not a bare "Connection refused".
    #[tokio::test]
    async fn an_unreachable_peer_api_is_named_in_the_error() {
        // A port nothing listens on: bound, then let go.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = free.local_addr().unwrap().to_string();
        drop(free);
        let peer = Peer {
            via: "127.0.0.1:7070".into(),
            node: "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B".into(),
            http: at.clone(),
            relayed: false,
        };
        let err = request_peer(&peer, "GET", "/status", None, false)
            .await
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains(&at) && text.contains("127.0.0.1:7070"),
            "{text}"
        );
        assert!(text.contains(crate::names::short_id(&peer.node)), "{text}");
    }

    /// A one-request HTTP server on loopback: answers `code` with `body`, and hands back the
    /// request it read (head and body).
    async fn fake(code: u16, body: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let served = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // Head, then as much body as it declares.
            loop {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if got.len() >= end + 4 + len || n == 0 {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let answer = format!(
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        (addr, served)
    }

    /// Issue 35's trust gap: the CLI followed peers' advertised addresses with the operator's
    /// token. A peer now gets a token delegated to it by the node the operator named, or none
    /// for a public route; when that node will not delegate, the peer is not asked at all.
    #[tokio::test]
    async fn a_peer_gets_a_delegated_token_never_the_operators() {
        set_token(
            Some("chorus_v1_manage_0000000000000000_operator".into()),
            None,
        )
        .unwrap();
        let node = "12D3KooWKdbNffbteB6S1nzaAJLDLc6VJh4BJhNfze12Ld1U8GZa";
        let delegated = r#"{"token":"chorus_v1d_read_peer","expires_unix":99999999999}"#;
        let (via, asked) = fake(200, delegated).await;
        let (http, heard) = fake(200, "{}").await;
        let peer = Peer {
            via: via.clone(),
            node: node.into(),
            http,
            relayed: false,
        };
        let a = request_peer(&peer, "GET", "/tasks/t-1", None, true)
            .await
            .unwrap();
        assert_eq!(a.code, 200);
        let asked = asked.await.unwrap();
        assert!(asked.starts_with("POST /acl/delegate "), "{asked}");
        assert!(
            asked.contains("Bearer chorus_v1_manage_0000000000000000_operator"),
            "{asked}"
        );
        assert!(
            asked.contains(node),
            "the delegation names the peer: {asked}"
        );
        let heard = heard.await.unwrap();
        assert!(
            heard.contains("Authorization: Bearer chorus_v1d_read_peer"),
            "{heard}"
        );
        assert!(!heard.contains("operator"), "{heard}");

        // A public route at a peer: no token at all.
        let (http, heard) = fake(200, "{}").await;
        let public = Peer {
            http,
            ..peer.clone()
        };
        request_peer(&public, "GET", "/status", None, false)
            .await
            .unwrap();
        assert!(!heard.await.unwrap().contains("Authorization"));

        // The named node refuses to delegate: an error, and the peer never hears a thing.
        let (via, _) = fake(403, r#"{"error":"no"}"#).await;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = Peer {
            via,
            node: "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B".into(),
            http: listener.local_addr().unwrap().to_string(),
            relayed: false,
        };
        let err = request_peer(&refused, "GET", "/tasks/t-2", None, true)
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("never sent"), "{err:#}");
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "the peer was contacted");
        *TOKEN.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}
