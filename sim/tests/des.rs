//! The discrete-event engine: determinism, scale behaviour and crash recovery.

use chorus_sim::run::{run, Engine};
use chorus_sim::scenario::{builtin, Scenario};
use chorus_sim::trace::{read, Record};

fn trace_of(s: &Scenario, seed: u64) -> (String, chorus_sim::sink::Finished) {
    let buf = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    struct W(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);
    impl std::io::Write for W {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let f = run(s, seed, Engine::Des, Some(Box::new(W(buf.clone()))), false).unwrap();
    let text = String::from_utf8(buf.borrow().clone()).unwrap();
    (text, f)
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
    // Bounce a random node every 7 s for 5 minutes: nodes crash right after voting, and their
    // replayed logs must keep their votes (the checker's invariant 3 watches every vote).
    let mut s: Scenario = toml::from_str(
        r#"
        name = "vote-bounce"
        nodes = 5
        duration_ms = "5m"
        [config]
        heartbeat_interval_ms = 500
        election_timeout_min_ms = 1500
        election_timeout_max_ms = 3000
        discovery_timeout_ms = 1000
        [[events]]
        at = "10s"
        every = "7s"
        action = "bounce"
        target = "random"
        down_for = "300ms"
        [[events]]
        at = "12s"
        every = "9s"
        action = "bounce"
        target = "admin"
        down_for = "2s"
        "#,
    )
    .unwrap();
    for seed in 0..20 {
        s.name = format!("vote-bounce-{seed}");
        let (text, f) = trace_of(&s, seed);
        assert!(f.violations.is_empty(), "seed {seed}: {:?}", f.violations);
        let (_, lines) = read(&text).unwrap();
        let votes = lines
            .iter()
            .filter(|l| matches!(l.record, Record::Voted { .. }))
            .count();
        let crashes = lines
            .iter()
            .filter(|l| matches!(l.record, Record::Crash { .. }))
            .count();
        assert!(
            votes > 50 && crashes > 40,
            "seed {seed}: the run exercises restarts ({votes} votes, {crashes} crashes)"
        );
    }
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
