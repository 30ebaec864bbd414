//! Membership for operators: `GET /members` (this node's view of voters and standbys),
//! `POST /members` (add or remove a voter; any node forwards to the admin), and the
//! `chorus members` command that calls them.
//!
//! A change is an [`Event::ChangeMembers`] handed to the runtime loop, so it is logged and
//! replayed like every other input. The request id it carries comes back on the notices about
//! it ([`Notice::MembershipChange`]); the HTTP handler waits for the one that settles it:
//! committed, or refused with the core's reason. Request ids start from the wall clock at
//! start, so an answer to a request of an earlier run of this node never settles a new one.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context};
use chorus_core::{ChangeOutcome, Event, MemberChange, NodeId, Notice, ADMIN_ELECTION};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::observe::Shared;

/// How long `POST /members` waits for the change to commit unless the request says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The longest wait a request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// The longest node id accepted from an operator (a libp2p PeerId is about 52 characters).
const MAX_ID_LEN: usize = 128;

/// The operator side of the runtime loop: where changes go in, and who waits for their
/// outcome.
#[derive(Debug)]
pub struct OperatorInputs {
    /// Events for the runtime loop.
    pub tx: mpsc::Sender<Event>,
    /// The next request id.
    pub next_request: u64,
    /// Open requests: the outcomes of each are sent here until it settles.
    pub waiters: BTreeMap<u64, mpsc::UnboundedSender<ChangeOutcome>>,
    /// Open task requests (submit, cancel): the core's answer is sent here.
    pub task_waiters: crate::tasks::TaskWaiters,
}

impl OperatorInputs {
    /// Inputs into `tx`, with request ids starting at `first_request` (nonzero).
    pub fn new(tx: mpsc::Sender<Event>, first_request: u64) -> Self {
        OperatorInputs {
            tx,
            next_request: first_request.max(1),
            waiters: BTreeMap::new(),
            task_waiters: BTreeMap::new(),
        }
    }
}

/// A first request id for this run: the wall clock in microseconds, kept below 2⁵³ so that
/// any JSON reader holds it exactly.
pub fn first_request_id() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64);
    (micros % (1 << 52)).max(1)
}

/// Hands a notice to the request waiting for it; a settled request stops waiting.
pub fn deliver(shared: &mut Shared, notice: &Notice) {
    let Notice::MembershipChange {
        outcome, request, ..
    } = notice
    else {
        return;
    };
    let Some(ops) = shared.operator.as_mut() else {
        return;
    };
    if *request == 0 {
        return;
    }
    let Some(waiter) = ops.waiters.get(request) else {
        return;
    };
    let gone = waiter.send(outcome.clone()).is_err();
    if gone || settles(outcome) {
        ops.waiters.remove(request);
    }
}

/// Whether an outcome is final for the operator who asked.
fn settles(outcome: &ChangeOutcome) -> bool {
    matches!(
        outcome,
        ChangeOutcome::Committed { .. } | ChangeOutcome::Refused { .. }
    )
}

/// One node in `GET /members`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberRow {
    /// The node.
    pub node_id: String,
    /// `voter` (a member of the electorate) or `standby` (admin-eligible, not a member).
    pub role: String,
    /// The admin of the answering node's term.
    pub admin: bool,
    /// Connected to the answering node (always true for itself).
    pub reachable: bool,
    /// Milliseconds since the answering node last heard from it (0 for itself).
    pub last_contact_ms: Option<u64>,
    /// Its score as the answering node computes it (uptime, capabilities, free resources).
    pub score: Option<u32>,
}

/// The `GET /members` document.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MembersView {
    /// The node answering.
    pub node_id: String,
    /// Its term and the admin it follows.
    pub term: u64,
    pub admin: Option<String>,
    /// The electorate's version and the term that proposed it (0 at bootstrap); 0 and 0
    /// before the cluster formed.
    pub version: u64,
    pub version_term: u64,
    /// Voters first, then standbys, each in id order.
    pub members: Vec<MemberRow>,
}

impl Shared {
    /// This node's view of the membership, or `None` before recovery finished.
    pub fn members(&self) -> Option<MembersView> {
        let core = self.core.as_ref()?;
        let now = self.now_ms()?;
        let me = core.id();
        let electorate = core.electorate();
        let row = |id: &NodeId, role: &str| {
            let peer = core.peers().get(id);
            let own = id == me;
            MemberRow {
                node_id: id.to_string(),
                role: role.to_owned(),
                admin: core.admin() == Some(id),
                reachable: own || peer.is_some(),
                last_contact_ms: if own {
                    Some(0)
                } else {
                    self.last_contact
                        .get(id.as_str())
                        .map(|t| t.elapsed().as_millis() as u64)
                },
                score: if own {
                    Some(core.score())
                } else {
                    peer.map(|p| p.score_at(now))
                },
            }
        };
        let mut members: Vec<MemberRow> = electorate
            .map(|e| e.members().iter().map(|m| row(m, "voter")).collect())
            .unwrap_or_default();
        let is_voter = |id: &NodeId| electorate.is_some_and(|e| e.contains(id));
        if !is_voter(me) && self.capabilities.iter().any(|c| c == ADMIN_ELECTION) {
            members.push(row(me, "standby"));
        }
        for (id, peer) in core.peers().iter() {
            if peer.eligible() && !is_voter(id) {
                members.push(row(id, "standby"));
            }
        }
        members[electorate.map_or(0, |e| e.len())..].sort_by(|a, b| a.node_id.cmp(&b.node_id));
        Some(MembersView {
            node_id: me.to_string(),
            term: core.term(),
            admin: core.admin().map(NodeId::to_string),
            version: electorate.map_or(0, |e| e.version),
            version_term: electorate.map_or(0, |e| e.term),
            members,
        })
    }
}

/// The body of `POST /members`: `{"op": "add"|"remove", "node": "<id>"}`.
pub fn parse_change(body: &[u8]) -> Result<MemberChange, String> {
    let change: MemberChange = serde_json::from_slice(body).map_err(|e| {
        format!("expected {{\"op\": \"add\" or \"remove\", \"node\": \"<node id>\"}}: {e}")
    })?;
    let id = change.node().as_str();
    if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(|c| c.is_whitespace()) {
        return Err(format!(
            "not a node id: {id:?} (1 to {MAX_ID_LEN} characters, no spaces)"
        ));
    }
    Ok(change)
}

/// What `POST /members` answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChangeAnswer {
    /// `committed`, `refused` or `timed_out`.
    pub result: String,
    /// The change asked for.
    pub change: MemberChange,
    /// The committed electorate version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// The core's reason, when refused (snake_case, stable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A sentence for people.
    pub message: String,
}

/// Submits `change` and waits up to `wait` for it to settle. Returns the HTTP status code
/// and the answer: 200 committed, 409 refused, 504 not settled in time, 503 the node is not
/// running (starting, or stopping).
pub async fn submit(
    shared: &crate::observe::SharedState,
    change: MemberChange,
    wait: Duration,
) -> (u16, ChangeAnswer) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let queued = {
        let mut s = shared.lock();
        let stopping = s.shutting_down;
        match s.operator.as_mut() {
            Some(ops) if !stopping => {
                let request = ops.next_request;
                ops.next_request += 1;
                let event = Event::ChangeMembers {
                    change: change.clone(),
                    request,
                };
                match ops.tx.try_send(event) {
                    Ok(()) => {
                        ops.waiters.insert(request, tx);
                        Ok(request)
                    }
                    Err(_) => Err("the node is busy with other operator requests; retry"),
                }
            }
            _ => Err("the node is not running (starting or stopping)"),
        }
    };
    let request = match queued {
        Ok(r) => r,
        Err(why) => return (503, answer("refused", change, None, None, why.to_owned())),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(ChangeOutcome::Committed { version })) => {
                let msg = format!("committed: the electorate is now version {version}");
                return (200, answer("committed", change, Some(version), None, msg));
            }
            Ok(Some(ChangeOutcome::Refused { reason })) => {
                let name = serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned));
                let msg = format!("refused: {}", reason.explain());
                return (409, answer("refused", change, None, name, msg));
            }
            Ok(Some(other)) => last = Some(other),
            Ok(None) | Err(_) => break,
        }
    }
    shared
        .lock()
        .operator
        .as_mut()
        .map(|ops| ops.waiters.remove(&request));
    let so_far = match last {
        Some(ChangeOutcome::Forwarded { admin }) => {
            format!("forwarded to the admin {admin}, which has not answered")
        }
        Some(ChangeOutcome::Proposed { version }) => {
            format!("proposed as version {version}, not yet acknowledged by majorities")
        }
        _ => "not yet handled".to_owned(),
    };
    let msg = format!(
        "not settled within {} ms ({so_far}); it may still commit: check `chorus members`",
        wait.as_millis()
    );
    (504, answer("timed_out", change, None, None, msg))
}

fn answer(
    result: &str,
    change: MemberChange,
    version: Option<u64>,
    reason: Option<String>,
    message: String,
) -> ChangeAnswer {
    ChangeAnswer {
        result: result.to_owned(),
        change,
        version,
        reason,
        message,
    }
}

// ---- The command line ----------------------------------------------------------------------------

/// `chorus members`: prints the membership as the node at `addr` sees it.
pub async fn show(addr: &str, json: bool) -> anyhow::Result<()> {
    let body = crate::http::get_document(addr, "/members").await?;
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
        let contact = if m.node_id == v.node_id {
            "this node".to_owned()
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
    out
}

/// `chorus members add|remove ID`: asks the node at `addr`, which forwards to the admin, and
/// waits for the change to commit. Errors carry the node's reason.
pub async fn change(addr: &str, change: MemberChange, wait: Duration) -> anyhow::Result<()> {
    let body = serde_json::to_string(&change)?;
    let path = format!("/members?wait_ms={}", wait.as_millis());
    // The node waits `wait`; give the connection a little longer than that.
    let reply = tokio::time::timeout(
        wait + Duration::from_secs(5),
        crate::http::request(addr, "POST", &path, Some(&body)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_bodies_are_checked() {
        let ok = parse_change(br#"{"op":"add","node":"12D3KooW"}"#).unwrap();
        assert_eq!(
            ok,
            MemberChange::Add {
                node: NodeId::from("12D3KooW")
            }
        );
        for bad in [
            &br#"{"op":"promote","node":"a"}"#[..],
            br#"{"op":"add"}"#,
            br#"{"op":"add","node":""}"#,
            br#"{"op":"remove","node":"a b"}"#,
            b"not json",
        ] {
            assert!(
                parse_change(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = format!(r#"{{"op":"add","node":"{}"}}"#, "x".repeat(MAX_ID_LEN + 1));
        assert!(parse_change(long.as_bytes()).is_err());
    }

    #[test]
    fn only_committed_and_refused_settle_a_request() {
        let (tx, _rx) = mpsc::channel(1);
        let mut shared = Shared {
            operator: Some(OperatorInputs::new(tx, 7)),
            ..Shared::default()
        };
        let (wtx, mut wrx) = mpsc::unbounded_channel();
        shared.operator.as_mut().unwrap().waiters.insert(7, wtx);
        let change = MemberChange::Remove {
            node: NodeId::from("b"),
        };
        let notice = |outcome, request| Notice::MembershipChange {
            change: change.clone(),
            outcome,
            request,
        };
        let forwarded = ChangeOutcome::Forwarded {
            admin: NodeId::from("a"),
        };
        deliver(&mut shared, &notice(forwarded.clone(), 7));
        // Another request's answer, or autopilot's notice (request 0), is not this one's.
        deliver(
            &mut shared,
            &notice(ChangeOutcome::Committed { version: 9 }, 8),
        );
        deliver(
            &mut shared,
            &notice(ChangeOutcome::Committed { version: 9 }, 0),
        );
        assert!(shared.operator.as_ref().unwrap().waiters.contains_key(&7));
        deliver(
            &mut shared,
            &notice(ChangeOutcome::Committed { version: 3 }, 7),
        );
        assert!(shared.operator.as_ref().unwrap().waiters.is_empty());
        assert_eq!(wrx.try_recv().unwrap(), forwarded);
        assert_eq!(
            wrx.try_recv().unwrap(),
            ChangeOutcome::Committed { version: 3 }
        );
        assert!(wrx.try_recv().is_err(), "nothing else reached the request");
    }
}
