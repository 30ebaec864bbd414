//! The checker itself is tested: hand-made traces that break each invariant must be reported,
//! and a clean one must not.

use chorus_core::{ChangeOutcome, MemberChange, NodeId};
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

fn granted(n: &str, term: u64, to: &str) -> Record {
    Record::VoteGranted {
        node: n.into(),
        term,
        to: to.into(),
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
        at(2_950, granted("n1", 1, "n0")),
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
    t.insert(7, at(3_000, admin("n1", 1, 3_001)));
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
    t.truncate(10);
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
    t.truncate(6);
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
    t.truncate(11); // n0 holds a lease until 60 000
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
    t.insert(7, at(3_000, admin("n1", 1, 3_001)));
    let v = &check(&header(3), &t)[0];
    assert_eq!((v.invariant, v.t, v.line), (1, 3_000, 9));
    assert!(v.to_string().contains("election safety"), "{v}");
}

#[test]
fn a_second_grant_on_the_wire_is_reported_though_only_one_vote_was_noticed() {
    let mut t = healthy_start();
    // n1 reported one vote (for n0) but later sent a granted reply to n2 in the same term.
    t.push(at(40_000, granted("n1", 1, "n2")));
    t.sort_by_key(|l| l.t);
    let v = check(&header(3), &t);
    assert_eq!(v.iter().map(|v| v.invariant).collect::<Vec<_>>(), [3]);
    assert!(
        v[0].message
            .contains("n1 voted for n0 and for n2 in term 1"),
        "{}",
        v[0]
    );
}

#[test]
fn grants_alone_are_judged_too() {
    // A node whose notices say nothing: two grants in one term.
    let mut t = healthy_start();
    t.push(at(50_000, granted("n2", 4, "n0")));
    t.push(at(50_001, granted("n2", 4, "n1")));
    assert!(invariants(&t, 3).contains(&3));
}

#[test]
fn a_candidate_that_grants_another_its_own_term_is_reported() {
    let mut t = healthy_start();
    t.insert(5, at(2_900, granted("n0", 1, "n1")));
    assert!(invariants(&t, 3).contains(&3));
}

#[test]
fn the_same_grant_sent_again_is_fine() {
    let mut t = healthy_start();
    t.insert(6, at(2_960, granted("n1", 1, "n0")));
    t.push(at(40_000, granted("n1", 2, "n2")));
    assert_eq!(invariants(&t, 3), Vec::<u8>::new());
}

/// Both engines trace the granted replies they send, each after the voter's `voted` notice.
#[test]
fn both_engines_trace_granted_vote_replies() {
    use chorus_sim::run::{run_to_bytes, Engine};
    for engine in [Engine::Des, Engine::Turmoil] {
        let mut s = builtin("steady").unwrap();
        s.duration_ms = 60_000;
        let (bytes, f) = run_to_bytes(&s, 1, engine, false).unwrap();
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        let (_, lines) = chorus_sim::trace::read(std::str::from_utf8(&bytes).unwrap()).unwrap();
        let mut noticed = std::collections::BTreeSet::new();
        let mut grants = 0;
        for l in &lines {
            match &l.record {
                Record::Voted {
                    node,
                    term,
                    candidate,
                } if node != candidate => {
                    noticed.insert((node.clone(), *term, candidate.clone()));
                }
                Record::VoteGranted { node, term, to } => {
                    grants += 1;
                    assert!(
                        noticed.contains(&(node.clone(), *term, to.clone())),
                        "{engine:?}: grant {node}->{to} in term {term} before its notice"
                    );
                }
                _ => {}
            }
        }
        assert!(
            grants >= 2,
            "{engine:?}: an election needs granted replies ({grants})"
        );
    }
}

// Liveness judged against the electorate in force, learned from `electorate_changed` and the
// admin's `membership_change` records.

fn electorate(n: &str, version: u64, term: u64, members: &[&str]) -> Record {
    Record::ElectorateChanged {
        node: n.into(),
        version,
        term,
        members: members.iter().map(|m| m.to_string()).collect(),
    }
}

fn change(n: &str, add: bool, who: &str, outcome: ChangeOutcome) -> Record {
    let node = NodeId::from(who);
    Record::MembershipChange {
        node: n.into(),
        change: if add {
            MemberChange::Add { node }
        } else {
            MemberChange::Remove { node }
        },
        outcome,
        request: None,
    }
}

fn crash(n: &str) -> Record {
    Record::Crash { node: n.into() }
}

/// Five eligible nodes; the bootstrap electorate is n0..=n2 and n3, n4 are standbys. n0 is
/// elected in term 1 and known to all at t=3000, with a lease to 60 000.
fn three_of_five() -> Vec<Line> {
    let e1 = ["n0", "n1", "n2"];
    let mut t: Vec<Line> = (0..5).map(|i| at(0, restart(&format!("n{i}")))).collect();
    for i in 0..5 {
        t.push(at(1_000, electorate(&format!("n{i}"), 1, 0, &e1)));
    }
    t.push(at(3_000, admin("n0", 1, 60_000)));
    for i in 0..5 {
        t.push(at(3_000, known(&format!("n{i}"), "n0", 1)));
    }
    t
}

#[test]
fn no_liveness_is_demanded_once_a_majority_of_the_electorate_is_down() {
    // Two of the three voters die for good: three of the five eligible nodes are up, but only
    // one voter. Nobody can be elected, and the checker must not demand it.
    let mut t = three_of_five();
    t.push(at(10_000, crash("n1")));
    t.push(at(10_000, crash("n2")));
    t.push(at(
        10_000,
        Record::SteppedDown {
            node: "n0".into(),
            term: 1,
            reason: "check_quorum".into(),
        },
    ));
    assert_eq!(invariants(&t, 5), Vec::<u8>::new());
}

/// n2 dies for good; the admin n0 removes it, then adds the standby n3 (each committed).
fn n2_replaced_by_n3() -> Vec<Line> {
    let mut t = three_of_five();
    t.push(at(10_000, crash("n2")));
    t.push(at(20_000, electorate("n0", 2, 1, &["n0", "n1"])));
    t.push(at(
        20_000,
        change("n0", false, "n2", ChangeOutcome::Proposed { version: 2 }),
    ));
    t.push(at(20_020, electorate("n1", 2, 1, &["n0", "n1"])));
    t.push(at(
        20_040,
        change("n0", false, "n2", ChangeOutcome::Committed { version: 2 }),
    ));
    t.push(at(21_000, electorate("n0", 3, 1, &["n0", "n1", "n3"])));
    t.push(at(
        21_000,
        change("n0", true, "n3", ChangeOutcome::Proposed { version: 3 }),
    ));
    t.push(at(21_020, electorate("n1", 3, 1, &["n0", "n1", "n3"])));
    t.push(at(21_020, electorate("n3", 3, 1, &["n0", "n1", "n3"])));
    t.push(at(
        21_040,
        change("n0", true, "n3", ChangeOutcome::Committed { version: 3 }),
    ));
    t
}

#[test]
fn after_a_replacement_a_second_lost_voter_must_not_stop_elections() {
    // Electorate n0, n1, n3 with n1 and n3 up after n0 dies: a majority, so an admin is owed.
    // (Counted over the five eligible nodes — n1, n3, n4 — it would be too; counted over the
    // bootstrap electorate — n1 only — it would not.)
    let mut t = n2_replaced_by_n3();
    t.push(at(30_000, crash("n0")));
    assert_eq!(invariants(&t, 5), vec![4]);
    t.push(at(35_000, admin("n3", 2, 65_000)));
    for n in ["n1", "n3", "n4"] {
        t.push(at(35_010, known(n, "n3", 2)));
    }
    assert_eq!(invariants(&t, 5), Vec::<u8>::new());
}

#[test]
fn during_a_change_a_majority_of_both_electorates_is_needed() {
    // n0 proposes adding n3 and dies with n3 before it commits: n1 and n2 are a majority of
    // the old electorate but not of the new one, so no admin is owed…
    let mut t = three_of_five();
    t.push(at(
        10_000,
        electorate("n0", 2, 1, &["n0", "n1", "n2", "n3"]),
    ));
    t.push(at(
        10_000,
        change("n0", true, "n3", ChangeOutcome::Proposed { version: 2 }),
    ));
    t.push(at(10_005, crash("n0")));
    t.push(at(10_005, crash("n3")));
    assert_eq!(invariants(&t, 5), Vec::<u8>::new());
    // …until n1 is elected with the old one: that overrides the change, and n1 must be known.
    t.push(at(20_000, admin("n1", 2, 50_000)));
    t.push(at(20_000, known("n1", "n1", 2)));
    t.push(at(20_010, known("n2", "n1", 2)));
    // n4 never learns of n1: reported once the bound has passed.
    assert_eq!(invariants(&t, 5), vec![4]);
}

#[test]
fn outcomes_reported_by_a_node_that_is_not_the_admin_change_nothing() {
    // n1 hears that a change it asked for committed; the electorate in force stays the
    // bootstrap one, so with n1 and n2 down no admin is owed.
    let mut t = three_of_five();
    t.push(at(
        9_000,
        change("n1", true, "n3", ChangeOutcome::Committed { version: 2 }),
    ));
    t.push(at(10_000, crash("n1")));
    t.push(at(10_000, crash("n2")));
    t.push(at(
        10_000,
        Record::SteppedDown {
            node: "n0".into(),
            term: 1,
            reason: "check_quorum".into(),
        },
    ));
    assert_eq!(invariants(&t, 5), Vec::<u8>::new());
}

/// n0, admin of term 1, removes itself at 10 s: electorate v2 = {n1, n2} proposed and
/// committed, and n0 steps down with `removed`.
fn n0_removes_itself(t: &mut Vec<Line>) {
    t.push(at(10_000, electorate("n0", 2, 1, &["n1", "n2"])));
    t.push(at(
        10_000,
        change("n0", false, "n0", ChangeOutcome::Proposed { version: 2 }),
    ));
    t.push(at(
        10_040,
        change("n0", false, "n0", ChangeOutcome::Committed { version: 2 }),
    ));
    t.push(at(
        10_040,
        Record::SteppedDown {
            node: "n0".into(),
            term: 1,
            reason: "removed".into(),
        },
    ));
}

#[test]
fn an_admin_that_removed_itself_must_be_followed_within_the_bound() {
    let mut t = three_of_five();
    n0_removes_itself(&mut t);
    assert_eq!(invariants(&t, 5), vec![4]);
    t.push(at(12_000, admin("n2", 2, 40_000)));
    for i in 0..5 {
        t.push(at(12_010, known(&format!("n{i}"), "n2", 2)));
    }
    assert_eq!(invariants(&t, 5), Vec::<u8>::new());
}

/// Issue 32, finding 4: after a heal the checker guards the majority admin's term (invariant
/// 5); when that admin then removes itself and steps down, the election that follows raises the
/// term as designed, and must not be reported as a minority node's raised term. (Reported as
/// invariant 5 by the checker of 2b2eb3c, which restarted the liveness clock on that step-down
/// but kept the guard.)
#[test]
fn the_election_after_an_admin_removed_itself_may_raise_the_term_after_a_heal() {
    let mut t = three_of_five();
    t.push(at(
        5_000,
        Record::Partition {
            groups: vec![
                vec!["n0".into(), "n1".into(), "n2".into(), "n3".into()],
                vec!["n4".into()],
            ],
        },
    ));
    // Healed while n0 holds its lease (term 1): terms above 1 are guarded until 16 000.
    t.push(at(6_000, Record::Heal));
    n0_removes_itself(&mut t);
    t.push(at(11_900, vote("n2", 2, "n2")));
    t.push(at(11_950, vote("n1", 2, "n2")));
    t.push(at(12_000, admin("n2", 2, 40_000)));
    for i in 0..5 {
        t.push(at(12_010, known(&format!("n{i}"), "n2", 2)));
    }
    assert_eq!(invariants(&t, 5), Vec::<u8>::new());
    // A term raised before the removal is still reported.
    let mut early = t.clone();
    early.insert(
        early.iter().position(|l| l.t >= 10_000).unwrap(),
        at(9_000, vote("n4", 9, "n4")),
    );
    assert_eq!(invariants(&early, 5), vec![5]);
}

/// A group of the last partition that another fault still in force had cut in two is no
/// majority side: when n0 and n1 could not reach each other (an earlier split), n0's lease
/// says nothing of what n1 heard, and n2 raising the term with n1's vote after the heal is
/// what any minority may do. (Reported as invariant 5 by the checker of 2b2eb3c; found by
/// `chorus-sim fuzz --no-membership`, seeds 15478 and 17559.)
#[test]
fn a_majority_group_cut_in_two_by_another_fault_guards_no_term() {
    let groups = |g: &[&[&str]]| Record::Partition {
        groups: g
            .iter()
            .map(|g| g.iter().map(|n| n.to_string()).collect())
            .collect(),
    };
    let mut t = healthy_start();
    t.truncate(11); // n0 holds a lease until 60 000
    t.push(at(31_000, groups(&[&["n0"], &["n1"]])));
    t.push(at(32_000, groups(&[&["n0", "n1"], &["n2"]])));
    t.push(at(40_000, Record::Heal));
    t.push(at(40_100, vote("n2", 2, "n2")));
    assert_eq!(invariants(&t, 3), Vec::<u8>::new());
    // Without the earlier cut, the same term is reported.
    t.remove(11);
    assert_eq!(invariants(&t, 3), vec![5]);
}

/// Five voters n0..=n4, n0 elected in term 1 at t=3000 with a lease to 60 000 and known to all;
/// at 31 000 the network splits {n0, n1, n2} from {n3, n4}, and at 32 000 the messages from
/// `from` to `to` are cut one way inside the majority group; healed at 40 000, when n2 stands
/// in term 2 and n3 and n4, back from the minority, vote for it.
fn heal_with_a_one_way_cut_inside(from: &str, to: &str) -> Vec<Line> {
    let all = ["n0", "n1", "n2", "n3", "n4"];
    let names = |g: &[&str]| g.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let mut t: Vec<Line> = all.iter().map(|n| at(0, restart(n))).collect();
    for n in all {
        t.push(at(1_000, electorate(n, 1, 0, &all)));
    }
    t.push(at(3_000, admin("n0", 1, 60_000)));
    for n in all {
        t.push(at(3_000, known(n, "n0", 1)));
    }
    t.push(at(
        31_000,
        Record::Partition {
            groups: vec![names(&["n0", "n1", "n2"]), names(&["n3", "n4"])],
        },
    ));
    t.push(at(
        32_000,
        Record::Cut {
            from: names(&[from]),
            to: names(&[to]),
        },
    ));
    t.push(at(40_000, Record::Heal));
    t.push(at(40_100, vote("n2", 2, "n2")));
    t.push(at(40_150, vote("n3", 2, "n2")));
    t.push(at(40_150, vote("n4", 2, "n2")));
    t
}

/// Issue 51, finding 12: nothing relays, so a member of the majority group that the admin's
/// messages cannot reach directly is not on the admin's side, whoever else it reaches: with
/// n0 → n2 cut one way, n0's side is {n0, n1}, no majority of five, and n2 standing after the
/// heal with the returning minority's votes is the design working. (The checker of 6c4e8a8
/// took reachability as transitive — n0 ↔ n1 ↔ n2 — and reported invariant 5.) So is a cut
/// the other way, n2 → n0: n0 never hears n2's acknowledgements.
#[test]
fn a_member_the_admin_reaches_only_through_another_is_not_on_its_side() {
    for (from, to) in [("n0", "n2"), ("n2", "n0")] {
        let t = heal_with_a_one_way_cut_inside(from, to);
        assert_eq!(invariants(&t, 5), Vec::<u8>::new(), "{from} -> {to} cut");
    }
}

/// The same trace with the one-way cut between two members that both reach the admin directly
/// (n1 → n2): n0's side is all three, a majority whose members each promised n0, so n2's term
/// after the heal is a real break of invariant 5 and is still reported.
#[test]
fn a_cut_between_two_members_that_each_reach_the_admin_still_guards_the_term() {
    let t = heal_with_a_one_way_cut_inside("n1", "n2");
    assert_eq!(invariants(&t, 5), vec![5]);
}

/// A real cluster's merged trace (`chorus replay` of several data directories): no `spec`, peer
/// ids as node ids, the eligible ones listed, kinds the simulator does not write. `check_file`
/// reads it and quotes the line that breaks an invariant.
#[test]
fn a_real_clusters_trace_is_checked_and_the_breaking_line_quoted() {
    let header = r#"{"kind":"header","seed":0,"scenario":"real: 3 nodes' logs merged","engine":"real","nodes":3,"version":1,"voters":2,"duration_ms":9000,"steps":false,"liveness_bound_ms":60000,"eligible":["12D3a","12D3b"],"clock":{"source":"monotonic","origin_ms":5},"data_dirs":["a","b","w"]}"#;
    let body = [
        r#"{"t":0,"kind":"restart","node":"12D3a"}"#,
        r#"{"t":0,"kind":"restart","node":"12D3b"}"#,
        r#"{"t":0,"kind":"restart","node":"12D3w"}"#,
        r#"{"t":10,"kind":"vote_granted","node":"12D3b","term":1,"to":"12D3a"}"#,
        r#"{"t":11,"kind":"became_admin","node":"12D3a","term":1,"lease_until":3000}"#,
        r#"{"t":3000,"kind":"lease_expired","node":"12D3a","term":1}"#,
        // Seen by the second candidate: b gave its term-1 vote again.
        r#"{"t":4000,"kind":"vote_granted","node":"12D3b","term":1,"to":"12D3w"}"#,
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.jsonl");
    std::fs::write(&path, format!("{header}\n{}\n", body.join("\n"))).unwrap();
    let checked = chorus_sim::checker::check_file(&path, None).unwrap();
    assert_eq!(
        checked.header.eligible.as_deref().map(<[String]>::len),
        Some(2)
    );
    assert_eq!(checked.lines, body.len());
    let v: Vec<(u8, usize)> = checked
        .violations
        .iter()
        .map(|v| (v.invariant, v.line))
        .collect();
    assert_eq!(v, [(3, 8)], "{:?}", checked.violations);
    assert_eq!(checked.quoted[&8], body[6]);
}

/// Before any electorate exists, an admin is owed only once bootstrap can found one: as many
/// eligible nodes up as `bootstrap_expect`, not merely a majority. Five voters that all found
/// the cluster, one crashed for good before bootstrap finished: nothing is owed (`chorus-sim
/// fuzz` seed 33889 was reported as a liveness failure); with `bootstrap_expect` 3 it is.
#[test]
fn no_admin_is_owed_before_enough_founders_are_up() {
    let lines = |n: usize| {
        let mut l: Vec<Line> = (0..n).map(|i| at(0, restart(&format!("n{i}")))).collect();
        l.push(at(1_000, Record::Crash { node: "n0".into() }));
        l.push(at(40_000, vote("n1", 1, "n1")));
        l
    };
    assert_eq!(invariants(&lines(5), 5), Vec::<u8>::new());
    let mut h = header(5);
    h.spec.bootstrap_expect = Some(3);
    let found: Vec<u8> = check(&h, &lines(5)).iter().map(|v| v.invariant).collect();
    assert_eq!(found, vec![4]);
}

/// Term stability guards the majority side's admin only while that side's live members are a
/// majority: with n1 crashed during the partition, n0's side {n0, n1} had lost its majority,
/// n0 could not keep its lease, and a later term after the heal is the design working (the
/// fuzzer's seeds 55680 and 86113 were reported as invariant 5).
#[test]
fn a_majority_side_that_lost_a_member_to_a_crash_guards_no_term() {
    let mut t = healthy_start();
    t.truncate(11); // n0 holds a lease until 60 000
    t.push(at(
        31_000,
        Record::Partition {
            groups: vec![vec!["n0".into(), "n1".into()], vec!["n2".into()]],
        },
    ));
    t.push(at(35_000, Record::Crash { node: "n1".into() }));
    t.push(at(40_000, Record::Heal));
    t.push(at(40_100, vote("n2", 7, "n2")));
    let found = invariants(&t, 3);
    assert!(!found.contains(&5), "{found:?}");
}

/// `node` accepted `members` at ballot `round`/`proposer`.
fn accepted(node: &str, round: u64, proposer: &str, members: &[&str]) -> Record {
    Record::BootstrapAccepted {
        node: node.into(),
        ballot: chorus_core::Ballot {
            round,
            node: proposer.into(),
        },
        members: members.iter().map(|m| m.to_string()).collect(),
    }
}

/// Five voters up, and then `acceptances` (node, round, proposer, value), one a millisecond.
fn bootstrap(acceptances: &[(&str, u64, &str, &[&str])]) -> Vec<Line> {
    let mut l: Vec<Line> = (0..5).map(|i| at(0, restart(&format!("n{i}")))).collect();
    for (i, (node, round, proposer, value)) in acceptances.iter().enumerate() {
        l.push(at(100 + i as u64, accepted(node, *round, proposer, value)));
    }
    l
}

/// The genesis invariants of the trace, with bootstrap expecting 3 of the 5 voters.
fn genesis(acceptances: &[(&str, u64, &str, &[&str])]) -> Vec<(u8, String)> {
    let mut h = header(5);
    h.spec.bootstrap_expect = Some(3);
    h.duration_ms = 1_000;
    check(&h, &bootstrap(acceptances))
        .into_iter()
        .map(|v| (v.invariant, v.message))
        .collect()
}

const X: &[&str] = &["n0", "n1", "n2"];
const Y: &[&str] = &["n2", "n3", "n4"];

/// Invariant 8: two different genesis electorates, each accepted by a quorum (three nodes at
/// one ballot), are reported — in either order of ballots — with the ballots and acceptors.
#[test]
fn two_genesis_electorates_each_accepted_by_a_quorum_are_reported() {
    let x_then_y = [
        ("n0", 1, "n0", X),
        ("n1", 1, "n0", X),
        ("n2", 1, "n0", X),
        ("n3", 2, "n3", Y),
        ("n4", 2, "n3", Y),
        ("n2", 2, "n3", Y),
    ];
    let found = genesis(&x_then_y);
    assert!(
        found.contains(&(
            8,
            "two genesis electorates were each accepted by a quorum: [n0, n1, n2] at ballot 1/n0, and [n2, n3, n4] at ballot 2/n3 (by n2, n3, n4)".into()
        )),
        "{found:?}"
    );
    // The first acceptance of Y above the ballot where X was chosen is reported at once.
    assert_eq!(found[0].0, 8);
    assert!(found[0].1.contains("above ballot 1/n0"), "{found:?}");

    // The higher ballot chosen first, the lower one after: still two.
    let y_then_x = [
        ("n3", 2, "n3", Y),
        ("n4", 2, "n3", Y),
        ("n2", 2, "n3", Y),
        ("n0", 1, "n0", X),
        ("n1", 1, "n0", X),
        ("n2", 1, "n0", X),
    ];
    let found = genesis(&y_then_x);
    assert!(
        found
            .iter()
            .any(|(i, m)| *i == 8 && m.starts_with("two genesis")),
        "{found:?}"
    );
}

/// Invariant 8: two values at one ballot (a proposer proposes one value per ballot), and a
/// value accepted above a ballot where another was chosen — even when that acceptance came
/// first — are reported though no second quorum formed.
#[test]
fn two_values_at_one_ballot_or_another_value_above_a_chosen_one_are_reported() {
    let found = genesis(&[("n0", 1, "n0", X), ("n3", 1, "n0", Y)]);
    assert_eq!(
        found,
        [(
            8,
            "n3 accepted [n2, n3, n4] at ballot 1/n0, where n0 accepted [n0, n1, n2]".into()
        )]
    );
    let found = genesis(&[
        ("n3", 2, "n3", Y),
        ("n0", 1, "n0", X),
        ("n1", 1, "n0", X),
        ("n2", 1, "n0", X),
    ]);
    assert_eq!(
        found,
        [(
            8,
            "a quorum (n0, n1, n2) accepted [n0, n1, n2] at ballot 1/n0, but n3 had accepted [n2, n3, n4] at the higher ballot 2/n3".into()
        )]
    );
}

/// What Paxos allows is not reported: acceptances of two values that add up to three nodes
/// each, but never three at one ballot (n2 takes X at ballot 3 from promises of n0, n1, n2;
/// n3 then proposes Y, the highest of the promises of n0, n3 and n4, which never saw ballot 3),
/// a resent accept counted once, and a value chosen again at a higher ballot.
#[test]
fn acceptances_paxos_allows_are_not_reported() {
    let found = genesis(&[
        ("n0", 1, "n0", X),
        ("n1", 1, "n0", X),
        ("n3", 2, "n3", Y),
        ("n4", 2, "n3", Y),
        ("n2", 3, "n2", X),
        ("n0", 4, "n3", Y),
        ("n3", 4, "n3", Y),
        ("n3", 4, "n3", Y),
    ]);
    assert_eq!(found, []);
    let found = genesis(&[
        ("n0", 1, "n0", X),
        ("n1", 1, "n0", X),
        ("n2", 1, "n0", X),
        ("n3", 2, "n3", X),
        ("n4", 2, "n3", X),
        ("n3", 2, "n3", X),
        ("n2", 2, "n3", X),
    ]);
    assert_eq!(found, []);
}
