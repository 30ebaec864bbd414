//! Task rules on one core driven by hand — the admin's placement (`task/place.rs`), the
//! submitter (`task/submit.rs`) and the worker (`task/work.rs`): an admin elected by its
//! voters, workers and submitters known through `PeerUp`, and the reports, offers, placements
//! and results they send. The same rules across a whole network are in `tasks.rs`; these pin
//! the narrow ones that the first `cargo mutants` run over `task/` found unchecked, each seen to
//! fail on the mutant its doc comment names (docs/mutants.md, session 10).

use crate::one_core;

use std::sync::Arc;

use chorus_core::{
    Command, Core, Event, Message, Notice, OfferState, PeerInfo, Refusal, TaskCapacity, TaskId,
    TaskPhase, TaskSpec, MAX_WIRE_INT,
};
use one_core::{from, heartbeat, refusals, sent_to, voter, win};

const ABC: &[&str] = &["a", "b", "c"];

fn spec() -> Arc<TaskSpec> {
    Arc::new(TaskSpec {
        image: "img".into(),
        command: vec!["true".into()],
        timeout_ms: 1_000,
        ..Default::default()
    })
}

fn task(origin: &str, seq: u64) -> TaskId {
    TaskId {
        origin: origin.into(),
        seq,
    }
}

/// `a`, admin of a, b, c with a fresh lease, connected to `peers` (workers and submitters,
/// none eligible to stand).
fn admin(peers: &[&str]) -> Core {
    let mut a = voter("a", ABC);
    win(&mut a, &["b"]);
    let now = a.now_ms();
    for p in peers {
        a.step_vec(now, Event::peer_up((*p).into(), PeerInfo::default()));
    }
    a
}

fn report(
    a: &mut Core,
    worker: &str,
    slots: u32,
    running: &[(TaskId, u32)],
    finished: &[TaskId],
) -> Vec<Command> {
    let msg = Message::WorkerReport {
        term: a.term(),
        seen: 0,
        slots,
        capacity: Default::default(),
        running: running.to_vec(),
        finished: finished.to_vec(),
        released: vec![],
        partial: false,
    };
    let now = a.now_ms();
    a.step_vec(now, from(worker, msg))
}

fn offer(a: &mut Core, t: &TaskId) -> Vec<Command> {
    let msg = Message::TaskOffer {
        task: t.clone(),
        spec: spec(),
        cancel: false,
        attempt: 0,
        unplaceable_ms: 0,
    };
    let now = a.now_ms();
    a.step_vec(now, from(t.origin.as_str(), msg))
}

/// The tasks placed in `out`, with the worker each went to.
fn placements(out: &[Command]) -> Vec<(TaskId, String)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send {
                to,
                msg: Message::TaskPlace { task, .. },
            } => Some((task.clone(), to.as_str().to_owned())),
            _ => None,
        })
        .collect()
}

/// Rule 2: the least loaded worker — by running over slots, not by running alone or by id —
/// gets the task. `w1` runs one task of two slots (half loaded), `w2` one of four (a quarter).
/// The counts the admin exposes for metrics follow.
///
/// Kills `WorkerLoad::load_key`: `(running << 32) / slots` → `%`, `*`, `<<` → `>>`; and
/// `placed_len`, `worker_count` → 0, 1.
#[test]
fn the_least_loaded_worker_by_share_of_its_slots_gets_the_task() {
    let mut a = admin(&["w1", "w2", "s"]);
    report(&mut a, "w1", 2, &[(task("s", 1), 1)], &[]);
    report(&mut a, "w2", 4, &[(task("s", 2), 1)], &[]);
    let tasks = a.admin_tasks().expect("admin");
    assert_eq!((tasks.placed_len(), tasks.worker_count()), (2, 2));
    let out = offer(&mut a, &task("s", 3));
    assert_eq!(placements(&out), [(task("s", 3), "w2".to_owned())]);
    let tasks = a.admin_tasks().expect("admin");
    assert_eq!(
        (tasks.placed_len(), tasks.queue_len(), tasks.worker_count()),
        (3, 0, 2)
    );
}

/// Rule 9: an offer carries the latest run its submitter heard of, and the admin numbers the
/// run it places after it — also for a task already in its queue (offered again after the
/// submitter heard of a later run elsewhere).
#[test]
fn an_admin_numbers_its_run_after_the_latest_its_submitter_heard_of() {
    let offer_after = |a: &mut Core, t: &TaskId, attempt: u32| {
        let msg = Message::TaskOffer {
            task: t.clone(),
            spec: spec(),
            cancel: false,
            attempt,
            unplaceable_ms: 0,
        };
        let now = a.now_ms();
        a.step_vec(now, from(t.origin.as_str(), msg))
    };
    let attempts = |out: &[Command]| -> Vec<u32> {
        out.iter()
            .filter_map(|c| match c {
                Command::Send {
                    msg: Message::TaskPlace { attempt, .. },
                    ..
                } => Some(*attempt),
                _ => None,
            })
            .collect()
    };
    let mut a = admin(&["w1", "s"]);
    report(&mut a, "w1", 1, &[], &[]);
    assert_eq!(attempts(&offer_after(&mut a, &task("s", 1), 2)), [3]);
    // No free slot: queued as run 1, then offered by a submitter that heard of run 4.
    assert!(attempts(&offer_after(&mut a, &task("s", 2), 0)).is_empty());
    assert!(attempts(&offer_after(&mut a, &task("s", 2), 4)).is_empty());
    let out = report(&mut a, "w1", 1, &[], &[task("s", 1)]);
    assert_eq!(attempts(&out), [5]);
}

/// Rule 2: tasks waiting for a worker are placed in the order they arrived, whatever their
/// ids. `z-1` is offered before `s-1`; the one free slot goes to `z-1`.
///
/// Kills `AdminTasks::enqueue`: `last_order += 1` → `*=` (every task the same arrival number,
/// so the queue falls back to id order).
#[test]
fn queued_tasks_are_placed_in_arrival_order_not_id_order() {
    let mut a = admin(&["w1", "s", "z"]);
    assert!(
        placements(&offer(&mut a, &task("z", 1))).is_empty(),
        "no worker yet"
    );
    assert!(placements(&offer(&mut a, &task("s", 1))).is_empty());
    assert_eq!(a.admin_tasks().unwrap().queue_len(), 2);
    let out = report(&mut a, "w1", 1, &[], &[]);
    assert_eq!(placements(&out), [(task("z", 1), "w1".to_owned())]);
}

/// Rule 8: a placement no report confirms is sent again after `RESEND_TICKS` task ticks, with
/// its placement number, while the lease holds.
///
/// Kills `AdminTasks::place`: `p.seq > 0` → `<` (no placement of this admin awaits
/// confirmation, so a lost one is never sent again).
#[test]
fn an_unconfirmed_placement_is_sent_again_after_three_ticks() {
    let mut a = admin(&["w1", "s"]);
    report(&mut a, "w1", 1, &[], &[]);
    let placed_at = a.now_ms();
    let out = offer(&mut a, &task("s", 1));
    assert_eq!(placements(&out), [(task("s", 1), "w1".to_owned())]);
    let seq_of = |out: &[Command]| {
        out.iter().find_map(|c| match c {
            Command::Send {
                msg: Message::TaskPlace { seq, .. },
                ..
            } => Some(*seq),
            _ => None,
        })
    };
    let first = seq_of(&out).expect("a placement number");
    // Task ticks are the heartbeat interval clamped to 1 s: the resend is due 3 s on.
    for _ in 0..32 {
        let (at, timer) = a.next_deadline().expect("a timer is armed");
        assert!(at <= placed_at + 3_000, "no resend by {at}");
        let out = a.step_vec(at, Event::TimerFired { timer });
        if let Some(seq) = seq_of(&out) {
            assert_eq!(at, placed_at + 3_000);
            assert_eq!(seq, first, "the same placement");
            assert_eq!(placements(&out), [(task("s", 1), "w1".to_owned())]);
            return;
        }
    }
    panic!("never sent again");
}

/// A worker that goes down leaves the admin's worker table (metrics count it no more, and it
/// is never a candidate for placement).
///
/// Kills `AdminTasks::remove_worker` → `()`.
#[test]
fn a_worker_that_goes_down_leaves_the_worker_table() {
    let mut a = admin(&["w1", "w2", "s"]);
    report(&mut a, "w1", 1, &[], &[]);
    report(&mut a, "w2", 1, &[], &[]);
    assert_eq!(a.admin_tasks().unwrap().worker_count(), 2);
    let now = a.now_ms();
    a.step_vec(now, Event::PeerDown { peer: "w1".into() });
    assert_eq!(a.admin_tasks().unwrap().worker_count(), 1);
    let out = offer(&mut a, &task("s", 1));
    assert_eq!(placements(&out), [(task("s", 1), "w2".to_owned())]);
}

/// Rule 3: a task a worker reported finished is answered `finished` when its submitter offers
/// it (its result is on the way), never queued and run again.
///
/// Kills `AdminTasks::remember_finished` → `()`.
#[test]
fn an_offer_of_a_task_reported_finished_is_answered_finished_not_run_again() {
    let mut a = admin(&["w1", "s"]);
    report(&mut a, "w1", 1, &[], &[task("s", 1)]);
    let out = offer(&mut a, &task("s", 1));
    assert!(placements(&out).is_empty(), "{out:?}");
    assert_eq!(
        sent_to(&out, "s"),
        [&Message::TaskState {
            task: task("s", 1),
            state: OfferState::Finished {
                worker: "w1".into()
            },
        }]
    );
    assert_eq!(a.admin_tasks().unwrap().queue_len(), 0);
}

/// Rule 3 and its bound: the admin remembers the last 4,096 finished tasks (the smallest ids
/// forgotten first); each is answered `finished`, every one of them, not only the latest.
///
/// Kills `AdminTasks::remember_finished`: `finished.len() >= MAX_FINISHED` → `<` (one
/// remembered at a time), and fails on `>=` → `>` (4,097 kept).
#[test]
fn the_admin_remembers_the_last_4096_finished_tasks() {
    let mut a = admin(&["w1", "s"]);
    let all: Vec<TaskId> = (1..=4_097).map(|n| task("s", n)).collect();
    for chunk in all[..4_096].chunks(1_024) {
        report(&mut a, "w1", 1, &[], chunk);
    }
    let finished = |a: &mut Core, t: &TaskId| {
        sent_to(&offer(a, t), "s").contains(&&Message::TaskState {
            task: t.clone(),
            state: OfferState::Finished {
                worker: "w1".into(),
            },
        })
    };
    assert!(
        finished(&mut a, &task("s", 1)),
        "the first of 4,096 still known"
    );
    assert!(finished(&mut a, &task("s", 4_096)));
    report(&mut a, "w1", 1, &[], &all[4_096..]);
    assert!(finished(&mut a, &task("s", 4_097)));
    assert!(finished(&mut a, &task("s", 2)));
    assert!(
        !finished(&mut a, &task("s", 1)),
        "one past the bound: the smallest forgotten"
    );
}

/// A worker report is bounded: at most 1,024 runs, finished tasks, released runs and slots
/// (`MAX_REPORTED`), each checked on its own; at the bound it counts, one past it the whole
/// report is refused as out of range.
///
/// Kills `on_worker_report`: each `len() > MAX_REPORTED` → `==`, `>=`, and each `||` of the
/// check → `&&`.
#[test]
fn each_list_of_a_worker_report_is_bounded_at_1024_on_its_own() {
    const MAX: usize = 1_024;
    let runs =
        |n: usize| -> Vec<(TaskId, u32)> { (1..=n as u64).map(|k| (task("s", k), 1)).collect() };
    let ids = |n: usize| -> Vec<TaskId> { (1..=n as u64).map(|k| task("x", k)).collect() };
    let send = |running: Vec<(TaskId, u32)>,
                finished: Vec<TaskId>,
                released: Vec<(TaskId, u32)>,
                slots: u32| {
        let mut a = admin(&["w1", "s", "x"]);
        let msg = Message::WorkerReport {
            term: a.term(),
            seen: 0,
            slots,
            capacity: Default::default(),
            running,
            finished,
            released,
            partial: false,
        };
        let now = a.now_ms();
        let out = a.step_vec(now, from("w1", msg));
        (refusals(&out), a.admin_tasks().unwrap().worker_count())
    };
    let refused = vec![(
        "w1".to_owned(),
        "worker_report".to_owned(),
        Refusal::OutOfRange,
    )];
    // At the bound: taken in (the worker joins the table).
    assert_eq!(send(runs(MAX), vec![], vec![], 1), (vec![], 1));
    assert_eq!(send(vec![], ids(MAX), vec![], 1), (vec![], 1));
    assert_eq!(send(vec![], vec![], runs(MAX), 1), (vec![], 1));
    assert_eq!(send(vec![], vec![], vec![], MAX as u32), (vec![], 1));
    // One past it, each alone: refused whole.
    assert_eq!(send(runs(MAX + 1), vec![], vec![], 1), (refused.clone(), 0));
    assert_eq!(send(vec![], ids(MAX + 1), vec![], 1), (refused.clone(), 0));
    assert_eq!(send(vec![], vec![], runs(MAX + 1), 1), (refused.clone(), 0));
    assert_eq!(send(vec![], vec![], vec![], MAX as u32 + 1), (refused, 0));
    // The placement number seen may be as large as any number on the wire.
    let mut a = admin(&["w1"]);
    let out = at(
        &mut a,
        0,
        "w1",
        Report {
            seen: MAX_WIRE_INT,
            ..Report::default()
        },
    );
    assert_eq!(
        (refusals(&out), a.admin_tasks().unwrap().worker_count()),
        (vec![], 1)
    );
}

/// A worker report's fields, for [`at`].
#[derive(Default)]
struct Report {
    seen: u64,
    running: Vec<(TaskId, u32)>,
    finished: Vec<TaskId>,
    released: Vec<(TaskId, u32)>,
    partial: bool,
}

/// `worker` (one slot) reports `r` to the admin `after` ms past the admin's last step.
fn at(a: &mut Core, after: u64, worker: &str, r: Report) -> Vec<Command> {
    let msg = Message::WorkerReport {
        term: a.term(),
        seen: r.seen,
        slots: 1,
        capacity: Default::default(),
        running: r.running,
        finished: r.finished,
        released: r.released,
        partial: r.partial,
    };
    let now = a.now_ms() + after;
    a.step_vec(now, from(worker, msg))
}

/// `s-1` placed on `w1` (one slot); returns the admin and the placement's number.
fn placed_on_w1() -> (Core, u64) {
    let mut a = admin(&["w1", "w2", "s"]);
    at(&mut a, 0, "w1", Report::default());
    let out = offer(&mut a, &task("s", 1));
    let seq = out
        .iter()
        .find_map(|c| match c {
            Command::Send {
                msg: Message::TaskPlace { seq, .. },
                ..
            } => Some(*seq),
            _ => None,
        })
        .expect("placed");
    (a, seq)
}

/// Rule 8: a report that mentions a placement — running or finished — confirms it: it is not
/// sent again, neither by that report nor by the ticks after it. A report of another worker
/// confirms nothing.
///
/// Kills `on_worker_report`: the confirmation's `p.worker == from` → `!=`, and the resend
/// filter's `unmentioned && seen_after` → `||`.
#[test]
fn a_report_that_mentions_a_placement_confirms_it() {
    let (mut a, seq) = placed_on_w1();
    let placed_at = a.now_ms();
    let running = Report {
        seen: seq,
        running: vec![(task("s", 1), 1)],
        ..Report::default()
    };
    // From the wrong worker: no confirmation (the resend below still comes).
    at(&mut a, 0, "w2", running);
    let (mut b, seq) = placed_on_w1();
    let out = at(
        &mut b,
        1_500,
        "w1",
        Report {
            seen: seq,
            running: vec![(task("s", 1), 1)],
            ..Report::default()
        },
    );
    assert!(
        placements(&out).is_empty(),
        "mentioned: not sent again {out:?}"
    );
    let fire_until = |c: &mut Core, until: u64| {
        let mut sent = vec![];
        while let Some((t, timer)) = c.next_deadline().filter(|(t, _)| *t <= until) {
            let t = t.max(c.now_ms());
            sent.extend(placements(&c.step_vec(t, Event::TimerFired { timer })));
        }
        sent
    };
    assert_eq!(fire_until(&mut b, placed_at + 6_000), vec![], "confirmed");
    assert_eq!(
        fire_until(&mut a, placed_at + 6_000).first(),
        Some(&(task("s", 1), "w1".to_owned())),
        "a report of another worker confirms nothing"
    );
    // A finished mention confirms too.
    let (mut c, seq) = placed_on_w1();
    let out = at(
        &mut c,
        1_500,
        "w1",
        Report {
            seen: seq,
            finished: vec![task("s", 1)],
            ..Report::default()
        },
    );
    assert!(placements(&out).is_empty(), "{out:?}");
}

/// Rule 5 (resend): a placement the report leaves out is sent again once the worker has seen
/// a later placement number, or a task tick (1 s) has passed since it was sent — not before.
#[test]
fn an_unmentioned_placement_is_sent_again_once_a_later_one_was_seen_or_a_tick_passed() {
    let quiet = |seen: u64| Report {
        seen,
        ..Report::default()
    };
    let (mut a, seq) = placed_on_w1();
    assert!(
        placements(&at(&mut a, 999, "w1", quiet(seq))).is_empty(),
        "too early"
    );
    let (mut a, seq) = placed_on_w1();
    assert_eq!(
        placements(&at(&mut a, 1_000, "w1", quiet(seq))),
        [(task("s", 1), "w1".to_owned())],
        "a tick on"
    );
    let (mut a, seq) = placed_on_w1();
    assert_eq!(
        placements(&at(&mut a, 0, "w1", quiet(seq + 1))),
        [(task("s", 1), "w1".to_owned())],
        "a later placement seen"
    );
}

/// Rule 5 (resend) and the worker's rule 7: a partial report — its lists did not fit one frame,
/// the rest come next — proves nothing of what it leaves out: the placement it does not
/// mention is not sent again, though a later one was seen and a tick passed. (Every tick the
/// worker's follow-ups went on to be answered by a flood of placements sent again, each making
/// the worker report again.)
#[test]
fn a_partial_report_does_not_make_the_admin_send_what_it_leaves_out_again() {
    let partial = |seen: u64| Report {
        seen,
        partial: true,
        ..Report::default()
    };
    let (mut a, seq) = placed_on_w1();
    assert!(
        placements(&at(&mut a, 1_000, "w1", partial(seq + 1))).is_empty(),
        "left out of a partial report"
    );
    // The rest of the round mentions it: confirmed, not sent again by the ticks either.
    let out = at(
        &mut a,
        0,
        "w1",
        Report {
            seen: seq + 1,
            running: vec![(task("s", 1), 1)],
            partial: true,
            ..Report::default()
        },
    );
    assert!(placements(&out).is_empty());
    let until = a.now_ms() + 6_000;
    while let Some((t, timer)) = a.next_deadline().filter(|(t, _)| *t <= until) {
        let t = t.max(a.now_ms());
        assert!(placements(&a.step_vec(t, Event::TimerFired { timer })).is_empty());
    }
}

/// Rule 5 (release): a release counts only for the run it names — this worker, this attempt —
/// and not while the same report still lists the task as running there; then the task is
/// queued again as the next attempt.
///
/// Kills `on_worker_report`: `p.worker == from && p.attempt == attempt` → `||`, and
/// `!this_run || running_set.contains(..)` → `&&`.
#[test]
fn a_release_counts_only_for_the_run_it_names() {
    let counts = |a: &Core| {
        let t = a.admin_tasks().unwrap();
        (t.placed_len(), t.queue_len())
    };
    let released = |attempt: u32| Report {
        released: vec![(task("s", 1), attempt)],
        ..Report::default()
    };
    let (mut a, _) = placed_on_w1();
    at(&mut a, 0, "w1", released(2));
    assert_eq!(counts(&a), (1, 0), "another attempt's release");
    at(&mut a, 0, "w2", released(1));
    assert_eq!(counts(&a), (1, 0), "another worker's release");
    at(
        &mut a,
        0,
        "w1",
        Report {
            running: vec![(task("s", 1), 1)],
            ..released(1)
        },
    );
    assert_eq!(counts(&a), (1, 0), "released but running here again");
    at(&mut a, 0, "w1", released(1));
    assert_eq!(counts(&a), (0, 1), "this run released: queued again");
}

/// Rule 5 (resend) is for this admin's own placements: a run adopted from a report (placement
/// number 0), whose spec its submitter has since given, is never sent as a placement when a
/// later report leaves it out.
///
/// Kills `on_worker_report`: `seen_after`'s `p.seq > 0 && …` → `||`.
#[test]
fn an_adopted_run_is_never_sent_as_a_placement() {
    let mut a = admin(&["w1", "s"]);
    at(
        &mut a,
        0,
        "w1",
        Report {
            running: vec![(task("s", 1), 1)],
            ..Report::default()
        },
    );
    let out = offer(&mut a, &task("s", 1));
    assert!(placements(&out).is_empty(), "{out:?}");
    let out = at(&mut a, 2_000, "w1", Report::default());
    assert!(placements(&out).is_empty(), "{out:?}");
}

/// Rule 6: a placed task its submitter cancels is asked to stop at once, and again at every
/// report of its worker that still lists it running (a cancel may be lost).
///
/// Kills `on_worker_report`: the stop filter's `p.worker == from` → `!=`.
#[test]
fn a_cancelled_run_is_asked_to_stop_again_at_each_report_that_lists_it() {
    let cancels = |out: &[Command], to: &str| {
        sent_to(out, to)
            .into_iter()
            .filter(|m| matches!(m, Message::TaskCancel { task, .. } if *task == task_s1()))
            .count()
    };
    fn task_s1() -> TaskId {
        task("s", 1)
    }
    let (mut a, seq) = placed_on_w1();
    let out = offer_cancel(&mut a);
    assert_eq!(cancels(&out, "w1"), 1, "asked at once");
    let running = || Report {
        seen: seq,
        running: vec![(task_s1(), 1)],
        ..Report::default()
    };
    let out = at(&mut a, 100, "w1", running());
    assert_eq!(cancels(&out, "w1"), 1, "asked again: still running");
    // Another worker listing it is not the run that was cancelled.
    let out = at(&mut a, 100, "w2", running());
    assert_eq!((cancels(&out, "w1"), cancels(&out, "w2")), (0, 0));
}

/// A worker that goes down takes its finished tasks' answers along: their results may never
/// reach their submitters, so an offer of one is queued again; the other workers' finished
/// tasks are still answered `finished`.
///
/// Kills `admin_peer_down`: `finished.retain(|_, w| w != peer)` → `==`.
#[test]
fn a_lost_worker_forgets_its_finished_tasks_and_only_its_own() {
    let mut a = admin(&["w1", "w2", "s"]);
    at(
        &mut a,
        0,
        "w1",
        Report {
            finished: vec![task("s", 1)],
            ..Report::default()
        },
    );
    at(
        &mut a,
        0,
        "w2",
        Report {
            finished: vec![task("s", 2)],
            ..Report::default()
        },
    );
    let now = a.now_ms();
    a.step_vec(now, Event::PeerDown { peer: "w1".into() });
    let out = offer(&mut a, &task("s", 2));
    assert_eq!(
        sent_to(&out, "s"),
        [&Message::TaskState {
            task: task("s", 2),
            state: OfferState::Finished {
                worker: "w2".into()
            },
        }]
    );
    let out = offer(&mut a, &task("s", 1));
    assert_eq!(
        placements(&out),
        [(task("s", 1), "w2".to_owned())],
        "run again"
    );
}

/// Rule 2 and the step bound: a step passes over at most 64 shapes of queued tasks that no
/// worker fits (`MAX_SKIPS_PER_STEP`), and the next step goes on from where it stopped, so a
/// task queued behind many that nothing can run is still placed — one step later, not never.
/// (Tasks of one shape are tried once a step: each of these needs its own capability.)
///
/// Found by the `cargo mutants` run (the skip counter's `+=` → `*=` survived): every step
/// started again from the head of the queue, so 64 tasks needing a capability no worker had
/// kept everything behind them queued for ever.
#[test]
fn tasks_behind_64_that_no_worker_fits_are_placed_a_step_later() {
    let mut a = admin(&["w1", "s"]);
    for seq in 1..=70 {
        let gpu = Arc::new(TaskSpec {
            requires: vec![format!("gpu{seq}")],
            ..(*spec()).clone()
        });
        let msg = Message::TaskOffer {
            task: task("s", seq),
            spec: gpu,
            cancel: false,
            attempt: 0,
            unplaceable_ms: 0,
        };
        let now = a.now_ms();
        a.step_vec(now, from("s", msg));
    }
    assert!(
        placements(&offer(&mut a, &task("s", 71))).is_empty(),
        "no worker yet"
    );
    // The worker's first report: the step passes over 64 gpu tasks and stops.
    let out = at(&mut a, 0, "w1", Report::default());
    assert!(
        placements(&out).is_empty(),
        "at most 64 passed over in one step: {out:?}"
    );
    // The next step goes on from there: 6 more, then the task that fits.
    let out = at(&mut a, 0, "w1", Report::default());
    assert_eq!(placements(&out), [(task("s", 71), "w1".to_owned())]);
    assert_eq!(a.admin_tasks().unwrap().queue_len(), 70);
    // A slot frees and another plain task comes: it is placed within those two steps, the
    // scan going round the queue (from the head again once it reached the end).
    let mut out = at(
        &mut a,
        0,
        "w1",
        Report {
            finished: vec![task("s", 71)],
            ..Report::default()
        },
    );
    out.extend(offer(&mut a, &task("s", 72)));
    assert_eq!(placements(&out), [(task("s", 72), "w1".to_owned())]);
}

// ---- The submitter (`task/submit.rs`) ------------------------------------------------------------

fn submit(c: &mut Core, key: Option<String>, request: u64) -> Vec<Command> {
    let now = c.now_ms();
    c.step_vec(
        now,
        Event::SubmitTask {
            spec: spec(),
            key,
            owner: None,
            request,
        },
    )
}

fn submit_notice(out: &[Command]) -> Option<Result<TaskId, String>> {
    out.iter().find_map(|c| match c {
        Command::Notice(Notice::TaskSubmitted { task, .. }) => Some(Ok(task.clone())),
        Command::Notice(Notice::TaskRefused { reason, .. }) => Some(Err(reason.clone())),
        _ => None,
    })
}

/// Submitter rule 1: an idempotency key is 1 to 256 bytes; at the bound it names a task, one
/// past it or empty the submit is refused, saying why.
///
/// Kills `on_submit_task`: `k.is_empty() || k.len() > NAME` → `&&`, `>` → `==`, `>=`.
#[test]
fn an_idempotency_key_is_one_to_256_bytes() {
    let mut s = voter("s", ABC);
    let ok = submit_notice(&submit(&mut s, Some("k".repeat(256)), 1));
    assert_eq!(ok, Some(Ok(task("s", 1))));
    for bad in [String::new(), "k".repeat(257)] {
        let refused = submit_notice(&submit(&mut s, Some(bad.clone()), 2));
        assert_eq!(
            refused,
            Some(Err("idempotency key must be 1 to 256 bytes".into())),
            "{} bytes",
            bad.len()
        );
    }
    // The same key again names the same task.
    let again = submit_notice(&submit(&mut s, Some("k".repeat(256)), 3));
    assert_eq!(again, Some(Ok(task("s", 1))));
}

/// The counts by phase the metrics export use each phase's own name.
///
/// Kills `TaskPhase::as_str` → `""`, `"xyzzy"`.
#[test]
fn owned_tasks_are_counted_by_the_name_of_their_phase() {
    let mut s = voter("s", ABC);
    submit(&mut s, None, 1);
    submit(&mut s, None, 2);
    let (phases, statuses) = s.task_counts();
    assert_eq!(phases.into_iter().collect::<Vec<_>>(), [("submitted", 2)]);
    assert!(statuses.is_empty());
    let names: Vec<&str> = [
        TaskPhase::Submitted,
        TaskPhase::Queued,
        TaskPhase::Placed {
            worker: "w".into(),
            attempt: 1,
        },
        TaskPhase::Finished { worker: "w".into() },
        TaskPhase::Done,
    ]
    .iter()
    .map(TaskPhase::as_str)
    .collect();
    assert_eq!(names, ["submitted", "queued", "placed", "finished", "done"]);
}

/// Rule 8's bound: a tick sends at most 1,024 placements again (`MAX_REPORTED`); the rest go
/// at the next tick.
///
/// Kills `admin_tick`: `count += 1` → `*=` (no bound).
#[test]
fn a_tick_sends_at_most_1024_placements_again() {
    let mut a = admin(&["w1", "w2", "s"]);
    report(&mut a, "w1", 1_024, &[], &[]);
    report(&mut a, "w2", 1_024, &[], &[]);
    let start = a.now_ms();
    let mut placed = 0;
    for seq in 1..=1_025 {
        placed += placements(&offer(&mut a, &task("s", seq))).len();
    }
    assert_eq!(placed, 1_025);
    let mut per_tick = vec![];
    while per_tick.len() < 2 {
        let (t, timer) = a.next_deadline().expect("a timer is armed");
        assert!(t <= start + 10_000, "no resend by {t}");
        let n = placements(&a.step_vec(t, Event::TimerFired { timer })).len();
        if n > 0 {
            per_tick.push(n);
        }
    }
    assert_eq!(per_tick, [1_024, 1]);
}

/// The offers `s` sends while its timers fire up to `until`: (time, admin, cancel).
fn offers_until(s: &mut Core, until: u64) -> Vec<(u64, String, bool)> {
    let mut seen = vec![];
    while let Some((t, timer)) = s.next_deadline().filter(|(t, _)| *t <= until) {
        let t = t.max(s.now_ms());
        seen.extend(offers(t, &s.step_vec(t, Event::TimerFired { timer })));
    }
    seen
}

fn offers(t: u64, out: &[Command]) -> Vec<(u64, String, bool)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send {
                to,
                msg: Message::TaskOffer { cancel, .. },
            } => Some((t, to.as_str().to_owned(), *cancel)),
            _ => None,
        })
        .collect()
}

/// Submitter rule 2: an unfinished task is offered to the admin of the moment — at once when
/// the (admin, term) it follows changes (the phase back to `submitted`), every tick (1 s)
/// while no admin answered, every ten ticks once one did — and a done task never is.
///
/// Kills `submitter_after_step` → `()`, its `offered_view == view` → `!=` and its
/// `phase != Done` → `==`; `submitter_tick`'s `Done` and `Submitted` arms deleted and its
/// `waited >= tick * REOFFER_TICKS` → `<`, `+`, `/`; `unfinished_tasks` → `vec![]` and its
/// `!=` → `==`.
#[test]
fn the_submitter_offers_at_once_to_a_new_admin_then_by_ticks_and_never_a_done_task() {
    let members = ["b", "c", "s"];
    let mut s = voter("s", &members);
    s.step_vec(100, from("b", heartbeat(1, 1)));
    let out = submit(&mut s, None, 1);
    assert_eq!(offers(100, &out), [(100, "b".to_owned(), false)]);
    // Nothing changed: no offer.
    let out = s.step_vec(200, from("b", heartbeat(1, 2)));
    assert_eq!(offers(200, &out), []);
    // No answer: again a tick after the offer.
    assert_eq!(offers_until(&mut s, 1_099), []);
    assert_eq!(
        offers_until(&mut s, 1_100),
        [(1_100, "b".to_owned(), false)]
    );
    // Queued: then every ten ticks only.
    let queued = Message::TaskState {
        task: task("s", 1),
        state: OfferState::Queued { pending: None },
    };
    s.step_vec(1_100, from("b", queued));
    assert_eq!(s.owned_tasks()[&task("s", 1)].phase, TaskPhase::Queued);
    assert_eq!(offers_until(&mut s, 11_099), []);
    assert_eq!(
        offers_until(&mut s, 11_100),
        [(11_100, "b".to_owned(), false)]
    );
    // A new admin (term 2): offered at once, the phase back to submitted.
    let out = s.step_vec(11_200, from("c", heartbeat(2, 3)));
    assert_eq!(offers(11_200, &out), [(11_200, "c".to_owned(), false)]);
    assert_eq!(s.owned_tasks()[&task("s", 1)].phase, TaskPhase::Submitted);
    // Its result comes: done, and never offered again — not at a tick, not to the next admin.
    let result = chorus_core::TaskResult {
        status: chorus_core::TaskStatus::Succeeded,
        exit_code: Some(0),
        signal: None,
        worker: "c".into(),
        attempt: 1,
        duration_ms: 5,
        usage: Default::default(),
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated_bytes: 0,
        stderr_truncated_bytes: 0,
        error: None,
        timings: Default::default(),
    };
    let done = Message::TaskResult {
        task: task("s", 1),
        result: result.into(),
    };
    s.step_vec(11_300, from("c", done));
    assert_eq!(s.owned_tasks()[&task("s", 1)].phase, TaskPhase::Done);
    let out = s.step_vec(11_400, from("b", heartbeat(3, 4)));
    assert_eq!(offers(11_400, &out), []);
    assert_eq!(offers_until(&mut s, 20_000), []);
    // Another task keeps the ticks going: only it is offered, never the done one.
    submit(&mut s, None, 2);
    let mut offered = vec![];
    while let Some((t, timer)) = s.next_deadline().filter(|(t, _)| *t <= 40_000) {
        let t = t.max(s.now_ms());
        for c in s.step_vec(t, Event::TimerFired { timer }) {
            if let Command::Send {
                msg: Message::TaskOffer { task, .. },
                ..
            } = c
            {
                offered.push(task.seq);
            }
        }
    }
    assert!(offered.len() >= 10, "{offered:?}");
    assert!(offered.iter().all(|&seq| seq == 2), "{offered:?}");
}

fn result_from(
    s: &mut Core,
    sender: &str,
    seq: u64,
    status: chorus_core::TaskStatus,
) -> Vec<Command> {
    let result = chorus_core::TaskResult {
        status,
        exit_code: None,
        signal: None,
        worker: sender.into(),
        attempt: 1,
        duration_ms: 0,
        usage: Default::default(),
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated_bytes: 0,
        stderr_truncated_bytes: 0,
        error: None,
        timings: Default::default(),
    };
    let now = s.now_ms();
    s.step_vec(
        now,
        from(
            sender,
            Message::TaskResult {
                task: task("s", seq),
                result: result.into(),
            },
        ),
    )
}

fn completed(out: &[Command]) -> usize {
    out.iter()
        .filter(|c| matches!(c, Command::Notice(Notice::TaskCompleted { .. })))
        .count()
}

/// Submitter rule 3: a result counts from a worker the admin named, or from the admin itself
/// (a task cancelled in its queue is answered by the admin, in the worker's place); from
/// anyone else it is refused.
///
/// Kills `on_task_result`: `named`'s second `||` → `&&` (the admin's result refused).
#[test]
fn a_result_counts_from_the_admin_that_cancelled_the_task_in_its_queue() {
    let mut s = voter("s", &["b", "c", "s"]);
    s.step_vec(100, from("b", heartbeat(1, 1)));
    submit(&mut s, None, 1);
    let out = result_from(&mut s, "c", 1, chorus_core::TaskStatus::Succeeded);
    assert_eq!(completed(&out), 0, "c is neither admin nor a named worker");
    let out = result_from(&mut s, "b", 1, chorus_core::TaskStatus::Cancelled);
    assert_eq!(completed(&out), 1, "{out:?}");
    assert_eq!(s.owned_tasks()[&task("s", 1)].phase, TaskPhase::Done);
    // Counted for the metrics by phase and by status.
    submit(&mut s, None, 2);
    let (phases, statuses) = s.task_counts();
    assert_eq!(
        phases.into_iter().collect::<Vec<_>>(),
        [("done", 1), ("submitted", 1)]
    );
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [(chorus_core::TaskStatus::Cancelled, 1)]
    );
}

/// The submitter's bounds: 4,096 unfinished tasks at once (a result frees a place), and the
/// last 1,024 done ones remembered, the oldest forgotten first with its idempotency key.
///
/// Kills `on_task_result`: `unfinished -= 1` → `+=`, `/=`; `forget_old_done_tasks` → `()`
/// and its `done.len() > MAX_DONE_TASKS` → `==`.
#[test]
fn a_submitter_owns_4096_unfinished_tasks_and_remembers_1024_done() {
    use chorus_core::TaskStatus::Succeeded;
    let mut s = voter("s", &["b", "c", "s"]);
    s.step_vec(100, from("b", heartbeat(1, 1)));
    let now = s.now_ms();
    let keyed = s.step_vec(
        now,
        Event::SubmitTask {
            spec: spec(),
            key: Some("first".into()),
            owner: None,
            request: 1,
        },
    );
    assert_eq!(submit_notice(&keyed), Some(Ok(task("s", 1))));
    for seq in 2..=4_096 {
        assert_eq!(
            submit_notice(&submit(&mut s, None, seq)),
            Some(Ok(task("s", seq)))
        );
    }
    let refused = submit_notice(&submit(&mut s, None, 4_097));
    assert_eq!(
        refused,
        Some(Err("this node owns 4096 unfinished tasks already".into()))
    );
    assert_eq!(completed(&result_from(&mut s, "b", 1, Succeeded)), 1);
    assert_eq!(
        submit_notice(&submit(&mut s, None, 4_098)),
        Some(Ok(task("s", 4_097)))
    );
    // 1,024 done: all remembered.
    for seq in 2..=1_024 {
        assert_eq!(completed(&result_from(&mut s, "b", seq, Succeeded)), 1);
    }
    let done = |s: &Core| {
        s.owned_tasks()
            .values()
            .filter(|t| t.phase == TaskPhase::Done)
            .count()
    };
    assert_eq!(done(&s), 1_024);
    assert!(s.owned_tasks().contains_key(&task("s", 1)));
    // One more: the oldest goes, and its key with it (the key now makes a new task).
    assert_eq!(completed(&result_from(&mut s, "b", 1_025, Succeeded)), 1);
    assert_eq!(done(&s), 1_024);
    assert!(!s.owned_tasks().contains_key(&task("s", 1)));
    assert!(s.owned_tasks().contains_key(&task("s", 2)));
    let now = s.now_ms();
    let again = s.step_vec(
        now,
        Event::SubmitTask {
            spec: spec(),
            key: Some("first".into()),
            owner: None,
            request: 2,
        },
    );
    assert_eq!(submit_notice(&again), Some(Ok(task("s", 4_098))));
}

/// One owner (an API token) leaves at most 1,024 unfinished tasks at a node, so it cannot lock
/// the others out; its idempotency keys are its own; an owner id is bounded like a name.
#[test]
fn an_owner_leaves_at_most_1024_unfinished_tasks_and_keeps_its_keys() {
    use chorus_core::TaskStatus::Succeeded;
    let mut s = voter("s", &["b", "c", "s"]);
    s.step_vec(100, from("b", heartbeat(1, 1)));
    let by = |s: &mut Core, owner: &str, key: Option<&str>, request: u64| {
        let now = s.now_ms();
        let out = s.step_vec(
            now,
            Event::SubmitTask {
                spec: spec(),
                key: key.map(str::to_owned),
                owner: Some(owner.to_owned()),
                request,
            },
        );
        submit_notice(&out)
    };
    assert_eq!(by(&mut s, "alice", Some("k"), 1), Some(Ok(task("s", 1))));
    for seq in 2..=1_024 {
        assert_eq!(by(&mut s, "alice", None, seq), Some(Ok(task("s", seq))));
    }
    let refused = by(&mut s, "alice", None, 1_025).unwrap().unwrap_err();
    assert!(refused.contains("1024 unfinished tasks"), "{refused}");
    // Another caller is not held back, and cannot take alice's key.
    assert_eq!(by(&mut s, "bob", None, 1_026), Some(Ok(task("s", 1_025))));
    let theirs = by(&mut s, "bob", Some("k"), 1_027).unwrap().unwrap_err();
    assert!(theirs.contains("another caller"), "{theirs}");
    assert_eq!(
        by(&mut s, "alice", Some("k"), 1_028),
        Some(Ok(task("s", 1)))
    );
    // A finished task frees a place.
    assert_eq!(completed(&result_from(&mut s, "b", 2, Succeeded)), 1);
    assert_eq!(by(&mut s, "alice", None, 1_029), Some(Ok(task("s", 1_026))));
    let long = "o".repeat(300);
    let bad = by(&mut s, &long, None, 1_030).unwrap().unwrap_err();
    assert!(bad.contains("owner must be"), "{bad}");
}

/// Issue 36: a spec's submitter is the submitting node's word (the API token it came with),
/// never the request's — a worker reuses sandboxes by it — and it travels in the offer.
#[test]
fn the_submitter_of_a_spec_is_the_nodes_word_not_the_requests() {
    let mut s = voter("s", &["b", "c", "s"]);
    s.step_vec(100, from("b", heartbeat(1, 1)));
    let forged = chorus_core::SharedSpec::new(TaskSpec {
        submitter: Some("alice".into()),
        ..(*spec()).clone()
    });
    for (request, owner) in [(1, Some("mallory")), (2, None)] {
        let now = s.now_ms();
        let out = s.step_vec(
            now,
            Event::SubmitTask {
                spec: forged.clone(),
                key: None,
                owner: owner.map(str::to_owned),
                request,
            },
        );
        let id = submit_notice(&out).unwrap().unwrap();
        let kept = s.owned_tasks()[&id].spec.submitter.clone();
        assert_eq!(kept.as_deref(), owner, "request {request}");
        let offered = sent_to(&out, "b").into_iter().find_map(|m| match m {
            Message::TaskOffer { spec, .. } => Some(spec.submitter.clone()),
            _ => None,
        });
        assert_eq!(offered, Some(owner.map(str::to_owned)), "request {request}");
    }
}

// ---- The worker (`task/work.rs`) -----------------------------------------------------------------

/// `w`, a member following the admin `b` (term 1), with `slots` task slots.
fn worker(slots: u32) -> Core {
    let mut w = voter("w", &["b", "c", "w"]);
    w.step_vec(
        50,
        Event::ResourcesSampled {
            resources: chorus_core::Resources {
                task_slots: slots,
                ..Default::default()
            },
        },
    );
    w.step_vec(100, from("b", heartbeat(1, 1)));
    w
}

/// Run 1 of `s-seq` exits 0 on `w`.
fn succeed(w: &mut Core, seq: u64) -> Vec<Command> {
    let exit = chorus_core::SandboxExit {
        exit_code: Some(0),
        ..Default::default()
    };
    let now = w.now_ms();
    let event = Event::SandboxExited {
        task: task("s", seq),
        attempt: 1,
        exit,
    };
    w.step_vec(now, event)
}

fn place(w: &mut Core, seq: u64) -> Vec<Command> {
    let msg = Message::TaskPlace {
        term: 1,
        task: task("s", seq),
        attempt: 1,
        seq,
        spec: spec(),
    };
    let now = w.now_ms();
    w.step_vec(now, from("b", msg))
}

/// The last report in `out` to `b`: (running, finished, released) task numbers.
fn last_report(out: &[Command]) -> Option<(Vec<u64>, Vec<u64>, Vec<u64>)> {
    sent_to(out, "b").into_iter().rev().find_map(|m| match m {
        Message::WorkerReport {
            running,
            finished,
            released,
            ..
        } => Some((
            running.iter().map(|(t, _)| t.seq).collect(),
            finished.iter().map(|t| t.seq).collect(),
            released.iter().map(|(t, _)| t.seq).collect(),
        )),
        _ => None,
    })
}

/// Worker rule 2 and 6: placements that do not fit (no free slot) are released, and every
/// release since is reported, not only the latest (up to 1,024).
///
/// Kills `WorkerTasks::release`: `released.len() == MAX_REPORTED` → `!=`.
#[test]
fn every_placement_a_full_worker_released_is_reported() {
    let mut w = worker(1);
    assert_eq!(w.task_slots(), 1);
    let out = place(&mut w, 1);
    assert!(out
        .iter()
        .any(|c| matches!(c, Command::StartSandbox { task, .. } if task.seq == 1)));
    place(&mut w, 2);
    let out = place(&mut w, 3);
    assert_eq!(last_report(&out), Some((vec![1], vec![], vec![2, 3])));
}

/// Worker rule 4: a result is kept until its submitter acknowledges it (and shown as such);
/// a node's slots are what it sampled last.
///
/// Kills `unacknowledged_results` → empty, `task_slots` → 0, 1.
#[test]
fn a_result_is_held_until_its_submitter_acknowledges_it() {
    let mut w = worker(3);
    assert_eq!(w.task_slots(), 3);
    place(&mut w, 1);
    let exit = chorus_core::SandboxExit {
        exit_code: Some(0),
        duration_ms: 7,
        ..Default::default()
    };
    let now = w.now_ms();
    w.step_vec(
        now,
        Event::SandboxExited {
            task: task("s", 1),
            attempt: 1,
            exit,
        },
    );
    let held: Vec<_> = w.unacknowledged_results().keys().cloned().collect();
    assert_eq!(held, [task("s", 1)]);
    assert_eq!(
        w.unacknowledged_results()[&task("s", 1)].status,
        chorus_core::TaskStatus::Succeeded
    );
    w.step_vec(
        now,
        from(
            "s",
            Message::TaskResultAck {
                task: task("s", 1),
                worker: None,
            },
        ),
    );
    assert!(w.unacknowledged_results().is_empty());
}

/// Worker rule 1 and the bounds: a placement from the admin is refused as out of range when its
/// spec breaks a bound or its run number is 0 — each on its own — and nothing starts.
///
/// Kills `on_task_place`: `spec.check().is_err() || attempt == 0` → `&&`.
#[test]
fn a_placement_with_a_bad_spec_or_run_number_0_is_refused() {
    let mut w = worker(2);
    let bad_spec = Arc::new(TaskSpec {
        timeout_ms: 0,
        ..(*spec()).clone()
    });
    for (what, attempt, spec) in [("run 0", 0, spec()), ("no timeout", 1, bad_spec)] {
        let msg = Message::TaskPlace {
            term: 1,
            task: task("s", 1),
            attempt,
            seq: 1,
            spec,
        };
        let now = w.now_ms();
        let out = w.step_vec(now, from("b", msg));
        assert_eq!(
            refusals(&out),
            [("b".to_owned(), "task_place".to_owned(), Refusal::OutOfRange)],
            "{what}"
        );
        assert!(w.running_tasks().is_empty(), "{what}");
    }
}

/// Worker rule 1: a placement counts only from the admin this node follows, in this node's
/// term: one from an older term is stale, one from a later term (not heard of yet) or from
/// another node unsolicited; nothing starts.
///
/// Kills `check_my_admin`: `term < self.term` → `>`, `term > self.term` → `<`.
#[test]
fn placements_count_only_from_the_admin_of_this_term() {
    let mut w = worker(2);
    // b is admin again in term 2.
    w.step_vec(200, from("b", heartbeat(2, 2)));
    let place_in = |w: &mut Core, sender: &str, term: u64| {
        let msg = Message::TaskPlace {
            term,
            task: task("s", 1),
            attempt: 1,
            seq: 1,
            spec: spec(),
        };
        let now = w.now_ms();
        refusals(&w.step_vec(now, from(sender, msg)))
    };
    let refused = |r: Refusal| vec![("b".to_owned(), "task_place".to_owned(), r)];
    assert_eq!(place_in(&mut w, "b", 1), refused(Refusal::Stale));
    assert_eq!(place_in(&mut w, "b", 3), refused(Refusal::Unsolicited));
    assert_eq!(
        place_in(&mut w, "c", 2),
        [(
            "c".to_owned(),
            "task_place".to_owned(),
            Refusal::Unsolicited
        )]
    );
    assert!(w.running_tasks().is_empty());
    assert_eq!(place_in(&mut w, "b", 2), []);
    assert_eq!(w.running_tasks().len(), 1);
}

/// Worker rule 2: a placement the worker cannot run — a capability it lacks, though a slot is
/// free — is released, not started.
///
/// Kills `on_task_place`: `free == 0 || !spec.fits(..)` → `&&`.
#[test]
fn a_placement_needing_a_capability_the_worker_lacks_is_released() {
    let mut w = worker(2);
    let msg = Message::TaskPlace {
        term: 1,
        task: task("s", 1),
        attempt: 1,
        seq: 1,
        spec: Arc::new(TaskSpec {
            requires: vec!["gpu".into()],
            ..(*spec()).clone()
        }),
    };
    let now = w.now_ms();
    let out = w.step_vec(now, from("b", msg));
    assert!(w.running_tasks().is_empty(), "{out:?}");
    assert_eq!(last_report(&out), Some((vec![], vec![], vec![1])));
}

/// Worker rule 6: the report's `seen` is the highest placement number of the admin's term,
/// even when placements arrive out of order.
///
/// Kills `on_task_place`: `w.seen.0 == term` → `!=`.
#[test]
fn the_highest_placement_number_seen_is_reported() {
    let mut w = worker(4);
    let seen = |out: &[Command]| {
        sent_to(out, "b").into_iter().rev().find_map(|m| match m {
            Message::WorkerReport { seen, .. } => Some(*seen),
            _ => None,
        })
    };
    assert_eq!(seen(&place(&mut w, 5)), Some(5));
    assert_eq!(
        seen(&place(&mut w, 3)),
        Some(5),
        "an earlier one arriving late"
    );
    assert_eq!(seen(&place(&mut w, 6)), Some(6));
}

/// Worker rule 2: a task whose result this worker still holds (not yet acknowledged) is not
/// started again when its placement comes again (a resend); the worker only reports it.
///
/// Kills `on_task_place`: `running.contains_key(..) || results.contains_key(..)` → `&&`.
#[test]
fn a_placement_of_a_task_whose_result_is_held_does_not_start_it_again() {
    let mut w = worker(2);
    place(&mut w, 1);
    succeed(&mut w, 1);
    let out = place(&mut w, 1);
    assert!(
        !out.iter()
            .any(|c| matches!(c, Command::StartSandbox { .. })),
        "{out:?}"
    );
    assert!(w.running_tasks().is_empty());
    assert_eq!(last_report(&out), Some((vec![], vec![1], vec![])));
}

/// Worker rule 6: a node without slots still reports every four beats while it holds a result
/// its submitter has not acknowledged, so an admin that missed it learns the task finished.
///
/// Kills `worker_after_step`: `active`'s last `||` → `&&` (held results alone kept no report
/// going).
#[test]
fn a_worker_without_slots_keeps_reporting_a_result_it_holds() {
    let mut w = worker(1);
    place(&mut w, 1);
    let now = w.now_ms();
    succeed(&mut w, 1);
    // Its slots go: said at once.
    let out = w.step_vec(
        now + 10,
        Event::ResourcesSampled {
            resources: chorus_core::Resources::default(),
        },
    );
    assert_eq!(last_report(&out), Some((vec![], vec![1], vec![])));
    // Beats 2 to 4: nothing new to say; beat 5 is four after the last report.
    for beat in 2..=4 {
        let out = w.step_vec(now + 20 * beat, from("b", heartbeat(1, beat)));
        assert_eq!(last_report(&out), None, "beat {beat}");
    }
    let out = w.step_vec(now + 100, from("b", heartbeat(1, 5)));
    assert_eq!(last_report(&out), Some((vec![], vec![1], vec![])));
}

/// Worker rule 6: a worker reports to its admin at once when the admin's term changes — even
/// when the same node is admin again — and otherwise every four beats, not at every step.
///
/// Kills `worker_after_step`: `due`'s `|| *term != self.term` → `&&`, and fails on its
/// `*a != admin` → `==` and `*term != self.term` → `==` (a report at every step).
#[test]
fn a_worker_reports_at_once_to_an_admin_reelected_and_not_at_every_step() {
    let mut w = worker(2);
    let out = w.step_vec(200, from("b", heartbeat(1, 2)));
    assert_eq!(last_report(&out), None, "the same admin, the same term");
    let out = w.step_vec(300, from("b", heartbeat(2, 3)));
    assert_eq!(
        last_report(&out),
        Some((vec![], vec![], vec![])),
        "b again, term 2"
    );
    let out = w.step_vec(400, from("b", heartbeat(2, 4)));
    assert_eq!(last_report(&out), None);
}

// ---- Cancelled runs are never run again (issue 38, semantic mutants) ---------------------------

/// The task placements `a` sends while its timers fire up to `until`.
fn placements_until(a: &mut Core, until: u64) -> Vec<(TaskId, String)> {
    let mut sent = vec![];
    while let Some((t, timer)) = a.next_deadline().filter(|(t, _)| *t <= until) {
        let t = t.max(a.now_ms());
        sent.extend(placements(&a.step_vec(t, Event::TimerFired { timer })));
    }
    sent
}

/// The submitter `s` offers `s-1` again, asking to cancel it; the admin's commands.
fn offer_cancel(a: &mut Core) -> Vec<Command> {
    let msg = Message::TaskOffer {
        task: task("s", 1),
        spec: spec(),
        cancel: true,
        attempt: 0,
        unplaceable_ms: 0,
    };
    let now = a.now_ms();
    a.step_vec(now, from("s", msg))
}

/// `s-1` placed on `w1`, then cancelled by its submitter: the admin asks `w1` to stop it.
fn cancelled_on_w1() -> Core {
    let (mut a, _) = placed_on_w1();
    let out = offer_cancel(&mut a);
    assert!(
        (sent_to(&out, "w1").iter()).any(|m| matches!(m, Message::TaskCancel { .. })),
        "{out:?}"
    );
    a
}

/// Admin rules 5 and 6 together: a cancelled run its worker gives back (it failed retryably
/// before the cancel reached it) is not queued again, and no worker is handed it after the
/// backoff; the submitter's next cancelling offer is answered with a cancelled result by the
/// admin.
///
/// Kills the hand-made semantic mutant "the release path re-queues a placement without looking
/// at its cancelled flag" — which was the code before this test (docs/mutants.md, semantic
/// mutants): the task was placed on `w2` two ticks later and ran again.
#[test]
fn a_cancelled_run_given_back_by_its_worker_is_not_placed_again() {
    let mut a = cancelled_on_w1();
    at(
        &mut a,
        0,
        "w1",
        Report {
            released: vec![(task("s", 1), 1)],
            ..Report::default()
        },
    );
    at(&mut a, 0, "w2", Report::default());
    let t = a.admin_tasks().unwrap();
    assert_eq!(
        (t.placed_len(), t.queue_len()),
        (0, 0),
        "neither placed nor queued"
    );
    let until = a.now_ms() + 10_000;
    assert_eq!(placements_until(&mut a, until), [], "never run again");
    let out = offer_cancel(&mut a);
    assert!(
        matches!(
            sent_to(&out, "s").as_slice(),
            [Message::TaskResult { result, .. }] if result.status == chorus_core::TaskStatus::Cancelled
        ),
        "{out:?}"
    );
}

/// Admin rules 5 and 6: a cancelled run whose worker goes down is not queued again (the worker
/// took the run along; running it elsewhere would run a task its submitter cancelled).
///
/// Kills the hand-made semantic mutant "`admin_peer_down` re-queues a placement without looking
/// at its cancelled flag" — the code before this test: the task went to `w2` at the next tick.
#[test]
fn a_cancelled_run_whose_worker_goes_down_is_not_placed_again() {
    let mut a = cancelled_on_w1();
    at(&mut a, 0, "w2", Report::default());
    let now = a.now_ms();
    a.step_vec(now, Event::PeerDown { peer: "w1".into() });
    let t = a.admin_tasks().unwrap();
    assert_eq!(
        (t.placed_len(), t.queue_len()),
        (0, 0),
        "neither placed nor queued"
    );
    let until = a.now_ms() + 10_000;
    assert_eq!(placements_until(&mut a, until), [], "never run again");
    // A placement not cancelled is still queued again at once when its worker goes down, and
    // goes to w2.
    let (mut a, _) = placed_on_w1();
    at(&mut a, 0, "w2", Report::default());
    let now = a.now_ms();
    let mut sent = placements(&a.step_vec(now, Event::PeerDown { peer: "w1".into() }));
    let until = a.now_ms() + 10_000;
    sent.extend(placements_until(&mut a, until));
    assert_eq!(sent.first(), Some(&(task("s", 1), "w2".to_owned())));
}

/// Worker rule 3: a run the admin asked to stop that then fails retryably (the sandbox errs
/// while it is being stopped, or the node restarts under it) ends as a cancelled result; it is
/// not given back to the admin to run again.
///
/// Kills the hand-made semantic mutant `run_failed`'s `retryable && !stopping && …` →
/// `retryable && …` (a cancelled run released, queued and run again).
#[test]
fn a_cancelled_run_that_fails_retryably_ends_cancelled_and_is_not_given_back() {
    for restart in [false, true] {
        let mut w = worker(1);
        place(&mut w, 1);
        let now = w.now_ms();
        let out = w.step_vec(
            now,
            from(
                "b",
                Message::TaskCancel {
                    term: 1,
                    task: task("s", 1),
                },
            ),
        );
        assert!(
            out.iter()
                .any(|c| matches!(c, Command::StopSandbox { task, .. } if task.seq == 1)),
            "{out:?}"
        );
        let out = if restart {
            w.step_vec(now + 1, Event::Started)
        } else {
            let failed = Event::SandboxFailed {
                task: task("s", 1),
                attempt: 1,
                error: "sandbox: stop timed out".into(),
                retryable: true,
            };
            w.step_vec(now + 1, failed)
        };
        let status = out.iter().find_map(|c| match c {
            Command::Notice(Notice::TaskFinished { status, .. }) => Some(*status),
            _ => None,
        });
        assert_eq!(
            status,
            Some(Some(chorus_core::TaskStatus::Cancelled)),
            "restart {restart}: {out:?}"
        );
        assert!(
            (sent_to(&out, "s").iter()).any(|m| matches!(m, Message::TaskResult { result, .. }
                if result.status == chorus_core::TaskStatus::Cancelled)),
            "restart {restart}: the submitter is told: {out:?}"
        );
        // Whatever report goes out next lists it finished, never released.
        let now = w.now_ms();
        let out = w.step_vec(now + 1, from("b", heartbeat(1, 2)));
        if let Some((_, _, released)) = last_report(&out) {
            assert_eq!(released, Vec::<u64>::new(), "restart {restart}");
        }
    }
}

// ---- Memory and CPU (issue 33) ---------------------------------------------------------------

fn cap(memory_mb: u32, cpu_millis: u32) -> TaskCapacity {
    TaskCapacity {
        memory_mb,
        cpu_millis,
        ..TaskCapacity::default()
    }
}

/// `worker` reports `slots` and `capacity`, running `running` and having finished `finished`.
fn report_with(
    a: &mut Core,
    worker: &str,
    (slots, capacity): (u32, TaskCapacity),
    running: &[(TaskId, u32)],
    finished: &[TaskId],
) -> Vec<Command> {
    let msg = Message::WorkerReport {
        term: a.term(),
        seen: 0,
        slots,
        capacity,
        running: running.to_vec(),
        finished: finished.to_vec(),
        released: vec![],
        partial: false,
    };
    let now = a.now_ms();
    a.step_vec(now, from(worker, msg))
}

/// `t` offered with limits of `memory_mb` and `cpu_millis` (0: the worker's default).
fn offer_limits(a: &mut Core, t: &TaskId, memory_mb: u32, cpu_millis: u32) -> Vec<Command> {
    let spec = TaskSpec {
        memory_mb,
        cpu_millis,
        ..(*spec()).clone()
    };
    let msg = Message::TaskOffer {
        task: t.clone(),
        spec: Arc::new(spec),
        cancel: false,
        attempt: 0,
        unplaceable_ms: 0,
    };
    let now = a.now_ms();
    a.step_vec(now, from(t.origin.as_str(), msg))
}

fn on(t: u64, w: &str) -> Vec<(TaskId, String)> {
    vec![(task("s", t), w.to_owned())]
}

/// Rule 2: a task goes only where its memory fits beside what the admin placed there, though
/// slots are free; a worker that has room takes it, and memory freed by a finished run counts
/// again. (Slots alone counted: four 600 MiB tasks went to a worker offering 1 GiB.)
#[test]
fn a_task_is_placed_only_where_its_memory_fits_beside_what_is_placed_there() {
    let mut a = admin(&["w1", "w2", "s"]);
    report_with(&mut a, "w1", (4, cap(1_024, 0)), &[], &[]);
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 1), 600, 0)),
        on(1, "w1")
    );
    // 424 MiB left on w1: s-2 waits, a slot free or not.
    assert_eq!(placements(&offer_limits(&mut a, &task("s", 2), 600, 0)), []);
    assert_eq!(a.admin_tasks().unwrap().queue_len(), 1);
    // w2 offers 2 GiB: s-2 goes there.
    let out = report_with(&mut a, "w2", (4, cap(2_048, 0)), &[], &[]);
    assert_eq!(placements(&out), on(2, "w2"));
    // w2 has 1,448 MiB left, w1 424: 1,000 MiB go to w2, though w1 is less loaded by slots.
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 3), 1_000, 0)),
        on(3, "w2")
    );
    // s-1 ends on w1: its 600 MiB are free again.
    report_with(&mut a, "w1", (4, cap(1_024, 0)), &[], &[task("s", 1)]);
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 4), 1_000, 0)),
        on(4, "w1")
    );
}

/// Rule 2: CPU counts as memory does, and a task that names no limit counts as what the worker
/// says it gives such a task (its default).
#[test]
fn cpu_counts_too_and_a_limit_of_0_counts_as_the_workers_default() {
    let mut a = admin(&["w1", "s"]);
    let capacity = TaskCapacity {
        default_cpu_millis: 1_000,
        ..cap(0, 2_000)
    };
    report_with(&mut a, "w1", (4, capacity), &[], &[]);
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 1), 0, 0)),
        on(1, "w1")
    );
    // 1,000 millicores left.
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 2), 0, 1_500)),
        []
    );
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 3), 0, 0)),
        on(3, "w1")
    );
    assert_eq!(placements(&offer_limits(&mut a, &task("s", 4), 0, 0)), []);
    // s-2 and s-4 wait (w1 says nothing of memory: memory is not counted).
    assert_eq!(a.admin_tasks().unwrap().queue_len(), 2);
}

/// Rule 2: never on a worker whose ceiling of one task the task exceeds, however much it has in
/// all; a worker that says nothing of memory (an older build) is placed on by its slots alone.
#[test]
fn a_task_above_a_workers_ceiling_of_one_task_is_not_placed_there() {
    let mut a = admin(&["w1", "w2", "s"]);
    let capacity = TaskCapacity {
        task_memory_mb: 1_024,
        ..cap(8_192, 0)
    };
    report_with(&mut a, "w1", (4, capacity), &[], &[]);
    report_with(&mut a, "w2", (1, TaskCapacity::default()), &[], &[]);
    // w1 sorts first, but 2 GiB are above its ceiling: w2, which says nothing, takes it.
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 1), 2_048, 0)),
        on(1, "w2")
    );
    // w2 is full: the next one waits rather than go to w1.
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 2), 2_048, 0)),
        []
    );
    // At the ceiling is within it.
    assert_eq!(
        placements(&offer_limits(&mut a, &task("s", 3), 1_024, 0)),
        on(3, "w1")
    );
}

/// Rule 2: a run adopted from a report counts at the worker's default until its submitter's
/// offer names its limits; then those count.
#[test]
fn an_adopted_run_counts_at_the_default_until_its_offer_names_its_limits() {
    let mut a = admin(&["w1", "s"]);
    let capacity = TaskCapacity {
        default_memory_mb: 400,
        ..cap(1_000, 0)
    };
    report_with(&mut a, "w1", (4, capacity), &[(task("s", 1), 1)], &[]);
    // 400 taken by the adopted run: 600 fit, 601 do not.
    assert_eq!(placements(&offer_limits(&mut a, &task("s", 2), 601, 0)), []);
    let mut b = admin(&["w1", "s"]);
    report_with(&mut b, "w1", (4, capacity), &[(task("s", 1), 1)], &[]);
    assert_eq!(
        placements(&offer_limits(&mut b, &task("s", 2), 600, 0)),
        on(2, "w1")
    );
    // The adopted run's offer says it has 100 MiB: 300 more fit now.
    offer_limits(&mut b, &task("s", 1), 100, 0);
    assert_eq!(
        placements(&offer_limits(&mut b, &task("s", 3), 300, 0)),
        on(3, "w1")
    );
    assert_eq!(placements(&offer_limits(&mut b, &task("s", 4), 1, 0)), []);
}

// ---- Unplaceable tasks (issue 33) ------------------------------------------------------------

/// Submitter rule 7: what the admin says of why a task waits is kept (the API shows it) and
/// the count offered along to the next admin; the admin saying a worker could run it clears
/// both, and a reason longer than 1 KiB, or a count out of range, is refused.
#[test]
fn the_submitter_keeps_why_its_task_waits_and_offers_the_count_along() {
    let mut s = voter("s", &["b", "c", "s"]);
    s.step_vec(100, from("b", heartbeat(1, 1)));
    submit(&mut s, None, 1);
    let state = |pending| Message::TaskState {
        task: task("s", 1),
        state: OfferState::Queued {
            pending: Some(pending),
        },
    };
    let unplaceable = |reason: &str, for_ms| {
        state(chorus_core::task::Pending::Unplaceable {
            reason: reason.into(),
            for_ms,
        })
    };
    let why = "no worker offers gpu (3 workers checked)";
    s.step_vec(200, from("b", unplaceable(why, 1_500)));
    let t = &s.owned_tasks()[&task("s", 1)];
    assert_eq!((t.pending.as_deref(), t.unplaceable_ms), (Some(why), 1_500));
    // Out of range: refused, nothing kept.
    let out = s.step_vec(300, from("b", unplaceable(&"x".repeat(1_025), 2_000)));
    assert_eq!(refusals(&out).len(), 1);
    let out = s.step_vec(300, from("b", unplaceable(why, MAX_WIRE_INT + 1)));
    assert_eq!(refusals(&out).len(), 1);
    assert_eq!(s.owned_tasks()[&task("s", 1)].unplaceable_ms, 1_500);
    // The next admin is offered the count.
    let out = s.step_vec(400, from("c", heartbeat(2, 2)));
    let carried: Vec<u64> = sent_to(&out, "c")
        .into_iter()
        .filter_map(|m| match m {
            Message::TaskOffer { unplaceable_ms, .. } => Some(*unplaceable_ms),
            _ => None,
        })
        .collect();
    assert_eq!(carried, [1_500]);
    // A worker could run it after all: cleared.
    s.step_vec(500, from("c", state(chorus_core::task::Pending::Room)));
    let t = &s.owned_tasks()[&task("s", 1)];
    assert_eq!((t.pending.as_deref(), t.unplaceable_ms), (None, 0));
}

/// `a`, admin of a, b, c with a lease of 300 s (no acknowledgements needed meanwhile) and 1 s
/// task ticks, connected to `peers`.
fn patient_admin(peers: &[&str]) -> Core {
    let config = chorus_core::Config {
        heartbeat_interval_ms: 1_000,
        election_timeout_min_ms: 300_000,
        election_timeout_max_ms: 400_000,
        ..chorus_core::Config::default()
    };
    let mut a = one_core::voter_with("a", ABC, config);
    win(&mut a, &["b"]);
    let now = a.now_ms();
    for p in peers {
        a.step_vec(now, Event::peer_up((*p).into(), PeerInfo::default()));
    }
    a
}

/// Fires `a`'s timers until `until`; returns what it sent to `to`, with when.
fn sent_until(a: &mut Core, until: u64, to: &str) -> Vec<(u64, Message)> {
    let mut sent = vec![];
    while let Some((t, timer)) = a.next_deadline().filter(|(t, _)| *t <= until) {
        let t = t.max(a.now_ms());
        let out = a.step_vec(t, Event::TimerFired { timer });
        sent.extend(sent_to(&out, to).into_iter().map(|m| (t, m.clone())));
    }
    sent
}

fn gpu_offer(a: &mut Core, seq: u64, unplaceable_ms: u64) -> Vec<Command> {
    let msg = Message::TaskOffer {
        task: task("s", seq),
        spec: Arc::new(TaskSpec {
            requires: vec!["gpu".into()],
            ..(*spec()).clone()
        }),
        cancel: false,
        attempt: 0,
        unplaceable_ms,
    };
    let now = a.now_ms();
    a.step_vec(now, from("s", msg))
}

/// Admin rule 10: a task no worker can run is judged after the admin's first 3 ticks, its
/// submitter told why, and ended `unschedulable` 60 ticks (60 s) after — not before; a
/// submitter that offers it again (its result lost) gets the result again at once.
#[test]
fn the_admin_ends_a_task_no_worker_can_run_after_60_ticks_and_answers_again() {
    let mut a = patient_admin(&["w1", "s"]);
    let elected = a.now_ms();
    report(&mut a, "w1", 1, &[], &[]);
    let out = gpu_offer(&mut a, 1, 0);
    assert_eq!(
        sent_to(&out, "s"),
        [&Message::TaskState {
            task: task("s", 1),
            state: OfferState::Queued { pending: None },
        }]
    );
    let sent = sent_until(&mut a, elected + 120_000, "s");
    let why = "no worker offers gpu (1 worker checked)";
    let (told, first) = &sent[0];
    assert_eq!(
        first,
        &Message::TaskState {
            task: task("s", 1),
            state: OfferState::Queued {
                pending: Some(chorus_core::task::Pending::Unplaceable {
                    reason: why.into(),
                    for_ms: 0,
                }),
            },
        }
    );
    assert_eq!(*told, elected + 3_000, "after the admin's first 3 ticks");
    let results: Vec<(u64, chorus_core::TaskResult)> = sent
        .iter()
        .filter_map(|(t, m)| match m {
            Message::TaskResult { result, .. } => Some((*t, (**result).clone())),
            _ => None,
        })
        .collect();
    let [(ended, result)] = &results[..] else {
        panic!("one result: {sent:?}");
    };
    assert_eq!(*ended, told + 60_000);
    assert_eq!(result.status, chorus_core::TaskStatus::Unschedulable);
    assert!(result.error.as_deref().unwrap_or("").contains(why));
    assert_eq!(sent.len(), 2, "told once, then the result: {sent:?}");
    // The result was lost: the next offer gets it again, not a new count.
    let out = gpu_offer(&mut a, 1, 59_000);
    let again = Message::TaskResult {
        task: task("s", 1),
        result: Box::new(result.clone()),
    };
    assert_eq!(sent_to(&out, "s"), [&again]);
}

/// Admin rule 10: a new admin counts on from the count its submitter carries, but ends the
/// task only after 2 heartbeat intervals of its own watching (a worker whose first report was
/// lost reports within them).
#[test]
fn a_new_admin_counts_on_from_the_carried_count_after_a_window_of_its_own() {
    let mut a = patient_admin(&["w1", "s"]);
    report(&mut a, "w1", 1, &[], &[]);
    let offered = a.now_ms();
    // 50 s so far: 10 s left.
    gpu_offer(&mut a, 1, 50_000);
    // 59.5 s so far: 2 s left (its own window), not 0.5 s.
    gpu_offer(&mut a, 2, 59_500);
    let sent = sent_until(&mut a, offered + 120_000, "s");
    let ended: Vec<(u64, u64)> = sent
        .iter()
        .filter_map(|(t, m)| match m {
            Message::TaskResult { task, .. } => Some((task.seq, t - offered)),
            _ => None,
        })
        .collect();
    // Judged first at the admin's third tick (3 s), then 10 s and 2 s to go.
    assert_eq!(ended, [(2, 5_000), (1, 13_000)]);
}

/// Admin rule 10 across a snapshot: a queued task's carried count is part of the admin's
/// state, so a core restored from its snapshot (a replay that starts from one) ends the task
/// when the original does — 13 s after the offer, as above — not after 60 s of its own.
///
/// Fails on `place.rs`'s `is_zero` (the `skip_serializing_if` of `carried_ms`) returning
/// `true`, or with `==` as `!=`: the snapshot drops the count.
#[test]
fn a_snapshot_keeps_a_queued_tasks_carried_count() {
    let mut a = patient_admin(&["w1", "s"]);
    report(&mut a, "w1", 1, &[], &[]);
    let offered = a.now_ms();
    gpu_offer(&mut a, 1, 50_000);
    let mut back = Core::restore(&a.snapshot()).expect("restores");
    let ended = |c: &mut Core| -> Vec<(u64, u64)> {
        sent_until(c, offered + 120_000, "s")
            .iter()
            .filter_map(|(t, m)| match m {
                Message::TaskResult { task, .. } => Some((task.seq, t - offered)),
                _ => None,
            })
            .collect()
    };
    let original = ended(&mut a);
    assert_eq!(original, [(1, 13_000)]);
    assert_eq!(ended(&mut back), original, "restored from the snapshot");
}

/// Worker rule 6 (issue 54): a report sent before the connection to the admin was up may be
/// lost, and the next was four beats away (60 s at the default 15 s heartbeat) — a joining
/// worker's slots sat unseen. When a connection to the admin it reported to comes up, the
/// worker reports again at once, once; another peer's connection changes nothing.
#[test]
fn a_worker_reports_again_when_its_connection_to_the_admin_comes_up() {
    let mut w = worker(2);
    w.step_vec(150, Event::PeerDown { peer: "b".into() });
    let out = w.step_vec(160, Event::peer_up("c".into(), PeerInfo::default()));
    assert_eq!(last_report(&out), None, "c is not the admin");
    let out = w.step_vec(200, Event::peer_up("b".into(), PeerInfo::default()));
    assert_eq!(
        last_report(&out),
        Some((vec![], vec![], vec![])),
        "the admin's connection came up"
    );
    let out = w.step_vec(210, from("b", heartbeat(1, 2)));
    assert_eq!(last_report(&out), None, "one report per connection");
}

// Live sandboxes (`place.rs` rule 14, `work.rs` rule 8; docs/design.md §4.8).

fn live_spec() -> Arc<TaskSpec> {
    Arc::new(TaskSpec {
        image: "img".into(),
        command: vec![],
        timeout_ms: 600_000,
        live: true,
        ..Default::default()
    })
}

fn offer_live(a: &mut Core, t: &TaskId, attempt: u32) -> Vec<Command> {
    let msg = Message::TaskOffer {
        task: t.clone(),
        spec: live_spec(),
        cancel: false,
        attempt,
        unplaceable_ms: 0,
    };
    let now = a.now_ms();
    a.step_vec(now, from(t.origin.as_str(), msg))
}

/// Steps `a`'s timers until `until` (its own clock), `b` acknowledging every heartbeat so the
/// lease holds, gathering what it sends.
fn run_to(a: &mut Core, until: u64) -> Vec<Command> {
    let mut all = Vec::new();
    while let Some((at, timer)) = a.next_deadline() {
        if at > until {
            break;
        }
        let out = a.step_vec(at, Event::TimerFired { timer });
        let beats = out.iter().filter_map(|c| match c {
            Command::Broadcast { msg } => Some(msg),
            Command::Send { to, msg } if to.as_str() == "b" => Some(msg),
            _ => None,
        });
        for m in beats.collect::<Vec<_>>() {
            if let Message::Heartbeat { term, beat, .. } = m {
                let ack = Message::HeartbeatAck {
                    term: *term,
                    beat: *beat,
                    promise_ms: a.config().election_timeout_min_ms,
                    holds: false,
                    endorsement: None,
                    certified: 0,
                };
                all.extend(a.step_vec(at, from("b", ack)));
            }
        }
        all.extend(out);
    }
    if a.now_ms() < until {
        // Time passes to `until` (a timer not armed fires as nothing).
        let tick = Event::TimerFired {
            timer: chorus_core::Timer::Tasks,
        };
        all.extend(a.step_vec(until, tick));
    }
    all
}

/// The results `out` sends to `to`, with their status.
fn results_to(out: &[Command], to: &str) -> Vec<(TaskId, chorus_core::TaskStatus, String)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Send {
                to: t,
                msg: Message::TaskResult { task, result },
            } if t.as_str() == to => Some((task.clone(), result.status, result.worker.to_string())),
            _ => None,
        })
        .collect()
}

/// Rule 14: a live sandbox whose worker goes down ends `lost`, naming that worker, and is
/// never placed on another — where a task is placed again at once.
#[test]
fn a_live_sandbox_whose_worker_goes_down_is_lost_and_never_placed_again() {
    let mut a = admin(&["w1", "w2", "s"]);
    let start = a.now_ms();
    run_to(&mut a, start + 3_000);
    report(&mut a, "w1", 2, &[], &[]);
    let out = offer_live(&mut a, &task("s", 1), 0);
    assert_eq!(placements(&out), [(task("s", 1), "w1".to_owned())]);
    let out = offer(&mut a, &task("s", 2));
    assert_eq!(placements(&out), [(task("s", 2), "w1".to_owned())]);
    report(&mut a, "w2", 2, &[], &[]);
    let now = a.now_ms();
    let out = a.step_vec(now, Event::PeerDown { peer: "w1".into() });
    assert_eq!(
        results_to(&out, "s"),
        [(task("s", 1), chorus_core::TaskStatus::Lost, "w1".to_owned())]
    );
    // The task goes to w2; the live sandbox does not, not at an offer, not later.
    assert_eq!(placements(&out), [(task("s", 2), "w2".to_owned())]);
    let mut later = offer_live(&mut a, &task("s", 1), 1);
    later.extend(run_to(&mut a, now + 10_000));
    assert!(
        placements(&later).iter().all(|(t, _)| *t != task("s", 1)),
        "placed again: {later:?}"
    );
    assert_eq!(
        results_to(&later, "s").first().map(|r| r.1),
        Some(chorus_core::TaskStatus::Lost),
        "the lost result is sent again to an offer"
    );
}

/// Rule 14: a new admin places no live sandbox in its first ticks, so that one the admin
/// before it placed is adopted from its worker's report instead of made a second time; a
/// task it places at once.
#[test]
fn a_new_admin_waits_for_the_reports_before_placing_a_live_sandbox() {
    let mut a = admin(&["w1", "w2", "s"]);
    let start = a.now_ms();
    report(&mut a, "w1", 2, &[], &[]);
    report(&mut a, "w2", 2, &[], &[]);
    let out = offer_live(&mut a, &task("s", 1), 0);
    assert!(placements(&out).is_empty(), "placed in the first ticks");
    let out = offer(&mut a, &task("s", 2));
    assert_eq!(placements(&out).len(), 1, "a task is placed at once");
    // w2 reports the sandbox an earlier admin placed there: adopted, and never made again.
    report(&mut a, "w2", 2, &[(task("s", 1), 1)], &[]);
    let out = run_to(&mut a, start + 10_000);
    assert!(
        placements(&out).iter().all(|(t, _)| *t != task("s", 1)),
        "made a second time: {out:?}"
    );
    let out = offer_live(&mut a, &task("s", 1), 0);
    assert!(out.iter().any(|c| matches!(
        c,
        Command::Send { msg: Message::TaskState { state: OfferState::Placed { worker, .. }, .. }, .. }
            if worker.as_str() == "w2"
    )));
    // Unreported, it is placed once the first ticks are over.
    let out = offer_live(&mut a, &task("s", 3), 0);
    assert_eq!(placements(&out).len(), 1, "placed after the first ticks");
}

/// Rule 14: an offer of a live sandbox its origin heard was placed, which no worker reports
/// to this admin, waits out the first ticks, then ends `lost` — it is never queued.
#[test]
fn a_placed_live_sandbox_no_worker_reports_to_a_new_admin_is_lost() {
    let mut a = admin(&["w1", "s"]);
    let start = a.now_ms();
    report(&mut a, "w1", 2, &[], &[]);
    let out = offer_live(&mut a, &task("s", 1), 1);
    assert!(placements(&out).is_empty());
    assert!(
        results_to(&out, "s").is_empty(),
        "lost before the reports could come"
    );
    let mut out = run_to(&mut a, start + 3_500);
    out.extend(offer_live(&mut a, &task("s", 1), 1));
    out.extend(run_to(&mut a, start + 8_000));
    assert!(placements(&out).is_empty(), "placed again: {out:?}");
    assert_eq!(
        results_to(&out, "s").first().map(|r| r.1),
        Some(chorus_core::TaskStatus::Lost)
    );
}

/// Rule 14: a worker that reports running a live sandbox placed on another is asked to stop
/// it; a task's second run is left to end (delivery is at least once).
#[test]
fn a_second_copy_of_a_live_sandbox_is_stopped() {
    let mut a = admin(&["w1", "w2", "s"]);
    let start = a.now_ms();
    run_to(&mut a, start + 3_000);
    report(&mut a, "w1", 2, &[], &[]);
    let out = offer_live(&mut a, &task("s", 1), 0);
    assert_eq!(placements(&out), [(task("s", 1), "w1".to_owned())]);
    let out = report(&mut a, "w2", 2, &[(task("s", 1), 1)], &[]);
    assert!(
        out.iter().any(|c| matches!(
            c,
            Command::Send { to, msg: Message::TaskCancel { task: t, .. } }
                if to.as_str() == "w2" && *t == task("s", 1)
        )),
        "not stopped: {out:?}"
    );
}

/// `work.rs` rule 8: a live sandbox is never given back once made — a retryable failure ends
/// it with an error, a restart ends it `lost` — where a task's retryable failure is given back
/// to be placed again. A live placement refused for want of a slot is still given back.
#[test]
fn a_live_sandbox_is_never_given_back_once_made() {
    let place_live = |w: &mut Core, seq: u64| {
        let msg = Message::TaskPlace {
            term: 1,
            task: task("s", seq),
            attempt: 1,
            seq,
            spec: live_spec(),
        };
        let now = w.now_ms();
        w.step_vec(now, from("b", msg))
    };
    for restart in [false, true] {
        let mut w = worker(1);
        let out = place_live(&mut w, 1);
        assert!(out
            .iter()
            .any(|c| matches!(c, Command::StartSandbox { spec, .. } if spec.live)));
        let now = w.now_ms();
        let out = if restart {
            w.step_vec(now + 1, Event::Started)
        } else {
            let failed = Event::SandboxFailed {
                task: task("s", 1),
                attempt: 1,
                error: "sandbox: the engine hiccuped".into(),
                retryable: true,
            };
            w.step_vec(now + 1, failed)
        };
        let want = if restart {
            chorus_core::TaskStatus::Lost
        } else {
            chorus_core::TaskStatus::Error
        };
        assert!(
            (sent_to(&out, "s").iter()).any(|m| matches!(m, Message::TaskResult { result, .. }
                if result.status == want)),
            "restart {restart}: the owner is told {want}: {out:?}"
        );
        let now = w.now_ms();
        let out = w.step_vec(now + 1, from("b", heartbeat(1, 2)));
        if let Some((_, _, released)) = last_report(&out) {
            assert_eq!(released, Vec::<u64>::new(), "restart {restart}");
        }
    }
    // No slot free: refused before anything was made, and given back.
    let mut w = worker(1);
    place(&mut w, 1);
    let mut out = place_live(&mut w, 2);
    assert!(!out
        .iter()
        .any(|c| matches!(c, Command::StartSandbox { .. })));
    let now = w.now_ms();
    out.extend(w.step_vec(now + 1, from("b", heartbeat(1, 2))));
    let (_, _, released) = last_report(&out).expect("a report");
    assert_eq!(released, vec![2]);
}
