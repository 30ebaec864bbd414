//! The `split` action (issue 32): the cluster cut into arbitrary groups mid-run, a later split
//! replacing the earlier one, a heal restoring everything — on both engines.

use crate::common;
use common::{error_of, parse};

use chorus_sim::run::{run_to_bytes, Engine};
use chorus_sim::scenario::{Action, Scenario};
use chorus_sim::trace::{read, Line, Record};

/// Five voters; at 20 s {n0, n4} | {n1, n2, n3}; at 40 s {n0, n3, n4} | {n1, n2}; healed at
/// 60 s. n5 (a worker) is in no group and talks to everyone throughout.
const SPLITS: &str = r#"
name = "splits"
nodes = 6
voters = 5
duration_ms = "1m20s"
[config]
heartbeat_interval_ms = 1000
election_timeout_min_ms = 3000
election_timeout_max_ms = 4500
discovery_timeout_ms = 1500
[[events]]
at = "20s"
action = "split"
groups = [["n0", "n4"], ["n1..=n3"]]
[[events]]
at = "40s"
action = "split"
groups = [["n0", "n3..=n4"], ["n1..=n2"]]
[[events]]
at = "1m"
action = "heal"
"#;

fn trace(s: &Scenario, seed: u64, engine: Engine) -> Vec<Line> {
    let (bytes, _) = run_to_bytes(s, seed, engine, true).unwrap();
    read(&String::from_utf8(bytes).unwrap()).unwrap().1
}

fn group_of(t: u64, n: &str) -> Option<u8> {
    let first = [("n0", 1), ("n4", 1), ("n1", 2), ("n2", 2), ("n3", 2)];
    let second = [("n0", 1), ("n3", 1), ("n4", 1), ("n1", 2), ("n2", 2)];
    let table: &[(&str, u8)] = match t {
        20_000..40_000 => &first,
        40_000..60_000 => &second,
        _ => return None,
    };
    table.iter().find(|(m, _)| *m == n).map(|(_, g)| *g)
}

/// Whether `a` and `b` are kept apart at `t`.
fn apart(t: u64, a: &str, b: &str) -> bool {
    matches!((group_of(t, a), group_of(t, b)), (Some(x), Some(y)) if x != y)
}

#[test]
fn split_parses_validates_and_round_trips() {
    let s = parse(SPLITS);
    let Action::Split { groups } = &s.events[0].action else {
        panic!("{:?}", s.events[0]);
    };
    assert_eq!(groups.len(), 2);
    let text = toml::to_string(&s).unwrap();
    assert_eq!(toml::from_str::<Scenario>(&text).unwrap(), s, "{text}");
    let base = "name = \"x\"\nnodes = 5\n[[events]]\nat = \"1s\"\naction = \"split\"\n";
    for (text, want) in [
        ("groups = [[\"n0\", \"n1\"]]", "at least two groups"),
        ("groups = [[\"n0\"], []]", "at least two groups"),
        (
            "groups = [[\"n0\", \"n1\"], [\"n1..=n2\"]]",
            "n1 is in more than one group",
        ),
        (
            "groups = [[\"n0\"], [\"n5\"]]",
            "names n5, but there are 5 nodes",
        ),
        ("", "missing field `groups`"),
    ] {
        let err = error_of(&format!("{base}{text}"));
        assert!(err.contains(want), "{text:?}:\n  {err}\n  wanted {want:?}");
    }
}

#[test]
fn both_engines_keep_the_groups_apart_replace_a_split_and_heal() {
    let s = parse(SPLITS);
    for engine in [Engine::Des, Engine::Turmoil] {
        let lines = trace(&s, 3, engine);
        let partitions: Vec<(u64, &Vec<Vec<String>>)> = lines
            .iter()
            .filter_map(|l| match &l.record {
                Record::Partition { groups } => Some((l.t, groups)),
                _ => None,
            })
            .collect();
        let strings = |g: &[&[&str]]| -> Vec<Vec<String>> {
            g.iter()
                .map(|g| g.iter().map(|n| n.to_string()).collect())
                .collect()
        };
        assert_eq!(
            partitions,
            vec![
                (20_000, &strings(&[&["n0", "n4"], &["n1", "n2", "n3"]])),
                (40_000, &strings(&[&["n0", "n3", "n4"], &["n1", "n2"]])),
            ],
            "{engine:?}"
        );
        let mut downs = Vec::new();
        let mut ups = Vec::new();
        for l in &lines {
            let Record::Step { node, event, .. } = &l.record else {
                continue;
            };
            let (t, kind) = (l.t, event["kind"].as_str().unwrap_or_default());
            match kind {
                "message" => {
                    let from = event["from"].as_str().unwrap();
                    // Turmoil hands over what arrived by the tick before the cut.
                    assert!(
                        !apart(t, node, from) || !apart(t.saturating_sub(50), node, from),
                        "{engine:?}: {node} heard {from} at {t}"
                    );
                }
                "peer_down" => downs.push((t, node.clone(), event["peer"].as_str().unwrap())),
                "peer_up" if t > 0 => ups.push((t, node.clone(), event["peer"].as_str().unwrap())),
                _ => {}
            }
        }
        // Each pair newly apart loses its connection at both ends, when it is split.
        let mut want_downs = Vec::new();
        for (t, pairs) in [
            (20_000, &[("n0", "n1"), ("n0", "n2"), ("n0", "n3")][..]),
            (20_000, &[("n1", "n4"), ("n2", "n4"), ("n3", "n4")][..]),
            (40_000, &[("n1", "n3"), ("n2", "n3")][..]),
        ] {
            for (a, b) in pairs {
                want_downs.push((t, a.to_string(), *b));
                want_downs.push((t, b.to_string(), *a));
            }
        }
        let by_pair = |v: &mut Vec<(u64, String, &str)>| {
            v.sort_by(|x, y| (x.0, &x.1, x.2).cmp(&(y.0, &y.1, y.2)));
        };
        by_pair(&mut want_downs);
        let mut got_downs: Vec<(u64, String, &str)> = downs
            .iter()
            .map(|(t, n, p)| (*t / 1_000 * 1_000, n.clone(), *p))
            .collect();
        by_pair(&mut got_downs);
        assert_eq!(got_downs, want_downs, "{engine:?}");
        // Pairs no longer apart connect again: n3 with n0 and n4 at the second split, the rest
        // at the heal.
        let mut got_ups: Vec<(u64, String, &str)> = ups
            .iter()
            .map(|(t, n, p)| (*t / 1_000 * 1_000, n.clone(), *p))
            .collect();
        by_pair(&mut got_ups);
        let mut want_ups = Vec::new();
        for (t, pairs) in [
            (40_000, &[("n0", "n3"), ("n3", "n4")][..]),
            (
                60_000,
                &[
                    ("n0", "n1"),
                    ("n0", "n2"),
                    ("n1", "n4"),
                    ("n2", "n4"),
                    ("n1", "n3"),
                    ("n2", "n3"),
                ][..],
            ),
        ] {
            for (a, b) in pairs {
                want_ups.push((t, a.to_string(), *b));
                want_ups.push((t, b.to_string(), *a));
            }
        }
        by_pair(&mut want_ups);
        assert_eq!(got_ups, want_ups, "{engine:?}");
    }
}
