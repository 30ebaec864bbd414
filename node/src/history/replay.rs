//! `chorus replay`: re-runs a data directory's event log through a fresh core (or the oldest
//! retained snapshot), prints the decisions with their times, checks them against the notices
//! the node recorded as it ran, checks vote safety from the vote replies the node sent, and can
//! write a docs/design.md §6 trace.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use chorus_core::{ChangeOutcome, Command, Core, Event, MemberChange, Message, Notice, VoteLedger};
use chorus_io::eventlog::{RecordedNotice, SledLog};

use super::trace::{Header, Line, Record};
use super::LOG_DIR;

/// One decision the replay made.
#[derive(Clone, Debug, PartialEq)]
enum Decision {
    Role { role: chorus_core::Role, term: u64 },
    Notice(Notice),
}

/// The outcome of a replay, for the caller to report.
pub struct ReplayReport {
    pub matched: usize,
    pub mismatches: Vec<String>,
    pub unrecorded_tail: usize,
    /// Terms in which the node gave its vote to two candidates (docs/design.md §5.3).
    pub vote_violations: Vec<String>,
}

impl ReplayReport {
    /// Whether the replay matched the record and the node kept one vote per term.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty() && self.vote_violations.is_empty()
    }
}

/// The simulator's default liveness bound for one node's settings (`sim` scenario.rs).
pub(crate) fn liveness_bound(c: &chorus_core::Config) -> u64 {
    c.discovery_timeout_ms + 3 * c.election_timeout_max_ms + 2 * c.heartbeat_interval_ms
}

/// Invariant 7's bound for these nodes' histories, as the simulator computes it for its own
/// runs ([`chorus_core::task::result_bound_ms`]: every attempt of the longest task submitted
/// runs to its timeout), or `None` when no task was submitted. Tasks submitted before a
/// node's snapshot are not seen; `chorus replay --task-bound-ms` overrides the figure.
pub(crate) fn task_bound(histories: &[&NodeHistory]) -> Option<u64> {
    let longest = histories.iter().filter_map(|h| h.longest_task_ms).max()?;
    let heartbeat = histories
        .iter()
        .map(|h| h.config.heartbeat_interval_ms)
        .max()
        .unwrap_or(0);
    let liveness = histories
        .iter()
        .map(|h| liveness_bound(&h.config))
        .max()
        .unwrap_or(0);
    Some(chorus_core::task::result_bound_ms(
        heartbeat, liveness, longest,
    ))
}

/// The bound on the result of a task an admin found no live worker for, from its
/// `task_unplaceable` record ([`chorus_core::task::unschedulable_bound_ms`] at the slowest
/// node's heartbeat), or `None` when no task was submitted.
pub(crate) fn unschedulable_bound(histories: &[&NodeHistory]) -> Option<u64> {
    histories.iter().filter_map(|h| h.longest_task_ms).max()?;
    let heartbeat = histories
        .iter()
        .map(|h| h.config.heartbeat_interval_ms)
        .max()
        .unwrap_or(0);
    Some(chorus_core::task::unschedulable_bound_ms(heartbeat))
}

/// Accepts either the node's data directory or its `log` subdirectory.
fn log_dir(data_dir: &Path) -> std::path::PathBuf {
    let nested = data_dir.join(LOG_DIR);
    if nested.exists() {
        nested
    } else {
        data_dir.to_path_buf()
    }
}

/// One trace line of one node, before it is written: `t` on the node's clock.
pub(crate) struct TraceLine {
    /// The event whose step produced it.
    pub seq: u64,
    /// Node time, ms.
    pub t: u64,
    /// What happened (`lease_until` on the node's clock).
    pub record: Record,
}

/// One run of the node: from a `Started` event (or the start of the retained history) to the
/// event before the next `Started`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lifetime {
    /// The sequence of its first event (its `Started`, except possibly the first lifetime).
    pub first_seq: u64,
    /// Its last event's sequence and node time.
    pub last_seq: u64,
    pub last_t: u64,
    /// Whether it ended with `Shutdown` (a clean stop).
    pub clean: bool,
}

/// Everything a replay of one data directory learned, for a merge.
pub(crate) struct NodeHistory {
    pub report: ReplayReport,
    pub meta: chorus_io::eventlog::LogMeta,
    pub anchors: Vec<(u64, chorus_io::eventlog::ClockAnchor)>,
    pub lifetimes: Vec<Lifetime>,
    /// The trace lines, in step order (when asked for).
    pub lines: Vec<TraceLine>,
    /// The core's configuration and eligibility at the end of the replay.
    pub config: chorus_core::Config,
    pub eligible: bool,
    /// The longest timeout of a task submitted here in the replayed events, if any was.
    pub longest_task_ms: Option<u64>,
    /// The replay started at a snapshot: events before it were pruned.
    pub pruned: bool,
}

/// Replays `data_dir`, printing to `out`; writes a trace to `trace` when given.
pub fn replay(
    data_dir: &Path,
    trace: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<ReplayReport> {
    let history = replay_node(data_dir, trace.is_some(), out)?;
    if let Some(p) = trace {
        let file = std::fs::File::create(p)
            .with_context(|| format!("cannot create trace file {}", p.display()))?;
        let mut w = std::io::BufWriter::new(file);
        let node = history.meta.node_id.to_string();
        let header = Header {
            kind: "header",
            seed: history.meta.cluster_seed,
            scenario: format!("replay of {}", log_dir(data_dir).display()),
            engine: "replay",
            nodes: 1,
            version: 1,
            voters: usize::from(
                history
                    .meta
                    .capabilities
                    .iter()
                    .any(|c| c == chorus_core::ADMIN_ELECTION),
            ),
            duration_ms: history.lifetimes.last().map_or(0, |l| l.last_t),
            steps: false,
            liveness_bound_ms: liveness_bound(&history.config),
            task_bound_ms: task_bound(&[&history]),
            unschedulable_bound_ms: unschedulable_bound(&[&history]),
            node: Some(&node),
            eligible: Some(history.eligible.then(|| node.clone()).into_iter().collect()),
            clock: None,
            data_dirs: None,
            pruned: history
                .pruned
                .then(|| [(node.clone(), history.lines.first().map_or(0, |l| l.t))].into()),
        };
        serde_json::to_writer(&mut w, &header)?;
        writeln!(w)?;
        for line in &history.lines {
            let line = Line {
                t: line.t,
                record: &line.record,
            };
            serde_json::to_writer(&mut w, &line)?;
            writeln!(w)?;
        }
        w.flush()?;
    }
    Ok(history.report)
}

/// Replays `data_dir`, printing to `out`; collects trace lines when `collect`.
pub(crate) fn replay_node(
    data_dir: &Path,
    collect: bool,
    out: &mut dyn Write,
) -> anyhow::Result<NodeHistory> {
    let path = log_dir(data_dir);
    let log = SledLog::open_existing(&path)?;
    let meta = log.meta().clone();
    let basis = log.replay_basis()?;
    let recorded = log.notices()?;
    let anchors = log.clock_anchors()?;
    let node = meta.node_id.to_string();

    let (mut core, from) = match &basis.snapshot {
        Some((seq, bytes)) => (
            Core::restore(bytes)
                .with_context(|| format!("{}: snapshot {seq} does not restore", path.display()))?,
            format!("snapshot at event {seq}"),
        ),
        None => (meta.fresh_core()?, "a fresh core (full history)".to_owned()),
    };
    if core.id() != &meta.node_id {
        bail!(
            "{}: the snapshot is node {}'s state, not {}'s",
            path.display(),
            core.id(),
            meta.node_id
        );
    }
    writeln!(out, "node      {node}")?;
    writeln!(out, "log       {}", path.display())?;
    writeln!(
        out,
        "replaying {} events from {from}; {} decisions recorded by the node",
        basis.events.len(),
        recorded.len()
    )?;

    let mut trace_out: Option<Vec<TraceLine>> = collect.then(Vec::new);
    let mut lifetimes: Vec<Lifetime> = Vec::new();
    // Recorded notices by event sequence, in step order.
    let mut by_seq: std::collections::BTreeMap<u64, Vec<&RecordedNotice>> = Default::default();
    for r in &recorded {
        by_seq.entry(r.seq).or_default().push(r);
    }
    // Each run's last event (a run ends before the next `Started`), and the last event of each
    // run with a recorded notice: a node killed between making an event durable and recording
    // its notices leaves that run's tail unrecorded, in any run, not only the last.
    let run_ends: Vec<u64> = basis
        .events
        .windows(2)
        .filter(|w| matches!(w[1].2, Event::Started))
        .map(|w| w[0].0)
        .chain(basis.events.last().map(|e| e.0))
        .collect();
    let run_end = |seq: u64| run_ends[run_ends.partition_point(|end| *end < seq)];
    let last_recorded_in_run: std::collections::BTreeMap<u64, u64> =
        recorded.iter().fold(Default::default(), |mut m, r| {
            let end = run_ends
                .get(run_ends.partition_point(|end| *end < r.seq))
                .copied()
                .unwrap_or(u64::MAX);
            let last = m.entry(end).or_insert(0);
            *last = (*last).max(r.seq);
            m
        });

    let mut report = ReplayReport {
        matched: 0,
        mismatches: Vec::new(),
        unrecorded_tail: 0,
        vote_violations: Vec::new(),
    };
    // Vote safety judged from the wire (`chorus_core::VoteLedger`), not from the notices.
    let mut ledger = VoteLedger::default();
    let voter = core.id().clone();
    let mut commands = Vec::new();
    let mut longest_task_ms = None;
    for (seq, now_ms, event) in basis.events {
        if now_ms < core.now_ms() {
            bail!(
                "{}: event {seq} goes back in time ({now_ms} ms after {} ms)",
                path.display(),
                core.now_ms()
            );
        }
        if let Event::SubmitTask { spec, .. } = &event {
            longest_task_ms = longest_task_ms.max(Some(spec.timeout_ms));
        }
        let restart = matches!(event, Event::Started);
        let clean = matches!(event, Event::Shutdown);
        match lifetimes.last_mut() {
            Some(l) if !restart => {
                l.last_seq = seq;
                l.last_t = now_ms;
                l.clean = clean;
            }
            _ => lifetimes.push(Lifetime {
                first_seq: seq,
                last_seq: seq,
                last_t: now_ms,
                clean,
            }),
        }
        // A granted vote as its candidate received it: vote safety judged from both ends of
        // the wire, so a voter that granted twice but logged (or kept) only one is still seen.
        if let Event::Message {
            from,
            msg:
                Message::VoteReply {
                    term,
                    granted: true,
                    ..
                },
        } = &event
        {
            write_line(
                &mut trace_out,
                seq,
                now_ms,
                Record::VoteGranted {
                    node: from.to_string(),
                    term: *term,
                    to: node.clone(),
                },
            )?;
        }
        commands.clear();
        core.step(now_ms, event, &mut commands);
        if restart {
            writeln!(out, "{:>10}  #{seq:<6} started", fmt_ms(now_ms))?;
            write_line(
                &mut trace_out,
                seq,
                now_ms,
                Record::Restart { node: node.clone() },
            )?;
        }
        let mut produced = Vec::new();
        for c in &commands {
            if let Err(v) = ledger.observe(&voter, c) {
                report
                    .vote_violations
                    .push(format!("event #{seq} at {}: {v}", fmt_ms(now_ms)));
            }
            match c {
                Command::Send {
                    to,
                    msg:
                        Message::VoteReply {
                            term,
                            granted: true,
                            ..
                        },
                } => {
                    writeln!(
                        out,
                        "{:>10}  #{seq:<6} granted its vote to {to} in term {term}",
                        fmt_ms(now_ms)
                    )?;
                    write_line(
                        &mut trace_out,
                        seq,
                        now_ms,
                        Record::VoteGranted {
                            node: node.clone(),
                            term: *term,
                            to: to.to_string(),
                        },
                    )?;
                }
                Command::RoleChanged { role, term, .. } => {
                    let d = Decision::Role {
                        role: *role,
                        term: *term,
                    };
                    print_decision(out, now_ms, seq, &d)?;
                    write_line(
                        &mut trace_out,
                        seq,
                        now_ms,
                        Record::Role {
                            node: node.clone(),
                            role: role.as_str(),
                            term: *term,
                        },
                    )?;
                }
                Command::Notice(n) => {
                    let d = Decision::Notice(n.clone());
                    if !matches!(n, Notice::LeaseRenewed { .. }) {
                        print_decision(out, now_ms, seq, &d)?;
                    }
                    // Refusals are not recorded by the node (a flood of hostile input must not
                    // fill the disk twice): replay shows them but has nothing to compare.
                    if let Some(record) = notice_record(&node, n) {
                        write_line(&mut trace_out, seq, now_ms, record)?;
                    }
                    if !matches!(n, Notice::Refused { .. }) {
                        produced.push(n.clone());
                    }
                }
                _ => {}
            }
        }
        let recorded_here: Vec<Notice> = by_seq
            .get(&seq)
            .map(|v| v.iter().map(|r| r.notice.clone()).collect())
            .unwrap_or_default();
        let last_recorded = last_recorded_in_run
            .get(&run_end(seq))
            .copied()
            .unwrap_or(0);
        if produced == recorded_here {
            report.matched += produced.len();
        } else if recorded_here.is_empty() && seq > last_recorded {
            // The node stopped (crashed) after the event was durable but before its notices
            // were recorded.
            report.unrecorded_tail += produced.len();
        } else if seq == last_recorded && produced.starts_with(&recorded_here) {
            // Killed while recording this step's notices (they are recorded in order, each on
            // its own): the first ones made it, the rest are the run's unrecorded tail.
            report.matched += recorded_here.len();
            report.unrecorded_tail += produced.len() - recorded_here.len();
        } else {
            report.mismatches.push(format!(
                "event #{seq} at {}: replay decided {}, the node recorded {}",
                fmt_ms(now_ms),
                notices_words(&produced),
                notices_words(&recorded_here)
            ));
        }
    }
    writeln!(
        out,
        "final     term {} role {} admin {} voted_for {} electorate version {} ({} members)",
        core.term(),
        core.role().as_str(),
        core.admin().map_or("-".to_owned(), |a| a.to_string()),
        core.voted_for().map_or("-".to_owned(), |a| a.to_string()),
        core.electorate().map_or(0, |e| e.version),
        core.electorate().map_or(0, |e| e.len()),
    )?;
    for v in &report.vote_violations {
        writeln!(out, "VOTE SAFETY  {v}")?;
    }
    if report.ok() {
        writeln!(
            out,
            "check     OK: {} decisions match what the node recorded{}",
            report.matched,
            if report.unrecorded_tail > 0 {
                format!(
                    " ({} more after the node's last record: it stopped before recording them)",
                    report.unrecorded_tail
                )
            } else {
                String::new()
            }
        )?;
    } else {
        for m in &report.mismatches {
            writeln!(out, "MISMATCH  {m}")?;
        }
    }
    Ok(NodeHistory {
        report,
        eligible: core
            .capabilities()
            .iter()
            .any(|c| c == chorus_core::ADMIN_ELECTION),
        config: core.config().clone(),
        meta,
        anchors,
        lifetimes,
        lines: trace_out.unwrap_or_default(),
        longest_task_ms,
        pruned: basis.snapshot.is_some(),
    })
}

fn write_line(
    lines: &mut Option<Vec<TraceLine>>,
    seq: u64,
    t: u64,
    record: Record,
) -> anyhow::Result<()> {
    if let Some(lines) = lines.as_mut() {
        lines.push(TraceLine { seq, t, record });
    }
    Ok(())
}

fn notice_record(node: &str, n: &Notice) -> Option<Record> {
    let node = node.to_owned();
    Some(match n {
        Notice::BecameAdmin {
            term,
            lease_until_ms,
        } => Record::BecameAdmin {
            node,
            term: *term,
            lease_until: *lease_until_ms,
        },
        Notice::LeaseRenewed {
            term,
            lease_until_ms,
        } => Record::LeaseRenewed {
            node,
            term: *term,
            lease_until: *lease_until_ms,
        },
        Notice::LeaseExpired { term } => Record::LeaseExpired { node, term: *term },
        Notice::SteppedDown { term, reason } => Record::SteppedDown {
            node,
            term: *term,
            reason: reason.as_str(),
        },
        Notice::Voted { term, candidate } => Record::Voted {
            node,
            term: *term,
            candidate: candidate.to_string(),
        },
        Notice::AdminKnown { admin, term } => Record::AdminKnown {
            node,
            admin: admin.to_string(),
            term: *term,
        },
        Notice::BootstrapAccepted { ballot, members } => Record::BootstrapAccepted {
            node,
            ballot: ballot.clone(),
            members: members.to_vec(),
        },
        Notice::ElectorateChanged {
            version,
            term,
            members,
        } => Record::ElectorateChanged {
            node,
            version: *version,
            term: *term,
            members: members.to_vec(),
        },
        Notice::MembershipChange {
            change,
            outcome,
            request,
        } => Record::MembershipChange {
            node,
            change: change.clone(),
            outcome: outcome.clone(),
            request: *request,
        },
        // The task kinds as the simulator writes them (`sim/src/sink.rs`), so invariant 7 is
        // judged on real clusters' logs too.
        Notice::TaskSubmitted {
            task,
            request,
            existing,
        } => Record::TaskSubmitted {
            node,
            task: task.to_string(),
            request: (*request != 0).then_some(*request),
            existing: *existing,
        },
        Notice::TaskRefused { request, reason } => Record::TaskRefused {
            node,
            request: (*request != 0).then_some(*request),
            reason: reason.clone(),
        },
        Notice::TaskCancelRequested { task, request } => Record::TaskCancelRequested {
            node,
            task: task.to_string(),
            request: (*request != 0).then_some(*request),
        },
        Notice::TaskPlaced {
            task,
            worker,
            attempt,
        } => Record::TaskPlaced {
            node,
            task: task.to_string(),
            worker: worker.to_string(),
            attempt: *attempt,
        },
        Notice::TaskUnplaceable { task, reason } => Record::TaskUnplaceable {
            node,
            task: task.to_string(),
            reason: reason.clone(),
        },
        Notice::TaskStarted {
            task,
            attempt,
            live,
        } => Record::TaskStarted {
            node,
            task: task.to_string(),
            attempt: *attempt,
            live: *live,
        },
        Notice::TaskFinished {
            task,
            attempt,
            status,
            error,
        } => Record::TaskFinished {
            node,
            task: task.to_string(),
            attempt: *attempt,
            status: *status,
            error: error.clone(),
        },
        Notice::TaskCompleted { task, status } => Record::TaskResult {
            node,
            task: task.to_string(),
            status: *status,
        },
        // The step-down that goes with a handover is in the trace; whom it went to is in the
        // log's words.
        Notice::Refused { .. } | Notice::HandingOver { .. } | Notice::HandoverRefused { .. } => {
            return None
        }
    })
}

fn print_decision(out: &mut dyn Write, now_ms: u64, seq: u64, d: &Decision) -> anyhow::Result<()> {
    let what = match d {
        Decision::Role { role, term } => format!("role -> {role} (term {term})"),
        Decision::Notice(n) => notice_words(n),
    };
    writeln!(out, "{:>10}  #{seq:<6} {what}", fmt_ms(now_ms))?;
    Ok(())
}

/// Notices as a list in words (`[became admin of term 2, …; voted for n1 in term 2]`).
fn notices_words(notices: &[Notice]) -> String {
    let words: Vec<String> = notices.iter().map(notice_words).collect();
    format!("[{}]", words.join("; "))
}

/// A membership change in words: `add n3`.
fn change_words(change: &MemberChange) -> String {
    match change {
        MemberChange::Add { node } => format!("add {node}"),
        MemberChange::Remove { node } => format!("remove {node}"),
    }
}

/// A membership change's outcome in words: `committed as version 3`.
fn outcome_words(outcome: &ChangeOutcome) -> String {
    match outcome {
        ChangeOutcome::Forwarded { admin } => format!("forwarded to the admin {admin}"),
        ChangeOutcome::Proposed { version } => format!("proposed as version {version}"),
        ChangeOutcome::Committed { version } => format!("committed as version {version}"),
        ChangeOutcome::Refused { reason } => format!("refused: {}", reason.explain()),
    }
}

/// A notice in words, as `chorus replay` prints it and the node's log says it.
pub fn notice_words(n: &Notice) -> String {
    match n {
        Notice::BecameAdmin {
            term,
            lease_until_ms,
        } => format!(
            "became admin of term {term}, lease until {}",
            fmt_ms(*lease_until_ms)
        ),
        Notice::LeaseExpired { term } => format!("lease of term {term} expired"),
        Notice::LeaseRenewed { term, .. } => format!("lease of term {term} renewed"),
        Notice::SteppedDown { term, reason } => {
            format!("stepped down from term {term} ({reason})")
        }
        Notice::Voted { term, candidate } => format!("voted for {candidate} in term {term}"),
        Notice::HandingOver {
            term,
            target: Some(target),
            ..
        } => format!("handing the office of term {term} over to {target}"),
        Notice::HandingOver {
            term, target: None, ..
        } => {
            format!("gave the office of term {term} up: no other voter is up to date")
        }
        Notice::HandoverRefused { reason, .. } => format!("refused a handover ({reason})"),
        Notice::AdminKnown { admin, term } => format!("admin of term {term} is {admin}"),
        Notice::Refused {
            from,
            message,
            reason,
        } => format!("refused {message} from {from} ({reason})"),
        Notice::BootstrapAccepted { ballot, members } => format!(
            "accepted bootstrap ballot {}/{}: {}",
            ballot.round,
            ballot.node,
            members
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Notice::ElectorateChanged {
            version,
            term,
            members,
        } => format!(
            "electorate version {version} (term {term}): {}",
            members
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Notice::MembershipChange {
            change, outcome, ..
        } => {
            format!(
                "membership change {}: {}",
                change_words(change),
                outcome_words(outcome)
            )
        }
        Notice::TaskSubmitted { task, existing, .. } => {
            let again = if *existing {
                " (idempotency key seen before)"
            } else {
                ""
            };
            format!("accepted task {task}{again}")
        }
        Notice::TaskRefused { reason, .. } => format!("refused a task request: {reason}"),
        Notice::TaskCancelRequested { task, .. } => format!("cancel of task {task} asked"),
        Notice::TaskPlaced {
            task,
            worker,
            attempt,
        } => format!("placed task {task} (attempt {attempt}) on {worker}"),
        Notice::TaskUnplaceable { task, reason } => {
            format!("no live worker can run task {task}: {reason}")
        }
        Notice::TaskStarted {
            task,
            attempt,
            live: false,
        } => format!("started task {task} (attempt {attempt})"),
        Notice::TaskStarted { task, attempt, .. } => {
            format!("made live sandbox {task} (attempt {attempt})")
        }
        Notice::TaskFinished {
            task,
            attempt,
            status,
            error,
        } => match status {
            Some(s) => format!("task {task} (attempt {attempt}) ended: {s}"),
            None => format!(
                "task {task} (attempt {attempt}) failed, to be retried: {}",
                error.as_deref().unwrap_or("")
            ),
        },
        Notice::TaskCompleted { task, status } => format!("result of task {task}: {status}"),
    }
}

/// Node-clock milliseconds as seconds with three decimals.
fn fmt_ms(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: replay and the node's log say a membership change in words, not in Rust's
    /// debug text (`Refused { reason: NotEligible }`).
    #[test]
    fn a_membership_change_is_said_in_words() {
        use chorus_core::{ChangeRefusal, NodeId};
        let n = |outcome| Notice::MembershipChange {
            change: MemberChange::Add {
                node: NodeId::from("n3"),
            },
            outcome,
            request: 7,
        };
        let refused = notice_words(&n(ChangeOutcome::Refused {
            reason: ChangeRefusal::NotEligible,
        }));
        assert_eq!(
            refused,
            format!(
                "membership change add n3: refused: {}",
                ChangeRefusal::NotEligible.explain()
            )
        );
        let committed = notice_words(&n(ChangeOutcome::Committed { version: 3 }));
        assert_eq!(
            committed,
            "membership change add n3: committed as version 3"
        );
        let both = notices_words(&[
            n(ChangeOutcome::Proposed { version: 3 }),
            Notice::LeaseExpired { term: 2 },
        ]);
        assert_eq!(
            both,
            "[membership change add n3: proposed as version 3; lease of term 2 expired]"
        );
        for text in [refused, committed, both] {
            assert!(!text.contains('{') && !text.contains("Some("), "{text}");
        }
    }

    /// The electorate, bootstrap and membership kinds have the shape the simulator writes
    /// (docs/design.md §6; `sim/src/trace.rs`).
    #[test]
    fn electorate_and_membership_notices_become_trace_lines() {
        use chorus_core::{ChangeOutcome, ChangeRefusal, MemberChange, NodeId};
        let line = |n: &Notice| {
            let record = notice_record("n0", n).expect("traced");
            serde_json::to_string(&Line {
                t: 5,
                record: &record,
            })
            .unwrap()
        };
        let members = [NodeId::from("n0"), NodeId::from("n1"), NodeId::from("n3")].into();
        assert_eq!(
            line(&Notice::ElectorateChanged {
                version: 3,
                term: 2,
                members
            }),
            r#"{"t":5,"kind":"electorate_changed","node":"n0","version":3,"term":2,"members":["n0","n1","n3"]}"#
        );
        let members = [NodeId::from("n0"), NodeId::from("n1"), NodeId::from("n3")].into();
        let ballot = chorus_core::Ballot {
            round: 2,
            node: NodeId::from("n1"),
        };
        assert_eq!(
            line(&Notice::BootstrapAccepted { ballot, members }),
            r#"{"t":5,"kind":"bootstrap_accepted","node":"n0","ballot":{"round":2,"node":"n1"},"members":["n0","n1","n3"]}"#
        );
        let add = MemberChange::Add {
            node: NodeId::from("n3"),
        };
        assert_eq!(
            line(&Notice::MembershipChange {
                change: add.clone(),
                outcome: ChangeOutcome::Committed { version: 3 },
                request: 7,
            }),
            r#"{"t":5,"kind":"membership_change","node":"n0","change":{"op":"add","node":"n3"},"outcome":{"outcome":"committed","version":3},"request":7}"#
        );
        assert_eq!(
            line(&Notice::MembershipChange {
                change: add,
                outcome: ChangeOutcome::Refused {
                    reason: ChangeRefusal::NoLease
                },
                request: 0,
            }),
            r#"{"t":5,"kind":"membership_change","node":"n0","change":{"op":"add","node":"n3"},"outcome":{"outcome":"refused","reason":"no_lease"}}"#
        );
    }

    /// Task notices become the simulator's task kinds (`sim/src/sink.rs`), so the checker
    /// judges invariant 7 on real logs.
    #[test]
    fn task_notices_become_the_simulators_task_lines() {
        use chorus_core::{NodeId, TaskId, TaskStatus};
        let line = |n: &Notice| {
            let record = notice_record("n1", n).expect("traced");
            serde_json::to_string(&Line {
                t: 5,
                record: &record,
            })
            .unwrap()
        };
        let task = TaskId {
            origin: NodeId::from("n1"),
            seq: 3,
        };
        assert_eq!(
            line(&Notice::TaskSubmitted {
                task: task.clone(),
                request: 9,
                existing: false
            }),
            r#"{"t":5,"kind":"task_submitted","node":"n1","task":"n1-3","request":9}"#
        );
        assert_eq!(
            line(&Notice::TaskPlaced {
                task: task.clone(),
                worker: NodeId::from("n2"),
                attempt: 1
            }),
            r#"{"t":5,"kind":"task_placed","node":"n1","task":"n1-3","worker":"n2","attempt":1}"#
        );
        assert_eq!(
            line(&Notice::TaskUnplaceable {
                task: task.clone(),
                reason: "no worker offers gpu (2 workers checked)".into(),
            }),
            r#"{"t":5,"kind":"task_unplaceable","node":"n1","task":"n1-3","reason":"no worker offers gpu (2 workers checked)"}"#
        );
        assert_eq!(
            line(&Notice::TaskCompleted {
                task: task.clone(),
                status: TaskStatus::Succeeded
            }),
            r#"{"t":5,"kind":"task_result","node":"n1","task":"n1-3","status":"succeeded"}"#
        );
        assert_eq!(
            line(&Notice::TaskCompleted {
                task,
                status: TaskStatus::Unschedulable
            }),
            r#"{"t":5,"kind":"task_result","node":"n1","task":"n1-3","status":"unschedulable"}"#
        );
    }

    // The ledger itself is tested with `chorus_core::VoteLedger` (core/tests/wire_checks.rs).
    #[test]
    fn a_report_with_a_vote_violation_is_not_ok() {
        let mut r = ReplayReport {
            matched: 3,
            mismatches: Vec::new(),
            unrecorded_tail: 0,
            vote_violations: Vec::new(),
        };
        assert!(r.ok());
        r.vote_violations
            .push("term 1: voted for b and for c".into());
        assert!(!r.ok());
    }
}
