//! Uneven, mixed-settings starts (issue 10).
//!
//! The first tests check that the scenario keys for them parse, are validated and do what they
//! say on both engines: `bootstrap_expect`, `[[node_settings]]`, `start_spread`, `link_spread`,
//! `apart_at_start`, `late` and `join { nodes }`.
//!
//! The `*_never_break_an_invariant` sweeps assert the property the protocol must have: the
//! built-ins `uneven-bootstrap`, `late-voters` and `mixed-timeouts` break no invariant on any
//! seed. On the core as it was when they were written they FAIL — two admins in one term,
//! overlapping leases, no agreed admin — which is what they are for: they reproduce the bugs
//! the core's bootstrap rewrite must fix.

use crate::common;
use common::{error_of, parse};
use std::collections::BTreeMap;

use chorus_core::Role;
use chorus_sim::des::cores_at;
use chorus_sim::run::{repro_command, run_to_bytes, Engine};
use chorus_sim::scenario::{builtin, Scenario, REPRODUCERS};
use chorus_sim::sink::Finished;
use chorus_sim::sweep::{jobs, sweep, EngineChoice};
use chorus_sim::trace::{read, Header, Line, Record};

fn trace(s: &Scenario, seed: u64, engine: Engine, steps: bool) -> (Header, Vec<Line>, Finished) {
    let (bytes, f) = run_to_bytes(s, seed, engine, steps).unwrap();
    let (h, lines) = read(&String::from_utf8(bytes).unwrap()).unwrap();
    (h, lines, f)
}

/// Every step record's node, time and event (as JSON).
fn steps(lines: &[Line]) -> impl Iterator<Item = (&str, u64, &serde_json::Value)> {
    lines.iter().filter_map(|l| match &l.record {
        Record::Step { node, event, .. } => Some((node.as_str(), l.t, event)),
        _ => None,
    })
}

/// For each node, the peers it got `PeerUp` for, with the times, in order.
fn peer_ups(lines: &[Line]) -> BTreeMap<String, Vec<(u64, String)>> {
    let mut out: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (node, t, event) in steps(lines) {
        if event["kind"] == "peer_up" {
            let peer = event["peer"].as_str().unwrap().to_owned();
            out.entry(node.to_owned()).or_default().push((t, peer));
        }
    }
    out
}

fn first_starts(lines: &[Line]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in lines {
        if let Record::Restart { node } = &l.record {
            out.entry(node.clone()).or_insert(l.t);
        }
    }
    out
}

const ALL_KEYS: &str = r#"
name = "every-new-key"
nodes = 6
voters = 5
duration_ms = "3m"
bootstrap_expect = 3
start_spread = "10s"
link_spread = "2s"
late = ["n4"]
apart_at_start = [["n4"], ["n0..=n1"]]
[[node_settings]]
nodes = ["n0", "n2..=n3"]
election_timeout_min_ms = 20000
election_timeout_max_ms = 25000
confirmations = 1
[[node_settings]]
nodes = ["n2"]
from = "1m"
heartbeat_interval_ms = 2000
discovery_timeout_ms = 4000
bootstrap_expect = 4
[[events]]
at = "30s"
action = "join"
nodes = ["n4"]
[[events]]
at = "40s"
action = "heal"
[[events]]
at = "1m"
action = "bounce"
target = "n1..=n2"
down_for = "5s"
[[events]]
at = "2m"
action = "bounce"
target = "followers"
down_for = "1s"
"#;

#[test]
fn the_new_keys_parse_validate_and_round_trip() {
    let s = parse(ALL_KEYS);
    assert_eq!(s.bootstrap_expect, Some(3));
    assert_eq!((s.start_spread, s.link_spread), (10_000, 2_000));
    assert_eq!(s.late_nodes(), vec![4]);
    assert_eq!(s.apart_groups(), vec![vec![4], vec![0, 1]]);
    // TOML and the trace header's JSON both give the same scenario back.
    let text = toml::to_string(&s).unwrap();
    assert_eq!(toml::from_str::<Scenario>(&text).unwrap(), s, "{text}");
    let header = Header::new(&s, 3, "des", false);
    let json = serde_json::to_string(&header).unwrap();
    for key in [
        r#""bootstrap_expect":3"#,
        r#""start_spread":"10s""#,
        r#""link_spread":"2s""#,
        r#""late":["n4"]"#,
        r#""apart_at_start":[["n4"],["n0..=n1"]]"#,
        r#""nodes":["n0","n2..=n3"]"#,
        r#""from":"1m""#,
        r#""target":"n1..=n2""#,
        r#""target":"followers""#,
    ] {
        assert!(json.contains(key), "{key} missing from {json}");
    }
    assert_eq!(serde_json::from_str::<Header>(&json).unwrap(), header);
    // And it runs, replayably, on both engines.
    for engine in [Engine::Des, Engine::Turmoil] {
        let (a, _) = run_to_bytes(&s, 3, engine, false).unwrap();
        let (b, _) = run_to_bytes(&s, 3, engine, false).unwrap();
        assert!(a == b, "{engine:?}: same seed, same bytes");
    }
}

#[test]
fn a_scenario_without_the_new_keys_writes_none_of_them() {
    // The snapshot logs check the bytes; this names what must stay out of old headers.
    for name in ["steady", "churn", "hostile"] {
        let h = Header::new(&builtin(name).unwrap(), 1, "des", false);
        let json = serde_json::to_value(&h).unwrap();
        let spec = json["spec"].as_object().unwrap();
        for key in [
            "bootstrap_expect",
            "node_settings",
            "start_spread",
            "link_spread",
            "late",
            "apart_at_start",
        ] {
            assert!(!spec.contains_key(key), "{name}: {key}");
        }
        assert!(!serde_json::to_string(&h).unwrap().contains("\"nodes\":["));
    }
}

#[test]
fn bad_settings_are_rejected_naming_the_node_and_key() {
    let base = "name = \"x\"\nnodes = 5\n";
    let cases = [
        (
            "[[node_settings]]\nnodes = [\"n9\"]\nconfirmations = 1",
            "node_settings[0] names n9, but there are 5 nodes",
        ),
        (
            "[[node_settings]]\nnodes = [\"n1..=n2\"]\nelection_timeout_min_ms = 10",
            "node_settings[0]: n1: invalid config `heartbeat_interval_ms`",
        ),
        (
            "[[node_settings]]\nnodes = [\"n3\"]\nfrom = \"1m\"\nelection_timeout_max_ms = 100",
            "node_settings[0]: n3: invalid config `election_timeout_max_ms`",
        ),
        (
            "[[node_settings]]\nnodes = [\"n3\"]\nbootstrap_expect = 0",
            "node_settings[0]: n3: invalid config `bootstrap_expect`",
        ),
        (
            "[[node_settings]]\nnodes = [\"n3\"]\ncluster_id = \"other\"",
            "unknown field `cluster_id`",
        ),
        ("[[node_settings]]\nnodes = []", "`nodes` is empty"),
        (
            "[[node_settings]]\nnodes = [\"x3\"]",
            "bad node \"x3\": expected n<index> or a range n<a>..=n<b>",
        ),
        ("[[node_settings]]\nnodes = [\"n3..=n1\"]", "n3 is above n1"),
        ("bootstrap_expect = 0", "invalid config `bootstrap_expect`"),
        (
            "[config]\nbootstrap_expect = 3",
            "set the top-level `bootstrap_expect`",
        ),
        ("start_spread = \"soon\"", "bad duration"),
        ("late = [\"n5\"]", "late names n5"),
        (
            "late = [\"n0..=n4\"]",
            "must leave at least one node starting at once",
        ),
        ("apart_at_start = [[\"n0\", \"n1\"]]", "at least two groups"),
        (
            "apart_at_start = [[\"n0\", \"n1\"], [\"n1\"]]",
            "n1 is in more than one group",
        ),
        (
            "late = [\"n4\"]\n[[events]]\nat = \"1s\"\naction = \"join\"\nnodes = [\"n3\"]",
            "join names n3, which is not late",
        ),
        (
            "[[events]]\nat = \"1s\"\naction = \"join\"",
            "join needs `count` or `nodes`",
        ),
        (
            "[[events]]\nat = \"1s\"\naction = \"bounce\"\ntarget = \"n2..=n7\"\ndown_for = \"1s\"",
            "names n7, but there are 5 nodes",
        ),
    ];
    for (text, want) in cases {
        let text = format!("{base}{text}");
        let err = error_of(&text);
        assert!(err.contains(want), "{text:?}:\n  {err}\n  wanted {want:?}");
    }
}

#[test]
fn per_node_settings_reach_the_core() {
    let s = parse(ALL_KEYS);
    // Before anything restarts: n0, n2, n3 run 20–25 s timeouts and accept one confirmation;
    // every node expects the top-level 3 voters.
    let cores = cores_at(&s, 1, 29_000).unwrap();
    for (i, core) in cores.iter().enumerate() {
        let Some(core) = core else {
            assert_eq!(i, 4, "only the late node is down");
            continue;
        };
        let c = core.config();
        let odd = [0, 2, 3].contains(&i);
        assert_eq!(
            c.election_timeout_min_ms,
            if odd { 20_000 } else { 30_000 },
            "n{i}"
        );
        assert_eq!(
            c.election_timeout_max_ms,
            if odd { 25_000 } else { 45_000 },
            "n{i}"
        );
        assert_eq!(c.confirmations, if odd { 1 } else { 2 }, "n{i}");
        assert_eq!(c.bootstrap_expect, 3, "n{i}");
        assert_eq!(c.heartbeat_interval_ms, 15_000, "n{i}");
    }
    // n2 restarted at 1m: it keeps its first entry and takes the one `from = "1m"`; n1,
    // restarted too, is named by neither.
    let cores = cores_at(&s, 1, 70_000).unwrap();
    let n2 = cores[2].as_ref().unwrap().config();
    assert_eq!(
        (
            n2.election_timeout_min_ms,
            n2.heartbeat_interval_ms,
            n2.discovery_timeout_ms,
            n2.bootstrap_expect
        ),
        (20_000, 2_000, 4_000, 4)
    );
    assert_eq!(cores[1].as_ref().unwrap().config(), &s.node_config());
    assert_eq!(s.node_config().bootstrap_expect, 3);
    // Without the key every node expects all voters, as before.
    assert_eq!(builtin("steady").unwrap().node_config().bootstrap_expect, 5);
}

#[test]
fn a_restart_after_from_takes_the_new_settings_and_the_admin_keeps_its_own() {
    let s = builtin("mixed-timeouts").unwrap();
    for seed in 0..3 {
        let before = cores_at(&s, seed, 59_000).unwrap();
        assert!(before
            .iter()
            .all(|c| c.as_ref().unwrap().config().election_timeout_min_ms == 30_000));
        let admin = before
            .iter()
            .position(|c| c.as_ref().unwrap().role() == Role::Admin)
            .expect("an admin by 59 s");
        // The followers were bounced at 1m for 5 s.
        let after = cores_at(&s, seed, 66_000).unwrap();
        for (i, core) in after.iter().enumerate() {
            let min = core.as_ref().unwrap().config().election_timeout_min_ms;
            assert_eq!(
                min,
                if i == admin { 30_000 } else { 3_000 },
                "seed {seed} n{i}"
            );
        }
    }
}

#[test]
fn turmoil_gives_each_node_its_settings() {
    let mut s = builtin("mixed-timeouts").unwrap();
    s.duration_ms = 70_000;
    s.node_settings
        .push(toml::from_str("nodes = [\"n1\"]\ndiscovery_timeout_ms = 7000").unwrap());
    s.validate().unwrap();
    let (_, lines, _) = trace(&s, 2, Engine::Turmoil, true);
    // First starts: the discovery timer follows each node's own setting.
    let mut started = 0;
    for l in &lines {
        if let Record::Step {
            node,
            event,
            commands,
        } = &l.record
        {
            if event["kind"] == "started" && l.t < 1_000 {
                let want = if node == "n1" { 7_000 } else { 15_000 };
                assert_eq!(commands[0]["timer"], "discovery", "{node}: {commands}");
                assert_eq!(commands[0]["at_ms"], want, "{node}: {commands}");
                started += 1;
            }
        }
    }
    assert_eq!(started, 5);
    // The bounced followers log the new settings right after `Started`, as `chorus run` does.
    let changed: Vec<&str> = steps(&lines)
        .filter(|(_, _, e)| e["kind"] == "config_changed")
        .map(|(n, _, e)| {
            assert_eq!(e["config"]["election_timeout_min_ms"], 3_000);
            n
        })
        .collect();
    assert_eq!(changed.len(), 4, "{changed:?}");
}

/// Two nodes that saw two common peers in opposite orders, if any.
fn opposite_orders(ups: &BTreeMap<String, Vec<(u64, String)>>) -> Option<String> {
    let position = |node: &str, peer: &str| ups.get(node)?.iter().position(|(_, p)| p == peer);
    let nodes: Vec<&str> = ups.keys().map(String::as_str).collect();
    for a in &nodes {
        for b in &nodes {
            for x in &nodes {
                for y in &nodes {
                    let mut four = vec![a, b, x, y];
                    four.sort();
                    four.dedup();
                    if four.len() < 4 {
                        continue;
                    }
                    let (Some(ax), Some(ay), Some(bx), Some(by)) = (
                        position(a, x),
                        position(a, y),
                        position(b, x),
                        position(b, y),
                    ) else {
                        continue;
                    };
                    if ax < ay && bx > by {
                        return Some(format!("{a} saw {x} before {y}, {b} the other way"));
                    }
                }
            }
        }
    }
    None
}

#[test]
fn link_spread_shows_peers_in_different_orders_and_at_different_times() {
    let spread: Scenario = parse("name = \"spread\"\nduration_ms = \"30s\"\nlink_spread = \"5s\"");
    let mut even = spread.clone();
    even.link_spread = 0;
    for engine in [Engine::Des, Engine::Turmoil] {
        // Without a spread every node sees every peer at once, in index order.
        let (_, lines, _) = trace(&even, 4, engine, true);
        let ups = peer_ups(&lines);
        assert!(opposite_orders(&ups).is_none(), "{engine:?}: {ups:?}");
        assert!(ups.values().flatten().all(|(t, _)| *t < 100), "{ups:?}");

        let (_, lines, _) = trace(&spread, 4, engine, true);
        let ups = peer_ups(&lines);
        let why = opposite_orders(&ups);
        assert!(why.is_some(), "{engine:?}: {ups:?}");
        let times: Vec<u64> = ups.values().flatten().map(|(t, _)| *t).collect();
        assert_eq!(times.len(), 5 * 4, "{engine:?}: every pair, once each way");
        assert!(times.iter().all(|t| *t <= 5_000 + 20), "{times:?}");
        assert!(times.iter().any(|t| *t > 1_000), "{times:?}");
        // Both ends of a connection see it come up at the same instant.
        for (node, seen) in &ups {
            for (t, peer) in seen {
                assert!(ups[peer].contains(&(*t, node.clone())), "{node}/{peer}");
            }
        }
    }
}

#[test]
fn start_spread_staggers_the_first_starts_and_not_the_late_ones() {
    let s = parse(
        "name = \"spread\"\nnodes = 6\nvoters = 5\nduration_ms = \"2m\"\nstart_spread = \"20s\"\nlate_joiners = 1\n[[events]]\nat = \"1m\"\naction = \"join\"\ncount = 1",
    );
    for engine in [Engine::Des, Engine::Turmoil] {
        let (_, lines, f) = trace(&s, 9, engine, false);
        let starts = first_starts(&lines);
        assert_eq!(
            starts["n5"], 60_000,
            "{engine:?}: the late joiner starts at its join"
        );
        let early: Vec<u64> = (0..5).map(|i| starts[&format!("n{i}")]).collect();
        // turmoil acts at tick boundaries (10 ms).
        assert!(early.iter().all(|t| *t <= 20_010), "{early:?}");
        let distinct: std::collections::BTreeSet<_> = early.iter().collect();
        assert!(distinct.len() >= 4, "{engine:?}: {early:?}");
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        // Another seed, other times.
        let (_, other, _) = trace(&s, 10, engine, false);
        assert_ne!(first_starts(&other), starts);
    }
}

#[test]
fn groups_apart_at_start_neither_connect_nor_talk_until_the_heal() {
    let s = parse(
        r#"
        name = "apart"
        duration_ms = "1m"
        apart_at_start = [["n3", "n4"], ["n0..=n2"]]
        [[events]]
        at = "40s"
        action = "heal"
        "#,
    );
    let side = |n: &str| ["n3", "n4"].contains(&n);
    for engine in [Engine::Des, Engine::Turmoil] {
        let (_, lines, _) = trace(&s, 5, engine, true);
        assert_eq!(
            lines[0].record,
            Record::Partition {
                groups: vec![
                    vec!["n3".into(), "n4".into()],
                    vec!["n0".into(), "n1".into(), "n2".into()]
                ]
            },
            "{engine:?}: the trace says so first"
        );
        let mut crossing_ups = 0;
        for (node, t, event) in steps(&lines) {
            let other = match event["kind"].as_str() {
                Some("peer_up") => event["peer"].as_str(),
                Some("message") => event["from"].as_str(),
                _ => None,
            };
            let Some(other) = other else { continue };
            if side(node) != side(other) {
                assert!(t >= 40_000, "{engine:?}: {node} heard of {other} at {t}");
                crossing_ups += usize::from(event["kind"] == "peer_up");
            }
        }
        assert_eq!(
            crossing_ups,
            2 * 3 * 2,
            "{engine:?}: each crossing pair, both ways"
        );
    }
}

#[test]
fn named_late_voters_start_when_joined_and_late_joiners_still_work() {
    let s = parse(
        r#"
        name = "late"
        nodes = 6
        voters = 5
        duration_ms = "3m"
        late = ["n3"]
        late_joiners = 1
        [[events]]
        at = "1m"
        action = "join"
        count = 1
        [[events]]
        at = "2m"
        action = "join"
        nodes = ["n5"]
        [[events]]
        at = "30s"
        action = "restart"
        target = "crashed"
        "#,
    );
    assert_eq!(s.late_nodes(), vec![3, 5]);
    for engine in [Engine::Des, Engine::Turmoil] {
        let (_, lines, _) = trace(&s, 2, engine, false);
        let starts = first_starts(&lines);
        assert_eq!(
            starts["n3"], 60_000,
            "{engine:?}: `count` takes the lowest late node"
        );
        assert_eq!(starts["n5"], 120_000, "{engine:?}");
        assert_eq!(starts["n0"], 0);
        // A late voter is a voter: it is n3, below `voters`.
        assert!(lines.iter().any(|l| matches!(&l.record,
            Record::Voted { node, .. } | Record::AdminKnown { node, .. } if node == "n3")));
    }
}

#[test]
fn the_reproducers_are_deterministic_on_both_engines() {
    for name in REPRODUCERS {
        let mut s = builtin(name).unwrap();
        s.duration_ms = 6 * 60_000;
        for engine in [Engine::Des, Engine::Turmoil] {
            let (a, fa) = run_to_bytes(&s, 11, engine, false).unwrap();
            let (b, _) = run_to_bytes(&s, 11, engine, false).unwrap();
            assert!(a == b, "{name} on {engine:?}");
            let (c, _) = run_to_bytes(&s, 12, engine, false).unwrap();
            assert!(a != c, "{name} on {engine:?}: another seed, another trace");
            assert!(fa.stats.lines > 10);
        }
    }
}

/// Sweeps `name` over `seeds`; fails naming, per invariant, the seeds that broke it, then the
/// first few failures in full with the command that reproduces each.
fn assert_no_violation(name: &str, seeds: std::ops::Range<u64>, engine: EngineChoice) {
    let all = jobs(name, seeds, engine, Scenario::load).unwrap();
    let results = sweep(&all, 2, false, &|_, _| {});
    let failed: Vec<_> = results.iter().filter(|r| !r.failures.is_empty()).collect();
    if failed.is_empty() {
        return;
    }
    let mut by_invariant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &failed {
        for f in &r.failures {
            // "invariant 1 (election safety) violated at …" → "invariant 1 (election safety)"
            let kind = f.split(" violated").next().unwrap_or(f).to_owned();
            let seed = format!("{}/{}", r.job.name, r.job.seed);
            let seeds = by_invariant.entry(kind).or_default();
            if !seeds.contains(&seed) {
                seeds.push(seed);
            }
        }
    }
    let mut report = format!(
        "{} of {} runs broke an invariant\n",
        failed.len(),
        results.len()
    );
    for (kind, seeds) in &by_invariant {
        let shown = seeds.len().min(12);
        let more = match seeds.len() - shown {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        report.push_str(&format!(
            "{kind}: {} runs: {}{more}\n",
            seeds.len(),
            seeds[..shown].join(" ")
        ));
    }
    for r in failed.iter().take(4) {
        let j = &r.job;
        report.push_str(&format!(
            "{} seed {} ({}): {}\n  reproduce: {}\n",
            j.name,
            j.seed,
            j.engine.as_str(),
            r.failures[0],
            repro_command(&j.name, &j.scenario, j.seed, j.engine)
        ));
    }
    panic!("{report}");
}

#[test]
fn uneven_bootstrap_never_breaks_an_invariant() {
    assert_no_violation("uneven-bootstrap", 0..200, EngineChoice::Des);
}

#[test]
fn late_voters_never_break_an_invariant() {
    assert_no_violation("late-voters", 0..200, EngineChoice::Des);
}

#[test]
fn mixed_timeouts_never_break_an_invariant() {
    assert_no_violation("mixed-timeouts", 0..200, EngineChoice::Des);
}

#[test]
fn the_reproducers_break_no_invariant_on_turmoil_either() {
    assert_no_violation(&REPRODUCERS.join(","), 0..2, EngineChoice::Turmoil);
}

/// Founding over slow links (see the file): before the bootstrap backoffs no seed founded a
/// cluster within the liveness bound.
#[test]
fn five_voters_found_a_cluster_over_slow_links() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/reproducers/slow-links-bootstrap.toml"
    );
    assert_no_violation(path, 0..100, EngineChoice::Des);
}
