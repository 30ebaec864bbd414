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
    // Fixed by ordering electorates by (stamp, version) (core/src/membership.rs).
    ("two-admins-siblings.toml", Clean, &[]),
    // Issue 32, finding 1 by autopilot. Fixed likewise.
    ("two-admins-autopilot.toml", Clean, &[]),
    // Issue 32, finding 2: the stale voter never learned the admin; with n4 gone nobody was
    // elected. Fixed by certified links (core/src/catchup.rs): it catches up from the admin.
    ("stale-voter-rolling.toml", Clean, &[]),
    // Issue 32, finding 2, second part (see also the test below): the stale voter catches up,
    // so the removal commits.
    ("removal-needs-nonfollower.toml", Clean, &[]),
    // Issue 32, finding 3: the admin deposed right after the heal. Fixed by the admin beating
    // within half the shortest promise it hears (core/src/election.rs).
    ("mixed-heartbeat-timeouts.toml", Clean, &[]),
    // Found by `chorus-sim fuzz` while issue 32 was open: an overridden proposal taken up
    // after a heal stranded the cluster. Fixed: only a node's admin hands it an electorate.
    ("stale-proposal-stall.toml", Clean, &[]),
    // Found by `chorus-sim fuzz`: a candidate that took an electorate without itself still
    // won, in a term already won. Fixed: a node whose electorate changes gives its round up.
    ("candidate-leaves-electorate.toml", Clean, &[5424]),
    // Issue 51, finding 9: each retiring admin removes itself and is stopped 100 ms after the
    // commit, taking the only copy of its link; the voter down throughout never catches up.
    // Fixed: a change commits once a majority of the new electorate holds its link.
    ("lost-link-rolling.toml", Clean, &[]),
    // Found by `chorus-sim fuzz` while fixing finding 9: workers on the founding electorate
    // asked for links only an admin that joined after them. Fixed: an unanswered question
    // goes to the next peer.
    ("joined-after-the-link.toml", Clean, &[243728]),
    // Found by `chorus-sim fuzz`: a lease the founder of a cluster grown from one voter granted
    // itself alone outlived two changes (invariant 2). Fixed: a proposal cuts the lease to
    // the promises of the electorates in force.
    ("grown-lease-outlives-changes.toml", Clean, &[341872]),
    // Found by `chorus-sim fuzz`: the nodes that joined after a link held their first
    // electorate without it, and every node that held it retired. Fixed: a node asks its
    // admin once for the link of the electorate it joined with.
    ("joined-without-the-anchor-link.toml", Clean, &[454363]),
    // Found by `chorus-sim fuzz`: a checker false positive of invariant 10 when an add and a
    // leave cross. Fixed in the checker.
    ("add-and-leave-crossing.toml", Clean, &[400827]),
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

/// Issue 32, finding 2, second part: after the rolling replacement the operator asks the
/// admin to remove n4, whose new electorate {n2, n3} needs n2. It stalled the cluster for
/// good while n2 was stale (the change never committed, the lease needed both majorities).
/// n2 now catches up (rule 7), so to keep the strict reconfiguration check tested it stays
/// down here: the admin refuses the removal (`new_majority_not_following`, as etcd does) and
/// keeps its lease.
#[test]
fn a_removal_that_needs_a_stale_voter_is_refused_and_the_admin_stays() {
    let mut s = load("removal-needs-nonfollower.toml");
    let restarts = |e: &chorus_sim::scenario::Scheduled| {
        matches!(e.action, chorus_sim::scenario::Action::Restart { .. })
    };
    assert_eq!(s.events.iter().filter(|e| restarts(e)).count(), 1);
    s.events.retain(|e| !restarts(e));
    for (seed, engine) in [(0, Engine::Des), (1, Engine::Des), (0, Engine::Turmoil)] {
        let (bytes, _) = run_to_bytes(&s, seed, engine, false).unwrap();
        let (_, lines) = read(&String::from_utf8(bytes).unwrap()).unwrap();
        let after = |l: &&chorus_sim::trace::Line| l.t >= 90_000;
        let outcome = |want: fn(&ChangeOutcome) -> bool| {
            lines.iter().filter(after).any(|l| {
                matches!(&l.record, Record::MembershipChange { outcome, request: Some(_), .. } if want(outcome))
            })
        };
        let refused = outcome(|o| {
            matches!(
                o,
                ChangeOutcome::Refused {
                    reason: chorus_core::ChangeRefusal::NewMajorityNotFollowing
                }
            )
        });
        let proposed = outcome(|o| matches!(o, ChangeOutcome::Proposed { .. }));
        let renewed_late = lines
            .iter()
            .any(|l| l.t >= 120_000 && matches!(&l.record, Record::LeaseRenewed { .. }));
        assert!(
            refused && !proposed,
            "seed {seed} {engine:?}: refused {refused}, proposed {proposed}"
        );
        assert!(
            renewed_late,
            "seed {seed} {engine:?}: the admin keeps renewing its lease"
        );
    }
}
