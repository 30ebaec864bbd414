//! The one HTTP client every command uses to talk to a node's API (and devcluster to its
//! nodes): a minimal HTTP/1.1 request over one loopback or LAN connection, no client library.

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use anyhow::Context;

/// The API token every request of this process carries (see [`set_token`]).
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
    let token = TOKEN.lock().unwrap_or_else(PoisonError::into_inner).clone();
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
