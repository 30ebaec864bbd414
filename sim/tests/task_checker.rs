//! Invariant 7 in the checker is tested like the others: hand-made traces that break each task
//! rule must be reported, and their clean twins must not.

use std::collections::BTreeSet;

use chorus_core::TaskStatus;
use chorus_sim::checker::{check, Checker};
use chorus_sim::scenario::{builtin, TaskWorkload};
use chorus_sim::trace::{Header, Line, Record};

/// Three voters, a task workload, a 10 s liveness bound and a 20 s task bound.
fn header() -> Header {
    let mut s = builtin("steady").unwrap();
    s.nodes = 3;
    s.duration_ms = 100_000;
    s.liveness_bound_ms = Some(10_000);
    s.tasks = Some(TaskWorkload {
        count: Some(1),
        result_bound: Some(20_000),
        ..TaskWorkload::default()
    });
    let h = Header::new(&s, 1, "des", false);
    assert_eq!(h.task_bound_ms, Some(20_000));
    h
}

fn at(t: u64, record: Record) -> Line {
    Line { t, record }
}

fn submitted(n: &str, task: &str) -> Record {
    Record::TaskSubmitted {
        node: n.into(),
        task: task.into(),
        request: Some(1),
        existing: false,
    }
}

fn placed(admin: &str, task: &str, worker: &str) -> Record {
    Record::TaskPlaced {
        node: admin.into(),
        task: task.into(),
        worker: worker.into(),
        attempt: 1,
    }
}

fn result(n: &str, task: &str) -> Record {
    Record::TaskResult {
        node: n.into(),
        task: task.into(),
        status: TaskStatus::Succeeded,
    }
}

/// Three nodes up; n0 admin in term 1 with a lease renewed to 114 s and known to all; n1
/// submits n1-1 at 5 s, n0 places it on n2 at 5.1 s, the result is in at 8 s.
fn clean() -> Vec<Line> {
    let mut v = vec![
        at(0, Record::Restart { node: "n0".into() }),
        at(0, Record::Restart { node: "n1".into() }),
        at(0, Record::Restart { node: "n2".into() }),
        at(
            3_000,
            Record::BecameAdmin {
                node: "n0".into(),
                term: 1,
                lease_until: 33_000,
            },
        ),
    ];
    for n in ["n0", "n1", "n2"] {
        v.push(at(
            3_010,
            Record::AdminKnown {
                node: n.into(),
                admin: "n0".into(),
                term: 1,
            },
        ));
    }
    v.extend([
        at(5_000, submitted("n1", "n1-1")),
        at(5_100, placed("n0", "n1-1", "n2")),
        at(
            5_200,
            Record::TaskStarted {
                node: "n2".into(),
                task: "n1-1".into(),
                attempt: 1,
                live: false,
            },
        ),
        at(
            7_900,
            Record::TaskFinished {
                node: "n2".into(),
                task: "n1-1".into(),
                attempt: 1,
                status: Some(TaskStatus::Succeeded),
                error: None,
            },
        ),
        at(8_000, result("n1", "n1-1")),
    ]);
    for (t, until) in [(30_000, 60_000), (57_000, 87_000), (84_000, 114_000)] {
        v.push(at(
            t,
            Record::LeaseRenewed {
                node: "n0".into(),
                term: 1,
                lease_until: until,
            },
        ));
    }
    v.sort_by_key(|l| l.t);
    v
}

fn task_messages(lines: &[Line]) -> Vec<String> {
    task_messages_under(&header(), lines)
}

/// [`task_messages`] under header `h`.
fn task_messages_under(h: &Header, lines: &[Line]) -> Vec<String> {
    check(h, lines)
        .into_iter()
        // Only the task rules: a hand-made trace may break liveness on the way.
        .filter(|v| v.invariant == 7)
        .map(|v| v.message)
        .collect()
}

/// n0 steps down at 40 s, its lease's time not run out, and places n1-1 right after.
fn steps_down_then_places(lines: &mut Vec<Line>) {
    lines.push(at(
        40_000,
        Record::SteppedDown {
            node: "n0".into(),
            term: 1,
            reason: "check_quorum".into(),
        },
    ));
    lines.push(at(40_001, placed("n0", "n1-1", "n2")));
    lines.sort_by_key(|l| l.t);
}

fn without(lines: Vec<Line>, drop: impl Fn(&Record) -> bool) -> Vec<Line> {
    lines.into_iter().filter(|l| !drop(&l.record)).collect()
}

#[test]
fn a_clean_task_trace_passes() {
    assert_eq!(task_messages(&clean()), Vec::<String>::new());
}

#[test]
fn a_task_without_result_past_the_bound_is_reported() {
    let t = without(clean(), |r| matches!(r, Record::TaskResult { .. }));
    let found = task_messages(&t);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("n1-1") && found[0].contains("no result by t=25000"));
}

#[test]
fn a_task_accepted_near_the_end_is_not_owed_yet() {
    let mut t = without(clean(), |r| matches!(r, Record::TaskResult { .. }));
    // Accepted at 85 s: owed only at 105 s, after the run's end at 100 s.
    for l in &mut t {
        if matches!(l.record, Record::TaskSubmitted { .. }) {
            l.t = 85_000;
        }
    }
    t.sort_by_key(|l| l.t);
    let placed_at = t
        .iter()
        .position(|l| matches!(l.record, Record::TaskPlaced { .. }))
        .unwrap();
    t.remove(placed_at);
    assert_eq!(task_messages(&t), Vec::<String>::new());
}

#[test]
fn faults_restart_the_clock_and_a_down_submitter_owes_nothing() {
    let mut t = without(clean(), |r| matches!(r, Record::TaskResult { .. }));
    // n1 (the submitter) crashes at 20 s and stays down: its task waits in its log.
    t.push(at(20_000, Record::Crash { node: "n1".into() }));
    t.sort_by_key(|l| l.t);
    assert_eq!(task_messages(&t), Vec::<String>::new());
    // A partition from 10 s to 90 s: owed again only at 110 s, after the end.
    let mut t = without(clean(), |r| matches!(r, Record::TaskResult { .. }));
    t.push(at(
        10_000,
        Record::Partition {
            groups: vec![vec!["n0".into(), "n1".into()], vec!["n2".into()]],
        },
    ));
    t.push(at(90_000, Record::Heal));
    t.sort_by_key(|l| l.t);
    assert_eq!(task_messages(&t), Vec::<String>::new());
    // The same partition healed at 60 s: owed at 80 s.
    let mut t = without(clean(), |r| matches!(r, Record::TaskResult { .. }));
    t.push(at(
        10_000,
        Record::Partition {
            groups: vec![vec!["n0".into(), "n1".into()], vec!["n2".into()]],
        },
    ));
    t.push(at(60_000, Record::Heal));
    t.sort_by_key(|l| l.t);
    let found = task_messages(&t);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("no result by t=80000"), "{found:?}");
}

#[test]
fn placement_outside_a_lease_is_reported() {
    // After the lease ran out (33 s, not renewed until 30 s... moved past it).
    let mut t = clean();
    t.push(at(34_000, placed("n0", "n1-1", "n2")));
    t.retain(|l| {
        !matches!(&l.record, Record::LeaseRenewed { lease_until, .. } if *lease_until == 60_000)
    });
    t.sort_by_key(|l| l.t);
    let found = task_messages(&t);
    assert!(
        found
            .iter()
            .any(|m| m.contains("lease (term 1) ended at 33000")),
        "{found:?}"
    );
    // By a node that never held a lease.
    let mut t = clean();
    t.push(at(6_000, placed("n1", "n1-1", "n2")));
    t.sort_by_key(|l| l.t);
    let found = task_messages(&t);
    assert!(
        found.iter().any(|m| m.contains("without holding a lease")),
        "{found:?}"
    );
    // After stepping down, though the lease's time had not run out.
    let mut t = clean();
    steps_down_then_places(&mut t);
    let found = task_messages(&t);
    assert!(
        found.iter().any(|m| m.contains("without holding a lease")),
        "{found:?}"
    );
    // After a crash and restart.
    let mut t = clean();
    t.push(at(40_000, Record::Crash { node: "n0".into() }));
    t.push(at(41_000, Record::Restart { node: "n0".into() }));
    t.push(at(41_001, placed("n0", "n1-1", "n2")));
    t.sort_by_key(|l| l.t);
    let found = task_messages(&t);
    assert!(
        found.iter().any(|m| m.contains("without holding a lease")),
        "{found:?}"
    );
}

#[test]
fn a_second_result_or_a_stray_one_is_reported() {
    let mut t = clean();
    t.push(at(9_000, result("n1", "n1-1")));
    t.sort_by_key(|l| l.t);
    let found = task_messages(&t);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("second result for n1-1"));

    let mut t = clean();
    t.push(at(9_000, result("n2", "n1-1")));
    t.push(at(9_000, result("n2", "n2-7")));
    t.sort_by_key(|l| l.t);
    let found = task_messages(&t);
    assert!(
        found.iter().any(|m| m.contains("which n1 accepted")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|m| m.contains("which no node accepted")),
        "{found:?}"
    );
}

#[test]
fn a_task_its_live_submitter_forgot_is_lost() {
    let h = header();
    let t = without(clean(), |r| matches!(r, Record::TaskResult { .. }));
    let feed = |owned: &[&str]| {
        let mut c = Checker::new(&h);
        // Only up to 9 s: the bound has not run out, so only the end-of-run rule can fail.
        for (i, l) in t.iter().filter(|l| l.t < 9_000).enumerate() {
            c.observe(i + 2, l);
        }
        let owned: BTreeSet<String> = owned.iter().map(|s| s.to_string()).collect();
        c.owned_at_end("n1", &owned, 9_000, 99);
        c.finish(9_000, 99);
        c.violations().to_vec()
    };
    assert_eq!(feed(&["n1-1"]), vec![]);
    let found = feed(&[]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].message.contains("no longer owns it: lost"));
}

/// `clean` without the run: n0 says at 5.2 s that no live worker can run n1-1, and n1's result
/// (`unschedulable`) comes at `result_at`, if any.
fn unplaceable(result_at: Option<u64>) -> Vec<Line> {
    let mut t = without(clean(), |r| {
        matches!(
            r,
            Record::TaskPlaced { .. }
                | Record::TaskStarted { .. }
                | Record::TaskFinished { .. }
                | Record::TaskResult { .. }
        )
    });
    t.push(at(
        5_200,
        Record::TaskUnplaceable {
            node: "n0".into(),
            task: "n1-1".into(),
            reason: "no worker offers gpu (2 workers checked)".into(),
        },
    ));
    if let Some(r) = result_at {
        t.push(at(
            r,
            Record::TaskResult {
                node: "n1".into(),
                task: "n1-1".into(),
                status: TaskStatus::Unschedulable,
            },
        ));
    }
    t.sort_by_key(|l| l.t);
    t
}

/// Issue 33: a task an admin said no live worker can run ends `unschedulable` after its own
/// bound, which may be past the task bound: it is owed within `unschedulable_bound_ms` of the
/// admin's `task_unplaceable` — also across a fault after it (the admin may be the same, and
/// say nothing new) — and reported when it is later than that.
#[test]
fn a_task_no_worker_can_run_is_owed_within_the_unschedulable_bound() {
    let u = header().unschedulable_bound_ms.expect("a task workload");
    assert!(u > 20_000 && 5_200 + u < 100_000, "{u}");
    assert_eq!(
        task_messages(&unplaceable(Some(5_200 + u - 100))),
        Vec::<String>::new()
    );
    let found = task_messages(&unplaceable(None));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains(&format!("no result by t={}", 5_200 + u))
            && found[0].contains("task_unplaceable"),
        "{found:?}"
    );
    // A short partition at 10 s: owed from the heal at 12 s, by the later bound.
    let mut t = unplaceable(Some(12_000 + u - 100));
    t.push(at(
        10_000,
        Record::Partition {
            groups: vec![vec!["n0".into(), "n1".into()], vec!["n2".into()]],
        },
    ));
    t.push(at(12_000, Record::Heal));
    t.sort_by_key(|l| l.t);
    assert_eq!(task_messages(&t), Vec::<String>::new());
}

/// A real node's log may be pruned: its history before the snapshot is not in the trace. A
/// result for a task its submitter accepted before, and a placement under a lease taken before,
/// are not judged there — and are again once the trace says what the node holds.
#[test]
fn a_pruned_log_is_not_judged_for_what_it_no_longer_holds() {
    let pruned = |nodes: &[&str]| {
        let mut h = header();
        // Their retained histories start at 4 s.
        h.pruned = Some(nodes.iter().map(|n| (n.to_string(), 4_000)).collect());
        h
    };
    // n1 accepted n1-0 before its snapshot; n0's lease in force came before its snapshot.
    let mut t = without(clean(), |r| matches!(r, Record::BecameAdmin { .. }));
    t.push(at(4_000, result("n1", "n1-0")));
    t.push(at(4_500, placed("n0", "n1-0", "n2")));
    t.sort_by_key(|l| l.t);
    let whole = task_messages(&t);
    assert!(
        whole.iter().any(|m| m.contains("which no node accepted"))
            && whole.iter().any(|m| m.contains("without holding a lease")),
        "judged as a whole history: {whole:?}"
    );
    assert_eq!(
        task_messages_under(&pruned(&["n0", "n1"]), &t),
        Vec::<String>::new()
    );
    // Only the pruned node's history is excused: n2's stray result is still one.
    let mut stray = t.clone();
    stray.push(at(9_000, result("n2", "n2-3")));
    let found = task_messages_under(&pruned(&["n0", "n1"]), &stray);
    assert!(found.iter().any(|m| m.contains("n2-3")), "{found:?}");
    // Once n0 is seen stepping down, its lease state is known again.
    let mut after = t.clone();
    steps_down_then_places(&mut after);
    let found = task_messages_under(&pruned(&["n0", "n1"]), &after);
    assert!(
        found.iter().any(|m| m.contains("without holding a lease")),
        "{found:?}"
    );
}

/// Invariant 9: a live sandbox made on a second worker while the first still holds it is
/// reported; made again after the first ended it, or after the first crashed, it is not.
#[test]
fn a_live_sandbox_on_two_workers_at_once_breaks_invariant_9() {
    let started = |n: &str, attempt| Record::TaskStarted {
        node: n.into(),
        task: "n1-2".into(),
        attempt,
        live: true,
    };
    let nine = |lines: &[Line]| -> Vec<String> {
        check(&header(), lines)
            .into_iter()
            .filter(|v| v.invariant == 9)
            .map(|v| v.message)
            .collect()
    };
    let base = || {
        let mut v = clean();
        v.push(at(20_000, submitted("n1", "n1-2")));
        v.push(at(20_100, started("n2", 1)));
        v
    };
    let mut twice = base();
    twice.push(at(25_000, started("n0", 1)));
    let found = nine(&twice);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("while n2 still holds it"), "{found:?}");

    let mut after_end = base();
    after_end.push(at(
        24_000,
        Record::TaskFinished {
            node: "n2".into(),
            task: "n1-2".into(),
            attempt: 1,
            status: Some(TaskStatus::Error),
            error: None,
        },
    ));
    after_end.push(at(25_000, started("n0", 2)));
    assert_eq!(nine(&after_end), Vec::<String>::new());

    let mut after_crash = base();
    after_crash.push(at(24_000, Record::Crash { node: "n2".into() }));
    after_crash.push(at(25_000, started("n0", 2)));
    assert_eq!(nine(&after_crash), Vec::<String>::new());
}
