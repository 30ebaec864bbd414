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

#[test]
fn zz_print_trace() {
    let s = fast(builtin("steady").unwrap(), 2_000);
    let (f, text) = traced(&s, 1, false);
    println!("{text}");
    println!("{:?}", f.stats);
}
