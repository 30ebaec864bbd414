//! `chorus replay --data-dir A --data-dir B …`: several nodes' replays put on one time line — one
//! docs/design.md §6 trace of what a real cluster decided, for `chorus-sim check` to judge against the
//! same invariants as a simulation.
//!
//! Each node records, at every start, where its clock sat on the host's clocks
//! ([`chorus_io::eventlog::ClockAnchor`]). A node's times map onto the host's monotonic clock
//! when every log comes from one boot of one host (processes, network namespaces or containers
//! of one machine: exact to a millisecond), else onto the wall clock (as good as the hosts'
//! clock sync). The header says which.
//!
//! What the logs cannot know — when a process was killed, which links were cut — comes from a
//! fault journal the harness writes (`--journal`): JSON lines of trace records (`crash`,
//! `partition`, `cut`, `heal`, `network`) timed by `at_monotonic_ms` or `at_unix_ms` instead of
//! `t`. Without one, a run that ended without a `Shutdown` is taken to have crashed right after
//! its last event (when another start follows, or when the node fell silent for longer than
//! the liveness bound before the end), which is the earliest it can have died.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;

use super::replay::{
    liveness_bound, replay_node, task_bound, unschedulable_bound, NodeHistory, ReplayReport,
};
pub use super::trace::ClockSource;
use super::trace::{Clock, Header, Line, Record};

/// What a merged replay found.
pub struct MergeReport {
    /// Each node's own replay (its decisions against its record, its own votes).
    pub nodes: Vec<(String, ReplayReport)>,
    pub clock: ClockSource,
    /// Lines written after the header.
    pub lines: usize,
}

impl MergeReport {
    /// Whether every node's replay matched what it recorded.
    pub fn ok(&self) -> bool {
        self.nodes.iter().all(|(_, r)| r.ok())
    }
}

/// One line of the merged trace before it is written, at its host time.
struct Entry {
    host_ms: u64,
    what: What,
}

enum What {
    /// A node's record (`lease_until` already on the host clock).
    Node(Record),
    /// A fault from the journal: the object without its time.
    Fault(serde_json::Map<String, Value>),
}

impl Entry {
    fn write(&self, w: &mut dyn Write, origin: u64) -> anyhow::Result<()> {
        let t = self.host_ms.saturating_sub(origin);
        match &self.what {
            What::Node(record) => {
                let mut record = record.clone();
                if let Some(until) = record.lease_until_mut() {
                    *until = until.saturating_sub(origin);
                }
                serde_json::to_writer(&mut *w, &Line { t, record: &record })?;
            }
            What::Fault(fields) => {
                // `t` first, as in every trace line.
                write!(w, "{{\"t\":{t}")?;
                for (k, v) in fields {
                    write!(w, ",{}:{}", Value::from(k.as_str()), v)?;
                }
                write!(w, "}}")?;
            }
        }
        writeln!(w)?;
        Ok(())
    }
}

/// Replays every directory of `dirs` (each a node's data or log directory), prints each
/// replay to `out`, and writes the merged trace to `trace` when given. `task_bound_ms`
/// overrides invariant 7's bound in the trace's header (default: the simulator's bound for
/// these settings and the longest task timeout submitted; none when no task was).
pub fn replay_merged(
    dirs: &[PathBuf],
    journal: Option<&Path>,
    trace: Option<&Path>,
    task_bound_ms: Option<u64>,
    out: &mut dyn Write,
) -> anyhow::Result<MergeReport> {
    // The same directory twice is refused before anything is opened: replaying it the second
    // time raced the first replay's store for its lock (sled releases it from a background
    // thread), and the test of this refusal failed now and then on that instead.
    let mut seen = std::collections::BTreeSet::new();
    for dir in dirs {
        let key = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
        if !seen.insert(key) {
            bail!("{} is given twice", dir.display());
        }
    }
    let mut histories = Vec::new();
    for dir in dirs {
        writeln!(out, "== {}", dir.display())?;
        histories.push(replay_node(dir, true, out)?);
        writeln!(out)?;
    }
    let mut ids: Vec<&str> = histories.iter().map(|h| h.meta.node_id.as_str()).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        bail!(
            "node {} is given twice (two copies of one data directory?)",
            w[0]
        );
    }
    let clock = clock_source(&histories);
    let bound = histories
        .iter()
        .map(|h| liveness_bound(&h.config))
        .max()
        .unwrap_or(0);

    let mut entries = Vec::new();
    for h in &histories {
        node_entries(h, clock, &mut entries)?;
    }
    let journaled = match journal {
        Some(path) => read_journal(path, clock, &mut entries)?,
        None => 0,
    };
    let end = entries.iter().map(|e| e.host_ms).max().unwrap_or(0);
    for h in &histories {
        inferred_stops(h, clock, journal.is_some(), end, bound, &mut entries)?;
    }
    let origin = entries.iter().map(|e| e.host_ms).min().unwrap_or(0);
    // Stable: lines of one instant keep their order within a node's history.
    entries.sort_by_key(|e| e.host_ms);

    let boot_id = histories
        .iter()
        .find_map(|h| h.anchors.first().map(|(_, a)| a.boot_id.as_str()))
        .unwrap_or("");
    let eligible: Vec<String> = histories
        .iter()
        .filter(|h| h.eligible)
        .map(|h| h.meta.node_id.to_string())
        .collect();
    let header = Header {
        kind: "header",
        seed: histories.first().map_or(0, |h| h.meta.cluster_seed),
        scenario: format!("real: {} nodes' logs merged", histories.len()),
        engine: "real",
        nodes: histories.len(),
        version: 1,
        voters: eligible.len(),
        duration_ms: end.saturating_sub(origin),
        steps: false,
        liveness_bound_ms: bound,
        task_bound_ms: task_bound_ms.or_else(|| task_bound(&histories.iter().collect::<Vec<_>>())),
        unschedulable_bound_ms: unschedulable_bound(&histories.iter().collect::<Vec<_>>()),
        node: None,
        eligible: Some(eligible),
        clock: Some(Clock {
            source: clock,
            origin_ms: origin,
            boot_id: if clock == ClockSource::Monotonic {
                boot_id
            } else {
                ""
            },
        }),
        data_dirs: Some(dirs.iter().map(|d| d.display().to_string()).collect()),
        pruned: {
            let mut pruned = std::collections::BTreeMap::new();
            for h in histories.iter().filter(|h| h.pruned) {
                // From its first retained event (none: unknown to the end).
                let from = match h.lines.first() {
                    Some(l) => host_time(h, clock, l.seq, l.t)?.saturating_sub(origin),
                    None => end.saturating_sub(origin),
                };
                pruned.insert(h.meta.node_id.to_string(), from);
            }
            (!pruned.is_empty()).then_some(pruned)
        },
    };
    if let Some(path) = trace {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create trace file {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        serde_json::to_writer(&mut w, &header)?;
        writeln!(w)?;
        for e in &entries {
            e.write(&mut w, origin)?;
        }
        w.flush()?;
    }
    writeln!(
        out,
        "merged    {} nodes, {} trace lines ({journaled} from the journal), times on the {} clock{}",
        histories.len(),
        entries.len(),
        match clock {
            ClockSource::Monotonic => "host's monotonic",
            ClockSource::Unix => "hosts' wall",
        },
        trace.map_or(String::new(), |p| format!("; trace in {}", p.display()))
    )?;
    Ok(MergeReport {
        nodes: histories
            .into_iter()
            .map(|h| (h.meta.node_id.to_string(), h.report))
            .collect(),
        clock,
        lines: entries.len(),
    })
}

/// Monotonic when every start was anchored in one boot of one host, else the wall clock.
fn clock_source(histories: &[NodeHistory]) -> ClockSource {
    let mut boots = histories
        .iter()
        .flat_map(|h| h.anchors.iter().map(|(_, a)| a.boot_id.as_str()));
    match boots.next() {
        Some(first) if !first.is_empty() && boots.all(|b| b == first) => ClockSource::Monotonic,
        _ => ClockSource::Unix,
    }
}

/// Host time of node time `t` of event `seq`: from the anchor of the run the event belongs to.
fn host_time(h: &NodeHistory, clock: ClockSource, seq: u64, t: u64) -> anyhow::Result<u64> {
    let i = h.anchors.partition_point(|(s, _)| *s <= seq);
    let Some((_, a)) = i.checked_sub(1).map(|i| &h.anchors[i]) else {
        bail!(
            "node {}: event #{seq} has no clock anchor (its log was written by a chorus that \
             did not record them), so it cannot be placed on a shared time line",
            h.meta.node_id
        );
    };
    Ok(clock.read(a).saturating_add(t.saturating_sub(a.node_ms)))
}

fn node_entries(h: &NodeHistory, clock: ClockSource, out: &mut Vec<Entry>) -> anyhow::Result<()> {
    for line in &h.lines {
        let host_ms = host_time(h, clock, line.seq, line.t)?;
        let mut record = line.record.clone();
        if let Some(until) = record.lease_until_mut() {
            *until = host_time(h, clock, line.seq, *until)?;
        }
        out.push(Entry {
            host_ms,
            what: What::Node(record),
        });
    }
    Ok(())
}

/// `crash` lines for runs that stopped: every clean stop; without a journal, also every run
/// followed by another start, and a last run silent for longer than `bound` before `end`.
fn inferred_stops(
    h: &NodeHistory,
    clock: ClockSource,
    journaled: bool,
    end: u64,
    bound: u64,
    out: &mut Vec<Entry>,
) -> anyhow::Result<()> {
    let node = h.meta.node_id.as_str();
    for (i, l) in h.lifetimes.iter().enumerate() {
        let at = host_time(h, clock, l.last_seq, l.last_t)?;
        let last = i + 1 == h.lifetimes.len();
        let stopped = l.clean || (!journaled && (!last || end.saturating_sub(at) > bound));
        if stopped {
            out.push(Entry {
                host_ms: at,
                what: What::Node(Record::Crash {
                    node: node.to_owned(),
                }),
            });
        }
    }
    Ok(())
}

/// Reads the harness's fault journal into `out`; returns how many lines it held.
fn read_journal(path: &Path, clock: ClockSource, out: &mut Vec<Entry>) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the fault journal {}", path.display()))?;
    let key = clock.journal_key();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut value: Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))?;
        let Some(host_ms) = value.get(key).and_then(Value::as_u64) else {
            bail!(
                "{} line {}: no `{key}` (the logs are merged on that clock)",
                path.display(),
                i + 1
            );
        };
        let Some(obj) = value.as_object_mut() else {
            bail!("{} line {}: not a JSON object", path.display(), i + 1);
        };
        obj.remove("at_monotonic_ms");
        obj.remove("at_unix_ms");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "crash" | "partition" | "cut" | "heal" | "network") {
            bail!(
                "{} line {}: kind `{kind}` is not a fault (crash, partition, cut, heal, network)",
                path.display(),
                i + 1
            );
        }
        out.push(Entry {
            host_ms,
            what: What::Fault(std::mem::take(obj)),
        });
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_core::{Command, Config, Event, NodeId, Timer, ADMIN_ELECTION};
    use chorus_io::eventlog::{ClockAnchor, LogMeta, RecordedNotice, SledLog, SledLogOptions};
    use chorus_io::runtime::EventLog;

    /// A lone voter's log, as its node would write it: each start anchored at `starts[i]` =
    /// (node time, host monotonic ms); the node elects itself, then (unless last) is killed.
    fn lone_voter(dir: &Path, id: &str, starts: &[(u64, u64)]) {
        lone_voter_cut(dir, id, starts, usize::MAX)
    }

    /// [`lone_voter`], killed once `keep` notices of the winning step are recorded.
    fn lone_voter_cut(dir: &Path, id: &str, starts: &[(u64, u64)], keep: usize) {
        let config = Config {
            bootstrap_expect: 1,
            ..Config::default()
        };
        let meta = LogMeta::new(NodeId::from(id), config, vec![ADMIN_ELECTION.to_owned()], 1);
        let mut log = SledLog::open(dir, meta.clone(), SledLogOptions::default()).unwrap();
        let recorder = log.notice_recorder();
        let mut core = meta.fresh_core().unwrap();
        for &(start_ms, mono) in starts {
            let mut timers: Vec<(u64, Timer)> = Vec::new();
            let mut now = start_ms;
            let mut event = Event::Started;
            let anchor = ClockAnchor {
                node_ms: start_ms,
                monotonic_ms: mono,
                unix_ms: 1_700_000_000_000 + mono,
                boot_id: "boot".into(),
            };
            recorder.record_clock(log.next_seq(), &anchor).unwrap();
            for _ in 0..20 {
                let seq = log.next_seq();
                let mut commands = Vec::new();
                core.step(now, event.clone(), &mut commands);
                log.append(now, &event).unwrap();
                let mut index = 0;
                for c in &commands {
                    match c {
                        Command::SetTimer { timer, at_ms } => {
                            timers.retain(|(_, t)| t != timer);
                            timers.push((*at_ms, *timer));
                        }
                        Command::CancelTimer { timer } => timers.retain(|(_, t)| t != timer),
                        Command::Notice(n)
                            if !matches!(n, chorus_core::Notice::Refused { .. })
                                && (core.role() != chorus_core::Role::Admin
                                    || (index as usize) < keep) =>
                        {
                            let r = RecordedNotice {
                                seq,
                                now_ms: now,
                                notice: n.clone(),
                            };
                            recorder.record(index, &r).unwrap();
                            index += 1;
                        }
                        _ => {}
                    }
                }
                if core.role() == chorus_core::Role::Admin {
                    break;
                }
                timers.sort();
                let (at, timer) = timers.remove(0);
                now = at.max(now);
                event = Event::TimerFired { timer };
            }
            log.sync().unwrap();
        }
    }

    fn lines(trace: &Path) -> Vec<Value> {
        std::fs::read_to_string(trace)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn at(lines: &[Value], kind: &str, node: &str) -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l["kind"] == kind && l["node"] == node)
            .map(|l| l["t"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn two_nodes_logs_land_on_the_host_clock_with_their_restarts_and_crashes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        // a starts at host 10,000 (its clock at 0); b at host 10,500; b is killed and comes
        // back with its clock continuing at 60,000, at host 80,000.
        lone_voter(&a, "a", &[(0, 10_000)]);
        lone_voter(&b, "b", &[(0, 10_500), (60_000, 80_000)]);
        let trace = dir.path().join("t.jsonl");
        let mut out = Vec::new();
        // Each node's own trace, on its own clock.
        let local = |dir: &Path, id: &str| {
            let single = dir.with_extension("jsonl");
            crate::history::replay::replay(dir, Some(&single), &mut Vec::new()).unwrap();
            at(&lines(&single), "became_admin", id)
        };
        let (local_a, local_b) = (local(&a, "a"), local(&b, "b"));
        let r = replay_merged(&[a, b], None, Some(&trace), None, &mut out).unwrap();
        assert!(r.ok(), "{}", String::from_utf8_lossy(&out));
        assert_eq!(r.clock, ClockSource::Monotonic);
        let l = lines(&trace);
        assert_eq!(l[0]["engine"], "real");
        assert_eq!(l[0]["clock"]["origin_ms"], 10_000);
        assert_eq!(l[0]["eligible"], serde_json::json!(["a", "b"]));
        assert!(l[0].get("task_bound_ms").is_none(), "no task was submitted");
        assert_eq!(at(&l, "restart", "a"), [0]);
        assert_eq!(at(&l, "restart", "b"), [500, 70_000]);
        let (won_a, won_b) = (at(&l, "became_admin", "a"), at(&l, "became_admin", "b"));
        assert_eq!(won_a, local_a, "a's clock started at the origin");
        assert_eq!(won_b[0], local_b[0] + 500, "b's started 500 ms later");
        assert_eq!(
            won_b[1],
            local_b[1] - 60_000 + 70_000,
            "b's second run, anchored again"
        );
        // b's first run ends with its last event: the crash is placed there, before the restart.
        let crash = at(&l, "crash", "b");
        assert_eq!(crash, [won_b[0]]);
        // Lease ends move with their node: as far after the win as on the node's clock.
        let lease = |node: &str| {
            let line = l
                .iter()
                .find(|x| x["kind"] == "became_admin" && x["node"] == node)
                .unwrap();
            line["lease_until"].as_u64().unwrap() - line["t"].as_u64().unwrap()
        };
        assert_eq!(lease("a"), lease("b"));
        let times: Vec<u64> = l[1..].iter().map(|x| x["t"].as_u64().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");
    }

    #[test]
    fn a_journal_adds_faults_and_replaces_the_inferred_crashes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        lone_voter(&a, "a", &[(0, 10_000)]);
        lone_voter(&b, "b", &[(0, 10_500), (60_000, 80_000)]);
        let journal = dir.path().join("faults.jsonl");
        std::fs::write(
            &journal,
            "{\"at_monotonic_ms\":40000,\"kind\":\"crash\",\"node\":\"b\"}\n\
             {\"at_monotonic_ms\":45000,\"kind\":\"partition\",\"groups\":[[\"a\"],[\"b\"]]}\n\
             {\"at_monotonic_ms\":50000,\"kind\":\"heal\"}\n",
        )
        .unwrap();
        let trace = dir.path().join("t.jsonl");
        replay_merged(
            &[a.clone(), b.clone()],
            Some(&journal),
            Some(&trace),
            None,
            &mut Vec::new(),
        )
        .unwrap();
        let l = lines(&trace);
        assert_eq!(
            at(&l, "crash", "b"),
            [30_000],
            "the journal's, not inferred"
        );
        let text = std::fs::read_to_string(&trace).unwrap();
        assert!(text.contains(r#"{"t":35000,"groups":[["a"],["b"]],"kind":"partition"}"#));
        assert!(text.contains(r#"{"t":40000,"kind":"heal"}"#));

        // A journal on another clock, or with a kind that is not a fault, is refused.
        std::fs::write(&journal, "{\"at_unix_ms\":1,\"kind\":\"heal\"}\n").unwrap();
        let e = replay_merged(
            &[a.clone(), b.clone()],
            Some(&journal),
            None,
            None,
            &mut Vec::new(),
        )
        .err()
        .unwrap();
        assert!(format!("{e:#}").contains("no `at_monotonic_ms`"), "{e:#}");
        std::fs::write(&journal, "{\"at_monotonic_ms\":1,\"kind\":\"voted\"}\n").unwrap();
        let e = replay_merged(&[a, b], Some(&journal), None, None, &mut Vec::new())
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("is not a fault"), "{e:#}");
    }

    #[test]
    fn the_same_node_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        lone_voter(&a, "a", &[(0, 10_000)]);
        let e = replay_merged(&[a.clone(), a], None, None, None, &mut Vec::new())
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("given twice"), "{e:#}");
    }

    /// A node killed while recording one step's notices leaves the first of them recorded: the
    /// replay counts the rest as the unrecorded tail, not as a mismatch; a step whose recorded
    /// notices are not the first of what the replay decides is still a mismatch.
    #[test]
    fn a_step_cut_while_its_notices_were_recorded_is_a_tail_not_a_mismatch() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("n0");
        lone_voter_cut(&dir, "n0", &[(0, 1_000)], 1);
        let mut out = Vec::new();
        let h = replay_node(&dir, false, &mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(h.report.mismatches.is_empty(), "{text}");
        assert!(h.report.unrecorded_tail > 0, "{text}");
    }
}
