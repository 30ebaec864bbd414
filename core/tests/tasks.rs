//! Tasks across nodes (docs/design.md §4.7, invariant 7), on the deterministic test network with
//! a simulated sandbox (`support::simulate_run` reads what a run does from its command). The
//! network checks on every step that a placement happens only under a valid lease and that a
//! submitter takes one result per task; each test checks invariant 7 at its end.

use crate::support;

use chorus_core::{Event, Message, Notice, Refusal, TaskId, TaskPhase, TaskSpec, TaskStatus};
use support::{fast_config, Net};

const LONG: u64 = 60_000;

/// Three voters and two workers (n3, n4) with two slots each; voters run nothing.
fn cluster(seed: u64) -> Net {
    let mut net = Net::with_workers(seed, 3, 2, fast_config());
    net.set_slots(3, 2);
    net.set_slots(4, 2);
    net.run_until(2_000);
    assert!(net.agreed_admin().is_some(), "elected (seed {seed})");
    net
}

fn admin_index(net: &Net) -> usize {
    net.index_of(&net.agreed_admin().expect("an admin"))
}

fn status(net: &Net, t: &TaskId) -> Option<TaskStatus> {
    net.results.get(t).copied()
}

fn runs_of(net: &Net, t: &TaskId) -> Vec<(u32, usize)> {
    net.runs
        .iter()
        .filter(|(task, _, _)| task == t)
        .map(|(_, a, n)| (*a, *n))
        .collect()
}

#[test]
fn tasks_submitted_anywhere_run_once_each_on_the_least_loaded_workers() {
    for seed in 0..20 {
        let mut net = cluster(seed);
        let tasks: Vec<TaskId> = (0..20)
            .map(|k| net.submit(k % 5, &["sleep", "40"], LONG).expect("accepted"))
            .collect();
        net.run_until(net.now + 3_000);
        for t in &tasks {
            assert_eq!(
                status(&net, t),
                Some(TaskStatus::Succeeded),
                "{t} seed {seed}"
            );
            assert_eq!(runs_of(&net, t).len(), 1, "{t} ran once (seed {seed})");
        }
        // Only the workers ran anything, about evenly.
        let per_worker: Vec<usize> = (3..5)
            .map(|w| net.runs.iter().filter(|r| r.2 == w).count())
            .collect();
        assert_eq!(per_worker.iter().sum::<usize>(), 20);
        assert!(
            per_worker.iter().all(|&n| (8..=12).contains(&n)),
            "{per_worker:?}"
        );
        // Every submitter's record says done, and workers hold no result.
        for c in net.live() {
            assert!(c.owned_tasks().values().all(|t| t.phase == TaskPhase::Done));
            assert!(c.unacknowledged_results().is_empty());
            assert!(c.running_tasks().is_empty());
        }
        net.check_tasks(true);
    }
}

#[test]
fn a_task_whose_worker_dies_is_placed_again_and_completes_elsewhere() {
    for seed in 0..20 {
        let mut net = cluster(seed);
        let t = net.submit(0, &["sleep", "500"], LONG).unwrap();
        net.run_until(net.now + 100);
        let [(1, worker)] = runs_of(&net, &t)[..] else {
            panic!("one run started (seed {seed}): {:?}", runs_of(&net, &t));
        };
        net.crash(worker);
        net.run_until(net.now + 3_000);
        assert_eq!(status(&net, &t), Some(TaskStatus::Succeeded), "seed {seed}");
        let runs = runs_of(&net, &t);
        assert_eq!(runs.len(), 2, "seed {seed}: {runs:?}");
        assert_ne!(runs[1].1, worker, "placed on the other worker");
        assert_eq!(runs[1].0, 2, "as the second attempt");
        net.check_tasks(true);
    }
}

#[test]
fn queued_tasks_survive_the_admins_death_and_complete_under_the_next_admin() {
    for seed in 0..20 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        let submitter = (admin + 1) % 3;
        // Four slots: the first four run, the other four wait in the admin's queue.
        let tasks: Vec<TaskId> = (0..8)
            .map(|_| net.submit(submitter, &["sleep", "300"], LONG).unwrap())
            .collect();
        net.run_until(net.now + 50);
        let queued = net.nodes[admin]
            .as_ref()
            .and_then(|c| c.admin_tasks())
            .map_or(0, |a| a.queue_len());
        assert_eq!(queued, 4, "seed {seed}");
        net.crash(admin);
        net.run_until(net.now + 5_000);
        assert!(net.agreed_admin().is_some());
        for t in &tasks {
            assert_eq!(
                status(&net, t),
                Some(TaskStatus::Succeeded),
                "{t} seed {seed}"
            );
        }
        // The running ones were adopted from the workers' reports, not run again.
        let total_runs = net.runs.len();
        assert_eq!(total_runs, 8, "seed {seed}: {:?}", net.runs);
        net.check_tasks(true);
    }
}

/// Issue 33: a worker that cannot reach the submitter still delivers. Each worker's link to
/// the submitter is down both ways (a firewall between them, an address never learnt); both
/// reach the admin, and the admin reaches the submitter. Before the admin relayed results
/// (`place.rs`, rule 11) the worker resent the result into the void for ever and the task
/// never ended. Now it ends once, under the worker's name, and the worker forgets the result:
/// the submitter's acknowledgement came back through the admin.
#[test]
fn a_result_reaches_a_submitter_its_worker_cannot_reach_through_the_admin() {
    for seed in 0..20 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        let submitter = (admin + 1) % 3;
        for worker in [3, 4] {
            net.cut_link(worker, submitter);
            net.cut_link(submitter, worker);
        }
        let tasks: Vec<TaskId> = (0..4)
            .map(|_| net.submit(submitter, &["sleep", "200"], LONG).unwrap())
            .collect();
        net.run_until(net.now + 4_000);
        for t in &tasks {
            assert_eq!(
                status(&net, t),
                Some(TaskStatus::Succeeded),
                "{t} seed {seed}"
            );
            let runs = runs_of(&net, t);
            assert_eq!(runs.len(), 1, "{t} ran once (seed {seed}): {runs:?}");
            assert!([3, 4].contains(&runs[0].1), "on a worker: {runs:?}");
        }
        for w in [3, 4] {
            let held = net.nodes[w]
                .as_ref()
                .unwrap()
                .unacknowledged_results()
                .len();
            assert_eq!(
                held, 0,
                "worker n{w} heard the acknowledgement (seed {seed})"
            );
        }
        net.check_tasks(true);
    }
}

/// Issue 33: run numbers go on across failovers. A new admin starts with an empty queue; it
/// used to number the run it placed 1 again, so a task run three times through failovers
/// showed attempt 1 three times (and a retryable failure was given up to 3 more runs). Here
/// the admin dies with the worker running the task, twice: the next admins place it as runs 2
/// and 3, from the latest run the submitter heard of.
#[test]
fn run_numbers_go_on_across_failovers() {
    for seed in 0..10 {
        // Three workers with a slot each, and n8, which runs nothing, submits.
        let mut net = Net::with_workers(seed, 5, 4, fast_config());
        for w in 5..8 {
            net.set_slots(w, 1);
        }
        net.run_until(2_000);
        assert!(net.agreed_admin().is_some(), "elected (seed {seed})");
        let submitter = 8;
        let t = net
            .submit(submitter, &["sleep", "60000"], 2 * LONG)
            .unwrap();
        for run in 1..=3 {
            net.run_until(net.now + 1_500);
            let runs = runs_of(&net, &t);
            assert_eq!(runs.len(), run as usize, "seed {seed}: {runs:?}");
            let (attempt, worker) = runs[run as usize - 1];
            assert_eq!(attempt, run, "seed {seed}: {runs:?}");
            if run == 3 {
                break;
            }
            // The admin and the worker go down together: nobody reports the run.
            let admin = admin_index(&net);
            net.crash(admin);
            net.crash(worker);
        }
        let phase = &net.nodes[submitter].as_ref().unwrap().owned_tasks()[&t];
        assert_eq!(phase.last_attempt, 3, "seed {seed}");
        net.check_tasks(false);
    }
}

/// `sleep 10` that needs `repo:NAME` (`require`: or the capability `require`).
fn needing(require: &str) -> TaskSpec {
    let (requires, repo) = match require.strip_prefix("repo:") {
        Some(name) => (
            vec![],
            Some(chorus_core::RepoMount {
                name: name.into(),
                writable: false,
            }),
        ),
        None => (vec![require.to_owned()], None),
    };
    TaskSpec {
        image: "test".into(),
        command: vec!["sleep".into(), "10".into()],
        timeout_ms: LONG,
        requires,
        repo,
        ..Default::default()
    }
}

/// When the task at `i` got its result (global time), if it did.
fn completed_at(net: &Net, i: usize, t: &TaskId) -> Option<u64> {
    net.notices(i).into_iter().find_map(|(at, n)| match n {
        Notice::TaskCompleted { task, .. } if task == *t => Some(at),
        _ => None,
    })
}

/// With `fast_config`, a task tick is 50 ms: the admin ends a task no live worker can run
/// after 60 ticks.
const UNSCHEDULABLE_MS: u64 = 60 * 50;

/// Issue 33: a task no live node can run sat queued for ever. The admin tells its submitter
/// why it waits — kept on the submitter's task, for the API — and ends it `unschedulable`
/// (saying why) 60 ticks later, not before.
#[test]
fn a_task_no_live_worker_can_run_is_told_why_and_ends_unschedulable() {
    for seed in 0..10 {
        let mut net = cluster(seed);
        let submitted = net.now;
        let t = net.submit_spec(0, needing("repo:nosuch")).unwrap();
        net.run_until(net.now + 1_000);
        let own = &net.nodes[0].as_ref().unwrap().owned_tasks()[&t];
        assert_eq!(own.phase, TaskPhase::Queued, "seed {seed}");
        assert_eq!(
            own.pending.as_deref(),
            Some("no worker offers repo:nosuch (2 workers checked)"),
            "seed {seed}"
        );
        assert!(
            (800..=1_000).contains(&own.unplaceable_ms),
            "{}",
            own.unplaceable_ms
        );
        net.run_until(submitted + UNSCHEDULABLE_MS + 1_000);
        assert_eq!(
            status(&net, &t),
            Some(TaskStatus::Unschedulable),
            "seed {seed}"
        );
        let took = completed_at(&net, 0, &t).unwrap() - submitted;
        assert!(
            (UNSCHEDULABLE_MS..UNSCHEDULABLE_MS + 300).contains(&took),
            "seed {seed}: {took} ms"
        );
        let own = &net.nodes[0].as_ref().unwrap().owned_tasks()[&t];
        let error = own.result.as_ref().and_then(|r| r.error.clone()).unwrap();
        assert!(error.contains("no worker offers repo:nosuch"), "{error}");
        assert!(runs_of(&net, &t).is_empty());
        net.check_tasks(true);
    }
}

/// A task that becomes placeable before the bound — a worker that offers what it needs comes
/// up — is placed and runs as any other.
#[test]
fn a_task_placeable_before_the_bound_is_placed_normally() {
    for seed in 0..10 {
        // The workers start late: at first no worker has reported any slots.
        let start = support::Start {
            late: vec![3, 4],
            ..Default::default()
        };
        let mut net = Net::build_with(seed, 3, 2, fast_config(), support::Clocks::Shared, start);
        net.run_until(2_000);
        let t = net.submit_spec(0, needing("docker")).unwrap();
        net.run_until(net.now + 1_000);
        let own = &net.nodes[0].as_ref().unwrap().owned_tasks()[&t];
        assert_eq!(
            own.pending.as_deref(),
            Some("no worker has reported task slots to the admin"),
            "seed {seed}"
        );
        net.start(4);
        net.set_slots(4, 1);
        net.run_until(net.now + UNSCHEDULABLE_MS);
        assert_eq!(status(&net, &t), Some(TaskStatus::Succeeded), "seed {seed}");
        assert_eq!(runs_of(&net, &t), [(1, 4)]);
        let own = &net.nodes[0].as_ref().unwrap().owned_tasks()[&t];
        assert_eq!((own.pending.as_deref(), own.unplaceable_ms), (None, 0));
        net.check_tasks(true);
    }
}

/// A new admin does not start the count again: the submitter carries how long no worker could
/// run its task, and the next admin counts on from there. The admin dies 2.5 s into the 3 s;
/// the task ends within the bound plus the failover (starting again, it would take 3 s more).
#[test]
fn a_failover_does_not_start_the_count_again() {
    for seed in 0..10 {
        let mut net = cluster(seed);
        // A worker submits (the voters may be crashed).
        let submitted = net.now;
        let t = net.submit_spec(3, needing("gpu")).unwrap();
        net.run_until(submitted + 2_500);
        assert_eq!(status(&net, &t), None);
        net.crash(admin_index(&net));
        net.run_until(submitted + 2 * UNSCHEDULABLE_MS + 1_000);
        assert_eq!(
            status(&net, &t),
            Some(TaskStatus::Unschedulable),
            "seed {seed}"
        );
        let took = completed_at(&net, 3, &t).unwrap() - submitted;
        assert!(
            (UNSCHEDULABLE_MS..UNSCHEDULABLE_MS + 1_500).contains(&took),
            "seed {seed}: {took} ms"
        );
        net.check_tasks(true);
    }
}

#[test]
fn a_submitter_that_restarts_keeps_its_tasks_and_still_gets_their_results() {
    let mut net = cluster(1);
    let t = net.submit(3, &["sleep", "200"], LONG).unwrap();
    net.run_until(net.now + 50);
    net.crash(3);
    net.run_until(net.now + 400);
    net.restart(3);
    net.set_slots(3, 2);
    net.run_until(net.now + 3_000);
    assert_eq!(status(&net, &t), Some(TaskStatus::Succeeded));
    net.check_tasks(true);
}

#[test]
fn a_worker_that_restarts_mid_run_gives_the_task_back_and_it_completes() {
    for seed in 0..10 {
        let mut net = cluster(seed);
        let t = net.submit(0, &["sleep", "400"], LONG).unwrap();
        net.run_until(net.now + 100);
        let worker = runs_of(&net, &t)[0].1;
        net.crash(worker);
        // Back before the admin placed it elsewhere? Either way it completes, once.
        net.restart(worker);
        net.run_until(net.now + 3_000);
        assert_eq!(status(&net, &t), Some(TaskStatus::Succeeded), "seed {seed}");
        net.check_tasks(true);
    }
}

#[test]
fn retryable_failures_are_retried_with_backoff_then_reported_as_errors() {
    let mut net = cluster(2);
    let t = net.submit(0, &["retry", "10"], LONG).unwrap();
    net.run_until(net.now + 5_000);
    let runs = runs_of(&net, &t);
    assert_eq!(
        runs.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "three attempts"
    );
    assert_eq!(status(&net, &t), Some(TaskStatus::Error));
    let owned = &net.nodes[0].as_ref().unwrap().owned_tasks()[&t];
    let result = owned.result.as_ref().unwrap();
    assert_eq!(result.attempt, 3);
    assert!(result
        .error
        .as_deref()
        .unwrap()
        .contains("simulated failure"));
    // Backoff: the placements of attempts 2 and 3 wait one and two ticks (50, 100 ms).
    let placed: Vec<u64> = net
        .notices(admin_index(&net))
        .into_iter()
        .filter_map(|(at, n)| match n {
            Notice::TaskPlaced { task, .. } if task == t => Some(at),
            _ => None,
        })
        .collect();
    assert_eq!(placed.len(), 3);
    assert!(
        placed[1] - placed[0] >= 50 && placed[2] - placed[1] >= 100,
        "{placed:?}"
    );
    // A failure that is not retryable is not retried.
    let b = net.submit(0, &["broken"], LONG).unwrap();
    net.run_until(net.now + 1_000);
    assert_eq!(runs_of(&net, &b).len(), 1);
    assert_eq!(status(&net, &b), Some(TaskStatus::Error));
    net.check_tasks(true);
}

#[test]
fn exits_map_to_their_statuses() {
    let mut net = cluster(3);
    let cases = [
        (&["sleep", "10"][..], LONG, TaskStatus::Succeeded),
        (&["exit", "3", "10"][..], LONG, TaskStatus::Failed),
        (&["oom", "10"][..], LONG, TaskStatus::OutOfMemory),
        (&["sleep", "500"][..], 100, TaskStatus::TimedOut),
    ];
    let tasks: Vec<(TaskId, TaskStatus)> = cases
        .iter()
        .map(|(cmd, timeout, want)| (net.submit(1, cmd, *timeout).unwrap(), *want))
        .collect();
    net.run_until(net.now + 2_000);
    for (t, want) in tasks {
        assert_eq!(status(&net, &t), Some(want), "{t}");
    }
    let failed = net.nodes[1]
        .as_ref()
        .unwrap()
        .owned_tasks()
        .values()
        .find_map(|o| {
            o.result
                .as_ref()
                .filter(|r| r.status == TaskStatus::Failed)
                .cloned()
        });
    assert_eq!(failed.unwrap().exit_code, Some(3));
    net.check_tasks(true);
}

/// Where a task's time went reaches its submitter: the run's stages as its worker measured
/// them, and the submitter's own stamps (placed, done) on its clock, in order.
#[test]
fn a_runs_timings_reach_its_submitter_beside_its_own_stamps() {
    for seed in 0..5 {
        let mut net = cluster(seed);
        let t = net.submit(1, &["sleep", "300"], LONG).unwrap();
        net.run_until(net.now + 2_000);
        assert_eq!(status(&net, &t), Some(TaskStatus::Succeeded), "seed {seed}");
        let own = &net.nodes[1].as_ref().unwrap().owned_tasks()[&t];
        let r = own.result.as_ref().unwrap();
        let want = chorus_core::RunTimings {
            acquire_ms: 1,
            arm_ms: 2,
            exec_ms: 300,
            cleanup_ms: 3,
            release_ms: 0,
        };
        assert_eq!(r.timings, want, "seed {seed}");
        assert_eq!(r.timings.total_ms(), 306, "the stages in turn");
        // The admin's word of the placement came while the 300 ms run went on.
        assert!(
            own.submitted_at_ms <= own.placed_at_ms && own.placed_at_ms < own.done_at_ms,
            "{} {} {} (seed {seed})",
            own.submitted_at_ms,
            own.placed_at_ms,
            own.done_at_ms
        );
        assert!(own.done_at_ms - own.submitted_at_ms >= 300, "seed {seed}");
        net.check_tasks(true);
    }
}

#[test]
fn cancelling_a_running_or_a_queued_task_ends_it_cancelled() {
    let mut net = cluster(4);
    // Four hanging runs fill the slots; the fifth waits in the queue.
    let tasks: Vec<TaskId> = (0..5)
        .map(|_| net.submit(0, &["hang"], LONG).unwrap())
        .collect();
    net.run_until(net.now + 200);
    assert_eq!(net.runs.len(), 4);
    let queued = tasks
        .iter()
        .find(|t| runs_of(&net, t).is_empty())
        .unwrap()
        .clone();
    let running = tasks[0].clone();
    for t in [&queued, &running] {
        net.apply(
            0,
            Event::CancelTask {
                task: t.clone(),
                request: 0,
            },
        );
    }
    net.run_until(net.now + 500);
    assert_eq!(status(&net, &running), Some(TaskStatus::Cancelled));
    assert_eq!(status(&net, &queued), Some(TaskStatus::Cancelled));
    assert!(runs_of(&net, &queued).is_empty(), "never ran");
    // A cancel of an unknown or a finished task is refused with a reason.
    for t in [
        running.clone(),
        TaskId {
            origin: "n0".into(),
            seq: 99,
        },
    ] {
        let out = net.nodes[0].as_mut().unwrap().step_vec(
            net.now,
            Event::CancelTask {
                task: t,
                request: 7,
            },
        );
        assert!(
            out.iter().any(|c| matches!(
                c,
                chorus_core::Command::Notice(Notice::TaskRefused { request: 7, .. })
            )),
            "{out:?}"
        );
    }
    net.check_tasks(false);
}

/// A cancel that reaches a new admin before the worker's report: the admin knows of no run and
/// answers `cancelled` at once; the run it adopts later from the report must still be stopped,
/// not hold its slot until the timeout.
#[test]
fn a_cancel_at_a_new_admin_that_has_not_heard_of_the_run_still_stops_it() {
    for seed in 0..10 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        let submitter = (admin + 1) % 3;
        let t = net.submit(submitter, &["hang"], LONG).unwrap();
        net.run_until(net.now + 200);
        let [(1, worker)] = runs_of(&net, &t)[..] else {
            panic!("one run started (seed {seed}): {:?}", runs_of(&net, &t));
        };
        // The worker is cut off while the admin dies and the next one is elected.
        net.partition(&[worker]);
        net.crash(admin);
        net.run_until(net.now + 3_000);
        let new_admin = net.lease_holder().expect("a new admin");
        assert_ne!(new_admin, admin, "seed {seed}");
        net.apply(
            submitter,
            Event::CancelTask {
                task: t.clone(),
                request: 0,
            },
        );
        net.run_until(net.now + 500);
        assert_eq!(status(&net, &t), Some(TaskStatus::Cancelled), "seed {seed}");
        assert!(
            net.nodes[worker]
                .as_ref()
                .unwrap()
                .running_tasks()
                .contains_key(&t),
            "still hanging on the cut-off worker (seed {seed})"
        );
        net.heal();
        net.run_until(net.now + 3_000);
        let w = net.nodes[worker].as_ref().unwrap();
        assert!(
            w.running_tasks().is_empty(),
            "the stray run was stopped (seed {seed}): {:?}",
            w.running_tasks()
        );
        assert!(w.unacknowledged_results().is_empty(), "seed {seed}");
        net.check_tasks(true);
    }
}

/// A node restored from a snapshot (taken at its last shutdown) keeps the capabilities of that
/// start unless the start logs the new ones: a repository added to its config would never be
/// used, a voter made a worker would still stand.
#[test]
fn a_restored_node_takes_the_capabilities_logged_at_its_start() {
    // One voter that also runs tasks: it places on itself by its own capabilities.
    let mut net = Net::new(3, 1, fast_config());
    net.set_slots(0, 1);
    net.run_until(2_000);
    assert_eq!(net.lease_holder(), Some(0));
    let snapshot = net.nodes[0].as_ref().unwrap().snapshot();
    let mut core = chorus_core::Core::restore(&snapshot).unwrap();
    assert_eq!(core.capabilities(), [chorus_core::ADMIN_ELECTION]);
    let caps = ["sandbox", "repo:src", "admin_election", "sandbox"];
    core.step_vec(
        core.now_ms(),
        Event::CapabilitiesChanged {
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
        },
    );
    assert_eq!(
        core.capabilities(),
        ["admin_election", "repo:src", "sandbox"]
    );
    // More than a peer keeps: skipped (the node refuses such a config before logging it).
    let many = (0..=chorus_core::MAX_CAPABILITIES)
        .map(|k| format!("c{k}"))
        .collect();
    core.step_vec(
        core.now_ms(),
        Event::CapabilitiesChanged { capabilities: many },
    );
    assert_eq!(
        core.capabilities(),
        ["admin_election", "repo:src", "sandbox"]
    );

    // Through the log: the new capabilities replay, and the node places a task needing the
    // repository on itself.
    net.apply(
        0,
        Event::CapabilitiesChanged {
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
        },
    );
    net.crash(0);
    net.restart(0);
    net.run_until(net.now + 2_000);
    assert_eq!(
        net.nodes[0].as_ref().unwrap().capabilities(),
        ["admin_election", "repo:src", "sandbox"]
    );
    let spec = TaskSpec {
        image: "test".into(),
        command: vec!["sleep".into(), "10".into()],
        timeout_ms: LONG,
        repo: Some(chorus_core::RepoMount {
            name: "src".into(),
            writable: false,
        }),
        ..Default::default()
    };
    net.apply(
        0,
        Event::SubmitTask {
            spec: spec.into(),
            key: None,
            owner: None,
            request: 0,
        },
    );
    net.run_until(net.now + 1_000);
    assert_eq!(
        net.results.values().copied().collect::<Vec<_>>(),
        [TaskStatus::Succeeded]
    );
}

#[test]
fn a_voter_whose_start_logs_it_a_worker_never_stands() {
    let mut net = Net::new(4, 1, fast_config());
    net.apply(
        0,
        Event::CapabilitiesChanged {
            capabilities: vec!["docker".into()],
        },
    );
    net.run_until(5_000);
    assert_eq!(net.lease_holder(), None, "a worker never becomes admin");
}

#[test]
fn an_idempotency_key_names_one_task_and_bad_specs_are_refused() {
    let mut net = cluster(5);
    let spec = TaskSpec {
        image: "test".into(),
        command: vec!["sleep".into(), "10".into()],
        timeout_ms: LONG,
        ..Default::default()
    };
    let submit = |net: &mut Net, spec: &TaskSpec, key: &str| {
        let core = net.nodes[0].as_mut().unwrap();
        let now = core.now_ms();
        core.step_vec(
            now,
            Event::SubmitTask {
                spec: spec.clone().into(),
                key: Some(key.into()),
                owner: None,
                request: 1,
            },
        )
        .into_iter()
        .find_map(|c| match c {
            chorus_core::Command::Notice(
                n @ (Notice::TaskSubmitted { .. } | Notice::TaskRefused { .. }),
            ) => Some(n),
            _ => None,
        })
        .unwrap()
    };
    let first = submit(&mut net, &spec, "k1");
    let again = submit(&mut net, &spec, "k1");
    let (
        Notice::TaskSubmitted {
            task: a,
            existing: false,
            ..
        },
        Notice::TaskSubmitted {
            task: b,
            existing: true,
            ..
        },
    ) = (&first, &again)
    else {
        panic!("{first:?} {again:?}");
    };
    assert_eq!(a, b);
    let other = TaskSpec {
        timeout_ms: 5,
        ..spec.clone()
    };
    assert!(matches!(
        submit(&mut net, &other, "k1"),
        Notice::TaskRefused { .. }
    ));
    let bad = TaskSpec {
        command: vec![],
        ..spec
    };
    let Notice::TaskRefused { reason, .. } = submit(&mut net, &bad, "k2") else {
        panic!()
    };
    assert!(reason.contains("command"), "{reason}");
}

/// Place rule 1: an admin whose lease ran out (cut off, not yet stepped down by check-quorum)
/// queues what it is offered but places nothing, not even on itself.
#[test]
fn an_admin_without_a_valid_lease_places_nothing() {
    for seed in 0..5 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        net.set_slots(admin, 2);
        net.run_until(net.now + 200);
        net.partition(&[admin]);
        // Step until the lease has run out while the node is still admin.
        let mut guard = 0;
        while net.nodes[admin]
            .as_ref()
            .is_some_and(|c| c.holds_lease(c.now_ms()))
        {
            net.run_until(net.now + 5);
            guard += 1;
            assert!(guard < 1_000);
        }
        let core = net.nodes[admin].as_ref().unwrap();
        assert_eq!(core.role(), chorus_core::Role::Admin, "seed {seed}");
        let since = net.history.len();
        let t = net.submit(admin, &["sleep", "10"], LONG).unwrap();
        net.run_until(net.now + 20);
        let placed = net
            .notices_since(since, admin)
            .into_iter()
            .any(|(_, n)| matches!(n, Notice::TaskPlaced { .. }));
        assert!(!placed, "seed {seed}");
        assert_eq!(
            net.nodes[admin]
                .as_ref()
                .unwrap()
                .admin_tasks()
                .map(|a| a.queue_len()),
            Some(1)
        );
        // Healed, the task completes under whichever admin holds the lease then.
        net.heal();
        net.run_until(net.now + 3_000);
        assert_eq!(status(&net, &t), Some(TaskStatus::Succeeded), "seed {seed}");
        net.check_tasks(true);
    }
}

/// Place rule 5: a placement the worker saw and did not take (its slots went away before the
/// admin heard) is placed again elsewhere.
#[test]
fn a_placement_the_worker_refused_is_placed_again_elsewhere() {
    for seed in 0..10 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        net.set_slots(3, 0);
        // The report saying so is lost: the admin still counts two slots at n3.
        net.drop_in_flight(3, &[admin]);
        let tasks: Vec<TaskId> = (0..4)
            .map(|_| net.submit(admin, &["sleep", "30"], LONG).unwrap())
            .collect();
        net.run_until(net.now + 3_000);
        for t in &tasks {
            if status(&net, t).is_none() {
                for i in [admin, 3, 4] {
                    eprintln!(
                        "n{i}: {:?}",
                        net.notices(i)
                            .iter()
                            .filter(|(_, n)| format!("{n:?}").contains("Task"))
                            .collect::<Vec<_>>()
                    );
                }
                eprintln!(
                    "admin tasks {:?}",
                    net.nodes[admin].as_ref().unwrap().admin_tasks()
                );
                eprintln!(
                    "owned {:?}",
                    net.nodes[admin].as_ref().unwrap().owned_tasks()
                );
            }
            assert_eq!(
                status(&net, t),
                Some(TaskStatus::Succeeded),
                "{t} seed {seed}"
            );
        }
        assert!(
            net.runs.iter().all(|r| r.2 == 4),
            "seed {seed}: {:?}",
            net.runs
        );
        let placed_on_n3 = net.notices(admin).into_iter().any(
            |(_, n)| matches!(n, Notice::TaskPlaced { worker, .. } if worker.as_str() == "n3"),
        );
        assert!(placed_on_n3, "seed {seed}: the admin did try n3");
        net.check_tasks(true);
    }
}

fn refusals(out: &[chorus_core::Command]) -> Vec<Refusal> {
    out.iter()
        .filter_map(|c| match c {
            chorus_core::Command::Notice(Notice::Refused { reason, .. }) => Some(*reason),
            _ => None,
        })
        .collect()
}

/// Trust (docs/design.md §9.1): only a task's origin offers it; only the admin of the term places; only a
/// worker the admin named delivers a result, and an unnamed one is not acknowledged.
#[test]
fn task_messages_count_only_from_who_may_send_them() {
    let mut net = cluster(6);
    let admin = admin_index(&net);
    let spec: chorus_core::SharedSpec = TaskSpec {
        image: "test".into(),
        command: vec!["x".into()],
        timeout_ms: 10,
        ..Default::default()
    }
    .into();
    let forged = TaskId {
        origin: "n1".into(),
        seq: 1,
    };
    let now = net.now;
    let step = |net: &mut Net, i: usize, from: &str, msg: Message| {
        let t = net.nodes[i].as_ref().unwrap().now_ms().max(now);
        net.nodes[i].as_mut().unwrap().step_vec(
            t,
            Event::Message {
                from: from.into(),
                msg,
            },
        )
    };
    // An offer of n1's task from n4.
    let out = step(
        &mut net,
        admin,
        "n4",
        Message::TaskOffer {
            task: forged.clone(),
            spec: spec.clone(),
            cancel: false,
            attempt: 0,
            unplaceable_ms: 0,
        },
    );
    assert_eq!(refusals(&out), [Refusal::NotOwner]);
    // A placement at a worker from another worker (not a member), and from a voter that is
    // not the admin.
    let term = net.nodes[3].as_ref().unwrap().term();
    let voter = if admin == 0 { "n1" } else { "n0" };
    for (sender, want) in [("n4", Refusal::NotMember), (voter, Refusal::Unsolicited)] {
        let place = Message::TaskPlace {
            term,
            task: forged.clone(),
            attempt: 1,
            seq: 1,
            spec: spec.clone(),
        };
        let out = step(&mut net, 3, sender, place);
        assert_eq!(refusals(&out), [want], "from {sender}");
    }
    assert!(net.nodes[3].as_ref().unwrap().running_tasks().is_empty());
    // A result for n0's task from a node no admin named: refused and not acknowledged.
    let t = net.submit(0, &["hang"], LONG).unwrap();
    let result = chorus_core::TaskResult {
        status: TaskStatus::Succeeded,
        exit_code: Some(0),
        signal: None,
        worker: "n2".into(),
        attempt: 1,
        duration_ms: 1,
        usage: Default::default(),
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated_bytes: 0,
        stderr_truncated_bytes: 0,
        error: None,
        timings: Default::default(),
    };
    let liar = if admin == 2 { "n1" } else { "n2" };
    let out = step(
        &mut net,
        0,
        liar,
        Message::TaskResult {
            task: t.clone(),
            result: result.clone().into(),
        },
    );
    assert_eq!(refusals(&out), [Refusal::Unsolicited]);
    assert!(out.iter().all(|c| !matches!(
        c,
        chorus_core::Command::Send {
            msg: Message::TaskResultAck { .. },
            ..
        }
    )));
    // A result for another node's task: not n0's to take; an admin relays only what a worker
    // it placed the task on sends (`place.rs`, rule 11), and n3 never ran it.
    let out = step(
        &mut net,
        0,
        "n3",
        Message::TaskResult {
            task: forged,
            result: result.into(),
        },
    );
    let expected = if admin == 0 {
        Refusal::Unsolicited
    } else {
        Refusal::NotOwner
    };
    assert_eq!(refusals(&out), [expected]);
    // A report for another term at the admin.
    let term = net.nodes[admin].as_ref().unwrap().term();
    let out = step(
        &mut net,
        admin,
        "n3",
        Message::WorkerReport {
            term: term + 1,
            seen: 0,
            slots: 2,
            capacity: Default::default(),
            running: vec![],
            finished: vec![],
            released: vec![],
            partial: false,
        },
    );
    assert_eq!(refusals(&out), [Refusal::Stale]);
    let phase = &net.nodes[0].as_ref().unwrap().owned_tasks()[&t].phase;
    assert_ne!(*phase, TaskPhase::Done);
}

/// Invariant 7 and placement under the lease through random crashes, restarts and partitions
/// of any node, workers included.
#[test]
fn no_task_is_lost_through_random_faults() {
    for seed in 0..40 {
        let mut net = cluster(seed);
        let mut crashed: Vec<usize> = Vec::new();
        for round in 0..12 {
            let at = net.rand(5);
            let kind = net.rand(100);
            let ms = (20 + net.rand(300)).to_string();
            let _ = net.submit(at as usize, &["sleep", &ms], LONG);
            match kind {
                0..=14 => {
                    let i = net.rand(5) as usize;
                    net.crash(i);
                    crashed.push(i);
                }
                15..=29 => {
                    if let Some(i) = crashed.pop() {
                        net.restart(i);
                        if i >= 3 {
                            net.set_slots(i, 2);
                        }
                    }
                }
                30..=39 => {
                    let i = net.rand(5) as usize;
                    net.partition(&[i]);
                }
                40..=49 => net.heal(),
                _ => {}
            }
            let _ = round;
            let step = net.rand(300);
            net.run_until(net.now + 50 + step);
            net.check_tasks(false);
        }
        // Heal, bring everyone back, and every accepted task gets its result.
        net.heal();
        for i in crashed {
            net.restart(i);
            if i >= 3 {
                net.set_slots(i, 2);
            }
        }
        net.run_until(net.now + 10_000);
        net.check_tasks(true);
    }
}

/// Issue 35: a down submitter's tasks are cancelled through another node (`task/ask.rs`). The
/// submitter is killed with one run going and one task queued; a cancel asked at another voter
/// stops the run at once (its worker holds a `cancelled` result) and keeps the queued one from
/// ever running. Once the submitter is back, both end cancelled, once each, and the asking
/// node forgets its cancels.
#[test]
fn a_down_submitters_tasks_are_cancelled_through_another_node() {
    for seed in 0..20 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        let submitter = (admin + 1) % 3;
        let asker = (admin + 2) % 3;
        let tasks: Vec<TaskId> = (0..5)
            .map(|_| net.submit(submitter, &["hang"], LONG).unwrap())
            .collect();
        net.run_until(net.now + 200);
        assert_eq!(net.runs.len(), 4, "seed {seed}");
        let queued = tasks.iter().find(|t| runs_of(&net, t).is_empty()).unwrap();
        let running = tasks.iter().find(|t| !runs_of(&net, t).is_empty()).unwrap();
        let worker = runs_of(&net, running)[0].1;
        net.crash(submitter);
        net.run_until(net.now + 100);
        for t in [queued, running] {
            net.apply(
                asker,
                Event::CancelTask {
                    task: t.clone(),
                    request: 0,
                },
            );
        }
        // A run the admin adopts after a failover is not on this path: the admin placed it.
        net.run_until(net.now + 500);
        let w = net.nodes[worker].as_ref().unwrap();
        assert!(
            !w.running_tasks().contains_key(running),
            "stopped (seed {seed})"
        );
        assert_eq!(
            w.unacknowledged_results().get(running).map(|r| r.status),
            Some(TaskStatus::Cancelled),
            "held for the submitter (seed {seed})"
        );
        assert_eq!(
            status(&net, running),
            None,
            "no result while its node is down"
        );
        assert_eq!(net.nodes[asker].as_ref().unwrap().cancel_asks().len(), 2);
        net.restart(submitter);
        net.run_until(net.now + 3_000);
        assert_eq!(
            status(&net, running),
            Some(TaskStatus::Cancelled),
            "seed {seed}"
        );
        assert_eq!(
            status(&net, queued),
            Some(TaskStatus::Cancelled),
            "seed {seed}"
        );
        assert!(runs_of(&net, queued).is_empty(), "never ran (seed {seed})");
        assert_eq!(runs_of(&net, running).len(), 1, "ran once (seed {seed})");
        assert!(
            net.nodes[asker].as_ref().unwrap().cancel_asks().is_empty(),
            "the origin answered (seed {seed})"
        );
        net.check_tasks(false);
    }
}

/// The admin that heard the cancel dies before the submitter is back: the asker keeps the
/// cancel (durable) and gives it to the next admin and to the origin, so the queued task still
/// never runs. Three voters: the asker restarts too, from its log.
#[test]
fn a_cancel_kept_for_a_down_node_outlives_the_admin_and_the_askers_restart() {
    for seed in 0..20 {
        let mut net = cluster(seed);
        let admin = admin_index(&net);
        let submitter = (admin + 1) % 3;
        let asker = (admin + 2) % 3;
        let hangs: Vec<TaskId> = (0..4)
            .map(|_| net.submit(asker, &["hang"], LONG).unwrap())
            .collect();
        net.run_until(net.now + 200);
        let queued = net.submit(submitter, &["sleep", "10"], LONG).unwrap();
        net.run_until(net.now + 200);
        assert!(
            runs_of(&net, &queued).is_empty(),
            "slots full (seed {seed})"
        );
        net.crash(submitter);
        net.run_until(net.now + 100);
        net.apply(
            asker,
            Event::CancelTask {
                task: queued.clone(),
                request: 0,
            },
        );
        net.run_until(net.now + 100);
        net.crash(admin);
        net.crash(asker);
        net.run_until(net.now + 500);
        net.restart(asker);
        net.restart(submitter);
        // Room again: the hanging tasks are cancelled by their own node.
        for t in &hangs {
            net.apply(
                asker,
                Event::CancelTask {
                    task: t.clone(),
                    request: 0,
                },
            );
        }
        net.run_until(net.now + 5_000);
        assert!(net.agreed_admin().is_some(), "seed {seed}");
        assert_eq!(
            status(&net, &queued),
            Some(TaskStatus::Cancelled),
            "seed {seed}"
        );
        assert!(runs_of(&net, &queued).is_empty(), "never ran (seed {seed})");
        assert!(net.nodes[asker].as_ref().unwrap().cancel_asks().is_empty());
        net.check_tasks(false);
    }
}

/// An ask's answer counts only from the task's origin; an ask at a node that is not admin is
/// stale; a node keeps at most `MAX_ASKS` cancels, and refuses one more with a reason.
#[test]
fn cancel_asks_are_judged_by_who_sends_them_and_bounded() {
    let mut net = cluster(7);
    let admin = admin_index(&net);
    let voter = (admin + 1) % 3;
    let task = TaskId {
        origin: "n4".into(),
        seq: 1,
    };
    let now = net.now;
    let step = |net: &mut Net, i: usize, event: Event| {
        let t = net.nodes[i].as_ref().unwrap().now_ms().max(now);
        net.nodes[i].as_mut().unwrap().step_vec(t, event)
    };
    net.apply(
        voter,
        Event::CancelTask {
            task: task.clone(),
            request: 0,
        },
    );
    let from_other = Event::Message {
        from: "n3".into(),
        msg: Message::TaskCancelAsked { task: task.clone() },
    };
    assert_eq!(
        refusals(&step(&mut net, voter, from_other)),
        [Refusal::NotOwner]
    );
    assert_eq!(net.nodes[voter].as_ref().unwrap().cancel_asks().len(), 1);
    let at_follower = Event::Message {
        from: "n3".into(),
        msg: Message::TaskCancelAsk { task: task.clone() },
    };
    assert_eq!(
        refusals(&step(&mut net, voter, at_follower)),
        [Refusal::Stale]
    );
    let from_origin = Event::Message {
        from: "n4".into(),
        msg: Message::TaskCancelAsked { task },
    };
    assert!(refusals(&step(&mut net, voter, from_origin)).is_empty());
    assert!(net.nodes[voter].as_ref().unwrap().cancel_asks().is_empty());
    for seq in 1..=chorus_core::task::MAX_ASKS as u64 + 1 {
        let out = step(
            &mut net,
            voter,
            Event::CancelTask {
                task: TaskId {
                    origin: "n9".into(),
                    seq,
                },
                request: seq,
            },
        );
        let refused = out.iter().any(|c| {
            matches!(c, chorus_core::Command::Notice(Notice::TaskRefused { request, .. }) if *request == seq)
        });
        assert_eq!(
            refused,
            seq > chorus_core::task::MAX_ASKS as u64,
            "ask {seq}"
        );
    }
}
