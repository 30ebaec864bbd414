//! A minimal HTTP/1.1 client: one request over one connection (`Connection: close`), plain or
//! TLS, no client library. Two rooms use it and neither imports the other: the command line
//! (`cli::http`, which adds the operator's token and TLS settings) and the node itself when it
//! asks its peers for their public status (`api::peers`). A TLS certificate is checked against a
//! pinned SHA-256 (the `#sha256=` an advertised address carries) or a CA, never the system's
//! roots and never not at all.

use std::path::Path;
use std::sync::Arc;

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

/// Sends one request to `endpoint` (over TLS with `tls` when the endpoint speaks it) and reads
/// the whole answer, keeping at most `limit` bytes of it.
pub async fn send(
    endpoint: &Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
    limit: u64,
) -> anyhow::Result<RawAnswer> {
    let body = body.map(Payload::json);
    send_payload(endpoint, tls, method, path, body, token, limit).await
}

/// [`send`] with a body of any media type.
pub async fn send_payload(
    endpoint: &Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    method: &str,
    path: &str,
    body: Option<Payload<'_>>,
    token: Option<&str>,
    limit: u64,
) -> anyhow::Result<RawAnswer> {
    let stream = connect(endpoint, tls).await?;
    let raw = exchange(
        stream,
        &endpoint.host_port,
        method,
        path,
        body,
        token,
        limit,
    )
    .await?;
    parse_answer(&raw).ok_or_else(|| {
        if !endpoint.tls && looks_like_tls(&raw) {
            anyhow::anyhow!(
                "{hp} speaks TLS: use https://{hp} (with --tls-fingerprint or --ca-cert)",
                hp = endpoint.host_port
            )
        } else {
            anyhow::anyhow!("malformed HTTP response from {}", endpoint.host_port)
        }
    })
}

/// A request's body and its media type.
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a> {
    /// The `Content-Type`.
    pub kind: &'a str,
    pub bytes: &'a [u8],
}

impl<'a> Payload<'a> {
    /// A JSON body.
    pub fn json(text: &'a str) -> Self {
        Payload {
            kind: "application/json",
            bytes: text.as_bytes(),
        }
    }
}

/// Sends one request to `endpoint` as [`send`] does, its body (`(media type, body)`) sent as
/// it comes (an upload relayed chunk by chunk), and answers once the head of its answer came:
/// the body is read as the server sends it (a streaming exec's NDJSON, a file's bytes, relayed
/// as they come). Bounds on the body are the reader's.
pub async fn open(
    endpoint: &Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    method: &str,
    path: &str,
    body: Option<(&str, axum::body::Body)>,
    token: Option<&str>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    let stream = connect(endpoint, tls).await?;
    request_on(stream, &endpoint.host_port, method, path, body, token).await
}

/// [`send`] over a connection made otherwise (an API tunnel of the cluster transport), to the
/// host `host` (`localhost` through a tunnel: it names the node that answers).
pub async fn send_on(
    stream: Box<dyn Connection>,
    host: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
    limit: u64,
) -> anyhow::Result<RawAnswer> {
    let body = body.map(Payload::json);
    let raw = exchange(stream, host, method, path, body, token, limit).await?;
    parse_answer(&raw).ok_or_else(|| anyhow::anyhow!("malformed HTTP response from {host}"))
}

/// [`open`] over a connection made otherwise, as [`send_on`].
pub async fn open_on(
    stream: Box<dyn Connection>,
    host: &str,
    method: &str,
    path: &str,
    body: Option<(&str, axum::body::Body)>,
    token: Option<&str>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    request_on(stream, host, method, path, body, token).await
}

/// A connection to a node's API: plain, TLS checked by a pin, or an API tunnel.
pub trait Connection: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Connection for S {}

/// Connects to `endpoint`: over TLS with `tls` when the endpoint speaks it.
pub async fn connect(
    endpoint: &Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Box<dyn Connection>> {
    let tcp = tokio::net::TcpStream::connect(&endpoint.host_port).await?;
    match (endpoint.tls, tls) {
        (true, Some(config)) => {
            let connector = tokio_rustls::TlsConnector::from(config);
            let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
                .map_err(|e| anyhow::anyhow!("{}: {e}", endpoint.host_port))?;
            let stream = connector
                .connect(name, tcp)
                .await
                .map_err(|e| anyhow::anyhow!("TLS with {}: {e}", endpoint.host_port))?;
            Ok(Box::new(stream))
        }
        (true, None) => anyhow::bail!("{} speaks TLS: no way to check it", endpoint.host_port),
        (false, _) => Ok(Box::new(tcp)),
    }
}

/// One request over `stream` with hyper's HTTP/1 client; its answer once its head came.
async fn request_on<S>(
    stream: S,
    host: &str,
    method: &str,
    path: &str,
    body: Option<(&str, axum::body::Body)>,
    token: Option<&str>,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, axum::body::Body>(io).await?;
    // Drives the connection until the answer's body was read (or dropped).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .header("connection", "close");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = match body {
        Some((kind, body)) => {
            request = request.header("content-type", kind);
            body
        }
        None => axum::body::Body::from(Vec::new()),
    };
    let request = request.body(body)?;
    Ok(sender.send_request(request).await?)
}

/// Whether an answer to plain HTTP is a TLS record (a server that speaks only TLS answers a
/// plain request with an alert, or a handshake record): content type 21 or 22, version 3.x.
fn looks_like_tls(raw: &[u8]) -> bool {
    matches!(raw, [21 | 22, 3, ..])
}

/// Splits a whole HTTP/1.1 answer into status, headers and body (a chunked body joined: a
/// streamed answer, such as a streaming exec's NDJSON, comes chunked).
fn parse_answer(raw: &[u8]) -> Option<RawAnswer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let code = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = match chunked {
        true => dechunk(&raw[end + 4..])?,
        false => raw[end + 4..].to_vec(),
    };
    Some(RawAnswer {
        code,
        headers,
        body,
    })
}

/// The data of a chunked body (`SIZE[;ext]\r\nDATA\r\n` … `0\r\n\r\n`); `None` when it is
/// malformed or cut before its last chunk.
fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&raw[..eol]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[eol + 2..];
        if size == 0 {
            // Trailers, if any, are not kept.
            return Some(body);
        }
        let end = size.checked_add(2)?;
        if raw.len() < end || &raw[size..end] != b"\r\n" {
            return None;
        }
        body.extend_from_slice(&raw[..size]);
        raw = &raw[end..];
    }
}

/// Writes the request and reads the whole answer (the server closes: `Connection: close`).
async fn exchange<S>(
    mut stream: S,
    host: &str,
    method: &str,
    path: &str,
    body: Option<Payload<'_>>,
    token: Option<&str>,
    limit: u64,
) -> anyhow::Result<Vec<u8>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: {}\r\nContent-Length: {}\r\n",
            body.kind,
            body.bytes.len()
        ));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    if let Some(body) = body {
        stream.write_all(body.bytes).await?;
    }
    stream.flush().await?;
    let mut raw = Vec::new();
    // Bounded: whatever the server sends, at most `limit` bytes are kept.
    match (&mut stream).take(limit).read_to_end(&mut raw).await {
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

/// 64 hex digits, lowercase; colons (as `openssl x509 -fingerprint -sha256` prints) dropped.
pub fn normalize_fingerprint(fp: &str) -> anyhow::Result<String> {
    let hex: String = fp.trim().chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        anyhow::bail!(
            "{fp:?} is not a SHA-256 certificate fingerprint (64 hex digits, colons allowed)"
        );
    }
    Ok(hex.to_ascii_lowercase())
}

/// TLS client settings that accept exactly the certificate whose SHA-256 is `pin` (64 hex
/// digits, lowercase, as [`normalize_fingerprint`] makes it).
pub fn pinned(pin: String) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = crate::pki::provider();
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCert { pin, provider }))
        .with_no_client_auth();
    Ok(http11(config))
}

/// TLS client settings that accept a certificate signed by the CA in the PEM file `ca`.
pub fn signed_by(ca: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .map_err(|e| anyhow::anyhow!("cannot read the CA certificate {}: {e}", ca.display()))?
    {
        let cert = cert.map_err(|e| anyhow::anyhow!("the CA certificate {}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("the CA certificate {}: {e}", ca.display()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(crate::pki::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(http11(config))
}

fn http11(mut config: rustls::ClientConfig) -> Arc<rustls::ClientConfig> {
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Accepts exactly the certificate whose SHA-256 is pinned (its names and dates do not matter:
/// the pin is the identity), and checks the handshake's signatures with it.
#[derive(Debug)]
struct PinnedCert {
    pin: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
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

    #[test]
    fn answers_keep_their_headers_and_body_bytes() {
        let raw = b"HTTP/1.1 200 OK\r\nChorus-Log-Size: 3\r\ncontent-length: 3\r\n\r\n\xff\r\n";
        let a = parse_answer(raw).unwrap();
        assert_eq!((a.code, a.body.as_slice()), (200, &b"\xff\r\n"[..]));
        assert_eq!(a.header("chorus-log-size"), Some("3"));
        assert!(parse_answer(b"HTTP/1.1 200 OK").is_none());
    }

    /// A streamed answer (a streaming exec forwarded to the node holding the sandbox) comes
    /// chunked: its body is the chunks' data, not their framing; a cut one is malformed.
    #[test]
    fn a_chunked_body_is_joined() {
        let raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n\
                    5\r\n{\"a\":\r\n9;ext=1\r\n\"x\\r\\n\"}\n\r\n0\r\n\r\n";
        let a = parse_answer(raw).unwrap();
        assert_eq!(a.body, b"{\"a\":\"x\\r\\n\"}\n");
        for cut in [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabcde\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            // A size that would overflow.
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\nab",
        ] {
            assert!(
                parse_answer(cut).is_none(),
                "{}",
                String::from_utf8_lossy(cut)
            );
        }
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
