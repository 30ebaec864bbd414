//! `chorus members`: the membership as a node sees it, and `add`/`remove` through any node
//! (`GET` and `POST /members`), `transfer` at the admin (`POST /members/transfer`), and
//! `leave` at the node that retires (`POST /members/leave`).

use std::time::Duration;

use anyhow::{bail, Context};
use chorus_core::MemberChange;
use serde_json::Value;

use super::http::{get_document, request, request_peer, Peer};
use crate::wire::MembersView;

/// `chorus members`: prints the membership as the node at `addr` sees it.
pub async fn show(addr: &str, json: bool) -> anyhow::Result<()> {
    let body = get_document(addr, "/members").await?;
    if json {
        println!("{}", body.trim());
        return Ok(());
    }
    let view: MembersView = serde_json::from_str(&body).context("the members list is not JSON")?;
    print!("{}", render(&view));
    Ok(())
}

/// The membership as an aligned table.
pub fn render(v: &MembersView) -> String {
    let origin = match (v.version, v.version_term) {
        (0, _) => "not formed yet".to_owned(),
        (_, 0) => "agreed at bootstrap".to_owned(),
        (_, t) => format!("changed in term {t}"),
    };
    let mut out = format!(
        "electorate version {} ({origin}); admin {}; as seen by {}\n",
        v.version,
        v.admin.as_deref().unwrap_or("none known"),
        v.node_id,
    );
    let width = v
        .members
        .iter()
        .map(|m| m.node_id.len())
        .max()
        .unwrap_or(4)
        .max(4);
    out.push_str(&format!(
        "{:<width$}  {:<7}  {:<9}  {:>12}  {:>5}\n",
        "NODE", "ROLE", "REACHABLE", "LAST CONTACT", "SCORE"
    ));
    for m in &v.members {
        let role = if m.admin {
            format!("{}*", m.role)
        } else {
            m.role.clone()
        };
        // A connected peer is heard now, at the connection's level: followers send each other
        // no protocol message in a healthy cluster, so their last message is minutes old and
        // read as a failure (issue 54, item 6).
        let contact = if m.node_id == v.node_id {
            "this node".to_owned()
        } else if m.reachable {
            "connected".to_owned()
        } else {
            m.last_contact_ms.map_or("-".to_owned(), |ms| {
                format!("{:.1} s ago", ms as f64 / 1000.0)
            })
        };
        let score = m.score.map_or("-".to_owned(), |s| s.to_string());
        out.push_str(&format!(
            "{:<width$}  {:<7}  {:<9}  {:>12}  {:>5}\n",
            m.node_id,
            role,
            if m.reachable { "yes" } else { "no" },
            contact,
            score
        ));
    }
    out.push_str("(* the admin)\n");
    if !v.removed.is_empty() {
        out.push_str(&format!(
            "removed by an operator (autopilot leaves them out until `chorus members add ID`): {}\n",
            v.removed.join(", ")
        ));
    }
    out
}

/// `chorus members add|remove ID`: asks the node at `addr`, which forwards to the admin, and
/// waits for the change to commit. Errors carry the node's reason.
pub async fn change(addr: &str, change: MemberChange, wait: Duration) -> anyhow::Result<()> {
    let body = serde_json::to_string(&change)?;
    let path = format!("/members?wait_ms={}", wait.as_millis());
    post_and_say(addr, &path, Some(&body), wait).await
}

/// `chorus members leave`: the node at `addr` removes itself from the electorate, waits for the
/// commit and stops (`POST /members/leave`). Errors carry the node's reason; the node then
/// keeps running.
pub async fn leave(addr: &str, wait: Duration) -> anyhow::Result<()> {
    let path = format!("/members/leave?wait_ms={}", wait.as_millis());
    // An empty JSON body: the API takes a POST only as JSON.
    post_and_say(addr, &path, Some("{}"), wait).await
}

/// POSTs to `path` at `addr`, where the node waits up to `wait`, and prints the answer's
/// message (200) or fails with it.
async fn post_and_say(
    addr: &str,
    path: &str,
    body: Option<&str>,
    wait: Duration,
) -> anyhow::Result<()> {
    // The node waits `wait`; give the connection a little longer than that.
    let reply = tokio::time::timeout(
        wait + Duration::from_secs(5),
        request(addr, "POST", path, body),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{addr} did not answer within {} s", wait.as_secs() + 5))?
    .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    let (code, text) = reply;
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.trim().to_owned());
    if code == 200 {
        println!("{message}");
        Ok(())
    } else {
        bail!("{message}")
    }
}

/// `chorus members transfer [ID]`: asks the node at `addr` to hand the admin's office over; a
/// node that is not the admin names the admin's HTTP address, where it is asked once more.
pub async fn transfer(addr: &str, to: Option<String>, wait: Duration) -> anyhow::Result<()> {
    let body = match &to {
        Some(id) => serde_json::json!({ "to": id }).to_string(),
        None => "{}".to_owned(),
    };
    let path = format!("/members/transfer?wait_ms={}", wait.as_millis());
    // The admin's address is its own advertisement: asked with a token delegated to it alone.
    let mut at = Peer {
        via: addr.to_owned(),
        node: String::new(),
        http: addr.to_owned(),
        relayed: false,
    };
    for _ in 0..2 {
        let reply = tokio::time::timeout(
            wait + Duration::from_secs(5),
            request_peer(&at, "POST", &path, Some(&body), true),
        )
        .await
        .map_err(|_| anyhow::anyhow!("{at} did not answer within {} s", wait.as_secs() + 5))?
        .with_context(|| format!("cannot reach a chorus node at {at}"))?;
        let (code, text) = (
            reply.code,
            String::from_utf8_lossy(&reply.body).into_owned(),
        );
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let message = v["message"]
            .as_str()
            .map_or_else(|| text.trim().to_owned(), str::to_owned);
        if code == 200 {
            println!("{message}");
            return Ok(());
        }
        match (
            v["reason"].as_str(),
            v["admin_http"].as_str(),
            v["admin"].as_str(),
        ) {
            (Some("not_admin"), Some(http), Some(admin)) if http != at.http => {
                at = Peer {
                    via: addr.to_owned(),
                    node: admin.to_owned(),
                    http: http.to_owned(),
                    relayed: false,
                }
            }
            _ => bail!("{message}"),
        }
    }
    bail!("the admin moved while the request was on its way; run the command again")
}

/// The whole node id `given` names among the members the node at `addr` lists: a short id as
/// the tables print it names its node ([`crate::names::resolve_id`]); an id no member's ends
/// with, or a list that cannot be read, leaves `given` as it is for the node to judge.
pub async fn resolve(addr: &str, given: String) -> anyhow::Result<String> {
    let Ok(body) = get_document(addr, "/members").await else {
        return Ok(given);
    };
    let Ok(view) = serde_json::from_str::<MembersView>(&body) else {
        return Ok(given);
    };
    let known = view.members.iter().map(|m| m.node_id.as_str());
    match crate::names::resolve_id(&given, known) {
        Ok(Some(id)) => Ok(id.to_owned()),
        Ok(None) => Ok(given),
        Err(why) => bail!("{why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MemberRow;

    /// Issue 54, item 6: a connected member is heard now — followers send each other no
    /// protocol message in a healthy cluster, so their last message is minutes old — and only
    /// one out of reach says when it was last heard from.
    #[test]
    fn a_connected_member_reads_as_connected_and_one_out_of_reach_as_last_heard() {
        let row = |id: &str, reachable, ms| MemberRow {
            node_id: id.into(),
            role: "voter".into(),
            admin: false,
            reachable,
            last_contact_ms: Some(ms),
            score: None,
        };
        let view = MembersView {
            node_id: "a".into(),
            term: 3,
            admin: Some("a".into()),
            version: 1,
            version_term: 0,
            members: vec![
                row("a", true, 0),
                row("b", true, 325_000),
                row("c", false, 12_300),
            ],
            removed: Vec::new(),
        };
        let table = render(&view);
        let line = |id: &str| {
            table
                .lines()
                .find(|l| l.starts_with(id))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(line("a").contains("this node"), "{table}");
        assert!(
            line("b").contains("connected") && !line("b").contains("325"),
            "{table}"
        );
        assert!(line("c").contains("12.3 s ago"), "{table}");
    }
}
