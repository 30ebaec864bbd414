//! `chorus status`: fetches a node's `/status` and prints it for people.

use anyhow::{bail, Context};
use serde_json::Value;

/// Prints the status of the node whose HTTP API is at `addr`.
pub async fn show(addr: &str, json: bool) -> anyhow::Result<()> {
    let (code, body) = crate::http::get_text(addr, "/status")
        .await
        .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    if code != 200 {
        bail!("{addr} answered {code}: {}", body.trim());
    }
    if json {
        println!("{}", body.trim());
        return Ok(());
    }
    let v: Value = serde_json::from_str(&body).context("the status is not JSON")?;
    print!("{}", render(&v));
    Ok(())
}

/// A status document as aligned lines.
pub fn render(v: &Value) -> String {
    let s = |k: &str| match &v[k] {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let list = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let me = s("node_id");
    let admin = s("admin");
    let admin_note = if admin == me { " (this node)" } else { "" };
    let lease = match (v["lease_until_ms"].as_u64(), v["now_ms"].as_u64()) {
        (Some(until), Some(now)) => format!("{} ms left", until.saturating_sub(now)),
        _ => "-".to_owned(),
    };
    let peers = list("peers");
    let electorate = list("electorate");
    let mut out = String::new();
    out.push_str(&format!("node        {me}\n"));
    out.push_str(&format!("role        {}\n", s("role")));
    out.push_str(&format!("term        {}\n", s("term")));
    out.push_str(&format!("admin       {admin}{admin_note}\n"));
    out.push_str(&format!("voted for   {}\n", s("voted_for")));
    out.push_str(&format!("lease       {lease}\n"));
    out.push_str(&format!("beat        {}\n", s("beat")));
    out.push_str(&format!("uptime      {} s\n", s("uptime_s")));
    out.push_str(&format!("peers       {}\n", peers.len()));
    for p in &peers {
        out.push_str(&format!("  {p}\n"));
    }
    out.push_str(&format!("electorate  {}\n", electorate.len()));
    for p in &electorate {
        let mark = if *p == admin { "  (admin)" } else { "" };
        out.push_str(&format!("  {p}{mark}\n"));
    }
    out.push_str("listening\n");
    for a in list("listen_addrs") {
        out.push_str(&format!("  {a}\n"));
    }
    out
}
