//! Traces: JSON Lines exactly as docs/design.md §6, a public contract other tools read.
//!
//! The first line is a [`Header`]; then one [`Line`] per record in simulated-time order, each with
//! `t` (global simulated ms) and `kind`. Every time in a trace, `lease_until` included, is global
//! time: engines convert a drifting node's local times before writing.

use std::io::{self, Write};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::scenario::Scenario;

/// The trace format version.
pub const TRACE_VERSION: u32 = 1;

/// The first line: everything needed to re-run the simulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always "header".
    pub kind: String,
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// "des" or "turmoil".
    pub engine: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Trace format version.
    pub version: u32,
    /// Number of voters (`n0`… are voters, the rest workers).
    pub voters: usize,
    /// Simulated duration.
    pub duration_ms: u64,
    /// Whether `step` records are included.
    pub steps: bool,
    /// The liveness bound the checker used.
    pub liveness_bound_ms: u64,
    /// Invariant 7's bound the checker used, when the scenario has a task workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_bound_ms: Option<u64>,
    /// Invariant 7's bound on the result of a task an admin found no live worker for, from its
    /// `task_unplaceable` record (`chorus_core::task::unschedulable_bound_ms`), when the
    /// scenario has a task workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable_bound_ms: Option<u64>,
    /// The full scenario (with `nodes` and `duration` as run), so file scenarios replay too.
    /// Absent in traces of real clusters (`chorus replay` of several data directories).
    #[serde(default = "Scenario::unspecified")]
    pub spec: Scenario,
    /// The admin-eligible nodes by id, where they are not `n0`… `n{voters-1}` (traces of real
    /// clusters, whose node ids are peer ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible: Option<Vec<String>>,
    /// Nodes whose log was pruned (traces of real clusters), with the time their retained
    /// history starts (at a snapshot): what they did before it is not in the trace, and invariant 7 does not
    /// judge what needs it (a result for a task they accepted before, a placement under a
    /// lease they took before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pruned: Option<std::collections::BTreeMap<String, u64>>,
}

/// One trace line after the header.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Global simulated time, ms since start.
    pub t: u64,
    /// What happened.
    #[serde(flatten)]
    pub record: Record,
}

/// The record kinds (docs/design.md §6), plus simulator extensions consumers may ignore.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A node won the election for `term`.
    BecameAdmin {
        /// Node id.
        node: String,
        /// Term.
        term: u64,
        /// Lease end, global ms.
        lease_until: u64,
    },
    /// A majority acknowledged; the lease ends later.
    LeaseRenewed {
        /// Node id.
        node: String,
        /// Term.
        term: u64,
        /// Lease end, global ms.
        lease_until: u64,
    },
    /// An admin's lease ran out without renewal (written by `chorus replay`; the simulator
    /// leaves it out: `lease_until` already says when).
    LeaseExpired {
        /// Node id.
        node: String,
        /// Term.
        term: u64,
    },
    /// An admin stepped down.
    SteppedDown {
        /// Node id.
        node: String,
        /// Term.
        term: u64,
        /// `higher_term`, `check_quorum` or `shutdown`.
        reason: String,
    },
    /// A node cast its vote of `term`.
    Voted {
        /// Node id.
        node: String,
        /// Term.
        term: u64,
        /// The candidate.
        #[serde(rename = "for")]
        candidate: String,
    },
    /// A node sent a granted vote reply (extension): its vote of `term` went to `to`. Vote
    /// safety is judged from these, the messages actually sent, as well as from `voted`.
    VoteGranted {
        /// The voter.
        node: String,
        /// Term of the reply.
        term: u64,
        /// The candidate the reply went to.
        to: String,
    },
    /// A node learned the admin of `term`.
    AdminKnown {
        /// Node id.
        node: String,
        /// The admin.
        admin: String,
        /// Term.
        term: u64,
    },
    /// A node, as a bootstrap acceptor, accepted a genesis electorate at a ballot (a
    /// proposer's own acceptance included). The checker's genesis invariant is judged from
    /// these.
    BootstrapAccepted {
        /// Node id (the acceptor).
        node: String,
        /// The ballot accepted: `{"round":R,"node":"<proposer>"}`, as on the wire.
        ballot: chorus_core::Ballot,
        /// The proposed electorate's voters, in id order. Shared like `electorate_changed`'s.
        members: Arc<[String]>,
    },
    /// A node's electorate changed: agreed at bootstrap, adopted from its cluster, or a
    /// membership change proposed by this node (as admin) or taken from its admin.
    ElectorateChanged {
        /// Node id.
        node: String,
        /// The electorate's version (1 at bootstrap).
        version: u64,
        /// The term of the admin that proposed it (0 at bootstrap).
        term: u64,
        /// The voters, in id order. Shared: a cold start of n voters reports one list n times.
        members: Arc<[String]>,
    },
    /// What became of a membership change at a node: `forwarded` (to its admin), `proposed`
    /// or `committed` (at the admin), `refused`, or the admin's answer at the node that asked.
    MembershipChange {
        /// Node id.
        node: String,
        /// `{"op":"add"|"remove","node":"<id>"}`, as on the wire.
        change: chorus_core::MemberChange,
        /// `{"outcome":"forwarded","admin":..}`, `{"outcome":"proposed"|"committed","version":V}`
        /// or `{"outcome":"refused","reason":".."}`, as on the wire.
        outcome: chorus_core::ChangeOutcome,
        /// The operator's request id at this node (absent for autopilot and for changes other
        /// nodes asked for).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
    },
    /// A node accepted a task (`existing`: a repeated idempotency key named one it had).
    TaskSubmitted {
        /// The submitter, which owns the task.
        node: String,
        /// `ORIGIN-SEQ`.
        task: String,
        /// The submit's request id at the node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        /// The key named a task accepted before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        existing: bool,
    },
    /// A node refused a submit or a cancel.
    TaskRefused {
        /// Node id.
        node: String,
        /// The request refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        /// Why.
        reason: String,
    },
    /// A submitter was asked to cancel a task it owns.
    TaskCancelRequested {
        /// The submitter.
        node: String,
        /// The task.
        task: String,
        /// The cancel's request id at the node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
    },
    /// The admin `node` placed run `attempt` of a task on `worker`.
    TaskPlaced {
        /// The admin.
        node: String,
        /// The task.
        task: String,
        /// The worker.
        worker: String,
        /// The run, from 1.
        attempt: u32,
    },
    /// The admin `node` found no live worker that can run a queued task (`reason`): from here
    /// its result is owed within the header's `unschedulable_bound_ms`, not `task_bound_ms`
    /// (the admin ends it `unschedulable` after its own bound).
    TaskUnplaceable {
        /// The admin.
        node: String,
        /// The task.
        task: String,
        /// Why.
        reason: String,
    },
    /// A worker started run `attempt` of a task.
    TaskStarted {
        /// The worker.
        node: String,
        /// The task.
        task: String,
        /// The run.
        attempt: u32,
        /// A live sandbox (§4.8; invariant 9 holds it to one worker at a time).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        live: bool,
    },
    /// A run ended at a worker: with a result's `status`, or (no status) given back to the
    /// admin to be placed again after a retryable failure.
    TaskFinished {
        /// The worker.
        node: String,
        /// The task.
        task: String,
        /// The run.
        attempt: u32,
        /// `succeeded`, `failed`, `out_of_memory`, `timed_out`, `cancelled` or `error` (a
        /// worker's run never ends `unschedulable`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<chorus_core::TaskStatus>,
        /// The sandbox's error, if there was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The submitter has a task's result (the first one; copies are acknowledged silently).
    TaskResult {
        /// The submitter.
        node: String,
        /// The task.
        task: String,
        /// How it ended.
        status: chorus_core::TaskStatus,
    },
    /// A node's role changed (extension: drives the timeline picture).
    Role {
        /// Node id.
        node: String,
        /// follower, pre_candidate, candidate or admin.
        role: String,
        /// Term.
        term: u64,
    },
    /// The simulator crashed a node.
    Crash {
        /// Node id.
        node: String,
    },
    /// The simulator (re)started a node.
    Restart {
        /// Node id.
        node: String,
    },
    /// The simulator split the network into groups that cannot talk to each other.
    Partition {
        /// Node ids per group.
        groups: Vec<Vec<String>>,
    },
    /// The simulator cut one direction of some links (extension).
    Cut {
        /// Senders.
        from: Vec<String>,
        /// Receivers.
        to: Vec<String>,
    },
    /// The simulator restored every link.
    Heal,
    /// The simulator changed loss, duplication or reordering (extension).
    Network {
        /// Loss, ppm.
        loss_ppm: u32,
        /// Duplication, ppm.
        duplicate_ppm: u32,
        /// Reordering, ppm.
        reorder_ppm: u32,
    },
    /// Full detail of one core step (optional).
    Step {
        /// Node id.
        node: String,
        /// The input event.
        event: serde_json::Value,
        /// The output commands.
        commands: serde_json::Value,
    },
}

impl Header {
    /// The header for a run.
    pub fn new(scenario: &Scenario, seed: u64, engine: &str, steps: bool) -> Header {
        Header {
            kind: "header".into(),
            seed,
            scenario: scenario.name.clone(),
            engine: engine.into(),
            nodes: scenario.nodes,
            version: TRACE_VERSION,
            voters: scenario.voter_count(),
            duration_ms: scenario.duration_ms,
            steps,
            liveness_bound_ms: scenario.liveness_bound(),
            task_bound_ms: scenario.task_bound(),
            unschedulable_bound_ms: scenario.unschedulable_bound(),
            spec: scenario.clone(),
            eligible: None,
            pruned: None,
        }
    }
}

/// Writes a trace to any byte sink (a file, or memory for tests and `replay`).
pub struct TraceWriter<W: Write> {
    out: W,
    last_t: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace with its header.
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        serde_json::to_writer(&mut out, header)?;
        out.write_all(b"\n")?;
        Ok(TraceWriter { out, last_t: 0 })
    }

    /// Appends one record. Records must come in time order.
    pub fn write(&mut self, line: &Line) -> io::Result<()> {
        debug_assert!(line.t >= self.last_t, "trace out of time order");
        self.last_t = line.t;
        serde_json::to_writer(&mut self.out, line)?;
        self.out.write_all(b"\n")
    }

    /// Flushes and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads a trace: the header and the lines, failing with the line number on bad input.
pub fn read(text: &str) -> anyhow::Result<(Header, Vec<Line>)> {
    let mut lines = text.lines().enumerate();
    let (_, first) = lines.next().ok_or_else(|| anyhow::anyhow!("empty trace"))?;
    let header: Header =
        serde_json::from_str(first).map_err(|e| anyhow::anyhow!("line 1 (header): {e}"))?;
    let mut out = Vec::new();
    for (i, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(l).map_err(|e| anyhow::anyhow!("line {}: {e}", i + 1))?);
    }
    Ok((header, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_documented_shape() {
        let line = Line {
            t: 1500,
            record: Record::BecameAdmin {
                node: "n3".into(),
                term: 2,
                lease_until: 31_440,
            },
        };
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"t":1500,"kind":"became_admin","node":"n3","term":2,"lease_until":31440}"#
        );
        let vote = Line {
            t: 7,
            record: Record::Voted {
                node: "n1".into(),
                term: 2,
                candidate: "n3".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&vote).unwrap(),
            r#"{"t":7,"kind":"voted","node":"n1","term":2,"for":"n3"}"#
        );
        let granted = Line {
            t: 7,
            record: Record::VoteGranted {
                node: "n3".into(),
                term: 7,
                to: "n1".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&granted).unwrap(),
            r#"{"t":7,"kind":"vote_granted","node":"n3","term":7,"to":"n1"}"#
        );
        let electorate = Line {
            t: 8,
            record: Record::ElectorateChanged {
                node: "n0".into(),
                version: 2,
                term: 3,
                members: ["n0".into(), "n1".into(), "n2".into(), "n5".into()].into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&electorate).unwrap(),
            r#"{"t":8,"kind":"electorate_changed","node":"n0","version":2,"term":3,"members":["n0","n1","n2","n5"]}"#
        );
        let accepted = Line {
            t: 8,
            record: Record::BootstrapAccepted {
                node: "n1".into(),
                ballot: chorus_core::Ballot {
                    round: 2,
                    node: "n0".into(),
                },
                members: ["n0".into(), "n1".into(), "n2".into()].into(),
            },
        };
        let text = serde_json::to_string(&accepted).unwrap();
        assert_eq!(
            text,
            r#"{"t":8,"kind":"bootstrap_accepted","node":"n1","ballot":{"round":2,"node":"n0"},"members":["n0","n1","n2"]}"#
        );
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), accepted);
        let change = Line {
            t: 8,
            record: Record::MembershipChange {
                node: "n1".into(),
                change: chorus_core::MemberChange::Remove { node: "n4".into() },
                outcome: chorus_core::ChangeOutcome::Forwarded { admin: "n0".into() },
                request: Some(2),
            },
        };
        let text = serde_json::to_string(&change).unwrap();
        assert_eq!(
            text,
            r#"{"t":8,"kind":"membership_change","node":"n1","change":{"op":"remove","node":"n4"},"outcome":{"outcome":"forwarded","admin":"n0"},"request":2}"#
        );
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), change);
        let heal = Line {
            t: 9,
            record: Record::Heal,
        };
        assert_eq!(
            serde_json::to_string(&heal).unwrap(),
            r#"{"t":9,"kind":"heal"}"#
        );
    }

    #[test]
    fn header_comes_first_and_reads_back() {
        let s = crate::scenario::builtin("steady").unwrap();
        let h = Header::new(&s, 42, "des", false);
        let mut w = TraceWriter::new(Vec::new(), &h).unwrap();
        w.write(&Line {
            t: 0,
            record: Record::Restart { node: "n0".into() },
        })
        .unwrap();
        let bytes = w.finish().unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with(r#"{"kind":"header","seed":42,"scenario":"steady","engine":"des","nodes":5,"version":1,"#));
        let (h2, lines) = read(&text).unwrap();
        assert_eq!(h2, h);
        assert_eq!(lines.len(), 1);
    }
}
