//! The one HTTP client every command uses to talk to a node's API (and devcluster to its
//! nodes): a minimal HTTP/1.1 request over one loopback or LAN connection, no client library.

use anyhow::Context;

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

/// A minimal HTTP/1.1 request with an optional JSON body. Returns (status code, body).
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or_default());
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    // Bounded: status documents are small.
    stream.take(4 << 20).read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP response from {addr}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP status line from {addr}"))?;
    Ok((code, body.to_owned()))
}
