//! Tasks across the cluster. A task lives at the node it was submitted to — the first part of
//! its id — which holds its spec, its phase and its result. A node asked about another node's
//! task answers 404 naming that node and the HTTP address it advertised (when connected to it);
//! [`at_owner`] follows that once, so `chorus task get|cancel ID` works through any node.
//! [`list_cluster`] asks one node whom it knows (`/cluster`) and each of them for its tasks.
//!
//! A task whose node is down is still that node's alone: it takes the result once back. Until
//! then [`whereabouts`] reads the result its worker holds, or — a task that has not run — what
//! the admin knows of it; a cancel asked at any node (role operate) is kept there and passed on
//! (`chorus_core::task::ask`).
//!
//! Every address but the one the operator named is a peer's advertisement: those requests carry
//! a token delegated to that node alone, never the operator's ([`request_peer`]).

use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use super::http::{request, request_peer, Peer};
use crate::names::short_id;
use crate::wire::TaskRow;

/// How long one node gets to answer for its tasks in a cluster-wide list.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// One node's answer.
pub struct Answer {
    /// The address that answered.
    pub addr: String,
    pub code: u16,
    pub body: String,
    /// The body as JSON (`Null` when it is not).
    pub value: Value,
}

async fn ask(addr: &str, method: &str, path: &str) -> anyhow::Result<Answer> {
    let (code, body) = request(addr, method, path, None)
        .await
        .with_context(|| format!("cannot reach a chorus node at {addr}"))?;
    let value = serde_json::from_str(&body).unwrap_or(Value::Null);
    Ok(Answer {
        addr: addr.to_owned(),
        code,
        body,
        value,
    })
}

/// `method path` at a peer (see [`request_peer`]).
async fn ask_peer(peer: &Peer, method: &str, path: &str) -> anyhow::Result<Answer> {
    let a = request_peer(peer, method, path, None, true)
        .await
        .with_context(|| format!("cannot reach a chorus node at {}", peer.http))?;
    let body = String::from_utf8_lossy(&a.body).into_owned();
    Ok(Answer {
        addr: peer.http.clone(),
        code: a.code,
        value: serde_json::from_str(&body).unwrap_or(Value::Null),
        body,
    })
}

/// `method path` at `addr`, or — when `addr` answers that another node holds the task, and
/// where that node's API is — at that node (once: the owner's own answer is final).
pub async fn at_owner(addr: &str, method: &str, path: &str) -> anyhow::Result<Answer> {
    let first = ask(addr, method, path).await?;
    let owner = match first.value["owner_http"].as_str() {
        Some(h) if first.code == 404 && h != addr => h.to_owned(),
        _ => return Ok(first),
    };
    let holder = first.value["owner"].as_str().unwrap_or_default();
    let peer = Peer {
        via: addr.to_owned(),
        node: holder.to_owned(),
        http: owner.clone(),
        relayed: false,
    };
    ask_peer(&peer, method, path).await.with_context(|| {
        format!(
            "{addr} says node {} holds the task, at {owner}, but it does not answer",
            short_id(holder)
        )
    })
}

/// What the cluster knows of a task whose node is out of reach.
#[derive(Debug, Default)]
pub struct Whereabouts {
    /// The worker holding its result (it keeps it until the task's node acknowledges it).
    pub held: Option<(String, chorus_core::TaskResult)>,
    /// The admin's view of it (`chorus_core::task::AdminView` as JSON), and the admin's id.
    pub at_admin: Option<(String, Value)>,
    /// Nodes that keep a cancel for it.
    pub cancel_kept_at: Vec<String>,
}

/// Asks the node at `addr` and every node it knows about a task whose node is out of reach.
pub async fn whereabouts(addr: &str, id: &str) -> Whereabouts {
    let mut found = Whereabouts::default();
    let path = format!("/tasks/{id}");
    let known = members(addr).await.unwrap_or_default();
    for (node, peer) in &known {
        let Some(peer) = peer else {
            continue;
        };
        let Ok(Ok(a)) = tokio::time::timeout(NODE_TIMEOUT, ask_peer(peer, "GET", &path)).await
        else {
            continue;
        };
        if a.code != 404 {
            continue;
        }
        if found.held.is_none() && !a.value["held_result"].is_null() {
            if let Ok(r) = serde_json::from_value(a.value["held_result"].clone()) {
                found.held = Some((node.clone(), r));
            }
        }
        if found.at_admin.is_none() && a.value["admin_view"].is_object() {
            found.at_admin = Some((node.clone(), a.value["admin_view"].clone()));
        }
        if a.value["cancel_kept"] == true {
            found.cancel_kept_at.push(node.clone());
        }
    }
    found
}

/// One line on what the admin says of a task (`chorus_core::task::AdminView` as JSON).
pub fn describe_admin_view(admin: &str, view: &Value) -> String {
    let admin = short_id(admin);
    let s = |k: &str| view[k].as_str().map(short_id).unwrap_or_default();
    let n = |k: &str| view[k].as_u64().unwrap_or_default();
    match view["state"].as_str().unwrap_or_default() {
        "queued" => {
            let pending = &view["pending"];
            let why = match (pending["why"].as_str(), pending["reason"].as_str()) {
                (Some("unplaceable"), Some(reason)) => format!("; waiting: {reason}"),
                (Some("room"), _) => "; waiting for room".to_owned(),
                _ => String::new(),
            };
            format!(
                "the admin {admin} has it queued as run {}{why}",
                n("attempt")
            )
        }
        "placed" => {
            let cancelled = if view["cancelled"] == true {
                ", being stopped (cancelled)"
            } else {
                ""
            };
            format!(
                "the admin {admin} placed run {} on worker {}{cancelled}",
                n("attempt"),
                s("worker")
            )
        }
        "finished" => format!(
            "the admin {admin} heard worker {} finished it (the worker keeps the result until \
             the task's node has it)",
            s("worker")
        ),
        "unschedulable" => format!("the admin {admin} ended it unschedulable"),
        "lost" => format!(
            "the admin {admin} recorded the live sandbox lost with its worker {}",
            s("worker")
        ),
        "cancelled" => format!(
            "the admin {admin} holds a cancel for it: it will not run, and ends cancelled when \
             its node is back"
        ),
        other => format!("the admin {admin} says {other:?}"),
    }
}

/// The HTTP API of node `node` as the node at `addr` knows it (`addr` itself when it is that
/// node); none when it advertised none or is not known there.
pub async fn http_of(addr: &str, node: &str) -> Option<Peer> {
    members(addr)
        .await
        .ok()?
        .into_iter()
        .find(|(id, _)| id == node)
        .and_then(|(_, peer)| peer)
}

/// The nodes the node at `addr` knows (`/cluster`: itself, its peers, the electorate), each
/// with where its API is: `addr` for that node itself, else the address it advertised, else
/// (connected, its API on its own loopback) through the node at `addr`; none when the node at
/// `addr` does not reach it now.
pub(super) async fn members(addr: &str) -> anyhow::Result<Vec<(String, Option<Peer>)>> {
    let cluster = ask(addr, "GET", "/cluster").await?;
    if cluster.code != 200 {
        anyhow::bail!("{addr} answered {}: {}", cluster.code, cluster.body.trim());
    }
    let asked = cluster.value["node_id"].as_str().unwrap_or_default();
    let members = cluster.value["members"].as_array().into_iter().flatten();
    Ok(members
        .map(|m| {
            let node = m["node_id"].as_str().unwrap_or_default().to_owned();
            let http = if node == asked {
                Some(addr.to_owned())
            } else {
                m["http"].as_str().map(str::to_owned)
            };
            let connected = m["connected"].as_bool() == Some(true);
            let peer = match http {
                Some(http) => Some(Peer {
                    via: addr.to_owned(),
                    node: node.clone(),
                    http,
                    relayed: false,
                }),
                // Its API is out of the operator's reach too: through the node asked.
                None if connected => Some(Peer::relayed(addr, &node)),
                None => None,
            };
            (node, peer)
        })
        .collect())
}

/// Which tasks a cluster-wide list shows.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// The node they were submitted to (full id, or its short form).
    pub node: Option<String>,
    /// The worker they run or ran on (full id, or its short form).
    pub worker: Option<String>,
}

/// Whether `id` is the node `given` names: the full id, or its last characters (at least the
/// 8 of the short form every table prints).
pub fn names(id: &str, given: &str) -> bool {
    id == given || (given.len() >= 8 && id.ends_with(given))
}

impl Filter {
    /// The rows this filter keeps.
    pub fn kept(&self, rows: Vec<TaskRow>) -> Vec<TaskRow> {
        rows.into_iter().filter(|r| self.keeps(r)).collect()
    }

    fn keeps(&self, row: &TaskRow) -> bool {
        let origin = row.task.rsplit_once('-').map_or("", |(o, _)| o);
        self.node.as_deref().is_none_or(|n| names(origin, n))
            && self
                .worker
                .as_deref()
                .is_none_or(|w| row.worker.as_deref().is_some_and(|id| names(id, w)))
    }
}

/// What each node of the cluster answered for `GET /tasks?state=…`: its id and its rows, or
/// why there are none.
pub struct NodeTasks {
    pub node_id: String,
    pub tasks: Result<Vec<TaskRow>, String>,
}

/// Asks the node at `addr` whom it knows, and each of them (itself included, at `addr`) for
/// its tasks in `state`, filtered.
pub async fn list_cluster(
    addr: &str,
    state: &str,
    filter: &Filter,
) -> anyhow::Result<Vec<NodeTasks>> {
    let mut out = Vec::new();
    for (id, peer) in members(addr).await? {
        let tasks = match peer {
            None => Err(
                "not reachable from the node asked (down, or cut off): its tasks are \
                         not listed"
                    .to_owned(),
            ),
            Some(peer) => {
                match tokio::time::timeout(NODE_TIMEOUT, rows_at_peer(&peer, state)).await {
                    Ok(rows) => rows.map(|rows| filter.kept(rows)),
                    Err(_) => Err(format!(
                        "{} did not answer within {NODE_TIMEOUT:?}",
                        peer.http
                    )),
                }
            }
        };
        out.push(NodeTasks { node_id: id, tasks });
    }
    Ok(out)
}

/// The tasks in `state` submitted to the node at `addr` (`GET /tasks?state=…`).
pub async fn rows_at(addr: &str, state: &str) -> Result<Vec<TaskRow>, String> {
    let peer = Peer {
        via: addr.to_owned(),
        node: String::new(),
        http: addr.to_owned(),
        relayed: false,
    };
    rows_at_peer(&peer, state).await
}

/// [`rows_at`] a peer.
async fn rows_at_peer(peer: &Peer, state: &str) -> Result<Vec<TaskRow>, String> {
    let addr = &peer.http;
    let path = format!("/tasks?state={state}");
    let answer = ask_peer(peer, "GET", &path)
        .await
        .map_err(|e| format!("{e:#}"))?;
    if answer.code != 200 {
        let why = answer.value["error"]
            .as_str()
            .map_or_else(|| answer.body.trim().to_owned(), str::to_owned);
        return Err(format!("{addr} answered {}: {why}", answer.code));
    }
    serde_json::from_value(answer.value["tasks"].clone())
        .map_err(|e| format!("{addr}: the task list is not what this chorus expects: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The admin's view as the core serializes it, said in one line each.
    #[test]
    fn the_admins_view_of_a_task_is_said_plainly() {
        use chorus_core::task::{AdminView, Pending};
        let say =
            |v: AdminView| describe_admin_view("nadmin0001", &serde_json::to_value(v).unwrap());
        let waiting = say(AdminView::Queued {
            attempt: 2,
            pending: Some(Pending::Unplaceable {
                reason: "no worker offers repo:nosuch (3 workers checked)".into(),
                for_ms: 4_000,
            }),
        });
        assert_eq!(
            waiting,
            "the admin dmin0001 has it queued as run 2; waiting: no worker offers repo:nosuch \
             (3 workers checked)"
        );
        let room = say(AdminView::Queued {
            attempt: 1,
            pending: Some(Pending::Room),
        });
        assert!(room.ends_with("as run 1; waiting for room"), "{room}");
        let placed = say(AdminView::Placed {
            worker: "workerabcdefgh".into(),
            attempt: 1,
            cancelled: true,
        });
        assert_eq!(
            placed,
            "the admin dmin0001 placed run 1 on worker abcdefgh, being stopped (cancelled)"
        );
        assert!(say(AdminView::Cancelled).contains("holds a cancel for it"));
        assert!(say(AdminView::Unschedulable).contains("unschedulable"));
        let lost = say(AdminView::Lost {
            worker: "w9".into(),
        });
        assert!(lost.contains("lost with its worker w9"), "{lost}");
    }

    fn row(task: &str, worker: Option<&str>) -> TaskRow {
        TaskRow {
            task: task.into(),
            phase: "done".into(),
            status: None,
            exit_code: None,
            worker: worker.map(str::to_owned),
            pending: None,
        }
    }

    #[test]
    fn a_node_is_named_by_its_id_or_its_last_8_characters() {
        let id = "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B";
        assert!(names(id, id));
        assert!(names(id, "c2htAht1B"));
        assert!(names(id, "2htAht1B"));
        assert!(!names(id, "Aht1B"), "too short to name one node");
        assert!(!names(id, "2htAht1C"));
    }

    #[test]
    fn the_filter_keeps_tasks_by_the_node_they_were_submitted_to_and_their_worker() {
        let a = "12D3KooWAYdx36XGWgEjuWUFfeWN2Y3LsJ5XowTibozc2htAht1B";
        let b = "12D3KooWKdbNffbteB6S1nzaAJLDLc6VJh4BJhNfze12Ld1U8GZa";
        let on_b = row(&format!("{a}-3"), Some(b));
        let queued = row(&format!("{b}-1"), None);
        let all = Filter::default();
        assert!(all.keeps(&on_b) && all.keeps(&queued));
        let from_a = Filter {
            node: Some(short_id(a).to_owned()),
            ..Filter::default()
        };
        assert!(from_a.keeps(&on_b) && !from_a.keeps(&queued));
        let run_by_b = Filter {
            worker: Some(b.to_owned()),
            ..Filter::default()
        };
        assert!(run_by_b.keeps(&on_b) && !run_by_b.keeps(&queued));
    }
}
