//! Snapshot logs: condensed traces of fixed-seed runs on both engines, kept under the top-level
//! `snapshots/`. When behaviour drifts these fail; accept a deliberate change with
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test -p chorus-sim --test suite snapshots::`).

use chorus_sim::run::{run_to_bytes, Engine};
use chorus_sim::scenario::Scenario;

/// The trace without the header's full scenario spec (the header still names seed, scenario,
/// engine and nodes), as text.
fn condensed(name: &str, seed: u64, engine: Engine, minutes: u64) -> String {
    let mut s = Scenario::load(name).unwrap();
    s.duration_ms = minutes * 60_000;
    let (bytes, f) = run_to_bytes(&s, seed, engine, false).unwrap();
    assert!(
        f.violations.is_empty(),
        "{name} seed {seed}: {:?}",
        f.violations
    );
    let text = String::from_utf8(bytes).unwrap();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 {
            let h: serde_json::Value = serde_json::from_str(line).unwrap();
            out.push_str(&format!(
                "# {} seed {} engine {} nodes {} duration {} ms\n",
                h["scenario"].as_str().unwrap(),
                h["seed"],
                h["engine"].as_str().unwrap(),
                h["nodes"],
                h["duration_ms"]
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

macro_rules! snapshot {
    ($test:ident, $scenario:expr, $seed:expr, $engine:expr, $minutes:expr) => {
        #[test]
        fn $test() {
            let text = condensed($scenario, $seed, $engine, $minutes);
            insta::with_settings!({
                snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots"),
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(stringify!($test), text);
            });
        }
    };
}

snapshot!(des_steady_seed1, "steady", 1, Engine::Des, 3);
snapshot!(des_partition_seed7, "partition", 7, Engine::Des, 5);
snapshot!(des_admin_crash_seed3, "admin-crash", 3, Engine::Des, 4);
snapshot!(des_storm_seed2, "storm", 2, Engine::Des, 4);
// Tasks (issue 11): the first minute of `tasks` — submissions, placements, runs of every
// outcome, results — through the admin's crash at 30 s.
snapshot!(des_tasks_seed1, "tasks", 1, Engine::Des, 1);
snapshot!(turmoil_steady_seed1, "steady", 1, Engine::Turmoil, 3);
snapshot!(turmoil_partition_seed7, "partition", 7, Engine::Turmoil, 5);
snapshot!(
    turmoil_admin_crash_seed3,
    "admin-crash",
    3,
    Engine::Turmoil,
    4
);
