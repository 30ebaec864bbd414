//! `chorus replay`: re-runs a data directory's event log through a fresh core (or the oldest
//! retained snapshot), prints the decisions with their times, checks them against the notices
//! the node recorded as it ran, checks vote safety from the vote replies the node sent, and can
//! write a DESIGN §6 trace.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use chorus_core::{Command, Core, Event, Message, Notice, VoteLedger};
use chorus_io::eventlog::{RecordedNotice, SledLog};
use serde::Serialize;

use crate::observe::role_name;
use crate::run::LOG_DIR;

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
    /// Terms in which the node gave its vote to two candidates (DESIGN §5.3).
    pub vote_violations: Vec<String>,
}

impl ReplayReport {
    /// Whether the replay matched the record and the node kept one vote per term.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty() && self.vote_violations.is_empty()
    }
}

/// DESIGN §6 trace lines (field names as in `sim/src/trace.rs`).
#[derive(Serialize)]
struct Header<'a> {
    kind: &'static str,
    seed: u64,
    scenario: String,
    engine: &'static str,
    nodes: usize,
    version: u32,
    voters: usize,
    duration_ms: u64,
    steps: bool,
    node: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record<'a> {
    BecameAdmin {
        node: &'a str,
        term: u64,
        lease_until: u64,
    },
    LeaseRenewed {
        node: &'a str,
        term: u64,
        lease_until: u64,
    },
    LeaseExpired {
        node: &'a str,
        term: u64,
    },
    SteppedDown {
        node: &'a str,
        term: u64,
        reason: &'static str,
    },
    Voted {
        node: &'a str,
        term: u64,
        #[serde(rename = "for")]
        candidate: &'a str,
    },
    VoteGranted {
        node: &'a str,
        term: u64,
        to: &'a str,
    },
    AdminKnown {
        node: &'a str,
        admin: &'a str,
        term: u64,
    },
    ElectorateChanged {
        node: &'a str,
        version: u64,
        term: u64,
        members: &'a [chorus_core::NodeId],
    },
    MembershipChange {
        node: &'a str,
        change: &'a chorus_core::MemberChange,
        outcome: &'a chorus_core::ChangeOutcome,
        #[serde(skip_serializing_if = "is_zero")]
        request: u64,
    },
    Role {
        node: &'a str,
        role: &'static str,
        term: u64,
    },
    Restart {
        node: &'a str,
    },
}

#[derive(Serialize)]
struct Line<'a> {
    t: u64,
    #[serde(flatten)]
    record: Record<'a>,
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

/// Replays `data_dir`, printing to `out`; writes a trace to `trace` when given.
pub fn replay(
    data_dir: &Path,
    trace: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<ReplayReport> {
    let path = log_dir(data_dir);
    let log = SledLog::open_existing(&path)?;
    let meta = log.meta().clone();
    let basis = log.replay_basis()?;
    let recorded = log.notices()?;
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

    let mut trace_out = match trace {
        Some(p) => {
            let file = std::fs::File::create(p)
                .with_context(|| format!("cannot create trace file {}", p.display()))?;
            Some(std::io::BufWriter::new(file))
        }
        None => None,
    };
    let last_t = basis.events.last().map_or(0, |e| e.1);
    if let Some(w) = trace_out.as_mut() {
        let header = Header {
            kind: "header",
            seed: meta.cluster_seed,
            scenario: format!("replay of {}", path.display()),
            engine: "replay",
            nodes: 1,
            version: 1,
            voters: usize::from(
                meta.capabilities
                    .iter()
                    .any(|c| c == chorus_core::ADMIN_ELECTION),
            ),
            duration_ms: last_t,
            steps: false,
            node: &node,
        };
        serde_json::to_writer(&mut *w, &header)?;
        writeln!(w)?;
    }

    // Recorded notices by event sequence, in step order.
    let mut by_seq: std::collections::BTreeMap<u64, Vec<&RecordedNotice>> = Default::default();
    for r in &recorded {
        by_seq.entry(r.seq).or_default().push(r);
    }
    let last_recorded_seq = recorded.iter().map(|r| r.seq).max().unwrap_or(0);

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
    for (seq, now_ms, event) in basis.events {
        if now_ms < core.now_ms() {
            bail!(
                "{}: event {seq} goes back in time ({now_ms} ms after {} ms)",
                path.display(),
                core.now_ms()
            );
        }
        let restart = matches!(event, Event::Started);
        commands.clear();
        core.step(now_ms, event, &mut commands);
        if restart {
            writeln!(out, "{:>10}  #{seq:<6} started", fmt_ms(now_ms))?;
            write_line(&mut trace_out, now_ms, Record::Restart { node: &node })?;
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
                        now_ms,
                        Record::VoteGranted {
                            node: &node,
                            term: *term,
                            to: to.as_str(),
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
                        now_ms,
                        Record::Role {
                            node: &node,
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
                        write_line(&mut trace_out, now_ms, record)?;
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
        if produced == recorded_here {
            report.matched += produced.len();
        } else if recorded_here.is_empty() && seq > last_recorded_seq {
            // The node stopped (crashed) after the event was durable but before its notices
            // were recorded.
            report.unrecorded_tail += produced.len();
        } else {
            report.mismatches.push(format!(
                "event #{seq} at {}: replay decided {produced:?}, the node recorded {recorded_here:?}",
                fmt_ms(now_ms)
            ));
        }
    }
    if let Some(mut w) = trace_out {
        w.flush()?;
    }
    writeln!(
        out,
        "final     term {} role {} admin {} voted_for {}",
        core.term(),
        role_name(core.role()),
        core.admin().map_or("-".to_owned(), |a| a.to_string()),
        core.voted_for().map_or("-".to_owned(), |a| a.to_string()),
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
    Ok(report)
}

fn write_line(
    w: &mut Option<std::io::BufWriter<std::fs::File>>,
    t: u64,
    record: Record<'_>,
) -> anyhow::Result<()> {
    if let Some(w) = w.as_mut() {
        serde_json::to_writer(&mut *w, &Line { t, record })?;
        writeln!(w)?;
    }
    Ok(())
}

fn notice_record<'a>(node: &'a str, n: &'a Notice) -> Option<Record<'a>> {
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
            candidate: candidate.as_str(),
        },
        Notice::AdminKnown { admin, term } => Record::AdminKnown {
            node,
            admin: admin.as_str(),
            term: *term,
        },
        Notice::ElectorateChanged {
            version,
            term,
            members,
        } => Record::ElectorateChanged {
            node,
            version: *version,
            term: *term,
            members,
        },
        Notice::MembershipChange {
            change,
            outcome,
            request,
        } => Record::MembershipChange {
            node,
            change,
            outcome,
            request: *request,
        },
        // Task trace kinds come with the simulator's task workloads.
        Notice::Refused { .. }
        | Notice::TaskSubmitted { .. }
        | Notice::TaskRefused { .. }
        | Notice::TaskCancelRequested { .. }
        | Notice::TaskPlaced { .. }
        | Notice::TaskStarted { .. }
        | Notice::TaskFinished { .. }
        | Notice::TaskCompleted { .. } => return None,
    })
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn print_decision(out: &mut dyn Write, now_ms: u64, seq: u64, d: &Decision) -> anyhow::Result<()> {
    let what = match d {
        Decision::Role { role, term } => format!("role -> {role} (term {term})"),
        Decision::Notice(n) => match n {
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
            Notice::AdminKnown { admin, term } => format!("admin of term {term} is {admin}"),
            Notice::Refused {
                from,
                message,
                reason,
            } => format!("refused {message} from {from} ({reason})"),
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
                format!("membership change {change:?}: {outcome:?}")
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
            Notice::TaskStarted { task, attempt } => {
                format!("started task {task} (attempt {attempt})")
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
        },
    };
    writeln!(out, "{:>10}  #{seq:<6} {what}", fmt_ms(now_ms))?;
    Ok(())
}

/// Node-clock milliseconds as seconds with three decimals.
fn fmt_ms(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The electorate and membership kinds have the shape the simulator writes (DESIGN §6;
    /// `sim/src/trace.rs`).
    #[test]
    fn electorate_and_membership_notices_become_trace_lines() {
        use chorus_core::{ChangeOutcome, ChangeRefusal, MemberChange, NodeId};
        let line = |n: &Notice| {
            let record = notice_record("n0", n).expect("traced");
            serde_json::to_string(&Line { t: 5, record }).unwrap()
        };
        let members = vec![NodeId::from("n0"), NodeId::from("n1"), NodeId::from("n3")];
        assert_eq!(
            line(&Notice::ElectorateChanged {
                version: 3,
                term: 2,
                members
            }),
            r#"{"t":5,"kind":"electorate_changed","node":"n0","version":3,"term":2,"members":["n0","n1","n3"]}"#
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
