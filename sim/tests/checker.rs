//! The checker itself is tested: hand-made traces that break each invariant must be reported,
//! and a clean one must not.

use chorus_sim::checker::check;
use chorus_sim::scenario::builtin;
use chorus_sim::trace::{Header, Line, Record};

fn header(voters: usize) -> Header {
    let mut s = builtin("steady").unwrap();
    s.nodes = voters;
    s.duration_ms = 100_000;
    s.liveness_bound_ms = Some(10_000);
    Header::new(&s, 1, "des", false)
}

fn at(t: u64, record: Record) -> Line {
    Line { t, record }
}

fn restart(n: &str) -> Record {
    Record::Restart { node: n.into() }
}

fn admin(n: &str, term: u64, lease_until: u64) -> Record {
    Record::BecameAdmin {
        node: n.into(),
        term,
        lease_until,
    }
}

fn known(n: &str, admin: &str, term: u64) -> Record {
    Record::AdminKnown {
        node: n.into(),
        admin: admin.into(),
        term,
    }
}

fn vote(n: &str, term: u64, c: &str) -> Record {
    Record::Voted {
        node: n.into(),
        term,
        candidate: c.into(),
    }
}

/// Three nodes up; n0 elected in term 1 and known to all at t=3000.
fn healthy_start() -> Vec<Line> {
    vec![
        at(0, restart("n0")),
        at(0, restart("n1")),
        at(0, restart("n2")),
        at(2_900, vote("n0", 1, "n0")),
        at(2_950, vote("n1", 1, "n0")),
        at(3_000, admin("n0", 1, 33_000)),
        at(3_000, known("n0", "n0", 1)),
        at(3_010, known("n1", "n0", 1)),
        at(3_010, known("n2", "n0", 1)),
        at(
            30_000,
            Record::LeaseRenewed {
                node: "n0".into(),
                term: 1,
                lease_until: 60_000,
            },
        ),
        at(
            57_000,
            Record::LeaseRenewed {
                node: "n0".into(),
                term: 1,
                lease_until: 87_000,
            },
        ),
        at(
            84_000,
            Record::LeaseRenewed {
                node: "n0".into(),
                term: 1,
                lease_until: 114_000,
            },
        ),
    ]
}

fn invariants(lines: &[Line], voters: usize) -> Vec<u8> {
    check(&header(voters), lines)
        .iter()
        .map(|v| v.invariant)
        .collect()
}

#[test]
fn a_clean_trace_passes() {
    assert_eq!(invariants(&healthy_start(), 3), Vec::<u8>::new());
}

#[test]
fn two_admins_in_one_term_are_reported() {
    let mut t = healthy_start();
    t.insert(6, at(3_000, admin("n1", 1, 3_001)));
    let found = invariants(&t, 3);
    assert!(found.contains(&1), "{found:?}");
}

#[test]
fn overlapping_leases_are_reported() {
    let mut t = healthy_start();
    // n1 takes term 2 while n0's lease (until 60 000) still runs.
    t.push(at(40_000, admin("n1", 2, 70_000)));
    t.sort_by_key(|l| l.t);
    let found = invariants(&t, 3);
    assert_eq!(found.first(), Some(&2), "{found:?}");
}

#[test]
fn a_lease_after_step_down_or_crash_is_fine() {
    let mut t = healthy_start();
    t.truncate(9);
    t.push(at(
        10_000,
        Record::SteppedDown {
            node: "n0".into(),
            term: 1,
            reason: "check_quorum".into(),
        },
    ));
    t.push(at(10_500, admin("n1", 2, 40_000)));
    t.push(at(10_500, known("n1", "n1", 2)));
    t.push(at(10_510, known("n0", "n1", 2)));
    t.push(at(10_510, known("n2", "n1", 2)));
    assert_eq!(invariants(&t, 3), Vec::<u8>::new());
}

#[test]
fn a_double_vote_is_reported_even_across_a_restart() {
    let mut t = healthy_start();
    t.truncate(5);
    t.push(at(2_960, Record::Crash { node: "n1".into() }));
    t.push(at(2_970, restart("n1")));
    t.push(at(2_980, vote("n1", 1, "n2")));
    let found = invariants(&t, 3);
    assert!(found.contains(&3), "{found:?}");
}

#[test]
fn no_admin_after_heal_is_reported() {
    let lines = vec![
        at(0, restart("n0")),
        at(0, restart("n1")),
        at(0, restart("n2")),
        at(
            1_000,
            Record::Partition {
                groups: vec![vec!["n0".into()], vec!["n1".into(), "n2".into()]],
            },
        ),
        at(5_000, Record::Heal),
        // Nothing is elected for the rest of the run.
        at(40_000, vote("n1", 1, "n1")),
    ];
    let found = invariants(&lines, 3);
    assert_eq!(
        found,
        vec![4],
        "the healed period from t=5000 is reported once"
    );
}

#[test]
fn an_admin_unknown_to_one_live_node_is_not_enough() {
    let mut t = healthy_start();
    t.retain(|l| !matches!(&l.record, Record::AdminKnown { node, .. } if node == "n2"));
    assert_eq!(invariants(&t, 3), vec![4]);
}

#[test]
fn a_term_raised_by_a_returning_minority_node_is_reported() {
    let mut t = healthy_start();
    t.truncate(10); // n0 holds a lease until 60 000
    t.push(at(
        31_000,
        Record::Partition {
            groups: vec![vec!["n0".into(), "n1".into()], vec!["n2".into()]],
        },
    ));
    t.push(at(40_000, Record::Heal));
    t.push(at(40_100, vote("n2", 7, "n2")));
    let found = invariants(&t, 3);
    assert!(found.contains(&5), "{found:?}");
}

#[test]
fn violations_name_the_line_and_time() {
    let mut t = healthy_start();
    t.insert(6, at(3_000, admin("n1", 1, 3_001)));
    let v = &check(&header(3), &t)[0];
    assert_eq!((v.invariant, v.t, v.line), (1, 3_000, 8));
    assert!(v.to_string().contains("election safety"), "{v}");
}
