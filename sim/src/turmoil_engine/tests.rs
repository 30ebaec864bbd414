//! Turmoil engine tests: determinism, a clean steady cluster, built-in fault scenarios, and vote
//! safety across restarts. Timings are scaled down so the suite stays fast.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use crate::run::{run, Engine};
use crate::scenario::{builtin, Scenario};
use crate::sink::Finished;
use crate::trace::{read, Record};

/// A trace writer the test can read back.
#[derive(Clone, Default)]
struct Buf(Rc<RefCell<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Millisecond-scale timings (1 ms tick): elections in well under a second.
fn fast(mut s: Scenario, duration_ms: u64) -> Scenario {
    s.config.heartbeat_interval_ms = 100;
    s.config.election_timeout_min_ms = 300;
    s.config.election_timeout_max_ms = 450;
    s.config.discovery_timeout_ms = 150;
    s.network.latency_ms = (1, 5);
    s.duration_ms = duration_ms;
    s
}

fn traced(s: &Scenario, seed: u64, steps: bool) -> (Finished, String) {
    let buf = Buf::default();
    let finished = run(s, seed, Engine::Turmoil, Some(Box::new(buf.clone())), steps).unwrap();
    let text = String::from_utf8(buf.0.borrow().clone()).unwrap();
    (finished, text)
}

fn assert_clean(f: &Finished) {
    assert!(
        f.violations.is_empty(),
        "{:#?}\n{}",
        f.violations,
        f.context.join("\n")
    );
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let s = fast(builtin("churn").unwrap(), 6_000);
    let mut s = s;
    // Churn's minute-scale events, brought into the shortened run.
    for e in &mut s.events {
        e.at /= 60;
        e.every = e.every.map(|x| x / 60);
    }
    let (a, ta) = traced(&s, 7, true);
    let (b, tb) = traced(&s, 7, true);
    assert_eq!(ta, tb, "same seed, same trace");
    assert_eq!(a.digest, b.digest);
    let (_, tc) = traced(&s, 8, true);
    assert_ne!(ta, tc, "another seed, another trace");
    assert!(ta.lines().count() > 50, "the run did something");
    assert!(ta.contains(r#""kind":"step""#));
}

#[test]
fn steady_five_nodes_elect_one_admin() {
    let s = fast(builtin("steady").unwrap(), 5_000);
    let (f, text) = traced(&s, 1, false);
    assert_clean(&f);
    assert_eq!(f.stats.elections, 1, "one election, then heartbeats");
    assert!(f.stats.messages > 0 && f.stats.election_messages > 0);
    let (_, lines) = read(&text).unwrap();
    let known = lines
        .iter()
        .filter(|l| matches!(l.record, Record::AdminKnown { .. }))
        .count();
    assert!(known >= 4, "the followers learned the admin");
}

/// docs/design.md §5 on the built-in fault scenarios, at CHORUS's default timings (10 ms tick).
#[test]
fn partition_builtin_passes_the_checker() {
    let mut s = builtin("partition").unwrap();
    s.duration_ms = 5 * 60_000;
    let (f, text) = traced(&s, 3, false);
    assert_clean(&f);
    assert!(text.contains(r#""kind":"partition""#) && text.contains(r#""kind":"heal""#));
    assert!(f.stats.elections >= 2, "{:?}", f.stats);
}

#[test]
fn admin_crash_builtin_passes_the_checker() {
    let mut s = builtin("admin-crash").unwrap();
    s.duration_ms = 5 * 60_000;
    let (f, text) = traced(&s, 4, false);
    assert_clean(&f);
    assert!(text.contains(r#""kind":"crash""#) && text.contains(r#""kind":"restart""#));
    assert!(f.stats.elections >= 2, "{:?}", f.stats);
}

/// Clocks at the drift bound (alternating fast and slow) with admins killed: lease safety holds
/// once node times are converted back to global time.
#[test]
fn drift_builtin_passes_the_checker() {
    let mut s = builtin("drift").unwrap();
    s.duration_ms = 4 * 60_000;
    let (f, _) = traced(&s, 5, false);
    assert_clean(&f);
    assert!(f.stats.elections >= 2, "{:?}", f.stats);
}

/// Loss, duplication and reordering are drawn in the transport; the protocol copes.
#[test]
fn lossy_builtin_passes_the_checker() {
    let mut s = builtin("lossy").unwrap();
    s.duration_ms = 4 * 60_000;
    let (f, _) = traced(&s, 6, false);
    assert_clean(&f);
    assert!(f.stats.elections >= 1, "{:?}", f.stats);
}

/// docs/design.md §5 invariant 3 across crashes: the admin is killed every 1.5 s, forcing elections, and
/// one random node is bounced for 5 ms every 41 ms, so voters go down just after voting and come
/// back while candidates are still asking. The vote must come back with the log.
#[test]
fn restarted_nodes_never_vote_twice_in_a_term() {
    let text = r#"
name = "vote-bounce"
nodes = 7
equal_scores = true
[[events]]
at = "1s"
every = "1500ms"
until = "18s"
action = "bounce"
target = "admin"
down_for = "5ms"
[[events]]
at = "500ms"
every = "41ms"
until = "18s"
action = "bounce"
target = "random"
down_for = "5ms"
"#;
    let mut s = fast(toml::from_str(text).unwrap(), 20_000);
    s.config.score_bias = false;
    s.config.election_timeout_max_ms = 310;
    s.network.latency_ms = (20, 40);
    let mut crashed_after_vote = 0;
    for seed in 1..=3 {
        let (f, trace) = traced(&s, seed, false);
        assert_clean(&f);
        let (_, lines) = read(&trace).unwrap();
        let mut last_vote = std::collections::BTreeMap::new();
        for l in &lines {
            match &l.record {
                Record::Voted { node, .. } => {
                    last_vote.insert(node.clone(), l.t);
                }
                Record::Crash { node } if last_vote.get(node).is_some_and(|t| l.t - t <= 50) => {
                    crashed_after_vote += 1;
                }
                _ => {}
            }
        }
    }
    // The scenario does what it says: nodes went down within 50 ms of casting a vote.
    assert!(
        crashed_after_vote >= 3,
        "only {crashed_after_vote} crashes right after a vote"
    );
}
