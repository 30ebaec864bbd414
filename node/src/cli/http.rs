//! The one HTTP client every command uses to talk to a node's API (and devcluster to its
//! nodes): a minimal HTTP/1.1 request over one loopback or LAN connection, no client library.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use anyhow::Context;

/// The API token every request of this process carries to the address the operator named (see
/// [`set_token`]); a peer's advertised address gets a delegated one ([`request_peer`]).
static TOKEN: Mutex<Option<String>> = Mutex::new(None);

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

/// An answer as it came: its status, its headers (names in lowercase) and its body's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawAnswer {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub via: String,
    pub node: String,
    pub http: String,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    if peer.http == peer.via {
        return request_bytes(&peer.http, method, path, body).await;
    }
    let delegated = match token {
        true => delegated_token(&peer.via, &peer.node).await?,
        false => None,
    };
    request_bytes_with(&peer.http, method, path, body, delegated.as_deref()).await
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

/// [`request_bytes`] with `token` (or none) as the bearer.
async fn request_bytes_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<RawAnswer> {
    let endpoint = Endpoint::parse(addr)?;
    let tcp = tokio::net::TcpStream::connect(&endpoint.host_port).await?;
    let raw = if endpoint.tls {
        let connector = tokio_rustls::TlsConnector::from(client_config(&endpoint)?);
        let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
            .map_err(|e| anyhow::anyhow!("{addr}: {e}"))?;
        let stream = connector
            .connect(name, tcp)
            .await
            .map_err(|e| anyhow::anyhow!("TLS with {}: {e}", endpoint.host_port))?;
        exchange(stream, &endpoint, method, path, body, token).await?
    } else {
        exchange(tcp, &endpoint, method, path, body, token).await?
    };
    parse_answer(&raw).ok_or_else(|| anyhow::anyhow!("malformed HTTP response from {addr}"))
}

/// Splits a whole HTTP/1.1 answer into status, headers and body.
fn parse_answer(raw: &[u8]) -> Option<RawAnswer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let code = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(RawAnswer {
        code,
        headers,
        body: raw[end + 4..].to_vec(),
    })
}

/// Writes the request and reads the whole answer (the server closes: `Connection: close`).
async fn exchange<S>(
    mut stream: S,
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> anyhow::Result<Vec<u8>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        endpoint.host_port
    );
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or_default());
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut raw = Vec::new();
    // Bounded: status documents are small.
    match (&mut stream).take(4 << 20).read_to_end(&mut raw).await {
        Ok(_) => {}
        // A TLS peer that closes without close_notify: the answer read so far is whole when
        // its head arrived (the body is checked by whoever parses it).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.into()),
    }
    Ok(raw)
}

/// Where a node's API is: `HOST:PORT` or `http://HOST:PORT` (plain), `https://HOST:PORT`
/// (TLS), with an optional `#sha256=FINGERPRINT` naming the certificate to pin (how nodes
/// advertise a TLS API to each other; `/cluster` shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// TLS or plain.
    pub tls: bool,
    /// `HOST:PORT` as given (the `Host` header).
    pub host_port: String,
    /// The host alone (the TLS server name), brackets of an IPv6 address removed.
    pub host: String,
    /// The certificate fingerprint the address itself names.
    pub pin: Option<String>,
}

impl Endpoint {
    /// Parses an `--addr`; the error says what is accepted.
    pub fn parse(addr: &str) -> anyhow::Result<Endpoint> {
        let bad = |why: &str| {
            anyhow::anyhow!(
                "{addr:?} is not a node address ({why}): give HOST:PORT, http://HOST:PORT or \
                 https://HOST:PORT"
            )
        };
        let (rest, pin) = match addr.split_once('#') {
            Some((rest, fragment)) => {
                let fp = fragment
                    .strip_prefix("sha256=")
                    .ok_or_else(|| bad("the part after # is not sha256=FINGERPRINT"))?;
                (rest, Some(normalize_fingerprint(fp)?))
            }
            None => (addr, None),
        };
        let (tls, host_port) = if let Some(r) = rest.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = rest.strip_prefix("http://") {
            (false, r)
        } else if rest.contains("://") {
            return Err(bad("only http and https"));
        } else {
            (false, rest)
        };
        let host_port = host_port.strip_suffix('/').unwrap_or(host_port);
        if host_port.contains('/') {
            return Err(bad("no path"));
        }
        let (host, port) = host_port.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if port.parse::<u16>().is_err() {
            return Err(bad("the port is not a number up to 65535"));
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(bad("no host"));
        }
        Ok(Endpoint {
            tls,
            host_port: host_port.to_owned(),
            host: host.to_owned(),
            pin,
        })
    }
}

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

/// 64 hex digits, lowercase; colons (as `openssl x509 -fingerprint -sha256` prints) dropped.
fn normalize_fingerprint(fp: &str) -> anyhow::Result<String> {
    let hex: String = fp.trim().chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        anyhow::bail!(
            "{fp:?} is not a SHA-256 certificate fingerprint (64 hex digits, colons allowed)"
        );
    }
    Ok(hex.to_ascii_lowercase())
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
    let provider = crate::pki::provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let config = if let Some(pin) = endpoint.pin.clone().or(settings.fingerprint) {
        builder
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(PinnedCert { pin, provider }))
            .with_no_client_auth()
    } else if let Some(ca) = &settings.ca_cert {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .map_err(|e| anyhow::anyhow!("cannot read the CA certificate {}: {e}", ca.display()))?
        {
            let cert =
                cert.map_err(|e| anyhow::anyhow!("the CA certificate {}: {e}", ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("the CA certificate {}: {e}", ca.display()))?;
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        anyhow::bail!(
            "{} speaks TLS: pass --tls-fingerprint FP (the node prints it at its first start \
             and in its log; or `openssl x509 -noout -fingerprint -sha256 -in \
             DATA_DIR/http-tls/cert.pem`) or --ca-cert FILE",
            endpoint.host_port
        );
    };
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(std::sync::Arc::new(config))
}

/// Accepts exactly the certificate whose SHA-256 is pinned (its names and dates do not matter:
/// the pin is the identity), and checks the handshake's signatures with it.
#[derive(Debug)]
struct PinnedCert {
    pin: String,
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let got = crate::pki::fingerprint(end_entity);
        if got == self.pin {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the node's certificate has fingerprint {got}, not the pinned {}",
                self.pin
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let err = request_peer(&refused, "GET", "/tasks/t-2", None, true)
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("never sent"), "{err:#}");
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "the peer was contacted");
        *TOKEN.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    #[test]
    fn answers_keep_their_headers_and_body_bytes() {
        let raw = b"HTTP/1.1 200 OK\r\nChorus-Log-Size: 3\r\ncontent-length: 3\r\n\r\n\xff\r\n";
        let a = parse_answer(raw).unwrap();
        assert_eq!((a.code, a.body.as_slice()), (200, &b"\xff\r\n"[..]));
        assert_eq!(a.header("chorus-log-size"), Some("3"));
        assert!(parse_answer(b"HTTP/1.1 200 OK").is_none());
    }

    #[test]
    fn addresses_parse_with_and_without_scheme_and_pin() {
        let plain = Endpoint::parse("127.0.0.1:7070").unwrap();
        assert!(!plain.tls && plain.host == "127.0.0.1" && plain.pin.is_none());
        assert_eq!(Endpoint::parse("http://127.0.0.1:7070/").unwrap(), plain);
        let fp = "AB:".repeat(31) + "AB";
        let tls = Endpoint::parse(&format!("https://[::1]:7443#sha256={fp}")).unwrap();
        assert!(tls.tls);
        assert_eq!(tls.host, "::1");
        assert_eq!(tls.host_port, "[::1]:7443");
        assert_eq!(tls.pin.unwrap(), "ab".repeat(32));
        for bad in [
            "ftp://h:1",
            "h",
            "h:notaport",
            "http://h:1/tasks",
            ":80",
            "https://h:1#md5=00",
            "https://h:1#sha256=abc",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
