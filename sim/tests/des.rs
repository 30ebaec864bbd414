//! The discrete-event engine: determinism, scale behaviour and crash recovery.

use chorus_sim::run::{run_to_bytes, Engine};
use chorus_sim::scenario::{builtin, Scenario};
use chorus_sim::trace::{read, Record};

fn trace_of(s: &Scenario, seed: u64) -> (String, chorus_sim::sink::Finished) {
    let (bytes, f) = run_to_bytes(s, seed, Engine::Des, false).unwrap();
    (String::from_utf8(bytes).unwrap(), f)
}

#[test]
fn same_seed_same_bytes_different_seed_different_bytes() {
    let s = builtin("partition").unwrap();
    let (a, fa) = trace_of(&s, 5);
    let (b, fb) = trace_of(&s, 5);
    assert_eq!(a, b);
    assert_eq!(fa.digest, fb.digest);
    let (c, _) = trace_of(&s, 6);
    assert_ne!(a, c);
    assert!(fa.violations.is_empty(), "{:?}", fa.violations);
}

#[test]
fn the_trace_is_the_documented_format() {
    let (text, _) = trace_of(&builtin("steady").unwrap(), 1);
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with(
            r#"{"kind":"header","seed":1,"scenario":"steady","engine":"des","nodes":5,"version":1,"#
        ),
        "{first}"
    );
    let (_, lines) = read(&text).unwrap();
    assert!(lines.windows(2).all(|w| w[0].t <= w[1].t), "time order");
    assert!(lines
        .iter()
        .any(|l| matches!(l.record, Record::BecameAdmin { .. })));
    for l in text.lines().skip(1) {
        assert!(l.starts_with(r#"{"t":"#), "t comes first: {l}");
    }
}

#[test]
fn a_restarted_node_never_votes_twice_in_a_term() {
    // Split votes forced (no rank bias, a 10 ms window, slow links) while random nodes are
    // bounced for a few ms all the time: voters crash right after voting and come back while
    // another candidate of the same term still asks. Their replayed logs must keep their votes
    // (the checker's invariant 3 watches every vote). A restart from an empty log fails this.
    let s: Scenario = toml::from_str(
        r#"
        name = "vote-bounce"
        nodes = 7
        duration_ms = "20s"
        equal_scores = true
        [config]
        heartbeat_interval_ms = 100
        election_timeout_min_ms = 300
        election_timeout_max_ms = 310
        discovery_timeout_ms = 150
        score_bias = false
        [network]
        latency_ms = [20, 40]
        [[events]]
        at = "500ms"
        every = "37ms"
        until = "18s"
        action = "bounce"
        target = "30%"
        down_for = "5ms"
        "#,
    )
    .unwrap();
    let mut votes = 0;
    for seed in 0..30 {
        let (text, f) = trace_of(&s, seed);
        assert!(f.violations.is_empty(), "seed {seed}: {:?}", f.violations);
        let (_, lines) = read(&text).unwrap();
        votes += lines
            .iter()
            .filter(|l| matches!(l.record, Record::Voted { .. }))
            .count();
    }
    assert!(votes > 200, "the runs exercise voting: {votes} votes");
}

#[test]
fn drift_at_the_bound_keeps_leases_apart() {
    let s = builtin("drift").unwrap();
    for seed in 0..10 {
        let (_, f) = trace_of(&s, seed);
        assert!(f.violations.is_empty(), "seed {seed}: {:?}", f.violations);
    }
}

#[test]
fn a_thousand_nodes_elect_with_about_four_n_messages() {
    let mut s = builtin("steady").unwrap();
    s.nodes = 1000;
    s.duration_ms = 60_000;
    let (_, f) = trace_of(&s, 3);
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.stats.elections, 1);
    let per_election = f.stats.election_messages as f64 / f.stats.elections as f64;
    assert!(
        per_election <= 4.0 * 1000.0,
        "{per_election} election messages"
    );
    assert_eq!(f.stats.best_won, 1, "the best-scored node won");
}

#[test]
fn the_checker_catches_a_broken_core_setting() {
    // A drift bound the nodes do not honour: clocks drift at 5%, the lease assumes 0.1%.
    // The admin is cut off with a minority, keeps its (too long) lease, and the majority, whose
    // clocks run fast, elects another before that lease ends.
    let mut s = builtin("partition").unwrap();
    s.network.drift_ppm = 50_000;
    s.network.drift_at_bound = true;
    let caught = (0..20).any(|seed| !trace_of(&s, seed).1.violations.is_empty());
    assert!(
        caught,
        "clocks drifting beyond the configured bound must break lease safety somewhere"
    );
}

#[test]
fn workers_peered_only_with_voters_still_follow_the_admin() {
    let mut s = builtin("admin-crash").unwrap();
    s.nodes = 300;
    s.voters = Some(15);
    s.peering = chorus_sim::scenario::Peering::Voters;
    s.duration_ms = 5 * 60_000;
    let (text, f) = trace_of(&s, 4);
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert!(f.stats.elections >= 2, "{:?}", f.stats);
    // Workers learn the admin from its broadcast heartbeats (the checker's liveness invariant
    // already requires every live node to know it); spot-check the last worker.
    let (_, lines) = read(&text).unwrap();
    assert!(lines
        .iter()
        .any(|l| matches!(&l.record, Record::AdminKnown { node, .. } if node == "n299")));
}

#[test]
fn turmoil_refuses_partial_peering() {
    let mut s = builtin("steady").unwrap();
    s.peering = chorus_sim::scenario::Peering::Voters;
    let err = chorus_sim::run::run(&s, 1, Engine::Turmoil, None, false).unwrap_err();
    assert!(err.to_string().contains("discrete-event engine"), "{err}");
}

/// A run whose process ends with it (the command line's) leaves its state to the operating
/// system; what it reports is the same as a run that frees everything.
#[test]
fn a_run_that_ends_the_process_reports_the_same() {
    let s = chorus_sim::scenario::builtin("storm").unwrap();
    let kept = chorus_sim::run::run(&s, 3, Engine::Des, None, false).unwrap();
    let left = chorus_sim::run::run_with(
        &s,
        3,
        Engine::Des,
        None,
        false,
        chorus_sim::sink::Sink::exit_after_run,
    )
    .unwrap();
    assert_eq!(
        (left.digest, left.stats.lines, left.violations.len()),
        (kept.digest, kept.stats.lines, 0)
    );
    assert!(left.stats.messages > 0 && left.stats.messages == kept.stats.messages);
}
