//! Where an engine's records go: the trace file (optional), the invariant checker, run statistics
//! and a running digest of the trace bytes (for determinism checks).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;

use chorus_core::{Command, Message, NodeId, Notice};

use crate::checker::{Checker, Violation};
use crate::trace::{Header, Line, Record, TraceWriter};

/// How many recent lines are kept to show around a violation.
const CONTEXT_LINES: usize = 12;

/// Statistics of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Number of `became_admin` records.
    pub elections: u64,
    /// Highest term seen.
    pub max_term: u64,
    /// Intervals during which no node held a valid lease, ms (the first is the cold start).
    pub outages_ms: Vec<u64>,
    /// Pre-vote and vote messages sent.
    pub election_messages: u64,
    /// All messages sent.
    pub messages: u64,
    /// Elections won by the best-scored live voter.
    pub best_won: u64,
    /// Messages honest nodes refused (hostile input, or stale replies), by reason.
    pub refused: std::collections::BTreeMap<&'static str, u64>,
    /// Lines written after the header.
    pub lines: u64,
    /// Simulated time covered.
    pub end_ms: u64,
    /// Tasks accepted (`task_submitted` of a new task).
    pub tasks_accepted: u64,
    /// Results in at submitters (`task_result`), by status.
    pub task_results: std::collections::BTreeMap<chorus_core::TaskStatus, u64>,
    /// Submit → result latency of every task with a result, ms, in result order.
    pub task_latencies_ms: Vec<u64>,
    /// Lease end per node that ever held one (capped at its crash or step-down).
    leases: std::collections::BTreeMap<String, u64>,
    /// Accepted tasks: task → (submitter, request, accepted at, result in).
    tasks: std::collections::BTreeMap<String, (String, Option<u64>, u64, bool)>,
    /// (submitter, request) → task, for the workload's cancels.
    task_by_request: std::collections::BTreeMap<(String, u64), String>,
    /// Membership changes reported committed: (node asked, request), for the operator's
    /// scripts that act on a commit (`stop_after_commit`).
    changes_committed: std::collections::BTreeSet<(String, u64)>,
}

impl Stats {
    /// Results in at submitters.
    pub fn task_result_count(&self) -> u64 {
        self.task_results.values().sum()
    }

    /// Results per simulated second.
    pub fn task_throughput(&self) -> f64 {
        self.task_result_count() as f64 / (self.end_ms.max(1) as f64 / 1_000.0)
    }

    /// Percentile (0–100) of submit → result latencies, nearest-rank.
    pub fn task_latency_percentile(&self, p: u64) -> Option<u64> {
        percentile(&self.task_latencies_ms, p)
    }

    /// Tasks accepted whose result is not in.
    pub fn tasks_unfinished(&self) -> u64 {
        self.tasks.values().filter(|t| !t.3).count() as u64
    }

    /// The task a node accepted for a request, and whether its result is in.
    pub fn task_of_request(&self, node: &str, request: u64) -> Option<(&str, bool)> {
        let task = self.task_by_request.get(&(node.to_owned(), request))?;
        let done = self.tasks.get(task).is_some_and(|t| t.3);
        Some((task, done))
    }

    /// Whether `node` reported the membership change it was asked for with `request`
    /// committed.
    pub fn change_committed(&self, node: &str, request: u64) -> bool {
        self.changes_committed.contains(&(node.to_owned(), request))
    }

    /// Percentile (0–100) of outage lengths, nearest-rank.
    pub fn outage_percentile(&self, p: u64) -> Option<u64> {
        percentile(&self.outages_ms, p)
    }
}

/// Percentile (0–100) of `values`, nearest-rank.
pub fn percentile(values: &[u64], p: u64) -> Option<u64> {
    let mut v = values.to_vec();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = ((p * v.len() as u64).div_ceil(100)).max(1) as usize;
    Some(v[rank.min(v.len()) - 1])
}

/// A predicate that ends a run early (see [`Sink::stop_when`]).
pub type StopFn = Box<dyn FnMut(&Line) -> bool>;

/// A member list as ids and as the trace's names.
type NamedMembers = (Arc<[NodeId]>, Arc<[String]>);

/// Collects an engine's output.
pub struct Sink {
    now: u64,
    line_no: usize,
    writer: Option<TraceWriter<Box<dyn Write>>>,
    checker: Checker,
    /// Statistics so far.
    pub stats: Stats,
    /// The last lines, by number, as serialized (newline included); formatted only when a
    /// violation needs them, and the oldest line's buffer is reused for the next.
    recent: VecDeque<(usize, Vec<u8>)>,
    context: Option<Vec<String>>,
    digest: u64,
    steps: bool,
    stop: Option<StopFn>,
    stopped: bool,
    /// The last electorate reported, as ids and as the trace's names: a cold start of n voters
    /// reports one list n times (each node its own copy of equal ids), named once here.
    members: Option<NamedMembers>,
    /// The process ends with the run (see [`Sink::exit_after_run`]).
    exit_after_run: bool,
}

impl Sink {
    /// A sink for a run with `header`, writing the trace to `out` if given.
    pub fn new(header: &Header, out: Option<Box<dyn Write>>) -> std::io::Result<Sink> {
        let mut header_bytes = serde_json::to_vec(header)?;
        header_bytes.push(b'\n');
        let mut sink = Sink {
            now: 0,
            line_no: 1,
            writer: out.map(|o| TraceWriter::new(o, header)).transpose()?,
            checker: Checker::new(header),
            stats: Stats::default(),
            recent: VecDeque::new(),
            context: None,
            digest: 0xcbf2_9ce4_8422_2325,
            steps: header.steps,
            stop: None,
            stopped: false,
            members: None,
            exit_after_run: false,
        };
        sink.hash(&header_bytes);
        Ok(sink)
    }

    /// Ends the run early once `f` returns true for a line (experiments that need only the
    /// first few seconds of a long scenario). Engines poll [`Sink::stopped`].
    pub fn stop_when(&mut self, f: StopFn) {
        self.stop = Some(f);
    }

    /// Says the process ends when this run does: the engine then leaves its state for the
    /// operating system to reclaim at exit rather than freeing it piece by piece (a process's
    /// pages go back at once; freeing 100,000 nodes one allocation at a time was 8 % of a
    /// 100,000-node run). For the command line only: a library caller keeps its memory.
    pub fn exit_after_run(&mut self) {
        self.exit_after_run = true;
    }

    /// Whether the process ends with the run ([`Sink::exit_after_run`]).
    pub fn exits_after_run(&self) -> bool {
        self.exit_after_run
    }

    /// Whether the stop condition was met.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Whether full `step` records are wanted.
    pub fn wants_steps(&self) -> bool {
        self.steps
    }

    /// Sets the global simulated time of the records that follow.
    pub fn at(&mut self, t: u64) {
        debug_assert!(t >= self.now, "sink time went backwards");
        self.now = t;
    }

    /// The current global time.
    pub fn now(&self) -> u64 {
        self.now
    }

    fn hash(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.digest ^= u64::from(*b);
            self.digest = self.digest.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Writes one record at the current time.
    pub fn record(&mut self, record: Record) {
        let line = Line {
            t: self.now,
            record,
        };
        self.line_no += 1;
        self.stats.lines += 1;
        self.track(&line);
        let before = self.checker.violations().len();
        self.checker.observe(self.line_no, &line);
        if let Some(stop) = &mut self.stop {
            self.stopped |= stop(&line);
        }
        let mut bytes = match self.recent.len() {
            CONTEXT_LINES => self.recent.pop_front().map(|(_, b)| b).unwrap_or_default(),
            _ => Vec::new(),
        };
        bytes.clear();
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_writer(&mut bytes, &line).expect("trace line serializes");
        bytes.push(b'\n');
        self.hash(&bytes);
        if let Some(w) = &mut self.writer {
            if let Err(e) = w.write(&line) {
                // A full disk must not pass for a clean run.
                panic!("cannot write the trace: {e}");
            }
        }
        self.recent.push_back((self.line_no, bytes));
        if self.context.is_none() && self.checker.violations().len() > before {
            self.context = Some(self.recent_lines());
        }
    }

    /// `members` as the trace names them, shared with the last report of an equal list.
    fn member_names(&mut self, members: &Arc<[NodeId]>) -> Arc<[String]> {
        match &self.members {
            Some((ids, names)) if Arc::ptr_eq(ids, members) || **ids == **members => names.clone(),
            _ => {
                let names: Arc<[String]> = members.iter().map(|m| m.to_string()).collect();
                self.members = Some((members.clone(), names.clone()));
                names
            }
        }
    }

    /// The recent lines, numbered, for a violation's report.
    fn recent_lines(&self) -> Vec<String> {
        self.recent
            .iter()
            .map(|(n, bytes)| {
                let text = String::from_utf8_lossy(bytes.strip_suffix(b"\n").unwrap_or(bytes));
                format!("{n:>8}: {text}")
            })
            .collect()
    }

    fn track(&mut self, line: &Line) {
        let s = &mut self.stats;
        let t = line.t;
        match &line.record {
            Record::BecameAdmin {
                node,
                term,
                lease_until,
            }
            | Record::LeaseRenewed {
                node,
                term,
                lease_until,
            } => {
                if matches!(line.record, Record::BecameAdmin { .. }) {
                    s.elections += 1;
                }
                s.max_term = s.max_term.max(*term);
                // An outage ends when some node holds a valid lease again.
                let covered_until = s.leases.values().copied().max().unwrap_or(0);
                if covered_until <= t && *lease_until > t {
                    s.outages_ms.push(t - covered_until);
                }
                s.leases.insert(node.clone(), *lease_until);
            }
            Record::SteppedDown { node, .. } | Record::Crash { node } => {
                // The node's lease is void from now on.
                if let Some(until) = s.leases.get_mut(node) {
                    *until = (*until).min(t);
                }
            }
            Record::Voted { term, .. } | Record::Role { term, .. } => {
                s.max_term = s.max_term.max(*term)
            }
            Record::TaskSubmitted {
                node,
                task,
                request,
                existing: false,
            } => {
                s.tasks_accepted += 1;
                s.tasks
                    .insert(task.clone(), (node.clone(), *request, t, false));
                if let Some(r) = request {
                    s.task_by_request.insert((node.clone(), *r), task.clone());
                }
            }
            Record::MembershipChange {
                node,
                outcome: chorus_core::ChangeOutcome::Committed { .. },
                request: Some(r),
                ..
            } => {
                s.changes_committed.insert((node.clone(), *r));
            }
            Record::TaskResult { task, status, .. } => {
                *s.task_results.entry(*status).or_default() += 1;
                if let Some(entry) = s.tasks.get_mut(task) {
                    if !entry.3 {
                        entry.3 = true;
                        s.task_latencies_ms.push(t - entry.2);
                    }
                }
            }
            _ => {}
        }
    }

    /// Counts a message sent (for messages-per-election).
    pub fn count_message(&mut self, election: bool) {
        self.stats.messages += 1;
        if election {
            self.stats.election_messages += 1;
        }
    }

    /// Notes whether the latest election was won by the best-scored live voter.
    pub fn election_winner(&mut self, best: bool) {
        if best {
            self.stats.best_won += 1;
        }
    }

    /// Whether `command` becomes a trace record: notices, role changes, and granted vote
    /// replies (the checker judges vote safety from what was sent). Engines pass these on.
    pub fn traced(command: &Command) -> bool {
        matches!(
            command,
            Command::Notice(_)
                | Command::RoleChanged { .. }
                | Command::Send {
                    msg: Message::VoteReply { granted: true, .. },
                    ..
                }
        )
    }

    /// Turns a core command into trace records. `global` converts the node's local times.
    pub fn core_output(&mut self, node: &str, command: &Command, global: impl Fn(u64) -> u64) {
        if let Command::Notice(Notice::Refused { reason, .. }) = command {
            *self.stats.refused.entry(reason.as_str()).or_default() += 1;
            return;
        }
        // The name is copied only for the commands that make a line (a few in a thousand).
        let record = match command {
            Command::Notice(Notice::BecameAdmin {
                term,
                lease_until_ms,
            }) => Record::BecameAdmin {
                node: node.to_owned(),
                term: *term,
                lease_until: global(*lease_until_ms),
            },
            Command::Notice(Notice::LeaseRenewed {
                term,
                lease_until_ms,
            }) => Record::LeaseRenewed {
                node: node.to_owned(),
                term: *term,
                lease_until: global(*lease_until_ms),
            },
            Command::Notice(Notice::SteppedDown { term, reason }) => Record::SteppedDown {
                node: node.to_owned(),
                term: *term,
                reason: reason.as_str().to_owned(),
            },
            Command::Notice(Notice::Voted { term, candidate }) => Record::Voted {
                node: node.to_owned(),
                term: *term,
                candidate: candidate.to_string(),
            },
            Command::Send {
                to,
                msg:
                    Message::VoteReply {
                        term,
                        granted: true,
                        ..
                    },
            } => Record::VoteGranted {
                node: node.to_owned(),
                term: *term,
                to: to.to_string(),
            },
            Command::Notice(Notice::AdminKnown { admin, term }) => Record::AdminKnown {
                node: node.to_owned(),
                admin: admin.to_string(),
                term: *term,
            },
            Command::Notice(Notice::BootstrapAccepted { ballot, members }) => {
                Record::BootstrapAccepted {
                    node: node.to_owned(),
                    ballot: ballot.clone(),
                    members: self.member_names(members),
                }
            }
            Command::Notice(Notice::ElectorateChanged {
                version,
                term,
                members,
            }) => Record::ElectorateChanged {
                node: node.to_owned(),
                version: *version,
                term: *term,
                members: self.member_names(members),
            },
            Command::Notice(Notice::MembershipChange {
                change,
                outcome,
                request,
            }) => Record::MembershipChange {
                node: node.to_owned(),
                change: change.clone(),
                outcome: outcome.clone(),
                request: (*request != 0).then_some(*request),
            },
            Command::Notice(Notice::TaskSubmitted {
                task,
                request,
                existing,
            }) => Record::TaskSubmitted {
                node: node.to_owned(),
                task: task.to_string(),
                request: (*request != 0).then_some(*request),
                existing: *existing,
            },
            Command::Notice(Notice::TaskRefused { request, reason }) => Record::TaskRefused {
                node: node.to_owned(),
                request: (*request != 0).then_some(*request),
                reason: reason.clone(),
            },
            Command::Notice(Notice::TaskCancelRequested { task, request }) => {
                Record::TaskCancelRequested {
                    node: node.to_owned(),
                    task: task.to_string(),
                    request: (*request != 0).then_some(*request),
                }
            }
            Command::Notice(Notice::TaskPlaced {
                task,
                worker,
                attempt,
            }) => Record::TaskPlaced {
                node: node.to_owned(),
                task: task.to_string(),
                worker: worker.to_string(),
                attempt: *attempt,
            },
            Command::Notice(Notice::TaskUnplaceable { task, reason }) => Record::TaskUnplaceable {
                node: node.to_owned(),
                task: task.to_string(),
                reason: reason.clone(),
            },
            Command::Notice(Notice::TaskStarted {
                task,
                attempt,
                live,
            }) => Record::TaskStarted {
                node: node.to_owned(),
                task: task.to_string(),
                attempt: *attempt,
                live: *live,
            },
            Command::Notice(Notice::TaskFinished {
                task,
                attempt,
                status,
                error,
            }) => Record::TaskFinished {
                node: node.to_owned(),
                task: task.to_string(),
                attempt: *attempt,
                status: *status,
                error: error.clone(),
            },
            Command::Notice(Notice::TaskCompleted { task, status }) => Record::TaskResult {
                node: node.to_owned(),
                task: task.to_string(),
                status: *status,
            },
            Command::RoleChanged { role, term, .. } => Record::Role {
                node: node.to_owned(),
                role: role.as_str().to_owned(),
                term: *term,
            },
            _ => return,
        };
        self.record(record);
    }

    /// At the end of a run: the tasks live node `node` still owns unfinished (engines that can
    /// see their cores report them; invariant 7).
    pub fn owned_at_end(&mut self, node: &str, unfinished: &std::collections::BTreeSet<String>) {
        let before = self.checker.violations().len();
        self.checker
            .owned_at_end(node, unfinished, self.now, self.line_no);
        if self.context.is_none() && self.checker.violations().len() > before {
            self.context = Some(self.recent_lines());
        }
    }

    /// Ends the run at `end_ms`: final checks, flush. Returns the outcome.
    pub fn finish(mut self, end_ms: u64) -> std::io::Result<Finished> {
        self.stats.end_ms = end_ms;
        self.checker.finish(end_ms, self.line_no);
        if self.context.is_none() && !self.checker.violations().is_empty() {
            self.context = Some(self.recent_lines());
        }
        if let Some(w) = self.writer.take() {
            w.finish()?;
        }
        let finished = Finished {
            violations: self.checker.violations().to_vec(),
            context: self.context.take().unwrap_or_default(),
            stats: std::mem::take(&mut self.stats),
            digest: self.digest,
        };
        if self.exit_after_run {
            // The checker's per-node sets go with the process (see `exit_after_run`).
            std::mem::forget(self);
        }
        Ok(finished)
    }
}

/// The result of a finished run.
#[derive(Clone, Debug)]
pub struct Finished {
    /// Invariant violations, in detection order.
    pub violations: Vec<Violation>,
    /// Trace lines leading up to the first violation.
    pub context: Vec<String>,
    /// Run statistics.
    pub stats: Stats,
    /// FNV-1a digest of the exact trace bytes.
    pub digest: u64,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chorus_core::{Command, NodeId, Notice};

    use super::*;

    fn ids(names: &[&str]) -> Arc<[NodeId]> {
        names.iter().map(|n| NodeId::from(*n)).collect()
    }

    fn electorate_changed(members: Arc<[NodeId]>) -> Command {
        Command::Notice(Notice::ElectorateChanged {
            version: 1,
            term: 0,
            members,
        })
    }

    /// Nodes that report equal member lists (each its own copy of the ids, as nodes that
    /// bootstrapped apart hold) get one list of names in the trace; a different list is named
    /// afresh; the trace reads the same either way.
    #[test]
    fn equal_member_lists_are_named_once() {
        let s = crate::scenario::builtin("steady").unwrap();
        let header = Header::new(&s, 1, "des", false);
        let mut sink = Sink::new(&header, None).unwrap();
        let abc = sink.member_names(&ids(&["a", "b", "c"]));
        assert_eq!(*abc, ["a", "b", "c"].map(String::from));
        let again = sink.member_names(&ids(&["a", "b", "c"]));
        assert!(Arc::ptr_eq(&abc, &again));
        let abd = sink.member_names(&ids(&["a", "b", "d"]));
        assert_eq!(*abd, ["a", "b", "d"].map(String::from));
        let back = sink.member_names(&ids(&["a", "b", "c"]));
        assert!(!Arc::ptr_eq(&abc, &back) && back == abc);

        // Through the trace: two nodes, equal lists apart, one digest with a fresh sink each.
        let digest = |shared: bool| {
            let mut sink = Sink::new(&header, None).unwrap();
            let first = ids(&["n0", "n1", "n2"]);
            let second = if shared {
                first.clone()
            } else {
                ids(&["n0", "n1", "n2"])
            };
            sink.core_output("n0", &electorate_changed(first), |t| t);
            sink.core_output("n1", &electorate_changed(second), |t| t);
            sink.finish(0).unwrap()
        };
        let (shared, apart) = (digest(true), digest(false));
        assert_eq!((shared.digest, shared.stats.lines), (apart.digest, 2));
    }
}
