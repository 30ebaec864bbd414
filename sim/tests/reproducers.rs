//! Every scenario in `sim/reproducers/` runs over a few seeds on both engines, and the checker's
//! verdict is compared with what the table below expects of that file: clean for the bugs
//! already fixed in the core, and for the findings still open (issue 32) the violations they
//! reproduce — so this test fails, telling us to flip the entry, once the core fix lands.

use std::collections::BTreeSet;

use chorus_core::ChangeOutcome;
use chorus_sim::run::{run_to_bytes, Engine};
use chorus_sim::scenario::Scenario;
use chorus_sim::sweep::{sweep, Job};
use chorus_sim::trace::{read, Record};

/// What a reproducer must give on every seed run here.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// No violation.
    Clean,
    /// At least these invariants violated (others may be too).
    Violates(&'static [u8]),
}

use Expect::{Clean, Violates};

/// Each file of `sim/reproducers/`, what it must give, and on which seeds: the default ones
/// on both engines, or (for a shrunk scenario whose random targets only reproduce on its own
/// seed) these seeds on the discrete-event engine only.
const TABLE: &[(&str, Expect, &[u64])] = &[
    // Fixed in the core (issue 10, issue 12).
    ("change-cut-short-lossy.toml", Clean, &[]),
    ("slow-links-bootstrap.toml", Clean, &[]),
    // Issue 32, finding 1: two admins in term 3, then overlapping leases after the heal.
    // Flip to clean when the core fix lands.
    ("two-admins-siblings.toml", Violates(&[1, 2]), &[]),
    // Issue 32, finding 1 by autopilot. Flip to clean when the core fix lands.
    ("two-admins-autopilot.toml", Violates(&[1, 2]), &[]),
    // Issue 32, finding 2: the stale voter never learns the admin; with n4 gone nobody is
    // elected. Flip to clean when the core fix lands.
    ("stale-voter-rolling.toml", Violates(&[4]), &[]),
    // Issue 32, finding 2, second part (see also the test below). Flip to clean when the core
    // fix lands.
    ("removal-needs-nonfollower.toml", Violates(&[4]), &[]),
    // Issue 32, finding 3: the admin deposed right after the heal. Flip to clean when the core
    // fix lands.
    ("mixed-heartbeat-timeouts.toml", Violates(&[5]), &[]),
    // Found by `chorus-sim fuzz` while issue 32 is open: an overridden proposal taken up after
    // a heal strands the cluster. Flip to clean when the core fix lands.
    ("stale-proposal-stall.toml", Violates(&[4]), &[]),
    // Found by `chorus-sim fuzz`: a candidate that takes an electorate without itself still
    // wins, in a term already won. Flip to clean when the core fix lands.
    ("candidate-leaves-electorate.toml", Violates(&[1]), &[5424]),
    // Found by `chorus-sim fuzz`: late standbys found a second cluster while every founder is
    // down (a design question; see the file). Flip to clean if the core comes to prevent it.
    ("late-standbys-second-cluster.toml", Violates(&[1]), &[]),
];

const DES_SEEDS: std::ops::Range<u64> = 0..4;
const TURMOIL_SEEDS: std::ops::Range<u64> = 0..2;

fn dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("reproducers")
}

fn load(file: &str) -> Scenario {
    let path = dir().join(file);
    Scenario::from_file(&path).unwrap_or_else(|e| panic!("{file}: {e:#}"))
}

#[test]
fn the_table_names_every_reproducer() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    let listed: BTreeSet<String> = TABLE.iter().map(|(f, ..)| f.to_string()).collect();
    assert_eq!(on_disk, listed, "add each new reproducer to TABLE");
}

#[test]
fn every_reproducer_gives_what_the_table_expects_on_both_engines() {
    let mut jobs = Vec::new();
    for (file, _, seeds) in TABLE {
        let scenario = load(file);
        let runs: Vec<(u64, Engine)> = if seeds.is_empty() {
            DES_SEEDS
                .map(|s| (s, Engine::Des))
                .chain(TURMOIL_SEEDS.map(|s| (s, Engine::Turmoil)))
                .collect()
        } else {
            seeds.iter().map(|s| (*s, Engine::Des)).collect()
        };
        for (seed, engine) in runs {
            jobs.push(Job {
                name: dir().join(file).display().to_string(),
                scenario: scenario.clone(),
                seed,
                engine,
            });
        }
    }
    let results = sweep(&jobs, 2, false, &|_, _| {});
    let mut wrong = Vec::new();
    for r in &results {
        let file = TABLE
            .iter()
            .find(|(f, ..)| r.job.name.ends_with(f))
            .expect("every job is from the table");
        let found: BTreeSet<u8> = r
            .failures
            .iter()
            .filter_map(|f| {
                f.strip_prefix("invariant ")?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        let ok = match file.1 {
            Clean => r.failures.is_empty(),
            Violates(want) => want.iter().all(|i| found.contains(i)),
        };
        if !ok {
            wrong.push(format!(
                "{} seed {} ({}): expected {:?}, got {:?}{}",
                file.0,
                r.job.seed,
                r.job.engine.as_str(),
                file.1,
                found,
                match file.1 {
                    Violates(_) if found.is_empty() =>
                        " — fixed? flip the entry to Clean in sim/tests/reproducers.rs",
                    _ => "",
                }
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The second part of finding 2, beyond invariant 4 (which the stale voter alone already
/// breaks): the removal of n4 proposed at 1m30s never commits, and nobody is elected after it
/// although every voter is up and the network is whole. Flip (assert a commit or an admin)
/// when the core fix lands.
#[test]
fn a_removal_that_needs_a_stale_voter_never_commits_and_the_cluster_stalls() {
    let s = load("removal-needs-nonfollower.toml");
    for (seed, engine) in [(0, Engine::Des), (1, Engine::Des), (0, Engine::Turmoil)] {
        let (bytes, _) = run_to_bytes(&s, seed, engine, false).unwrap();
        let (_, lines) = read(&String::from_utf8(bytes).unwrap()).unwrap();
        let after = |l: &&chorus_sim::trace::Line| l.t >= 90_000;
        let proposed = lines.iter().filter(after).any(|l| {
            matches!(
                &l.record,
                Record::MembershipChange {
                    outcome: ChangeOutcome::Proposed { .. },
                    request: Some(_),
                    ..
                }
            )
        });
        let committed = lines.iter().filter(after).any(|l| {
            matches!(
                &l.record,
                Record::MembershipChange {
                    outcome: ChangeOutcome::Committed { .. },
                    ..
                }
            )
        });
        let elected = lines
            .iter()
            .filter(after)
            .any(|l| matches!(&l.record, Record::BecameAdmin { .. }));
        assert!(proposed, "seed {seed} {engine:?}: the removal was proposed");
        assert!(
            !committed && !elected,
            "seed {seed} {engine:?}: committed {committed}, elected {elected} — fixed? flip this test"
        );
    }
}
