//! Fair shares between owners (`task/place.rs`, rule 13; issue 51, finding 3), on one admin
//! driven by hand: owners (an origin and the caller its spec names) offer tasks, workers report
//! slots and finished runs, and the placements the admin makes are read from its
//! `task_placed` notices. Each test fails on the arrival-order placement that came before
//! rule 13 (one owner's early backlog took every slot that freed, and no owner was limited).

use crate::one_core;

use std::collections::BTreeMap;
use std::sync::Arc;

use chorus_core::task::{AdminView, Pending};
use chorus_core::{
    Command, Config, Core, Event, Message, Notice, OfferState, PeerInfo, TaskId, TaskSpec,
};
use one_core::{from, sent_to, voter_with, win};

const ABC: &[&str] = &["a", "b", "c"];

/// An owner: the node that accepted its tasks and the caller (token id) it names.
type Owner = (&'static str, Option<&'static str>);

fn spec_of(caller: Option<&str>) -> Arc<TaskSpec> {
    Arc::new(TaskSpec {
        image: "img".into(),
        command: vec!["sleep".into(), "80".into()],
        timeout_ms: 100_000,
        submitter: caller.map(str::to_owned),
        ..Default::default()
    })
}

/// `a`, admin of a, b, c with a fresh lease and `config`, connected to `peers`.
fn admin_with(config: Config, peers: &[&str]) -> Core {
    let mut a = voter_with("a", ABC, config);
    win(&mut a, &["b"]);
    let now = a.now_ms();
    for p in peers {
        a.step_vec(now, Event::peer_up((*p).into(), PeerInfo::default()));
    }
    a
}

/// The cluster the tests share: workers `w0`.. and every origin named, an admin that knows
/// them, and what it placed where.
struct Cluster {
    a: Core,
    workers: Vec<String>,
    slots: u32,
    /// Each origin's last task number.
    seqs: BTreeMap<&'static str, u64>,
    /// The owner of each task offered.
    owner: BTreeMap<TaskId, Owner>,
    /// What runs where, in placement order.
    running: BTreeMap<String, Vec<TaskId>>,
    /// Every placement, in order: (task, worker).
    placed: Vec<(TaskId, String)>,
}

impl Cluster {
    fn new(config: Config, workers: usize, slots: u32, origins: &[&str]) -> Cluster {
        let workers: Vec<String> = (0..workers).map(|i| format!("w{i}")).collect();
        let mut peers: Vec<&str> = workers.iter().map(String::as_str).collect();
        peers.extend(origins);
        Cluster {
            a: admin_with(config, &peers),
            workers,
            slots,
            seqs: BTreeMap::new(),
            owner: BTreeMap::new(),
            running: BTreeMap::new(),
            placed: Vec::new(),
        }
    }

    /// Reads the placements of one step's commands.
    fn took(&mut self, out: &[Command]) -> Vec<(TaskId, String)> {
        let new: Vec<(TaskId, String)> = out
            .iter()
            .filter_map(|c| match c {
                Command::Notice(Notice::TaskPlaced { task, worker, .. }) => {
                    Some((task.clone(), worker.as_str().to_owned()))
                }
                _ => None,
            })
            .collect();
        for (t, w) in &new {
            self.running.entry(w.clone()).or_default().push(t.clone());
        }
        self.placed.extend(new.iter().cloned());
        new
    }

    /// `owner` offers a new task; returns it, and the answer its origin got.
    fn offer(&mut self, owner: Owner) -> (TaskId, Vec<Message>) {
        let seq = self.seqs.entry(owner.0).or_default();
        *seq += 1;
        let task = TaskId {
            origin: owner.0.into(),
            seq: *seq,
        };
        self.owner.insert(task.clone(), owner);
        let msg = Message::TaskOffer {
            task: task.clone(),
            spec: spec_of(owner.1),
            cancel: false,
            attempt: 0,
            unplaceable_ms: 0,
        };
        let now = self.a.now_ms();
        let out = self.a.step_vec(now, from(owner.0, msg));
        self.took(&out);
        let answer = sent_to(&out, owner.0).into_iter().cloned().collect();
        (task, answer)
    }

    /// `worker` reports its slots, what it runs, and that `finished` ended; returns what the
    /// step placed.
    fn report(&mut self, worker: &str, finished: &[TaskId]) -> Vec<(TaskId, String)> {
        let runs = self.running.entry(worker.to_owned()).or_default();
        runs.retain(|t| !finished.contains(t));
        let msg = Message::WorkerReport {
            term: self.a.term(),
            seen: 0,
            slots: self.slots,
            capacity: Default::default(),
            running: runs.iter().map(|t| (t.clone(), 1)).collect(),
            finished: finished.to_vec(),
            released: vec![],
            partial: false,
        };
        let now = self.a.now_ms();
        let out = self.a.step_vec(now, from(worker, msg));
        self.took(&out)
    }

    /// Every worker reports (its first report: the admin learns its slots).
    fn all_report(&mut self) {
        for w in self.workers.clone() {
            self.report(&w, &[]);
        }
    }

    /// The run of `owner` that started first and still runs: (its worker, the task).
    fn oldest_run_of(&self, owner: Owner) -> (String, TaskId) {
        self.placed
            .iter()
            .find(|(t, w)| {
                self.owner[t] == owner && self.running.get(w).is_some_and(|r| r.contains(t))
            })
            .map(|(t, w)| (w.clone(), t.clone()))
            .expect("a run of that owner")
    }

    /// Runs going now, by owner.
    fn running_by_owner(&self) -> BTreeMap<Owner, usize> {
        let mut n = BTreeMap::new();
        for t in self.running.values().flatten() {
            *n.entry(self.owner[t]).or_default() += 1;
        }
        n
    }

    fn queued(&self) -> usize {
        self.a.admin_tasks().expect("admin").queue_len()
    }
}

/// The case: one owner's nine long tasks (and more) fill every slot of three workers
/// with three slots; another owner's one task comes after. When the first slot frees, it goes
/// to the other owner's task, not to the first owner's next. Whoever the owners are: two
/// callers of one node, two nodes without callers, the same caller at two nodes (two owners:
/// the admin has only each origin's word for its callers).
#[test]
fn a_slot_that_frees_goes_to_the_owner_with_none_before_the_backlog_of_another() {
    let cases: [(&str, Owner, Owner); 3] = [
        (
            "two callers of one node",
            ("s", Some("A")),
            ("s", Some("B")),
        ),
        ("two nodes, no caller", ("s", None), ("t", None)),
        (
            "one caller at two nodes",
            ("s", Some("A")),
            ("t", Some("A")),
        ),
    ];
    for (case, first, second) in cases {
        let mut c = Cluster::new(Config::default(), 3, 3, &["s", "t"]);
        c.all_report();
        let backlog: Vec<TaskId> = (0..12).map(|_| c.offer(first).0).collect();
        assert_eq!(c.placed.len(), 9, "{case}: every slot taken");
        assert!(c.placed.iter().all(|(t, _)| c.owner[t] == first), "{case}");
        let (theirs, answer) = c.offer(second);
        assert_eq!(
            answer,
            [Message::TaskState {
                task: theirs.clone(),
                state: OfferState::Queued { pending: None },
            }],
            "{case}: queued, no slot free"
        );
        assert_eq!(c.queued(), 4, "{case}");
        // The first run of the backlog ends: its slot goes to the other owner.
        let (worker, done) = c.oldest_run_of(first);
        let now = c.report(&worker, &[done]);
        assert_eq!(now, [(theirs, worker.clone())], "{case}");
        // The next slot that frees goes back to the backlog, oldest first.
        let (worker, done) = c.oldest_run_of(first);
        let now = c.report(&worker, &[done]);
        assert_eq!(now, [(backlog[9].clone(), worker)], "{case}");
    }
}

/// With N owners queued, slots go round them: each round of N placements places one task of
/// each, and at every step the runs of owners still queued differ by at most one — whatever
/// the number of owners, workers and slots, and whichever run ends first. All tasks are
/// offered before any worker reports, each owner's in one block (the arrival order favours the
/// first owner most).
#[test]
fn with_n_owners_queued_each_gets_its_share_within_every_round() {
    // (owners, workers, slots each, tasks per owner, the newest run ends first)
    let cases = [
        (4, 2, 3, 10, false),
        (4, 2, 3, 10, true),
        (3, 1, 1, 6, false),
        (5, 3, 2, 8, false),
        (5, 3, 2, 8, true),
        (2, 4, 4, 20, false),
    ];
    const NAMES: [Option<&str>; 5] = [Some("A"), Some("B"), Some("C"), Some("D"), None];
    for (n, workers, slots, each, newest_first) in cases {
        let case =
            format!("{n} owners, {workers} workers x {slots} slots, newest first: {newest_first}");
        let owners: Vec<Owner> = NAMES[..n].iter().map(|c| ("s", *c)).collect();
        let mut c = Cluster::new(Config::default(), workers, slots, &["s"]);
        for o in &owners {
            for _ in 0..each {
                c.offer(*o);
            }
        }
        c.all_report();
        let total = n * each;
        let fair = |c: &Cluster| {
            let running = c.running_by_owner();
            let queued: Vec<usize> = owners
                .iter()
                .filter(|o| c.placed.iter().filter(|(t, _)| c.owner[t] == **o).count() < each)
                .map(|o| running.get(o).copied().unwrap_or(0))
                .collect();
            let (lo, hi) = (queued.iter().min(), queued.iter().max());
            assert!(
                hi.zip(lo).is_none_or(|(hi, lo)| hi - lo <= 1),
                "{case}: runs of owners still queued {running:?}"
            );
        };
        fair(&c);
        // A run ends, one at a time, until every task was placed.
        while c.placed.len() < total {
            let runs: Vec<(TaskId, String)> = c
                .placed
                .iter()
                .filter(|(t, w)| c.running[w].contains(t))
                .cloned()
                .collect();
            let (t, w) = if newest_first {
                runs.last()
            } else {
                runs.first()
            }
            .cloned()
            .expect("a run");
            let now = c.report(&w, &[t]);
            assert_eq!(now.len(), 1, "{case}: the freed slot is taken");
            fair(&c);
        }
        if !newest_first {
            // Rounds: each N placements in a row place one task of each owner.
            for (i, round) in c.placed.chunks(n).enumerate() {
                let mut seen: Vec<Owner> = round.iter().map(|(t, _)| c.owner[t]).collect();
                seen.sort();
                let mut all = owners.clone();
                all.sort();
                assert_eq!(seen, all, "{case}: round {i}");
            }
        }
    }
}

/// `max_running_per_owner`: an owner with that many placements gets no more, even with slots
/// free; its next task waits, and its origin is told why (`owner_limit`), while another
/// owner's task is placed. When one of its runs ends, the waiting task is placed.
#[test]
fn an_owner_at_its_running_limit_waits_told_why_while_another_is_placed() {
    for limit in [1, 2, 3] {
        let config = Config {
            max_running_per_owner: limit,
            ..Config::default()
        };
        let (alice, bob): (Owner, Owner) = (("s", Some("A")), ("s", Some("B")));
        let mut c = Cluster::new(config, 1, 8, &["s"]);
        c.all_report();
        let mine: Vec<TaskId> = (0..=limit).map(|_| c.offer(alice).0).collect();
        assert_eq!(c.placed.len(), limit as usize, "limit {limit}");
        let waiting = mine.last().unwrap().clone();
        let (theirs, _) = c.offer(bob);
        assert_eq!(
            c.placed.last(),
            Some(&(theirs, "w0".to_owned())),
            "limit {limit}: the other owner's task, on a slot that was free all along"
        );
        assert_eq!(c.queued(), 1, "limit {limit}");
        // The admin judges its queue at its ticks: the origin hears why the task waits.
        let told = Message::TaskState {
            task: waiting.clone(),
            state: OfferState::Queued {
                pending: Some(Pending::OwnerLimit { limit }),
            },
        };
        let mut heard = false;
        for _ in 0..16 {
            let (at, timer) = c.a.next_deadline().expect("a timer");
            let out = c.a.step_vec(at, Event::TimerFired { timer });
            assert!(c.took(&out).is_empty(), "limit {limit}: nothing placed");
            if sent_to(&out, "s").contains(&&told) {
                heard = true;
                break;
            }
        }
        assert!(heard, "limit {limit}: never told why");
        let now = c.a.now_ms();
        assert_eq!(
            c.a.admin_tasks().unwrap().view(&waiting, now),
            Some(AdminView::Queued {
                attempt: 1,
                pending: Some(Pending::OwnerLimit { limit }),
            })
        );
        // One of its runs ends: the waiting task takes the slot.
        let (w, done) = c.oldest_run_of(alice);
        assert_eq!(c.report(&w, &[done]), [(waiting, w)], "limit {limit}");
    }
}

/// The submitter keeps what the admin says of a task waiting for its owner's turn, and of a
/// queue that holds as many of its owner's tasks as it takes (shown by the API as `pending`).
#[test]
fn the_submitter_keeps_why_its_task_waits_its_turn_or_was_not_queued() {
    let mut s = voter_with("s", ABC, Config::default());
    let admin = "a";
    let now = s.now_ms();
    // `s` follows `a`: a heartbeat of term 1.
    s.step_vec(now, from(admin, one_core::heartbeat(1, 1)));
    assert_eq!(s.admin().map(|a| a.as_str()), Some(admin));
    let out = s.step_vec(
        now,
        Event::SubmitTask {
            spec: spec_of(None),
            key: None,
            owner: Some("A".into()),
            request: 1,
        },
    );
    let task = out
        .iter()
        .find_map(|c| match c {
            Command::Notice(Notice::TaskSubmitted { task, .. }) => Some(task.clone()),
            _ => None,
        })
        .expect("submitted");
    let pending = |s: &Core| s.owned_tasks()[&task].pending.clone();
    let state = |state| Message::TaskState {
        task: task.clone(),
        state,
    };
    s.step_vec(
        now,
        from(
            admin,
            state(OfferState::Queued {
                pending: Some(Pending::OwnerLimit { limit: 4 }),
            }),
        ),
    );
    let why = pending(&s).expect("a reason");
    assert!(
        why.contains("4 tasks placed") && why.contains("max_running_per_owner"),
        "{why}"
    );
    s.step_vec(
        now,
        from(
            admin,
            state(OfferState::Queued {
                pending: Some(Pending::Room),
            }),
        ),
    );
    assert_eq!(pending(&s), None);
    let busy = "the admin's queue holds 1024 tasks of this caller at this node";
    s.step_vec(
        now,
        from(
            admin,
            state(OfferState::Busy {
                reason: Some(busy.into()),
            }),
        ),
    );
    assert_eq!(pending(&s).as_deref(), Some(busy));
}

/// The queue takes at most 1,024 tasks of one owner and 4,096 of one origin; an offer beyond
/// is answered `busy`, saying which bound it met, and another owner's offer is still queued.
#[test]
fn the_queue_bounds_each_owner_and_each_origin_and_says_which() {
    let mut c = Cluster::new(Config::default(), 0, 0, &["s", "t"]);
    let busy = |answer: &[Message]| match answer {
        [Message::TaskState {
            state: OfferState::Busy { reason },
            ..
        }] => reason.clone(),
        _ => None,
    };
    for _ in 0..1_024 {
        assert_eq!(busy(&c.offer(("s", Some("A"))).1), None);
    }
    assert_eq!(
        busy(&c.offer(("s", Some("A"))).1).as_deref(),
        Some("the admin's queue holds 1024 tasks of this caller at this node")
    );
    assert_eq!(busy(&c.offer(("s", Some("B"))).1), None, "another caller");
    assert_eq!(
        busy(&c.offer(("t", Some("A"))).1),
        None,
        "A at another node"
    );
    // Origin s: 1,025 queued; three more callers fill it to 4,096.
    for caller in ["C", "D", "E"] {
        let caller: &'static str = caller;
        for _ in 0..1_024 {
            c.offer(("s", Some(caller)));
        }
    }
    assert_eq!(c.queued(), 4_096 + 1);
    assert_eq!(
        busy(&c.offer(("s", Some("F"))).1).as_deref(),
        Some("the admin's queue holds 4096 tasks of this node")
    );
    assert_eq!(busy(&c.offer(("t", Some("B"))).1), None, "another node");
}

/// The same inputs give the same placements, bit for bit — and so does a state restored from
/// its snapshot mid-way (the turn order is part of the admin's state): owners of several
/// origins, offered interleaved, placed in the fair order this test pins.
#[test]
fn the_same_inputs_give_the_same_fair_placements_and_a_snapshot_keeps_the_turns() {
    let owners: [Owner; 4] = [
        ("t", Some("B")),
        ("s", Some("A")),
        ("s", None),
        ("u", Some("A")),
    ];
    let run = |restore_at: Option<usize>| -> Vec<(TaskId, String)> {
        let mut c = Cluster::new(Config::default(), 2, 2, &["s", "t", "u"]);
        // 5 of the first owner, then 3 of each other, then 1 more of the first.
        for _ in 0..5 {
            c.offer(owners[0]);
        }
        for o in &owners[1..] {
            for _ in 0..3 {
                c.offer(*o);
            }
        }
        c.offer(owners[0]);
        c.all_report();
        let mut step = 0;
        while c.queued() > 0 {
            if restore_at == Some(step) {
                let bytes = c.a.snapshot();
                let back = Core::restore(&bytes).expect("restores");
                assert_eq!(back.snapshot(), bytes, "the same state");
                c.a = back;
            }
            let (t, w) = c
                .placed
                .iter()
                .find(|(t, w)| c.running[w].contains(t))
                .cloned()
                .expect("a run");
            c.report(&w, &[t]);
            step += 1;
        }
        c.placed
    };
    let first = run(None);
    assert_eq!(first, run(None));
    for at in [0, 3, 7] {
        assert_eq!(first, run(Some(at)), "restored at step {at}");
    }
    let order: Vec<String> = first.iter().map(|(t, w)| format!("{t}@{w}")).collect();
    // Four slots (w0's two as it reports first, then w1's): one task of each owner, the
    // owners taken by their oldest task; then, as runs end oldest first, each freed slot goes
    // to the owner of the run that ended (the one with fewest runs now), round the owners;
    // the first owner's last three once the others have nothing queued.
    assert_eq!(
        order,
        [
            "t-1@w0", "s-1@w0", "s-4@w1", "u-1@w1", "t-2@w0", "s-2@w0", "s-5@w1", "u-2@w1",
            "t-3@w0", "s-3@w0", "s-6@w1", "u-3@w1", "t-4@w0", "t-5@w0", "t-6@w1",
        ]
    );
}

/// A run the admin adopts from a worker's report (rule 4: it did not place it) counts for its
/// owner once the submitter's offer names the owner: until then the admin knows only its
/// origin. With a limit of one, the owner's next task then waits, and another caller of the
/// same node is placed.
#[test]
fn an_adopted_run_counts_for_its_owner_once_its_offer_names_it() {
    let config = Config {
        max_running_per_owner: 1,
        ..Config::default()
    };
    let (alice, bob): (Owner, Owner) = (("s", Some("A")), ("s", Some("B")));
    let mut c = Cluster::new(config, 1, 4, &["s"]);
    // w0 runs s-1, which this admin never placed: adopted, its owner not known yet.
    let adopted = TaskId {
        origin: "s".into(),
        seq: 1,
    };
    c.seqs.insert("s", 1);
    c.owner.insert(adopted.clone(), alice);
    c.running.insert("w0".into(), vec![adopted.clone()]);
    c.report("w0", &[]);
    assert_eq!(c.a.admin_tasks().unwrap().placed_len(), 1);
    // Its submitter offers it: it is alice's.
    let msg = Message::TaskOffer {
        task: adopted.clone(),
        spec: spec_of(alice.1),
        cancel: false,
        attempt: 1,
        unplaceable_ms: 0,
    };
    let now = c.a.now_ms();
    let out = c.a.step_vec(now, from("s", msg));
    assert!(c.took(&out).is_empty(), "placed already");
    let (next, _) = c.offer(alice);
    let (theirs, _) = c.offer(bob);
    assert_eq!(
        c.placed,
        [(theirs, "w0".to_owned())],
        "alice is at her limit"
    );
    // The adopted run ends: alice's next task takes a slot.
    assert_eq!(c.report("w0", &[adopted]), [(next, "w0".to_owned())]);
}
