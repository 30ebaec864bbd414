//! The CI sweep: about 900 seeded runs across every built-in scenario, on both engines, with
//! zero invariant violations; a few seeds also run twice to check byte-identical traces. The
//! issue-10 reproducers (`REPRODUCERS`) get more seeds in `tests/bootstrap.rs` and
//! `tests/membership.rs`.

mod common;
use chorus_sim::scenario::{Scenario, BUILTINS};
use chorus_sim::sweep::{jobs, EngineChoice};
use common::assert_clean;

/// The built-ins as a `--scenario` list; `des_only` keeps the hostile one (turmoil has no
/// liars) when false.
fn passing(des_only: bool) -> String {
    BUILTINS
        .iter()
        .filter(|n| des_only || Scenario::load(n).unwrap().hostile.is_off())
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

fn load(name: &str, duration_ms: Option<u64>) -> anyhow::Result<Scenario> {
    let mut s = Scenario::load(name)?;
    if let Some(d) = duration_ms {
        s.duration_ms = d;
    }
    Ok(s)
}

#[test]
fn des_800_runs_all_scenarios_no_violations() {
    let all = jobs(&passing(true), 0..50, EngineChoice::Des, |n| load(n, None)).unwrap();
    assert_eq!(all.len(), 800);
    assert_clean(&all, false);
}

#[test]
fn turmoil_90_runs_all_scenarios_no_violations() {
    // Five simulated minutes each: turmoil runs the real runtime loop and codec, so it is slower.
    let all = jobs(&passing(false), 0..6, EngineChoice::Turmoil, |n| {
        load(n, Some(5 * 60 * 1000))
    })
    .unwrap();
    assert_eq!(all.len(), 90);
    assert_clean(&all, false);
}

#[test]
fn both_engines_are_deterministic_across_scenarios() {
    let all = jobs(&passing(true), 100..102, EngineChoice::Mix, |n| {
        load(n, Some(3 * 60 * 1000))
    })
    .unwrap();
    assert_clean(&all, true);
}
