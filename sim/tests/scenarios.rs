//! The built-in scenarios as the simulator reads them, pinned: a built-in that moves (from a
//! string in the code to a file under `sim/scenarios/`, say) must stay the same scenario, field
//! for field — the JSON here is what a trace header's `spec` holds and `replay` re-runs; and
//! `chorus-sim scenarios --show NAME` prints one as its file.

use chorus_sim::scenario::{builtin, BUILTINS};

#[test]
fn every_builtin_is_pinned() {
    let mut out = String::new();
    for name in BUILTINS {
        let s = builtin(name).unwrap();
        out.push_str(&format!("{name}: {}\n", serde_json::to_string(&s).unwrap()));
    }
    insta::assert_snapshot!(out);
}

/// `chorus-sim scenarios --show NAME` prints the built-in's file as written, which parses to
/// the built-in itself; an unknown name is an error naming the built-ins.
#[test]
fn show_prints_a_builtin_as_its_file() {
    let sim = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_chorus-sim"))
            .args(args)
            .output()
            .unwrap()
    };
    for name in ["late-voters", "tasks"] {
        let out = sim(&["scenarios", "--show", name]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let file = format!("{}/scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"));
        assert_eq!(text, std::fs::read_to_string(file).unwrap());
        let parsed: chorus_sim::scenario::Scenario = toml::from_str(&text).unwrap();
        assert_eq!(parsed, builtin(name).unwrap());
    }
    let out = sim(&["scenarios", "--show", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no built-in scenario \"nope\""), "{err}");
}
