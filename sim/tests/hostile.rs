//! Hostile peers (issue 9): two of seven nodes lie to random nodes — forged heartbeats for live
//! terms, extreme terms, unasked replies with made-up electorates, replays — on top of every
//! built-in scenario's faults. The checker judges the honest nodes: invariants 1–5 must hold.

use chorus_sim::scenario::{Scenario, BUILTINS};
use chorus_sim::sweep::{jobs, sweep, EngineChoice, Job};

fn with_liars(name: &str) -> anyhow::Result<Scenario> {
    let mut s = Scenario::load(name)?;
    if s.hostile.is_off() {
        s.nodes = 7;
        s.voters = Some(5);
        s.late_joiners = s.late_joiners.min(1);
        s.hostile.nodes = 2;
    }
    s.validate().map_err(anyhow::Error::msg)?;
    Ok(s)
}

fn failures(all: &[Job]) -> Vec<String> {
    sweep(all, 2, false, &|_, _| {})
        .into_iter()
        .filter(|r| !r.failures.is_empty())
        .map(|r| {
            let j = &r.job;
            format!(
                "{} seed {}: {}\n  reproduce: {}",
                j.name,
                j.seed,
                r.failures.join("; "),
                chorus_sim::run::repro_command(&j.name, &j.scenario, j.seed, j.engine)
            )
        })
        .collect()
}

#[test]
fn liars_break_no_invariant_in_any_scenario() {
    let names: Vec<&str> = BUILTINS.to_vec();
    let all = jobs(&names.join(","), 0..24, EngineChoice::Des, with_liars).unwrap();
    assert_eq!(all.len(), 24 * names.len());
    assert!(all.iter().all(|j| j.scenario.hostile.nodes == 2));
    let failed = failures(&all);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn the_hostile_scenario_holds_over_many_seeds() {
    let all = jobs("hostile", 1_000..1_200, EngineChoice::Des, Scenario::load).unwrap();
    let failed = failures(&all);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn lying_is_deterministic_and_refused_by_reason() {
    let s = Scenario::load("hostile").unwrap();
    let run = || chorus_sim::run::run_to_bytes(&s, 7, chorus_sim::run::Engine::Des, false).unwrap();
    let (a, fa) = run();
    let (b, _) = run();
    assert_eq!(a, b, "same seed, same bytes");
    // Every kind of refusal a liar provokes is seen, and the honest nodes still elect. The
    // liars announce newer certified electorates and answer the nodes that ask with forged
    // links (issue 32): refused as `bad_certificate`, and never taken (below).
    for reason in [
        "not_member",
        "out_of_range",
        "unsolicited",
        "bad_certificate",
    ] {
        assert!(
            fa.stats.refused.get(reason).is_some_and(|n| *n > 0),
            "{reason}: {:?}",
            fa.stats.refused
        );
    }
    assert!(fa.stats.elections >= 1);
    let (_, lines) = chorus_sim::trace::read(&String::from_utf8(a).unwrap()).unwrap();
    let liars: Vec<String> = (0..s.nodes)
        .filter(|i| s.is_hostile(*i))
        .map(|i| format!("n{i}"))
        .collect();
    let mut changes = 0;
    for l in &lines {
        if let chorus_sim::trace::Record::ElectorateChanged { members, .. } = &l.record {
            changes += 1;
            assert!(
                !members.iter().any(|m| liars.contains(&m.to_string())),
                "a forged electorate was taken: {l:?}"
            );
        }
    }
    assert!(
        changes > 0,
        "the run changes no electorate: the check above says nothing"
    );
}

#[test]
fn hostile_nodes_are_workers_and_des_only() {
    let mut s = Scenario::load("steady").unwrap();
    s.hostile.nodes = 1;
    assert!(s.validate().unwrap_err().contains("never voters"));
    s.voters = Some(4);
    s.validate().unwrap();
    let err = chorus_sim::run::run_to_bytes(&s, 1, chorus_sim::run::Engine::Turmoil, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("discrete-event engine only"), "{err}");
}

/// Issue 52: liars forge results of tasks they never ran — to the task's origin, and to the
/// admin to relay, naming any node as the worker — and acknowledgements, to workers and to
/// the admin naming a worker. Under the task scenario's load and faults every one is refused
/// (`not_owner` is theirs alone: no honest node sends another's acknowledgement), no
/// submitter takes a forged result (`hostile.rs` marks them), and invariant 7 holds: no
/// worker forgot a result its submitter never had.
#[test]
fn forged_task_results_and_acknowledgements_are_refused() {
    use chorus_sim::hostile::FORGED_STDOUT_PREFIX;
    let s = with_liars("tasks").unwrap();
    let liars: Vec<String> = (0..s.nodes)
        .filter(|i| s.is_hostile(*i))
        .map(|i| format!("n{i}"))
        .collect();
    assert_eq!(liars, ["n5", "n6"]);
    for seed in 0..6 {
        let (bytes, fa) =
            chorus_sim::run::run_to_bytes(&s, seed, chorus_sim::run::Engine::Des, false).unwrap();
        assert!(fa.violations.is_empty(), "seed {seed}: {:?}", fa.violations);
        for reason in ["not_owner", "unsolicited"] {
            assert!(
                fa.stats.refused.get(reason).is_some_and(|n| *n > 20),
                "seed {seed}: {reason}: {:?}",
                fa.stats.refused
            );
        }
        assert!(fa.stats.tasks_accepted > 100, "seed {seed}");
        // A liar's word counts for a task an admin placed on it (its honest core ran it): those
        // are left out.
        let (_, lines) = chorus_sim::trace::read(&String::from_utf8(bytes).unwrap()).unwrap();
        let on_liars: std::collections::BTreeSet<String> = lines
            .iter()
            .filter_map(|l| match &l.record {
                chorus_sim::trace::Record::TaskPlaced { task, worker, .. }
                    if liars.contains(worker) =>
                {
                    Some(task.clone())
                }
                _ => None,
            })
            .collect();
        let cores = chorus_sim::des::cores_at(&s, seed, s.duration_ms).unwrap();
        let mut done = 0;
        for (i, core) in cores.iter().enumerate() {
            let Some(core) = core.as_ref().filter(|_| !s.is_hostile(i)) else {
                continue;
            };
            for (task, t) in core.owned_tasks() {
                let Some(result) = &t.result else { continue };
                done += 1;
                assert!(
                    !result.stdout.starts_with(FORGED_STDOUT_PREFIX)
                        || on_liars.contains(&task.to_string()),
                    "seed {seed}: n{i} took a forged result of {task}: {result:?}"
                );
            }
        }
        assert!(done > 50, "seed {seed}: {done} results to look at");
    }
}
