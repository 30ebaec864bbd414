//! The docs/design.md §6 trace as `chorus replay` writes it: the header (the simulator's fields, so
//! `chorus-sim check` reads it, plus what a replay knows: the node, or for a merge who may be
//! admin, the host clock and the sources) and one record per decision. Shared by the one-node
//! replay and the merge.

use chorus_io::eventlog::ClockAnchor;
use serde::Serialize;

/// A trace's header: the simulator's fields (`sim/src/trace.rs`; `chorus-sim check` reads it),
/// plus, for one node, its id, and for a merge, who may be admin, the clock and the sources.
#[derive(Serialize)]
pub(crate) struct Header<'a> {
    pub kind: &'static str,
    pub seed: u64,
    pub scenario: String,
    pub engine: &'static str,
    pub nodes: usize,
    pub version: u32,
    pub voters: usize,
    pub duration_ms: u64,
    pub steps: bool,
    /// The simulator's default bound for these settings.
    pub liveness_bound_ms: u64,
    /// Invariant 7's bound on a task's result (see `replay::task_bound`), when tasks were
    /// submitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_bound_ms: Option<u64>,
    /// The bound on the result of a task an admin found no live worker for, from its
    /// `task_unplaceable` record, when tasks were submitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unschedulable_bound_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eligible: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<Clock<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dirs: Option<Vec<String>>,
    /// Nodes whose retained log starts at a snapshot (older events pruned), with the trace
    /// time of their first retained event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pruned: Option<std::collections::BTreeMap<String, u64>>,
}

/// The header's `clock`: which host clock, and the host time `t = 0` stands for.
#[derive(Serialize)]
pub(crate) struct Clock<'a> {
    pub source: ClockSource,
    pub origin_ms: u64,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub boot_id: &'a str,
}

/// Which host clock the merged trace's times come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockSource {
    /// `CLOCK_MONOTONIC` of one boot of one host.
    Monotonic,
    /// The hosts' wall clocks (Unix time).
    Unix,
}

impl ClockSource {
    pub(crate) fn read(self, a: &ClockAnchor) -> u64 {
        match self {
            ClockSource::Monotonic => a.monotonic_ms,
            ClockSource::Unix => a.unix_ms,
        }
    }

    pub(crate) fn journal_key(self) -> &'static str {
        match self {
            ClockSource::Monotonic => "at_monotonic_ms",
            ClockSource::Unix => "at_unix_ms",
        }
    }
}

#[derive(Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Record {
    BecameAdmin {
        node: String,
        term: u64,
        lease_until: u64,
    },
    LeaseRenewed {
        node: String,
        term: u64,
        lease_until: u64,
    },
    LeaseExpired {
        node: String,
        term: u64,
    },
    SteppedDown {
        node: String,
        term: u64,
        reason: &'static str,
    },
    Voted {
        node: String,
        term: u64,
        #[serde(rename = "for")]
        candidate: String,
    },
    VoteGranted {
        node: String,
        term: u64,
        to: String,
    },
    AdminKnown {
        node: String,
        admin: String,
        term: u64,
    },
    /// `Notice::BootstrapAccepted`: an acceptance of a genesis electorate (the checker's
    /// invariant 8).
    BootstrapAccepted {
        node: String,
        ballot: chorus_core::Ballot,
        members: Vec<chorus_core::NodeId>,
    },
    ElectorateChanged {
        node: String,
        version: u64,
        term: u64,
        members: Vec<chorus_core::NodeId>,
    },
    MembershipChange {
        node: String,
        change: chorus_core::MemberChange,
        outcome: chorus_core::ChangeOutcome,
        #[serde(skip_serializing_if = "is_zero")]
        request: u64,
    },
    Role {
        node: String,
        role: &'static str,
        term: u64,
    },
    Restart {
        node: String,
    },
    /// Inferred by a merge: the run ended here (see `merge.rs`).
    Crash {
        node: String,
    },
    TaskSubmitted {
        node: String,
        task: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        existing: bool,
    },
    TaskRefused {
        node: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        reason: String,
    },
    TaskCancelRequested {
        node: String,
        task: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
    },
    TaskPlaced {
        node: String,
        task: String,
        worker: String,
        attempt: u32,
    },
    /// The admin found no live worker for a task (`Notice::TaskUnplaceable`).
    TaskUnplaceable {
        node: String,
        task: String,
        reason: String,
    },
    TaskStarted {
        node: String,
        task: String,
        attempt: u32,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        live: bool,
    },
    TaskFinished {
        node: String,
        task: String,
        attempt: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<chorus_core::TaskStatus>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The submitter has the task's result (`Notice::TaskCompleted`).
    TaskResult {
        node: String,
        task: String,
        status: chorus_core::TaskStatus,
    },
}

impl Record {
    /// The lease end it carries (node time until a merge maps it).
    pub(crate) fn lease_until_mut(&mut self) -> Option<&mut u64> {
        match self {
            Record::BecameAdmin { lease_until, .. } | Record::LeaseRenewed { lease_until, .. } => {
                Some(lease_until)
            }
            _ => None,
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Line<'a> {
    pub t: u64,
    #[serde(flatten)]
    pub record: &'a Record,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
