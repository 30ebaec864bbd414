//! `chorus status`: fetches a node's `/status` and prints it for people; with `--cluster`, asks
//! that node whom it knows (`/cluster`) and every one of them for its own `/status`, and prints
//! one table.

use anyhow::Context;
use serde_json::Value;

use super::http::{get_document, has_token, request_peer, Peer};

/// Prints the status of the node whose HTTP API is at `addr`.
pub async fn show(addr: &str, json: bool) -> anyhow::Result<()> {
    let body = get_document(addr, "/status").await?;
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
    let silent = v["admin_silent"].as_bool() == Some(true);
    let admin_note = if admin == me {
        " (this node)".to_owned()
    } else if silent {
        format!(
            " (not heard for {:.1} s: its heartbeats stopped; an election follows)",
            v["admin_heard_ms"].as_u64().unwrap_or(0) as f64 / 1_000.0
        )
    } else {
        String::new()
    };
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
    if let Some(why) = v["waiting"].as_str() {
        out.push_str(&format!("waiting     {why}\n"));
    }
    out.push_str(&format!("voted for   {}\n", s("voted_for")));
    out.push_str(&format!("lease       {lease}\n"));
    out.push_str(&format!("beat        {}\n", s("beat")));
    out.push_str(&format!("uptime      {} s\n", s("uptime_s")));
    if let Some(b) = v["build"].as_object() {
        let field = |k: &str| {
            b.get(k).map_or("-".to_owned(), |x| match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        out.push_str(&format!(
            "build       {} (git {}, wire protocol {})\n",
            field("version"),
            field("git_rev"),
            field("wire_version")
        ));
    }
    out.push_str(&format!("peers       {}\n", peers.len()));
    for p in &peers {
        out.push_str(&format!("  {p}\n"));
    }
    let reach = match (
        v["voters_connected"]["connected"].as_u64(),
        v["voters_connected"]["others"].as_u64(),
    ) {
        (Some(c), Some(o)) if 2 * c < o => {
            format!(" (connected to {c} of {o} other voters: most are out of reach)")
        }
        (Some(c), Some(o)) => format!(" (connected to {c} of {o} other voters)"),
        _ => String::new(),
    };
    out.push_str(&format!(
        "electorate  {} members, version {}{reach}\n",
        electorate.len(),
        s("electorate_version")
    ));
    for p in &electorate {
        let mark = if *p == admin { "  (admin)" } else { "" };
        out.push_str(&format!("  {p}{mark}\n"));
    }
    out.push_str("listening\n");
    for a in list("listen_addrs") {
        out.push_str(&format!("  {a}\n"));
    }
    if let Some(fp) = v["http_tls_fingerprint"].as_str() {
        out.push_str(&format!("api tls     sha256 {fp}\n"));
    }
    out
}

/// How long one node gets to answer `chorus status --cluster`.
const MEMBER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Prints one table of every node the node at `addr` knows: each row from that node's own
/// `/status` where it answers, and this node's last contact with it.
pub async fn show_cluster(addr: &str, json: bool) -> anyhow::Result<()> {
    let body = get_document(addr, "/cluster").await?;
    let view: Value = serde_json::from_str(&body).context("the cluster view is not JSON")?;
    let members = view["members"].as_array().cloned().unwrap_or_default();
    let mut statuses = Vec::new();
    for m in &members {
        let id = m["node_id"].as_str().unwrap_or_default();
        // The node asked answers on the address the user gave (it may differ from its bind).
        let http = if id == view["node_id"].as_str().unwrap_or_default() {
            Some(addr.to_owned())
        } else {
            m["http"].as_str().map(str::to_owned)
        };
        let peer = match http {
            // A public route: a peer's advertised address gets no token at all.
            Some(h) => Peer {
                via: String::new(),
                node: id.to_owned(),
                http: h,
                relayed: false,
            },
            // Its API on its own loopback: asked through the node asked (with the operator's
            // token: a relayed call needs one).
            None if m["connected"].as_bool() == Some(true) && has_token() => {
                Peer::relayed(addr, id)
            }
            None => {
                statuses.push(Err(no_address(m)));
                continue;
            }
        };
        statuses.push(member_status(&peer, id).await);
    }
    if json {
        let rows: Vec<Value> = members
            .iter()
            .zip(&statuses)
            .map(|(m, st)| {
                serde_json::json!({
                    "member": m,
                    "status": st.as_ref().ok(),
                    "error": st.as_ref().err(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "asked": view["node_id"], "nodes": rows })
        );
        return Ok(());
    }
    print!("{}", render_cluster(&view, &members, &statuses));
    Ok(())
}

/// Why a member without an HTTP address has no status: one the asked node is not connected to
/// is down or out of reach (its address came with its connection and went with it).
fn no_address(m: &Value) -> String {
    if m["connected"].as_bool() == Some(true) {
        return "connected, but it advertised no HTTP API the node asked can reach (an API bound \
                to its own loopback answers its own host only), and no token was given to ask \
                it through the node asked"
            .to_owned();
    }
    match m["last_contact_ms"].as_u64() {
        Some(ms) => format!(
            "not reachable (down, or cut off from the node asked): last heard from {:.1} s ago",
            ms as f64 / 1_000.0
        ),
        None => "not reachable (down, or cut off from the node asked): never heard from since \
                 that node started"
            .to_owned(),
    }
}

/// A member's own `/status`, checked to be that member's (a loopback address advertised by a
/// node on another machine would reach a different node here).
async fn member_status(peer: &Peer, id: &str) -> Result<Value, String> {
    let http = peer;
    let got = tokio::time::timeout(
        MEMBER_TIMEOUT,
        request_peer(peer, "GET", "/status", None, false),
    )
    .await;
    let (code, body) = match got {
        Ok(Ok(r)) => (r.code, String::from_utf8_lossy(&r.body).into_owned()),
        Ok(Err(e)) => return Err(format!("unreachable at {http}: {e}")),
        Err(_) => return Err(format!("no answer from {http}")),
    };
    if code != 200 {
        return Err(format!("{http} answered {code}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|_| format!("{http}: not JSON"))?;
    if v["node_id"].as_str() != Some(id) {
        return Err(format!(
            "{http} is another node here (its HTTP API is on its own machine's loopback)"
        ));
    }
    Ok(v)
}

/// The table of `chorus status --cluster`.
pub fn render_cluster(
    view: &Value,
    members: &[Value],
    statuses: &[Result<Value, String>],
) -> String {
    let short = |s: &str| crate::names::short_id(s).to_owned();
    let asked = view["node_id"].as_str().unwrap_or_default();
    let mut out = format!(
        "{:<12} {:<6} {:<14} {:>5} {:<12} {:>10} {:>13}  {}\n",
        "node", "voter", "role", "term", "admin", "lease", "last contact", "http"
    );
    for (m, st) in members.iter().zip(statuses) {
        let id = m["node_id"].as_str().unwrap_or_default();
        let mark = if id == asked { "*" } else { "" };
        let contact = if id == asked {
            "(asked)".to_owned()
        } else {
            // Connected: heard now (followers exchange no protocol message when healthy).
            match m["last_contact_ms"].as_u64() {
                _ if m["connected"].as_bool() == Some(true) => "connected".to_owned(),
                Some(ms) => format!("{:.1} s ago", ms as f64 / 1_000.0),
                None => "never".to_owned(),
            }
        };
        let voter = if m["voter"].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        };
        let http = m["http"].as_str().unwrap_or("-");
        let (role, term, admin, lease) = match st {
            Ok(s) => (
                s["role"].as_str().unwrap_or("-").to_owned(),
                s["term"].to_string(),
                s["admin"].as_str().map_or("-".to_owned(), short),
                s["lease_left_ms"]
                    .as_u64()
                    .map_or("-".to_owned(), |l| format!("{l} ms")),
            ),
            Err(_) if m["connected"].as_bool() != Some(true) => {
                ("unreachable".into(), "?".into(), "?".into(), "?".into())
            }
            Err(_) => ("?".into(), "?".into(), "?".into(), "?".into()),
        };
        out.push_str(&format!(
            "{:<12} {voter:<6} {role:<14} {term:>5} {admin:<12} {lease:>10} {contact:>13}  {http}\n",
            format!("{}{mark}", short(id)),
        ));
    }
    for (m, st) in members.iter().zip(statuses) {
        if let Err(e) = st {
            out.push_str(&format!(
                "  {}: {e}\n",
                short(m["node_id"].as_str().unwrap_or_default())
            ));
        }
    }
    out.push_str(&format!(
        "(* the node asked; last contact is as it sees it; term {}, admin {})\n",
        view["term"],
        view["admin"].as_str().map_or("none".to_owned(), short)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: `chorus status` of a node without an admin says what it waits for, and the
    /// electorate's version (what `chorus recover` asks to compare).
    #[test]
    fn a_waiting_node_says_what_for() {
        let v = serde_json::json!({
            "node_id": "n0", "role": "follower", "term": 0, "admin": null,
            "electorate": ["n0", "n1"], "electorate_version": 4,
            "waiting": "waiting for peers: 1 of 3 voter(s) known (bootstrap_expect 3)",
        });
        let text = render(&v);
        assert!(
            text.contains("admin       -\nwaiting     waiting for peers: 1 of 3"),
            "{text}"
        );
        assert!(text.contains("electorate  2 members, version 4"), "{text}");
        let v = serde_json::json!({ "node_id": "n0", "admin": "n0" });
        assert!(!render(&v).contains("waiting"));
    }

    /// Issue 54, item 6: a follower whose admin's heartbeats stopped says so beside its name
    /// (the core names it until its election timeout); one heard lately names it plainly.
    #[test]
    fn an_admin_not_heard_is_said_to_be_silent() {
        let v = serde_json::json!({
            "node_id": "n1", "role": "follower", "term": 3, "admin": "n0",
            "admin_heard_ms": 31_000, "admin_silent": true,
        });
        let text = render(&v);
        assert!(
            text.contains("admin       n0 (not heard for 31.0 s: its heartbeats stopped"),
            "{text}"
        );
        let v = serde_json::json!({
            "node_id": "n1", "role": "follower", "term": 3, "admin": "n0",
            "admin_heard_ms": 400, "admin_silent": false,
        });
        assert!(render(&v).contains("admin       n0\n"), "{}", render(&v));
    }

    /// Issue 35: a known member that is not connected is said to be unreachable, not to lack
    /// an HTTP address.
    #[test]
    fn a_dead_member_is_said_unreachable() {
        let dead = serde_json::json!({
            "node_id": "12D3KooWdead", "voter": true, "connected": false,
            "last_contact_ms": 12_300, "http": null,
        });
        let why = no_address(&dead);
        assert!(
            why.starts_with("not reachable") && why.contains("12.3 s ago"),
            "{why}"
        );
        assert!(!why.contains("advertised"), "{why}");
        let never = serde_json::json!({ "node_id": "x", "connected": false });
        assert!(no_address(&never).contains("never heard from"));
        let view = serde_json::json!({ "node_id": "12D3KooWlive", "term": 2, "admin": null });
        let table = render_cluster(&view, &[dead], &[Err(why)]);
        assert!(table.contains("unreachable"), "{table}");
        assert!(table.contains(": not reachable"), "{table}");
    }
}
