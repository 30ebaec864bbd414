//! Where a live sandbox is (issue 53, docs/design.md §4.8). A sandbox is a live task: a create
//! submits one at the node it reaches (its node of record, the first part of its id), the
//! admin places it under its lease on a worker with a free slot, and that worker makes it in
//! its registry under the task's id. Any node finds it again by that id:
//!
//! 1. this node's registry holds it (live, or ended and remembered), or the call was forwarded
//!    here (a forwarded call goes to the worker that holds it or is making it) → here;
//! 2. its task's record says where it is — this node's own record, the admin's placement when
//!    this node is the admin, a worker learnt before, or else the record at its node of
//!    record, asked with a token delegated to that node alone:
//!    - placed on a worker → that worker (forwarded to, when connected);
//!    - ended → **410** with why, from its result (closed, idle, expired, lost, failed);
//!    - not placed yet → **409** with why it waits;
//! 3. what cannot be told now → **503** naming the node that could not be asked.
//!
//! A record shows a sandbox only to its owner (the token that made it) and to `operate`
//! tokens: anyone else gets the 404 of an id never made.

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use chorus_core::task::AdminView;
use chorus_core::TaskId;
use serde_json::{json, Value};

use super::auth::{Auth, Caller, Role};
use super::cluster::Member;
use super::sandbox_forward::send_to;
use crate::daemon::sandboxes::Live;
use crate::daemon::shared::{SharedState, MAX_CONTACTS};

/// How long asking a node of record for a sandbox's task may take.
const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Where a call for one sandbox is answered.
pub(super) enum Found {
    /// This node holds it.
    Here(Arc<Live>, String),
    /// Its worker, connected to this node with an API.
    At(Member),
    /// Answered from its task's record: gone, waiting, unknown, or not reachable now.
    Told(u16, Value),
    /// Answered already: asking its node of record failed so.
    Sent(Response),
}

/// What a sandbox's task record says.
pub(super) enum Record {
    /// Placed on this worker.
    Placed(String),
    /// Ended: the 410 body.
    Ended(Value),
    /// Not placed yet: why.
    Waiting(String),
    /// No such live sandbox (for this caller).
    Unknown,
}

/// Reads a task view (`GET /tasks/{id}`'s body) as a sandbox's record, for `caller`.
pub(super) fn record_of(view: &Value, caller: &Caller) -> Record {
    let spec = &view["spec"];
    if spec["live"].as_bool() != Some(true) {
        return Record::Unknown;
    }
    let owner = spec["submitter"].as_str();
    if caller.role < Role::Operate && owner != Some(caller.id.as_str()) {
        return Record::Unknown;
    }
    if let Some(result) = view.get("result").filter(|r| !r.is_null()) {
        return Record::Ended(gone_body(result));
    }
    match (view["phase"].as_str(), view["worker"].as_str()) {
        (Some("placed"), Some(worker)) => Record::Placed(worker.to_string()),
        (phase, _) => Record::Waiting(view["pending"].as_str().map(str::to_string).unwrap_or_else(
            || {
                match phase {
                    // The admin has it and gave no other reason (core: `Pending::Room`).
                    Some("queued") => "queued at the admin: a worker can run it, and it waits for \
                                   room there (a free task slot, and memory and CPU beside what \
                                   is placed: `[tasks] slots`, `max_memory_mb`, `max_cpu_millis`)"
                        .to_string(),
                    phase => format!(
                        "{}: waiting for the admin to take it",
                        phase.unwrap_or("submitted")
                    ),
                }
            },
        )),
    }
}

/// The 410 body of a sandbox whose task ended with `result` (live_placements rule 2: closed is
/// an exit 0, idle or expired a timeout, lost or not made a failure).
fn gone_body(result: &Value) -> Value {
    let status = result["status"].as_str().unwrap_or("error");
    let said = result["stderr"]
        .as_str()
        .and_then(|s| {
            s.lines()
                .rev()
                .find_map(|l| l.strip_prefix("chorus: the live sandbox ended: "))
        })
        .map(str::to_string);
    let error = result["error"].as_str().map(str::to_string);
    let worker = result["worker"].as_str().unwrap_or("?");
    let (reason, detail) = match status {
        "succeeded" => ("closed", said.unwrap_or_else(|| "closed".into())),
        "cancelled" => ("closed", "closed: its task was cancelled".into()),
        "timed_out" => match said {
            Some(s) if s.starts_with("idle") => ("idle", s),
            Some(s) => ("expired", s),
            None => ("expired", "its lifetime ran out".into()),
        },
        "lost" => (
            "lost",
            error.unwrap_or_else(|| format!("lost with its worker {worker}")),
        ),
        "unschedulable" => (
            "failed",
            error.unwrap_or_else(|| "no worker could make it".into()),
        ),
        _ => (
            "failed",
            error.or(said).unwrap_or_else(|| status.to_string()),
        ),
    };
    json!({
        "error": format!("the sandbox is gone: {detail}"),
        "gone": { "reason": reason, "detail": detail, "worker": worker },
    })
}

/// What this node's own records say of `task`: as its node of record, as the admin, or from a
/// worker learnt before. `None`: nothing here.
fn local_record(shared: &SharedState, task: &TaskId, caller: &Caller) -> Option<Record> {
    let s = shared.lock();
    let core = s.core.as_ref()?;
    if task.origin.as_str() == s.node_id {
        let (code, view) = super::tasks::get(&s, &task.to_string(), Some(&caller.id));
        return Some(if code == 200 {
            record_of(&view, caller)
        } else {
            Record::Unknown
        });
    }
    if let Some(AdminView::Placed { worker, .. }) =
        core.admin_tasks().and_then(|a| a.view(task, core.now_ms()))
    {
        return Some(Record::Placed(worker.to_string()));
    }
    s.sandbox_workers
        .get(&task.to_string())
        .map(|w| Record::Placed(w.clone()))
}

/// The connected member `node`, as this node's view shows it: asked at the API it advertised,
/// or through an API tunnel when it advertised none this node reaches
/// (`sandbox_forward::reach`).
pub(super) fn member(shared: &SharedState, bound: &str, node: &str) -> Option<Member> {
    let view = shared.lock().cluster(bound)?;
    view.members
        .into_iter()
        .find(|m| m.node_id == node && m.connected)
}

/// Finds sandbox `id` for `caller` (module docs).
pub(super) async fn find(
    shared: &SharedState,
    bound: &str,
    auth: &Auth,
    caller: &Caller,
    id: &str,
) -> Found {
    let unknown = || Found::Told(404, json!({ "error": "no such sandbox" }));
    // Its node of record is a node: a peer id (the simulator's short names never reach here).
    let Some(task) = id
        .parse::<TaskId>()
        .ok()
        .filter(|t| t.origin.as_str().parse::<libp2p::PeerId>().is_ok())
    else {
        return unknown();
    };
    let (live, node) = {
        let s = shared.lock();
        (s.live.clone(), s.node_id.clone())
    };
    // A forwarded call is sent to the worker that holds the sandbox (or is making it: its
    // placement may not have reached this node yet, and the registry waits for it).
    if let Some(live) = live.as_ref().filter(|l| caller.delegated || l.knows(id)) {
        return Found::Here(Arc::clone(live), node);
    }
    // Whether the record is its node of record's own word (here, or asked just now).
    let mut recorded = task.origin.as_str() == node;
    let record = match local_record(shared, &task, caller) {
        Some(r) => r,
        None => {
            recorded = true;
            match ask_record(shared, bound, auth, caller, &task).await {
                Ok(r) => r,
                Err(told) => return told,
            }
        }
    };
    let worker = match record {
        Record::Placed(w) => w,
        Record::Ended(body) => return Found::Told(410, body),
        Record::Waiting(why) => {
            return Found::Told(
                409,
                json!({ "error": format!("the sandbox is not made yet: {why}"), "state": "waiting", "why": why }),
            )
        }
        Record::Unknown => return unknown(),
    };
    if worker == node {
        // Placed here and not in the registry: being made (the registry waits for it), or
        // this node restarted since (the registry then says no such sandbox).
        return match live {
            Some(live) => Found::Here(live, node),
            None => unknown(),
        };
    }
    if let Some(m) = member(shared, bound, &worker) {
        return Found::At(m);
    }
    // A worker learnt before, or the admin's placement, may be out of date: the node of
    // record's word on a sandbox whose worker is gone (ended: 410).
    if !recorded {
        shared.lock().sandbox_workers.remove(id);
        if let Ok(Record::Ended(body)) = ask_record(shared, bound, auth, caller, &task).await {
            return Found::Told(410, body);
        }
    }
    Found::Told(
        503,
        json!({ "error": format!(
            "the sandbox's worker {worker} is not connected to this node: down, or cut off \
             from this node; a worker that is down is declared lost within a failure \
             detection interval, and the sandbox then answers 410 gone"
        ), "worker": worker }),
    )
}

/// Asks the node of record of `task` for its record, and remembers the worker it names.
async fn ask_record(
    shared: &SharedState,
    bound: &str,
    auth: &Auth,
    caller: &Caller,
    task: &TaskId,
) -> Result<Record, Found> {
    let origin = task.origin.to_string();
    let Some(to) = member(shared, bound, &origin) else {
        return Err(Found::Told(
            503,
            json!({ "error": format!(
                "the sandbox's node of record {origin} is not connected to this node (down, or \
                 cut off), and no other record here says where it is: ask another node"
            ) }),
        ));
    };
    let path = format!("/tasks/{task}");
    let answer = match send_to(shared, auth, caller, &to, "GET", &path, None, RECORD_WAIT).await {
        Ok(a) => a,
        Err(response) => return Err(Found::Sent(response)),
    };
    if answer.code == 404 {
        return Ok(Record::Unknown);
    }
    let view: Value = match serde_json::from_slice(&answer.body) {
        Ok(v) if answer.code == 200 => v,
        _ => {
            return Err(Found::Told(
                503,
                json!({ "error": format!(
                    "the sandbox's node of record {origin} did not answer for it (HTTP {})",
                    answer.code
                ) }),
            ))
        }
    };
    let record = record_of(&view, caller);
    if let Record::Placed(worker) = &record {
        let mut s = shared.lock();
        if s.sandbox_workers.len() >= MAX_CONTACTS {
            s.sandbox_workers.clear();
        }
        s.sandbox_workers.insert(task.to_string(), worker.clone());
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(id: &str, role: Role) -> Caller {
        Caller {
            id: id.into(),
            role,
            delegated: false,
        }
    }

    fn view(phase: &str, worker: Option<&str>, result: Option<Value>) -> Value {
        json!({
            "phase": phase,
            "worker": worker,
            "pending": "no worker has a free slot",
            "spec": { "live": true, "submitter": "alice" },
            "result": result,
        })
    }

    /// A record shows a sandbox to its owner and operators only; a task that is not live is no
    /// sandbox; placed names its worker; waiting says why.
    #[test]
    fn a_record_is_its_owners_and_says_where_the_sandbox_is() {
        let alice = caller("alice", Role::Submit);
        let placed = view("placed", Some("n3"), None);
        assert!(matches!(record_of(&placed, &alice), Record::Placed(w) if w == "n3"));
        assert!(matches!(
            record_of(&placed, &caller("bob", Role::Submit)),
            Record::Unknown
        ));
        assert!(matches!(
            record_of(&placed, &caller("ops", Role::Operate)),
            Record::Placed(_)
        ));
        let mut task = placed.clone();
        task["spec"]["live"] = json!(false);
        assert!(matches!(record_of(&task, &alice), Record::Unknown));
        assert!(matches!(
            record_of(&view("queued", None, None), &alice),
            Record::Waiting(why) if why == "no worker has a free slot"
        ));
    }

    /// Each way a live task ends is the 410 reason its sandbox answers (live_placements rule 2).
    #[test]
    fn an_ended_sandbox_says_why_from_its_result() {
        let alice = caller("alice", Role::Submit);
        let ended = |status: &str, stderr: &str, error: Option<&str>| {
            let result =
                json!({ "status": status, "stderr": stderr, "error": error, "worker": "n3" });
            match record_of(&view("done", Some("n3"), Some(result)), &alice) {
                Record::Ended(body) => (
                    body["gone"]["reason"].as_str().unwrap().to_string(),
                    body["gone"]["detail"].as_str().unwrap().to_string(),
                ),
                _ => panic!("not ended"),
            }
        };
        let said = |s: &str| format!("chorus: the live sandbox ended: {s}\n");
        assert_eq!(
            ended("succeeded", &said("closed by alice"), None),
            ("closed".into(), "closed by alice".into())
        );
        assert_eq!(
            ended("timed_out", &said("idle for its whole idle timeout"), None).0,
            "idle"
        );
        assert_eq!(
            ended("timed_out", &said("its lifetime ran out"), None).0,
            "expired"
        );
        assert_eq!(ended("cancelled", "", None).0, "closed");
        let lost = ended("lost", "", Some("worker: n3 went down at 12 s"));
        assert_eq!(lost, ("lost".into(), "worker: n3 went down at 12 s".into()));
        assert_eq!(
            ended("error", "", Some("sandbox: could not be made: no image")).0,
            "failed"
        );
        assert_eq!(ended("unschedulable", "", None).0, "failed");
    }
}
