//! Membership changes in scenarios (issue 10): the `add` and `remove` actions on both engines,
//! and the trace records of electorate changes.

use chorus_core::{ChangeOutcome, MemberChange};
use chorus_sim::run::{run_to_bytes, Engine};
use chorus_sim::scenario::Scenario;
use chorus_sim::trace::{read, Line, Record};

fn parse(text: &str) -> Scenario {
    let s: Scenario = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    s.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    s
}

fn error_of(text: &str) -> String {
    match toml::from_str::<Scenario>(text) {
        Err(e) => e.to_string(),
        Ok(s) => s
            .validate()
            .err()
            .unwrap_or_else(|| panic!("accepted:\n{text}")),
    }
}

fn lines(s: &Scenario, seed: u64, engine: Engine) -> Vec<Line> {
    let (bytes, f) = run_to_bytes(s, seed, engine, false).unwrap();
    assert!(f.violations.is_empty(), "{engine:?}: {:?}", f.violations);
    read(&String::from_utf8(bytes).unwrap()).unwrap().1
}

/// Every `membership_change` record: (node, change, outcome, request).
fn changes(lines: &[Line]) -> Vec<(String, MemberChange, ChangeOutcome, Option<u64>)> {
    lines
        .iter()
        .filter_map(|l| match &l.record {
            Record::MembershipChange {
                node,
                change,
                outcome,
                request,
            } => Some((node.clone(), change.clone(), outcome.clone(), *request)),
            _ => None,
        })
        .collect()
}

/// The latest electorate each node reported: node → (version, members).
fn electorates(lines: &[Line]) -> std::collections::BTreeMap<String, (u64, Vec<String>)> {
    let mut out = std::collections::BTreeMap::new();
    for l in lines {
        if let Record::ElectorateChanged {
            node,
            version,
            members,
            ..
        } = &l.record
        {
            out.insert(node.clone(), (*version, members.clone()));
        }
    }
    out
}

/// Second-scale timings, autopilot off, so only the actions change the electorate.
const BY_HAND: &str = r#"
name = "by-hand"
nodes = 4
duration_ms = "1m"
bootstrap_expect = 3
late = ["n3"]
[config]
heartbeat_interval_ms = 1000
election_timeout_min_ms = 3000
election_timeout_max_ms = 4500
discovery_timeout_ms = 1500
autopilot = false
[[events]]
at = "10s"
action = "join"
nodes = ["n3"]
[[events]]
at = "20s"
action = "add"
node = "n3"
[[events]]
at = "30s"
action = "remove"
node = "n3"
target = "n3"
[[events]]
at = "40s"
action = "remove"
node = "n3"
"#;

#[test]
fn add_and_remove_parse_round_trip_and_are_validated() {
    let s = parse(BY_HAND);
    let text = toml::to_string(&s).unwrap();
    assert_eq!(toml::from_str::<Scenario>(&text).unwrap(), s, "{text}");
    // The default target (the admin) is left out when written back.
    let header =
        serde_json::to_string(&chorus_sim::trace::Header::new(&s, 1, "des", false)).unwrap();
    assert!(
        header.contains(r#""action":"add","node":"n3"}"#),
        "{header}"
    );
    assert!(
        header.contains(r#""action":"remove","node":"n3","target":"n3"}"#),
        "{header}"
    );
    let base = "name = \"x\"\nnodes = 4\n[[events]]\nat = \"1s\"\n";
    for (text, want) in [
        (
            "action = \"add\"\nnode = \"n1..=n2\"",
            "names one node, not n1..=n2",
        ),
        (
            "action = \"remove\"\nnode = \"n4\"",
            "names n4, but there are 4 nodes",
        ),
        (
            "action = \"add\"\nnode = \"n1\"\ntarget = \"n7\"",
            "names n7, but there are 4 nodes",
        ),
        ("action = \"add\"", "missing field `node`"),
        (
            "action = \"add\"\nnode = \"n1\"\nwho = \"n2\"",
            "unknown field `who`",
        ),
    ] {
        let err = error_of(&format!("{base}{text}"));
        assert!(err.contains(want), "{text:?}:\n  {err}\n  wanted {want:?}");
    }
}

#[test]
fn both_engines_carry_out_add_and_remove_at_the_admin_and_through_a_follower() {
    let s = parse(BY_HAND);
    for engine in [Engine::Des, Engine::Turmoil] {
        let lines = lines(&s, 3, engine);
        let found = changes(&lines);
        let add = MemberChange::Add { node: "n3".into() };
        let remove = MemberChange::Remove { node: "n3".into() };
        let admin = found
            .iter()
            .find(|(_, _, o, r)| *r == Some(1) && matches!(o, ChangeOutcome::Proposed { .. }))
            .map(|(n, ..)| n.clone())
            .unwrap_or_else(|| panic!("{engine:?}: request 1 proposed at the admin: {found:?}"));
        let want = [
            // Asked at the admin: proposed and committed there, as request 1.
            (
                admin.clone(),
                add.clone(),
                ChangeOutcome::Proposed { version: 2 },
                Some(1),
            ),
            (
                admin.clone(),
                add,
                ChangeOutcome::Committed { version: 2 },
                Some(1),
            ),
            // Asked at n3: forwarded; the admin proposes and commits it for n3, whose answer
            // comes back as request 2.
            (
                "n3".into(),
                remove.clone(),
                ChangeOutcome::Forwarded {
                    admin: admin.as_str().into(),
                },
                Some(2),
            ),
            (
                admin.clone(),
                remove.clone(),
                ChangeOutcome::Proposed { version: 3 },
                None,
            ),
            (
                admin.clone(),
                remove.clone(),
                ChangeOutcome::Committed { version: 3 },
                None,
            ),
            (
                "n3".into(),
                remove.clone(),
                ChangeOutcome::Committed { version: 3 },
                Some(2),
            ),
            // n3 is no voter any more.
            (
                admin.clone(),
                remove,
                ChangeOutcome::Refused {
                    reason: chorus_core::ChangeRefusal::NotVoter,
                },
                Some(3),
            ),
        ];
        assert_eq!(found, want, "{engine:?}");
        // Every node ends on version 3, without n3.
        let held = electorates(&lines);
        assert_eq!(held.len(), 4, "{engine:?}: {held:?}");
        for (node, (version, members)) in &held {
            assert_eq!(*version, 3, "{engine:?}: {node}");
            assert_eq!(members, &["n0", "n1", "n2"], "{engine:?}: {node}");
        }
    }
}

#[test]
fn a_request_at_a_node_that_is_down_or_with_no_admin_does_nothing() {
    let s = parse(
        r#"
        name = "nobody"
        nodes = 3
        duration_ms = "20s"
        [config]
        heartbeat_interval_ms = 1000
        election_timeout_min_ms = 3000
        election_timeout_max_ms = 4500
        discovery_timeout_ms = 1500
        [[events]]
        at = "0s"
        action = "remove"
        node = "n1"
        [[events]]
        at = "5s"
        action = "crash"
        target = "n2"
        [[events]]
        at = "6s"
        action = "add"
        node = "n0"
        target = "n2"
        "#,
    );
    for engine in [Engine::Des, Engine::Turmoil] {
        assert_eq!(changes(&lines(&s, 1, engine)), vec![], "{engine:?}");
    }
}
